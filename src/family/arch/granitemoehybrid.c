/*
 * granitemoehybrid.c — Granite 4.0 hybrid MoE (ibm-granite/granite-4.0-h-small, -h-tiny; model_type
 * granitemoehybrid): transformers' src/transformers/models/granitemoehybrid/modeling_granitemoehybrid.py and
 * configuration_granitemoehybrid.py.
 *
 * Layers are Mamba2 or attention as layer_types says (linear_attention / full_attention; mamba / attention). Mamba2
 * (the mamba2 op, in the DeltaNet layers' place and state: lin_nk = mamba_n_groups, lin_dk = mamba_d_state, lin_nv
 * = mamba_n_heads, lin_dv = mamba_d_head): in_proj to gate | x B C | dt, the causal conv (mamba_d_conv, with bias)
 * and SiLU over x B C, the selective scan (dt = softplus(dt + dt_bias), A = -exp(A_log), D skip), the gated RMSNorm
 * per group, out_proj. Attention: GQA, softmax scale attention_multiplier, RoPE only when position_embedding_type is
 * "rope" (else NoPE: config.h nope_full). Every layer's FFN: experts (block_sparse_moe.input_linear [E, 2I, H]: gate
 * | up, output_linear [E, H, I]) chosen by the top-k of the router's logits and a softmax over those k, plus the
 * shared MLP (shared_mlp.input_linear [2 Is, H], output_linear). Embeddings times embedding_multiplier, each
 * block's output times residual_multiplier, logits divided by logits_scaling. Not supported (refused): no experts
 * (num_local_experts 0), mamba_proj_bias, a conv without bias, a time_step_limit other than (0, inf).
 */
#include <math.h>
#include <string.h>

#include "family/arch/common.h"

static void mamba_config(hfc *c, fam_config *o) {
    o->mamba = 1;
    o->lin_nk = hfc_int(c, "mamba_n_groups", 0, 1);
    o->lin_dk = hfc_int(c, "mamba_d_state", 0, 256);
    o->lin_nv = hfc_int(c, "mamba_n_heads", 0, 128);
    o->conv_k = hfc_int(c, "mamba_d_conv", 0, 4);
    const double expand = hfc_num(c, "mamba_expand", 2, NULL);
    const int inter = (int)(expand * o->hidden);
    const int given = hfc_has(c, "mamba_d_head") && !hfc_path_is_str(c, "mamba_d_head"); /* else "auto" */
    o->lin_dv = given ? hfc_int(c, "mamba_d_head", 0, 0) : o->lin_nv > 0 ? inter / o->lin_nv : 0;
    if (o->lin_nv * o->lin_dv != inter)
        hfc_fail(c, SL_ECONFIG, "mamba_n_heads * mamba_d_head != mamba_expand * hidden");
    if (hfc_bool(c, "mamba_proj_bias", 0)) hfc_fail(c, SL_EUNSUPPORTED, "mamba_proj_bias is not supported");
    if (!hfc_bool(c, "mamba_conv_bias", 1)) hfc_fail(c, SL_EUNSUPPORTED, "a Mamba2 conv without bias is not supported");
    /* [0.0, {"__float__": "Infinity"}] as transformers writes the default (JSON has no infinity) */
    const double lo = hfc_path_num(c, "time_step_limit.0", 0.0, NULL);
    const char *hi = hfc_path_str(c, "time_step_limit.1.__float__");
    const int inf = hfc_array_size(c, "time_step_limit") < 2 || (hi && !strcmp(hi, "Infinity"));
    if (lo != 0.0 || !inf) hfc_fail(c, SL_EUNSUPPORTED, "time_step_limit other than (0, inf) is not supported");
}

static void config(hfc *c, fam_config *o) {
    o->moe_inter = hfc_int(c, "intermediate_size", 1, 0);
    o->shared_inter = hfc_int(c, "shared_intermediate_size", 0, 1024);
    if (o->n_experts < 1)
        hfc_fail(c, SL_EUNSUPPORTED, "Granite without experts (num_local_experts 0) is not a MoE model");
    hfc_linear_layers(c, o);
    mamba_config(c, o);
    const char *pe = hfc_path_str(c, "position_embedding_type");
    if (!pe || strcmp(pe, "rope")) o->nope_full = 1; /* NoPE: no RoPE at all (every attention layer is full) */
    o->attn_scale = hfc_num(c, "attention_multiplier", 1.0, NULL);
    const double em = hfc_num(c, "embedding_multiplier", 1.0, NULL), rm = hfc_num(c, "residual_multiplier", 1.0, NULL);
    const double ls = hfc_num(c, "logits_scaling", 1.0, NULL);
    if (!(em > 0 && rm > 0 && ls > 0 && o->attn_scale > 0)) hfc_fail(c, SL_ECONFIG, "the multipliers must be positive");
    o->embed_scale = em != 1.0 ? em : 0;
    o->residual_scale = rm != 1.0 ? rm : 0;
    o->logit_scale = ls != 1.0 ? 1.0 / ls : 0;
}

static const arch_tdef tensors[] = {
    T_EMBED,
    T_IN_NORM, T_ATTN_QKVO,
    {"linear_attn.in_proj", NULL, AW_LINEAR, AD_MAMBA_IN, AD_H, AK_MAT, LW(qkv), AR_BACKBONE, "ssm_in.weight"},
    {"linear_attn.conv1d", NULL, AW_LINEAR, AD_CQ, AD_CONVK, AK_VEC, LW(conv_w), AR_BACKBONE, "ssm_conv1d.weight"},
    {"linear_attn.conv1d.bias", NULL, AW_LINEAR, AD_CQ, AD_NONE, AK_VEC, LW(conv_b), AR_BACKBONE, "ssm_conv1d.bias"},
    {"linear_attn.A_log", NULL, AW_LINEAR, AD_NV, AD_NONE, AK_VEC, LW(A_log), AR_BACKBONE, NULL},
    {"linear_attn.D", NULL, AW_LINEAR, AD_NV, AD_NONE, AK_VEC, LW(ssm_D), AR_BACKBONE, "ssm_d"},
    {"linear_attn.dt_bias", NULL, AW_LINEAR, AD_NV, AD_NONE, AK_VEC, LW(dt_bias), AR_BACKBONE, "ssm_dt.bias"},
    {"linear_attn.norm", NULL, AW_LINEAR, AD_NVDV, AD_NONE, AK_VEC, LW(lin_norm), AR_BACKBONE, "ssm_norm.weight"},
    {"linear_attn.out_proj", NULL, AW_LINEAR, AD_H, AD_NVDV, AK_MAT, LW(lin_out), AR_BACKBONE, "ssm_out.weight"},
    T_POST_NORM, T_ROUTER,
    {"mlp.shared_expert.gate_up_proj", NULL, AW_SHARED, AD_2IS, AD_H, AK_MAT, LW(sh_gate_up), AR_BACKBONE, NULL},
    {"mlp.shared_expert.down_proj", NULL, AW_SHARED, AD_H, AD_IS, AK_MAT, LW(sh_down), AR_BACKBONE,
     "ffn_down_shexp.weight"},
    T_HEAD,
};

/* mamba.conv1d first (the kernel's [C, 1, K] layout is flattened under that name), then the rest of mamba.; the
 * experts fused as block_sparse_moe.input_linear (gate | up) and output_linear */
static const char *const renames[] = {
    "mamba.conv1d", "linear_attn.conv1d", "mamba.", "linear_attn.",
    "block_sparse_moe.input_linear", "mlp.experts.gate_up_proj",
    "block_sparse_moe.output_linear", "mlp.experts.down_proj",
    "block_sparse_moe.router.layer", "mlp.gate", "shared_mlp.input_linear", "mlp.shared_expert.gate_up_proj",
    "shared_mlp.output_linear", "mlp.shared_expert.down_proj", NULL};

static const char *const hf_types[] = {"granitemoehybrid", NULL};

/* ---- GGUF (llama.cpp granitehybrid: convert_hf_to_gguf.py conversion/granite.py GraniteHybridModel, Mamba2Model;
 * src/models/granite-hybrid.cpp) ----
 * Layer kinds from attention.head_count_kv (0: a Mamba2 layer); the ssm.* keys (time_step_rank: the heads); the
 * multipliers as attention.scale (absent: llama.cpp's 1/sqrt(head_dim)), embedding_scale, residual_scale,
 * logit_scale (the divisor); RoPE only where rope.scaling.finetuned is true or absent (the converter writes false for
 * the hybrid releases: NoPE). Rewrites undone: q/k rows of LlamaModel.permute (gguf_xf), A = -exp(A_log) (ssm_a),
 * the shared MLP's input_linear split into ffn_gate_shexp + ffn_up_shexp (joined back), the experts' into
 * ffn_gate_exps / ffn_up_exps (the parts as they are), conv1d squeezed, D and A as [n, 1], dt_bias as ssm_dt.bias,
 * the norm as [groups, inner / groups] (one group: a vector). */
static void gguf_config(ggm *m, arch_gguf_common *g) {
    static const char *const kinds[] = {"linear_attention", "full_attention"};
    const char *types[SL_MAX_LAYERS];
    double kvh[SL_MAX_LAYERS], v;
    int found = 0, mamba = -1;
    if (!ggm_layer_nums(m, "attention.head_count_kv", g->n_layers, kvh))
        for (int l = 0; l < g->n_layers; l++) kvh[l] = 1;
    for (int l = 0; l < g->n_layers; l++) {
        types[l] = kinds[kvh[l] != 0];
        if (kvh[l] == 0 && mamba < 0) mamba = l;
    }
    ggm_set_strs(m, "layer_types", types, g->n_layers);
    const int inner = ggm_count(m, "ssm.inner_size", mamba >= 0, 0, NULL);
    const int heads = ggm_count(m, "ssm.time_step_rank", mamba >= 0, 1, NULL);
    const int hidden = ggm_count(m, "embedding_length", 1, 1, NULL);
    ggm_set_num(m, "mamba_d_conv", ggm_count(m, "ssm.conv_kernel", mamba >= 0, 4, NULL));
    ggm_set_num(m, "mamba_d_state", ggm_count(m, "ssm.state_size", mamba >= 0, 256, NULL));
    ggm_set_num(m, "mamba_n_groups", ggm_count(m, "ssm.group_count", mamba >= 0, 1, NULL));
    if (mamba >= 0 && heads > 0 && hidden > 0) {
        ggm_set_num(m, "mamba_n_heads", heads);
        ggm_set_num(m, "mamba_d_head", inner / heads);
        ggm_set_num(m, "mamba_expand", (double)inner / hidden);
        ggm_set_bool(m, "mamba_conv_bias", ggm_has(m, mamba, "ssm_conv1d.bias"));
    }
    ggm_set_num(m, "attention_multiplier", ggm_num(m, "attention.scale", 0, 1.0 / sqrt((double)g->head_dim), NULL));
    if ((v = ggm_num(m, "embedding_scale", 0, 0, &found)), found && v != 0) ggm_set_num(m, "embedding_multiplier", v);
    if ((v = ggm_num(m, "residual_scale", 0, 0, &found)), found && v != 0) ggm_set_num(m, "residual_multiplier", v);
    if ((v = ggm_num(m, "logit_scale", 0, 0, &found)), found && v != 0) ggm_set_num(m, "logits_scaling", v);
    ggm_set_str(m, "position_embedding_type", ggm_num(m, "rope.scaling.finetuned", 0, 1, NULL) != 0 ? "rope" : "nope");
    ggm_set_num(m, "intermediate_size", ggm_moe_inter(m, g));
    const double sh_file = (double)ggm_ne(m, g->l_moe, "ffn_gate_shexp.weight", 1);
    ggm_set_num(m, "shared_intermediate_size", ggm_num(m, "expert_shared_feed_forward_length", 0, sh_file, NULL));
}

static const arch_gguf_xf gguf_xf[] = {
    {"self_attn.q_proj", {"attn_q.weight", NULL}, 0, arch_gguf_q_rows, NULL},
    {"self_attn.k_proj", {"attn_k.weight", NULL}, 0, arch_gguf_k_rows, NULL},
    {"linear_attn.A_log", {"ssm_a", NULL}, 0, NULL, arch_gguf_a_log},
    {"mlp.shared_expert.gate_up_proj", {"ffn_gate_shexp.weight", "ffn_up_shexp.weight"}, 0, NULL, NULL},
};

/* No released shape for sluice synth yet: the releases' config.json (hidden size, Mamba2 dimensions) was not at
 * hand to reproduce their published counts. */
const arch_desc arch_granitemoehybrid = {
    .id = SL_ARCH_GRANITEMOEHYBRID, .name = "granitemoehybrid", .hf_types = hf_types,
    .router = SL_ROUTER_TOPK_SOFTMAX, .qk_norm = SL_QK_NORM_NONE, .prf_default = 1.0,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_swiglu_parts, .renames = renames,
    .gguf_arch = "granitehybrid", .gguf_config = gguf_config, .gguf_xf = gguf_xf, .n_gguf_xf = N_OF(gguf_xf),
};
