/*
 * mla.c — multi-head latent attention (DeepSeek-V3, Kimi-K2; cfg->kv_lora > 0), after transformers'
 * src/transformers/models/deepseek_v3/modeling_deepseek_v3.py (DeepseekV3Attention), with MLA's compressed cache.
 *
 * Per token (r = kv_lora, dn = qk_nope, dr = rot_dim, dv = v_head_dim):
 *   q      = q_b(rmsnorm(q_a x))  (q_lora > 0)  or  q_proj x;  per head [q_nope (dn) | q_pe (dr)]
 *   ckv    = kv_a x = [c (r) | k_pe (dr)];  c = rmsnorm(c) (kv_a_layernorm);  k_pe: one RoPE key for all heads
 *   RoPE on q_pe and k_pe at the token's position (model/rope.h: the default table or YaRN): rotate-half, or
 *   (rope_interleave) adjacent pairs de-interleaved first, as apply_rotary_pos_emb_interleave, so q_pe / k_pe
 *   hold transformers' values. Softmax scale cfg->attn_scale: qk_head_dim^-0.5, times mscale^2 under YaRN.
 * The cache keeps [c | k_pe] (r + dr floats) per position, never the per-head K/V that kv_b_proj expands them
 * to. kv_b's rows are per head [W_uk (dn rows) | W_uv (dv rows)] of r columns; with them absorbed,
 *   score(t, p) = (q_nope . W_uk c_p + q_pe . k_pe_p) * scale = [W_uk^T q_nope | q_pe] . [c_p | k_pe_p] * scale
 *   out_h       = sum_p a_p W_uv c_p = W_uv (sum_p a_p c_p)
 * in three passes over the micro-batch: the absorbed queries [W_uk^T q_nope | q_pe] (r + dr) per (token, head), a
 * head per work item, each W_uk row dequantised once and added in row order; then per (token, head) the
 * scores against each cached row (one dot of r + dr), softmax (f32, sum in double, as attention.c) and the
 * weighted sum of the cached c rows in increasing position order; then W_uv per head as one matmul over the
 * tokens (a row view of kv_b).
 * The same quantities as transformers' in another association: within ~1e-6 of it, not bitwise. Each item's
 * arithmetic depends only on its own token, head and the cache, never on the batch or the thread count.
 * The low-rank norms (q_a_layernorm, kv_a_layernorm) use transformers' default eps 1e-6, not rms_norm_eps.
 *
 * Layouts: ws->big [B][n_big] queries (per head dn + dr), ws->v [B][q_lora] the q_a output, ws->k [B][r + dr],
 * ws->mla_q [B][nh][r + dr] absorbed queries, ws->mla_lat [B][nh][r] latent sums, cache [n_ctx][r + dr],
 * ws->mix [B][n_mix] holds [nh][dv]; per-thread scratch: scores [n_ctx] or one dequantised kv_b row [r].
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "model/fwd_internal.h"
#include "model/rope.h"
#include "quant/quant.h"

#define MLA_NORM_EPS 1e-6f /* DeepseekV3RMSNorm(q_lora_rank) / (kv_lora_rank): the default eps */

size_t fwd_mla_slot_floats(const sl_config *cfg, int n_ctx) {
    if (cfg->kv_lora <= 0) return 0;
    return (size_t)n_ctx + (size_t)cfg->kv_lora + 16; /* scores, or one dequantised kv_b row */
}

/* RoPE on x [dr] at pos: rotate-half (x_i, x_{i+dr/2}) by inv_freq[i], or, interleaved, pairs (x_2i, x_2i+1)
 * rotated by inv_freq[i] and written de-interleaved (first halves' outputs, then seconds'), as transformers;
 * cos and sin times the table's attention factor (YaRN's attention_scaling, model/rope.h; 1 otherwise). */
static void rope(float *x, int dr, const float *inv_freq, float attn_factor, int pos, int interleave) {
    const int half = dr / 2;
    float tmp[1024];
    if (interleave) {
        for (int i = 0; i < half; i++) {
            tmp[i] = x[2 * i];
            tmp[i + half] = x[2 * i + 1];
        }
        memcpy(x, tmp, (size_t)dr * sizeof(float));
    }
    for (int i = 0; i < half; i++) {
        float ang = (float)pos * inv_freq[i];
        float c = cosf(ang) * attn_factor, s = sinf(ang) * attn_factor;
        float a = x[i], b = x[i + half];
        x[i] = a * c - b * s;
        x[i + half] = b * c + a * s;
    }
}

typedef struct {
    fwd_ws *ws;
    const sl_mat *kv_b;
    const float *cache;
    int n_tok, n_heads, r, dr, dn, dv, qh, pos0;
    float scale;
    atomic_int next_slot;
} mla_job;

/* Row `row` of kv_b as f32: the stored row itself for f32 matrices, else dequantised into buf. */
static const float *kvb_row(const sl_mat *m, int row, float *buf) {
    if (m->dtype == DT_F32) return (const float *)m->data + (size_t)row * (size_t)m->cols;
    q_row_to_f32(m, row, buf);
    return buf;
}

/* Rows row0 .. row0+n-1 of m as a matrix of their own (any dtype; quant.h's layout: codes, scales and biases
 * are row-major, so a row range is a range of each). */
static sl_mat rows_view(const sl_mat *m, int row0, int n) {
    sl_mat v = *m;
    const int bits = q_bits(m->dtype);
    v.rows = n;
    if (!bits) {
        v.data = (const uint8_t *)m->data + (size_t)row0 * (size_t)m->cols * dt_size(m->dtype);
        return v;
    }
    const size_t ng = (size_t)(m->cols / m->group);
    v.data = (const uint8_t *)m->data + (size_t)row0 * (size_t)m->cols * (size_t)bits / 8;
    v.scales = (const uint8_t *)m->scales + (size_t)row0 * ng * dt_size(m->sdtype);
    if (m->biases) v.biases = (const uint8_t *)m->biases + (size_t)row0 * ng * dt_size(m->sdtype);
    return v;
}

/* Absorbed queries, one head per item: mla_q[t][h] = [W_uk_h^T q_nope (r) | q_pe (dr)], W_uk_h = rows
 * h*(dn+dv) .. +dn of kv_b, each row dequantised once for all n tokens and added in row order. */
static void absorb_part(void *ctx, size_t begin, size_t end) {
    mla_job *j = ctx;
    fwd_ws *ws = j->ws;
    const kern_ops *ops = ws->ops;
    float *wrow = ws->scratch + (size_t)atomic_fetch_add(&j->next_slot, 1) * ws->slot_floats;
    const int r = j->r, dr = j->dr, dn = j->dn, dv = j->dv, row = r + dr, nh = j->n_heads;
    for (size_t h = begin; h < end; h++) {
        for (int t = 0; t < j->n_tok; t++) {
            float *qc = ws->mla_q + ((size_t)t * nh + h) * row;
            memset(qc, 0, (size_t)r * sizeof(float));
            memcpy(qc + r, ws->big + (size_t)t * ws->n_big + h * j->qh + dn, (size_t)dr * sizeof(float));
        }
        for (int i = 0; i < dn; i++) {
            const float *w = kvb_row(j->kv_b, (int)h * (dn + dv) + i, wrow);
            for (int t = 0; t < j->n_tok; t++)
                ops->axpy(ws->big[(size_t)t * ws->n_big + h * j->qh + i], w, ws->mla_q + ((size_t)t * nh + h) * row, r);
        }
    }
}

/* One (token, head) per item: scores against cached rows 0..pos, softmax, the weighted sum of the cached
 * latents into mla_lat[t][h]. */
static void attend_part(void *ctx, size_t begin, size_t end) {
    mla_job *j = ctx;
    fwd_ws *ws = j->ws;
    const kern_ops *ops = ws->ops;
    float *sc = ws->scratch + (size_t)atomic_fetch_add(&j->next_slot, 1) * ws->slot_floats;
    const int r = j->r, row = r + j->dr;
    for (size_t it = begin; it < end; it++) {
        int t = (int)(it / (size_t)j->n_heads);
        int n_keys = j->pos0 + t + 1;
        const float *qc = ws->mla_q + it * (size_t)row;
        float mx = -INFINITY;
        for (int p = 0; p < n_keys; p++) {
            sc[p] = ops->dot(qc, j->cache + (size_t)p * row, row) * j->scale;
            if (sc[p] > mx) mx = sc[p];
        }
        double sum = 0.0;
        for (int p = 0; p < n_keys; p++) {
            sc[p] = expf(sc[p] - mx);
            sum += sc[p];
        }
        float fsum = (float)sum, *lat = ws->mla_lat + it * (size_t)r;
        memset(lat, 0, (size_t)r * sizeof(float));
        for (int p = 0; p < n_keys; p++) ops->axpy(sc[p] / fsum, j->cache + (size_t)p * row, lat, r);
    }
}

int fwd_mla(fwd_ws *ws, fwd_seq *sq, const sl_config *cfg, const sl_layer_w *lw, int layer, sl_pool *pool, int n,
            int pos0) {
    const kern_ops *ops = ws->ops;
    const size_t H = (size_t)cfg->hidden;
    const int nh = cfg->n_heads, r = cfg->kv_lora, dr = cfg->rot_dim, dn = cfg->qk_nope, dv = cfg->v_head_dim;
    const int qh = dn + dr, row = r + dr, ql = cfg->q_lora;

    if (ql > 0) {
        kern_matmul(ops, pool, &lw->q_a, ws->h, H, ws->v, (size_t)ql, n);
        fwd_norm_rows(ops, ws->v, lw->q_a_norm, 0, MLA_NORM_EPS, ws->v, n, ql);
        kern_matmul(ops, pool, &lw->q_b, ws->v, (size_t)ql, ws->big, (size_t)ws->n_big, n);
    } else {
        kern_matmul(ops, pool, &lw->q, ws->h, H, ws->big, (size_t)ws->n_big, n);
    }
    kern_matmul(ops, pool, &lw->kv_a, ws->h, H, ws->k, (size_t)row, n);

    float inv_freq[SL_ROPE_MAX_FREQS], attn_factor;
    rope_freqs(cfg, inv_freq, &attn_factor); /* over rot_dim = qk_rope_head_dim: the default table or YaRN */

    float *cache = sq->k_cache[layer];
    for (int t = 0; t < n; t++) {
        int pos = pos0 + t;
        float *kr = ws->k + (size_t)t * row, *qr = ws->big + (size_t)t * ws->n_big;
        ops->rmsnorm(kr, lw->kv_a_norm, 0.0f, MLA_NORM_EPS, kr, r);
        rope(kr + r, dr, inv_freq, attn_factor, pos, cfg->rope_interleave);
        for (int h = 0; h < nh; h++) rope(qr + (size_t)h * qh + dn, dr, inv_freq, attn_factor, pos, cfg->rope_interleave);
        memcpy(cache + (size_t)pos * row, kr, (size_t)row * sizeof(float));
    }

    mla_job j = {.ws = ws, .kv_b = &lw->kv_b, .cache = cache, .n_tok = n, .n_heads = nh, .r = r, .dr = dr,
                 .dn = dn, .dv = dv, .qh = qh, .pos0 = pos0,
                 .scale = (float)(cfg->attn_scale > 0 ? cfg->attn_scale : 1.0 / sqrt((double)cfg->head_dim))};
    atomic_init(&j.next_slot, 0);
    sl_pool_for(pool, (size_t)nh, 1, absorb_part, &j);
    atomic_init(&j.next_slot, 0);
    sl_pool_for(pool, (size_t)n * (size_t)nh, 1, attend_part, &j);
    /* out_h = W_uv_h lat_h (rows h*(dn+dv)+dn .. +dv of kv_b) for every token, head by head */
    for (int h = 0; h < nh; h++) {
        sl_mat wuv = rows_view(&lw->kv_b, h * (dn + dv) + dn, dv);
        kern_matmul(ops, pool, &wuv, ws->mla_lat + (size_t)h * r, (size_t)nh * r, ws->mix + (size_t)h * dv,
                    (size_t)ws->n_mix, n);
    }
    kern_matmul(ops, pool, &lw->o, ws->mix, (size_t)ws->n_mix, ws->out, H, n);
    return 0;
}
