/*
 * deepseek_v32.c — DeepSeek-V3.2 (model_type deepseek_v32: deepseek-ai/DeepSeek-V3.2, V3.2-Exp): DeepSeek-V3's
 * multi-head latent attention and MoE (deepseek_v3.c) with DeepSeek sparse attention (DSA): every layer's
 * lightning indexer scores the cached positions for each query and the attention reads only the index_topk best
 * (model/mla.c; transformers' src/transformers/models/deepseek_v32/modeling_deepseek_v32.py DeepseekV32Indexer,
 * DeepseekV32Attention, configuration_deepseek_v32.py). The indexer: index_n_heads queries of index_head_dim from
 * wq_b on the normed q_a output, one key from wk (LayerNorm k_norm with bias, eps 1e-6), RoPE on their first
 * qk_rope_head_dim dims (rotate-half here, adjacent pairs in GLM-5), score(p) = sum_h weights_proj_h(x) *
 * index_n_heads^-1/2 * relu(q_h . k_p * index_head_dim^-1/2). The main attention's RoPE is on adjacent pairs
 * (apply_rotary_pos_emb_interleave) with no rope_interleave key. The released checkpoints' multi-token-prediction
 * layer is not read; the reference's Hadamard rotation and FP8 scoring are precision devices transformers skips
 * (the rotation is orthogonal), and so does sluice.
 */
#include <string.h>

#include "family/arch/common.h"

/* index_topk, index_n_heads, index_head_dim; GLM-5's indexer_types ("full" / "shared": a shared layer reuses the
 * previous full layer's choice; when absent, transformers' schedule from index_topk_freq / index_skip_topk_offset,
 * all full by default); mlp_layer_types ("dense" / "sparse") where given over first_k_dense_replace. */
void arch_dsa_config(hfc *c, fam_config *o, int interleave) {
    o->dsa_topk = hfc_int(c, "index_topk", 1, 0);
    o->dsa_heads = hfc_int(c, "index_n_heads", 1, 0);
    o->dsa_dim = hfc_int(c, "index_head_dim", 1, 0);
    o->dsa_interleave = interleave;
    o->rope_interleave = 1; /* apply_rotary_pos_emb_interleave, whatever config.json says */
    if (o->dsa_topk < 1 || o->dsa_heads < 1 || o->dsa_heads > 4096 || o->dsa_dim < o->rot_dim || o->dsa_dim % 2 ||
        o->dsa_dim > 4096 || o->q_lora < 1)
        hfc_fail(c, SL_ECONFIG, "DSA: index_topk %d, index_n_heads %d, index_head_dim %d with q_lora_rank %d (need "
                 "positive ones, an even index_head_dim of at least qk_rope_head_dim %d, and q_lora_rank)", o->dsa_topk,
                 o->dsa_heads, o->dsa_dim, o->q_lora, o->rot_dim);
    if (!hfc_layer_flags(c, o, "indexer_types", "full", "shared", o->layer_dsa_shared)) {
        int freq = hfc_int(c, "index_topk_freq", 0, 1), off = hfc_int(c, "index_skip_topk_offset", 0, 2);
        if (freq < 1) freq = 1;
        for (int i = 0; i < o->n_layers; i++) o->layer_dsa_shared[i] = (i - off + 1 > 0 ? i - off + 1 : 0) % freq != 0;
    }
    if (o->layer_dsa_shared[0]) hfc_fail(c, SL_ECONFIG, "indexer_types[0] is 'shared': no earlier layer to share with");
    if (hfc_layer_flags(c, o, "mlp_layer_types", "dense", "sparse", o->layer_moe) && !o->dense_inter) {
        int dense = 0;
        for (int i = 0; i < o->n_layers; i++) dense |= !o->layer_moe[i];
        if (dense) o->dense_inter = hfc_int(c, "intermediate_size", 1, 0);
    }
}

static void config(hfc *c, fam_config *o) { arch_dsa_model_config(c, o, 0); }

/* DeepSeek-V3's MoE fields (norm_topk_prob, shared experts, groups, 3 first dense layers), MLA's and DSA's. */
void arch_dsa_model_config(hfc *c, fam_config *o, int interleave) {
    o->moe_inter = hfc_int(c, "moe_intermediate_size", 1, 0);
    o->norm_topk = hfc_bool(c, "norm_topk_prob", 1);
    o->shared_inter = hfc_product(c, "n_shared_experts", hfc_int(c, "n_shared_experts", 0, 1), o->moe_inter);
    arch_group_moe_config(c, o, 3);
    arch_mla_config(c, o);
    arch_dsa_config(c, o, interleave);
}

static const arch_tdef tensors[] = {T_DSA_MODEL};

/* deepseek-ai/DeepSeek-V3.2 config.json: DeepSeek-V3's dimensions (deepseek_v3.c) and an indexer of 64 heads of 128,
 * top 2048. The card's 685B counts the 14B multi-token-prediction module, as DeepSeek-V3's 671B + 14B does; without
 * it 671B, of which the indexers are 0.85B. */
static const arch_shape shapes[] = {
    {"deepseek-v3.2", 129280, 7168, 61, 128, 128, 192, 256, 8, 2048, 2048, 0, 0, 0, 0, 0, 163840, 10000, 1.0, 1, 0,
     18432, 3, 8, 4, 2.5, 0, 0, 0.0, 0, 671e9},
};

/* q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v 128; YaRN factor 40 from 4096 positions, beta
 * 32 / 1, mscale = mscale_all_dim = 1, as DeepSeek-V3. */
static void shape_config(const arch_shape *sh, fam_config *c) {
    (void)sh;
    c->rope_type = SL_ROPE_YARN;
    c->rope_factor = 40;
    c->rope_orig_max_pos = 4096;
    c->yarn_beta_fast = 32;
    c->yarn_beta_slow = 1;
    c->yarn_mscale = c->yarn_mscale_all_dim = 1.0;
    c->yarn_truncate = 1;
    arch_mla_shape(c, 1536, 512, 128, 64, 128);
    c->dsa_topk = 2048;
    c->dsa_heads = 64;
    c->dsa_dim = 128;
}

/* ---- GGUF (llama.cpp deepseek32 and glm-dsa: conversion/deepseek.py DeepseekV32Model, conversion/glm.py
 * GlmMoeDsaModel, both on DeepseekV2Model): MLA and the MoE as deepseek2 (deepseek_v3.c), the indexer's
 * attention.indexer.head_count / key_length / top_k; its tensors blk.N.indexer.{attn_q_b, attn_k, k_norm, proj}.
 * GLM's shared layers (attention.indexer.types) are those without indexer tensors. ---- */
void arch_dsa_gguf_config(ggm *m, arch_gguf_common *g) {
    arch_mla_gguf_config(m, g);
    ggm_set_num(m, "index_n_heads", ggm_count(m, "attention.indexer.head_count", 1, 0, NULL));
    ggm_set_num(m, "index_head_dim", ggm_count(m, "attention.indexer.key_length", 1, 0, NULL));
    ggm_set_num(m, "index_topk", ggm_count(m, "attention.indexer.top_k", 1, 0, NULL));
    static const char *const kinds[2] = {"shared", "full"};
    const char *types[SL_MAX_LAYERS];
    for (int l = 0; l < g->n_layers && l < SL_MAX_LAYERS; l++) types[l] = kinds[ggm_has(m, l, "indexer.proj.weight")];
    ggm_set_strs(m, "indexer_types", types, g->n_layers < SL_MAX_LAYERS ? g->n_layers : SL_MAX_LAYERS);
}

static const arch_gguf_xf gguf_xf[] = {
    ARCH_MLA_KV_B_XF,
};

static const char *const hf_types[] = {"deepseek_v32", NULL};

const arch_desc arch_deepseek_v32 = {
    .id = SL_ARCH_DEEPSEEK_V32, .name = "deepseek_v32", .hf_types = hf_types,
    .router = SL_ROUTER_SIGMOID_GROUP, .qk_norm = SL_QK_NORM_NONE, .prf_default = 1.0,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_swiglu_parts,
    .shapes = shapes, .n_shapes = N_OF(shapes), .shape_config = shape_config,
    .gguf_arch = "deepseek32", .gguf_config = arch_dsa_gguf_config, .gguf_xf = gguf_xf, .n_gguf_xf = N_OF(gguf_xf),
};
