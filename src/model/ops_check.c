/*
 * ops_check.c — which ops of the backend's table a model's layers call, and the refusal at open that names the
 * first one a backend leaves NULL (backend.h: the CUDA backend has none of issue 26's new ops yet). Moved out of
 * forward.c.
 */
#include "family/arch.h"
#include "model/fwd_internal.h"
#include "util/err.h"

/* Every op of the backend's table this config's layers call (backend.h: a backend may leave some NULL). */
sl_status fwd_check_ops(const fwd_ws *ws, const fam_config *c, sl_error *err) {
    const be_backend *be = ws->be;
    const char *missing = NULL;
    int csa = 0, cmp = 0;
    for (int l = 0; l < c->n_layers; l++) csa |= c->layer_compress[l] == SL_CMP_CSA, cmp |= c->layer_compress[l] != 0;
    if (c->hc_mult > 0 && (!be->hc_mix || !be->hc_post)) missing = !be->hc_mix ? "hc_mix" : "hc_post";
    else if (cmp && !be->compress) missing = "compress";
    else if (csa && !be->index_topk) missing = "index_topk";
    else if (c->kda && fwd_any_layer(c, 1) && !be->kda_gates) missing = "kda_gates";
    else if (fwd_any_layer(c, 0) && c->kv_lora > 0 && !be->mla) missing = "mla";
    else if (fwd_any_layer(c, 0) && c->attn_head_gate && !be->head_gate) missing = "head_gate";
    else if (c->dsa_topk > 0 && (!be->dsa_select || !be->layernorm)) missing = !be->dsa_select ? "dsa_select" : "layernorm";
    else if (fwd_any_layer(c, 0) && c->kv_lora <= 0 && !be->attention) missing = "attention";
    else if (fwd_any_layer(c, 1) && c->short_conv && !be->short_conv) missing = "short_conv";
    else if (fwd_any_layer(c, 1) && c->mamba && !be->mamba2) missing = "mamba2";
    else if (fwd_any_layer(c, 1) && !c->short_conv && !c->mamba &&
             (!be->dn_conv || !be->dn_gates || !be->dn_step || !be->dn_chunk || !be->dn_norm))
        missing = !be->dn_conv ? "dn_conv" : !be->dn_gates ? "dn_gates" : !be->dn_step ? "dn_step" : !be->dn_chunk ? "dn_chunk" : "dn_norm";
    /* Gemma 4 (model/block.c): a backend without scale has none of its other pieces either (GeGLU, the router's
     * own norm and per-expert scale): refused here by the op named */
    if (!missing && (c->embed_scale > 0 || c->sandwich_norm || c->ffn_beside || c->expert_kind == SL_EXPERT_GEGLU ||
                     c->attn_v_scale > 0 || (c->kv_lora == 0 && c->v_head_dim > 0)) &&
        !be->scale)
        missing = "scale";
    if (!missing && c->logit_softcap > 0 && !be->softcap) missing = "softcap";
    if (!missing && (c->residual_scale > 0 || c->logit_scale > 0) && !be->scale) missing = "scale";
    /* Llama 4: the experts' input scaling and the NoPE layers' temperature; a backend without row_scale has none of
     * its other pieces either (chunked attention, the fused SwiGLU experts, the top-k sigmoid router) */
    if (!missing && (c->moe_scale_input || c->attn_floor_scale > 0 || c->attn_chunk > 0 || c->zero_experts > 0 ||
                     c->mla_q_scale > 0 || c->mla_kv_scale > 0 || c->router == SL_ROUTER_SOFTMAX_ZERO ||
                     c->expert_kind == SL_EXPERT_SWIGLU_FUSED || c->router == SL_ROUTER_TOPK_SIGMOID) && !be->row_scale)
        missing = "row_scale";
    /* Bailing hybrid: a backend without head_gate has none of its other pieces either (the clipped SwiGLU) */
    if (!missing && c->expert_kind == SL_EXPERT_SWIGLU_CLIP && !be->head_gate) missing = "head_gate";
    if (!missing) return 0;
    const arch_desc *a = arch_get(c->arch);
    return err_set(err, SL_EUNSUPPORTED, "the %s backend has no %s op yet, which %s models need", be->name, missing,
                  a ? a->name : "these");
}
