/*
 * kquant_iq_neon.h — the grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) unpacked with NEON ops
 * into kq_unpacked (quant/kquant.h): the same integers as quant/kquant_iq.c's scalar unpacking (the oracle; layouts
 * there and in llama.cpp ggml-quants.c dequantize_row_iq*). Per 32 values: four 8-value grid entries (eight 4-value
 * ones for IQ3) loaded as 64-bit halves from kq_iq_grid's table, signs applied by a byte mask (vtst of the sign
 * byte against its bits), IQ1's 8 grid + delta by a shift and an add; the integer scales and d as the oracle's.
 * IQ4_NL / IQ4_XS's levels by table lookups (vqtbl1q). Included by kquant_neon.c only (AArch64). Internal to
 * src/kernels/.
 */
#ifndef SL_KQUANT_IQ_NEON_H
#define SL_KQUANT_IQ_NEON_H

#include <arm_neon.h>
#include <stdint.h>

#include "kernels/kquant_iq_bits.h"
#include "quant/kquant.h"

/* 32 grid values: four 8-value entries i[0..3], or (w4) eight 4-value entries i[0..7] */
typedef struct {
    int8x16_t lo, hi;
} nq32;

static inline nq32 nq_grid8(const int8_t *grid, const unsigned *i) {
    nq32 r = {vcombine_s8(vcreate_s8(kq_g8(grid, i[0])), vcreate_s8(kq_g8(grid, i[1]))),
              vcombine_s8(vcreate_s8(kq_g8(grid, i[2])), vcreate_s8(kq_g8(grid, i[3])))};
    return r;
}

static inline int8x8_t nq_two4(const int8_t *grid, unsigned a, unsigned b) {
    return vcreate_s8((uint64_t)kq_g4(grid, a) | (uint64_t)kq_g4(grid, b) << 32);
}

static inline nq32 nq_grid4(const int8_t *grid, const unsigned *i) {
    nq32 r = {vcombine_s8(nq_two4(grid, i[0], i[1]), nq_two4(grid, i[2], i[3])),
              vcombine_s8(nq_two4(grid, i[4], i[5]), nq_two4(grid, i[6], i[7]))};
    return r;
}

/* qv[8 l + j] = v's value, negated where bit j of sign byte l of s4 is set (the oracle's put8) */
static inline void nq_store_signed(int8_t *qv, nq32 v, uint32_t s4) {
    static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    static const uint8_t sel01[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    static const uint8_t sel23[16] = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
    const uint8x16_t s = vreinterpretq_u8_u32(vdupq_n_u32(s4)), bv = vld1q_u8(bits);
    const int8x16_t m0 = vreinterpretq_s8_u8(vtstq_u8(vqtbl1q_u8(s, vld1q_u8(sel01)), bv));
    const int8x16_t m1 = vreinterpretq_s8_u8(vtstq_u8(vqtbl1q_u8(s, vld1q_u8(sel23)), bv));
    vst1q_s8(qv, vsubq_s8(veorq_s8(v.lo, m0), m0));
    vst1q_s8(qv + 16, vsubq_s8(veorq_s8(v.hi, m1), m1));
}

/* qv = 8 g + delta for IQ1's grid values g (-1 / 0 / 1), delta[l] (-1 or 1) for values 8 l .. 8 l + 7 */
static inline void nq_store_iq1(int8_t *qv, nq32 g, const int *delta) {
    const int8x16_t d0 = vcombine_s8(vdup_n_s8((int8_t)delta[0]), vdup_n_s8((int8_t)delta[1]));
    const int8x16_t d1 = vcombine_s8(vdup_n_s8((int8_t)delta[2]), vdup_n_s8((int8_t)delta[3]));
    vst1q_s8(qv, vaddq_s8(vshlq_n_s8(g.lo, 3), d0));
    vst1q_s8(qv + 16, vaddq_s8(vshlq_n_s8(g.hi, 3), d1));
}

static inline float nq_h2f(const uint8_t *p) { return f16_to_f32((uint16_t)kq_u16(p)); }

/* IQ2_XXS: per 32 values four grid bytes, a u32 of four 7-bit sign indices and ls (kquant_iq.c unpack_iq2xxs) */
static inline void nq_iq2xxs(const uint8_t *b, const int8_t *grid, kq_unpacked *u) {
    u->gs = 32;
    u->d = nq_h2f(b) * 0.125f;
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *q = b + 2 + 8 * ib;
        const uint32_t aux = kq_u32(q + 4);
        const unsigned i[4] = {q[0], q[1], q[2], q[3]};
        u->sc[ib] = (int16_t)(2 * (aux >> 28) + 1);
        nq_store_signed(u->qv + 32 * ib, nq_grid8(grid, i), kq_ksigns4(aux));
    }
}

/* IQ2_XS: u16 per 8 values (9-bit grid index, 7-bit sign index), two 4-bit ls per 32 (unpack_iq2xs) */
static inline void nq_iq2xs(const uint8_t *b, const int8_t *grid, kq_unpacked *u) {
    u->gs = 16;
    u->d = nq_h2f(b) * 0.125f;
    for (int ib = 0; ib < 8; ib++) {
        unsigned i[4];
        uint32_t s = 0;
        for (int l = 0; l < 4; l++) {
            const unsigned v = kq_u16(b + 2 + 2 * (4 * ib + l));
            i[l] = v & 511;
            s |= (uint32_t)(v >> 9) << (8 * l);
        }
        u->sc[2 * ib] = (int16_t)(2 * (b[66 + ib] & 15) + 1);
        u->sc[2 * ib + 1] = (int16_t)(2 * (b[66 + ib] >> 4) + 1);
        nq_store_signed(u->qv + 32 * ib, nq_grid8(grid, i), kq_even_signs(s));
    }
}

/* IQ2_S: grid index low bytes, 2 high bits each from qh, plain sign bytes, two 4-bit ls per 32 (unpack_iq2s) */
static inline void nq_iq2s(const uint8_t *b, const int8_t *grid, kq_unpacked *u) {
    const uint8_t *qs = b + 2, *sg = b + 34, *qh = b + 66, *sc = b + 74;
    u->gs = 16;
    u->d = nq_h2f(b) * 0.125f;
    for (int ib = 0; ib < 8; ib++) {
        unsigned i[4];
        for (int l = 0; l < 4; l++) i[l] = qs[4 * ib + l] | (((unsigned)qh[ib] << (8 - 2 * l)) & 0x300);
        u->sc[2 * ib] = (int16_t)(2 * (sc[ib] & 15) + 1);
        u->sc[2 * ib + 1] = (int16_t)(2 * (sc[ib] >> 4) + 1);
        nq_store_signed(u->qv + 32 * ib, nq_grid8(grid, i), kq_u32(sg + 4 * ib));
    }
}

/* IQ3_XXS: eight 4-value grid bytes and a u32 of four 7-bit sign indices and ls per 32 (unpack_iq3xxs) */
static inline void nq_iq3xxs(const uint8_t *b, const int8_t *grid, kq_unpacked *u) {
    u->gs = 32;
    u->d = nq_h2f(b) * 0.25f;
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *q = b + 2 + 8 * ib;
        const uint32_t aux = kq_u32(b + 66 + 4 * ib);
        const unsigned i[8] = {q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]};
        u->sc[ib] = (int16_t)(2 * (aux >> 28) + 1);
        nq_store_signed(u->qv + 32 * ib, nq_grid4(grid, i), kq_ksigns4(aux));
    }
}

/* IQ3_S: 4-value grid index low bytes, a ninth bit each from qh (index k: bit k of qh[ib]), plain sign bytes, a
 * 4-bit ls per 32 (unpack_iq3s) */
static inline void nq_iq3s(const uint8_t *b, const int8_t *grid, kq_unpacked *u) {
    const uint8_t *qs = b + 2, *qh = b + 66, *sg = b + 74, *sc = b + 106;
    u->gs = 32;
    u->d = nq_h2f(b);
    for (int ib = 0; ib < 8; ib++) {
        unsigned i[8];
        for (int k = 0; k < 8; k++) i[k] = qs[8 * ib + k] | ((unsigned)(qh[ib] >> k) & 1) << 8;
        u->sc[ib] = (int16_t)(2 * ((sc[ib / 2] >> (4 * (ib % 2))) & 15) + 1);
        nq_store_signed(u->qv + 32 * ib, nq_grid4(grid, i), kq_u32(sg + 4 * ib));
    }
}

/* IQ1_S: per 32 values four index low bytes and a u16 (4 x 3 high bits, 3-bit ls, delta sign) (unpack_iq1s) */
static inline void nq_iq1s(const uint8_t *b, const int8_t *grid, kq_unpacked *u) {
    u->gs = 32;
    u->d = nq_h2f(b) * 0.125f;
    for (int ib = 0; ib < 8; ib++) {
        const unsigned qh = kq_u16(b + 34 + 2 * ib);
        const int dl = qh & 0x8000 ? -1 : 1, delta[4] = {dl, dl, dl, dl};
        unsigned i[4];
        for (int l = 0; l < 4; l++) i[l] = b[2 + 4 * ib + l] | ((qh >> (3 * l)) & 7) << 8;
        u->sc[ib] = (int16_t)(2 * ((qh >> 12) & 7) + 1);
        nq_store_iq1(u->qv + 32 * ib, nq_grid8(grid, i), delta);
    }
}

/* IQ1_M: per 8 values an index low byte and a nibble (3 high bits, delta sign); 3-bit ls per 16 in four u16 whose
 * top nibbles make the f16 d (unpack_iq1m) */
static inline void nq_iq1m(const uint8_t *b, const int8_t *grid, kq_unpacked *u) {
    const uint8_t *qs = b, *qh = b + 32;
    unsigned sc[4];
    for (int k = 0; k < 4; k++) sc[k] = kq_u16(b + 48 + 2 * k);
    u->gs = 16;
    u->d = f16_to_f32((uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0xf0) | ((sc[2] >> 4) & 0xf00) | (sc[3] & 0xf000))) * 0.125f;
    for (int ib = 0; ib < 8; ib++) {
        unsigned i[4];
        int delta[4];
        for (int l = 0; l < 4; l++) {
            const unsigned h = (qh[2 * ib + l / 2] >> (4 * (l % 2))) & 15;
            i[l] = qs[4 * ib + l] | ((h & 7) << 8);
            delta[l] = h & 8 ? -1 : 1;
        }
        u->sc[2 * ib] = (int16_t)(2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1);
        u->sc[2 * ib + 1] = (int16_t)(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1);
        nq_store_iq1(u->qv + 32 * ib, nq_grid8(grid, i), delta);
    }
}

/* 16 bytes of IQ4 nibbles (elements 0-15 low, 16-31 high) as their 32 levels (kquant.c unpack_iq4) */
static inline void nq_iq4_levels(int8_t *qv, const uint8_t *q16) {
    const int8x16_t lv = vld1q_s8(KQ_IQ4_LEVELS);
    const uint8x16_t x = vld1q_u8(q16);
    vst1q_s8(qv, vqtbl1q_s8(lv, vandq_u8(x, vdupq_n_u8(15))));
    vst1q_s8(qv + 16, vqtbl1q_s8(lv, vshrq_n_u8(x, 4)));
}

/* IQ4_NL (one block of 32) and IQ4_XS: levels by table lookups, scales as kquant.c's unpack_iq4 */
static inline void nq_iq4(dt_type dt, const uint8_t *b, kq_unpacked *u) {
    u->gs = 32;
    u->d = nq_h2f(b);
    if (dt == DT_IQ4_NL) {
        u->n = 32;
        u->sc[0] = 1;
        nq_iq4_levels(u->qv, b + 2);
        return;
    }
    const unsigned sh = kq_u16(b + 2);
    for (int j = 0; j < 8; j++) {
        const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 0xF) | (int)(((sh >> (2 * j)) & 3) << 4);
        u->sc[j] = (int16_t)(ls - 32);
        nq_iq4_levels(u->qv + 32 * j, b + 8 + 16 * j);
    }
}

/* kq_unpack's contract (kernels.h kq_unpack_fn): the grid i-quants and IQ4 here, the other types by the oracle */
static void nq_unpack(dt_type dt, const uint8_t *b, kq_unpacked *u) {
    const int8_t *grid = kq_iq_grid(dt);
    if (!grid && dt != DT_IQ4_NL && dt != DT_IQ4_XS) {
        kq_unpack(dt, b, u);
        return;
    }
    u->has_min = 0;
    u->dmin = 0.0f;
    u->n = 256;
    memset(u->mn, 0, sizeof u->mn);
    switch (dt) {
    case DT_IQ4_NL: case DT_IQ4_XS: nq_iq4(dt, b, u); break;
    case DT_IQ2_XXS: nq_iq2xxs(b, grid, u); break;
    case DT_IQ2_XS: nq_iq2xs(b, grid, u); break;
    case DT_IQ2_S: nq_iq2s(b, grid, u); break;
    case DT_IQ3_XXS: nq_iq3xxs(b, grid, u); break;
    case DT_IQ3_S: nq_iq3s(b, grid, u); break;
    case DT_IQ1_S: nq_iq1s(b, grid, u); break;
    default: nq_iq1m(b, grid, u); break;
    }
}

#endif
