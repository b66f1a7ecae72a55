/*
 * kernels_avx512.c — the AVX-512 table (F + BW + VL + DQ, FMA, F16C; compiled with those flags; x86-64).
 *
 * The AVX2 design (kernels_avx2.c) with 16 lanes: each y[t][r] keeps one 16-lane FMA accumulator
 * (lane = column % 16) across all chunks, a ragged tail uses masked loads, and the lanes are combined in
 * a fixed tree, so results depend only on the column count (kernels.h). Dequantisation widens 16 codes
 * per step; q3 looks its 8 levels up with one permutexvar. The int8-activation q8/q4 kernels
 * (kern_matmul_act) use VNNI's vpdpbusd (kernels_i8_x86.h), so this table needs AVX512-VNNI too (a CPU
 * without it gets the AVX2 table). AVX512-BF16 is not used: it rounds activations to bf16.
 *
 * Sections: dequantisation, matmul, small vector kernels, the table.
 */
#include "kernels/kernels.h"
#include "kernels/kernels_plain.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

typedef __m512 tile_acc;
#include "kernels/kernels_tile.h"

/* ---- dequantisation --------------------------------------------------------------------------- */

static inline __m512 scale16(const sl_mat *m, size_t i) { return _mm512_set1_ps(q_scale_at(m->scales, m->sdtype, i)); }
static inline __m512 bias16(const sl_mat *m, size_t i) { return _mm512_set1_ps(q_scale_at(m->biases, m->sdtype, i)); }

static inline __mmask16 tail_mask(int n) { return (__mmask16)((1u << n) - 1u); } /* n < 16 */

/* [nc] f32 weights of row r from column c0: a pointer into m for f32, else dequantised into buf. */
static inline __attribute__((always_inline)) const float *tile_load(sl_dtype dt, const sl_mat *m, int r, int c0,
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
 * follows far better than RB rows side by side (i8_rows_1tok). */
static inline __attribute__((always_inline)) void mm_1tok(sl_dtype dt, const sl_mat *w, const float *x, float *y,
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

static inline int tile_one_token(sl_dtype dt, const sl_mat *w, const float *x, float *y, int r0, int r1) {
    if (dt != DT_F32 && dt != DT_F16 && dt != DT_BF16) return 0;
    mm_1tok(dt, w, x, y, r0, r1);
    return 1;
}

static inline float tile_sum(__m512 v) { return lanes_sum(v); }
static inline __m512 tile_zero(void) { return _mm512_setzero_ps(); }

/* ---- int8-activation matmul (kernels.h: kern_matmul_act): VNNI's vpdpbusd on 512-bit vectors ----- */

#include "kernels/kernels_i8_x86.h"

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
static inline __m256 i8_bias_row(const sl_mat *w, int r, int ng, const float *xs) {
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
 * matrix with sl_mat.bias_implied stores, so the same FMAs on the same values; the biases are never read. */
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

/* Prefetches n bytes from p on, one line at a time, into L2. */
static inline void i8_pf_lines(const void *p, size_t n) {
    for (size_t o = 0; o < n; o += 64) _mm_prefetch((const char *)p + o, I8_PFH);
}

/* i8_block's steps for one token (decode), row after row: each row's accumulator takes the same FMAs in the same
 * order as in the loop below, so the same bits, but the row block is read front to back as one stream. Reading its
 * rows side by side (one 64-byte line of each in turn) made the hardware prefetcher follow four streams a page
 * apart: a read loop in that order ran at ~15 GB/s on 2 threads where the same bytes in order ran at ~35, and the
 * kernel read ~25 GB/s even with the software prefetch. Rows past nr are not computed (i8_block discards them).
 * acc[i] of rows < nr receives the lanes; returns the first column not done (the short last step's). */
static inline __attribute__((always_inline)) int i8_rows_1tok(sl_dtype dt, const i8_blk *B, const kern_act *a, int t0,
                                                                int nr, size_t pf, __m512 *acc) {
    const int cols = B->cols, gsh = B->gsh, step = dt == DT_Q8 ? 64 : 128, last = cols / step * step;
    const size_t tt = (size_t)t0;
    const float *d0 = a->d + tt * (size_t)B->nb;
    const __m512i m4 = _mm512_set1_epi8(15), z = _mm512_setzero_si512();
#pragma GCC unroll 1
    for (int i = 0; i < nr; i++) {
        const uint8_t *qr = B->qr[i];
        const float *sf = B->sf[i];
        __m512 ac = _mm512_setzero_ps();
        for (int c = 0; c < last; c += step) {
            const int k = c / 32; /* first block of the step */
            if (dt == DT_Q8) {
                const __m512i lo = _mm512_loadu_si512(qr + c);
                _mm_prefetch((const char *)(qr + c) + pf, I8_PFH);
                const __m512 sv = gsh ? _mm512_set1_ps(sf[k >> gsh]) : i8_x8(&sf[k]);
                const __m512i xv = _mm512_loadu_si512(a->q + tt * (size_t)cols + c);
                ac = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(z, lo, xv)), _mm512_mul_ps(sv, i8_x8(d0 + k)), ac);
            } else {
                const __m512i cc = _mm512_loadu_si512(qr + c / 2);
                _mm_prefetch((const char *)(qr + c / 2) + pf, I8_PFH);
                const __m512i lo = _mm512_and_si512(cc, m4), hi = _mm512_and_si512(_mm512_srli_epi16(cc, 4), m4);
                const __m512 sv = gsh == 0 ? i8_x4(&sf[k]) : gsh == 1 ? i8_x8(&sf[k >> 1]) : _mm512_set1_ps(sf[k >> 2]);
                const int8_t *xq = a->q4 + tt * (size_t)cols + c;
                const __m512i xe = _mm512_loadu_si512(xq), xo = _mm512_loadu_si512(xq + 64);
                ac = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, lo, xe), hi, xo)),
                                     _mm512_mul_ps(sv, i8_x4(d0 + k)), ac);
            }
        }
        acc[i] = ac;
    }
    return last;
}

static inline __attribute__((always_inline)) void i8_block(sl_dtype dt, const sl_mat *w, const kern_act *a,
                                                             float *y, size_t ldy, int r, int nr, int t0, int nt) {
    i8_blk B;
    i8_blk_init(&B, dt, w, r, nr);
    const int cols = B.cols, nb = B.nb, gsh = B.gsh, step = dt == DT_Q8 ? 64 : 128, implied = w->bias_implied;
    const float zb = dt == DT_Q8 ? -128.0f : -8.0f;
    { /* the scales (and biases) of the row block I8_PFB blocks on, as the codes are below: their own streams */
        const int rp = r + I8_PFB * I8_RB;
        if (rp + I8_RB <= w->rows) {
            const size_t ss = w->sdtype == DT_F32 ? 4 : 2, o = (size_t)rp * (size_t)B.ng * ss, n = (size_t)I8_RB * (size_t)B.ng * ss;
            i8_pf_lines((const char *)w->scales + o, n);
            if (!implied) i8_pf_lines((const char *)w->biases + o, n);
        }
    }
    __m512 acc[I8_KTOK][I8_RB];
    for (int t = 0; t < nt; t++)
#pragma GCC unroll 4
        for (int i = 0; i < I8_RB; i++) acc[t][i] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(15), z = _mm512_setzero_si512();
    /* the same place I8_PFB row blocks further on (rows are contiguous, a block is I8_RB rows) */
    const size_t pf = (size_t)I8_PFB * I8_RB * (size_t)cols / (dt == DT_Q4 ? 2 : 1);
    int c0 = 0;
    if (nt == 1) c0 = i8_rows_1tok(dt, &B, a, t0, nr, pf, acc[0]); /* then the loop below has nothing left */
    for (; c0 + step <= cols; c0 += step) {
        const int k = c0 / 32; /* first block of the step */
        __m512i lo[I8_RB], hi[I8_RB];
        __m512 sv[I8_RB];
#pragma GCC unroll 4
        for (int i = 0; i < I8_RB; i++) {
            if (dt == DT_Q8) {
                lo[i] = _mm512_loadu_si512(B.qr[i] + c0);
                _mm_prefetch((const char *)(B.qr[i] + c0) + pf, I8_PFH);
                hi[i] = z;
                sv[i] = gsh ? _mm512_set1_ps(B.sf[i][k >> gsh]) : i8_x8(&B.sf[i][k]);
            } else {
                __m512i c = _mm512_loadu_si512(B.qr[i] + c0 / 2);
                _mm_prefetch((const char *)(B.qr[i] + c0 / 2) + pf, I8_PFH);
                lo[i] = _mm512_and_si512(c, m4);
                hi[i] = _mm512_and_si512(_mm512_srli_epi16(c, 4), m4);
                sv[i] = gsh == 0 ? i8_x4(&B.sf[i][k]) : gsh == 1 ? i8_x8(&B.sf[i][k >> 1]) : _mm512_set1_ps(B.sf[i][k >> 2]);
            }
        }
        for (int t = 0; t < nt; t++) {
            const size_t tt = (size_t)(t0 + t);
            const float *d = a->d + tt * (size_t)nb + k;
            if (dt == DT_Q8) {
                __m512i xv = _mm512_loadu_si512(a->q + tt * (size_t)cols + c0);
                __m512 dv = i8_x8(d);
#pragma GCC unroll 4
                for (int i = 0; i < I8_RB; i++)
                    acc[t][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(z, lo[i], xv)),
                                                _mm512_mul_ps(sv[i], dv), acc[t][i]);
            } else {
                const int8_t *xq = a->q4 + tt * (size_t)cols + c0;
                __m512i xe = _mm512_loadu_si512(xq), xo = _mm512_loadu_si512(xq + 64);
                __m512 dv = i8_x4(d);
#pragma GCC unroll 4
                for (int i = 0; i < I8_RB; i++)
                    acc[t][i] = _mm512_fmadd_ps(
                        _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, lo[i], xe), hi[i], xo)),
                        _mm512_mul_ps(sv[i], dv), acc[t][i]);
            }
        }
    }
    if (c0 == cols && nr == I8_RB) { /* no short step: the 4 rows' sums at once, in the same order */
        for (int t = 0; t < nt; t++) {
            const size_t tt = (size_t)(t0 + t);
            const float *xs = a->s + tt * (size_t)B.ns + B.soff;
            __m256 b[I8_RB];
#pragma GCC unroll 4
            for (int i = 0; i < I8_RB; i++) b[i] = implied ? i8_bias_sf(B.sf[i], zb, B.ng, xs) : i8_bias_row(w, r + i, B.ng, xs);
            _mm_storeu_ps(y + tt * ldy + (size_t)r,
                          _mm_add_ps(i8_tree4(i8_half(acc[t][0]), i8_half(acc[t][1]), i8_half(acc[t][2]), i8_half(acc[t][3])),
                                     i8_tree4(b[0], b[1], b[2], b[3])));
        }
        return;
    }
    for (int i = 0; i < nr; i++) {
        float bi[I8_MAXG], a16[16];
        if (implied)
            for (int j = 0; j < B.ng; j++) bi[j] = zb * B.sf[i][j];
        else
            i8_row_f32(w, w->biases, r + i, B.ng, bi);
        for (int t = 0; t < nt; t++) {
            const size_t tt = (size_t)(t0 + t);
            _mm512_storeu_ps(a16, acc[t][i]);
            i8_out(dt, &B, w, a, bi, i, tt, c0, a16, y + tt * ldy + (size_t)(r + i));
        }
    }
}

/* ---- int8 prefill (several tokens): q4 ------------------------------------------------------------
 * The same canonical arithmetic as i8_block (kernels.h), arranged for many tokens. i8_block spends five
 * vector ops per (row, token, step of 128 columns): two vpdpbusd, the int->float conversion, the scale
 * product sv * dv and the FMA, with 64 accumulators that live on the stack. Here:
 *  - the products sd = scale(group) * d_b are computed once per (row, token, block) before the steps, 16
 *    at a time, and read back as a 128-bit broadcast load ([sd of the step's 4 blocks] x 4) -- a load, not a
 *    vector op. That needs the step's 16 lanes in a different physical order: physical lane p holds
 *    canonical lane pi(p) = 4 (p % 4) + p / 4 (block p % 4; i8p_pi), so the codes and the activations of a step
 *    are permuted by dwords (a dword is one lane's 4 bytes, for both nibbles), the codes once per row block
 *    and token block, the activations once per call; the lanes go back to canonical order (the same
 *    permutation: it is its own inverse) before the final sums, so every lane is the same FMA chain;
 *  - a register tile of 4 rows x up to 4 tokens keeps its 16 accumulators in registers over a chunk of
 *    I8P_KC steps, reading the unpacked codes from an L1 scratch;
 *  - up to 64 tokens per block (256 KiB of activations, L2-resident) instead of 16, so each code byte is unpacked,
 *    and each row block's scales, biases and bias sums set up, once per 64: a micro-batch's attention projections
 *    (64 tokens, even o's 4096 columns) and most experts of a 512-token prefill (~32 tokens, up to ~60) in one
 *    block, where 32 (and 64 KiB) split o into four and a 40-token expert into two;
 *  - the bias lanes (accb, lane = group % 8) of 32 tokens a pass per row (two 16-token vectors), over the
 *    tokens' group sums transposed, instead of one 8-lane pass per output.
 *  - those bias sums first, so that a whole tile's last chunk writes its 16 outputs from its registers, the lane
 *    trees of all 16 as vector adds (i8p_fin16), not spilled and reduced one token at a time.
 * Its ~310 KB of buffers are a per-thread workspace, not stack (frames < 4 KB): the library runs on its
 * callers' threads (musl's default stack is 128 KiB).
 * docs/PERFORMANCE.md gives what it reaches against a register-only vpdpbusd loop. */
#define I8P_KC 16        /* steps (128 columns) per chunk of a row block */
#define I8P_TB 64        /* most tokens per block */
#define I8P_XB 262144    /* bytes of permuted activations per block of tokens */
#define I8P_MAXGT 128    /* most groups per row for the transposed bias pass */

/* The workspace: xp, st, then i8p_rows' accm, U, P, row block and a row's biases. */
enum {
    I8P_WS_ST = I8P_XB,
    I8P_WS_ACC = I8P_WS_ST + I8P_MAXGT * I8P_TB * 4,
    I8P_WS_U = I8P_WS_ACC + I8P_TB * I8_RB * 64,
    I8P_WS_P = I8P_WS_U + I8P_KC * I8_RB * 128,
    I8P_WS_BLK = I8P_WS_P + 4 * I8_RB * 4 * I8P_KC * 4,
    I8P_WS_BI = I8P_WS_BLK + (int)(sizeof(i8_blk) + 63) / 64 * 64,
    I8P_WS_BYTES = I8P_WS_BI + I8_MAXG * 4,
};

static pthread_key_t i8p_key;
static int i8p_key_ok;
static void i8p_key_make(void) { i8p_key_ok = pthread_key_create(&i8p_key, free) == 0; }

/* This thread's workspace (freed when it exits), or NULL: then the one-block kernel runs (the same bits). */
static uint8_t *i8p_ws(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    if (pthread_once(&once, i8p_key_make) || !i8p_key_ok) return NULL;
    uint8_t *ws = pthread_getspecific(i8p_key);
    if (ws) return ws;
    ws = aligned_alloc(64, I8P_WS_BYTES);
    if (ws && pthread_setspecific(i8p_key, ws)) {
        free(ws);
        ws = NULL;
    }
    return ws;
}

static inline __m512i i8p_pi(void) { return _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15); }

/* Scales of row sf (f32, one per group) for the 16 blocks b0 .. b0+15, the first nb of them (the rest 0). */
static inline __m512 i8p_sfb(const float *sf, int gsh, int b0, int nb) {
    nb = nb < 16 ? nb : 16;
    const __mmask16 mk = nb == 16 ? (__mmask16)0xffff : tail_mask(nb);
    if (gsh == 0) return _mm512_maskz_loadu_ps(mk, sf + b0);
    /* groups of 64 / 128: 8 / 4 scales, each repeated 2 / 4 times (b0 is a multiple of 4) */
    const int ng = (nb + (1 << gsh) - 1) >> gsh;
    const __m512 v = _mm512_maskz_loadu_ps(tail_mask(ng), sf + (b0 >> gsh));
    const __m512i ix = gsh == 1 ? _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7)
                                : _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_maskz_permutexvar_ps(mk, ix, v);
}

/* The final sums of 4 tokens x 4 rows at once: acc [token][row] in the permuted lane order (lane p holds
 * canonical lane pi(p)), bm [row][I8P_TB] the rows' bias sums from these tokens on; y[t * ldy + i] =
 * lane tree(acc[t][i]) + bm[i][t]. Each output is the same tree as i8_half and i8_tree4 after the permutation
 * back (h_l = c_l + c_(l+8), then ((h0+h1)+(h2+h3))+((h4+h5)+(h6+h7))), its adds done 16 outputs a vector: c_l
 * is lane m of 128-bit chunk a for l = 4m + a, so h_l pairs positions m and m+2 of a chunk (shuffle_ps),
 * h_a + h_(a+1) pairs chunks (shuffle_f32x4), and the accumulators enter in the order that leaves output
 * (t, i) in lane 4t + i. About 60 vector ops for 16 outputs, where the permutation, the halves, the hadds and the
 * bias's inserts took about 90 (docs/PERFORMANCE.md "At scale" §3: the down projection's 6 steps an output). */
static inline void i8p_fin16(const __m512 *acc, const float *bm, float *y, size_t ldy) {
    static const int ord[16] = {0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15};
    __m512 v[8], w[4], z[2];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        const __m512 a = acc[ord[2 * k]], b = acc[ord[2 * k + 1]];
        v[k] = _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x44), _mm512_shuffle_ps(a, b, 0xEE));
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0x88), _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0xDD));
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++)
        z[k] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], 0x88), _mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], 0xDD));
    const __m512 f = _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], 0x88), _mm512_shuffle_ps(z[0], z[1], 0xDD));
    /* bm rows' 4 tokens as [row][token], transposed to [token][row] by the same index pattern as i8p_pi */
    __m512 b = _mm512_castps128_ps512(_mm_loadu_ps(bm));
    b = _mm512_insertf32x4(b, _mm_loadu_ps(bm + I8P_TB), 1);
    b = _mm512_insertf32x4(b, _mm_loadu_ps(bm + 2 * I8P_TB), 2);
    b = _mm512_insertf32x4(b, _mm_loadu_ps(bm + 3 * I8P_TB), 3);
    const __m512 o = _mm512_add_ps(f, _mm512_permutexvar_ps(i8p_pi(), b));
    _mm_storeu_ps(y, _mm512_castps512_ps128(o));
    _mm_storeu_ps(y + ldy, _mm512_extractf32x4_ps(o, 1));
    _mm_storeu_ps(y + 2 * ldy, _mm512_extractf32x4_ps(o, 2));
    _mm_storeu_ps(y + 3 * ldy, _mm512_extractf32x4_ps(o, 3));
}

/* One row's bias lanes (accb, lane l = group % 8) for TT x 16 tokens: st [group][I8P_TB] the tokens' group sums
 * from the first of them, bi the row's ng biases; bm[t] = the lane tree of token t's 8 lanes. Each lane the same
 * FMAs in group order as i8_bias, 16 tokens a vector. */
static inline __attribute__((always_inline)) void i8p_bias_lanes(const float *bi, int ng, const float *st, const int TT,
                                                                   float *bm) {
    __m512 v[2][8];
#pragma GCC unroll 2
    for (int c = 0; c < TT; c++)
#pragma GCC unroll 8
        for (int l = 0; l < 8; l++) v[c][l] = _mm512_setzero_ps();
    int j = 0;
    for (; j + 8 <= ng; j += 8)
#pragma GCC unroll 8
        for (int l = 0; l < 8; l++) {
            const __m512 b = _mm512_set1_ps(bi[j + l]);
#pragma GCC unroll 2
            for (int c = 0; c < TT; c++)
                v[c][l] = _mm512_fmadd_ps(b, _mm512_load_ps(st + (size_t)(j + l) * I8P_TB + 16 * c), v[c][l]);
        }
    for (int l = 0; j + l < ng; l++) {
        const __m512 b = _mm512_set1_ps(bi[j + l]);
        for (int c = 0; c < TT; c++) v[c][l] = _mm512_fmadd_ps(b, _mm512_load_ps(st + (size_t)(j + l) * I8P_TB + 16 * c), v[c][l]);
    }
#pragma GCC unroll 2
    for (int c = 0; c < TT; c++)
        _mm512_store_ps(bm + 16 * c, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(v[c][0], v[c][1]), _mm512_add_ps(v[c][2], v[c][3])),
                                                   _mm512_add_ps(_mm512_add_ps(v[c][4], v[c][5]), _mm512_add_ps(v[c][6], v[c][7]))));
}

/* The tile: rows 0..3 of the block (unpacked codes U: [step][row][lo 64 | hi 64]) against TT tokens (xp, one
 * token every xs bytes: [step][even 64 | odd 64], permuted), over ns steps; products P: [token][row][4 ns]
 * floats (one pair every 4 * I8P_KC floats); accumulators in accm [token][row], zero when first. */
static inline __attribute__((always_inline)) void i8p_tile(const uint8_t *U, const uint8_t *xp, size_t xs,
                                                             const float *P, int ns, __m512 *accm, int first,
                                                             const int TT, const float *bm, float *y, size_t ldy) {
    __m512 acc[4][I8_RB];
    for (int j = 0; j < TT; j++)
#pragma GCC unroll 4
        for (int i = 0; i < I8_RB; i++) acc[j][i] = first ? _mm512_setzero_ps() : accm[j * I8_RB + i];
    const __m512i z = _mm512_setzero_si512();
    for (int s = 0; s < ns; s++) {
        __m512i lo[I8_RB], hi[I8_RB];
#pragma GCC unroll 4
        for (int i = 0; i < I8_RB; i++) {
            lo[i] = _mm512_load_si512(U + ((size_t)s * I8_RB + (size_t)i) * 128);
            hi[i] = _mm512_load_si512(U + ((size_t)s * I8_RB + (size_t)i) * 128 + 64);
        }
#pragma GCC unroll 4
        for (int j = 0; j < TT; j++) {
            const uint8_t *x = xp + (size_t)j * xs + (size_t)s * 128;
            const __m512i xe = _mm512_load_si512(x), xo = _mm512_load_si512(x + 64);
#pragma GCC unroll 4
            for (int i = 0; i < I8_RB; i++) {
                const __m512 sd = _mm512_broadcast_f32x4(_mm_load_ps(P + (size_t)(j * I8_RB + i) * (4 * I8P_KC) + 4 * s));
                acc[j][i] = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, lo[i], xe), hi[i], xo)), sd, acc[j][i]);
            }
        }
    }
    if (TT == 4 && bm) { /* the last chunk of a whole tile: its outputs straight from the registers */
        i8p_fin16(&acc[0][0], bm, y, ldy);
        return;
    }
    for (int j = 0; j < TT; j++)
#pragma GCC unroll 4
        for (int i = 0; i < I8_RB; i++) accm[j * I8_RB + i] = acc[j][i];
}

/* Rows [r, r+nr) (nr <= 4) against tokens [t0, t0+nt) (nt <= I8P_TB) of a q4 matrix with S >= 1 full steps; xp: the
 * tokens' permuted q4 codes ([token][step][128]). */
static void i8p_rows(const sl_mat *w, const kern_act *a, uint8_t *ws, const float *st, float *y, size_t ldy,
                     int r, int nr, int t0, int nt) {
    const uint8_t *xp = ws;
    i8_blk *B = (i8_blk *)(void *)(ws + I8P_WS_BLK);
    i8_blk_init(B, DT_Q4, w, r, nr);
    const uint8_t *qr[I8_RB] = {B->qr[0], B->qr[1], B->qr[2], B->qr[3]}; /* the stores to U may alias B */
    const int cols = B->cols, nb = B->nb, gsh = B->gsh, S = cols / 128, implied = w->bias_implied;
    const size_t xs = (size_t)S * 128;
    { /* the scales (and biases) of the row block I8_PFB blocks on, as i8_block does */
        const int rp = r + I8_PFB * I8_RB;
        if (rp + I8_RB <= w->rows) {
            const size_t ss = w->sdtype == DT_F32 ? 4 : 2, o = (size_t)rp * (size_t)B->ng * ss, n = (size_t)I8_RB * (size_t)B->ng * ss;
            i8_pf_lines((const char *)w->scales + o, n);
            if (!implied) i8_pf_lines((const char *)w->biases + o, n);
        }
    }
    __m512 *accm = (__m512 *)(void *)(ws + I8P_WS_ACC);
    uint8_t *U = ws + I8P_WS_U;
    float *P = (float *)(void *)(ws + I8P_WS_P);
    const __m512i pi = i8p_pi(), m4 = _mm512_set1_epi8(15);
    const size_t pf = (size_t)I8_PFB * I8_RB * (size_t)cols / 2;
    /* no short step, and the tokens' group sums transposed (st: [group][I8P_TB tokens]): each row's bias lanes for
     * 32 tokens a pass (two 16-token vectors), lane l = group % 8, the same FMAs in the same order; then the lane
     * tree as vector adds, and y = lanes(h) + that, as i8_block. Computed first, so that a whole tile's last chunk
     * writes its outputs from its registers (i8p_fin16). */
    const int fast = S * 128 == cols && nr == I8_RB && st;
    _Alignas(64) float bm[I8_RB][I8P_TB];
    if (fast) {
        const float zb = -8.0f;
        const int ng = B->ng;
        for (int i = 0; i < I8_RB; i++) {
            float bi[I8P_MAXGT];
            if (implied)
                for (int j = 0; j < ng; j++) bi[j] = zb * B->sf[i][j];
            else
                i8_row_f32(w, w->biases, r + i, ng, bi);
            int t = 0; /* 32 tokens a pass where there are: each bias broadcast once for both halves */
            for (; t + 16 < nt; t += 32) i8p_bias_lanes(bi, ng, st + t, 2, bm[i] + t);
            if (t < nt) i8p_bias_lanes(bi, ng, st + t, 1, bm[i] + t);
        }
    }
    for (int s0 = 0; s0 < S; s0 += I8P_KC) {
        const int ns = S - s0 < I8P_KC ? S - s0 : I8P_KC;
        for (int s = 0; s < ns; s++)
#pragma GCC unroll 4
            for (int i = 0; i < I8_RB; i++) {
                const uint8_t *q = qr[i] + (size_t)(s0 + s) * 64;
                _mm_prefetch((const char *)q + pf, I8_PFH);
                const __m512i c = _mm512_permutexvar_epi32(pi, _mm512_loadu_si512(q));
                _mm512_store_si512(U + ((size_t)s * I8_RB + (size_t)i) * 128, _mm512_and_si512(c, m4));
                _mm512_store_si512(U + ((size_t)s * I8_RB + (size_t)i) * 128 + 64,
                                   _mm512_and_si512(_mm512_srli_epi16(c, 4), m4));
            }
        const int b0 = 4 * s0, nbk = 4 * ns; /* the chunk's blocks */
        __m512 sfb[I8_RB][I8P_KC / 4];
        __mmask16 mks[I8P_KC / 4];
        const int nk = (nbk + 15) / 16;
        for (int k = 0; k < nk; k++) mks[k] = nbk - 16 * k >= 16 ? (__mmask16)0xffff : tail_mask(nbk - 16 * k);
        for (int i = 0; i < I8_RB; i++)
            for (int k = 0; k < nk; k++) sfb[i][k] = i8p_sfb(B->sf[i], gsh, b0 + 16 * k, nbk - 16 * k);
        for (int tj = 0; tj < nt; tj += 4) {
            const int tt = nt - tj < 4 ? nt - tj : 4;
            for (int j = 0; j < tt; j++) {
                const float *d = a->d + (size_t)(t0 + tj + j) * (size_t)nb + b0;
                for (int k = 0; k < nk; k++) {
                    const __m512 dv = _mm512_maskz_loadu_ps(mks[k], d + 16 * k);
#pragma GCC unroll 4
                    for (int i = 0; i < I8_RB; i++)
                        _mm512_store_ps(P + (size_t)(j * I8_RB + i) * (4 * I8P_KC) + 16 * k, _mm512_mul_ps(sfb[i][k], dv));
                }
            }
            const uint8_t *x = xp + (size_t)tj * xs + (size_t)s0 * 128;
            __m512 *am = accm + (size_t)tj * I8_RB;
            const int fin = fast && s0 + ns == S;
            float *yt = y + (size_t)(t0 + tj) * ldy + (size_t)r;
            switch (tt) {
            case 4: i8p_tile(U, x, xs, P, ns, am, s0 == 0, 4, fin ? bm[0] + tj : NULL, yt, ldy); break;
            case 3: i8p_tile(U, x, xs, P, ns, am, s0 == 0, 3, NULL, yt, ldy); break;
            case 2: i8p_tile(U, x, xs, P, ns, am, s0 == 0, 2, NULL, yt, ldy); break;
            default: i8p_tile(U, x, xs, P, ns, am, s0 == 0, 1, NULL, yt, ldy); break;
            }
        }
    }
    const float zb = -8.0f;
    if (fast) {
        int t = nt / 4 * 4; /* the whole tiles finished in i8p_tile */
        for (; t < nt; t++) {
            __m256 h[I8_RB];
#pragma GCC unroll 4
            for (int i = 0; i < I8_RB; i++) h[i] = i8_half(_mm512_permutexvar_ps(pi, accm[t * I8_RB + i]));
            _mm_storeu_ps(y + (size_t)(t0 + t) * ldy + (size_t)r,
                          _mm_add_ps(i8_tree4(h[0], h[1], h[2], h[3]), _mm_setr_ps(bm[0][t], bm[1][t], bm[2][t], bm[3][t])));
        }
        return;
    }
    if (S * 128 == cols && nr == I8_RB) { /* no short step: the 4 rows' sums at once, as i8_block */
        for (int t = 0; t < nt; t++) {
            const size_t tt = (size_t)(t0 + t);
            const float *xsum = a->s + tt * (size_t)B->ns + B->soff;
            __m256 b[I8_RB], h[I8_RB];
#pragma GCC unroll 4
            for (int i = 0; i < I8_RB; i++) {
                b[i] = implied ? i8_bias_sf(B->sf[i], zb, B->ng, xsum) : i8_bias_row(w, r + i, B->ng, xsum);
                h[i] = i8_half(_mm512_permutexvar_ps(pi, accm[t * I8_RB + i]));
            }
            _mm_storeu_ps(y + tt * ldy + (size_t)r, _mm_add_ps(i8_tree4(h[0], h[1], h[2], h[3]), i8_tree4(b[0], b[1], b[2], b[3])));
        }
        return;
    }
    for (int i = 0; i < nr; i++) {
        float *bi = (float *)(void *)(ws + I8P_WS_BI), a16[16];
        if (implied)
            for (int j = 0; j < B->ng; j++) bi[j] = zb * B->sf[i][j];
        else
            i8_row_f32(w, w->biases, r + i, B->ng, bi);
        for (int t = 0; t < nt; t++) {
            const size_t tt = (size_t)(t0 + t);
            _mm512_storeu_ps(a16, _mm512_permutexvar_ps(pi, accm[t * I8_RB + i]));
            i8_out(DT_Q4, B, w, a, bi, i, tt, S * 128, a16, y + tt * ldy + (size_t)(r + i));
        }
    }
}

/* kern_matmul_act of a q4 matrix over several tokens: blocks of tokens whose permuted codes fit I8P_XB bytes.
 * -1: no workspace (nothing written). */
static __attribute__((noinline)) int i8p_mm(const sl_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    uint8_t *ws = i8p_ws();
    if (!ws) return -1;
    const int cols = w->cols, S = cols / 128;
    int tb = I8P_XB / (S * 128);
    tb = tb > I8P_TB ? I8P_TB : tb;
    { /* blocks of about equal size, whole tiles where possible (an expert's 33 tokens: 20 + 13, not 32 + 1) */
        const int nblk = (a->n_tok + tb - 1) / tb, even = ((a->n_tok + nblk - 1) / nblk + 3) / 4 * 4;
        tb = even < tb ? even : tb;
    }
    uint8_t *xp = ws;
    float *st = (float *)(void *)(ws + I8P_WS_ST);
    const int g = w->group, ng = cols / g, nb = cols / 32, ns = nb + nb / 2 + nb / 4;
    const size_t soff = g == 32 ? 0 : g == 64 ? (size_t)nb : (size_t)(nb + nb / 2);
    const __m512i pi = i8p_pi();
    for (int t0 = 0; t0 < a->n_tok; t0 += tb) {
        const int nt = a->n_tok - t0 < tb ? a->n_tok - t0 : tb;
        if (ng <= I8P_MAXGT) /* the tokens' group sums, transposed, zero past nt */
            for (int j = 0; j < ng; j++)
                for (int t = 0; t < (nt + 31) / 32 * 32; t++) /* i8p_bias_lanes: 32 a pass */
                    st[j * I8P_TB + t] = t < nt ? a->s[(size_t)(t0 + t) * (size_t)ns + soff + (size_t)j] : 0.0f;
        for (int t = 0; t < nt; t++)
            for (int s = 0; s < S; s++) {
                const int8_t *q = a->q4 + (size_t)(t0 + t) * (size_t)cols + (size_t)s * 128;
                uint8_t *o = xp + ((size_t)t * (size_t)S + (size_t)s) * 128;
                _mm512_store_si512(o, _mm512_permutexvar_epi32(pi, _mm512_loadu_si512(q)));
                _mm512_store_si512(o + 64, _mm512_permutexvar_epi32(pi, _mm512_loadu_si512(q + 64)));
            }
        for (int r = r0; r < r1; r += I8_RB)
            i8p_rows(w, a, ws, ng <= I8P_MAXGT ? st : NULL, y, ldy, r, r1 - r < I8_RB ? r1 - r : I8_RB, t0, nt);
    }
    return 0;
}

static inline __attribute__((always_inline)) void i8_mm(sl_dtype dt, const sl_mat *w, const kern_act *a, float *y,
                                                          size_t ldy, int r0, int r1) {
    for (int t0 = 0; t0 < a->n_tok; t0 += I8_KTOK) {
        int nt = a->n_tok - t0 < I8_KTOK ? a->n_tok - t0 : I8_KTOK;
        for (int r = r0; r < r1; r += I8_RB) {
            int nr = r1 - r < I8_RB ? r1 - r : I8_RB;
            if (nt == 1) i8_block(dt, w, a, y, ldy, r, nr, t0, 1); /* decode: accumulators in registers */
            else i8_block(dt, w, a, y, ldy, r, nr, t0, nt);
        }
    }
}

static void mmi8_q8(const sl_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    i8_mm(DT_Q8, w, a, y, ldy, r0, r1);
}

/* A call of its own: its frame (~50 KB) is not held while i8p_mm runs. */
static __attribute__((noinline)) void mmi8_q4_blocks(const sl_mat *w, const kern_act *a, float *y, size_t ldy, int r0,
                                                     int r1) {
    i8_mm(DT_Q4, w, a, y, ldy, r0, r1);
}

static void mmi8_q4(const sl_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    if (a->n_tok > 1 && w->cols >= 128 && w->cols <= I8P_XB / 2 && !i8p_mm(w, a, y, ldy, r0, r1)) return;
    mmi8_q4_blocks(w, a, y, ldy, r0, r1);
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
    kern_act_sums_q4(cols, q, q4, s);
}

/* ---- table ------------------------------------------------------------------------------------ */

static const kern_ops avx512_ops = {
    .name = "avx512",
    .matmul = TILE_MATMUL,
    .matmul_i8 = {[DT_Q8] = mmi8_q8, [DT_Q4] = mmi8_q4},
    .dot = dot_v,
    .act_row = act_row_v,
    .axpy = axpy_v,
    .axpy_rows = axpy_rows_v,
    .dot_rows = dot_rows_v,
    .dot_rows_q = dot_rows_q_v,
    .axpy_rows_q = axpy_rows_q_v,
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
