/*
 * http.h — the server's parts shared by its three files: the wire (http.c: libmicrohttpd's callbacks,
 * authentication, body limits, replies, start and stop), the route table and the endpoints that are no
 * API dialect's (routes.c), and the generations (gen.c: the bridge between a connection and its
 * generation in a scheduler, and the generation endpoint every dialect's route names). Internal to
 * src/serve/; serve.h is what the rest of sluice sees.
 *
 * Adding an endpoint: a handler and its row in routes.c's table. Adding an API: its dialect (api.h)
 * in a file of its own, and a row naming it with the handler gen_endpoint.
 */
#ifndef SL_SERVE_HTTP_H
#define SL_SERVE_HTTP_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdint.h>

#include "serve/api.h"
#include "serve/serve.h"

/* The Responses kept for previous_response_id (resp_store.c): id -> the conversation's input items
 * (a JSON array's text), the least recently used dropped beyond max_bytes. Thread-safe. */
typedef struct resp_store resp_store;
resp_store *resp_store_new(size_t max_bytes);
void resp_store_free(resp_store *s);
/* Keeps a copy of items under id. 0, or -1 when out of memory. */
int resp_store_put(resp_store *s, const char *id, const char *items);
/* A malloc'ed copy of the items kept under id, or NULL (none, or out of memory). */
char *resp_store_get(resp_store *s, const char *id);

/* ---- the server and its models (http.c) ------------------------------------------------------- */

enum { TPS_SAMPLES = 8 }; /* one a second: tok/s is measured over the last few seconds */

typedef struct model_slot {
    char *name;
    sl_model *m;
    const sl_tokenizer *tok;
    srv_sched *sched;
    gr_vocab *vocab; /* the tokens by their bytes, for structured outputs; NULL without a tokenizer */
    int n_ctx; /* positions per sequence */
    int context_shift; /* the scheduler's (srv_sched_params): max_tokens may pass n_ctx */
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
    uint64_t by_class[6], disconnects, slow_closed; /* slow_closed: connections shut for read_timeout */
    int connections;
    int in_flight; /* requests begun and not yet completed (answered, or their connection gone) */
    struct conn *conns; /* open connections, for the read deadline (under stat_mu) */
    resp_store *responses; /* /v1/responses kept for previous_response_id */
    int draining;  /* srv_server_drain: new generations get 503, /health says "draining" */
    pthread_t sampler;
    pthread_cond_t sampler_cv;
    int sampler_run, sampler_stop;
};

/* Whether srv_server_drain was called (under stat_mu). */
int srv_is_draining(srv_server *s);

/* The model a request names (NULL: the first one), or NULL when none has that name. */
const model_slot *srv_find_model(const srv_server *s, const char *name);
/* Generated tokens per second over the last few seconds (stat_mu held). */
double srv_model_tps(const model_slot *ms);

/* ---- requests and replies (http.c) ------------------------------------------------------------- */

typedef struct gen gen;
struct srv_route;

/* The request's state across libmicrohttpd's calls of the access handler. */
typedef struct req {
    srv_server *s;
    double t0;
    int status;
    const struct srv_route *route;
    const api_dialect *api; /* the shape of its errors: its route's dialect, or OpenAI's */
    tok_buf body;
    size_t seen; /* body bytes received, kept or not */
    int too_big;
    gen *g;
    const char *cors; /* the Origin allowed by --cors (answered with CORS headers), or NULL */
    char model[64];
    char note[128]; /* 405: the method allowed; 204: the preflight's headers allowed */
    char method[12];
    char url[120];
} req;

/* Queue a response of status with body (len bytes; take: libmicrohttpd frees it, also on failure).
 * Returns libmicrohttpd's answer (MHD_NO: the connection is closed). */
enum MHD_Result srv_reply(struct MHD_Connection *c, req *r, int status, const char *type, char *body, size_t len,
                          int take);
/* Adds the CORS headers of r (none unless its Origin is one --cors allows). */
void srv_add_cors(struct MHD_Response *resp, const req *r);
/* A JSON body (taken; NULL: out of memory, answered 500). */
enum MHD_Result srv_reply_json(struct MHD_Connection *c, req *r, int status, char *json);
/* An error in r->api's shape. */
enum MHD_Result srv_reply_error(struct MHD_Connection *c, req *r, const api_error *e);
enum MHD_Result srv_fail(struct MHD_Connection *c, req *r, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Set by a handler that returns MHD_NO for a client already gone, just before libmicrohttpd reports
 * it (on the same thread); cleared by the logger. */
extern _Thread_local int srv_quiet_close;

/* ---- routes (routes.c) ------------------------------------------------------------------------- */

/* Answers a request whose body has arrived (r->body). rest: what follows a prefix route's path. */
typedef enum MHD_Result (*srv_handler)(struct MHD_Connection *c, req *r, const char *rest);

typedef struct srv_route {
    const char *method;     /* "GET" (HEAD is answered too) or "POST" */
    const char *path;       /* the whole path, or with prefix its start, the rest non-empty */
    int prefix;
    int open;               /* answered without the API key */
    const api_dialect *api; /* the API of its requests (its errors' shape); NULL: none (OpenAI's errors) */
    srv_handler handler;
} srv_route;

/* The route of a path, or NULL; *rest: what follows a prefix route's path. */
const srv_route *srv_route_of(const char *url, const char **rest);
/* The table itself, *n rows (tests check it against the dialects). Static. */
const srv_route *srv_routes(int *n);

/* ---- generations (gen.c) ----------------------------------------------------------------------- */

/* The handler of every dialect's route: parses r->body in r->route->api's dialect, builds the prompt,
 * submits it; then waits for the whole answer here, or hands a streamed response to libmicrohttpd. */
enum MHD_Result gen_endpoint(struct MHD_Connection *c, req *r, const char *rest);

/* Anthropic's count_tokens: the prompt tokens the same request would use, {"input_tokens": N}, from
 * the route's dialect's parser and the prompt builder of gen_endpoint; nothing is generated. */
enum MHD_Result gen_count_tokens(struct MHD_Connection *c, req *r, const char *rest);

/* What a request's log line says of its generation. */
typedef struct gen_report {
    int submitted, gone, stream;
    int n_prompt, n_generated;
} gen_report;

/* The request that holds g is over (dropped: the connection ended before its answer did): cancels the
 * generation if it has not finished, fills out, and drops the request's reference (g may be freed). */
void gen_request_over(gen *g, int dropped, gen_report *out);

#endif
