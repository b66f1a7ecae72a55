/*
 * attention.c — full (softmax) attention for qwen3_moe and the gated variant of qwen3_next/qwen3_5_moe
 * (docs/MATH.md, Attention); gpt-oss's sliding-window layers (the last sliding_window positions, the query's own
 * included, as transformers' sliding_window_causal mask) and per-head sink logits (one more entry of the
 * softmax's max and denominator, modeling_gpt_oss.py eager_attention_forward), o_proj's bias. Position p's K/V
 * are row p % kv_cap of the layer's cache: a ring for sliding layers (fwd_internal.h), the identity otherwise.
 *
 * Per micro-batch, each step an op of the backend (src/backend/backend.h): project q (+gate), k, v for all
 * tokens; biases; q/k RMSNorm as cfg->qk_norm says (per head, over the whole projection, or none; 1+w when
 * zero-centred) and partial NeoX RoPE (on adjacent pairs when cfg->rope_interleave: ERNIE 4.5, whose q and k are
 * then permuted alike, which leaves every q.k as it was; per-head norms after RoPE when cfg->qk_norm_after_rope:
 * HunYuan); then the attention op appends the K/V rows to the cache at their
 * positions and, per (token, head): scores against cache rows 0..pos, f32 softmax, weighted sum of V in
 * increasing position order; gate with sigmoid; then o_proj. Each result depends only on its own token and
 * position, never on the batch.
 *
 * Gemma 4 (config.h): a full layer's own head_dim, KV heads and proportional RoPE (cfg_attn_at, rope_freqs_at),
 * its values the raw k projection (k_eq_v: no v_proj), values RMS-normed per head without a weight (v_norm), the
 * softmax scale cfg->attn_scale when set.
 *
 * Layouts: big [B][n_big] holds q_proj rows, per head [query (hd) | gate (hd)] when gated, else
 * [query (hd)]; k [B][nkv*hd], v [B][nkv*vd]; caches [kv_cap][nkv] heads of the sequence's kv_type (quant/kv.h);
 * mix [B][n_mix] holds [nh][vd] outputs.
 */
#include <math.h>

#include "family/rope.h"
#include "model/fwd_internal.h"

#define ATTN_GROUP 16 /* items a call of attention_items */

/* q/k RMSNorm of n rows as cfg->qk_norm says: per head, or over the whole projection (OLMoE); weightless (1 + 0)
 * where the layer has no q_norm (Llama 4). */
static void qk_norms(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, cfg_attn ad, int n) {
    be_backend *be = ws->be;
    const size_t ldq = (size_t)ws->n_big, kvrow = (size_t)ad.n_kv_heads * (size_t)ad.head_dim;
    const int nh = cfg->n_heads, hd = ad.head_dim, qstride = cfg->gated_attn ? 2 * hd : hd, nkv = ad.n_kv_heads;
    const float w_off = !lw->q_norm ? 1.0f : cfg->zero_centred_norm ? 1.0f : 0.0f;
    const float *qn = lw->q_norm ? lw->q_norm : ws->zeros, *kn = lw->k_norm ? lw->k_norm : ws->zeros;
    if (cfg->qk_norm == SL_QK_NORM_ALL) { /* before the split into heads */
        be->rmsnorm(be, ws->big, ws->big, n, ldq, 1, 0, nh * hd, qn, w_off, cfg->eps);
        be->rmsnorm(be, ws->k, ws->k, n, kvrow, 1, 0, (int)kvrow, kn, w_off, cfg->eps);
    } else if (cfg->qk_norm == SL_QK_NORM_HEAD) {
        be->rmsnorm(be, ws->big, ws->big, n, ldq, nh, (size_t)qstride, hd, qn, w_off, cfg->eps);
        be->rmsnorm(be, ws->k, ws->k, n, kvrow, nkv, (size_t)hd, hd, kn, w_off, cfg->eps);
    }
}

/* Llama 4's temperature tuning of a NoPE layer's queries (modeling_llama4.py Llama4TextAttention): each row times
 * log1p(floor((pos + 1) / floor_scale)) * attn_scale + 1 (f32), pos its position. */
static void temperature(fwd_ws *ws, const fam_config *cfg, int qcols, const int *ns, const int *pos0s, int n_items) {
    float s[FWD_BATCH];
    const float fs = (float)cfg->attn_floor_scale, as = (float)cfg->attn_temp;
    for (int i = 0, r0 = 0; i < n_items; r0 += ns[i], i++) {
        for (int t0 = 0; t0 < ns[i]; t0 += FWD_BATCH) {
            const int nb = ns[i] - t0 < FWD_BATCH ? ns[i] - t0 : FWD_BATCH;
            for (int t = 0; t < nb; t++) s[t] = log1pf(floorf(((float)(pos0s[i] + t0 + t) + 1.0f) / fs)) * as + 1.0f;
            ws->be->row_scale(ws->be, ws->big + (size_t)(r0 + t0) * (size_t)ws->n_big, (size_t)ws->n_big, nb, qcols, s);
        }
    }
}

/* Items' rows of ws->h together (see fwd_internal.h fwd_attention_items): q/k/v, biases, q/k norms and o over
 * every row in one op each; the cache hint, RoPE and the attention op per item (its positions, its cache), or, where
 * the backend has them (rope_at, attention_items), RoPE of every row in one op and the items' attention in one op per
 * ATTN_GROUP items: each item's bits its own ops' (backend.h). */
int fwd_attention_items(fwd_ws *ws, fwd_seq *const *sqs, const int *ns, const int *pos0s, int n_items,
                        const fam_config *cfg, const fam_layer_w *lw, int layer) {
    be_backend *be = ws->be;
    const size_t H = (size_t)cfg->hidden, ldq = (size_t)ws->n_big;
    const cfg_attn ad = cfg_attn_at(cfg, layer); /* Gemma 4's full layers: their own head dims */
    const int nh = cfg->n_heads, nkv = ad.n_kv_heads, hd = ad.head_dim, rot = ad.rot_dim;
    const int gated = cfg->gated_attn, qstride = gated ? 2 * hd : hd, kvrow = nkv * hd, vd = ad.v_dim, vrow = nkv * vd;
    int n = 0;
    for (int i = 0; i < n_items; i++) n += ns[i];

    kern_act hx; /* quantized once for q, k and v */
    fwd_act(ws, &hx, FWD_ACT_IN, ws->h, H, n, (int)H);
    const kern_mm qkv[3] = {{&lw->q, &hx, ws->big, ldq}, {&lw->k, &hx, ws->k, (size_t)kvrow},
                            {&lw->v, &hx, ws->v, (size_t)vrow}};
    const int k_is_v = cfg->k_eq_v && !lw->v.data; /* values = the raw k projection (Gemma 4's full layers) */
    be->matmul_multi(be, qkv, k_is_v ? 2 : 3); /* one thread hand-off for the three */
    if (k_is_v) be->copy(be, ws->v, ws->k, (size_t)n * (size_t)kvrow * sizeof(float), BE_D2D);
    if (cfg->attn_v_scale > 0) be->scale(be, ws->v, (size_t)n * (size_t)vrow, (float)cfg->attn_v_scale, NULL);
    if (cfg->attn_bias) { /* q/k/v biases (not gated: q rows are [nh*hd]) */
        be->add_bias(be, ws->big, ldq, lw->q_bias, n, nh * hd);
        be->add_bias(be, ws->k, (size_t)kvrow, lw->k_bias, n, kvrow);
        be->add_bias(be, ws->v, (size_t)vrow, lw->v_bias, n, vrow);
    }
    for (int i = 0; be->hint && i < n_items; i++) { /* the attention op reads the cached rows: fetched during q/k norm and RoPE */
        const fwd_seq *sq = sqs[i];
        if (pos0s[i] <= 0) continue;
        const size_t rows = (size_t)(pos0s[i] < sq->kv_cap[layer] ? pos0s[i] : sq->kv_cap[layer]);
        const size_t most = FWD_HINT_BYTES / 2 / (size_t)n_items; /* more is not fetched in the gap */
        size_t b2[2] = {rows * fwd_kv_row_bytes(sq, layer, 0), rows * fwd_kv_row_bytes(sq, layer, 1)};
        for (int k = 0; k < 2; k++) b2[k] = b2[k] < most ? b2[k] : most;
        const void *p[2] = {sq->k_cache[layer], sq->v_cache[layer]};
        be->hint(be, p, b2, 2);
    }

    float inv_freq[SL_ROPE_MAX_FREQS], attn_factor;
    rope_freqs_at(cfg, layer, inv_freq, &attn_factor);

    const int nope = cfg->nope_full && !cfg->layer_sliding[layer]; /* Llama 4's NoPE layers: no RoPE, no q/k norm */
    if (!cfg->qk_norm_after_rope && !nope) qk_norms(ws, cfg, lw, ad, n);
    if (cfg->v_norm) /* per head, no weight: (1 + 0) */
        be->rmsnorm(be, ws->v, ws->v, n, (size_t)vrow, nkv, (size_t)vd, vd, ws->zeros, 1.0f, cfg->eps);
    const int il = cfg->rope_interleave; /* Llama 4's adjacent pairs */
    if (be->rope_at && n_items > 1 && n <= FWD_BATCH && !nope) { /* every item's rows in one op each (q, k) */
        int pos[FWD_BATCH];
        for (int i = 0, r = 0; i < n_items; i++)
            for (int t = 0; t < ns[i]; t++) pos[r++] = pos0s[i] + t;
        be->rope_at(be, ws->big, n, ldq, nh, (size_t)qstride, rot, inv_freq, attn_factor, pos, il);
        be->rope_at(be, ws->k, n, (size_t)kvrow, nkv, (size_t)hd, rot, inv_freq, attn_factor, pos, il);
    } else {
        for (int i = 0, r0 = 0; i < n_items && !nope; r0 += ns[i], i++) {
            float *q = ws->big + (size_t)r0 * ldq, *k = ws->k + (size_t)r0 * kvrow;
            be->rope(be, q, ns[i], ldq, nh, (size_t)qstride, rot, inv_freq, attn_factor, pos0s[i], il);
            be->rope(be, k, ns[i], (size_t)kvrow, nkv, (size_t)hd, rot, inv_freq, attn_factor, pos0s[i], il);
        }
    }
    if (cfg->qk_norm_after_rope && !nope) qk_norms(ws, cfg, lw, ad, n); /* HunYuan, Llama 4: after RoPE */
    if (nope && cfg->attn_floor_scale > 0) temperature(ws, cfg, nh * hd, ns, pos0s, n_items);
    be_attn group[ATTN_GROUP]; /* items for attention_items */
    for (int i = 0, r0 = 0, ng = 0; i < n_items; r0 += ns[i], i++) {
        float *q = ws->big + (size_t)r0 * ldq, *k = ws->k + (size_t)r0 * kvrow, *v = ws->v + (size_t)r0 * vrow;
        const int chunked = cfg->layer_sliding[layer] && cfg->attn_chunk > 0;
        const be_attn a = {.q = q, .ldq = ldq, .qstride = qstride, .gated = gated, .k = k, .v = v, .ldkv = (size_t)kvrow,
                           .ldv = (size_t)vrow, .v_dim = vd, .k_cache = sqs[i]->k_cache[layer],
                           .v_cache = sqs[i]->v_cache[layer], .kv_type = sqs[i]->kv_type, .kv_type_v = sqs[i]->kv_type_v,
                           .cap = sqs[i]->kv_cap[layer], .n = ns[i], .pos0 = pos0s[i], .n_heads = nh, .n_kv_heads = nkv,
                           .head_dim = hd, .window = cfg->layer_sliding[layer] && !chunked ? cfg->sliding_window : 0,
                           .chunk = chunked ? cfg->attn_chunk : 0,
                           .sinks = cfg->attn_sinks ? lw->sinks : NULL,
                           .scale = cfg->attn_scale > 0 ? (float)cfg->attn_scale : 1.0f / sqrtf((float)hd),
                           .out = ws->mix + (size_t)r0 * ws->n_mix, .ldo = (size_t)ws->n_mix};
        if (!be->attention_items || n_items < 2) {
            be->attention(be, &a);
            continue;
        }
        group[ng++] = a;
        if (ng == ATTN_GROUP || i == n_items - 1) be->attention_items(be, group, ng), ng = 0;
    }
    fwd_hint_mat(ws, &lw->o); /* during the gate and o's int8 input */

    fwd_matmul(ws, &lw->o, ws->mix, (size_t)ws->n_mix, ws->out, H, n, FWD_ACT_MID);
    if (lw->o_bias) be->add_bias(be, ws->out, H, lw->o_bias, n, (int)H);
    return 0;
}

int fwd_attention(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_layer_w *lw, int layer, int n, int pos0) {
    return fwd_attention_items(ws, &sq, &n, &pos0, 1, cfg, lw, layer);
}
