/*
 * qwen3_next.c — Qwen3-Next (Qwen3-Next-80B-A3B): Gated DeltaNet layers with fused, key-head-grouped
 * in_proj_qkvz / in_proj_ba, gated full attention (q_proj [query|gate] per head) with per-head q/k norm
 * and partial RoPE, zero-centred (1 + w) norms, a shared expert with a sigmoid gate, dense layers by
 * mlp_only_layers / decoder_sparse_step. Shared MODELS.md §1.2, §2.1, §3.
 */
#include "model/arch/common.h"

void arch_qwen_next_config(hfc *c, sl_config *o) {
    o->moe_inter = hfc_int(c, "moe_intermediate_size", 1, 0);
    o->shared_inter = hfc_int(c, "shared_expert_intermediate_size", 1, 0);
    o->lin_nk = hfc_int(c, "linear_num_key_heads", 1, 0);
    o->lin_nv = hfc_int(c, "linear_num_value_heads", 1, 0);
    o->lin_dk = hfc_int(c, "linear_key_head_dim", 1, 0);
    o->lin_dv = hfc_int(c, "linear_value_head_dim", 1, 0);
    o->conv_k = hfc_int(c, "linear_conv_kernel_dim", 1, 0);
    hfc_linear_layers(c, o);
}

static void config(hfc *c, sl_config *o) {
    arch_qwen_next_config(c, o);
    o->norm_topk = hfc_bool(c, "norm_topk_prob", 1);
    hfc_sparse_layers(c, o);
}

static const arch_tdef tensors[] = {
    T_EMBED,
    T_IN_NORM,
    {"linear_attn.in_proj_qkvz", NULL, AW_LINEAR, AD_QKVZ, AD_H, AK_MAT, LW(qkvz), AR_BACKBONE, NULL},
    {"linear_attn.in_proj_ba", NULL, AW_LINEAR, AD_2NV, AD_H, AK_MAT, LW(ba), AR_BACKBONE, NULL},
    T_DELTANET_TAIL,
    T_ATTN_QKVO, T_QK_NORM_HEAD,
    T_POST_NORM, T_ROUTER, T_SHARED_EXPERT, T_DENSE_MLP,
    T_HEAD,
};

static const arch_shape shapes[] = {
    {"qwen3-next-80b-a3b", 151936, 2048, 48, 16, 2, 256, 512, 10, 512, 512, 16, 32, 128, 128, 4, 262144, 1e7, 0.25, 1, 0, 0, 0, 0, 0, 0.0, 0, 0, 0.0, 0, 80e9},
    {"tiny", 512, 64, 4, 4, 2, 32, 32, 4, 64, 64, 2, 4, 16, 16, 4, 4096, 1e6, 0.25, 1, 0, 0, 0, 0, 0, 0.0, 0, 0, 0.0, 0, 0},
};

static const char *const hf_types[] = {"qwen3_next", NULL};

const arch_desc arch_qwen3_next = {
    .id = SL_ARCH_QWEN3_NEXT, .name = "qwen3_next", .hf_types = hf_types,
    .router = SL_ROUTER_SOFTMAX_TOPK, .qk_norm = SL_QK_NORM_HEAD, .zero_centred_norm = 1, .gated_attn = 1,
    .prf_default = 0.25, .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_swiglu_parts,
    .shapes = shapes, .n_shapes = N_OF(shapes),
};
