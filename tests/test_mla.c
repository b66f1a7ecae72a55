/*
 * test_mla.c — the CPU backend's multi-head latent attention split (src/backend/cpu/cpu_mla.c mla_split: scores over
 * chunks of keys for every head at once, the softmax per head, the weighted sums over slices of the latent dims)
 * against the (token, head) items it replaces (attend_part, be_cpu_mla_split(0)), bitwise: 1 to 128 heads, latents
 * of 16 to 512 dims (not all multiples of a slice or a vector), depths 1 to 8192 (partial last chunks), one token and
 * a few and a prefill's 64, with and without DSA's chosen keys (sel), heads in passes where the scratch is small, on
 * the scalar, AVX2 and AVX-512 tables where the CPU has them, at 1, 2, 3 and 16 threads. The DeepSeek-V3 shape at
 * depth 8192 (128 heads, r 512, dr 64, with and without sel of 2048) on the default table. And the mla_out op (W_uv of
 * every head at once) bitwise the matmul a head it replaces.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_mla.h"
#include "quant/quant.h"
#include "test.h"
#include "util/threadpool.h"

static float frand(void) { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }

typedef struct {
    int nh, r, dr, dn, dv, extra; /* extra: floats of a cache row past r + dr (DSA's index key) */
    int depth, n, sel_k;          /* the last token sees depth keys; n tokens; sel_k 0: no sel */
    int small;                    /* 1: about one head's scores a thread (passes); 2: too small (no split) */
} mla_case;

typedef struct {
    float *cache, *q, *ckv, *kvb, *q_abs;
    int32_t *sel;
    tn_mat kv_b;
} mla_data;

static void data_free(mla_data *d) {
    free(d->cache), free(d->q), free(d->ckv), free(d->kvb), free(d->q_abs), free(d->sel);
}

static int data_make(const mla_case *c, unsigned seed, mla_data *d) {
    srand(seed);
    const int ldc = c->r + c->dr + c->extra, qh = c->dn + c->dr, pos0 = c->depth - c->n;
    const size_t kvb_rows = (size_t)c->nh * (size_t)(c->dn + c->dv);
    memset(d, 0, sizeof *d);
    d->cache = malloc((size_t)c->depth * (size_t)ldc * sizeof(float));
    d->q = malloc((size_t)c->n * (size_t)c->nh * (size_t)qh * sizeof(float));
    d->ckv = malloc((size_t)c->n * (size_t)ldc * sizeof(float));
    d->kvb = malloc(kvb_rows * (size_t)c->r * sizeof(float));
    d->q_abs = malloc((size_t)c->n * (size_t)c->nh * (size_t)(c->r + c->dr) * sizeof(float));
    d->sel = c->sel_k ? malloc((size_t)c->n * (size_t)c->sel_k * sizeof(int32_t)) : NULL;
    if (!d->cache || !d->q || !d->ckv || !d->kvb || !d->q_abs || (c->sel_k && !d->sel)) {
        data_free(d);
        return 0;
    }
    for (size_t i = 0; i < (size_t)c->depth * (size_t)ldc; i++) d->cache[i] = frand();
    for (size_t i = 0; i < (size_t)c->n * (size_t)c->nh * (size_t)qh; i++) d->q[i] = 0.5f * frand();
    for (size_t i = 0; i < (size_t)c->n * (size_t)ldc; i++) d->ckv[i] = frand();
    for (size_t i = 0; i < kvb_rows * (size_t)c->r; i++) d->kvb[i] = 0.3f * frand();
    /* token t's choice: min(sel_k, pos + 1) distinct positions of 0 .. pos ascending (each kept with the chance
     * still needed over what is left), -1 after */
    for (int t = 0; c->sel_k && t < c->n; t++) {
        const int pos = pos0 + t, want = pos + 1 < c->sel_k ? pos + 1 : c->sel_k;
        int32_t *s = d->sel + (size_t)t * c->sel_k;
        int got = 0;
        for (int p = 0; p <= pos && got < want; p++)
            if ((double)rand() / ((double)RAND_MAX + 1.0) * (double)(pos + 1 - p) < (double)(want - got)) s[got++] = p;
        for (int i = got; i < c->sel_k; i++) s[i] = -1;
    }
    d->kv_b = (tn_mat){.data = d->kvb, .dtype = DT_F32, .rows = (int)kvb_rows, .cols = c->r};
    return 1;
}

/* The case's attention on be into lat [n][nh][r] (the rows it stores in the cache are the same every time). */
static void run_case(be_backend *be, const mla_case *c, mla_data *d, float *lat) {
    const int ldc = c->r + c->dr + c->extra, qh = c->dn + c->dr;
    const be_mla a = {.q = d->q, .ldq = (size_t)c->nh * (size_t)qh, .ckv = d->ckv, .cache = d->cache, .ldc = ldc,
                      .sel = d->sel, .sel_ld = c->sel_k, .sel_k = c->sel_k, .kv_b = &d->kv_b, .n = c->n,
                      .pos0 = c->depth - c->n, .n_heads = c->nh, .r = c->r, .dr = c->dr, .dn = c->dn, .dv = c->dv,
                      .scale = 2.0f / sqrtf((float)qh), .q_abs = d->q_abs, .lat = lat};
    be->mla(be, &a);
}

/* The slot floats a case reserves at `threads` threads: model/mla.c fwd_mla_slot_floats' sizing (every head's scores,
 * a tile of 32 rows), or (small 1) about one head's scores a thread beside attend_part's needs, or (small 2) only
 * attend_part's (no room for a tile of DSA's rows). */
static size_t case_slot(const mla_case *c, int threads) {
    const size_t ldsc = ((size_t)c->depth + 15) / 16 * 16, row = (size_t)(c->r + c->dr + c->extra);
    const size_t old = (size_t)c->depth + (size_t)c->r + 16;
    if (c->small == 2) return old;
    if (c->small == 1) return ldsc + 32 * row + 64 + (size_t)(threads % 3) * 100;
    return (size_t)c->nh * ldsc + 32 * row + 64;
}

/* The case at `threads` threads on ops: attend_part's (be_cpu_mla_split(0)) into ref unless ref is NULL, the split
 * (1) into got and the default choice (-1) into aut, each poisoned first with its own bytes; *n_split the calls the
 * split took of the last two. 0 when no backend could be made. */
static int run_modes(const kern_ops *ops, int threads, const mla_case *c, mla_data *d, float *ref, float *got,
                     float *aut, long *n_split) {
    const size_t n_out = (size_t)c->n * (size_t)c->nh * (size_t)c->r;
    pool_t *pool = pool_new(threads);
    be_backend *be = pool ? be_cpu_new(ops, pool) : NULL;
    if (!be || be->reserve(be, case_slot(c, threads))) {
        be_close(be), pool_free(pool);
        return 0;
    }
    const int was = be_cpu_mla_split(0);
    if (ref) {
        memset(ref, 0x7f, n_out * sizeof(float));
        run_case(be, c, d, ref);
    }
    const long n0 = be_cpu_mla_splits();
    memset(got, 0xff, n_out * sizeof(float));
    be_cpu_mla_split(1);
    run_case(be, c, d, got);
    n_split[0] = be_cpu_mla_splits() - n0;
    memset(aut, 0xfe, n_out * sizeof(float));
    be_cpu_mla_split(-1);
    run_case(be, c, d, aut);
    n_split[1] = be_cpu_mla_splits() - n0 - n_split[0];
    be_cpu_mla_split(was);
    be_close(be);
    pool_free(pool);
    return 1;
}

/* Every case on the tables (big: the default table only) x 1, 2, 3, 16 threads: the split (be_cpu_mla_split(1)) and
 * the default choice bitwise attend_part's (0), which is finite and within the latents' range; the split taken where
 * the case expects it (not with small 2; by default up to 64 tokens). big: attend_part's once, at 2 threads (it is the
 * slow one, and its bits do not depend on the threads). */
static void check_cases(const mla_case *cases, int n_cases, int big) {
    const kern_ops *tabs[3] = {kern_scalar_ops(), kern_avx2_ops(), kern_avx512_ops()};
    const int threads[4] = {1, 2, 3, 16};
    for (int ci = 0; ci < n_cases && !test_failed(); ci++) {
        const mla_case *c = &cases[ci];
        const unsigned seed = test_seed() + 7919u * (unsigned)ci;
        const size_t n_out = (size_t)c->n * (size_t)c->nh * (size_t)c->r;
        mla_data d;
        CHECK(data_make(c, seed, &d));
        float *ref = malloc(n_out * sizeof(float)), *got = malloc(n_out * sizeof(float));
        float *aut = malloc(n_out * sizeof(float));
        long ns[2];
        if (big && ref && got && aut && !run_modes(kern_default_ops(), 2, c, &d, ref, got, aut, ns))
            test_fail(__FILE__, __LINE__, "no backend");
        for (int ti = big ? 2 : 0; ref && got && aut && ti < 3 && !test_failed(); ti++) {
            const kern_ops *ops = big ? kern_default_ops() : tabs[ti];
            for (int th = 0; ops && th < 4 && !test_failed(); th++) {
                if (!run_modes(ops, threads[th], c, &d, big ? NULL : ref, got, aut, ns)) {
                    test_fail(__FILE__, __LINE__, "no backend");
                    break;
                }
                const int want = c->small != 2;
                if (ns[0] != want || ns[1] != (want && c->n <= 64)) /* cpu_mla.c MLA_SPLIT_TOK */
                    test_fail(__FILE__, __LINE__, "case %d at %d threads: the split ran %ld (forced) and %ld (default) "
                              "times, expected %d and %d", ci, threads[th], ns[0], ns[1], want, want && c->n <= 64);
                size_t bad = 0, first = 0;
                for (size_t i = n_out; i-- > 0;)
                    if (memcmp(&ref[i], &got[i], sizeof(float)) || memcmp(&ref[i], &aut[i], sizeof(float)))
                        bad++, first = i;
                int finite = 1;
                for (size_t i = 0; i < n_out; i++) finite &= isfinite(ref[i]) && fabsf(ref[i]) <= 1.0f;
                if (bad || !finite)
                    test_fail(__FILE__, __LINE__,
                              "%s, %d threads, case %d (heads %d, r %d, dr %d, depth %d, n %d, sel_k %d, small %d): "
                              "%s%zu of %zu outputs differ, first %zu: %.9g split, %.9g default, %.9g attend_part "
                              "(seed %u)",
                              ops->name, threads[th], ci, c->nh, c->r, c->dr, c->depth, c->n, c->sel_k, c->small,
                              finite ? "" : "not finite or past the latents' range; ", bad, n_out, first,
                              (double)got[first], (double)aut[first], (double)ref[first], seed);
            }
        }
        CHECK(ref && got && aut);
        free(ref), free(got), free(aut);
        data_free(&d);
    }
}

/* Small shapes: one head to 64, latents of 16 to 512 (40 and 130: a slice and a vector cut short), cache rows with
 * more after [c | k_pe], depths 1 to 1000, 1, 3 and 64 tokens, sel with fewer and more keys than sel_k, heads in
 * passes (small 1), a scratch with no room for the split (small 2: attend_part runs for both). */
TEST(mla_split_bitwise_attend) {
    static const mla_case cases[] = {
        {1, 16, 4, 8, 8, 0, 1, 1, 0, 0},          {1, 512, 64, 16, 16, 0, 33, 1, 0, 0},
        {3, 40, 8, 8, 8, 3, 100, 1, 0, 0},        {8, 96, 16, 16, 16, 0, 257, 1, 0, 0},
        {5, 130, 2, 12, 12, 0, 1000, 1, 0, 0},    {12, 128, 16, 16, 16, 0, 31, 1, 0, 0},
        {16, 512, 64, 32, 16, 128, 777, 1, 200, 0}, {16, 512, 64, 32, 16, 128, 150, 1, 200, 0},
        {7, 64, 8, 8, 8, 0, 100, 3, 0, 0},        {7, 64, 8, 8, 8, 16, 100, 3, 50, 0},
        {4, 32, 8, 8, 8, 0, 200, 64, 0, 0},       {4, 32, 8, 8, 8, 5, 200, 64, 70, 0},
        {64, 48, 16, 8, 8, 0, 1000, 1, 0, 1},     {64, 48, 16, 8, 8, 8, 1000, 2, 300, 1},
        {8, 64, 8, 8, 8, 0, 100, 1, 40, 2},
    };
    check_cases(cases, (int)(sizeof cases / sizeof cases[0]), 0);
}

/* DeepSeek-V3 at depth 8192 and 4099 (128 heads, r 512, dr 64), V3.2's sel of 2048 from 8192 (rows of 576 + 128). */
TEST(mla_split_bitwise_deepseek) {
    static const mla_case cases[] = {
        {128, 512, 64, 128, 16, 0, 8192, 1, 0, 0},
        {128, 512, 64, 128, 16, 0, 4099, 1, 0, 0},
        {128, 512, 64, 128, 16, 128, 8192, 1, 2048, 0},
    };
    check_cases(cases, 3, 1);
}

/* ---- mla_out (backend.h): W_uv of every head in one op ------------------------------------------------------------
 * The CPU op against the loop it replaces (src/model/mla.c before it: a head's rows as a matrix of their own, the exact
 * matmul over the head's latents), bitwise; against q_row_to_f32's dequantised rows in double within 1e-5 of the
 * largest |value| (the row views point at the right rows); the outputs between heads (ldo > n_heads * dv) untouched;
 * a token of the batch bitwise the token alone. f32, bf16, q8 and q4 (group 32 and 64) kv_b, 1 to 128 heads, 1 to 70
 * tokens, at 1 and 3 threads. */

#define CHECK_OUT(c, ...)                                     \
    do {                                                      \
        if (!(c)) {                                           \
            test_fail(__FILE__, __LINE__, __VA_ARGS__);       \
            goto done;                                        \
        }                                                     \
    } while (0)

typedef struct {
    int nh, r, dn, dv, n;
    dt_type dt;
    int group;
} out_case;

static void check_out_case(const out_case *c, int threads, unsigned seed) {
    srand(seed);
    const int rows = c->nh * (c->dn + c->dv), ldo = c->nh * c->dv + 5;
    const size_t nw = (size_t)rows * (size_t)c->r, nl = (size_t)c->n * (size_t)c->nh * (size_t)c->r;
    const size_t no = (size_t)c->n * (size_t)ldo;
    float *wf = malloc(nw * sizeof(float)), *lat = malloc(nl * sizeof(float));
    float *got = malloc(no * sizeof(float)), *ref = malloc(no * sizeof(float)), *one = malloc(no * sizeof(float));
    float *row = malloc((size_t)c->r * sizeof(float));
    void *wq = malloc(q_mat_bytes(c->dt, rows, c->r, c->group, DT_F16) + 64);
    pool_t *pool = pool_new(threads);
    be_backend *be = pool ? be_cpu_new(NULL, pool) : NULL;
    if (!wf || !lat || !got || !ref || !one || !row || !wq || !be) {
        test_fail(__FILE__, __LINE__, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < nw; i++) wf[i] = 0.3f * frand();
    for (size_t i = 0; i < nl; i++) lat[i] = frand();
    tn_mat w;
    if (c->dt == DT_F32) {
        memcpy(wq, wf, nw * sizeof(float));
    } else if (c->dt == DT_BF16) {
        for (size_t i = 0; i < nw; i++) { /* truncated: any bf16 values serve */
            uint32_t u;
            memcpy(&u, &wf[i], 4);
            ((uint16_t *)wq)[i] = (uint16_t)(u >> 16);
        }
    } else {
        q_quantize(c->dt, wf, rows, c->r, c->group, DT_F16, 1, wq);
    }
    q_mat_bind(&w, wq, c->dt, rows, c->r, c->group, DT_F16, 1);
    const be_mla a = {.kv_b = &w, .n = c->n, .n_heads = c->nh, .r = c->r, .dn = c->dn, .dv = c->dv, .lat = lat,
                      .out = got, .ldo = (size_t)ldo};
    memset(got, 0x7f, no * sizeof(float));
    memset(ref, 0x7f, no * sizeof(float));
    CHECK_OUT(be->mla_out && be->mla_out(be, &a) == 1, "the CPU backend did not take mla_out");
    for (int h = 0; h < c->nh; h++) { /* mla.c's loop before mla_out */
        const tn_mat wuv = q_rows_view(&w, h * (c->dn + c->dv) + c->dn, c->dv);
        kern_act x;
        kern_act_init(&x, NULL, lat + (size_t)h * c->r, (size_t)c->nh * c->r, c->n, c->r, 0);
        be_matmul(be, &wuv, &x, ref + (size_t)h * c->dv, (size_t)ldo);
    }
    CHECK_OUT(be->sync(be) == SL_OK, "%s", be->errmsg(be));
    CHECK_OUT(!memcmp(got, ref, no * sizeof(float)), "heads %d r %d dv %d n %d dtype %d: not bitwise the matmul a head",
                c->nh, c->r, c->dv, c->n, (int)c->dt);
    double worst = 0, top = 0;
    for (int h = 0; h < c->nh; h++)
        for (int v = 0; v < c->dv; v++) {
            q_row_to_f32(&w, h * (c->dn + c->dv) + c->dn + v, row);
            for (int t = 0; t < c->n; t++) {
                double s = 0;
                for (int k = 0; k < c->r; k++) s += (double)row[k] * lat[((size_t)t * c->nh + h) * c->r + k];
                const double g = got[(size_t)t * ldo + (size_t)h * c->dv + v];
                worst = fabs(g - s) > worst ? fabs(g - s) : worst;
                top = fabs(s) > top ? fabs(s) : top;
            }
        }
    CHECK_OUT(worst <= 1e-5 * (top > 1 ? top : 1), "heads %d r %d n %d dtype %d: %.3g from the double sums", c->nh,
                c->r, c->n, (int)c->dt, worst);
    uint32_t poison, tail;
    memset(&poison, 0x7f, 4);
    for (int t = 0; t < c->n; t++) {
        memcpy(&tail, &got[(size_t)t * ldo + (size_t)c->nh * c->dv], 4);
        CHECK_OUT(tail == poison, "token %d: mla_out wrote past its heads", t);
    }
    const int t1 = c->n / 2; /* that token alone */
    be_mla a1 = a;
    a1.n = 1, a1.lat = lat + (size_t)t1 * c->nh * c->r, a1.out = one;
    be->mla_out(be, &a1);
    CHECK_OUT(!memcmp(one, got + (size_t)t1 * ldo, (size_t)c->nh * c->dv * sizeof(float)),
                "token %d alone differs from it in the batch", t1);
done:
    be_close(be);
    pool_free(pool);
    free(wf), free(lat), free(got), free(ref), free(one), free(row), free(wq);
}

TEST(mla_out_cpu_bitwise_matmul_a_head) {
    static const out_case cases[] = {
        {4, 32, 16, 16, 1, DT_F32, 0},  {4, 32, 16, 16, 7, DT_F32, 0},   {3, 64, 8, 24, 70, DT_BF16, 0},
        {8, 64, 16, 16, 5, DT_Q8, 32},  {5, 128, 16, 32, 9, DT_Q4, 64},  {128, 512, 128, 128, 3, DT_Q4, 32},
        {16, 512, 128, 128, 64, DT_Q4, 32}, {2, 96, 0, 8, 2, DT_Q8, 32},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases && !test_failed(); i++)
        for (int th = 1; th <= 3 && !test_failed(); th += 2) check_out_case(&cases[i], th, test_seed() + 31u * (unsigned)i);
}
