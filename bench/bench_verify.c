/*
 * bench_verify.c — what checking every expert block's xxh3 costs a streamed decode, measured so that the
 * load of a shared machine falls on both sides alike: the model opened twice (checksums on, and off with
 * no_verify), the same cache budget, --routing uniform, O_DIRECT, prefetch off, and decode steps taken in
 * turn, one token on each model, with its own random ids, so every pair of steps ran within ~0.3 s of
 * each other. Reports the ratio of the summed step times (on / off), the median and quartiles of the
 * per-pair ratios, and the I/O threads' checksum time per token (sl_stats.engine_verify_s) as a share
 * of the checked model's step time; and the process's CPU time per step (CLOCK_PROCESS_CPUTIME_ID, every
 * thread), checked less unchecked, as a share of the checked step's wall and CPU time; and per side the
 * wall tok/s, the process CPU seconds per token and the disk's busy share (sl_stats.io_busy_s over the
 * side's step time: how much of its decode the disk was working for it).
 *
 * Usage: build/bench_verify MODEL.sluice [cache_bytes] [tokens] [threads] [aa|ba]   (defaults: 64 MiB, 64, 2)
 * With "aa" both models are opened unchecked (an A/A control: the "checked" side is a second unchecked
 * open, so its ratios show the noise of the machine and of the alternation alone). The model opened first
 * ran slower here: A/A summed ratios 1.02-1.08 in 5 runs (2026-12-02, load 3-4), so "ba" opens the
 * unchecked model first; a run of each order, ratios r_ab and r_ba, gives the checks' cost as
 * sqrt(r_ab * r_ba) with the order's bias cancelled.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice.h"
#include "util/clock.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_verify MODEL.sluice [cache_bytes] [tokens] [threads] [aa|ba]\n");
        return 2;
    }
    unsigned long long cache = argc > 2 ? strtoull(argv[2], NULL, 10) : 64ull << 20;
    int n = argc > 3 ? atoi(argv[3]) : 64, threads = argc > 4 ? atoi(argv[4]) : 2;
    const int aa = argc > 5 && !strcmp(argv[5], "aa"), ba = argc > 5 && !strcmp(argv[5], "ba");
    if (n < 4 || threads < 1 || cache == 0) return 2;
    sl_model *m[2] = {NULL, NULL};
    sl_session *s[2] = {NULL, NULL};
    sl_error err = {0};
    for (int o = 0; o < 2; o++) {
        const int k = ba ? 1 - o : o; /* m[0] is the checked side whichever is opened first */
        sl_model_params mp = sl_model_params_default();
        mp.cache_bytes = cache;
        mp.io_mode = SL_IO_DIRECT;
        mp.routing = SL_ROUTING_UNIFORM;
        mp.prefetch = -1;
        mp.n_threads = threads;
        mp.no_verify = k || aa; /* 0: checked, 1: not (the A/A control: neither) */
        if (sl_model_open(argv[1], &mp, &m[k], &err) || sl_session_new(m[k], n + 8, &s[k])) {
            fprintf(stderr, "bench_verify: %s\n", err.msg[0] ? err.msg : "cannot start a session");
            return 1;
        }
    }
    const int V = sl_model_n_vocab(m[0]);
    double *dt[2] = {calloc((size_t)n, sizeof(double)), calloc((size_t)n, sizeof(double))};
    double *ratio = calloc((size_t)n, sizeof(double));
    double *dc[2] = {calloc((size_t)n, sizeof(double)), calloc((size_t)n, sizeof(double))};
    double *dcpu = calloc((size_t)n, sizeof(double));
    uint64_t seed[2] = {1, 2};
    sl_stats s0, u0;
    int rc = 0;
    for (int i = -4; i < n && !rc; i++) { /* 4 warm-up pairs, then n measured */
        if (i == 0) sl_model_stats(m[0], &s0);
        if (i == 0) sl_model_stats(m[1], &u0);
        for (int k = 0; k < 2 && !rc; k++) {
            int kk = (i & 1) ? 1 - k : k; /* alternate which model goes first */
            seed[kk] = seed[kk] * 6364136223846793005ull + 1442695040888963407ull;
            int32_t tok = (int32_t)((seed[kk] >> 33) % (uint64_t)V);
            double t0 = clk_now_s(), c0 = clk_cpu_s();
            rc = sl_session_eval(s[kk], &tok, 1, NULL, 0);
            if (i >= 0) {
                dt[kk][i] = clk_now_s() - t0;
                dc[kk][i] = clk_cpu_s() - c0;
            }
        }
    }
    if (rc) {
        fprintf(stderr, "bench_verify: %s\n", sl_session_errmsg(s[0]));
        return 1;
    }
    sl_stats st[2];
    for (int k = 0; k < 2; k++) sl_model_stats(m[k], &st[k]);
    double sum[2] = {0, 0}, csum[2] = {0, 0};
    for (int i = 0; i < n; i++) {
        sum[0] += dt[0][i];
        sum[1] += dt[1][i];
        csum[0] += dc[0][i];
        csum[1] += dc[1][i];
        ratio[i] = dt[0][i] / dt[1][i];
        dcpu[i] = dc[0][i] - dc[1][i];
    }
    qsort(ratio, (size_t)n, sizeof *ratio, cmp_d);
    qsort(dcpu, (size_t)n, sizeof *dcpu, cmp_d);
    const double hash_ms = 1e3 * (st[0].engine_verify_s - s0.engine_verify_s) / n, step_ms = 1e3 * sum[0] / n;
    printf("tokens %d per model, cache %llu bytes, %d threads, %.1f MiB read per token%s\n", n, cache, threads,
           (double)(st[0].bytes_read - s0.bytes_read) / n / 1048576.0,
           aa ? " (A/A control: both sides unchecked)" : ba ? " (the unchecked model opened first)" : "");
    printf("decode step: checked %.1f ms, unchecked %.1f ms; summed ratio %.4f; per-pair ratio median %.4f "
           "(quartiles %.4f, %.4f)\n",
           step_ms, 1e3 * sum[1] / n, sum[0] / sum[1], ratio[n / 2], ratio[n / 4], ratio[3 * n / 4]);
    printf("checksums on the I/O threads: %.2f ms per token = %.1f%% of the checked step\n", hash_ms,
           100.0 * hash_ms / step_ms);
    const double extra_ms = 1e3 * (csum[0] - csum[1]) / n;
    printf("process CPU per step: checked %.1f ms, unchecked %.1f ms; the checks' CPU %.2f ms per token = %.1f%% "
           "of the checked step's wall time, %.1f%% of its CPU time; per-pair difference median %.2f ms "
           "(quartiles %.2f, %.2f)\n",
           1e3 * csum[0] / n, 1e3 * csum[1] / n, extra_ms, 100.0 * extra_ms / step_ms, 100.0 * (csum[0] - csum[1]) / csum[0],
           1e3 * dcpu[n / 2], 1e3 * dcpu[n / 4], 1e3 * dcpu[3 * n / 4]);
    const double busy[2] = {st[0].io_busy_s - s0.io_busy_s, st[1].io_busy_s - u0.io_busy_s};
    for (int k = 0; k < 2; k++)
        printf("%s: %.3f tok/s, %.4f CPU s per token, read %.2f GB/s, disk busy %.3f of the decode, waiting for reads "
               "%.1f ms per token\n",
               k ? "unchecked" : "checked  ", n / sum[k], csum[k] / n,
               1e-9 * (double)(st[k].bytes_read - (k ? u0.bytes_read : s0.bytes_read)) / sum[k], busy[k] / sum[k],
               1e3 * (st[k].io_wait_s - (k ? u0.io_wait_s : s0.io_wait_s)) / n);
    for (int k = 0; k < 2; k++) {
        sl_session_free(s[k]);
        sl_model_close(m[k]);
        free(dt[k]);
        free(dc[k]);
    }
    free(ratio);
    free(dcpu);
    return 0;
}
