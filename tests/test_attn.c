/*
 * test_attn.c — the CPU attention's split of one token (src/backend/cpu/cpu_mix.c attn_split: scores over (KV head,
 * chunk of keys), the softmax per query head, the sums over (KV head, slice of the value dims)) against the query-head
 * items it replaces (attn_part, be_cpu_attn_split(0)), bitwise: at depths from 1 to 8192, GQA ratios 1 to 8, every
 * KV cache type for keys and values (apart too), a sliding ring that wraps, a chunked layer, sinks, a gate, values
 * of their own size, on the scalar, AVX2 and AVX-512 tables where the CPU has them, at 1, 2, 3 and 16 threads.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "quant/kv.h"
#include "sluice.h"
#include "test.h"
#include "util/threadpool.h"

static float frand(void) { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }

typedef struct {
    int n_heads, n_kv, hd, vd, depth, cap, window, chunk, sinks, gated;
    sl_kv_type kt, vt;
} attn_case;

/* A case's inputs: cache rows of random values, q, k, v random (seeded by seed). */
typedef struct {
    char *kc, *vc;
    float *q, *k, *v, sinks[64];
} attn_data;

static void data_free(attn_data *d) { free(d->kc), free(d->vc), free(d->q), free(d->k), free(d->v); }

static int data_make(const attn_case *c, unsigned seed, attn_data *d) {
    srand(seed);
    const int qstride = c->gated ? 2 * c->hd : c->hd;
    const size_t khb = kv_head_bytes(c->kt, c->hd), vhb = kv_head_bytes(c->vt, c->vd);
    d->kc = malloc((size_t)c->cap * (size_t)c->n_kv * khb), d->vc = malloc((size_t)c->cap * (size_t)c->n_kv * vhb);
    d->q = malloc((size_t)c->n_heads * (size_t)qstride * sizeof(float));
    d->k = malloc((size_t)c->n_kv * (size_t)c->hd * sizeof(float));
    d->v = malloc((size_t)c->n_kv * (size_t)c->vd * sizeof(float));
    float *row = malloc((size_t)(c->hd > c->vd ? c->hd : c->vd) * sizeof(float));
    const int ok = d->kc && d->vc && d->q && d->k && d->v && row;
    for (int r = 0; ok && r < c->cap; r++)
        for (int g = 0; g < c->n_kv; g++) {
            for (int i = 0; i < c->hd; i++) row[i] = frand();
            kv_encode_head(c->kt, row, c->hd, d->kc + ((size_t)r * (size_t)c->n_kv + (size_t)g) * khb);
            for (int i = 0; i < c->vd; i++) row[i] = frand();
            kv_encode_head(c->vt, row, c->vd, d->vc + ((size_t)r * (size_t)c->n_kv + (size_t)g) * vhb);
        }
    for (int i = 0; ok && i < c->n_heads * qstride; i++) d->q[i] = 2.0f * frand();
    for (int i = 0; ok && i < c->n_kv * c->hd; i++) d->k[i] = frand();
    for (int i = 0; ok && i < c->n_kv * c->vd; i++) d->v[i] = frand();
    for (int i = 0; i < 64; i++) d->sinks[i] = 3.0f * frand();
    free(row);
    if (!ok) data_free(d);
    return ok;
}

/* The case's one-token attention at position depth - 1 on be into out [n_heads * vd] (the new row it stores is
 * the same every time). */
static void run_case(be_backend *be, const attn_case *c, attn_data *d, float *out) {
    const int qstride = c->gated ? 2 * c->hd : c->hd;
    const be_attn a = {.q = d->q, .ldq = (size_t)c->n_heads * (size_t)qstride, .qstride = qstride, .gated = c->gated,
                       .k = d->k, .v = d->v, .ldkv = (size_t)c->n_kv * (size_t)c->hd,
                       .ldv = (size_t)c->n_kv * (size_t)c->vd, .v_dim = c->vd, .k_cache = d->kc, .v_cache = d->vc,
                       .kv_type = c->kt, .kv_type_v = c->vt, .cap = c->cap, .n = 1, .pos0 = c->depth - 1,
                       .n_heads = c->n_heads, .n_kv_heads = c->n_kv, .head_dim = c->hd, .window = c->window,
                       .chunk = c->chunk, .sinks = c->sinks ? d->sinks : NULL, .scale = 1.0f / sqrtf((float)c->hd),
                       .out = out, .ldo = (size_t)c->n_heads * (size_t)c->vd};
    be->attention(be, &a);
}

/* Every case on the tables (big: the default table only) x 1, 2, 3, 16 threads: the split (be_cpu_attn_split(1)) and
 * the default choice bitwise the query-head items (0), and those finite and within the values' range. */
static void check_cases(const attn_case *cases, int n_cases, int big) {
    const kern_ops *tabs[3] = {kern_scalar_ops(), kern_avx2_ops(), kern_avx512_ops()};
    const int threads[4] = {1, 2, 3, 16};
    for (int ci = 0; ci < n_cases && !test_failed(); ci++) {
        const attn_case *c = &cases[ci];
        const unsigned seed = test_seed() + (unsigned)ci;
        const size_t n_out = (size_t)c->n_heads * (size_t)c->vd;
        attn_data d;
        CHECK(data_make(c, seed, &d));
        float *ref = malloc(n_out * sizeof(float)), *got = malloc(n_out * sizeof(float));
        float *aut = malloc(n_out * sizeof(float));
        for (int ti = big ? 2 : 0; ref && got && aut && ti < 3 && !test_failed(); ti++) {
            const kern_ops *ops = big ? kern_default_ops() : tabs[ti];
            for (int th = 0; ops && th < 4 && !test_failed(); th++) {
                pool_t *pool = pool_new(threads[th]);
                be_backend *be = pool ? be_cpu_new(ops, pool) : NULL;
                /* room for every query head's scores in one slot (forward.c slot_floats: at least a group's) */
                if (!be || be->reserve(be, (size_t)64 * 8192 + 4 * BE_KV_TILE * 256 + 1024)) {
                    test_fail(__FILE__, __LINE__, "no backend");
                    be_close(be), pool_free(pool);
                    break;
                }
                const int was = be_cpu_attn_split(0);
                run_case(be, c, &d, ref);
                be_cpu_attn_split(1);
                run_case(be, c, &d, got);
                be_cpu_attn_split(-1);
                run_case(be, c, &d, aut);
                be_cpu_attn_split(was);
                be_close(be);
                pool_free(pool);
                size_t bad = 0, first = 0;
                for (size_t i = n_out; i-- > 0;)
                    if (memcmp(&ref[i], &got[i], sizeof(float)) || memcmp(&ref[i], &aut[i], sizeof(float)))
                        bad++, first = i;
                int finite = 1;
                for (size_t i = 0; i < n_out; i++) finite &= isfinite(ref[i]) && fabsf(ref[i]) < 10.0f;
                if (bad || !finite)
                    test_fail(__FILE__, __LINE__,
                              "%s, %d threads, case %d (heads %d/%d, hd %d, vd %d, depth %d, cap %d, kv %s/%s): "
                              "%s%zu of %zu outputs differ, first %zu: %.9g split, %.9g default, %.9g query heads "
                              "(seed %u)",
                              ops->name, threads[th], ci, c->n_heads, c->n_kv, c->hd, c->vd, c->depth, c->cap,
                              sl_kv_type_name(c->kt), sl_kv_type_name(c->vt), finite ? "" : "not finite; ", bad, n_out,
                              first, (double)got[first], (double)aut[first], (double)ref[first], seed);
            }
        }
        CHECK(ref && got && aut);
        free(ref), free(got), free(aut);
        data_free(&d);
    }
}

/* Every cache type for keys and values alike and apart, GQA 1, 2, 3, 4 and 8, depths 1 to 2000 (a partial last
 * chunk and tile), a ring of a sliding window that wraps, a chunked layer, sinks, a gate, values of their own size. */
TEST(attn_split_bitwise_query_heads) {
    attn_case cases[64];
    int n = 0;
    for (int t = SL_KV_F32; t < SL_KV_COUNT; t++) {
        const sl_kv_type kt = (sl_kv_type)t, vt2 = (sl_kv_type)((t + 2) % SL_KV_COUNT);
        cases[n++] = (attn_case){32, 4, 128, 128, 1000, 1024, 0, 0, 0, 0, kt, kt};
        cases[n++] = (attn_case){8, 2, 64, 64, 333, 400, 0, 0, 1, 0, kt, vt2};
        cases[n++] = (attn_case){6, 2, 96, 96, 1, 16, 0, 0, 0, 1, kt, kt};
        cases[n++] = (attn_case){12, 4, 64, 64, 2000, 300, 300, 0, 1, 0, kt, kt}; /* a ring: rows p % 300 */
        cases[n++] = (attn_case){8, 1, 128, 64, 777, 800, 0, 256, 0, 0, kt, vt2};  /* chunked; vd < hd */
        cases[n++] = (attn_case){4, 4, 160, 160, 150, 160, 0, 0, 0, 0, kt, kt};   /* GQA 1; q4r runs of 32 */
        cases[n++] = (attn_case){16, 2, 256, 256, 129, 200, 0, 0, 1, 1, vt2, kt};
    }
    check_cases(cases, n, 0);
}

/* The 30B shape at depth 8192 (f16, q8, q4r; the default table). */
TEST(attn_split_bitwise_depth_8192) {
    const attn_case cases[3] = {{32, 4, 128, 128, 8192, 8192, 0, 0, 0, 0, SL_KV_F16, SL_KV_F16},
                                {32, 4, 128, 128, 8192, 8200, 0, 0, 0, 0, SL_KV_Q8, SL_KV_Q4},
                                {64, 8, 128, 128, 4096, 4096, 0, 0, 1, 0, SL_KV_Q4R, SL_KV_Q4R}};
    check_cases(cases, 3, 1);
}
