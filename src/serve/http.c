/*
 * http.c — the server (serve.h) on the wire: libmicrohttpd with a thread per connection, each request
 * matched against the route table (routes.c), authenticated and its body limited here, then answered
 * by its route's handler; the replies every handler writes (srv_reply, srv_fail: errors in the shape
 * of the request's API dialect); the request log; start and stop. The generations behind the API
 * routes are gen.c's.
 *
 * Shutdown: `mu` (a read-write lock) guards the schedulers: submits, cancels and stats reads take it
 * for reading; srv_server_free takes it for writing, marks the server quitting (later generation
 * requests get 503) and frees the schedulers, which end everything in flight with SL_ECANCELED, then
 * stops libmicrohttpd, which joins the connection threads.
 *
 * Sections: the server and its models; responses; the access handler; start and stop.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve/http.h"
#include "util/clock.h"
#include "util/err.h"

/* ---- the server and its models ----------------------------------------------------------------- */

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

const model_slot *srv_find_model(const srv_server *s, const char *name) {
    if (!name) return &s->models[0];
    for (int i = 0; i < s->n_models; i++)
        if (!strcmp(s->models[i].name, name)) return &s->models[i];
    return NULL;
}

/* An open connection (libmicrohttpd's socket context): whether it is reading a request (headers and
 * body) and since when. A connection reading for longer than read_timeout (one header byte a second,
 * a body that never ends, an idle keep-alive) is shut down by the sampler thread, so slow clients
 * cannot hold every connection. */
typedef struct conn {
    int fd, reading, reaped;
    double since;
    struct conn *prev, *next;
} conn;

static conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* Marks c's connection reading (1: from now on, waiting for a request) or not (the body is in). */
static void conn_reading(srv_server *s, struct MHD_Connection *c, int reading) {
    conn *k = conn_of(c);
    if (!k) return;
    pthread_mutex_lock(&s->stat_mu);
    if (reading && !k->reading) k->since = clk_now_s();
    k->reading = reading;
    pthread_mutex_unlock(&s->stat_mu);
}

/* Shuts down the connections reading for too long (stat_mu held); their threads then close them. */
static void reap_slow(srv_server *s) {
    double t = clk_now_s();
    for (conn *k = s->conns; k; k = k->next)
        if (k->reading && !k->reaped && t - k->since > s->p.read_timeout) {
            k->reaped = 1;
            shutdown(k->fd, SHUT_RDWR);
            s->slow_closed++;
        }
}

/* Records every model's generated-token count once a second, for tok/s; closes slow connections. */
static void *sampler_main(void *arg) {
    srv_server *s = arg;
    pthread_mutex_lock(&s->stat_mu);
    while (!s->sampler_stop) {
        reap_slow(s);
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

/* Between the oldest and newest samples. */
double srv_model_tps(const model_slot *ms) {
    if (ms->tps_k < 2) return 0;
    int last = (ms->tps_k - 1) % TPS_SAMPLES, first = ms->tps_k >= TPS_SAMPLES ? ms->tps_k % TPS_SAMPLES : 0;
    double dt = ms->tps_t[last] - ms->tps_t[first];
    return dt > 0 ? (double)(ms->tps_n[last] - ms->tps_n[first]) / dt : 0;
}

/* ---- responses --------------------------------------------------------------------------------- */

_Thread_local int srv_quiet_close;

void srv_add_cors(struct MHD_Response *resp, const req *r) {
    if (!r->cors) return;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, r->cors);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, "Origin");
}

enum MHD_Result srv_reply(struct MHD_Connection *c, req *r, int status, const char *type, char *body, size_t len,
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
    if (status == 204) { /* a CORS preflight */
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", r->note[0] ? r->note : "Authorization, Content-Type, x-api-key, anthropic-version");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    }
    srv_add_cors(resp, r);
    r->status = status;
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ok;
}

enum MHD_Result srv_reply_json(struct MHD_Connection *c, req *r, int status, char *json) {
    if (!json) {
        static char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
        return srv_reply(c, r, 500, "application/json", oom, sizeof oom - 1, 0);
    }
    return srv_reply(c, r, status, "application/json", json, strlen(json), 1);
}

enum MHD_Result srv_reply_error(struct MHD_Connection *c, req *r, const api_error *e) {
    return srv_reply_json(c, r, e->status, r->api->error_json(e));
}

enum MHD_Result srv_fail(struct MHD_Connection *c, req *r, int status, const char *code, const char *fmt, ...) {
    api_error e;
    memset(&e, 0, sizeof e);
    e.status = status;
    snprintf(e.code, sizeof e.code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    return srv_reply_error(c, r, &e);
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

/* ---- Host and Origin: DNS rebinding and cross-origin browser requests ---- */

/* The host part of a Host header ("name:port", "[v6]:port", a bare name or v6), brackets removed. */
static void host_part(const char *h, char *out, size_t n) {
    if (*h == '[') {
        const char *e = strchr(h, ']');
        snprintf(out, n, "%.*s", (int)(e ? (size_t)(e - h - 1) : strlen(h + 1)), h + 1);
        return;
    }
    const char *colon = strchr(h, ':');
    if (colon && strchr(colon + 1, ':')) colon = NULL; /* a bare IPv6 */
    snprintf(out, n, "%.*s", (int)(colon ? (size_t)(colon - h) : strlen(h)), h);
}

/* A Host a DNS-rebinding page cannot send: localhost, a loopback literal, the bound address, or, bound
 * to every address (0.0.0.0, ::), any IP literal (rebinding needs a name). No Host (HTTP/1.0): allowed. */
static int host_ok(const srv_server *s, const char *host) {
    if (!host) return 1;
    char h[256];
    host_part(host, h, sizeof h);
    if (!strcasecmp(h, "localhost") || !strcmp(h, "127.0.0.1") || !strcmp(h, "::1") || !strcasecmp(h, s->p.host)) return 1;
    struct in6_addr a6;
    struct in_addr a4;
    int literal = inet_pton(AF_INET, h, &a4) == 1 || inet_pton(AF_INET6, h, &a6) == 1;
    return literal && (!strcmp(s->p.host, "0.0.0.0") || !strcmp(s->p.host, "::"));
}

/* An Origin header is allowed when absent (no browser's cross-origin request), the server's own
 * ("http://" + Host: its page), or one of --cors (then *cors is it, answered with CORS headers). */
static int origin_ok(const srv_server *s, const char *origin, const char *host, const char **cors) {
    *cors = NULL;
    if (!origin) return 1;
    for (int i = 0; i < s->p.n_cors; i++)
        if (!strcmp(s->p.cors[i], origin) || !strcmp(s->p.cors[i], "*")) {
            *cors = origin;
            return 1;
        }
    return host && !strncmp(origin, "http://", 7) && !strcasecmp(origin + 7, host);
}

/* Refuses a foreign Host (421, keyless servers only) or Origin (403), and answers a CORS preflight
 * (OPTIONS from an allowed origin: 204). Returns 1 when answered (*done: what answering returned), else 0. */
static int cross_site(struct MHD_Connection *c, req *r, const char *method, enum MHD_Result *done) {
    const srv_server *s = r->s;
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ORIGIN);
    if (!s->api_key && !host_ok(s, host)) {
        *done = srv_fail(c, r, 421, "misdirected_request", "Host '%.100s' is not this server's (DNS rebinding?): use localhost, "
                         "127.0.0.1 or the address it listens on, or set --api-key", host);
        return 1;
    }
    if (!origin_ok(s, origin, host, &r->cors)) {
        *done = srv_fail(c, r, 403, "forbidden_origin", "Origin '%.100s' is not allowed: start the server with --cors ORIGIN to allow it", origin);
        return 1;
    }
    if (r->cors && !strcmp(method, "OPTIONS")) {
        const char *want = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        if (want && strlen(want) < sizeof r->note) snprintf(r->note, sizeof r->note, "%s", want);
        *done = srv_reply(c, r, 204, "text/plain", (char *)"", 0, 0);
        return 1;
    }
    return 0;
}

enum { DISCARD_MAX = 64 << 20 };

/* Collects the Content-Length headers: cl[0] the first, cl[1] one that differs from it. */
static enum MHD_Result each_length(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    const char **cl = cls;
    (void)kind;
    if (!key || strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) return MHD_YES;
    if (!cl[0]) cl[0] = value ? value : "";
    else if (strcmp(cl[0], value ? value : "")) cl[1] = value ? value : "";
    return MHD_YES;
}

/* The checks that need no body, on the headers: the route, its method, the key, the body's announced
 * size. Returns MHD_YES to read the body, or what answering the request returned. */
static enum MHD_Result on_headers(struct MHD_Connection *c, req *r, const char *url, const char *method) {
    srv_server *s = r->s;
    const char *rest;
    const srv_route *rt = srv_route_of(url, &rest);
    r->route = rt;
    r->api = rt && rt->api ? rt->api : &api_openai_chat; /* no API's: OpenAI's errors */
    enum MHD_Result done;
    if (cross_site(c, r, method, &done)) return done;
    if (!rt) return srv_fail(c, r, 404, "not_found", "no such endpoint: %s %.200s", method, url);
    int head = !strcmp(method, "HEAD") && !strcmp(rt->method, "GET");
    if (strcmp(method, rt->method) && !head) {
        snprintf(r->note, sizeof r->note, "%s", rt->method);
        return srv_fail(c, r, 405, "method_not_allowed", "%s %.200s: use %s", method, url, rt->method);
    }
    if (!rt->open && !authorized(s, c))
        return srv_fail(c, r, 401, "invalid_api_key", "Incorrect or missing API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'");
    /* A body over the limit is read and dropped, and answered 413 at its end: a client still sending
     * when the connection closed would see a reset instead of the answer. Beyond DISCARD_MAX it is
     * answered at once and the connection closed. */
    const char *cls[2] = {NULL, NULL};
    MHD_get_connection_values(c, MHD_HEADER_KIND, each_length, cls);
    if (cls[1]) /* which is the body's? (RFC 9112 §6.3: a request smuggling vector) */
        return srv_fail(c, r, 400, "invalid_request", "two different Content-Length headers ('%.20s', '%.20s')", cls[0], cls[1]);
    unsigned long long len = cls[0] ? strtoull(cls[0], NULL, 10) : 0;
    if (len > s->p.max_body + DISCARD_MAX)
        return srv_fail(c, r, 413, "request_too_large", "the request body (%llu bytes) is larger than the limit of %zu bytes", len, s->p.max_body);
    r->too_big = len > s->p.max_body;
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv_server *s = cls;
    req *r = *con_cls;
    (void)version;
    if (!r) { /* the headers */
        if (!(r = calloc(1, sizeof *r))) return MHD_NO;
        r->s = s;
        r->t0 = clk_now_s();
        *con_cls = r;
        pthread_mutex_lock(&s->stat_mu);
        s->in_flight++;
        pthread_mutex_unlock(&s->stat_mu);
        snprintf(r->method, sizeof r->method, "%s", method);
        snprintf(r->url, sizeof r->url, "%s", url);
        conn_reading(s, c, 1); /* (a no-op unless the request came right after another) */
        return on_headers(c, r, url, method);
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
    conn_reading(s, c, 0); /* the body is in */
    if (r->status) return MHD_YES; /* answered on the headers */
    if (r->too_big)
        return srv_fail(c, r, 413, "request_too_large", "the request body (%zu bytes) is larger than the limit of %zu bytes", r->seen,
                        s->p.max_body);
    const char *rest;
    srv_route_of(url, &rest);
    return r->route->handler(c, r, rest);
}

/* The request is over (answered, or the connection dropped): its line in the log, its references. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv_server *s = cls;
    req *r = *con_cls;
    (void)c;
    if (!r) return;
    *con_cls = NULL;
    int dropped = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK;
    gen_report g = {0, dropped, 0, 0, 0};
    if (r->g) gen_request_over(r->g, dropped, &g); /* r->g is the request's no more */
    pthread_mutex_lock(&s->stat_mu);
    int cls_ = r->status / 100;
    if (cls_ >= 1 && cls_ <= 5) s->by_class[cls_]++;
    if (g.gone && g.submitted) s->disconnects++;
    s->in_flight--;
    pthread_mutex_unlock(&s->stat_mu);
    char tokens[64] = "";
    if (g.submitted) snprintf(tokens, sizeof tokens, " %d+%d tokens", g.n_prompt, g.n_generated);
    char status[8] = "-"; /* nothing was answered: the client left */
    if (r->status) snprintf(status, sizeof status, "%d", r->status);
    logf_(s, "%s %s %s%s%s%s %.3f s%s%s", r->method, r->url, status, r->model[0] ? " " : "", r->model, tokens,
          clk_now_s() - r->t0, g.stream ? " stream" : "", g.gone && g.submitted ? " (client gone)" : "");
    free(r->body.p);
    free(r);
    conn_reading(s, c, 1); /* the next request's deadline runs from now */
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe) {
    srv_server *s = cls;
    conn *k = NULL;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        int one = 1;
        if (ci) setsockopt(ci->connect_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* SSE events go out at once */
        if (ci && (k = calloc(1, sizeof *k))) {
            k->fd = ci->connect_fd;
            k->reading = 1;
            k->since = clk_now_s();
        }
        *socket_context = k;
    } else
        k = *socket_context;
    pthread_mutex_lock(&s->stat_mu);
    s->connections += toe == MHD_CONNECTION_NOTIFY_STARTED ? 1 : -1;
    if (k && toe == MHD_CONNECTION_NOTIFY_STARTED) { /* link it */
        k->next = s->conns;
        if (s->conns) s->conns->prev = k;
        s->conns = k;
    } else if (k) { /* unlink and free it */
        if (k->prev) k->prev->next = k->next;
        else s->conns = k->next;
        if (k->next) k->next->prev = k->prev;
        free(k);
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&s->stat_mu);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    srv_server *s = cls;
    if (srv_quiet_close) { /* the connection is closed on purpose (its client left) */
        srv_quiet_close = 0;
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
    p.read_timeout = 30;
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
    if (rc) { err_set(err, SL_EINVAL, "cannot resolve host '%s': %s", host, gai_strerror(rc)); return -1; }
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
    if (fd < 0) { err_set(err, err_from_errno(e), "cannot listen on %s:%d: %s", host, port, strerror(e)); return -1; }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    *bound = port;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

sl_status srv_server_new(const srv_params *p, const srv_model_entry *models, int n_models, srv_server **out, sl_error *err) {
    *out = NULL;
    if (n_models < 1) return err_set(err, SL_EINVAL, "no model to serve");
    for (int i = 0; i < n_models; i++)
        for (int k = 0; k < i; k++)
            if (!strcmp(models[i].name, models[k].name)) return err_set(err, SL_EINVAL, "two models are named '%s'", models[i].name);
    srv_server *s = calloc(1, sizeof *s);
    if (!s) return err_set(err, SL_ENOMEM, "out of memory");
    s->p = p ? *p : srv_params_default();
    if (!s->p.host) s->p.host = "127.0.0.1";
    if (!s->p.max_body) s->p.max_body = 1 << 20;
    if (s->p.max_connections < 1) s->p.max_connections = 256;
    if (s->p.per_ip_connections < 1) { /* listening on loopback only: every client is this machine's */
        int local = !strcmp(s->p.host, "127.0.0.1") || !strcmp(s->p.host, "localhost") || !strcmp(s->p.host, "::1");
        s->p.per_ip_connections = local || s->p.max_connections < 4 ? s->p.max_connections : s->p.max_connections / 4;
    }
    if (!(s->p.read_timeout > 0)) s->p.read_timeout = 30;
    pthread_rwlock_init(&s->mu, NULL);
    pthread_mutex_init(&s->stat_mu, NULL);
    pthread_cond_init(&s->sampler_cv, NULL);
    s->started = (long long)time(NULL);
    s->t0 = clk_now_s();
    sl_status st = SL_ENOMEM;
    int fd = -1;
    if (s->p.api_key && *s->p.api_key && !(s->api_key = strdup(s->p.api_key))) goto fail;
    if (!(s->responses = resp_store_new(s->p.response_store > 0 ? s->p.response_store : 64u << 20))) goto fail;
    if (!(s->models = calloc((size_t)n_models, sizeof *s->models))) goto fail;
    for (int i = 0; i < n_models; i++) {
        model_slot *ms = &s->models[i];
        if (!(ms->name = strdup(models[i].name))) goto fail;
        ms->m = models[i].model;
        ms->tok = models[i].tok;
        int mc = sl_model_n_ctx(ms->m);
        ms->n_ctx = s->p.sched.n_ctx > 0 && s->p.sched.n_ctx < mc ? s->p.sched.n_ctx : mc;
        ms->context_shift = s->p.sched.context_shift;
        if ((st = srv_sched_new(ms->m, ms->tok, &s->p.sched, &ms->sched, err))) {
            err_prefix(err, "model '%s'", ms->name);
            goto fail;
        }
        s->n_models = i + 1;
        /* structured outputs mask with the tokens' bytes (text/grammar.h) */
        if (ms->tok && (st = gr_vocab_new(ms->tok, sl_model_n_vocab(ms->m), &ms->vocab, err))) goto fail;
    }
    if ((fd = listen_on(s->p.host, s->p.port, &s->port, err)) < 0) { st = err ? err->status : SL_EIO; goto fail; }
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG,
                            0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s,
                            MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)s->p.max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                            (unsigned)s->p.per_ip_connections, MHD_OPTION_CONNECTION_TIMEOUT, 60u, MHD_OPTION_END);
    if (!s->d) { st = err_set(err, SL_EIO, "cannot start the HTTP server on %s:%d", s->p.host, s->port); goto fail; }
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

int srv_is_draining(srv_server *s) {
    pthread_mutex_lock(&s->stat_mu);
    int d = s->draining;
    pthread_mutex_unlock(&s->stat_mu);
    return d;
}

int srv_server_drain(srv_server *s) {
    pthread_mutex_lock(&s->stat_mu);
    s->draining = 1;
    int n = s->in_flight;
    pthread_mutex_unlock(&s->stat_mu);
    return n;
}

int srv_server_in_flight(srv_server *s) {
    pthread_mutex_lock(&s->stat_mu);
    int n = s->in_flight;
    pthread_mutex_unlock(&s->stat_mu);
    return n;
}

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
    /* the connections' threads write the ends of the generations just canceled (an error event, a 503)
     * before libmicrohttpd shuts their sockets: up to 2 s (a client that stopped reading, a body never
     * finished) */
    double end = clk_now_s() + 2;
    while (s->d && srv_server_in_flight(s) > 0 && clk_now_s() < end) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (s->d) MHD_stop_daemon(s->d);
    if (s->models)
        for (int i = 0; i < s->n_models; i++) {
            free(s->models[i].name);
            gr_vocab_free(s->models[i].vocab);
        }
    free(s->models);
    free(s->api_key);
    resp_store_free(s->responses);
    pthread_cond_destroy(&s->sampler_cv);
    pthread_mutex_destroy(&s->stat_mu);
    pthread_rwlock_destroy(&s->mu);
    free(s);
}
