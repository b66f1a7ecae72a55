/*
 * gemma4.c — Gemma 4's text MoE (google/gemma-4-26B-A4B; model_type gemma4, the VLM wrapper, its text model under
 * text_config, or gemma4_text): transformers' src/transformers/models/gemma4/modeling_gemma4.py and
 * configuration_gemma4.py.
 *
 * Attention: layers sliding (sliding_window) or full as layer_types says (default: every sixth full, the last one
 * always). Sliding layers: head_dim, num_key_value_heads, default RoPE (rope_parameters.sliding_attention). Full
 * layers: global_head_dim and, with attention_k_eq_v, num_global_key_value_heads (or per_layer_config.<l>, as
 * transformers writes them back), no v_proj (the values are the raw k projection), proportional RoPE
 * (rope_parameters.full_attention: the first partial_rotary_factor share of the frequencies of global_head_dim,
 * the rest zero). q and k RMSNorm per head, v RMSNorm per head without a weight, softmax scale 1. Sandwich norms:
 * the mixer's output through post_attention_layernorm before the residual, the FFN's input through
 * pre_feedforward_layernorm and its output through post_feedforward_layernorm; each layer's output times
 * layer_scalar. The FFN (enable_moe_block): a GeGLU dense MLP (intermediate_size) on the pre-FFN norm, its output
 * through post_feedforward_layernorm_1, beside GeGLU experts (moe_intermediate_size; experts.gate_up_proj [E, 2I, H],
 * experts.down_proj [E, H, I]) on pre_feedforward_layernorm_2, their sum through post_feedforward_layernorm_2; the
 * router (router.proj) reads the raw residual RMS-normed with router.scale times hidden^-0.5, softmax, top-k
 * (top_k_experts) renormalised, times router.per_expert_scale. Embeddings times sqrt(hidden); final logits
 * tanh-capped (final_logit_softcapping). Norm weights are plain (w, not 1 + w).
 * Not supported (refused): per-layer inputs (hidden_size_per_layer_input, the small E2B / E4B models), KV sharing
 * (num_kv_shared_layers), bidirectional attention "all", a model without the MoE block.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "family/arch/common.h"

/* The layer kinds: layer_types, else Gemma4TextConfig's default (every sixth full), the last layer full. */
static void layer_kinds(hfc *c, fam_config *o) {
    if (hfc_has(c, "layer_types")) {
        hfc_sliding_layers(c, o);
    } else {
        for (int i = 0; i < o->n_layers; i++) o->layer_sliding[i] = (i + 1) % 6 != 0;
        o->sliding_window = hfc_int(c, "sliding_window", 0, 512);
    }
    o->layer_sliding[o->n_layers - 1] = 0; /* configuration_gemma4.py forces it */
}

/* The full layers' dims: per_layer_config.<l> (what transformers writes back), else global_head_dim (default 512)
 * and num_global_key_value_heads (with attention_k_eq_v); every full layer alike. */
static void full_dims(hfc *c, fam_config *o) {
    const double ghd = hfc_num(c, "global_head_dim", 512, NULL);
    const double gkv = o->k_eq_v ? hfc_num(c, "num_global_key_value_heads", o->n_kv_heads, NULL) : o->n_kv_heads;
    int first = 1;
    for (int l = 0; l < o->n_layers; l++) {
        if (o->layer_sliding[l]) continue;
        char p[64];
        snprintf(p, sizeof p, "per_layer_config.%d.head_dim", l);
        const double hd = hfc_path_num(c, p, ghd, NULL);
        snprintf(p, sizeof p, "per_layer_config.%d.num_key_value_heads", l);
        const double kv = hfc_path_num(c, p, gkv, NULL);
        if (!(hd >= 2 && hd <= 1024 && kv >= 1 && kv <= o->n_heads && hd == floor(hd) && kv == floor(kv)))
            hfc_fail(c, SL_ECONFIG, "layer %d: head_dim %g / num_key_value_heads %g out of range", l, hd, kv);
        else if (!first && (hd != o->full_head_dim || kv != o->full_kv_heads))
            hfc_fail(c, SL_EUNSUPPORTED, "full-attention layers with differing head dims are not supported");
        o->full_head_dim = (int)hd;
        o->full_kv_heads = (int)kv;
        first = 0;
    }
    if (o->full_kv_heads > 0 && o->n_heads % o->full_kv_heads)
        hfc_fail(c, SL_ECONFIG, "num_attention_heads is not a multiple of the full layers' KV heads");
}

/* rope_parameters.sliding_attention (default) and .full_attention (proportional, or default: the same with
 * partial_rotary_factor 1). */
static void rope(hfc *c, fam_config *o) {
    const char *st = hfc_path_str(c, "rope_parameters.sliding_attention.rope_type");
    const char *ft = hfc_path_str(c, "rope_parameters.full_attention.rope_type");
    if (st && strcmp(st, "default"))
        hfc_fail(c, SL_EUNSUPPORTED, "sliding layers' rope_type '%s' is not supported", st);
    if (ft && strcmp(ft, "default") && strcmp(ft, "proportional"))
        hfc_fail(c, SL_EUNSUPPORTED, "full layers' rope_type '%s' is not supported", ft);
    o->rope_theta = hfc_path_num(c, "rope_parameters.sliding_attention.rope_theta", 10000.0, NULL);
    o->rot_dim = o->head_dim;
    o->full_rope_theta = hfc_path_num(c, "rope_parameters.full_attention.rope_theta", 1e6, NULL);
    const int prop = !ft || !strcmp(ft, "proportional");
    const double prf = prop ? hfc_path_num(c, "rope_parameters.full_attention.partial_rotary_factor", 1.0, NULL) : 1.0;
    const double factor = hfc_path_num(c, "rope_parameters.full_attention.factor", 1.0, NULL);
    if (!(prf >= 0 && prf <= 1) || factor != 1.0)
        hfc_fail(c, SL_EUNSUPPORTED, "full layers' RoPE: partial_rotary_factor %g in [0, 1] and factor 1 only", prf);
    else
        o->full_rot_dim = 2 * (int)floor(prf * o->full_head_dim / 2); /* int(prf * head_dim // 2) angles */
    if (!(o->rope_theta > 0 && o->full_rope_theta > 0)) hfc_fail(c, SL_ECONFIG, "rope_theta must be positive");
}

static void config(hfc *c, fam_config *o) {
    if (!hfc_bool(c, "enable_moe_block", 0))
        hfc_fail(c, SL_EUNSUPPORTED, "a Gemma 4 model without the MoE block is not a MoE model");
    if (hfc_int(c, "hidden_size_per_layer_input", 0, 0) > 0)
        hfc_fail(c, SL_EUNSUPPORTED, "per-layer inputs (hidden_size_per_layer_input) are not supported");
    if (hfc_int(c, "num_kv_shared_layers", 0, 0) > 0)
        hfc_fail(c, SL_EUNSUPPORTED, "num_kv_shared_layers is not supported");
    const char *bi = hfc_path_str(c, "use_bidirectional_attention");
    if (bi && !strcmp(bi, "all")) hfc_fail(c, SL_EUNSUPPORTED, "use_bidirectional_attention 'all' is not supported");
    const char *act = hfc_path_str(c, "hidden_activation");
    if (act && strcmp(act, "gelu_pytorch_tanh"))
        hfc_fail(c, SL_EUNSUPPORTED, "hidden_activation '%s' is not supported (gelu_pytorch_tanh)", act);
    o->moe_inter = hfc_int(c, "moe_intermediate_size", 1, 0);
    o->dense_inter = hfc_int(c, "intermediate_size", 1, 0);
    o->norm_topk = 1;
    o->k_eq_v = hfc_bool(c, "attention_k_eq_v", 0);
    o->full_rope_prop = 1;
    o->v_norm = o->sandwich_norm = o->ffn_beside = o->dense_act_geglu = 1;
    o->attn_scale = 1.0;
    o->embed_scale = (float)sqrt((double)o->hidden); /* torch.tensor(hidden ** 0.5): float32 */
    o->logit_softcap = hfc_num(c, "final_logit_softcapping", 0, NULL);
    if (!(o->logit_softcap >= 0)) hfc_fail(c, SL_ECONFIG, "final_logit_softcapping must be positive");
    for (int i = 0; i < o->n_layers; i++) o->layer_moe[i] = 1;
    layer_kinds(c, o);
    full_dims(c, o);
    rope(c, o);
}

static const arch_tdef tensors[] = {
    T_EMBED,
    T_IN_NORM,
    {"self_attn.q_proj", NULL, AW_ATTN_STD, AD_Q, AD_H, AK_MAT, LW(q), AR_BACKBONE, "attn_q.weight"},
    {"self_attn.k_proj", NULL, AW_ATTN_STD, AD_KV, AD_H, AK_MAT, LW(k), AR_BACKBONE, "attn_k.weight"},
    {"self_attn.v_proj", NULL, AW_ATTN_STD, AD_KV, AD_H, AK_MAT, LW(v), AR_BACKBONE, "attn_v.weight"},
    {"self_attn.o_proj", NULL, AW_ATTN_STD, AD_H, AD_Q, AK_MAT, LW(o), AR_BACKBONE, "attn_output.weight"},
    {"self_attn.q_norm", NULL, AW_ATTN_STD, AD_HD, AD_NONE, AK_VEC, LW(q_norm), AR_BACKBONE, "attn_q_norm.weight"},
    {"self_attn.k_norm", NULL, AW_ATTN_STD, AD_HD, AD_NONE, AK_VEC, LW(k_norm), AR_BACKBONE, "attn_k_norm.weight"},
    {"self_attn.q_proj", NULL, AW_ATTN_OWN, AD_QOWN, AD_H, AK_MAT, LW(q), AR_BACKBONE, "attn_q.weight"},
    {"self_attn.k_proj", NULL, AW_ATTN_OWN, AD_KVOWN, AD_H, AK_MAT, LW(k), AR_BACKBONE, "attn_k.weight"},
    {"self_attn.v_proj", NULL, AW_V_OWN, AD_KVOWN, AD_H, AK_MAT, LW(v), AR_BACKBONE, "attn_v.weight"},
    {"self_attn.o_proj", NULL, AW_ATTN_OWN, AD_H, AD_QOWN, AK_MAT, LW(o), AR_BACKBONE, "attn_output.weight"},
    {"self_attn.q_norm", NULL, AW_ATTN_OWN, AD_HDOWN, AD_NONE, AK_VEC, LW(q_norm), AR_BACKBONE, "attn_q_norm.weight"},
    {"self_attn.k_norm", NULL, AW_ATTN_OWN, AD_HDOWN, AD_NONE, AK_VEC, LW(k_norm), AR_BACKBONE, "attn_k_norm.weight"},
    {"post_attention_layernorm", NULL, AW_EVERY, AD_H, AD_NONE, AK_VEC, LW(post_attn_norm), AR_BACKBONE, "post_attention_norm.weight"},
    {"pre_feedforward_layernorm", NULL, AW_EVERY, AD_H, AD_NONE, AK_VEC, LW(ffn_norm), AR_BACKBONE, "ffn_norm.weight"},
    {"post_feedforward_layernorm", NULL, AW_EVERY, AD_H, AD_NONE, AK_VEC, LW(post_ffn_norm), AR_BACKBONE, "post_ffw_norm.weight"},
    {"pre_feedforward_layernorm_2", NULL, AW_MOE, AD_H, AD_NONE, AK_VEC, LW(ffn_norm2), AR_BACKBONE, "pre_ffw_norm_2.weight"},
    {"post_feedforward_layernorm_1", NULL, AW_MOE, AD_H, AD_NONE, AK_VEC, LW(post_ffn_norm1), AR_BACKBONE, "post_ffw_norm_1.weight"},
    {"post_feedforward_layernorm_2", NULL, AW_MOE, AD_H, AD_NONE, AK_VEC, LW(post_ffn_norm2), AR_BACKBONE, "post_ffw_norm_2.weight"},
    {"mlp.gate_proj", NULL, AW_EVERY, AD_ID, AD_H, AK_MAT, LW(mlp_gate), AR_BACKBONE, "ffn_gate.weight"},
    {"mlp.up_proj", NULL, AW_EVERY, AD_ID, AD_H, AK_MAT, LW(mlp_up), AR_BACKBONE, "ffn_up.weight"},
    {"mlp.down_proj", NULL, AW_EVERY, AD_H, AD_ID, AK_MAT, LW(mlp_down), AR_BACKBONE, "ffn_down.weight"},
    {"mlp.gate", "router.proj", AW_MOE, AD_E, AD_H, AK_MAT, LW(router), AR_ROUTER, "ffn_gate_inp.weight"},
    {"mlp.gate.scale", "router.scale", AW_MOE, AD_H, AD_NONE, AK_VEC, LW(router_norm), AR_BACKBONE, "ffn_gate_inp.scale"},
    {"mlp.gate.per_expert_scale", "router.per_expert_scale", AW_MOE, AD_E, AD_NONE, AK_VEC, LW(expert_scale), AR_BACKBONE, "ffn_down_exps.scale"},
    {"layer_scalar", NULL, AW_EVERY, AD_ONE, AD_NONE, AK_VEC, LW(layer_scalar), AR_BACKBONE, "layer_output_scale.weight"},
    T_HEAD,
};

/* the fused experts' on-disk names (experts.gate_up_proj, experts.down_proj) under the canonical mlp. prefix */
static const char *const renames[] = {"experts.", "mlp.experts.", NULL};

static const char *const hf_types[] = {"gemma4", "gemma4_text", NULL};

static void shape_config(const arch_shape *sh, fam_config *c) {
    (void)sh;
    c->full_head_dim = 512;
    c->full_kv_heads = 2;
    c->full_rot_dim = 128;
    c->full_rope_prop = 1;
    c->tie_embeddings = 1;
    c->k_eq_v = c->v_norm = c->sandwich_norm = c->ffn_beside = c->dense_act_geglu = 1;
    c->full_rope_theta = 1e6;
    c->attn_scale = 1.0;
    c->embed_scale = (float)sqrt((double)c->hidden);
    c->logit_softcap = 30.0;
    for (int l = 0; l < c->n_layers; l++) c->layer_sliding[l] = (l + 1) % 6 != 0;
    c->sliding_window = 1024;
}

/* google/gemma-4-26B-A4B: 30 layers (25 sliding of window 1024, 5 full), hidden 2816, 16 heads of 256 over 8 KV
 * heads (full layers: 512, 2 KV heads, keys as values), a dense GeGLU MLP of 2112 beside 128 experts of 704 (top
 * 8), vocab 262144 (tied). The model card: 25.2B total, 3.8B active, with a vision encoder of ~550M (its
 * architecture notes), which the text table leaves out: 24.65B of text weights. */
static const arch_shape shapes[] = {
    {"gemma-4-26B-A4B", 262144, 2816, 30, 16, 8, 256, 128, 8, 704, 0, 0, 0, 0, 0, 0, 262144, 10000, 1.0, 1, 0,
     2112, 0, 0, 0, 0.0, 0, 1024, 0.0, 0, 24.65e9},
};

/* ---- GGUF (llama.cpp gemma4: convert_hf_to_gguf.py conversion/gemma.py Gemma4Model, src/models/gemma4.cpp) ----
 * Layer kinds from attention.sliding_window_pattern; key_length (value_length) the full layers' head dim and
 * key_length_swa the sliding ones'; head_count_kv per layer; keys as values where a full layer has no attn_v; the
 * sliding layers' RoPE freq_base_swa over rope.dimension_count_swa dims, the full layers' freq_base with rope_freqs,
 * factors 1 for the rotated pairs and 1e30 (no rotation) for the rest: what transformers' proportional RoPE with
 * partial_rotary_factor = rotated pairs * 2 / head dim computes (the converter writes that tensor from it). The
 * experts' gate_up_proj stays fused (ffn_gate_up_exps, import/hf_gguf.c); router.scale as ffn_gate_inp.scale and
 * per_expert_scale as ffn_down_exps.scale; norms plain (the converter's Gemma 4 norm shift is 0). */
static void gguf_kv_heads(ggm *m, arch_gguf_common *g, const double *swa) {
    double kvh[SL_MAX_LAYERS];
    int kv[2] = {0, 0}, full = -1; /* [sliding, full] */
    if (!ggm_layer_nums(m, "attention.head_count_kv", g->n_layers, kvh)) {
        ggm_fail(m, SL_ECONFIG, "missing metadata key 'gemma4.attention.head_count_kv'");
        return;
    }
    for (int l = 0; l < g->n_layers; l++) {
        int s = swa[l] != 0;
        if (!s && full < 0) full = l;
        if (kv[!s] && kv[!s] != (int)kvh[l])
            ggm_fail(m, SL_EUNSUPPORTED, "%s layers with differing KV head counts are not supported", s ? "sliding" : "full");
        kv[!s] = (int)kvh[l];
    }
    g->check_kv_heads = 0;
    ggm_set_num(m, "num_key_value_heads", kv[0] ? kv[0] : kv[1]);
    const int k_eq_v = full >= 0 && !ggm_has(m, full, "attn_v.weight");
    ggm_set_bool(m, "attention_k_eq_v", k_eq_v);
    if (k_eq_v) ggm_set_num(m, "num_global_key_value_heads", kv[1]);
    else if (kv[0] && kv[1] && kv[0] != kv[1])
        ggm_fail(m, SL_EUNSUPPORTED, "full layers with values (attn_v) and KV heads of their own are not supported");
}

/* rope_freqs (full layers): the leading factors 1 rotate, the 1e30 after them do not. */
static void gguf_rope(ggm *m, int hd_swa, int hd_full) {
    float ff[512];
    const int64_t n = ggm_ne(m, -1, "rope_freqs.weight", 0);
    ggm_set_str(m, "rope_parameters.sliding_attention.rope_type", "default");
    ggm_set_num(m, "rope_parameters.sliding_attention.rope_theta", ggm_num(m, "rope.freq_base_swa", 0, 10000.0, NULL));
    ggm_set_num(m, "rope_parameters.full_attention.rope_theta", ggm_num(m, "rope.freq_base", 0, 1e6, NULL));
    if (ggm_count(m, "rope.dimension_count_swa", 0, hd_swa, NULL) != hd_swa ||
        ggm_count(m, "rope.dimension_count", 0, hd_full, NULL) != hd_full)
        ggm_fail(m, SL_EUNSUPPORTED, "rope.dimension_count(_swa) other than the head dims is not supported");
    if (n == 0) { /* no factors: every pair rotates */
        ggm_set_str(m, "rope_parameters.full_attention.rope_type", "default");
        return;
    }
    if (n != hd_full / 2 || n > (int64_t)(sizeof ff / sizeof *ff)) {
        ggm_fail(m, SL_EFORMAT, "tensor 'rope_freqs.weight' has %lld factors; the full layers' head dim %d needs %d",
                 (long long)n, hd_full, hd_full / 2);
        return;
    }
    if (!ggm_f32(m, -1, "rope_freqs.weight", ff, n)) return;
    int rot = 0;
    while (rot < n && ff[rot] == 1.0f) rot++;
    for (int64_t i = rot; i < n; i++)
        if (!(ff[i] >= 1e29f))
            ggm_fail(m, SL_EUNSUPPORTED, "rope_freqs factor %lld is %g: only 1 (rotated) then 1e30 (not) are supported",
                     (long long)i, (double)ff[i]);
    ggm_set_str(m, "rope_parameters.full_attention.rope_type", "proportional");
    ggm_set_num(m, "rope_parameters.full_attention.partial_rotary_factor", 2.0 * rot / hd_full);
}

static void gguf_config(ggm *m, arch_gguf_common *g) {
    static const char *const kinds[] = {"full_attention", "sliding_attention"};
    const char *types[SL_MAX_LAYERS];
    double swa[SL_MAX_LAYERS];
    int any_swa = 0;
    ggm_set_str(m, "model_type", "gemma4_text"); /* the text model's fields at the root */
    if (!ggm_layer_nums(m, "attention.sliding_window_pattern", g->n_layers, swa))
        for (int l = 0; l < g->n_layers; l++) swa[l] = 0;
    for (int l = 0; l < g->n_layers; l++) types[l] = kinds[swa[l] != 0], any_swa |= swa[l] != 0;
    ggm_set_strs(m, "layer_types", types, g->n_layers);
    if (any_swa) ggm_set_num(m, "sliding_window", ggm_count(m, "attention.sliding_window", 1, 0, NULL));
    const int hd_full = g->head_dim, hd_swa = ggm_count(m, "attention.key_length_swa", 0, hd_full, NULL);
    if (g->value_length != hd_full || ggm_count(m, "attention.value_length_swa", 0, hd_swa, NULL) != hd_swa)
        ggm_fail(m, SL_EUNSUPPORTED, "value_length(_swa) other than key_length(_swa) is not supported");
    g->check_value_length = 0;
    ggm_set_num(m, "head_dim", hd_swa);
    ggm_set_num(m, "global_head_dim", hd_full);
    gguf_kv_heads(m, g, swa);
    gguf_rope(m, hd_swa, hd_full);
    int found = 0;
    const double cap = ggm_num(m, "final_logit_softcapping", 0, 0, &found);
    if (found) ggm_set_num(m, "final_logit_softcapping", cap);
    ggm_set_bool(m, "enable_moe_block", 1);
    ggm_set_num(m, "moe_intermediate_size", ggm_moe_inter(m, g));
    if (g->ff_found) ggm_set_num(m, "intermediate_size", g->ff);
    ggm_set_num(m, "num_kv_shared_layers", ggm_count(m, "attention.shared_kv_layers", 0, 0, NULL));
    ggm_set_num(m, "hidden_size_per_layer_input", ggm_count(m, "embedding_length_per_layer_input", 0, 0, NULL));
}

const arch_desc arch_gemma4 = {
    .id = SL_ARCH_GEMMA4, .name = "gemma4", .hf_types = hf_types, .text_config_type = "gemma4",
    .router = SL_ROUTER_SOFTMAX_TOPK, .qk_norm = SL_QK_NORM_HEAD, .prf_default = 1.0,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_swiglu_parts, .expert_kind = SL_EXPERT_GEGLU,
    .renames = renames,
    .shapes = shapes, .n_shapes = N_OF(shapes), .shape_config = shape_config,
    .gguf_arch = "gemma4", .gguf_config = gguf_config,
};
