/*
 * bench_hybrid.c — the hybrid step's host expert rate (issue 25; docs/CUDA.md "The hybrid step"): GB/s of weights
 * through kernels_dev.c's kern_ffn_dev (the device's canonical order on the host), the CPU backend's own expert FFN
 * (be_backend.ffn: kernels.c's int8 matmuls) and a plain read loop over the same bytes, one token (decode), in
 * alternated rounds, with 1 thread and with N, per second of CPU time (process CPU time / threads: the machine may
 * be shared) and per wall second. kern_ffn_dev_multi (a layer's host experts in two hand-offs) is measured too.
 * The experts: NX of the Qwen3-30B-A3B shape (gate / up [768][2048], down [2048][768]) cycled, so they do not fit
 * in cache; q4 groups of 32 with f16 scales (a GGUF Q4_0's pack) unless --g64 (sluice's q4 g64 bf16).
 * Usage: build/bench_hybrid [--threads N] [--rounds R] [--experts NX] [--g64] [--batch K] [--only M]
 *   --only M: that measurement alone (0 kern_ffn_dev, 1 kern_ffn_dev_multi, 2 the CPU backend's, 3 the read loop)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "kernels/kernels.h"
#include "quant/quant.h"
#include "util/clock.h"
#include "util/dtype.h"
#include "util/threadpool.h"

#define H 2048
#define I 768

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
}

static void *mat(int rows, int cols, int group, dt_type sdt, tn_mat *m, size_t *bytes) {
    float *w = malloc((size_t)rows * cols * sizeof(float));
    for (size_t i = 0; i < (size_t)rows * cols; i++) w[i] = frand() * 0.05f;
    *bytes = q_mat_bytes(DT_Q4, rows, cols, group, sdt);
    void *data = malloc(*bytes);
    q_quantize(DT_Q4, w, rows, cols, group, sdt, 1, data);
    q_mat_bind(m, data, DT_Q4, rows, cols, group, sdt, 1);
    if (sdt == DT_F16) { /* a GGUF Q4_0's form: symmetric, every bias -8 times its scale */
        const size_t ng = (size_t)rows * (size_t)(cols / group);
        const uint16_t *sc = m->scales;
        uint16_t *bi = (uint16_t *)m->biases;
        for (size_t i = 0; i < ng; i++) bi[i] = f32_to_f16(-8.0f * f16_to_f32(sc[i]));
    }
    m->bias_implied = q_biases_implied(m); /* as engine/experts.c sets it (a GGUF Q4_0's pack: 1) */
    free(w);
    return data;
}

typedef struct {
    const uint8_t *p;
    size_t n;
    uint64_t sum;
} rd_job;

static void rd_part(void *ctx, size_t b, size_t e) {
    rd_job *j = ctx;
    uint64_t s[8] = {0};
    const size_t lo = b * 4096, hi = e * 4096 < j->n ? e * 4096 : j->n;
    for (size_t i = lo; i + 64 <= hi; i += 64)
        for (int k = 0; k < 8; k++) s[k] ^= *(const uint64_t *)(j->p + i + 8 * k);
    uint64_t t = 0;
    for (int k = 0; k < 8; k++) t ^= s[k];
    __atomic_add_fetch(&j->sum, t, __ATOMIC_RELAXED);
}

typedef struct {
    tn_expert *ex;
    void **data;
    size_t *bytes; /* per expert, all three matrices */
    int nx;
    float *x, *g, *u, *y;
    void *xbuf, *mid;
} bench;

enum { M_DEV, M_MULTI, M_CPU, M_READ, M_N };
static const char *const mname[M_N] = {"kern_ffn_dev", "kern_ffn_dev_multi", "CPU backend ffn", "read loop"};

/* one pass over every expert (K at a time for multi); returns bytes of weights touched */
static double pass(bench *b, int mode, pool_t *pool, be_backend *be, int K) {
    double bytes = 0;
    kern_act a;
    kern_act_init(&a, b->xbuf, b->x, H, 1, H, 1);
    kern_act_prepare(&a);
    for (int e = 0; e < b->nx; e += mode == M_MULTI ? K : 1) {
        if (mode == M_DEV) {
            kern_ffn_dev(pool, &b->ex[e], &a, I, b->g, b->u, b->mid, b->y, H);
        } else if (mode == M_MULTI) {
            int n = e + K <= b->nx ? K : b->nx - e;
            kern_ffn_arg args[64];
            for (int i = 0; i < n; i++)
                args[i] = (kern_ffn_arg){&b->ex[e + i], &a, b->g + (size_t)i * I, b->u + (size_t)i * I,
                                         (uint8_t *)b->mid + (size_t)i * kern_act_bytes(1, I), b->y + (size_t)i * H, H};
            kern_ffn_dev_multi(pool, args, n, I);
            for (int i = 1; i < n; i++) bytes += (double)b->bytes[e + i];
        } else if (mode == M_CPU) {
            const be_ffn f = {.kind = BE_FFN_SWIGLU, .w = &b->ex[e], .x = &a, .inter = I, .g = b->g, .u = b->u,
                              .mid_buf = b->mid, .int8 = 1, .y = b->y, .ldy = H};
            be->ffn(be, &f);
        } else {
            for (int m = 0; m < 3; m++) {
                const tn_mat *w = m == 0 ? &b->ex[e].gate : m == 1 ? &b->ex[e].up : &b->ex[e].down;
                rd_job j = {w->data, q_mat_bytes(DT_Q4, w->rows, w->cols, w->group, w->sdtype), 0};
                pool_for_any(pool, (j.n + 4095) / 4096, 8, rd_part, &j);
            }
        }
        bytes += (double)b->bytes[e];
    }
    return bytes;
}

int main(int argc, char **argv) {
    int threads = 0, rounds = 5, nx = 32, g64 = 0, K = 8, only = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--experts") && i + 1 < argc) nx = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) K = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--g64")) g64 = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--threads N] [--rounds R] [--experts NX] [--g64] [--batch K] [--only M (0 dev, 1 multi, 2 cpu, 3 read)]\n", argv[0]);
            return 2;
        }
    }
    if (K < 1 || K > 64) K = 8;
    pool_t *p1 = pool_new(1), *pn = pool_new(threads);
    const int nt = pool_size(pn);
    be_backend *be1 = be_cpu_new(NULL, p1), *ben = be_cpu_new(NULL, pn);
    bench b = {0};
    b.nx = nx;
    b.ex = calloc((size_t)nx, sizeof *b.ex);
    b.data = calloc((size_t)nx * 3, sizeof *b.data);
    b.bytes = calloc((size_t)nx, sizeof *b.bytes);
    const int group = g64 ? 64 : 32;
    const dt_type sdt = g64 ? DT_BF16 : DT_F16;
    for (int e = 0; e < nx; e++) {
        size_t b0, b1, b2;
        b.data[3 * e] = mat(I, H, group, sdt, &b.ex[e].gate, &b0);
        b.data[3 * e + 1] = mat(I, H, group, sdt, &b.ex[e].up, &b1);
        b.data[3 * e + 2] = mat(H, I, group, sdt, &b.ex[e].down, &b2);
        b.bytes[e] = b0 + b1 + b2;
    }
    b.x = malloc(H * sizeof(float));
    for (int i = 0; i < H; i++) b.x[i] = frand();
    b.g = malloc((size_t)64 * 2 * I * sizeof(float));
    b.u = malloc((size_t)64 * I * sizeof(float));
    b.y = malloc((size_t)64 * H * sizeof(float));
    b.xbuf = malloc(kern_act_bytes(1, H));
    b.mid = malloc((size_t)64 * kern_act_bytes(1, I));
    printf("%d experts of %.2f MB (q4 g%d %s, biases %s), %d rounds alternated; GB/s of weights per CPU second a thread "
           "(per wall second)\n", nx, b.bytes[0] / 1e6, group, g64 ? "bf16" : "f16",
           b.ex[0].gate.bias_implied ? "implied (-8 s)" : "stored", rounds);
    double best_c[2][M_N] = {{0}}, best_w[2][M_N] = {{0}};
    for (int r = 0; r < rounds; r++)
        for (int ti = 0; ti < 2; ti++)
            for (int m = 0; m < M_N; m++) {
                if (only >= 0 && m != only) continue;
                pool_t *pool = ti ? pn : p1;
                const int th = ti ? nt : 1;
                pass(&b, m, ti ? pn : NULL, ti ? ben : be1, K); /* warm: the pool's threads, the pages */
                double t = clk_now_s(), c = clk_cpu_s(), by = 0;
                for (int k = 0; k < 3; k++) by += pass(&b, m, m == M_DEV || m == M_MULTI ? (ti ? pool : NULL) : pool, ti ? ben : be1, K);
                t = clk_now_s() - t;
                c = clk_cpu_s() - c;
                const double gc = by / (c / th) / 1e9, gw = by / t / 1e9;
                if (gc > best_c[ti][m]) best_c[ti][m] = gc;
                if (gw > best_w[ti][m]) best_w[ti][m] = gw;
            }
    for (int ti = 0; ti < 2; ti++) {
        printf("%d thread%s:\n", ti ? nt : 1, ti && nt > 1 ? "s" : "");
        for (int m = 0; m < M_N; m++)
            printf("  %-20s %6.2f GB/s per CPU s a thread (%5.2f wall), %3.0f%% of the read loop's\n", mname[m],
                   best_c[ti][m], best_w[ti][m], 100 * best_c[ti][m] / best_c[ti][M_READ]);
    }
    for (int e = 0; e < 3 * nx; e++) free(b.data[e]);
    free(b.data), free(b.ex), free(b.bytes), free(b.x), free(b.g), free(b.u), free(b.y), free(b.xbuf), free(b.mid);
    be1->destroy(be1), ben->destroy(ben);
    pool_free(p1), pool_free(pn);
    return 0;
}
