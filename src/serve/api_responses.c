/*
 * api_responses.c — the OpenAI Responses API's dialect (api.h): POST /v1/responses bodies parsed into
 * an api_gen, and the "response" object, whole or streamed as its typed events (response.created,
 * response.in_progress, response.output_item.added / .done, response.content_part.added / .done,
 * response.output_text.delta / .done, response.reasoning_text.delta / .done,
 * response.function_call_arguments.delta / .done, and response.completed, or response.incomplete when
 * max_output_tokens cut the answer), each with its sequence_number. Errors and models are OpenAI's.
 *
 * Mapping: instructions -> a system message first; input a string -> one user message, or items:
 * messages (role user / system / developer / assistant; content a string or input_text / output_text
 * parts), function_call items -> the assistant's tool_calls (consecutive ones in one message),
 * function_call_output -> "tool" messages, reasoning items (dropped: the template re-renders
 * thinking itself). tools [{"type": "function", "name", "description", "parameters"}] -> the
 * template's OpenAI chat form; tool_choice and text.format -> structured outputs (constrain.c);
 * max_output_tokens; reasoning.effort "none" / "minimal" -> no thinking. Answers: reasoning -> a
 * reasoning item, content -> a message item with one output_text part, each tool call -> a
 * function_call item. previous_response_id (the server keeps no responses) and tools of other types
 * are 400.
 *
 * Sections: requests; responses; streams; the dialect.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/api.h"

/* ---- requests ---------------------------------------------------------------------------------- */

typedef struct {
    api_gen *g;
    sl_chat_msg *v;
    int n, cap;
    cJSON *calls; /* the tool calls of the last message, while function_call items follow */
} item_list;

/* The last message's tool calls become its tool_calls text. 0 or -1. */
static int flush_calls(item_list *l) {
    if (!l->calls) return 0;
    l->v[l->n - 1].tool_calls = api_gen_own(l->g, cJSON_PrintUnformatted(l->calls));
    cJSON_Delete(l->calls);
    l->calls = NULL;
    return l->v[l->n - 1].tool_calls ? 0 : -1;
}

static sl_chat_msg *add_msg(item_list *l, const char *role) {
    return flush_calls(l) ? NULL : api_msg_push(&l->v, &l->n, &l->cap, role);
}

/* An input_text / output_text / text part. */
static int input_text_part(const cJSON *x, const char *param, int i, api_error *e) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(x, "type"), *s = cJSON_GetObjectItemCaseSensitive(x, "text");
    const char *ty = cJSON_IsString(t) ? t->valuestring : "";
    if ((strcmp(ty, "input_text") && strcmp(ty, "output_text") && strcmp(ty, "text")) || !cJSON_IsString(s))
        return api_fail(e, 400, param, "unsupported_content", "%s[%d]: content of type '%.40s' is not supported (only text)", param, i, ty);
    return 0;
}

/* A message's content: a string, or an array of input_text / output_text / text parts (joined). */
static int parts_text(api_gen *g, const cJSON *c, const char *param, const char **out, api_error *e) {
    if (cJSON_IsString(c)) { *out = c->valuestring; return 0; }
    if (!cJSON_IsArray(c)) return api_fail(e, 400, param, "invalid_type", "'%s' must be a string or an array of parts", param);
    return api_join_parts(g, c, param, input_text_part, 1, out, e);
}

/* A function_call item: one more call of the assistant message that ends the list (a new one when the
 * last message is not the assistant's). */
static int call_item(item_list *l, const cJSON *x, const char *param, api_error *e) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(x, "name"), *args = cJSON_GetObjectItemCaseSensitive(x, "arguments");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(x, "call_id");
    if (!cJSON_IsString(name) || !cJSON_IsString(args))
        return api_fail(e, 400, param, "invalid_value", "'%s' (function_call) needs a name and arguments (a string)", param);
    if (!(l->n && !strcmp(l->v[l->n - 1].role, "assistant") && (l->calls || !l->v[l->n - 1].tool_calls)) &&
        !add_msg(l, "assistant"))
        return api_fail(e, 500, NULL, NULL, "out of memory");
    if (!l->calls && !(l->calls = cJSON_CreateArray())) return api_fail(e, 500, NULL, NULL, "out of memory");
    cJSON *c = cJSON_CreateObject(), *f = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "id", cJSON_IsString(id) ? id->valuestring : "");
    cJSON_AddStringToObject(c, "type", "function");
    cJSON_AddStringToObject(f, "name", name->valuestring);
    cJSON_AddStringToObject(f, "arguments", args->valuestring);
    cJSON_AddItemToObject(c, "function", f);
    cJSON_AddItemToArray(l->calls, c);
    return 0;
}

/* One input item into l. */
static int input_item(item_list *l, const cJSON *x, int i, api_error *e) {
    char param[48];
    snprintf(param, sizeof param, "input[%d]", i);
    if (!cJSON_IsObject(x)) return api_fail(e, 400, param, "invalid_type", "'%s' must be an object", param);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(x, "type"), *role = cJSON_GetObjectItemCaseSensitive(x, "role");
    const char *type = cJSON_IsString(t) ? t->valuestring : "message";
    if (!strcmp(type, "function_call")) return call_item(l, x, param, e);
    if (!strcmp(type, "reasoning")) return 0;
    sl_chat_msg *m;
    if (!strcmp(type, "function_call_output")) {
        if (!(m = add_msg(l, "tool"))) return api_fail(e, 500, NULL, NULL, "out of memory");
        return parts_text(l->g, cJSON_GetObjectItemCaseSensitive(x, "output"), param, &m->content, e);
    }
    if (strcmp(type, "message"))
        return api_fail(e, 400, param, "unsupported_parameter", "input items of type '%.40s' are not supported", type);
    const char *r = cJSON_IsString(role) ? role->valuestring : "";
    if (!strcmp(r, "developer")) r = "system";
    if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))
        return api_fail(e, 400, param, "invalid_value", "'%s.role' must be user, system, developer or assistant", param);
    if (!(m = add_msg(l, r))) return api_fail(e, 500, NULL, NULL, "out of memory");
    char cp[64];
    snprintf(cp, sizeof cp, "%s.content", param);
    return parts_text(l->g, cJSON_GetObjectItemCaseSensitive(x, "content"), cp, &m->content, e);
}

/* instructions and input into g->msgs. */
static int input_messages(api_gen *g, const cJSON *root, api_error *e) {
    item_list l = {g, NULL, 0, 0, NULL};
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(root, "instructions"), *in = cJSON_GetObjectItemCaseSensitive(root, "input");
    int r = 0;
    if (ins && !cJSON_IsNull(ins)) {
        sl_chat_msg *m = add_msg(&l, "system");
        if (!m) r = api_fail(e, 500, NULL, NULL, "out of memory");
        else if (!cJSON_IsString(ins)) r = api_fail(e, 400, "instructions", "invalid_type", "'instructions' must be a string");
        else m->content = ins->valuestring;
    }
    if (!r && cJSON_IsString(in)) {
        sl_chat_msg *m = add_msg(&l, "user");
        if (!m) r = api_fail(e, 500, NULL, NULL, "out of memory");
        else m->content = in->valuestring;
    } else if (!r && cJSON_IsArray(in)) {
        int i = 0;
        for (const cJSON *x = in->child; x && !r; x = x->next, i++) r = input_item(&l, x, i, e);
    } else if (!r) r = api_fail(e, 400, "input", in ? "invalid_type" : "missing_required_parameter", "'input' must be a string or an array of items");
    if (!r && flush_calls(&l)) r = api_fail(e, 500, NULL, NULL, "out of memory");
    cJSON_Delete(l.calls);
    g->msgs = l.v;
    g->n_msgs = l.n;
    if (!r && (l.n == 0 || (l.n == 1 && ins && !cJSON_IsNull(ins))))
        r = api_fail(e, 400, "input", "invalid_value", "'input' must not be empty");
    return r;
}

/* tools (function tools into the chat form) and tool_choice. */
static int resp_tools(api_gen *g, const cJSON *root, api_error *e) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tools"), *choice = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    if (cJSON_IsString(choice) && !strcmp(choice->valuestring, "none")) return 0;
    if (!t || cJSON_IsNull(t) || !cJSON_GetArraySize(t)) {
        if (cJSON_IsObject(choice) || (cJSON_IsString(choice) && !strcmp(choice->valuestring, "required")))
            return api_fail(e, 400, "tool_choice", "invalid_value", "'tool_choice' forces a tool call, but there are no tools");
        return 0;
    }
    if (!cJSON_IsArray(t)) return api_fail(e, 400, "tools", "invalid_type", "'tools' must be an array");
    cJSON *out = cJSON_CreateArray();
    int i = 0, r = 0;
    for (const cJSON *x = t->child; x && !r; x = x->next, i++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(x, "type"), *name = cJSON_GetObjectItemCaseSensitive(x, "name");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name)) {
            r = api_fail(e, 400, "tools", "unsupported_parameter", "tools[%d]: only {\"type\": \"function\", \"name\", ...} tools are supported", i);
            break;
        }
        cJSON *f = cJSON_Duplicate(x, 1), *w = cJSON_CreateObject();
        cJSON_DeleteItemFromObjectCaseSensitive(f, "type");
        cJSON_DeleteItemFromObjectCaseSensitive(f, "strict");
        cJSON_AddStringToObject(w, "type", "function");
        cJSON_AddItemToObject(w, "function", f);
        cJSON_AddItemToArray(out, w);
    }
    if (!r && !(g->tools = api_gen_own(g, cJSON_PrintUnformatted(out)))) r = api_fail(e, 500, NULL, NULL, "out of memory");
    cJSON_Delete(out);
    if (r || !choice || cJSON_IsNull(choice) || (cJSON_IsString(choice) && !strcmp(choice->valuestring, "auto"))) return r;
    if (cJSON_IsString(choice) && !strcmp(choice->valuestring, "required")) return api_tool_grammar(g, NULL, "tool_choice", e);
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(choice, "name");
    if (!cJSON_IsString(nm))
        return api_fail(e, 400, "tool_choice", "invalid_value", "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"name\"}");
    return api_tool_grammar(g, nm->valuestring, "tool_choice", e);
}

/* text.format: text, json_object, or json_schema {"name", "schema", "strict"} (flat, unlike chat's). */
static int text_format(api_gen *g, const cJSON *root, api_error *e) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "text"), "format");
    if (!f || cJSON_IsNull(f)) return 0;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(f, "type");
    const char *type = cJSON_IsString(t) ? t->valuestring : "";
    if (!strcmp(type, "text")) return 0;
    if (g->grammar) return api_fail(e, 400, "text.format", "invalid_value", "a forced tool call and a JSON text.format cannot be combined");
    if (!strcmp(type, "json_object")) return api_json_grammar(g, NULL, "text.format", e);
    if (strcmp(type, "json_schema"))
        return api_fail(e, 400, "text.format.type", "invalid_value", "text.format '%.40s' is not supported (text, json_object, json_schema)", type);
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(f, "schema");
    if (schema && !cJSON_IsObject(schema) && !cJSON_IsBool(schema))
        return api_fail(e, 400, "text.format.schema", "invalid_type", "the schema must be an object");
    return api_json_grammar(g, schema, "text.format.schema", e);
}

int resp_parse(const char *body, size_t len, api_gen *g, api_error *e) {
    memset(g, 0, sizeof *g);
    g->kind = API_RESPONSES;
    cJSON *root = api_parse_root(g, body, len, e);
    if (!root || api_common(g, root, "stop", e)) return -1;
    long long mt = 0;
    if (api_int(root, "max_output_tokens", 1, 1e9, &mt, e) < 0) return -1;
    g->max_tokens = (int)mt;
    const cJSON *prev = cJSON_GetObjectItemCaseSensitive(root, "previous_response_id");
    if (prev && !cJSON_IsNull(prev)) /* the server puts the kept conversation in input first (gen.c resp_splice) */
        return api_fail(e, 400, "previous_response_id", "unsupported_parameter",
                        "previous_response_id is resolved by the server, not by the parser");
    if (input_messages(g, root, e) || resp_tools(g, root, e) || text_format(g, root, e)) return -1;
    const cJSON *effort = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "reasoning"), "effort");
    if (cJSON_IsString(effort)) g->enable_thinking = strcmp(effort->valuestring, "none") && strcmp(effort->valuestring, "minimal");
    if (g->grammar) g->enable_thinking = 0;
    return 0;
}

/* ---- responses --------------------------------------------------------------------------------- */

/* The response object's fields, status as given, output empty, usage null. */
static cJSON *resp_head(const api_meta *m, const char *status) {
    cJSON *j = cJSON_CreateObject(), *text = cJSON_CreateObject(), *fmt = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", m->id);
    cJSON_AddStringToObject(j, "object", "response");
    cJSON_AddNumberToObject(j, "created_at", (double)m->created);
    cJSON_AddStringToObject(j, "status", status);
    cJSON_AddNullToObject(j, "error");
    cJSON_AddNullToObject(j, "incomplete_details");
    cJSON_AddNullToObject(j, "instructions");
    cJSON_AddNullToObject(j, "max_output_tokens");
    cJSON_AddItemToObject(j, "metadata", cJSON_CreateObject());
    cJSON_AddStringToObject(j, "model", m->model);
    cJSON_AddItemToObject(j, "output", cJSON_CreateArray());
    cJSON_AddTrueToObject(j, "parallel_tool_calls");
    cJSON_AddNullToObject(j, "temperature");
    cJSON_AddStringToObject(j, "tool_choice", "auto");
    cJSON_AddItemToObject(j, "tools", cJSON_CreateArray());
    cJSON_AddNullToObject(j, "top_p");
    cJSON_AddStringToObject(fmt, "type", "text");
    cJSON_AddItemToObject(text, "format", fmt);
    cJSON_AddItemToObject(j, "text", text);
    cJSON_AddNullToObject(j, "usage");
    return j;
}

/* Status, incomplete_details, output (taken) and usage of an ended answer. */
static void resp_finish(cJSON *j, const api_done *d, cJSON *output) {
    int cut = d->stop == SL_STOP_LENGTH;
    cJSON_ReplaceItemInObjectCaseSensitive(j, "status", cJSON_CreateString(cut ? "incomplete" : "completed"));
    if (cut) {
        cJSON *inc = cJSON_CreateObject();
        cJSON_AddStringToObject(inc, "reason", "max_output_tokens");
        cJSON_ReplaceItemInObjectCaseSensitive(j, "incomplete_details", inc);
    }
    cJSON_ReplaceItemInObjectCaseSensitive(j, "output", output);
    cJSON *u = cJSON_CreateObject(), *in = cJSON_CreateObject(), *out = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", d->n_prompt);
    cJSON_AddNumberToObject(in, "cached_tokens", d->n_reused);
    cJSON_AddItemToObject(u, "input_tokens_details", in);
    cJSON_AddNumberToObject(u, "output_tokens", d->n_generated);
    cJSON_AddNumberToObject(out, "reasoning_tokens", d->n_thinking);
    cJSON_AddItemToObject(u, "output_tokens_details", out);
    cJSON_AddNumberToObject(u, "total_tokens", d->n_prompt + d->n_generated);
    cJSON_ReplaceItemInObjectCaseSensitive(j, "usage", u);
}

static cJSON *text_part(const char *text, size_t len) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "output_text");
    cJSON_AddItemToObject(p, "text", api_text(text, len));
    cJSON_AddItemToObject(p, "annotations", cJSON_CreateArray());
    cJSON_AddItemToObject(p, "logprobs", cJSON_CreateArray());
    return p;
}

/* An output item: a message (its one output_text part, none while in progress) or a reasoning item. */
static cJSON *text_item(out_kind kind, const char *id, const char *text, size_t len, int done) {
    cJSON *j = cJSON_CreateObject(), *content = cJSON_CreateArray();
    cJSON_AddStringToObject(j, "type", kind == OUT_REASONING ? "reasoning" : "message");
    cJSON_AddStringToObject(j, "id", id);
    if (kind == OUT_REASONING) {
        cJSON_AddItemToObject(j, "summary", cJSON_CreateArray());
        if (done) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "type", "reasoning_text");
            cJSON_AddItemToObject(p, "text", api_text(text, len));
            cJSON_AddItemToArray(content, p);
        }
    } else {
        cJSON_AddStringToObject(j, "status", done ? "completed" : "in_progress");
        cJSON_AddStringToObject(j, "role", "assistant");
        if (done) cJSON_AddItemToArray(content, text_part(text, len));
    }
    cJSON_AddItemToObject(j, "content", content);
    return j;
}

static cJSON *call_item_json(const char *id, const char *call_id, const char *name, const char *args, int done) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "type", "function_call");
    cJSON_AddStringToObject(j, "id", id);
    cJSON_AddStringToObject(j, "call_id", call_id);
    cJSON_AddStringToObject(j, "name", name);
    cJSON_AddStringToObject(j, "arguments", done ? args : "");
    cJSON_AddStringToObject(j, "status", done ? "completed" : "in_progress");
    return j;
}

static char *resp_response(const api_meta *m, const api_result *r, const api_done *d) {
    cJSON *j = resp_head(m, "completed"), *output = cJSON_CreateArray();
    char id[48];
    if (r->reasoning.n) {
        api_new_id(id, sizeof id, "rs_");
        cJSON_AddItemToArray(output, text_item(OUT_REASONING, id, r->reasoning.p, r->reasoning.n, 1));
    }
    if (r->content.n || !r->n_calls) {
        api_new_id(id, sizeof id, "msg_");
        cJSON_AddItemToArray(output, text_item(OUT_CONTENT, id, r->content.p, r->content.n, 1));
    }
    for (int i = 0; i < r->n_calls; i++) {
        api_new_id(id, sizeof id, "fc_");
        cJSON_AddItemToArray(output, call_item_json(id, r->calls[i].id, r->calls[i].name, r->calls[i].arguments, 1));
    }
    resp_finish(j, d, output);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

/* ---- streams ----------------------------------------------------------------------------------- */

/* One event: j gets its type and sequence number. */
static int put(api_stream *s, const char *type, cJSON *j) {
    if (!j) return -1;
    cJSON_AddStringToObject(j, "type", type);
    cJSON_AddNumberToObject(j, "sequence_number", s->seq++);
    return api_sse(&s->out, type, j);
}

/* {"output_index": the open item, "item_id": its id} */
static cJSON *at_item(const api_stream *s, int content) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "item_id", s->item_id);
    cJSON_AddNumberToObject(j, "output_index", s->block);
    if (content) cJSON_AddNumberToObject(j, "content_index", 0);
    return j;
}

static int item_event(api_stream *s, const char *type, cJSON *item) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "output_index", s->block);
    cJSON_AddItemToObject(j, "item", item);
    return put(s, type, j);
}

static int resp_stream_begin(api_stream *s) {
    if (!s->items && !(s->items = cJSON_CreateArray())) return -1;
    cJSON *a = cJSON_CreateObject(), *b = cJSON_CreateObject();
    cJSON_AddItemToObject(a, "response", resp_head(&s->meta, "in_progress"));
    cJSON_AddItemToObject(b, "response", resp_head(&s->meta, "in_progress"));
    return put(s, "response.created", a) || put(s, "response.in_progress", b) ? -1 : 0;
}

/* Opens a message (with its output_text part) or a reasoning item. */
static int item_open(api_stream *s, out_kind kind) {
    api_new_id(s->item_id, sizeof s->item_id, kind == OUT_REASONING ? "rs_" : "msg_");
    s->block = s->n_blocks++;
    s->block_kind = (int)kind;
    s->acc.n = 0;
    if (item_event(s, "response.output_item.added", text_item(kind, s->item_id, "", 0, 0))) return -1;
    if (kind == OUT_REASONING) return 0;
    cJSON *j = at_item(s, 1);
    cJSON_AddItemToObject(j, "part", text_part("", 0));
    return put(s, "response.content_part.added", j);
}

/* Closes the open item, if any: its .done events, and the item kept for the final response. */
static int item_close(api_stream *s) {
    if (s->block < 0) return 0;
    const char *text = s->acc.p ? s->acc.p : "";
    out_kind kind = (out_kind)s->block_kind;
    cJSON *j = at_item(s, 1);
    cJSON_AddItemToObject(j, "text", api_text(text, s->acc.n));
    if (put(s, kind == OUT_REASONING ? "response.reasoning_text.done" : "response.output_text.done", j)) return -1;
    if (kind != OUT_REASONING) {
        j = at_item(s, 1);
        cJSON_AddItemToObject(j, "part", text_part(text, s->acc.n));
        if (put(s, "response.content_part.done", j)) return -1;
    }
    cJSON_AddItemToArray(s->items, text_item(kind, s->item_id, text, s->acc.n, 1));
    int r = item_event(s, "response.output_item.done", text_item(kind, s->item_id, text, s->acc.n, 1));
    s->block = -1;
    return r;
}

static int call_events(api_stream *s, const out_call *call) {
    char call_id[40];
    api_new_id(s->item_id, sizeof s->item_id, "fc_");
    api_new_id(call_id, sizeof call_id, "call_");
    s->block = s->n_blocks++;
    s->n_calls++;
    if (item_event(s, "response.output_item.added", call_item_json(s->item_id, call_id, call->name, "", 0))) return -1;
    cJSON *j = at_item(s, 0);
    cJSON_AddStringToObject(j, "delta", call->arguments);
    if (put(s, "response.function_call_arguments.delta", j)) return -1;
    j = at_item(s, 0);
    cJSON_AddStringToObject(j, "arguments", call->arguments);
    if (put(s, "response.function_call_arguments.done", j)) return -1;
    cJSON_AddItemToArray(s->items, call_item_json(s->item_id, call_id, call->name, call->arguments, 1));
    int r = item_event(s, "response.output_item.done", call_item_json(s->item_id, call_id, call->name, call->arguments, 1));
    s->block = -1;
    return r;
}

static int resp_stream_piece(api_stream *s, out_kind kind, const char *text, size_t len, const out_call *call) {
    if (kind == OUT_TOOL_CALL) return item_close(s) || call_events(s, call) ? -1 : 0;
    if ((s->block < 0 || s->block_kind != (int)kind) && (item_close(s) || item_open(s, kind))) return -1;
    if (tok_buf_put(&s->acc, text, len)) return -1;
    cJSON *j = at_item(s, 1);
    cJSON_AddItemToObject(j, "delta", api_text(text, len));
    if (kind == OUT_REASONING) return put(s, "response.reasoning_text.delta", j);
    cJSON_AddItemToObject(j, "logprobs", cJSON_CreateArray());
    return put(s, "response.output_text.delta", j);
}

static int resp_stream_end(api_stream *s, const api_done *d) {
    if (item_close(s)) return -1;
    if (s->n_blocks == 0 && (item_open(s, OUT_CONTENT) || item_close(s))) return -1; /* an empty message, as whole */
    cJSON *r = resp_head(&s->meta, "completed"), *j = cJSON_CreateObject();
    resp_finish(r, d, s->items);
    s->items = NULL;
    free(s->output);
    s->output = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(r, "output"));
    cJSON_AddItemToObject(j, "response", r);
    return put(s, d->stop == SL_STOP_LENGTH ? "response.incomplete" : "response.completed", j);
}

/* An error after the stream began: an error event, then response.failed. */
static int resp_stream_error(api_stream *s, const api_error *e) {
    cJSON *j = cJSON_CreateObject(), *r = resp_head(&s->meta, "failed"), *err = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "code", e->code[0] ? e->code : oai_error_type(e->status));
    cJSON_AddItemToObject(j, "message", api_error_message(e));
    if (e->param[0]) cJSON_AddStringToObject(j, "param", e->param);
    else cJSON_AddNullToObject(j, "param");
    if (put(s, "error", j)) return -1;
    cJSON_AddStringToObject(err, "code", e->status >= 500 ? "server_error" : "invalid_prompt");
    cJSON_AddItemToObject(err, "message", api_error_message(e));
    cJSON_ReplaceItemInObjectCaseSensitive(r, "error", err);
    j = cJSON_CreateObject();
    cJSON_AddItemToObject(j, "response", r);
    return put(s, "response.failed", j);
}

/* ---- the dialect ------------------------------------------------------------------------------- */

const api_dialect api_openai_responses = {
    .name = "responses",
    .kind = API_RESPONSES,
    .id_prefix = "resp_",
    .chat = 1,
    .prompt_param = "input",
    .parse = resp_parse,
    .response = resp_response,
    .stream_begin = resp_stream_begin,
    .stream_piece = resp_stream_piece,
    .stream_end = resp_stream_end,
    .stream_error = resp_stream_error,
    .error_json = oai_error_json,
    .error_type = oai_error_type,
    .models_json = oai_models_json,
    .model_json = oai_model_json,
};
