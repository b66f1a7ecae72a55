/*
 * config.h — the normalised model description shared by import, format and model.
 *
 * One struct for all supported families (qwen3_moe, qwen3_next, qwen3_5_moe). The importer fills it
 * from Hugging Face config.json (all spellings), the container stores it in its manifest, the forward
 * pass reads it. Fields that do not apply to a family are 0.
 */
#ifndef SL_CONFIG_H
#define SL_CONFIG_H

#include <stdint.h>

#define SL_MAX_LAYERS 512

typedef enum {
    SL_ARCH_NONE = 0,
    SL_ARCH_QWEN3_MOE = 1,
    SL_ARCH_QWEN3_NEXT = 2,
    SL_ARCH_QWEN3_5_MOE = 3,
} sl_arch;

typedef struct sl_config {
    sl_arch arch;
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

    uint8_t layer_linear[SL_MAX_LAYERS]; /* 1: Gated DeltaNet, 0: full attention */
    uint8_t layer_moe[SL_MAX_LAYERS];    /* 1: routed experts, 0: dense MLP */

    /* 1: the zero-centred norm weights are stored already shifted (1 + w), as mlx-lm saves them for
     * qwen3_next / qwen3_5_moe; the engine then uses them as plain weights (zero_centred_norm off for
     * those norms). linear_attn.norm is never shifted. */
    int norms_shifted;
} sl_config;

/* Number of MoE layers; expert-layer slot of layer l (or -1 for dense). */
int cfg_n_moe_layers(const sl_config *c);
int cfg_moe_slot(const sl_config *c, int layer);
const char *cfg_arch_name(sl_arch a);
sl_arch cfg_arch_from_name(const char *name);

#endif
