/*
 * cuda_flash_cl.cu — the decode attention over an f16 cache in one launch on a thread-block cluster
 * (SLUICE_CUDA_FA_CL, on unless =0; issue 24; docs/CUDA.md "The decode attention on a cluster").
 *
 * The decode pair (cuda_flash.cu k_fa16_part + k_fa16_comb) gives every 64-position chunk a warp and folds the chunks'
 * (m, l, o) in a second launch; at depth 512 (9 chunks) that is 12 CTAs whose lone warps load their K/V tiles one
 * warp at a time, then a launch more than depth 1's one-chunk end (SLUICE_CUDA_FA_ONE). Here, for 2 .. 16 chunks:
 *   - a cluster of CL CTAs per (KV head, row tile of 16 rows), CL = max(chunks, rows of the tile) (<= 16): CTA x takes
 *     chunk x as the one-chunk end does (cuda_flash.cu fa16_part_cta's fin branch): its W warps load the chunk's q, K
 *     and V tiles together, every warp computes the same scores from them (f16_scores), warp w takes P V for its dims
 *     (each 16 x 8 tile of o keeps its 4-step key chain, so any split of the dims gives k_fa16_part's floats), and the
 *     CTA writes (m, l) and o where k_fa16_part writes them (the same layout, the same values);
 *   - the cluster's barrier (release / acquire at cluster scope; the partials read past L1, __ldcg);
 *   - CTA x folds rows x, x + CL, ... of the tile with fa16_comb_row (k_fa16_comb's own device function: the same
 *     chunks in the same order, the same operations), and the head's int8 form sums as k_fa16_comb does.
 * So every row's bits are the decode pair's. One launch, 2 .. 16 CTAs a KV head where k_fa16_part had 1 .. 4 of one
 * busy warp each; the launch ends the attention and lets the matvec after it start (pdl_trigger). Clusters of more
 * than 8 CTAs are non-portable (H100: 16 allowed); where the device cannot hold 16 the launch takes 8 at most, and
 * the caller keeps the pair past that. Recorded steps (a position from the device) keep the pair.
 * Beyond 16 chunks the pair stays, at head_dim <= 128 with k_fa16_part letting the fold start early and k_fa16_comb2's
 * scan fold (fa16_comb_row_sc, bitwise fa16_comb_row); where the deeper folds lost on an H100 the fold is k_fa16_comb's
 * as before (cuda_flash.cu fl_deep says which; SLUICE_CUDA_FA_CL=2 takes them everywhere, to time them).
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <utility>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_quant.cuh"
#include "backend/cuda/cuda_flash.cuh"

#define CL_MAX 16 /* CTAs a cluster at most (non-portable above 8) */
static int cl_launches; /* cluster launches made (tests: slcu_fa16_cl_launches) */

/* the cluster's barrier: every CTA's partials (global stores) released to the cluster before any CTA reads them */
static __device__ __forceinline__ void cl_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

/* CTA x (= ci, the chunk) of the cluster of CL for KV head kvh, rows 16 bz .. 16 bz + 15. Shared memory: q [16][HDP + 8],
 * K and V [64][HDP + 8] halves (the one-chunk end's place). Every thread reaches the cluster's barrier. */
template <int HDP, int W>
static __device__ __forceinline__ void fa16_cl_cta(const slcu_attn &p, int nchs, float *po, float *ml, int app,
                                                   const slcu_act &qa, int ci, int CL, int kvh, int bz) {
    constexpr int S = HDP + 8, DW = HDP / W < 16 ? 16 : HDP / W, DB = DW < 64 ? DW : 64; /* a warp's dims; P V's block */
    extern __shared__ uint4 f16_smem[];
    const int G = p.n_heads / p.n_kv, nrows = p.n * G, r0 = bz * 16;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    int lo[2], hi[2], clo, chi, base, d;
    f16_range(p, r0 + g, nrows, G, lo[0], hi[0]);
    f16_range(p, r0 + g + 8, nrows, G, lo[1], hi[1]);
    f16_range(p, 0, nrows, G, base, d); /* chunk ci is base / 64 + ci (k_fa16_part's and k_fa16_comb's numbering) */
    f16_range(p, r0, nrows, G, clo, d);
    f16_range(p, min(r0 + 16, nrows) - 1, nrows, G, d, chi);
    const int c0 = (base / FA16_C + ci) * FA16_C;
    if (ci < nchs && c0 <= chi && c0 + FA16_C - 1 >= clo) { /* CTA-uniform: k_fa16_part's warp for this chunk works */
        __half *q0 = (__half *)f16_smem, *k0 = q0 + 16 * S, *v0 = k0 + FA16_C * S;
        f16_load_q<HDP>(p, q0, r0, 16, nrows, G, kvh, threadIdx.x, W * 32);
        f16_load_kv<HDP>(p, k0, v0, c0, clo, chi, kvh, threadIdx.x, W * 32);
        fl_cp_commit();
        fl_cp_wait<0>();
        __syncthreads();
        if (app && p.pos0 >= c0 && p.pos0 < c0 + FA16_C) { /* over the old bytes every thread's copies put there */
            if (!warp) f16_append_row<HDP>(p, k0, v0, p.pos0 - c0, kvh, lane);
            __syncthreads();
        }
        float m[2], l[2];
        uint32_t pa[4][4];
        f16_scores<HDP>(q0, k0, c0, lo, hi, p.scale, m, l, pa);
        if (!warp && !tig)
#pragma unroll
            for (int i = 0; i < 2; i++)
                if (r0 + g + 8 * i < nrows) {
                    float *q = ml + ((size_t)(kvh * nrows + r0 + g + 8 * i) * nchs + ci) * 2;
                    q[0] = m[i], q[1] = l[i];
                }
        for (int d0 = warp * DW; d0 < warp * DW + DW && d0 < HDP; d0 += DB) {
            float o[DB / 8][4];
            f16_pv<HDP, DB>(pa, v0, d0, o);
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int R = r0 + g + 8 * i;
                if (R >= nrows) continue;
                float *q = po + ((size_t)(kvh * nrows + R) * nchs + ci) * HDP + d0 + tig * 2;
#pragma unroll
                for (int nt = 0; nt < DB / 8; nt++) *(float2 *)(q + nt * 8) = make_float2(o[nt][2 * i], o[nt][2 * i + 1]);
            }
        }
    }
    cl_sync();
    const int nt = W * 32;
    for (int r = ci; r < 16 && r0 + r < nrows; r += CL) { /* CTA-uniform */
        const int R = r0 + r;
        fa16_comb_row(p, nchs, HDP, po, ml, qa, kvh * nrows + R, threadIdx.x, nt);
        if (!qa.q) continue;
        __syncthreads(); /* the head's block sums are written */
        const int h = kvh * G + R % G;
        quant_sums(qa, p.n_heads * p.hd / 32, h * p.hd / 32, p.hd / 32, threadIdx.x, nt);
    }
}

/* grid (CL, n_kv, row tiles), clusters of (CL, 1, 1): the whole x extent is one cluster */
template <int HDP, int W>
__global__ void __launch_bounds__(W * 32) k_fa16_cl(slcu_attn p, int nchs, float *po, float *ml, int app, slcu_act qa) {
    pdl_wait();
    pdl_trigger(); /* no launch after it for the attention: the matvec after it may start loading its weights */
    fa16_cl_cta<HDP, W>(p, nchs, po, ml, app, qa, blockIdx.x, gridDim.x, blockIdx.y, blockIdx.z);
}

/* a decode batch's items (cuda_flash.cu f16_items' table): blockIdx.z = item * tiles + row tile, each item's clusters
 * run k_fa16_cl's code on the item's own attention, chunk count and partials (one token each: its row appended; no
 * int8 form), so each item's bits are its pair's alone; an item of fewer chunks than the cluster leaves CTAs that only
 * fold (or wait at the barrier) */
template <int HDP, int W>
__global__ void __launch_bounds__(W * 32) k_fa16_cl_items(const __grid_constant__ fa_items I, int tiles) {
    pdl_wait();
    pdl_trigger(); /* no launch after it for the attention: the matvec after it may start loading its weights */
    const fa_item &it = I.it[blockIdx.z / tiles];
    const slcu_act qz = {};
    fa16_cl_cta<HDP, W>(it.a, it.nchs, it.po, it.ml, 1, qz, blockIdx.x, gridDim.x, blockIdx.y, blockIdx.z % tiles);
}

/* fa16_comb_row's fold of row R with the running max and the exponentials off the per-dim chain (one dim a thread:
 * head_dim <= blockDim.x <= 128). The chunks go in segments of blockDim.x, thread t taking chunk t of a segment:
 * M_c = max(M, m_0 .. m_c) by a scan (max is exact, so any grouping gives the serial chain's value; a NaN is
 * skipped as fmaxf skips it there, and a zero's sign, the one thing a grouping may change, reaches a and b only
 * through exp of a difference: exp(+-0) = 1, x - (+-0) = x), then a_c = exp(M_{c-1} - M_c) and b_c = exp(m_c - M_c)
 * exactly as f16_fold makes them, staged in shared memory; then each thread's L and O chains, fmul + fma a chunk in
 * increasing order (f16_mix: f16_fold's L update is f16_mix(L, l, a, b)), with the next 2 SC_FB chunks' o in flight
 * (the segment's first 64 issued before its exponentials).
 * The same floats in the same order: bitwise fa16_comb_row. Every thread of the CTA calls it (barriers). */
#define SC_FB 32
static __device__ __forceinline__ void sc_ld(const float *ob, int hdp, int c, int n, int dd, bool on, float o[SC_FB]) {
#pragma unroll
    for (int u = 0; u < SC_FB; u++)
        if (on && c + u < n) o[u] = __ldcg(ob + (size_t)(c + u) * hdp + dd);
}
static __device__ __forceinline__ void sc_fold(const float2 *sab, const float *sl, int c, int n, const float o[SC_FB],
                                               float &L, float &O) {
#pragma unroll
    for (int u = 0; u < SC_FB; u++)
        if (c + u < n) {
            const float2 w = sab[c + u];
            L = f16_mix(L, sl[c + u], w.x, w.y);
            O = f16_mix(O, o[u], w.x, w.y);
        }
}
static __device__ void fa16_comb_row_sc(const slcu_attn &p, int nchs, int hdp, const float *po, const float *ml,
                                        const slcu_act &qa, int R) {
    __shared__ float2 sab[128];
    __shared__ float sl[128], wmx[4];
    const int tid = threadIdx.x, nthr = blockDim.x, lane = tid & 31, warp = tid >> 5, nw = nthr >> 5;
    const int G = p.n_heads / p.n_kv, nrows = p.n * G, kvh = R / nrows, r = R % nrows;
    int lo, hi, clo, d;
    f16_range(p, r, nrows, G, lo, hi);
    f16_range(p, 0, nrows, G, clo, d);
    const int t = r / G, h = kvh * G + r % G, cb0 = clo / FA16_C;
    const int ci0 = max(lo / FA16_C - cb0, 0), ci1 = min(hi / FA16_C - cb0, nchs - 1);
    const float *qv = p.q + (size_t)t * p.ldq + (size_t)h * p.qstride, *mr = ml + (size_t)R * nchs * 2;
    const bool on = tid < p.hd;
    float M = -INFINITY, L = 0.0f, O = 0.0f;
    for (int s0 = ci0; s0 <= ci1; s0 += nthr) {
        const int n = min(nthr, ci1 - s0 + 1);
        const float *ob = po + ((size_t)R * nchs + s0) * hdp;
        float o0[SC_FB], o1[SC_FB];
        sc_ld(ob, hdp, 0, n, tid, on, o0); /* in flight while the exponentials are made */
        sc_ld(ob, hdp, SC_FB, n, tid, on, o1);
        const bool mine = tid < n;
        const float m = mine ? __ldcg(mr + 2 * (s0 + tid)) : -INFINITY, l = mine ? __ldcg(mr + 2 * (s0 + tid) + 1) : 0.0f;
        float x = m; /* the warp's inclusive max up to this lane */
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float y = __shfl_up_sync(0xffffffffu, x, o);
            if (lane >= o) x = fmaxf(x, y);
        }
        const float xe = __shfl_up_sync(0xffffffffu, x, 1);
        if (lane == 31) wmx[warp] = x;
        __syncthreads();
        float pre = M, tot = M; /* the max before this warp's chunks; after the segment's */
        for (int w = 0; w < nw; w++) {
            if (w < warp) pre = fmaxf(pre, wmx[w]);
            tot = fmaxf(tot, wmx[w]);
        }
        if (mine) {
            const float Mp = lane ? fmaxf(pre, xe) : pre, Mn = fmaxf(pre, x);
            sab[tid] = make_float2(expf(__fsub_rn(Mp, Mn)), expf(__fsub_rn(m, Mn))), sl[tid] = l;
        }
        __syncthreads();
        for (int c = 0; c < n; c += 2 * SC_FB) { /* two batches of o always in flight */
            sc_fold(sab, sl, c, n, o0, L, O);
            sc_ld(ob, hdp, c + 2 * SC_FB, n, tid, on, o0);
            sc_fold(sab, sl, c + SC_FB, n, o1, L, O);
            sc_ld(ob, hdp, c + 3 * SC_FB, n, tid, on, o1);
        }
        M = tot;
        __syncthreads(); /* sab, sl and wmx are read before the next segment writes them */
    }
    if (!on) return;
    const float v = f16_final(p, h, M, L, O, p.gated ? qv + p.hd + tid : NULL);
    p.out[(size_t)t * p.ldo + (size_t)h * p.hd + tid] = v;
    if (qa.q) quant_lane(v, h * p.hd + tid, lane, qa);
}

/* k_fa16_comb with the fold's loads in flight: a CTA per row; SC: fa16_comb_row_sc (a thread has one dim), else
 * fa16_comb_row_pf (head_dim 256: its loads two batches deep, the exponentials on each dim's chain as before); two
 * instances, so neither's registers are the other's (one kernel with both: 255 and 68 bytes of spills) */
template <int SC>
__global__ void k_fa16_comb2(slcu_attn p, const int *pd, int nchs, int hdp, const float *po, const float *ml, slcu_act qa) {
    pdl_wait();
    pdl_trigger(); /* the matvec after it may start loading its weights (cuda_pdl.cuh) */
    if (pd) p.pos0 = *pd;
    if (SC) fa16_comb_row_sc(p, nchs, hdp, po, ml, qa, blockIdx.x);
    else fa16_comb_row_pf(p, nchs, hdp, po, ml, qa, blockIdx.x, threadIdx.x, blockDim.x);
    if (!qa.q) return;
    __syncthreads(); /* the head's block sums are written */
    const int G = p.n_heads / p.n_kv, nrows = p.n * G, h = blockIdx.x / nrows * G + blockIdx.x % nrows % G;
    quant_sums(qa, p.n_heads * p.hd / 32, h * p.hd / 32, p.hd / 32, threadIdx.x, blockDim.x);
}

/* k_fa16_comb_items' rows (a CTA per (item, row); the items ended in k_fa16_part_items return at once) with
 * k_fa16_comb2's folds: SLUICE_CUDA_FA_CL=2 (cuda_flash.cu fl_deep) */
template <int SC>
__global__ void k_fa16_comb2_items(const __grid_constant__ fa_items I, int per, int hdp) {
    pdl_wait();
    pdl_trigger(); /* the matvec after it may start loading its weights (cuda_pdl.cuh) */
    const fa_item &it = I.it[blockIdx.x / per];
    if (it.fin) return; /* (CTA-uniform: before any barrier) */
    const slcu_act qz = {};
    if (SC) fa16_comb_row_sc(it.a, it.nchs, hdp, it.po, it.ml, qz, blockIdx.x % per);
    else fa16_comb_row_pf(it.a, it.nchs, hdp, it.po, it.ml, qz, blockIdx.x % per, threadIdx.x, blockDim.x);
}

/* kern on a grid (cl, ny, nz) in clusters of (cl, 1, 1), nthr threads and sm bytes of shared memory a CTA, with PDL
 * while pdl_all(): 0 launched, 1 not taken (a cluster of cl more than the device holds for kern, or a launch it
 * refused: nothing launched, the caller runs the pair). *most: the largest cluster the device holds for kern, asked on kern's first launch (its attributes set,
 * then cudaOccupancyMaxActiveClusters at 16 and 8; -1: none). */
template <typename... P, typename... A>
static int cl_go(void (*kern)(P...), int *most, int cl, unsigned ny, unsigned nz, int nthr, size_t sm, char *msg,
                 size_t msglen, A &&...args) {
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = (unsigned)cl, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)cl, ny, nz), cfg.blockDim = dim3((unsigned)nthr), cfg.dynamicSmemBytes = sm;
    cfg.stream = SLS, cfg.attrs = at, cfg.numAttrs = pdl_all() ? 2 : 1;
    if (!*most) {
        cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
        if (!e) e = cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        *most = -1;
        for (int c = CL_MAX; !e && c >= 8 && *most < 0; c /= 2) {
            cudaLaunchConfig_t q = cfg;
            cudaLaunchAttribute qc = at[0];
            qc.val.clusterDim.x = (unsigned)c;
            q.gridDim.x = (unsigned)c, q.attrs = &qc, q.numAttrs = 1;
            int k = 0;
            if (cudaOccupancyMaxActiveClusters(&k, kern, &q) == cudaSuccess && k > 0) *most = c;
        }
        (void)cudaGetLastError(); /* a refused attribute or query is not the next launch's error */
    }
    if (*most < 0 || cl > *most) return 1;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kern, std::forward<A>(args)...);
    if (e == cudaSuccess) return cl_launches++, 0;
    /* a launch the device refuses (its configuration: nothing ran) leaves the pair for good; tests count the launches
     * (slcu_fa16_cl_launches), so a refused cluster does not pass their checks unseen */
    (void)cudaGetLastError();
    *most = -1;
    (void)msg, (void)msglen;
    return 1;
}

/* the cluster: a CTA a chunk, and at least a CTA a row of the tile (each folds one) */
static int cl_size(int nchs, int nrows) {
    const int trow = nrows < 16 ? nrows : 16;
    return nchs > trow ? nchs : trow;
}

template <int HDP>
static int cl_launch(const slcu_attn *a, int nchs, float *po, float *ml, int app, const slcu_act *qa, char *msg, size_t msglen) {
    constexpr int W = HDP >= 256 ? 2 : 4;
    static int most;
    const int nrows = a->n * (a->n_heads / a->n_kv);
    const slcu_act qz = {};
    return cl_go(k_fa16_cl<HDP, W>, &most, cl_size(nchs, nrows), (unsigned)a->n_kv, (unsigned)((nrows + 15) / 16), W * 32,
                 (size_t)(16 + 2 * FA16_C) * (HDP + 8) * 2, msg, msglen, *a, nchs, po, ml, app, qa ? *qa : qz);
}

template <int HDP>
static int cl_items(const fa_items *I, int n, int most_chunks, char *msg, size_t msglen) {
    constexpr int W = HDP >= 256 ? 2 : 4;
    static int most;
    const slcu_attn *a = &I->it[0].a;
    const int G = a->n_heads / a->n_kv, tiles = (G + 15) / 16;
    return cl_go(k_fa16_cl_items<HDP, W>, &most, cl_size(most_chunks, G), (unsigned)a->n_kv, (unsigned)(n * tiles), W * 32,
                 (size_t)(16 + 2 * FA16_C) * (HDP + 8) * 2, msg, msglen, *I, tiles);
}

/* cuda_flash.cuh: the attention of a (decode, 2 .. 16 chunks, no recorded step) on clusters */
int fa16_cl_launch(const slcu_attn *a, int hdp, int nchs, float *po, float *ml, int app, const slcu_act *qa, char *msg,
                   size_t msglen) {
    if (nchs < 2 || nchs > CL_MAX) return 1;
    switch (hdp) {
    case 16: return cl_launch<16>(a, nchs, po, ml, app, qa, msg, msglen);
    case 32: return cl_launch<32>(a, nchs, po, ml, app, qa, msg, msglen);
    case 64: return cl_launch<64>(a, nchs, po, ml, app, qa, msg, msglen);
    case 128: return cl_launch<128>(a, nchs, po, ml, app, qa, msg, msglen);
    case 256: return cl_launch<256>(a, nchs, po, ml, app, qa, msg, msglen);
    }
    return 1;
}

/* cuda_flash.cuh: a decode batch's items on clusters */
int fa16_cl_items_launch(const fa_items *I, int n, int hdp, int most, char *msg, size_t msglen) {
    if (n < 1 || most > CL_MAX) return 1;
    switch (hdp) {
    case 16: return cl_items<16>(I, n, most, msg, msglen);
    case 32: return cl_items<32>(I, n, most, msg, msglen);
    case 64: return cl_items<64>(I, n, most, msg, msglen);
    case 128: return cl_items<128>(I, n, most, msg, msglen);
    case 256: return cl_items<256>(I, n, most, msg, msglen);
    }
    return 1;
}

/* cuda_flash.cuh: k_fa16_comb2 over a's rows (the pair's second launch, its loads two batches deep) */
void fa16_comb2_launch(const slcu_attn *a, const int *pd, int nchs, int hdp, const float *po, const float *ml, const slcu_act *qa) {
    const int nrows = a->n * (a->n_heads / a->n_kv);
    const slcu_act qz = {};
    const int nthr = a->hd < 128 ? 32 * ((a->hd + 31) / 32) : 128;
    pdl_launch(a->hd <= nthr ? k_fa16_comb2<1> : k_fa16_comb2<0>, (unsigned)(a->n_kv * nrows), nthr, 0, SLS, *a, pd, nchs, hdp,
               po, ml, qa ? *qa : qz);
}

/* cuda_flash.cuh: k_fa16_comb2_items over n items (k_fa16_comb_items' grid and threads) */
void fa16_comb2_items_launch(const fa_items *I, int n, int hdp) {
    const slcu_attn *a = &I->it[0].a;
    const int nthr = a->hd < 128 ? 32 * ((a->hd + 31) / 32) : 128;
    pdl_launch(a->hd <= nthr ? k_fa16_comb2_items<1> : k_fa16_comb2_items<0>, (unsigned)(n * a->n_heads), nthr, 0, SLS, *I,
               a->n_heads, hdp);
}

/* cuda.h: how many cluster launches this process made (tests: the checks ran the cluster, not the pair it falls back to) */
extern "C" int slcu_fa16_cl_launches(void) { return cl_launches; }
