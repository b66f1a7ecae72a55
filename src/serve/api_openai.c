/*
 * api_openai.c — the OpenAI API's two dialects (api.h), chat and completions: POST
 * /v1/chat/completions and /v1/completions bodies parsed into an api_gen, and their responses, whole
 * (chat.completion, text_completion) or streamed (chat.completion.chunk / text_completion chunks,
 * data: [DONE]); OpenAI's error objects and model list, which the server also answers other routes with
 * (oai_error_json, oai_models_json; a Responses dialect would share them).
 *
 * Supported request fields are listed in docs/SERVER.md; fields that change what a client gets and
 * that sluice cannot honour (an unsupported JSON Schema keyword, frequency_penalty != 0, image
 * parts, suffix, best_of > 1) are refused with 400 rather than ignored; other unknown fields
 * ("user", "store", "metadata", "parallel_tool_calls", ...) are ignored.
 *
 * Sections: shared request fields; chat requests; completion requests; responses; streams; errors and
 * models; the dialects.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/api.h"

/* ---- shared request fields --------------------------------------------------------------------- */

/* response_format: "text", "json_object" (any object) or "json_schema" ({"name", "schema", "strict"}),
 * the last two by constrained decoding (constrain.c). */
static int response_format(api_gen *g, const cJSON *rf, api_error *e) {
    if (!rf || cJSON_IsNull(rf)) return 0;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rf, "type");
    if (!cJSON_IsObject(rf) || !cJSON_IsString(t))
        return api_fail(e, 400, "response_format", "invalid_type", "'response_format' must be an object with a 'type'");
    if (!strcmp(t->valuestring, "text")) return 0;
    if (!strcmp(t->valuestring, "json_object")) return api_json_grammar(g, NULL, "response_format", e);
    if (strcmp(t->valuestring, "json_schema"))
        return api_fail(e, 400, "response_format.type", "invalid_value",
                        "response_format '%.40s' is not supported (text, json_object, json_schema)", t->valuestring);
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
    if (!cJSON_IsObject(js))
        return api_fail(e, 400, "response_format.json_schema", "invalid_type", "'response_format.json_schema' must be an object");
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
    if (schema && !cJSON_IsObject(schema) && !cJSON_IsBool(schema))
        return api_fail(e, 400, "response_format.json_schema.schema", "invalid_type", "the schema must be an object");
    return api_json_grammar(g, schema, "response_format.json_schema.schema", e);
}

/* Chat: logprobs (a boolean) and top_logprobs (0..20, only with logprobs); completions: logprobs, the
 * number of top alternatives (0..20; OpenAI's limit is 5). */
static int logprobs(api_gen *g, const cJSON *root, api_error *e) {
    long long k = 0;
    if (g->kind == API_COMPLETION) {
        int r = api_int(root, "logprobs", 0, SRV_MAX_TOP_LOGPROBS, &k, e);
        if (r > 0) g->logprobs = 1 + (int)k;
        return r < 0 ? -1 : 0;
    }
    int on = 0;
    if (api_bool(root, "logprobs", &on, e) < 0 || api_int(root, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &k, e) < 0) return -1;
    if (k > 0 && !on) return api_fail(e, 400, "top_logprobs", "invalid_value", "'top_logprobs' needs 'logprobs' true");
    if (on) g->logprobs = 1 + (int)k;
    return 0;
}

/* n, logprobs, stream_options, response_format: the fields both endpoints refuse or read alike. */
static int oai_common(api_gen *g, const cJSON *root, api_error *e) {
    long long n = 1;
    if (api_common(g, root, "stop", e) < 0 || api_int(root, "n", 1, API_MAX_N, &n, e) < 0) return -1;
    g->n = (int)n;
    if (logprobs(g, root, e)) return -1;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) return api_fail(e, 400, "stream_options", "invalid_type", "'stream_options' must be an object");
        if (api_bool(so, "include_usage", &g->include_usage, e) < 0) {
            snprintf(e->param, sizeof e->param, "stream_options.include_usage");
            return -1;
        }
    }
    return response_format(g, cJSON_GetObjectItemCaseSensitive(root, "response_format"), e);
}

/* ---- chat requests ----------------------------------------------------------------------------- */

/* Message content: a string, null, or an array of {"type": "text", "text"} parts (joined by "\n").
 * *out: the text, or NULL for null. */
static int content_text(api_gen *g, const cJSON *c, const char *param, const char **out, api_error *e) {
    *out = NULL;
    if (!c || cJSON_IsNull(c)) return 0;
    if (cJSON_IsString(c)) { *out = c->valuestring; return 0; }
    if (!cJSON_IsArray(c)) return api_fail(e, 400, param, "invalid_type", "'%s' must be a string or an array of parts", param);
    tok_buf b = {0};
    int i = 0, r = 0;
    for (const cJSON *p = c->child; p; p = p->next, i++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "type"), *x = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsObject(p) || !cJSON_IsString(t)) {
            r = api_fail(e, 400, param, "invalid_type", "%s[%d] must be an object with a 'type'", param, i);
            break;
        }
        if (strcmp(t->valuestring, "text")) {
            r = api_fail(e, 400, param, "unsupported_content", "%s[%d]: content of type '%.40s' is not supported (only text)",
                         param, i, t->valuestring);
            break;
        }
        if (!cJSON_IsString(x)) { r = api_fail(e, 400, param, "invalid_type", "%s[%d].text must be a string", param, i); break; }
        if ((i && tok_buf_puts(&b, "\n")) || tok_buf_puts(&b, x->valuestring)) { r = api_fail(e, 500, NULL, NULL, "out of memory"); break; }
    }
    if (!r) {
        *out = api_gen_strndup(g, b.p ? b.p : "", b.n);
        if (!*out) r = api_fail(e, 500, NULL, NULL, "out of memory");
    }
    free(b.p);
    return r;
}

static int chat_message(api_gen *g, const cJSON *m, int i, sl_chat_msg *out, api_error *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d]", i);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    if (!cJSON_IsObject(m)) return api_fail(e, 400, param, "invalid_type", "'%s' must be an object", param);
    if (!cJSON_IsString(role)) return api_fail(e, 400, param, "invalid_type", "'%s.role' must be a string", param);
    const char *r = role->valuestring;
    if (!strcmp(r, "developer")) r = "system";
    if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool"))
        return api_fail(e, 400, param, "invalid_value", "'%s.role' must be system, developer, user, assistant or tool, not '%.40s'",
                        param, r);
    out->role = r;
    char cp[80];
    snprintf(cp, sizeof cp, "%s.content", param);
    if (content_text(g, cJSON_GetObjectItemCaseSensitive(m, "content"), cp, &out->content, e)) return -1;
    if (strcmp(r, "assistant")) return 0;
    const char *reasoning = NULL;
    if (api_str(m, "reasoning_content", &reasoning, e) < 0 || (!reasoning && api_str(m, "reasoning", &reasoning, e) < 0)) {
        snprintf(e->param, sizeof e->param, "%s", param);
        return -1;
    }
    out->reasoning = reasoning;
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    if (tc && !cJSON_IsNull(tc)) {
        if (!cJSON_IsArray(tc)) return api_fail(e, 400, param, "invalid_type", "'%s.tool_calls' must be an array", param);
        int k = 0;
        for (const cJSON *c = tc->child; c; c = c->next, k++) {
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
            if (!cJSON_IsObject(f) || !cJSON_IsString(name))
                return api_fail(e, 400, param, "invalid_type", "'%s.tool_calls[%d].function.name' must be a string", param, k);
        }
        if (!(out->tool_calls = api_gen_own(g, cJSON_PrintUnformatted(tc)))) return api_fail(e, 500, NULL, NULL, "out of memory");
    }
    return 0;
}

/* tool_choice: "auto" (or absent), "required" (a call to any tool) or {"type": "function", "function":
 * {"name"}} (that one): the last two by constrained decoding. */
static int tool_choice(api_gen *g, const cJSON *choice, api_error *e) {
    const char *name = NULL;
    if (!choice || cJSON_IsNull(choice) || (cJSON_IsString(choice) && !strcmp(choice->valuestring, "auto")))
        return api_tool_auto_grammar(g, "tools", e); /* strict tools: text or valid calls */
    if (cJSON_IsString(choice)) {
        if (strcmp(choice->valuestring, "required"))
            return api_fail(e, 400, "tool_choice", "invalid_value", "'tool_choice' must be none, auto, required or a function");
    } else if (cJSON_IsObject(choice)) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(choice, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (!cJSON_IsString(nm))
            return api_fail(e, 400, "tool_choice", "invalid_value", "'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
        name = nm->valuestring;
    } else return 0;
    if (g->grammar)
        return api_fail(e, 400, "tool_choice", "invalid_value", "a forced tool call and a JSON response_format cannot be combined");
    return api_tool_grammar(g, name, "tool_choice", e);
}

/* tools (OpenAI form, passed to the template as they are) and tool_choice ("none" drops them). */
static int chat_tools(api_gen *g, const cJSON *root, api_error *e) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tools"), *choice = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    if ((!t || cJSON_IsNull(t)) && (cJSON_IsObject(choice) || (cJSON_IsString(choice) && !strcmp(choice->valuestring, "required"))))
        return api_fail(e, 400, "tool_choice", "invalid_value", "'tool_choice' forces a tool call, but there are no tools");
    if (!t || cJSON_IsNull(t)) return 0;
    if (!cJSON_IsArray(t)) return api_fail(e, 400, "tools", "invalid_type", "'tools' must be an array");
    int i = 0;
    for (const cJSON *x = t->child; x; x = x->next, i++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(x, "type"), *f = cJSON_GetObjectItemCaseSensitive(x, "function");
        if (!cJSON_IsObject(x) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsObject(f) ||
            !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(f, "name")))
            return api_fail(e, 400, "tools", "invalid_value",
                            "tools[%d] must be {\"type\": \"function\", \"function\": {\"name\": ..., ...}}", i);
    }
    if (cJSON_IsString(choice) && !strcmp(choice->valuestring, "none")) return 0;
    if (choice && !cJSON_IsNull(choice) && !cJSON_IsString(choice) && !cJSON_IsObject(choice))
        return api_fail(e, 400, "tool_choice", "invalid_type", "'tool_choice' must be a string or an object");
    if (i && !(g->tools = api_gen_own(g, cJSON_PrintUnformatted(t)))) return api_fail(e, 500, NULL, NULL, "out of memory");
    return tool_choice(g, choice, e);
}

static int max_tokens(api_gen *g, const cJSON *root, const char *key, api_error *e) {
    long long k = 0;
    int r = api_int(root, key, 1, 1e9, &k, e);
    if (r > 0) g->max_tokens = (int)k;
    return r < 0 ? -1 : r;
}

int oai_parse_chat(const char *body, size_t len, api_gen *g, api_error *e) {
    memset(g, 0, sizeof *g);
    g->kind = API_CHAT;
    cJSON *root = api_parse_root(g, body, len, e);
    if (!root || oai_common(g, root, e)) return -1;
    int r = max_tokens(g, root, "max_completion_tokens", e);
    if (r < 0 || (r == 0 && max_tokens(g, root, "max_tokens", e) < 0)) return -1;
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!msgs) return api_fail(e, 400, "messages", "missing_required_parameter", "'messages' is required");
    if (!cJSON_IsArray(msgs)) return api_fail(e, 400, "messages", "invalid_type", "'messages' must be an array");
    int n = cJSON_GetArraySize(msgs);
    if (n == 0) return api_fail(e, 400, "messages", "invalid_value", "'messages' must not be empty");
    if (!(g->msgs = calloc((size_t)n, sizeof *g->msgs))) return api_fail(e, 500, NULL, NULL, "out of memory");
    int i = 0;
    for (const cJSON *m = msgs->child; m; m = m->next, i++)
        if (chat_message(g, m, i, &g->msgs[i], e)) return -1;
    g->n_msgs = n;
    if (chat_tools(g, root, e)) return -1;
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(root, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw) && !cJSON_IsObject(kw))
        return api_fail(e, 400, "chat_template_kwargs", "invalid_type", "'chat_template_kwargs' must be an object");
    if (api_bool(kw, "enable_thinking", &g->enable_thinking, e) < 0 || api_bool(root, "enable_thinking", &g->enable_thinking, e) < 0)
        return -1;
    if (g->grammar) g->enable_thinking = 0; /* constrained: the grammar covers the whole answer */
    return 0;
}

/* ---- completion requests ----------------------------------------------------------------------- */

static int prompt_ids(api_gen *g, const cJSON *a, api_error *e) {
    int n = cJSON_GetArraySize(a), i = 0;
    if (!(g->prompt_ids = malloc((size_t)(n ? n : 1) * sizeof *g->prompt_ids))) return api_fail(e, 500, NULL, NULL, "out of memory");
    for (const cJSON *x = a->child; x; x = x->next, i++) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 2147483647.0 || x->valuedouble != (double)(int32_t)x->valuedouble)
            return api_fail(e, 400, "prompt", "invalid_value", "prompt[%d] must be a token id", i);
        g->prompt_ids[i] = (int32_t)x->valuedouble;
    }
    g->n_prompt_ids = n;
    return 0;
}

int oai_parse_completion(const char *body, size_t len, api_gen *g, api_error *e) {
    memset(g, 0, sizeof *g);
    g->kind = API_COMPLETION;
    cJSON *root = api_parse_root(g, body, len, e);
    if (!root || oai_common(g, root, e)) return -1;
    g->max_tokens = 16; /* OpenAI's default for completions */
    if (max_tokens(g, root, "max_tokens", e) < 0 || api_bool(root, "echo", &g->echo, e) < 0) return -1;
    long long best_of = 1;
    if (api_int(root, "best_of", 1, 1e9, &best_of, e) < 0) return -1;
    if (best_of != 1) return api_fail(e, 400, "best_of", "unsupported_parameter", "only best_of = 1 is supported");
    const cJSON *suffix = cJSON_GetObjectItemCaseSensitive(root, "suffix");
    if (cJSON_IsString(suffix) && *suffix->valuestring)
        return api_fail(e, 400, "suffix", "unsupported_parameter", "'suffix' (fill in the middle) is not supported");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!p) return api_fail(e, 400, "prompt", "missing_required_parameter", "'prompt' is required");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && (cJSON_IsString(p->child) || cJSON_IsArray(p->child))) p = p->child;
    if (cJSON_IsString(p)) g->prompt = p->valuestring;
    else if (cJSON_IsArray(p) && (!p->child || cJSON_IsNumber(p->child))) return prompt_ids(g, p, e);
    else if (cJSON_IsArray(p))
        return api_fail(e, 400, "prompt", "unsupported_parameter", "only one prompt per request is supported");
    else return api_fail(e, 400, "prompt", "invalid_type", "'prompt' must be a string, an array of token ids, or an array of one of them");
    return 0;
}

/* ---- responses --------------------------------------------------------------------------------- */

/* finish_reason of an ending; has_calls: tool calls were made. */
static const char *oai_finish_reason(sl_stop_reason stop, int has_calls) {
    if (stop == SL_STOP_LENGTH) return "length";
    return has_calls ? "tool_calls" : "stop";
}

static cJSON *usage(const api_done *d) {
    cJSON *u = cJSON_CreateObject(), *det = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", d->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", d->n_generated);
    cJSON_AddNumberToObject(u, "total_tokens", d->n_prompt + d->n_generated);
    cJSON_AddNumberToObject(det, "cached_tokens", d->n_reused);
    cJSON_AddItemToObject(u, "prompt_tokens_details", det);
    cJSON *cd = cJSON_AddObjectToObject(u, "completion_tokens_details");
    if (cd) cJSON_AddNumberToObject(cd, "reasoning_tokens", d->n_thinking);
    return u;
}

static cJSON *head(const api_meta *m, const char *object) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", m->id);
    cJSON_AddStringToObject(j, "object", object);
    cJSON_AddNumberToObject(j, "created", (double)m->created);
    cJSON_AddStringToObject(j, "model", m->model);
    return j;
}

/* One tool call as OpenAI writes it; index < 0: no "index" (whole responses). */
static cJSON *tool_call(int index, const char *id, const char *name, const char *args) {
    cJSON *c = cJSON_CreateObject(), *f = cJSON_CreateObject();
    if (index >= 0) cJSON_AddNumberToObject(c, "index", index);
    cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "type", "function");
    cJSON_AddStringToObject(f, "name", name);
    cJSON_AddStringToObject(f, "arguments", args);
    cJSON_AddItemToObject(c, "function", f);
    return c;
}

/* Prints j (deleting it); NULL when out of memory (cJSON quietly drops items it could not create, so
 * a tree built under memory pressure is checked by its print). */
static char *finish(cJSON *j) {
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    return s;
}

char *oai_chat_response(const api_meta *m, const api_result *r, const api_done *d) {
    cJSON *j = head(m, "chat.completion"), *choices = cJSON_CreateArray(), *c = cJSON_CreateObject(), *msg = cJSON_CreateObject();
    cJSON_AddStringToObject(msg, "role", "assistant");
    if (r->content.n || !r->n_calls) cJSON_AddItemToObject(msg, "content", api_text(r->content.p, r->content.n));
    else cJSON_AddNullToObject(msg, "content");
    if (r->reasoning.n) cJSON_AddItemToObject(msg, "reasoning_content", api_text(r->reasoning.p, r->reasoning.n));
    if (r->n_calls) {
        cJSON *calls = cJSON_CreateArray();
        for (int i = 0; i < r->n_calls; i++)
            cJSON_AddItemToArray(calls, tool_call(-1, r->calls[i].id, r->calls[i].name, r->calls[i].arguments));
        cJSON_AddItemToObject(msg, "tool_calls", calls);
    }
    cJSON_AddNumberToObject(c, "index", 0);
    cJSON_AddItemToObject(c, "message", msg);
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", oai_finish_reason(d->stop, r->n_calls > 0));
    cJSON_AddItemToArray(choices, c);
    cJSON_AddItemToObject(j, "choices", choices);
    cJSON_AddItemToObject(j, "usage", usage(d));
    return finish(j);
}

char *oai_completion_response(const api_meta *m, const char *text, size_t len, const api_done *d) {
    cJSON *j = head(m, "text_completion"), *choices = cJSON_CreateArray(), *c = cJSON_CreateObject();
    cJSON_AddItemToObject(c, "text", api_text(text, len));
    cJSON_AddNumberToObject(c, "index", 0);
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", oai_finish_reason(d->stop, 0));
    cJSON_AddItemToArray(choices, c);
    cJSON_AddItemToObject(j, "choices", choices);
    cJSON_AddItemToObject(j, "usage", usage(d));
    return finish(j);
}

/* ---- streams ----------------------------------------------------------------------------------- */

/* A chunk of one choice c (owned; its first fields set by the caller), then its logprobs and
 * finish_reason. */
static int chunk(api_stream *s, const char *object, cJSON *c, const char *finish_reason) {
    cJSON *j = head(&s->meta, object), *choices = cJSON_CreateArray();
    cJSON_AddNullToObject(c, "logprobs");
    if (finish_reason) cJSON_AddStringToObject(c, "finish_reason", finish_reason);
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    cJSON_AddItemToObject(j, "choices", choices);
    if (s->include_usage) cJSON_AddNullToObject(j, "usage");
    return api_sse(&s->out, NULL, j);
}

/* chat.completion.chunk: delta (owned; NULL: {}) and finish_reason. */
static int chat_chunk(api_stream *s, cJSON *delta, const char *finish_reason) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", s->choice);
    cJSON_AddItemToObject(c, "delta", delta ? delta : cJSON_CreateObject());
    return chunk(s, "chat.completion.chunk", c, finish_reason);
}

/* A text_completion chunk of text. */
static int text_chunk(api_stream *s, const char *text, size_t len, const char *finish_reason) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToObject(c, "text", api_text(text, len));
    cJSON_AddNumberToObject(c, "index", s->choice);
    return chunk(s, "text_completion", c, finish_reason);
}

/* The closing events after the finish chunk: the usage chunk when asked, then [DONE]. */
static int stream_close(api_stream *s, const char *object, const api_done *d) {
    if (s->hold_close) return 0;
    if (s->include_usage) {
        cJSON *j = head(&s->meta, object);
        cJSON_AddItemToObject(j, "choices", cJSON_CreateArray());
        cJSON_AddItemToObject(j, "usage", usage(d));
        if (api_sse(&s->out, NULL, j)) return -1;
    }
    return tok_buf_puts(&s->out, "data: [DONE]\n\n");
}

int oai_stream_close(api_stream *s, const api_done *d) {
    s->hold_close = 0;
    return stream_close(s, s->kind == API_COMPLETION ? "text_completion" : "chat.completion.chunk", d);
}

static int chat_stream_begin(api_stream *s) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "role", "assistant");
    cJSON_AddStringToObject(d, "content", "");
    return chat_chunk(s, d, NULL);
}

static int chat_stream_piece(api_stream *s, out_kind kind, const char *text, size_t len, const out_call *call) {
    cJSON *d = cJSON_CreateObject();
    if (kind == OUT_TOOL_CALL) {
        char id[40];
        api_new_id(id, sizeof id, "call_");
        cJSON *calls = cJSON_CreateArray();
        cJSON_AddItemToArray(calls, tool_call(s->n_calls++, id, call->name, call->arguments));
        cJSON_AddItemToObject(d, "tool_calls", calls);
    } else
        cJSON_AddItemToObject(d, kind == OUT_REASONING ? "reasoning_content" : "content", api_text(text, len));
    return chat_chunk(s, d, NULL);
}

static int chat_stream_end(api_stream *s, const api_done *d) {
    if (chat_chunk(s, NULL, oai_finish_reason(d->stop, s->n_calls > 0))) return -1;
    return stream_close(s, "chat.completion.chunk", d);
}

static int text_stream_begin(api_stream *s) {
    (void)s;
    return 0;
}

static int text_stream_piece(api_stream *s, out_kind kind, const char *text, size_t len, const out_call *call) {
    (void)kind, (void)call;
    return text_chunk(s, text, len, NULL);
}

static int text_stream_end(api_stream *s, const api_done *d) {
    if (text_chunk(s, "", 0, oai_finish_reason(d->stop, 0))) return -1;
    return stream_close(s, "text_completion", d);
}

/* An error after the stream began: its data line, then [DONE]. */
static int stream_error(api_stream *s, const api_error *e) {
    char *body = oai_error_json(e);
    if (!body) return -1;
    int r = tok_buf_puts(&s->out, "data: ") | tok_buf_puts(&s->out, body) | tok_buf_puts(&s->out, "\n\ndata: [DONE]\n\n");
    free(body);
    return r ? -1 : 0;
}

/* ---- errors and models ------------------------------------------------------------------------- */

const char *oai_error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 429: return "rate_limit_exceeded";
    case 503: return "server_overloaded";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

char *oai_error_json(const api_error *e) {
    cJSON *root = cJSON_CreateObject(), *err = cJSON_CreateObject();
    if (!root || !err) {
        cJSON_Delete(root);
        cJSON_Delete(err);
        return NULL;
    }
    cJSON_AddItemToObject(root, "error", err);
    cJSON_AddItemToObject(err, "message", api_error_message(e));
    cJSON_AddStringToObject(err, "type", oai_error_type(e->status));
    if (e->param[0]) cJSON_AddStringToObject(err, "param", e->param);
    else cJSON_AddNullToObject(err, "param");
    if (e->code[0]) cJSON_AddStringToObject(err, "code", e->code);
    else cJSON_AddNullToObject(err, "code");
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}

static cJSON *model_object(const api_model_info *m) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", m->name);
    cJSON_AddStringToObject(j, "object", "model");
    cJSON_AddNumberToObject(j, "created", (double)m->created);
    cJSON_AddStringToObject(j, "owned_by", "sluice");
    cJSON_AddNumberToObject(j, "context_length", m->n_ctx);
    return j;
}

char *oai_model_json(const api_model_info *m) { return finish(model_object(m)); }

char *oai_models_json(const api_model_info *m, int n) {
    cJSON *j = cJSON_CreateObject(), *d = cJSON_CreateArray();
    cJSON_AddStringToObject(j, "object", "list");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(d, model_object(&m[i]));
    cJSON_AddItemToObject(j, "data", d);
    return finish(j);
}

/* ---- the dialects ------------------------------------------------------------------------------ */

static char *chat_response(const api_meta *m, const api_result *r, const api_done *d) { return oai_chat_response(m, r, d); }

/* The collected content is the whole text (completions parse no reasoning or tool calls). */
static char *text_response(const api_meta *m, const api_result *r, const api_done *d) {
    return oai_completion_response(m, r->content.p, r->content.n, d);
}

const api_dialect api_openai_chat = {
    .name = "chat",
    .kind = API_CHAT,
    .id_prefix = "chatcmpl-",
    .chat = 1,
    .prompt_param = "messages",
    .parse = oai_parse_chat,
    .response = chat_response,
    .stream_begin = chat_stream_begin,
    .stream_piece = chat_stream_piece,
    .stream_end = chat_stream_end,
    .stream_error = stream_error,
    .error_json = oai_error_json,
    .error_type = oai_error_type,
    .models_json = oai_models_json,
    .model_json = oai_model_json,
};

const api_dialect api_openai_completions = {
    .name = "completions",
    .kind = API_COMPLETION,
    .id_prefix = "cmpl-",
    .chat = 0,
    .prompt_param = "prompt",
    .parse = oai_parse_completion,
    .response = text_response,
    .stream_begin = text_stream_begin,
    .stream_piece = text_stream_piece,
    .stream_end = text_stream_end,
    .stream_error = stream_error,
    .error_json = oai_error_json,
    .error_type = oai_error_type,
    .models_json = oai_models_json,
    .model_json = oai_model_json,
};
