/*
 * generate.c — the generation loop: prompt -> session, then sample / detokenize / evaluate until an
 * end-of-generation token, a stop string, max_tokens, a full context or the callback says stop.
 *
 * Text handed to the callback is final: the streaming detokenizer holds back unfinished UTF-8, and
 * textgen (textgen.h) holds back the tail of the text that could still be the start of a stop string;
 * the call for the last token carries whatever was held. When the callback asks to stop, what was held
 * comes in one more call with id -1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/textgen.h"
#include "text/tokenizer.h"
#include "util/clock.h"
#include "util/err.h"

sl_gen_params sl_gen_params_default(void) {
    sl_gen_params p;
    memset(&p, 0, sizeof p);
    p.max_tokens = 256;
    p.skip_special = 1;
    return p;
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

sl_status textgen_init(textgen *g, const sl_tokenizer *tok, const sl_gen_params *p) {
    memset(g, 0, sizeof *g);
    g->tok = tok;
    g->stop = p->stop;
    g->n_stop = p->stop ? p->n_stop : 0;
    g->max_tokens = p->max_tokens;
    if (!tok) return SL_OK; /* ids only (a model without a tokenizer): no text, no end-of-generation token */
    return sl_detok_new(tok, p->skip_special, &g->d) ? SL_ENOMEM : SL_OK;
}

void textgen_think(textgen *g, int mode) {
    g->phase = mode == 2 ? TG_THINK : mode == 1 ? TG_MAYBE : TG_ANSWER;
    g->scan_from = g->mark = 0;
}

static const char THINK_OPEN[] = "<think>", THINK_CLOSE[] = "</think>";

/* The first index >= i of s[0..n) that is not a space (n if none). */
static size_t skip_space(const char *s, size_t i, size_t n) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) i++;
    return i;
}

/* Moves the thinking phase on over the text held (textgen.h). */
static void think_advance(textgen *g) {
    const char *s = g->hold.p;
    size_t n = g->hold.n, ol = sizeof THINK_OPEN - 1, cl = sizeof THINK_CLOSE - 1;
    if (!n) return;
    for (;;) {
        if (g->phase == TG_MAYBE) {
            size_t i = skip_space(s, 0, n), k = n - i;
            if (k < ol && !memcmp(s + i, THINK_OPEN, k)) return; /* still undecided */
            if (k >= ol && !memcmp(s + i, THINK_OPEN, ol)) {
                g->phase = TG_THINK;
                g->mark = i + ol;
                g->n_thinking += g->n_maybe;
                continue;
            }
            g->phase = TG_ANSWER;
            g->scan_from = i;
        } else if (g->phase == TG_THINK) {
            const char *f = n > g->mark ? memmem(s + g->mark, n - g->mark, THINK_CLOSE, cl) : NULL;
            if (!f) return;
            g->phase = TG_AFTER;
            g->mark = (size_t)(f - s) + cl;
            continue;
        } else if (g->phase == TG_AFTER) {
            size_t i = skip_space(s, g->mark, n);
            g->mark = i;
            if (i == n) return;
            g->phase = TG_ANSWER;
            g->scan_from = i;
        }
        return;
    }
}

/* Bytes at the front of hold that can be handed out: in the answer, all but a tail that could begin
 * a stop string; inside the block, all but a tail that could begin </think>; nothing while a <think>
 * may still open the text. */
static size_t givable(const textgen *g) {
    const char *s = g->hold.p;
    size_t n = g->hold.n, keep = 0;
    if (g->phase == TG_MAYBE || !n) return 0;
    if (g->phase == TG_ANSWER)
        keep = g->n_stop ? stop_overlap(s + g->scan_from, n - g->scan_from, g->stop, g->n_stop) : 0;
    else if (g->phase == TG_THINK)
        for (size_t k = n - g->mark < sizeof THINK_CLOSE - 2 ? n - g->mark : sizeof THINK_CLOSE - 2; k > 0 && !keep; k--)
            if (!memcmp(s + n - k, THINK_CLOSE, k)) keep = k;
    return n - keep;
}

/* Offset of the first stop string in the answer's part of hold, or -1 (none, or not in the answer). */
static long answer_stop(const textgen *g) {
    if (g->phase != TG_ANSWER || !g->n_stop || !g->hold.n) return -1;
    long at = stop_find(g->hold.p + g->scan_from, g->hold.n - g->scan_from, g->stop, g->n_stop);
    return at < 0 ? -1 : at + (long)g->scan_from;
}

void textgen_free(textgen *g) {
    sl_detok_free(g->d);
    free(g->hold.p);
    memset(g, 0, sizeof *g);
}

/* The first `give` bytes of hold are handed out; they leave the buffer at the next call (the caller
 * reads them until then). */
static const char *hand_out(textgen *g, size_t give, size_t *len) {
    *len = give;
    g->shift = give;
    return g->hold.p ? g->hold.p : "";
}

static void unshift(textgen *g) {
    if (!g->shift) return;
    memmove(g->hold.p, g->hold.p + g->shift, g->hold.n - g->shift);
    g->hold.n -= g->shift;
    g->scan_from = g->scan_from > g->shift ? g->scan_from - g->shift : 0;
    g->mark = g->mark > g->shift ? g->mark - g->shift : 0;
    g->shift = 0;
}

/* The rest of the text (the detokenizer's unfinished bytes too), up to a stop string inside it. */
static int hand_out_all(textgen *g, const char **text, size_t *len) {
    size_t fl = 0;
    const char *f = g->d ? sl_detok_flush(g->d, &fl) : "";
    if (!f || tok_buf_put(&g->hold, f, fl)) return -1;
    think_advance(g);
    if (g->phase == TG_MAYBE) { /* ended before a <think> could open it: all of it is the answer */
        g->phase = TG_ANSWER;
        g->scan_from = skip_space(g->hold.p, 0, g->hold.n);
    }
    long at = answer_stop(g);
    *text = hand_out(g, at >= 0 ? (size_t)at : g->hold.n, len);
    g->shift = g->hold.n;
    return 0;
}

int textgen_push(textgen *g, int32_t id, int room, const char **text, size_t *len, sl_stop_reason *why) {
    size_t n;
    unshift(g);
    g->n_generated++;
    if (g->tok && sl_tokenizer_is_eog(g->tok, id)) {
        *why = SL_STOP_EOG;
        return hand_out_all(g, text, len) ? -1 : 1;
    }
    n = 0;
    const char *t = g->d ? sl_detok_push(g->d, id, &n) : "";
    if (!t || tok_buf_put(&g->hold, t, n)) return -1;
    think_advance(g);
    if (g->phase == TG_MAYBE) g->n_maybe++;
    else if (g->phase != TG_ANSWER) g->n_thinking++;
    long at = answer_stop(g);
    if (at >= 0) {
        *why = SL_STOP_STRING;
        *text = hand_out(g, (size_t)at, len);
        g->shift = g->hold.n;
        return 1;
    }
    /* answer_only: the block's tokens (n_thinking) are not counted; while a <think> may still open
     * the text (n_maybe pending) those are counted as the answer's */
    int counted = g->answer_only ? g->n_generated - g->n_thinking : g->n_generated;
    if ((g->max_tokens > 0 && counted >= g->max_tokens) || !room) {
        *why = SL_STOP_LENGTH;
        return hand_out_all(g, text, len) ? -1 : 1;
    }
    *text = hand_out(g, givable(g), len);
    return 0;
}

const char *textgen_flush(textgen *g, size_t *len) {
    const char *text;
    unshift(g);
    return hand_out_all(g, &text, len) ? NULL : text;
}

/* Room in s for n more tokens: already there, or (p->context_shift) made by sl_session_shift keeping p->n_keep and
 * dropping half of the rest or what n needs, whichever is more. *room 1 when there is room, 0 when not (no shift,
 * or not even dropping all but n_keep makes it); a failed shift's status (err says), else SL_OK. */
static sl_status make_room(sl_session *s, const sl_gen_params *p, int n, int *room, sl_error *err) {
    const int n_ctx = sl_session_n_ctx(s), past = sl_session_n_past(s);
    *room = past + n <= n_ctx;
    if (*room) return SL_OK;
    const int keep = p->n_keep < 0 ? 0 : p->n_keep < past ? p->n_keep : past;
    const int need = past + n - n_ctx, half = (past - keep) / 2, drop = need > half ? need : half;
    if (!p->context_shift || drop > past - keep || drop < 1) return SL_OK;
    sl_status st = sl_session_shift(s, keep, drop);
    *room = !st;
    return st ? err_set(err, st, "%s", sl_session_errmsg(s)) : SL_OK;
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
    if (n_prompt < 1) return err_set(err, SL_EINVAL, "empty prompt: nothing to generate from");
    int n_ctx = sl_session_n_ctx(s), past = sl_session_n_past(s), room = 0;
    sl_status st = make_room(s, &p, n_prompt, &room, err);
    if (st) return st;
    if (!room)
        return err_set(err, SL_ERANGE, "the prompt of %d tokens does not fit the context (%d tokens already in the session, %d positions)",
                      n_prompt, past, n_ctx);
    int V = sl_model_n_vocab(m);
    float *logits = malloc((size_t)V * sizeof *logits);
    textgen g;
    st = textgen_init(&g, tok, &p);
    if (!logits || st) { st = err_set(err, SL_ENOMEM, "out of memory"); goto out; }
    for (int i = 0; i < n_prompt; i++) sl_sampler_accept(smp, prompt[i]);
    double t0 = clk_now_s();
    if ((st = sl_session_eval(s, prompt, n_prompt, logits, 0))) { err_set(err, st, "%s", sl_session_errmsg(s)); goto out; }
    double t1 = clk_now_s();
    r.prefill_s = t1 - t0;
    while (p.max_tokens > 0) {
        int32_t id = sl_sampler_sample(smp, logits);
        sl_sampler_accept(smp, id);
        r.n_generated++;
        r.last_token = id;
        const char *text;
        size_t len;
        sl_stop_reason why = SL_STOP_LENGTH;
        int end = textgen_push(&g, id, p.context_shift || sl_session_n_past(s) < n_ctx, &text, &len, &why);
        if (end < 0) { st = err_set(err, SL_ENOMEM, "out of memory"); goto out; }
        int stop_cb = cb ? cb(user, id, text, len) : 0;
        if (end) {
            r.stop = why;
            /* the end-of-generation token goes into the session, so a following turn continues after it */
            if (why == SL_STOP_EOG && !(st = make_room(s, &p, 1, &room, err)) && room)
                sl_session_eval(s, &id, 1, NULL, 0);
            break;
        }
        if (stop_cb) {
            r.stop = SL_STOP_CALLBACK;
            const char *f = textgen_flush(&g, &len);
            if (!f) { st = err_set(err, SL_ENOMEM, "out of memory"); goto out; }
            if (len) cb(user, -1, f, len);
            break;
        }
        if ((st = make_room(s, &p, 1, &room, err))) goto out;
        if (!room) break; /* a shift cannot make room (n_keep): the length's end */
        if ((st = sl_session_eval(s, &id, 1, logits, 0))) { err_set(err, st, "%s", sl_session_errmsg(s)); goto out; }
    }
    r.decode_s = clk_now_s() - t1;
out:
    if (res) *res = r;
    free(logits);
    textgen_free(&g);
    return st;
}
