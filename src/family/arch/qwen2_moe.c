/*
 * qwen2_moe.c — Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): Llama-style attention with q/k/v biases
 * (qkv_bias, true in every release), no q/k norm, full RoPE; MoE layers of SwiGLU experts with softmax ->
 * top-k routing (renormalised only with norm_topk_prob) plus a shared expert scaled by sigmoid of its
 * gate (the same block as Qwen3-Next's); dense layers by mlp_only_layers / decoder_sparse_step.
 * transformers' modeling_qwen2_moe.py.
 */
#include "family/arch/common.h"

static void config(hfc *c, fam_config *o) {
    arch_qwen_moe_config(c, o); /* moe_intermediate_size, norm_topk_prob, sparse layers */
    o->shared_inter = hfc_int(c, "shared_expert_intermediate_size", 1, 0);
    o->attn_bias = hfc_bool(c, "qkv_bias", 1); /* 4.x checkpoints have no such field: always biased */
    /* configuration_qwen2_moe.py: the window is sliding_window when use_sliding_window, and layer_types, when the
     * config has none, slide at even layers below max_window_layers (only with use_sliding_window) */
    int use = hfc_bool(c, "use_sliding_window", 0);
    if (hfc_has(c, "layer_types")) {
        hfc_sliding_layers(c, o);
        for (int i = 0; i < o->n_layers && !use; i++)
            if (o->layer_sliding[i]) {
                hfc_fail(c, SL_ECONFIG, "layer_types[%d] is sliding_attention but use_sliding_window is false", i);
                break;
            }
    } else if (use) {
        int mwl = hfc_int(c, "max_window_layers", 0, 28);
        o->sliding_window = hfc_int(c, "sliding_window", 1, 0);
        if (o->sliding_window < 1) hfc_fail(c, SL_ECONFIG, "sliding_window must be >= 1 with use_sliding_window");
        for (int i = 0; i < o->n_layers; i++) o->layer_sliding[i] = i % 2 == 0 && i < mwl;
    }
}

static const arch_tdef tensors[] = {
    T_EMBED,
    T_IN_NORM, T_ATTN_QKVO,
    T_ATTN_QKV_BIAS,
    T_POST_NORM, T_ROUTER, T_SHARED_EXPERT, T_DENSE_MLP,
    T_HEAD,
};

/* Qwen/Qwen1.5-MoE-A2.7B and Qwen/Qwen2-57B-A14B config.json */
static const arch_shape shapes[] = {
    {"qwen1.5-moe-a2.7b", 151936, 2048, 24, 16, 16, 128, 60, 4, 1408, 5632, 0, 0, 0, 0, 0, 8192, 1e6, 1.0, 0, 1, 0, 0, 0, 0, 0.0, 0, 0, 0.0, 0, 14.3e9},
    {"qwen2-57b-a14b", 151936, 3584, 28, 28, 4, 128, 64, 8, 2560, 20480, 0, 0, 0, 0, 0, 32768, 1e6, 1.0, 0, 1, 0, 0, 0, 0, 0.0, 0, 0, 0.0, 0, 57.4e9},
};

/* GGUF (llama.cpp qwen2moe): top-k weights never renormalised unless expert_weights_norm says so; the shared
 * expert's width from expert_shared_feed_forward_length, else from ffn_gate_shexp */
static void gguf_config(ggm *m, arch_gguf_common *g) {
    ggm_set_num(m, "moe_intermediate_size", ggm_moe_inter(m, g));
    if (g->ff_found) ggm_set_num(m, "intermediate_size", g->ff);
    ggm_set_bool(m, "norm_topk_prob", g->wnorm_found && g->wnorm != 0);
    int sf = 0;
    double sh = ggm_num(m, "expert_shared_feed_forward_length", 0, 0, &sf);
    if (!sf && ggm_ne(m, g->l_moe, "ffn_gate_shexp.weight", 1) > 0)
        sh = (double)ggm_ne(m, g->l_moe, "ffn_gate_shexp.weight", 1), sf = 1;
    if (!sf) ggm_fail(m, SL_ECONFIG, "missing metadata key '%s.expert_shared_feed_forward_length'", g->arch);
    ggm_set_num(m, "shared_expert_intermediate_size", sh);
    ggm_set_bool(m, "qkv_bias", g->has_qbias);
}

static const char *const hf_types[] = {"qwen2_moe", NULL};

const arch_desc arch_qwen2_moe = {
    .id = SL_ARCH_QWEN2_MOE, .name = "qwen2_moe", .hf_types = hf_types,
    .router = SL_ROUTER_SOFTMAX_TOPK, .qk_norm = SL_QK_NORM_NONE, .prf_default = 1.0,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_swiglu_parts,
    .shapes = shapes, .n_shapes = N_OF(shapes), .gguf_config = gguf_config, .gguf_arch = "qwen2moe",
};
