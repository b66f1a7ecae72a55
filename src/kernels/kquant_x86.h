/*
 * kquant_x86.h — the int8-activation matmul of the GGUF block types with AVX2 integer dots, written once for the
 * AVX2 and AVX-512 tables (kquant_avx2.c, kquant_avx512.c include it under their own flags). Internal to
 * src/kernels/.
 *
 * The canonical arithmetic is kquant_i8.c's (the oracle): per 32 columns b an exact integer isum_b (and msum_b),
 * then acc[b % 8] = fma((float)isum_b, d * xd_b, acc[b % 8]) and the same for the mins, y = lanes(acc) -
 * lanes(accm). Here a superblock's 8 blocks are the 8 lanes of one __m256: the integer sums come out as 8 int32
 * lanes (vpmaddubsw pairs, vpmaddwd by the group scales, a horizontal-add transpose), then one cvtdq2ps, one mul
 * (d * xd) and one vfmadd per superblock, lane b the oracle's lane b: the same bits. A block is unpacked once per
 * row into int8 values (as the formula multiplies them) and int16 scales per element pair, then dotted with each
 * token of a block of KQ_TOK tokens. Every type is unpacked with vector ops (the grid i-quants in kquant_iq_x86.h).
 * IQ4_NL, Q5_0 and Q5_1 (blocks of 32) take 8 blocks at a time; the last cols % 256 columns run the oracle's scalar
 * steps on their lanes. Q5_1's min (a float) goes on accm as the oracle's fma(dmin, s1_b): 8 blocks' by one vfmadd.
 */
#ifndef SL_KQUANT_X86_H
#define SL_KQUANT_X86_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "quant/kquant.h"

#define KQ_TOK 8
/* the type-specialised loops below inline everything they call (kq_i8_x86) */
#define KQ_INLINE static inline __attribute__((always_inline))
/* loops over a superblock's 8 blocks unrolled, so that its vectors stay in registers */
#define KQ_UNROLL _Pragma("GCC unroll 8")

/* 8 blocks of 32 unpacked: v[256] int8 values (uns 0: signed, dotted by the sign trick; 1: all >= 0; 2: >= 0, the
 * value's sign (+-1 bytes in sg[b]) put on the activation instead: v x = |v| (sign x)); the integer scale of
 * each group of 16 values (a type with one scale per 32 gives both halves the same) as int32 lanes in the order the
 * dot's sums come out: sab = groups 0 2 4 6 | 1 3 5 7 (blocks 0-3), scd = 8 10 12 14 | 9 11 13 15 (blocks 4-7);
 * x16: 16 int16 per group of 16, the mins (has_min) or the scales again (off: the values were stored plus 2^off,
 * so isum = sum(s v' x) - 2^off sum_g s_g xsum_g) or (sub: IQ1's values stored plus an offset o, kquant_iq_x86.h)
 * the scales times o (isum = sum(s v' x) - sum_g x16_g xsum_g); d / dmin per lane (block); has_min 1: mins times
 * x16 . bk, 2 (Q5_1): dmin times the activations' block sums s1 */
typedef struct {
    __m256i v[8], sg[8], sab, scd, x16;
    __m256 d, dmin;
    int has_min, uns, off, sub;
} kq_sb;

static inline float kq_h2f(const uint8_t *p) {
#if defined(__F16C__)
    return _cvtsh_ss((unsigned short)(p[0] | p[1] << 8)); /* exact, as f16_to_f32 */
#else
    return f16_to_f32((uint16_t)(p[0] | p[1] << 8));
#endif
}

/* the f16 in the low 16 bits of h as f32 (exact) */
static inline float kq_h2f_lo(__m128i h) {
#if defined(__F16C__)
    return _mm_cvtss_f32(_mm_cvtph_ps(h));
#else
    return f16_to_f32((uint16_t)_mm_cvtsi128_si32(h));
#endif
}

/* the 8 f16 at p, p + st, .. p + 7 st as f32 lanes (exact), built in registers: a vector read of 8 floats stored one
 * by one would stall on the store forwarding */
static inline __m256 kq_h2f8(const uint8_t *p, int st) {
#if defined(__F16C__)
    uint16_t h[8];
    for (int j = 0; j < 8; j++) memcpy(&h[j], p + st * j, 2);
    return _mm256_cvtph_ps(_mm_setr_epi16((short)h[0], (short)h[1], (short)h[2], (short)h[3], (short)h[4], (short)h[5],
                                          (short)h[6], (short)h[7]));
#else
    float d[8];
    for (int j = 0; j < 8; j++) d[j] = kq_h2f(p + st * j);
    return _mm256_loadu_ps(d);
#endif
}

/* sab / scd from the 16 int8 scales of the groups of 16 (sc, signed) */
static inline void kq_sc16(kq_sb *o, __m128i sc) {
    o->sab = _mm256_cvtepi8_epi32(_mm_shuffle_epi8(sc, _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 0, 0, 0, 0, 0, 0, 0, 0)));
    o->scd = _mm256_cvtepi8_epi32(_mm_shuffle_epi8(sc, _mm_setr_epi8(8, 10, 12, 14, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0)));
}

/* sab / scd from 8 int8 scales of the blocks of 32 (bytes 0-7 of sc, signed) */
static inline void kq_sc32(kq_sb *o, __m128i sc) {
    o->sab = _mm256_cvtepi8_epi32(_mm_shuffle_epi8(sc, _mm_setr_epi8(0, 1, 2, 3, 0, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0)));
    o->scd = _mm256_cvtepi8_epi32(_mm_shuffle_epi8(sc, _mm_setr_epi8(4, 5, 6, 7, 4, 5, 6, 7, 0, 0, 0, 0, 0, 0, 0, 0)));
}

static inline void kq_nomin(kq_sb *o, int uns) {
    o->x16 = _mm256_setzero_si256();
    o->dmin = _mm256_setzero_ps();
    o->has_min = 0;
    o->off = 0;
    o->sub = 0;
    o->uns = uns;
}

/* the grid i-quants' unpacking (needs kq_sb and the helpers above) */
#include "kernels/kquant_iq_x86.h"

/* Q4_K / Q5_K values with vector ops; scales and mins as kquant.c's scale_min_k4 (bytes 0-3 of the 12 the low 6
 * bits of scales 0-3 / mins 0-3 at 4-7, bytes 8-11 the low nibbles of 4-7, their top 2 bits in bytes 0-7's) */
KQ_INLINE void kq_unpack_q45(dt_type dt, const uint8_t *b, kq_sb *o) {
    const uint8_t *qs = dt == DT_Q4_K ? b + 16 : b + 48;
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    KQ_UNROLL
    for (int p = 0; p < 4; p++) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(qs + 32 * p));
        o->v[2 * p] = _mm256_and_si256(x, m4);
        o->v[2 * p + 1] = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
    }
    if (dt == DT_Q5_K) {
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 16));
        KQ_UNROLL
        for (int j = 0; j < 8; j++) /* bit j of qh[l] is element 32 j + l's fifth bit */
            o->v[j] = _mm256_or_si256(o->v[j], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, j), one), 4));
    }
    uint32_t w[3];
    memcpy(w, b + 4, 12);
    const uint32_t m6 = 0x3f3f3f3fu, m2 = 0x03030303u, n4 = 0x0f0f0f0fu;
    const uint32_t sc[2] = {w[0] & m6, (w[2] & n4) | ((w[0] >> 6) & m2) << 4};
    const uint32_t mn[2] = {w[1] & m6, ((w[2] >> 4) & n4) | ((w[1] >> 6) & m2) << 4};
    kq_sc32(o, _mm_setr_epi32((int)sc[0], (int)sc[1], 0, 0));
    o->x16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_setr_epi32((int)mn[0], (int)mn[1], 0, 0),
                                                   _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7)));
    o->d = _mm256_set1_ps(kq_h2f(b));
    o->dmin = _mm256_set1_ps(kq_h2f(b + 2));
    o->has_min = 1;
    o->off = 0;
    o->sub = 0;
    o->uns = 1;
}

/* Q6_K values (ql nibble | qh two bits << 4) stored + 32 (0..63) with vector ops */
KQ_INLINE void kq_unpack_q6(const uint8_t *b, kq_sb *o) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    KQ_UNROLL
    for (int h = 0; h < 2; h++) {
        __m256i l0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h)), l1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
        __m256i lo[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                         _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
        KQ_UNROLL
        for (int j = 0; j < 4; j++) {
            __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), m3), 4);
            o->v[4 * h + j] = _mm256_or_si256(lo[j], hi);
        }
    }
    const __m128i sc = _mm_loadu_si128((const __m128i *)(b + 192));
    kq_sc16(o, sc);
    kq_nomin(o, 1);
    o->x16 = _mm256_cvtepi8_epi16(sc);
    o->off = 5;
    o->d = _mm256_set1_ps(kq_h2f(b + 208));
}

/* Q2_K / Q3_K values with vector ops (2-bit codes: element 32 (4h + s) + l at qs[32 h + l] >> 2 s; Q3_K stored + 4:
 * code + 4 where hmask[l] bit 4h + s is set); scales and mins as kquant.c's */
KQ_INLINE void kq_unpack_q23(dt_type dt, const uint8_t *b, kq_sb *o) {
    const int q3 = dt == DT_Q3_K;
    const uint8_t *qs = q3 ? b + 32 : b + 16;
    const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    const __m256i hm = q3 ? _mm256_loadu_si256((const __m256i *)b) : _mm256_setzero_si256();
    KQ_UNROLL
    for (int h = 0; h < 2; h++) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(qs + 32 * h));
        KQ_UNROLL
        for (int s = 0; s < 4; s++) {
            __m256i v = _mm256_and_si256(_mm256_srli_epi16(x, 2 * s), m3);
            if (q3) { /* hmask bit 4 h + s as 4: one shift to bit 2 and one and */
                const int k = 4 * h + s;
                const __m256i hb = k >= 2 ? _mm256_srli_epi16(hm, k - 2) : _mm256_slli_epi16(hm, 2 - k);
                v = _mm256_or_si256(v, _mm256_and_si256(hb, four));
            }
            o->v[4 * h + s] = v;
        }
    }
    if (q3) { /* 6-bit scales less 32 as 16 int8 (llama.cpp ggml-cpu/arch/x86/quants.c ggml_vec_dot_q3_K_q8_K's aux) */
        uint32_t aux[4];
        memcpy(aux, b + 96, 12);
        const uint32_t t = aux[2], m2 = 0x0f0f0f0f, m1 = 0x03030303;
        /* in registers (a vector read of the words stored one by one would stall the load) */
        const __m128i sc = _mm_sub_epi8(_mm_setr_epi32((int)((aux[0] & m2) | ((t & m1) << 4)), (int)((aux[1] & m2) | (((t >> 2) & m1) << 4)),
                                                       (int)(((aux[0] >> 4) & m2) | (((t >> 4) & m1) << 4)),
                                                       (int)(((aux[1] >> 4) & m2) | (((t >> 6) & m1) << 4))),
                                        _mm_set1_epi8(32));
        kq_sc16(o, sc);
        kq_nomin(o, 1);
        o->x16 = _mm256_cvtepi8_epi16(sc);
        o->off = 2;
        o->d = _mm256_set1_ps(kq_h2f(b + 108));
        return;
    }
    const __m128i x = _mm_loadu_si128((const __m128i *)b), m4 = _mm_set1_epi8(0x0F);
    kq_sc16(o, _mm_and_si128(x, m4));
    o->x16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(x, 4), m4));
    o->d = _mm256_set1_ps(kq_h2f(b + 80));
    o->dmin = _mm256_set1_ps(kq_h2f(b + 82));
    o->has_min = 1;
    o->off = 0;
    o->sub = 0;
    o->uns = 1;
}

/* 16 bytes of IQ4 nibbles (elements 0-15 low, 16-31 high) as the 32 levels */
static inline __m256i kq_iq4_levels(const uint8_t *q16) {
    const __m256i lv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)KQ_IQ4_LEVELS));
    const __m128i x = _mm_loadu_si128((const __m128i *)q16), m4 = _mm_set1_epi8(0x0F);
    const __m256i idx = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4));
    return _mm256_shuffle_epi8(lv, idx);
}

/* IQ4_XS (one superblock) and IQ4_NL (8 blocks of 32) with vector lookups; scales as kquant.c's (IQ4_XS: block j's
 * low 4 bits the nibble j of bytes 4-7, its top 2 bits bits 2j of the u16 at 2; less 32) */
KQ_INLINE void kq_unpack_iq4(dt_type dt, const uint8_t *b, kq_sb *o) {
    if (dt == DT_IQ4_NL) {
        KQ_UNROLL
        for (int j = 0; j < 8; j++) o->v[j] = kq_iq4_levels(b + 18 * j + 2);
        kq_sc32(o, _mm_set1_epi8(1));
        o->d = kq_h2f8(b, 18);
    } else {
        KQ_UNROLL
        for (int j = 0; j < 8; j++) o->v[j] = kq_iq4_levels(b + 8 + 16 * j);
        const unsigned sh = (unsigned)(b[2] | b[3] << 8);
        uint64_t hi = 0;
        KQ_UNROLL
        for (int j = 0; j < 8; j++) hi |= (uint64_t)((sh >> (2 * j)) & 3) << (8 * j + 4);
        const __m128i l = _mm_cvtsi32_si128((int)kq_u32(b + 4)), m4 = _mm_set1_epi8(0x0F);
        const __m128i lo = _mm_unpacklo_epi8(_mm_and_si128(l, m4), _mm_and_si128(_mm_srli_epi16(l, 4), m4));
        kq_sc32(o, _mm_sub_epi8(_mm_or_si128(lo, _mm_cvtsi64_si128((long long)hi)), _mm_set1_epi8(32)));
        o->d = _mm256_set1_ps(kq_h2f(b));
    }
    kq_nomin(o, 0);
}

/* a u32's 32 bits as bytes: 0xFF where bit i is set, byte i */
static inline __m256i kq_bits32(uint32_t w) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3,
                                          3, 3, 3, 3);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i x = _mm256_shuffle_epi8(_mm256_set1_epi32((int)w), shuf);
    return _mm256_cmpeq_epi8(_mm256_and_si256(x, bits), bits);
}

/* one Q5_0 / Q5_1 block's 32 codes q (0..31: nibbles as IQ4_NL's, the fifth bit from qh); Q5_0's less 16 */
static inline __m256i kq_q5_32(dt_type dt, const uint8_t *blk) {
    const uint8_t *h = blk + (dt == DT_Q5_1 ? 4 : 2);
    const __m128i x = _mm_loadu_si128((const __m128i *)(h + 4)), m4 = _mm_set1_epi8(0x0F);
    const __m256i n = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4));
    const __m256i v = _mm256_or_si256(n, _mm256_and_si256(kq_bits32(kq_u32(h)), _mm256_set1_epi8(0x10)));
    return dt == DT_Q5_1 ? v : _mm256_sub_epi8(v, _mm256_set1_epi8(16));
}

/* Q5_0 / Q5_1, 8 blocks of 32: values as kquant.c's unpack_q5 (Q5_0 signed: the sign trick; Q5_1 unsigned), d per
 * lane, Q5_1's dmin = -m per lane (has_min 2: the oracle's fma(dmin, s1_b)) */
KQ_INLINE void kq_unpack_q5(dt_type dt, const uint8_t *b, kq_sb *o) {
    const int bb = kq_bytes(dt);
    KQ_UNROLL
    for (int j = 0; j < 8; j++) o->v[j] = kq_q5_32(dt, b + bb * j);
    kq_sc32(o, _mm_set1_epi8(1));
    kq_nomin(o, dt == DT_Q5_1);
    o->d = kq_h2f8(b, bb);
    if (dt == DT_Q5_1) { /* -m: the sign flipped exactly */
        o->dmin = _mm256_xor_ps(kq_h2f8(b + 2, bb), _mm256_set1_ps(-0.0f));
        o->has_min = 2;
    }
}

/* q2 (two blocks of 128, quant/kquant.h): the 2-bit codes of 32 bytes, shifted by 0, 2, 4, 6, as the levels by one
 * vpshufb each; scale 1, d per block on its 4 lanes */
static inline __m256i kq_q2_levels(__m256i x, int p) {
    const __m256i lut = _mm256_setr_epi8(-10, -3, 3, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -10, -3, 3, 10, 0, 0, 0, 0, 0,
                                         0, 0, 0, 0, 0, 0, 0);
    return _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srl_epi16(x, _mm_cvtsi32_si128(2 * p)), _mm256_set1_epi8(3)));
}

KQ_INLINE void kq_unpack_q2(const uint8_t *b, kq_sb *o) {
    KQ_UNROLL
    for (int j = 0; j < 2; j++) {
        const __m256i x = _mm256_loadu_si256((const __m256i *)(b + 34 * j));
        KQ_UNROLL
        for (int p = 0; p < 4; p++) o->v[4 * j + p] = kq_q2_levels(x, p);
    }
    kq_sc32(o, _mm_set1_epi8(1));
    o->d = _mm256_set_m128(_mm_set1_ps(kq_h2f(b + 66)), _mm_set1_ps(kq_h2f(b + 32))); /* each block's d on its 4 lanes */
    kq_nomin(o, 0);
}

/* q2v: 32 values from 4 codes at c (quant/q2.c q2v_decode8's integers): the 4 magnitude patterns as 64-bit lanes,
 * the signs (value 7's by the parity over the pattern's sixes) as a byte mask, the shift +-1 added */
/* the sign byte of one code (values 0-6 from bits 8-14, value 7 by the parity) and its shift bit as 0xFF / 0 */
static inline uint32_t kq_q2v_sign(unsigned code, const uint8_t *six) {
    return (uint32_t)(six[256 + ((code >> 8) & 127u)] ^ six[code & 255]);
}

static inline __m256i kq_q2v_32(const uint8_t *c, const int8_t *pat, const uint8_t *six) {
    const unsigned c0 = (unsigned)(c[0] | c[1] << 8), c1 = (unsigned)(c[2] | c[3] << 8);
    const unsigned c2 = (unsigned)(c[4] | c[5] << 8), c3 = (unsigned)(c[6] | c[7] << 8);
    const uint32_t s4 = kq_q2v_sign(c0, six) | kq_q2v_sign(c1, six) << 8 | kq_q2v_sign(c2, six) << 16 |
                        kq_q2v_sign(c3, six) << 24;
    const uint32_t h4 = (c0 >> 15) * 0xFFu | (c1 >> 15) * 0xFF00u | (c2 >> 15) * 0xFF0000u | (c3 >> 15) * 0xFF000000u;
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3,
                                          3, 3, 3, 3);
    const __m256i m = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h4), shuf); /* -1 where the shift is -1/4, else 0 */
    const __m256i v = kq_apply_signs(kq_grid4(pat, c0 & 255, c1 & 255, c2 & 255, c3 & 255), s4);
    return _mm256_add_epi8(_mm256_add_epi8(v, _mm256_set1_epi8(1)), _mm256_add_epi8(m, m)); /* v + 1 + 2 m */
}

/* q2v (two blocks of 128) */
KQ_INLINE void kq_unpack_q2v(const uint8_t *b, const int8_t *pat, kq_sb *o) {
    const uint8_t *six = (const uint8_t *)pat + 2048; /* quant/kquant.h q2v_patterns */
    KQ_UNROLL
    for (int j = 0; j < 2; j++) {
        KQ_UNROLL
        for (int p = 0; p < 4; p++) o->v[4 * j + p] = kq_q2v_32(b + 34 * j + 8 * p, pat, six);
    }
    kq_sc32(o, _mm_set1_epi8(1));
    o->d = _mm256_set_m128(_mm_set1_ps(kq_h2f(b + 66)), _mm_set1_ps(kq_h2f(b + 32))); /* each block's d on its 4 lanes */
    kq_nomin(o, 0);
}

/* any type: the vector unpackings above (grid: kq_iq_grid(dt), used by the grid i-quants only; q2v_patterns() for
 * q2v) */
KQ_INLINE void kq_unpack_any(dt_type dt, const uint8_t *b, const int8_t *grid, kq_sb *o) {
    if (dt == DT_Q4_K || dt == DT_Q5_K) kq_unpack_q45(dt, b, o);
    else if (dt == DT_Q6_K) kq_unpack_q6(b, o);
    else if (dt == DT_Q2_K || dt == DT_Q3_K) kq_unpack_q23(dt, b, o);
    else if (dt == DT_IQ4_NL || dt == DT_IQ4_XS) kq_unpack_iq4(dt, b, o);
    else if (dt == DT_Q2) kq_unpack_q2(b, o);
    else if (dt == DT_Q2V) kq_unpack_q2v(b, grid, o);
    else if (dt == DT_Q5_0 || dt == DT_Q5_1) kq_unpack_q5(dt, b, o);
    else kq_unpack_grid_iq(dt, b, grid, o);
}

/* one block's 8 int32 partial dots: u8 a against s8 b (each pair's int16 sum within range: |a| <= 127 (signed
 * values by the sign trick) or a <= 63) */
static inline __m256i kq_dot32(__m256i a, __m256i b) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
#endif
}

/* isum (and msum) of the 8 blocks against one token's 256 int8 activations q and their 16 sums of 16 bk (kern_act
 * bk; read only for mins and offsets): per block 8 int32 partial dots, two hadd levels give each group of 16 its sum
 * (sab / scd's lane order), times its scale, then the two groups of a block added: exact integers throughout */
KQ_INLINE void kq_dot_sb(const kq_sb *u, const int8_t *q, const int16_t *bk, __m256i *isum, __m256i *msum) {
#if !(defined(__AVX512VNNI__) && defined(__AVX512VL__))
    if (u->sub) { /* IQ1 (values <= 18, |x| <= 127): vpmaddubsw pairs summed by two vphaddw levels in int16 (8 products,
                   * |sum| <= 18288), the scales as u16 pairs by one vpmaddwd: no vpmaddwd by ones, no vpmulld */
        __m256i p16[8];
        KQ_UNROLL
        for (int b = 0; b < 8; b++) p16[b] = _mm256_maddubs_epi16(u->v[b], _mm256_loadu_si256((const __m256i *)(q + 32 * b)));
        const __m256i sab = _mm256_or_si256(u->sab, _mm256_slli_epi32(u->sab, 16)), scd = _mm256_or_si256(u->scd, _mm256_slli_epi32(u->scd, 16));
        const __m256i ab = _mm256_madd_epi16(_mm256_hadd_epi16(_mm256_hadd_epi16(p16[0], p16[1]), _mm256_hadd_epi16(p16[2], p16[3])), sab);
        const __m256i cd = _mm256_madd_epi16(_mm256_hadd_epi16(_mm256_hadd_epi16(p16[4], p16[5]), _mm256_hadd_epi16(p16[6], p16[7])), scd);
        const __m256i is = _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20), _mm256_permute2x128_si256(ab, cd, 0x31));
        *msum = _mm256_setzero_si256();
        *isum = _mm256_sub_epi32(is, _mm256_madd_epi16(u->x16, _mm256_loadu_si256((const __m256i *)bk)));
        return;
    }
#endif
    __m256i p[8];
    KQ_UNROLL
    for (int b = 0; b < 8; b++) {
        const __m256i x = _mm256_loadu_si256((const __m256i *)(q + 32 * b));
        p[b] = u->uns == 1   ? kq_dot32(u->v[b], x)
               : u->uns == 2 ? kq_dot32(u->v[b], _mm256_sign_epi8(x, u->sg[b]))
                             : kq_dot32(_mm256_sign_epi8(u->v[b], u->v[b]), _mm256_sign_epi8(x, u->v[b]));
    }
    const __m256i ab = _mm256_mullo_epi32(_mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3])), u->sab);
    const __m256i cd = _mm256_mullo_epi32(_mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7])), u->scd);
    __m256i is = _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20), _mm256_permute2x128_si256(ab, cd, 0x31));
    *msum = _mm256_setzero_si256();
    if (u->has_min == 1 || u->off || u->sub) { /* lane b: x16 of groups 2b, 2b + 1 times their sums */
        const __m256i g = _mm256_madd_epi16(u->x16, _mm256_loadu_si256((const __m256i *)bk));
        if (u->has_min == 1) *msum = g;
        else is = _mm256_sub_epi32(is, u->off ? _mm256_sll_epi32(g, _mm_cvtsi32_si128(u->off)) : g);
    }
    *isum = is;
}

/* lanes(a) - lanes(m), lanes(a) = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) (the oracle's order, each add
 * the same IEEE add) in registers: two hadds pair the lanes, the two halves added last */
static inline float kq_lanes_diff(__m256 a, __m256 m) {
    const __m256 h = _mm256_hadd_ps(a, m);  /* a0+a1 a2+a3 m0+m1 m2+m3 | a4+a5 a6+a7 m4+m5 m6+m7 */
    const __m256 h2 = _mm256_hadd_ps(h, h); /* (a0+a1)+(a2+a3) (m0+m1)+(m2+m3) .. | (a4+a5)+(a6+a7) .. */
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(h2), _mm256_extractf128_ps(h2, 1));
    return _mm_cvtss_f32(s) - _mm_cvtss_f32(_mm_movehdup_ps(s));
}

/* the last cols % 256 columns (IQ4_NL, Q5_0, Q5_1 and q2 only; of these only Q5_1 has a min, on accm as the oracle's
 * fma(dmin, s1_b)): the oracle's steps block of 32 by block of 32 on lane b % 8, its integer sum (scale 1) by one
 * vpmaddubsw / vpmaddwd (the sign trick, exact for Q5_1's unsigned values too) and an exact horizontal add */
static inline void kq_tail(const tn_mat *w, const kern_act *a, const uint8_t *row, const int8_t *grid, int t, int c0,
                           float *acc, float *accm) {
    const dt_type dt = w->dtype;
    const int cols = w->cols, q2 = kq_rotated(dt), q5 = dt == DT_Q5_0 || dt == DT_Q5_1;
    const int8_t *aq = kq_act_q(a, dt);
    const float *ad = kq_act_d(a, dt);
    float d = 0.0f;
    for (int c = c0; c < cols; c += 32) {
        const uint8_t *blk = q2 ? row + (size_t)(c / 128) * 34 : row + (size_t)(c / 32) * (size_t)kq_bytes(dt);
        if (!q2 || c % 128 == 0) d = kq_h2f(q2 ? blk + 32 : blk); /* the block's scale, once */
        const __m256i v = dt == DT_Q2V ? kq_q2v_32(blk + (c % 128) / 4, grid, (const uint8_t *)grid + 2048)
                          : q2 ? kq_q2_levels(_mm256_loadu_si256((const __m256i *)blk), (c % 128) / 32)
                          : q5 ? kq_q5_32(dt, blk) : kq_iq4_levels(blk + 2);
        const __m256i x = _mm256_loadu_si256((const __m256i *)(aq + (size_t)t * (size_t)cols + (size_t)c));
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(x, v)), _mm256_set1_epi16(1));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
        h = _mm_hadd_epi32(h, h);
        h = _mm_hadd_epi32(h, h);
        const float xd = ad[(size_t)t * (size_t)(cols / 32) + (size_t)(c / 32)];
        const int l = (c / 32) % 8;
        acc[l] = fmaf((float)_mm_cvtsi128_si32(h), d * xd, acc[l]);
        if (dt == DT_Q5_1)
            accm[l] = fmaf(-kq_h2f(blk + 2), a->s1[(size_t)t * (size_t)kern_act_ns(cols / 32) + (size_t)(c / 32)], accm[l]);
    }
}

/* one superblock k of a row against token tt: acc / accm as the oracle's steps (s1: kern_act's, for has_min 2) */
KQ_INLINE void kq_step(const kq_sb *u, const int8_t *aq, const int16_t *bk, const float *ad, const float *s1, int cols,
                       size_t tt, int k, __m256 *acc, __m256 *accm) {
    __m256i is, ms;
    kq_dot_sb(u, aq + tt * (size_t)cols + (size_t)k * 256, bk + tt * (size_t)(cols / 16) + (size_t)k * 16, &is, &ms);
    const __m256 xd = _mm256_loadu_ps(ad + tt * (size_t)(cols / 32) + (size_t)k * 8);
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(u->d, xd), *acc);
    if (u->has_min == 1) *accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(u->dmin, xd), *accm);
    else if (u->has_min == 2)
        *accm = _mm256_fmadd_ps(u->dmin, _mm256_loadu_ps(s1 + tt * (size_t)kern_act_ns(cols / 32) + (size_t)k * 8), *accm);
}

/* rows [r0, r1) of a dt matrix (dt a constant where it is inlined: each type's loop compiled on its own, the
 * unpacking's flags folded); one token (decode) keeps its sums in registers */
KQ_INLINE void kq_i8_run(dt_type dt, const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    const int cols = w->cols, T = a->n_tok, nsb = cols / 256;
    const size_t rb = kq_row_bytes(dt, cols), sbb = (size_t)kq_bytes(dt) * (size_t)(256 / kq_blk(dt));
    const int8_t *aq = kq_act_q(a, dt); /* kernels.h kern_matmul_i8_fn: the form dt reads */
    const float *ad = kq_act_d(a, dt);
    const int16_t *bk = a->bk; /* the q8_K form's sums: read for the types with mins or offsets, all of that form */
    const float *s1 = a->s1;   /* the q8_1 form's block sums: Q5_1's min */
    const int8_t *grid = dt == DT_Q2V ? q2v_patterns() : dt == DT_IQ1_S || dt == DT_IQ1_M ? kq_iq1_plus10() : kq_iq_grid(dt);
    for (int t0 = 0; t0 < T; t0 += KQ_TOK) {
        const int nt = T - t0 < KQ_TOK ? T - t0 : KQ_TOK;
        for (int r = r0; r < r1; r++) {
            const uint8_t *row = (const uint8_t *)w->data + (size_t)r * rb;
            __m256 acc[KQ_TOK], accm[KQ_TOK];
            if (nt == 1) {
                __m256 a1 = _mm256_setzero_ps(), m1 = _mm256_setzero_ps();
                for (int k = 0; k < nsb; k++) {
                    kq_sb u;
                    kq_unpack_any(dt, row + (size_t)k * sbb, grid, &u);
                    kq_step(&u, aq, bk, ad, s1, cols, (size_t)t0, k, &a1, &m1);
                }
                acc[0] = a1, accm[0] = m1;
            } else {
                for (int t = 0; t < nt; t++) acc[t] = accm[t] = _mm256_setzero_ps();
                for (int k = 0; k < nsb; k++) {
                    kq_sb u;
                    kq_unpack_any(dt, row + (size_t)k * sbb, grid, &u);
                    for (int t = 0; t < nt; t++) kq_step(&u, aq, bk, ad, s1, cols, (size_t)(t0 + t), k, &acc[t], &accm[t]);
                }
            }
            for (int t = 0; t < nt; t++) {
                if (nsb * 256 < cols) {
                    float fa[8], fm[8];
                    _mm256_storeu_ps(fa, acc[t]);
                    _mm256_storeu_ps(fm, accm[t]);
                    kq_tail(w, a, row, grid, t0 + t, nsb * 256, fa, fm);
                    acc[t] = _mm256_loadu_ps(fa);
                    accm[t] = _mm256_loadu_ps(fm);
                }
                y[(size_t)(t0 + t) * ldy + (size_t)r] = kq_lanes_diff(acc[t], accm[t]);
            }
        }
    }
}

static inline void kq_i8_x86(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    switch (w->dtype) {
#define KQ_CASE(T) \
    case T: kq_i8_run(T, w, a, y, ldy, r0, r1); break;
        KQ_CASE(DT_Q2_K) KQ_CASE(DT_Q3_K) KQ_CASE(DT_Q4_K) KQ_CASE(DT_Q5_K) KQ_CASE(DT_Q6_K) KQ_CASE(DT_IQ4_XS)
        KQ_CASE(DT_IQ4_NL) KQ_CASE(DT_IQ2_XXS) KQ_CASE(DT_IQ2_XS) KQ_CASE(DT_IQ2_S) KQ_CASE(DT_IQ3_XXS) KQ_CASE(DT_IQ3_S)
        KQ_CASE(DT_IQ1_S) KQ_CASE(DT_IQ1_M) KQ_CASE(DT_Q2) KQ_CASE(DT_Q2V) KQ_CASE(DT_Q5_0) KQ_CASE(DT_Q5_1)
#undef KQ_CASE
    default: kq_i8_run(w->dtype, w, a, y, ldy, r0, r1); break;
    }
}

#endif
