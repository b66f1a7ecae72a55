/*
 * moe_hybrid.c — the hybrid step's host side (issue 25; docs/CUDA.md "The hybrid step"): the experts of a decode
 * step that the device tier hands out where they lie (tn_expert.host: a RAM cache slot, stream/tier.h) run on the
 * host's threads through the backend's ffn_host (bitwise its ffn on the device), while the device runs the
 * experts it holds. Per MoE layer: the block's input rows come down once (kilobytes) before anything is queued
 * on the device, each host expert's outputs gather in host memory, and they go up in one copy and land in
 * their (token, slot) cells of exp_out before the combine; the combine sums the cells in the fixed order
 * (moe.c), so where an expert ran never changes a bit.
 * A layer's host experts are kept (their RAM slots held) until the device's work of the layer is queued, the copies
 * up included (fwd_hy_add), then run together (fwd_hy_flush: the backend's ffn_host_multi, a few hand-offs of the
 * host's threads for all of them, or ffn_host one by one), so that PCIe copies the promoted misses, the device
 * computes its experts and the host threads compute theirs at the same time (issue 25: before, each host expert ran
 * where it was handed out, and the copies of the misses after it waited for it).
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
    float *x;      /* [B k][H] the kept experts' rows, each expert's together (gathered: several tokens, Llama 4) */
    uint8_t *xbuf; /* their int8 forms: [B k] kern_act_bytes(1, H) */
    uint8_t *tbuf; /* [B] kern_act_bytes(1, H): a token's int8 form, shared by the experts of one token */
    kern_act *tact; /* [B] those acts, ... */
    uint8_t *tset;  /* [B] ... 1: made this layer */
    float *g, *u;  /* [B k][I] (g: [B k][2 I], a fused gate_up's rows) */
    uint8_t *mid;  /* [B k] kern_act_bytes(1, I) */
    float *y;      /* [B k][H] this layer's host outputs (pinned), ... */
    int *cell;     /* [B k] ... their cells of exp_out (row t k + s) */
    int n;         /* rows in y */
    /* the kept experts (fwd_hy_add) */
    int *ke, nk;   /* [E] expert */
    tn_expert *kx; /* [E] its parts in host memory */
    kern_act *ka;  /* [E] its rows */
    be_ffn *kf;    /* [E] its ffn */
    float *dev;    /* backend memory [B k][H]: the upload */
    size_t dev_bytes, h_bytes, y_bytes, xa1, ma1;
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
    const size_t E = (size_t)(ws->shape.n_experts > 0 ? ws->shape.n_experts : 1), R = B * k;
    fwd_hybrid *hy = calloc(1, sizeof *hy);
    if (!hy) return SL_ENOMEM;
    ws->hy = hy;
    hy->pool = pool;
    be_backend *be = ws->be;
    hy->async = be->copy_async && be->mark && be->fence_done;
    hy->h_bytes = B * H * sizeof(float);
    hy->y_bytes = R * H * sizeof(float);
    hy->xa1 = kern_act_bytes(1, (int)H); /* kern_act_bytes(n, c) <= n kern_act_bytes(1, c): each part rounds up */
    hy->ma1 = kern_act_bytes(1, (int)I);
    hy->h = be->alloc(be, hy->h_bytes, BE_BUF_PINNED);
    hy->x = malloc(R * H * sizeof(float));
    hy->xbuf = malloc(R * hy->xa1);
    hy->tbuf = malloc(B * hy->xa1);
    hy->tact = calloc(B, sizeof *hy->tact);
    hy->tset = calloc(B, 1);
    hy->g = malloc(2 * R * I * sizeof(float)); /* 2: a fused gate_up's rows (gpt-oss, Llama 4) */
    hy->u = malloc(R * I * sizeof(float));
    hy->mid = malloc(R * hy->ma1);
    hy->y = be->alloc(be, hy->y_bytes, BE_BUF_PINNED);
    hy->cell = malloc(R * sizeof(int));
    hy->ke = malloc(E * sizeof *hy->ke);
    hy->kx = calloc(E, sizeof *hy->kx);
    hy->ka = calloc(E, sizeof *hy->ka);
    hy->kf = calloc(E, sizeof *hy->kf);
    hy->dev_bytes = R * H * sizeof(float);
    hy->dev = ws->be->alloc(ws->be, hy->dev_bytes, BE_BUF_DEVICE);
    if (!hy->h || !hy->x || !hy->xbuf || !hy->tbuf || !hy->tact || !hy->tset || !hy->g || !hy->u || !hy->mid || !hy->y ||
        !hy->cell || !hy->ke || !hy->kx || !hy->ka || !hy->kf || !hy->dev) {
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
    void *bufs[] = {hy->x, hy->xbuf, hy->tbuf, hy->tact, hy->tset, hy->g, hy->u, hy->mid, hy->cell, hy->ke, hy->kx,
                    hy->ka, hy->kf};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    free(hy);
    ws->hy = NULL;
}

void fwd_hy_begin(fwd_ws *ws, int n, int misses) {
    fwd_hybrid *hy = ws->hy;
    if (!hy) return;
    hy->n = 0;
    hy->nk = 0;
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

/* async: the host experts wait for the rows to be down and for the last upload to have read y */
static void hy_wait(fwd_hybrid *hy, be_backend *be) {
    if (!hy->h_ready) {
        if (hy->h_fence) be->fence_done(be, hy->h_fence, 1);
        hy->h_fence = 0;
        hy->h_ready = 1;
    }
    if (hy->y_fence) {
        be->fence_done(be, hy->y_fence, 1);
        hy->y_fence = 0;
    }
}

sl_status fwd_hy_add(fwd_ws *ws, const fam_config *cfg, int layer, int e, const tn_expert *ex, sl_error *err) {
    fwd_hybrid *hy = ws->hy;
    if (!hy || !ws->be->ffn_host)
        return err_set(err, SL_EINVAL, "layer %d expert %d: handed out in host memory without the hybrid step", layer, e);
    if (hy->nk >= cfg->n_experts) return err_set(err, SL_EINVAL, "layer %d expert %d: handed out twice", layer, e);
    hy->ke[hy->nk] = e;
    hy->kx[hy->nk++] = *ex;
    return SL_OK;
}

/* Kept expert i's rows and ffn: a token's shared int8 form for one row as it is, else its rows gathered (Llama 4:
 * times their weights, moe.c); *row: its first row of x, g, u, mid and y so far, moved past its rows. */
static void hy_prepare(fwd_ws *ws, const fam_config *cfg, int layer, int i, int *row) {
    fwd_hybrid *hy = ws->hy;
    const int H = cfg->hidden, I = cfg->moe_inter, k = cfg->n_experts_used, e = hy->ke[i];
    const int start = e > 0 ? ws->e_count[e - 1] : 0, cnt = ws->e_count[e] - start, r = *row;
    kern_act *a = &hy->ka[i];
    if (cnt == 1 && !cfg->moe_scale_input) {
        const int t = ws->e_tok[start];
        if (!hy->tset[t]) {
            kern_act_init(&hy->tact[t], hy->tbuf + (size_t)t * hy->xa1, hy->h + (size_t)t * H, (size_t)H, 1, H, ws->int8);
            hy->tset[t] = 1;
        }
        a = &hy->tact[t];
    } else {
        float *x = hy->x + (size_t)r * H;
        for (int j = 0; j < cnt; j++)
            memcpy(x + (size_t)j * H, hy->h + (size_t)ws->e_tok[start + j] * H, (size_t)H * sizeof(float));
        for (int j = 0; cfg->moe_scale_input && j < cnt; j++) { /* Llama 4: the rows times their weights (moe.c) */
            float *w = ws->top_w + (size_t)ws->e_tok[start + j] * k + ws->e_slot[start + j];
            for (int c = 0; c < H; c++) x[(size_t)j * H + c] *= *w;
            *w = 1.0f;
        }
        kern_act_init(a, hy->xbuf + (size_t)r * hy->xa1, x, (size_t)H, cnt, H, ws->int8);
    }
    float limit;
    const int kind = fwd_ffn_kind(cfg, layer, 0, &limit);
    hy->kf[i] = (be_ffn){.kind = kind, .limit = limit, .w = &hy->kx[i], .x = a, .inter = I, .g = hy->g + (size_t)2 * r * I,
                         .u = hy->u + (size_t)r * I, .mid_buf = hy->mid + (size_t)r * hy->ma1,
                         .int8 = ws->int8 && I <= ws->act_cols, .y = hy->y + (size_t)r * H, .ldy = (size_t)H};
    for (int j = 0; j < cnt; j++) hy->cell[r + j] = ws->e_tok[start + j] * k + ws->e_slot[start + j];
    *row = r + cnt;
}

sl_status fwd_hy_flush(fwd_ws *ws, const fam_config *cfg, int layer, const tn_expert_src *xs, int run, sl_error *err) {
    fwd_hybrid *hy = ws->hy;
    if (!hy || !hy->nk) return SL_OK;
    sl_status st = SL_OK;
    if (run) {
        be_backend *be = ws->be;
        hy_wait(hy, be);
        memset(hy->tset, 0, FWD_BATCH);
        int row = 0;
        for (int i = 0; i < hy->nk; i++) hy_prepare(ws, cfg, layer, i, &row);
        /* all at once; one by one where the backend has no multi or it declines (nothing done then) */
        st = be->ffn_host_multi ? be->ffn_host_multi(be, hy->pool, hy->kf, hy->nk) : SL_EUNSUPPORTED;
        if (st == SL_EUNSUPPORTED) {
            st = SL_OK;
            for (int i = 0; !st && i < hy->nk; i++) st = be->ffn_host(be, hy->pool, &hy->kf[i]);
        }
        if (st) err_set(err, st, "layer %d: the %s backend cannot run experts %d .. on the host", layer, be->name, hy->ke[0]);
        else hy->n = row;
    }
    for (int i = 0; i < hy->nk; i++) xs->release(xs->ctx, hy->ke[i]); /* their RAM slots back */
    hy->nk = 0;
    return st;
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
