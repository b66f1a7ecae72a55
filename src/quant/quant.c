/*
 * quant.c — layout, quantisers and dequantisers of the quantized types; see quant.h and docs/QUANT.md.
 *
 * Sections: layout helpers, bit streams, the q3 rotation, dequantisation, quantisation, importance-weighted groups
 * (quant/qimp.h; entered only with importances, so the plain path above is unchanged).
 * Quantisation rounds scales and biases to their stored type before choosing codes, so the codes are the
 * best ones for the values the kernels will actually use; it is a pure function of its inputs (pack and
 * verify --source re-derive byte-identical data).
 */
#include "quant/quant.h"
#include "quant/qimp.h"
#include "util/err.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

const float Q3_LEVELS[8] = {-2.1519457f, -1.3439093f, -0.7560052f, -0.2450942f,
                            0.2450942f,  0.7560052f,  1.3439093f,  2.1519457f};

/* MXFP4's scalar row decoder: the dequantiser's, and the oracle of kernels/mxfp4_<isa>.c */
const float MXFP4_VALUES[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

void mxfp4_row_scalar(const uint8_t *codes, const uint8_t *scales, int cols, float *out) {
    for (int g = 0; g < cols / 32; g++) {
        const float s = mxfp4_scale(scales[g]);
        const uint8_t *b = codes + (size_t)g * 16;
        float *o = out + (size_t)g * 32;
        for (int i = 0; i < 16; i++) {
            o[2 * i] = MXFP4_VALUES[b[i] & 15] * s;
            o[2 * i + 1] = MXFP4_VALUES[b[i] >> 4] * s;
        }
    }
}

/* ---- layout ---------------------------------------------------------------------------------- */

int q_bits(dt_type dt) {
    switch (dt) {
    case DT_Q8: return 8;
    case DT_Q4: return 4;
    case DT_Q3: return 3;
    case DT_MXFP4: return 4;
    default: return 0;
    }
}

uint64_t q_mat_bytes(dt_type dt, int64_t rows, int64_t cols, int group, dt_type sdt) {
    if (kq_is(dt)) return (uint64_t)rows * (uint64_t)kq_row_bytes(dt, cols);
    int b = q_bits(dt);
    if (!b) return (uint64_t)rows * (uint64_t)cols * dt_size(dt);
    if (dt == DT_MXFP4) return (uint64_t)rows * (uint64_t)(cols / 2) + (uint64_t)rows * (uint64_t)(cols / 32);
    uint64_t codes = (uint64_t)rows * (uint64_t)cols * (uint64_t)b / 8;
    uint64_t ng = group > 0 ? (uint64_t)rows * (uint64_t)(cols / group) : 0;
    return codes + ng * dt_size(sdt) * (dt == DT_Q3 ? 1 : 2);
}

sl_status q_check(dt_type dt, int64_t cols, int group, dt_type sdt, sl_error *err) {
    if (!q_is_quant(dt)) return SL_OK;
    if (kq_is(dt))
        return cols <= 0 || cols % kq_blk(dt) || group != kq_blk(dt)
                   ? err_set(err, SL_EINVAL, "%s blocks of %d do not divide the row of %lld columns (group %d)",
                             dt_name(dt), kq_blk(dt), (long long)cols, group)
                   : SL_OK;
    if (dt == DT_MXFP4)
        return cols <= 0 || cols % 32
                   ? err_set(err, SL_EINVAL, "mxfp4 blocks of 32 do not divide the row of %lld columns", (long long)cols)
                   : SL_OK;
    if (group != 32 && group != 64 && group != 128)
        return err_set(err, SL_EINVAL, "group size %d is not 32, 64 or 128", group);
    if (sdt != DT_F16 && sdt != DT_BF16 && sdt != DT_F32)
        return err_set(err, SL_EINVAL, "scale type %s is not f16, bf16 or f32", dt_name(sdt));
    if (cols <= 0 || cols % group)
        return err_set(err, SL_EINVAL, "group size %d does not divide the row of %lld columns", group, (long long)cols);
    return SL_OK;
}

void q_mat_bind(tn_mat *m, const void *data, dt_type dt, int rows, int cols, int group, dt_type sdt,
                uint32_t seed) {
    memset(m, 0, sizeof *m);
    m->data = data;
    m->dtype = dt;
    m->rows = rows;
    m->cols = cols;
    if (kq_is(dt)) { /* the scales are inside the blocks */
        m->scales = data;
        m->group = kq_blk(dt);
        return;
    }
    int b = q_bits(dt);
    if (!b) return;
    if (dt == DT_MXFP4) {
        m->scales = (const uint8_t *)data + (size_t)rows * (size_t)(cols / 2);
        m->group = 32;
        return;
    }
    size_t codes = (size_t)rows * (size_t)cols * (size_t)b / 8, ng = (size_t)rows * (size_t)(cols / group);
    m->scales = (const uint8_t *)data + codes;
    m->biases = dt == DT_Q3 ? NULL : (const uint8_t *)data + codes + ng * dt_size(sdt);
    m->group = group;
    m->sdtype = sdt;
    m->seed = seed;
}

/* For f16 / bf16 scales (index 0 / 1) and z = -8 / -128 (index 0 / 1): the bits of the bias z * scale for every
 * scale's bits, or 0x10000 when z * scale has no 16-bit form (no bias can be implied). 16-bit to f32 conversion
 * is one to one, so equal f32 values are equal bits. Made once (1 MiB). */
static uint32_t implied_tab[2][2][65536];
static pthread_once_t implied_once = PTHREAD_ONCE_INIT;

static void implied_init(void) {
    for (int bf = 0; bf < 2; bf++)
        for (int q8 = 0; q8 < 2; q8++)
            for (uint32_t h = 0; h < 65536; h++) {
                float want = (q8 ? -128.0f : -8.0f) * (bf ? bf16_to_f32((uint16_t)h) : f16_to_f32((uint16_t)h));
                uint16_t hb = bf ? f32_to_bf16(want) : f32_to_f16(want);
                float back = bf ? bf16_to_f32(hb) : f16_to_f32(hb);
                implied_tab[bf][q8][h] = memcmp(&want, &back, sizeof want) ? 0x10000u : hb;
            }
}

int q_biases_implied(const tn_mat *m) {
    if ((m->dtype != DT_Q8 && m->dtype != DT_Q4) || !m->scales || !m->biases || m->group <= 0) return 0;
    const float z = m->dtype == DT_Q8 ? -128.0f : -8.0f;
    const size_t ng = (size_t)m->rows * (size_t)(m->cols / m->group);
    if (m->sdtype == DT_F32) {
        const float *sc = m->scales, *bi = m->biases;
        for (size_t i = 0; i < ng; i++) {
            float want = z * sc[i];
            if (memcmp(&want, &bi[i], sizeof want)) return 0; /* bitwise: a +0 bias for a -0 product is not implied */
        }
        return 1;
    }
    pthread_once(&implied_once, implied_init);
    const uint32_t *t = implied_tab[m->sdtype == DT_BF16][m->dtype == DT_Q8];
    const uint16_t *sc = m->scales, *bi = m->biases;
    for (size_t i = 0; i < ng; i++)
        if (t[sc[i]] != bi[i]) return 0;
    return 1;
}

/* ---- bit streams ----------------------------------------------------------------------------- */

static inline unsigned get_code(const uint8_t *row, int bits, int c) {
    if (bits == 8) return row[c];
    if (bits == 4) return (row[c >> 1] >> ((c & 1) * 4)) & 15u;
    size_t p = (size_t)c * 3;
    unsigned v = row[p >> 3];
    if ((p & 7) > 5) v |= (unsigned)row[(p >> 3) + 1] << 8;
    return (v >> (p & 7)) & 7u;
}

static inline void put_code(uint8_t *row, int bits, int c, unsigned q) {
    if (bits == 8) { row[c] = (uint8_t)q; return; }
    size_t p = (size_t)c * (size_t)bits;
    for (int i = 0; i < bits; i++, p++)
        if (q >> i & 1u) row[p >> 3] |= (uint8_t)(1u << (p & 7));
}

/* ---- q3 rotation ----------------------------------------------------------------------------- */

static inline uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void q_fwht(float *t, int n) {
    for (int h = 1; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                float a = t[j], b = t[j + h];
                t[j] = a + b;
                t[j + h] = a - b;
            }
}

/* D: sign of column c is bit (c % 64) of splitmix64(seed * 2^32 + c / 64) */
static void apply_signs(float *t, int c0, int n, uint32_t seed) {
    uint64_t bits = 0;
    int blk = -1;
    for (int i = 0; i < n; i++) {
        int c = c0 + i;
        if (c / 64 != blk) {
            blk = c / 64;
            bits = splitmix64(((uint64_t)seed << 32) | (uint64_t)blk);
        }
        if (bits >> (c % 64) & 1u) t[i] = -t[i];
    }
}

/* t[group] = R x for the group of columns starting at c0 (x points at that group) */
void q_rotate_group(const float *x, int c0, int group, uint32_t seed, float *t) {
    const float norm = 1.0f / sqrtf((float)group);
    memcpy(t, x, (size_t)group * sizeof(float));
    apply_signs(t, c0, group, seed);
    q_fwht(t, group);
    for (int i = 0; i < group; i++) t[i] *= norm;
}

void q3_rotate(const float *x, int cols, int group, uint32_t seed, float *out) {
    for (int c0 = 0; c0 < cols; c0 += group) q_rotate_group(x + c0, c0, group, seed, out + c0);
}

/* w = R^T v = D H v / sqrt(g) for one group (H symmetric) */
void q_unrotate_group(float *t, int c0, int group, uint32_t seed) {
    q_fwht(t, group);
    const float norm = 1.0f / sqrtf((float)group);
    for (int i = 0; i < group; i++) t[i] *= norm;
    apply_signs(t, c0, group, seed);
}

/* ---- dequantisation -------------------------------------------------------------------------- */

void q_row_to_f32(const tn_mat *m, int r, float *out) {
    const int cols = m->cols, bits = q_bits(m->dtype);
    if (kq_is(m->dtype)) {
        kq_row_to_f32(m->dtype, (const uint8_t *)m->data + (size_t)r * kq_row_bytes(m->dtype, cols), cols, out);
        if (kq_rotated(m->dtype)) q2_unrotate(out, cols); /* the stored values are rotated */
        return;
    }
    if (!bits) {
        dt_to_f32(m->dtype, (const uint8_t *)m->data + (size_t)r * (size_t)cols * dt_size(m->dtype), out, (size_t)cols);
        return;
    }
    const uint8_t *row = (const uint8_t *)m->data + (size_t)r * (size_t)cols * (size_t)bits / 8;
    if (m->dtype == DT_MXFP4) {
        mxfp4_row_scalar(row, (const uint8_t *)m->scales + (size_t)r * (size_t)(cols / 32), cols, out);
        return;
    }
    const int ng = cols / m->group;
    for (int g = 0; g < ng; g++) {
        float s = q_scale_at(m->scales, m->sdtype, (size_t)r * ng + g);
        int c0 = g * m->group;
        if (m->dtype == DT_Q3) {
            for (int i = 0; i < m->group; i++) out[c0 + i] = s * Q3_LEVELS[get_code(row, 3, c0 + i)];
            q_unrotate_group(out + c0, c0, m->group, m->seed);
        } else {
            float b = q_scale_at(m->biases, m->sdtype, (size_t)r * ng + g);
            for (int i = 0; i < m->group; i++) out[c0 + i] = s * (float)get_code(row, bits, c0 + i) + b;
        }
    }
}

/* ---- quantisation ---------------------------------------------------------------------------- */

static float round_to(dt_type sdt, float v) {
    if (sdt == DT_BF16) return bf16_to_f32(f32_to_bf16(v));
    if (sdt == DT_F16) return f16_to_f32(f32_to_f16(v));
    return v;
}

static void store(void *p, dt_type sdt, size_t i, float v) {
    if (sdt == DT_F32) ((float *)p)[i] = v;
    else if (sdt == DT_BF16) ((uint16_t *)p)[i] = f32_to_bf16(v);
    else ((uint16_t *)p)[i] = f32_to_f16(v);
}

/* MLX's affine scheme (mlx/ops.cpp affine_quantize): the extreme of larger magnitude is the bias and is
 * exactly representable; scale from the range over 2^bits - 1 steps. */
static void affine_group(const float *w, int n, int bits, dt_type sdt, float *os, float *ob, uint8_t *row,
                         int c0) {
    const float n_bins = (float)((1 << bits) - 1);
    float mn = w[0], mx = w[0];
    for (int i = 1; i < n; i++) {
        if (w[i] < mn) mn = w[i];
        if (w[i] > mx) mx = w[i];
    }
    int mask = fabsf(mn) > fabsf(mx);
    float scale = (mx - mn) / n_bins;
    if (scale < 1e-7f) scale = 1e-7f;
    if (!mask) scale = -scale;
    float edge = mask ? mn : mx;
    float q0 = rintf(edge / scale);
    float bias = 0.0f;
    if (q0 != 0.0f) {
        scale = edge / q0;
        bias = edge;
    }
    scale = round_to(sdt, scale);
    bias = round_to(sdt, bias);
    for (int i = 0; i < n; i++) {
        float q = rintf((w[i] - bias) / scale);
        q = q < 0 ? 0 : q > n_bins ? n_bins : q;
        put_code(row, bits, c0 + i, (unsigned)q);
    }
    *os = scale;
    *ob = bias;
}

static inline unsigned q3_nearest(float u) {
    /* decision thresholds: midpoints of neighbouring levels */
    unsigned c = 0;
    for (int k = 0; k < 7; k++) c += u > 0.5f * (Q3_LEVELS[k] + Q3_LEVELS[k + 1]);
    return c;
}

/* Rotated group v [n]: picks the scale (multiples of the RMS, rounded to sdt) with the least squared
 * error, then the nearest level for each value. */
static void q3_group(const float *v, int n, dt_type sdt, float *os, uint8_t *row, int c0) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)v[i] * v[i];
    float rms = (float)sqrt(ss / n);
    float best_s = round_to(sdt, rms), best_e = INFINITY;
    if (rms > 0)
        for (int k = 0; k <= 16; k++) {
            float s = round_to(sdt, rms * (0.80f + 0.025f * (float)k));
            if (!(s > 0)) continue;
            float e = 0;
            for (int i = 0; i < n; i++) {
                float d = v[i] - s * Q3_LEVELS[q3_nearest(v[i] / s)];
                e += d * d;
            }
            if (e < best_e) { best_e = e; best_s = s; }
        }
    for (int i = 0; i < n; i++) put_code(row, 3, c0 + i, best_s > 0 ? q3_nearest(v[i] / best_s) : 3u);
    *os = best_s;
}

/* ---- importance-weighted groups (quant/qimp.h) ------------------------------------------------ */

/* sum a_i (w_i - (s q_i + b))^2 with q_i = the nearest code for (s, b), clamped (affine_group's rounding) */
static double affine_werr(const float *w, const float *a, int n, float n_bins, float s, float b) {
    double e = 0;
    for (int i = 0; i < n; i++) {
        float q = rintf((w[i] - b) / s);
        q = q < 0 ? 0 : q > n_bins ? n_bins : q;
        const float d = w[i] - (s * q + b);
        e += (double)a[i] * d * d;
    }
    return e;
}

/* (s, b) of least sum a_i (w_i - s q_i - b)^2 for the codes q_i of (s0, b0); 0, or -1 when degenerate */
static int affine_fit(const float *w, const float *a, int n, float n_bins, float s0, float b0, float *s, float *b) {
    double sw = 0, sl = 0, sll = 0, sx = 0, sxl = 0;
    for (int i = 0; i < n; i++) {
        float q = rintf((w[i] - b0) / s0);
        q = q < 0 ? 0 : q > n_bins ? n_bins : q;
        sw += a[i], sl += (double)a[i] * q, sll += (double)a[i] * q * q, sx += (double)a[i] * w[i];
        sxl += (double)a[i] * w[i] * q;
    }
    const double det = sw * sll - sl * sl;
    if (!(det > 0)) return -1;
    *s = (float)((sw * sxl - sx * sl) / det);
    *b = (float)((sll * sx - sl * sxl) / det);
    return isfinite(*s) && isfinite(*b) ? 0 : -1;
}

/* affine_group under importances a [n]: the scale and bias of least weighted error among MLX's own choice and, as
 * llama.cpp's make_qkx2_quants searches them, the codes of 21 scales across the range (the range over n_bins - 1 ..
 * n_bins + 1 steps from the minimum), each refitted by weighted least squares; everything rounded to sdt before it is
 * scored. Never worse under the weights than affine_group. */
static void affine_group_w(const float *w, const float *a, int n, int bits, dt_type sdt, float *os, float *ob,
                           uint8_t *row, int c0) {
    const float n_bins = (float)((1 << bits) - 1);
    uint8_t tmp[128];
    memset(tmp, 0, sizeof tmp);
    float bs, bb; /* MLX's choice: the reference to beat */
    affine_group(w, n, bits, sdt, &bs, &bb, tmp, 0);
    double be = affine_werr(w, a, n, n_bins, bs, bb);
    float mn = w[0], mx = w[0];
    for (int i = 1; i < n; i++) mn = fminf(mn, w[i]), mx = fmaxf(mx, w[i]);
    for (int k = 0; k <= 20 && mx > mn; k++) {
        float s = (mx - mn) / (n_bins + 0.1f * (float)(k - 10)), b = mn;
        for (int it = 0; it < 2; it++) {
            float fs, fb;
            if (affine_fit(w, a, n, n_bins, s, b, &fs, &fb)) break;
            fs = round_to(sdt, fs), fb = round_to(sdt, fb);
            if (!(fabsf(fs) > 0) || !isfinite(fs) || !isfinite(fb)) break;
            s = fs, b = fb;
            const double e = affine_werr(w, a, n, n_bins, s, b);
            if (e < be) be = e, bs = s, bb = b;
        }
    }
    for (int i = 0; i < n; i++) {
        float q = rintf((w[i] - bb) / bs);
        q = q < 0 ? 0 : q > n_bins ? n_bins : q;
        put_code(row, bits, c0 + i, (unsigned)q);
    }
    *os = bs;
    *ob = bb;
}

/* q3_group under the rotated measure of the importances c [n] (qimp.h): each of q3_group's scales with its nearest
 * codes moved while E falls; the best by E, then its least-squares scale under M where that lowers E. */
static void q3_group_w(const float *v, const float *c, int n, dt_type sdt, float *os, uint8_t *row, int c0) {
    float m[128], u[128], lq[128];
    unsigned char code[128], best[128];
    qimp_metric(c, n, m);
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)v[i] * v[i];
    const float rms = (float)sqrt(ss / n);
    float best_s = round_to(sdt, rms);
    double best_e = INFINITY;
    for (int i = 0; i < n; i++) best[i] = 3u;
    for (int k = 0; rms > 0 && k <= 16; k++) {
        const float s = round_to(sdt, rms * (0.80f + 0.025f * (float)k));
        if (!(s > 0)) continue;
        for (int i = 0; i < n; i++) code[i] = (unsigned char)q3_nearest(v[i] / s);
        const double e = qimp_descend(v, n, s, Q3_LEVELS, 8, code, c, m, 3);
        if (e < best_e) best_e = e, best_s = s, memcpy(best, code, (size_t)n);
    }
    if (best_s > 0) { /* s = (L^T M v) / (L^T M L) over the chosen levels L */
        for (int i = 0; i < n; i++) lq[i] = Q3_LEVELS[best[i]];
        qimp_apply(lq, c, n, u);
        double num = 0, den = 0;
        for (int i = 0; i < n; i++) num += (double)v[i] * u[i], den += (double)lq[i] * u[i];
        const float s = den > 0 ? round_to(sdt, (float)(num / den)) : 0.0f;
        if (s > 0 && isfinite(s)) {
            memcpy(code, best, (size_t)n);
            const double e = qimp_descend(v, n, s, Q3_LEVELS, 8, code, c, m, 3);
            if (e < best_e) best_e = e, best_s = s, memcpy(best, code, (size_t)n);
        }
    }
    for (int i = 0; i < n; i++) put_code(row, 3, c0 + i, best[i]);
    *os = best_s;
}

static void mxfp4_quantize(const float *w, int rows, int cols, uint8_t *out);

/* q_quantize and q_quantize_imp: imp NULL, or a group without a positive importance, takes the plain path */
static void quantize(dt_type dt, const float *w, int rows, int cols, int group, dt_type sdt, uint32_t seed,
                     const float *imp, void *out) {
    if (dt == DT_MXFP4) {
        mxfp4_quantize(w, rows, cols, out);
        return;
    }
    if (kq_rotated(dt)) {
        if (imp) (dt == DT_Q2 ? q2_quantize_imp : q2v_quantize_imp)(w, rows, cols, imp, out);
        else (dt == DT_Q2 ? q2_quantize : q2v_quantize)(w, rows, cols, out);
        return;
    }
    const int bits = q_bits(dt), ng = cols / group;
    const size_t row_bytes = (size_t)cols * (size_t)bits / 8;
    tn_mat m;
    q_mat_bind(&m, out, dt, rows, cols, group, sdt, seed);
    memset(out, 0, (size_t)q_mat_bytes(dt, rows, cols, group, sdt));
    float v[128];
    for (int r = 0; r < rows; r++) {
        const float *wr = w + (size_t)r * (size_t)cols;
        uint8_t *row = (uint8_t *)out + (size_t)r * row_bytes;
        for (int g = 0; g < ng; g++) {
            int c0 = g * group;
            const int wt = imp && qimp_any(imp + c0, group);
            float s, b = 0;
            if (dt == DT_Q3) {
                q_rotate_group(wr + c0, c0, group, seed, v);
                if (wt) q3_group_w(v, imp + c0, group, sdt, &s, row, c0);
                else q3_group(v, group, sdt, &s, row, c0);
            } else {
                if (wt) affine_group_w(wr + c0, imp + c0, group, bits, sdt, &s, &b, row, c0);
                else affine_group(wr + c0, group, bits, sdt, &s, &b, row, c0);
                store((void *)m.biases, sdt, (size_t)r * ng + g, b);
            }
            store((void *)m.scales, sdt, (size_t)r * ng + g, s);
        }
    }
}

void q_quantize(dt_type dt, const float *w, int rows, int cols, int group, dt_type sdt, uint32_t seed,
                void *out) {
    quantize(dt, w, rows, cols, group, sdt, seed, NULL, out);
}

void q_quantize_imp(dt_type dt, const float *w, int rows, int cols, int group, dt_type sdt, uint32_t seed,
                    const float *imp, void *out) {
    quantize(dt, w, rows, cols, group, sdt, seed, imp, out);
}

double q_row_werr(const tn_mat *m, int r, const float *w, const float *imp) {
    float q[m->cols > 0 ? m->cols : 1];
    q_row_to_f32(m, r, q);
    double e = 0;
    for (int j = 0; j < m->cols; j++) e += (imp ? (double)imp[j] : 1.0) * (double)(w[j] - q[j]) * (w[j] - q[j]);
    return e;
}

/* ---- mxfp4 ----------------------------------------------------------------------------------- */

/* OCP MX: per block of 32 the shared exponent floor(log2 amax) - 2 (E2M1's largest is 6 = 1.5 * 2^2), each value
 * the nearest E2M1 level of w / 2^e (ties to the smaller magnitude), as tools/make_fixtures.py quantises. */
static void mxfp4_quantize(const float *w, int rows, int cols, uint8_t *out) {
    uint8_t *codes = out, *scales = out + (size_t)rows * (size_t)(cols / 2);
    memset(codes, 0, (size_t)rows * (size_t)(cols / 2));
    for (int r = 0; r < rows; r++)
        for (int g = 0; g < cols / 32; g++) {
            const float *b = w + (size_t)r * cols + (size_t)g * 32;
            float amax = 0;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(b[i]));
            int e = amax > 0 ? (int)floorf(log2f(amax)) - 2 : -127;
            if (e < -127) e = -127;
            if (e > 127) e = 127;
            scales[(size_t)r * (cols / 32) + g] = (uint8_t)(e + 127);
            for (int i = 0; i < 32; i++) {
                float v = ldexpf(b[i], -e);
                int best = 0;
                for (int k = 1; k < 16; k++)
                    if (fabsf(v - MXFP4_VALUES[k]) < fabsf(v - MXFP4_VALUES[best])) best = k;
                codes[(size_t)r * (cols / 2) + (size_t)g * 16 + i / 2] |= (uint8_t)(best << ((i & 1) * 4));
            }
        }
}

/* quant.h q_rows_view */
tn_mat q_rows_view(const tn_mat *m, int row0, int n) {
    tn_mat v = *m;
    const int bits = q_bits(m->dtype);
    v.rows = n;
    if (kq_is(m->dtype)) { /* rows of whole blocks, scales inside */
        v.data = v.scales = (const uint8_t *)m->data + (size_t)row0 * kq_row_bytes(m->dtype, m->cols);
        return v;
    }
    if (!bits) {
        v.data = (const uint8_t *)m->data + (size_t)row0 * (size_t)m->cols * dt_size(m->dtype);
        return v;
    }
    const size_t ng = (size_t)(m->cols / m->group);
    v.data = (const uint8_t *)m->data + (size_t)row0 * (size_t)m->cols * (size_t)bits / 8;
    v.scales = (const uint8_t *)m->scales + (size_t)row0 * ng * dt_size(m->sdtype);
    if (m->biases) v.biases = (const uint8_t *)m->biases + (size_t)row0 * ng * dt_size(m->sdtype);
    return v;
}
