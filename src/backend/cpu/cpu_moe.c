/*
 * cpu_moe.c — the CPU backend's MoE ops (backend.h: route, ffn, ffn_multi, combine, combine_rows): the
 * routers of config.h per token, the SwiGLU and gpt-oss expert FFNs, and the fixed-order sums. The rules
 * and their references are in src/model/moe.c, which drives them.
 *
 * Routing per token (cfg->router): softmax over all E router logits (f32, sum in double), top-k by
 * repeated argmax (ties go to the lower expert index), weights renormalised when cfg->norm_topk (Qwen,
 * OLMoE); or top-k of the logits and a softmax over those k (Mixtral); or sigmoid scores chosen with
 * e_score_correction_bias within the best groups (GLM-4.5, DeepSeek-V3; as transformers'
 * Glm4MoeTopkRouter); or the uniform router. The chosen experts are then sorted by expert index: the
 * fixed combine order.
 *
 * A block's experts over many rows at once (a prefill's layer, a batched decode step) go through cpu_experts.c's
 * ffn_experts op instead, in a few hand-offs for all of them; swiglu_ffn here stays the per-expert form it must
 * equal bit for bit.
 */
#include <math.h>
#include <string.h>
#include <xxhash.h>

#include "backend/cpu/cpu.h"

/* ---- routing ---------------------------------------------------------------------------------- */

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
static void route_sigmoid_group(const fam_config *cfg, const float *bias, const float *logits, int *top_e, float *top_w,
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
        wsum += cfg->router_norm_eps > 0 ? (float)cfg->router_norm_eps : 1e-20f; /* LFM2: 1e-6 */
        for (int s = 0; s < k; s++) top_w[s] /= wsum;
    }
    const float scale = (float)cfg->routed_scale;
    for (int s = 0; s < k; s++) top_w[s] *= scale;
}

/* SL_ROUTER_SOFTMAX_ZERO over R logits (LongCat-Flash's real and zero experts): softmax (f32, the sum in double)
 * into p, the k largest p + bias chosen (ties: the lower index; bias NULL: none), weights their p times
 * routed_scale. p may alias logits. */
static void route_softmax_bias(const fam_config *cfg, const float *bias, const float *logits, int *top_e, float *top_w,
                               float *p, int R) {
    const int k = cfg->n_experts_used;
    float mx = -INFINITY;
    for (int e = 0; e < R; e++)
        if (logits[e] > mx) mx = logits[e];
    double sum = 0.0;
    for (int e = 0; e < R; e++) {
        p[e] = expf(logits[e] - mx);
        sum += p[e];
    }
    const float fsum = (float)sum, scale = (float)cfg->routed_scale;
    for (int e = 0; e < R; e++) p[e] /= fsum;
    for (int s = 0; s < k; s++) {
        int best = -1;
        for (int e = 0; e < R; e++) {
            int used = 0;
            for (int j = 0; j < s; j++) used |= top_e[j] == e;
            if (used) continue;
            if (best < 0 || (bias ? p[e] + bias[e] : p[e]) > (bias ? p[best] + bias[best] : p[best])) best = e;
        }
        top_e[s] = best;
        top_w[s] = p[best] * scale;
    }
}

/* Uniform routing (sl_routing, cfg->uniform_routing): k distinct experts drawn uniformly by splitmix64
 * seeded with a hash of (routing_seed, layer, the token's router logits), weights 1/k, in ascending
 * expert order. A function of the token's own logits, so streamed == resident and batch == alone hold
 * as for the model's routers; distinct tokens draw independently. k <= E (checked at open). */
static void route_uniform(const fam_config *cfg, int layer, const float *logits, int *top_e, float *top_w) {
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

/* p = softmax(logits) over E, f32 with the sum in double. */
static void route_softmax(const float *logits, int E, float *p) {
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
}

/* SL_ROUTER_SQRTSOFTPLUS for one token (modeling_deepseek_v4.py DeepseekV4TopKRouter / DeepseekV4HashRouter):
 * p [E] = sqrt(softplus(logit)) (may alias logits; softplus as torch's: x beyond 20 is x), the experts ids[0..k)
 * (a hash layer's tid2eid row) or the top-k of p + bias (f32; ties to the lower index), weights their p / (sum +
 * 1e-20) times routed_scale. */
static void route_sqrtsoftplus(const fam_config *cfg, const float *bias, const float *ids, const float *logits,
                               int *top_e, float *top_w, float *p) {
    const int E = cfg->n_experts, k = cfg->n_experts_used;
    float b[SL_ROUTER_MAX_EXPERTS];
    for (int e = 0; e < E; e++) {
        const float x = logits[e];
        p[e] = sqrtf(x > 20.0f ? x : log1pf(expf(x)));
        b[e] = bias ? p[e] + bias[e] : p[e];
    }
    if (ids) {
        for (int s = 0; s < k; s++) top_e[s] = (int)ids[s];
    } else {
        float v[64];
        top_k(b, E, k, -INFINITY, top_e, v);
    }
    float sum = 0.0f;
    for (int s = 0; s < k; s++) sum += (top_w[s] = p[top_e[s]]);
    for (int s = 0; s < k; s++) top_w[s] = top_w[s] / (sum + 1e-20f) * (float)cfg->routed_scale;
}

/* Routes one token (config.h SL_ROUTER_*): p [E] is scratch (may alias logits); bias: the layer's
 * e_score_correction_bias [E] or NULL. */
static void route_token(const fam_config *cfg, const float *bias, const float *ids, const float *logits, int *top_e,
                        float *top_w, float *p) {
    const int E = cfg_router_rows(cfg), k = cfg->n_experts_used, kind = cfg->router, renorm = cfg->norm_topk;
    if (kind == SL_ROUTER_SQRTSOFTPLUS) {
        route_sqrtsoftplus(cfg, bias, ids, logits, top_e, top_w, p);
    } else if (kind == SL_ROUTER_SIGMOID_GROUP) {
        route_sigmoid_group(cfg, bias, logits, top_e, top_w, p);
    } else if (kind == SL_ROUTER_SOFTMAX_ZERO) { /* LongCat-Flash: softmax, top-k of p + bias, weights p * scale */
        route_softmax_bias(cfg, bias, logits, top_e, top_w, p, E);
    } else if (kind == SL_ROUTER_TOPK_SIGMOID) { /* top-k of the logits, each weight its sigmoid (Llama 4) */
        for (int e = 0; e < E; e++) p[e] = logits[e];
        top_k(p, E, k, -INFINITY, top_e, top_w);
        for (int s = 0; s < k; s++) top_w[s] = kern_sigmoid(top_w[s]);
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
    } else if (kind == SL_ROUTER_SOFTMAX_BIAS) { /* softmax; top-k of p + bias; the chosen p over their sum */
        float b[SL_ROUTER_MAX_EXPERTS];
        route_softmax(logits, E, p);
        for (int e = 0; e < E; e++) b[e] = bias ? p[e] + bias[e] : p[e];
        top_k(b, E, k, -INFINITY, top_e, top_w);
        float wsum = 0.0f;
        for (int s = 0; s < k; s++) wsum += top_w[s] = p[top_e[s]];
        for (int s = 0; s < k; s++) top_w[s] /= wsum > 1e-12f ? wsum : 1e-12f;
    } else { /* softmax over all E, then top-k, renormalised on request */
        route_softmax(logits, E, p);
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

/* The prefetch hint's choice: softmax is monotonic, so the top-k of the logits (for the sigmoid router an
 * approximation: no bias, no groups), in the order taken; -1 past the last finite logit. */
static void hint_token(float *lg, int E, int k, int *top_e) {
    int s = 0;
    for (; s < k; s++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (lg[e] != -INFINITY && (best < 0 || lg[e] > lg[best])) best = e;
        if (best < 0) break;
        lg[best] = -INFINITY;
        top_e[s] = best;
    }
    for (; s < k; s++) top_e[s] = -1;
}

sl_status cpu_route(be_backend *be, const be_route *r) {
    const fam_config *cfg = r->cfg;
    const int E = cfg_router_rows(cfg), k = cfg->n_experts_used; /* the logits' rows: zero experts too */
    for (int t = 0; t < r->n; t++) {
        float *lg = r->logits + (size_t)t * E;
        int *te = r->top_e + (size_t)t * k;
        float *tw = r->top_w + (size_t)t * k;
        const float *ids = r->tid2eid && r->tokens ? r->tid2eid + (size_t)r->tokens[t] * (size_t)k : NULL;
        for (int s = 0; ids && s < k; s++)
            if (!(ids[s] >= 0 && ids[s] < (float)E && ids[s] == floorf(ids[s]))) {
                cpu_fail(be, SL_EFORMAT, "tid2eid names an expert out of range");
                return be->sync(be);
            }
        if (r->hint && ids) for (int s = 0; s < k; s++) te[s] = (int)ids[s]; /* a hash layer's choice is known */
        else if (r->hint) hint_token(lg, E, k, te);
        else if (cfg->uniform_routing) route_uniform(cfg, r->layer, lg, te, tw);
        else route_token(cfg, r->bias, ids, lg, te, tw, lg);
        if (!r->hint && r->expert_scale && !cfg->uniform_routing)
            for (int s = 0; s < k; s++) tw[s] *= r->expert_scale[te[s]];
    }
    return be->sync(be);
}

/* ---- FFNs ------------------------------------------------------------------------------------- */

/* y = down(a) for a [n][cols] (the mid activation of f, its own int8 form). */
static void ffn_down(be_backend *be, const be_ffn *f, const tn_mat *down, const float *a, int cols) {
    kern_act m;
    kern_act_init(&m, f->mid_buf, a, (size_t)cols, f->x->n_tok, down->cols, f->int8);
    be->matmul[down->dtype](be, down, &m, f->y, f->ldy);
}

typedef struct {
    const kern_ops *ops;
    float *g;
    const float *u;
    int inter;
} swiglu_job;

static void swiglu_part(void *ctx, size_t b, size_t e) {
    const swiglu_job *j = ctx;
    for (size_t t = b; t < e; t++)
        j->ops->swiglu(j->g + t * (size_t)j->inter, j->u + t * (size_t)j->inter, j->g + t * (size_t)j->inter, j->inter);
}

static void swiglu_ffn(be_backend *be, const be_ffn *f) {
    cpu_ctx *c = cpu_of(be);
    const int n = f->x->n_tok, inter = f->inter;
    const kern_mm gu[2] = {{&f->w->gate, f->x, f->g, (size_t)inter}, {&f->w->up, f->x, f->u, (size_t)inter}};
    const tn_mat *down = &f->w->down;
    kern_act mid; /* the down projection's input: silu(gate) * up in place of the gate's products */
    kern_act_init(&mid, f->mid_buf, f->g, (size_t)inter, n, down->cols, f->int8);
    /* the int8 kernels: the products, the SwiGLU and the int8 form of the down input in one hand-off, 128 rows an
     * item (kern_swiglu_multi); else the products in one and the tokens' activations on the pool (a prefill's
     * expert: ~32 tokens x inter expf, which the other threads waited for); each token's values the same ops.
     * The one hand-off has only inter / 128 items (6 for the 30B shape): on a pool with more threads than that,
     * some would idle through it while the products' ~inter / 4 row ranges keep them all busy */
    const int items = (inter + 127) / 128;
    if (down->cols != inter || items < pool_size(c->pool) ||
        kern_swiglu_multi(c->ops, c->pool, &gu[0], &gu[1], 1, &mid)) {
        be->matmul_multi(be, gu, 2);
        swiglu_job j = {c->ops, f->g, f->u, inter};
        pool_for(c->pool, (size_t)n, 8, swiglu_part, &j);
    }
    be->matmul[down->dtype](be, down, &mid, f->y, f->ldy);
}

static void gptoss_ffn(be_backend *be, const be_ffn *f) {
    const float alpha = 1.702f, limit = f->limit;
    const int n = f->x->n_tok, I = f->inter, H = f->w->down.rows;
    const tn_expert *ex = f->w;
    float *gu = f->g, *act = f->u;
    be->matmul[ex->gate_up.dtype](be, &ex->gate_up, f->x, gu, (size_t)(2 * I));
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
    ffn_down(be, f, &ex->down, act, I);
    for (int t = 0; t < n; t++)
        for (int i = 0; i < H; i++) f->y[(size_t)t * f->ldy + i] += ex->down_bias[i];
}

/* BE_FFN_SWIGLU_CLAMP (modeling_deepseek_v4.py DeepseekV4Experts._apply_gate, DeepseekV4MLP): gate clamped above
 * at limit, up to [-limit, limit], then the SwiGLU kernel and down. */
static void clamp_ffn(be_backend *be, const be_ffn *f) {
    const kern_ops *ops = cpu_of(be)->ops;
    const int n = f->x->n_tok, I = f->inter;
    const float limit = f->limit;
    const kern_mm gu[2] = {{&f->w->gate, f->x, f->g, (size_t)I}, {&f->w->up, f->x, f->u, (size_t)I}};
    be->matmul_multi(be, gu, 2);
    for (int t = 0; t < n; t++) {
        float *g = f->g + (size_t)t * I, *u = f->u + (size_t)t * I;
        for (int i = 0; i < I; i++) {
            g[i] = g[i] > limit ? limit : g[i];
            u[i] = u[i] > limit ? limit : u[i] < -limit ? -limit : u[i];
        }
        ops->swiglu(g, u, g, I);
    }
    ffn_down(be, f, &f->w->down, f->g, I);
}

/* BE_FFN_SWIGLU_CLIP (modeling_bailing_hybrid.py BailingHybridExperts._apply_gate, limit_after_act): silu(gate)
 * clamped above at limit, up to [-limit, limit], their product, then down. */
static void clip_ffn(be_backend *be, const be_ffn *f) {
    const int n = f->x->n_tok, I = f->inter;
    const float limit = f->limit;
    const kern_mm gu[2] = {{&f->w->gate, f->x, f->g, (size_t)I}, {&f->w->up, f->x, f->u, (size_t)I}};
    be->matmul_multi(be, gu, 2);
    for (size_t i = 0; i < (size_t)n * (size_t)I; i++) {
        const float g = kern_silu(f->g[i]), u = f->u[i];
        f->g[i] = (g > limit ? limit : g) * (u > limit ? limit : u < -limit ? -limit : u);
    }
    ffn_down(be, f, &f->w->down, f->g, I);
}

/* gelu_tanh(gate) * up (torch's GELU(approximate="tanh"), f32), then down. */
static void geglu_ffn(be_backend *be, const be_ffn *f) {
    const int n = f->x->n_tok, I = f->inter;
    const kern_mm gu[2] = {{&f->w->gate, f->x, f->g, (size_t)I}, {&f->w->up, f->x, f->u, (size_t)I}};
    be->matmul_multi(be, gu, 2);
    const float beta = 0.7978845608028654f, kappa = 0.044715f; /* sqrt(2 / pi) */
    for (size_t i = 0; i < (size_t)n * (size_t)I; i++) {
        const float g = f->g[i], inner = beta * (g + kappa * g * g * g);
        f->g[i] = 0.5f * g * (1.0f + tanhf(inner)) * f->u[i];
    }
    ffn_down(be, f, &f->w->down, f->g, I);
}

/* gu = gate_up x [n][2I] into g; silu(gate) * up into u, then down. */
static void swiglu_fused_ffn(be_backend *be, const be_ffn *f) {
    const int n = f->x->n_tok, I = f->inter;
    be->matmul[f->w->gate_up.dtype](be, &f->w->gate_up, f->x, f->g, (size_t)(2 * I));
    for (int t = 0; t < n; t++)
        for (int i = 0; i < I; i++)
            f->u[(size_t)t * I + i] = kern_silu(f->g[(size_t)t * 2 * I + i]) * f->g[(size_t)t * 2 * I + I + i];
    ffn_down(be, f, &f->w->down, f->u, I);
}

void cpu_ffn(be_backend *be, const be_ffn *f) {
    if (f->kind == BE_FFN_GPTOSS) gptoss_ffn(be, f);
    else if (f->kind == BE_FFN_SWIGLU_FUSED) swiglu_fused_ffn(be, f);
    else if (f->kind == BE_FFN_GEGLU) geglu_ffn(be, f);
    else if (f->kind == BE_FFN_SWIGLU_CLAMP) clamp_ffn(be, f);
    else if (f->kind == BE_FFN_SWIGLU_CLIP) clip_ffn(be, f);
    else swiglu_ffn(be, f);
}

sl_status cpu_ffn_host(be_backend *be, pool_t *pool, const be_ffn *f) {
    (void)pool; /* the backend's own, the same threads */
    cpu_ffn(be, f);
    return SL_OK;
}

#define FUSED_MAX 32 /* experts of one decode step (moe.c's FUSED_MAX); kern_matmul_multi holds 256 matrices */

/* The mid activations of a decode step's experts, one expert per item: silu(gate) * up into gate, then its
 * row of the down inputs' int8 form (ga), each row by itself, so the split over threads changes no bit. */
typedef struct {
    const be_ffn *f;
    const kern_ops *ops;
    kern_act *ga;
    int inter;
} mid_job;

static void mid_part(void *ctx, size_t begin, size_t end) {
    const mid_job *j = ctx;
    for (size_t i = begin; i < end; i++) {
        j->ops->swiglu(j->f[i].g, j->f[i].u, j->f[i].g, j->inter);
        if (j->ga->int8) kern_act_prepare_row(j->ga, (int)i);
    }
}

void cpu_ffn_multi(be_backend *be, const be_ffn *f, int n) {
    cpu_ctx *c = cpu_of(be);
    if (n > FUSED_MAX || (n > 0 && (f[0].x->n_tok != 1 || f[0].kind != BE_FFN_SWIGLU))) {
        for (int i = 0; i < n; i++) cpu_ffn(be, &f[i]);
        return;
    }
    if (!n) return;
    const int I = f[0].inter;
    /* the n down inputs quantized in one act, one row each (moe.c run_fused: f[i].g = f[0].g + i * I) */
    kern_act ga, gr[FUSED_MAX];
    kern_act_init(&ga, f[0].mid_buf, f[0].g, (size_t)I, n, I, f[0].int8);
    kern_mm mm[2 * FUSED_MAX] = {{0}}, gm[FUSED_MAX], um[FUSED_MAX];
    for (int i = 0; i < n; i++) {
        gm[i] = (kern_mm){&f[i].w->gate, f[i].x, f[i].g, (size_t)I};
        um[i] = (kern_mm){&f[i].w->up, f[i].x, f[i].u, (size_t)I};
    }
    /* gate, up and the SwiGLU with its int8 form in one hand-off (the int8 kernels); else the products in one,
     * then the SwiGLU and the quantization on every thread, not on the caller alone while the others wait */
    if (kern_swiglu_multi(c->ops, c->pool, gm, um, n, &ga)) {
        for (int i = 0; i < n; i++) {
            mm[2 * i] = gm[i];
            mm[2 * i + 1] = um[i];
        }
        be->matmul_multi(be, mm, 2 * n);
        mid_job mj = {f, c->ops, &ga, I};
        pool_for_any(c->pool, (size_t)n, 1, mid_part, &mj);
        ga.ready = ga.int8;
    }
    for (int i = 0; i < n; i++) {
        kern_act_row(&gr[i], &ga, i);
        mm[i] = (kern_mm){&f[i].w->down, &gr[i], f[i].y, f[i].ldy};
    }
    be->matmul_multi(be, mm, n);
}

/* ---- combine ---------------------------------------------------------------------------------- */

void cpu_combine(be_backend *be, const be_combine *c) {
    const kern_ops *ops = cpu_of(be)->ops;
    const int H = c->H, k = c->k;
    for (int t = 0; t < c->n; t++) {
        float *o = c->out + (size_t)t * H;
        if (c->w) {
            memset(o, 0, (size_t)H * sizeof(float));
            for (int s = 0; s < k; s++) ops->axpy(c->w[(size_t)t * k + s], c->y + ((size_t)t * k + s) * H, o, H);
        }
        if (c->sh_y) {
            float gate = c->sh_gate ? kern_sigmoid(c->sh_gate[t]) : 1.0f;
            const float *ys = c->sh_y + (size_t)t * H;
            for (int i = 0; i < H; i++) o[i] += gate * ys[i];
        }
    }
}

void cpu_combine_rows(be_backend *be, float *out, int H, int k, const int *tok, const int *slot, const float *top_w,
                      const float *y, int cnt) {
    const kern_ops *ops = cpu_of(be)->ops;
    for (int j = 0; j < cnt; j++) {
        int t = tok[j], s = slot[j];
        ops->axpy(top_w[(size_t)t * k + s], y + (size_t)j * H, out + (size_t)t * H, H);
    }
}
