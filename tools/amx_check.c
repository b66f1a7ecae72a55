/*
 * amx_check.c — on an AMX host: the AMX q4 prefill kernel (src/kernels/kernels_amx.c) against the AVX-512 VNNI path
 * (kernels_avx512_i8p.c and the int8 driver, both kernels.h's canonical order), bitwise on random GGUF-Q4_0-like
 * matrices (group 32, f16 scales, implied biases) at the Qwen3-30B-A3B shapes and 1 .. 512 tokens, and the scalar
 * oracle on the smaller cases; then both timed at 1 and 16 threads (kern_matmul_act, the model's call: its thread
 * split, activations prepared once), a table of ms a call, GB/s of weights and GOP/s (2 rows cols tokens).
 *
 * Built by `make amx-check` as one static binary (libc, libm, libpthread only): build/amx_check. Run it on the host
 * as `./amx_check` (all shapes) or `./amx_check quick` (the bitwise checks and the 64- and 512-token rows only).
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
    printf("%-26s %5s %3s %10s %10s %7s %9s %9s\n", "shape", "n", "thr", "vnni ms", "amx ms", "amx/vnni", "amx GB/s",
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
    pool_free(p16);
    printf("%s\n", mismatches ? "FAIL: AMX differs from the VNNI path" : "bitwise: every AMX result equals the VNNI path's");
    return mismatches ? 1 : 0;
}
