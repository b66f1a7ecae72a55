/*
 * gpt_oss.c — gpt-oss (openai/gpt-oss-20b, openai/gpt-oss-120b; model_type gpt_oss): transformers'
 * src/transformers/models/gpt_oss/modeling_gpt_oss.py and configuration_gpt_oss.py.
 *
 * Attention: GQA with q/k/v/o biases (attention_bias), a learned sink logit per head (self_attn.sinks) in
 * each head's softmax denominator, layers alternating sliding-window (sliding_window, 128 as released) and
 * full attention as layer_types says (default: sliding at even layers), YaRN RoPE over the whole head
 * (family/rope.h). Every layer is a MoE: the router is a Linear with bias (mlp.router), top-k of its logits
 * then a softmax over those k (SL_ROUTER_TOPK_SOFTMAX); an expert is the fused gate_up_proj with bias, its
 * rows interleaved (gate = even, up = odd: transformers' gate_up[..., ::2], [..., 1::2]), the clamped SwiGLU
 * (gate <= limit, |up| <= limit, glu = gate * sigmoid(1.702 gate), (up + 1) * glu) and down_proj with bias
 * (SL_EXPERT_GPTOSS, moe.c). On disk the experts are stacks [E, in, out] (x @ W: gate_up_proj [E, H, 2I],
 * down_proj [E, I, H]) with biases [E, out], or, as released, MXFP4 (integrations/mxfp4.py):
 * gate_up_proj_blocks [E, 2I, H/32, 16] + gate_up_proj_scales [E, 2I, H/32], down_proj likewise, imported as
 * they are (DT_MXFP4, docs/FORMAT.md).
 */
#include "family/arch/common.h"

static void config(hfc *c, fam_config *o) {
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
    {"self_attn.o_proj.bias", NULL, AW_ATTN_BIAS, AD_H, AD_NONE, AK_VEC, LW(o_bias), AR_BACKBONE, "attn_output.bias"},
    {"self_attn.sinks", NULL, AW_SINKS, AD_NH, AD_NONE, AK_VEC, LW(sinks), AR_BACKBONE, "attn_sinks.weight"},
    T_POST_NORM_PA,
    {"mlp.gate", "mlp.router", AW_MOE, AD_E, AD_H, AK_MAT, LW(router), AR_ROUTER, "ffn_gate_inp.weight"},
    {"mlp.gate.bias", "mlp.router.bias", AW_MOE, AD_E, AD_NONE, AK_VEC, LW(router_lbias), AR_BACKBONE, "ffn_gate_inp.bias"},
    T_HEAD,
};

static const arch_pdef parts[] = {
    {"gate_up_proj", NULL, AD_2I, AD_H, EW(gate_up), AK_MAT, 1, NULL},
    {"gate_up_proj_bias", NULL, AD_2I, AD_ONE, EW(gate_up_bias), AK_VEC, 0, NULL},
    {"down_proj", NULL, AD_H, AD_I, EW(down), AK_MAT, 1, "ffn_down_exps.weight"},
    {"down_proj_bias", NULL, AD_H, AD_ONE, EW(down_bias), AK_VEC, 0, "ffn_down_exps.bias"},
};

/* ---- GGUF (llama.cpp gpt-oss): convert_hf_to_gguf.py GptOssModel (llama.cpp conversion/gpt_oss.py) splits the
 * interleaved gate_up_proj (and its bias) into ffn_gate_exps (the even rows) and ffn_up_exps (the odd ones), each
 * [E][I][H] (x @ W transposed to rows of H), and down_proj into ffn_down_exps [E][H][I]; MXFP4 experts as ggml
 * MXFP4 blocks (the E8M0 exponent, then 16 bytes: elements 0-15 in the low nibbles, 16-31 in the high ones),
 * imported as the container's mxfp4 (import/gguf.c). The sinks are attn_sinks.weight, the router's bias
 * ffn_gate_inp.bias. Layers slide at even indices (llama.cpp's swa pattern 2, configuration_gpt_oss.py's
 * default) unless attention.sliding_window_pattern says otherwise. The file has no key for YaRN's truncate: false, as every gpt-oss release has it. ---- */

/* gate_up_proj row 2i is ffn_gate_exps row i, 2i + 1 ffn_up_exps row i */
static void gate_up_rows(const fam_config *c, int64_t rows, int64_t *perm) {
    (void)c;
    for (int64_t r = 0; r < rows; r++) perm[r] = r % 2 ? rows / 2 + r / 2 : r / 2;
}

static const arch_gguf_xf gguf_xf[] = {
    {"gate_up_proj", {"ffn_gate_exps.weight", "ffn_up_exps.weight"}, 1, gate_up_rows, NULL},
    {"gate_up_proj_bias", {"ffn_gate_exps.bias", "ffn_up_exps.bias"}, 1, gate_up_rows, NULL},
};

static void gguf_config(ggm *m, arch_gguf_common *g) {
    ggm_set_num(m, "intermediate_size", ggm_moe_inter(m, g));
    ggm_set_bool(m, "attention_bias", g->has_qbias);
    ggm_set_num(m, "sliding_window", ggm_num(m, "attention.sliding_window", 1, 0, NULL));
    /* llama.cpp's load_swa_pattern: attention.sliding_window_pattern n (default 2) slides layer l when
     * n == 0 or l % n < n - 1 (a per-layer array of differing values is refused by ggm_count) */
    const int n = ggm_count(m, "attention.sliding_window_pattern", 0, 2, NULL);
    const char *types[SL_MAX_LAYERS];
    for (int l = 0; l < g->n_layers; l++) types[l] = n == 0 || l % n < n - 1 ? "sliding_attention" : "full_attention";
    ggm_set_strs(m, "layer_types", types, g->n_layers);
    if (ggm_num(m, "rope.scaling.factor", 0, 0, NULL) > 0) ggm_set_bool(m, "rope_parameters.truncate", 0);
}

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
    .gguf_arch = "gpt-oss", .gguf_config = gguf_config, .gguf_xf = gguf_xf, .n_gguf_xf = N_OF(gguf_xf),
};
