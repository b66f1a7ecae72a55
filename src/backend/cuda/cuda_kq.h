/*
 * cuda_kq.h — the GGUF block types (src/quant/kquant.h: DT_Q2_K .. DT_IQ1_M, DT_Q5_0, DT_Q5_1) on the device
 * (cuda_kq.cu; docs/CUDA.md "GGUF block types"): a matmul on f32 activations and the embedding rows. Every weight is
 * decoded as kq_block_to_f32 decodes it (bitwise), so the kernels' weights are the scalar oracle's; the sums'
 * order is fixed by the shapes alone (cuda_kq.cu), so a token gives the same bits alone or in any batch and from
 * any copy of the weights (streamed == resident). sluice's own rotated q2 / q2v are not taken (their activations
 * are rotated first: the backend refuses them at open). A C interface, as cuda.h; functions return 0 or -1 with
 * a message.
 */
#ifndef SL_BACKEND_CUDA_KQ_H
#define SL_BACKEND_CUDA_KQ_H

#include <stddef.h>

#include "backend/cuda/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the kernels below take dt (every GGUF block type sluice keeps), else 0. */
int slcu_kq_takes(dt_type dt);
/* y[t * ldy + r] = (W x_t)[r] for t < n, W [rows][cols] of a type slcu_kq_takes (rows of whole blocks, byte for
 * byte the GGUF rows: w->data only), x [n][ldx] f32, all device memory (or pinned). Up to 8 tokens share one read
 * of the weights; more are chunks of 8 in one launch (a CTA a row block and chunk, side by side). Per row: lane l of a warp takes the 32-value pieces l, l + 32, ...
 * of the row (a piece: 32 consecutive values, a sub-block of a 256-block or a whole 32-block), per piece and token
 * d = fma chain over its 32 values from 0, acc = acc + d; then a butterfly over the lanes (xor 16, 8, 4, 2, 1). */
int slcu_matmul_kq(const slcu_mat *w, const float *x, size_t ldx, float *y, size_t ldy, int n, char *msg,
                   size_t msglen);
/* x[t * ldx ..] = row tokens[t] (device, each checked by the caller) of table, dequantised bitwise as
 * quant.c q_row_to_f32 (kq_row_to_f32). */
int slcu_embed_kq(const slcu_mat *table, const int *tokens, int n, float *x, size_t ldx, char *msg, size_t msglen);

#ifdef __cplusplus
}
#endif

#endif
