/*
 * tok_internal.h — the tokenizer's data structures, shared by tokenizer.c (load, encode) and detok.c
 * (decode). Not part of the public API.
 */
#ifndef SL_TOK_INTERNAL_H
#define SL_TOK_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "text/tokenizer.h"

/* Open-addressing map from byte strings to int32; keys live in one growing buffer (offsets, so
 * growth never invalidates them). h == 0 marks an empty slot. */
typedef struct smap_ent {
    uint64_t h;
    uint32_t off, len;
    int32_t val;
} smap_ent;
typedef struct smap {
    smap_ent *e;
    size_t cap, n;
    tok_buf keys;
} smap;
int smap_init(smap *m, size_t expect);
void smap_free(smap *m);
void smap_clear(smap *m);
int32_t smap_get(const smap *m, const char *k, size_t n); /* -1 if absent */
int smap_put(smap *m, const char *k, size_t n, int32_t val);

/* Merge table: (left id, right id) -> (rank, merged id). */
typedef struct tok_pent {
    uint64_t key;
    int32_t rank, id;
    int used;
} tok_pent;
typedef struct tok_pmap {
    tok_pent *e;
    size_t cap;
} tok_pmap;

typedef struct tok_added {
    char *s;
    size_t len;
    int32_t id;
} tok_added;

typedef struct tok_ids {
    int32_t *p;
    int n, cap;
} tok_ids;
int tok_ids_put(tok_ids *v, const int32_t *p, int n);

enum { TOK_PRESENT = 1, TOK_ADDED = 2, TOK_SPECIAL = 4 };

#define TOK_MAX_SPLITS 8

struct sl_tokenizer {
    int n_vocab;       /* largest id + 1 */
    smap vocab;        /* token text (byte-level alphabet; added tokens verbatim) -> id */
    tok_pmap merges;
    tok_buf dec;       /* decoded bytes of every token, back to back */
    uint32_t *dec_off; /* [n_vocab + 1] */
    uint8_t *flags;    /* [n_vocab] TOK_* */
    int32_t byte_id[256];
    uint32_t b2u[256]; /* ByteLevel: byte -> code point */
    tok_added *added;  /* longest first */
    int n_added;
    uint8_t added_first[256];
    pcre2_code *re[TOK_MAX_SPLITS]; /* the Split regexes in pre_tokenizer order, each applied to the pieces of the
                                     * one before (a Sequence of Splits, DeepSeek-V3's); none: no split */
    int n_re;
    int nfc, ignore_merges;
    char *chat_template, *eos_text, *bos_text;
    int32_t eog[3];
    int n_eog;
    /* SentencePiece-style BPE (text/tok_spm.c): spm set when nothing in tokenizer.json is ByteLevel */
    int spm;
    char space[8];           /* the space replacement R ("\xe2\x96\x81", U+2581) */
    int space_norm;          /* the normalizer replaces " " with R */
    int prepend_norm;        /* the normalizer prepends R to every piece */
    int meta_space, meta_split, prepend; /* a Metaspace pre-tokenizer: " " -> R, its split, TOK_PREPEND_* */
    int byte_fallback, fuse_unk;
    int32_t unk_id;          /* -1: none */
    int dec_space, dec_bytes; /* the decoder turns R into " ", <0xNN> into its byte */
    int strip_first;         /* TOK_STRIP_*: what the decoder strips from a whole decode (sl_detokenize) */
    pthread_mutex_t lock; /* guards cache and cache_ids */
    smap cache;           /* pre-token bytes -> offset (in int32s) into cache_ids: [count, ids...] */
    tok_buf cache_ids;
};

enum { TOK_PREPEND_NEVER, TOK_PREPEND_FIRST, TOK_PREPEND_ALWAYS };
/* none; Strip(" ", 1, 0) after a Fuse: one leading space of the text; Metaspace: every R of the first token */
enum { TOK_STRIP_NONE, TOK_STRIP_ONE, TOK_STRIP_META };

/* The merge of the pair (a, b) (rank, merged id), or NULL (tokenizer.c) */
const tok_pent *tok_merge_of(const sl_tokenizer *t, int32_t a, int32_t b);
/* sym[m] merged in place as BPE merges them (lowest rank first, leftmost on ties, HF tokenizers' word.rs
 * merge_all): the new count, or -1 when out of memory (tok_spm.c) */
ptrdiff_t tok_spm_merge(const sl_tokenizer *t, int32_t *sym, size_t m);

/* BPE of one pre-token w[n] (tokenizer.c; the ByteLevel alphabet's bytes, or an SPM piece) appended to ids: 0 or -1 */
int tok_bpe_word(sl_tokenizer *t, const char *w, size_t n, tok_ids *ids);

/* SentencePiece-style BPE (tok_spm.c): the normalizer, pre-tokenizer, decoder and model flags of tokenizer.json
 * root; the unk / <0xNN> ids once the vocabulary is read; a token's decoded bytes; a word's first symbols (at most
 * n); a piece between added tokens (first: at the start of the text) encoded. */
struct cJSON;
sl_status tok_spm_config(sl_tokenizer *t, const struct cJSON *root, sl_error *err);
sl_status tok_spm_ids(sl_tokenizer *t, const struct cJSON *root, sl_error *err);
int tok_spm_piece(const sl_tokenizer *t, const char *s, int added, tok_buf *out);
size_t tok_spm_symbols(const sl_tokenizer *t, const char *w, size_t n, int32_t *sym);
sl_status tok_spm_encode(sl_tokenizer *t, const char *s, size_t n, int first, tok_ids *ids, sl_error *err);

#endif
