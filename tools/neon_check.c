/*
 * neon_check.c — the NEON kernel table against the scalar oracle on random inputs of awkward sizes,
 * built without the rest of the library so it cross-compiles with aarch64-linux-gnu-gcc and runs under
 * qemu-user (tools/neon_test.sh). Same checks as tests/test_quant.c: outputs poisoned first, each
 * |neon - scalar| <= 1e-5 * 0.3 * sum|x| (FMA rounding only, kernels_neon.c), a batch bitwise equal to
 * token by token, the int8-activation kernels bitwise the oracle, the MXFP4 row decoder bitwise the scalar one; prints the worst error and "N passed, N failed".
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/mxfp4.h"
#include "quant/quant.h"

static uint64_t rng = 99;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

/* The GGUF block types (quant/kquant.h) on random valid blocks: the NEON table's exact matmul within 1e-5 * sum|w x|
 * of the oracle's, its int8 one bitwise the oracle's, each as a batch and token by token. */
static void kq_check(const kern_ops *sc, const kern_ops *ne, int *pass, int *fail) {
    static const dt_type types[] = {DT_Q2_K,    DT_Q3_K,   DT_Q4_K,  DT_Q5_K,    DT_Q6_K,  DT_IQ4_NL, DT_IQ4_XS,
                                    DT_IQ2_XXS, DT_IQ2_XS, DT_IQ2_S, DT_IQ3_XXS, DT_IQ3_S, DT_IQ1_S,  DT_IQ1_M, DT_Q2, DT_Q2V,
                                    DT_Q5_0,    DT_Q5_1};
    uint64_t st = 5;
    for (int k = 0; k < (int)(sizeof types / sizeof *types); k++)
        for (int v = 0; v < 2; v++) {
            const dt_type dt = types[k];
            /* IQ4_NL, q2 (blocks of 32, 128): rows not of whole 256s too */
            const int cols = kq_blk(dt) == 32 ? 32 * (3 + 4 * v) : kq_rotated(dt) ? 128 * (1 + 2 * v) : 256 * (1 + 2 * v);
            const int rows = 3 + 4 * v, nt = v ? 37 : 3;
            size_t bytes = q_mat_bytes(dt, rows, cols, kq_blk(dt), DT_NONE);
            uint8_t *data = malloc(bytes);
            kq_random(dt, data, bytes / (size_t)kq_bytes(dt), &st);
            tn_mat m;
            q_mat_bind(&m, data, dt, rows, cols, kq_blk(dt), DT_NONE, 0);
            float *x = malloc((size_t)nt * cols * 4), *y[2][3], *wr = malloc((size_t)cols * 4);
            for (int i = 0; i < nt * cols; i++) x[i] = frand();
            void *abuf = malloc(kern_act_bytes(nt, cols));
            int ok = 1;
            for (int i8 = 0; i8 < 2; i8++) {
                for (int j = 0; j < 3; j++) { /* oracle, neon batch, neon token by token */
                    y[i8][j] = malloc((size_t)nt * rows * 4);
                    for (int i = 0; i < nt * rows; i++) y[i8][j][i] = NAN;
                    const kern_ops *o = j ? ne : sc;
                    for (int t0 = 0; t0 < nt; t0 += j == 2 ? 1 : nt) {
                        int n = j == 2 ? 1 : nt;
                        kern_act ka;
                        kern_act_init(&ka, abuf, x + (size_t)t0 * cols, (size_t)cols, n, cols, 1);
                        if (i8) kern_matmul_act(o, NULL, &m, &ka, y[i8][j] + (size_t)t0 * rows, (size_t)rows);
                        else kern_matmul(o, NULL, &m, x + (size_t)t0 * cols, (size_t)cols, y[i8][j] + (size_t)t0 * rows, (size_t)rows, n);
                    }
                }
                for (int i = 0; i < nt * rows; i++) {
                    q_row_to_f32(&m, i % rows, wr);
                    double mag = 0;
                    for (int c = 0; c < cols; c++) mag += fabs((double)wr[c] * x[(size_t)(i / rows) * cols + c]);
                    double e = fabs((double)y[i8][1][i] - y[i8][0][i]);
                    ok &= i8 ? !memcmp(&y[i8][1][i], &y[i8][0][i], 4) : e <= 1e-5 * mag;
                    ok &= !memcmp(&y[i8][1][i], &y[i8][2][i], 4) && y[i8][0][i] == y[i8][0][i];
                }
            }
            if (ok) (*pass)++;
            else {
                (*fail)++;
                printf("FAIL neon %s rows %d cols %d: not the oracle's (exact within 1e-5, int8 bitwise)\n", dt_name(dt),
                       rows, cols);
            }
            for (int i8 = 0; i8 < 2; i8++)
                for (int j = 0; j < 3; j++) free(y[i8][j]);
            free(x); free(wr); free(abuf); free(data);
        }
}

int main(void) {
    const kern_ops *sc = kern_scalar_ops(), *ne = kern_neon_ops();
    if (!ne) { printf("no NEON table on this build\n0 passed, 1 failed\n"); return 1; }
    int pass = 0, fail = 0;
    double worst = 0;
    static const int plain_cols[] = {1, 7, 13, 100, 257, 300}, q_cols[] = {32, 96, 160, 384}, rows_l[] = {1, 5, 13};
    for (int dt = DT_F32; dt < DT_COUNT; dt++) {
        if (dt == DT_F8E4M3 || kq_is((dt_type)dt)) continue; /* the GGUF block types: kq_check below */
        int q = q_is_quant((dt_type)dt);
        for (int ci = 0; ci < (q ? 4 : 6); ci++)
            for (int gi = 0; gi < (q ? 3 : 1); gi++) {
                int cols = q ? q_cols[ci] : plain_cols[ci], group = 32 << gi, rows = rows_l[(ci + gi) % 3], nt = 3;
                if (q && cols % group) continue;
                size_t n = (size_t)rows * cols;
                float *w = malloc(n * 4), *x = malloc((size_t)nt * cols * 4), *a = malloc((size_t)nt * rows * 4),
                      *b = malloc((size_t)nt * rows * 4), *one = malloc((size_t)nt * rows * 4);
                for (size_t i = 0; i < n; i++) w[i] = frand() * 0.1f;
                for (int i = 0; i < nt * cols; i++) x[i] = frand();
                void *data = malloc(q_mat_bytes((dt_type)dt, rows, cols, group, DT_BF16) + 64);
                if (q) q_quantize((dt_type)dt, w, rows, cols, group, DT_BF16, 7, data);
                else dt_from_f32((dt_type)dt, w, data, n);
                tn_mat m;
                q_mat_bind(&m, data, (dt_type)dt, rows, cols, group, DT_BF16, 7);
                for (int i = 0; i < nt * rows; i++) a[i] = b[i] = one[i] = NAN; /* every element must be written */
                kern_matmul(sc, NULL, &m, x, cols, a, rows, nt);
                kern_matmul(ne, NULL, &m, x, cols, b, rows, nt);
                for (int t = 0; t < nt; t++) /* token by token */
                    kern_matmul(ne, NULL, &m, x + (size_t)t * cols, cols, one + (size_t)t * rows, rows, 1);
                int ok = 1, det = 1;
                for (int i = 0; i < nt * rows; i++) {
                    double mag = 0;
                    for (int c = 0; c < cols; c++) mag += fabs((double)x[(size_t)(i / rows) * cols + c]) * 0.3;
                    double e = fabs((double)b[i] - a[i]) / (mag + 1e-6);
                    if (!(e <= 1e-5)) ok = 0;
                    if (e > worst) worst = e;
                    if (memcmp(&b[i], &one[i], sizeof *b)) det = 0;
                }
                if (ok && det) pass++;
                else {
                    fail++;
                    printf("FAIL neon %s rows %d cols %d group %d:%s%s\n", dt_name((dt_type)dt), rows, cols, group,
                           ok ? "" : " error vs the oracle above 1e-5", det ? "" : " batch != token by token");
                }
                free(w); free(x); free(a); free(b); free(one); free(data);
            }
    }
    /* the MXFP4 row decoder (kernels/mxfp4_neon.c): bitwise the scalar oracle's values */
    for (int cols = 32; cols <= 320; cols += 32) {
        uint8_t codes[160], scales[10];
        float ref[320], got[320];
        for (int i = 0; i < cols / 2; i++) codes[i] = (uint8_t)(frand() * 128 + 128);
        for (int g = 0; g < cols / 32; g++) scales[g] = (uint8_t)((unsigned)(frand() * 127.5f + 127.5f) % 255);
        if (cols == 64) scales[0] = 0, scales[1] = 254;
        mxfp4_row_scalar(codes, scales, cols, ref);
        mxfp4_row_neon()(codes, scales, cols, got);
        if (!memcmp(ref, got, (size_t)cols * 4)) pass++;
        else { fail++; printf("FAIL neon mxfp4 decoder, %d columns\n", cols); }
    }
    /* the int8-activation kernels (kern_matmul_act): bitwise the oracle, as a batch and token by token. With
     * the dot product (qemu -cpu max) the table has its SDOT kernels (kernels_neon_dot.c); without it (-cpu
     * cortex-a53) none, and kern_matmul_act runs the oracle's. NEON_DOT=0/1 says which to expect. */
    const char *want_dot = getenv("NEON_DOT");
    int has_dot = ne->matmul_i8[DT_Q8] && ne->matmul_i8[DT_Q4];
    if (!ne->matmul_i8[DT_Q4_K]) { fail++; printf("FAIL: the NEON table has no q4_k int8 kernel\n"); }
    if (want_dot && atoi(want_dot) != has_dot) { fail++; printf("FAIL: SDOT kernels %s, NEON_DOT=%s\n", has_dot ? "on" : "off", want_dot); }
    static const int i8_cols[] = {32, 64, 96, 160, 256, 384, 448, 2048}, i8_nt[] = {1, 3, 37};
    static const dt_type sdts[] = {DT_BF16, DT_F16, DT_F32};
    int i8_cases = 0;
    /* act: the house's activations, or llama.cpp's q8_0 / q8_1 (tn_mat.act: GGUF Q8_0 .. Q5_1, group 32) */
    for (int dq = 0; dq < 2; dq++)
        for (int ci = 0; ci < 8; ci++)
            for (int ga = 0; ga < 5; ga++) {
                const int gi = ga < 3 ? ga : 0, act = ga < 3 ? TN_ACT_HOUSE : ga - 2;
                dt_type dt = dq ? DT_Q4 : DT_Q8, sdt = act ? DT_F16 : sdts[(ci + gi) % 3];
                int cols = i8_cols[ci], group = 32 << gi, rows = rows_l[(ci + ga) % 3] + 2, nt = i8_nt[(ci + ga + dq) % 3];
                if (cols % group) continue;
                size_t n = (size_t)rows * cols;
                float *w = malloc(n * 4), *x = malloc((size_t)nt * cols * 4), *a = malloc((size_t)nt * rows * 4),
                      *b = malloc((size_t)nt * rows * 4), *one = malloc((size_t)nt * rows * 4);
                for (size_t i = 0; i < n; i++) w[i] = frand() * 0.1f + (i % 7 == 0 ? 0.05f : 0.0f);
                for (int i = 0; i < nt * cols; i++) x[i] = frand() * (i % 5 ? 1.0f : 3.0f);
                x[0] = 0.0f;
                void *data = malloc(q_mat_bytes(dt, rows, cols, group, sdt) + 64);
                void *abuf = malloc(kern_act_bytes(nt, cols)), *abuf1 = malloc(kern_act_bytes(1, cols));
                q_quantize(dt, w, rows, cols, group, sdt, 7, data);
                tn_mat m;
                q_mat_bind(&m, data, dt, rows, cols, group, sdt, 7);
                m.act = act;
                for (int i = 0; i < nt * rows; i++) a[i] = b[i] = one[i] = NAN;
                kern_act ka;
                kern_act_init(&ka, abuf, x, (size_t)cols, nt, cols, 1);
                kern_matmul_act(sc, NULL, &m, &ka, a, (size_t)rows);
                kern_act_init(&ka, abuf, x, (size_t)cols, nt, cols, 1);
                kern_matmul_act(ne, NULL, &m, &ka, b, (size_t)rows);
                for (int t = 0; t < nt; t++) {
                    kern_act_init(&ka, abuf1, x + (size_t)t * cols, (size_t)cols, 1, cols, 1);
                    kern_matmul_act(ne, NULL, &m, &ka, one + (size_t)t * rows, (size_t)rows);
                }
                int ok = !memcmp(a, b, (size_t)nt * rows * 4) && !memcmp(a, one, (size_t)nt * rows * 4);
                for (int i = 0; i < nt * rows; i++) ok &= a[i] == a[i]; /* written, not the NaN poison */
                if (ok) pass++, i8_cases++;
                else {
                    fail++;
                    printf("FAIL neon %s.i8 rows %d cols %d group %d scales %s tokens %d act %d: not bitwise the oracle\n",
                           dt_name(dt), rows, cols, group, dt_name(sdt), nt, act);
                }
                free(w); free(x); free(a); free(b); free(one); free(data); free(abuf); free(abuf1);
            }
    printf("neon: %d int8-activation cases bitwise the oracle (%s kernels)\n", i8_cases, has_dot ? "SDOT" : "the oracle's");
    kq_check(sc, ne, &pass, &fail);
    /* attention's softmax (kernels.h softmax_rows): bitwise kern_softmax_row, whose expf is this libm's: rows whose
     * max is 0 (expf of the scores themselves: random bit patterns in [-128, 0], expf's bands, -inf, a NaN), then
     * scaled rows with and without sinks, row and score counts around the 4-lane steps */
    static float sm_want[9 * 1024], sm_got[9 * 1024];
    for (int rep = 0; rep < 40; rep++) {
        const float edge[] = {-INFINITY, -0x1.9fe368p6f, -0x1.9fe366p6f, -0x1.9d1d9ep6f, -0x1.9d1d9cp6f, -103.5f,
                              -88.0f, -87.99f, -0x1p-149f, -0.0f, NAN, 0.5f, -0.5f, -1.5f, -2.5f};
        const int n = rep < 20 ? 1024 : 1 + rep * 37 % 300, nr = rep < 20 ? 9 : 1 + rep % 9, sk = rep % 2 && rep >= 20;
        float sinks[9];
        for (int r = 0; r < nr; r++) sinks[r] = frand() * 8.0f;
        for (int i = 0; i < nr * n; i++) {
            uint32_t b = 0x80000000u + (uint32_t)((rng = rng * 6364136223846793005ull + 1442695040888963407ull) >> 33) % 0x43000000u;
            memcpy(&sm_want[i], &b, 4);
            if (rep >= 20) sm_want[i] = frand() * (float)(1 + rep * 7);
        }
        if (rep < 20) {
            for (int r = 0; r < nr; r++) sm_want[(size_t)r * n] = 0.0f;
            memcpy(sm_want + 1, edge, sizeof edge - (rep ? sizeof(float) * 5 : 0));
        }
        memcpy(sm_got, sm_want, sizeof(float) * (size_t)(nr * n));
        const float scale = rep < 20 ? 1.0f : 0.088f;
        for (int r = 0; r < nr; r++) kern_softmax_row(sm_want + (size_t)r * n, n, scale, sk ? sinks + r : NULL);
        ne->softmax_rows(sm_got, (size_t)n, nr, n, scale, sk ? sinks : NULL);
        if (!memcmp(sm_want, sm_got, sizeof(float) * (size_t)(nr * n))) pass++;
        else { fail++; printf("FAIL neon softmax_rows rep %d (n %d rows %d sinks %d): not kern_softmax_row's\n", rep, n, nr, sk); }
    }
    float u[37], v[37];
    for (int i = 0; i < 37; i++) { u[i] = frand(); v[i] = frand(); }
    if (fabsf(ne->dot(u, v, 37) - sc->dot(u, v, 37)) < 1e-5f) pass++; else { fail++; printf("FAIL dot\n"); }
    printf("neon: worst error %.2g (bound 1e-5)\n%d passed, %d failed\n", worst, pass, fail);
    return fail != 0;
}
