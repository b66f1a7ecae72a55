/*
 * cuda_mxfp4.cu — y = W x for gpt-oss's MXFP4 experts on the device (cuda.h slcu_matmul_mxfp4, slcu_matmul_mxfp4_seg;
 * the layout is src/quant/quant.h's, the CPU's matmul src/kernels/mxfp4.c).
 *
 * The order of every output (r, t), whichever kernel computes it: lane l of 32 takes the 32-column blocks l, l + 32,
 * ... (its class); per block d = fma chain over its 32 columns from 0.0f, each weight decoded as mxfp4_row_scalar
 * does (value * 2^(e-127), exact in f32); a_l = ((0.0f + d_l) + d_{l+32}) + ...; then the xor butterfly over the
 * lanes (16, 8, 4, 2, 1), i.e. the binary tree whose leaves, left to right, are the classes in 5-bit bit-reversed
 * order (0, 16, 8, 24, 4, ...). It depends only on the shapes, never on n or on the kernel.
 *
 * k_mxfp4 (decode, up to 8 tokens a launch): a warp per output row, 4 rows a CTA, lane l its class itself; up to 8
 * tokens share one read of the weights. k_mxfp4 waits (pdl_wait) before its first global access and is launched by
 * cuda_pdl.cuh pdl_launch, on the legacy stream as before.
 *
 * k_mxg / k_mxg_seg (many tokens): a CTA computes a tile of BM rows x TN tokens, a thread 4 x 4 (or 2 x 2) of it
 * for all 32 classes: it visits the classes in the tree's leaf order (i = 0 .. 31, class brev5(i)), keeps per output
 * its class sum a (acc), the block's chain d and a stack S[0..4] of finished subtrees, and merges a finished class as
 * a binary counter does (i's trailing ones: a = S[k] + a for each, then S[level] = a): the butterfly's tree, leaf by
 * leaf. The CTA stages one 32-column block at a time, in that order, double-buffered in shared memory: the weights
 * decoded once (Ws [32][BM], column-major: a thread reads its rows as one float4 / float2) and the tokens' columns
 * (Xs [32][TN]); one barrier a block. 7 floats an output in registers (4 x 4: 209-247 registers, no spills; 2 x 2: 78).
 * k_mxg_seg runs the same tile over a MoE layer's experts, each on its own run of rows (the segments of cuda_i8.cu
 * gemm_seg). tools/cuda_mxg_emu.c transcribes both kernels' loops on the CPU and checks them bitwise against k_mxfp4's.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_pdl.cuh"

#define MX_WARPS 4
#define MX_T 8

__constant__ float mx_values[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

__device__ __forceinline__ float mx_scale(unsigned s) { /* kernels/mxfp4.h mxfp4_scale */
    return __uint_as_float(s == 0 ? 0x00400000u : s == 255 ? 0x7f800000u : s << 23);
}

__global__ void __launch_bounds__(32 * MX_WARPS) k_mxfp4(const uint8_t *__restrict__ codes, const uint8_t *__restrict__ scales,
                                                        int rows, int cols, const float *__restrict__ x, size_t ldx,
                                                        float *__restrict__ y, size_t ldy, int nt, int aligned) {
    pdl_wait();
    const int lane = threadIdx.x & 31, r = blockIdx.x * MX_WARPS + (threadIdx.x >> 5);
    if (r >= rows) return;
    const int nb = cols / 32;
    const uint8_t *rc = codes + (size_t)r * (cols / 2);
    const uint8_t *rs = scales + (size_t)r * nb;
    float acc[MX_T];
#pragma unroll
    for (int t = 0; t < MX_T; t++) acc[t] = 0.0f;
    for (int b = lane; b < nb; b += 32) {
        unsigned wd[4];
        if (aligned) {
            const uint4 q = __ldg((const uint4 *)(rc + (size_t)b * 16));
            wd[0] = q.x, wd[1] = q.y, wd[2] = q.z, wd[3] = q.w;
        } else {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const uint8_t *p = rc + (size_t)b * 16 + 4 * k;
                wd[k] = (unsigned)p[0] | (unsigned)p[1] << 8 | (unsigned)p[2] << 16 | (unsigned)p[3] << 24;
            }
        }
        const float s = mx_scale(__ldg(rs + b));
        float w[32];
#pragma unroll
        for (int k = 0; k < 4; k++)
#pragma unroll
            for (int j = 0; j < 8; j++) w[8 * k + j] = __fmul_rn(mx_values[(wd[k] >> (4 * j)) & 15], s);
#pragma unroll
        for (int t = 0; t < MX_T; t++) {
            if (t >= nt) break;
            const float *xt = x + (size_t)t * ldx + (size_t)b * 32;
            float d = 0.0f;
#pragma unroll
            for (int j = 0; j < 32; j++) d = fmaf(w[j], __ldg(xt + j), d);
            acc[t] = __fadd_rn(acc[t], d);
        }
    }
#pragma unroll
    for (int t = 0; t < MX_T; t++) {
        if (t >= nt) break;
        float v = acc[t];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (!lane) y[(size_t)t * ldy + r] = v;
    }
}

/* ---- k_mxg, k_mxg_seg: many tokens ------------------------------------------------------------------------
 * A CTA of WR x WT warps, a thread R x T outputs (R, T 2 or 4): BM = 8 R WR rows, TN = 4 T WT tokens. Lane (lr =
 * lane / 4, lt = lane % 4) of warp (wr, wt) owns rows R (8 wr + lr) .. + R - 1 and tokens T (4 wt + lt) .. + T - 1 of
 * the tile: a warp's 8 row groups are 8 R contiguous floats of a Ws row, its 4 token groups 4 T of an Xs row (one
 * wavefront each, the rest broadcast). Staging:
 * thread idx = tid + u NT decodes code word q = idx / BM (columns 8q .. 8q + 7) of row idx % BM (a warp: 32
 * consecutive rows, one Ws row each store) and loads quad q4 = idx / TN (columns 4q4 .. 4q4 + 3) of token idx % TN. */
#define MXG_PAD 4 /* floats after each Ws / Xs row: rows 16-byte aligned; the TN 16 staging's two Xs rows a warp 16 banks apart */

__device__ __forceinline__ int mxg_brev(int i) { return (int)(__brev((unsigned)i) >> 27); } /* 5-bit bit reversal */

/* The block after b in the classes' order (i = 0 .. 31, class brev5(i), its blocks upward), or -1 after the last. */
__device__ __forceinline__ int mxg_next(int b, int nb) {
    if (b + 32 < nb) return b + 32;
    for (int i = mxg_brev(b & 31) + 1; i < 32; i++)
        if (mxg_brev(i) < nb) return mxg_brev(i);
    return -1;
}

template <int N> __device__ __forceinline__ void mxg_ld(const float *p, float (&v)[N]) { /* N floats, one load */
    if constexpr (N == 4) {
        const float4 q = *(const float4 *)p;
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    } else {
        const float2 q = *(const float2 *)p;
        v[0] = q.x, v[1] = q.y;
    }
}
/* A thread's R x T outputs over one staged block: d = fma chain over its 32 columns from 0.0f, acc += d */
template <int R, int T, int WP, int XP>
__device__ __forceinline__ void mxg_block(const float (*Ws)[WP], const float (*Xs)[XP], int rb, int tb, float (&acc)[R][T]) {
    float d[R][T];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < T; t++) d[r][t] = 0.0f;
#pragma unroll
    for (int k = 0; k < 32; k++) {
        float wk[R], xk[T];
        mxg_ld<R>(&Ws[k][rb], wk), mxg_ld<T>(&Xs[k][tb], xk);
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < T; t++) d[r][t] = fmaf(wk[r], xk[t], d[r][t]);
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < T; t++) acc[r][t] = __fadd_rn(acc[r][t], d[r][t]);
}

/* Class i's sums acc (the tree's leaf i) into the stack S: i's trailing ones are the merges, acc = S[k] + acc at
 * levels 0 .. lv - 1, then S[lv] = acc; at i = 31 (lv 5) acc is the whole sum, the butterfly's. */
template <int R, int T>
__device__ __forceinline__ void mxg_merge(int i, float (&acc)[R][T], float (&S)[5][R][T]) {
    const int lv = __ffs(~i) - 1;
#pragma unroll
    for (int k = 0; k < 5; k++)
        if (k < lv)
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int t = 0; t < T; t++) acc[r][t] = __fadd_rn(S[k][r][t], acc[r][t]);
#pragma unroll
    for (int k = 0; k < 5; k++)
        if (k == lv)
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int t = 0; t < T; t++) S[k][r][t] = acc[r][t];
}

/* One tile: rows r0 .. r0 + BM - 1 of the matrix, tokens t0 .. t0 + TN - 1 of a run of ntok tokens; token t's
 * activation is row xrows ? xrows[t] : t of x, its output row yrows ? yrows[t] : t of y. Every thread of the CTA
 * calls it (barriers inside). */
template <int R, int T, int WR, int WT>
__device__ __forceinline__ void mxg_tile(const uint8_t *__restrict__ codes, const uint8_t *__restrict__ scales, int rows,
                                         int cols, const float *x, size_t ldx, const int *xrows, float *y, size_t ldy,
                                         const int *yrows, int ntok, int r0, int t0) {
    constexpr int BM = 8 * R * WR, TN = 4 * T * WT, NT = 32 * WR * WT, WP = BM + MXG_PAD, XP = TN + MXG_PAD;
    constexpr int NWQ = BM * 4 / NT, NXQ = TN * 8 / NT; /* code words and x quads a thread stages a block */
    static_assert((R == 2 || R == 4) && (T == 2 || T == 4) && R % WT == 0 && T % WR == 0, "NWQ, NXQ whole");
    __shared__ __align__(16) float Ws[2][32][WP];
    __shared__ __align__(16) float Xs[2][32][XP];
    __shared__ float lut[16];
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int rb = R * (8 * (w / WT) + (lane >> 2)), tb = T * (4 * (w % WT) + (lane & 3));
    const int nb = cols / 32, aligned = !((uintptr_t)codes & 3), xal = !((uintptr_t)x & 15) && !(ldx & 3);
    if (tid < 16) lut[tid] = mx_values[tid];
    const uint8_t *wrow[NWQ];
    const uint8_t *srow[NWQ];
    const float *xrow[NXQ];
#pragma unroll
    for (int u = 0; u < NWQ; u++) {
        const int idx = tid + u * NT, r = r0 + idx % BM;
        wrow[u] = r < rows ? codes + (size_t)r * (cols / 2) + 4 * (idx / BM) : NULL;
        srow[u] = r < rows ? scales + (size_t)r * nb : NULL;
    }
#pragma unroll
    for (int u = 0; u < NXQ; u++) {
        const int idx = tid + u * NT, t = t0 + idx % TN;
        xrow[u] = t < ntok ? x + (size_t)(xrows ? xrows[t] : t) * ldx + 4 * (idx / TN) : NULL;
    }
    unsigned wq[NWQ], sq[NWQ];
    float4 xq[NXQ];
    auto load = [&](int b) { /* block b's words into registers */
#pragma unroll
        for (int u = 0; u < NWQ; u++) {
            wq[u] = 0, sq[u] = 0;
            if (!wrow[u]) continue;
            const uint8_t *p = wrow[u] + (size_t)b * 16;
            if (aligned) wq[u] = __ldg((const unsigned *)p);
            else wq[u] = (unsigned)__ldg(p) | (unsigned)__ldg(p + 1) << 8 | (unsigned)__ldg(p + 2) << 16 | (unsigned)__ldg(p + 3) << 24;
            sq[u] = __ldg(srow[u] + b);
        }
#pragma unroll
        for (int u = 0; u < NXQ; u++) {
            xq[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (!xrow[u]) continue;
            const float *p = xrow[u] + (size_t)b * 32;
            if (xal) xq[u] = __ldcg((const float4 *)p); /* activations: not __ldg (cuda_pdl.cuh) */
            else xq[u] = make_float4(__ldcg(p), __ldcg(p + 1), __ldcg(p + 2), __ldcg(p + 3));
        }
    };
    auto store = [&](int buf) { /* the registers, decoded, into buffer buf */
#pragma unroll
        for (int u = 0; u < NWQ; u++) {
            const int idx = tid + u * NT, r = idx % BM, q = idx / BM;
            const float s = mx_scale(sq[u]);
#pragma unroll
            for (int j = 0; j < 8; j++) Ws[buf][8 * q + j][r] = __fmul_rn(lut[(wq[u] >> (4 * j)) & 15], s);
        }
#pragma unroll
        for (int u = 0; u < NXQ; u++) {
            const int idx = tid + u * NT, t = idx % TN, q = idx / TN;
            Xs[buf][4 * q][t] = xq[u].x, Xs[buf][4 * q + 1][t] = xq[u].y;
            Xs[buf][4 * q + 2][t] = xq[u].z, Xs[buf][4 * q + 3][t] = xq[u].w;
        }
    };
    float acc[R][T], S[5][R][T];
#pragma unroll
    for (int k = 0; k < 5; k++)
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < T; t++) S[k][r][t] = 0.0f;
    load(0); /* block 0: class 0's first (nb >= 1) */
    __syncthreads(); /* lut */
    store(0);
    __syncthreads();
    int cur = 0;
    for (int i = 0; i < 32; i++) {
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < T; t++) acc[r][t] = 0.0f;
        for (int b = mxg_brev(i); b < nb; b += 32) { /* Ws / Xs [cur] hold block b */
            const int nx = mxg_next(b, nb);
            if (nx >= 0) load(nx);
            mxg_block<R, T, WP, XP>(Ws[cur], Xs[cur], rb, tb, acc);
            if (nx >= 0) store(cur ^ 1);
            __syncthreads();
            cur ^= 1;
        }
        mxg_merge<R, T>(i, acc, S);
    }
#pragma unroll
    for (int t = 0; t < T; t++) {
        const int tt = t0 + tb + t;
        if (tt >= ntok) break;
        float *yt = y + (size_t)(yrows ? yrows[tt] : tt) * ldy;
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r0 + rb + r < rows) yt[r0 + rb + r] = acc[r][t];
    }
}

/* y = W x over n tokens: CTA (row tile blockIdx.x, token tile blockIdx.y) */
template <int R, int T, int WR, int WT>
__global__ void __launch_bounds__(32 * WR * WT) k_mxg(const uint8_t *__restrict__ codes, const uint8_t *__restrict__ scales,
                                                      int rows, int cols, const float *x, size_t ldx, float *y, size_t ldy, int n) {
    pdl_wait();
    mxg_tile<R, T, WR, WT>(codes, scales, rows, cols, x, ldx, NULL, y, ldy, NULL, n, blockIdx.x * 8 * R * WR, blockIdx.y * 4 * T * WT);
}

/* k_mxg_seg's arguments: cuda.h slcu_mxseg's */
struct mxg_seg {
    const void *const *tab;
    const int *off, *tok, *yrows;
    const float *x;
    size_t ldx, ldy;
    float *y[2];
    int rows, cols, E, ts;
};

/* CTA (row tile blockIdx.x, token tile blockIdx.y, matrix blockIdx.z): tile k of expert e's run of rows, where
 * blockIdx.y = (the tiles of the experts before e) + k, each expert's run cut into ceil(count / TN) tiles (the CTA
 * sums them from off: a scan over runs of experts a thread); past the last tile it returns. */
template <int R, int T, int WR, int WT>
__global__ void __launch_bounds__(32 * WR * WT) k_mxg_seg(const __grid_constant__ mxg_seg S) {
    constexpr int NT = 32 * WR * WT, TN = 4 * T * WT;
    __shared__ int part[NT / 32], found[2];
    pdl_wait();
    const int tid = threadIdx.x, lane = tid & 31, tt = blockIdx.y, per = (S.E + NT - 1) / NT;
    const int e0 = min(tid * per, S.E), e1 = min(e0 + per, S.E);
    if (!tid) found[0] = -1;
    int c = 0;
    for (int e = e0; e < e1; e++) c += (S.off[e + 1] - S.off[e] + TN - 1) / TN;
    int v = c;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int u = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += u;
    }
    if (lane == 31) part[tid >> 5] = v;
    __syncthreads();
    int p = v - c; /* the tiles before expert e0 */
    for (int k = 0; k < (tid >> 5); k++) p += part[k];
    for (int e = e0; e < e1; e++) {
        const int ce = (S.off[e + 1] - S.off[e] + TN - 1) / TN;
        if (tt >= p && tt < p + ce) found[0] = e, found[1] = tt - p;
        p += ce;
    }
    __syncthreads();
    const int e = found[0];
    if (e < 0) return;
    const int o = S.off[e], z = blockIdx.z;
    const void *const *m = S.tab + (size_t)S.ts * ((size_t)z * S.E + e);
    mxg_tile<R, T, WR, WT>((const uint8_t *)m[0], (const uint8_t *)m[1], S.rows, S.cols, S.tok ? S.x : S.x + (size_t)o * S.ldx,
                           S.ldx, S.tok ? S.tok + o : NULL, S.y[z] + (S.yrows ? 0 : (size_t)o * S.ldy), S.ldy,
                           S.yrows ? S.yrows + o : NULL, S.off[e + 1] - o, blockIdx.x * 8 * R * WR, found[1] * TN);
}

/* Small segment calls (a decode batch's pairs, at most MXS_ROWS rows of the segment order): k_mxfp4's warp a row for
 * one token, the row's expert found in off. Per (row, token) the same lane partition, the same fmaf chain a block from
 * 0.0f, the same acc += d and butterfly as k_mxfp4 (whose order for a token does not depend on the tokens beside it),
 * so bitwise slcu_matmul_mxfp4's at any n; where k_mxg's tile walks every block of a row alone, the warp's 32 lanes
 * share them (k_mxg at one token: 0.5-0.9x k_mxfp4, call 2 of session 37). grid (rows / MX_WARPS, n, nmat). */
#define MXS_ROWS 64
__global__ void __launch_bounds__(32 * MX_WARPS) k_mxseg_rows(const __grid_constant__ mxg_seg S) {
    pdl_wait();
    const int lane = threadIdx.x & 31, r = blockIdx.x * MX_WARPS + (threadIdx.x >> 5), p = blockIdx.y, z = blockIdx.z;
    if (r >= S.rows) return;
    int lo = 0, hi = S.E - 1; /* the expert e with off[e] <= p < off[e + 1] (off nondecreasing, off[E] = n) */
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (S.off[mid] <= p) lo = mid;
        else hi = mid - 1;
    }
    const void *const *m = S.tab + (size_t)S.ts * ((size_t)z * S.E + lo);
    const int nb = S.cols / 32;
    const uint8_t *rc = (const uint8_t *)m[0] + (size_t)r * (S.cols / 2), *rs = (const uint8_t *)m[1] + (size_t)r * nb;
    const float *xt = S.x + (size_t)(S.tok ? S.tok[p] : p) * S.ldx;
    const int aligned = !((uintptr_t)rc & 15);
    float acc = 0.0f;
    for (int b = lane; b < nb; b += 32) {
        unsigned wd[4];
        if (aligned) {
            const uint4 q = *(const uint4 *)(rc + (size_t)b * 16);
            wd[0] = q.x, wd[1] = q.y, wd[2] = q.z, wd[3] = q.w;
        } else {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const uint8_t *q = rc + (size_t)b * 16 + 4 * k;
                wd[k] = (unsigned)q[0] | (unsigned)q[1] << 8 | (unsigned)q[2] << 16 | (unsigned)q[3] << 24;
            }
        }
        const float sc = mx_scale(rs[b]);
        float w[32];
#pragma unroll
        for (int k = 0; k < 4; k++)
#pragma unroll
            for (int j = 0; j < 8; j++) w[8 * k + j] = __fmul_rn(mx_values[(wd[k] >> (4 * j)) & 15], sc);
        const float *xb = xt + (size_t)b * 32;
        float d = 0.0f;
#pragma unroll
        for (int j = 0; j < 32; j++) d = fmaf(w[j], xb[j], d);
        acc = __fadd_rn(acc, d);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, o));
    if (!lane) S.y[z][(size_t)(S.yrows ? S.yrows[p] : p) * S.ldy + r] = acc;
}

/* The smallest n slcu_matmul_mxfp4 gives k_mxg (cuda.h slcu_mxfp4_gemm; SLUICE_CUDA_MXG): 0 never; -1 not read yet */
static int mxg_min = -1;
extern "C" void slcu_mxfp4_gemm(int min_tok) {
    if (min_tok < 0) {
        const char *e = getenv("SLUICE_CUDA_MXG");
        min_tok = e && *e ? atoi(e) : 9; /* unset: decode batches (up to 8 tokens) keep k_mxfp4 */
        if (min_tok < 0) min_tok = 0;
    }
    mxg_min = min_tok;
}

/* The segments' tile for runs of about avg tokens: 64 x 16 (2 warps), 128 x 32 or 64 x 64 (8 warps) */
#define MXG_PICK(avg, CALL) ((avg) <= 16 ? CALL(4, 4, 2, 1) : (avg) <= 32 ? CALL(4, 4, 4, 2) : CALL(4, 4, 2, 4))

/* The device's SMs. One matrix's tile: 64 x 64 where its CTAs fill them; else 64 x 16 where those fill them twice
 * (4 warps an SM); else 32 x 8, a thread 2 x 2: a quarter of the work a thread, for more of them. */
static int mxg_sms(void) {
    static int sms;
    int dev = 0;
    if (!sms && (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess))
        sms = 132;
    return sms;
}

static const char *mx_why(const slcu_mat *w) {
    return w->dtype != DT_MXFP4 || w->cols <= 0 || w->cols % 32 ? "needs an mxfp4 matrix of a multiple of 32 columns" : NULL;
}

extern "C" int slcu_matmul_mxfp4(const slcu_mat *w, const float *x, size_t ldx, float *y, size_t ldy, int n, char *msg,
                                 size_t msglen) {
    if (mx_why(w) || !w->data || !w->scales) {
        if (msg && msglen) snprintf(msg, msglen, "mxfp4 matmul: %s", mx_why(w) ? mx_why(w) : "a NULL matrix");
        return -1;
    }
    if (n <= 0 || w->rows <= 0) return 0;
    if (mxg_min < 0) slcu_mxfp4_gemm(-1);
    const uint8_t *c = (const uint8_t *)w->data, *sc = (const uint8_t *)w->scales;
    if (mxg_min > 0 && n >= mxg_min) {
#define MXG_GO(R, T, WR, WT)                                                                                        \
    pdl_launch(k_mxg<R, T, WR, WT>, dim3((unsigned)((w->rows + 8 * R * WR - 1) / (8 * R * WR)),                      \
                                         (unsigned)((n + 4 * T * WT - 1) / (4 * T * WT))),                            \
               32 * WR * WT, 0, 0, c, sc, w->rows, w->cols, x, ldx, y, ldy, n) /* stream 0, as k_mxfp4's */
        const long rt = (w->rows + 63) / 64;
        if (rt * ((n + 63) / 64) >= mxg_sms()) MXG_GO(4, 4, 2, 4);
        else if (rt * ((n + 15) / 16) >= 2 * mxg_sms()) MXG_GO(4, 4, 2, 1);
        else MXG_GO(2, 2, 2, 1);
#undef MXG_GO
    } else {
        const int aligned = !((uintptr_t)c & 15); /* rows are 16 * (cols / 32) bytes: all aligned then */
        const unsigned grid = (unsigned)((w->rows + MX_WARPS - 1) / MX_WARPS);
        for (int t0 = 0; t0 < n; t0 += MX_T) {
            const int nt = n - t0 < MX_T ? n - t0 : MX_T;
            pdl_launch(k_mxfp4, grid, 32 * MX_WARPS, 0, 0, c, sc, w->rows, w->cols, x + (size_t)t0 * ldx, ldx, y + (size_t)t0 * ldy,
                       ldy, nt, aligned); /* stream 0: the legacy one */
        }
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        if (msg && msglen) snprintf(msg, msglen, "mxfp4 matmul launch: %s", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

extern "C" int slcu_matmul_mxfp4_seg(const slcu_mxseg *s, char *msg, size_t msglen) {
    const char *why = mx_why(&s->w);
    if (!why && (s->E < 1 || s->nmat < 1 || s->nmat > 2 || s->n < 0)) why = "E >= 1, nmat 1 or 2, n >= 0";
    if (!why && (!s->tab || !s->off || !s->x || !s->y[0] || (s->nmat > 1 && !s->y[1]))) why = "a NULL pointer";
    if (why) {
        if (msg && msglen) snprintf(msg, msglen, "mxfp4 segments: %s", why);
        return -1;
    }
    if (!s->n || !s->w.rows) return 0;
    const mxg_seg S = {s->tab, s->off, s->tok, s->yrows, s->x, s->ldx, s->ldy, {s->y[0], s->nmat > 1 ? s->y[1] : s->y[0]},
                       s->w.rows, s->w.cols, s->E, s->tstride > 2 ? s->tstride : 2};
    const char *rows_on = getenv("SLUICE_CUDA_MXSEG"); /* =1 until a device has run k_mxseg_rows (session 37 had none) */
    if (rows_on && !strcmp(rows_on, "1") && s->n <= MXS_ROWS) {
        pdl_launch(k_mxseg_rows, dim3((unsigned)((s->w.rows + MX_WARPS - 1) / MX_WARPS), (unsigned)s->n, (unsigned)s->nmat),
                   32 * MX_WARPS, 0, SLS, S);
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess && msg && msglen) snprintf(msg, msglen, "mxfp4 segments launch: %s", cudaGetErrorString(e));
        return e == cudaSuccess ? 0 : -1;
    }
    const int avg = (s->n + s->E - 1) / s->E;
    /* at most one partial tile an expert: ceil(n / TN) + min(E, n) token tiles bound the experts' */
#define MXG_GO(R, T, WR, WT)                                                                                               \
    pdl_launch(k_mxg_seg<R, T, WR, WT>,                                                                                    \
               dim3((unsigned)((s->w.rows + 8 * R * WR - 1) / (8 * R * WR)),                                               \
                    (unsigned)((s->n + 4 * T * WT - 1) / (4 * T * WT) + (s->E < s->n ? s->E : s->n)), (unsigned)s->nmat),   \
               32 * WR * WT, 0, SLS, S)
    MXG_PICK(avg, MXG_GO);
#undef MXG_GO
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        if (msg && msglen) snprintf(msg, msglen, "mxfp4 segments launch: %s", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}
