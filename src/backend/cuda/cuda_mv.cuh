/*
 * cuda_mv.cuh — device helpers of the one-token matvecs (cuda_mv.cu mv1_i8 .. mv1c_i8, cuda_mv1d.cu mv1d_i8): a row's
 * fold of one chunk in cuda.h's canonical order, and the down matvec's SwiGLU input made in the CTA. Only for
 * src/backend/cuda/.
 */
#ifndef SL_CUDA_MV_CUH
#define SL_CUDA_MV_CUH

#include "backend/cuda/cuda_i8.cuh"
#include "kernels/canon_exp.h"

/* %globaltimer in ns (the phase records of SLUICE_CUDA_MV1=6 and mv1p_i8's) */
static __device__ __forceinline__ unsigned long long gtimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

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

/* SLUICE_CUDA_MVFOLD=2 (cuda_mv.cu mv1c_body MF = 2): fold_chunk's operations in its order on operands staged row-major:
 * si, sm: the row's kcn I_b and s_g d_b at consecutive words, sb: its kcn >> G group biases, xg: the chunk's group
 * sums; si, sm, xg 16-byte aligned, sb 16 >> G. The blocks go by quads (4 blocks): a quad's operands are one LDS.128
 * of si and one of sm, and its 4 >> G groups of sb and of xg in one LDS.128 (G = 0), LDS.64 (1) or LDS (2), all
 * issued before the quad's FMAs; then the blocks past the last whole quad one by one. Per block:
 * acc = fma(I_b, M_b, acc), and at a group's first block accb = fma(bias_j, xg_j, accb): fold_chunk's operands in its
 * order (tools/cuda_mvfold_emu.c checks the mapping for every R, kcn and group). Loading quad q + 1 into a second slot
 * before quad q's FMAs (double-buffered) needs 32 words at G = 0 where the kernel's 40 registers
 * (__launch_bounds__(256, 6)) leave about 20 at the fold: ptxas sank the second slot's loads onto its FMAs (G = 0) or
 * spilled a slot to local memory (G = 1, 2), and a non-inlined fold spilled in its loop too (docs/CUDA.md "Fewer
 * instructions a pair"); unrolled by 2, ptxas may hoist the next quad's loads where registers allow. */
static __device__ __forceinline__ float f4at(const float4 &v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }
template <int G>
static __device__ __forceinline__ void fold_row_g(const float *si, const float *sm, const float *sb, const float *xg, int kcn,
                                                  float &acc, float &accb) {
    const int nq = kcn >> 2;
#pragma unroll 2
    for (int q = 0; q < nq; q++) {
        const float4 i = ((const float4 *)si)[q], m = ((const float4 *)sm)[q];
        float4 b = make_float4(0.f, 0.f, 0.f, 0.f), x = b;
        if (G == 0) b = ((const float4 *)sb)[q], x = ((const float4 *)xg)[q];
        if (G == 1) {
            const float2 b2 = ((const float2 *)sb)[q], x2 = ((const float2 *)xg)[q];
            b.x = b2.x, b.y = b2.y, x.x = x2.x, x.y = x2.y;
        }
        if (G == 2) b.x = sb[q], x.x = xg[q];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            acc = __fmaf_rn(f4at(i, k), f4at(m, k), acc);
            if (!(k & ((1 << G) - 1))) accb = __fmaf_rn(f4at(b, k >> G), f4at(x, k >> G), accb);
        }
    }
#pragma unroll 1
    for (int bl = nq << 2; bl < kcn; bl++) { /* at most 3 (G = 2: none, kcn being a multiple of 4) */
        acc = __fmaf_rn(si[bl], sm[bl], acc);
        if (!(bl & ((1 << G) - 1))) accb = __fmaf_rn(sb[bl >> G], xg[bl >> G], accb);
    }
}
static __device__ __forceinline__ void fold_row(const float *si, const float *sm, const float *sb, const float *xg, int kcn, int gshift,
                                                float &acc, float &accb) {
    if (gshift == 0) fold_row_g<0>(si, sm, sb, xg, kcn, acc, accb);
    else if (gshift == 1) fold_row_g<1>(si, sm, sb, xg, kcn, acc, accb);
    else fold_row_g<2>(si, sm, sb, xg, kcn, acc, accb);
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
