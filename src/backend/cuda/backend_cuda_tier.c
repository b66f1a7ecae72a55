/*
 * backend_cuda_tier.c — backend.h moe_batch on the CUDA backend (issue 25; docs/CUDA.md "A streamed prefill through
 * the grouped GEMM"): a layer-major MoE block whose experts stream through the device tier (stream/tier.c) runs a
 * batch of experts at a time as moe_wide's grouped FFN. model/moe.c holds a batch's tier slots (hits, and misses
 * copied up on the copy stream, which the kernels queued after the copies wait for) and calls this once per batch:
 * the batch's slots go into a device table [gate, up, down][E][data, scales, biases] (the layout of backend_cuda.c
 * layer_tab), the layer's choice goes up with every expert outside the batch set to -1, and cuda_i8.cu
 * slcu_moe_ffn_gemm runs k_moe_group, gemm_seg and the SwiGLU rows over the batch's pairs into their (token, slot)
 * cells; after the last batch slcu_combine sums the cells in slot order. Those are slcu_moe_layer's kernels on the
 * same inputs (the route's weights copied back up are the same floats), so a streamed prefill is bitwise the
 * resident one, whatever the batches. gpt-oss's experts (be_moe_batch limit > 0) the same way through cuda_moex.cu
 * slcu_moex_ffn, their table in layer_tab's oss layout (gate_up, down, then the two biases of each expert). Scratch:
 * cu_ctx mw (moe_wide's; no layer runs both). On by default since call R
 * (bitwise on an H100); SLUICE_CUDA_TIER_GEMM=0, read when the backend opens (backend_cuda.c), gives the expert at a time.
 */
#ifdef SL_CUDA

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/backend_cuda_ctx.h"

/* m is a q8/q4 matrix [rows][cols] in groups of 32, 64 or 128 with f32/f16/bf16 scales (cuda_i8.cu moe_why's rule) */
static int seg_mat(const tn_mat *m, int rows, int cols) {
    return (m->dtype == DT_Q8 || m->dtype == DT_Q4) && m->data && m->scales && m->biases && m->rows == rows &&
           m->cols == cols && (m->group == 32 || m->group == 64 || m->group == 128) &&
           (m->sdtype == DT_F32 || m->sdtype == DT_F16 || m->sdtype == DT_BF16);
}

static int same_kind(const tn_mat *a, const tn_mat *b) {
    return a->dtype == b->dtype && a->sdtype == b->sdtype && a->group == b->group;
}

/* m has data and the shape [rows][cols] (gpt-oss's: its type is slcu_moex_takes' to judge, cuda_moex.cu seg_takes) */
static int oss_mat(const tn_mat *m, int rows, int cols) { return m->data && m->rows == rows && m->cols == cols; }

/* whether the grouped FFN takes the batch's experts: each like the first, gate and up alike; oss (gpt-oss, cuda.h
 * slcu_moex): gate_up [2I][H] and down of the types slcu_moex_takes runs, both biases */
static int batch_ok(const be_moe_batch *q, int oss) {
    const tn_expert *x0 = &q->ex[0];
    if (q->m < 1 || q->n < 1 || q->k < 1 || q->E < 1 || q->E > 1024 || q->H % 32 || q->I % 32) return 0;
    if (oss) {
        const slcu_moex t = {.n = q->n, .k = q->k, .E = q->E, .H = q->H, .I = q->I, .limit = q->limit,
                             .gate_up = mat_of(&x0->gate_up), .down = mat_of(&x0->down)};
        if (!slcu_moex_takes(&t)) return 0;
    }
    for (int i = 0; i < q->m; i++) {
        const tn_expert *x = &q->ex[i];
        if (oss ? !oss_mat(&x->gate_up, 2 * q->I, q->H) || !oss_mat(&x->down, q->H, q->I) || !x->gate_up_bias ||
                      !x->down_bias || !same_kind(&x->gate_up, &x0->gate_up)
                : !seg_mat(&x->gate, q->I, q->H) || !seg_mat(&x->up, q->I, q->H) || !seg_mat(&x->down, q->H, q->I) ||
                      !same_kind(&x->gate, &x0->gate) || !same_kind(&x->up, &x0->up) || !same_kind(&x->gate, &x0->up))
            return 0;
        if (!same_kind(&x->down, &x0->down)) return 0;
    }
    return 1;
}

static _Atomic unsigned long long n_batches;
unsigned long long slcb_tier_batches(void) { return n_batches; }

static int batch_fail(be_backend *be, const char *what) {
    cu_fail(be, SL_EIO, what);
    return be->sync(be);
}

int cu_moe_batch(be_backend *be, const be_moe_batch *q) {
    pend_flush(be);
    cu_ctx *c = cu_of(be);
    c->nq_y = NULL;
    const int oss = q->limit > 0, ok = !c->step && batch_ok(q, oss);
    if (q->first && !ok) return 0;
    if (!ok) return batch_fail(be, "moe_batch: a batch of experts unlike the layer's first");
    const size_t nk = (size_t)q->n * (size_t)q->k;
    const size_t wb = oss ? slcu_moex_bytes(q->n, q->k, q->E, q->H, q->I) : slcu_moe_bytes(q->n, q->k, q->E, q->H, q->I);
    const size_t need = wb + nk * (size_t)q->H * sizeof(float); /* the work, then the cells [n k][H] */
    if (need > c->mw_cap) {
        if (!q->first) return batch_fail(be, "moe_batch: a later batch of the layer needs more scratch than its first");
        if (slcu_sync(MSG(be))) return batch_fail(be, c->tmp); /* queued work may read the old one */
        slcu_free(c->mw);
        c->mw_cap = 0;
        if (!(c->mw = slcu_alloc(need, MSG(be)))) return cu_fail(be, SL_ENOMEM, c->tmp), be->sync(be);
        c->mw_cap = need;
    }
    /* up in one piece: the table [3][E][3] (oss: [2][E][3], then the biases [2][E]: backend_cuda.c layer_tab's
     * layouts), the batch's choice [n k], the weights [n k] (last batch) */
    const size_t E = (size_t)q->E, tb = (size_t)(oss ? 8 : 9) * E * sizeof(void *), eb = nk * sizeof(int);
    const size_t wt = q->last ? nk * sizeof(float) : 0;
    uint8_t *hb = calloc(1, tb + eb + wt);
    if (!hb) return cu_fail(be, SL_ENOMEM, "out of host memory (moe_batch)"), be->sync(be);
    const void **tab = (const void **)hb;
    for (int i = 0; i < q->m; i++) {
        const tn_expert *x = &q->ex[i];
        const tn_mat *ms[3] = {oss ? &x->gate_up : &x->gate, oss ? &x->down : &x->up, &x->down};
        for (int z = 0; z < (oss ? 2 : 3); z++) {
            const void **p = tab + ((size_t)z * E + (size_t)q->es[i]) * 3;
            p[0] = ms[z]->data, p[1] = ms[z]->scales, p[2] = ms[z]->biases;
        }
        if (oss) tab[6 * E + (size_t)q->es[i]] = x->gate_up_bias, tab[7 * E + (size_t)q->es[i]] = x->down_bias;
    }
    const int lo = q->es[0], hi = q->es[q->m - 1]; /* a run of the ascending list: its experts are those in [lo, hi] */
    int *te = (int *)(hb + tb);
    for (size_t p = 0; p < nk; p++) te[p] = q->top_e[p] >= lo && q->top_e[p] <= hi ? q->top_e[p] : -1;
    if (wt) memcpy(hb + tb + eb, q->top_w, wt);
    uint8_t *d = dev_upload(be, hb, tb + eb + wt);
    free(hb);
    if (!d) return be->sync(be);
    float *cells = (float *)((uint8_t *)c->mw + wb);
    if (oss) {
        const slcu_moex mx = {.n = q->n, .k = q->k, .E = q->E, .H = q->H, .I = q->I, .limit = q->limit, .h = q->h,
                              .top_e = (const int *)(d + tb), .tab = (const void *const *)d,
                              .bias = (const float *const *)(d + 6 * E * sizeof(void *)),
                              .gate_up = mat_of(&q->ex[0].gate_up), .down = mat_of(&q->ex[0].down), .work = c->mw, .y = cells};
        if (slcu_moex_ffn(&mx, MSG(be))) return batch_fail(be, c->tmp); /* (batch_ok took its types: slcu_moex_takes) */
    }
    slcu_moe mo = {.n = q->n, .k = q->k, .E = q->E, .H = q->H, .I = q->I, .h = q->h, .top_e = (const int *)(d + tb),
                   .tab = (const void *const *)d, .gate = mat_of(&q->ex[0].gate), .up = mat_of(&q->ex[0].up),
                   .down = mat_of(&q->ex[0].down), .work = c->mw, .y = (float *)((uint8_t *)c->mw + wb)};
    mo.gate.ibias = mo.up.ibias = mo.down.ibias = 0; /* (read by the matvecs only; the GEMM reads the biases) */
    if (!oss && slcu_moe_ffn_gemm(&mo, MSG(be))) return batch_fail(be, c->tmp);
    if (q->last && slcu_combine(cells, (const float *)(d + tb + eb), q->k, NULL, NULL, q->out, q->n, q->H, MSG(be)))
        return batch_fail(be, c->tmp);
    n_batches++;
    return 1;
}

#else
typedef int backend_cuda_tier_unused; /* without CUDA=1 this file is empty */
#endif
