/*
 * llama_kernel_compare.c — sluice's int8 matmul of each GGUF block type against ggml's own vec_dot on the same
 * rows (docs/QUANT.md "Against ggml's vec_dot"): one token (decode), the engines alternating round by round, the
 * best of the rounds per engine, ns per 256 weights and GB/s of weights per wall and per CPU second. The rows are
 * kq_random's valid blocks (byte-identical in both engines: the outputs are compared), Q4_0 / Q8_0 a fixed pattern
 * quantized by each engine its own way (sluice holds them as q4 / q8 group 32, llama.cpp's activations, the bias
 * implied). ggml runs each row through ggml_get_type_traits_cpu(type)->vec_dot, as its mul_mat does for one token
 * without weight repacking, on sluice's thread pool. Local only (CI has no llama.cpp); build against a CPU build
 * of llama.cpp (L = its bin directory, I = its ggml/include):
 *   cc -O2 -std=gnu11 -Iinclude -Isrc -I$I tools/llama_kernel_compare.c build/libsluice.a -L$L -Wl,-rpath,$L \
 *      -lggml-cpu -lggml-base -lm -pthread -o build/llama_kernel_compare
 *   build/llama_kernel_compare THREADS ROUNDS MIB TYPE...   (env COLS, default 4096; TABLE, default avx512;
 *   ROWS / REPS: ROWS rows called REPS times, for the per-call cost of small matrices)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-cpu.h"
#include "ggml.h"
#include "kernels/kernels.h"
#include "quant/kquant.h"
#include "quant/quant.h"
#include "util/clock.h"
#include "util/threadpool.h"

typedef struct {
    const char *name;
    dt_type dt;
    enum ggml_type gt;
} ty;

static const ty TYPES[] = {
    {"Q2_K", DT_Q2_K, GGML_TYPE_Q2_K},          {"Q3_K", DT_Q3_K, GGML_TYPE_Q3_K},
    {"Q4_K", DT_Q4_K, GGML_TYPE_Q4_K},          {"Q5_K", DT_Q5_K, GGML_TYPE_Q5_K},
    {"Q6_K", DT_Q6_K, GGML_TYPE_Q6_K},          {"IQ4_XS", DT_IQ4_XS, GGML_TYPE_IQ4_XS},
    {"IQ4_NL", DT_IQ4_NL, GGML_TYPE_IQ4_NL},    {"IQ3_XXS", DT_IQ3_XXS, GGML_TYPE_IQ3_XXS},
    {"IQ3_S", DT_IQ3_S, GGML_TYPE_IQ3_S},       {"IQ2_XXS", DT_IQ2_XXS, GGML_TYPE_IQ2_XXS},
    {"IQ2_XS", DT_IQ2_XS, GGML_TYPE_IQ2_XS},    {"IQ2_S", DT_IQ2_S, GGML_TYPE_IQ2_S},
    {"IQ1_S", DT_IQ1_S, GGML_TYPE_IQ1_S},       {"IQ1_M", DT_IQ1_M, GGML_TYPE_IQ1_M},
    {"Q4_0", DT_Q4, GGML_TYPE_Q4_0},            {"Q8_0", DT_Q8, GGML_TYPE_Q8_0},
    {"Q5_0", DT_Q5_0, GGML_TYPE_Q5_0},          {"Q5_1", DT_Q5_1, GGML_TYPE_Q5_1}};

typedef struct {
    const struct ggml_type_traits_cpu *tr;
    const uint8_t *w;
    size_t rb;
    const void *xq;
    int n;
    float *y;
} gg_job;

static void gg_part(void *c, size_t b, size_t e) {
    gg_job *j = c;
    for (size_t r = b; r < e; r++) j->tr->vec_dot(j->n, j->y + r, 0, j->w + r * j->rb, 0, j->xq, 0, 1);
}

static int env_int(const char *name, int dflt) { return getenv(name) ? atoi(getenv(name)) : dflt; }

/* the same matrix for both: ggml's rows in gw; sluice's matrix bound in m (its data in *sdata, NULL: gw) */
static int make_rows(const ty *t, int rows, int cols, uint8_t *gw, size_t grb, tn_mat *m, void **sdata) {
    *sdata = NULL;
    if (kq_is(t->dt)) {
        uint64_t st = 1;
        kq_random(t->dt, gw, grb * (size_t)rows / (size_t)kq_bytes(t->dt), &st);
        q_mat_bind(m, gw, t->dt, rows, cols, kq_blk(t->dt), DT_F16, 1);
        return 0;
    }
    float *w = malloc((size_t)rows * (size_t)cols * sizeof(float));
    *sdata = malloc(q_mat_bytes(t->dt, rows, cols, 32, DT_F16));
    if (!w || !*sdata) return free(w), -1;
    for (size_t i = 0; i < (size_t)rows * (size_t)cols; i++) w[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    for (int r = 0; r < rows; r++) ggml_get_type_traits_cpu(t->gt)->from_float(w + (size_t)r * cols, gw + (size_t)r * grb, cols);
    q_quantize(t->dt, w, rows, cols, 32, DT_F16, 1, *sdata);
    free(w);
    q_mat_bind(m, *sdata, t->dt, rows, cols, 32, DT_F16, 1);
    m->bias_implied = 1; /* as a GGUF Q4_0 / Q8_0 import (quantized from floats here: timing only) */
    m->act = TN_ACT_Q8_0;
    return 0;
}

typedef struct {
    double wall[2], cpu[2]; /* best per engine: 0 sluice, 1 ggml */
} best;

static void time_both(const kern_ops *ops, pool_t *pool, int th, const tn_mat *m, kern_act *ac, float *y, gg_job *j,
                      int rows, int rounds, int reps, best *b) {
    for (int e = 0; e < 2; e++) b->wall[e] = b->cpu[e] = 1e9;
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < 2; k++) {
            const int eng = (r + k) % 2;
            const double t0 = clk_now_s(), c0 = clk_cpu_s();
            for (int i = 0; i < reps; i++) {
                if (eng == 0) kern_matmul_act(ops, pool, m, ac, y, 1);
                else pool_for(pool, (size_t)rows, 16, gg_part, j);
            }
            const double dt = clk_now_s() - t0, dc = (clk_cpu_s() - c0) / th;
            if (dt < b->wall[eng]) b->wall[eng] = dt;
            if (dc < b->cpu[eng]) b->cpu[eng] = dc;
        }
}

static int run_type(const ty *t, const kern_ops *ops, pool_t *pool, int th, int rounds, size_t target, int cols,
                    const float *x, void *abuf) {
    const size_t grb = ggml_row_size(t->gt, cols);
    int rows = (int)(target / grb);
    rows -= rows % 64;
    rows = env_int("ROWS", rows);
    const int reps = env_int("REPS", 1);
    const struct ggml_type_traits_cpu *tr = ggml_get_type_traits_cpu(t->gt);
    uint8_t *gw = malloc(grb * (size_t)rows), *xq = malloc(ggml_row_size(tr->vec_dot_type, cols));
    float *y = malloc((size_t)rows * sizeof(float)), *y2 = malloc((size_t)rows * sizeof(float));
    tn_mat m;
    void *sdata = NULL;
    if (!gw || !xq || !y || !y2 || make_rows(t, rows, cols, gw, grb, &m, &sdata)) return free(gw), free(xq), free(y), free(y2), -1;
    ggml_get_type_traits_cpu(tr->vec_dot_type)->from_float(x, xq, cols);
    kern_act ac;
    kern_act_init(&ac, abuf, x, (size_t)cols, 1, cols, 1);
    kern_act_prepare(&ac);
    kern_act_prepare_kq(&ac);
    gg_job j = {tr, gw, grb, xq, cols, y2};
    best b;
    time_both(ops, pool, th, &m, &ac, y, &j, rows, rounds, reps, &b);
    double rel = 0, nsb = (double)rows * cols / 256 * reps, sb = sdata ? (double)q_mat_bytes(t->dt, rows, cols, 32, DT_F16) : (double)grb * rows;
    for (int r = 0; r < (rows < 64 ? rows : 64); r++) rel += fabs(y[r] - y2[r]) / (fabs(y2[r]) + 1e-3);
    printf("%-8s %3d | %9.1f %9.1f | %8.2f %8.2f | %8.2f %8.2f | %6.2f %6.2f  (%d rows x %d, %.0f MB; rel |dy| %.1e)\n", t->name,
           th, b.wall[0] * 1e9 / nsb, b.wall[1] * 1e9 / nsb, sb * reps / b.wall[0] / 1e9, (double)grb * rows * reps / b.wall[1] / 1e9,
           sb * reps / b.cpu[0] / 1e9, (double)grb * rows * reps / b.cpu[1] / 1e9, b.wall[1] / b.wall[0], b.cpu[1] / b.cpu[0],
           rows, cols, sb / 1e6, rel / (rows < 64 ? rows : 64));
    fflush(stdout);
    free(gw), free(xq), free(y), free(y2), free(sdata);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s THREADS ROUNDS MIB TYPE...\n", argv[0]);
        return 2;
    }
    const int th = atoi(argv[1]), rounds = atoi(argv[2]), cols = env_int("COLS", 4096);
    const size_t target = (size_t)atoi(argv[3]) << 20;
    ggml_cpu_init();
    pool_t *pool = pool_new(th);
    const kern_ops *ops = kern_ops_by_name(getenv("TABLE") ? getenv("TABLE") : "avx512");
    float *x = malloc((size_t)cols * sizeof(float));
    void *abuf = malloc(kern_act_bytes(1, cols));
    if (!pool || !ops || !x || !abuf) return 1;
    for (int i = 0; i < cols; i++) x[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    printf("%-8s %3s | %9s %9s | %8s %8s | %8s %8s | %6s %6s\n", "type", "th", "sl ns/256", "gg ns/256", "sl GB/s", "gg GB/s",
           "sl cpu", "gg cpu", "x wall", "x cpu");
    for (int a = 4; a < argc; a++) {
        const ty *t = NULL;
        for (size_t i = 0; i < sizeof TYPES / sizeof *TYPES; i++)
            if (!strcmp(TYPES[i].name, argv[a])) t = &TYPES[i];
        if (!t || run_type(t, ops, pool, th, rounds, target, cols, x, abuf)) fprintf(stderr, "%s: unknown or no memory\n", argv[a]);
    }
    free(x);
    free(abuf);
    pool_free(pool);
    return 0;
}
