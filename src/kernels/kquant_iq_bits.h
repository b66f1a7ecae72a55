/*
 * kquant_iq_bits.h — portable bit helpers of the grid i-quants' SIMD unpackers (kquant_iq_x86.h, kquant_neon.c):
 * little-endian field reads and llama.cpp's even-parity sign bytes (ggml-common.h ksigns_iq2xs) four at a time.
 * Internal to src/kernels/.
 */
#ifndef SL_KQUANT_IQ_BITS_H
#define SL_KQUANT_IQ_BITS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t kq_u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static inline unsigned kq_u16(const uint8_t *p) { return (unsigned)(p[0] | p[1] << 8); }

/* entry i of an 8-value (kq_g8) or 4-value (kq_g4) grid of kq_iq_grid, as one little-endian word */
static inline uint64_t kq_g8(const int8_t *grid, unsigned i) {
    uint64_t v;
    memcpy(&v, grid + 8 * (size_t)i, 8);
    return v;
}

static inline uint32_t kq_g4(const int8_t *grid, unsigned i) {
    uint32_t v;
    memcpy(&v, grid + 4 * (size_t)i, 4);
    return v;
}

/* ksigns_iq2xs (ggml-common.h) of four 7-bit sign indices, one in each byte of x (bit 7 clear): each with an eighth
 * bit that makes its count of set bits even (per-byte parity folded into bit 0 by shifts: a byte's bits 0-3 never
 * take bits of the next byte) */
static inline uint32_t kq_even_signs(uint32_t x) {
    uint32_t p = x ^ (x >> 4);
    p ^= p >> 2;
    p ^= p >> 1;
    return x | (p & 0x01010101u) << 7;
}

/* the same for four 7-bit sign indices in the low 28 bits of aux (IQ2_XXS, IQ3_XXS) */
static inline uint32_t kq_ksigns4(uint32_t aux) {
    return kq_even_signs((aux & 0x7Fu) | (aux << 1 & 0x7F00u) | (aux << 2 & 0x7F0000u) | (aux << 3 & 0x7F000000u));
}

#endif
