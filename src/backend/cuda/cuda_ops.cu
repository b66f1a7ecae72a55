/*
 * cuda_ops.cu — the non-matmul ops of one decode step on the device (cuda.h): rmsnorm, RoPE, SwiGLU and
 * gpt-oss's clamped SwiGLU, the routers, the MoE combine, attention over a KV cache in VRAM, the Gated
 * DeltaNet recurrence. Each kernel does the CPU code's operations in the CPU code's order where that order
 * is cheap to keep (explicit __f*_rn intrinsics, so nvcc fuses nothing the C compiler does not: the
 * project builds with -std=c11, which turns contraction off); reductions the CPU does serially in
 * double run here as a fixed tree in double. Every result is bitwise repeatable and depends only on its own
 * token. Every kernel waits (pdl_wait) before its first global access and is launched by cuda_pdl.cuh pdl_launch
 * (overlapped launches: still in stream order).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_quant.cuh"
#include "backend/cuda/cuda_route.cuh"
#include "backend/cuda/cuda_swiglu.cuh"
#include "kernels/canon_exp.h"

static int fail(char *msg, size_t n, const char *what, cudaError_t e) {
    if (msg && n) snprintf(msg, n, "%s: %s", what, cudaGetErrorString(e));
    return -1;
}
static int bad(char *msg, size_t n, const char *what) {
    if (msg && n) snprintf(msg, n, "%s", what);
    return -1;
}
static int launched(char *msg, size_t n, const char *what) {
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : fail(msg, n, what, e);
}

__device__ __forceinline__ float sigm(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x))); }
__device__ __forceinline__ float silu(float x) { return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x))); }

/* ---- rmsnorm: one CTA of 256 per (token, head) ---- */
__global__ void k_rmsnorm(const float *x, float *y, size_t ld, int n_heads, size_t hs, int n, const float *w, float w_off,
                          float eps) {
    pdl_wait();
    __shared__ double part[256];
    const size_t off = (size_t)(blockIdx.x / n_heads) * ld + (size_t)(blockIdx.x % n_heads) * hs;
    const float *xr = x + off;
    float *yr = y + off;
    double ss = 0.0;
    for (int i = threadIdx.x; i < n; i += 256) ss += (double)xr[i] * (double)xr[i];
    part[threadIdx.x] = ss;
    __syncthreads();
    for (int o = 128; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) part[threadIdx.x] += part[threadIdx.x + o];
        __syncthreads();
    }
    const float inv = (float)(1.0 / sqrt(part[0] / (double)n + (double)eps));
    for (int i = threadIdx.x; i < n; i += 256) yr[i] = __fmul_rn(__fmul_rn(xr[i], inv), __fadd_rn(w_off, w[i]));
}

/* k_rmsnorm's arithmetic with a warp per (token, head) row, for many rows (a prefill's norms: 512 rows of 2048, or
 * 512 x 32 heads of 128, where k_rmsnorm launched a CTA of 256 per row). Lane l stands for k_rmsnorm's threads
 * l + 32 k (k < 8): the same double sums in the same order (fma as nvcc contracts k_rmsnorm's `ss += x * x`), the
 * same tree (128, 64, 32 within the lane, 16 .. 1 across lanes), the same inverse and products: bitwise. */
__global__ void __launch_bounds__(256) k_rmsnorm_rows(const float *x, float *y, size_t ld, int n_heads, size_t hs, int n, int rows,
                                                    const float *w, float w_off, float eps) {
    pdl_wait();
    const int row = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= rows) return;
    const size_t off = (size_t)(row / n_heads) * ld + (size_t)(row % n_heads) * hs;
    const float *xr = x + off;
    float *yr = y + off;
    double ss[8];
#pragma unroll
    for (int k = 0; k < 8; k++) {
        ss[k] = 0.0;
        for (int i = lane + 32 * k; i < n; i += 256) {
            const double v = (double)xr[i];
            ss[k] = __fma_rn(v, v, ss[k]);
        }
    }
#pragma unroll
    for (int k = 0; k < 4; k++) ss[k] = __dadd_rn(ss[k], ss[k + 4]);
#pragma unroll
    for (int k = 0; k < 2; k++) ss[k] = __dadd_rn(ss[k], ss[k + 2]);
    double v = __dadd_rn(ss[0], ss[1]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = __dadd_rn(v, __shfl_down_sync(0xffffffffu, v, o));
    v = __shfl_sync(0xffffffffu, v, 0);
    const float inv = (float)(1.0 / sqrt(v / (double)n + (double)eps));
    for (int i = lane; i < n; i += 32) yr[i] = __fmul_rn(__fmul_rn(xr[i], inv), __fadd_rn(w_off, w[i]));
}

extern "C" int slcu_rmsnorm(const float *x, float *y, int n_tok, size_t ld, int n_heads, size_t head_stride, int dim,
                            const float *w, float w_off, float eps, char *msg, size_t msglen) {
    if (dim <= 0 || n_heads <= 0) return bad(msg, msglen, "rmsnorm: no columns or heads");
    if (n_tok <= 0) return 0;
    const int rows = n_tok * n_heads;
    static int on = -1; /* SLUICE_CUDA_ROWS=1 (cuda_i8.cu rows_kernels): off by default until a device run */
    if (on < 0) on = getenv("SLUICE_CUDA_ROWS") && getenv("SLUICE_CUDA_ROWS")[0] == '1';
    if (rows >= 64 && on) pdl_launch(k_rmsnorm_rows, (rows + 7) / 8, 256, 0, SLS, x, y, ld, n_heads, head_stride, dim, rows, w, w_off, eps);
    else pdl_launch(k_rmsnorm, rows, 256, 0, SLS, x, y, ld, n_heads, head_stride, dim, w, w_off, eps);
    return launched(msg, msglen, "rmsnorm launch");
}

static const int *step_pos; /* slcu_set_step */
static int step_keys;

extern "C" void slcu_set_step(const int *pos_dev, int max_keys) { step_pos = pos_dev, step_keys = max_keys; }
extern "C" const int *slcu_step_pos(void) { return step_pos; }

/* ---- RoPE (NeoX rotate-half on the first rot dims); the frequencies travel in the kernel parameter ---- */
struct rope_freq {
    float f[512];
};
/* one head v at position pos on the CTA (k_rope's and k_rope_at's: the same operations) */
__device__ __forceinline__ void rope_head(float *v, float *v0, int half, const rope_freq &fr, float af, int pos, int inter) {
    for (int i = threadIdx.x; i < 2 * half; i += blockDim.x) v0[i] = v[i];
    __syncthreads();
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const float ang = __fmul_rn((float)pos, fr.f[i]);
        const float c = __fmul_rn(cosf(ang), af), s = __fmul_rn(sinf(ang), af);
        const float a = inter ? v0[2 * i] : v0[i], b = inter ? v0[2 * i + 1] : v0[i + half];
        v[i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
        v[i + half] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
    }
}
__global__ void k_rope(float *x, size_t ld, int n_heads, size_t hs, int half, const __grid_constant__ rope_freq fr, float af,
                       int pos0, int inter, const int *pd) {
    pdl_wait();
    __shared__ float v0[1024];
    if (pd) pos0 = *pd;
    const int t = blockIdx.x / n_heads;
    rope_head(x + (size_t)t * ld + (size_t)(blockIdx.x % n_heads) * hs, v0, half, fr, af, pos0 + t, inter);
}

/* slcu_rope_at: token t (< ROPE_AT of the launch) at position ps.p[t] */
#define ROPE_AT 256
struct rope_pos {
    int p[ROPE_AT];
};
__global__ void k_rope_at(float *x, size_t ld, int n_heads, size_t hs, int half, const __grid_constant__ rope_freq fr, float af,
                          const __grid_constant__ rope_pos ps, int inter) {
    pdl_wait();
    __shared__ float v0[1024];
    const int t = blockIdx.x / n_heads;
    rope_head(x + (size_t)t * ld + (size_t)(blockIdx.x % n_heads) * hs, v0, half, fr, af, ps.p[t], inter);
}

/* k_rope with a warp per (token, head) row for many rows (a prefill: 512 x 32 heads, where k_rope launched a CTA of 64
 * per row): lane l takes pairs l, l + 32, ... (half <= 512: 16 a lane), reads them all, then writes (in place, the
 * interleaved pairs too); the same operations on the same values: bitwise k_rope. */
__global__ void __launch_bounds__(256) k_rope_rows(float *x, size_t ld, int n_heads, size_t hs, int half, const __grid_constant__ rope_freq fr,
                                                 float af, int pos0, int inter, int rows) {
    pdl_wait();
    const int row = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= rows) return;
    const int t = row / n_heads;
    float *v = x + (size_t)t * ld + (size_t)(row % n_heads) * hs;
    float av[16], bv[16];
#pragma unroll
    for (int k = 0; k < 16; k++) {
        const int i = lane + 32 * k;
        if (i < half) av[k] = inter ? v[2 * i] : v[i], bv[k] = inter ? v[2 * i + 1] : v[i + half];
    }
    __syncwarp();
#pragma unroll
    for (int k = 0; k < 16; k++) {
        const int i = lane + 32 * k;
        if (i >= half) break;
        const float ang = __fmul_rn((float)(pos0 + t), fr.f[i]);
        const float c = __fmul_rn(cosf(ang), af), s = __fmul_rn(sinf(ang), af);
        v[i] = __fsub_rn(__fmul_rn(av[k], c), __fmul_rn(bv[k], s));
        v[i + half] = __fadd_rn(__fmul_rn(bv[k], c), __fmul_rn(av[k], s));
    }
}

extern "C" int slcu_rope(float *x, int n_tok, size_t ld, int n_heads, size_t head_stride, int rot, const float *inv_freq,
                         float attn_factor, int pos0, int interleave, char *msg, size_t msglen) {
    if (rot < 0 || rot % 2 || rot > 1024 || n_heads <= 0) return bad(msg, msglen, "rope: rot must be even, at most 1024");
    if (n_tok <= 0 || !rot) return 0;
    rope_freq fr;
    memcpy(fr.f, inv_freq, (size_t)rot / 2 * sizeof(float));
    if (step_pos && n_tok != 1) return bad(msg, msglen, "rope: a recorded step has one token");
    static int on = -1; /* SLUICE_CUDA_ROWS=1 (cuda_i8.cu rows_kernels): off by default until a device run */
    if (on < 0) on = getenv("SLUICE_CUDA_ROWS") && getenv("SLUICE_CUDA_ROWS")[0] == '1';
    const int rows = n_tok * n_heads;
    if (on && rows >= 64 && !step_pos)
        pdl_launch(k_rope_rows, (rows + 7) / 8, 256, 0, SLS, x, ld, n_heads, head_stride, rot / 2, fr, attn_factor, pos0, interleave, rows);
    else pdl_launch(k_rope, rows, 64, 0, SLS, x, ld, n_heads, head_stride, rot / 2, fr, attn_factor, pos0, interleave, step_pos);
    return launched(msg, msglen, "rope launch");
}

extern "C" int slcu_rope_at(float *x, int n_tok, size_t ld, int n_heads, size_t head_stride, int rot, const float *inv_freq,
                            float attn_factor, const int *pos, int interleave, char *msg, size_t msglen) {
    if (rot < 0 || rot % 2 || rot > 1024 || n_heads <= 0) return bad(msg, msglen, "rope: rot must be even, at most 1024");
    if (step_pos) return bad(msg, msglen, "rope: positions a token in a recorded step");
    if (n_tok <= 0 || !rot) return 0;
    rope_freq fr;
    memcpy(fr.f, inv_freq, (size_t)rot / 2 * sizeof(float));
    for (int t0 = 0; t0 < n_tok; t0 += ROPE_AT) {
        const int nt = n_tok - t0 < ROPE_AT ? n_tok - t0 : ROPE_AT;
        rope_pos ps;
        memcpy(ps.p, pos + t0, (size_t)nt * sizeof(int));
        pdl_launch(k_rope_at, nt * n_heads, 64, 0, SLS, x + (size_t)t0 * ld, ld, n_heads, head_stride, rot / 2, fr,
                   attn_factor, ps, interleave);
    }
    return launched(msg, msglen, "rope launch");
}

/* ---- SwiGLU ---- */
/* canon_silu (kernels/canon_exp.h), not CUDA's expf: the host computes the same bits for an expert it runs in
 * the hybrid step (kernels_dev.c kern_swiglu_dev) */
__global__ void k_swiglu(const float *g, const float *u, float *y, size_t n) {
    pdl_wait();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __fmul_rn(canon_silu(g[i]), u[i]);
}

extern "C" int slcu_swiglu(const float *g, const float *u, float *y, size_t n, char *msg, size_t msglen) {
    if (!n) return 0;
    size_t blocks = (n + 255) / 256;
    pdl_launch(k_swiglu, (unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, SLS, g, u, y, n);
    return launched(msg, msglen, "swiglu launch");
}

__global__ void k_swiglu_clamped(const float *gu, const float *bias, float limit, float *act, int n_tok, int I) {
    pdl_wait();
    const size_t tot = (size_t)n_tok * I;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < tot; e += (size_t)gridDim.x * blockDim.x) {
        const size_t t = e / (size_t)I, i = e % (size_t)I;
        const float *g = gu + t * 2 * (size_t)I;
        act[e] = oss_glu(g[2 * i], g[2 * i + 1], bias, (int)i, limit);
    }
}

extern "C" int slcu_swiglu_clamped(const float *gu, const float *bias, float limit, float *act, int n_tok, int I, char *msg,
                                   size_t msglen) {
    if (n_tok <= 0 || I <= 0) return 0;
    size_t blocks = ((size_t)n_tok * I + 255) / 256;
    pdl_launch(k_swiglu_clamped, (unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, SLS, gu, bias, limit, act, n_tok, I);
    return launched(msg, msglen, "clamped swiglu launch");
}

/* ---- routers: one CTA per token (moe.c route_token's rules); the k argmax rounds (ties to the lower index)
 * and the softmax's max and double sum are block reductions of a fixed tree (the sum within rounding of the
 * CPU's index order); the sigmoid group-limited router on one thread. ---- */
#define RT_MAXG 64
#define RT_THREADS 128

/* The best not-taken entry of p [E] (shared) over the block, seen by every thread; -1 when none. */
__device__ int rt_argmax(const float *p, int E, float taken, float *rv, int *ri) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float v = 0.f;
    int i = -1;
    for (int e = tid; e < E; e += blockDim.x)
        if (p[e] != taken) rt_better(v, i, p[e], e);
    for (int o = 16; o; o >>= 1) {
        const float v2 = __shfl_down_sync(0xffffffffu, v, o);
        const int i2 = __shfl_down_sync(0xffffffffu, i, o);
        rt_better(v, i, v2, i2);
    }
    if (!lane) rv[warp] = v, ri[warp] = i;
    __syncthreads();
    if (!tid) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++) rt_better(v, i, rv[w], ri[w]);
        ri[32] = i;
    }
    __syncthreads();
    const int best = ri[32];
    __syncthreads(); /* rv / ri reused by the next round */
    return best;
}

__device__ void rt_sort(int k, int *te, float *tw) {
    for (int s = 1; s < k; s++) { /* by expert index: the fixed combine order */
        int e = te[s], i = s - 1;
        float w = tw[s];
        for (; i >= 0 && te[i] > e; i--) te[i + 1] = te[i], tw[i + 1] = tw[i];
        te[i + 1] = e, tw[i + 1] = w;
    }
}

__global__ void __launch_bounds__(RT_THREADS) k_route(slcu_router r, const float *logits, int *top_e, float *top_w) {
    pdl_wait();
    __shared__ float p[RT_MAXE];
    __shared__ unsigned char allowed[RT_MAXE];
    __shared__ float rv[32];
    __shared__ int ri[33];
    __shared__ double rs[32];
    const int t = blockIdx.x, E = r.E, k = r.k, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const float *lg = logits + (size_t)t * E;
    int *te = top_e + (size_t)t * k;
    float *tw = top_w + (size_t)t * k;
    if (r.kind == 2) { /* sigmoid, group-limited */
        for (int e = threadIdx.x; e < E; e += blockDim.x) p[e] = sigm(lg[e]);
        __syncthreads();
        if (threadIdx.x) return;
        const int G = r.n_group, per = E / G;
#define BIASED(e) (r.bias ? __fadd_rn(p[e], r.bias[e]) : p[e])
        float gscore[RT_MAXG];
        for (int g = 0; g < G; g++) {
            float a = -INFINITY, b = -INFINITY;
            for (int e = g * per; e < (g + 1) * per; e++) {
                float v = BIASED(e);
                if (v > a) b = a, a = v;
                else if (v > b) b = v;
            }
            gscore[g] = __fadd_rn(a, b);
        }
        for (int e = 0; e < E; e++) allowed[e] = 0;
        for (int s = 0; s < r.topk_group; s++) {
            int best = -1;
            for (int g = 0; g < G; g++)
                if (gscore[g] != -INFINITY && (best < 0 || gscore[g] > gscore[best])) best = g;
            if (best < 0) break;
            gscore[best] = -INFINITY;
            for (int e = best * per; e < (best + 1) * per; e++) allowed[e] = 1;
        }
        for (int s = 0; s < k; s++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (allowed[e] && (best < 0 || BIASED(e) > BIASED(best))) best = e;
            if (best < 0) best = 0;
            allowed[best] = 0;
            te[s] = best;
            tw[s] = p[best];
        }
#undef BIASED
        if (r.norm_topk) {
            float wsum = 0.0f;
            for (int s = 0; s < k; s++) wsum = __fadd_rn(wsum, tw[s]);
            wsum = __fadd_rn(wsum, 1e-20f);
            for (int s = 0; s < k; s++) tw[s] = __fdiv_rn(tw[s], wsum);
        }
        for (int s = 0; s < k; s++) tw[s] = __fmul_rn(tw[s], r.routed_scale);
    } else {
        const float taken = r.kind == 1 ? -INFINITY : -1.0f;
        if (r.kind == 1) { /* top-k of the logits, softmax over those k */
            for (int e = tid; e < E; e += blockDim.x) p[e] = lg[e];
        } else { /* softmax over all E (max, exp, the sum in double), top-k, renormalised on request */
            float mx = -INFINITY;
            for (int e = tid; e < E; e += blockDim.x) mx = fmaxf(mx, lg[e]);
            for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_down_sync(0xffffffffu, mx, o));
            if (!lane) rv[warp] = mx;
            __syncthreads();
            if (!tid) {
                for (int w = 1; w < (int)(blockDim.x >> 5); w++) mx = fmaxf(mx, rv[w]);
                rv[0] = mx;
            }
            __syncthreads();
            mx = rv[0];
            double sum = 0.0;
            for (int e = tid; e < E; e += blockDim.x) {
                p[e] = expf(__fsub_rn(lg[e], mx));
                sum += p[e];
            }
            for (int o = 16; o; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
            if (!lane) rs[warp] = sum;
            __syncthreads();
            if (!tid) {
                for (int w = 1; w < (int)(blockDim.x >> 5); w++) sum += rs[w];
                rs[0] = sum;
            }
            __syncthreads();
            const float fsum = (float)rs[0];
            for (int e = tid; e < E; e += blockDim.x) p[e] = __fdiv_rn(p[e], fsum);
            __syncthreads();
        }
        __syncthreads();
        for (int s = 0; s < k; s++) {
            int best = rt_argmax(p, E, taken, rv, ri);
            if (best < 0) best = 0;
            if (!tid) te[s] = best, tw[s] = p[best], p[best] = taken;
            __syncthreads();
        }
        if (tid) return;
        rt_weights(r, tw);
    }
    rt_sort(k, te, tw);
}

int slcu_route_mode = 2; /* cuda.h: SLUICE_CUDA_ROUTE, read by backend_cuda_hold.c fuse_env */

/* k_route_warp: cuda_route.cuh route_warp_row, a CTA of one warp per token */
__global__ void __launch_bounds__(32) k_route_warp(slcu_router r, const float *logits, int *top_e, float *top_w) {
    pdl_wait();
    pdl_trigger(); /* the matvec after it may start loading its weights (cuda_pdl.cuh) */
    __shared__ float p[RT_MAXE];
    __shared__ int te[RT_MAXE]; /* the choice staged here: lane 0's weights and sort were dependent global accesses */
    __shared__ float tw[RT_MAXE];
    route_warp_row(r, logits, blockIdx.x, top_e, top_w, p, te, tw, threadIdx.x);
}

extern "C" int slcu_route(const slcu_router *r, const float *logits, int n_tok, int *top_e, float *top_w, char *msg,
                          size_t msglen) {
    if (r->E <= 0 || r->E > RT_MAXE || r->k <= 0 || r->k > r->E) return bad(msg, msglen, "router: needs 1 <= k <= E <= 1024");
    if (r->kind < 0 || r->kind > 2) return bad(msg, msglen, "router: unknown kind");
    if (r->kind == 2 && (r->n_group < 1 || r->n_group > RT_MAXG || r->E % r->n_group || r->E / r->n_group < 2 ||
                         r->topk_group < 1 || r->topk_group > r->n_group))
        return bad(msg, msglen, "router: n_group / topk_group do not fit the experts");
    if (n_tok <= 0) return 0;
    if (r->kind == 2 || !slcu_decode_kernels) pdl_launch(k_route, n_tok, RT_THREADS, 0, SLS, *r, logits, top_e, top_w);
    else pdl_launch(k_route_warp, n_tok, 32, 0, SLS, *r, logits, top_e, top_w);
    return launched(msg, msglen, "router launch");
}

/* ---- combine ---- */
__global__ void k_combine(const float *y, const float *w, int k, const float *sh, const float *sg, float *out, int H) {
    pdl_wait();
    const int t = blockIdx.y;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= H) return;
    float o = 0.0f;
    for (int s = 0; s < k; s++) o = __fadd_rn(o, __fmul_rn(w[(size_t)t * k + s], y[((size_t)t * k + s) * H + i]));
    if (sh) o = __fadd_rn(o, __fmul_rn(sg ? sigm(sg[t]) : 1.0f, sh[(size_t)t * H + i]));
    out[(size_t)t * H + i] = o;
}

extern "C" int slcu_combine(const float *y, const float *w, int k, const float *sh, const float *sg, float *out, int n_tok,
                            int H, char *msg, size_t msglen) {
    if (n_tok <= 0 || H <= 0) return 0;
    dim3 grid((unsigned)((H + 255) / 256), (unsigned)n_tok);
    pdl_launch(k_combine, grid, 256, 0, SLS, y, w, k, sh, sg, out, H);
    return launched(msg, msglen, "combine launch");
}

/* ---- attention: one CTA per (token, head). Scores in shared memory, each a dot in the CPU's 8-lane order
 * (kernels_scalar.c dot_scalar) by one thread; the max by one thread; exp by all; the sum in double as a
 * fixed tree; then thread d accumulates o[d] over the keys in increasing position, o += (e_p / sum) v_p,
 * as attention.c's axpy loop does. ---- */
#define AT_THREADS 128
__global__ void k_attention(const slcu_attn p) {
    pdl_wait();
    extern __shared__ float sc[];
    __shared__ double part[AT_THREADS];
    __shared__ float qs[1024];
    __shared__ float mx_s;
    const int t = blockIdx.x / p.n_heads, h = blockIdx.x % p.n_heads, hd = p.hd, kvrow = p.n_kv * hd;
    const int pos = p.pos0 + t, p0 = p.window > 0 && pos >= p.window ? pos - p.window + 1 : 0, n_keys = pos + 1 - p0;
    const int kvh = h / (p.n_heads / p.n_kv);
    const float *qv = p.q + (size_t)t * p.ldq + (size_t)h * p.qstride;
    for (int i = threadIdx.x; i < hd; i += AT_THREADS) qs[i] = qv[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n_keys; i += AT_THREADS) {
        const float *kr = p.k_cache + (size_t)((p0 + i) % p.cap) * kvrow + (size_t)kvh * hd;
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int c = 0;
        for (; c + 8 <= hd; c += 8)
#pragma unroll
            for (int jj = 0; jj < 8; jj++) acc[jj] = __fadd_rn(acc[jj], __fmul_rn(qs[c + jj], kr[c + jj]));
        for (; c < hd; c++) acc[c & 7] = __fadd_rn(acc[c & 7], __fmul_rn(qs[c], kr[c]));
        const float d = __fadd_rn(__fadd_rn(__fadd_rn(acc[0], acc[1]), __fadd_rn(acc[2], acc[3])),
                                  __fadd_rn(__fadd_rn(acc[4], acc[5]), __fadd_rn(acc[6], acc[7])));
        sc[i] = __fmul_rn(d, p.scale);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float mx = p.sinks ? p.sinks[h] : -INFINITY;
        for (int i = 0; i < n_keys; i++)
            if (sc[i] > mx) mx = sc[i];
        mx_s = mx;
    }
    __syncthreads();
    const float mx = mx_s;
    double s = 0.0;
    for (int i = threadIdx.x; i < n_keys; i += AT_THREADS) {
        sc[i] = expf(__fsub_rn(sc[i], mx));
        s += sc[i];
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = AT_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    const float fsum = (float)(part[0] + (p.sinks ? (double)expf(__fsub_rn(p.sinks[h], mx)) : 0.0));
    float *ov = p.out + (size_t)t * p.ldo + (size_t)h * hd;
    for (int dd = threadIdx.x; dd < hd; dd += AT_THREADS) {
        float acc = 0.0f;
        for (int i = 0; i < n_keys; i++)
            acc = __fadd_rn(acc, __fmul_rn(__fdiv_rn(sc[i], fsum), p.v_cache[(size_t)((p0 + i) % p.cap) * kvrow + (size_t)kvh * hd + dd]));
        ov[dd] = p.gated ? __fmul_rn(acc, sigm(qv[hd + dd])) : acc;
    }
}

__global__ void k_kv_append(const slcu_attn p) {
    pdl_wait();
    const int t = blockIdx.y, row = p.n_kv * p.hd;
    const size_t dst = (size_t)((p.pos0 + t) % p.cap) * row;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < row; i += gridDim.x * blockDim.x) {
        p.k_cache[dst + i] = p.k[(size_t)t * p.ldkv + i];
        p.v_cache[dst + i] = p.v[(size_t)t * p.ldkv + i];
    }
}

/* ---- decode attention (a few tokens): k_attention's arithmetic per (token, head), bitwise, with the work
 * spread over a CTA of AD_THREADS: a score's 8 lanes are 8 threads (lane jj sums columns c = jj mod 8 in
 * increasing order; shuffles xor 1, 2, 4 are dot_scalar's tree), the max over all threads (a max does
 * not depend on its order), the double sum over k_attention's 128 partitions and tree, the weights
 * e_p / sum in parallel. The V sum keeps its chain, o[d] += w_p v_p[d] in increasing position, on the
 * first hd threads; the other warps compute the products w_p v_p[d] of the next AD_PV / hd positions into
 * the other half of a double buffer meanwhile. ---- */
#define AD_THREADS 512
#define AD_PV 8192 /* floats of one buffer of V products */
#define AD_MAX_TOK 8 /* up to this many tokens a call: the decode kernel (bitwise k_attention's) */

/* HD > 0: the head size known at compile time (every load of the row in flight at once); 0: hd */
template <int HD>
__device__ __forceinline__ float ad_dot(const float *qs, const float *kr, int hd, int jj) {
    float acc = 0.0f;
    if (HD) {
#pragma unroll
        for (int c = 0; c < HD; c += 8) acc = __fadd_rn(acc, __fmul_rn(qs[c + jj], kr[c + jj]));
    } else {
#pragma unroll 4
        for (int c = jj; c < hd; c += 8) acc = __fadd_rn(acc, __fmul_rn(qs[c], kr[c]));
    }
    acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, 1));
    acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, 2));
    return __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, 4));
}

/* key or value row i of the kv head's positions p0 ..: the cache's, or (fused: one token appending its row) the
 * new row itself for the last */
__device__ __forceinline__ const float *ad_row(const slcu_attn &p, const float *cache, const float *nw, int p0, int i,
                                               int n_keys, int kvh, bool fused) {
    if (fused && i == n_keys - 1) return nw + (size_t)kvh * p.hd;
    return cache + (size_t)((p0 + i) % p.cap) * (p.n_kv * p.hd) + (size_t)kvh * p.hd;
}

/* sc[i] = q . k_i * scale, i < n_keys: a warp takes 8 keys a pass (two per 8 lanes), passes uniform in the warp */
template <int HD>
__device__ void ad_scores(const slcu_attn &p, const float *qs, float *sc, int p0, int n_keys, int kvh, bool fused) {
    const int hd = p.hd, lane = threadIdx.x & 31, jj = lane & 7, g = lane >> 3;
    for (int base = (int)(threadIdx.x >> 5) * 8; base < n_keys; base += AD_THREADS / 32 * 8) {
        const int i0 = base + g, i1 = base + 4 + g;
        const float *k0 = ad_row(p, p.k_cache, p.k, p0, min(i0, n_keys - 1), n_keys, kvh, fused);
        const float *k1 = ad_row(p, p.k_cache, p.k, p0, min(i1, n_keys - 1), n_keys, kvh, fused);
        const float d0 = ad_dot<HD>(qs, k0, hd, jj), d1 = ad_dot<HD>(qs, k1, hd, jj);
        if (jj == 0 && i0 < n_keys) sc[i0] = __fmul_rn(d0, p.scale);
        if (jj == 0 && i1 < n_keys) sc[i1] = __fmul_rn(d1, p.scale);
    }
}

/* the products w_i v_i[d] of positions c0 .. c0 + nk - 1 into pv [nk][hd]: producer warp wp (of nw) takes keys
 * wp, wp + nw, ..., eight at a time with every load in flight first (HD: the head size at compile time, or 0) */
template <int HD>
__device__ void ad_products(const slcu_attn &p, const float *w, float *pv, int p0, int c0, int nk, int n_keys, int kvh,
                            int wp, int nw, bool fused) {
    const int hd = HD ? HD : p.hd, lane = threadIdx.x & 31;
    if (!HD) {
        for (int kk = wp; kk < nk; kk += nw) {
            const float wi = w[c0 + kk], *vr = ad_row(p, p.v_cache, p.v, p0, c0 + kk, n_keys, kvh, fused);
            for (int dd = lane; dd < hd; dd += 32) pv[kk * hd + dd] = __fmul_rn(wi, vr[dd]);
        }
        return;
    }
    constexpr int PER = HD ? HD / 32 : 1, U = 8; /* rows in flight a lane: a chunk of 64 in one round trip */
    for (int k0 = wp; k0 < nk; k0 += U * nw) {
        float v[U][PER];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int kk = min(k0 + u * nw, nk - 1);
            const float *vr = ad_row(p, p.v_cache, p.v, p0, c0 + kk, n_keys, kvh, fused);
#pragma unroll
            for (int e = 0; e < PER; e++) v[u][e] = vr[lane + 32 * e];
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int kk = k0 + u * nw;
            if (kk >= nk) break;
            const float wi = w[c0 + kk];
#pragma unroll
            for (int e = 0; e < PER; e++) pv[kk * hd + lane + 32 * e] = __fmul_rn(wi, v[u][e]);
        }
    }
}

/* one chunk's products by the producer warps (the head size as a template argument where it is common) */
__device__ __forceinline__ void ad_fill(const slcu_attn &p, const float *w, float *pv, int p0, int c0, int nk, int n_keys,
                                        int kvh, int wp, int nw, bool fused) {
    if (p.hd == 128) ad_products<128>(p, w, pv, p0, c0, nk, n_keys, kvh, wp, nw, fused);
    else if (p.hd == 64) ad_products<64>(p, w, pv, p0, c0, nk, n_keys, kvh, wp, nw, fused);
    else ad_products<0>(p, w, pv, p0, c0, nk, n_keys, kvh, wp, nw, fused);
}

/* max, exp, the double sum (k_attention's partitions and tree), then sc[i] = e_i / sum; every thread calls it */
__device__ void ad_softmax(const slcu_attn &p, float *sc, int n_keys, int h, double *part, float *red) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float m = -INFINITY;
    for (int i = tid; i < n_keys; i += AD_THREADS) m = fmaxf(m, sc[i]);
    for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (!lane) red[warp] = m;
    __syncthreads();
    float mx = p.sinks ? p.sinks[h] : -INFINITY;
    for (int w = 0; w < AD_THREADS / 32; w++) mx = fmaxf(mx, red[w]);
    for (int i = tid; i < n_keys; i += AD_THREADS) sc[i] = expf(__fsub_rn(sc[i], mx));
    __syncthreads();
    if (tid < AT_THREADS) {
        double s = 0.0;
        for (int i = tid; i < n_keys; i += AT_THREADS) s += sc[i];
        part[tid] = s;
    }
    __syncthreads();
    for (int w = AT_THREADS / 2; w > 0; w >>= 1) {
        if (tid < w) part[tid] += part[tid + w];
        __syncthreads();
    }
    const float fsum = (float)(part[0] + (p.sinks ? (double)expf(__fsub_rn(p.sinks[h], mx)) : 0.0));
    for (int i = tid; i < n_keys; i += AD_THREADS) sc[i] = __fdiv_rn(sc[i], fsum);
    __syncthreads();
}

/* fused: one token whose new K/V rows are read from p.k / p.v and stored by the first query head of each KV head
 * (no k_kv_append launch; no CTA reads that cache row: its position is read from the new row, and the other
 * positions' rows are other rows of the ring, as maxk <= cap) */
__global__ void __launch_bounds__(AD_THREADS) k_attn_dec(slcu_attn p, bool fused, const int *pd, slcu_act qa) {
    pdl_wait();
    pdl_trigger(); /* the matvec after it may start loading its weights (cuda_pdl.cuh) */
    if (pd) p.pos0 = *pd; /* a recorded step: its one token's position */
    extern __shared__ float ad_smem[]; /* pv [2][AD_PV] | sc [n_keys] */
    __shared__ double part[AT_THREADS];
    __shared__ float qs[1024], red[AD_THREADS / 32];
    float *pv = ad_smem, *sc = ad_smem + 2 * AD_PV;
    const int t = blockIdx.x / p.n_heads, h = blockIdx.x % p.n_heads, hd = p.hd, tid = threadIdx.x;
    const int pos = p.pos0 + t, p0 = p.window > 0 && pos >= p.window ? pos - p.window + 1 : 0, n_keys = pos + 1 - p0;
    const int kvh = h / (p.n_heads / p.n_kv);
    const float *qv = p.q + (size_t)t * p.ldq + (size_t)h * p.qstride;
    for (int i = tid; i < hd; i += AD_THREADS) qs[i] = qv[i];
    __syncthreads();
    if (fused && h % (p.n_heads / p.n_kv) == 0) {
        const size_t dst = (size_t)(pos % p.cap) * (p.n_kv * hd) + (size_t)kvh * hd;
        for (int i = tid; i < hd; i += AD_THREADS)
            p.k_cache[dst + i] = p.k[(size_t)kvh * hd + i], p.v_cache[dst + i] = p.v[(size_t)kvh * hd + i];
    }
    if (hd == 128) ad_scores<128>(p, qs, sc, p0, n_keys, kvh, fused);
    else if (hd == 64) ad_scores<64>(p, qs, sc, p0, n_keys, kvh, fused);
    else ad_scores<0>(p, qs, sc, p0, n_keys, kvh, fused);
    __syncthreads();
    ad_softmax(p, sc, n_keys, h, part, red);
    const int cw = (hd + 31) / 32, wp = (tid >> 5) - cw, nw = AD_THREADS / 32 - cw, kc = AD_PV / hd;
    const int nch = (n_keys + kc - 1) / kc;
    if (wp >= 0) ad_fill(p, sc, pv, p0, 0, min(kc, n_keys), n_keys, kvh, wp, nw, fused);
    __syncthreads();
    float acc = 0.0f;
    for (int c = 0; c < nch; c++) {
        const int c0 = c * kc, nk = min(kc, n_keys - c0);
        if (wp >= 0) {
            if (c + 1 < nch)
                ad_fill(p, sc, pv + ((c + 1) & 1) * AD_PV, p0, c0 + kc, min(kc, n_keys - c0 - kc), n_keys, kvh, wp, nw, fused);
        } else if (tid < hd) {
            const float *b = pv + (c & 1) * AD_PV + tid;
#pragma unroll 8
            for (int i = 0; i < nk; i++) acc = __fadd_rn(acc, b[i * hd]);
        }
        __syncthreads();
    }
    if (tid < hd) {
        const float v = p.gated ? __fmul_rn(acc, sigm(qv[hd + tid])) : acc;
        p.out[(size_t)t * p.ldo + (size_t)h * hd + tid] = v;
        if (qa.q) quant_lane(v, h * hd + tid, tid & 31, qa); /* one token: its row's int8 form, head h's blocks */
    }
    if (qa.q) {
        __syncthreads();
        quant_sums(qa, p.n_heads * hd / 32, h * hd / 32, hd / 32, tid, AD_THREADS);
    }
}

static int attn_smem_max, dec_smem_max, attn_force;
static int fa32_on = -1; /* f32 caches take cuda_flash.cu's chunked order unless SLUICE_CUDA_FA32=0 (k_attention's) */

extern "C" void slcu_attn_force(int kernel) { attn_force = kernel; }

extern "C" int slcu_attention(const slcu_attn *a, char *msg, size_t msglen) {
    return slcu_attention_q(a, NULL, msg, msglen) < 0 ? -1 : 0;
}

extern "C" int slcu_attention_q(const slcu_attn *a, const slcu_act *oq, char *msg, size_t msglen) {
    if (a->hd <= 0 || a->hd > 1024 || a->n_kv <= 0 || a->n_heads % a->n_kv || a->cap <= 0 || a->pos0 < 0)
        return bad(msg, msglen, "attention: head_dim must be 1..1024, n_heads a multiple of n_kv, cap positive");
    if (a->n <= 0) return 0;
    const int last = a->pos0 + a->n - 1, maxk = a->window > 0 && a->window < last + 1 ? a->window : last + 1;
    /* a ring (a sliding layer's cache shorter than the positions, row p % cap) must keep each token's window while
     * the n rows are written; a cache the positions have not outgrown is the identity, whatever the window (gpt-oss
     * with a context shorter than its window: session 36's `bench --prompt 1` was refused here) */
    if (maxk > a->cap || (a->window > 0 && last >= a->cap && a->n > a->cap - a->window + 1))
        return bad(msg, msglen, "attention: the cache has fewer rows than the positions need");
    if (fa32_on < 0) fa32_on = !(getenv("SLUICE_CUDA_FA32") && getenv("SLUICE_CUDA_FA32")[0] == '0');
    if (a->f16 || (fa32_on && !attn_force && a->hd <= 256)) { /* cuda_flash.cu: its own order, no int8 form of the output (attn_force: tests of the kernels below) */
        if (step_pos && (a->n != 1 || !a->k || step_keys < maxk))
            return bad(msg, msglen, "attention: a recorded step has one token appending its row");
        if (a->f16) return slcu_attention_f16q(a, step_pos, step_keys, oq, msg, msglen);
        return slcu_attention_f32(a, step_pos, step_keys, msg, msglen) < 0 ? -1 : 0;
    }
    if (!attn_smem_max) {
        int dev = 0, optin = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        attn_smem_max = optin - (int)(AT_THREADS * sizeof(double) + 1024 * sizeof(float) + 64);
        dec_smem_max = attn_smem_max - (int)(AD_THREADS / 32 * sizeof(float));
        cudaFuncSetAttribute(k_attention, cudaFuncAttributeMaxDynamicSharedMemorySize, attn_smem_max);
        cudaFuncSetAttribute(k_attn_dec, cudaFuncAttributeMaxDynamicSharedMemorySize, dec_smem_max);
    }
    if (step_pos && (a->n != 1 || !a->k || step_keys < maxk))
        return bad(msg, msglen, "attention: a recorded step has one token appending its row");
    const int wk = a->window > 0 && a->window < a->cap ? a->window : a->cap; /* the most keys any position reads */
    const size_t smem = (size_t)(step_pos ? min(wk, step_keys) : maxk) * sizeof(float);
    const size_t dsmem = smem + 2 * AD_PV * sizeof(float);
    const int dec = attn_force ? attn_force == 2 : slcu_decode_kernels && a->n <= AD_MAX_TOK;
    if (dec && a->hd <= AD_THREADS - 32 && dsmem <= (size_t)dec_smem_max) {
        const bool fused = a->k && a->n == 1;
        if (a->k && !fused) pdl_launch(k_kv_append, dim3((unsigned)((a->n_kv * a->hd + 255) / 256), (unsigned)a->n), 256, 0, SLS, *a);
        slcu_act qa = {};
        if (oq && a->n == 1 && a->hd % 128 == 0 && oq->n_tok == 1 && oq->cols == a->n_heads * a->hd) qa = *oq;
        pdl_launch(k_attn_dec, a->n * a->n_heads, AD_THREADS, dsmem, SLS, *a, fused, step_pos, qa);
        return qa.q ? (launched(msg, msglen, "attention launch") ? -1 : 1) : launched(msg, msglen, "attention launch");
    }
    if (step_pos) return bad(msg, msglen, "attention: a recorded step needs the decode kernel");
    if (smem > (size_t)attn_smem_max) {
        if (msg && msglen) snprintf(msg, msglen, "attention: %d keys do not fit the device's shared memory (%d at most)", maxk, attn_smem_max / 4);
        return -1;
    }
    if (a->k) pdl_launch(k_kv_append, dim3((unsigned)((a->n_kv * a->hd + 255) / 256), (unsigned)a->n), 256, 0, SLS, *a);
    const int pf = a->n > 8 ? slcu_attention_prefill(a, msg, msglen) : 0; /* many tokens: cuda_fattn.cu, the same bits */
    if (pf) return pf < 0 ? -1 : 0;
    pdl_launch(k_attention, a->n * a->n_heads, AT_THREADS, smem, SLS, *a);
    return launched(msg, msglen, "attention launch");
}

/* ---- Gated DeltaNet recurrence: a CTA per (value head, 32 state columns), thread d owns column d of the
 * head's state (in registers for dk 64 and 128, k_dn_step_reg) ---- */
__global__ void k_dn_step(const float *conv, const float *gates, const float *S_in, float *S_out, float *o, size_t ldo,
                          int n_tok, int nk, int nv, int dk, int dv) {
    pdl_wait();
    extern __shared__ float qk[]; /* q [dk] | k [dk] of the current token */
    const int h = blockIdx.x, d = blockIdx.y * blockDim.x + threadIdx.x, kh = h / (nv / nk), cq = 2 * nk * dk + nv * dv;
    float *Sh = S_out + (size_t)h * dk * dv;
    if (S_in != S_out && d < dv)
        for (int i = 0; i < dk; i++) Sh[(size_t)i * dv + d] = S_in[(size_t)h * dk * dv + (size_t)i * dv + d];
    for (int t = 0; t < n_tok; t++) {
        const float *row = conv + (size_t)t * cq;
        __syncthreads();
        for (int i = threadIdx.x; i < dk; i += blockDim.x) qk[i] = row[(size_t)kh * dk + i], qk[dk + i] = row[(size_t)(nk + kh) * dk + i];
        __syncthreads();
        if (d >= dv) continue;
        const float b = gates[(size_t)t * 2 * nv + h], a = expf(gates[(size_t)t * 2 * nv + nv + h]);
        float m = 0.0f;
        for (int i = 0; i < dk; i++) {
            const float s = __fmul_rn(Sh[(size_t)i * dv + d], a);
            Sh[(size_t)i * dv + d] = s;
            m = __fadd_rn(m, __fmul_rn(qk[dk + i], s));
        }
        const float dd = __fmul_rn(__fsub_rn(row[(size_t)2 * nk * dk + (size_t)h * dv + d], m), b);
        float acc = 0.0f;
        for (int i = 0; i < dk; i++) {
            const float s = __fadd_rn(Sh[(size_t)i * dv + d], __fmul_rn(qk[dk + i], dd));
            Sh[(size_t)i * dv + d] = s;
            acc = __fadd_rn(acc, __fmul_rn(qk[i], s));
        }
        o[(size_t)t * ldo + (size_t)h * dv + d] = acc;
    }
}

/* The same recurrence with the thread's state column in registers (dk = DK fixed): the same operations in
 * the same order as k_dn_step, so bitwise its results, without the state's round trips through memory. */
template <int DK>
__global__ void __launch_bounds__(32) k_dn_step_reg(const float *conv, const float *gates, const float *S_in, float *S_out, float *o,
                                                     size_t ldo, int n_tok, int nk, int nv, int dv) {
    pdl_wait();
    __shared__ float qk[2 * DK];
    const int h = blockIdx.x, d = blockIdx.y * blockDim.x + threadIdx.x, kh = h / (nv / nk), cq = 2 * nk * DK + nv * dv;
    float S[DK];
    if (d < dv)
#pragma unroll
        for (int i = 0; i < DK; i++) S[i] = S_in[(size_t)h * DK * dv + (size_t)i * dv + d];
    for (int t = 0; t < n_tok; t++) {
        const float *row = conv + (size_t)t * cq;
        __syncthreads();
        for (int i = threadIdx.x; i < DK; i += blockDim.x) qk[i] = row[(size_t)kh * DK + i], qk[DK + i] = row[(size_t)(nk + kh) * DK + i];
        __syncthreads();
        if (d >= dv) continue;
        const float b = gates[(size_t)t * 2 * nv + h], a = expf(gates[(size_t)t * 2 * nv + nv + h]);
        float m = 0.0f;
#pragma unroll
        for (int i = 0; i < DK; i++) {
            S[i] = __fmul_rn(S[i], a);
            m = __fadd_rn(m, __fmul_rn(qk[DK + i], S[i]));
        }
        const float dd = __fmul_rn(__fsub_rn(row[(size_t)2 * nk * DK + (size_t)h * dv + d], m), b);
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < DK; i++) {
            S[i] = __fadd_rn(S[i], __fmul_rn(qk[DK + i], dd));
            acc = __fadd_rn(acc, __fmul_rn(qk[i], S[i]));
        }
        o[(size_t)t * ldo + (size_t)h * dv + d] = acc;
    }
    if (d < dv)
#pragma unroll
        for (int i = 0; i < DK; i++) S_out[(size_t)h * DK * dv + (size_t)i * dv + d] = S[i];
}

static int dn_generic;
extern "C" void slcu_dn_force_generic(int on) { dn_generic = on; }

extern "C" int slcu_dn_step(const float *conv_out, const float *gates, const float *ssm_in, float *ssm_out, float *out,
                            size_t ldo, int n, int nk, int nv, int dk, int dv, char *msg, size_t msglen) {
    if (nk <= 0 || nv <= 0 || nv % nk || dk <= 0 || dk > 4096 || dv <= 0 || dv > 1024)
        return bad(msg, msglen, "deltanet: nv must be a multiple of nk, dk <= 4096, dv <= 1024");
    if (n <= 0) return 0;
    /* 32 state columns a CTA (columns are independent): nv * dv / 32 CTAs, enough to fill the device */
    const dim3 grid((unsigned)nv, (unsigned)((dv + 31) / 32));
    const unsigned th = 32;
    if (dn_generic) pdl_launch(k_dn_step, grid, th, 2 * (size_t)dk * sizeof(float), SLS, conv_out, gates, ssm_in, ssm_out, out, ldo, n, nk, nv, dk, dv);
    else if (dk == 128) pdl_launch(k_dn_step_reg<128>, grid, th, 0, SLS, conv_out, gates, ssm_in, ssm_out, out, ldo, n, nk, nv, dv);
    else if (dk == 64) pdl_launch(k_dn_step_reg<64>, grid, th, 0, SLS, conv_out, gates, ssm_in, ssm_out, out, ldo, n, nk, nv, dv);
    else pdl_launch(k_dn_step, grid, th, 2 * (size_t)dk * sizeof(float), SLS, conv_out, gates, ssm_in, ssm_out, out, ldo, n, nk, nv, dk, dv);
    return launched(msg, msglen, "deltanet launch");
}

/* ---- the Gated DeltaNet's conv1d, gates and gated norm (cpu_mix.c cpu_dn_conv / cpu_dn_gates / cpu_dn_norm) ---- */

/* blockIdx.y < n: token t's conv outputs; blockIdx.y == n: the new state (the last K-1 pre-conv rows) */
__global__ void k_dn_conv(const slcu_dn d) {
    pdl_wait();
    const int t = blockIdx.y, K = d.conv_k, cq = 2 * d.nk * d.dk + d.nv * d.dv;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cq) return;
    if (t == d.n) {
        for (int i = 0; i < K - 1; i++) {
            const int s = d.n - K + 1 + i;
            d.conv_out_state[(size_t)i * cq + c] = s < 0 ? d.conv_in_state[(size_t)(K - 1 + s) * cq + c] : d.conv_in[(size_t)s * cq + c];
        }
        return;
    }
    const float *wc = d.conv_w + (size_t)c * K;
    float acc = 0.0f;
    for (int i = 0; i < K; i++) {
        const int s = t - K + 1 + i;
        const float u = s < 0 ? d.conv_in_state[(size_t)(K - 1 + s) * cq + c] : d.conv_in[(size_t)s * cq + c];
        acc = __fadd_rn(acc, __fmul_rn(wc[i], u));
    }
    d.conv_out[(size_t)t * cq + c] = silu(acc);
}

extern "C" int slcu_dn_conv(const slcu_dn *d, char *msg, size_t msglen) {
    if (d->conv_k < 1 || d->nk <= 0 || d->nv <= 0 || d->nv % d->nk || d->dk <= 0 || d->dv <= 0)
        return bad(msg, msglen, "deltanet conv: needs conv_k >= 1 and nv a multiple of nk");
    if (d->n <= 0) return 0;
    const int cq = 2 * d->nk * d->dk + d->nv * d->dv;
    pdl_launch(k_dn_conv, dim3((unsigned)((cq + 255) / 256), (unsigned)d->n + 1), 256, 0, SLS, *d);
    return launched(msg, msglen, "deltanet conv launch");
}

__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__global__ void k_dn_gate_vals(const slcu_dn d) {
    pdl_wait();
    const int t = blockIdx.x, nv = d.nv, r = nv / d.nk;
    const float *ba = d.ba + (size_t)t * 2 * nv;
    float *gt = d.gates + (size_t)t * 2 * nv;
    for (int h = threadIdx.x; h < nv; h += blockDim.x) {
        const float b = d.ba_grouped ? ba[(h / r) * 2 * r + h % r] : ba[h];
        const float a = d.ba_grouped ? ba[(h / r) * 2 * r + r + h % r] : ba[nv + h];
        gt[h] = sigm(b);
        gt[nv + h] = __fmul_rn(-expf(d.A_log[h]), softplus(__fadd_rn(a, d.dt_bias[h])));
    }
}

/* one CTA of 128 per (token, q or k head): x = (x * inv) * scale, inv = 1 / sqrt(sum x^2 + 1e-6) */
__global__ void k_dn_l2norm(float *conv, int nk, int dk, size_t cq, float qscale) {
    pdl_wait();
    __shared__ double part[128];
    const int t = blockIdx.x / (2 * nk), j = blockIdx.x % (2 * nk); /* j < nk: q head j, else k head j - nk */
    float *x = conv + (size_t)t * cq + (size_t)j * dk;
    double ss = 0.0;
    for (int i = threadIdx.x; i < dk; i += 128) ss += (double)x[i] * (double)x[i];
    part[threadIdx.x] = ss;
    __syncthreads();
    for (int o = 64; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) part[threadIdx.x] += part[threadIdx.x + o];
        __syncthreads();
    }
    const float inv = (float)(1.0 / sqrt(part[0] + 1e-6)), sc = j < nk ? qscale : 1.0f;
    for (int i = threadIdx.x; i < dk; i += 128) x[i] = __fmul_rn(__fmul_rn(x[i], inv), sc);
}

extern "C" int slcu_dn_gates(const slcu_dn *d, char *msg, size_t msglen) {
    if (d->nk <= 0 || d->nv <= 0 || d->nv % d->nk || d->dk <= 0) return bad(msg, msglen, "deltanet gates: nv must be a multiple of nk");
    if (d->n <= 0) return 0;
    pdl_launch(k_dn_gate_vals, d->n, 128, 0, SLS, *d);
    const size_t cq = (size_t)2 * d->nk * d->dk + (size_t)d->nv * d->dv;
    pdl_launch(k_dn_l2norm, d->n * 2 * d->nk, 128, 0, SLS, d->conv_out, d->nk, d->dk, cq, 1.0f / sqrtf((float)d->dk));
    return launched(msg, msglen, "deltanet gates launch");
}

__global__ void k_dn_gate_z(float *out, size_t ldo, const float *z, int nv, int dv) {
    pdl_wait();
    const int t = blockIdx.y;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < nv * dv; i += gridDim.x * blockDim.x) {
        float *o = out + (size_t)t * ldo + i;
        *o = __fmul_rn(*o, silu(z[(size_t)t * nv * dv + i]));
    }
}

extern "C" int slcu_dn_norm(const slcu_dn *d, char *msg, size_t msglen) {
    if (d->n <= 0) return 0;
    if (slcu_rmsnorm(d->out, d->out, d->n, d->ldo, d->nv, (size_t)d->dv, d->dv, d->norm_w, 0.0f, d->eps, msg, msglen)) return -1;
    pdl_launch(k_dn_gate_z, dim3((unsigned)((d->nv * d->dv + 255) / 256), (unsigned)d->n), 256, 0, SLS, d->out, d->ldo, d->z, d->nv, d->dv);
    return launched(msg, msglen, "deltanet norm launch");
}

extern "C" int slcu_sync(char *msg, size_t msglen) {
    cudaError_t e = cudaDeviceSynchronize();
    return e == cudaSuccess ? 0 : fail(msg, msglen, "device", e);
}
