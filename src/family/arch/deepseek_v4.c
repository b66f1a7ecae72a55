/*
 * deepseek_v4.c — DeepSeek-V4 (model_type deepseek_v4; DeepSeek-V4-Flash, DeepSeek-V4-Pro), after transformers'
 * src/transformers/models/deepseek_v4/modeling_deepseek_v4.py and configuration_deepseek_v4.py (5.25):
 *   - the residual is hc_mult streams; each block collapses them (a hyper-connection: sigmoid "pre" weights, an
 *     unweighted RMSNorm of the flattened streams through fn, "post" and a Sinkhorn-normalised "comb" that mixes
 *     the streams back with the block's output; model/hc.c); the last collapse is hc_head's;
 *   - attention (model/dsv4.c): q = q_b(rmsnorm(q_a x)) with a per-head unweighted norm, one KV head that is
 *     both key and value (kv_norm(kv_proj x)), RoPE on adjacent pairs of each head's last rot_dim dims, undone
 *     on the output; sinks; every layer sees the last sliding_window positions, and a compressed-sparse (CSA) or
 *     heavily-compressed (HCA) layer also sees compressed entries of its past (an indexer picks CSA's);
 *     the output projection grouped (o_a per group of heads, then o_b);
 *   - MoE on every layer: sqrt(softplus) scores, experts by top-k of score + bias or (hash layers) tid2eid[token];
 *     clamped SwiGLU experts (swiglu_limit) and one clamped shared expert of moe_intermediate_size.
 * On disk: DeepSeek's release names (attn.wq_a, ffn.experts.N.w1, hc_attn_fn, ...), which transformers'
 * conversion_mapping.py "deepseek_v4" renames and which its save_pretrained writes back; config.json either
 * transformers' (layer_types, mlp_layer_types, compress_rates, rope_parameters {main, compress}) or the release's
 * (compress_ratios, num_hash_layers, compress_rate_csa / _hca, qk_rope_head_dim, rope_scaling). The
 * multi-token-prediction module (mtp.*) is not read. GGUF: llama.cpp's deepseek4 (conversion/deepseek.py
 * DeepseekV4Model), gguf_config below and docs/FORMAT.md.
 */
#include <string.h>

#include "family/arch/common.h"

/* A layer's kind from transformers' layer_types string, or -1. */
static int kind_of(const char *s) {
    return !strcmp(s, "sliding_attention")              ? SL_CMP_NONE
           : !strcmp(s, "compressed_sparse_attention")  ? SL_CMP_CSA
           : !strcmp(s, "heavily_compressed_attention") ? SL_CMP_HCA
                                                        : -1;
}

static int mlp_kind(const char *s) { return !strcmp(s, "hash_moe") ? 1 : !strcmp(s, "moe") ? 0 : -1; }

/* layer_types, else compress_ratios (0 / csa_rate / hca_rate per layer), else transformers' default (two HCA
 * layers, then CSA and HCA alternating); mlp_layer_types, else the first num_hash_layers (3) hash layers. */
static void layer_kinds(hfc *c, fam_config *o) {
    const int n = o->n_layers;
    int got = hfc_strs(c, "layer_types", n, o->layer_compress, kind_of);
    if (!got && hfc_has(c, "compress_ratios")) {
        int r[SL_MAX_LAYERS];
        got = hfc_ints(c, "compress_ratios", n, r);
        for (int l = 0; got && l < n; l++) {
            o->layer_compress[l] = r[l] == 0 ? SL_CMP_NONE : r[l] == o->csa_rate ? SL_CMP_CSA : SL_CMP_HCA;
            if (r[l] != 0 && r[l] != o->csa_rate && r[l] != o->hca_rate)
                hfc_fail(c, SL_ECONFIG, "compress_ratios[%d] = %d is neither 0 nor a compression rate (%d, %d)", l, r[l],
                         o->csa_rate, o->hca_rate);
        }
    }
    for (int l = 0; !got && l < n; l++) o->layer_compress[l] = l < 2 || (l - 2) % 2 == 0 ? SL_CMP_HCA : SL_CMP_CSA;
    if (!hfc_strs(c, "mlp_layer_types", n, o->layer_hash, mlp_kind)) {
        int nh = hfc_int(c, "num_hash_layers", 0, 3);
        for (int l = 0; l < n; l++) o->layer_hash[l] = l < nh;
    }
    for (int l = 0; l < n; l++) o->layer_sliding[l] = 1;
}

static void config(hfc *c, fam_config *o) {
    o->moe_inter = hfc_int(c, "moe_intermediate_size", 1, 0);
    if (hfc_int(c, "n_shared_experts", 0, 1) != 1)
        hfc_fail(c, SL_EUNSUPPORTED, "n_shared_experts must be 1 (transformers' DeepseekV4MLP is one expert)");
    o->shared_inter = o->moe_inter; /* DeepseekV4MLP reads intermediate_size = moe_intermediate_size */
    o->norm_topk = 1;
    o->routed_scale = hfc_num(c, "routed_scaling_factor", 1.5, NULL);
    const char *sf = hfc_str(c, "scoring_func");
    if (sf && strcmp(sf, "sqrtsoftplus"))
        hfc_fail(c, SL_EUNSUPPORTED, "scoring_func '%s' (only sqrtsoftplus, DeepSeek-V4's)", sf);
    o->q_lora = hfc_int(c, "q_lora_rank", 1, 0);
    if (hfc_has(c, "qk_rope_head_dim") && !hfc_has(c, "partial_rotary_factor"))
        o->rot_dim = hfc_int(c, "qk_rope_head_dim", 1, 0);
    o->hc_mult = hfc_int(c, "hc_mult", 0, 4);
    o->hc_iters = hfc_int(c, "hc_sinkhorn_iters", 0, 20);
    o->hc_eps = hfc_num(c, "hc_eps", 1e-6, NULL);
    o->o_groups = hfc_int(c, "o_groups", 0, 8);
    o->o_lora = hfc_int(c, "o_lora_rank", 0, 1024);
    o->idx_heads = hfc_int(c, "index_n_heads", 0, 64);
    o->idx_dim = hfc_int(c, "index_head_dim", 0, 128);
    o->idx_topk = hfc_int(c, "index_topk", 0, 512);
    o->swiglu_limit = hfc_num(c, "swiglu_limit", 10.0, NULL);
    o->sliding_window = hfc_int(c, "sliding_window", 0, 128);
    o->csa_rate = hfc_int(c, "compress_rate_csa", 0, 4);
    o->hca_rate = hfc_int(c, "compress_rate_hca", 0, 128);
    o->csa_rate = hfc_sub_int(c, "compress_rates", "compressed_sparse_attention", o->csa_rate);
    o->hca_rate = hfc_sub_int(c, "compress_rates", "heavily_compressed_attention", o->hca_rate);
    o->rope_theta_c = hfc_num(c, "compress_rope_theta", 160000.0, NULL);
    hfc_rope_sub(c, "compress", o); /* transformers' nested rope_parameters: the compressed branches' YaRN */
    layer_kinds(c, o);
    if (o->n_kv_heads != 1) hfc_fail(c, SL_ECONFIG, "num_key_value_heads must be 1 (one KV head, key and value)");
    if (!cfg_dsv4_ok(o))
        hfc_fail(c, SL_ECONFIG, "DeepSeek-V4 dimensions do not fit: hc_mult %d, o_groups %d of %d heads, rates %d / %d, "
                 "indexer %d x %d top %d, rope dims %d, sliding_window %d", o->hc_mult, o->o_groups, o->n_heads,
                 o->csa_rate, o->hca_rate, o->idx_heads, o->idx_dim, o->idx_topk, o->rot_dim, o->sliding_window);
}

/* g: the GGUF name (llama.cpp gguf-py constants.py MODEL_ARCH.DEEPSEEK4) without ".weight" */
#define LV(name, disk, when, rows, cols, f, g) {name, disk, when, rows, cols, AK_VEC, LW(f), AR_BACKBONE, g ".weight"}
#define LM(name, disk, when, rows, cols, f, role, g) {name, disk, when, rows, cols, AK_MAT, LW(f), role, g ".weight"}
/* the hyper-connection mixer of the attention (k attn, i 0) or the FFN (ffn, 1): fn, base, scale */
#define LHC(k, i)                                                                                    \
    LM(#k "_hc.fn", "hc_" #k "_fn", AW_EVERY, AD_HCMIX, AD_HCH, hc_fn[i], AR_ROUTER, "hc_" #k "_fn"),    \
    LV(#k "_hc.base", "hc_" #k "_base", AW_EVERY, AD_HCMIX, AD_NONE, hc_base[i], "hc_" #k "_base"),      \
    LV(#k "_hc.scale", "hc_" #k "_scale", AW_EVERY, AD_3, AD_NONE, hc_scale[i], "hc_" #k "_scale")

static const arch_tdef tensors[] = {
    {"embed_tokens", NULL, AW_GLOBAL, AD_V, AD_H, AK_MAT, GW(embed), AR_BACKBONE, "token_embd.weight"},
    LV("input_layernorm", "attn_norm", AW_EVERY, AD_H, AD_NONE, attn_norm, "attn_norm"),
    LV("post_attention_layernorm", "ffn_norm", AW_EVERY, AD_H, AD_NONE, ffn_norm, "ffn_norm"),
    LHC(attn, 0),
    LHC(ffn, 1),
    LM("self_attn.q_a_proj", "attn.wq_a", AW_EVERY, AD_QLORA, AD_H, q_a, AR_BACKBONE, "attn_q_a"),
    LV("self_attn.q_a_norm", "attn.q_norm", AW_EVERY, AD_QLORA, AD_NONE, q_a_norm, "attn_q_a_norm"),
    LM("self_attn.q_b_proj", "attn.wq_b", AW_EVERY, AD_Q, AD_QLORA, q_b, AR_BACKBONE, "attn_q_b"),
    LM("self_attn.kv_proj", "attn.wkv", AW_EVERY, AD_HD, AD_H, k, AR_BACKBONE, "attn_kv"),
    LV("self_attn.kv_norm", "attn.norm", AW_EVERY, AD_HD, AD_NONE, k_norm, "attn_kv_a_norm"),
    LM("self_attn.o_a_proj", "attn.wo_a", AW_EVERY, AD_OA, AD_OAIN, o_a, AR_BACKBONE, "attn_output_a"),
    LM("self_attn.o_b_proj", "attn.wo_b", AW_EVERY, AD_H, AD_OA, o, AR_BACKBONE, "attn_output_b"),
    LV("self_attn.sinks", "attn.attn_sink", AW_EVERY, AD_NH, AD_NONE, sinks, "attn_sinks"),
    /* the compressor: CSA's projects two series (2 * head_dim), HCA's one */
    LM("self_attn.compressor.kv_proj", "attn.compressor.wkv", AW_CSA, AD_2HD, AD_H, cmp_kv, AR_ROUTER,
       "attn_compressor_kv"),
    LM("self_attn.compressor.gate_proj", "attn.compressor.wgate", AW_CSA, AD_2HD, AD_H, cmp_gate, AR_ROUTER,
       "attn_compressor_gate"),
    LV("self_attn.compressor.position_bias", "attn.compressor.ape", AW_CSA, AD_CSAR, AD_2HD, cmp_ape,
       "attn_compressor_ape"),
    LM("self_attn.compressor.kv_proj", "attn.compressor.wkv", AW_HCA, AD_HD, AD_H, cmp_kv, AR_ROUTER,
       "attn_compressor_kv"),
    LM("self_attn.compressor.gate_proj", "attn.compressor.wgate", AW_HCA, AD_HD, AD_H, cmp_gate, AR_ROUTER,
       "attn_compressor_gate"),
    LV("self_attn.compressor.position_bias", "attn.compressor.ape", AW_HCA, AD_HCAR, AD_HD, cmp_ape,
       "attn_compressor_ape"),
    LV("self_attn.compressor.kv_norm", "attn.compressor.norm", AW_CMP, AD_HD, AD_NONE, cmp_norm,
       "attn_compressor_norm"),
    LM("self_attn.compressor.indexer.kv_proj", "attn.indexer.compressor.wkv", AW_CSA, AD_2IDXD, AD_H, idx_kv, AR_ROUTER,
       "indexer_compressor_kv"),
    LM("self_attn.compressor.indexer.gate_proj", "attn.indexer.compressor.wgate", AW_CSA, AD_2IDXD, AD_H, idx_gate,
       AR_ROUTER, "indexer_compressor_gate"),
    LV("self_attn.compressor.indexer.position_bias", "attn.indexer.compressor.ape", AW_CSA, AD_CSAR, AD_2IDXD, idx_ape,
       "indexer_compressor_ape"),
    LV("self_attn.compressor.indexer.kv_norm", "attn.indexer.compressor.norm", AW_CSA, AD_IDXD, AD_NONE, idx_norm,
       "indexer_compressor_norm"),
    LM("self_attn.compressor.indexer.q_b_proj", "attn.indexer.wq_b", AW_CSA, AD_IDXQ, AD_QLORA, idx_q_b, AR_ROUTER,
       "indexer.attn_q_b"),
    LM("self_attn.compressor.indexer.scorer.weights_proj", "attn.indexer.weights_proj", AW_CSA, AD_IDXH, AD_H, idx_w,
       AR_ROUTER, "indexer.proj"),
    LM("mlp.gate", NULL, AW_MOE, AD_E, AD_H, router, AR_ROUTER, "ffn_gate_inp"),
    {"mlp.gate.e_score_correction_bias", "mlp.gate.bias", AW_TOPK, AD_E, AD_NONE, AK_VEC, LW(router_bias), AR_BACKBONE,
     "exp_probs_b.bias"},
    LV("mlp.gate.tid2eid", NULL, AW_HASH, AD_V, AD_K, tid2eid, "ffn_gate_tid2eid"),
    LM("mlp.shared_experts.gate_proj", "mlp.shared_experts.w1", AW_MOE, AD_IS, AD_H, sh_gate, AR_BACKBONE,
       "ffn_gate_shexp"),
    LM("mlp.shared_experts.up_proj", "mlp.shared_experts.w3", AW_MOE, AD_IS, AD_H, sh_up, AR_BACKBONE, "ffn_up_shexp"),
    LM("mlp.shared_experts.down_proj", "mlp.shared_experts.w2", AW_MOE, AD_H, AD_IS, sh_down, AR_BACKBONE,
       "ffn_down_shexp"),
    {"hc_head.hc_fn", NULL, AW_GLOBAL, AD_HC, AD_HCH, AK_MAT, GW(hc_head_fn), AR_ROUTER, "output_hc_fn.weight"},
    {"hc_head.hc_base", NULL, AW_GLOBAL, AD_HC, AD_NONE, AK_VEC, GW(hc_head_base), AR_BACKBONE, "output_hc_base.weight"},
    {"hc_head.hc_scale", NULL, AW_GLOBAL, AD_ONE, AD_NONE, AK_VEC, GW(hc_head_scale), AR_BACKBONE, "output_hc_scale.weight"},
    {"norm", NULL, AW_GLOBAL, AD_H, AD_NONE, AK_VEC, GW(final_norm), AR_BACKBONE, "output_norm.weight"},
    {"lm_head", NULL, AW_UNTIED, AD_V, AD_H, AK_MAT, GW(lm_head), AR_BACKBONE, "output.weight"},
};

/* the release's per-expert w1 (gate), w3 (up), w2 (down); transformers' own fused gate_up_proj reads too */
static const arch_pdef parts[3] = {
    {"gate_proj", "w1", AD_I, AD_H, EW(gate), AK_MAT, 0, "ffn_gate_exps.weight"},
    {"up_proj", "w3", AD_I, AD_H, EW(up), AK_MAT, 0, "ffn_up_exps.weight"},
    {"down_proj", "w2", AD_H, AD_I, EW(down), AK_MAT, 0, "ffn_down_exps.weight"},
};

static const char *const renames[] = {"ffn.", "mlp.", NULL};

/* deepseek-ai/DeepSeek-V4-Flash (configuration_deepseek_v4.py's defaults are its dimensions: the card's 284B total,
 * 13B active; without the multi-token-prediction module); tiny-dsv4 a test shape. */
static const arch_shape shapes[] = {
    {"deepseek-v4-flash", 129280, 4096, 43, 64, 1, 512, 256, 6, 2048, 2048, 0, 0, 0, 0, 0, 1048576, 10000, 0.125, 1, 0,
     0, 0, 0, 0, 1.5, 0, 128, 16.0, 65536, 284e9},
    {"tiny-dsv4", 256, 64, 3, 4, 1, 16, 8, 2, 16, 16, 0, 0, 0, 0, 0, 4096, 10000, 0.5, 1, 0, 0, 0, 0, 0, 1.5, 0, 8, 0.0,
     0, 0},
};

/* Flash: q_lora 1024, output 8 groups of 1024, indexer 64 x 128 keeping 512, hyper-connections of 4 streams (20
 * Sinkhorn steps), layers 0 and 1 sliding only, then CSA (rate 4) on even and HCA (rate 128) on odd layers, the
 * first 3 hash-routed, YaRN (factor 16 of 65536) on the compressed branches at theta 160000. tiny-dsv4: 2 streams,
 * layers HCA, CSA, sliding; one hash layer. */
static void shape_config(const arch_shape *sh, fam_config *c) {
    const int flash = !strcmp(sh->name, "deepseek-v4-flash");
    c->q_lora = flash ? 1024 : 32;
    c->hc_mult = flash ? 4 : 2;
    c->hc_iters = 20;
    c->hc_eps = 1e-6;
    c->o_groups = flash ? 8 : 2;
    c->o_lora = flash ? 1024 : 16;
    c->csa_rate = 4;
    c->hca_rate = flash ? 128 : 16;
    c->idx_heads = flash ? 64 : 2;
    c->idx_dim = flash ? 128 : 16;
    c->idx_topk = flash ? 512 : 8;
    c->swiglu_limit = 10.0;
    c->rope_theta_c = 160000.0;
    c->rope_attn_factor = flash ? 1.0 : 0.0; /* transformers forces attention_factor 1 on the YaRN compress table */
    c->shared_inter = c->moe_inter;
    for (int l = 0; l < c->n_layers; l++) {
        c->layer_sliding[l] = 1;
        c->layer_moe[l] = 1;
        if (flash) c->layer_compress[l] = l < 2 ? SL_CMP_NONE : l % 2 == 0 ? SL_CMP_CSA : SL_CMP_HCA;
        else c->layer_compress[l] = l % 3 == 0 ? SL_CMP_HCA : l % 3 == 1 ? SL_CMP_CSA : SL_CMP_NONE;
        c->layer_hash[l] = l < (flash ? 3 : 1);
    }
}

/* The layer kinds of llama.cpp's deepseek4 file: attention.compress_ratios per layer (0 sliding only; 4 CSA, the one
 * rate with an indexer in llama.cpp's loader, src/models/deepseek4.cpp load_arch_tensors; any other rate HCA, one
 * rate for every HCA layer), the first hash_layer_count layers routed by ffn_gate_tid2eid. */
static void gguf_layer_kinds(ggm *m, arch_gguf_common *g) {
    const char *types[SL_MAX_LAYERS], *mlp[SL_MAX_LAYERS];
    double r[SL_MAX_LAYERS];
    int hca = 0, csa = 0;
    if (!ggm_layer_nums(m, "attention.compress_ratios", g->n_layers, r))
        ggm_fail(m, SL_ECONFIG, "'%s.attention.compress_ratios' is missing", g->arch);
    const int nh = ggm_count(m, "hash_layer_count", 1, 0, NULL);
    for (int l = 0; l < g->n_layers; l++) {
        const int v = (int)r[l];
        if (v != r[l] || v < 0 || (v && v != 4 && hca && v != hca))
            ggm_fail(m, SL_EUNSUPPORTED, "'%s.attention.compress_ratios'[%d] = %g: sluice takes 0, 4 (CSA) and one "
                     "other rate for every HCA layer", g->arch, l, r[l]);
        if (v && v != 4) hca = v;
        csa |= v == 4;
        types[l] = v == 0 ? "sliding_attention" : v == 4 ? "compressed_sparse_attention" : "heavily_compressed_attention";
        mlp[l] = l < nh ? "hash_moe" : "moe";
    }
    ggm_set_strs(m, "layer_types", types, g->n_layers);
    ggm_set_strs(m, "mlp_layer_types", mlp, g->n_layers);
    ggm_set_num(m, "compress_rates.compressed_sparse_attention", 4);
    ggm_set_num(m, "compress_rates.heavily_compressed_attention", hca ? hca : 128);
    ggm_set_num(m, "index_n_heads", ggm_count(m, "attention.indexer.head_count", csa, 64, NULL));
    ggm_set_num(m, "index_head_dim", ggm_count(m, "attention.indexer.key_length", csa, 128, NULL));
    ggm_set_num(m, "index_topk", ggm_count(m, "attention.indexer.top_k", csa, 512, NULL));
}

/* One limit for every layer's routed and shared experts (swiglu_clamp_exp / _shexp: block_count values, the
 * converter writes swiglu_limit to each): sluice's config has one swiglu_limit. */
static void gguf_swiglu(ggm *m, arch_gguf_common *g) {
    double e[SL_MAX_LAYERS], s[SL_MAX_LAYERS];
    if (!ggm_layer_nums(m, "swiglu_clamp_exp", g->n_layers, e))
        ggm_fail(m, SL_ECONFIG, "'%s.swiglu_clamp_exp' is missing", g->arch);
    if (!ggm_layer_nums(m, "swiglu_clamp_shexp", g->n_layers, s)) memcpy(s, e, sizeof s);
    for (int l = 0; l < g->n_layers; l++)
        if (e[l] != e[0] || s[l] != e[0])
            ggm_fail(m, SL_EUNSUPPORTED, "'%s.swiglu_clamp_exp' / '_shexp' differ between layers or experts (layer %d: "
                     "%g / %g; sluice takes one swiglu_limit, %g)", g->arch, l, e[l], s[l], e[0]);
    ggm_set_num(m, "swiglu_limit", e[0]);
}

/* llama.cpp's deepseek4 (conversion/deepseek.py DeepseekV4Model, src/models/deepseek4.cpp): the keys named after
 * transformers' config fields; the YaRN of rope.scaling.* is the compressed branches' (llama.cpp applies it only
 * where compress_ratios is non-zero, as model/dsv4.c does) with magnitude 1 (dsv4_rope_attn_factor cancels ggml's
 * YaRN scale); routed top-k always renormalised and the hyper-connection post gate 2 (sluice's only ones); the
 * multi-token-prediction blocks (nextn_predict_layers) are not read; a vision variant's exp_probs_b_vl neither. */
static void gguf_config(ggm *m, arch_gguf_common *g) {
    int f = 0;
    ggm_set_num(m, "moe_intermediate_size", ggm_moe_inter(m, g));
    ggm_set_num(m, "n_shared_experts", ggm_count(m, "expert_shared_count", 0, 1, NULL));
    ggm_set_num(m, "routed_scaling_factor", ggm_num(m, "expert_weights_scale", 0, 1.0, NULL));
    if (g->wnorm_found && !g->wnorm)
        ggm_fail(m, SL_EUNSUPPORTED, "'%s.expert_weights_norm' is false: DeepSeek-V4 renormalises its top-k", g->arch);
    ggm_set_str(m, "scoring_func", "sqrtsoftplus");
    ggm_set_num(m, "q_lora_rank", ggm_count(m, "attention.q_lora_rank", 1, 0, NULL));
    ggm_set_num(m, "sliding_window", ggm_count(m, "attention.sliding_window", 1, 0, NULL));
    ggm_set_num(m, "o_groups", ggm_count(m, "attention.output_group_count", 1, 0, NULL));
    ggm_set_num(m, "o_lora_rank", ggm_count(m, "attention.output_lora_rank", 1, 0, NULL));
    ggm_set_num(m, "compress_rope_theta", ggm_num(m, "attention.compress_rope_freq_base", 1, 0, NULL));
    ggm_set_num(m, "hc_mult", ggm_count(m, "hyper_connection.count", 1, 0, NULL));
    ggm_set_num(m, "hc_sinkhorn_iters", ggm_count(m, "hyper_connection.sinkhorn_iterations", 1, 0, NULL));
    ggm_set_num(m, "hc_eps", ggm_num(m, "hyper_connection.epsilon", 1, 0, NULL));
    const double mag = ggm_num(m, "hyper_connection.magnitude", 0, 2.0, NULL);
    if (mag != 2.0)
        ggm_fail(m, SL_EUNSUPPORTED, "'%s.hyper_connection.magnitude' is %g (DeepSeek-V4's post gate is 2)", g->arch, mag);
    ggm_count(m, "hyper_connection.low_rank", 0, 0, &f);
    if (f) ggm_fail(m, SL_EUNSUPPORTED, "'%s.hyper_connection.low_rank': a low-rank mix is not DeepSeek-V4's", g->arch);
    ggm_set_num(m, "rope_parameters.attention_factor", 1.0);
    gguf_layer_kinds(m, g);
    gguf_swiglu(m, g);
}

static const char *const hf_types[] = {"deepseek_v4", NULL};

const arch_desc arch_deepseek_v4 = {
    .id = SL_ARCH_DEEPSEEK_V4, .name = "deepseek_v4", .hf_types = hf_types,
    .router = SL_ROUTER_SQRTSOFTPLUS, .qk_norm = SL_QK_NORM_NONE, .prf_default = 0.125,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = parts, .renames = renames,
    .expert_kind = SL_EXPERT_SWIGLU_CLAMP, .attn_sinks = 1,
    .shapes = shapes, .n_shapes = N_OF(shapes), .shape_config = shape_config,
    .gguf_arch = "deepseek4", .gguf_config = gguf_config,
};
