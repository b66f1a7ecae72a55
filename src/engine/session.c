/*
 * session.c — sessions (a sequence's state, fwd_seq) and their evaluation through the forward pass
 * (fwd_eval, fwd_eval_batch): the model holds the one workspace (fwd_ws) evaluations take turns in, under its
 * mutex. See handles.h.
 */
#include <stdio.h>
#include <stdlib.h>

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
    s->sq = fwd_seq_new(&m->cfg, n_ctx, m->kv_type, m->be);
    if (!s->sq) {
        free(s);
        return err_set(&m->err, SL_ENOMEM, "out of memory for a session of %d positions", n_ctx);
    }
    *out = s;
    return SL_OK;
}

void sl_session_free(sl_session *s) {
    if (!s) return;
    fwd_seq_free(s->sq);
    free(s);
}

void sl_session_reset(sl_session *s) { fwd_seq_reset(s->sq); }
int sl_session_n_past(const sl_session *s) { return fwd_seq_n_past(s->sq); }
const char *sl_session_errmsg(const sl_session *s) { return s ? s->err.msg : ""; }
void model_session_set_wide(sl_session *s, int on) { fwd_seq_set_wide(s->sq, on); }

sl_status sl_session_eval(sl_session *s, const int32_t *tokens, int n_tokens, float *logits, int all_logits) {
    s->err = (sl_error){SL_OK, ""};
    sl_model *m = s->m;
    pthread_mutex_lock(&m->mu);
    double t0 = clk_now_s();
    sl_status r = fwd_eval(m->ws, s->sq, &m->cfg, &m->w, &m->src, tokens, n_tokens, logits, all_logits, &s->err);
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
    for (int i = 0; i < n_items; i++) items[i].session->err = r ? m->err : (sl_error){SL_OK, ""};
    pthread_mutex_unlock(&m->mu);
done:
    if (fi != stack) free(fi);
    return r;
}
