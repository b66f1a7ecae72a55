/*
 * kquant_iq.c — the grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M; quant/kquant.h) unpacked
 * into kq_unpacked's integers: a value code qv per element, an integer scale per group, d a power-of-two fraction
 * of the block's f16 scale, so that w = (d * sc) * qv is bitwise gguf-py's dequantize (gguf/quants.py; layout:
 * llama.cpp ggml-quants.c dequantize_row_iq*):
 *   IQ2_*:   gguf-py db = d * (0.5 + ls) * 0.25, w = db * grid * sign   ->  d / 8, sc = 2 ls + 1, qv = ±grid
 *   IQ3_XXS: db = d * (0.5 + ls) * 0.5                                 ->  d / 4, sc = 2 ls + 1, qv = ±grid
 *   IQ3_S:   db = d * (1 + 2 ls)                                       ->  d,     sc = 2 ls + 1, qv = ±grid
 *   IQ1_*:   dl = d * (2 ls + 1), w = dl * (grid + delta), delta ±1/8  ->  d / 8, sc = 2 ls + 1, qv = 8 grid ± 1
 * (scaling by 2^-k commutes with f32 rounding: every d here is an f16's value, far from f32's subnormals; the
 * signs and IQ1's qv / 8 are exact). The grids are gguf-py's, packed (kquant_grids.h), expanded once.
 */
#include "quant/kquant.h"

#include <pthread.h>
#include <string.h>

#include "quant/kquant_grids.h"

static int8_t g_iq2xxs[KQ_IQ2XXS_N][8], g_iq2xs[KQ_IQ2XS_N][8], g_iq2s[KQ_IQ2S_N][8], g_iq3xxs[KQ_IQ3XXS_N][4],
    g_iq3s[KQ_IQ3S_N][4], g_iq1s[KQ_IQ1S_N][8], g_iq1v[KQ_IQ1S_N][8];
static pthread_once_t grids_once = PTHREAD_ONCE_INIT;

static int hexval(char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

/* n entries of w values of `bits` bits from the packed hex (kquant_grids.h) through map into out */
static void expand(const char *hex, int n, int w, int bits, const int8_t *map, int8_t *out) {
    const int per = 8 / bits;
    for (int k = 0; k < n * w; k++) {
        const int byte = hexval(hex[2 * (k / per)]) << 4 | hexval(hex[2 * (k / per) + 1]);
        out[k] = map[(byte >> (bits * (k % per))) & ((1 << bits) - 1)];
    }
}

static void grids_init(void) {
    expand(KQ_IQ2XXS_HEX, KQ_IQ2XXS_N, 8, KQ_IQ2XXS_BITS, KQ_IQ2XXS_MAP, &g_iq2xxs[0][0]);
    expand(KQ_IQ2XS_HEX, KQ_IQ2XS_N, 8, KQ_IQ2XS_BITS, KQ_IQ2XS_MAP, &g_iq2xs[0][0]);
    expand(KQ_IQ2S_HEX, KQ_IQ2S_N, 8, KQ_IQ2S_BITS, KQ_IQ2S_MAP, &g_iq2s[0][0]);
    expand(KQ_IQ3XXS_HEX, KQ_IQ3XXS_N, 4, KQ_IQ3XXS_BITS, KQ_IQ3XXS_MAP, &g_iq3xxs[0][0]);
    expand(KQ_IQ3S_HEX, KQ_IQ3S_N, 4, KQ_IQ3S_BITS, KQ_IQ3S_MAP, &g_iq3s[0][0]);
    expand(KQ_IQ1S_HEX, KQ_IQ1S_N, 8, KQ_IQ1S_BITS, KQ_IQ1S_MAP, &g_iq1s[0][0]);
    for (int i = 0; i < KQ_IQ1S_N; i++) /* put8_iq1's values with delta +1, plus 9 */
        for (int j = 0; j < 8; j++) g_iq1v[i][j] = (int8_t)(8 * g_iq1s[i][j] + 10);
}

static float h2f(const uint8_t *p) { return f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }
static unsigned u16at(const uint8_t *p) { return (unsigned)(p[0] | p[1] << 8); }
static uint32_t u32at(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

/* 8 values of grid entry g with sign bits s (bit j: value j negative) at qv */
static void put8(int8_t *qv, const int8_t *g, unsigned s) {
    for (int j = 0; j < 8; j++) qv[j] = (int8_t)((s >> j) & 1 ? -g[j] : g[j]);
}

/* ksigns_iq2xs (ggml-common.h): 7 sign bits and an eighth that makes their count even */
static unsigned ksign(unsigned i) { return i | (unsigned)(__builtin_popcount(i) & 1) << 7; }

/* IQ2_XXS (66 B): d, then per 32 values two u32: four grid indices (bytes), and four 7-bit sign indices + 4-bit ls */
static void unpack_iq2xxs(const uint8_t *b, kq_unpacked *u) {
    u->gs = 32;
    u->d = h2f(b) * 0.125f;
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *q = b + 2 + 8 * ib;
        const uint32_t aux = u32at(q + 4);
        u->sc[ib] = (int16_t)(2 * (aux >> 28) + 1);
        for (int l = 0; l < 4; l++) put8(u->qv + 32 * ib + 8 * l, g_iq2xxs[q[l]], ksign((aux >> (7 * l)) & 127));
    }
}

/* IQ2_XS (74 B): d, 32 u16 (9-bit grid index, 7-bit sign index), 8 bytes of two 4-bit ls (per 16) */
static void unpack_iq2xs(const uint8_t *b, kq_unpacked *u) {
    u->gs = 16;
    u->d = h2f(b) * 0.125f;
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t s = b[66 + ib];
        u->sc[2 * ib] = (int16_t)(2 * (s & 15) + 1);
        u->sc[2 * ib + 1] = (int16_t)(2 * (s >> 4) + 1);
        for (int l = 0; l < 4; l++) {
            const unsigned v = u16at(b + 2 + 2 * (4 * ib + l));
            put8(u->qv + 32 * ib + 8 * l, g_iq2xs[v & 511], ksign(v >> 9));
        }
    }
}

/* IQ2_S (82 B): d, qs[32] grid index low bytes, signs[32], qh[8] (2 high bits per 8 values), scales[8] */
static void unpack_iq2s(const uint8_t *b, kq_unpacked *u) {
    const uint8_t *qs = b + 2, *sg = b + 34, *qh = b + 66, *sc = b + 74;
    u->gs = 16;
    u->d = h2f(b) * 0.125f;
    for (int ib = 0; ib < 8; ib++) {
        u->sc[2 * ib] = (int16_t)(2 * (sc[ib] & 15) + 1);
        u->sc[2 * ib + 1] = (int16_t)(2 * (sc[ib] >> 4) + 1);
        for (int l = 0; l < 4; l++) {
            const unsigned idx = qs[4 * ib + l] | (((unsigned)qh[ib] << (8 - 2 * l)) & 0x300);
            put8(u->qv + 32 * ib + 8 * l, g_iq2s[idx], sg[4 * ib + l]);
        }
    }
}

/* IQ3_XXS (98 B): d, qs[64] grid indices (4 values each), then per 32 values a u32 of four 7-bit sign indices + ls */
static void unpack_iq3xxs(const uint8_t *b, kq_unpacked *u) {
    u->gs = 32;
    u->d = h2f(b) * 0.25f;
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *q = b + 2 + 8 * ib;
        const uint32_t aux = u32at(b + 66 + 4 * ib);
        u->sc[ib] = (int16_t)(2 * (aux >> 28) + 1);
        for (int l = 0; l < 4; l++) {
            int8_t g[8];
            memcpy(g, g_iq3xxs[q[2 * l]], 4);
            memcpy(g + 4, g_iq3xxs[q[2 * l + 1]], 4);
            put8(u->qv + 32 * ib + 8 * l, g, ksign((aux >> (7 * l)) & 127));
        }
    }
}

/* IQ3_S (110 B): d, qs[64] grid index low bytes, qh[8] (their ninth bits), signs[32], scales[4] (4-bit ls per 32) */
static void unpack_iq3s(const uint8_t *b, kq_unpacked *u) {
    const uint8_t *qs = b + 2, *qh = b + 66, *sg = b + 74, *sc = b + 106;
    u->gs = 32;
    u->d = h2f(b);
    for (int ib = 0; ib < 8; ib++) {
        u->sc[ib] = (int16_t)(2 * ((sc[ib / 2] >> (4 * (ib % 2))) & 15) + 1);
        for (int l = 0; l < 4; l++) {
            const unsigned i1 = qs[8 * ib + 2 * l] | (((unsigned)qh[ib] << (8 - 2 * l)) & 256);
            const unsigned i2 = qs[8 * ib + 2 * l + 1] | (((unsigned)qh[ib] << (7 - 2 * l)) & 256);
            int8_t g[8];
            memcpy(g, g_iq3s[i1], 4);
            memcpy(g + 4, g_iq3s[i2], 4);
            put8(u->qv + 32 * ib + 8 * l, g, sg[4 * ib + l]);
        }
    }
}

/* 8 IQ1 values: 8 grid + (delta sign ? -1 : 1) */
static void put8_iq1(int8_t *qv, const int8_t *g, int neg) {
    for (int j = 0; j < 8; j++) qv[j] = (int8_t)(8 * g[j] + (neg ? -1 : 1));
}

/* IQ1_S (50 B): d, qs[32] grid index low bytes, qh[8] u16 (4 x 3 high index bits, 3-bit ls, delta sign) per 32 */
static void unpack_iq1s(const uint8_t *b, kq_unpacked *u) {
    u->gs = 32;
    u->d = h2f(b) * 0.125f;
    for (int ib = 0; ib < 8; ib++) {
        const unsigned qh = u16at(b + 34 + 2 * ib);
        u->sc[ib] = (int16_t)(2 * ((qh >> 12) & 7) + 1);
        for (int l = 0; l < 4; l++)
            put8_iq1(u->qv + 32 * ib + 8 * l, g_iq1s[b[2 + 4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)], qh & 0x8000);
    }
}

/* IQ1_M (56 B): qs[32], qh[16] (per 8 values 3 high index bits and a delta sign), scales[8]: four u16 of 3-bit ls
 * per 16 values (bits 0-11) whose top nibbles make the f16 d */
static void unpack_iq1m(const uint8_t *b, kq_unpacked *u) {
    const uint8_t *qs = b, *qh = b + 32;
    unsigned sc[4];
    for (int i = 0; i < 4; i++) sc[i] = u16at(b + 48 + 2 * i);
    u->gs = 16;
    u->d = f16_to_f32((uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0xf0) | ((sc[2] >> 4) & 0xf00) | (sc[3] & 0xf000))) * 0.125f;
    for (int ib = 0; ib < 8; ib++) {
        u->sc[2 * ib] = (int16_t)(2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1);
        u->sc[2 * ib + 1] = (int16_t)(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1);
        for (int l = 0; l < 4; l++) {
            const unsigned h = (qh[2 * ib + l / 2] >> (4 * (l % 2))) & 15;
            put8_iq1(u->qv + 32 * ib + 8 * l, g_iq1s[qs[4 * ib + l] | ((h & 7) << 8)], h & 8);
        }
    }
}

const int8_t *kq_iq_grid(dt_type dt) {
    pthread_once(&grids_once, grids_init);
    switch (dt) {
    case DT_IQ2_XXS: return &g_iq2xxs[0][0];
    case DT_IQ2_XS: return &g_iq2xs[0][0];
    case DT_IQ2_S: return &g_iq2s[0][0];
    case DT_IQ3_XXS: return &g_iq3xxs[0][0];
    case DT_IQ3_S: return &g_iq3s[0][0];
    case DT_IQ1_S: case DT_IQ1_M: return &g_iq1s[0][0];
    default: return NULL;
    }
}

const int8_t *kq_iq1_plus10(void) {
    pthread_once(&grids_once, grids_init);
    return &g_iq1v[0][0];
}

void kq_unpack_iq(dt_type dt, const uint8_t *b, kq_unpacked *u) {
    pthread_once(&grids_once, grids_init);
    switch (dt) {
    case DT_IQ2_XXS: unpack_iq2xxs(b, u); break;
    case DT_IQ2_XS: unpack_iq2xs(b, u); break;
    case DT_IQ2_S: unpack_iq2s(b, u); break;
    case DT_IQ3_XXS: unpack_iq3xxs(b, u); break;
    case DT_IQ3_S: unpack_iq3s(b, u); break;
    case DT_IQ1_S: unpack_iq1s(b, u); break;
    default: unpack_iq1m(b, u); break;
    }
}
