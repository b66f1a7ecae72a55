/*
 * mxfp4_neon.c — the MXFP4 row decoder with NEON (mxfp4.h): a block's 16 code bytes, nibbles split and zipped
 * into column order, magnitudes (twice the E2M1 value, an integer) from a byte table (tbl), widened to float,
 * times half the block scale (exact: a power of two), the sign bit set from code bit 3. The same products as the
 * scalar decoder (power-of-two scalings of exact values), so the same bits. Tested under qemu (tools/neon_test.sh).
 */
#include "kernels/mxfp4.h"

#if defined(__aarch64__)
#include <arm_neon.h>

static void row_neon(const uint8_t *codes, const uint8_t *scales, int cols, float *out) {
    static const uint8_t twice[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12};
    const uint8x16_t tbl = vld1q_u8(twice), m15 = vdupq_n_u8(15), m8 = vdupq_n_u8(8);
    for (int g = 0; g < cols / 32; g++) {
        /* half the scale: s = 0 gives 2^-128, still exact as a subnormal; the products below are exact too */
        const float32x4_t s = vdupq_n_f32(mxfp4_scale(scales[g]) * 0.5f);
        uint8x16_t b = vld1q_u8(codes + (size_t)g * 16);
        uint8x16_t lo = vandq_u8(b, m15), hi = vshrq_n_u8(b, 4);
        uint8x16_t c[2] = {vzip1q_u8(lo, hi), vzip2q_u8(lo, hi)};
        for (int k = 0; k < 2; k++) {
            uint8x16_t mg = vqtbl1q_u8(tbl, c[k]), sg = vandq_u8(c[k], m8);
            uint16x8_t mh[2] = {vmovl_u8(vget_low_u8(mg)), vmovl_u8(vget_high_u8(mg))};
            uint16x8_t sh[2] = {vmovl_u8(vget_low_u8(sg)), vmovl_u8(vget_high_u8(sg))};
            for (int h = 0; h < 2; h++)
                for (int q = 0; q < 2; q++) {
                    uint32x4_t m32 = q ? vmovl_u16(vget_high_u16(mh[h])) : vmovl_u16(vget_low_u16(mh[h]));
                    uint32x4_t s32 = q ? vmovl_u16(vget_high_u16(sh[h])) : vmovl_u16(vget_low_u16(sh[h]));
                    float32x4_t f = vmulq_f32(vcvtq_f32_u32(m32), s);
                    f = vreinterpretq_f32_u32(veorq_u32(vreinterpretq_u32_f32(f), vshlq_n_u32(s32, 28)));
                    vst1q_f32(out + (size_t)g * 32 + k * 16 + h * 8 + q * 4, f);
                }
        }
    }
}

mxfp4_row_fn mxfp4_row_neon(void) { return row_neon; }
#else
mxfp4_row_fn mxfp4_row_neon(void) { return NULL; }
#endif
