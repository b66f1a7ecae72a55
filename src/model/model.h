/*
 * model.h — the forward pass (internal): sequences, workspaces, evaluation.
 *
 * The weights it reads (fam_weights, fam_layer_w) are laid out in family/weights.h, a room below: the family
 * tables bind tensors to their fields. The engine (src/engine/backbone.c) fills them from a container. Routed
 * experts are reached through an tn_expert_src (util/tensor.h, with tn_mat and tn_expert) so the streaming
 * engine can replace the all-resident table without touching the math.
 */
#ifndef SL_MODEL_H
#define SL_MODEL_H

#include "family/config.h"
#include "family/weights.h"
#include "sluice.h"
#include "util/tensor.h"

/* A sequence's state (KV cache, DeltaNet state, position) and the per-model workspace that
 * evaluations borrow (fwd_internal.h). */
typedef struct fwd_seq fwd_seq;
typedef struct fwd_ws fwd_ws;
typedef struct be_backend be_backend;

/* A sequence's state in be's memory (be borrowed: it outlives the state), its attention caches' keys of kv_type and
 * values of kv_type_v (MLA's stay f32). NULL when out of memory or a type is not one. The caches start at one page and grow
 * with the positions used (fwd_seq_reserve), so a long n_ctx costs only what is used. */
fwd_seq *fwd_seq_new(const fam_config *cfg, int n_ctx, sl_kv_type kv_type, sl_kv_type kv_type_v, be_backend *be);
/* A budget of KV cache bytes that the sequences of one model share (the server's slots: sl_model_set_kv_pool):
 * used counts every attention cache's allocated rows (kv_cap x the K and V row bytes) of the sequences that
 * joined it; limit 0 = none. A sequence grows its caches only while used stays within limit (one page at a
 * time then, not doubling), so memory follows the positions actually used across sequences. */
typedef struct fwd_kv_pool {
    _Atomic unsigned long long used;
    unsigned long long limit;
} fwd_kv_pool;
/* sq's caches from now on count in pool (NULL: none); what it holds now is added to it (a sequence's first
 * page is always given, even past the limit). */
void fwd_seq_set_pool(fwd_seq *sq, fwd_kv_pool *pool);
/* Grows the KV caches to hold positions 0 .. n_pos - 1 (n_pos <= n_ctx); fwd_eval calls it itself. SL_OK,
 * SL_EBUSY when its pool's limit has not the pages (then only what fits never is taken: nothing changes), or
 * SL_ENOMEM with sq unchanged. Buffers move: a backend's recorded steps of sq are not replayed after. */
sl_status fwd_seq_reserve(fwd_seq *sq, int n_pos);
/* Gives back the cache pages past those its positions need (every page of a sequence of no positions: its caches
 * are made again by the next fwd_seq_reserve): a finished sequence's memory after fwd_seq_reset. A ring that
 * wrapped keeps its rows. Results do not change. */
void fwd_seq_trim(fwd_seq *sq);
/* Bytes of KV cache sq holds now (what it counts in its pool). */
size_t fwd_seq_kv_held(const fwd_seq *sq);
/* The KV bytes (the caches at n_pos positions, DeltaNet states) a sequence of cfg takes at kv_type (keys),
 * kv_type_v (values). */
size_t fwd_seq_mem_bytes(const fam_config *cfg, int n_pos, sl_kv_type kv_type, sl_kv_type kv_type_v);
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
sl_status fwd_seq_load(fwd_seq *sq, int n_past, const void *buf, size_t len);

/* A workspace for sequences of up to n_ctx positions, computing on be (borrowed: it outlives the
 * workspace; src/backend/backend.h). */
fwd_ws *fwd_ws_new(const fam_config *cfg, int n_ctx, be_backend *be);
void fwd_ws_free(fwd_ws *ws);

/* Evaluates n tokens at positions n_past..n_past+n-1 of sq, appending to its state, with ws's scratch.
 * logits: NULL, or [n][V] when all_logits, else [V] (last token).
 * SL_OK, or an error with err (may be NULL) naming what failed: a bad argument or token, a weight, an expert
 * (layer, expert, the source's message: file offset, errno), the backend ("<name> backend: ..."). */
sl_status fwd_eval(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_weights *w, const tn_expert_src *experts,
                   const int32_t *tokens, int n, float *logits, int all_logits, sl_error *err);

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
sl_status fwd_eval_batch(fwd_ws *ws, const fam_config *cfg, const fam_weights *w, const tn_expert_src *experts,
                         const fwd_item *items, int n_items, sl_error *err);

#endif
