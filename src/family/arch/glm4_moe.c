/*
 * glm4_moe.c — GLM-4.5 / GLM-4.6 / GLM-4.5-Air (model_type glm4_moe): Llama-style attention with q/k/v biases
 * (attention_bias; o_proj has none), optional per-head q/k RMSNorm (use_qk_norm), partial NeoX RoPE (rotate-half
 * on the first head_dim * partial_rotary_factor dims, default 0.5); the first first_k_dense_replace layers are
 * dense SwiGLU MLPs (intermediate_size), the rest MoE: routed SwiGLU experts chosen by the sigmoid group router
 * (SL_ROUTER_SIGMOID_GROUP: e_score_correction_bias for the choice only, n_group / topk_group,
 * routed_scaling_factor) plus an ungated shared MLP of moe_intermediate_size * n_shared_experts
 * (mlp.shared_experts.*). transformers' modeling_glm4_moe.py (Glm4MoeTopkRouter, Glm4MoeMoE). The released
 * checkpoints' multi-token-prediction layer (layers.num_hidden_layers, num_nextn_predict_layers) is not read.
 */
#include "family/arch/common.h"

static void config(hfc *c, fam_config *o) {
    o->moe_inter = hfc_int(c, "moe_intermediate_size", 1, 0);
    o->norm_topk = hfc_bool(c, "norm_topk_prob", 1);
    o->shared_inter = hfc_product(c, "n_shared_experts", hfc_int(c, "n_shared_experts", 0, 1), o->moe_inter);
    o->attn_bias = hfc_bool(c, "attention_bias", 0);
    o->qk_norm = hfc_bool(c, "use_qk_norm", 0) ? SL_QK_NORM_HEAD : SL_QK_NORM_NONE;
    arch_group_moe_config(c, o, 1);
}

static const arch_tdef tensors[] = {
    T_EMBED,
    T_IN_NORM, T_ATTN_QKVO,
    T_ATTN_QKV_BIAS,
    {"self_attn.q_norm", NULL, AW_QK_NORM, AD_HD, AD_NONE, AK_VEC, LW(q_norm), AR_BACKBONE, "attn_q_norm.weight"},
    {"self_attn.k_norm", NULL, AW_QK_NORM, AD_HD, AD_NONE, AK_VEC, LW(k_norm), AR_BACKBONE, "attn_k_norm.weight"},
    T_POST_NORM_PA,
    T_ROUTER,
    T_GROUP_MOE,
    T_DENSE_MLP,
    T_HEAD,
};

/* zai-org/GLM-4.5-Air and zai-org/GLM-4.5 config.json (GLM-4.6 has GLM-4.5's shape) */
static const arch_shape shapes[] = {
    {"glm-4.5-air", 151552, 4096, 46, 96, 8, 128, 128, 8, 1408, 1408, 0, 0, 0, 0, 0, 131072, 1e6, 0.5, 1, 1, 10944, 1, 1, 1, 1.0, 0, 0, 0.0, 0, 106e9},
    {"glm-4.5", 151552, 5120, 92, 96, 8, 128, 160, 8, 1536, 1536, 0, 0, 0, 0, 0, 131072, 1e6, 0.5, 1, 1, 12288, 3, 1, 1, 2.5, 1, 0, 0.0, 0, 355e9},
};

/* GGUF (llama.cpp glm4moe): the router's keys (expert_shared_count, expert_weights_scale, expert_group_count,
 * expert_group_used_count, leading_dense_block_count); q/k biases and norms by the tensors present; partial
 * rotary 0.5 unless rope.dimension_count says otherwise */
static void gguf_config(ggm *m, arch_gguf_common *g) {
    ggm_set_num(m, "moe_intermediate_size", ggm_moe_inter(m, g));
    if (g->ff_found) ggm_set_num(m, "intermediate_size", g->ff);
    ggm_set_bool(m, "norm_topk_prob", g->wnorm_found ? g->wnorm != 0 : 1);
    ggm_set_num(m, "n_shared_experts", ggm_num(m, "expert_shared_count", 0, 1, NULL));
    ggm_set_num(m, "routed_scaling_factor", ggm_num(m, "expert_weights_scale", 0, 1.0, NULL));
    ggm_set_num(m, "n_group", ggm_num(m, "expert_group_count", 0, 1, NULL));
    ggm_set_num(m, "topk_group", ggm_num(m, "expert_group_used_count", 0, 1, NULL));
    ggm_set_num(m, "first_k_dense_replace", ggm_num(m, "leading_dense_block_count", 0, g->first_dense, NULL));
    ggm_set_bool(m, "attention_bias", g->has_qbias);
    ggm_set_bool(m, "use_qk_norm", g->has_qnorm);
    if (!g->rot_found) ggm_set_num(m, "partial_rotary_factor", 0.5);
}

static const char *const hf_types[] = {"glm4_moe", NULL};

const arch_desc arch_glm4_moe = {
    .id = SL_ARCH_GLM4_MOE, .name = "glm4_moe", .hf_types = hf_types,
    .router = SL_ROUTER_SIGMOID_GROUP, .qk_norm = SL_QK_NORM_NONE, .prf_default = 0.5, .reads_attention_bias = 1,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_swiglu_parts,
    .shapes = shapes, .n_shapes = N_OF(shapes), .gguf_config = gguf_config, .gguf_arch = "glm4moe",
};
