/*
 * lfm2_moe.c — LFM2-MoE (LiquidAI/LFM2-8B-A1B; model_type lfm2_moe): transformers'
 * src/transformers/models/lfm2_moe/modeling_lfm2_moe.py and configuration_lfm2_moe.py.
 *
 * Layers are short convolutions or full attention as layer_types says ("conv" / "full_attention"). A short
 * convolution (model/deltanet.c short_conv, the short_conv op): in_proj [3H, H] into B | C | x, a causal depthwise
 * conv of conv_L_cache taps (conv.conv [H, 1, K], no bias) over B * x, times C, out_proj; its K - 1 last inputs are
 * the layer's state (the DeltaNet layers' conv slots). Attention: GQA, per-head q/k RMSNorm (q_layernorm,
 * k_layernorm) before RoPE, out_proj. Norms: operator_norm before the mixer, ffn_norm before the FFN, embedding_norm
 * at the end (norm_eps). FFN: the first num_dense_layers a SwiGLU MLP (w1 gate, w3 up, w2 down) of
 * intermediate_size, then experts of moe_intermediate_size (experts.N.w1 / w3 / w2, or fused gate_up_proj /
 * down_proj) chosen by sigmoid scores plus expert_bias (the choice only; SL_ROUTER_SIGMOID_GROUP with one group),
 * renormalised by their sum + 1e-6 (norm_topk_prob), times routed_scaling_factor. Not supported (refused):
 * conv_bias, use_expert_bias false.
 */
#include <stdio.h>
#include <string.h>

#include "family/arch/common.h"

static void config(hfc *c, fam_config *o) {
    o->moe_inter = hfc_int(c, "moe_intermediate_size", 1, 0);
    o->norm_topk = hfc_bool(c, "norm_topk_prob", 1);
    o->n_group = o->topk_group = 1;
    o->routed_scale = hfc_num(c, "routed_scaling_factor", 1.0, NULL);
    o->router_norm_eps = 1e-6;
    if (!hfc_bool(c, "use_expert_bias", 1)) hfc_fail(c, SL_EUNSUPPORTED, "use_expert_bias false is not supported");
    if (hfc_bool(c, "conv_bias", 0)) hfc_fail(c, SL_EUNSUPPORTED, "conv_bias is not supported");
    const int dense = hfc_int(c, "num_dense_layers", 0, 2);
    for (int l = 0; l < o->n_layers; l++) o->layer_moe[l] = l >= dense;
    if (dense > 0) o->dense_inter = hfc_int(c, "intermediate_size", 1, 0);
    o->eps = (float)hfc_num(c, "norm_eps", 1e-5, NULL);
    o->short_conv = 1;
    o->conv_k = hfc_int(c, "conv_L_cache", 0, 3);
    if (o->conv_k < 2) hfc_fail(c, SL_ECONFIG, "conv_L_cache must be >= 2");
    const int n = hfc_array_size(c, "layer_types");
    if (n != o->n_layers) hfc_fail(c, SL_ECONFIG, "layer_types must list num_hidden_layers kinds");
    for (int l = 0; l < o->n_layers && n == o->n_layers; l++) {
        char p[48];
        snprintf(p, sizeof p, "layer_types.%d", l);
        const char *t = hfc_path_str(c, p);
        if (!t || (strcmp(t, "conv") && strcmp(t, "full_attention")))
            hfc_fail(c, SL_ECONFIG, "layer_types[%d] must be conv or full_attention", l);
        o->layer_linear[l] = t && !strcmp(t, "conv");
    }
}

static const arch_tdef tensors[] = {
    T_EMBED,
    {"input_layernorm", "operator_norm", AW_EVERY, AD_H, AD_NONE, AK_VEC, LW(attn_norm), AR_BACKBONE, "attn_norm.weight"},
    {"self_attn.q_proj", NULL, AW_ATTN, AD_Q, AD_H, AK_MAT, LW(q), AR_BACKBONE, "attn_q.weight"},
    {"self_attn.k_proj", NULL, AW_ATTN, AD_KV, AD_H, AK_MAT, LW(k), AR_BACKBONE, "attn_k.weight"},
    {"self_attn.v_proj", NULL, AW_ATTN, AD_KV, AD_H, AK_MAT, LW(v), AR_BACKBONE, "attn_v.weight"},
    {"self_attn.o_proj", "self_attn.out_proj", AW_ATTN, AD_H, AD_Q, AK_MAT, LW(o), AR_BACKBONE, "attn_output.weight"},
    {"self_attn.q_norm", "self_attn.q_layernorm", AW_ATTN, AD_HD, AD_NONE, AK_VEC, LW(q_norm), AR_BACKBONE, "attn_q_norm.weight"},
    {"self_attn.k_norm", "self_attn.k_layernorm", AW_ATTN, AD_HD, AD_NONE, AK_VEC, LW(k_norm), AR_BACKBONE, "attn_k_norm.weight"},
    {"short_conv.in_proj", NULL, AW_LINEAR, AD_3H, AD_H, AK_MAT, LW(qkv), AR_BACKBONE, "shortconv.in_proj.weight"},
    {"linear_attn.conv1d", NULL, AW_LINEAR, AD_H, AD_CONVK, AK_VEC, LW(conv_w), AR_BACKBONE, "shortconv.conv.weight"},
    {"short_conv.out_proj", NULL, AW_LINEAR, AD_H, AD_H, AK_MAT, LW(lin_out), AR_BACKBONE, "shortconv.out_proj.weight"},
    {"post_attention_layernorm", "ffn_norm", AW_EVERY, AD_H, AD_NONE, AK_VEC, LW(ffn_norm), AR_BACKBONE, "ffn_norm.weight"},
    T_ROUTER,
    {"mlp.gate.e_score_correction_bias", "mlp.expert_bias", AW_MOE, AD_E, AD_NONE, AK_VEC, LW(router_bias), AR_BACKBONE, "exp_probs_b.bias"},
    {"mlp.gate_proj", "mlp.w1", AW_DENSE, AD_ID, AD_H, AK_MAT, LW(mlp_gate), AR_BACKBONE, "ffn_gate.weight"},
    {"mlp.up_proj", "mlp.w3", AW_DENSE, AD_ID, AD_H, AK_MAT, LW(mlp_up), AR_BACKBONE, "ffn_up.weight"},
    {"mlp.down_proj", "mlp.w2", AW_DENSE, AD_H, AD_ID, AK_MAT, LW(mlp_down), AR_BACKBONE, "ffn_down.weight"},
    {"norm", "embedding_norm", AW_GLOBAL, AD_H, AD_NONE, AK_VEC, GW(final_norm), AR_BACKBONE, "token_embd_norm.weight"},
    {"lm_head", NULL, AW_UNTIED, AD_V, AD_H, AK_MAT, GW(lm_head), AR_BACKBONE, "output.weight"},
};

/* conv.conv first: the kernel under the name whose [C, 1, K] layout the import flattens */
static const char *const renames[] = {"conv.conv", "linear_attn.conv1d", "conv.", "short_conv.", "feed_forward.", "mlp.",
                                      NULL};

static const char *const hf_types[] = {"lfm2_moe", NULL};

static void shape_config(const arch_shape *sh, fam_config *c) {
    (void)sh;
    static const int attn[] = {2, 6, 10, 14, 18, 21}; /* LFM2-8B-A1B's layer_types: 6 attention of 24 */
    for (int l = 0; l < c->n_layers; l++) c->layer_linear[l] = 1;
    for (size_t i = 0; i < sizeof attn / sizeof *attn; i++)
        if (attn[i] < c->n_layers) c->layer_linear[attn[i]] = 0;
    c->short_conv = 1;
    c->tie_embeddings = 1;
    c->conv_k = 3;
    c->router_norm_eps = 1e-6;
}

/* LiquidAI/LFM2-8B-A1B: hidden 2048, 24 layers (18 short-conv, 6 attention), 32 heads of 64 over 8 KV heads, the first
 * 2 layers dense of 7168, 32 experts of 1792 (top 4), vocab 65536 (tied): 8.3B parameters, 1.5B active (the model
 * card). */
static const arch_shape shapes[] = {
    {"LFM2-8B-A1B", 65536, 2048, 24, 32, 8, 64, 32, 4, 1792, 0, 0, 0, 0, 0, 0, 128000, 1e6, 1.0, 1, 0, 7168, 2, 1,
     1, 1.0, 1, 0, 0.0, 0, 8.3e9},
};

/* llama.cpp's lfm2moe GGUF (convert_hf_to_gguf.py conversion/lfm2.py LFM2MoeModel; the graph src/models/lfm2moe.cpp
 * and lfm2.cpp): attention.head_count_kv per layer, 0 for a short-conv layer; leading_dense_block_count dense layers;
 * shortconv.l_cache taps; conv.conv stored squeezed [H, K]; the final norm as token_embd_norm. The converter writes
 * no routed_scaling_factor and llama.cpp's graph always renormalises the chosen sigmoid scores and scales them by
 * expert_weights_scale, which it does not read for lfm2moe (0: no scaling): what the file means is a factor of 1
 * (LFM2-8B-A1B's own value), whatever the checkpoint it came from said. */
static void gguf_config(ggm *m, arch_gguf_common *g) {
    static const char *const kinds[] = {"conv", "full_attention"};
    const char *types[SL_MAX_LAYERS];
    double kvh[SL_MAX_LAYERS];
    if (!ggm_layer_nums(m, "attention.head_count_kv", g->n_layers, kvh))
        for (int l = 0; l < g->n_layers; l++) kvh[l] = 1; /* a scalar or none: every layer attends */
    for (int l = 0; l < g->n_layers; l++) types[l] = kinds[kvh[l] != 0];
    ggm_set_strs(m, "layer_types", types, g->n_layers);
    ggm_set_num(m, "conv_L_cache", ggm_count(m, "shortconv.l_cache", 1, 0, NULL));
    ggm_set_num(m, "norm_eps", ggm_num(m, "attention.layer_norm_rms_epsilon", 1, 0, NULL));
    ggm_set_num(m, "moe_intermediate_size", ggm_moe_inter(m, g));
    int dense = ggm_count(m, "leading_dense_block_count", 0, g->first_dense, NULL);
    if (dense != g->first_dense)
        ggm_fail(m, SL_ECONFIG, "leading_dense_block_count is %d but the first router is in layer %d", dense, g->l_moe);
    ggm_set_num(m, "num_dense_layers", dense);
    if (dense > 0 && g->ff_found) ggm_set_num(m, "intermediate_size", g->ff);
    ggm_set_bool(m, "norm_topk_prob", 1);
    ggm_set_num(m, "routed_scaling_factor", 1.0);
}

const arch_desc arch_lfm2_moe = {
    .id = SL_ARCH_LFM2_MOE, .name = "lfm2_moe", .hf_types = hf_types,
    .router = SL_ROUTER_SIGMOID_GROUP, .qk_norm = SL_QK_NORM_HEAD, .prf_default = 1.0,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_w13_parts, .renames = renames,
    .shapes = shapes, .n_shapes = N_OF(shapes), .shape_config = shape_config,
    .gguf_arch = "lfm2moe", .gguf_config = gguf_config,
};
