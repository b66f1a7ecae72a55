/*
 * bench_decode.c — prefill and decode of one container with the default int8-activation kernels and with
 * the exact ones (sl_model_params.exact), both models open at once and measured in turn, twice, so the
 * ratio comes from one run. Each rate is given per wall second and per CPU second (process CPU time /
 * threads: the rate while the code runs, on a machine other processes share). Random token ids, as
 * llama-bench feeds. Experts resident.
 *
 * Usage: build/bench_decode MODEL.sluice [threads] [prompt] [gen]   (defaults: 2, 32, 32)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "sluice.h"
#include "util/clock.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_decode MODEL.sluice [threads] [prompt] [gen]\n");
        return 2;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 2, np = argc > 3 ? atoi(argv[3]) : 32, ng = argc > 4 ? atoi(argv[4]) : 32;
    if (threads < 1 || np < 1 || ng < 1) return 2;
    sl_model_params mp = sl_model_params_default();
    mp.resident = 1;
    mp.n_threads = threads;
    sl_model *m[2] = {NULL, NULL};
    sl_error err = {0};
    for (int k = 0; k < 2; k++) {
        mp.exact = k;
        if (sl_model_open(argv[1], &mp, &m[k], &err)) {
            fprintf(stderr, "bench_decode: %s\n", err.msg);
            return 1;
        }
    }
    int V = sl_model_n_vocab(m[0]);
    float *lg = malloc((size_t)V * sizeof(float));
    int32_t *tok = malloc((size_t)np * sizeof(int32_t));
    if (!lg || !tok) return 1;
    unsigned s = 1;
    for (int i = 0; i < np; i++) tok[i] = (int32_t)(((s = s * 1103515245u + 12345u) >> 8) % (unsigned)V);
    printf("%s, %d threads, prompt %d, decode %d\n", argv[1], threads, np, ng);
    printf("%-6s %14s %14s %14s %14s\n", "kernels", "prefill tok/s", "per cpu-s", "decode tok/s", "per cpu-s");
    for (int rep = 0; rep < 2; rep++)
        for (int k = 0; k < 2; k++) {
            sl_session *se = NULL;
            if (sl_session_new(m[k], 0, &se)) return 1;
            double w0 = clk_now_s(), c0 = clk_cpu_s();
            int bad = sl_session_eval(se, tok, np, lg, 0) != SL_OK;
            double w1 = clk_now_s(), c1 = clk_cpu_s();
            for (int i = 0; !bad && i < ng; i++) {
                int32_t t = (int32_t)(((s = s * 1103515245u + 12345u) >> 8) % (unsigned)V);
                bad = sl_session_eval(se, &t, 1, lg, 0) != SL_OK;
            }
            double w2 = clk_now_s(), c2 = clk_cpu_s();
            sl_session_free(se);
            if (bad) {
                fprintf(stderr, "bench_decode: %s\n", sl_model_errmsg(m[k]));
                return 1;
            }
            printf("%-6s %14.1f %14.1f %14.2f %14.2f\n", k ? "exact" : "int8", np / (w1 - w0), np / ((c1 - c0) / threads),
                   ng / (w2 - w1), ng / ((c2 - c1) / threads));
        }
    sl_model_close(m[0]);
    sl_model_close(m[1]);
    free(lg);
    free(tok);
    return 0;
}
