/*
 * kv.h — the attention KV cache's row types (include/sluice.h sl_kv_type): a cache row [n_kv_heads][hd] is
 * n_kv_heads heads of kv_head_bytes(type, hd) bytes each, head g at g * kv_head_bytes. Per head:
 *   f32:  hd floats;  f16 / bf16: hd halves (round to nearest even, util/dtype.h);
 *   q8:   nb = ceil(hd / 32) f16 scales d[b], then hd int8 codes; block b = values 32b .. 32b+31 (the last one
 *         short when hd % 32 != 0), d = f16(max|x| / 127), q = round(x / d) (0 when d == 0), value = q * d:
 *         llama.cpp's q8_0 (ggml-quants.c quantize_row_q8_0_ref), 34 bytes per 32 values.
 *   q4:   nb f16 scales d[b], then the blocks' 4-bit codes (16 bytes a whole block): in a block of n values
 *         (h = (n + 1) / 2), byte j holds value j's code in its low nibble and value j + h's in its high one;
 *         d = f16(m / -8) where m is the block's value of largest magnitude, code = min(15, (int)(x / d + 8.5)),
 *         value = (code - 8) * d: llama.cpp's q4_0 (quantize_row_q4_0_ref), 18 bytes per 32 values.
 *   q4r:  q4's bytes and layout, of the head rotated: z = H (s . x) on each run of P values (P the largest power
 *         of two dividing hd; H the P x P Walsh-Hadamard matrix, unnormalised; s a fixed pattern of signs,
 *         kv_q4r_sign), which spreads an outlier channel over the run so that the blocks' values are alike
 *         (near-Gaussian). A code c stands for d * KV_Q4R_LEVEL[c]: 16 levels symmetric about 0, fitted (Lloyd)
 *         to such rotated blocks; d is the best of 9 candidate scales around max|z| / 7.5, each refitted by least
 *         squares to its codes (the one with the least squared error; docs/PERFORMANCE.md). Decoding is
 *         x = s . H (levels * (d / P)) (H H = P I; d / P exact). Same bytes as q4, about 11% less squared error
 *         than q4 of the rotated values on near-Gaussian data (llama.cpp's q4_0 with its Hadamard rotation).
 * Encoding and decoding are deterministic and depend on the head's own values only, so a cache row is the same
 * bytes whoever writes it; decoding is exact for f16 / bf16 / q8 / q4 (their values are f32 values) and for q4r
 * one fixed order of operations (kv_fwht). Thread-safe, cannot fail.
 */
#ifndef SL_QUANT_KV_H
#define SL_QUANT_KV_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

#define KV_Q8_BLOCK 32
#define KV_Q4_BLOCK 32

/* q4r's codes as its rotated values y = levels * (d / P), without the inverse rotation: a head is x = s . H y (H
 * symmetric), so q . x = (H (s . q)) . y and a weighted sum of heads is s . H (the weighted sum of their y).
 * Attention rotates each query once and each output once (kv_q4r_rotate, kv_q4r_unrotate) instead of every key
 * and value row it reads (backend/cpu/cpu_mix.c). A type for kv_decode_heads / kern_ops.kv_decode only. */
#define KV_Q4R_Y ((sl_kv_type)SL_KV_COUNT)

/* q4r's codebook: the value of code c is d * KV_Q4R_LEVEL[c] (kv.c). */
extern const float KV_Q4R_LEVEL[16];

/* q4r's sign of value i of a head (1: negated before the rotation and after the inverse one). */
static inline int kv_q4r_sign(int i) {
    static const uint64_t bits[4] = {0x9e3779b97f4a7c15ull, 0xbf58476d1ce4e5b9ull, 0x94d049bb133111ebull,
                                     0x2545f4914f6cdd1dull};
    return (int)(bits[(i >> 6) & 3] >> (i & 63) & 1u);
}

/* q4r's rotation length of a head of hd values: the largest power of two dividing hd. */
static inline int kv_q4r_run(int hd) { return hd > 0 ? hd & -hd : 1; }

/* Bytes of one head of hd values stored as type t. */
static inline size_t kv_head_bytes(sl_kv_type t, int hd) {
    const size_t n = (size_t)hd;
    switch (t) {
    case SL_KV_F16:
    case SL_KV_BF16: return 2 * n;
    case SL_KV_Q8: return 2 * ((n + KV_Q8_BLOCK - 1) / KV_Q8_BLOCK) + n;
    case SL_KV_Q4:
    case SL_KV_Q4R:
    case KV_Q4R_Y: return 2 * ((n + KV_Q4_BLOCK - 1) / KV_Q4_BLOCK) + (n + 1) / 2;
    default: return 4 * n;
    }
}

/* One head: x [hd] (f32) into dst (kv_head_bytes(t, hd) bytes). */
void kv_encode_head(sl_kv_type t, const float *x, int hd, void *dst);
/* n heads of hd values, head i at src + i * ld bytes, into dst + i * ldd floats. */
void kv_decode_heads(sl_kv_type t, const void *src, size_t ld, int n, int hd, float *dst, size_t ldd);
/* z [hd] := H (s . x) on q4r's runs (the encoder's rotation, unnormalised; z may be x). */
void kv_q4r_rotate(const float *x, int hd, float *z);
/* y [hd] := s . H y on q4r's runs: the decoder's inverse rotation, in its order (kv_fwht, then the signs). */
void kv_q4r_unrotate(float *y, int hd);

/* y [n] := H y on each run of p values (p a power of two): the butterflies of stride 1, 2, 4, ... in turn, (a, b)
 * -> (a + b, a - b); the one order every decoder follows (kernels/kv_x86.h), so they agree bitwise. */
void kv_fwht(float *y, int n, int p);

#endif
