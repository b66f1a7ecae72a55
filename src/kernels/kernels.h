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
 *
 * Two paths for q8/q4 matrices: kern_matmul (exact: f32 activations, the dequantized weights' product)
 * and kern_matmul_act (the default in a model: activations quantized to int8 per 32 values once, kern_act,
 * and dotted with the codes, llama.cpp's arithmetic; every table equals the oracle bitwise there).
 * docs/QUANT.md describes both and their accuracy.
 */
#ifndef SL_KERNELS_H
#define SL_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice.h"
#include "util/tensor.h"
#include "util/dtype.h"
#include "util/threadpool.h"
#include "quant/kquant.h"

/* w: [rows][cols] of the entry's dtype (quantized: codes, scales, biases as in quant/quant.h);
 * x: n_tok rows of stride ldx (floats), each [cols]; y: n_tok rows of stride ldy;
 * writes y[t*ldy + r] = sum_c w[r][c] * x[t*ldx + c] for r in [r0, r1).
 * DT_Q3 entries receive x already rotated (q3_rotate; kern_matmul does it) and use the stored
 * rotated weights scale * Q3_LEVELS[code] directly; DT_Q2 entries likewise (q2_rotate). */
typedef void (*kern_matmul_fn)(const tn_mat *w, const float *x, size_t ldx, float *y, size_t ldy, int n_tok,
                               int r0, int r1);

/* An activation matrix x [n_tok][cols] (row stride ldx) and its int8 form, made once (on first use by a
 * q8/q4 matrix) and reused by every matrix that reads x: q/k/v, gate and up, the router and all experts
 * of a token. Per token and block of 32 columns b (docs/QUANT.md, as llama.cpp's quantize_row_q8_0):
 *   d_b = max|x| / 127, q_c = round-to-nearest-even(x_c / d_b) in [-127, 127] (0 when d_b = 0),
 *   s32_b = d_b * (float)sum_b(q), and s64_j = s32_2j + s32_2j+1, s128_j = s64_2j + s64_2j+1 (when
 * those groups divide cols). The int8 form lives in caller storage of kern_act_bytes(n_tok, cols). */
typedef struct kern_act {
    const float *x;
    size_t ldx;
    int n_tok, cols;
    int int8;       /* 1: q8/q4 matrices use the int8-activation kernels; 0: the exact f32 ones */
    int ready;      /* the int8 form below is filled */
    int8_t *q;      /* [n_tok][cols] codes, column order */
    int8_t *q4;     /* [n_tok][cols] the same codes in q4 order: each 128 columns as their 64 even columns
                       then their 64 odd ones (a shorter last step of m columns as m/2 + m/2), so the low and
                       high nibbles of 64 bytes of q4 codes dot with contiguous bytes */
    float *d;       /* [n_tok][nb] block scales, nb = cols / 32 */
    float *s;       /* [n_tok][ns] s32[nb], s64[nb/2], s128[nb/4]; ns = nb + nb/2 + nb/4 */
    /* The k-quants' form (quant/kquant.h kq_act_k: every GGUF block type but IQ4_NL), llama.cpp's q8_K
     * (ggml-quants.c quantize_row_q8_K_ref), made on first use by such a matrix when cols % 256 == 0: per token
     * and block of 256 columns, max the first value of the largest |x|, iscale = -127 / max,
     * q_c = min(127, round-to-nearest-even(iscale * x_c)), d = 1 / iscale (q and d 0 when max is 0). */
    int ready_k;    /* qk, dk below are filled */
    int8_t *qk;     /* [n_tok][cols] q8_K codes, column order */
    float *dk;      /* [n_tok][nb] the d of each block of 256, once for each of its 8 blocks of 32 */
    int16_t *bk;    /* [n_tok][cols / 16] the sum of each 16 codes of qk (llama.cpp's block_q8_K bsums): the
                       SIMD kernels' mins and offsets (kquant_x86.h), exact integers */
    /* IQ4_NL's form, llama.cpp's q8_0 as its x86 build makes it (ggml-cpu arch/x86/quants.c quantize_row_q8_0),
     * made on first use by such a matrix: per block of 32, d = max|x| / 127 rounded to f16 (the block's stored
     * scale), q_c = round-to-nearest-even(x_c * (127 / max|x|)) (0 when max is 0). */
    int ready_0;    /* q0, d0, q04, s0, s1 below are filled */
    int8_t *q0;     /* [n_tok][cols] */
    float *d0;      /* [n_tok][nb] d as the f16 value */
    /* with it, for the q8/q4 matrices of a GGUF Q8_0 .. Q5_1 tensor (tn_mat.act), read as q, q4, d, s are by the house
     * form's kernels: the same codes in q4 order, and the sums s32, s64, s128 (as s) of either form:
     * s0 = d0 * (float)sum(q) (q8_0: llama.cpp uses no sum, this is the house kernels' bias term on its values),
     * s1 = the f16 value of (max|x| / 127) * (float)sum(q) (llama.cpp's block_q8_1 s, ggml-cpu arch/x86/quants.c
     * quantize_row_q8_1) */
    int8_t *q04;    /* [n_tok][cols] */
    float *s0, *s1; /* [n_tok][ns] each */
    void *buf;      /* the caller's storage */
    /* q2's form (quant/quant.h q2_rotate), made on first use by a q2 matrix when cols % 128 == 0: per token the
     * rotated row v = q2_rotate(x), then per block of 32 of v, max = max|v|, d = max / 127,
     * q_c = round-to-nearest-even(v_c * (127 / max)) (q and d 0 when max is 0). Every q2 matrix reads the same. */
    int ready_r;    /* qr, dr below are filled */
    int8_t *qr;     /* [n_tok][cols] */
    float *dr;      /* [n_tok][nb] */
} kern_act;

/* Entries per token of kern_act's s, s0, s1 (s32, s64, s128) for nb blocks of 32. */
static inline int kern_act_ns(int nb) { return nb + nb / 2 + nb / 4; }

/* The int8 form a block type's kernel reads (quant/kquant.h): q2's rotated one, q8_K, or q8_0 (IQ4_NL, Q5_0, Q5_1). */
static inline const int8_t *kq_act_q(const kern_act *a, dt_type dt) {
    return kq_rotated(dt) ? a->qr : kq_act_k(dt) ? a->qk : a->q0;
}
static inline const float *kq_act_d(const kern_act *a, dt_type dt) {
    return kq_rotated(dt) ? a->dr : kq_act_k(dt) ? a->dk : a->d0;
}

/* The int8-activation matmul of a q8/q4 matrix: y[t*ldy + r] for r in [r0, r1), t < a->n_tok, a ready.
 * Canonical arithmetic, which every table reproduces bitwise (integer sums are exact; the float part is
 * this order, with fused multiply-adds): per output, 16 float lanes acc[] and 8 lanes accb[], zero;
 * a lane holds P consecutive columns (P = 4 for q8, 8 for q4), 16 lanes a step of 16P columns (a last
 * step may be short: fewer lanes). For each step in order and each lane l, with c its first column and b
 * = c / 32 its block, I = sum_{i<P} w_q[c+i] * q[c+i] (exact int), sd = scale(group of c) * d_b,
 *   acc[l] = fma((float)I, sd, acc[l]);
 * then for each group j in order: accb[j%8] = fma(bias_j, s<group>_j, accb[j%8]);
 * y = lanes(h) + lanes(accb), h[i] = acc[i] + acc[i+8], lanes(a) = ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)).
 * So a result depends only on its own row and token: thread split, batching and streaming never change it.
 * A GGUF block type's (kquant_i8.c: its own canonical arithmetic) reads the q8_K form qk / dk (a->ready_k) when
 * kq_act_k(dtype), else (IQ4_NL, Q5_0, Q5_1) the q8_0 form q0 / d0 (Q5_1 also s1; a->ready_0); q2 the rotated form
 * qr / dr (a->ready_r). A q8/q4 matrix with tn_mat.act set gets the
 * same kernel over a's llama.cpp form (q0, q04, d0, and s0 or s1 in place of q, q4, d, s): the same arithmetic on
 * other codes, so every table still equals the oracle bitwise. */
typedef void (*kern_matmul_i8_fn)(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1);
/* matmul_i8 entries of every GGUF block type (quant/kquant.h kq_is) set to fn */
#define KQ_I8_ENTRIES(fn)                                                                                          \
    [DT_Q2_K] = fn, [DT_Q3_K] = fn, [DT_Q4_K] = fn, [DT_Q5_K] = fn, [DT_Q6_K] = fn, [DT_IQ4_NL] = fn, [DT_IQ4_XS] = fn, \
    [DT_IQ2_XXS] = fn, [DT_IQ2_XS] = fn, [DT_IQ2_S] = fn, [DT_IQ3_XXS] = fn, [DT_IQ3_S] = fn, [DT_IQ1_S] = fn,        \
    [DT_IQ1_M] = fn, [DT_Q2] = fn, [DT_Q2V] = fn, [DT_Q5_0] = fn, [DT_Q5_1] = fn

typedef struct kern_ops {
    const char *name;
    kern_matmul_fn matmul[DT_COUNT]; /* indexed by dt_type: F32, F16, BF16, Q8, Q4, Q3, the GGUF block types */
    kern_matmul_i8_fn matmul_i8[DT_COUNT]; /* Q8, Q4, the GGUF block types; NULL: the scalar oracle's (same bits) */
    /* sum_i a[i] * b[i] in the lane order above. */
    float (*dot)(const float *a, const float *b, int n);
    /* y[i] += a * x[i]. */
    void (*axpy)(float a, const float *x, float *y, int n);
    /* y[i] += a[p] * x[p*ldx + i] for p = 0 .. n-1 in turn, i < d: bitwise n axpy calls (attention's softmax
     * times V), y held in registers across the rows. NULL: kern_axpy_rows loops over axpy. */
    void (*axpy_rows)(const float *a, int n, const float *x, size_t ldx, float *y, int d);
    /* out[p] = dot(q, x + p*ldx, d) for p < n, bitwise this table's dot (attention's scores, several keys
     * at once). NULL: kern_dot_rows loops over dot. */
    void (*dot_rows)(const float *q, const float *x, size_t ldx, int n, int d, float *out);
    /* dot_rows of nq queries (q + i*ldq) against the same rows: out[i*ldo + p] = dot(q + i*ldq, x + p*ldx, d), bitwise
     * this table's dot (a KV head's query heads at once, each row loaded once for several). NULL: kern_dot_rows_q
     * loops over dot_rows. */
    void (*dot_rows_q)(const float *q, size_t ldq, int nq, const float *x, size_t ldx, int n, int d, float *out,
                       size_t ldo);
    /* dot_rows_q over keys stored transposed: out[i*ldo + p] = dot(q + i*ldq, key p) for i < nq, p < n, where key p's
     * column c is xt[c*ldt + p] (a prefill's key tile, transposed once for many queries), bitwise this table's dot.
     * NULL: none (the caller keeps the rows and calls dot_rows_q). */
    void (*dot_cols_q)(const float *q, size_t ldq, int nq, const float *xt, size_t ldt, int n, int d, float *out,
                       size_t ldo);
    /* xt[c*ldt + p] = x[p*ldx + c] for p < n, c < d (dot_cols_q's keys from a tile of rows). NULL: kern_transpose's
     * loop. */
    void (*transpose)(const float *x, size_t ldx, int n, int d, float *xt, size_t ldt);
    /* axpy_rows of nq weight rows (a + i*lda) over the same rows of x into y + i*ldy, each bitwise n axpy calls in
     * order. NULL: kern_axpy_rows_q loops over axpy_rows. */
    void (*axpy_rows_q)(const float *a, size_t lda, int nq, int n, const float *x, size_t ldx, float *y, size_t ldy,
                        int d);
    /* One token's int8 form (kern_act's definitions, bitwise the scalar table's): x [cols] (cols % 32 == 0)
     * into q, q4 [cols], d [cols/32], s [ns]. NULL: the scalar table's. kern_act_prepare uses the default
     * table's. */
    void (*act_row)(const float *x, int cols, int8_t *q, int8_t *q4, float *d, float *s);
    /* One token's llama.cpp q8_0 / q8_1 form (kern_act q0, d0, q04, s0, s1; cols % 32 == 0), bitwise the scalar
     * table's. NULL: the scalar table's. kern_act's preparation uses the default table's. */
    void (*act_row_0)(const float *x, int cols, int8_t *q, float *d, int8_t *q4, float *s0, float *s1);
    /* n KV cache heads of hd values (quant/kv.h), head i at src + i * ld bytes, into dst + i * ldd floats: bitwise
     * kv_decode_heads (its conversions are exact). NULL: kv_decode_heads. */
    void (*kv_decode)(sl_kv_type t, const void *src, size_t ld, int n, int hd, float *dst, size_t ldd);
    /* Attention's softmax of nr rows of n scores in place, row r at sc + r * ld: bitwise kern_softmax_row on each
     * (sinks: NULL, or one extra logit per row). NULL: kern_softmax_row per row. */
    void (*softmax_rows)(float *sc, size_t ld, int nr, int n, float scale, const float *sinks);
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
/* The NEON table's int8-activation kernels with Armv8.2's SDOT (kernels_neon_dot.c; AArch64 builds only, used
 * when the CPU has the dot product). */
void kern_neon_dot_q8(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1);
void kern_neon_dot_q4(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1);
/* The int8-activation matmul of the GGUF block types (DT_Q2_K .. DT_IQ4_XS, quant/kquant.h), the scalar oracle of
 * kquant_i8.c (its canonical arithmetic there); any table without its own uses it. */
void kern_kq_i8(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1);
/* kern_kq_i8's loop with other functions for a block's unpacking and integer sums (quant/kquant.h kq_unpack's and
 * kq_sums' contracts: the same integers), kquant_neon.c's. */
struct kq_unpacked;
typedef void (*kq_unpack_fn)(dt_type dt, const uint8_t *blk, struct kq_unpacked *u);
typedef void (*kq_sums_fn)(const struct kq_unpacked *u, const int8_t *q, int32_t *isum, int32_t *msum);
void kern_kq_i8_rows(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1, kq_unpack_fn unpack,
                     kq_sums_fn sums);
/* The NEON table's (kquant_neon.c: the integer sums with NEON widening multiplies; AArch64 only). */
void kern_kq_i8_neon(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1);
/* The same with AVX2 integer dots (kquant_avx2.c, kquant_avx512.c: kquant_x86.h): bitwise kern_kq_i8. */
void kern_kq_i8_avx2(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1);
void kern_kq_i8_avx512(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1);
/* Best table for this CPU: AVX-512, then AVX2+FMA, then NEON, then scalar; the environment variable
 * SLUICE_KERNELS=scalar|avx2|avx512|neon picks one (ignored if unavailable). Never NULL. */
const kern_ops *kern_default_ops(void);
/* Table by name ("scalar", "avx2", "avx512", "neon"), NULL if unavailable here. */
const kern_ops *kern_ops_by_name(const char *name);

/* y[t*ldy + r] = (W x_t)[r] for all rows of w and t < n_tok, split over rows on pool (NULL: inline).
 * Returns 0, SL_EINVAL when w has no data or a dtype the table lacks, SL_ENOMEM when the rotated copy
 * of x for a q3 matrix cannot be allocated. Not reentrant per pool. */
int kern_matmul(const kern_ops *ops, pool_t *pool, const tn_mat *w, const float *x, size_t ldx, float *y,
                size_t ldy, int n_tok);

/* kern_act's pair and quad sums s64, s128 from the block sums s32 (s[0 .. nb)) and the q4 order of the codes q
 * (kernels.h kern_act), for act_row implementations. */
void kern_act_sums_q4(int cols, const int8_t *q, int8_t *q4, float *s);

/* Bytes of storage a kern_act of n_tok x cols needs. */
size_t kern_act_bytes(int n_tok, int cols);
/* Describes x for kern_matmul_act; buf: kern_act_bytes(n_tok, cols) bytes (unused unless int8 and a q8/q4
 * matrix reads it; may be NULL when int8 is 0). Nothing is computed until a matrix needs it. */
void kern_act_init(kern_act *a, void *buf, const float *x, size_t ldx, int n_tok, int cols, int int8);
/* Fills a's int8 form if a->int8 and it is not yet filled (idempotent; cols % 32 == 0 required, else
 * a->int8 is cleared and the exact kernels are used). */
void kern_act_prepare(kern_act *a);
/* Fills a's q8_K form (qk, dk) if a->int8 and cols % 256 == 0, its q8_0 form (q0, d0), and its q2 form (qr, dr)
 * if cols % 128 == 0, if not yet done;
 * kern_matmul_act and the other entry points do it for the matrices that read them, a direct caller of a GGUF
 * block type's int8 kernel must. */
void kern_act_prepare_kq(kern_act *a);
/* Fills token t's rows of a's int8 form (a->int8, t < a->n_tok), bitwise what kern_act_prepare writes there,
 * for callers that fill the rows in parallel (disjoint t: thread-safe); they set a->ready once every row is
 * filled. Cannot fail. */
void kern_act_prepare_row(kern_act *a, int t);
/* dst := rows idx[0..n) of src (prepared first), over x_rows ([n][src->cols], the same rows of src->x as
 * floats, row stride cols); buf as for kern_act_init. Bitwise what preparing x_rows would give. */
void kern_act_gather(kern_act *dst, void *buf, kern_act *src, const int *idx, int n, const float *x_rows);
/* y = W x over a's tokens: the int8-activation kernels for q8/q4 when a->int8, else kern_matmul. */
int kern_matmul_act(const kern_ops *ops, pool_t *pool, const tn_mat *w, kern_act *a, float *y, size_t ldy);

/* One matrix of kern_matmul_multi: y = W x over a's tokens. */
typedef struct kern_mm {
    const tn_mat *w;
    kern_act *a;
    float *y;
    size_t ldy;
} kern_mm;
/* kern_matmul_act of n matrices in one parallel-for over all their rows (q/k/v, gate and up, every expert
 * of a decode step, the downs of a prefill's experts: each matrix over its own act, token counts may differ):
 * one thread hand-off instead of n, the same result bitwise (each output row is computed by the same kernel call
 * whatever the split). More than 256 matrices: one by one. Returns 0 or the first failing matrix's status. */
int kern_matmul_multi(const kern_ops *ops, pool_t *pool, const kern_mm *mm, int n);
/* One token's gate and up products of n experts with their SwiGLU, in one parallel-for (a decode step's
 * experts; cpu_moe.c): g[i], u[i] the gate and up of expert i over the same one-token act, their outputs rows
 * i of [n][inter] floats; mid describes those gate rows, [n][inter] (x = g[0].y), and receives silu(gate) * up
 * in place of the gate's products and, when mid->int8, its int8 form (then ready). An item is 128 rows of one
 * expert: both products, the SwiGLU of those 128 values and their slice of the int8 form, so the exp work
 * runs among the weights' reads and no hand-off waits for it. Or, n = 1, one expert over a T-token act (a
 * prefill's expert): outputs [T][inter] (ldy = inter), mid [T][inter]; an item is then 128 rows for all T
 * tokens, one hand-off where the products, the SwiGLU and the int8 form took three. Or, generally, expert i
 * over its own T_i-token act (g[i].a == u[i].a; a layer's experts of a prefill, cpu_experts.c): its outputs rows
 * R_i .. R_i + T_i of [sum T][inter] (R_i = T_0 + .. + T_{i-1}; ldy = inter), mid [sum T][inter]; items (expert,
 * 128 rows) for all its tokens. At most 256 experts. Bitwise kern_matmul_multi
 * of the 2n matrices, ops->swiglu of each row and kern_act_prepare_row. SL_EUNSUPPORTED (nothing done) unless
 * every matrix takes the int8 kernels (kern_matmul_act) and the layout is as said. */
int kern_swiglu_multi(const kern_ops *ops, pool_t *pool, const kern_mm *g, const kern_mm *u, int n, kern_act *mid);
/* Columns c0 .. c1 of token t's int8 form of a (a->int8; c0 a multiple of 128, c1 one too or a->cols), bitwise
 * what kern_act_prepare writes there; disjoint slices may be filled by several threads at once. */
void kern_act_prepare_cols(kern_act *a, int t, int c0, int c1);
/* dst := token t of src (prepared first) as a one-token act, sharing src's storage. */
void kern_act_row(kern_act *dst, kern_act *src, int t);
/* dst := tokens t .. t + n of src as an n-token act, sharing src's storage and its ready flags as they are now
 * (prepare src first for the forms its readers need: kern_act_prepare_for). */
void kern_act_rows(kern_act *dst, kern_act *src, int t, int n);
/* Fills the int8 form w's kernel reads of a (as kern_matmul_act would before multiplying), the tokens split over
 * pool; nothing when w takes the exact kernels on a or the form is ready. Cannot fail. */
void kern_act_prepare_for(kern_act *a, const tn_mat *w, pool_t *pool);
/* Tokens t0 .. t1 of that form (nothing where w takes the exact kernels on a), bitwise what kern_act_prepare_for
 * writes there, for callers that fill the rows in parallel (disjoint ranges: thread-safe); once every row is
 * filled, kern_act_ready_for(a, w) marks the form ready. Cannot fail. */
void kern_act_prepare_rows_for(kern_act *a, const tn_mat *w, int t0, int t1);
void kern_act_ready_for(kern_act *a, const tn_mat *w);

/* ops->axpy_rows, or the axpy calls it stands for. */
static inline void kern_axpy_rows(const kern_ops *ops, const float *a, int n, const float *x, size_t ldx, float *y,
                                  int d) {
    if (ops->axpy_rows) ops->axpy_rows(a, n, x, ldx, y, d);
    else
        for (int p = 0; p < n; p++) ops->axpy(a[p], x + (size_t)p * ldx, y, d);
}

/* One row of attention's softmax, the oracle (kernels_scalar.c): sc[p] *= scale and their max m (sink, when not
 * NULL, is one more logit: m starts at it); sc[p] = expf(sc[p] - m); sum = expf(*sink - m) (or 0) + each sc[p] in
 * increasing p, in double; sc[p] /= (float)sum. */
void kern_softmax_row(float *sc, int n, float scale, const float *sink);

/* ops->softmax_rows, or the kern_softmax_row calls it stands for. */
static inline void kern_softmax_rows(const kern_ops *ops, float *sc, size_t ld, int nr, int n, float scale,
                                     const float *sinks) {
    if (ops->softmax_rows) ops->softmax_rows(sc, ld, nr, n, scale, sinks);
    else
        for (int r = 0; r < nr; r++) kern_softmax_row(sc + (size_t)r * ld, n, scale, sinks ? sinks + r : NULL);
}

/* ops->dot_rows, or the dot calls it stands for. */
static inline void kern_dot_rows(const kern_ops *ops, const float *q, const float *x, size_t ldx, int n, int d,
                                 float *out) {
    if (ops->dot_rows) ops->dot_rows(q, x, ldx, n, d, out);
    else
        for (int p = 0; p < n; p++) out[p] = ops->dot(q, x + (size_t)p * ldx, d);
}

/* ops->dot_rows_q, or the kern_dot_rows calls it stands for. */
static inline void kern_dot_rows_q(const kern_ops *ops, const float *q, size_t ldq, int nq, const float *x, size_t ldx,
                                   int n, int d, float *out, size_t ldo) {
    if (ops->dot_rows_q) ops->dot_rows_q(q, ldq, nq, x, ldx, n, d, out, ldo);
    else
        for (int i = 0; i < nq; i++) kern_dot_rows(ops, q + (size_t)i * ldq, x, ldx, n, d, out + (size_t)i * ldo);
}

/* ops->transpose, or the loop it stands for. */
static inline void kern_transpose(const kern_ops *ops, const float *x, size_t ldx, int n, int d, float *xt, size_t ldt) {
    if (ops->transpose) ops->transpose(x, ldx, n, d, xt, ldt);
    else
        for (int p = 0; p < n; p++)
            for (int c = 0; c < d; c++) xt[(size_t)c * ldt + (size_t)p] = x[(size_t)p * ldx + (size_t)c];
}

/* ops->axpy_rows_q, or the kern_axpy_rows calls it stands for. */
static inline void kern_axpy_rows_q(const kern_ops *ops, const float *a, size_t lda, int nq, int n, const float *x,
                                    size_t ldx, float *y, size_t ldy, int d) {
    if (ops->axpy_rows_q) ops->axpy_rows_q(a, lda, nq, n, x, ldx, y, ldy, d);
    else
        for (int i = 0; i < nq; i++) kern_axpy_rows(ops, a + (size_t)i * lda, n, x, ldx, y + (size_t)i * ldy, d);
}

/* ---- the CUDA backend's arithmetic on the host (kernels_dev.c; issue 25's hybrid step) ----
 * kern_matmul_i8_dev: y[t*ldy + r] (r0 <= r < r1, t < a->n_tok; a ready) of a q8/q4 matrix in cuda.h's canonical
 * order (per 32-column block acc = fma(I_b, scale * d_b, acc); per group accb = fma(bias, s, accb); acc + accb),
 * bitwise the device's slcu_matmul_i8. kern_swiglu_dev: y = silu(g) * u with canon_exp.h's e^x, bitwise the
 * device's SwiGLU. kern_ffn_dev: a SwiGLU expert over x's tokens (int8; prepared here) on pool (NULL: inline):
 * g, u [n][inter] scratch, mid_buf kern_act_bytes(n, inter) bytes, y [n][ldy]; bitwise the CUDA backend's ffn of
 * the same expert; SL_EUNSUPPORTED (nothing done) unless kern_ffn_dev_ok (q8/q4 parts with biases, groups of
 * 32 / 64 / 128, inter a multiple of 32) and x->int8. */
void kern_matmul_i8_dev(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1);
/* Tests: the widest of kernels_dev.c's paths to take, 0 scalar, 1 AVX2, 2 AVX-512 VNNI (default; each where the CPU
 * has it; all give the same bits); returns the previous limit. Not thread-safe: set it while nothing runs. */
int kern_dev_isa(int max);
void kern_swiglu_dev(const float *g, const float *u, float *y, int n);
int kern_ffn_dev_ok(const tn_expert *ex, int inter);
int kern_ffn_dev(pool_t *pool, const tn_expert *ex, kern_act *x, int inter, float *g, float *u, void *mid_buf,
                 float *y, size_t ldy);
/* One of kern_ffn_dev_multi's experts: its parts, its rows (int8; prepared there), scratch g, u [n][inter] and
 * mid_buf (kern_act_bytes(n, inter) bytes), output y [n][ldy]; n = x->n_tok. */
typedef struct kern_ffn_arg {
    const tn_expert *ex;
    kern_act *x;
    float *g, *u;
    void *mid_buf;
    float *y;
    size_t ldy;
} kern_ffn_arg;
/* kern_ffn_dev of n experts (each kern_ffn_dev_ok, the same inter) in three hand-offs of pool: every gate and up
 * row, then every SwiGLU and int8 form, then every down row; each expert's bits those of kern_ffn_dev alone
 * (every row is one dev_mm call on the same inputs). SL_EUNSUPPORTED (nothing done) as kern_ffn_dev. */
int kern_ffn_dev_multi(pool_t *pool, const kern_ffn_arg *a, int n, int inter);

static inline float kern_silu(float x) { return x / (1.0f + expf(-x)); }
static inline float kern_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

#endif
