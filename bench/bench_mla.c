/*
 * bench_mla.c — one decode token's multi-head latent attention on the CPU backend (backend.h be_mla, cpu_mla.c), the
 * split (be_cpu_mla_split(-1): one read of the cache for all heads) against attend_part's (token, head) items (0),
 * alternated, in wall and process CPU milliseconds (the median of the runs). The op includes the absorbed queries,
 * the same for both: depth 1 prints their cost alone.
 *
 *   make build/bench_mla
 *   build/bench_mla [threads 2] [depth 8192] [runs 7] [heads 128] [sel_k 0]
 *
 * The shape is DeepSeek-V3's (r 512, dr 64, dn 128; kv_b f32 with dv 128), random values.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_mla.h"
#include "util/threadpool.h"

static double now(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 2, depth = argc > 2 ? atoi(argv[2]) : 8192;
    const int runs = argc > 3 ? atoi(argv[3]) : 7, nh = argc > 4 ? atoi(argv[4]) : 128;
    const int sel_k = argc > 5 ? atoi(argv[5]) : 0;
    const int r = 512, dr = 64, dn = 128, dv = 128, ldc = r + dr, qh = dn + dr;
    if (threads < 1 || depth < 1 || runs < 1 || runs > 64 || nh < 1 || sel_k < 0) {
        fprintf(stderr, "usage: bench_mla [threads] [depth] [runs <= 64] [heads] [sel_k]\n");
        return 2;
    }
    float *cache = malloc((size_t)depth * ldc * sizeof(float)), *q = malloc((size_t)nh * qh * sizeof(float));
    float *kvb = malloc((size_t)nh * (dn + dv) * r * sizeof(float)), *q_abs = malloc((size_t)nh * ldc * sizeof(float));
    float *lat = malloc((size_t)nh * r * sizeof(float));
    int32_t *sel = sel_k ? malloc((size_t)sel_k * sizeof(int32_t)) : NULL;
    pool_t *pool = pool_new(threads);
    be_backend *be = pool ? be_cpu_new(kern_default_ops(), pool) : NULL;
    const size_t slot = (size_t)nh * (((size_t)depth + 15) / 16 * 16) + 32 * (size_t)ldc + 64;
    if (!cache || !q || !kvb || !q_abs || !lat || (sel_k && !sel) || !be || be->reserve(be, slot)) {
        fprintf(stderr, "bench_mla: out of memory\n");
        return 1;
    }
    srand(1);
    for (size_t i = 0; i < (size_t)depth * ldc; i++) cache[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
    for (size_t i = 0; i < (size_t)nh * qh; i++) q[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    for (size_t i = 0; i < (size_t)nh * (dn + dv) * r; i++) kvb[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * 0.2f;
    for (int i = 0; i < sel_k; i++) sel[i] = (int32_t)((long long)i * depth / sel_k); /* spread, ascending */
    const tn_mat kv_b = {.data = kvb, .dtype = DT_F32, .rows = nh * (dn + dv), .cols = r};
    const be_mla a = {.q = q, .ldq = (size_t)nh * qh, .ckv = cache + (size_t)(depth - 1) * ldc, .cache = cache,
                      .ldc = ldc, .sel = sel, .sel_ld = sel_k, .sel_k = sel_k, .kv_b = &kv_b, .n = 1, .pos0 = depth - 1,
                      .n_heads = nh, .r = r, .dr = dr, .dn = dn, .dv = dv, .scale = 1.0f / sqrtf((float)qh),
                      .q_abs = q_abs, .lat = lat};
    double wall[2][64], cpu[2][64];
    for (int i = 0; i < runs + 1; i++)
        for (int m = 0; m < 2; m++) { /* m 0: attend_part, 1: the split; run 0 warms up */
            be_cpu_mla_split(m ? -1 : 0);
            const double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
            be->mla(be, &a);
            const double c1 = now(CLOCK_PROCESS_CPUTIME_ID), w1 = now(CLOCK_MONOTONIC);
            if (i > 0) wall[m][i - 1] = w1 - w0, cpu[m][i - 1] = c1 - c0;
        }
    for (int m = 0; m < 2; m++)
        qsort(wall[m], (size_t)runs, sizeof(double), cmp), qsort(cpu[m], (size_t)runs, sizeof(double), cmp);
    printf("mla heads %d depth %d sel_k %d threads %d (%s), median of %d: attend_part %.2f ms wall %.2f ms CPU; "
           "split %.2f ms wall %.2f ms CPU; CPU ratio %.2fx\n",
           nh, depth, sel_k, threads, kern_default_ops()->name, runs, wall[0][runs / 2], cpu[0][runs / 2],
           wall[1][runs / 2], cpu[1][runs / 2], cpu[0][runs / 2] / cpu[1][runs / 2]);
    be_close(be);
    pool_free(pool);
    free(cache), free(q), free(kvb), free(q_abs), free(lat), free(sel);
    return 0;
}
