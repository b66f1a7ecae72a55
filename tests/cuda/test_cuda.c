/*
 * test_cuda.c — the CUDA tier's kernels (src/backend/cuda/cuda.h) against the CPU oracle
 * (src/quant/quant.c's q_row_to_f32, the dequantisation every CPU kernel is tested against), on random
 * matrices in every layout: f32, bf16, f16, q8 and q4 in groups of 32, 64 and 128 with f16, bf16 and f32
 * scales, 1 to 13 tokens. Checks: max |y - ref| / max |ref| <= 1e-5 (f32 sums in another order than the
 * oracle's double ones); the same call twice gives bitwise the same y; each token of a batch is bitwise
 * that token alone (sequences in a batch equal the sequence alone). Then a bandwidth table: weight GB/s
 * of the decode matvec on large matrices against a device-to-device copy measured in the same process.
 * Run on a machine with a GPU: `make CUDA=1 test-cuda` (tools/cuda_test.sh builds it with nothing but nvcc
 * and gcc, for the GPU machine). Exit status 0 all passed, 1 a failure, 77 no CUDA device (skipped).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "quant/quant.h"

static unsigned long long rng = 88172645463325252ull;
static double urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static float nrand(void) { return (float)(sqrt(-2 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand())); }

static int failures;
#define CK(c, ...) do { if (!(c)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

typedef struct { void *host, *dev; size_t bytes; sl_mat m; slcu_mat d; } mat;

static int make_mat(mat *o, sl_dtype dt, int rows, int cols, int group, sl_dtype sdt, char *msg) {
    memset(o, 0, sizeof *o);
    float *w = malloc((size_t)rows * cols * sizeof(float));
    for (size_t i = 0; i < (size_t)rows * cols; i++) w[i] = nrand() * 0.05f;
    o->bytes = q_mat_bytes(dt, rows, cols, group, sdt);
    o->host = malloc(o->bytes);
    if (q_is_quant(dt)) q_quantize(dt, w, rows, cols, group, sdt, 0, o->host);
    else dt_from_f32(dt, w, o->host, (size_t)rows * cols);
    free(w);
    q_mat_bind(&o->m, o->host, dt, rows, cols, group, sdt, 0);
    if (!(o->dev = slcu_alloc(o->bytes, msg, 256)) || slcu_upload(o->dev, o->host, o->bytes, msg, 256)) return -1;
    const uint8_t *h = o->host, *dv = o->dev;
    o->d.data = dv + ((const uint8_t *)o->m.data - h);
    o->d.scales = o->m.scales ? dv + ((const uint8_t *)o->m.scales - h) : NULL;
    o->d.biases = o->m.biases ? dv + ((const uint8_t *)o->m.biases - h) : NULL;
    o->d.dtype = dt, o->d.sdtype = sdt, o->d.rows = rows, o->d.cols = cols, o->d.group = group;
    return 0;
}

static void free_mat(mat *o) { slcu_free(o->dev); free(o->host); }

static void check_case(sl_dtype dt, int rows, int cols, int group, sl_dtype sdt) {
    char msg[256] = "";
    mat a;
    if (make_mat(&a, dt, rows, cols, group, sdt, msg)) { CK(0, "%s", msg); return; }
    const int ns[] = {1, 2, 3, 5, 8, 13};
    const int maxn = 13;
    float *x = malloc((size_t)maxn * cols * sizeof(float)), *y = malloc((size_t)maxn * rows * sizeof(float));
    float *y2 = malloc((size_t)maxn * rows * sizeof(float)), *y1 = malloc((size_t)rows * sizeof(float));
    for (size_t i = 0; i < (size_t)maxn * cols; i++) x[i] = nrand();
    float *dx = slcu_alloc((size_t)maxn * cols * 4, msg, sizeof msg), *dy = slcu_alloc((size_t)maxn * rows * 4, msg, sizeof msg);
    slcu_upload(dx, x, (size_t)maxn * cols * 4, msg, sizeof msg);
    /* the oracle, in double */
    double *ref = malloc((size_t)maxn * rows * sizeof(double));
    float *row = malloc((size_t)cols * sizeof(float));
    for (int r = 0; r < rows; r++) {
        q_row_to_f32(&a.m, r, row);
        for (int t = 0; t < maxn; t++) {
            double s = 0;
            for (int c = 0; c < cols; c++) s += (double)row[c] * x[(size_t)t * cols + c];
            ref[(size_t)t * rows + r] = s;
        }
    }
    double worst = 0;
    for (unsigned k = 0; k < sizeof ns / sizeof *ns; k++) {
        int n = ns[k];
        if (slcu_matmul(&a.d, dx, dy, n, msg, sizeof msg) || slcu_download(y, dy, (size_t)n * rows * 4, msg, sizeof msg)) {
            CK(0, "%s", msg);
            break;
        }
        slcu_matmul(&a.d, dx, dy, n, msg, sizeof msg);
        slcu_download(y2, dy, (size_t)n * rows * 4, msg, sizeof msg);
        CK(!memcmp(y, y2, (size_t)n * rows * 4), "%s %dx%d n=%d: two calls differ", dt_name(dt), rows, cols, n);
        double maxref = 0, maxerr = 0;
        for (size_t i = 0; i < (size_t)n * rows; i++) {
            maxref = fmax(maxref, fabs(ref[i]));
            maxerr = fmax(maxerr, fabs(y[i] - ref[i]));
        }
        double rel = maxerr / (maxref > 0 ? maxref : 1);
        worst = fmax(worst, rel);
        CK(rel <= 1e-5, "%s g%d %s %dx%d n=%d: relative error %.3g", dt_name(dt), group, dt_name(sdt), rows, cols, n, rel);
        for (int t = 0; t < n; t++) { /* token t alone */
            slcu_matmul(&a.d, dx + (size_t)t * cols, dy, 1, msg, sizeof msg);
            slcu_download(y1, dy, (size_t)rows * 4, msg, sizeof msg);
            CK(!memcmp(y1, y + (size_t)t * rows, (size_t)rows * 4), "%s %dx%d: token %d of %d differs from alone",
               dt_name(dt), rows, cols, t, n);
        }
    }
    printf("ok   %-4s group %-3d scales %-4s %5d x %-5d  max rel err %.2e\n", dt_name(dt), q_is_quant(dt) ? group : 0,
           q_is_quant(dt) ? dt_name(sdt) : "-", rows, cols, worst);
    free(x), free(y), free(y2), free(y1), free(ref), free(row);
    slcu_free(dx), slcu_free(dy);
    free_mat(&a);
}

static void bench(void) {
    char msg[256];
    const size_t copy_bytes = (size_t)1 << 30;
    void *s = slcu_alloc(copy_bytes, msg, sizeof msg), *d = slcu_alloc(copy_bytes, msg, sizeof msg);
    slcu_set_timing(1);
    /* the bound: a device-to-device copy (bytes read + written) */
    float best_copy = 1e30f;
    for (int i = 0; i < 5; i++) {
        float ms;
        slcu_bench_copy(d, s, copy_bytes, &ms);
        if (ms < best_copy) best_copy = ms;
    }
    double copy_gbs = 2.0 * copy_bytes / (best_copy * 1e-3) / 1e9;
    slcu_free(s), slcu_free(d);
    printf("\nbandwidth: device-to-device copy %.0f GB/s (read + write)\n", copy_gbs);
    printf("%-6s %-14s %6s %10s %8s\n", "dtype", "matrix", "tokens", "GB/s", "of copy");
    const struct { sl_dtype dt; int rows, cols; } cs[] = {{DT_Q4, 16384, 8192}, {DT_Q8, 16384, 8192}, {DT_BF16, 16384, 8192}, {DT_F32, 8192, 8192}};
    for (unsigned k = 0; k < sizeof cs / sizeof *cs; k++) {
        mat a;
        if (make_mat(&a, cs[k].dt, cs[k].rows, cs[k].cols, 64, DT_BF16, msg)) { printf("%s\n", msg); continue; }
        float *dx = slcu_alloc((size_t)8 * cs[k].cols * 4, msg, sizeof msg), *dy = slcu_alloc((size_t)8 * cs[k].rows * 4, msg, sizeof msg);
        const int toks[] = {1, 4, 8};
        for (int ti = 0; ti < 3; ti++) {
            float best = 1e30f;
            for (int i = 0; i < 10; i++) {
                slcu_matmul(&a.d, dx, dy, toks[ti], msg, sizeof msg);
                if (slcu_last_ms() < best) best = slcu_last_ms();
            }
            double gbs = (double)a.bytes / (best * 1e-3) / 1e9;
            printf("%-6s %6d x %-6d %6d %10.0f %7.0f%%\n", dt_name(cs[k].dt), cs[k].rows, cs[k].cols, toks[ti], gbs, 100 * gbs / copy_gbs);
        }
        slcu_free(dx), slcu_free(dy);
        free_mat(&a);
    }
    slcu_set_timing(0);
}

int main(int argc, char **argv) {
    char msg[256] = "";
    if (slcu_init(msg, sizeof msg)) {
        printf("skipped: %s\n", msg);
        return 77;
    }
    char name[128] = "";
    uint64_t tot = 0, fr = 0;
    slcu_device_info(name, sizeof name, &tot, &fr);
    printf("device: %s, %.1f GiB\n", name, tot / 1073741824.0);
    check_case(DT_F32, 257, 512, 0, DT_F32);
    check_case(DT_F32, 100, 70, 0, DT_F32); /* columns that do not fill 16-byte pieces */
    check_case(DT_BF16, 1000, 4096, 0, DT_F32);
    check_case(DT_F16, 333, 1024, 0, DT_F32);
    check_case(DT_BF16, 64, 100, 0, DT_F32);
    const int groups[] = {32, 64, 128};
    const sl_dtype sdts[] = {DT_F16, DT_BF16, DT_F32};
    for (int g = 0; g < 3; g++)
        for (int s = 0; s < 3; s++) {
            check_case(DT_Q8, 300, 1024, groups[g], sdts[s]);
            check_case(DT_Q4, 300, 1024, groups[g], sdts[s]);
        }
    check_case(DT_Q4, 2048, 4096, 64, DT_BF16);
    check_case(DT_Q8, 768, 2048, 32, DT_F16);
    printf("%s: %d failure%s\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    if (argc > 1 && !strcmp(argv[1], "--bench")) bench();
    return failures ? 1 : 0;
}
