/*
 * arch.h — one table per model family (after llama.cpp's llama-arch): everything the rest of the engine
 * knows about an architecture is declared once, in src/family/arch/<family>.c, and every stage loops over it.
 *
 * A family declares
 *   - the Hugging Face model_type names it serves and its config hook (family fields of config.json);
 *   - its traits: router kind, q/k norm kind, zero-centred norms, gated attention, ... (copied into
 *     fam_config, so the forward pass reads the config, never the family);
 *   - its tensor table: canonical name, on-disk name when it differs, which layers have it, shape in
 *     terms of the config (arch_dim), kind (matrix / f32 vector), the fam_weights / fam_layer_w field it
 *     binds to, and its role for quantisation (backbone, router);
 *   - its routed-expert parts (canonical and on-disk names, shapes);
 *   - the released models' real dimensions for `sluice synth`.
 * Import (hf.c, hf_config.c), pack, verify, synth, the loader's binding and the forward pass's weight
 * checks are loops over these tables. Adding a family = one arch/<family>.c + its entry in arch.c's list.
 *
 * Canonical tensor names (the container's) are the HF name without "model." and ".weight"; layer
 * tensors are "layers.N." + the table's name. Routed experts are "layers.N.mlp.experts.E.<part>".
 */
#ifndef SL_ARCH_H
#define SL_ARCH_H

#include <stddef.h>
#include <stdint.h>

#include "family/config.h"
#include "sluice.h"

/* Sizes a tensor's shape is made of. */
typedef enum {
    AD_NONE = 0, /* no such dimension (a vector has cols AD_NONE) */
    AD_ONE,      /* 1 */
    AD_V,        /* vocab */
    AD_H,        /* hidden */
    AD_HD,       /* head_dim */
    AD_Q,        /* n_heads * head_dim */
    AD_NH,       /* n_heads */
    AD_QPROJ,    /* q_proj rows: n_heads * head_dim, doubled when gated_attn ([query|gate] per head) */
    AD_KV,       /* n_kv_heads * head_dim */
    AD_E,        /* n_experts */
    AD_I,        /* moe_inter */
    AD_2I,       /* 2 * moe_inter (gpt-oss's fused gate_up_proj rows) */
    AD_IS,       /* shared_inter */
    AD_ID,       /* dense_inter */
    AD_CQ,       /* DeltaNet conv channels 2*nk*dk + nv*dv */
    AD_QKVZ,     /* Qwen3-Next in_proj_qkvz rows 2*nk*dk + 2*nv*dv */
    AD_NV,       /* lin_nv */
    AD_2NV,      /* 2 * lin_nv */
    AD_NVDV,     /* lin_nv * lin_dv */
    AD_DV,       /* lin_dv */
    AD_CONVK,    /* conv_k */
    AD_QLORA,    /* MLA q_lora */
    AD_QMLA,     /* MLA query rows n_heads * (qk_nope + rot_dim) */
    AD_KVA,      /* MLA kv_a_proj_with_mqa rows kv_lora + rot_dim */
    AD_KVLORA,   /* MLA kv_lora */
    AD_KVB,      /* MLA kv_b_proj rows n_heads * (qk_nope + v_head_dim) */
    AD_OMLA,     /* MLA o_proj cols n_heads * v_head_dim */
    AD_DSAQ,     /* DSA indexer query rows dsa_heads * dsa_dim */
    AD_DSAD,     /* DSA indexer key width dsa_dim */
    AD_DSAH,     /* DSA indexer heads dsa_heads */
    AD_K,        /* n_experts_used */
    AD_3,        /* 3 */
    AD_HC,       /* V4 hc_mult */
    AD_HCMIX,    /* V4 hyper-connection mixes (2 + hc_mult) * hc_mult */
    AD_HCH,      /* V4 residual width hc_mult * hidden */
    AD_OA,       /* V4 o_groups * o_lora */
    AD_OAIN,     /* V4 a group's input n_heads * head_dim / o_groups */
    AD_2HD,      /* 2 * head_dim (V4 CSA compressor) */
    AD_CSAR,     /* csa_rate */
    AD_HCAR,     /* hca_rate */
    AD_IDXD,     /* idx_dim */
    AD_2IDXD,    /* 2 * idx_dim */
    AD_IDXH,     /* idx_heads */
    AD_IDXQ,     /* idx_heads * idx_dim */
    AD_QOWN,     /* n_heads * full_head_dim (the layers with their own dims: cfg_attn_at) */
    AD_KVOWN,    /* full_kv_heads * full_head_dim */
    AD_HDOWN,    /* full_head_dim */
    AD_VKV,      /* n_kv_heads * v_head_dim (MiMo's value heads; attention layers with the config's dims) */
    AD_VKVOWN,   /* full_kv_heads * v_head_dim (the layers with their own dims) */
    AD_3H,       /* 3 * hidden (LFM2's short-conv in_proj: B | C | x) */
    AD_EZ,       /* n_experts + zero_experts (LongCat-Flash's router rows) */
    AD_MAMBA_IN, /* Mamba2's in_proj rows: gate (nv dv) | x B C (2 nk dk + nv dv) | dt (nv) */
    AD_2IS,      /* 2 * shared_inter (a fused shared gate | up) */
} arch_dim;

/* Which layers (or the model as a whole) have a tensor. */
typedef enum {
    AW_GLOBAL,    /* once per model (embed_tokens, norm) */
    AW_UNTIED,    /* once per model, unless tie_embeddings (lm_head) */
    AW_EVERY,     /* every layer */
    AW_ATTN,      /* full-attention layers */
    AW_ATTN_BIAS, /* full-attention layers of a config with attn_bias */
    AW_LINEAR,    /* Gated DeltaNet layers */
    /* Gated DeltaNet layers of a config without qkvz_split (qwen3_next's fused in_proj_qkvz). A GGUF import sets
     * qkvz_split when the two sources of such a tensor's gguf_xf rule differ in type in some layer: the tensor is
     * then absent and the AW_LIN_SPLIT tensors whose gguf names are those sources take each as it is */
    AW_LIN_QKVZ,
    AW_LIN_SPLIT, /* Gated DeltaNet layers of a config with qkvz_split (the halves in_proj_qkv, in_proj_z) */
    AW_MOE,       /* layers with routed experts */
    AW_SHARED,    /* MoE layers of a config with a shared expert (shared_inter > 0) */
    AW_DENSE,     /* dense-MLP layers */
    AW_QK_NORM,   /* full-attention layers of a config with q/k norm (cfg->qk_norm, set by config.json) */
    AW_Q_LORA,    /* full-attention layers of an MLA config with q_lora > 0 (q_a_proj, q_a_layernorm, q_b_proj) */
    AW_Q_FULL,    /* full-attention layers of an MLA config with q_lora = 0 (one q_proj) */
    AW_SINKS,     /* full-attention layers of a config with attention sinks (cfg->attn_sinks) */
    AW_DSA,       /* MLA layers with a DSA indexer of their own (dsa_topk > 0, not layer_dsa_shared) */
    AW_CSA,       /* V4 compressed-sparse-attention layers */
    AW_HCA,       /* V4 heavily-compressed-attention layers */
    AW_CMP,       /* V4 layers with either compressor */
    AW_HASH,      /* MoE layers routed by tid2eid (V4 hash layers) */
    AW_TOPK,      /* MoE layers routed by their scores (not hash) */
    AW_ATTN_STD,  /* attention layers with the config's head dims (cfg_attn_at: not own) */
    AW_ATTN_OWN,  /* attention layers with their own head dims (Gemma 4's full layers) */
    AW_V_OWN,     /* those of them with a v_proj (not k_eq_v) */
} arch_when;

enum { AK_MAT = 0, AK_VEC = 1 };         /* tn_mat in its stored dtype / float * converted to f32 at load */
enum { AR_BACKBONE = 0, AR_ROUTER = 1 }; /* quantisation role (pack keeps routers at >= 8 bits) */

typedef struct arch_tdef {
    const char *name;  /* canonical, relative to "layers.N." for layer tensors */
    const char *disk;  /* the on-disk name (same prefix rules) when it differs, else NULL */
    arch_when when;
    arch_dim rows, cols;
    int kind;          /* AK_MAT / AK_VEC */
    size_t field;      /* offsetof in fam_weights (AW_GLOBAL / AW_UNTIED) or fam_layer_w */
    int role;          /* AR_* */
    const char *gguf;  /* the GGUF (llama.cpp) name, relative to "blk.N." for layer tensors, with its ".weight" /
                        * ".bias" suffix; NULL: the family cannot be imported from GGUF */
} arch_tdef;

/* A routed expert's part (an expert block holds them back to back, in this order): a matrix, or a bias
 * vector (kind AK_VEC: f32 [rows], stored as a [rows, 1] f32 matrix in the container). */
typedef struct arch_pdef {
    const char *name;  /* canonical: gate_proj, up_proj, down_proj; gpt-oss gate_up_proj, gate_up_proj_bias, ... */
    const char *disk;  /* on-disk name when it differs (Mixtral: w1, w3, w2), else NULL */
    arch_dim rows, cols; /* cols AD_ONE for a bias */
    size_t field;      /* offsetof in tn_expert (an tn_mat, or a const float * for a bias) */
    int kind;          /* AK_MAT (0) / AK_VEC */
    int disk_t;        /* 1: the fused on-disk stack is [E, cols, rows] (x @ W, gpt-oss), read transposed */
    const char *gguf;  /* the GGUF name of the stacked tensor [E][rows][cols], relative to "blk.N.", or NULL */
} arch_pdef;

#define ARCH_MAX_PARTS 4

/* A released model's real dimensions (sluice synth). */
typedef struct arch_shape {
    const char *name;
    int vocab, hidden, layers, heads, kv_heads, head_dim, experts, used, moe_inter, shared_inter;
    int nk, nv, dk, dv, interval, max_pos;
    double theta, prf;
    int norm_topk;
    int attn_bias;
    int dense_inter, first_dense; /* the first first_dense layers are dense MLPs of width dense_inter */
    int n_group, topk_group;      /* SL_ROUTER_SIGMOID_GROUP */
    double routed_scale;
    int qk_norm;                  /* 1: per-head q/k norm where the family makes it optional (GLM use_qk_norm) */
    int sliding_window;           /* > 0: layers alternate sliding (even) and full attention (gpt-oss) */
    double yarn_factor;           /* > 0: YaRN RoPE with this factor over yarn_orig positions, beta 32 / 1, no truncation */
    int yarn_orig;
    double params;                /* total parameters as published (model card; see each family's file), which
                                   * the table's tensors must reproduce within 1.5% (tests/test_format.c); 0: not
                                   * a released model */
} arch_shape;

/* The Hugging Face config.json reader a config hook works with (implemented in family/hf_config.c).
 * Lookups go to the text config first, then the root. Every accessor records the first error (field
 * missing, wrong type) and later calls keep returning defaults; hf_parse_config reports it. */
typedef struct hfc hfc;
int hfc_int(hfc *c, const char *name, int required, int def);
int hfc_bool(hfc *c, const char *name, int def);
double hfc_num(hfc *c, const char *name, double def, int *found);
/* a * b where a is the field `name` (a count times a width): an error naming it when the product passes 1e9 */
int hfc_product(hfc *c, const char *name, int a, int b);
int hfc_has(hfc *c, const char *name); /* present and not null */
/* A number / string at a dotted path of objects ("rope_parameters.full_attention.rope_theta"); def / NULL when
 * absent or null, an error when of another type. The string lives as long as the config. */
double hfc_path_num(hfc *c, const char *path, double def, int *found);
const char *hfc_path_str(hfc *c, const char *path);
/* 1 when the value at path is a string ("auto" where a number may stand). */
int hfc_path_is_str(hfc *c, const char *path);
/* The number of elements of the array at path, or -1 when it is absent or not an array. */
int hfc_array_size(hfc *c, const char *path);
void hfc_fail(hfc *c, sl_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Common HF conventions a hook may use: layer_types / full_attention_interval into layer_linear (the
 * DeltaNet families); decoder_sparse_step / mlp_only_layers into layer_moe, reading intermediate_size
 * into dense_inter when a layer is dense. */
void hfc_linear_layers(hfc *c, fam_config *o);
/* A per-layer list of strings `name` (n_layers of them, each `zero` or `one`) into flags (1 for `one`): 1 when
 * read, 0 when absent or null (flags untouched) or on an error (recorded). */
int hfc_layer_flags(hfc *c, const fam_config *o, const char *name, const char *zero, const char *one, uint8_t *flags);
void hfc_sparse_layers(hfc *c, fam_config *o);
/* A string field, or NULL when absent (an error when not a string). */
const char *hfc_str(hfc *c, const char *name);
/* A list of n strings, each mapped to out[i] by map (a kind >= 0, or -1: an error naming it); 1 when read, 0 when
 * absent or wrong. */
int hfc_strs(hfc *c, const char *name, int n, uint8_t *out, int (*map)(const char *));
/* The first n entries of a list of non-negative integers; 1 when read, 0 when absent or wrong. */
int hfc_ints(hfc *c, const char *name, int n, int *out);
/* A list of exactly n numbers >= 0 (per-layer limits) into out; 1 when read, 0 when absent or null, or wrong (then
 * recorded). */
int hfc_nums(hfc *c, const char *name, int n, float *out);
/* The integer object.name, or def when absent. */
int hfc_sub_int(hfc *c, const char *object, const char *name, int def);
/* Up to n entries of the integer list object.name into out: how many (0 when absent or wrong). */
int hfc_sub_ints(hfc *c, const char *object, const char *name, int n, int *out);
/* rope_parameters.<sub> (transformers' per-kind rope dicts, DeepSeek-V4's "compress"): its rope_type and YaRN fields
 * into o's (config.h), when present. */
void hfc_rope_sub(hfc *c, const char *sub, fam_config *o);
/* layer_types of full_attention / sliding_attention into layer_sliding, sliding_window into o->sliding_window
 * (required when a layer slides). */
void hfc_sliding_layers(hfc *c, fam_config *o);

/* The GGUF metadata reader a family's gguf_config hook works with (implemented in family/gguf_meta.c). Keys are
 * "<general.architecture>.<suffix>" (llama.cpp's convert_hf_to_gguf.py writes them; gguf-py constants.py Keys).
 * Every accessor records the first error (key missing, wrong type) and later calls return defaults; the
 * import reports it. Tensors are named as in the file: "blk.<layer>." + rel (layer < 0: a global tensor). */
typedef struct ggm ggm;
/* "<arch>.<suffix>" as a number (a per-layer array must hold one value); def when absent and !required. */
double ggm_num(ggm *m, const char *suffix, int required, double def, int *found);
/* ggm_num of a count or a size: a whole number in 0..2^30, else an error naming the key. */
int ggm_count(ggm *m, const char *suffix, int required, int def, int *found);
/* "<arch>.<suffix>" per layer into out[0..n): a per-layer array of n numbers or more (block_count's, the multi-token-
 * prediction layers' last), or a scalar given to every layer; 1 when
 * read, 0 when absent (out untouched) or on an error (recorded). */
int ggm_layer_nums(ggm *m, const char *suffix, int n, double *out);
/* Dimension d (innermost first) of tensor rel at layer (< 0: global); 0 when the file has no such tensor. */
int64_t ggm_ne(ggm *m, int layer, const char *rel, int d);
int ggm_has(ggm *m, int layer, const char *rel);
/* The n values of a small F32 tensor rel at layer (< 0: global) into out: 1 when read, 0 when the file has no such
 * tensor; an error (recorded) when it is not F32 of n elements or cannot be read. */
int ggm_f32(ggm *m, int layer, const char *rel, float *out, int64_t n);
void ggm_fail(ggm *m, sl_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* config.json fields the hook writes ("rope_parameters.<name>" writes into that object); a later call for the
 * same field replaces the earlier value. */
void ggm_set_num(ggm *m, const char *field, double v);
void ggm_set_bool(ggm *m, const char *field, int v);
void ggm_set_str(ggm *m, const char *field, const char *v);
void ggm_set_strs(ggm *m, const char *field, const char *const *v, int n); /* an array of n strings */
void ggm_set_nums(ggm *m, const char *field, const double *v, int n);      /* an array of n numbers */
struct arch_gguf_common;
/* The routed experts' width (g->moe_inter), or an error naming expert_feed_forward_length when the file gives none. */
double ggm_moe_inter(ggm *m, const struct arch_gguf_common *g);

/* What the common part of the GGUF metadata import found, for the family's hook. */
typedef struct arch_gguf_common {
    const char *arch;      /* general.architecture */
    int n_layers;          /* block_count less nextn_predict_layers */
    int head_dim;          /* attention.key_length, else embedding_length / head_count */
    int value_length;      /* attention.value_length, else head_dim */
    int check_value_length; /* 1 (the default): value_length must equal head_dim; an MLA hook clears it */
    int kv_heads_vary;     /* attention.head_count_kv's attention layers differ (the first one's is num_key_value_heads) */
    int check_kv_heads;    /* 1 (the default): kv_heads_vary is refused; a hook that reads them per layer clears it */
    int l_moe;             /* the first layer with a router (blk.N.ffn_gate_inp.weight) */
    int first_dense;       /* layers before the first routed one */
    int rot_found;         /* rope.dimension_count was given (and written as partial_rotary_factor) */
    double moe_inter;      /* expert_feed_forward_length, else the width of ffn_gate_exps at l_moe */
    int moe_inter_found;
    double ff;             /* the dense layers' width: ffn_gate's rows, else feed_forward_length */
    int ff_found;
    double wnorm;          /* expert_weights_norm */
    int wnorm_found;
    int has_qbias, has_qnorm; /* blk.0.attn_q.bias / blk.0.attn_q_norm.weight exist */
} arch_gguf_common;

/* A canonical tensor that llama.cpp's converter (convert_hf_to_gguf.py) rewrote, and how the import undoes it:
 * made of one or two GGUF tensors of a layer (a family's gguf_xf table). Their rows are concatenated, src[0]'s
 * first; `rows` reorders them (rows keep their GGUF type, quantised or not: a row is whole blocks); `f32`, when
 * set, rewrites the sources' values after they are dequantised to f32 (as gguf-py dequantises them) and
 * concatenated element by element (a transposition, a column order, a value map). The result has the table's
 * shape (the arch_tdef of that name, or the expert part's shape); its dtype is the sources' when they share
 * one and no f32 hook runs, the sources' float type when they share one and `f32` rewrites a matrix (a hook on
 * a matrix only moves values), else f32. GGUF names that are sources of a rule are not read directly where the
 * rule's tensor exists (arch_applies at that layer; a part's always). */
typedef struct arch_gguf_xf {
    const char *name;   /* canonical name, relative to "layers.N." (part: the expert part's name) */
    const char *src[2]; /* GGUF names relative to "blk.N.", with suffix; src[1] NULL for one source. For a part,
                         * stacks [E][rows][cols] (a bias [E][rows]) of which each expert takes its slice */
    int part;           /* 1: a routed-expert part */
    /* perm[r] = the source row of output row r (rows of src[0], then src[1]); a vector is n_rows rows of one
     * element. NULL: in order */
    void (*rows)(const fam_config *c, int64_t n_rows, int64_t *perm);
    /* dst[rows * cols] from src (every source element, in order, f32); NULL: none */
    int64_t (*f32)(const fam_config *c, const float *src, float *dst); /* returns -1, or the index of a source
                                                                       * element it cannot map (an error) */
} arch_gguf_xf;

typedef struct arch_desc {
    fam_arch id;
    const char *name;              /* the container's "arch" */
    const char *const *hf_types;   /* model_type values served, NULL-terminated */
    const char *text_config_type;  /* model_type whose fields live under "text_config" (VLM wrapper), or NULL */
    /* traits, copied into every fam_config of the family */
    int router;                    /* SL_ROUTER_* */
    int qk_norm;                   /* SL_QK_NORM_* */
    int zero_centred_norm, gated_attn, split_lin_proj;
    double prf_default;            /* partial_rotary_factor when config.json has none */
    int reads_attention_bias;      /* the config hook reads config.json's attention_bias (q/k/v biases); for the
                                    * other families attention_bias = true is refused */
    /* the family's fields of config.json (after the common ones: vocab, dims, heads, experts, rope, eps,
     * tie); sets moe_inter, norm_topk, shared_inter, linear-attention dims, layer kinds. */
    void (*config)(hfc *c, fam_config *o);
    const arch_tdef *tensors;
    int n_tensors;
    const arch_pdef *parts;        /* n_parts of them */
    int n_parts;                   /* 0: 3 (gate_proj, up_proj, down_proj) */
    int expert_kind;               /* SL_EXPERT_* */
    int attn_sinks;                /* attention has per-head learned sinks (self_attn.sinks) */
    /* on-disk prefixes of layer-relative names renamed before matching, pairs {disk, canonical},
     * NULL-terminated (Mixtral: "block_sparse_moe." -> "mlp."), or NULL */
    const char *const *renames;
    const arch_shape *shapes;
    int n_shapes;
    /* optional: the family's fields of a synth shape that arch_shape does not hold (DeepSeek-V3's MLA
     * dimensions), set into c after the common ones; NULL for most families */
    void (*shape_config)(const arch_shape *sh, fam_config *c);
    /* general.architecture of the family's GGUF files (llama.cpp's llm_arch names), or NULL: no GGUF import */
    const char *gguf_arch;
    /* The family's GGUF metadata as config.json fields (after the common ones family/gguf_meta.c writes:
     * model_type, vocabulary, dimensions, heads, experts, context, eps, rope, tied embeddings, mlp_only_layers):
     * what its config hook reads (moe_intermediate_size, norm_topk_prob, ...). Required with gguf_arch. */
    void (*gguf_config)(ggm *m, arch_gguf_common *g);
    /* the tensors llama.cpp's converter rewrites, n_gguf_xf of them (Mixtral's q/k rows, Qwen3-Next's regrouped
     * in_proj_qkvz, ...), or NULL */
    const arch_gguf_xf *gguf_xf;
    int n_gguf_xf;
    /* optional: an on-disk layer-relative name of layer `layer` that belongs to another layer of sluice's (LongCat-
     * Flash's two sublayers per layer: "self_attn.1.q_a_proj" of layer N is layer 2N + 1's "self_attn.q_a_proj"):
     * writes the canonical rest into out and returns its layer; NULL: names map to their own layer */
    int (*layer_name)(int layer, const char *rest, char *out, size_t cap);
    /* 1: the family's GGUF files hold its zero-centred norms shifted (1 + w: llama.cpp's converter adds 1), read
     * as plain weights (fam_config norms_shifted) */
    int gguf_norms_shifted;
} arch_desc;

/* Every family, in a fixed order; NULL-terminated. */
extern const arch_desc *const arch_list[];

/* The family of an id / container name / HF model_type; NULL when unknown. */
const arch_desc *arch_get(fam_arch id);
const arch_desc *arch_by_name(const char *name);
const arch_desc *arch_by_hf_type(const char *model_type);
const arch_desc *arch_by_gguf(const char *gguf_arch);
/* "a, b, c": every GGUF architecture served (for messages). Static storage. */
const char *arch_gguf_list(void);
/* "a, b, c": every HF model_type served (for messages). Static storage. */
const char *arch_hf_type_list(void);
/* Sets the family's traits in c (c->arch must be set). */
void arch_set_traits(fam_config *c);

/* The size a dimension has under c. */
int64_t arch_dim_value(const fam_config *c, arch_dim d);
/* The routed-expert parts of c's family: count, and part p (NULL when out of range). */
int arch_n_parts(const fam_config *c);
const arch_pdef *arch_part(const fam_config *c, int p);

/* Whether a tensor of `when` exists at layer l (l ignored for AW_GLOBAL / AW_UNTIED). */
int arch_applies(const fam_config *c, arch_when when, int layer);

#endif
