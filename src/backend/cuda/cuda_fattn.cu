/*
 * cuda_fattn.cu — attention of many new tokens at once (prefill), bitwise cuda_ops.cu's k_attention per
 * (token, head): the same scores (8-lane dot in kernels_scalar.c dot_scalar's order, times scale), the same max,
 * exp, the double sum over the same 128 partitions (keys j, j + 128, ... in increasing order) and the same tree
 * over them, then per output column the same chain o += (e_p / sum) v_p in increasing position.
 *
 * What changes is who does it: a CTA per (token, KV head) takes every query head of that KV head (GQA: 8 on
 * Qwen3-30B-A3B), so each K and V row is read from global memory once for all of them, in coalesced tiles staged
 * in shared memory, where k_attention read it once per head, a row per thread; the max and the sums are spread
 * over the CTA instead of one thread. The scores of the CTA's heads stay in shared memory: contexts up to the
 * device's shared memory (G * keys floats); beyond that, or for an unusual shape, the caller keeps k_attention.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda.h"

#define FA_THREADS 256
#define FA_KT 32    /* keys per staged tile */
#define FA_MAXC 8   /* output chains (head, column) per thread: G * hd <= 2048 */
#define FA_HDMAX 256

__device__ __forceinline__ float fa_sigm(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x))); }

/* The scores of the CTA's G heads for token t against keys p0 .. p0 + nk - 1 (a K tile at a time; pair (g, key)
 * over the threads) into sc [G][nk_max], after q into qs [G][hd]. */
__device__ __forceinline__ void fa_scores(const slcu_attn &p, int t, int kvh, int G, int nk, int p0, int nk_max, float *sc,
                                          float *qs, float *tile) {
    const int hd = p.hd, kvrow = p.n_kv * hd, tid = threadIdx.x, ts = hd + 1; /* ts: lane l reads row l, no conflicts */
    for (int i = tid; i < G * hd; i += FA_THREADS) {
        const int g = i / hd, c = i % hd;
        qs[i] = p.q[(size_t)t * p.ldq + (size_t)(kvh * G + g) * p.qstride + c];
    }
    for (int k0 = 0; k0 < nk; k0 += FA_KT) {
        const int kn = nk - k0 < FA_KT ? nk - k0 : FA_KT;
        __syncthreads(); /* the previous tile is read (and qs written) */
        for (int i = tid; i < kn * hd; i += FA_THREADS) {
            const int r = i / hd, c = i % hd;
            tile[r * ts + c] = p.k_cache[(size_t)((p0 + k0 + r) % p.cap) * kvrow + (size_t)kvh * hd + c];
        }
        __syncthreads();
        for (int i = tid; i < G * FA_KT; i += FA_THREADS) {
            const int g = i / FA_KT, r = i % FA_KT;
            if (r >= kn) continue;
            const float *qv = qs + (size_t)g * hd, *kr = tile + r * ts;
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            int c = 0;
            for (; c + 8 <= hd; c += 8)
#pragma unroll
                for (int jj = 0; jj < 8; jj++) acc[jj] = __fadd_rn(acc[jj], __fmul_rn(qv[c + jj], kr[c + jj]));
            for (; c < hd; c++) acc[c & 7] = __fadd_rn(acc[c & 7], __fmul_rn(qv[c], kr[c]));
            const float d = __fadd_rn(__fadd_rn(__fadd_rn(acc[0], acc[1]), __fadd_rn(acc[2], acc[3])),
                                      __fadd_rn(__fadd_rn(acc[4], acc[5]), __fadd_rn(acc[6], acc[7])));
            sc[(size_t)g * nk_max + k0 + r] = __fmul_rn(d, p.scale);
        }
    }
    __syncthreads();
}

/* Scores into weights e / sum in place, k_attention's way: per head (a warp each, in turn) the max (any order gives
 * k_attention's: NaN never wins, a zero's sign does not reach exp(s - max)) and e = exp(s - max); its 128 partial
 * sums in double (keys j, j + 128, ... in order) and its tree; the quotients. */
__device__ __forceinline__ void fa_softmax(const slcu_attn &p, int kvh, int G, int nk, int nk_max, float *sc, double *part) {
    __shared__ float mx_s[FA_THREADS / 32 * 8];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, nw = FA_THREADS / 32;
    for (int g = warp; g < G; g += nw) {
        const int h = kvh * G + g;
        float m = p.sinks ? p.sinks[h] : -INFINITY;
        for (int i = lane; i < nk; i += 32)
            if (sc[(size_t)g * nk_max + i] > m) m = sc[(size_t)g * nk_max + i];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float v = __shfl_xor_sync(0xffffffffu, m, o);
            if (v > m) m = v;
        }
        for (int i = lane; i < nk; i += 32) sc[(size_t)g * nk_max + i] = expf(__fsub_rn(sc[(size_t)g * nk_max + i], m));
        if (lane == 0) mx_s[g] = m;
    }
    __syncthreads();
    for (int i = tid; i < G * 128; i += FA_THREADS) {
        const int g = i / 128, j = i % 128;
        double s = 0.0;
        for (int k = j; k < nk; k += 128) s += sc[(size_t)g * nk_max + k];
        part[i] = s;
    }
    for (int w = 64; w > 0; w >>= 1) {
        __syncthreads();
        for (int i = tid; i < G * w; i += FA_THREADS) part[(i / w) * 128 + i % w] += part[(i / w) * 128 + i % w + w];
    }
    __syncthreads();
    for (int i = tid; i < G * nk; i += FA_THREADS) { /* k_attention divides inside its V loop: the same quotient */
        const int g = i / nk, k = i % nk, h = kvh * G + g;
        const float fsum = (float)(part[g * 128] + (p.sinks ? (double)expf(__fsub_rn(p.sinks[h], mx_s[g])) : 0.0));
        sc[(size_t)g * nk_max + k] = __fdiv_rn(sc[(size_t)g * nk_max + k], fsum);
    }
}

/* dynamic shared memory: part [G][128] doubles, sc [G][nk_max] floats, q [G][hd], tile [FA_KT][hd + 1] */
__global__ void __launch_bounds__(FA_THREADS) k_attn_prefill(const slcu_attn p, int nk_max) {
    extern __shared__ double fa_smem[];
    const int G = p.n_heads / p.n_kv, hd = p.hd, kvrow = p.n_kv * hd, tid = threadIdx.x;
    const int t = blockIdx.x / p.n_kv, kvh = blockIdx.x % p.n_kv;
    const int pos = p.pos0 + t, p0 = p.window > 0 && pos >= p.window ? pos - p.window + 1 : 0, nk = pos + 1 - p0;
    double *part = fa_smem;
    float *sc = (float *)(part + (size_t)G * 128), *qs = sc + (size_t)G * nk_max, *tile = qs + (size_t)G * hd;
    fa_scores(p, t, kvh, G, nk, p0, nk_max, sc, qs, tile);
    fa_softmax(p, kvh, G, nk, nk_max, sc, part);
    /* o[g][d] = sum over keys in increasing position of w v[d]: chain c = tid + 256 m is (c / hd, c % hd) */
    float acc[FA_MAXC];
#pragma unroll
    for (int m = 0; m < FA_MAXC; m++) acc[m] = 0.0f;
    for (int k0 = 0; k0 < nk; k0 += FA_KT) {
        const int kn = nk - k0 < FA_KT ? nk - k0 : FA_KT;
        __syncthreads();
        for (int i = tid; i < kn * hd; i += FA_THREADS) {
            const int r = i / hd, c = i % hd;
            tile[r * hd + c] = p.v_cache[(size_t)((p0 + k0 + r) % p.cap) * kvrow + (size_t)kvh * hd + c];
        }
        __syncthreads();
#pragma unroll
        for (int m = 0; m < FA_MAXC; m++) {
            const int c = tid + FA_THREADS * m;
            if (c >= G * hd) break;
            const float *wr = sc + (size_t)(c / hd) * nk_max + k0, *vc = tile + c % hd;
            float a = acc[m];
            for (int r = 0; r < kn; r++) a = __fadd_rn(a, __fmul_rn(wr[r], vc[r * hd]));
            acc[m] = a;
        }
    }
#pragma unroll
    for (int m = 0; m < FA_MAXC; m++) {
        const int c = tid + FA_THREADS * m;
        if (c >= G * hd) break;
        const int h = kvh * G + c / hd, d = c % hd;
        const float *qv = p.q + (size_t)t * p.ldq + (size_t)h * p.qstride;
        p.out[(size_t)t * p.ldo + (size_t)h * hd + d] = p.gated ? __fmul_rn(acc[m], fa_sigm(qv[hd + d])) : acc[m];
    }
}

static int fa_smem_max;

/* 1 launched, 0 not this kernel's case (the caller runs k_attention), -1 a launch failure. The K/V rows of
 * the n tokens must already be in the cache. */
static int fa_off = -1; /* SLUICE_CUDA_FATTN=0: never taken (comparisons) */

extern "C" int slcu_attention_prefill(const slcu_attn *a, char *msg, size_t msglen) {
    if (fa_off < 0) fa_off = getenv("SLUICE_CUDA_FATTN") && getenv("SLUICE_CUDA_FATTN")[0] == '0';
    if (fa_off || a->n <= 0 || a->n_kv <= 0 || a->n_heads % a->n_kv || a->hd <= 0 || a->hd > FA_HDMAX) return 0;
    const int G = a->n_heads / a->n_kv;
    if ((size_t)G * a->hd > (size_t)FA_THREADS * FA_MAXC || G > FA_THREADS / 32 * 8) return 0;
    const int last = a->pos0 + a->n - 1, nk_max = a->window > 0 && a->window < last + 1 ? a->window : last + 1;
    if (!fa_smem_max) {
        int dev = 0, optin = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        fa_smem_max = optin - 1024;
        cudaFuncSetAttribute(k_attn_prefill, cudaFuncAttributeMaxDynamicSharedMemorySize, fa_smem_max);
    }
    const size_t smem = (size_t)G * 128 * sizeof(double) + ((size_t)G * nk_max + (size_t)G * a->hd +
                                                           (size_t)FA_KT * (a->hd + 1)) * sizeof(float);
    if (smem > (size_t)fa_smem_max) return 0;
    k_attn_prefill<<<a->n * a->n_kv, FA_THREADS, smem, SLS>>>(*a, nk_max);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return 1;
    if (msg && msglen) snprintf(msg, msglen, "prefill attention launch: %s", cudaGetErrorString(e));
    return -1;
}
