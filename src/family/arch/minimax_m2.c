/*
 * minimax_m2.c — MiniMax-M2 (model_type minimax_m2: MiniMaxAI/MiniMax-M2, M2.1): Llama-style GQA attention whose
 * q/k RMSNorm runs over the whole projection before the split into heads (q_norm [heads*head_dim], k_norm
 * [kv_heads*head_dim], eps rms_norm_eps), RoPE on the first rotary_dim dims of each head (rotate-half), every layer a
 * MoE of SwiGLU experts of intermediate_size, routed by sigmoid scores: the top-k of score + e_score_correction_bias,
 * weighted by their unbiased scores divided by their sum (SL_ROUTER_SIGMOID_GROUP with one group, no scaling).
 * transformers' src/transformers/models/minimax_m2/modeling_minimax_m2.py (MiniMaxM2TopKRouter, MiniMaxM2Attention)
 * and configuration_minimax_m2.py (rotary_dim into partial_rotary_factor). The release's layout is Mixtral's
 * (block_sparse_moe.gate, block_sparse_moe.experts.E.w1 / w2 / w3) with the bias at
 * block_sparse_moe.e_score_correction_bias (transformers' conversion_mapping.py "minimax_m2").
 */
#include "family/arch/common.h"

static void config(hfc *c, fam_config *o) {
    o->moe_inter = hfc_int(c, "intermediate_size", 1, 0); /* every layer is MoE: the experts' width */
    o->norm_topk = 1;
    o->n_group = o->topk_group = 1;
    o->routed_scale = 1.0;
    if (hfc_has(c, "rotary_dim")) o->rot_dim = hfc_int(c, "rotary_dim", 1, 0); /* the release's spelling */
    if (o->rot_dim < 2 || o->rot_dim > o->head_dim || o->rot_dim % 2)
        hfc_fail(c, SL_ECONFIG, "rotary_dim %d: need an even number in 2..head_dim (%d)", o->rot_dim, o->head_dim);
    if (!hfc_bool(c, "use_qk_norm", 1)) hfc_fail(c, SL_EUNSUPPORTED, "use_qk_norm false (MiniMax-M2 has q/k norms)");
    for (int i = 0; i < o->n_layers; i++) o->layer_moe[i] = 1;
    if (!cfg_groups_ok(o)) hfc_fail(c, SL_ECONFIG, "%d experts, %d per token: not a top-k", o->n_experts, o->n_experts_used);
}

static const arch_tdef tensors[] = {
    T_EMBED,
    T_IN_NORM, T_ATTN_QKVO,
    {"self_attn.q_norm", NULL, AW_ATTN, AD_Q, AD_NONE, AK_VEC, LW(q_norm), AR_BACKBONE, "attn_q_norm.weight"},
    {"self_attn.k_norm", NULL, AW_ATTN, AD_KV, AD_NONE, AK_VEC, LW(k_norm), AR_BACKBONE, "attn_k_norm.weight"},
    T_POST_NORM, T_ROUTER,
    {"mlp.e_score_correction_bias", NULL, AW_MOE, AD_E, AD_NONE, AK_VEC, LW(router_bias), AR_BACKBONE, "exp_probs_b.bias"},
    T_HEAD,
};

static const char *const renames[] = {"block_sparse_moe.", "mlp.", NULL};

/* MiniMaxAI/MiniMax-M2 config.json: 62 layers, hidden 3072, 48 heads (8 KV) of 128, rotary_dim 64, 256 experts of
 * 1536 top-8, vocab 200064, rope_theta 5e6: 230B parameters (the model card; 10B active). */
static const arch_shape shapes[] = {
    {"minimax-m2", 200064, 3072, 62, 48, 8, 128, 256, 8, 1536, 0, 0, 0, 0, 0, 0, 196608, 5e6, 0.5, 1, 0, 0, 0, 1, 1, 1.0, 0, 0, 0.0, 0, 230e9},
};

/* GGUF (llama.cpp minimax-m2: conversion/minimax.py MiniMaxM2Model): expert_feed_forward_length, rope.dimension_count
 * (rotary_dim; the common import writes it as partial_rotary_factor), the experts stacked from w1 / w3 / w2, the
 * bias as exp_probs_b. */
static void gguf_config(ggm *m, arch_gguf_common *g) {
    ggm_set_num(m, "intermediate_size", ggm_moe_inter(m, g));
}

static const char *const hf_types[] = {"minimax_m2", NULL};

const arch_desc arch_minimax_m2 = {
    .id = SL_ARCH_MINIMAX_M2, .name = "minimax_m2", .hf_types = hf_types,
    .router = SL_ROUTER_SIGMOID_GROUP, .qk_norm = SL_QK_NORM_ALL, .prf_default = 1.0,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_w13_parts, .renames = renames,
    .shapes = shapes, .n_shapes = N_OF(shapes), .gguf_config = gguf_config, .gguf_arch = "minimax-m2",
};
