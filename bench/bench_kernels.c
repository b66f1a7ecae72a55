/*
 * bench_kernels.c — `make bench`: GB/s of weights streamed through each matmul kernel (one token, i.e.
 * decode: every weight byte is read once per call) for every kernel table and weight type, with 1 thread
 * and all threads, next to this machine's memory read bandwidth measured in the same run.
 *
 * The matrix is 8192 x 8192 (f32: 256 MiB, q4: 36 MiB) so it does not fit in cache; each measurement is
 * the best of several calls. Every figure is given twice: per second of wall time, and per second of CPU
 * time (process CPU time / threads), which on a shared machine (other processes taking the cores) is the
 * rate the code reaches while it runs; the read loop is measured both ways too, before and after the
 * kernels, and each kernel's CPU-time rate is also given as a percentage of the loop's.
 * q8.i8 / q4.i8 are the int8-activation kernels (kern_matmul_act, the default in a model), x quantized
 * once before timing as a decode step does once for all the matrices that read it.
 * Usage: build/bench_kernels [rows cols] [--threads N] [--tables avx512,avx2] [--dtypes q4,q8]
 *   (the GGUF block types q2_k .. iq1_m run only when --dtypes names them; sluice's q2 always)
 *   --threads N   the "all" columns and a second prefill figure with N threads (default: every CPU)
 *   --tables, --dtypes   only those kernel tables / weight types (names as printed; default: all)
 * So an old and a new build of the kernels can be compared on the shapes that matter, alternately, in one run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "quant/quant.h"
#include "util/clock.h"

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

typedef struct {
    double wall, cpu; /* GB/s: per wall second, per CPU second / threads */
} rate;

/* read bandwidth of a 512 MiB buffer, best of 5 */
static rate mem_bw(pool_t *pool) {
    size_t bytes = (size_t)512 << 20, n = bytes / 8;
    uint64_t *p = malloc(bytes);
    rate r = {0, 0};
    if (!p) return r;
    for (size_t i = 0; i < n; i++) p[i] = i;
    double best = 1e9, bestc = 1e9;
    rd_job j = {p, 0};
    for (int k = 0; k < 5; k++) {
        double t = clk_now_s(), c = clk_cpu_s();
        pool_for(pool, n / 1024, 1024, rd_part, &j);
        t = clk_now_s() - t;
        c = (clk_cpu_s() - c) / pool_size(pool);
        if (t < best) best = t;
        if (c < bestc) bestc = c;
    }
    free(p);
    if (j.sum == 42) printf(" ");
    r.wall = (double)bytes / best / 1e9;
    r.cpu = (double)bytes / bestc / 1e9;
    return r;
}

typedef struct {
    const kern_ops *ops;
    const tn_mat *m;
    const float *x;
    kern_act *a; /* NULL: kern_matmul (exact) */
    float *y;
} mm_case;

static rate time_mm(const mm_case *c, pool_t *pool, uint64_t bytes) {
    double best = 1e9, bestc = 1e9;
    for (int it = 0; it < 5; it++) {
        double t = clk_now_s(), cc = clk_cpu_s();
        if (c->a) kern_matmul_act(c->ops, pool, c->m, c->a, c->y, (size_t)c->m->rows);
        else kern_matmul(c->ops, pool, c->m, c->x, (size_t)c->m->cols, c->y, (size_t)c->m->rows, 1);
        t = clk_now_s() - t;
        cc = (clk_cpu_s() - cc) / pool_size(pool);
        if (t < best) best = t;
        if (cc < bestc) bestc = cc;
    }
    rate r = {(double)bytes / best / 1e9, (double)bytes / bestc / 1e9};
    return r;
}

/* ---- prefill: many tokens, compute-bound ---- */

#if defined(__x86_64__)
#include <immintrin.h>
/* vpdpbusd's throughput on this core: 12 independent 512-bit accumulators, G multiply-adds per CPU second, the
 * best of 5 (as the kernels' figures are bests: on a shared machine the slowest runs measure the neighbours) */
__attribute__((target("avx512f,avx512vnni"))) static double vnni_peak(void) {
    __m512i acc[12], a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
    for (int i = 0; i < 12; i++) acc[i] = _mm512_setzero_si512();
    const long iters = 4000000;
    double c = 1e9;
    for (int k = 0; k < 5; k++) {
        double c0 = clk_cpu_s();
        for (long it = 0; it < iters; it++)
            for (int i = 0; i < 12; i++) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
        c0 = clk_cpu_s() - c0;
        c = c0 < c ? c0 : c;
    }
    int s = 0;
    for (int i = 0; i < 12; i++) s += _mm512_reduce_add_epi32(acc[i]);
    if (s == 42) printf(" ");
    return (double)iters * 12 * 64 / c / 1e9;
}
#endif

/* 1 when name is in the comma-separated list (NULL: every name). */
static int listed(const char *list, const char *name) {
    if (!list) return 1;
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || !p[n])) return 1;
    return 0;
}

/* y = W x for T tokens of an [rows x cols] matrix through the default table's kernels (int8 when i8) on pool
 * (NULL: one thread, inline): G multiply-adds per CPU second, or with a pool per wall second */
static double prefill_rate(pool_t *pool, int rows, int cols, int T, dt_type dt, int i8) {
    float *w = malloc((size_t)rows * cols * sizeof(float)), *x = malloc((size_t)T * cols * sizeof(float));
    float *y = malloc((size_t)T * rows * sizeof(float));
    void *data = malloc(q_mat_bytes(dt, rows, cols, 64, DT_BF16)), *abuf = malloc(kern_act_bytes(T, cols));
    if (!w || !x || !y || !data || !abuf) return 0;
    for (size_t i = 0; i < (size_t)rows * cols; i++) w[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    for (size_t i = 0; i < (size_t)T * cols; i++) x[i] = (float)(i % 17) / 17.0f - 0.4f;
    if (q_is_quant(dt)) q_quantize(dt, w, rows, cols, 64, DT_BF16, 1, data);
    else dt_from_f32(dt, w, data, (size_t)rows * cols);
    tn_mat m;
    q_mat_bind(&m, data, dt, rows, cols, 64, DT_BF16, 1);
    kern_act a;
    kern_act_init(&a, abuf, x, (size_t)cols, T, cols, i8);
    kern_act_prepare(&a);
    double best = 1e9;
    for (int it = 0; it < 5; it++) {
        double c = pool ? clk_now_s() : clk_cpu_s();
        kern_matmul_act(kern_default_ops(), pool, &m, &a, y, (size_t)rows);
        c = (pool ? clk_now_s() : clk_cpu_s()) - c;
        if (c < best) best = c;
    }
    free(w);
    free(x);
    free(y);
    free(data);
    free(abuf);
    return (double)rows * cols * T / best / 1e9;
}

int main(int argc, char **argv) {
    int rows = 8192, cols = 8192, ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN), pos = 0;
    const char *tables = NULL, *dtypes = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) ncpu = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tables") && i + 1 < argc) tables = argv[++i];
        else if (!strcmp(argv[i], "--dtypes") && i + 1 < argc) dtypes = argv[++i];
        else if (pos < 2) *(pos++ ? &cols : &rows) = atoi(argv[i]);
    }
    if (ncpu < 1) ncpu = 1;
    pool_t *p1 = pool_new(1), *pn = pool_new(ncpu);
    rate m1 = mem_bw(p1), mn = mem_bw(pn);
    printf("memory read loop: %.1f GB/s (1 thread), %.1f GB/s (%d threads); per CPU second: %.1f, %.1f\n", m1.wall,
           mn.wall, ncpu, m1.cpu, mn.cpu);
    printf("matmul [%d x %d] x 1 token, GB/s of weights streamed (bytes incl. scales/biases / time)\n", rows, cols);
    printf("%-8s %-6s %7s | %8s %8s | %8s %8s | %7s %7s\n", "table", "dtype", "bits/w", "1 thread", "all", "1t/cpu-s",
           "all/cpu-s", "1t %", "all %");
    float *w = malloc((size_t)rows * cols * sizeof(float)), *x = malloc((size_t)cols * sizeof(float));
    float *y = malloc((size_t)rows * sizeof(float));
    void *abuf = malloc(kern_act_bytes(1, cols));
    if (!w || !x || !y || !abuf) return 1;
    for (size_t i = 0; i < (size_t)rows * cols; i++) w[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    for (int i = 0; i < cols; i++) x[i] = (float)(i % 17) / 17.0f;
    const char *names[] = {"scalar", "avx2", "avx512", "neon"};
    /* the GGUF block types (quant/kquant.h) on random valid blocks: only when listed in --dtypes */
    const dt_type dts[] = {DT_F32, DT_BF16, DT_F16, DT_Q8, DT_Q4, DT_Q3, DT_Q4_K, DT_Q6_K, DT_Q5_K, DT_Q3_K,
                           DT_Q2_K, DT_IQ4_XS, DT_IQ4_NL, DT_IQ2_XXS, DT_IQ2_XS, DT_IQ2_S, DT_IQ3_XXS, DT_IQ3_S,
                           DT_IQ1_S, DT_IQ1_M, DT_Q2, DT_Q2V, DT_Q5_0, DT_Q5_1};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
        const int kq = kq_is(dts[d]), group = kq ? kq_blk(dts[d]) : 64;
        if (!listed(dtypes, dt_name(dts[d])) || (kq && !kq_rotated(dts[d]) && !dtypes)) continue;
        uint64_t bytes = q_mat_bytes(dts[d], rows, cols, group, DT_BF16);
        void *data = malloc(bytes);
        if (!data) return 1;
        uint64_t st = 1;
        if (kq && dts[d] != DT_Q2) kq_random(dts[d], data, bytes / (uint64_t)kq_bytes(dts[d]), &st);
        else if (q_is_quant(dts[d])) q_quantize(dts[d], w, rows, cols, 64, DT_BF16, 1, data);
        else dt_from_f32(dts[d], w, data, (size_t)rows * cols);
        tn_mat m;
        q_mat_bind(&m, data, dts[d], rows, cols, group, DT_BF16, 1);
        for (int k = 0; k < 4; k++) {
            const kern_ops *ops = kern_ops_by_name(names[k]);
            if (!ops || !listed(tables, names[k])) continue;
            kern_act a;
            kern_act_init(&a, abuf, x, (size_t)cols, 1, cols, 1);
            kern_act_prepare(&a);
            int i8 = dts[d] == DT_Q8 || dts[d] == DT_Q4 || kq;
            for (int v = 0; v <= i8; v++) {
                mm_case c = {ops, &m, x, v ? &a : NULL, y};
                rate r1 = time_mm(&c, p1, bytes), rn = time_mm(&c, pn, bytes);
                char dn[16];
                snprintf(dn, sizeof dn, "%s%s", dt_name(dts[d]), v ? ".i8" : "");
                printf("%-8s %-6s %7.2f | %8.2f %8.2f | %8.2f %8.2f | %6.0f%% %6.0f%%\n", names[k], dn,
                       8.0 * (double)bytes / ((double)rows * cols), r1.wall, rn.wall, r1.cpu, rn.cpu,
                       100 * r1.cpu / m1.cpu, 100 * rn.cpu / mn.cpu);
            }
        }
        free(data);
    }
    printf("\nprefill: [4096 x 2048] x 64 tokens, one thread, %s table, G multiply-adds per CPU second\n",
           kern_default_ops()->name);
    double pq4 = prefill_rate(NULL, 4096, 2048, 64, DT_Q4, 1), pq8 = prefill_rate(NULL, 4096, 2048, 64, DT_Q8, 1),
           pf32 = prefill_rate(NULL, 4096, 2048, 64, DT_F32, 0), pq4x = prefill_rate(NULL, 4096, 2048, 64, DT_Q4, 0);
    /* a Qwen3-30B-A3B expert of a 512-token prefill (8 of 128 experts: ~32 tokens each): gate / up, down */
    double pg = prefill_rate(NULL, 768, 2048, 32, DT_Q4, 1), pd = prefill_rate(NULL, 2048, 768, 32, DT_Q4, 1);
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512vnni")) {
        double pk = vnni_peak();
        printf("vpdpbusd peak loop: %.0f G/s; q4.i8 %.0f (%.0f%% of it), q8.i8 %.0f (%.0f%%)\n", pk, pq4,
               100 * pq4 / pk, pq8, 100 * pq8 / pk);
        printf("an expert, 32 tokens, q4.i8: [768 x 2048] %.0f (%.0f%%), [2048 x 768] %.0f (%.0f%%)\n", pg, 100 * pg / pk,
               pd, 100 * pd / pk);
    } else
#endif
        printf("q4.i8 %.0f G/s, q8.i8 %.0f G/s; an expert, 32 tokens, q4.i8: [768 x 2048] %.0f, [2048 x 768] %.0f\n", pq4,
               pq8, pg, pd);
    printf("exact kernels: f32 %.0f G/s, q4 %.0f G/s\n", pf32, pq4x);
    printf("the same on %d threads, G multiply-adds per wall second: q4.i8 %.0f, q8.i8 %.0f, expert [768 x 2048] %.0f, "
           "[2048 x 768] %.0f\n\n",
           ncpu, prefill_rate(pn, 4096, 2048, 64, DT_Q4, 1), prefill_rate(pn, 4096, 2048, 64, DT_Q8, 1),
           prefill_rate(pn, 768, 2048, 32, DT_Q4, 1), prefill_rate(pn, 2048, 768, 32, DT_Q4, 1));
    m1 = mem_bw(p1);
    mn = mem_bw(pn);
    printf("memory read loop again: %.1f GB/s (1 thread), %.1f GB/s (%d threads); per CPU second: %.1f, %.1f\n", m1.wall,
           mn.wall, ncpu, m1.cpu, mn.cpu);
    free(w);
    free(x);
    free(y);
    free(abuf);
    pool_free(p1);
    pool_free(pn);
    return 0;
}
