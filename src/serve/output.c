/*
 * output.c — the answer parser (api.h): generated text in, as it streams, out as reasoning, content
 * and tool calls.
 *
 * States: START (the answer may open with <think>; leading whitespace is looked past), THINK (inside
 * the block, until </think>), CONTENT, CALL (inside <tool_call>, until </tool_call>, or inside
 * DeepSeek-V4's <｜DSML｜tool_calls> block, until </｜DSML｜tool_calls>: one or more invokes). The text not yet
 * given out is `hold`: in START all of it, in THINK / CONTENT the tail that could be the start of the
 * closing or opening tag (and trailing whitespace that may turn out to border a tag), in CALL the
 * call's body. Everything before that is final and goes to the callback at once, so a streamed answer
 * is held back by at most one tag's length.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "serve/api.h"

enum { START, THINK, CONTENT, CALL };

static const char THINK_OPEN[] = "<think>", THINK_CLOSE[] = "</think>";
static const char CALL_OPEN[] = "<tool_call>", CALL_CLOSE[] = "</tool_call>";
#define DSML "｜DSML｜"
/* DeepSeek-V4's calls (llama.cpp's models/templates/deepseek-ai-DeepSeek-V4.jinja writes them, and
 * common/parsers/deepseek.cpp reads them): <｜DSML｜invoke name="F">, then per argument
 * <｜DSML｜parameter name="P" string="true|false">V</｜DSML｜parameter> (V as it is, or JSON), </｜DSML｜invoke> */
static const char DSML_OPEN[] = "<" DSML "tool_calls>", DSML_CLOSE[] = "</" DSML "tool_calls>";
static const char NL[] = "\n", WS[] = " \t\r\n";

void out_init(out_parser *p, int think, int tools) {
    memset(p, 0, sizeof *p);
    p->state = think == 2 ? THINK : think == 1 ? START : CONTENT;
    p->lstrip = think == 2;
    p->tools = tools;
}

void out_free(out_parser *p) {
    free(p->hold.p);
    memset(&p->hold, 0, sizeof p->hold);
}

/* Drops the first k bytes of the hold. */
static void consume(out_parser *p, size_t k) {
    if (!k) return;
    memmove(p->hold.p, p->hold.p + k, p->hold.n - k);
    p->hold.n -= k;
}

/* Length of the longest proper prefix of tag that s[0..n) ends with. */
static size_t partial_tag(const char *s, size_t n, const char *tag) {
    size_t tl = strlen(tag);
    for (size_t k = tl - 1 < n ? tl - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, tag, k)) return k;
    return 0;
}

static long find(const char *s, size_t n, const char *tag) {
    const char *f = memmem(s, n, tag, strlen(tag));
    return f ? f - s : -1;
}

/* n without the trailing bytes of s that are in set. */
static size_t rstrip(const char *s, size_t n, const char *set) {
    while (n && strchr(set, s[n - 1])) n--;
    return n;
}

static int emit(out_fn fn, void *user, out_kind k, const char *s, size_t n) {
    return n ? fn(user, k, s, n, NULL) : 0;
}

/* ---- tool call bodies -------------------------------------------------------------------------- */

/* The <function=NAME><parameter=P>V</parameter>...</function> form: arguments become an object whose
 * values are V parsed as JSON when it is JSON, else V as a string (one newline around V stripped). */
static cJSON *xml_call(const char *s, size_t n, char **name) {
    const char *end = s + n;
    while (s < end && strchr(WS, *s)) s++;
    if ((size_t)(end - s) < 10 || memcmp(s, "<function=", 10)) return NULL;
    s += 10;
    const char *gt = memchr(s, '>', (size_t)(end - s));
    if (!gt || gt == s) return NULL;
    cJSON *args = cJSON_CreateObject();
    *name = strndup(s, (size_t)(gt - s));
    if (!args || !*name) goto fail;
    s = gt + 1;
    for (;;) {
        while (s < end && strchr(WS, *s)) s++;
        if ((size_t)(end - s) >= 11 && !memcmp(s, "</function>", 11)) return args;
        if ((size_t)(end - s) < 11 || memcmp(s, "<parameter=", 11)) goto fail;
        s += 11;
        gt = memchr(s, '>', (size_t)(end - s));
        if (!gt || gt == s) goto fail;
        char *key = strndup(s, (size_t)(gt - s));
        const char *v = gt + 1, *ve = memmem(v, (size_t)(end - v), "</parameter>", 12);
        if (!key || !ve) { free(key); goto fail; }
        s = ve + 12;
        if (v < ve && *v == '\n') v++;
        if (ve > v && ve[-1] == '\n') ve--;
        cJSON *val = cJSON_ParseWithLength(v, (size_t)(ve - v));
        if (!val) {
            char *str = strndup(v, (size_t)(ve - v));
            val = str ? cJSON_CreateString(str) : NULL;
            free(str);
        }
        if (!val) { free(key); goto fail; }
        cJSON_AddItemToObject(args, key, val);
        free(key);
    }
fail:
    cJSON_Delete(args);
    free(*name);
    *name = NULL;
    return NULL;
}

/* s[0..n) starts with lit (after whitespace when ws): returns the byte after it, else NULL. */
static const char *lit(const char *s, const char *end, const char *l, int ws) {
    while (ws && s < end && strchr(WS, *s)) s++;
    size_t k = strlen(l);
    return (size_t)(end - s) >= k && !memcmp(s, l, k) ? s + k : NULL;
}

/* One DSML invoke at s: its name and arguments (an object); *next: the byte after it. NULL when it is
 * not one (or memory ran out: then the text stays content, as a malformed call does). */
static cJSON *dsml_invoke(const char *s, const char *end, char **name, const char **next) {
    cJSON *args = NULL;
    *name = NULL;
    if (!(s = lit(s, end, "<" DSML "invoke name=\"", 1))) return NULL;
    const char *q = memmem(s, (size_t)(end - s), "\">", 2);
    if (!q || q == s || !(*name = strndup(s, (size_t)(q - s))) || !(args = cJSON_CreateObject())) goto fail;
    s = q + 2;
    for (;;) {
        const char *t = lit(s, end, "</" DSML "invoke>", 1);
        if (t) {
            *next = t;
            return args;
        }
        if (!(s = lit(s, end, "<" DSML "parameter name=\"", 1))) goto fail;
        q = memmem(s, (size_t)(end - s), "\" string=\"", 10);
        if (!q || q == s) goto fail;
        const char *v = q + 10;
        int str = (t = lit(v, end, "true\">", 0)) != NULL;
        if (!t && !(t = lit(v, end, "false\">", 0))) goto fail;
        const char *ve = memmem(t, (size_t)(end - t), "</" DSML "parameter>", strlen("</" DSML "parameter>"));
        if (!ve) goto fail;
        char *key = strndup(s, (size_t)(q - s)), *text = strndup(t, (size_t)(ve - t));
        cJSON *val = !text ? NULL : str ? cJSON_CreateString(text) : cJSON_Parse(text);
        free(text);
        if (!key || !val) { free(key); cJSON_Delete(val); goto fail; }
        cJSON_AddItemToObject(args, key, val);
        free(key);
        s = ve + strlen("</" DSML "parameter>");
    }
fail:
    cJSON_Delete(args);
    free(*name);
    *name = NULL;
    return NULL;
}

/* A DSML block's body: when every invoke in it parses (one at least), gives them to fn in order and
 * returns 1; 0 when it is not a block of calls; -1 when fn failed or memory ran out. */
static int give_dsml(out_parser *p, const char *s, size_t n, out_fn fn, void *user) {
    const char *end = s + n;
    for (int pass = 0; pass < 2; pass++) { /* 0: check all, 1: give all */
        const char *at = s;
        int k = 0;
        for (;; k++) {
            while (at < end && strchr(WS, *at)) at++;
            if (at == end) break;
            char *name, *args_text = NULL;
            cJSON *args = dsml_invoke(at, end, &name, &at);
            if (!args) return 0;
            int r = 0;
            if (pass) {
                args_text = cJSON_PrintUnformatted(args);
                out_call c = {name, args_text};
                r = !args_text ? -1 : fn(user, OUT_TOOL_CALL, NULL, 0, &c) ? -1 : 0;
                p->n_calls++;
            }
            cJSON_Delete(args);
            free(name);
            free(args_text);
            if (r) return -1;
        }
        if (!k) return 0;
    }
    return 1;
}

/* Parses a call's body; on success gives it to fn and returns 1; 0 when it is not a call; -1 when fn
 * failed or memory ran out. */
static int give_call(out_parser *p, const char *s, size_t n, out_fn fn, void *user) {
    char *name = NULL, *args_text = NULL;
    cJSON *j = cJSON_ParseWithLength(s, n), *args = NULL;
    int r = 0;
    if (cJSON_IsObject(j)) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(j, "name");
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "arguments");
        if (!a) a = cJSON_GetObjectItemCaseSensitive(j, "parameters");
        if (!cJSON_IsString(nm) || !*nm->valuestring) goto out;
        name = strdup(nm->valuestring);
        if (cJSON_IsString(a)) args_text = strdup(a->valuestring); /* already JSON text, as the model wrote it */
        else if (a) args_text = cJSON_PrintUnformatted(a);
        else args_text = strdup("{}");
    } else if (!j && (args = xml_call(s, n, &name))) {
        args_text = cJSON_PrintUnformatted(args);
    } else
        goto out;
    if (!name || !args_text) { r = -1; goto out; }
    out_call c = {name, args_text};
    r = fn(user, OUT_TOOL_CALL, NULL, 0, &c) ? -1 : 1;
    p->n_calls++;
out:
    cJSON_Delete(j);
    cJSON_Delete(args);
    free(name);
    free(args_text);
    return r;
}

/* ---- the state machine ------------------------------------------------------------------------- */

/* Gives out what the hold makes final; with end set, all of it. Returns 0 or -1. */
static int run(out_parser *p, int end, out_fn fn, void *user) {
    for (;;) {
        const char *s = p->hold.p ? p->hold.p : ""; /* never NULL, even empty: memcmp and memmem want a pointer */
        size_t n = p->hold.n;
        if (p->lstrip && p->state != START) {
            size_t k = 0;
            const char *set = p->state == THINK || !p->tools ? NL : WS;
            while (k < n && strchr(set, s[k])) k++;
            consume(p, k);
            n -= k;
            if (!n) return 0;
            p->lstrip = 0;
        }
        switch (p->state) {
        case START: {
            size_t k = 0;
            while (k < n && strchr(WS, s[k])) k++;
            if (k == n && !end) return 0;
            size_t rest = n - k, tl = strlen(THINK_OPEN);
            if (rest >= tl && !memcmp(s + k, THINK_OPEN, tl)) {
                consume(p, k + tl);
                p->state = THINK;
                p->lstrip = 1;
                continue;
            }
            if (rest < tl && !memcmp(s + k, THINK_OPEN, rest) && !end) return 0;
            p->state = CONTENT; /* no reasoning: the text as it came, leading whitespace included */
            continue;
        }
        case THINK: {
            long f = find(s, n, THINK_CLOSE);
            if (f >= 0) {
                if (emit(fn, user, OUT_REASONING, s, rstrip(s, (size_t)f, NL))) return -1;
                consume(p, (size_t)f + strlen(THINK_CLOSE));
                p->state = CONTENT;
                p->lstrip = 1;
                continue;
            }
            size_t safe = end ? rstrip(s, n, NL) : rstrip(s, n - partial_tag(s, n, THINK_CLOSE), NL);
            if (emit(fn, user, OUT_REASONING, s, safe)) return -1;
            consume(p, end ? n : safe);
            return 0;
        }
        case CONTENT: {
            if (!p->tools) {
                if (emit(fn, user, OUT_CONTENT, s, n)) return -1;
                consume(p, n);
                return 0;
            }
            long f = find(s, n, CALL_OPEN), fd = find(s, n, DSML_OPEN);
            if (f >= 0 || fd >= 0) {
                p->dsml = fd >= 0 && (f < 0 || fd < f);
                if (p->dsml) f = fd;
                if (emit(fn, user, OUT_CONTENT, s, rstrip(s, (size_t)f, WS))) return -1;
                consume(p, (size_t)f + strlen(p->dsml ? DSML_OPEN : CALL_OPEN));
                p->state = CALL;
                continue;
            }
            size_t part = partial_tag(s, n, CALL_OPEN), pd = partial_tag(s, n, DSML_OPEN);
            size_t safe = end ? (p->n_calls ? rstrip(s, n, WS) : n) : rstrip(s, n - (pd > part ? pd : part), WS);
            if (emit(fn, user, OUT_CONTENT, s, safe)) return -1;
            consume(p, end ? n : safe);
            return 0;
        }
        case CALL: {
            const char *open = p->dsml ? DSML_OPEN : CALL_OPEN, *close = p->dsml ? DSML_CLOSE : CALL_CLOSE;
            long f = find(s, n, close);
            if (f < 0 && !end) return 0;
            size_t body = f >= 0 ? (size_t)f : n;
            int r = f < 0 ? 0 : p->dsml ? give_dsml(p, s, body, fn, user) : give_call(p, s, body, fn, user);
            if (r < 0) return -1;
            if (r == 0) { /* not a call (or cut off): the raw text is content */
                if (fn(user, OUT_CONTENT, open, strlen(open), NULL) ||
                    emit(fn, user, OUT_CONTENT, s, f >= 0 ? body + strlen(close) : n))
                    return -1;
            }
            consume(p, f >= 0 ? body + strlen(close) : n);
            p->state = CONTENT;
            p->lstrip = 1;
            continue;
        }
        }
        return 0;
    }
}

int out_push(out_parser *p, const char *text, size_t len, out_fn fn, void *user) {
    if (len && tok_buf_put(&p->hold, text, len)) return -1;
    return run(p, 0, fn, user);
}

int out_end(out_parser *p, out_fn fn, void *user) { return run(p, 1, fn, user); }
