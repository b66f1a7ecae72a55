/*
 * quant.h — quantized weight matrices: layout, quantisers and dequantisers (docs/QUANT.md).
 *
 * A quantized matrix W [rows][cols] is one contiguous byte range, in this order:
 *   codes   [rows][cols*bits/8]  each row a little-endian, LSB-first bit stream (MLX's packing: element
 *                                c occupies bits [c*bits, (c+1)*bits) of its row; rows are whole u32 words)
 *   scales  [rows][cols/group]   of sdtype (f16, bf16 or f32)
 *   biases  [rows][cols/group]   of sdtype -- q8 and q4 only
 * q8 / q4 (group-affine, MLX): w[r][c] = scale[r][c/g] * q + bias[r][c/g], q unsigned.
 * q3 (rotated codebook): per group of g columns the rotated weights v = R w, R = H_g D / sqrt(g) (H_g the
 * Sylvester-Hadamard matrix, D = diag(+-1) from the seed and the column index), are stored as
 * v[i] = scale * Q3_LEVELS[code]; R is orthonormal, so w . x = sum over groups of v . (R x): a matmul
 * rotates x once per call (q3_rotate) and never rotates weights.
 * Groups are 32, 64 or 128 and must divide cols. Everything here is deterministic and thread-safe.
 * mxfp4 (gpt-oss, OCP Microscaling; transformers' integrations/mxfp4.py): codes [rows][cols/2], two E2M1 codes
 * a byte, the even column in the low nibble, then scales [rows][cols/32] of E8M0 bytes (sdtype DT_NONE, group
 * 32 always): w[r][c] = MXFP4_VALUES[code] * 2^(scale - 127), exactly as convert_moe_packed_tensors computes it
 * (the scalar decoder below; the SIMD ones and the matmul in kernels/mxfp4.h).
 * GGUF block types (DT_Q2_K .. DT_IQ4_XS, quant/kquant.h): the GGUF rows as they are, scales inside the blocks;
 * bound with scales = data, biases NULL, group = the block's length, sdtype DT_NONE. Import only.
 */
#ifndef SL_QUANT_H
#define SL_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sluice.h"
#include "util/tensor.h"
#include "util/dtype.h"
#include "quant/kquant.h"

/* Lloyd-Max reconstruction levels of the unit Gaussian, 8 levels, code order. */
extern const float Q3_LEVELS[8];

/* MXFP4 (the layout above) */
extern const float MXFP4_VALUES[16]; /* E2M1: +0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, ..., -6 */

/* 2^(s - 127) as a float32 (s = 0: 2^-127, subnormal; s = 255: +inf, as torch's pow(2, 128) in float32). */
static inline float mxfp4_scale(uint8_t s) {
    uint32_t u = s == 0 ? 0x00400000u : s == 255 ? 0x7f800000u : (uint32_t)s << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* out[cols] (cols a multiple of 32) from a row's codes [cols/2] and scales [cols/32]. */
void mxfp4_row_scalar(const uint8_t *codes, const uint8_t *scales, int cols, float *out);

/* Bits per code of a quantized dtype, 0 for other types (the GGUF block types included: kq_row_bytes). */
int q_bits(dt_type dt);
static inline int q_is_quant(dt_type dt) {
    return dt == DT_Q8 || dt == DT_Q4 || dt == DT_Q3 || dt == DT_MXFP4 || kq_is(dt);
}
/* Bytes of one row's codes (plain types: the row; GGUF block types: the row's blocks, scales included). */
static inline size_t q_row_code_bytes(dt_type dt, int64_t cols) {
    if (kq_is(dt)) return kq_row_bytes(dt, cols);
    int b = q_bits(dt);
    return b ? (size_t)cols * (size_t)b / 8 : (size_t)cols * dt_size(dt);
}

/* Bytes of a [rows][cols] matrix of dtype dt: rows*cols*dt_size for plain types, the layout above for
 * quantized ones (group, sdt ignored for plain types). */
uint64_t q_mat_bytes(dt_type dt, int64_t rows, int64_t cols, int group, dt_type sdt);

/* Checks that (dt, group, sdt) can hold a matrix with `cols` columns. SL_OK, or SL_EINVAL with the reason in
 * err (may be NULL; e.g. "group size 48 is not 32, 64 or 128", "group size 64 does not divide the row of 96
 * columns"), for the caller to prefix with the tensor's name. */
sl_status q_check(dt_type dt, int64_t cols, int group, dt_type sdt, sl_error *err);

/* Points m at a matrix stored at data in the layout above (any dtype). Cannot fail. */
void q_mat_bind(tn_mat *m, const void *data, dt_type dt, int rows, int cols, int group, dt_type sdt,
                uint32_t seed);

/* 1 when m is q8/q4 and every bias equals, bit for bit, -2^(bits-1) * its scale computed in f32 (-128 / -8
 * times the scale: what GGUF Q8_0 / Q4_0 import to), so kernels may take tn_mat.bias_implied; 0 otherwise.
 * Reads every scale and bias once. Cannot fail. */
int q_biases_implied(const tn_mat *m);
/* Rows row0 .. row0+n-1 of m as a matrix of their own (any dtype; this layout: codes, scales and biases are
 * row-major, so a row range is a range of each; GGUF blocks whole rows with their scales inside). Pointer arithmetic
 * only: valid in any backend's memory (MLA's W_uv a head, DeepSeek-V4's o_a a group). */
tn_mat q_rows_view(const tn_mat *m, int row0, int n);

/* Row r of m as f32 in the original (unrotated) domain: out[cols]. Works for every dtype. */
void q_row_to_f32(const tn_mat *m, int r, float *out);

/* Quantizes w [rows][cols] f32 into out (q_mat_bytes(dt, ...) bytes). q_check must have passed; dt is q8, q4, q3,
 * q2 or mxfp4 (the GGUF block types are import only). */
void q_quantize(dt_type dt, const float *w, int rows, int cols, int group, dt_type sdt, uint32_t seed,
                void *out);

/* q_quantize minimising sum_j imp[j] (w[r][j] - q[r][j])^2 per row instead of the plain squared error (quant/qimp.h:
 * the affine types' scale and bias, q3 / q2 / q2v's scales and codes under the rotated form of that measure); imp
 * [cols] >= 0 is one importance per column (llama-imatrix's mean squared activation). imp NULL: q_quantize, byte for
 * byte; a group whose importances are all 0 is quantised as q_quantize does. mxfp4 ignores imp. */
void q_quantize_imp(dt_type dt, const float *w, int rows, int cols, int group, dt_type sdt, uint32_t seed,
                    const float *imp, void *out);
/* sum_j imp[j] (w[j] - q[j])^2 for row r of m (imp NULL: all ones) against the f32 row w [cols]. */
double q_row_werr(const tn_mat *m, int r, const float *w, const float *imp);
/* In place, unnormalised: t <- H_n t, H_n the Sylvester-Hadamard matrix (n a power of two). */
void q_fwht(float *t, int n);

/* out[c] = (R x)[c] for a row of cols values, group by group (out may not alias x). */
void q3_rotate(const float *x, int cols, int group, uint32_t seed, float *out);
/* t[group] = R x for the one group of columns starting at column c0 (x points at it; t may not alias x), and back in
 * place (t = R^T t). */
void q_rotate_group(const float *x, int c0, int group, uint32_t seed, float *t);
void q_unrotate_group(float *t, int c0, int group, uint32_t seed);

/* q2 (quant/q2.c, docs/QUANT.md): blocks of Q2_BLK columns rotated by R (as q3's, group Q2_BLK) with the fixed seed
 * Q2_SEED, 4 levels d * Q2_LEVELS[code] (quant/kquant.h), d an f16 per block. */
#define Q2_BLK 128
#define Q2_SEED 0x51320002u
/* Quantizes w [rows][cols] (cols % Q2_BLK == 0) into out (kq_row_bytes(DT_Q2, cols) bytes a row). */
void q2_quantize(const float *w, int rows, int cols, void *out);
/* out[cols] = the rotation q2's kernels multiply by (q3_rotate with Q2_BLK, Q2_SEED); t back in place. */
void q2_rotate(const float *x, int cols, float *out);
/* q2v (quant/kquant.h): the same rotation, each 8 rotated values the nearest E8P code (both shifts, every pattern) at
 * the block's scale. */
void q2v_quantize(const float *w, int rows, int cols, void *out);
/* q2_quantize / q2v_quantize under importances imp [cols] (q_quantize_imp; imp NULL: the plain ones). */
void q2_quantize_imp(const float *w, int rows, int cols, const float *imp, void *out);
void q2v_quantize_imp(const float *w, int rows, int cols, const float *imp, void *out);
void q2_unrotate(float *t, int cols);

/* One scale (or bias) of sdtype at index i. */
static inline float q_scale_at(const void *p, dt_type sdt, size_t i) {
    if (sdt == DT_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return sdt == DT_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

#endif
