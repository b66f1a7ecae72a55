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
    if (c->kv_lora <= 0) return c->kv_lora == 0 && c->q_lora == 0 && c->dsa_topk == 0;
    if (!dsa_ok(c)) return 0;
    return c->q_lora >= 0 && c->qk_nope >= 0 && c->rot_dim > 0 && c->rot_dim % 2 == 0 && c->rot_dim <= 1024 &&
           c->head_dim == c->qk_nope + c->rot_dim && c->v_head_dim > 0 && c->n_kv_heads == c->n_heads &&
           !c->gated_attn && !c->attn_bias && c->qk_norm == SL_QK_NORM_NONE && isfinite(c->attn_scale) &&
           c->attn_scale >= 0;
}

int cfg_kv_row(const fam_config *c) {
    return c->kv_lora > 0 ? c->kv_lora + c->rot_dim + (c->dsa_topk > 0 ? c->dsa_dim : 0) : c->n_kv_heads * c->head_dim;
}

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
