/*
 * olmoe.c — OLMoE (allenai/OLMoE-1B-7B): Llama-style attention whose q/k RMSNorm runs over the whole
 * projection before the split into heads (q_norm [n_heads*head_dim], k_norm [n_kv_heads*head_dim];
 * transformers' modeling_olmoe.py OlmoeAttention), full RoPE, every layer a MoE of SwiGLU experts,
 * softmax -> top-k routing without renormalisation unless norm_topk_prob.
 */
#include "family/arch/common.h"

static void config(hfc *c, fam_config *o) {
    o->moe_inter = hfc_int(c, "intermediate_size", 1, 0); /* every layer is MoE: the experts' width */
    o->norm_topk = hfc_bool(c, "norm_topk_prob", 0);
    if (hfc_has(c, "clip_qkv")) hfc_fail(c, SL_EUNSUPPORTED, "clip_qkv is not supported (only null)");
    if ((int64_t)o->n_heads * o->head_dim != o->hidden)
        hfc_fail(c, SL_ECONFIG, "num_attention_heads x head_dim (%d x %d) must equal hidden_size (%d): q_norm "
                 "spans hidden_size", o->n_heads, o->head_dim, o->hidden);
    for (int i = 0; i < o->n_layers; i++) o->layer_moe[i] = 1;
}

static const arch_tdef tensors[] = {
    T_EMBED,
    T_IN_NORM, T_ATTN_QKVO,
    {"self_attn.q_norm", NULL, AW_ATTN, AD_Q, AD_NONE, AK_VEC, LW(q_norm), AR_BACKBONE, "attn_q_norm.weight"},
    {"self_attn.k_norm", NULL, AW_ATTN, AD_KV, AD_NONE, AK_VEC, LW(k_norm), AR_BACKBONE, "attn_k_norm.weight"},
    T_POST_NORM, T_ROUTER,
    T_HEAD,
};

/* allenai/OLMoE-1B-7B-0924 config.json */
static const arch_shape shapes[] = {
    {"olmoe-1b-7b", 50304, 2048, 16, 16, 16, 128, 64, 8, 1024, 0, 0, 0, 0, 0, 0, 4096, 1e4, 1.0, 0, 0, 0, 0, 0, 0, 0.0, 0, 0, 0.0, 0, 6.92e9},
};

/* GGUF (llama.cpp olmoe): every layer MoE, its width the experts'; no renormalisation unless expert_weights_norm */
static void gguf_config(ggm *m, arch_gguf_common *g) {
    ggm_set_num(m, "intermediate_size", ggm_moe_inter(m, g));
    ggm_set_bool(m, "norm_topk_prob", g->wnorm_found && g->wnorm != 0);
}

static const char *const hf_types[] = {"olmoe", NULL};

const arch_desc arch_olmoe = {
    .id = SL_ARCH_OLMOE, .name = "olmoe", .hf_types = hf_types,
    .router = SL_ROUTER_SOFTMAX_TOPK, .qk_norm = SL_QK_NORM_ALL, .prf_default = 1.0,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_swiglu_parts,
    .shapes = shapes, .n_shapes = N_OF(shapes), .gguf_config = gguf_config, .gguf_arch = "olmoe",
};
