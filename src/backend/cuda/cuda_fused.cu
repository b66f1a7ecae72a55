/*
 * cuda_fused.cu — the one-row kernels of a decode step that make the row's int8 form where its floats are computed
 * (cuda.h slcu_rmsnorm_q, slcu_swiglu_q, slcu_add_norm_q): each does the separate kernels' operations in their
 * order (cuda_ops.cu k_rmsnorm, k_swiglu, k_combine; backend_cuda_rt.cu k_add) and cuda_i8.cu act_quant's on
 * the same floats (cuda_quant.cuh), so every output is bitwise what the separate launches give. Each kernel here
 * waits (pdl_wait) before its first global access and is launched by cuda_pdl.cuh pdl_launch.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_addnorm.cuh"
#include "backend/cuda/cuda_normrope.cuh"
#include "backend/cuda/cuda_quant.cuh"
#include "kernels/canon_exp.h"

static int bad(char *msg, size_t n, const char *what) {
    if (msg && n) snprintf(msg, n, "%s", what);
    return -1;
}
static int launched(char *msg, size_t n, const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return 0;
    if (msg && n) snprintf(msg, n, "%s: %s", what, cudaGetErrorString(e));
    return -1;
}


/* ---- one row's rmsnorm with its int8 form (kern_act's, as cuda_i8.cu act_quant makes it). A CTA of RN_THREADS
 * loads the row into shared memory (its loads in flight together); then k_rmsnorm's operations: thread t < 256
 * sums the squares of i = t, t + 256, ... in order (double), the same tree of 256; then every warp quantizes the
 * blocks it holds (lane = column) by act_quant's operations on the same floats: bitwise a separate norm and
 * quantisation. dim <= RN_MAXD. ---- */
#define RN_THREADS 1024
#define RN_MAXD 8192
#define RN_PER (RN_MAXD / RN_THREADS) /* columns a thread holds at most */

__global__ void __launch_bounds__(RN_THREADS) k_rmsnorm_q(const float *x, float *y, int n, const float *w, float w_off,
                                                          float eps, slcu_act a) {
    pdl_wait();
    pdl_trigger(); /* the matvec after it may start loading its weights (cuda_pdl.cuh) */
    __shared__ double part[256];
    __shared__ float xs[RN_MAXD], sbs[RN_MAXD / 32];
    float wv[RN_PER];
#pragma unroll
    for (int c = 0; c < RN_PER; c++) {
        const int i = threadIdx.x + c * RN_THREADS;
        wv[c] = i < n ? w[i] : 0.0f;
        if (i < n) xs[i] = x[i];
    }
    __syncthreads();
    norm_q_tail<RN_THREADS, RN_MAXD>(xs, y, n, wv, w_off, eps, a, part, sbs);
}

extern "C" int slcu_rmsnorm_q(const float *x, float *y, int dim, const float *w, float w_off, float eps, const slcu_act *a,
                              char *msg, size_t msglen) {
    if (dim <= 0 || dim % 32 || dim > RN_MAXD || a->n_tok != 1 || a->cols != dim)
        return bad(msg, msglen, "rmsnorm_q: one row of 32k columns, at most 8192");
    pdl_launch(k_rmsnorm_q, 1, RN_THREADS, 0, SLS, x, y, dim, w, w_off, eps, *a);
    return launched(msg, msglen, "rmsnorm launch");
}

/* SwiGLU of n_tok rows of I with the rows' int8 form (cuda_i8.cu act_quant's grid and operations on the same
 * floats: bitwise a separate slcu_swiglu then slcu_act_quantize); y may be g. */
__global__ void k_swiglu_q(const float *g, const float *u, float *y, int I, slcu_act a) {
    pdl_wait();
    pdl_trigger(); /* the matvec after it may start loading its weights (cuda_pdl.cuh) */
    const int t = blockIdx.y, nb = I / 32, ns = nb + nb / 2 + nb / 4, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.x * 4 + w;
    __shared__ float s32[4];
    if (b < nb) {
        const size_t c = (size_t)t * I + (size_t)b * 32;
        const float v = __fmul_rn(canon_silu(g[c + lane]), u[c + lane]); /* k_swiglu's (canon_exp.h) */
        y[c + lane] = v;
        float amax = fmaxf(0.0f, fabsf(v));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float db = __fdiv_rn(amax, 127.0f), id = db != 0.0f ? __fdiv_rn(1.0f, db) : 0.0f;
        const float rv = rintf(__fmul_rn(v, id));
        const int qi = rv >= 127.0f ? 127 : rv <= -127.0f ? -127 : rv == rv ? (int)rv : 0;
        int sum = qi;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        a.q[c + lane] = (int8_t)qi;
        const int c8 = lane & 7;
        a.q4[c + (lane & ~7) + ((c8 & 1) ? 4 + (c8 >> 1) : (c8 >> 1))] = (int8_t)qi;
        if (lane == 0) {
            const float sb = __fmul_rn(db, (float)sum);
            a.d[(size_t)t * nb + b] = db;
            a.s[(size_t)t * ns + b] = sb;
            s32[w] = sb;
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 0; i < 2; i++) {
            const int jj = 2 * blockIdx.x + i;
            if (jj < nb / 2) a.s[(size_t)t * ns + nb + jj] = __fadd_rn(s32[2 * i], s32[2 * i + 1]);
        }
        if ((int)blockIdx.x < nb / 4)
            a.s[(size_t)t * ns + nb + nb / 2 + blockIdx.x] = __fadd_rn(__fadd_rn(s32[0], s32[1]), __fadd_rn(s32[2], s32[3]));
    }
}

extern "C" int slcu_swiglu_q(const float *g, const float *u, float *y, const slcu_act *a, char *msg, size_t msglen) {
    if (a->cols <= 0 || a->cols % 32) return bad(msg, msglen, "swiglu_q: rows of a multiple of 32");
    if (a->n_tok <= 0) return 0;
    pdl_launch(k_swiglu_q, dim3((unsigned)((a->cols / 32 + 3) / 4), (unsigned)a->n_tok), 128, 0, SLS, g, u, y, a->cols, *a);
    return launched(msg, msglen, "swiglu launch");
}


/* One CTA of RN_THREADS: cuda_addnorm.cuh add_norm_row (the combine, k_add's add, k_rmsnorm's norm and the int8 form) */
__global__ void __launch_bounds__(RN_THREADS) k_add_norm_q(const slcu_addnorm p, slcu_act a) {
    pdl_wait();
    pdl_trigger(); /* the matvec after it may start loading its weights (cuda_pdl.cuh) */
    __shared__ double part[256];
    __shared__ float xs[RN_MAXD], sbs[RN_MAXD / 32];
    add_norm_row<RN_THREADS, RN_MAXD, false>(p, a, part, xs, sbs);
}

extern "C" int slcu_add_norm_q(const slcu_addnorm *p, const slcu_act *a, char *msg, size_t msglen) {
    if (p->dim <= 0 || p->dim > RN_MAXD || (p->cy && p->ck > AN_MAXK) || (a && (p->dim % 32 || a->n_tok != 1 || a->cols != p->dim)))
        return bad(msg, msglen, "add_norm_q: one row of at most 8192 (a multiple of 32 for its int8 form), 16 experts");
    slcu_act none = {};
    pdl_launch(k_add_norm_q, 1, RN_THREADS, 0, SLS, *p, a ? *a : none);
    return launched(msg, msglen, "add + rmsnorm launch");
}

/* ---- per-head norm then RoPE of one token (slcu_norm_rope): a CTA of 256 per head (cuda_normrope.cuh) ---- */
__global__ void __launch_bounds__(256) k_norm_rope(const __grid_constant__ nr_args A, const int *pd) {
    pdl_wait();
    __shared__ double part[256];
    __shared__ float v0[1024];
    const int part_i = (int)blockIdx.x >= A.n0, h = (int)blockIdx.x - (part_i ? A.n0 : 0);
    norm_rope_head(A, A.p[part_i], h, pd ? *pd : A.pos, part, v0);
}

extern "C" int slcu_norm_rope(const slcu_normrope *p, int n_parts, int rot, const float *inv_freq, float attn_factor, int pos,
                              char *msg, size_t msglen) {
    if (n_parts < 1 || n_parts > 2 || rot < 0 || rot % 2 || rot > 1024) return bad(msg, msglen, "norm_rope: 1 or 2 parts, rot even <= 1024");
    nr_args A;
    int heads = 0;
    for (int i = 0; i < n_parts; i++) {
        if (p[i].dim <= 0 || p[i].dim < rot || p[i].n_heads <= 0) return bad(msg, msglen, "norm_rope: rot past the head");
        A.p[i] = p[i];
        heads += p[i].n_heads;
    }
    if (n_parts == 1) A.p[1] = p[0];
    A.n0 = p[0].n_heads, A.half = rot / 2, A.af = attn_factor, A.pos = pos;
    memcpy(A.f, inv_freq, (size_t)rot / 2 * sizeof(float));
    pdl_launch(k_norm_rope, heads, 256, 0, SLS, A, slcu_step_pos());
    return launched(msg, msglen, "norm + rope launch");
}
