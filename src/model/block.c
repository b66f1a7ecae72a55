/*
 * block.c — the parts of a decoder layer some families add around the mixer and the FFN (Gemma 4:
 * transformers' models/gemma4/modeling_gemma4.py Gemma4TextDecoderLayer and Gemma4TextModel):
 *   - embeddings times cfg->embed_scale;
 *   - sandwich norms: the mixer's output RMS-normed (post_attention_layernorm) before the residual add, the FFN's
 *     output likewise (post_feedforward_layernorm);
 *   - a dense MLP beside the experts (cfg->ffn_beside): out = post(post1(mlp(pre(x))) + post2(moe(pre2(x)))), the
 *     router reading x itself through its own norm (moe.c);
 *   - the layer's output times layer_scalar;
 *   - the final logits tanh-capped (cfg->logit_softcap);
 *   - LongCat-Flash's shortcut MoE (cfg->moe_shortcut): a pair's first layer runs its experts on its FFN input beside
 *     its dense MLP, their output added after the second layer's FFN (modeling_longcat_flash.py
 *     LongcatFlashDecoderLayer).
 * Every step is an op per row, in the same order in a micro-batch (fwd_ffn_beside) and in a layer-major pass
 * (fwd_ffn_beside_wide), so the two give the same bits.
 */
#include "model/fwd_internal.h"

void fwd_embed_scale(fwd_ws *ws, const fam_config *cfg, float *x, int n) {
    if (cfg->embed_scale > 0) ws->be->scale(ws->be, x, (size_t)n * (size_t)cfg->hidden, (float)cfg->embed_scale, NULL);
}

void fwd_post_norm(fwd_ws *ws, const fam_config *cfg, const float *w, float *out, int n) {
    if (w) fwd_norm_rows(ws, out, w, 0, cfg->eps, out, n, cfg->hidden);
    if (cfg->residual_scale > 0) /* Granite: residual + out * residual_multiplier */
        ws->be->scale(ws->be, out, (size_t)n * (size_t)cfg->hidden, (float)cfg->residual_scale, NULL);
}

void fwd_layer_end(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, float *x, int n) {
    if (lw->layer_scalar) ws->be->scale(ws->be, x, (size_t)n * (size_t)cfg->hidden, 1.0f, lw->layer_scalar);
}

void fwd_softcap(fwd_ws *ws, const fam_config *cfg, float *logits, int n) {
    if (cfg->logit_scale > 0) /* Granite: logits / logits_scaling */
        ws->be->scale(ws->be, logits, (size_t)n * (size_t)cfg->vocab, (float)cfg->logit_scale, NULL);
    if (cfg->logit_softcap > 0)
        ws->be->softcap(ws->be, logits, (size_t)n * (size_t)cfg->vocab, (float)cfg->logit_softcap);
}

/* The dense branch of n rows of x: post1(mlp(pre(x))) into y [n][H] (ws->h, ws->out as scratch), FWD_BATCH rows at
 * a time. */
static void dense_branch(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, const float *x, int n, float *y) {
    const size_t H = (size_t)cfg->hidden;
    for (int r0 = 0; r0 < n; r0 += FWD_BATCH) {
        const int nb = n - r0 < FWD_BATCH ? n - r0 : FWD_BATCH;
        fwd_norm_rows(ws, x + (size_t)r0 * H, lw->ffn_norm, 0, cfg->eps, ws->h, nb, (int)H);
        fwd_dense_mlp(ws, cfg, lw, nb);
        fwd_norm_rows(ws, ws->out, lw->post_ffn_norm1, 0, cfg->eps, y + (size_t)r0 * H, nb, (int)H);
    }
}

int fwd_ffn_beside(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int layer, const fam_layer_w *next_lw,
                   int next_layer, const tn_expert_src *experts, int n, sl_error *err) {
    const int H = cfg->hidden;
    dense_branch(ws, cfg, lw, ws->x, n, ws->sh_y); /* sh_y: no shared expert beside this one */
    fwd_norm_rows(ws, ws->x, lw->ffn_norm2, 0, cfg->eps, ws->h, n, H);
    int rc = fwd_moe(ws, cfg, lw, layer, next_lw, next_layer, experts, n, err);
    if (rc) return rc;
    fwd_norm_rows(ws, ws->out, lw->post_ffn_norm2, 0, cfg->eps, ws->out, n, H);
    ws->be->add(ws->be, ws->out, ws->sh_y, (size_t)n * (size_t)H);
    fwd_post_norm(ws, cfg, lw->post_ffn_norm, ws->out, n);
    return 0;
}

int fwd_ffn_beside_wide(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int layer,
                        const fam_layer_w *next_lw, int next_layer, const tn_expert_src *experts, int n, const float *x,
                        float *hn, float *out, const fwd_wide *wb, sl_error *err) {
    const int H = cfg->hidden;
    dense_branch(ws, cfg, lw, x, n, wb->sh_y);
    fwd_norm_rows(ws, x, lw->ffn_norm2, 0, cfg->eps, hn, n, H);
    int rc = fwd_moe_wide(ws, cfg, lw, layer, next_lw, next_layer, experts, n, x, hn, out, wb, err);
    if (rc) return rc;
    fwd_norm_rows(ws, out, lw->post_ffn_norm2, 0, cfg->eps, out, n, H);
    ws->be->add(ws->be, out, wb->sh_y, (size_t)n * (size_t)H);
    fwd_post_norm(ws, cfg, lw->post_ffn_norm, out, n);
    return 0;
}

int fwd_ffn_shortcut(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int layer, const fam_layer_w *next_lw,
                     int next_layer, const tn_expert_src *experts, int n, sl_error *err) {
    const int H = cfg->hidden;
    fwd_norm_rows(ws, ws->x, lw->ffn_norm, cfg->zero_centred_norm, cfg->eps, ws->h, n, H);
    if (cfg->layer_moe[layer]) {
        int rc = fwd_moe(ws, cfg, lw, layer, next_lw, next_layer, experts, n, err);
        if (rc) return rc;
        ws->be->copy(ws->be, ws->sc, ws->out, (size_t)n * (size_t)H * sizeof(float), BE_D2D);
    }
    return fwd_dense_mlp(ws, cfg, lw, n);
}

void fwd_shortcut_end(fwd_ws *ws, const fam_config *cfg, int layer, float *x, const float *sc, int n) {
    if (cfg->moe_shortcut && layer > 0 && !cfg->layer_moe[layer] && cfg->layer_moe[layer - 1])
        ws->be->add(ws->be, x, sc, (size_t)n * (size_t)cfg->hidden);
}
