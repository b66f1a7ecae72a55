/*
 * q2.c — sluice's 2-bit weights (DT_Q2; docs/QUANT.md "q2"): the pack-time quantiser and the rotation back.
 *
 * A row is cut into blocks of Q2_BLK = 128 columns; each block's weights w are rotated, v = R w with
 * R = H_128 D / sqrt(128) (quant.h q_rotate_group with the fixed seed Q2_SEED: the same rotation for every
 * matrix, so the activations a layer's q2 matrices read are rotated and quantized once, kernels.h kern_act qr),
 * and stored as v_i ~ d * Q2_LEVELS[code_i], d one f16 per block. Since R is orthonormal the rotated values are
 * close to N(0, |w|^2 / 128) whatever the outliers of w, so the 4 levels are those of Lloyd-Max for the
 * Gaussian (+-0.4528, +-1.5104 sigma, here 3 : 10). No data is needed; the quantiser is a pure function
 * (verify --source re-derives every byte). The block layout and the unpacking live with the other block
 * types (quant/kquant.h), whose kernels multiply it.
 */
#include "quant/quant.h"

#include <math.h>
#include <string.h>

static float f16r(float v) { return f16_to_f32(f32_to_f16(v)); }

/* codes of v [n] for scale d (nearest level: thresholds at 0 and +-6.5 d) and their squared error */
static float q2_codes(const float *v, int n, float d, uint8_t *code) {
    float e = 0.0f;
    for (int i = 0; i < n; i++) {
        const unsigned c = (unsigned)(v[i] > -6.5f * d) + (unsigned)(v[i] > 0.0f) + (unsigned)(v[i] > 6.5f * d);
        const float r = v[i] - d * (float)Q2_LEVELS[c];
        code[i] = (uint8_t)c;
        e += r * r;
    }
    return e;
}

/* One block: the scale (f16) of least squared error among 0.80 .. 1.20 times the Gaussian's
 * (0.15104 * RMS), then least squares on the chosen codes, rounded to f16, where that is better. */
static void q2_block(const float *v, uint8_t *blk) {
    double ss = 0;
    for (int i = 0; i < Q2_BLK; i++) ss += (double)v[i] * v[i];
    const float rms = (float)sqrt(ss / Q2_BLK);
    uint8_t code[Q2_BLK], best[Q2_BLK];
    float best_d = 0.0f, best_e = INFINITY;
    for (int k = 0; rms > 0 && k <= 16; k++) {
        const float d = f16r(rms * 0.15104f * (0.80f + 0.025f * (float)k));
        if (!(d > 0) || !isfinite(d)) continue;
        const float e = q2_codes(v, Q2_BLK, d, code);
        if (e < best_e) best_e = e, best_d = d, memcpy(best, code, sizeof best);
    }
    for (int it = 0; it < 2 && best_d > 0; it++) { /* d = sum v L / sum L^2 over the chosen codes */
        double num = 0, den = 0;
        for (int i = 0; i < Q2_BLK; i++) {
            const double l = Q2_LEVELS[best[i]];
            num += v[i] * l;
            den += l * l;
        }
        const float d = f16r((float)(num / den));
        if (!(d > 0) || !isfinite(d)) break;
        const float e = q2_codes(v, Q2_BLK, d, code);
        if (!(e < best_e)) break;
        best_e = e, best_d = d, memcpy(best, code, sizeof best);
    }
    if (!(best_e < INFINITY)) memset(best, 2, sizeof best); /* an all-zero block: d = 0 */
    memset(blk, 0, 32);
    for (int e = 0; e < Q2_BLK; e++) blk[e % 32] |= (uint8_t)(best[e] << (2 * (e / 32)));
    const uint16_t h = f32_to_f16(best_d);
    blk[32] = (uint8_t)h;
    blk[33] = (uint8_t)(h >> 8);
}

void q2_quantize(const float *w, int rows, int cols, void *out) {
    const size_t rb = kq_row_bytes(DT_Q2, cols);
    float v[Q2_BLK];
    for (int r = 0; r < rows; r++)
        for (int c0 = 0; c0 < cols; c0 += Q2_BLK) {
            q_rotate_group(w + (size_t)r * (size_t)cols + c0, c0, Q2_BLK, Q2_SEED, v);
            q2_block(v, (uint8_t *)out + (size_t)r * rb + (size_t)(c0 / Q2_BLK) * 34);
        }
}

void q2_rotate(const float *x, int cols, float *out) { q3_rotate(x, cols, Q2_BLK, Q2_SEED, out); }

void q2_unrotate(float *t, int cols) {
    for (int c0 = 0; c0 < cols; c0 += Q2_BLK) q_unrotate_group(t + c0, c0, Q2_BLK, Q2_SEED);
}
