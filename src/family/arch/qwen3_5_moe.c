/*
 * qwen3_5_moe.c — Qwen3.5 / 3.6 MoE, the text part (Qwen3.5-35B-A3B, ...): Qwen3-Next's blocks with flat
 * DeltaNet input projections (in_proj_qkv, _z, _b, _a), every layer MoE, top-k always renormalised;
 * config under "text_config" of the VLM wrapper (model_type qwen3_5_moe) or flat (qwen3_5_moe_text).
 * The math: docs/MATH.md (Config; Qwen3-Next against Qwen3.5).
 */
#include "family/arch/common.h"

static void config(hfc *c, fam_config *o) {
    arch_qwen_next_config(c, o);
    o->norm_topk = 1; /* the text config has no norm_topk_prob: routing always renormalises */
    for (int i = 0; i < o->n_layers; i++) o->layer_moe[i] = 1;
}

static const arch_tdef tensors[] = {
    T_EMBED,
    T_IN_NORM,
    {"linear_attn.in_proj_qkv", NULL, AW_LINEAR, AD_CQ, AD_H, AK_MAT, LW(qkv), AR_BACKBONE, NULL},
    {"linear_attn.in_proj_z", NULL, AW_LINEAR, AD_NVDV, AD_H, AK_MAT, LW(z), AR_BACKBONE, NULL},
    {"linear_attn.in_proj_b", NULL, AW_LINEAR, AD_NV, AD_H, AK_MAT, LW(b), AR_BACKBONE, NULL},
    {"linear_attn.in_proj_a", NULL, AW_LINEAR, AD_NV, AD_H, AK_MAT, LW(a), AR_BACKBONE, NULL},
    T_DELTANET_TAIL,
    T_ATTN_QKVO, T_QK_NORM_HEAD,
    T_POST_NORM_PA, T_ROUTER, T_SHARED_EXPERT, T_DENSE_MLP,
    T_HEAD,
};

/* ---- GGUF (llama.cpp qwen35moe): convert_hf_to_gguf.py Qwen3_5MoeTextModel (llama.cpp conversion/qwen.py) does
 * what Qwen3-Next's does (1 + w norms, A = -exp(A_log), ssm_dt.bias, squeezed conv1d; qwen3_next.c) and, when
 * there are more value heads than key heads, reorders the value heads from grouped by key head (head g*r + j, r =
 * nv / nk) to tiled (j*nk + g) in every tensor indexed by them (_LinearAttentionVReorderBase): the v rows of
 * in_proj_qkv (attn_qkv) and of conv1d, in_proj_z (attn_gate), in_proj_b / _a (ssm_beta / ssm_alpha), A_log,
 * dt_bias and out_proj's columns (ssm_out). in_proj_* keep their names' shapes. ---- */

/* The GGUF row of HF row o of a tensor whose rows from `base` on are nv value heads of hd rows: HF row
 * base + (g*r + j)*hd + i is GGUF row base + (j*nk + g)*hd + i; -1 when the shape does not fit the config. */
static int64_t v_src(const fam_config *c, int64_t rows, int64_t base, int64_t hd, int64_t o) {
    const int64_t nk = c->lin_nk, nv = c->lin_nv, r = nk > 0 ? nv / nk : 0;
    if (nk < 1 || r * nk != nv || base + nv * hd != rows) return -1;
    if (o < base) return o;
    int64_t w = o - base, h = w / hd, i = w % hd, g = h / r, j = h % r;
    return base + (j * nk + g) * hd + i;
}
static void qkv_rows(const fam_config *c, int64_t rows, int64_t *perm) {
    for (int64_t o = 0; o < rows; o++) perm[o] = v_src(c, rows, 2 * (int64_t)c->lin_nk * c->lin_dk, c->lin_dv, o);
}
static void z_rows(const fam_config *c, int64_t rows, int64_t *perm) {
    for (int64_t o = 0; o < rows; o++) perm[o] = v_src(c, rows, 0, c->lin_dv, o);
}
static void head_rows(const fam_config *c, int64_t rows, int64_t *perm) {
    for (int64_t o = 0; o < rows; o++) perm[o] = v_src(c, rows, 0, 1, o);
}

/* out_proj [hidden][nv*dv]: its columns back from tiled to grouped value heads */
static int64_t out_cols(const fam_config *c, const float *src, float *dst) {
    const int64_t H = c->hidden, n = (int64_t)c->lin_nv * c->lin_dv;
    for (int64_t o = 0; o < n; o++) {
        int64_t p = v_src(c, n, 0, c->lin_dv, o);
        if (p < 0) return 0;
        for (int64_t r = 0; r < H; r++) dst[r * n + o] = src[r * n + p];
    }
    return -1;
}

static const arch_gguf_xf gguf_xf[] = {
    {"linear_attn.in_proj_qkv", {"attn_qkv.weight", NULL}, 0, qkv_rows, NULL},
    {"linear_attn.in_proj_z", {"attn_gate.weight", NULL}, 0, z_rows, NULL},
    {"linear_attn.in_proj_b", {"ssm_beta.weight", NULL}, 0, head_rows, NULL},
    {"linear_attn.in_proj_a", {"ssm_alpha.weight", NULL}, 0, head_rows, NULL},
    {"linear_attn.conv1d", {"ssm_conv1d.weight", NULL}, 0, qkv_rows, NULL},
    {"linear_attn.A_log", {"ssm_a", NULL}, 0, head_rows, arch_gguf_a_log},
    {"linear_attn.dt_bias", {"ssm_dt.bias", NULL}, 0, head_rows, NULL},
    {"linear_attn.out_proj", {"ssm_out.weight", NULL}, 0, NULL, out_cols},
};

/* the metadata is Qwen3-Next's (Qwen3_5MoeTextModel derives from Qwen3NextModel); every layer is MoE, the config
 * the flat text one */
static void gguf_config(ggm *m, arch_gguf_common *g) {
    arch_qwen_next_gguf_config(m, g);
    ggm_set_str(m, "model_type", "qwen3_5_moe_text");
}

/* From the text_config of the released config.json files, huggingface.co/Qwen/<name>/blob/main/config.json:
 * vocab_size, hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, num_experts,
 * num_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size, linear_num_key_heads,
 * linear_num_value_heads, linear_key_head_dim, linear_value_head_dim, full_attention_interval,
 * max_position_embeddings, rope_parameters.rope_theta and partial_rotary_factor.
 *   Qwen3.5-35B-A3B    2048 hidden, 40 layers, 16/2 heads, 256 experts top-8, expert and shared 512, 32 value heads
 *   Qwen3.5-122B-A10B  3072 hidden, 48 layers, 32/2 heads, 256 experts top-8, expert and shared 1024, 64 value heads
 *   Qwen3.5-397B-A17B  4096 hidden, 60 layers, 32/2 heads, 512 experts top-10, expert and shared 1024, 64 value heads
 * all with head_dim 256, 16 key heads, key/value head dims 128, a full-attention layer every 4th, 262144
 * positions, theta 1e7, partial_rotary_factor 0.25. Qwen3.6-35B-A3B (same model_type) has Qwen3.5-35B-A3B's
 * dimensions exactly, so it has no shape of its own. */
static const arch_shape shapes[] = {
    {"qwen3.5-35b-a3b", 248320, 2048, 40, 16, 2, 256, 256, 8, 512, 512, 16, 32, 128, 128, 4, 262144, 1e7, 0.25, 1, 0, 0, 0, 0, 0, 0.0, 0, 0, 0.0, 0, 34.66e9},
    {"qwen3.5-122b-a10b", 248320, 3072, 48, 32, 2, 256, 256, 8, 1024, 1024, 16, 64, 128, 128, 4, 262144, 1e7, 0.25, 1, 0, 0, 0, 0, 0, 0.0, 0, 0, 0.0, 0, 122.1e9},
    {"qwen3.5-397b-a17b", 248320, 4096, 60, 32, 2, 256, 512, 10, 1024, 1024, 16, 64, 128, 128, 4, 262144, 1e7, 0.25, 1, 0, 0, 0, 0, 0, 0.0, 0, 0, 0.0, 0, 397e9},
};

static const char *const hf_types[] = {"qwen3_5_moe", "qwen3_5_moe_text", NULL};

const arch_desc arch_qwen3_5_moe = {
    .id = SL_ARCH_QWEN3_5_MOE, .name = "qwen3_5_moe", .hf_types = hf_types, .text_config_type = "qwen3_5_moe",
    .router = SL_ROUTER_SOFTMAX_TOPK, .qk_norm = SL_QK_NORM_HEAD, .zero_centred_norm = 1, .gated_attn = 1,
    .split_lin_proj = 1, .prf_default = 0.25, .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_swiglu_parts,
    .shapes = shapes, .n_shapes = N_OF(shapes),
    .gguf_arch = "qwen35moe", .gguf_config = gguf_config, .gguf_xf = gguf_xf, .n_gguf_xf = N_OF(gguf_xf),
    .gguf_norms_shifted = 1,
};
