/*
 * gguf_meta.c — a GGUF model's metadata as the Hugging Face files sluice reads: config.json (so the family's
 * own config hook and checks run, import/hf_config.c) and tokenizer.json + tokenizer_config.json (so the
 * container holds the tokenizer as a safetensors pack does, text/tokenizer.c).
 *
 * Keys are the ones llama.cpp's convert_hf_to_gguf.py writes (gguf-py constants.py Keys): "<arch>.block_count",
 * ".embedding_length", ".attention.head_count(_kv)", ".expert_count", ... A size the metadata does not give is
 * taken from the tensors (the expert width from ffn_gate_exps, the vocabulary from token_embd); which layers
 * are dense, whether q/k/v have biases and q/k norms, and tied embeddings are read from which tensors exist.
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

typedef struct {
    const gguf_model *m;
    const gguf_file *f; /* files[0]: the metadata */
    const char *arch;   /* general.architecture */
    sl_error *err;
    sl_status st;
} meta;

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

static void fail(meta *x, sl_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(meta *x, sl_status st, const char *fmt, ...) {
    if (x->st) return;
    char msg[500];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    x->st = sl_err(x->err, st, "%s: %s", x->f->path, msg);
}

/* "<arch>.<suffix>" as a number; a per-layer array must hold one value. def when absent and !required. */
static double num(meta *x, const char *suffix, int required, double def, int *found) {
    const gguf_kv *kv = kv_arch(x, suffix);
    double v = def;
    if (found) *found = 0;
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

/* num() of a count or a size: a whole number in 0..2^30, else an error naming the key. */
static int inum(meta *x, const char *suffix, int required, int def, int *found) {
    int f = 0;
    double v = num(x, suffix, required, def, &f);
    if (found) *found = f;
    if (f && !(v >= 0 && v <= (double)(1 << 30) && v == floor(v))) {
        fail(x, SL_ECONFIG, "metadata key '%s.%s' is %g, not a count", x->arch, suffix, v);
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
    char nm[200];
    snprintf(nm, sizeof nm, "blk.%d.%s", l, rel);
    return tensor(x, nm);
}

static const char *kv_str(const gguf_file *f, const char *key) {
    const gguf_kv *kv = gguf_kv_find(f, key);
    return kv && kv->type == GGUF_STRING ? kv->str : NULL;
}

sl_status gguf_config_json(const gguf_model *m, char **out, sl_error *err) {
    *out = NULL;
    meta x = {m, &m->files[0], NULL, err, SL_OK};
    x.arch = kv_str(x.f, "general.architecture");
    if (!x.arch) return sl_err(err, SL_ECONFIG, "%s: missing metadata key 'general.architecture'", x.f->path);
    const arch_desc *a = arch_by_gguf(x.arch);
    if (!a)
        return sl_err(err, SL_EUNSUPPORTED, "%s: GGUF architecture '%s' is not supported (supported: %s)", x.f->path,
                      x.arch, arch_gguf_list());
    cJSON *c = cJSON_CreateObject();
    if (!c) return sl_err(err, SL_ENOMEM, "out of memory");
    const gguf_tensor *emb = tensor(&x, "token_embd.weight");
    int n_layers = inum(&x, "block_count", 1, 0, NULL);
    int nextn = inum(&x, "nextn_predict_layers", 0, 0, NULL); /* GLM-4.5's MTP layers, counted in block_count */
    int hidden = inum(&x, "embedding_length", 1, 0, NULL);
    int heads = inum(&x, "attention.head_count", 1, 0, NULL);
    int kvh_found = 0;
    int kv_heads = inum(&x, "attention.head_count_kv", 0, heads, &kvh_found);
    int hd_found = 0;
    int head_dim = inum(&x, "attention.key_length", 0, heads > 0 ? hidden / heads : 0, &hd_found);
    int vl_found = 0;
    int vlen = inum(&x, "attention.value_length", 0, head_dim, &vl_found);
    int experts = inum(&x, "expert_count", 0, 0, NULL);
    int used = inum(&x, "expert_used_count", 0, 0, NULL);
    if (x.st) goto fail;
    if (!emb) { fail(&x, SL_EFORMAT, "tensor 'token_embd.weight' is missing"); goto fail; }
    if (experts < 1) {
        fail(&x, SL_EUNSUPPORTED, "'%s.expert_count' is %s: a dense model, which sluice does not serve (MoE only)",
             x.arch, kv_arch(&x, "expert_count") ? "0" : "missing");
        goto fail;
    }
    if (vlen != head_dim) {
        fail(&x, SL_EUNSUPPORTED, "attention.value_length (%d) differs from key_length (%d)", vlen, head_dim);
        goto fail;
    }
    n_layers -= nextn;
    if (n_layers < 1 || n_layers > SL_MAX_LAYERS) {
        fail(&x, SL_ECONFIG, "'%s.block_count' gives %d layers (1..%d)", x.arch, n_layers, SL_MAX_LAYERS);
        goto fail;
    }
    const char *rt = NULL;
    {
        char k[160];
        snprintf(k, sizeof k, "%s.rope.scaling.type", x.arch);
        rt = kv_str(x.f, k);
    }
    if (rt && strcmp(rt, "none")) {
        fail(&x, SL_EUNSUPPORTED, "rope scaling '%s' is not supported (only none)", rt);
        goto fail;
    }
    double gating = num(&x, "expert_gating_func", 0, 0, NULL); /* 1 softmax, 2 sigmoid */
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
    cJSON_AddNumberToObject(c, "head_dim", head_dim);
    cJSON_AddNumberToObject(c, "max_position_embeddings", num(&x, "context_length", 0, 32768, NULL));
    cJSON_AddNumberToObject(c, "num_experts", experts);
    cJSON_AddNumberToObject(c, "num_experts_per_tok", used);
    cJSON_AddNumberToObject(c, "rms_norm_eps", num(&x, "attention.layer_norm_rms_epsilon", 0, 1e-6, NULL));
    cJSON_AddNumberToObject(c, "rope_theta", num(&x, "rope.freq_base", 0, 10000.0, NULL));
    int rd_found = 0;
    double rot = num(&x, "rope.dimension_count", 0, 0, &rd_found);
    if (rd_found && head_dim > 0) cJSON_AddNumberToObject(c, "partial_rotary_factor", rot / head_dim);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", tensor(&x, "output.weight") == NULL);
    /* the experts' width: the metadata, else ffn_gate_exps of the first MoE layer */
    int l_moe = -1;
    cJSON *dense = cJSON_CreateArray();
    cJSON_AddItemToObject(c, "mlp_only_layers", dense);
    for (int l = 0; l < n_layers; l++) {
        if (blk_tensor(&x, l, "ffn_gate_inp.weight")) {
            if (l_moe < 0) l_moe = l;
        } else cJSON_AddItemToArray(dense, cJSON_CreateNumber(l));
    }
    if (l_moe < 0) { fail(&x, SL_EFORMAT, "no layer has a router (blk.N.ffn_gate_inp.weight)"); goto fail; }
    const gguf_tensor *ge = blk_tensor(&x, l_moe, "ffn_gate_exps.weight");
    int e_found = 0;
    double moe_inter = num(&x, "expert_feed_forward_length", 0, 0, &e_found);
    if (!e_found && a->id == SL_ARCH_MIXTRAL) moe_inter = num(&x, "feed_forward_length", 0, 0, &e_found);
    if (!e_found && ge && ge->n_dims == 3) moe_inter = (double)ge->ne[1], e_found = 1;
    if (!e_found) { fail(&x, SL_ECONFIG, "missing metadata key '%s.expert_feed_forward_length'", x.arch); goto fail; }
    int ff_found = 0;
    double ff = num(&x, "feed_forward_length", 0, 0, &ff_found);
    const gguf_tensor *fg = NULL;
    for (int l = 0; l < n_layers && !fg; l++) fg = blk_tensor(&x, l, "ffn_gate.weight");
    if (fg && fg->n_dims >= 2) ff = (double)fg->ne[1], ff_found = 1; /* the dense layers' width, as stored */
    int wn_found = 0;
    double wnorm = num(&x, "expert_weights_norm", 0, 0, &wn_found);
    int has_qbias = blk_tensor(&x, 0, "attn_q.bias") != NULL;
    int has_qnorm = blk_tensor(&x, 0, "attn_q_norm.weight") != NULL;
    switch (a->id) {
    case SL_ARCH_QWEN3_MOE: case SL_ARCH_QWEN2_MOE:
        cJSON_AddNumberToObject(c, "moe_intermediate_size", moe_inter);
        if (ff_found) cJSON_AddNumberToObject(c, "intermediate_size", ff);
        /* llama.cpp's qwen3moe always renormalises the top-k weights, qwen2moe never; a file may say otherwise */
        cJSON_AddBoolToObject(c, "norm_topk_prob", wn_found ? wnorm != 0 : a->id == SL_ARCH_QWEN3_MOE);
        if (a->id == SL_ARCH_QWEN2_MOE) {
            int sf = 0;
            double sh = num(&x, "expert_shared_feed_forward_length", 0, 0, &sf);
            const gguf_tensor *gs = blk_tensor(&x, l_moe, "ffn_gate_shexp.weight");
            if (!sf && gs && gs->n_dims >= 2) sh = (double)gs->ne[1], sf = 1;
            if (!sf) { fail(&x, SL_ECONFIG, "missing metadata key '%s.expert_shared_feed_forward_length'", x.arch); goto fail; }
            cJSON_AddNumberToObject(c, "shared_expert_intermediate_size", sh);
            cJSON_AddBoolToObject(c, "qkv_bias", has_qbias);
        }
        break;
    case SL_ARCH_OLMOE:
        cJSON_AddNumberToObject(c, "intermediate_size", moe_inter);
        cJSON_AddBoolToObject(c, "norm_topk_prob", wn_found && wnorm != 0);
        break;
    case SL_ARCH_MIXTRAL: {
        cJSON_AddNumberToObject(c, "intermediate_size", moe_inter);
        int sw = 0;
        double w = num(&x, "attention.sliding_window", 0, 0, &sw);
        if (sw && w > 0) cJSON_AddNumberToObject(c, "sliding_window", w);
        break;
    }
    case SL_ARCH_GLM4_MOE: {
        cJSON_AddNumberToObject(c, "moe_intermediate_size", moe_inter);
        if (ff_found) cJSON_AddNumberToObject(c, "intermediate_size", ff);
        cJSON_AddBoolToObject(c, "norm_topk_prob", wn_found ? wnorm != 0 : 1);
        cJSON_AddNumberToObject(c, "n_shared_experts", num(&x, "expert_shared_count", 0, 1, NULL));
        cJSON_AddNumberToObject(c, "routed_scaling_factor", num(&x, "expert_weights_scale", 0, 1.0, NULL));
        cJSON_AddNumberToObject(c, "n_group", num(&x, "expert_group_count", 0, 1, NULL));
        cJSON_AddNumberToObject(c, "topk_group", num(&x, "expert_group_used_count", 0, 1, NULL));
        int first_dense = 0;
        while (first_dense < n_layers && !blk_tensor(&x, first_dense, "ffn_gate_inp.weight")) first_dense++;
        cJSON_AddNumberToObject(c, "first_k_dense_replace", num(&x, "leading_dense_block_count", 0, first_dense, NULL));
        cJSON_AddBoolToObject(c, "attention_bias", has_qbias);
        cJSON_AddBoolToObject(c, "use_qk_norm", has_qnorm);
        if (!rd_found) cJSON_AddNumberToObject(c, "partial_rotary_factor", 0.5);
        break;
    }
    default:
        fail(&x, SL_EUNSUPPORTED, "GGUF import of %s is not implemented", a->name);
        goto fail;
    }
    if (x.st) goto fail;
    (void)kvh_found;
    (void)hd_found;
    *out = cJSON_PrintUnformatted(c);
    cJSON_Delete(c);
    return *out ? SL_OK : sl_err(err, SL_ENOMEM, "out of memory");
fail:
    cJSON_Delete(c);
    return x.st;
}

/* ---- tokenizer ------------------------------------------------------------------------------------ */

/* tokenizer.ggml.pre -> the Split regex of the pre-tokenizer (llama.cpp src/llama-vocab.cpp, the regex of each
 * pre-tokenizer type; they are the HF tokenizers' Split patterns). NFC: the HF tokenizer's normalizer. */
static const struct {
    const char *pre, *regex;
    int nfc;
} PRE[] = {
    {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
              "\\s+(?!\\S)|\\s+", 1},
    {"llama-bpe", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                  "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", 0},
    {"gpt-2", NULL, 0}, /* ByteLevel's own GPT-2 regex */
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
        return sl_err(err, SL_EUNSUPPORTED, "%s: tokenizer.ggml.pre '%s' is not supported (supported: qwen2, llama-bpe, "
                      "gpt-2)", f->path, pre);
    char **toks = tk->arr, **merges = mg->arr;
    cJSON *root = cJSON_CreateObject(), *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON_AddStringToObject(root, "version", "1.0");
    if (PRE[pi].nfc) cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "normalizer"), "type", "NFC");
    else cJSON_AddNullToObject(root, "normalizer");
    cJSON *pt = cJSON_AddObjectToObject(root, "pre_tokenizer");
    if (PRE[pi].regex) {
        cJSON_AddStringToObject(pt, "type", "Sequence");
        cJSON *l = cJSON_AddArrayToObject(pt, "pretokenizers"), *sp = cJSON_CreateObject(), *bl = cJSON_CreateObject();
        cJSON_AddItemToArray(l, sp);
        cJSON_AddItemToArray(l, bl);
        cJSON_AddStringToObject(sp, "type", "Split");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(sp, "pattern"), "Regex", PRE[pi].regex);
        cJSON_AddStringToObject(sp, "behavior", "Isolated");
        cJSON_AddFalseToObject(sp, "invert");
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
    cJSON_AddFalseToObject(mo, "ignore_merges");
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
