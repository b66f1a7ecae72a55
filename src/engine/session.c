/*
 * session.c — sessions (a sequence's state, fwd_seq) and their evaluation through the forward pass
 * (fwd_eval, fwd_eval_batch): the model holds the one workspace (fwd_ws) evaluations take turns in, under its
 * mutex. See handles.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/handles.h"
#include "util/clock.h"
#include "util/err.h"

sl_status sl_session_new(sl_model *m, int n_ctx, sl_session **out) {
    *out = NULL;
    if (n_ctx <= 0) n_ctx = m->n_ctx;
    if (n_ctx <= 0 || n_ctx > m->cfg.max_pos) n_ctx = m->cfg.max_pos;
    sl_session *s = calloc(1, sizeof *s);
    if (!s) return SL_ENOMEM;
    s->m = m;
    s->n_ctx = n_ctx;
    s->toks_ok = 1;
    s->sq = fwd_seq_new(&m->cfg, n_ctx, m->kv_type, m->kv_type_v, m->be);
    if (!s->sq) {
        free(s);
        return err_set(&m->err, SL_ENOMEM, "out of memory for a session of %d positions", n_ctx);
    }
    fwd_seq_set_pool(s->sq, &m->kv_pool);
    *out = s;
    return SL_OK;
}

void sl_session_free(sl_session *s) {
    if (!s) return;
    fwd_seq_free(s->sq);
    free(s->toks);
    free(s);
}

void sl_session_reset(sl_session *s) {
    fwd_seq_reset(s->sq);
    s->n_toks = 0;
    s->toks_ok = 1;
}
int sl_session_n_past(const sl_session *s) { return fwd_seq_n_past(s->sq); }
int sl_session_n_ctx(const sl_session *s) { return s->n_ctx; }

sl_status sl_session_reserve(sl_session *s, int n_pos) {
    if (n_pos > s->n_ctx)
        return err_set(&s->err, SL_ERANGE, "%d positions: more than the session's context of %d", n_pos, s->n_ctx);
    pthread_mutex_lock(&s->m->mu); /* the backend's allocations, as an evaluation's */
    sl_status st = fwd_seq_reserve(s->sq, n_pos);
    pthread_mutex_unlock(&s->m->mu);
    if (st == SL_EBUSY)
        return err_set(&s->err, st, "the KV pool is full: %llu of its %llu bytes in use, %d positions need more",
                       (unsigned long long)s->m->kv_pool.used, s->m->kv_pool.limit, n_pos);
    return st ? err_set(&s->err, st, "out of memory for the KV cache at %d positions", n_pos) : SL_OK;
}

void sl_session_trim(sl_session *s) {
    pthread_mutex_lock(&s->m->mu);
    fwd_seq_trim(s->sq);
    pthread_mutex_unlock(&s->m->mu);
}

/* The session's positions grew from n_toks to n_past by tokens t: recorded (a failed growth: not known). */
static void record(sl_session *s, const int32_t *t) {
    const int n = fwd_seq_n_past(s->sq) - s->n_toks;
    if (!s->toks_ok || n <= 0) return;
    if (s->n_toks + n > s->cap_toks) {
        int cap = s->cap_toks ? 2 * s->cap_toks : 256;
        while (cap < s->n_toks + n) cap *= 2;
        int32_t *g = realloc(s->toks, (size_t)cap * sizeof *g);
        if (!g) {
            s->toks_ok = 0;
            return;
        }
        s->toks = g, s->cap_toks = cap;
    }
    memcpy(s->toks + s->n_toks, t, (size_t)n * sizeof *t);
    s->n_toks += n;
}

void session_forget_tokens(sl_session *s, int known) {
    s->n_toks = 0;
    s->toks_ok = known;
}

sl_status sl_session_set_tokens(sl_session *s, const int32_t *t, int n) {
    if (n != fwd_seq_n_past(s->sq) || n < 0)
        return err_set(&s->err, SL_EINVAL, "%d tokens for a session of %d positions", n, fwd_seq_n_past(s->sq));
    session_forget_tokens(s, 1);
    record(s, t);
    return s->toks_ok ? SL_OK : err_set(&s->err, SL_ENOMEM, "out of memory");
}

sl_status sl_session_shift(sl_session *s, int n_keep, int n_discard) {
    const int past = fwd_seq_n_past(s->sq);
    s->err = (sl_error){SL_OK, ""};
    if (n_keep < 0 || n_discard < 1 || n_keep + n_discard > past)
        return err_set(&s->err, SL_EINVAL, "context shift: keep %d and drop %d of %d positions", n_keep, n_discard,
                       past);
    if (!s->toks_ok || s->n_toks != past)
        return err_set(&s->err, SL_EUNSUPPORTED, "context shift: the session's tokens are not known (a loaded state)");
    const int n = past - n_discard;
    int32_t *kept = malloc((size_t)(n > 0 ? n : 1) * sizeof *kept);
    if (!kept) return err_set(&s->err, SL_ENOMEM, "out of memory");
    memcpy(kept, s->toks, (size_t)n_keep * sizeof *kept);
    memcpy(kept + n_keep, s->toks + n_keep + n_discard, (size_t)(n - n_keep) * sizeof *kept);
    sl_session_reset(s);
    sl_status st = n > 0 ? sl_session_eval(s, kept, n, NULL, 0) : SL_OK;
    free(kept);
    return st;
}
const char *sl_session_errmsg(const sl_session *s) { return s ? s->err.msg : ""; }
void model_session_set_wide(sl_session *s, int on) { fwd_seq_set_wide(s->sq, on); }

sl_status sl_session_eval(sl_session *s, const int32_t *tokens, int n_tokens, float *logits, int all_logits) {
    s->err = (sl_error){SL_OK, ""};
    sl_model *m = s->m;
    pthread_mutex_lock(&m->mu);
    double t0 = clk_now_s();
    sl_status r = fwd_eval(m->ws, s->sq, &m->cfg, &m->w, &m->src, tokens, n_tokens, logits, all_logits, &s->err);
    record(s, tokens); /* the chunks that went in, also when a later one failed */
    m->eval_s += clk_now_s() - t0;
    if (!r) m->tokens += (uint64_t)n_tokens;
    pthread_mutex_unlock(&m->mu);
    return r;
}

sl_status sl_batch_eval(sl_model *m, const sl_batch_item *items, int n_items) {
    enum { STACK = 64 };
    fwd_item stack[STACK], *fi = n_items > STACK ? malloc((size_t)n_items * sizeof *fi) : stack;
    uint64_t n_tok = 0;
    sl_status r = SL_OK;
    if (n_items < 1 || !items || !fi) {
        r = n_items < 1 || !items ? err_set(&m->err, SL_EINVAL, "sl_batch_eval: no items")
                                  : err_set(&m->err, SL_ENOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < n_items; i++) {
        const sl_batch_item *b = &items[i];
        if (!b->session || b->session->m != m) {
            r = err_set(&m->err, SL_EINVAL, "batch item %d: %s", i,
                       b->session ? "the session belongs to another model" : "NULL session");
            goto done;
        }
        fi[i] = (fwd_item){b->session->sq, b->tokens, b->n_tokens, b->logits, b->all_logits};
        n_tok += (uint64_t)(b->n_tokens > 0 ? b->n_tokens : 0);
    }
    pthread_mutex_lock(&m->mu);
    double t0 = clk_now_s();
    r = fwd_eval_batch(m->ws, &m->cfg, &m->w, &m->src, fi, n_items, &m->err);
    m->eval_s += clk_now_s() - t0;
    if (!r) m->tokens += n_tok;
    for (int i = 0; i < n_items; i++) {
        items[i].session->err = r ? m->err : (sl_error){SL_OK, ""};
        record(items[i].session, items[i].tokens);
    }
    pthread_mutex_unlock(&m->mu);
done:
    if (fi != stack) free(fi);
    return r;
}
