/*
 * kv_x86.h — decoding KV cache heads (quant/kv.h) with AVX2 + F16C, for the x86 tables (kernels_avx2.c,
 * kernels_avx512.c include it; both compile with -mavx2-level flags and -mf16c). The conversions are exact and
 * q8's / q4's value is one product of a level and the scale as in the scalar decoder, and q4r's rotation the
 * scalar's additions in its order, so the output is bitwise kv_decode_heads'.
 */
#ifndef SL_KV_X86_H
#define SL_KV_X86_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "quant/kv.h"

/* hd values of one q8 head: the f16 scales of its blocks, then the codes. */
static inline void kv_q8_head_x86(const uint8_t *s, int hd, float *y) {
    const int nb = (hd + KV_Q8_BLOCK - 1) / KV_Q8_BLOCK;
    const int8_t *q = (const int8_t *)(s + 2 * nb);
    for (int b = 0; b < nb; b++) {
        uint16_t h;
        memcpy(&h, s + 2 * b, 2);
        const float d = _cvtsh_ss(h);
        const __m256 dv = _mm256_set1_ps(d);
        int c = b * KV_Q8_BLOCK;
        const int c1 = c + KV_Q8_BLOCK < hd ? c + KV_Q8_BLOCK : hd;
        for (; c + 8 <= c1; c += 8) {
            __m128i b8 = _mm_loadl_epi64((const __m128i *)(const void *)(q + c));
            _mm256_storeu_ps(y + c, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b8)), dv));
        }
        for (; c < c1; c++) y[c] = (float)q[c] * d;
    }
}

/* Butterflies of strides 1, 2 and 4 on each 8 values of y [n] (n % 8 == 0), then kv_fwht's wider ones: each
 * value the same additions and subtractions in the same order as kv_fwht (lane i takes x + partner, its
 * partner's lane partner - x: a + b and a - b), so the result is bitwise kv_fwht's. */
static inline void kv_fwht_x86(float *y, int n, int p) {
    for (int i = 0; i < n; i += 8) {
        __m256 x = _mm256_loadu_ps(y + i), q = _mm256_permute_ps(x, 0xB1);
        x = _mm256_blend_ps(_mm256_add_ps(x, q), _mm256_sub_ps(q, x), 0xAA);
        if (p > 2) {
            q = _mm256_permute_ps(x, 0x4E);
            x = _mm256_blend_ps(_mm256_add_ps(x, q), _mm256_sub_ps(q, x), 0xCC);
        }
        if (p > 4) {
            q = _mm256_permute2f128_ps(x, x, 1);
            x = _mm256_blend_ps(_mm256_add_ps(x, q), _mm256_sub_ps(q, x), 0xF0);
        }
        _mm256_storeu_ps(y + i, x);
    }
    for (int h = 8; h < p; h *= 2)
        for (int r = 0; r < n; r += p)
            for (int i = r; i < r + p; i += 2 * h)
                for (int k = i; k < i + h; k += 8) {
                    const __m256 a = _mm256_loadu_ps(y + k), b = _mm256_loadu_ps(y + k + h);
                    _mm256_storeu_ps(y + k, _mm256_add_ps(a, b));
                    _mm256_storeu_ps(y + k + h, _mm256_sub_ps(a, b));
                }
}

/* A q4 (rot 0), q4r (rot 1) or q4r's rotated values (rot 2: KV_Q4R_Y) head of hd values, hd % 32 == 0 and, for
 * q4r, its run p >= 8 (kv.h): the levels (code - 8, or KV_Q4R_LEVEL[code] through two 8-entry permutes) times the
 * scale, as the scalar decoder's one product, then q4r's inverse rotation and signs (an exclusive or of the sign
 * bit: the scalar's negation). */
static inline void kv_q4_head_x86(const uint8_t *s, int hd, float *y, int rot) {
    const int nb = hd / KV_Q4_BLOCK, p = kv_q4r_run(hd) < 1024 ? kv_q4r_run(hd) : 1024;
    const uint8_t *q = s + 2 * nb;
    const __m256 lo8 = _mm256_loadu_ps(KV_Q4R_LEVEL), hi8 = _mm256_loadu_ps(KV_Q4R_LEVEL + 8);
    const __m128i m4 = _mm_set1_epi8(15);
    for (int b = 0; b < nb; b++, q += 16) {
        uint16_t h;
        memcpy(&h, s + 2 * b, 2);
        const __m256 dv = _mm256_set1_ps(rot ? _cvtsh_ss(h) * (1.0f / (float)p) : _cvtsh_ss(h));
        const __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)q);
        const __m128i codes[2] = {_mm_and_si128(raw, m4), _mm_and_si128(_mm_srli_epi16(raw, 4), m4)};
        for (int k = 0; k < 4; k++) {
            const __m256i c = _mm256_cvtepu8_epi32(k & 1 ? _mm_srli_si128(codes[k >> 1], 8) : codes[k >> 1]);
            __m256 l;
            if (rot) l = _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo8, c), _mm256_permutevar8x32_ps(hi8, c),
                                          _mm256_castsi256_ps(_mm256_slli_epi32(c, 28)));
            else l = _mm256_cvtepi32_ps(_mm256_sub_epi32(c, _mm256_set1_epi32(8)));
            _mm256_storeu_ps(y + b * KV_Q4_BLOCK + 8 * k, _mm256_mul_ps(l, dv));
        }
    }
    if (rot != 1) return;
    kv_fwht_x86(y, hd, p);
    for (int i = 0; i < hd; i += 8) {
        int sg = 0;
        for (int k = 0; k < 8; k++) sg |= kv_q4r_sign(i + k) << k;
        const __m256i bits = _mm256_set1_epi32(sg);
        const __m256i lane = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
        const __m256i neg = _mm256_slli_epi32(_mm256_cmpeq_epi32(_mm256_and_si256(bits, lane), lane), 31);
        _mm256_storeu_ps(y + i, _mm256_xor_ps(_mm256_loadu_ps(y + i), _mm256_castsi256_ps(neg)));
    }
}

/* kern_ops.kv_decode: n heads of hd values, head i at src + i * ld bytes, into dst + i * ldd. */
static void kv_decode_x86(sl_kv_type t, const void *src, size_t ld, int n, int hd, float *dst, size_t ldd) {
    const int q4 = t == SL_KV_Q4 || t == SL_KV_Q4R || t == KV_Q4R_Y;
    if ((t != SL_KV_F16 && t != SL_KV_BF16 && t != SL_KV_Q8 && !q4) ||
        (q4 && (hd % KV_Q4_BLOCK || (t == SL_KV_Q4R && kv_q4r_run(hd) < 8)))) {
        kv_decode_heads(t, src, ld, n, hd, dst, ldd);
        return;
    }
    for (int i = 0; i < n; i++) {
        const uint8_t *s = (const uint8_t *)src + (size_t)i * ld;
        float *y = dst + (size_t)i * ldd;
        if (t == SL_KV_Q8) {
            kv_q8_head_x86(s, hd, y);
            continue;
        }
        if (q4) {
            kv_q4_head_x86(s, hd, y, t == SL_KV_Q4 ? 0 : t == SL_KV_Q4R ? 1 : 2);
            continue;
        }
        int c = 0;
        for (; c + 8 <= hd; c += 8) {
            __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(s + 2 * c));
            __m256 f = t == SL_KV_F16 ? _mm256_cvtph_ps(h)
                                       : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
            _mm256_storeu_ps(y + c, f);
        }
        if (c < hd) kv_decode_heads(t, s + 2 * c, 0, 1, hd - c, y + c, 0);
    }
}

#endif
