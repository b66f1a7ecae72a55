/*
 * ernie4_5_moe.c — ERNIE 4.5 MoE (model_type ernie4_5_moe: baidu/ERNIE-4.5-21B-A3B-PT, ERNIE-4.5-300B-A47B-PT):
 * Llama-style GQA attention with RoPE on adjacent pairs (rotate_half over x[0::2] / x[1::2], cos and sin of pair i
 * repeated: SL rope_interleave), layers from moe_layer_start_index to moe_layer_end_index every moe_layer_interval a
 * MoE, the others dense SwiGLU MLPs of intermediate_size. The router (Ernie4_5_MoeTopKRouter): softmax over every
 * expert in f32, the top-k of softmax + e_score_correction_bias (moe_statics, stored [1, E]), weighted by their
 * softmax divided by max(sum, moe_norm_min) (SL_ROUTER_SOFTMAX_BIAS); beside the routed experts
 * moe_num_shared_experts ungated shared ones as one MLP of moe_intermediate_size * moe_num_shared_experts.
 * transformers' src/transformers/models/ernie4_5_moe/modeling_ernie4_5_moe.py and configuration_ernie4_5_moe.py
 * (moe_k, moe_num_experts: config.json's names). use_bias = true and the multi-token-prediction layers are not read.
 */
#include <math.h>

#include "family/arch/common.h"

static void config(hfc *c, fam_config *o) {
    o->moe_inter = hfc_int(c, "moe_intermediate_size", 1, 0);
    o->norm_topk = 1;
    o->rope_interleave = 1;
    o->shared_inter = hfc_product(c, "moe_num_shared_experts", hfc_int(c, "moe_num_shared_experts", 0, 0), o->moe_inter);
    if (hfc_bool(c, "use_bias", 0)) hfc_fail(c, SL_EUNSUPPORTED, "use_bias = true is not supported");
    double norm_min = hfc_num(c, "moe_norm_min", 1e-12, NULL);
    if (norm_min != 1e-12) hfc_fail(c, SL_EUNSUPPORTED, "moe_norm_min %g (only 1e-12, the releases')", norm_min);
    if (o->n_experts > SL_ROUTER_MAX_EXPERTS)
        hfc_fail(c, SL_ECONFIG, "%d experts (at most %d)", o->n_experts, SL_ROUTER_MAX_EXPERTS);
    int start = hfc_int(c, "moe_layer_start_index", 0, 1), end = hfc_int(c, "moe_layer_end_index", 0, -1);
    int step = hfc_int(c, "moe_layer_interval", 0, 1), dense = 0;
    if (end == -1) end = o->n_layers - 1;
    if (step < 1) hfc_fail(c, SL_ECONFIG, "moe_layer_interval %d (must be >= 1)", step);
    for (int i = 0; i < o->n_layers; i++) {
        o->layer_moe[i] = step > 0 && (i + 1) % step == 0 && i >= start && i <= end;
        dense |= !o->layer_moe[i];
    }
    if (dense) o->dense_inter = hfc_int(c, "intermediate_size", 1, 0);
}

static const arch_tdef tensors[] = {
    T_EMBED,
    T_IN_NORM, T_ATTN_QKVO, T_POST_NORM, T_ROUTER,
    {"mlp.moe_statics.e_score_correction_bias", NULL, AW_MOE, AD_E, AD_NONE, AK_VEC, LW(router_bias), AR_BACKBONE, "exp_probs_b.bias"},
    {"mlp.shared_experts.gate_proj", NULL, AW_SHARED, AD_IS, AD_H, AK_MAT, LW(sh_gate), AR_BACKBONE, "ffn_gate_shexp.weight"},
    {"mlp.shared_experts.up_proj", NULL, AW_SHARED, AD_IS, AD_H, AK_MAT, LW(sh_up), AR_BACKBONE, "ffn_up_shexp.weight"},
    {"mlp.shared_experts.down_proj", NULL, AW_SHARED, AD_H, AD_IS, AK_MAT, LW(sh_down), AR_BACKBONE, "ffn_down_shexp.weight"},
    T_DENSE_MLP,
    T_HEAD,
};

/* transformers keeps the bias at mlp.gate.moe_statics (conversion_mapping.py "ernie4_5_moe"); the release at mlp. */
static const char *const renames[] = {"mlp.gate.moe_statics.", "mlp.moe_statics.", NULL};

/* baidu/ERNIE-4.5-21B-A3B-PT config.json: 28 layers (the first dense, 12288 wide), hidden 2560, 20 heads (4 KV) of
 * 128, 64 experts of 1536 top-6 and two shared, vocab 103424, tied embeddings, rope_theta 5e5: 21.8B parameters
 * (Hugging Face's count; the card's "21B"). */
static const arch_shape shapes[] = {
    {"ernie-4.5-21b-a3b", 103424, 2560, 28, 20, 4, 128, 64, 6, 1536, 3072, 0, 0, 0, 0, 0, 131072, 5e5, 1.0, 1, 0,
     12288, 1, 0, 0, 0.0, 0, 0, 0.0, 0, 21.8e9},
};

static void shape_config(const arch_shape *sh, fam_config *c) {
    (void)sh;
    c->tie_embeddings = 1;
    c->rope_interleave = 1;
}

/* GGUF (llama.cpp ernie4_5-moe: conversion/ernie.py Ernie4_5MoeModel): expert_feed_forward_length, the dense width,
 * expert_shared_count, leading_dense_block_count (moe_layer_start_index), interleave_moe_layer_step; the bias as
 * exp_probs_b. llama.cpp rotates adjacent pairs for this architecture, as transformers does. */
static void gguf_config(ggm *m, arch_gguf_common *g) {
    ggm_set_num(m, "moe_intermediate_size", ggm_moe_inter(m, g));
    if (g->ff_found) ggm_set_num(m, "intermediate_size", g->ff);
    ggm_set_num(m, "moe_num_shared_experts", ggm_num(m, "expert_shared_count", 0, 0, NULL));
    ggm_set_num(m, "moe_layer_start_index", ggm_num(m, "leading_dense_block_count", 0, g->first_dense, NULL));
    ggm_set_num(m, "moe_layer_interval", ggm_num(m, "interleave_moe_layer_step", 0, 1, NULL));
}

static const char *const hf_types[] = {"ernie4_5_moe", NULL};

const arch_desc arch_ernie4_5_moe = {
    .id = SL_ARCH_ERNIE4_5_MOE, .name = "ernie4_5_moe", .hf_types = hf_types,
    .router = SL_ROUTER_SOFTMAX_BIAS, .qk_norm = SL_QK_NORM_NONE, .prf_default = 1.0,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_swiglu_parts, .renames = renames,
    .shapes = shapes, .n_shapes = N_OF(shapes), .shape_config = shape_config,
    .gguf_arch = "ernie4_5-moe", .gguf_config = gguf_config,
};
