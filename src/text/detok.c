/*
 * detok.c — ids back to text: whole sequences (sl_detokenize) and one id at a time (sl_detok).
 *
 * Each token's bytes were decoded from the ByteLevel alphabet at load (tok_piece). A token may end in
 * the middle of a UTF-8 character (CJK and emoji are often split across tokens), so the streaming
 * decoder keeps the unfinished tail in `pending` and only returns complete characters; bytes that can
 * never become a character are replaced by U+FFFD as soon as that is certain, exactly as the one-shot
 * decode would replace them.
 */
#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"
#include "util/err.h"

sl_status sl_detokenize(const sl_tokenizer *tok, const int32_t *ids, int n, int skip_special, char **out,
                        size_t *out_len, sl_error *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    tok_buf raw = {0}, txt = {0};
    sl_status st = SL_OK;
    int first_done = 0;
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *p = tok_piece(tok, ids[i], &len);
        if (!p) { st = err_set(err, SL_ERANGE, "token id %d is not in the vocabulary (%d ids)", ids[i], tok->n_vocab); goto out; }
        if (skip_special && sl_tokenizer_is_special(tok, ids[i])) continue;
        if (tok->strip_first == TOK_STRIP_META && !first_done) { /* Metaspace: the first token's spaces dropped */
            for (size_t k = 0; k < len; k++)
                if (p[k] != ' ' && tok_buf_put(&raw, p + k, 1)) goto oom;
        } else if (tok_buf_put(&raw, p, len)) goto oom;
        first_done = 1;
    }
    if (tok->strip_first == TOK_STRIP_ONE && raw.n && raw.p[0] == ' ') { /* Strip(" ", 1, 0) after the Fuse */
        memmove(raw.p, raw.p + 1, raw.n - 1);
        raw.n--;
    }
    if (tok_utf8_lossy(&txt, raw.p ? raw.p : "", raw.n) || tok_buf_put(&txt, "", 0)) goto oom;
    *out = txt.p;
    if (out_len) *out_len = txt.n;
    txt.p = NULL;
    goto out;
oom:
    st = err_set(err, SL_ENOMEM, "out of memory");
out:
    free(raw.p);
    free(txt.p);
    return st;
}

struct sl_detok {
    const sl_tokenizer *tok;
    int skip_special;
    tok_buf pending; /* bytes of an unfinished character */
    tok_buf out;     /* what the last call returned */
};

sl_status sl_detok_new(const sl_tokenizer *tok, int skip_special, sl_detok **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return SL_ENOMEM;
    (*out)->tok = tok;
    (*out)->skip_special = skip_special;
    return SL_OK;
}

void sl_detok_free(sl_detok *d) {
    if (!d) return;
    free(d->pending.p);
    free(d->out.p);
    free(d);
}

const char *sl_detok_push(sl_detok *d, int32_t id, size_t *len) {
    d->out.n = 0;
    *len = 0;
    if (tok_buf_put(&d->out, "", 0)) return NULL;
    size_t n;
    const char *p = tok_piece(d->tok, id, &n);
    if (!p || (d->skip_special && sl_tokenizer_is_special(d->tok, id))) return d->out.p;
    if (tok_buf_put(&d->pending, p, n)) return NULL;
    size_t done = tok_utf8_complete_prefix(d->pending.p, d->pending.n);
    if (tok_utf8_lossy(&d->out, d->pending.p, done)) return NULL;
    memmove(d->pending.p, d->pending.p + done, d->pending.n - done);
    d->pending.n -= done;
    *len = d->out.n;
    return d->out.p;
}

const char *sl_detok_flush(sl_detok *d, size_t *len) {
    d->out.n = 0;
    *len = 0;
    if (tok_buf_put(&d->out, "", 0) || tok_utf8_lossy(&d->out, d->pending.p ? d->pending.p : "", d->pending.n))
        return NULL;
    d->pending.n = 0;
    *len = d->out.n;
    return d->out.p;
}
