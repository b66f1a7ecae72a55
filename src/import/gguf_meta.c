/*
 * gguf_meta.c — a GGUF model's metadata as the Hugging Face files sluice reads: config.json (so the family's
 * own config hook and checks run, import/hf_config.c) and tokenizer.json + tokenizer_config.json (so the
 * container holds the tokenizer as a safetensors pack does, text/tokenizer.c).
 *
 * Keys are the ones llama.cpp's convert_hf_to_gguf.py writes (gguf-py constants.py Keys): "<arch>.block_count",
 * ".embedding_length", ".attention.head_count(_kv)", ".expert_count", ... A size the metadata does not give is
 * taken from the tensors (the expert width from ffn_gate_exps, the vocabulary from token_embd); which layers
 * are dense, whether q/k/v have biases and q/k norms, and tied embeddings are read from which tensors exist.
 * The keys every family shares are read here; the family's own go through its gguf_config hook
 * (src/model/arch/<family>.c), which reads with the ggm_* accessors of model/arch.h and writes config.json
 * fields with ggm_set_*.
 *
 * Sections: the metadata accessors (ggm_*), config.json (gguf_config_json), the tokenizer (gguf_tokenizer_json).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import/gguf.h"
#include "model/arch.h"
#include "util/err.h"

struct ggm {
    const gguf_model *m;
    const gguf_file *f; /* files[0]: the metadata */
    const char *arch;   /* general.architecture */
    cJSON *c;           /* the config.json being built */
    sl_error *err;
    sl_status st;
};
typedef struct ggm meta;

static const gguf_kv *kv_arch(meta *x, const char *suffix) {
    char k[160];
    snprintf(k, sizeof k, "%s.%s", x->arch, suffix);
    return gguf_kv_find(x->f, k);
}

static int kv_num(const gguf_kv *kv, double *v) {
    if (!kv) return 0;
    switch (kv->type) {
    case GGUF_U8: case GGUF_U16: case GGUF_U32: case GGUF_U64: case GGUF_BOOL: *v = (double)kv->v.u; return 1;
    case GGUF_I8: case GGUF_I16: case GGUF_I32: case GGUF_I64: *v = (double)kv->v.i; return 1;
    case GGUF_F32: case GGUF_F64: *v = kv->v.f; return 1;
    }
    return 0;
}

static void vfail(meta *x, sl_status st, const char *fmt, va_list ap) {
    if (x->st) return;
    char msg[500];
    vsnprintf(msg, sizeof msg, fmt, ap);
    x->st = sl_err(x->err, st, "%s: %s", x->f->path, msg);
}

static void fail(meta *x, sl_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(meta *x, sl_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(x, st, fmt, ap);
    va_end(ap);
}

void ggm_fail(ggm *x, sl_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(x, st, fmt, ap);
    va_end(ap);
}

double ggm_num(ggm *x, const char *suffix, int required, double def, int *found) {
    const gguf_kv *kv = kv_arch(x, suffix);
    double v = def;
    if (found) *found = 0;
    if (x->st) return def;
    if (!kv) {
        if (required) fail(x, SL_ECONFIG, "missing metadata key '%s.%s'", x->arch, suffix);
        return def;
    }
    if (kv->type == GGUF_ARRAY && !kv->nested && kv->n > 0 && kv->arr_type != GGUF_STRING) { /* per layer */
        gguf_kv e = {0};
        double first = 0;
        int sz = kv->arr_type == GGUF_U8 || kv->arr_type == GGUF_I8 || kv->arr_type == GGUF_BOOL ? 1
                 : kv->arr_type == GGUF_U16 || kv->arr_type == GGUF_I16                        ? 2
                 : kv->arr_type == GGUF_U64 || kv->arr_type == GGUF_I64 || kv->arr_type == GGUF_F64 ? 8 : 4;
        for (uint64_t i = 0; i < kv->n; i++) {
            const uint8_t *p = (const uint8_t *)kv->arr + i * (uint64_t)sz;
            uint64_t u = 0;
            for (int b = 0; b < sz; b++) u |= (uint64_t)p[b] << (8 * b);
            e.type = kv->arr_type;
            if (e.type == GGUF_F32) { uint32_t w = (uint32_t)u; float f; memcpy(&f, &w, 4); e.v.f = f; }
            else if (e.type == GGUF_F64) memcpy(&e.v.f, &u, 8);
            else if (e.type == GGUF_I8) e.v.i = (int8_t)u;
            else if (e.type == GGUF_I16) e.v.i = (int16_t)u;
            else if (e.type == GGUF_I32) e.v.i = (int32_t)u;
            else if (e.type == GGUF_I64) e.v.i = (int64_t)u;
            else e.v.u = u;
            double y;
            kv_num(&e, &y);
            if (i == 0) first = y;
            else if (y != first) {
                fail(x, SL_EUNSUPPORTED, "'%s.%s' differs between layers (not supported)", x->arch, suffix);
                return def;
            }
        }
        v = first;
    } else if (!kv_num(kv, &v)) {
        fail(x, SL_ECONFIG, "metadata key '%s.%s' must be a number", x->arch, suffix);
        return def;
    }
    if (found) *found = 1;
    return v;
}

int ggm_count(ggm *x, const char *suffix, int required, int def, int *found) {
    int f = 0;
    double v = ggm_num(x, suffix, required, def, &f);
    if (found) *found = f;
    if (f && !(v >= 0 && v <= (double)(1 << 30) && v == floor(v))) {
        fail(x, SL_ECONFIG, "metadata key '%s.%s' is %g, not a count", x->arch, suffix, v);
        if (found) *found = 0;
        return def;
    }
    return f ? (int)v : def;
}

static const gguf_tensor *tensor(meta *x, const char *name) {
    for (int i = 0; i < x->m->n_files; i++)
        for (uint64_t j = 0; j < x->m->files[i].n_tensors; j++)
            if (!strcmp(x->m->files[i].t[j].name, name)) return &x->m->files[i].t[j];
    return NULL;
}

static const gguf_tensor *blk_tensor(meta *x, int l, const char *rel) {
    if (l < 0) return tensor(x, rel);
    char nm[200];
    snprintf(nm, sizeof nm, "blk.%d.%s", l, rel);
    return tensor(x, nm);
}

int ggm_has(ggm *x, int layer, const char *rel) { return blk_tensor(x, layer, rel) != NULL; }

int64_t ggm_ne(ggm *x, int layer, const char *rel, int d) {
    const gguf_tensor *t = blk_tensor(x, layer, rel);
    return t && d >= 0 && d < 4 ? t->ne[d] : 0;
}

/* The object a field lives in ("rope_parameters.<name>": that object, created when absent) and the name in it. */
static cJSON *field_home(meta *x, const char *field, const char **name) {
    static const char rp[] = "rope_parameters.";
    *name = field;
    if (strncmp(field, rp, sizeof rp - 1)) return x->c;
    *name = field + sizeof rp - 1;
    cJSON *o = cJSON_GetObjectItemCaseSensitive(x->c, "rope_parameters");
    if (!o) o = cJSON_AddObjectToObject(x->c, "rope_parameters");
    return o;
}

static void set_item(meta *x, const char *field, cJSON *v) {
    const char *name;
    cJSON *o = field_home(x, field, &name);
    if (!o || !v) {
        cJSON_Delete(v);
        if (!x->st) x->st = sl_err(x->err, SL_ENOMEM, "out of memory");
        return;
    }
    if (cJSON_GetObjectItemCaseSensitive(o, name)) cJSON_ReplaceItemInObjectCaseSensitive(o, name, v);
    else cJSON_AddItemToObject(o, name, v);
}

void ggm_set_num(ggm *x, const char *field, double v) { set_item(x, field, cJSON_CreateNumber(v)); }
void ggm_set_bool(ggm *x, const char *field, int v) { set_item(x, field, cJSON_CreateBool(v)); }
void ggm_set_str(ggm *x, const char *field, const char *v) { set_item(x, field, cJSON_CreateString(v)); }
void ggm_set_strs(ggm *x, const char *field, const char *const *v, int n) {
    set_item(x, field, cJSON_CreateStringArray(v, n));
}

double ggm_moe_inter(ggm *x, const arch_gguf_common *g) {
    if (!g->moe_inter_found) fail(x, SL_ECONFIG, "missing metadata key '%s.expert_feed_forward_length'", x->arch);
    return g->moe_inter;
}

static const char *kv_str(const gguf_file *f, const char *key) {
    const gguf_kv *kv = gguf_kv_find(f, key);
    return kv && kv->type == GGUF_STRING ? kv->str : NULL;
}

sl_status gguf_config_json(const gguf_model *m, char **out, sl_error *err) {
    *out = NULL;
    meta x = {m, &m->files[0], NULL, NULL, err, SL_OK};
    x.arch = kv_str(x.f, "general.architecture");
    if (!x.arch) return sl_err(err, SL_ECONFIG, "%s: missing metadata key 'general.architecture'", x.f->path);
    const arch_desc *a = arch_by_gguf(x.arch);
    if (!a)
        return sl_err(err, SL_EUNSUPPORTED, "%s: GGUF architecture '%s' is not supported (supported: %s)", x.f->path,
                      x.arch, arch_gguf_list());
    if (!a->gguf_config) return sl_err(err, SL_EUNSUPPORTED, "%s: GGUF import of %s is not implemented", x.f->path, a->name);
    cJSON *c = x.c = cJSON_CreateObject();
    if (!c) return sl_err(err, SL_ENOMEM, "out of memory");
    arch_gguf_common g = {0};
    g.arch = x.arch;
    g.check_value_length = 1;
    const gguf_tensor *emb = tensor(&x, "token_embd.weight");
    int n_layers = ggm_count(&x, "block_count", 1, 0, NULL);
    int nextn = ggm_count(&x, "nextn_predict_layers", 0, 0, NULL); /* multi-token-prediction layers, counted in block_count */
    int hidden = ggm_count(&x, "embedding_length", 1, 0, NULL);
    int heads = ggm_count(&x, "attention.head_count", 1, 0, NULL);
    int kv_heads = ggm_count(&x, "attention.head_count_kv", 0, heads, NULL);
    g.head_dim = ggm_count(&x, "attention.key_length", 0, heads > 0 ? hidden / heads : 0, NULL);
    g.value_length = ggm_count(&x, "attention.value_length", 0, g.head_dim, NULL);
    int experts = ggm_count(&x, "expert_count", 0, 0, NULL);
    int used = ggm_count(&x, "expert_used_count", 0, 0, NULL);
    if (x.st) goto fail;
    if (!emb) { fail(&x, SL_EFORMAT, "tensor 'token_embd.weight' is missing"); goto fail; }
    if (experts < 1) {
        fail(&x, SL_EUNSUPPORTED, "'%s.expert_count' is %s: a dense model, which sluice does not serve (MoE only)",
             x.arch, kv_arch(&x, "expert_count") ? "0" : "missing");
        goto fail;
    }
    n_layers -= nextn;
    if (n_layers < 1 || n_layers > SL_MAX_LAYERS) {
        fail(&x, SL_ECONFIG, "'%s.block_count' gives %d layers (1..%d)", x.arch, n_layers, SL_MAX_LAYERS);
        goto fail;
    }
    g.n_layers = n_layers;
    const char *rt = NULL;
    {
        char k[160];
        snprintf(k, sizeof k, "%s.rope.scaling.type", x.arch);
        rt = kv_str(x.f, k);
    }
    if (rt && strcmp(rt, "none") && strcmp(rt, "yarn")) {
        fail(&x, SL_EUNSUPPORTED, "rope scaling '%s' is not supported (only none and yarn)", rt);
        goto fail;
    }
    double gating = ggm_num(&x, "expert_gating_func", 0, 0, NULL); /* 1 softmax, 2 sigmoid */
    int sigmoid = a->router == SL_ROUTER_SIGMOID_GROUP;
    if (gating != 0 && gating != (sigmoid ? 2 : 1)) {
        fail(&x, SL_EUNSUPPORTED, "'%s.expert_gating_func' is %g; %s routes with %s", x.arch, gating, a->name,
             sigmoid ? "a sigmoid (2)" : "a softmax (1)");
        goto fail;
    }
    cJSON_AddStringToObject(c, "model_type", a->hf_types[0]);
    cJSON_AddNumberToObject(c, "vocab_size", (double)emb->ne[1]);
    cJSON_AddNumberToObject(c, "hidden_size", hidden);
    cJSON_AddNumberToObject(c, "num_hidden_layers", n_layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", kv_heads);
    cJSON_AddNumberToObject(c, "head_dim", g.head_dim);
    cJSON_AddNumberToObject(c, "max_position_embeddings", ggm_num(&x, "context_length", 0, 32768, NULL));
    cJSON_AddNumberToObject(c, "num_experts", experts);
    cJSON_AddNumberToObject(c, "num_experts_per_tok", used);
    cJSON_AddNumberToObject(c, "rms_norm_eps", ggm_num(&x, "attention.layer_norm_rms_epsilon", 0, 1e-6, NULL));
    cJSON_AddNumberToObject(c, "rope_theta", ggm_num(&x, "rope.freq_base", 0, 10000.0, NULL));
    double rot = ggm_num(&x, "rope.dimension_count", 0, 0, &g.rot_found);
    if (g.rot_found && g.head_dim > 0) cJSON_AddNumberToObject(c, "partial_rotary_factor", rot / g.head_dim);
    if (rt && !strcmp(rt, "yarn")) { /* transformers' rope_parameters of rope_type yarn (import/hf_config.c) */
        ggm_set_str(&x, "rope_parameters.rope_type", "yarn");
        ggm_set_num(&x, "rope_parameters.factor", ggm_num(&x, "rope.scaling.factor", 1, 0, NULL));
        int f = 0;
        double v = ggm_num(&x, "rope.scaling.original_context_length", 0, 0, &f);
        if (f) ggm_set_num(&x, "rope_parameters.original_max_position_embeddings", v);
        if ((v = ggm_num(&x, "rope.scaling.yarn_beta_fast", 0, 0, &f)), f) ggm_set_num(&x, "rope_parameters.beta_fast", v);
        if ((v = ggm_num(&x, "rope.scaling.yarn_beta_slow", 0, 0, &f)), f) ggm_set_num(&x, "rope_parameters.beta_slow", v);
        if ((v = ggm_num(&x, "rope.scaling.yarn_attn_factor", 0, 0, &f)), f)
            ggm_set_num(&x, "rope_parameters.attention_factor", v);
        if ((v = ggm_num(&x, "rope.scaling.yarn_ext_factor", 0, 1, &f)), f && v != 1)
            fail(&x, SL_EUNSUPPORTED, "'%s.rope.scaling.yarn_ext_factor' is %g (only 1 is supported)", x.arch, v);
        if (x.st) goto fail;
    }
    cJSON_AddBoolToObject(c, "tie_word_embeddings", tensor(&x, "output.weight") == NULL);
    /* dense layers: those without a router */
    g.l_moe = -1;
    cJSON *dense = cJSON_CreateArray();
    cJSON_AddItemToObject(c, "mlp_only_layers", dense);
    for (int l = 0; l < n_layers; l++) {
        if (blk_tensor(&x, l, "ffn_gate_inp.weight")) {
            if (g.l_moe < 0) g.l_moe = l;
        } else cJSON_AddItemToArray(dense, cJSON_CreateNumber(l));
    }
    if (g.l_moe < 0) { fail(&x, SL_EFORMAT, "no layer has a router (blk.N.ffn_gate_inp.weight)"); goto fail; }
    g.first_dense = g.l_moe;
    /* the experts' width: the metadata, else ffn_gate_exps of the first MoE layer */
    const gguf_tensor *ge = blk_tensor(&x, g.l_moe, "ffn_gate_exps.weight");
    g.moe_inter = ggm_num(&x, "expert_feed_forward_length", 0, 0, &g.moe_inter_found);
    if (!g.moe_inter_found && ge && ge->n_dims == 3) g.moe_inter = (double)ge->ne[1], g.moe_inter_found = 1;
    g.ff = ggm_num(&x, "feed_forward_length", 0, 0, &g.ff_found);
    const gguf_tensor *fg = NULL;
    for (int l = 0; l < n_layers && !fg; l++) fg = blk_tensor(&x, l, "ffn_gate.weight");
    if (fg && fg->n_dims >= 2) g.ff = (double)fg->ne[1], g.ff_found = 1; /* the dense layers' width, as stored */
    g.wnorm = ggm_num(&x, "expert_weights_norm", 0, 0, &g.wnorm_found);
    g.has_qbias = blk_tensor(&x, 0, "attn_q.bias") != NULL;
    g.has_qnorm = blk_tensor(&x, 0, "attn_q_norm.weight") != NULL;
    if (x.st) goto fail;
    a->gguf_config(&x, &g);
    if (x.st) goto fail;
    if (g.check_value_length && g.value_length != g.head_dim) {
        fail(&x, SL_EUNSUPPORTED, "attention.value_length (%d) differs from key_length (%d)", g.value_length,
             g.head_dim);
        goto fail;
    }
    *out = cJSON_PrintUnformatted(c);
    cJSON_Delete(c);
    return *out ? SL_OK : sl_err(err, SL_ENOMEM, "out of memory");
fail:
    cJSON_Delete(c);
    return x.st;
}

/* ---- tokenizer ------------------------------------------------------------------------------------ */

/* tokenizer.ggml.pre -> the Split regexes of the HF pre-tokenizer, applied in turn (a Sequence), then ByteLevel
 * without its own regex (llama.cpp src/llama-vocab.cpp lists each type's regexes; these are the HF tokenizers'
 * originals it adapts, from the models' tokenizer.json). NFC: the HF tokenizer's normalizer (llama.cpp applies
 * none: docs/TEXT.md "Checked against llama.cpp"); ignore_merges as llama.cpp sets it for the type. */
#define LLAMA3_RE                                                                                                 \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|" \
    "\\s+(?!\\S)|\\s+"
static const struct {
    const char *pre, *regex[3];
    int nfc, ignore_merges;
} PRE[] = {
    {"qwen2", {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
               "\\s+(?!\\S)|\\s+"}, 1, 0},
    /* Qwen3.5 / 3.6: letters take their combining marks */
    {"qwen35", {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
                "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, 1, 0},
    {"llama-bpe", {LLAMA3_RE}, 0, 1},
    {"glm4", {LLAMA3_RE}, 0, 1}, /* GLM-4.5 / 4.6 */
    /* gpt-oss (o200k): llama.cpp's gpt-4o */
    {"gpt-4o", {"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
                "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
                "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, 0, 0},
    /* DeepSeek-V3 / R1: digits in runs of 1-3, CJK runs, then its own regex */
    {"deepseek-v3", {"\\p{N}{1,3}", "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+",
                     "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}"
                     "\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}, 0, 0},
    {"gpt-2", {NULL}, 0, 0}, /* ByteLevel's own GPT-2 regex */
    {"olmo", {NULL}, 0, 0},  /* OLMoE: GPT-NeoX's BPE, the GPT-2 regex */
};

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

static int64_t kv_id(const gguf_file *f, const char *key) {
    const gguf_kv *kv = gguf_kv_find(f, key);
    double v;
    return kv && kv_num(kv, &v) && v >= 0 && v < 4e18 ? (int64_t)v : -1;
}

sl_status gguf_tokenizer_json(const gguf_model *m, char **tok, char **cfg, sl_error *err) {
    *tok = *cfg = NULL;
    const gguf_file *f = &m->files[0];
    const char *model = kv_str(f, "tokenizer.ggml.model");
    if (!model) return SL_OK;
    if (strcmp(model, "gpt2"))
        return sl_err(err, SL_EUNSUPPORTED, "%s: tokenizer.ggml.model '%s' is not supported (gpt2 byte-level BPE only)",
                      f->path, model);
    const gguf_kv *tk = gguf_kv_find(f, "tokenizer.ggml.tokens"), *mg = gguf_kv_find(f, "tokenizer.ggml.merges");
    const gguf_kv *ty = gguf_kv_find(f, "tokenizer.ggml.token_type");
    if (!tk || tk->type != GGUF_ARRAY || tk->arr_type != GGUF_STRING)
        return sl_err(err, SL_EFORMAT, "%s: tokenizer.ggml.tokens is missing or not an array of strings", f->path);
    if (!mg || mg->type != GGUF_ARRAY || mg->arr_type != GGUF_STRING)
        return sl_err(err, SL_EFORMAT, "%s: tokenizer.ggml.merges is missing or not an array of strings", f->path);
    if (ty && (ty->type != GGUF_ARRAY || ty->arr_type != GGUF_I32 || ty->n != tk->n))
        return sl_err(err, SL_EFORMAT, "%s: tokenizer.ggml.token_type must be an i32 array of one entry per token", f->path);
    const char *pre = kv_str(f, "tokenizer.ggml.pre");
    if (!pre) pre = "gpt-2";
    int pi = -1;
    for (size_t i = 0; i < sizeof PRE / sizeof *PRE; i++)
        if (!strcmp(PRE[i].pre, pre)) pi = (int)i;
    if (pi < 0)
        return sl_err(err, SL_EUNSUPPORTED, "%s: tokenizer.ggml.pre '%s' is not supported (supported: qwen2, qwen35, "
                      "llama-bpe, glm4, gpt-4o, deepseek-v3, gpt-2, olmo)", f->path, pre);
    char **toks = tk->arr, **merges = mg->arr;
    cJSON *root = cJSON_CreateObject(), *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON_AddStringToObject(root, "version", "1.0");
    if (PRE[pi].nfc) cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "normalizer"), "type", "NFC");
    else cJSON_AddNullToObject(root, "normalizer");
    cJSON *pt = cJSON_AddObjectToObject(root, "pre_tokenizer");
    if (PRE[pi].regex[0]) {
        cJSON_AddStringToObject(pt, "type", "Sequence");
        cJSON *l = cJSON_AddArrayToObject(pt, "pretokenizers"), *bl = cJSON_CreateObject();
        for (int k = 0; k < 3 && PRE[pi].regex[k]; k++) {
            cJSON *sp = cJSON_CreateObject();
            cJSON_AddItemToArray(l, sp);
            cJSON_AddStringToObject(sp, "type", "Split");
            cJSON_AddStringToObject(cJSON_AddObjectToObject(sp, "pattern"), "Regex", PRE[pi].regex[k]);
            cJSON_AddStringToObject(sp, "behavior", "Isolated");
            cJSON_AddFalseToObject(sp, "invert");
        }
        cJSON_AddItemToArray(l, bl);
        cJSON_AddStringToObject(bl, "type", "ByteLevel");
        cJSON_AddFalseToObject(bl, "add_prefix_space");
        cJSON_AddFalseToObject(bl, "trim_offsets");
        cJSON_AddFalseToObject(bl, "use_regex");
    } else {
        cJSON_AddStringToObject(pt, "type", "ByteLevel");
        cJSON_AddFalseToObject(pt, "add_prefix_space");
        cJSON_AddTrueToObject(pt, "use_regex");
    }
    cJSON *dec = cJSON_AddObjectToObject(root, "decoder");
    cJSON_AddStringToObject(dec, "type", "ByteLevel");
    cJSON *mo = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(mo, "type", "BPE");
    cJSON_AddBoolToObject(mo, "ignore_merges", PRE[pi].ignore_merges);
    cJSON *vocab = cJSON_AddObjectToObject(mo, "vocab"), *ml = cJSON_AddArrayToObject(mo, "merges");
    for (uint64_t i = 0; i < tk->n; i++) {
        int t = ty ? (int32_t)((const uint32_t *)ty->arr)[i] : TT_NORMAL;
        if (t == TT_UNUSED || !toks[i][0]) continue; /* the converter's [PADn] fillers */
        if (t == TT_CONTROL || t == TT_USER) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "id", (double)i);
            cJSON_AddStringToObject(o, "content", toks[i]);
            cJSON_AddBoolToObject(o, "special", t == TT_CONTROL);
            cJSON_AddItemToArray(added, o);
        } else {
            cJSON_AddNumberToObject(vocab, toks[i], (double)i);
        }
    }
    for (uint64_t i = 0; i < mg->n; i++) cJSON_AddItemToArray(ml, cJSON_CreateString(merges[i]));
    *tok = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    cJSON *c = cJSON_CreateObject();
    const char *tmpl = kv_str(f, "tokenizer.chat_template");
    if (tmpl) cJSON_AddStringToObject(c, "chat_template", tmpl);
    static const char *const ids[][2] = {{"tokenizer.ggml.eos_token_id", "eos_token"},
                                         {"tokenizer.ggml.bos_token_id", "bos_token"},
                                         {"tokenizer.ggml.padding_token_id", "pad_token"}};
    for (int i = 0; i < 3; i++) {
        int64_t id = kv_id(f, ids[i][0]);
        if (id >= 0 && (uint64_t)id < tk->n) cJSON_AddStringToObject(c, ids[i][1], toks[id]);
    }
    const gguf_kv *ab = gguf_kv_find(f, "tokenizer.ggml.add_bos_token");
    cJSON_AddBoolToObject(c, "add_bos_token", ab && ab->type == GGUF_BOOL && ab->v.u);
    *cfg = cJSON_PrintUnformatted(c);
    cJSON_Delete(c);
    if (!*tok || !*cfg) {
        free(*tok);
        free(*cfg);
        *tok = *cfg = NULL;
        return sl_err(err, SL_ENOMEM, "out of memory");
    }
    return SL_OK;
}
