/*
 * chat_dsv4.c — the DeepSeek-V4 chat template, rendered statement by statement as chat.c renders Qwen's (no
 * Jinja interpreter: docs/TEXT.md). The template is llama.cpp's models/templates/deepseek-ai-DeepSeek-V4.jinja,
 * which its conversion/deepseek.py writes into every DeepSeek-V4 GGUF (the -Flash-0731 one differs only in a
 * reasoning_effort 'high' line; sluice passes no reasoning_effort, so both render the same). What it does:
 *   bos_token, then the system prompt: every system message's content joined by "\n\n" (wherever it stands), then
 *   the tools block (a header, each function's tojson on its own line, a footer) when tools are given;
 *   user turns "<｜User｜>" + content, consecutive user / tool turns joined by "\n\n", a tool turn as
 *   "<tool_result>" + content + "</tool_result>";
 *   assistant turns "<｜Assistant｜>" + "<think>" reasoning "</think>" (thinking on, and the turn after the last
 *   user / tool turn, or tools given, or any tool turn present) or just "</think>", the content, the tool calls as
 *   a DSML block, "<｜end▁of▁sentence｜>";
 *   the generation prompt "<｜Assistant｜>" + "<think>" (thinking on) or "</think>" (off: the template's default).
 * Message content is used verbatim (no <think> splitting: the template reads reasoning_content only).
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "util/err.h"

#define DSML "｜DSML｜"

static const char TOOLS_HEADER[] =
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
    "writing a \"<" DSML "tool_calls>\" block like the following:\n\n<" DSML "tool_calls>\n<" DSML
    "invoke name=\"$TOOL_NAME\">\n<" DSML "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">"
    "$PARAMETER_VALUE</" DSML "parameter>\n...\n</" DSML "invoke>\n<" DSML "invoke name=\"$TOOL_NAME2\">\n...\n</" DSML
    "invoke>\n</" DSML "tool_calls>\n\nString parameters should be specified as is and set `string=\"true\"`. For all "
    "other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
    "<think>...</think> BEFORE any tool calls or final response.\n\nOtherwise, output directly after </think> with "
    "tool calls or final response.\n\n### Available Tool Schemas\n\n";
static const char TOOLS_FOOTER[] =
    "\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

/* The template, recognised by what no other template has: DSML tool calls and <tool_result> turns. */
int chat_is_dsv4(const char *tmpl) {
    return strstr(tmpl, DSML) && strstr(tmpl, "<tool_result>") && strstr(tmpl, "<｜Assistant｜>");
}

/* The system prompt: the system messages' contents joined by "\n\n", then the tools block. Returns 0, 1 when out
 * of memory, or -1 with *st set (a malformed tools array). */
static int put_system(tok_buf *b, const sl_chat_msg *msgs, int n, const cJSON *tools, sl_error *err, sl_status *st) {
    int r = 0, first = 1;
    size_t at = b->n;
    for (int i = 0; i < n; i++) {
        if (strcmp(msgs[i].role, "system")) continue;
        if (!first) r |= tok_buf_puts(b, "\n\n");
        first = 0;
        r |= tok_buf_puts(b, msgs[i].content ? msgs[i].content : "");
    }
    if (!cJSON_GetArraySize(tools)) return r ? 1 : 0; /* `tools is defined and tools`: an empty list is false */
    if (b->n > at) r |= tok_buf_puts(b, "\n\n");     /* `if ns.system_prompt`: an empty prompt is false */
    r |= tok_buf_puts(b, TOOLS_HEADER);
    int i = 0;
    for (const cJSON *t = tools->child; t && !r; t = t->next, i++) {
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(t, "type"));
        if (!type || strcmp(type, "function")) continue; /* the template skips every other kind */
        const cJSON *f = cJSON_GetObjectItem(t, "function");
        if (!f) { *st = err_set(err, SL_EINVAL, "tools[%d] is a function without \"function\"", i); return -1; }
        r |= chat_json_dumps(b, f) | tok_buf_puts(b, "\n");
    }
    r |= tok_buf_puts(b, TOOLS_FOOTER);
    return r ? 1 : 0;
}

/* One call's DSML invoke block: string arguments as they are, the others as JSON. Returns 0, 1, or -1 (*st set). */
static int put_invoke(tok_buf *b, const cJSON *call, int i, sl_error *err, sl_status *st) {
    const cJSON *f = cJSON_GetObjectItem(call, "function");
    if (f && !cJSON_IsNull(f) && !cJSON_IsFalse(f)) call = f;
    const cJSON *name = cJSON_GetObjectItem(call, "name"), *args = cJSON_GetObjectItem(call, "arguments");
    cJSON *parsed = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : NULL; /* `args | from_json` */
    if (parsed) args = parsed;
    if (!cJSON_IsString(name) || !cJSON_IsObject(args)) {
        cJSON_Delete(parsed);
        *st = err_set(err, SL_EINVAL, "tool_calls[%d] needs a name and an object of arguments", i);
        return -1;
    }
    int r = tok_buf_puts(b, "<" DSML "invoke name=\"") | tok_buf_puts(b, name->valuestring) | tok_buf_puts(b, "\">\n");
    for (const cJSON *a = args->child; a; a = a->next) {
        int s = cJSON_IsString(a);
        r |= tok_buf_puts(b, "<" DSML "parameter name=\"") | tok_buf_puts(b, a->string) |
             tok_buf_puts(b, s ? "\" string=\"true\">" : "\" string=\"false\">");
        r |= s ? tok_buf_puts(b, a->valuestring) : chat_json_dumps(b, a);
        r |= tok_buf_puts(b, "</" DSML "parameter>\n");
    }
    if (!args->child) r |= tok_buf_puts(b, "\n");
    r |= tok_buf_puts(b, "</" DSML "invoke>\n");
    cJSON_Delete(parsed);
    return r ? 1 : 0;
}

/* Assistant turn m: its think block (keep) or "</think>", its content, its tool calls, the end of sentence. */
static int put_assistant(tok_buf *b, const sl_chat_msg *m, int keep, sl_error *err, sl_status *st) {
    int r = tok_buf_puts(b, "<｜Assistant｜>");
    if (keep) r |= tok_buf_puts(b, "<think>") | tok_buf_puts(b, m->reasoning ? m->reasoning : "");
    r |= tok_buf_puts(b, "</think>") | tok_buf_puts(b, m->content ? m->content : "");
    cJSON *calls = m->tool_calls ? cJSON_Parse(m->tool_calls) : NULL;
    if (m->tool_calls && !cJSON_IsArray(calls)) {
        cJSON_Delete(calls);
        *st = err_set(err, SL_EINVAL, "tool_calls must be a JSON array");
        return -1;
    }
    if (cJSON_GetArraySize(calls) > 0) {
        r |= tok_buf_puts(b, "\n\n<" DSML "tool_calls>\n");
        int i = 0, k = 0;
        for (const cJSON *c = calls->child; c && !k; c = c->next, i++) k = put_invoke(b, c, i, err, st);
        if (k < 0) { cJSON_Delete(calls); return -1; }
        r |= k | tok_buf_puts(b, "</" DSML "tool_calls>");
    }
    cJSON_Delete(calls);
    r |= tok_buf_puts(b, "<｜end▁of▁sentence｜>");
    return r ? 1 : 0;
}

sl_status chat_format_dsv4(const sl_tokenizer *tok, const sl_chat_msg *msgs, int n, const sl_chat_params *p,
                           char **out, sl_error *err) {
    tok_buf b = {0};
    sl_status st = SL_OK;
    cJSON *tools = NULL;
    if (p->tools) {
        tools = cJSON_Parse(p->tools);
        if (!cJSON_IsArray(tools)) { st = err_set(err, SL_EINVAL, "tools must be a JSON array of tool definitions"); goto fail; }
    }
    const int thinking = p->enable_thinking == 1; /* the template's default: off */
    int r = tok_buf_puts(&b, tok_bos_text(tok)), k = put_system(&b, msgs, n, tools, err, &st);
    if (k < 0) goto fail;
    r |= k;
    int last_user = -1, tool_turns = 0, in_user = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(msgs[i].role, "user") || !strcmp(msgs[i].role, "tool")) last_user = i;
        tool_turns |= !strcmp(msgs[i].role, "tool");
    }
    for (int i = 0; i < n && !r; i++) {
        const char *role = msgs[i].role, *content = msgs[i].content ? msgs[i].content : "";
        if (!strcmp(role, "user") || !strcmp(role, "tool")) {
            r |= tok_buf_puts(&b, in_user ? "\n\n" : "<｜User｜>");
            in_user = 1;
            if (!strcmp(role, "user")) r |= tok_buf_puts(&b, content);
            else r |= tok_buf_puts(&b, "<tool_result>") | tok_buf_puts(&b, content) | tok_buf_puts(&b, "</tool_result>");
        } else if (!strcmp(role, "assistant")) {
            in_user = 0;
            /* drop_thinking is true: reasoning is kept after the last user turn, or with tools or tool turns */
            int keep = thinking && (cJSON_GetArraySize(tools) > 0 || i > last_user || tool_turns);
            if ((k = put_assistant(&b, &msgs[i], keep, err, &st)) < 0) goto fail;
            r |= k;
        }
    }
    if (p->add_generation_prompt) r |= tok_buf_puts(&b, "<｜Assistant｜>") | tok_buf_puts(&b, thinking ? "<think>" : "</think>");
    if (r || tok_buf_put(&b, "", 0)) { st = err_set(err, SL_ENOMEM, "out of memory"); goto fail; }
    cJSON_Delete(tools);
    *out = b.p;
    return SL_OK;
fail:
    cJSON_Delete(tools);
    free(b.p);
    return st;
}
