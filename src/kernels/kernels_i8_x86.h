/*
 * kernels_i8_x86.h — what the x86 int8-activation q8 / q4 kernels (kernels_avx2.c, kernels_avx512.c) share:
 * row scales as f32, the bias lanes, the lanes of a short last step done one by one, and the final sum,
 * all in kernels.h's canonical order (so both tables equal the scalar oracle bitwise). Each file's main
 * loop: rows in blocks of I8_RB (the activations loaded once per row block), tokens in blocks of I8_KTOK
 * (codes unpacked once per token block, so a prefill reads each weight byte once per I8_KTOK tokens).
 * Internal to src/kernels/.
 */
#ifndef SL_KERNELS_I8_X86_H
#define SL_KERNELS_I8_X86_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_plain.h"
#include "quant/quant.h"

#define I8_RB 4
#define I8_KTOK 16
#define I8_MAXG 2048 /* groups per row held on the stack; kern_matmul_act uses the oracle past it */

/* Software prefetch of the codes I8_PFB row blocks ahead, into L2. The rows of a block are separate streams
 * (with 2048 columns a block of 4 q4 rows is one 4 KiB page), which the hardware prefetcher follows poorly:
 * without it the AVX-512 kernel read DRAM at ~40% of a plain read loop's rate, with it at ~100%
 * (docs/PERFORMANCE.md). */
#ifndef I8_PFH
#define I8_PFH _MM_HINT_T1
#endif
#ifndef I8_PFB
#define I8_PFB 3
#endif

/* The lane tree ((v0+v1)+(v2+v3))+((v4+v5)+(v6+v7)) of four 8-lane vectors at once: hadd pairs
 * neighbours exactly as the tree does. */
static inline __m128 i8_tree4(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m256 q = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1));
}

/* Row r's ng scales (or biases) of m as f32 into out. */
static inline void i8_row_f32(const sl_mat *m, const void *p, int r, int ng, float *out) {
    const size_t o = (size_t)r * (size_t)ng;
    int j = 0;
    if (m->sdtype == DT_F32) {
        memcpy(out, (const float *)p + o, (size_t)ng * sizeof(float));
        return;
    }
    const uint16_t *h = (const uint16_t *)p + o;
    if (m->sdtype == DT_BF16)
        for (; j + 8 <= ng; j += 8)
            _mm256_storeu_ps(out + j, _mm256_castsi256_ps(_mm256_slli_epi32(
                                          _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(h + j))), 16)));
    else
        for (; j + 8 <= ng; j += 8) _mm256_storeu_ps(out + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + j))));
#ifdef __AVX512VL__ /* kernels_avx512.c: the tail with masked loads, the same exact conversions */
    if (j < ng) {
        const __mmask8 mk = (__mmask8)((1u << (ng - j)) - 1u);
        __m128i v = _mm_maskz_loadu_epi16(mk, h + j);
        _mm256_mask_storeu_ps(out + j, mk, m->sdtype == DT_BF16
                                               ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16))
                                               : _mm256_cvtph_ps(v));
    }
#else
    for (; j < ng; j++) out[j] = q_scale_at(p, m->sdtype, o + (size_t)j);
#endif
}

static inline float i8_lanes(__m256 v) {
    float a[8];
    _mm256_storeu_ps(a, v);
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* accb over the groups: lane j % 8 += bias_j * xs_j, in group order. */
static inline __m256 i8_bias(const float *bi, const float *xs, int ng) {
    __m256 acc = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= ng; j += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(bi + j), _mm256_loadu_ps(xs + j), acc);
    if (j < ng) {
        float b8[8] = {0}, x8[8] = {0};
        memcpy(b8, bi + j, (size_t)(ng - j) * sizeof(float));
        memcpy(x8, xs + j, (size_t)(ng - j) * sizeof(float));
        /* lanes past ng get 0 * 0 added: +0 into a lane that is +0 or a sum of products; but a lane
         * holding -0 (all products -0) would become +0, so keep untouched lanes by blending */
        __m256 nv = _mm256_fmadd_ps(_mm256_loadu_ps(b8), _mm256_loadu_ps(x8), acc);
        static const int32_t mk[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
        acc = _mm256_blendv_ps(acc, nv, _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(mk + 8 - (ng - j)))));
    }
    return acc;
}

/* [x x4, y x4] from two consecutive floats (an unaligned 8-byte load: p is only float-aligned) */
static inline __m256 i8_pair(const float *p) {
    __m128 v = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(const void *)p));
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

/* y from the 16 lanes (acc) and the bias lanes. */
static inline float i8_finish(const float *acc, __m256 accb) {
    float h[8], b[8];
    for (int i = 0; i < 8; i++) h[i] = acc[i] + acc[i + 8];
    _mm256_storeu_ps(b, accb);
    return (((h[0] + h[1]) + (h[2] + h[3])) + ((h[4] + h[5]) + (h[6] + h[7]))) +
           (((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7])));
}

/* What a block of rows [r, r+nr) and tokens [t0, t0+nt) shares. */
typedef struct {
    int cols, g, ng, nb, ns, gsh;
    size_t soff;
    const uint8_t *qr[I8_RB];
    float sf[I8_RB][I8_MAXG];
} i8_blk;

static inline void i8_blk_init(i8_blk *B, sl_dtype dt, const sl_mat *w, int r, int nr) {
    B->cols = w->cols;
    B->g = w->group;
    B->ng = B->cols / B->g;
    B->nb = B->cols / 32;
    B->ns = B->nb + B->nb / 2 + B->nb / 4;
    B->gsh = B->g == 32 ? 0 : B->g == 64 ? 1 : 2; /* block b belongs to group b >> gsh */
    B->soff = B->g == 32 ? 0 : B->g == 64 ? (size_t)B->nb : (size_t)(B->nb + B->nb / 2);
    for (int i = 0; i < I8_RB; i++) {
        int ri = r + (i < nr ? i : 0); /* missing rows of a short block repeat row r; discarded */
        B->qr[i] = (const uint8_t *)w->data + (size_t)ri * (size_t)B->cols / (dt == DT_Q4 ? 2 : 1);
        if (i < nr) i8_row_f32(w, w->scales, ri, B->ng, B->sf[i]);
        else memcpy(B->sf[i], B->sf[0], (size_t)B->ng * sizeof(float));
    }
}

/* Tail lanes, bias and the final sum of output (row r+i, token tt) from its 16 lanes acc16. */
static inline void i8_out(sl_dtype dt, const i8_blk *B, const sl_mat *w, const kern_act *a, const float *bi, int i,
                          size_t tt, int c0, float *acc16, float *y) {
    const int cols = B->cols;
    if (c0 < cols)
        plain_i8_tail(dt, B->qr[i], B->sf[i], B->g, a->q + tt * (size_t)cols, a->d + tt * (size_t)B->nb,
                c0, cols, acc16);
    *y = i8_finish(acc16, i8_bias(bi, a->s + tt * (size_t)B->ns + B->soff, B->ng));
}

#endif
