/*
 * kernels_avx512.c — the AVX-512 table (F + BW + VL + DQ, FMA, F16C; compiled with those flags; x86-64).
 *
 * The AVX2 design (kernels_avx2.c) with 16 lanes: each y[t][r] keeps one 16-lane FMA accumulator
 * (lane = column % 16) across all chunks, a ragged tail uses masked loads, and the lanes are combined in
 * a fixed tree, so results depend only on the column count (kernels.h). Dequantisation widens 16 codes
 * per step; q3 looks its 8 levels up with one permutexvar. The int8-activation q8/q4 kernels
 * (kern_matmul_act) use VNNI's vpdpbusd (kernels_avx512.h's pieces in kernels_tile_i8.h's driver, and the q4
 * prefill kernel of kernels_avx512_i8p.c), so this table needs AVX512-VNNI too (a CPU without it gets the AVX2
 * table). AVX512-BF16 is not used: it rounds activations to bf16.
 *
 * Sections: dequantisation, matmul, the int8-activation matmul, small vector kernels, the table.
 */
#include "kernels/kernels.h"
#include "kernels/kernels_plain.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels_amx.h"
#include "kernels/kernels_avx512.h"
#include "kernels/softmax_common.h"
#include "quant/quant.h"
#include "util/dtype.h"

typedef __m512 tile_acc;
#include "kernels/kernels_tile.h"

/* ---- dequantisation --------------------------------------------------------------------------- */

static inline __m512 scale16(const tn_mat *m, size_t i) { return _mm512_set1_ps(q_scale_at(m->scales, m->sdtype, i)); }
static inline __m512 bias16(const tn_mat *m, size_t i) { return _mm512_set1_ps(q_scale_at(m->biases, m->sdtype, i)); }

/* [nc] f32 weights of row r from column c0: a pointer into m for f32, else dequantised into buf. */
static inline __attribute__((always_inline)) const float *tile_load(dt_type dt, const tn_mat *m, int r, int c0,
                                                                      int nc, float *buf) {
    const size_t off = (size_t)r * (size_t)m->cols + (size_t)c0;
    if (dt == DT_F32) return (const float *)m->data + off;
    if (dt == DT_F16 || dt == DT_BF16) {
        const uint16_t *s = (const uint16_t *)m->data + off;
        for (int i = 0; i < nc; i += 16) {
            __mmask16 mk = nc - i >= 16 ? (__mmask16)0xffff : tail_mask(nc - i);
            __m256i h = _mm256_maskz_loadu_epi16(mk, s + i);
            __m512 f = dt == DT_F16 ? _mm512_cvtph_ps(h)
                                    : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
            _mm512_mask_storeu_ps(buf + i, mk, f);
        }
        return buf;
    }
    const int g = m->group;
    const size_t sidx = off / (size_t)g;
    if (dt == DT_Q8) {
        const uint8_t *q = (const uint8_t *)m->data + off;
        for (int j = 0; j < nc; j += g) {
            __m512 sc = scale16(m, sidx + (size_t)(j / g)), bi = bias16(m, sidx + (size_t)(j / g));
            for (int i = j; i < j + g; i += 16) {
                __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + i)));
                _mm512_storeu_ps(buf + i, _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), sc, bi));
            }
        }
    } else if (dt == DT_Q4) {
        /* 64 codes from 32 bytes per step: split the nibbles of all bytes at once, re-interleave
         * (element 2j = low nibble of byte j), widen 16 at a time. The same s*q + b per element as a
         * one-by-one dequantisation. nc and g are multiples of 32; a 32-code tail takes 16 bytes. */
        const uint8_t *q = (const uint8_t *)m->data + off / 2;
        const __m256i m4 = _mm256_set1_epi8(15);
        float sc[TILE_KCHUNK / 32], bi[TILE_KCHUNK / 32];
        const int gs = __builtin_ctz((unsigned)g); /* groups are 32, 64 or 128 */
        for (int k = 0; k * g < nc; k++) {
            sc[k] = q_scale_at(m->scales, m->sdtype, sidx + (size_t)k);
            bi[k] = q_scale_at(m->biases, m->sdtype, sidx + (size_t)k);
        }
#define Q4_OUT(vec16, at)                                                                                  \
    _mm512_storeu_ps(buf + (at), _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(vec16)),            \
                                                 _mm512_set1_ps(sc[(at) >> gs]), _mm512_set1_ps(bi[(at) >> gs])))
        int i = 0;
        for (; i + 64 <= nc; i += 64) {
            __m256i b = _mm256_loadu_si256((const __m256i *)(q + i / 2));
            __m256i lo = _mm256_and_si256(b, m4), hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), m4);
            __m256i il0 = _mm256_unpacklo_epi8(lo, hi), il1 = _mm256_unpackhi_epi8(lo, hi);
            Q4_OUT(_mm256_castsi256_si128(il0), i);
            Q4_OUT(_mm256_castsi256_si128(il1), i + 16);
            Q4_OUT(_mm256_extracti128_si256(il0, 1), i + 32);
            Q4_OUT(_mm256_extracti128_si256(il1, 1), i + 48);
        }
        if (i < nc) { /* 32 codes */
            __m128i b = _mm_loadu_si128((const __m128i *)(q + i / 2));
            const __m128i m4x = _mm_set1_epi8(15);
            __m128i lo = _mm_and_si128(b, m4x), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m4x);
            Q4_OUT(_mm_unpacklo_epi8(lo, hi), i);
            Q4_OUT(_mm_unpackhi_epi8(lo, hi), i + 16);
        }
#undef Q4_OUT
    } else { /* DT_Q3: 16 codes per 6 bytes */
        const uint8_t *q = (const uint8_t *)m->data + off / 8 * 3;
        const __m512i sh = _mm512_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21, 0, 3, 6, 9, 12, 15, 18, 21);
        const __m512i m3 = _mm512_set1_epi32(7);
        const __m512 lv = _mm512_castps256_ps512(_mm256_loadu_ps(Q3_LEVELS)); /* index < 8 */
        for (int j = 0; j < nc; j += g) {
            __m512 sc = scale16(m, sidx + (size_t)(j / g));
            for (int i = j; i < j + g; i += 16) {
                const uint8_t *p = q + (size_t)i / 8 * 3;
                int w0 = (int)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16);
                int w1 = (int)((uint32_t)p[3] | (uint32_t)p[4] << 8 | (uint32_t)p[5] << 16);
                __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(w0)), _mm256_set1_epi32(w1), 1);
                v = _mm512_and_si512(_mm512_srlv_epi32(v, sh), m3);
                _mm512_storeu_ps(buf + i, _mm512_mul_ps(_mm512_permutexvar_ps(v, lv), sc));
            }
        }
    }
    return buf;
}

/* ---- matmul: kernels_tile.h's driver over these pieces --------------------------------------- */

static inline void tile_dot4(const float *const *wr, const float *x, int n, __m512 *acc) {
    __m512 a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    int c = 0;
    for (; c + 16 <= n; c += 16) {
        __m512 xv = _mm512_loadu_ps(x + c);
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(wr[0] + c), xv, a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(wr[1] + c), xv, a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(wr[2] + c), xv, a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(wr[3] + c), xv, a3);
    }
    if (c < n) {
        __mmask16 mk = tail_mask(n - c);
        __m512 xv = _mm512_maskz_loadu_ps(mk, x + c);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, wr[0] + c), xv, a0);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, wr[1] + c), xv, a1);
        a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, wr[2] + c), xv, a2);
        a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, wr[3] + c), xv, a3);
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

static inline float lanes_sum(__m512 v) {
    float a[16];
    _mm512_storeu_ps(a, v);
    float h[8];
    for (int i = 0; i < 8; i++) h[i] = a[i] + a[i + 8];
    return ((h[0] + h[1]) + (h[2] + h[3])) + ((h[4] + h[5]) + (h[6] + h[7]));
}

/* One token of f32/f16/bf16 (decode; f32: the routers): rows one after another, f16/bf16 converted in registers
 * as they are read (no chunk buffer) and their codes prefetched 3 row blocks ahead into L2 (as the int8 kernels
 * do). Each row takes the same FMAs in the same order as tile_mm (a masked tail adds 0 * 0 to the unused lanes there
 * too), so the same bits; row after row, the rows are one stream front to back, which the hardware prefetcher
 * follows far better than TILE_RB rows side by side (kernels_tile_i8.h). */
static inline __attribute__((always_inline)) void mm_1tok(dt_type dt, const tn_mat *w, const float *x, float *y,
                                                            int r0, int r1) {
    const int cols = w->cols;
    const size_t pf = (size_t)3 * TILE_RB * (size_t)cols * 2;
    for (int r = r0; r < r1; r++) {
        __m512 acc = _mm512_setzero_ps();
        if (dt == DT_F32) {
            const float *wr = (const float *)w->data + (size_t)r * (size_t)cols;
            int c = 0;
            for (; c + 16 <= cols; c += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(wr + c), _mm512_loadu_ps(x + c), acc);
            if (c < cols) {
                __mmask16 mk = tail_mask(cols - c);
                acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, wr + c), _mm512_maskz_loadu_ps(mk, x + c), acc);
            }
        } else {
            const uint16_t *wr = (const uint16_t *)w->data + (size_t)r * (size_t)cols;
            for (int c = 0; c < cols; c += 16) {
                __mmask16 mk = cols - c >= 16 ? (__mmask16)0xffff : tail_mask(cols - c);
                __m512 xv = _mm512_maskz_loadu_ps(mk, x + c);
                if ((c & 31) == 0) _mm_prefetch((const char *)(wr + c) + pf, _MM_HINT_T1);
                __m256i h = _mm256_maskz_loadu_epi16(mk, wr + c);
                __m512 f = dt == DT_F16 ? _mm512_cvtph_ps(h)
                                        : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
                acc = _mm512_fmadd_ps(f, xv, acc);
            }
        }
        y[r] = lanes_sum(acc);
    }
}

static inline int tile_one_token(dt_type dt, const tn_mat *w, const float *x, float *y, int r0, int r1) {
    if (dt != DT_F32 && dt != DT_F16 && dt != DT_BF16) return 0;
    mm_1tok(dt, w, x, y, r0, r1);
    return 1;
}

static inline float tile_sum(__m512 v) { return lanes_sum(v); }
static inline __m512 tile_zero(void) { return _mm512_setzero_ps(); }

/* ---- int8-activation matmul (kernels.h: kern_matmul_act): kernels_tile_i8.h's driver over kernels_avx512.h's
 * pieces; q4 over several tokens first tries the AMX kernel (kernels_amx.c), then the prefill kernel
 * (kernels_avx512_i8p.c) ------------------------------------------------------------------------------------ */

static void mmi8_q4(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    if (a->n_tok > 1 && !kern_amx_q4_prefill(w, a, y, ldy, r0, r1)) return; /* AMX tiles where the CPU has them */
    if (!kern_avx512_q4_prefill(w, a, y, ldy, r0, r1)) return;
    i8_mm_DT_Q4(w, a, y, ldy, r0, r1);
}


/* ---- small vector kernels --------------------------------------------------------------------- */

static float dot_v(const float *a, const float *b, int n) {
    __m512 acc = _mm512_setzero_ps();
    int c = 0;
    for (; c + 16 <= n; c += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + c), _mm512_loadu_ps(b + c), acc);
    if (c < n) {
        __mmask16 mk = tail_mask(n - c);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, a + c), _mm512_maskz_loadu_ps(mk, b + c), acc);
    }
    return lanes_sum(acc);
}

/* plain_axpy's arithmetic (y + a * x: a multiply, then an add) 16 lanes at a time, the tail masked. */
static void axpy_v(float a, const float *x, float *y, int n) {
    const __m512 av = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_mul_ps(av, _mm512_loadu_ps(x + i))));
    if (i < n) {
        __mmask16 mk = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, mk, _mm512_add_ps(_mm512_maskz_loadu_ps(mk, y + i),
                                                       _mm512_mul_ps(av, _mm512_maskz_loadu_ps(mk, x + i))));
    }
}

/* kernels.h dot_rows: dot_v's FMAs for four rows at once, then its lane tree (lanes_sum: i + 8 halves, then
 * ((0+1)+(2+3))+((4+5)+(6+7))) for the four by hadd, which pairs neighbours as the tree does. */
static void dot_rows_v(const float *q, const float *x, size_t ldx, int n, int d, float *out) {
    int p = 0;
    for (; p + 4 <= n; p += 4) {
        const float *x0 = x + (size_t)p * ldx, *x1 = x0 + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int c = 0;
        for (; c + 16 <= d; c += 16) {
            __m512 qv = _mm512_loadu_ps(q + c);
            a0 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(x0 + c), a0);
            a1 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(x1 + c), a1);
            a2 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(x2 + c), a2);
            a3 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(x3 + c), a3);
        }
        if (c < d) {
            __mmask16 mk = tail_mask(d - c);
            __m512 qv = _mm512_maskz_loadu_ps(mk, q + c);
            a0 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(mk, x0 + c), a0);
            a1 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(mk, x1 + c), a1);
            a2 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(mk, x2 + c), a2);
            a3 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(mk, x3 + c), a3);
        }
        __m256 h0 = _mm256_add_ps(_mm512_castps512_ps256(a0), _mm512_extractf32x8_ps(a0, 1));
        __m256 h1 = _mm256_add_ps(_mm512_castps512_ps256(a1), _mm512_extractf32x8_ps(a1, 1));
        __m256 h2 = _mm256_add_ps(_mm512_castps512_ps256(a2), _mm512_extractf32x8_ps(a2, 1));
        __m256 h3 = _mm256_add_ps(_mm512_castps512_ps256(a3), _mm512_extractf32x8_ps(a3, 1));
        __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(h0, h1), _mm256_hadd_ps(h2, h3));
        _mm_storeu_ps(out + p, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
    }
    for (; p < n; p++) out[p] = dot_v(q, x + (size_t)p * ldx, d);
}

/* kernels.h axpy_rows: y in registers, 128 columns at a time in eight named accumulators (a head of 128:
 * one pass over the rows; the compiler kept the arrays of the 64-column loop on the stack, a store and a
 * reload per row), then 64 at a time with the tail masked; each element the same y + a * x (multiply, then
 * add: plain_axpy's arithmetic) for every row in order. */
static void axpy_rows_v(const float *a, int n, const float *x, size_t ldx, float *y, int d) {
    int j0 = 0;
    for (; j0 + 128 <= d; j0 += 128) {
        float *yj = y + j0;
        __m512 c0 = _mm512_loadu_ps(yj), c1 = _mm512_loadu_ps(yj + 16), c2 = _mm512_loadu_ps(yj + 32),
               c3 = _mm512_loadu_ps(yj + 48), c4 = _mm512_loadu_ps(yj + 64), c5 = _mm512_loadu_ps(yj + 80),
               c6 = _mm512_loadu_ps(yj + 96), c7 = _mm512_loadu_ps(yj + 112);
        for (int p = 0; p < n; p++) {
            const __m512 av = _mm512_set1_ps(a[p]);
            const float *xp = x + (size_t)p * ldx + j0;
            c0 = _mm512_add_ps(c0, _mm512_mul_ps(av, _mm512_loadu_ps(xp)));
            c1 = _mm512_add_ps(c1, _mm512_mul_ps(av, _mm512_loadu_ps(xp + 16)));
            c2 = _mm512_add_ps(c2, _mm512_mul_ps(av, _mm512_loadu_ps(xp + 32)));
            c3 = _mm512_add_ps(c3, _mm512_mul_ps(av, _mm512_loadu_ps(xp + 48)));
            c4 = _mm512_add_ps(c4, _mm512_mul_ps(av, _mm512_loadu_ps(xp + 64)));
            c5 = _mm512_add_ps(c5, _mm512_mul_ps(av, _mm512_loadu_ps(xp + 80)));
            c6 = _mm512_add_ps(c6, _mm512_mul_ps(av, _mm512_loadu_ps(xp + 96)));
            c7 = _mm512_add_ps(c7, _mm512_mul_ps(av, _mm512_loadu_ps(xp + 112)));
        }
        _mm512_storeu_ps(yj, c0);
        _mm512_storeu_ps(yj + 16, c1);
        _mm512_storeu_ps(yj + 32, c2);
        _mm512_storeu_ps(yj + 48, c3);
        _mm512_storeu_ps(yj + 64, c4);
        _mm512_storeu_ps(yj + 80, c5);
        _mm512_storeu_ps(yj + 96, c6);
        _mm512_storeu_ps(yj + 112, c7);
    }
    for (int i0 = j0; i0 < d; i0 += 64) {
        const int m = d - i0 < 64 ? d - i0 : 64;
        __mmask16 mk[4];
        __m512 acc[4];
        for (int k = 0; k < 4; k++) {
            int left = m - 16 * k;
            mk[k] = left >= 16 ? (__mmask16)0xffff : left > 0 ? tail_mask(left) : 0;
            acc[k] = _mm512_maskz_loadu_ps(mk[k], y + i0 + 16 * k);
        }
        for (int p = 0; p < n; p++) {
            const __m512 av = _mm512_set1_ps(a[p]);
            const float *xp = x + (size_t)p * ldx + i0;
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                acc[k] = _mm512_add_ps(acc[k], _mm512_mul_ps(av, _mm512_maskz_loadu_ps(mk[k], xp + 16 * k)));
        }
        for (int k = 0; k < 4; k++) _mm512_mask_storeu_ps(y + i0 + 16 * k, mk[k], acc[k]);
    }
}

/* The lane trees of four rows' accumulators (dot_rows_v's: i + 8 halves, then hadd pairs neighbours as lanes_sum's
 * ((0+1)+(2+3))+((4+5)+(6+7)) does) into out[0..4). */
static inline void tree4_store(__m512 a0, __m512 a1, __m512 a2, __m512 a3, float *out) {
    __m256 h0 = _mm256_add_ps(_mm512_castps512_ps256(a0), _mm512_extractf32x8_ps(a0, 1));
    __m256 h1 = _mm256_add_ps(_mm512_castps512_ps256(a1), _mm512_extractf32x8_ps(a1, 1));
    __m256 h2 = _mm256_add_ps(_mm512_castps512_ps256(a2), _mm512_extractf32x8_ps(a2, 1));
    __m256 h3 = _mm256_add_ps(_mm512_castps512_ps256(a3), _mm512_extractf32x8_ps(a3, 1));
    __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(h0, h1), _mm256_hadd_ps(h2, h3));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
}

/* kernels.h dot_rows_q: four queries x four rows a tile, each row's 16 columns loaded once for the four queries (a
 * prefill's KV rows come from L2 once per four query heads, not once per head); each (query, row) dot_v's FMAs in
 * column order and its lane tree, so bitwise dot_rows_v. Other queries and rows: dot_rows_v, dot_v. */
static void dot_rows_q_v(const float *q, size_t ldq, int nq, const float *x, size_t ldx, int n, int d, float *out,
                         size_t ldo) {
    int i = 0;
    for (; i + 4 <= nq; i += 4) {
        const float *qk[4] = {q + (size_t)i * ldq, q + (size_t)(i + 1) * ldq, q + (size_t)(i + 2) * ldq,
                              q + (size_t)(i + 3) * ldq};
        int p = 0;
        for (; p + 4 <= n; p += 4) {
            const float *xr[4] = {x + (size_t)p * ldx, x + (size_t)(p + 1) * ldx, x + (size_t)(p + 2) * ldx,
                                  x + (size_t)(p + 3) * ldx};
            __m512 acc[4][4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) acc[k][r] = _mm512_setzero_ps();
            for (int c = 0; c < d; c += 16) {
                const __mmask16 mk = d - c >= 16 ? (__mmask16)0xffff : tail_mask(d - c);
                __m512 qv[4];
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) qv[k] = _mm512_maskz_loadu_ps(mk, qk[k] + c);
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) {
                    const __m512 xv = _mm512_maskz_loadu_ps(mk, xr[r] + c);
#pragma GCC unroll 4
                    for (int k = 0; k < 4; k++) acc[k][r] = _mm512_fmadd_ps(qv[k], xv, acc[k][r]);
                }
            }
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) tree4_store(acc[k][0], acc[k][1], acc[k][2], acc[k][3], out + (size_t)(i + k) * ldo + p);
        }
        for (; p < n; p++)
            for (int k = 0; k < 4; k++) out[(size_t)(i + k) * ldo + p] = dot_v(qk[k], x + (size_t)p * ldx, d);
    }
    for (; i < nq; i++) dot_rows_v(q + (size_t)i * ldq, x, ldx, n, d, out + (size_t)i * ldo);
}

/* Up to eight queries (qk[0 .. NQ)) against 16 keys in the lanes (key p's column c at xp[c * ldt + p], mk its lanes):
 * dot_v's lane l of each (query, key) is its chain of FMAs over the columns c = l, l + 16, ... (in a masked last step a
 * column past d adds fma(0, 0, acc) = acc + 0, as there); lanes l and l + 8 are chained side by side, then
 * h_l = acc_l + acc_(l+8) and lanes_sum's tree ((h0+h1)+(h2+h3))+((h4+h5)+(h6+h7)), in these 16-lane registers. */
static inline __attribute__((always_inline)) void cols_block(const float *const *qk, const int NQ, const float *xp,
                                                             size_t ldt, __mmask16 mk, int d, float *const *o) {
    const int steps = (d + 15) / 16;
    __m512 t0[8] = {0}, t1[8] = {0}, t2[8] = {0};
#pragma GCC unroll 8
    for (int l = 0; l < 8; l++) {
        __m512 a[8], b[8];
#pragma GCC unroll 8
        for (int k = 0; k < NQ; k++) a[k] = b[k] = _mm512_setzero_ps();
        for (int s = 0; s < steps; s++) {
            const int c = 16 * s + l;
            if (c < d) {
                const __m512 xv = _mm512_maskz_loadu_ps(mk, xp + (size_t)c * ldt);
#pragma GCC unroll 8
                for (int k = 0; k < NQ; k++) a[k] = _mm512_fmadd_ps(_mm512_set1_ps(qk[k][c]), xv, a[k]);
            } else
#pragma GCC unroll 8
                for (int k = 0; k < NQ; k++) a[k] = _mm512_add_ps(a[k], _mm512_setzero_ps());
            if (c + 8 < d) {
                const __m512 xv = _mm512_maskz_loadu_ps(mk, xp + (size_t)(c + 8) * ldt);
#pragma GCC unroll 8
                for (int k = 0; k < NQ; k++) b[k] = _mm512_fmadd_ps(_mm512_set1_ps(qk[k][c + 8]), xv, b[k]);
            } else
#pragma GCC unroll 8
                for (int k = 0; k < NQ; k++) b[k] = _mm512_add_ps(b[k], _mm512_setzero_ps());
        }
#pragma GCC unroll 8
        for (int k = 0; k < NQ; k++) {
            const __m512 h = _mm512_add_ps(a[k], b[k]);
            switch (l) { /* s01 in t0, s23 then s0123; s45 in t1, s67 in t2, then s4567 and the total */
            case 0: t0[k] = h; break;
            case 2: case 4: t1[k] = h; break;
            case 6: t2[k] = h; break;
            case 1: t0[k] = _mm512_add_ps(t0[k], h); break;
            case 3: t1[k] = _mm512_add_ps(t1[k], h), t0[k] = _mm512_add_ps(t0[k], t1[k]); break;
            case 5: t1[k] = _mm512_add_ps(t1[k], h); break;
            default:
                t2[k] = _mm512_add_ps(t2[k], h), t1[k] = _mm512_add_ps(t1[k], t2[k]);
                t0[k] = _mm512_add_ps(t0[k], t1[k]);
            }
        }
    }
#pragma GCC unroll 8
    for (int k = 0; k < NQ; k++) _mm512_mask_storeu_ps(o[k], mk, t0[k]);
}

/* kernels.h dot_cols_q: cols_block over 16 keys x eight queries at a time for heads of 128 (a KV head's group of the
 * 30B shape; the columns' steps and tree unrolled with no test of c < d: 8% less CPU a score than four queries of a
 * run-time d, 8 queries x 64 keys a token in a 4 MB score block), else four (a last block of fewer of either), so
 * every score is bitwise dot_v's of its query and key row (and so dot_rows_q_v's), without a horizontal sum. */
static void dot_cols_q_v(const float *q, size_t ldq, int nq, const float *xt, size_t ldt, int n, int d, float *out,
                         size_t ldo) {
    for (int p = 0; p < n; p += 16) {
        const __mmask16 mk = n - p >= 16 ? (__mmask16)0xffff : tail_mask(n - p);
        int i = 0;
        for (; d == 128 && i + 8 <= nq; i += 8) {
            const float *qk[8];
            float *o[8];
            for (int k = 0; k < 8; k++) qk[k] = q + (size_t)(i + k) * ldq, o[k] = out + (size_t)(i + k) * ldo + p;
            cols_block(qk, 8, xt + p, ldt, mk, 128, o);
        }
        for (; i + 4 <= nq; i += 4) {
            const float *qk[4] = {q + (size_t)i * ldq, q + (size_t)(i + 1) * ldq, q + (size_t)(i + 2) * ldq,
                                  q + (size_t)(i + 3) * ldq};
            float *o[4] = {out + (size_t)i * ldo + p, out + (size_t)(i + 1) * ldo + p, out + (size_t)(i + 2) * ldo + p,
                           out + (size_t)(i + 3) * ldo + p};
            if (d == 128) cols_block(qk, 4, xt + p, ldt, mk, 128, o);
            else cols_block(qk, 4, xt + p, ldt, mk, d, o);
        }
        for (; i < nq; i++) {
            const float *qk[1] = {q + (size_t)i * ldq};
            float *o[1] = {out + (size_t)i * ldo + p};
            cols_block(qk, 1, xt + p, ldt, mk, d, o);
        }
    }
}

/* kernels.h transpose: 16 x 16 blocks in registers (rows paired by unpack, quads by shuffle_ps: each 128-bit lane
 * one column's 4 rows; then shuffle_f32x4 twice gathers a column's 16), the edges masked; values moved, not
 * computed. */
static void transpose_v(const float *x, size_t ldx, int n, int d, float *xt, size_t ldt) {
    for (int p0 = 0; p0 < n; p0 += 16)
        for (int c0 = 0; c0 < d; c0 += 16) {
            const int np = n - p0 < 16 ? n - p0 : 16, nc = d - c0 < 16 ? d - c0 : 16;
            const __mmask16 mc = nc == 16 ? (__mmask16)0xffff : tail_mask(nc);
            const __mmask16 mp = np == 16 ? (__mmask16)0xffff : tail_mask(np);
            __m512 r[16], t[16];
            for (int i = 0; i < 16; i++)
                r[i] = i < np ? _mm512_maskz_loadu_ps(mc, x + (size_t)(p0 + i) * ldx + c0) : _mm512_setzero_ps();
            for (int i = 0; i < 16; i += 2) {
                t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);     /* per lane: r_i[0] r_i+1[0] r_i[1] r_i+1[1] */
                t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]); /* r_i[2] r_i+1[2] r_i[3] r_i+1[3] */
            }
            for (int i = 0; i < 16; i += 4) { /* r[i + j]: rows i..i+3 of column 4 L + j in 128-bit lane L */
                r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
                r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
                r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
                r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
            }
            for (int j = 0; j < 4; j++) {
                const __m512 ab0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88), ab1 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xDD);
                const __m512 cd0 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
                const __m512 cd1 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xDD);
                t[j] = _mm512_shuffle_f32x4(ab0, cd0, 0x88);
                t[8 + j] = _mm512_shuffle_f32x4(ab0, cd0, 0xDD);
                t[4 + j] = _mm512_shuffle_f32x4(ab1, cd1, 0x88);
                t[12 + j] = _mm512_shuffle_f32x4(ab1, cd1, 0xDD);
            }
            for (int c = 0; c < nc; c++) _mm512_mask_storeu_ps(xt + (size_t)(c0 + c) * ldt + p0, mp, t[c]);
        }
}

/* kernels.h axpy_rows_q: four outputs' 64 columns in registers, each row's 64 columns loaded once for the four; each
 * element the same y + a * x (multiply, then add) for every row in order, so bitwise axpy_rows_v. Other outputs:
 * axpy_rows_v. */
static void axpy_rows_q_v(const float *a, size_t lda, int nq, int n, const float *x, size_t ldx, float *y, size_t ldy,
                          int d) {
    int i = 0;
    for (; i + 4 <= nq; i += 4)
        for (int j0 = 0; j0 < d; j0 += 64) {
            const int m = d - j0 < 64 ? d - j0 : 64;
            __mmask16 mk[4];
            __m512 acc[4][4];
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                const int left = m - 16 * c;
                mk[c] = left >= 16 ? (__mmask16)0xffff : left > 0 ? tail_mask(left) : 0;
            }
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) acc[k][c] = _mm512_maskz_loadu_ps(mk[c], y + (size_t)(i + k) * ldy + j0 + 16 * c);
            const float *ak = a + (size_t)i * lda;
            for (int p = 0; p < n; p++) {
                const float *xp = x + (size_t)p * ldx + j0;
                __m512 xv[4];
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) xv[c] = _mm512_maskz_loadu_ps(mk[c], xp + 16 * c);
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    const __m512 av = _mm512_set1_ps(ak[(size_t)k * lda + (size_t)p]);
#pragma GCC unroll 4
                    for (int c = 0; c < 4; c++) acc[k][c] = _mm512_add_ps(acc[k][c], _mm512_mul_ps(av, xv[c]));
                }
            }
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) _mm512_mask_storeu_ps(y + (size_t)(i + k) * ldy + j0 + 16 * c, mk[c], acc[k][c]);
        }
    for (; i < nq; i++) axpy_rows_v(a + (size_t)i * lda, n, x, ldx, y + (size_t)i * ldy, d);
}

/* kern_act_sums_q4 (kernels_scalar.c): the block sums' pairs and quads in the same order, and each 128 codes' even
 * then odd bytes (a shuffle in each 16-byte lane: its evens then its odds, then the lanes' halves gathered by
 * qword); a last 32 to 96 codes as there. */
static void act_sums_q4_v(int cols, const int8_t *q, int8_t *q4, float *s) {
    const int nb = cols / 32;
    for (int j = 0; j < nb / 2; j++) s[nb + j] = s[2 * j] + s[2 * j + 1];
    for (int j = 0; j < nb / 4; j++) s[nb + nb / 2 + j] = s[nb + 2 * j] + s[nb + 2 * j + 1];
    const __m512i sh = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    const __m512i ev = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14), od = _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15);
    int c0 = 0;
    for (; c0 + 128 <= cols; c0 += 128) {
        const __m512i a = _mm512_shuffle_epi8(_mm512_loadu_si512(q + c0), sh);
        const __m512i b = _mm512_shuffle_epi8(_mm512_loadu_si512(q + c0 + 64), sh);
        _mm512_storeu_si512(q4 + c0, _mm512_permutex2var_epi64(a, ev, b));
        _mm512_storeu_si512(q4 + c0 + 64, _mm512_permutex2var_epi64(a, od, b));
    }
    const int h = (cols - c0) / 2;
    for (int i = 0; i < h; i++) {
        q4[c0 + i] = q[c0 + 2 * i];
        q4[c0 + h + i] = q[c0 + 2 * i + 1];
    }
}

/* kernels.h act_row, kernels_scalar.c's arithmetic on 32 values at once: amax by max (a NaN lane loses to the
 * running max, as there), the same scalar d and 1/d, x * (1/d) rounded to nearest even, NaN to 0, clamped to
 * +-127; exact integer sums. */
static void act_row_v(const float *x, int cols, int8_t *q, int8_t *q4, float *d, float *s) {
    const int nb = cols / 32;
    const __m512 absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff)), lim = _mm512_set1_ps(127.0f);
    for (int b = 0; b < nb; b++) {
        __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
        /* maxps gives its second operand when either is NaN: NaN lanes keep the running max */
        __m512 m = _mm512_max_ps(_mm512_and_ps(v0, absm), _mm512_setzero_ps());
        m = _mm512_max_ps(_mm512_and_ps(v1, absm), m);
        __m256 m8 = _mm256_max_ps(_mm512_castps512_ps256(m), _mm512_extractf32x8_ps(m, 1));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        const float amax = _mm_cvtss_f32(m4), db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        const __m512 iv = _mm512_set1_ps(id);
        __m512i sum = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(h ? v1 : v0, iv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(r, r, _CMP_ORD_Q), r); /* NaN -> 0 */
            r = _mm512_min_ps(_mm512_max_ps(r, _mm512_sub_ps(_mm512_setzero_ps(), lim)), lim);
            __m512i iq = _mm512_cvtps_epi32(r);
            sum = _mm512_add_epi32(sum, iq);
            _mm_storeu_si128((__m128i *)(q + 32 * b + 16 * h), _mm512_cvtepi32_epi8(iq));
        }
        d[b] = db;
        s[b] = db * (float)_mm512_reduce_add_epi32(sum);
    }
    act_sums_q4_v(cols, q, q4, s);
}

/* kernels.h act_row_0, kernels_scalar.c act_row_0's arithmetic on 32 values at once: amax by max (a NaN lane loses,
 * as there), the same scalar 127 / amax and amax / 127, x * id rounded to nearest even (|x * id| <= 127, where the
 * scalar's 1.5 * 2^23 trick is that rounding), NaN to 0, clamped to +-127; exact integer sums; d, s0, s1 by the
 * same scalar f16 conversions (util/dtype.h). */
static void act_row_0_v(const float *x, int cols, int8_t *q, float *d, int8_t *q4, float *s0, float *s1) {
    const __m512 absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff)), lim = _mm512_set1_ps(127.0f);
    for (int b = 0; b < cols / 32; b++) {
        const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
        __m512 m = _mm512_max_ps(_mm512_and_ps(v0, absm), _mm512_setzero_ps()); /* maxps: a NaN lane keeps the max */
        m = _mm512_max_ps(_mm512_and_ps(v1, absm), m);
        const float amax = _mm512_reduce_max_ps(m);
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f, db = amax / 127.0f;
        const __m512 iv = _mm512_set1_ps(id);
        __m512i sum = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(h ? v1 : v0, iv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(r, r, _CMP_ORD_Q), r); /* NaN -> 0 */
            r = _mm512_min_ps(_mm512_max_ps(r, _mm512_sub_ps(_mm512_setzero_ps(), lim)), lim);
            const __m512i iq = _mm512_cvtps_epi32(r);
            sum = _mm512_add_epi32(sum, iq);
            _mm_storeu_si128((__m128i *)(q + 32 * b + 16 * h), _mm512_cvtepi32_epi8(iq));
        }
        const float sf = (float)_mm512_reduce_add_epi32(sum);
        d[b] = f16_to_f32(f32_to_f16(db));
        s0[b] = d[b] * sf;
        s1[b] = f16_to_f32(f32_to_f16(db * sf));
    }
    act_sums_q4_v(cols, q, q4, s1);
    act_sums_q4_v(cols, q, q4, s0);
}

/* ---- attention's softmax ---------------------------------------------------------------------- */

/* glibc's expf (sysdeps/ieee754/flt-32/e_expf.c, as its FMA build __expf_fma, the one an AVX-512 CPU runs,
 * computes it: k = round(x N/ln2) by x * InvLn2N + shift fused, r = x * InvLn2N - k fused, s = 2^(k/N) from the
 * table __exp2f_data.tab (N = 32, softmax_common.h) and the exponent bits, y = (C0 r + C1) r^2 + (C2 r + 1) by three
 * FMAs, times s, rounded to float) on 8 floats in double lanes. Bitwise expf where -0x1.9d1d9ep6 <= x <=
 * 0x1.62e42ep6 (its main path); exp_lanes takes the other lanes. */
static inline __m256 expf8_main(__m256 x, const __m512d tab[4]) {
    const __m512d invln2n = _mm512_set1_pd(0x1.71547652b82fep+5), shift = _mm512_set1_pd(0x1.8p52);
    const __m512d xd = _mm512_cvtps_pd(x);
    __m512d kd = _mm512_fmadd_pd(invln2n, xd, shift);
    const __m512i ki = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, shift);
    const __m512d r = _mm512_fmsub_pd(invln2n, xd, kd);
    const __m512d lo = _mm512_permutex2var_pd(tab[0], ki, tab[1]), hi = _mm512_permutex2var_pd(tab[2], ki, tab[3]);
    const __mmask8 up = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
    const __m512i t = _mm512_add_epi64(_mm512_castpd_si512(_mm512_mask_blend_pd(up, lo, hi)), _mm512_slli_epi64(ki, 47));
    const __m512d z = _mm512_fmadd_pd(r, _mm512_set1_pd(0x1.c6af84b912394p-20), _mm512_set1_pd(0x1.ebfce50fac4f3p-13));
    __m512d y = _mm512_fmadd_pd(r, _mm512_set1_pd(0x1.62e42ff0c52d6p-6), _mm512_set1_pd(1.0));
    y = _mm512_fmadd_pd(z, _mm512_mul_pd(r, r), y);
    return _mm512_cvtpd_ps(_mm512_mul_pd(y, _mm512_castsi512_pd(t)));
}

/* sc[p] = expf(sc[p] - mx), p < n: expf8_main's lanes; below -0x1.9fe368p6 (and -inf) expf's +0 (its underflow:
 * 0x1p-95f squared); the rest (NaN, overflow, the band where glibc may set errno) by expf itself. */
static void exp_lanes(float *sc, int n, float mx, const __m512d tab[4]) {
    const __m256 m = _mm256_set1_ps(mx), lo = _mm256_set1_ps(-0x1.9d1d9ep6f), hi = _mm256_set1_ps(0x1.62e42ep6f);
    const __m256 zlo = _mm256_set1_ps(-0x1.9fe368p6f);
    for (int p = 0; p < n; p += 8) {
        const __mmask8 mk = (__mmask8)(n - p >= 8 ? 0xff : (1u << (n - p)) - 1);
        const __m256 x = _mm256_sub_ps(_mm256_maskz_loadu_ps(mk, sc + p), m);
        __m256 y = expf8_main(x, tab);
        const __mmask8 ok = _mm256_cmp_ps_mask(x, lo, _CMP_GE_OQ) & _mm256_cmp_ps_mask(x, hi, _CMP_LE_OQ);
        if ((ok & mk) != mk) {
            const __mmask8 zero = _mm256_cmp_ps_mask(x, zlo, _CMP_LT_OQ);
            y = _mm256_mask_blend_ps(zero, y, _mm256_setzero_ps());
            const unsigned rest = mk & (unsigned)~ok & (unsigned)~zero;
            if (rest) {
                float xs[8], ys[8];
                _mm256_storeu_ps(xs, x);
                _mm256_storeu_ps(ys, y);
                for (int i = 0; i < 8; i++)
                    if (rest >> i & 1) ys[i] = expf(xs[i]);
                y = _mm256_loadu_ps(ys);
            }
        }
        _mm256_mask_storeu_ps(sc + p, mk, y);
    }
}

/* kernels.h softmax_rows, eight rows at a time: each row's scaling and max in 16 lanes (max is exact in any
 * order; a NaN score never wins, as in the scalar loop; +0 and -0 give the same differences), exp_lanes, then the
 * eight rows' sums in double side by side, each in increasing p as kern_softmax_row's, and the divisions. The
 * scaling pass asks for the row 2 KB ahead: a prefill block's scores are megabytes, out of the caches when their
 * softmax comes, and the hardware's streams stop at the 4 KB pages (0.90-1.03 ns a score of 8192 without it, 0.63-0.64
 * with it, 1024 B ahead 0.65-0.68, 4096 B 0.63-0.64, over a block of 64 tokens x 8 rows after its other passes). */
static void softmax_rows_v(float *sc, size_t ld, int nr, int n, float scale, const float *sinks) {
    __m512d tab[4];
    for (int i = 0; i < 4; i++) tab[i] = _mm512_loadu_pd((const double *)(const void *)(exp2f_tab + 8 * i));
    for (int r0 = 0; r0 < nr; r0 += 8) {
        const int m = nr - r0 < 8 ? nr - r0 : 8;
        float mx[8];
        double sum[8];
        for (int i = 0; i < m; i++) {
            float *row = sc + (size_t)(r0 + i) * ld;
            __m512 vm = _mm512_set1_ps(sinks ? sinks[r0 + i] : -INFINITY);
            const __m512 vs = _mm512_set1_ps(scale);
            for (int p = 0; p < n; p += 16) {
                const __mmask16 mk = n - p >= 16 ? (__mmask16)0xffff : tail_mask(n - p);
                _mm_prefetch((const char *)(row + p) + 2048, _MM_HINT_T0); /* past a 4 KB page: no fault, a hint */
                const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, row + p), vs);
                _mm512_mask_storeu_ps(row + p, mk, v);
                vm = _mm512_mask_max_ps(vm, mk, v, vm);
            }
            mx[i] = _mm512_reduce_max_ps(vm);
            exp_lanes(row, n, mx[i], tab);
            sum[i] = sinks ? (double)expf(sinks[r0 + i] - mx[i]) : 0.0;
        }
        softmax_sums(sc, ld, r0, m, 8, n, sum);
        for (int i = 0; i < m; i++) {
            float *row = sc + (size_t)(r0 + i) * ld;
            const __m512 vf = _mm512_set1_ps((float)sum[i]);
            for (int p = 0; p < n; p += 16) {
                const __mmask16 mk = n - p >= 16 ? (__mmask16)0xffff : tail_mask(n - p);
                _mm512_mask_storeu_ps(row + p, mk, _mm512_div_ps(_mm512_maskz_loadu_ps(mk, row + p), vf));
            }
        }
    }
}

#include "kernels/kv_x86.h"

/* ---- table ------------------------------------------------------------------------------------ */

static const kern_ops avx512_ops = {
    .name = "avx512",
    .matmul = TILE_MATMUL,
    .matmul_i8 = {[DT_Q8] = i8_mm_DT_Q8, [DT_Q4] = mmi8_q4, KQ_I8_ENTRIES(kern_kq_i8_avx512)},
    .dot = dot_v,
    .act_row = act_row_v,
    .act_row_0 = act_row_0_v,
    .axpy = axpy_v,
    .axpy_rows = axpy_rows_v,
    .dot_rows = dot_rows_v,
    .dot_rows_q = dot_rows_q_v,
    .dot_cols_q = dot_cols_q_v,
    .transpose = transpose_v,
    .axpy_rows_q = axpy_rows_q_v,
    .kv_decode = kv_decode_x86,
    .softmax_rows = softmax_rows_v,
    .rmsnorm = plain_rmsnorm,
    .swiglu = plain_swiglu,
};

const kern_ops *kern_avx512_ops(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                   __builtin_cpu_supports("avx512vnni")
               ? &avx512_ops
               : NULL;
}

#else
const kern_ops *kern_avx512_ops(void) { return NULL; }
#endif
