/*
 * kquant.c — GGUF k-quant and IQ4 blocks: sizes, unpacking into integer codes and scales, the dequantiser and
 * the integer sums of the int8 matmul; see kquant.h. The unpacking follows gguf-py's gguf/quants.py (the
 * reference for the values) and llama.cpp's ggml/src/ggml-quants.c dequantize_row_* (the spec of the layout).
 */
#include "quant/kquant.h"

#include <string.h>

const int8_t Q2_LEVELS[4] = {-10, -3, 3, 10};
const int8_t KQ_IQ4_LEVELS[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* ggml_type ids (llama.cpp ggml/include/ggml.h) and block sizes (gguf-py constants.py GGML_QUANT_SIZES) */
static const struct {
    dt_type dt;
    uint32_t ggml;
    int blk, bytes;
} KQ[] = {
    {DT_Q2_K, 10, 256, 84},  {DT_Q3_K, 11, 256, 110}, {DT_Q4_K, 12, 256, 144},  {DT_Q5_K, 13, 256, 176},
    {DT_Q6_K, 14, 256, 210}, {DT_IQ4_NL, 20, 32, 18}, {DT_IQ4_XS, 23, 256, 136}, {DT_IQ2_XXS, 16, 256, 66},
    {DT_IQ2_XS, 17, 256, 74}, {DT_IQ2_S, 22, 256, 82}, {DT_IQ3_XXS, 18, 256, 98}, {DT_IQ3_S, 21, 256, 110},
    {DT_IQ1_S, 19, 256, 50}, {DT_IQ1_M, 29, 256, 56}, {DT_Q2, 0, 128, 34}, {DT_Q2V, 0, 128, 34}, /* sluice's own, no ggml id */
    {DT_Q5_0, 6, 32, 22},    {DT_Q5_1, 7, 32, 24},
};
#define N_KQ (sizeof KQ / sizeof *KQ)

/* KQ's sizes indexed by dtype (the kernels ask per matrix call; tests/test_kquant.c checks they agree with KQ) */
static const short KQ_BLK[DT_COUNT] = {[DT_Q2_K] = 256, [DT_Q3_K] = 256, [DT_Q4_K] = 256, [DT_Q5_K] = 256, [DT_Q6_K] = 256,
                                       [DT_IQ4_NL] = 32, [DT_IQ4_XS] = 256, [DT_IQ2_XXS] = 256, [DT_IQ2_XS] = 256,
                                       [DT_IQ2_S] = 256, [DT_IQ3_XXS] = 256, [DT_IQ3_S] = 256, [DT_IQ1_S] = 256,
                                       [DT_IQ1_M] = 256, [DT_Q2] = 128, [DT_Q2V] = 128, [DT_Q5_0] = 32, [DT_Q5_1] = 32};
static const short KQ_BYTES[DT_COUNT] = {[DT_Q2_K] = 84, [DT_Q3_K] = 110, [DT_Q4_K] = 144, [DT_Q5_K] = 176, [DT_Q6_K] = 210,
                                         [DT_IQ4_NL] = 18, [DT_IQ4_XS] = 136, [DT_IQ2_XXS] = 66, [DT_IQ2_XS] = 74,
                                         [DT_IQ2_S] = 82, [DT_IQ3_XXS] = 98, [DT_IQ3_S] = 110, [DT_IQ1_S] = 50,
                                         [DT_IQ1_M] = 56, [DT_Q2] = 34, [DT_Q2V] = 34, [DT_Q5_0] = 22, [DT_Q5_1] = 24};

int kq_blk(dt_type dt) { return dt > DT_NONE && dt < DT_COUNT ? KQ_BLK[dt] : 0; }

int kq_bytes(dt_type dt) { return dt > DT_NONE && dt < DT_COUNT ? KQ_BYTES[dt] : 0; }

dt_type kq_from_ggml(uint32_t ggml_type) {
    for (size_t i = 0; i < N_KQ; i++)
        if (KQ[i].ggml && KQ[i].ggml == ggml_type) return KQ[i].dt;
    return DT_NONE;
}

uint32_t kq_to_ggml(dt_type dt) {
    for (size_t i = 0; i < N_KQ; i++)
        if (KQ[i].dt == dt) return KQ[i].ggml;
    return 0;
}

static float h2f(const uint8_t *p) { return f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

/* get_scale_min_k4 (ggml-quants.c; gguf-py Q4_K.get_scale_min) */
static void scale_min_k4(int j, const uint8_t *q, int16_t *sc, int16_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (int16_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (int16_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* The 2-bit codes of Q2_K / Q3_K: element e at qs[32 (e / 128) + e % 32], bits 2 ((e % 128) / 32). */
static int q2bits(const uint8_t *qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

static void unpack_q2_q3(dt_type dt, const uint8_t *b, kq_unpacked *u) {
    u->gs = 16;
    if (dt == DT_Q2_K) {
        const uint8_t *sc = b, *qs = b + 16;
        u->d = h2f(b + 80);
        u->dmin = h2f(b + 82);
        u->has_min = 1;
        for (int g = 0; g < 16; g++) {
            u->sc[g] = sc[g] & 15;
            u->mn[g] = sc[g] >> 4;
        }
        for (int e = 0; e < 256; e++) u->qv[e] = (int8_t)q2bits(qs, e);
        return;
    }
    const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
    u->d = h2f(b + 108);
    for (int g = 0; g < 16; g++) {
        int lo = (sc[g % 8] >> (4 * (g / 8))) & 0xF, hi = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
        u->sc[g] = (int16_t)((lo | hi << 4) - 32);
    }
    for (int e = 0; e < 256; e++) u->qv[e] = (int8_t)(q2bits(qs, e) - (((hm[e % 32] >> (e / 32)) & 1) ? 0 : 4));
}

static void unpack_q4_q5(dt_type dt, const uint8_t *b, kq_unpacked *u) {
    const uint8_t *qh = b + 16, *qs = dt == DT_Q4_K ? b + 16 : b + 48;
    u->gs = 32;
    u->d = h2f(b);
    u->dmin = h2f(b + 2);
    u->has_min = 1;
    for (int j = 0; j < 8; j++) {
        scale_min_k4(j, b + 4, &u->sc[j], &u->mn[j]);
        for (int l = 0; l < 32; l++) {
            int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
            if (dt == DT_Q5_K) q |= ((qh[l] >> j) & 1) << 4;
            u->qv[32 * j + l] = (int8_t)q;
        }
    }
}

static void unpack_q6(const uint8_t *b, kq_unpacked *u) {
    const uint8_t *ql = b, *qh = b + 128;
    u->gs = 16;
    u->d = h2f(b + 208);
    for (int g = 0; g < 16; g++) u->sc[g] = (int8_t)b[192 + g];
    for (int e = 0; e < 256; e++) {
        int h = e / 128, r = e % 128;
        int lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0xF, hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
        u->qv[e] = (int8_t)((lo | hi << 4) - 32);
    }
}

static void unpack_iq4(dt_type dt, const uint8_t *b, kq_unpacked *u) {
    u->gs = 32;
    u->d = h2f(b);
    if (dt == DT_IQ4_NL) {
        u->sc[0] = 1;
        for (int i = 0; i < 16; i++) {
            u->qv[i] = KQ_IQ4_LEVELS[b[2 + i] & 0xF];
            u->qv[i + 16] = KQ_IQ4_LEVELS[b[2 + i] >> 4];
        }
        return;
    }
    const unsigned sh = (unsigned)(b[2] | b[3] << 8);
    const uint8_t *sl = b + 4, *qs = b + 8;
    for (int j = 0; j < 8; j++) {
        int ls = ((sl[j / 2] >> (4 * (j % 2))) & 0xF) | (int)(((sh >> (2 * j)) & 3) << 4);
        u->sc[j] = (int16_t)(ls - 32);
        for (int l = 0; l < 16; l++) {
            u->qv[32 * j + l] = KQ_IQ4_LEVELS[qs[16 * j + l] & 0xF];
            u->qv[32 * j + 16 + l] = KQ_IQ4_LEVELS[qs[16 * j + l] >> 4];
        }
    }
}

/* Q5_0 (22 B: d, qh, qs[16]) / Q5_1 (24 B: d, m, qh, qs[16]): gguf-py Q5_0 / Q5_1.dequantize_blocks */
static void unpack_q5(dt_type dt, const uint8_t *b, kq_unpacked *u) {
    const int q51 = dt == DT_Q5_1;
    const uint8_t *h = b + (q51 ? 4 : 2), *qs = h + 4;
    const uint32_t qh = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
    u->gs = 32;
    u->d = h2f(b);
    u->sc[0] = 1;
    if (q51) {
        u->has_min = 1;
        u->mn[0] = 1;
        u->dmin = -h2f(b + 2);
    }
    for (int i = 0; i < 16; i++) {
        const int lo = (qs[i] & 0xF) | (int)((qh >> i) & 1) << 4, hi = (qs[i] >> 4) | (int)((qh >> (i + 16)) & 1) << 4;
        u->qv[i] = (int8_t)(q51 ? lo : lo - 16);
        u->qv[i + 16] = (int8_t)(q51 ? hi : hi - 16);
    }
}

/* q2 (34 B): qs[32], d; element e's code at qs[e % 32] bits 2 (e / 32), one scale 1 per 32 */
static void unpack_q2(const uint8_t *b, kq_unpacked *u) {
    u->gs = 32;
    u->d = h2f(b + 32);
    for (int g = 0; g < 4; g++) u->sc[g] = 1;
    for (int e = 0; e < 128; e++) u->qv[e] = Q2_LEVELS[(b[e % 32] >> (2 * (e / 32))) & 3];
}

/* q2v (34 B): code[16] (u16), d */
static void unpack_q2v(const uint8_t *b, kq_unpacked *u) {
    u->gs = 32;
    u->d = h2f(b + 32);
    for (int g = 0; g < 4; g++) u->sc[g] = 1;
    for (int j = 0; j < 16; j++) q2v_decode8((uint16_t)(b[2 * j] | b[2 * j + 1] << 8), u->qv + 8 * j);
}

void kq_unpack(dt_type dt, const uint8_t *b, kq_unpacked *u) {
    u->has_min = 0;
    u->dmin = 0.0f;
    u->n = kq_blk(dt);
    memset(u->mn, 0, sizeof u->mn);
    switch (dt) {
    case DT_Q2_K: case DT_Q3_K: unpack_q2_q3(dt, b, u); break;
    case DT_Q4_K: case DT_Q5_K: unpack_q4_q5(dt, b, u); break;
    case DT_Q6_K: unpack_q6(b, u); break;
    case DT_IQ4_NL: case DT_IQ4_XS: unpack_iq4(dt, b, u); break;
    case DT_Q2: unpack_q2(b, u); break;
    case DT_Q2V: unpack_q2v(b, u); break;
    case DT_Q5_0: case DT_Q5_1: unpack_q5(dt, b, u); break;
    default: kq_unpack_iq(dt, b, u); break;
    }
}

void kq_block_to_f32(dt_type dt, const uint8_t *blk, float *out) {
    kq_unpacked u;
    kq_unpack(dt, blk, &u);
    for (int g = 0; g < u.n / u.gs; g++) {
        /* gguf-py: dl = d * scale, ml = dmin * min (f32 each), then dl * q - ml, every step rounded */
        const float dl = u.d * (float)u.sc[g], ml = u.dmin * (float)u.mn[g];
        for (int i = g * u.gs; i < (g + 1) * u.gs; i++) {
            float p = dl * (float)u.qv[i];
            out[i] = u.has_min ? p - ml : p;
        }
    }
}

void kq_row_to_f32(dt_type dt, const uint8_t *row, int n, float *out) {
    const int blk = kq_blk(dt), bytes = kq_bytes(dt);
    for (int k = 0; k < n / blk; k++) kq_block_to_f32(dt, row + (size_t)k * (size_t)bytes, out + (size_t)k * (size_t)blk);
}

void kq_sums(const kq_unpacked *u, const int8_t *q, int32_t *isum, int32_t *msum) {
    for (int b = 0; b < u->n / 32; b++) {
        int32_t is = 0, ms = 0;
        for (int g = b * 32 / u->gs; g < (b + 1) * 32 / u->gs; g++) {
            int32_t dot = 0, sum = 0;
            for (int i = g * u->gs; i < (g + 1) * u->gs; i++) {
                dot += (int32_t)u->qv[i] * q[i];
                sum += q[i];
            }
            is += u->sc[g] * dot;
            ms += u->mn[g] * sum;
        }
        isum[b] = is;
        msum[b] = ms;
    }
}

/* offsets of the f16 scales in a block: d, then dmin (-1: none) */
static void f16_fields(dt_type dt, int *d, int *dmin) {
    *dmin = -1;
    switch (dt) {
    case DT_Q2_K: *d = 80; *dmin = 82; break;
    case DT_Q3_K: *d = 108; break;
    case DT_Q4_K: case DT_Q5_K: case DT_Q5_1: *d = 0; *dmin = 2; break;
    case DT_Q6_K: *d = 208; break;
    case DT_Q2: case DT_Q2V: *d = 32; break;
    case DT_IQ1_M: *d = -1; break; /* its d: the top nibbles of the four u16 at 48 (kq_random) */
    default: *d = 0; break;
    }
}

static uint64_t next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 24;
}

void kq_random(dt_type dt, uint8_t *out, size_t n_blocks, uint64_t *state) {
    const size_t bytes = (size_t)kq_bytes(dt);
    int fd, fm;
    f16_fields(dt, &fd, &fm);
    for (size_t k = 0; k < n_blocks; k++) {
        uint8_t *b = out + k * bytes;
        for (size_t i = 0; i < bytes; i++) b[i] = (uint8_t)next(state);
        const int at[2] = {fd, fm};
        for (int j = 0; j < 2; j++) {
            if (at[j] < 0 && !(dt == DT_IQ1_M && j == 0)) continue;
            uint64_t v = next(state);
            /* exponent 3 .. 12 (2^-12 .. 2^-3), random mantissa and sign */
            uint16_t h = (uint16_t)(((v >> 20) & 1) << 15 | (3 + (v >> 10) % 10) << 10 | (v & 0x3ff));
            if (dt == DT_IQ1_M) {
                for (int i = 0; i < 4; i++) b[49 + 2 * i] = (uint8_t)((b[49 + 2 * i] & 0x0F) | ((h >> (4 * i)) & 0xF) << 4);
                continue;
            }
            b[at[j]] = (uint8_t)h;
            b[at[j] + 1] = (uint8_t)(h >> 8);
        }
    }
}
