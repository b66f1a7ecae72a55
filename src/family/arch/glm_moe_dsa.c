/*
 * glm_moe_dsa.c — GLM-5 (model_type glm_moe_dsa: zai-org/GLM-5): DeepSeek-V3.2's architecture (deepseek_v32.c:
 * MLA with q_lora, DeepSeek sparse attention, DeepSeek-V3's sigmoid group router and shared expert) with two
 * differences, after transformers' src/transformers/models/glm_moe_dsa/modeling_glm_moe_dsa.py and
 * configuration_glm_moe_dsa.py: the indexer's RoPE rotates adjacent pairs (apply_rotary_pos_emb_interleave, as the
 * main attention), and a layer may have no indexer of its own (indexer_types "shared": GlmMoeDsaAttention reuses
 * the previous full layer's top-k choice, arXiv 2603.12201). The released checkpoint's multi-token-prediction
 * layer (layers.78) is not read.
 */
#include "family/arch/common.h"

static void config(hfc *c, fam_config *o) { arch_dsa_model_config(c, o, 1); }

static const arch_tdef tensors[] = {T_DSA_MODEL};

/* zai-org/GLM-5 (configuration_glm_moe_dsa.py's defaults are its config): 78 layers (3 dense of 12288), hidden
 * 6144, 64 heads, q_lora 2048, kv_lora 512, qk_nope 192, qk_rope 64, v 256, 256 experts of 2048 top-8 plus one
 * shared, an indexer of 32 heads of 128 choosing 2048, vocab 154880: 744B parameters (the model card), without the
 * MTP layer. rope_theta is a placeholder (synth measures bytes and FLOPs). */
static const arch_shape shapes[] = {
    {"glm-5", 154880, 6144, 78, 64, 64, 256, 256, 8, 2048, 2048, 0, 0, 0, 0, 0, 202752, 1e6, 1.0, 1, 0,
     12288, 3, 1, 1, 2.5, 0, 0, 0.0, 0, 744e9},
};

static void shape_config(const arch_shape *sh, fam_config *c) {
    (void)sh;
    arch_mla_shape(c, 2048, 512, 192, 64, 256);
    c->dsa_topk = 2048;
    c->dsa_heads = 32;
    c->dsa_dim = 128;
    c->dsa_interleave = 1;
}

static const arch_gguf_xf gguf_xf[] = {
    ARCH_MLA_KV_B_XF,
};

static const char *const hf_types[] = {"glm_moe_dsa", NULL};

const arch_desc arch_glm_moe_dsa = {
    .id = SL_ARCH_GLM_MOE_DSA, .name = "glm_moe_dsa", .hf_types = hf_types,
    .router = SL_ROUTER_SIGMOID_GROUP, .qk_norm = SL_QK_NORM_NONE, .prf_default = 1.0,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_swiglu_parts,
    .shapes = shapes, .n_shapes = N_OF(shapes), .shape_config = shape_config,
    .gguf_arch = "glm-dsa", .gguf_config = arch_dsa_gguf_config, .gguf_xf = gguf_xf, .n_gguf_xf = N_OF(gguf_xf),
};
