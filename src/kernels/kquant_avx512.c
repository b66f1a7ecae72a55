/*
 * kquant_avx512.c — the GGUF block types' int8-activation matmul for the AVX-512 table: kquant_x86.h's kernel
 * compiled with the table's flags (the 256-bit integer dots in EVEX form); bitwise the oracle's (kquant_i8.c).
 */
#include "kernels/kernels.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include "kernels/kquant_x86.h"

void kern_kq_i8_avx512(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    kq_i8_x86(w, a, y, ldy, r0, r1);
}
#else
void kern_kq_i8_avx512(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    kern_kq_i8(w, a, y, ldy, r0, r1);
}
#endif
