/*
 * api_anthropic.c — the Anthropic Messages API's dialect (api.h): POST /v1/messages bodies parsed
 * into an api_gen (its content blocks mapped onto the chat template's messages), and the response,
 * whole (a "message") or streamed (message_start, ping, content_block_start / _delta / _stop,
 * message_delta, message_stop); Anthropic's error objects ({"type": "error", ...}) and model list.
 *
 * Mapping: system (string or text blocks) -> a system message; text blocks -> content (joined by
 * "\n"); an assistant's thinking block -> its reasoning, its tool_use blocks -> tool_calls; a user's
 * tool_result blocks -> "tool" messages (before the rest of that turn); tools {name, description,
 * input_schema} -> the template's {"type": "function", "function": {name, description, parameters}};
 * thinking {"type": "enabled" | "disabled", "budget_tokens"} -> enable_thinking, think_budget.
 * Answers: reasoning -> a thinking block (empty signature), content -> a text block, each tool call
 * -> a tool_use block.
 *
 * Sections: requests; responses; streams; errors and models; the dialect.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/api.h"

/* ---- requests ---------------------------------------------------------------------------------- */

typedef struct {
    api_gen *g;
    sl_chat_msg *v;
    int n, cap;
} msg_list;

static sl_chat_msg *add_msg(msg_list *l, const char *role) { return api_msg_push(&l->v, &l->n, &l->cap, role); }

/* A text block (the only block type joined into a message's text). */
static int text_block(const cJSON *x, const char *param, int i, api_error *e) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(x, "type"), *s = cJSON_GetObjectItemCaseSensitive(x, "text");
    if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") || !cJSON_IsString(s))
        return api_fail(e, 400, param, NULL, "%s[%d] must be a text block", param, i);
    return 0;
}

/* Text of a string or an array of text blocks (other block types refused). */
static int blocks_text(api_gen *g, const cJSON *c, const char *param, const char **out, api_error *e) {
    if (cJSON_IsString(c)) { *out = c->valuestring; return 0; }
    if (!cJSON_IsArray(c)) return api_fail(e, 400, param, NULL, "%s must be a string or an array of text blocks", param);
    return api_join_parts(g, c, param, text_block, 0, out, e);
}

/* One message of the request, as one or more chat messages. */
static int message(msg_list *l, const cJSON *m, int i, api_error *e) {
    char param[64];
    snprintf(param, sizeof param, "messages.%d", i);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"), *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!cJSON_IsObject(m) || !cJSON_IsString(role) || (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant")))
        return api_fail(e, 400, param, NULL, "%s: role must be \"user\" or \"assistant\"", param);
    int asst = !strcmp(role->valuestring, "assistant");
    if (cJSON_IsString(content)) {
        sl_chat_msg *x = add_msg(l, asst ? "assistant" : "user");
        if (!x) return api_fail(e, 500, NULL, NULL, "out of memory");
        x->content = content->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(content)) return api_fail(e, 400, param, NULL, "%s.content must be a string or an array of content blocks", param);
    tok_buf text = {0}, reasoning = {0};
    cJSON *calls = cJSON_CreateArray();
    int k = 0, r = 0;
    for (const cJSON *b = content->child; b && !r; b = b->next, k++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "type");
        const char *type = cJSON_IsString(t) ? t->valuestring : "";
        const cJSON *f;
        if (!strcmp(type, "text") && cJSON_IsString(f = cJSON_GetObjectItemCaseSensitive(b, "text"))) {
            if ((text.n && tok_buf_puts(&text, "\n")) || tok_buf_puts(&text, f->valuestring)) r = api_fail(e, 500, NULL, NULL, "out of memory");
        } else if (asst && !strcmp(type, "thinking") && cJSON_IsString(f = cJSON_GetObjectItemCaseSensitive(b, "thinking"))) {
            if (tok_buf_puts(&reasoning, f->valuestring)) r = api_fail(e, 500, NULL, NULL, "out of memory");
        } else if (asst && !strcmp(type, "redacted_thinking")) {
        } else if (asst && !strcmp(type, "tool_use")) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(b, "name"), *input = cJSON_GetObjectItemCaseSensitive(b, "input");
            if (!cJSON_IsString(name) || !cJSON_IsObject(input)) {
                r = api_fail(e, 400, param, NULL, "%s.content.%d: a tool_use block needs a name and an input object", param, k);
                break;
            }
            cJSON *c = cJSON_CreateObject();
            cJSON_AddStringToObject(c, "name", name->valuestring);
            cJSON_AddItemToObject(c, "arguments", cJSON_Duplicate(input, 1));
            cJSON_AddItemToArray(calls, c);
        } else if (!asst && !strcmp(type, "tool_result")) {
            const cJSON *rc = cJSON_GetObjectItemCaseSensitive(b, "content");
            sl_chat_msg *x = add_msg(l, "tool");
            char p2[96];
            snprintf(p2, sizeof p2, "%s.content.%d.content", param, k);
            if (!x) r = api_fail(e, 500, NULL, NULL, "out of memory");
            else if (!rc || cJSON_IsNull(rc)) x->content = "";
            else r = blocks_text(l->g, rc, p2, &x->content, e);
        } else
            r = api_fail(e, 400, param, NULL, "%s.content.%d: content blocks of type '%.40s' are not supported here", param, k, type);
    }
    if (!r && (text.n || reasoning.n || cJSON_GetArraySize(calls) || (!asst && !k))) {
        sl_chat_msg *x = add_msg(l, asst ? "assistant" : "user");
        if (!x) r = api_fail(e, 500, NULL, NULL, "out of memory");
        else {
            x->content = api_gen_strndup(l->g, text.p ? text.p : "", text.n);
            if (reasoning.n) x->reasoning = api_gen_strndup(l->g, reasoning.p, reasoning.n);
            if (cJSON_GetArraySize(calls)) x->tool_calls = api_gen_own(l->g, cJSON_PrintUnformatted(calls));
            if (!x->content || (reasoning.n && !x->reasoning) || (cJSON_GetArraySize(calls) && !x->tool_calls))
                r = api_fail(e, 500, NULL, NULL, "out of memory");
        }
    }
    free(text.p);
    free(reasoning.p);
    cJSON_Delete(calls);
    return r;
}

/* tools -> the template's OpenAI form; tool_choice {"type": "none"} drops them. */
static int tools(api_gen *g, const cJSON *root, api_error *e) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tools"), *choice = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    if (!t || cJSON_IsNull(t)) return 0;
    if (!cJSON_IsArray(t)) return api_fail(e, 400, "tools", NULL, "tools must be an array");
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(choice, "type");
    if (cJSON_IsString(ct) && !strcmp(ct->valuestring, "none")) return 0;
    cJSON *out = cJSON_CreateArray();
    int i = 0;
    for (const cJSON *x = t->child; x; x = x->next, i++) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(x, "name"), *schema = cJSON_GetObjectItemCaseSensitive(x, "input_schema");
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(x, "description");
        if (!cJSON_IsString(name) || !cJSON_IsObject(schema)) {
            cJSON_Delete(out);
            return api_fail(e, 400, "tools", NULL, "tools.%d needs a name and an input_schema object (server tools are not supported)", i);
        }
        cJSON *f = cJSON_CreateObject(), *w = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "name", name->valuestring);
        if (cJSON_IsString(desc)) cJSON_AddStringToObject(f, "description", desc->valuestring);
        cJSON_AddItemToObject(f, "parameters", cJSON_Duplicate(schema, 1));
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(x, "strict"))) cJSON_AddTrueToObject(f, "strict");
        cJSON_AddStringToObject(w, "type", "function");
        cJSON_AddItemToObject(w, "function", f);
        cJSON_AddItemToArray(out, w);
    }
    if (i && !(g->tools = api_gen_own(g, cJSON_PrintUnformatted(out)))) {
        cJSON_Delete(out);
        return api_fail(e, 500, NULL, NULL, "out of memory");
    }
    cJSON_Delete(out);
    /* "any" or {"type": "tool", "name"}: a call forced by constrained decoding (constrain.c) */
    if (cJSON_IsString(ct) && !strcmp(ct->valuestring, "any")) return api_tool_grammar(g, NULL, "tool_choice", e);
    if (cJSON_IsString(ct) && !strcmp(ct->valuestring, "tool")) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(choice, "name");
        if (!cJSON_IsString(nm)) return api_fail(e, 400, "tool_choice", NULL, "tool_choice.name: a string is required");
        return api_tool_grammar(g, nm->valuestring, "tool_choice", e);
    }
    return api_tool_auto_grammar(g, "tools", e); /* auto: strict tools' calls valid, or free text */
}

/* Structured outputs: output_config.format (or the beta's output_format), {"type": "json_schema",
 * "schema"}, by constrained decoding (constrain.c). */
static int output_format(api_gen *g, const cJSON *root, api_error *e) {
    const cJSON *oc = cJSON_GetObjectItemCaseSensitive(root, "output_config");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(oc, "format");
    const char *param = "output_config.format";
    if (!f || cJSON_IsNull(f)) f = cJSON_GetObjectItemCaseSensitive(root, "output_format"), param = "output_format";
    if (!f || cJSON_IsNull(f)) return 0;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(f, "type"), *schema = cJSON_GetObjectItemCaseSensitive(f, "schema");
    if (!cJSON_IsString(t) || strcmp(t->valuestring, "json_schema") || !cJSON_IsObject(schema))
        return api_fail(e, 400, param, NULL, "%s: {\"type\": \"json_schema\", \"schema\": {...}} is required", param);
    if (g->grammar) return api_fail(e, 400, param, NULL, "a forced tool call and an output format cannot be combined");
    return api_json_grammar(g, schema, param, e);
}

int ant_parse_messages(const char *body, size_t len, api_gen *g, api_error *e) {
    memset(g, 0, sizeof *g);
    g->kind = API_MESSAGES;
    cJSON *root = api_parse_root(g, body, len, e);
    if (!root || api_common(g, root, "stop_sequences", e)) return -1;
    long long mt = 0;
    int r = api_int(root, "max_tokens", 1, 1e9, &mt, e);
    if (r < 0) return -1;
    if (!r) return api_fail(e, 400, "max_tokens", NULL, "max_tokens: Field required");
    g->max_tokens = (int)mt;
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!cJSON_IsArray(msgs) || !msgs->child) return api_fail(e, 400, "messages", NULL, "messages: a non-empty array is required");
    msg_list l = {g, NULL, 0, 0};
    const cJSON *sys = cJSON_GetObjectItemCaseSensitive(root, "system");
    if (sys && !cJSON_IsNull(sys)) {
        sl_chat_msg *x = add_msg(&l, "system");
        if (!x) { free(l.v); return api_fail(e, 500, NULL, NULL, "out of memory"); }
        if (blocks_text(g, sys, "system", &x->content, e)) { free(l.v); return -1; }
    }
    int i = 0;
    for (const cJSON *m = msgs->child; m; m = m->next, i++)
        if (message(&l, m, i, e)) { free(l.v); return -1; }
    g->msgs = l.v;
    g->n_msgs = l.n;
    if (tools(g, root, e) || output_format(g, root, e)) return -1;
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(root, "thinking");
    if (th && !cJSON_IsNull(th)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(th, "type");
        if (!cJSON_IsString(t) || (strcmp(t->valuestring, "enabled") && strcmp(t->valuestring, "disabled")))
            return api_fail(e, 400, "thinking", NULL, "thinking.type must be \"enabled\" or \"disabled\"");
        g->enable_thinking = !strcmp(t->valuestring, "enabled") && !g->grammar; /* constrained: no thinking */
        long long b;
        int r = api_int(th, "budget_tokens", 1, 1e9, &b, e);
        if (r < 0) return snprintf(e->param, sizeof e->param, "thinking.budget_tokens"), -1;
        if (r) g->think_budget = (int)b;
    }
    return 0;
}

/* ---- responses --------------------------------------------------------------------------------- */

/* stop_reason of an ending; has_calls: tool calls were made. */
static const char *ant_stop_reason(sl_stop_reason stop, int has_calls) {
    if (stop == SL_STOP_LENGTH) return "max_tokens";
    if (stop == SL_STOP_STRING) return "stop_sequence";
    return has_calls ? "tool_use" : "end_turn";
}

/* A tool call's arguments as the input object ({} when they are not an object). */
static cJSON *input_of(const char *args) {
    cJSON *j = cJSON_Parse(args);
    if (cJSON_IsObject(j)) return j;
    cJSON_Delete(j);
    return cJSON_CreateObject();
}

/* Anthropic's usage: input_tokens are the prompt tokens neither read from nor written to the cache
 * (the three add up to the prompt, as count_tokens counts it); reused: whose state came from the
 * prefix cache (--state-cache); kept: whose state this request added to it. */
static cJSON *usage(int n_prompt, int n_reused, int n_kept, int n_generated) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", n_prompt - n_reused - n_kept);
    cJSON_AddNumberToObject(u, "cache_creation_input_tokens", n_kept);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", n_reused);
    cJSON_AddNumberToObject(u, "output_tokens", n_generated);
    return u;
}

static cJSON *message_head(const api_meta *m) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", m->id);
    cJSON_AddStringToObject(j, "type", "message");
    cJSON_AddStringToObject(j, "role", "assistant");
    cJSON_AddStringToObject(j, "model", m->model);
    return j;
}

static cJSON *block(out_kind kind, const char *text, size_t len, const char *id, const char *name, const char *args) {
    cJSON *b = cJSON_CreateObject();
    if (kind == OUT_REASONING) {
        cJSON_AddStringToObject(b, "type", "thinking");
        cJSON_AddItemToObject(b, "thinking", api_text(text, len));
        cJSON_AddStringToObject(b, "signature", "");
    } else if (kind == OUT_CONTENT) {
        cJSON_AddStringToObject(b, "type", "text");
        cJSON_AddItemToObject(b, "text", api_text(text, len));
    } else {
        cJSON_AddStringToObject(b, "type", "tool_use");
        cJSON_AddStringToObject(b, "id", id);
        cJSON_AddStringToObject(b, "name", name);
        cJSON_AddItemToObject(b, "input", args ? input_of(args) : cJSON_CreateObject());
    }
    return b;
}

char *ant_message_response(const api_meta *m, const api_result *r, const api_done *d) {
    cJSON *j = message_head(m), *content = cJSON_CreateArray();
    if (r->reasoning.n) cJSON_AddItemToArray(content, block(OUT_REASONING, r->reasoning.p, r->reasoning.n, NULL, NULL, NULL));
    if (r->content.n || (!r->reasoning.n && !r->n_calls)) cJSON_AddItemToArray(content, block(OUT_CONTENT, r->content.p, r->content.n, NULL, NULL, NULL));
    for (int i = 0; i < r->n_calls; i++) {
        char id[40];
        api_new_id(id, sizeof id, "toolu_");
        cJSON_AddItemToArray(content, block(OUT_TOOL_CALL, NULL, 0, id, r->calls[i].name, r->calls[i].arguments));
    }
    cJSON_AddItemToObject(j, "content", content);
    cJSON_AddStringToObject(j, "stop_reason", ant_stop_reason(d->stop, r->n_calls > 0));
    if (d->stop == SL_STOP_STRING && d->stop_sequence) cJSON_AddStringToObject(j, "stop_sequence", d->stop_sequence);
    else cJSON_AddNullToObject(j, "stop_sequence");
    cJSON_AddItemToObject(j, "usage", usage(d->n_prompt, d->n_reused, d->n_kept, d->n_generated));
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

/* ---- streams ----------------------------------------------------------------------------------- */

/* An event object, its "type" first as the API writes it; put_event() names the SSE event after it. */
static cJSON *ev(const char *type) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "type", type);
    return j;
}

static int put_event(api_stream *s, cJSON *j) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (!cJSON_IsString(t)) { cJSON_Delete(j); return -1; }
    char name[32];
    snprintf(name, sizeof name, "%s", t->valuestring);
    return api_sse(&s->out, name, j);
}

static int block_stop(api_stream *s) {
    if (s->block < 0) return 0;
    cJSON *j = ev("content_block_stop");
    cJSON_AddNumberToObject(j, "index", s->block);
    s->block = -1;
    return put_event(s, j);
}

static int block_start(api_stream *s, cJSON *b) {
    cJSON *j = ev("content_block_start");
    s->block = s->n_blocks++;
    cJSON_AddNumberToObject(j, "index", s->block);
    cJSON_AddItemToObject(j, "content_block", b);
    return put_event(s, j);
}

static int delta(api_stream *s, const char *type, const char *key, const char *text, size_t len) {
    cJSON *j = ev("content_block_delta"), *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "index", s->block);
    cJSON_AddStringToObject(d, "type", type);
    cJSON_AddItemToObject(d, key, api_text(text, len));
    cJSON_AddItemToObject(j, "delta", d);
    return put_event(s, j);
}

static int ant_stream_begin(api_stream *s) {
    cJSON *j = ev("message_start"), *m = message_head(&s->meta);
    cJSON_AddItemToObject(m, "content", cJSON_CreateArray());
    cJSON_AddNullToObject(m, "stop_reason");
    cJSON_AddNullToObject(m, "stop_sequence");
    cJSON_AddItemToObject(m, "usage", usage(s->n_prompt, s->n_reused, s->n_kept, 0));
    cJSON_AddItemToObject(j, "message", m);
    if (put_event(s, j)) return -1;
    return put_event(s, ev("ping"));
}

static int ant_stream_piece(api_stream *s, out_kind kind, const char *text, size_t len, const out_call *call) {
    if (kind == OUT_TOOL_CALL) {
        char id[40];
        api_new_id(id, sizeof id, "toolu_");
        cJSON *input = input_of(call->arguments);
        char *json = cJSON_PrintUnformatted(input);
        cJSON_Delete(input);
        int r = !json || block_stop(s) || block_start(s, block(OUT_TOOL_CALL, NULL, 0, id, call->name, NULL)) ||
                delta(s, "input_json_delta", "partial_json", json, strlen(json)) || block_stop(s);
        free(json);
        s->n_calls++;
        return r ? -1 : 0;
    }
    if (s->block < 0 || s->block_kind != (int)kind) {
        if (block_stop(s) || block_start(s, block(kind, "", 0, NULL, NULL, NULL))) return -1;
        s->block_kind = (int)kind;
    }
    return kind == OUT_REASONING ? delta(s, "thinking_delta", "thinking", text, len) : delta(s, "text_delta", "text", text, len);
}

static int ant_stream_end(api_stream *s, const api_done *d) {
    if (s->n_blocks == 0 && block_start(s, block(OUT_CONTENT, "", 0, NULL, NULL, NULL))) return -1; /* an empty text block, as for a whole response */
    if (block_stop(s)) return -1;
    cJSON *j = ev("message_delta"), *dl = cJSON_CreateObject(), *u = usage(d->n_prompt, d->n_reused, d->n_kept, d->n_generated);
    cJSON_AddStringToObject(dl, "stop_reason", ant_stop_reason(d->stop, s->n_calls > 0));
    if (d->stop == SL_STOP_STRING && d->stop_sequence) cJSON_AddStringToObject(dl, "stop_sequence", d->stop_sequence);
    else cJSON_AddNullToObject(dl, "stop_sequence");
    cJSON_AddItemToObject(j, "delta", dl);
    cJSON_AddItemToObject(j, "usage", u); /* cumulative: the whole usage again */
    if (put_event(s, j)) return -1;
    return put_event(s, ev("message_stop"));
}

static char *ant_error_json(const api_error *e);

/* An error after the stream began: its error event (the stream ends with it). */
static int ant_stream_error(api_stream *s, const api_error *e) {
    char *body = ant_error_json(e);
    if (!body) return -1;
    int r = tok_buf_puts(&s->out, "event: error\ndata: ") | tok_buf_puts(&s->out, body) | tok_buf_puts(&s->out, "\n\n");
    free(body);
    return r ? -1 : 0;
}

/* ---- errors and models ------------------------------------------------------------------------- */

static const char *ant_error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

static char *ant_error_json(const api_error *e) {
    cJSON *root = cJSON_CreateObject(), *err = cJSON_CreateObject();
    if (!root || !err) {
        cJSON_Delete(root);
        cJSON_Delete(err);
        return NULL;
    }
    cJSON_AddStringToObject(root, "type", "error");
    cJSON_AddItemToObject(root, "error", err);
    cJSON_AddStringToObject(err, "type", ant_error_type(e->status));
    cJSON_AddItemToObject(err, "message", api_error_message(e));
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}

static cJSON *model_object(const api_model_info *m) {
    char when[32];
    time_t t = (time_t)m->created;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "type", "model");
    cJSON_AddStringToObject(j, "id", m->name);
    cJSON_AddStringToObject(j, "display_name", m->name);
    cJSON_AddStringToObject(j, "created_at", when);
    cJSON_AddNumberToObject(j, "context_length", m->n_ctx);
    return j;
}

static char *print_delete(cJSON *j) {
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    return s;
}

static char *ant_model_json(const api_model_info *m) { return print_delete(model_object(m)); }

static char *ant_models_json(const api_model_info *m, int n) {
    cJSON *j = cJSON_CreateObject(), *d = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(d, model_object(&m[i]));
    cJSON_AddItemToObject(j, "data", d);
    cJSON_AddFalseToObject(j, "has_more");
    cJSON_AddStringToObject(j, "first_id", m[0].name);
    cJSON_AddStringToObject(j, "last_id", m[n - 1].name);
    return print_delete(j);
}

/* ---- the dialect ------------------------------------------------------------------------------- */

const api_dialect api_anthropic_messages = {
    .name = "messages",
    .kind = API_MESSAGES,
    .id_prefix = "msg_",
    .chat = 1,
    .prompt_param = "messages",
    .parse = ant_parse_messages,
    .response = ant_message_response,
    .stream_begin = ant_stream_begin,
    .stream_piece = ant_stream_piece,
    .stream_end = ant_stream_end,
    .stream_error = ant_stream_error,
    .error_json = ant_error_json,
    .error_type = ant_error_type,
    .models_json = ant_models_json,
    .model_json = ant_model_json,
};
