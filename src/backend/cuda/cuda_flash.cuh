/*
 * cuda_flash.cuh — the device helpers of cuda_flash.cu's f16 attention kernels (its head comment states the order):
 * ldmatrix / mma.sync wrappers, cp.async, a row's key range, the fold of a chunk (f16_fold, f16_mix), a row's end
 * (f16_final), the q and K/V tile loads, a warp's scores and P V, a token's new cache row (f16_append_row), a row's fold of
 * the chunks' partials (fa16_comb_row; fa16_comb_row_pf: the same chain, the next chunks' loads in flight). For
 * cuda_flash.cu and cuda_flash_cl.cu (the decode attention on a cluster, SLUICE_CUDA_FA_CL) only.
 */
#ifndef SL_CUDA_FLASH_CUH
#define SL_CUDA_FLASH_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_quant.cuh"

#define FA16_C 64 /* keys per chunk: the fixed split of the positions */

__device__ __forceinline__ void f16_ldm4(uint32_t r[4], const __half *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void f16_ldm4t(uint32_t r[4], const __half *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void f16_mma(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t f16_pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *(const uint32_t *)&h;
}
/* 16 bytes global -> shared without a register round trip, or 16 zero bytes (ok false: src is not read) */
__device__ __forceinline__ void fl_cp16(void *dst, const void *src, bool ok) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void fl_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void fl_cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
__device__ __forceinline__ float f16_sigm(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x))); }

/* the keys p0 .. pos of row r (token r / G): lo > hi for a padding row */
__device__ __forceinline__ void f16_range(const slcu_attn &p, int r, int nrows, int G, int &lo, int &hi) {
    if (r >= nrows) { lo = 1, hi = 0; return; }
    const int pos = p.pos0 + r / G;
    lo = p.window > 0 && pos >= p.window ? pos - p.window + 1 : 0, hi = pos;
}

/* the fold of one chunk's (m, l) into (M, L): a, b scale O and o */
__device__ __forceinline__ void f16_fold(float &M, float &L, float m, float l, float &a, float &b) {
    const float Mn = fmaxf(M, m);
    a = expf(__fsub_rn(M, Mn)), b = expf(__fsub_rn(m, Mn));
    L = __fmaf_rn(l, b, __fmul_rn(L, a));
    M = Mn;
}
__device__ __forceinline__ float f16_mix(float O, float o, float a, float b) { return __fmaf_rn(o, b, __fmul_rn(O, a)); }

/* The end of a row: its sink, the quotient, the gate. */
__device__ __forceinline__ float f16_final(const slcu_attn &p, int h, float M, float L, float O, const float *gate) {
    if (p.sinks) {
        const float Mn = fmaxf(M, p.sinks[h]), a = expf(__fsub_rn(M, Mn));
        L = __fadd_rn(__fmul_rn(L, a), expf(__fsub_rn(p.sinks[h], Mn)));
        O = __fmul_rn(O, a);
    }
    const float v = __fdiv_rn(O, L);
    return gate ? __fmul_rn(v, f16_sigm(*gate)) : v;
}

/* rows (the CTA's or a warp's) of q into qs [nr][HDP + 8] halves, zero past hd and past the rows. A thread takes
 * runs of 8 columns of one row: the row's address once, its 8 loads issued together, one 16-byte store (the
 * decode kernel's one warp loaded 64 elements one after another: most of its 18 us at depth 1, call D) */
template <int HDP>
__device__ void f16_load_q(const slcu_attn &p, __half *qs, int r0, int nr, int nrows, int G, int kvh, int tid, int nthr) {
    constexpr int U = HDP / 8; /* runs a row */
#pragma unroll 2
    for (int i = tid; i < nr * U; i += nthr) {
        const int r = i / U, d0 = (i % U) * 8, R = r0 + r;
        float x[8];
        if (R < nrows) {
            const float *qr = p.q + (size_t)(R / G) * p.ldq + (size_t)(kvh * G + R % G) * p.qstride;
#pragma unroll
            for (int j = 0; j < 8; j++) x[j] = d0 + j < p.hd ? qr[d0 + j] : 0.0f;
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) x[j] = 0.0f;
        }
        uint4 h;
        h.x = f16_pack(x[0], x[1]), h.y = f16_pack(x[2], x[3]), h.z = f16_pack(x[4], x[5]), h.w = f16_pack(x[6], x[7]);
        *(uint4 *)(qs + r * (HDP + 8) + d0) = h;
    }
}

/* K and V of positions c0 .. c0 + 63 into ks, vs [64][HDP + 8], zero outside plo .. phi and past hd: cp.async
 * (the caller commits and waits) where head_dim % 8 == 0, else element loads */
template <int HDP>
__device__ void f16_load_kv(const slcu_attn &p, __half *ks, __half *vs, int c0, int plo, int phi, int kvh, int tid,
                            int nthr) {
    const __half *kc = (const __half *)p.k_cache, *vc = (const __half *)p.v_cache;
    const size_t row = (size_t)p.n_kv * p.hd;
    if (p.hd % 8 == 0) {
        constexpr int U = HDP / 8;
        for (int i = tid; i < FA16_C * U; i += nthr) {
            const int r = i / U, u = i % U, pp = c0 + r;
            const bool ok = pp >= plo && pp <= phi && u * 8 < p.hd;
            const size_t off = ok ? (size_t)(pp % p.cap) * row + (size_t)kvh * p.hd + (size_t)u * 8 : 0;
            fl_cp16(ks + r * (HDP + 8) + u * 8, kc + off, ok);
            fl_cp16(vs + r * (HDP + 8) + u * 8, vc + off, ok);
        }
        return;
    }
    for (int i = tid; i < FA16_C * HDP; i += nthr) {
        const int r = i / HDP, d = i % HDP, pp = c0 + r;
        __half kx = __float2half_rn(0.0f), vx = kx;
        if (pp >= plo && pp <= phi && d < p.hd) {
            const size_t off = (size_t)(pp % p.cap) * row + (size_t)kvh * p.hd + d;
            kx = kc[off], vx = vc[off];
        }
        ks[r * (HDP + 8) + d] = kx, vs[r * (HDP + 8) + d] = vx;
    }
}

/* A warp's 16 rows (qs) against the chunk of keys c0 .. c0 + 63 (ks): per thread rows g = lane / 4 and g + 8
 * (valid keys lo[i] .. hi[i]); out the rows' chunk max m and sum l and the weights as PV's A fragments. */
template <int HDP>
__device__ __forceinline__ void f16_scores(const __half *qs, const __half *ks, int c0, const int lo[2], const int hi[2],
                                           float scale, float m[2], float l[2], uint32_t pa[4][4]) {
    constexpr int S = HDP + 8;
    const int lane = threadIdx.x & 31, tig = lane & 3;
    float s[8][4];
#pragma unroll
    for (int j = 0; j < 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HDP / 16; kk++) {
        uint32_t a[4];
        f16_ldm4(a, qs + (lane & 15) * S + kk * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int nt = 0; nt < 8; nt += 2) {
            uint32_t b[4];
            f16_ldm4(b, ks + (nt * 8 + (lane >> 4) * 8 + (lane & 7)) * S + kk * 16 + ((lane >> 3) & 1) * 8);
            f16_mma(s[nt], a, b[0], b[1]);
            f16_mma(s[nt + 1], a, b[2], b[3]);
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const int kp = c0 + nt * 8 + tig * 2 + j;
                const float v = kp >= lo[i] && kp <= hi[i] ? __fmul_rn(s[nt][2 * i + j], scale) : -INFINITY;
                s[nt][2 * i + j] = v;
                mx = fmaxf(mx, v);
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const float v = s[nt][2 * i + j];
                const float e = v == -INFINITY ? 0.0f : expf(__fsub_rn(v, mx));
                s[nt][2 * i + j] = e;
                sum = __fadd_rn(sum, e);
            }
        sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 1));
        sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 2));
        m[i] = mx, l[i] = sum;
    }
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        pa[kk][0] = f16_pack(s[2 * kk][0], s[2 * kk][1]);
        pa[kk][1] = f16_pack(s[2 * kk][2], s[2 * kk][3]);
        pa[kk][2] = f16_pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[kk][3] = f16_pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
}

/* o [DB / 8][4] = P V for the dims d0 .. d0 + DB - 1 (vs [64][HDP + 8]) */
template <int HDP, int DB>
__device__ __forceinline__ void f16_pv(const uint32_t pa[4][4], const __half *vs, int d0, float o[DB / 8][4]) {
    constexpr int S = HDP + 8;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int nt = 0; nt < DB / 8; nt++) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int nt = 0; nt < DB / 8; nt += 2) {
            uint32_t b[4];
            f16_ldm4t(b, vs + (kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * S + d0 + nt * 8 + (lane >> 4) * 8);
            f16_mma(o[nt], pa[kk], b[0], b[1]);
            f16_mma(o[nt + 1], pa[kk], b[2], b[3]);
        }
}

/* One token's new row (app: no k_kv_append16 before the decode pair): the warp whose chunk holds position pos0
 * converts the token's k and v of KV head kvh to f16 (k_kv_append16's conversions), writes them to the cache row
 * and over row r of its tiles (what its cp.async read there was the row's old bytes). No other warp reads that
 * row, but another row tile of the same KV head (rows 16z..), which does the same: the same values. */
template <int HDP>
__device__ void f16_append_row(const slcu_attn &p, __half *ks, __half *vs, int r, int kvh, int lane) {
    const size_t src = (size_t)kvh * p.hd, dst = (size_t)(p.pos0 % p.cap) * p.n_kv * p.hd + src;
    __half *kc = (__half *)p.k_cache, *vc = (__half *)p.v_cache;
    for (int d = lane; d < p.hd; d += 32) {
        const __half kx = __float2half_rn(p.k[src + d]), vx = __float2half_rn(p.v[src + d]);
        ks[r * (HDP + 8) + d] = kx, vs[r * (HDP + 8) + d] = vx;
        kc[dst + d] = kx, vc[dst + d] = vx;
    }
}

/* Decode, second half for row R (kvh * nrows + r) on threads tid .. of nthr (a multiple of 32): the chunks folded in
 * order as k_fa16_fold does; each thread loads FA_CB chunks' values at once (all in flight, past L1: a fused caller
 * reads what other CTAs wrote in the same launch), then folds them in order. qa.q (one token, head_dim a multiple of
 * 128): the output's int8 form too, by act_quant's operations on the same floats (cuda_quant.cuh), so o's matvec
 * needs no quantisation launch; the head's pair / quad sums follow once its block sums are visible (the caller). */
#define FA_CB 16
static __device__ void fa16_comb_row(const slcu_attn &p, int nchs, int hdp, const float *po, const float *ml, const slcu_act &qa,
                                     int R, int tid, int nthr) {
    const int G = p.n_heads / p.n_kv, nrows = p.n * G, kvh = R / nrows, r = R % nrows;
    int lo, hi, clo, d;
    f16_range(p, r, nrows, G, lo, hi);
    f16_range(p, 0, nrows, G, clo, d);
    const int t = r / G, h = kvh * G + r % G, cb0 = clo / FA16_C;
    /* the row's chunks: ci0 .. ci1 (the others hold none of its keys) */
    const int ci0 = max(lo / FA16_C - cb0, 0), ci1 = min(hi / FA16_C - cb0, nchs - 1);
    const float *qv = p.q + (size_t)t * p.ldq + (size_t)h * p.qstride, *mr = ml + (size_t)R * nchs * 2;
    const float *orow = po + (size_t)R * nchs * hdp;
    for (int dd = tid; dd < p.hd; dd += nthr) {
        float M = -INFINITY, L = 0.0f, O = 0.0f, a, b;
        for (int c = ci0; c <= ci1; c += FA_CB) {
            float mv[FA_CB], lv[FA_CB], ov[FA_CB];
#pragma unroll
            for (int u = 0; u < FA_CB; u++)
                if (c + u <= ci1)
                    mv[u] = __ldcg(mr + 2 * (c + u)), lv[u] = __ldcg(mr + 2 * (c + u) + 1),
                    ov[u] = __ldcg(orow + (size_t)(c + u) * hdp + dd);
#pragma unroll
            for (int u = 0; u < FA_CB; u++)
                if (c + u <= ci1) {
                    f16_fold(M, L, mv[u], lv[u], a, b);
                    O = f16_mix(O, ov[u], a, b);
                }
        }
        const float v = f16_final(p, h, M, L, O, p.gated ? qv + p.hd + dd : NULL);
        p.out[(size_t)t * p.ldo + (size_t)h * p.hd + dd] = v;
        if (qa.q) quant_lane(v, h * p.hd + dd, tid & 31, qa);
    }
}

/* fa16_comb_row's operations in its order, the loads two batches deep: while a thread folds FA_CB chunks, the next
 * FA_CB chunks' (m, l, o) are already in flight (k_fa16_comb waited one L2 round trip a batch: 33 of them at 32k
 * positions, docs/CUDA.md "The decode attention on a cluster"). Same floats, same chain: bitwise fa16_comb_row. */
static __device__ __forceinline__ void fa16_comb_ld(const float *mr, const float *orow, int hdp, int c, int ci1, int dd,
                                                    float mv[FA_CB], float lv[FA_CB], float ov[FA_CB]) {
#pragma unroll
    for (int u = 0; u < FA_CB; u++)
        if (c + u <= ci1)
            mv[u] = __ldcg(mr + 2 * (c + u)), lv[u] = __ldcg(mr + 2 * (c + u) + 1),
            ov[u] = __ldcg(orow + (size_t)(c + u) * hdp + dd);
}
static __device__ __forceinline__ void fa16_comb_fold(int c, int ci1, const float mv[FA_CB], const float lv[FA_CB],
                                                      const float ov[FA_CB], float &M, float &L, float &O) {
    float a, b;
#pragma unroll
    for (int u = 0; u < FA_CB; u++)
        if (c + u <= ci1) {
            f16_fold(M, L, mv[u], lv[u], a, b);
            O = f16_mix(O, ov[u], a, b);
        }
}
static __device__ void fa16_comb_row_pf(const slcu_attn &p, int nchs, int hdp, const float *po, const float *ml,
                                        const slcu_act &qa, int R, int tid, int nthr) {
    const int G = p.n_heads / p.n_kv, nrows = p.n * G, kvh = R / nrows, r = R % nrows;
    int lo, hi, clo, d;
    f16_range(p, r, nrows, G, lo, hi);
    f16_range(p, 0, nrows, G, clo, d);
    const int t = r / G, h = kvh * G + r % G, cb0 = clo / FA16_C;
    const int ci0 = max(lo / FA16_C - cb0, 0), ci1 = min(hi / FA16_C - cb0, nchs - 1);
    const float *qv = p.q + (size_t)t * p.ldq + (size_t)h * p.qstride, *mr = ml + (size_t)R * nchs * 2;
    const float *orow = po + (size_t)R * nchs * hdp;
    for (int dd = tid; dd < p.hd; dd += nthr) {
        float M = -INFINITY, L = 0.0f, O = 0.0f;
        float m0[FA_CB], l0[FA_CB], o0[FA_CB], m1[FA_CB], l1[FA_CB], o1[FA_CB];
        fa16_comb_ld(mr, orow, hdp, ci0, ci1, dd, m0, l0, o0);
        for (int c = ci0; c <= ci1; c += 2 * FA_CB) {
            fa16_comb_ld(mr, orow, hdp, c + FA_CB, ci1, dd, m1, l1, o1);
            fa16_comb_fold(c, ci1, m0, l0, o0, M, L, O);
            fa16_comb_ld(mr, orow, hdp, c + 2 * FA_CB, ci1, dd, m0, l0, o0);
            fa16_comb_fold(c + FA_CB, ci1, m1, l1, o1, M, L, O);
        }
        const float v = f16_final(p, h, M, L, O, p.gated ? qv + p.hd + dd : NULL);
        p.out[(size_t)t * p.ldo + (size_t)h * p.hd + dd] = v;
        if (qa.q) quant_lane(v, h * p.hd + dd, tid & 31, qa);
    }
}

/* a decode batch's items (cuda_flash.cu slcu_attention_f16_items): each item's own attention, partials and chunks */
struct fa_item {
    slcu_attn a;
    float *po, *ml; /* the item's partials: [rows][nchs][hdp] and [rows][nchs][2] */
    int nchs, fin;  /* fin: its one chunk ended in k_fa16_part_items (fa16_part_fin) */
};
struct fa_items {
    fa_item it[SLCU_ATTN_ITEMS];
};

/* cuda_flash_cl.cu (host): the decode attention of a (2 .. 16 chunks, pd NULL) in one launch on clusters, rows bitwise
 * the decode pair's: 0 launched, 1 not taken (nothing launched: the caller runs the pair); msg is kept for a failure
 * the caller would report (none today: a launch the device refuses is not taken) */
int fa16_cl_launch(const slcu_attn *a, int hdp, int nchs, float *po, float *ml, int app, const slcu_act *qa, char *msg,
                   size_t msglen);
/* cuda_flash_cl.cu (host): n items (f16 caches, head_dim padded to hdp, at most most <= 16 chunks each) on clusters in one
 * launch, each item's rows and cache bitwise its pair alone: 0 launched, 1 not taken (nothing launched) */
int fa16_cl_items_launch(const fa_items *I, int n, int hdp, int most, char *msg, size_t msglen);
/* cuda_flash_cl.cu (host): the pair's second launch as k_fa16_comb's (same arguments), its loads two batches deep */
void fa16_comb2_launch(const slcu_attn *a, const int *pd, int nchs, int hdp, const float *po, const float *ml, const slcu_act *qa);
/* cuda_flash_cl.cu (host): the items' fold as k_fa16_comb_items' launch (n items of one shape, partials of hdp floats a
 * chunk) with k_fa16_comb2's folds (SLUICE_CUDA_FA_CL=2) */
void fa16_comb2_items_launch(const fa_items *I, int n, int hdp);

#endif
