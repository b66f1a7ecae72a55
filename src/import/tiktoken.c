/*
 * tiktoken.c — a tiktoken BPE file (tiktoken.model: one "base64-token rank" line per token, the HF release of
 * Kimi K2 / Kimi Linear ships it instead of tokenizer.json) rebuilt as the tokenizer.json text/tokenizer.c reads:
 *   - the ranks are the ids; each token's bytes in GPT-2's byte-level alphabet;
 *   - merges: for each token of two or more bytes, tiktoken's own merge loop run on its bytes up to its rank
 *     (llama.cpp conversion/qwen.py QwenModel.bpe, which conversion/kimi_linear.py uses for the kimi-k2 GGUF);
 *     when it ends in exactly two parts, "left right" is its merge, ranked by the token's rank;
 *   - ignore_merges: tiktoken takes a pre-token that is a token whole before merging anything;
 *   - special tokens: the num_reserved_special_tokens + 2 = 258 ids after the ranks (tokenization_kimi.py
 *     TikTokenTokenizer), named by tokenizer_config.json's added_tokens_decoder, else "<|reserved_token_ID|>";
 *     all of them special (its encode passes allowed_special="all");
 *   - the pre-tokenizer of tokenizer.ggml.pre `pre` (kimi-k2: tokenization_kimi.py's pat_str).
 * Not reproduced: tokenization_kimi.py cuts runs of more than 25,000 whitespace or non-whitespace characters
 * before tiktoken sees them (a split inside such a run).
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import/gguf.h"
#include "util/err.h"

#define N_SPECIAL (256 + 2)

typedef struct {
    const uint8_t **key; /* into the decoded bytes */
    uint32_t *len;
    int32_t *rank;
    size_t cap; /* a power of two */
} rank_map;

static uint64_t hash(const uint8_t *s, size_t n) { /* FNV-1a */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

static int32_t map_get(const rank_map *m, const uint8_t *s, size_t n) {
    for (size_t i = hash(s, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->key[i]) return -1;
        if (m->len[i] == n && !memcmp(m->key[i], s, n)) return m->rank[i];
    }
}

/* 0, or -1 when the bytes are there already (a duplicate token) */
static int map_put(rank_map *m, const uint8_t *s, size_t n, int32_t rank) {
    size_t i = hash(s, n) & (m->cap - 1);
    for (; m->key[i]; i = (i + 1) & (m->cap - 1))
        if (m->len[i] == n && !memcmp(m->key[i], s, n)) return -1;
    m->key[i] = s, m->len[i] = (uint32_t)n, m->rank[i] = rank;
    return 0;
}

static int b64_val(int c) {
    return c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : c >= '0' && c <= '9' ? c - '0' + 52
           : c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Standard base64 (with '=' padding) of s[0..n) into out; the byte count, or -1 when malformed. */
static long b64_decode(const char *s, size_t n, uint8_t *out) {
    long k = 0;
    uint32_t acc = 0;
    int bits = 0;
    size_t i = 0;
    for (; i < n && s[i] != '='; i++) {
        int v = b64_val((unsigned char)s[i]);
        if (v < 0) return -1;
        acc = acc << 6 | (uint32_t)v, bits += 6;
        if (bits >= 8) bits -= 8, out[k++] = (uint8_t)(acc >> bits);
    }
    while (i < n && s[i] == '=') i++;
    return i == n && k > 0 ? k : -1;
}

typedef struct {
    uint8_t *bytes;  /* every token's bytes, back to back */
    size_t *off;     /* token id -> offset in bytes; off[id + 1] - off[id] its length; (size_t)-1: no token */
    uint32_t *tlen;
    int32_t n;       /* ids 0..n-1 (the largest rank + 1) */
    rank_map map;
} ranks_t;

static void ranks_free(ranks_t *r) {
    free(r->bytes), free(r->off), free(r->tlen);
    free(r->map.key), free(r->map.len), free(r->map.rank);
}

/* Parses the file's lines into r: each "base64 rank", ranks unique, bytes unique. */
static sl_status ranks_parse(const char *s, size_t n, ranks_t *r, sl_error *err) {
    size_t lines = 1;
    for (size_t i = 0; i < n; i++) lines += s[i] == '\n';
    memset(r, 0, sizeof *r);
    for (r->map.cap = 16; r->map.cap < 2 * lines; r->map.cap *= 2) {}
    r->bytes = malloc(n + 1), r->off = malloc(lines * sizeof *r->off), r->tlen = malloc(lines * sizeof *r->tlen);
    r->map.key = calloc(r->map.cap, sizeof *r->map.key), r->map.len = malloc(r->map.cap * sizeof *r->map.len);
    r->map.rank = malloc(r->map.cap * sizeof *r->map.rank);
    if (!r->bytes || !r->off || !r->tlen || !r->map.key || !r->map.len || !r->map.rank)
        return err_set(err, SL_ENOMEM, "out of memory");
    for (size_t i = 0; i < lines; i++) r->off[i] = (size_t)-1;
    size_t used = 0, line = 0;
    for (size_t a = 0; a < n; line++) {
        size_t e = a;
        while (e < n && s[e] != '\n') e++;
        size_t sp = a;
        while (sp < e && s[sp] != ' ') sp++;
        if (e == a || (e == a + 1 && s[a] == '\r')) { a = e + 1; continue; } /* a blank line */
        char *end = NULL;
        long rank = sp < e ? strtol(s + sp + 1, &end, 10) : -1;
        long k = sp > a ? b64_decode(s + a, sp - a, r->bytes + used) : -1;
        if (k < 0 || rank < 0 || !end || (end != s + e && !(*end == '\r' && end + 1 == s + e)))
            return err_set(err, SL_EFORMAT, "tiktoken.model line %zu: not \"base64-token rank\"", line + 1);
        if (rank >= (long)lines) /* ranks are ids: 0 .. count - 1 */
            return err_set(err, SL_EFORMAT, "tiktoken.model line %zu: rank %ld, more than the tokens", line + 1, rank);
        if (r->off[rank] != (size_t)-1 || map_put(&r->map, r->bytes + used, (size_t)k, (int32_t)rank))
            return err_set(err, SL_EFORMAT, "tiktoken.model line %zu: rank %ld or its token seen before", line + 1, rank);
        r->off[rank] = used, r->tlen[rank] = (uint32_t)k, used += (size_t)k;
        if (rank + 1 > r->n) r->n = (int32_t)rank + 1;
        a = e + 1;
    }
    if (!r->n) return err_set(err, SL_EFORMAT, "tiktoken.model holds no token");
    for (int32_t i = 0; i < r->n; i++) /* the special tokens start at the count of ranks: no gaps before */
        if (r->off[i] == (size_t)-1) return err_set(err, SL_EFORMAT, "tiktoken.model has no token of rank %d", i);
    return SL_OK;
}

/* GPT-2's bytes_to_unicode: the byte-level alphabet's character of each byte, UTF-8 */
static void byte_chars(char out[256][3], uint8_t len[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        uint32_t c = keep ? (uint32_t)b : (uint32_t)(256 + n++);
        if (c < 0x80) out[b][0] = (char)c, len[b] = 1;
        else out[b][0] = (char)(0xC0 | (c >> 6)), out[b][1] = (char)(0x80 | (c & 0x3F)), len[b] = 2;
    }
}

/* bytes s[0..n) in the byte-level alphabet into buf (room for 2n + 1); returns buf */
static char *byte_level(char chars[256][3], const uint8_t len[256], const uint8_t *s, size_t n, char *buf) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) memcpy(buf + k, chars[s[i]], len[s[i]]), k += len[s[i]];
    buf[k] = 0;
    return buf;
}

/* tiktoken's merge loop on token `id`'s bytes, merging only pairs ranked below it; *split: where the two parts
 * meet when it ends in exactly two (the token's merge), else 0. parts: room for the token's length. */
static size_t token_split(const ranks_t *r, int32_t id, uint32_t *parts) {
    const uint8_t *b = r->bytes + r->off[id];
    uint32_t n = r->tlen[id], np = n; /* parts[i]: where part i starts */
    for (uint32_t i = 0; i < n; i++) parts[i] = i;
    while (np > 1) {
        int32_t best = -1;
        uint32_t at = 0;
        for (uint32_t i = 0; i + 1 < np; i++) {
            uint32_t end = i + 2 < np ? parts[i + 2] : n;
            int32_t rk = map_get(&r->map, b + parts[i], end - parts[i]);
            if (rk >= 0 && (best < 0 || rk < best)) best = rk, at = i;
        }
        if (best < 0 || best >= id) break;
        memmove(parts + at + 1, parts + at + 2, (np - at - 2) * sizeof *parts);
        np--;
    }
    return np == 2 ? parts[1] : 0;
}

/* vocab and merges of the ranks into mo; 0, or -1 when out of memory */
static int vocab_merges(const ranks_t *r, cJSON *mo) {
    char chars[256][3], *buf = NULL, *buf2 = NULL;
    uint8_t len[256];
    byte_chars(chars, len);
    uint32_t maxlen = 1;
    for (int32_t i = 0; i < r->n; i++) maxlen = r->tlen[i] > maxlen ? r->tlen[i] : maxlen;
    uint32_t *parts = malloc(maxlen * sizeof *parts);
    buf = malloc(4 * (size_t)maxlen + 2), buf2 = malloc(2 * (size_t)maxlen + 1);
    cJSON *vocab = cJSON_AddObjectToObject(mo, "vocab"), *ml = cJSON_AddArrayToObject(mo, "merges");
    int bad = !parts || !buf || !buf2 || !vocab || !ml;
    for (int32_t i = 0; i < r->n && !bad; i++) {
        const uint8_t *b = r->bytes + r->off[i];
        bad |= !cJSON_AddNumberToObject(vocab, byte_level(chars, len, b, r->tlen[i], buf), (double)i);
        size_t at = r->tlen[i] > 1 ? token_split(r, i, parts) : 0;
        if (!at) continue;
        byte_level(chars, len, b, at, buf);
        size_t k = strlen(buf);
        buf[k] = ' ';
        strcpy(buf + k + 1, byte_level(chars, len, b + at, r->tlen[i] - at, buf2));
        bad |= !cJSON_AddItemToArray(ml, cJSON_CreateString(buf));
    }
    free(parts), free(buf), free(buf2);
    return bad ? -1 : 0;
}

/* the 258 special tokens after the ranks, named as tokenization_kimi.py names them */
static int special_tokens(const ranks_t *r, const char *config_json, cJSON *added) {
    cJSON *cfg = config_json ? cJSON_Parse(config_json) : NULL;
    const cJSON *dec = cJSON_GetObjectItem(cfg, "added_tokens_decoder");
    int bad = 0;
    for (int32_t id = r->n; id < r->n + N_SPECIAL && !bad; id++) {
        char key[24], name[48];
        snprintf(key, sizeof key, "%d", id);
        const char *c = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(dec, key), "content"));
        if (!c) snprintf(name, sizeof name, "<|reserved_token_%d|>", id), c = name;
        cJSON *o = cJSON_CreateObject();
        bad |= !o || !cJSON_AddItemToArray(added, o) || !cJSON_AddNumberToObject(o, "id", id) ||
               !cJSON_AddStringToObject(o, "content", c) || !cJSON_AddTrueToObject(o, "special");
    }
    cJSON_Delete(cfg);
    return bad ? -1 : 0;
}

sl_status tiktoken_tokenizer_json(const char *text, size_t n, const char *config_json, const char *pre, char **tok,
                                  sl_error *err) {
    *tok = NULL;
    ranks_t r;
    sl_status st = ranks_parse(text, n, &r, err);
    cJSON *root = st ? NULL : cJSON_CreateObject();
    if (!st) {
        cJSON_AddStringToObject(root, "version", "1.0");
        cJSON *added = cJSON_AddArrayToObject(root, "added_tokens"), *mo = cJSON_AddObjectToObject(root, "model");
        cJSON_AddStringToObject(mo, "type", "BPE");
        cJSON_AddTrueToObject(mo, "ignore_merges");
        if (gguf_pre_pipeline(root, pre)) st = err_set(err, SL_EUNSUPPORTED, "tiktoken: pre-tokenizer '%s' unknown", pre);
        else if (vocab_merges(&r, mo) || special_tokens(&r, config_json, added) || !(*tok = cJSON_PrintUnformatted(root)))
            st = err_set(err, SL_ENOMEM, "out of memory");
    }
    cJSON_Delete(root);
    ranks_free(&r);
    return st;
}
