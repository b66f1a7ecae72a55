/*
 * cuda.h — the CUDA tier's kernels (issue 13), a C interface over the .cu files of src/backend/cuda/, built only with
 * `make CUDA=1` (nvcc -arch=sm_90 by default, CUDA_ARCH to change it). Matrices are the container's
 * layouts as they are (src/quant/quant.h: f32, bf16, f16, and the MLX group-affine q8 / q4), in device
 * memory; activations are f32. Every kernel sums in a fixed order that depends only on the shapes, so
 * results are bitwise repeatable run to run and independent of where a weight came from (VRAM cache,
 * a copy from pinned RAM): streamed equals resident on the GPU.
 * Functions return 0, or -1 with a message in msg (no CUDA device, no driver, out of device memory, a
 * launch failure); none aborts or prints.
 */
#ifndef SL_BACKEND_CUDA_H
#define SL_BACKEND_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "util/dtype.h" /* a C header: its functions have C linkage */

/* A matrix in device memory: the tn_mat fields the kernels read (src/model/model.h). */
typedef struct slcu_mat {
    const void *data;   /* f32/bf16/f16 [rows][cols], or the q8/q4 codes [rows][cols*bits/8] */
    const void *scales; /* q8/q4: [rows][cols/group] of sdtype */
    const void *biases; /* q8/q4: [rows][cols/group] of sdtype */
    dt_type dtype, sdtype;
    int rows, cols, group;
    /* q8/q4: 1 when every bias is z times its scale, bit for bit (tn_mat bias_implied: quant.c q_biases_implied; with
     * slcu_mm tab: of every matrix of the table): with SLUICE_CUDA_IBIAS=1 (slcu_i8_ibias) the int8 matvecs compute
     * the biases instead of reading them */
    int ibias;
} slcu_mat;

/* Selects device 0 and checks that it runs our code. 0, or -1 with why ("no CUDA device: ...",
 * "CUDA driver ...", "compute capability 8.0 < 9.0 built for"). */
int slcu_init(char *msg, size_t msglen);
/* The device's name and memory (after slcu_init). */
void slcu_device_info(char *name, size_t namelen, uint64_t *total_bytes, uint64_t *free_bytes);

void *slcu_alloc(size_t bytes, char *msg, size_t msglen); /* NULL with a message when out of memory */
void slcu_free(void *p);
int slcu_upload(void *dst, const void *src, size_t bytes, char *msg, size_t msglen);
int slcu_download(void *dst, const void *src, size_t bytes, char *msg, size_t msglen);

/* y[t][r] = sum_c W[r][c] * x[t][c] for t < n (x [n][cols], y [n][rows], device memory). Decode (n small)
 * reads each weight byte once per call for up to 8 tokens; larger n loops over blocks of 8. */
int slcu_matmul(const slcu_mat *w, const float *x, float *y, int n, char *msg, size_t msglen);

/* Device time of the last slcu_matmul in ms, measured with CUDA events when timing is on (benchmarks). */
void slcu_set_timing(int on);
float slcu_last_ms(void);
/* One device-to-device copy of bytes, its time in *ms (the bandwidth reference of benchmarks). */
int slcu_bench_copy(void *dst, const void *src, size_t bytes, float *ms);

/* ---- int8 activations and the q8/q4 integer kernels (cuda_i8.cu) ----------------------------------------
 * Activations quantized per 32 columns exactly as kern_act (src/kernels/kernels.h): the codes, block scales
 * d and the sums s32/s64/s128 are bitwise the CPU's. The q4 copy orders each 8 columns as their 4 even then
 * their 4 odd ones, so the low and high nibbles of a code word dot with one 32-bit word each.
 *
 * The order of every output (the CUDA backend's canonical order; not the CPU's 16-lane one, so CUDA and
 * CPU agree to rounding, not bitwise): per block b of 32 columns in increasing order,
 *   I_b = sum of code * xq over the block (exact, int32), acc = fma((float)I_b, scale(group of b) * d_b, acc);
 * per group j in increasing order, accb = fma(bias_j, s<group>_j, accb); y = acc + accb.
 * The matvec (dp4a, fewer than 16 tokens) and the tensor-core GEMM (mma.sync m16n8k32 u8 x s8, 16 tokens
 * or more) both compute exactly this, so a token's result is bitwise the same whichever kernel and batch
 * it is in. */
typedef struct slcu_act {
    int n_tok, cols;
    int8_t *q;  /* [n_tok][cols] codes in column order */
    int8_t *q4; /* [n_tok][cols] the same codes, each 8 columns as 4 even then 4 odd */
    float *d;   /* [n_tok][cols/32] block scales */
    float *s;   /* [n_tok][ns] s32[nb] | s64[nb/2] | s128[nb/4], ns = nb + nb/2 + nb/4 */
    /* or (q, q4, d, s unused), as a one-token matmul's input (slcu_matmul_i8; cuda_mv.cu's default one-token kernel:
     * slcu_i8_swiglu_fused): silu(sg) * su (cols floats each, device), made and quantized in the matvec's CTAs by
     * slcu_swiglu_q's operations: bitwise slcu_swiglu_q, then the matmul on its int8 form */
    const float *sg, *su;
} slcu_act;

size_t slcu_act_bytes(int n_tok, int cols);
/* Carves a over buf (device, slcu_act_bytes bytes). -1 when cols is not a positive multiple of 32. */
int slcu_act_bind(slcu_act *a, void *buf, int n_tok, int cols, char *msg, size_t msglen);
/* Quantizes x [n_tok][cols] (device, row stride ldx floats) into a. */
int slcu_act_quantize(const slcu_act *a, const float *x, size_t ldx, char *msg, size_t msglen);

/* One q8/q4 matrix times some rows of an activation: y[t * ldy + r] = (W xq_{rows[t]})[r], t < n_tok. */
typedef struct slcu_mm {
    slcu_mat w;
    const slcu_act *a;
    const int *rows; /* device [n_tok]: which rows of a, or NULL for rows 0 .. n_tok-1 */
    int n_tok;
    float *y;
    size_t ldy;
    /* or, with tab: the matrix's data, scales and biases are tab[3 * *sel + 0..2] (device; read by the
     * kernel, so the choice can come from a kernel before it), w giving the shape and types they share */
    const void *const *tab;
    const int *sel;
} slcu_mm;

/* n matrices (the experts of a MoE layer, each with its own token rows; q/k/v; gate and up) in one launch
 * per (dtype, scale type, kernel) and 32 matrices. The grouped GEMM over expert segments for prefill. */
int slcu_matmul_i8(const slcu_mm *mm, int n, char *msg, size_t msglen);
/* SLUICE_CUDA_SWIDOWN=2 (issue 24; backend_cuda.c moe_resident, read when a backend opens): slcu_matmul_i8 of one
 * token's gate and up matrices of k = n / 2 experts (mm[2 s] gate, mm[2 s + 1] up of slot s, each I rows; a device
 * table allowed) whose CTAs also make each slot's SwiGLU silu(g) u and its int8 form into row s of mid (slcu_act_bind
 * of at least k rows of I): a quad of 4 blocks by the CTA that completes its gate and up rows (cuda_mv.cu mv1c_sw), so
 * once a slot where the down matvec's every CTA made it (slcu_act sg). g, u (the jobs' y) are bitwise slcu_matmul_i8's
 * and mid's codes, scales and sums slcu_swiglu_q's of them: the down matvec on mid gives the bits it gives on sg / su.
 * trig (with overlapped launches): the launch after it may start as its CTAs end (cuda_pdl.cuh pdl_trigger). 1 queued,
 * 0 not its case (nothing queued: the caller makes the calls apart), -1 failed (message). */
int slcu_matmul_i8_swi(const slcu_mm *mm, int n, const slcu_act *mid, int trig, char *msg, size_t msglen);
/* slcu_matmul_i8 of jobs whose device-table cells (slcu_mm sel) a kernel wrote two launches or more before this one,
 * every kernel between waiting for the one before it (the experts' down after the route and gate/up): with overlapped
 * launches the one-token matvec resolves them and issues its weights' loads before it waits (cuda_i8.cuh ijobs early).
 * The same bits. */
int slcu_matmul_i8_early(const slcu_mm *mm, int n, char *msg, size_t msglen);
/* Forces one kernel for every size, for tests and benchmarks: 0 automatic (GEMM from 16 tokens), 1 matvec,
 * 2 GEMM. */
void slcu_i8_force(int kernel);
/* The GEMM kernel, for tests and benchmarks: 1 the register-prefetch one, 2 the cp.async-staged one, 3 (default; 0
 * back to the default, which the environment's SLUICE_CUDA_GEMM=1..6 changes) 4-block stages, 4 the same unrolled,
 * 5 the 4-block stages over 8 warps (128 x 64 and 256 x 32 tiles, the biases after the blocks), 6 the same over 4
 * warps (3's tiles). All give the same bits. */
void slcu_i8_gemm(int version);
/* Rows a CTA of the one-token matvec takes (cuda_mv.cu; the same bits whichever), for tests and benchmarks: 4, 8,
 * 16 or 32, -1 its own choice by the launch's rows ("auto"), 0 back to the environment's SLUICE_CUDA_MVR (auto unset). */
void slcu_i8_mv_rows(int rows);
/* The one-token matvec kernel (cuda_mv.cu; the same bits), for tests and benchmarks: 1 mv1_i8, 2 mv1b_i8 (every load
 * of a thread in flight at once), 3 mv1c_i8, 4 cuda_mv1d.cu mv1d_i8 (warps streaming on their own), 7 cuda_mv1p.cu
 * mv1p_i8 (fewer CTAs, each walking its tiles through a cp.async pipeline), 0 back to the environment's
 * SLUICE_CUDA_MV1 (3 unset). */
void slcu_i8_mv1_kernel(int version);
/* mv1c_i8's fold (cuda_mv.cu mv1c_body MF; the same bits), for tests and benchmarks: 2 its operands staged row-major and
 * read 16 bytes at a time, a quad of blocks' loads before its FMAs (the default), 1 the fold as before
 * (SLUICE_CUDA_MVFOLD=1), 0 back to the environment's SLUICE_CUDA_MVFOLD (2 unset). */
void slcu_i8_mvfold(int mode);
/* How the default one-token matvec (mv1c_i8) finds a CTA's job (cuda_mv.cu; the same bits): 2 from the grid (tiles a
 * job by jobs) where every job of a launch has as many tiles, 3 as 2 with its CTAs triggering the launch after it once
 * they have waited (one wave of CTAs, PDL on), 1 by walking the jobs' first tiles (find_job), 0 back to the environment's
 * SLUICE_CUDA_RESOLVE (1 unset; backend_cuda.c sets it when the backend opens). Tests: how many launches took the grid's
 * job so far. */
void slcu_i8_resolve(int mode);
int slcu_i8_resolve_launches(void);
/* mv1p_i8's grid (the same bits whichever): n > 0 CTAs an SM at most, n < 0 -n CTAs in all (tests: each walks many
 * tiles and jobs), 0 back to the environment's SLUICE_CUDA_MV1P_CTAS (3 an SM unset). */
void slcu_i8_mv1p_ctas(int n);
/* mv1p_i8's (row, block) pairs a thread a unit (the same bits whichever): 2, 4 (q4 only; q8 takes 2), -1 its own choice,
 * 0 back to the environment's SLUICE_CUDA_MV1P_P (its own choice unset). */
void slcu_i8_mv1p_pairs(int p);
/* mv1p_i8's phases (cuda_mv1p.cu mv1p_rec; its launches with bf16 scales): prof 1 records each CTA of the launches that
 * follow (SLCU_MV1P_W words: smid | units << 32, start and end in ns, thread 0's cycles in the prologue, the units'
 * waits, issues, computes, staging barriers and folds, then thread 32's waits, issues, computes and staging barriers),
 * from none; 0 stops. read: waits for the device, copies up to max CTAs' records into out, sets the SM clock (kHz);
 * the count, or -1. */
#define SLCU_MV1P_W 13
int slcu_mv1p_prof(int on);
int slcu_mv1p_prof_read(unsigned long long *out, int max, int *clock_khz);
/* 1 when the one-token matvec takes slcu_act sg inputs (mv1c_i8, the default, and mv1d_i8), else 0 */
int slcu_i8_swiglu_fused(void);
/* The 2-8 token matvec kernel (cuda_mv.cu; the same bits): 1 mvn_i8, 2 mvnc_i8 (a chunk's loads in flight at once by
 * cp.async), 3 cuda_i8.cu mv_i8 (a thread a row), 4 cuda_mv1d.cu mvnd_i8 (mv1d_i8's warps, each job its own tokens),
 * 0 back to the environment's SLUICE_CUDA_MVN (1 unset). */
void slcu_i8_mvn_kernel(int version);
/* SLUICE_CUDA_MVSPLIT=MiB (issue 24, serving; off unset or 0): a matvec job of 2-8 tokens (no token rows, no device
 * table: a decode batch's q/k/v, o, router, shared expert, LM head) whose matrix holds at most MiB MiB of codes runs
 * as one one-token job a token (the one-token kernel: its rows a CTA fill the SMs where mvn_i8's 16 leave them idle,
 * the matrix read once a token, from the L2 after the first): the same bits (cuda.h's order). For tests and
 * benchmarks: mib > 0 that bound, 0 off, -1 back to the environment. */
void slcu_i8_mvsplit(int mib);
/* SLUICE_CUDA_MVGEMM=ROWS (issue 24, serving; off unset or 0): a matvec job of 2-8 tokens (not split) of a matrix of
 * at least ROWS rows takes the GEMM (gemm_i8), as 16 tokens and more do: the same bits. For tests and benchmarks: rows
 * > 0 that bound, 0 off, -1 back to the environment. */
void slcu_i8_mvgemm(int rows);
/* Implied biases (issue 24; on unless SLUICE_CUDA_IBIAS=0): the int8 matvecs of 1-8 tokens (cuda_mv.cu, cuda_mv1d.cu, cuda_i8.cu mv_i8) compute
 * the biases of a matrix with slcu_mat ibias as z times its scales (cuda_i8.cuh zbias) instead of loading them, the
 * same bits, in launches of their own; with a device table (slcu_mm tab) w.ibias says it of every matrix the table
 * may give (its bias pointers are then never read). The GEMMs still read them. slcu_i8_ibias: 1 on, 0 off, -1 back to
 * the environment (on unless 0). */
void slcu_i8_ibias(int on);
/* Overlapped launches (programmatic dependent launch, cuda_pdl.cu; docs/CUDA.md "Overlapped launches"; the same bits):
 * 1 every kernel of a decode step launched to overlap the kernel before it (each waits for it before any access), 2 the
 * one-token matvecs mv1c_i8 / mv1d_i8 alone, 0 off, -1 back to the environment's SLUICE_CUDA_PDL (0 unset). */
void slcu_i8_pdl(int on);
/* 1: one more backend alive has made copy-stream copies (no launch is overlapped while any does); 0: one fewer */
void slcu_pdl_block(int on);
/* SLUICE_CUDA_MV1=6 (slcu_i8_mv1_kernel(6)): mv1c_i8 recording each CTA's phases (cuda_mv.cu mvp_rec, SLCU_MVP_W words
 * a CTA: smid | chunks << 32, start and end in ns, then 8 clock64 offsets from the start). reset: none recorded; read:
 * waits for the device, copies up to max CTAs' records into out, sets the SM clock (kHz); the count, or -1. */
#define SLCU_MVP_W 11
int slcu_mvprof_reset(void);
int slcu_mvprof_read(unsigned long long *out, int max, int *clock_khz);

/* The routed experts of a layer-major MoE block (prefill), all on the device: the n k (token, slot) pairs of
 * top_e grouped by expert (no host round trip), h's rows quantised once, gate and up of every expert over its
 * rows in one launch, one SwiGLU and one quantisation over the n k mid rows, every down in a second launch;
 * output row t k + s of y is token t's slot s. Each row is bitwise the same expert's slcu_matmul_i8 calls
 * (the canonical order: a token's result depends on nothing else in the batch).
 * A decode batch (n up to slcu_moe_mv's bound, 8 by default) instead takes each pair as one-token matvec jobs through
 * the table at its top_e cell (backend_cuda.c cu_moe_resident's jobs, a row of h's int8 form each): the same bits. */
typedef struct slcu_moe {
    int n, k, E, H, I;
    const float *h;          /* [n][H] the block's input rows (device) */
    const int *top_e;        /* device [n][k] expert ids (slcu_route's) */
    const void *const *tab;  /* device [3][E][3]: gate, up, down of each expert: data, scales, biases */
    slcu_mat gate, up, down; /* the shapes and types every expert shares (data pointers unused) */
    void *work;              /* slcu_moe_bytes(n, k, E, H, I) bytes of device memory */
    float *y;                /* [n k][H] */
    /* a decode batch's matvecs: the SwiGLU made in the down matvec's CTAs (cuda.h slcu_act sg) where the one-token
     * kernel can (slcu_i8_swiglu_fused), else one SwiGLU and quantisation over the n k rows as for prefill; the same
     * bits. gate / up / down ibias: of every expert's matrix (backend_cuda.c layer_tab's implied), read by them only. */
    int swi;
} slcu_moe;
size_t slcu_moe_bytes(int n, int k, int E, int H, int I);
int slcu_moe_ffn(const slcu_moe *m, char *msg, size_t msglen);
/* The largest n slcu_moe_ffn runs as one-token matvec jobs (a decode batch; larger n the grouped GEMM): 0 none (the
 * GEMM for every n), 1 .. 64 that many tokens, -1 back to the environment's SLUICE_CUDA_MOEN (0 unset). */
void slcu_moe_mv(int max_tok);
/* slcu_moe_ffn's grouped GEMM for a batch of the layer's experts (the device tier's, backend_cuda_tier.c): the GEMM for
 * any n; only the pairs of top_e within [0, E) run (others -1), and only their cells of y are written, each bitwise
 * slcu_moe_ffn's. */
int slcu_moe_ffn_gemm(const slcu_moe *m, char *msg, size_t msglen);

/* slcu_moe_ffn's two steps (cuda_i8.cu), for the grouped experts of other kinds (cuda_moex.cu). slcu_moe_group: the
 * nk = n k pairs of top_e grouped by expert (k_moe_group: pairs outside [0, E) skipped): off, toff [E + 1] each
 * expert's first sorted pair and 32-pair tile; tok, cell [nk]: sorted pair p's token t (its activation row) and its
 * pair index t k + s. slcu_seg_i8: one q8/q4 matrix w of every expert (tab [E][3]: data, scales, biases, w the
 * shape and types they share) over its segment of sorted pairs in one gemm_seg launch: input row tok[p] of a (tok
 * NULL: row p), output row yrows[p] of y (yrows NULL: row p). Every row bitwise slcu_matmul_i8 of that expert's matrix
 * on that activation row (the canonical order). 0, or -1 (message). */
int slcu_moe_group(const int *top_e, int nk, int k, int E, int *off, int *toff, int *tok, int *cell, char *msg,
                   size_t msglen);
typedef struct slcu_seg {
    slcu_mat w;
    const void *const *tab;
    const int *off, *toff, *tok, *yrows;
    const slcu_act *a;
    float *y;
    size_t ldy;
    int nk, E;
} slcu_seg;
int slcu_seg_i8(const slcu_seg *s, char *msg, size_t msglen);

/* gpt-oss's experts of a layer-major MoE block grouped on the device (cuda_moex.cu; backend.h BE_FFN_GPTOSS): the pairs
 * grouped by expert (slcu_moe_group), gate_up of every expert over its rows in one launch, the clamped SwiGLU with each
 * pair's expert's gate_up_bias, down in a second launch into the pairs' cells of y, each cell + its expert's down_bias.
 * Every cell is bitwise that expert's backend_cuda.c cu_ffn over the token alone (the same operations on the same row:
 * slcu_matmul_i8, slcu_swiglu_clamped, slcu_act_quantize, slcu_matmul_i8, slcb_add_bias). Only the pairs of top_e in
 * [0, E) run (a batch of the device tier: the others -1), only their cells written. Matrices: q8/q4 (int8
 * activations) today; cuda_moex.cu seg_takes / seg_matmul are where another type (MXFP4) plugs in. */
typedef struct slcu_moex {
    int n, k, E, H, I;
    float limit;              /* swiglu_limit */
    const float *h;           /* [n][H] the block's input rows (device) */
    const int *top_e;         /* device [n][k] */
    const void *const *tab;   /* device [2][E][3]: gate_up, down of each expert: data, scales, biases */
    const float *const *bias; /* device [2][E]: gate_up_bias [2I], down_bias [H] of each expert */
    slcu_mat gate_up, down;   /* the shapes and types every expert shares (data pointers unused) */
    void *work;               /* slcu_moex_bytes(n, k, E, H, I) bytes of device memory */
    float *y;                 /* [n k][H] */
} slcu_moex;
size_t slcu_moex_bytes(int n, int k, int E, int H, int I);
/* 1 when m's shapes and types are ones slcu_moex_ffn runs (buffers not looked at), else 0 */
int slcu_moex_takes(const slcu_moex *m);
int slcu_moex_ffn(const slcu_moex *m, char *msg, size_t msglen); /* 0, or -1 (message; not its case included) */

/* ---- the other ops of a decode step (cuda_ops.cu), f32 in device memory --------------------------------
 * Each mirrors the CPU code named (src/kernels/kernels_plain.h and the files of src/model/) operation by operation;
 * transcendental functions (expf, sinf, cosf) are CUDA's, within 2 ulp of the C library's, so results agree
 * with the CPU to rounding. Reductions run in a fixed order: bitwise repeatable, independent of the batch. */

/* The signatures follow src/backend/backend.h's ops (rmsnorm, rope, attention, dn_step, route, combine)
 * so that the CUDA table is a thin adapter; device pointers throughout unless HOST is said. */
/* Per token t < n_tok and head h < n_heads, the dim floats at x + t*ld + h*head_stride: y (same layout, may
 * be x) = (w_off + w) * x / sqrt(mean(x^2) + eps), the mean in double (plain_rmsnorm). */
int slcu_rmsnorm(const float *x, float *y, int n_tok, size_t ld, int n_heads, size_t head_stride, int dim,
                 const float *w, float w_off, float eps, char *msg, size_t msglen);
/* slcu_rmsnorm of one row (one token, one head) that also makes y's int8 form in a (slcu_act_bind of 1 x dim, dim
 * a multiple of 32), bitwise what slcu_act_quantize of y gives. */
int slcu_rmsnorm_q(const float *x, float *y, int dim, const float *w, float w_off, float eps, const slcu_act *a,
                   char *msg, size_t msglen);
/* One token's residual step (backend_cuda.c joins the ops): [cout = slcu_combine of cy / cw / csh / csg (k experts)
 * when cy;] x += (cy ? cout : y); h = slcu_rmsnorm(x) with w, w_off, eps; all [dim]. a (NULL: none, else 1 x
 * dim, dim % 32 == 0) receives h's int8 form. Bitwise the separate kernels. */
typedef struct slcu_addnorm {
    float *x;
    const float *y;
    const float *cy, *cw, *csh, *csg; /* cy [k][dim], cw [k], csh [dim] or NULL, csg [1] or NULL */
    int ck;
    float *cout;
    float *h;
    const float *w;
    float w_off, eps;
    int dim;
} slcu_addnorm;
int slcu_add_norm_q(const slcu_addnorm *p, const slcu_act *a, char *msg, size_t msglen);
/* slcu_matmul_i8 of mm[0 .. n) (one token each, rows == p->dim <= 2048) and then slcu_add_norm_q of p in the same
 * launch, done by its last CTA (cuda_i8.cu, SLUICE_CUDA_FUSE=o / down): without a combine one matrix whose y is p->y
 * (o), with one the k = n matrices whose y are p->cy's rows (the experts' down: device table and SwiGLU inputs
 * allowed). Every output bitwise the two calls'. cnt: a device int, zero before and left zero after, that no other
 * launch uses meanwhile. 1 queued, 0 not its case (nothing queued: the caller makes the two calls), -1 failed. */
int slcu_matmul_i8_an(const slcu_mm *mm, int n, const slcu_addnorm *p, const slcu_act *a, int *cnt, char *msg,
                      size_t msglen);
/* One token's per-head q or k norm and RoPE (backend_cuda.c joins the two ops): per head h < n_heads of x + h * hs,
 * y = slcu_rmsnorm (dim, w, w_off, eps) then slcu_rope of y's first rot floats (inv_freq HOST [rot/2],
 * attn_factor, pos; not interleaved), bitwise the two kernels. Up to two such (norm, rope) parts in one launch. */
typedef struct slcu_normrope {
    const float *x;
    float *y;
    int n_heads, dim;
    size_t hs;
    const float *w;
    float w_off, eps;
} slcu_normrope;
int slcu_norm_rope(const slcu_normrope *p, int n_parts, int rot, const float *inv_freq, float attn_factor, int pos,
                   char *msg, size_t msglen);
/* slcu_matmul_i8 of mm[0 .. n) (one token each, one dtype and scale type, no device table) and then slcu_norm_rope of
 * p's parts in the same launch (cuda_i8.cu, SLUICE_CUDA_FUSE=qkv): each part's x must be one job's y, a head done by
 * the CTA that completes its rows; every output bitwise the two calls'. cnt: device [cnt_n] ints, zero before and
 * left zero after, that no other launch uses meanwhile (one per stream). 1 queued, 0 not its case (nothing queued:
 * the caller makes the two calls), -1 failed (message). */
int slcu_matmul_i8_nr(const slcu_mm *mm, int n, const slcu_normrope *p, int n_parts, int rot, const float *inv_freq,
                      float attn_factor, int pos, int *cnt, int cnt_n, char *msg, size_t msglen);
/* NeoX rotate-half RoPE in place on the first rot floats of each head (layout as rmsnorm), token t at
 * position pos0 + t (attention.c rope); inv_freq HOST [rot/2] (family/rope.h). interleave: the pairs
 * (x_2i, x_2i+1) are first de-interleaved into halves. */
int slcu_rope(float *x, int n_tok, size_t ld, int n_heads, size_t head_stride, int rot, const float *inv_freq,
              float attn_factor, int pos0, int interleave, char *msg, size_t msglen);
/* y[i] = silu(g[i]) * u[i], i < n (plain_swiglu). */
int slcu_swiglu(const float *g, const float *u, float *y, size_t n, char *msg, size_t msglen);
/* slcu_swiglu of a->n_tok rows of a->cols (g, u, y [n_tok][cols]; y may be g) that also makes y's int8 form in a,
 * bitwise what slcu_act_quantize of y gives. */
int slcu_swiglu_q(const float *g, const float *u, float *y, const slcu_act *a, char *msg, size_t msglen);
/* gpt-oss's clamped SwiGLU (moe.c gptoss_ffn): gu [n_tok][2I] gate/up interleaved, bias [2I] or NULL,
 * act [n_tok][I] = (clamp(up) + 1) * g * sigmoid(1.702 g), g = min(gate, limit). */
int slcu_swiglu_clamped(const float *gu, const float *bias, float limit, float *act, int n_tok, int I, char *msg,
                        size_t msglen);

/* Routers (moe.c route_token): logits [n_tok][E] -> top_e, top_w [n_tok][k], sorted by expert index. */
typedef struct slcu_router {
    int kind;          /* config.h's SL_ROUTER_* value: softmax top-k, top-k softmax, sigmoid group-limited */
    int E, k, norm_topk;
    int n_group, topk_group;
    float routed_scale;
    const float *bias; /* device [E] e_score_correction_bias, or NULL */
    int warp2;         /* kinds 0, 1, E <= 256, k <= 32: the one-warp route in registers (cuda_route.cuh route_warp_reg;
                        * SLUICE_CUDA_ROUTE=2, slcu_route_mode): the same choice and bits */
} slcu_router;
int slcu_route(const slcu_router *r, const float *logits, int n_tok, int *top_e, float *top_w, char *msg,
               size_t msglen);
/* One token's router in one launch (cuda_mat.cu k_matvec_route, SLUICE_CUDA_FUSE=router): logits [E] = w x (w
 * f32 / bf16 / f16, E rows), then r's choice (kinds 0, 1) made by the matvec's last CTA: logits, top_e and top_w
 * bitwise slcu_matmul then slcu_route. done: a device int, zero before and left zero after, that no other launch
 * uses meanwhile (one per stream). 1 queued, 0 not its case (nothing queued: the caller runs the two), -1 failed. */
int slcu_matvec_route(const slcu_mat *w, const float *x, float *logits, const slcu_router *r, int *top_e,
                      float *top_w, int *done, char *msg, size_t msglen);
/* slcu_matvec_route's kernel, read by backend_cuda.c when a backend opens (SLUICE_CUDA_ROUTER; default 1):
 * 1 k_matvec_route (kinds 0 and 1; kind 2 is the matvec then slcu_route); 2 k_router2 (cuda_mat.cu: a row a warp,
 * slcu_router_warps warps a CTA (1, 2 or 4; tests), the weights loaded before the wait, the warp that completes the
 * count routes: kinds 0, 1 and 2 (E <= 256, k <= 32), x 16-byte aligned), bitwise mode 1's logits, choice and weights
 * (test_cuda --router checks and times it). */
extern int slcu_router_mode, slcu_router_warps;
/* A layer-major MoE block's routed part: r's choice for logits [n][E] into m->top_e and top_w (device [n][k]),
 * slcu_moe_ffn (m->work and m->y carved from *buf, grown to what n needs: a sync first, the old one may be in
 * use), out [n][H] = slcu_combine of the slots. 1 done, 0 not its case (m's shapes or types: nothing queued),
 * -1 failed (message). */
int slcu_moe_layer(const slcu_moe *m, const slcu_router *r, const float *logits, float *top_w, float *out, void **buf,
                   size_t *cap, char *msg, size_t msglen);
/* slcu_moe_layer for gpt-oss's experts (cuda_moex.cu): r's choice into m->top_e and top_w, slcu_moex_ffn, out [n][H] =
 * slcu_combine of the slots. 1 done, 0 not its case (slcu_moex_takes: nothing queued), -1 failed (message). */
int slcu_moex_layer(const slcu_moex *m, const slcu_router *r, const float *logits, float *top_w, float *out, void **buf,
                    size_t *cap, char *msg, size_t msglen);
/* out[t] = ((0 + w_0 y_0) + w_1 y_1) + ... over the k slots (moe.c fwd_moe), then + sigmoid(sg[t]) * sh[t]
 * when sh is given (sg NULL: gate 1). y [n_tok][k][H], w [n_tok][k], out/sh [n_tok][H], sg [n_tok]. */
int slcu_combine(const float *y, const float *w, int k, const float *sh, const float *sg, float *out, int n_tok,
                 int H, char *msg, size_t msglen);

/* Attention of n tokens against a KV cache in VRAM (backend.h be_attn, attention.c): first the n new K/V
 * rows go to rows (pos0 + t) % cap; then per (token, head) scores q.k * scale over positions
 * max(0, pos - window + 1) .. pos (window 0: all), f32 softmax with an optional sink logit per head, the
 * weighted sum of V in increasing position, times sigmoid(gate) when gated. KV head of h: h / (nh / nkv). */
typedef struct slcu_attn {
    const float *q; /* [n][ldq], head h at h * qstride: query [hd], then (gated) gate [hd] */
    size_t ldq;
    int qstride, gated;
    const float *k, *v; /* new rows [n][ldkv] */
    size_t ldkv;
    float *k_cache, *v_cache; /* [cap][n_kv * hd] */
    int cap, n, pos0, n_heads, n_kv, hd, window;
    const float *sinks; /* [n_heads] or NULL */
    float scale;
    float *out; /* [n][ldo], head h at h * hd */
    size_t ldo;
    int f16; /* the caches hold halves ([cap][n_kv * hd] __half; quant/kv.h's f16 rows): cuda_flash.cu */
} slcu_attn;
int slcu_attention(const slcu_attn *a, char *msg, size_t msglen);
/* slcu_attention, and for one token whose head_dim is a multiple of 128, with the decode kernel, the output
 * row's int8 form in oq (1 x n_heads * head_dim; bitwise slcu_act_quantize of out): 1 when it made it, 0 when
 * not (only the attention ran), -1 on failure. */
int slcu_attention_q(const slcu_attn *a, const slcu_act *oq, char *msg, size_t msglen);
/* Up to 8 tokens a call take the decode kernel (a CTA of 512 per (token, head)), more the batch one (128);
 * both compute the same operations in the same order, bitwise. Tests: 0 automatic, 1 the batch kernel, 2
 * the decode kernel wherever it fits (head_dim <= 480, the keys in shared memory). */
void slcu_attn_force(int kernel);
/* cuda_fattn.cu: the attention of a's n tokens (their K/V rows already in the cache), bitwise slcu_attention's
 * per (token, head), a CTA per (token, KV head) over K/V tiles in shared memory; slcu_attention's path from 9
 * tokens. 1 launched, 0 not its case (shapes, a context past shared memory), -1 failed (message). */
int slcu_attention_prefill(const slcu_attn *a, char *msg, size_t msglen);
/* cuda_flash.cu: slcu_attention of an f16 cache (a->f16; head_dim <= 256) on tensor cores, in its own order (the
 * file's head comment): the same bits per (token, head) in its prefill and decode kernels, whatever the batch.
 * pd / max_keys: a recorded step's position on the device and bound on its keys (NULL, 0: none). 0 or -1. */
int slcu_attention_f16(const slcu_attn *a, const int *pd, int max_keys, char *msg, size_t msglen);
/* The same, and for one token (head_dim a multiple of 128, oq one row of n_heads * head_dim) the output's int8 form
 * into oq, bitwise slcu_act_quantize of it: 1 when made, 0 when not (the output alone), -1 failed (message). */
int slcu_attention_f16q(const slcu_attn *a, const int *pd, int max_keys, const slcu_act *oq, char *msg, size_t msglen);
/* The same chunks and fold over an f32 cache in f32 SIMT arithmetic (head_dim <= 256); slcu_attention takes it
 * unless SLUICE_CUDA_FA32=0 (k_attention's order) or slcu_attn_force names a kernel. */
int slcu_attention_f32(const slcu_attn *a, const int *pd, int max_keys, char *msg, size_t msglen);
/* Tests, both types: 0 automatic (up to 8 tokens the decode pair, more the prefill kernel), 1 always the prefill
 * kernel, 2 always the decode pair (SLUICE_CUDA_FLASH_MODE sets it too). */
void slcu_fa16_force(int mode);
/* tests: the decode pair's fused fold on (1) or off (0); -1: SLUICE_CUDA_FA_FUSE=1's (off by default) */
void slcu_fa16_fuse(int on);
/* tests: the one-token decode's one-chunk end in k_fa16_part, no k_fa16_comb launch, on (1) or off (0); -1:
 * SLUICE_CUDA_FA_ONE's (on unless =0). The same operations on the same floats as the fold (cuda_flash.cu
 * fa16_part_fin) */
void slcu_fa16_one(int on);
/* tests: SLUICE_CUDA_FA_CL's decode attention (2 .. 16 chunks in one launch on clusters, the fold's loads deeper
 * beyond: cuda_flash_cl.cu, bitwise the pair) on (1) or off (0); -1: the environment's (on unless =0) */
void slcu_fa16_cl(int on);
/* tests: the cluster launches SLUICE_CUDA_FA_CL made so far (0: the device took none; the pair ran) */
int slcu_fa16_cl_launches(void);
/* A decode batch's attention (issue 24): n (<= SLCU_ATTN_ITEMS) one-token items of f16 caches, the same n_heads, n_kv
 * and hd, each with its own q, k, v, caches, position, cap, window and out, in one k_fa16_part launch (each item its
 * row appended) and one k_fa16_comb launch: every item's cache row and output bitwise slcu_attention_f16 of it alone.
 * 1 done; 0 not taken, nothing launched (an item it does not take, a recorded step, SLUICE_CUDA_FLASH_MODE=1,
 * SLUICE_CUDA_FA_APPEND=0): the caller runs each alone; -1 failed (message). */
#define SLCU_ATTN_ITEMS 16
int slcu_attention_f16_items(const slcu_attn *a, int n, char *msg, size_t msglen);
/* The same for one-token items of f32 caches (each bitwise slcu_attention_f32 alone): the rows appended in one launch,
 * then the pair; 0 also where SLUICE_CUDA_FA32=0 (the items alone take k_attention's order then). */
int slcu_attention_f32_items(const slcu_attn *a, int n, char *msg, size_t msglen);
/* slcu_rope with token t at position pos[t] (HOST [n_tok]) in place of pos0 + t: each (token, head) bitwise slcu_rope
 * of that token alone at its position. No recorded step. 0 or -1 (message). */
int slcu_rope_at(float *x, int n_tok, size_t ld, int n_heads, size_t head_stride, int rot, const float *inv_freq,
                 float attn_factor, const int *pos, int interleave, char *msg, size_t msglen);

/* The Gated DeltaNet token recurrence (backend.h dn_step, deltanet.c head_recurrent) for n tokens: per
 * value head h and token t, with a = exp(g):  S = a S; m = S^T k; d = beta (v - m); S += k d^T; o = S^T q.
 * conv_out [n][cq], cq = 2 nk dk + nv dv: q | k | v, value head h reads key head h / (nv/nk); gates
 * [n][2nv] beta then g; state ssm_in -> ssm_out [nv][dk][dv] (may be the same); out [n][ldo]. dv <= 1024. */
int slcu_dn_step(const float *conv_out, const float *gates, const float *ssm_in, float *ssm_out, float *out,
                 size_t ldo, int n, int nk, int nv, int dk, int dv, char *msg, size_t msglen);
/* Tests: 1 makes slcu_dn_step use its generic kernel for every dk (else dk 64 / 128 keep the state in
 * registers; bitwise the same results). */
void slcu_dn_force_generic(int on);

/* The other Gated DeltaNet ops (backend.h be_dn; cpu_mix.c cpu_dn_conv / cpu_dn_gates / cpu_dn_norm): the
 * fields of be_dn the three read, device pointers. cq = 2 nk dk + nv dv. */
typedef struct slcu_dn {
    int n, nk, nv, dk, dv, conv_k;
    const float *conv_in, *conv_w, *conv_in_state; /* [n][cq], [cq][K], [K-1][cq] */
    float *conv_out_state, *conv_out;              /* [K-1][cq], [n][cq] */
    const float *ba;                               /* [n][2nv] */
    int ba_grouped;
    const float *A_log, *dt_bias; /* [nv] */
    float *gates;                 /* [n][2nv] beta | g */
    float *out;                   /* [n][ldo] */
    size_t ldo;
    const float *z, *norm_w; /* [n][nv dv], [dv] */
    float eps;
} slcu_dn;
/* conv_out = silu(causal depthwise conv1d over [conv_in_state; conv_in]), conv_out_state = the last K-1
 * pre-conv rows; acc += w_i u_i in tap order, as the CPU. */
int slcu_dn_conv(const slcu_dn *d, char *msg, size_t msglen);
/* gates = [sigmoid(b) | -exp(A_log) softplus(a + dt_bias)]; q, k of conv_out L2-normalised in place (sum
 * of squares in double, a fixed tree; q also times dk^-1/2). */
int slcu_dn_gates(const slcu_dn *d, char *msg, size_t msglen);
/* out = rmsnorm(out) (norm_w, eps; per value head) * silu(z). */
int slcu_dn_norm(const slcu_dn *d, char *msg, size_t msglen);

/* ---- cuda_mla.cu: multi-head latent attention over its compressed cache (backend.h be_mla, cpu_mla.c
 * cpu_mla): the cache rows stored, the absorbed queries (kv_b's W_uk rows dequantised element by element:
 * f32 / bf16 / f16 / q8 / q4), per (token, head) the scores, softmax and latent sums. ---- */
typedef struct slcu_mla {
    const float *q; /* [n][ldq], head h at h * (dn + dr) */
    size_t ldq;
    const float *ckv; /* [n][r + dr] */
    float *cache;     /* [n_ctx][r + dr] */
    slcu_mat kv_b;    /* [n_heads * (dn + dv)][r] */
    int n, pos0, n_heads, r, dr, dn, dv;
    float scale;
    float *q_abs; /* [n][n_heads][r + dr] */
    float *lat;   /* [n][n_heads][r] */
} slcu_mla;
int slcu_mla_attention(const slcu_mla *a, char *msg, size_t msglen);
/* 2: any number of tokens by cuda_mla.cu's split launches (the cache read once per group of heads, a prefill's
 * tokens in chunks; bitwise the same outputs); 1: k_mla_attend alone; 3 (the default): the split from 64 positions
 * on; -1: SLUICE_CUDA_MLA again (1 / 2 / unset); test bits 4 and 8 (cuda_mla.cu). Tests and benchmarks. */
void slcu_mla_set(int mode);

/* ---- cuda_mla_out.cu: MLA's output projection (backend.h mla_out) in one launch: out[t * ldo + h * dv + v] =
 * sum_c W_uv_h[v][c] lat[t][h][c], W_uv_h rows h*(dn+dv)+dn .. +dv of kv_b [n_heads * (dn + dv)][r] (f32 / bf16 /
 * f16 / q8 / q4), lat [n][n_heads][r] f32 (device). Per (token, head, row) a fixed order that depends on r only: a
 * token in a batch is bitwise the token alone (not bitwise the CPU's exact kernels). ---- */
/* 1 when slcu_mla_out has a kernel for w and the shapes (its dtype, r a whole number of its 32-bit words and groups,
 * 48 KiB holding a token's latents), else 0 */
int slcu_mla_out_takes(const slcu_mat *w, int n_heads, int r, int dn, int dv);
int slcu_mla_out(const slcu_mat *w, const float *lat, float *out, size_t ldo, int n, int n_heads, int r, int dn, int dv,
                 char *msg, size_t msglen);

/* ---- cuda_mxfp4.cu: y[t * ldy + r] = (W x_t)[r], W MXFP4 (quant.h: codes [rows][cols/2], an E8M0 scale per
 * 32 columns), x [n][ldx] f32, any n, any alignment. Each weight decoded as the CPU's mxfp4_row_scalar (value *
 * 2^(e-127), exact); per lane its 32-column blocks in order, a fixed butterfly over the lanes (cuda_mxfp4.cu's head):
 * every output is bitwise the same whatever n, the kernel or the call (one matrix or segments). From
 * slcu_mxfp4_gemm's bound on (9 tokens by default) a call runs k_mxg, tiles of 32 x 8 .. 64 x 64 (rows x tokens);
 * below it k_mxfp4, 8 tokens a launch. ---- */
int slcu_matmul_mxfp4(const slcu_mat *w, const float *x, size_t ldx, float *y, size_t ldy, int n, char *msg,
                      size_t msglen);
/* The smallest n slcu_matmul_mxfp4 runs with the many-token kernel: 0 never (k_mxfp4 always), 1 always; -1: the
 * environment's SLUICE_CUDA_MXG again (unset: 9). Read at the next call; tests and benchmarks. */
void slcu_mxfp4_gemm(int min_tok);
/* A MoE layer's experts in one launch (prefill), as cuda_i8.cu gemm_seg takes them: the n rows of the segment order
 * are grouped by expert, expert e's rows off[e] .. off[e + 1] - 1; row p multiplies matrix z of its expert by x's row
 * tok[p] (or p) into y[z]'s row yrows[p] (or p). Each output is bitwise slcu_matmul_mxfp4 of that expert's matrix on
 * that row (any n). Device memory throughout; tab, off, tok and yrows are read on the device only (no host round trip):
 * off as cuda_i8.cu k_moe_group makes it, tok / cell its tok / cell. Runs on slcu_cur_stream. 0, or -1 with a message
 * (a matrix not mxfp4 of a multiple of 32 columns, E < 1, nmat not 1 or 2, a NULL pointer, a launch failure). */
typedef struct slcu_mxseg {
    const void *const *tab; /* device [nmat][E][ts]: matrix z of expert e: its codes at tab[ts (z E + e)], scales at [+ 1] */
    slcu_mat w;             /* the shape every matrix shares: rows, cols; dtype DT_MXFP4 (data, scales unused) */
    const int *off;         /* device [E + 1]: nondecreasing, off[0] = 0, off[E] = n */
    const int *tok;         /* device [n]: x's row of row p, or NULL: row p */
    const int *yrows;       /* device [n]: y's row of row p, or NULL: row p */
    const float *x;         /* device, row i at x + i ldx (any alignment) */
    size_t ldx, ldy;
    float *y[2];            /* device: matrix z's outputs, row i at y[z] + i ldy (rows floats) */
    int E, nmat, n;         /* experts (>= 1), matrices an expert (1, 2), rows of the segment order (off[E]; sizes the grid) */
    int tstride;            /* ts: tab's entries an expert (0: 2; cuda_moex.cu's tables have 3, the biases' place unread) */
} slcu_mxseg;
int slcu_matmul_mxfp4_seg(const slcu_mxseg *s, char *msg, size_t msglen);

/* The stream every kernel of cuda_ops.cu, cuda_i8.cu, cuda_mat.cu and backend_cuda_rt.cu is queued on: NULL (the
 * legacy default stream) but while the CUDA backend records a decode step into a CUDA graph (backend_cuda.c). */
extern void *slcu_cur_stream;
/* 1 (default): issue 24's decode kernels (the one-token matvec mv1_i8, the decode attention, the one-warp router);
 * 0: the kernels before them (bitwise the same results but the router's weights, within rounding), for
 * bisecting a device fault (SLUICE_CUDA_DECODE=0, read by backend_cuda.c). */
extern int slcu_decode_kernels;
/* Issue 24's shorter one-row kernels, read by backend_cuda.c when a backend opens; 1 (default): as before.
 * slcu_norm_mode 2 (SLUICE_CUDA_NORM=2): slcu_add_norm_q / slcu_rmsnorm_q on a cluster of 8 CTAs (cuda_fused.cu
 * k_add_norm_cl; rows of 2048 .. 8192, a multiple of 1024); slcu_route_mode 2 (SLUICE_CUDA_ROUTE=2): routers made by
 * backend_cuda.c get warp2. Both bitwise the kernels they replace (test_cuda --small checks, --bench-small times). */
extern int slcu_norm_mode, slcu_route_mode;
int slcu_norm_cluster_takes(int dim); /* 1: a row of dim columns goes to k_add_norm_cl now (tests) */
#ifdef __CUDACC__
#define SLS ((cudaStream_t)slcu_cur_stream)
#endif
/* While a recorded step runs (backend_cuda.c): RoPE and the decode attention read the position of their one
 * token from pos_dev (device) instead of their argument, and the attention sizes its shared memory for up to
 * max_keys positions. NULL, 0: as usual. */
void slcu_set_step(const int *pos_dev, int max_keys);
const int *slcu_step_pos(void); /* pos_dev while a step is recorded, else NULL */
/* ---- cuda_embed.cu: x[t * ldx ..] = row tokens[t] of table (f32 / bf16 / f16 / q8 / q4, device; tokens device, each
 * checked by the caller), bitwise quant.c q_row_to_f32. ---- */
int slcu_embed(const slcu_mat *table, const int *tokens, int n, float *x, size_t ldx, char *msg, size_t msglen);

/* Device time of fn(ctx) in ms, the mean of reps calls after one warm-up, by CUDA events (benchmarks). */
float slcu_time(void (*fn)(void *), void *ctx, int reps);
/* The median device time of fn(ctx) in ms over reps calls (1 .. 1000), each between two events of its own (the
 * launches do not overlap), after one warm-up (cuda_fused.cu; benchmarks). */
float slcu_time_median(void (*fn)(void *), void *ctx, int reps);
/* Waits for the device and reports a failure of anything queued (the ops return after queueing). */
int slcu_sync(char *msg, size_t msglen);

#ifdef __cplusplus
}
#endif

#endif
