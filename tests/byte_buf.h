/*
 * byte_buf.h — a growing byte buffer for the tests that write binary files byte by byte (GGUF in test_gguf.c,
 * llama-imatrix's two layouts in test_imatrix.c): put appends raw bytes, u32/u64 little-endian integers (the
 * host's order, x86-64 and aarch64), str a GGUF string (u64 length, then the bytes, no NUL). The caller frees p.
 * realloc failing aborts the test through the NULL dereference; these are test fixtures, not library code.
 */
#ifndef SLUICE_TESTS_BYTE_BUF_H
#define SLUICE_TESTS_BYTE_BUF_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned char *p;
    size_t n, cap;
} buf;

static inline void put(buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static inline void u32(buf *b, uint32_t v) { put(b, &v, 4); }
static inline void u64(buf *b, uint64_t v) { put(b, &v, 8); }
static inline void str(buf *b, const char *s) {
    u64(b, strlen(s));
    put(b, s, strlen(s));
}

#endif
