/*
 * api.c — what the APIs share (api.h): error objects, request storage and the field readers of the
 * parsers, sampling and stop fields, ids, the collected result, SSE framing, the dispatch of a
 * streamed response to its dialect's writers, and the table of dialects by kind.
 *
 * Sections: errors; requests; common fields; ids; results; streams; dialects.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "serve/api.h"
#include "text/tokenizer.h"

/* ---- errors ------------------------------------------------------------------------------------ */

int api_fail(api_error *e, int status, const char *param, const char *code, const char *fmt, ...) {
    e->status = status;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

void api_scrub_paths(char *msg) {
    char *w = msg;
    for (const char *p = msg; *p;) {
        int start = *p == '/' && (p == msg || strchr(" \t'\"(=", p[-1]));
        if (!start) { *w++ = *p++; continue; }
        const char *end = p, *base = p + 1;
        for (; *end && !strchr(" \t'\",:)", *end); end++)
            if (*end == '/') base = end + 1;
        memmove(w, base, (size_t)(end - base)); /* w <= base: copies left */
        w += end - base;
        p = end;
    }
    *w = 0;
}

cJSON *api_error_message(const api_error *e) {
    tok_buf b = {0};
    cJSON *s = NULL;
    char msg[sizeof e->message];
    snprintf(msg, sizeof msg, "%s", e->message);
    if (e->status >= 500) api_scrub_paths(msg); /* a model's file name, never where it lives */
    if (!tok_utf8_lossy(&b, msg, strlen(msg)) && !tok_buf_put(&b, "", 1)) s = cJSON_CreateString(b.p);
    free(b.p);
    return s;
}

char *api_error_json(const api_error *e, int anthropic) {
    return api_dialect_of(anthropic ? API_MESSAGES : API_CHAT)->error_json(e);
}

const char *api_error_type(int status, int anthropic) {
    return api_dialect_of(anthropic ? API_MESSAGES : API_CHAT)->error_type(status);
}

/* ---- requests ---------------------------------------------------------------------------------- */

char *api_gen_own(api_gen *g, char *s) {
    if (!s) return NULL;
    if (g->n_owned == g->cap_owned) {
        int cap = g->cap_owned ? 2 * g->cap_owned : 16;
        char **o = realloc(g->owned, (size_t)cap * sizeof *o);
        if (!o) { free(s); return NULL; }
        g->owned = o;
        g->cap_owned = cap;
    }
    return g->owned[g->n_owned++] = s;
}

char *api_gen_strndup(api_gen *g, const char *s, size_t n) { return api_gen_own(g, strndup(s, n)); }

sl_chat_msg *api_msg_push(sl_chat_msg **v, int *n, int *cap, const char *role) {
    if (*n == *cap) {
        int c = *cap ? 2 * *cap : 8;
        sl_chat_msg *w = realloc(*v, (size_t)c * sizeof *w);
        if (!w) return NULL;
        *v = w;
        *cap = c;
    }
    sl_chat_msg *m = &(*v)[(*n)++];
    memset(m, 0, sizeof *m);
    m->role = role;
    return m;
}

int api_join_parts(api_gen *g, const cJSON *c, const char *param, api_part_check check, int by_index,
                   const char **out, api_error *e) {
    tok_buf b = {0};
    int i = 0, r = 0;
    for (const cJSON *x = c->child; x; x = x->next, i++) {
        if ((r = check(x, param, i, e))) break;
        const char *s = cJSON_GetObjectItemCaseSensitive(x, "text")->valuestring;
        if (((by_index ? i > 0 : b.n > 0) && tok_buf_puts(&b, "\n")) || tok_buf_puts(&b, s)) {
            r = api_fail(e, 500, NULL, NULL, "out of memory");
            break;
        }
    }
    if (!r && !(*out = api_gen_strndup(g, b.p ? b.p : "", b.n))) r = api_fail(e, 500, NULL, NULL, "out of memory");
    free(b.p);
    return r;
}

void api_gen_free(api_gen *g) {
    if (!g) return;
    for (int i = 0; i < g->n_owned; i++) free(g->owned[i]);
    free(g->owned);
    free(g->msgs);
    free(g->prompt_ids);
    gr_grammar_free(g->grammar);
    cJSON_Delete(g->root);
    memset(g, 0, sizeof *g);
}

/* The path of the first string (key or value) of a that differs from b's, as "messages[0].content";
 * 0 when none does. a and b have the same shape. */
static int diff_path(const cJSON *a, const cJSON *b, char *path, size_t n, size_t at) {
    if (cJSON_IsString(a)) return strcmp(a->valuestring, b->valuestring) != 0;
    int i = 0;
    for (const cJSON *x = a->child, *y = b->child; x && y; x = x->next, y = y->next, i++) {
        int m = cJSON_IsArray(a) ? snprintf(path + at, n - at, "[%d]", i)
                                 : snprintf(path + at, n - at, "%s%s", at ? "." : "", y->string ? y->string : "");
        size_t next = m < 0 ? at : at + (size_t)m < n ? at + (size_t)m : n - 1;
        if ((x->string && strcmp(x->string, y->string)) || diff_path(x, y, path, n, next)) return 1;
    }
    return 0;
}

/* A "\u0000" escape in a JSON text (cJSON would end the string there, silently cutting a prompt):
 * 400 naming the field (found by parsing a copy with \u0001 in its place and comparing). Returns
 * 0 when there is none, -1 with e filled. */
static int nul_escape(const cJSON *root, const char *body, size_t len, api_error *e) {
    char *copy = NULL;
    for (size_t i = 0; i + 1 < len; i++) {
        if (body[i] != '\\') continue;
        if (body[i + 1] == 'u' && i + 5 < len && !memcmp(body + i + 2, "0000", 4)) {
            if (!(copy = malloc(len))) return api_fail(e, 500, NULL, NULL, "out of memory");
            break;
        }
        i++; /* the escaped character */
    }
    if (!copy) return 0;
    memcpy(copy, body, len);
    for (size_t i = 0; i + 5 < len; i++) {
        if (copy[i] != '\\') continue;
        if (copy[i + 1] == 'u' && !memcmp(copy + i + 2, "0000", 4)) copy[i + 5] = '1';
        i++;
    }
    cJSON *alt = cJSON_ParseWithLength(copy, len);
    free(copy);
    char path[64] = "";
    if (alt) diff_path(root, alt, path, sizeof path, 0);
    cJSON_Delete(alt);
    return api_fail(e, 400, path, "invalid_value", "%s%sholds a NUL character (\\u0000), which no text may", path[0] ? path : "",
                    path[0] ? " " : "the body ");
}

cJSON *api_parse_root(api_gen *g, const char *body, size_t len, api_error *e) {
    /* JSON is UTF-8 (RFC 8259 §8.1); cJSON would pass other bytes on into prompts */
    size_t bad = tok_utf8_invalid_at(body, len);
    if (bad < len) {
        api_fail(e, 400, NULL, "invalid_json", "the body is not valid UTF-8 (at byte %zu)", bad);
        return NULL;
    }
    const char *nul = memchr(body, 0, len);
    if (nul) { /* JSON text holds none (RFC 8259 §7: control characters are escaped) */
        api_fail(e, 400, NULL, "invalid_json", "the body holds a NUL byte (at byte %zu)", (size_t)(nul - body));
        return NULL;
    }
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= body && at <= body + len ? (long)(at - body) : -1;
        if (off >= 0) api_fail(e, 400, NULL, "invalid_json", "the body is not valid JSON (at byte %ld)", off);
        else api_fail(e, 400, NULL, "invalid_json", "the body is not valid JSON");
        return NULL;
    }
    g->root = root;
    if (!cJSON_IsObject(root)) {
        api_fail(e, 400, NULL, "invalid_json", "the body must be a JSON object");
        return NULL;
    }
    if (nul_escape(root, body, len, e)) return NULL;
    return root;
}

int api_num(const cJSON *o, const char *key, double lo, double hi, double *out, api_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v)) return api_fail(e, 400, key, "invalid_type", "'%s' must be a number", key);
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return api_fail(e, 400, key, "invalid_value", "'%s' must be between %g and %g", key, lo, hi);
    *out = v->valuedouble;
    return 1;
}

int api_int(const cJSON *o, const char *key, double lo, double hi, long long *out, api_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return api_fail(e, 400, key, "invalid_type", "'%s' must be an integer", key);
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return api_fail(e, 400, key, "invalid_value", "'%s' must be between %.0f and %.0f", key, lo, hi);
    *out = (long long)v->valuedouble;
    return 1;
}

int api_bool(const cJSON *o, const char *key, int *out, api_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return api_fail(e, 400, key, "invalid_type", "'%s' must be a boolean", key);
    *out = cJSON_IsTrue(v);
    return 1;
}

int api_str(const cJSON *o, const char *key, const char **out, api_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v)) return api_fail(e, 400, key, "invalid_type", "'%s' must be a string", key);
    *out = v->valuestring;
    return 1;
}

/* ---- common fields ----------------------------------------------------------------------------- */

static int stop_field(api_gen *g, const cJSON *root, const char *key, api_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v)) {
        if (*v->valuestring) g->stop[g->n_stop++] = v->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(v)) return api_fail(e, 400, key, "invalid_type", "'%s' must be a string or an array of strings", key);
    for (const cJSON *s = v->child; s; s = s->next) {
        if (!cJSON_IsString(s)) return api_fail(e, 400, key, "invalid_type", "'%s' must be a string or an array of strings", key);
        if (!*s->valuestring) continue; /* an empty stop string would end every answer at once */
        if (g->n_stop == API_MAX_STOP) return api_fail(e, 400, key, "invalid_value", "at most %d stop strings", API_MAX_STOP);
        g->stop[g->n_stop++] = s->valuestring;
    }
    return 0;
}

int api_common(api_gen *g, const cJSON *root, const char *stop_key, api_error *e) {
    double x;
    long long k;
    int r;
    g->sp = sl_sampler_params_default();
    g->enable_thinking = -1;
    if (api_str(root, "model", &g->model, e) < 0 || api_bool(root, "stream", &g->stream, e) < 0) return -1;
    if ((r = api_num(root, "temperature", 0, 100, &x, e)) < 0) return -1;
    if (r) g->sp.temp = (float)x;
    if ((r = api_num(root, "top_p", 0, 1, &x, e)) < 0) return -1;
    if (r) g->sp.top_p = x > 0 ? (float)x : 1.0f; /* 0 would keep nothing: treated as off, as llama.cpp does */
    if ((r = api_int(root, "top_k", 0, 1e9, &k, e)) < 0) return -1;
    if (r) g->sp.top_k = (int)k;
    if ((r = api_num(root, "min_p", 0, 1, &x, e)) < 0) return -1;
    if (r) g->sp.min_p = (float)x;
    if ((r = api_num(root, "presence_penalty", -2, 2, &x, e)) < 0) return -1;
    if (r) g->sp.presence_penalty = (float)x;
    if ((r = api_num(root, "repeat_penalty", 0.01, 100, &x, e)) < 0) return -1;
    if (r) g->sp.repeat_penalty = (float)x;
    if ((r = api_int(root, "repeat_last_n", 0, 4096, &k, e)) < 0) return -1;
    if (r) g->sp.repeat_last_n = (int)k;
    if ((r = api_num(root, "frequency_penalty", -2, 2, &x, e)) < 0) return -1;
    if (r && x != 0)
        return api_fail(e, 400, "frequency_penalty", "unsupported_parameter",
                        "'frequency_penalty' is not supported (only 0): use presence_penalty, or repeat_penalty "
                        "(llama.cpp's multiplicative penalty)");
    /* an extension: the thinking block's budget (Anthropic's thinking.budget_tokens) */
    if ((r = api_int(root, "max_thinking_tokens", 1, 1e9, &k, e)) < 0) return -1;
    if (r) g->think_budget = (int)k;
    /* seed: any integer a double holds, negative ones as their two's complement */
    if ((r = api_num(root, "seed", -9.2e18, 1.8e19, &x, e)) < 0) return -1;
    if (r && x != floor(x)) return api_fail(e, 400, "seed", "invalid_type", "'seed' must be an integer");
    if (r) {
        g->sp.seed = x < 0 ? (uint64_t)(long long)x : (uint64_t)x;
        g->seed_set = 1;
    }
    return stop_field(g, root, stop_key, e);
}

/* ---- ids --------------------------------------------------------------------------------------- */

void api_new_id(char *out, size_t n, const char *prefix) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static uint64_t counter;
    unsigned char r[12];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) { /* no entropy yet: time and a counter */
        pthread_mutex_lock(&mu);
        uint64_t c = ++counter;
        pthread_mutex_unlock(&mu);
        uint64_t t = (uint64_t)time(NULL) ^ (c * 0x9e3779b97f4a7c15ull);
        for (size_t i = 0; i < sizeof r; i++) r[i] = (unsigned char)(t >> (8 * (i % 8))) ^ (unsigned char)(i * 31);
    }
    size_t k = (size_t)snprintf(out, n, "%s", prefix);
    for (size_t i = 0; i < sizeof r && k + 2 < n; i++, k += 2) snprintf(out + k, n - k, "%02x", r[i]);
}

/* ---- results ----------------------------------------------------------------------------------- */

int api_result_add(void *user, out_kind kind, const char *text, size_t len, const out_call *call) {
    api_result *r = user;
    if (kind == OUT_CONTENT) return tok_buf_put(&r->content, text, len);
    if (kind == OUT_REASONING) return tok_buf_put(&r->reasoning, text, len);
    api_call *c = realloc(r->calls, ((size_t)r->n_calls + 1) * sizeof *c);
    if (!c) return -1;
    r->calls = c;
    c += r->n_calls;
    memset(c, 0, sizeof *c);
    c->name = strdup(call->name);
    c->arguments = strdup(call->arguments);
    r->n_calls++;
    api_new_id(c->id, sizeof c->id, "call_");
    return c->name && c->arguments ? 0 : -1;
}

void api_result_free(api_result *r) {
    if (!r) return;
    free(r->content.p);
    free(r->reasoning.p);
    for (int i = 0; i < r->n_calls; i++) {
        free(r->calls[i].name);
        free(r->calls[i].arguments);
    }
    free(r->calls);
    memset(r, 0, sizeof *r);
}

void *api_text(const char *s, size_t n) {
    char *t = strndup(s ? s : "", s ? n : 0);
    cJSON *j = t ? cJSON_CreateString(t) : NULL;
    free(t);
    return j;
}

/* ---- streams ----------------------------------------------------------------------------------- */

int api_sse(tok_buf *out, const char *name, void *json) {
    cJSON *j = json;
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!s) return -1;
    int r = 0;
    if (name) r |= tok_buf_puts(out, "event: ") | tok_buf_puts(out, name) | tok_buf_puts(out, "\n");
    r |= tok_buf_puts(out, "data: ") | tok_buf_puts(out, s) | tok_buf_puts(out, "\n\n");
    free(s);
    return r ? -1 : 0;
}

void api_stream_init(api_stream *s, api_kind kind, const api_meta *m, int include_usage, int n_prompt) {
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->d = api_dialect_of(kind);
    s->meta = *m;
    s->include_usage = include_usage;
    s->n_prompt = n_prompt;
    s->block = -1;
}

void api_stream_free(api_stream *s) {
    if (!s) return;
    free(s->out.p);
    free(s->acc.p);
    cJSON_Delete(s->items);
    free(s->output);
    memset(&s->out, 0, sizeof s->out);
    memset(&s->acc, 0, sizeof s->acc);
    s->items = NULL;
    s->output = NULL;
}

int api_stream_begin(api_stream *s) {
    if (s->started) return 0;
    s->started = 1;
    return s->d->stream_begin(s);
}

int api_stream_piece(void *user, out_kind kind, const char *text, size_t len, const out_call *call) {
    api_stream *s = user;
    if (api_stream_begin(s)) return -1;
    return s->d->stream_piece(s, kind, text, len, call);
}

int api_stream_end(api_stream *s, const api_done *d) {
    if (api_stream_begin(s)) return -1;
    return s->d->stream_end(s, d);
}

int api_stream_error(api_stream *s, const api_error *e) { return s->d->stream_error(s, e); }

/* ---- dialects ---------------------------------------------------------------------------------- */

const api_dialect *api_dialect_of(api_kind kind) {
    static const api_dialect *const by_kind[API_N_KINDS] = {
        [API_CHAT] = &api_openai_chat,
        [API_COMPLETION] = &api_openai_completions,
        [API_MESSAGES] = &api_anthropic_messages,
        [API_RESPONSES] = &api_openai_responses,
    };
    return by_kind[kind];
}
