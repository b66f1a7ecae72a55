/*
 * qwen3_moe.c — Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B): Llama-style attention with per-head q/k
 * RMSNorm, full RoPE, softmax -> top-k router with optional renormalisation (norm_topk_prob), dense
 * layers by mlp_only_layers / decoder_sparse_step; with use_sliding_window, sliding_window on every layer.
 * The math: docs/MATH.md (Config, Tensors, Decoder to Mixture of experts).
 */
#include "family/arch/common.h"

/* the SwiGLU expert parts every family so far uses */
const arch_pdef arch_swiglu_parts[3] = {
    {"gate_proj", NULL, AD_I, AD_H, EW(gate), AK_MAT, 0, "ffn_gate_exps.weight"},
    {"up_proj", NULL, AD_I, AD_H, EW(up), AK_MAT, 0, "ffn_up_exps.weight"},
    {"down_proj", NULL, AD_H, AD_I, EW(down), AK_MAT, 0, "ffn_down_exps.weight"},
};

void arch_qwen_moe_config(hfc *c, fam_config *o) {
    o->moe_inter = hfc_int(c, "moe_intermediate_size", 1, 0);
    o->norm_topk = hfc_bool(c, "norm_topk_prob", 0);
    hfc_sparse_layers(c, o);
}

/* configuration_qwen3_moe.py keeps sliding_window only with use_sliding_window; Qwen3MoeModel is MixtralModel
 * (modular_qwen3_moe.py), whose mask slides on every layer when the window is set. A window covering the
 * context is full attention. */
static void config(hfc *c, fam_config *o) {
    arch_qwen_moe_config(c, o);
    if (!hfc_bool(c, "use_sliding_window", 0) || !hfc_has(c, "sliding_window")) return;
    int w = hfc_int(c, "sliding_window", 1, 0);
    if (w < 1) hfc_fail(c, SL_ECONFIG, "sliding_window must be >= 1 with use_sliding_window");
    if (w < 1 || w >= o->max_pos) return;
    o->sliding_window = w;
    for (int i = 0; i < o->n_layers; i++) o->layer_sliding[i] = 1;
}

static const arch_tdef tensors[] = {
    T_EMBED,
    T_IN_NORM, T_ATTN_QKVO, T_QK_NORM_HEAD, T_POST_NORM, T_ROUTER, T_DENSE_MLP,
    T_HEAD,
};

static const arch_shape shapes[] = {
    {"qwen3-30b-a3b", 151936, 2048, 48, 32, 4, 128, 128, 8, 768, 0, 0, 0, 0, 0, 0, 40960, 1e6, 1.0, 1, 0, 0, 0, 0, 0, 0.0, 0, 0, 0.0, 0, 30.5e9},
    {"qwen3-235b-a22b", 151936, 4096, 94, 64, 4, 128, 128, 8, 1536, 0, 0, 0, 0, 0, 0, 40960, 1e6, 1.0, 1, 0, 0, 0, 0, 0, 0.0, 0, 0, 0.0, 0, 235.1e9},
    /* tests/test_wide.c: matrices >= 128 wide, experts 192 (a short step) */
    {"tiny-wide", 512, 256, 3, 4, 2, 64, 8, 2, 192, 0, 0, 0, 0, 0, 0, 4096, 1e6, 1.0, 1, 0, 0, 0, 0, 0, 0.0, 0, 0, 0.0, 0, 0},
};

/* GGUF (llama.cpp qwen3moe): llama.cpp renormalises the top-k weights unless expert_weights_norm says otherwise */
static void gguf_config(ggm *m, arch_gguf_common *g) {
    ggm_set_num(m, "moe_intermediate_size", ggm_moe_inter(m, g));
    if (g->ff_found) ggm_set_num(m, "intermediate_size", g->ff);
    ggm_set_bool(m, "norm_topk_prob", g->wnorm_found ? g->wnorm != 0 : 1);
}

static const char *const hf_types[] = {"qwen3_moe", NULL};

const arch_desc arch_qwen3_moe = {
    .id = SL_ARCH_QWEN3_MOE, .name = "qwen3_moe", .hf_types = hf_types,
    .router = SL_ROUTER_SOFTMAX_TOPK, .qk_norm = SL_QK_NORM_HEAD, .prf_default = 1.0,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_swiglu_parts,
    .shapes = shapes, .n_shapes = N_OF(shapes), .gguf_config = gguf_config, .gguf_arch = "qwen3moe",
};
