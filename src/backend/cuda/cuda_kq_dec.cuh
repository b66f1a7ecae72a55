/*
 * cuda_kq_dec.cuh — the GGUF block types' decoders (cuda_kq.cu): dec<DT>(block, j, w) writes piece j's 32 values
 * (values 32 j .. 32 j + 31 of the block; j = 0 for blocks of 32) exactly as src/quant/kquant.c kq_block_to_f32 does:
 * dl = d * sc, ml = dmin * mn, w = dl * q (- ml), each a single rounded operation. Compiled for the device by
 * cuda_kq.cu and for the host by tools/cuda_kq_emu.cpp (which checks them bitwise against the oracle without a GPU):
 * KQ_FN, KQ_MUL, KQ_SUB, KQ_POPC and kq_half are the device's intrinsics there, plain C++ (built with
 * -ffp-contract=off) here. The includer defines the grids g_iq2xxs .. g_iq1s (kq_iq_grid's tables).
 */
#ifndef SL_CUDA_KQ_DEC_CUH
#define SL_CUDA_KQ_DEC_CUH

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define KQ_FN __device__ __forceinline__
#define KQ_MUL __fmul_rn /* nvcc would contract a * b - c into an fma otherwise */
#define KQ_SUB __fsub_rn
#define KQ_POPC __popc
KQ_FN float kq_half(unsigned short h) { return __half2float(__ushort_as_half(h)); }
/* (float)q, exact for |q| < 2^22, as an add and a subtract of 1.5 * 2^23 (full-rate; the I2F conversion is not) */
KQ_FN float kq_i2f(int q) { return __fsub_rn(__int_as_float(0x4B400000 + q), 12582912.0f); }
/* 4 bytes at p, any alignment: the aligned words around them (the word after may be read: callers keep p + 7 in
 * their buffer) */
KQ_FN unsigned ld32(const uint8_t *p) {
    const unsigned m = (unsigned)(uintptr_t)p & 3; /* p - m by pointer arithmetic: the state space stays known */
    const unsigned *w = (const unsigned *)(p - m), lo = w[0];
    return m ? __funnelshift_r(lo, w[1], m * 8) : lo;
}
#else
#define KQ_FN inline
inline float KQ_MUL(float a, float b) { return a * b; }
inline float KQ_SUB(float a, float b) { return a - b; }
inline int KQ_POPC(unsigned v) { return __builtin_popcount(v); }
inline float kq_half(unsigned short h) { return f16_to_f32(h); }
inline unsigned ld32(const uint8_t *p) { return (unsigned)p[0] | (unsigned)p[1] << 8 | (unsigned)p[2] << 16 | (unsigned)p[3] << 24; }
inline float kq_i2f(int q) { /* the device's trick, written out: the emulation checks it */
    const uint32_t u = 0x4B400000u + (uint32_t)q;
    float f;
    memcpy(&f, &u, 4);
    return f - 12582912.0f;
}
#endif

/* k_kq's shape (cuda_kq.cu): KQ_WARPS rows a CTA (a warp a row), up to KQ_T tokens a read of the weights */
#define KQ_WARPS 4
#define KQ_T 8

/* Tokens one k_kq launch takes at most for a matrix of rows rows (> 0): its grid has a CTA for each row block and chunk
 * of KQ_T tokens, at most 2^31 - 1 of them, and launch_mm steps its token offset (an int) by this, so it is a positive
 * multiple of KQ_T within an int. Without the cap, 2^31 - 1 over the row blocks times KQ_T passes INT_MAX for fewer
 * than 8 row blocks: cast to int it was -8 for a router's 4 rows, and launch_mm's loop never ended (the GGUF fixtures'
 * stall on the H100, call H). tools/cuda_kq_emu.cpp checks both functions for every row count up to 4096 and more. */
inline int kq_launch_tokens(int rows) {
    const long long rb = rows > 0 ? ((long long)rows + KQ_WARPS - 1) / KQ_WARPS : 1, most = (0x7fffffffLL / rb) * KQ_T;
    const long long cap = (0x7fffffffLL / KQ_T) * KQ_T;
    return (int)(most < cap ? most : cap);
}
/* launch_mm's next token offset after the launch at t0 (most: kq_launch_tokens): n when that launch took the rest */
inline int kq_launch_next(int t0, int n, int most) { return n - t0 <= most ? n : t0 + most; }

/* values and bytes per block (kquant.h) */
template <int DT> struct KT;
#define KT_(dt, blk, bytes) template <> struct KT<dt> { enum { BLK = blk, BYTES = bytes }; }
KT_(DT_Q2_K, 256, 84);
KT_(DT_Q3_K, 256, 110);
KT_(DT_Q4_K, 256, 144);
KT_(DT_Q5_K, 256, 176);
KT_(DT_Q6_K, 256, 210);
KT_(DT_IQ4_NL, 32, 18);
KT_(DT_IQ4_XS, 256, 136);
KT_(DT_IQ2_XXS, 256, 66);
KT_(DT_IQ2_XS, 256, 74);
KT_(DT_IQ2_S, 256, 82);
KT_(DT_IQ3_XXS, 256, 98);
KT_(DT_IQ3_S, 256, 110);
KT_(DT_IQ1_S, 256, 50);
KT_(DT_IQ1_M, 256, 56);
KT_(DT_Q5_0, 32, 22);
KT_(DT_Q5_1, 32, 24);

/* Chunk k of a row at address row (nb blocks): 32 pieces, BPC = 32 / (BLK / 32) blocks from block k BPC (fewer at the
 * row's end). The warp stages the nw aligned 32-bit words from *a = (its first byte) & ~3 to its last byte; the blocks
 * start at the returned offset into them, block i of the chunk BYTES further each. */
template <int DT> KQ_FN int kq_chunk(uintptr_t row, int k, int nb, uintptr_t *a, int *nw) {
    constexpr int BYTES = KT<DT>::BYTES, BPC = 32 / (KT<DT>::BLK / 32);
    const int b0 = k * BPC, nblk = nb - b0 < BPC ? nb - b0 : BPC;
    const uintptr_t s = row + (uintptr_t)b0 * BYTES;
    *a = s & ~(uintptr_t)3;
    *nw = (int)((s + (uintptr_t)nblk * BYTES - *a + 3) >> 2);
    return (int)(s - *a);
}

/* IQ4_NL's 16 levels (KQ_IQ4_LEVELS: -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113) as
 * bytes of two words: a register lookup (a constant-memory table would serialise a warp's different indices) */
KQ_FN int iq4v(unsigned n) {
    const unsigned long long lo = 0xF6EADDCFBFAD9881ull, hi = 0x7159453526190D01ull;
    return (int)(signed char)(((n & 8) ? hi : lo) >> (8 * (n & 7)));
}
KQ_FN float h2f(const uint8_t *p) {
    return kq_half((unsigned short)(p[0] | p[1] << 8));
}
KQ_FN unsigned u16at(const uint8_t *p) { return (unsigned)p[0] | (unsigned)p[1] << 8; }
KQ_FN unsigned u32at(const uint8_t *p) {
    return (unsigned)p[0] | (unsigned)p[1] << 8 | (unsigned)p[2] << 16 | (unsigned)p[3] << 24;
}
/* n / 4 words of bytes p[0 .. n) (ld32), byte i of them by BYTE */
template <int N> KQ_FN void ldw(const uint8_t *p, unsigned *w) {
#pragma unroll
    for (int k = 0; k < N / 4; k++) w[k] = ld32(p + 4 * k);
}
#define BYTE(w, i) (((w)[(i) >> 2] >> (8 * ((i) & 3))) & 0xFFu)
/* kq_block_to_f32: p = dl * q; with a min p - ml */
KQ_FN float kw(float dl, int q) { return KQ_MUL(dl, kq_i2f(q)); }
KQ_FN float kwm(float dl, int q, float ml) { return KQ_SUB(KQ_MUL(dl, kq_i2f(q)), ml); }
/* ksigns_iq2xs: 7 sign bits and an eighth that makes their count even */
KQ_FN unsigned ksign(unsigned i) { return i | (unsigned)(KQ_POPC(i) & 1) << 7; }

/* 8 values dl * (+-g[k]) of a grid entry, sign bit k of s */
KQ_FN void put8(float *w, float dl, const int8_t *g, unsigned s) {
#pragma unroll
    for (int k = 0; k < 8; k++) w[k] = kw(dl, (s >> k) & 1 ? -(int)g[k] : (int)g[k]);
}
KQ_FN void put8_iq3(float *w, float dl, const int8_t *g1, const int8_t *g2, unsigned s) {
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const int v = k < 4 ? g1[k] : g2[k - 4];
        w[k] = kw(dl, (s >> k) & 1 ? -v : v);
    }
}
/* IQ1: dl * (8 grid + delta), delta -1 / +1 */
KQ_FN void put8_iq1(float *w, float dl, const int8_t *g, int neg) {
#pragma unroll
    for (int k = 0; k < 8; k++) w[k] = kw(dl, 8 * (int)g[k] + (neg ? -1 : 1));
}

/* get_scale_min_k4 (kquant.c scale_min_k4) */
KQ_FN void scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* piece j (values 32 j .. 32 j + 31; j = 0 for the blocks of 32) of block b as kq_block_to_f32 gives them */
template <int DT> KQ_FN void dec(const uint8_t *b, int j, float *w);

template <> KQ_FN void dec<DT_Q2_K>(const uint8_t *b, int j, float *w) {
    const float d = h2f(b + 80), dmin = h2f(b + 82);
    unsigned qs[8];
    ldw<32>(b + 16 + 32 * (j / 4), qs);
    const int sh = 2 * (j % 4);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int sc = b[2 * j + h];
        const float dl = KQ_MUL(d, (float)(sc & 15)), ml = KQ_MUL(dmin, (float)(sc >> 4));
#pragma unroll
        for (int i = 16 * h; i < 16 * h + 16; i++) w[i] = kwm(dl, (BYTE(qs, i) >> sh) & 3, ml);
    }
}

template <> KQ_FN void dec<DT_Q3_K>(const uint8_t *b, int j, float *w) {
    const float d = h2f(b + 108);
    unsigned qs[8], hm[8];
    ldw<32>(b + 32 + 32 * (j / 4), qs);
    ldw<32>(b, hm);
    const int sh = 2 * (j % 4);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int g = 2 * j + h;
        const int lo = (b[96 + g % 8] >> (4 * (g / 8))) & 0xF, hi = (b[104 + g % 4] >> (2 * (g / 4))) & 3;
        const float dl = KQ_MUL(d, (float)((lo | hi << 4) - 32));
#pragma unroll
        for (int i = 16 * h; i < 16 * h + 16; i++)
            w[i] = kw(dl, (int)((BYTE(qs, i) >> sh) & 3) - (((BYTE(hm, i) >> j) & 1) ? 0 : 4));
    }
}

template <int Q5> KQ_FN void dec_q45(const uint8_t *b, int j, float *w) {
    int sc, m;
    scale_min_k4(j, b + 4, &sc, &m);
    const float dl = KQ_MUL(h2f(b), (float)sc), ml = KQ_MUL(h2f(b + 2), (float)m);
    unsigned qs[8], qh[8];
    ldw<32>(b + (Q5 ? 48 : 16) + 32 * (j / 2), qs);
    if (Q5) ldw<32>(b + 16, qh);
    const int sh = 4 * (j % 2);
#pragma unroll
    for (int i = 0; i < 32; i++) {
        int q = (int)((BYTE(qs, i) >> sh) & 0xF);
        if (Q5) q |= (int)((BYTE(qh, i) >> j) & 1) << 4;
        w[i] = kwm(dl, q, ml);
    }
}
template <> KQ_FN void dec<DT_Q4_K>(const uint8_t *b, int j, float *w) { dec_q45<0>(b, j, w); }
template <> KQ_FN void dec<DT_Q5_K>(const uint8_t *b, int j, float *w) { dec_q45<1>(b, j, w); }

template <> KQ_FN void dec<DT_Q6_K>(const uint8_t *b, int j, float *w) {
    const float d = h2f(b + 208);
    unsigned ql[8], qh[8];
    ldw<32>(b + 64 * (j / 4) + 32 * (j % 2), ql);
    ldw<32>(b + 128 + 32 * (j / 4), qh);
    const int sl = 4 * ((j % 4) / 2), sh = 2 * (j % 4);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float dl = KQ_MUL(d, (float)(int8_t)b[192 + 2 * j + h]);
#pragma unroll
        for (int i = 16 * h; i < 16 * h + 16; i++)
            w[i] = kw(dl, (int)(((BYTE(ql, i) >> sl) & 0xF) | ((BYTE(qh, i) >> sh) & 3) << 4) - 32);
    }
}

/* 16 bytes of nibbles: low nibbles values 0-15, high ones 16-31, through IQ4_NL's levels */
KQ_FN void put_iq4(float *w, float dl, const uint8_t *p) {
    unsigned qs[4];
    ldw<16>(p, qs);
#pragma unroll
    for (int l = 0; l < 16; l++) {
        w[l] = kw(dl, iq4v(BYTE(qs, l) & 0xF));
        w[l + 16] = kw(dl, iq4v(BYTE(qs, l) >> 4));
    }
}
template <> KQ_FN void dec<DT_IQ4_NL>(const uint8_t *b, int j, float *w) {
    (void)j;
    put_iq4(w, KQ_MUL(h2f(b), 1.0f), b + 2);
}
template <> KQ_FN void dec<DT_IQ4_XS>(const uint8_t *b, int j, float *w) {
    const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 0xF) | (int)((u16at(b + 2) >> (2 * j)) & 3) << 4;
    put_iq4(w, KQ_MUL(h2f(b), (float)(ls - 32)), b + 8 + 16 * j);
}

template <int Q51> KQ_FN void dec_q5(const uint8_t *b, float *w) {
    const unsigned qh = ld32(b + (Q51 ? 4 : 2));
    unsigned qs[4];
    ldw<16>(b + (Q51 ? 8 : 6), qs);
    const float dl = KQ_MUL(h2f(b), 1.0f), ml = Q51 ? KQ_MUL(-h2f(b + 2), 1.0f) : 0.0f;
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const int lo = (int)(BYTE(qs, i) & 0xF) | (int)((qh >> i) & 1) << 4;
        const int hi = (int)(BYTE(qs, i) >> 4) | (int)((qh >> (i + 16)) & 1) << 4;
        w[i] = Q51 ? kwm(dl, lo, ml) : kw(dl, lo - 16);
        w[i + 16] = Q51 ? kwm(dl, hi, ml) : kw(dl, hi - 16);
    }
}
template <> KQ_FN void dec<DT_Q5_0>(const uint8_t *b, int j, float *w) { (void)j, dec_q5<0>(b, w); }
template <> KQ_FN void dec<DT_Q5_1>(const uint8_t *b, int j, float *w) { (void)j, dec_q5<1>(b, w); }

template <> KQ_FN void dec<DT_IQ2_XXS>(const uint8_t *b, int j, float *w) {
    const uint8_t *q = b + 2 + 8 * j;
    const unsigned aux = u32at(q + 4);
    const float dl = KQ_MUL(KQ_MUL(h2f(b), 0.125f), (float)(2 * (aux >> 28) + 1));
#pragma unroll
    for (int l = 0; l < 4; l++) put8(w + 8 * l, dl, g_iq2xxs + 8 * q[l], ksign((aux >> (7 * l)) & 127));
}

template <> KQ_FN void dec<DT_IQ2_XS>(const uint8_t *b, int j, float *w) {
    const float d = KQ_MUL(h2f(b), 0.125f);
    const int s = b[66 + j];
    const float dl0 = KQ_MUL(d, (float)(2 * (s & 15) + 1)), dl1 = KQ_MUL(d, (float)(2 * (s >> 4) + 1));
#pragma unroll
    for (int l = 0; l < 4; l++) {
        const unsigned v = u16at(b + 2 + 2 * (4 * j + l));
        put8(w + 8 * l, l < 2 ? dl0 : dl1, g_iq2xs + 8 * (v & 511), ksign(v >> 9));
    }
}

template <> KQ_FN void dec<DT_IQ2_S>(const uint8_t *b, int j, float *w) {
    const float d = KQ_MUL(h2f(b), 0.125f);
    const int s = b[74 + j];
    const unsigned qh = b[66 + j];
    const float dl0 = KQ_MUL(d, (float)(2 * (s & 15) + 1)), dl1 = KQ_MUL(d, (float)(2 * (s >> 4) + 1));
#pragma unroll
    for (int l = 0; l < 4; l++) {
        const unsigned idx = b[2 + 4 * j + l] | ((qh << (8 - 2 * l)) & 0x300);
        put8(w + 8 * l, l < 2 ? dl0 : dl1, g_iq2s + 8 * idx, b[34 + 4 * j + l]);
    }
}

template <> KQ_FN void dec<DT_IQ3_XXS>(const uint8_t *b, int j, float *w) {
    const uint8_t *q = b + 2 + 8 * j;
    const unsigned aux = u32at(b + 66 + 4 * j);
    const float dl = KQ_MUL(KQ_MUL(h2f(b), 0.25f), (float)(2 * (aux >> 28) + 1));
#pragma unroll
    for (int l = 0; l < 4; l++)
        put8_iq3(w + 8 * l, dl, g_iq3xxs + 4 * q[2 * l], g_iq3xxs + 4 * q[2 * l + 1], ksign((aux >> (7 * l)) & 127));
}

template <> KQ_FN void dec<DT_IQ3_S>(const uint8_t *b, int j, float *w) {
    const unsigned qh = b[66 + j];
    const float dl = KQ_MUL(h2f(b), (float)(2 * ((b[106 + j / 2] >> (4 * (j % 2))) & 15) + 1));
#pragma unroll
    for (int l = 0; l < 4; l++) {
        const unsigned i1 = b[2 + 8 * j + 2 * l] | ((qh << (8 - 2 * l)) & 256);
        const unsigned i2 = b[2 + 8 * j + 2 * l + 1] | ((qh << (7 - 2 * l)) & 256);
        put8_iq3(w + 8 * l, dl, g_iq3s + 4 * i1, g_iq3s + 4 * i2, b[74 + 4 * j + l]);
    }
}

template <> KQ_FN void dec<DT_IQ1_S>(const uint8_t *b, int j, float *w) {
    const unsigned qh = u16at(b + 34 + 2 * j);
    const float dl = KQ_MUL(KQ_MUL(h2f(b), 0.125f), (float)(2 * ((qh >> 12) & 7) + 1));
#pragma unroll
    for (int l = 0; l < 4; l++)
        put8_iq1(w + 8 * l, dl, g_iq1s + 8 * (b[2 + 4 * j + l] | ((qh >> (3 * l)) & 7) << 8), qh & 0x8000);
}

template <> KQ_FN void dec<DT_IQ1_M>(const uint8_t *b, int j, float *w) {
    const unsigned s0 = u16at(b + 48), s1 = u16at(b + 50), s2 = u16at(b + 52), s3 = u16at(b + 54);
    const unsigned short hd = (unsigned short)((s0 >> 12) | ((s1 >> 8) & 0xf0) | ((s2 >> 4) & 0xf00) | (s3 & 0xf000));
    const float d = KQ_MUL(kq_half(hd), 0.125f);
    const unsigned sc = u16at(b + 48 + 2 * (j / 2)), sh = 6 * (j % 2);
    const float dl0 = KQ_MUL(d, (float)(2 * ((sc >> sh) & 7) + 1)), dl1 = KQ_MUL(d, (float)(2 * ((sc >> (sh + 3)) & 7) + 1));
#pragma unroll
    for (int l = 0; l < 4; l++) {
        const unsigned h = (b[32 + 2 * j + l / 2] >> (4 * (l % 2))) & 15;
        put8_iq1(w + 8 * l, l < 2 ? dl0 : dl1, g_iq1s + 8 * (b[4 * j + l] | (h & 7) << 8), h & 8);
    }
}

#endif
