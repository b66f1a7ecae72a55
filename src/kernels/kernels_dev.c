/*
 * kernels_dev.c — a SwiGLU expert in the CUDA backend's arithmetic, on the host's threads (issue 25, the hybrid
 * step: an expert that lies in RAM is computed where it lies and gives the bits the GPU gives; docs/CUDA.md
 * "The hybrid step"). The order is src/backend/cuda/cuda.h's canonical one, not the CPU tables' 16 lanes:
 *   per output, per block b of 32 columns in order: I_b = sum code * xq (exact int32),
 *     acc = fma((float)I_b, scale(group of b) * d_b, acc);
 *   per group j in order: accb = fma(bias_j, s<group>_j, accb);  y = acc + accb;
 * the SwiGLU as the device's, silu(g) * u with canon_exp.h's e^x; the mid rows quantized by kern_act (bitwise
 * the device's slcu_act_quantize, cuda.h). The integer sums are exact and the float operations are single
 * rounded ones (the Makefile's -ffp-contract=off), so the result is the device's bit for bit
 * (tests/cuda/test_cuda.c checks it there; tests/test_kernels_dev.c checks it here against the order written
 * out plainly).
 */
#include <string.h>

#include "kernels/canon_exp.h"
#include "kernels/kernels.h"
#include "quant/quant.h"
#include "sluice.h"

/* The exact integer dot of one block: 32 q8 codes (unsigned) with 32 int8 activations. */
static inline int32_t blk_q8(const uint8_t *w, const int8_t *x) {
    int32_t I = 0;
    for (int i = 0; i < 32; i++) I += (int32_t)w[i] * (int32_t)x[i];
    return I;
}

/* The same for 16 bytes of q4 codes: column 2i in the low nibble of byte i, 2i + 1 in the high one. */
static inline int32_t blk_q4(const uint8_t *w, const int8_t *x) {
    int32_t I = 0;
    for (int i = 0; i < 16; i++) I += (int32_t)(w[i] & 15) * (int32_t)x[2 * i] + (int32_t)(w[i] >> 4) * (int32_t)x[2 * i + 1];
    return I;
}

#define DEV_R 4 /* rows folded together: independent fma chains */

/* Rows r0 .. r1 of w times token t of a (ready) into y[r]: cuda.h's order, DEV_R rows at a time. */
static void dev_rows(const tn_mat *w, const kern_act *a, int t, float *y, int r0, int r1) {
    const int cols = w->cols, g = w->group, ng = cols / g, nb = cols / 32, ns = nb + nb / 2 + nb / 4, gb = g / 32;
    const int q4 = w->dtype == DT_Q4;
    const size_t rb = q4 ? (size_t)cols / 2 : (size_t)cols, bb = q4 ? 16 : 32;
    const int8_t *xq = a->q + (size_t)t * (size_t)cols;
    const float *d = a->d + (size_t)t * (size_t)nb;
    const float *xs = a->s + (size_t)t * (size_t)ns + (g == 32 ? 0 : g == 64 ? nb : nb + nb / 2);
    for (int r = r0; r < r1; r += DEV_R) {
        const int nr = r1 - r < DEV_R ? r1 - r : DEV_R;
        float acc[DEV_R] = {0}, accb[DEV_R] = {0};
        for (int b = 0; b < nb; b++)
            for (int i = 0; i < nr; i++) {
                const uint8_t *code = (const uint8_t *)w->data + (size_t)(r + i) * rb + (size_t)b * bb;
                const int32_t I = q4 ? blk_q4(code, xq + (size_t)b * 32) : blk_q8(code, xq + (size_t)b * 32);
                const float sw = q_scale_at(w->scales, w->sdtype, (size_t)(r + i) * (size_t)ng + (size_t)(b / gb));
                acc[i] = fmaf((float)I, sw * d[b], acc[i]);
            }
        for (int j = 0; j < ng; j++)
            for (int i = 0; i < nr; i++)
                accb[i] = fmaf(q_scale_at(w->biases, w->sdtype, (size_t)(r + i) * (size_t)ng + (size_t)j), xs[j], accb[i]);
        for (int i = 0; i < nr; i++) y[r + i] = acc[i] + accb[i];
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DEV_AVX2 1
#define AVX2_FN __attribute__((target("avx2,fma")))

/* The eight int32 lanes of v[i] summed, for each i < 8: lane i of the result (exact integer sums). */
AVX2_FN static inline __m256i sum8x8(const __m256i *v) {
    const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/* Eight rows r .. r+7 of w (q8/q4) times token t: dev_rows' operations with the rows in the lanes (each lane
 * its own row's chain, in block order). x4: the token's codes per block as 16 even then 16 odd columns (q4). */
AVX2_FN static void dev_rows8(const tn_mat *w, const kern_act *a, int t, const int8_t *x4, float *y, int r) {
    const int cols = w->cols, g = w->group, ng = cols / g, nb = cols / 32, ns = nb + nb / 2 + nb / 4, gb = g / 32;
    const int q4 = w->dtype == DT_Q4;
    const size_t rb = q4 ? (size_t)cols / 2 : (size_t)cols, bb = q4 ? 16 : 32;
    const int8_t *xq = a->q + (size_t)t * (size_t)cols;
    const float *d = a->d + (size_t)t * (size_t)nb;
    const float *xs = a->s + (size_t)t * (size_t)ns + (g == 32 ? 0 : g == 64 ? nb : nb + nb / 2);
    const uint8_t *base = (const uint8_t *)w->data + (size_t)r * rb;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m128i lo4 = _mm_set1_epi8(15);
    __m256 acc = _mm256_setzero_ps(), accb = _mm256_setzero_ps(), sw = acc;
    float sc[8];
    for (int b = 0; b < nb; b++) {
        if (b % gb == 0) {
            for (int i = 0; i < 8; i++) sc[i] = q_scale_at(w->scales, w->sdtype, (size_t)(r + i) * (size_t)ng + (size_t)(b / gb));
            sw = _mm256_loadu_ps(sc);
        }
        __m256i p[8];
        if (q4) {
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(x4 + (size_t)b * 32));
            for (int i = 0; i < 8; i++) {
                const __m128i c = _mm_loadu_si128((const __m128i *)(base + (size_t)i * rb + (size_t)b * bb));
                const __m256i cw = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(c, 4), lo4), _mm_and_si128(c, lo4));
                p[i] = _mm256_madd_epi16(_mm256_maddubs_epi16(cw, xv), ones);
            }
        } else {
            const __m256i x0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(xq + (size_t)b * 32)));
            const __m256i x1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(xq + (size_t)b * 32 + 16)));
            for (int i = 0; i < 8; i++) {
                const uint8_t *c = base + (size_t)i * rb + (size_t)b * bb;
                const __m256i c0 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)c));
                const __m256i c1 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(c + 16)));
                p[i] = _mm256_add_epi32(_mm256_madd_epi16(c0, x0), _mm256_madd_epi16(c1, x1));
            }
        }
        const __m256 I = _mm256_cvtepi32_ps(sum8x8(p)); /* |I| < 2^24: exact */
        acc = _mm256_fmadd_ps(I, _mm256_mul_ps(sw, _mm256_set1_ps(d[b])), acc);
    }
    for (int j = 0; j < ng; j++) {
        for (int i = 0; i < 8; i++) sc[i] = q_scale_at(w->biases, w->sdtype, (size_t)(r + i) * (size_t)ng + (size_t)j);
        accb = _mm256_fmadd_ps(_mm256_loadu_ps(sc), _mm256_set1_ps(xs[j]), accb);
    }
    _mm256_storeu_ps(y + r, _mm256_add_ps(acc, accb));
}

static int dev_avx2(void) {
    static int have = -1;
    if (have < 0) have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return have;
}
#endif

#define DEV_X4_MAX 8192 /* columns of the q4 staging on the stack; wider rows take dev_rows */

/* Rows r0 .. r1 of w times every token of a into y (row stride ldy), eight rows at a time where AVX2 is. */
static void dev_mm(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
#ifdef DEV_AVX2
    if (dev_avx2() && w->cols <= DEV_X4_MAX && r1 - r0 >= 8) {
        int8_t x4[DEV_X4_MAX];
        for (int t = 0; t < a->n_tok; t++) {
            const int8_t *xq = a->q + (size_t)t * (size_t)w->cols;
            for (int b = 0; w->dtype == DT_Q4 && b < w->cols / 32; b++)
                for (int i = 0; i < 16; i++) {
                    x4[32 * b + i] = xq[32 * b + 2 * i];
                    x4[32 * b + 16 + i] = xq[32 * b + 2 * i + 1];
                }
            int r = r0;
            for (; r + 8 <= r1; r += 8) dev_rows8(w, a, t, x4, y + (size_t)t * ldy, r);
            if (r < r1) dev_rows(w, a, t, y + (size_t)t * ldy, r, r1);
        }
        return;
    }
#endif
    for (int t = 0; t < a->n_tok; t++) dev_rows(w, a, t, y + (size_t)t * ldy, r0, r1);
}

void kern_matmul_i8_dev(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    dev_mm(w, a, y, ldy, r0, r1);
}

void kern_swiglu_dev(const float *g, const float *u, float *y, int n) {
    for (int i = 0; i < n; i++) y[i] = canon_silu(g[i]) * u[i];
}

/* A matrix the device order covers: q8/q4 with biases, groups of 32 / 64 / 128, whole blocks. */
static int dev_mat_ok(const tn_mat *m) {
    return m->data && (m->dtype == DT_Q8 || m->dtype == DT_Q4) && m->scales && m->biases && m->cols > 0 &&
           m->cols % 32 == 0 && (m->group == 32 || m->group == 64 || m->group == 128) && m->cols % m->group == 0;
}

int kern_ffn_dev_ok(const tn_expert *ex, int inter) {
    return dev_mat_ok(&ex->gate) && dev_mat_ok(&ex->up) && dev_mat_ok(&ex->down) && inter % 32 == 0 &&
           ex->gate.rows == inter && ex->up.rows == inter && ex->down.cols == inter;
}

typedef struct {
    const tn_mat *m[2];
    const kern_act *a;
    float *y[2];
    size_t ldy[2];
    int rows; /* of m[0]; items past it are m[1]'s */
} dev_job;

#define DEV_GRAIN 32 /* rows an item: a few blocks of weights, many items for the threads */

static void dev_part(void *ctx, size_t begin, size_t end) {
    const dev_job *j = ctx;
    for (size_t it = begin; it < end; it++) {
        int r = (int)it * DEV_GRAIN, which = r >= j->rows;
        if (which) r -= j->rows;
        const tn_mat *m = j->m[which];
        const int r1 = r + DEV_GRAIN < m->rows ? r + DEV_GRAIN : m->rows;
        dev_mm(m, j->a, j->y[which], j->ldy[which], r, r1);
    }
}

/* Items of DEV_GRAIN rows over m0 (and m1 after it, NULL: none) on pool. */
static void dev_matmul2(pool_t *pool, const tn_mat *m0, const tn_mat *m1, const kern_act *a, float *y0, float *y1,
                        size_t ldy) {
    const size_t n0 = ((size_t)m0->rows + DEV_GRAIN - 1) / DEV_GRAIN, n1 = m1 ? ((size_t)m1->rows + DEV_GRAIN - 1) / DEV_GRAIN : 0;
    /* m0's last item may be short: the split index is in whole items */
    dev_job j = {{m0, m1}, a, {y0, y1}, {ldy, ldy}, (int)n0 * DEV_GRAIN};
    /* dynamic: the caller and the awake threads take the items while the others wake (a host expert of the hybrid
     * step comes after the GPU's work, when the workers sleep; a static split waited for the last to wake) */
    if (pool) pool_for_any(pool, n0 + n1, 1, dev_part, &j);
    else dev_part(&j, 0, n0 + n1);
}

int kern_ffn_dev(pool_t *pool, const tn_expert *ex, kern_act *x, int inter, float *g, float *u, void *mid_buf,
                 float *y, size_t ldy) {
    if (!kern_ffn_dev_ok(ex, inter) || !x->int8 || x->cols != ex->gate.cols) return SL_EUNSUPPORTED;
    kern_act_prepare(x);
    if (!x->int8) return SL_EUNSUPPORTED;
    const int n = x->n_tok;
    dev_matmul2(pool, &ex->gate, &ex->up, x, g, u, (size_t)inter);
    for (int t = 0; t < n; t++)
        kern_swiglu_dev(g + (size_t)t * inter, u + (size_t)t * inter, g + (size_t)t * inter, inter);
    kern_act m;
    kern_act_init(&m, mid_buf, g, (size_t)inter, n, inter, 1);
    kern_act_prepare(&m);
    dev_matmul2(pool, &ex->down, NULL, &m, y, NULL, ldy);
    return SL_OK;
}
