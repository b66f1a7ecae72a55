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
 * (tests/cuda/test_cuda_hybrid.c checks it there; tests/test_hybrid.c checks it here against the order written
 * out plainly).
 * Speed: the order fixes one sequential fma chain per output row, so the SIMD paths put rows in the lanes (AVX-512
 * VNNI: 16 rows a zmm, AVX2: 8 a ymm), each lane its own row's chain; the exact int32 block dots come from
 * vpdpbusd (maddubs/madd) over each row's codes as they lie, and the rows' partial sums are reduced together,
 * transposed, so no row is reduced alone. On one core they run at about the CPU tables' own speed (docs/CUDA.md
 * "The hybrid step").
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

#define DEV_NG_MAX 256 /* groups a row of the AVX2 path's tables on the stack; more take dev_rows */

/* bf16 rows8_table for an even ng: each row's values as dwords (groups 2c, 2c + 1), 16 groups a chunk, an 8 x 8
 * dword transpose, then each dword's two values converted (bf16 -> f32: a shift or a mask, exact). */
AVX2_FN static void rows8_table_bf16(const uint16_t *p, int r, int ng, float (*t)[8]) {
    const __m256i mh = _mm256_set1_epi32((int)0xFFFF0000u);
    for (int j0 = 0; j0 < ng; j0 += 16) {
        const int nd = (ng - j0 < 16 ? ng - j0 : 16) / 2; /* dwords of the chunk */
        const __m256i km = _mm256_cmpgt_epi32(_mm256_set1_epi32(nd), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256i v[8], u[8];
        for (int i = 0; i < 8; i++) v[i] = _mm256_maskload_epi32((const int *)(p + (size_t)(r + i) * (size_t)ng + j0), km);
        for (int h = 0; h < 8; h += 4) { /* u[h + k], lane L: dword 4L + k of rows h .. h + 3 */
            const __m256i t0 = _mm256_unpacklo_epi32(v[h], v[h + 1]), t1 = _mm256_unpackhi_epi32(v[h], v[h + 1]);
            const __m256i t2 = _mm256_unpacklo_epi32(v[h + 2], v[h + 3]), t3 = _mm256_unpackhi_epi32(v[h + 2], v[h + 3]);
            u[h] = _mm256_unpacklo_epi64(t0, t2), u[h + 1] = _mm256_unpackhi_epi64(t0, t2);
            u[h + 2] = _mm256_unpacklo_epi64(t1, t3), u[h + 3] = _mm256_unpackhi_epi64(t1, t3);
        }
        for (int c = 0; c < nd; c++) { /* dword c: rows 0-3 from u[c & 3], 4-7 from u[4 + (c & 3)], lane c / 4 */
            const __m256i w = c < 4 ? _mm256_permute2x128_si256(u[c & 3], u[4 + (c & 3)], 0x20)
                                    : _mm256_permute2x128_si256(u[c & 3], u[4 + (c & 3)], 0x31);
            _mm256_storeu_ps(t[j0 + 2 * c], _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
            _mm256_storeu_ps(t[j0 + 2 * c + 1], _mm256_castsi256_ps(_mm256_and_si256(w, mh)));
        }
    }
}

/* Eight rows' scales (or biases) as f32, group-major: t[j][i] = row r + i's value of group j (q_scale_at's values:
 * bf16 and f32 converted eight at a time, f16 one by one), each row's converted in order, then 8 x 8 transposes:
 * the chain below loads whole vectors of values stored long before. */
AVX2_FN static void rows8_table(const void *p, dt_type sdt, int r, int ng, float (*t)[8]) {
    if (sdt == DT_BF16 && !(ng & 1)) {
        rows8_table_bf16(p, r, ng, t);
        return;
    }
    float rt[8][DEV_NG_MAX];
    for (int i = 0; i < 8; i++) {
        const size_t o = (size_t)(r + i) * (size_t)ng;
        int j = 0;
        for (; sdt != DT_F16 && j + 8 <= ng; j += 8) {
            const __m256 v = sdt == DT_F32 ? _mm256_loadu_ps((const float *)p + o + j)
                                           : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(
                                                 _mm_loadu_si128((const __m128i *)((const uint16_t *)p + o + j))), 16));
            _mm256_storeu_ps(rt[i] + j, v);
        }
        for (; j < ng; j++) rt[i][j] = q_scale_at(p, sdt, o + (size_t)j);
    }
    int j0 = 0;
    for (; j0 + 8 <= ng; j0 += 8) {
        __m256 x[8], u[8];
        for (int i = 0; i < 8; i++) x[i] = _mm256_loadu_ps(rt[i] + j0);
        for (int i = 0; i < 8; i += 2) u[i] = _mm256_unpacklo_ps(x[i], x[i + 1]), u[i + 1] = _mm256_unpackhi_ps(x[i], x[i + 1]);
        for (int h = 0; h < 8; h += 4) { /* h 0: rows 0-3, 4: rows 4-7; x[h + c]: columns c | c + 4 */
            x[h] = _mm256_shuffle_ps(u[h], u[h + 2], 0x44), x[h + 1] = _mm256_shuffle_ps(u[h], u[h + 2], 0xEE);
            x[h + 2] = _mm256_shuffle_ps(u[h + 1], u[h + 3], 0x44), x[h + 3] = _mm256_shuffle_ps(u[h + 1], u[h + 3], 0xEE);
        }
        for (int c = 0; c < 4; c++) {
            _mm256_storeu_ps(t[j0 + c], _mm256_permute2f128_ps(x[c], x[4 + c], 0x20));
            _mm256_storeu_ps(t[j0 + 4 + c], _mm256_permute2f128_ps(x[c], x[4 + c], 0x31));
        }
    }
    for (; j0 < ng; j0++)
        for (int i = 0; i < 8; i++) t[j0][i] = rt[i][j0];
}

/* The AVX2 path: dev_rows16's scheme on 8 rows a ymm (lane i row r + i's own chain in block order), two blocks a
 * step: each row's int32 partial sums by maddubs/madd over its codes as they lie, the 8 rows' vectors reduced
 * together by pair sums (comb8), then 128-bit halves exchanged. */

/* lane l: X[l] + X[l ^ d] where bit l of m is clear, Y[l] + Y[l ^ d] where set (d 1, 2: within 128-bit lanes;
 * 4: across them) */
#define COMB8(X, Y, m, sw) _mm256_add_epi32(_mm256_blend_epi32((X), (Y), (m)), sw(_mm256_blend_epi32((Y), (X), (m))))
#define SW1(v) _mm256_shuffle_epi32((v), 0xB1)
#define SW2(v) _mm256_shuffle_epi32((v), 0x4E)
#define SW4(v) _mm256_permute4x64_epi64((v), 0x4E)

/* v[i]: row i's partial sums, lanes 4j .. 4j + 3 those of block j (< 2). q[g]: lane 4j + k = row 4g + k's block j. */
AVX2_FN static inline void red8(const __m256i *v, __m256i *q) {
    const __m256i p0 = COMB8(v[0], v[1], 0xAA, SW1), p1 = COMB8(v[2], v[3], 0xAA, SW1);
    const __m256i p2 = COMB8(v[4], v[5], 0xAA, SW1), p3 = COMB8(v[6], v[7], 0xAA, SW1);
    q[0] = COMB8(p0, p1, 0xCC, SW2), q[1] = COMB8(p2, p3, 0xCC, SW2);
}

/* I[j] (j < 2): lane i = row i's sum of block b + j, q4 (m blocks of the step: 1 or 2; xe / xo their even / odd
 * columns, kern_act's q4 order) */
AVX2_FN static inline void step8_q4(const uint8_t *base, size_t rb, int b, int m, const int8_t *xe, const int8_t *xo, __m256i *I) {
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    const __m256i ve = m == 2 ? _mm256_loadu_si256((const __m256i *)xe) : _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)xe));
    const __m256i vo = m == 2 ? _mm256_loadu_si256((const __m256i *)xo) : _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)xo));
    __m256i v[8], q[2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        const uint8_t *c8 = base + (size_t)i * rb + (size_t)b * 16;
        const __m256i c = m == 2 ? _mm256_loadu_si256((const __m256i *)c8) : _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)c8));
        const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(c, m4), ve),
                                           _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4), vo)); /* |s| <= 7680 */
        v[i] = _mm256_madd_epi16(s, ones);
    }
    red8(v, q);
    I[0] = _mm256_permute2x128_si256(q[0], q[1], 0x20), I[1] = _mm256_permute2x128_si256(q[0], q[1], 0x31);
}

/* I: lane i = row i's sum of block b, q8 (codes widened to 16 bits: 255 * 127 * 2 overflows maddubs) */
AVX2_FN static inline __m256i step8_q8(const uint8_t *base, size_t rb, int b, const int8_t *xq) {
    const __m256i x0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(xq + (size_t)b * 32)));
    const __m256i x1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(xq + (size_t)b * 32 + 16)));
    __m256i v[8], q[2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        const uint8_t *c = base + (size_t)i * rb + (size_t)b * 32;
        v[i] = _mm256_add_epi32(_mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)c)), x0),
                                _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(c + 16))), x1));
    }
    red8(v, q); /* both halves of each q[g] hold block b: their sums at distance 4 */
    return COMB8(q[0], q[1], 0xF0, SW4);
}

/* Eight rows r .. r+7 of w (q8/q4) times token t: dev_rows' operations with the rows in the lanes (each lane its
 * own row's chain, in block order). */
AVX2_FN static void dev_rows8(const tn_mat *w, const kern_act *a, int t, float *y, int r) {
    const int cols = w->cols, g = w->group, ng = cols / g, nb = cols / 32, ns = nb + nb / 2 + nb / 4;
    const int gs = g == 32 ? 0 : g == 64 ? 1 : 2; /* blocks a group: 1 << gs */
    const int q4 = w->dtype == DT_Q4;
    const size_t rb = q4 ? (size_t)cols / 2 : (size_t)cols;
    const int8_t *xq = (q4 ? a->q4 : a->q) + (size_t)t * (size_t)cols;
    const float *d = a->d + (size_t)t * (size_t)nb;
    const float *xs = a->s + (size_t)t * (size_t)ns + (g == 32 ? 0 : g == 64 ? nb : nb + nb / 2);
    const uint8_t *base = (const uint8_t *)w->data + (size_t)r * rb;
    __m256 acc = _mm256_setzero_ps(), accb = _mm256_setzero_ps(), sw = acc;
    float st[DEV_NG_MAX][8], bt[DEV_NG_MAX][8];
    rows8_table(w->scales, w->sdtype, r, ng, st);
    rows8_table(w->biases, w->sdtype, r, ng, bt);
    for (int b = 0; b < nb; b += 2) {
        const int m = nb - b < 2 ? 1 : 2;
        __m256i I[2];
        if (q4) { /* the q4 order: per 128 columns (or the last sc) sc / 2 even then sc / 2 odd */
            const int s0 = b / 4 * 128, sc = cols - s0 < 128 ? cols - s0 : 128;
            step8_q4(base, rb, b, m, xq + s0 + (b % 4) * 16, xq + s0 + sc / 2 + (b % 4) * 16, I);
        } else {
            I[0] = step8_q8(base, rb, b, xq);
            if (m == 2) I[1] = step8_q8(base, rb, b + 1, xq);
        }
        for (int j = 0; j < m; j++) {
            if (!((b + j) & ((1 << gs) - 1))) sw = _mm256_loadu_ps(st[(b + j) >> gs]);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I[j]), _mm256_mul_ps(sw, _mm256_set1_ps(d[b + j])), acc); /* exact */
        }
    }
    for (int j = 0; j < ng; j++) accb = _mm256_fmadd_ps(_mm256_loadu_ps(bt[j]), _mm256_set1_ps(xs[j]), accb);
    _mm256_storeu_ps(y + r, _mm256_add_ps(acc, accb));
}

#define VNNI_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

/* The AVX-512 VNNI path: 16 rows a zmm, lane i row r + i's own fma chain in block order (cuda.h's order per row
 * unchanged), four blocks a step. The int32 block dots come from vpdpbusd over each row's codes as they lie (a
 * zmm: q4 four blocks, q8 two), so a row's vector holds partial sums of several blocks; the sixteen rows' vectors
 * are then reduced together, transposed: pair sums of two rows' vectors into one (comb16: lanes of m clear keep
 * X's, set Y's), twice, then 128-bit chunks transposed, 4 x 4, into one vector per block with row i in lane i.
 * All sums are exact int32 sums of the same products, so I_b is the plain order's whatever the tree. */

/* lane l: X[l] + X[l ^ d] where bit l of m is clear, Y[l] + Y[l ^ d] where set (idx: l ^ d, + 16 where set) */
VNNI_FN static inline __m512i comb16(__m512i X, __m512i Y, __mmask16 m, __m512i idx) {
    return _mm512_add_epi32(_mm512_mask_blend_epi32(m, X, Y), _mm512_permutex2var_epi32(X, idx, Y));
}

/* q[g] (g < 4) of 128-bit chunks c: out[c] of chunks g = q[g]'s chunk c (a 4 x 4 transpose of chunks) */
VNNI_FN static inline void tr4x128(const __m512i *q, __m512i *out) {
    const __m512i t0 = _mm512_shuffle_i64x2(q[0], q[1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i t1 = _mm512_shuffle_i64x2(q[0], q[1], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i t2 = _mm512_shuffle_i64x2(q[2], q[3], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i t3 = _mm512_shuffle_i64x2(q[2], q[3], _MM_SHUFFLE(3, 2, 3, 2));
    out[0] = _mm512_shuffle_i64x2(t0, t2, _MM_SHUFFLE(2, 0, 2, 0));
    out[1] = _mm512_shuffle_i64x2(t0, t2, _MM_SHUFFLE(3, 1, 3, 1));
    out[2] = _mm512_shuffle_i64x2(t1, t3, _MM_SHUFFLE(2, 0, 2, 0));
    out[3] = _mm512_shuffle_i64x2(t1, t3, _MM_SHUFFLE(3, 1, 3, 1));
}

/* v[i]: row i's partial sums, lanes 4j .. 4j + 3 those of block j of the step. I[j]: lane i = row i's sum of block
 * j. Pairs of rows (distance 1), then of pairs (distance 2): lane 4j + k of q[g] = row 4g + k's block j. */
VNNI_FN static inline void red16(const __m512i *v, __m512i *I) {
    const __m512i i1 = _mm512_setr_epi32(1, 16, 3, 18, 5, 20, 7, 22, 9, 24, 11, 26, 13, 28, 15, 30);
    const __m512i i2 = _mm512_setr_epi32(2, 3, 16, 17, 6, 7, 20, 21, 10, 11, 24, 25, 14, 15, 28, 29);
    __m512i p[8], q[4];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) p[i] = comb16(v[2 * i], v[2 * i + 1], 0xAAAA, i1);
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) q[g] = comb16(p[2 * g], p[2 * g + 1], 0xCCCC, i2);
    tr4x128(q, I);
}

/* I[j] of blocks b + j (j < 4) of 16 rows (row i's codes at base + i * rb + o): q4, ve / vo the step's even / odd columns
 * (kern_act's q4 order); q8, x0 / x1 its 128 codes (blocks b, b + 1 / b + 2, b + 3). km / k0, k1: the step's code
 * bytes (a short last step's; the rest read as 0), all ones for a whole step. pf: bytes ahead to prefetch (0: none). */
#define DEV_PF 512 /* bytes ahead of each row's step: 16 row streams at once outrun the hardware's prefetch */
/* The prefetch offset from a row's step at byte o (rows of rb bytes, d ahead): within the row, else the same row of
 * the next 16 (the rows are contiguous, so the next tile's first lines arrive before its first steps; prefetches
 * never fault, so past the matrix's end costs nothing but the hint) */
#define DEV_PFO(o, rb, d) ((o) + (d) < (rb) ? (size_t)(d) : (size_t)(d) + 15 * (rb))

VNNI_FN static inline void step16_q4(const uint8_t *base, size_t rb, size_t o, size_t pf, __mmask64 km, __m512i ve,
                                     __m512i vo, __m512i *I) {
    const __m512i m4 = _mm512_set1_epi8(15), z = _mm512_setzero_si512();
    __m512i v[16];
    if (km == ~(__mmask64)0) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            const uint8_t *c8 = base + (size_t)i * rb + o;
            _mm_prefetch((const char *)(c8 + pf), _MM_HINT_T0);
            const __m512i c = _mm512_loadu_si512((const void *)c8);
            v[i] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, _mm512_and_si512(c, m4), ve),
                                       _mm512_and_si512(_mm512_srli_epi16(c, 4), m4), vo);
        }
    } else {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            const __m512i c = _mm512_maskz_loadu_epi8(km, base + (size_t)i * rb + o);
            v[i] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, _mm512_and_si512(c, m4), ve),
                                       _mm512_and_si512(_mm512_srli_epi16(c, 4), m4), vo);
        }
    }
    red16(v, I);
}

VNNI_FN static inline void step16_q8(const uint8_t *base, size_t rb, size_t o, size_t pf, __mmask64 k0, __mmask64 k1,
                                     __m512i x0, __m512i x1, __m512i *I) {
    /* a row's blocks b, b + 1 in lanes 0-7, 8-15 of one vector and b + 2, b + 3 in another: their sums at distance
     * 4 give lanes 4j + k of blocks b, b + 2, b + 1, b + 3 (j = 0 .. 3) */
    const __m512i i4 = _mm512_setr_epi32(4, 5, 6, 7, 16, 17, 18, 19, 12, 13, 14, 15, 24, 25, 26, 27);
    const __m512i z = _mm512_setzero_si512();
    __m512i v[16], J[4];
    if (k1 == ~(__mmask64)0) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            const uint8_t *c = base + (size_t)i * rb + o;
            _mm_prefetch((const char *)(c + pf), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + pf + 64), _MM_HINT_T0);
            const __m512i c0 = _mm512_loadu_si512((const void *)c), c1 = _mm512_loadu_si512((const void *)(c + 64));
            v[i] = comb16(_mm512_dpbusd_epi32(z, c0, x0), _mm512_dpbusd_epi32(z, c1, x1), 0xF0F0, i4);
        }
    } else {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            const uint8_t *c = base + (size_t)i * rb + o;
            const __m512i c0 = _mm512_maskz_loadu_epi8(k0, c), c1 = _mm512_maskz_loadu_epi8(k1, c + 64);
            v[i] = comb16(_mm512_dpbusd_epi32(z, c0, x0), _mm512_dpbusd_epi32(z, c1, x1), 0xF0F0, i4);
        }
    }
    red16(v, J);
    I[0] = J[0], I[1] = J[2], I[2] = J[1], I[3] = J[3];
}

/* The 16 x 16 transpose of v (rows) in place: v[c] lane i = old v[i] lane c. */
VNNI_FN static inline void tr16x16(__m512 *v) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]), t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
    __m512i u[16];
    for (int i = 0; i < 16; i += 4) { /* u[i + k], chunk L: column 4L + k of rows i .. i + 3 */
        u[i] = _mm512_castps_si512(_mm512_shuffle_ps(t[i], t[i + 2], 0x44));
        u[i + 1] = _mm512_castps_si512(_mm512_shuffle_ps(t[i], t[i + 2], 0xEE));
        u[i + 2] = _mm512_castps_si512(_mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44));
        u[i + 3] = _mm512_castps_si512(_mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE));
    }
    for (int k = 0; k < 4; k++) {
        const __m512i q[4] = {u[k], u[4 + k], u[8 + k], u[12 + k]};
        __m512i o[4];
        tr4x128(q, o);
        for (int L = 0; L < 4; L++) v[4 * L + k] = _mm512_castsi512_ps(o[L]);
    }
}

/* t[j][i] = q_scale_at(p, sdt, o0 + i * ng + j) (i < 16, j < n <= 16), for bf16 / f16 values: each row's 16 as 8
 * dwords (groups 2c, 2c + 1), rows i and i + 8 in one vector, an 8 x 8 dword transpose in each half, then each
 * dword's two values converted (exactly, as q_scale_at). */
VNNI_FN static void tab16_h(const uint16_t *p, int bf, size_t o0, size_t ng, int n, float (*t)[16]) {
    const __mmask16 km = (__mmask16)((1u << n) - 1);
    __m512i r[8], u[8];
    for (int i = 0; i < 8; i++)
        r[i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_maskz_loadu_epi16(km, p + o0 + (size_t)i * ng)),
                                  _mm256_maskz_loadu_epi16(km, p + o0 + (size_t)(i + 8) * ng), 1);
    for (int h = 0; h < 8; h += 4) { /* u[h + k], chunk L of each half: dword 4L + k of rows h .. h + 3 */
        const __m512i t0 = _mm512_unpacklo_epi32(r[h], r[h + 1]), t1 = _mm512_unpackhi_epi32(r[h], r[h + 1]);
        const __m512i t2 = _mm512_unpacklo_epi32(r[h + 2], r[h + 3]), t3 = _mm512_unpackhi_epi32(r[h + 2], r[h + 3]);
        u[h] = _mm512_unpacklo_epi64(t0, t2), u[h + 1] = _mm512_unpackhi_epi64(t0, t2);
        u[h + 2] = _mm512_unpacklo_epi64(t1, t3), u[h + 3] = _mm512_unpackhi_epi64(t1, t3);
    }
    const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    const __m512i mh = _mm512_set1_epi32((int)0xFFFF0000u);
    for (int c = 0; c < 8; c++) { /* dword c: rows 0-3, 4-7, 8-11, 12-15 in chunks 0-3 */
        const __m512i v = _mm512_permutex2var_epi64(u[c & 3], c < 4 ? lo : hi, u[4 + (c & 3)]);
        if (bf) {
            _mm512_storeu_ps(t[2 * c], _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
            _mm512_storeu_ps(t[2 * c + 1], _mm512_castsi512_ps(_mm512_and_si512(v, mh)));
        } else {
            _mm512_storeu_ps(t[2 * c], _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)));
            _mm512_storeu_ps(t[2 * c + 1], _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16))));
        }
    }
}

/* The same for any scale type: f32 rows converted 16 at a time and transposed 16 x 16. */
VNNI_FN static void tab16(const void *p, dt_type sdt, size_t o0, size_t ng, int n, float (*t)[16]) {
    if (sdt != DT_F32) {
        tab16_h(p, sdt == DT_BF16, o0, ng, n, t);
        return;
    }
    const __mmask16 km = (__mmask16)((1u << n) - 1);
    __m512 v[16];
    for (int i = 0; i < 16; i++) v[i] = _mm512_maskz_loadu_ps(km, (const float *)p + o0 + (size_t)i * ng);
    tr16x16(v);
    for (int j = 0; j < n; j++) _mm512_storeu_ps(t[j], v[j]);
}

/* I[j] of the step at block b (< nb) of 16 rows for token t, a short last step's codes read as 0 past nb */
VNNI_FN static inline void step16(const tn_mat *w, const kern_act *a, int t, const uint8_t *base, int b, __m512i *I) {
    const int cols = w->cols, nb = cols / 32, m = nb - b < 4 ? nb - b : 4; /* blocks of the step */
    if (w->dtype == DT_Q4) {
        const int8_t *x4 = a->q4 + (size_t)t * (size_t)cols + (size_t)b * 32; /* m * 16 even then m * 16 odd */
        const __mmask64 km = m == 4 ? ~(__mmask64)0 : ((__mmask64)1 << (m * 16)) - 1;
        const size_t rb = (size_t)cols / 2, o = (size_t)b * 16;
        step16_q4(base, rb, o, DEV_PFO(o, rb, DEV_PF), km, _mm512_maskz_loadu_epi8(km, x4), _mm512_maskz_loadu_epi8(km, x4 + m * 16), I);
    } else {
        const int8_t *xq = a->q + (size_t)t * (size_t)cols + (size_t)b * 32;
        const __mmask64 k0 = m >= 2 ? ~(__mmask64)0 : ((__mmask64)1 << 32) - 1;
        const __mmask64 k1 = m == 4 ? ~(__mmask64)0 : m == 3 ? ((__mmask64)1 << 32) - 1 : 0;
        const size_t rb = (size_t)cols, o = (size_t)b * 32;
        step16_q8(base, rb, o, DEV_PFO(o, rb, 2 * DEV_PF), k0, k1, _mm512_maskz_loadu_epi8(k0, xq), _mm512_maskz_loadu_epi8(k1, xq + 64), I);
    }
}

/* Rows r .. r + 15 of w (q8/q4) times token t into y. The scale and bias tables built 16 groups at a time as the
 * blocks reach them; the bias chain runs over each table's groups when it is built (its own chain, group order). */
VNNI_FN static void dev_rows16(const tn_mat *w, const kern_act *a, int t, float *y, int r) {
    const int cols = w->cols, g = w->group, ng = cols / g, nb = cols / 32, ns = nb + nb / 2 + nb / 4;
    const int gs = g == 32 ? 0 : g == 64 ? 1 : 2; /* blocks a group: 1 << gs */
    const size_t rb = w->dtype == DT_Q4 ? (size_t)cols / 2 : (size_t)cols;
    const float *d = a->d + (size_t)t * (size_t)nb;
    const float *xs = a->s + (size_t)t * (size_t)ns + (g == 32 ? 0 : g == 64 ? nb : nb + nb / 2);
    const uint8_t *base = (const uint8_t *)w->data + (size_t)r * rb;
    __m512 acc = _mm512_setzero_ps(), accb = acc, sw = acc;
    const __m512 vz = _mm512_set1_ps(w->dtype == DT_Q8 ? -128.0f : -8.0f); /* exact: a power of two times a normal */
    float st[16][16], bt[16][16];
    if (!(r & 31)) { /* the scale and bias rows of this tile and the next (an item's two, DEV_GRAIN): the tables'
         loads are strided, which the hardware prefetchers do not follow, and a table built every few steps otherwise
         waits on memory (g32: 16 lines a table) */
        const size_t sb = (size_t)ng * (w->sdtype == DT_F32 ? 4 : 2), r1 = (size_t)(r + 32 <= w->rows ? r + 32 : w->rows);
        const char *sp = (const char *)w->scales + (size_t)r * sb, *bp = (const char *)w->biases + (size_t)r * sb;
        for (size_t o = 0; o < (r1 - (size_t)r) * sb; o += 64) {
            _mm_prefetch(sp + o, _MM_HINT_T0);
            if (!w->bias_implied) _mm_prefetch(bp + o, _MM_HINT_T0);
        }
    }
    for (int b = 0; b < nb; b += 4) {
        if (!(b & ((16 << gs) - 1))) { /* the next 16 groups' tables; b is their first block */
            const int j0 = b >> gs, n = ng - j0 < 16 ? ng - j0 : 16;
            tab16(w->scales, w->sdtype, (size_t)r * (size_t)ng + (size_t)j0, (size_t)ng, n, st);
            if (w->bias_implied) /* every bias is z times its scale bit for bit (q_biases_implied): not read */
                for (int j = 0; j < n; j++) _mm512_storeu_ps(bt[j], _mm512_mul_ps(_mm512_loadu_ps(st[j]), vz));
            else
                tab16(w->biases, w->sdtype, (size_t)r * (size_t)ng + (size_t)j0, (size_t)ng, n, bt);
            for (int j = 0; j < n; j++) accb = _mm512_fmadd_ps(_mm512_loadu_ps(bt[j]), _mm512_set1_ps(xs[j0 + j]), accb);
        }
        __m512i I[4];
        step16(w, a, t, base, b, I);
        const int m = nb - b < 4 ? nb - b : 4;
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            if (j >= m) break;
            if (!((b + j) & ((1 << gs) - 1))) sw = _mm512_loadu_ps(st[((b + j) >> gs) & 15]);
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[j]), _mm512_mul_ps(sw, _mm512_set1_ps(d[b + j])), acc); /* exact */
        }
    }
    _mm512_storeu_ps(y + r, _mm512_add_ps(acc, accb));
}

/* canon_silu(g) * u of 16 lanes: canon_exp.h's operations in the same order, each the same IEEE single op (rint:
 * roundscale to nearest even; the ranges' ends and NaN blended in as canon_expf returns them), so bitwise the
 * scalar's. */
VNNI_FN static inline __m512 silu16(__m512 g, __m512 u) {
    const __m512 x = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), _mm512_set1_epi32(INT32_MIN))); /* -g */
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
    const __m512 z = _mm512_mul_ps(r, r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, z, r), _mm512_set1_ps(1.0f));
    const __m512i ni = _mm512_cvttps_epi32(n), n1 = _mm512_srai_epi32(_mm512_sub_epi32(ni, _mm512_srai_epi32(ni, 31)), 1);
    const __m512i b127 = _mm512_set1_epi32(127);
    const __m512 p1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, b127), 23));
    const __m512 p2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_sub_epi32(ni, n1), b127), 23));
    __m512 e = _mm512_mul_ps(_mm512_mul_ps(p, p1), p2);
    e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-103.97208f), _CMP_LT_OQ), _mm512_setzero_ps());
    e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.72284f), _CMP_GT_OQ), _mm512_set1_ps(INFINITY));
    e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
    return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

VNNI_FN static void swiglu16(const float *g, const float *u, float *y, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, silu16(_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i)));
    for (; i < n; i++) y[i] = canon_silu(g[i]) * u[i];
}

static int dev_isa_max = 2; /* kern_dev_isa: 0 scalar, 1 AVX2, 2 AVX-512 VNNI */

static int dev_avx2(void) {
    static int have = -1;
    if (have < 0) have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return have && dev_isa_max >= 1;
}

static int dev_vnni(void) {
    static int have = -1;
    if (have < 0)
        have = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return have && dev_isa_max >= 2;
}

#endif

int kern_dev_isa(int max) {
    int old = 0;
#ifdef DEV_AVX2
    old = dev_isa_max;
    dev_isa_max = max;
#else
    (void)max;
#endif
    return old;
}


/* Rows r0 .. r1 of w times every token of a into y (row stride ldy), eight rows at a time where AVX2 is. */
static void dev_mm(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
#ifdef DEV_AVX2
    if (dev_vnni()) {
        for (int t = 0; t < a->n_tok; t++) {
            int r = r0;
            for (; r + 16 <= r1; r += 16) dev_rows16(w, a, t, y + (size_t)t * ldy, r);
            if (r < r1) dev_rows(w, a, t, y + (size_t)t * ldy, r, r1);
        }
        return;
    }
    if (dev_avx2() && w->cols / w->group <= DEV_NG_MAX) {
        for (int t = 0; t < a->n_tok; t++) {
            int r = r0;
            for (; r + 8 <= r1; r += 8) dev_rows8(w, a, t, y + (size_t)t * ldy, r);
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
#ifdef DEV_AVX2
    if (dev_vnni()) {
        swiglu16(g, u, y, n);
        return;
    }
#endif
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

/* kern_ffn_dev_multi's phases: items of DEV_GRAIN rows, per expert the same count (the same inter and hidden size):
 * phase 0 every expert's gate then up rows, phase 1 every down row; each item one dev_mm call as kern_ffn_dev's */
typedef struct {
    const kern_ffn_arg *a;
    kern_act *mid; /* [n] the down inputs */
    int inter, per, phase;
} dev_mjob;

static void dev_mpart(void *ctx, size_t begin, size_t end) {
    const dev_mjob *j = ctx;
    for (size_t it = begin; it < end; it++) {
        const kern_ffn_arg *a = &j->a[it / (size_t)j->per];
        int r = (int)(it % (size_t)j->per) * DEV_GRAIN;
        if (j->phase == 0) {
            const int n0 = (j->inter + DEV_GRAIN - 1) / DEV_GRAIN * DEV_GRAIN, up = r >= n0;
            if (up) r -= n0;
            const int r1 = r + DEV_GRAIN < j->inter ? r + DEV_GRAIN : j->inter;
            dev_mm(up ? &a->ex->up : &a->ex->gate, a->x, up ? a->u : a->g, (size_t)j->inter, r, r1);
        } else {
            const tn_mat *m = &a->ex->down;
            const int r1 = r + DEV_GRAIN < m->rows ? r + DEV_GRAIN : m->rows;
            dev_mm(m, &j->mid[it / (size_t)j->per], a->y, a->ldy, r, r1);
        }
    }
}

/* one expert's SwiGLU and the int8 form of its result (kern_ffn_dev's middle), an item an expert */
static void dev_mmid(void *ctx, size_t begin, size_t end) {
    const dev_mjob *j = ctx;
    for (size_t i = begin; i < end; i++) {
        const kern_ffn_arg *a = &j->a[i];
        const int n = a->x->n_tok;
        for (int t = 0; t < n; t++)
            kern_swiglu_dev(a->g + (size_t)t * j->inter, a->u + (size_t)t * j->inter, a->g + (size_t)t * j->inter, j->inter);
        kern_act_init(&j->mid[i], a->mid_buf, a->g, (size_t)j->inter, n, j->inter, 1);
        kern_act_prepare(&j->mid[i]);
    }
}

#define DEV_MULTI_MAX 64

int kern_ffn_dev_multi(pool_t *pool, const kern_ffn_arg *a, int n, int inter) {
    if (n <= 0) return SL_OK;
    if (n > DEV_MULTI_MAX) return SL_EUNSUPPORTED;
    const int H = a[0].ex->down.rows;
    for (int i = 0; i < n; i++)
        if (!kern_ffn_dev_ok(a[i].ex, inter) || !a[i].x->int8 || a[i].x->cols != a[i].ex->gate.cols ||
            a[i].ex->down.rows != H)
            return SL_EUNSUPPORTED;
    for (int i = 0; i < n; i++) { /* the rows' int8 form (an act shared by several experts once) */
        kern_act_prepare(a[i].x);
        if (!a[i].x->int8) return SL_EUNSUPPORTED;
    }
    kern_act mid[DEV_MULTI_MAX];
    const int gi = (inter + DEV_GRAIN - 1) / DEV_GRAIN, di = (H + DEV_GRAIN - 1) / DEV_GRAIN;
    dev_mjob j = {a, mid, inter, 2 * gi, 0};
    /* dynamic, as dev_matmul2: the caller and the awake threads take the items while the others wake */
    if (pool) pool_for_any(pool, (size_t)n * (size_t)j.per, 1, dev_mpart, &j);
    else dev_mpart(&j, 0, (size_t)n * (size_t)j.per);
    if (pool && n > 1) pool_for_any(pool, (size_t)n, 1, dev_mmid, &j);
    else dev_mmid(&j, 0, (size_t)n);
    j.per = di;
    j.phase = 1;
    if (pool) pool_for_any(pool, (size_t)n * (size_t)j.per, 1, dev_mpart, &j);
    else dev_mpart(&j, 0, (size_t)n * (size_t)j.per);
    return SL_OK;
}
