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
#include "quant/qimp.h"

#include <math.h>
#include <string.h>

static float f16r(float v) { return f16_to_f32(f32_to_f16(v)); }

/* the RMS of a block v [Q2_BLK], summed in double */
static float block_rms(const float *v) {
    double ss = 0;
    for (int i = 0; i < Q2_BLK; i++) ss += (double)v[i] * v[i];
    return (float)sqrt(ss / Q2_BLK);
}

/* q2's k-th trial scale (k = 0 .. 16): 0.80 + 0.025 k times the Gaussian's 0.15104 RMS, rounded to f16 */
static float q2_scale(float rms, int k) { return f16r(rms * 0.15104f * (0.80f + 0.025f * (float)k)); }

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

/* block bytes: codes 4 to a byte (column e in byte e % 32 at bits 2 (e / 32)), then d in f16 */
static void q2_put(uint8_t *blk, const uint8_t *code, float d) {
    memset(blk, 0, 32);
    for (int e = 0; e < Q2_BLK; e++) blk[e % 32] |= (uint8_t)(code[e] << (2 * (e / 32)));
    const uint16_t h = f32_to_f16(d);
    blk[32] = (uint8_t)h;
    blk[33] = (uint8_t)(h >> 8);
}

/* One block: the scale (f16) of least squared error among 0.80 .. 1.20 times the Gaussian's
 * (0.15104 * RMS), then least squares on the chosen codes, rounded to f16, where that is better. */
static void q2_block(const float *v, uint8_t *blk) {
    const float rms = block_rms(v);
    uint8_t code[Q2_BLK], best[Q2_BLK];
    float best_d = 0.0f, best_e = INFINITY;
    for (int k = 0; rms > 0 && k <= 16; k++) {
        const float d = q2_scale(rms, k);
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
    q2_put(blk, best, best_d);
}

/* q2_block under the rotated measure of the importances c [Q2_BLK] (qimp.h): each of q2_block's scales with its
 * nearest codes moved while E falls; the best by E, then its least-squares scale under M where that lowers E. */
static void q2_block_w(const float *v, const float *c, uint8_t *blk) {
    static const float lev[4] = {-10.0f, -3.0f, 3.0f, 10.0f}; /* Q2_LEVELS */
    float m[Q2_BLK], u[Q2_BLK], lq[Q2_BLK];
    uint8_t code[Q2_BLK], best[Q2_BLK];
    qimp_metric(c, Q2_BLK, m);
    const float rms = block_rms(v);
    float best_d = 0.0f;
    double best_e = INFINITY;
    memset(best, 2, sizeof best);
    for (int k = 0; rms > 0 && k <= 16; k++) {
        const float d = q2_scale(rms, k);
        if (!(d > 0) || !isfinite(d)) continue;
        q2_codes(v, Q2_BLK, d, code);
        const double e = qimp_descend(v, Q2_BLK, d, lev, 4, code, c, m, 3);
        if (e < best_e) best_e = e, best_d = d, memcpy(best, code, sizeof best);
    }
    if (best_d > 0) {
        for (int i = 0; i < Q2_BLK; i++) lq[i] = lev[best[i]];
        qimp_apply(lq, c, Q2_BLK, u);
        double num = 0, den = 0;
        for (int i = 0; i < Q2_BLK; i++) num += (double)v[i] * u[i], den += (double)lq[i] * u[i];
        const float d = den > 0 ? f16r((float)(num / den)) : 0.0f;
        if (d > 0 && isfinite(d)) {
            memcpy(code, best, sizeof code);
            const double e = qimp_descend(v, Q2_BLK, d, lev, 4, code, c, m, 3);
            if (e < best_e) best_e = e, best_d = d, memcpy(best, code, sizeof best);
        }
    }
    q2_block(v, blk); /* the plain block where it is as good: never worse under the weights */
    const float pd = f16_to_f32((uint16_t)(blk[32] | blk[33] << 8));
    float pe[Q2_BLK];
    for (int e = 0; e < Q2_BLK; e++) pe[e] = v[e] - pd * lev[(blk[e % 32] >> (2 * (e / 32))) & 3];
    if (qimp_err(pe, c, Q2_BLK) > best_e) q2_put(blk, best, best_d);
}

/* The row driver of q2 and q2v: w [rows][cols] -> out, rows of kq_row_bytes(dt, cols), 34-byte blocks; each block
 * rotated, then written by weighted (under imp's block) where imp is given and not all zero there, else by plain. */
static void q2_rows(dt_type dt, const float *w, int rows, int cols, const float *imp,
                    void (*plain)(const float *, uint8_t *), void (*weighted)(const float *, const float *, uint8_t *),
                    void *out) {
    const size_t rb = kq_row_bytes(dt, cols);
    float v[Q2_BLK];
    for (int r = 0; r < rows; r++)
        for (int c0 = 0; c0 < cols; c0 += Q2_BLK) {
            q_rotate_group(w + (size_t)r * (size_t)cols + c0, c0, Q2_BLK, Q2_SEED, v);
            uint8_t *blk = (uint8_t *)out + (size_t)r * rb + (size_t)(c0 / Q2_BLK) * 34;
            if (imp && qimp_any(imp + c0, Q2_BLK)) weighted(v, imp + c0, blk);
            else plain(v, blk);
        }
}

void q2_quantize(const float *w, int rows, int cols, void *out) {
    q2_rows(DT_Q2, w, rows, cols, NULL, q2_block, q2_block_w, out);
}

void q2_quantize_imp(const float *w, int rows, int cols, const float *imp, void *out) {
    q2_rows(DT_Q2, w, rows, cols, imp, q2_block, q2_block_w, out);
}

void q2_rotate(const float *x, int cols, float *out) { q3_rotate(x, cols, Q2_BLK, Q2_SEED, out); }

void q2_unrotate(float *t, int cols) {
    for (int c0 = 0; c0 < cols; c0 += Q2_BLK) q_unrotate_group(t + c0, c0, Q2_BLK, Q2_SEED);
}

/* ---- q2v: the E8P lattice codebook (QuIP#, Tseng et al. 2024, "E8P") on the same rotated blocks ----------------
 * Each 8 rotated values are one 16-bit code: bits 0-7 an entry of Q2V_PAT (8 magnitudes of D8 + 1/2: 1/2, 3/2, 5/2,
 * times 4 here), bits 8-14 the signs of values 0-6 (1: negative), the sign of value 7 the one that makes the sum of
 * the signed magnitudes even (a point of D8 + 1/2, whose sign flips of each parity are half the patterns), bit 15 the
 * shift of the whole vector by +1/4 (0) or -1/4 (1): value i = d * (s_i * Q2V_PAT[k][i] + (bit 15 ? -1 : 1)), odd
 * integers of -11 .. 11. The 256 entries: the 227 vectors of {1/2, 3/2, 5/2}^8 of squared norm <= 10, then the first
 * 29 of squared norm 12, each in lexicographic order. 22% less squared error than the scalar levels on Gaussian
 * values (0.092 against 0.1175 of the variance), at the same 16 bits per 8 values. */
#include <pthread.h>

/* the patterns, then 256 bytes "sixes" and 128 bytes "signs" (kquant.h q2v_patterns) */
static int8_t q2v_pat[256 + 32 + 16][8];
static float q2v_patf[256][8], q2v_norm[256];
static uint8_t q2v_m6[256]; /* bit i: magnitude i is 6 (3/2): its sign counts odd in the parity */
static pthread_once_t q2v_once = PTHREAD_ONCE_INIT;

static void q2v_init(void) {
    int n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int c = 0; c < 6561 && n < 256; c++) { /* base-3 digits, the first value the most significant */
            int8_t v[8];
            int ss = 0;
            for (int i = 7, x = c; i >= 0; i--, x /= 3) v[i] = (int8_t)(2 + 4 * (x % 3)), ss += v[i] * v[i];
            if (pass ? ss != 192 : ss > 160) continue;
            memcpy(q2v_pat[n], v, 8);
            q2v_norm[n] = (float)ss;
            q2v_m6[n] = 0;
            for (int i = 0; i < 8; i++) {
                q2v_patf[n][i] = (float)v[i];
                q2v_m6[n] |= (uint8_t)((v[i] == 6) << i);
            }
            n++;
        }
    uint8_t *six = (uint8_t *)&q2v_pat[256][0], *sg = six + 256;
    for (int k = 0; k < 256; k++) six[k] = (uint8_t)(__builtin_parity(q2v_m6[k]) << 7);
    for (int s = 0; s < 128; s++) sg[s] = (uint8_t)(s | __builtin_parity((unsigned)s) << 7);
}

const int8_t *q2v_patterns(void) {
    pthread_once(&q2v_once, q2v_init);
    return &q2v_pat[0][0];
}

/* the 8 integer values of one code (the layout above) */
void q2v_decode8(uint16_t code, int8_t *out) {
    const int8_t *p = q2v_patterns() + 8 * (code & 255);
    const int sh = code >> 15 ? -1 : 1;
    int sum = 0;
    for (int i = 0; i < 7; i++) {
        const int s = (code >> (8 + i)) & 1 ? -p[i] : p[i];
        out[i] = (int8_t)(s + sh);
        sum += s;
    }
    /* sum of 8 signed magnitudes of 2 mod 4 is 0 or 4 mod 8; it must be 0 mod 8 (an even sum of halves * 4 / 4) */
    const int s7 = ((sum + p[7]) & 7) == 0 ? p[7] : -p[7];
    out[7] = (int8_t)(s7 + sh);
}

/* nearest code to y [8] (in units of d) and its squared error; the search runs over both shifts and all 256 magnitude
 * patterns, signs from y, one sign flipped (the cheapest) where the parity is wrong */
static float q2v_nearest(const float *y, uint16_t *code) {
    float best = INFINITY;
    for (int sh = 0; sh < 2; sh++) {
        float a[8], aa = 0.0f;
        unsigned neg = 0;
        for (int i = 0; i < 8; i++) {
            const float t = y[i] - (sh ? -1.0f : 1.0f);
            a[i] = fabsf(t);
            aa += a[i] * a[i];
            neg |= (unsigned)(t < 0) << i;
        }
        for (int k = 0; k < 256; k++) {
            const float *p = q2v_patf[k];
            float dot = 0.0f;
            for (int i = 0; i < 8; i++) dot += a[i] * p[i];
            float e = aa - 2.0f * dot + q2v_norm[k];
            unsigned sg = neg;
            unsigned par = (neg ^ q2v_m6[k]) & 255u;
            par ^= par >> 4, par ^= par >> 2, par ^= par >> 1;
            if (par & 1) { /* odd: flip the value where it costs least */
                int j = 0;
                for (int i = 1; i < 8; i++)
                    if (a[i] * p[i] < a[j] * p[j]) j = i;
                e += 4.0f * a[j] * p[j];
                sg ^= 1u << j;
            }
            if (e < best) best = e, *code = (uint16_t)(k | (sg & 127u) << 8 | (unsigned)sh << 15);
        }
    }
    return best;
}

/* the codes of v [Q2_BLK] at scale d and their squared error */
static float q2v_codes(const float *v, float d, uint16_t *codes) {
    float e = 0.0f, y[8];
    for (int j = 0; j < Q2_BLK / 8; j++) {
        for (int i = 0; i < 8; i++) y[i] = v[8 * j + i] / d;
        e += q2v_nearest(y, &codes[j]) * d * d;
    }
    return e;
}

/* q2v's k-th trial scale (k = 0 .. 3): 0.88 + 0.08 k times 0.244 RMS, rounded to f16 */
static float q2v_scale(float rms, int k) { return f16r(rms * 0.244f * (0.88f + 0.08f * (float)k)); }

/* the least-squares scale of v [Q2_BLK] on codes, sum v q / sum q^2 in double, rounded to f16 (0 / 0 gives NaN,
 * which the callers' isfinite test turns away) */
static float q2v_lsq(const float *v, const uint16_t *codes) {
    double num = 0, den = 0;
    int8_t q[8];
    for (int j = 0; j < Q2_BLK / 8; j++) {
        q2v_decode8(codes[j], q);
        for (int i = 0; i < 8; i++) num += (double)v[8 * j + i] * q[i], den += (double)q[i] * q[i];
    }
    return f16r((float)(num / den));
}

/* block bytes: the 16 codes little-endian, then d in f16 */
static void q2v_put(uint8_t *blk, const uint16_t *codes, float d) {
    for (int j = 0; j < Q2_BLK / 8; j++) blk[2 * j] = (uint8_t)codes[j], blk[2 * j + 1] = (uint8_t)(codes[j] >> 8);
    const uint16_t h = f32_to_f16(d);
    blk[32] = (uint8_t)h;
    blk[33] = (uint8_t)(h >> 8);
}

/* One block: the f16 scale of least squared error among 0.88 .. 1.12 times 0.244 RMS (the Gaussian's best), then one
 * least-squares step on the chosen codes where that is better. */
static void q2v_block(const float *v, uint8_t *blk) {
    const float rms = block_rms(v);
    uint16_t codes[Q2_BLK / 8], best[Q2_BLK / 8] = {0};
    float best_d = 0.0f, best_e = INFINITY;
    for (int k = 0; rms > 0 && k < 4; k++) {
        const float d = q2v_scale(rms, k);
        if (!(d > 0) || !isfinite(d)) continue;
        const float e = q2v_codes(v, d, codes);
        if (e < best_e) best_e = e, best_d = d, memcpy(best, codes, sizeof best);
    }
    if (best_d > 0) {
        const float d = q2v_lsq(v, best);
        if (d > 0 && isfinite(d)) {
            const float e = q2v_codes(v, d, codes);
            if (e < best_e) best_e = e, best_d = d, memcpy(best, codes, sizeof best);
        }
    }
    q2v_put(blk, best, best_d);
}

static void q2v_block_w(const float *v, const float *c, uint8_t *blk);

void q2v_quantize(const float *w, int rows, int cols, void *out) {
    pthread_once(&q2v_once, q2v_init);
    q2_rows(DT_Q2V, w, rows, cols, NULL, q2v_block, q2v_block_w, out);
}

/* ---- q2v under importances (qimp.h) ------------------------------------------------------------------------------ */

/* the rotated error e [Q2_BLK] of codes at scale d */
static void q2v_error(const float *v, float d, const uint16_t *codes, float *e) {
    int8_t q[8];
    for (int j = 0; j < Q2_BLK / 8; j++) {
        q2v_decode8(codes[j], q);
        for (int i = 0; i < 8; i++) e[8 * j + i] = v[8 * j + i] - d * (float)q[i];
    }
}

/* Codes moved 8 values at a time while E falls. For sub-vector j, with the others fixed, the change of its error that
 * minimises E is -M_jj^-1 (M e)_j, M_jj the 8 x 8 block m[i ^ k] (= H_8 diag(lam) H_8 / 8, lam = H_8 m[0..8), so
 * inverted by two 8-point transforms); the code nearest to the point that change asks for is taken when the exact
 * dE = 2 dl . (M e)_j + dl^T M_jj dl is below 0. Returns E of the result. */
static double q2v_descend(const float *v, float d, uint16_t *codes, const float *c, const float *m, int passes) {
    float e[Q2_BLK], u[Q2_BLK], lam[8], lmax = 0.0f;
    q2v_error(v, d, codes, e);
    qimp_apply(e, c, Q2_BLK, u);
    memcpy(lam, m, sizeof lam);
    q_fwht(lam, 8);
    for (int k = 0; k < 8; k++) lmax = fmaxf(lmax, lam[k]);
    for (int k = 0; k < 8; k++) lam[k] = fmaxf(lam[k], 1e-6f * lmax);
    for (int p = 0; p < passes && lmax > 0; p++) {
        int moved = 0;
        for (int j = 0; j < Q2_BLK / 8; j++) {
            float t[8], y[8], dl[8];
            int8_t q[8], q2[8];
            memcpy(t, u + 8 * j, sizeof t);
            q_fwht(t, 8);
            for (int k = 0; k < 8; k++) t[k] /= lam[k];
            q_fwht(t, 8); /* t = 8 M_jj^-1 u_j */
            q2v_decode8(codes[j], q);
            for (int i = 0; i < 8; i++) y[i] = (float)q[i] + t[i] / (8.0f * d);
            uint16_t nc;
            q2v_nearest(y, &nc);
            if (nc == codes[j]) continue;
            q2v_decode8(nc, q2);
            double de = 0;
            for (int i = 0; i < 8; i++) dl[i] = d * (float)(q[i] - q2[i]), de += 2.0 * dl[i] * u[8 * j + i];
            for (int i = 0; i < 8; i++)
                for (int k = 0; k < 8; k++) de += (double)dl[i] * dl[k] * m[i ^ k];
            if (!(de < -1e-7 * m[0] * d * d)) continue;
            codes[j] = nc;
            for (int i = 0; i < 8; i++) e[8 * j + i] += dl[i];
            for (int k = 0; k < Q2_BLK; k++) {
                float a = 0.0f;
                for (int i = 0; i < 8; i++) a += dl[i] * m[k ^ (8 * j + i)];
                u[k] += a;
            }
            moved = 1;
        }
        if (!moved) break;
    }
    return qimp_err(e, c, Q2_BLK);
}

/* q2v_block under the rotated measure of the importances c [Q2_BLK]: q2v_block's own choice is made alongside (the same
 * scales and codes, so it costs one more code search, its least-squares step's), the scale of least E among its four
 * and that choice, then that one's codes moved while E falls: never worse under the weights than q2v_block. */
static void q2v_block_w(const float *v, const float *c, uint8_t *blk) {
    float m[Q2_BLK], e[Q2_BLK];
    uint16_t codes[Q2_BLK / 8], plain[Q2_BLK / 8] = {0}, best[Q2_BLK / 8] = {0};
    qimp_metric(c, Q2_BLK, m);
    const float rms = block_rms(v);
    float pd = 0.0f, pe = INFINITY, best_d = 0.0f;
    double best_e = INFINITY;
    for (int k = 0; rms > 0 && k < 4; k++) {
        const float d = q2v_scale(rms, k);
        if (!(d > 0) || !isfinite(d)) continue;
        const float ue = q2v_codes(v, d, codes);
        if (ue < pe) pe = ue, pd = d, memcpy(plain, codes, sizeof plain);
        q2v_error(v, d, codes, e);
        const double we = qimp_err(e, c, Q2_BLK);
        if (we < best_e) best_e = we, best_d = d, memcpy(best, codes, sizeof best);
    }
    if (pd > 0) { /* q2v_block's least-squares step, as it takes it */
        const float d = q2v_lsq(v, plain);
        if (d > 0 && isfinite(d)) {
            const float ue = q2v_codes(v, d, codes);
            if (ue < pe) pe = ue, pd = d, memcpy(plain, codes, sizeof plain);
        }
        q2v_error(v, pd, plain, e);
        const double we = qimp_err(e, c, Q2_BLK);
        if (!(we > best_e)) best_e = we, best_d = pd, memcpy(best, plain, sizeof best);
    }
    if (best_d > 0) best_e = q2v_descend(v, best_d, best, c, m, 2);
    q2v_put(blk, best, best_d);
}

void q2v_quantize_imp(const float *w, int rows, int cols, const float *imp, void *out) {
    pthread_once(&q2v_once, q2v_init);
    q2_rows(DT_Q2V, w, rows, cols, imp, q2v_block, q2v_block_w, out);
}
