/*
 * cuda_quant.cuh — device helpers shared by the fused kernels (cuda_fused.cu) and the decode attention (cuda_ops.cu):
 * one row's int8 form made where its floats are computed, by cuda_i8.cu act_quant's operations (kern_act's
 * quantisation), so codes, scales and sums are bitwise a separate slcu_act_quantize's. Only for src/backend/cuda/.
 */
#ifndef SL_CUDA_QUANT_CUH
#define SL_CUDA_QUANT_CUH

#include "backend/cuda/cuda.h"

/* Column i (lane = i mod 32; the warp holds the whole block i / 32) of a one-row int8 form: cuda_i8.cu
 * act_quant's operations on v: the code, and from lane 0 the block's scale and sum (its copy in sbs[i / 32 - sb0]
 * when sbs: a CTA that holds blocks sb0 .. of the row, cuda_fused.cu k_add_norm_cl). */
static __device__ __forceinline__ void quant_lane(float v, int i, int lane, const slcu_act &a, float *sbs = nullptr,
                                                  int sb0 = 0) {
    float amax = fmaxf(0.0f, fabsf(v));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float db = __fdiv_rn(amax, 127.0f), id = db != 0.0f ? __fdiv_rn(1.0f, db) : 0.0f;
    const float rv = rintf(__fmul_rn(v, id));
    const int qi = rv >= 127.0f ? 127 : rv <= -127.0f ? -127 : rv == rv ? (int)rv : 0;
    int sum = qi;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const int c8 = lane & 7;
    a.q[i] = (int8_t)qi;
    a.q4[(i & ~7) + ((c8 & 1) ? 4 + (c8 >> 1) : (c8 >> 1))] = (int8_t)qi;
    if (!lane) {
        const float sb = __fmul_rn(db, (float)sum);
        a.d[i >> 5] = db, a.s[i >> 5] = sb;
        if (sbs) sbs[(i >> 5) - sb0] = sb; /* a copy in shared memory for quant_sums_sh */
    }
}

/* the pair and quad sums of blocks b0 .. b0 + nq - 1 (b0 a multiple of 4) of a one-row int8 form of nb blocks,
 * as act_quant's thread 0 adds them (pairs j < nq / 2, quads j < nq / 4); the block sums written and visible
 * (after a barrier) */
static __device__ __forceinline__ void quant_sums(const slcu_act &a, int nb, int b0, int nq, int tid, int nthreads) {
    for (int j = tid; j < nq / 2; j += nthreads) a.s[nb + b0 / 2 + j] = __fadd_rn(a.s[b0 + 2 * j], a.s[b0 + 2 * j + 1]);
    for (int j = tid; j < nq / 4; j += nthreads) {
        const float *s = a.s + b0 + 4 * j;
        a.s[nb + nb / 2 + b0 / 4 + j] = __fadd_rn(__fadd_rn(s[0], s[1]), __fadd_rn(s[2], s[3]));
    }
}

/* quant_sums of a whole row (b0 0) from the block sums' copy in shared memory (quant_lane's sbs, visible after a
 * barrier): the same additions of the same floats, without reading back what the row's warps just wrote. */
static __device__ __forceinline__ void quant_sums_sh(const slcu_act &a, int nb, const float *sbs, int tid, int nthreads) {
    for (int j = tid; j < nb / 2; j += nthreads) a.s[nb + j] = __fadd_rn(sbs[2 * j], sbs[2 * j + 1]);
    for (int j = tid; j < nb / 4; j += nthreads) {
        const float *s = sbs + 4 * j;
        a.s[nb + nb / 2 + j] = __fadd_rn(__fadd_rn(s[0], s[1]), __fadd_rn(s[2], s[3]));
    }
}

/* quant_sums_sh of the nq blocks b0 .. b0 + nq - 1 of a row of nb blocks (b0 and nq multiples of 4: whole quads),
 * their block sums in sbs[0 .. nq - 1]: the pairs and quads of those blocks, the same additions as quant_sums_sh's. */
static __device__ __forceinline__ void quant_sums_part(const slcu_act &a, int nb, int b0, int nq, const float *sbs, int tid,
                                                       int nthreads) {
    for (int j = tid; j < nq / 2; j += nthreads) a.s[nb + b0 / 2 + j] = __fadd_rn(sbs[2 * j], sbs[2 * j + 1]);
    for (int j = tid; j < nq / 4; j += nthreads) {
        const float *s = sbs + 4 * j;
        a.s[nb + nb / 2 + b0 / 4 + j] = __fadd_rn(__fadd_rn(s[0], s[1]), __fadd_rn(s[2], s[3]));
    }
}

#endif
