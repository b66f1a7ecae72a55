/*
 * backend_cuda_hold.c — the CUDA table's one-row ops that are held back (cu_ctx pend) and launched joined to the op
 * after them (issue 24; docs/CUDA.md "The resident decode step"): a norm with its int8 form, a combine + residual
 * add + norm, one token's per-head q/k norms with their RoPE. Any other entry point launches what is held first
 * (pend_flush), in the calls' order, so the results are the separate kernels' bit for bit.
 */
#ifdef SL_CUDA

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/backend_cuda_ctx.h"
#include "backend/cuda/cuda_mvn.h"

/* the held router matvec, launched alone (cu_matmul's exact path for one token) */
static void hm_flush(be_backend *be) {
    cu_ctx *c = cu_of(be);
    if (!c->hm_on) return;
    c->hm_on = 0;
    CU(be, slcu_matmul(&c->hm.w, c->hm.x, c->hm.y, c->hm.n, MSG(be)));
}

/* the held q/k/v matvecs, launched alone (cu_matmul_multi's slcu_matmul_i8) */
static void hq_flush(be_backend *be) {
    cu_ctx *c = cu_of(be);
    if (!c->hq_on) return;
    c->hq_on = 0;
    CU(be, slcu_matmul_i8(c->hq.mm, c->hq.n, MSG(be)));
}

/* one token's held norms (pend.nr, n_parts) and their RoPE in one launch: joined to the held q/k/v matvecs when
 * their outputs are the norms' inputs (SLUICE_CUDA_FUSE=qkv), else after them */
static void nr_launch(be_backend *be, int n_parts, int rot, const float *inv_freq, float af, int pos) {
    cu_ctx *c = cu_of(be);
    if (c->hq_on) {
        c->hq_on = 0;
        const int r = slcu_matmul_i8_nr(c->hq.mm, c->hq.n, c->pend.nr, n_parts, rot, inv_freq, af, pos, c->fz + FZ_QKV,
                                        FZ_ROWS - FZ_QKV, MSG(be));
        if (r < 0) cu_fail(be, SL_EIO, c->tmp);
        if (r) return;
        CU(be, slcu_matmul_i8(c->hq.mm, c->hq.n, MSG(be))); /* not its case: the two launches */
    }
    CU(be, slcu_norm_rope(c->pend.nr, n_parts, rot, inv_freq, af, pos, MSG(be)));
}

/* One row (a decode step's norms before a matmul): the norm's kernel makes its int8 form too (nq_*). */
void cu_rmsnorm(be_backend *be, const float *x, float *y, int n_tok, size_t ld, int n_heads, size_t head_stride,
                int dim, const float *w, float w_off, float eps) {
    cu_ctx *c = cu_of(be);
    if (c->step == 1) return;
    hm_flush(be); /* (every op that may hold without pend_flush launches the held matvecs first) */
    if (hold_norm(be, x, y, n_tok, ld, n_heads, head_stride, dim, w, w_off, eps)) return; /* (launches nothing) */
    if (n_tok == 1 && n_heads == 1 && add_norm(be, x, y, dim, w, w_off, eps)) return; /* (the held matvec first) */
    if (n_tok > 1 && n_heads == 1 && add_norm_rows(be, x, y, n_tok, ld, dim, w, w_off, eps)) return; /* (NROWS=1) */
    hq_flush(be);
    SKIP(be);
    slcu_act a;
    if (!c->nq_off && n_tok == 1 && n_heads == 1 && dim % 32 == 0 && dim <= 8192 && nq_room(be, dim) && !slcu_act_bind(&a, c->nq_buf, 1, dim, MSG(be))) {
        CU(be, slcu_rmsnorm_q(x, y, dim, w, w_off, eps, &a, MSG(be)));
        c->nq_y = y, c->nq_dim = dim, c->nq_rows = 1, c->nq_owner = NULL;
        return;
    }
    CU(be, slcu_rmsnorm(x, y, n_tok, ld, n_heads, head_stride, dim, w, w_off, eps, MSG(be)));
}

/* rope over the held norm i's output, one token, the same heads */
static int nr_match(const cu_ctx *c, int i, const float *x, int n_tok, int n_heads, size_t hs, int rot, int inter) {
    const slcu_normrope *p = &c->pend.nr[i];
    return !inter && n_tok == 1 && c->pend.nr_tok == 1 && x == p->y && n_heads == p->n_heads && hs == p->hs &&
           rot <= p->dim && rot <= 1024;
}

void cu_rope(be_backend *be, float *x, int n_tok, size_t ld, int n_heads, size_t head_stride, int rot,
             const float *inv_freq, float attn_factor, int pos0, int interleave) {
    cu_ctx *c = cu_of(be);
    if (c->step == 1) return;
    hm_flush(be);
    if (n_tok > 1 && n_tok <= SLCU_NROWS_MAX && c->pend.nr_tok == n_tok) { /* (NROWS=1: a prefill chunk's tokens) */
        int pos[SLCU_NROWS_MAX];
        for (int t = 0; t < n_tok; t++) pos[t] = pos0 + t;
        if (nr_rows(be, x, n_tok, ld, n_heads, head_stride, rot, inv_freq, attn_factor, pos, interleave)) return;
    }
    const int k = c->pend.kind;
    if ((k == 4 || k == 12) && nr_match(c, 0, x, n_tok, n_heads, head_stride, rot, interleave)) {
        if (k == 4) { /* q's norm alone before it: one launch now */
            c->pend.kind = 0;
            nr_launch(be, 1, rot, inv_freq, attn_factor, pos0);
            return;
        }
        c->pend.kind = 28, c->pend.rot = rot, c->pend.pos = pos0, c->pend.af = attn_factor;
        memcpy(c->pend.freq, inv_freq, (size_t)rot / 2 * sizeof(float));
        return;
    }
    if (k == 28 && nr_match(c, 1, x, n_tok, n_heads, head_stride, rot, interleave) && rot == c->pend.rot &&
        pos0 == c->pend.pos && attn_factor == c->pend.af && !memcmp(inv_freq, c->pend.freq, (size_t)rot / 2 * sizeof(float))) {
        c->pend.kind = 0;
        nr_launch(be, 2, rot, inv_freq, attn_factor, pos0);
        return;
    }
    SKIP(be);
    CU(be, slcu_rope(x, n_tok, ld, n_heads, head_stride, rot, inv_freq, attn_factor, pos0, interleave, c->tmp,
                     sizeof c->tmp));
}

/* one token's per-head norm (q's, then k's) held for the RoPE after it; 0 when it does not fit */
int hold_norm(be_backend *be, const float *x, float *y, int n_tok, size_t ld, int n_heads, size_t hs, int dim,
              const float *w, float w_off, float eps) {
    cu_ctx *c = cu_of(be);
    const int k = c->pend.kind;
    const int rows = n_tok > 1 && n_tok <= SLCU_NROWS_MAX && slcu_nrows_on(); /* (a decode batch's: nr_rows) */
    if (c->nq_off || (n_tok != 1 && !rows) || n_heads < 2 || dim > 1024 || (k != 0 && k != 4)) return 0;
    const int i = k == 4;
    if (k == 4 && n_tok != c->pend.nr_tok) return 0;
    c->pend.nr[i] = (slcu_normrope){.x = x, .y = y, .n_heads = n_heads, .dim = dim, .hs = hs, .w = w, .w_off = w_off,
                                    .eps = eps};
    c->pend.nr_ld[i] = ld;
    c->pend.nr_tok = n_tok;
    c->pend.kind = k | (4 << i);
    c->nq_y = NULL;
    return 1;
}

/* x += y: held back (pend) when it is one row that a norm may follow; after a held combine into y, joined to it */
void cu_add(be_backend *be, float *x, const float *y, size_t n) {
    cu_ctx *c = cu_of(be);
    if (c->step == 1) return;
    hm_flush(be);
    if (c->hq_on && c->hq.kind == FUSE_O && c->hq.mm[0].y == y && !c->pend.kind && !c->nq_off && n <= 65536) {
        c->pend.kind = 1, c->pend.x = x, c->pend.y = y, c->pend.n = n; /* after o's held matvec (SLUICE_CUDA_FUSE=o) */
        c->nq_y = NULL;
        return;
    }
    if (!(c->hq_on && c->hq.kind == FUSE_DOWN && c->pend.kind == 2)) hq_flush(be); /* (down: kept for the norm) */
    if (c->pend.kind == 2 && c->pend.cb.out == y && n == (size_t)c->pend.cb.H) {
        c->pend.kind = 3, c->pend.x = x, c->pend.y = y, c->pend.n = n;
        return;
    }
    pend_flush(be);
    c->nq_y = NULL;
    if (!c->nq_off && n <= 65536) {
        c->pend.kind = 1, c->pend.x = x, c->pend.y = y, c->pend.n = n;
        return;
    }
    CU(be, slcb_add(x, y, n, MSG(be)));
}

void combine_now(be_backend *be, const be_combine *cb) {
    if (cb->w_dev) {
        CU(be, slcu_combine(cb->y, cb->w_dev, cb->k, cb->sh_y, cb->sh_gate, cb->out, cb->n, cb->H, MSG(be)));
    } else if (cb->w) {
        const float *w = dev_upload(be, cb->w, (size_t)cb->n * (size_t)cb->k * sizeof(float));
        if (!w) return;
        CU(be, slcu_combine(cb->y, w, cb->k, cb->sh_y, cb->sh_gate, cb->out, cb->n, cb->H, MSG(be)));
    } else if (cb->sh_y) {
        CU(be, slcb_add_shared(cb->out, cb->sh_y, cb->sh_gate, cb->n, cb->H, MSG(be)));
    }
}

/* one token's combine on device weights is held back (pend): the residual add and norm after it may join it */
void cu_combine(be_backend *be, const be_combine *cb) {
    cu_ctx *c = cu_of(be);
    if (c->step == 1) return;
    hm_flush(be);
    if (c->hq_on && c->hq.kind == FUSE_DOWN && cb->n == 1 && cb->w_dev && cb->y == c->hq.mm[0].y && !c->pend.kind &&
        !c->nq_off) { /* the experts' held down matvec made cb->y: held with it (SLUICE_CUDA_FUSE=down) */
        c->pend.kind = 2, c->pend.cb = *cb;
        c->nq_y = NULL;
        return;
    }
    SKIP(be);
    if (cb->n <= 0) return;
    if (cb->n == 1 && cb->w_dev && !cu_of(be)->nq_off) {
        cu_of(be)->pend.kind = 2, cu_of(be)->pend.cb = *cb;
        return;
    }
    combine_now(be, cb);
}

void pend_flush(be_backend *be) {
    cu_ctx *c = cu_of(be);
    hm_flush(be); /* held before any of the others (the matmuls' SKIP_MM flushed them) */
    hq_flush(be);
    const int k = c->pend.kind;
    c->pend.kind = 0;
    const int nt = c->pend.nr_tok;
    for (int i = 0; i < 2; i++) {
        const slcu_normrope *p = &c->pend.nr[i];
        if (k & (4 << i))
            CU(be, slcu_rmsnorm(p->x, p->y, nt, c->pend.nr_ld[i], p->n_heads, p->hs, p->dim, p->w, p->w_off, p->eps, MSG(be)));
    }
    if ((k & 16) && nt > 1) /* (a decode batch's: nr_rows) */
        CU(be, slcu_rope_at(c->pend.nr[0].y, nt, c->pend.nr_ld[0], c->pend.nr[0].n_heads, c->pend.nr[0].hs, c->pend.rot,
                            c->pend.freq, c->pend.af, c->pend.pos_at, 0, MSG(be)));
    else if (k & 16)
        CU(be, slcu_rope(c->pend.nr[0].y, 1, c->pend.nr_ld[0], c->pend.nr[0].n_heads, c->pend.nr[0].hs, c->pend.rot,
                         c->pend.freq, c->pend.af, c->pend.pos, 0, MSG(be)));
    if (k & 2) combine_now(be, &c->pend.cb);
    if (k & 1) CU(be, slcb_add(c->pend.x, c->pend.y, c->pend.n, MSG(be)));
}

/* the held add (and combine) of x's row, then the norm of x, in one kernel; 0 when they do not fit together */
int add_norm(be_backend *be, const float *x, float *y, int dim, const float *w, float w_off, float eps) {
    cu_ctx *c = cu_of(be);
    if (!(c->pend.kind & 1) || c->pend.x != x || c->pend.n != (size_t)dim || dim > 8192) return 0;
    const be_combine *cb = &c->pend.cb;
    const int comb = c->pend.kind & 2;
    if (comb && cb->k > 16) return 0; /* slcu_add_norm_q's limits */
    slcu_addnorm p = {.x = c->pend.x, .y = c->pend.y, .cy = comb ? cb->y : NULL, .cw = cb->w_dev, .csh = cb->sh_y,
                      .csg = cb->sh_gate, .ck = cb->k, .cout = cb->out, .h = y, .w = w, .w_off = w_off, .eps = eps,
                      .dim = dim};
    /* o's held matvec made y, or the experts' down made the combine's rows: joined (SLUICE_CUDA_FUSE=o, down) while
     * nq_buf, which o's reads, need not grow; else launched first */
    const int join = c->hq_on && slcu_act_bytes(1, dim) <= c->nq_cap &&
                     (comb ? c->hq.kind == FUSE_DOWN && cb->y == c->hq.mm[0].y && cb->k == c->hq.n
                           : c->hq.kind == FUSE_O && c->hq.mm[0].y == c->pend.y);
    if (!join) hq_flush(be);
    slcu_act a;
    const int q = dim % 32 == 0 && nq_room(be, dim) && !slcu_act_bind(&a, c->nq_buf, 1, dim, MSG(be));
    c->pend.kind = 0;
    c->nq_y = NULL;
    int r = 0;
    if (join) {
        c->hq_on = 0;
        if ((r = slcu_matmul_i8_an(c->hq.mm, c->hq.n, &p, q ? &a : NULL, c->fz + 1, MSG(be))) < 0) cu_fail(be, SL_EIO, c->tmp);
        if (!r) CU(be, slcu_matmul_i8(c->hq.mm, c->hq.n, MSG(be))); /* not its case: the two launches */
    }
    if (!r) CU(be, slcu_add_norm_q(&p, q ? &a : NULL, MSG(be)));
    if (q) c->nq_y = y, c->nq_dim = dim, c->nq_rows = 1, c->nq_owner = NULL;
    return 1;
}

/* SLUICE_CUDA_NROWS=1 (cuda_mvn.h): the held add of a decode batch's rows x (2 .. SLCU_NROWS_MAX rows of dim, contiguous),
 * the norm and its int8 form (nq_buf, for the matmul after it) in one launch, or the norm and its int8 form alone
 * (slcu_add_norm_rows: each row the one-row kernel's bits); 0 when it does not fit (nothing launched) */
int add_norm_rows(be_backend *be, const float *x, float *y, int n, size_t ld, int dim, const float *w, float w_off, float eps) {
    cu_ctx *c = cu_of(be);
    if (c->nq_off || !slcu_nrows_on() || n < 2 || n > SLCU_NROWS_MAX || ld != (size_t)dim || dim % 32 || dim > 8192 ||
        c->step)
        return 0;
    slcu_act a;
    if (!nq_room(be, n * dim) || slcu_act_bind(&a, c->nq_buf, n, dim, MSG(be))) return 0; /* (n rows fit one of n dim) */
    hq_flush(be);
    const int add = c->pend.kind == 1 && c->pend.x == x && c->pend.n == (size_t)n * (size_t)dim;
    slcu_addnorm p = {.x = (float *)x, .y = add ? c->pend.y : NULL, .h = y, .w = w, .w_off = w_off, .eps = eps, .dim = dim};
    if (add) c->pend.kind = 0;
    else pend_flush(be);
    CU(be, slcu_add_norm_rows(&p, n, &a, MSG(be)));
    c->nq_y = y, c->nq_dim = dim, c->nq_rows = n, c->nq_owner = NULL;
    return 1;
}

/* n rows at least 2 at the held norms' launch (nr_tok)? the RoPE of part i's output, the same rows and heads */
static int nr_rows_match(const cu_ctx *c, int i, const float *x, int n_tok, size_t ld, int n_heads, size_t hs, int rot) {
    const slcu_normrope *p = &c->pend.nr[i];
    return n_tok == c->pend.nr_tok && x == p->y && ld == c->pend.nr_ld[i] && n_heads == p->n_heads && hs == p->hs &&
           rot <= p->dim && rot <= 1024;
}

/* SLUICE_CUDA_NROWS=1: the RoPE at pos of a decode batch's rows after their held q (and k) norms (hold_norm): q's held
 * with its positions until k's comes, then both norms and both RoPEs in one launch (slcu_norm_rope_rows); q's alone
 * (no k norm held) launched at once. 1 taken, 0 not its case (the caller flushes what is held). */
int nr_rows(be_backend *be, float *x, int n_tok, size_t ld, int n_heads, size_t hs, int rot, const float *inv_freq, float af,
            const int *pos, int interleave) {
    cu_ctx *c = cu_of(be);
    const int k = c->pend.kind;
    if (c->step || interleave || n_tok < 2 || n_tok > SLCU_NROWS_MAX || !rot || !(k == 4 || k == 12 || k == 28)) return 0;
    hm_flush(be);
    if ((k == 4 || k == 12) && nr_rows_match(c, 0, x, n_tok, ld, n_heads, hs, rot)) {
        if (k == 12) { /* q's RoPE held (bit 16) until k's */
            c->pend.kind = 28, c->pend.rot = rot, c->pend.af = af;
            memcpy(c->pend.freq, inv_freq, (size_t)rot / 2 * sizeof(float));
            memcpy(c->pend.pos_at, pos, (size_t)n_tok * sizeof(int));
            return 1;
        }
        c->pend.kind = 0;
        CU(be, slcu_norm_rope_rows(c->pend.nr, c->pend.nr_ld, 1, n_tok, rot, inv_freq, af, pos, MSG(be)));
        return 1;
    }
    if (k == 28 && nr_rows_match(c, 1, x, n_tok, ld, n_heads, hs, rot) && rot == c->pend.rot && af == c->pend.af &&
        !memcmp(inv_freq, c->pend.freq, (size_t)rot / 2 * sizeof(float)) &&
        !memcmp(pos, c->pend.pos_at, (size_t)n_tok * sizeof(int))) {
        c->pend.kind = 0;
        CU(be, slcu_norm_rope_rows(c->pend.nr, c->pend.nr_ld, 2, n_tok, rot, inv_freq, af, pos, MSG(be)));
        return 1;
    }
    return 0;
}

/* ---- SLUICE_CUDA_FUSE: launches that end in their last CTA's work (docs/CUDA.md "The resident decode step") ---- */

int fuse_env(be_backend *be) {
    cu_ctx *c = cu_of(be);
    const char *e;
    /* issue 24's one-row kernels (cuda.h slcu_norm_mode, slcu_route_mode): the norms on a cluster (SLUICE_CUDA_NORM=2)
     * and the route in registers (SLUICE_CUDA_ROUTE=2), the default since call P (bitwise on an H100, -7.5% a step);
     * =1 the kernels before them (the same bits) */
    slcu_norm_mode = (e = getenv("SLUICE_CUDA_NORM")) && !strcmp(e, "1") ? 1 : 2;
    slcu_route_mode = (e = getenv("SLUICE_CUDA_ROUTE")) && !strcmp(e, "1") ? 1 : 2;
    /* the fused router on a warp a row (cuda_mat.cu k_router2, the same bits), the default since call T (bitwise on an
     * H100; 10.7 -> 7.5 us a launch back to back on the 30B router, 108 -> 20 on DeepSeek-V3's); SLUICE_CUDA_ROUTER=1
     * the kernels before it */
    slcu_router_mode = (e = getenv("SLUICE_CUDA_ROUTER")) && !strcmp(e, "1") ? 1 : 2;
    e = getenv("SLUICE_CUDA_FUSE");
    c->fuse = 0;
    /* unset: router (the router's matvec + route in one launch: a resident step 3-4% shorter on an H100 with the
     * overlapped launches on, session 32's call K; docs/CUDA.md); SLUICE_CUDA_FUSE=none (or any list without it) off */
    if (!e) e = "router";
    for (const char *p = e; p && *p;) { /* a comma-separated list: router, qkv, o, down; all */
        const size_t n = strcspn(p, ",");
        if (n == 3 && !strncmp(p, "all", 3)) c->fuse |= FUSE_ROUTER | FUSE_QKV | FUSE_O | FUSE_DOWN;
        if (n == 4 && !strncmp(p, "down", 4)) c->fuse |= FUSE_DOWN;
        if (n == 1 && *p == 'o') c->fuse |= FUSE_O;
        if (n == 6 && !strncmp(p, "router", 6)) c->fuse |= FUSE_ROUTER;
        if (n == 3 && !strncmp(p, "qkv", 3)) c->fuse |= FUSE_QKV;
        p += n + (p[n] == ',');
    }
    if (!c->fuse || !slcu_decode_kernels) return c->fuse = 0, 0;
    int *z = calloc(FZ_N, sizeof *z);
    if (!z || !(c->fz = slcu_alloc(FZ_N * sizeof(int), MSG(be))) || slcu_upload(c->fz, z, FZ_N * sizeof(int), MSG(be))) {
        free(z);
        slcu_free(c->fz);
        c->fz = NULL, c->fuse = 0;
        return -1;
    }
    free(z);
    return 0;
}

int hold_router(be_backend *be, const tn_mat *w, const kern_act *x, float *y, size_t ldy) {
    cu_ctx *c = cu_of(be);
    const dt_type dt = w->dtype;
    const int rows = x->n_tok > 1 && x->n_tok <= SLCU_NROWS_MAX && slcu_nrows_on() && x->ldx == (size_t)w->cols &&
                     ldy == (size_t)w->rows && !c->step; /* (a decode batch's: route_rows) */
    if (!(c->fuse & FUSE_ROUTER) || (x->n_tok != 1 && !rows) || w->rows > 1024 || (dt != DT_F32 && dt != DT_BF16 && dt != DT_F16) ||
        w->cols % (dt == DT_F32 ? 4 : 8))
        return 0;
    c->hm_on = 1, c->hm.w = mat_of(w), c->hm.x = x->x, c->hm.y = y, c->hm.n = x->n_tok;
    return 1;
}

int router_held(be_backend *be, const float *logits) {
    const cu_ctx *c = cu_of(be);
    return c->hm_on && c->hm.n == 1 && c->hm.y == logits && !c->pend.kind && !c->hq_on;
}

int router_take_rows(be_backend *be, const float *logits, int n) {
    cu_ctx *c = cu_of(be);
    if (!c->hm_on || c->hm.n != n || n < 2 || c->hm.y != logits || c->pend.kind || c->hq_on) return 0;
    c->hm_on = 0;
    return 1;
}

int route_rows(be_backend *be, const slcu_router *r, int *top_e, float *top_w) {
    cu_ctx *c = cu_of(be);
    const int rc = c->fz ? slcu_router_rows(&c->hm.w, c->hm.x, c->hm.y, r, c->hm.n, top_e, top_w, c->fz + FZ_ROWS, MSG(be)) : 0;
    if (rc < 0) cu_fail(be, SL_EIO, c->tmp);
    return rc > 0;
}

void router_alone(be_backend *be) {
    cu_ctx *c = cu_of(be);
    CU(be, slcu_matmul(&c->hm.w, c->hm.x, c->hm.y, c->hm.n, MSG(be)));
}

int hold_mm(be_backend *be, const slcu_mm *g, int n, int kind) {
    cu_ctx *c = cu_of(be);
    if (!(c->fuse & kind) || n < 1 || n > HQ_MAX || (kind == FUSE_O && n != 1) || (kind == FUSE_QKV && (n < 2 || n > 3)))
        return 0;
    for (int i = 0; i < n; i++)
        if (g[i].n_tok != 1 || g[i].rows || (g[i].tab && kind != FUSE_DOWN)) return 0;
    for (int i = 0; i < n; i++) c->hq.mm[i] = g[i], c->hq.a[i] = *g[i].a, c->hq.mm[i].a = &c->hq.a[i];
    c->hq.n = n, c->hq.kind = kind, c->hq_on = 1;
    return 1;
}

int route_held(be_backend *be, const slcu_router *r, const float *logits, int *top_e, float *top_w) {
    cu_ctx *c = cu_of(be);
    if (router_held(be, logits)) {
        c->hm_on = 0;
        const int rc = slcu_matvec_route(&c->hm.w, c->hm.x, c->hm.y, r, top_e, top_w, c->fz, MSG(be));
        if (rc) return rc < 0 ? -1 : 0;
        if (slcu_matmul(&c->hm.w, c->hm.x, c->hm.y, 1, MSG(be))) return -1; /* not its case: the two launches */
    }
    pend_flush(be);
    return slcu_route(r, logits, 1, top_e, top_w, MSG(be));
}

#else
typedef int backend_cuda_hold_unused; /* without CUDA=1 this file is empty */
#endif
