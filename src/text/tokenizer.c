/*
 * tokenizer.c — loading an HF tokenizer.json (byte-level BPE; SentencePiece-style BPE through tok_spm.c) and
 * encoding text to ids.
 *
 * Sections: hash maps (string -> id, pair -> merge) · ByteLevel tables · loading (tokenizer.json,
 * tokenizer_config.json, from a file or a .sluice container) · encoding (added tokens, NFC, Split regex,
 * BPE with a per-pre-token cache) · small accessors.
 *
 * Supported tokenizer.json shapes (anything else is SL_EUNSUPPORTED with the field named):
 *   model BPE (merges as "a b" strings or ["a","b"] pairs; ignore_merges honoured), normalizer null, NFC or a
 *   Sequence of NFCs (empty: none),
 *   pre_tokenizer ByteLevel (use_regex: GPT-2 regex) or Sequence[Split(Regex, Isolated)..., ByteLevel] (each Split
 *   splits the pieces of the one before: Qwen has one, DeepSeek-V3 three),
 *   decoder ByteLevel. Added tokens' lstrip / rstrip / single_word flags are not applied (Qwen sets none).
 * A tokenizer.json with nothing ByteLevel is a SentencePiece-style BPE (Gemma's): text/tok_spm.c reads its
 * normalizer, pre-tokenizer and decoder, makes its pieces' bytes and first symbols, and merges its words.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "format/container.h"
#include "import/gguf.h"
#include "text/tok_internal.h"
#include "util/err.h"
#include "util/fileio.h"

static const char GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---- hash maps ---------------------------------------------------------------------------------- */

static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ULL;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

int smap_init(smap *m, size_t expect) {
    size_t cap = 16;
    while (cap < expect * 2) cap *= 2;
    m->e = calloc(cap, sizeof *m->e);
    m->cap = cap;
    m->n = 0;
    return m->e ? 0 : -1;
}

void smap_free(smap *m) {
    free(m->e);
    free(m->keys.p);
    memset(m, 0, sizeof *m);
}

void smap_clear(smap *m) {
    memset(m->e, 0, m->cap * sizeof *m->e);
    m->n = 0;
    m->keys.n = 0;
}

int32_t smap_get(const smap *m, const char *k, size_t n) {
    uint64_t h = hash_bytes(k, n) | 1;
    for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        const smap_ent *e = &m->e[i];
        if (!e->h) return -1;
        if (e->h == h && e->len == n && !memcmp(m->keys.p + e->off, k, n)) return e->val;
    }
}

static int smap_grow(smap *m) {
    smap_ent *old = m->e;
    size_t oc = m->cap;
    m->e = calloc(oc * 2, sizeof *m->e);
    if (!m->e) { m->e = old; return -1; }
    m->cap = oc * 2;
    for (size_t j = 0; j < oc; j++) {
        if (!old[j].h) continue;
        size_t i = old[j].h & (m->cap - 1);
        while (m->e[i].h) i = (i + 1) & (m->cap - 1);
        m->e[i] = old[j];
    }
    free(old);
    return 0;
}

/* Inserts or overwrites. Returns 0 or -1 (out of memory). */
int smap_put(smap *m, const char *k, size_t n, int32_t val) {
    if ((m->n + 1) * 2 > m->cap && smap_grow(m)) return -1;
    uint64_t h = hash_bytes(k, n) | 1;
    size_t i = h & (m->cap - 1);
    for (;; i = (i + 1) & (m->cap - 1)) {
        smap_ent *e = &m->e[i];
        if (!e->h) break;
        if (e->h == h && e->len == n && !memcmp(m->keys.p + e->off, k, n)) { e->val = val; return 0; }
    }
    size_t off = m->keys.n;
    if (tok_buf_put(&m->keys, k, n)) return -1;
    m->e[i] = (smap_ent){h, (uint32_t)off, (uint32_t)n, val};
    m->n++;
    return 0;
}

static int pmap_put(tok_pmap *m, int32_t a, int32_t b, int32_t rank, int32_t id) {
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (size_t i = hash_u64(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->e[i].used) { m->e[i] = (tok_pent){k, rank, id, 1}; return 0; }
        if (m->e[i].key == k) return 0; /* a duplicate merge keeps its first (lowest) rank */
    }
}

static inline const tok_pent *pmap_get(const tok_pmap *m, int32_t a, int32_t b) {
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (size_t i = hash_u64(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->e[i].used) return NULL;
        if (m->e[i].key == k) return &m->e[i];
    }
}

const tok_pent *tok_merge_of(const sl_tokenizer *t, int32_t a, int32_t b) { return pmap_get(&t->merges, a, b); }

/* ---- ByteLevel (GPT-2 bytes_to_unicode) --------------------------------------------------------- */

static void byte_level_tables(uint32_t b2u[256], int16_t u2b[512]) {
    int n = 0;
    for (int i = 0; i < 512; i++) u2b[i] = -1;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        b2u[b] = keep ? (uint32_t)b : (uint32_t)(256 + n++);
        u2b[b2u[b]] = (int16_t)b;
    }
}

static size_t put_cp(char *o, uint32_t c) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xC0 | (c >> 6)); o[1] = (char)(0x80 | (c & 0x3F)); return 2; }
    o[0] = (char)(0xE0 | (c >> 12));
    o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[2] = (char)(0x80 | (c & 0x3F));
    return 3;
}

/* Token string (byte-level alphabet) -> raw bytes, appended to out. Characters outside the alphabet
 * are copied as UTF-8 (added tokens). */
static int byte_level_decode(const int16_t u2b[512], const char *s, tok_buf *out) {
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)s;
    size_t n = strlen(s), i = 0;
    while (i < n) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate(p + i, (utf8proc_ssize_t)(n - i), &c);
        if (k <= 0) { if (tok_buf_put(out, s + i, 1)) return -1; i++; continue; }
        if (c >= 0 && c < 512 && u2b[c] >= 0) {
            char b = (char)u2b[c];
            if (tok_buf_put(out, &b, 1)) return -1;
        } else if (tok_buf_put(out, s + i, (size_t)k)) return -1;
        i += (size_t)k;
    }
    return 0;
}

/* ---- loading ------------------------------------------------------------------------------------ */

void sl_tokenizer_free(sl_tokenizer *t) {
    if (!t) return;
    smap_free(&t->vocab);
    smap_free(&t->cache);
    free(t->cache_ids.p);
    free(t->merges.e);
    free(t->dec.p);
    free(t->dec_off);
    free(t->flags);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].s);
    free(t->added);
    for (int i = 0; i < t->n_re; i++) pcre2_code_free(t->re[i]);
    free(t->chat_template);
    free(t->eos_text);
    free(t->bos_text);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

static int added_cmp(const void *a, const void *b) {
    const tok_added *x = a, *y = b;
    return x->len < y->len ? 1 : x->len > y->len ? -1 : 0;
}

static sl_status compile_split(sl_tokenizer *t, const char *pattern, sl_error *err) {
    if (t->n_re == TOK_MAX_SPLITS)
        return err_set(err, SL_EUNSUPPORTED, "tokenizer.json: more than %d Split pre-tokenizers", TOK_MAX_SPLITS);
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return err_set(err, SL_EUNSUPPORTED, "tokenizer.json: pre-tokenizer regex at offset %zu: %s", (size_t)eo,
                      (char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: the interpreter is the fallback */
    t->re[t->n_re++] = re;
    return SL_OK;
}

/* ByteLevel, or a Sequence of Split(Regex, Isolated) pre-tokenizers (each splitting the pieces of the one
 * before, as HF's Sequence does: Qwen has one, DeepSeek-V3 three) and a ByteLevel last. */
static sl_status load_pre_tokenizer(sl_tokenizer *t, const cJSON *pt, sl_error *err) {
    int byte_level = 0;
    const cJSON *type = cJSON_GetObjectItem(pt, "type");
    if (!cJSON_IsString(type)) return err_set(err, SL_EUNSUPPORTED, "tokenizer.json: pre_tokenizer has no type");
    const cJSON *list = NULL;
    if (!strcmp(type->valuestring, "Sequence")) list = cJSON_GetObjectItem(pt, "pretokenizers");
    int n = list ? cJSON_GetArraySize(list) : 1;
    for (int i = 0; i < n; i++) {
        const cJSON *p = list ? cJSON_GetArrayItem(list, i) : pt;
        const char *ty = cJSON_GetStringValue(cJSON_GetObjectItem(p, "type"));
        if (!ty) return err_set(err, SL_EUNSUPPORTED, "tokenizer.json: pre_tokenizer without a type");
        if (byte_level) return err_set(err, SL_EUNSUPPORTED, "tokenizer.json: pre_tokenizer '%s' after ByteLevel is not supported", ty);
        if (!strcmp(ty, "Split")) {
            const cJSON *pat = cJSON_GetObjectItem(p, "pattern");
            const char *re = cJSON_GetStringValue(cJSON_GetObjectItem(pat, "Regex"));
            const char *beh = cJSON_GetStringValue(cJSON_GetObjectItem(p, "behavior"));
            if (!re || (beh && strcmp(beh, "Isolated")) || cJSON_IsTrue(cJSON_GetObjectItem(p, "invert")))
                return err_set(err, SL_EUNSUPPORTED, "tokenizer.json: only Split pre-tokenizers with a Regex "
                                                    "pattern, behavior Isolated and invert false are supported");
            sl_status st = compile_split(t, re, err);
            if (st) return st;
        } else if (!strcmp(ty, "ByteLevel")) {
            byte_level = 1;
            if (cJSON_IsTrue(cJSON_GetObjectItem(p, "add_prefix_space")))
                return err_set(err, SL_EUNSUPPORTED, "tokenizer.json: ByteLevel add_prefix_space is not supported");
            if (!cJSON_IsFalse(cJSON_GetObjectItem(p, "use_regex"))) { /* the GPT-2 regex, on the pieces so far */
                sl_status st = compile_split(t, GPT2_REGEX, err);
                if (st) return st;
            }
        } else return err_set(err, SL_EUNSUPPORTED, "tokenizer.json: pre_tokenizer '%s' is not supported", ty);
    }
    if (!byte_level) return err_set(err, SL_EUNSUPPORTED, "tokenizer.json: only ByteLevel BPE tokenizers are supported");
    return SL_OK;
}

static int set_piece(sl_tokenizer *t, int32_t id, const char *s, int raw, const int16_t *u2b) {
    /* pieces are appended in id order by the caller, so dec_off[id] is the current end */
    (void)id;
    if (t->spm) return tok_spm_piece(t, s, raw, &t->dec);
    return raw ? tok_buf_puts(&t->dec, s) : byte_level_decode(u2b, s, &t->dec);
}

static sl_status load_model(sl_tokenizer *t, const cJSON *root, sl_error *err) {
    const cJSON *model = cJSON_GetObjectItem(root, "model");
    const char *mt = cJSON_GetStringValue(cJSON_GetObjectItem(model, "type"));
    if (!model || (mt && strcmp(mt, "BPE")))
        return err_set(err, SL_EUNSUPPORTED, "tokenizer.json: model type '%s' is not supported (BPE only)", mt ? mt : "?");
    const cJSON *vocab = cJSON_GetObjectItem(model, "vocab"), *merges = cJSON_GetObjectItem(model, "merges");
    const cJSON *added = cJSON_GetObjectItem(root, "added_tokens");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges))
        return err_set(err, SL_EFORMAT, "tokenizer.json: model.vocab must be an object and model.merges an array");
    t->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItem(model, "ignore_merges"));
    /* ids: vocab and added tokens; the vocabulary size is the largest id + 1 */
    int max_id = -1, n_v = cJSON_GetArraySize(vocab), n_a = cJSON_GetArraySize(added);
    const char **strs = NULL;
    sl_status st = SL_OK;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 1e8)
            return err_set(err, SL_EFORMAT, "tokenizer.json: vocab entry '%s' has a bad id", e->string);
        if (e->valueint > max_id) max_id = e->valueint;
    }
    for (int i = 0; i < n_a; i++) {
        const cJSON *a = cJSON_GetArrayItem(added, i), *id = cJSON_GetObjectItem(a, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 1e8 ||
            !cJSON_IsString(cJSON_GetObjectItem(a, "content")))
            return err_set(err, SL_EFORMAT, "tokenizer.json: added_tokens[%d] needs an id and a content", i);
        if (id->valueint > max_id) max_id = id->valueint;
    }
    t->n_vocab = max_id + 1;
    strs = calloc((size_t)t->n_vocab, sizeof *strs);
    t->flags = calloc((size_t)t->n_vocab, 1);
    t->dec_off = malloc(((size_t)t->n_vocab + 1) * sizeof *t->dec_off);
    t->added = calloc((size_t)n_a + 1, sizeof *t->added);
    if (!strs || !t->flags || !t->dec_off || !t->added || smap_init(&t->vocab, (size_t)(n_v + n_a)))
        { st = err_set(err, SL_ENOMEM, "out of memory"); goto out; }
    for (const cJSON *e = vocab->child; e; e = e->next) {
        strs[e->valueint] = e->string;
        if (smap_put(&t->vocab, e->string, strlen(e->string), e->valueint)) { st = err_set(err, SL_ENOMEM, "out of memory"); goto out; }
    }
    for (int i = 0; i < n_a; i++) {
        const cJSON *a = cJSON_GetArrayItem(added, i);
        int id = cJSON_GetObjectItem(a, "id")->valueint;
        const char *s = cJSON_GetObjectItem(a, "content")->valuestring;
        if (!*s) continue;
        strs[id] = s;
        t->flags[id] |= TOK_ADDED | (cJSON_IsTrue(cJSON_GetObjectItem(a, "special")) ? TOK_SPECIAL : 0);
        tok_added *x = &t->added[t->n_added++];
        x->s = strdup(s);
        x->len = strlen(s);
        x->id = id;
        if (!x->s || smap_put(&t->vocab, s, x->len, id)) { st = err_set(err, SL_ENOMEM, "out of memory"); goto out; }
        t->added_first[(unsigned char)s[0]] = 1;
    }
    qsort(t->added, (size_t)t->n_added, sizeof *t->added, added_cmp);
    /* decoded pieces */
    int16_t u2b[512];
    byte_level_tables(t->b2u, u2b);
    for (int i = 0; i < t->n_vocab; i++) {
        t->dec_off[i] = (uint32_t)t->dec.n;
        if (strs[i] && set_piece(t, i, strs[i], t->flags[i] & TOK_ADDED, u2b)) { st = err_set(err, SL_ENOMEM, "out of memory"); goto out; }
        if (strs[i]) t->flags[i] |= TOK_PRESENT;
    }
    t->dec_off[t->n_vocab] = (uint32_t)t->dec.n;
    for (int b = 0; b < 256 && !t->spm; b++) { /* SPM: tok_spm_ids */
        char u[4];
        size_t k = put_cp(u, t->b2u[b]);
        t->byte_id[b] = smap_get(&t->vocab, u, k);
    }
    /* merges: rank = index; the merged token must be in the vocabulary */
    int n_m = cJSON_GetArraySize(merges);
    size_t cap = 16;
    while (cap < (size_t)n_m * 2 + 2) cap *= 2;
    t->merges.e = calloc(cap, sizeof *t->merges.e);
    t->merges.cap = cap;
    if (!t->merges.e) { st = err_set(err, SL_ENOMEM, "out of memory"); goto out; }
    tok_buf cat = {0};
    int rank = 0;
    for (const cJSON *m = merges->child; m; m = m->next, rank++) {
        const char *a, *b;
        size_t la, lb;
        if (cJSON_IsString(m)) {
            const char *sp = strchr(m->valuestring, ' ');
            if (!sp) { free(cat.p); st = err_set(err, SL_EFORMAT, "tokenizer.json: merge %d '%s' has no space", rank, m->valuestring); goto out; }
            a = m->valuestring, la = (size_t)(sp - a), b = sp + 1, lb = strlen(b);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) && cJSON_IsString(m->child->next)) {
            a = m->child->valuestring, la = strlen(a), b = m->child->next->valuestring, lb = strlen(b);
        } else { free(cat.p); st = err_set(err, SL_EFORMAT, "tokenizer.json: merge %d is neither \"a b\" nor [\"a\", \"b\"]", rank); goto out; }
        int32_t ia = smap_get(&t->vocab, a, la), ib = smap_get(&t->vocab, b, lb);
        cat.n = 0;
        if (tok_buf_put(&cat, a, la) || tok_buf_put(&cat, b, lb)) { free(cat.p); st = err_set(err, SL_ENOMEM, "out of memory"); goto out; }
        int32_t ic = smap_get(&t->vocab, cat.p, cat.n);
        if (ia < 0 || ib < 0 || ic < 0) { free(cat.p); st = err_set(err, SL_EFORMAT, "tokenizer.json: merge %d ('%.*s' + '%.*s') uses a token missing from the vocabulary", rank, (int)la, a, (int)lb, b); goto out; }
        pmap_put(&t->merges, ia, ib, rank, ic);
    }
    free(cat.p);
out:
    free(strs);
    return st;
}

static char *template_from_config(const cJSON *cfg) {
    const cJSON *ct = cJSON_GetObjectItem(cfg, "chat_template");
    if (cJSON_IsString(ct)) return strdup(ct->valuestring);
    if (cJSON_IsArray(ct)) /* [{name, template}]: the "default" one */
        for (const cJSON *e = ct->child; e; e = e->next)
            if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "name")) ? cJSON_GetStringValue(cJSON_GetObjectItem(e, "name")) : "", "default"))
                return strdup(cJSON_GetStringValue(cJSON_GetObjectItem(e, "template")) ? cJSON_GetStringValue(cJSON_GetObjectItem(e, "template")) : "");
    return NULL;
}

static const char *token_text(const cJSON *v) { /* "x" or {"content": "x"} */
    if (cJSON_IsString(v)) return v->valuestring;
    return cJSON_GetStringValue(cJSON_GetObjectItem(v, "content"));
}

/* 1 when the pre-tokenizer (or one of a Sequence's) or the decoder is ByteLevel; else a SentencePiece-style BPE */
static int byte_level(const cJSON *root) {
    const cJSON *pt = cJSON_GetObjectItem(root, "pre_tokenizer"), *list = cJSON_GetObjectItem(pt, "pretokenizers");
    const char *d = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "decoder"), "type"));
    int n = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : 0, bl = d && !strcmp(d, "ByteLevel");
    for (int i = -1; i < n && !bl; i++) {
        const char *ty = cJSON_GetStringValue(cJSON_GetObjectItem(i < 0 ? pt : cJSON_GetArrayItem(list, i), "type"));
        bl = ty && !strcmp(ty, "ByteLevel");
    }
    return bl;
}

sl_status sl_tokenizer_from_json(const char *json, size_t len, const char *config_json, const char *template_text,
                                 sl_tokenizer **out, sl_error *err) {
    *out = NULL;
    sl_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return err_set(err, SL_ENOMEM, "out of memory");
    pthread_mutex_init(&t->lock, NULL);
    cJSON *root = cJSON_ParseWithLength(json, len), *cfg = NULL;
    sl_status st = SL_OK;
    if (!root) { st = err_set(err, SL_EFORMAT, "tokenizer.json: not valid JSON"); goto fail; }
    const int spm = !byte_level(root);
    if (spm && (st = tok_spm_config(t, root, err))) goto fail;
    const cJSON *norm = cJSON_GetObjectItem(root, "normalizer");
    if (!spm && norm && !cJSON_IsNull(norm)) { /* NFC, or a Sequence of NFCs (an empty one: none, as DeepSeek-V3's) */
        const char *ty = cJSON_GetStringValue(cJSON_GetObjectItem(norm, "type")), *bad = NULL;
        const cJSON *seq = cJSON_GetObjectItem(norm, "normalizers");
        if (ty && !strcmp(ty, "NFC")) t->nfc = 1;
        else if (ty && !strcmp(ty, "Sequence") && cJSON_IsArray(seq)) {
            for (int i = 0; i < cJSON_GetArraySize(seq) && !bad; i++) {
                const char *it = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(seq, i), "type"));
                if (!it || strcmp(it, "NFC")) bad = it ? it : "?";
                t->nfc = 1;
            }
        } else bad = ty ? ty : "?";
        if (bad) { st = err_set(err, SL_EUNSUPPORTED, "tokenizer.json: normalizer '%s' is not supported (NFC only)", bad); goto fail; }
    }
    const cJSON *dec = cJSON_GetObjectItem(root, "decoder");
    const char *dty = cJSON_GetStringValue(cJSON_GetObjectItem(dec, "type"));
    if (!spm && dec && !cJSON_IsNull(dec) && (!dty || strcmp(dty, "ByteLevel"))) { st = err_set(err, SL_EUNSUPPORTED, "tokenizer.json: decoder '%s' is not supported (ByteLevel only)", dty ? dty : "?"); goto fail; }
    if ((st = load_model(t, root, err))) goto fail;
    if (spm && (st = tok_spm_ids(t, root, err))) goto fail;
    if (!spm && (st = load_pre_tokenizer(t, cJSON_GetObjectItem(root, "pre_tokenizer"), err))) goto fail;
    if (smap_init(&t->cache, 1024)) { st = err_set(err, SL_ENOMEM, "out of memory"); goto fail; }
    if (config_json) {
        cfg = cJSON_Parse(config_json);
        if (!cfg) { st = err_set(err, SL_EFORMAT, "tokenizer_config.json: not valid JSON"); goto fail; }
        if (!template_text) t->chat_template = template_from_config(cfg);
        const char *eos = token_text(cJSON_GetObjectItem(cfg, "eos_token"));
        if (eos) t->eos_text = strdup(eos);
        const char *bos = token_text(cJSON_GetObjectItem(cfg, "bos_token")); /* a template's bos_token */
        if (bos) t->bos_text = strdup(bos);
    }
    if (template_text) t->chat_template = strdup(template_text);
    const char *eog[] = {t->eos_text, "<|im_end|>", "<|endoftext|>"};
    for (int i = 0; i < 3; i++) {
        int32_t id = eog[i] ? smap_get(&t->vocab, eog[i], strlen(eog[i])) : -1;
        int dup = 0;
        for (int j = 0; j < t->n_eog; j++) dup |= t->eog[j] == id;
        if (id >= 0 && !dup) t->eog[t->n_eog++] = id;
    }
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    *out = t;
    return SL_OK;
fail:
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    sl_tokenizer_free(t);
    return st;
}

static char *read_blob(const slc_file *f, const char *name, sl_error *err, sl_status *st) {
    const slc_blob *b = slc_find_blob(f, name);
    char *p = NULL;
    if (b) *st = slc_read_blob(f, b, &p, err); /* checked: a flipped bit would change the text silently */
    return p;
}

static char *read_sibling(const char *path, const char *name) {
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path + 1) : 0;
    char *p = malloc(dl + strlen(name) + 1);
    if (!p) return NULL;
    memcpy(p, path, dl);
    strcpy(p + dl, name);
    size_t n;
    char *s = NULL;
    if (fio_read_file(p, &s, &n, NULL) != SL_OK) s = NULL;
    free(p);
    return s;
}

sl_status sl_tokenizer_load(const char *path, sl_tokenizer **out, sl_error *err) {
    *out = NULL;
    char *json = NULL, *cfg = NULL, *tmpl = NULL, magic[8] = {0};
    size_t n = 0;
    sl_status st = SL_OK;
    FILE *fp = fopen(path, "rb");
    if (!fp) return err_set(err, err_from_errno(errno), "%s: %s", path, strerror(errno));
    size_t got = fread(magic, 1, sizeof magic, fp);
    fclose(fp);
    if (got >= 4 && !memcmp(magic, "GGUF", 4)) { /* a GGUF file: tokenizer.ggml.* (import/gguf_tokenizer.c) */
        gguf_model gm;
        if ((st = gguf_open_model(path, &gm, err))) return st;
        st = gguf_tokenizer_json(&gm, &json, &cfg, err);
        gguf_close_model(&gm);
        if (st) return st;
        if (!json) return err_set(err, SL_ENOENT, "%s: the GGUF file has no tokenizer (tokenizer.ggml.model)", path);
        n = strlen(json);
    } else if (got == sizeof magic && !memcmp(magic, SLC_MAGIC, 8)) { /* a container: the tokenizer files are blobs */
        slc_file f;
        if ((st = slc_open(path, &f, err))) return st;
        json = read_blob(&f, "tokenizer.json", err, &st);
        if (!json && !st) st = err_set(err, SL_ENOENT, "%s: the container has no tokenizer.json (pack a checkpoint directory that has one)", path);
        if (!st) cfg = read_blob(&f, "tokenizer_config.json", err, &st);
        if (!st) tmpl = read_blob(&f, "chat_template.jinja", err, &st);
        slc_close(&f);
        if (st) goto out;
        n = strlen(json);
    } else if (strlen(path) >= 14 && !strcmp(path + strlen(path) - 14, "tiktoken.model")) { /* import/tiktoken.c */
        char *ranks = NULL;
        if ((st = fio_read_file(path, &ranks, &n, err))) return st;
        cfg = read_sibling(path, "tokenizer_config.json");
        tmpl = read_sibling(path, "chat_template.jinja");
        st = tiktoken_tokenizer_json(ranks, n, cfg, "kimi-k2", &json, err);
        free(ranks);
        if (st) { err_prefix(err, "%s", path); goto out; }
        n = strlen(json);
    } else {
        if ((st = fio_read_file(path, &json, &n, err))) return st;
        size_t k = 0;
        while (k < n && (json[k] == ' ' || json[k] == '\t' || json[k] == '\r' || json[k] == '\n')) k++;
        if (k == n || json[k] != '{') { /* not a tokenizer.json either: say what a model file must be */
            free(json);
            slc_file f;
            if ((st = slc_open(path, &f, err)) == SL_OK) { slc_close(&f); st = err_set(err, SL_EFORMAT, "%s: not a model", path); }
            return st;
        }
        cfg = read_sibling(path, "tokenizer_config.json");
        tmpl = read_sibling(path, "chat_template.jinja");
    }
    st = sl_tokenizer_from_json(json, n, cfg, tmpl, out, err);
    if (st) err_prefix(err, "%s", path);
out:
    free(json);
    free(cfg);
    free(tmpl);
    return st;
}

/* ---- encoding ----------------------------------------------------------------------------------- */

/* BPE of one pre-token (raw bytes; an SPM piece) appended to ids; cached. */
int tok_bpe_word(sl_tokenizer *t, const char *w, size_t n, tok_ids *ids) {
    pthread_mutex_lock(&t->lock);
    int32_t c = smap_get(&t->cache, w, n);
    if (c >= 0) {
        const int32_t *p = (const int32_t *)(void *)(t->cache_ids.p) + c;
        int r = tok_ids_put(ids, p + 1, p[0]);
        pthread_mutex_unlock(&t->lock);
        return r;
    }
    pthread_mutex_unlock(&t->lock);
    int32_t stackbuf[256], *sym = n <= 256 ? stackbuf : malloc(n * sizeof *sym);
    if (!sym) return -1;
    size_t m = 0;
    int32_t whole = -1;
    if (t->ignore_merges && t->spm) whole = smap_get(&t->vocab, w, n);
    else if (t->ignore_merges) { /* the whole word as one token when the vocabulary has it */
        tok_buf bl = {0};
        for (size_t i = 0; i < n; i++) {
            char u[4];
            if (tok_buf_put(&bl, u, put_cp(u, t->b2u[(unsigned char)w[i]]))) break;
        }
        if (bl.p) whole = smap_get(&t->vocab, bl.p, bl.n);
        free(bl.p);
    }
    if (whole >= 0) sym[m++] = whole;
    else if (t->spm) m = tok_spm_symbols(t, w, n, sym);
    else
        for (size_t i = 0; i < n; i++) {
            int32_t id = t->byte_id[(unsigned char)w[i]];
            if (id >= 0) sym[m++] = id; /* a byte missing from the vocabulary is dropped, as HF does without unk */
        }
    /* merge the lowest-ranked adjacent pair (leftmost on ties) until none is left (an SPM word, often a whole text:
     * through a heap) */
    if (t->spm && m > 1) {
        ptrdiff_t k = tok_spm_merge(t, sym, m);
        if (k < 0) {
            if (sym != stackbuf) free(sym);
            return -1;
        }
        m = (size_t)k;
    }
    while (!t->spm && m > 1) {
        int32_t best = INT32_MAX, bi = -1, bid = -1;
        for (size_t i = 0; i + 1 < m; i++) {
            const tok_pent *e = pmap_get(&t->merges, sym[i], sym[i + 1]);
            if (e && e->rank < best) { best = e->rank; bi = (int32_t)i; bid = e->id; }
        }
        if (bi < 0) break;
        sym[bi] = bid;
        memmove(sym + bi + 1, sym + bi + 2, (m - (size_t)bi - 2) * sizeof *sym);
        m--;
    }
    int r = tok_ids_put(ids, sym, (int)m);
    if (n > 4096) { /* an SPM word is often a whole text: not cached */
        if (sym != stackbuf) free(sym);
        return r;
    }
    pthread_mutex_lock(&t->lock);
    if (t->cache.n > 65536) { smap_clear(&t->cache); t->cache_ids.n = 0; }
    size_t off = t->cache_ids.n / sizeof(int32_t);
    int32_t cnt = (int32_t)m;
    if (off < INT32_MAX / 2 && !tok_buf_put(&t->cache_ids, &cnt, sizeof cnt) &&
        !tok_buf_put(&t->cache_ids, sym, m * sizeof *sym))
        smap_put(&t->cache, w, n, (int32_t)off);
    pthread_mutex_unlock(&t->lock);
    if (sym != stackbuf) free(sym);
    return r;
}

/* Splits s [n] by regex lvl (Isolated: each match and each unmatched gap a piece) and hands each piece to the
 * next regex, the last level's pieces to BPE. md holds one match (its offsets are read before recursing). */
static sl_status split_piece(sl_tokenizer *t, int lvl, const char *s, size_t n, pcre2_match_data *md,
                             pcre2_match_context *mc, tok_ids *ids, sl_error *err) {
    if (lvl == t->n_re) return n && tok_bpe_word(t, s, n, ids) ? err_set(err, SL_ENOMEM, "out of memory") : SL_OK;
    sl_status st = SL_OK;
    size_t pos = 0;
    while (pos < n && !st) {
        int rc = pcre2_match(t->re[lvl], (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, mc);
        size_t a = n, b = n;
        if (rc >= 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            a = ov[0], b = ov[1];
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return err_set(err, SL_EINVAL, "pre-tokenizer regex failed at byte %zu: %s", pos, (char *)msg);
        }
        if (a > pos) st = split_piece(t, lvl + 1, s + pos, a - pos, md, mc, ids, err); /* unmatched gap */
        if (!st && b > a) st = split_piece(t, lvl + 1, s + a, b - a, md, mc, ids, err);
        if (!st && b == a) { /* empty match: step one character */
            if (b >= n) break;
            size_t k = b + 1;
            while (k < n && ((unsigned char)s[k] & 0xC0) == 0x80) k++;
            st = split_piece(t, lvl + 1, s + b, k - b, md, mc, ids, err);
            b = k;
        }
        pos = b;
    }
    return st;
}

/* A piece of text between added tokens (first: at the text's start): NFC, split, BPE. */
static sl_status encode_piece(sl_tokenizer *t, const char *s, size_t n, int first, tok_ids *ids, sl_error *err) {
    utf8proc_uint8_t *nfc = NULL;
    if (t->nfc) {
        int ascii = 1;
        for (size_t i = 0; i < n && ascii; i++) ascii = (unsigned char)s[i] < 0x80;
        if (!ascii) {
            utf8proc_ssize_t k = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &nfc,
                                              UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (k < 0) return err_set(err, SL_EINVAL, "text normalisation failed: %s", utf8proc_errmsg(k));
            s = (const char *)nfc;
            n = (size_t)k;
        }
    }
    sl_status st = SL_OK;
    if (t->spm) {
        st = tok_spm_encode(t, s, n, first, ids, err);
        free(nfc);
        return st;
    }
    if (!t->n_re) {
        if (n && tok_bpe_word(t, s, n, ids)) st = err_set(err, SL_ENOMEM, "out of memory");
        free(nfc);
        return st;
    }
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    pcre2_jit_stack *js = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);
    if (!md || !mc || !js) st = err_set(err, SL_ENOMEM, "out of memory");
    else {
        pcre2_jit_stack_assign(mc, NULL, js);
        st = split_piece(t, 0, s, n, md, mc, ids, err);
    }
    if (js) pcre2_jit_stack_free(js);
    if (mc) pcre2_match_context_free(mc);
    if (md) pcre2_match_data_free(md);
    free(nfc);
    return st;
}

int tok_ids_put(tok_ids *v, const int32_t *p, int n) {
    if (n == 0) return 0;
    if (v->n + n > v->cap) {
        int cap = v->cap ? v->cap : 64;
        while (cap < v->n + n) cap *= 2;
        int32_t *q = realloc(v->p, (size_t)cap * sizeof *q);
        if (!q) return -1;
        v->p = q;
        v->cap = cap;
    }
    memcpy(v->p + v->n, p, (size_t)n * sizeof *p);
    v->n += n;
    return 0;
}

/* The added token starting at s (longest first), or NULL. */
static const tok_added *added_at(const sl_tokenizer *t, const char *s, size_t n) {
    if (!t->added_first[(unsigned char)*s]) return NULL;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].len <= n && !memcmp(s, t->added[i].s, t->added[i].len)) return &t->added[i];
    return NULL;
}

sl_status sl_tokenize(const sl_tokenizer *tok, const char *text, size_t len, int flags, int32_t **out_ids,
                      int *out_n, sl_error *err) {
    sl_tokenizer *t = (sl_tokenizer *)tok; /* only the cache changes, under the lock */
    *out_ids = NULL;
    *out_n = 0;
    tok_buf fixed = {0};
    tok_ids ids = {0};
    sl_status st = SL_OK;
    if (len > (size_t)INT32_MAX / 2) return err_set(err, SL_ERANGE, "text of %zu bytes is too long to tokenize", len);
    if (!tok_utf8_valid(text, len)) {
        if (flags & SL_TOKENIZE_STRICT_UTF8) {
            size_t at = tok_utf8_complete_prefix(text, len);
            for (size_t i = 0; i < len; i++)
                if (!tok_utf8_valid(text, i + 1) && tok_utf8_complete_prefix(text, i + 1) == i + 1) { at = i; break; }
            return err_set(err, SL_EINVAL, "text is not valid UTF-8 (near byte %zu)", at);
        }
        if (tok_utf8_lossy(&fixed, text, len)) return err_set(err, SL_ENOMEM, "out of memory");
        text = fixed.p;
        len = fixed.n;
    }
    size_t start = 0;
    for (size_t i = 0; i < len;) {
        const tok_added *a = (flags & SL_TOKENIZE_NO_SPECIAL) ? NULL : added_at(t, text + i, len - i);
        if (!a) { i++; continue; }
        if (i > start && (st = encode_piece(t, text + start, i - start, start == 0, &ids, err))) goto fail;
        if (tok_ids_put(&ids, &a->id, 1)) goto oom;
        i += a->len;
        start = i;
    }
    if (len > start && (st = encode_piece(t, text + start, len - start, start == 0, &ids, err))) goto fail;
    if (!ids.p && !(ids.p = malloc(sizeof(int32_t)))) goto oom; /* an empty result is still an array */
    free(fixed.p);
    *out_ids = ids.p;
    *out_n = ids.n;
    return SL_OK;
oom:
    st = err_set(err, SL_ENOMEM, "out of memory");
fail:
    free(fixed.p);
    free(ids.p);
    return st;
}

/* ---- accessors ---------------------------------------------------------------------------------- */

int sl_tokenizer_n_vocab(const sl_tokenizer *t) { return t->n_vocab; }

int32_t sl_tokenizer_token_id(const sl_tokenizer *t, const char *text) {
    int32_t id = smap_get(&t->vocab, text, strlen(text));
    return id;
}

int sl_tokenizer_is_special(const sl_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && (t->flags[id] & TOK_SPECIAL);
}

int sl_tokenizer_is_eog(const sl_tokenizer *t, int32_t id) {
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return 1;
    return 0;
}

const char *tok_piece(const sl_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab || !(t->flags[id] & TOK_PRESENT)) { *len = 0; return NULL; }
    *len = t->dec_off[id + 1] - t->dec_off[id];
    return t->dec.p ? t->dec.p + t->dec_off[id] : "";
}

const char *tok_chat_template(const sl_tokenizer *t) { return t->chat_template ? t->chat_template : ""; }
const char *tok_eos_text(const sl_tokenizer *t) { return t->eos_text ? t->eos_text : ""; }
const char *tok_bos_text(const sl_tokenizer *t) { return t->bos_text ? t->bos_text : ""; }
int tok_eog_ids(const sl_tokenizer *t, const int32_t **ids) { *ids = t->eog; return t->n_eog; }
