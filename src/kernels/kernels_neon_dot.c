/*
 * kernels_neon_dot.c — the int8-activation q8 / q4 kernels (kern_matmul_act) with Armv8.2's SDOT (vdotq_s32),
 * compiled with -march=armv8.2-a+dotprod (this file only); kernels_neon.c uses them when the CPU has it
 * (HWCAP_ASIMDDP). kernels.h's canonical arithmetic, so results equal the oracle bitwise: one SDOT gives 4 of an
 * output's 16 lanes as exact integers (q8: 16 codes, taken as code ^ 0x80 = code - 128, plus 128 x the lane's
 * activation sum, one SDOT with ones per token; q4: 32 columns, low nibbles with a->q4's even half, high with
 * its odd half), then convert and fma with scale x d (a vector's lanes share a block). The short last step, the
 * bias lanes and the final sums are the oracle's C. Rows in blocks of RB, tokens in blocks of KT.
 */
#include "kernels/kernels.h"
#include "kernels/kernels_plain.h"

#if defined(__aarch64__)
#ifndef __ARM_FEATURE_DOTPROD
#error "kernels_neon_dot.c needs -march=armv8.2-a+dotprod (the Makefile sets it for this file)"
#endif
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "quant/quant.h"

#define RB 4
#define KT 8
#define MAXG 2048 /* groups per row held on the stack; kern_matmul_act uses the oracle past it */

/* Row r's ng scales (or biases) as f32: exact conversions, as q_scale_at. */
static void row_f32(const sl_mat *m, const void *p, int r, int ng, float *out) {
    const size_t o = (size_t)r * (size_t)ng;
    if (m->sdtype == DT_F32) {
        memcpy(out, (const float *)p + o, (size_t)ng * sizeof(float));
        return;
    }
    const uint16_t *h = (const uint16_t *)p + o;
    int j = 0;
    for (; j + 4 <= ng; j += 4) {
        uint16x4_t v = vld1_u16(h + j);
        vst1q_f32(out + j, m->sdtype == DT_BF16 ? vreinterpretq_f32_u32(vshll_n_u16(v, 16))
                                                : vcvt_f32_f16(vreinterpret_f16_u16(v)));
    }
    for (; j < ng; j++) out[j] = q_scale_at(p, m->sdtype, o + (size_t)j);
}

static inline float lanes8(const float *a) { return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])); }

/* Output (row codes q, token tt) from its 16 lanes acc: the short step from c0, the bias lanes, the sum. */
static float finish(sl_dtype dt, const sl_mat *w, const kern_act *a, const uint8_t *q, const float *sf,
                    const float *bi, size_t tt, int c0, float *acc) {
    const int cols = w->cols, g = w->group, ng = cols / g, nb = cols / 32, ns = nb + nb / 2 + nb / 4;
    plain_i8_tail(dt, q, sf, g, a->q + tt * (size_t)cols, a->d + tt * (size_t)nb, c0, cols, acc);
    const float *xs = a->s + tt * (size_t)ns + (g == 32 ? 0 : g == 64 ? nb : nb + nb / 2);
    float accb[8] = {0}, h[8];
    for (int j = 0; j < ng; j++) accb[j % 8] = fmaf(bi[j], xs[j], accb[j % 8]);
    for (int i = 0; i < 8; i++) h[i] = acc[i] + acc[i + 8];
    return lanes8(h) + lanes8(accb);
}

/* Rows [r, r+nr) x tokens [t0, t0+nt), nr <= RB, nt <= KT. */
static inline __attribute__((always_inline)) void dot_block(sl_dtype dt, const sl_mat *w, const kern_act *a, float *y,
                                                              size_t ldy, int r, int nr, int t0, int nt) {
    const int cols = w->cols, g = w->group, ng = cols / g, nb = cols / 32, step = dt == DT_Q8 ? 64 : 128;
    const int gsh = g == 32 ? 0 : g == 64 ? 1 : 2; /* block b belongs to group b >> gsh */
    const uint8_t *qr[RB];
    float sf[RB][MAXG];
    for (int i = 0; i < RB; i++) {
        int ri = r + (i < nr ? i : 0); /* missing rows of a short block repeat row r; discarded */
        qr[i] = (const uint8_t *)w->data + (size_t)ri * (size_t)cols / (dt == DT_Q4 ? 2 : 1);
        if (i < nr) row_f32(w, w->scales, ri, ng, sf[i]);
    }
    float32x4_t acc[KT][RB][4];
    for (int t = 0; t < nt; t++)
        for (int i = 0; i < RB; i++)
            for (int v = 0; v < 4; v++) acc[t][i][v] = vdupq_n_f32(0.0f);
    const int8x16_t ones = vdupq_n_s8(1);
    const int32x4_t z = vdupq_n_s32(0);
    int c0 = 0;
    for (; c0 + step <= cols; c0 += step) {
        for (int v = 0; v < 4; v++) {
            const int b = c0 / 32 + (dt == DT_Q8 ? v / 2 : v); /* the block of this vector's 4 lanes */
            int8x16_t lo[RB], hi[RB];
            float sc[RB];
            for (int i = 0; i < RB; i++) {
                if (dt == DT_Q8) {
                    lo[i] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(qr[i] + c0 + 16 * v), vdupq_n_u8(0x80)));
                    hi[i] = lo[i];
                } else {
                    uint8x16_t c = vld1q_u8(qr[i] + c0 / 2 + 16 * v);
                    lo[i] = vreinterpretq_s8_u8(vandq_u8(c, vdupq_n_u8(15)));
                    hi[i] = vreinterpretq_s8_u8(vshrq_n_u8(c, 4));
                }
                sc[i] = i < nr ? sf[i][b >> gsh] : 0.0f;
            }
            for (int t = 0; t < nt; t++) {
                const size_t tt = (size_t)(t0 + t);
                const float d = a->d[tt * (size_t)nb + (size_t)b];
                if (dt == DT_Q8) {
                    int8x16_t xv = vld1q_s8(a->q + tt * (size_t)cols + (size_t)(c0 + 16 * v));
                    int32x4_t base = vshlq_n_s32(vdotq_s32(z, xv, ones), 7); /* 128 x sum of the lane's x */
                    for (int i = 0; i < RB; i++)
                        acc[t][i][v] = vfmaq_f32(acc[t][i][v], vcvtq_f32_s32(vdotq_s32(base, lo[i], xv)),
                                                 vdupq_n_f32(sc[i] * d));
                } else {
                    const int8_t *xq = a->q4 + tt * (size_t)cols + (size_t)(c0 + 16 * v);
                    int8x16_t xe = vld1q_s8(xq), xo = vld1q_s8(xq + 64);
                    for (int i = 0; i < RB; i++)
                        acc[t][i][v] = vfmaq_f32(acc[t][i][v], vcvtq_f32_s32(vdotq_s32(vdotq_s32(z, lo[i], xe), hi[i], xo)),
                                                 vdupq_n_f32(sc[i] * d));
                }
            }
        }
    }
    for (int i = 0; i < nr; i++) {
        float bi[MAXG], a16[16];
        row_f32(w, w->biases, r + i, ng, bi);
        for (int t = 0; t < nt; t++) {
            const size_t tt = (size_t)(t0 + t);
            for (int v = 0; v < 4; v++) vst1q_f32(a16 + 4 * v, acc[t][i][v]);
            y[tt * ldy + (size_t)(r + i)] = finish(dt, w, a, qr[i], sf[i], bi, tt, c0, a16);
        }
    }
}

static inline __attribute__((always_inline)) void dot_mm(sl_dtype dt, const sl_mat *w, const kern_act *a, float *y,
                                                           size_t ldy, int r0, int r1) {
    for (int t0 = 0; t0 < a->n_tok; t0 += KT) {
        int nt = a->n_tok - t0 < KT ? a->n_tok - t0 : KT;
        for (int r = r0; r < r1; r += RB) {
            int nr = r1 - r < RB ? r1 - r : RB;
            if (nt == 1) dot_block(dt, w, a, y, ldy, r, nr, t0, 1); /* decode: accumulators in registers */
            else dot_block(dt, w, a, y, ldy, r, nr, t0, nt);
        }
    }
}

void kern_neon_dot_q8(const sl_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    dot_mm(DT_Q8, w, a, y, ldy, r0, r1);
}

void kern_neon_dot_q4(const sl_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    dot_mm(DT_Q4, w, a, y, ldy, r0, r1);
}

#else
typedef int kern_neon_dot_none; /* not an AArch64 build: kernels_neon.c has no table either */
#endif
