/*
 * gguf_tokenizer.c — a GGUF model's tokenizer as the Hugging Face files sluice reads: tokenizer.json and
 * tokenizer_config.json rebuilt from tokenizer.ggml.* and tokenizer.chat_template (gpt2 byte-level BPE; gemma4's
 * "▁"-for-space BPE with byte tokens; llama's SentencePiece with scores, as
 * BPE merges), so the
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
#define K2_UPPER "(?:(?!\\p{sc:Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])"
#define K2_LOWER "(?:(?!\\p{sc:Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])"
#define KIMI_K2_RE                                                                                                \
    "\\p{sc:Han}+|[^\\r\\n\\p{L}\\p{N}]?" K2_UPPER "*" K2_LOWER "+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"                      \
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
     * "[...&&[^\p{Han}]]" intersections, which PCRE2 lacks, as a lookahead before each class; \p{sc:Han}: the Han
     * script, as Oniguruma, tiktoken and llama.cpp take it, not PCRE2's default Script_Extensions, which puts "。" in it) */
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

/* llama.cpp's SentencePiece (tokenizer.ggml.model llama: Llama 2, Mistral / Mixtral, Gemma 1-3; conversion/base.py
 * _set_vocab_sentencepiece) as transformers' LlamaConverter rebuilds it (convert_slow_tokenizer.py): spaces -> U+2581
 * with one prepended to each piece between added tokens when add_space_prefix (llama.cpp's llm_tokenizer_spm_session
 * prefixes the text and whatever follows a special token), BPE with byte_fallback, the decoder's Replace,
 * ByteFallback, Fuse and Strip of the prefix */
static void llama_pipeline(cJSON *root, cJSON *mo, const char *unk, int prefix) {
    static const char R[] = "\xe2\x96\x81";
    gemma4_pipeline(root, mo, unk);
    cJSON_DeleteItemFromObject(root, "normalizer"); /* gemma4's Replace alone: a Sequence with the Prepend instead */
    cJSON *n = cJSON_AddObjectToObject(root, "normalizer"), *nl = cJSON_AddArrayToObject(n, "normalizers");
    cJSON_AddStringToObject(n, "type", "Sequence");
    cJSON *pp = cJSON_CreateObject(), *rp = cJSON_CreateObject();
    cJSON_AddStringToObject(pp, "type", "Prepend");
    cJSON_AddStringToObject(pp, "prepend", R);
    cJSON_AddStringToObject(rp, "type", "Replace");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(rp, "pattern"), "String", " ");
    cJSON_AddStringToObject(rp, "content", R);
    if (prefix) cJSON_AddItemToArray(nl, pp);
    else cJSON_Delete(pp);
    cJSON_AddItemToArray(nl, rp);
    if (prefix) {
        cJSON *st = cJSON_CreateObject();
        cJSON_AddStringToObject(st, "type", "Strip");
        cJSON_AddStringToObject(st, "content", " ");
        cJSON_AddNumberToObject(st, "start", 1);
        cJSON_AddNumberToObject(st, "stop", 0);
        cJSON_AddItemToArray(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "decoder"), "decoders"), st);
    }
}

typedef struct {
    const char *s;
    size_t n;
    int32_t id;
} spm_piece;
typedef struct {
    float score;
    int32_t id, l, r;
} spm_merge;

static int piece_cmp(const void *a, const void *b) {
    const spm_piece *x = a, *y = b;
    const int c = memcmp(x->s, y->s, x->n < y->n ? x->n : y->n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

static int merge_cmp(const void *a, const void *b) {
    const spm_merge *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return (x->l > y->l) - (x->l < y->l);
}

static int32_t piece_find(const spm_piece *v, size_t n, const char *s, size_t len) {
    const spm_piece key = {s, len, 0}, *p = bsearch(&key, v, n, sizeof *v, piece_cmp);
    return p ? p->id : -1;
}

/* The BPE merges of a vocabulary with scores (the tokens of the BPE vocabulary: in_vocab[i]): every split of a token,
 * at a character boundary, into two tokens, ranked by the token's score, highest first (transformers'
 * tokenization_utils_base.py generate_merges with vocab_scores). llama.cpp's llm_tokenizer_spm merges the adjacent
 * pair whose concatenation is the highest-scored token, so BPE by these ranks merges the same pairs in the same
 * order: the splits of one token cover the same characters and never compete; tokens of equal score are ranked by
 * id, where llama.cpp takes the leftmost pair (SentencePiece scores its merged pieces apart). Appended to ml as
 * ["a", "b"] pairs; -1 when out of memory. */
static int spm_merges(const gguf_kv *tk, const float *scores, const uint8_t *in_vocab, cJSON *ml) {
    char **toks = tk->arr;
    spm_piece *v = malloc((tk->n + 1) * sizeof *v);
    spm_merge *m = NULL;
    size_t nv = 0, nm = 0, cap = 0;
    int rc = -1;
    if (!v) return -1;
    for (uint64_t i = 0; i < tk->n; i++)
        if (in_vocab[i]) v[nv++] = (spm_piece){toks[i], (size_t)tk->lens[i], (int32_t)i};
    qsort(v, nv, sizeof *v, piece_cmp);
    for (size_t k = 0; k < nv; k++)
        for (size_t j = 1; j < v[k].n; j++) {
            if (((unsigned char)v[k].s[j] & 0xC0) == 0x80) continue; /* inside a character */
            const int32_t l = piece_find(v, nv, v[k].s, j), r = l < 0 ? -1 : piece_find(v, nv, v[k].s + j, v[k].n - j);
            if (r < 0) continue;
            if (nm == cap) {
                spm_merge *g = realloc(m, (cap = cap ? 2 * cap : 1024) * sizeof *m);
                if (!g) goto out;
                m = g;
            }
            m[nm++] = (spm_merge){scores[v[k].id], v[k].id, l, r};
        }
    if (nm) qsort(m, nm, sizeof *m, merge_cmp);
    for (size_t k = 0; k < nm; k++) {
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(ml, pair);
        cJSON_AddItemToArray(pair, cJSON_CreateString(toks[m[k].l]));
        cJSON_AddItemToArray(pair, cJSON_CreateString(toks[m[k].r]));
    }
    rc = 0;
out:
    free(m);
    free(v);
    return rc;
}

/* tokenizer.ggml.pre's PRE entry (gpt2 models) into *pi */
int gguf_pre_pipeline(struct cJSON *root, const char *pre) {
    for (size_t i = 0; i < sizeof PRE / sizeof *PRE; i++)
        if (!strcmp(PRE[i].pre, pre)) {
            byte_level_pipeline(root, (int)i);
            return 0;
        }
    return -1;
}

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

/* The tokens into the BPE vocabulary (in_vocab[i] set) or added_tokens (control: special; user-defined); the
 * converter's unused fillers nowhere; the first unknown-type token into *unk. */
static void vocab_json(const gguf_kv *tk, const gguf_kv *ty, cJSON *vocab, cJSON *added, uint8_t *in_vocab,
                       const char **unk) {
    char **toks = tk->arr;
    for (uint64_t i = 0; i < tk->n; i++) {
        int t = ty ? (int32_t)((const uint32_t *)ty->arr)[i] : TT_NORMAL;
        if (t == TT_UNUSED || !toks[i][0]) continue; /* the converter's [PADn] fillers */
        if (t == TT_UNKNOWN && !*unk) *unk = toks[i];
        if (t == TT_CONTROL || t == TT_USER) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "id", (double)i);
            cJSON_AddStringToObject(o, "content", toks[i]);
            cJSON_AddBoolToObject(o, "special", t == TT_CONTROL);
            cJSON_AddItemToArray(added, o);
        } else {
            cJSON_AddNumberToObject(vocab, toks[i], (double)i);
            in_vocab[i] = 1;
        }
    }
}

/* The tokenizer.ggml.* arrays: tokens (strings), merges (strings; gpt2 and gemma4), token_type (i32), scores (f32;
 * llama), one per token where per token; an error naming the first that is not so. */
static sl_status tokenizer_arrays(const gguf_file *f, int llama, const gguf_kv **tk, const gguf_kv **mg,
                                  const gguf_kv **ty, const gguf_kv **sc, sl_error *err) {
    *tk = gguf_kv_find(f, "tokenizer.ggml.tokens");
    *mg = gguf_kv_find(f, "tokenizer.ggml.merges");
    *ty = gguf_kv_find(f, "tokenizer.ggml.token_type");
    *sc = gguf_kv_find(f, "tokenizer.ggml.scores");
    if (!*tk || (*tk)->type != GGUF_ARRAY || (*tk)->arr_type != GGUF_STRING)
        return err_set(err, SL_EFORMAT, "%s: tokenizer.ggml.tokens is missing or not an array of strings", f->path);
    if (!llama && (!*mg || (*mg)->type != GGUF_ARRAY || (*mg)->arr_type != GGUF_STRING))
        return err_set(err, SL_EFORMAT, "%s: tokenizer.ggml.merges is missing or not an array of strings", f->path);
    if (*ty && ((*ty)->type != GGUF_ARRAY || (*ty)->arr_type != GGUF_I32 || (*ty)->n != (*tk)->n))
        return err_set(err, SL_EFORMAT, "%s: tokenizer.ggml.token_type must be an i32 array of one entry per token", f->path);
    if (llama && (!*sc || (*sc)->type != GGUF_ARRAY || (*sc)->arr_type != GGUF_F32 || (*sc)->n != (*tk)->n))
        return err_set(err, SL_EFORMAT, "%s: tokenizer.ggml.scores must be an f32 array of one entry per token (a "
                       "SentencePiece vocabulary, tokenizer.ggml.model llama)", f->path);
    return SL_OK;
}

sl_status gguf_tokenizer_json(const gguf_model *m, char **tok, char **cfg, sl_error *err) {
    *tok = *cfg = NULL;
    const gguf_file *f = &m->files[0];
    const char *model = gguf_kv_str(f, "tokenizer.ggml.model");
    if (!model) return SL_OK;
    const int gemma4 = !strcmp(model, "gemma4"), llama = !strcmp(model, "llama");
    if (strcmp(model, "gpt2") && !gemma4 && !llama)
        return err_set(err, SL_EUNSUPPORTED, "%s: tokenizer.ggml.model '%s' is not supported (gpt2 byte-level BPE, "
                      "gemma4, llama SentencePiece)", f->path, model);
    const gguf_kv *tk, *mg, *ty, *sc;
    int pi = 0;
    sl_status st = tokenizer_arrays(f, llama, &tk, &mg, &ty, &sc, err);
    if (!st && !gemma4 && !llama) st = pre_index(f, &pi, err);
    if (st) return st;
    uint8_t *in_vocab = calloc(tk->n + 1, 1);
    if (!in_vocab) return err_set(err, SL_ENOMEM, "out of memory");
    const char *unk = NULL;
    cJSON *root = cJSON_CreateObject(), *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON *mo = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(mo, "type", "BPE");
    cJSON_AddBoolToObject(mo, "ignore_merges", !gemma4 && !llama && PRE[pi].ignore_merges);
    cJSON *vocab = cJSON_AddObjectToObject(mo, "vocab"), *ml = cJSON_AddArrayToObject(mo, "merges");
    vocab_json(tk, ty, vocab, added, in_vocab, &unk);
    int bad = 0;
    if (llama) {
        const gguf_kv *sp = gguf_kv_find(f, "tokenizer.ggml.add_space_prefix"); /* llama.cpp's default: true */
        llama_pipeline(root, mo, unk, !sp || sp->type != GGUF_BOOL || sp->v.u);
        bad = spm_merges(tk, (const float *)sc->arr, in_vocab, ml); /* raw little-endian f32, as the host's */
    } else {
        if (gemma4) gemma4_pipeline(root, mo, unk);
        else byte_level_pipeline(root, pi);
        for (uint64_t i = 0; i < mg->n; i++) cJSON_AddItemToArray(ml, cJSON_CreateString(((char **)mg->arr)[i]));
    }
    free(in_vocab);
    *tok = bad ? NULL : cJSON_PrintUnformatted(root);
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
