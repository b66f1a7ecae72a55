/*
 * generate.c — the generation loop: prompt -> session, then sample / detokenize / evaluate until an
 * end-of-generation token, a stop string, max_tokens, a full context or the callback says stop.
 *
 * Text handed to the callback is final: the streaming detokenizer holds back unfinished UTF-8, and this
 * loop holds back the tail of the text that could still be the start of a stop string. Whatever is held
 * when generation ends (other than by a stop string) is delivered in one last call with id -1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/tokenizer.h"
#include "util/err.h"

sl_gen_params sl_gen_params_default(void) {
    sl_gen_params p;
    memset(&p, 0, sizeof p);
    p.max_tokens = 256;
    p.skip_special = 1;
    return p;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of some stop string. */
static size_t stop_overlap(const char *s, size_t n, const char *const *stop, int n_stop) {
    size_t best = 0;
    for (int i = 0; i < n_stop; i++) {
        size_t sl = strlen(stop[i]);
        if (!sl) continue;
        for (size_t k = sl > n + 1 ? n : sl - 1; k > best; k--)
            if (!memcmp(s + n - k, stop[i], k)) { best = k; break; }
    }
    return best;
}

/* First occurrence of any stop string in s[0..n): its offset, or -1. */
static long stop_find(const char *s, size_t n, const char *const *stop, int n_stop) {
    long first = -1;
    for (int i = 0; i < n_stop; i++) {
        size_t sl = strlen(stop[i]);
        if (!sl) continue;
        const char *p = memmem(s, n, stop[i], sl);
        if (p && (first < 0 || p - s < first)) first = p - s;
    }
    return first;
}

sl_status sl_generate(sl_model *m, sl_session *s, const sl_tokenizer *tok, sl_sampler *smp, const int32_t *prompt,
                      int n_prompt, const sl_gen_params *params, sl_token_fn cb, void *user, sl_gen_result *res,
                      sl_error *err) {
    sl_gen_params p = params ? *params : sl_gen_params_default();
    sl_gen_result r;
    memset(&r, 0, sizeof r);
    r.last_token = -1;
    r.n_prompt = n_prompt;
    r.stop = SL_STOP_LENGTH;
    if (n_prompt < 1) return sl_err(err, SL_EINVAL, "empty prompt: nothing to generate from");
    int n_ctx = sl_model_n_ctx(m), past = sl_session_n_past(s);
    if (past + n_prompt > n_ctx)
        return sl_err(err, SL_ERANGE, "the prompt of %d tokens does not fit the context (%d tokens already in the session, %d positions)",
                      n_prompt, past, n_ctx);
    int V = sl_model_n_vocab(m);
    float *logits = malloc((size_t)V * sizeof *logits);
    sl_detok *d = NULL;
    tok_buf hold = {0};
    sl_status st = SL_OK;
    if (!logits || sl_detok_new(tok, p.skip_special, &d)) { st = sl_err(err, SL_ENOMEM, "out of memory"); goto out; }
    for (int i = 0; i < n_prompt; i++) sl_sampler_accept(smp, prompt[i]);
    double t0 = now_s();
    if ((st = sl_session_eval(s, prompt, n_prompt, logits, 0))) { sl_err(err, st, "%s", sl_session_errmsg(s)); goto out; }
    double t1 = now_s();
    r.prefill_s = t1 - t0;
    for (int i = 0; i < p.max_tokens; i++) {
        int32_t id = sl_sampler_sample(smp, logits);
        sl_sampler_accept(smp, id);
        r.n_generated++;
        r.last_token = id;
        if (sl_tokenizer_is_eog(tok, id)) {
            r.stop = SL_STOP_EOG;
            if (sl_session_n_past(s) < n_ctx) sl_session_eval(s, &id, 1, NULL, 0); /* state continues after it */
            if (cb) {
                size_t fl;
                const char *f = sl_detok_flush(d, &fl);
                if (!f || tok_buf_put(&hold, f, fl)) { st = sl_err(err, SL_ENOMEM, "out of memory"); goto out; }
                cb(user, id, hold.p ? hold.p : "", hold.n);
            }
            hold.n = 0;
            break;
        }
        size_t len;
        const char *txt = sl_detok_push(d, id, &len);
        if (!txt || tok_buf_put(&hold, txt, len)) { st = sl_err(err, SL_ENOMEM, "out of memory"); goto out; }
        long at = p.n_stop ? stop_find(hold.p, hold.n, p.stop, p.n_stop) : -1;
        if (at >= 0) {
            r.stop = SL_STOP_STRING;
            if (cb) cb(user, id, hold.p, (size_t)at);
            hold.n = 0;
            break;
        }
        size_t keep = p.n_stop ? stop_overlap(hold.p, hold.n, p.stop, p.n_stop) : 0, give = hold.n - keep;
        int stop_cb = cb ? cb(user, id, hold.p, give) : 0;
        memmove(hold.p, hold.p + give, keep);
        hold.n = keep;
        if (stop_cb) { r.stop = SL_STOP_CALLBACK; break; }
        if (i + 1 == p.max_tokens || sl_session_n_past(s) >= n_ctx) { r.stop = SL_STOP_LENGTH; break; }
        if ((st = sl_session_eval(s, &id, 1, logits, 0))) { sl_err(err, st, "%s", sl_session_errmsg(s)); goto out; }
    }
    if (r.stop != SL_STOP_STRING && r.stop != SL_STOP_EOG && cb) {
        size_t fl;
        const char *f = sl_detok_flush(d, &fl);
        if (!f || tok_buf_put(&hold, f, fl)) { st = sl_err(err, SL_ENOMEM, "out of memory"); goto out; }
        if (hold.n) cb(user, -1, hold.p, hold.n);
    }
    r.decode_s = now_s() - t1;
out:
    if (res) *res = r;
    free(hold.p);
    free(logits);
    sl_detok_free(d);
    return st;
}
