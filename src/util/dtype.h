/*
 * dtype.h — element types and scalar conversions (f16, bf16, FP8 E4M3 to f32 and back).
 * All conversions are exact where the target can hold the value; f32 -> bf16/f16 round to nearest even.
 */
#ifndef SL_DTYPE_H
#define SL_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    DT_NONE = 0,
    DT_F32 = 1,
    DT_F16 = 2,
    DT_BF16 = 3,
    DT_F8E4M3 = 4, /* import only */
    /* quantized matrices (src/quant/quant.h, docs/QUANT.md): codes + per-group scales (+ biases) */
    DT_Q8 = 5,  /* 8-bit group-affine, MLX layout */
    DT_Q4 = 6,  /* 4-bit group-affine, MLX layout */
    DT_Q3 = 7,  /* 3-bit rotated Lloyd-Max codebook */
    DT_MXFP4 = 8, /* OCP MX FP4 (E2M1) in blocks of 32 with an E8M0 scale each, gpt-oss's released layout */
    /* GGUF block types kept as llama.cpp stores them (src/quant/kquant.h): rows of whole blocks, scales inside */
    DT_Q2_K = 9,
    DT_Q3_K = 10,
    DT_Q4_K = 11,
    DT_Q5_K = 12,
    DT_Q6_K = 13,
    DT_IQ4_NL = 14,
    DT_IQ4_XS = 15,
    DT_IQ2_XXS = 16, /* the grid i-quants (quant/kquant_iq.c) */
    DT_IQ2_XS = 17,
    DT_IQ2_S = 18,
    DT_IQ3_XXS = 19,
    DT_IQ3_S = 20,
    DT_IQ1_S = 21,
    DT_IQ1_M = 22,
    DT_Q2 = 23, /* sluice's 2-bit: rotated blocks of 128, 4-level Lloyd-Max codebook (quant/kquant.h, q2.c) */
    DT_Q2V = 24, /* the same blocks, the E8P lattice codebook: 16 bits per 8 values (quant/q2.c) */
    DT_Q5_0 = 25, /* GGUF Q5_0 / Q5_1 kept as llama.cpp stores them (blocks of 32: quant/kquant.h) */
    DT_Q5_1 = 26,
    DT_COUNT
} dt_type;

size_t dt_size(dt_type t);          /* bytes per element; 0 for quantized types (see q_mat_bytes) */
const char *dt_name(dt_type t);     /* "f32", "f16", "bf16", "f8e4m3", "q8", "q4", "q3", "mxfp4", "q2_k", ...
                                       "q6_k", "iq4_nl", "iq4_xs", "iq2_xxs", ... "iq1_m",
                                       "q2", "q2v", "q5_0", "q5_1" */
dt_type dt_from_name(const char *s);        /* our names; DT_NONE if unknown */
dt_type dt_from_safetensors(const char *s); /* "F32", "F16", "BF16", "F8_E4M3"; DT_NONE if unknown */

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float f8e4m3_to_f32(uint8_t v);

/* Converts n elements of type `from` at src into f32 at dst. */
void dt_to_f32(dt_type from, const void *src, float *dst, size_t n);
/* Converts n f32 values into `to` (F32, F16, BF16). */
void dt_from_f32(dt_type to, const float *src, void *dst, size_t n);

#endif
