/*
 * routes.c — the route table (http.h): every endpoint's method, path, whether it needs the API key,
 * the API dialect of its requests, and its handler; and the handlers of the endpoints that are no
 * dialect's (the page, /health, /metrics, /experts, /v1/models). The generation endpoints are one
 * handler, gen.c's gen_endpoint, told apart by the dialect of their row.
 *
 * Adding an endpoint is one row here (and its handler); adding an API is one dialect file (api.h) and
 * its row here. docs/SERVER.md lists what each endpoint answers.
 *
 * Sections: the endpoints; the table.
 */
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "serve/http.h"
#include "serve/web_page.h"
#include "util/clock.h"

/* ---- the endpoints ----------------------------------------------------------------------------- */

/* GET / and /index.html: the chat page. */
static enum MHD_Result ep_page(struct MHD_Connection *c, req *r, const char *rest) {
    (void)rest;
    return srv_reply(c, r, 200, "text/html; charset=utf-8", (char *)web_page, sizeof web_page - 1, 0);
}

/* GET /health: {"status": "ok", "models": [names]}. */
static enum MHD_Result ep_health(struct MHD_Connection *c, req *r, const char *rest) {
    (void)rest;
    cJSON *j = cJSON_CreateObject(), *m = cJSON_CreateArray();
    int draining = srv_is_draining(r->s); /* a load balancer stops sending here */
    cJSON_AddStringToObject(j, "status", draining ? "draining" : "ok");
    for (int i = 0; i < r->s->n_models; i++) cJSON_AddItemToArray(m, cJSON_CreateString(r->s->models[i].name));
    cJSON_AddItemToObject(j, "models", m);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return srv_reply_json(c, r, draining ? 503 : 200, s);
}

/* The dialect whose shape /v1/models answers in: Anthropic's for a request with anthropic-version
 * (its clients send it on every request), else OpenAI's. Also the shape of the route's errors. */
static const api_dialect *models_dialect(struct MHD_Connection *c) {
    int ant = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "anthropic-version") != NULL;
    return api_dialect_of(ant ? API_MESSAGES : API_CHAT);
}

static api_model_info model_info(const srv_server *s, const model_slot *ms) {
    api_model_info mi = {ms->name, ms->n_ctx, s->started};
    return mi;
}

/* GET /v1/models: every model served. */
static enum MHD_Result ep_models(struct MHD_Connection *c, req *r, const char *rest) {
    (void)rest;
    srv_server *s = r->s;
    r->api = models_dialect(c);
    api_model_info *mi = calloc((size_t)s->n_models, sizeof *mi);
    if (!mi) return srv_fail(c, r, 500, NULL, "out of memory");
    for (int i = 0; i < s->n_models; i++) mi[i] = model_info(s, &s->models[i]);
    char *out = r->api->models_json(mi, s->n_models);
    free(mi);
    return srv_reply_json(c, r, 200, out);
}

/* GET /v1/models/NAME: one. */
static enum MHD_Result ep_model(struct MHD_Connection *c, req *r, const char *name) {
    r->api = models_dialect(c);
    const model_slot *ms = srv_find_model(r->s, name);
    if (!ms) return srv_fail(c, r, 404, "model_not_found", "The model '%.100s' does not exist", name);
    api_model_info mi = model_info(r->s, ms);
    return srv_reply_json(c, r, 200, r->api->model_json(&mi));
}

/* GET /metrics: Prometheus' text format (metrics.c). */
static enum MHD_Result ep_metrics(struct MHD_Connection *c, req *r, const char *rest) {
    (void)rest;
    srv_server *s = r->s;
    api_model_metrics *mm = calloc((size_t)s->n_models, sizeof *mm);
    if (!mm) return srv_fail(c, r, 500, NULL, "out of memory");
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
    for (int i = 0; i < s->n_models; i++) mm[i].tok_per_s = srv_model_tps(&s->models[i]);
    memcpy(h.by_class, s->by_class, sizeof h.by_class);
    h.disconnects = s->disconnects;
    h.slow_closed = s->slow_closed;
    h.connections = s->connections;
    pthread_mutex_unlock(&s->stat_mu);
    h.uptime_s = clk_now_s() - s->t0;
    tok_buf b = {0};
    int bad = api_metrics_text(&b, &h, mm, s->n_models);
    free(mm);
    if (bad) { free(b.p); return srv_fail(c, r, 500, NULL, "out of memory"); }
    return srv_reply(c, r, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, b.n, 1);
}

/* GET /experts[?model=NAME]: the routing counts of every MoE layer, for the page's heatmap:
 * {"model", "experts": E, "layers": [model layer numbers], "counts": [[E counts] per layer]}. */
static enum MHD_Result ep_experts(struct MHD_Connection *c, req *r, const char *rest) {
    (void)rest;
    const char *name = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "model");
    const model_slot *ms = srv_find_model(r->s, name);
    if (!ms) return srv_fail(c, r, 404, "model_not_found", "The model '%.100s' does not exist", name);
    int nl = sl_model_n_layers(ms->m), E = 0;
    for (int l = 0; l < nl && !E; l++) sl_model_expert_counts(ms->m, l, NULL, 0, &E);
    uint64_t *v = malloc(((size_t)E + 1) * sizeof *v);
    if (!v) return srv_fail(c, r, 500, NULL, "out of memory");
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
    return srv_reply_json(c, r, 200, out);
}

/* ---- the table --------------------------------------------------------------------------------- */

static const srv_route routes[] = {
    /* method, path, prefix, open, API dialect, handler */
    {"GET",  "/",                    0, 1, NULL,                    ep_page},
    {"GET",  "/index.html",          0, 1, NULL,                    ep_page},
    {"GET",  "/health",              0, 1, NULL,                    ep_health},
    {"GET",  "/metrics",             0, 0, NULL,                    ep_metrics},
    {"GET",  "/experts",             0, 0, NULL,                    ep_experts},
    {"GET",  "/v1/models",           0, 0, NULL,                    ep_models},
    {"GET",  "/v1/models/",          1, 0, NULL,                    ep_model},
    {"POST", "/v1/chat/completions", 0, 0, &api_openai_chat,        gen_endpoint},
    {"POST", "/v1/completions",      0, 0, &api_openai_completions, gen_endpoint},
    {"POST", "/v1/messages",         0, 0, &api_anthropic_messages, gen_endpoint},
    {"POST", "/v1/messages/count_tokens", 0, 0, &api_anthropic_messages, gen_count_tokens},
    {"POST", "/v1/responses",        0, 0, &api_openai_responses,   gen_endpoint},
};

const srv_route *srv_routes(int *n) {
    *n = (int)(sizeof routes / sizeof *routes);
    return routes;
}

const srv_route *srv_route_of(const char *url, const char **rest) {
    *rest = NULL;
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        const srv_route *rt = &routes[i];
        size_t n = strlen(rt->path);
        if (rt->prefix ? !strncmp(url, rt->path, n) && url[n] : !strcmp(url, rt->path)) {
            if (rt->prefix) *rest = url + n;
            return rt;
        }
    }
    return NULL;
}
