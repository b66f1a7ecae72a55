/*
 * kquant_iq_x86.h — the grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) unpacked with AVX2 ops
 * into kquant_x86.h's kq_sb: the same integers as kquant_iq.c's scalar unpacking (the oracle; layouts there and in
 * llama.cpp ggml-quants.c dequantize_row_iq*). Per 32 values: four 8-value grid entries (eight 4-value ones for
 * IQ3) loaded as 64-bit (32-bit) lanes from kq_iq_grid's table and put together by inserts (vpgatherdd was slower
 * on Zen 5: docs/QUANT.md), signs applied by a byte mask made from the four
 * sign bytes (vpshufb + vpcmpeqb), IQ1's 8 grid + delta from one table, plus 9; the integer scales as
 * kq_unpack_iq's. Included by kquant_x86.h only (under its flags). Internal to src/kernels/.
 */
#ifndef SL_KQUANT_IQ_X86_H
#define SL_KQUANT_IQ_X86_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kquant_iq_bits.h"
#include "quant/kquant.h"

/* four 8-value grid entries, values 8 l .. 8 l + 7 from entry i[l] */
static inline __m256i kq_grid4(const int8_t *grid, unsigned i0, unsigned i1, unsigned i2, unsigned i3) {
    return _mm256_set_epi64x((long long)kq_g8(grid, i3), (long long)kq_g8(grid, i2), (long long)kq_g8(grid, i1),
                             (long long)kq_g8(grid, i0));
}

/* the four 8-value grid entries whose indices are the u16 of w (taken out of a vector register as one 64-bit word:
 * four vpextrw cost more) */
static inline __m256i kq_grid4w(const int8_t *tab, uint64_t w) {
    return kq_grid4(tab, (unsigned)(w & 0xFFFF), (unsigned)(w >> 16 & 0xFFFF), (unsigned)(w >> 32 & 0xFFFF), (unsigned)(w >> 48));
}

/* g with value 8 l + j negated where bit j of sign byte l of s4 is set (the oracle's put8) */
static inline __m256i kq_apply_signs(__m256i g, uint32_t s4) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3,
                                          3, 3, 3, 3);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i x = _mm256_shuffle_epi8(_mm256_set1_epi32((int)s4), shuf);
    const __m256i m = _mm256_cmpeq_epi8(_mm256_and_si256(x, bits), bits); /* 0xFF where negative */
    return _mm256_sub_epi8(_mm256_xor_si256(g, m), m);
}

/* +-1 bytes: -1 for value 8 l + i where bit i of sign byte 4 j + l of s16 is set (the signs kq_apply_signs puts on
 * g; 16 plain sign bytes in a register: one vpshufb per block, where a u32 read, move and broadcast cost more) */
static inline __m256i kq_signs_blk(__m128i s16, int j) {
    const char c = (char)(4 * j);
    const __m256i sp = _mm256_setr_epi8(c, c, c, c, c, c, c, c, c + 1, c + 1, c + 1, c + 1, c + 1, c + 1, c + 1, c + 1, c + 2, c + 2,
                                        c + 2, c + 2, c + 2, c + 2, c + 2, c + 2, c + 3, c + 3, c + 3, c + 3, c + 3, c + 3, c + 3, c + 3);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i x = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(s16), sp);
    return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(x, bits), bits), _mm256_set1_epi8(1));
}

/* ksigns_iq2xs (ggml-common.h) as +-1 bytes: entry i's byte j is -1 where bit j of i | parity(i) << 7 is set
 * (kq_even_signs), so four 7-bit sign indices become a sign vector by four table loads */
#define KQ_SB(i, j) ((uint64_t)((((i) >> (j)) & 1) ? 0xFFu : 0x01u) << (8 * (j)))
#define KQ_SPAR(i) (((i) ^ (i) >> 1 ^ (i) >> 2 ^ (i) >> 3 ^ (i) >> 4 ^ (i) >> 5 ^ (i) >> 6) & 1)
#define KQ_SE(i) (KQ_SB(i, 0) | KQ_SB(i, 1) | KQ_SB(i, 2) | KQ_SB(i, 3) | KQ_SB(i, 4) | KQ_SB(i, 5) | KQ_SB(i, 6) | \
                  ((uint64_t)(KQ_SPAR(i) ? 0xFFu : 0x01u) << 56))
#define KQ_SE4(i) KQ_SE(i), KQ_SE((i) + 1), KQ_SE((i) + 2), KQ_SE((i) + 3)
#define KQ_SE16(i) KQ_SE4(i), KQ_SE4((i) + 4), KQ_SE4((i) + 8), KQ_SE4((i) + 12)
#define KQ_SE64(i) KQ_SE16(i), KQ_SE16((i) + 16), KQ_SE16((i) + 32), KQ_SE16((i) + 48)
static const uint64_t kq_ksigns_pm[128] = {KQ_SE64(0), KQ_SE64(64)};

/* the sign vector of four 7-bit sign indices (the +-1 bytes of kq_even_signs(...), by table) */
static inline __m256i kq_ksigns_vec(unsigned i0, unsigned i1, unsigned i2, unsigned i3) {
    return _mm256_set_epi64x((long long)kq_ksigns_pm[i3], (long long)kq_ksigns_pm[i2], (long long)kq_ksigns_pm[i1],
                             (long long)kq_ksigns_pm[i0]);
}

/* 2 n + 1 for the nibbles of the low 8 bytes of x, in order (byte i's low nibble, then its high one) */
static inline __m128i kq_nib_odd(__m128i x) {
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i n = _mm_unpacklo_epi8(_mm_and_si128(x, m4), _mm_and_si128(_mm_srli_epi16(x, 4), m4));
    return _mm_add_epi8(_mm_add_epi8(n, n), _mm_set1_epi8(1));
}

/* the scales (s: 8 per block of 32 in bytes 0-7, or n16: 16 per group of 16) and d of a grid i-quant superblock (the
 * scales made in registers: bytes stored one by one and read as a vector would stall the load) */
static inline void kq_iq_finish(kq_sb *o, __m128i s, int n16, float d, int uns) {
    if (n16) kq_sc16(o, s);
    else kq_sc32(o, s);
    o->d = _mm256_set1_ps(d);
    kq_nomin(o, uns);
}

/* IQ2_XXS: per 32 values four grid bytes, a u32 of four 7-bit sign indices and ls (kquant_iq.c unpack_iq2xxs) */
KQ_INLINE void kq_unpack_iq2xxs(const uint8_t *b, const int8_t *grid, kq_sb *o) {
    uint64_t sc = 0;
    KQ_UNROLL
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *q = b + 2 + 8 * ib;
        const uint32_t aux = kq_u32(q + 4);
        o->v[ib] = kq_grid4(grid, q[0], q[1], q[2], q[3]);
        o->sg[ib] = kq_ksigns_vec(aux & 127, aux >> 7 & 127, aux >> 14 & 127, aux >> 21 & 127);
        sc |= (uint64_t)(2 * (aux >> 28) + 1) << (8 * ib);
    }
    kq_iq_finish(o, _mm_cvtsi64_si128((long long)sc), 0, kq_h2f(b) * 0.125f, 2);
}

/* IQ2_XS: u16 per 8 values (9-bit grid index, 7-bit sign index), two 4-bit ls per 32 (unpack_iq2xs) */
KQ_INLINE void kq_unpack_iq2xs(const uint8_t *b, const int8_t *grid, kq_sb *o) {
    /* the 32 sign bytes with vector ops (llama.cpp ggml-cpu arch/x86/quants.c ggml_vec_dot_iq2_xs_q8_K's way): per u16
     * the 7 bits at 9-15, and bit 7 their parity, by a nibble table of the xor of the two halves */
    const __m256i par = _mm256_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0, 0, -128,
                                         -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0);
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6,
                                          6, 6, 6, 6);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i sb[2];
    KQ_UNROLL
    for (int k = 0; k < 2; k++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b + 2 + 32 * k)), p7 = _mm256_srli_epi16(q, 9);
        sb[k] = _mm256_or_si256(p7, _mm256_shuffle_epi8(par, _mm256_xor_si256(p7, _mm256_srli_epi16(q, 13))));
    }
    KQ_UNROLL
    for (int ib = 0; ib < 8; ib++) {
        uint64_t w; /* four u16: grid index in bits 0-8, sign index in 9-15 */
        memcpy(&w, b + 2 + 8 * ib, 8);
        o->v[ib] = kq_grid4(grid, (unsigned)(w & 511), (unsigned)(w >> 16 & 511), (unsigned)(w >> 32 & 511), (unsigned)(w >> 48 & 511));
        /* block ib's four sign bytes (u16 lanes 4 (ib % 4) ..) to both halves, each spread over its 8 values */
        const int j = ib % 4;
        const __m256i x = _mm256_permutevar8x32_epi32(sb[ib / 4], _mm256_setr_epi32(2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1,
                                                                                   2 * j, 2 * j + 1));
        const __m256i m = _mm256_shuffle_epi8(x, shuf);
        o->sg[ib] = _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(m, bits), bits), _mm256_set1_epi8(1));
    }
    kq_iq_finish(o, kq_nib_odd(_mm_loadl_epi64((const __m128i *)(b + 66))), 1, kq_h2f(b) * 0.125f, 2);
}

/* IQ2_S: grid index low bytes, 2 high bits each from qh, plain sign bytes, two 4-bit ls per 32 (unpack_iq2s); the
 * indices made with vector ops and taken out 4 at a time, the sign bytes from two 16-byte loads (one vpshufb per 32
 * values) instead of scalar index arithmetic and a u32 load, move and broadcast per 32 */
KQ_INLINE void kq_unpack_iq2s(const uint8_t *b, const int8_t *grid, kq_sb *o) {
    const uint8_t *qs = b + 2, *sc = b + 74;
    /* the 32 grid indices as u16 (index 4 b + l: byte l of block b | bits 2 l, 2 l + 1 of qh[b] at 8, 9: each u16 lane
     * takes qh[b], one vpmullw moves the two bits to 8 .. 9), blocks 2 k, 2 k + 1 in ix[k] */
    const __m128i qh = _mm_loadl_epi64((const __m128i *)(b + 66));
    const __m256i qh2 = _mm256_broadcastsi128_si256(qh), mul = _mm256_set1_epi64x(0x0004001000400100ll), m3 = _mm256_set1_epi16(0x300);
    __m128i ix[4];
    KQ_UNROLL
    for (int p = 0; p < 2; p++) {
        const char c = (char)(4 * p);
        const __m256i sel = _mm256_setr_epi8(c, -1, c, -1, c, -1, c, -1, c + 1, -1, c + 1, -1, c + 1, -1, c + 1, -1, c + 2, -1, c + 2, -1,
                                             c + 2, -1, c + 2, -1, c + 3, -1, c + 3, -1, c + 3, -1, c + 3, -1);
        const __m256i hi = _mm256_and_si256(_mm256_mullo_epi16(_mm256_shuffle_epi8(qh2, sel), mul), m3);
        const __m256i i16 = _mm256_or_si256(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(qs + 16 * p))), hi);
        ix[2 * p] = _mm256_castsi256_si128(i16);
        ix[2 * p + 1] = _mm256_extracti128_si256(i16, 1);
    }
    const __m128i s16[2] = {_mm_loadu_si128((const __m128i *)(b + 34)), _mm_loadu_si128((const __m128i *)(b + 50))};
    KQ_UNROLL
    for (int ib = 0; ib < 8; ib++) {
        o->v[ib] = kq_grid4w(grid, ib % 2 ? (uint64_t)_mm_extract_epi64(ix[ib / 2], 1) : (uint64_t)_mm_cvtsi128_si64(ix[ib / 2]));
        o->sg[ib] = kq_signs_blk(s16[ib / 4], ib % 4);
    }
    kq_iq_finish(o, kq_nib_odd(_mm_loadl_epi64((const __m128i *)sc)), 1, kq_h2f(b) * 0.125f, 2);
}

/* IQ3_XXS: eight 4-value grid bytes and a u32 of four 7-bit sign indices and ls per 32 (unpack_iq3xxs) */
KQ_INLINE void kq_unpack_iq3xxs(const uint8_t *b, const int8_t *grid, kq_sb *o) {
    uint64_t sc = 0;
    KQ_UNROLL
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *q = b + 2 + 8 * ib;
        const uint32_t aux = kq_u32(b + 66 + 4 * ib);
        o->v[ib] = _mm256_setr_epi32((int)kq_g4(grid, q[0]), (int)kq_g4(grid, q[1]), (int)kq_g4(grid, q[2]), (int)kq_g4(grid, q[3]),
                                     (int)kq_g4(grid, q[4]), (int)kq_g4(grid, q[5]), (int)kq_g4(grid, q[6]), (int)kq_g4(grid, q[7]));
        o->sg[ib] = kq_ksigns_vec(aux & 127, aux >> 7 & 127, aux >> 14 & 127, aux >> 21 & 127);
        sc |= (uint64_t)(2 * (aux >> 28) + 1) << (8 * ib);
    }
    kq_iq_finish(o, _mm_cvtsi64_si128((long long)sc), 0, kq_h2f(b) * 0.25f, 2);
}

/* IQ3_S: 4-value grid index low bytes with a ninth bit each from qh, plain sign bytes, a 4-bit ls per 32
 * (unpack_iq3s: index k of the 8 takes bit k of qh[ib]) */
KQ_INLINE void kq_unpack_iq3s(const uint8_t *b, const int8_t *grid, kq_sb *o) {
    const uint8_t *qs = b + 2, *qh = b + 66, *sc = b + 106;
    const __m128i s16[2] = {_mm_loadu_si128((const __m128i *)(b + 74)), _mm_loadu_si128((const __m128i *)(b + 90))};
    KQ_UNROLL
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *q = qs + 8 * ib;
        const unsigned h = qh[ib];
        o->v[ib] = _mm256_setr_epi32((int)kq_g4(grid, q[0] | (h << 8 & 256)), (int)kq_g4(grid, q[1] | (h << 7 & 256)),
                                     (int)kq_g4(grid, q[2] | (h << 6 & 256)), (int)kq_g4(grid, q[3] | (h << 5 & 256)),
                                     (int)kq_g4(grid, q[4] | (h << 4 & 256)), (int)kq_g4(grid, q[5] | (h << 3 & 256)),
                                     (int)kq_g4(grid, q[6] | (h << 2 & 256)), (int)kq_g4(grid, q[7] | (h << 1 & 256)));
        o->sg[ib] = kq_signs_blk(s16[ib / 4], ib % 4);
    }
    kq_iq_finish(o, kq_nib_odd(_mm_cvtsi32_si128((int)kq_u32(sc))), 0, kq_h2f(b), 2);
}

/* IQ1_S and IQ1_M: the values v = 8 g + delta (g -1 / 0 / 1, delta +-1) are dotted stored plus an offset o, as
 * unsigned bytes (one vpdpbusd / vpmaddubsw per 32 values and no sign bytes), and kq_dot_sb's sub takes x16_g xsum_g
 * off each group of 16's sum (xsum_g: the q8_K sums bk), x16_g = s_g o: the oracle's integers. The bytes come from
 * kq_iq1_plus10's 16 KiB table, 8 g + 10 (the delta +1 values plus 9; a 32 KiB table of both deltas cost about
 * 0.1x ggml on rows streamed past the caches: docs/QUANT.md): IQ1_M, a delta per 8 values, takes 2 off where it is
 * -1 (o = 9); IQ1_S, one delta per 32 values, puts it into the offset instead, o = 10 - delta. The 32 table indices
 * of a superblock are made as u16 with vector ops and taken out four at a time (kq_grid4w) */

/* IQ1_S: per 32 values four index low bytes and a u16 (4 x 3 high bits, 3-bit ls, delta sign) (unpack_iq1s). Index
 * 4 b + l's high bits are bits 3 l .. 3 l + 2 of u16 b: each u16 lane takes u16 b (l = 3: its high byte), one
 * vpmullw moves the 3 bits to 8 .. 10 */
KQ_INLINE void kq_unpack_iq1s(const uint8_t *b, const int8_t *tab, kq_sb *o) {
    const __m128i qh = _mm_loadu_si128((const __m128i *)(b + 34));
    const __m256i qh2 = _mm256_broadcastsi128_si256(qh), mul = _mm256_set1_epi64x(0x0080000400200100ll);
    const __m256i m7 = _mm256_set1_epi16(0x700);
    __m128i ix[4]; /* the indices of blocks 2 k, 2 k + 1 */
    KQ_UNROLL
    for (int p = 0; p < 2; p++) { /* blocks 4 p .. 4 p + 3 */
        const char c = (char)(8 * p);
        const __m256i sel = _mm256_setr_epi8(c, c + 1, c, c + 1, c, c + 1, c + 1, -1, c + 2, c + 3, c + 2, c + 3, c + 2, c + 3,
                                             c + 3, -1, c + 4, c + 5, c + 4, c + 5, c + 4, c + 5, c + 5, -1, c + 6, c + 7, c + 6,
                                             c + 7, c + 6, c + 7, c + 7, -1);
        const __m256i hi = _mm256_and_si256(_mm256_mullo_epi16(_mm256_shuffle_epi8(qh2, sel), mul), m7);
        const __m256i lo = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(b + 2 + 16 * p)));
        const __m256i i16 = _mm256_or_si256(lo, hi);
        ix[2 * p] = _mm256_castsi256_si128(i16);
        ix[2 * p + 1] = _mm256_extracti128_si256(i16, 1);
    }
    KQ_UNROLL
    for (int ib = 0; ib < 8; ib++)
        o->v[ib] = kq_grid4w(tab, ib % 2 ? (uint64_t)_mm_extract_epi64(ix[ib / 2], 1) : (uint64_t)_mm_cvtsi128_si64(ix[ib / 2]));
    /* ls = bits 12-14 of each u16 (s = 2 ls + 1), o = 9 + 2 (bit 15) */
    const __m128i s = _mm_add_epi16(_mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(qh, 12), _mm_set1_epi16(7)), 1), _mm_set1_epi16(1));
    const __m128i so = _mm_mullo_epi16(s, _mm_add_epi16(_mm_slli_epi16(_mm_srli_epi16(qh, 15), 1), _mm_set1_epi16(9)));
    kq_iq_finish(o, _mm_packus_epi16(s, s), 0, kq_h2f(b) * 0.125f, 1);
    const __m256i so32 = _mm256_cvtepu16_epi32(so); /* each block's s o for both its groups of 16 */
    o->x16 = _mm256_or_si256(so32, _mm256_slli_epi32(so32, 16));
    o->sub = 1;
}

/* IQ1_M: per 8 values an index low byte and a nibble (3 high bits, delta sign); 3-bit ls per 16 in four u16 whose
 * top nibbles make the f16 d (unpack_iq1m). The nibbles of qh in order are the 32 indices' high bits (their bit 3 the
 * delta's sign: 2 taken off the 8 table bytes where it is set, by one vpshufb spreading it and one vpsubb) */
KQ_INLINE void kq_unpack_iq1m(const uint8_t *b, const int8_t *tab, kq_sb *o) {
    const __m128i qh = _mm_loadu_si128((const __m128i *)(b + 32)), m4 = _mm_set1_epi8(0x0F);
    const __m128i nl = _mm_and_si128(qh, m4), nh = _mm_and_si128(_mm_srli_epi16(qh, 4), m4);
    const __m128i n0 = _mm_unpacklo_epi8(nl, nh), n1 = _mm_unpackhi_epi8(nl, nh); /* nibbles 0-15, 16-31 */
    const __m128i q0 = _mm_loadu_si128((const __m128i *)b), q1 = _mm_loadu_si128((const __m128i *)(b + 16));
    const __m128i b7 = _mm_set1_epi8(7), two = _mm_set1_epi8(2);
    const __m256i neg[2] = {_mm256_broadcastsi128_si256(_mm_and_si128(_mm_srli_epi16(n0, 2), two)),
                            _mm256_broadcastsi128_si256(_mm_and_si128(_mm_srli_epi16(n1, 2), two))};
    const __m128i h0 = _mm_and_si128(n0, b7), h1 = _mm_and_si128(n1, b7);
    const __m128i x[4] = {_mm_unpacklo_epi8(q0, h0), _mm_unpackhi_epi8(q0, h0), _mm_unpacklo_epi8(q1, h1), _mm_unpackhi_epi8(q1, h1)};
    KQ_UNROLL
    for (int ib = 0; ib < 8; ib++) { /* block ib's 4 delta bytes (chunk 4 ib + l of 32) each over its 8 values */
        const char c = (char)(4 * (ib % 4));
        const __m256i sp = _mm256_setr_epi8(c, c, c, c, c, c, c, c, c + 1, c + 1, c + 1, c + 1, c + 1, c + 1, c + 1, c + 1,
                                            c + 2, c + 2, c + 2, c + 2, c + 2, c + 2, c + 2, c + 2, c + 3, c + 3, c + 3, c + 3,
                                            c + 3, c + 3, c + 3, c + 3);
        const uint64_t w = ib % 2 ? (uint64_t)_mm_extract_epi64(x[ib / 2], 1) : (uint64_t)_mm_cvtsi128_si64(x[ib / 2]);
        o->v[ib] = _mm256_sub_epi8(kq_grid4w(tab, w), _mm256_shuffle_epi8(neg[ib / 4], sp));
    }
    /* group g's ls: bits 3 (g % 4) of u16 g / 4 of the four at 48. Lane k of W >> 3 k holds group 4 j + k in its u16 j;
     * masked and packed that is byte 4 k + j, which one vpshufb puts at g */
    uint64_t w;
    memcpy(&w, b + 48, 8);
    const __m128i ww = _mm_set1_epi64x((long long)w), m7 = _mm_set1_epi16(7);
    const __m128i lo = _mm_and_si128(_mm_srlv_epi64(ww, _mm_set_epi64x(3, 0)), m7);
    const __m128i hi = _mm_and_si128(_mm_srlv_epi64(ww, _mm_set_epi64x(9, 6)), m7);
    const __m128i l8 = _mm_shuffle_epi8(_mm_packus_epi16(lo, hi), _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
    /* d's f16 bits: the top nibbles of the four u16, n0 | n1 << 4 | n2 << 8 | n3 << 12, by two vpmaddwd */
    const __m128i dn = _mm_madd_epi16(_mm_srli_epi16(ww, 12), _mm_set1_epi32(0x00100001));
    const __m128i dh = _mm_madd_epi16(_mm_packs_epi32(dn, dn), _mm_set1_epi32(0x01000001));
    const __m128i s = _mm_add_epi8(_mm_add_epi8(l8, l8), _mm_set1_epi8(1));
    kq_iq_finish(o, s, 1, kq_h2f_lo(dh) * 0.125f, 1);
    o->x16 = _mm256_mullo_epi16(_mm256_cvtepu8_epi16(s), _mm256_set1_epi16(9));
    o->sub = 1;
}

/* a grid i-quant superblock (grid: kq_iq_grid(dt)) */
KQ_INLINE void kq_unpack_grid_iq(dt_type dt, const uint8_t *b, const int8_t *grid, kq_sb *o) {
    switch (dt) {
    case DT_IQ2_XXS: kq_unpack_iq2xxs(b, grid, o); break;
    case DT_IQ2_XS: kq_unpack_iq2xs(b, grid, o); break;
    case DT_IQ2_S: kq_unpack_iq2s(b, grid, o); break;
    case DT_IQ3_XXS: kq_unpack_iq3xxs(b, grid, o); break;
    case DT_IQ3_S: kq_unpack_iq3s(b, grid, o); break;
    case DT_IQ1_S: kq_unpack_iq1s(b, grid, o); break;
    default: kq_unpack_iq1m(b, grid, o); break;
    }
}

#endif
