/*
 * longcat_flash.c — LongCat-Flash (meituan-longcat/LongCat-Flash-Chat; model_type longcat_flash): transformers'
 * src/transformers/models/longcat_flash/modeling_longcat_flash.py and configuration_longcat_flash.py.
 *
 * Each of num_layers layers is two sublayers, sluice's layers 2N and 2N + 1 (layer_name maps the on-disk
 * self_attn.J / mlps.J / input_layernorm.J / post_attention_layernorm.J names): MLA (q_lora_rank, kv_lora_rank,
 * interleaved RoPE over qk_rope_head_dim, DeepSeek-V3's as in mla.c) whose queries (after q_b_proj) are times
 * sqrt(hidden / q_lora_rank) and normed latent times sqrt(hidden / kv_lora_rank), then a dense SwiGLU MLP
 * (ffn_hidden_size). The first sublayer's FFN input also feeds the shortcut MoE (config.h moe_shortcut), added after
 * the second sublayer's FFN: a softmax router over n_routed_experts + zero_expert_num (router.classifier), the top
 * moe_topk of p + e_score_correction_bias chosen, weights p times routed_scaling_factor (SL_ROUTER_SOFTMAX_ZERO);
 * SwiGLU experts of expert_ffn_hidden_size, and zero experts that return the token itself. Softmax scale
 * qk_head_dim^-0.5. Not supported (refused): YaRN RoPE scaling, attention_bias.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "family/arch/common.h"

static void config(hfc *c, fam_config *o) {
    if (o->n_layers * 2 > SL_MAX_LAYERS) hfc_fail(c, SL_ECONFIG, "num_layers (%d) too large", o->n_layers);
    o->n_layers *= 2; /* two sublayers each */
    for (int l = 0; l < o->n_layers && l < SL_MAX_LAYERS; l++) o->layer_moe[l] = l % 2 == 0;
    o->moe_shortcut = 1;
    o->dense_inter = hfc_int(c, "ffn_hidden_size", 1, 0);
    o->moe_inter = hfc_int(c, "expert_ffn_hidden_size", 1, 0);
    o->zero_experts = hfc_int(c, "zero_expert_num", 0, 0);
    o->routed_scale = hfc_num(c, "routed_scaling_factor", 1.0, NULL);
    if (!(o->routed_scale > 0)) hfc_fail(c, SL_ECONFIG, "routed_scaling_factor must be positive");
    arch_mla_dims(c, o, 1);
    o->n_kv_heads = o->n_heads;
    o->rope_interleave = 1;
    if (o->rope_type != SL_ROPE_DEFAULT)
        hfc_fail(c, SL_EUNSUPPORTED, "LongCat-Flash with RoPE scaling is not supported");
    o->attn_scale = o->head_dim > 0 ? pow((double)o->head_dim, -0.5) : 0;
    if (o->q_lora < 1 || o->kv_lora < 1) hfc_fail(c, SL_ECONFIG, "q_lora_rank and kv_lora_rank must be positive");
    else {
        o->mla_q_scale = sqrt((double)o->hidden / o->q_lora);
        o->mla_kv_scale = sqrt((double)o->hidden / o->kv_lora);
    }
}

/* self_attn.J.x, mlps.J.x, input_layernorm.J, post_attention_layernorm.J of layer N: sluice's layer 2N + J; the
 * rest (the shortcut MoE) layer 2N */
static int layer_name(int layer, const char *rest, char *out, size_t cap) {
    static const char *const sub[][2] = {{"self_attn.", "self_attn."}, {"mlps.", "mlp."}};
    static const char *const norms[] = {"input_layernorm.", "post_attention_layernorm."};
    int j, n = 0;
    for (int i = 0; i < 2; i++) {
        const size_t len = strlen(sub[i][0]);
        if (!strncmp(rest, sub[i][0], len) && sscanf(rest + len, "%d.%n", &j, &n) == 1 && n > 0 && j >= 0 && j < 2) {
            snprintf(out, cap, "%s%s", sub[i][1], rest + len + n);
            return 2 * layer + j;
        }
        const size_t nl = strlen(norms[i]);
        if (!strncmp(rest, norms[i], nl) && sscanf(rest + nl, "%d%n", &j, &n) == 1 && !rest[nl + n] && j >= 0 &&
            j < 2) {
            snprintf(out, cap, "%.*s", (int)nl - 1, norms[i]);
            return 2 * layer + j;
        }
    }
    snprintf(out, cap, "%s", rest);
    return 2 * layer;
}

static const arch_tdef tensors[] = {
    T_EMBED,
    T_IN_NORM,
    {"self_attn.q_a_proj", NULL, AW_Q_LORA, AD_QLORA, AD_H, AK_MAT, LW(q_a), AR_BACKBONE, "attn_q_a.weight"},
    {"self_attn.q_a_layernorm", NULL, AW_Q_LORA, AD_QLORA, AD_NONE, AK_VEC, LW(q_a_norm), AR_BACKBONE, "attn_q_a_norm.weight"},
    {"self_attn.q_b_proj", NULL, AW_Q_LORA, AD_QMLA, AD_QLORA, AK_MAT, LW(q_b), AR_BACKBONE, "attn_q_b.weight"},
    {"self_attn.kv_a_proj_with_mqa", NULL, AW_ATTN, AD_KVA, AD_H, AK_MAT, LW(kv_a), AR_BACKBONE, "attn_kv_a_mqa.weight"},
    {"self_attn.kv_a_layernorm", NULL, AW_ATTN, AD_KVLORA, AD_NONE, AK_VEC, LW(kv_a_norm), AR_BACKBONE, "attn_kv_a_norm.weight"},
    {"self_attn.kv_b_proj", NULL, AW_ATTN, AD_KVB, AD_KVLORA, AK_MAT, LW(kv_b), AR_BACKBONE, "attn_kv_b.weight"},
    {"self_attn.o_proj", NULL, AW_ATTN, AD_H, AD_OMLA, AK_MAT, LW(o), AR_BACKBONE, "attn_output.weight"},
    T_POST_NORM,
    {"mlp.gate", "mlp.router.classifier", AW_MOE, AD_EZ, AD_H, AK_MAT, LW(router), AR_ROUTER, "ffn_gate_inp.weight"},
    {"mlp.gate.e_score_correction_bias", "mlp.router.e_score_correction_bias", AW_MOE, AD_EZ, AD_NONE, AK_VEC,
     LW(router_bias), AR_BACKBONE, "exp_probs_b.bias"},
    {"mlp.gate_proj", NULL, AW_EVERY, AD_ID, AD_H, AK_MAT, LW(mlp_gate), AR_BACKBONE, "ffn_gate.weight"},
    {"mlp.up_proj", NULL, AW_EVERY, AD_ID, AD_H, AK_MAT, LW(mlp_up), AR_BACKBONE, "ffn_up.weight"},
    {"mlp.down_proj", NULL, AW_EVERY, AD_H, AD_ID, AK_MAT, LW(mlp_down), AR_BACKBONE, "ffn_down.weight"},
    T_HEAD,
};

static const char *const hf_types[] = {"longcat_flash", NULL};

static void shape_config(const arch_shape *sh, fam_config *c) {
    c->n_layers = 2 * sh->layers;
    for (int l = 0; l < c->n_layers; l++) c->layer_moe[l] = l % 2 == 0;
    c->moe_shortcut = 1;
    c->dense_inter = sh->dense_inter;
    c->zero_experts = 256;
    c->q_lora = 1536;
    c->kv_lora = 512;
    c->qk_nope = 128;
    c->rot_dim = 64;
    c->v_head_dim = 128;
    c->head_dim = 192;
    c->n_kv_heads = c->n_heads;
    c->rope_interleave = 1;
    c->routed_scale = 6.0;
    c->router = SL_ROUTER_SOFTMAX_ZERO;
}

/* meituan-longcat/LongCat-Flash-Chat (configuration_longcat_flash.py's defaults are the release's): hidden 6144, 28
 * layers of two sublayers, 64 MLA heads (q_lora 1536, kv_lora 512, nope 128 + rope 64, values 128), dense MLPs of
 * 12288, 512 experts of 2048 plus 256 zero experts (top 12), vocab 131072: 560B total parameters, 18.6B-31.3B
 * active (the model card). */
static const arch_shape shapes[] = {
    {"LongCat-Flash", 131072, 6144, 28, 64, 64, 192, 512, 12, 2048, 0, 0, 0, 0, 0, 0, 131072, 1e7, 1.0, 0, 0, 12288,
     0, 0, 0, 6.0, 0, 0, 0.0, 0, 560e9},
};

const arch_desc arch_longcat_flash = {
    .id = SL_ARCH_LONGCAT_FLASH, .name = "longcat_flash", .hf_types = hf_types,
    .router = SL_ROUTER_SOFTMAX_ZERO, .qk_norm = SL_QK_NORM_NONE, .prf_default = 1.0,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_swiglu_parts,
    .shapes = shapes, .n_shapes = N_OF(shapes), .shape_config = shape_config, .layer_name = layer_name,
    /* no GGUF import: llama.cpp (src/llama-arch.cpp) has no LongCat-Flash architecture */
};
