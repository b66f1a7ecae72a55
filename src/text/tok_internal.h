/*
 * tok_internal.h — the tokenizer's data structures, shared by tokenizer.c (load, encode) and detok.c
 * (decode). Not part of the public API.
 */
#ifndef SL_TOK_INTERNAL_H
#define SL_TOK_INTERNAL_H

#include <pthread.h>
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
    char *chat_template, *eos_text;
    int32_t eog[3];
    int n_eog;
    pthread_mutex_t lock; /* guards cache and cache_ids */
    smap cache;           /* pre-token bytes -> offset (in int32s) into cache_ids: [count, ids...] */
    tok_buf cache_ids;
};

#endif
