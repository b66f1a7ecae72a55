/*
 * utf8.c — UTF-8 validation and repair shared by the tokenizer and the streaming decoder, plus the
 * growing byte buffer.
 *
 * Invalid input is repaired the way CPython's bytes.decode("utf-8", "replace") and Rust's
 * String::from_utf8_lossy do it: each maximal subpart of an ill-formed sequence (Unicode 15, 3.9
 * "U+FFFD Substitution of Maximal Subparts") becomes one U+FFFD.
 */
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"

int tok_buf_put(tok_buf *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int tok_buf_puts(tok_buf *b, const char *s) { return tok_buf_put(b, s, strlen(s)); }

/* Length of the well-formed sequence at s (1..4), or the negative length of the maximal ill-formed
 * subpart (-1..-3); *truncated is set when the subpart is a valid prefix cut by the end of input. */
static int seq_len(const unsigned char *s, size_t n, int *truncated) {
    unsigned c = s[0];
    *truncated = 0;
    if (c < 0x80) return 1;
    int need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return -1;
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n) { *truncated = 1; return -i; }
        unsigned d = s[i];
        if (i == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) return -i;
    }
    return need + 1;
}

size_t tok_utf8_invalid_at(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) { i++; continue; }
        int t, k = seq_len(u + i, n - i, &t);
        if (k < 0) return i;
        i += (size_t)k;
    }
    return n;
}

int tok_utf8_valid(const char *s, size_t n) { return tok_utf8_invalid_at(s, n) == n; }

size_t tok_utf8_complete_prefix(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        int t, k = seq_len(u + i, n - i, &t);
        if (k < 0 && t) return i;
        i += (size_t)(k < 0 ? -k : k);
    }
    return n;
}

int tok_utf8_lossy(tok_buf *out, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0; /* run: start of the pending valid stretch */
    while (i < n) {
        if (u[i] < 0x80) { i++; continue; }
        int t, k = seq_len(u + i, n - i, &t);
        if (k > 0) { i += (size_t)k; continue; }
        if (tok_buf_put(out, s + run, i - run) || tok_buf_put(out, "\xEF\xBF\xBD", 3)) return -1;
        i += (size_t)-k;
        run = i;
    }
    return tok_buf_put(out, s + run, n - run);
}
