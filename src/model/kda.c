/*
 * kda.c — Kimi Delta Attention (cfg->kda; Kimi Linear's linear layers), after transformers'
 * src/transformers/models/kimi_linear/modeling_kimi_linear.py (KimiLinearDeltaAttention, KimiLinearForgetGate,
 * recurrent_kimi_delta_attention, KimiLinearRMSNormGated). Gated DeltaNet (deltanet.c) with a decay per key
 * dimension:
 *   q, k, v = q_proj x, k_proj x, v_proj x -> causal depthwise conv (three kernels) + SiLU (dn_conv);
 *   q, k L2-normalised, q times dk^-1/2; beta = sigmoid(b_proj x); g = -exp(A_log[h]) softplus(f_b f_a x + dt_bias)
 *   per channel (kda_gates);
 *   per head: S <- diag(exp(g)) S; m = S^T k; d = beta (v - m); S += k d^T; o = S^T q (dn_step, the token
 *   recurrence always: transformers' prefill runs its chunked form, the same quantities in another order);
 *   o = rmsnorm(o) w * sigmoid(g_b g_a x) per head (dn_norm), o_proj.
 * Bailing hybrid (transformers' models/bailing_hybrid/modeling_bailing_hybrid.py BailingHybridDeltaAttention,
 * BailingHybridForgetGate): f_b f_a and g_b g_a are one matrix each (f_proj, g_proj: lw->kda_f, kda_g), and the
 * forget gate is bounded, g = kda_lower * sigmoid(exp(A_log[h]) (f + dt_bias)) (cfg->kda_lower < 0, kda_gates).
 * The state is DeltaNet's (conv rows and S per head, double-buffered: fwd_internal.h).
 */
#include "model/fwd_internal.h"

int fwd_kda(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_layer_w *lw, int layer, int n) {
    be_backend *be = ws->be;
    const size_t H = (size_t)cfg->hidden;
    const int nk = cfg->lin_nk, nv = cfg->lin_nv, dk = cfg->lin_dk, dv = cfg->lin_dv;
    const int cq = 2 * nk * dk + nv * dv, qk = nk * dk, lg = nv + nv * dk;
    const size_t lb = (size_t)ws->n_big;

    kern_act hx; /* the input quantized once for every projection of it */
    fwd_act(ws, &hx, FWD_ACT_IN, ws->h, H, n, (int)H);
    const int full = lw->kda_f.data != NULL; /* Bailing hybrid: f_proj and g_proj of full rank */
    const kern_mm mm[6] = {{&lw->q, &hx, ws->conv_in, (size_t)cq}, {&lw->k, &hx, ws->conv_in + qk, (size_t)cq},
                           {&lw->v, &hx, ws->conv_in + 2 * qk, (size_t)cq}, {&lw->b, &hx, ws->ba, (size_t)lg},
                           full ? (kern_mm){&lw->kda_f, &hx, ws->ba + nv, (size_t)lg} : (kern_mm){&lw->kda_fa, &hx, ws->big, lb},
                           full ? (kern_mm){&lw->kda_g, &hx, ws->z, (size_t)nv * dv}
                                : (kern_mm){&lw->kda_ga, &hx, ws->big + dk, lb}};
    be->matmul_multi(be, mm, 6);
    if (!full) {
        fwd_matmul(ws, &lw->kda_fb, ws->big, lb, ws->ba + nv, (size_t)lg, n, FWD_ACT_MID);
        fwd_matmul(ws, &lw->kda_gb, ws->big + dk, lb, ws->z, (size_t)nv * dv, n, FWD_ACT_GATHER);
    }

    const int cur = sq->lin_cur[layer];
    const be_dn d = {.n = n, .nk = nk, .nv = nv, .dk = dk, .dv = dv, .conv_k = cfg->conv_k, .conv_in = ws->conv_in,
                     .conv_parts = {lw->conv_parts[0], lw->conv_parts[1], lw->conv_parts[2]},
                     .conv_in_state = sq->conv[layer][cur], .conv_out_state = sq->conv[layer][cur ^ 1],
                     .conv_out = ws->conv_out, .ba = ws->ba, .A_log = lw->A_log, .dt_bias = lw->dt_bias,
                     .gates = ws->gates, .ssm_in = sq->ssm[layer][cur], .ssm_out = sq->ssm[layer][cur ^ 1],
                     .out = ws->mix, .ldo = (size_t)ws->n_mix, .kda = 1, .kda_lower = (float)cfg->kda_lower,
                     .z = ws->z, .norm_w = lw->lin_norm, .eps = cfg->eps};
    be->dn_conv(be, &d);
    be->kda_gates(be, &d);
    be->dn_step(be, &d);
    be->dn_norm(be, &d);
    fwd_matmul(ws, &lw->lin_out, ws->mix, (size_t)ws->n_mix, ws->out, H, n, FWD_ACT_MID);
    return 0;
}
