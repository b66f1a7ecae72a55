/*
 * gpt_oss.c — gpt-oss (openai/gpt-oss-20b, openai/gpt-oss-120b; model_type gpt_oss): transformers'
 * src/transformers/models/gpt_oss/modeling_gpt_oss.py and configuration_gpt_oss.py.
 *
 * Attention: GQA with q/k/v/o biases (attention_bias), a learned sink logit per head (self_attn.sinks) in
 * each head's softmax denominator, layers alternating sliding-window (sliding_window, 128 as released) and
 * full attention as layer_types says (default: sliding at even layers), YaRN RoPE over the whole head
 * (model/rope.h). Every layer is a MoE: the router is a Linear with bias (mlp.router), top-k of its logits
 * then a softmax over those k (SL_ROUTER_TOPK_SOFTMAX); an expert is the fused gate_up_proj with bias, its
 * rows interleaved (gate = even, up = odd: transformers' gate_up[..., ::2], [..., 1::2]), the clamped SwiGLU
 * (gate <= limit, |up| <= limit, glu = gate * sigmoid(1.702 gate), (up + 1) * glu) and down_proj with bias
 * (SL_EXPERT_GPTOSS, moe.c). On disk the experts are stacks [E, in, out] (x @ W: gate_up_proj [E, H, 2I],
 * down_proj [E, I, H]) with biases [E, out], or, as released, MXFP4 (integrations/mxfp4.py):
 * gate_up_proj_blocks [E, 2I, H/32, 16] + gate_up_proj_scales [E, 2I, H/32], down_proj likewise, imported as
 * they are (DT_MXFP4, docs/FORMAT.md).
 */
#include "model/arch/common.h"

static void config(hfc *c, sl_config *o) {
    o->moe_inter = hfc_int(c, "intermediate_size", 1, 0); /* the experts' width: gpt-oss has no dense MLP */
    o->norm_topk = 1;
    o->attn_bias = hfc_bool(c, "attention_bias", 1);
    o->swiglu_limit = hfc_num(c, "swiglu_limit", 7.0, NULL);
    if (!(o->swiglu_limit > 0)) hfc_fail(c, SL_ECONFIG, "swiglu_limit must be positive");
    hfc_sliding_layers(c, o);
    for (int i = 0; i < o->n_layers; i++) o->layer_moe[i] = 1;
}

static const arch_tdef tensors[] = {
    T_EMBED,
    T_IN_NORM, T_ATTN_QKVO,
    T_ATTN_QKV_BIAS,
    {"self_attn.o_proj.bias", NULL, AW_ATTN_BIAS, AD_H, AD_NONE, AK_VEC, LW(o_bias), AR_BACKBONE, NULL},
    {"self_attn.sinks", NULL, AW_SINKS, AD_NH, AD_NONE, AK_VEC, LW(sinks), AR_BACKBONE, NULL},
    T_POST_NORM,
    {"mlp.gate", "mlp.router", AW_MOE, AD_E, AD_H, AK_MAT, LW(router), AR_ROUTER, NULL},
    {"mlp.gate.bias", "mlp.router.bias", AW_MOE, AD_E, AD_NONE, AK_VEC, LW(router_lbias), AR_BACKBONE, NULL},
    T_HEAD,
};

static const arch_pdef parts[] = {
    {"gate_up_proj", NULL, AD_2I, AD_H, EW(gate_up), AK_MAT, 1, NULL},
    {"gate_up_proj_bias", NULL, AD_2I, AD_ONE, EW(gate_up_bias), AK_VEC, 0, NULL},
    {"down_proj", NULL, AD_H, AD_I, EW(down), AK_MAT, 1, NULL},
    {"down_proj_bias", NULL, AD_H, AD_ONE, EW(down_bias), AK_VEC, 0, NULL},
};

/* openai/gpt-oss-20b and openai/gpt-oss-120b config.json: hidden_size 2880, intermediate_size 2880, 64 heads of
 * 64, 8 KV heads, vocab 201088, 131072 positions, rope_theta 150000, YaRN factor 32 over 4096 (beta_fast 32,
 * beta_slow 1, truncate false), sliding_window 128, 4 experts per token; 24 layers x 32 experts / 36 x 128. */
static const arch_shape shapes[] = {
    {"gpt-oss-20b", 201088, 2880, 24, 64, 8, 64, 32, 4, 2880, 0, 0, 0, 0, 0, 0, 131072, 150000, 1.0, 1, 1, 0, 0, 0, 0,
     0.0, 0, 128, 32.0, 4096, 20.91e9}, /* OpenAI's gpt-oss model card */
    {"gpt-oss-120b", 201088, 2880, 36, 64, 8, 64, 128, 4, 2880, 0, 0, 0, 0, 0, 0, 131072, 150000, 1.0, 1, 1, 0, 0, 0, 0,
     0.0, 0, 128, 32.0, 4096, 116.83e9},
};

static const char *const hf_types[] = {"gpt_oss", NULL};

const arch_desc arch_gpt_oss = {
    .id = SL_ARCH_GPT_OSS, .name = "gpt_oss", .hf_types = hf_types,
    .router = SL_ROUTER_TOPK_SOFTMAX, .qk_norm = SL_QK_NORM_NONE, .prf_default = 1.0, .reads_attention_bias = 1,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors),
    .parts = parts, .n_parts = N_OF(parts), .expert_kind = SL_EXPERT_GPTOSS, .attn_sinks = 1,
    .shapes = shapes, .n_shapes = N_OF(shapes),
};
