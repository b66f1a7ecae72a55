/*
 * constrain.c — the grammars of structured outputs (api.h): a request's JSON Schema (OpenAI
 * response_format json_schema / json_object, Anthropic output_config.format / output_format) or its
 * forced tool call (OpenAI tool_choice "required" or a named function, Anthropic tool_choice "any" or
 * "tool"), compiled when the request is parsed, so an unsupported schema is a 400 before anything runs.
 * The scheduler masks the sampler's logits with it (sched.h), so the answer always parses and
 * validates, unless max_tokens or a stop string cuts it first.
 *
 * A forced call is generated in the <tool_call>{"name": ..., "arguments": ...}</tool_call> form of
 * Qwen's templates, which the answer parser (output.c) reads for every model. Constrained answers
 * are generated without thinking (the template's enable_thinking off): the grammar covers the whole
 * answer.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/api.h"
#include "text/json_schema.h"

/* Compiles rule root of b into g->grammar; thinking off. 0 or -1 with e. */
static int finish(api_gen *g, gr_builder *b, int root, const char *param, const sl_error *why, api_error *e) {
    sl_error err = {0};
    if (root < 0) {
        int oom = why->status == SL_ENOMEM;
        return api_fail(e, oom ? 500 : 400, oom ? NULL : param, oom ? NULL : "invalid_schema", "%s", why->msg);
    }
    sl_status st = gr_compile(b, root, &g->grammar, &err);
    if (st) return api_fail(e, st == SL_ENOMEM ? 500 : 400, param, NULL, "%s", err.msg);
    g->enable_thinking = 0;
    return 0;
}

int api_json_grammar(api_gen *g, const cJSON *schema, const char *param, api_error *e) {
    cJSON *any = schema ? NULL : cJSON_CreateObject();
    if (!schema && (!any || !cJSON_AddStringToObject(any, "type", "object"))) {
        cJSON_Delete(any);
        return api_fail(e, 500, NULL, NULL, "out of memory");
    }
    gr_builder *b = gr_builder_new();
    if (!b) {
        cJSON_Delete(any);
        return api_fail(e, 500, NULL, NULL, "out of memory");
    }
    sl_error err = {0};
    int root = js_schema_rule(b, schema ? schema : any, &err);
    int r = finish(g, b, root, param, &err, e);
    gr_builder_free(b);
    cJSON_Delete(any);
    return r;
}

/* One alternative of rule root: <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>. 0 or -1. */
static int call_alt(gr_builder *b, int root, const cJSON *f, sl_error *err) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(f, "parameters");
    cJSON *any = NULL, *nm = cJSON_CreateString(name->valuestring);
    char *quoted = nm ? cJSON_PrintUnformatted(nm) : NULL;
    cJSON_Delete(nm);
    if (!params || cJSON_IsNull(params)) {
        any = cJSON_CreateObject();
        if (any) cJSON_AddStringToObject(any, "type", "object");
        params = any;
    }
    int args = quoted && params ? js_schema_rule(b, params, err) : -1;
    if (!quoted || !params) err->status = SL_ENOMEM, snprintf(err->msg, sizeof err->msg, "out of memory");
    cJSON_Delete(any);
    if (args >= 0) {
        gr_alt(b, root);
        gr_lit(b, root, "<tool_call>\n{\"name\": ");
        gr_lit(b, root, quoted);
        gr_lit(b, root, ", \"arguments\": ");
        gr_ref(b, root, args);
        gr_lit(b, root, "}\n</tool_call>");
    }
    free(quoted);
    return args < 0 ? -1 : 0;
}

int api_tool_grammar(api_gen *g, const char *name, const char *param, api_error *e) {
    cJSON *tools = g->tools ? cJSON_Parse(g->tools) : NULL;
    if (!tools) return api_fail(e, 400, param, "invalid_value", "a tool call is required, but there are no tools");
    gr_builder *b = gr_builder_new();
    int root = b ? gr_rule(b) : -1, n = 0, i = 0;
    sl_error err = {0};
    if (root < 0) err.status = SL_ENOMEM, snprintf(err.msg, sizeof err.msg, "out of memory");
    for (const cJSON *t = tools->child; t && root >= 0; t = t->next, i++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (name && strcmp(nm->valuestring, name)) continue;
        n++;
        if (call_alt(b, root, f, &err)) {
            if (err.status != SL_ENOMEM) {
                char msg[640];
                snprintf(msg, sizeof msg, "%.600s", err.msg);
                snprintf(err.msg, sizeof err.msg, "tools[%d] (%.64s): %s", i, nm->valuestring, msg);
            }
            root = -1;
        }
    }
    cJSON_Delete(tools);
    int r;
    if (root >= 0 && !n) r = api_fail(e, 400, param, "invalid_value", "tool_choice names '%.64s', which is not among the tools", name);
    else r = finish(g, b, root, "tools", &err, e);
    gr_builder_free(b);
    return r;
}
