/*
 * kernels_avx512.h — the AVX-512 int8-activation pieces (VNNI's vpdpbusd on 512-bit vectors) that kernels_avx512.c
 * (the table, kernels_tile_i8.h's driver over them) and kernels_avx512_i8p.c (the q4 prefill kernel) share: a
 * step's 16 lanes in one vector, the codes of a row block held while each token's activations are read once.
 * Include it in files compiled with kernels_avx512.c's flags (the Makefile), inside their x86-64 guard.
 * Internal to src/kernels/.
 */
#ifndef SL_KERNELS_AVX512_H
#define SL_KERNELS_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "kernels/kernels_i8_x86.h"

static inline __mmask16 tail_mask(int n) { return (__mmask16)((1u << n) - 1u); } /* n < 16 */

#define I8_KTOK 16
#define I8_PARTS 1
#define I8_ROWS_OUTER 0
typedef __m512 i8v;
typedef struct {
    __m512i lo, hi; /* q8: the codes (hi unused); q4: low, high nibbles */
    __m512 sv;      /* the lanes' scales */
} i8w;
typedef struct {
    __m512i xe, xo; /* q8: the codes (xo unused); q4: the even and the odd columns */
    __m512 dv;      /* the lanes' block scales */
} i8x;
#include "kernels/kernels_tile_i8.h"

/* [p0 x8, p1 x8] and [p0 x4, .., p3 x4] from consecutive floats */
static inline __m512 i8_x8(const float *p) {
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                 _mm512_castps128_ps512(_mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(const void *)p))));
}
static inline __m512 i8_x4(const float *p) {
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                 _mm512_castps128_ps512(_mm_loadu_ps(p)));
}

/* h[i] = acc[i] + acc[i+8] */
static inline __m256 i8_half(__m512 v) { return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)); }

/* i8_bias over row r's biases read in place (the same conversions and FMAs). */
static inline __m256 i8_bias_row(const tn_mat *w, int r, int ng, const float *xs) {
    const size_t o = (size_t)r * (size_t)ng;
    __m256 acc = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= ng; j += 8) {
        __m256 bv;
        if (w->sdtype == DT_F32) bv = _mm256_loadu_ps((const float *)w->biases + o + j);
        else {
            __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w->biases + o + j));
            bv = w->sdtype == DT_BF16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                                      : _mm256_cvtph_ps(h);
        }
        acc = _mm256_fmadd_ps(bv, _mm256_loadu_ps(xs + j), acc);
    }
    if (j < ng) { /* masked: lanes past ng keep their value (a -0 stays -0) */
        const __mmask8 mk = (__mmask8)((1u << (ng - j)) - 1u);
        __m256 bv;
        if (w->sdtype == DT_F32) bv = _mm256_maskz_loadu_ps(mk, (const float *)w->biases + o + j);
        else {
            __m128i h = _mm_maskz_loadu_epi16(mk, (const uint16_t *)w->biases + o + j);
            bv = w->sdtype == DT_BF16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                                      : _mm256_cvtph_ps(h);
        }
        acc = _mm256_mask3_fmadd_ps(bv, _mm256_maskz_loadu_ps(mk, xs + j), acc, mk);
    }
    return acc;
}

/* i8_bias_row with the biases computed from the row's f32 scales sf: zb * sf[j] (zb = -128 / -8), the values a
 * matrix with tn_mat.bias_implied stores, so the same FMAs on the same values; the biases are never read. */
static inline __m256 i8_bias_sf(const float *sf, float zb, int ng, const float *xs) {
    const __m256 z = _mm256_set1_ps(zb);
    __m256 acc = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= ng; j += 8) acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(sf + j), z), _mm256_loadu_ps(xs + j), acc);
    if (j < ng) {
        const __mmask8 mk = (__mmask8)((1u << (ng - j)) - 1u);
        acc = _mm256_mask3_fmadd_ps(_mm256_mul_ps(_mm256_maskz_loadu_ps(mk, sf + j), z), _mm256_maskz_loadu_ps(mk, xs + j),
                                    acc, mk);
    }
    return acc;
}

static inline void i8_row_tail(const tn_mat *m, const uint16_t *h, int j, int ng, float *out) {
    const __mmask8 mk = (__mmask8)((1u << (ng - j)) - 1u);
    __m128i v = _mm_maskz_loadu_epi16(mk, h + j);
    _mm256_mask_storeu_ps(out + j, mk, m->sdtype == DT_BF16
                                           ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16))
                                           : _mm256_cvtph_ps(v));
}

static inline __m512 i8_zero(void) { return _mm512_setzero_ps(); }

/* q8 lanes hold 4 columns (a step is blocks k, k+1), q4 lanes 8 (blocks k .. k+3). */
static inline i8w i8_loadw(dt_type dt, const uint8_t *q, const float *sf, int c0, int p, int gsh) {
    const int k = c0 / 32; /* first block of the step */
    i8w w;
    if (dt == DT_Q8) {
        w.lo = _mm512_loadu_si512(q + c0);
        w.hi = _mm512_setzero_si512();
        w.sv = gsh ? _mm512_set1_ps(sf[k >> gsh]) : i8_x8(&sf[k]);
    } else {
        const __m512i c = _mm512_loadu_si512(q + c0 / 2), m4 = _mm512_set1_epi8(15);
        w.lo = _mm512_and_si512(c, m4);
        w.hi = _mm512_and_si512(_mm512_srli_epi16(c, 4), m4);
        w.sv = gsh == 0 ? i8_x4(&sf[k]) : gsh == 1 ? i8_x8(&sf[k >> 1]) : _mm512_set1_ps(sf[k >> 2]);
    }
    return w;
}

static inline i8x i8_loadx(dt_type dt, const int8_t *xq, const float *d, int c0, int p) {
    d += c0 / 32;
    i8x x;
    if (dt == DT_Q8) {
        x.xe = _mm512_loadu_si512(xq + c0);
        x.xo = _mm512_setzero_si512();
        x.dv = i8_x8(d);
    } else {
        x.xe = _mm512_loadu_si512(xq + c0);
        x.xo = _mm512_loadu_si512(xq + c0 + 64);
        x.dv = i8_x4(d);
    }
    return x;
}

static inline __m512 i8_fma(dt_type dt, i8w w, i8x x, __m512 acc) {
    const __m512i z = _mm512_setzero_si512();
    const __m512i I = dt == DT_Q8 ? _mm512_dpbusd_epi32(z, w.lo, x.xe)
                                  : _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, w.lo, x.xe), w.hi, x.xo);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(w.sv, x.dv), acc);
}

static inline void i8_store(const __m512 *acc, float *a16) { _mm512_storeu_ps(a16, acc[0]); }

/* The 4 rows' outputs of each token at once: the halves, the bias lanes (biases read in place, or computed from
 * the scales when implied), the lane trees of the 4 by hadd. */
static inline void i8_fin4(dt_type dt, const i8_blk *B, const tn_mat *w, const kern_act *a, int r, int t0, int nt,
                           __m512 (*acc)[I8_RB][I8_PARTS], float *y, size_t ldy) {
    const float zb = dt == DT_Q8 ? -128.0f : -8.0f;
    for (int t = 0; t < nt; t++) {
        const size_t tt = (size_t)(t0 + t);
        const float *xs = a->s + tt * (size_t)B->ns + B->soff;
        __m256 b[I8_RB];
#pragma GCC unroll 4
        for (int i = 0; i < I8_RB; i++)
            b[i] = w->bias_implied ? i8_bias_sf(B->sf[i], zb, B->ng, xs) : i8_bias_row(w, r + i, B->ng, xs);
        _mm_storeu_ps(y + tt * ldy + (size_t)r,
                      _mm_add_ps(i8_tree4(i8_half(acc[t][0][0]), i8_half(acc[t][1][0]), i8_half(acc[t][2][0]),
                                          i8_half(acc[t][3][0])),
                                 i8_tree4(b[0], b[1], b[2], b[3])));
    }
}

/* kernels_avx512_i8p.c: kern_matmul_act's rows [r0, r1) of a q4 matrix over a->n_tok > 1 tokens, bitwise i8_mm_DT_Q4.
 * -1 (nothing written) where it does not apply (one token, fewer than 128 or too many columns, no workspace). */
int kern_avx512_q4_prefill(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1);

#endif
