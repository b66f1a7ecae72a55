/*
 * attention.c — full (softmax) attention for qwen3_moe and the gated variant of qwen3_next/qwen3_5_moe
 * (MODELS.md 3.3); gpt-oss's sliding-window layers (the last sliding_window positions, the query's own
 * included, as transformers' sliding_window_causal mask) and per-head sink logits (one more entry of the
 * softmax's max and denominator, modeling_gpt_oss.py eager_attention_forward), o_proj's bias. Position p's K/V
 * are row p % kv_cap of the layer's cache: a ring for sliding layers (fwd_internal.h), the identity otherwise.
 *
 * Per micro-batch: project q (+gate), k, v for all tokens; q/k RMSNorm as cfg->qk_norm says (per head,
 * over the whole projection, or none; 1+w when zero-centred) and partial NeoX RoPE; append K/V rows to the cache at their positions; then every
 * (token, head) pair is one work item on the pool: scores against cache rows 0..pos, f32 softmax,
 * weighted sum of V in increasing position order; gate with sigmoid; o_proj.
 * Each item's arithmetic depends only on its own token and position, never on the batch.
 *
 * Layouts: big [B][n_big] holds q_proj rows, per head [query (hd) | gate (hd)] when gated, else
 * [query (hd)]; k, v [B][nkv*hd]; cache [n_ctx][nkv][hd]; mix [B][n_mix] holds [nh][hd] outputs.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "model/fwd_internal.h"
#include "model/rope.h"

/* cos and sin of position pos for NeoX RoPE, computed in f32 as HF does: inv_freq from rope_freqs (model/rope.h:
 * the default table or YaRN), angle = pos * inv_freq (f32), cos and sin times the table's attention factor
 * (YaRN's attention_scaling, 1 otherwise). c, s: [rot/2]; once per position for all its heads. */
static void rope_cs(int rot, const float *inv_freq, float attn_factor, int pos, float *c, float *s) {
    for (int i = 0; i < rot / 2; i++) {
        float ang = (float)pos * inv_freq[i];
        c[i] = cosf(ang) * attn_factor;
        s[i] = sinf(ang) * attn_factor;
    }
}

/* NeoX rotate-half RoPE on the first rot dims of x [hd] with rope_cs's c, s. */
static void rope(float *x, int rot, const float *c, const float *s) {
    int half = rot / 2;
    for (int i = 0; i < half; i++) {
        float a = x[i], b = x[i + half];
        x[i] = a * c[i] - b * s[i];
        x[i + half] = b * c[i] + a * s[i];
    }
}

typedef struct {
    fwd_ws *ws;
    const float *kc, *vc; /* this layer's cache */
    int n_heads, group, hd, kvrow, pos0, qstride;
    int window;           /* > 0: a sliding layer, keys pos - window + 1 .. pos */
    int cap;              /* cache rows: position p is row p % cap (a ring for sliding layers, else n_ctx) */
    const float *sinks;   /* [nh] sink logits, or NULL */
    float scale;
    atomic_int next_slot;
} attn_job;

static void attn_part(void *ctx, size_t begin, size_t end) {
    attn_job *j = ctx;
    fwd_ws *ws = j->ws;
    const kern_ops *ops = ws->ops;
    int slot = atomic_fetch_add(&j->next_slot, 1);
    float *sc = ws->scratch + (size_t)slot * ws->slot_floats;
    const int hd = j->hd;
    for (size_t it = begin; it < end; it++) {
        int t = (int)(it / (size_t)j->n_heads), h = (int)(it % (size_t)j->n_heads);
        const int pos = j->pos0 + t, p0 = j->window > 0 && pos >= j->window ? pos - j->window + 1 : 0;
        const int n_keys = pos + 1 - p0; /* keys p0 .. pos, scores sc[0 .. n_keys) */
        const float *q = ws->big + (size_t)t * ws->n_big + (size_t)h * j->qstride;
        const float *kb = j->kc + (size_t)(h / j->group) * hd, *vb = j->vc + (size_t)(h / j->group) * hd;
        /* the keys' rows in order: at most two runs of consecutive cache rows (a ring wraps once) */
        const int s0 = p0 % j->cap, n1 = n_keys < j->cap - s0 ? n_keys : j->cap - s0;
        const size_t ld = (size_t)j->kvrow;
        kern_dot_rows(ops, q, kb + (size_t)s0 * ld, ld, n1, hd, sc);
        if (n_keys > n1) kern_dot_rows(ops, q, kb, ld, n_keys - n1, hd, sc + n1);
        float mx = j->sinks ? j->sinks[h] : -INFINITY; /* the sink is one more logit (gpt-oss), its value dropped */
        for (int p = 0; p < n_keys; p++) {
            sc[p] *= j->scale;
            if (sc[p] > mx) mx = sc[p];
        }
        double sum = j->sinks ? (double)expf(j->sinks[h] - mx) : 0.0;
        for (int p = 0; p < n_keys; p++) {
            sc[p] = expf(sc[p] - mx);
            sum += sc[p];
        }
        float fsum = (float)sum;
        float *o = ws->mix + (size_t)t * ws->n_mix + (size_t)h * hd;
        memset(o, 0, (size_t)hd * sizeof(float));
        for (int p = 0; p < n_keys; p++) sc[p] /= fsum;
        kern_axpy_rows(ops, sc, n1, vb + (size_t)s0 * ld, ld, o, hd);
        if (n_keys > n1) kern_axpy_rows(ops, sc + n1, n_keys - n1, vb, ld, o, hd);
    }
}

int fwd_attention(fwd_ws *ws, fwd_seq *sq, const sl_config *cfg, const sl_layer_w *lw, int layer, sl_pool *pool, int n,
                  int pos0) {
    const kern_ops *ops = ws->ops;
    const size_t H = (size_t)cfg->hidden;
    const int nh = cfg->n_heads, nkv = cfg->n_kv_heads, hd = cfg->head_dim, rot = cfg->rot_dim;
    const int gated = cfg->gated_attn, qstride = gated ? 2 * hd : hd, kvrow = nkv * hd;
    const float w_off = cfg->zero_centred_norm ? 1.0f : 0.0f;

    kern_act hx; /* quantized once for q, k and v */
    fwd_act(ws, &hx, FWD_ACT_IN, ws->h, H, n, (int)H);
    const kern_mm qkv[3] = {{&lw->q, &hx, ws->big, (size_t)ws->n_big}, {&lw->k, &hx, ws->k, (size_t)kvrow},
                            {&lw->v, &hx, ws->v, (size_t)kvrow}};
    kern_matmul_multi(ops, pool, qkv, 3); /* one thread hand-off for the three */
    if (cfg->attn_bias) /* q/k/v biases (not gated: q rows are [nh*hd]) */
        for (int t = 0; t < n; t++) {
            float *q = ws->big + (size_t)t * ws->n_big, *k = ws->k + (size_t)t * kvrow, *v = ws->v + (size_t)t * kvrow;
            for (int i = 0; i < nh * hd; i++) q[i] += lw->q_bias[i];
            for (int i = 0; i < kvrow; i++) {
                k[i] += lw->k_bias[i];
                v[i] += lw->v_bias[i];
            }
        }

    float inv_freq[SL_ROPE_MAX_FREQS], attn_factor, rc[SL_ROPE_MAX_FREQS], rs[SL_ROPE_MAX_FREQS];
    rope_freqs(cfg, inv_freq, &attn_factor);

    float *kc = sq->k_cache[layer], *vc = sq->v_cache[layer];
    for (int t = 0; t < n; t++) {
        int pos = pos0 + t;
        float *qrow = ws->big + (size_t)t * ws->n_big, *krow = ws->k + (size_t)t * kvrow;
        rope_cs(rot, inv_freq, attn_factor, pos, rc, rs);
        if (cfg->qk_norm == SL_QK_NORM_ALL) { /* over the whole projection (OLMoE), before the split into heads */
            ops->rmsnorm(qrow, lw->q_norm, w_off, cfg->eps, qrow, nh * hd);
            ops->rmsnorm(krow, lw->k_norm, w_off, cfg->eps, krow, kvrow);
        }
        for (int h = 0; h < nh; h++) {
            float *q = qrow + (size_t)h * qstride;
            if (cfg->qk_norm == SL_QK_NORM_HEAD) ops->rmsnorm(q, lw->q_norm, w_off, cfg->eps, q, hd);
            rope(q, rot, rc, rs);
        }
        for (int g = 0; g < nkv; g++) {
            float *k = krow + (size_t)g * hd;
            if (cfg->qk_norm == SL_QK_NORM_HEAD) ops->rmsnorm(k, lw->k_norm, w_off, cfg->eps, k, hd);
            rope(k, rot, rc, rs);
        }
        const size_t slot = (size_t)(pos % sq->kv_cap[layer]);
        memcpy(kc + slot * kvrow, ws->k + (size_t)t * kvrow, (size_t)kvrow * sizeof(float));
        memcpy(vc + slot * kvrow, ws->v + (size_t)t * kvrow, (size_t)kvrow * sizeof(float));
    }

    attn_job j = {.ws = ws, .kc = kc, .vc = vc, .n_heads = nh, .group = nh / nkv, .hd = hd, .kvrow = kvrow,
                  .pos0 = pos0, .qstride = qstride, .window = cfg->layer_sliding[layer] ? cfg->sliding_window : 0, .cap = sq->kv_cap[layer],
                  .sinks = cfg->attn_sinks ? lw->sinks : NULL, .scale = 1.0f / sqrtf((float)hd)};
    atomic_init(&j.next_slot, 0);
    sl_pool_for(pool, (size_t)n * (size_t)nh, 1, attn_part, &j);

    if (gated) {
        for (int t = 0; t < n; t++)
            for (int h = 0; h < nh; h++) {
                const float *gate = ws->big + (size_t)t * ws->n_big + (size_t)h * qstride + hd;
                float *o = ws->mix + (size_t)t * ws->n_mix + (size_t)h * hd;
                for (int d = 0; d < hd; d++) o[d] *= kern_sigmoid(gate[d]);
            }
    }
    fwd_matmul(ws, pool, &lw->o, ws->mix, (size_t)ws->n_mix, ws->out, H, n, FWD_ACT_MID);
    if (lw->o_bias)
        for (int t = 0; t < n; t++)
            for (size_t i = 0; i < H; i++) ws->out[(size_t)t * H + i] += lw->o_bias[i];
    return 0;
}
