/*
 * model.h — in-memory weights and the forward pass (internal).
 *
 * The engine (src/engine/model.c) fills an sl_weights from a container: matrices stay in their stored
 * dtype and point into the resident backbone buffer; small vectors (norms, A_log, dt_bias, conv1d) are
 * converted to f32 at load. Routed experts are reached through an sl_expert_src (util/tensor.h, with
 * sl_mat and sl_expert) so the streaming engine can replace the all-resident table without touching
 * the math.
 *
 * Shapes follow PyTorch: a matrix is [rows = out][cols = in] row-major and computes y = W x.
 */
#ifndef SL_MODEL_H
#define SL_MODEL_H

#include "model/config.h"
#include "util/tensor.h"

typedef struct sl_layer_w {
    float *attn_norm, *ffn_norm; /* input_layernorm, post_attention_layernorm [H] */

    /* full attention: q is [nh*hd, H] (qwen3_moe) or [2*nh*hd, H] (gated: per head [query|gate]) */
    sl_mat q, k, v, o;
    float *q_norm, *k_norm; /* [hd] per head, or [nh*hd] / [nkv*hd] over the projection (cfg->qk_norm) */
    float *q_bias, *k_bias, *v_bias; /* [nh*hd], [nkv*hd], [nkv*hd] when cfg->attn_bias (Qwen2-MoE), else NULL */
    /* multi-head latent attention (cfg->kv_lora > 0; mla.c): q is q_proj [nh*(dn+dr), H] when q_lora = 0, else
     * q_a [q_lora, H], q_a_norm [q_lora], q_b [nh*(dn+dr), q_lora]; kv_a [kv_lora+dr, H], kv_a_norm [kv_lora],
     * kv_b [nh*(dn+dv), kv_lora]; o [H, nh*dv] */
    sl_mat q_a, q_b, kv_a, kv_b;
    float *q_a_norm, *kv_a_norm;
    float *o_bias;                   /* [H] o_proj bias (gpt-oss), else NULL */
    float *sinks;                    /* [nh] per-head sink logits when cfg->attn_sinks (gpt-oss), else NULL */

    /* Gated DeltaNet */
    sl_mat qkvz, ba;         /* qwen3_next: grouped per key head (MODELS.md 3.5.1) */
    sl_mat qkv, z, b, a;     /* qwen3_5_moe: flat */
    float *conv_w;           /* [Cq][K] */
    float *dt_bias, *A_log;  /* [nv] */
    float *lin_norm;         /* [dv], plain weight */
    sl_mat lin_out;          /* [H, nv*dv] */

    /* MoE */
    sl_mat router;                        /* [E, H] */
    float *router_bias;                   /* [E] e_score_correction_bias (SL_ROUTER_SIGMOID_GROUP), else NULL */
    float *router_lbias;                  /* [E] the router Linear's bias, added to its logits (gpt-oss), else NULL */
    sl_mat sh_gate, sh_up, sh_down;       /* shared expert (Next, 3.5) */
    sl_mat sh_expert_gate;                /* [1, H] */
    /* dense MLP */
    sl_mat mlp_gate, mlp_up, mlp_down;
} sl_layer_w;

typedef struct sl_weights {
    sl_mat embed;      /* [V, H] */
    sl_mat lm_head;    /* [V, H]; equals embed when tied */
    float *final_norm; /* [H] */
    sl_layer_w layers[SL_MAX_LAYERS];
} sl_weights;

/* A sequence's state (KV cache, DeltaNet state, position) and the per-model workspace that
 * evaluations borrow (fwd_internal.h). */
typedef struct fwd_seq fwd_seq;
typedef struct fwd_ws fwd_ws;
typedef struct sl_backend sl_backend;

/* A sequence's state in be's memory (be borrowed: it outlives the state). NULL when out of memory. */
fwd_seq *fwd_seq_new(const sl_config *cfg, int n_ctx, sl_backend *be);
void fwd_seq_free(fwd_seq *sq);
void fwd_seq_reset(fwd_seq *sq);
int fwd_seq_n_past(const fwd_seq *sq);
/* Evaluate long inputs layer-major (1, default) or in micro-batches through all layers (0). */
void fwd_seq_set_wide(fwd_seq *sq, int on);

/* The state as bytes (fwd_seq_state_bytes of them): per layer the current DeltaNet conv and recurrent
 * state, or the n_past KV rows. fwd_seq_load takes bytes saved from a sequence of the same shape at
 * n_past positions: SL_ERANGE past the sequence's context, SL_EFORMAT for the wrong length (both
 * leave sq unchanged). */
size_t fwd_seq_state_bytes(const fwd_seq *sq);
void fwd_seq_save(const fwd_seq *sq, void *buf);
int fwd_seq_load(fwd_seq *sq, int n_past, const void *buf, size_t len);

/* A workspace for sequences of up to n_ctx positions, computing on be (borrowed: it outlives the
 * workspace; src/backend/backend.h). */
fwd_ws *fwd_ws_new(const sl_config *cfg, int n_ctx, sl_backend *be);
void fwd_ws_free(fwd_ws *ws);

/* Evaluates n tokens at positions n_past..n_past+n-1 of sq, appending to its state, with ws's scratch.
 * logits: NULL, or [n][V] when all_logits, else [V] (last token).
 * Returns 0 or a negative sl_status; err (may be NULL, size errlen) gets a message. */
int fwd_eval(fwd_ws *ws, fwd_seq *sq, const sl_config *cfg, const sl_weights *w, const sl_expert_src *experts,
             const int32_t *tokens, int n, float *logits, int all_logits, char *err, size_t errlen);

/* One sequence's part of a batched evaluation. */
typedef struct fwd_item {
    fwd_seq *sq;
    const int32_t *tokens;
    int n;
    float *logits; /* NULL, [n][V] (all_logits) or [V] (last token) */
    int all_logits;
} fwd_item;

/* Evaluates every item's tokens in one layer-major pass: the MoE layers route all rows together, so an
 * expert chosen by several sequences is fetched once. Each sequence's result is bitwise what fwd_eval
 * gives it alone. Any bad item is refused (err names it) before anything runs; a failure during the
 * pass leaves every sequence as it was. A sequence may appear once. */
int fwd_eval_batch(fwd_ws *ws, const sl_config *cfg, const sl_weights *w, const sl_expert_src *experts,
                   const fwd_item *items, int n_items, char *err, size_t errlen);

#endif
