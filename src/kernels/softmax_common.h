/*
 * softmax_common.h — the parts of the SIMD tables' softmax_rows (kernels.h) that do not depend on the instruction
 * set, for kernels_avx2.c, kernels_avx512.c and kernels_neon.c: the table their expf lanes read (glibc's
 * __exp2f_data.tab, sysdeps/ieee754/flt-32/e_exp2f_data.c, N = 32, as bits) and the rows' sums in double, each row in
 * increasing p as kern_softmax_row's, so the SIMD tables stay bitwise the oracle. Plain C, no intrinsics; included by
 * those three files only. Internal to src/kernels/.
 */
#ifndef SL_SOFTMAX_COMMON_H
#define SL_SOFTMAX_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* 2^(k/32), k = 0 .. 31, as the bits of doubles */
static const uint64_t exp2f_tab[32] = {
    0x3ff0000000000000ULL, 0x3fefd9b0d3158574ULL, 0x3fefb5586cf9890fULL, 0x3fef9301d0125b51ULL,
    0x3fef72b83c7d517bULL, 0x3fef54873168b9aaULL, 0x3fef387a6e756238ULL, 0x3fef1e9df51fdee1ULL,
    0x3fef06fe0a31b715ULL, 0x3feef1a7373aa9cbULL, 0x3feedea64c123422ULL, 0x3feece086061892dULL,
    0x3feebfdad5362a27ULL, 0x3feeb42b569d4f82ULL, 0x3feeab07dd485429ULL, 0x3feea47eb03a5585ULL,
    0x3feea09e667f3bcdULL, 0x3fee9f75e8ec5f74ULL, 0x3feea11473eb0187ULL, 0x3feea589994cce13ULL,
    0x3feeace5422aa0dbULL, 0x3feeb737b0cdc5e5ULL, 0x3feec49182a3f090ULL, 0x3feed503b23e255dULL,
    0x3feee89f995ad3adULL, 0x3feeff76f2fb5e47ULL, 0x3fef199bdd85529cULL, 0x3fef3720dcef9069ULL,
    0x3fef5818dcfba487ULL, 0x3fef7c97337b9b5fULL, 0x3fefa4afa2a490daULL, 0x3fefd0765b6e4540ULL};

/* sum[i] += row r0 + i's n values (row r at sc + r ld) in increasing p, i < m: with m == R (R <= 8, a constant where
 * it is inlined) the R rows side by side, so that R adds are in flight; each row's order is the same either way.
 * Cannot fail. */
static inline void softmax_sums(const float *sc, size_t ld, int r0, int m, int R, int n, double *sum) {
    const float *rw[8];
    for (int i = 0; i < R; i++) rw[i] = sc + (size_t)(r0 + (i < m ? i : 0)) * ld;
    if (m == R)
        for (int p = 0; p < n; p++) {
#pragma GCC unroll 8
            for (int i = 0; i < R; i++) sum[i] += rw[i][p];
        }
    else
        for (int i = 0; i < m; i++)
            for (int p = 0; p < n; p++) sum[i] += rw[i][p];
}

#endif
