/*
 * moe_hybrid.c — the hybrid step's host side (issue 25; docs/CUDA.md "The hybrid step"): the experts of a decode
 * step that the device tier hands out where they lie (tn_expert.host: a RAM cache slot, stream/tier.h) run on the
 * host's threads through the backend's ffn_host (bitwise its ffn on the device), while the device runs the
 * experts it holds. Per MoE layer: the block's input rows come down once (kilobytes) before anything is queued
 * on the device, each host expert's outputs gather in host memory, and they go up in one copy and land in
 * their (token, slot) cells of exp_out before the combine; the combine sums the cells in the fixed order
 * (moe.c), so where an expert ran never changes a bit.
 * On a backend with copy_async and fences (CUDA) neither copy is waited for by the host where it need not be:
 * the rows come down into pinned memory behind a fence that the first host expert of the layer waits for (a
 * layer without one never waits), and the outputs go up from pinned memory on the copy queue, ordered before the
 * compute that reads them; the buffers are reused only after their fences (nothing is allocated per layer).
 */
#include <stdlib.h>
#include <string.h>

#include "model/fwd_internal.h"
#include "sluice.h"
#include "util/err.h"

typedef struct fwd_hybrid {
    pool_t *pool;  /* the host's threads (ffn_host) */
    float *h;      /* [B][H] host copy of the block's input rows (ws->h), pinned */
    float *x;      /* [B][H] one expert's rows */
    void *xbuf;    /* kern_act_bytes(B, H): their int8 form */
    float *g, *u;  /* [B][I] */
    void *mid;     /* kern_act_bytes(B, I) */
    float *y;      /* [B k][H] this layer's host outputs (pinned), ... */
    int *cell;     /* [B k] ... their cells of exp_out (row t k + s) */
    int n;         /* rows in y */
    float *dev;    /* backend memory [B k][H]: the upload */
    size_t dev_bytes, h_bytes, y_bytes;
    int async;            /* the backend has copy_async, mark and fence_done (and BE_D2H_ASYNC) */
    int h_ready;          /* h holds this layer's rows (its fence has passed) */
    uint64_t h_fence;     /* async: the rows' copy down */
    uint64_t y_fence;     /* async: the last upload has read y (0: passed) ... */
    uint64_t dev_fence;   /* ... and the compute after it has read dev */
} fwd_hybrid;

sl_status fwd_ws_set_hybrid(fwd_ws *ws, pool_t *pool) {
    fwd_hybrid_free(ws);
    if (!pool) return SL_OK;
    const size_t B = FWD_BATCH, H = (size_t)ws->shape.hidden, I = (size_t)(ws->shape.moe_inter > 0 ? ws->shape.moe_inter : 1);
    const size_t k = (size_t)(ws->shape.n_experts_used > 0 ? ws->shape.n_experts_used : 1);
    fwd_hybrid *hy = calloc(1, sizeof *hy);
    if (!hy) return SL_ENOMEM;
    ws->hy = hy;
    hy->pool = pool;
    be_backend *be = ws->be;
    hy->async = be->copy_async && be->mark && be->fence_done;
    hy->h_bytes = B * H * sizeof(float);
    hy->y_bytes = B * k * H * sizeof(float);
    hy->h = be->alloc(be, hy->h_bytes, BE_BUF_PINNED);
    hy->x = malloc(B * H * sizeof(float));
    hy->xbuf = malloc(kern_act_bytes((int)B, (int)H));
    hy->g = malloc(2 * B * I * sizeof(float)); /* 2: a fused gate_up's rows (gpt-oss, Llama 4) */
    hy->u = malloc(B * I * sizeof(float));
    hy->mid = malloc(kern_act_bytes((int)B, (int)I));
    hy->y = be->alloc(be, hy->y_bytes, BE_BUF_PINNED);
    hy->cell = malloc(B * k * sizeof(int));
    hy->dev_bytes = B * k * H * sizeof(float);
    hy->dev = ws->be->alloc(ws->be, hy->dev_bytes, BE_BUF_DEVICE);
    if (!hy->h || !hy->x || !hy->xbuf || !hy->g || !hy->u || !hy->mid || !hy->y || !hy->cell || !hy->dev) {
        fwd_hybrid_free(ws);
        return SL_ENOMEM;
    }
    return SL_OK;
}

void fwd_hybrid_free(fwd_ws *ws) {
    fwd_hybrid *hy = ws->hy;
    if (!hy) return;
    be_backend *be = ws->be;
    if (hy->async && (hy->h_fence || hy->y_fence)) be->sync(be); /* no copy still reads or writes them */
    if (hy->dev) be->free(be, hy->dev, hy->dev_bytes, BE_BUF_DEVICE);
    if (hy->h) be->free(be, hy->h, hy->h_bytes, BE_BUF_PINNED);
    if (hy->y) be->free(be, hy->y, hy->y_bytes, BE_BUF_PINNED);
    void *bufs[] = {hy->x, hy->xbuf, hy->g, hy->u, hy->mid, hy->cell};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    free(hy);
    ws->hy = NULL;
}

void fwd_hy_begin(fwd_ws *ws, int n, int misses) {
    fwd_hybrid *hy = ws->hy;
    if (!hy) return;
    hy->n = 0;
    hy->h_ready = 0;
    hy->h_fence = 0;
    if (misses <= 0) return;
    /* before the device's experts are queued: the copy waits for nothing but the block's input */
    const size_t bytes = (size_t)n * (size_t)ws->shape.hidden * sizeof(float);
    if (hy->async) {
        ws->be->copy(ws->be, hy->h, ws->h, bytes, BE_D2H_ASYNC);
        hy->h_fence = ws->be->mark(ws->be); /* 0: failed, recorded for sync */
        return;
    }
    ws->be->copy(ws->be, hy->h, ws->h, bytes, BE_D2H);
    hy->h_ready = 1;
}

/* async: the first host expert of a layer waits for the rows to be down and for the last upload to have read y */
static void hy_wait(fwd_hybrid *hy, be_backend *be) {
    if (!hy->h_ready) {
        if (hy->h_fence) be->fence_done(be, hy->h_fence, 1);
        hy->h_fence = 0;
        hy->h_ready = 1;
    }
    if (hy->n == 0 && hy->y_fence) {
        be->fence_done(be, hy->y_fence, 1);
        hy->y_fence = 0;
    }
}

sl_status fwd_hy_run(fwd_ws *ws, const fam_config *cfg, int layer, int e, const tn_expert *ex, sl_error *err) {
    fwd_hybrid *hy = ws->hy;
    const int H = cfg->hidden, I = cfg->moe_inter, k = cfg->n_experts_used;
    if (!hy || !ws->be->ffn_host)
        return err_set(err, SL_EINVAL, "layer %d expert %d: handed out in host memory without the hybrid step", layer, e);
    const int start = e > 0 ? ws->e_count[e - 1] : 0, cnt = ws->e_count[e] - start;
    hy_wait(hy, ws->be);
    for (int i = 0; i < cnt; i++)
        memcpy(hy->x + (size_t)i * H, hy->h + (size_t)ws->e_tok[start + i] * H, (size_t)H * sizeof(float));
    for (int i = 0; cfg->moe_scale_input && i < cnt; i++) { /* Llama 4: the rows times their weights (moe.c) */
        float *w = ws->top_w + (size_t)ws->e_tok[start + i] * k + ws->e_slot[start + i];
        for (int j = 0; j < H; j++) hy->x[(size_t)i * H + j] *= *w;
        *w = 1.0f;
    }
    kern_act a;
    kern_act_init(&a, hy->xbuf, hy->x, (size_t)H, cnt, H, ws->int8);
    float limit;
    const int kind = fwd_ffn_kind(cfg, layer, 0, &limit);
    const be_ffn f = {.kind = kind,
                      .limit = limit, .w = ex, .x = &a, .inter = I, .g = hy->g, .u = hy->u,
                      .mid_buf = hy->mid, .int8 = ws->int8 && I <= ws->act_cols, .y = hy->y + (size_t)hy->n * H,
                      .ldy = (size_t)H};
    sl_status st = ws->be->ffn_host(ws->be, hy->pool, &f);
    if (st) return err_set(err, st, "layer %d expert %d: the %s backend cannot run it on the host", layer, e, ws->be->name);
    for (int i = 0; i < cnt; i++) hy->cell[hy->n + i] = ws->e_tok[start + i] * k + ws->e_slot[start + i];
    hy->n += cnt;
    return SL_OK;
}

void fwd_hy_end(fwd_ws *ws) {
    fwd_hybrid *hy = ws->hy;
    if (!hy || !hy->n) return;
    const int H = ws->shape.hidden;
    be_backend *be = ws->be;
    const size_t bytes = (size_t)hy->n * (size_t)H * sizeof(float);
    if (hy->async) /* after the compute that read dev last; the compute queued from here on waits for it */
        hy->y_fence = be->copy_async(be, hy->dev, hy->y, bytes, hy->dev_fence);
    else
        be->copy(be, hy->dev, hy->y, bytes, BE_H2D);
    be->copy_rows(be, ws->exp_out, (size_t)H, hy->cell, hy->dev, (size_t)H, NULL, hy->n, H);
    if (hy->async) hy->dev_fence = be->mark(be);
    hy->n = 0;
}
