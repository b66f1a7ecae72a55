/*
 * qwen3_5_moe.c — Qwen3.5 / 3.6 MoE, the text part (Qwen3.5-35B-A3B, ...): Qwen3-Next's blocks with flat
 * DeltaNet input projections (in_proj_qkv, _z, _b, _a), every layer MoE, top-k always renormalised;
 * config under "text_config" of the VLM wrapper (model_type qwen3_5_moe) or flat (qwen3_5_moe_text).
 * Shared MODELS.md §1.3, §4.
 */
#include "model/arch/common.h"

static void config(hfc *c, sl_config *o) {
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
    T_POST_NORM, T_ROUTER, T_SHARED_EXPERT, T_DENSE_MLP,
    T_HEAD,
};

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
};
