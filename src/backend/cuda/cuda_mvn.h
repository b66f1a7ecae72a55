/*
 * cuda_mvn.h — a decode batch's routed experts grouped by expert on the device (cuda_mvn.cu; issue 24 "serve --gpu",
 * docs/CUDA.md "A decode batch's experts grouped by expert"). Only for src/backend/cuda/ and tests/cuda/.
 *
 * slcu_moeg_ffn is slcu_moe_ffn (cuda.h) for n <= 8 tokens in two launches after h's quantisation: every expert that
 * some token chose reads its gate and up rows once for all of its tokens (at most 8) and makes their SwiGLU mid rows'
 * int8 form in the same CTA; then every chosen expert reads its down rows once for all of its pairs. Each (token, slot)
 * row is computed in cuda.h's canonical order with the one-token kernels' operations (the SwiGLU and quantisation of
 * cuda_i8.cu act_quant_rows), so y is bitwise slcu_moe_ffn's (the grouped GEMM's and the per-pair matvecs'), and a
 * token's bits do not depend on the batch.
 */
#ifndef SL_CUDA_MVN_H
#define SL_CUDA_MVN_H

#include "backend/cuda/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SLCU_MOEG_MAXN 8 /* tokens a call */

/* SLUICE_CUDA_MOEG (read by slcu_moeg_init, which be_cuda_new calls when the backend opens; 1 unset, 0 off): cu_moe_wide
 * sends a decode batch of up to SLCU_MOEG_MAXN tokens through slcu_moeg_layer; =2 the same with gate / up at 16 rows a
 * CTA (four times the CTAs) and the SwiGLU in a launch of its own (slcu_swiglu_q): the same bits. slcu_moeg_set: 1 or 2
 * on, 0 off, -1 the environment's again (tests; slcu_moeg_ffn takes =1's way unless 2 is set). slcu_moeg_on: the switch
 * now (0, 1 or 2). */
void slcu_moeg_init(void);
void slcu_moeg_set(int on);
int slcu_moeg_on(void);

/* SLUICE_CUDA_MVG (read by slcu_moeg_init; on unset, 0 off): a decode batch's 2-8 token int8 matmuls (q|k|v, o, the LM
 * head: backend_cuda.c mm_run, cu_matmul_multi) through slcu_mvg_matmul. slcu_mvg_set / slcu_mvg_on as above. */
void slcu_mvg_set(int on);
int slcu_mvg_on(void);
/* mm[0 .. n) (n <= 4) as slcu_matmul_i8 computes them, each row read once for all tokens, 16 or 64 rows a CTA: 1 queued,
 * 0 not its case (nothing queued: 2-8 tokens of one activation, no rows or table, one q8/q4 type, group and width), -1
 * failed (message). Bitwise slcu_matmul_i8 (cuda.h's canonical order). */
int slcu_mvg_matmul(const slcu_mm *mm, int n, char *msg, size_t msglen);

/* SLUICE_CUDA_NROWS (read by slcu_moeg_init; on unless =0): a decode batch's 2-8 rows take the n-row forms below
 * (backend_cuda_hold.c add_norm_rows, nr_rows). slcu_nrows_set / slcu_nrows_on as above. */
#define SLCU_NROWS_MAX 8
void slcu_nrows_set(int on);
int slcu_nrows_on(void);
/* slcu_add_norm_q (cuda.h) of n_rows rows in one launch: row t's x, y, h at t p->dim floats (p->y NULL: the norm
 * alone, x only read; no combine: p->cy NULL), its int8 form row t of a (a->n_tok == n_rows; a NULL: none). Each row
 * runs the one-row kernel's CTAs (a cluster of 8 where slcu_norm_cluster_takes, else one CTA): bitwise slcu_add_norm_q
 * (or slcu_rmsnorm_q) of that row alone, and so bitwise slcb_add, slcu_rmsnorm and slcu_act_quantize of the rows.
 * 0, or -1 with a message. */
int slcu_add_norm_rows(const slcu_addnorm *p, int n_rows, const slcu_act *a, char *msg, size_t msglen);
/* slcu_norm_rope (cuda.h) of n_tok <= SLCU_NROWS_MAX tokens in one launch: part i's token t at p[i].x / y + t ld[i],
 * at position pos[t] (host, n_tok of them). Each (token, head) is one-token k_norm_rope's CTA: bitwise slcu_rmsnorm then
 * slcu_rope_at (interleave 0). Not in a recorded step. 0, or -1 with a message. */
int slcu_norm_rope_rows(const slcu_normrope *p, const size_t *ld, int n_parts, int n_tok, int rot, const float *inv_freq,
                        float attn_factor, const int *pos, char *msg, size_t msglen);

/* slcu_matmul of w (f32 / bf16 / f16, E rows) on n <= SLCU_NROWS_MAX tokens' x [n][cols] into logits [n][E], then
 * slcu_route of them (kinds 0 and 1) into top_e / top_w [n][k], in one launch (cuda_mvn.cu k_router_rows: a warp a row
 * and token, the token's last warp routes it): the logits, the choice and the weights bitwise the two calls', so each
 * token's bitwise it alone (the one-token k_router2's). done: device [n] ints, zero before and left zero after, that no
 * other launch uses meanwhile. 1 queued, 0 not its case (nothing queued), -1 failed (message). */
int slcu_router_rows(const slcu_mat *w, const float *x, float *logits, const slcu_router *r, int n, int *top_e,
                     float *top_w, int *done, char *msg, size_t msglen);

/* Device bytes of m->work for slcu_moeg_ffn (h's int8 form, the n k mid rows' int8 form, the grouping's table). */
size_t slcu_moeg_bytes(int n, int k, int E, int H, int I);
/* m as slcu_moe_ffn's (m->swi unused): y [n k][H], row t k + s token t's slot s (pairs whose expert is outside [0, E)
 * are skipped: their rows are not written). 0, or -1 with a message (shapes, types, n outside 1 .. 8, n k > 256,
 * E > 1024). Each token's k experts must be distinct (slcu_route's are), so an expert has at most n tokens. */
int slcu_moeg_ffn(const slcu_moe *m, char *msg, size_t msglen);
/* slcu_moe_layer's contract (route into m->top_e / top_w, the experts, slcu_combine into out; *buf grown as needed,
 * a sync first) through slcu_moeg_ffn: 1 done, 0 not its case (n > 8, shapes or types: nothing queued), -1 failed. */
int slcu_moeg_layer(const slcu_moe *m, const slcu_router *r, const float *logits, float *top_w, float *out, void **buf,
                    size_t *cap, char *msg, size_t msglen);
/* slcu_moeg_layer with h's int8 form ha (n rows of H, as slcu_act_quantize of m->h makes it: the norm's, SLUICE_CUDA_NROWS=1)
 * instead of quantizing h again (one launch fewer; the same bits); ha NULL: slcu_moeg_layer. routed: m->top_e and top_w
 * already hold r's choice of logits (slcu_router_rows), no route launched. 0 also when ha's shape is not m's. */
int slcu_moeg_layer_a(const slcu_moe *m, const slcu_act *ha, int routed, const slcu_router *r, const float *logits,
                      float *top_w, float *out, void **buf, size_t *cap, char *msg, size_t msglen);

#ifdef __cplusplus
}
#endif

#endif
