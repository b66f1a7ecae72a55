/*
 * fuzz_tokenize.c — tokenize arbitrary bytes with the demo model's tokenizer (byte-level BPE, Qwen's split
 * regex, NFC), then detokenize: valid UTF-8 must come back as its NFC form byte for byte (abort otherwise:
 * a finding), invalid UTF-8 must not crash. Streaming detokenization (sl_detok) of the same ids must give the same text.
 */
#include <utf8proc.h>

#include "fuzz.h"
#include "sluice.h"
#include "text/tokenizer.h"

static sl_tokenizer *tok;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sl_error err;
    if (!tok) {
        char p[4096];
        snprintf(p, sizeof p, "%s/models/demo.sluice", FUZZ_ROOT);
        if (sl_tokenizer_load(p, &tok, &err) != SL_OK) { fprintf(stderr, "fuzz: %s\n", err.msg); abort(); }
    }
    int32_t *ids = NULL;
    int n = 0;
    if (sl_tokenize(tok, (const char *)data, size, 0, &ids, &n, &err) != SL_OK) return 0;
    char *out = NULL;
    size_t len = 0;
    if (sl_detokenize(tok, ids, n, 0, &out, &len, &err) == SL_OK) {
        int valid = tok_utf8_valid((const char *)data, size);
        if (valid) { /* the tokenizer normalises to NFC (Qwen's normalizer): the round trip gives NFC(input) */
            utf8proc_uint8_t *nfc = NULL;
            utf8proc_ssize_t nl = utf8proc_map(data, (utf8proc_ssize_t)size, &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (nl >= 0 && ((size_t)nl != len || memcmp(out, nfc, len))) abort();
            free(nfc);
        }
        sl_detok *d = NULL;
        if (valid && sl_detok_new(tok, 0, &d) == SL_OK) {
            tok_buf b = {0};
            for (int i = 0; i < n; i++) {
                size_t pl = 0;
                const char *piece = sl_detok_push(d, ids[i], &pl);
                if (piece && tok_buf_put(&b, piece, pl)) abort();
            }
            size_t fl = 0;
            const char *rest = sl_detok_flush(d, &fl);
            if (rest && tok_buf_put(&b, rest, fl)) abort();
            if (b.n != len || (len && memcmp(b.p, out, len))) abort();
            free(b.p);
            sl_detok_free(d);
        }
        free(out);
    }
    free(ids);
    return 0;
}
