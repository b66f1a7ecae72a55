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
 * Layouts: big [B][n_big] holds q_proj rows, per head [query (hd) | gate (hd)] when gated, else
 * [query (hd)]; k, v [B][nkv*hd]; cache [kv_cap][nkv] heads of the sequence's kv_type (quant/kv.h); mix
 * [B][n_mix] holds [nh][hd] outputs.
 */
#include <math.h>

#include "family/rope.h"
#include "model/fwd_internal.h"

/* Items' rows of ws->h together (see fwd_internal.h fwd_attention_items): q/k/v, biases, q/k norms and o over
 * every row in one op each; the cache hint, RoPE and the attention op per item (its positions, its cache). */
int fwd_attention_items(fwd_ws *ws, fwd_seq *const *sqs, const int *ns, const int *pos0s, int n_items,
                        const fam_config *cfg, const fam_layer_w *lw, int layer) {
    be_backend *be = ws->be;
    const size_t H = (size_t)cfg->hidden, ldq = (size_t)ws->n_big;
    const int nh = cfg->n_heads, nkv = cfg->n_kv_heads, hd = cfg->head_dim, rot = cfg->rot_dim;
    const int gated = cfg->gated_attn, qstride = gated ? 2 * hd : hd, kvrow = nkv * hd;
    const float w_off = cfg->zero_centred_norm ? 1.0f : 0.0f;
    int n = 0;
    for (int i = 0; i < n_items; i++) n += ns[i];

    kern_act hx; /* quantized once for q, k and v */
    fwd_act(ws, &hx, FWD_ACT_IN, ws->h, H, n, (int)H);
    const kern_mm qkv[3] = {{&lw->q, &hx, ws->big, ldq}, {&lw->k, &hx, ws->k, (size_t)kvrow},
                            {&lw->v, &hx, ws->v, (size_t)kvrow}};
    be->matmul_multi(be, qkv, 3); /* one thread hand-off for the three */
    if (cfg->attn_bias) { /* q/k/v biases (not gated: q rows are [nh*hd]) */
        be->add_bias(be, ws->big, ldq, lw->q_bias, n, nh * hd);
        be->add_bias(be, ws->k, (size_t)kvrow, lw->k_bias, n, kvrow);
        be->add_bias(be, ws->v, (size_t)kvrow, lw->v_bias, n, kvrow);
    }
    for (int i = 0; be->hint && i < n_items; i++) { /* the attention op reads the cached rows: fetched during q/k norm and RoPE */
        const fwd_seq *sq = sqs[i];
        if (pos0s[i] <= 0) continue;
        size_t bytes = (size_t)(pos0s[i] < sq->kv_cap[layer] ? pos0s[i] : sq->kv_cap[layer]) * fwd_kv_row_bytes(sq);
        if (bytes > FWD_HINT_BYTES / 2 / (size_t)n_items) bytes = FWD_HINT_BYTES / 2 / (size_t)n_items; /* more is not fetched in the gap */
        const void *p[2] = {sq->k_cache[layer], sq->v_cache[layer]};
        const size_t b2[2] = {bytes, bytes};
        be->hint(be, p, b2, 2);
    }

    float inv_freq[SL_ROPE_MAX_FREQS], attn_factor;
    rope_freqs(cfg, inv_freq, &attn_factor);

    if (cfg->qk_norm == SL_QK_NORM_ALL) { /* over the whole projection (OLMoE), before the split into heads */
        be->rmsnorm(be, ws->big, ws->big, n, ldq, 1, 0, nh * hd, lw->q_norm, w_off, cfg->eps);
        be->rmsnorm(be, ws->k, ws->k, n, (size_t)kvrow, 1, 0, kvrow, lw->k_norm, w_off, cfg->eps);
    } else if (cfg->qk_norm == SL_QK_NORM_HEAD && !cfg->qk_norm_after_rope) {
        be->rmsnorm(be, ws->big, ws->big, n, ldq, nh, (size_t)qstride, hd, lw->q_norm, w_off, cfg->eps);
        be->rmsnorm(be, ws->k, ws->k, n, (size_t)kvrow, nkv, (size_t)hd, hd, lw->k_norm, w_off, cfg->eps);
    }
    for (int i = 0, r0 = 0; i < n_items; r0 += ns[i], i++) {
        float *q = ws->big + (size_t)r0 * ldq, *k = ws->k + (size_t)r0 * kvrow, *v = ws->v + (size_t)r0 * kvrow;
        be->rope(be, q, ns[i], ldq, nh, (size_t)qstride, rot, inv_freq, attn_factor, pos0s[i], cfg->rope_interleave);
        be->rope(be, k, ns[i], (size_t)kvrow, nkv, (size_t)hd, rot, inv_freq, attn_factor, pos0s[i], cfg->rope_interleave);
        if (cfg->qk_norm == SL_QK_NORM_HEAD && cfg->qk_norm_after_rope) { /* HunYuan: per head, after RoPE */
            be->rmsnorm(be, q, q, ns[i], ldq, nh, (size_t)qstride, hd, lw->q_norm, w_off, cfg->eps);
            be->rmsnorm(be, k, k, ns[i], (size_t)kvrow, nkv, (size_t)hd, hd, lw->k_norm, w_off, cfg->eps);
        }
        const be_attn a = {.q = q, .ldq = ldq, .qstride = qstride, .gated = gated, .k = k, .v = v, .ldkv = (size_t)kvrow,
                           .k_cache = sqs[i]->k_cache[layer], .v_cache = sqs[i]->v_cache[layer], .kv_type = sqs[i]->kv_type,
                           .cap = sqs[i]->kv_cap[layer], .n = ns[i], .pos0 = pos0s[i], .n_heads = nh, .n_kv_heads = nkv,
                           .head_dim = hd, .window = cfg->layer_sliding[layer] ? cfg->sliding_window : 0,
                           .sinks = cfg->attn_sinks ? lw->sinks : NULL, .scale = 1.0f / sqrtf((float)hd),
                           .out = ws->mix + (size_t)r0 * ws->n_mix, .ldo = (size_t)ws->n_mix};
        be->attention(be, &a);
    }
    fwd_hint_mat(ws, &lw->o); /* during the gate and o's int8 input */

    fwd_matmul(ws, &lw->o, ws->mix, (size_t)ws->n_mix, ws->out, H, n, FWD_ACT_MID);
    if (lw->o_bias) be->add_bias(be, ws->out, H, lw->o_bias, n, (int)H);
    return 0;
}

int fwd_attention(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_layer_w *lw, int layer, int n, int pos0) {
    return fwd_attention_items(ws, &sq, &n, &pos0, 1, cfg, lw, layer);
}
