/*
 * mla.c — multi-head latent attention (DeepSeek-V3, Kimi-K2; cfg->kv_lora > 0), after transformers'
 * src/transformers/models/deepseek_v3/modeling_deepseek_v3.py (DeepseekV3Attention), with MLA's compressed cache.
 *
 * Per token (r = kv_lora, dn = qk_nope, dr = rot_dim, dv = v_head_dim):
 *   q      = q_b(rmsnorm(q_a x))  (q_lora > 0)  or  q_proj x;  per head [q_nope (dn) | q_pe (dr)]
 *   ckv    = kv_a x = [c (r) | k_pe (dr)];  c = rmsnorm(c) (kv_a_layernorm);  k_pe: one RoPE key for all heads
 *   RoPE on q_pe and k_pe at the token's position (family/rope.h: the default table or YaRN): rotate-half, or
 *   (rope_interleave) adjacent pairs de-interleaved first, as apply_rotary_pos_emb_interleave, so q_pe / k_pe
 *   hold transformers' values. Softmax scale cfg->attn_scale: qk_head_dim^-0.5, times mscale^2 under YaRN.
 * The cache keeps [c | k_pe] (r + dr floats) per position, never the per-head K/V that kv_b_proj expands them
 * to. kv_b's rows are per head [W_uk (dn rows) | W_uv (dv rows)] of r columns; with them absorbed,
 *   score(t, p) = (q_nope . W_uk c_p + q_pe . k_pe_p) * scale = [W_uk^T q_nope | q_pe] . [c_p | k_pe_p] * scale
 *   out_h       = sum_p a_p W_uv c_p = W_uv (sum_p a_p c_p)
 * in three passes over the micro-batch (the backend's mla op does the first two; src/backend/backend.h): the absorbed queries [W_uk^T q_nope | q_pe] (r + dr) per (token, head), a
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

#include "family/rope.h"
#include "model/fwd_internal.h"
#include "quant/quant.h"

#define MLA_NORM_EPS 1e-6f /* DeepseekV3RMSNorm(q_lora_rank) / (kv_lora_rank): the default eps */

size_t fwd_mla_slot_floats(const fam_config *cfg, int n_ctx) {
    if (cfg->kv_lora <= 0) return 0;
    return (size_t)n_ctx + (size_t)cfg->kv_lora + 16; /* scores, or one dequantised kv_b row */
}

/* Rows row0 .. row0+n-1 of m as a matrix of their own (any dtype; quant.h's layout: codes, scales and biases
 * are row-major, so a row range is a range of each). Pointer arithmetic only: valid in any backend's memory. */
static tn_mat rows_view(const tn_mat *m, int row0, int n) {
    tn_mat v = *m;
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

/* y = W x with the exact (f32-activation) kernels, as MLA has always multiplied. */
static void mm_exact(be_backend *be, const tn_mat *w, const float *x, size_t ldx, float *y, size_t ldy, int n) {
    kern_act a;
    kern_act_init(&a, NULL, x, ldx, n, w->cols, 0);
    be_matmul(be, w, &a, y, ldy);
}

int fwd_mla(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_layer_w *lw, int layer, int n, int pos0) {
    be_backend *be = ws->be;
    const size_t H = (size_t)cfg->hidden, ldq = (size_t)ws->n_big;
    const int nh = cfg->n_heads, r = cfg->kv_lora, dr = cfg->rot_dim, dn = cfg->qk_nope, dv = cfg->v_head_dim;
    const int qh = dn + dr, row = r + dr, ql = cfg->q_lora;

    if (ql > 0) {
        mm_exact(be, &lw->q_a, ws->h, H, ws->v, (size_t)ql, n);
        be->rmsnorm(be, ws->v, ws->v, n, (size_t)ql, 1, 0, ql, lw->q_a_norm, 0.0f, MLA_NORM_EPS);
        mm_exact(be, &lw->q_b, ws->v, (size_t)ql, ws->big, ldq, n);
    } else {
        mm_exact(be, &lw->q, ws->h, H, ws->big, ldq, n);
    }
    mm_exact(be, &lw->kv_a, ws->h, H, ws->k, (size_t)row, n);

    float inv_freq[SL_ROPE_MAX_FREQS], attn_factor;
    rope_freqs(cfg, inv_freq, &attn_factor); /* over rot_dim = qk_rope_head_dim: the default table or YaRN */
    be->rmsnorm(be, ws->k, ws->k, n, (size_t)row, 1, 0, r, lw->kv_a_norm, 0.0f, MLA_NORM_EPS);
    be->rope(be, ws->k + r, n, (size_t)row, 1, 0, dr, inv_freq, attn_factor, pos0, cfg->rope_interleave);
    be->rope(be, ws->big + dn, n, ldq, nh, (size_t)qh, dr, inv_freq, attn_factor, pos0, cfg->rope_interleave);

    const be_mla a = {.q = ws->big, .ldq = ldq, .ckv = ws->k, .cache = sq->k_cache[layer], .kv_b = &lw->kv_b, .n = n,
                      .pos0 = pos0, .n_heads = nh, .r = r, .dr = dr, .dn = dn, .dv = dv,
                      .scale = (float)(cfg->attn_scale > 0 ? cfg->attn_scale : 1.0 / sqrt((double)cfg->head_dim)),
                      .q_abs = ws->mla_q, .lat = ws->mla_lat};
    be->mla(be, &a);
    /* out_h = W_uv_h lat_h (rows h*(dn+dv)+dn .. +dv of kv_b) for every token, head by head */
    for (int h = 0; h < nh; h++) {
        tn_mat wuv = rows_view(&lw->kv_b, h * (dn + dv) + dn, dv);
        mm_exact(be, &wuv, ws->mla_lat + (size_t)h * r, (size_t)nh * r, ws->mix + (size_t)h * dv, (size_t)ws->n_mix, n);
    }
    mm_exact(be, &lw->o, ws->mix, (size_t)ws->n_mix, ws->out, H, n);
    return 0;
}
