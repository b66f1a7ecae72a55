/*
 * moe_remote.c — a MoE block whose routed experts live on other ranks (dist/remote.h, docs/SCALE.md), both
 * sides of it.
 *
 * Rank 0 (fwd_rm_send / fwd_rm_recv, called by moe.c once the layer is routed and grouped by expert): the block's
 * input rows go out, one request per rank owning a chosen expert; while the ranks compute, the caller runs the
 * shared expert; the replies give every (token, slot) pair's output row in moe.c's grouped order (ascending
 * expert, then the expert's tokens), in host memory, copied once to the backend's when it is not the host's. The
 * caller then adds them exactly as it adds experts computed here: a decode micro-batch's land in their (token,
 * slot) cells of exp_out and the combine op sums the cells in slot order; a layer-major pass's are added expert
 * by expert in ascending order (combine_rows). The sums are the same operations on the same values in the same
 * order, and each output row is the same FFN on the same row (the backends' batch == alone), so the logits are
 * bitwise one process's.
 *
 * An expert rank (fwd_rm_serve): each expert of a request over its rows, FWD_BATCH at a time, through the same
 * ffn op as moe.c's, the rows' int8 form made from the f32 rows received (per row, as rank 0 makes it).
 */
#include <stdlib.h>
#include <string.h>

#include "dist/remote.h"
#include "model/fwd_internal.h"
#include "sluice.h"
#include "util/err.h"

typedef struct fwd_remote {
    rx_client *client;     /* borrowed (the model's) */
    float *x;              /* host [rows][H]: the block's input (a device backend's copied down) */
    float *y;              /* host [pairs][H]: the replies */
    int *e_end;            /* [E] ends of the experts' ranges, by list index */
    int *cell;             /* [pairs] (token, slot) cells of exp_out */
    size_t x_cap, y_cap, cell_cap;
    void *dev;             /* backend memory [pairs][H] (a device backend) */
    size_t dev_bytes;
    rx_layer q;            /* the layer in flight */
} fwd_remote;

sl_status fwd_ws_set_remote(fwd_ws *ws, rx_client *client) {
    fwd_remote_free(ws);
    if (!client) return SL_OK;
    fwd_remote *rm = calloc(1, sizeof *rm);
    if (!rm || !(rm->e_end = malloc((size_t)(ws->shape.n_experts > 0 ? ws->shape.n_experts : 1) * sizeof(int)))) {
        free(rm);
        return SL_ENOMEM;
    }
    rm->client = client;
    ws->rm = rm;
    return SL_OK;
}

void fwd_remote_free(fwd_ws *ws) {
    fwd_remote *rm = ws->rm;
    if (!rm) return;
    if (rm->dev) ws->be->free(ws->be, rm->dev, rm->dev_bytes, BE_BUF_DEVICE);
    free(rm->x);
    free(rm->y);
    free(rm->e_end);
    free(rm->cell);
    free(rm);
    ws->rm = NULL;
}

static int grow(void **p, size_t *cap, size_t need) {
    if (*cap >= need && *p) return 1;
    void *q = realloc(*p, need ? need : 1);
    if (!q) return 0;
    *p = q;
    *cap = need;
    return 1;
}

sl_status fwd_rm_send(fwd_ws *ws, const fam_config *cfg, int layer, const float *h, int n, int n_list,
                      const int *e_tok, sl_error *err) {
    fwd_remote *rm = ws->rm;
    const int H = cfg->hidden;
    const size_t rows = (size_t)n * H * sizeof(float);
    const int pairs = n_list ? ws->e_count[ws->e_list[n_list - 1]] : 0;
    if (!grow((void **)&rm->y, &rm->y_cap, (size_t)pairs * H * sizeof(float)))
        return err_set(err, SL_ENOMEM, "layer %d: out of memory for %d expert outputs", layer, pairs);
    const float *x = h;
    if (!ws->be->is_host) { /* the rows come down once (a device backend; issue 32) */
        if (!grow((void **)&rm->x, &rm->x_cap, rows)) return err_set(err, SL_ENOMEM, "out of memory");
        ws->be->copy(ws->be, rm->x, h, rows, BE_D2H);
        sl_status st = be_sync(ws->be, err);
        if (st) return st;
        x = rm->x;
    }
    for (int i = 0; i < n_list; i++) rm->e_end[i] = ws->e_count[ws->e_list[i]];
    rm->q = (rx_layer){.layer = layer, .slot = cfg_moe_slot(cfg, layer), .n = n, .H = H, .x = x, .n_list = n_list,
                       .e_list = ws->e_list, .e_end = rm->e_end, .e_tok = e_tok, .y = rm->y};
    return rx_client_send(rm->client, &rm->q, err);
}

/* The replies into backend memory: *y [pairs][H] in the grouped order (the host buffer itself on a host backend). */
static sl_status recv_rows(fwd_ws *ws, int pairs, const float **y, sl_error *err) {
    fwd_remote *rm = ws->rm;
    sl_status st = rx_client_recv(rm->client, &rm->q, err);
    if (st) return st;
    *y = rm->y;
    if (ws->be->is_host || !pairs) return SL_OK;
    const size_t bytes = (size_t)pairs * rm->q.H * sizeof(float);
    if (rm->dev_bytes < bytes) {
        if (rm->dev) ws->be->free(ws->be, rm->dev, rm->dev_bytes, BE_BUF_DEVICE);
        rm->dev_bytes = 0;
        if (!(rm->dev = ws->be->alloc(ws->be, bytes, BE_BUF_DEVICE)))
            return err_set(err, SL_ENOMEM, "out of %s memory for %d expert outputs", ws->be->name, pairs);
        rm->dev_bytes = bytes;
    }
    ws->be->copy(ws->be, rm->dev, rm->y, bytes, BE_H2D);
    *y = rm->dev;
    return SL_OK;
}

sl_status fwd_rm_recv_cells(fwd_ws *ws, const fam_config *cfg, int n_list, sl_error *err) {
    fwd_remote *rm = ws->rm;
    const int H = cfg->hidden, k = cfg->n_experts_used;
    const int pairs = n_list ? ws->e_count[ws->e_list[n_list - 1]] : 0;
    const float *y = NULL;
    sl_status st = recv_rows(ws, pairs, &y, err);
    if (st || !pairs) return st;
    if (!grow((void **)&rm->cell, &rm->cell_cap, (size_t)pairs * sizeof(int))) return err_set(err, SL_ENOMEM, "out of memory");
    for (int j = 0; j < pairs; j++) rm->cell[j] = ws->e_tok[j] * k + ws->e_slot[j];
    ws->be->copy_rows(ws->be, ws->exp_out, (size_t)H, rm->cell, y, (size_t)H, NULL, pairs, H);
    return SL_OK;
}

sl_status fwd_rm_recv_wide(fwd_ws *ws, const fam_config *cfg, int n_list, const fwd_wide *wb, float *out,
                           sl_error *err) {
    const int H = cfg->hidden, k = cfg->n_experts_used;
    const int pairs = n_list ? ws->e_count[ws->e_list[n_list - 1]] : 0;
    const float *y = NULL;
    sl_status st = recv_rows(ws, pairs, &y, err);
    if (st) return st;
    for (int i = 0, start = 0; i < n_list; i++) { /* ascending experts, as routed_wide adds them */
        const int end = ws->e_count[ws->e_list[i]];
        ws->be->combine_rows(ws->be, out, H, k, wb->e_tok + start, wb->e_slot + start, wb->top_w,
                             y + (size_t)start * H, end - start);
        start = end;
    }
    return SL_OK;
}

/* ---- an expert rank ---- */

/* Expert e (parts ex) over its cnt pairs: rows row[] of x, outputs into y's rows (the pairs' order). */
static sl_status serve_expert(fwd_ws *ws, const fam_config *cfg, int layer, int e, const tn_expert *ex,
                              const float *x, const int32_t *row, int cnt, float *y, sl_error *err) {
    be_backend *be = ws->be;
    const int H = cfg->hidden;
    sl_status st = fwd_check_expert(be, cfg, ex, layer, e, err);
    for (int c0 = 0; !st && c0 < cnt; c0 += FWD_BATCH) {
        const int nb = cnt - c0 < FWD_BATCH ? cnt - c0 : FWD_BATCH;
        for (int i = 0; i < nb; i++)
            be->copy(be, ws->ffn_x + (size_t)i * H, x + (size_t)row[c0 + i] * H, (size_t)H * sizeof(float), BE_H2D);
        kern_act a;
        fwd_act(ws, &a, FWD_ACT_GATHER, ws->ffn_x, (size_t)H, nb, H);
        const be_ffn f = fwd_expert_ffn(ws, cfg, layer, ex, &a, ws->ffn_y);
        be->ffn(be, &f);
        be->copy(be, y + (size_t)c0 * H, ws->ffn_y, (size_t)nb * H * sizeof(float), BE_D2H);
        st = be_sync(be, err);
    }
    return st;
}

/* The index of expert e in exp[n] (ascending), -1 if absent. */
static int find_expert(const int32_t *exp, int n, int e) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (exp[mid] == e) return mid;
        if (exp[mid] < e) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* SL_OK when request h of len bytes is whole and consistent with cfg: its sizes, ascending experts in range,
 * counts that sum to its pairs, rows inside it; else SL_EFORMAT. */
static sl_status rm_check(const fam_config *cfg, const rx_head *h, size_t len) {
    const int n_exp = h->n_exp, n_pairs = h->n_pairs, n_rows = h->n_rows;
    if (h->hidden != cfg->hidden || n_exp < 0 || n_pairs < 0 || n_rows < 0 || n_exp > cfg->n_experts ||
        cfg_moe_slot(cfg, h->layer) < 0 ||
        len != sizeof *h + (size_t)(2 * (size_t)n_exp + (size_t)n_pairs) * 4 + (size_t)n_rows * h->hidden * sizeof(float))
        return SL_EFORMAT;
    const int32_t *exp = (const int32_t *)(h + 1), *cnt = exp + n_exp, *row = cnt + n_exp;
    long long sum = 0;
    for (int i = 0; i < n_exp; i++) {
        if (exp[i] < 0 || exp[i] >= cfg->n_experts || (i && exp[i] <= exp[i - 1]) || cnt[i] < 0) return SL_EFORMAT;
        sum += cnt[i];
    }
    for (int j = 0; j < n_pairs; j++)
        if (row[j] < 0 || row[j] >= n_rows) return SL_EFORMAT;
    return sum == n_pairs ? SL_OK : SL_EFORMAT;
}

sl_status fwd_rm_serve(fwd_ws *ws, const fam_config *cfg, const tn_expert_src *src, const void *msg, size_t len,
                       float *y, sl_error *err) {
    const rx_head *h = msg;
    const int H = cfg->hidden, n_exp = h->n_exp, n_pairs = h->n_pairs, layer = h->layer;
    const int32_t *exp = (const int32_t *)(h + 1), *cnt = exp + n_exp, *row = cnt + n_exp;
    const float *x = (const float *)(row + n_pairs);
    sl_status st = rm_check(cfg, h, len);
    if (st) return err_set(err, st, "layer %d: a malformed request (%d experts, %d pairs, %d rows of %d, %zu bytes)",
                           layer, n_exp, n_pairs, h->n_rows, h->hidden, len);
    int *start = malloc((size_t)(n_exp + 1) * sizeof(int));
    if (!start) return err_set(err, SL_ENOMEM, "out of memory");
    start[0] = 0;
    for (int i = 0; i < n_exp; i++) start[i + 1] = start[i] + cnt[i];
    if (src->begin) { /* streamed: every block asked for at once, each computed as it lands */
        if ((st = src->begin(src->ctx, layer, exp, n_exp, 0)))
            err_set(err, st, "layer %d: %s", layer, src->errmsg ? src->errmsg(src->ctx) : "expert source failed");
        for (int got = 0; !st && got < n_exp; got++) {
            int e = -1, i;
            tn_expert ex;
            memset(&ex, 0, sizeof ex);
            if ((st = src->next(src->ctx, &e, &ex))) {
                err_set(err, st, "layer %d: %s", layer, src->errmsg ? src->errmsg(src->ctx) : "expert source failed");
                break;
            }
            if ((i = find_expert(exp, n_exp, e)) < 0)
                st = err_set(err, SL_EINVAL, "layer %d: the expert source gave expert %d, not asked for", layer, e);
            else
                st = serve_expert(ws, cfg, layer, e, &ex, x, row + start[i], cnt[i], y + (size_t)start[i] * H, err);
            src->release(src->ctx, e);
        }
        src->end(src->ctx);
    } else {
        for (int i = 0; !st && i < n_exp; i++) {
            tn_expert ex;
            memset(&ex, 0, sizeof ex);
            if ((st = src->get(src->ctx, layer, exp[i], &ex)))
                err_set(err, st, "layer %d expert %d: %s", layer, exp[i], src->errmsg ? src->errmsg(src->ctx) : "not held here");
            else
                st = serve_expert(ws, cfg, layer, exp[i], &ex, x, row + start[i], cnt[i], y + (size_t)start[i] * H, err);
        }
    }
    free(start);
    return st;
}
