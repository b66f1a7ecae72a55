/*
 * cuda_swiglu.cuh — gpt-oss's clamped SwiGLU of one (gate, up) pair (modeling_gpt_oss.py GptOssExperts: gate_up's
 * Linear bias added, gate clamped above at limit, up both ways, (up + 1) * gate * sigmoid(1.702 gate)), every
 * rounding explicit. One expression for cuda_ops.cu k_swiglu_clamped (an expert alone) and cuda_moex.cu k_oss_mid
 * (the experts grouped), so the grouped path is bitwise the per-expert one by construction.
 */
#pragma once

/* the pair at column i of a gate_up row (gate at 2 i, up at 2 i + 1), b the row's bias [2 I] or NULL */
__device__ __forceinline__ float oss_glu(float gate, float up, const float *b, int i, float limit) {
    if (b) gate = __fadd_rn(gate, b[2 * i]), up = __fadd_rn(up, b[2 * i + 1]);
    gate = gate > limit ? limit : gate;
    up = up > limit ? limit : up < -limit ? -limit : up;
    const float glu = __fmul_rn(gate, __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-__fmul_rn(gate, 1.702f)))));
    return __fmul_rn(__fadd_rn(up, 1.0f), glu);
}
