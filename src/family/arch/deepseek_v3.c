/*
 * deepseek_v3.c — DeepSeek-V3 / DeepSeek-R1 and Kimi-K2 (model_type deepseek_v3; Kimi-K2's own config.json says
 * kimi_k2 and names DeepseekV3ForCausalLM): multi-head latent attention (mla.c: q through q_a_proj,
 * q_a_layernorm, q_b_proj when q_lora_rank is set, else one q_proj; kv_a_proj_with_mqa to the compressed KV and
 * the RoPE key shared by all heads; kv_a_layernorm; kv_b_proj to per-head [nope key | value]; RoPE on
 * qk_rope_head_dim dims, on adjacent pairs when rope_interleave, the default); the first first_k_dense_replace
 * layers are dense SwiGLU MLPs (intermediate_size), the rest MoE: routed SwiGLU experts chosen by the sigmoid
 * group router (SL_ROUTER_SIGMOID_GROUP, as GLM-4.5) plus an ungated shared MLP of moe_intermediate_size *
 * n_shared_experts (mlp.shared_experts.*). transformers' src/transformers/models/deepseek_v3/modeling_deepseek_v3.py
 * and configuration_deepseek_v3.py. The released checkpoints' multi-token-prediction layer
 * (layers.num_hidden_layers, num_nextn_predict_layers) is not read; attention_bias = true is refused.
 */
#include <math.h>
#include <string.h>

#include "family/arch/common.h"
#include "family/rope.h"

/* DeepseekV3Attention.scaling: qk_head_dim ** -0.5, times yarn_get_mscale(factor, mscale_all_dim)^2 when the
 * rope type is not the default and mscale_all_dim is set (in double, as Python computes it). */
static double mla_scale(const fam_config *o) {
    double s = o->head_dim > 0 ? pow((double)o->head_dim, -0.5) : 0.0;
    if (o->rope_type == SL_ROPE_YARN && o->yarn_mscale_all_dim != 0) {
        double factor = o->rope_factor > 0 ? o->rope_factor : (double)o->max_pos / o->rope_orig_max_pos;
        double m = rope_yarn_mscale(factor, o->yarn_mscale_all_dim);
        s = s * m * m;
    }
    return s;
}

/* The MoE block of DeepSeek-V3 that GLM-4.5 and dots.llm1 reuse (modeling_deepseek_v3.py DeepseekV3MoE,
 * DeepseekV3TopkRouter): the sigmoid group router's n_group / topk_group / routed_scaling_factor, checked to
 * fit the experts, and the first first_k_dense_replace layers dense MLPs of intermediate_size. */
void arch_group_moe_config(hfc *c, fam_config *o, int first_dense_default) {
    o->n_group = hfc_int(c, "n_group", 0, 1);
    o->topk_group = hfc_int(c, "topk_group", 0, 1);
    o->routed_scale = hfc_num(c, "routed_scaling_factor", 1.0, NULL);
    int first_dense = hfc_int(c, "first_k_dense_replace", 0, first_dense_default);
    if (first_dense >= o->n_layers)
        hfc_fail(c, SL_ECONFIG, "first_k_dense_replace (%d) leaves no MoE layer of %d", first_dense, o->n_layers);
    for (int i = 0; i < o->n_layers; i++) o->layer_moe[i] = i >= first_dense;
    if (first_dense > 0) o->dense_inter = hfc_int(c, "intermediate_size", 1, 0);
    if (!cfg_groups_ok(o))
        hfc_fail(c, SL_ECONFIG, "n_group = %d, topk_group = %d, routed_scaling_factor = %g do not fit %d experts, %d "
                 "per token (groups of >= 2 dividing the experts, at most %d groups, %d experts)", o->n_group,
                 o->topk_group, o->routed_scale, o->n_experts, o->n_experts_used, SL_ROUTER_MAX_GROUPS,
                 SL_ROUTER_MAX_EXPERTS);
}

/* MLA's fields (DeepseekV3Attention; DeepSeek-V3.2 and GLM-5 share them). q_lora_rank null (or absent): one q_proj
 * (DeepSeek-V2-Lite's layout). */
void arch_mla_dims(hfc *c, fam_config *o, int q_lora_required) {
    o->q_lora = q_lora_required || hfc_has(c, "q_lora_rank") ? hfc_int(c, "q_lora_rank", 1, 0) : 0;
    o->kv_lora = hfc_int(c, "kv_lora_rank", 1, 0);
    o->qk_nope = hfc_int(c, "qk_nope_head_dim", 1, 0);
    o->rot_dim = hfc_int(c, "qk_rope_head_dim", 1, 0);
    o->v_head_dim = hfc_int(c, "v_head_dim", 1, 0);
    /* config.json's head_dim (transformers writes qk_rope_head_dim there) is not the query/key width */
    o->head_dim = o->qk_nope + o->rot_dim;
}

void arch_mla_config(hfc *c, fam_config *o) {
    arch_mla_dims(c, o, 0);
    o->rope_interleave = hfc_bool(c, "rope_interleave", 1);
    if (o->n_kv_heads != o->n_heads) /* transformers' repeat_kv would multiply the per-head keys */
        hfc_fail(c, SL_ECONFIG, "num_key_value_heads (%d) must equal num_attention_heads (%d) for MLA", o->n_kv_heads,
                 o->n_heads);
    if (o->q_lora < 0 || o->kv_lora < 1 || o->qk_nope < 0 || o->rot_dim < 2 || o->rot_dim % 2 || o->rot_dim > 1024 ||
        o->v_head_dim < 1)
        hfc_fail(c, SL_ECONFIG, "MLA dimensions q_lora_rank %d, kv_lora_rank %d, qk_nope_head_dim %d, qk_rope_head_dim "
                 "%d, v_head_dim %d (need kv_lora_rank, v_head_dim >= 1, an even qk_rope_head_dim in 2..1024)", o->q_lora,
                 o->kv_lora, o->qk_nope, o->rot_dim, o->v_head_dim);
    o->attn_scale = mla_scale(o);
}

static void config(hfc *c, fam_config *o) {
    o->moe_inter = hfc_int(c, "moe_intermediate_size", 1, 0);
    o->norm_topk = hfc_bool(c, "norm_topk_prob", 1);
    o->shared_inter = hfc_product(c, "n_shared_experts", hfc_int(c, "n_shared_experts", 0, 1), o->moe_inter);
    arch_group_moe_config(c, o, 0);
    arch_mla_config(c, o);
}

static const arch_tdef tensors[] = {
    T_EMBED,
    T_IN_NORM,
    T_MLA,
    T_POST_NORM, T_ROUTER,
    T_GROUP_MOE,
    T_DENSE_MLP,
    T_HEAD,
};

/* deepseek-ai/DeepSeek-V3 config.json (DeepSeek-R1 and V3.1 have its shape) and moonshotai/Kimi-K2-Instruct
 * config.json; head_dim is qk_nope + qk_rope; the MLA dimensions are in shape_config. */
static const arch_shape shapes[] = {
    {"deepseek-v3", 129280, 7168, 61, 128, 128, 192, 256, 8, 2048, 2048, 0, 0, 0, 0, 0, 163840, 10000, 1.0, 1, 0,
     18432, 3, 8, 4, 2.5, 0, 0, 0.0, 0, 671e9}, /* the card's 671B: without the MTP module */
    {"kimi-k2", 163840, 7168, 61, 64, 64, 192, 384, 8, 2048, 2048, 0, 0, 0, 0, 0, 131072, 50000, 1.0, 1, 0,
     18432, 1, 1, 1, 2.827, 0, 0, 0.0, 0, 1026.5e9}, /* Hugging Face's count */
};

/* Both releases: q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128,
 * rope_interleave (the default); YaRN rope_scaling from 4096 positions, mscale = mscale_all_dim = 1: factor 40,
 * beta_fast 32, beta_slow 1 (DeepSeek-V3), factor 32, beta_fast 1, beta_slow 1 (Kimi-K2). */
void arch_mla_shape(fam_config *c, int q_lora, int kv_lora, int nope, int rope, int v) {
    c->q_lora = q_lora;
    c->kv_lora = kv_lora;
    c->qk_nope = nope;
    c->rot_dim = rope;
    c->v_head_dim = v;
    c->head_dim = c->qk_nope + c->rot_dim;
    c->rope_interleave = 1;
    c->attn_scale = mla_scale(c);
}

static void shape_config(const arch_shape *sh, fam_config *c) {
    const int kimi = !strcmp(sh->name, "kimi-k2");
    c->rope_type = SL_ROPE_YARN;
    c->rope_factor = kimi ? 32 : 40;
    c->rope_orig_max_pos = 4096;
    c->yarn_beta_fast = kimi ? 1 : 32;
    c->yarn_beta_slow = 1;
    c->yarn_mscale = c->yarn_mscale_all_dim = 1.0;
    c->yarn_truncate = 1;
    arch_mla_shape(c, 1536, 512, 128, 64, 128);
}

/* ---- GGUF (llama.cpp deepseek2): convert_hf_to_gguf.py DeepseekV2Model (llama.cpp conversion/deepseek.py) writes
 * MLA as llama.cpp runs it: head_count_kv 1, key_length kv_lora + rope and value_length kv_lora (the compressed
 * cache), key_length_mla / value_length_mla the per-head widths; kv_b_proj split per head into attn_k_b (the nope
 * key rows, transposed: [heads][kv_lora][nope]) and attn_v_b ([heads][v][kv_lora]); the routing keys
 * (expert_gating_func from scoring_func, expert_weights_scale, expert_weights_norm only when true, groups);
 * YaRN with rope.scaling.yarn_log_multiplier = 0.1 * mscale_all_dim. What the file does not keep: mscale (taken
 * = mscale_all_dim, as both releases have it), rope_interleave (llama.cpp's deepseek2 always rotates adjacent
 * pairs: true), the multi-token-prediction layer (skipped by the converter). ---- */

void arch_mla_gguf_config(ggm *m, arch_gguf_common *g) {
    g->check_value_length = 0; /* key/value_length are the compressed cache's widths */
    const int heads = ggm_count(m, "attention.head_count", 1, 0, NULL);
    const int rope = ggm_count(m, "rope.dimension_count", 1, 0, NULL);
    const int kq = ggm_count(m, "attention.key_length_mla", 1, 0, NULL);
    ggm_set_num(m, "num_key_value_heads", heads);
    ggm_set_num(m, "head_dim", rope); /* as transformers writes it; the config hook takes nope + rope */
    ggm_set_num(m, "partial_rotary_factor", 1.0);
    ggm_set_num(m, "qk_rope_head_dim", rope);
    if (kq <= rope) ggm_fail(m, SL_ECONFIG, "'%s.attention.key_length_mla' (%d) leaves no nope dimension beside the %d "
                             "rotary ones", g->arch, kq, rope);
    ggm_set_num(m, "qk_nope_head_dim", kq - rope);
    ggm_set_num(m, "v_head_dim", ggm_count(m, "attention.value_length_mla", 1, 0, NULL));
    ggm_set_num(m, "kv_lora_rank", ggm_count(m, "attention.kv_lora_rank", 1, 0, NULL));
    int qf = 0, q = ggm_count(m, "attention.q_lora_rank", 0, 0, &qf);
    if (qf && q > 0) ggm_set_num(m, "q_lora_rank", q);
    ggm_set_bool(m, "rope_interleave", 1);
    int lf = 0;
    double lm = ggm_num(m, "rope.scaling.yarn_log_multiplier", 0, 0, &lf);
    if (lf) {
        ggm_set_num(m, "rope_parameters.mscale_all_dim", lm / 0.1);
        ggm_set_num(m, "rope_parameters.mscale", lm / 0.1);
    }
    arch_group_moe_gguf_config(m, g);
}

void arch_group_moe_gguf_config(ggm *m, arch_gguf_common *g) {
    ggm_set_num(m, "moe_intermediate_size", ggm_moe_inter(m, g));
    if (g->ff_found) ggm_set_num(m, "intermediate_size", g->ff);
    ggm_set_num(m, "n_shared_experts", ggm_num(m, "expert_shared_count", 0, 0, NULL));
    ggm_set_num(m, "routed_scaling_factor", ggm_num(m, "expert_weights_scale", 0, 1.0, NULL));
    ggm_set_bool(m, "norm_topk_prob", g->wnorm_found && g->wnorm != 0);
    ggm_set_num(m, "n_group", ggm_num(m, "expert_group_count", 0, 1, NULL));
    ggm_set_num(m, "topk_group", ggm_num(m, "expert_group_used_count", 0, 1, NULL));
    ggm_set_num(m, "first_k_dense_replace", ggm_num(m, "leading_dense_block_count", 0, g->first_dense, NULL));
}

static void gguf_config(ggm *m, arch_gguf_common *g) {
    arch_mla_gguf_config(m, g);
    if (ggm_num(m, "expert_gating_func", 0, 0, NULL) == 0 && !ggm_has(m, g->l_moe, "exp_probs_b.bias"))
        ggm_fail(m, SL_EUNSUPPORTED, "no expert_gating_func and no exp_probs_b: DeepSeek-V2's softmax routing, which "
                 "sluice does not serve (DeepSeek-V3 / Kimi-K2's sigmoid routing only)");
}

/* kv_b_proj [heads * (nope + v)][kv_lora] from attn_k_b [heads][kv_lora][nope] then attn_v_b [heads][v][kv_lora] */
int64_t arch_mla_kv_b(const fam_config *c, const float *src, float *dst) {
    const int64_t nh = c->n_heads, L = c->kv_lora, np = c->qk_nope, v = c->v_head_dim;
    const float *kb = src, *vb = src + nh * L * np;
    for (int64_t h = 0; h < nh; h++) {
        float *o = dst + h * (np + v) * L;
        for (int64_t i = 0; i < np; i++)
            for (int64_t l = 0; l < L; l++) o[i * L + l] = kb[(h * L + l) * np + i];
        for (int64_t i = 0; i < v; i++)
            for (int64_t l = 0; l < L; l++) o[(np + i) * L + l] = vb[(h * v + i) * L + l];
    }
    return -1;
}

static const arch_gguf_xf gguf_xf[] = {
    ARCH_MLA_KV_B_XF,
};

static const char *const hf_types[] = {"deepseek_v3", "kimi_k2", NULL};

const arch_desc arch_deepseek_v3 = {
    .id = SL_ARCH_DEEPSEEK_V3, .name = "deepseek_v3", .hf_types = hf_types,
    .router = SL_ROUTER_SIGMOID_GROUP, .qk_norm = SL_QK_NORM_NONE, .prf_default = 1.0,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_swiglu_parts,
    .shapes = shapes, .n_shapes = N_OF(shapes), .shape_config = shape_config,
    .gguf_arch = "deepseek2", .gguf_config = gguf_config, .gguf_xf = gguf_xf, .n_gguf_xf = N_OF(gguf_xf),
};
