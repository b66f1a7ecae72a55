/*
 * kquant_avx2.c — the GGUF block types' int8-activation matmul for the AVX2 table (kquant_x86.h, compiled with
 * -mavx2 -mfma); bitwise the oracle's (kquant_i8.c).
 */
#include "kernels/kernels.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include "kernels/kquant_x86.h"

void kern_kq_i8_avx2(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    kq_i8_x86(w, a, y, ldy, r0, r1);
}
#else
void kern_kq_i8_avx2(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    kern_kq_i8(w, a, y, ldy, r0, r1);
}
#endif
