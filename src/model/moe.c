/*
 * moe.c — feed-forward blocks: routed MoE with optional gated shared expert, and the dense SwiGLU MLP
 * (MODELS.md 3.4).
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
 * order in which a provider delivers experts cannot change the result.
 */
#include <math.h>
#include <string.h>
#include <xxhash.h>

#include "model/fwd_internal.h"
#include "quant/quant.h"
#include "sluice.h"

/* Top-k of x [E] by repeated argmax (ties go to the lower index); marks the taken entries in x with
 * `taken` (below every value), returns them in top_e in the order taken. */
static void top_k(float *x, int E, int k, float taken, int *top_e, float *top_v) {
    for (int s = 0; s < k; s++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (x[e] != taken && (best < 0 || x[e] > x[best])) best = e;
        top_e[s] = best;
        top_v[s] = x[best];
        x[best] = taken;
    }
}

/* SL_ROUTER_SIGMOID_GROUP for one token. p [E] receives the sigmoid scores (may alias logits); the choice
 * ranks b = p + bias (f32, as transformers adds them): each group of E / n_group experts is scored by the sum
 * of its top-2 b, the topk_group best groups are kept, and the k best b among their experts are taken (ties go
 * to the lower index). Weights are the chosen experts' unbiased p, divided by (their sum + 1e-20) when renorm,
 * times routed_scale. bias NULL: all zero. cfg_groups_ok(cfg) holds (checked at open). */
static void route_sigmoid_group(const sl_config *cfg, const float *bias, const float *logits, int *top_e, float *top_w,
                                float *p) {
    const int E = cfg->n_experts, k = cfg->n_experts_used, G = cfg->n_group, per = E / G;
    for (int e = 0; e < E; e++) p[e] = kern_sigmoid(logits[e]);
#define BIASED(e) (bias ? p[e] + bias[e] : p[e])
    float gscore[SL_ROUTER_MAX_GROUPS];
    for (int g = 0; g < G; g++) {
        float a = -INFINITY, b = -INFINITY; /* the group's best and second best */
        for (int e = g * per; e < (g + 1) * per; e++) {
            float v = BIASED(e);
            if (v > a) {
                b = a;
                a = v;
            } else if (v > b) {
                b = v;
            }
        }
        gscore[g] = a + b;
    }
    unsigned char allowed[SL_ROUTER_MAX_EXPERTS];
    memset(allowed, 0, (size_t)E);
    for (int s = 0; s < cfg->topk_group; s++) {
        int best = -1;
        for (int g = 0; g < G; g++)
            if (gscore[g] != -INFINITY && (best < 0 || gscore[g] > gscore[best])) best = g;
        if (best < 0) break;
        gscore[best] = -INFINITY;
        memset(allowed + (size_t)best * per, 1, (size_t)per);
    }
    for (int s = 0; s < k; s++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (allowed[e] && (best < 0 || BIASED(e) > BIASED(best))) best = e;
        if (best < 0) best = 0; /* only when every score is NaN */
        allowed[best] = 0;
        top_e[s] = best;
        top_w[s] = p[best];
    }
#undef BIASED
    if (cfg->norm_topk) {
        float wsum = 0.0f;
        for (int s = 0; s < k; s++) wsum += top_w[s];
        wsum += 1e-20f;
        for (int s = 0; s < k; s++) top_w[s] /= wsum;
    }
    const float scale = (float)cfg->routed_scale;
    for (int s = 0; s < k; s++) top_w[s] *= scale;
}

/* Uniform routing (sl_routing, cfg->uniform_routing): k distinct experts drawn uniformly by splitmix64
 * seeded with a hash of (routing_seed, layer, the token's router logits), weights 1/k, in ascending
 * expert order. A function of the token's own logits, so streamed == resident and batch == alone hold
 * as for the model's routers; distinct tokens draw independently. k <= E (checked at open). */
static void route_uniform(const sl_config *cfg, int layer, const float *logits, int *top_e, float *top_w) {
    const int E = cfg->n_experts, k = cfg->n_experts_used;
    uint64_t s = XXH3_64bits_withSeed(logits, (size_t)E * sizeof(float),
                                      cfg->routing_seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(layer + 1)));
    for (int n = 0; n < k;) {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        int e = (int)(((z >> 32) * (uint64_t)E) >> 32), at = n;
        while (at > 0 && top_e[at - 1] > e) at--;
        if (at > 0 && top_e[at - 1] == e) continue; /* drawn already */
        memmove(top_e + at + 1, top_e + at, (size_t)(n - at) * sizeof *top_e);
        top_e[at] = e;
        n++;
    }
    for (int i = 0; i < k; i++) top_w[i] = 1.0f / (float)k;
}

/* Routes one token (config.h SL_ROUTER_*): p [E] is scratch (may alias logits); bias: the layer's
 * e_score_correction_bias [E] or NULL. */
static void route_token(const sl_config *cfg, const float *bias, const float *logits, int *top_e, float *top_w,
                        float *p) {
    const int E = cfg->n_experts, k = cfg->n_experts_used, kind = cfg->router, renorm = cfg->norm_topk;
    if (kind == SL_ROUTER_SIGMOID_GROUP) {
        route_sigmoid_group(cfg, bias, logits, top_e, top_w, p);
    } else if (kind == SL_ROUTER_TOPK_SOFTMAX) { /* top-k of the logits, then softmax over those k */
        for (int e = 0; e < E; e++) p[e] = logits[e];
        top_k(p, E, k, -INFINITY, top_e, top_w);
        const float mx = top_w[0];
        double sum = 0.0;
        for (int s = 0; s < k; s++) {
            top_w[s] = expf(top_w[s] - mx);
            sum += top_w[s];
        }
        const float fsum = (float)sum;
        for (int s = 0; s < k; s++) top_w[s] /= fsum;
    } else { /* softmax over all E, then top-k, renormalised on request */
        float mx = -INFINITY;
        for (int e = 0; e < E; e++)
            if (logits[e] > mx) mx = logits[e];
        double sum = 0.0;
        for (int e = 0; e < E; e++) {
            p[e] = expf(logits[e] - mx);
            sum += p[e];
        }
        const float fsum = (float)sum;
        for (int e = 0; e < E; e++) p[e] /= fsum;
        top_k(p, E, k, -1.0f, top_e, top_w);
        if (renorm) {
            float wsum = 0.0f;
            for (int s = 0; s < k; s++) wsum += top_w[s];
            for (int s = 0; s < k; s++) top_w[s] /= wsum;
        }
    }
    /* insertion sort by expert index: the fixed combine order */
    for (int s = 1; s < k; s++) {
        int e = top_e[s];
        float w = top_w[s];
        int i = s - 1;
        for (; i >= 0 && top_e[i] > e; i--) {
            top_e[i + 1] = top_e[i];
            top_w[i + 1] = top_w[i];
        }
        top_e[i + 1] = e;
        top_w[i + 1] = w;
    }
}

/* y [n][H] = down(silu(gate x) * up x) for x, an activation [n][H] (quantized once for gate and up);
 * g, u: [n][inter] scratch. */
static void swiglu_ffn(fwd_ws *ws, sl_pool *pool, const sl_mat *gate, const sl_mat *up, const sl_mat *down, kern_act *x,
                       int inter, float *g, float *u, float *y) {
    const kern_ops *ops = ws->ops;
    const int n = x->n_tok, H = x->cols;
    const kern_mm gu[2] = {{gate, x, g, (size_t)inter}, {up, x, u, (size_t)inter}};
    kern_matmul_multi(ops, pool, gu, 2);
    for (int t = 0; t < n; t++) ops->swiglu(g + (size_t)t * inter, u + (size_t)t * inter, g + (size_t)t * inter, inter);
    fwd_matmul(ws, pool, down, g, (size_t)inter, y, (size_t)H, n, FWD_ACT_MID);
}

static int check_expert(const sl_expert *ex, int I, int H, int layer, int e, char *err, size_t errlen);

/* SL_EXPERT_GPTOSS (modeling_gpt_oss.py GptOssExperts): gu = gate_up x + b [n][2I], rows interleaved (gate even, up
 * odd); gate clamped above at limit, up to [-limit, limit]; act = (up + 1) * gate * sigmoid(1.702 gate) [n][I];
 * y = down act + b. gu: [n][2I], act: [n][I] scratch. */
static void gptoss_ffn(fwd_ws *ws, sl_pool *pool, const sl_expert *ex, float limit, kern_act *x, int H, int I,
                       float *gu, float *act, float *y) {
    const float alpha = 1.702f;
    const int n = x->n_tok;
    kern_matmul_act(ws->ops, pool, &ex->gate_up, x, gu, (size_t)(2 * I));
    for (int t = 0; t < n; t++) {
        const float *g = gu + (size_t)t * 2 * I;
        float *a = act + (size_t)t * I;
        for (int i = 0; i < I; i++) {
            float gate = g[2 * i] + ex->gate_up_bias[2 * i], up = g[2 * i + 1] + ex->gate_up_bias[2 * i + 1];
            gate = gate > limit ? limit : gate;
            up = up > limit ? limit : up < -limit ? -limit : up;
            float glu = gate * kern_sigmoid(gate * alpha);
            a[i] = (up + 1.0f) * glu;
        }
    }
    fwd_matmul(ws, pool, &ex->down, act, (size_t)I, y, (size_t)H, n, FWD_ACT_MID);
    for (int t = 0; t < n; t++)
        for (int i = 0; i < H; i++) y[(size_t)t * H + i] += ex->down_bias[i];
}

/* One expert over x (an activation of n gathered rows [n][H]) into y [n][H], as cfg->expert_kind says;
 * g, u: [n][n_ffn] scratch. */
static void expert_ffn(fwd_ws *ws, sl_pool *pool, const sl_config *cfg, const sl_expert *ex, kern_act *x, float *g,
                       float *u, float *y) {
    const int H = cfg->hidden, I = cfg->moe_inter;
    if (cfg->expert_kind == SL_EXPERT_GPTOSS) gptoss_ffn(ws, pool, ex, (float)cfg->swiglu_limit, x, H, I, g, u, y);
    else swiglu_ffn(ws, pool, &ex->gate, &ex->up, &ex->down, x, I, g, u, y);
}

/* The logits of n rows' router (with its Linear bias, gpt-oss) into out [n][E]: of hx when given (its
 * int8 form shared with the experts), else of h [n][H] (exact kernels: the prefetch hint). */
static void router_logits(fwd_ws *ws, sl_pool *pool, const sl_config *cfg, const sl_layer_w *lw, const float *h, int n,
                          kern_act *hx, float *out) {
    const int H = cfg->hidden, E = cfg->n_experts;
    if (hx) kern_matmul_act(ws->ops, pool, &lw->router, hx, out, (size_t)E);
    else kern_matmul(ws->ops, pool, &lw->router, h, (size_t)H, out, (size_t)E, n);
    if (lw->router_lbias)
        for (int t = 0; t < n; t++)
            for (int e = 0; e < E; e++) out[(size_t)t * E + e] += lw->router_lbias[e];
}

static int check_mat_part(const sl_mat *m, int rows, int cols, const char *name, int layer, int e, char *err,
                          size_t errlen) {
    if (!m->data || m->rows != rows || m->cols != cols || m->dtype <= DT_NONE || m->dtype >= DT_COUNT ||
        m->dtype == DT_F8E4M3 || (q_is_quant(m->dtype) && (!m->scales || m->group <= 0 || m->cols % m->group))) {
        fwd_errf(err, errlen, "layer %d expert %d: %s is %s [%d, %d], expected [%d, %d] f32/f16/bf16/q8/q4/q3/mxfp4",
                 layer, e, name, m->data ? dt_name(m->dtype) : "missing", m->rows, m->cols, rows, cols);
        return SL_EINVAL;
    }
    return 0;
}

static int check_expert_kind(const sl_config *cfg, const sl_expert *ex, int layer, int e, char *err, size_t errlen) {
    const int I = cfg->moe_inter, H = cfg->hidden;
    if (cfg->expert_kind != SL_EXPERT_GPTOSS) return check_expert(ex, I, H, layer, e, err, errlen);
    int rc = check_mat_part(&ex->gate_up, 2 * I, H, "gate_up_proj", layer, e, err, errlen);
    if (!rc) rc = check_mat_part(&ex->down, H, I, "down_proj", layer, e, err, errlen);
    if (!rc && (!ex->gate_up_bias || !ex->down_bias)) {
        fwd_errf(err, errlen, "layer %d expert %d: %s missing", layer, e, ex->gate_up_bias ? "down_proj_bias" : "gate_up_proj_bias");
        rc = SL_EINVAL;
    }
    return rc;
}

static int check_expert(const sl_expert *ex, int I, int H, int layer, int e, char *err, size_t errlen) {
    const sl_mat *m[3] = {&ex->gate, &ex->up, &ex->down};
    const int rows[3] = {I, I, H}, cols[3] = {H, H, I};
    static const char *const names[3] = {"gate_proj", "up_proj", "down_proj"};
    for (int i = 0; i < 3; i++) {
        if (!m[i]->data || m[i]->rows != rows[i] || m[i]->cols != cols[i] || m[i]->dtype <= DT_NONE ||
            m[i]->dtype >= DT_COUNT || m[i]->dtype == DT_F8E4M3 ||
            (q_is_quant(m[i]->dtype) && (!m[i]->scales || m[i]->group <= 0 || m[i]->cols % m[i]->group))) {
            fwd_errf(err, errlen, "layer %d expert %d: %s is %s [%d, %d], expected [%d, %d] f32/f16/bf16/q8/q4/q3", layer, e,
                     names[i], m[i]->data ? dt_name(m[i]->dtype) : "missing", m[i]->rows, m[i]->cols, rows[i],
                     cols[i]);
            return SL_EINVAL;
        }
    }
    return 0;
}

/* Runs expert e over the tokens routed to it; outputs land in their (token, slot) cells of exp_out. hx: the
 * block's input ws->h, whose int8 form every expert reuses (gathered when the expert has a subset). */
static int apply_expert(fwd_ws *ws, const sl_config *cfg, sl_pool *pool, int layer, int e, const sl_expert *ex,
                        kern_act *hx, char *err, size_t errlen) {
    const int H = cfg->hidden, k = cfg->n_experts_used;
    int rc = check_expert_kind(cfg, ex, layer, e, err, errlen);
    if (rc) return rc;
    int start = e > 0 ? ws->e_count[e - 1] : 0, cnt = ws->e_count[e] - start, all = cnt == hx->n_tok;
    for (int i = 0; all && i < cnt; i++) all = ws->e_tok[start + i] == i;
    kern_act gx, *x = hx; /* every token of the batch, in order (a decode step): hx itself */
    if (!all) {
        for (int i = 0; i < cnt; i++)
            memcpy(ws->ffn_x + (size_t)i * H, ws->h + (size_t)ws->e_tok[start + i] * H, (size_t)H * sizeof(float));
        kern_act_gather(&gx, ws->act[FWD_ACT_GATHER], hx, ws->e_tok + start, cnt, ws->ffn_x);
        x = &gx;
    }
    expert_ffn(ws, pool, cfg, ex, x, ws->ffn_g, ws->ffn_u, ws->ffn_y);
    for (int i = 0; i < cnt; i++) {
        int t = ws->e_tok[start + i], s = ws->e_slot[start + i];
        memcpy(ws->exp_out + ((size_t)t * k + s) * H, ws->ffn_y + (size_t)i * H, (size_t)H * sizeof(float));
    }
    return 0;
}

/* The shared expert's SwiGLU output (before its sigmoid gate) into sh_y. */
static void shared_expert(fwd_ws *ws, const sl_config *cfg, const sl_layer_w *lw, sl_pool *pool, kern_act *hx) {
    if (!lw->sh_gate.data) return;
    swiglu_ffn(ws, pool, &lw->sh_gate, &lw->sh_up, &lw->sh_down, hx, cfg->shared_inter, ws->ffn_g, ws->ffn_u, ws->sh_y);
}

#define FUSED_MAX 32 /* experts of one decode step run together (kern_matmul_multi holds 64 matrices) */

/* A decode step (one token) over resident experts: gate and up of every chosen expert in one parallel-for,
 * then every down in another, instead of three hand-offs per expert. Per expert the same kernels on
 * the same rows as apply_expert, so bitwise the same outputs. */
static int run_fused(fwd_ws *ws, const sl_config *cfg, int layer, const sl_expert_src *experts, sl_pool *pool,
                     int n_list, kern_act *hx, char *err, size_t errlen) {
    const int H = cfg->hidden, I = cfg->moe_inter;
    sl_expert ex[FUSED_MAX];
    kern_mm mm[2 * FUSED_MAX] = {{0}};
    for (int i = 0; i < n_list; i++) {
        int e = ws->e_list[i];
        memset(&ex[i], 0, sizeof ex[i]);
        int rc = experts->get(experts->ctx, layer, e, &ex[i]);
        if (rc) {
            fwd_errf(err, errlen, "layer %d expert %d: %s", layer, e,
                     experts->errmsg ? experts->errmsg(experts->ctx) : "expert source failed");
            return rc < 0 ? rc : SL_EIO;
        }
        if ((rc = check_expert_kind(cfg, &ex[i], layer, e, err, errlen))) return rc;
        mm[2 * i] = (kern_mm){&ex[i].gate, hx, ws->ffn_g + (size_t)i * I, (size_t)I};
        mm[2 * i + 1] = (kern_mm){&ex[i].up, hx, ws->ffn_u + (size_t)i * I, (size_t)I};
    }
    kern_matmul_multi(ws->ops, pool, mm, 2 * n_list);
    for (int i = 0; i < n_list; i++)
        ws->ops->swiglu(ws->ffn_g + (size_t)i * I, ws->ffn_u + (size_t)i * I, ws->ffn_g + (size_t)i * I, I);
    kern_act ga, gr[FUSED_MAX]; /* the n_list down inputs quantized in one act, one row each */
    fwd_act(ws, &ga, FWD_ACT_MID, ws->ffn_g, (size_t)I, n_list, I);
    for (int i = 0; i < n_list; i++) {
        int e = ws->e_list[i], s = ws->e_slot[e > 0 ? ws->e_count[e - 1] : 0]; /* token 0's slot for e */
        kern_act_row(&gr[i], &ga, i);
        mm[i] = (kern_mm){&ex[i].down, &gr[i], ws->exp_out + (size_t)s * H, (size_t)H};
    }
    kern_matmul_multi(ws->ops, pool, mm, n_list);
    return 0;
}

static int run_resident(fwd_ws *ws, const sl_config *cfg, int layer, const sl_expert_src *experts,
                        sl_pool *pool, int n_list, kern_act *hx, char *err, size_t errlen) {
    if (hx->n_tok == 1 && n_list <= FUSED_MAX && n_list <= FWD_BATCH && cfg->expert_kind != SL_EXPERT_GPTOSS)
        return run_fused(ws, cfg, layer, experts, pool, n_list, hx, err, errlen);
    for (int i = 0; i < n_list; i++) {
        int e = ws->e_list[i];
        sl_expert ex;
        memset(&ex, 0, sizeof ex);
        int rc = experts->get(experts->ctx, layer, e, &ex);
        if (rc) {
            fwd_errf(err, errlen, "layer %d expert %d: %s", layer, e,
                     experts->errmsg ? experts->errmsg(experts->ctx) : "expert source failed");
            return rc < 0 ? rc : SL_EIO;
        }
        if ((rc = apply_expert(ws, cfg, pool, layer, e, &ex, hx, err, errlen))) return rc;
    }
    return 0;
}

/* Streaming: reads for every miss go out first, the shared expert runs while they are in flight,
 * then each expert is applied as soon as it arrives. */
/* Prefetch hint: the next MoE layer's router applied to the current residual (normed with that
 * layer's own norm) predicts its experts well, since a layer changes the residual stream little. The
 * provider starts those reads now, so they overlap this layer's experts and the next layer's mixer.
 * Only for small batches (decode): a prefill chunk's union would be most experts. Uses ffn_x and
 * router as scratch (both free here). */
#define PREFETCH_MAX_TOKENS 4
static void hint_next(fwd_ws *ws, const sl_config *cfg, const sl_layer_w *next_lw, int next_layer,
                      const sl_expert_src *experts, sl_pool *pool, int n) {
    if (!ws->prefetch || !experts->prefetch || !next_lw || n > PREFETCH_MAX_TOKENS || !next_lw->router.data) return;
    const int H = cfg->hidden, E = cfg->n_experts, k = cfg->n_experts_used;
    fwd_norm_rows(ws->ops, ws->x, next_lw->ffn_norm, cfg->zero_centred_norm, cfg->eps, ws->ffn_x, n, H);
    if (!next_lw->router.data) return;
    router_logits(ws, pool, cfg, next_lw, ws->ffn_x, n, NULL, ws->router);
    memset(ws->pf_mark, 0, (size_t)E);
    int np = 0;
    for (int t = 0; t < n; t++) {
        /* softmax is monotonic: top-k of the logits (for the sigmoid router an approximation: no bias, no groups) */
        float *lg = ws->router + (size_t)t * E;
        for (int s = 0; s < k; s++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (lg[e] != -INFINITY && (best < 0 || lg[e] > lg[best])) best = e;
            if (best < 0) break;
            lg[best] = -INFINITY;
            if (!ws->pf_mark[best]) {
                ws->pf_mark[best] = 1;
                ws->pf_list[np++] = best;
            }
        }
    }
    experts->prefetch(experts->ctx, next_layer, ws->pf_list, np);
}

static int run_streamed(fwd_ws *ws, const sl_config *cfg, const sl_layer_w *lw, int layer,
                        const sl_layer_w *next_lw, int next_layer, const sl_expert_src *experts, sl_pool *pool,
                        int n, int n_list, kern_act *hx, char *err, size_t errlen) {
    int rc = experts->begin(experts->ctx, layer, ws->e_list, n_list, 0);
    if (!rc) hint_next(ws, cfg, next_lw, next_layer, experts, pool, n);
    if (!rc) shared_expert(ws, cfg, lw, pool, hx);
    for (int i = 0; !rc && i < n_list; i++) {
        int e = -1;
        sl_expert ex;
        memset(&ex, 0, sizeof ex);
        rc = experts->next(experts->ctx, &e, &ex);
        if (rc) break;
        rc = apply_expert(ws, cfg, pool, layer, e, &ex, hx, err, errlen);
        experts->release(experts->ctx, e);
    }
    if (rc && err && !err[0]) fwd_errf(err, errlen, "%s", experts->errmsg ? experts->errmsg(experts->ctx) : "expert source failed");
    experts->end(experts->ctx);
    return rc < 0 ? rc : rc ? SL_EIO : 0;
}

int fwd_moe(fwd_ws *ws, const sl_config *cfg, const sl_layer_w *lw, int layer, const sl_layer_w *next_lw,
            int next_layer, const sl_expert_src *experts,
            sl_pool *pool, int n, char *err, size_t errlen) {
    const kern_ops *ops = ws->ops;
    const int H = cfg->hidden, E = cfg->n_experts, k = cfg->n_experts_used;

    kern_act hx; /* ws->h, quantized once for the router, the shared expert and every routed expert */
    fwd_act(ws, &hx, FWD_ACT_IN, ws->h, (size_t)H, n, H);
    router_logits(ws, pool, cfg, lw, ws->h, n, &hx, ws->router);
    memset(ws->e_count, 0, (size_t)E * sizeof(int));
    for (int t = 0; t < n; t++) {
        int *te = ws->top_e + (size_t)t * k;
        if (cfg->uniform_routing) route_uniform(cfg, layer, ws->router + (size_t)t * E, te, ws->top_w + (size_t)t * k);
        else route_token(cfg, lw->router_bias, ws->router + (size_t)t * E, te, ws->top_w + (size_t)t * k,
                         ws->router + (size_t)t * E);
        for (int s = 0; s < k; s++) ws->e_count[te[s]]++;
    }
    /* group (token, slot) pairs by expert: e_count becomes each expert's start offset */
    int off = 0;
    for (int e = 0; e < E; e++) {
        int c = ws->e_count[e];
        ws->e_count[e] = off;
        off += c;
    }
    for (int t = 0; t < n; t++)
        for (int s = 0; s < k; s++) {
            int e = ws->top_e[(size_t)t * k + s], at = ws->e_count[e]++;
            ws->e_tok[at] = t;
            ws->e_slot[at] = s;
        }
    /* now e_count[e] is the end of expert e's range; its start is the previous expert's end */
    int n_list = 0;
    for (int e = 0, start = 0; e < E; e++) {
        if (ws->e_count[e] > start) ws->e_list[n_list++] = e;
        start = ws->e_count[e];
    }
    int rc = experts->begin ? run_streamed(ws, cfg, lw, layer, next_lw, next_layer, experts, pool, n, n_list, &hx, err, errlen)
                            : run_resident(ws, cfg, layer, experts, pool, n_list, &hx, err, errlen);
    if (rc) return rc;
    if (!experts->begin) shared_expert(ws, cfg, lw, pool, &hx);
    for (int t = 0; t < n; t++) {
        float *o = ws->out + (size_t)t * H;
        memset(o, 0, (size_t)H * sizeof(float));
        for (int s = 0; s < k; s++)
            ops->axpy(ws->top_w[(size_t)t * k + s], ws->exp_out + ((size_t)t * k + s) * H, o, H);
    }
    if (lw->sh_gate.data) {
        float sg[FWD_BATCH];
        if (lw->sh_expert_gate.data) kern_matmul_act(ops, pool, &lw->sh_expert_gate, &hx, sg, 1);
        for (int t = 0; t < n; t++) {
            float gate = lw->sh_expert_gate.data ? kern_sigmoid(sg[t]) : 1.0f;
            float *o = ws->out + (size_t)t * H;
            const float *ys = ws->sh_y + (size_t)t * H;
            for (int i = 0; i < H; i++) o[i] += gate * ys[i];
        }
    }
    return 0;
}

/* The MoE block over n tokens at once (layer-major prefill): every expert the n tokens chose is fetched
 * once, in ascending order, and its output is added straight into each of its tokens' rows of out, so
 * no per-(token, slot) buffer is needed. Per token that is the same sequence of operations as
 * fwd_moe's ((0 + w_a y_a) + w_b y_b) + ... over ascending experts, then the gated shared expert, and
 * every matmul row depends only on its own token, so the result is bitwise fwd_moe's, chunk by chunk.
 * h: [n][H] normed input; out: [n][H]. Scratch: wb (sized for n), and ws's micro-batch buffers. */
int fwd_moe_wide(fwd_ws *ws, const sl_config *cfg, const sl_layer_w *lw, int layer, const sl_expert_src *experts,
                 sl_pool *pool, int n, const float *h, float *out, const fwd_wide *wb, char *err, size_t errlen) {
    const kern_ops *ops = ws->ops;
    const int H = cfg->hidden, E = cfg->n_experts, k = cfg->n_experts_used;
    for (int r0 = 0; r0 < n; r0 += FWD_BATCH) { /* FWD_BATCH rows at a time through the int8 slot */
        int nb = n - r0 < FWD_BATCH ? n - r0 : FWD_BATCH;
        kern_act a;
        fwd_act(ws, &a, FWD_ACT_IN, h + (size_t)r0 * H, (size_t)H, nb, H);
        router_logits(ws, pool, cfg, lw, h + (size_t)r0 * H, nb, &a, wb->router + (size_t)r0 * E);
    }
    memset(ws->e_count, 0, (size_t)E * sizeof(int));
    for (int t = 0; t < n; t++) {
        int *te = wb->top_e + (size_t)t * k;
        if (cfg->uniform_routing) route_uniform(cfg, layer, wb->router + (size_t)t * E, te, wb->top_w + (size_t)t * k);
        else route_token(cfg, lw->router_bias, wb->router + (size_t)t * E, te, wb->top_w + (size_t)t * k,
                         wb->router + (size_t)t * E);
        for (int s = 0; s < k; s++) ws->e_count[te[s]]++;
    }
    int off = 0, n_list = 0;
    for (int e = 0; e < E; e++) {
        int c = ws->e_count[e];
        ws->e_count[e] = off;
        off += c;
        if (c) ws->e_list[n_list++] = e;
    }
    for (int t = 0; t < n; t++)
        for (int s = 0; s < k; s++) {
            int e = wb->top_e[(size_t)t * k + s], at = ws->e_count[e]++;
            wb->e_tok[at] = t;
            wb->e_slot[at] = s;
        }
    int rc = experts->begin ? experts->begin(experts->ctx, layer, ws->e_list, n_list, 1) : 0;
    if (rc) {
        fwd_errf(err, errlen, "%s", experts->errmsg ? experts->errmsg(experts->ctx) : "expert source failed");
        if (experts->end) experts->end(experts->ctx);
        return rc;
    }
    if (lw->sh_gate.data) /* while the first reads are in flight */
        for (int r0 = 0; r0 < n; r0 += FWD_BATCH) {
            int nb = n - r0 < FWD_BATCH ? n - r0 : FWD_BATCH;
            kern_act a;
            fwd_act(ws, &a, FWD_ACT_IN, h + (size_t)r0 * H, (size_t)H, nb, H);
            swiglu_ffn(ws, pool, &lw->sh_gate, &lw->sh_up, &lw->sh_down, &a, cfg->shared_inter, ws->ffn_g, ws->ffn_u,
                       wb->sh_y + (size_t)r0 * H);
        }
    memset(out, 0, (size_t)n * H * sizeof(float));
    for (int i = 0; i < n_list && !rc; i++) {
        int e = ws->e_list[i], got = e;
        sl_expert ex;
        memset(&ex, 0, sizeof ex);
        rc = experts->begin ? experts->next(experts->ctx, &got, &ex) : experts->get(experts->ctx, layer, e, &ex);
        if (rc) {
            fwd_errf(err, errlen, "%s", experts->errmsg ? experts->errmsg(experts->ctx) : "expert source failed");
            break;
        }
        if (got != e) {
            fwd_errf(err, errlen, "layer %d: expert source delivered expert %d out of order (expected %d)", layer, got, e);
            rc = SL_EINVAL;
        }
        if (!rc) rc = check_expert_kind(cfg, &ex, layer, e, err, errlen);
        int start = e > 0 ? ws->e_count[e - 1] : 0, end = ws->e_count[e];
        for (int c0 = start; !rc && c0 < end; c0 += FWD_BATCH) {
            int cnt = end - c0 < FWD_BATCH ? end - c0 : FWD_BATCH;
            for (int j = 0; j < cnt; j++)
                memcpy(ws->ffn_x + (size_t)j * H, h + (size_t)wb->e_tok[c0 + j] * H, (size_t)H * sizeof(float));
            kern_act a;
            fwd_act(ws, &a, FWD_ACT_GATHER, ws->ffn_x, (size_t)H, cnt, H);
            expert_ffn(ws, pool, cfg, &ex, &a, ws->ffn_g, ws->ffn_u, ws->ffn_y);
            for (int j = 0; j < cnt; j++) {
                int t = wb->e_tok[c0 + j], s = wb->e_slot[c0 + j];
                ops->axpy(wb->top_w[(size_t)t * k + s], ws->ffn_y + (size_t)j * H, out + (size_t)t * H, H);
            }
        }
        if (experts->begin) experts->release(experts->ctx, got);
    }
    if (experts->begin) experts->end(experts->ctx);
    if (rc) return rc < 0 ? rc : SL_EIO;
    if (lw->sh_gate.data) {
        if (lw->sh_expert_gate.data) fwd_matmul(ws, pool, &lw->sh_expert_gate, h, (size_t)H, wb->sg, 1, n, FWD_ACT_IN);
        for (int t = 0; t < n; t++) {
            float gate = lw->sh_expert_gate.data ? kern_sigmoid(wb->sg[t]) : 1.0f;
            float *o = out + (size_t)t * H;
            const float *ys = wb->sh_y + (size_t)t * H;
            for (int i = 0; i < H; i++) o[i] += gate * ys[i];
        }
    }
    return 0;
}

int fwd_dense_mlp(fwd_ws *ws, const sl_config *cfg, const sl_layer_w *lw, sl_pool *pool, int n) {
    kern_act hx;
    fwd_act(ws, &hx, FWD_ACT_IN, ws->h, (size_t)cfg->hidden, n, cfg->hidden);
    swiglu_ffn(ws, pool, &lw->mlp_gate, &lw->mlp_up, &lw->mlp_down, &hx, cfg->dense_inter, ws->ffn_g, ws->ffn_u, ws->ffn_y);
    memcpy(ws->out, ws->ffn_y, (size_t)n * cfg->hidden * sizeof(float));
    return 0;
}
