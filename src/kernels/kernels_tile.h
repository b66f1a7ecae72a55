/*
 * kernels_tile.h — the tiling driver of the exact matmul (kern_matmul_fn), written once for every table: each
 * kernels_<isa>.c defines its pieces, then includes this file, which builds that table's six matmul kernels from
 * them (ggml-cpu's type traits, resolved at compile time so that each table still has one loop the compiler sees
 * whole: the pieces are static inline, so nothing is called through a pointer in the inner loops).
 *
 * The loops (kernels.h's determinism contract): tokens in blocks of TILE_KTOK, rows in blocks of TILE_RB,
 * columns in chunks of TILE_KCHUNK converted to f32 once per (row block, chunk) and reused by every token of the
 * block, so a weight row is read once per TILE_KTOK tokens. Each y[t][r] keeps one lane accumulator (tile_acc)
 * across all chunks, so its value depends only on the column count, never on n_tok, the row range or the thread
 * split. Missing rows of a short block repeat row r; their sums are discarded.
 *
 * The including file defines the type tile_acc before the #include and the pieces (static inline, declared
 * here) anywhere in the file:
 *   tile_acc                                   one output's lane accumulator (8 or 16 lanes, lane = column % lanes)
 *   tile_acc tile_zero(void)                   an accumulator of zeros
 *   const float *tile_load(dt, m, r, c0, nc, buf)   [nc] f32 weights of row r from column c0: a pointer into m
 *                                              (f32), else dequantised into buf [TILE_KCHUNK]
 *   void tile_dot4(wr, x, n, acc)              acc[i] += wr[i][c] * x[c] for the TILE_RB rows wr, c < n, in its
 *                                              lanes (a chunk starts at a multiple of the lane count)
 *   float tile_sum(tile_acc)                   the lanes' sum in the table's fixed tree
 *   int tile_one_token(dt, w, x, y, r0, r1)    1 when the table computed one token's rows [r0, r1) itself (its
 *                                              own row-streaming loop, the same bits), 0 to use the loops here
 * and gets tile_mm_f32 .. tile_mm_q3 and TILE_MATMUL, the kern_ops.matmul initializer.
 * Internal to src/kernels/.
 */
#ifndef SL_KERNELS_TILE_H
#define SL_KERNELS_TILE_H

#include <stddef.h>

#include "kernels/kernels.h"
#include "quant/kquant.h"

#define TILE_KCHUNK 256
#define TILE_KTOK 32
#define TILE_RB 4

/* The pieces are always inlined: each table's loops are then whole, as if written out in its file. */
#define TILE_PIECE static inline __attribute__((always_inline))
TILE_PIECE tile_acc tile_zero(void);
TILE_PIECE const float *tile_load(dt_type dt, const tn_mat *m, int r, int c0, int nc, float *buf);
TILE_PIECE void tile_dot4(const float *const *wr, const float *x, int n, tile_acc *acc);
TILE_PIECE float tile_sum(tile_acc v);
TILE_PIECE int tile_one_token(dt_type dt, const tn_mat *w, const float *x, float *y, int r0, int r1);
#undef TILE_PIECE

/* A GGUF block type's [nc] values from column c0 (whole blocks: c0 a multiple of TILE_KCHUNK, which every block
 * length divides), dequantised by the oracle (quant/kquant.c), so every table multiplies the same f32 weights. */
static inline const float *tile_kq_load(dt_type dt, const tn_mat *m, int r, int c0, int nc, float *buf) {
    const uint8_t *row = (const uint8_t *)m->data + (size_t)r * kq_row_bytes(dt, m->cols);
    kq_row_to_f32(dt, row + (size_t)(c0 / kq_blk(dt)) * (size_t)kq_bytes(dt), nc, buf);
    return buf;
}

static inline __attribute__((always_inline)) void tile_mm(dt_type dt, const tn_mat *w, const float *x, size_t ldx,
                                                            float *y, size_t ldy, int n_tok, int r0, int r1) {
    if (n_tok == 1 && tile_one_token(dt, w, x, y, r0, r1)) return;
    const int cols = w->cols;
    float buf[TILE_RB][TILE_KCHUNK];
    tile_acc acc[TILE_KTOK][TILE_RB];
    for (int t0 = 0; t0 < n_tok; t0 += TILE_KTOK) {
        const int nt = n_tok - t0 < TILE_KTOK ? n_tok - t0 : TILE_KTOK;
        for (int r = r0; r < r1; r += TILE_RB) {
            const int nr = r1 - r < TILE_RB ? r1 - r : TILE_RB;
            for (int t = 0; t < nt; t++)
                for (int i = 0; i < TILE_RB; i++) acc[t][i] = tile_zero();
            for (int c0 = 0; c0 < cols; c0 += TILE_KCHUNK) {
                const int nc = cols - c0 < TILE_KCHUNK ? cols - c0 : TILE_KCHUNK;
                const float *wr[TILE_RB];
                for (int i = 0; i < TILE_RB; i++)
                    wr[i] = i >= nr ? wr[0] : kq_is(dt) ? tile_kq_load(dt, w, r + i, c0, nc, buf[i])
                                                        : tile_load(dt, w, r + i, c0, nc, buf[i]);
                for (int t = 0; t < nt; t++) tile_dot4(wr, x + (size_t)(t0 + t) * ldx + c0, nc, acc[t]);
            }
            for (int t = 0; t < nt; t++)
                for (int i = 0; i < nr; i++) y[(size_t)(t0 + t) * ldy + (size_t)(r + i)] = tile_sum(acc[t][i]);
        }
    }
}

/* One kern_matmul_fn per weight type: the driver above with its dtype a constant. */
#define TILE_MM_FN(DT)                                                                                             \
    static void tile_mm_##DT(const tn_mat *w, const float *x, size_t ldx, float *y, size_t ldy, int n_tok, int r0, \
                             int r1) {                                                                             \
        tile_mm(DT, w, x, ldx, y, ldy, n_tok, r0, r1);                                                             \
    }
TILE_MM_FN(DT_F32)
TILE_MM_FN(DT_F16)
TILE_MM_FN(DT_BF16)
TILE_MM_FN(DT_Q8)
TILE_MM_FN(DT_Q4)
TILE_MM_FN(DT_Q3)
TILE_MM_FN(DT_Q2_K)
TILE_MM_FN(DT_Q3_K)
TILE_MM_FN(DT_Q4_K)
TILE_MM_FN(DT_Q5_K)
TILE_MM_FN(DT_Q6_K)
TILE_MM_FN(DT_IQ4_NL)
TILE_MM_FN(DT_IQ4_XS)
TILE_MM_FN(DT_IQ2_XXS)
TILE_MM_FN(DT_IQ2_XS)
TILE_MM_FN(DT_IQ2_S)
TILE_MM_FN(DT_IQ3_XXS)
TILE_MM_FN(DT_IQ3_S)
TILE_MM_FN(DT_IQ1_S)
TILE_MM_FN(DT_IQ1_M)
TILE_MM_FN(DT_Q2)
TILE_MM_FN(DT_Q2V)
TILE_MM_FN(DT_Q5_0)
TILE_MM_FN(DT_Q5_1)
#undef TILE_MM_FN

/* kern_ops.matmul of a table built on this driver. */
#define TILE_MATMUL                                                                                              \
    {                                                                                                            \
        [DT_F32] = tile_mm_DT_F32, [DT_F16] = tile_mm_DT_F16, [DT_BF16] = tile_mm_DT_BF16, [DT_Q8] = tile_mm_DT_Q8, \
        [DT_Q4] = tile_mm_DT_Q4, [DT_Q3] = tile_mm_DT_Q3, [DT_Q2_K] = tile_mm_DT_Q2_K, [DT_Q3_K] = tile_mm_DT_Q3_K,   \
        [DT_Q4_K] = tile_mm_DT_Q4_K, [DT_Q5_K] = tile_mm_DT_Q5_K, [DT_Q6_K] = tile_mm_DT_Q6_K,                       \
        [DT_IQ4_NL] = tile_mm_DT_IQ4_NL, [DT_IQ4_XS] = tile_mm_DT_IQ4_XS, [DT_IQ2_XXS] = tile_mm_DT_IQ2_XXS,          \
        [DT_IQ2_XS] = tile_mm_DT_IQ2_XS, [DT_IQ2_S] = tile_mm_DT_IQ2_S, [DT_IQ3_XXS] = tile_mm_DT_IQ3_XXS,           \
        [DT_IQ3_S] = tile_mm_DT_IQ3_S, [DT_IQ1_S] = tile_mm_DT_IQ1_S, [DT_IQ1_M] = tile_mm_DT_IQ1_M, [DT_Q2] = tile_mm_DT_Q2,         \
        [DT_Q2V] = tile_mm_DT_Q2V, [DT_Q5_0] = tile_mm_DT_Q5_0, [DT_Q5_1] = tile_mm_DT_Q5_1                        \
    }

#endif
