/*
 * cuda_emu.h — what the CPU emulations of the int8 matvecs share (tools/cuda_mv1d_emu.c, tools/cuda_mv1p_emu.c):
 * the word types, the random source, the dp4a block dot (src/backend/cuda/cuda_i8.cuh dot_block), half and bf16 words
 * and their direct reading, the random jobs' words, and the canonical chains of one row read directly (cuda.h).
 * Header-only (static): each emulator is one file, built alone (`cc -O2 -std=c11 tools/cuda_mv1d_emu.c -lm`).
 */
#ifndef SL_TOOLS_CUDA_EMU_H
#define SL_TOOLS_CUDA_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum { Q8 = 5, Q4 = 6, F32 = 0, BF16 = 1, F16 = 2 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) { rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17; return (uint32_t)(rng >> 16); }

typedef struct { uint32_t x, y, z, w; } u4;

static int dp4a_ss(uint32_t a, uint32_t b, int c) { /* signed x signed bytes */
    for (int k = 0; k < 4; k++) c += (int8_t)(a >> 8 * k) * (int8_t)(b >> 8 * k);
    return c;
}
static int dp4a_us(uint32_t a, uint32_t b, int c) { /* unsigned x signed bytes */
    for (int k = 0; k < 4; k++) c += (uint8_t)(a >> 8 * k) * (int8_t)(b >> 8 * k);
    return c;
}
static int dot_block(int dt, u4 w0, u4 w1, u4 x0, u4 x1) { /* cuda_i8.cuh dot_block */
    int I = 0;
    if (dt == Q4) {
        const uint32_t M = 0x0f0f0f0fu;
        I = dp4a_ss(w0.x & M, x0.x, I), I = dp4a_ss((w0.x >> 4) & M, x0.y, I);
        I = dp4a_ss(w0.y & M, x0.z, I), I = dp4a_ss((w0.y >> 4) & M, x0.w, I);
        I = dp4a_ss(w0.z & M, x1.x, I), I = dp4a_ss((w0.z >> 4) & M, x1.y, I);
        I = dp4a_ss(w0.w & M, x1.z, I), I = dp4a_ss((w0.w >> 4) & M, x1.w, I);
    } else {
        I = dp4a_us(w0.x, x0.x, I), I = dp4a_us(w0.y, x0.y, I), I = dp4a_us(w0.z, x0.z, I), I = dp4a_us(w0.w, x0.w, I);
        I = dp4a_us(w1.x, x1.x, I), I = dp4a_us(w1.y, x1.y, I), I = dp4a_us(w1.z, x1.z, I), I = dp4a_us(w1.w, x1.w, I);
    }
    return I;
}

static float h2f(uint16_t h) { /* IEEE half to float */
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
    return s ? -v : v;
}
static uint16_t f2h(float v) { /* float to half, round to nearest (small normal values only) */
    if (v == 0) return 0;
    int e;
    const float m = frexpf(fabsf(v), &e); /* v = m 2^e, m in [0.5, 1) */
    unsigned mm = (unsigned)lrintf(m * 2048.0f); /* 11 bits */
    if (mm == 2048) mm = 1024, e++;
    return (uint16_t)((v < 0 ? 0x8000 : 0) | ((e + 14) << 10) | (mm & 1023));
}
static float zbias(int dt, float sw) { return (dt == Q4 ? -8.0f : -128.0f) * sw; } /* cuda_i8.cuh zbias */
static float elem(const uint8_t *p, int sdt, size_t i) { /* element i read directly (the reference) */
    if (sdt == F32) { float f; memcpy(&f, p + 4 * i, 4); return f; }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    if (sdt == BF16) { const unsigned u = (unsigned)h << 16; float f; memcpy(&f, &u, 4); return f; }
    return h2f(h);
}

/* A job's random inputs: nc code bytes, n_tok tokens' int8 activation (cols each), block scales d (nb each) and
 * group sums s (ns each), in this order of draws */
static void rand_inputs(uint8_t *codes, size_t nc, int8_t *xq, float *d, float *s, int n_tok, int cols, int nb, int ns) {
    for (size_t i = 0; i < nc; i++) codes[i] = (uint8_t)rnd();
    for (int i = 0; i < n_tok * cols; i++) xq[i] = (int8_t)(rnd() % 255 - 127);
    for (int i = 0; i < n_tok * nb; i++) d[i] = (float)(rnd() % 1000 + 1) * 1e-4f;
    for (int i = 0; i < n_tok * ns; i++) s[i] = (float)((int)(rnd() % 2001) - 1000) * 1e-3f;
}

/* n random scale and bias words of type sdt at scp and bip, interleaved (scale i, bias i); ib (implied biases,
 * SLUICE_CUDA_IBIAS=1): each bias word z times its scale (cuda_i8.cuh zbias), exact in the word (a power of two times
 * a word's value), the scale replaced where an f16 product would not be a normal half (f2h takes normal values only) */
static void rand_words(int dt, int sdt, int ib, uint8_t *scp, uint8_t *bip, size_t n) {
    const int ssz = sdt == F32 ? 4 : 2;
    for (size_t i = 0; i < n; i++)
        for (int h = 0; h < 2; h++) {
            float v = (float)((int)(rnd() % 2001) - 1000) * (h ? 1e-3f : 1e-5f);
            uint8_t *p = (h ? bip : scp) + i * ssz;
            if (h && ib && sdt == F16 && h2f(f2h(zbias(dt, elem(scp, sdt, i)))) != zbias(dt, elem(scp, sdt, i))) {
                const uint16_t t = f2h(1e-3f);
                memcpy(scp + i * ssz, &t, 2);
            }
            if (h && ib) v = zbias(dt, elem(scp, sdt, i));
            if (sdt == F32) memcpy(p, &v, 4);
            else if (sdt == BF16) { unsigned u; memcpy(&u, &v, 4); const uint16_t t = (uint16_t)(u >> 16); memcpy(p, &t, 2); }
            else { const uint16_t t = f2h(v); memcpy(p, &t, 2); }
        }
}

/* the canonical chains of row r, read directly (cuda.h): codes [rows][rb] of type dt, scale and bias words [rows][ng]
 * of type sdt, one token's int8 activation xq [cols], block scales d [nb] and group sums s (the group's run at soff) */
static float ref_row(int dt, int sdt, const uint8_t *codes, const uint8_t *scales, const uint8_t *biases, const int8_t *xq,
                     const float *d, const float *s, int cols, int group, int r) {
    const int nb = cols / 32, ng = cols / group, rb = dt == Q4 ? cols / 2 : cols, BB = dt == Q4 ? 16 : 32;
    const int gshift = group == 32 ? 0 : group == 64 ? 1 : 2, soff = group == 32 ? 0 : group == 64 ? nb : nb + nb / 2;
    float acc = 0, accb = 0;
    for (int b = 0; b < nb; b++) {
        u4 w0, w1, x0, x1;
        memcpy(&w0, codes + (size_t)r * rb + (size_t)b * BB, 16);
        memcpy(&w1, codes + (size_t)r * rb + (size_t)b * BB + (dt == Q8 ? 16 : 0), 16);
        memcpy(&x0, xq + (size_t)b * 32, 16), memcpy(&x1, xq + (size_t)b * 32 + 16, 16);
        const int I = dot_block(dt, w0, w1, x0, x1);
        acc = fmaf((float)I, elem(scales, sdt, (size_t)r * ng + (b >> gshift)) * d[b], acc);
    }
    for (int g = 0; g < ng; g++) accb = fmaf(elem(biases, sdt, (size_t)r * ng + g), s[soff + g], accb);
    return acc + accb;
}

#endif
