/*
 * mxfp4_avx2.c — the MXFP4 row decoder with AVX2 (mxfp4.h): 8 bytes of codes at a time become 16 floats;
 * magnitude from an 8-entry table (vpermps), the sign bit (code bit 3) moved to bit 31, times the block scale.
 * The same single multiply as the scalar decoder, so the same bits.
 */
#include "kernels/mxfp4.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

static void row_avx2(const uint8_t *codes, const uint8_t *scales, int cols, float *out) {
    const __m256 mag = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    const __m256i m15 = _mm256_set1_epi32(15), m8 = _mm256_set1_epi32(8);
    for (int g = 0; g < cols / 32; g++) {
        const __m256 s = _mm256_set1_ps(mxfp4_scale(scales[g]));
        for (int h = 0; h < 2; h++) {
            __m128i b8 = _mm_loadl_epi64((const __m128i *)(codes + (size_t)g * 16 + h * 8));
            __m256i v = _mm256_cvtepu8_epi32(b8);
            __m256i lo = _mm256_and_si256(v, m15), hi = _mm256_srli_epi32(v, 4);
            __m256i a = _mm256_unpacklo_epi32(lo, hi), b = _mm256_unpackhi_epi32(lo, hi);
            __m256i c0 = _mm256_permute2x128_si256(a, b, 0x20), c1 = _mm256_permute2x128_si256(a, b, 0x31);
            __m256i cs[2] = {c0, c1};
            for (int k = 0; k < 2; k++) {
                __m256 m = _mm256_mul_ps(_mm256_permutevar8x32_ps(mag, cs[k]), s);
                __m256i sign = _mm256_slli_epi32(_mm256_and_si256(cs[k], m8), 28);
                m = _mm256_castsi256_ps(_mm256_xor_si256(_mm256_castps_si256(m), sign));
                _mm256_storeu_ps(out + (size_t)g * 32 + h * 16 + k * 8, m);
            }
        }
    }
}

mxfp4_row_fn mxfp4_row_avx2(void) { return row_avx2; }
#else
mxfp4_row_fn mxfp4_row_avx2(void) { return NULL; }
#endif
