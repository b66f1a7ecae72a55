/*
 * gen.c — generations (http.h): the bridge between a connection and its generation in a scheduler,
 * and the endpoint of every API dialect's route (gen_endpoint): parse the body in the route's
 * dialect, build the prompt, submit, answer.
 *
 * A generation (`gen`) is shared by three parties, each holding a reference: the connection's request
 * (until libmicrohttpd reports it completed), the scheduler (until its done event), and for a streamed
 * answer the response (until libmicrohttpd frees it). The scheduler's emit callback only appends to
 * the gen's pending text and signals; the connection's thread does all the formatting: it waits for
 * text (polling its socket for a hang-up every 50 ms, so a client that goes away cancels its
 * generation at once, whether queued, prefilling or decoding; a client that half-closes its side after
 * the request counts as gone, as with nginx), runs it through the answer parser (api.h) and writes
 * its dialect's SSE events (streamed) or, at the end, its one JSON body.
 *
 * Sections: generations; the prompt; the endpoint.
 */
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "serve/http.h"
#include "util/clock.h"

/* ---- generations ------------------------------------------------------------------------------- */

struct gen {
    srv_server *s;
    const model_slot *ms;
    const api_dialect *api; /* the dialect of its route */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    /* filled by the scheduler's emit (under mu) */
    tok_buf pending;
    int32_t *ids;
    int n_ids, cap_ids;
    api_token_lp *lps;      /* with logprobs: each token's */
    int n_lps, cap_lps;
    int done, oom;
    sl_status status;
    char errmsg[256];
    sl_stop_reason stop;
    int n_prompt, n_generated, n_reused, n_thinking, n_kept;
    /* the connection's thread only */
    int think;              /* the answer's thinking mode (out_init's, srv_request's) */
    uint64_t id;
    int submitted, canceled;
    int fd; /* the client's socket, polled for a hang-up */
    api_gen g;
    gr_state *grammar;      /* structured outputs: where the answer is in g.grammar (the scheduler's) */
    int32_t *prompt;
    int n_prompt_tokens;
    char *echo;             /* completions with echo: the prompt's text */
    out_parser op;
    api_result res;
    api_stream as;
    api_meta meta;
    size_t delivered;       /* bytes of generated text taken from pending */
    int lp_sent;            /* entries of lps already streamed */
    size_t lp_offset;       /* completions: where the next streamed token's text starts */
    size_t sent;            /* bytes of as.out handed to libmicrohttpd */
    int finished;           /* the closing events are in as.out */
    int gone;               /* the client went away */
    double polled;          /* when its socket was last polled */
    gen *next;              /* n > 1: the next choice's generation (the request holds a reference to each) */
    char *conv;             /* Responses: the input items (JSON array text, kept ones first) to keep with the output */
    gen *turn;              /* n > 1 streamed (the first choice's): the choice to wait for next */
    int closed;             /* n > 1 streamed: the closing events of all the choices are written */
};

#define POLL_S 0.05 /* how often a waiting connection looks for a hang-up */

/* Another reference (the scheduler may be dropping its own at the same time). */
static void gen_ref(gen *g) {
    pthread_mutex_lock(&g->mu);
    g->refs++;
    pthread_mutex_unlock(&g->mu);
}

static void gen_release(gen *g) {
    pthread_mutex_lock(&g->mu);
    int last = --g->refs == 0;
    pthread_mutex_unlock(&g->mu);
    if (!last) return;
    free(g->pending.p);
    free(g->ids);
    free(g->lps);
    free(g->prompt);
    free(g->echo);
    free(g->conv);
    gr_state_free(g->grammar);
    api_gen_free(&g->g);
    out_free(&g->op);
    api_result_free(&g->res);
    api_stream_free(&g->as);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}

/* The scheduler's emit: appends and signals; never blocks beyond the gen's lock. */
static int gen_emit(void *user, const srv_event *ev) {
    gen *g = user;
    pthread_mutex_lock(&g->mu);
    int stop = g->canceled;
    if (ev->done) {
        g->done = 1;
        g->status = ev->status;
        snprintf(g->errmsg, sizeof g->errmsg, "%s", ev->errmsg && *ev->errmsg ? ev->errmsg : sl_strerror(ev->status));
        g->stop = ev->stop;
        g->n_prompt = ev->n_prompt;
        g->n_generated = ev->n_generated;
        g->n_thinking = ev->n_thinking;
    }
    g->n_reused = ev->n_reused; /* on every event: a stream's first piece says it */
    g->n_kept = ev->n_kept;
    if (!ev->done) {
        if (ev->len && tok_buf_put(&g->pending, ev->text, ev->len)) g->oom = stop = 1;
        if (ev->id >= 0) {
            if (g->n_ids == g->cap_ids) {
                int cap = g->cap_ids ? 2 * g->cap_ids : 64;
                int32_t *v = realloc(g->ids, (size_t)cap * sizeof *v);
                if (v) g->ids = v, g->cap_ids = cap;
            }
            if (g->n_ids < g->cap_ids) g->ids[g->n_ids++] = ev->id;
        }
        if (ev->id >= 0 && ev->logprob) {
            if (g->n_lps == g->cap_lps) {
                int cap = g->cap_lps ? 2 * g->cap_lps : 64;
                api_token_lp *v = realloc(g->lps, (size_t)cap * sizeof *v);
                if (v) g->lps = v, g->cap_lps = cap;
                else g->oom = stop = 1;
            }
            if (g->n_lps < g->cap_lps) g->lps[g->n_lps++] = (api_token_lp){ev->id, *ev->logprob};
        }
    }
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (ev->done) gen_release(g); /* the scheduler's reference */
    return stop;
}

static void gen_cancel(gen *g) {
    pthread_mutex_lock(&g->mu);
    int done = g->done;
    g->canceled = 1;
    pthread_mutex_unlock(&g->mu);
    if (done || !g->submitted) return;
    pthread_rwlock_rdlock(&g->s->mu);
    if (!g->s->quitting) srv_cancel(g->ms->sched, g->id);
    pthread_rwlock_unlock(&g->s->mu);
}

/* 1 when the peer has closed or reset the connection. */
static int peer_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd pf = {fd, POLLRDHUP, 0};
    return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Which stop string ended the answer: the one that begins where the delivered text ends, in the text
 * of every generated token (the scheduler does not say which). */
static const char *which_stop(gen *g) {
    if (g->g.n_stop == 1) return g->g.stop[0];
    char *full = NULL;
    size_t n = 0;
    const char *found = g->g.n_stop ? g->g.stop[0] : NULL;
    if (sl_detokenize(g->ms->tok, g->ids, g->n_ids, 1, &full, &n, NULL) == SL_OK && g->delivered <= n)
        for (int i = 0; i < g->g.n_stop; i++) {
            size_t k = strlen(g->g.stop[i]);
            if (k <= n - g->delivered && !memcmp(full + g->delivered, g->g.stop[i], k)) { found = g->g.stop[i]; break; }
        }
    free(full);
    return found;
}

/* A seed for a request that gave none. */
static uint64_t random_seed(void) {
    uint64_t x;
    if (getrandom(&x, sizeof x, GRND_NONBLOCK) == (ssize_t)sizeof x) return x;
    static _Atomic uint64_t counter;
    x = (uint64_t)(clk_now_s() * 1e9) + ++counter;
    x ^= x >> 31;
    return x * 0x9e3779b97f4a7c15ull;
}

/* The error of a generation that did not end well. */
static void gen_error(const gen *g, api_error *e) {
    if (g->oom) api_fail(e, 500, NULL, NULL, "out of memory");
    else if (g->status == SL_ECANCELED) api_fail(e, 503, NULL, NULL, "the generation was canceled (the server is stopping)");
    else if (g->status == SL_ERANGE || g->status == SL_EINVAL) api_fail(e, 400, NULL, NULL, "%s", g->errmsg);
    else if (g->status == SL_EBUSY) /* the KV pool ran out of pages (sched.c): another time may fit */
        api_fail(e, 503, NULL, "server_overloaded", "the server is busy: %s", g->errmsg);
    else api_fail(e, 500, NULL, NULL, "generation failed: %s", g->errmsg);
}

/* A streamed answer's logprobs: one chunk with the entries that came since the last. 0 or -1. */
static int stream_logprobs(gen *g) {
    if (!g->g.logprobs || !g->g.stream) return 0;
    pthread_mutex_lock(&g->mu);
    int n = g->n_lps - g->lp_sent;
    api_token_lp *t = n > 0 ? malloc((size_t)n * sizeof *t) : NULL;
    if (t) memcpy(t, g->lps + g->lp_sent, (size_t)n * sizeof *t);
    pthread_mutex_unlock(&g->mu);
    if (n <= 0) return 0;
    if (!t) return -1;
    g->lp_sent += n;
    cJSON *lp = api_logprobs_json(g->g.kind, g->ms->tok, t, n, g->lp_offset);
    for (int i = 0; i < n; i++) {
        size_t len = 0;
        if (!sl_tokenizer_is_special(g->ms->tok, t[i].id)) tok_piece(g->ms->tok, t[i].id, &len);
        g->lp_offset += len;
    }
    free(t);
    return api_stream_logprobs(&g->as, lp);
}

static void resp_keep(gen *g, const char *output);

/* Waits for more of the answer and turns it into output: SSE bytes (streamed) or the collected result.
 * Returns 1 while the answer goes on, 0 when it has ended (g->finished; streamed: the closing events
 * are written), -1 when the client went away (the generation is canceled) or memory ran out. */
static int gen_pump(gen *g) {
    out_fn fn = g->g.stream ? api_stream_piece : api_result_add;
    void *user = g->g.stream ? (void *)&g->as : (void *)&g->res;
    tok_buf text = {0};
    pthread_mutex_lock(&g->mu);
    for (;;) {
        double t = clk_now_s();
        if (t - g->polled >= POLL_S && !g->done) { /* also while text flows: a whole answer writes nothing */
            g->polled = t;
            if (peer_gone(g->fd)) {
                pthread_mutex_unlock(&g->mu);
                g->gone = 1;
                gen_cancel(g);
                return -1;
            }
        }
        if (g->pending.n || g->done) break;
        struct timespec ts = clk_deadline_ns((long)(POLL_S * 1e9));
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    text = g->pending; /* take it whole: the scheduler starts a new buffer */
    memset(&g->pending, 0, sizeof g->pending);
    int done = g->done;
    g->as.n_reused = g->n_reused;
    g->as.n_kept = g->n_kept;
    pthread_mutex_unlock(&g->mu);
    g->delivered += text.n;
    int r = out_push(&g->op, text.p, text.n, fn, user);
    free(text.p);
    if (r || stream_logprobs(g)) goto oom;
    if (!done) return 1;
    if (out_end(&g->op, fn, user)) goto oom;
    g->finished = 1;
    if (!g->g.stream) return 0;
    if (g->status != SL_OK || g->oom) {
        api_error e;
        gen_error(g, &e);
        return api_stream_error(&g->as, &e) ? -1 : 0;
    }
    api_done d = {g->stop, g->stop == SL_STOP_STRING ? which_stop(g) : NULL, g->n_prompt, g->n_generated, g->n_reused, g->n_thinking, g->n_kept};
    if (api_stream_end(&g->as, &d)) return -1;
    if (g->conv) resp_keep(g, g->as.output); /* Responses: for a later previous_response_id */
    return 0;
oom:
    g->oom = 1;
    gen_cancel(g);
    return -1;
}

/* Hands out up to max bytes of x's SSE output; 0 when it has none. */
static size_t take_out(gen *x, char *buf, size_t max) {
    size_t k = x->as.out.n - x->sent < max ? x->as.out.n - x->sent : max;
    memcpy(buf, x->as.out.p + x->sent, k);
    x->sent += k;
    if (x->sent == x->as.out.n) x->sent = x->as.out.n = 0;
    return k;
}

/* n > 1 streamed, every choice finished: the usage chunk of them all and [DONE] (after the first
 * choice's output); an error in one ends the stream after its error event, the others canceled. */
static int close_choices(gen *g) {
    api_done sum = {g->stop, NULL, g->n_prompt, 0, g->n_reused, 0, g->n_kept};
    g->closed = 1;
    for (gen *x = g; x; x = x->next) {
        if (x->status != SL_OK || x->oom) return 0; /* its error event ended with [DONE] */
        sum.n_generated += x->n_generated;
        sum.n_thinking += x->n_thinking;
    }
    return oai_stream_close(&g->as, &sum);
}

/* libmicrohttpd's content reader of a streamed answer: blocks (this connection's thread) until there
 * are bytes to send. With n > 1 the choices' events are interleaved, each choice's whole, waiting
 * for each in turn. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    gen *g = cls;
    (void)pos;
    for (;;) {
        int all = 1;
        for (gen *x = g; x; x = x->next) {
            if (x->sent < x->as.out.n) return (ssize_t)take_out(x, buf, max);
            all &= x->finished;
            if (x->finished && (x->status != SL_OK || x->oom) && g->next && !g->closed) { /* one failed: end */
                for (gen *y = g; y; y = y->next) gen_cancel(y);
                g->closed = 1;
            }
        }
        if (g->closed || (all && !g->next)) return MHD_CONTENT_READER_END_OF_STREAM;
        if (all) {
            if (close_choices(g) < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        gen *x = g->turn ? g->turn : g;
        while (x->finished) x = x->next ? x->next : g;
        g->turn = x->next ? x->next : g;
        if (gen_pump(x) < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void stream_free(void *cls) {
    gen *g = cls;
    for (gen *x = g; x; x = x->next)
        if (!x->finished) { /* the connection ended before the answer did */
            x->gone = 1;
            gen_cancel(x);
        }
    for (gen *x = g, *next; x; x = next) { /* the response's references */
        next = x->next;
        gen_release(x);
    }
}

/* ---- the prompt -------------------------------------------------------------------------------- */

/* A completion's prompt: its token ids (checked against the vocabulary) or its text tokenized; with
 * echo, its text (g->echo). Returns 0 or -1 with e. */
static int text_prompt(gen *g, api_error *e) {
    const model_slot *ms = g->ms;
    api_gen *q = &g->g;
    sl_error err = {0};
    if (q->prompt_ids) {
        int nv = sl_model_n_vocab(ms->m);
        for (int i = 0; i < q->n_prompt_ids; i++)
            if (q->prompt_ids[i] >= nv) return api_fail(e, 400, "prompt", "invalid_value", "prompt[%d]: token id %d is outside the vocabulary (%d ids)", i, q->prompt_ids[i], nv);
        g->prompt = q->prompt_ids;
        q->prompt_ids = NULL;
        g->n_prompt_tokens = q->n_prompt_ids;
        if (q->echo && sl_detokenize(ms->tok, g->prompt, g->n_prompt_tokens, 1, &g->echo, NULL, &err))
            return api_fail(e, 400, "prompt", NULL, "%s", err.msg);
        return 0;
    }
    if (q->echo && !(g->echo = strdup(q->prompt))) return api_fail(e, 500, NULL, NULL, "out of memory");
    if (sl_tokenize(ms->tok, q->prompt, strlen(q->prompt), 0, &g->prompt, &g->n_prompt_tokens, &err))
        return api_fail(e, 400, "prompt", NULL, "%s", err.msg);
    return 0;
}

/* A chat's prompt: the messages through the model's chat template, tokenized. *think: the answer
 * parser's mode (2 when the rendered prompt ends inside a <think> block). Returns 0 or -1 with e. */
static int chat_prompt(gen *g, int *think, api_error *e) {
    const model_slot *ms = g->ms;
    api_gen *q = &g->g;
    sl_error err = {0};
    char *text = NULL;
    sl_chat_params cp = sl_chat_params_default();
    cp.enable_thinking = q->enable_thinking;
    cp.tools = q->tools;
    if (q->n_msgs > ms->n_ctx) /* each message renders to a token at least: refused before the template runs */
        return api_fail(e, 400, g->api->prompt_param, "context_length_exceeded",
                        "%d messages cannot fit the context of %d positions (each takes a token at least)", q->n_msgs, ms->n_ctx);
    sl_status st = sl_chat_format(ms->tok, q->msgs, q->n_msgs, &cp, &text, &err);
    if (st == SL_EUNSUPPORTED)
        return api_fail(e, 400, NULL, "unsupported_model", "the model '%s' cannot format chats (%s): use /v1/completions", ms->name, err.msg);
    if (st) return api_fail(e, st == SL_ENOMEM ? 500 : 400, "messages", NULL, "%s", err.msg);
    size_t tl = strlen(text);
    /* Qwen's prompts open the block with "<think>\n", DeepSeek-V4's (src/text/chat_dsv4.c) with "<think>" */
    int open = (tl >= 8 && !memcmp(text + tl - 8, "<think>\n", 8)) || (tl >= 7 && !memcmp(text + tl - 7, "<think>", 7));
    *think = open ? 2 : 1;
    st = sl_tokenize(ms->tok, text, tl, 0, &g->prompt, &g->n_prompt_tokens, &err);
    free(text);
    if (st) return api_fail(e, 400, "messages", NULL, "%s", err.msg);
    return 0;
}

/* The prompt of a request, by its dialect: a chat, or a completion's text / ids. Sets g->prompt,
 * g->n_prompt_tokens, g->echo; *think: the parser's mode. Returns 0, or -1 with e (also when the prompt
 * is empty or it and max_tokens do not fit the context). */
static int build_prompt(gen *g, int *think, api_error *e) {
    const model_slot *ms = g->ms;
    const api_gen *q = &g->g;
    const char *param = g->api->prompt_param;
    *think = 0;
    if (g->api->chat ? chat_prompt(g, think, e) : text_prompt(g, e)) return -1;
    if (g->n_prompt_tokens < 1) return api_fail(e, 400, "prompt", "invalid_value", "the prompt is empty");
    if (g->n_prompt_tokens + (ms->context_shift ? 0 : q->max_tokens > 0 ? q->max_tokens : 1) > ms->n_ctx) {
        if (q->max_tokens > 0 && !ms->context_shift)
            return api_fail(e, 400, param, "context_length_exceeded",
                            "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in "
                            "the prompt, %d for the completion). Please reduce the prompt or the completion length.",
                            ms->n_ctx, g->n_prompt_tokens + q->max_tokens, g->n_prompt_tokens, q->max_tokens);
        return api_fail(e, 400, param, "context_length_exceeded",
                        "This model's maximum context length is %d tokens. However, the prompt has %d tokens.", ms->n_ctx,
                        g->n_prompt_tokens);
    }
    return 0;
}

/* ---- the endpoint ------------------------------------------------------------------------------ */

/* The response body of a generation that ended well (malloc'ed; NULL when out of memory). */
static char *whole_body(gen *g) {
    api_done d = {g->stop, g->stop == SL_STOP_STRING ? which_stop(g) : NULL, g->n_prompt, g->n_generated, g->n_reused, g->n_thinking, g->n_kept};
    char *body = g->api->response(&g->meta, &g->res, &d);
    if (g->g.logprobs) /* the scheduler is done with g: its tokens are all here */
        body = api_with_logprobs(body, api_logprobs_json(g->g.kind, g->ms->tok, g->lps, g->n_lps, g->echo ? strlen(g->echo) : 0));
    return body;
}

/* body (taken) with the choice of x's body appended as choice i, its generated tokens added to the
 * usage. NULL when out of memory. */
static char *add_choice(char *body, gen *x, int i) {
    char *b = whole_body(x), *out = NULL;
    cJSON *j = body ? cJSON_Parse(body) : NULL, *k = b ? cJSON_Parse(b) : NULL;
    free(body);
    free(b);
    cJSON *choices = cJSON_GetObjectItemCaseSensitive(j, "choices");
    cJSON *c = cJSON_DetachItemFromArray(cJSON_GetObjectItemCaseSensitive(k, "choices"), 0);
    cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "usage");
    if (choices && c) {
        cJSON_ReplaceItemInObjectCaseSensitive(c, "index", cJSON_CreateNumber(i));
        cJSON_AddItemToArray(choices, c);
        c = NULL;
        static const char *const keys[] = {"completion_tokens", "total_tokens"};
        for (int q = 0; q < 2; q++) {
            cJSON *v = cJSON_GetObjectItemCaseSensitive(u, keys[q]);
            if (cJSON_IsNumber(v)) cJSON_SetNumberValue(v, v->valuedouble + x->n_generated);
        }
        out = cJSON_PrintUnformatted(j);
    }
    cJSON_Delete(c);
    cJSON_Delete(j);
    cJSON_Delete(k);
    return out;
}

/* The whole answer of a non-streamed request, once its generations have ended: one choice each. */
static enum MHD_Result answer_whole(struct MHD_Connection *c, req *r, gen *g) {
    api_error e;
    for (gen *x = g; x; x = x->next)
        if (x->status != SL_OK || x->oom) {
            gen_error(x, &e);
            return srv_reply_error(c, r, &e);
        }
    char *body = whole_body(g);
    int i = 1;
    for (gen *x = g->next; x; x = x->next) body = add_choice(body, x, i++);
    if (g->conv && body) { /* Responses: kept for a later previous_response_id */
        cJSON *j = cJSON_Parse(body);
        char *out = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(j, "output"));
        resp_keep(g, out);
        free(out);
        cJSON_Delete(j);
    }
    return srv_reply_json(c, r, 200, body);
}

/* A generation of r's dialect, its first reference the request's. NULL when out of memory. */
static gen *gen_alloc(req *r, const api_dialect *api) {
    gen *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->s = r->s;
    g->api = api;
    g->refs = 1; /* the request's */
    g->fd = -1;
    return g;
}

/* A generation for r (r->g). NULL when out of memory. */
static gen *gen_new(req *r, const api_dialect *api) {
    gen *g = gen_alloc(r, api);
    if (g) r->g = g;
    return g;
}

/* Thinking the client did not turn on itself (enable_thinking not given: the template's default,
 * e.g. Anthropic without "thinking", OpenAI chat without enable_thinking): max_tokens bounds the
 * answer only, so that a short max_tokens still gets an answer, and the block gets its own budget:
 * the request's (max_thinking_tokens), else the larger of 1024 and max_tokens, capped so that
 * prompt, block, closing tag and answer fit the context (at least 1; a full context still ends the
 * request). Thinking turned on keeps the APIs' definition: max_tokens counts the block too. */
static void answer_budget(const gen *g, srv_request *rq) {
    if (!rq->think || g->g.enable_thinking >= 0 || rq->max_tokens <= 0 || rq->grammar) return;
    rq->answer_only = 1;
    if (rq->think_budget > 0) return;
    long long b = rq->max_tokens > 1024 ? rq->max_tokens : 1024;
    if (!g->ms->context_shift) {
        long long room = (long long)g->ms->n_ctx - g->n_prompt_tokens - rq->max_tokens - 8; /* 8: "\n</think>\n\n" */
        if (b > room) b = room;
    }
    rq->think_budget = b < 1 ? 1 : (int)b;
}

/* Submits g's prompt to its model's scheduler; the scheduler holds a reference from then on. share:
 * 0, or the id of the request's first choice, whose prompt evaluation g's starts from. Returns SL_OK,
 * SL_ECANCELED (the server is stopping) or the scheduler's refusal with err. */
static sl_status gen_submit(gen *g, uint64_t share, sl_error *err) {
    srv_server *s = g->s;
    srv_request rq;
    memset(&rq, 0, sizeof rq);
    rq.prompt = g->prompt;
    rq.n_prompt = g->n_prompt_tokens;
    rq.sampling = g->g.sp;
    rq.max_tokens = g->g.max_tokens;
    if (s->p.max_tokens > 0 && (rq.max_tokens <= 0 || rq.max_tokens > s->p.max_tokens)) rq.max_tokens = s->p.max_tokens;
    rq.deadline = s->p.timeout > 0 ? clk_now_s() + s->p.timeout : 0;
    rq.stop = g->g.stop;
    rq.n_stop = g->g.n_stop;
    rq.skip_special = 1;
    rq.grammar = g->grammar;
    rq.vocab = g->ms->vocab;
    rq.logprobs = g->g.logprobs;
    rq.think = g->think;
    rq.think_budget = g->g.think_budget; /* 0: none (max_tokens bounds the block with the answer) */
    answer_budget(g, &rq);
    rq.share_prompt_of = share;
    gen_ref(g); /* the scheduler's, from a successful submit on */
    pthread_rwlock_rdlock(&s->mu);
    sl_status st = s->quitting ? SL_ECANCELED : srv_submit(g->ms->sched, &rq, gen_emit, g, &g->id, err);
    pthread_rwlock_unlock(&s->mu);
    if (st) gen_release(g); /* not the last: the request's stays */
    else g->submitted = 1;
    return st;
}

/* Parses body (len bytes) in g's dialect and finds its model. Returns 0, or -1 with e. */
/* Responses: the request's input as items (a string is one user message), after the items kept for
 * its previous_response_id; g->conv gets them (unless store is false) and *out the body with them as
 * its input (malloc'ed; NULL: the body as it is). Returns 0, or -1 with e (400: an unknown id). */
static int resp_splice(gen *g, const char *body, size_t len, char **out, api_error *e) {
    *out = NULL;
    cJSON *j = cJSON_ParseWithLength(body, len), *items = NULL;
    const cJSON *prev = cJSON_GetObjectItemCaseSensitive(j, "previous_response_id");
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "input"), *store = cJSON_GetObjectItemCaseSensitive(j, "store");
    int r = 0;
    if (!cJSON_IsObject(j) || !(cJSON_IsString(in) || cJSON_IsArray(in))) goto done; /* the parser says what is wrong */
    if (cJSON_IsString(prev)) {
        char *kept = resp_store_get(g->s->responses, prev->valuestring);
        if (!kept || !(items = cJSON_Parse(kept)))
            r = api_fail(e, 400, "previous_response_id", "previous_response_not_found", "Previous response with id '%.60s' not found.",
                         prev->valuestring);
        free(kept);
        if (r) goto done;
    } else if (!(items = cJSON_CreateArray()))
        goto oom;
    if (cJSON_IsString(in)) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "type", "message");
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", in->valuestring);
        cJSON_AddItemToArray(items, m);
    } else
        for (const cJSON *x = in->child; x; x = x->next) cJSON_AddItemToArray(items, cJSON_Duplicate(x, 1));
    if (!cJSON_IsFalse(store) && !(g->conv = cJSON_PrintUnformatted(items))) goto oom;
    if (cJSON_IsString(prev)) {
        cJSON_DeleteItemFromObjectCaseSensitive(j, "previous_response_id");
        cJSON_ReplaceItemInObjectCaseSensitive(j, "input", items);
        items = NULL;
        if (!(*out = cJSON_PrintUnformatted(j))) goto oom;
    }
done:
    cJSON_Delete(items);
    cJSON_Delete(j);
    return r;
oom:
    r = api_fail(e, 500, NULL, NULL, "out of memory");
    goto done;
}

/* Responses: keeps the conversation (g->conv) with output, the answer's output items (JSON text of an
 * array), under the response's id, for a later previous_response_id. Out of memory: not kept. */
static void resp_keep(gen *g, const char *output) {
    cJSON *items = g->conv && output ? cJSON_Parse(g->conv) : NULL, *o = items ? cJSON_Parse(output) : NULL;
    for (cJSON *x = o ? o->child : NULL; x; x = x->next) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(x, "type");
        if (cJSON_IsString(t) && strcmp(t->valuestring, "reasoning")) /* the template renders thinking itself */
            cJSON_AddItemToArray(items, cJSON_Duplicate(x, 1));
    }
    char *text = o ? cJSON_PrintUnformatted(items) : NULL;
    if (text) resp_store_put(g->s->responses, g->meta.id, text);
    free(text);
    cJSON_Delete(o);
    cJSON_Delete(items);
}

static int gen_parse(req *r, gen *g, const char *body, size_t len, api_error *e) {
    srv_server *s = r->s;
    char *spliced = NULL;
    if (g->api->kind == API_RESPONSES) {
        if (resp_splice(g, body, len, &spliced, e)) return -1;
        if (spliced) body = spliced, len = strlen(spliced);
    }
    int bad = g->api->parse(body, len, &g->g, e);
    free(spliced);
    if (bad) return -1;
    if (!(g->ms = srv_find_model(s, g->g.model))) {
        snprintf(r->model, sizeof r->model, "%s", g->g.model);
        return api_fail(e, 404, NULL, "model_not_found", "The model '%.100s' does not exist (served: %s%s)", g->g.model,
                        s->models[0].name, s->n_models > 1 ? ", ..." : "");
    }
    snprintf(r->model, sizeof r->model, "%s", g->ms->name);
    return 0;
}

/* Parses the body, finds the model, builds the prompt and readies the answer's parser, id and stream.
 * Returns 0, or -1 with e. */
static int gen_prepare(struct MHD_Connection *c, req *r, gen *g, api_error *e) {
    const char *body = r->body.p ? r->body.p : "";
    int think;
    if (gen_parse(r, g, body, r->body.n, e) || build_prompt(g, &think, e)) return -1;
    g->lp_offset = g->echo ? strlen(g->echo) : 0;
    if (g->g.grammar) {
        if (!g->ms->vocab) return api_fail(e, 400, NULL, "unsupported_model", "the model '%s' has no tokenizer: no structured outputs", g->ms->name);
        if (gr_state_new(g->g.grammar, &g->grammar)) return api_fail(e, 500, NULL, NULL, "out of memory");
    }
    out_init(&g->op, think, g->g.tools != NULL);
    g->think = think;
    if (!g->g.seed_set) g->g.sp.seed = random_seed();
    api_new_id(g->meta.id, sizeof g->meta.id, g->api->id_prefix);
    g->meta.model = g->ms->name;
    g->meta.created = (long long)time(NULL);
    api_stream_init(&g->as, g->api->kind, &g->meta, g->g.include_usage, g->n_prompt_tokens);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    g->fd = ci ? ci->connect_fd : -1;
    return 0;
}

/* A streamed answer: the response reads its events from g as they come (stream_read). */
static enum MHD_Result answer_stream(struct MHD_Connection *c, req *r, gen *g) {
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, g, stream_free);
    if (!resp) {
        gen_cancel(g);
        return MHD_NO;
    }
    for (gen *x = g; x; x = x->next) gen_ref(x); /* the response's, dropped by stream_free */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream; charset=utf-8");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    srv_add_cors(resp, r);
    r->status = 200;
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* n > 1: the other choices' generations, chained after g, each from the same body with seed + i.
 * Returns 0, or -1 with e. */
static int gen_siblings(struct MHD_Connection *c, req *r, gen *g, api_error *e) {
    gen *last = g;
    for (int i = 1; i < g->g.n; i++) {
        gen *x = gen_alloc(r, g->api);
        if (!x) return api_fail(e, 500, NULL, NULL, "out of memory");
        last->next = x;
        last = x;
        if (gen_prepare(c, r, x, e)) return -1;
        x->g.sp.seed = g->g.sp.seed + (uint64_t)i;
        x->meta = x->as.meta = g->meta;
        x->as.choice = i;
        x->as.hold_close = 1; /* streamed: one usage chunk and [DONE] for all (close_choices) */
    }
    g->as.hold_close = g->g.n > 1;
    return 0;
}

/* Submits g (and its siblings), with a completion's echo first in each answer. 0, or -1 when it
 * answered with an error (*res: the answer's result). */
static int submit_all(struct MHD_Connection *c, req *r, gen *g, enum MHD_Result *res) {
    for (gen *x = g; x; x = x->next) {
        sl_error err = {0};
        sl_status st = gen_submit(x, x == g ? 0 : g->id, &err); /* the choices share g's prompt */
        if (st == SL_EBUSY) *res = srv_fail(c, r, 503, "server_overloaded", "the server is busy (%s): retry later", err.msg);
        else if (st == SL_ECANCELED) *res = srv_fail(c, r, 503, NULL, "the server is stopping");
        else if (st == SL_ERANGE) *res = srv_fail(c, r, 400, "context_length_exceeded", "%s", err.msg);
        else if (st) *res = srv_fail(c, r, st == SL_EINVAL ? 400 : 500, NULL, "%s", err.msg);
        /* a completion's echo: the answer starts with the prompt */
        else if (x->echo && (x->g.stream ? api_stream_piece(&x->as, OUT_CONTENT, x->echo, strlen(x->echo), NULL)
                                         : api_result_add(&x->res, OUT_CONTENT, x->echo, strlen(x->echo), NULL)))
            *res = srv_fail(c, r, 500, NULL, "out of memory");
        else continue;
        return -1;
    }
    return 0;
}

enum MHD_Result gen_endpoint(struct MHD_Connection *c, req *r, const char *rest) {
    (void)rest;
    api_error e;
    memset(&e, 0, sizeof e);
    if (srv_is_draining(r->s)) return srv_fail(c, r, 503, "server_shutting_down", "the server is shutting down: retry later, or elsewhere");
    gen *g = gen_new(r, r->route->api);
    if (!g) return srv_fail(c, r, 500, NULL, "out of memory");
    if (gen_prepare(c, r, g, &e) || gen_siblings(c, r, g, &e)) return srv_reply_error(c, r, &e);
    enum MHD_Result res;
    if (submit_all(c, r, g, &res)) return res;
    if (g->g.stream) return answer_stream(c, r, g);
    for (gen *x = g; x; x = x->next) {
        int k;
        while ((k = gen_pump(x)) > 0) {}
        if (k < 0) { /* the client left (or no memory): nothing to answer */
            if (!x->gone) return srv_fail(c, r, 500, NULL, "out of memory");
            srv_quiet_close = 1; /* libmicrohttpd logs the MHD_NO below as an internal error: it is not one */
            return MHD_NO;
        }
    }
    return answer_whole(c, r, g);
}

enum MHD_Result gen_count_tokens(struct MHD_Connection *c, req *r, const char *rest) {
    (void)rest;
    api_error e;
    memset(&e, 0, sizeof e);
    gen *g = gen_new(r, r->route->api);
    if (!g) return srv_fail(c, r, 500, NULL, "out of memory");
    /* a count has no max_tokens, which the dialect's parser wants (any: only the prompt is built): put
     * one first in the object, the rest of the text as sent (its checks see it all) */
    const char *in = r->body.p ? r->body.p : "";
    size_t n = r->body.n;
    cJSON *j = cJSON_ParseWithLength(in, n);
    int add = cJSON_IsObject(j) && !cJSON_GetObjectItemCaseSensitive(j, "max_tokens");
    cJSON_Delete(j);
    char *body = NULL;
    if (add) {
        size_t at = (size_t)((const char *)memchr(in, '{', n) - in) + 1, k = at;
        while (k < n && strchr(" \t\r\n", in[k])) k++;
        const char *ins = k < n && in[k] == '}' ? "\"max_tokens\":1" : "\"max_tokens\":1,";
        if (!(body = malloc(n + 16))) return srv_fail(c, r, 500, NULL, "out of memory");
        memcpy(body, in, at);
        memcpy(body + at, ins, strlen(ins));
        memcpy(body + at + strlen(ins), in + at, n - at);
        in = body;
        n += strlen(ins);
    }
    int think, bad = gen_parse(r, g, in, n, &e);
    free(body);
    if (bad || build_prompt(g, &think, &e)) return srv_reply_error(c, r, &e);
    char out[48];
    snprintf(out, sizeof out, "{\"input_tokens\":%d}", g->n_prompt_tokens);
    char *o = strdup(out);
    return srv_reply_json(c, r, 200, o);
}

void gen_request_over(gen *g, int dropped, gen_report *out) {
    memset(out, 0, sizeof *out);
    out->gone = dropped || g->gone;
    out->submitted = g->submitted;
    out->stream = g->g.stream;
    out->n_prompt = g->submitted ? g->n_prompt_tokens : 0;
    while (g) { /* each choice's generation */
        gen *next = g->next;
        if (g->submitted && !g->finished) gen_cancel(g);
        if (g->submitted) {
            pthread_mutex_lock(&g->mu);
            out->n_generated += g->done ? g->n_generated : g->n_ids; /* a canceled one may not have ended yet */
            pthread_mutex_unlock(&g->mu);
        }
        gen_release(g);
        g = next;
    }
}
