/*
 * fwd_internal.h — what forward.c, attention.c, deltanet.c and moe.c share: the layouts of a sequence's
 * state (fwd_seq) and of the per-model workspace (fwd_ws), and the per-block entry points. Not for use
 * outside src/model/.
 *
 * Every computation is an op of the backend (src/backend/backend.h) the workspace was made with; the
 * float buffers below (state and scratch) are that backend's memory, the index arrays host memory.
 *
 * A sequence's state is what must survive between evaluations: KV cache, DeltaNet conv and recurrent
 * state, position. Everything else an evaluation needs is scratch in the workspace, sized once for one
 * micro-batch of FWD_BATCH tokens (and the model's longest context) in fwd_ws_new(), so the hot path
 * never allocates; one evaluation at a time uses a workspace (the model's lock), and any number of
 * sequences can share it, one after another or together in one batched pass (fwd_eval_batch).
 *
 * Recurrent state is double-buffered: a micro-batch reads DeltaNet layer l's conv/SSM state from slot
 * lin_cur[l] and writes the new state into slot 1 - lin_cur[l]; the slots flip only when the whole
 * micro-batch succeeded. KV rows past n_past are scratch until n_past advances. So a failing expert
 * provider leaves the state as it was before the failing micro-batch.
 */
#ifndef SL_FWD_INTERNAL_H
#define SL_FWD_INTERNAL_H

#include <stddef.h>

#include "backend/backend.h"
#include "kernels/kernels.h"
#include "model/model.h"

#define FWD_BATCH 64  /* tokens per micro-batch; also the DeltaNet chunk length */
#define FWD_KV_PAGE 256 /* KV cache rows a sequence's caches grow by at least (fwd_seq_reserve) */
#define FWD_MIX_ROWS 512 /* a device backend's attention micro-batch in a layer-major pass (fwd_ws mix_rows) */

/* Optional trace hook (tests): called after the embedding (layer 0), after each layer l (layer l+1)
 * and after the final norm (layer n_layers+1) with the hidden states x [n][H] of positions
 * pos0..pos0+n-1. The final-norm call only happens for tokens whose logits are computed. */
typedef void (*fwd_trace_fn)(void *ctx, int layer, int pos0, int n, const float *x);
void fwd_ws_set_trace(fwd_ws *ws, fwd_trace_fn fn, void *ctx);

/* Selects the DeltaNet prefill algorithm: 1 (default) chunked for micro-batches of more than one
 * token, 0 token recurrence always. */
void fwd_ws_set_chunked(fwd_ws *ws, int chunked);
/* 1 (default): q8/q4 matrices take int8 activations; 0: the exact f32 kernels. */
void fwd_ws_set_int8(fwd_ws *ws, int on);
/* 0 when ws's backend has every op cfg's layers call, else SL_EUNSUPPORTED naming the op and the family
 * (a model opens with it refused rather than failing at its first evaluation). */
sl_status fwd_check_ops(const fwd_ws *ws, const fam_config *cfg, sl_error *err);
/* The hybrid step (moe_hybrid.c, docs/CUDA.md): experts the source hands out in host memory (tn_expert.host) run
 * on pool through the backend's ffn_host. pool NULL: off (default). SL_OK or SL_ENOMEM (then off). */
sl_status fwd_ws_set_hybrid(fwd_ws *ws, pool_t *pool);
void fwd_hybrid_free(fwd_ws *ws);
/* A MoE block's request (n rows, misses: experts not yet in backend memory): the rows come down when any may
 * run on the host, before the device's experts are queued. */
void fwd_hy_begin(fwd_ws *ws, int n, int misses);
/* Expert e (ex.host) kept for fwd_hy_flush, its host memory (the source's slot) held until then. SL_OK, or
 * SL_EINVAL (not kept: the caller releases it). */
sl_status fwd_hy_add(fwd_ws *ws, const fam_config *cfg, int layer, int e, const tn_expert *ex, sl_error *err);
/* The kept experts over their rows of the block on the host's threads, together (run 0: not run, after a failure),
 * outputs in host memory for fwd_hy_end; then each released to xs. SL_OK, or the backend's status with err set. */
sl_status fwd_hy_flush(fwd_ws *ws, const fam_config *cfg, int layer, const tn_expert_src *xs, int run, sl_error *err);
/* The host experts' outputs up, into their cells of exp_out (before the combine). */
void fwd_hy_end(fwd_ws *ws);
/* Experts on other ranks (moe_remote.c, dist/remote.h; docs/SCALE.md): client (borrowed) NULL: off. SL_OK or
 * SL_ENOMEM. */
struct rx_client;
sl_status fwd_ws_set_remote(fwd_ws *ws, struct rx_client *client);
void fwd_remote_free(fwd_ws *ws);
/* Rank 0, a routed and grouped MoE block (ws->e_list, ws->e_count as each expert's end, e_tok the pairs' rows of
 * h [n][H]): one request per rank out. Then, after the caller's own work (the shared expert), the replies: into
 * their (token, slot) cells of exp_out (a micro-batch: _cells, ws->e_tok / e_slot) or added expert by expert into
 * out [n][H] (a layer-major pass: _wide, wb's pairs and weights). SL_OK, or SL_EIO naming the rank and host. */
sl_status fwd_rm_send(fwd_ws *ws, const fam_config *cfg, int layer, const float *h, int n, int n_list,
                      const int *e_tok, sl_error *err);
sl_status fwd_rm_recv_cells(fwd_ws *ws, const fam_config *cfg, int n_list, sl_error *err);
struct fwd_wide;
sl_status fwd_rm_recv_wide(fwd_ws *ws, const fam_config *cfg, int n_list, const struct fwd_wide *wb, float *out,
                           sl_error *err);
/* An expert rank: request msg (len bytes, dist/remote.h RX_MOE) computed with src's experts into y [pairs][H]
 * (host). SL_OK, SL_EFORMAT for a malformed request, or the expert source's or an expert's error. */
sl_status fwd_rm_serve(fwd_ws *ws, const fam_config *cfg, const tn_expert_src *src, const void *msg, size_t len,
                       float *y, sl_error *err);
/* moe.c's expert FFN op over x's rows into y [n][H] (cfg's expert kind with layer's limit, moe_inter), and its check
 * of an expert's parts (shapes, types the backend multiplies): SL_OK or an error naming layer, expert and part. */
be_ffn fwd_expert_ffn(fwd_ws *ws, const fam_config *cfg, int layer, const tn_expert *ex, kern_act *x, float *y);
/* The backend FFN kind (BE_FFN_*) of cfg->expert_kind and its limit into *limit: layer `layer`'s routed experts
 * (shared 0) or shared expert (shared 1); Bailing hybrid's clip with the layer's limit, plain SwiGLU where it is 0. */
int fwd_ffn_kind(const fam_config *cfg, int layer, int shared, float *limit);
sl_status fwd_check_expert(const be_backend *be, const fam_config *cfg, const tn_expert *ex, int layer, int e,
                           sl_error *err);
/* Turns the next-layer expert prefetch hint on (default) or off. */
void fwd_ws_set_prefetch(fwd_ws *ws, int on);
struct rtrace;
/* A routing trace recorded or replayed after each routing (rtrace.h; borrowed, outlives ws), NULL: none. */
void fwd_ws_set_rtrace(fwd_ws *ws, struct rtrace *rt);

/* A sequence's state. */
struct fwd_seq {
    be_backend *be; /* whose memory the buffers are (borrowed) */
    int n_ctx, n_past;
    int n_layers;
    fam_config shape; /* the config the buffers were sized for; fwd_eval checks every sizing field */
    /* full attention: [kv_cap] rows of fwd_kv_row_bytes each ([nkv] heads of kv_type, quant/kv.h), NULL for
     * DeltaNet layers; MLA (cfg->kv_lora > 0): k_cache is [kv_cap][kv_lora + rot_dim] f32 (normed compressed
     * KV | RoPE key), v_cache NULL (mla.c) */
    void *k_cache[SL_MAX_LAYERS], *v_cache[SL_MAX_LAYERS];
    sl_kv_type kv_type, kv_type_v; /* of the attention caches: keys, values (SL_KV_F32 for MLA) */
    /* rows each attention layer's cache may reach: n_ctx, or for a sliding layer (gpt-oss) a ring of
     * min(n_ctx, sliding_window - 1 + FWD_BATCH) rows, position p in row p % kv_cap: a micro-batch's writes
     * never reach the rows its first query (or a retry of it) reads. fwd_kv_keep says how many a state keeps. */
    int kv_max[SL_MAX_LAYERS];
    /* rows allocated now: the cache grows with the positions used (fwd_seq_reserve, in pages of FWD_KV_PAGE
     * rows, at least doubling; by pages under a pool's limit) up to kv_max; until it reaches kv_max no position
     * is at or past kv_cap, so the ring's p % kv_cap is the identity while it grows */
    int kv_cap[SL_MAX_LAYERS];
    /* DeltaNet: conv [K-1][Cq] (pre-conv inputs, oldest first), ssm [nv][dk][dv]; two slots each */
    float *conv[SL_MAX_LAYERS][2], *ssm[SL_MAX_LAYERS][2];
    unsigned char lin_cur[SL_MAX_LAYERS];
    size_t conv_floats, ssm_floats; /* per layer and slot */
    /* DSA (cfg->dsa_topk > 0; mla.c): the indexer's choice [dsa_sel_rows][dsa_topk], rows by position when layers
     * share a choice (dsa_sel_rows = n_ctx), else by token of the micro-batch; scratch, never saved */
    int32_t *dsa_sel;
    int dsa_sel_rows;
    size_t dsa_sel_bytes;
    /* DeepSeek-V4 compressed layers (dsv4.c): the compressor's projections ring and its entries; CSA's
     * indexer's likewise; NULL elsewhere */
    float *cmp_ring[SL_MAX_LAYERS], *cmp_ent[SL_MAX_LAYERS], *idx_ring[SL_MAX_LAYERS], *idx_ent[SL_MAX_LAYERS];
    int wide;        /* 1 (default): evaluate more than FWD_BATCH tokens layer-major (eval_wide) */
    fwd_kv_pool *pool; /* the budget its caches count in (fwd_seq_set_pool), or NULL */
    uint64_t uid;    /* unique in the process: names its buffers to a backend that records steps (step_begin) */
};

/* The per-model workspace. */
#define FWD_MP_BUFS 11 /* forward.c multi_alloc's backend buffers */
struct fwd_ws {
    be_backend *be;  /* borrowed; outlives the workspace */
    uint64_t uid;    /* unique in the process (as fwd_seq's) */
    int int8;        /* 1 (default): q8/q4 matrices multiply int8-quantized activations (kern_matmul_act);
                        0: the exact f32 kernels (sl_model_params.exact) */
    void *act[3];    /* kern_act storage for B rows of act_cols: FWD_ACT_IN, FWD_ACT_GATHER, FWD_ACT_MID */
    int act_cols;
    int mb;          /* rows the micro-batch buffers below (and act) hold now: FWD_BATCH, or mix_rows while a
                        layer-major pass's attention runs through its wider set (forward.c mix_set) */
    int mix_rows;    /* rows of a layer-major pass's attention micro-batch: FWD_BATCH on a host backend, more on a
                        device one (fewer launches, fuller GEMMs); SLUICE_MIX_ROWS sets it (tests) */
    int n_ctx;       /* longest context a sequence evaluated with it may have (attention score rows) */
    fam_config shape;
    int chunked;

    fwd_trace_fn trace;
    void *trace_ctx;

    /* scratch for one micro-batch of B = FWD_BATCH tokens */
    float *x;        /* [B][H] residual stream */
    float *h;        /* [B][H] normed input of a block */
    float *out;      /* [B][H] block output */
    float *big;      /* [B][n_big]: q_proj output (query|gate per head) or Next's raw qkvz */
    float *k, *v;    /* [B][nkv*hd] */
    float *mix;      /* [B][n_mix]: attention / DeltaNet output before o_proj / out_proj */
    float *conv_in;  /* [B][Cq] pre-conv q|k|v */
    float *conv_out; /* [B][Cq] */
    float *z;        /* [B][nv*dv]; MLA's head gate (attn_head_gate) [B][nh] */
    float *ba;       /* [B][2*nv]: Next raw grouped b|a, or Qwen3.5 b (first nv) and a */
    float *gates;    /* [B][2*nv]: beta (first nv), g (log decay) */
    float *mla_q;    /* MLA: [B][nh][kv_lora + rot_dim] absorbed queries (mla.c) */
    float *mla_lat;  /* MLA: [B][nh][kv_lora] attention-weighted latents */
    float *dsa_q, *dsa_w; /* DSA: [B][dsa_heads * dsa_dim] indexer queries, [B][dsa_heads] their weights (mla.c) */
    float *lg;       /* [B][V] logits before they go to the host (backends whose memory is not the host's) */
    float *zeros;    /* [max head_dim] zeros: the weight (1 + 0) of a norm without one (Gemma 4's v_norm) */
    float *sc;       /* [B][H] LongCat-Flash's shortcut MoE output (cfg->moe_shortcut), else 1 float */
    size_t slot_floats; /* per-thread scratch the mixers need (the backend's reserve) */
    int n_big, n_mix;

    /* FFN */
    float *router;     /* [B][E] */
    int *top_e;        /* [B][k] chosen experts, sorted by expert index */
    float *top_w;      /* [B][k] their weights */
    int *e_count;      /* [E] tokens per expert in the micro-batch */
    int *e_tok;        /* [B*k] token list grouped by expert */
    int *e_slot;       /* [B*k] matching top-k slot */
    float *ffn_x;      /* [B][H] gathered inputs */
    float *ffn_g, *ffn_u; /* [B][n_ffn] */
    float *ffn_y;      /* [B][H] */
    float *exp_out;    /* [B][k][H] routed expert outputs by slot */
    float *sh_y;       /* [B][H] shared expert output */
    int *e_list;       /* [E] distinct experts of a micro-batch, ascending */
    int e_cap;         /* E: the entries of e_count, e_list, pf_list, pf_mark, at_ex (cfg_router_rows, at least 1) */
    tn_expert *at_ex;  /* [E] (HOST) the parts of e_list's experts, a block's experts at once (moe.c experts_at_once) */
    int *at_start;     /* [E + 1] (HOST) each one's first pair in the grouping (e_tok, e_slot), then the end */
    int *pf_list;      /* [E] experts predicted for the next MoE layer (prefetch hint) */
    unsigned char *pf_mark; /* [E] */
    int prefetch;      /* 1 (default): hint the next MoE layer's experts to a streaming provider */
    const tn_mat *ffn_next; /* a decode step: the first matrix after this FFN (the next layer's q, the LM head),
                               hinted before the FFN's serial tail (fwd_hint_mat) */
    int n_ffn;
    struct fwd_hybrid *hy; /* the hybrid step's host side (moe_hybrid.c), NULL: off */
    struct rtrace *rt;     /* routing recorded or replayed (rtrace.h), NULL: none */
    struct fwd_remote *rm; /* experts on other ranks (moe_remote.c), NULL: off */
    /* DeepSeek-V4 (hc.c, dsv4.c; 1-float placeholders elsewhere): ones [max(hc*H, hd)] (the unweighted norms'
     * weight), hc_tmp [B][hc*H] the normed streams, hc_mix [B][(2+hc)*hc] a block's pre | post | comb, cmp
     * [B][2*2*max(hd, idx_dim)] a compressor's projections, iq [B][idx_heads*idx_dim], iw [B][idx_heads],
     * isel [B][idx_topk] the indexer's choice, oa [B][o_groups*o_lora]; tok: the token ids of the FFN's rows
     * (HOST, hash routing), set by the caller */
    float *ones, *hc_tmp, *hc_mix, *cmp, *iq, *iw, *oa;
    int *isel;
    const int32_t *tok;
    /* the backend buffers above, to give back (alloc's bytes) */
    struct { void *p; size_t bytes; } dev[56];
    int n_dev;
    /* forward.c eval_multi's backend buffers, kept from one pass to the next and grown when a pass needs more: a
     * server's every decode step is a pass, and on the GPU each made and freed them (cudaFree waits for the device) */
    struct { void *p; size_t bytes; } mp[FWD_MP_BUFS];
    /* HOST: eval_multi's logits of its gathered last rows [rows][V] (forward.c multi_logits): pinned memory that one
     * download a chunk fills where the backend's memory is not the host's, the LM head's own output where it is;
     * kept and grown like mp (lg_host_flags: the alloc flags it was made with) */
    float *lg_host;
    size_t lg_host_bytes;
    int lg_host_flags;
};

/* Activation slots of the workspace: a block's input (ws->h, read by q/k/v, the router, gate/up of the
 * shared and of every expert), an expert's gathered tokens, and a block's inner vector (o_proj's,
 * out_proj's, down's input). */
enum { FWD_ACT_IN = 0, FWD_ACT_GATHER = 1, FWD_ACT_MID = 2 };
/* a describes x [n][cols] (n <= ws->mb) in slot; quantized on first use by a q8/q4 matrix. */
void fwd_act(fwd_ws *ws, kern_act *a, int slot, const float *x, size_t ldx, int n, int cols);
/* How much a hint names: more than a waiting core prefetches in the caller's serial work between two parallel
 * ops of a decode step (norms, the int8 form, RoPE, routing: ~5-20 us at ~20-40 GB/s). */
#define FWD_HINT_BYTES ((size_t)512 << 10)
/* Hints the backend (backend.h hint) that the next parallel op starts with matrix w's first rows: their codes,
 * scales and biases as far as FWD_HINT_BYTES goes. NULL or absent w: nothing. A hint only: no result
 * depends on it. */
void fwd_hint_mat(fwd_ws *ws, const tn_mat *w);
/* y = W x for n rows of x (any n: ws->mb rows at a time), x quantized once for this one matrix. */
void fwd_matmul(fwd_ws *ws, const tn_mat *w, const float *x, size_t ldx, float *y, size_t ldy, int n, int slot);
/* A process-wide unique id for a workspace or a sequence (their buffers, for step_begin's key). */
uint64_t fwd_next_uid(void);
/* Whether any layer of cfg is a DeltaNet layer (linear 1) / a softmax or MLA attention layer (linear 0). */
int fwd_any_layer(const fam_config *cfg, int linear);
/* Bytes of one cache row (one position) of attention layer l's K (v 0) / V (v 1) cache: its KV heads of its head
 * dims (cfg_attn_at) in the sequence's kv_type, or MLA's / V4's f32 row (no V cache: 0). */
size_t fwd_kv_row_bytes(const fwd_seq *sq, int l, int v);
/* Bytes of layer l's K (v 0) / V (v 1) cache (fwd_seq_free gives them back with these; state.c). */
size_t fwd_kv_bytes(const fwd_seq *sq, int l, int v);
/* 1 when attention layer l's cache is a ring (a sliding layer whose window is shorter than the context). */
int fwd_kv_ring(const fwd_seq *sq, int l);
/* KV rows a saved state keeps of attention layer l at n_past positions: all, or a sliding layer's last
 * sliding_window - 1 (what the next query reads besides its own). */
int fwd_kv_keep(const fwd_seq *sq, int layer, int n_past);

/* Mixers and FFNs: input ws->h [n][H] (normed), output ws->out [n][H]; pos0 = position of row 0.
 * The mixers cannot fail themselves (0): their ops' failures are the backend's sticky error, which the caller
 * reads after the block (be_sync). The MoE blocks return SL_OK or an error with err filled (an expert, the
 * expert source, routing). */
int fwd_attention(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_layer_w *lw, int layer, int n, int pos0);
/* fwd_attention of several sequences' rows at once: item i's ns[i] rows follow item i-1's in ws->h (and
 * ws->out), at positions pos0s[i].. of sqs[i]; sum of ns <= FWD_BATCH. The projections run over every row in
 * one op each, RoPE and the attention op per item: each row bitwise fwd_attention of its item alone. */
int fwd_attention_items(fwd_ws *ws, fwd_seq *const *sqs, const int *ns, const int *pos0s, int n_items,
                        const fam_config *cfg, const fam_layer_w *lw, int layer);
/* Multi-head latent attention (cfg->kv_lora > 0), the same contract as fwd_attention. */
int fwd_mla(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_layer_w *lw, int layer, int n, int pos0);
/* Floats of per-thread scratch fwd_mla needs with contexts of n_ctx (0 when cfg is not MLA). */
size_t fwd_mla_slot_floats(const fam_config *cfg, int n_ctx);
/* DSA's buffers (nothing for a config without): a sequence's choice rows (sq->n_ctx, sq->be set), the workspace's
 * indexer queries and weights (appended to ws->dev). 0, or -1 out of memory (the caller's free releases them). */
int fwd_mla_seq_alloc(fwd_seq *sq, const fam_config *cfg);
void fwd_mla_seq_free(fwd_seq *sq);
int fwd_mla_ws_alloc(fwd_ws *ws, const fam_config *cfg);
int fwd_deltanet(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_layer_w *lw, int layer, int n);
/* Qwen3-Next's in_proj_qkvz in the flat order q | k | v | z (deltanet.c; fam_layer_w qkvz_flat): the stored (grouped)
 * row that flat row f of a matrix of `rows` rows takes, or -1 when rows is not cfg's 2 nk dk + 2 nv dv (or nv is not
 * a multiple of nk). A row permutation: every stored row is taken once. */
int64_t fwd_qkvz_row(const fam_config *cfg, int64_t rows, int64_t f);
/* Kimi Delta Attention (cfg->kda; kda.c), the same contract and state as fwd_deltanet. */
int fwd_kda(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_layer_w *lw, int layer, int n);
/* Buffers of a layer-major (wide) evaluation of n tokens. */
struct fwd_wide {
    float *router;    /* [n][E] */
    int *top_e;       /* [n][k] */
    float *top_w;     /* [n][k] */
    int *e_tok, *e_slot; /* [n*k] */
    float *sh_y;      /* [n][H] */
    float *sg;        /* [n] */
};
typedef struct fwd_wide fwd_wide;

sl_status fwd_moe_wide(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int layer, const fam_layer_w *next_lw,
                       int next_layer, const tn_expert_src *experts, int n, const float *x, const float *h, float *out,
                       const fwd_wide *wb, sl_error *err);

/* Before a layer-major pass's first mixer: the first MoE layer's (layer) expert hint to a streaming provider
 * (x: the pass's embeddings [n][H]); only starts reads. Scratch as fwd_moe_wide's hint. */
void fwd_moe_hint_first(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int layer,
                        const tn_expert_src *experts, int n, const float *x, const fwd_wide *wb);
int fwd_moe(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int layer, const fam_layer_w *next_lw,
            int next_layer, const tn_expert_src *experts, int n, sl_error *err);
int fwd_dense_mlp(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int n);

/* The residual around a block (hc.c): X [n][cfg_res_width] rows. block_in: the block's normed input y [n][H]
 * (ffn: the FFN's norm, else attention's), for V4 through the layer's hyper-connection (tmp [n][hc*H] scratch;
 * mix [n][fwd_hc_ldm] keeps pre | post | comb for block_out). block_out: X += out, or V4's expansion. embed: the
 * token rows into X (V4: into every stream). final: the last norm of X's rows into y [n][H] (V4: hc_head's
 * collapse first, through ws->hc_tmp / hc_mix: n <= FWD_BATCH). */
void fwd_block_in_rows(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int ffn, const float *X, int n,
                       float *tmp, float *mix, float *y);
void fwd_block_out_rows(fwd_ws *ws, const fam_config *cfg, float *X, const float *out, const float *mix, int n);
void fwd_embed_rows(fwd_ws *ws, const fam_config *cfg, const fam_weights *w, const int32_t *tokens, int n, float *X);
void fwd_final_rows(fwd_ws *ws, const fam_config *cfg, const fam_weights *w, const float *X, int n, float *y);
/* Floats per token of a hyper-connection's mixes: (2 + hc) * hc (1 when none). */
static inline int fwd_hc_ldm(const fam_config *c) { return c->hc_mult > 0 ? (2 + c->hc_mult) * c->hc_mult : 1; }

/* DeepSeek-V4's attention (dsv4.c), the same contract as fwd_attention; its compressor state in a sequence:
 * alloc / free of layer l's buffers (alloc: 0 or -1), the bytes of a ring (idx: the indexer's), and the state's
 * io of layer l at n_past (p NULL: only counts; to_state: sequence -> p), returning the bytes. */
int fwd_dsv4_attention(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_layer_w *lw, int layer, int n, int pos0);
int fwd_dsv4_alloc(fwd_seq *sq, int l);
void fwd_dsv4_free(fwd_seq *sq, int l);
size_t fwd_dsv4_ring_bytes(const fwd_seq *sq, int l, int idx);
size_t fwd_dsv4_state_io(const fwd_seq *sq, int l, int n_past, char *p, int to_state);

/* forward.c's pieces of a step that multi.c's layer-major pass also takes: layer l's mixer over ws->h's n rows
 * (positions pos0..) into ws->out (0, or a status with the sequence unchanged); the LM head over ws->h's rows
 * normed rows into the caller's (host) logits [rows][V] (rows <= FWD_BATCH). */
int fwd_mixer(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_layer_w *lw, int l, int n, int pos0);
void fwd_emit_logits(fwd_ws *ws, const tn_mat *head, int rows, float *logits);
/* multi.c: a layer-major pass over the items' tokens (every row of every layer before the next layer), committed
 * only when all of it ran; the items were checked (forward.c fwd_eval_batch / fwd_eval). */
sl_status fwd_eval_multi(fwd_ws *ws, const fam_config *cfg, const fam_weights *w, const tn_expert_src *experts,
                         const fwd_item *it, int n_items, sl_error *err);

/* RMSNorm of n rows [n][dim] in place or into y; zero-centred adds 1 to w. */
void fwd_norm_rows(fwd_ws *ws, const float *x, const float *w, int zero_centred, float eps, float *y, int n_rows,
                   int dim);

/* model/block.c, the pieces some families add around a layer's blocks (Gemma 4): embeddings times
 * cfg->embed_scale; out (n rows) RMS-normed in place with w (plain weight) when w is given (sandwich norms); x
 * times lw->layer_scalar when the layer has one; logits [n][V] tanh-capped when cfg->logit_softcap > 0. */
void fwd_embed_scale(fwd_ws *ws, const fam_config *cfg, float *x, int n);
void fwd_post_norm(fwd_ws *ws, const fam_config *cfg, const float *w, float *out, int n);
void fwd_layer_end(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, float *x, int n);
void fwd_softcap(fwd_ws *ws, const fam_config *cfg, float *logits, int n);
/* A MoE layer with a dense MLP beside the experts (cfg->ffn_beside): ws->out = post(post1(mlp(pre(ws->x))) +
 * post2(moe(pre2(ws->x)))) for n <= FWD_BATCH rows (sh_y scratch); the layer-major form over n rows of x into out
 * (hn: the experts' normed input, wb->sh_y scratch). As fwd_moe / fwd_moe_wide return. */
int fwd_ffn_beside(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int layer, const fam_layer_w *next_lw,
                   int next_layer, const tn_expert_src *experts, int n, sl_error *err);
/* LongCat-Flash (cfg->moe_shortcut): ws->x's n rows normed into ws->h; a MoE layer's experts into sc, then (every
 * layer) the dense MLP into ws->out. fwd_shortcut_end: after the layer's FFN was added, x += sc where l is the
 * second of a pair (its previous layer has the MoE). */
int fwd_ffn_shortcut(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int layer, const fam_layer_w *next_lw,
                     int next_layer, const tn_expert_src *experts, int n, sl_error *err);
void fwd_shortcut_end(fwd_ws *ws, const fam_config *cfg, int layer, float *x, const float *sc, int n);
int fwd_ffn_beside_wide(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int layer,
                        const fam_layer_w *next_lw, int next_layer, const tn_expert_src *experts, int n, const float *x,
                        float *hn, float *out, const fwd_wide *wb, sl_error *err);

#endif
