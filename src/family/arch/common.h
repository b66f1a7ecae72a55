/*
 * common.h — building blocks of the family tables (arch/<family>.c only): the tensor groups most
 * families share, written once. Each macro is a list of arch_tdef initialisers.
 */
#ifndef SL_ARCH_COMMON_H
#define SL_ARCH_COMMON_H

#include <stddef.h>

#include "family/arch.h"
#include "family/weights.h"

#define LW(f) offsetof(fam_layer_w, f)
#define GW(f) offsetof(fam_weights, f)
#define EW(f) offsetof(tn_expert, f)

#define T_EMBED {"embed_tokens", NULL, AW_GLOBAL, AD_V, AD_H, AK_MAT, GW(embed), AR_BACKBONE, "token_embd.weight"}
#define T_HEAD                                                                                       \
    {"norm", NULL, AW_GLOBAL, AD_H, AD_NONE, AK_VEC, GW(final_norm), AR_BACKBONE, "output_norm.weight"},                   \
    {"lm_head", NULL, AW_UNTIED, AD_V, AD_H, AK_MAT, GW(lm_head), AR_BACKBONE, "output.weight"}
#define T_IN_NORM {"input_layernorm", NULL, AW_EVERY, AD_H, AD_NONE, AK_VEC, LW(attn_norm), AR_BACKBONE, "attn_norm.weight"}
#define T_POST_NORM {"post_attention_layernorm", NULL, AW_EVERY, AD_H, AD_NONE, AK_VEC, LW(ffn_norm), AR_BACKBONE, "ffn_norm.weight"}
/* q (QPROJ rows: doubled for gated attention), k, v, o */
#define T_ATTN_QKVO                                                                                  \
    {"self_attn.q_proj", NULL, AW_ATTN, AD_QPROJ, AD_H, AK_MAT, LW(q), AR_BACKBONE, "attn_q.weight"},                 \
    {"self_attn.k_proj", NULL, AW_ATTN, AD_KV, AD_H, AK_MAT, LW(k), AR_BACKBONE, "attn_k.weight"},                    \
    {"self_attn.v_proj", NULL, AW_ATTN, AD_KV, AD_H, AK_MAT, LW(v), AR_BACKBONE, "attn_v.weight"},                    \
    {"self_attn.o_proj", NULL, AW_ATTN, AD_H, AD_Q, AK_MAT, LW(o), AR_BACKBONE, "attn_output.weight"}
/* q/k/v projection biases (where the config's attention bias is on) */
#define T_ATTN_QKV_BIAS                                                                              \
    {"self_attn.q_proj.bias", NULL, AW_ATTN_BIAS, AD_Q, AD_NONE, AK_VEC, LW(q_bias), AR_BACKBONE, "attn_q.bias"},   \
    {"self_attn.k_proj.bias", NULL, AW_ATTN_BIAS, AD_KV, AD_NONE, AK_VEC, LW(k_bias), AR_BACKBONE, "attn_k.bias"},  \
    {"self_attn.v_proj.bias", NULL, AW_ATTN_BIAS, AD_KV, AD_NONE, AK_VEC, LW(v_bias), AR_BACKBONE, "attn_v.bias"}
/* per-head q/k RMSNorm weights [head_dim] */
#define T_QK_NORM_HEAD                                                                               \
    {"self_attn.q_norm", NULL, AW_ATTN, AD_HD, AD_NONE, AK_VEC, LW(q_norm), AR_BACKBONE, "attn_q_norm.weight"},            \
    {"self_attn.k_norm", NULL, AW_ATTN, AD_HD, AD_NONE, AK_VEC, LW(k_norm), AR_BACKBONE, "attn_k_norm.weight"}
#define T_ROUTER {"mlp.gate", NULL, AW_MOE, AD_E, AD_H, AK_MAT, LW(router), AR_ROUTER, "ffn_gate_inp.weight"}
#define T_SHARED_EXPERT                                                                              \
    {"mlp.shared_expert.gate_proj", NULL, AW_SHARED, AD_IS, AD_H, AK_MAT, LW(sh_gate), AR_BACKBONE, "ffn_gate_shexp.weight"}, \
    {"mlp.shared_expert.up_proj", NULL, AW_SHARED, AD_IS, AD_H, AK_MAT, LW(sh_up), AR_BACKBONE, "ffn_up_shexp.weight"},     \
    {"mlp.shared_expert.down_proj", NULL, AW_SHARED, AD_H, AD_IS, AK_MAT, LW(sh_down), AR_BACKBONE, "ffn_down_shexp.weight"}, \
    {"mlp.shared_expert_gate", NULL, AW_SHARED, AD_ONE, AD_H, AK_MAT, LW(sh_expert_gate), AR_ROUTER, "ffn_gate_inp_shexp.weight"}
#define T_DENSE_MLP                                                                                  \
    {"mlp.gate_proj", NULL, AW_DENSE, AD_ID, AD_H, AK_MAT, LW(mlp_gate), AR_BACKBONE, "ffn_gate.weight"},               \
    {"mlp.up_proj", NULL, AW_DENSE, AD_ID, AD_H, AK_MAT, LW(mlp_up), AR_BACKBONE, "ffn_up.weight"},                   \
    {"mlp.down_proj", NULL, AW_DENSE, AD_H, AD_ID, AK_MAT, LW(mlp_down), AR_BACKBONE, "ffn_down.weight"}
/* Gated DeltaNet layer, after the input projections */
/* Gated DeltaNet layer, after the input projections (GGUF: llama.cpp's qwen3next / qwen35moe names; A_log is
 * stored as A = -exp(A_log), read by the family's gguf_xf rule) */
#define T_DELTANET_TAIL                                                                              \
    {"linear_attn.conv1d", NULL, AW_LINEAR, AD_CQ, AD_CONVK, AK_VEC, LW(conv_w), AR_BACKBONE, "ssm_conv1d.weight"}, \
    {"linear_attn.dt_bias", NULL, AW_LINEAR, AD_NV, AD_NONE, AK_VEC, LW(dt_bias), AR_BACKBONE, "ssm_dt.bias"},      \
    {"linear_attn.A_log", NULL, AW_LINEAR, AD_NV, AD_NONE, AK_VEC, LW(A_log), AR_BACKBONE, NULL},          \
    {"linear_attn.norm", NULL, AW_LINEAR, AD_DV, AD_NONE, AK_VEC, LW(lin_norm), AR_BACKBONE, "ssm_norm.weight"},    \
    {"linear_attn.out_proj", NULL, AW_LINEAR, AD_H, AD_NVDV, AK_MAT, LW(lin_out), AR_BACKBONE, "ssm_out.weight"}
/* the post-attention norm as llama.cpp names it for Qwen3-Next, Qwen3.5, GLM-4.5 and gpt-oss (gguf-py
 * tensor_mapping.py ATTN_POST_NORM) */
#define T_POST_NORM_PA {"post_attention_layernorm", NULL, AW_EVERY, AD_H, AD_NONE, AK_VEC, LW(ffn_norm), AR_BACKBONE, "post_attention_norm.weight"}

/* DeepSeek-V3's MoE block (also GLM-4.5, dots.llm1): the router's score-correction bias, an ungated shared MLP */
#define T_GROUP_MOE                                                                                  \
    {"mlp.gate.e_score_correction_bias", NULL, AW_MOE, AD_E, AD_NONE, AK_VEC, LW(router_bias), AR_BACKBONE, "exp_probs_b.bias"}, \
    {"mlp.shared_experts.gate_proj", NULL, AW_SHARED, AD_IS, AD_H, AK_MAT, LW(sh_gate), AR_BACKBONE, "ffn_gate_shexp.weight"}, \
    {"mlp.shared_experts.up_proj", NULL, AW_SHARED, AD_IS, AD_H, AK_MAT, LW(sh_up), AR_BACKBONE, "ffn_up_shexp.weight"},     \
    {"mlp.shared_experts.down_proj", NULL, AW_SHARED, AD_H, AD_IS, AK_MAT, LW(sh_down), AR_BACKBONE, "ffn_down_shexp.weight"}

/* Multi-head latent attention (DeepSeek-V3's; also DeepSeek-V3.2, GLM-5): q_proj or q_a / q_a_layernorm / q_b,
 * kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj. Older GGUF converters wrote kv_b_proj whole (attn_kv_b);
 * today's split it (ARCH_MLA_KV_B_XF). */
#define T_MLA                                                                                        \
    {"self_attn.q_proj", NULL, AW_Q_FULL, AD_QMLA, AD_H, AK_MAT, LW(q), AR_BACKBONE, "attn_q.weight"},                      \
    {"self_attn.q_a_proj", NULL, AW_Q_LORA, AD_QLORA, AD_H, AK_MAT, LW(q_a), AR_BACKBONE, "attn_q_a.weight"},               \
    {"self_attn.q_a_layernorm", NULL, AW_Q_LORA, AD_QLORA, AD_NONE, AK_VEC, LW(q_a_norm), AR_BACKBONE, "attn_q_a_norm.weight"}, \
    {"self_attn.q_b_proj", NULL, AW_Q_LORA, AD_QMLA, AD_QLORA, AK_MAT, LW(q_b), AR_BACKBONE, "attn_q_b.weight"},            \
    {"self_attn.kv_a_proj_with_mqa", NULL, AW_ATTN, AD_KVA, AD_H, AK_MAT, LW(kv_a), AR_BACKBONE, "attn_kv_a_mqa.weight"},  \
    {"self_attn.kv_a_layernorm", NULL, AW_ATTN, AD_KVLORA, AD_NONE, AK_VEC, LW(kv_a_norm), AR_BACKBONE, "attn_kv_a_norm.weight"}, \
    {"self_attn.kv_b_proj", NULL, AW_ATTN, AD_KVB, AD_KVLORA, AK_MAT, LW(kv_b), AR_BACKBONE, "attn_kv_b.weight"},         \
    {"self_attn.o_proj", NULL, AW_ATTN, AD_H, AD_OMLA, AK_MAT, LW(o), AR_BACKBONE, "attn_output.weight"}
#define ARCH_MLA_KV_B_XF {"self_attn.kv_b_proj", {"attn_k_b.weight", "attn_v_b.weight"}, 0, NULL, arch_mla_kv_b}
/* The DeepSeek sparse-attention indexer of a layer with one of its own (DeepSeek-V3.2, GLM-5; llama.cpp's
 * LLM_TENSOR_INDEXER_* names) */
#define T_DSA_INDEXER                                                                                \
    {"self_attn.indexer.wq_b", NULL, AW_DSA, AD_DSAQ, AD_QLORA, AK_MAT, LW(dsa_wq_b), AR_BACKBONE, "indexer.attn_q_b.weight"}, \
    {"self_attn.indexer.wk", NULL, AW_DSA, AD_DSAD, AD_H, AK_MAT, LW(dsa_wk), AR_BACKBONE, "indexer.attn_k.weight"},        \
    {"self_attn.indexer.k_norm", NULL, AW_DSA, AD_DSAD, AD_NONE, AK_VEC, LW(dsa_k_norm), AR_BACKBONE, "indexer.k_norm.weight"}, \
    {"self_attn.indexer.k_norm.bias", NULL, AW_DSA, AD_DSAD, AD_NONE, AK_VEC, LW(dsa_k_norm_b), AR_BACKBONE, "indexer.k_norm.bias"}, \
    {"self_attn.indexer.weights_proj", NULL, AW_DSA, AD_DSAH, AD_H, AK_MAT, LW(dsa_wproj), AR_BACKBONE, "indexer.proj.weight"}

/* A DSA family's tensors (DeepSeek-V3.2, GLM-5): MLA with the indexer, DeepSeek-V3's MoE block, first dense layers */
#define T_DSA_MODEL T_EMBED, T_IN_NORM, T_MLA, T_DSA_INDEXER, T_POST_NORM, T_ROUTER, T_GROUP_MOE, T_DENSE_MLP, T_HEAD

#define N_OF(a) ((int)(sizeof(a) / sizeof *(a)))

/* SwiGLU experts: gate_proj, up_proj [I, H]; down_proj [H, I]. */
extern const arch_pdef arch_swiglu_parts[3];
/* The same under Mixtral's disk names w1 (gate), w3 (up), w2 (down) (mixtral.c; MiniMax-M2, LFM2-MoE). */
extern const arch_pdef arch_w13_parts[3];

/* The DeltaNet families' GGUF (llama.cpp qwen3next / qwen35moe, written by convert_hf_to_gguf.py's Qwen3NextModel):
 * their metadata hook, and A = -exp(A_log) taken back to A_log (an f32 hook of arch_gguf_xf). */
void arch_qwen_next_gguf_config(ggm *m, arch_gguf_common *g);
/* q / k rows of llama.cpp's LlamaModel.permute (Mixtral, Granite) put back: rules of arch_gguf_xf (mixtral.c). */
void arch_gguf_q_rows(const fam_config *c, int64_t rows, int64_t *perm);
void arch_gguf_k_rows(const fam_config *c, int64_t rows, int64_t *perm);
int64_t arch_gguf_a_log(const fam_config *c, const float *src, float *dst);

/* Config hooks shared by the Qwen families. */
void arch_qwen_moe_config(hfc *c, fam_config *o);   /* Qwen3-MoE, Qwen2-MoE: norm_topk_prob, sparse layers */
void arch_qwen_next_config(hfc *c, fam_config *o);  /* Qwen3-Next / 3.5: + shared expert, DeltaNet */
/* DeepSeek-V3's MoE block (deepseek_v3.c; GLM-4.5, dots.llm1): group router fields, first dense layers */
void arch_group_moe_config(hfc *c, fam_config *o, int first_dense_default);
/* its GGUF keys (llama.cpp deepseek2, dots1): expert_shared_count, expert_weights_scale / _norm, expert_group_count /
 * _used_count, leading_dense_block_count, the expert and dense widths */
void arch_group_moe_gguf_config(ggm *m, arch_gguf_common *g);
/* MLA (deepseek_v3.c): config.json's fields, a synth shape's dimensions (q_lora, kv_lora, qk_nope, qk_rope, v; RoPE
 * on adjacent pairs), the GGUF keys (llama.cpp deepseek2) with DeepSeek-V3's MoE keys, and kv_b_proj from attn_k_b
 * and attn_v_b (an f32 hook of arch_gguf_xf) */
void arch_mla_config(hfc *c, fam_config *o);
/* its dimensions alone (Kimi Linear's and LongCat-Flash's MLA read them so): q_lora_rank (required when
 * q_lora_required, else 0 where absent or null), kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, and
 * head_dim the query / key width nope + rope */
void arch_mla_dims(hfc *c, fam_config *o, int q_lora_required);
void arch_mla_shape(fam_config *c, int q_lora, int kv_lora, int nope, int rope, int v);
void arch_mla_gguf_config(ggm *m, arch_gguf_common *g);
int64_t arch_mla_kv_b(const fam_config *c, const float *src, float *dst);
/* The KDA families' config keys (kimi_linear.c; bailing_hybrid.c reads Kimi's): layer_types' linear_attention /
 * full_attention into layer_linear (1 when read, 0 when absent); the MoE of their releases' keys beside transformers'
 * (num_shared_experts else n_shared_experts shared experts of moe_intermediate_size, moe_renormalize else
 * norm_topk_prob, num_expert_group else n_group (both groups_def) with topk_group (topk_def),
 * routed_scaling_factor (scale_def), checked to fit the experts), the MoE layers from mlp_layer_types (sparse /
 * dense) else after the first first_k_dense_replace (dense_def), the dense ones of intermediate_size. */
int arch_kda_layer_types(hfc *c, fam_config *o);
void arch_kda_moe_config(hfc *c, fam_config *o, int groups_def, int topk_def, double scale_def, int dense_def);
/* The KDA families' GGUF (kimi_linear.c; bailing_hybrid.c): layer_types from attention.head_count_kv, 0 for a KDA
 * layer (llama.cpp's kimi-linear and bailingmoe3 mark them so) */
void arch_kda_gguf_layers(ggm *m, arch_gguf_common *g);
/* DeepSeek sparse attention (deepseek_v32.c; GLM-5): index_topk, index_n_heads, index_head_dim, the indexer's
 * RoPE kind; and its GGUF keys (attention.indexer.*) */
void arch_dsa_config(hfc *c, fam_config *o, int interleave);
/* the whole config of a DSA family (DeepSeek-V3.2, GLM-5: interleave 1): DeepSeek-V3's MoE, MLA, DSA */
void arch_dsa_model_config(hfc *c, fam_config *o, int interleave);
void arch_dsa_gguf_config(ggm *m, arch_gguf_common *g);

#endif
