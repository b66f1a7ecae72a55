/*
 * cuda_mla.cu — multi-head latent attention over its compressed cache on the device (cuda.h slcu_mla;
 * src/backend/backend.h be_mla; the CPU op is src/backend/cpu/cpu_mla.c cpu_mla, the algebra src/model/mla.c).
 * Three launches: the n new [c | k_pe] rows into the cache; the absorbed queries (k_mla_absorb: a CTA per 64 latent
 * columns, head and 2 or 64 tokens, W_uk's tile staged once for its tokens), each output one thread's sum of
 * q_nope[i] * W_uk[i][c] over i in row order from 0 as the CPU's axpy loop does, each weight dequantised as quant.c
 * q_row_to_f32 (s * code + b for q8 / q4), bitwise the thread-per-output k_mla_absorb_ref; then a CTA per (token, head): the
 * scores (a warp per cached row, a fixed butterfly), the max, exp, the sum in double (a fixed tree), and
 * thread c's latent sum over the positions in increasing order, lat += (e_p / sum) c_p. Every order depends
 * on the shapes only: bitwise repeatable, a token in a batch equals the token alone. The kernels wait (pdl_wait)
 * before their first global access and are launched by cuda_pdl.cuh pdl_launch, on the legacy stream as before.
 * At MLA2_AUTO positions or more (a decode step's 1 .. 8 tokens, a prefill's chunk of up to 64) the attention runs in
 * three launches (the section below k_mla_attend; a prefill's call in chunks of tokens) that read the cache once a
 * group of heads, bitwise the same outputs (SLUICE_CUDA_MLA=1: k_mla_attend always, =2: the split always).
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_pdl.cuh"

static int bad(char *msg, size_t n, const char *what) {
    if (msg && n) snprintf(msg, n, "%s", what);
    return -1;
}

__device__ __forceinline__ float sc_at(const void *p, dt_type sdt, size_t i) {
    if (sdt == DT_F32) return ((const float *)p)[i];
    const unsigned short h = ((const unsigned short *)p)[i];
    if (sdt == DT_BF16) return __uint_as_float((unsigned)h << 16);
    return __half2float(__ushort_as_half(h));
}

/* w[row][c] as f32 (quant.c q_row_to_f32) */
__device__ __forceinline__ float w_at(const slcu_mat &m, int row, int c) {
    const size_t k = (size_t)row * m.cols + c;
    if (m.dtype == DT_F32) return ((const float *)m.data)[k];
    if (m.dtype == DT_BF16) return __uint_as_float((unsigned)((const unsigned short *)m.data)[k] << 16);
    if (m.dtype == DT_F16) return __half2float(__ushort_as_half(((const unsigned short *)m.data)[k]));
    const uint8_t *codes = (const uint8_t *)m.data;
    const int code = m.dtype == DT_Q8 ? codes[k] : (codes[k / 2] >> (4 * (k & 1))) & 15;
    const size_t g = (size_t)row * (m.cols / m.group) + c / m.group;
    return __fadd_rn(__fmul_rn(sc_at(m.scales, m.sdtype, g), (float)code), sc_at(m.biases, m.sdtype, g));
}

__global__ void k_mla_store(const slcu_mla a) {
    pdl_wait();
    const int t = blockIdx.y, row = a.r + a.dr;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < row; i += gridDim.x * blockDim.x)
        a.cache[(size_t)(a.pos0 + t) * row + i] = a.ckv[(size_t)t * row + i];
}

/* The reference (the kernel before the tiles, kept for tests and benchmarks: slcu_mla_set bit 4): a thread per (token,
 * head, column), blockIdx.y = token * n_heads + head; columns c < r + dr of q_abs */
__global__ void k_mla_absorb_ref(const slcu_mla a) {
    pdl_wait();
    const int th = blockIdx.y, t = th / a.n_heads, h = th % a.n_heads, row = a.r + a.dr, qh = a.dn + a.dr;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= row) return;
    const float *q = a.q + (size_t)t * a.ldq + (size_t)h * qh;
    float *qc = a.q_abs + (size_t)th * row;
    if (c >= a.r) {
        qc[c] = q[a.dn + c - a.r];
        return;
    }
    float acc = 0.0f;
    for (int i = 0; i < a.dn; i++) acc = __fadd_rn(acc, __fmul_rn(q[i], w_at(a.kv_b, h * (a.dn + a.dv) + i, c)));
    qc[c] = acc;
}

/* ---- the absorbed queries in tiles: q_abs[t][h][c] = sum_{i < dn} q_nope[t][h][i] W_uk_h[i][c] for c < r, the sum
 * acc = 0, acc = __fadd_rn(acc, __fmul_rn(q_i, w_ic)) for i = 0, 1, .. dn - 1 (k_mla_absorb_ref's chain, bit for bit:
 * each output's chain is one thread's, whatever the tile), and q_pe copied to r <= c < r + dr. A CTA per (CT columns,
 * head, TT tokens) of NT threads: the head's W_uk tile and the tokens' q_nope staged DI rows at a time in shared memory
 * (ws [DI][CT + 4], qs [DI][TT + 4], f32), each thread then summing its TPT tokens x CPT columns over the rows in order;
 * the next rows' words are loaded into registers while the current ones are summed. A weight is read once a CTA, not
 * once a token. VT: how a thread loads W: AB_GEN w_at per element (any shape); else 8 consecutive columns of a row in
 * one load (an "oct": r % 8 == 0, the data 16-byte aligned, q8 / q4 groups a multiple of 8, so one scale and bias an
 * oct), dequantised with w_at's operations. The extra column tile past r copies q_pe. tools/cuda_absorb_emu.c runs
 * these loops on the host. ---- */
enum { AB_GEN = 0, AB_F32, AB_BF16, AB_F16, AB_Q8, AB_Q4 };
#define AB_SMALLN 16 /* up to this many tokens the decode shape (AB_D), else the prefill's (AB_P) */

/* scale word u of type sdt as f32 (sc_at) */
__device__ __forceinline__ float ab_word(unsigned u, dt_type sdt) {
    if (sdt == DT_F32) return __uint_as_float(u);
    if (sdt == DT_BF16) return __uint_as_float(u << 16);
    return __half2float(__ushort_as_half((unsigned short)u));
}

/* the oct at (row, c) of m: its data words (f32 8, bf16 / f16 4, q8 2, q4 1) and its group's scale and bias words */
template <int VT>
__device__ __forceinline__ void ab_load(const slcu_mat &m, int row, int c, unsigned *w, unsigned &s, unsigned &b) {
    const size_t k = (size_t)row * m.cols + c;
    if constexpr (VT == AB_F32) {
        const uint4 x = ((const uint4 *)((const float *)m.data + k))[0], y = ((const uint4 *)((const float *)m.data + k))[1];
        w[0] = x.x, w[1] = x.y, w[2] = x.z, w[3] = x.w, w[4] = y.x, w[5] = y.y, w[6] = y.z, w[7] = y.w;
    } else if constexpr (VT == AB_BF16 || VT == AB_F16) {
        const uint4 x = *(const uint4 *)((const unsigned short *)m.data + k);
        w[0] = x.x, w[1] = x.y, w[2] = x.z, w[3] = x.w;
    } else if constexpr (VT == AB_Q8) {
        const uint2 x = *(const uint2 *)((const uint8_t *)m.data + k);
        w[0] = x.x, w[1] = x.y;
    } else {
        w[0] = *(const unsigned *)((const uint8_t *)m.data + k / 2);
    }
    if constexpr (VT == AB_Q8 || VT == AB_Q4) {
        const size_t g = (size_t)row * (m.cols / m.group) + c / m.group;
        if (m.sdtype == DT_F32) s = ((const unsigned *)m.scales)[g], b = ((const unsigned *)m.biases)[g];
        else s = ((const unsigned short *)m.scales)[g], b = ((const unsigned short *)m.biases)[g];
    }
}

/* the oct's 8 weights as w_at gives them (little-endian words: element j at bit (j * bits) % 32 of word (j * bits) / 32) */
template <int VT>
__device__ __forceinline__ void ab_dequant(const unsigned *w, unsigned s, unsigned b, dt_type sdt, float *v) {
#pragma unroll
    for (int j = 0; j < 8; j++) {
        if constexpr (VT == AB_F32) v[j] = __uint_as_float(w[j]);
        else if constexpr (VT == AB_BF16) v[j] = __uint_as_float(((w[j / 2] >> (16 * (j & 1))) & 0xffffu) << 16);
        else if constexpr (VT == AB_F16) v[j] = __half2float(__ushort_as_half((unsigned short)(w[j / 2] >> (16 * (j & 1)))));
        else {
            const int code = VT == AB_Q8 ? (int)((w[j / 4] >> (8 * (j & 3))) & 255) : (int)((w[0] >> (4 * j)) & 15);
            v[j] = __fadd_rn(__fmul_rn(ab_word(s, sdt), (float)code), ab_word(b, sdt));
        }
    }
}

/* grid ((r + CT - 1) / CT + (dr > 0), n_heads, (n + TT - 1) / TT), NT threads */
template <int NT, int CT, int TPT, int CPT, int DI, int VT>
__global__ void __launch_bounds__(NT) k_mla_absorb(const slcu_mla a) {
    constexpr int NCG = CT / CPT, TT = NT / NCG * TPT, WS = CT + 4, QS = TT + 4;
    constexpr int UO = VT ? DI * CT / 8 / NT : 1, UQ = DI * TT / NT, UE = DI * CT / NT;
    constexpr int NW = VT == AB_F32 ? 8 : VT == AB_BF16 || VT == AB_F16 ? 4 : VT == AB_Q8 ? 2 : 1;
    static_assert(CT % CPT == 0 && NT % NCG == 0 && CT % 8 == 0 && (DI * CT) % (8 * NT) == 0 && (DI * TT) % NT == 0, "tile");
    static_assert((TPT == 1 || TPT == 4) && (CPT == 1 || CPT == 4), "the operands' loads");
    __shared__ __align__(16) float ws[DI * WS];
    __shared__ __align__(16) float qs[DI * QS];
    pdl_wait();
    const int h = blockIdx.y, t0 = blockIdx.z * TT, c0 = blockIdx.x * CT, row = a.r + a.dr, qh = a.dn + a.dr;
    const int nt = min(TT, a.n - t0);
    const float *q = a.q + (size_t)t0 * a.ldq + (size_t)h * qh;
    if (c0 >= a.r) { /* the tile past r: q_pe */
        for (int k = threadIdx.x; k < nt * a.dr; k += NT) {
            const int tt = k / a.dr, j = k % a.dr;
            a.q_abs[((size_t)(t0 + tt) * a.n_heads + h) * row + a.r + j] = q[(size_t)tt * a.ldq + a.dn + j];
        }
        return;
    }
    const int wr0 = h * (a.dn + a.dv), cg = threadIdx.x % NCG, tg = threadIdx.x / NCG;
    unsigned rw[UO][NW], rs[UO], rb[UO];
    float rq[UQ];
    auto fetch = [&](int i0) { /* q_nope's rows i0 .. i0 + DI - 1 (and W_uk's, VT) into registers */
#pragma unroll
        for (int u = 0; u < UQ; u++) {
            const int k = threadIdx.x + u * NT, i = k % DI, tt = k / DI;
            rq[u] = i0 + i < a.dn && tt < nt ? q[(size_t)tt * a.ldq + i0 + i] : 0.0f;
        }
        if constexpr (VT != AB_GEN) {
#pragma unroll
            for (int u = 0; u < UO; u++) {
                const int k = threadIdx.x + u * NT, i = k / (CT / 8), c = c0 + k % (CT / 8) * 8;
                if (i0 + i < a.dn && c < a.r) ab_load<VT>(a.kv_b, wr0 + i0 + i, c, rw[u], rs[u], rb[u]);
            }
        }
    };
    auto stage = [&](int i0) { /* the registers (or, AB_GEN, w_at) into qs and ws: zeros past dn, r and the tokens */
#pragma unroll
        for (int u = 0; u < UQ; u++) {
            const int k = threadIdx.x + u * NT;
            qs[k % DI * QS + k / DI] = rq[u];
        }
        if constexpr (VT != AB_GEN) {
#pragma unroll
            for (int u = 0; u < UO; u++) {
                const int k = threadIdx.x + u * NT, i = k / (CT / 8), oc = k % (CT / 8), c = c0 + oc * 8;
                float v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
                if (i0 + i < a.dn && c < a.r) ab_dequant<VT>(rw[u], rs[u], rb[u], a.kv_b.sdtype, v);
                float4 *d = (float4 *)&ws[i * WS + oc * 8];
                d[0] = make_float4(v[0], v[1], v[2], v[3]), d[1] = make_float4(v[4], v[5], v[6], v[7]);
            }
        } else {
            for (int u = 0; u < UE; u++) {
                const int k = threadIdx.x + u * NT, i = k / CT, cc = k % CT;
                ws[i * WS + cc] = i0 + i < a.dn && c0 + cc < a.r ? w_at(a.kv_b, wr0 + i0 + i, c0 + cc) : 0.0f;
            }
        }
    };
    float acc[TPT][CPT];
#pragma unroll
    for (int x = 0; x < TPT; x++)
#pragma unroll
        for (int y = 0; y < CPT; y++) acc[x][y] = 0.0f;
    fetch(0);
    for (int i0 = 0; i0 < a.dn; i0 += DI) {
        stage(i0);
        __syncthreads();
        if (i0 + DI < a.dn) fetch(i0 + DI);
        const int ni = min(DI, a.dn - i0);
#pragma unroll 4
        for (int i = 0; i < ni; i++) {
            float qv[TPT], wv[CPT];
            if constexpr (TPT == 4) {
                const float4 x = *(const float4 *)&qs[i * QS + tg * 4];
                qv[0] = x.x, qv[1] = x.y, qv[2] = x.z, qv[3] = x.w;
            } else qv[0] = qs[i * QS + tg];
            if constexpr (CPT == 4) {
                const float4 x = *(const float4 *)&ws[i * WS + cg * 4];
                wv[0] = x.x, wv[1] = x.y, wv[2] = x.z, wv[3] = x.w;
            } else wv[0] = ws[i * WS + cg];
#pragma unroll
            for (int x = 0; x < TPT; x++)
#pragma unroll
                for (int y = 0; y < CPT; y++) acc[x][y] = __fadd_rn(acc[x][y], __fmul_rn(qv[x], wv[y]));
        }
        __syncthreads();
    }
    const int c = c0 + cg * CPT;
#pragma unroll
    for (int x = 0; x < TPT; x++) {
        const int tt = tg * TPT + x;
        if (tt >= nt) break;
        float *o = a.q_abs + ((size_t)(t0 + tt) * a.n_heads + h) * row + c;
        if (CPT == 4 && c + 3 < a.r && !((uintptr_t)o & 15)) *(float4 *)o = make_float4(acc[x][0], acc[x][1], acc[x][2], acc[x][3]);
        else
#pragma unroll
            for (int y = 0; y < CPT; y++)
                if (c + y < a.r) o[y] = acc[x][y];
    }
}

/* the two shapes: AB_D for decode (a CTA per 64 columns, head and 2 tokens: 9 x 128 CTAs for DeepSeek-V3's one token,
 * every weight load of a 64-row half issued at once), AB_P for prefill (64 columns x 64 tokens, a thread's 4 x 4
 * outputs from two 16-byte shared loads a row) */
#define AB_D 128, 64, 1, 1, 64
#define AB_P 256, 64, 4, 4, 32

template <int NT, int CT, int TPT, int CPT, int DI>
static void ab_launch(const slcu_mla *a, int vt) {
    constexpr int TT = NT / (CT / CPT) * TPT;
    const dim3 g((unsigned)((a->r + CT - 1) / CT + (a->dr > 0)), (unsigned)a->n_heads, (unsigned)((a->n + TT - 1) / TT));
    switch (vt) {
    case AB_F32: pdl_launch(k_mla_absorb<NT, CT, TPT, CPT, DI, AB_F32>, g, NT, 0, 0, *a); break;
    case AB_BF16: pdl_launch(k_mla_absorb<NT, CT, TPT, CPT, DI, AB_BF16>, g, NT, 0, 0, *a); break;
    case AB_F16: pdl_launch(k_mla_absorb<NT, CT, TPT, CPT, DI, AB_F16>, g, NT, 0, 0, *a); break;
    case AB_Q8: pdl_launch(k_mla_absorb<NT, CT, TPT, CPT, DI, AB_Q8>, g, NT, 0, 0, *a); break;
    case AB_Q4: pdl_launch(k_mla_absorb<NT, CT, TPT, CPT, DI, AB_Q4>, g, NT, 0, 0, *a); break;
    default: pdl_launch(k_mla_absorb<NT, CT, TPT, CPT, DI, AB_GEN>, g, NT, 0, 0, *a);
    }
}

static int mla_mode = -1; /* slcu_mla_set below */

/* q_abs (with the test bit 4: k_mla_absorb_ref's launches, in pieces of at most 65535 (token, head) pairs, its grid's y) */
static void mla_absorb(const slcu_mla *a) {
    const int row = a->r + a->dr;
    if (mla_mode & 4) {
        const int per = 65535 / a->n_heads > 0 ? 65535 / a->n_heads : 1;
        for (int t0 = 0; t0 < a->n; t0 += per) {
            slcu_mla p = *a;
            p.n = a->n - t0 < per ? a->n - t0 : per;
            p.q += (size_t)t0 * a->ldq, p.q_abs += (size_t)t0 * a->n_heads * row;
            pdl_launch(k_mla_absorb_ref, dim3((unsigned)((row + 127) / 128), (unsigned)(p.n * a->n_heads)), 128, 0, 0, p);
        }
        return;
    }
    const slcu_mat *w = &a->kv_b;
    const int quant = w->dtype == DT_Q8 || w->dtype == DT_Q4;
    int vt = AB_GEN;
    if (a->r % 8 == 0 && !((uintptr_t)w->data & 15) && (!quant || w->group % 8 == 0))
        vt = w->dtype == DT_F32 ? AB_F32 : w->dtype == DT_BF16 ? AB_BF16 : w->dtype == DT_F16 ? AB_F16 : w->dtype == DT_Q8 ? AB_Q8 : AB_Q4;
    if (a->n <= AB_SMALLN) ab_launch<AB_D>(a, vt);
    else ab_launch<AB_P>(a, vt);
}

#define MLA_THREADS 256

/* sc[p] = expf(sc[p] - mx) for p < n_keys, and their sum: thread i's positions i, i + MLA_THREADS, ... in double from
 * 0, then a fixed tree over part (MLA_THREADS doubles, shared); returns (float) of the sum. k_mla_attend's order, which
 * the split (k_mla2_soft) keeps. */
__device__ __forceinline__ float mla_exp_sum(float *sc, int n_keys, float mx, double *part) {
    double s = 0.0;
    for (int p = threadIdx.x; p < n_keys; p += MLA_THREADS) {
        const float e = expf(__fsub_rn(sc[p], mx));
        sc[p] = e;
        s += e;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = MLA_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    return (float)part[0];
}

__global__ void k_mla_attend(const slcu_mla a) {
    pdl_wait();
    extern __shared__ float sc[];
    __shared__ double part[MLA_THREADS];
    __shared__ float mx_s;
    const int th = blockIdx.x, t = th / a.n_heads, row = a.r + a.dr, n_keys = a.pos0 + t + 1;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float *qc = a.q_abs + (size_t)th * row;
    for (int p = warp; p < n_keys; p += MLA_THREADS / 32) {
        const float *kr = a.cache + (size_t)p * row;
        float acc = 0.0f;
        for (int i = lane; i < row; i += 32) acc = __fadd_rn(acc, __fmul_rn(qc[i], kr[i]));
        for (int o = 16; o > 0; o >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, o));
        if (!lane) sc[p] = __fmul_rn(acc, a.scale);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float mx = -INFINITY;
        for (int p = 0; p < n_keys; p++)
            if (sc[p] > mx) mx = sc[p];
        mx_s = mx;
    }
    __syncthreads();
    const float fsum = mla_exp_sum(sc, n_keys, mx_s, part);
    float *lat = a.lat + (size_t)th * a.r;
    for (int c = threadIdx.x; c < a.r; c += MLA_THREADS) {
        float acc = 0.0f;
        for (int p = 0; p < n_keys; p++) acc = __fadd_rn(acc, __fmul_rn(__fdiv_rn(sc[p], fsum), a.cache[(size_t)p * row + c]));
        lat[c] = acc;
    }
}

/* ---- SLUICE_CUDA_MLA=2 (slcu_mla_set): the same attention for any n tokens in three launches that read
 * each cached row once per group of heads, not once per head and pass; every output bitwise k_mla_attend's. The
 * scores (k_mla2_scores): a CTA per (chunk of keys, MLA2_SG heads), a warp per key, each lane its strided chain
 * i = lane, lane + 32, .. for every head of the group (q_abs in shared memory, 16-byte pieces of 4 heads), the same
 * butterfly, * scale, into the scratch [n][heads][pos0 + n]. The softmax (k_mla2_soft): a CTA per (token, head) of
 * MLA_THREADS threads, the max (order-free), exp and the double sum over k_mla_attend's partition and tree, and the
 * weight e_p / sum stored in place (the division k_mla_attend repeats per column, the same value). The latents
 * (k_mla2_lat): a CTA per (32 columns, MLA2_LH heads), lane c, each warp 4 heads' chains over the positions in
 * increasing order, cache rows and weights staged in tiles of MLA2_PC positions. No limit on the positions from
 * shared memory. More than MLA2_MAXN tokens (a prefill's) go in chunks (mla2_attend). ---- */
#define MLA2_MAXN 8
#define MLA2_SG 16 /* heads a scores CTA */
#define MLA2_LH 16 /* heads a latents CTA: 4 warps of 4 */
#define MLA2_PC 64 /* positions a latents tile */
#define MLA2_WS (MLA2_LH + 4)

/* grid (key chunks, head groups, tokens), MLA_THREADS threads; smem: nj * (MLA2_SG / 4) * 32 float4 */
__global__ void k_mla2_scores(const slcu_mla a, float *S, int nmax, int kc) {
    pdl_wait();
    extern __shared__ float4 qs4[];
    const int t = blockIdx.z, h0 = blockIdx.y * MLA2_SG, row = a.r + a.dr, n_keys = a.pos0 + t + 1, nj = (row + 31) / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    /* qs4[(j * (SG / 4) + g4) * 32 + lane] = heads 4 g4 .. 4 g4 + 3 of the group at column j * 32 + lane */
    float *qs = (float *)qs4;
    for (int k = threadIdx.x; k < nj * MLA2_SG * 32; k += MLA_THREADS) {
        const int l = k & 31, g = (k >> 5) % MLA2_SG, j = (k >> 5) / MLA2_SG, i = j * 32 + l, h = h0 + g;
        qs[((j * (MLA2_SG / 4) + g / 4) * 32 + l) * 4 + (g & 3)] =
            i < row && h < a.n_heads ? a.q_abs[((size_t)t * a.n_heads + h) * row + i] : 0.0f;
    }
    __syncthreads();
    const int p1 = min(n_keys, (int)(blockIdx.x + 1) * kc);
    for (int p = blockIdx.x * kc + warp; p < p1; p += MLA_THREADS / 32) {
        const float *kr = a.cache + (size_t)p * row;
        float acc[MLA2_SG];
#pragma unroll
        for (int g = 0; g < MLA2_SG; g++) acc[g] = 0.0f;
        for (int j = 0; j < nj; j++) {
            const int i = j * 32 + lane;
            if (i >= row) break;
            const float k = kr[i];
#pragma unroll
            for (int g4 = 0; g4 < MLA2_SG / 4; g4++) {
                const float4 q = qs4[(j * (MLA2_SG / 4) + g4) * 32 + lane];
                acc[4 * g4 + 0] = __fadd_rn(acc[4 * g4 + 0], __fmul_rn(q.x, k));
                acc[4 * g4 + 1] = __fadd_rn(acc[4 * g4 + 1], __fmul_rn(q.y, k));
                acc[4 * g4 + 2] = __fadd_rn(acc[4 * g4 + 2], __fmul_rn(q.z, k));
                acc[4 * g4 + 3] = __fadd_rn(acc[4 * g4 + 3], __fmul_rn(q.w, k));
            }
        }
        float mine = 0.0f;
#pragma unroll
        for (int g = 0; g < MLA2_SG; g++) {
            float v = acc[g];
            for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
            if (lane == g) mine = v; /* every lane holds the same sum (each step adds the same two values) */
        }
        if (lane < MLA2_SG && h0 + lane < a.n_heads)
            S[((size_t)t * a.n_heads + h0 + lane) * nmax + p] = __fmul_rn(mine, a.scale);
    }
}

/* grid (heads, tokens), MLA_THREADS threads: k_mla_attend's softmax on S's row, the weights e_p / sum in place */
__global__ void k_mla2_soft(const slcu_mla a, float *S, int nmax) {
    pdl_wait();
    __shared__ double part[MLA_THREADS];
    __shared__ float mxp[MLA_THREADS];
    const int h = blockIdx.x, t = blockIdx.y, n_keys = a.pos0 + t + 1;
    float *sc = S + ((size_t)t * a.n_heads + h) * nmax;
    float mx = -INFINITY;
    for (int p = threadIdx.x; p < n_keys; p += MLA_THREADS)
        if (sc[p] > mx) mx = sc[p];
    mxp[threadIdx.x] = mx;
    __syncthreads();
    for (int w = MLA_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w && mxp[threadIdx.x + w] > mxp[threadIdx.x]) mxp[threadIdx.x] = mxp[threadIdx.x + w];
        __syncthreads();
    }
    /* the max of the same values as thread 0's scan (a zero's sign aside, which x - mx and expf do not see) */
    const float fsum = mla_exp_sum(sc, n_keys, mxp[0], part);
    for (int p = threadIdx.x; p < n_keys; p += MLA_THREADS) sc[p] = __fdiv_rn(sc[p], fsum);
}

/* grid (column slices of 32, head groups of MLA2_LH, tokens), MLA2_LH / 4 warps; the next tile is loaded into
 * registers while the current one is summed */
__global__ void k_mla2_lat(const slcu_mla a, const float *S, int nmax) {
    pdl_wait();
    constexpr int NTH = MLA2_LH / 4 * 32, CPT = MLA2_PC * 32 / NTH, WPT = MLA2_PC * MLA2_LH / NTH;
    __shared__ float cs[MLA2_PC][32];
    __shared__ __align__(16) float ws[MLA2_PC][MLA2_WS];
    const int t = blockIdx.z, h0 = blockIdx.y * MLA2_LH, c0 = blockIdx.x * 32, row = a.r + a.dr, n_keys = a.pos0 + t + 1;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float *srow = S + (size_t)t * a.n_heads * nmax;
    float rc[CPT], rw[WPT];
    float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f, acc3 = 0.0f;
    auto fetch = [&](int q0) {
#pragma unroll
        for (int u = 0; u < CPT; u++) {
            const int k = threadIdx.x + u * NTH, pp = k >> 5, l = k & 31;
            rc[u] = q0 + pp < n_keys && c0 + l < a.r ? a.cache[(size_t)(q0 + pp) * row + c0 + l] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < WPT; u++) {
            const int k = threadIdx.x + u * NTH, pp = k % MLA2_PC, g = k / MLA2_PC;
            rw[u] = q0 + pp < n_keys && h0 + g < a.n_heads ? srow[(size_t)(h0 + g) * nmax + q0 + pp] : 0.0f;
        }
    };
    fetch(0);
    for (int q0 = 0; q0 < n_keys; q0 += MLA2_PC) {
#pragma unroll
        for (int u = 0; u < CPT; u++) {
            const int k = threadIdx.x + u * NTH;
            cs[k >> 5][k & 31] = rc[u];
        }
#pragma unroll
        for (int u = 0; u < WPT; u++) {
            const int k = threadIdx.x + u * NTH;
            ws[k % MLA2_PC][k / MLA2_PC] = rw[u];
        }
        __syncthreads();
        if (q0 + MLA2_PC < n_keys) fetch(q0 + MLA2_PC);
        const int np = min(MLA2_PC, n_keys - q0);
        for (int pp = 0; pp < np; pp++) {
            const float c = cs[pp][lane];
            const float4 w = *(const float4 *)&ws[pp][4 * warp];
            acc0 = __fadd_rn(acc0, __fmul_rn(w.x, c));
            acc1 = __fadd_rn(acc1, __fmul_rn(w.y, c));
            acc2 = __fadd_rn(acc2, __fmul_rn(w.z, c));
            acc3 = __fadd_rn(acc3, __fmul_rn(w.w, c));
        }
        __syncthreads();
    }
    const int c = c0 + lane, h = h0 + 4 * warp;
    if (c >= a.r) return;
    float *lat = a.lat + ((size_t)t * a.n_heads + h) * a.r + c;
    if (h < a.n_heads) lat[0] = acc0;
    if (h + 1 < a.n_heads) lat[a.r] = acc1;
    if (h + 2 < a.n_heads) lat[2 * (size_t)a.r] = acc2;
    if (h + 3 < a.n_heads) lat[3 * (size_t)a.r] = acc3;
}

/* mode (cuda.h): 1 k_mla_attend, 2 the split (any n tokens: cuda.h's "1 .. 8" predates the prefill's chunks), 3 (the
 * default since call Z, docs/CUDA.md) the split from MLA2_AUTO positions on, any n (at depth 1 k_mla_attend is 7 us
 * faster, from 512 the split 3.5-8.5x: test_cuda --bench-mla); with the test bits 4 (q_abs by k_mla_absorb_ref) and 8 (k_mla_absorb's launch alone: no cache row
 * stored, no attention; for the absorb's benchmark) */
#define MLA2_AUTO 64
extern "C" void slcu_mla_set(int mode) {
    const char *e = getenv("SLUICE_CUDA_MLA");
    mla_mode = mode >= 0 ? mode : !e || !e[0] ? 3 : e[0] == '2' ? 2 : e[0] == '1' ? 1 : 3;
}

static float *mla_s;
static size_t mla_s_cap; /* floats */

/* the scratch grown outside a recorded step, as cuda_flash.cu fl_room */
static int mla_room(size_t need, char *msg, size_t msglen) {
    if (need <= mla_s_cap) return 0;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (slcu_cur_stream) cudaStreamIsCapturing((cudaStream_t)slcu_cur_stream, &cs);
    if (cs != cudaStreamCaptureStatusNone) return bad(msg, msglen, "mla: the scores' scratch grows inside a recorded step");
    if (mla_s) cudaFree(mla_s);
    mla_s = NULL, mla_s_cap = 0;
    const size_t cap = need + need / 2 > ((size_t)1 << 20) ? need + need / 2 : (size_t)1 << 20;
    cudaError_t e = cudaMalloc(&mla_s, cap * sizeof(float));
    if (e != cudaSuccess) {
        if (msg && msglen) snprintf(msg, msglen, "mla: the scores' scratch: %s", cudaGetErrorString(e));
        return -1;
    }
    mla_s_cap = cap;
    return 0;
}

/* A prefill's call (more than MLA2_MAXN tokens) runs in chunks of ct consecutive tokens, chunk k a call of its own
 * (q_abs, lat at its first token, pos0 advanced, its keys pos0 + t0 + tt + 1 as in the whole call): every output of
 * the three kernels depends on its own (token, head), its key count, q_abs row and the cache only, never on n, nmax,
 * kc or the grid, so a chunk's outputs are the whole call's, bitwise k_mla_attend's. ct: all n when the scratch
 * [n][heads][pos0 + n] fits MLA2_SCAP floats, else as many as fit, at least MLA2_MAXN. The chunks share the one
 * scratch, in stream order (each kernel waits for the one before: cuda_pdl.cuh). */
#define MLA2_SCAP ((size_t)1 << 24) /* 64 MiB: 64 tokens x 128 heads at 2048 positions in one chunk */

/* the scores' key chunk: about 2 CTAs an SM of 132 for one token at any depth (16 .. 256 keys a CTA, a multiple of
 * the 8 warps); a prefill's chunk counts its tokens too, so that the q_abs staged a CTA (its heads' rows) is read for
 * up to 256 keys, not 16 */
static int mla2_kc(int nmax, int groups, int n) {
    const size_t work = (size_t)nmax * groups * (n > MLA2_MAXN ? n : 1);
    int kc = (int)((work + 263) / 264);
    kc = (kc + 7) / 8 * 8;
    return kc < 16 ? 16 : kc > 256 ? 256 : kc;
}

/* the split path's launches, after k_mla_store and k_mla_absorb of all n tokens (the caller took the shape: q_abs's
 * group in 48 KiB) */
static int mla2_attend(const slcu_mla *a, char *msg, size_t msglen) {
    const int row = a->r + a->dr, nj = (row + 31) / 32, nall = a->pos0 + a->n;
    const size_t qsm = (size_t)nj * MLA2_SG * 32 * sizeof(float), per = (size_t)a->n_heads * nall;
    int ct = a->n;
    if (a->n > MLA2_MAXN && (size_t)a->n * per > MLA2_SCAP)
        ct = MLA2_SCAP / per > MLA2_MAXN ? (int)(MLA2_SCAP / per) : MLA2_MAXN;
    /* the largest chunk's (the last one's nmax is nall); a prefill's call asks for MLA2_SCAP at once, which its
     * chunks never pass: one cudaMalloc for the whole prompt, where growing with the depth freed and reallocated
     * (a device-wide wait each) at every half again */
    const size_t need = (size_t)ct * per;
    if (mla_room(a->n > MLA2_MAXN && need < MLA2_SCAP ? MLA2_SCAP : need, msg, msglen)) return -1;
    const int groups = (a->n_heads + MLA2_SG - 1) / MLA2_SG;
    for (int t0 = 0; t0 < a->n; t0 += ct) {
        slcu_mla c = *a;
        c.n = a->n - t0 < ct ? a->n - t0 : ct, c.pos0 = a->pos0 + t0;
        c.q += (size_t)t0 * a->ldq, c.ckv += (size_t)t0 * row; /* not read by the three kernels */
        c.q_abs += (size_t)t0 * a->n_heads * row, c.lat += (size_t)t0 * a->n_heads * a->r;
        const int nmax = c.pos0 + c.n, kc = mla2_kc(nmax, groups, c.n);
        pdl_launch(k_mla2_scores, dim3((unsigned)((nmax + kc - 1) / kc), (unsigned)groups, (unsigned)c.n), MLA_THREADS, qsm, 0,
                   c, mla_s, nmax, kc);
        pdl_launch(k_mla2_soft, dim3((unsigned)c.n_heads, (unsigned)c.n), MLA_THREADS, 0, 0, c, mla_s, nmax);
        pdl_launch(k_mla2_lat, dim3((unsigned)((c.r + 31) / 32), (unsigned)((c.n_heads + MLA2_LH - 1) / MLA2_LH), (unsigned)c.n),
                   MLA2_LH / 4 * 32, 0, 0, c, (const float *)mla_s, nmax);
    }
    return 0;
}

static int mla_smem_max;

extern "C" int slcu_mla_attention(const slcu_mla *a, char *msg, size_t msglen) {
    const slcu_mat *w = &a->kv_b;
    if (a->n_heads <= 0 || a->r <= 0 || a->dr < 0 || a->dn <= 0 || a->dv <= 0 || a->pos0 < 0)
        return bad(msg, msglen, "mla: needs heads, kv_lora, qk_nope and v_head_dim positive");
    if (w->dtype != DT_F32 && w->dtype != DT_BF16 && w->dtype != DT_F16 && w->dtype != DT_Q8 && w->dtype != DT_Q4) {
        if (msg && msglen) snprintf(msg, msglen, "mla: the CUDA backend cannot read a %s kv_b_proj", dt_name(w->dtype));
        return -1;
    }
    if (w->cols != a->r || w->rows != a->n_heads * (a->dn + a->dv) ||
        ((w->dtype == DT_Q8 || w->dtype == DT_Q4) && (w->group <= 0 || w->cols % w->group)))
        return bad(msg, msglen, "mla: kv_b_proj's shape does not fit the heads");
    if (a->n <= 0) return 0;
    if (mla_mode < 0) slcu_mla_set(-1);
    const int row = a->r + a->dr;
    /* the default (3) takes the split for decode batches only (a prefill's chunks, session 37, have not run on a GPU:
     * SLUICE_CUDA_MLA=2 takes them) */
    const int m3 = mla_mode & 3,
              split = !(mla_mode & 8) && (m3 == 2 || (m3 == 3 && a->n <= MLA2_MAXN && a->pos0 + a->n >= MLA2_AUTO)) &&
                                    (size_t)((row + 31) / 32) * MLA2_SG * 32 * sizeof(float) <= 48 * 1024;
    if (mla_mode & 8 || split) {
        if (split) pdl_launch(k_mla_store, dim3((unsigned)((row + 255) / 256), (unsigned)a->n), 256, 0, 0, *a);
        mla_absorb(a);
        if (split && mla2_attend(a, msg, msglen)) return -1;
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) {
            if (msg && msglen) snprintf(msg, msglen, "mla launch: %s", cudaGetErrorString(e));
            return -1;
        }
        return 0;
    }
    if (!mla_smem_max) {
        int dev = 0, optin = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        mla_smem_max = optin - (int)(MLA_THREADS * sizeof(double) + 64);
        cudaFuncSetAttribute(k_mla_attend, cudaFuncAttributeMaxDynamicSharedMemorySize, mla_smem_max);
    }
    const size_t smem = (size_t)(a->pos0 + a->n) * sizeof(float);
    if (smem > (size_t)mla_smem_max) {
        if (msg && msglen) snprintf(msg, msglen, "mla: %d positions do not fit the device's shared memory (%d at most)", a->pos0 + a->n, mla_smem_max / 4);
        return -1;
    }
    pdl_launch(k_mla_store, dim3((unsigned)((row + 255) / 256), (unsigned)a->n), 256, 0, 0, *a); /* stream 0: the legacy one */
    mla_absorb(a);
    pdl_launch(k_mla_attend, a->n * a->n_heads, MLA_THREADS, smem, 0, *a);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        if (msg && msglen) snprintf(msg, msglen, "mla launch: %s", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}
