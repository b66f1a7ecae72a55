/*
 * http.c — the server (serve.h): libmicrohttpd with a thread per connection, routing, authentication,
 * body limits, and the bridge between a connection and its generation in a scheduler.
 *
 * A generation (`gen`) is shared by three parties, each holding a reference: the connection's request
 * (until libmicrohttpd reports it completed), the scheduler (until its done event), and for a streamed
 * answer the response (until libmicrohttpd frees it). The scheduler's emit callback only appends to
 * the gen's pending text and signals; the connection's thread does all the formatting: it waits for
 * text (polling its socket for a hang-up every 50 ms, so a client that goes away cancels its
 * generation at once, whether queued, prefilling or decoding; a client that half-closes its side after
 * the request counts as gone, as with nginx), runs it through the answer parser
 * (api.h) and writes SSE bytes (streamed) or, at the end, one JSON body.
 *
 * Shutdown: `mu` (a read-write lock) guards the schedulers: submits, cancels and stats reads take it
 * for reading; srv_server_free takes it for writing, marks the server quitting (later generation
 * requests get 503) and frees the schedulers, which end everything in flight with SL_ECANCELED, then
 * stops libmicrohttpd, which joins the connection threads.
 *
 * Sections: the server and its models; generations; responses; endpoints; the access handler;
 * start and stop.
 */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve/api.h"
#include "serve/serve.h"
#include "serve/web_page.h"
#include "util/clock.h"
#include "util/err.h"

/* ---- the server and its models ----------------------------------------------------------------- */

enum { TPS_SAMPLES = 8 }; /* one a second: tok/s is measured over the last few seconds */

typedef struct model_slot {
    char *name;
    sl_model *m;
    const sl_tokenizer *tok;
    srv_sched *sched;
    int n_ctx; /* positions per sequence */
    double tps_t[TPS_SAMPLES];
    uint64_t tps_n[TPS_SAMPLES];
    int tps_k; /* samples taken */
} model_slot;

struct srv_server {
    srv_params p;
    char *api_key;
    model_slot *models;
    int n_models;
    struct MHD_Daemon *d;
    int port;
    long long started; /* Unix seconds */
    double t0;
    pthread_rwlock_t mu; /* the schedulers: read to use them, write to free them */
    int quitting;
    pthread_mutex_t stat_mu; /* counters below, the tok/s samples, the log */
    uint64_t by_class[6], disconnects;
    int connections;
    pthread_t sampler;
    pthread_cond_t sampler_cv;
    int sampler_run, sampler_stop;
};

static void logf_(srv_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(srv_server *s, const char *fmt, ...) {
    if (!s->p.log) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&s->stat_mu);
    s->p.log(s->p.log_user, line);
    pthread_mutex_unlock(&s->stat_mu);
}

static const model_slot *find_model(const srv_server *s, const char *name) {
    if (!name) return &s->models[0];
    for (int i = 0; i < s->n_models; i++)
        if (!strcmp(s->models[i].name, name)) return &s->models[i];
    return NULL;
}

/* Records every model's generated-token count once a second, for tok/s. */
static void *sampler_main(void *arg) {
    srv_server *s = arg;
    pthread_mutex_lock(&s->stat_mu);
    while (!s->sampler_stop) {
        pthread_mutex_unlock(&s->stat_mu);
        for (int i = 0; i < s->n_models; i++) {
            srv_sched_stats st;
            pthread_rwlock_rdlock(&s->mu);
            int ok = !s->quitting;
            if (ok) srv_sched_stats_get(s->models[i].sched, &st);
            pthread_rwlock_unlock(&s->mu);
            if (!ok) continue;
            pthread_mutex_lock(&s->stat_mu);
            model_slot *ms = &s->models[i];
            ms->tps_t[ms->tps_k % TPS_SAMPLES] = clk_now_s();
            ms->tps_n[ms->tps_k % TPS_SAMPLES] = st.generated_tokens;
            ms->tps_k++;
            pthread_mutex_unlock(&s->stat_mu);
        }
        pthread_mutex_lock(&s->stat_mu);
        struct timespec ts = clk_deadline_ns(1000000000L);
        if (!s->sampler_stop) pthread_cond_timedwait(&s->sampler_cv, &s->stat_mu, &ts);
    }
    pthread_mutex_unlock(&s->stat_mu);
    return NULL;
}

/* Generated tokens per second between the oldest and newest samples (stat_mu held). */
static double model_tps(const model_slot *ms) {
    if (ms->tps_k < 2) return 0;
    int last = (ms->tps_k - 1) % TPS_SAMPLES, first = ms->tps_k >= TPS_SAMPLES ? ms->tps_k % TPS_SAMPLES : 0;
    double dt = ms->tps_t[last] - ms->tps_t[first];
    return dt > 0 ? (double)(ms->tps_n[last] - ms->tps_n[first]) / dt : 0;
}

/* ---- generations ------------------------------------------------------------------------------- */

typedef struct gen {
    srv_server *s;
    const model_slot *ms;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    /* filled by the scheduler's emit (under mu) */
    tok_buf pending;
    int32_t *ids;
    int n_ids, cap_ids;
    int done, oom;
    sl_status status;
    char errmsg[256];
    sl_stop_reason stop;
    int n_prompt, n_generated, n_reused;
    /* the connection's thread only */
    uint64_t id;
    int submitted, canceled;
    int fd; /* the client's socket, polled for a hang-up */
    api_gen g;
    int32_t *prompt;
    int n_prompt_tokens;
    char *echo;             /* completions with echo: the prompt's text */
    out_parser op;
    api_result res;
    api_stream as;
    api_meta meta;
    size_t delivered;       /* bytes of generated text taken from pending */
    size_t sent;            /* bytes of as.out handed to libmicrohttpd */
    int finished;           /* the closing events are in as.out */
    int gone;               /* the client went away */
    double polled;          /* when its socket was last polled */
} gen;

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
    free(g->prompt);
    free(g->echo);
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
        g->n_reused = ev->n_reused;
    } else {
        if (ev->len && tok_buf_put(&g->pending, ev->text, ev->len)) g->oom = stop = 1;
        if (ev->id >= 0) {
            if (g->n_ids == g->cap_ids) {
                int cap = g->cap_ids ? 2 * g->cap_ids : 64;
                int32_t *v = realloc(g->ids, (size_t)cap * sizeof *v);
                if (v) g->ids = v, g->cap_ids = cap;
            }
            if (g->n_ids < g->cap_ids) g->ids[g->n_ids++] = ev->id;
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
    else api_fail(e, 500, NULL, NULL, "generation failed: %s", g->errmsg);
}

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
    pthread_mutex_unlock(&g->mu);
    g->delivered += text.n;
    int r = out_push(&g->op, text.p, text.n, fn, user);
    free(text.p);
    if (r) goto oom;
    if (!done) return 1;
    if (out_end(&g->op, fn, user)) goto oom;
    g->finished = 1;
    if (!g->g.stream) return 0;
    if (g->status != SL_OK || g->oom) {
        api_error e;
        gen_error(g, &e);
        return api_stream_error(&g->as, &e) ? -1 : 0;
    }
    api_done d = {g->stop, g->stop == SL_STOP_STRING ? which_stop(g) : NULL, g->n_prompt, g->n_generated, g->n_reused};
    return api_stream_end(&g->as, &d) ? -1 : 0;
oom:
    g->oom = 1;
    gen_cancel(g);
    return -1;
}

/* libmicrohttpd's content reader of a streamed answer: blocks (this connection's thread) until there
 * are bytes to send. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    gen *g = cls;
    (void)pos;
    for (;;) {
        if (g->sent < g->as.out.n) {
            size_t k = g->as.out.n - g->sent < max ? g->as.out.n - g->sent : max;
            memcpy(buf, g->as.out.p + g->sent, k);
            g->sent += k;
            if (g->sent == g->as.out.n) g->sent = g->as.out.n = 0;
            return (ssize_t)k;
        }
        if (g->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        if (gen_pump(g) < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void stream_free(void *cls) {
    gen *g = cls;
    if (!g->finished) { /* the connection ended before the answer did */
        g->gone = 1;
        gen_cancel(g);
    }
    gen_release(g);
}

/* ---- responses --------------------------------------------------------------------------------- */

/* Set by a handler that returns MHD_NO for a client already gone, just before libmicrohttpd reports
 * it (on the same thread); cleared by the logger. */
static _Thread_local int quiet_close;

/* The request's state across libmicrohttpd's calls of the access handler. */
typedef struct req {
    srv_server *s;
    double t0;
    int status;
    int anthropic; /* errors in Anthropic's shape */
    tok_buf body;
    size_t seen; /* body bytes received, kept or not */
    int too_big;
    gen *g;
    char model[64];
    char note[48];  /* 405: the method allowed */
    char method[12];
    char url[120];
} req;

static enum MHD_Result reply(struct MHD_Connection *c, req *r, int status, const char *type, char *body, size_t len,
                             int take) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, body, take ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        if (take) free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 503) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 405) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->note[0] ? r->note : "GET");
    if (status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    r->status = status;
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ok;
}

static enum MHD_Result reply_json(struct MHD_Connection *c, req *r, int status, char *json) {
    if (!json) {
        static char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
        return reply(c, r, 500, "application/json", oom, sizeof oom - 1, 0);
    }
    return reply(c, r, status, "application/json", json, strlen(json), 1);
}

static enum MHD_Result reply_error(struct MHD_Connection *c, req *r, const api_error *e) {
    return reply_json(c, r, e->status, api_error_json(e, r->anthropic));
}

static enum MHD_Result fail(struct MHD_Connection *c, req *r, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static enum MHD_Result fail(struct MHD_Connection *c, req *r, int status, const char *code, const char *fmt, ...) {
    api_error e;
    memset(&e, 0, sizeof e);
    e.status = status;
    snprintf(e.code, sizeof e.code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    return reply_error(c, r, &e);
}

/* ---- endpoints --------------------------------------------------------------------------------- */

static enum MHD_Result ep_health(struct MHD_Connection *c, req *r) {
    cJSON *j = cJSON_CreateObject(), *m = cJSON_CreateArray();
    cJSON_AddStringToObject(j, "status", "ok");
    for (int i = 0; i < r->s->n_models; i++) cJSON_AddItemToArray(m, cJSON_CreateString(r->s->models[i].name));
    cJSON_AddItemToObject(j, "models", m);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return reply_json(c, r, 200, s);
}

static cJSON *model_json(const srv_server *s, const model_slot *ms, int anthropic) {
    cJSON *j = cJSON_CreateObject();
    if (anthropic) {
        char when[32];
        time_t t = (time_t)s->started;
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        cJSON_AddStringToObject(j, "type", "model");
        cJSON_AddStringToObject(j, "id", ms->name);
        cJSON_AddStringToObject(j, "display_name", ms->name);
        cJSON_AddStringToObject(j, "created_at", when);
    } else {
        cJSON_AddStringToObject(j, "id", ms->name);
        cJSON_AddStringToObject(j, "object", "model");
        cJSON_AddNumberToObject(j, "created", (double)s->started);
        cJSON_AddStringToObject(j, "owned_by", "sluice");
    }
    cJSON_AddNumberToObject(j, "context_length", ms->n_ctx);
    return j;
}

/* GET /v1/models and /v1/models/NAME (Anthropic's shape when the request has anthropic-version). */
static enum MHD_Result ep_models(struct MHD_Connection *c, req *r, const char *name) {
    srv_server *s = r->s;
    int ant = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "anthropic-version") != NULL;
    r->anthropic = ant;
    if (name) {
        const model_slot *ms = find_model(s, name);
        if (!ms) return fail(c, r, 404, "model_not_found", "The model '%.100s' does not exist", name);
        cJSON *j = model_json(s, ms, ant);
        char *out = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        return reply_json(c, r, 200, out);
    }
    cJSON *j = cJSON_CreateObject(), *d = cJSON_CreateArray();
    if (!ant) cJSON_AddStringToObject(j, "object", "list");
    for (int i = 0; i < s->n_models; i++) cJSON_AddItemToArray(d, model_json(s, &s->models[i], ant));
    cJSON_AddItemToObject(j, "data", d);
    if (ant) {
        cJSON_AddFalseToObject(j, "has_more");
        cJSON_AddStringToObject(j, "first_id", s->models[0].name);
        cJSON_AddStringToObject(j, "last_id", s->models[s->n_models - 1].name);
    }
    char *out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return reply_json(c, r, 200, out);
}

static enum MHD_Result ep_metrics(struct MHD_Connection *c, req *r) {
    srv_server *s = r->s;
    api_model_metrics *mm = calloc((size_t)s->n_models, sizeof *mm);
    if (!mm) return fail(c, r, 500, NULL, "out of memory");
    pthread_rwlock_rdlock(&s->mu);
    for (int i = 0; i < s->n_models && !s->quitting; i++) srv_sched_stats_get(s->models[i].sched, &mm[i].sched);
    pthread_rwlock_unlock(&s->mu);
    api_http_metrics h;
    memset(&h, 0, sizeof h);
    for (int i = 0; i < s->n_models; i++) {
        mm[i].name = s->models[i].name;
        sl_model_stats(s->models[i].m, &mm[i].model);
    }
    pthread_mutex_lock(&s->stat_mu);
    for (int i = 0; i < s->n_models; i++) mm[i].tok_per_s = model_tps(&s->models[i]);
    memcpy(h.by_class, s->by_class, sizeof h.by_class);
    h.disconnects = s->disconnects;
    h.connections = s->connections;
    pthread_mutex_unlock(&s->stat_mu);
    h.uptime_s = clk_now_s() - s->t0;
    tok_buf b = {0};
    int bad = api_metrics_text(&b, &h, mm, s->n_models);
    free(mm);
    if (bad) { free(b.p); return fail(c, r, 500, NULL, "out of memory"); }
    return reply(c, r, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, b.n, 1);
}

/* GET /experts[?model=NAME]: the routing counts of every MoE layer, for the page's heatmap:
 * {"model", "experts": E, "layers": [model layer numbers], "counts": [[E counts] per layer]}. */
static enum MHD_Result ep_experts(struct MHD_Connection *c, req *r) {
    const char *name = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "model");
    const model_slot *ms = find_model(r->s, name);
    if (!ms) return fail(c, r, 404, "model_not_found", "The model '%.100s' does not exist", name);
    int nl = sl_model_n_layers(ms->m), E = 0;
    for (int l = 0; l < nl && !E; l++) sl_model_expert_counts(ms->m, l, NULL, 0, &E);
    uint64_t *v = malloc(((size_t)E + 1) * sizeof *v);
    if (!v) return fail(c, r, 500, NULL, "out of memory");
    cJSON *j = cJSON_CreateObject(), *layers = cJSON_CreateArray(), *counts = cJSON_CreateArray();
    cJSON_AddStringToObject(j, "model", ms->name);
    cJSON_AddNumberToObject(j, "experts", E);
    for (int l = 0; l < nl; l++) {
        int ne = 0;
        if (sl_model_expert_counts(ms->m, l, v, E, &ne) || ne != E || !E) continue;
        cJSON *row = cJSON_CreateArray();
        for (int e = 0; e < E; e++) cJSON_AddItemToArray(row, cJSON_CreateNumber((double)v[e]));
        cJSON_AddItemToArray(layers, cJSON_CreateNumber(l));
        cJSON_AddItemToArray(counts, row);
    }
    free(v);
    cJSON_AddItemToObject(j, "layers", layers);
    cJSON_AddItemToObject(j, "counts", counts);
    char *out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return reply_json(c, r, 200, out);
}

/* The prompt of a request: the chat template rendered and tokenized, or the completion's text / ids.
 * Sets g->prompt, g->n_prompt_tokens, g->echo; *think: the parser's mode. Returns 0 or -1 with e. */
static int build_prompt(gen *g, int *think, api_error *e) {
    const model_slot *ms = g->ms;
    api_gen *q = &g->g;
    sl_error err = {0};
    char *text = NULL;
    *think = 0;
    if (q->kind == API_COMPLETION) {
        if (q->prompt_ids) {
            int nv = sl_model_n_vocab(ms->m);
            for (int i = 0; i < q->n_prompt_ids; i++)
                if (q->prompt_ids[i] >= nv) return api_fail(e, 400, "prompt", "invalid_value", "prompt[%d]: token id %d is outside the vocabulary (%d ids)", i, q->prompt_ids[i], nv);
            g->prompt = q->prompt_ids;
            q->prompt_ids = NULL;
            g->n_prompt_tokens = q->n_prompt_ids;
            if (q->echo && sl_detokenize(ms->tok, g->prompt, g->n_prompt_tokens, 1, &g->echo, NULL, &err))
                return api_fail(e, 400, "prompt", NULL, "%s", err.msg);
            goto check;
        }
        if (q->echo && !(g->echo = strdup(q->prompt))) return api_fail(e, 500, NULL, NULL, "out of memory");
        if (sl_tokenize(ms->tok, q->prompt, strlen(q->prompt), 0, &g->prompt, &g->n_prompt_tokens, &err))
            return api_fail(e, 400, "prompt", NULL, "%s", err.msg);
        goto check;
    }
    sl_chat_params cp = sl_chat_params_default();
    cp.enable_thinking = q->enable_thinking;
    cp.tools = q->tools;
    sl_status st = sl_chat_format(ms->tok, q->msgs, q->n_msgs, &cp, &text, &err);
    if (st == SL_EUNSUPPORTED)
        return api_fail(e, 400, NULL, "unsupported_model", "the model '%s' cannot format chats (%s): use /v1/completions", ms->name, err.msg);
    if (st) return api_fail(e, st == SL_ENOMEM ? 500 : 400, "messages", NULL, "%s", err.msg);
    size_t tl = strlen(text);
    *think = tl >= 8 && !memcmp(text + tl - 8, "<think>\n", 8) ? 2 : 1;
    st = sl_tokenize(ms->tok, text, tl, 0, &g->prompt, &g->n_prompt_tokens, &err);
    free(text);
    if (st) return api_fail(e, 400, "messages", NULL, "%s", err.msg);
check:
    if (g->n_prompt_tokens < 1) return api_fail(e, 400, "prompt", "invalid_value", "the prompt is empty");
    if (g->n_prompt_tokens + (q->max_tokens > 0 ? q->max_tokens : 1) > ms->n_ctx) {
        if (q->max_tokens > 0)
            return api_fail(e, 400, q->kind == API_COMPLETION ? "prompt" : "messages", "context_length_exceeded",
                            "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in "
                            "the prompt, %d for the completion). Please reduce the prompt or the completion length.",
                            ms->n_ctx, g->n_prompt_tokens + q->max_tokens, g->n_prompt_tokens, q->max_tokens);
        return api_fail(e, 400, q->kind == API_COMPLETION ? "prompt" : "messages", "context_length_exceeded",
                        "This model's maximum context length is %d tokens. However, the prompt has %d tokens.", ms->n_ctx,
                        g->n_prompt_tokens);
    }
    return 0;
}

/* The whole answer of a non-streamed request, once its generation has ended. */
static enum MHD_Result answer_whole(struct MHD_Connection *c, req *r, gen *g) {
    api_error e;
    if (g->status != SL_OK || g->oom) {
        gen_error(g, &e);
        return reply_error(c, r, &e);
    }
    api_done d = {g->stop, g->stop == SL_STOP_STRING ? which_stop(g) : NULL, g->n_prompt, g->n_generated, g->n_reused};
    char *body = NULL;
    if (g->g.kind == API_CHAT) body = oai_chat_response(&g->meta, &g->res, &d);
    else if (g->g.kind == API_MESSAGES) body = ant_message_response(&g->meta, &g->res, &d);
    else {
        tok_buf t = {0};
        if (!tok_buf_puts(&t, g->echo ? g->echo : "") && !tok_buf_put(&t, g->res.content.p ? g->res.content.p : "", g->res.content.n))
            body = oai_completion_response(&g->meta, t.p, t.n, &d);
        free(t.p);
    }
    return reply_json(c, r, 200, body);
}

/* POST /v1/chat/completions, /v1/completions, /v1/messages: parse, build the prompt, submit; then
 * either wait for the whole answer here, or hand a streamed response to libmicrohttpd. */
static enum MHD_Result ep_generate(struct MHD_Connection *c, req *r, api_kind kind) {
    srv_server *s = r->s;
    api_error e;
    memset(&e, 0, sizeof e);
    gen *g = calloc(1, sizeof *g);
    if (!g) return fail(c, r, 500, NULL, "out of memory");
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->s = s;
    g->refs = 1; /* the request's */
    g->fd = -1;
    r->g = g;
    const char *body = r->body.p ? r->body.p : "";
    int bad = kind == API_CHAT ? oai_parse_chat(body, r->body.n, &g->g, &e)
            : kind == API_COMPLETION ? oai_parse_completion(body, r->body.n, &g->g, &e)
                                     : ant_parse_messages(body, r->body.n, &g->g, &e);
    if (bad) return reply_error(c, r, &e);
    if (!(g->ms = find_model(s, g->g.model))) {
        snprintf(r->model, sizeof r->model, "%s", g->g.model);
        return fail(c, r, 404, "model_not_found", "The model '%.100s' does not exist (served: %s%s)", g->g.model,
                    s->models[0].name, s->n_models > 1 ? ", ..." : "");
    }
    snprintf(r->model, sizeof r->model, "%s", g->ms->name);
    int think;
    if (build_prompt(g, &think, &e)) return reply_error(c, r, &e);
    out_init(&g->op, think, g->g.tools != NULL);
    if (!g->g.seed_set) g->g.sp.seed = random_seed();
    api_new_id(g->meta.id, sizeof g->meta.id, kind == API_CHAT ? "chatcmpl-" : kind == API_COMPLETION ? "cmpl-" : "msg_");
    g->meta.model = g->ms->name;
    g->meta.created = (long long)time(NULL);
    api_stream_init(&g->as, kind, &g->meta, g->g.include_usage, g->n_prompt_tokens);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    g->fd = ci ? ci->connect_fd : -1;

    srv_request rq;
    memset(&rq, 0, sizeof rq);
    rq.prompt = g->prompt;
    rq.n_prompt = g->n_prompt_tokens;
    rq.sampling = g->g.sp;
    rq.max_tokens = g->g.max_tokens;
    rq.stop = g->g.stop;
    rq.n_stop = g->g.n_stop;
    rq.skip_special = 1;
    sl_error err = {0};
    gen_ref(g); /* the scheduler's, from a successful submit on */
    pthread_rwlock_rdlock(&s->mu);
    sl_status st = s->quitting ? SL_ECANCELED : srv_submit(g->ms->sched, &rq, gen_emit, g, &g->id, &err);
    pthread_rwlock_unlock(&s->mu);
    if (st) {
        gen_release(g); /* not the last: the request's stays */
        if (st == SL_EBUSY) return fail(c, r, 503, "server_overloaded", "the server is busy (%s): retry later", err.msg);
        if (st == SL_ECANCELED) return fail(c, r, 503, NULL, "the server is stopping");
        if (st == SL_ERANGE) return fail(c, r, 400, "context_length_exceeded", "%s", err.msg);
        return fail(c, r, st == SL_EINVAL ? 400 : 500, NULL, "%s", err.msg);
    }
    g->submitted = 1;
    if (!g->g.stream) {
        int k;
        while ((k = gen_pump(g)) > 0) {}
        if (k < 0) { /* the client left (or no memory): nothing to answer */
            if (!g->gone) return fail(c, r, 500, NULL, "out of memory");
            quiet_close = 1; /* libmicrohttpd logs the MHD_NO below as an internal error: it is not one */
            return MHD_NO;
        }
        return answer_whole(c, r, g);
    }
    if (g->echo && (api_stream_piece(&g->as, OUT_CONTENT, g->echo, strlen(g->echo), NULL))) return fail(c, r, 500, NULL, "out of memory");
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, g, stream_free);
    if (!resp) {
        gen_cancel(g);
        return MHD_NO;
    }
    gen_ref(g); /* the response's, dropped by stream_free */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream; charset=utf-8");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    r->status = 200;
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* ---- the access handler ------------------------------------------------------------------------ */

/* Constant-time comparison (in the key's length, whatever the candidate). */
static int key_ok(const char *key, const char *given) {
    size_t kl = strlen(key), gl = given ? strlen(given) : 0;
    unsigned char d = kl != gl;
    for (size_t i = 0; i < kl; i++) d |= (unsigned char)key[i] ^ (unsigned char)(i < gl ? given[i] : 0);
    return given && !d;
}

static int authorized(const srv_server *s, struct MHD_Connection *c) {
    if (!s->api_key) return 1;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *xkey = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    int ok = 0;
    if (auth && !strncasecmp(auth, "Bearer ", 7)) ok |= key_ok(s->api_key, auth + 7);
    if (xkey) ok |= key_ok(s->api_key, xkey);
    return ok;
}

enum { DISCARD_MAX = 64 << 20 };

typedef enum { R_NONE, R_PAGE, R_HEALTH, R_METRICS, R_EXPERTS, R_MODELS, R_MODEL, R_CHAT, R_COMPLETIONS, R_MESSAGES } route;

/* The route of a path and the method it takes ("GET" / "POST"). */
static route route_of(const char *url, const char **method, const char **rest) {
    static const struct { const char *path, *method; route r; } t[] = {
        {"/", "GET", R_PAGE},
        {"/index.html", "GET", R_PAGE},
        {"/health", "GET", R_HEALTH},
        {"/metrics", "GET", R_METRICS},
        {"/experts", "GET", R_EXPERTS},
        {"/v1/models", "GET", R_MODELS},
        {"/v1/chat/completions", "POST", R_CHAT},
        {"/v1/completions", "POST", R_COMPLETIONS},
        {"/v1/messages", "POST", R_MESSAGES},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        if (!strcmp(url, t[i].path)) { *method = t[i].method; return t[i].r; }
    if (!strncmp(url, "/v1/models/", 11) && url[11]) {
        *method = "GET";
        *rest = url + 11;
        return R_MODEL;
    }
    return R_NONE;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv_server *s = cls;
    req *r = *con_cls;
    (void)version;
    if (!r) { /* the headers: checks that need no body */
        if (!(r = calloc(1, sizeof *r))) return MHD_NO;
        r->s = s;
        r->t0 = clk_now_s();
        *con_cls = r;
        snprintf(r->method, sizeof r->method, "%s", method);
        snprintf(r->url, sizeof r->url, "%s", url);
        const char *want = NULL, *rest = NULL;
        route rt = route_of(url, &want, &rest);
        r->anthropic = rt == R_MESSAGES;
        int head = !strcmp(method, "HEAD") && !strcmp(want ? want : "", "GET");
        if (rt == R_NONE) return fail(c, r, 404, "not_found", "no such endpoint: %s %.200s", method, url);
        if (strcmp(method, want) && !head) {
            snprintf(r->note, sizeof r->note, "%s", want);
            return fail(c, r, 405, "method_not_allowed", "%s %.200s: use %s", method, url, want);
        }
        if (rt != R_PAGE && rt != R_HEALTH && !authorized(s, c))
            return fail(c, r, 401, "invalid_api_key", "Incorrect or missing API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'");
        /* A body over the limit is read and dropped, and answered 413 at its end: a client still sending
         * when the connection closed would see a reset instead of the answer. Beyond DISCARD_MAX it is
         * answered at once and the connection closed. */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        unsigned long long len = cl ? strtoull(cl, NULL, 10) : 0;
        if (len > s->p.max_body + DISCARD_MAX)
            return fail(c, r, 413, "request_too_large", "the request body (%llu bytes) is larger than the limit of %zu bytes", len, s->p.max_body);
        r->too_big = len > s->p.max_body;
        return MHD_YES;
    }
    if (*upload_size) { /* a piece of the body */
        if (r->status) { *upload_size = 0; return MHD_YES; } /* already answered */
        r->seen += *upload_size;
        if (r->seen > s->p.max_body) r->too_big = 1;
        if (r->seen > s->p.max_body + DISCARD_MAX) return MHD_NO;
        if (!r->too_big && tok_buf_put(&r->body, upload, *upload_size)) return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->status) return MHD_YES; /* answered on the headers */
    if (r->too_big)
        return fail(c, r, 413, "request_too_large", "the request body (%zu bytes) is larger than the limit of %zu bytes", r->seen,
                    s->p.max_body);
    const char *want = NULL, *rest = NULL;
    switch (route_of(url, &want, &rest)) {
    case R_PAGE: return reply(c, r, 200, "text/html; charset=utf-8", (char *)web_page, sizeof web_page - 1, 0);
    case R_HEALTH: return ep_health(c, r);
    case R_METRICS: return ep_metrics(c, r);
    case R_EXPERTS: return ep_experts(c, r);
    case R_MODELS: return ep_models(c, r, NULL);
    case R_MODEL: return ep_models(c, r, rest);
    case R_CHAT: return ep_generate(c, r, API_CHAT);
    case R_COMPLETIONS: return ep_generate(c, r, API_COMPLETION);
    case R_MESSAGES: return ep_generate(c, r, API_MESSAGES);
    case R_NONE: break;
    }
    return fail(c, r, 404, "not_found", "no such endpoint: %.200s", url);
}

/* The request is over (answered, or the connection dropped): its line in the log, its references. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv_server *s = cls;
    req *r = *con_cls;
    (void)c;
    if (!r) return;
    *con_cls = NULL;
    gen *g = r->g;
    int gone = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK || (g && g->gone);
    if (g && g->submitted && !g->finished) gen_cancel(g);
    pthread_mutex_lock(&s->stat_mu);
    int cls_ = r->status / 100;
    if (cls_ >= 1 && cls_ <= 5) s->by_class[cls_]++;
    if (gone && g && g->submitted) s->disconnects++;
    pthread_mutex_unlock(&s->stat_mu);
    char tokens[64] = "";
    if (g && g->submitted) {
        pthread_mutex_lock(&g->mu);
        int n_gen = g->done ? g->n_generated : g->n_ids; /* a canceled one may not have ended yet */
        pthread_mutex_unlock(&g->mu);
        snprintf(tokens, sizeof tokens, " %d+%d tokens", g->n_prompt_tokens, n_gen);
    }
    char status[8] = "-"; /* nothing was answered: the client left */
    if (r->status) snprintf(status, sizeof status, "%d", r->status);
    logf_(s, "%s %s %s%s%s%s %.3f s%s%s", r->method, r->url, status, r->model[0] ? " " : "", r->model, tokens,
          clk_now_s() - r->t0, g && g->g.stream ? " stream" : "", gone && g && g->submitted ? " (client gone)" : "");
    if (g) gen_release(g);
    free(r->body.p);
    free(r);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe) {
    srv_server *s = cls;
    (void)socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        int one = 1;
        if (ci) setsockopt(ci->connect_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* SSE events go out at once */
    }
    pthread_mutex_lock(&s->stat_mu);
    s->connections += toe == MHD_CONNECTION_NOTIFY_STARTED ? 1 : -1;
    pthread_mutex_unlock(&s->stat_mu);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    srv_server *s = cls;
    if (quiet_close) { /* the connection is closed on purpose (its client left) */
        quiet_close = 0;
        return;
    }
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    logf_(s, "libmicrohttpd: %s", line);
}

/* ---- start and stop ---------------------------------------------------------------------------- */

srv_params srv_params_default(void) {
    srv_params p;
    memset(&p, 0, sizeof p);
    p.host = "127.0.0.1";
    p.port = 8080;
    p.max_body = 1 << 20;
    p.max_connections = 256;
    p.sched = srv_sched_params_default();
    return p;
}

/* A listening socket on host:port. Returns the fd, or -1 with err set. */
static int listen_on(const char *host, int port, int *bound, sl_error *err) {
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &ai);
    if (rc) { sl_err(err, SL_EINVAL, "cannot resolve host '%s': %s", host, gai_strerror(rc)); return -1; }
    int fd = -1, e = 0;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) { e = errno; continue; }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) break;
        e = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd < 0) { sl_err(err, sl_status_from_errno(e), "cannot listen on %s:%d: %s", host, port, strerror(e)); return -1; }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    *bound = port;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

sl_status srv_server_new(const srv_params *p, const srv_model_entry *models, int n_models, srv_server **out, sl_error *err) {
    *out = NULL;
    if (n_models < 1) return sl_err(err, SL_EINVAL, "no model to serve");
    for (int i = 0; i < n_models; i++)
        for (int k = 0; k < i; k++)
            if (!strcmp(models[i].name, models[k].name)) return sl_err(err, SL_EINVAL, "two models are named '%s'", models[i].name);
    srv_server *s = calloc(1, sizeof *s);
    if (!s) return sl_err(err, SL_ENOMEM, "out of memory");
    s->p = p ? *p : srv_params_default();
    if (!s->p.host) s->p.host = "127.0.0.1";
    if (!s->p.max_body) s->p.max_body = 1 << 20;
    if (s->p.max_connections < 1) s->p.max_connections = 256;
    pthread_rwlock_init(&s->mu, NULL);
    pthread_mutex_init(&s->stat_mu, NULL);
    pthread_cond_init(&s->sampler_cv, NULL);
    s->started = (long long)time(NULL);
    s->t0 = clk_now_s();
    sl_status st = SL_ENOMEM;
    int fd = -1;
    if (s->p.api_key && *s->p.api_key && !(s->api_key = strdup(s->p.api_key))) goto fail;
    if (!(s->models = calloc((size_t)n_models, sizeof *s->models))) goto fail;
    for (int i = 0; i < n_models; i++) {
        model_slot *ms = &s->models[i];
        if (!(ms->name = strdup(models[i].name))) goto fail;
        ms->m = models[i].model;
        ms->tok = models[i].tok;
        int mc = sl_model_n_ctx(ms->m);
        ms->n_ctx = s->p.sched.n_ctx > 0 && s->p.sched.n_ctx < mc ? s->p.sched.n_ctx : mc;
        if ((st = srv_sched_new(ms->m, ms->tok, &s->p.sched, &ms->sched, err))) {
            sl_err_prefix(err, "model '%s'", ms->name);
            goto fail;
        }
        s->n_models = i + 1;
    }
    if ((fd = listen_on(s->p.host, s->p.port, &s->port, err)) < 0) { st = err ? err->status : SL_EIO; goto fail; }
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG,
                            0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s,
                            MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)s->p.max_connections, MHD_OPTION_CONNECTION_TIMEOUT, 60u, MHD_OPTION_END);
    if (!s->d) { st = sl_err(err, SL_EIO, "cannot start the HTTP server on %s:%d", s->p.host, s->port); goto fail; }
    fd = -1; /* libmicrohttpd's now */
    if (pthread_create(&s->sampler, NULL, sampler_main, s) == 0) s->sampler_run = 1;
    *out = s;
    return SL_OK;
fail:
    if (fd >= 0) close(fd);
    srv_server_free(s);
    return st;
}

int srv_server_port(const srv_server *s) { return s->port; }

void srv_server_free(srv_server *s) {
    if (!s) return;
    if (s->sampler_run) {
        pthread_mutex_lock(&s->stat_mu);
        s->sampler_stop = 1;
        pthread_cond_signal(&s->sampler_cv);
        pthread_mutex_unlock(&s->stat_mu);
        pthread_join(s->sampler, NULL);
    }
    if (s->d) MHD_quiesce_daemon(s->d); /* no new connections */
    pthread_rwlock_wrlock(&s->mu);
    s->quitting = 1;
    for (int i = 0; i < s->n_models; i++) {
        srv_sched_free(s->models[i].sched); /* every generation in flight ends (SL_ECANCELED) */
        s->models[i].sched = NULL;
    }
    pthread_rwlock_unlock(&s->mu);
    if (s->d) MHD_stop_daemon(s->d);
    if (s->models)
        for (int i = 0; i < s->n_models; i++) free(s->models[i].name);
    free(s->models);
    free(s->api_key);
    pthread_cond_destroy(&s->sampler_cv);
    pthread_mutex_destroy(&s->stat_mu);
    pthread_rwlock_destroy(&s->mu);
    free(s);
}
