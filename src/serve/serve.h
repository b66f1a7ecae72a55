/*
 * serve.h — the HTTP server behind `sluice serve`: OpenAI- and Anthropic-compatible endpoints over
 * libmicrohttpd, one continuous-batching scheduler (sched.h) per model. docs/SERVER.md describes
 * the endpoints, fields, limits and error statuses.
 *
 * The server never prints: each answered request is reported as one line through the log callback
 * (and so are libmicrohttpd's own complaints), for the caller to print.
 */
#ifndef SL_SERVE_SERVE_H
#define SL_SERVE_SERVE_H

#include <stddef.h>

#include "serve/sched.h"
#include "sluice.h"

typedef struct srv_server srv_server;

/* One model served: requests name it in their "model" field. */
typedef struct srv_model_entry {
    const char *name;        /* copied */
    sl_model *model;         /* borrowed: must outlive the server */
    const sl_tokenizer *tok; /* borrowed: must outlive the server */
} srv_model_entry;

/* One line of text, no newline; valid during the call. Called from the server's threads, one line
 * at a time (the server serializes the calls). */
typedef void (*srv_log_fn)(void *user, const char *line);

typedef struct srv_params {
    const char *host;       /* address to bind (a name or an IPv4/IPv6 literal); default "127.0.0.1" */
    int port;               /* default 8080; 0 = any free port (srv_server_port says which) */
    const char *api_key;    /* NULL or "": no authentication; else every /v1/... and /metrics request needs
                               "Authorization: Bearer KEY" or "x-api-key: KEY" */
    size_t max_body;        /* largest request body in bytes; default 1 MiB */
    int max_connections;    /* open connections at most (one thread each); default 256 */
    int per_ip_connections; /* open connections from one IP address at most; default max_connections / 4,
                               or max_connections when host is a loopback address */
    double read_timeout;    /* seconds a request's headers and body may take to arrive, counted from the
                               connection's start or the end of its previous request (so also the idle
                               time of a kept-alive connection); a slower one is closed. Default 30 */
    const char *const *cors; /* n_cors origins ("http://app.example:3000", or "*": any) whose browser requests
                                are answered, with CORS headers and preflights; other foreign origins get 403.
                                Without an api_key, a Host that is not this server's gets 421 (DNS rebinding) */
    int n_cors;
    size_t response_store;  /* bytes of /v1/responses conversations kept for previous_response_id; 0: 64 MiB */
    int max_tokens;         /* > 0: no answer is longer (a request asking more, or nothing, gets this many) */
    double timeout;         /* > 0: a generation still running this many seconds after its request arrived
                               ends at its next token, as max_tokens would end it */
    srv_sched_params sched; /* each model's scheduler (slots, queue, context per sequence) */
    srv_log_fn log;         /* may be NULL */
    void *log_user;
} srv_params;

srv_params srv_params_default(void);

/* Binds, starts a scheduler per model and the HTTP threads; answers requests until srv_server_free.
 * models[0] is the one requests without a "model" field get; names must be distinct. On error *out
 * is NULL and err names what failed (the address in use, a scheduler that did not start). */
sl_status srv_server_new(const srv_params *p, const srv_model_entry *models, int n_models, srv_server **out,
                         sl_error *err);
/* The port bound (the one chosen when params.port was 0). */
int srv_server_port(const srv_server *s);
/* Begins a graceful stop: from now on a new generation request gets 503 (Retry-After) and /health 503
 * {"status": "draining"}; the requests in flight go on. Returns how many are in flight. */
int srv_server_drain(srv_server *s);
/* Requests in flight: begun (headers read) and not yet completed (the whole answer written, or the
 * connection gone). A drain waits for it to reach 0 before srv_server_free. */
int srv_server_in_flight(srv_server *s);
/* Stops accepting, ends every generation in flight (their clients get an error event or 503), joins
 * the threads and frees the server. The models and tokenizers stay open. Accepts NULL. */
void srv_server_free(srv_server *s);

#endif
