/*
 * llama4.c — Llama 4's text model (meta-llama/Llama-4-Scout-17B-16E, Llama-4-Maverick-17B-128E; model_type llama4,
 * the VLM wrapper, its text model under text_config, or llama4_text): transformers'
 * src/transformers/models/llama4/modeling_llama4.py and configuration_llama4.py.
 *
 * Attention: GQA. The RoPE layers (no_rope_layers[l] = 1, default every layer but each no_rope_layer_interval-th)
 * rotate adjacent pairs (the complex product of apply_rotary_emb: config.h rope_interleave), default or llama3 RoPE
 * scaling, then a weightless RMSNorm of q and k per head (use_qk_norm), and attend within chunks of
 * attention_chunk_size positions (layer_types chunked_attention); the other layers (NoPE) have no RoPE and no q/k
 * norm, attend over the whole context, and scale their queries by log1p(floor((pos + 1) / floor_scale)) *
 * attn_scale + 1 (attn_temperature_tuning). The FFN: MoE on moe_layers (default every
 * interleave_moe_layer_step-th), else a dense SwiGLU MLP of intermediate_size_mlp. The MoE: router (feed_forward.
 * router) top-k of the logits, weight the sigmoid of the chosen logit, multiplying the expert's input (config.h
 * moe_scale_input); experts fused and transposed (feed_forward.experts.gate_up_proj [E, H, 2I]: gate columns first,
 * down_proj [E, I, H]: x @ W); plus an ungated shared expert (feed_forward.shared_expert) of intermediate_size.
 * Not supported (refused): attention_chunk_size null (every layer full: RoPE and NoPE layers of one kind), a
 * hidden_act other than silu, attention_bias.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "family/arch/common.h"
#include "family/rope.h"

/* moe_layers (indices), else every interleave_moe_layer_step-th layer (step - 1, 2 step - 1, ...). */
static void moe_layers(hfc *c, fam_config *o) {
    const int step = hfc_int(c, "interleave_moe_layer_step", 0, 1), n = hfc_array_size(c, "moe_layers");
    if (step < 1) hfc_fail(c, SL_ECONFIG, "interleave_moe_layer_step must be >= 1");
    for (int l = 0; l < o->n_layers; l++) o->layer_moe[l] = n < 0 && step >= 1 && (l + 1) % step == 0;
    for (int i = 0; i < n; i++) {
        char p[48];
        snprintf(p, sizeof p, "moe_layers.%d", i);
        const double v = hfc_path_num(c, p, -1, NULL);
        if (v >= 0 && v < o->n_layers && v == floor(v)) o->layer_moe[(int)v] = 1;
        else hfc_fail(c, SL_ECONFIG, "moe_layers[%d] is not a layer index", i);
    }
    int any_dense = 0;
    for (int l = 0; l < o->n_layers; l++) any_dense |= !o->layer_moe[l];
    if (any_dense) o->dense_inter = hfc_int(c, "intermediate_size_mlp", 0, 16384);
}

/* The RoPE layers (no_rope_layers[l] = 1; empty or absent: all but every no_rope_layer_interval-th) into
 * layer_sliding, which are the chunked ones; layer_types, when given, must say the same. */
static void rope_layers(hfc *c, fam_config *o) {
    const int interval = hfc_int(c, "no_rope_layer_interval", 0, 4), n = hfc_array_size(c, "no_rope_layers");
    for (int l = 0; l < o->n_layers; l++) o->layer_sliding[l] = interval < 1 || (l + 1) % interval != 0;
    if (n > 0 && n != o->n_layers) hfc_fail(c, SL_ECONFIG, "no_rope_layers has %d entries, not num_hidden_layers", n);
    for (int l = 0; l < n && l < o->n_layers; l++) {
        char p[48];
        snprintf(p, sizeof p, "no_rope_layers.%d", l);
        o->layer_sliding[l] = hfc_path_num(c, p, 1, NULL) != 0;
    }
    for (int l = 0; l < o->n_layers && hfc_array_size(c, "layer_types") >= 0; l++) {
        char p[48];
        snprintf(p, sizeof p, "layer_types.%d", l);
        const char *t = hfc_path_str(c, p), *want = o->layer_sliding[l] ? "chunked_attention" : "full_attention";
        if (!t || strcmp(t, want))
            hfc_fail(c, SL_EUNSUPPORTED, "layer_types[%d] is not %s (its RoPE layer kind)", l, want);
    }
}

static void config(hfc *c, fam_config *o) {
    const char *act = hfc_path_str(c, "hidden_act");
    if (act && strcmp(act, "silu")) hfc_fail(c, SL_EUNSUPPORTED, "hidden_act '%s' is not supported (silu)", act);
    o->moe_inter = o->shared_inter = hfc_int(c, "intermediate_size", 1, 0);
    moe_layers(c, o);
    const int chunk = hfc_int(c, "attention_chunk_size", 0, 0); /* null: 0 */
    if (chunk < 1) hfc_fail(c, SL_EUNSUPPORTED, "attention_chunk_size null (no chunked layers) is not supported");
    rope_layers(c, o);
    o->attn_chunk = o->sliding_window = chunk;
    o->nope_full = 1;
    o->rope_interleave = 1;
    o->qk_norm = hfc_bool(c, "use_qk_norm", 1) ? SL_QK_NORM_HEAD : SL_QK_NORM_NONE;
    o->qk_norm_after_rope = 1;
    o->moe_scale_input = 1;
    if (hfc_bool(c, "attn_temperature_tuning", 1)) {
        o->attn_floor_scale = hfc_num(c, "floor_scale", 8192, NULL);
        o->attn_temp = hfc_num(c, "attn_scale", 0.1, NULL);
        if (!(o->attn_floor_scale > 0)) hfc_fail(c, SL_ECONFIG, "floor_scale must be positive");
    }
}

static const arch_tdef tensors[] = {
    T_EMBED,
    T_IN_NORM, T_ATTN_QKVO, T_POST_NORM,
    {"mlp.gate", "mlp.router", AW_MOE, AD_E, AD_H, AK_MAT, LW(router), AR_ROUTER, "ffn_gate_inp.weight"},
    {"mlp.shared_expert.gate_proj", NULL, AW_SHARED, AD_IS, AD_H, AK_MAT, LW(sh_gate), AR_BACKBONE, "ffn_gate_shexp.weight"},
    {"mlp.shared_expert.up_proj", NULL, AW_SHARED, AD_IS, AD_H, AK_MAT, LW(sh_up), AR_BACKBONE, "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj", NULL, AW_SHARED, AD_H, AD_IS, AK_MAT, LW(sh_down), AR_BACKBONE, "ffn_down_shexp.weight"},
    T_DENSE_MLP,
    T_HEAD,
};

/* experts.gate_up_proj [E, H, 2I] and experts.down_proj [E, I, H] (x @ W): each expert's slice read transposed */
static const arch_pdef parts[] = {
    {"gate_up_proj", NULL, AD_2I, AD_H, EW(gate_up), AK_MAT, 1, NULL},
    {"down_proj", NULL, AD_H, AD_I, EW(down), AK_MAT, 1, "ffn_down_exps.weight"},
};

static const char *const renames[] = {"feed_forward.", "mlp.", NULL};

/* Llama4Model.modify_tensors: gate_up_proj [E, H, 2I] transposed and split in two halves, the gate's first */
static const arch_gguf_xf gguf_xf[] = {
    {"gate_up_proj", {"ffn_gate_exps.weight", "ffn_up_exps.weight"}, 1, NULL, NULL},
};

static const char *const hf_types[] = {"llama4", "llama4_text", NULL};

static void shape_config(const arch_shape *sh, fam_config *c) {
    for (int l = 0; l < c->n_layers; l++) {
        c->layer_sliding[l] = (l + 1) % 4 != 0;
        c->layer_moe[l] = sh->dense_inter > 0 ? l % 2 == 1 : 1; /* Maverick: interleave_moe_layer_step 2 */
    }
    c->dense_inter = sh->dense_inter;
    c->attn_chunk = c->sliding_window = 8192;
    c->nope_full = c->rope_interleave = c->qk_norm_after_rope = c->moe_scale_input = 1;
    c->qk_norm = SL_QK_NORM_HEAD;
    c->attn_floor_scale = 8192;
    c->attn_temp = 0.1;
}

/* meta-llama/Llama-4-Scout-17B-16E and Llama-4-Maverick-17B-128E text configs: hidden 5120, 48 layers, 40 heads of
 * 128 over 8 KV heads, vocab 202048 (untied), rope_theta 500000, experts of 8192 top 1 plus a shared one of 8192;
 * Scout 16 experts on every layer, Maverick 128 on every other layer (the rest dense of 16384). The model cards:
 * 109B and 400B total (17B active), the vision encoder included (~1B, which the text table leaves out). */
static const arch_shape shapes[] = {
    {"Llama-4-Scout-17B-16E", 202048, 5120, 48, 40, 8, 128, 16, 1, 8192, 8192, 0, 0, 0, 0, 0, 10485760, 500000, 1.0,
     0, 0, 0, 0, 0, 0, 0.0, 0, 0, 0.0, 0, 109e9},
    {"Llama-4-Maverick-17B-128E", 202048, 5120, 48, 40, 8, 128, 128, 1, 8192, 8192, 0, 0, 0, 0, 0, 1048576, 500000,
     1.0, 0, 0, 16384, 0, 0, 0, 0.0, 0, 0, 0.0, 0, 400e9},
};

/* ---- GGUF (llama.cpp llama4: convert_hf_to_gguf.py conversion/llama.py Llama4Model, src/models/llama4.cpp) ----
 * The file keeps little of the text config: llama.cpp's graph fixes the rest, which is what the file means. Every
 * fourth layer (3, 7, ...) is NoPE and attends over the whole context, the others rotate and attend within chunks of
 * 8192 (load_swa_pattern(ml, 4), n_no_rope_layer_step 4; sliding_window 0 would make every layer full, refused as
 * for the checkpoint); temperature tuning floor 8192, scale 0.1; the q/k norm unless the model has 128 experts
 * (Maverick). The MoE layers are those with a router (llama.cpp derives them from interleave_moe_layer_step and
 * loads a file only where both agree). The experts' gate_up_proj comes split and transposed (ffn_gate_exps,
 * ffn_up_exps: joined back, gate rows first), down_proj transposed (ffn_down_exps, read as it is). Llama-3 RoPE
 * scaling comes as rope_freqs (LlamaModel.generate_extra_tensors), read back as rope_parameters (llama3_rope). */

/* llama3 RoPE parameters that give the factors ff[0..n) of rope_freqs (1 for short wavelengths, `factor` for long
 * ones, 1 / ((1 - smooth) / factor + smooth) between, smooth = (L / wavelen - low) / (high - low)): low 1 (every
 * release's); L and high from the blended pairs (two or more: solved; one: high 4, llama3's default), else a
 * whole L between the last kept and the first scaled wavelength. Checked by recomputing the factors. */
static void llama3_rope(ggm *m, const float *ff, int n, double base, int dim) {
    double wl[SL_ROPE_MAX_FREQS], fmax = 1, x[2] = {0, 0}, s[2] = {0, 0}, wl_u = 0, wl_f = INFINITY, L = 0, hf = 4;
    int ns = 0;
    for (int i = 0; i < n; i++) {
        wl[i] = 2 * M_PI / (double)(1.0f / powf((float)base, (float)(2 * i) / (float)dim));
        if (ff[i] > fmax) fmax = ff[i];
    }
    if (fmax == 1) return; /* no scaling */
    for (int i = 0; i < n; i++) {
        if (ff[i] == 1.0f) wl_u = wl[i];
        else if (ff[i] == (float)fmax && wl[i] < wl_f) wl_f = wl[i];
        else if (ff[i] != (float)fmax) {
            const double si = (1 / (double)ff[i] - 1 / fmax) / (1 - 1 / fmax);
            x[ns ? 1 : 0] = 1 / wl[i], s[ns ? 1 : 0] = si, ns++;
        }
    }
    if (ns >= 2) { /* L x - s h = 1 at the first and last blended pair, h = high - 1 */
        const double det = -x[0] * s[1] + x[1] * s[0];
        L = (-s[1] + s[0]) / det, hf = 1 + (x[0] - x[1]) / det;
    } else if (ns == 1) {
        L = (1 + s[0] * (hf - 1)) / x[0];
    } else if (wl_u == 0) { /* every pair scaled */
        L = floor(wl_f / 2);
    } else { /* no pair blended: a smooth range between the last kept pair and the first scaled one */
        L = floor(sqrt(wl_u * (isinf(wl_f) ? 4 * wl_u : wl_f)));
        hf = L > wl_u ? sqrt(L / wl_u) : 0;
    }
    L = floor(L + 0.5);
    for (int i = 0; i < n && L >= 1 && hf > 1; i++) {
        const double sm = (L / wl[i] - 1) / (hf - 1);
        const double want = wl[i] < L / hf ? 1 : wl[i] > L ? fmax : 1 / ((1 - sm) / fmax + sm);
        if (fabs(want - ff[i]) > 1e-4 * want) L = 0;
    }
    if (!(L >= 1 && hf > 1)) {
        ggm_fail(m, SL_EUNSUPPORTED, "rope_freqs are not llama3 RoPE factors (of low_freq_factor 1)");
        return;
    }
    ggm_set_str(m, "rope_parameters.rope_type", "llama3");
    ggm_set_num(m, "rope_parameters.factor", fmax);
    ggm_set_num(m, "rope_parameters.low_freq_factor", 1);
    ggm_set_num(m, "rope_parameters.high_freq_factor", hf);
    ggm_set_num(m, "rope_parameters.original_max_position_embeddings", L);
}

static void gguf_config(ggm *m, arch_gguf_common *g) {
    const char *kinds[SL_MAX_LAYERS];
    double rope[SL_MAX_LAYERS], moe[SL_MAX_LAYERS];
    int found = 0, n_moe = 0;
    const double swa = ggm_num(m, "attention.sliding_window", 0, 8192, &found);
    if (found && swa == 0)
        ggm_fail(m, SL_EUNSUPPORTED, "attention.sliding_window 0 (no chunked layers) is not supported");
    ggm_num(m, "attention.sliding_window_pattern", 0, 0, &found);
    if (found) ggm_fail(m, SL_EUNSUPPORTED, "attention.sliding_window_pattern is not supported (llama.cpp's default only)");
    ggm_set_str(m, "model_type", "llama4_text"); /* the text model's fields at the root */
    for (int l = 0; l < g->n_layers; l++) {
        rope[l] = (l + 1) % 4 != 0;
        kinds[l] = rope[l] ? "chunked_attention" : "full_attention";
        if (ggm_has(m, l, "ffn_gate_inp.weight")) moe[n_moe++] = l;
    }
    ggm_set_strs(m, "layer_types", kinds, g->n_layers);
    ggm_set_nums(m, "no_rope_layers", rope, g->n_layers);
    ggm_set_nums(m, "moe_layers", moe, n_moe);
    ggm_set_num(m, "attention_chunk_size", 8192);
    ggm_set_num(m, "floor_scale", 8192);
    ggm_set_num(m, "attn_scale", 0.1);
    ggm_set_bool(m, "use_qk_norm", ggm_count(m, "expert_count", 1, 0, NULL) != 128);
    ggm_set_num(m, "intermediate_size", ggm_moe_inter(m, g));
    if (g->ff_found) ggm_set_num(m, "intermediate_size_mlp", g->ff);
    const int dim = g->head_dim;
    const int64_t n = ggm_ne(m, -1, "rope_freqs.weight", 0);
    float ff[SL_ROPE_MAX_FREQS];
    if (ggm_count(m, "rope.dimension_count", 0, dim, NULL) != dim)
        ggm_fail(m, SL_EUNSUPPORTED, "rope.dimension_count other than the head dim is not supported");
    if (n > 0 && (n != dim / 2 || n > SL_ROPE_MAX_FREQS))
        ggm_fail(m, SL_EFORMAT, "tensor 'rope_freqs.weight' has %lld factors, not head_dim / 2 = %d", (long long)n, dim / 2);
    else if (n > 0 && ggm_f32(m, -1, "rope_freqs.weight", ff, n))
        llama3_rope(m, ff, (int)n, ggm_num(m, "rope.freq_base", 0, 10000.0, NULL), dim);
}

const arch_desc arch_llama4 = {
    .id = SL_ARCH_LLAMA4, .name = "llama4", .hf_types = hf_types, .text_config_type = "llama4",
    .router = SL_ROUTER_TOPK_SIGMOID, .qk_norm = SL_QK_NORM_HEAD, .prf_default = 1.0,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = parts, .n_parts = N_OF(parts),
    .expert_kind = SL_EXPERT_SWIGLU_FUSED, .renames = renames,
    .shapes = shapes, .n_shapes = N_OF(shapes), .shape_config = shape_config,
    .gguf_arch = "llama4", .gguf_config = gguf_config, .gguf_xf = gguf_xf, .n_gguf_xf = N_OF(gguf_xf),
};
