/*
 * mxfp4.h — MXFP4 weights (quant/quant.h's DT_MXFP4 layout): dequantisation of a row and the matmul.
 *
 * A row of cols values is cols/32 blocks; block g has 16 code bytes (code of column 2i in the low nibble of byte
 * i, 2i+1 in the high one) and one E8M0 scale byte s: w = MXFP4_VALUES[code] * 2^(s - 127), one float32 multiply,
 * as transformers' integrations/mxfp4.py convert_moe_packed_tensors (a lookup, then torch.ldexp = x * 2^e) gives
 * it: bitwise the same values (tests/test_quant.c checks the fixture against transformers' own hash).
 *
 * The scalar row decoder (mxfp4_row_scalar, with MXFP4_VALUES and mxfp4_scale in quant/quant.h: the
 * dequantiser uses it too) is the oracle; the AVX2, AVX-512 and NEON ones (mxfp4_avx2.c, mxfp4_avx512.c,
 * mxfp4_neon.c) must give the same bits. mxfp4_matmul decodes each row once per call and dots it with every
 * token through the table's own ops->dot, so each output depends only on its row and token (kernels.h's
 * determinism contract).
 */
#ifndef SL_MXFP4_H
#define SL_MXFP4_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "quant/quant.h" /* MXFP4_VALUES, mxfp4_scale, mxfp4_row_scalar: the scalar decoder */

typedef void (*mxfp4_row_fn)(const uint8_t *codes, const uint8_t *scales, int cols, float *out);
/* The SIMD decoders; NULL when not compiled for this machine (kern_*_ops() says whether the CPU has them). */
mxfp4_row_fn mxfp4_row_avx2(void);
mxfp4_row_fn mxfp4_row_avx512(void);
mxfp4_row_fn mxfp4_row_neon(void);
/* The decoder that goes with a kernel table (by its name), the scalar one when it has none. */
mxfp4_row_fn mxfp4_row_for(const kern_ops *ops);

/* kern_matmul for a DT_MXFP4 matrix (same contract and return values). */
int mxfp4_matmul(const kern_ops *ops, pool_t *pool, const tn_mat *w, const float *x, size_t ldx, float *y,
                 size_t ldy, int n_tok);

#endif
