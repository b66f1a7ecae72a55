/*
 * test_batch_ops.c — what a batched decode step (sl_batch_eval's pass: model/multi.c fwd_eval_multi) asks of its
 * backend, counted: on a device backend every blocking copy and every sync is a wait for the device and every
 * alloc / free a cudaMalloc / cudaFree (which waits too), so a server's step of B streams must wait once and allocate
 * nothing (issue 24: call M's timeline of 8 streams on an H100 saw 138 blocking copies and 29 allocations a step).
 *
 * The backend is the CPU's, wrapped: every op goes to it, the counted ones through a counter first, and is_host is 0,
 * so the forward pass takes a device backend's paths (its own logits buffers, downloads by copy). A workspace and
 * sequences are made on the wrapper over a fixture's weights (its model opened on the CPU). Each fixture: B sequences
 * with histories, one batch of decode steps to grow the pass's buffers, then the counted one; its logits bitwise each
 * sequence's own step (fwd_eval on twins). Then a batch whose last rows are not the pass's first (an item of 2 tokens,
 * one without logits): bitwise too.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/handles.h"
#include "model/fwd_internal.h"
#include "sluice.h"
#include "test.h"

enum { B = 4, HIST = 9 };

typedef struct {
    int copy[4];        /* by direction: BE_H2D, BE_D2H, BE_D2D, BE_D2H_ASYNC */
    int sync, check, route, alloc, free, embed, copy_rows;
} op_counts;

static be_backend *g_cpu; /* the wrapped backend (the model's) */
static op_counts g_n;

static void *w_alloc(be_backend *be, size_t bytes, int flags) {
    (void)be;
    g_n.alloc++;
    return g_cpu->alloc(g_cpu, bytes, flags);
}
static void w_free(be_backend *be, void *p, size_t bytes, int flags) {
    (void)be;
    g_n.free++;
    g_cpu->free(g_cpu, p, bytes, flags);
}
static void w_copy(be_backend *be, void *dst, const void *src, size_t bytes, int dir) {
    (void)be;
    if (dir >= 0 && dir < 4) g_n.copy[dir]++;
    g_cpu->copy(g_cpu, dst, src, bytes, dir);
}
static sl_status w_sync(be_backend *be) {
    (void)be;
    g_n.sync++;
    return g_cpu->sync(g_cpu);
}
static sl_status w_check(be_backend *be) { /* a device backend's check: no wait */
    (void)be;
    g_n.check++;
    return g_cpu->check ? g_cpu->check(g_cpu) : g_cpu->sync(g_cpu);
}
static sl_status w_route(be_backend *be, const be_route *r) { /* a device backend downloads its choice */
    (void)be;
    g_n.route++;
    return g_cpu->route(g_cpu, r);
}
static void w_embed(be_backend *be, const tn_mat *t, const int32_t *tok, int n, float *x, size_t ldx) {
    (void)be;
    g_n.embed++;
    g_cpu->embed(g_cpu, t, tok, n, x, ldx);
}
static void w_copy_rows(be_backend *be, float *dst, size_t ldd, const int *didx, const float *src, size_t lds,
                        const int *sidx, int n, int cols) {
    (void)be;
    g_n.copy_rows++;
    g_cpu->copy_rows(g_cpu, dst, ldd, didx, src, lds, sidx, n, cols);
}

/* cpu's table with the counted ops wrapped and is_host 0; the other ops get the wrapper, whose ctx is cpu's */
static be_backend wrap(be_backend *cpu) {
    g_cpu = cpu;
    be_backend w = *cpu;
    w.is_host = 0;
    w.alloc = w_alloc, w.free = w_free, w.copy = w_copy, w.sync = w_sync, w.check = w_check, w.route = w_route;
    w.embed = w_embed, w.copy_rows = w_copy_rows;
    return w;
}

static void fill_tokens(int32_t *t, int n, int V, unsigned salt) {
    unsigned x = 2166136261u ^ salt;
    for (int i = 0; i < n; i++) {
        x = x * 16777619u + 12345u;
        t[i] = (int32_t)((x >> 8) % (unsigned)V);
    }
}

static float *poisoned(size_t n) {
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; p && i < n; i++) p[i] = NAN;
    return p;
}

static int n_moe(const fam_config *c) {
    int n = 0;
    for (int l = 0; l < c->n_layers; l++) n += c->layer_moe[l] != 0;
    return n;
}

FIXTURE_TEST(batch_decode_step_waits_once_and_allocates_nothing) {
    sl_model_params mp = sl_model_params_default();
    mp.resident = 1, mp.n_threads = 2, mp.prefetch = -1;
    sl_model *m = NULL;
    sl_error err = {0};
    CHECKF(sl_model_open(test_packed(arg), &mp, &m, &err) == SL_OK, "%s: %s", arg, err.msg);
    const fam_config *cfg = &m->cfg;
    const int V = cfg->vocab, n_ctx = 64;
    be_backend dev = wrap(m->be);
    fwd_ws *ws = fwd_ws_new(cfg, n_ctx, &dev);
    fwd_seq *sq[2][B] = {{0}}; /* [0] batched, [1] their twins, each step alone */
    int32_t tok[B][HIST + 4];
    float *lg[2][B] = {{0}};
    int ok = ws != NULL, same = 1, same2 = 1, rc = 0;
    for (int s = 0; s < 2; s++)
        for (int i = 0; ok && i < B; i++) {
            ok = (sq[s][i] = fwd_seq_new(cfg, n_ctx, SL_KV_F32, SL_KV_F32, &dev)) != NULL;
            ok = ok && (lg[s][i] = poisoned((size_t)2 * V)) != NULL;
        }
    for (int i = 0; ok && i < B; i++) {
        fill_tokens(tok[i], HIST + 4, V, 31u * (unsigned)i + 7u);
        for (int s = 0; ok && s < 2; s++) /* histories of HIST - i tokens: every sequence at its own position */
            ok = !fwd_eval(ws, sq[s][i], cfg, &m->w, &m->src, tok[i], HIST - i, NULL, 0, &err);
    }
    op_counts n;
    memset(&n, 0, sizeof n);
    for (int step = 0; ok && !rc && step < 2; step++) { /* the first grows the pass's buffers; the second is counted */
        fwd_item it[B];
        for (int i = 0; i < B; i++)
            it[i] = (fwd_item){sq[0][i], tok[i] + HIST - i + step, 1, lg[0][i], 0};
        memset(&g_n, 0, sizeof g_n);
        rc = fwd_eval_batch(ws, cfg, &m->w, &m->src, it, B, &err);
        n = g_n;
        for (int i = 0; !rc && i < B; i++) {
            rc = fwd_eval(ws, sq[1][i], cfg, &m->w, &m->src, tok[i] + HIST - i + step, 1, lg[1][i], 0, &err);
            same &= !memcmp(lg[0][i], lg[1][i], (size_t)V * sizeof(float));
        }
    }
    /* the rows of the logits are not the pass's first rows: item 1 has 2 tokens, item 2 wants no logits */
    if (ok && !rc) {
        fwd_item it[B];
        for (int i = 0; i < B; i++) it[i] = (fwd_item){sq[0][i], tok[i] + HIST - i + 2, 1 + (i == 1), i == 2 ? NULL : lg[0][i], 0};
        rc = fwd_eval_batch(ws, cfg, &m->w, &m->src, it, B, &err);
        for (int i = 0; !rc && i < B; i++) {
            rc = fwd_eval(ws, sq[1][i], cfg, &m->w, &m->src, tok[i] + HIST - i + 2, 1 + (i == 1), lg[1][i], 0, &err);
            same2 &= i == 2 || !memcmp(lg[0][i], lg[1][i], (size_t)V * sizeof(float));
        }
    }
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < B; i++) fwd_seq_free(sq[s][i]), free(lg[s][i]);
    fwd_ws_free(ws);
    const int moe = n_moe(cfg);
    sl_model_close(m);
    CHECKF(ok && !rc, "%s: evaluation failed: %s", arg, err.msg);
    printf("    %s: a batch of %d decode steps: %d downloads, %d uploads, %d device copies, %d syncs, %d checks, %d routes "
           "(%d MoE layers), %d allocs, %d frees, %d embeds, %d gathers\n", arg, B, n.copy[BE_D2H], n.copy[BE_H2D],
           n.copy[BE_D2D], n.sync, n.check, n.route, moe, n.alloc, n.free, n.embed, n.copy_rows);
    CHECKF(same, "%s: a sequence's logits in the batch differ from its step alone", arg);
    CHECKF(same2, "%s: a batch whose last rows are gathered: a sequence's logits differ from its step alone", arg);
    /* one wait for the device: the logits of every sequence in one download, then the sync before the commit (which
     * finds the queue empty); no upload that waits; nothing allocated or freed once the buffers have grown; one
     * embedding op for every row (device-to-device copies do not wait: Gemma 4's values are a copy of its keys) */
    CHECKF(n.copy[BE_D2H] == 1, "%s: %d blocking downloads in a batch of %d decode steps (1: the logits)", arg,
           n.copy[BE_D2H], B);
    CHECKF(n.sync == 1, "%s: %d syncs in a batch of decode steps (1: before the commit)", arg, n.sync);
    CHECKF(n.copy[BE_H2D] == 0, "%s: %d blocking uploads in a batch of decode steps", arg, n.copy[BE_H2D]);
    CHECKF(n.alloc == 0 && n.free == 0, "%s: %d allocs and %d frees in a batch of decode steps", arg, n.alloc, n.free);
    CHECKF(n.embed == 1, "%s: %d embedding ops for %d decode steps (1)", arg, n.embed, B);
    /* the route: a download on a device backend; this one has no moe_wide, so every MoE layer routes on the host's
     * copy (the CUDA backend's moe_wide keeps the choice on the device: none there) */
    CHECKF(n.route <= moe, "%s: %d routes for %d MoE layers", arg, n.route, moe);
}
