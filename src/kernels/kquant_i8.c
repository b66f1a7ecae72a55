/*
 * kquant_i8.c — the int8-activation matmul of the GGUF block types (quant/kquant.h), scalar: the oracle of the
 * SIMD ones (kquant_i8_<isa>.c) and the kernel of every table that has none.
 *
 * Canonical arithmetic (docs/QUANT.md "GGUF block types"), llama.cpp's vec_dot_q*_K_q8_K on its activations:
 * kern_act's q8_K form (qk, dk: one scale per 256 values, llama.cpp's rounding) for every type but IQ4_NL, Q5_0 and
 * Q5_1, whose vec_dot_type is q8_0 / q8_1 (kern_act's q0 / d0: per 32, d an f16), and sluice's q2, which reads the
 * rotated form (qr / dr, per 32); xd_b below is the scale of block of 32 b in that
 * form. Per output, 8 float lanes acc[] and accm[], zero; for each block of 32 columns b (global index, lane b % 8), in
 * order, with isum / msum the block's integer sums (kquant.h kq_sums: exact) and d / dmin its f16 scales:
 *   acc[b % 8]  = fma((float)isum_b, d * xd_b, acc[b % 8]);
 *   accm[b % 8] = fma((float)msum_b, dmin * xd_b, accm[b % 8]);
 * but for Q5_1, whose min is a float (kquant.h: dmin = -m), llama.cpp's m * s with the q8_1 block sum s (kern_act s1:
 * ggml-cpu arch/x86/quants.c ggml_vec_dot_q5_1_q8_1's summs):
 *   accm[b % 8] = fma(dmin, s1_b, accm[b % 8]);
 * y = lanes(acc) - lanes(accm), lanes(a) = ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)). A result depends only on its row
 * and token (kernels.h's determinism contract); a SIMD table computes the integer sums its own way and the float
 * part lane for lane as here, so it gives the same bits.
 */
#include "kernels/kernels.h"

#include <math.h>

#include "quant/kquant.h"

static float lanes8(const float *a) { return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])); }

/* rows [r0, r1) of w against every token of a, a block unpacked by `unpack` (kq_unpack or a SIMD one giving the same
 * integers) once per row and used for all tokens, the integer sums by `sums` (kq_sums or a SIMD one, likewise) */
void kern_kq_i8_rows(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1, kq_unpack_fn unpack,
                     kq_sums_fn sums) {
    const dt_type dt = w->dtype;
    const int cols = w->cols, blk = kq_blk(dt), nbk = blk / 32, nk = cols / blk, T = a->n_tok;
    const size_t rb = kq_row_bytes(dt, cols), bb = (size_t)kq_bytes(dt);
    const int8_t *aq = kq_act_q(a, dt);
    const float *ad = kq_act_d(a, dt);
    const size_t ns = (size_t)kern_act_ns(cols / 32); /* Q5_1: its min times s1 */
    enum { KTOK = 8 };
    for (int t0 = 0; t0 < T; t0 += KTOK) {
        const int nt = T - t0 < KTOK ? T - t0 : KTOK;
        for (int r = r0; r < r1; r++) {
            const uint8_t *row = (const uint8_t *)w->data + (size_t)r * rb;
            float acc[KTOK][8] = {{0}}, accm[KTOK][8] = {{0}};
            for (int k = 0; k < nk; k++) {
                kq_unpacked u;
                unpack(dt, row + (size_t)k * bb, &u);
                for (int t = 0; t < nt; t++) {
                    const size_t tt = (size_t)(t0 + t);
                    const int8_t *q = aq + tt * (size_t)cols + (size_t)k * (size_t)blk;
                    const float *xd = ad + tt * (size_t)(cols / 32) + (size_t)k * (size_t)nbk;
                    int32_t is[8], ms[8];
                    sums(&u, q, is, ms);
                    for (int b = 0; b < nbk; b++) {
                        const int l = (k * nbk + b) % 8;
                        acc[t][l] = fmaf((float)is[b], u.d * xd[b], acc[t][l]);
                        accm[t][l] = dt == DT_Q5_1 ? fmaf(u.dmin, a->s1[tt * ns + (size_t)(k * nbk + b)], accm[t][l])
                                                   : fmaf((float)ms[b], u.dmin * xd[b], accm[t][l]);
                    }
                }
            }
            for (int t = 0; t < nt; t++) y[(size_t)(t0 + t) * ldy + (size_t)r] = lanes8(acc[t]) - lanes8(accm[t]);
        }
    }
}

void kern_kq_i8(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    kern_kq_i8_rows(w, a, y, ldy, r0, r1, kq_unpack, kq_sums);
}
