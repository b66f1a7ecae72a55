/*
 * constrain.c — the grammars of structured outputs (api.h): a request's JSON Schema (OpenAI
 * response_format json_schema / json_object, Anthropic output_config.format / output_format) or its
 * forced tool call (OpenAI tool_choice "required" or a named function, Anthropic tool_choice "any" or
 * "tool"), or, under tool_choice auto with a strict tool, free text that may end in valid calls;
 * compiled when the request is parsed, so an unsupported schema is a 400 before anything runs.
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

/* One alternative of rule root: open then {"name": NAME, "arguments": ARGS}\n</tool_call> (open:
 * "<tool_call>\n", or "\n" after a "<tool_call>" the rule's caller matched), ARGS of the tool's
 * parameters, or any object when loose. 0 or -1. */
static int call_alt(gr_builder *b, int root, const cJSON *f, const char *open, int loose, sl_error *err) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(f, "parameters");
    cJSON *any = NULL, *nm = cJSON_CreateString(name->valuestring);
    char *quoted = nm ? cJSON_PrintUnformatted(nm) : NULL;
    cJSON_Delete(nm);
    if (!params || cJSON_IsNull(params) || loose) {
        any = cJSON_CreateObject();
        if (any) cJSON_AddStringToObject(any, "type", "object");
        params = any;
    }
    int args = quoted && params ? js_schema_rule(b, params, err) : -1;
    if (!quoted || !params) err->status = SL_ENOMEM, snprintf(err->msg, sizeof err->msg, "out of memory");
    cJSON_Delete(any);
    if (args >= 0) {
        gr_alt(b, root);
        gr_lit(b, root, open);
        gr_lit(b, root, "{\"name\": ");
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
        if (call_alt(b, root, f, "<tool_call>\n", 0, &err)) {
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

/* Free text up to an optional "<tool_call>" (W), by the states S[k] "the text so far ends with W's
 * first k bytes" (W has no border: a mismatch goes back to S[1] on '<', else S[0]); the byte that
 * completes W goes on to after. The text may end in any state. */
static int text_until_call(gr_builder *b, int after) {
    static const char w[] = "<tool_call>";
    enum { N = sizeof w - 1 };
    int s[N];
    for (int k = 0; k < N; k++) s[k] = gr_rule(b);
    for (int k = 0; k < N; k++) {
        uint32_t other[8] = {0};
        for (int c = 0x20; c < 0x100; c++) other[c >> 5] |= 1u << (c & 31);
        other['\t' >> 5] |= 1u << '\t', other['\n' >> 5] |= 1u << '\n', other['\r' >> 5] |= 1u << '\r';
        other['<' >> 5] &= ~(1u << ('<' & 31));
        other[(uint8_t)w[k] >> 5] &= ~(1u << (w[k] & 31));
        gr_alt(b, s[k]); /* the text ends here */
        gr_alt(b, s[k]);
        gr_set(b, s[k], other);
        gr_ref(b, s[k], s[0]);
        gr_alt(b, s[k]);
        gr_litn(b, s[k], &w[k], 1);
        gr_ref(b, s[k], k + 1 < N ? s[k + 1] : after);
        if (k) {
            gr_alt(b, s[k]);
            gr_lit(b, s[k], "<");
            gr_ref(b, s[k], s[1]);
        }
    }
    return s[0];
}

int api_tool_auto_grammar(api_gen *g, const char *param, api_error *e) {
    cJSON *tools = g->tools && !g->grammar ? cJSON_Parse(g->tools) : NULL;
    int strict = 0;
    for (const cJSON *t = tools ? tools->child : NULL; t; t = t->next)
        strict |= cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "strict"));
    if (!strict) {
        cJSON_Delete(tools);
        return 0;
    }
    gr_builder *b = gr_builder_new();
    int one = b ? gr_rule(b) : -1, more = b ? gr_rule(b) : -1, calls = b ? gr_rule(b) : -1, i = 0;
    sl_error err = {0};
    if (calls < 0) err.status = SL_ENOMEM, snprintf(err.msg, sizeof err.msg, "out of memory");
    for (const cJSON *t = tools->child; t && calls >= 0; t = t->next, i++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (call_alt(b, one, f, "\n", !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(f, "strict")), &err)) {
            if (err.status != SL_ENOMEM) {
                char msg[640];
                snprintf(msg, sizeof msg, "%.600s", err.msg);
                snprintf(err.msg, sizeof err.msg, "tools[%d] (%.64s): %s", i, cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring, msg);
            }
            calls = -1;
        }
    }
    cJSON_Delete(tools);
    int root = -1;
    if (calls >= 0) { /* calls ::= one call, then more: nothing, or "\n<tool_call>" and calls again */
        gr_ref(b, calls, one);
        gr_ref(b, calls, more);
        gr_alt(b, more);
        gr_alt(b, more);
        gr_lit(b, more, "\n<tool_call>");
        gr_ref(b, more, calls);
        root = text_until_call(b, calls);
    }
    int r = finish(g, b, root, param, &err, e);
    gr_builder_free(b);
    return r;
}
