/*
 * fuzz_tokenizer.c — tokenizer.json (text/tokenizer.c): the input is tokenizer.json; one that loads
 * tokenizes and detokenizes a fixed text with every special kind of piece (ChatML markers, digits,
 * spaces, newlines, multi-byte UTF-8).
 */
#include "fuzz.h"
#include "sluice.h"

static const char text[] = "<|im_start|>user\nHello,  wörld 12345 \t\n\n日本語 🙂<|im_end|>\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sl_tokenizer *tok = NULL;
    sl_error err;
    if (sl_tokenizer_from_json((const char *)data, size, NULL, NULL, &tok, &err) != SL_OK) return 0;
    int32_t *ids = NULL;
    int n = 0;
    if (sl_tokenize(tok, text, sizeof text - 1, 0, &ids, &n, &err) == SL_OK) {
        char *out = NULL;
        size_t len = 0;
        if (sl_detokenize(tok, ids, n, 0, &out, &len, &err) == SL_OK) free(out);
        free(ids);
    }
    sl_tokenizer_free(tok);
    return 0;
}
