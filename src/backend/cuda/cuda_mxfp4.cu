/*
 * cuda_mxfp4.cu — y = W x for gpt-oss's MXFP4 experts on the device (cuda.h slcu_matmul_mxfp4; the layout is
 * src/quant/quant.h's, the CPU's matmul src/kernels/mxfp4.c). A warp per output row, 4 rows a CTA; lane l takes
 * the 32-column blocks l, l + 32, ... (16 bytes of codes and one E8M0 scale each), decodes every weight as
 * mxfp4_row_scalar does (value * 2^(e-127), exact in f32), and keeps per token one partial sum: per block
 * d = fma chain over its 32 columns, acc += d; then a fixed butterfly over the lanes. Up to 8 tokens share
 * one read of the weights; the order of every sum depends only on the shapes, never on n. k_mxfp4 waits (pdl_wait)
 * before its first global access and is launched by cuda_pdl.cuh pdl_launch, on the legacy stream as before.
 */
#include <cuda_runtime.h>
#include <stdio.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_pdl.cuh"

#define MX_WARPS 4
#define MX_T 8

__constant__ float mx_values[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

__device__ __forceinline__ float mx_scale(unsigned s) { /* kernels/mxfp4.h mxfp4_scale */
    return __uint_as_float(s == 0 ? 0x00400000u : s == 255 ? 0x7f800000u : s << 23);
}

__global__ void __launch_bounds__(32 * MX_WARPS) k_mxfp4(const uint8_t *__restrict__ codes, const uint8_t *__restrict__ scales,
                                                        int rows, int cols, const float *__restrict__ x, size_t ldx,
                                                        float *__restrict__ y, size_t ldy, int nt, int aligned) {
    pdl_wait();
    const int lane = threadIdx.x & 31, r = blockIdx.x * MX_WARPS + (threadIdx.x >> 5);
    if (r >= rows) return;
    const int nb = cols / 32;
    const uint8_t *rc = codes + (size_t)r * (cols / 2);
    const uint8_t *rs = scales + (size_t)r * nb;
    float acc[MX_T];
#pragma unroll
    for (int t = 0; t < MX_T; t++) acc[t] = 0.0f;
    for (int b = lane; b < nb; b += 32) {
        unsigned wd[4];
        if (aligned) {
            const uint4 q = __ldg((const uint4 *)(rc + (size_t)b * 16));
            wd[0] = q.x, wd[1] = q.y, wd[2] = q.z, wd[3] = q.w;
        } else {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const uint8_t *p = rc + (size_t)b * 16 + 4 * k;
                wd[k] = (unsigned)p[0] | (unsigned)p[1] << 8 | (unsigned)p[2] << 16 | (unsigned)p[3] << 24;
            }
        }
        const float s = mx_scale(__ldg(rs + b));
        float w[32];
#pragma unroll
        for (int k = 0; k < 4; k++)
#pragma unroll
            for (int j = 0; j < 8; j++) w[8 * k + j] = __fmul_rn(mx_values[(wd[k] >> (4 * j)) & 15], s);
#pragma unroll
        for (int t = 0; t < MX_T; t++) {
            if (t >= nt) break;
            const float *xt = x + (size_t)t * ldx + (size_t)b * 32;
            float d = 0.0f;
#pragma unroll
            for (int j = 0; j < 32; j++) d = fmaf(w[j], __ldg(xt + j), d);
            acc[t] = __fadd_rn(acc[t], d);
        }
    }
#pragma unroll
    for (int t = 0; t < MX_T; t++) {
        if (t >= nt) break;
        float v = acc[t];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (!lane) y[(size_t)t * ldy + r] = v;
    }
}

extern "C" int slcu_matmul_mxfp4(const slcu_mat *w, const float *x, size_t ldx, float *y, size_t ldy, int n, char *msg,
                                 size_t msglen) {
    if (w->dtype != DT_MXFP4 || w->cols <= 0 || w->cols % 32 || !w->data || !w->scales) {
        if (msg && msglen) snprintf(msg, msglen, "mxfp4 matmul: needs an mxfp4 matrix of a multiple of 32 columns");
        return -1;
    }
    if (n <= 0 || w->rows <= 0) return 0;
    const int aligned = !((uintptr_t)w->data & 15); /* rows are 16 * (cols / 32) bytes: all aligned then */
    const unsigned grid = (unsigned)((w->rows + MX_WARPS - 1) / MX_WARPS);
    for (int t0 = 0; t0 < n; t0 += MX_T) {
        const int nt = n - t0 < MX_T ? n - t0 : MX_T;
        pdl_launch(k_mxfp4, grid, 32 * MX_WARPS, 0, 0, (const uint8_t *)w->data, (const uint8_t *)w->scales, w->rows,
                   w->cols, x + (size_t)t0 * ldx, ldx, y + (size_t)t0 * ldy, ldy, nt, aligned); /* stream 0: the legacy one */
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        if (msg && msglen) snprintf(msg, msglen, "mxfp4 matmul launch: %s", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}
