/*
 * cuda_ops.cu — the non-matmul ops of one decode step on the device (cuda.h): rmsnorm, RoPE, SwiGLU and
 * gpt-oss's clamped SwiGLU, the routers, the MoE combine, attention over a KV cache in VRAM, the Gated
 * DeltaNet recurrence. Each kernel does the CPU code's operations in the CPU code's order where that order
 * is cheap to keep (explicit __f*_rn intrinsics, so nvcc fuses nothing the C compiler does not: the
 * project builds with -std=c11, which turns contraction off); reductions the CPU does serially in
 * double run here as a fixed tree in double. Every result is bitwise repeatable and depends only on its own
 * token.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda.h"

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

extern "C" int slcu_rmsnorm(const float *x, float *y, int n_tok, size_t ld, int n_heads, size_t head_stride, int dim,
                            const float *w, float w_off, float eps, char *msg, size_t msglen) {
    if (dim <= 0 || n_heads <= 0) return bad(msg, msglen, "rmsnorm: no columns or heads");
    if (n_tok <= 0) return 0;
    k_rmsnorm<<<n_tok * n_heads, 256>>>(x, y, ld, n_heads, head_stride, dim, w, w_off, eps);
    return launched(msg, msglen, "rmsnorm launch");
}

/* ---- RoPE (NeoX rotate-half on the first rot dims); the frequencies travel in the kernel parameter ---- */
struct rope_freq {
    float f[512];
};
__global__ void k_rope(float *x, size_t ld, int n_heads, size_t hs, int half, const __grid_constant__ rope_freq fr, float af,
                       int pos0, int inter) {
    __shared__ float v0[1024];
    const int t = blockIdx.x / n_heads;
    float *v = x + (size_t)t * ld + (size_t)(blockIdx.x % n_heads) * hs;
    for (int i = threadIdx.x; i < 2 * half; i += blockDim.x) v0[i] = v[i];
    __syncthreads();
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const float ang = __fmul_rn((float)(pos0 + t), fr.f[i]);
        const float c = __fmul_rn(cosf(ang), af), s = __fmul_rn(sinf(ang), af);
        const float a = inter ? v0[2 * i] : v0[i], b = inter ? v0[2 * i + 1] : v0[i + half];
        v[i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
        v[i + half] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
    }
}

extern "C" int slcu_rope(float *x, int n_tok, size_t ld, int n_heads, size_t head_stride, int rot, const float *inv_freq,
                         float attn_factor, int pos0, int interleave, char *msg, size_t msglen) {
    if (rot < 0 || rot % 2 || rot > 1024 || n_heads <= 0) return bad(msg, msglen, "rope: rot must be even, at most 1024");
    if (n_tok <= 0 || !rot) return 0;
    rope_freq fr;
    memcpy(fr.f, inv_freq, (size_t)rot / 2 * sizeof(float));
    k_rope<<<n_tok * n_heads, 64>>>(x, ld, n_heads, head_stride, rot / 2, fr, attn_factor, pos0, interleave);
    return launched(msg, msglen, "rope launch");
}

/* ---- SwiGLU ---- */
__global__ void k_swiglu(const float *g, const float *u, float *y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __fmul_rn(silu(g[i]), u[i]);
}

extern "C" int slcu_swiglu(const float *g, const float *u, float *y, size_t n, char *msg, size_t msglen) {
    if (!n) return 0;
    size_t blocks = (n + 255) / 256;
    k_swiglu<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256>>>(g, u, y, n);
    return launched(msg, msglen, "swiglu launch");
}

__global__ void k_swiglu_clamped(const float *gu, const float *bias, float limit, float *act, int n_tok, int I) {
    const size_t tot = (size_t)n_tok * I;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < tot; e += (size_t)gridDim.x * blockDim.x) {
        const size_t t = e / (size_t)I, i = e % (size_t)I;
        const float *g = gu + t * 2 * (size_t)I;
        float gate = g[2 * i], up = g[2 * i + 1];
        if (bias) gate = __fadd_rn(gate, bias[2 * i]), up = __fadd_rn(up, bias[2 * i + 1]);
        gate = gate > limit ? limit : gate;
        up = up > limit ? limit : up < -limit ? -limit : up;
        const float glu = __fmul_rn(gate, sigm(__fmul_rn(gate, 1.702f)));
        act[e] = __fmul_rn(__fadd_rn(up, 1.0f), glu);
    }
}

extern "C" int slcu_swiglu_clamped(const float *gu, const float *bias, float limit, float *act, int n_tok, int I, char *msg,
                                   size_t msglen) {
    if (n_tok <= 0 || I <= 0) return 0;
    size_t blocks = ((size_t)n_tok * I + 255) / 256;
    k_swiglu_clamped<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256>>>(gu, bias, limit, act, n_tok, I);
    return launched(msg, msglen, "clamped swiglu launch");
}

/* ---- routers: one CTA per token (moe.c route_token's rules); the k argmax rounds (ties to the lower index)
 * and the softmax's max and double sum are block reductions of a fixed tree (the sum within rounding of the
 * CPU's index order); the sigmoid group-limited router on one thread. ---- */
#define RT_MAXE 1024
#define RT_MAXG 64
#define RT_THREADS 128

/* (v, i) := the better of (v, i) and (v2, i2): the larger value, on a tie the lower index; i < 0 is none. */
__device__ __forceinline__ void rt_better(float &v, int &i, float v2, int i2) {
    if (i2 < 0) return;
    if (i < 0 || v2 > v || (!(v > v2) && i2 < i)) v = v2, i = i2;
}

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

__global__ void __launch_bounds__(RT_THREADS) k_route(slcu_router r, const float *logits, int *top_e, float *top_w) {
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
        if (r.kind == 1) {
            const float mx = tw[0];
            double sum = 0.0;
            for (int s = 0; s < k; s++) tw[s] = expf(__fsub_rn(tw[s], mx)), sum += tw[s];
            const float fsum = (float)sum;
            for (int s = 0; s < k; s++) tw[s] = __fdiv_rn(tw[s], fsum);
        } else if (r.norm_topk) {
            float wsum = 0.0f;
            for (int s = 0; s < k; s++) wsum = __fadd_rn(wsum, tw[s]);
            for (int s = 0; s < k; s++) tw[s] = __fdiv_rn(tw[s], wsum);
        }
    }
    for (int s = 1; s < k; s++) { /* by expert index: the fixed combine order */
        int e = te[s], i = s - 1;
        float w = tw[s];
        for (; i >= 0 && te[i] > e; i--) te[i + 1] = te[i], tw[i + 1] = tw[i];
        te[i + 1] = e, tw[i + 1] = w;
    }
}

extern "C" int slcu_route(const slcu_router *r, const float *logits, int n_tok, int *top_e, float *top_w, char *msg,
                          size_t msglen) {
    if (r->E <= 0 || r->E > RT_MAXE || r->k <= 0 || r->k > r->E) return bad(msg, msglen, "router: needs 1 <= k <= E <= 1024");
    if (r->kind < 0 || r->kind > 2) return bad(msg, msglen, "router: unknown kind");
    if (r->kind == 2 && (r->n_group < 1 || r->n_group > RT_MAXG || r->E % r->n_group || r->E / r->n_group < 2 ||
                         r->topk_group < 1 || r->topk_group > r->n_group))
        return bad(msg, msglen, "router: n_group / topk_group do not fit the experts");
    if (n_tok <= 0) return 0;
    k_route<<<n_tok, RT_THREADS>>>(*r, logits, top_e, top_w);
    return launched(msg, msglen, "router launch");
}

/* ---- combine ---- */
__global__ void k_combine(const float *y, const float *w, int k, const float *sh, const float *sg, float *out, int H) {
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
    k_combine<<<grid, 256>>>(y, w, k, sh, sg, out, H);
    return launched(msg, msglen, "combine launch");
}

/* ---- attention: one CTA per (token, head). Scores in shared memory, each a dot in the CPU's 8-lane order
 * (kernels_scalar.c dot_scalar) by one thread; the max by one thread; exp by all; the sum in double as a
 * fixed tree; then thread d accumulates o[d] over the keys in increasing position, o += (e_p / sum) v_p,
 * as attention.c's axpy loop does. ---- */
#define AT_THREADS 128
__global__ void k_attention(const slcu_attn p) {
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
    const int t = blockIdx.y, row = p.n_kv * p.hd;
    const size_t dst = (size_t)((p.pos0 + t) % p.cap) * row;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < row; i += gridDim.x * blockDim.x) {
        p.k_cache[dst + i] = p.k[(size_t)t * p.ldkv + i];
        p.v_cache[dst + i] = p.v[(size_t)t * p.ldkv + i];
    }
}

static int attn_smem_max;

extern "C" int slcu_attention(const slcu_attn *a, char *msg, size_t msglen) {
    if (a->hd <= 0 || a->hd > 1024 || a->n_kv <= 0 || a->n_heads % a->n_kv || a->cap <= 0 || a->pos0 < 0)
        return bad(msg, msglen, "attention: head_dim must be 1..1024, n_heads a multiple of n_kv, cap positive");
    if (a->n <= 0) return 0;
    const int last = a->pos0 + a->n - 1, maxk = a->window > 0 && a->window < last + 1 ? a->window : last + 1;
    if (maxk > a->cap || (a->window > 0 && a->n > a->cap - a->window + 1))
        return bad(msg, msglen, "attention: the cache has fewer rows than the positions need");
    if (!attn_smem_max) {
        int dev = 0, optin = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        attn_smem_max = optin - (int)(AT_THREADS * sizeof(double) + 1024 * sizeof(float) + 64);
        cudaFuncSetAttribute(k_attention, cudaFuncAttributeMaxDynamicSharedMemorySize, attn_smem_max);
    }
    const size_t smem = (size_t)maxk * sizeof(float);
    if (smem > (size_t)attn_smem_max) {
        if (msg && msglen) snprintf(msg, msglen, "attention: %d keys do not fit the device's shared memory (%d at most)", maxk, attn_smem_max / 4);
        return -1;
    }
    if (a->k) k_kv_append<<<dim3((unsigned)((a->n_kv * a->hd + 255) / 256), (unsigned)a->n), 256>>>(*a);
    k_attention<<<a->n * a->n_heads, AT_THREADS, smem>>>(*a);
    return launched(msg, msglen, "attention launch");
}

/* ---- Gated DeltaNet recurrence: a CTA per (value head, 32 state columns), thread d owns column d of the
 * head's state (in registers for dk 64 and 128, k_dn_step_reg) ---- */
__global__ void k_dn_step(const float *conv, const float *gates, const float *S_in, float *S_out, float *o, size_t ldo,
                          int n_tok, int nk, int nv, int dk, int dv) {
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
    if (dn_generic) k_dn_step<<<grid, th, 2 * (size_t)dk * sizeof(float)>>>(conv_out, gates, ssm_in, ssm_out, out, ldo, n, nk, nv, dk, dv);
    else if (dk == 128) k_dn_step_reg<128><<<grid, th>>>(conv_out, gates, ssm_in, ssm_out, out, ldo, n, nk, nv, dv);
    else if (dk == 64) k_dn_step_reg<64><<<grid, th>>>(conv_out, gates, ssm_in, ssm_out, out, ldo, n, nk, nv, dv);
    else k_dn_step<<<grid, th, 2 * (size_t)dk * sizeof(float)>>>(conv_out, gates, ssm_in, ssm_out, out, ldo, n, nk, nv, dk, dv);
    return launched(msg, msglen, "deltanet launch");
}

/* ---- the Gated DeltaNet's conv1d, gates and gated norm (cpu_mix.c cpu_dn_conv / cpu_dn_gates / cpu_dn_norm) ---- */

/* blockIdx.y < n: token t's conv outputs; blockIdx.y == n: the new state (the last K-1 pre-conv rows) */
__global__ void k_dn_conv(const slcu_dn d) {
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
    k_dn_conv<<<dim3((unsigned)((cq + 255) / 256), (unsigned)d->n + 1), 256>>>(*d);
    return launched(msg, msglen, "deltanet conv launch");
}

__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__global__ void k_dn_gate_vals(const slcu_dn d) {
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
    k_dn_gate_vals<<<d->n, 128>>>(*d);
    const size_t cq = (size_t)2 * d->nk * d->dk + (size_t)d->nv * d->dv;
    k_dn_l2norm<<<d->n * 2 * d->nk, 128>>>(d->conv_out, d->nk, d->dk, cq, 1.0f / sqrtf((float)d->dk));
    return launched(msg, msglen, "deltanet gates launch");
}

__global__ void k_dn_gate_z(float *out, size_t ldo, const float *z, int nv, int dv) {
    const int t = blockIdx.y;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < nv * dv; i += gridDim.x * blockDim.x) {
        float *o = out + (size_t)t * ldo + i;
        *o = __fmul_rn(*o, silu(z[(size_t)t * nv * dv + i]));
    }
}

extern "C" int slcu_dn_norm(const slcu_dn *d, char *msg, size_t msglen) {
    if (d->n <= 0) return 0;
    if (slcu_rmsnorm(d->out, d->out, d->n, d->ldo, d->nv, (size_t)d->dv, d->dv, d->norm_w, 0.0f, d->eps, msg, msglen)) return -1;
    k_dn_gate_z<<<dim3((unsigned)((d->nv * d->dv + 255) / 256), (unsigned)d->n), 256>>>(d->out, d->ldo, d->z, d->nv, d->dv);
    return launched(msg, msglen, "deltanet norm launch");
}

extern "C" int slcu_sync(char *msg, size_t msglen) {
    cudaError_t e = cudaDeviceSynchronize();
    return e == cudaSuccess ? 0 : fail(msg, msglen, "device", e);
}
