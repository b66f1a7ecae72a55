/*
 * gguf_tokenizer.c — a GGUF model's tokenizer as the Hugging Face files sluice reads: tokenizer.json and
 * tokenizer_config.json rebuilt from tokenizer.ggml.* and tokenizer.chat_template (gpt2 byte-level BPE; gemma4's
 * "▁"-for-space BPE with byte tokens), so the
 * container holds the tokenizer as a safetensors pack does (text/tokenizer.c reads it). See import/gguf.h.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "import/gguf.h"
#include "util/err.h"

/* tokenizer.ggml.pre -> the Split regexes of the HF pre-tokenizer, applied in turn (a Sequence), then ByteLevel
 * without its own regex (llama.cpp src/llama-vocab.cpp lists each type's regexes; these are the HF tokenizers'
 * originals it adapts, from the models' tokenizer.json). NFC: the HF tokenizer's normalizer (llama.cpp applies
 * none: docs/TEXT.md "Checked against llama.cpp"); ignore_merges as llama.cpp sets it for the type. */
#define LLAMA3_RE                                                                                                 \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|" \
    "\\s+(?!\\S)|\\s+"
#define O200K_RE                                                                                                  \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|" \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|" \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define K2_UPPER "(?:(?!\\p{Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])"
#define K2_LOWER "(?:(?!\\p{Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])"
#define KIMI_K2_RE                                                                                                \
    "[\\p{Han}]+|[^\\r\\n\\p{L}\\p{N}]?" K2_UPPER "*" K2_LOWER "+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"                      \
    "[^\\r\\n\\p{L}\\p{N}]?" K2_UPPER "+" K2_LOWER "*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"                                \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
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
    {"lfm2", {LLAMA3_RE}, 0, 1}, /* LFM2 / LFM2-MoE (llama.cpp: the LLAMA3 type) */
    /* gpt-oss (o200k): llama.cpp's gpt-4o; Llama 4's llama4 is the same type there */
    {"gpt-4o", {O200K_RE}, 0, 0},
    {"llama4", {O200K_RE}, 0, 0},
    /* DeepSeek-V3 / R1: digits in runs of 1-3, CJK runs, then its own regex */
    {"deepseek-v3", {"\\p{N}{1,3}", "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+",
                     "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}"
                     "\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}, 0, 0},
    /* Kimi K2 / Kimi Linear (tokenization_kimi.py's tiktoken pattern, llama.cpp unicode.cpp
     * unicode_regex_split_custom_kimi_k2): o200k's with Han runs apart and out of the letter classes (its
     * "[...&&[^\p{Han}]]" intersections, which PCRE2 lacks, as a lookahead before each class) */
    {"kimi-k2", {KIMI_K2_RE}, 0, 0},
    {"gpt-2", {NULL}, 0, 0}, /* ByteLevel's own GPT-2 regex */
    {"olmo", {NULL}, 0, 0},  /* OLMoE: GPT-NeoX's BPE, the GPT-2 regex */
};

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

static int64_t kv_id(const gguf_file *f, const char *key) {
    const gguf_kv *kv = gguf_kv_find(f, key);
    double v;
    return kv && gguf_kv_num(kv, &v) && v >= 0 && v < 4e18 ? (int64_t)v : -1;
}

/* normalizer, pre_tokenizer and decoder of a gpt2 byte-level BPE under tokenizer.ggml.pre's entry pi */
static void byte_level_pipeline(cJSON *root, int pi) {
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
    cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "decoder"), "type", "ByteLevel");
}

/* Gemma 4's (tokenizer.ggml.model gemma4: llama.cpp's BPE over "▁"-for-space pieces with byte tokens; conversion/
 * gemma.py Gemma4Model.set_vocab): the pipeline of transformers' GemmaTokenizer (models/gemma/tokenization_gemma.py)
 * that text/tok_spm.c reads: spaces -> U+2581, BPE with byte_fallback and fuse_unk, the decoder's Replace,
 * ByteFallback, Fuse */
static void gemma4_pipeline(cJSON *root, cJSON *mo, const char *unk) {
    static const char R[] = "\xe2\x96\x81";
    cJSON *n = cJSON_AddObjectToObject(root, "normalizer");
    cJSON_AddStringToObject(n, "type", "Replace");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(n, "pattern"), "String", " ");
    cJSON_AddStringToObject(n, "content", R);
    cJSON_AddNullToObject(root, "pre_tokenizer");
    cJSON *d = cJSON_AddObjectToObject(root, "decoder"), *l = cJSON_AddArrayToObject(d, "decoders");
    cJSON_AddStringToObject(d, "type", "Sequence");
    cJSON *rp = cJSON_CreateObject(), *bf = cJSON_CreateObject(), *fu = cJSON_CreateObject();
    cJSON_AddStringToObject(rp, "type", "Replace");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(rp, "pattern"), "String", R);
    cJSON_AddStringToObject(rp, "content", " ");
    cJSON_AddStringToObject(bf, "type", "ByteFallback");
    cJSON_AddStringToObject(fu, "type", "Fuse");
    cJSON_AddItemToArray(l, rp);
    cJSON_AddItemToArray(l, bf);
    cJSON_AddItemToArray(l, fu);
    cJSON_AddTrueToObject(mo, "byte_fallback");
    cJSON_AddTrueToObject(mo, "fuse_unk");
    if (unk) cJSON_AddStringToObject(mo, "unk_token", unk);
}

/* tokenizer.ggml.pre's PRE entry (gpt2 models) into *pi */
static sl_status pre_index(const gguf_file *f, int *pi, sl_error *err) {
    const char *pre = gguf_kv_str(f, "tokenizer.ggml.pre");
    if (!pre) pre = "gpt-2";
    for (size_t i = 0; i < sizeof PRE / sizeof *PRE; i++)
        if (!strcmp(PRE[i].pre, pre)) {
            *pi = (int)i;
            return SL_OK;
        }
    return err_set(err, SL_EUNSUPPORTED, "%s: tokenizer.ggml.pre '%s' is not supported (supported: qwen2, qwen35, "
                   "llama-bpe, glm4, lfm2, gpt-4o, llama4, deepseek-v3, kimi-k2, gpt-2, olmo)", f->path, pre);
}

static sl_status config_json(const gguf_file *f, const gguf_kv *tk, char **cfg);

sl_status gguf_tokenizer_json(const gguf_model *m, char **tok, char **cfg, sl_error *err) {
    *tok = *cfg = NULL;
    const gguf_file *f = &m->files[0];
    const char *model = gguf_kv_str(f, "tokenizer.ggml.model");
    if (!model) return SL_OK;
    const int gemma4 = !strcmp(model, "gemma4");
    if (strcmp(model, "gpt2") && !gemma4)
        return err_set(err, SL_EUNSUPPORTED, "%s: tokenizer.ggml.model '%s' is not supported (gpt2 byte-level BPE, "
                      "gemma4)", f->path, model);
    const gguf_kv *tk = gguf_kv_find(f, "tokenizer.ggml.tokens"), *mg = gguf_kv_find(f, "tokenizer.ggml.merges");
    const gguf_kv *ty = gguf_kv_find(f, "tokenizer.ggml.token_type");
    if (!tk || tk->type != GGUF_ARRAY || tk->arr_type != GGUF_STRING)
        return err_set(err, SL_EFORMAT, "%s: tokenizer.ggml.tokens is missing or not an array of strings", f->path);
    if (!mg || mg->type != GGUF_ARRAY || mg->arr_type != GGUF_STRING)
        return err_set(err, SL_EFORMAT, "%s: tokenizer.ggml.merges is missing or not an array of strings", f->path);
    if (ty && (ty->type != GGUF_ARRAY || ty->arr_type != GGUF_I32 || ty->n != tk->n))
        return err_set(err, SL_EFORMAT, "%s: tokenizer.ggml.token_type must be an i32 array of one entry per token", f->path);
    int pi = 0;
    sl_status st = gemma4 ? SL_OK : pre_index(f, &pi, err);
    if (st) return st;
    char **toks = tk->arr, **merges = mg->arr;
    const char *unk = NULL;
    cJSON *root = cJSON_CreateObject(), *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON *mo = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(mo, "type", "BPE");
    cJSON_AddBoolToObject(mo, "ignore_merges", !gemma4 && PRE[pi].ignore_merges);
    cJSON *vocab = cJSON_AddObjectToObject(mo, "vocab"), *ml = cJSON_AddArrayToObject(mo, "merges");
    for (uint64_t i = 0; i < tk->n; i++) {
        int t = ty ? (int32_t)((const uint32_t *)ty->arr)[i] : TT_NORMAL;
        if (t == TT_UNUSED || !toks[i][0]) continue; /* the converter's [PADn] fillers */
        if (t == TT_UNKNOWN && !unk) unk = toks[i];
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
    if (gemma4) gemma4_pipeline(root, mo, unk);
    else byte_level_pipeline(root, pi);
    for (uint64_t i = 0; i < mg->n; i++) cJSON_AddItemToArray(ml, cJSON_CreateString(merges[i]));
    *tok = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!*tok || config_json(f, tk, cfg)) {
        free(*tok);
        free(*cfg);
        *tok = *cfg = NULL;
        return err_set(err, SL_ENOMEM, "out of memory");
    }
    return SL_OK;
}

/* tokenizer_config.json: the chat template, eos / bos / pad tokens, add_bos_token */
static sl_status config_json(const gguf_file *f, const gguf_kv *tk, char **cfg) {
    char **toks = tk->arr;
    cJSON *c = cJSON_CreateObject();
    const char *tmpl = gguf_kv_str(f, "tokenizer.chat_template");
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
    return *cfg ? SL_OK : SL_ENOMEM;
}
