/*
 * kernels_neon_dot.c — the int8-activation q8 / q4 kernels (kern_matmul_act) with Armv8.2's SDOT (vdotq_s32),
 * compiled with -march=armv8.2-a+dotprod (this file only); kernels_neon.c uses them when the CPU has it
 * (HWCAP_ASIMDDP). kernels.h's canonical arithmetic, so results equal the oracle bitwise: one SDOT gives 4 of an
 * output's 16 lanes as exact integers (q8: 16 codes, taken as code ^ 0x80 = code - 128, plus 128 x the lane's
 * activation sum, one SDOT with ones per token; q4: 32 columns, low nibbles with a->q4's even half, high with
 * its odd half), then convert and fma with scale x d (a vector's lanes share a block). The short last step, the
 * bias lanes and the final sums are the oracle's C. The loops are kernels_tile_i8.h's; this file gives its pieces.
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

/* A step's 16 lanes in four vectors of 4 (part v: q8 block c0/32 + v/2, q4 block c0/32 + v), the scale and the
 * block scale of a part one float each (their product broadcast). */
#define I8_KTOK 8
#define I8_PARTS 4
#define I8_ROWS_OUTER 0
typedef float32x4_t i8v;
typedef struct {
    int8x16_t lo, hi; /* q8: code ^ 0x80 (code - 128) twice; q4: low, high nibbles */
    float sc;         /* the row's scale for the part's block */
} i8w;
typedef struct {
    int8x16_t xe, xo; /* q8: the codes; q4: the even and the odd columns */
    int32x4_t base;   /* q8: 128 x each lane's sum of the codes */
    float d;          /* the block scale */
} i8x;
#include "kernels/kernels_tile_i8.h"

/* Row r's ng scales (or biases) as f32: exact conversions, as q_scale_at. */
static inline void i8_row_f32(const tn_mat *m, const void *p, int r, int ng, float *out) {
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

static inline void i8_prefetch(const void *p) { (void)p; }

static inline float32x4_t i8_zero(void) { return vdupq_n_f32(0.0f); }

static inline i8w i8_loadw(dt_type dt, const uint8_t *q, const float *sf, int c0, int v, int gsh) {
    const int b = c0 / 32 + (dt == DT_Q8 ? v / 2 : v);
    i8w w;
    if (dt == DT_Q8) {
        w.lo = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(q + c0 + 16 * v), vdupq_n_u8(0x80)));
        w.hi = w.lo;
    } else {
        const uint8x16_t c = vld1q_u8(q + c0 / 2 + 16 * v);
        w.lo = vreinterpretq_s8_u8(vandq_u8(c, vdupq_n_u8(15)));
        w.hi = vreinterpretq_s8_u8(vshrq_n_u8(c, 4));
    }
    w.sc = sf[b >> gsh];
    return w;
}

static inline i8x i8_loadx(dt_type dt, const int8_t *xq, const float *d, int c0, int v) {
    const int b = c0 / 32 + (dt == DT_Q8 ? v / 2 : v);
    i8x x;
    x.d = d[b];
    x.xe = vld1q_s8(xq + c0 + 16 * v);
    if (dt == DT_Q8) {
        x.xo = x.xe;
        x.base = vshlq_n_s32(vdotq_s32(vdupq_n_s32(0), x.xe, vdupq_n_s8(1)), 7);
    } else {
        x.xo = vld1q_s8(xq + c0 + 16 * v + 64);
        x.base = vdupq_n_s32(0);
    }
    return x;
}

static inline float32x4_t i8_fma(dt_type dt, i8w w, i8x x, float32x4_t acc) {
    const int32x4_t I = dt == DT_Q8 ? vdotq_s32(x.base, w.lo, x.xe)
                                    : vdotq_s32(vdotq_s32(vdupq_n_s32(0), w.lo, x.xe), w.hi, x.xo);
    return vfmaq_f32(acc, vcvtq_f32_s32(I), vdupq_n_f32(w.sc * x.d));
}

static inline void i8_store(const float32x4_t *acc, float *a16) {
    for (int v = 0; v < 4; v++) vst1q_f32(a16 + 4 * v, acc[v]);
}

/* A whole block's outputs one by one (the canonical C of kernels_tile_i8.h). */
static inline void i8_fin4(dt_type dt, const i8_blk *B, const tn_mat *w, const kern_act *a, int r, int t0, int nt,
                           float32x4_t (*acc)[I8_RB][I8_PARTS], float *y, size_t ldy) {
    i8_fin_rows(dt, B, w, a, r, I8_RB, t0, nt, B->cols, acc, y, ldy);
}

void kern_neon_dot_q8(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    i8_mm_DT_Q8(w, a, y, ldy, r0, r1);
}

void kern_neon_dot_q4(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    i8_mm_DT_Q4(w, a, y, ldy, r0, r1);
}

#else
typedef int kern_neon_dot_none; /* not an AArch64 build: kernels_neon.c has no table either */
#endif
