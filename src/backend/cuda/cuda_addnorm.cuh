/*
 * cuda_addnorm.cuh — one row's rmsnorm with its int8 form (norm_q_tail) and the residual step before it (add_norm_row)
 * as device functions over a CTA of NT threads, for src/backend/cuda/ only: cuda_fused.cu's k_rmsnorm_q and
 * k_add_norm_q, and cuda_mv.cu mv1c_an (SLUICE_CUDA_FUSE=o). No operation's order depends on NT (thread t < 256 sums
 * the squares of columns t, t + 256, ...; tree256; a warp a 32-column block), so every NT gives the same bits.
 */
#ifndef SL_CUDA_ADDNORM_CUH
#define SL_CUDA_ADDNORM_CUH

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_normrope.cuh"
#include "backend/cuda/cuda_quant.cuh"

#define AN_MAXK 16

static __device__ __forceinline__ float sigm(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x))); }

/* y = norm(xs) (xs: the row in shared memory) and, when a.q, its int8 form; every thread calls it. wv: this
 * thread's norm weights w[tid + NT c] (loaded before, so their latency hid under the row's). The block
 * sums are kept in shared memory (sbs) for the pair and quad sums, as act_quant's thread 0 adds them. */
template <int NT, int MAXD>
static __device__ void norm_q_tail(const float *xs, float *y, int n, const float *wv, float w_off, float eps,
                                   const slcu_act &a, double *part, float *sbs) {
    constexpr int PER = MAXD / NT;
    const int tid = threadIdx.x;
    if (tid < 256) {
        double ss = 0.0;
        for (int i = tid; i < n; i += 256) ss += (double)xs[i] * (double)xs[i];
        part[tid] = ss;
    }
    tree256(part);
    if (!tid) part[1] = (double)(float)(1.0 / sqrt(part[0] / (double)n + (double)eps)); /* once, not NT times in f64 */
    __syncthreads();
    const float inv = (float)part[1];
#pragma unroll
    for (int c = 0; c < PER; c++) { /* i / 32 = the block, the same in the whole warp */
        const int i = tid + c * NT;
        if (i >= n) break;
        const float v = __fmul_rn(__fmul_rn(xs[i], inv), __fadd_rn(w_off, wv[c]));
        y[i] = v;
        if (a.q) quant_lane(v, i, tid & 31, a, sbs);
    }
    if (!a.q) return;
    __syncthreads();
    quant_sums_sh(a, n / 32, sbs, tid, NT);
}

/* One token's residual step on a CTA of NT threads (every one calls it; MAXD / NT columns a thread, dim <= MAXD):
 * [cout = the MoE combine of one token (k_combine's order, its k <= AN_MAXK loads in flight first)]; x += y or cout
 * (k_add); then norm_q_tail (k_rmsnorm's operations, the int8 form when a.q). CG: y and cy are read past L1 (a fused
 * caller reads what other CTAs of its launch wrote). xs: shared [MAXD], sbs [MAXD / 32], part [256]. cuda_fused.cu k_add_norm_q
 * (1024 threads, 8192 columns) and cuda_mv.cu mv1c_an (the o matvec's last CTA: 256, 2048) run it, so the same bits. */
template <int NT, int MAXD, bool CG>
static __device__ __forceinline__ void add_norm_row(const slcu_addnorm &p, const slcu_act &a, double *part, float *xs, float *sbs) {
    constexpr int PER = MAXD / NT;
    const int n = p.dim;
    float wv[PER];
#pragma unroll
    for (int c = 0; c < PER; c++) { /* every load of the thread's columns first, then the sums */
        const int i = threadIdx.x + c * NT;
        wv[c] = i < n ? p.w[i] : 0.0f;
    }
    if (p.cy) {
        const float g = p.csh && p.csg ? sigm(p.csg[0]) : 1.0f;
        for (int c0 = 0; c0 < PER; c0 += 2) {
            float ys[2][AN_MAXK], xv[2], sh[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int i = threadIdx.x + (c0 + h) * NT, in = i < n;
#pragma unroll
                for (int s = 0; s < AN_MAXK; s++)
                    ys[h][s] = in && s < p.ck ? (CG ? __ldcg(p.cy + (size_t)s * n + i) : p.cy[(size_t)s * n + i]) : 0.0f;
                xv[h] = in ? p.x[i] : 0.0f;
                sh[h] = in && p.csh ? p.csh[i] : 0.0f;
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int i = threadIdx.x + (c0 + h) * NT;
                if (i >= n) break;
                float o = 0.0f;
#pragma unroll
                for (int s = 0; s < AN_MAXK; s++)
                    if (s < p.ck) o = __fadd_rn(o, __fmul_rn(p.cw[s], ys[h][s]));
                if (p.csh) o = __fadd_rn(o, __fmul_rn(g, sh[h]));
                p.cout[i] = o;
                const float v = __fadd_rn(xv[h], o);
                p.x[i] = v;
                xs[i] = v;
            }
            if (threadIdx.x + (c0 + 2) * NT >= n) break;
        }
    } else {
        float yv[PER], xv[PER];
#pragma unroll
        for (int c = 0; c < PER; c++) {
            const int i = threadIdx.x + c * NT;
            yv[c] = i < n ? (CG ? __ldcg(p.y + i) : p.y[i]) : 0.0f, xv[c] = i < n ? p.x[i] : 0.0f;
        }
#pragma unroll
        for (int c = 0; c < PER; c++) {
            const int i = threadIdx.x + c * NT;
            if (i >= n) break;
            const float v = __fadd_rn(xv[c], yv[c]);
            p.x[i] = v;
            xs[i] = v;
        }
    }
    __syncthreads();
    norm_q_tail<NT, MAXD>(xs, p.h, n, wv, p.w_off, p.eps, a, part, sbs);
}

/* mv1c_an's tail (cuda_i8.cuh mv_an_launch): slcu_add_norm_q's arguments and the launch's CTA counter; its y (or,
 * with the combine, cy's k rows) the launch's outputs */
struct an_tail {
    slcu_addnorm p;
    slcu_act a; /* a.q NULL: no int8 form */
    int *cnt;
};
#define AN_FUSE_MAXD 2048 /* mv1c_an's rows at most (its tail's row in the codes' shared memory) */

#endif
