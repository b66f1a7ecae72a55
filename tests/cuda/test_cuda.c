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
#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/cuda_mvn.h"
#include "family/rope.h"
#include "kernels/kernels.h"
#include "kernels/mxfp4.h"
#include "quant/quant.h"

static unsigned long long rng = 88172645463325252ull;
static double urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static float nrand(void) { return (float)(sqrt(-2 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand())); }

static int failures, fast_fill; /* fast_fill: uniform weights for the benchmarks' large matrices */
#define CK(c, ...) do { if (!(c)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

typedef struct { void *host, *dev; size_t bytes; tn_mat m; slcu_mat d; } mat;

static int make_mat(mat *o, dt_type dt, int rows, int cols, int group, dt_type sdt, char *msg) {
    memset(o, 0, sizeof *o);
    float *w = malloc((size_t)rows * cols * sizeof(float));
    for (size_t i = 0; i < (size_t)rows * cols; i++) w[i] = fast_fill ? (float)(urand() - 0.5) * 0.1f : nrand() * 0.05f;
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

static void check_case(dt_type dt, int rows, int cols, int group, dt_type sdt) {
    char msg[256] = "";
    mat a;
    if (make_mat(&a, dt, rows, cols, group, sdt, msg)) { CK(0, "%s", msg); return; }
    const int ns[] = {1, 2, 3, 5, 8, 13}, maxn = 13;
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

/* ---- int8 figures: decode matvec (1-8 tokens) against the copy rate, the MoE decode step's grouped calls,
 * the GEMM's TOPS (2 rows cols tokens / s) for prefill and the MoE prefill's expert segments ---- */
typedef struct { slcu_mm *mm; int n, per, sets, it; size_t stride_rows; } mmrun;
static void run_mm(void *c) { /* set it % sets of the matrices: each call reads weights not in L2 */
    mmrun *r = c;
    char msg[256];
    int s = r->it++ % r->sets;
    for (int i = 0; i < r->n; i += r->per) {
        slcu_mm m[64];
        int k = r->n - i < r->per ? r->n - i : r->per;
        for (int j = 0; j < k; j++) {
            m[j] = r->mm[i + j];
            const slcu_mat *w = &r->mm[i + j].w;
            size_t rb = (size_t)w->cols / (w->dtype == DT_Q4 ? 2 : 1), ng = (size_t)(w->cols / w->group) * 2, off = (size_t)s * r->stride_rows;
            m[j].w.data = (const uint8_t *)w->data + off * rb;
            m[j].w.scales = (const uint8_t *)w->scales + off * ng, m[j].w.biases = (const uint8_t *)w->biases + off * ng;
        }
        slcu_matmul_i8(m, k, msg, sizeof msg);
    }
}

static slcu_mat sub_mat(const mat *a, int r0, int rows) { /* rows r0 .. r0 + rows - 1 of a */
    slcu_mat m = a->d;
    const int mx = a->d.dtype == DT_MXFP4; /* codes [rows][cols / 2], an E8M0 byte per 32 columns */
    const size_t rb = (size_t)a->d.cols / (a->d.dtype == DT_Q4 || mx ? 2 : 1),
                 sb = (size_t)(a->d.cols / a->d.group) * (mx ? 1 : dt_size(a->d.sdtype));
    m.data = (const uint8_t *)a->d.data + (size_t)r0 * rb;
    m.scales = (const uint8_t *)a->d.scales + (size_t)r0 * sb;
    m.biases = a->d.biases ? (const uint8_t *)a->d.biases + (size_t)r0 * sb : NULL;
    m.rows = rows;
    return m;
}

/* A job on rows r0 .. r0 + rows - 1 of w (an expert's gate, up or down among a matrix of them): nt tokens of a (their
 * rows arows, or NULL), output y with rows floats a token */
static slcu_mm rows_job(const mat *w, int r0, int rows, const slcu_act *a, const int *arows, int nt, float *y) {
    return (slcu_mm){sub_mat(w, r0, rows), a, arows, nt, y, (size_t)rows, NULL, NULL};
}

static void bench_moe_wide(const mat *gu, const mat *dn, float *dx);
static void bench_mv_rows(const mat *gu, const mat *dn, float *dx, float *dy, void *abuf, void *dbuf, double copy_gbs);
static void check_mv_rows(const mat *a, const slcu_act *da, const int *drows, const int *idx, int N, const float *alone, float *dy,
                          const void *dtab, const void *dsel);
static void check_mv_split(const mat *a, const slcu_act *da, const float *alone, float *dy);

#include "test_cuda_bench.c" /* --bench-i8 and --bench: bench_i8, bench */

/* ---- int8 activations and the q8/q4 integer kernels against the CPU's (kern_act_prepare, the scalar
 * oracle's matmul_i8: kernels.h). Codes, scales and sums bitwise; y within 1e-5 of max |ref| (another float
 * order); a token alone == in any batch, matvec == GEMM, grouped == separate, all bitwise. ---- */
static void *dev_copy(const void *h, size_t n, char *msg) {
    void *d = slcu_alloc(n, msg, 256);
    if (d) slcu_upload(d, h, n, msg, 256);
    return d;
}
static double nanmax(double a, double b) { return b > a || b != b ? b : a; } /* a NaN sticks */
static void poison(void *d, size_t bytes) { /* NaN everywhere: an output not written fails the checks */
    char msg[256];
    void *h = malloc(bytes);
    memset(h, 0xff, bytes);
    slcu_upload(d, h, bytes, msg, sizeof msg);
    free(h);
}
static float *dl(const void *d, size_t n) { /* n floats (or bytes / 4) back from the device */
    char msg[256];
    float *h = malloc(n * 4 + 4);
    if (slcu_sync(msg, sizeof msg) || slcu_download(h, d, n * 4, msg, sizeof msg)) CK(0, "%s", msg);
    return h;
}

/* The reference of the int8 matmuls' bitwise checks: each of N tokens alone, through the row indirection (token t
 * reads activation row drows[t] = idx[t]), with whatever kernels are switched on; malloc'd [N][rows] in idx's order */
static float *mm_alone(slcu_mat w, const slcu_act *da, const int *drows, const int *idx, int N, int rows, float *dy) {
    char msg[256] = "";
    float *alone = malloc((size_t)N * rows * 4);
    poison(dy, (size_t)N * rows * 4);
    for (int t = 0; t < N; t++) {
        slcu_mm m = {w, da, drows + t, 1, dy + (size_t)t * rows, (size_t)rows, NULL, NULL};
        CK(!slcu_matmul_i8(&m, 1, msg, sizeof msg), "%s", msg);
    }
    float *al = dl(dy, (size_t)N * rows);
    for (int t = 0; t < N; t++) memcpy(alone + (size_t)idx[t] * rows, al + (size_t)t * rows, (size_t)rows * 4);
    free(al);
    return alone;
}

static void check_i8(dt_type dt, int rows, int cols, int group, dt_type sdt) {
    char msg[256] = "";
    mat a;
    if (make_mat(&a, dt, rows, cols, group, sdt, msg)) { CK(0, "%s", msg); return; }
    enum { N = 100 };
    const int nb = cols / 32, ns = nb + nb / 2 + nb / 4;
    float *x = malloc((size_t)N * cols * 4);
    for (size_t i = 0; i < (size_t)N * cols; i++) x[i] = nrand() * (i / cols % 7 == 3 ? 40.f : 1.f);
    for (int c = 32; c < 64; c++) x[c] = 0.f; /* a zero block */
    kern_act ca;
    void *cbuf = malloc(kern_act_bytes(N, cols));
    kern_act_init(&ca, cbuf, x, (size_t)cols, N, cols, 1);
    kern_act_prepare(&ca);
    float *ref = malloc((size_t)N * rows * 4);
    kern_scalar_ops()->matmul_i8[dt](&a.m, &ca, ref, (size_t)rows, 0, rows);
    float *dx = dev_copy(x, (size_t)N * cols * 4, msg), *dy = slcu_alloc((size_t)N * rows * 4, msg, sizeof msg);
    int idx[N];
    for (int i = 0; i < N; i++) idx[i] = (i * 37 + 11) % N;
    int *drows = dev_copy(idx, sizeof idx, msg);
    slcu_act da;
    void *abuf = slcu_alloc(slcu_act_bytes(N, cols), msg, sizeof msg);
    CK(!slcu_act_bind(&da, abuf, N, cols, msg, sizeof msg) && !slcu_act_quantize(&da, dx, (size_t)cols, msg, sizeof msg), "%s", msg);
    int8_t *q = (int8_t *)dl(da.q, (size_t)N * cols / 4), *q4 = (int8_t *)dl(da.q4, (size_t)N * cols / 4);
    float *d = dl(da.d, (size_t)N * nb), *sm = dl(da.s, (size_t)N * ns);
    CK(!memcmp(q, ca.q, (size_t)N * cols) && !memcmp(d, ca.d, (size_t)N * nb * 4) && !memcmp(sm, ca.s, (size_t)N * ns * 4),
       "int8 activations differ from kern_act's (%d columns)", cols);
    int q4ok = 1;
    for (int i = 0; i < N * cols; i++) q4ok &= q4[(i & ~7) + (i & 1 ? 4 + (i & 7) / 2 : (i & 7) / 2)] == ca.q[i];
    CK(q4ok, "q4-ordered activations wrong");
    /* token t alone, through the row indirection: the reference of every bitwise check */
    float *alone = mm_alone(a.d, &da, drows, idx, N, rows, dy), *y = malloc((size_t)N * rows * 4);
    double worst = 0, maxref = 0;
    for (size_t i = 0; i < (size_t)N * rows; i++) maxref = fmax(maxref, fabs(ref[i]));
    for (size_t i = 0; i < (size_t)N * rows; i++) worst = nanmax(worst, fabs(alone[i] - ref[i]) / maxref);
    CK(worst <= 1e-5, "%s g%d %s %dx%d: int8 relative error %.3g against the CPU", dt_name(dt), group, dt_name(sdt), rows, cols, worst);
    const int ns_[] = {1, 2, 3, 5, 8, 13, 16, 17, 40, 100};
    for (int force = 0; force < 9; force++) /* 3 - 8: the GEMM forced, kernel 1 (registers), 2 - 6 (cp.async) */
        for (unsigned k = 0; k < sizeof ns_ / sizeof *ns_; k++) {
            const int n = ns_[k];
            slcu_i8_force(force < 3 ? force : 2);
            slcu_i8_gemm(force < 3 ? 0 : force - 2);
            poison(dy, (size_t)n * rows * 4);
            slcu_mm m = {a.d, &da, NULL, n, dy, (size_t)rows, NULL, NULL};
            CK(!slcu_matmul_i8(&m, 1, msg, sizeof msg), "%s", msg);
            float *yy = dl(dy, (size_t)n * rows);
            CK(!memcmp(yy, alone, (size_t)n * rows * 4), "%s %dx%d n=%d kernel %d: a batch differs from its tokens alone",
               dt_name(dt), rows, cols, n, force);
            free(yy);
        }
    slcu_i8_force(0), slcu_i8_gemm(0);
    /* grouped: three segments of rows (matvec, GEMM, matvec) in one call */
    slcu_mm g3[3] = {{a.d, &da, drows, 3, dy, (size_t)rows, NULL, NULL},
                     {a.d, &da, drows + 3, 40, dy + (size_t)3 * rows, (size_t)rows, NULL, NULL},
                     {a.d, &da, drows + 43, 1, dy + (size_t)43 * rows, (size_t)rows, NULL, NULL}};
    poison(dy, (size_t)44 * rows * 4);
    CK(!slcu_matmul_i8(g3, 3, msg, sizeof msg), "%s", msg);
    float *yy = dl(dy, (size_t)44 * rows);
    int gok = 1;
    for (int t = 0; t < 44; t++) gok &= !memcmp(yy + (size_t)t * rows, alone + (size_t)idx[t] * rows, (size_t)rows * 4);
    CK(gok, "%s: grouped segments differ from their tokens alone", dt_name(dt));
    /* the same through a device table (slcu_mm tab / sel): entry 1 holds the matrix, w's pointers NULL */
    const void *htab[6] = {NULL, NULL, NULL, a.d.data, a.d.scales, a.d.biases};
    const int hsel[2] = {1, 0};
    void *dtab = dev_copy(htab, sizeof htab, msg), *dsel = dev_copy(hsel, sizeof hsel, msg);
    for (int i = 0; i < 3; i++) {
        g3[i].w.data = g3[i].w.scales = g3[i].w.biases = NULL;
        g3[i].tab = (const void *const *)dtab, g3[i].sel = (const int *)dsel;
    }
    poison(dy, (size_t)44 * rows * 4);
    CK(!slcu_matmul_i8(g3, 3, msg, sizeof msg), "%s", msg);
    free(yy);
    yy = dl(dy, (size_t)44 * rows);
    gok = 1;
    for (int t = 0; t < 44; t++) gok &= !memcmp(yy + (size_t)t * rows, alone + (size_t)idx[t] * rows, (size_t)rows * 4);
    CK(gok, "%s: matrices from a device table differ from the same matrices passed directly", dt_name(dt));
    check_mv_rows(&a, &da, drows, idx, N, alone, dy, dtab, dsel); /* test_cuda_mv.c */
    check_mv_split(&a, &da, alone, dy);                          /* test_cuda_split.c */
    slcu_free(dtab), slcu_free(dsel);
    printf("ok   %-4s int8 group %-3d scales %-4s %5d x %-5d  max rel err %.2e against the CPU's int8\n", dt_name(dt), group,
           dt_name(sdt), rows, cols, worst);
    free(yy), free(x), free(cbuf), free(ref), free(q), free(q4), free(d), free(sm), free(alone), free(y);
    slcu_free(dx), slcu_free(dy), slcu_free(drows), slcu_free(abuf);
    free_mat(&a);
}

/* ---- the other ops against the CPU code (kernels_scalar.c's table; transcriptions of the static
 * functions of attention.c, deltanet.c and moe.c, marked as such) ---- */
static double relerr(const float *a, const float *b, size_t n) {
    double m = 0, e = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(b[i])), e = nanmax(e, fabs((double)a[i] - b[i]));
    return e / (m > 0 ? m : 1);
}
static float *rnd_dev(size_t n, float sc, float **host, char *msg) {
    float *h = malloc(n * 4);
    for (size_t i = 0; i < n; i++) h[i] = nrand() * sc;
    float *d = dev_copy(h, n * 4, msg);
    if (host) *host = h;
    else free(h);
    return d;
}
#define OPCHECK(name, err, lim) do { double e_ = (err); CK(e_ <= (lim), "%s: relative error %.3g", name, e_); \
        printf("ok   %-28s max rel err %.2e\n", name, e_); } while (0)

/* The fused one-row kernels of a decode step against the separate ones: rmsnorm + int8 form, SwiGLU + int8
 * form, attention + its output's int8 form, each bitwise (values, codes, scales, sums). */
static int same_act(const slcu_act *a, const slcu_act *b) {
    const size_t n = (size_t)a->n_tok, c = (size_t)a->cols, nb = c / 32, ns = nb + nb / 2 + nb / 4;
    int8_t *q1 = (int8_t *)dl(a->q, n * c / 4), *q2 = (int8_t *)dl(b->q, n * c / 4);
    int8_t *r1 = (int8_t *)dl(a->q4, n * c / 4), *r2 = (int8_t *)dl(b->q4, n * c / 4);
    float *d1 = dl(a->d, n * nb), *d2 = dl(b->d, n * nb), *s1 = dl(a->s, n * ns), *s2 = dl(b->s, n * ns);
    int ok = !memcmp(q1, q2, n * c) && !memcmp(r1, r2, n * c) && !memcmp(d1, d2, n * nb * 4) && !memcmp(s1, s2, n * ns * 4);
    free(q1), free(q2), free(r1), free(r2), free(d1), free(d2), free(s1), free(s2);
    return ok;
}

static void check_fused(void) {
    char msg[256] = "";
    enum { D = 2048, T = 3, I = 768, NH = 8, HD = 128 };
    void *b1 = slcu_alloc(slcu_act_bytes(T, D), msg, sizeof msg), *b2 = slcu_alloc(slcu_act_bytes(T, D), msg, sizeof msg);
    slcu_act a1, a2;
    float *dx = rnd_dev((size_t)T * D, 2, NULL, msg), *dw = rnd_dev(D, 1, NULL, msg), *dy = rnd_dev((size_t)T * D, 1, NULL, msg);
    float *dy2 = rnd_dev((size_t)T * D, 1, NULL, msg);
    slcu_act_bind(&a1, b1, 1, D, msg, sizeof msg), slcu_act_bind(&a2, b2, 1, D, msg, sizeof msg);
    CK(!slcu_rmsnorm_q(dx, dy, D, dw, 1.0f, 1e-6f, &a1, msg, sizeof msg), "%s", msg);
    CK(!slcu_rmsnorm(dx, dy2, 1, D, 1, 0, D, dw, 1.0f, 1e-6f, msg, sizeof msg) && !slcu_act_quantize(&a2, dy2, D, msg, sizeof msg), "%s", msg);
    float *h1 = dl(dy, D), *h2 = dl(dy2, D);
    CK(!memcmp(h1, h2, D * 4) && same_act(&a1, &a2), "rmsnorm + int8 form differs from rmsnorm, then quantisation");
    free(h1), free(h2);
    slcu_act_bind(&a1, b1, T, I, msg, sizeof msg), slcu_act_bind(&a2, b2, T, I, msg, sizeof msg);
    /* g = dx [T][I], u = the next T * I floats of dx */
    CK(!slcu_swiglu(dx, dx + T * I, dy2, (size_t)T * I, msg, sizeof msg), "%s", msg);
    CK(!slcu_swiglu_q(dx, dx + T * I, dy, &a1, msg, sizeof msg) && !slcu_act_quantize(&a2, dy2, I, msg, sizeof msg), "%s", msg);
    h1 = dl(dy, T * I), h2 = dl(dy2, T * I);
    CK(!memcmp(h1, h2, (size_t)T * I * 4) && same_act(&a1, &a2), "swiglu + int8 form differs from swiglu, then quantisation");
    free(h1), free(h2);
    { /* attention of one token (GQA 8/2, 300 positions, gated) and its output's int8 form */
        const int cap = 400, pos0 = 299, row = 2 * HD;
        float *dq = rnd_dev((size_t)NH * 2 * HD, 1, NULL, msg), *dk = rnd_dev((size_t)cap * row, 1, NULL, msg);
        float *dv = rnd_dev((size_t)cap * row, 1, NULL, msg), *dn = rnd_dev((size_t)2 * row, 1, NULL, msg);
        slcu_attn ap = {dq, (size_t)NH * 2 * HD, 2 * HD, 1, dn, dn + row, 2 * row, dk, dv, cap, 1, pos0, NH, 2, HD,
                        0, NULL, 0.088f, dy, NH * HD, 0};
        slcu_act_bind(&a1, b1, 1, NH * HD, msg, sizeof msg), slcu_act_bind(&a2, b2, 1, NH * HD, msg, sizeof msg);
        slcu_attn_force(2); /* the decode kernel (not cuda_flash.cu's f32 order) */
        CK(slcu_attention_q(&ap, &a1, msg, sizeof msg) == 1, "attention_q did not quantise: %s", msg);
        ap.out = dy2;
        CK(!slcu_attention(&ap, msg, sizeof msg) && !slcu_act_quantize(&a2, dy2, NH * HD, msg, sizeof msg), "%s", msg);
        slcu_attn_force(0);
        h1 = dl(dy, NH * HD), h2 = dl(dy2, NH * HD);
        CK(!memcmp(h1, h2, NH * HD * 4) && same_act(&a1, &a2), "attention + int8 form differs from attention, then quantisation");
        free(h1), free(h2);
        slcu_free(dq), slcu_free(dk), slcu_free(dv), slcu_free(dn);
    }
    for (int comb = 0; comb < 2; comb++) { /* [combine of 4 experts with a gated shared one,] add, rmsnorm + int8 form */
        enum { K = 4 };
        float *hr, *dr = rnd_dev(D, 1, &hr, msg), *dr2 = dev_copy(hr, D * 4, msg), *dyk = rnd_dev((size_t)K * D, 1, NULL, msg);
        float *dwk = rnd_dev(K, 1, NULL, msg), *dsh = rnd_dev(D, 1, NULL, msg), *dsg = rnd_dev(1, 1, NULL, msg);
        float *o1 = rnd_dev(D, 1, NULL, msg), *o2 = rnd_dev(D, 1, NULL, msg);
        CK(!slcu_combine(dyk, dwk, K, dsh, dsg, o2, 1, D, msg, sizeof msg), "%s", msg);
        const slcu_addnorm an = {dr, comb ? NULL : o2, comb ? dyk : NULL, dwk, dsh, dsg, K, o1, dy, dw, 0.0f, 1e-5f, D};
        slcu_act_bind(&a1, b1, 1, D, msg, sizeof msg), slcu_act_bind(&a2, b2, 1, D, msg, sizeof msg);
        CK(!slcu_add_norm_q(&an, &a1, msg, sizeof msg), "%s", msg);
        CK(!slcb_add(dr2, o2, D, msg, sizeof msg) && !slcu_rmsnorm(dr2, dy2, 1, D, 1, 0, D, dw, 0.0f, 1e-5f, msg, sizeof msg) &&
           !slcu_act_quantize(&a2, dy2, D, msg, sizeof msg), "%s", msg);
        float *x1 = dl(dr, D), *x2 = dl(dr2, D);
        h1 = dl(dy, D), h2 = dl(dy2, D);
        float *c1 = dl(o1, D), *c2 = dl(o2, D);
        CK(!memcmp(x1, x2, D * 4) && !memcmp(h1, h2, D * 4) && same_act(&a1, &a2) && (!comb || !memcmp(c1, c2, D * 4)),
           "%sadd + rmsnorm + int8 form differs from the separate kernels", comb ? "combine + " : "");
        free(x1), free(x2), free(h1), free(h2), free(c1), free(c2), free(hr);
        slcu_free(dr), slcu_free(dr2), slcu_free(dyk), slcu_free(dwk), slcu_free(dsh), slcu_free(dsg), slcu_free(o1), slcu_free(o2);
    }
    { /* per-head norm + RoPE of one token, q (8 heads at a stride of 2 * HD, in place) and k (2 heads), partial rot */
        const int rot = 96;
        float fq[48];
        for (int i = 0; i < rot / 2; i++) fq[i] = powf(10000.0f, -2.0f * i / rot);
        float *hq, *hk, *q1 = rnd_dev((size_t)NH * 2 * HD, 2, &hq, msg), *k1 = rnd_dev((size_t)2 * HD, 2, &hk, msg);
        float *q2 = dev_copy(hq, (size_t)NH * 2 * HD * 4, msg), *k2 = dev_copy(hk, (size_t)2 * HD * 4, msg);
        float *wq = rnd_dev(HD, 1, NULL, msg), *wk = rnd_dev(HD, 1, NULL, msg);
        const slcu_normrope nr[2] = {{q1, q1, NH, HD, 2 * HD, wq, 0.0f, 1e-6f}, {k1, k1, 2, HD, HD, wk, 0.0f, 1e-6f}};
        CK(!slcu_norm_rope(nr, 2, rot, fq, 1.1f, 777, msg, sizeof msg), "%s", msg);
        CK(!slcu_rmsnorm(q2, q2, 1, NH * 2 * HD, NH, 2 * HD, HD, wq, 0.0f, 1e-6f, msg, sizeof msg) &&
           !slcu_rmsnorm(k2, k2, 1, 2 * HD, 2, HD, HD, wk, 0.0f, 1e-6f, msg, sizeof msg) &&
           !slcu_rope(q2, 1, NH * 2 * HD, NH, 2 * HD, rot, fq, 1.1f, 777, 0, msg, sizeof msg) &&
           !slcu_rope(k2, 1, 2 * HD, 2, HD, rot, fq, 1.1f, 777, 0, msg, sizeof msg), "%s", msg);
        float *a = dl(q1, NH * 2 * HD), *b = dl(q2, NH * 2 * HD), *c = dl(k1, 2 * HD), *d = dl(k2, 2 * HD);
        CK(!memcmp(a, b, (size_t)NH * 2 * HD * 4) && !memcmp(c, d, (size_t)2 * HD * 4), "norm + rope differs from norm, then rope");
        free(a), free(b), free(c), free(d), free(hq), free(hk);
        slcu_free(q1), slcu_free(q2), slcu_free(k1), slcu_free(k2), slcu_free(wq), slcu_free(wk);
    }
    printf("ok   fused one-row kernels (rmsnorm, swiglu, attention, [combine +] add + rmsnorm, with the int8 form; norm + rope): bitwise\n");
    slcu_free(b1), slcu_free(b2), slcu_free(dx), slcu_free(dw), slcu_free(dy), slcu_free(dy2);
}

#include "test_cuda_prefill.c" /* issue 24's prefill paths: check_moe, check_attn_prefill, bench_moe_wide */
#include "test_cuda_hybrid.c" /* issue 25: host experts (kernels_dev.c) bitwise the device's: check_hybrid */
#include "test_cuda_ibias.c" /* issue 24: SLUICE_CUDA_IBIAS's computed biases bitwise the loaded: check_ibias_all */
#include "test_cuda_moedec.c" /* issue 24: a MoE decode batch's matvecs bitwise its grouped GEMM: check_moe_dec_all */
#include "test_cuda_serve.c" /* issue 24: a MoE decode batch grouped by expert bitwise its grouped GEMM: check_moeg_all, --serve8 */
#include "test_cuda_fuse.c" /* issue 24: SLUICE_CUDA_FUSE's launches bitwise the separate ones: check_fuse */
#include "test_cuda_small.c" /* issue 24: SLUICE_CUDA_NORM=2 / ROUTE=2 bitwise the kernels before: check_small, bench_small */
#include "test_cuda_fa16.c"   /* issue 24/28: attention over an f16 KV cache: check_attn_f16 */
#include "test_cuda_attn_items.c" /* issue 24: a decode batch's attention and RoPE in one launch: check_attn_items */
#include "test_cuda_fa.c" /* issue 24: the decode attention, the pair against SLUICE_CUDA_FA_CL's launches: --bench-fa */
#include "test_cuda_mv.c" /* issue 24: the one-token matvec's rows a CTA: bench_mv_rows */
#include "test_cuda_resolve.c" /* issue 24: SLUICE_CUDA_RESOLVE=2's job from the grid: check_resolve_all, --resolve */
#include "test_cuda_split.c" /* issue 24: SLUICE_CUDA_MVSPLIT's one-token jobs bitwise mvn_i8: check_mv_split, --mvsplit */
#include "test_cuda_pdl.c" /* issue 24: overlapped launches bitwise stream order: check_pdl */
#include "test_cuda_kq.c" /* issues 24 / 27: the GGUF block types (cuda_kq.cu): check_kq_all, --kq, --bench-kq */
#include "test_cuda_tier.c" /* issue 25: the device tier's prefill in batches of experts: check_moe_batches_all, --tier */
#include "test_cuda_mla.c" /* SLUICE_CUDA_MLA=2's split bitwise k_mla_attend, the absorb tiles bitwise the reference: --mla, --absorb, --bench-* */
#include "test_cuda_moex.c" /* gpt-oss's experts grouped (cuda_moex.cu) bitwise the tokens alone: check_moex_all, --moex */
#include "test_cuda_mxfp4.c" /* MXFP4's many-token kernels bitwise k_mxfp4: check_mxfp4_all, --mxfp4, --bench-mxfp4 */
#include "test_cuda_mlaout.c" /* cuda_mla_out.cu's W_uv in one launch: check_mlaout_all, --mlaout, --bench-mlaout */

static void check_ops(void) {
    char msg[256] = "";
    const kern_ops *ops = kern_scalar_ops();
    check_fused(), check_swi_down(), check_fuse(), check_small(), check_pdl(2); /* check_swi_down: test_cuda_mv.c */
    { /* rmsnorm per head (4 heads of 250 at a stride of 260), w_off 0 and 1, in place */
        enum { T = 7, NH = 4, D = 250, HS = 260, LD = NH * HS };
        float *hx, *hw, *dx = rnd_dev((size_t)T * LD, 3, &hx, msg), *dw = rnd_dev(D, 1, &hw, msg);
        for (int off = 0; off < 2; off++) {
            for (int t = 0; t < T; t++)
                for (int h = 0; h < NH; h++) ops->rmsnorm(hx + t * LD + h * HS, hw, (float)off, 1e-6f, hx + t * LD + h * HS, D);
            CK(!slcu_rmsnorm(dx, dx, T, LD, NH, HS, D, dw, (float)off, 1e-6f, msg, sizeof msg), "%s", msg);
        }
        float *y = dl(dx, (size_t)T * LD);
        OPCHECK("rmsnorm (per head)", relerr(y, hx, (size_t)T * LD), 1e-6);
        free(hx), free(hw), free(y), slcu_free(dx), slcu_free(dw);
    }
    { /* swiglu */
        const size_t n = 5000;
        float *hg, *hu, *dg = rnd_dev(n, 4, &hg, msg), *du = rnd_dev(n, 1, &hu, msg), *ref = malloc(n * 4);
        ops->swiglu(hg, hu, ref, (int)n);
        CK(!slcu_swiglu(dg, du, dg, n, msg, sizeof msg), "%s", msg);
        float *y = dl(dg, n);
        OPCHECK("swiglu", relerr(y, ref, n), 1e-6);
        free(hg), free(hu), free(ref), free(y), slcu_free(dg), slcu_free(du);
    }
    { /* clamped swiglu (moe.c gptoss_ffn's loop, transcribed) */
        const int T = 3, I = 700;
        const float lim = 7.f;
        float *hg, *hb, *dg = rnd_dev((size_t)T * 2 * I, 6, &hg, msg), *db = rnd_dev(2 * I, 1, &hb, msg), *ref = malloc((size_t)T * I * 4);
        float *da = slcu_alloc((size_t)T * I * 4, msg, sizeof msg);
        for (int t = 0; t < T; t++)
            for (int i = 0; i < I; i++) {
                float gate = hg[(size_t)t * 2 * I + 2 * i] + hb[2 * i], up = hg[(size_t)t * 2 * I + 2 * i + 1] + hb[2 * i + 1];
                gate = gate > lim ? lim : gate;
                up = up > lim ? lim : up < -lim ? -lim : up;
                ref[(size_t)t * I + i] = (up + 1.0f) * (gate * kern_sigmoid(gate * 1.702f));
            }
        CK(!slcu_swiglu_clamped(dg, db, lim, da, T, I, msg, sizeof msg), "%s", msg);
        float *y = dl(da, (size_t)T * I);
        OPCHECK("swiglu clamped (gpt-oss)", relerr(y, ref, (size_t)T * I), 1e-6);
        free(hg), free(hb), free(ref), free(y), slcu_free(dg), slcu_free(db), slcu_free(da);
    }
    for (int inter = 0; inter < 2; inter++) { /* rope: partial (32 of 64 dims), YaRN, heads at 2 hd (gated), far positions */
        fam_config c;
        memset(&c, 0, sizeof c);
        c.rot_dim = 32, c.rope_theta = 1e6, c.max_pos = 131072, c.rope_type = SL_ROPE_YARN, c.rope_factor = 32, c.rope_orig_max_pos = 4096;
        float inv[SL_ROPE_MAX_FREQS], af;
        const int half = rope_freqs(&c, inv, &af), T = 3, H = 4, hd = 64, pos0 = inter ? 131069 : 0;
        float *hx, *dx = rnd_dev((size_t)T * H * 2 * hd, 1, &hx, msg), tmp[64];
        for (int t = 0; t < T; t++) /* attention.c rope(), transcribed; interleaved pairs first split into halves */
            for (int h = 0; h < H; h++) {
                float *v = hx + ((size_t)t * H + h) * 2 * hd;
                if (inter) {
                    for (int i = 0; i < half; i++) tmp[i] = v[2 * i], tmp[i + half] = v[2 * i + 1];
                    memcpy(v, tmp, (size_t)2 * half * 4);
                }
                for (int i = 0; i < half; i++) {
                    float ang = (float)(pos0 + t) * inv[i], cc = cosf(ang) * af, s = sinf(ang) * af, a0 = v[i], b0 = v[i + half];
                    v[i] = a0 * cc - b0 * s;
                    v[i + half] = b0 * cc + a0 * s;
                }
            }
        CK(!slcu_rope(dx, T, (size_t)H * 2 * hd, H, 2 * hd, c.rot_dim, inv, af, pos0, inter, msg, sizeof msg), "%s", msg);
        float *y = dl(dx, (size_t)T * H * 2 * hd);
        OPCHECK(inter ? "rope (YaRN, partial, interleaved)" : "rope (YaRN, partial)", relerr(y, hx, (size_t)T * H * 2 * hd), 1e-6);
        free(hx), free(y), slcu_free(dx);
    }
    { /* routers: against an independent reference in double (selection by sorting, sets compared) */
        enum { T = 6, E = 64, K = 8 };
        float *hl, *hb, *dl_ = rnd_dev((size_t)T * E, 2, &hl, msg), *dbias = rnd_dev(E, 0.1f, &hb, msg);
        int *de = slcu_alloc((size_t)T * K * 4, msg, sizeof msg);
        float *dw = slcu_alloc((size_t)T * K * 4, msg, sizeof msg);
        for (int pass = 0; pass < 5; pass++) { /* 3, 4: kinds 0 and 1 again, with ties */
            const int kind = pass % 3;
            if (pass == 3) { /* again with ties: logits in steps of 0.5 (+0 and -0 among them): the lower index wins */
                for (int i = 0; i < T * E; i++) hl[i] = i % 7 == 3 ? (i % 2 ? -0.0f : 0.0f) : roundf(hl[i] * 2) / 2;
                slcu_upload(dl_, hl, (size_t)T * E * 4, msg, sizeof msg);
            }
            slcu_router r = {kind, E, K, kind != 1, 8, 4, kind == 2 ? 2.5f : 1.f, kind == 2 ? dbias : NULL, 0};
            CK(!slcu_route(&r, dl_, T, de, dw, msg, sizeof msg), "%s", msg);
            int *ge = (int *)dl(de, (size_t)T * K);
            float *gw = dl(dw, (size_t)T * K);
            double worst = 0;
            int same = 1;
            for (int t = 0; t < T; t++) {
                const float *l = hl + (size_t)t * E;
                double p[E], b[E], w[E], mx = -1e300, sum = 0;
                int allowed[E];
                for (int e = 0; e < E; e++) mx = fmax(mx, l[e]);
                for (int e = 0; e < E; e++) sum += exp(l[e] - mx);
                for (int e = 0; e < E; e++) {
                    p[e] = kind == 2 ? 1 / (1 + exp(-(double)l[e])) : kind == 0 ? exp(l[e] - mx) / sum : l[e];
                    b[e] = kind == 2 ? p[e] + hb[e] : p[e];
                    allowed[e] = kind != 2;
                }
                if (kind == 2) { /* 8 groups of 8, the 4 best by their top-2 sum */
                    double gs[8];
                    for (int g = 0; g < 8; g++) {
                        double a1 = -1e300, a2 = -1e300;
                        for (int e = g * 8; e < g * 8 + 8; e++) {
                            if (b[e] > a1) a2 = a1, a1 = b[e];
                            else if (b[e] > a2) a2 = b[e];
                        }
                        gs[g] = a1 + a2;
                    }
                    for (int s = 0; s < 4; s++) {
                        int bg = 0;
                        for (int g = 1; g < 8; g++) bg = gs[g] > gs[bg] ? g : bg;
                        for (int e = bg * 8; e < bg * 8 + 8; e++) allowed[e] = 1;
                        gs[bg] = -1e300;
                    }
                }
                int sel[E] = {0};
                double ws = 0, m2 = -1e300;
                for (int s = 0; s < K; s++) {
                    int be = -1;
                    for (int e = 0; e < E; e++)
                        if (allowed[e] && !sel[e] && (be < 0 || b[e] > b[be])) be = e;
                    sel[be] = 1;
                    m2 = fmax(m2, p[be]);
                }
                for (int e = 0; e < E; e++) w[e] = sel[e] ? (kind == 1 ? exp(p[e] - m2) : p[e]) : 0, ws += w[e];
                for (int e = 0, s = 0; e < E; e++) {
                    if (!sel[e]) continue;
                    double want = kind == 2 ? w[e] / (ws + 1e-20) * 2.5 : w[e] / ws;
                    same &= ge[t * K + s] == e;
                    worst = nanmax(worst, fabs(gw[t * K + s] - want) / want);
                    s++;
                }
            }
            static const char *names[] = {"router softmax top-k", "router top-k softmax", "router sigmoid group-limited",
                                          "router softmax top-k (ties)", "router top-k softmax (ties)"};
            CK(same, "%s: chose other experts", names[pass]);
            OPCHECK(names[pass], worst, 1e-5);
            free(ge), free(gw);
        }
        free(hl), free(hb), slcu_free(dl_), slcu_free(dbias), slcu_free(de), slcu_free(dw);
    }
    { /* combine with a gated shared expert (moe.c fwd_moe's loops, transcribed) */
        enum { T = 3, K = 4, H = 300 };
        float *hy, *hw, *hs, *hg, *dy = rnd_dev((size_t)T * K * H, 1, &hy, msg), *dw = rnd_dev(T * K, 1, &hw, msg);
        float *dsh = rnd_dev((size_t)T * H, 1, &hs, msg), *dsg = rnd_dev(T, 1, &hg, msg), *dout = slcu_alloc((size_t)T * H * 4, msg, sizeof msg);
        float ref[T * H];
        for (int t = 0; t < T; t++)
            for (int i = 0; i < H; i++) {
                float o = 0;
                for (int s = 0; s < K; s++) o += hw[t * K + s] * hy[((size_t)t * K + s) * H + i];
                ref[t * H + i] = o + kern_sigmoid(hg[t]) * hs[t * H + i];
            }
        poison(dout, (size_t)T * H * 4);
        CK(!slcu_combine(dy, dw, K, dsh, dsg, dout, T, H, msg, sizeof msg), "%s", msg);
        float *y = dl(dout, (size_t)T * H);
        OPCHECK("combine + shared expert", relerr(y, ref, (size_t)T * H), 1e-6);
        free(hy), free(hw), free(hs), free(hg), free(y);
        slcu_free(dy), slcu_free(dw), slcu_free(dsh), slcu_free(dsg), slcu_free(dout);
    }
    for (int sliding = 0; sliding < 3; sliding++) { /* attention: GQA 8/2; full and not gated, or a ring, sinks, gated;
                                                       * 2: a sliding layer whose cache (40 rows) is shorter than its window
                                                       * and not yet outgrown (a short context: identity rows) */
        enum { T = 3, NH = 8, NKV = 2, HD = 64, ROW = NKV * HD };
        const int cap = sliding == 1 ? 191 : sliding ? 40 : 3000, window = sliding ? 128 : 0;
        const int pos0 = sliding == 1 ? 1000 : sliding ? 30 : 2500;
        float *hq, *hk, *hv, *hs, *hn, *dq = rnd_dev((size_t)T * NH * 2 * HD, 1, &hq, msg), *dk = rnd_dev((size_t)cap * ROW, 1, &hk, msg);
        float *dv = rnd_dev((size_t)cap * ROW, 1, &hv, msg), *dsk = rnd_dev(NH, 1, &hs, msg), *dout = slcu_alloc((size_t)T * NH * HD * 4, msg, sizeof msg);
        float *dnew = rnd_dev((size_t)T * 2 * ROW, 1, &hn, msg); /* the new rows: k | v per token */
        float *ref = calloc((size_t)T * NH * HD, 4), *sc = malloc((size_t)cap * 4);
        const float scale = 1.0f / sqrtf((float)HD);
        for (int t = 0; t < T; t++) {
            memcpy(hk + (size_t)((pos0 + t) % cap) * ROW, hn + (size_t)t * 2 * ROW, ROW * 4);
            memcpy(hv + (size_t)((pos0 + t) % cap) * ROW, hn + (size_t)t * 2 * ROW + ROW, ROW * 4);
        }
        for (int t = 0; t < T; t++) /* attention.c attn_part and the gate, transcribed */
            for (int h = 0; h < NH; h++) {
                const int pos = pos0 + t, p0 = window > 0 && pos >= window ? pos - window + 1 : 0, nk = pos + 1 - p0;
                const float *q = hq + ((size_t)t * NH + h) * 2 * HD;
                float mx = sliding ? hs[h] : -INFINITY, *o = ref + ((size_t)t * NH + h) * HD;
                for (int p = 0; p < nk; p++) {
                    sc[p] = ops->dot(q, hk + (size_t)((p0 + p) % cap) * ROW + (h / 4) * HD, HD) * scale;
                    if (sc[p] > mx) mx = sc[p];
                }
                double sum = sliding ? (double)expf(hs[h] - mx) : 0.0;
                for (int p = 0; p < nk; p++) sc[p] = expf(sc[p] - mx), sum += sc[p];
                for (int p = 0; p < nk; p++) ops->axpy(sc[p] / (float)sum, hv + (size_t)((p0 + p) % cap) * ROW + (h / 4) * HD, o, HD);
                if (sliding)
                    for (int d = 0; d < HD; d++) o[d] *= kern_sigmoid(q[HD + d]);
            }
        slcu_attn ap = {dq, (size_t)NH * 2 * HD, 2 * HD, sliding != 0, dnew, dnew + ROW, 2 * ROW, dk, dv, cap, T, pos0, NH, NKV, HD,
                        window, sliding ? dsk : NULL, scale, dout, NH * HD, 0};
        poison(dout, (size_t)T * NH * HD * 4);
        slcu_attn_force(1); /* the batch kernel */
        CK(!slcu_attention(&ap, msg, sizeof msg), "%s", msg);
        float *y = dl(dout, (size_t)T * NH * HD);
        OPCHECK(sliding == 2 ? "attention (window past a short cache, sinks, gated)" : sliding ? "attention (ring, sinks, gated)"
                             : "attention (full, GQA)", relerr(y, ref, (size_t)T * NH * HD), 1e-5);
        if (sliding == 2) { /* the automatic choice too (cuda_flash.cu's f32 order: within rounding) */
            poison(dout, (size_t)T * NH * HD * 4);
            CK(!slcu_attention(&ap, msg, sizeof msg), "%s", msg);
            float *y3 = dl(dout, (size_t)T * NH * HD);
            OPCHECK("attention (window past a short cache, the automatic kernel)", relerr(y3, ref, (size_t)T * NH * HD), 1e-5);
            free(y3);
        }
        poison(dout, (size_t)T * NH * HD * 4); /* the decode kernel, the T tokens at once: bitwise the batch kernel */
        slcu_attn_force(2);
        CK(!slcu_attention(&ap, msg, sizeof msg), "%s", msg);
        slcu_attn_force(0);
        float *y2 = dl(dout, (size_t)T * NH * HD);
        CK(!memcmp(y, y2, (size_t)T * NH * HD * 4), "attention: the decode kernel differs from the batch kernel");
        poison(dout, (size_t)T * NH * HD * 4); /* token by token (the decode kernel; automatic would take cuda_flash.cu's
                                                  * f32 order, another order than the batch kernel's) */
        slcu_attn_force(2);
        for (int t = 0; t < T; t++) {
            slcu_attn one = ap;
            one.q += (size_t)t * ap.ldq, one.k += (size_t)t * ap.ldkv, one.v += (size_t)t * ap.ldkv;
            one.out += (size_t)t * ap.ldo, one.n = 1, one.pos0 = pos0 + t;
            CK(!slcu_attention(&one, msg, sizeof msg), "%s", msg);
        }
        slcu_attn_force(0);
        free(y2);
        y2 = dl(dout, (size_t)T * NH * HD);
        CK(!memcmp(y, y2, (size_t)T * NH * HD * 4), "attention: token by token differs from the batch");
        free(hq), free(hk), free(hv), free(hs), free(hn), free(ref), free(sc), free(y), free(y2);
        slcu_free(dq), slcu_free(dk), slcu_free(dv), slcu_free(dsk), slcu_free(dout), slcu_free(dnew);
    }
    /* DeltaNet recurrence (deltanet.c head_recurrent, transcribed), 3 tokens, state in -> out: the register
     * kernels (dk 64, 128), the generic one (dk 40, and dk 128 forced: bitwise the register kernel's) */
    float *prev_y = NULL, *prev_S = NULL;
    const int dn_cases[4][3] = {{64, 96, 0}, {40, 72, 0}, {128, 128, 0}, {128, 128, 1}};
    for (int ci = 0; ci < 4; ci++) {
        enum { T = 3, NK = 2, NV = 4 };
        const int DK = dn_cases[ci][0], DV = dn_cases[ci][1], CQ = 2 * NK * DK + NV * DV;
        if (ci == 3) rng = 88172645463325252ull ^ 3; /* case 3 repeats case 2's inputs */
        if (ci == 2) rng = 88172645463325252ull ^ 3;
        float *hS, *hc, *hg, *dS = rnd_dev((size_t)NV * DK * DV, 0.1f, &hS, msg), *dc = rnd_dev((size_t)T * CQ, 0.125f, &hc, msg);
        float *dg = rnd_dev(T * 2 * NV, 0.3f, &hg, msg), *dS2 = slcu_alloc((size_t)NV * DK * DV * 4, msg, sizeof msg);
        for (int i = 0; i < T * 2 * NV; i++) hg[i] = i % (2 * NV) < NV ? fabsf(hg[i]) : -fabsf(hg[i]);
        slcu_upload(dg, hg, T * 2 * NV * 4, msg, sizeof msg);
        float *ref = calloc((size_t)T * NV * DV, 4), m[128];
        for (int h = 0; h < NV; h++) {
            float *S = hS + (size_t)h * DK * DV;
            for (int t = 0; t < T; t++) {
                const float *q = hc + (size_t)t * CQ + (h / 2) * DK, *k = q + NK * DK, *v = hc + (size_t)t * CQ + 2 * NK * DK + h * DV;
                const float beta = hg[t * 2 * NV + h], alpha = expf(hg[t * 2 * NV + NV + h]);
                float *o = ref + ((size_t)t * NV + h) * DV;
                memset(m, 0, sizeof m);
                for (int i = 0; i < DK; i++) {
                    for (int d = 0; d < DV; d++) S[i * DV + d] *= alpha;
                    ops->axpy(k[i], S + i * DV, m, DV);
                }
                for (int d = 0; d < DV; d++) m[d] = (v[d] - m[d]) * beta;
                for (int i = 0; i < DK; i++) ops->axpy(k[i], m, S + i * DV, DV), ops->axpy(q[i], S + i * DV, o, DV);
            }
        }
        float *dout = slcu_alloc((size_t)T * NV * DV * 4, msg, sizeof msg);
        poison(dout, (size_t)T * NV * DV * 4), poison(dS2, (size_t)NV * DK * DV * 4);
        slcu_dn_force_generic(dn_cases[ci][2]);
        CK(!slcu_dn_step(dc, dg, dS, dS2, dout, NV * DV, T, NK, NV, DK, DV, msg, sizeof msg), "%s", msg);
        slcu_dn_force_generic(0);
        float *y = dl(dout, (size_t)T * NV * DV), *S2 = dl(dS2, (size_t)NV * DK * DV);
        char nm[64];
        snprintf(nm, sizeof nm, "deltanet recurrence dk %d%s", DK, dn_cases[ci][2] ? " generic" : "");
        OPCHECK(nm, nanmax(relerr(y, ref, (size_t)T * NV * DV), relerr(S2, hS, (size_t)NV * DK * DV)), 1e-5);
        if (ci == 3) {
            CK(!memcmp(y, prev_y, (size_t)T * NV * DV * 4) && !memcmp(S2, prev_S, (size_t)NV * DK * DV * 4),
               "deltanet: the register kernel differs from the generic one");
            free(prev_y), free(prev_S), free(y), free(S2);
        } else if (ci == 2) prev_y = y, prev_S = S2;
        else free(y), free(S2);
        free(hS), free(hc), free(hg), free(ref);
        slcu_free(dS), slcu_free(dc), slcu_free(dg), slcu_free(dS2), slcu_free(dout);
    }
}

/* ---- the DeltaNet conv1d / gates / gated norm, MLA and the MXFP4 matmul against cpu_mix.c's, cpu_mla.c's and
 * mxfp4.c's code, transcribed ---- */
static void check_mixers(void) {
    char msg[256] = "";
    const kern_ops *ops = kern_scalar_ops();
    for (int grouped = 0; grouped < 2; grouped++) { /* dn_conv, dn_gates, dn_norm; Qwen3.5's b|a and Next's grouped */
        enum { T = 5, NK = 2, NV = 4, DK = 64, DV = 48, K = 4, CQ = 2 * NK * DK + NV * DV };
        float *hin, *hw, *hst, *hba, *hal, *hdt, *hz, *hnw, *ho;
        float *din = rnd_dev((size_t)T * CQ, 1, &hin, msg), *dw = rnd_dev((size_t)CQ * K, 0.5f, &hw, msg);
        float *dst = rnd_dev((size_t)(K - 1) * CQ, 1, &hst, msg), *dba = rnd_dev((size_t)T * 2 * NV, 2, &hba, msg);
        float *dal = rnd_dev(NV, 1, &hal, msg), *ddt = rnd_dev(NV, 1, &hdt, msg), *dz = rnd_dev((size_t)T * NV * DV, 2, &hz, msg);
        float *dnw = rnd_dev(DV, 1, &hnw, msg), *dout = rnd_dev((size_t)T * (NV * DV + 8), 3, &ho, msg);
        float *dcs = slcu_alloc((size_t)(K - 1) * CQ * 4, msg, sizeof msg), *dco = slcu_alloc((size_t)T * CQ * 4, msg, sizeof msg);
        float *dg = slcu_alloc((size_t)T * 2 * NV * 4, msg, sizeof msg);
        poison(dcs, (size_t)(K - 1) * CQ * 4), poison(dco, (size_t)T * CQ * 4), poison(dg, (size_t)T * 2 * NV * 4);
        hba[3] = 30.f; /* softplus's x > 20 branch */
        slcu_upload(dba, hba, (size_t)T * 2 * NV * 4, msg, sizeof msg);
        float *rco = malloc((size_t)T * CQ * 4), *rcs = malloc((size_t)(K - 1) * CQ * 4), *rg = malloc((size_t)T * 2 * NV * 4);
        for (int t = 0; t < T; t++) /* cpu_dn_conv */
            for (int c = 0; c < CQ; c++) {
                float acc = 0.0f;
                for (int i = 0; i < K; i++) {
                    int sr = t - K + 1 + i;
                    acc += hw[c * K + i] * (sr < 0 ? hst[(size_t)(K - 1 + sr) * CQ + c] : hin[(size_t)sr * CQ + c]);
                }
                rco[(size_t)t * CQ + c] = kern_silu(acc);
            }
        for (int i = 0; i < K - 1; i++) {
            int sr = T - K + 1 + i;
            memcpy(rcs + (size_t)i * CQ, sr < 0 ? hst + (size_t)(K - 1 + sr) * CQ : hin + (size_t)sr * CQ, CQ * 4);
        }
        for (int t = 0; t < T; t++) { /* cpu_dn_gates */
            const float *ba = hba + (size_t)t * 2 * NV;
            for (int h = 0; h < NV; h++) {
                const int r = NV / NK;
                float b = grouped ? ba[(h / r) * 2 * r + h % r] : ba[h], a = grouped ? ba[(h / r) * 2 * r + r + h % r] : ba[NV + h];
                float x = a + hdt[h];
                rg[t * 2 * NV + h] = kern_sigmoid(b);
                rg[t * 2 * NV + NV + h] = -expf(hal[h]) * (x > 20.0f ? x : log1pf(expf(x)));
            }
            for (int j = 0; j < 2 * NK; j++) {
                float *x = rco + (size_t)t * CQ + (size_t)j * DK;
                double ss = 0;
                for (int i = 0; i < DK; i++) ss += (double)x[i] * x[i];
                const float inv = (float)(1.0 / sqrt(ss + 1e-6)), sc = j < NK ? 1.0f / sqrtf((float)DK) : 1.0f;
                for (int i = 0; i < DK; i++) x[i] = (x[i] * inv) * sc;
            }
        }
        const size_t ldo = NV * DV + 8;
        for (int t = 0; t < T; t++) /* cpu_dn_norm */
            for (int h = 0; h < NV; h++) {
                float *o = ho + t * ldo + h * DV;
                ops->rmsnorm(o, hnw, 0.0f, 1e-6f, o, DV);
                for (int e = 0; e < DV; e++) o[e] *= kern_silu(hz[(size_t)t * NV * DV + h * DV + e]);
            }
        const slcu_dn d = {.n = T, .nk = NK, .nv = NV, .dk = DK, .dv = DV, .conv_k = K, .conv_in = din, .conv_w = dw,
                           .conv_in_state = dst, .conv_out_state = dcs, .conv_out = dco, .ba = dba, .ba_grouped = grouped,
                           .A_log = dal, .dt_bias = ddt, .gates = dg, .out = dout, .ldo = ldo, .z = dz, .norm_w = dnw, .eps = 1e-6f};
        CK(!slcu_dn_conv(&d, msg, sizeof msg), "%s", msg);
        float *ycs = dl(dcs, (size_t)(K - 1) * CQ), *yco0 = dl(dco, (size_t)T * CQ);
        CK(!slcu_dn_gates(&d, msg, sizeof msg), "%s", msg);
        CK(!slcu_dn_norm(&d, msg, sizeof msg), "%s", msg);
        float *yco = dl(dco, (size_t)T * CQ), *yg = dl(dg, (size_t)T * 2 * NV), *yo = dl(dout, (size_t)T * ldo);
        CK(!memcmp(ycs, rcs, (size_t)(K - 1) * CQ * 4), "deltanet conv state not the last K-1 rows");
        CK(yco0[0] == yco0[0], "deltanet conv: NaN");
        OPCHECK(grouped ? "deltanet conv+l2norm (grouped)" : "deltanet conv+l2norm", relerr(yco, rco, (size_t)T * CQ), 1e-6);
        OPCHECK(grouped ? "deltanet gates (grouped)" : "deltanet gates", relerr(yg, rg, (size_t)T * 2 * NV), 1e-6);
        OPCHECK("deltanet gated norm", relerr(yo, ho, (size_t)T * ldo), 1e-6);
        free(hin), free(hw), free(hst), free(hba), free(hal), free(hdt), free(hz), free(hnw), free(ho);
        free(rco), free(rcs), free(rg), free(ycs), free(yco0), free(yco), free(yg), free(yo);
        slcu_free(din), slcu_free(dw), slcu_free(dst), slcu_free(dba), slcu_free(dal), slcu_free(ddt), slcu_free(dz);
        slcu_free(dnw), slcu_free(dout), slcu_free(dcs), slcu_free(dco), slcu_free(dg);
    }
    for (int qz = 0; qz < 3; qz++) { /* MLA with kv_b f32, q4 (g32, bf16 scales), q8 (g64, f16); 3 tokens after 37 */
        enum { T = 3, NH = 4, R = 64, DR = 16, DN = 32, DV = 24, ROW = R + DR, QH = DN + DR, P0 = 37 };
        mat kvb;
        const dt_type dt = qz == 0 ? DT_F32 : qz == 1 ? DT_Q4 : DT_Q8;
        if (make_mat(&kvb, dt, NH * (DN + DV), R, qz == 2 ? 64 : 32, qz == 1 ? DT_BF16 : qz == 2 ? DT_F16 : DT_F32, msg)) {
            CK(0, "%s", msg);
            continue;
        }
        float *hq, *hckv, *hc, *dq = rnd_dev((size_t)T * NH * QH, 1, &hq, msg), *dckv = rnd_dev((size_t)T * ROW, 1, &hckv, msg);
        float *dc = rnd_dev((size_t)(P0 + T) * ROW, 1, &hc, msg), *dqa = slcu_alloc((size_t)T * NH * ROW * 4, msg, sizeof msg);
        float *dlat = slcu_alloc((size_t)T * NH * R * 4, msg, sizeof msg);
        poison(dqa, (size_t)T * NH * ROW * 4), poison(dlat, (size_t)T * NH * R * 4);
        float *rqa = calloc((size_t)T * NH * ROW, 4), *rlat = calloc((size_t)T * NH * R, 4), w[R], sc[P0 + T];
        const float scale = 0.125f;
        memcpy(hc + (size_t)P0 * ROW, hckv, (size_t)T * ROW * 4);
        for (int h = 0; h < NH; h++) /* cpu_mla absorb_part */
            for (int i = 0; i < DN; i++) {
                q_row_to_f32(&kvb.m, h * (DN + DV) + i, w);
                for (int t = 0; t < T; t++) ops->axpy(hq[(size_t)t * NH * QH + h * QH + i], w, rqa + ((size_t)t * NH + h) * ROW, R);
            }
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) memcpy(rqa + ((size_t)t * NH + h) * ROW + R, hq + (size_t)t * NH * QH + h * QH + DN, DR * 4);
        for (int it = 0; it < T * NH; it++) { /* attend_part */
            const int nk = P0 + it / NH + 1;
            float mx = -INFINITY;
            for (int p = 0; p < nk; p++) {
                sc[p] = ops->dot(rqa + (size_t)it * ROW, hc + (size_t)p * ROW, ROW) * scale;
                if (sc[p] > mx) mx = sc[p];
            }
            double sum = 0;
            for (int p = 0; p < nk; p++) sc[p] = expf(sc[p] - mx), sum += sc[p];
            for (int p = 0; p < nk; p++) ops->axpy(sc[p] / (float)sum, hc + (size_t)p * ROW, rlat + (size_t)it * R, R);
        }
        const slcu_mla a = {.q = dq, .ldq = NH * QH, .ckv = dckv, .cache = dc, .kv_b = kvb.d, .n = T, .pos0 = P0, .n_heads = NH,
                            .r = R, .dr = DR, .dn = DN, .dv = DV, .scale = scale, .q_abs = dqa, .lat = dlat};
        CK(!slcu_mla_attention(&a, msg, sizeof msg), "%s", msg);
        float *yqa = dl(dqa, (size_t)T * NH * ROW), *ylat = dl(dlat, (size_t)T * NH * R), *yc = dl(dc, (size_t)(P0 + T) * ROW);
        CK(!memcmp(yc, hc, (size_t)(P0 + T) * ROW * 4), "mla: the cache rows");
        const char *nm[3][2] = {{"mla absorb (f32 kv_b)", "mla latents (f32 kv_b)"}, {"mla absorb (q4 kv_b)", "mla latents (q4 kv_b)"},
                                {"mla absorb (q8 kv_b)", "mla latents (q8 kv_b)"}};
        OPCHECK(nm[qz][0], relerr(yqa, rqa, (size_t)T * NH * ROW), 1e-6);
        OPCHECK(nm[qz][1], relerr(ylat, rlat, (size_t)T * NH * R), 1e-5);
        /* the last token alone (the two before it already cached) == in the batch, bitwise */
        const slcu_mla one = {.q = dq + 2 * NH * QH, .ldq = NH * QH, .ckv = dckv + 2 * ROW, .cache = dc, .kv_b = kvb.d, .n = 1,
                              .pos0 = P0 + 2, .n_heads = NH, .r = R, .dr = DR, .dn = DN, .dv = DV, .scale = scale, .q_abs = dqa, .lat = dlat};
        CK(!slcu_mla_attention(&one, msg, sizeof msg), "%s", msg);
        float *y1 = dl(dlat, (size_t)NH * R);
        CK(!memcmp(y1, ylat + 2 * NH * R, (size_t)NH * R * 4), "mla: a token alone differs from it in a batch");
        free(hq), free(hckv), free(hc), free(rqa), free(rlat), free(yqa), free(ylat), free(yc), free(y1);
        slcu_free(dq), slcu_free(dckv), slcu_free(dc), slcu_free(dqa), slcu_free(dlat), free_mat(&kvb);
    }
    { /* MXFP4: 300 x 1024 (and 70 x 96), scales 2^-8 .. 2^2 with the two special bytes, 1 to 19 tokens at ldx > cols */
        const int shapes[2][2] = {{300, 1024}, {70, 96}};
        for (int sh = 0; sh < 2; sh++) {
            const int rows = shapes[sh][0], cols = shapes[sh][1], maxn = 19, ldx = cols + 4, ldy = rows + 3;
            const size_t cb = (size_t)rows * cols / 2, sb = (size_t)rows * cols / 32;
            uint8_t *h = malloc(cb + sb);
            for (size_t i = 0; i < cb; i++) h[i] = (uint8_t)(urand() * 256);
            for (size_t i = 0; i < sb; i++) h[cb + i] = (uint8_t)(119 + (int)(urand() * 11));
            h[cb] = 0; /* 2^-127, a subnormal scale */
            uint8_t *dw = dev_copy(h, cb + sb, msg);
            float *hx, *dx = rnd_dev((size_t)maxn * ldx, 1, &hx, msg), *dy = slcu_alloc((size_t)maxn * ldy * 4, msg, sizeof msg);
            float *ref = malloc((size_t)maxn * ldy * 4), *row = malloc((size_t)cols * 4);
            for (int r = 0; r < rows; r++) {
                mxfp4_row_scalar(h + (size_t)r * cols / 2, h + cb + (size_t)r * cols / 32, cols, row);
                for (int t = 0; t < maxn; t++) {
                    double acc = 0;
                    for (int c = 0; c < cols; c++) acc += (double)row[c] * hx[(size_t)t * ldx + c];
                    ref[(size_t)t * ldy + r] = (float)acc;
                }
            }
            const slcu_mat m = {.data = dw, .scales = dw + cb, .dtype = DT_MXFP4, .sdtype = DT_NONE, .rows = rows, .cols = cols, .group = 32};
            float *y1 = NULL;
            const int ns[] = {1, 3, 8, 19};
            for (int k = 0; k < 4; k++) {
                poison(dy, (size_t)maxn * ldy * 4);
                CK(!slcu_matmul_mxfp4(&m, dx, ldx, dy, ldy, ns[k], msg, sizeof msg), "%s", msg);
                float *y = dl(dy, (size_t)maxn * ldy);
                double e = 0, mx = 0;
                for (int t = 0; t < ns[k]; t++)
                    for (int r = 0; r < rows; r++) {
                        const size_t i = (size_t)t * ldy + r;
                        mx = fmax(mx, fabs(ref[i])), e = nanmax(e, fabs((double)y[i] - ref[i]));
                    }
                CK(e / mx <= 1e-5, "mxfp4 %dx%d, %d tokens: relative error %.3g", rows, cols, ns[k], e / mx);
                if (!y1) y1 = y;
                else {
                    for (int r = 0; r < rows; r++) CK(y[r] == y1[r], "mxfp4: token 0 in a batch of %d differs from alone", ns[k]);
                    free(y);
                }
                if (k == 3) printf("ok   mxfp4 matmul %4dx%-4d        max rel err %.2e (1-19 tokens, alone == batched)\n", rows, cols, e / mx);
            }
            free(h), free(hx), free(ref), free(row), free(y1), slcu_free(dw), slcu_free(dx), slcu_free(dy);
        }
    }
}

static int summary(void) { /* the last line of a run, and its exit status */
    printf("%s: %d failure%s\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}

int main(int argc, char **argv) {
    char msg[256] = "";
    unsetenv("SLUICE_CUDA_KQ"); /* the GGUF block types on (cuda_kq.cu slcu_kq_takes): check_kq asserts it */
    if (slcu_init(msg, sizeof msg)) {
        printf("skipped: %s\n", msg);
        return 77;
    }
    char name[128] = "";
    uint64_t tot = 0, fr = 0;
    slcu_device_info(name, sizeof name, &tot, &fr);
    printf("device: %s, %.1f GiB\n", name, tot / 1073741824.0);
    if (kq_main(argc, argv) >= 0) return failures ? 1 : 0; /* --kq, --bench-kq: the GGUF block types alone */
    if (mxfp4_main(argc, argv) >= 0) return failures ? 1 : 0; /* --mxfp4, --bench-mxfp4: test_cuda_mxfp4.c alone */
    if (mlaout_main(argc, argv) >= 0) return failures ? 1 : 0; /* --mlaout, --bench-mlaout: MLA's W_uv alone */
    const int fa16 = argc > 1 && !strcmp(argv[1], "--fa16"); /* tools/cuda_flash_check.sh: the flash attention alone */
    if (fa16) goto flash;
    if (argc > 1 && !strcmp(argv[1], "--bench-mv7")) { /* mv1p_i8 against mv1c_i8 (test_cuda_mv.c), no checks */
        bench_mv7();
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--mvprof7")) { /* mv1p_i8's phases (test_cuda_mv.c), no checks */
        mvprof7();
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--fold")) return fold_main(); /* mv1c_i8's row-major fold checked, timed (test_cuda_mv.c) */
    if (argc > 1 && !strcmp(argv[1], "--bench-fold")) { /* mv1c_i8's fold as before against MVFOLD=2's (test_cuda_mv.c), no checks */
        bench_fold();
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--swi")) return swi_main(); /* SWIDOWN=2 | 3's pair checked, timed (test_cuda_mv.c) */
    if (argc > 1 && !strcmp(argv[1], "--resolve")) return resolve_main(); /* RESOLVE=2 checked, timed (test_cuda_resolve.c) */
    if (argc > 1 && !strcmp(argv[1], "--mvprof")) { /* the one-token matvec's phases (test_cuda_mv.c), no checks */
        mvprof();
        return 0;
    }
    /* --pdl: the overlapped launches' chain alone (test_cuda_pdl.c). Not in the full run until a device passes it: on an
     * H100 (session 32's call N) its run with PDL on the matvecs made an illegal memory access (the reference, PDL off,
     * passed): mv1c_i8 read the route's expert cell before its pdl_wait (cuda_i8.cuh resolve) */
    if (argc > 1 && !strcmp(argv[1], "--pdl")) return check_pdl(3), summary();
    if (argc > 1 && (!strcmp(argv[1], "--small") || !strcmp(argv[1], "--bench-small"))) { /* test_cuda_small.c alone */
        check_small();
        printf("%s: %d failure%s\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
        if (!strcmp(argv[1], "--bench-small")) bench_small();
        return failures ? 1 : 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--router")) { /* SLUICE_CUDA_ROUTER=2 checked and timed (test_cuda_small.c) */
        check_router2_all();
        printf("%s: %d failure%s\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
        if (!failures) bench_router2();
        return failures ? 1 : 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--mvsplit")) { /* 2-8 token matvecs as one-token jobs, timed (test_cuda_split.c) */
        bench_mv_split();
        return 0;
    }
    /* --attn-items: a decode batch's attention / RoPE items bitwise each alone, then their time against a launch pair an
     * item (test_cuda_attn_items.c; SLUICE_CUDA_ATTN_ITEMS's kernels); the checks are in the full run too since call R */
    if (argc > 1 && !strcmp(argv[1], "--attn-items")) {
        check_attn_items();
        printf("%s: %d failure%s\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
        if (!failures) bench_attn_items();
        return failures ? 1 : 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--hybrid")) return check_hybrid(), summary(); /* the hybrid step's host experts == the device (test_cuda_hybrid.c) alone */
    if (argc > 1 && !strcmp(argv[1], "--bench-fa")) { /* the decode attention's us a call, FA_CL off / on (test_cuda_fa.c) */
        bench_fa();
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--tier")) return check_moe_batches_all(), summary(); /* a layer's experts in batches (test_cuda_tier.c) alone */
    if (argc > 1 && !strcmp(argv[1], "--serve8")) { /* a decode batch's experts grouped by expert (test_cuda_serve.c), timed */
        check_moeg_all();
        printf("%s: %d failure%s\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
        if (!failures) bench_serve8();
        return failures ? 1 : 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--serve-rows")) { /* a decode batch's rows in one launch (test_cuda_rows.c), timed */
        check_rows_all();
        printf("%s: %d failure%s\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
        if (!failures) bench_rows();
        return failures ? 1 : 0;
    }
    if (mla_main(argc, argv) >= 0) return failures ? 1 : 0; /* test_cuda_mla.c: --mla, --bench-mla, --absorb, --bench-absorb */
    if (argc > 1 && (!strcmp(argv[1], "--moe-dec") || !strcmp(argv[1], "--moex"))) { /* test_cuda_moedec.c / _moex.c alone */
        if (!strcmp(argv[1], "--moex")) check_moex_all();
        else check_moe_dec_all();
        return summary();
    }
    check_case(DT_F32, 257, 512, 0, DT_F32);
    check_case(DT_F32, 100, 70, 0, DT_F32); /* columns that do not fill 16-byte pieces */
    check_case(DT_BF16, 1000, 4096, 0, DT_F32);
    check_case(DT_F16, 333, 1024, 0, DT_F32);
    check_case(DT_BF16, 64, 100, 0, DT_F32);
    const int groups[] = {32, 64, 128};
    const dt_type sdts[] = {DT_F16, DT_BF16, DT_F32};
    for (int g = 0; g < 3; g++)
        for (int s = 0; s < 3; s++) {
            check_case(DT_Q8, 300, 1024, groups[g], sdts[s]);
            check_case(DT_Q4, 300, 1024, groups[g], sdts[s]);
        }
    check_case(DT_Q4, 2048, 4096, 64, DT_BF16);
    check_case(DT_Q8, 768, 2048, 32, DT_F16);
    for (int g = 0; g < 3; g++) {
        check_i8(DT_Q8, 300, 1024, groups[g], sdts[g]);
        check_i8(DT_Q4, 300, 1024, groups[g], sdts[(g + 1) % 3]);
    }
    check_i8(DT_Q4, 768, 2048, 64, DT_BF16);
    check_i8(DT_Q8, 129, 768, 128, DT_F16);
    check_i8(DT_Q4, 100, 160, 32, DT_BF16); /* 5 blocks: gemm_tile3's last stage partly past the row */
    check_i8(DT_Q8, 70, 96, 32, DT_F32);
    check_many_tokens(DT_F32, 128, 2048, 300); /* a prefill's router: 4 rows a warp */
    check_many_tokens(DT_F32, 100, 68, 40);
    check_i8(DT_Q4, 257, 4096, 32, DT_BF16); /* several chunks at every row count (cuda_mv.cu) */
    check_ibias_all();
    check_resolve_all();
    check_rmsnorm_rows(100, 1, 2048, 2048, 2048);
    check_rmsnorm_rows(70, 8, 128, 160, 1300); /* heads at a stride, a gap after them */
    check_rmsnorm_rows(9, 8, 300, 300, 2400);
    check_rope_rows(80, 8, 128, 64, 0), check_rope_rows(20, 4, 128, 128, 1);
    check_moe(70, 3, 9, 512, 160, DT_Q4, 64, DT_BF16, DT_Q8, 32, DT_F16), check_moe(300, 8, 40, 256, 96, DT_Q8, 128, DT_F32, DT_Q4, 32, DT_BF16);
    check_moe_batches_all();
    check_moex_all();
    check_moe_dec_all();
    check_moeg_all();
    check_attn_items();
    check_attn_prefill(40, 32, 4, 128, 400, 0, 200, 0, 0);
    check_attn_prefill(20, 8, 2, 64, 191, 128, 1000, 1, 1);
    check_attn_prefill(64, 16, 16, 68, 64, 0, 0, 0, 1);
flash:
    check_attn_f16();
    if (!fa16) check_ops(), check_mixers(), check_hybrid(), check_kq_all();
    if (!fa16) /* last: a fault of the new launches leaves the other checks' results */
        check_mlaout_all(), check_mla_split_all(), check_absorb_all(), check_mxfp4_all();
    printf("%s: %d failure%s\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    if (argc > 1 && (!strcmp(argv[1], "--bench") || !strcmp(argv[1], "--bench-i8"))) bench(!strcmp(argv[1], "--bench-i8"));
    if (argc > 1 && !strcmp(argv[1], "--bench-mv")) bench_mv();
    return failures ? 1 : 0;
}
