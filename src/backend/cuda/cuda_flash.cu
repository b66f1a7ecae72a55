/*
 * cuda_flash.cu — attention over an f16 KV cache on tensor cores (--kv f16 with --gpu; issues 24 and 28).
 *
 * The order of every (token, head) — the same in the prefill and the decode kernels, so token by token ==
 * prefill and a sequence in a batch == alone stay bitwise:
 *   - the positions are cut in fixed chunks of FA16_C = 64 (positions 64c .. 64c + 63, absolute); a chunk that
 *     holds none of the row's keys (p0 .. pos) is skipped;
 *   - per chunk: scores s = (q16 . k) * scale by mma.sync m16n8k16 (q rounded to f16, f32 accumulation over
 *     head_dim in 16-column steps), keys outside p0 .. pos masked; m = the chunk's max; e = exp(s - m) in f32;
 *     l = their sum in a fixed order (a thread's 16 in increasing key, then the quad's xor 1, xor 2 tree);
 *     o = P16 V by mma (e rounded to f16, f32 accumulation over the chunk's 64 keys in 16-key steps);
 *   - the chunks folded in increasing order: M' = max(M, m), a = exp(M - M'), b = exp(m - M'),
 *     L = l b + L a, O = o b + O a (f32, explicit roundings; M, L, O start at -inf, 0, 0);
 *   - sinks: M' = max(M, sink), a = exp(M - M'), L = L a + exp(sink - M'), O = O a; out = O / L, gated times
 *     sigmoid(gate).
 * Each row's result depends on its own query and the cache's values only (an mma's output element reads its own
 * row of A; a masked key's product is an exact zero). The prefill kernel (k_fa16_fold) folds the chunks in
 * registers, a CTA per 64 rows (token, query head) of a KV head; the decode kernels (k_fa16_part, k_fa16_comb)
 * give every chunk a warp of its own (all SMs at depth) and fold the chunks' (m, l, o) in a second kernel with
 * the same operations. Rows of a KV head: r = t * G + g (token t, query head kvh * G + g).
 * Every kernel waits (pdl_wait) before its first global access and is launched by cuda_pdl.cuh pdl_launch.
 * Map: the device helpers in cuda_flash.cuh; the f16 kernels (prefill, the decode pair, a decode batch's items); the
 * f32 kernels; the launches. SLUICE_CUDA_FA_CL's kernels (2 .. 16 chunks in one launch on clusters, the deeper folds)
 * are cuda_flash_cl.cu's.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_quant.cuh"
#include "backend/cuda/cuda_flash.cuh" /* the helpers: FA16_C, f16_fold, f16_scores, ... */

#define FA16_FW 4 /* warps of the prefill kernel: 64 rows a CTA */

/* Prefill: a CTA per 64 rows of KV head blockIdx.y, the chunks in order folded in registers. Shared memory:
 * qs [64][HDP + 8], ks and vs [64][HDP + 8] halves. */
template <int HDP>
__global__ void __launch_bounds__(FA16_FW * 32) k_fa16_fold(const slcu_attn p) {
    pdl_wait();
    pdl_trigger(); /* the matvec after it may start loading its weights (cuda_pdl.cuh) */
    constexpr int S = HDP + 8, DB = HDP < 64 ? HDP : 64;
    extern __shared__ uint4 f16_smem[];
    __half *qs = (__half *)f16_smem, *kv0 = qs + FA16_FW * 16 * S; /* two buffers of K [64][S] then V [64][S] */
    const int G = p.n_heads / p.n_kv, nrows = p.n * G, kvh = blockIdx.y, r0 = blockIdx.x * FA16_FW * 16;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tig = lane & 3;
    int lo[2], hi[2], clo, chi, wlo, whi, d;
    f16_range(p, r0 + warp * 16 + g, nrows, G, lo[0], hi[0]);
    f16_range(p, r0 + warp * 16 + g + 8, nrows, G, lo[1], hi[1]);
    f16_range(p, r0, nrows, G, clo, d);                                           /* the CTA's first key */
    f16_range(p, min(r0 + FA16_FW * 16, nrows) - 1, nrows, G, d, chi);            /* and last */
    f16_range(p, r0 + warp * 16, nrows, G, wlo, d);                               /* the warp's */
    f16_range(p, min(r0 + warp * 16 + 16, max(nrows, r0 + warp * 16 + 1)) - 1, nrows, G, d, whi);
    f16_load_q<HDP>(p, qs, r0, FA16_FW * 16, nrows, G, kvh, tid, FA16_FW * 32);
    float M[2] = {-INFINITY, -INFINITY}, L[2] = {0.0f, 0.0f}, O[HDP / 8][4];
#pragma unroll
    for (int nt = 0; nt < HDP / 8; nt++) O[nt][0] = O[nt][1] = O[nt][2] = O[nt][3] = 0.0f;
    { /* the first chunk's tiles into its own buffer: chunk c reads buffer c & 1 (an odd first chunk, a window's,
       * read the unloaded buffer 1 before this: call C's NaN, w 50 at position 250) */
        __half *fk = kv0 + ((clo / FA16_C) & 1) * 2 * FA16_C * S;
        f16_load_kv<HDP>(p, fk, fk + FA16_C * S, clo / FA16_C * FA16_C, clo, chi, kvh, tid, FA16_FW * 32);
    }
    fl_cp_commit();
    for (int c = clo / FA16_C; c <= chi / FA16_C; c++) {
        const int c0 = c * FA16_C;
        __half *ks = kv0 + (c & 1) * 2 * FA16_C * S, *vs = ks + FA16_C * S, *nk = kv0 + (~c & 1) * 2 * FA16_C * S;
        __syncthreads();        /* the other buffer (the previous chunk's) is read */
        if (c < chi / FA16_C) { /* the next chunk's tiles into it while this one computes */
            f16_load_kv<HDP>(p, nk, nk + FA16_C * S, c0 + FA16_C, clo, chi, kvh, tid, FA16_FW * 32);
            fl_cp_commit();
            fl_cp_wait<1>();
        } else {
            fl_cp_wait<0>();
        }
        __syncthreads(); /* this chunk's tiles (and qs) are in */
        if (wlo > whi || c0 > whi || c0 + FA16_C - 1 < wlo) continue; /* none of the warp's rows has a key here */
        float m[2], l[2], a[2], b[2];
        uint32_t pa[4][4];
        f16_scores<HDP>(qs + warp * 16 * S, ks, c0, lo, hi, p.scale, m, l, pa);
        bool on[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            on[i] = lo[i] <= hi[i] && c0 <= hi[i] && c0 + FA16_C - 1 >= lo[i];
            if (on[i]) f16_fold(M[i], L[i], m[i], l[i], a[i], b[i]);
        }
#pragma unroll
        for (int d0 = 0; d0 < HDP; d0 += DB) {
            float o[DB / 8][4];
            f16_pv<HDP, DB>(pa, vs, d0, o);
#pragma unroll
            for (int nt = 0; nt < DB / 8; nt++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    if (on[j >> 1]) O[d0 / 8 + nt][j] = f16_mix(O[d0 / 8 + nt][j], o[nt][j], a[j >> 1], b[j >> 1]);
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int R = r0 + warp * 16 + g + 8 * i;
        if (R >= nrows) continue;
        const int t = R / G, h = kvh * G + R % G;
        const float *qv = p.q + (size_t)t * p.ldq + (size_t)h * p.qstride;
#pragma unroll
        for (int nt = 0; nt < HDP / 8; nt++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const int dd = nt * 8 + tig * 2 + j;
                if (dd < p.hd)
                    p.out[(size_t)t * p.ldo + (size_t)h * p.hd + dd] =
                        f16_final(p, h, M[i], L[i], O[nt][2 * i + j], p.gated ? qv + p.hd + dd : NULL);
            }
    }
}

/* Decode: warp w of CTA (x, kvh, z) takes chunk cfirst + 4x + w for rows 16z .. 16z + 15 of KV head kvh and writes
 * its (m, l) to ml [R][nchs][2] and o to po [R][nchs][HDP] (R = kvh * nrows + row). Shared memory per warp: qs
 * [16][HDP + 8], ks and vs [64][HDP + 8]. pd: the position from the device (a recorded step). */
/* row(i, R) for each of the thread's two rows of a 16-row tile, R = r0 + g + 8 i, below nrows: the walk of a P V
 * block's rows that k_fa16_part's partials and fa16_part_fin's ends take */
template <typename F>
static __device__ __forceinline__ void f16_tile_rows(int r0, int g, int nrows, F row) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int R = r0 + g + 8 * i;
        if (R >= nrows) continue;
        row(i, R);
    }
}
/* done (one token, no recorded step, nrows <= 16: one row tile; fl_fuse): a counter per KV head; the warp that
 * finishes its head's last chunk folds the head's rows (fa16_comb_row, its 32 lanes) with [qa's int8 form], so
 * k_fa16_comb is not launched: the same operations on the same partials, whichever warp comes last.
 * fin (SLUICE_CUDA_FA_ONE, on unless =0; nchs 1: every row's keys in one chunk, no recorded step): the CTA's warps compute the
 * chunk together and end its rows (fa16_part_fin), k_fa16_comb not launched.
 * fa16_part_cta is the body for CTA (bx, kvh, bz) of p: k_fa16_part's, and each item's in k_fa16_part_items. */
template <int HDP, int W>
static __device__ __forceinline__ void fa16_part_fin(const slcu_attn &p, const float m[2], const float l[2],
                                                     const uint32_t pa[4][4], const __half *vs, float *st, const slcu_act &qa,
                                                     int r0, int kvh);
template <int HDP, int W>
static __device__ __forceinline__ void fa16_part_cta(const slcu_attn &p, int nchs, float *po, float *ml, int app, int *done,
                                                     const slcu_act &qa, int bx, int kvh, int bz, int fin) {
    constexpr int S = HDP + 8, DB = HDP < 64 ? HDP : 64;
    extern __shared__ uint4 f16_smem[];
    const int G = p.n_heads / p.n_kv, nrows = p.n * G, r0 = bz * 16;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    __half *qs = (__half *)f16_smem + (size_t)warp * (16 + 2 * FA16_C) * S, *ks = qs + 16 * S, *vs = ks + FA16_C * S;
    int lo[2], hi[2], clo, chi, base, d;
    f16_range(p, r0 + g, nrows, G, lo[0], hi[0]);
    f16_range(p, r0 + g + 8, nrows, G, lo[1], hi[1]);
    f16_range(p, 0, nrows, G, base, d); /* chunk ci is base / 64 + ci for every tile (k_fa16_comb's numbering) */
    f16_range(p, r0, nrows, G, clo, d);
    f16_range(p, min(r0 + 16, nrows) - 1, nrows, G, d, chi);
    const int ci = bx * W + warp, c0 = (base / FA16_C + ci) * FA16_C;
    float m[2], l[2];
    uint32_t pa[4][4];
    if (fin) { /* the one chunk (CTA x 0's; an items launch may be wider) by the CTA's W warps: its tiles loaded
                * together into warp 0's place (a quarter of the serial load rounds a lane), every warp computing the
                * same scores from them, then its share of P V and of the rows' ends (fa16_part_fin) */
        if (bx) return; /* the whole CTA (every warp of a CTA takes this branch: fin is its launch's, or its item's) */
        __half *q0 = (__half *)f16_smem, *k0 = q0 + 16 * S, *v0 = k0 + FA16_C * S;
        const int f0 = base / FA16_C * FA16_C;
        f16_load_q<HDP>(p, q0, r0, 16, nrows, G, kvh, threadIdx.x, W * 32);
        f16_load_kv<HDP>(p, k0, v0, f0, clo, chi, kvh, threadIdx.x, W * 32);
        fl_cp_commit();
        fl_cp_wait<0>();
        __syncthreads();
        if (app && p.pos0 >= f0 && p.pos0 < f0 + FA16_C) { /* over the old bytes every thread's copies put there */
            if (!warp) f16_append_row<HDP>(p, k0, v0, p.pos0 - f0, kvh, lane);
            __syncthreads();
        }
        f16_scores<HDP>(q0, k0, f0, lo, hi, p.scale, m, l, pa);
        fa16_part_fin<HDP, W>(p, m, l, pa, v0, (float *)k0, qa, r0, kvh);
        return;
    }
    if (ci >= nchs || c0 > chi || c0 + FA16_C - 1 < clo) return; /* warp-uniform; no block barrier below */
    f16_load_q<HDP>(p, qs, r0, 16, nrows, G, kvh, lane, 32);
    f16_load_kv<HDP>(p, ks, vs, c0, clo, chi, kvh, lane, 32);
    fl_cp_commit();
    fl_cp_wait<0>();
    if (app && p.pos0 >= c0 && p.pos0 < c0 + FA16_C) f16_append_row<HDP>(p, ks, vs, p.pos0 - c0, kvh, lane);
    __syncwarp();
    f16_scores<HDP>(qs, ks, c0, lo, hi, p.scale, m, l, pa);
    if (tig == 0)
#pragma unroll
        for (int i = 0; i < 2; i++)
            if (r0 + g + 8 * i < nrows) {
                float *q = ml + ((size_t)(kvh * nrows + r0 + g + 8 * i) * nchs + ci) * 2;
                q[0] = m[i], q[1] = l[i];
            }
#pragma unroll
    for (int d0 = 0; d0 < HDP; d0 += DB) {
        float o[DB / 8][4];
        f16_pv<HDP, DB>(pa, vs, d0, o);
        f16_tile_rows(r0, g, nrows, [&](int i, int R) {
            float *q = po + ((size_t)(kvh * nrows + R) * nchs + ci) * HDP + d0 + tig * 2;
#pragma unroll
            for (int nt = 0; nt < DB / 8; nt++) *(float2 *)(q + nt * 8) = make_float2(o[nt][2 * i], o[nt][2 * i + 1]);
        });
    }
    if (!done) return;
    __threadfence(); /* this warp's partials, device-wide, before its count */
    __syncwarp();
    int last = 0;
    if (!lane) last = atomicAdd(done + kvh, 1) == nchs - 1;
    if (!__shfl_sync(0xffffffffu, last, 0)) return;
    __threadfence(); /* every other warp's partials, after their counts */
    for (int r = 0; r < nrows; r++) fa16_comb_row(p, nchs, HDP, po, ml, qa, kvh * nrows + r, lane, 32);
    if (qa.q) {
        __syncwarp(); /* the block sums the lanes wrote */
        for (int r = 0; r < nrows; r++)
            quant_sums(qa, p.n_heads * p.hd / 32, (kvh * G + r % G) * p.hd / 32, p.hd / 32, lane, 32);
    }
    if (!lane) done[kvh] = 0; /* for the next launch (stream order) */
}

template <int HDP, int W>
__global__ void __launch_bounds__(W * 32) k_fa16_part(slcu_attn p, const int *pd, int nchs, float *po, float *ml, int app,
                                                      int *done, slcu_act qa, int fin) {
    pdl_wait();
    /* fin 1: no k_fa16_comb after it, the matvec after it may start loading its weights; fin 2 (SLUICE_CUDA_FA_CL): the
     * fold's CTAs may start and wait (their pdl_wait) while this one runs */
    if (fin) pdl_trigger();
    if (pd) p.pos0 = *pd;
    fa16_part_cta<HDP, W>(p, nchs, po, ml, app, done, qa, blockIdx.x, blockIdx.y, blockIdx.z, fin & 1);
}

/* The one chunk's rows ended by the CTA's W warps with fa16_comb_row's operations on the same floats: its chunk
 * range is this one chunk, so per (row, dim) M, L, O = -inf, 0, 0, one f16_fold of (m, l) and one f16_mix of o, then
 * f16_final (m and l here are the values k_fa16_part would store: the quad's lanes hold the same, xor trees of
 * commutative adds and maxes; every warp computed the same scores from the same tiles). Warp w takes P V and the ends
 * of dims w DW .. w DW + DW - 1 (each 16 x 8 tile of o keeps its chain over the 4 key steps, so any split of the dims
 * gives the same floats), staged in st [16][HDP] floats (the K tile, read by then); then warp w writes rows w, w + W,
 * ... (one head each), lane l taking dims l + 32 j as k_fa16_comb's threads take them for quant_lane (qa: one token,
 * head_dim a multiple of 128), then the head's quant_sums. */
template <int HDP, int W>
static __device__ __forceinline__ void fa16_part_fin(const slcu_attn &p, const float m[2], const float l[2],
                                                     const uint32_t pa[4][4], const __half *vs, float *st, const slcu_act &qa,
                                                     int r0, int kvh) {
    constexpr int DW = HDP / W < 16 ? 16 : HDP / W, DB = DW < 64 ? DW : 64; /* a warp's dims; P V's block */
    const int G = p.n_heads / p.n_kv, nrows = p.n * G, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
    const int tig = lane & 3;
    float M[2], L[2], a[2], b[2];
#pragma unroll
    for (int i = 0; i < 2; i++) M[i] = -INFINITY, L[i] = 0.0f, f16_fold(M[i], L[i], m[i], l[i], a[i], b[i]);
    __syncthreads(); /* every warp's reads of the K tile are done */
    for (int d0 = warp * DW; d0 < warp * DW + DW && d0 < HDP; d0 += DB) {
        float o[DB / 8][4];
        f16_pv<HDP, DB>(pa, vs, d0, o);
        f16_tile_rows(r0, g, nrows, [&](int i, int R) {
            const int h = kvh * G + R % G;
            const float *qv = p.q + (size_t)(R / G) * p.ldq + (size_t)h * p.qstride;
#pragma unroll
            for (int nt = 0; nt < DB / 8; nt++)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int dd = d0 + nt * 8 + tig * 2 + j;
                    if (dd < p.hd)
                        st[(g + 8 * i) * HDP + dd] = f16_final(p, h, M[i], L[i], f16_mix(0.0f, o[nt][2 * i + j], a[i], b[i]),
                                                               p.gated ? qv + p.hd + dd : NULL);
                }
        });
    }
    __syncthreads(); /* every dim of every row staged */
    for (int r = warp; r < 16 && r0 + r < nrows; r += W) {
        const int R = r0 + r, t = R / G, h = kvh * G + R % G;
        for (int dd = lane; dd < p.hd; dd += 32) {
            const float v = st[r * HDP + dd];
            p.out[(size_t)t * p.ldo + (size_t)h * p.hd + dd] = v;
            if (qa.q) quant_lane(v, h * p.hd + dd, lane, qa);
        }
        if (qa.q) {
            __syncwarp(); /* the block sums lane 0 wrote */
            quant_sums(qa, p.n_heads * p.hd / 32, h * p.hd / 32, p.hd / 32, lane, 32);
        }
    }
}

/* Decode, second kernel: a CTA per row (fa16_comb_row). */
__global__ void k_fa16_comb(slcu_attn p, const int *pd, int nchs, int hdp, const float *po, const float *ml, slcu_act qa) {
    pdl_wait();
    pdl_trigger(); /* the matvec after it may start loading its weights (cuda_pdl.cuh) */
    if (pd) p.pos0 = *pd;
    fa16_comb_row(p, nchs, hdp, po, ml, qa, blockIdx.x, threadIdx.x, blockDim.x);
    if (!qa.q) return;
    __syncthreads(); /* the head's block sums are written */
    const int G = p.n_heads / p.n_kv, nrows = p.n * G, h = blockIdx.x / nrows * G + blockIdx.x % nrows % G;
    quant_sums(qa, p.n_heads * p.hd / 32, h * p.hd / 32, p.hd / 32, threadIdx.x, blockDim.x);
}

/* ---- a decode batch's items (slcu_attention_f16_items): every item's CTAs of k_fa16_part in one launch (blockIdx.z =
 * item * tiles + row tile), then every item's rows of k_fa16_comb in one; each item's CTAs run the one-item kernels'
 * code on the item's own slcu_attn, partials and chunk count, so each item's bits are its launch alone's. ---- */
/* (fa_item, fa_items: cuda_flash.cuh) */

template <int HDP, int W>
__global__ void __launch_bounds__(W * 32) k_fa16_part_items(const __grid_constant__ fa_items I, int app, int tiles, int last) {
    pdl_wait();
    if (last) pdl_trigger(); /* every item ended here (fin), no k_fa16_comb_items after it */
    const fa_item &it = I.it[blockIdx.z / tiles];
    const slcu_act qa = {};
    fa16_part_cta<HDP, W>(it.a, it.nchs, it.po, it.ml, app, NULL, qa, blockIdx.x, blockIdx.y, blockIdx.z % tiles, it.fin);
}

/* a CTA per (item, row): per rows of an item (n_kv * n_heads / n_kv, one token each); SLUICE_CUDA_FA_CL=2's deeper folds
 * are cuda_flash_cl.cu k_fa16_comb2_items (this kernel's code is the one before them: its registers are not theirs) */
__global__ void k_fa16_comb_items(const __grid_constant__ fa_items I, int per, int hdp) {
    pdl_wait();
    pdl_trigger(); /* the matvec after it may start loading its weights (cuda_pdl.cuh) */
    const fa_item &it = I.it[blockIdx.x / per];
    if (it.fin) return;
    const slcu_act qa = {};
    fa16_comb_row(it.a, it.nchs, hdp, it.po, it.ml, qa, blockIdx.x % per, threadIdx.x, blockDim.x);
}

__global__ void k_kv_append16(slcu_attn p, const int *pd) {
    pdl_wait();
    if (pd) p.pos0 = *pd;
    const int t = blockIdx.y, row = p.n_kv * p.hd;
    const size_t dst = (size_t)((p.pos0 + t) % p.cap) * row;
    __half *kc = (__half *)p.k_cache, *vc = (__half *)p.v_cache;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < row; i += gridDim.x * blockDim.x) {
        kc[dst + i] = __float2half_rn(p.k[(size_t)t * p.ldkv + i]);
        vc[dst + i] = __float2half_rn(p.v[(size_t)t * p.ldkv + i]);
    }
}

/* ---- f32 caches (SLUICE_CUDA_FA32=1): the same chunks and fold in f32 SIMT arithmetic. Per (row, chunk):
 * s = (q . k in four chains, c mod 4, fma in increasing c; (a0 + a1) + (a2 + a3)) * scale over the row's keys of
 * the chunk, m their max, e = exp(s - m), l = the warp's butterfly sum of (e_lane + e_lane+32), o[d] = fma chain
 * of e_k v_k[d] over the row's keys in increasing position. ---- */
#define FA32_RW 8 /* rows a warp */

/* rows of q (8 a warp) into qs [nr][HP] (HP: hd rounded up to 4, zero past hd and past the rows) */
__device__ void f32_load_q(const slcu_attn &p, float *qs, int HP, int r0, int nr, int nrows, int G, int kvh, int tid, int nthr) {
    for (int i = tid; i < nr * HP; i += nthr) {
        const int r = i / HP, d = i % HP, R = r0 + r;
        qs[i] = R < nrows && d < p.hd ? p.q[(size_t)(R / G) * p.ldq + (size_t)(kvh * G + R % G) * p.qstride + d] : 0.0f;
    }
}

/* K or V of positions c0 .. c0 + 63 into t [64][HP + 4], zero outside plo .. phi and past hd: cp.async (the caller
 * commits and waits) where head_dim % 4 == 0, else element loads */
__device__ void f32_load_t(const slcu_attn &p, const float *cache, float *t, int HP, int c0, int plo, int phi, int kvh,
                           int tid, int nthr) {
    const size_t row = (size_t)p.n_kv * p.hd;
    if (p.hd % 4 == 0) {
        const int U = HP / 4;
        for (int i = tid; i < FA16_C * U; i += nthr) {
            const int r = i / U, u = i % U, pp = c0 + r;
            const bool ok = pp >= plo && pp <= phi;
            fl_cp16(t + r * (HP + 4) + u * 4, cache + (ok ? (size_t)(pp % p.cap) * row + (size_t)kvh * p.hd + u * 4 : 0), ok);
        }
        return;
    }
    for (int i = tid; i < FA16_C * HP; i += nthr) {
        const int r = i / HP, d = i % HP, pp = c0 + r;
        t[r * (HP + 4) + d] = pp >= plo && pp <= phi && d < p.hd ? cache[(size_t)(pp % p.cap) * row + (size_t)kvh * p.hd + d] : 0.0f;
    }
}

/* scores of one row (q [HP]) against the chunk's keys (kt [64][HP + 4]): the row's m, l; its weights into e [64] */
__device__ __forceinline__ void f32_scores(const float *q, const float *kt, int HP, int c0, int lo, int hi, float scale,
                                           float &m, float &l, float *e) {
    const int lane = threadIdx.x & 31;
    const float *k0 = kt + lane * (HP + 4), *k1 = kt + (lane + 32) * (HP + 4);
    float a[4] = {0, 0, 0, 0}, b[4] = {0, 0, 0, 0};
    for (int c = 0; c < HP; c += 4) {
        const float4 qv = *(const float4 *)(q + c), x = *(const float4 *)(k0 + c), y = *(const float4 *)(k1 + c);
        a[0] = __fmaf_rn(qv.x, x.x, a[0]), a[1] = __fmaf_rn(qv.y, x.y, a[1]);
        a[2] = __fmaf_rn(qv.z, x.z, a[2]), a[3] = __fmaf_rn(qv.w, x.w, a[3]);
        b[0] = __fmaf_rn(qv.x, y.x, b[0]), b[1] = __fmaf_rn(qv.y, y.y, b[1]);
        b[2] = __fmaf_rn(qv.z, y.z, b[2]), b[3] = __fmaf_rn(qv.w, y.w, b[3]);
    }
    const int p0 = c0 + lane, p1 = c0 + lane + 32;
    const float s0 = p0 >= lo && p0 <= hi ? __fmul_rn(__fadd_rn(__fadd_rn(a[0], a[1]), __fadd_rn(a[2], a[3])), scale) : -INFINITY;
    const float s1 = p1 >= lo && p1 <= hi ? __fmul_rn(__fadd_rn(__fadd_rn(b[0], b[1]), __fadd_rn(b[2], b[3])), scale) : -INFINITY;
    float mx = fmaxf(s0, s1);
#pragma unroll
    for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const float e0 = s0 == -INFINITY ? 0.0f : expf(__fsub_rn(s0, mx)), e1 = s1 == -INFINITY ? 0.0f : expf(__fsub_rn(s1, mx));
    float sum = __fadd_rn(e0, e1);
#pragma unroll
    for (int o = 16; o; o >>= 1) sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, o));
    e[lane] = e0, e[lane + 32] = e1;
    m = mx, l = sum;
}

/* o[j] (dims lane + 32 j) = the chain of e_k v_k over the row's keys of the chunk, in increasing position */
template <int NJ>
__device__ __forceinline__ void f32_pv(const float *e, const float *vt, int HP, int c0, int lo, int hi, float o[NJ]) {
    const int lane = threadIdx.x & 31, kb = max(lo - c0, 0), ke = min(hi - c0, FA16_C - 1);
#pragma unroll
    for (int j = 0; j < NJ; j++) o[j] = 0.0f;
    for (int k = kb; k <= ke; k++) {
        const float w = e[k], *v = vt + k * (HP + 4) + lane;
#pragma unroll
        for (int j = 0; j < NJ; j++)
            if (lane + 32 * j < HP) o[j] = __fmaf_rn(w, v[32 * j], o[j]);
    }
}

/* the keys of the 8 rows r0 .. r0 + 7 (registers; the same in every lane) */
__device__ __forceinline__ void f32_ranges(const slcu_attn &p, int r0, int nrows, int G, int lo[FA32_RW], int hi[FA32_RW]) {
#pragma unroll
    for (int i = 0; i < FA32_RW; i++) f16_range(p, r0 + i, nrows, G, lo[i], hi[i]);
}
__device__ __forceinline__ bool f32_on(int lo, int hi, int c0) { return lo <= hi && c0 <= hi && c0 + FA16_C - 1 >= lo; }

#define FA32_FW 8 /* warps of the f32 prefill kernel: 64 rows a CTA */

/* Prefill, f32 cache: a CTA per 64 rows of KV head blockIdx.y (8 a warp), the chunks folded in order. Shared
 * memory: qs [64][HP], the K and V tiles [64][HP + 4], the weights es [64][64]. */
template <int NJ>
__global__ void __launch_bounds__(FA32_FW * 32) k_fa32_fold(const slcu_attn p) {
    pdl_wait();
    pdl_trigger(); /* the matvec after it may start loading its weights (cuda_pdl.cuh) */
    extern __shared__ float4 f32_smem[];
    const int HP = (p.hd + 3) & ~3, G = p.n_heads / p.n_kv, nrows = p.n * G, kvh = blockIdx.y;
    const int r0 = blockIdx.x * FA32_FW * FA32_RW, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int wr = r0 + warp * FA32_RW; /* the warp's first row */
    float *qs = (float *)f32_smem, *kt = qs + FA32_FW * FA32_RW * HP, *vt = kt + FA16_C * (HP + 4);
    float *es = vt + FA16_C * (HP + 4);
    int lo[FA32_RW], hi[FA32_RW], clo, chi, d;
    f32_ranges(p, wr, nrows, G, lo, hi);
    f16_range(p, r0, nrows, G, clo, d);
    f16_range(p, min(r0 + FA32_FW * FA32_RW, nrows) - 1, nrows, G, d, chi);
    f32_load_q(p, qs, HP, r0, FA32_FW * FA32_RW, nrows, G, kvh, tid, FA32_FW * 32);
    float M[FA32_RW], L[FA32_RW], O[FA32_RW][NJ];
#pragma unroll
    for (int i = 0; i < FA32_RW; i++) {
        M[i] = -INFINITY, L[i] = 0.0f;
#pragma unroll
        for (int j = 0; j < NJ; j++) O[i][j] = 0.0f;
    }
    for (int c = clo / FA16_C; c <= chi / FA16_C; c++) {
        const int c0 = c * FA16_C;
        float m[FA32_RW], l[FA32_RW];
        __syncthreads(); /* the tiles are read (and qs written) */
        f32_load_t(p, p.k_cache, kt, HP, c0, clo, chi, kvh, tid, FA32_FW * 32);
        fl_cp_commit();
        f32_load_t(p, p.v_cache, vt, HP, c0, clo, chi, kvh, tid, FA32_FW * 32);
        fl_cp_commit();
        fl_cp_wait<1>(); /* K */
        __syncthreads();
#pragma unroll
        for (int i = 0; i < FA32_RW; i++)
            if (f32_on(lo[i], hi[i], c0))
                f32_scores(qs + (warp * FA32_RW + i) * HP, kt, HP, c0, lo[i], hi[i], p.scale, m[i], l[i],
                           es + (warp * FA32_RW + i) * FA16_C);
        fl_cp_wait<0>(); /* V */
        __syncthreads();
#pragma unroll
        for (int i = 0; i < FA32_RW; i++) {
            if (!f32_on(lo[i], hi[i], c0)) continue;
            float o[NJ], a, b;
            f32_pv<NJ>(es + (warp * FA32_RW + i) * FA16_C, vt, HP, c0, lo[i], hi[i], o);
            f16_fold(M[i], L[i], m[i], l[i], a, b);
#pragma unroll
            for (int j = 0; j < NJ; j++) O[i][j] = f16_mix(O[i][j], o[j], a, b);
        }
    }
#pragma unroll
    for (int i = 0; i < FA32_RW; i++) {
        const int R = wr + i;
        if (R >= nrows) break;
        const int t = R / G, h = kvh * G + R % G;
        const float *qv = p.q + (size_t)t * p.ldq + (size_t)h * p.qstride;
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            const int dd = lane + 32 * j;
            if (dd < p.hd)
                p.out[(size_t)t * p.ldo + (size_t)h * p.hd + dd] = f16_final(p, h, M[i], L[i], O[i][j], p.gated ? qv + p.hd + dd : NULL);
        }
    }
}

/* Decode, f32 cache: warp w of CTA (x, kvh, z) takes chunk base / 64 + W x + w of rows 8z .. 8z + 7 (k_fa16_part's
 * layout of the partials, o at a stride of 32 NJ). Shared memory per warp: qs [8][HP], kt and vt [64][HP + 4], es [8][64]. */
template <int NJ, int W>
static __device__ __forceinline__ void fa32_part_cta(const slcu_attn &p, int nchs, float *po, float *ml, int bx, int kvh, int bz) {
    extern __shared__ float4 f32_smem[];
    const int HP = (p.hd + 3) & ~3, G = p.n_heads / p.n_kv, nrows = p.n * G, r0 = bz * FA32_RW;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *qs = (float *)f32_smem + (size_t)warp * (FA32_RW * HP + 2 * FA16_C * (HP + 4) + FA32_RW * FA16_C);
    float *kt = qs + FA32_RW * HP, *vt = kt + FA16_C * (HP + 4), *es = vt + FA16_C * (HP + 4);
    int lo[FA32_RW], hi[FA32_RW], clo, chi, base, d;
    f32_ranges(p, r0, nrows, G, lo, hi);
    f16_range(p, 0, nrows, G, base, d);
    f16_range(p, r0, nrows, G, clo, d);
    f16_range(p, min(r0 + FA32_RW, nrows) - 1, nrows, G, d, chi);
    const int ci = bx * W + warp, c0 = (base / FA16_C + ci) * FA16_C;
    if (ci >= nchs || c0 > chi || c0 + FA16_C - 1 < clo) return; /* warp-uniform; no block barrier below */
    f32_load_q(p, qs, HP, r0, FA32_RW, nrows, G, kvh, lane, 32);
    f32_load_t(p, p.k_cache, kt, HP, c0, clo, chi, kvh, lane, 32);
    fl_cp_commit();
    f32_load_t(p, p.v_cache, vt, HP, c0, clo, chi, kvh, lane, 32);
    fl_cp_commit();
    fl_cp_wait<1>();
    __syncwarp();
    float m[FA32_RW], l[FA32_RW];
#pragma unroll
    for (int i = 0; i < FA32_RW; i++)
        if (f32_on(lo[i], hi[i], c0)) {
            f32_scores(qs + i * HP, kt, HP, c0, lo[i], hi[i], p.scale, m[i], l[i], es + i * FA16_C);
            if (lane == 0) {
                float *q = ml + ((size_t)(kvh * nrows + r0 + i) * nchs + ci) * 2;
                q[0] = m[i], q[1] = l[i];
            }
        }
    fl_cp_wait<0>();
    __syncwarp();
#pragma unroll
    for (int i = 0; i < FA32_RW; i++) {
        if (!f32_on(lo[i], hi[i], c0)) continue;
        float o[NJ];
        f32_pv<NJ>(es + i * FA16_C, vt, HP, c0, lo[i], hi[i], o);
        float *q = po + ((size_t)(kvh * nrows + r0 + i) * nchs + ci) * (32 * NJ) + lane;
#pragma unroll
        for (int j = 0; j < NJ; j++) q[32 * j] = o[j];
    }
}

template <int NJ, int W>
__global__ void __launch_bounds__(W * 32) k_fa32_part(slcu_attn p, const int *pd, int nchs, float *po, float *ml) {
    pdl_wait();
    if (pd) p.pos0 = *pd;
    fa32_part_cta<NJ, W>(p, nchs, po, ml, blockIdx.x, blockIdx.y, blockIdx.z);
}

/* a decode batch's items over f32 caches (slcu_attention_f32_items): each item's row appended (k_kv_append32's copies,
 * blockIdx.y the item), then k_fa32_part's CTAs of every item (blockIdx.z = item * tiles + row tile), then
 * k_fa16_comb_items as for f16 caches */
__global__ void k_kv_append32_items(const __grid_constant__ fa_items I) {
    pdl_wait();
    const slcu_attn &p = I.it[blockIdx.y].a;
    const int row = p.n_kv * p.hd;
    const size_t dst = (size_t)(p.pos0 % p.cap) * row;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < row; i += gridDim.x * blockDim.x) {
        p.k_cache[dst + i] = p.k[i];
        p.v_cache[dst + i] = p.v[i];
    }
}
template <int NJ, int W>
__global__ void __launch_bounds__(W * 32) k_fa32_part_items(const __grid_constant__ fa_items I, int tiles) {
    pdl_wait();
    const fa_item &it = I.it[blockIdx.z / tiles];
    fa32_part_cta<NJ, W>(it.a, it.nchs, it.po, it.ml, blockIdx.x, blockIdx.y, blockIdx.z % tiles);
}

__global__ void k_kv_append32(slcu_attn p, const int *pd) {
    pdl_wait();
    if (pd) p.pos0 = *pd;
    const int t = blockIdx.y, row = p.n_kv * p.hd;
    const size_t dst = (size_t)((p.pos0 + t) % p.cap) * row;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < row; i += gridDim.x * blockDim.x) {
        p.k_cache[dst + i] = p.k[(size_t)t * p.ldkv + i];
        p.v_cache[dst + i] = p.v[(size_t)t * p.ldkv + i];
    }
}


/* the partials of the decode kernels (process lifetime, grown outside a capture) */
static float *fl_part;
static size_t fl_part_cap;
static int fl_mode = -1; /* SLUICE_CUDA_FLASH_MODE: 0 automatic, 1 always the prefill kernel, 2 always the decode pair */
static int *fl_done;     /* k_fa16_part's counters, a KV head each (zero between launches) */
static int fl_fuse = -1;  /* SLUICE_CUDA_FA_FUSE=1: the fused fold (opt-in: written in session 29, not yet run on a GPU) */
static int fl_sep = -1;   /* SLUICE_CUDA_FA_APPEND=0: the separate append, as before (bisecting) */
static int fl_one = -1;   /* SLUICE_CUDA_FA_ONE: one chunk ended in k_fa16_part (on since call R; =0 the fold launched) */
static int fl_fa32 = -1;  /* SLUICE_CUDA_FA32=0: f32 caches take k_attention's order (cuda_ops.cu), never these kernels */
static int fl_cl = -1;    /* SLUICE_CUDA_FA_CL: 2 .. 16 chunks on clusters in one launch, the fold's loads deeper beyond
                           * where they won (fl_deep; cuda_flash_cl.cu); on (1) since call T, =0 the pair, =2 every deeper fold */
#define FL_FUSE_CHUNKS 16 /* the fused fold's bound: one warp folds a head's rows (depth <= 960) */
#define FL_MAX_KV 256

extern "C" void slcu_fa16_force(int mode) { fl_mode = mode; }
extern "C" void slcu_fa16_fuse(int on) { fl_fuse = on; } /* tests: 1 / 0, or -1 (the environment's) */
extern "C" void slcu_fa16_one(int on) { fl_one = on; }   /* tests: as slcu_fa16_fuse */
extern "C" void slcu_fa16_cl(int on) { fl_cl = on; }     /* tests: 0, 1, 2 (fl_deep) or -1 (the environment's) */

static void fl_env(void) {
    if (fl_fuse < 0) fl_fuse = getenv("SLUICE_CUDA_FA_FUSE") && getenv("SLUICE_CUDA_FA_FUSE")[0] == '1';
    if (fl_sep < 0) fl_sep = getenv("SLUICE_CUDA_FA_APPEND") && getenv("SLUICE_CUDA_FA_APPEND")[0] == '0';
    if (fl_one < 0) fl_one = !(getenv("SLUICE_CUDA_FA_ONE") && getenv("SLUICE_CUDA_FA_ONE")[0] == '0');
    if (fl_fa32 < 0) fl_fa32 = !(getenv("SLUICE_CUDA_FA32") && getenv("SLUICE_CUDA_FA32")[0] == '0');
    if (fl_cl < 0) {
        const char *e = getenv("SLUICE_CUDA_FA_CL");
        fl_cl = e && e[0] == '0' ? 0 : e && e[0] == '2' ? 2 : 1;
    }
    if (fl_mode >= 0) return;
    const char *e = getenv("SLUICE_CUDA_FLASH_MODE");
    fl_mode = e ? atoi(e) : 0;
}

static int f16_fail(char *msg, size_t msglen, const char *what, cudaError_t e) {
    if (msg && msglen) snprintf(msg, msglen, "flash attention: %s%s%s", what, e ? ": " : "", e ? cudaGetErrorString(e) : "");
    return -1;
}

/* Lets kern take bytes of dynamic shared memory (*set: the most it was given so far; raised when a launch needs
 * more): 0, or -1 with the bytes and the device's opt-in limit in msg. A refused attribute's error is taken off,
 * or the next launch's cudaGetLastError would report it as its own (call C: k_fa32_part<8, 2> asked for 286,720
 * bytes, 227 KiB = 232,448 at most on the H100, and k_fa32_fold's good launch after it read "invalid argument"). */
template <typename K>
static int fl_smem(K *kern, int *set, size_t bytes, char *msg, size_t msglen) {
    if (bytes <= (size_t)*set) return 0;
    const cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess) {
        *set = (int)bytes;
        return 0;
    }
    (void)cudaGetLastError();
    int dev = 0, optin = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (msg && msglen)
        snprintf(msg, msglen, "flash attention: %zu bytes of shared memory a CTA, the device allows %d: %s", bytes, optin,
                 cudaGetErrorString(e));
    return -1;
}

/* Which fold ends the pair past the clusters (SLUICE_CUDA_FA_CL; docs/CUDA.md "The decode attention on a cluster", call
 * T's --bench-fa, 30B heads): k_fa16_comb2's scan (fa16_comb_row_sc: head_dim <= 128, one dim a thread) won where a row
 * has many chunks (f16 at depth 8192 23.5 -> 21.7 us, 32768 101.8 -> 79.2; f32 1.04-1.05x past 512) and lost where it has
 * few (f32 at depths 1-512, 1-9 chunks: 0.93-0.96x; a segment's scan, staging and barriers where k_fa16_comb waits one
 * batch of loads); the loads two batches deep (fa16_comb_row_pf) lost on the one case timed (8 items at 8192: 0.86x). So
 * mode 1 (the default) takes the scan only past FL_DEEP chunks at head_dim <= 128, k_fa16_comb (k_fa16_comb_items) as
 * before otherwise; mode 2 takes k_fa16_comb2 (k_fa16_comb2_items) for every fold, the scan where head_dim <= 128 and
 * the deeper loads past it, to time them. Every fold is bitwise fa16_comb_row: only the time differs. */
#define FL_DEEP 16
static int fl_deep(const slcu_attn *a, int nchs) { return fl_cl == 2 || (fl_cl == 1 && nchs > FL_DEEP && a->hd <= 128); }

/* the decode pair (every chunk its warp) or the prefill kernel: the same bits, so any rule does */
static int fl_decode(const slcu_attn *a, const int *pd) { return fl_mode == 2 || (fl_mode != 1 && (pd || a->n <= 8)); }

/* chunks of the decode pair: those of the first row's first key .. the last row's last (a recorded step: the most
 * its max_keys can span) */
static int fl_chunks(const slcu_attn *a, const int *pd, int max_keys) {
    const int last = a->pos0 + a->n - 1, first = a->window > 0 && a->pos0 >= a->window ? a->pos0 - a->window + 1 : 0;
    return pd ? (max_keys + a->n - 1 + FA16_C - 1) / FA16_C + 1 : last / FA16_C - first / FA16_C + 1;
}

/* fl_part with room for need floats (grown outside a recorded step): 0, or -1 with the message */
static int fl_room(size_t need, char *msg, size_t msglen) {
    if (need > fl_part_cap) {
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        cudaStreamIsCapturing(SLS, &cs);
        if (cs != cudaStreamCaptureStatusNone) return f16_fail(msg, msglen, "partials grow inside a recorded step", cudaSuccess);
        if (fl_part) cudaFree(fl_part);
        fl_part = NULL, fl_part_cap = 0;
        /* 16 MiB at least: a recorded step's bound fits without growing inside a capture */
        const size_t cap = need + need / 2 > ((size_t)4 << 20) ? need + need / 2 : (size_t)4 << 20;
        cudaError_t e = cudaMalloc(&fl_part, cap * sizeof(float));
        if (e) return f16_fail(msg, msglen, "partials", e);
        fl_part_cap = cap;
    }
    return 0;
}

/* po [rows][nchs][hdp] and ml [rows][nchs][2] for a's rows (n * n_heads) */
static int fl_partials(const slcu_attn *a, int nchs, int hdp, float **po, float **ml, char *msg, size_t msglen) {
    if (fl_room((size_t)a->n_heads * a->n * nchs * (hdp + 2), msg, msglen)) return -1;
    *po = fl_part, *ml = fl_part + (size_t)a->n_heads * a->n * nchs * hdp;
    return 0;
}

template <int HDP>
static int f16_launch(const slcu_attn *a, const int *pd, int max_keys, const slcu_act *oq, int app, char *msg, size_t msglen) {
    constexpr int S = HDP + 8, PW = HDP >= 256 ? 2 : 4;
    static int fset, pset; /* hd 256: 168,960 (two K/V buffers) and 152,064 bytes */
    const size_t fsm = (size_t)(FA16_FW * 16 + 4 * FA16_C) * S * 2, psm = (size_t)PW * (16 + 2 * FA16_C) * S * 2;
    const int G = a->n_heads / a->n_kv, nrows = a->n * G;
    if (!fl_decode(a, pd)) {
        if (fl_smem(k_fa16_fold<HDP>, &fset, fsm, msg, msglen)) return -1;
        pdl_launch(k_fa16_fold<HDP>, dim3((unsigned)((nrows + FA16_FW * 16 - 1) / (FA16_FW * 16)), (unsigned)a->n_kv),
                   FA16_FW * 32, fsm, SLS, *a);
        cudaError_t e = cudaGetLastError();
        return e ? f16_fail(msg, msglen, "launch", e) : 0;
    }
    float *po, *ml;
    const int nchs = fl_chunks(a, pd, max_keys);
    if (fl_partials(a, nchs, HDP, &po, &ml, msg, msglen)) return -1;
    if (fl_smem(k_fa16_part<HDP, PW>, &pset, psm, msg, msglen)) return -1;
    slcu_act qa = {};
    if (oq && a->n == 1 && a->hd % 128 == 0 && oq->n_tok == 1 && oq->cols == a->n_heads * a->hd) qa = *oq;
    const int fin = fl_one && !pd && nchs == 1; /* one chunk: k_fa16_part ends the rows (fa16_part_fin) */
    if (fl_cl && !fin && !pd) { /* 2 .. 16 chunks: one launch on clusters (cuda_flash_cl.cu) */
        const int r = fa16_cl_launch(a, HDP, nchs, po, ml, app, &qa, msg, msglen);
        if (r <= 0) return r < 0 ? -1 : qa.q ? 1 : 0;
    }
    const int fuse = !fin && fl_fuse && !pd && a->n == 1 && nrows <= 16 && nchs <= FL_FUSE_CHUNKS && a->n_kv <= FL_MAX_KV &&
                     (a->hd % 32 == 0 || !qa.q);
    if (fuse && !fl_done) {
        cudaError_t e = cudaMalloc(&fl_done, FL_MAX_KV * sizeof(int));
        if (e == cudaSuccess) e = cudaMemset(fl_done, 0, FL_MAX_KV * sizeof(int));
        if (e) return f16_fail(msg, msglen, "counters", e);
    }
    const int deep = !fuse && !fin && fl_deep(a, nchs); /* k_fa16_comb2, k_fa16_part triggering it at its start */
    pdl_launch(k_fa16_part<HDP, PW>, dim3((unsigned)((nchs + PW - 1) / PW), (unsigned)a->n_kv, (unsigned)((nrows + 15) / 16)),
               PW * 32, psm, SLS, *a, pd, nchs, po, ml, app, fuse ? fl_done : NULL, qa, fin ? 1 : deep ? 2 : 0);
    if (deep) fa16_comb2_launch(a, pd, nchs, HDP, po, ml, &qa);
    else if (!fuse && !fin)
        pdl_launch(k_fa16_comb, (unsigned)(a->n_kv * nrows), a->hd < 128 ? 32 * ((a->hd + 31) / 32) : 128, 0, SLS, *a, pd,
                   nchs, HDP, po, ml, qa);
    cudaError_t e = cudaGetLastError();
    return e ? f16_fail(msg, msglen, "launch", e) : qa.q ? 1 : 0;
}

extern "C" int slcu_attention_f16(const slcu_attn *a, const int *pd, int max_keys, char *msg, size_t msglen) {
    return slcu_attention_f16q(a, pd, max_keys, NULL, msg, msglen) < 0 ? -1 : 0;
}

/* cuda.h: the new rows appended (f16), then the attention of a's n tokens [and its int8 form]; 1, 0 or -1 */
extern "C" int slcu_attention_f16q(const slcu_attn *a, const int *pd, int max_keys, const slcu_act *oq, char *msg,
                                   size_t msglen) {
    fl_env();
    if (a->hd > 256) return f16_fail(msg, msglen, "head_dim above 256", cudaSuccess);
    if (pd && (a->n != 1 || !a->k)) return f16_fail(msg, msglen, "a recorded step has one token appending its row", cudaSuccess);
    /* one token in the decode pair: k_fa16_part appends its row (f16_append_row), one launch fewer */
    const int app = a->k && a->n == 1 && fl_decode(a, pd) && !fl_sep;
    if (a->k && !app) pdl_launch(k_kv_append16, dim3((unsigned)((a->n_kv * a->hd + 255) / 256), (unsigned)a->n), 256, 0, SLS, *a, pd);
    if (a->hd <= 16) return f16_launch<16>(a, pd, max_keys, oq, app, msg, msglen);
    if (a->hd <= 32) return f16_launch<32>(a, pd, max_keys, oq, app, msg, msglen);
    if (a->hd <= 64) return f16_launch<64>(a, pd, max_keys, oq, app, msg, msglen);
    if (a->hd <= 128) return f16_launch<128>(a, pd, max_keys, oq, app, msg, msglen);
    return f16_launch<256>(a, pd, max_keys, oq, app, msg, msglen);
}

/* the items' pair: partials laid out item after item, every item's chunks (its own nchs) in the same grid */
template <int HDP>
static int f16_items(const slcu_attn *a, int n, char *msg, size_t msglen) {
    constexpr int S = HDP + 8, PW = HDP >= 256 ? 2 : 4;
    static int pset;
    const size_t psm = (size_t)PW * (16 + 2 * FA16_C) * S * 2;
    const int G = a->n_heads / a->n_kv, tiles = (G + 15) / 16;
    fa_items I = {};
    size_t need = 0;
    int most = 0, comb = 0;
    for (int i = 0; i < n; i++) {
        const int nchs = fl_chunks(a + i, NULL, 0);
        need += (size_t)a->n_heads * nchs * (HDP + 2);
        most = nchs > most ? nchs : most;
    }
    if (fl_room(need, msg, msglen)) return -1;
    float *at = fl_part;
    for (int i = 0; i < n; i++) {
        const int nchs = fl_chunks(a + i, NULL, 0);
        I.it[i] = fa_item{a[i], at, at + (size_t)a->n_heads * nchs * HDP, nchs, fl_one && nchs == 1};
        at += (size_t)a->n_heads * nchs * (HDP + 2);
        comb |= !I.it[i].fin;
    }
    if (fl_cl && comb && most <= 16) { /* SLUICE_CUDA_FA_CL: every item on clusters in one launch (cuda_flash_cl.cu) */
        const int r = fa16_cl_items_launch(&I, n, HDP, most, msg, msglen);
        if (r <= 0) return r < 0 ? -1 : 1;
    }
    if (fl_smem(k_fa16_part_items<HDP, PW>, &pset, psm, msg, msglen)) return -1;
    const int deep = comb && fl_cl == 2; /* (fl_deep: the items' deeper folds only timed at 8192, and lost) */
    pdl_launch(k_fa16_part_items<HDP, PW>, dim3((unsigned)((most + PW - 1) / PW), (unsigned)a->n_kv, (unsigned)(n * tiles)),
               PW * 32, psm, SLS, I, 1, tiles, !comb || deep); /* (deep: the fold's CTAs start early, as k_fa16_part's) */
    if (deep) fa16_comb2_items_launch(&I, n, HDP);
    else if (comb) /* (the rows of the items ended in k_fa16_part_items return at once) */
        pdl_launch(k_fa16_comb_items, (unsigned)(n * a->n_heads), a->hd < 128 ? 32 * ((a->hd + 31) / 32) : 128, 0, SLS, I,
                   a->n_heads, HDP);
    cudaError_t e = cudaGetLastError();
    return e ? f16_fail(msg, msglen, "launch", e) : 1;
}

/* Whether the items' launches take a (n items, every one a one-token step of an f16 cache when f16, of an f32 one
 * otherwise, of one shape, within its cache): what the per-item op would refuse or do otherwise goes through it. */
static int items_take(const slcu_attn *a, int n, int f16) {
    if (n < 1 || n > SLCU_ATTN_ITEMS || fl_mode == 1 || slcu_step_pos()) return 0;
    for (int i = 0; i < n; i++) {
        const slcu_attn *b = a + i;
        if (!b->f16 != !f16 || b->n != 1 || !b->k || b->hd != a->hd || b->n_heads != a->n_heads || b->n_kv != a->n_kv) return 0;
        if (b->hd <= 0 || b->hd > 256 || b->n_kv <= 0 || b->n_heads % b->n_kv || b->cap <= 0 || b->pos0 < 0) return 0;
        const int maxk = b->window > 0 && b->window < b->pos0 + 1 ? b->window : b->pos0 + 1;
        if (maxk > b->cap || (b->window > 0 && b->pos0 >= b->cap && b->cap - b->window + 1 < 1)) return 0; /* as slcu_attention_q */
    }
    return 1;
}

/* cuda.h: n one-token items of f16 caches in one launch pair, each bitwise slcu_attention_f16 of it alone */
extern "C" int slcu_attention_f16_items(const slcu_attn *a, int n, char *msg, size_t msglen) {
    fl_env();
    if (fl_sep || !items_take(a, n, 1)) return 0;
    if (a->hd <= 16) return f16_items<16>(a, n, msg, msglen);
    if (a->hd <= 32) return f16_items<32>(a, n, msg, msglen);
    if (a->hd <= 64) return f16_items<64>(a, n, msg, msglen);
    if (a->hd <= 128) return f16_items<128>(a, n, msg, msglen);
    return f16_items<256>(a, n, msg, msglen);
}

template <int NJ>
static int f32_launch(const slcu_attn *a, const int *pd, int max_keys, char *msg, size_t msglen) {
    /* a warp's K and V tiles are 2 x 64 (HP + 4) floats: hd 256 takes 143,360 bytes a warp in k_fa32_part, so one
     * warp a CTA there (two asked 286,720: call C's launch failures); k_fa32_fold at hd 256: 215,040 bytes */
    constexpr int PW = NJ >= 8 ? 1 : 2;
    const int HP = (a->hd + 3) & ~3;
    const size_t fsm = (size_t)(FA32_FW * FA32_RW * HP + 2 * FA16_C * (HP + 4) + FA32_FW * FA32_RW * FA16_C) * 4;
    const size_t psm = (size_t)PW * (FA32_RW * HP + 2 * FA16_C * (HP + 4) + FA32_RW * FA16_C) * 4;
    static int fset, pset;
    const int G = a->n_heads / a->n_kv, nrows = a->n * G;
    if (!fl_decode(a, pd)) {
        if (fl_smem(k_fa32_fold<NJ>, &fset, fsm, msg, msglen)) return -1;
        pdl_launch(k_fa32_fold<NJ>, dim3((unsigned)((nrows + FA32_FW * FA32_RW - 1) / (FA32_FW * FA32_RW)), (unsigned)a->n_kv),
                   FA32_FW * 32, fsm, SLS, *a);
        cudaError_t e = cudaGetLastError();
        return e ? f16_fail(msg, msglen, "launch", e) : 0;
    }
    float *po, *ml;
    const int nchs = fl_chunks(a, pd, max_keys);
    if (fl_partials(a, nchs, 32 * NJ, &po, &ml, msg, msglen)) return -1;
    if (fl_smem(k_fa32_part<NJ, PW>, &pset, psm, msg, msglen)) return -1;
    pdl_launch(k_fa32_part<NJ, PW>, dim3((unsigned)((nchs + PW - 1) / PW), (unsigned)a->n_kv, (unsigned)((nrows + FA32_RW - 1) / FA32_RW)),
               PW * 32, psm, SLS, *a, pd, nchs, po, ml);
    if (fl_deep(a, nchs)) fa16_comb2_launch(a, pd, nchs, 32 * NJ, po, ml, NULL);
    else
        pdl_launch(k_fa16_comb, (unsigned)(a->n_kv * nrows), a->hd < 128 ? 32 * ((a->hd + 31) / 32) : 128, 0, SLS, *a, pd,
                   nchs, 32 * NJ, po, ml, slcu_act{});
    cudaError_t e = cudaGetLastError();
    return e ? f16_fail(msg, msglen, "launch", e) : 0;
}

/* the f32 items: partials item after item as f16_items lays them out (hdp 32 NJ), the rows appended first */
template <int NJ>
static int f32_items(const slcu_attn *a, int n, char *msg, size_t msglen) {
    constexpr int PW = NJ >= 8 ? 1 : 2;
    const int HP = (a->hd + 3) & ~3, G = a->n_heads / a->n_kv, tiles = (G + FA32_RW - 1) / FA32_RW;
    const size_t psm = (size_t)PW * (FA32_RW * HP + 2 * FA16_C * (HP + 4) + FA32_RW * FA16_C) * 4;
    static int pset;
    fa_items I = {};
    size_t need = 0;
    int most = 0;
    for (int i = 0; i < n; i++) {
        const int nchs = fl_chunks(a + i, NULL, 0);
        need += (size_t)a->n_heads * nchs * (32 * NJ + 2);
        most = nchs > most ? nchs : most;
    }
    if (fl_room(need, msg, msglen)) return -1;
    float *at = fl_part;
    for (int i = 0; i < n; i++) {
        const int nchs = fl_chunks(a + i, NULL, 0);
        I.it[i] = fa_item{a[i], at, at + (size_t)a->n_heads * nchs * 32 * NJ, nchs, 0};
        at += (size_t)a->n_heads * nchs * (32 * NJ + 2);
    }
    if (fl_smem(k_fa32_part_items<NJ, PW>, &pset, psm, msg, msglen)) return -1;
    pdl_launch(k_kv_append32_items, dim3((unsigned)((a->n_kv * a->hd + 255) / 256), (unsigned)n), 256, 0, SLS, I);
    pdl_launch(k_fa32_part_items<NJ, PW>, dim3((unsigned)((most + PW - 1) / PW), (unsigned)a->n_kv, (unsigned)(n * tiles)),
               PW * 32, psm, SLS, I, tiles);
    if (fl_cl == 2) fa16_comb2_items_launch(&I, n, 32 * NJ); /* (fl_deep) */
    else
        pdl_launch(k_fa16_comb_items, (unsigned)(n * a->n_heads), a->hd < 128 ? 32 * ((a->hd + 31) / 32) : 128, 0, SLS, I,
                   a->n_heads, 32 * NJ);
    cudaError_t e = cudaGetLastError();
    return e ? f16_fail(msg, msglen, "launch", e) : 1;
}

/* cuda.h: n one-token items of f32 caches in three launches, each bitwise slcu_attention_f32 of it alone */
extern "C" int slcu_attention_f32_items(const slcu_attn *a, int n, char *msg, size_t msglen) {
    fl_env();
    if (!fl_fa32 || !items_take(a, n, 0)) return 0;
    if (a->hd <= 32) return f32_items<1>(a, n, msg, msglen);
    if (a->hd <= 64) return f32_items<2>(a, n, msg, msglen);
    if (a->hd <= 128) return f32_items<4>(a, n, msg, msglen);
    return f32_items<8>(a, n, msg, msglen);
}

/* cuda.h: the new rows appended, then the attention of a's n tokens over an f32 cache in the chunked order */
extern "C" int slcu_attention_f32(const slcu_attn *a, const int *pd, int max_keys, char *msg, size_t msglen) {
    fl_env();
    if (a->hd > 256) return f16_fail(msg, msglen, "head_dim above 256", cudaSuccess);
    if (pd && (a->n != 1 || !a->k)) return f16_fail(msg, msglen, "a recorded step has one token appending its row", cudaSuccess);
    if (a->k) pdl_launch(k_kv_append32, dim3((unsigned)((a->n_kv * a->hd + 255) / 256), (unsigned)a->n), 256, 0, SLS, *a, pd);
    if (a->hd <= 32) return f32_launch<1>(a, pd, max_keys, msg, msglen);
    if (a->hd <= 64) return f32_launch<2>(a, pd, max_keys, msg, msglen);
    if (a->hd <= 128) return f32_launch<4>(a, pd, max_keys, msg, msglen);
    return f32_launch<8>(a, pd, max_keys, msg, msglen);
}
