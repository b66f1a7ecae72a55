/*
 * hunyuan_v1_moe.c — Hunyuan-A13B (model_type hunyuan_v1_moe: tencent/Hunyuan-A13B-Instruct): Llama-style GQA
 * attention whose per-head q/k RMSNorm (query_layernorm / key_layernorm) runs after RoPE (qk_norm_after_rope), RoPE's
 * base stretched by a fixed NTK alpha (rope_type "dynamic" with alpha: family/hf_config.c ntk_alpha), every layer a
 * MoE of SwiGLU experts of intermediate_size, softmax -> top-k -> renormalised (mlp.gate.wg, f32), plus a shared
 * SwiGLU MLP of intermediate_size (mlp.shared_mlp) beside them. transformers'
 * src/transformers/models/hunyuan_v1_moe/modeling_hunyuan_v1_moe.py and configuration_hunyuan_v1_moe.py; the
 * release's per-layer lists (moe_topk, num_shared_expert, moe_intermediate_size) must hold one value each.
 * Cross-layer attention (use_cla) is not served.
 */
#include "family/arch/common.h"

static void config(hfc *c, fam_config *o) {
    o->moe_inter = hfc_int(c, "intermediate_size", 1, 0); /* the experts' and the shared MLP's width */
    o->norm_topk = 1;
    o->qk_norm_after_rope = 1;
    o->shared_inter = hfc_product(c, "num_shared_expert", hfc_int(c, "num_shared_expert", 0, 1), o->moe_inter);
    if (hfc_has(c, "moe_intermediate_size") && hfc_int(c, "moe_intermediate_size", 1, 0) != o->moe_inter)
        hfc_fail(c, SL_EUNSUPPORTED, "moe_intermediate_size differs from intermediate_size (transformers reads the latter)");
    if (o->shared_inter != o->moe_inter) hfc_fail(c, SL_EUNSUPPORTED, "num_shared_expert other than 1");
    if (hfc_bool(c, "use_cla", 0)) hfc_fail(c, SL_EUNSUPPORTED, "use_cla (cross-layer attention) is not supported");
    for (int i = 0; i < o->n_layers; i++) o->layer_moe[i] = 1;
}

static const arch_tdef tensors[] = {
    T_EMBED,
    T_IN_NORM, T_ATTN_QKVO,
    {"self_attn.query_layernorm", NULL, AW_ATTN, AD_HD, AD_NONE, AK_VEC, LW(q_norm), AR_BACKBONE, "attn_q_norm.weight"},
    {"self_attn.key_layernorm", NULL, AW_ATTN, AD_HD, AD_NONE, AK_VEC, LW(k_norm), AR_BACKBONE, "attn_k_norm.weight"},
    T_POST_NORM,
    {"mlp.gate.wg", NULL, AW_MOE, AD_E, AD_H, AK_MAT, LW(router), AR_ROUTER, "ffn_gate_inp.weight"},
    {"mlp.shared_mlp.gate_proj", NULL, AW_SHARED, AD_IS, AD_H, AK_MAT, LW(sh_gate), AR_BACKBONE, "ffn_gate_shexp.weight"},
    {"mlp.shared_mlp.up_proj", NULL, AW_SHARED, AD_IS, AD_H, AK_MAT, LW(sh_up), AR_BACKBONE, "ffn_up_shexp.weight"},
    {"mlp.shared_mlp.down_proj", NULL, AW_SHARED, AD_H, AD_IS, AK_MAT, LW(sh_down), AR_BACKBONE, "ffn_down_shexp.weight"},
    T_HEAD,
};

/* tencent/Hunyuan-A13B-Instruct config.json: 32 layers, hidden 4096, 32 heads (8 KV) of 128, 64 experts of 3072
 * top-8 and one shared, vocab 128167, tied embeddings, rope_theta 1e4 with alpha 1000 (not modelled here: synth
 * measures bytes and FLOPs): 80B parameters (the model card; 13B active). */
static const arch_shape shapes[] = {
    {"hunyuan-a13b", 128167, 4096, 32, 32, 8, 128, 64, 8, 3072, 3072, 0, 0, 0, 0, 0, 32768, 1e4, 1.0, 1, 0,
     0, 0, 0, 0, 0.0, 1, 0, 0.0, 0, 80e9},
};

static void shape_config(const arch_shape *sh, fam_config *c) {
    (void)sh;
    c->tie_embeddings = 1;
    c->qk_norm_after_rope = 1;
}

/* GGUF (llama.cpp hunyuan-moe: conversion/hunyuan.py HunYuanMoEModel): expert_feed_forward_length, the shared
 * count; the converter writes the alpha-stretched base as rope.freq_base (with no scaling), which is what the
 * import reads. */
static void gguf_config(ggm *m, arch_gguf_common *g) {
    ggm_set_num(m, "intermediate_size", ggm_moe_inter(m, g));
    ggm_set_num(m, "num_shared_expert", ggm_num(m, "expert_shared_count", 0, 1, NULL));
}

static const char *const hf_types[] = {"hunyuan_v1_moe", NULL};

const arch_desc arch_hunyuan_v1_moe = {
    .id = SL_ARCH_HUNYUAN_V1_MOE, .name = "hunyuan_v1_moe", .hf_types = hf_types,
    .router = SL_ROUTER_SOFTMAX_TOPK, .qk_norm = SL_QK_NORM_HEAD, .prf_default = 1.0,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_swiglu_parts,
    .shapes = shapes, .n_shapes = N_OF(shapes), .shape_config = shape_config,
    .gguf_arch = "hunyuan-moe", .gguf_config = gguf_config,
};
