/*
 * moe.c — feed-forward blocks: routed MoE with optional gated shared expert, and the dense SwiGLU MLP
 * (docs/MATH.md, Mixture of experts).
 *
 * Routing per token (cfg->router): softmax over all E router logits (f32, sum in double), top-k by
 * repeated argmax (ties go to the lower expert index), weights renormalised when cfg->norm_topk (Qwen,
 * OLMoE); or top-k of the logits and a softmax over those k (Mixtral); or sigmoid scores chosen with
 * e_score_correction_bias within the best groups (GLM-4.5, DeepSeek-V3; as transformers'
 * Glm4MoeTopkRouter). The chosen experts are
 * then sorted by expert index; that order is the fixed combine order:
 *     out = ((0 + w_a y_a) + w_b y_b) + ...   for experts a < b < ...
 * (HF's index_add loop over experts runs in the same order), then + sigmoid(sh_expert_gate . h) * y_s.
 * Experts are evaluated one at a time in increasing index over the tokens routed to them (their
 * weights stream once per micro-batch); each output lands in the token's slot of exp_out, so the
 * order in which a provider delivers experts cannot change the result. A layer-major block whose experts stream
 * through the device tier takes them in batches held whole (grouped_wide: on the GPU one grouped FFN a batch,
 * moe_wide's kernels; docs/CUDA.md "A streamed prefill through the grouped GEMM").
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/fwd_internal.h"
#include "model/rtrace.h"
#include "quant/quant.h"
#include "sluice.h"
#include "util/err.h"

int fwd_ffn_kind(const fam_config *cfg, int layer, int shared, float *limit) {
    *limit = (float)cfg->swiglu_limit;
    switch (cfg->expert_kind) {
    case SL_EXPERT_GPTOSS: return BE_FFN_GPTOSS;
    case SL_EXPERT_SWIGLU_CLAMP: return BE_FFN_SWIGLU_CLAMP;
    case SL_EXPERT_GEGLU: return BE_FFN_GEGLU;
    case SL_EXPERT_SWIGLU_FUSED: return BE_FFN_SWIGLU_FUSED;
    case SL_EXPERT_SWIGLU_CLIP:
        *limit = shared ? cfg->layer_sh_clip[layer] : cfg->layer_clip[layer];
        return *limit > 0 ? BE_FFN_SWIGLU_CLIP : BE_FFN_SWIGLU;
    default: return BE_FFN_SWIGLU;
    }
}

/* The backend's FFN op over x's rows for layer `layer`'s expert parts ex, as cfg->expert_kind says; y [n][H]. */
static be_ffn ffn_of(fwd_ws *ws, const fam_config *cfg, int layer, const tn_expert *ex, kern_act *x, int inter,
                     float *y) {
    float limit;
    const int kind = fwd_ffn_kind(cfg, layer, 0, &limit);
    return (be_ffn){.kind = kind, .limit = limit, .w = ex, .x = x, .inter = inter, .g = ws->ffn_g, .u = ws->ffn_u,
                    .mid_buf = ws->act[FWD_ACT_MID], .int8 = ws->int8 && x->n_tok <= FWD_BATCH && inter <= ws->act_cols,
                    .y = y, .ldy = (size_t)cfg->hidden};
}

be_ffn fwd_expert_ffn(fwd_ws *ws, const fam_config *cfg, int layer, const tn_expert *ex, kern_act *x, float *y) {
    return ffn_of(ws, cfg, layer, ex, x, cfg->moe_inter, y);
}

/* A SwiGLU (GeGLU: cfg->dense_act_geglu) FFN of the backbone over x into y [n][H]: layer `layer`'s shared expert
 * (shared 1: V4's clamp, Bailing hybrid's clip of the layer) or dense MLP (shared 0: never clipped). */
static void swiglu_ffn(fwd_ws *ws, const fam_config *cfg, int layer, int shared, const tn_mat *gate, const tn_mat *up,
                       const tn_mat *down, kern_act *x, int inter, float *y) {
    tn_expert ex = {.gate = *gate, .up = *up, .down = *down};
    be_ffn f = ffn_of(ws, cfg, layer, &ex, x, inter, y);
    f.kind = cfg->expert_kind == SL_EXPERT_SWIGLU_CLAMP ? BE_FFN_SWIGLU_CLAMP /* V4's shared is clamped */
             : cfg->dense_act_geglu ? BE_FFN_GEGLU : BE_FFN_SWIGLU;
    if (cfg->expert_kind == SL_EXPERT_SWIGLU_CLIP && shared) f.kind = fwd_ffn_kind(cfg, layer, 1, &f.limit);
    ws->be->ffn(ws->be, &f);
}

/* Gemma 4's router input (lw->router_norm): x's rows RMS-normed with router.scale times hidden^-0.5, FWD_BATCH
 * rows at a time through ws->ffn_x, then their logits (exact kernels) into out [n][E]. */
static void router_own_norm(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, const float *x, int n,
                            float *out) {
    const int H = cfg->hidden, E = cfg_router_rows(cfg);
    for (int r0 = 0; r0 < n; r0 += FWD_BATCH) {
        const int nb = n - r0 < FWD_BATCH ? n - r0 : FWD_BATCH;
        fwd_norm_rows(ws, x + (size_t)r0 * H, lw->router_norm, 0, cfg->eps, ws->ffn_x, nb, H);
        ws->be->scale(ws->be, ws->ffn_x, (size_t)nb * H, 1.0f / sqrtf((float)H), NULL);
        kern_act a;
        kern_act_init(&a, NULL, ws->ffn_x, (size_t)H, nb, H, 0);
        be_matmul(ws->be, &lw->router, &a, out + (size_t)r0 * E, (size_t)E);
    }
}

/* The shared expert over x into y [n][H]: its gate, up and down, or (Granite) one fused gate | up and down. */
static void shared_ffn(fwd_ws *ws, const fam_config *cfg, int layer, const fam_layer_w *lw, kern_act *x, float *y) {
    if (!lw->sh_gate_up.data) {
        swiglu_ffn(ws, cfg, layer, 1, &lw->sh_gate, &lw->sh_up, &lw->sh_down, x, cfg->shared_inter, y);
        return;
    }
    tn_expert ex = {.gate_up = lw->sh_gate_up, .down = lw->sh_down};
    be_ffn f = ffn_of(ws, cfg, layer, &ex, x, cfg->shared_inter, y);
    f.kind = BE_FFN_SWIGLU_FUSED;
    ws->be->ffn(ws->be, &f);
}

/* The logits of n rows' router (with its Linear bias, gpt-oss) into out [n][E]: of hx when given (its
 * int8 form shared with the experts), else of h [n][H] (exact kernels: the prefetch hint); of the residual x [n][H]
 * through the router's own norm when it has one (Gemma 4). */
static void router_logits(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, const float *x, const float *h,
                          int n, kern_act *hx, float *out) {
    const int H = cfg->hidden, E = cfg_router_rows(cfg); /* LongCat-Flash: its zero experts' rows too */
    if (lw->router_norm) {
        router_own_norm(ws, cfg, lw, x, n, out);
        return;
    }
    kern_act exact;
    if (!hx) {
        kern_act_init(&exact, NULL, h, (size_t)H, n, H, 0);
        hx = &exact;
    }
    be_matmul(ws->be, &lw->router, hx, out, (size_t)E);
    if (lw->router_lbias) ws->be->add_bias(ws->be, out, (size_t)E, lw->router_lbias, n, E);
}

/* Routes n rows: logits [n][E] (clobbered) into top_e / top_w [n][k] on the host. */
static sl_status route(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int layer, float *logits, int n,
                       int *top_e, float *top_w, sl_error *err) {
    const be_route r = {.cfg = cfg, .layer = layer, .n = n, .logits = logits, .bias = lw->router_bias,
                        .tokens = ws->tok, .tid2eid = lw->tid2eid, .expert_scale = lw->expert_scale, .top_e = top_e,
                        .top_w = top_w};
    sl_status st = ws->be->route(ws->be, &r);
    if (st) return err_set(err, st, "layer %d: routing: %s", layer, ws->be->errmsg(ws->be));
    if (ws->rt && rtrace_route(ws->rt, cfg_moe_slot(cfg, layer), n, top_e, top_w)) /* recorded or replayed */
        return err_set(err, SL_ENOMEM, "layer %d: out of memory for the routing trace", layer);
    return SL_OK;
}

static sl_status check_mat_part(const be_backend *be, const tn_mat *m, int rows, int cols, const char *name, int layer,
                                int e, sl_error *err) {
    if (!m->data || m->rows != rows || m->cols != cols || m->dtype <= DT_NONE || m->dtype >= DT_COUNT ||
        m->dtype == DT_F8E4M3 || (q_is_quant(m->dtype) && (!m->scales || m->group <= 0 || m->cols % m->group))) {
        return err_set(err, SL_EINVAL,
                      "layer %d expert %d: %s is %s [%d, %d], expected [%d, %d] f32/f16/bf16/q8/q4/q3/mxfp4", layer, e,
                      name, m->data ? dt_name(m->dtype) : "missing", m->rows, m->cols, rows, cols);
    }
    if (be_check_mat(be, m))
        return err_set(err, SL_EUNSUPPORTED, "layer %d expert %d: %s is %s, which the %s backend cannot multiply", layer,
                      e, name, dt_name(m->dtype), be->name);
    return 0;
}

static sl_status check_expert_kind(const be_backend *be, const fam_config *cfg, const tn_expert *ex, int layer, int e,
                                   sl_error *err) {
    const int I = cfg->moe_inter, H = cfg->hidden;
    if (cfg->expert_kind == SL_EXPERT_SWIGLU_FUSED) {
        int rc = check_mat_part(be, &ex->gate_up, 2 * I, H, "gate_up_proj", layer, e, err);
        return rc ? rc : check_mat_part(be, &ex->down, H, I, "down_proj", layer, e, err);
    }
    if (cfg->expert_kind != SL_EXPERT_GPTOSS) {
        const tn_mat *m[3] = {&ex->gate, &ex->up, &ex->down};
        const int rows[3] = {I, I, H}, cols[3] = {H, H, I};
        static const char *const names[3] = {"gate_proj", "up_proj", "down_proj"};
        for (int i = 0; i < 3; i++) {
            if (!m[i]->data || m[i]->rows != rows[i] || m[i]->cols != cols[i] || m[i]->dtype <= DT_NONE ||
                m[i]->dtype >= DT_COUNT || m[i]->dtype == DT_F8E4M3 ||
                (q_is_quant(m[i]->dtype) && (!m[i]->scales || m[i]->group <= 0 || m[i]->cols % m[i]->group))) {
                return err_set(err, SL_EINVAL,
                              "layer %d expert %d: %s is %s [%d, %d], expected [%d, %d] f32/f16/bf16/q8/q4/q3", layer,
                              e, names[i], m[i]->data ? dt_name(m[i]->dtype) : "missing", m[i]->rows, m[i]->cols,
                              rows[i], cols[i]);
            }
            if (be_check_mat(be, m[i]))
                return err_set(err, SL_EUNSUPPORTED,
                              "layer %d expert %d: %s is %s, which the %s backend cannot multiply", layer, e, names[i],
                              dt_name(m[i]->dtype), be->name);
        }
        return 0;
    }
    int rc = check_mat_part(be, &ex->gate_up, 2 * I, H, "gate_up_proj", layer, e, err);
    if (!rc) rc = check_mat_part(be, &ex->down, H, I, "down_proj", layer, e, err);
    if (!rc && (!ex->gate_up_bias || !ex->down_bias))
        rc = err_set(err, SL_EINVAL, "layer %d expert %d: %s missing", layer, e,
                    ex->gate_up_bias ? "down_proj_bias" : "gate_up_proj_bias");
    return rc;
}

sl_status fwd_check_expert(const be_backend *be, const fam_config *cfg, const tn_expert *ex, int layer, int e,
                           sl_error *err) {
    return check_expert_kind(be, cfg, ex, layer, e, err);
}

/* Llama 4's routed input (cfg->moe_scale_input): rows tok[0..cnt) of h (cnt <= FWD_BATCH) into ws->ffn_x, each
 * times its (token, slot) weight of top_w [..][k] (HOST), their activation into *a (the gather slot); those weights
 * then set to 1, what the combine multiplies the expert's output by (each (token, slot) is one expert's). */
static void scaled_rows(fwd_ws *ws, const fam_config *cfg, const float *h, const int *tok, const int *slot, int cnt,
                        float *top_w, kern_act *a) {
    const int H = cfg->hidden, k = cfg->n_experts_used;
    float s[FWD_BATCH];
    for (int i = 0; i < cnt; i++) {
        s[i] = top_w[(size_t)tok[i] * k + slot[i]];
        top_w[(size_t)tok[i] * k + slot[i]] = 1.0f;
    }
    ws->be->copy_rows(ws->be, ws->ffn_x, (size_t)H, NULL, h, (size_t)H, tok, cnt, H);
    ws->be->row_scale(ws->be, ws->ffn_x, (size_t)H, cnt, H, s);
    fwd_act(ws, a, FWD_ACT_GATHER, ws->ffn_x, (size_t)H, cnt, H);
}

/* Runs expert e over the tokens routed to it; outputs land in their (token, slot) cells of exp_out. hx: the
 * block's input ws->h, whose int8 form every expert reuses (gathered when the expert has a subset). */
static sl_status apply_expert(fwd_ws *ws, const fam_config *cfg, int layer, int e, const tn_expert *ex, kern_act *hx,
                              sl_error *err) {
    be_backend *be = ws->be;
    const int H = cfg->hidden, k = cfg->n_experts_used;
    int rc = check_expert_kind(be, cfg, ex, layer, e, err);
    if (rc) return rc;
    int start = e > 0 ? ws->e_count[e - 1] : 0, cnt = ws->e_count[e] - start, all = cnt == hx->n_tok;
    for (int i = 0; all && i < cnt; i++) all = ws->e_tok[start + i] == i;
    kern_act gx, *x = hx; /* every token of the batch, in order (a decode step): hx itself */
    if (cfg->moe_scale_input) { /* Llama 4: the rows times their weights, a fresh activation */
        scaled_rows(ws, cfg, ws->h, ws->e_tok + start, ws->e_slot + start, cnt, ws->top_w, &gx);
        x = &gx;
        all = 0;
    } else if (!all) {
        be->copy_rows(be, ws->ffn_x, (size_t)H, NULL, ws->h, (size_t)H, ws->e_tok + start, cnt, H);
        be->act_gather(be, &gx, ws->act[FWD_ACT_GATHER], hx, ws->e_tok + start, cnt, ws->ffn_x);
        x = &gx;
    }
    if (all && cnt == 1) { /* one token (a decode step): straight into its cell, no copy of the row after */
        const be_ffn f = ffn_of(ws, cfg, layer, ex, x, cfg->moe_inter, ws->exp_out + (size_t)ws->e_slot[start] * H);
        be->ffn(be, &f);
        return 0;
    }
    const be_ffn f = ffn_of(ws, cfg, layer, ex, x, cfg->moe_inter, ws->ffn_y);
    be->ffn(be, &f);
    /* (token, slot) cells: row t * k + s of exp_out [B*k][H] */
    int cell[FWD_BATCH];
    for (int i = 0; i < cnt; i++) cell[i] = ws->e_tok[start + i] * k + ws->e_slot[start + i];
    be->copy_rows(be, ws->exp_out, (size_t)H, cell, ws->ffn_y, (size_t)H, NULL, cnt, H);
    return 0;
}

/* The shared expert's SwiGLU output (before its sigmoid gate) into sh_y. */
static void shared_expert(fwd_ws *ws, const fam_config *cfg, int layer, const fam_layer_w *lw, kern_act *hx) {
    if (!lw->sh_gate.data && !lw->sh_gate_up.data) return;
    shared_ffn(ws, cfg, layer, lw, hx, ws->sh_y);
}

#define FUSED_MAX 32 /* experts of one decode step run together (backend.h ffn_multi) */

/* A decode step (one token) over n experts es[] whose parts ex[] are in the backend's memory (resident, or
 * the device tier's hits): gate and up of every one in one hand-off, then every down in another (the
 * ffn_multi op), instead of three hand-offs per expert. Per expert the same kernels on the same rows as
 * apply_expert, so bitwise the same outputs, each in its slot's cell of exp_out. */
static sl_status fused_ffn(fwd_ws *ws, const fam_config *cfg, int layer, const int *es, const tn_expert *ex, int n,
                           kern_act *hx, sl_error *err) {
    const int H = cfg->hidden, I = cfg->moe_inter;
    be_ffn f[FUSED_MAX];
    for (int i = 0; i < n; i++) {
        int e = es[i], rc = check_expert_kind(ws->be, cfg, &ex[i], layer, e, err);
        if (rc) return rc;
        int s = ws->e_slot[e > 0 ? ws->e_count[e - 1] : 0]; /* token 0's slot for e */
        f[i] = ffn_of(ws, cfg, layer, &ex[i], hx, I, ws->exp_out + (size_t)s * H);
        f[i].g = ws->ffn_g + (size_t)i * I;
        f[i].u = ws->ffn_u + (size_t)i * I;
        f[i].int8 = ws->int8 && n <= FWD_BATCH && I <= ws->act_cols;
    }
    ws->be->ffn_multi(ws->be, f, n);
    return 0;
}

/* Resident experts of a decode step: fetched (pointers into the expert section), then fused_ffn. */
static sl_status run_fused(fwd_ws *ws, const fam_config *cfg, int layer, const tn_expert_src *experts, int n_list,
                           kern_act *hx, sl_error *err) {
    tn_expert ex[FUSED_MAX];
    for (int i = 0; i < n_list; i++) {
        int e = ws->e_list[i];
        memset(&ex[i], 0, sizeof ex[i]);
        int rc = experts->get(experts->ctx, layer, e, &ex[i]);
        if (rc)
            return err_set(err, rc < 0 ? rc : SL_EIO, "layer %d expert %d: %s", layer, e,
                          experts->errmsg ? experts->errmsg(experts->ctx) : "expert source failed");
    }
    return fused_ffn(ws, cfg, layer, ws->e_list, ex, n_list, hx, err);
}

/* The resident experts ws->e_list[0 .. n_list) of n rows (grouped: ws->e_count holds each one's end of tok / slot)
 * through the backend's ffn_experts op, all in a few hand-offs: into out (+= each pair's weighted output, in pair
 * order) or cells. int8: the int8 kernels for the input rows and the down inputs, as the experts one at a time
 * would take them. The experts' parts and pair ranges go in the workspace's at_ex / at_start (sized with e_list:
 * nothing allocated in a step). 1 done, 0 not taken (nothing written), < 0 failed (err set; SL_ERANGE for more
 * experts than the workspace holds). */
static int experts_at_once(fwd_ws *ws, const fam_config *cfg, int layer, const tn_expert_src *experts, int n,
                           int n_list, const int *tok, const int *slot, const float *top_w, const float *h, int int8,
                           float *out, float *cells, sl_error *err) {
    float limit;
    if (!ws->be->ffn_experts || experts->begin || !experts->get || n_list < 1 || !int8 || cfg->moe_scale_input ||
        fwd_ffn_kind(cfg, layer, 0, &limit) != BE_FFN_SWIGLU)
        return 0;
    if (n_list > ws->e_cap)
        return err_set(err, SL_ERANGE, "layer %d: %d experts at once, the workspace holds %d", layer, n_list, ws->e_cap);
    tn_expert *ex = ws->at_ex;
    int *start = ws->at_start, rc = 0;
    memset(ex, 0, (size_t)n_list * sizeof *ex); /* what the source fills, from zero as for a lone expert */
    for (int i = 0; !rc && i < n_list; i++) {
        const int e = ws->e_list[i];
        start[i] = e > 0 ? ws->e_count[e - 1] : 0;
        start[i + 1] = ws->e_count[e];
        if ((rc = experts->get(experts->ctx, layer, e, &ex[i])))
            rc = err_set(err, rc < 0 ? rc : SL_EIO, "layer %d expert %d: %s", layer, e,
                         experts->errmsg ? experts->errmsg(experts->ctx) : "expert source failed");
        else rc = check_expert_kind(ws->be, cfg, &ex[i], layer, e, err);
    }
    if (!rc) {
        const be_experts q = {.n = n, .k = cfg->n_experts_used, .H = cfg->hidden, .I = cfg->moe_inter, .m = n_list,
                              .ex = ex, .start = start, .tok = tok, .slot = slot, .top_w = top_w, .h = h,
                              .int8 = int8, .out = out, .cells = cells};
        rc = ws->be->ffn_experts(ws->be, &q);
    }
    return rc;
}

static sl_status run_resident(fwd_ws *ws, const fam_config *cfg, int layer, const tn_expert_src *experts, int n_list,
                              kern_act *hx, sl_error *err) {
    if (hx->n_tok == 1 && n_list <= FUSED_MAX && n_list <= FWD_BATCH && cfg->expert_kind == SL_EXPERT_SWIGLU &&
        !cfg->moe_scale_input)
        return run_fused(ws, cfg, layer, experts, n_list, hx, err);
    /* a few tokens (a batched decode step): every expert at once, each output in its cell (apply_expert's int8:
     * hx's form gathered, the down inputs' form) */
    const int n = hx->n_tok;
    const int at_once = n > 1 ? experts_at_once(ws, cfg, layer, experts, n, n_list, ws->e_tok, ws->e_slot, ws->top_w,
                                                ws->h, hx->int8 && n <= FWD_BATCH && cfg->moe_inter <= ws->act_cols,
                                                NULL, ws->exp_out, err)
                              : 0;
    if (at_once) return at_once < 0 ? at_once : 0;
    for (int i = 0; i < n_list; i++) {
        int e = ws->e_list[i];
        tn_expert ex;
        memset(&ex, 0, sizeof ex);
        int rc = experts->get(experts->ctx, layer, e, &ex);
        if (rc)
            return err_set(err, rc < 0 ? rc : SL_EIO, "layer %d expert %d: %s", layer, e,
                          experts->errmsg ? experts->errmsg(experts->ctx) : "expert source failed");
        if ((rc = apply_expert(ws, cfg, layer, e, &ex, hx, err))) return rc;
    }
    return 0;
}

/* Streaming: reads for every miss go out first, the shared expert runs while they are in flight,
 * then each expert is applied as soon as it arrives. */
/* Prefetch hint: the next MoE layer's router applied to the current residual (normed with that
 * layer's own norm) predicts its experts well, since a layer changes the residual stream little. The
 * provider starts those reads now, so they overlap this layer's experts and the next layer's mixer.
 * Only for small batches (decode): a prefill chunk's union would be most experts. Uses ffn_x, router
 * and top_e as scratch (all free here: the layer's routing is in e_list, e_tok, e_slot and top_w). */
#define PREFETCH_MAX_TOKENS 4
static void hint_next(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *next_lw, int next_layer,
                      const tn_expert_src *experts, int n) {
    if (!ws->prefetch || !experts->prefetch || !next_lw || n > PREFETCH_MAX_TOKENS || !next_lw->router.data) return;
    const int H = cfg->hidden, E = cfg->n_experts, k = cfg->n_experts_used;
    /* V4: ws->x holds the streams; its block input ws->h is a row of H to norm */
    const float *xr = cfg->hc_mult > 0 ? ws->h : ws->x;
    fwd_norm_rows(ws, xr, next_lw->ffn_norm, cfg->zero_centred_norm, cfg->eps, ws->ffn_x, n, H);
    router_logits(ws, cfg, next_lw, xr, ws->ffn_x, n, NULL, ws->router);
    int *te = ws->top_e;
    const be_route r = {.cfg = cfg, .layer = next_layer, .n = n, .hint = 1, .logits = ws->router, .top_e = te};
    if (ws->be->route(ws->be, &r)) return; /* only a hint */
    memset(ws->pf_mark, 0, (size_t)E);
    int np = 0;
    for (int t = 0; t < n; t++)
        for (int s = 0; s < k; s++) {
            int e = te[(size_t)t * k + s];
            if (e < 0) break;
            if (e < E && !ws->pf_mark[e]) { /* (a zero expert has nothing to read) */
                ws->pf_mark[e] = 1;
                ws->pf_list[np++] = e;
            }
        }
    experts->prefetch(experts->ctx, next_layer, ws->pf_list, np, 0);
}

static sl_status run_streamed(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int layer,
                              const fam_layer_w *next_lw, int next_layer, const tn_expert_src *experts, int n,
                              int n_list, kern_act *hx, sl_error *err) {
    int rc = experts->begin(experts->ctx, layer, ws->e_list, n_list, 0), from_src = rc != 0;
    if (!rc) hint_next(ws, cfg, next_lw, next_layer, experts, n);
    if (!rc) fwd_hy_begin(ws, n, n_list - (experts->ready ? experts->ready(experts->ctx) : 0));
    if (!rc) shared_expert(ws, cfg, layer, lw, hx);
    /* a decode step's experts that are already in the backend's memory (the device tier's hits, which it
     * hands out first) run together as resident ones do (fused_ffn); the rest one at a time as they land */
    const int fuse = hx->n_tok == 1 && experts->ready && cfg->expert_kind == SL_EXPERT_SWIGLU && !cfg->moe_scale_input;
    for (int i = 0; !rc && i < n_list;) {
        int r = fuse ? experts->ready(experts->ctx) : 0;
        if (r > n_list - i) r = n_list - i;
        if (r > FUSED_MAX) r = FUSED_MAX;
        if (r >= 2) {
            int es[FUSED_MAX], got = 0;
            tn_expert ex[FUSED_MAX];
            for (; got < r; got++) {
                memset(&ex[got], 0, sizeof ex[got]);
                if ((rc = experts->next(experts->ctx, &es[got], &ex[got]))) break;
            }
            from_src = rc != 0;
            if (!rc) rc = fused_ffn(ws, cfg, layer, es, ex, r, hx, err);
            for (int j = 0; j < got; j++) experts->release(experts->ctx, es[j]);
            i += r;
            continue;
        }
        int e = -1;
        tn_expert ex;
        memset(&ex, 0, sizeof ex);
        rc = experts->next(experts->ctx, &e, &ex);
        if ((from_src = rc != 0)) break;
        /* a host expert is kept (its host slot held) and runs with the layer's others once the device's work and
         * the copies up are queued (moe_hybrid.c) */
        const int kept = ex.host && !(rc = check_expert_kind(ws->be, cfg, &ex, layer, e, err)) &&
                         !(rc = fwd_hy_add(ws, cfg, layer, e, &ex, err));
        if (!ex.host) rc = apply_expert(ws, cfg, layer, e, &ex, hx, err);
        if (!kept) experts->release(experts->ctx, e);
        i++;
    }
    const sl_status hst = fwd_hy_flush(ws, cfg, layer, experts, !rc, err);
    if (!rc) rc = hst;
    if (!rc) fwd_hy_end(ws);
    const sl_status st = rc < 0 ? rc : rc ? SL_EIO : SL_OK; /* a failed apply_expert has filled err already */
    if (st && from_src) err_set(err, st, "%s", experts->errmsg ? experts->errmsg(experts->ctx) : "expert source failed");
    experts->end(experts->ctx);
    return st;
}

/* LongCat-Flash's zero experts: each (token, slot) that chose one (index >= E) gets the token's row of ws->h in its
 * cell of exp_out, which the combine weighs as any expert's output. */
static void zero_cells(fwd_ws *ws, const fam_config *cfg, int n) {
    const int E = cfg->n_experts, k = cfg->n_experts_used, H = cfg->hidden;
    int cell[FWD_BATCH], tok[FWD_BATCH], m = 0;
    for (int t = 0; t < n; t++)
        for (int s = 0; s < k; s++) {
            if (ws->top_e[(size_t)t * k + s] >= E) {
                cell[m] = t * k + s;
                tok[m++] = t;
            }
            if (m == FWD_BATCH || (m && t == n - 1 && s == k - 1)) { /* FWD_BATCH cells a copy */
                ws->be->copy_rows(ws->be, ws->exp_out, (size_t)H, cell, ws->h, (size_t)H, tok, m, H);
                m = 0;
            }
        }
}

/* Routes the n rows on the host and runs their experts (streamed or resident), outputs in exp_out. */
static sl_status route_and_run(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int layer,
                               const fam_layer_w *next_lw, int next_layer, const tn_expert_src *experts, int n,
                               kern_act *hx, sl_error *err) {
    const int E = cfg->n_experts, k = cfg->n_experts_used;
    int rc = route(ws, cfg, lw, layer, ws->router, n, ws->top_e, ws->top_w, err);
    if (rc) return rc;
    if (cfg->zero_experts) zero_cells(ws, cfg, n);
    memset(ws->e_count, 0, (size_t)E * sizeof(int));
    for (int t = 0; t < n; t++)
        for (int s = 0; s < k; s++)
            if (ws->top_e[(size_t)t * k + s] < E) ws->e_count[ws->top_e[(size_t)t * k + s]]++;
    /* group (token, slot) pairs by expert: e_count becomes each expert's start offset */
    int off = 0;
    for (int e = 0; e < E; e++) {
        int c = ws->e_count[e];
        ws->e_count[e] = off;
        off += c;
    }
    for (int t = 0; t < n; t++)
        for (int s = 0; s < k; s++) {
            int e = ws->top_e[(size_t)t * k + s];
            if (e >= E) continue; /* a zero expert: its cell holds the token (zero_cells) */
            int at = ws->e_count[e]++;
            ws->e_tok[at] = t;
            ws->e_slot[at] = s;
        }
    /* now e_count[e] is the end of expert e's range; its start is the previous expert's end */
    int n_list = 0;
    for (int e = 0, start = 0; e < E; e++) {
        if (ws->e_count[e] > start) ws->e_list[n_list++] = e;
        start = ws->e_count[e];
    }
    if (ws->rm) { /* the experts on other ranks (moe_remote.c); the shared expert here while they compute */
        if ((rc = fwd_rm_send(ws, cfg, layer, ws->h, n, n_list, ws->e_tok, err))) return rc;
        shared_expert(ws, cfg, layer, lw, hx);
        return fwd_rm_recv_cells(ws, cfg, n_list, err);
    }
    rc = experts->begin ? run_streamed(ws, cfg, lw, layer, next_lw, next_layer, experts, n, n_list, hx, err)
                        : run_resident(ws, cfg, layer, experts, n_list, hx, err);
    return rc;
}

static int wide_on_device(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int layer,
                          const tn_expert_src *experts, int n, const float *h, float *out, float *logits,
                          sl_error *err);

/* A resident one-token step routed on the device (backend.h moe_resident): 1 done (*w_dev), 0 not taken. */
static int moe_on_device(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int layer,
                         const tn_expert_src *experts, int n, kern_act *hx, const float **w_dev, sl_error *err) {
    const int k = cfg->n_experts_used, I = cfg->moe_inter;
    if (!ws->be->moe_resident || experts->begin || ws->rm || ws->rt || n != 1 || !ws->int8 || k > FUSED_MAX || k > FWD_BATCH ||
        I > ws->act_cols || cfg->expert_kind == SL_EXPERT_GPTOSS || cfg->expert_kind > SL_EXPERT_SWIGLU_CLAMP ||
        lw->router_norm || cfg->moe_scale_input || cfg->router == SL_ROUTER_TOPK_SIGMOID ||
        cfg->router == SL_ROUTER_SOFTMAX_ZERO || cfg->zero_experts)
        return 0;
    const be_route r = {.cfg = cfg, .layer = layer, .n = 1, .logits = ws->router, .bias = lw->router_bias};
    const be_ffn f = ffn_of(ws, cfg, layer, NULL, hx, I, ws->exp_out);
    int rc = ws->be->moe_resident(ws->be, &r, experts, &f, w_dev);
    if (rc < 0) err_set(err, rc, "layer %d: experts on the device: %s", layer, ws->be->errmsg(ws->be));
    return rc;
}

int fwd_moe(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int layer, const fam_layer_w *next_lw,
            int next_layer, const tn_expert_src *experts, int n, sl_error *err) {
    be_backend *be = ws->be;
    const int H = cfg->hidden, k = cfg->n_experts_used;

    kern_act hx; /* ws->h, quantized once for the router, the shared expert and every routed expert */
    fwd_act(ws, &hx, FWD_ACT_IN, ws->h, (size_t)H, n, H);
    router_logits(ws, cfg, lw, ws->x, ws->h, n, &hx, ws->router);
    /* gpt-oss (no shared expert): routed, grouped and combined into out on the device as a layer-major block is
     * (wide_on_device: cuda_moex.cu), where route_and_run waited for the routing on the host and ran the experts one
     * at a time; every row bitwise (the same router kernel, each GEMM row its own token's, the same combine) */
    /* (SLUICE_CUDA_OSSDEC=1 until a device has run it: session 37 wrote it with no GPU left, docs/CUDA.md "Left";
     * a backend without moe_wide, the CPU's, never takes it) */
    static int oss_dec = -1;
    if (oss_dec < 0) oss_dec = getenv("SLUICE_CUDA_OSSDEC") && !strcmp(getenv("SLUICE_CUDA_OSSDEC"), "1");
    int rc = oss_dec && cfg->expert_kind == SL_EXPERT_GPTOSS && !lw->sh_gate.data && !lw->sh_gate_up.data
                 ? wide_on_device(ws, cfg, lw, layer, experts, n, ws->h, ws->out, ws->router, err)
                 : 0;
    if (rc) {
        if (rc > 0) fwd_hint_mat(ws, ws->ffn_next), ws->ffn_next = NULL;
        return rc < 0 ? rc : 0;
    }
    const float *w_dev = NULL;
    rc = moe_on_device(ws, cfg, lw, layer, experts, n, &hx, &w_dev, err);
    if (!rc) rc = route_and_run(ws, cfg, lw, layer, next_lw, next_layer, experts, n, &hx, err);
    if (rc < 0 || (rc > 0 && !w_dev)) return rc;
    if (!experts->begin && !ws->rm) shared_expert(ws, cfg, layer, lw, &hx);
    float *sg = NULL;
    if (lw->sh_gate.data && lw->sh_expert_gate.data) {
        sg = ws->ffn_x; /* free here: [n] gate logits */
        be_matmul(be, &lw->sh_expert_gate, &hx, sg, 1);
    }
    const be_combine c = {.n = n, .k = k, .H = H, .w = w_dev ? NULL : ws->top_w, .w_dev = w_dev, .y = ws->exp_out,
                          .sh_y = lw->sh_gate.data || lw->sh_gate_up.data ? ws->sh_y : NULL, .sh_gate = sg,
                          .out = ws->out};
    fwd_hint_mat(ws, ws->ffn_next); /* the combine, the residual and the next norm run alone (forward.c) */
    ws->ffn_next = NULL;
    be->combine(be, &c);
    return 0;
}

/* The prefetch hint of a layer-major pass: the experts the next MoE layer will probably take for these n
 * rows, ascending (the order that layer reads them in), given to the provider while this layer's reads run;
 * stream/cache.c reads them into the slots this layer lets go, overlapping this layer's experts and the next
 * layer's mixer. When this layer took at least 90% of the experts, n * k draws over E experts leave few out
 * in the next layer too: the hint is every expert, at no cost. Otherwise the next layer's router on x (the
 * residual before this layer's FFN, normed with the next layer's own norm), top-k of every row, as
 * hint_next does for a decode step. It only starts reads: no result depends on it. Scratch: ffn_x, the
 * gather activation slot, wb->router and wb->top_e (free once this layer is routed and grouped), pf_list,
 * pf_mark. */
static void hint_next_wide(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *next_lw, int next_layer,
                           const tn_expert_src *experts, int n, const float *x, int n_list, const fwd_wide *wb) {
    if (!ws->prefetch || !experts->prefetch || !next_lw || !next_lw->router.data || !x) return;
    const int H = cfg->hidden, E = cfg->n_experts, k = cfg->n_experts_used;
    int np = 0;
    if (10 * n_list >= 9 * E) {
        for (int e = 0; e < E; e++) ws->pf_list[np++] = e;
    } else {
        for (int r0 = 0; r0 < n; r0 += FWD_BATCH) {
            int nb = n - r0 < FWD_BATCH ? n - r0 : FWD_BATCH;
            fwd_norm_rows(ws, x + (size_t)r0 * H, next_lw->ffn_norm, cfg->zero_centred_norm, cfg->eps, ws->ffn_x, nb, H);
            kern_act a;
            fwd_act(ws, &a, FWD_ACT_GATHER, ws->ffn_x, (size_t)H, nb, H);
            router_logits(ws, cfg, next_lw, x + (size_t)r0 * H, ws->ffn_x, nb, &a,
                          wb->router + (size_t)r0 * cfg_router_rows(cfg));
        }
        /* top-k of the logits (for the sigmoid router an approximation): the route op's hint, into wb->top_e
         * (free once this layer is grouped) */
        const be_route r = {.cfg = cfg, .layer = next_layer, .n = n, .hint = 1, .logits = wb->router, .top_e = wb->top_e};
        if (ws->be->route(ws->be, &r)) return; /* only a hint */
        memset(ws->pf_mark, 0, (size_t)E);
        for (int t = 0; t < n; t++)
            for (int s = 0; s < k && wb->top_e[(size_t)t * k + s] >= 0; s++)
                if (wb->top_e[(size_t)t * k + s] < E) /* not a zero expert */
                    ws->pf_mark[wb->top_e[(size_t)t * k + s]] = 1;
        for (int e = 0; e < E; e++)
            if (ws->pf_mark[e]) ws->pf_list[np++] = e;
    }
    experts->prefetch(experts->ctx, next_layer, ws->pf_list, np, 1);
}

/* The first MoE layer's hint of a layer-major pass, given before its mixer runs, so that the disk reads that
 * layer's experts while the embeddings, the mixer and the router are computed (else it idles until the
 * routing and the mixer waits for the whole layer's first reads: ~6% of a 512-token prefill of the 30B
 * shape, docs/PERFORMANCE.md "At scale" §3). When n draws of k experts from E are expected to take at least
 * 90% of them (E (1 - (1 - k/E)^n); 512 tokens of the 30B shape: all 128), every expert; otherwise
 * nothing (see below). */
void fwd_moe_hint_first(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int layer,
                        const tn_expert_src *experts, int n, const float *x, const fwd_wide *wb) {
    if (!experts->begin || n < 1) return;
    const int E = cfg->n_experts, k = cfg->n_experts_used;
    double miss = 1.0;
    for (int t = 0; t < n && miss > 1e-6; t++) miss *= 1.0 - (double)k / E;
    /* only when nearly every expert will be read: the cache does not score this hint (it comes between
     * requests), so a router guess for a few tokens — a continuous-batching decode step — would read and
     * evict whatever its accuracy */
    if (miss > 0.1) return;
    hint_next_wide(ws, cfg, lw, layer, experts, n, x, E, wb);
}

/* The shared expert of a layer-major block over h's n rows, into wb->sh_y (FWD_BATCH rows at a time). */
static void shared_wide(fwd_ws *ws, const fam_config *cfg, int layer, const fam_layer_w *lw, int n, const float *h,
                        const fwd_wide *wb) {
    const int H = cfg->hidden;
    if (!lw->sh_gate.data && !lw->sh_gate_up.data) return;
    for (int r0 = 0; r0 < n; r0 += FWD_BATCH) {
        int nb = n - r0 < FWD_BATCH ? n - r0 : FWD_BATCH;
        kern_act a;
        fwd_act(ws, &a, FWD_ACT_IN, h + (size_t)r0 * H, (size_t)H, nb, H);
        shared_ffn(ws, cfg, layer, lw, &a, wb->sh_y + (size_t)r0 * H);
    }
}

/* The routed experts of a layer-major block on the backend's device (backend.h moe_wide): resident experts,
 * int8 activations, SwiGLU or gpt-oss's (its biases and clamp: the CUDA backend's cuda_moex.cu, where the per-expert
 * loop of routed_wide waited for the routing and launched ~10 kernels an expert). 1 done (out written), 0 not taken,
 * < 0 failed. */
static int wide_on_device(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int layer,
                          const tn_expert_src *experts, int n, const float *h, float *out, float *logits,
                          sl_error *err) {
    if (!ws->be->moe_wide || experts->begin || ws->rm || ws->rt || !ws->int8 || cfg->moe_inter > ws->act_cols ||
        cfg->expert_kind > SL_EXPERT_SWIGLU_CLAMP || lw->router_norm ||
        cfg->moe_scale_input || cfg->router == SL_ROUTER_TOPK_SIGMOID || cfg->router == SL_ROUTER_SOFTMAX_ZERO ||
        cfg->zero_experts)
        return 0;
    const be_route r = {.cfg = cfg, .layer = layer, .n = n, .logits = logits, .bias = lw->router_bias};
    int rc = ws->be->moe_wide(ws->be, &r, experts, h, cfg->moe_inter, out);
    if (rc < 0) err_set(err, rc, "layer %d: experts on the device: %s", layer, ws->be->errmsg(ws->be));
    return rc;
}

/* LongCat-Flash's zero experts in a layer-major block, after every real one (so each token's sum takes them last,
 * as transformers adds its identity output): zero expert z's (token, slot) pairs, FWD_BATCH at a time, their rows
 * of h gathered into ffn_y and added into out with their weights. */
static void zero_wide(fwd_ws *ws, const fam_config *cfg, int n, const float *h, float *out, const fwd_wide *wb) {
    const int E = cfg->n_experts, k = cfg->n_experts_used, H = cfg->hidden;
    for (int z = E; z < E + cfg->zero_experts; z++) {
        int tok[FWD_BATCH], slot[FWD_BATCH], m = 0;
        for (int t = 0; t <= n; t++) {
            for (int s = 0; t < n && s < k; s++)
                if (wb->top_e[(size_t)t * k + s] == z) {
                    tok[m] = t;
                    slot[m++] = s;
                }
            if (m && (m > FWD_BATCH - k || t == n)) {
                ws->be->copy_rows(ws->be, ws->ffn_y, (size_t)H, NULL, h, (size_t)H, tok, m, H);
                ws->be->combine_rows(ws->be, out, H, k, tok, slot, wb->top_w, ws->ffn_y, m);
                m = 0;
            }
        }
    }
}

/* Expert e (parts ex, checked here) over its rows of a layer-major block (wb's grouping: e_count's ends), FWD_BATCH
 * rows at a time, each output added into its token's row of out by combine_rows: routed_wide's step per expert. */
static sl_status expert_wide(fwd_ws *ws, const fam_config *cfg, int layer, int e, const tn_expert *ex, const float *h,
                             float *out, const fwd_wide *wb, sl_error *err) {
    be_backend *be = ws->be;
    const int H = cfg->hidden, k = cfg->n_experts_used;
    int rc = check_expert_kind(be, cfg, ex, layer, e, err);
    const int start = e > 0 ? ws->e_count[e - 1] : 0, end = ws->e_count[e];
    for (int c0 = start; !rc && c0 < end; c0 += FWD_BATCH) {
        int cnt = end - c0 < FWD_BATCH ? end - c0 : FWD_BATCH;
        kern_act a;
        if (cfg->moe_scale_input) {
            scaled_rows(ws, cfg, h, wb->e_tok + c0, wb->e_slot + c0, cnt, wb->top_w, &a);
        } else {
            be->copy_rows(be, ws->ffn_x, (size_t)H, NULL, h, (size_t)H, wb->e_tok + c0, cnt, H);
            fwd_act(ws, &a, FWD_ACT_GATHER, ws->ffn_x, (size_t)H, cnt, H);
        }
        const be_ffn f = ffn_of(ws, cfg, layer, ex, &a, cfg->moe_inter, ws->ffn_y);
        be->ffn(be, &f);
        be->combine_rows(be, out, H, k, wb->e_tok + c0, wb->e_slot + c0, wb->top_w, ws->ffn_y, cnt);
    }
    return rc;
}

/* A layer-major block of more rows than this takes grouped_wide when its source has room() (the device tier). */
#define SEG_MIN_TOK 8
/* While a run of the list has misses, a batch takes at most max(SEG_MIN_BATCH, the list / SEG_SPLIT) experts, so that
 * a batch's copies up run under the compute of the batch before; a run of hits goes in one batch. */
#define SEG_SPLIT 4
#define SEG_MIN_BATCH 16

/* Whether the backend's moe_batch may take this layer's experts: moe_wide's case (wide_on_device: SwiGLU or gpt-oss's),
 * routed on the host */
static int batch_on_device(const fwd_ws *ws, const fam_config *cfg) {
    return ws->be->moe_batch && ws->int8 && cfg->moe_inter <= ws->act_cols &&
           (cfg->expert_kind == SL_EXPERT_SWIGLU || cfg->expert_kind == SL_EXPERT_GPTOSS) &&
           !cfg->moe_scale_input && cfg->router != SL_ROUTER_TOPK_SIGMOID && cfg->router != SL_ROUTER_SOFTMAX_ZERO &&
           !cfg->zero_experts;
}

/* The experts of a layer-major block (routed and grouped into wb, n_list of them in ws->e_list, the source begun in
 * order) from a source that can hold many at once (tn_expert_src room: the device tier): the list in batches, each
 * held whole from its experts' next() to their release(). A batch runs on the device as one grouped FFN over all its
 * pairs (be_backend moe_batch: moe_wide's kernels, every output in its (token, slot) cell, the last batch's call
 * sums the cells into out); where the backend has no moe_batch (the CPU, the tests' stand-in for the device) or does
 * not take these experts, each expert of the batch in turn as routed_wide does (expert_wide). Either way the bits of
 * routed_wide's loop (backend.h moe_batch). Returns as routed_wide; the caller ends the request. */
static sl_status grouped_wide(fwd_ws *ws, const fam_config *cfg, int layer, const tn_expert_src *experts, int n,
                              int n_list, const float *h, float *out, const fwd_wide *wb, sl_error *err) {
    be_backend *be = ws->be;
    const int H = cfg->hidden, k = cfg->n_experts_used;
    tn_expert *ex = malloc((size_t)(n_list > 0 ? n_list : 1) * sizeof *ex);
    int *es = malloc((size_t)(n_list > 0 ? n_list : 1) * sizeof *es), *te = malloc((size_t)n * (size_t)k * sizeof *te);
    if (!ex || !es || !te) {
        free(ex);
        free(es);
        free(te);
        return err_set(err, SL_ENOMEM, "layer %d: out of memory for a batch of experts", layer);
    }
    /* the layer's choice [n][k] again, from the grouping (wb->top_e is the prefetch hint's scratch by now:
     * hint_next_wide), a zero expert's pairs -1 */
    for (int p = 0; p < n * k; p++) te[p] = -1;
    for (int i = 0; i < n_list; i++) {
        const int e = ws->e_list[i];
        for (int at = e > 0 ? ws->e_count[e - 1] : 0; at < ws->e_count[e]; at++) te[wb->e_tok[at] * k + wb->e_slot[at]] = e;
    }
    int rc = 0, dev = batch_on_device(ws, cfg), split = (n_list + SEG_SPLIT - 1) / SEG_SPLIT;
    if (split < SEG_MIN_BATCH) split = SEG_MIN_BATCH;
    if (!n_list) be->zero(be, out, (size_t)n * H * sizeof(float)); /* (every row chose zero experts only) */
    for (int i = 0; !rc && i < n_list;) {
        int m = experts->room(experts->ctx), r = experts->ready ? experts->ready(experts->ctx) : 0, got = 0;
        if (m > n_list - i) m = n_list - i;
        if (r < m && m > split) m = r > split ? r : split;
        if (m < 1) m = 1; /* no slot: next() says the tier is too small for the request, as before */
        for (; !rc && got < m; got++) {
            memset(&ex[got], 0, sizeof ex[got]);
            es[got] = ws->e_list[i + got];
            int e = -1;
            if ((rc = experts->next(experts->ctx, &e, &ex[got]))) {
                err_set(err, rc < 0 ? rc : SL_EIO, "%s",
                        experts->errmsg ? experts->errmsg(experts->ctx) : "expert source failed");
                break;
            }
            if (e != es[got]) {
                rc = err_set(err, SL_EINVAL, "layer %d: expert source delivered expert %d out of order (expected %d)",
                             layer, e, es[got]);
                es[got] = e; /* released below as what was delivered */
            } else rc = check_expert_kind(be, cfg, &ex[got], layer, e, err);
        }
        if (!rc && dev) {
            const be_moe_batch q = {.n = n, .k = k, .E = cfg->n_experts, .H = H, .I = cfg->moe_inter, .h = h,
                                    .top_e = te, .top_w = wb->top_w, .es = es, .ex = ex, .m = m, .first = i == 0,
                                    .last = i + m == n_list, .out = out,
                                    .limit = cfg->expert_kind == SL_EXPERT_GPTOSS ? (float)cfg->swiglu_limit : 0};
            int d = be->moe_batch(be, &q);
            if (d < 0) rc = err_set(err, d, "layer %d: experts on the device: %s", layer, be->errmsg(be));
            else if (!d && i == 0) dev = 0; /* not taken: each expert in turn, from the first */
            else if (!d) rc = err_set(err, SL_EINVAL, "layer %d: the backend took a batch of experts, then not", layer);
        }
        if (!rc && !dev) {
            if (i == 0) be->zero(be, out, (size_t)n * H * sizeof(float));
            for (int j = 0; !rc && j < m; j++) rc = expert_wide(ws, cfg, layer, es[j], &ex[j], h, out, wb, err);
        }
        for (int j = 0; j < got; j++) experts->release(experts->ctx, es[j]);
        i += m;
    }
    free(ex);
    free(es);
    free(te);
    return rc;
}

/* fwd_moe_wide's routed experts through the backend's ops: routed on the host's copy of the choice, grouped
 * here, every expert fetched once in ascending order (streamed or resident), its rows in FWD_BATCH pieces,
 * each output added into its token's row of out; the shared expert (wb->sh_y) while the first reads fly. */
static sl_status routed_wide(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int layer,
                             const fam_layer_w *next_lw, int next_layer, const tn_expert_src *experts, int n,
                             const float *x, const float *h, float *out, const fwd_wide *wb, sl_error *err) {
    be_backend *be = ws->be;
    const int H = cfg->hidden, E = cfg->n_experts, k = cfg->n_experts_used;
    int rc = route(ws, cfg, lw, layer, wb->router, n, wb->top_e, wb->top_w, err);
    if (rc) return rc;
    memset(ws->e_count, 0, (size_t)E * sizeof(int));
    for (int t = 0; t < n; t++)
        for (int s = 0; s < k; s++)
            if (wb->top_e[(size_t)t * k + s] < E) ws->e_count[wb->top_e[(size_t)t * k + s]]++;
    int off = 0, n_list = 0;
    for (int e = 0; e < E; e++) {
        int c = ws->e_count[e];
        ws->e_count[e] = off;
        off += c;
        if (c) ws->e_list[n_list++] = e;
    }
    for (int t = 0; t < n; t++)
        for (int s = 0; s < k; s++) {
            int e = wb->top_e[(size_t)t * k + s];
            if (e >= E) continue; /* a zero expert: zero_wide, after the real ones */
            int at = ws->e_count[e]++;
            wb->e_tok[at] = t;
            wb->e_slot[at] = s;
        }
    if (ws->rm) { /* the experts on other ranks, added in the same order (moe_remote.c) */
        if ((rc = fwd_rm_send(ws, cfg, layer, h, n, n_list, wb->e_tok, err))) return rc;
        shared_wide(ws, cfg, layer, lw, n, h, wb);
        be->zero(be, out, (size_t)n * H * sizeof(float));
        rc = fwd_rm_recv_wide(ws, cfg, n_list, wb, out, err);
        if (!rc && cfg->zero_experts) zero_wide(ws, cfg, n, h, out, wb); /* after the real ones, as below */
        return rc;
    }
    /* in order; 2: a layer of a pass over many tokens (a prefill chunk), 1: a few (a decode batch) */
    rc = experts->begin ? experts->begin(experts->ctx, layer, ws->e_list, n_list, n > FWD_BATCH ? 2 : 1) : 0;
    if (rc) {
        err_set(err, rc, "%s", experts->errmsg ? experts->errmsg(experts->ctx) : "expert source failed");
        if (experts->end) experts->end(experts->ctx);
        return rc;
    }
    if (experts->begin) hint_next_wide(ws, cfg, next_lw, next_layer, experts, n, x, n_list, wb);
    shared_wide(ws, cfg, layer, lw, n, h, wb); /* while the first reads are in flight */
    /* the device tier: batches held whole, on a backend with moe_batch; the CPU backend (where the tier is a second
     * host cache) takes the same batches expert by expert, which is how make test checks them without a device */
    if (experts->begin && experts->room && n > SEG_MIN_TOK && (be->moe_batch || be->is_host)) {
        rc = grouped_wide(ws, cfg, layer, experts, n, n_list, h, out, wb, err);
        experts->end(experts->ctx);
        if (!rc && cfg->zero_experts) zero_wide(ws, cfg, n, h, out, wb);
        return rc < 0 ? rc : rc ? SL_EIO : SL_OK;
    }
    be->zero(be, out, (size_t)n * H * sizeof(float));
    /* resident: every expert at once where the backend can (expert_wide's int8: the gathered rows' form, FWD_BATCH
     * rows a piece, and the down inputs') */
    rc = experts_at_once(ws, cfg, layer, experts, n, n_list, wb->e_tok, wb->e_slot, wb->top_w, h,
                         ws->int8 && ws->mb >= FWD_BATCH && H <= ws->act_cols && cfg->moe_inter <= ws->act_cols, out,
                         NULL, err);
    if (rc) {
        if (rc > 0) n_list = rc = 0; /* done */
        else return rc;
    }
    for (int i = 0; i < n_list && !rc; i++) {
        int e = ws->e_list[i], got = e;
        tn_expert ex;
        memset(&ex, 0, sizeof ex);
        rc = experts->begin ? experts->next(experts->ctx, &got, &ex) : experts->get(experts->ctx, layer, e, &ex);
        if (rc) {
            err_set(err, rc < 0 ? rc : SL_EIO, "%s",
                   experts->errmsg ? experts->errmsg(experts->ctx) : "expert source failed");
            break;
        }
        if (got != e)
            rc = err_set(err, SL_EINVAL, "layer %d: expert source delivered expert %d out of order (expected %d)", layer,
                        got, e);
        if (!rc) rc = expert_wide(ws, cfg, layer, e, &ex, h, out, wb, err);
        if (experts->begin) experts->release(experts->ctx, got);
    }
    if (experts->begin) experts->end(experts->ctx);
    if (!rc && cfg->zero_experts) zero_wide(ws, cfg, n, h, out, wb);
    return rc < 0 ? rc : rc ? SL_EIO : SL_OK;
}

/* The MoE block over n tokens at once (layer-major prefill): every expert the n tokens chose is fetched
 * once, in ascending order, and its output is added straight into each of its tokens' rows of out, so
 * no per-(token, slot) buffer is needed. Per token that is the same sequence of operations as
 * fwd_moe's ((0 + w_a y_a) + w_b y_b) + ... over ascending experts, then the gated shared expert, and
 * every matmul row depends only on its own token, so the result is bitwise fwd_moe's, chunk by chunk.
 * A backend with moe_wide runs resident experts on its device instead, grouped there (the same sums).
 * h: [n][H] normed input; out: [n][H]. next_lw / next_layer: the next MoE layer (NULL: none) and x [n][H]
 * the residual h was normed from, for the prefetch hint. Scratch: wb (sized for n), and ws's micro-batch
 * buffers (the router's rows ws->mb at a time). */
sl_status fwd_moe_wide(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int layer, const fam_layer_w *next_lw,
                       int next_layer, const tn_expert_src *experts, int n, const float *x, const float *h, float *out,
                       const fwd_wide *wb, sl_error *err) {
    const int H = cfg->hidden, k = cfg->n_experts_used;
    if (!q_bits(lw->router.dtype)) /* a float router has no int8 form: every row in one call (on a device, a
                                    * launch per ws->mb rows cost 64 times the work at 512 rows) */
        router_logits(ws, cfg, lw, x, h, n, NULL, wb->router);
    else
        for (int r0 = 0; r0 < n; r0 += ws->mb) { /* ws->mb rows at a time through the int8 slot */
            int nb = n - r0 < ws->mb ? n - r0 : ws->mb;
            kern_act a;
            fwd_act(ws, &a, FWD_ACT_IN, h + (size_t)r0 * H, (size_t)H, nb, H);
            router_logits(ws, cfg, lw, x + (size_t)r0 * H, h + (size_t)r0 * H, nb, &a,
                          wb->router + (size_t)r0 * cfg_router_rows(cfg));
        }
    int rc = wide_on_device(ws, cfg, lw, layer, experts, n, h, out, wb->router, err);
    if (rc < 0) return rc;
    if (rc) shared_wide(ws, cfg, layer, lw, n, h, wb);
    else if ((rc = routed_wide(ws, cfg, lw, layer, next_lw, next_layer, experts, n, x, h, out, wb, err)))
        return rc;
    if (lw->sh_gate.data || lw->sh_gate_up.data) {
        if (lw->sh_expert_gate.data) fwd_matmul(ws, &lw->sh_expert_gate, h, (size_t)H, wb->sg, 1, n, FWD_ACT_IN);
        const be_combine c = {.n = n, .k = k, .H = H, .sh_y = wb->sh_y, .sh_gate = lw->sh_expert_gate.data ? wb->sg : NULL,
                              .out = out};
        ws->be->combine(ws->be, &c);
    }
    return SL_OK;
}

int fwd_dense_mlp(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int n) {
    kern_act hx;
    fwd_act(ws, &hx, FWD_ACT_IN, ws->h, (size_t)cfg->hidden, n, cfg->hidden);
    swiglu_ffn(ws, cfg, 0, 0, &lw->mlp_gate, &lw->mlp_up, &lw->mlp_down, &hx, cfg->dense_inter, ws->out);
    return 0;
}
