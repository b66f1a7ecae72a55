/*
 * qwen3_next.c — Qwen3-Next (Qwen3-Next-80B-A3B): Gated DeltaNet layers with fused, key-head-grouped
 * in_proj_qkvz / in_proj_ba, gated full attention (q_proj [query|gate] per head) with per-head q/k norm
 * and partial RoPE, zero-centred (1 + w) norms, a shared expert with a sigmoid gate, dense layers by
 * mlp_only_layers / decoder_sparse_step. The math: docs/MATH.md (Config, Tensors, Gated DeltaNet).
 */
#include <math.h>

#include "family/arch/common.h"

void arch_qwen_next_config(hfc *c, fam_config *o) {
    o->moe_inter = hfc_int(c, "moe_intermediate_size", 1, 0);
    o->shared_inter = hfc_int(c, "shared_expert_intermediate_size", 1, 0);
    o->lin_nk = hfc_int(c, "linear_num_key_heads", 1, 0);
    o->lin_nv = hfc_int(c, "linear_num_value_heads", 1, 0);
    o->lin_dk = hfc_int(c, "linear_key_head_dim", 1, 0);
    o->lin_dv = hfc_int(c, "linear_value_head_dim", 1, 0);
    o->conv_k = hfc_int(c, "linear_conv_kernel_dim", 1, 0);
    hfc_linear_layers(c, o);
}

static void config(hfc *c, fam_config *o) {
    arch_qwen_next_config(c, o);
    o->norm_topk = hfc_bool(c, "norm_topk_prob", 1);
    hfc_sparse_layers(c, o);
}

static const arch_tdef tensors[] = {
    T_EMBED,
    T_IN_NORM,
    {"linear_attn.in_proj_qkvz", NULL, AW_LIN_QKVZ, AD_QKVZ, AD_H, AK_MAT, LW(qkvz), AR_BACKBONE, NULL},
    /* or its halves, each in its own type (qkvz_split: a GGUF whose attn_qkv and attn_gate types differ) */
    {"linear_attn.in_proj_qkv", NULL, AW_LIN_SPLIT, AD_CQ, AD_H, AK_MAT, LW(qkv), AR_BACKBONE, "attn_qkv.weight"},
    {"linear_attn.in_proj_z", NULL, AW_LIN_SPLIT, AD_NVDV, AD_H, AK_MAT, LW(z), AR_BACKBONE, "attn_gate.weight"},
    {"linear_attn.in_proj_ba", NULL, AW_LINEAR, AD_2NV, AD_H, AK_MAT, LW(ba), AR_BACKBONE, "ssm_ba.weight"},
    T_DELTANET_TAIL,
    T_ATTN_QKVO, T_QK_NORM_HEAD,
    T_POST_NORM_PA, T_ROUTER, T_SHARED_EXPERT, T_DENSE_MLP,
    T_HEAD,
};

/* ---- GGUF (llama.cpp qwen3next): convert_hf_to_gguf.py Qwen3NextModel (llama.cpp conversion/qwen.py) adds 1 to
 * every norm weight but linear_attn.norm's (gguf_norms_shifted), writes A = -exp(A_log) (ssm_a), dt_bias as
 * ssm_dt.bias, conv1d squeezed to [channels][kernel], in_proj_ba as it is (ssm_ba), and splits in_proj_qkvz, whose
 * rows are grouped by key head ([q | k | v | z] per key head), into attn_qkv ([all q | all k | all v]) and
 * attn_gate (all z). llama-quantize may give those two different types (Q2_K: Q3_K and Q2_K); the import then
 * sets qkvz_split and keeps each as it is (in_proj_qkv's rows are the conv channels' order q | k | v, in_proj_z's
 * the value heads'), each in its own type, where regrouping them into one tensor would need f32. ---- */

static const char *const LT[2] = {"full_attention", "linear_attention"};

void arch_qwen_next_gguf_config(ggm *m, arch_gguf_common *g) {
    ggm_set_num(m, "moe_intermediate_size", ggm_moe_inter(m, g));
    if (g->ff_found) ggm_set_num(m, "intermediate_size", g->ff);
    int sf = 0;
    double sh = ggm_num(m, "expert_shared_feed_forward_length", 0, 0, &sf);
    if (!sf && ggm_ne(m, g->l_moe, "ffn_gate_shexp.weight", 1) > 0)
        sh = (double)ggm_ne(m, g->l_moe, "ffn_gate_shexp.weight", 1), sf = 1;
    if (!sf) ggm_fail(m, SL_ECONFIG, "missing metadata key '%s.expert_shared_feed_forward_length'", g->arch);
    ggm_set_num(m, "shared_expert_intermediate_size", sh);
    /* llama.cpp renormalises Qwen3-Next's top-k weights */
    ggm_set_bool(m, "norm_topk_prob", g->wnorm_found ? g->wnorm != 0 : 1);
    int nk = ggm_count(m, "ssm.group_count", 1, 0, NULL), nv = ggm_count(m, "ssm.time_step_rank", 1, 0, NULL);
    int inner = ggm_count(m, "ssm.inner_size", 1, 0, NULL);
    ggm_set_num(m, "linear_num_key_heads", nk);
    ggm_set_num(m, "linear_num_value_heads", nv);
    ggm_set_num(m, "linear_key_head_dim", ggm_count(m, "ssm.state_size", 1, 0, NULL));
    ggm_set_num(m, "linear_conv_kernel_dim", ggm_count(m, "ssm.conv_kernel", 1, 0, NULL));
    if (nv < 1 || inner % nv) ggm_fail(m, SL_ECONFIG, "'%s.ssm.inner_size' (%d) is not a multiple of '%s.ssm.time_step_rank' "
                                       "(%d)", g->arch, inner, g->arch, nv);
    ggm_set_num(m, "linear_value_head_dim", nv > 0 ? inner / nv : 0);
    /* which layers are DeltaNet: those with ssm_a */
    const char *types[SL_MAX_LAYERS];
    for (int l = 0; l < g->n_layers; l++) types[l] = LT[ggm_has(m, l, "ssm_a")];
    ggm_set_strs(m, "layer_types", types, g->n_layers);
}

/* A = -exp(A_log) back to A_log: the float x whose -expf(x) is A (the DeltaNet layer computes -expf(A_log),
 * model/deltanet.c), searched next to logf(-A); where no float gives A exactly, the nearest. */
int64_t arch_gguf_a_log(const fam_config *c, const float *src, float *dst) {
    for (int64_t i = 0; i < c->lin_nv; i++) {
        const float y = -src[i];
        if (!(y > 0) || !isfinite(y)) return i;
        float x = logf(y), best = x, u = x, d = x;
        float bd = fabsf(expf(x) - y);
        for (int k = 0; k < 4 && bd > 0; k++) {
            u = nextafterf(u, INFINITY);
            d = nextafterf(d, -INFINITY);
            if (fabsf(expf(u) - y) < bd) bd = fabsf(expf(u) - y), best = u;
            if (fabsf(expf(d) - y) < bd) bd = fabsf(expf(d) - y), best = d;
        }
        dst[i] = best;
    }
    return -1;
}

/* in_proj_qkvz's rows (per key head g: q [dk], k [dk], v [r dv], z [r dv], r = nv / nk) from attn_qkv then
 * attn_gate */
static void qkvz_rows(const fam_config *c, int64_t rows, int64_t *perm) {
    const int64_t nk = c->lin_nk, nv = c->lin_nv, dk = c->lin_dk, dv = c->lin_dv;
    const int64_t r = nk > 0 ? nv / nk : 0, G = 2 * dk + 2 * r * dv;
    for (int64_t o = 0; o < rows; o++) {
        if (nk < 1 || r * nk != nv || G * nk != rows) {
            perm[o] = -1;
            continue;
        }
        int64_t g = o / G, w = o % G;
        perm[o] = w < dk ? g * dk + w
                  : w < 2 * dk ? nk * dk + g * dk + (w - dk)
                  : w < 2 * dk + r * dv ? 2 * nk * dk + g * r * dv + (w - 2 * dk)
                  : 2 * nk * dk + nv * dv + g * r * dv + (w - 2 * dk - r * dv);
    }
}

static const arch_gguf_xf gguf_xf[] = {
    {"linear_attn.in_proj_qkvz", {"attn_qkv.weight", "attn_gate.weight"}, 0, qkvz_rows, NULL},
    {"linear_attn.A_log", {"ssm_a", NULL}, 0, NULL, arch_gguf_a_log},
};

static const arch_shape shapes[] = {
    {"qwen3-next-80b-a3b", 151936, 2048, 48, 16, 2, 256, 512, 10, 512, 512, 16, 32, 128, 128, 4, 262144, 1e7, 0.25, 1, 0, 0, 0, 0, 0, 0.0, 0, 0, 0.0, 0, 80e9},
    {"tiny", 512, 64, 4, 4, 2, 32, 32, 4, 64, 64, 2, 4, 16, 16, 4, 4096, 1e6, 0.25, 1, 0, 0, 0, 0, 0, 0.0, 0, 0, 0.0, 0, 0},
    /* as qwen3_moe's tiny-wide (tests/test_wide.c) */
    {"tiny-wide-next", 512, 256, 4, 4, 2, 64, 8, 2, 192, 192, 2, 4, 64, 64, 4, 4096, 1e6, 0.25, 1, 0, 0, 0, 0, 0, 0.0, 0, 0, 0.0, 0, 0},
};

static const char *const hf_types[] = {"qwen3_next", NULL};

const arch_desc arch_qwen3_next = {
    .id = SL_ARCH_QWEN3_NEXT, .name = "qwen3_next", .hf_types = hf_types,
    .router = SL_ROUTER_SOFTMAX_TOPK, .qk_norm = SL_QK_NORM_HEAD, .zero_centred_norm = 1, .gated_attn = 1,
    .prf_default = 0.25, .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_swiglu_parts,
    .shapes = shapes, .n_shapes = N_OF(shapes),
    .gguf_arch = "qwen3next", .gguf_config = arch_qwen_next_gguf_config, .gguf_xf = gguf_xf,
    .n_gguf_xf = N_OF(gguf_xf), .gguf_norms_shifted = 1,
};
