/*
 * deltanet.c — Gated DeltaNet mixer of qwen3_next / qwen3_5_moe (docs/MATH.md, Gated DeltaNet).
 *
 * Per micro-batch of n tokens, each step ops of the backend (src/backend/backend.h: dn_conv, dn_gates,
 * dn_step or dn_chunk, dn_norm, where the arithmetic lives):
 *   1. projections -> conv_in [n][Cq] = q|k|v (Next: in_proj_qkvz's rows regrouped once at load to q|k|v|z, so its
 *      matmul writes the conv input then z: one token reads them where they are, more take two row copies; or its
 *      halves in_proj_qkv and in_proj_z under qkvz_split), z [n][nv*dv],
 *      ba [n][2nv] (Next: raw grouped b|a per key head; Qwen3.5: b then a);
 *   2. causal depthwise conv1d + SiLU over [conv state (K-1 rows); conv_in] -> conv_out; the new conv
 *      state (last K-1 pre-conv rows) goes to the other slot;
 *   3. beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias) -> gates [n][2nv];
 *      q, k L2-normalised in place (q also times dk^-1/2);
 *   4. per value head (one pool work item each): the token recurrence (3.5.4) or, for n > 1 when
 *      enabled, the chunked form (3.5.5) with the whole micro-batch as one chunk; the state moves from
 *      slot lin_cur to slot 1-lin_cur;
 *   5. gated RMSNorm per head (plain w, times silu(z)), out_proj.
 * Value head h reads key/query head h / (nv/nk) (HF repeat_interleave).
 * LFM2's short convolutions take these layers' place and conv state (short_conv below).
 */
#include <string.h>

#include "model/fwd_internal.h"

/* LFM2's short convolution (cfg->short_conv), in the DeltaNet layers' place and state (conv slots lin_cur -> 1 -
 * lin_cur; its recurrent state unused): in_proj [3H, H] (lw->qkv) into big [n][B | C | x], the short_conv op into
 * mix, out_proj (lw->lin_out). */
static int short_conv(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_layer_w *lw, int layer, int n) {
    const size_t H = (size_t)cfg->hidden;
    fwd_matmul(ws, &lw->qkv, ws->h, H, ws->big, (size_t)ws->n_big, n, FWD_ACT_IN);
    const int cur = sq->lin_cur[layer];
    const be_sconv s = {.n = n, .ch = cfg->hidden, .k = cfg->conv_k, .bcx = ws->big, .ldb = (size_t)ws->n_big,
                        .w = lw->conv_w, .state_in = sq->conv[layer][cur], .state_out = sq->conv[layer][cur ^ 1],
                        .out = ws->mix, .ldo = (size_t)ws->n_mix};
    ws->be->short_conv(ws->be, &s);
    fwd_matmul(ws, &lw->lin_out, ws->mix, (size_t)ws->n_mix, ws->out, H, n, FWD_ACT_MID);
    return 0;
}

/* Granite 4.0 hybrid's Mamba2 (cfg->mamba), in the DeltaNet layers' place and state (lin dims: groups, state,
 * heads, head size): in_proj (lw->qkv) into big, the mamba2 op (conv state and S from slot lin_cur to 1 - lin_cur)
 * into mix, out_proj (lw->lin_out). */
static int mamba2(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_layer_w *lw, int layer, int n) {
    const size_t H = (size_t)cfg->hidden;
    fwd_matmul(ws, &lw->qkv, ws->h, H, ws->big, (size_t)ws->n_big, n, FWD_ACT_IN);
    const int cur = sq->lin_cur[layer];
    const be_mamba m = {.n = n, .nh = cfg->lin_nv, .hd = cfg->lin_dv, .g = cfg->lin_nk, .ns = cfg->lin_dk,
                        .k = cfg->conv_k, .in = ws->big, .ldi = (size_t)ws->n_big, .conv_w = lw->conv_w,
                        .conv_b = lw->conv_b, .conv_in_state = sq->conv[layer][cur],
                        .conv_out_state = sq->conv[layer][cur ^ 1], .conv_out = ws->conv_out, .A_log = lw->A_log,
                        .dt_bias = lw->dt_bias, .D = lw->ssm_D, .ssm_in = sq->ssm[layer][cur],
                        .ssm_out = sq->ssm[layer][cur ^ 1], .norm_w = lw->lin_norm, .eps = cfg->eps, .out = ws->mix,
                        .ldo = (size_t)ws->n_mix};
    ws->be->mamba2(ws->be, &m);
    fwd_matmul(ws, &lw->lin_out, ws->mix, (size_t)ws->n_mix, ws->out, H, n, FWD_ACT_MID);
    return 0;
}

/* in_proj_qkvz stored grouped per key head g: [q_g (dk) | k_g (dk) | v of heads g*r.. (r*dv) | z of them (r*dv)];
 * flat: [q (nk*dk) | k (nk*dk) | v (nv*dv) | z (nv*dv)] (docs/MATH.md, Gated DeltaNet: Projections) */
int64_t fwd_qkvz_row(const fam_config *cfg, int64_t rows, int64_t f) {
    const int64_t nk = cfg->lin_nk, nv = cfg->lin_nv, dk = cfg->lin_dk, dv = cfg->lin_dv;
    const int64_t r = nk > 0 ? nv / nk : 0, G = 2 * dk + 2 * r * dv, qk = nk * dk;
    if (nk < 1 || r * nk != nv || G * nk != rows || f < 0 || f >= rows) return -1;
    if (f < qk) return f / dk * G + f % dk;                                   /* q of key head f / dk */
    if (f < 2 * qk) return (f - qk) / dk * G + dk + (f - qk) % dk;            /* k */
    const int64_t rv = r * dv, v = f - 2 * qk;
    if (v < nv * dv) return v / rv * G + 2 * dk + v % rv;                     /* v of key head group v / (r dv) */
    return (v - nv * dv) / rv * G + 2 * dk + rv + (v - nv * dv) % rv;         /* z */
}

int fwd_deltanet(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_layer_w *lw, int layer, int n) {
    if (cfg->short_conv) return short_conv(ws, sq, cfg, lw, layer, n);
    if (cfg->mamba) return mamba2(ws, sq, cfg, lw, layer, n);
    be_backend *be = ws->be;
    const size_t H = (size_t)cfg->hidden;
    const int nk = cfg->lin_nk, nv = cfg->lin_nv, dk = cfg->lin_dk, dv = cfg->lin_dv;
    const int r = nv / nk, cq = 2 * nk * dk + nv * dv, zd = nv * dv;

    /* 1. projections, the input quantized once for all of them */
    const float *conv_in = ws->conv_in, *z = ws->z;
    kern_act hx;
    fwd_act(ws, &hx, FWD_ACT_IN, ws->h, H, n, (int)H);
    if (cfg->split_lin_proj) {
        const kern_mm mm[4] = {{&lw->qkv, &hx, ws->conv_in, (size_t)cq}, {&lw->z, &hx, ws->z, (size_t)zd},
                               {&lw->b, &hx, ws->ba, (size_t)2 * nv}, {&lw->a, &hx, ws->ba + nv, (size_t)2 * nv}};
        be->matmul_multi(be, mm, 4);
    } else if (cfg->qkvz_split) { /* Next's in_proj_qkvz as its halves, in_proj_ba grouped */
        const kern_mm mm[3] = {{&lw->qkv, &hx, ws->conv_in, (size_t)cq}, {&lw->z, &hx, ws->z, (size_t)zd},
                               {&lw->ba, &hx, ws->ba, (size_t)2 * nv}};
        be->matmul_multi(be, mm, 3);
    } else if (lw->qkvz_flat) { /* in_proj_qkvz's rows q | k | v | z (regrouped at load): big's row is conv_in's, z's */
        const size_t lb = (size_t)ws->n_big;
        const kern_mm mm[2] = {{&lw->qkvz, &hx, ws->big, lb}, {&lw->ba, &hx, ws->ba, (size_t)2 * nv}};
        be->matmul_multi(be, mm, 2);
        if (n == 1) {
            conv_in = ws->big, z = ws->big + cq;
        } else {
            be->copy_rows(be, ws->conv_in, (size_t)cq, NULL, ws->big, lb, NULL, n, cq);
            be->copy_rows(be, ws->z, (size_t)zd, NULL, ws->big + cq, lb, NULL, n, zd);
        }
    } else { /* as stored (SLUICE_QKVZ_GROUPED=1: engine/backbone.c), de-interleaved per key head */
        /* in_proj_qkvz block g: [q_g (dk) | k_g (dk) | v heads g*r.. (r*dv) | z same heads (r*dv)] */
        const int bs = 2 * dk + 2 * r * dv;
        const size_t lb = (size_t)ws->n_big;
        const kern_mm mm[2] = {{&lw->qkvz, &hx, ws->big, lb}, {&lw->ba, &hx, ws->ba, (size_t)2 * nv}};
        be->matmul_multi(be, mm, 2);
        for (int g = 0; g < nk; g++) {
            const float *blk = ws->big + (size_t)g * bs;
            be->copy_rows(be, ws->conv_in + (size_t)g * dk, (size_t)cq, NULL, blk, lb, NULL, n, dk);
            be->copy_rows(be, ws->conv_in + (size_t)(nk + g) * dk, (size_t)cq, NULL, blk + dk, lb, NULL, n, dk);
            be->copy_rows(be, ws->conv_in + (size_t)2 * nk * dk + (size_t)g * r * dv, (size_t)cq, NULL, blk + 2 * dk, lb,
                          NULL, n, r * dv);
            be->copy_rows(be, ws->z + (size_t)g * r * dv, (size_t)zd, NULL, blk + 2 * dk + r * dv, lb, NULL, n, r * dv);
        }
    }

    /* 2.-5. conv1d + SiLU (state into the other slot), gates and q/k normalisation, the recurrence per value
     * head (state from slot lin_cur to 1 - lin_cur), gated RMSNorm; then out_proj */
    const int cur = sq->lin_cur[layer];
    const be_dn d = {.n = n, .nk = nk, .nv = nv, .dk = dk, .dv = dv, .conv_k = cfg->conv_k, .conv_in = conv_in,
                     .conv_w = lw->conv_w, .conv_in_state = sq->conv[layer][cur], .conv_out_state = sq->conv[layer][cur ^ 1],
                     .conv_out = ws->conv_out, .ba = ws->ba, .ba_grouped = !cfg->split_lin_proj, .A_log = lw->A_log,
                     .dt_bias = lw->dt_bias, .gates = ws->gates, .ssm_in = sq->ssm[layer][cur],
                     .ssm_out = sq->ssm[layer][cur ^ 1], .out = ws->mix, .ldo = (size_t)ws->n_mix, .z = z,
                     .norm_w = lw->lin_norm, .eps = cfg->eps};
    be->dn_conv(be, &d);
    be->dn_gates(be, &d);
    if (ws->chunked && n > 1) be->dn_chunk(be, &d);
    else be->dn_step(be, &d);
    be->dn_norm(be, &d);
    fwd_matmul(ws, &lw->lin_out, ws->mix, (size_t)ws->n_mix, ws->out, H, n, FWD_ACT_MID);
    return 0;
}
