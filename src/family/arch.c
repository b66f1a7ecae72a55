/*
 * arch.c — the family registry and the arithmetic of arch.h's tables (dimensions, which layers have a
 * tensor). The families themselves are in src/family/arch/<family>.c.
 */
#include "family/arch.h"

#include <stdio.h>
#include <string.h>

/* every family of src/family/arch/ (families.h lists them; tools/gen_families.sh writes it) */
#define SL_FAMILY(name, NAME) extern const arch_desc arch_##name;
#include "family/arch/families.h"
#undef SL_FAMILY

const arch_desc *const arch_list[] = {
#define SL_FAMILY(name, NAME) &arch_##name,
#include "family/arch/families.h"
#undef SL_FAMILY
    NULL};

const arch_desc *arch_get(fam_arch id) {
    for (int i = 0; arch_list[i]; i++)
        if (arch_list[i]->id == id) return arch_list[i];
    return NULL;
}

const arch_desc *arch_by_name(const char *name) {
    for (int i = 0; name && arch_list[i]; i++)
        if (!strcmp(arch_list[i]->name, name)) return arch_list[i];
    return NULL;
}

const arch_desc *arch_by_hf_type(const char *model_type) {
    for (int i = 0; model_type && arch_list[i]; i++)
        for (const char *const *t = arch_list[i]->hf_types; *t; t++)
            if (!strcmp(*t, model_type)) return arch_list[i];
    return NULL;
}

const arch_desc *arch_by_gguf(const char *gguf_arch) {
    for (int i = 0; gguf_arch && arch_list[i]; i++)
        if (arch_list[i]->gguf_arch && !strcmp(arch_list[i]->gguf_arch, gguf_arch)) return arch_list[i];
    return NULL;
}

const char *arch_gguf_list(void) {
    static char buf[512];
    if (buf[0]) return buf;
    size_t n = 0;
    for (int i = 0; arch_list[i] && n < sizeof buf; i++)
        if (arch_list[i]->gguf_arch)
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s%s", n ? ", " : "", arch_list[i]->gguf_arch,
                                  arch_list[i]->id == SL_ARCH_MIXTRAL ? " (Mixtral: with experts)" : "");
    return buf;
}

const char *arch_hf_type_list(void) {
    static char buf[512];
    if (buf[0]) return buf;
    size_t n = 0;
    for (int i = 0; arch_list[i]; i++)
        for (const char *const *t = arch_list[i]->hf_types; *t && n < sizeof buf; t++)
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", n ? ", " : "", *t);
    return buf;
}

void arch_set_traits(fam_config *c) {
    const arch_desc *d = arch_get(c->arch);
    if (!d) return;
    c->router = d->router;
    c->qk_norm = d->qk_norm;
    c->zero_centred_norm = d->zero_centred_norm;
    c->gated_attn = d->gated_attn;
    c->split_lin_proj = d->split_lin_proj;
    c->expert_kind = d->expert_kind;
    c->attn_sinks = d->attn_sinks;
}

int arch_n_parts(const fam_config *c) {
    const arch_desc *d = arch_get(c->arch);
    return !d ? 0 : d->n_parts ? d->n_parts : 3;
}

const arch_pdef *arch_part(const fam_config *c, int p) {
    const arch_desc *d = arch_get(c->arch);
    return d && p >= 0 && p < arch_n_parts(c) ? &d->parts[p] : NULL;
}

int64_t arch_dim_value(const fam_config *c, arch_dim d) {
    const int64_t hd = c->head_dim, nk = c->lin_nk, nv = c->lin_nv, dk = c->lin_dk, dv = c->lin_dv;
    switch (d) {
    case AD_NONE: return 0;
    case AD_ONE: return 1;
    case AD_V: return c->vocab;
    case AD_H: return c->hidden;
    case AD_HD: return hd;
    case AD_Q: return c->n_heads * hd;
    case AD_NH: return c->n_heads;
    case AD_QPROJ: return (c->gated_attn ? 2 : 1) * c->n_heads * hd;
    case AD_KV: return c->n_kv_heads * hd;
    case AD_E: return c->n_experts;
    case AD_I: return c->moe_inter;
    case AD_2I: return 2 * (int64_t)c->moe_inter;
    case AD_IS: return c->shared_inter;
    case AD_ID: return c->dense_inter;
    case AD_CQ: return 2 * nk * dk + nv * dv;
    case AD_QKVZ: return 2 * nk * dk + 2 * nv * dv;
    case AD_NV: return nv;
    case AD_2NV: return 2 * nv;
    case AD_NVDV: return nv * dv;
    case AD_DV: return dv;
    case AD_CONVK: return c->conv_k;
    case AD_QLORA: return c->q_lora;
    case AD_QMLA: return (int64_t)c->n_heads * (c->qk_nope + c->rot_dim);
    case AD_KVA: return (int64_t)c->kv_lora + c->rot_dim;
    case AD_KVLORA: return c->kv_lora;
    case AD_KVB: return (int64_t)c->n_heads * (c->qk_nope + c->v_head_dim);
    case AD_OMLA: return (int64_t)c->n_heads * c->v_head_dim;
    case AD_DSAQ: return (int64_t)c->dsa_heads * c->dsa_dim;
    case AD_DSAD: return c->dsa_dim;
    case AD_DSAH: return c->dsa_heads;
    case AD_K: return c->n_experts_used;
    case AD_3: return 3;
    case AD_HC: return c->hc_mult;
    case AD_HCMIX: return (int64_t)(2 + c->hc_mult) * c->hc_mult;
    case AD_HCH: return (int64_t)c->hc_mult * c->hidden;
    case AD_OA: return (int64_t)c->o_groups * c->o_lora;
    case AD_OAIN: return c->o_groups > 0 ? (int64_t)c->n_heads * hd / c->o_groups : 0;
    case AD_2HD: return 2 * hd;
    case AD_CSAR: return c->csa_rate;
    case AD_HCAR: return c->hca_rate;
    case AD_IDXD: return c->idx_dim;
    case AD_2IDXD: return 2 * (int64_t)c->idx_dim;
    case AD_IDXH: return c->idx_heads;
    case AD_IDXQ: return (int64_t)c->idx_heads * c->idx_dim;
    case AD_QOWN: return (int64_t)c->n_heads * c->full_head_dim;
    case AD_KVOWN: return (int64_t)(c->full_kv_heads > 0 ? c->full_kv_heads : c->n_kv_heads) * c->full_head_dim;
    case AD_HDOWN: return c->full_head_dim;
    case AD_3H: return 3 * (int64_t)c->hidden;
    case AD_MAMBA_IN: return 2 * nv * dv + 2 * nk * dk + nv;
    case AD_2IS: return 2 * (int64_t)c->shared_inter;
    case AD_EZ: return (int64_t)c->n_experts + c->zero_experts;
    case AD_VKV: return (int64_t)c->n_kv_heads * c->v_head_dim;
    case AD_VKVOWN: return (int64_t)(c->full_kv_heads > 0 ? c->full_kv_heads : c->n_kv_heads) * c->v_head_dim;
    }
    return 0;
}

int arch_applies(const fam_config *c, arch_when when, int l) {
    switch (when) {
    case AW_GLOBAL: return 1;
    case AW_UNTIED: return !c->tie_embeddings;
    case AW_EVERY: return 1;
    case AW_ATTN: return !c->layer_linear[l];
    case AW_ATTN_BIAS: return !c->layer_linear[l] && c->attn_bias;
    case AW_LINEAR: return c->layer_linear[l];
    case AW_LIN_QKVZ: return c->layer_linear[l] && !c->qkvz_split;
    case AW_LIN_SPLIT: return c->layer_linear[l] && c->qkvz_split;
    case AW_MOE: return c->layer_moe[l];
    case AW_SHARED: return c->layer_moe[l] && c->shared_inter > 0;
    case AW_DENSE: return !c->layer_moe[l];
    case AW_QK_NORM: return !c->layer_linear[l] && c->qk_norm != SL_QK_NORM_NONE;
    case AW_Q_LORA: return !c->layer_linear[l] && c->kv_lora > 0 && c->q_lora > 0;
    case AW_Q_FULL: return !c->layer_linear[l] && c->kv_lora > 0 && c->q_lora == 0;
    case AW_SINKS: return !c->layer_linear[l] && c->attn_sinks;
    case AW_DSA: return !c->layer_linear[l] && c->kv_lora > 0 && c->dsa_topk > 0 && !c->layer_dsa_shared[l];
    case AW_CSA: return c->layer_compress[l] == SL_CMP_CSA;
    case AW_HCA: return c->layer_compress[l] == SL_CMP_HCA;
    case AW_CMP: return c->layer_compress[l] != SL_CMP_NONE;
    case AW_HASH: return c->layer_moe[l] && c->layer_hash[l];
    case AW_TOPK: return c->layer_moe[l] && !c->layer_hash[l];
    case AW_ATTN_STD: return !c->layer_linear[l] && !cfg_attn_at(c, l).own;
    case AW_ATTN_OWN: return !c->layer_linear[l] && cfg_attn_at(c, l).own;
    case AW_V_OWN: return !c->layer_linear[l] && cfg_attn_at(c, l).own && !c->k_eq_v;
    }
    return 0;
}
