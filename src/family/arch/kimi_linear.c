/*
 * kimi_linear.c — Kimi Linear (model_type kimi_linear; moonshotai/Kimi-Linear-48B-A3B), after transformers'
 * src/transformers/models/kimi_linear/modeling_kimi_linear.py and configuration_kimi_linear.py (5.25):
 *   - linear_attention layers: Kimi Delta Attention (model/kda.c): q, k, v projections through one causal
 *     depthwise conv (three kernels on disk) and SiLU, q and k L2-normalised (q times dk^-1/2), a forget gate per
 *     channel g = -exp(A_log) softplus(f_b(f_a x) + dt_bias), beta = sigmoid(b_proj x), the delta rule with that
 *     per-key-dimension decay, RMSNorm per head times sigmoid(g_b(g_a x)), o_proj;
 *   - full_attention layers: multi-head latent attention without RoPE (mla.c with mla_nope: the qk_rope_head_dim
 *     part of q and of the shared key enters unrotated);
 *   - dense SwiGLU MLPs on the mlp_layer_types "dense" layers (first_k_dense_replace), else MoE: DeepSeek-V3's
 *     sigmoid group router with its score-correction bias, routed_scaling_factor, and a plain shared expert of
 *     moe_intermediate_size * num_shared_experts.
 * On disk: the release's names (block_sparse_moe.*, experts.N.w1/w2/w3, self_attn.q_conv1d ...); config.json with
 * the release's keys (num_experts_per_token, num_expert_group, moe_renormalize, num_shared_experts,
 * linear_attn_config) or transformers' own.
 */
#include <math.h>
#include <string.h>

#include "family/arch/common.h"

static int lin_kind(const char *s) {
    return !strcmp(s, "linear_attention") ? 1 : !strcmp(s, "full_attention") ? 0 : -1;
}
static int mlp_kind(const char *s) { return !strcmp(s, "sparse") ? 1 : !strcmp(s, "dense") ? 0 : -1; }

int arch_kda_layer_types(hfc *c, fam_config *o) { return hfc_strs(c, "layer_types", o->n_layers, o->layer_linear, lin_kind); }

void arch_kda_moe_config(hfc *c, fam_config *o, int groups_def, int topk_def, double scale_def, int dense_def) {
    const int n = o->n_layers;
    o->moe_inter = hfc_int(c, "moe_intermediate_size", 1, 0);
    const int ns = hfc_has(c, "num_shared_experts") ? hfc_int(c, "num_shared_experts", 0, 1)
                                                    : hfc_int(c, "n_shared_experts", 0, 1);
    o->shared_inter = hfc_product(c, "num_shared_experts", ns, o->moe_inter);
    o->norm_topk = hfc_has(c, "moe_renormalize") ? hfc_bool(c, "moe_renormalize", 1) : hfc_bool(c, "norm_topk_prob", 1);
    o->n_group = hfc_has(c, "num_expert_group") ? hfc_int(c, "num_expert_group", 0, groups_def)
                                                : hfc_int(c, "n_group", 0, groups_def);
    o->topk_group = hfc_int(c, "topk_group", 0, topk_def);
    o->routed_scale = hfc_num(c, "routed_scaling_factor", scale_def, NULL);
    if (!hfc_strs(c, "mlp_layer_types", n, o->layer_moe, mlp_kind)) {
        const int fd = hfc_int(c, "first_k_dense_replace", 0, dense_def);
        for (int l = 0; l < n; l++) o->layer_moe[l] = l >= fd;
    }
    for (int l = 0; l < n; l++)
        if (!o->layer_moe[l]) o->dense_inter = hfc_int(c, "intermediate_size", 1, 0);
    if (!cfg_groups_ok(o))
        hfc_fail(c, SL_ECONFIG, "num_expert_group %d, topk_group %d do not fit %d experts, %d per token", o->n_group,
                 o->topk_group, o->n_experts, o->n_experts_used);
}

/* layer_types, else linear_attn_config's 1-based full_attn_layers (else every 4th from layer 4) */
static void layer_kinds(hfc *c, fam_config *o) {
    const int n = o->n_layers;
    if (!arch_kda_layer_types(c, o)) {
        int full[SL_MAX_LAYERS] = {0}, got = hfc_sub_ints(c, "linear_attn_config", "full_attn_layers", n, full);
        for (int l = 0; l < n; l++) o->layer_linear[l] = !(l && l % 4 == 0);
        if (got > 0) {
            for (int l = 0; l < n; l++) o->layer_linear[l] = 1;
            for (int i = 0; i < got; i++)
                if (full[i] >= 1 && full[i] <= n) o->layer_linear[full[i] - 1] = 0;
        }
    }
}

/* the MoE by arch_kda_moe_config (mlp_layer_types, else the first first_k_dense_replace (1) dense) */
static void config(hfc *c, fam_config *o) {
    arch_kda_moe_config(c, o, 1, 1, 2.446, 1);
    /* MLA without RoPE */
    arch_mla_dims(c, o, 0);
    o->attn_scale = 1.0 / sqrt((double)o->head_dim);
    o->mla_nope = 1;
    if (o->n_kv_heads != o->n_heads)
        hfc_fail(c, SL_ECONFIG, "num_key_value_heads (%d) must equal num_attention_heads (%d) for MLA", o->n_kv_heads,
                 o->n_heads);
    /* Kimi Delta Attention: as many key as value heads, head_dim each */
    o->kda = 1;
    o->lin_nk = o->lin_nv = hfc_sub_int(c, "linear_attn_config", "num_heads", hfc_int(c, "linear_num_heads", 0, 32));
    o->lin_dk = o->lin_dv = hfc_sub_int(c, "linear_attn_config", "head_dim", hfc_int(c, "linear_head_dim", 0, 128));
    o->conv_k = hfc_sub_int(c, "linear_attn_config", "short_conv_kernel_size", hfc_int(c, "linear_conv_kernel_dim", 0, 4));
    layer_kinds(c, o);
}

/* a KDA tensor and its llama.cpp name (gguf-py tensor_mapping.py: SSM_CONV1D_Q, SSM_F_A, ...) */
#define KDA(name, f, rows, cols, kind, gg) {"self_attn." name, NULL, AW_LINEAR, rows, cols, kind, LW(f), AR_BACKBONE, gg}

static const arch_tdef tensors[] = {
    T_EMBED,
    T_IN_NORM,
    /* full attention: MLA */
    T_MLA,
    /* linear attention: KDA */
    KDA("q_proj", q, AD_NVDV, AD_H, AK_MAT, "attn_q.weight"), KDA("k_proj", k, AD_NVDV, AD_H, AK_MAT, "attn_k.weight"),
    KDA("v_proj", v, AD_NVDV, AD_H, AK_MAT, "attn_v.weight"),
    KDA("q_conv1d", conv_parts[0], AD_NVDV, AD_CONVK, AK_VEC, "ssm_conv1d_q.weight"),
    KDA("k_conv1d", conv_parts[1], AD_NVDV, AD_CONVK, AK_VEC, "ssm_conv1d_k.weight"),
    KDA("v_conv1d", conv_parts[2], AD_NVDV, AD_CONVK, AK_VEC, "ssm_conv1d_v.weight"),
    KDA("f_a_proj", kda_fa, AD_DV, AD_H, AK_MAT, "ssm_f_a.weight"), KDA("f_b_proj", kda_fb, AD_NVDV, AD_DV, AK_MAT, "ssm_f_b.weight"),
    KDA("g_a_proj", kda_ga, AD_DV, AD_H, AK_MAT, "ssm_g_a.weight"), KDA("g_b_proj", kda_gb, AD_NVDV, AD_DV, AK_MAT, "ssm_g_b.weight"),
    KDA("b_proj", b, AD_NV, AD_H, AK_MAT, "ssm_beta.weight"), KDA("A_log", A_log, AD_NV, AD_NONE, AK_VEC, NULL),
    KDA("dt_bias", dt_bias, AD_NVDV, AD_NONE, AK_VEC, "ssm_dt.bias"),
    KDA("o_norm", lin_norm, AD_DV, AD_NONE, AK_VEC, "ssm_norm.weight"),
    KDA("o_proj", lin_out, AD_H, AD_NVDV, AK_MAT, "attn_output.weight"),
    T_POST_NORM, T_ROUTER,
    T_GROUP_MOE,
    T_DENSE_MLP,
    T_HEAD,
};

static const char *const renames[] = {"block_sparse_moe.", "mlp.", NULL};

/* moonshotai/Kimi-Linear-48B-A3B-Instruct config.json: 27 layers (MLA at the 1-based full_attn_layers 4, 8, ..., 24,
 * 27, KDA elsewhere), the first dense; 49.1B parameters in the release's tensors (the card rounds them to 48B) */
static const arch_shape shapes[] = {
    {"kimi-linear-48b", 163840, 2304, 27, 32, 32, 192, 256, 8, 1024, 1024, 32, 32, 128, 128, 4, 1048576, 10000, 1.0,
     1, 0, 9216, 1, 1, 1, 2.446, 0, 0, 0.0, 0, 49.1e9},
};

static void shape_config(const arch_shape *sh, fam_config *c) {
    (void)sh;
    c->kv_lora = 512;
    c->qk_nope = 128;
    c->rot_dim = 64;
    c->v_head_dim = 128;
    c->head_dim = 192;
    c->attn_scale = 1.0 / sqrt(192.0);
    c->mla_nope = 1;
    c->kda = 1;
    c->conv_k = 4;
    for (int l = 0; l < c->n_layers; l++) c->layer_linear[l] = !((l + 1) % 4 == 0 || l == c->n_layers - 1);
}

/* ---- GGUF (llama.cpp kimi-linear: convert_hf_to_gguf.py conversion/kimi_linear.py KimiLinearModel;
 * src/models/kimi-linear.cpp) ----
 * MLA as deepseek2 writes it (arch_mla_gguf_config: key_length_mla / value_length_mla, kv_lora_rank, kv_b_proj split
 * into attn_k_b / attn_v_b); the layer kinds from attention.head_count_kv (0: a KDA layer); the KDA heads are
 * attention.head_count (llama.cpp's graph uses n_head for them) of kda.head_dim, the conv kernel ssm.conv_kernel.
 * What llama.cpp's graph fixes: top-k weights renormalised (build_moe_ffn's norm_w true: moe_renormalize, as the
 * release), no expert groups (the release has one), the MLA layers without RoPE (mla_nope, as the checkpoint);
 * expert_gating_func sigmoid (the release's moe_router_activation_func; family/gguf_meta.c refuses another).
 * Rewrites undone: A = -exp(A_log) (ssm_a, arch_gguf_a_log), dt_bias as ssm_dt.bias, the conv kernels as
 * [1, inner, 1, K] (the same values, import/hf_gguf.c). Not read: the release's tokenizer (tokenizer.ggml.pre
 * kimi-k2: tiktoken ranks without merges). */
void arch_kda_gguf_layers(ggm *m, arch_gguf_common *g) {
    static const char *const kinds[] = {"linear_attention", "full_attention"};
    const char *types[SL_MAX_LAYERS];
    double kvh[SL_MAX_LAYERS];
    if (!ggm_layer_nums(m, "attention.head_count_kv", g->n_layers, kvh))
        ggm_fail(m, SL_ECONFIG, "'%s.attention.head_count_kv' is not a per-layer list: the KDA layers are those with 0",
                 g->arch);
    for (int l = 0; l < g->n_layers; l++) types[l] = kinds[kvh[l] != 0];
    ggm_set_strs(m, "layer_types", types, g->n_layers);
}

static void gguf_config(ggm *m, arch_gguf_common *g) {
    arch_mla_gguf_config(m, g);
    ggm_set_bool(m, "moe_renormalize", 1);
    arch_kda_gguf_layers(m, g);
    ggm_set_num(m, "linear_num_heads", ggm_count(m, "attention.head_count", 1, 0, NULL));
    ggm_set_num(m, "linear_head_dim", ggm_count(m, "kda.head_dim", 1, 0, NULL));
    ggm_set_num(m, "linear_conv_kernel_dim", ggm_count(m, "ssm.conv_kernel", 1, 0, NULL));
}

static const arch_gguf_xf gguf_xf[] = {
    ARCH_MLA_KV_B_XF,
    {"self_attn.A_log", {"ssm_a", NULL}, 0, NULL, arch_gguf_a_log},
};

static const char *const hf_types[] = {"kimi_linear", NULL};

const arch_desc arch_kimi_linear = {
    .id = SL_ARCH_KIMI_LINEAR, .name = "kimi_linear", .hf_types = hf_types,
    .router = SL_ROUTER_SIGMOID_GROUP, .qk_norm = SL_QK_NORM_NONE, .prf_default = 1.0,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_w13_parts, .renames = renames,
    .shapes = shapes, .n_shapes = N_OF(shapes), .shape_config = shape_config,
    .gguf_arch = "kimi-linear", .gguf_config = gguf_config, .gguf_xf = gguf_xf, .n_gguf_xf = N_OF(gguf_xf),
};
