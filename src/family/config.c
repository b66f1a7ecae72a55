/* config.c — helpers over fam_config; see config.h. */
#include "family/config.h"

#include "family/arch.h"

#include <math.h>
#include <string.h>

int cfg_groups_ok(const fam_config *c) {
    const int E = c->n_experts, G = c->n_group;
    return E > 0 && E <= SL_ROUTER_MAX_EXPERTS && G >= 1 && G <= SL_ROUTER_MAX_GROUPS && E % G == 0 && E / G >= 2 &&
           c->topk_group >= 1 && c->topk_group <= G && c->n_experts_used <= c->topk_group * (E / G) &&
           isfinite(c->routed_scale) && c->routed_scale > 0;
}

static int dsa_ok(const fam_config *c) {
    if (c->dsa_topk <= 0) return c->dsa_topk == 0 && c->dsa_heads == 0 && c->dsa_dim == 0;
    return c->q_lora > 0 && c->dsa_heads >= 1 && c->dsa_heads <= 4096 && c->dsa_dim >= c->rot_dim &&
           c->dsa_dim % 2 == 0 && c->dsa_dim <= 4096 && !c->layer_dsa_shared[0];
}

int cfg_mla_ok(const fam_config *c) {
    if (c->kv_lora <= 0) return c->kv_lora == 0 && (c->q_lora == 0 || c->hc_mult > 0) && c->dsa_topk == 0; /* V4's q_lora */
    if (!dsa_ok(c)) return 0;
    return c->q_lora >= 0 && c->qk_nope >= 0 && c->rot_dim > 0 && c->rot_dim % 2 == 0 && c->rot_dim <= 1024 &&
           c->head_dim == c->qk_nope + c->rot_dim && c->v_head_dim > 0 && c->n_kv_heads == c->n_heads &&
           !c->gated_attn && !c->attn_bias && c->qk_norm == SL_QK_NORM_NONE && isfinite(c->attn_scale) &&
           c->attn_scale >= 0;
}

int cfg_dsv4_ok(const fam_config *c) {
    if (c->hc_mult <= 0) return c->hc_mult == 0;
    int ok = c->hc_mult <= 16 && c->hc_iters >= 1 && c->hc_iters <= 1000 && isfinite(c->hc_eps) && c->hc_eps >= 0 &&
             c->n_kv_heads == 1 && c->kv_lora == 0 && c->q_lora > 0 && c->o_groups >= 1 && c->o_lora >= 1 &&
             c->n_heads % c->o_groups == 0 && c->rot_dim >= 2 && c->sliding_window >= 1 && c->swiglu_limit > 0 &&
             c->router == SL_ROUTER_SQRTSOFTPLUS && c->expert_kind == SL_EXPERT_SWIGLU_CLAMP &&
             isfinite(c->routed_scale) && c->routed_scale > 0 && c->rope_theta_c > 0 && c->n_experts <= SL_ROUTER_MAX_EXPERTS &&
             c->n_experts_used <= 64;
    for (int l = 0; ok && l < c->n_layers; l++) {
        const int k = c->layer_compress[l];
        ok = c->layer_sliding[l] && !c->layer_linear[l] && c->layer_moe[l] && k <= SL_CMP_HCA &&
             (k != SL_CMP_HCA || (c->hca_rate >= 2 && c->hca_rate <= 4096)) &&
             (k != SL_CMP_CSA || (c->csa_rate >= 2 && c->csa_rate <= 4096 && c->idx_heads >= 1 && c->idx_dim >= c->rot_dim &&
                                  c->idx_dim % 2 == 0 && c->idx_topk >= 1));
    }
    return ok;
}

int cfg_res_width(const fam_config *c) { return c->hc_mult > 0 ? c->hc_mult * c->hidden : c->hidden; }

cfg_attn cfg_attn_at(const fam_config *c, int l) {
    const int vd = c->kv_lora == 0 && c->v_head_dim > 0 ? c->v_head_dim : 0;
    if (c->full_head_dim > 0 && l >= 0 && l < c->n_layers && !c->layer_sliding[l])
        return (cfg_attn){c->full_kv_heads > 0 ? c->full_kv_heads : c->n_kv_heads, c->full_head_dim,
                          c->full_rope_prop ? c->full_head_dim : c->full_rot_dim, 1, vd ? vd : c->full_head_dim};
    return (cfg_attn){c->n_kv_heads, c->head_dim, c->rot_dim, 0, vd ? vd : c->head_dim};
}

int cfg_v_row_at(const fam_config *c, int l) {
    if (c->kv_lora > 0 || c->hc_mult > 0) return 0; /* MLA, DeepSeek-V4: one cache */
    const cfg_attn a = cfg_attn_at(c, l);
    return a.n_kv_heads * a.v_dim;
}

int cfg_v_row(const fam_config *c) {
    int m = 0;
    for (int l = 0; l < c->n_layers && l < SL_MAX_LAYERS; l++)
        if (cfg_v_row_at(c, l) > m) m = cfg_v_row_at(c, l);
    return m;
}

int cfg_kv_row_at(const fam_config *c, int l) {
    if (c->kv_lora > 0) return c->kv_lora + c->rot_dim + (c->dsa_topk > 0 ? c->dsa_dim : 0);
    const cfg_attn a = cfg_attn_at(c, l);
    return a.n_kv_heads * a.head_dim;
}

int cfg_kv_row(const fam_config *c) {
    int m = c->kv_lora > 0 ? cfg_kv_row_at(c, 0) : c->n_kv_heads * c->head_dim;
    for (int l = 0; c->full_head_dim > 0 && l < c->n_layers && l < SL_MAX_LAYERS; l++)
        if (cfg_kv_row_at(c, l) > m) m = cfg_kv_row_at(c, l);
    return m;
}

int cfg_router_rows(const fam_config *c) { return c->n_experts + c->zero_experts; }

int cfg_n_moe_layers(const fam_config *c) {
    int n = 0;
    for (int l = 0; l < c->n_layers; l++) n += c->layer_moe[l] ? 1 : 0;
    return n;
}

int cfg_moe_slot(const fam_config *c, int layer) {
    if (layer < 0 || layer >= c->n_layers || !c->layer_moe[layer]) return -1;
    int s = 0;
    for (int l = 0; l < layer; l++) s += c->layer_moe[l] ? 1 : 0;
    return s;
}

const char *cfg_arch_name(fam_arch a) {
    const arch_desc *d = arch_get(a);
    return d ? d->name : "none";
}

fam_arch cfg_arch_from_name(const char *name) {
    const arch_desc *d = arch_by_name(name);
    return d ? d->id : SL_ARCH_NONE;
}
