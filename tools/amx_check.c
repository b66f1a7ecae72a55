/*
 * amx_check.c — on an AMX host: the AMX q4 prefill kernel (src/kernels/kernels_amx.c) against the AVX-512 VNNI path
 * (kernels_avx512_i8p.c and the int8 driver, both kernels.h's canonical order), bitwise on random GGUF-Q4_0-like
 * matrices (group 32, f16 scales, implied biases) at the Qwen3-30B-A3B shapes and 1 .. 512 tokens, and the scalar
 * oracle on the smaller cases; then both timed at 1 and 16 threads (kern_matmul_act, the model's call: its thread
 * split, activations prepared once), a table of ms a call, GB/s of weights and GOP/s (2 rows cols tokens); the
 * speed-up column is vnni ms / amx ms (above 1: AMX faster). Then the call the model's prefill makes for a MoE
 * layer (src/backend/cpu/cpu_experts.c run_group): 128 distinct experts (gate/up 768x2048, down 2048x768), 512
 * tokens routed to 8 each at random, in cpu_experts.c's groups of at most 1024 pairs, each group one
 * kern_swiglu_multi and one kern_matmul_multi, at 1 and 16 threads: bitwise and timed, AMX against VNNI.
 *
 * Built by `make amx-check` as one static binary (libc, libm, libpthread only): build/amx_check. Run it on the host
 * as `./amx_check` (all shapes) or `./amx_check quick` (the bitwise checks, the 64- and 512-token rows, the
 * experts).
 * Exit status 0: every comparison bitwise equal (also on a CPU without AMX, where only the VNNI rows are timed);
 * 1: a mismatch (the first few printed).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_amx.h"
#include "quant/quant.h"
#include "util/clock.h"
#include "util/dtype.h"
#include "util/threadpool.h"

static uint64_t rng = 0x5eed1234ull;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

typedef struct {
    const char *name;
    int rows, cols;
} shape;

static const shape shapes[] = {
    {"expert gate/up 768x2048", 768, 2048}, {"expert down 2048x768", 2048, 768}, {"attn q 4096x2048", 4096, 2048},
    {"attn k/v 512x2048", 512, 2048},       {"attn o 2048x4096", 2048, 4096},
};

/* A random q4 matrix, group 32, f16 scales, biases -8 x scale (GGUF Q4_0's form): data owned by the caller. */
static void *make_q4(int rows, int cols, tn_mat *m) {
    const size_t n = (size_t)rows * cols;
    float *w = malloc(n * sizeof(float));
    void *data = malloc(q_mat_bytes(DT_Q4, rows, cols, 32, DT_F16));
    if (!w || !data) exit(2);
    for (size_t i = 0; i < n; i++) w[i] = frand() * 0.05f;
    q_quantize(DT_Q4, w, rows, cols, 32, DT_F16, 1, data);
    q_mat_bind(m, data, DT_Q4, rows, cols, 32, DT_F16, 1);
    const size_t ng = (size_t)rows * (size_t)(cols / 32);
    for (size_t j = 0; j < ng; j++) {
        float b = -8.0f * q_scale_at(m->scales, DT_F16, j);
        dt_from_f32(DT_F16, &b, (uint16_t *)(uintptr_t)m->biases + j, 1);
    }
    m->bias_implied = 1;
    free(w);
    return data;
}

/* y = W x over a (prepared on the first call) with AMX from min_amx tokens (0: off) */
static void run(const kern_ops *ops, pool_t *pool, const tn_mat *m, kern_act *a, float *y, int min_amx) {
    kern_amx_set_min(min_amx);
    kern_matmul_act(ops, pool, m, a, y, (size_t)m->rows);
}

static int mismatches;
static void compare(const char *what, const shape *s, int n, const float *got, const float *ref) {
    const size_t ny = (size_t)n * s->rows;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < ny; i++)
        if (memcmp(&got[i], &ref[i], 4) && !bad++) first = i;
    if (bad) {
        mismatches++;
        printf("MISMATCH %s %s n=%d: %zu of %zu outputs differ, first token %zu row %zu: %.9g vs %.9g\n", what,
               s->name, n, bad, ny, first / (size_t)s->rows, first % (size_t)s->rows, got[first], ref[first]);
    }
}

/* seconds a call, the median of 5 rounds of calls lasting ~0.1 s each */
static double timed(const kern_ops *ops, pool_t *pool, const tn_mat *m, kern_act *a, float *y, int min_amx) {
    run(ops, pool, m, a, y, min_amx);
    double r[5];
    for (int k = 0; k < 5; k++) {
        int calls = 0;
        const double t0 = clk_now_s();
        double t;
        do run(ops, pool, m, a, y, min_amx), calls++;
        while ((t = clk_now_s() - t0) < 0.1);
        r[k] = t / calls;
    }
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++)
            if (r[j] < r[i]) { const double x = r[i]; r[i] = r[j], r[j] = x; }
    return r[2];
}

/* ---- a MoE layer's experts as the prefill runs them (cpu_experts.c run_group) ------------------------------ */

enum { EX_N = 128, EX_K = 8, EX_TOK = 512, EX_H = 2048, EX_I = 768, EX_GROUP = 1024 };

/* A q4 matrix of random codes, f16 scales ~0.01, implied biases (no quantizer: 384 of them are ~380 MB) */
static void *rand_q4(int rows, int cols, tn_mat *m) {
    const size_t bytes = q_mat_bytes(DT_Q4, rows, cols, 32, DT_F16);
    uint8_t *data = malloc(bytes);
    if (!data) exit(2);
    for (size_t i = 0; i < bytes; i++) {
        frand();
        data[i] = (uint8_t)(rng >> 56);
    }
    q_mat_bind(m, data, DT_Q4, rows, cols, 32, DT_F16, 1);
    const size_t ng = (size_t)rows * (size_t)(cols / 32);
    for (size_t j = 0; j < ng; j++) {
        float sc = 0.002f + 0.01f * fabsf(frand()), b;
        dt_from_f32(DT_F16, &sc, (uint16_t *)(uintptr_t)m->scales + j, 1);
        b = -8.0f * q_scale_at(m->scales, DT_F16, j);
        dt_from_f32(DT_F16, &b, (uint16_t *)(uintptr_t)m->biases + j, 1);
    }
    m->bias_implied = 1;
    return data;
}

typedef struct {
    tn_mat gate[EX_N], up[EX_N], down[EX_N];
    int start[EX_N + 1];                 /* expert e's pairs: start[e] .. start[e+1] */
    float *x, *g, *u, *y;                /* [pairs][H], [pairs][I] x2, [pairs][H] */
    void *xbuf, *mbuf;
    kern_act xs[EX_N], ms[EX_N];
    kern_mm gm[EX_N], um[EX_N], dm[EX_N];
} ex_layer;

/* The layer's experts with AMX from min_amx tokens: per group (consecutive experts, at most EX_GROUP pairs) the
 * gate input's int8 form, kern_swiglu_multi, the down input's form, kern_matmul_multi (cpu_experts.c run_group's
 * calls; the gather and the combine left out). 0, or 1 where kern_swiglu_multi refused. */
static int ex_run(const kern_ops *ops, pool_t *pool, ex_layer *L, int min_amx) {
    kern_amx_set_min(min_amx);
    for (int e0 = 0; e0 < EX_N;) {
        int e1 = e0 + 1;
        while (e1 < EX_N && L->start[e1 + 1] - L->start[e0] <= EX_GROUP) e1++;
        const int p0 = L->start[e0], P = L->start[e1] - p0, m = e1 - e0;
        kern_act xa, mid;
        kern_act_init(&xa, L->xbuf, L->x + (size_t)p0 * EX_H, EX_H, P, EX_H, 1);
        kern_act_prepare_for(&xa, &L->gate[e0], pool);
        kern_act_init(&mid, L->mbuf, L->g, EX_I, P, EX_I, 1);
        for (int i = 0; i < m; i++) {
            const int r = L->start[e0 + i] - p0, T = L->start[e0 + i + 1] - L->start[e0 + i];
            kern_act_rows(&L->xs[i], &xa, r, T);
            L->gm[i] = (kern_mm){&L->gate[e0 + i], &L->xs[i], L->g + (size_t)r * EX_I, EX_I};
            L->um[i] = (kern_mm){&L->up[e0 + i], &L->xs[i], L->u + (size_t)r * EX_I, EX_I};
        }
        if (kern_swiglu_multi(ops, pool, L->gm, L->um, m, &mid)) return 1;
        kern_act_prepare_for(&mid, &L->down[e0], pool);
        for (int i = 0; i < m; i++) {
            const int r = L->start[e0 + i] - p0, T = L->start[e0 + i + 1] - L->start[e0 + i];
            kern_act_rows(&L->ms[i], &mid, r, T);
            L->dm[i] = (kern_mm){&L->down[e0 + i], &L->ms[i], L->y + (size_t)(p0 + r) * EX_H, EX_H};
        }
        if (kern_matmul_multi(ops, pool, L->dm, m)) return 1;
        e0 = e1;
    }
    return 0;
}

static double ex_timed(const kern_ops *ops, pool_t *pool, ex_layer *L, int min_amx) {
    double r[5];
    for (int k = 0; k < 5; k++) {
        int calls = 0;
        const double t0 = clk_now_s();
        double t;
        do ex_run(ops, pool, L, min_amx), calls++;
        while ((t = clk_now_s() - t0) < 0.2);
        r[k] = t / calls;
    }
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++)
            if (r[j] < r[i]) { const double x = r[i]; r[i] = r[j], r[j] = x; }
    return r[2];
}

static void experts(const kern_ops *ops, pool_t *p16, int amx) {
    ex_layer *L = calloc(1, sizeof *L);
    void *data[3 * EX_N];
    if (!L) exit(2);
    for (int e = 0; e < EX_N; e++) {
        data[3 * e] = rand_q4(EX_I, EX_H, &L->gate[e]);
        data[3 * e + 1] = rand_q4(EX_I, EX_H, &L->up[e]);
        data[3 * e + 2] = rand_q4(EX_H, EX_I, &L->down[e]);
    }
    int cnt[EX_N] = {0}; /* each token's 8 distinct experts at random; pairs sorted by expert */
    for (int t = 0; t < EX_TOK; t++) {
        int pick[EX_K];
        for (int k = 0; k < EX_K; k++) {
            int e, dup;
            do {
                e = (int)((frand() + 1.0f) * 0.5f * EX_N) % EX_N;
                dup = 0;
                for (int j = 0; j < k; j++) dup |= pick[j] == e;
            } while (dup);
            pick[k] = e;
            cnt[e]++;
        }
    }
    int tmin = EX_TOK, tmax = 0;
    for (int e = 0; e < EX_N; e++) {
        L->start[e + 1] = L->start[e] + cnt[e];
        tmin = cnt[e] < tmin ? cnt[e] : tmin, tmax = cnt[e] > tmax ? cnt[e] : tmax;
    }
    const int P = L->start[EX_N];
    L->x = malloc((size_t)P * EX_H * sizeof(float));
    L->g = malloc((size_t)EX_GROUP * EX_I * sizeof(float));
    L->u = malloc((size_t)EX_GROUP * EX_I * sizeof(float));
    L->y = malloc((size_t)P * EX_H * sizeof(float));
    float *y0 = malloc((size_t)P * EX_H * sizeof(float));
    L->xbuf = malloc(kern_act_bytes(EX_GROUP, EX_H));
    L->mbuf = malloc(kern_act_bytes(EX_GROUP, EX_I));
    if (!L->x || !L->g || !L->u || !L->y || !y0 || !L->xbuf || !L->mbuf) exit(2);
    for (size_t i = 0; i < (size_t)P * EX_H; i++) L->x[i] = frand() * (i % 13 == 0 ? 3.0f : 1.0f);
    printf("\nMoE layer's experts as the prefill runs them (cpu_experts.c run_group: kern_swiglu_multi, then "
           "kern_matmul_multi, groups of <= %d pairs): %d experts 768x2048 / 2048x768, %d tokens x top-%d = %d pairs, "
           "%d-%d tokens an expert\n", EX_GROUP, EX_N, EX_TOK, EX_K, P, tmin, tmax);
    for (int thr = 1; thr <= 16; thr += 15) {
        pool_t *p = thr == 1 ? NULL : p16;
        for (size_t i = 0; i < (size_t)P * EX_H; i++) y0[i] = L->y[i] = NAN;
        int rc = ex_run(ops, p, L, 0);
        memcpy(y0, L->y, (size_t)P * EX_H * sizeof(float));
        rc |= ex_run(ops, p, L, 16);
        if (rc) {
            printf("experts: kern_swiglu_multi or kern_matmul_multi refused\n");
            mismatches++;
            break;
        }
        const shape s = {"experts grouped (pair, row)", EX_H, EX_I};
        compare("amx vs vnni", &s, P, L->y, y0);
        const double tv = ex_timed(ops, p, L, 0), ta = amx ? ex_timed(ops, p, L, 16) : NAN;
        printf("%-26s %5d %3d %10.3f %10.3f %7.2fx   (vnni/amx > 1: AMX faster)\n", "experts grouped, layer", EX_TOK,
               thr, tv * 1e3, ta * 1e3, tv / ta);
        fflush(stdout);
    }
    for (int i = 0; i < 3 * EX_N; i++) free(data[i]);
    free(L->x), free(L->g), free(L->u), free(L->y), free(y0), free(L->xbuf), free(L->mbuf), free(L);
}

int main(int argc, char **argv) {
    const int quick = argc > 1 && !strcmp(argv[1], "quick");
    const kern_ops *ops = kern_avx512_ops(), *sc = kern_scalar_ops();
    if (!ops) {
        printf("no AVX-512 VNNI table on this CPU: nothing to compare\n");
        return 2;
    }
    if (!getenv("SLUICE_CPU_AMX")) setenv("SLUICE_CPU_AMX", "16", 1); /* the library's default is off (kernels_amx.c) */
    const int amx = kern_amx_ready();
    printf("AMX: %s (smallest token count %d)\n", amx ? "available" : "NOT available", amx);
    pool_t *p16 = pool_new(16);
    static const int ncheck[] = {1, 2, 5, 15, 16, 17, 33, 64, 100, 512};
    static const int ntime[] = {16, 32, 64, 128, 512};
    const int nshape = (int)(sizeof shapes / sizeof *shapes);
    printf("%-26s %5s %3s %10s %10s %8s %9s %9s\n", "shape", "n", "thr", "vnni ms", "amx ms", "vnni/amx", "amx GB/s",
           "amx GOP/s");
    for (int si = 0; si < nshape; si++) {
        const shape *s = &shapes[si];
        tn_mat m;
        void *data = make_q4(s->rows, s->cols, &m);
        const int nmax = 512;
        float *x = malloc((size_t)nmax * s->cols * sizeof(float));
        float *y0 = malloc((size_t)nmax * s->rows * sizeof(float)), *y1 = malloc((size_t)nmax * s->rows * sizeof(float));
        void *buf = malloc(kern_act_bytes(nmax, s->cols));
        if (!x || !y0 || !y1 || !buf) return 2;
        for (size_t i = 0; i < (size_t)nmax * s->cols; i++) x[i] = frand() * (i % 13 == 0 ? 3.0f : 1.0f);
        for (size_t k = 0; k < sizeof ncheck / sizeof *ncheck; k++) { /* bitwise: AMX == VNNI (== oracle) */
            const int n = ncheck[k];
            kern_act a;
            kern_act_init(&a, buf, x, (size_t)s->cols, n, s->cols, 1);
            for (size_t i = 0; i < (size_t)n * s->rows; i++) y0[i] = y1[i] = NAN;
            run(ops, p16, &m, &a, y0, 0);
            run(ops, p16, &m, &a, y1, 1);
            compare("amx vs vnni", s, n, y1, y0);
            if (n <= 17 && (size_t)s->rows * s->cols <= 2048 * 2048) {
                run(sc, NULL, &m, &a, y0, 0);
                compare("amx vs scalar oracle", s, n, y1, y0);
            }
        }
        for (size_t k = 0; k < sizeof ntime / sizeof *ntime; k++) {
            const int n = ntime[k];
            if (quick && n != 64 && n != 512) continue;
            kern_act a;
            kern_act_init(&a, buf, x, (size_t)s->cols, n, s->cols, 1);
            for (int thr = 1; thr <= 16; thr += 15) {
                pool_t *p = thr == 1 ? NULL : p16;
                const double tv = timed(ops, p, &m, &a, y0, 0), ta = amx ? timed(ops, p, &m, &a, y1, 1) : NAN;
                const double wbytes = (double)s->rows * s->cols / 2 + (double)s->rows * (s->cols / 32) * 2;
                const double ops2 = 2.0 * s->rows * s->cols * n;
                printf("%-26s %5d %3d %10.3f %10.3f %7.2fx %9.1f %9.0f   (vnni %.1f GB/s %.0f GOP/s)\n", s->name, n,
                       thr, tv * 1e3, ta * 1e3, tv / ta, wbytes / ta * 1e-9, ops2 / ta * 1e-9, wbytes / tv * 1e-9,
                       ops2 / tv * 1e-9);
                fflush(stdout);
            }
        }
        free(x), free(y0), free(y1), free(buf), free(data);
    }
    experts(ops, p16, amx);
    pool_free(p16);
    printf("%s\n", mismatches ? "FAIL: AMX differs from the VNNI path" : "bitwise: every AMX result equals the VNNI path's");
    return mismatches ? 1 : 0;
}
