/*
 * hc.c — the residual stream around a block: plain (x += block(norm(x))) or DeepSeek-V4's manifold-constrained
 * hyper-connections (cfg->hc_mult > 0), after transformers' src/transformers/models/deepseek_v4/
 * modeling_deepseek_v4.py (DeepseekV4HyperConnection, DeepseekV4HyperHead, DeepseekV4DecoderLayer).
 *
 * With hyper-connections a token's residual is hc streams of H (X [n][hc*H], the embedding copied into each).
 * Entering a block: mixes = fn (RMSNorm(flattened streams), unweighted) — (2 + hc) * hc numbers per token — give
 * pre (hc), post (hc) and comb (hc x hc, Sinkhorn-normalised: the hc_mix op, backend.h); the block's input is
 * norm(sum_j pre_j X_j). Leaving it: stream k = post_k * out + sum_j comb[j][k] X_j (the hc_post op). The last
 * collapse (hc_head) takes pre only, from its own fn, before the final norm.
 */
#include "model/fwd_internal.h"

/* The mixes of X's n rows into mix [n][ldm]: fn over the RMS-normed rows (tmp [n][hc*H], the exact kernels:
 * transformers multiplies them in f32). */
static void hc_mixes(fwd_ws *ws, const fam_config *cfg, const tn_mat *fn, const float *X, int n, float *tmp,
                     float *mix, size_t ldm) {
    const int R = cfg_res_width(cfg);
    ws->be->rmsnorm(ws->be, X, tmp, n, (size_t)R, 1, 0, R, ws->ones, 0.0f, cfg->eps);
    kern_act a;
    kern_act_init(&a, NULL, tmp, (size_t)R, n, R, 0);
    be_matmul(ws->be, fn, &a, mix, ldm);
}

void fwd_block_in_rows(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int ffn, const float *X, int n,
                       float *tmp, float *mix, float *y) {
    const float *norm = ffn ? lw->ffn_norm : lw->attn_norm;
    const int H = cfg->hidden;
    if (cfg->hc_mult <= 0) {
        fwd_norm_rows(ws, X, norm, cfg->zero_centred_norm, cfg->eps, y, n, H);
        return;
    }
    const size_t ldm = (size_t)fwd_hc_ldm(cfg);
    hc_mixes(ws, cfg, &lw->hc_fn[ffn], X, n, tmp, mix, ldm);
    const be_hc h = {.n = n, .hc = cfg->hc_mult, .H = H, .iters = cfg->hc_iters, .eps = (float)cfg->hc_eps, .x = X,
                     .mix = mix, .ldm = ldm, .base = lw->hc_base[ffn], .scale = lw->hc_scale[ffn], .y = y};
    ws->be->hc_mix(ws->be, &h);
    fwd_norm_rows(ws, y, norm, 0, cfg->eps, y, n, H);
}

void fwd_block_out_rows(fwd_ws *ws, const fam_config *cfg, float *X, const float *out, const float *mix, int n) {
    if (cfg->hc_mult <= 0) {
        ws->be->add(ws->be, X, out, (size_t)n * (size_t)cfg->hidden);
        return;
    }
    ws->be->hc_post(ws->be, X, out, mix, (size_t)fwd_hc_ldm(cfg), n, cfg->hc_mult, cfg->hidden);
}

void fwd_embed_rows(fwd_ws *ws, const fam_config *cfg, const fam_weights *w, const int32_t *tokens, int n, float *X) {
    const size_t R = (size_t)cfg_res_width(cfg), H = (size_t)cfg->hidden;
    ws->be->embed(ws->be, &w->embed, tokens, n, X, R);
    for (int s = 1; s < cfg->hc_mult; s++) ws->be->copy_rows(ws->be, X + s * H, R, NULL, X, R, NULL, n, (int)H);
}

void fwd_final_rows(fwd_ws *ws, const fam_config *cfg, const fam_weights *w, const float *X, int n, float *y) {
    const int H = cfg->hidden;
    if (cfg->hc_mult > 0) {
        const size_t ldm = (size_t)fwd_hc_ldm(cfg);
        hc_mixes(ws, cfg, &w->hc_head_fn, X, n, ws->hc_tmp, ws->hc_mix, ldm);
        const be_hc h = {.n = n, .hc = cfg->hc_mult, .H = H, .iters = cfg->hc_iters, .head = 1,
                         .eps = (float)cfg->hc_eps, .x = X, .mix = ws->hc_mix, .ldm = ldm, .base = w->hc_head_base,
                         .scale = w->hc_head_scale, .y = y};
        ws->be->hc_mix(ws->be, &h);
        X = y;
    }
    fwd_norm_rows(ws, X, w->final_norm, cfg->zero_centred_norm, cfg->eps, y, n, H);
}
