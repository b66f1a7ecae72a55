/*
 * tokenizer.h — HF tokenizer.json byte-level BPE, and SentencePiece-style BPE (text/tok_spm.c; docs/TEXT.md), the
 * internal side of the public sl_tokenizer.
 *
 * The pipeline of `encode`, as HF `tokenizers` runs it for Qwen:
 *   invalid UTF-8 -> U+FFFD (maximal subparts, as Python's errors="replace")
 *   -> split on added tokens (leftmost, longest first; special and non-special alike)
 *   -> per remaining piece: NFC (utf8proc) -> Split regex (PCRE2, UTF + UCP, "Isolated")
 *   -> ByteLevel bytes -> BPE (merge ranks from a pair hash map, results cached per pre-token).
 * Decoding maps ids back to bytes (ByteLevel inverse) and replaces invalid UTF-8 with U+FFFD.
 *
 * A tokenizer is immutable after load except for the BPE cache, which a mutex guards: every function
 * here is safe to call from several threads at once.
 */
#ifndef SL_TOKENIZER_H
#define SL_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

/* Growing byte buffer; all functions leave it valid on failure (status says ENOMEM). */
typedef struct tok_buf {
    char *p;
    size_t n, cap;
} tok_buf;
int tok_buf_put(tok_buf *b, const void *s, size_t n); /* 0 or -1 (out of memory) */
int tok_buf_puts(tok_buf *b, const char *s);

/* Length of the longest prefix of s[0..n) that is complete UTF-8 or definitely invalid; the rest is
 * an incomplete (but so far valid) sequence at the very end. Cannot fail. */
size_t tok_utf8_complete_prefix(const char *s, size_t n);
/* Appends s[0..n) to out with every invalid maximal subpart replaced by U+FFFD. Returns 0 or -1. */
int tok_utf8_lossy(tok_buf *out, const char *s, size_t n);
/* 1 if s[0..n) is valid UTF-8. */
int tok_utf8_valid(const char *s, size_t n);
/* Offset of the first byte of s[0..n) that starts no well-formed character; n when s is valid UTF-8. */
size_t tok_utf8_invalid_at(const char *s, size_t n);

/* Decoded bytes of one token (ByteLevel inverse applied); *len receives their count. NULL for an
 * id outside the vocabulary. The pointer lives as long as the tokenizer. */
const char *tok_piece(const sl_tokenizer *tok, int32_t id, size_t *len);

/* Chat template source ("" if none) and the token texts of EOS and BOS ("" if none); borrowed. */
const char *tok_chat_template(const sl_tokenizer *tok);
const char *tok_eos_text(const sl_tokenizer *tok);
const char *tok_bos_text(const sl_tokenizer *tok);

/* Ids of the end-of-generation tokens (EOS, <|im_end|>, <|endoftext|> where present); borrowed. */
int tok_eog_ids(const sl_tokenizer *tok, const int32_t **ids);

/* Python json.dumps(x, ensure_ascii=False) of a cJSON value (chat.c). Returns 0 or -1. */
struct cJSON;
int chat_json_dumps(tok_buf *b, const struct cJSON *j);

/* The DeepSeek-V4 template (chat_dsv4.c): chat_is_dsv4 says whether the template text is it; chat_format_dsv4
 * renders msgs as it does (sl_chat_format's contract; roles already checked). */
int chat_is_dsv4(const char *tmpl);
sl_status chat_format_dsv4(const sl_tokenizer *tok, const sl_chat_msg *msgs, int n, const sl_chat_params *p,
                           char **out, sl_error *err);

#endif
