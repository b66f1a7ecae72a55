/*
 * bailing_hybrid.c — Bailing hybrid / Ling 3 (model_type bailing_hybrid; inclusionAI's Ling-3.0 checkpoints), after
 * transformers' src/transformers/models/bailing_hybrid/modeling_bailing_hybrid.py and
 * configuration_bailing_hybrid.py (5.25):
 *   - linear_attention layers: Kimi Delta Attention (model/kda.c) with a bounded forget gate, g = kda_lower_bound *
 *     sigmoid(exp(A_log) (f_proj x + dt_bias)) per channel (kda_safe_gate, the default; else Kimi's -exp(A_log)
 *     softplus(f_proj x + dt_bias)), full-rank f_proj and output gate g_proj (sigmoid-gated RMSNorm per head), the
 *     q, k, v projections through one causal depthwise conv + SiLU (three kernels on disk, as Kimi's), o = dense;
 *     num_attention_heads heads of head_dim (config.json's head_dim is the KDA head: transformers'
 *     linear_head_dim = head_dim before its __post_init__ overwrites head_dim with qk_rope_head_dim);
 *   - full_attention layers (every layer_group_size-th): DeepSeek-V3's multi-head latent attention (mla.c; q_proj
 *     or the q LoRA, RoPE on adjacent pairs always) whose heads' outputs are each multiplied by sigmoid(g_proj x)
 *     (one entry per head) before dense (cfg->attn_head_gate, the head_gate op);
 *   - the first first_k_dense_replace layers (or mlp_layer_types "dense") a SwiGLU MLP of intermediate_size, the
 *     rest MoE: DeepSeek-V3's sigmoid group router with its score-correction bias (expert_bias on disk),
 *     routed_scaling_factor, SwiGLU experts plus a shared expert of moe_intermediate_size * num_shared_experts, both
 *     clipped after the activation (SL_EXPERT_SWIGLU_CLIP) by their per-layer limits expert_swiglu_limit_list /
 *     share_expert_swiglu_limit_list (0: none).
 * On disk: the release's names (model.word_embeddings, layers.N.attention.*, attention.dense, q/k/v_conv1d,
 * mlp.gate.expert_bias, mlp.experts.E.*), which transformers' conversion_mapping.py maps and save_pretrained writes
 * back; config.json with the release's keys (num_experts, num_experts_per_token, num_expert_group, moe_renormalize,
 * num_shared_experts, model_max_length) or transformers' own. The multi-token-prediction layers after
 * num_hidden_layers are not read.
 */
#include <math.h>
#include <string.h>

#include "family/arch/common.h"

/* layer_types, else full attention at every layer_group_size-th (6); the per-layer SwiGLU limits (absent: 0, none) */
static void layer_kinds(hfc *c, fam_config *o) {
    const int n = o->n_layers;
    if (!arch_kda_layer_types(c, o)) {
        const int g = hfc_int(c, "layer_group_size", 0, 6);
        if (g < 1) hfc_fail(c, SL_ECONFIG, "layer_group_size must be positive");
        for (int l = 0; g >= 1 && l < n; l++) o->layer_linear[l] = (l + 1) % g != 0;
    }
    if (!hfc_nums(c, "expert_swiglu_limit_list", n, o->layer_clip)) hfc_nums(c, "swiglu_limits", n, o->layer_clip);
    if (!hfc_nums(c, "share_expert_swiglu_limit_list", n, o->layer_sh_clip))
        hfc_nums(c, "swiglu_limits_shared", n, o->layer_sh_clip);
}

/* Kimi's release keys for the MoE (arch_kda_moe_config: 8 groups, top 4, scale 2.5, the first 2 layers dense) */
static void config(hfc *c, fam_config *o) {
    if (hfc_has(c, "model_max_length")) o->max_pos = hfc_int(c, "model_max_length", 0, o->max_pos);
    arch_kda_moe_config(c, o, 8, 4, 2.5, 2);
    /* KDA: as many key as value heads, config.json's head_dim each (read before MLA's dims replace head_dim) */
    o->kda = 1;
    o->lin_nk = o->lin_nv = o->n_heads;
    o->lin_dk = o->lin_dv = hfc_int(c, "head_dim", 0, 128);
    o->conv_k = hfc_int(c, "short_conv_kernel_size", 0, 4);
    if (hfc_bool(c, "kda_safe_gate", 1)) {
        o->kda_lower = hfc_num(c, "kda_lower_bound", -5.0, NULL);
        if (!(o->kda_lower < 0 && o->kda_lower > -1e30))
            hfc_fail(c, SL_ECONFIG, "kda_lower_bound = %g: the bounded KDA gate needs a negative bound", o->kda_lower);
    }
    arch_mla_config(c, o);
    o->rope_interleave = 1; /* apply_rotary_pos_emb_interleave, whatever config.json says */
    o->attn_head_gate = 1;
    layer_kinds(c, o);
}

/* a KDA tensor and its llama.cpp bailingmoe3 name (conversion/bailingmoe3.py: f_proj as ssm_f_a, g_proj as ssm_g_a) */
#define KDA(name, f, rows, cols, kind, gg) {"self_attn." name, NULL, AW_LINEAR, rows, cols, kind, LW(f), AR_BACKBONE, gg}

/* attention.* is renamed self_attn.* first (renames), then the whole names below */
static const arch_tdef tensors[] = {
    {"embed_tokens", "word_embeddings", AW_GLOBAL, AD_V, AD_H, AK_MAT, GW(embed), AR_BACKBONE, "token_embd.weight"},
    T_IN_NORM,
    /* full attention: gated MLA */
    {"self_attn.q_proj", NULL, AW_Q_FULL, AD_QMLA, AD_H, AK_MAT, LW(q), AR_BACKBONE, "attn_q.weight"},
    {"self_attn.q_a_proj", NULL, AW_Q_LORA, AD_QLORA, AD_H, AK_MAT, LW(q_a), AR_BACKBONE, "attn_q_a.weight"},
    {"self_attn.q_a_layernorm", NULL, AW_Q_LORA, AD_QLORA, AD_NONE, AK_VEC, LW(q_a_norm), AR_BACKBONE, "attn_q_a_norm.weight"},
    {"self_attn.q_b_proj", NULL, AW_Q_LORA, AD_QMLA, AD_QLORA, AK_MAT, LW(q_b), AR_BACKBONE, "attn_q_b.weight"},
    {"self_attn.kv_a_proj_with_mqa", NULL, AW_ATTN, AD_KVA, AD_H, AK_MAT, LW(kv_a), AR_BACKBONE, "attn_kv_a_mqa.weight"},
    {"self_attn.kv_a_layernorm", NULL, AW_ATTN, AD_KVLORA, AD_NONE, AK_VEC, LW(kv_a_norm), AR_BACKBONE, "attn_kv_a_norm.weight"},
    {"self_attn.kv_b_proj", NULL, AW_ATTN, AD_KVB, AD_KVLORA, AK_MAT, LW(kv_b), AR_BACKBONE, "attn_kv_b.weight"},
    {"self_attn.g_proj", NULL, AW_ATTN, AD_NH, AD_H, AK_MAT, LW(head_gate), AR_BACKBONE, "attn_gate.weight"},
    {"self_attn.o_proj", "self_attn.dense", AW_ATTN, AD_H, AD_OMLA, AK_MAT, LW(o), AR_BACKBONE, "attn_output.weight"},
    /* linear attention: KDA with the bounded gate */
    KDA("q_proj", q, AD_NVDV, AD_H, AK_MAT, "attn_q.weight"), KDA("k_proj", k, AD_NVDV, AD_H, AK_MAT, "attn_k.weight"),
    KDA("v_proj", v, AD_NVDV, AD_H, AK_MAT, "attn_v.weight"),
    KDA("q_conv1d", conv_parts[0], AD_NVDV, AD_CONVK, AK_VEC, "ssm_conv1d_q.weight"),
    KDA("k_conv1d", conv_parts[1], AD_NVDV, AD_CONVK, AK_VEC, "ssm_conv1d_k.weight"),
    KDA("v_conv1d", conv_parts[2], AD_NVDV, AD_CONVK, AK_VEC, "ssm_conv1d_v.weight"),
    KDA("f_proj", kda_f, AD_NVDV, AD_H, AK_MAT, "ssm_f_a.weight"), KDA("g_proj", kda_g, AD_NVDV, AD_H, AK_MAT, "ssm_g_a.weight"),
    KDA("b_proj", b, AD_NV, AD_H, AK_MAT, "ssm_beta.weight"), KDA("A_log", A_log, AD_NV, AD_NONE, AK_VEC, NULL),
    KDA("dt_bias", dt_bias, AD_NVDV, AD_NONE, AK_VEC, "ssm_dt.bias"),
    KDA("o_norm", lin_norm, AD_DV, AD_NONE, AK_VEC, "ssm_norm.weight"),
    {"self_attn.o_proj", "self_attn.dense", AW_LINEAR, AD_H, AD_NVDV, AK_MAT, LW(lin_out), AR_BACKBONE, "attn_output.weight"},
    T_POST_NORM, T_ROUTER,
    {"mlp.gate.e_score_correction_bias", "mlp.gate.expert_bias", AW_MOE, AD_E, AD_NONE, AK_VEC, LW(router_bias), AR_BACKBONE, "exp_probs_b.bias"},
    {"mlp.shared_experts.gate_proj", NULL, AW_SHARED, AD_IS, AD_H, AK_MAT, LW(sh_gate), AR_BACKBONE, "ffn_gate_shexp.weight"},
    {"mlp.shared_experts.up_proj", NULL, AW_SHARED, AD_IS, AD_H, AK_MAT, LW(sh_up), AR_BACKBONE, "ffn_up_shexp.weight"},
    {"mlp.shared_experts.down_proj", NULL, AW_SHARED, AD_H, AD_IS, AK_MAT, LW(sh_down), AR_BACKBONE, "ffn_down_shexp.weight"},
    T_DENSE_MLP,
    T_HEAD,
};

static const char *const renames[] = {"attention.", "self_attn.", NULL};

/* transformers' BailingHybridConfig defaults (its docstring's checkpoint inclusionAI/Ling-3.0-Flash; llama.cpp's
 * bailingmoe3 names this shape 124B-A5.1B): 42 layers (MLA at every 6th), the first 2 dense, 512 experts of 768,
 * top 8 among 4 of 8 groups, MLA without q LoRA (kv_lora 512, nope 128, rope 64, v 128), KDA 32 heads of 128 */
static const arch_shape shapes[] = {
    {"ling-3.0-flash", 157184, 2560, 42, 32, 32, 192, 512, 8, 768, 768, 32, 32, 128, 128, 6, 262144, 6000000, 1.0,
     1, 0, 6144, 2, 8, 4, 2.5, 0, 0, 0.0, 0, 124e9},
};

static void shape_config(const arch_shape *sh, fam_config *c) {
    (void)sh;
    arch_mla_shape(c, 0, 512, 128, 64, 128);
    c->kda = 1;
    c->kda_lower = -5.0;
    c->attn_head_gate = 1;
    c->conv_k = 4;
}

/* ---- GGUF (llama.cpp bailingmoe3: convert_hf_to_gguf.py conversion/bailingmoe3.py BailingMoeV3Model;
 * src/models/bailingmoe3.cpp) ----
 * MLA as deepseek2 writes it (arch_mla_gguf_config); the layer kinds from attention.head_count_kv (0: KDA); the KDA
 * heads attention.head_count of kda.head_dim (config.json's head_dim), ssm.conv_kernel, kda.safe_gate (absent: true,
 * as llama.cpp; false refused: its graph has only the bounded gate) and kda.gate_lower_bound; the per-layer SwiGLU
 * limits swiglu_clamp_exp / swiglu_clamp_shexp (0: none); the MoE keys of DeepSeek-V3's block (expert_weights_scale,
 * expert_weights_norm, expert_group_count: the converter writes none from the release's num_expert_group, and
 * llama.cpp then routes without groups). Rewrites undone: exp(A_log) as [n, 1] (ssm_a) back to A_log, dt_bias as
 * ssm_dt.bias, the conv kernels as [1, inner, 1, K], f_proj / g_proj as ssm_f_a / ssm_g_a on KDA layers and g_proj as
 * attn_gate on MLA ones, kv_b_proj split. The multi-token-prediction layers (nextn_predict_layers) are not read. */
static void gguf_config(ggm *m, arch_gguf_common *g) {
    double lim[SL_MAX_LAYERS];
    arch_mla_gguf_config(m, g);
    ggm_set_num(m, "head_dim", ggm_count(m, "kda.head_dim", 1, 0, NULL)); /* the KDA head (config hook) */
    arch_kda_gguf_layers(m, g);
    ggm_set_num(m, "short_conv_kernel_size", ggm_count(m, "ssm.conv_kernel", 1, 0, NULL));
    if (ggm_num(m, "kda.safe_gate", 0, 1, NULL) == 0)
        ggm_fail(m, SL_EUNSUPPORTED, "'%s.kda.safe_gate' is false: only the bounded KDA gate is read", g->arch);
    ggm_set_bool(m, "kda_safe_gate", 1);
    ggm_set_num(m, "kda_lower_bound", ggm_num(m, "kda.gate_lower_bound", 1, 0, NULL));
    static const char *const clamp[2][2] = {{"swiglu_clamp_exp", "expert_swiglu_limit_list"},
                                            {"swiglu_clamp_shexp", "share_expert_swiglu_limit_list"}};
    for (int i = 0; i < 2; i++) {
        for (int l = 0; l < g->n_layers; l++) lim[l] = 0;
        ggm_layer_nums(m, clamp[i][0], g->n_layers, lim);
        ggm_set_nums(m, clamp[i][1], lim, g->n_layers);
    }
}

/* exp(A_log) back to A_log: arch_gguf_a_log's search on its negation (in place, element by element) */
static int64_t a_exp(const fam_config *c, const float *src, float *dst) {
    for (int64_t i = 0; i < c->lin_nv; i++) dst[i] = -src[i];
    return arch_gguf_a_log(c, dst, dst);
}

static const arch_gguf_xf gguf_xf[] = {
    ARCH_MLA_KV_B_XF,
    {"self_attn.A_log", {"ssm_a", NULL}, 0, NULL, a_exp},
};

static const char *const hf_types[] = {"bailing_hybrid", NULL};

const arch_desc arch_bailing_hybrid = {
    .id = SL_ARCH_BAILING_HYBRID, .name = "bailing_hybrid", .hf_types = hf_types,
    .router = SL_ROUTER_SIGMOID_GROUP, .qk_norm = SL_QK_NORM_NONE, .prf_default = 1.0,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_swiglu_parts, .n_parts = 3, .renames = renames,
    .expert_kind = SL_EXPERT_SWIGLU_CLIP,
    .shapes = shapes, .n_shapes = N_OF(shapes), .shape_config = shape_config,
    .gguf_arch = "bailingmoe3", .gguf_config = gguf_config, .gguf_xf = gguf_xf, .n_gguf_xf = N_OF(gguf_xf),
};
