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

static void gguf_config(ggm *m, arch_gguf_common *g) {
    (void)g;
    ggm_fail(m, SL_EUNSUPPORTED, "Llama 4 GGUF files are not imported yet (pack the Hugging Face checkpoint)");
}

const arch_desc arch_llama4 = {
    .id = SL_ARCH_LLAMA4, .name = "llama4", .hf_types = hf_types, .text_config_type = "llama4",
    .router = SL_ROUTER_TOPK_SIGMOID, .qk_norm = SL_QK_NORM_HEAD, .prf_default = 1.0,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = parts, .n_parts = N_OF(parts),
    .expert_kind = SL_EXPERT_SWIGLU_FUSED, .renames = renames,
    .shapes = shapes, .n_shapes = N_OF(shapes), .shape_config = shape_config,
    .gguf_arch = "llama4", .gguf_config = gguf_config,
};
