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
 * weighted sum of the cached c rows in increasing position order; then W_uv of every head over the tokens (the
 * backend's mla_out op: f32 latents, the exact kernels). The projections (q_a, q_b or q, kv_a, o, the head gate, DSA's
 * wk, wq_b and weights) are attention.c's: int8 activations for q8/q4 matrices on the quantized path (ws->int8, the
 * FWD_ACT_* slots; docs/QUANT.md), the exact kernels for f32 / bf16 / f16 matrices and with --exact.
 * The same quantities as transformers' in another association: within ~1e-6 of it, not bitwise. Each item's
 * arithmetic depends only on its own token, head and the cache, never on the batch or the thread count.
 * The low-rank norms (q_a_layernorm, kv_a_layernorm) use transformers' default eps 1e-6, not rms_norm_eps.
 * Bailing hybrid's gated MLA (cfg->attn_head_gate; modeling_bailing_hybrid.py BailingHybridAttention): before o_proj
 * each head's output is multiplied by sigmoid(g_proj x)'s entry for that head (the head_gate op; g_proj's n_heads
 * rows in ws->z).
 *
 * DeepSeek sparse attention (cfg->dsa_topk > 0: DeepSeek-V3.2, GLM-5; transformers' DeepseekV32Indexer and
 * GlmMoeDsaIndexer): before the attention, the layer's indexer scores every cached position p <= pos for each
 * query (dsa_index below, backend dsa_select) and the attention's softmax and sum run over the dsa_topk positions
 * of the highest scores only (all of them while pos < dsa_topk), in increasing position order; transformers masks
 * the others with the dtype's minimum, whose exp is 0, so the two agree wherever no two scores tie at the cut.
 * The indexer's key of each position is kept in the cache row after [c | k_pe]. A layer without an indexer
 * (layer_dsa_shared) attends to the positions the last indexed layer chose for the same query.
 *
 * Layouts: ws->big [B][n_big] queries (per head dn + dr), ws->v [B][q_lora] the q_a output, ws->k [B][row] (row =
 * cfg_kv_row: r + dr, + dsa_dim with DSA), ws->mla_q [B][nh][r + dr] absorbed queries, ws->mla_lat [B][nh][r]
 * latent sums, cache [n_ctx][row], ws->mix [B][n_mix] holds [nh][dv], ws->dsa_q [B][dsa_heads][dsa_dim],
 * ws->dsa_w [B][dsa_heads], sq->dsa_sel the choice; per-thread scratch: scores [n_ctx] or one dequantised kv_b
 * row [r] (dsa_select: scores and their copy, 2 n_ctx; the CPU backend's decode split: all heads' scores
 * [nh][n_ctx] over the slots, up to 4M floats a slot, and a tile of 32 rows).
 */
#include <math.h>

#include "family/rope.h"
#include "model/fwd_internal.h"
#include "quant/quant.h"

#define MLA_NORM_EPS 1e-6f /* DeepseekV3RMSNorm(q_lora_rank) / (kv_lora_rank): the default eps */

size_t fwd_mla_slot_floats(const fam_config *cfg, int n_ctx) {
    if (cfg->kv_lora <= 0) return 0;
    size_t f = (size_t)n_ctx + (size_t)cfg->kv_lora + 16; /* scores, or one dequantised kv_b row */
    if (cfg->dsa_topk > 0 && 2 * (size_t)n_ctx + 16 > f) f = 2 * (size_t)n_ctx + 16; /* dsa_select: scores and a copy */
    /* the CPU backend's split of a decode step (backend/cpu/cpu_mla.c mla_split): every head's scores over the
     * context in the whole scratch, so in any one slot (as many as 4M floats hold, as forward.c's attention
     * scores; past that its heads go in passes), and a tile of 32 gathered cache rows a thread (DSA's choice) */
    size_t sp = (size_t)cfg->n_heads * (((size_t)n_ctx + 15) / 16 * 16);
    sp = (sp < ((size_t)1 << 22) ? sp : (size_t)1 << 22) + 32 * (size_t)(cfg->kv_lora + cfg->rot_dim) + 32;
    return f > sp ? f : sp;
}

/* Rows of a sequence's DSA choice: one per position when a layer reuses an earlier layer's choice (it must outlive
 * that layer's pass over the whole input), else one micro-batch's, rewritten by each indexed layer. */
static int dsa_sel_rows(const fam_config *cfg, int n_ctx) {
    for (int l = 0; l < cfg->n_layers; l++)
        if (cfg->layer_dsa_shared[l]) return n_ctx;
    return n_ctx < FWD_BATCH ? n_ctx : FWD_BATCH;
}

int fwd_mla_seq_alloc(fwd_seq *sq, const fam_config *cfg) {
    if (cfg->kv_lora <= 0 || cfg->dsa_topk <= 0) return 0;
    sq->dsa_sel_rows = dsa_sel_rows(cfg, sq->n_ctx);
    sq->dsa_sel_bytes = (size_t)sq->dsa_sel_rows * (size_t)cfg->dsa_topk * sizeof(int32_t);
    sq->dsa_sel = sq->be->alloc(sq->be, sq->dsa_sel_bytes, BE_BUF_DEVICE);
    return sq->dsa_sel ? 0 : -1;
}

void fwd_mla_seq_free(fwd_seq *sq) {
    if (sq->dsa_sel) sq->be->free(sq->be, sq->dsa_sel, sq->dsa_sel_bytes, BE_BUF_DEVICE);
    sq->dsa_sel = NULL;
}

int fwd_mla_ws_alloc(fwd_ws *ws, const fam_config *cfg) {
    if (cfg->kv_lora <= 0 || cfg->dsa_topk <= 0) return 0;
    const size_t b[2] = {(size_t)FWD_BATCH * (size_t)cfg->dsa_heads * (size_t)cfg->dsa_dim * sizeof(float),
                         (size_t)FWD_BATCH * (size_t)cfg->dsa_heads * sizeof(float)};
    float **p[2] = {&ws->dsa_q, &ws->dsa_w};
    for (int i = 0; i < 2; i++) {
        if (ws->n_dev >= (int)(sizeof ws->dev / sizeof ws->dev[0]) || !(*p[i] = ws->be->alloc(ws->be, b[i], BE_BUF_DEVICE)))
            return -1;
        ws->dev[ws->n_dev].p = *p[i];
        ws->dev[ws->n_dev++].bytes = b[i];
    }
    return 0;
}

/* DSA's indexer of layer `layer` over the micro-batch (cfg->dsa_topk > 0; transformers' DeepseekV32Indexer /
 * GlmMoeDsaIndexer): its key k = rope(LayerNorm(wk h)) into the cache row's tail (ws->k rows of ldc floats, at
 * r + dr), its queries q = rope(wq_b q_resid) per head (q_resid = ws->v, the normed q_a output), the heads' weights
 * weights_proj h, then dsa_select's choice into sel. RoPE over the first rot_dim dims of the key and of each query
 * head, adjacent pairs (GLM-5) or halves (DeepSeek-V3.2). A layer without an indexer of its own (GLM-5's shared
 * ones) keeps the choice an earlier layer left in sel, and zeros in its rows' key part. */
static void dsa_index(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_layer_w *lw, int layer, int n, int pos0,
                      const float *inv_freq, float attn_factor, int32_t *sel, kern_act *hx, kern_act *qx) {
    be_backend *be = ws->be;
    const int r = cfg->kv_lora, dr = cfg->rot_dim, ldc = cfg_kv_row(cfg), nih = cfg->dsa_heads, dim = cfg->dsa_dim;
    float *key = ws->k + r + dr;
    if (cfg->layer_dsa_shared[layer]) {
        for (int t = 0; t < n; t++) be->zero(be, key + (size_t)t * ldc, (size_t)dim * sizeof(float));
        return;
    }
    const kern_mm kw[2] = {{&lw->dsa_wk, hx, key, (size_t)ldc}, {&lw->dsa_wproj, hx, ws->dsa_w, (size_t)nih}};
    be->matmul_multi(be, kw, 2);
    be->layernorm(be, key, key, n, (size_t)ldc, dim, lw->dsa_k_norm, lw->dsa_k_norm_b, MLA_NORM_EPS);
    be->rope(be, key, n, (size_t)ldc, 1, 0, dr, inv_freq, attn_factor, pos0, cfg->dsa_interleave);
    be_matmul(be, &lw->dsa_wq_b, qx, ws->dsa_q, (size_t)nih * dim);
    be->rope(be, ws->dsa_q, n, (size_t)nih * dim, nih, (size_t)dim, dr, inv_freq, attn_factor, pos0, cfg->dsa_interleave);
    const be_dsa d = {.q = ws->dsa_q, .ldq = (size_t)nih * dim, .w = ws->dsa_w, .ldw = (size_t)nih, .k = key,
                      .ldk = (size_t)ldc, .cache = sq->k_cache[layer], .ldc = ldc, .koff = r + dr, .n = n, .pos0 = pos0,
                      .heads = nih, .dim = dim, .topk = cfg->dsa_topk, .scale = (float)(1.0 / sqrt((double)dim)),
                      .wscale = (float)(1.0 / sqrt((double)nih)), .sel = sel, .sel_ld = cfg->dsa_topk};
    be->dsa_select(be, &d);
}

/* LongCat-Flash's LoRA scales (modeling_longcat_flash.py LongcatFlashMLA): the queries (q_b's output, every
 * dim) times mla_q_scale, the normed latent (not the RoPE key) times mla_kv_scale; n <= FWD_BATCH rows. */
static void lora_scales(fwd_ws *ws, const fam_config *cfg, int n) {
    float s[FWD_BATCH];
    const int row = cfg_kv_row(cfg), qcols = cfg->n_heads * (cfg->qk_nope + cfg->rot_dim); /* as fwd_mla's ws->k */
    for (int t = 0; t < n; t++) s[t] = (float)cfg->mla_q_scale;
    if (cfg->mla_q_scale > 0) ws->be->row_scale(ws->be, ws->big, (size_t)ws->n_big, n, qcols, s);
    for (int t = 0; t < n; t++) s[t] = (float)cfg->mla_kv_scale;
    if (cfg->mla_kv_scale > 0) ws->be->row_scale(ws->be, ws->k, (size_t)row, n, cfg->kv_lora, s);
}

int fwd_mla(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_layer_w *lw, int layer, int n, int pos0) {
    be_backend *be = ws->be;
    const size_t H = (size_t)cfg->hidden, ldq = (size_t)ws->n_big;
    const int nh = cfg->n_heads, r = cfg->kv_lora, dr = cfg->rot_dim, dn = cfg->qk_nope, dv = cfg->v_head_dim;
    const int qh = dn + dr, row = cfg_kv_row(cfg), ql = cfg->q_lora, dsa = cfg->dsa_topk > 0;

    /* the projections as attention.c's (fwd_act: int8 activations for q8/q4 matrices when ws->int8, else the exact
     * kernels): h quantized once for q_a (or q), kv_a and the head gate in one hand-off, q_a's normed output once for
     * q_b (and DSA's wq_b) */
    kern_act hx, qx;
    fwd_act(ws, &hx, FWD_ACT_IN, ws->h, H, n, (int)H);
    const kern_mm in[3] = {{ql > 0 ? &lw->q_a : &lw->q, &hx, ql > 0 ? ws->v : ws->big, ql > 0 ? (size_t)ql : ldq},
                           {&lw->kv_a, &hx, ws->k, (size_t)row}, {&lw->head_gate, &hx, ws->z, (size_t)nh}};
    be->matmul_multi(be, in, cfg->attn_head_gate ? 3 : 2);
    fwd_act(ws, &qx, FWD_ACT_MID, ws->v, (size_t)ql, n, ql);
    if (ql > 0) {
        be->rmsnorm(be, ws->v, ws->v, n, (size_t)ql, 1, 0, ql, lw->q_a_norm, 0.0f, MLA_NORM_EPS);
        be_matmul(be, &lw->q_b, &qx, ws->big, ldq);
    }

    float inv_freq[SL_ROPE_MAX_FREQS], attn_factor;
    rope_freqs(cfg, inv_freq, &attn_factor); /* over rot_dim = qk_rope_head_dim: the default table or YaRN */
    be->rmsnorm(be, ws->k, ws->k, n, (size_t)row, 1, 0, r, lw->kv_a_norm, 0.0f, MLA_NORM_EPS);
    if (cfg->mla_q_scale > 0 || cfg->mla_kv_scale > 0) lora_scales(ws, cfg, n);
    if (!cfg->mla_nope) { /* Kimi Linear's MLA: no position encoding at all */
        be->rope(be, ws->k + r, n, (size_t)row, 1, 0, dr, inv_freq, attn_factor, pos0, cfg->rope_interleave);
        be->rope(be, ws->big + dn, n, ldq, nh, (size_t)qh, dr, inv_freq, attn_factor, pos0, cfg->rope_interleave);
    }
    /* the choice's rows: token t's at t (one micro-batch's), or at its position when layers share it */
    int32_t *sel = !dsa ? NULL : sq->dsa_sel + (size_t)(sq->dsa_sel_rows == sq->n_ctx ? pos0 : 0) * cfg->dsa_topk;
    if (dsa) dsa_index(ws, sq, cfg, lw, layer, n, pos0, inv_freq, attn_factor, sel, &hx, &qx);

    const be_mla a = {.q = ws->big, .ldq = ldq, .ckv = ws->k, .cache = sq->k_cache[layer], .ldc = row, .sel = sel,
                      .sel_ld = cfg->dsa_topk, .sel_k = cfg->dsa_topk, .kv_b = &lw->kv_b, .n = n,
                      .pos0 = pos0, .n_heads = nh, .r = r, .dr = dr, .dn = dn, .dv = dv,
                      .scale = (float)(cfg->attn_scale > 0 ? cfg->attn_scale : 1.0 / sqrt((double)cfg->head_dim)),
                      .q_abs = ws->mla_q, .lat = ws->mla_lat, .out = ws->mix, .ldo = (size_t)ws->n_mix};
    be->mla(be, &a);
    /* out_h = W_uv_h lat_h (rows h*(dn+dv)+dn .. +dv of kv_b): every head and token in one op, or head by head */
    if (!be->mla_out || !be->mla_out(be, &a))
        for (int h = 0; h < nh; h++) {
            const tn_mat wuv = q_rows_view(&lw->kv_b, h * (dn + dv) + dn, dv);
            kern_act la; /* f32 latents (the exact kernels), as mla_out */
            kern_act_init(&la, NULL, ws->mla_lat + (size_t)h * r, (size_t)nh * r, n, r, 0);
            be_matmul(be, &wuv, &la, ws->mix + (size_t)h * dv, (size_t)ws->n_mix);
        }
    fwd_hint_mat(ws, &lw->o); /* during the gate and o's int8 input */
    if (cfg->attn_head_gate) /* Bailing hybrid: each head's output times sigmoid(g_proj x)'s entry (ws->z) */
        be->head_gate(be, ws->mix, (size_t)ws->n_mix, (size_t)dv, dv, ws->z, (size_t)nh, n, nh);
    fwd_matmul(ws, &lw->o, ws->mix, (size_t)ws->n_mix, ws->out, H, n, FWD_ACT_MID);
    return 0;
}
