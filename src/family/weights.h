/*
 * weights.h — a model's weights in memory, as the family tables bind them (family/arch.h: each tensor's
 * arch_tdef.field is an offsetof in fam_weights or fam_layer_w, each expert part's an offsetof in tn_expert,
 * util/tensor.h) and the forward pass (model/model.h) reads them.
 *
 * Matrices stay in their stored dtype and point into the resident backbone buffer; small vectors (norms, A_log,
 * dt_bias, conv1d) are converted to f32 at load. Shapes follow PyTorch: a matrix is [rows = out][cols = in]
 * row-major and computes y = W x.
 */
#ifndef SL_WEIGHTS_H
#define SL_WEIGHTS_H

#include "family/config.h"
#include "util/tensor.h"

typedef struct fam_layer_w {
    float *attn_norm, *ffn_norm; /* input_layernorm, post_attention_layernorm [H] */

    /* full attention: q is [nh*hd, H] (qwen3_moe) or [2*nh*hd, H] (gated: per head [query|gate]) */
    tn_mat q, k, v, o;
    float *q_norm, *k_norm; /* [hd] per head, or [nh*hd] / [nkv*hd] over the projection (cfg->qk_norm) */
    float *q_bias, *k_bias, *v_bias; /* [nh*hd], [nkv*hd], [nkv*hd] when cfg->attn_bias (Qwen2-MoE), else NULL */
    /* multi-head latent attention (cfg->kv_lora > 0; mla.c): q is q_proj [nh*(dn+dr), H] when q_lora = 0, else
     * q_a [q_lora, H], q_a_norm [q_lora], q_b [nh*(dn+dr), q_lora]; kv_a [kv_lora+dr, H], kv_a_norm [kv_lora],
     * kv_b [nh*(dn+dv), kv_lora]; o [H, nh*dv] */
    tn_mat q_a, q_b, kv_a, kv_b;
    float *q_a_norm, *kv_a_norm;
    /* the DSA indexer of an MLA layer (cfg->dsa_topk > 0, not layer_dsa_shared; mla.c): wq_b [dsa_heads*dsa_dim, q_lora],
     * wk [dsa_dim, H], k_norm LayerNorm weight and bias [dsa_dim], weights_proj [dsa_heads, H] */
    tn_mat dsa_wq_b, dsa_wk, dsa_wproj;
    float *dsa_k_norm, *dsa_k_norm_b;
    float *o_bias;                   /* [H] o_proj bias (gpt-oss), else NULL */
    float *sinks;                    /* [nh] per-head sink logits when cfg->attn_sinks (gpt-oss), else NULL */

    /* Gated DeltaNet */
    tn_mat qkvz, ba;         /* qwen3_next: grouped per key head (docs/MATH.md, Gated DeltaNet: Projections) */
    int qkvz_flat;           /* 1: qkvz's rows regrouped at load to q | k | v | z (engine/backbone.c; model/deltanet.c
                              * fwd_qkvz_row), so the matmul writes the conv input then z; 0: grouped as stored */
    tn_mat qkv, z, b, a;     /* qwen3_5_moe: flat */
    float *conv_w;           /* [Cq][K] */
    float *dt_bias, *A_log;  /* [nv] */
    float *lin_norm;         /* [dv], plain weight */
    /* Kimi Delta Attention (cfg->kda): q, k, v [nv*dv, H] in q, k, v; b [nv, H]; dt_bias [nv*dk]; the conv kernels of
     * q, k, v [nv*dk][K] each; the forget gate's f_a [dk, H], f_b [nv*dk, dk], the output gate's g_a, g_b alike */
    float *conv_parts[3];
    tn_mat kda_fa, kda_fb, kda_ga, kda_gb;
    /* Bailing hybrid's KDA: the full-rank forget gate f_proj [nv*dk, H] and output gate g_proj [nv*dv, H] instead */
    tn_mat kda_f, kda_g;
    /* Bailing hybrid's gated MLA: g_proj [nh, H], each head's output times sigmoid of its row (cfg->attn_head_gate) */
    tn_mat head_gate;
    tn_mat lin_out;          /* [H, nv*dv] */

    /* MoE */
    tn_mat router;                        /* [E, H] */
    float *router_bias;                   /* [E] e_score_correction_bias (SL_ROUTER_SIGMOID_GROUP, _SOFTMAX_BIAS), else NULL */
    float *router_lbias;                  /* [E] the router Linear's bias, added to its logits (gpt-oss), else NULL */
    tn_mat sh_gate, sh_up, sh_down;       /* shared expert (Next, 3.5) */
    tn_mat sh_expert_gate;                /* [1, H] */
    /* dense MLP */
    tn_mat mlp_gate, mlp_up, mlp_down;

    /* DeepSeek-V4 (cfg->hc_mult > 0; model/dsv4.c, model/hc.c). Attention: q_a, q_a_norm, q_b as MLA's; k the
     * kv_proj [hd, H] and k_norm its norm [hd]; o the o_b_proj [H, o_groups*o_lora]; o_a [o_groups*o_lora,
     * nh*hd/o_groups], group g's rows g*o_lora.. */
    tn_mat o_a;
    tn_mat hc_fn[2];             /* attention's, the FFN's hyper-connection [(2+hc)*hc, hc*H] */
    float *hc_base[2], *hc_scale[2]; /* [(2+hc)*hc], [3] */
    /* the compressor (CSA: [2hd, H] kv and gate, ape [csa_rate][2hd]; HCA: [hd, H], [hca_rate][hd]), its norm [hd];
     * CSA's indexer: its own compressor at idx_dim, q_b [idx_heads*idx_dim, q_lora], weights [idx_heads, H] */
    tn_mat cmp_kv, cmp_gate, idx_kv, idx_gate, idx_q_b, idx_w;
    float *cmp_ape, *cmp_norm, *idx_ape, *idx_norm;
    float *tid2eid;              /* a hash layer's [V][k] expert ids (as floats) */
    /* Gemma 4 (cfg->sandwich_norm, ffn_beside; model/block.c), else NULL: the mixer's output norm, the FFN's
     * output norm; the experts' own input norm (pre 2) and the two branches' output norms (post 1: the dense
     * MLP's, post 2: the experts'); the router's input norm weight (router.scale) and per-expert weight scale;
     * the layer's output scale [1] */
    float *post_attn_norm, *post_ffn_norm;
    float *ffn_norm2, *post_ffn_norm1, *post_ffn_norm2;
    float *router_norm, *expert_scale;
    float *layer_scalar;
    /* Granite 4.0 hybrid: Mamba2's conv bias [conv channels] and D [heads]; the shared MLP's fused gate | up
     * [2 Is, H] (shared_mlp.input_linear) */
    float *conv_b, *ssm_D;
    tn_mat sh_gate_up;
} fam_layer_w;

typedef struct fam_weights {
    tn_mat embed;      /* [V, H] */
    tn_mat lm_head;    /* [V, H]; equals embed when tied */
    float *final_norm; /* [H] */
    tn_mat hc_head_fn;               /* V4: the last collapse of the streams [hc, hc*H] */
    float *hc_head_base, *hc_head_scale; /* [hc], [1] */
    fam_layer_w layers[SL_MAX_LAYERS];
} fam_weights;

#endif
