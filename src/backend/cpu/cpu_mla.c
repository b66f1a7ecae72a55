/*
 * cpu_mla.c — the CPU backend's multi-head latent attention (backend.h be_mla, the mla op; the algebra and its
 * references in src/model/mla.c): the micro-batch's rows into the compressed cache, the absorbed queries (a head an
 * item), then for each (token, head) its scores against the cached rows it sees, their softmax and the weighted sum
 * of the cached latents.
 *
 * The last step two ways, to the same bits. attend_part takes a (token, head) an item, which reads every row the
 * token sees: at decode each of the n_heads heads reads the whole cache (DeepSeek-V3 at depth 8192: 128 reads of
 * 8192 rows of 576 floats a token). mla_split (each token of a micro-batch in turn) reads each row once for all heads,
 * in three hand-offs over the pool:
 *   (1) items of MLA_KEYS keys: every head's dots with them (kern_dot_rows_q: bitwise ops->dot of the same query and
 *       key, kernels.h), with sel the chosen rows gathered first (the same values);
 *   (2) items heads: attend_part's scale, max, exp and double sum in increasing position, then its weights sc / fsum;
 *   (3) items (slice of the latent's r dims, group of heads): the weighted sum on the slice's columns, each element's
 *       chain over the keys in increasing position from zero (kern_axpy_rows_q: bitwise axpy calls, and axpy is
 *       element-wise y + a * x, so a slice of the columns is the same arithmetic as the whole row).
 * So every output is bitwise attend_part's, at any thread count; tests/test_mla.c checks it. It takes prefill's
 * micro-batches too (their register tiles: a 1024-token prompt's prefill 1.2-1.4x, 2048's 1.7x on the one-layer
 * DeepSeek-V3 synth at 2 threads, docs/PERFORMANCE.md); more than MLA_SPLIT_TOK tokens at once, and
 * SLUICE_CPU_MLA_SPLIT=0, keep attend_part.
 *
 * Scratch (cpu_ctx, reserve; sized by src/model/mla.c fwd_mla_slot_floats): attend_part's scores and absorb_part's
 * dequantised kv_b row in a slot a call; the split's scores of a pass of heads [hb][ldsc] from the start of the
 * scratch taken as one array (n_slots * slot_floats floats: nothing else uses it meanwhile), each thread's tile of
 * gathered rows (sel only) at its end. Where the scores of every head do not fit, the heads go in passes.
 *
 * mla_out (backend.h): W_uv of every head over its latents, the exact matmul of each head's rows (bitwise the matmul
 * a head mla.c made before), MLA_OUT_HEADS heads a hand-off.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_mla.h"
#include "quant/quant.h"

#define MLA_KEYS 32     /* keys an item of the scores (rows of a gathered tile: fwd_mla_slot_floats counts 32 rows) */
#define MLA_ROWS 128    /* keys a call of the sums (no sel): 64 columns of them are 32 KiB, read once per 4 heads */
#define MLA_SLICE 64    /* columns a slice of the sums (a multiple of 16: whole vectors in every table) */
#define MLA_SPLIT_TOK 64 /* the automatic choice splits micro-batches of up to this many tokens (FWD_BATCH's) */

typedef struct {
    const be_mla *a;
    const kern_ops *ops;
    cpu_ctx *c;
    atomic_int next_slot;
    /* mla_split: token t sees nk keys (with sel its row of sel), heads h0 .. h0 + hb - 1 this pass, their scores
     * [hb][ldsc] at sc; the sums' items slices of w columns (nsl) x groups of hg heads; each thread's tile: tail
     * floats */
    int t, nk, h0, hb, w, nsl, hg;
    const int32_t *sel;
    float *sc;
    size_t ldsc, tail;
} mla_job;

/* Row `row` of kv_b as f32: the stored row itself for f32 matrices, else dequantised into buf. */
static const float *kvb_row(const tn_mat *m, int row, float *buf) {
    if (m->dtype == DT_F32) return (const float *)m->data + (size_t)row * (size_t)m->cols;
    q_row_to_f32(m, row, buf);
    return buf;
}

/* Absorbed queries, one head per item: q_abs[t][h] = [W_uk_h^T q_nope (r) | q_pe (dr)], W_uk_h = rows
 * h*(dn+dv) .. +dn of kv_b, each row dequantised once for all n tokens and added in row order. */
static void absorb_part(void *ctx, size_t begin, size_t end) {
    mla_job *j = ctx;
    const be_mla *a = j->a;
    const kern_ops *ops = j->ops;
    float *wrow = j->c->scratch + (size_t)atomic_fetch_add(&j->next_slot, 1) * j->c->slot_floats;
    const int r = a->r, dr = a->dr, dn = a->dn, dv = a->dv, row = r + dr, nh = a->n_heads, qh = dn + dr;
    for (size_t h = begin; h < end; h++) {
        for (int t = 0; t < a->n; t++) {
            float *qc = a->q_abs + ((size_t)t * nh + h) * row;
            memset(qc, 0, (size_t)r * sizeof(float));
            memcpy(qc + r, a->q + (size_t)t * a->ldq + h * qh + dn, (size_t)dr * sizeof(float));
        }
        for (int i = 0; i < dn; i++) {
            const float *w = kvb_row(a->kv_b, (int)h * (dn + dv) + i, wrow);
            for (int t = 0; t < a->n; t++)
                ops->axpy(a->q[(size_t)t * a->ldq + h * qh + i], w, a->q_abs + ((size_t)t * nh + h) * row, r);
        }
    }
}

/* One (token, head) per item: scores against cached rows 0..pos (with sel: the chosen ones), softmax, the weighted
 * sum of the cached latents into lat[t][h]. */
static void attend_part(void *ctx, size_t begin, size_t end) {
    mla_job *j = ctx;
    const be_mla *a = j->a;
    const kern_ops *ops = j->ops;
    float *sc = j->c->scratch + (size_t)atomic_fetch_add(&j->next_slot, 1) * j->c->slot_floats;
    const int r = a->r, row = r + a->dr;
    const size_t ldc = (size_t)a->ldc;
    for (size_t it = begin; it < end; it++) {
        int t = (int)(it / (size_t)a->n_heads);
        int n_keys = a->pos0 + t + 1;
        const int32_t *sel = a->sel ? a->sel + (size_t)t * a->sel_ld : NULL;
        if (sel && n_keys > a->sel_k) n_keys = a->sel_k;
#define KEY(p) (a->cache + (size_t)(sel ? sel[p] : (p)) * ldc)
        const float *qc = a->q_abs + it * (size_t)row;
        float mx = -INFINITY;
        for (int p = 0; p < n_keys; p++) {
            sc[p] = ops->dot(qc, KEY(p), row) * a->scale;
            if (sc[p] > mx) mx = sc[p];
        }
        double sum = 0.0;
        for (int p = 0; p < n_keys; p++) {
            sc[p] = expf(sc[p] - mx);
            sum += sc[p];
        }
        float fsum = (float)sum, *lat = a->lat + it * (size_t)r;
        memset(lat, 0, (size_t)r * sizeof(float));
        for (int p = 0; p < n_keys; p++) ops->axpy(sc[p] / fsum, KEY(p), lat, r);
#undef KEY
    }
}

/* ---- the split of one token's attention: keys, heads, slices ---------------------------------- */

static int mla_split_mode = -1; /* be_cpu_mla_split */
static int mla_split_off;       /* SLUICE_CPU_MLA_SPLIT=0: the automatic choice never splits (timing attend_part in
                                   one process's environment; the bits are the same either way) */
static pthread_once_t mla_split_once = PTHREAD_ONCE_INIT;
static atomic_long mla_split_calls;

static void mla_split_env(void) {
    const char *e = getenv("SLUICE_CPU_MLA_SPLIT");
    mla_split_off = e && !strcmp(e, "0");
}

int be_cpu_mla_split(int mode) {
    const int old = mla_split_mode;
    mla_split_mode = mode;
    return old;
}

long be_cpu_mla_splits(void) { return atomic_load(&mla_split_calls); }

/* This thread's tile at the scratch's end (the scores below every thread's). */
static float *split_tile(const mla_job *j) {
    const cpu_ctx *c = j->c;
    return c->scratch + (size_t)c->n_slots * c->slot_floats - (size_t)(pool_thread(c->pool) + 1) * j->tail;
}

/* Rows p0 .. p0 + n - 1 of the token's keys, columns c0 .. c0 + cw - 1, as f32 rows of *ld floats: the cache's own
 * rows, or with sel the chosen ones copied into tile (ld cw). */
static const float *split_rows(const mla_job *j, int p0, int n, int c0, int cw, float *tile, size_t *ld) {
    const be_mla *a = j->a;
    const size_t ldc = (size_t)a->ldc;
    if (!j->sel) {
        *ld = ldc;
        return a->cache + (size_t)p0 * ldc + (size_t)c0;
    }
    for (int i = 0; i < n; i++)
        memcpy(tile + (size_t)i * (size_t)cw, a->cache + (size_t)j->sel[p0 + i] * ldc + (size_t)c0,
               (size_t)cw * sizeof(float));
    *ld = (size_t)cw;
    return tile;
}

/* (1): items of MLA_KEYS keys: the pass's heads' dots with each (the scale comes in (2), as attend_part's product). */
static void split_scores_part(void *ctx, size_t begin, size_t end) {
    mla_job *j = ctx;
    const be_mla *a = j->a;
    const int row = a->r + a->dr;
    const float *q = a->q_abs + ((size_t)j->t * (size_t)a->n_heads + (size_t)j->h0) * (size_t)row;
    float *tile = j->sel ? split_tile(j) : NULL;
    for (size_t it = begin; it < end; it++) {
        const int p0 = (int)it * MLA_KEYS, n = j->nk - p0 < MLA_KEYS ? j->nk - p0 : MLA_KEYS;
        size_t ld;
        const float *x = split_rows(j, p0, n, 0, row, tile, &ld);
        kern_dot_rows_q(j->ops, q, (size_t)row, j->hb, x, ld, n, row, j->sc + p0, j->ldsc);
    }
}

/* (2): items heads: attend_part's softmax on the head's row, its weights left in place. */
static void split_softmax_part(void *ctx, size_t begin, size_t end) {
    const mla_job *j = ctx;
    const float scale = j->a->scale;
    const int nk = j->nk;
    for (size_t h = begin; h < end; h++) {
        float *sc = j->sc + h * j->ldsc, mx = -INFINITY;
        for (int p = 0; p < nk; p++) {
            sc[p] = sc[p] * scale;
            if (sc[p] > mx) mx = sc[p];
        }
        double sum = 0.0;
        for (int p = 0; p < nk; p++) {
            sc[p] = expf(sc[p] - mx);
            sum += sc[p];
        }
        const float fsum = (float)sum;
        for (int p = 0; p < nk; p++) sc[p] = sc[p] / fsum;
    }
}

/* (3): items (slice of the latent dims, group of heads): lat[t][h] on the slice's columns, zeroed, plus each key's
 * weight times its row, keys in increasing position. */
static void split_sums_part(void *ctx, size_t begin, size_t end) {
    mla_job *j = ctx;
    const be_mla *a = j->a;
    const int r = a->r;
    float *tile = j->sel ? split_tile(j) : NULL;
    for (size_t it = begin; it < end; it++) {
        const int c0 = (int)(it % (size_t)j->nsl) * j->w, cw = r - c0 < j->w ? r - c0 : j->w;
        const int i0 = (int)(it / (size_t)j->nsl) * j->hg, ni = j->hb - i0 < j->hg ? j->hb - i0 : j->hg;
        float *y = a->lat + ((size_t)j->t * (size_t)a->n_heads + (size_t)(j->h0 + i0)) * (size_t)r + (size_t)c0;
        const float *w = j->sc + (size_t)i0 * j->ldsc;
        for (int i = 0; i < ni; i++) memset(y + (size_t)i * r, 0, (size_t)cw * sizeof(float));
        const int step = j->sel ? MLA_KEYS : MLA_ROWS; /* a gathered tile holds MLA_KEYS rows */
        for (int p0 = 0; p0 < j->nk; p0 += step) {
            const int n = j->nk - p0 < step ? j->nk - p0 : step;
            size_t ld;
            const float *x = split_rows(j, p0, n, c0, cw, tile, &ld);
            kern_axpy_rows_q(j->ops, w + p0, j->ldsc, ni, n, x, ld, y, (size_t)r, cw);
        }
    }
}

/* Each token's attention split three ways (the file's header), when the mode allows it (automatic: n <=
 * MLA_SPLIT_TOK) and the scratch holds the scores of at least one head beside every thread's tile. Returns 1 when
 * done, 0 to leave it all to attend_part. */
static int mla_split(cpu_ctx *c, mla_job *j) {
    const be_mla *a = j->a;
    pthread_once(&mla_split_once, mla_split_env);
    if (mla_split_mode == 0 || (mla_split_mode < 0 && (mla_split_off || a->n > MLA_SPLIT_TOK))) return 0;
    const int T = pool_size(c->pool) > 1 ? pool_size(c->pool) : 1, nh = a->n_heads, r = a->r, row = r + a->dr;
    int nk_max = a->pos0 + a->n; /* the last token's keys: the most any token sees */
    if (a->sel && nk_max > a->sel_k) nk_max = a->sel_k;
    if (nk_max < 1) return 0;
    j->ldsc = ((size_t)nk_max + 15) / 16 * 16;
    j->w = r < MLA_SLICE ? r : MLA_SLICE;
    j->nsl = (r + j->w - 1) / j->w;
    j->tail = a->sel ? ((size_t)MLA_KEYS * (size_t)row + 15) / 16 * 16 : 0; /* the widest rows a tile gathers */
    const size_t total = (size_t)c->n_slots * c->slot_floats;
    size_t fit = (size_t)T * j->tail < total ? (total - (size_t)T * j->tail) / j->ldsc : 0; /* heads' scores */
    if (fit < 1) return 0;
    if (fit < (size_t)nh && fit >= 4) fit -= fit % 4; /* passes of whole 4-head blocks (dot_rows_q, axpy_rows_q) */
    const int hb_max = fit < (size_t)nh ? (int)fit : nh;
    j->sc = c->scratch;
    for (int t = 0; t < a->n; t++) {
        j->t = t;
        j->nk = a->pos0 + t + 1;
        j->sel = a->sel ? a->sel + (size_t)t * (size_t)a->sel_ld : NULL;
        if (j->sel && j->nk > a->sel_k) j->nk = a->sel_k;
        for (j->h0 = 0; j->h0 < nh; j->h0 += j->hb) {
            j->hb = nh - j->h0 < hb_max ? nh - j->h0 : hb_max;
            /* the sums: slices, and groups of whole 4-head blocks where slices are fewer than two a thread */
            const int ngr = (2 * T + j->nsl - 1) / j->nsl;
            j->hg = (j->hb + ngr - 1) / ngr;
            j->hg = (j->hg + 3) / 4 * 4;
            const size_t n_sums = (size_t)j->nsl * (size_t)((j->hb + j->hg - 1) / j->hg);
            pool_for_any(c->pool, (size_t)(j->nk + MLA_KEYS - 1) / MLA_KEYS, 1, split_scores_part, j);
            pool_for_any(c->pool, (size_t)j->hb, 1, split_softmax_part, j);
            pool_for_any(c->pool, n_sums, 1, split_sums_part, j);
        }
    }
    atomic_fetch_add(&mla_split_calls, 1);
    return 1;
}

void cpu_mla(be_backend *be, const be_mla *a) {
    cpu_ctx *c = cpu_of(be);
    const size_t row = (size_t)a->ldc;
    for (int t = 0; t < a->n; t++)
        memcpy(a->cache + (size_t)(a->pos0 + t) * row, a->ckv + (size_t)t * row, row * sizeof(float));
    mla_job j = {.a = a, .ops = c->ops, .c = c};
    atomic_init(&j.next_slot, 0);
    pool_for(c->pool, (size_t)a->n_heads, 1, absorb_part, &j);
    if (mla_split(c, &j)) return;
    atomic_init(&j.next_slot, 0);
    pool_for(c->pool, (size_t)a->n * (size_t)a->n_heads, 1, attend_part, &j);
}

#define MLA_OUT_HEADS 64 /* heads a hand-off of mla_out (kern_matmul_multi takes up to 256 matrices) */

/* backend.h mla_out: each head's W_uv rows over its latents with the exact kernels, MLA_OUT_HEADS heads a
 * kern_matmul_multi (one hand-off where a matmul a head took one each; bitwise each matmul alone, kernels.h). Always
 * taken (1); a failure is the backend's sticky error. */
int cpu_mla_out(be_backend *be, const be_mla *a) {
    cpu_ctx *c = cpu_of(be);
    tn_mat w[MLA_OUT_HEADS];
    kern_act x[MLA_OUT_HEADS];
    kern_mm mm[MLA_OUT_HEADS];
    const size_t ldx = (size_t)a->n_heads * (size_t)a->r;
    for (int h0 = 0; h0 < a->n_heads; h0 += MLA_OUT_HEADS) {
        const int nb = a->n_heads - h0 < MLA_OUT_HEADS ? a->n_heads - h0 : MLA_OUT_HEADS;
        for (int i = 0; i < nb; i++) {
            const int h = h0 + i;
            w[i] = q_rows_view(a->kv_b, h * (a->dn + a->dv) + a->dn, a->dv);
            kern_act_init(&x[i], NULL, a->lat + (size_t)h * (size_t)a->r, ldx, a->n, a->r, 0);
            mm[i] = (kern_mm){&w[i], &x[i], a->out + (size_t)h * (size_t)a->dv, a->ldo};
        }
        int rc = kern_matmul_multi(c->ops, c->pool, mm, nb);
        if (rc) {
            cpu_fail(be, rc, rc == SL_ENOMEM ? "out of memory in mla_out" : "mla_out: an unsupported kv_b");
            break;
        }
    }
    return 1;
}
