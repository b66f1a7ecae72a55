/*
 * kernels_scalar.c — the portable C kernels (the oracle) and the threaded matmul driver.
 *
 * Matmul blocking: tokens in blocks of KTOK, rows in blocks of RB, columns in chunks of KCHUNK
 * converted to f32 once per (row block, chunk) and reused by every token of the block, so a weight
 * row is read from memory once per KTOK tokens. Each y[t][r] keeps 8 lane accumulators across all
 * chunks (lane = column % 8; KCHUNK is a multiple of 8), so its value depends only on the column
 * count: the blocking, n_tok and the row range never change the summation order (kernels.h).
 * Plain C written so that GCC's -O2 vectoriser can use it; no FMA contraction (ISO C mode).
 *
 * Quantized types are dequantised chunk by chunk into the same f32 buffer, so they share the f32
 * summation order exactly (the oracle for the SIMD variants).
 *
 * Sections: dtype loads, matmul, small vector kernels, the ops table, selection and kern_matmul().
 */
#include "kernels/kernels.h"
#include "kernels/kernels_plain.h"
#include "kernels/mxfp4.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "sluice.h"

#define LANES 8
#define KCHUNK 256
#define KTOK 32
#define RB 4

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
static inline __attribute__((always_inline)) const float *load_chunk(sl_dtype dt, const sl_mat *m, int r, int c0,
                                                                       int nc, float *buf) {
    const int cols = m->cols;
    size_t off = (size_t)r * (size_t)cols + (size_t)c0;
    if (dt == DT_F32) return (const float *)m->data + off;
    if (dt == DT_F16 || dt == DT_BF16) {
        const uint16_t *s = (const uint16_t *)m->data + off;
        /* a constant trip count for full chunks lets -O2's cheap vectoriser take the loop */
        if (dt == DT_F16) {
            if (nc == KCHUNK)
                for (int i = 0; i < KCHUNK; i++) buf[i] = h2f(s[i]);
            else
                for (int i = 0; i < nc; i++) buf[i] = h2f(s[i]);
        } else {
            if (nc == KCHUNK)
                for (int i = 0; i < KCHUNK; i++) buf[i] = b2f(s[i]);
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

/* ---- matmul ----------------------------------------------------------------------------------- */

/* acc[i][lane] += w_i[c] * x[c] for RB rows over n columns; the chunk starts at a multiple of 8. */
static inline void dot_rb(const float *const *wr, const float *x, int n, float (*acc)[LANES]) {
    float a0[LANES], a1[LANES], a2[LANES], a3[LANES];
    memcpy(a0, acc[0], sizeof a0);
    memcpy(a1, acc[1], sizeof a1);
    memcpy(a2, acc[2], sizeof a2);
    memcpy(a3, acc[3], sizeof a3);
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
    memcpy(acc[0], a0, sizeof a0);
    memcpy(acc[1], a1, sizeof a1);
    memcpy(acc[2], a2, sizeof a2);
    memcpy(acc[3], a3, sizeof a3);
}

static inline float lanes_sum(const float *a) {
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

static inline __attribute__((always_inline)) void mm_any(sl_dtype dt, const sl_mat *w, const float *x,
                                                           size_t ldx, float *y, size_t ldy, int n_tok, int r0,
                                                           int r1) {
    const int cols = w->cols;
    float buf[RB][KCHUNK];
    float acc[KTOK][RB][LANES];
    for (int t0 = 0; t0 < n_tok; t0 += KTOK) {
        int nt = n_tok - t0 < KTOK ? n_tok - t0 : KTOK;
        for (int r = r0; r < r1; r += RB) {
            int nr = r1 - r < RB ? r1 - r : RB;
            memset(acc, 0, sizeof acc[0] * (size_t)nt);
            for (int c0 = 0; c0 < cols; c0 += KCHUNK) {
                int nc = cols - c0 < KCHUNK ? cols - c0 : KCHUNK;
                const float *wr[RB];
                /* missing rows of a short block repeat row r; their sums are discarded */
                for (int i = 0; i < RB; i++) wr[i] = i < nr ? load_chunk(dt, w, r + i, c0, nc, buf[i]) : wr[0];
                for (int t = 0; t < nt; t++) dot_rb(wr, x + (size_t)(t0 + t) * ldx + c0, nc, acc[t]);
            }
            for (int t = 0; t < nt; t++)
                for (int i = 0; i < nr; i++) y[(size_t)(t0 + t) * ldy + (size_t)(r + i)] = lanes_sum(acc[t][i]);
        }
    }
}

static void mm_f32(const sl_mat *w, const float *x, size_t ldx, float *y, size_t ldy, int n_tok, int r0, int r1) {
    mm_any(DT_F32, w, x, ldx, y, ldy, n_tok, r0, r1);
}

static void mm_f16(const sl_mat *w, const float *x, size_t ldx, float *y, size_t ldy, int n_tok, int r0, int r1) {
    mm_any(DT_F16, w, x, ldx, y, ldy, n_tok, r0, r1);
}

static void mm_bf16(const sl_mat *w, const float *x, size_t ldx, float *y, size_t ldy, int n_tok, int r0, int r1) {
    mm_any(DT_BF16, w, x, ldx, y, ldy, n_tok, r0, r1);
}

static void mm_q8(const sl_mat *w, const float *x, size_t ldx, float *y, size_t ldy, int n_tok, int r0, int r1) {
    mm_any(DT_Q8, w, x, ldx, y, ldy, n_tok, r0, r1);
}

static void mm_q4(const sl_mat *w, const float *x, size_t ldx, float *y, size_t ldy, int n_tok, int r0, int r1) {
    mm_any(DT_Q4, w, x, ldx, y, ldy, n_tok, r0, r1);
}

static void mm_q3(const sl_mat *w, const float *x, size_t ldx, float *y, size_t ldy, int n_tok, int r0, int r1) {
    mm_any(DT_Q3, w, x, ldx, y, ldy, n_tok, r0, r1);
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

/* ---- table and driver ------------------------------------------------------------------------- */

static const kern_ops scalar_ops = {
    .name = "scalar",
    .matmul = {[DT_F32] = mm_f32, [DT_F16] = mm_f16, [DT_BF16] = mm_bf16, [DT_Q8] = mm_q8, [DT_Q4] = mm_q4,
               [DT_Q3] = mm_q3},
    .dot = dot_scalar,
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
    const sl_mat *w;
    const float *x;
    float *y;
    size_t ldx, ldy;
    int n_tok;
} mm_job;

static void mm_part(void *ctx, size_t begin, size_t end) {
    const mm_job *j = ctx;
    j->fn(j->w, j->x, j->ldx, j->y, j->ldy, j->n_tok, (int)begin, (int)end);
}

int kern_matmul(const kern_ops *ops, sl_pool *pool, const sl_mat *w, const float *x, size_t ldx, float *y,
                size_t ldy, int n_tok) {
    if (w->dtype == DT_MXFP4) return mxfp4_matmul(ops, pool, w, x, ldx, y, ldy, n_tok); /* kernels/mxfp4.c */
    if (!w->data || w->dtype <= DT_NONE || w->dtype >= DT_COUNT || !ops->matmul[w->dtype]) return SL_EINVAL;
    if (n_tok <= 0 || w->rows <= 0) return 0;
    mm_job j = {ops->matmul[w->dtype], w, x, y, ldx, ldy, n_tok};
    float *xr = NULL;
    if (w->dtype == DT_Q3) { /* rotate each token's x once; every row then dots with it */
        xr = malloc((size_t)n_tok * (size_t)w->cols * sizeof(float));
        if (!xr) return SL_ENOMEM;
        for (int t = 0; t < n_tok; t++)
            q3_rotate(x + (size_t)t * ldx, w->cols, w->group, w->seed, xr + (size_t)t * (size_t)w->cols);
        j.x = xr;
        j.ldx = (size_t)w->cols;
    }
    /* aim for at least ~64K multiply-adds per part so small matrices stay on one thread; keep the
     * grain a multiple of RB so row blocks are full */
    size_t work = (size_t)w->cols * (size_t)n_tok;
    size_t grain = work >= 65536 ? RB : (65536 / (work ? work : 1) + RB - 1) / RB * RB;
    sl_pool_for(pool, (size_t)w->rows, grain, mm_part, &j);
    free(xr);
    return 0;
}
