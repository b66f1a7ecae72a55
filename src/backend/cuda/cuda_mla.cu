/*
 * cuda_mla.cu — multi-head latent attention over its compressed cache on the device (cuda.h slcu_mla;
 * src/backend/backend.h be_mla; the CPU op is src/backend/cpu/cpu_mla.c cpu_mla, the algebra src/model/mla.c).
 * Three launches: the n new [c | k_pe] rows into the cache; the absorbed queries, a thread per (token, head,
 * latent column) summing q_nope[i] * W_uk[i][c] over i in row order from 0 as the CPU's axpy loop does, each
 * weight dequantised as quant.c q_row_to_f32 (s * code + b for q8 / q4); then a CTA per (token, head): the
 * scores (a warp per cached row, a fixed butterfly), the max, exp, the sum in double (a fixed tree), and
 * thread c's latent sum over the positions in increasing order, lat += (e_p / sum) c_p. Every order depends
 * on the shapes only: bitwise repeatable, a token in a batch equals the token alone. The kernels wait (pdl_wait)
 * before their first global access and are launched by cuda_pdl.cuh pdl_launch, on the legacy stream as before.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>

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

/* blockIdx.y = token * n_heads + head; columns c < r + dr of q_abs */
__global__ void k_mla_absorb(const slcu_mla a) {
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

#define MLA_THREADS 256
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
    double s = 0.0;
    for (int p = threadIdx.x; p < n_keys; p += MLA_THREADS) {
        sc[p] = expf(__fsub_rn(sc[p], mx_s));
        s += sc[p];
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = MLA_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    const float fsum = (float)part[0];
    float *lat = a.lat + (size_t)th * a.r;
    for (int c = threadIdx.x; c < a.r; c += MLA_THREADS) {
        float acc = 0.0f;
        for (int p = 0; p < n_keys; p++) acc = __fadd_rn(acc, __fmul_rn(__fdiv_rn(sc[p], fsum), a.cache[(size_t)p * row + c]));
        lat[c] = acc;
    }
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
    const int row = a->r + a->dr;
    pdl_launch(k_mla_store, dim3((unsigned)((row + 255) / 256), (unsigned)a->n), 256, 0, 0, *a); /* stream 0: the legacy one */
    pdl_launch(k_mla_absorb, dim3((unsigned)((row + 127) / 128), (unsigned)(a->n * a->n_heads)), 128, 0, 0, *a);
    pdl_launch(k_mla_attend, a->n * a->n_heads, MLA_THREADS, smem, 0, *a);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        if (msg && msglen) snprintf(msg, msglen, "mla launch: %s", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}
