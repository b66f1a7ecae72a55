/*
 * config.h — the normalised model description shared by import, format and model.
 *
 * One struct for all supported families (family/arch.h lists them). The importer fills it from Hugging
 * Face config.json (all spellings) and the family's traits, the container stores it in its manifest (the
 * fields of SL_CONFIG_FIELDS, plus the per-layer lists), the forward pass reads it. Fields that do not
 * apply to a family are 0.
 */
#ifndef SL_CONFIG_H
#define SL_CONFIG_H

#include <stdint.h>

#define SL_MAX_LAYERS 512

/* One id per family (src/family/arch/families.h, generated from the files src/family/arch/<family>.c). Ids are
 * this build's only: the container names its family by name. */
typedef enum {
    SL_ARCH_NONE = 0,
#define SL_FAMILY(name, NAME) SL_ARCH_##NAME,
#include "family/arch/families.h"
#undef SL_FAMILY
} fam_arch;

/* How router logits become the k expert weights (moe.c). */
enum {
    SL_ROUTER_SOFTMAX_TOPK = 0, /* softmax over all E, top-k, divided by their sum when norm_topk (Qwen, OLMoE) */
    SL_ROUTER_TOPK_SOFTMAX = 1, /* top-k of the logits, softmax over those k (Mixtral) */
    /* sigmoid scores; experts chosen by score + e_score_correction_bias among the topk_group of n_group groups
     * with the highest sum of their top-2 biased scores; weights the unbiased scores of the chosen, divided by
     * their sum when norm_topk, times routed_scale (GLM-4.5, DeepSeek-V3) */
    SL_ROUTER_SIGMOID_GROUP = 2,
    /* softmax over all E; experts chosen by p + e_score_correction_bias, weighted by their unbiased p divided by
     * max(their sum, 1e-12) (ERNIE 4.5's Ernie4_5_MoeTopKRouter) */
    SL_ROUTER_SOFTMAX_BIAS = 3,
    /* DeepSeek-V4: scores sqrt(softplus(logit)); experts the top-k of score + e_score_correction_bias, or on a
     * hash layer (layer_hash) the row tid2eid[token]; weights the scores of the chosen divided by their sum
     * (+ 1e-20), times routed_scale (modeling_deepseek_v4.py DeepseekV4TopKRouter, DeepseekV4HashRouter) */
    SL_ROUTER_SQRTSOFTPLUS = 4,
    SL_ROUTER_TOPK_SIGMOID = 5, /* top-k of the logits, each weight the sigmoid of its logit (Llama 4) */
    /* softmax over the experts and the zero (identity) ones after them, the top-k of p + e_score_correction_bias
     * chosen, weights their p times routed_scale, no renormalisation (LongCat-Flash) */
    SL_ROUTER_SOFTMAX_ZERO = 6,
};

/* What a routed expert computes (moe.c). */
enum {
    SL_EXPERT_SWIGLU = 0, /* down(silu(gate x) * up x) */
    /* gpt-oss: gu = gate_up x + b (rows interleaved: gate even, up odd), g = min(gate, limit), u = clamp(up, +-limit),
     * down((u + 1) * g * sigmoid(1.702 g)) + b */
    SL_EXPERT_GPTOSS = 1,
    /* DeepSeek-V4 (routed and shared experts): down(silu(min(gate x, limit)) * clamp(up x, +-limit)) */
    SL_EXPERT_SWIGLU_CLAMP = 2,
    SL_EXPERT_GEGLU = 3, /* down(gelu_tanh(gate x) * up x) (Gemma 4: hidden_activation gelu_pytorch_tanh) */
    /* gu = gate_up x (one matrix [2I, H]: the gate's I rows, then the up's), down(silu(gu[:I]) * gu[I:]) (Llama 4's
     * experts.gate_up_proj [E, H, 2I], x @ W) */
    SL_EXPERT_SWIGLU_FUSED = 4,
    /* Bailing hybrid (Ling 3; modeling_bailing_hybrid.py BailingHybridExperts, BailingHybridMLP: limit_after_act):
     * down(min(silu(gate x), limit) * clamp(up x, +-limit)) with the layer's limit, layer_clip for the routed
     * experts, layer_sh_clip for the shared one; a limit of 0 is plain SwiGLU. The dense MLP is never clipped. */
    SL_EXPERT_SWIGLU_CLIP = 5,
};

/* DeepSeek-V4 attention layers besides the sliding window (fam_config layer_compress). */
enum {
    SL_CMP_NONE = 0,
    SL_CMP_CSA = 1, /* compressed sparse attention: overlapping windows of csa_rate, an indexer keeps idx_topk */
    SL_CMP_HCA = 2, /* heavily compressed attention: windows of hca_rate, every closed one seen */
};

/* RoPE frequency table (family/rope.h). */
enum {
    SL_ROPE_DEFAULT = 0, /* inv_freq = theta^(-2i/rot) */
    SL_ROPE_YARN = 1,    /* YaRN: interpolation blended in by a ramp over the correction range, cos/sin scaled */
    SL_ROPE_LLAMA3 = 2,  /* Llama 3.1's: long wavelengths divided by the factor, a smooth blend between (rope.c) */
};

/* Where attention's q/k RMSNorm applies. */
enum {
    SL_QK_NORM_NONE = 0,
    SL_QK_NORM_HEAD = 1, /* per head, over head_dim (Qwen3) */
    SL_QK_NORM_ALL = 2,  /* over the whole projection before the split into heads (OLMoE) */
};

typedef struct fam_config {
    fam_arch arch;
    int vocab;
    int hidden;       /* H */
    int n_layers;     /* L */
    int n_heads;      /* nh */
    int n_kv_heads;   /* nkv */
    int head_dim;     /* hd */
    int rot_dim;      /* rotated dims per head: hd * partial_rotary_factor, even */
    double rope_theta;
    float eps;        /* rms_norm_eps */
    int max_pos;      /* max_position_embeddings */
    int tie_embeddings;

    int n_experts;      /* E */
    int n_experts_used; /* k */
    int moe_inter;      /* I */
    int shared_inter;   /* Is (0: no shared expert) */
    int dense_inter;    /* intermediate_size of dense MLP layers (0 if none) */
    int norm_topk;      /* renormalise the top-k weights */

    /* Gated DeltaNet (qwen3_next / qwen3_5_moe) */
    int lin_nk, lin_nv, lin_dk, lin_dv, conv_k;

    /* family switches */
    int zero_centred_norm; /* (1 + w) RMSNorm for every norm except linear_attn.norm */
    int gated_attn;        /* q_proj emits [query|gate] per head; sigmoid output gate */
    int split_lin_proj;    /* qwen3_5: in_proj_qkv/z/b/a instead of in_proj_qkvz/ba */
    /* qwen3_next: in_proj_qkvz held as its two halves, in_proj_qkv (rows q | k | v, the conv channels' order) and
     * in_proj_z, each in its own dtype (a GGUF whose attn_qkv and attn_gate types differ: import/hf_gguf.c);
     * in_proj_ba stays grouped */
    int qkvz_split;
    /* Kimi Delta Attention on the linear layers (model/kda.c): q, k, v projections and three conv kernels, a forget
     * gate per channel (nv * dk: -exp(A_log) softplus(f_b f_a x + dt_bias)), the output norm gated by sigmoid */
    int kda;
    /* Bailing hybrid's KDA (kda_lower < 0): the bounded forget gate g = kda_lower * sigmoid(exp(A_log[h]) (f +
     * dt_bias)) instead of Kimi's -exp(A_log) softplus(f + dt_bias), f one full-rank f_proj (and the output gate one
     * g_proj) instead of the low-rank pairs; 0: Kimi's */
    double kda_lower;
    /* MLA's output times sigmoid(g_proj x) per head before o_proj (Bailing hybrid's gated MLA; the head_gate op) */
    int attn_head_gate;
    int mla_nope;          /* MLA without RoPE (Kimi Linear): the rot_dim part of q and of the key enters unrotated */

    uint8_t layer_linear[SL_MAX_LAYERS]; /* 1: Gated DeltaNet, 0: full attention */
    uint8_t layer_moe[SL_MAX_LAYERS];    /* 1: routed experts, 0: dense MLP */
    uint8_t layer_sliding[SL_MAX_LAYERS]; /* 1: sliding-window attention over the last sliding_window positions */

    /* 1: the zero-centred norm weights are stored already shifted (1 + w), as mlx-lm saves them for
     * qwen3_next / qwen3_5_moe; the engine then uses them as plain weights (zero_centred_norm off for
     * those norms). linear_attn.norm is never shifted. */
    int norms_shifted;

    int router;    /* SL_ROUTER_* */
    int qk_norm;   /* SL_QK_NORM_* */
    int qk_norm_after_rope; /* SL_QK_NORM_HEAD applied after RoPE (HunYuan), else before */
    int attn_bias; /* q_proj, k_proj, v_proj have biases (Qwen2-MoE, GLM-4.5) */

    /* SL_ROUTER_SIGMOID_GROUP only (0 otherwise) */
    int n_group;         /* expert groups: E % n_group == 0, at least 2 experts each */
    int topk_group;      /* groups a token may choose from, 1..n_group */
    double routed_scale; /* routed_scaling_factor, applied to the routed experts' weights */

    /* Set at open from sl_model_params, never stored: 1 = experts drawn uniformly (sl_routing, moe.c) */
    int uniform_routing;
    uint64_t routing_seed;

    /* RoPE scaling (config.json rope_parameters / rope_scaling), SL_ROPE_YARN only (0 otherwise): factor (0: max_pos /
     * rope_orig_max_pos), original_max_position_embeddings, beta_fast / beta_slow (0: 32 / 1), mscale and
     * mscale_all_dim (0: absent), truncate, attention_factor (0: from the mscales) */
    int rope_type;          /* SL_ROPE_* */
    double rope_factor;
    int rope_orig_max_pos;
    double yarn_beta_fast, yarn_beta_slow, yarn_mscale, yarn_mscale_all_dim;
    int yarn_truncate;
    double rope_attn_factor;

    /* Multi-head latent attention (DeepSeek-V3; 0 otherwise; mla.c). kv_lora > 0 turns it on: head_dim is then
     * qk_nope + rot_dim (qk_rope_head_dim), n_kv_heads = n_heads, and a layer's cache holds kv_lora + rot_dim
     * floats per position (the normed compressed KV and the shared RoPE key), never per-head K/V. */
    int q_lora;          /* q_lora_rank: q_a_proj, q_a_layernorm, q_b_proj; 0: one q_proj */
    int kv_lora;         /* kv_lora_rank */
    int qk_nope;         /* qk_nope_head_dim */
    int v_head_dim;      /* v_head_dim */
    int rope_interleave; /* RoPE on adjacent pairs, de-interleaved first (transformers' rope_interleave) */
    double attn_scale;   /* softmax scale of q.k; 0: 1/sqrt(head_dim) */
    /* gpt-oss */
    int sliding_window;  /* keys a sliding layer's query sees, itself included (transformers: kv > q - window) */
    int attn_sinks;      /* per-head sink logits in the softmax denominator (lw->sinks) */
    int expert_kind;     /* SL_EXPERT_* */
    double swiglu_limit; /* SL_EXPERT_GPTOSS (7.0) / SL_EXPERT_SWIGLU_CLAMP clamp */
    /* DeepSeek sparse attention (DSA: DeepSeek-V3.2, GLM-5; 0 otherwise; model/mla.c): an MLA layer's query attends only
     * to the dsa_topk cached positions its indexer scores highest. dsa_topk > 0 turns it on (with kv_lora > 0 and
     * q_lora > 0); a layer's cache row then also holds the indexer's key (dsa_dim floats). */
    int dsa_topk;        /* index_topk */
    int dsa_heads;       /* index_n_heads */
    int dsa_dim;         /* index_head_dim (its first rot_dim dims rotated) */
    int dsa_interleave;  /* the indexer's RoPE on adjacent pairs (GLM-5), else rotate-half (DeepSeek-V3.2) */
    uint8_t layer_dsa_shared[SL_MAX_LAYERS]; /* 1: no indexer of its own, the previous indexed layer's choice (GLM) */

    /* DeepSeek-V4 (model/dsv4.c, model/hc.c; 0 otherwise). hc_mult > 0 turns its block on: the residual is
     * hc_mult streams of H (hyper-connections mixed by hc_iters Sinkhorn steps), attention is q through
     * q_lora (q_a, q_a_norm, q_b) with a per-head unweighted norm, one KV head that is key and value, RoPE on
     * adjacent pairs of the last rot_dim of each head (undone on the output), sinks, every layer sliding, the
     * output through o_groups groups of o_lora. */
    int hc_mult, hc_iters;
    double hc_eps;
    int o_groups, o_lora;
    int csa_rate, hca_rate;             /* compression rates of SL_CMP_CSA / SL_CMP_HCA layers */
    int idx_heads, idx_dim, idx_topk;   /* CSA's indexer */
    double rope_theta_c; /* the compressed layers' RoPE base (the rope_type / yarn fields are theirs); the sliding
                          * layers rotate with rope_theta, default table */
    uint8_t layer_compress[SL_MAX_LAYERS]; /* SL_CMP_* */
    uint8_t layer_hash[SL_MAX_LAYERS];     /* 1: the MoE layer's experts are tid2eid[token] */
    /* Gemma 4 (0 elsewhere; model/block.c). Full-attention layers (not layer_sliding) may have their own head_dim,
     * KV heads and RoPE: full_head_dim > 0 turns that on; their RoPE is then proportional (theta full_rope_theta,
     * the first full_rot_dim / 2 of full_head_dim / 2 frequencies base^(-2i/full_head_dim), the rest 0, over the
     * whole head). k_eq_v: a full layer has no v_proj, its values are the raw k projection (before k_norm, RoPE). */
    int full_head_dim, full_kv_heads, full_rot_dim, k_eq_v;
    double full_rope_theta;
    int full_rope_prop;   /* 1: that RoPE proportional (Gemma 4), 0: the default table over full_rot_dim (MiMo) */
    /* LFM2: the linear layers (layer_linear) are short convolutions (model/shortconv.c) of conv_k taps over hidden
     * channels; router_norm_eps: SL_ROUTER_SIGMOID_GROUP's renormalisation epsilon (0: 1e-20) */
    int short_conv;
    double router_norm_eps;
    /* LongCat-Flash: zero_experts identity experts after the n_experts real ones (router rows n_experts +
     * zero_experts; a chosen one adds its weight times the token); moe_shortcut: layers come in pairs, the MoE of
     * the first (layer_moe) runs on its FFN input beside its dense MLP and is added after the second's FFN;
     * mla_q_scale / mla_kv_scale: MLA's queries (after q_b) and normed latent times these (0: none) */
    int zero_experts, moe_shortcut;
    double mla_q_scale, mla_kv_scale;
    /* Granite 4.0 hybrid: the linear layers are Mamba2 (the mamba2 op; lin_nk groups, lin_dk state size, lin_nv
     * heads of lin_dv, conv_k); residual_scale: each block's output times it before the residual add
     * (residual_multiplier); logit_scale: the logits times it (1 / logits_scaling); 0: none */
    int mamba;
    double residual_scale, logit_scale;
    double attn_v_scale;  /* values times this after their projection (MiMo attention_value_scale); 0: none */
    int v_norm;           /* values RMS-normed per head, without a weight */
    int dense_act_geglu;  /* the dense MLP (and the one beside the experts) is GeGLU (gelu_tanh) */
    int ffn_beside;       /* MoE layers: a dense MLP of dense_inter beside the experts, each with its own norms */
    int sandwich_norm;    /* post_attention norm on the mixer's output, a post-FFN norm on the FFN's (Gemma) */
    double embed_scale;   /* embeddings times this (sqrt(hidden), as f32); 0: none */
    double logit_softcap; /* logits = tanh(logits / cap) * cap; 0: none */

    /* Llama 4 (0 elsewhere). attn_chunk > 0: the sliding layers attend within chunks of attn_chunk positions (keys
     * of the query's own chunk up to itself) instead of a window. nope_full: the full-attention layers have no RoPE
     * and no q/k norm; there, when attn_floor_scale > 0, queries times log1p(floor((pos + 1) / attn_floor_scale)) *
     * attn_temp + 1 (temperature tuning). The q/k norm after RoPE (qk_norm_after_rope) is weightless when the table
     * has no q_norm. moe_scale_input: a routed expert's input is the token times its weight (combined with weight 1).
     * rope_low_freq / rope_high_freq: SL_ROPE_LLAMA3's low_freq_factor / high_freq_factor. */
    int attn_chunk, nope_full, moe_scale_input;
    double attn_floor_scale, attn_temp, rope_low_freq, rope_high_freq;
    /* SL_EXPERT_SWIGLU_CLIP's per-layer limits (>= 0; 0: none): the routed experts', the shared expert's */
    float layer_clip[SL_MAX_LAYERS], layer_sh_clip[SL_MAX_LAYERS];
} fam_config;

/* The scalar fields of fam_config as the manifest stores them: X(name, type, presence) with type I (int),
 * D (double) or F (float); presence R (required) or O (optional: absent in containers written before
 * the field existed, which then get the family's trait, or 0). container.c writes and reads them,
 * `sluice info` prints them. */
#define SL_CONFIG_FIELDS(X)                                                                                    \
    X(vocab, I, R) X(hidden, I, R) X(n_layers, I, R) X(n_heads, I, R) X(n_kv_heads, I, R) X(head_dim, I, R)  \
    X(rot_dim, I, R) X(rope_theta, D, R) X(max_pos, I, R) X(tie_embeddings, I, R) X(n_experts, I, R)         \
    X(n_experts_used, I, R) X(moe_inter, I, R) X(shared_inter, I, R) X(dense_inter, I, R) X(norm_topk, I, R) \
    X(lin_nk, I, R) X(lin_nv, I, R) X(lin_dk, I, R) X(lin_dv, I, R) X(conv_k, I, R)                          \
    X(zero_centred_norm, I, R) X(gated_attn, I, R) X(split_lin_proj, I, R) X(eps, F, R)                      \
    X(norms_shifted, I, O) X(router, I, O) X(qk_norm, I, O) X(attn_bias, I, O) X(n_group, I, O)              \
    X(topk_group, I, O) X(routed_scale, D, O) X(rope_type, I, O) X(rope_factor, D, O) X(rope_orig_max_pos, I, O)   \
    X(yarn_beta_fast, D, O) X(yarn_beta_slow, D, O) X(yarn_mscale, D, O) X(yarn_mscale_all_dim, D, O)              \
    X(yarn_truncate, I, O) X(rope_attn_factor, D, O)   \
    X(q_lora, I, O) X(kv_lora, I, O) X(qk_nope, I, O)                \
    X(v_head_dim, I, O) X(rope_interleave, I, O) X(attn_scale, D, O) \
    X(sliding_window, I, O) X(attn_sinks, I, O) X(expert_kind, I, O) X(swiglu_limit, D, O)                \
    X(dsa_topk, I, O) X(dsa_heads, I, O) X(dsa_dim, I, O) X(dsa_interleave, I, O) X(qk_norm_after_rope, I, O)   \
    X(hc_mult, I, O) X(hc_iters, I, O) X(hc_eps, D, O) X(o_groups, I, O) X(o_lora, I, O) X(csa_rate, I, O)   \
    X(hca_rate, I, O) X(idx_heads, I, O) X(idx_dim, I, O) X(idx_topk, I, O) X(rope_theta_c, D, O) X(kda, I, O)    \
    X(mla_nope, I, O)   \
    X(full_head_dim, I, O) X(full_kv_heads, I, O) X(full_rot_dim, I, O) X(k_eq_v, I, O)                    \
    X(full_rope_theta, D, O) X(v_norm, I, O) X(dense_act_geglu, I, O) X(ffn_beside, I, O)                  \
    X(sandwich_norm, I, O) X(embed_scale, D, O) X(logit_softcap, D, O)                                     \
    X(attn_chunk, I, O) X(nope_full, I, O) X(moe_scale_input, I, O)                                         \
    X(attn_floor_scale, D, O) X(attn_temp, D, O) X(rope_low_freq, D, O) X(rope_high_freq, D, O)           \
    X(full_rope_prop, I, O) X(attn_v_scale, D, O) X(short_conv, I, O) X(router_norm_eps, D, O)              \
    X(zero_experts, I, O) X(moe_shortcut, I, O) X(mla_q_scale, D, O) X(mla_kv_scale, D, O)                 \
    X(mamba, I, O) X(residual_scale, D, O) X(logit_scale, D, O) X(qkvz_split, I, O) X(kda_lower, D, O)          \
    X(attn_head_gate, I, O)

/* Bounds of SL_ROUTER_SIGMOID_GROUP (moe.c's scratch). */
#define SL_ROUTER_MAX_EXPERTS 1024
#define SL_ROUTER_MAX_GROUPS 64
/* Whether n_group, topk_group and routed_scale make sense for c's experts under SL_ROUTER_SIGMOID_GROUP:
 * 1 <= n_group <= SL_ROUTER_MAX_GROUPS dividing E <= SL_ROUTER_MAX_EXPERTS into groups of >= 2, 1 <= topk_group
 * <= n_group, k <= the experts of topk_group groups, routed_scale finite and > 0. Cannot fail. */
int cfg_groups_ok(const fam_config *c);
/* Whether c's MLA dimensions (kv_lora > 0) make sense: q_lora >= 0, qk_nope >= 0, rot_dim > 0 even,
 * head_dim = qk_nope + rot_dim, v_head_dim > 0, n_kv_heads = n_heads, no gated attention, q/k/v bias or q/k norm,
 * attn_scale finite and >= 0; with DSA (dsa_topk > 0) q_lora > 0, dsa_heads >= 1, dsa_dim even in rot_dim..4096
 * and layer 0 with an indexer of its own. Cannot fail. 1 when c is neither MLA nor DSA. */
int cfg_mla_ok(const fam_config *c);
/* Whether c's DeepSeek-V4 fields (hc_mult > 0) make sense: a single KV head of head_dim, q_lora > 0, o_groups
 * dividing the heads, rates >= 1 (>= 2 where a layer compresses), the indexer's dims with a CSA layer, every layer
 * sliding and MoE, rot_dim <= idx_dim, E <= SL_ROUTER_MAX_EXPERTS, k <= 64. Cannot fail. 1 when c is not V4. */
int cfg_dsv4_ok(const fam_config *c);
/* The residual stream's floats per token: hc_mult * hidden (V4), else hidden. */
int cfg_res_width(const fam_config *c);
/* Floats of one position of an attention layer's cache: kv_lora + rot_dim (MLA; + dsa_dim with DSA), else
 * n_kv_heads * head_dim (per K and per V); the largest over the layers (a buffer for any layer). cfg_kv_row_at:
 * layer l's. */
int cfg_kv_row(const fam_config *c);
int cfg_kv_row_at(const fam_config *c, int l);
/* Floats of one position of a layer's V cache: n_kv_heads * the value head (v_head_dim when set, MiMo, else
 * head_dim); 0 for MLA and DeepSeek-V4 (no V cache). cfg_v_row: the largest over the layers. */
int cfg_v_row(const fam_config *c);
int cfg_v_row_at(const fam_config *c, int l);
/* Attention layer l's heads: KV heads, head_dim, rotated dims (full_head_dim's layers: Gemma 4's full ones). */
typedef struct cfg_attn {
    int n_kv_heads, head_dim, rot_dim, own; /* own: the full layers' dims (their RoPE: full_rope_theta) */
    int v_dim;                              /* a value head's size */
} cfg_attn;
cfg_attn cfg_attn_at(const fam_config *c, int l);
/* Router rows: the experts and the zero (identity) experts after them. */
int cfg_router_rows(const fam_config *c);
/* Number of MoE layers; expert-layer slot of layer l (or -1 for dense). */
int cfg_n_moe_layers(const fam_config *c);
int cfg_moe_slot(const fam_config *c, int layer);
/* The family's container name ("none" if unknown) / the id of a container name (SL_ARCH_NONE). */
const char *cfg_arch_name(fam_arch a);
fam_arch cfg_arch_from_name(const char *name);

#endif
