/*
 * kernels_scalar.c — the portable C kernels (the oracle) and the threaded matmul driver.
 *
 * Matmul blocking (kernels_tile.h, the driver every table shares): tokens in blocks of TILE_KTOK, rows in
 * blocks of TILE_RB, columns in chunks of TILE_KCHUNK converted to f32 once per (row block, chunk) and reused
 * by every token of the block. Each y[t][r] keeps 8 lane accumulators across all chunks (lane = column % 8;
 * TILE_KCHUNK is a multiple of 8), so its value depends only on the column
 * count: the blocking, n_tok and the row range never change the summation order (kernels.h).
 * Plain C written so that GCC's -O2 vectoriser can use it; no FMA contraction (ISO C mode).
 *
 * Quantized types are dequantised chunk by chunk into the same f32 buffer, so they share the f32
 * summation order exactly (the oracle for the SIMD variants).
 *
 * Sections: dtype loads, matmul, small vector kernels, the ops table, selection and kern_matmul().
 */
#include "kernels/kernels.h"
#include "kernels/kernels_amx.h"
#include "kernels/kernels_plain.h"
#include "kernels/mxfp4.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "sluice.h"

#define LANES 8

typedef struct {
    float l[LANES];
} tile_acc;

#include "kernels/kernels_tile.h"

#define RB TILE_RB

/* ---- dtype loads ------------------------------------------------------------------------------ */

/* f16 -> f32 without a branch (so loops of it vectorise): shifting the f16 exponent/mantissa into f32
 * position and scaling by 2^112 rebiases the exponent exactly for normals and subnormals; for Inf/NaN
 * (exponent 31 -> 143 after scaling) setting all exponent bits restores them, mantissa kept. */
static inline float h2f(uint16_t h) {
    uint32_t u = (uint32_t)(h & 0x7fff) << 13;
    float f;
    memcpy(&f, &u, 4);
    f *= 0x1p112f;
    memcpy(&u, &f, 4);
    u |= (0u - (uint32_t)((h & 0x7c00) == 0x7c00)) & 0x7f800000u;
    u |= (uint32_t)(h & 0x8000) << 16;
    memcpy(&f, &u, 4);
    return f;
}

static inline float b2f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Returns [nc] f32 values of row r starting at column c0: a pointer into w for f32, else buf.
 * Quantized rows are dequantised group by group (c0 and nc are multiples of the group: KCHUNK is a
 * multiple of 128 and the group divides cols); q3 yields the rotated weights scale * level. */
static inline __attribute__((always_inline)) const float *tile_load(dt_type dt, const tn_mat *m, int r, int c0,
                                                                      int nc, float *buf) {
    const int cols = m->cols;
    size_t off = (size_t)r * (size_t)cols + (size_t)c0;
    if (dt == DT_F32) return (const float *)m->data + off;
    if (dt == DT_F16 || dt == DT_BF16) {
        const uint16_t *s = (const uint16_t *)m->data + off;
        /* a constant trip count for full chunks lets -O2's cheap vectoriser take the loop */
        if (dt == DT_F16) {
            if (nc == TILE_KCHUNK)
                for (int i = 0; i < TILE_KCHUNK; i++) buf[i] = h2f(s[i]);
            else
                for (int i = 0; i < nc; i++) buf[i] = h2f(s[i]);
        } else {
            if (nc == TILE_KCHUNK)
                for (int i = 0; i < TILE_KCHUNK; i++) buf[i] = b2f(s[i]);
            else
                for (int i = 0; i < nc; i++) buf[i] = b2f(s[i]);
        }
        return buf;
    }
    const int g = m->group, ng = cols / g;
    const size_t sidx = (size_t)r * (size_t)ng + (size_t)(c0 / g);
    if (dt == DT_Q8) {
        const uint8_t *q = (const uint8_t *)m->data + off;
        for (int j = 0; j < nc; j += g) {
            float sc = q_scale_at(m->scales, m->sdtype, sidx + (size_t)(j / g));
            float bi = q_scale_at(m->biases, m->sdtype, sidx + (size_t)(j / g));
            for (int i = 0; i < g; i++) buf[j + i] = sc * (float)q[j + i] + bi;
        }
    } else if (dt == DT_Q4) {
        const uint8_t *q = (const uint8_t *)m->data + off / 2;
        for (int j = 0; j < nc; j += g) {
            float sc = q_scale_at(m->scales, m->sdtype, sidx + (size_t)(j / g));
            float bi = q_scale_at(m->biases, m->sdtype, sidx + (size_t)(j / g));
            for (int i = 0; i < g; i += 2) {
                uint8_t b = q[(j + i) / 2];
                buf[j + i] = sc * (float)(b & 15) + bi;
                buf[j + i + 1] = sc * (float)(b >> 4) + bi;
            }
        }
    } else { /* DT_Q3: 8 codes per 3 bytes */
        const uint8_t *q = (const uint8_t *)m->data + off / 8 * 3;
        for (int j = 0; j < nc; j += g) {
            float sc = q_scale_at(m->scales, m->sdtype, sidx + (size_t)(j / g));
            for (int i = 0; i < g; i += 8) {
                const uint8_t *p = q + (size_t)(j + i) / 8 * 3;
                uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
                for (int k = 0; k < 8; k++) buf[j + i + k] = sc * Q3_LEVELS[(v >> (3 * k)) & 7];
            }
        }
    }
    return buf;
}

/* ---- matmul: kernels_tile.h's driver over these pieces --------------------------------------- */

static inline tile_acc tile_zero(void) { return (tile_acc){{0}}; }

/* acc[i].l[lane] += w_i[c] * x[c] for RB rows over n columns; the chunk starts at a multiple of 8. */
static inline void tile_dot4(const float *const *wr, const float *x, int n, tile_acc *acc) {
    float a0[LANES], a1[LANES], a2[LANES], a3[LANES];
    memcpy(a0, acc[0].l, sizeof a0);
    memcpy(a1, acc[1].l, sizeof a1);
    memcpy(a2, acc[2].l, sizeof a2);
    memcpy(a3, acc[3].l, sizeof a3);
    const float *w0 = wr[0], *w1 = wr[1], *w2 = wr[2], *w3 = wr[3];
    int c = 0;
    for (; c + LANES <= n; c += LANES) {
        for (int j = 0; j < LANES; j++) {
            float xv = x[c + j];
            a0[j] += w0[c + j] * xv;
            a1[j] += w1[c + j] * xv;
            a2[j] += w2[c + j] * xv;
            a3[j] += w3[c + j] * xv;
        }
    }
    for (; c < n; c++) {
        int j = c & (LANES - 1);
        a0[j] += w0[c] * x[c];
        a1[j] += w1[c] * x[c];
        a2[j] += w2[c] * x[c];
        a3[j] += w3[c] * x[c];
    }
    memcpy(acc[0].l, a0, sizeof a0);
    memcpy(acc[1].l, a1, sizeof a1);
    memcpy(acc[2].l, a2, sizeof a2);
    memcpy(acc[3].l, a3, sizeof a3);
}

static inline float lanes_sum(const float *a) {
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

static inline float tile_sum(tile_acc v) { return lanes_sum(v.l); }

static inline int tile_one_token(dt_type dt, const tn_mat *w, const float *x, float *y, int r0, int r1) { return 0; }

/* ---- int8-activation matmul (the oracle of kernels.h's canonical order) ------------------------ */

static float mmi8_one(dt_type dt, const tn_mat *w, int r, const kern_act *a, int t) {
    const int cols = w->cols, g = w->group, ng = cols / g, nb = cols / 32, ns = nb + nb / 2 + nb / 4;
    const int8_t *xq = a->q + (size_t)t * (size_t)cols;
    const float *d = a->d + (size_t)t * (size_t)nb;
    const float *xs = a->s + (size_t)t * (size_t)ns + (g == 32 ? 0 : g == 64 ? nb : nb + nb / 2);
    const size_t sb = (size_t)r * (size_t)ng;
    const int per = dt == DT_Q8 ? 4 : 8, step = 16 * per; /* columns per lane, per step of 16 lanes */
    const uint8_t *q = (const uint8_t *)w->data + (size_t)r * (size_t)cols / (dt == DT_Q8 ? 1 : 2);
    float acc[16] = {0}, accb[LANES] = {0};
    for (int c0 = 0; c0 < cols; c0 += step) {
        int nl = (cols - c0 < step ? cols - c0 : step) / per;
        for (int l = 0; l < nl; l++) {
            int c = c0 + per * l;
            float sd = q_scale_at(w->scales, w->sdtype, sb + (size_t)(c / g)) * d[c / 32];
            int32_t I = 0;
            for (int i = 0; i < per; i++) {
                int code = dt == DT_Q8 ? q[c + i] : (q[(c + i) / 2] >> ((c + i) & 1) * 4) & 15;
                I += (int32_t)code * (int32_t)xq[c + i];
            }
            acc[l] = fmaf((float)I, sd, acc[l]);
        }
    }
    for (int j = 0; j < ng; j++) accb[j % LANES] = fmaf(q_scale_at(w->biases, w->sdtype, sb + (size_t)j), xs[j], accb[j % LANES]);
    float h[LANES];
    for (int i = 0; i < LANES; i++) h[i] = acc[i] + acc[i + 8];
    return lanes_sum(h) + lanes_sum(accb);
}

static void mmi8_q8(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    for (int t = 0; t < a->n_tok; t++)
        for (int r = r0; r < r1; r++) y[(size_t)t * ldy + (size_t)r] = mmi8_one(DT_Q8, w, r, a, t);
}

static void mmi8_q4(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    for (int t = 0; t < a->n_tok; t++)
        for (int r = r0; r < r1; r++) y[(size_t)t * ldy + (size_t)r] = mmi8_one(DT_Q4, w, r, a, t);
}

/* ---- small vector kernels --------------------------------------------------------------------- */

static float dot_scalar(const float *a, const float *b, int n) {
    float acc[LANES] = {0};
    int c = 0;
    for (; c + LANES <= n; c += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += a[c + j] * b[c + j];
    for (; c < n; c++) acc[c & (LANES - 1)] += a[c] * b[c];
    return lanes_sum(acc);
}

static void act_row(const float *x, int cols, int8_t *q, int8_t *q4, float *d, float *s);
static void act_row_0(const float *x, int cols, int8_t *q, float *d, int8_t *q4, float *s0, float *s1);

void kern_softmax_row(float *sc, int n, float scale, const float *sink) {
    float mx = sink ? *sink : -INFINITY;
    for (int p = 0; p < n; p++) {
        sc[p] *= scale;
        if (sc[p] > mx) mx = sc[p];
    }
    double sum = sink ? (double)expf(*sink - mx) : 0.0;
    for (int p = 0; p < n; p++) {
        sc[p] = expf(sc[p] - mx);
        sum += sc[p];
    }
    float fsum = (float)sum;
    for (int p = 0; p < n; p++) sc[p] /= fsum;
}

/* ---- table and driver ------------------------------------------------------------------------- */

static const kern_ops scalar_ops = {
    .name = "scalar",
    .matmul = TILE_MATMUL,
    .matmul_i8 = {[DT_Q8] = mmi8_q8, [DT_Q4] = mmi8_q4, KQ_I8_ENTRIES(kern_kq_i8)},
    .dot = dot_scalar,
    .act_row = act_row,
    .act_row_0 = act_row_0,
    .axpy = plain_axpy,
    .rmsnorm = plain_rmsnorm,
    .swiglu = plain_swiglu,
};

const kern_ops *kern_scalar_ops(void) { return &scalar_ops; }

static const kern_ops *pick(const char *want) {
    const kern_ops *(*const all[])(void) = {kern_avx512_ops, kern_avx2_ops, kern_neon_ops};
    if (want && !strcmp(want, "scalar")) return &scalar_ops;
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        const kern_ops *o = all[i]();
        if (o && (!want || !strcmp(want, o->name))) return o;
    }
    return want ? NULL : &scalar_ops;
}

const kern_ops *kern_ops_by_name(const char *name) { return pick(name); }

const kern_ops *kern_default_ops(void) {
    const char *env = getenv("SLUICE_KERNELS");
    const kern_ops *o = env && *env ? pick(env) : NULL;
    return o ? o : pick(NULL);
}

typedef struct {
    kern_matmul_fn fn;
    const tn_mat *w;
    const float *x;
    float *y;
    size_t ldx, ldy;
    int n_tok;
} mm_job;

static void mm_part(void *ctx, size_t begin, size_t end) {
    const mm_job *j = ctx;
    j->fn(j->w, j->x, j->ldx, j->y, j->ldy, j->n_tok, (int)begin, (int)end);
}

int kern_matmul(const kern_ops *ops, pool_t *pool, const tn_mat *w, const float *x, size_t ldx, float *y,
                size_t ldy, int n_tok) {
    if (w->dtype == DT_MXFP4) return mxfp4_matmul(ops, pool, w, x, ldx, y, ldy, n_tok); /* kernels/mxfp4.c */
    if (!w->data || w->dtype <= DT_NONE || w->dtype >= DT_COUNT || !ops->matmul[w->dtype]) return SL_EINVAL;
    if (n_tok <= 0 || w->rows <= 0) return 0;
    mm_job j = {ops->matmul[w->dtype], w, x, y, ldx, ldy, n_tok};
    float *xr = NULL;
    if (w->dtype == DT_Q3 || kq_rotated(w->dtype)) { /* rotate each token's x once; every row then dots with it */
        xr = malloc((size_t)n_tok * (size_t)w->cols * sizeof(float));
        if (!xr) return SL_ENOMEM;
        for (int t = 0; t < n_tok; t++)
            if (kq_rotated(w->dtype)) q2_rotate(x + (size_t)t * ldx, w->cols, xr + (size_t)t * (size_t)w->cols);
            else q3_rotate(x + (size_t)t * ldx, w->cols, w->group, w->seed, xr + (size_t)t * (size_t)w->cols);
        j.x = xr;
        j.ldx = (size_t)w->cols;
    }
    /* aim for at least ~64K multiply-adds per part so small matrices stay on one thread; keep the
     * grain a multiple of RB so row blocks are full */
    size_t work = (size_t)w->cols * (size_t)n_tok;
    size_t grain = work >= 65536 ? RB : (65536 / (work ? work : 1) + RB - 1) / RB * RB;
    pool_for_any(pool, (size_t)w->rows, grain, mm_part, &j);
    free(xr);
    return 0;
}

/* ---- activations in int8 (kernels.h: kern_act) ------------------------------------------------ */

#define ACT_ALIGN 64
static size_t act_round(size_t n) { return (n + ACT_ALIGN - 1) / ACT_ALIGN * ACT_ALIGN; }
static int act_ns(int nb) { return kern_act_ns(nb); }

size_t kern_act_bytes(int n_tok, int cols) {
    size_t n = (size_t)(n_tok > 0 ? n_tok : 0), c = (size_t)(cols > 0 ? cols : 0), nb = c / 32;
    /* q, q4, d, s, then the q8_K form qk, dk and the q8_0 form q0, d0, q04, s0, s1 (at the end: the first four
     * keep their offsets), then q2's qr, dr, then the q8_K form's sums bk */
    return 6 * act_round(n * c) + 4 * act_round(n * nb * sizeof(float)) +
           3 * act_round(n * (size_t)act_ns((int)nb) * sizeof(float)) + act_round(n * (c / 16) * sizeof(int16_t)) +
           ACT_ALIGN;
}

static void act_carve(kern_act *a, void *buf) {
    a->buf = buf;
    if (!buf) return;
    uintptr_t p = ((uintptr_t)buf + ACT_ALIGN - 1) / ACT_ALIGN * ACT_ALIGN;
    size_t n = (size_t)a->n_tok, c = (size_t)a->cols, nb = c / 32;
    a->q = (int8_t *)p;
    p += act_round(n * c);
    a->q4 = (int8_t *)p;
    p += act_round(n * c);
    a->d = (float *)p;
    p += act_round(n * nb * sizeof(float));
    a->s = (float *)p;
    p += act_round(n * (size_t)act_ns((int)nb) * sizeof(float));
    a->qk = (int8_t *)p;
    p += act_round(n * c);
    a->dk = (float *)p;
    p += act_round(n * nb * sizeof(float));
    a->q0 = (int8_t *)p;
    p += act_round(n * c);
    a->d0 = (float *)p;
    p += act_round(n * nb * sizeof(float));
    a->q04 = (int8_t *)p;
    p += act_round(n * c);
    a->s0 = (float *)p;
    p += act_round(n * (size_t)act_ns((int)nb) * sizeof(float));
    a->s1 = (float *)p;
    p += act_round(n * (size_t)act_ns((int)nb) * sizeof(float));
    a->qr = (int8_t *)p;
    p += act_round(n * c);
    a->dr = (float *)p;
    p += act_round(n * nb * sizeof(float));
    a->bk = (int16_t *)p;
}

void kern_act_init(kern_act *a, void *buf, const float *x, size_t ldx, int n_tok, int cols, int int8) {
    memset(a, 0, sizeof *a);
    a->x = x;
    a->ldx = ldx;
    a->n_tok = n_tok;
    a->cols = cols;
    a->int8 = int8 && buf && cols > 0 && cols % 32 == 0;
    act_carve(a, buf);
}

void kern_act_sums_q4(int cols, const int8_t *q, int8_t *q4, float *s) {
    const int nb = cols / 32;
    for (int j = 0; j < nb / 2; j++) s[nb + j] = s[2 * j] + s[2 * j + 1];
    for (int j = 0; j < nb / 4; j++) s[nb + nb / 2 + j] = s[nb + 2 * j] + s[nb + 2 * j + 1];
    for (int c0 = 0; c0 < cols; c0 += 128) {
        int h = (cols - c0 >= 128 ? 128 : cols - c0) / 2;
        for (int i = 0; i < h; i++) {
            q4[c0 + i] = q[c0 + 2 * i];
            q4[c0 + h + i] = q[c0 + 2 * i + 1];
        }
    }
}

/* One token: codes, block scales and sums of row x (kern_act's definitions). */
static void act_row(const float *x, int cols, int8_t *q, int8_t *q4, float *d, float *s) {
    const int nb = cols / 32;
    for (int b = 0; b < nb; b++) {
        const float *xb = x + 32 * b;
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) { /* fmaxf without the call: a NaN never replaces amax, as in fmaxf */
            float v = fabsf(xb[i]);
            amax = v > amax ? v : amax;
        }
        float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        int32_t sum = 0;
        for (int i = 0; i < 32; i++) {
            /* nearbyintf without the call: |x * id| <= ~127, where adding and taking away 1.5 * 2^23 rounds to the
             * nearest integer, ties to even, exactly as nearbyintf does; NaN (from Inf or NaN inputs) stays NaN
             * and becomes 0 below */
            float rv = (xb[i] * id + 0x1.8p23f) - 0x1.8p23f;
            int v = rv >= 127.0f ? 127 : rv <= -127.0f ? -127 : rv == rv ? (int)rv : 0;
            q[32 * b + i] = (int8_t)v;
            sum += v;
        }
        d[b] = db;
        s[b] = db * (float)sum;
    }
    kern_act_sums_q4(cols, q, q4, s);
}

/* One token's q8_K form (kernels.h kern_act qk / dk / bk; llama.cpp ggml-quants.c quantize_row_q8_K_ref, whose
 * nearest_int is the same round-to-nearest-even by adding 1.5 * 2^23) of cols % 256 == 0 values. */
static void act_row_k(const float *x, int cols, int8_t *q, float *d, int16_t *bk) {
    for (int k = 0; k < cols / 256; k++) {
        const float *xb = x + 256 * k;
        float max = 0.0f, amax = 0.0f;
        for (int i = 0; i < 256; i++) {
            float v = fabsf(xb[i]);
            if (v > amax) amax = v, max = xb[i];
        }
        const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
        for (int i = 0; i < 256; i++) {
            float rv = (iscale * xb[i] + 0x1.8p23f) - 0x1.8p23f;
            int v = rv >= 127.0f ? 127 : rv <= -127.0f ? -127 : rv == rv ? (int)rv : 0; /* -128 cannot occur */
            q[256 * k + i] = (int8_t)v;
        }
        for (int b = 0; b < 8; b++) d[8 * k + b] = amax != 0.0f ? 1.0f / iscale : 0.0f;
    }
    for (int g = 0; g < cols / 16; g++) {
        int s = 0;
        for (int i = 0; i < 16; i++) s += q[16 * g + i];
        bk[g] = (int16_t)s; /* |s| <= 16 * 127 */
    }
}

/* One token's q8_0 / q8_1 form (kern_act q0 / d0 / q04 / s0 / s1: llama.cpp's x86 quantize_row_q8_0 and
 * quantize_row_q8_1, the same codes and d) of cols % 32 == 0 values. */
static void act_row_0(const float *x, int cols, int8_t *q, float *d, int8_t *q4, float *s0, float *s1) {
    for (int b = 0; b < cols / 32; b++) {
        const float *xb = x + 32 * b;
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) {
            float v = fabsf(xb[i]);
            amax = v > amax ? v : amax;
        }
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f, db = amax / 127.0f;
        int32_t sum = 0;
        for (int i = 0; i < 32; i++) {
            float rv = (xb[i] * id + 0x1.8p23f) - 0x1.8p23f;
            int v = rv >= 127.0f ? 127 : rv <= -127.0f ? -127 : rv == rv ? (int)rv : 0;
            q[32 * b + i] = (int8_t)v;
            sum += v;
        }
        d[b] = f16_to_f32(f32_to_f16(db));
        s0[b] = d[b] * (float)sum;
        s1[b] = f16_to_f32(f32_to_f16(db * (float)sum));
    }
    kern_act_sums_q4(cols, q, q4, s1);
    kern_act_sums_q4(cols, q, q4, s0);
}

/* One token's q2 form (kern_act qr / dr) of cols % 128 == 0 values: each block of 128 rotated, then quantized per 32
 * as act_row_0 does but with an f32 d. */
static void act_row_r(const float *x, int cols, int8_t *q, float *d) {
    float v[Q2_BLK];
    for (int c0 = 0; c0 < cols; c0 += Q2_BLK) {
        q_rotate_group(x + c0, c0, Q2_BLK, Q2_SEED, v);
        for (int b = 0; b < Q2_BLK / 32; b++) {
            const float *vb = v + 32 * b;
            float amax = 0.0f;
            for (int i = 0; i < 32; i++) {
                float a = fabsf(vb[i]);
                amax = a > amax ? a : amax;
            }
            const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
            for (int i = 0; i < 32; i++) {
                float rv = (vb[i] * id + 0x1.8p23f) - 0x1.8p23f;
                q[c0 + 32 * b + i] = (int8_t)(rv >= 127.0f ? 127 : rv <= -127.0f ? -127 : rv == rv ? (int)rv : 0);
            }
            d[(c0 + 32 * b) / 32] = amax / 127.0f;
        }
    }
}

static void act_r_part(void *ctx, size_t b, size_t e) {
    kern_act *a = ctx;
    const size_t c = (size_t)a->cols, nb = c / 32;
    for (size_t t = b; t < e; t++) act_row_r(a->x + t * a->ldx, a->cols, a->qr + t * c, a->dr + t * nb);
}

/* The q2 form on pool (NULL: inline), once. */
static void act_prepare_r_on(kern_act *a, pool_t *pool) {
    if (!a->int8 || a->ready_r || a->cols % Q2_BLK) return;
    pool_for(pool, (size_t)(a->n_tok > 0 ? a->n_tok : 0), 8, act_r_part, a);
    a->ready_r = 1;
}

static void act_k_part(void *ctx, size_t b, size_t e) {
    kern_act *a = ctx;
    const size_t c = (size_t)a->cols, nb = c / 32;
    for (size_t t = b; t < e; t++)
        act_row_k(a->x + t * a->ldx, a->cols, a->qk + t * c, a->dk + t * nb, a->bk + t * (c / 16));
}

typedef void (*act_row0_fn)(const float *, int, int8_t *, float *, int8_t *, float *, float *);

static void act_0_part(void *ctx, size_t b, size_t e) {
    kern_act *a = ctx;
    const size_t c = (size_t)a->cols, nb = c / 32;
    const size_t ns = (size_t)act_ns((int)nb);
    static act_row0_fn _Atomic row_fn;
    act_row0_fn fn = row_fn;
    if (!fn) { /* the default table's (every table's gives the same bits) */
        fn = kern_default_ops()->act_row_0;
        row_fn = fn = fn ? fn : act_row_0;
    }
    for (size_t t = b; t < e; t++)
        fn(a->x + t * a->ldx, a->cols, a->q0 + t * c, a->d0 + t * nb, a->q04 + t * c, a->s0 + t * ns, a->s1 + t * ns);
}

/* The q8_K form (k) or the q8_0 / q8_1 form (!k) on pool (NULL: inline), once. */
static void act_prepare_k_on(kern_act *a, pool_t *pool, int k) {
    if (!a->int8 || (k ? a->ready_k || a->cols % 256 : a->ready_0)) return;
    pool_for(pool, (size_t)(a->n_tok > 0 ? a->n_tok : 0), 8, k ? act_k_part : act_0_part, a);
    if (k) a->ready_k = 1;
    else a->ready_0 = 1;
}

void kern_act_prepare_kq(kern_act *a) {
    act_prepare_k_on(a, NULL, 1);
    act_prepare_k_on(a, NULL, 0);
    act_prepare_r_on(a, NULL);
}

typedef void (*act_row_fn)(const float *, int, int8_t *, int8_t *, float *, float *);

static act_row_fn act_fn(void) {
    static act_row_fn _Atomic row_fn;
    act_row_fn fn = row_fn;
    if (!fn) { /* the default table's (every table's gives the same bits) */
        fn = kern_default_ops()->act_row;
        row_fn = fn = fn ? fn : act_row;
    }
    return fn;
}

static void act_part(void *ctx, size_t b, size_t e) {
    kern_act *a = ctx;
    const act_row_fn fn = act_fn();
    const size_t c = (size_t)a->cols, nb = c / 32, ns = (size_t)act_ns((int)nb);
    for (size_t t = b; t < e; t++)
        fn(a->x + t * a->ldx, a->cols, a->q + t * c, a->q4 + t * c, a->d + t * nb, a->s + t * ns);
}

/* kern_act_prepare with the tokens split over pool (NULL: inline): a prefill's activations are quantized on
 * every thread, not on the caller alone while the others wait; each token's bits are the same either way. */
static void act_prepare_on(kern_act *a, pool_t *pool) {
    if (!a->int8 || a->ready) return;
    pool_for(pool, (size_t)(a->n_tok > 0 ? a->n_tok : 0), 8, act_part, a);
    a->ready = 1;
}

void kern_act_prepare(kern_act *a) { act_prepare_on(a, NULL); }

static int i8_dtype(dt_type dt) { return dt == DT_Q8 || dt == DT_Q4 || kq_is(dt); }

/* Whether w over a takes the int8 kernels (kernels.h kern_matmul_i8_fn); else the exact f32 ones. */
static int mm_use_i8(const tn_mat *w, const kern_act *a) {
    return a->int8 && i8_dtype(w->dtype) && w->cols == a->cols && w->group > 0 &&
           w->group % 32 == 0 && w->cols % w->group == 0 && (!kq_act_k(w->dtype) || w->cols % 256 == 0);
}

/* The int8 forms of a kern_act (kernels.h kern_act): the house form (q, q4, d, s), llama.cpp's q8_K (qk, dk, bk),
 * its q8_0 / q8_1 (q0, q04, d0, s0, s1), q2's rotated one (qr, dr). */
typedef enum { FORM_NONE = 0, FORM_HOUSE, FORM_K, FORM_0, FORM_R, FORM_COUNT } act_form_id;

/* The int8 form w's kernel reads of a (kernels.h kern_matmul_i8_fn): FORM_NONE where w takes the exact kernels on a
 * or the columns do not allow the form. The one place that decides it: every preparer and flag setter below asks. */
static act_form_id act_form(const kern_act *a, const tn_mat *w) {
    if (!w->data || !mm_use_i8(w, a)) return FORM_NONE;
    if (kq_rotated(w->dtype)) return a->cols % Q2_BLK ? FORM_NONE : FORM_R;
    if (kq_is(w->dtype) && kq_act_k(w->dtype)) return a->cols % 256 ? FORM_NONE : FORM_K;
    return kq_is(w->dtype) || w->act != TN_ACT_HOUSE ? FORM_0 : FORM_HOUSE;
}

/* Fills act_form(a, w) on pool (NULL: inline), once. */
static void act_prepare_for(kern_act *a, const tn_mat *w, pool_t *pool) {
    switch (act_form(a, w)) {
    case FORM_HOUSE: act_prepare_on(a, pool); break;
    case FORM_K: act_prepare_k_on(a, pool, 1); break;
    case FORM_0: act_prepare_k_on(a, pool, 0); break;
    case FORM_R: act_prepare_r_on(a, pool); break;
    default: break;
    }
}

/* What a q8/q4 kernel reads for w: a itself, or (tn_mat.act) a copy in *tmp whose q, q4, d, s are a's llama.cpp
 * form (kernels.h kern_matmul_i8_fn). */
static const kern_act *act_view(const tn_mat *w, const kern_act *a, kern_act *tmp) {
    if (w->act == TN_ACT_HOUSE || kq_is(w->dtype)) return a;
    *tmp = *a;
    tmp->q = a->q0;
    tmp->q4 = a->q04;
    tmp->d = a->d0;
    tmp->s = w->act == TN_ACT_Q8_1 ? a->s1 : a->s0;
    return tmp;
}

void kern_act_prepare_row(kern_act *a, int t) { act_part(a, (size_t)t, (size_t)t + 1); }

void kern_act_prepare_cols(kern_act *a, int t, int c0, int c1) {
    const size_t c = (size_t)a->cols, nb = c / 32, ns = (size_t)act_ns((int)nb), tt = (size_t)t;
    const int nbs = (c1 - c0) / 32;
    float s[3 * 4 * 4]; /* the slice's s32, s64, s128: at most 128 columns, 4 blocks */
    act_fn()(a->x + tt * a->ldx + c0, c1 - c0, a->q + tt * c + c0, a->q4 + tt * c + c0, a->d + tt * nb + c0 / 32, s);
    float *gs = a->s + tt * ns;
    for (int b = 0; b < nbs; b++) gs[c0 / 32 + b] = s[b];
    for (int j = 0; j < nbs / 2; j++) gs[nb + (size_t)c0 / 64 + j] = s[nbs + j];
    for (int j = 0; j < nbs / 4; j++) gs[nb + nb / 2 + (size_t)c0 / 128 + j] = s[nbs + nbs / 2 + j];
}

void kern_act_gather(kern_act *dst, void *buf, kern_act *src, const int *idx, int n, const float *x_rows) {
    kern_act_init(dst, buf, x_rows, (size_t)src->cols, n, src->cols, src->int8);
    if (!dst->int8) return;
    kern_act_prepare(src);
    const size_t c = (size_t)src->cols, nb = c / 32, ns = (size_t)act_ns((int)nb);
    for (int i = 0; i < n; i++) {
        size_t t = (size_t)idx[i];
        memcpy(dst->q + i * c, src->q + t * c, c);
        memcpy(dst->q4 + i * c, src->q4 + t * c, c);
        memcpy(dst->d + i * nb, src->d + t * nb, nb * sizeof(float));
        memcpy(dst->s + i * ns, src->s + t * ns, ns * sizeof(float));
    }
    dst->ready = 1;
}

typedef struct {
    kern_matmul_i8_fn fn;
    const tn_mat *w;
    const kern_act *a;
    float *y;
    size_t ldy;
} mmi8_job;

/* The rows a parallel-for hands out at a time (a multiple of RB): enough work per claim, and whole 16-row tiles where
 * the AMX kernel takes a q4 prefill (kernels_amx.h; a shorter range falls back to the VNNI kernels). */
static size_t mm_grain(size_t work, const tn_mat *w, int n_tok) {
    size_t grain = work >= 65536 ? RB : (65536 / (work ? work : 1) + RB - 1) / RB * RB;
    const int amx = w->dtype == DT_Q4 && n_tok > 1 ? kern_amx_ready() : 0;
    return amx && n_tok >= amx && grain < 16 ? 16 : grain;
}

static void mmi8_part(void *ctx, size_t begin, size_t end) {
    const mmi8_job *j = ctx;
    j->fn(j->w, j->a, j->y, j->ldy, (int)begin, (int)end);
}

void kern_act_row(kern_act *dst, kern_act *src, int t) {
    kern_act_prepare(src);
    kern_act_rows(dst, src, t, 1);
}

void kern_act_rows(kern_act *dst, kern_act *src, int t, int n) {
    *dst = *src;
    const size_t c = (size_t)src->cols, nb = c / 32, ns = (size_t)act_ns((int)nb), tt = (size_t)t;
    dst->x = src->x + tt * src->ldx;
    dst->n_tok = n;
    if (!src->int8) return;
    dst->q = src->q + tt * c;
    dst->q4 = src->q4 + tt * c;
    dst->d = src->d + tt * nb;
    dst->s = src->s + tt * ns;
    dst->qk = src->qk + tt * c; /* the GGUF types' forms: filled now or on first use by dst's matrix (dst->x) */
    dst->dk = src->dk + tt * nb;
    dst->bk = src->bk + tt * (c / 16);
    dst->q0 = src->q0 + tt * c;
    dst->d0 = src->d0 + tt * nb;
    dst->q04 = src->q04 + tt * c;
    dst->s0 = src->s0 + tt * ns;
    dst->s1 = src->s1 + tt * ns;
    dst->qr = src->qr + tt * c;
    dst->dr = src->dr + tt * nb;
}

typedef struct {
    const kern_ops *ops;
    const kern_mm *mm;
    int n;
    const size_t *row0; /* [n+1] first global row of each matrix */
} multi_job;

/* The int8 kernel for w: ops' own, or the scalar one for rows of more than 2048 groups (the SIMD tables hold
 * a row's scales on the stack: kernels_i8_x86.h, I8_MAXG groups). */
static kern_matmul_i8_fn i8_kernel(const kern_ops *ops, const tn_mat *w) {
    return ops->matmul_i8[w->dtype] && w->cols / w->group <= 2048 ? ops->matmul_i8[w->dtype] : scalar_ops.matmul_i8[w->dtype];
}

static void multi_part(void *ctx, size_t begin, size_t end) {
    const multi_job *j = ctx;
    for (int i = 0; i < j->n; i++) {
        size_t b = j->row0[i], e = j->row0[i + 1];
        if (e <= begin || b >= end) continue;
        int r0 = (int)((begin > b ? begin : b) - b), r1 = (int)((end < e ? end : e) - b);
        const kern_mm *m = &j->mm[i];
        if (mm_use_i8(m->w, m->a)) {
            kern_act tmp;
            i8_kernel(j->ops, m->w)(m->w, act_view(m->w, m->a, &tmp), m->y, m->ldy, r0, r1);
        } else
            j->ops->matmul[m->w->dtype](m->w, m->a->x, m->a->ldx, m->y, m->ldy, m->a->n_tok, r0, r1);
    }
}

int kern_matmul_multi(const kern_ops *ops, pool_t *pool, const kern_mm *mm, int n) {
    enum { MULTI_MAX = 256 };
    size_t row0[MULTI_MAX + 1];
    int simple = n <= MULTI_MAX;
    row0[0] = 0;
    for (int i = 0; simple && i < n; i++) {
        const tn_mat *w = mm[i].w;
        /* q3, and q2 on f32 activations, need a rotated copy of x: kern_matmul's */
        simple = w->data && w->dtype > DT_NONE && w->dtype < DT_COUNT && ops->matmul[w->dtype] && w->dtype != DT_Q3 &&
                 (!kq_rotated(w->dtype) || mm_use_i8(w, mm[i].a)) &&
                 mm[i].a->n_tok > 0 && w->rows >= 0;
        row0[i + 1] = row0[i] + (size_t)(w->rows > 0 ? w->rows : 0);
    }
    if (!simple) { /* one by one */
        int rc = 0;
        for (int i = 0; i < n; i++) {
            int r = kern_matmul_act(ops, pool, mm[i].w, mm[i].a, mm[i].y, mm[i].ldy);
            if (r && !rc) rc = r;
        }
        return rc;
    }
    if (n == 0 || mm[0].a->n_tok <= 0 || row0[n] == 0) return 0;
    size_t work = 0, tok_cols = 0;
    int same = 1;
    for (int i = 0; i < n; i++) {
        act_prepare_for(mm[i].a, mm[i].w, pool); /* (nothing where w takes the exact kernels) */
        work += (size_t)mm[i].w->cols;
        tok_cols += (size_t)mm[i].w->cols * (size_t)mm[i].a->n_tok;
        same &= mm[i].a->n_tok == mm[0].a->n_tok;
    }
    /* per row, on average (the matrices' own token counts where they differ: several experts' rows) */
    work = same ? work / (size_t)n * (size_t)mm[0].a->n_tok : tok_cols / (size_t)n;
    size_t grain = mm_grain(work, mm[0].w, mm[0].a->n_tok);
    multi_job j = {ops, mm, n, row0};
    pool_for_any(pool, row0[n], grain, multi_part, &j);
    return 0;
}

/* kern_swiglu_multi's items: (expert i, SWIGLU_ROWS rows of its gate and up from r0); a multiple of 128, so the
 * slices of the down inputs' int8 form are whole q4 steps (kern_act_prepare_cols). */
#define SWIGLU_ROWS 128

/* At most this many experts a kern_swiglu_multi call (their first mid rows on the stack). */
#define SWIGLU_MAX 256

typedef struct {
    const kern_ops *ops;
    const kern_mm *g, *u;
    kern_act *mid;
    int inter, blocks;
    const int *row0; /* [n] expert i's first row of mid */
} swiglu_job;

static void swiglu_part(void *ctx, size_t begin, size_t end) {
    const swiglu_job *j = ctx;
    for (size_t it = begin; it < end; it++) {
        const int i = (int)(it / (size_t)j->blocks), r0 = (int)(it % (size_t)j->blocks) * SWIGLU_ROWS;
        const int r1 = r0 + SWIGLU_ROWS < j->inter ? r0 + SWIGLU_ROWS : j->inter;
        const kern_mm *m[2] = {&j->g[i], &j->u[i]};
        for (int k = 0; k < 2; k++) { /* the kernel multi_part would run on these rows */
            kern_act tmp;
            i8_kernel(j->ops, m[k]->w)(m[k]->w, act_view(m[k]->w, m[k]->a, &tmp), m[k]->y, m[k]->ldy, r0, r1);
        }
        const int T = j->g[i].a->n_tok; /* expert i's tokens */
        for (int t = 0; t < T; t++) {
            float *gy = j->g[i].y + (size_t)t * j->g[i].ldy + r0;
            j->ops->swiglu(gy, j->u[i].y + (size_t)t * j->u[i].ldy + r0, gy, r1 - r0);
            if (j->mid->int8) kern_act_prepare_cols(j->mid, j->row0[i] + t, r0, r1);
        }
    }
}

int kern_swiglu_multi(const kern_ops *ops, pool_t *pool, const kern_mm *g, const kern_mm *u, int n, kern_act *mid) {
    if (n < 1 || n > SWIGLU_MAX || !mid || mid->cols < 1) return SL_EUNSUPPORTED;
    const int inter = mid->cols;
    /* expert i's T_i tokens (its act, gate's and up's alike) are rows row0[i] .. + T_i of [sum T][inter], in
     * expert order: n experts of one token, rows i; one expert of T tokens, rows t; several experts' tokens */
    int row0[SWIGLU_MAX], rows = 0;
    for (int i = 0; i < n; i++) {
        const int T = g[i].a->n_tok;
        if (T < 1 || u[i].a != g[i].a) return SL_EUNSUPPORTED;
        row0[i] = rows;
        const kern_mm *m[2] = {&g[i], &u[i]};
        for (int k = 0; k < 2; k++)
            if (!m[k]->w->data || m[k]->w->rows != inter || !mm_use_i8(m[k]->w, m[k]->a) ||
                m[k]->y != (k ? u[0].y : g[0].y) + (size_t)rows * (size_t)inter ||
                (T > 1 && m[k]->ldy != (size_t)inter))
                return SL_EUNSUPPORTED;
        rows += T;
    }
    if (mid->n_tok != rows || mid->x != g[0].y || mid->ldx != (size_t)inter || (mid->int8 && inter % 32))
        return SL_EUNSUPPORTED;
    for (int i = 0; i < n; i++) {
        act_prepare_for(g[i].a, g[i].w, pool);
        act_prepare_for(g[i].a, u[i].w, pool);
    }
    const int blocks = (inter + SWIGLU_ROWS - 1) / SWIGLU_ROWS;
    swiglu_job j = {ops, g, u, mid, inter, blocks, row0};
    pool_for_any(pool, (size_t)n * (size_t)blocks, 1, swiglu_part, &j);
    mid->ready = mid->int8;
    return 0;
}

void kern_act_prepare_for(kern_act *a, const tn_mat *w, pool_t *pool) { act_prepare_for(a, w, pool); }

void kern_act_prepare_rows_for(kern_act *a, const tn_mat *w, int t0, int t1) {
    static const pool_fn part[FORM_COUNT] = {
        [FORM_HOUSE] = act_part, [FORM_K] = act_k_part, [FORM_0] = act_0_part, [FORM_R] = act_r_part};
    const act_form_id f = act_form(a, w);
    if (f != FORM_NONE && t1 > t0) part[f](a, (size_t)t0, (size_t)t1);
}

void kern_act_ready_for(kern_act *a, const tn_mat *w) {
    switch (act_form(a, w)) {
    case FORM_HOUSE: a->ready = 1; break;
    case FORM_K: a->ready_k = 1; break;
    case FORM_0: a->ready_0 = 1; break;
    case FORM_R: a->ready_r = 1; break;
    default: break;
    }
}

int kern_matmul_act(const kern_ops *ops, pool_t *pool, const tn_mat *w, kern_act *a, float *y, size_t ldy) {
    if (!w->data || !mm_use_i8(w, a)) return kern_matmul(ops, pool, w, a->x, a->ldx, y, ldy, a->n_tok);
    if (a->n_tok <= 0 || w->rows <= 0) return 0;
    act_prepare_for(a, w, pool);
    kern_act tmp;
    mmi8_job j = {i8_kernel(ops, w), w, act_view(w, a, &tmp), y, ldy};
    size_t work = (size_t)w->cols * (size_t)a->n_tok;
    pool_for_any(pool, (size_t)w->rows, mm_grain(work, w, a->n_tok), mmi8_part, &j);
    return 0;
}
