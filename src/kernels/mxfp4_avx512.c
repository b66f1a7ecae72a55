/*
 * mxfp4_avx512.c — the MXFP4 row decoder with AVX-512 (mxfp4.h): a block's 16 code bytes become 32 floats;
 * the 16-entry value table is one register (vpermps over 16 lanes), nibbles interleaved with vpermt2d, times
 * the block scale: the scalar decoder's single multiply, so the same bits.
 */
#include "kernels/mxfp4.h"

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

static void row_avx512(const uint8_t *codes, const uint8_t *scales, int cols, float *out) {
    const __m512 lut = _mm512_loadu_ps(MXFP4_VALUES);
    const __m512i m15 = _mm512_set1_epi32(15);
    const __m512i i0 = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i i1 = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    for (int g = 0; g < cols / 32; g++) {
        const __m512 s = _mm512_set1_ps(mxfp4_scale(scales[g]));
        __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(codes + (size_t)g * 16)));
        __m512i lo = _mm512_and_si512(v, m15), hi = _mm512_srli_epi32(v, 4);
        __m512i c0 = _mm512_permutex2var_epi32(lo, i0, hi), c1 = _mm512_permutex2var_epi32(lo, i1, hi);
        _mm512_storeu_ps(out + (size_t)g * 32, _mm512_mul_ps(_mm512_permutexvar_ps(c0, lut), s));
        _mm512_storeu_ps(out + (size_t)g * 32 + 16, _mm512_mul_ps(_mm512_permutexvar_ps(c1, lut), s));
    }
}

mxfp4_row_fn mxfp4_row_avx512(void) { return row_avx512; }
#else
mxfp4_row_fn mxfp4_row_avx512(void) { return NULL; }
#endif
