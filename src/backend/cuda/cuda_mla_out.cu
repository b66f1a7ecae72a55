/*
 * cuda_mla_out.cu — MLA's output projection on the device (cuda.h slcu_mla_out; src/backend/backend.h mla_out; the
 * CPU op is src/backend/cpu/cpu_mla.c cpu_mla_out, the algebra src/model/mla.c): out[t][h*dv + v] = sum_c
 * W_uv_h[v][c] lat[t][h][c], W_uv_h rows h*(dn+dv)+dn .. +dv of kv_b (f32 / bf16 / f16 / q8 / q4), f32 latents, every
 * head and token in one launch (where a matmul a head, token by token, took n * n_heads).
 *
 * A CTA takes one head, MO_WARPS * MO_R of its rows and a tile of NT tokens (grid: heads x row blocks, token tiles):
 * the tile's latent rows of the head go into shared memory once, each warp takes MO_R rows, and a lane reads the
 * rows' 32-bit words lane, lane + 32, .. (coalesced: 128 bytes a warp a row), each word's values dequantised once
 * (s * code + b for q8 / q4, quant.c's value) and multiplied with the matching latent values of every token of the
 * tile, so a weight is read once per NT tokens and a latent value once per MO_R rows. Per (row, token) a lane sums its
 * words' products in column order by fmaf from zero, then a fixed butterfly over the lanes: every operation and its
 * order depends on r only, never on n, NT or the token's place in the tile, so a token in a batch is bitwise the
 * token alone and a prefill's rows bitwise its decode steps' (not bitwise the CPU's exact kernels: backend.h allows
 * it). The kernel waits (pdl_wait) before its first global access and is launched by cuda_pdl.cuh pdl_launch on SLS.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_pdl.cuh"

#define MO_WARPS 8      /* warps a CTA */
#define MO_R 4          /* rows a warp: each latent value loaded from shared memory serves 4 rows */
#define MO_NT 16        /* tokens a tile at most */
#define MO_SMEM 49152   /* bytes of latents a CTA may hold (the default limit, no opt-in) */

__device__ __forceinline__ float mo_scale(const void *p, dt_type sdt, size_t i) {
    if (sdt == DT_F32) return ((const float *)p)[i];
    const unsigned short h = ((const unsigned short *)p)[i];
    if (sdt == DT_BF16) return __uint_as_float((unsigned)h << 16);
    return __half2float(__ushort_as_half(h));
}

/* values a 32-bit word holds */
template <int DT> struct mo_word {
    static const int n = DT == DT_F32 ? 1 : DT == DT_Q8 ? 4 : DT == DT_Q4 ? 8 : 2;
};

/* The word's values in column order as f32: the stored value (f32 / bf16 / f16), or s * code + b (q8 / q4, codes LSB
 * first), quant.c q_row_to_f32's. */
template <int DT> __device__ __forceinline__ void mo_unpack(unsigned u, float s, float b, float *w) {
    if (DT == DT_F32) w[0] = __uint_as_float(u);
    else if (DT == DT_BF16) { w[0] = __uint_as_float(u << 16); w[1] = __uint_as_float(u & 0xffff0000u); }
    else if (DT == DT_F16) {
        w[0] = __half2float(__ushort_as_half((unsigned short)(u & 0xffffu)));
        w[1] = __half2float(__ushort_as_half((unsigned short)(u >> 16)));
    } else {
        const int bits = DT == DT_Q8 ? 8 : 4;
#pragma unroll
        for (int j = 0; j < mo_word<DT>::n; j++) w[j] = fmaf(s, (float)((u >> (bits * j)) & ((1u << bits) - 1u)), b);
    }
}

/* lat [n][n_heads * r], out [n][ldo] (head h's dv values at h * dv); tokens tile * NT .. of this CTA */
template <int DT, int NT>
__global__ void __launch_bounds__(32 * MO_WARPS, 2)
k_mla_out(slcu_mat w, const float *lat, float *out, size_t ldo, int n, int n_heads, int r, int dn, int dv) {
    pdl_wait();
    extern __shared__ float xs[]; /* [NT][r] the tile's latents of the head, zeros past n */
    const int VW = mo_word<DT>::n, rb = (dv + MO_WARPS * MO_R - 1) / (MO_WARPS * MO_R);
    const int h = (int)blockIdx.x / rb, v0 = ((int)blockIdx.x % rb) * MO_WARPS * MO_R, t0 = (int)blockIdx.y * NT;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int i = threadIdx.x; i < NT * r; i += blockDim.x) {
        const int t = i / r, c = i - t * r;
        xs[i] = t0 + t < n ? __ldcg(lat + ((size_t)(t0 + t) * n_heads + h) * r + c) : 0.f;
    }
    __syncthreads();
    const bool quant = DT == DT_Q8 || DT == DT_Q4;
    const int words = r / VW, ng = quant ? r / w.group : 0;
    const size_t row_words = (size_t)words;
    int rows[MO_R];
#pragma unroll
    for (int i = 0; i < MO_R; i++) {
        const int v = v0 + warp * MO_R + i < dv ? v0 + warp * MO_R + i : dv - 1; /* a missing row repeats the last */
        rows[i] = h * (dn + dv) + dn + v;
    }
    float acc[MO_R][NT];
#pragma unroll
    for (int i = 0; i < MO_R; i++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[i][t] = 0.f;
    for (int k = lane; k < words; k += 32) {
        float wv[MO_R][VW];
#pragma unroll
        for (int i = 0; i < MO_R; i++) {
            const unsigned u = __ldg((const unsigned *)w.data + (size_t)rows[i] * row_words + k);
            float s = 0.f, b = 0.f;
            if (quant) {
                const size_t gi = (size_t)rows[i] * ng + (size_t)k * VW / w.group;
                s = mo_scale(w.scales, w.sdtype, gi);
                b = mo_scale(w.biases, w.sdtype, gi);
            }
            mo_unpack<DT>(u, s, b, wv[i]);
        }
        const float *xk = xs + (size_t)k * VW;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float xv[VW];
            if (VW >= 4) {
#pragma unroll
                for (int j = 0; j < VW; j += 4) {
                    const float4 q = *(const float4 *)(xk + (size_t)t * r + j);
                    xv[j] = q.x, xv[j + 1] = q.y, xv[j + 2] = q.z, xv[j + 3] = q.w;
                }
            } else if (VW == 2) {
                const float2 q = *(const float2 *)(xk + (size_t)t * r);
                xv[0] = q.x, xv[VW - 1] = q.y;
            } else {
                xv[0] = xk[(size_t)t * r];
            }
#pragma unroll
            for (int i = 0; i < MO_R; i++)
#pragma unroll
                for (int j = 0; j < VW; j++) acc[i][t] = fmaf(wv[i][j], xv[j], acc[i][t]);
        }
    }
#pragma unroll
    for (int i = 0; i < MO_R; i++)
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float s = acc[i][t];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            const int v = v0 + warp * MO_R + i;
            if (lane == 0 && v < dv && t0 + t < n) out[(size_t)(t0 + t) * ldo + (size_t)h * dv + v] = s;
        }
}

/* tokens a tile for n tokens of r latents: the next power of two >= n up to MO_NT, halved while the tile's latents
 * exceed MO_SMEM (0: not even one token's fit) */
static int tile_tokens(int n, int r) {
    int nt = 1;
    while (nt < n && nt < MO_NT) nt *= 2;
    while (nt > 0 && (size_t)nt * (size_t)r * sizeof(float) > MO_SMEM) nt /= 2;
    return nt;
}

template <int DT, int NT>
static void launch(const slcu_mat *w, const float *lat, float *out, size_t ldo, int n, int n_heads, int r, int dn, int dv) {
    const int rb = (dv + MO_WARPS * MO_R - 1) / (MO_WARPS * MO_R);
    const dim3 grid((unsigned)(n_heads * rb), (unsigned)((n + NT - 1) / NT));
    pdl_launch(k_mla_out<DT, NT>, grid, 32 * MO_WARPS, (size_t)NT * (size_t)r * sizeof(float), SLS, *w, lat, out, ldo, n,
               n_heads, r, dn, dv);
}

template <int DT>
static int launch_nt(int nt, const slcu_mat *w, const float *lat, float *out, size_t ldo, int n, int n_heads, int r,
                     int dn, int dv) {
    switch (nt) {
    case 1: launch<DT, 1>(w, lat, out, ldo, n, n_heads, r, dn, dv); return 0;
    case 2: launch<DT, 2>(w, lat, out, ldo, n, n_heads, r, dn, dv); return 0;
    case 4: launch<DT, 4>(w, lat, out, ldo, n, n_heads, r, dn, dv); return 0;
    case 8: launch<DT, 8>(w, lat, out, ldo, n, n_heads, r, dn, dv); return 0;
    case 16: launch<DT, 16>(w, lat, out, ldo, n, n_heads, r, dn, dv); return 0;
    default: return 1;
    }
}

extern "C" int slcu_mla_out_takes(const slcu_mat *w, int n_heads, int r, int dn, int dv) {
    const int vw = w->dtype == DT_F32 ? 1 : w->dtype == DT_Q8 ? 4 : w->dtype == DT_Q4 ? 8 : 2;
    const int quant = w->dtype == DT_Q8 || w->dtype == DT_Q4;
    if (w->dtype != DT_F32 && w->dtype != DT_BF16 && w->dtype != DT_F16 && !quant) return 0;
    if (n_heads <= 0 || r <= 0 || dn < 0 || dv <= 0 || w->cols != r || w->rows != n_heads * (dn + dv)) return 0;
    if (r % vw || (uintptr_t)w->data % 4 || !tile_tokens(1, r)) return 0;
    if (quant && (w->group <= 0 || w->group % vw || r % w->group || !w->scales || !w->biases)) return 0;
    return 1;
}

extern "C" int slcu_mla_out(const slcu_mat *w, const float *lat, float *out, size_t ldo, int n, int n_heads, int r,
                            int dn, int dv, char *msg, size_t msglen) {
    if (!slcu_mla_out_takes(w, n_heads, r, dn, dv)) {
        if (msg && msglen) snprintf(msg, msglen, "mla_out: no kernel for this kv_b_proj (%s, %d columns)", dt_name(w->dtype), r);
        return -1;
    }
    if (n <= 0) return 0;
    const int nt = tile_tokens(n, r);
    switch (w->dtype) {
    case DT_F32: launch_nt<DT_F32>(nt, w, lat, out, ldo, n, n_heads, r, dn, dv); break;
    case DT_BF16: launch_nt<DT_BF16>(nt, w, lat, out, ldo, n, n_heads, r, dn, dv); break;
    case DT_F16: launch_nt<DT_F16>(nt, w, lat, out, ldo, n, n_heads, r, dn, dv); break;
    case DT_Q8: launch_nt<DT_Q8>(nt, w, lat, out, ldo, n, n_heads, r, dn, dv); break;
    default: launch_nt<DT_Q4>(nt, w, lat, out, ldo, n, n_heads, r, dn, dv); break;
    }
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        if (msg && msglen) snprintf(msg, msglen, "mla_out launch: %s", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}
