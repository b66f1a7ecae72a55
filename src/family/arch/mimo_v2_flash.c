/*
 * mimo_v2_flash.c — MiMo-V2-Flash (XiaomiMiMo/MiMo-V2-Flash; model_type mimo_v2_flash): transformers'
 * src/transformers/models/mimo_v2_flash/modeling_mimo_v2_flash.py and configuration_mimo_v2_flash.py.
 *
 * Attention: layers sliding (sliding_window) or full as layer_types says (default: layer 0 and every sixth full).
 * q/k heads of head_dim, value heads of v_head_dim (o_proj [H, heads * v_head_dim]), values times
 * attention_value_scale. Sliding layers have twice num_key_value_heads KV heads and a learned sink logit per head
 * (self_attn.attention_sink_bias, as gpt-oss's sinks); full layers num_key_value_heads (config.h full_kv_heads:
 * the full layers are the ones with their own dims here). Partial RoPE (partial_rotary_factor of head_dim, default
 * 0.334) with each layer kind's rope_parameters (theta). FFN: mlp_layer_types (default: layer 0 dense, the rest
 * sparse); sparse = DeepSeek-V3's sigmoid group router (e_score_correction_bias, n_group / topk_group,
 * norm_topk_prob, routed_scaling_factor) over SwiGLU experts, no shared expert.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "family/arch/common.h"

/* rope_parameters.<kind>: default only; rot dims int(head_dim * partial_rotary_factor), as the reference does */
static void rope(hfc *c, fam_config *o) {
    const char *k[2] = {"sliding_attention", "full_attention"};
    for (int i = 0; i < 2; i++) {
        char p[96];
        snprintf(p, sizeof p, "rope_parameters.%s.rope_type", k[i]);
        const char *t = hfc_path_str(c, p);
        if (t && strcmp(t, "default")) hfc_fail(c, SL_EUNSUPPORTED, "%s rope_type '%s' is not supported", k[i], t);
        snprintf(p, sizeof p, "rope_parameters.%s.rope_theta", k[i]);
        const double theta = hfc_path_num(c, p, i ? 5e6 : 1e4, NULL);
        snprintf(p, sizeof p, "rope_parameters.%s.partial_rotary_factor", k[i]);
        const double prf = hfc_path_num(c, p, 0.334, NULL);
        if (!(prf > 0 && prf <= 1 && theta > 0))
            hfc_fail(c, SL_ECONFIG, "%s: rope_theta / partial_rotary_factor out of range", k[i]);
        const int rot = (int)(o->head_dim * prf) / 2 * 2; /* int(head_dim * prf), even: arange(0, dim, 2) */
        if (i) {
            o->full_rope_theta = theta;
            o->full_rot_dim = rot;
        } else {
            o->rope_theta = theta;
            o->rot_dim = rot;
        }
    }
}

static void config(hfc *c, fam_config *o) {
    o->moe_inter = hfc_int(c, "moe_intermediate_size", 1, 0);
    o->norm_topk = hfc_bool(c, "norm_topk_prob", 1);
    arch_group_moe_config(c, o, 1); /* n_group, topk_group, routed_scaling_factor; the layers below */
    const int n = hfc_array_size(c, "mlp_layer_types");
    if (n >= 0 && n != o->n_layers) hfc_fail(c, SL_ECONFIG, "mlp_layer_types has %d entries", n);
    int any_dense = 0;
    for (int l = 0; l < o->n_layers; l++) {
        char p[48];
        snprintf(p, sizeof p, "mlp_layer_types.%d", l);
        const char *t = n >= 0 ? hfc_path_str(c, p) : l == 0 ? "dense" : "sparse";
        if (!t || (strcmp(t, "dense") && strcmp(t, "sparse")))
            hfc_fail(c, SL_ECONFIG, "mlp_layer_types[%d] must be dense or sparse", l);
        o->layer_moe[l] = t && !strcmp(t, "sparse");
        any_dense |= !o->layer_moe[l];
    }
    o->dense_inter = any_dense ? hfc_int(c, "intermediate_size", 1, 0) : 0;
    if (hfc_has(c, "layer_types")) {
        hfc_sliding_layers(c, o);
    } else {
        for (int l = 0; l < o->n_layers; l++) o->layer_sliding[l] = !(l == 0 || (l + 1) % 6 == 0);
        o->sliding_window = hfc_int(c, "sliding_window", 0, 129);
    }
    o->v_head_dim = hfc_int(c, "v_head_dim", 0, 128);
    o->full_head_dim = o->head_dim;
    o->full_kv_heads = o->n_kv_heads;
    o->n_kv_heads *= 2; /* the sliding layers' */
    const double vs = hfc_num(c, "attention_value_scale", 0.707, NULL);
    o->attn_v_scale = vs == 1.0 ? 0 : vs;
    if (!(vs > 0)) hfc_fail(c, SL_ECONFIG, "attention_value_scale must be positive");
    rope(c, o);
}

static const arch_tdef tensors[] = {
    T_EMBED,
    T_IN_NORM,
    {"self_attn.q_proj", NULL, AW_ATTN, AD_Q, AD_H, AK_MAT, LW(q), AR_BACKBONE, "attn_q.weight"},
    {"self_attn.k_proj", NULL, AW_ATTN_STD, AD_KV, AD_H, AK_MAT, LW(k), AR_BACKBONE, "attn_k.weight"},
    {"self_attn.v_proj", NULL, AW_ATTN_STD, AD_VKV, AD_H, AK_MAT, LW(v), AR_BACKBONE, "attn_v.weight"},
    {"self_attn.k_proj", NULL, AW_ATTN_OWN, AD_KVOWN, AD_H, AK_MAT, LW(k), AR_BACKBONE, "attn_k.weight"},
    {"self_attn.v_proj", NULL, AW_ATTN_OWN, AD_VKVOWN, AD_H, AK_MAT, LW(v), AR_BACKBONE, "attn_v.weight"},
    {"self_attn.o_proj", NULL, AW_ATTN, AD_H, AD_OMLA, AK_MAT, LW(o), AR_BACKBONE, "attn_output.weight"},
    {"self_attn.sinks", "self_attn.attention_sink_bias", AW_ATTN_STD, AD_NH, AD_NONE, AK_VEC, LW(sinks), AR_BACKBONE, "attn_sinks.weight"},
    T_POST_NORM, T_ROUTER,
    {"mlp.gate.e_score_correction_bias", NULL, AW_MOE, AD_E, AD_NONE, AK_VEC, LW(router_bias), AR_BACKBONE, "exp_probs_b.bias"},
    T_DENSE_MLP,
    T_HEAD,
};

static const char *const hf_types[] = {"mimo_v2_flash", NULL};

static void shape_config(const arch_shape *sh, fam_config *c) {
    c->v_head_dim = 128;
    c->full_head_dim = sh->head_dim;
    c->full_kv_heads = sh->kv_heads / 2;
    c->full_rot_dim = 64;
    c->rot_dim = 64;
    c->full_rope_theta = 5e6;
    c->attn_v_scale = 0.707;
    for (int l = 0; l < c->n_layers; l++) {
        c->layer_sliding[l] = !(l == 0 || (l + 1) % 6 == 0);
        c->layer_moe[l] = l > 0;
    }
    c->sliding_window = 128;
}

/* XiaomiMiMo/MiMo-V2-Flash (configuration_mimo_v2_flash.py's defaults are the release's): hidden 4096, 48 layers
 * (layer 0 and every sixth full, the rest sliding of 128), 64 heads of 192 (values of 128) over 4 KV heads (8 on
 * the sliding layers), a dense first layer of 16384, 256 experts of 2048 (top 8), vocab 152576: 309B total
 * parameters, 15B active (the model card). */
static const arch_shape shapes[] = {
    {"MiMo-V2-Flash", 152576, 4096, 48, 64, 8, 192, 256, 8, 2048, 0, 0, 0, 0, 0, 0, 262144, 10000, 0.334, 1, 0,
     16384, 1, 1, 1, 1.0, 0, 128, 0.0, 0, 309e9},
};

/* ---- GGUF (llama.cpp mimo2: convert_hf_to_gguf.py conversion/mimo.py MimoV2Model; src/models/mimo2.cpp) ----
 * Layer kinds from attention.sliding_window_pattern (1: sliding), KV heads per layer from head_count_kv (the sliding
 * layers' must be twice the full ones', as transformers' MiMo-V2-Flash has them), key_length the q/k head dim,
 * value_length the value heads'; rope.dimension_count rotated dims of every layer, rope.freq_base the full layers'
 * theta, rope.freq_base_swa the sliding ones' (absent: the same, as llama.cpp takes it); attention.value_scale
 * (absent: none); the MoE layers are those with a router. What llama.cpp's graph fixes: a sigmoid router with the
 * top-k weights renormalised (build_moe_ffn's norm_w true) and no routed_scaling_factor (it reads no
 * expert_weights_scale for mimo2, and the converter writes none): imported as 1. The converter's three
 * multi-token-prediction blocks (block_count, nextn_predict_layers) are not read. */
static void gguf_config(ggm *m, arch_gguf_common *g) {
    static const char *const kinds[] = {"full_attention", "sliding_attention"};
    const char *types[SL_MAX_LAYERS], *mlp[SL_MAX_LAYERS];
    double swa[SL_MAX_LAYERS], kvh[SL_MAX_LAYERS];
    int full_kv = 0, swa_kv = 0;
    if (!ggm_layer_nums(m, "attention.sliding_window_pattern", g->n_layers, swa))
        for (int l = 0; l < g->n_layers; l++) swa[l] = 0;
    if (!ggm_layer_nums(m, "attention.head_count_kv", g->n_layers, kvh))
        ggm_fail(m, SL_ECONFIG, "'%s.attention.head_count_kv' is missing", g->arch);
    for (int l = 0; l < g->n_layers; l++) {
        int *kv = swa[l] != 0 ? &swa_kv : &full_kv;
        if (*kv && *kv != (int)kvh[l])
            ggm_fail(m, SL_EUNSUPPORTED, "'%s.attention.head_count_kv' differs between layers of one kind", g->arch);
        *kv = (int)kvh[l];
        types[l] = kinds[swa[l] != 0];
        mlp[l] = ggm_has(m, l, "ffn_gate_inp.weight") ? "sparse" : "dense";
    }
    if (full_kv && swa_kv && swa_kv != 2 * full_kv)
        ggm_fail(m, SL_EUNSUPPORTED, "sliding layers with %d KV heads beside full layers with %d: MiMo-V2-Flash's "
                 "sliding layers have twice the full ones'", swa_kv, full_kv);
    g->check_kv_heads = 0;
    g->check_value_length = 0;
    ggm_set_num(m, "num_key_value_heads", full_kv ? full_kv : swa_kv / 2);
    ggm_set_strs(m, "layer_types", types, g->n_layers);
    ggm_set_strs(m, "mlp_layer_types", mlp, g->n_layers);
    ggm_set_num(m, "sliding_window", ggm_count(m, "attention.sliding_window", swa_kv > 0, 0, NULL));
    ggm_set_num(m, "head_dim", g->head_dim);
    ggm_set_num(m, "v_head_dim", g->value_length);
    /* int(head_dim * prf) must give the file's count back (mimo_v2_flash.c rope): half a dimension over it */
    const int rot = ggm_count(m, "rope.dimension_count", 0, g->head_dim, NULL);
    const double base = ggm_num(m, "rope.freq_base", 0, 10000.0, NULL);
    ggm_set_num(m, "rope_parameters.full_attention.rope_theta", base);
    ggm_set_num(m, "rope_parameters.sliding_attention.rope_theta", ggm_num(m, "rope.freq_base_swa", 0, base, NULL));
    ggm_set_num(m, "rope_parameters.full_attention.partial_rotary_factor", (rot + 0.5) / g->head_dim);
    ggm_set_num(m, "rope_parameters.sliding_attention.partial_rotary_factor", (rot + 0.5) / g->head_dim);
    if (rot % 2 || rot > g->head_dim) ggm_fail(m, SL_ECONFIG, "'%s.rope.dimension_count' %d", g->arch, rot);
    ggm_set_num(m, "attention_value_scale", ggm_num(m, "attention.value_scale", 0, 1.0, NULL));
    ggm_set_num(m, "moe_intermediate_size", ggm_moe_inter(m, g));
    if (g->ff_found) ggm_set_num(m, "intermediate_size", g->ff);
    ggm_set_bool(m, "norm_topk_prob", 1);
    ggm_set_num(m, "routed_scaling_factor", 1.0);
    ggm_set_num(m, "n_group", ggm_num(m, "expert_group_count", 0, 1, NULL));
    ggm_set_num(m, "topk_group", ggm_num(m, "expert_group_used_count", 0, 1, NULL));
}

const arch_desc arch_mimo_v2_flash = {
    .id = SL_ARCH_MIMO_V2_FLASH, .name = "mimo_v2_flash", .hf_types = hf_types,
    .router = SL_ROUTER_SIGMOID_GROUP, .qk_norm = SL_QK_NORM_NONE, .prf_default = 1.0,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_swiglu_parts, .attn_sinks = 1,
    .shapes = shapes, .n_shapes = N_OF(shapes), .shape_config = shape_config,
    .gguf_arch = "mimo2", .gguf_config = gguf_config,
};
