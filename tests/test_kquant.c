/*
 * test_kquant.c — the GGUF block types kept native (quant/kquant.h: Q2_K .. Q6_K, IQ4_NL, IQ4_XS, the grid i-quants
 * IQ2_XXS .. IQ1_M, Q5_0, Q5_1) and sluice's own block types q2, q2v (quant/q2.c) in the kernels:
 * every table's exact matmul against the scalar oracle, every table's int8-activation matmul bitwise the oracle
 * (kernels/kquant_i8.c), batch equal to token by token, and the int8 result within its rounding bound of the
 * exact one, on random valid blocks (kq_random); and one int8 activation form per matrix, whichever call fills it
 * (kernels_scalar.c act_form). Their values against gguf-py's dequantize are checked by
 * tests/py/test_gguf.py (test_kquant_types_kept_native, test_every_type_reads_back_as_gguf_py_dequantises).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "quant/quant.h"
#include "test.h"

static const dt_type KQ_TYPES[] = {DT_Q2_K,    DT_Q3_K,   DT_Q4_K,  DT_Q5_K,    DT_Q6_K,  DT_IQ4_NL, DT_IQ4_XS, DT_IQ2_XXS,
                                   DT_IQ2_XS,  DT_IQ2_S,  DT_IQ3_XXS, DT_IQ3_S, DT_IQ1_S, DT_IQ1_M, DT_Q2, DT_Q2V,
                                   DT_Q5_0,    DT_Q5_1};
#define N_KQ_TYPES (int)(sizeof KQ_TYPES / sizeof *KQ_TYPES)

static uint64_t rng;
static float frand(void) { /* uniform [-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

/* y[n_tok][rows], NaN-poisoned, through kern_matmul (exact) or kern_matmul_act (int8), step tokens per call */
static float *mm(const kern_ops *ops, pool_t *pool, const tn_mat *m, const float *x, int n_tok, int step, int int8) {
    float *y = malloc((size_t)n_tok * (size_t)m->rows * sizeof(float));
    void *buf = malloc(kern_act_bytes(step, m->cols));
    for (size_t i = 0; i < (size_t)n_tok * (size_t)m->rows; i++) y[i] = NAN;
    for (int t = 0; t < n_tok; t += step) {
        int k = n_tok - t < step ? n_tok - t : step;
        const float *xt = x + (size_t)t * (size_t)m->cols;
        float *yt = y + (size_t)t * (size_t)m->rows;
        if (int8) {
            kern_act a;
            kern_act_init(&a, buf, xt, (size_t)m->cols, k, m->cols, 1);
            kern_matmul_act(ops, pool, m, &a, yt, (size_t)m->rows);
        } else kern_matmul(ops, pool, m, xt, (size_t)m->cols, yt, (size_t)m->rows, k);
    }
    free(buf);
    return y;
}

/* One matrix of dt, [rows][cols], against every table: see the file comment (a failure returns early; the caller
 * sees test_failed()). Exact kernels: |table - oracle| <= 1e-5 * sum|w x| (FMA rounding only). */
static void one_case(dt_type dt, int rows, int cols, int n_tok, pool_t *pool, unsigned seed, int *cases,
                     double *worst_exact, double *worst_i8) {
    const kern_ops *sc = kern_scalar_ops();
    const kern_ops *tabs[4] = {sc, kern_avx2_ops(), kern_avx512_ops(), kern_neon_ops()};
    size_t bytes = q_mat_bytes(dt, rows, cols, kq_blk(dt), DT_NONE);
    uint8_t *data = malloc(bytes);
    kq_random(dt, data, bytes / (size_t)kq_bytes(dt), &rng);
    tn_mat m;
    q_mat_bind(&m, data, dt, rows, cols, kq_blk(dt), DT_NONE, 0);
    float *x = malloc((size_t)n_tok * (size_t)cols * sizeof(float)), *wr = malloc((size_t)cols * sizeof(float));
    for (int i = 0; i < n_tok * cols; i++) x[i] = frand() * (i % 5 ? 1.0f : 3.0f);
    x[0] = 0.0f;
    float *ref = mm(sc, NULL, &m, x, n_tok, n_tok, 0), *ref8 = mm(sc, NULL, &m, x, n_tok, n_tok, 1);
    double *mags = malloc((size_t)n_tok * (size_t)rows * sizeof(double)); /* sum |w x| per output */
    /* the exact oracle against a plain double sum of the dequantised row; int8 within its rounding bound (q2: of the
     * rotated weights and activations it multiplies) */
    float *xr = malloc((size_t)cols * sizeof(float)), *wq = malloc((size_t)cols * sizeof(float));
    for (int t = 0; t < n_tok; t++)
        for (int r = 0; r < rows; r++) {
            q_row_to_f32(&m, r, wr);
            const float *xt = x + (size_t)t * (size_t)cols, *xb = xt, *wb = wr;
            if (kq_rotated(dt)) {
                q2_rotate(xt, cols, xr);
                kq_row_to_f32(dt, (const uint8_t *)data + (size_t)r * kq_row_bytes(dt, cols), cols, wq);
                xb = xr, wb = wq;
            }
            double s = 0, sw = 0, mag = 0, ax = 0;
            for (int c = 0; c < cols; c++) {
                double xv = xt[c];
                s += (double)wr[c] * xv;
                sw += fabs(wb[c]);
                mag += fabs(wr[c] * xv) + fabs(wb[c] * xb[c]);
                if (fabs(xb[c]) > ax) ax = fabs(xb[c]);
            }
            double e = fabs(ref[(size_t)t * (size_t)rows + (size_t)r] - s) / (mag + 1e-30);
            double e8 = fabs(ref8[(size_t)t * (size_t)rows + (size_t)r] - ref[(size_t)t * (size_t)rows + (size_t)r]),
                   bound = 0.5 / 127 * ax * sw * 1.01 + 1e-6;
            CHECKF(e <= 1e-4, "%s rows %d cols %d: exact oracle off the dequantised dot by %.3g (seed %u)", dt_name(dt),
                   rows, cols, e, seed);
            CHECKF(e8 <= bound, "%s rows %d cols %d: int8 off the exact result by %.3g > %.3g (seed %u)", dt_name(dt),
                   rows, cols, e8, bound, seed);
            mags[(size_t)t * (size_t)rows + (size_t)r] = mag;
            if (e > *worst_exact) *worst_exact = e;
            if (e8 / bound > *worst_i8) *worst_i8 = e8 / bound;
        }
    for (int ti = 0; ti < 4; ti++) {
        if (!tabs[ti]) continue;
        for (int int8 = 0; int8 < 2; int8++) {
            float *got = mm(tabs[ti], pool, &m, x, n_tok, n_tok, int8), *one = mm(tabs[ti], NULL, &m, x, n_tok, 1, int8);
            const float *want = int8 ? ref8 : ref;
            for (int i = 0; i < n_tok * rows; i++) {
                double e = fabs((double)got[i] - want[i]) / (mags[i] + 1e-30);
                /* int8: bitwise (integer sums, the same float order); exact: FMA rounding only (kernels.h) */
                CHECKF(int8 ? !memcmp(&got[i], &want[i], 4) : e <= 1e-5, "%s %s%s rows %d cols %d: out %d %.9g vs "
                       "oracle %.9g (seed %u)", tabs[ti]->name, dt_name(dt), int8 ? ".i8" : "", rows, cols, i, got[i],
                       want[i], seed);
                CHECKF(!memcmp(&got[i], &one[i], 4), "%s %s%s rows %d cols %d: batch != token by token (seed %u)",
                       tabs[ti]->name, dt_name(dt), int8 ? ".i8" : "", rows, cols, seed);
            }
            free(got);
            free(one);
            (*cases)++;
        }
    }
    free(ref);
    free(ref8);
    free(mags);
    free(xr);
    free(wq);
    free(x);
    free(wr);
    free(data);
}

TEST(kquant_kernels_match_oracle) {
    unsigned seed = test_seed();
    rng = 0x6b71756eull ^ ((uint64_t)seed << 20);
    pool_t *pool = pool_new(3);
    static const int rows_l[] = {1, 5, 13, 8}, nblk[] = {1, 2, 3, 9}, toks[] = {1, 3, 37, 70};
    int cases = 0;
    double we = 0, wi = 0;
    for (int k = 0; k < N_KQ_TYPES; k++)
        for (int i = 0; i < 4; i++) {
            const dt_type dt = KQ_TYPES[k];
            /* IQ4_NL, Q5_0, Q5_1, q2: rows of 32- / 128-wide blocks, also not a multiple of 256 (a short last chunk of
             * the tile driver, the SIMD kernels' tail) */
            const int cols = kq_blk(dt) == 32 ? 32 * (nblk[i] * 3 + 1) : kq_rotated(dt) ? 128 * (2 * nblk[i] - (i & 1)) : 256 * nblk[i];
            one_case(dt, rows_l[(i + k) % 4], cols, toks[(i + k) % 4], pool, seed, &cases, &we, &wi);
            if (test_failed()) break;
        }
    pool_free(pool);
    fprintf(stderr, "    %d table cases; exact oracle vs a double sum worst %.2g (bound 1e-4), int8 worst error / bound %.2f\n", cases,
            we, wi);
    CHECK(cases >= N_KQ_TYPES * 4 * 2 * 2);
}

/* The layout helpers agree with each other and with GGUF's block sizes (gguf-py constants.py). */
TEST(kquant_layout) {
    static const int want_bytes[] = {84, 110, 144, 176, 210, 18, 136, 66, 74, 82, 98, 110, 50, 56, 34, 34, 22, 24};
    static const uint32_t ggml[] = {10, 11, 12, 13, 14, 20, 23, 16, 17, 22, 18, 21, 19, 29, 0, 0, 6, 7}; /* q2, q2v: none */
    for (int k = 0; k < N_KQ_TYPES; k++) {
        dt_type dt = KQ_TYPES[k];
        CHECKF(kq_bytes(dt) == want_bytes[k], "%s: %d bytes a block", dt_name(dt), kq_bytes(dt));
        CHECK(kq_from_ggml(ggml[k]) == (ggml[k] ? dt : DT_NONE) && kq_to_ggml(dt) == ggml[k]);
        CHECK(q_is_quant(dt) && dt_from_name(dt_name(dt)) == dt);
        CHECK(q_mat_bytes(dt, 3, 512, kq_blk(dt), DT_NONE) == 3u * (512u / (unsigned)kq_blk(dt)) * (unsigned)kq_bytes(dt));
        CHECK(q_check(dt, 512, kq_blk(dt), DT_NONE, NULL) == SL_OK);
        CHECK(q_check(dt, kq_blk(dt) == 32 ? 48 : kq_rotated(dt) ? 320 : 384, kq_blk(dt), DT_NONE, NULL) != SL_OK);
    }
    CHECK(kq_blk(DT_Q4) == 0 && !kq_is(DT_MXFP4) && kq_from_ggml(2) == DT_NONE);
}

/* A GGUF Q8_0 / Q4_0 / Q5_0 (q8 or q4, biases -128 / -8 times the scale) or Q4_1 / Q5_1 (biases m) matrix as the import
 * holds it, [rows][cols], f16 scales: random codes (q5's 32 levels in q8 when five) and scales. */
static void *gguf_like(dt_type dt, int act, int five, int rows, int cols, tn_mat *m) {
    const size_t ng = (size_t)rows * (size_t)(cols / 32), codes = (size_t)rows * (size_t)cols / (dt == DT_Q8 ? 1 : 2);
    uint8_t *data = malloc(q_mat_bytes(dt, rows, cols, 32, DT_F16));
    for (size_t i = 0; i < codes; i++) {
        frand();
        unsigned r = (unsigned)(rng >> 33);
        data[i] = dt == DT_Q4 ? (uint8_t)r : five ? (uint8_t)(112 + r % 32) : (uint8_t)r;
    }
    uint16_t *sc = (uint16_t *)(data + codes), *bi = sc + ng;
    for (size_t g = 0; g < ng; g++) {
        float s = (0.5f + 0.5f * frand()) * 0.01f;
        sc[g] = f32_to_f16(s);
        bi[g] = act == TN_ACT_Q8_0 ? f32_to_f16((dt == DT_Q8 ? -128.0f : -8.0f) * f16_to_f32(sc[g]))
                                   : f32_to_f16(frand() * 0.05f);
    }
    q_mat_bind(m, data, dt, rows, cols, 32, DT_F16, 0);
    m->bias_implied = q_biases_implied(m);
    m->act = act;
    return data;
}

/* One token's form as llama.cpp's x86 build makes it (ggml-cpu arch/x86/quants.c quantize_row_q8_0 / _q8_1, written
 * out again here): per 32, id = 127 / max|x|, q = round-half-even(x id), d = f16(max / 127), s = f16(max / 127 *
 * sum q). */
static void llama_q8_1(const float *x, int cols, int8_t *q, float *d, float *s) {
    for (int b = 0; b < cols / 32; b++) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fabsf(x[32 * b + i]) > amax ? fabsf(x[32 * b + i]) : amax;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int i = 0; i < 32; i++) sum += q[32 * b + i] = (int8_t)nearbyintf(x[32 * b + i] * id);
        d[b] = f16_to_f32(f32_to_f16(amax / 127.0f));
        s[b] = f16_to_f32(f32_to_f16(amax / 127.0f * (float)sum));
    }
}

/* q8 / q4 matrices of GGUF Q8_0 .. Q5_1 (tn_mat.act): their int8 path reads llama.cpp's q8_0 / q8_1 activations
 * (kern_act q0, d0, q04, s0 / s1: checked against llama_q8_1 above), every table bitwise the oracle, batch and
 * token by token and inside kern_matmul_multi beside a house-form matrix on the same act; the oracle within float
 * rounding of llama.cpp's block dot (ggml-cpu vec_dot_q4_0_q8_0 ..: d_w d_x sum((c - z) q) [+ m s] per block). */
TEST(kquant_gguf_q8_q4_take_llama_activations) {
    unsigned seed = test_seed();
    rng = 0x71386f31ull ^ ((uint64_t)seed << 20);
    const kern_ops *sc = kern_scalar_ops();
    const kern_ops *tabs[4] = {sc, kern_avx2_ops(), kern_avx512_ops(), kern_neon_ops()};
    pool_t *pool = pool_new(3);
    static const int cols_l[] = {32, 96, 256, 2176}, toks[] = {1, 3, 37, 70};
    int cases = 0;
    double worst = 0;
    for (int k = 0; k < 16 && !test_failed(); k++) {
        const dt_type dt = k & 1 ? DT_Q4 : DT_Q8;
        const int act = k & 2 ? TN_ACT_Q8_1 : TN_ACT_Q8_0, five = dt == DT_Q8 && (k & 4), cols = cols_l[k / 4];
        const int rows = 1 + (k * 5) % 13, n_tok = toks[(k + k / 4) % 4];
        tn_mat m, h;
        void *data = gguf_like(dt, act, five, rows, cols, &m);
        h = m;
        h.act = TN_ACT_HOUSE;
        float *x = malloc((size_t)n_tok * (size_t)cols * sizeof(float));
        for (int i = 0; i < n_tok * cols; i++) x[i] = frand() * (i % 5 ? 1.0f : 3.0f);
        x[0] = 0.0f;
        for (int i = 0; i < 32 && cols >= 64; i++) x[32 + i] = 0.0f; /* a block of zeros: d = 0 */
        float *ref = mm(sc, NULL, &m, x, n_tok, n_tok, 1);
        /* the activations kern_matmul_act made against llama.cpp's, and the oracle against its block dot */
        void *buf = malloc(kern_act_bytes(n_tok, cols));
        int8_t *lq = malloc((size_t)cols);
        float *ld = malloc((size_t)cols / 32 * sizeof(float)), *ls = malloc((size_t)cols / 32 * sizeof(float));
        float *y = malloc((size_t)n_tok * (size_t)rows * sizeof(float)), *yh = malloc((size_t)n_tok * (size_t)rows * sizeof(float));
        kern_act a;
        kern_act_init(&a, buf, x, (size_t)cols, n_tok, cols, 1);
        kern_mm two[2] = {{&m, &a, y, (size_t)rows}, {&h, &a, yh, (size_t)rows}};
        CHECK(kern_matmul_multi(sc, pool, two, 2) == 0 && a.ready && a.ready_0);
        const int nb = cols / 32, ns = nb + nb / 2 + nb / 4;
        for (int t = 0; t < n_tok && !test_failed(); t++) {
            llama_q8_1(x + (size_t)t * cols, cols, lq, ld, ls);
            CHECKF(!memcmp(lq, a.q0 + (size_t)t * cols, (size_t)cols) && !memcmp(ld, a.d0 + (size_t)t * nb, (size_t)nb * 4) &&
                   !memcmp(ls, a.s1 + (size_t)t * ns, (size_t)nb * 4), "cols %d token %d: not llama.cpp's q8_1 (seed %u)",
                   cols, t, seed);
            for (int b = 0; b < nb; b++) {
                int sum = 0;
                for (int i = 0; i < 32; i++) sum += lq[32 * b + i];
                CHECK(!memcmp(&a.s0[(size_t)t * ns + b], &(float){ld[b] * (float)sum}, 4));
            }
            for (int r = 0; r < rows; r++) {
                /* want: llama.cpp's sum over blocks in double; mag: the size of the house kernel's terms per block
                 * (sum |code q|, which bounds its lanes' partial sums, and bias times the sum), against which its float
                 * rounding is measured */
                double want = 0, mag = 0;
                for (int b = 0; b < nb; b++) {
                    const float dw = f16_to_f32(((const uint16_t *)m.scales)[(size_t)r * nb + b]);
                    const float mw = f16_to_f32(((const uint16_t *)m.biases)[(size_t)r * nb + b]);
                    const int z = act == TN_ACT_Q8_1 ? 0 : dt == DT_Q8 ? 128 : 8;
                    long I = 0, Ic = 0, S = 0;
                    for (int i = 0; i < 32; i++) {
                        const int c = 32 * b + i;
                        const int code = dt == DT_Q8 ? ((const uint8_t *)m.data)[(size_t)r * cols + c]
                                                     : (((const uint8_t *)m.data)[((size_t)r * cols + c) / 2] >> (c & 1) * 4) & 15;
                        I += (long)(code - z) * lq[c];
                        Ic += labs((long)code * lq[c]);
                        S += lq[c];
                    }
                    want += (double)dw * ld[b] * (double)I + (act == TN_ACT_Q8_1 ? (double)mw * ls[b] : 0.0);
                    mag += fabs((double)dw * ld[b] * (double)Ic) +
                           fabs((double)mw * (act == TN_ACT_Q8_1 ? ls[b] : (double)ld[b] * (double)S));
                }
                const double e = fabs(ref[(size_t)t * rows + r] - want) / (mag + 1e-30);
                CHECKF(e <= 1e-5, "%s act %d cols %d: oracle off llama.cpp's block dot by %.3g (seed %u)", dt_name(dt), act,
                       cols, e, seed);
                if (e > worst) worst = e;
            }
        }
        CHECKF(!memcmp(y, ref, (size_t)n_tok * (size_t)rows * 4), "%s act %d: kern_matmul_multi != kern_matmul_act", dt_name(dt), act);
        float *href = mm(sc, NULL, &h, x, n_tok, n_tok, 1);
        CHECKF(!memcmp(yh, href, (size_t)n_tok * (size_t)rows * 4), "%s: the house-form matrix beside it changed", dt_name(dt));
        for (int ti = 0; ti < 4; ti++) {
            if (!tabs[ti]) continue;
            float *got = mm(tabs[ti], pool, &m, x, n_tok, n_tok, 1), *one = mm(tabs[ti], NULL, &m, x, n_tok, 1, 1);
            for (int i = 0; i < n_tok * rows; i++)
                CHECKF(!memcmp(&got[i], &ref[i], 4) && !memcmp(&one[i], &ref[i], 4), "%s %s act %d cols %d: out %d %.9g / "
                       "%.9g vs oracle %.9g (seed %u)", tabs[ti]->name, dt_name(dt), act, cols, i, got[i], one[i], ref[i], seed);
            free(got);
            free(one);
            cases++;
        }
        free(href); free(ref); free(buf); free(lq); free(ld); free(ls); free(y); free(yh); free(x); free(data);
    }
    pool_free(pool);
    fprintf(stderr, "    %d table cases bitwise the oracle; oracle vs llama.cpp's block dot worst %.2g (bound 1e-5)\n", cases,
            worst);
    CHECK(cases >= 32);
}

/* Q5_0 / Q5_1 kept native: the oracle within float rounding of llama.cpp's block dot on its q8_0 / q8_1 activations
 * (ggml-cpu arch/x86/quants.c ggml_vec_dot_q5_0_q8_0: d_w d_x sum((q - 16) x); _q5_1_q8_1: d_w d_x sum(q x) + m s),
 * the codes decoded here from the bytes (d, [m,] qh, qs: llama.cpp ggml-common.h block_q5_0 / block_q5_1). */
TEST(kquant_q5_native_llama_block_dot) {
    unsigned seed = test_seed();
    rng = 0x71356e31ull ^ ((uint64_t)seed << 20);
    const kern_ops *sc = kern_scalar_ops();
    double worst = 0;
    for (int k = 0; k < 8 && !test_failed(); k++) {
        const dt_type dt = k & 1 ? DT_Q5_1 : DT_Q5_0;
        const int q51 = dt == DT_Q5_1, cols = 32 * (1 + 3 * (k / 2)), rows = 3 + k, n_tok = 1 + k % 3, nb = cols / 32;
        const size_t rb = kq_row_bytes(dt, cols);
        uint8_t *data = malloc(rb * (size_t)rows);
        kq_random(dt, data, (size_t)rows * (size_t)nb, &rng);
        tn_mat m;
        q_mat_bind(&m, data, dt, rows, cols, 32, DT_NONE, 0);
        float *x = malloc((size_t)n_tok * (size_t)cols * sizeof(float)), *ld = malloc((size_t)nb * 4), *ls = malloc((size_t)nb * 4);
        int8_t *lq = malloc((size_t)cols);
        for (int i = 0; i < n_tok * cols; i++) x[i] = frand() * (i % 5 ? 1.0f : 3.0f);
        for (int i = 0; i < 32 && cols >= 64; i++) x[32 + i] = 0.0f; /* a block of zeros: d = 0, s = 0 */
        float *ref = mm(sc, NULL, &m, x, n_tok, n_tok, 1);
        for (int t = 0; t < n_tok; t++) {
            llama_q8_1(x + (size_t)t * cols, cols, lq, ld, ls);
            for (int r = 0; r < rows; r++) {
                double want = 0, mag = 0;
                for (int b = 0; b < nb; b++) {
                    const uint8_t *blk = data + (size_t)r * rb + (size_t)b * (size_t)kq_bytes(dt), *qs = blk + (q51 ? 8 : 6);
                    const uint32_t qh = (uint32_t)blk[q51 ? 4 : 2] | (uint32_t)blk[q51 ? 5 : 3] << 8 |
                                        (uint32_t)blk[q51 ? 6 : 4] << 16 | (uint32_t)blk[q51 ? 7 : 5] << 24;
                    const float dw = f16_to_f32((uint16_t)(blk[0] | blk[1] << 8)), mw = q51 ? f16_to_f32((uint16_t)(blk[2] | blk[3] << 8)) : 0;
                    long I = 0, Ia = 0;
                    for (int i = 0; i < 32; i++) {
                        const int q = ((i < 16 ? qs[i] : qs[i - 16] >> 4) & 15) | (int)((qh >> i) & 1) << 4, v = q51 ? q : q - 16;
                        I += (long)v * lq[32 * b + i];
                        Ia += labs((long)v * lq[32 * b + i]);
                    }
                    want += (double)dw * ld[b] * (double)I + (double)mw * ls[b];
                    mag += fabs((double)dw * ld[b] * (double)Ia) + fabs((double)mw * ls[b]);
                }
                const double e = fabs(ref[(size_t)t * rows + r] - want) / (mag + 1e-30);
                CHECKF(e <= 1e-5, "%s cols %d: oracle off llama.cpp's block dot by %.3g (seed %u)", dt_name(dt), cols, e, seed);
                if (e > worst) worst = e;
            }
        }
        free(ref); free(x); free(ld); free(ls); free(lq); free(data);
    }
    fprintf(stderr, "    oracle vs llama.cpp's block dot worst %.2g (bound 1e-5)\n", worst);
}

/* The int8 flags of a (ready, ready_k, ready_0, ready_r) as bits 0 .. 3. */
static int act_flags(const kern_act *a) {
    return (a->ready != 0) | (a->ready_k != 0) << 1 | (a->ready_0 != 0) << 2 | (a->ready_r != 0) << 3;
}

/* One int8 form per matrix, whoever fills it (kernels_scalar.c act_form): kern_matmul_act's own preparation,
 * kern_act_prepare_for's, and kern_act_prepare_rows_for's in pieces then kern_act_ready_for mark the form kernels.h
 * names for the type (q2's rotated one, q8_K for kq_act_k, q8_0 for IQ4_NL / Q5_0 / Q5_1 and a GGUF Q8_0 .. Q5_1 tensor's
 * q8 / q4, else the house form), and fill it: over storage poisoned first (codes -1, NaN scales) the product is bitwise
 * the freshly prepared one. Where the exact kernels run (an f32 matrix, an act without int8) none of them writes. */
TEST(kquant_one_act_form_per_matrix) {
    unsigned seed = test_seed();
    rng = 0x666f726dull ^ ((uint64_t)seed << 20);
    pool_t *pool = pool_new(3);
    enum { T = 5, ROWS = 7, COLS = 512, N_EXTRA = 7 };
    const size_t ab = kern_act_bytes(T, COLS), yb = (size_t)T * ROWS * sizeof(float);
    void *b0 = malloc(ab), *b1 = malloc(ab), *b2 = malloc(ab), *poison = malloc(ab);
    float *x = malloc((size_t)T * COLS * sizeof(float)), *y0 = malloc(yb), *y1 = malloc(yb), *y2 = malloc(yb);
    memset(poison, 0xff, ab);
    for (int i = 0; i < T * COLS; i++) x[i] = frand() * (i % 7 ? 1.0f : 4.0f);
    int cases = 0;
    /* every GGUF block type, then q8 / q4 in the house form and a GGUF tensor's (q8_0, q8_1), then f32 */
    for (int k = 0; k < N_KQ_TYPES + N_EXTRA && !test_failed(); k++) {
        tn_mat m;
        void *data;
        dt_type dt;
        int act = TN_ACT_HOUSE;
        if (k < N_KQ_TYPES) {
            dt = KQ_TYPES[k];
            const size_t bytes = q_mat_bytes(dt, ROWS, COLS, kq_blk(dt), DT_NONE);
            data = malloc(bytes);
            kq_random(dt, data, bytes / (size_t)kq_bytes(dt), &rng);
            q_mat_bind(&m, data, dt, ROWS, COLS, kq_blk(dt), DT_NONE, 0);
        } else if (k < N_KQ_TYPES + N_EXTRA - 1) {
            const int j = k - N_KQ_TYPES; /* 0 .. 5 */
            dt = j & 1 ? DT_Q4 : DT_Q8;
            act = j / 2 == 0 ? TN_ACT_HOUSE : j / 2 == 1 ? TN_ACT_Q8_0 : TN_ACT_Q8_1;
            data = gguf_like(dt, act, 0, ROWS, COLS, &m);
        } else {
            dt = DT_F32;
            data = malloc((size_t)ROWS * COLS * sizeof(float));
            for (int i = 0; i < ROWS * COLS; i++) ((float *)data)[i] = frand();
            memset(&m, 0, sizeof m);
            m.data = data, m.dtype = DT_F32, m.rows = ROWS, m.cols = COLS;
        }
        const int want = dt == DT_F32 ? 0
                         : kq_rotated(dt) ? 8
                         : kq_act_k(dt)   ? 2
                         : kq_is(dt) || act != TN_ACT_HOUSE ? 4
                                                           : 1;
        kern_act a0, a1, a2;
        memcpy(b0, poison, ab), memcpy(b1, poison, ab), memcpy(b2, poison, ab);
        memset(y0, 0xff, yb), memset(y1, 0xff, yb), memset(y2, 0xff, yb);
        kern_act_init(&a0, b0, x, COLS, T, COLS, 1);
        kern_act_init(&a1, b1, x, COLS, T, COLS, 1);
        kern_act_init(&a2, b2, x, COLS, T, COLS, 1);
        CHECK(kern_matmul_act(kern_scalar_ops(), NULL, &m, &a0, y0, ROWS) == 0);
        kern_act_prepare_for(&a1, &m, pool);
        kern_act_prepare_rows_for(&a2, &m, 0, 2);
        kern_act_prepare_rows_for(&a2, &m, 2, T);
        CHECKF(act_flags(&a2) == 0, "%s act %d: rows_for set a flag", dt_name(dt), act);
        kern_act_ready_for(&a2, &m);
        CHECKF(act_flags(&a0) == want && act_flags(&a1) == want && act_flags(&a2) == want,
               "%s act %d: forms %d (matmul) %d (prepare_for) %d (rows_for + ready_for), want %d", dt_name(dt), act,
               act_flags(&a0), act_flags(&a1), act_flags(&a2), want);
        int finite = 1;
        for (int i = 0; i < T * ROWS; i++) finite &= isfinite(y0[i]) != 0;
        CHECKF(finite, "%s act %d: a product not finite", dt_name(dt), act);
        CHECK(kern_matmul_act(kern_scalar_ops(), NULL, &m, &a1, y1, ROWS) == 0);
        CHECK(kern_matmul_act(kern_scalar_ops(), NULL, &m, &a2, y2, ROWS) == 0);
        CHECKF(!memcmp(y1, y0, yb) && !memcmp(y2, y0, yb), "%s act %d: the form filled is not the form read (seed %u)",
               dt_name(dt), act, seed);
        if (!want) CHECKF(!memcmp(b1, poison, ab) && !memcmp(b2, poison, ab), "%s: exact kernels, an int8 form written",
                          dt_name(dt));
        if (dt == DT_Q4) { /* an act without int8 over an int8 matrix: the exact kernels, nothing written */
            kern_act_init(&a1, b1, x, COLS, T, COLS, 0);
            memcpy(b1, poison, ab);
            kern_act_prepare_for(&a1, &m, pool);
            kern_act_prepare_rows_for(&a1, &m, 0, T);
            kern_act_ready_for(&a1, &m);
            CHECKF(act_flags(&a1) == 0 && !memcmp(b1, poison, ab), "q4 act %d: int8 off, a form written", act);
        }
        free(data);
        cases++;
    }
    free(b0), free(b1), free(b2), free(poison), free(x), free(y0), free(y1), free(y2);
    pool_free(pool);
    CHECK(cases == N_KQ_TYPES + N_EXTRA);
}
