/*
 * chat.c — chat formatting: a built-in renderer of the Qwen ChatML templates (docs/TEXT.md says why
 * this is not a Jinja interpreter).
 *
 * The renderer reproduces, statement by statement, the Qwen3 chat template (the one with
 * `enable_thinking`, shipped with Qwen3, Qwen3-MoE and the hybrid-thinking releases), and the plain
 * ChatML subset of it for templates without `<think>` handling (Qwen3-Next-Instruct style). The flavour
 * is picked by looking at the template text stored with the tokenizer:
 *   DeepSeek-V4's template   -> chat_dsv4.c (not ChatML: <｜User｜> / <｜Assistant｜> turns, DSML tool calls)
 *   no "<|im_start|>"        -> SL_EUNSUPPORTED (not ChatML)
 *   "enable_thinking"        -> qwen3: reasoning split from "</think>", think blocks after the last
 *                               user query, "<think>\n\n</think>\n\n" when thinking is off
 *   "<think>" without it     -> qwen3 rendering, and "<think>\n" opens every generation (thinking-only)
 *   otherwise                -> plain ChatML (assistant content verbatim)
 *   "You are Qwen, created by Alibaba Cloud" -> Qwen2.5's default system message when none is given
 * `tojson` is Python's json.dumps with ensure_ascii=False (what transformers installs as the filter):
 * ", " and ": " separators, non-ASCII verbatim. cJSON keeps no int/float distinction, so a float with
 * an integral value (1.0) prints as 1.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "util/err.h"

sl_chat_params sl_chat_params_default(void) {
    sl_chat_params p;
    memset(&p, 0, sizeof p);
    p.add_generation_prompt = 1;
    p.enable_thinking = -1;
    return p;
}

/* ---- json.dumps --------------------------------------------------------------------------------- */

static int dump_str(tok_buf *b, const char *s) {
    if (tok_buf_put(b, "\"", 1)) return -1;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char e[8];
        const char *o = NULL;
        switch (*p) {
        case '"': o = "\\\""; break;
        case '\\': o = "\\\\"; break;
        case '\n': o = "\\n"; break;
        case '\r': o = "\\r"; break;
        case '\t': o = "\\t"; break;
        case '\b': o = "\\b"; break;
        case '\f': o = "\\f"; break;
        default:
            if (*p < 0x20) { snprintf(e, sizeof e, "\\u%04x", *p); o = e; }
        }
        if (o ? tok_buf_puts(b, o) : tok_buf_put(b, p, 1)) return -1;
    }
    return tok_buf_put(b, "\"", 1);
}

static int dump_num(tok_buf *b, double x) {
    char s[40];
    if (isnan(x)) return tok_buf_puts(b, "NaN");
    if (isinf(x)) return tok_buf_puts(b, x > 0 ? "Infinity" : "-Infinity");
    if (x == floor(x) && fabs(x) < 1e16) snprintf(s, sizeof s, "%.0f", x);
    else
        for (int p = 1; p <= 17; p++) { /* Python's repr: the shortest form that reads back */
            snprintf(s, sizeof s, "%.*g", p, x);
            if (strtod(s, NULL) == x) break;
        }
    return tok_buf_puts(b, s);
}

int chat_json_dumps(tok_buf *b, const cJSON *j) {
    if (cJSON_IsObject(j) || cJSON_IsArray(j)) {
        int obj = cJSON_IsObject(j);
        if (tok_buf_puts(b, obj ? "{" : "[")) return -1;
        for (const cJSON *c = j->child; c; c = c->next) {
            if (c != j->child && tok_buf_puts(b, ", ")) return -1;
            if (obj && (dump_str(b, c->string) || tok_buf_puts(b, ": "))) return -1;
            if (chat_json_dumps(b, c)) return -1;
        }
        return tok_buf_puts(b, obj ? "}" : "]");
    }
    if (cJSON_IsString(j)) return dump_str(b, j->valuestring);
    if (cJSON_IsNumber(j)) return dump_num(b, j->valuedouble);
    if (cJSON_IsTrue(j)) return tok_buf_puts(b, "true");
    if (cJSON_IsFalse(j)) return tok_buf_puts(b, "false");
    return tok_buf_puts(b, "null");
}

/* ---- string helpers (Python semantics) ---------------------------------------------------------- */

static int starts(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }
static int ends(const char *s, const char *p) {
    size_t n = strlen(s), k = strlen(p);
    return n >= k && !memcmp(s + n - k, p, k);
}
/* Last occurrence of needle in s[0..n), or NULL. */
static const char *rfind(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = n >= k ? n - k + 1 : 0; i-- > 0;)
        if (!memcmp(s + i, needle, k)) return s + i;
    return NULL;
}
/* Appends s[a..b) with leading (lstrip) and/or trailing (rstrip) '\n' removed. */
static int put_strip(tok_buf *b, const char *s, size_t n, int l, int r) {
    size_t a = 0;
    while (l && a < n && s[a] == '\n') a++;
    while (r && n > a && s[n - 1] == '\n') n--;
    return tok_buf_put(b, s + a, n - a);
}

/* ---- rendering ---------------------------------------------------------------------------------- */

enum { FLAVOUR_CHATML, FLAVOUR_QWEN3, FLAVOUR_QWEN3_ALWAYS_THINK };

static int render_tool_calls(tok_buf *b, const char *json, int content_nonempty, sl_error *err, sl_status *st) {
    cJSON *a = cJSON_Parse(json);
    if (!cJSON_IsArray(a)) { cJSON_Delete(a); *st = err_set(err, SL_EINVAL, "tool_calls must be a JSON array"); return -1; }
    int i = 0, r = 0;
    for (const cJSON *e = a->child; e && !r; e = e->next, i++) {
        if ((i == 0 && content_nonempty) || i > 0) r |= tok_buf_puts(b, "\n");
        const cJSON *f = cJSON_GetObjectItem(e, "function"), *tc = e;
        if (f && !cJSON_IsNull(f) && !cJSON_IsFalse(f)) tc = f;
        const cJSON *name = cJSON_GetObjectItem(tc, "name"), *args = cJSON_GetObjectItem(tc, "arguments");
        if (!cJSON_IsString(name)) { *st = err_set(err, SL_EINVAL, "tool_calls[%d] has no name", i); r = -1; break; }
        r |= tok_buf_puts(b, "<tool_call>\n{\"name\": \"") | tok_buf_puts(b, name->valuestring) |
             tok_buf_puts(b, "\", \"arguments\": ");
        if (cJSON_IsString(args)) r |= tok_buf_puts(b, args->valuestring);
        else if (args) r |= chat_json_dumps(b, args);
        else { *st = err_set(err, SL_EINVAL, "tool_calls[%d] has no arguments", i); r = -1; break; }
        r |= tok_buf_puts(b, "}\n</tool_call>");
        if (r && !*st) *st = err_set(err, SL_ENOMEM, "out of memory");
    }
    cJSON_Delete(a);
    return r;
}

/* The system turn: with tools, their block after the system message (or Qwen2.5's default one); else the
 * system message alone, or the default when the template has one. sys0: the text of a leading system
 * message, or NULL. Returns 0, or non-zero when out of memory. */
static int put_system(tok_buf *b, const cJSON *tools, const char *sys0, int qwen25_default) {
    int r = 0;
    if (tools && cJSON_GetArraySize(tools) > 0) {
        r |= tok_buf_puts(b, "<|im_start|>system\n");
        if (sys0) r |= tok_buf_puts(b, sys0) | tok_buf_puts(b, "\n\n");
        else if (qwen25_default) r |= tok_buf_puts(b, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n");
        r |= tok_buf_puts(b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                             "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
        for (const cJSON *t = tools->child; t; t = t->next) r |= tok_buf_puts(b, "\n") | chat_json_dumps(b, t);
        r |= tok_buf_puts(b, "\n</tools>\n\nFor each function call, return a json object with function name and "
                             "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
                             "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
    } else if (sys0) r |= tok_buf_puts(b, "<|im_start|>system\n") | tok_buf_puts(b, sys0) | tok_buf_puts(b, "<|im_end|>\n");
    else if (qwen25_default)
        r |= tok_buf_puts(b, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n");
    return r;
}

/* Assistant turn i of n: its reasoning (given, or split out of <think>...</think> in its content, as the
 * Qwen3 template does) shown only after the last user query, its content, its tool calls. Returns 0,
 * 1 when out of memory, or -1 with *st set (malformed tool calls). */
static int put_assistant(tok_buf *b, const sl_chat_msg *msgs, int n, int i, int flavour, int last_query, sl_error *err,
                         sl_status *st) {
    const char *content = msgs[i].content ? msgs[i].content : "";
    const char *body = content, *reason = "";
    size_t body_n = strlen(content), reason_n = 0;
    int lstrip_body = 0, r = 0;
    if (flavour != FLAVOUR_CHATML) {
        if (msgs[i].reasoning) reason = msgs[i].reasoning, reason_n = strlen(reason);
        else {
            const char *close = strstr(content, "</think>");
            if (close) {
                const char *last = rfind(content, strlen(content), "</think>");
                body = last + 8;
                body_n = strlen(body);
                lstrip_body = 1; /* .split('</think>')[-1].lstrip('\n') */
                /* .split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
                size_t head = (size_t)(close - content);
                while (head && content[head - 1] == '\n') head--;
                const char *open = rfind(content, head, "<think>");
                reason = open ? open + 7 : content;
                reason_n = head - (size_t)(reason - content);
                while (reason_n && *reason == '\n') reason++, reason_n--;
            }
        }
    }
    /* the body after lstrip (it is what "content" means from here on in the template) */
    while (lstrip_body && body_n && *body == '\n') body++, body_n--;
    r |= tok_buf_puts(b, "<|im_start|>assistant\n");
    if (flavour != FLAVOUR_CHATML && i > last_query && (i == n - 1 || reason_n)) {
        r |= tok_buf_puts(b, "<think>\n") | put_strip(b, reason, reason_n, 1, 1) | tok_buf_puts(b, "\n</think>\n\n") |
             put_strip(b, body, body_n, 1, 0);
    } else r |= tok_buf_put(b, body, body_n);
    if (msgs[i].tool_calls && !r && render_tool_calls(b, msgs[i].tool_calls, body_n > 0, err, st)) return -1;
    r |= tok_buf_puts(b, "<|im_end|>\n");
    return r ? 1 : 0;
}

sl_status sl_chat_format(const sl_tokenizer *tok, const sl_chat_msg *msgs, int n, const sl_chat_params *params,
                         char **out, sl_error *err) {
    *out = NULL;
    sl_chat_params p = params ? *params : sl_chat_params_default();
    const char *tmpl = tok_chat_template(tok);
    if (!*tmpl) return err_set(err, SL_EUNSUPPORTED, "the tokenizer has no chat template (tokenizer_config.json chat_template or chat_template.jinja)");
    const int dsv4 = chat_is_dsv4(tmpl);
    if (!dsv4 && !strstr(tmpl, "<|im_start|>")) return err_set(err, SL_EUNSUPPORTED, "the chat template is not ChatML (<|im_start|>) nor DeepSeek-V4's; only those are supported");
    int flavour = strstr(tmpl, "enable_thinking") ? FLAVOUR_QWEN3 : strstr(tmpl, "<think>") ? FLAVOUR_QWEN3_ALWAYS_THINK : FLAVOUR_CHATML;
    int qwen25_default = strstr(tmpl, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.") != NULL;
    for (int i = 0; i < n; i++) {
        const char *r = msgs[i].role ? msgs[i].role : "";
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool"))
            return err_set(err, SL_EINVAL, "message %d: unknown role '%s' (system, user, assistant or tool)", i, r);
    }
    if (dsv4) return chat_format_dsv4(tok, msgs, n, &p, out, err);
    tok_buf b = {0};
    cJSON *tools = NULL;
    sl_status st = SL_OK;
    int r = 0;
#define C(i) (msgs[i].content ? msgs[i].content : "")
    int sys0 = n > 0 && !strcmp(msgs[0].role, "system");
    if (p.tools) {
        tools = cJSON_Parse(p.tools);
        if (!cJSON_IsArray(tools)) { st = err_set(err, SL_EINVAL, "tools must be a JSON array of tool definitions"); goto fail; }
    }
    r |= put_system(&b, tools, sys0 ? C(0) : NULL, qwen25_default);
    /* the last user turn that is not a tool response (later assistant turns keep their reasoning) */
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--)
        if (!strcmp(msgs[i].role, "user") && !(starts(C(i), "<tool_response>") && ends(C(i), "</tool_response>"))) {
            last_query = i;
            break;
        }
    for (int i = 0; i < n && !r; i++) {
        const char *role = msgs[i].role, *content = C(i);
        if (!strcmp(role, "user") || (!strcmp(role, "system") && i > 0)) {
            r |= tok_buf_puts(&b, "<|im_start|>") | tok_buf_puts(&b, role) | tok_buf_puts(&b, "\n") |
                 tok_buf_puts(&b, content) | tok_buf_puts(&b, "<|im_end|>\n");
        } else if (!strcmp(role, "assistant")) {
            int k = put_assistant(&b, msgs, n, i, flavour, last_query, err, &st);
            if (k < 0) goto fail;
            r |= k;
        } else if (!strcmp(role, "tool")) {
            if (i == 0 || strcmp(msgs[i - 1].role, "tool")) r |= tok_buf_puts(&b, "<|im_start|>user");
            r |= tok_buf_puts(&b, "\n<tool_response>\n") | tok_buf_puts(&b, content) | tok_buf_puts(&b, "\n</tool_response>");
            if (i == n - 1 || strcmp(msgs[i + 1].role, "tool")) r |= tok_buf_puts(&b, "<|im_end|>\n");
        }
    }
    if (p.add_generation_prompt) {
        r |= tok_buf_puts(&b, "<|im_start|>assistant\n");
        if (flavour == FLAVOUR_QWEN3 && p.enable_thinking == 0) r |= tok_buf_puts(&b, "<think>\n\n</think>\n\n");
        if (flavour == FLAVOUR_QWEN3_ALWAYS_THINK) r |= tok_buf_puts(&b, "<think>\n");
    }
#undef C
    if (r || tok_buf_put(&b, "", 0)) { st = err_set(err, SL_ENOMEM, "out of memory"); goto fail; }
    cJSON_Delete(tools);
    *out = b.p;
    return SL_OK;
fail:
    cJSON_Delete(tools);
    free(b.p);
    return st;
}
