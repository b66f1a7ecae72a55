/* dtype.c — element type names and conversions; see dtype.h. */
#include "util/dtype.h"

#include <math.h>

size_t dt_size(dt_type t) {
    switch (t) {
    case DT_F32: return 4;
    case DT_F16: return 2;
    case DT_BF16: return 2;
    case DT_F8E4M3: return 1;
    default: return 0;
    }
}

const char *dt_name(dt_type t) {
    switch (t) {
    case DT_F32: return "f32";
    case DT_F16: return "f16";
    case DT_BF16: return "bf16";
    case DT_F8E4M3: return "f8e4m3";
    case DT_Q8: return "q8";
    case DT_Q4: return "q4";
    case DT_Q3: return "q3";
    case DT_MXFP4: return "mxfp4";
    case DT_Q2_K: return "q2_k";
    case DT_Q3_K: return "q3_k";
    case DT_Q4_K: return "q4_k";
    case DT_Q5_K: return "q5_k";
    case DT_Q6_K: return "q6_k";
    case DT_IQ4_NL: return "iq4_nl";
    case DT_IQ4_XS: return "iq4_xs";
    case DT_IQ2_XXS: return "iq2_xxs";
    case DT_IQ2_XS: return "iq2_xs";
    case DT_IQ2_S: return "iq2_s";
    case DT_IQ3_XXS: return "iq3_xxs";
    case DT_IQ3_S: return "iq3_s";
    case DT_IQ1_S: return "iq1_s";
    case DT_IQ1_M: return "iq1_m";
    case DT_Q2: return "q2";
    case DT_Q2V: return "q2v";
    case DT_Q5_0: return "q5_0";
    case DT_Q5_1: return "q5_1";
    default: return "none";
    }
}

dt_type dt_from_name(const char *s) {
    for (int t = DT_F32; t < DT_COUNT; t++)
        if (strcmp(s, dt_name((dt_type)t)) == 0) return (dt_type)t;
    return DT_NONE;
}

dt_type dt_from_safetensors(const char *s) {
    if (!strcmp(s, "F32")) return DT_F32;
    if (!strcmp(s, "F16")) return DT_F16;
    if (!strcmp(s, "BF16")) return DT_BF16;
    if (!strcmp(s, "F8_E4M3")) return DT_F8E4M3;
    return DT_NONE;
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to inf */
    if (a < 0x38800000u) {                                   /* subnormal or zero in f16 */
        if (a < 0x33000000u) return (uint16_t)sign;
        uint32_t e = a >> 23, m = (a & 0x7fffff) | 0x800000;
        int shift = 126 - (int)e; /* 14..24 */
        uint32_t half = 1u << (shift - 1);
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = a - 0x38000000u; /* rebias exponent */
    uint32_t lsb = (r >> 13) & 1;
    r += 0xfff + lsb;
    return (uint16_t)(sign | (r >> 13));
}

float f8e4m3_to_f32(uint8_t v) {
    int s = v >> 7, e = (v >> 3) & 0xf, m = v & 7;
    float r;
    if (e == 15 && m == 7) return NAN; /* E4M3FN has no inf */
    if (e == 0) r = ldexpf((float)m, -9); /* m/8 * 2^-6 */
    else r = ldexpf((float)(8 + m), e - 10); /* (1 + m/8) * 2^(e-7) */
    return s ? -r : r;
}

void dt_to_f32(dt_type from, const void *src, float *dst, size_t n) {
    switch (from) {
    case DT_F32: memcpy(dst, src, n * 4); break;
    case DT_F16: for (size_t i = 0; i < n; i++) dst[i] = f16_to_f32(((const uint16_t *)src)[i]); break;
    case DT_BF16: for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(((const uint16_t *)src)[i]); break;
    case DT_F8E4M3: for (size_t i = 0; i < n; i++) dst[i] = f8e4m3_to_f32(((const uint8_t *)src)[i]); break;
    default: break;
    }
}

void dt_from_f32(dt_type to, const float *src, void *dst, size_t n) {
    switch (to) {
    case DT_F32: memcpy(dst, src, n * 4); break;
    case DT_F16: for (size_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = f32_to_f16(src[i]); break;
    case DT_BF16: for (size_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = f32_to_bf16(src[i]); break;
    default: break;
    }
}
