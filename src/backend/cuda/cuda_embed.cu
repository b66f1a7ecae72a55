/*
 * cuda_embed.cu — embedding rows gathered and dequantised on the device (slcu_embed): each element exactly as
 * src/quant/quant.c q_row_to_f32 computes it (f32 / bf16 / f16 converted exactly; q8 / q4: scale * code +
 * bias, a multiply then an add, as the host's -ffp-contract=off build), so the rows are bitwise the host's. k_embed
 * waits (pdl_wait) before its first global access: cuda_pdl.cuh pdl_launch.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_pdl.cuh"

__device__ __forceinline__ float emb_val(const void *p, int dt, size_t i) {
    if (dt == DT_F32) return ((const float *)p)[i];
    const unsigned short h = ((const unsigned short *)p)[i];
    return dt == DT_BF16 ? __uint_as_float((unsigned)h << 16) : __half2float(__ushort_as_half(h));
}

/* grid (ceil(cols / 256), n): thread c of token t */
__global__ void k_embed(const slcu_mat m, const int *__restrict__ tokens, float *x, size_t ldx) {
    pdl_wait();
    const int t = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= m.cols) return;
    const size_t r = (size_t)tokens[t];
    float v;
    if (m.dtype == DT_Q8 || m.dtype == DT_Q4) {
        const size_t g = r * (size_t)(m.cols / m.group) + (size_t)(c / m.group);
        const uint8_t *row = (const uint8_t *)m.data + r * (size_t)m.cols * (m.dtype == DT_Q4 ? 4 : 8) / 8;
        const unsigned code = m.dtype == DT_Q8 ? row[c] : (row[c >> 1] >> ((c & 1) * 4)) & 15u;
        v = __fadd_rn(__fmul_rn(emb_val(m.scales, m.sdtype, g), (float)code), emb_val(m.biases, m.sdtype, g));
    } else {
        v = emb_val(m.data, m.dtype, r * (size_t)m.cols + (size_t)c);
    }
    x[(size_t)t * ldx + c] = v;
}

extern "C" int slcu_embed(const slcu_mat *table, const int *tokens, int n, float *x, size_t ldx, char *msg, size_t msglen) {
    const int dt = table->dtype, q = dt == DT_Q8 || dt == DT_Q4;
    if ((!q && dt != DT_F32 && dt != DT_BF16 && dt != DT_F16) || (q && (!table->scales || !table->biases || table->group <= 0 ||
                                                                      table->cols % table->group))) {
        if (msg && msglen) snprintf(msg, msglen, "the CUDA backend cannot embed from a %s table", dt_name((dt_type)dt));
        return -1;
    }
    if (n <= 0 || table->cols <= 0) return 0;
    pdl_launch(k_embed, dim3((unsigned)((table->cols + 255) / 256), (unsigned)n), 256, 0, SLS, *table, tokens, x, ldx);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return 0;
    if (msg && msglen) snprintf(msg, msglen, "embed launch: %s", cudaGetErrorString(e));
    return -1;
}
