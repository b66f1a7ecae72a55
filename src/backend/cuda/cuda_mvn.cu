/*
 * cuda_mvn.cu — a decode batch's routed experts grouped by expert on the device (cuda_mvn.h; issue 24 "serve --gpu";
 * docs/CUDA.md "A decode batch's experts grouped by expert"; SLUICE_CUDA_MOEG=1, off by default).
 *
 * A decode step of n <= 8 streams routes n k (token, slot) pairs. slcu_moe_ffn (cuda_i8.cu) runs them as the prefill's
 * grouped GEMM (gemm_seg: 128 x 32 tiles with 1-8 tokens in them, 6 CTAs an expert for gate/up, so a batch whose tokens
 * chose 8 experts is 96 CTAs on 132 SMs) or as one-token matvec jobs a pair (SLUICE_CUDA_MOEN: every pair reads its
 * expert again). Here:
 *
 * - k_moeg_gu, grid (I / 32, min(n k, E)): CTA (x, d) finds the d-th chosen expert e (in increasing id; mg_group: a
 *   bitmap of the chosen experts, a scan of its words' bit counts, its pairs in pair order) and its c <= n pairs; it
 *   reads rows 32 x .. 32 x + 31 of e's gate and of its up once (cp.async into shared memory, 512 bytes a row a
 *   chunk) for all c tokens; thread (row, token) folds its row for its token in cuda.h's canonical order (per block b:
 *   acc = fma((float) I_b, s_g d_b, acc); per group at its first block accb = fma(bias_j, xg_j, accb); y = acc + accb:
 *   cuda_mv.cu mv1c_i8's operations on the same values); then warp i makes pair i's 32 mid columns silu(g) u and their
 *   int8 block (codes, scale, s32) with cuda_i8.cu act_quant_rows<true>'s operations. CTA (0, d) records e and its
 *   pairs for the down launch.
 * - k_moeg_dn, grid (H / 64, min(n k, E)): CTA (x, d) reads 64 rows of e's down once for its c pairs' mid rows, whose
 *   group sums (s64 / s128) it adds from the s32 words as act_quant does; writes y's cells t k + s.
 *
 * So each (token, slot) row has the one-token kernel's bits (test_cuda --serve8 checks every row against the grouped
 * GEMM, and the layer's output), a token's row is the same alone and in any batch, and the step reads each chosen
 * expert once: h's quantisation, two launches and the combine where the GEMM path makes five launches between the route
 * and the combine. Both kernels go through cuda_pdl.cuh pdl_launch and wait before any global access (the route's
 * choice, h's int8 form and the group table are the step's words: read by __ldcg or cp.async after pdl_wait).
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_i8.cuh"
#include "backend/cuda/cuda_mvn.h"
#include "backend/cuda/cuda_quant.cuh"
#include "backend/cuda/cuda_route.cuh"
#include "kernels/canon_exp.h"

#define MG_NR 64                 /* matrix rows a CTA (gate/up: 32 of each) */
#define MG_NTH 256               /* threads a CTA: thread (row tid % 64, tokens tid / 64 and tid / 64 + 4) */
#define MG_MAXT SLCU_MOEG_MAXN   /* tokens an expert */
#define MG_MAXP 256              /* pairs a call (n k) */
#define MG_GS 33                 /* scale words a staged row (up to 32 groups a chunk; odd: no bank conflicts) */
#define MG_GW (2 + MG_MAXT)      /* ints a group-table entry: expert, pairs, the pairs */
#define MG_ROWB 512              /* code bytes of a row a chunk: 32 q4 blocks or 16 q8 blocks */
#define MG_RSTR (MG_ROWB + 16)   /* a staged row's stride: 8 rows' 16-byte loads hit 8 distinct bank quads */

static int fail(char *msg, size_t n, const char *what, cudaError_t e) {
    if (msg && n) snprintf(msg, n, "%s: %s", what, cudaGetErrorString(e));
    return -1;
}
static size_t rnd256(size_t n) { return (n + 255) / 256 * 256; }

/* dynamic shared bytes of a CTA of nr rows: codes [nr][RSTR], scale words [nr][GS] (and bias words unless IB),
 * activation codes [8][32 blocks][32 bytes], block scales, group sums, block sums [8][32] each */
static size_t mg_smem(int nr, int ib) {
    return (size_t)nr * MG_RSTR + (size_t)nr * MG_GS * 4 * (ib ? 1 : 2) + MG_MAXT * 1024 + 3 * MG_MAXT * 32 * 4;
}

/* One matrix's rows for a CTA: codes, scale and bias words of the matrix, its first row */
struct mg_mat {
    const uint8_t *codes;
    const void *scales, *biases;
    int row0;
};

/* The d-th chosen expert of top_e [nk] (in increasing id; experts outside [0, E) skipped) into su[0], its pair count
 * into su[1] and its pairs in increasing order into su[2 ..]; returns how many experts were chosen (d >= that: su not
 * written). Every thread calls it; scratch: MG_MAXP ints of shared memory. */
static __device__ int mg_group(const int *top_e, int nk, int E, int d, int *su, int *se) {
    __shared__ unsigned bm[32];
    __shared__ int wc[MG_MAXP / 32], sD, sE;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    if (tid < 32) bm[tid] = 0;
    __syncthreads();
    for (int i = tid; i < nk; i += MG_NTH) {
        const int e = __ldcg(top_e + i); /* the route's words */
        se[i] = e;
        if ((unsigned)e < (unsigned)E) atomicOr(&bm[e >> 5], 1u << (e & 31));
    }
    __syncthreads();
    if (w == 0) { /* lane l: experts 32 l .. 32 l + 31; the chosen before them by a scan of the words' counts */
        const unsigned b = bm[lane];
        const int cnt = __popc(b);
        int inc = cnt;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int v = __shfl_up_sync(0xffffffffu, inc, o);
            if (lane >= o) inc += v;
        }
        if (lane == 31) sD = inc;
        if (d >= inc - cnt && d < inc) {
            unsigned bb = b;
            for (int q = inc - cnt; q < d; q++) bb &= bb - 1; /* drop the lower chosen ones */
            sE = lane * 32 + __ffs((int)bb) - 1;
        }
    }
    __syncthreads();
    const int D = sD;
    if (d >= D) return D;
    const int e = sE, nw = (nk + 31) / 32;
    unsigned bal = 0;
    if (w < nw) {
        bal = __ballot_sync(0xffffffffu, w * 32 + lane < nk && se[w * 32 + lane] == e);
        if (!lane) wc[w] = __popc(bal);
    }
    __syncthreads();
    if (w < nw && ((bal >> lane) & 1)) {
        int pos = __popc(bal & ((1u << lane) - 1));
        for (int x = 0; x < w; x++) pos += wc[x];
        if (pos < MG_MAXT) su[2 + pos] = w * 32 + lane;
    }
    if (tid == 0) {
        int c = 0;
        for (int x = 0; x < nw; x++) c += wc[x];
        su[0] = e, su[1] = c < MG_MAXT ? c : MG_MAXT; /* (at most n <= 8: a token's experts are distinct) */
    }
    __syncthreads();
    return D;
}

/* Rows r < split of m0 (its rows m0.row0 + r) and r >= split of m1 (m1.row0 + r - split) of the CTA's NR (16 or 64),
 * the first nr valid, of cols columns in groups of group, times the c activation rows ar[] of (xq, xd, xs): xs + soff
 * the group sums, or with S32 the block sums s32 from which the group sums are added here (act_quant's s64 / s128
 * operations). out[h]: the output of the thread's row tid % NR for token tid / NR + h 256 / NR (when below c; h = 1
 * only for NR 64). sm: mg_smem(NR, IB) bytes of dynamic shared memory. */
template <int NR, int DT, int SDT, int IB, bool S32>
static __device__ void mg_rows(const mg_mat &m0, const mg_mat &m1, int split, int nr, int cols, int group, const int8_t *xq,
                               const float *xd, const float *xs, int soff, const int *ar, int c, uint8_t *sm, float out[2]) {
    constexpr int BB = DT == DT_Q4 ? 16 : 32, KC = MG_ROWB / BB, ssz = SDT == DT_F32 ? 4 : 2, TG = MG_NTH / NR;
    static_assert(NR == 16 || NR == 64, "a thread's tokens: tid / NR, and + 4 for NR 64");
    uint8_t *scode = sm;
    unsigned *ssw = (unsigned *)(sm + NR * MG_RSTR), *sbw = ssw + NR * MG_GS;
    uint4 *sx = (uint4 *)(sm + NR * MG_RSTR + NR * MG_GS * 4 * (IB ? 1 : 2));
    float *sd = (float *)(sx + MG_MAXT * 64), *sxg = sd + MG_MAXT * 32, *ss32 = sxg + MG_MAXT * 32;
    const int tid = threadIdx.x, nb = cols / 32, ng = cols / group, ns = nb + nb / 2 + nb / 4;
    const int gshift = group == 32 ? 0 : group == 64 ? 1 : 2, bmask = group / 32 - 1, rb = DT == DT_Q4 ? cols / 2 : cols;
    const int r = tid % NR, i0 = tid / NR, row = r < split ? m0.row0 + r : m1.row0 + r - split;
    const void *rsc = r < split ? m0.scales : m1.scales, *rbi = r < split ? m0.biases : m1.biases; /* (no references: */
    /* a reference to m0 or m1 put both on the stack) */
    float acc[2] = {0.f, 0.f}, accb[2] = {0.f, 0.f};
    for (int kb0 = 0; kb0 < nb; kb0 += KC) {
        const int kcn = min(KC, nb - kb0), gpc = kcn >> gshift, pcs = kcn * BB / 16;
        for (int q = tid; q < NR * pcs; q += MG_NTH) { /* the rows' codes, 16 bytes a thread, rows beyond nr zero */
            const int rr = q / pcs, pc = q - rr * pcs;
            const int row2 = rr < split ? m0.row0 + rr : m1.row0 + rr - split;
            const bool ok = rr < nr;
            const uint8_t *cb = rr < split ? m0.codes : m1.codes;
            cp16(scode + rr * MG_RSTR + pc * 16, ok ? cb + (size_t)row2 * rb + (size_t)kb0 * BB + pc * 16 : m0.codes, ok);
        }
        for (int q = tid; q < NR * gpc; q += MG_NTH) { /* their scale (and bias) words, 4 aligned bytes each */
            const int rr = q / gpc, g = q - rr * gpc;
            if (rr >= nr) continue;
            const size_t e = (size_t)(rr < split ? m0.row0 + rr : m1.row0 + rr - split) * ng + (size_t)(kb0 >> gshift) + g;
            const void *sc = rr < split ? m0.scales : m1.scales, *bi = rr < split ? m0.biases : m1.biases;
            cp4(&ssw[rr * MG_GS + g], (const void *)(((uintptr_t)sc + e * ssz) & ~(uintptr_t)3));
            if (!IB) cp4(&sbw[rr * MG_GS + g], (const void *)(((uintptr_t)bi + e * ssz) & ~(uintptr_t)3));
        }
        for (int q = tid; q < c * 2 * kcn; q += MG_NTH) { /* the tokens' codes of the chunk */
            const int i = q / (2 * kcn), pc = q - i * 2 * kcn;
            cp16(&sx[i * 64 + pc], xq + (size_t)ar[i] * cols + (size_t)kb0 * 32 + (size_t)pc * 16, true);
        }
        for (int q = tid; q < c * kcn; q += MG_NTH) { /* their block scales (and block sums) */
            const int i = q / kcn, b = q - i * kcn;
            cp4(&sd[i * 32 + b], xd + (size_t)ar[i] * nb + kb0 + b);
            if (S32 && gshift) cp4(&ss32[i * 32 + b], xs + (size_t)ar[i] * ns + kb0 + b);
        }
        if (!S32 || !gshift)
            for (int q = tid; q < c * gpc; q += MG_NTH) { /* their group sums */
                const int i = q / gpc, g = q - i * gpc;
                cp4(&sxg[i * 32 + g], xs + (size_t)ar[i] * ns + soff + (kb0 >> gshift) + g);
            }
        asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
        __syncthreads();
        if (S32 && gshift) { /* s64 = s32 + s32, s128 = (s32 + s32) + (s32 + s32): act_quant's operations */
            for (int q = tid; q < c * gpc; q += MG_NTH) {
                const int i = q / gpc, g = q - i * gpc;
                const float *s = ss32 + i * 32 + (g << gshift);
                sxg[i * 32 + g] = gshift == 1 ? __fadd_rn(s[0], s[1]) : __fadd_rn(__fadd_rn(s[0], s[1]), __fadd_rn(s[2], s[3]));
            }
            __syncthreads();
        }
        if (i0 < c) { /* row r for tokens i0 and i0 + 4 (NR 64): each block's codes and scale word loaded once for both */
            const bool two = TG < MG_MAXT && i0 + TG < c;
            const size_t e0 = (size_t)row * ng + (size_t)(kb0 >> gshift);
            const uintptr_t sa = (uintptr_t)rsc + e0 * ssz, ba = (uintptr_t)rbi + e0 * ssz;
            const uint8_t *cr = scode + r * MG_RSTR;
            const unsigned *swr = ssw + r * MG_GS, *sbr = sbw + r * MG_GS;
            const int i1 = two ? i0 + TG : i0;
            const uint4 *x0 = sx + i0 * 64, *x1 = sx + i1 * 64;
            const float *d0 = sd + i0 * 32, *d1 = sd + i1 * 32;
            const float *g0 = sxg + i0 * 32, *g1 = sxg + i1 * 32;
            float a0 = acc[0], b0 = accb[0], a1 = acc[1], b1 = accb[1];
#pragma unroll 4
            for (int bl = 0; bl < kcn; bl++) {
                const uint4 w0 = *(const uint4 *)(cr + bl * BB), w1 = DT == DT_Q8 ? *(const uint4 *)(cr + bl * BB + 16) : w0;
                const int g = bl >> gshift;
                const float sv = raw_sw(swr[g], ((sa + (uintptr_t)g * ssz) & 2) != 0, SDT);
                const bool first = !(bl & bmask);
                const float bv = !first ? 0.f : IB ? zbias<DT>(sv) : raw_sw(sbr[g], ((ba + (uintptr_t)g * ssz) & 2) != 0, SDT);
                const int I0 = dot_block<DT>(w0, w1, x0[2 * bl], x0[2 * bl + 1]);
                a0 = __fmaf_rn((float)I0, __fmul_rn(sv, d0[bl]), a0);
                if (first) b0 = __fmaf_rn(bv, g0[g], b0);
                if (two) {
                    const int I1 = dot_block<DT>(w0, w1, x1[2 * bl], x1[2 * bl + 1]);
                    a1 = __fmaf_rn((float)I1, __fmul_rn(sv, d1[bl]), a1);
                    if (first) b1 = __fmaf_rn(bv, g1[g], b1);
                }
            }
            acc[0] = a0, accb[0] = b0, acc[1] = a1, accb[1] = b1;
        }
        __syncthreads(); /* the staging is free for the next chunk */
    }
    out[0] = __fadd_rn(acc[0], accb[0]), out[1] = __fadd_rn(acc[1], accb[1]);
}

struct mg_gu_args {
    const void *const *tab; /* device [3][E][3] (cuda.h slcu_moe tab) */
    const int *top_e;
    int nk, k, E, H, I, group;
    const int8_t *xq; /* h's int8 form: codes (q, or q4 for q4 matrices), block scales, sums */
    const float *xd, *xs;
    int8_t *mq, *mq4; /* the mid rows' int8 form [n k][I]: codes, q4 copy, block scales, s32 (the s64 / s128 unwritten) */
    float *md, *ms;
    int *gt; /* [1 + min(n k, E) GW]: the chosen experts' count, then each one's expert, pair count and pairs */
};

template <int DT, int SDT, int IB>
__global__ void __launch_bounds__(MG_NTH) k_moeg_gu(const __grid_constant__ mg_gu_args A) {
    extern __shared__ __align__(16) uint8_t sm[];
    __shared__ int su[MG_GW], sar[MG_MAXT];
    pdl_wait();
    const int d = blockIdx.y, D = mg_group(A.top_e, A.nk, A.E, d, su, (int *)sm);
    if (blockIdx.x == 0 && d == 0 && threadIdx.x == 0) A.gt[0] = D;
    if (d >= D) return;
    const int e = su[0], c = su[1];
    if ((int)threadIdx.x < c) sar[threadIdx.x] = su[2 + threadIdx.x] / A.k; /* a pair's token: its row of h */
    if (blockIdx.x == 0 && threadIdx.x < MG_GW) A.gt[1 + d * MG_GW + threadIdx.x] = su[threadIdx.x];
    __syncthreads();
    const int j0 = blockIdx.x * 32, nb = A.H / 32, soff = A.group == 32 ? 0 : A.group == 64 ? nb : nb + nb / 2;
    const void *const *pg = A.tab + (size_t)e * 3, *const *pu = A.tab + ((size_t)A.E + e) * 3;
    const mg_mat m0 = {(const uint8_t *)pg[0], pg[1], pg[2], j0}, m1 = {(const uint8_t *)pu[0], pu[1], pu[2], j0};
    float v[2];
    mg_rows<MG_NR, DT, SDT, IB, false>(m0, m1, 32, MG_NR, A.H, A.group, A.xq, A.xd, A.xs, soff, sar, c, sm, v);
    float *so = (float *)sm; /* [token][64]: gate rows 0 .. 31, up rows 32 .. 63 (the staging is free) */
    const int r = threadIdx.x & (MG_NR - 1), i0 = threadIdx.x >> 6;
    if (i0 < c) so[i0 * MG_NR + r] = v[0];
    if (i0 + 4 < c) so[(i0 + 4) * MG_NR + r] = v[1];
    __syncthreads();
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (w >= c) return;
    /* pair w's block jb of the mid row: silu(g) u (k_swiglu's operations), its int8 block by cuda_quant.cuh quant_lane
     * (act_quant's operations; the pair and quad sums are the down kernel's) */
    const int p = su[2 + w], nbI = A.I / 32, nsI = nbI + nbI / 2 + nbI / 4;
    slcu_act row;
    row.n_tok = 1, row.cols = A.I, row.sg = row.su = NULL;
    row.q = A.mq + (size_t)p * A.I, row.q4 = A.mq4 + (size_t)p * A.I, row.d = A.md + (size_t)p * nbI, row.s = A.ms + (size_t)p * nsI;
    quant_lane(__fmul_rn(canon_silu(so[w * MG_NR + lane]), so[w * MG_NR + 32 + lane]), j0 + lane, lane, row);
}

/* SLUICE_CUDA_MOEG=2: gate and up of the chosen experts at 16 rows a CTA (four times k_moeg_gu's CTAs), their floats
 * into g / u [n k][I] (rows of the pairs); the SwiGLU and its int8 form by slcu_swiglu_q after it, as the grouped
 * GEMM's path makes them. CTA (x, d): rows 16 x of gate for x < I / 16, else rows 16 x - I of up. */
template <int DT, int SDT, int IB>
__global__ void __launch_bounds__(MG_NTH) k_moeg_gu16(const __grid_constant__ mg_gu_args A, float *g, float *u) {
    extern __shared__ __align__(16) uint8_t sm[];
    __shared__ int su[MG_GW], sar[MG_MAXT];
    pdl_wait();
    const int d = blockIdx.y, D = mg_group(A.top_e, A.nk, A.E, d, su, (int *)sm);
    if (blockIdx.x == 0 && d == 0 && threadIdx.x == 0) A.gt[0] = D;
    if (d >= D) return;
    const int e = su[0], c = su[1];
    if ((int)threadIdx.x < c) sar[threadIdx.x] = su[2 + threadIdx.x] / A.k;
    if (blockIdx.x == 0 && threadIdx.x < MG_GW) A.gt[1 + d * MG_GW + threadIdx.x] = su[threadIdx.x];
    __syncthreads();
    const int half = A.I / 16, up = (int)blockIdx.x >= half, r0 = ((int)blockIdx.x - (up ? half : 0)) * 16;
    const int nb = A.H / 32, soff = A.group == 32 ? 0 : A.group == 64 ? nb : nb + nb / 2;
    const void *const *pm = A.tab + ((size_t)up * A.E + e) * 3;
    const mg_mat m0 = {(const uint8_t *)pm[0], pm[1], pm[2], r0};
    float v[2];
    mg_rows<16, DT, SDT, IB, false>(m0, m0, 16, 16, A.H, A.group, A.xq, A.xd, A.xs, soff, sar, c, sm, v);
    const int r = threadIdx.x % 16, i0 = threadIdx.x / 16;
    if (i0 < c) (up ? u : g)[(size_t)su[2 + i0] * A.I + r0 + r] = v[0];
}

struct mg_dn_args {
    const void *const *tab;
    const int *gt;
    int E, H, I, group;
    const int8_t *xq; /* the mid rows' int8 form (k_moeg_gu's): codes, block scales, s32 */
    const float *xd, *xs;
    float *y; /* [n k][ldy] */
    size_t ldy;
};

template <int DT, int SDT, int IB>
__global__ void __launch_bounds__(MG_NTH) k_moeg_dn(const __grid_constant__ mg_dn_args A) {
    extern __shared__ __align__(16) uint8_t sm[];
    __shared__ int su[MG_GW];
    pdl_wait();
    const int d = blockIdx.y;
    if (d >= __ldcg(A.gt)) return;
    if (threadIdx.x < MG_GW) su[threadIdx.x] = __ldcg(A.gt + 1 + d * MG_GW + threadIdx.x);
    __syncthreads();
    const int e = su[0], c = su[1], r0 = blockIdx.x * MG_NR, nr = min(MG_NR, A.H - r0);
    const void *const *pd = A.tab + ((size_t)2 * A.E + e) * 3;
    const mg_mat m0 = {(const uint8_t *)pd[0], pd[1], pd[2], r0};
    float v[2];
    mg_rows<MG_NR, DT, SDT, IB, true>(m0, m0, MG_NR, nr, A.I, A.group, A.xq, A.xd, A.xs, 0, su + 2, c, sm, v);
    const int r = threadIdx.x & (MG_NR - 1), i0 = threadIdx.x >> 6;
    if (r >= nr) return;
    if (i0 < c) A.y[(size_t)su[2 + i0] * A.ldy + r0 + r] = v[0];
    if (i0 + 4 < c) A.y[(size_t)su[2 + i0 + 4] * A.ldy + r0 + r] = v[1];
}

/* ---- a decode batch's dense matmuls (SLUICE_CUDA_MVG=1): 2-8 tokens of up to MG_MAXJ matrices sharing one activation
 * (q|k|v, o, the LM head), NR rows a CTA (16 where 64 would not give two CTAs an SM), each row read once for every
 * token and folded per token as above: cuda_mv.cu mvn_i8's bits (the canonical order) ---- */
#define MG_MAXJ 4
struct mg_djob {
    const uint8_t *codes;
    const void *scales, *biases;
    float *y;
    size_t ldy;
    int rows, tile0;
};
struct mg_dense_args {
    mg_djob j[MG_MAXJ];
    int n, cols, group, n_tok;
    const int8_t *xq;
    const float *xd, *xs;
};

template <int NR, int DT, int SDT, int IB>
__global__ void __launch_bounds__(MG_NTH) k_mvg_dense(const __grid_constant__ mg_dense_args A) {
    extern __shared__ __align__(16) uint8_t sm[];
    __shared__ int sar[MG_MAXT];
    constexpr int TG = MG_NTH / NR;
    pdl_wait();
    int jk = 0;
    while (jk + 1 < A.n && (int)blockIdx.x >= A.j[jk + 1].tile0) jk++;
    const mg_djob j = A.j[jk];
    if (threadIdx.x < MG_MAXT) sar[threadIdx.x] = threadIdx.x;
    __syncthreads();
    const int r0 = ((int)blockIdx.x - j.tile0) * NR, nr = min(NR, j.rows - r0), nb = A.cols / 32;
    const int soff = A.group == 32 ? 0 : A.group == 64 ? nb : nb + nb / 2;
    const mg_mat m0 = {j.codes, j.scales, j.biases, r0};
    float v[2];
    mg_rows<NR, DT, SDT, IB, false>(m0, m0, NR, nr, A.cols, A.group, A.xq, A.xd, A.xs, soff, sar, A.n_tok, sm, v);
    const int r = threadIdx.x % NR, i0 = threadIdx.x / NR;
    if (r >= nr) return;
    if (i0 < A.n_tok) j.y[(size_t)i0 * j.ldy + r0 + r] = v[0];
    if (TG < MG_MAXT && i0 + TG < A.n_tok) j.y[(size_t)(i0 + TG) * j.ldy + r0 + r] = v[1];
}

/* ---- host ---- */

static int moeg_env = -1, moeg_state = -1, moeg_ib = -1, mvg_env = -1, mvg_state = -1, nrows_env = -1, nrows_state = -1;
extern "C" void slcu_moeg_init(void) {
    const char *e = getenv("SLUICE_CUDA_MOEG");
    /* on (1) unless =0 since call T (bitwise on an H100; 8 streams 2.40x -> 3.13x one stream with MVG); =2 16 rows a CTA */
    moeg_env = e && (e[0] == '0' || e[0] == '2') && !e[1] ? e[0] - '0' : 1;
    moeg_state = moeg_env;
    e = getenv("SLUICE_CUDA_MVG");
    mvg_env = !(e && e[0] == '0' && !e[1]);
    mvg_state = mvg_env;
    /* a decode batch's residual add + norm + int8 form and q/k norms + RoPE, each one launch over its rows (cuda_fused.cu
     * slcu_add_norm_rows, slcu_norm_rope_rows): on unless SLUICE_CUDA_NROWS=0 since session 36's call (bitwise on an
     * H100: test_cuda's rows checks and every fixture's model test; 8 streams 849 -> 996 tok/s, docs/CUDA.md) */
    e = getenv("SLUICE_CUDA_NROWS");
    nrows_env = !(e && e[0] == '0' && !e[1]);
    nrows_state = nrows_env;
    /* the implied biases computed as the int8 matmuls compute them (cuda_i8.cu SLUICE_CUDA_IBIAS: on unless =0) */
    moeg_ib = !(getenv("SLUICE_CUDA_IBIAS") && getenv("SLUICE_CUDA_IBIAS")[0] == '0');
}
extern "C" void slcu_moeg_set(int on) {
    if (moeg_env < 0) slcu_moeg_init();
    moeg_state = on < 0 ? moeg_env : on == 2 ? 2 : on != 0;
}
extern "C" int slcu_moeg_on(void) {
    if (moeg_state < 0) slcu_moeg_init();
    return moeg_state;
}
extern "C" void slcu_mvg_set(int on) {
    if (mvg_env < 0) slcu_moeg_init();
    mvg_state = on < 0 ? mvg_env : on != 0;
}
extern "C" int slcu_mvg_on(void) {
    if (mvg_state < 0) slcu_moeg_init();
    return mvg_state;
}

extern "C" void slcu_nrows_set(int on) {
    if (nrows_env < 0) slcu_moeg_init();
    nrows_state = on < 0 ? nrows_env : on != 0;
}
extern "C" int slcu_nrows_on(void) {
    if (nrows_state < 0) slcu_moeg_init();
    return nrows_state;
}

struct mg_work {
    void *xa, *ma;
    int *gt;
    float *g, *u; /* SLUICE_CUDA_MOEG=2's gate and up rows [n k][I] */
};
static size_t mg_carve(int n, int k, int H, int I, void *work, mg_work *w) {
    const size_t nk = (size_t)n * (size_t)k;
    const size_t sz[5] = {slcu_act_bytes(n, H), slcu_act_bytes((int)nk, I), (1 + nk * MG_GW) * 4, nk * I * 4, nk * I * 4};
    uint8_t *p = (uint8_t *)work;
    void *at[5];
    size_t tot = 0;
    for (int i = 0; i < 5; i++) at[i] = p ? p + tot : NULL, tot += rnd256(sz[i]);
    if (w) *w = (mg_work){at[0], at[1], (int *)at[2], (float *)at[3], (float *)at[4]};
    return tot;
}

extern "C" size_t slcu_moeg_bytes(int n, int k, int E, int H, int I) {
    (void)E;
    return mg_carve(n > 0 ? n : 0, k > 0 ? k : 0, H > 0 ? H : 0, I > 0 ? I : 0, NULL, NULL);
}

static const char *mg_why(const slcu_moe *m) {
    const slcu_mat *w[3] = {&m->gate, &m->up, &m->down};
    const int rows[3] = {m->I, m->I, m->H}, cols[3] = {m->H, m->H, m->I};
    if (m->n < 1 || m->n > MG_MAXT || m->k < 1 || m->n * m->k > MG_MAXP || m->E < 1 || m->E > 1024)
        return "n (1 .. 8), k (n k up to 256) or E (1 .. 1024) out of range";
    if (m->H <= 0 || m->I <= 0 || m->H % 32 || m->I % 32) return "H and I are not positive multiples of 32";
    if (!m->work || !m->h || !m->top_e || !m->tab || !m->y) return "a NULL buffer";
    for (int i = 0; i < 3; i++)
        if ((w[i]->dtype != DT_Q8 && w[i]->dtype != DT_Q4) || w[i]->rows != rows[i] || w[i]->cols != cols[i] ||
            (w[i]->group != 32 && w[i]->group != 64 && w[i]->group != 128) || w[i]->cols % w[i]->group ||
            (w[i]->sdtype != DT_F32 && w[i]->sdtype != DT_F16 && w[i]->sdtype != DT_BF16))
            return "a matrix is not q8/q4 of the FFN's shape with a group of 32, 64 or 128";
    if (m->up.dtype != m->gate.dtype || m->up.sdtype != m->gate.sdtype || m->up.group != m->gate.group)
        return "gate and up differ in type";
    return NULL;
}

/* a kernel instance's dynamic shared memory allowed once (more than 48 KiB needs it) */
static void mg_attr(const void *k, int dyn) {
    static const void *done[64];
    static int nd;
    for (int i = 0; i < nd; i++)
        if (done[i] == k) return;
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn);
    if (nd < 64) done[nd++] = k;
}

template <typename K, typename A>
static void mg_launch(K *k, int ib, dim3 grid, const A &args, int nr = MG_NR) {
    const int dyn = (int)mg_smem(nr, ib);
    mg_attr((const void *)k, dyn);
    pdl_launch(k, grid, dim3(MG_NTH), (size_t)dyn, SLS, args);
}

/* one kernel template K's instance for (dtype, scale type, implied biases) */
#define MG_PICK(KER, dt, sdt, ib, grid, args)                                                                          \
    do {                                                                                                               \
        if (dt == DT_Q4) {                                                                                             \
            if (sdt == DT_F32) ib ? mg_launch(KER<DT_Q4, DT_F32, 1>, 1, grid, args) : mg_launch(KER<DT_Q4, DT_F32, 0>, 0, grid, args); \
            else if (sdt == DT_F16) ib ? mg_launch(KER<DT_Q4, DT_F16, 1>, 1, grid, args) : mg_launch(KER<DT_Q4, DT_F16, 0>, 0, grid, args); \
            else ib ? mg_launch(KER<DT_Q4, DT_BF16, 1>, 1, grid, args) : mg_launch(KER<DT_Q4, DT_BF16, 0>, 0, grid, args); \
        } else {                                                                                                       \
            if (sdt == DT_F32) ib ? mg_launch(KER<DT_Q8, DT_F32, 1>, 1, grid, args) : mg_launch(KER<DT_Q8, DT_F32, 0>, 0, grid, args); \
            else if (sdt == DT_F16) ib ? mg_launch(KER<DT_Q8, DT_F16, 1>, 1, grid, args) : mg_launch(KER<DT_Q8, DT_F16, 0>, 0, grid, args); \
            else ib ? mg_launch(KER<DT_Q8, DT_BF16, 1>, 1, grid, args) : mg_launch(KER<DT_Q8, DT_BF16, 0>, 0, grid, args); \
        }                                                                                                              \
    } while (0)

template <typename K>
static void mg_launch16(K *k, int ib, dim3 grid, const mg_gu_args &args, float *g, float *u) {
    const int dyn = (int)mg_smem(16, ib);
    mg_attr((const void *)k, dyn);
    pdl_launch(k, grid, dim3(MG_NTH), (size_t)dyn, SLS, args, g, u);
}
#define MG_PICK16(dt, sdt, ib, grid, args, g, u)                                                                       \
    do {                                                                                                               \
        if (dt == DT_Q4) {                                                                                             \
            if (sdt == DT_F32) ib ? mg_launch16(k_moeg_gu16<DT_Q4, DT_F32, 1>, 1, grid, args, g, u) : mg_launch16(k_moeg_gu16<DT_Q4, DT_F32, 0>, 0, grid, args, g, u); \
            else if (sdt == DT_F16) ib ? mg_launch16(k_moeg_gu16<DT_Q4, DT_F16, 1>, 1, grid, args, g, u) : mg_launch16(k_moeg_gu16<DT_Q4, DT_F16, 0>, 0, grid, args, g, u); \
            else ib ? mg_launch16(k_moeg_gu16<DT_Q4, DT_BF16, 1>, 1, grid, args, g, u) : mg_launch16(k_moeg_gu16<DT_Q4, DT_BF16, 0>, 0, grid, args, g, u); \
        } else {                                                                                                       \
            if (sdt == DT_F32) ib ? mg_launch16(k_moeg_gu16<DT_Q8, DT_F32, 1>, 1, grid, args, g, u) : mg_launch16(k_moeg_gu16<DT_Q8, DT_F32, 0>, 0, grid, args, g, u); \
            else if (sdt == DT_F16) ib ? mg_launch16(k_moeg_gu16<DT_Q8, DT_F16, 1>, 1, grid, args, g, u) : mg_launch16(k_moeg_gu16<DT_Q8, DT_F16, 0>, 0, grid, args, g, u); \
            else ib ? mg_launch16(k_moeg_gu16<DT_Q8, DT_BF16, 1>, 1, grid, args, g, u) : mg_launch16(k_moeg_gu16<DT_Q8, DT_BF16, 0>, 0, grid, args, g, u); \
        }                                                                                                              \
    } while (0)

#define MG_PICK_NR(NR, dt, sdt, ib, grid, args)                                                                      \
    do {                                                                                                               \
        if (dt == DT_Q4) {                                                                                             \
            if (sdt == DT_F32) ib ? mg_launch(k_mvg_dense<NR, DT_Q4, DT_F32, 1>, 1, grid, args, NR) : mg_launch(k_mvg_dense<NR, DT_Q4, DT_F32, 0>, 0, grid, args, NR); \
            else if (sdt == DT_F16) ib ? mg_launch(k_mvg_dense<NR, DT_Q4, DT_F16, 1>, 1, grid, args, NR) : mg_launch(k_mvg_dense<NR, DT_Q4, DT_F16, 0>, 0, grid, args, NR); \
            else ib ? mg_launch(k_mvg_dense<NR, DT_Q4, DT_BF16, 1>, 1, grid, args, NR) : mg_launch(k_mvg_dense<NR, DT_Q4, DT_BF16, 0>, 0, grid, args, NR); \
        } else {                                                                                                       \
            if (sdt == DT_F32) ib ? mg_launch(k_mvg_dense<NR, DT_Q8, DT_F32, 1>, 1, grid, args, NR) : mg_launch(k_mvg_dense<NR, DT_Q8, DT_F32, 0>, 0, grid, args, NR); \
            else if (sdt == DT_F16) ib ? mg_launch(k_mvg_dense<NR, DT_Q8, DT_F16, 1>, 1, grid, args, NR) : mg_launch(k_mvg_dense<NR, DT_Q8, DT_F16, 0>, 0, grid, args, NR); \
            else ib ? mg_launch(k_mvg_dense<NR, DT_Q8, DT_BF16, 1>, 1, grid, args, NR) : mg_launch(k_mvg_dense<NR, DT_Q8, DT_BF16, 0>, 0, grid, args, NR); \
        }                                                                                                              \
    } while (0)

extern "C" int slcu_mvg_matmul(const slcu_mm *mm, int n, char *msg, size_t msglen) {
    if (n < 1 || n > MG_MAXJ) return 0;
    const slcu_mat *w0 = &mm[0].w;
    const slcu_act *a = mm[0].a;
    if (!a || a->sg || mm[0].n_tok < 2 || mm[0].n_tok > MG_MAXT || mm[0].n_tok > a->n_tok || (w0->dtype != DT_Q8 && w0->dtype != DT_Q4) ||
        (w0->group != 32 && w0->group != 64 && w0->group != 128) || w0->cols != a->cols || w0->cols <= 0 || w0->cols % w0->group ||
        (w0->sdtype != DT_F32 && w0->sdtype != DT_F16 && w0->sdtype != DT_BF16))
        return 0;
    if (moeg_ib < 0) slcu_moeg_init();
    int ib = moeg_ib, rows = 0;
    for (int i = 0; i < n; i++) {
        const slcu_mat *w = &mm[i].w;
        if (mm[i].a != a || mm[i].n_tok != mm[0].n_tok || mm[i].rows || mm[i].tab || w->dtype != w0->dtype ||
            w->sdtype != w0->sdtype || w->group != w0->group || w->cols != w0->cols || w->rows <= 0 || !w->data)
            return 0;
        ib &= w->ibias != 0;
        rows += w->rows;
    }
    const int nr = (rows + 63) / 64 >= 264 ? 64 : 16; /* two CTAs an SM at least (an H100's 132 SMs) */
    mg_dense_args A;
    memset(&A, 0, sizeof A);
    A.n = n, A.cols = w0->cols, A.group = w0->group, A.n_tok = mm[0].n_tok;
    A.xq = w0->dtype == DT_Q4 ? a->q4 : a->q, A.xd = a->d, A.xs = a->s;
    int tiles = 0;
    for (int i = 0; i < n; i++) {
        const slcu_mat *w = &mm[i].w;
        A.j[i] = (mg_djob){(const uint8_t *)w->data, w->scales, ib ? NULL : w->biases, mm[i].y, mm[i].ldy, w->rows, tiles};
        tiles += (w->rows + nr - 1) / nr;
    }
    if (nr == 64) MG_PICK_NR(64, w0->dtype, w0->sdtype, ib, dim3((unsigned)tiles), A);
    else MG_PICK_NR(16, w0->dtype, w0->sdtype, ib, dim3((unsigned)tiles), A);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 1 : fail(msg, msglen, "int8 matmul of a decode batch (grouped rows) launch", e);
}

/* slcu_moeg_ffn, h's int8 form from ha when not NULL (made by the norm: slcu_moeg_layer_a) */
static int moeg_ffn(const slcu_moe *m, const slcu_act *ha, char *msg, size_t msglen) {
    const char *why = mg_why(m);
    if (why) {
        if (msg && msglen) snprintf(msg, msglen, "MoE experts grouped by expert: %s", why);
        return -1;
    }
    if (moeg_ib < 0) slcu_moeg_init();
    const int nk = m->n * m->k, ny = nk < m->E ? nk : m->E;
    mg_work w;
    mg_carve(m->n, m->k, m->H, m->I, m->work, &w);
    slcu_act xa, ma;
    if (ha) xa = *ha;
    if ((!ha && (slcu_act_bind(&xa, w.xa, m->n, m->H, msg, msglen) || slcu_act_quantize(&xa, m->h, (size_t)m->H, msg, msglen))) ||
        slcu_act_bind(&ma, w.ma, nk, m->I, msg, msglen))
        return -1;
    const mg_gu_args G = {m->tab, m->top_e, nk, m->k, m->E, m->H, m->I, m->gate.group, m->gate.dtype == DT_Q4 ? xa.q4 : xa.q,
                          xa.d, xa.s, ma.q, ma.q4, ma.d, ma.s, w.gt};
    const int gib = moeg_ib && m->gate.ibias && m->up.ibias, dib = moeg_ib && m->down.ibias;
    if (moeg_state == 2) { /* 16 rows a CTA, then the SwiGLU's launch */
        MG_PICK16(m->gate.dtype, m->gate.sdtype, gib, dim3((unsigned)(m->I / 8), (unsigned)ny), G, w.g, w.u);
        const cudaError_t e2 = cudaGetLastError();
        if (e2 != cudaSuccess) return fail(msg, msglen, "MoE gate/up (grouped, 16 rows) launch", e2);
        if (slcu_swiglu_q(w.g, w.u, w.g, &ma, msg, msglen)) return -1;
    } else {
        MG_PICK(k_moeg_gu, m->gate.dtype, m->gate.sdtype, gib, dim3((unsigned)(m->I / 32), (unsigned)ny), G);
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return fail(msg, msglen, "MoE gate/up (grouped) launch", e);
    const mg_dn_args Dn = {m->tab, w.gt, m->E, m->H, m->I, m->down.group, m->down.dtype == DT_Q4 ? ma.q4 : ma.q, ma.d, ma.s,
                           m->y, (size_t)m->H};
    MG_PICK(k_moeg_dn, m->down.dtype, m->down.sdtype, dib, dim3((unsigned)((m->H + MG_NR - 1) / MG_NR), (unsigned)ny), Dn);
    e = cudaGetLastError();
    return e == cudaSuccess ? 0 : fail(msg, msglen, "MoE down (grouped) launch", e);
}

extern "C" int slcu_moeg_ffn(const slcu_moe *m, char *msg, size_t msglen) { return moeg_ffn(m, NULL, msg, msglen); }

extern "C" int slcu_moeg_layer_a(const slcu_moe *m, const slcu_act *ha, int routed, const slcu_router *r, const float *logits,
                                 float *top_w, float *out, void **buf, size_t *cap, char *msg, size_t msglen) {
    if (ha && (ha->n_tok != m->n || ha->cols != m->H)) return 0;
    slcu_moe mo = *m;
    mo.work = mo.y = (float *)1; /* mg_why checks the shapes and types; the buffers come below */
    if (mg_why(&mo)) return 0;
    const size_t wb = rnd256(slcu_moeg_bytes(m->n, m->k, m->E, m->H, m->I)), need = wb + (size_t)m->n * m->k * m->H * sizeof(float);
    if (need > *cap) {
        if (slcu_sync(msg, msglen)) return -1; /* queued work may read the old one */
        slcu_free(*buf);
        *cap = 0;
        if (!(*buf = slcu_alloc(need, msg, msglen))) return -1;
        *cap = need;
    }
    mo.work = *buf, mo.y = (float *)((uint8_t *)*buf + wb);
    if ((!routed && slcu_route(r, logits, m->n, (int *)m->top_e, top_w, msg, msglen)) || moeg_ffn(&mo, ha, msg, msglen) ||
        slcu_combine(mo.y, top_w, m->k, NULL, NULL, out, m->n, m->H, msg, msglen))
        return -1;
    return 1;
}

extern "C" int slcu_moeg_layer(const slcu_moe *m, const slcu_router *r, const float *logits, float *top_w, float *out, void **buf,
                               size_t *cap, char *msg, size_t msglen) {
    return slcu_moeg_layer_a(m, NULL, 0, r, logits, top_w, out, buf, cap, msg, msglen);
}

/* ---- a decode batch's router (SLUICE_CUDA_NROWS=1): n tokens' logits and choice in one launch. Warp (row, token
 * blockIdx.y) sums its row as cuda_mat.cu matvec_rows<DT, NT, 1> does for every token of a call and k_router2 for one
 * (lane's 16-byte pieces p = lane, lane + 32, ... in order, each piece's values by one fma chain from 0, acc = acc + d
 * from 0, the xor butterfly 16 .. 1), so the logits are slcu_matmul's bits; lane 0 stores it and counts the token's
 * rows on done[t] (acq_rel); the warp that completes a token's count routes its row with cuda_route.cuh route_warp_row
 * (k_route_warp's code: slcu_route's choice for kinds 0 and 1) and sets done[t] back to zero. ---- */
template <int DT> __device__ __forceinline__ void rr_word(unsigned u, float *w) { /* cuda_mat.cu unpack_word's */
    if (DT == DT_F32) w[0] = __uint_as_float(u);
    else if (DT == DT_BF16) w[0] = __uint_as_float(u << 16), w[1] = __uint_as_float(u & 0xffff0000u);
    else w[0] = __half2float(__ushort_as_half((unsigned short)(u & 0xffff))),
         w[1] = __half2float(__ushort_as_half((unsigned short)(u >> 16)));
}
__device__ __forceinline__ int rr_count(int *done) { /* the old count; lane 0's store released with it (k_router2's) */
    int old;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(old) : "l"(done) : "memory");
    return old;
}
#define RR_W 4 /* warps a CTA */
template <int DT>
__global__ void __launch_bounds__(32 * RR_W) k_router_rows(const uint8_t *__restrict__ data, int rows, int cols, const float *x,
                                                           float *y, slcu_router r, int *top_e, float *top_w, int *done) {
    pdl_wait();
    pdl_trigger();
    __shared__ float p[RT_MAXE];
    __shared__ int te[RT_MAXE];
    __shared__ float tw[RT_MAXE];
    constexpr int P = DT == DT_F32 ? 4 : 8, WV = P / 4;
    const int lane = threadIdx.x & 31, row = blockIdx.x * RR_W + (threadIdx.x >> 5), t = blockIdx.y, npieces = cols / P;
    if (row >= rows) return;
    const uint4 *wp = (const uint4 *)(data + (size_t)row * cols * (DT == DT_F32 ? 4 : 2));
    const float *xt = x + (size_t)t * cols; /* the step's (__ldcg: cuda_pdl.cuh) */
    float acc = 0.f;
#pragma unroll 8
    for (int q = lane; q < npieces; q += 32) {
        const uint4 wv = __ldg(wp + q);
        const float *xp = xt + (size_t)q * P;
        float xv[P];
#pragma unroll
        for (int j = 0; j < P; j += 4) {
            const float4 f = __ldcg((const float4 *)(xp + j));
            xv[j] = f.x, xv[j + 1] = f.y, xv[j + 2] = f.z, xv[j + 3] = f.w;
        }
        float d = 0.f;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float w[WV];
            rr_word<DT>(k == 0 ? wv.x : k == 1 ? wv.y : k == 2 ? wv.z : wv.w, w);
#pragma unroll
            for (int j = 0; j < WV; j++) d = fmaf(w[j], xv[k * WV + j], d);
        }
        acc = acc + d;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    int last = 0;
    if (!lane) {
        y[(size_t)t * rows + row] = acc;
        last = rr_count(done + t) == rows - 1;
    }
    if (!__shfl_sync(0xffffffffu, last, 0)) return;
    asm volatile("fence.acq_rel.gpu;" ::: "memory"); /* every other warp's logit of the token, after its count */
    route_warp_row(r, y, t, top_e, top_w, p, te, tw, lane);
    if (!lane) done[t] = 0;
}

extern "C" int slcu_router_rows(const slcu_mat *w, const float *x, float *logits, const slcu_router *r, int n, int *top_e,
                                float *top_w, int *done, char *msg, size_t msglen) {
    const int dt = w->dtype, P = dt == DT_F32 ? 4 : 8;
    if ((dt != DT_F32 && dt != DT_BF16 && dt != DT_F16) || w->cols % P || w->rows != r->E || r->E > RT_MAXE || r->k < 1 ||
        r->k > r->E || (r->kind != 0 && r->kind != 1) || n < 1 || n > SLCU_NROWS_MAX || !done || ((uintptr_t)x & 15))
        return 0;
    const dim3 grid((unsigned)((w->rows + RR_W - 1) / RR_W), (unsigned)n);
    const uint8_t *d = (const uint8_t *)w->data;
#define L(D) pdl_launch(k_router_rows<D>, grid, 32 * RR_W, 0, SLS, d, w->rows, w->cols, x, logits, *r, top_e, top_w, done)
    if (dt == DT_F32) L(DT_F32);
    else if (dt == DT_BF16) L(DT_BF16);
    else L(DT_F16);
#undef L
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 1 : fail(msg, msglen, "router of a decode batch launch", e);
}
