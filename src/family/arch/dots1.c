/*
 * dots1.c — dots.llm1 (model_type dots1: rednote-hilab/dots.llm1.base, dots.llm1.inst): Qwen3's attention
 * (per-head q/k RMSNorm, full RoPE, no biases) over DeepSeek-V3's MoE: the first first_k_dense_replace layers
 * dense SwiGLU MLPs (intermediate_size), the rest routed SwiGLU experts chosen by the sigmoid group router
 * (e_score_correction_bias for the choice only, n_group / topk_group, norm_topk_prob, routed_scaling_factor)
 * plus an ungated shared MLP of moe_intermediate_size * n_shared_experts. Sliding-window layers as
 * Dots1Config makes them: layer_types when given, else layer i slides when sliding_window is set and
 * i >= max_window_layers. transformers' models/dots1/modular_dots1.py (Dots1Attention = Qwen3Attention,
 * Dots1MoE = DeepseekV3MoE, Dots1Config.__post_init__).
 */
#include "family/arch/common.h"

static void config(hfc *c, fam_config *o) {
    o->moe_inter = hfc_int(c, "moe_intermediate_size", 1, 0);
    o->norm_topk = hfc_bool(c, "norm_topk_prob", 0);
    o->shared_inter = hfc_product(c, "n_shared_experts", hfc_int(c, "n_shared_experts", 1, 0), o->moe_inter);
    arch_group_moe_config(c, o, 0);
    if (hfc_has(c, "layer_types")) {
        hfc_sliding_layers(c, o);
        return;
    }
    int window = hfc_has(c, "sliding_window") ? hfc_int(c, "sliding_window", 1, 0) : 0; /* null: none */
    int from = hfc_int(c, "max_window_layers", 0, o->n_layers);
    int any = 0;
    for (int i = 0; i < o->n_layers; i++) any |= o->layer_sliding[i] = window > 0 && i >= from;
    if (any) o->sliding_window = window;
}

static const arch_tdef tensors[] = {
    T_EMBED,
    T_IN_NORM, T_ATTN_QKVO, T_QK_NORM_HEAD, T_POST_NORM, T_ROUTER,
    T_GROUP_MOE,
    T_DENSE_MLP,
    T_HEAD,
};

/* rednote-hilab/dots.llm1.inst: 62 layers (1 dense), hidden 4096, 32 heads of 128 (no GQA), 128 experts of
 * 1408 top-6 plus 2 shared, dense width 10944, vocab 152064: 142.8B parameters, 14B active (the model card:
 * 142B / 14B). Not read from the release's config.json (no network here): rope_theta, the router's constants
 * and the window are placeholders, which change nothing synth measures (bytes and FLOPs). */
static const arch_shape shapes[] = {
    {"dots.llm1", 152064, 4096, 62, 32, 32, 128, 128, 6, 1408, 2816, 0, 0, 0, 0, 0, 32768, 1e7, 1.0, 1, 0, 10944, 1, 1, 1, 2.5, 0, 0, 0.0, 0, 142e9},
};

/* GGUF (llama.cpp dots1: convert_hf_to_gguf.py Dots1Model, llama.cpp conversion/dots1.py, on Qwen2MoeModel): the
 * router's keys (expert_shared_count, expert_weights_scale, expert_weights_norm, expert_group_count /
 * _used_count, leading_dense_block_count), the tensors as Qwen3's and DeepSeek-V3's are named. The converter
 * writes no sliding window (llama.cpp runs every dots1 layer over the whole context): the import does the same. */
static void gguf_config(ggm *m, arch_gguf_common *g) { arch_group_moe_gguf_config(m, g); }

static const char *const hf_types[] = {"dots1", NULL};

const arch_desc arch_dots1 = {
    .id = SL_ARCH_DOTS1, .name = "dots1", .hf_types = hf_types,
    .router = SL_ROUTER_SIGMOID_GROUP, .qk_norm = SL_QK_NORM_HEAD, .prf_default = 1.0,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_swiglu_parts,
    .shapes = shapes, .n_shapes = N_OF(shapes), .gguf_arch = "dots1", .gguf_config = gguf_config,
};
