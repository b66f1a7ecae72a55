/*
 * canon_exp.h — one e^x that the host and the CUDA device compute bit for bit alike, for the routed experts'
 * SiLU (issue 25: an expert gives the same bits on the GPU and on the host's threads, docs/CUDA.md "The hybrid
 * step"). CUDA's expf goes through the MUFU.EX2 approximation and glibc's expf has its own tables: the two
 * differ by an ulp here and there, so neither can be the shared one. This one is Cephes' expf (range reduction
 * by ln 2 in two parts, a degree-6 polynomial, the scaling by 2^n in two exact steps), written as single IEEE
 * operations each rounded to nearest (mul, add, fma, rint, div), which C with -ffp-contract=off (the Makefile's)
 * and CUDA's __f*_rn intrinsics both evaluate exactly so. Within 2 ulp of e^x over the float range.
 *
 * Included by C (src/kernels/kernels_dev.c) and CUDA (src/backend/cuda/cuda_ops.cu, cuda_fused.cu) alike.
 */
#ifndef SL_CANON_EXP_H
#define SL_CANON_EXP_H

#ifdef __CUDACC__
#define CX_FN __device__ __forceinline__
#define CX_MUL(a, b) __fmul_rn((a), (b))
#define CX_ADD(a, b) __fadd_rn((a), (b))
#define CX_DIV(a, b) __fdiv_rn((a), (b))
#define CX_FMA(a, b, c) __fmaf_rn((a), (b), (c))
#define CX_BITS(u) __uint_as_float(u)
#else
#include <math.h>
#include <stdint.h>
#include <string.h>
#define CX_FN static inline
#define CX_MUL(a, b) ((a) * (b))
#define CX_ADD(a, b) ((a) + (b))
#define CX_DIV(a, b) ((a) / (b))
#define CX_FMA(a, b, c) fmaf((a), (b), (c))
static inline float cx_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
#define CX_BITS(u) cx_bits(u)
#endif

/* 2^n for n in [-126, 127], exactly. */
CX_FN float canon_pow2(int n) { return CX_BITS((unsigned)(n + 127) << 23); }

/* e^x: +inf above 88.72284, +0 below -103.97208 (the float's last subnormal), NaN for NaN. */
CX_FN float canon_expf(float x) {
    if (x != x) return x;
    if (x > 88.72284f) return CX_DIV(1.0f, 0.0f);
    if (x < -103.97208f) return 0.0f;
    const float n = rintf(CX_MUL(x, 1.44269504088896341f));
    float r = CX_FMA(n, -0.693359375f, x); /* ln 2 = 0.693359375 - 2.12194440e-4: n * the first part is exact */
    r = CX_FMA(n, 2.12194440e-4f, r);
    const float z = CX_MUL(r, r);
    float p = 1.9875691500e-4f;
    p = CX_FMA(p, r, 1.3981999507e-3f);
    p = CX_FMA(p, r, 8.3334519073e-3f);
    p = CX_FMA(p, r, 4.1665795894e-2f);
    p = CX_FMA(p, r, 1.6666665459e-1f);
    p = CX_FMA(p, r, 5.0000001201e-1f);
    p = CX_ADD(CX_FMA(p, z, r), 1.0f);
    const int ni = (int)n, n1 = ni / 2; /* two steps: each factor a normal power of two, n in [-150, 128] */
    return CX_MUL(CX_MUL(p, canon_pow2(n1)), canon_pow2(ni - n1));
}

/* x * sigmoid(x) as the CPU's kern_silu and CUDA's silu write it, x / (1 + e^-x), on canon_expf. */
CX_FN float canon_silu(float x) { return CX_DIV(x, CX_ADD(1.0f, canon_expf(-x))); }

#endif
