/*
 * mixtral.c — Mixtral (Mixtral-8x7B, Mixtral-8x22B): Llama-style attention (GQA, full RoPE, no q/k
 * norm, no biases), every layer a MoE of SwiGLU experts without a shared expert, routed top-k of the
 * router logits then a softmax over those k; sliding_window (Mistral's), when set, on every layer. On disk (the released checkpoints, and what
 * transformers 5.x save_pretrained writes): block_sparse_moe.gate, block_sparse_moe.experts.E.w1
 * (gate), w3 (up), w2 (down). transformers' modeling_mixtral.py MixtralTopKRouter takes softmax over
 * all E, top-k and renormalises: the same weights (softmax is monotonic and the renormalisation
 * cancels the other experts' mass) up to rounding.
 */
#include "family/arch/common.h"

static void config(hfc *c, fam_config *o) {
    o->moe_inter = hfc_int(c, "intermediate_size", 1, 0); /* the experts' width: Mixtral has no dense MLP */
    o->norm_topk = 1;
    /* modeling_mixtral.py: config.sliding_window, when not null, is every layer's window (transformers'
     * sliding_window_causal mask: the last sliding_window positions, the query's own included); a window that
     * covers the whole context is full attention */
    int sw = hfc_has(c, "sliding_window") ? hfc_int(c, "sliding_window", 1, 0) : 0;
    if (hfc_has(c, "sliding_window") && sw < 1) hfc_fail(c, SL_ECONFIG, "sliding_window must be >= 1 (or null)");
    if (sw >= 1 && sw < o->max_pos) {
        o->sliding_window = sw;
        for (int i = 0; i < o->n_layers; i++) o->layer_sliding[i] = 1;
    }
    for (int i = 0; i < o->n_layers; i++) o->layer_moe[i] = 1;
}

static const arch_tdef tensors[] = {
    T_EMBED,
    T_IN_NORM, T_ATTN_QKVO, T_POST_NORM, T_ROUTER,
    T_HEAD,
};

const arch_pdef arch_w13_parts[3] = {
    {"gate_proj", "w1", AD_I, AD_H, EW(gate), AK_MAT, 0, "ffn_gate_exps.weight"},
    {"up_proj", "w3", AD_I, AD_H, EW(up), AK_MAT, 0, "ffn_up_exps.weight"},
    {"down_proj", "w2", AD_H, AD_I, EW(down), AK_MAT, 0, "ffn_down_exps.weight"},
};

static const char *const renames[] = {"block_sparse_moe.", "mlp.", NULL};

/* mistralai/Mixtral-8x7B-v0.1 and Mixtral-8x22B-v0.1 config.json */
static const arch_shape shapes[] = {
    {"mixtral-8x7b", 32000, 4096, 32, 32, 8, 128, 8, 2, 14336, 0, 0, 0, 0, 0, 0, 32768, 1e6, 1.0, 1, 0, 0, 0, 0, 0, 0.0, 0, 0, 0.0, 0, 46.7e9},
    {"mixtral-8x22b", 32000, 6144, 56, 48, 8, 128, 8, 2, 16384, 0, 0, 0, 0, 0, 0, 65536, 1e6, 1.0, 1, 0, 0, 0, 0, 0, 0.0, 0, 0, 0.0, 0, 140.6e9},
};

/* GGUF (llama.cpp llama with experts): the experts' width is feed_forward_length when the file has no
 * expert_feed_forward_length; attention.sliding_window when written */
static void gguf_config(ggm *m, arch_gguf_common *g) {
    int found = g->moe_inter_found;
    double inter = found ? g->moe_inter : ggm_num(m, "feed_forward_length", 0, 0, &found);
    if (!found) ggm_fail(m, SL_ECONFIG, "missing metadata key '%s.expert_feed_forward_length'", g->arch);
    ggm_set_num(m, "intermediate_size", inter);
    int sw = 0;
    double w = ggm_num(m, "attention.sliding_window", 0, 0, &sw);
    if (sw && w > 0) ggm_set_num(m, "sliding_window", w);
}

/* llama.cpp's convert_hf_to_gguf.py (LlamaModel.permute) reorders each head's q/k rows for its interleaved RoPE:
 * HF row h*hd + i*hd/2 + j is written as row h*hd + 2j + i; this takes them back. A shape that does not split
 * into heads of an even size gives an invalid permutation (refused by the import). */
static void unpermute(int64_t rows, int heads, int64_t *perm) {
    int64_t hd = heads > 0 ? rows / heads : 0;
    for (int64_t r = 0; r < rows; r++) {
        if (hd < 2 || hd % 2 || hd * heads != rows) {
            perm[r] = -1;
            continue;
        }
        int64_t h = r / hd, w = r % hd, i = w / (hd / 2), j = w % (hd / 2);
        perm[r] = h * hd + 2 * j + i;
    }
}
void arch_gguf_q_rows(const fam_config *c, int64_t rows, int64_t *perm) { unpermute(rows, c->n_heads, perm); }
void arch_gguf_k_rows(const fam_config *c, int64_t rows, int64_t *perm) { unpermute(rows, c->n_kv_heads, perm); }

static const arch_gguf_xf gguf_xf[] = {
    {"self_attn.q_proj", {"attn_q.weight", NULL}, 0, arch_gguf_q_rows, NULL},
    {"self_attn.k_proj", {"attn_k.weight", NULL}, 0, arch_gguf_k_rows, NULL},
};

static const char *const hf_types[] = {"mixtral", NULL};

const arch_desc arch_mixtral = {
    .id = SL_ARCH_MIXTRAL, .name = "mixtral", .hf_types = hf_types,
    .router = SL_ROUTER_TOPK_SOFTMAX, .qk_norm = SL_QK_NORM_NONE, .prf_default = 1.0,
    .config = config,
    .tensors = tensors, .n_tensors = N_OF(tensors), .parts = arch_w13_parts, .renames = renames,
    .shapes = shapes, .n_shapes = N_OF(shapes), .gguf_config = gguf_config, .gguf_arch = "llama",
    .gguf_xf = gguf_xf, .n_gguf_xf = N_OF(gguf_xf),
};
