/*
 * backend_cuda_ctx.h — the CUDA table's state (cu_ctx) and the calls its two files share: backend_cuda.c (the ops,
 * the table) and backend_cuda_hold.c (the one-row ops held back and joined to the next op's kernel; the fused
 * launches of SLUICE_CUDA_FUSE). Only for src/backend/cuda/.
 */
#ifndef SL_BACKEND_CUDA_CTX_H
#define SL_BACKEND_CUDA_CTX_H

#include "backend/backend.h"
#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/cuda.h"

#define HQ_MAX 64 /* matvecs held at most (backend_cuda.c MULTI_MAX: the experts of a one-token step) */

typedef struct cu_ctx {
    be_backend *cpu;          /* routes, on host logits */
    int status;               /* first failure since the last sync */
    char msg[256], tmp[256];
    void *host;               /* scratch: route logits, an embedding row */
    size_t host_cap;
    void *up_host, *up_dev;   /* the upload ring (index arrays, weights from the host): pinned staging, its twin */
    size_t up_cap, up_off;    /* bytes; the next free offset, back to 0 after every full sync */
    slcb_queue *q;            /* the copy stream of copy_async (the tier's H2D copies) */
    int pdl_blocked;          /* 1 once copy_async ran: the overlapped launches are off until destroy (cuda.h slcu_pdl_block) */
    void *rt;                 /* device: the route kernel's top_e [rt_cap], then top_w [rt_cap] */
    size_t rt_cap;
    struct cu_tab {           /* per layer: moe_resident's table (layer_tab), from src with expert 0 at key */
        const void *src, *key;
        int ok, implied[3];     /* implied: every expert's gate, up, down has implied biases (tn_mat bias_implied) */
        int oss;                /* gpt-oss's layout (backend_cuda.c layer_tab) */
        const void **dev;
    } *tab;
    int n_tab;
    slcb_graphs *gr;          /* recorded decode steps (step_begin), NULL: none (unless SLUICE_CUDA_GRAPH=1; no memory) */
    int step, step_pos;       /* the step begun: 0 none, 1 replaying (the ops are skipped), 2 recording; its position */
    /* a one-row rmsnorm's int8 form, made by the norm's kernel (slcu_rmsnorm_q) into nq_buf: valid for a kern_act
     * over nq_y until an op other than a matmul runs; a ready kern_act on it is current only while it is nq_owner */
    void *nq_buf;
    size_t nq_cap;
    const float *nq_y;
    int nq_dim, nq_rows; /* nq_rows: 1, or a decode batch's rows (SLUICE_CUDA_NROWS=1, add_norm_rows) */
    const kern_act *nq_owner;
    int nq_off;               /* SLUICE_CUDA_NQ=0: the norms alone, nothing held */
    /* a one-row add (kind bit 1) and the combine before it (bit 2), held back so that the rmsnorm after them runs
     * in their kernel (slcu_add_norm_q); any other entry point launches them first (pend_flush): the calls' order */
    struct {
        int kind;
        float *x;
        const float *y;
        size_t n;
        be_combine cb;
        /* bits 4, 8: one token's per-head norms (q, then k), 16: the RoPE of the first: each pair one launch */
        slcu_normrope nr[2];
        size_t nr_ld[2];
        int nr_tok;           /* their tokens: 1, or 2 .. SLCU_NROWS_MAX (SLUICE_CUDA_NROWS=1) at positions pos_at */
        int pos_at[8];
        int rot, pos;
        float af, freq[512];
    } pend;
    void *mw;                 /* moe_wide's device scratch (slcu_moe_layer's) */
    size_t mw_cap;
    int embed_host, moe_wide_off; /* SLUICE_CUDA_EMBED / _MOE =0: host embed, no moe_wide */
    int swi_down; /* SLUICE_CUDA_SWIDOWN: 0 the SwiGLU apart, 1 (unset) in the down CTAs, 2 | 3 by gate/up's (3: trigger) */
    /* SLUICE_CUDA_FUSE (backend_cuda_hold.c fuse_env): the fused launches on (FUSE_* bits), their counters (device
     * [FZ_N], zero between launches: each kernel's last CTA resets its own) and the held router matvec (hm) */
    int fuse;
    int *fz;
    int hm_on;
    struct {
        slcu_mat w;
        const float *x;
        float *y;
        int n; /* tokens: 1, or a decode batch's 2 .. 8 (SLUICE_CUDA_NROWS=1: rows of x and y contiguous) */
    } hm;
    int hq_on; /* held one-token int8 matvecs (hold_mm): q/k/v's, o's or the experts' down */
    struct {
        slcu_mm mm[HQ_MAX];
        slcu_act a[HQ_MAX];
        int n, kind; /* kind: the FUSE_* bit it is held for */
    } hq;
} cu_ctx;

static inline cu_ctx *cu_of(be_backend *be) { return be->ctx; }

/* backend_cuda.c */
void cu_fail(be_backend *be, int status, const char *what); /* the first failure since the last sync wins */
void *dev_upload(be_backend *be, const void *src, size_t bytes);
int nq_room(be_backend *be, int dim);
int act_ready(be_backend *be, kern_act *x, slcu_act *a);
slcu_mat mat_of(const tn_mat *w);
int int8_path(const tn_mat *w, const kern_act *x);

/* backend_cuda_tier.c: backend.h moe_batch (the device tier's experts through moe_wide's grouped FFN) */
int cu_moe_batch(be_backend *be, const be_moe_batch *q);

/* backend_cuda_hold.c: pend_flush launches what is held, in the calls' order */
void pend_flush(be_backend *be);
int add_norm(be_backend *be, const float *x, float *y, int dim, const float *w, float w_off, float eps);
int hold_norm(be_backend *be, const float *x, float *y, int n_tok, size_t ld, int n_heads, size_t hs, int dim,
              const float *w, float w_off, float eps);
void combine_now(be_backend *be, const be_combine *cb);
/* SLUICE_CUDA_NROWS=1: a decode batch's held add + norm + int8 form of its rows in one launch; the held q/k norms of its
 * rows and their RoPE at pos in one launch (held or launched: 1; 0 not its case) */
int add_norm_rows(be_backend *be, const float *x, float *y, int n, size_t ld, int dim, const float *w, float w_off, float eps);
int nr_rows(be_backend *be, float *x, int n_tok, size_t ld, int n_heads, size_t hs, int rot, const float *inv_freq, float af,
            const int *pos, int interleave);
void cu_rmsnorm(be_backend *be, const float *x, float *y, int n_tok, size_t ld, int n_heads, size_t head_stride,
                int dim, const float *w, float w_off, float eps);
void cu_rope(be_backend *be, float *x, int n_tok, size_t ld, int n_heads, size_t head_stride, int rot,
             const float *inv_freq, float attn_factor, int pos0, int interleave);
void cu_add(be_backend *be, float *x, const float *y, size_t n);
void cu_combine(be_backend *be, const be_combine *cb);
/* SLUICE_CUDA_FUSE=router,qkv,o,down (any of them, or all): the fused launches, read once when the table is made; 0, or -1 (no memory) */
#define FUSE_ROUTER 1
#define FUSE_QKV 2
#define FUSE_O 4
#define FUSE_DOWN 8
#define FZ_N 1024 /* fz: [0] the router's, [1] o's, [FZ_QKV .. FZ_ROWS) the q and k heads', [FZ_ROWS ..] a batch's router's */
#define FZ_QKV 2
#define FZ_ROWS (FZ_N - 8)
int fuse_env(be_backend *be);
/* a one-token router matvec (f32 / bf16 / f16 weights, x not int8) held for the route after it (SLUICE_CUDA_NROWS=1: also
 * a decode batch's 2 .. 8 rows, x and y contiguous, ldy floats a row of y): 1 held */
int hold_router(be_backend *be, const tn_mat *w, const kern_act *x, float *y, size_t ldy);
int router_held(be_backend *be, const float *logits); /* 1: the matvec of these logits (one token) is held, nothing else */
/* SLUICE_CUDA_NROWS=1: the held router matvec of n >= 2 rows into logits taken out (1; it must then be routed by
 * route_rows or launched by router_alone), else 0 */
int router_take_rows(be_backend *be, const float *logits, int n);
int route_rows(be_backend *be, const slcu_router *r, int *top_e, float *top_w); /* 1 routed in one launch, else 0 */
void router_alone(be_backend *be); /* the taken matvec launched alone (slcu_matmul) */
/* one-token int8 matvecs g[0 .. n) held for the op after them (kind, SLUICE_CUDA_FUSE's bit): q/k/v's (FUSE_QKV, n 2
 * or 3) for the q/k norm + RoPE, o's (FUSE_O, n 1) for the residual add + norm, the experts' down (FUSE_DOWN) for the
 * combine + add + norm. 1 held */
int hold_mm(be_backend *be, const slcu_mm *g, int n, int kind);
/* r's choice of logits into top_e / top_w, joined to the held matvec when it made them (slcu_matvec_route); -1 failed */
int route_held(be_backend *be, const slcu_router *r, const float *logits, int *top_e, float *top_w);

/* a replayed step's ops are in its graph: the op returns at once. Then the held-back ops go first; SKIP also ends
 * the norm's int8 form (the op may write its row); SKIP_MM (matmuls, which only read their input) keeps it. */
#define SKIP_MM(be)                           \
    do {                                      \
        if (cu_of(be)->step == 1) return;     \
        pend_flush(be);                       \
    } while (0)
#define SKIP(be)                              \
    do {                                      \
        if (cu_of(be)->step == 1) return;     \
        pend_flush(be);                       \
        cu_of(be)->nq_y = NULL;               \
    } while (0)

/* a cuda.h / backend_cuda.h call's -1 records its message (MSG) */
#define MSG(be) cu_of(be)->tmp, sizeof cu_of(be)->tmp
#define CU(be, call)                                          \
    do {                                                      \
        if ((call) != 0) cu_fail(be, SL_EIO, cu_of(be)->tmp); \
    } while (0)

#endif
