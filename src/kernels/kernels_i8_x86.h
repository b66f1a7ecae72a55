/*
 * kernels_i8_x86.h — the int8-activation pieces the x86 tables (kernels_avx2.c, kernels_avx512.c) share for
 * kernels_tile_i8.h's driver: row scales as f32 (i8_row_f32), the prefetch, the bias lanes and the lane trees of
 * four outputs at once, in kernels.h's canonical order (so both tables equal the scalar oracle bitwise).
 * Include it before kernels_tile_i8.h. Internal to src/kernels/.
 */
#ifndef SL_KERNELS_I8_X86_H
#define SL_KERNELS_I8_X86_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "quant/quant.h"

/* Software prefetches (kernels_tile_i8.h: I8_PFB row blocks ahead) go into L2. */
#define I8_PFH _MM_HINT_T1

/* always_inline: a function of its own would be found free of side effects and its calls dropped */
static inline __attribute__((always_inline)) void i8_prefetch(const void *p) { _mm_prefetch((const char *)p, I8_PFH); }

/* The lane tree ((v0+v1)+(v2+v3))+((v4+v5)+(v6+v7)) of four 8-lane vectors at once: hadd pairs
 * neighbours exactly as the tree does. */
static inline __m128 i8_tree4(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m256 q = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1));
}

/* The last ng - j (< 8) f16 / bf16 values h[j .. ng) of a row as f32 into out[j .. ng): each x86 file's own
 * (AVX-512: masked loads; AVX2: one by one), the same exact conversions. */
static inline void i8_row_tail(const tn_mat *m, const uint16_t *h, int j, int ng, float *out);

/* Row r's ng scales (or biases) of m as f32 into out. */
static inline __attribute__((always_inline)) void i8_row_f32(const tn_mat *m, const void *p, int r, int ng,
                                                             float *out) {
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
    if (j < ng) i8_row_tail(m, h, j, ng, out);
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

#endif
