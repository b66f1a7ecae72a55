/*
 * kv_x86.h — decoding KV cache heads (quant/kv.h) with AVX2 + F16C, for the x86 tables (kernels_avx2.c,
 * kernels_avx512.c include it; both compile with -mavx2-level flags and -mf16c). The conversions are exact and
 * q8's value is one product q * d as in the scalar decoder, so the output is bitwise kv_decode_heads'.
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

/* kern_ops.kv_decode: n heads of hd values, head i at src + i * ld bytes, into dst + i * ldd. */
static void kv_decode_x86(sl_kv_type t, const void *src, size_t ld, int n, int hd, float *dst, size_t ldd) {
    if (t != SL_KV_F16 && t != SL_KV_BF16 && t != SL_KV_Q8) {
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
