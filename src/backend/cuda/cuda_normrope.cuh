/*
 * cuda_normrope.cuh — one token's per-head rmsnorm then RoPE (slcu_norm_rope) as a device function on a CTA of 256,
 * for src/backend/cuda/ only: cuda_fused.cu k_norm_rope (a CTA a head) and cuda_mv.cu mv1c_nr (the q/k/v matvec whose
 * last CTA of a head's rows does that head, SLUICE_CUDA_FUSE=qkv) run the same code on the same rows, so the same
 * bits. tree256 is k_rmsnorm's sum tree (cuda_fused.cu's norms too).
 */
#ifndef SL_CUDA_NORMROPE_CUH
#define SL_CUDA_NORMROPE_CUH

#include "backend/cuda/cuda.h"

/* k_rmsnorm's tree of 256 partials, part[t] += part[t + o] for o = 128 .. 1, with one barrier: lane t of warp 0
 * adds the eight partials of the first three levels in the tree's own pairing, then the last five levels by
 * shuffles (lane t gets lane t + o's value: the same additions of the same doubles). part[0] the sum, visible
 * to every thread after the barrier. */
static __device__ void tree256(double *part) {
    __syncthreads();
    const int t = threadIdx.x;
    if (t < 32) {
        const double *p = part;
        double v = __dadd_rn(__dadd_rn(__dadd_rn(p[t], p[t + 128]), __dadd_rn(p[t + 64], p[t + 192])),
                             __dadd_rn(__dadd_rn(p[t + 32], p[t + 160]), __dadd_rn(p[t + 96], p[t + 224])));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = __dadd_rn(v, __shfl_down_sync(0xffffffffu, v, o));
        if (!t) part[0] = v;
    }
    __syncthreads();
}

/* slcu_norm_rope's launch: up to two parts (q's heads, then k's), RoPE's half, attention factor, position, and the
 * inverse frequencies (half of them) */
struct nr_args {
    slcu_normrope p[2];
    int n0; /* heads of part 0 */
    int half;
    float af;
    int pos;
    float f[512];
};

/* mv1c_nr's tail (cuda_i8.cuh mv_nr_launch) */
struct nr_tail {
    nr_args A;
    const int *pd; /* the recorded step's position, or NULL: A.pos */
    int *cnt;      /* [A.n0 + part 1's heads] rows counted a head, zero between launches */
    int job[2];    /* the job whose y is part i's x, -1: none */
};

/* Head h of part p on the CTA's 256 threads (every one calls it): k_rmsnorm's sum and tree, the normed head kept in
 * shared memory (v0 [1024]) for k_rope's operations at pos. The head's x is read past L1 (a fused caller reads rows
 * other CTAs of its launch wrote); y may be x. part: shared [256]. */
static __device__ __forceinline__ void norm_rope_head(const nr_args &A, const slcu_normrope &p, int h, int pos, double *part, float *v0) {
    const int tid = threadIdx.x;
    const float *xr = p.x + (size_t)h * p.hs;
    float *yr = p.y + (size_t)h * p.hs;
    const int n = p.dim, half = A.half;
    double ss = 0.0;
    for (int i = tid; i < n; i += 256) ss += (double)__ldcg(xr + i) * (double)__ldcg(xr + i);
    part[tid] = ss;
    tree256(part);
    if (!tid) part[1] = (double)(float)(1.0 / sqrt(part[0] / (double)n + (double)p.eps)); /* once a CTA, in f64 */
    __syncthreads();
    const float inv = (float)part[1];
    for (int i = tid; i < n; i += 256) {
        const float v = __fmul_rn(__fmul_rn(__ldcg(xr + i), inv), __fadd_rn(p.w_off, p.w[i]));
        if (i < 2 * half) v0[i] = v;
        else yr[i] = v;
    }
    __syncthreads();
    for (int i = tid; i < half; i += 256) {
        const float ang = __fmul_rn((float)pos, A.f[i]);
        const float c = __fmul_rn(cosf(ang), A.af), s = __fmul_rn(sinf(ang), A.af);
        const float a = v0[i], b = v0[i + half];
        yr[i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
        yr[i + half] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
    }
}

#endif
