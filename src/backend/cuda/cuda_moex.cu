/*
 * cuda_moex.cu — gpt-oss's routed experts of a layer-major MoE block grouped on the device (cuda.h slcu_moex;
 * backend.h BE_FFN_GPTOSS, modeling_gpt_oss.py GptOssExperts): what cuda_i8.cu slcu_moe_ffn does for SwiGLU experts,
 * with a Linear bias on gate_up and on down and the clamped SwiGLU between them.
 *
 * Steps (one launch each, whatever the number of experts): the n k (token, slot) pairs grouped by expert
 * (slcu_moe_group); gate_up [2I][H] of every expert over its segment (slcu_seg_i8, input row = the pair's token of
 * h's int8 form) into g [sorted pair][2I]; k_oss_mid: per sorted pair, its expert's gate_up_bias added and the clamped
 * SwiGLU, k_swiglu_clamped's operations (cuda_ops.cu), into act [sorted pair][I]; act's int8 form (slcu_act_quantize);
 * down of every expert over its segment into the pair's cell of y; k_oss_bias: each written cell + its expert's
 * down_bias, k_add_bias's operation (backend_cuda_rt.cu).
 *
 * Contract (a token in a batch == the token alone): backend_cuda.c cu_ffn runs one expert over its rows as
 * slcu_matmul_i8 (gate_up), slcu_swiglu_clamped, slcu_act_quantize (mid_buf), slcu_matmul_i8 (down), slcb_add_bias.
 * Here each of those is the same per-row arithmetic on the same row: the GEMM rows are cuda.h's canonical order (a
 * row's output depends only on its activation row and matrix, as the 30B shape's slcu_moe_ffn relies on), the
 * quantisation is per row, the two element-wise kernels repeat the single path's expressions with the same
 * intrinsics (the file is built with the same flags, so expf is the same). So every cell is bitwise cu_ffn's for that
 * token alone, and a pair's place within its segment (the atomics' order) changes nothing.
 *
 * Types: seg_takes / seg_matmul are the one place that knows a matrix's type. Today q8/q4 run on int8 activations
 * (h's and act's int8 forms, made only when a matrix reads them). An MXFP4 expert matrix (f32 activations,
 * cuda_mxfp4.cu) plugs in there: seg_takes says yes for DT_MXFP4 and seg_matmul calls its per-expert-segment kernel
 * with the f32 rows (h by tok for gate_up, act for down), both kept in the work buffer already.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_swiglu.cuh"

static int fail(char *msg, size_t n, const char *what, cudaError_t e) {
    if (msg && n) snprintf(msg, n, "%s: %s", what, cudaGetErrorString(e));
    return -1;
}

static size_t rnd256(size_t n) { return (n + 255) / 256 * 256; }

/* CTA p: sorted pair p (< off[E]) of expert e = top_e[cell[p]]: act[p] = k_swiglu_clamped of g[p] with bias[e]
 * (cuda_swiglu.cuh oss_glu, the one expression of both) */
__global__ void k_oss_mid(const float *__restrict__ g, const float *const *__restrict__ bias, const int *__restrict__ top_e,
                          const int *__restrict__ cell, const int *__restrict__ off, int E, float limit, float *act, int I) {
    const int p = blockIdx.x;
    if (p >= off[E]) return;
    const float *b = bias[top_e[cell[p]]], *gr = g + (size_t)p * 2 * I;
    float *ar = act + (size_t)p * I;
    for (int i = threadIdx.x; i < I; i += blockDim.x) {
        ar[i] = oss_glu(gr[2 * i], gr[2 * i + 1], b, i, limit);
    }
}

/* CTA p: y's row cell[p] (sorted pair p < off[E]) += bias[E + its expert] (down_bias), k_add_bias's operation */
__global__ void k_oss_bias(float *y, size_t ldy, const float *const *__restrict__ bias, const int *__restrict__ top_e,
                           const int *__restrict__ cell, const int *__restrict__ off, int E, int H) {
    const int p = blockIdx.x;
    if (p >= off[E]) return;
    const int c = cell[p];
    const float *b = bias[E + top_e[c]];
    float *yr = y + (size_t)c * ldy;
    if (b)
        for (int i = threadIdx.x; i < H; i += blockDim.x) yr[i] = __fadd_rn(yr[i], b[i]);
}

/* ---- the per-type step: a matrix of every expert over its segment ---- */

/* whether w's type runs grouped: q8/q4 in groups of 32, 64, 128 (slcu_seg_i8); MXFP4 on f32 activations
 * (cuda_mxfp4.cu slcu_matmul_mxfp4_seg: each row bitwise slcu_matmul_mxfp4's, as cu_ffn runs an MXFP4 expert). */
static int seg_takes(const slcu_mat *w) {
    if (w->dtype == DT_MXFP4) return w->cols % 32 == 0;
    return (w->dtype == DT_Q8 || w->dtype == DT_Q4) && (w->group == 32 || w->group == 64 || w->group == 128) &&
           (w->sdtype == DT_F32 || w->sdtype == DT_F16 || w->sdtype == DT_BF16);
}
static int seg_int8(const slcu_mat *w) { return w->dtype == DT_Q8 || w->dtype == DT_Q4; }

/* One matrix w of every expert (tab [E][3]) over the sorted pairs: input row tok[p] (NULL: p) of x (f32, ldx) or of
 * its int8 form xa (made when seg_int8(w)), output row yrows[p] (NULL: p) of y. */
static int seg_matmul(const slcu_mat *w, const void *const *tab, const int *off, const int *toff, const int *tok,
                      const int *yrows, const float *x, size_t ldx, const slcu_act *xa, float *y, size_t ldy, int nk, int E,
                      char *msg, size_t msglen) {
    if (w->dtype == DT_MXFP4) { /* f32 rows; tab [E][3]: codes, scales (and a bias slot the kernel does not read) */
        slcu_mxseg s;
        memset(&s, 0, sizeof s);
        s.tab = tab, s.w = *w, s.off = off, s.tok = tok, s.yrows = yrows, s.x = x, s.ldx = ldx, s.ldy = ldy;
        s.y[0] = y, s.E = E, s.nmat = 1, s.n = nk, s.tstride = 3;
        return slcu_matmul_mxfp4_seg(&s, msg, msglen);
    }
    if (seg_int8(w)) {
        const slcu_seg s = {*w, tab, off, toff, tok, yrows, xa, y, ldy, nk, E};
        return slcu_seg_i8(&s, msg, msglen);
    }
    if (msg && msglen) snprintf(msg, msglen, "gpt-oss experts on the device: no grouped kernel for this matrix type");
    return -1;
}

/* ---- the work buffer and the layer ---- */

/* ints off, toff [E + 1], tok, cell [n k]; g [n k][2I], act [n k][I]; the int8 forms of h and of act */
struct moex_work {
    int *off, *toff, *tok, *cell;
    float *g, *act;
    void *xa, *ma;
};
static size_t moex_carve(const slcu_moex *m, moex_work *w) {
    const size_t nk = (size_t)m->n * m->k, E1 = (size_t)m->E + 1;
    const size_t sz[8] = {E1 * 4, E1 * 4, nk * 4, nk * 4, nk * 2 * m->I * 4, nk * m->I * 4, slcu_act_bytes(m->n, m->H),
                          slcu_act_bytes((int)nk, m->I)};
    uint8_t *p = (uint8_t *)m->work;
    void *at[8];
    size_t tot = 0;
    for (int i = 0; i < 8; i++) at[i] = p ? p + tot : NULL, tot += rnd256(sz[i]);
    if (w) *w = (moex_work){(int *)at[0], (int *)at[1], (int *)at[2], (int *)at[3], (float *)at[4], (float *)at[5], at[6], at[7]};
    return tot;
}

extern "C" size_t slcu_moex_bytes(int n, int k, int E, int H, int I) {
    slcu_moex m;
    memset(&m, 0, sizeof m);
    m.n = n > 0 ? n : 0, m.k = k > 0 ? k : 0, m.E = E > 0 ? E : 0, m.H = H > 0 ? H : 0, m.I = I > 0 ? I : 0;
    return moex_carve(&m, NULL);
}

extern "C" int slcu_moex_takes(const slcu_moex *m) {
    return m->n >= 0 && m->k >= 1 && m->E >= 1 && m->E <= 1024 && m->H > 0 && m->I > 0 && m->H % 32 == 0 &&
           m->I % 32 == 0 && m->limit > 0 && seg_takes(&m->gate_up) && seg_takes(&m->down) && m->gate_up.rows == 2 * m->I &&
           m->gate_up.cols == m->H && m->down.rows == m->H && m->down.cols == m->I;
}

extern "C" int slcu_moex_ffn(const slcu_moex *m, char *msg, size_t msglen) {
    if (!slcu_moex_takes(m) || !m->work || !m->h || !m->top_e || !m->tab || !m->bias || !m->y) {
        if (msg && msglen) snprintf(msg, msglen, "gpt-oss experts on the device: shapes, types or buffers out of range");
        return -1;
    }
    if (!m->n) return 0;
    const int nk = m->n * m->k, E = m->E, H = m->H, I = m->I;
    moex_work w;
    moex_carve(m, &w);
    slcu_act xa, ma;
    if (slcu_act_bind(&xa, w.xa, m->n, H, msg, msglen) || slcu_act_bind(&ma, w.ma, nk, I, msg, msglen)) return -1;
    if (seg_int8(&m->gate_up) && slcu_act_quantize(&xa, m->h, (size_t)H, msg, msglen)) return -1;
    if (slcu_moe_group(m->top_e, nk, m->k, E, w.off, w.toff, w.tok, w.cell, msg, msglen) ||
        seg_matmul(&m->gate_up, m->tab, w.off, w.toff, w.tok, NULL, m->h, (size_t)H, &xa, w.g, (size_t)2 * I, nk, E, msg,
                   msglen))
        return -1;
    k_oss_mid<<<(unsigned)nk, 256, 0, SLS>>>(w.g, m->bias, m->top_e, w.cell, w.off, E, m->limit, w.act, I);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return fail(msg, msglen, "gpt-oss SwiGLU launch", e);
    if (seg_int8(&m->down) && slcu_act_quantize(&ma, w.act, (size_t)I, msg, msglen)) return -1;
    if (seg_matmul(&m->down, m->tab + (size_t)3 * E, w.off, w.toff, NULL, w.cell, w.act, (size_t)I, &ma, m->y, (size_t)H,
                   nk, E, msg, msglen))
        return -1;
    k_oss_bias<<<(unsigned)nk, 256, 0, SLS>>>(m->y, (size_t)H, m->bias, m->top_e, w.cell, w.off, E, H);
    e = cudaGetLastError();
    return e == cudaSuccess ? 0 : fail(msg, msglen, "gpt-oss down bias launch", e);
}

extern "C" int slcu_moex_layer(const slcu_moex *m, const slcu_router *r, const float *logits, float *top_w, float *out,
                               void **buf, size_t *cap, char *msg, size_t msglen) {
    if (!slcu_moex_takes(m) || !m->tab || !m->bias || !m->top_e) return 0;
    const size_t wb = slcu_moex_bytes(m->n, m->k, m->E, m->H, m->I), need = wb + (size_t)m->n * m->k * m->H * sizeof(float);
    if (need > *cap) {
        if (slcu_sync(msg, msglen)) return -1; /* queued work may read the old one */
        slcu_free(*buf);
        *cap = 0;
        if (!(*buf = slcu_alloc(need, msg, msglen))) return -1;
        *cap = need;
    }
    slcu_moex mo = *m;
    mo.work = *buf, mo.y = (float *)((uint8_t *)*buf + wb);
    if (slcu_route(r, logits, m->n, (int *)m->top_e, top_w, msg, msglen) || slcu_moex_ffn(&mo, msg, msglen) ||
        slcu_combine(mo.y, top_w, m->k, NULL, NULL, out, m->n, m->H, msg, msglen))
        return -1;
    return 1;
}
