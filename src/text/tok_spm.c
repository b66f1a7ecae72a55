/*
 * tok_spm.c — SentencePiece-style BPE in tokenizer.json (Gemma's; Llama 2's shape too): no ByteLevel alphabet,
 * pieces are Unicode strings with spaces written as a replacement character ("▁", U+2581), characters outside the
 * vocabulary fall back to byte tokens <0x00>..<0xFF>. As HF tokenizers runs it (tokenizers/src: normalizers/
 * replace.rs, prepend.rs; pre_tokenizers/metaspace.rs, split.rs; models/bpe/model.rs merge_word; decoders/
 * byte_fallback.rs, strip.rs, metaspace.rs), and as transformers 5.25 models/gemma/tokenization_gemma.py builds it:
 *   normalizer   Replace(String " " -> R), Prepend(R), NFC, or a Sequence of them;
 *   pre_tokenizer null; Metaspace(replacement R, prepend_scheme always / first / never, split): spaces -> R, R put
 *                before a piece not starting with it (every piece between added tokens / the text's first), and with
 *                split the pieces cut before each R; Split(String " ", MergedWithPrevious, not inverted) after a
 *                normalizer that replaced every space (it then finds none: Gemma's);
 *   model        BPE with byte_fallback (a character missing from the vocabulary as its UTF-8 bytes' <0xNN>
 *                tokens), unk_token and fuse_unk (consecutive unknown characters one unk) otherwise;
 *   decoder      Sequence of Replace(String R -> " "), ByteFallback, Fuse, Strip(" ", 1, 0) after the Fuse; or
 *                Metaspace (R -> " ", the leading space of a decode stripped unless prepend_scheme never).
 * Each token's decoded bytes are made at load (tok_spm_piece), so decoding is the ByteLevel path's; what the
 * decoder strips at the start of a decode (Strip: one space of the text; Metaspace: the first token's replacements)
 * only sl_detokenize strips (t->strip_first): a stream of generated tokens keeps them.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"
#include "util/err.h"

static const char *str_of(const cJSON *o, const char *k) { return cJSON_GetStringValue(cJSON_GetObjectItem(o, k)); }

static int set_rep(sl_tokenizer *t, const char *r) {
    if (!r || !*r || strlen(r) >= sizeof t->space) return -1;
    if (t->space[0] && strcmp(t->space, r)) return -1; /* one replacement for the whole pipeline */
    strcpy(t->space, r);
    return 0;
}

/* One normalizer of the supported ones (a Sequence's item or the whole) */
static sl_status normalizer_one(sl_tokenizer *t, const cJSON *n, sl_error *err) {
    const char *ty = str_of(n, "type");
    if (ty && !strcmp(ty, "NFC")) {
        t->nfc = 1;
        return SL_OK;
    }
    if (ty && !strcmp(ty, "Replace")) {
        const char *pat = str_of(cJSON_GetObjectItem(n, "pattern"), "String");
        if (pat && !strcmp(pat, " ") && !set_rep(t, str_of(n, "content"))) {
            t->space_norm = 1;
            return SL_OK;
        }
        return err_set(err, SL_EUNSUPPORTED, "tokenizer.json: normalizer Replace other than String \" \" -> one "
                                             "replacement is not supported");
    }
    if (ty && !strcmp(ty, "Prepend") && !set_rep(t, str_of(n, "prepend"))) {
        t->prepend_norm = 1;
        return SL_OK;
    }
    return err_set(err, SL_EUNSUPPORTED, "tokenizer.json: normalizer '%s' is not supported (NFC, Replace \" \", "
                                         "Prepend)", ty ? ty : "?");
}

static sl_status load_normalizer(sl_tokenizer *t, const cJSON *n, sl_error *err) {
    if (!n || cJSON_IsNull(n)) return SL_OK;
    const char *ty = str_of(n, "type");
    if (!ty || strcmp(ty, "Sequence")) return normalizer_one(t, n, err);
    const cJSON *seq = cJSON_GetObjectItem(n, "normalizers");
    for (int i = 0; i < cJSON_GetArraySize(seq); i++) {
        sl_status st = normalizer_one(t, cJSON_GetArrayItem(seq, i), err);
        if (st) return st;
    }
    return SL_OK;
}

static int prepend_scheme(const cJSON *o) {
    const char *s = str_of(o, "prepend_scheme");
    if (!s) return cJSON_IsFalse(cJSON_GetObjectItem(o, "add_prefix_space")) ? TOK_PREPEND_NEVER : TOK_PREPEND_ALWAYS;
    return !strcmp(s, "always") ? TOK_PREPEND_ALWAYS : !strcmp(s, "first") ? TOK_PREPEND_FIRST
           : !strcmp(s, "never") ? TOK_PREPEND_NEVER : -1;
}

static sl_status load_pre(sl_tokenizer *t, const cJSON *p, sl_error *err) {
    if (!p || cJSON_IsNull(p)) return SL_OK;
    const char *ty = str_of(p, "type");
    if (ty && !strcmp(ty, "Metaspace")) {
        t->prepend = prepend_scheme(p);
        if (t->prepend < 0 || set_rep(t, str_of(p, "replacement")))
            return err_set(err, SL_EUNSUPPORTED, "tokenizer.json: Metaspace pre-tokenizer with an unknown "
                                                 "prepend_scheme or another replacement than the normalizer's");
        t->meta_space = 1;
        t->meta_split = !cJSON_IsFalse(cJSON_GetObjectItem(p, "split"));
        return SL_OK;
    }
    if (ty && !strcmp(ty, "Split") && t->space_norm) { /* on " ", once the normalizer left none: nothing to split */
        const char *pat = str_of(cJSON_GetObjectItem(p, "pattern"), "String"), *beh = str_of(p, "behavior");
        if (pat && !strcmp(pat, " ") && beh && !strcmp(beh, "MergedWithPrevious") &&
            !cJSON_IsTrue(cJSON_GetObjectItem(p, "invert")))
            return SL_OK;
    }
    return err_set(err, SL_EUNSUPPORTED, "tokenizer.json: pre_tokenizer '%s' is not supported with a SentencePiece-"
                                         "style BPE (null, Metaspace, or Split(\" \") after a space-replacing "
                                         "normalizer)", ty ? ty : "?");
}

static sl_status decoder_one(sl_tokenizer *t, const cJSON *d, int fused, sl_error *err) {
    const char *ty = str_of(d, "type");
    if (ty && !strcmp(ty, "Replace")) {
        const char *pat = str_of(cJSON_GetObjectItem(d, "pattern"), "String"), *c = str_of(d, "content");
        if (pat && c && !strcmp(c, " ") && !set_rep(t, pat)) {
            t->dec_space = 1;
            return SL_OK;
        }
    } else if (ty && !strcmp(ty, "ByteFallback")) {
        t->dec_bytes = 1;
        return SL_OK;
    } else if (ty && !strcmp(ty, "Fuse")) {
        return SL_OK;
    } else if (ty && !strcmp(ty, "Strip") && fused) {
        const char *c = str_of(d, "content");
        int a = cJSON_GetNumberValue(cJSON_GetObjectItem(d, "start")) == 1;
        int z = cJSON_GetNumberValue(cJSON_GetObjectItem(d, "stop")) == 0;
        if (c && !strcmp(c, " ") && a && z) {
            t->strip_first = TOK_STRIP_ONE;
            return SL_OK;
        }
    } else if (ty && !strcmp(ty, "Metaspace")) {
        const int ps = prepend_scheme(d);
        if (ps >= 0 && !set_rep(t, str_of(d, "replacement"))) {
            t->dec_space = 1;
            t->strip_first = ps != TOK_PREPEND_NEVER ? TOK_STRIP_META : TOK_STRIP_NONE;
            return SL_OK;
        }
    }
    return err_set(err, SL_EUNSUPPORTED, "tokenizer.json: decoder '%s' is not supported here (Replace(R -> \" \"), "
                                         "ByteFallback, Fuse, Strip(\" \", 1, 0) after a Fuse, Metaspace)", ty ? ty : "?");
}

static sl_status load_decoder(sl_tokenizer *t, const cJSON *d, sl_error *err) {
    if (!d || cJSON_IsNull(d)) return SL_OK;
    const char *ty = str_of(d, "type");
    if (!ty || strcmp(ty, "Sequence")) return decoder_one(t, d, 0, err);
    const cJSON *seq = cJSON_GetObjectItem(d, "decoders");
    int fused = 0;
    for (int i = 0; i < cJSON_GetArraySize(seq); i++) {
        const cJSON *x = cJSON_GetArrayItem(seq, i);
        sl_status st = decoder_one(t, x, fused, err);
        if (st) return st;
        fused |= str_of(x, "type") && !strcmp(str_of(x, "type"), "Fuse");
    }
    return SL_OK;
}

sl_status tok_spm_config(sl_tokenizer *t, const cJSON *root, sl_error *err) {
    t->spm = 1;
    t->unk_id = -1;
    sl_status st = load_normalizer(t, cJSON_GetObjectItem(root, "normalizer"), err);
    if (!st) st = load_pre(t, cJSON_GetObjectItem(root, "pre_tokenizer"), err);
    if (!st) st = load_decoder(t, cJSON_GetObjectItem(root, "decoder"), err);
    if (st) return st;
    const cJSON *model = cJSON_GetObjectItem(root, "model");
    t->byte_fallback = cJSON_IsTrue(cJSON_GetObjectItem(model, "byte_fallback"));
    t->fuse_unk = cJSON_IsTrue(cJSON_GetObjectItem(model, "fuse_unk"));
    const char *pre = str_of(model, "continuing_subword_prefix"), *suf = str_of(model, "end_of_word_suffix");
    if ((pre && *pre) || (suf && *suf))
        return err_set(err, SL_EUNSUPPORTED, "tokenizer.json: BPE continuing_subword_prefix / end_of_word_suffix "
                                             "are not supported");
    return SL_OK;
}

/* after the vocabulary is read: the unk and byte-fallback ids */
sl_status tok_spm_ids(sl_tokenizer *t, const cJSON *root, sl_error *err) {
    const char *unk = str_of(cJSON_GetObjectItem(root, "model"), "unk_token");
    if (unk && (t->unk_id = smap_get(&t->vocab, unk, strlen(unk))) < 0)
        return err_set(err, SL_EFORMAT, "tokenizer.json: unk_token '%s' is not in the vocabulary", unk);
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        t->byte_id[b] = t->byte_fallback ? smap_get(&t->vocab, s, 6) : -1;
    }
    return SL_OK;
}

/* A vocabulary token's decoded bytes appended to out: <0xNN> as its byte (ByteFallback), the replacement as a space
 * (the decoder's Replace / Metaspace); added tokens verbatim. */
int tok_spm_piece(const sl_tokenizer *t, const char *s, int added, tok_buf *out) {
    unsigned v;
    char end;
    if (added) return tok_buf_puts(out, s);
    if (t->dec_bytes && strlen(s) == 6 && !strncmp(s, "<0x", 3) && sscanf(s + 3, "%2X%c", &v, &end) == 2 && end == '>') {
        const char b = (char)v;
        return tok_buf_put(out, &b, 1);
    }
    const size_t rl = strlen(t->space);
    while (*s) {
        const char *r = t->dec_space && rl ? strstr(s, t->space) : NULL;
        if (!r) return tok_buf_puts(out, s);
        if (tok_buf_put(out, s, (size_t)(r - s)) || tok_buf_put(out, " ", 1)) return -1;
        s = r + rl;
    }
    return 0;
}

/* The first symbols of a word: each character's vocabulary id, else its bytes' <0xNN> ids (byte_fallback), else unk
 * (consecutive ones fused under fuse_unk), else nothing. sym has room for n. */
size_t tok_spm_symbols(const sl_tokenizer *t, const char *w, size_t n, int32_t *sym) {
    size_t m = 0;
    int last_unk = 0;
    for (size_t i = 0; i < n;) {
        size_t k = 1;
        while (i + k < n && ((unsigned char)w[i + k] & 0xC0) == 0x80) k++;
        int32_t id = smap_get(&t->vocab, w + i, k);
        int bytes = id < 0 && t->byte_fallback;
        for (size_t j = 0; bytes && j < k; j++) bytes = t->byte_id[(unsigned char)w[i + j]] >= 0;
        if (id >= 0) sym[m++] = id;
        else if (bytes)
            for (size_t j = 0; j < k; j++) sym[m++] = t->byte_id[(unsigned char)w[i + j]];
        else if (t->unk_id >= 0 && !(t->fuse_unk && last_unk)) sym[m++] = t->unk_id;
        last_unk = id < 0 && !bytes;
        i += k;
    }
    return m;
}

/* A piece between added tokens, normalised (NFC already done): spaces -> R, R prepended (the normalizer's Prepend:
 * always; Metaspace: as its scheme says, unless the piece starts with R), cut before each R (Metaspace split), each
 * part through BPE. first: the piece starts the text. */
sl_status tok_spm_encode(sl_tokenizer *t, const char *s, size_t n, int first, tok_ids *ids, sl_error *err) {
    tok_buf w = {0};
    const size_t rl = strlen(t->space);
    int bad = 0;
    if (t->prepend_norm) bad |= tok_buf_put(&w, t->space, rl);
    for (size_t i = 0; i < n; i++)
        bad |= (t->space_norm || t->meta_space) && s[i] == ' ' ? tok_buf_put(&w, t->space, rl) : tok_buf_put(&w, s + i, 1);
    if (bad) {
        free(w.p);
        return err_set(err, SL_ENOMEM, "out of memory");
    }
    if (t->meta_space && (t->prepend == TOK_PREPEND_ALWAYS || (t->prepend == TOK_PREPEND_FIRST && first)) &&
        !(w.n >= rl && !memcmp(w.p, t->space, rl))) {
        tok_buf x = {0};
        if (tok_buf_put(&x, t->space, rl) || tok_buf_put(&x, w.p, w.n)) {
            free(x.p);
            free(w.p);
            return err_set(err, SL_ENOMEM, "out of memory");
        }
        free(w.p);
        w = x;
    }
    size_t a = 0;
    for (size_t i = 1; t->meta_split && rl && i + rl <= w.n; i++)
        if (!memcmp(w.p + i, t->space, rl)) {
            if (tok_bpe_word(t, w.p + a, i - a, ids)) bad = 1;
            a = i;
            i += rl - 1;
        }
    if (w.n > a && tok_bpe_word(t, w.p + a, w.n - a, ids)) bad = 1;
    free(w.p);
    return bad ? err_set(err, SL_ENOMEM, "out of memory") : SL_OK;
}

/* ---- merging a long word: a min-heap of candidate pairs (rank, then left position), stale ones skipped ---- */

typedef struct cand {
    int32_t rank, pos, id;
} cand;

static int cand_less(cand a, cand b) { return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos); }

static void heap_push(cand *h, size_t *n, cand c) {
    size_t i = (*n)++;
    while (i && cand_less(c, h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}

static cand heap_pop(cand *h, size_t *n) {
    cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && cand_less(h[c + 1], h[c])) c++;
        if (!cand_less(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

static void push_pair(const sl_tokenizer *t, cand *h, size_t *n, const int32_t *sym, int32_t l, int32_t r) {
    const tok_pent *e = tok_merge_of(t, sym[l], sym[r]);
    if (e) heap_push(h, n, (cand){e->rank, l, e->id});
}

ptrdiff_t tok_spm_merge(const sl_tokenizer *t, int32_t *sym, size_t m) {
    /* symbols stay at their first index: next / prev links, -1 at the ends; a merged-away one has sym -1. Each
     * merge adds at most two candidates to the m - 1 first ones. */
    int32_t *next = malloc(m * sizeof *next), *prev = malloc(m * sizeof *prev);
    cand *h = malloc(3 * m * sizeof *h);
    size_t n = 0;
    if (!next || !prev || !h) {
        free(next), free(prev), free(h);
        return -1;
    }
    for (size_t i = 0; i < m; i++) {
        next[i] = i + 1 < m ? (int32_t)i + 1 : -1;
        prev[i] = (int32_t)i - 1;
    }
    for (size_t i = 0; i + 1 < m; i++) push_pair(t, h, &n, sym, (int32_t)i, (int32_t)i + 1);
    while (n) {
        const cand c = heap_pop(h, &n);
        const int32_t l = c.pos, r = next[l];
        if (sym[l] < 0 || r < 0) continue;
        const tok_pent *e = tok_merge_of(t, sym[l], sym[r]);
        if (!e || e->id != c.id || e->rank != c.rank) continue; /* stale: that pair changed since */
        sym[l] = c.id;
        sym[r] = -1;
        next[l] = next[r];
        if (next[r] >= 0) prev[next[r]] = l;
        if (prev[l] >= 0) push_pair(t, h, &n, sym, prev[l], l);
        if (next[l] >= 0) push_pair(t, h, &n, sym, l, next[l]);
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) sym[k++] = sym[i];
    free(next), free(prev), free(h);
    return (ptrdiff_t)k;
}
