/* ---- the GGUF block types on the device (cuda_kq.cu, included by test_cuda.c) ----
 * check_kq: random valid blocks of each type (kq_random: random code and scale bytes, finite f16 d of either sign)
 * at several shapes (rows not a multiple of the CTA's 4 or of 32, and 4 and 20 rows: one and five row blocks, where
 * launch_mm's token step once overflowed; rows of 1 to 33 blocks: whole and partial chunks of
 * 32 pieces; the data 1 byte off a 4-byte boundary, 2 for the types whose blocks are not 4-byte multiples), 1, 3, 8 and
 * 17 tokens:
 *   - the embedding rows (slcu_embed_kq, the matmul's decoder) bitwise kq_row_to_f32, the scalar oracle;
 *   - y against the oracle's dequantisation dotted in double: |y - ref| <= 1e-5 * sum |w| |x| + 1e-30 per row and
 *     token (f32 sums of cols products: a few ulp of that sum; the worst ratio printed);
 *   - each token of a 3-, 8- or 17-token call bitwise the same token alone (batch == alone), every output written
 *     (NaN-poisoned first), the same call twice bitwise.
 * bench_kq: weight GB/s of the one-token (and 8-token) matmul per type, 16384 x 4096, against the copy (after
 * --bench-i8's rows, and by --bench-kq after check_kq_all). */
#include "backend/cuda/cuda_kq.h"

static const dt_type KQ_ALL[] = {DT_Q4_K, DT_Q6_K, DT_Q5_K, DT_Q3_K, DT_Q2_K, DT_IQ4_XS, DT_IQ4_NL, DT_Q5_0, DT_Q5_1,
                                 DT_IQ2_XXS, DT_IQ2_XS, DT_IQ2_S, DT_IQ3_XXS, DT_IQ3_S, DT_IQ1_S, DT_IQ1_M};
#define KQ_N_ALL ((int)(sizeof KQ_ALL / sizeof *KQ_ALL))

static unsigned long long kq_seed = 0x9e3779b97f4a7c15ull;

/* a [rows][cols] matrix of random blocks on the host (*h) and the device (returned, off bytes into its buffer, *base the
 * buffer to free) */
static uint8_t *kq_make(dt_type dt, int rows, int cols, int off, uint8_t **h, void **base, size_t *bytes) {
    char msg[256];
    *bytes = (size_t)rows * kq_row_bytes(dt, cols);
    *h = malloc(*bytes);
    uint64_t st = kq_seed++;
    kq_random(dt, *h, *bytes / (size_t)kq_bytes(dt), &st);
    *base = slcu_alloc(*bytes + 16, msg, sizeof msg);
    if (!*base) return NULL;
    slcu_upload((uint8_t *)*base + off, *h, *bytes, msg, sizeof msg);
    return (uint8_t *)*base + off;
}

static void check_kq(dt_type dt, int rows, int cols, int off) {
    char msg[256] = "";
    const int maxn = 17, ns[] = {1, 3, 8, 17}, ldx = cols + (rows & 1) * 3; /* odd rows: an unaligned token stride */
    uint8_t *h;
    void *base;
    size_t bytes;
    uint8_t *dw = kq_make(dt, rows, cols, off, &h, &base, &bytes);
    CK(dw != NULL, "%s: device memory", dt_name(dt));
    if (!dw) { free(h); return; }
    const slcu_mat m = {.data = dw, .dtype = dt, .sdtype = DT_NONE, .rows = rows, .cols = cols, .group = kq_blk(dt)};
    float *x = malloc((size_t)maxn * ldx * 4), *w = malloc((size_t)rows * cols * 4);
    float *y = malloc((size_t)maxn * rows * 4), *y1 = malloc((size_t)maxn * rows * 4), *y2 = malloc((size_t)maxn * rows * 4);
    double *ref = malloc((size_t)maxn * rows * sizeof(double)), *mag = malloc((size_t)maxn * rows * sizeof(double));
    for (size_t i = 0; i < (size_t)maxn * ldx; i++) x[i] = nrand();
    for (int r = 0; r < rows; r++) kq_row_to_f32(dt, h + (size_t)r * kq_row_bytes(dt, cols), cols, w + (size_t)r * cols);
    for (int t = 0; t < maxn; t++)
        for (int r = 0; r < rows; r++) {
            double s = 0, a = 0;
            for (int c = 0; c < cols; c++) {
                const double p = (double)w[(size_t)r * cols + c] * x[(size_t)t * ldx + c];
                s += p, a += fabs(p);
            }
            ref[(size_t)t * rows + r] = s, mag[(size_t)t * rows + r] = a;
        }
    float *dx = slcu_alloc((size_t)maxn * ldx * 4, msg, sizeof msg), *dy = slcu_alloc((size_t)maxn * rows * 4, msg, sizeof msg);
    int *dtok = slcu_alloc(8 * sizeof(int), msg, sizeof msg);
    float *de = slcu_alloc((size_t)8 * cols * 4, msg, sizeof msg);
    slcu_upload(dx, x, (size_t)maxn * ldx * 4, msg, sizeof msg);
    /* the decoder against the oracle, bitwise: rows 0, the last, and some between, as embedding rows */
    const int tok[8] = {0, rows - 1, rows / 2, rows / 3, 1 % rows, rows - 1, 0, (rows * 5) / 7};
    slcu_upload(dtok, tok, sizeof tok, msg, sizeof msg);
    poison(de, (size_t)8 * cols * 4);
    float *emb = malloc((size_t)8 * cols * 4);
    CK(!slcu_embed_kq(&m, dtok, 8, de, (size_t)cols, msg, sizeof msg) && !slcu_sync(msg, sizeof msg), "%s", msg);
    slcu_download(emb, de, (size_t)8 * cols * 4, msg, sizeof msg);
    int emb_ok = 1;
    for (int t = 0; t < 8; t++) emb_ok &= !memcmp(emb + (size_t)t * cols, w + (size_t)tok[t] * cols, (size_t)cols * 4);
    CK(emb_ok, "%s %dx%d: the device's dequantised rows differ from kq_row_to_f32", dt_name(dt), rows, cols);
    /* every token alone */
    poison(dy, (size_t)maxn * rows * 4);
    for (int t = 0; t < maxn; t++)
        CK(!slcu_matmul_kq(&m, dx + (size_t)t * ldx, (size_t)ldx, dy + (size_t)t * rows, (size_t)rows, 1, msg, sizeof msg),
           "%s", msg);
    CK(!slcu_sync(msg, sizeof msg), "%s", msg);
    slcu_download(y1, dy, (size_t)maxn * rows * 4, msg, sizeof msg);
    double worst = 0;
    for (size_t i = 0; i < (size_t)maxn * rows; i++) {
        const double e = fabs((double)y1[i] - ref[i]) / (mag[i] + 1e-30);
        if (isnan(e) || e > worst) worst = isnan(e) ? INFINITY : e; /* NaN: never written */
    }
    CK(worst <= 1e-5, "%s %dx%d: error %.3g of sum |w x| against the oracle in double", dt_name(dt), rows, cols, worst);
    int same = 1, again = 1;
    for (unsigned k = 1; k < sizeof ns / sizeof *ns; k++) {
        const int n = ns[k];
        for (int rep = 0; rep < 2; rep++) {
            poison(dy, (size_t)n * rows * 4);
            CK(!slcu_matmul_kq(&m, dx, (size_t)ldx, dy, (size_t)rows, n, msg, sizeof msg) && !slcu_sync(msg, sizeof msg), "%s", msg);
            slcu_download(rep ? y2 : y, dy, (size_t)n * rows * 4, msg, sizeof msg);
        }
        same &= !memcmp(y, y1, (size_t)n * rows * 4);
        again &= !memcmp(y, y2, (size_t)n * rows * 4);
    }
    CK(same, "%s %dx%d: a token in a batch differs from the token alone", dt_name(dt), rows, cols);
    CK(again, "%s %dx%d: the same call twice differs", dt_name(dt), rows, cols);
    printf("kq %-8s %5d x %-5d +%d: oracle's weights %s, error %.2e of sum |w x|, batch == alone %s\n", dt_name(dt),
           rows, cols, off, emb_ok ? "bitwise" : "DIFFER", worst, same ? "bitwise" : "DIFFERS");
    free(x), free(w), free(y), free(y1), free(y2), free(ref), free(mag), free(emb), free(h);
    slcu_free(dx), slcu_free(dy), slcu_free(dtok), slcu_free(de), slcu_free(base);
}

static void check_kq_all(void) {
    for (int i = 0; i < KQ_N_ALL; i++) {
        const dt_type dt = KQ_ALL[i];
        const int blk = kq_blk(dt), odd = kq_bytes(dt) % 4 != 0;
        CK(slcu_kq_takes(dt), "slcu_kq_takes(%s) is 0", dt_name(dt));
        check_kq(dt, 37, 3 * blk, odd ? 2 : 1);      /* a partial chunk alone; the data 1 or 2 bytes off a word */
        check_kq(dt, 130, 33 * blk, 0);              /* a whole chunk and one piece (32-blocks) or a partial one */
        check_kq(dt, 67, blk == 32 ? 4096 : 2560, 0); /* several chunks */
        check_kq(dt, 9, blk, odd ? 2 : 0);           /* one block a row */
        check_kq(dt, 4, blk, 0);                     /* a router's rows, one row block: launch_mm's token step */
        check_kq(dt, 20, 2 * blk, odd ? 1 : 0);      /* 5 row blocks (overflowed an int before: cuda_kq_dec.cuh) */
    }
    CK(!slcu_kq_takes(DT_Q2) && !slcu_kq_takes(DT_Q2V) && !slcu_kq_takes(DT_Q4), "slcu_kq_takes takes a type it should not");
}

typedef struct { slcu_mat m; const float *x; float *y; int n; } kq_run;
static void kq_run_fn(void *p) {
    kq_run *r = p;
    char msg[256];
    slcu_matmul_kq(&r->m, r->x, (size_t)r->m.cols, r->y, (size_t)r->m.rows, r->n, msg, sizeof msg);
}

static void bench_kq(double copy_gbs) {
    char msg[256];
    const int rows = 16384, cols = 4096;
    printf("\nGGUF block types (cuda_kq.cu, f32 activations), %d x %d, GB/s of weights (%% of the copy's %.0f GB/s):\n",
           rows, cols, copy_gbs);
    printf("%-9s %9s %14s %14s\n", "dtype", "MiB", "1 token", "8 tokens");
    float *dx = slcu_alloc((size_t)8 * cols * 4, msg, sizeof msg), *dy = slcu_alloc((size_t)8 * rows * 4, msg, sizeof msg);
    float *hx = malloc((size_t)8 * cols * 4);
    for (int i = 0; i < 8 * cols; i++) hx[i] = nrand();
    slcu_upload(dx, hx, (size_t)8 * cols * 4, msg, sizeof msg);
    for (int i = 0; i < KQ_N_ALL; i++) {
        const dt_type dt = KQ_ALL[i];
        uint8_t *h;
        void *base;
        size_t bytes;
        uint8_t *dw = kq_make(dt, rows, cols, 0, &h, &base, &bytes);
        if (!dw) { printf("%s: out of device memory\n", dt_name(dt)); free(h); continue; }
        kq_run r = {{.data = dw, .dtype = dt, .sdtype = DT_NONE, .rows = rows, .cols = cols, .group = kq_blk(dt)}, dx, dy, 1};
        const double ms1 = slcu_time(kq_run_fn, &r, 20);
        r.n = 8;
        const double ms8 = slcu_time(kq_run_fn, &r, 20);
        const double g1 = bytes / (ms1 * 1e-3) / 1e9, g8 = bytes / (ms8 * 1e-3) / 1e9;
        printf("%-9s %9.1f %7.0f (%3.0f%%) %7.0f (%3.0f%%)\n", dt_name(dt), bytes / 1048576.0, g1, 100 * g1 / copy_gbs, g8,
               100 * g8 / copy_gbs);
        free(h);
        slcu_free(base);
    }
    free(hx);
    slcu_free(dx), slcu_free(dy);
}

/* test_cuda --kq: check_kq_all alone; --bench-kq: that, then bench_kq. -1 for any other arguments. */
static int kq_main(int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "--kq") && strcmp(argv[1], "--bench-kq"))) return -1;
    check_kq_all();
    printf("%s: %d failure%s\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    if (!strcmp(argv[1], "--bench-kq")) {
        char msg[256];
        const size_t copy_bytes = (size_t)1 << 30;
        void *s = slcu_alloc(copy_bytes, msg, sizeof msg), *d = slcu_alloc(copy_bytes, msg, sizeof msg);
        float best = 1e30f, ms;
        for (int i = 0; i < 5; i++)
            if (!slcu_bench_copy(d, s, copy_bytes, &ms) && ms < best) best = ms;
        slcu_free(s), slcu_free(d);
        bench_kq(2.0 * copy_bytes / (best * 1e-3) / 1e9);
    }
    return failures ? 1 : 0;
}
