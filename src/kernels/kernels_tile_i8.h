/*
 * kernels_tile_i8.h — the tiling driver of the int8-activation matmul (kern_matmul_i8_fn, kernels.h's canonical
 * arithmetic), written once for the SIMD tables (kernels_avx2.c, kernels_avx512.c, kernels_neon_dot.c): each
 * gives its pieces, then includes this file, which owns the loops over tokens, row blocks and steps and builds
 * i8_mm_DT_Q8 / i8_mm_DT_Q4 from them (as kernels_tile.h does for the exact matmul; static inline pieces, so each
 * table still compiles to its own loops, nothing called through a pointer inside them).
 *
 * The loops: tokens in blocks of I8_KTOK, rows in blocks of I8_RB (a row block's scales converted to f32 once,
 * i8_blk), steps of 16 lanes (64 columns of q8, 128 of q4), each step in I8_PARTS vectors of 16 / I8_PARTS lanes.
 * Many tokens: per step and part, a row's codes (i8w) are read once for every token of the block and a token's
 * activations (i8x) once for every row (I8_ROWS_OUTER picks which is held while the other is read: a table with
 * few registers holds one row's codes, not the block's). One token (decode): rows one after another, each row's
 * lanes in registers over all its steps, so the row block is read front to back as one stream (the hardware
 * prefetcher follows one stream far better than I8_RB rows side by side: ~35 GB/s against ~15 on 2 threads,
 * docs/PERFORMANCE.md), with the group size a constant. The codes are prefetched I8_PFB row blocks ahead. Every
 * output's lanes take the same FMAs in the same order either way, so the result depends only on its row and token
 * (kernels.h).
 *
 * The including file defines I8_KTOK, I8_PARTS, I8_ROWS_OUTER and the types i8v (one part's 16 / I8_PARTS float
 * lanes), i8w (a row's codes and scales for one part of a step), i8x (a token's codes and block scales for one
 * part) before the #include, and these pieces (static inline, declared below) anywhere in the file:
 *   i8_zero()                                a part's lanes at zero
 *   i8_loadw(dt, q, sf, c0, p, gsh)          a row's codes q and scales sf (f32), part p of the step at column c0
 *   i8_loadx(dt, xq, d, c0, p)               a token's codes xq (a->q or a->q4) and block scales d, the same part
 *   i8_fma(dt, w, x, acc)                    acc + (float)(exact integer dot of w and x) * (scale * d), per lane
 *   i8_store(acc, a16)                       the I8_PARTS parts of an output into a16[16]
 *   i8_row_f32(m, p, r, ng, out)             row r's ng scales or biases (p) of m as f32
 *   i8_prefetch(p)                           a hint that p's line is read soon (may do nothing)
 *   i8_fin4(dt, B, w, a, r, t0, nt, acc, y, ldy)   the outputs of a whole block of I8_RB rows with no short step,
 *                                            tokens t0 .. t0+nt (the lane trees and the bias lanes); i8_fin_rows
 *                                            below is a correct one
 * Internal to src/kernels/.
 */
#ifndef SL_KERNELS_TILE_I8_H
#define SL_KERNELS_TILE_I8_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_plain.h"

#define I8_RB 4
#define I8_MAXG 2048 /* groups per row held on the stack; kern_matmul_act uses the oracle past it */
/* Prefetch distance of the codes, in row blocks. The rows of a block are separate streams (with 2048 columns a
 * block of 4 q4 rows is one 4 KiB page): without it the AVX-512 kernel read DRAM at ~40% of a plain read loop's
 * rate, with it at ~100% (docs/PERFORMANCE.md). */
#define I8_PFB 3

/* What a block of rows [r, r+nr) shares: its rows' codes and scales as f32. */
typedef struct {
    int cols, g, ng, nb, ns, gsh;
    size_t soff;
    const uint8_t *qr[I8_RB];
    float sf[I8_RB][I8_MAXG];
} i8_blk;

/* The pieces are always inlined: each table's loops are then whole, as if written out in its file (a small
 * piece left as a call could even be dropped: GCC finds a lone prefetch free of side effects). */
#define I8_PIECE static inline __attribute__((always_inline))
I8_PIECE i8v i8_zero(void);
I8_PIECE i8w i8_loadw(dt_type dt, const uint8_t *q, const float *sf, int c0, int p, int gsh);
I8_PIECE i8x i8_loadx(dt_type dt, const int8_t *xq, const float *d, int c0, int p);
I8_PIECE i8v i8_fma(dt_type dt, i8w w, i8x x, i8v acc);
I8_PIECE void i8_store(const i8v *acc, float *a16);
I8_PIECE void i8_row_f32(const tn_mat *m, const void *p, int r, int ng, float *out);
I8_PIECE void i8_prefetch(const void *p);
I8_PIECE void i8_fin4(dt_type dt, const i8_blk *B, const tn_mat *w, const kern_act *a, int r, int t0, int nt,
                      i8v (*acc)[I8_RB][I8_PARTS], float *y, size_t ldy);
#undef I8_PIECE

static inline __attribute__((always_inline)) void i8_blk_init(i8_blk *B, dt_type dt, const tn_mat *w, int r, int nr) {
    B->cols = w->cols;
    B->g = w->group;
    B->ng = B->cols / B->g;
    B->nb = B->cols / 32;
    B->ns = B->nb + B->nb / 2 + B->nb / 4;
    B->gsh = B->g == 32 ? 0 : B->g == 64 ? 1 : 2; /* block b belongs to group b >> gsh */
    B->soff = B->g == 32 ? 0 : B->g == 64 ? (size_t)B->nb : (size_t)(B->nb + B->nb / 2);
    for (int i = 0; i < I8_RB; i++) {
        int ri = r + (i < nr ? i : 0); /* missing rows of a short block repeat row r; discarded */
        B->qr[i] = (const uint8_t *)w->data + (size_t)ri * (size_t)B->cols / (dt == DT_Q4 ? 2 : 1);
        if (i < nr) i8_row_f32(w, w->scales, ri, B->ng, B->sf[i]);
        else memcpy(B->sf[i], B->sf[0], (size_t)B->ng * sizeof(float));
    }
}

/* Row i's biases as f32: computed from its scales when the matrix's are implied (tn_mat.bias_implied: the same
 * values bit for bit, never read), else read. */
static inline void i8_bias_f32(dt_type dt, const i8_blk *B, const tn_mat *w, int r, int i, float *bi) {
    if (w->bias_implied) {
        const float zb = dt == DT_Q8 ? -128.0f : -8.0f;
        for (int j = 0; j < B->ng; j++) bi[j] = zb * B->sf[i][j];
    } else
        i8_row_f32(w, w->biases, r + i, B->ng, bi);
}

static inline float i8_lanes8(const float *a) {
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* Output (row i of B, token tt) from its 16 lanes acc16: the short last step from column c0 lane by lane, the
 * bias lanes (lane j % 8, in group order) over the row's biases bi, and the final sums, in plain C (the canonical
 * order: the same bits as any table's vectors). */
static inline float i8_out(dt_type dt, const i8_blk *B, const kern_act *a, const float *bi, int i, size_t tt, int c0,
                           float *acc16) {
    const int cols = B->cols;
    plain_i8_tail(dt, B->qr[i], B->sf[i], B->g, a->q + tt * (size_t)cols, a->d + tt * (size_t)B->nb, c0, cols, acc16);
    const float *xs = a->s + tt * (size_t)B->ns + B->soff;
    float accb[8] = {0}, h[8];
    for (int j = 0; j < B->ng; j++) accb[j % 8] = fmaf(bi[j], xs[j], accb[j % 8]);
    for (int l = 0; l < 8; l++) h[l] = acc16[l] + acc16[l + 8];
    return i8_lanes8(h) + i8_lanes8(accb);
}

/* The outputs of rows [r, r+nr) x tokens [t0, t0+nt) from their lanes, steps done up to column c0, one by one. */
static inline void i8_fin_rows(dt_type dt, const i8_blk *B, const tn_mat *w, const kern_act *a, int r, int nr,
                               int t0, int nt, int c0, i8v (*acc)[I8_RB][I8_PARTS], float *y, size_t ldy) {
    for (int i = 0; i < nr; i++) {
        float bi[I8_MAXG], a16[16];
        i8_bias_f32(dt, B, w, r, i, bi);
        for (int t = 0; t < nt; t++) {
            const size_t tt = (size_t)(t0 + t);
            i8_store(acc[t][i], a16);
            y[tt * ldy + (size_t)(r + i)] = i8_out(dt, B, a, bi, i, tt, c0, a16);
        }
    }
}

/* Token tt's codes in the order dt's kernels read them (kernels.h kern_act: q4 order for q4). */
static inline const int8_t *i8_xrow(dt_type dt, const kern_act *a, size_t tt) {
    return (dt == DT_Q8 ? a->q : a->q4) + tt * (size_t)a->cols;
}

/* One token's steps up to the last whole one for rows [0, nr) of B, row after row, each row's lanes in registers
 * (gsh a constant in each caller); acc[i] receives them. Returns the first column not done. */
static inline __attribute__((always_inline)) int i8_rows_1tok(dt_type dt, const i8_blk *B, const kern_act *a,
                                                                size_t tt, int nr, size_t pf, i8v (*acc)[I8_PARTS],
                                                                const int gsh) {
    const int step = dt == DT_Q8 ? 64 : 128, last = B->cols / step * step;
    const int8_t *xq = i8_xrow(dt, a, tt);
    const float *d = a->d + tt * (size_t)B->nb;
#pragma GCC unroll 1
    for (int i = 0; i < nr; i++) {
        const uint8_t *q = B->qr[i];
        const float *sf = B->sf[i];
        i8v ac[I8_PARTS];
#pragma GCC unroll 4
        for (int p = 0; p < I8_PARTS; p++) ac[p] = i8_zero();
        for (int c = 0; c < last; c += step) {
            i8_prefetch(q + (dt == DT_Q8 ? c : c / 2) + pf); /* one 64-byte line per step */
#pragma GCC unroll 4
            for (int p = 0; p < I8_PARTS; p++)
                ac[p] = i8_fma(dt, i8_loadw(dt, q, sf, c, p, gsh), i8_loadx(dt, xq, d, c, p), ac[p]);
        }
#pragma GCC unroll 4
        for (int p = 0; p < I8_PARTS; p++) acc[i][p] = ac[p];
    }
    return last;
}

/* Part p of the step at c0 for rows 0 .. I8_RB-1 of B and nt tokens from t0. */
static inline __attribute__((always_inline)) void i8_step_part(dt_type dt, const i8_blk *B, const kern_act *a,
                                                                 int t0, int nt, int c0, int p,
                                                                 i8v (*acc)[I8_RB][I8_PARTS]) {
    if (I8_ROWS_OUTER) { /* the tokens' activations once, then one row's codes at a time against all of them */
        i8x X[I8_KTOK];
        for (int t = 0; t < nt; t++) {
            const size_t tt = (size_t)(t0 + t);
            X[t] = i8_loadx(dt, i8_xrow(dt, a, tt), a->d + tt * (size_t)B->nb, c0, p);
        }
        for (int i = 0; i < I8_RB; i++) {
            const i8w W = i8_loadw(dt, B->qr[i], B->sf[i], c0, p, B->gsh);
            for (int t = 0; t < nt; t++) acc[t][i][p] = i8_fma(dt, W, X[t], acc[t][i][p]);
        }
    } else { /* the block's codes once, then each token's activations against them */
        i8w W[I8_RB];
#pragma GCC unroll 4
        for (int i = 0; i < I8_RB; i++) W[i] = i8_loadw(dt, B->qr[i], B->sf[i], c0, p, B->gsh);
        for (int t = 0; t < nt; t++) {
            const size_t tt = (size_t)(t0 + t);
            const i8x X = i8_loadx(dt, i8_xrow(dt, a, tt), a->d + tt * (size_t)B->nb, c0, p);
#pragma GCC unroll 4
            for (int i = 0; i < I8_RB; i++) acc[t][i][p] = i8_fma(dt, W[i], X, acc[t][i][p]);
        }
    }
}

/* Rows [r, r+nr) (nr <= I8_RB) x tokens [t0, t0+nt) (nt <= I8_KTOK). */
static inline __attribute__((always_inline)) void i8_block(dt_type dt, const tn_mat *w, const kern_act *a, float *y,
                                                             size_t ldy, int r, int nr, int t0, int nt) {
    i8_blk B;
    i8_blk_init(&B, dt, w, r, nr);
    const int cols = B.cols, step = dt == DT_Q8 ? 64 : 128;
    /* Only the codes are prefetched. The kernels this driver replaced also asked for the next blocks' scales and
     * biases, through a plain static inline function holding only _mm_prefetch, which GCC found free of side
     * effects and dropped, so they never ran; run, they cost 4-6% on a cache-resident one-token q4 matrix (AVX-512,
     * [1024 x 4096]). Whether they pay from DRAM is to be measured on a quiet machine. */
    i8v acc[I8_KTOK][I8_RB][I8_PARTS];
    for (int t = 0; t < nt; t++)
#pragma GCC unroll 4
        for (int i = 0; i < I8_RB; i++)
#pragma GCC unroll 4
            for (int p = 0; p < I8_PARTS; p++) acc[t][i][p] = i8_zero();
    /* the same place I8_PFB row blocks further on (rows are contiguous, a block is I8_RB rows) */
    const size_t pf = (size_t)I8_PFB * I8_RB * (size_t)cols / (dt == DT_Q4 ? 2 : 1);
    int c0 = 0;
    if (nt == 1) /* then the loop below has nothing left */
        c0 = B.gsh == 0   ? i8_rows_1tok(dt, &B, a, (size_t)t0, nr, pf, acc[0], 0)
             : B.gsh == 1 ? i8_rows_1tok(dt, &B, a, (size_t)t0, nr, pf, acc[0], 1)
                          : i8_rows_1tok(dt, &B, a, (size_t)t0, nr, pf, acc[0], 2);
    for (; c0 + step <= cols; c0 += step) {
        for (int i = 0; i < I8_RB; i++) i8_prefetch(B.qr[i] + (dt == DT_Q8 ? c0 : c0 / 2) + pf);
#pragma GCC unroll 4
        for (int p = 0; p < I8_PARTS; p++) i8_step_part(dt, &B, a, t0, nt, c0, p, acc);
    }
    if (c0 == cols && nr == I8_RB) i8_fin4(dt, &B, w, a, r, t0, nt, acc, y, ldy);
    else i8_fin_rows(dt, &B, w, a, r, nr, t0, nt, c0, acc, y, ldy);
}

/* One kern_matmul_i8_fn per weight type: token blocks of row blocks of i8_block. A token block's row loop is a
 * function of its own (noinline: i8_block's ~37 KB frame is not held by the caller;
 * wide_q4_kernel_on_a_small_stack runs on 64 KiB), i8_block inlined in it, with nt == 1 a constant in its decode
 * copy. */
#define I8_MM_FN(DT)                                                                                          \
    static __attribute__((noinline, unused)) void i8_rows_##DT(const tn_mat *w, const kern_act *a, float *y,   \
                                                               size_t ldy, int r0, int r1, int t0, int nt) {  \
        for (int r = r0; r < r1; r += I8_RB) {                                                                \
            const int nr = r1 - r < I8_RB ? r1 - r : I8_RB;                                                   \
            if (nt == 1) i8_block(DT, w, a, y, ldy, r, nr, t0, 1);                                            \
            else i8_block(DT, w, a, y, ldy, r, nr, t0, nt);                                                   \
        }                                                                                                     \
    }                                                                                                         \
    static __attribute__((unused)) void i8_mm_##DT(const tn_mat *w, const kern_act *a, float *y, size_t ldy,  \
                                                   int r0, int r1) {                                          \
        for (int t0 = 0; t0 < a->n_tok; t0 += I8_KTOK)                                                        \
            i8_rows_##DT(w, a, y, ldy, r0, r1, t0, a->n_tok - t0 < I8_KTOK ? a->n_tok - t0 : I8_KTOK);        \
    }
I8_MM_FN(DT_Q8)
I8_MM_FN(DT_Q4)
#undef I8_MM_FN

#endif
