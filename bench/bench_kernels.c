/*
 * bench_kernels.c — `make bench`: GB/s of weights streamed through each matmul kernel (one token, i.e.
 * decode: every weight byte is read once per call) for every kernel table and weight type, with 1 thread
 * and all threads, next to this machine's memory read bandwidth measured in the same run.
 *
 * The matrix is 8192 x 8192 (f32: 256 MiB, q4: 36 MiB) so it does not fit in cache; each measurement is
 * the best of several calls. Usage: build/bench_kernels [rows cols]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "quant/quant.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    const uint64_t *p;
    uint64_t sum;
} rd_job;

static void rd_part(void *ctx, size_t b, size_t e) {
    rd_job *j = ctx;
    uint64_t s[8] = {0}; /* 8 independent lanes: the compiler vectorises this, so it is memory-bound */
    for (size_t i = b * 1024; i < e * 1024; i += 8)
        for (int k = 0; k < 8; k++) s[k] ^= j->p[i + k];
    uint64_t t = 0;
    for (int k = 0; k < 8; k++) t ^= s[k];
    __atomic_add_fetch(&j->sum, t, __ATOMIC_RELAXED);
}

/* read bandwidth of a 512 MiB buffer, best of 5, GB/s */
static double mem_bw(sl_pool *pool) {
    size_t bytes = (size_t)512 << 20, n = bytes / 8;
    uint64_t *p = malloc(bytes);
    if (!p) return 0;
    for (size_t i = 0; i < n; i++) p[i] = i;
    double best = 1e9;
    rd_job j = {p, 0};
    for (int k = 0; k < 5; k++) {
        double t = now();
        sl_pool_for(pool, n / 1024, 1024, rd_part, &j);
        t = now() - t;
        if (t < best) best = t;
    }
    free(p);
    if (j.sum == 42) printf(" ");
    return (double)bytes / best / 1e9;
}

int main(int argc, char **argv) {
    int rows = argc > 2 ? atoi(argv[1]) : 8192, cols = argc > 2 ? atoi(argv[2]) : 8192;
    int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    sl_pool *p1 = sl_pool_new(1), *pn = sl_pool_new(ncpu);
    printf("memory read bandwidth: %.1f GB/s (1 thread), %.1f GB/s (%d threads)\n", mem_bw(p1), mem_bw(pn), ncpu);
    printf("matmul [%d x %d] x 1 token, GB/s of weights streamed (bytes incl. scales/biases / time)\n", rows, cols);
    printf("%-8s %-6s %10s %10s %10s\n", "table", "dtype", "bits/w", "1 thread", "all");
    float *w = malloc((size_t)rows * cols * sizeof(float)), *x = malloc((size_t)cols * sizeof(float));
    float *y = malloc((size_t)rows * sizeof(float));
    void *abuf = malloc(kern_act_bytes(1, cols));
    if (!w || !x || !y || !abuf) return 1;
    for (size_t i = 0; i < (size_t)rows * cols; i++) w[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    for (int i = 0; i < cols; i++) x[i] = (float)(i % 17) / 17.0f;
    const char *names[] = {"scalar", "avx2", "avx512", "neon"};
    const sl_dtype dts[] = {DT_F32, DT_BF16, DT_F16, DT_Q8, DT_Q4, DT_Q3};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
        uint64_t bytes = q_mat_bytes(dts[d], rows, cols, 64, DT_BF16);
        void *data = malloc(bytes);
        if (!data) return 1;
        if (q_is_quant(dts[d])) q_quantize(dts[d], w, rows, cols, 64, DT_BF16, 1, data);
        else dt_from_f32(dts[d], w, data, (size_t)rows * cols);
        sl_mat m;
        q_mat_bind(&m, data, dts[d], rows, cols, 64, DT_BF16, 1);
        for (int k = 0; k < 4; k++) {
            const kern_ops *ops = kern_ops_by_name(names[k]);
            if (!ops) continue;
            double gbs[2];
            for (int pi = 0; pi < 2; pi++) {
                double best = 1e9;
                for (int it = 0; it < 4; it++) {
                    double t = now();
                    kern_matmul(ops, pi ? pn : p1, &m, x, (size_t)cols, y, (size_t)rows, 1);
                    t = now() - t;
                    if (t < best) best = t;
                }
                gbs[pi] = (double)bytes / best / 1e9;
            }
            printf("%-8s %-6s %10.2f %10.2f %10.2f\n", names[k], dt_name(dts[d]),
                   8.0 * (double)bytes / ((double)rows * cols), gbs[0], gbs[1]);
            if (dts[d] != DT_Q8 && dts[d] != DT_Q4) continue;
            /* the int8-activation kernels (the default for q8/q4); x quantized once, before timing, as a
             * decode step quantizes it once for every matrix that reads it */
            kern_act a;
            kern_act_init(&a, abuf, x, (size_t)cols, 1, cols, 1);
            kern_act_prepare(&a);
            for (int pi = 0; pi < 2; pi++) {
                double best = 1e9;
                for (int it = 0; it < 4; it++) {
                    double t = now();
                    kern_matmul_act(ops, pi ? pn : p1, &m, &a, y, (size_t)rows);
                    t = now() - t;
                    if (t < best) best = t;
                }
                gbs[pi] = (double)bytes / best / 1e9;
            }
            printf("%-8s %-6s %10.2f %10.2f %10.2f\n", names[k], dts[d] == DT_Q8 ? "q8.i8" : "q4.i8",
                   8.0 * (double)bytes / ((double)rows * cols), gbs[0], gbs[1]);
        }
        free(data);
    }
    free(w);
    free(x);
    free(y);
    free(abuf);
    sl_pool_free(p1);
    sl_pool_free(pn);
    return 0;
}
