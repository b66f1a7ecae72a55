/*
 * kernels.h — compute kernels behind an ops table (ggml backends, SQLite io_methods).
 *
 * One kern_ops per instruction set. The scalar C table (kernels_scalar.c) is always compiled and is the
 * oracle every other variant is tested against. kern_default_ops() picks the best table for this CPU.
 *
 * Determinism contract, which every variant must keep:
 *  - matmul computes each output y[t][r] entirely in one call, accumulating over the columns in an
 *    order that depends only on the column count (never on n_tok, on the row range or on any
 *    blocking), so results are bitwise identical for any thread count and for "T tokens at once"
 *    versus "one token at a time";
 *  - the reductions (dot, rmsnorm) likewise depend only on n.
 * The scalar order: 8 lane accumulators, lane = column % 8, each lane summed in increasing column
 * order, lanes combined as ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)).
 */
#ifndef SL_KERNELS_H
#define SL_KERNELS_H

#include <math.h>
#include <stddef.h>

#include "model/model.h"
#include "util/dtype.h"
#include "util/threadpool.h"

/* w: [rows][cols] of the entry's dtype (quantized: codes, scales, biases as in quant/quant.h);
 * x: n_tok rows of stride ldx (floats), each [cols]; y: n_tok rows of stride ldy;
 * writes y[t*ldy + r] = sum_c w[r][c] * x[t*ldx + c] for r in [r0, r1).
 * DT_Q3 entries receive x already rotated (q3_rotate; kern_matmul does it) and use the stored
 * rotated weights scale * Q3_LEVELS[code] directly. */
typedef void (*kern_matmul_fn)(const sl_mat *w, const float *x, size_t ldx, float *y, size_t ldy, int n_tok,
                               int r0, int r1);

typedef struct kern_ops {
    const char *name;
    kern_matmul_fn matmul[DT_COUNT]; /* indexed by sl_dtype: F32, F16, BF16, Q8, Q4, Q3; others NULL */
    /* sum_i a[i] * b[i] in the lane order above. */
    float (*dot)(const float *a, const float *b, int n);
    /* y[i] += a * x[i]. */
    void (*axpy)(float a, const float *x, float *y, int n);
    /* y = (w_off + w) * x / sqrt(mean(x^2) + eps); mean accumulated in double. y may alias x. */
    void (*rmsnorm)(const float *x, const float *w, float w_off, float eps, float *y, int n);
    /* y[i] = silu(g[i]) * u[i]; y may alias g or u. */
    void (*swiglu)(const float *g, const float *u, float *y, int n);
} kern_ops;

const kern_ops *kern_scalar_ops(void);
/* SIMD tables (kernels_avx2.c, kernels_avx512.c, kernels_neon.c): NULL when not compiled in or when this
 * CPU lacks the instructions. */
const kern_ops *kern_avx2_ops(void);
const kern_ops *kern_avx512_ops(void);
const kern_ops *kern_neon_ops(void);
/* Best table for this CPU: AVX-512, then AVX2+FMA, then NEON, then scalar; the environment variable
 * SLUICE_KERNELS=scalar|avx2|avx512|neon picks one (ignored if unavailable). Never NULL. */
const kern_ops *kern_default_ops(void);
/* Table by name ("scalar", "avx2", "avx512", "neon"), NULL if unavailable here. */
const kern_ops *kern_ops_by_name(const char *name);

/* y[t*ldy + r] = (W x_t)[r] for all rows of w and t < n_tok, split over rows on pool (NULL: inline).
 * Returns 0, SL_EINVAL when w has no data or a dtype the table lacks, SL_ENOMEM when the rotated copy
 * of x for a q3 matrix cannot be allocated. Not reentrant per pool. */
int kern_matmul(const kern_ops *ops, sl_pool *pool, const sl_mat *w, const float *x, size_t ldx, float *y,
                size_t ldy, int n_tok);

static inline float kern_silu(float x) { return x / (1.0f + expf(-x)); }
static inline float kern_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

#endif
