/*
 * cuda_mat.cu — matrix kernels of the CUDA tier (cuda.h): y = W x for up to 8 tokens per pass, W in the
 * container's layouts (f32, bf16, f16, MLX group-affine q8 / q4: src/quant/quant.h).
 *
 * One warp per 1 or 4 output rows (launch: RPW), ROWS_PER_BLOCK warps per block; every token of a call in one
 * launch, MAXT a pass (gridDim.y). A lane reads 16 bytes of the row at a time
 * (32 q4 codes, 16 q8 codes, 8 bf16/f16, 4 f32: coalesced across the warp, several loads in flight),
 * multiplies them with the matching x values of every token and keeps one partial sum per token; the
 * 32 partial sums are then added by a fixed butterfly. For q8/q4 a 16-byte piece never straddles a
 * group (groups are >= 32 columns and pieces are aligned), so per piece acc += s * dot(q, x) + b * sum(x).
 * The order of every addition depends only on the shapes: results are bitwise repeatable. Every kernel waits
 * (pdl_wait) before its first global access and is launched by cuda_pdl.cuh pdl_launch.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_route.cuh"

#define MAXT 8           /* tokens per pass */
#define ROWS_PER_BLOCK 4 /* warps per block */

static int fail(char *msg, size_t n, const char *what, cudaError_t e) {
    if (msg && n) snprintf(msg, n, "%s: %s", what, cudaGetErrorString(e));
    return -1;
}

__device__ __forceinline__ float scale_at(const void *p, dt_type sdt, size_t i) {
    if (sdt == DT_F32) return ((const float *)p)[i];
    unsigned short h = ((const unsigned short *)p)[i];
    if (sdt == DT_BF16) return __uint_as_float((unsigned)h << 16);
    return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ float lo_bf16(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_bf16(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float lo_f16(unsigned w) { return __half2float(__ushort_as_half((unsigned short)(w & 0xffff))); }
__device__ __forceinline__ float hi_f16(unsigned w) { return __half2float(__ushort_as_half((unsigned short)(w >> 16))); }

/* values per 16-byte piece (4 words) and per word */
template <int DT> struct piece {
    static const int n = DT == DT_F32 ? 4 : DT == DT_Q8 ? 16 : DT == DT_Q4 ? 32 : 8;
    static const int w = n / 4;
};

/* The values of one 32-bit word as floats (codes for q8/q4, unscaled), in column order. */
template <int DT> __device__ __forceinline__ void unpack_word(unsigned u, float *w) {
    if (DT == DT_F32) w[0] = __uint_as_float(u);
    else if (DT == DT_BF16) { w[0] = lo_bf16(u); w[1] = hi_bf16(u); }
    else if (DT == DT_F16) { w[0] = lo_f16(u); w[1] = hi_f16(u); }
    /* codes: 2^23 + q has q in its low mantissa bits, so (bits | q) - 2^23 is q exactly, in two full-rate
     * instructions instead of an integer-to-float conversion (quarter rate) */
    else if (DT == DT_Q8) {
#pragma unroll
        for (int j = 0; j < 4; j++) w[j] = __uint_as_float(0x4B000000u | ((u >> (8 * j)) & 0xffu)) - 8388608.f;
    } else { /* q4: element c at bits [4c, 4c+4) of the row, LSB first */
#pragma unroll
        for (int j = 0; j < 8; j++) w[j] = __uint_as_float(0x4B000000u | ((u >> (4 * j)) & 0xfu)) - 8388608.f;
    }
}

__device__ __forceinline__ unsigned word_of(const uint4 &v, int k) {
    return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

/* A warp computes R rows for up to NT tokens: each lane takes 16-byte pieces of the R rows at the same
 * columns, so that every x value it loads serves R rows (x, not the weights, is what the loads are
 * made of otherwise). Per (row, token) the sum runs over the lane's pieces in order, then a butterfly
 * over the lanes: the same order for any NT. */
template <int DT, int NT, int R>
static __device__ __forceinline__ void matvec_rows(const uint8_t *__restrict__ data, const void *__restrict__ scales,
                                                   const void *__restrict__ biases, dt_type sdt, int rows, int cols,
                                                   int group, const float *__restrict__ x, float *__restrict__ y, int n) {
    const int lane = threadIdx.x & 31, r0 = (blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5)) * R;
    if (r0 >= rows) return;
    /* blockIdx.y: tokens [MAXT y, MAXT y + MAXT) of the n in one launch, each pass's arithmetic as alone */
    const int nt = min(MAXT, n - (int)blockIdx.y * MAXT);
    x += (size_t)blockIdx.y * MAXT * cols;
    y += (size_t)blockIdx.y * MAXT * rows;
    const int P = piece<DT>::n, WV = piece<DT>::w;
    const bool quant = DT == DT_Q8 || DT == DT_Q4;
    const size_t row_bytes = DT == DT_Q4 ? (size_t)cols / 2 : DT == DT_Q8 ? (size_t)cols : (size_t)cols * (DT == DT_F32 ? 4 : 2);
    const int npieces = cols / P, ng = quant ? cols / group : 0;
    const bool x16 = !((uintptr_t)x & 15); /* cols % 4 == 0 here: every token's pieces are 16-byte aligned too */
    float acc[R][NT] = {};
    /* unrolled: a lane's next pieces' loads go out before this one's sums (the order of the sums is unchanged); a
     * router's 2048 f32 columns are 16 pieces a lane, which the loop waited for one after the other: one row a warp
     * and one token (a decode step's router: 128 rows on 32 CTAs) unroll 16, all of a lane's loads in flight */
    constexpr int UNR = R == 1 && NT == 1 ? 16 : 4;
#pragma unroll UNR
    for (int p = lane; p < npieces; p += 32) {
        uint4 wv[R];
        float s[R], b[R];
#pragma unroll
        for (int i = 0; i < R; i++) {
            const int r = r0 + i < rows ? r0 + i : rows - 1; /* a missing row repeats the last; not stored */
            wv[i] = __ldg((const uint4 *)(data + (size_t)r * row_bytes) + p);
            if (quant) {
                const size_t gi = (size_t)r * ng + (size_t)p * P / group;
                s[i] = scale_at(scales, sdt, gi);
                b[i] = scale_at(biases, sdt, gi);
            }
        }
        const float *xp = x + (size_t)p * P;
        /* f32 (a word is one value): each token's 4 x values of the piece in one 16-byte load, before the words. x is
         * the step's (a kernel before this one wrote it), so never __ldg: cuda_pdl.cuh */
        float4 x4[DT == DT_F32 ? NT : 1];
#pragma unroll
        for (int t = 0; t < (DT == DT_F32 ? NT : 0); t++)
            if (t < nt && x16) x4[t] = __ldcg((const float4 *)(xp + (size_t)t * cols));
        /* word by word: its codes unpacked once for every token */
        float d[R][NT], sx[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) {
            sx[t] = 0.f;
#pragma unroll
            for (int i = 0; i < R; i++) d[i][t] = 0.f;
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float w[R][WV];
#pragma unroll
            for (int i = 0; i < R; i++) unpack_word<DT>(word_of(wv[i], k), w[i]);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t >= nt) break;
                float xv[WV < 4 ? 4 : WV];
                const float *xt = xp + (size_t)t * cols + k * WV;
                if (DT == DT_F32 && x16) xv[0] = k == 0 ? x4[t].x : k == 1 ? x4[t].y : k == 2 ? x4[t].z : x4[t].w;
                else if (WV == 2 && x16) { /* bf16 / f16: the word's two x values in one 8-byte load */
                    const float2 q = __ldcg((const float2 *)xt);
                    xv[0] = q.x, xv[1] = q.y;
                }
                else if (WV >= 4) {
#pragma unroll
                    for (int j = 0; j < WV; j += 4) {
                        const float4 q = __ldcg((const float4 *)(xt + j));
                        xv[j] = q.x, xv[j + 1] = q.y, xv[j + 2] = q.z, xv[j + 3] = q.w;
                    }
                } else {
#pragma unroll
                    for (int j = 0; j < WV; j++) xv[j] = __ldcg(xt + j);
                }
                if (quant) {
#pragma unroll
                    for (int j = 0; j < WV; j++) sx[t] += xv[j];
                }
#pragma unroll
                for (int i = 0; i < R; i++)
#pragma unroll
                    for (int j = 0; j < WV; j++) d[i][t] = fmaf(w[i][j], xv[j], d[i][t]);
            }
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= nt) break;
#pragma unroll
            for (int i = 0; i < R; i++)
                acc[i][t] = quant ? fmaf(s[i], d[i][t], fmaf(b[i], sx[t], acc[i][t])) : acc[i][t] + d[i][t];
        }
    }
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float v = acc[i][t];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
            if (lane == 0 && t < nt && r0 + i < rows) y[(size_t)t * rows + r0 + i] = v;
        }
}

template <int DT, int NT, int R>
__global__ void __launch_bounds__(32 * ROWS_PER_BLOCK, NT >= 4 ? 2 : 4)
matvec(const uint8_t *__restrict__ data, const void *__restrict__ scales, const void *__restrict__ biases,
       dt_type sdt, int rows, int cols, int group, const float *__restrict__ x, float *__restrict__ y, int n) {
    pdl_wait();
    matvec_rows<DT, NT, R>(data, scales, biases, sdt, rows, cols, group, x, y, n);
}

/* One token's router (SLUICE_CUDA_FUSE=router): matvec<DT, 1, 1>'s rows, then the CTA that finishes last routes the
 * logits on its first warp (cuda_route.cuh route_warp_row: k_route_warp's code), so no second launch. Each CTA's
 * logits are fenced device-wide before its count (release); the last CTA fences after it (acquire) and reads them
 * past L1. No CTA waits for another (any number of CTAs, resident or not); the last resets done for the next
 * launch (stream order; a recorded step replays with it at zero). */
template <int DT>
__global__ void __launch_bounds__(32 * ROWS_PER_BLOCK, 4)
k_matvec_route(const uint8_t *__restrict__ data, const void *__restrict__ scales, const void *__restrict__ biases,
               dt_type sdt, int rows, int cols, int group, const float *__restrict__ x, float *__restrict__ y, slcu_router r,
               int *top_e, float *top_w, int *done) {
    pdl_wait();
    __shared__ float p[RT_MAXE];
    __shared__ int te[RT_MAXE];
    __shared__ float tw[RT_MAXE];
    __shared__ int last;
    matvec_rows<DT, 1, 1>(data, scales, biases, sdt, rows, cols, group, x, y, 1);
    __threadfence(); /* this CTA's logits, device-wide, before its count */
    __syncthreads();
    if (!threadIdx.x) last = atomicAdd(done, 1) == (int)gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence(); /* every other CTA's logits, after their counts */
    if (threadIdx.x < 32) route_warp_row(r, y, 0, top_e, top_w, p, te, tw, threadIdx.x);
    if (!threadIdx.x) *done = 0;
}

/* ---- SLUICE_CUDA_ROUTER=2 (cuda.h slcu_router_mode): one token's router on E warps (k_router2) ----
 * k_matvec_route's logits and choice, bitwise, in a shorter chain. Warp w of the grid makes row w (W warps a CTA: 1 by
 * default, so 128 CTAs for the 30B shape's 128 x 2048 router where k_matvec_route had 32 of 4 warps): lane l sums
 * the pieces l, l + 32, ... of the row in order, each piece's values by one fma chain from 0 (matvec_rows<DT, 1, 1>'s
 * order for one token: acc = acc + d, from 0), then the same butterfly, so the logits are matvec's bits. A lane's
 * first NPF pieces of weights are copied to shared memory before pdl_wait (no kernel of the step writes them:
 * cuda_pdl.cuh), so their latency hides under the kernel before (the norm triggers its dependents early); after it
 * the lane's x pieces likewise (past L1), all in flight at once, then the FMAs from shared memory. Rows over 32 NPF
 * pieces (NPF 16: over 2048 columns f32, 4096 bf16 / f16) load the rest after the wait. Lane 0 stores its row's
 * logit and counts the warp on done with one acq_rel atomic (the store released with it; no fence of the whole CTA,
 * no block barrier); the warp that completes the count (acquire) routes
 * the row on its own lanes: route_warp_row (kinds 0 and 1: k_matvec_route's code, so its bits) or route_warp_sig
 * (kind 2: k_route's bits), and sets done back to zero for the next launch (stream order; a recorded step replays it
 * at zero). Each CTA triggers its dependents after its wait (the experts' matvec waits before reading the choice). */
__device__ __forceinline__ int rt2_count(int *done) { /* the old count; lane 0's stores released with it */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    int old;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(old) : "l"(done) : "memory");
    return old;
#else
    __threadfence();
    return atomicAdd(done, 1);
#endif
}
__device__ __forceinline__ void rt2_acquire() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
#else
    __threadfence();
#endif
}

/* a 16-byte piece of weights copied to shared memory before pdl_wait (cp.async, 16 bytes, past L1): ptxas keeps it
 * above griddepcontrol.wait, as the matvecs' (cuda_mv.cu); an __ldg or an asm ld.global.nc was issued below the wait
 * (ptxas moved the wait up), so its latency did not overlap the kernel before */
__device__ __forceinline__ void rt2_cp16(uint4 *s, const uint4 *g, bool valid) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(s);
    /* not valid: 16 zero bytes, nothing read (src-size 0), so every word the FMAs read was written */
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(sa), "l"(g), "r"(valid ? 16 : 0) : "memory");
}

/* one 16-byte piece of weights against its P values of x (xq: WV float4s): the piece's fma chain from 0 in column
 * order, matvec_rows's d for one token and one row */
template <int DT>
__device__ __forceinline__ float rt2_piece(const uint4 &wv, const float4 *xq) {
    const int WV = piece<DT>::w;
    float xv[4 * WV];
#pragma unroll
    for (int q = 0; q < WV; q++)
        xv[4 * q] = xq[q].x, xv[4 * q + 1] = xq[q].y, xv[4 * q + 2] = xq[q].z, xv[4 * q + 3] = xq[q].w;
    float d = 0.f;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float w[WV];
        unpack_word<DT>(word_of(wv, k), w);
#pragma unroll
        for (int j = 0; j < WV; j++) d = fmaf(w[j], xv[k * WV + j], d);
    }
    return d;
}
template <int DT, int NPF>
__global__ void __launch_bounds__(32 * 4, 1)
k_router2(const uint8_t *__restrict__ data, int rows, int cols, const float *__restrict__ x, float *__restrict__ y,
          slcu_router r, int *top_e, float *top_w, int *done) {
    extern __shared__ uint4 rt2_sm[]; /* per warp [NPF][32] pieces of weights, [NPF][WV][32] of x; then route_warp_row's
                                       * p, te, tw [RT_MAXE] (not warp2) or route_warp_sig's [E] */
    const int WV = piece<DT>::w, lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
    const int row = blockIdx.x * (blockDim.x >> 5) + wi;
    if (row >= rows) return; /* (no global access: nothing to wait for) */
    const int P = piece<DT>::n, npieces = cols / P;
    const size_t row_bytes = (size_t)cols * (DT == DT_F32 ? 4 : 2);
    const uint4 *wp = (const uint4 *)(data + (size_t)row * row_bytes);
    uint4 *ws = rt2_sm + (size_t)wi * NPF * 32 * (1 + WV) + lane, *xs = ws + NPF * 32; /* a lane's at a stride of 32 */
#pragma unroll
    for (int j = 0; j < NPF; j++) { /* (a piece past the row: zeros, its address the row's first) */
        const bool in = lane + 32 * j < npieces;
        rt2_cp16(ws + 32 * j, wp + (in ? lane + 32 * j : 0), in);
    }
    pdl_wait();
    pdl_trigger();
    /* x, the step's, by cp.async too (.cg: past L1, as __ldcg): all of a lane's in flight at once (__ldcg's loads were
     * each issued next to their FMAs by ptxas, one L2 round trip a piece); each lane reads only what it copied */
    const uint4 *xg = (const uint4 *)x;
#pragma unroll
    for (int j = 0; j < NPF; j++) {
        const bool in = lane + 32 * j < npieces;
#pragma unroll
        for (int q = 0; q < WV; q++) rt2_cp16(xs + (j * WV + q) * 32, xg + (in ? (size_t)(lane + 32 * j) * WV + q : 0), in);
    }
    asm volatile("cp.async.wait_all;" ::: "memory"); /* the lane's own copies: no barrier */
    /* every piece's d without a branch (one block: ptxas overlaps the pieces' loads and chains; a piece past the row
     * is zeros and not summed), then the sum in piece order */
    float d[NPF];
#pragma unroll
    for (int j = 0; j < NPF; j++) {
        float4 xq[WV];
#pragma unroll
        for (int q = 0; q < WV; q++) {
            const uint4 u = xs[(j * WV + q) * 32];
            xq[q] = make_float4(__uint_as_float(u.x), __uint_as_float(u.y), __uint_as_float(u.z), __uint_as_float(u.w));
        }
        d[j] = rt2_piece<DT>(ws[32 * j], xq);
    }
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < NPF; j++)
        if (lane + 32 * j < npieces) acc = acc + d[j];
#pragma unroll 4
    for (int p = lane + 32 * NPF; p < npieces; p += 32) { /* rows past NPF pieces a lane */
        float4 xq[WV];
#pragma unroll
        for (int q = 0; q < WV; q++) xq[q] = __ldcg((const float4 *)(xg + (size_t)p * WV + q));
        acc = acc + rt2_piece<DT>(__ldg(wp + p), xq);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    int last = 0;
    if (!lane) {
        y[row] = acc;
        last = rt2_count(done) == rows - 1;
    }
    if (!__shfl_sync(0xffffffffu, last, 0)) return;
    rt2_acquire(); /* every other warp's logit, after its count */
    float *rs = (float *)(rt2_sm + (size_t)(blockDim.x >> 5) * NPF * 32 * (1 + WV));
    if (r.kind == 2) {
        const int E = r.E;
        if (E <= 64) route_warp_sig<2>(r, y, 0, top_e, top_w, rs, lane);
        else if (E <= 128) route_warp_sig<4>(r, y, 0, top_e, top_w, rs, lane);
        else route_warp_sig<8>(r, y, 0, top_e, top_w, rs, lane);
    } else route_warp_row(r, y, 0, top_e, top_w, rs, (int *)rs + RT_MAXE, rs + 2 * RT_MAXE, lane);
    if (!lane) *done = 0;
}

int slcu_router_mode = 1, slcu_router_warps = 1; /* cuda.h: SLUICE_CUDA_ROUTER (backend_cuda_hold.c fuse_env); tests */

/* slcu_matvec_route's SLUICE_CUDA_ROUTER=2 launch: 1 launched, 0 not its case, -1 failed */
static int router2(const slcu_mat *w, const float *x, float *logits, const slcu_router *r, int *top_e, float *top_w,
                   int *done, char *msg, size_t msglen) {
    const int dt = w->dtype, P = dt == DT_F32 ? 4 : 8;
    int W = slcu_router_warps == 2 || slcu_router_warps == 4 ? slcu_router_warps : 1;
    if (r->kind == 2 && (r->E > 256 || r->k > 32 || r->n_group < 1 || r->n_group > 64 || r->E % r->n_group ||
                         r->E / r->n_group < 2 || r->topk_group < 1 || r->topk_group > r->n_group))
        return 0;
    if ((uintptr_t)x & 15) return 0; /* x a step's row: aligned (cudaMalloc'd buffers) */
    const int npl = (w->cols / P + 31) / 32; /* pieces a lane */
    const int npf = npl <= 4 ? 4 : npl <= 8 ? 8 : 16, wv = dt == DT_F32 ? 1 : 2;
    const size_t rsm = r->kind == 2 ? (size_t)r->E * 4 : r->warp2 && r->k <= 32 && r->E <= 256 ? 0 : 3 * RT_MAXE * 4;
    while (W > 1 && (size_t)W * npf * 32 * 16 * (1 + wv) + rsm > 48 * 1024) W /= 2; /* the default limit of a launch */
    const size_t smem = (size_t)W * npf * 32 * 16 * (1 + wv) + rsm;
    const unsigned grid = (unsigned)((w->rows + W - 1) / W);
#define L(D, N) pdl_launch(k_router2<D, N>, grid, 32 * W, smem, SLS, (const uint8_t *)w->data, w->rows, w->cols, x, \
                           logits, *r, top_e, top_w, done)
#define LN(D) (npf == 4 ? L(D, 4) : npf == 8 ? L(D, 8) : L(D, 16))
    if (dt == DT_F32) LN(DT_F32);
    else if (dt == DT_BF16) LN(DT_BF16);
    else LN(DT_F16);
#undef LN
#undef L
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? fail(msg, msglen, "router launch (SLUICE_CUDA_ROUTER=2)", e) : 1;
}

/* Columns that do not fill 16-byte pieces (a row of f32 whose length is not a multiple of 4, ...):
 * one thread per (row, token), plain loads, the same kind of fixed order. */
__global__ void matvec_plain(const uint8_t *data, dt_type dt, int rows, int cols, const float *x, float *y, int nt) {
    pdl_wait();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * nt) return;
    const int r = i % rows, t = i / rows;
    float acc = 0.f;
    for (int c = 0; c < cols; c++) {
        const size_t k = (size_t)r * cols + c;
        float w = dt == DT_F32 ? ((const float *)data)[k]
                : dt == DT_BF16 ? __uint_as_float((unsigned)((const unsigned short *)data)[k] << 16)
                                : __half2float(__ushort_as_half(((const unsigned short *)data)[k]));
        acc = fmaf(w, x[(size_t)t * cols + c], acc);
    }
    y[(size_t)t * rows + r] = acc;
}

/* Rows per warp: 4 (each x load serves 4 rows), or 1 where 4 would leave most SMs idle (a router's 128 rows for a
 * few tokens: 8 blocks a pass). Many tokens (a prefill's router: 512 tokens are 64 passes) fill the device with 4,
 * where 1 read every x value once per row from L2 (the router took 141 us a layer at 512 tokens). R changes which
 * warp sums a row, never the order of its sums: bitwise either way. */
#define RPW 4
#define RPW_SMALL_ROWS 2048
#define RPW_MIN_CTAS 264 /* 2 CTAs of 4 warps per SM of an H100 */
/* n tokens in one launch (gridDim.y passes of MAXT; the last may be shorter: NT from the first pass) */
template <int DT>
static void launch(const slcu_mat *w, const float *x, float *y, int n) {
    const long ctas4 = (long)((w->rows + ROWS_PER_BLOCK * RPW - 1) / (ROWS_PER_BLOCK * RPW)) * ((n + MAXT - 1) / MAXT);
    const int r = w->rows < RPW_SMALL_ROWS && ctas4 < RPW_MIN_CTAS ? 1 : RPW, per_block = ROWS_PER_BLOCK * r, nt = n < MAXT ? n : MAXT;
    dim3 grid((unsigned)((w->rows + per_block - 1) / per_block), (unsigned)((n + MAXT - 1) / MAXT)), block(32 * ROWS_PER_BLOCK);
    const uint8_t *d = (const uint8_t *)w->data;
#define L(NT, R) \
    pdl_launch(matvec<DT, NT, R>, grid, block, 0, SLS, d, w->scales, w->biases, w->sdtype, w->rows, w->cols, w->group, x, y, n)
#define LR(NT) (r == 1 ? L(NT, 1) : L(NT, RPW))
    if (nt == 1) LR(1);
    else if (nt == 2) LR(2);
    else if (nt <= 4) LR(4);
    else LR(8);
#undef LR
#undef L
}

static int timing;
static float last_ms;
static cudaEvent_t ev0, ev1;

extern "C" void slcu_set_timing(int on) {
    if (on && !ev0) { cudaEventCreate(&ev0); cudaEventCreate(&ev1); }
    timing = on;
}
extern "C" float slcu_last_ms(void) { return last_ms; }

extern "C" int slcu_matmul(const slcu_mat *w, const float *x, float *y, int n, char *msg, size_t msglen) {
    const int P = w->dtype == DT_F32 ? 4 : w->dtype == DT_Q8 ? 16 : w->dtype == DT_Q4 ? 32 : 8;
    const int quant = w->dtype == DT_Q8 || w->dtype == DT_Q4;
    if (w->dtype != DT_F32 && w->dtype != DT_BF16 && w->dtype != DT_F16 && !quant) {
        if (msg && msglen) snprintf(msg, msglen, "the CUDA matmul has no kernel for %s weights", dt_name(w->dtype));
        return -1;
    }
    if (quant && (w->cols % w->group || w->group % 32)) {
        if (msg && msglen) snprintf(msg, msglen, "%s group %d does not fit %d columns", dt_name(w->dtype), w->group, w->cols);
        return -1;
    }
    if (timing) cudaEventRecord(ev0);
    if (w->cols % P && !quant) {
        const int th = 128;
        const size_t tot = (size_t)w->rows * (size_t)n;
        pdl_launch(matvec_plain, (unsigned)((tot + th - 1) / th), th, 0, SLS, (const uint8_t *)w->data, w->dtype, w->rows,
                   w->cols, x, y, n);
    } else if (w->dtype == DT_F32) launch<DT_F32>(w, x, y, n);
    else if (w->dtype == DT_BF16) launch<DT_BF16>(w, x, y, n);
    else if (w->dtype == DT_F16) launch<DT_F16>(w, x, y, n);
    else if (w->dtype == DT_Q8) launch<DT_Q8>(w, x, y, n);
    else launch<DT_Q4>(w, x, y, n);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return fail(msg, msglen, "matmul launch", e);
    if (timing) {
        cudaEventRecord(ev1);
        cudaEventSynchronize(ev1);
        cudaEventElapsedTime(&last_ms, ev0, ev1);
    }
    return 0;
}

/* cuda.h: 1 launched, 0 not this case (the caller runs slcu_matmul and slcu_route), -1 a launch failed */
extern "C" int slcu_matvec_route(const slcu_mat *w, const float *x, float *logits, const slcu_router *r, int *top_e,
                                 float *top_w, int *done, char *msg, size_t msglen) {
    const int dt = w->dtype, P = dt == DT_F32 ? 4 : 8;
    if ((dt != DT_F32 && dt != DT_BF16 && dt != DT_F16) || w->cols % P || w->rows != r->E || r->E > RT_MAXE ||
        r->k < 1 || r->k > r->E || r->kind < 0 || r->kind > 2 || !slcu_decode_kernels || !done || timing)
        return 0;
    if (slcu_router_mode == 2) {
        const int rc = router2(w, x, logits, r, top_e, top_w, done, msg, msglen);
        if (rc) return rc;
    }
    if (r->kind == 2) return 0; /* k_route's one thread after the matvec */
    const unsigned grid = (unsigned)((w->rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
#define L(D) pdl_launch(k_matvec_route<D>, grid, 32 * ROWS_PER_BLOCK, 0, SLS, (const uint8_t *)w->data, w->scales, w->biases, \
                                                                      w->sdtype, w->rows, w->cols, w->group, x, logits, \
                                                                      *r, top_e, top_w, done)
    if (dt == DT_F32) L(DT_F32);
    else if (dt == DT_BF16) L(DT_BF16);
    else L(DT_F16);
#undef L
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? fail(msg, msglen, "router matvec launch", e) : 1;
}

extern "C" int slcu_init(char *msg, size_t msglen) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return fail(msg, msglen, "no usable CUDA device (driver)", e);
    if (n < 1) {
        if (msg && msglen) snprintf(msg, msglen, "no CUDA device");
        return -1;
    }
    if ((e = cudaSetDevice(0)) != cudaSuccess) return fail(msg, msglen, "cannot use CUDA device 0", e);
    cudaFuncAttributes fa;
    if ((e = cudaFuncGetAttributes(&fa, matvec<DT_F32, 1, RPW>)) != cudaSuccess)
        return fail(msg, msglen, "this build's kernels do not run on CUDA device 0 (built for another architecture?)", e);
    return 0;
}

extern "C" void slcu_device_info(char *name, size_t namelen, uint64_t *total, uint64_t *freeb) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) == cudaSuccess && name) snprintf(name, namelen, "%s (sm_%d%d, %d SMs)", p.name, p.major, p.minor, p.multiProcessorCount);
    size_t f = 0, t = 0;
    cudaMemGetInfo(&f, &t);
    if (total) *total = t;
    if (freeb) *freeb = f;
}

extern "C" void *slcu_alloc(size_t bytes, char *msg, size_t msglen) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        fail(msg, msglen, "cudaMalloc", e);
        return NULL;
    }
    return p;
}
extern "C" void slcu_free(void *p) { if (p) cudaFree(p); }
extern "C" int slcu_upload(void *dst, const void *src, size_t bytes, char *msg, size_t msglen) {
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? 0 : fail(msg, msglen, "copy to the device", e);
}
extern "C" int slcu_download(void *dst, const void *src, size_t bytes, char *msg, size_t msglen) {
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? 0 : fail(msg, msglen, "copy from the device", e);
}

/* The bandwidth reference of benchmarks: one device-to-device copy, timed with events. */
extern "C" int slcu_bench_copy(void *dst, const void *src, size_t bytes, float *ms) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a);
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    cudaEventElapsedTime(ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return e == cudaSuccess ? 0 : -1;
}
