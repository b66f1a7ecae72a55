/*
 * cuda_mv.cuh — device helpers of the one-token matvecs (cuda_mv.cu mv1_i8 .. mv1c_i8, cuda_mv1d.cu mv1d_i8): a row's
 * fold of one chunk in cuda.h's canonical order, and the down matvec's SwiGLU input made in the CTA. Only for
 * src/backend/cuda/.
 */
#ifndef SL_CUDA_MV_CUH
#define SL_CUDA_MV_CUH

#include "backend/cuda/cuda_i8.cuh"
#include "kernels/canon_exp.h"

/* A row's fold of one chunk: acc = fma(I_b, s_g d_b, acc) over its kcn blocks in order and, at each group's first
 * block, accb = fma(bias_j, xg_j, accb) over its groups in order (xg: the chunk's group sums of the activation, in
 * shared memory where the kernel staged them). The two chains are independent, so interleaving them changes no
 * operation and no order (the bits of the two loops one after the other), while their latencies overlap and the
 * group sums are no longer one dependent global load each. */
static __device__ __forceinline__ void fold_chunk(const float *si, const float *sm, const float *sb, int ld, const float *xg,
                                                  int kcn, int bmask, int gshift, float &acc, float &accb) {
#pragma unroll 8
    for (int bl = 0; bl < kcn; bl++) {
        acc = __fmaf_rn(si[bl * ld], sm[bl * ld], acc);
        if (!(bl & bmask)) accb = __fmaf_rn(sb[(bl >> gshift) * ld], xg[bl >> gshift], accb);
    }
}

/* A job's SwiGLU input made in the CTA (ijob sg, su; cuda.h slcu_act sg): blocks kb0 .. kb0 + kcn - 1 of
 * v = silu(g) * u and their int8 form by cuda_fused.cu k_swiglu_q's operations on the same floats (a warp a block,
 * lane = column): the codes into sx (q4's order for q4 matrices), the block scales into sd, the block sums into sbt
 * and then the chunk's group sums into sxg as k_swiglu_q's thread 0 adds pairs and quads. The same values the
 * matvec would load from slcu_swiglu_q's output. Every thread of the CTA (NTH of them) calls it; the group sums are
 * visible after the caller's next barrier. */
template <int DT, int NTH>
static __device__ void swi_stage(const ijob &j, int kb0, int kcn, int gshift, uint4 *sx, float *sd, float *sbt, float *sxg) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int8_t *xc = (int8_t *)sx;
    for (int bl = warp; bl < kcn; bl += NTH / 32) {
        const size_t c = (size_t)(kb0 + bl) * 32 + lane;
        const float v = __fmul_rn(canon_silu(__ldcg(j.sg + c)), __ldcg(j.su + c)); /* the step's: cuda_pdl.cuh */
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
        xc[bl * 32 + (DT == DT_Q4 ? (lane & ~7) + ((c8 & 1) ? 4 + (c8 >> 1) : (c8 >> 1)) : lane)] = (int8_t)qi;
        if (!lane) sd[bl] = db, sbt[bl] = __fmul_rn(db, (float)sum);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < (kcn >> gshift); i += NTH) {
        const float *s = sbt + (i << gshift);
        sxg[i] = gshift == 0 ? s[0] : gshift == 1 ? __fadd_rn(s[0], s[1]) : __fadd_rn(__fadd_rn(s[0], s[1]), __fadd_rn(s[2], s[3]));
    }
}

/* cuda_mv1p.cu (SLUICE_CUDA_MV1=7): rows a tile it picks for a launch (4 .. 32), and its launch of one token's jobs tiled
 * with those rows: 1, or 0 when it cannot take them (rows not 4 .. 32: mv1c_i8 runs them) */
int mv1p_tile_rows(const ijobs *J);
int mv1p_launch(int dt, int sdt, int rows, int tiles, const ijobs *J, int pdl);

#endif
