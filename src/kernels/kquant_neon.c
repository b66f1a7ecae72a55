/*
 * kquant_neon.c — the GGUF block types' int8-activation matmul for the NEON table: kquant_i8.c's loop (the oracle's
 * float order) with a block's integer sums by NEON widening multiplies (vmull_s8, pairwise adds), which are exact,
 * so the result is bitwise the oracle's. The grid i-quants (IQ2_XXS .. IQ1_M) and IQ4 are unpacked with NEON ops too
 * (kquant_iq_neon.h: the same integers as quant/kquant_iq.c's oracle); the other types by kq_unpack. Plain Armv8.0
 * NEON: both NEON tables (with and without the dot product) use it.
 */
#include "kernels/kernels.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#include "kernels/kquant_iq_neon.h"
#include "quant/kquant.h"

/* sum of v[i] * x[i] over 16 values, and sum of x[i] (exact in int32) */
static inline int32_t dot16(const int8_t *v, const int8_t *x, int32_t *sx) {
    int8x16_t a = vld1q_s8(v), b = vld1q_s8(x);
    int32x4_t s = vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    s = vpadalq_s16(s, vmull_high_s8(a, b));
    *sx = vaddlvq_s8(b);
    return vaddvq_s32(s);
}

static void sums_neon(const kq_unpacked *u, const int8_t *q, int32_t *isum, int32_t *msum) {
    for (int b = 0; b < u->n / 32; b++) {
        int32_t sx0, sx1, d0 = dot16(u->qv + 32 * b, q + 32 * b, &sx0), d1 = dot16(u->qv + 32 * b + 16, q + 32 * b + 16, &sx1);
        if (u->gs == 16) {
            isum[b] = u->sc[2 * b] * d0 + u->sc[2 * b + 1] * d1;
            msum[b] = u->mn[2 * b] * sx0 + u->mn[2 * b + 1] * sx1;
        } else {
            isum[b] = u->sc[b] * (d0 + d1);
            msum[b] = u->mn[b] * (sx0 + sx1);
        }
    }
}

void kern_kq_i8_neon(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    kern_kq_i8_rows(w, a, y, ldy, r0, r1, nq_unpack, sums_neon);
}
#else
void kern_kq_i8_neon(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    kern_kq_i8(w, a, y, ldy, r0, r1);
}
#endif
