/*
 * json_schema.c — JSON Schema to byte grammar (json_schema.h).
 *
 * One compiler context per schema: the shared rules (whitespace, strings, numbers, any value) are made
 * once, on first use; each $ref target gets one rule, reserved before its schema is compiled so that
 * recursive schemas refer to it. An object's properties come in their declared order; the optional
 * ones chain as rules T[i][c] ("the properties from i on; c: a comma is owed before the next"), two
 * per property, so n optional properties cost 2n rules rather than 2^n alternatives.
 *
 * Sections: shared rules; keywords; types; schemas; entry points.
 */
#include "text/json_schema.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/json_string.h"
#include "util/err.h"

#define JS_MAX_REFS 128
#define JS_MAX_COUNT 4096 /* largest minItems / maxItems / minLength / maxLength spelled out */
#define JS_MAX_NEST 64    /* schemas inside schemas (not counting $ref) */

typedef struct jsc {
    gr_builder *b;
    const cJSON *doc; /* the whole schema: what "#" and "#/..." refer to */
    sl_error *err;
    int failed;
    int ws, chr, bytechr, esc, str, num, integer, value, nest;
    struct {
        const char *ref;
        int rule;
    } refs[JS_MAX_REFS];
    int n_refs;
    char at[256]; /* where the schema being compiled is, as a JSON pointer */
} jsc;

static int fail(jsc *c, sl_status st, const char *fmt, const char *what) {
    if (!c->failed) {
        if (st == SL_ENOMEM) err_set(c->err, st, "out of memory");
        else err_set(c->err, st, fmt, what, *c->at ? c->at : "/");
    }
    c->failed = 1;
    return -1;
}

/* ---- shared rules ------------------------------------------------------------------------------ */

int js_ws_rule(gr_builder *b) {
    int sp = gr_rule(b);
    gr_lit(b, sp, " ");
    int indent = gr_repeat(b, sp, 0, 32);
    int ws = gr_rule(b);
    gr_alt(b, ws); /* nothing */
    gr_alt(b, ws);
    gr_lit(b, ws, " ");
    gr_alt(b, ws);
    gr_lit(b, ws, "\n");
    gr_ref(b, ws, indent);
    return ws;
}

static int ws(jsc *c) {
    if (c->ws < 0) c->ws = js_ws_rule(c->b);
    return c->ws;
}

/* One character of a JSON string: printable ASCII but '"' and '\\', well-formed UTF-8 of two to four
 * bytes (no surrogates, nothing above U+10FFFF), or an escape. */
static int chr(jsc *c) {
    if (c->chr >= 0) return c->chr;
    gr_builder *b = c->b;
    int r = c->chr = gr_rule(b), hex = gr_rule(b), cont = gr_rule(b);
    gr_range(b, cont, 0x80, 0xbf);
    gr_range(b, hex, '0', '9');
    gr_alt(b, hex);
    gr_range(b, hex, 'a', 'f');
    gr_alt(b, hex);
    gr_range(b, hex, 'A', 'F');
    uint32_t ascii[8] = {0};
    for (int k = 0x20; k < 0x80; k++)
        if (k != '"' && k != '\\') ascii[k >> 5] |= 1u << (k & 31);
    gr_set(b, r, ascii);
    static const uint8_t lead[][3] = {/* first byte range, the second's range; then continuation bytes */
                                      {0xc2, 0xdf, 0}, {0xe0, 0xe0, 1}, {0xe1, 0xec, 1}, {0xed, 0xed, 1},
                                      {0xee, 0xef, 1}, {0xf0, 0xf0, 2}, {0xf1, 0xf3, 2}, {0xf4, 0xf4, 2}};
    static const uint8_t second[][2] = {{0x80, 0xbf}, {0xa0, 0xbf}, {0x80, 0xbf}, {0x80, 0x9f},
                                        {0x80, 0xbf}, {0x90, 0xbf}, {0x80, 0xbf}, {0x80, 0x8f}};
    for (int k = 0; k < 8; k++) {
        gr_alt(b, r);
        gr_range(b, r, lead[k][0], lead[k][1]);
        gr_range(b, r, second[k][0], second[k][1]);
        for (int j = 0; j < lead[k][2]; j++) gr_ref(b, r, cont);
    }
    gr_alt(b, r);
    gr_lit(b, r, "\\");
    uint32_t esc[8] = {0};
    for (const char *e = "\"\\/bfnrt"; *e; e++) esc[(uint8_t)*e >> 5] |= 1u << (*e & 31);
    int e = gr_rule(b);
    gr_set(b, e, esc);
    gr_alt(b, e);
    gr_ref(b, e, js_u_escape_rule(b, hex));
    gr_ref(b, r, e);
    c->esc = e;
    return r;
}

/* One byte of a JSON string that need not count characters: printable ASCII but '"' and '\\', any
 * byte that may appear in UTF-8 (0x80-0xbf, 0xc2-0xf4), or an escape (chr's). Two alternatives where
 * chr has ten: inside an unbounded string nearly every token is allowed, and the mask's cost there is
 * that of the stacks per byte (Qwen3's vocabulary: 330 ms a token with chr, see the notes). The bytes
 * then come from the tokens, which are pieces of UTF-8 text. */
static int byte_chr(jsc *c) {
    if (c->bytechr >= 0) return c->bytechr;
    if (chr(c) < 0) return -1; /* makes c->esc */
    int r = c->bytechr = gr_rule(c->b);
    uint32_t bits[8] = {0};
    for (int k = 0x20; k < 0x100; k++)
        if (k != '"' && k != '\\' && k != 0xc0 && k != 0xc1 && k < 0xf5) bits[k >> 5] |= 1u << (k & 31);
    gr_set(c->b, r, bits);
    gr_alt(c->b, r);
    gr_lit(c->b, r, "\\");
    gr_ref(c->b, r, c->esc);
    return r;
}

/* A string of min..max characters (max < 0: any number). */
static int string_rule(jsc *c, int min, int max) {
    if (min == 0 && max < 0 && c->str >= 0) return c->str;
    int r = gr_rule(c->b), body = gr_repeat(c->b, min == 0 && max < 0 ? byte_chr(c) : chr(c), min, max);
    gr_lit(c->b, r, "\"");
    gr_ref(c->b, r, body);
    gr_lit(c->b, r, "\"");
    if (min == 0 && max < 0) c->str = r;
    return r;
}

/* -?(0|[1-9][0-9]{0,14}) (15 digits: what a double holds exactly, and cJSON prints back as they were), then for numbers (\.[0-9]{1,16})?([eE][-+]?[0-9]{1,3})? */
static int number_rule(jsc *c, int integer) {
    int *memo = integer ? &c->integer : &c->num;
    if (*memo >= 0) return *memo;
    gr_builder *b = c->b;
    int digit = gr_rule(b), nz = gr_rule(b), ip = gr_rule(b), r = gr_rule(b);
    gr_range(b, digit, '0', '9');
    gr_range(b, nz, '1', '9');
    gr_lit(b, ip, "0");
    gr_alt(b, ip);
    gr_ref(b, ip, nz);
    gr_ref(b, ip, gr_repeat(b, digit, 0, 14));
    int minus = gr_rule(b);
    gr_lit(b, minus, "-");
    gr_alt(b, minus);
    gr_ref(b, r, minus);
    gr_ref(b, r, ip);
    if (!integer) {
        int frac = gr_rule(b), exp = gr_rule(b), sign = gr_rule(b);
        gr_lit(b, frac, ".");
        gr_ref(b, frac, gr_repeat(b, digit, 1, 16));
        gr_range(b, sign, '+', '+');
        gr_alt(b, sign);
        gr_lit(b, sign, "-");
        gr_alt(b, sign);
        gr_range(b, exp, 'e', 'e');
        gr_alt(b, exp);
        gr_range(b, exp, 'E', 'E');
        int e = gr_rule(b);
        gr_ref(b, e, exp);
        gr_ref(b, e, sign);
        gr_ref(b, e, gr_repeat(b, digit, 1, 3));
        gr_ref(b, r, gr_optional(b, frac));
        gr_ref(b, r, gr_optional(b, e));
    }
    return *memo = r;
}

static int literal_rule(jsc *c, const char *text) {
    int r = gr_rule(c->b);
    gr_lit(c->b, r, text);
    return r;
}

/* "[" ws (item ws ("," ws item ws){min-1, max-1})? "]" */
static int array_rule(jsc *c, int item, int min, int max) {
    gr_builder *b = c->b;
    int w = ws(c), it = gr_rule(b), more = gr_rule(b), r = gr_rule(b);
    gr_ref(b, it, item);
    gr_ref(b, it, w);
    gr_lit(b, more, ",");
    gr_ref(b, more, w);
    gr_ref(b, more, it);
    gr_lit(b, r, "[");
    gr_ref(b, r, w);
    if (max != 0) {
        int body = gr_rule(b);
        gr_ref(b, body, it);
        gr_ref(b, body, gr_repeat(b, more, min > 1 ? min - 1 : 0, max < 0 ? -1 : max - 1));
        gr_ref(b, r, min > 0 ? body : gr_optional(b, body));
    }
    gr_lit(b, r, "]");
    return r;
}

/* key ws ":" ws value ws, key a rule of the key's JSON text */
static int member_rule(jsc *c, int key, int value) {
    int r = gr_rule(c->b), w = ws(c);
    gr_ref(c->b, r, key);
    gr_ref(c->b, r, w);
    gr_lit(c->b, r, ":");
    gr_ref(c->b, r, w);
    gr_ref(c->b, r, value);
    gr_ref(c->b, r, w);
    return r;
}

/* E(comma) ::= "" | ("," ws)? member E(1): any number of members */
static int members_rule(jsc *c, int member, int comma) {
    gr_builder *b = c->b;
    int e1 = gr_rule(b);
    gr_alt(b, e1);
    gr_alt(b, e1);
    gr_lit(b, e1, ",");
    gr_ref(b, e1, ws(c));
    gr_ref(b, e1, member);
    gr_ref(b, e1, e1);
    if (comma) return e1;
    int e0 = gr_rule(b);
    gr_alt(b, e0);
    gr_alt(b, e0);
    gr_ref(b, e0, member);
    gr_ref(b, e0, e1);
    return e0;
}

/* Any JSON value (objects and arrays of any values). */
static int value_rule(jsc *c) {
    if (c->value >= 0) return c->value;
    gr_builder *b = c->b;
    int v = c->value = gr_rule(b), w = ws(c);
    int obj = gr_rule(b);
    gr_lit(b, obj, "{");
    gr_ref(b, obj, w);
    gr_ref(b, obj, members_rule(c, member_rule(c, string_rule(c, 0, -1), v), 0));
    gr_lit(b, obj, "}");
    int alts[] = {obj, array_rule(c, v, 0, -1), string_rule(c, 0, -1), number_rule(c, 0),
                  literal_rule(c, "true"), literal_rule(c, "false"), literal_rule(c, "null")};
    for (size_t k = 0; k < sizeof alts / sizeof *alts; k++) {
        if (k) gr_alt(b, v);
        gr_ref(b, v, alts[k]);
    }
    return v;
}

/* ---- keywords ---------------------------------------------------------------------------------- */

static const char *const known[] = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "minLength",
    "maxLength", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    /* annotations: no effect on what validates */
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly",
    "writeOnly", NULL};

/* The first keyword of s that this compiler does not know, or NULL. */
static const char *unknown_keyword(const cJSON *s) {
    for (const cJSON *k = s->child; k; k = k->next) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++) ok = !strcmp(k->string, known[i]);
        if (!ok) return k->string;
    }
    return NULL;
}

/* A count keyword: an integer in [0, JS_MAX_COUNT], or def when absent. -1 on failure. */
static int count_of(jsc *c, const cJSON *s, const char *key, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!v) return def;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != (double)(int)v->valuedouble)
        return fail(c, SL_EINVAL, "JSON Schema: '%s' must be a non-negative integer (at %s)", key);
    if (v->valuedouble > JS_MAX_COUNT) return fail(c, SL_EINVAL, "JSON Schema: '%s' above 4096 is not supported (at %s)", key);
    return v->valueint;
}

/* Appends "/key" (escaped as a JSON pointer) to c->at; returns the old length, to restore. */
static size_t at_push(jsc *c, const char *key) {
    size_t n = strlen(c->at), k = n;
    if (k + 1 < sizeof c->at) c->at[k++] = '/';
    for (const char *p = key; *p && k + 2 < sizeof c->at; p++) {
        if (*p == '~' || *p == '/') {
            c->at[k++] = '~';
            c->at[k++] = *p == '~' ? '0' : '1';
        } else c->at[k++] = *p;
    }
    c->at[k] = 0;
    return n;
}

static int schema_rule(jsc *c, const cJSON *s);

/* schema_rule of s[key] (or of s itself when key is NULL), at c->at + "/key[/index]". */
static int sub_rule(jsc *c, const cJSON *s, const char *key, int index) {
    size_t n = at_push(c, key);
    if (index >= 0) {
        char ix[16];
        snprintf(ix, sizeof ix, "%d", index);
        at_push(c, ix);
    }
    int r = schema_rule(c, s);
    c->at[n] = 0;
    return r;
}

/* ---- types ------------------------------------------------------------------------------------- */

/* The rule of a key's JSON text. */
static int key_rule(jsc *c, const char *name) {
    cJSON *j = cJSON_CreateString(name);
    char *t = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!t) return fail(c, SL_ENOMEM, "", "");
    int r = literal_rule(c, t);
    free(t);
    return r;
}

/* additionalProperties: -1 none, else the rule of their values. *bad on failure. */
static int extra_rule(jsc *c, const cJSON *s, int has_props, int *bad) {
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (!ap) return has_props ? -1 : value_rule(c);
    if (cJSON_IsFalse(ap)) return -1;
    if (cJSON_IsTrue(ap)) return value_rule(c);
    int r = sub_rule(c, ap, "additionalProperties", -1);
    if (r < 0) *bad = 1;
    return r;
}

/* 1 when name is in s's "required" list. */
static int is_required(const cJSON *s, const char *name) {
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    for (const cJSON *k = req ? req->child : NULL; k; k = k->next)
        if (cJSON_IsString(k) && !strcmp(k->valuestring, name)) return 1;
    return 0;
}

/* Checks "required": an array of names of properties. 0 or -1. */
static int check_required(jsc *c, const cJSON *s, const cJSON *props, int extra) {
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    if (!req) return 0;
    if (!cJSON_IsArray(req)) return fail(c, SL_EINVAL, "JSON Schema: '%s' must be an array of names (at %s)", "required");
    for (const cJSON *k = req->child; k; k = k->next) {
        if (!cJSON_IsString(k)) return fail(c, SL_EINVAL, "JSON Schema: '%s' must be an array of names (at %s)", "required");
        if (!cJSON_GetObjectItemCaseSensitive(props, k->valuestring) && extra < 0)
            return fail(c, SL_EINVAL, "JSON Schema: the required property '%s' is not among the properties (at %s)",
                        k->valuestring);
    }
    return 0;
}

/* "{" ws T[0][0] "}", T[i][m] ::= ("," ws)^m member_i T[i+1][1] (| T[i+1][m] when i is optional),
 * T[n][m] ::= the extra members (or nothing). */
static int object_rule(jsc *c, const cJSON *s) {
    gr_builder *b = c->b;
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    if (props && !cJSON_IsObject(props)) return fail(c, SL_EINVAL, "JSON Schema: '%s' must be an object (at %s)", "properties");
    int n = cJSON_GetArraySize(props), bad = 0;
    int extra = extra_rule(c, s, n > 0, &bad);
    if (bad || check_required(c, s, props, extra)) return -1;
    int *member = calloc((size_t)n + 1, sizeof *member);
    if (!member) return fail(c, SL_ENOMEM, "", "");
    int i = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next, i++) {
        size_t at = at_push(c, "properties");
        int v = sub_rule(c, p, p->string, -1);
        c->at[at] = 0;
        if (v < 0) { free(member); return -1; }
        member[i] = member_rule(c, key_rule(c, p->string), v);
    }
    int next[2];
    if (extra >= 0) {
        int mx = member_rule(c, string_rule(c, 0, -1), extra);
        next[0] = members_rule(c, mx, 0);
        next[1] = members_rule(c, mx, 1);
    } else {
        next[0] = next[1] = gr_rule(b);
        gr_alt(b, next[0]);
    }
    const cJSON *p = props ? props->child : NULL;
    for (i = n - 1; i >= 0; i--) {
        const cJSON *q = p;
        for (int k = 0; k < i; k++) q = q->next;
        int req = is_required(s, q->string), t[2];
        for (int m = 0; m < 2; m++) {
            t[m] = gr_rule(b);
            if (m) {
                gr_lit(b, t[m], ",");
                gr_ref(b, t[m], ws(c));
            }
            gr_ref(b, t[m], member[i]);
            gr_ref(b, t[m], next[1]);
            if (!req) {
                gr_alt(b, t[m]);
                gr_ref(b, t[m], next[m]);
            }
        }
        next[0] = t[0], next[1] = t[1];
    }
    free(member);
    int r = gr_rule(b);
    gr_lit(b, r, "{");
    gr_ref(b, r, ws(c));
    gr_ref(b, r, next[0]);
    gr_lit(b, r, "}");
    return r;
}

/* A string under pattern or format (json_string.c), or under minLength / maxLength. */
static int string_type(jsc *c, const cJSON *s) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern"), *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    int min = count_of(c, s, "minLength", 0), max = count_of(c, s, "maxLength", -1);
    if (c->failed) return -1;
    if (max >= 0 && max < min) return fail(c, SL_EINVAL, "JSON Schema: '%s' is below minLength (at %s)", "maxLength");
    if (!pat && !fmt) return string_rule(c, min, max);
    const char *key = pat ? "pattern" : "format";
    if ((pat && fmt) || min > 0 || max >= 0)
        return fail(c, SL_EINVAL, "JSON Schema: '%s' together with another of pattern, format, minLength, maxLength is not supported (at %s)", key);
    if (!cJSON_IsString(pat ? pat : fmt)) return fail(c, SL_EINVAL, "JSON Schema: '%s' must be a string (at %s)", key);
    char why[160];
    int r = pat ? js_pattern_rule(c->b, pat->valuestring, why, sizeof why) : js_format_rule(c->b, fmt->valuestring);
    if (r >= 0) return r;
    if (pat && !why[0]) return fail(c, SL_ENOMEM, "", "");
    if (pat) return fail(c, SL_EINVAL, "JSON Schema: 'pattern': %s (at %s)", why);
    return fail(c, SL_EINVAL, "JSON Schema: format '%s' is not supported (at %s)", fmt->valuestring);
}

static const char *const bound_key[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};

/* Bound k of bound_key in s as a number into *x: 1, 0 when absent (or false), -1 (failed). The exclusive ones
 * are numbers, or draft 4's booleans beside minimum / maximum. */
static int schema_bound(jsc *c, const cJSON *s, int k, double *x) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, bound_key[k]);
    const cJSON *base = cJSON_GetObjectItemCaseSensitive(s, bound_key[k & 2]);
    if (!v || cJSON_IsFalse(v)) return 0;
    if (cJSON_IsNumber(v) && isfinite(v->valuedouble)) *x = v->valuedouble;
    else if (cJSON_IsTrue(v) && (k & 1) && cJSON_IsNumber(base)) *x = base->valuedouble; /* draft 4 */
    else return fail(c, SL_EINVAL, "JSON Schema: '%s' must be a number (at %s)", bound_key[k]);
    return 1;
}

/* The integers lo..hi that minimum / maximum / exclusiveMinimum / exclusiveMaximum allow; 0 when there are
 * none of them, 1, or -1 (failed). */
static int int_bounds(jsc *c, const cJSON *s, int64_t *lo, int64_t *hi) {
    double b[2] = {-1e300, 1e300};
    int any = 0;
    for (int k = 0; k < 4; k++) {
        double x;
        int r = schema_bound(c, s, k, &x);
        if (r <= 0) {
            if (r < 0) return -1;
            continue;
        }
        /* the bound in integers: ceil / floor, one further when exclusive */
        double i = k < 2 ? ((k & 1) ? floor(x) + 1 : ceil(x)) : ((k & 1) ? ceil(x) - 1 : floor(x));
        if (k < 2 && i > b[0]) b[0] = i;
        if (k >= 2 && i < b[1]) b[1] = i;
        any = 1;
    }
    if (!any) return 0;
    if (b[0] > b[1]) return fail(c, SL_EINVAL, "JSON Schema: no integer is within the bounds%s (at %s)", "");
    if (b[0] > (double)JS_INT_MAX || b[1] < -(double)JS_INT_MAX)
        return fail(c, SL_EINVAL, "JSON Schema: integers beyond %s digits are not supported (at %s)", "15");
    *lo = b[0] < -(double)JS_INT_MAX ? -JS_INT_MAX : (int64_t)b[0];
    *hi = b[1] > (double)JS_INT_MAX ? JS_INT_MAX : (int64_t)b[1];
    return 1;
}

/* A number's bounds (integer values only), into js_number_range_rule's terms. 0 or -1 (failed). */
static int num_bounds(jsc *c, const cJSON *s, js_bounds *o) {
    memset(o, 0, sizeof *o);
    for (int k = 0; k < 4; k++) {
        double x;
        int r = schema_bound(c, s, k, &x);
        if (r <= 0) {
            if (r < 0) return -1;
            continue;
        }
        if (x != floor(x) || fabs(x) > (double)JS_INT_MAX)
            return fail(c, SL_EINVAL, "JSON Schema: '%s' on a number must be an integer of at most 15 digits (at %s)", bound_key[k]);
        int64_t i = (int64_t)x, hi = k >= 2, ex = k & 1;
        int64_t *at = hi ? &o->hi : &o->lo;
        int *has = hi ? &o->has_hi : &o->has_lo, *exc = hi ? &o->hi_ex : &o->lo_ex;
        if (!*has || (hi ? i < *at : i > *at) || (i == *at && ex)) *at = i, *exc = (int)ex;
        *has = 1;
    }
    if (o->has_lo && o->has_hi && (o->lo > o->hi || (o->lo == o->hi && (o->lo_ex || o->hi_ex))))
        return fail(c, SL_EINVAL, "JSON Schema: no number is within the bounds%s (at %s)", "");
    return 0;
}

static int type_rule(jsc *c, const cJSON *s, const char *type) {
    if (!strcmp(type, "object")) return object_rule(c, s);
    if (!strcmp(type, "array")) {
        int min = count_of(c, s, "minItems", 0), max = count_of(c, s, "maxItems", -1);
        if (c->failed) return -1;
        if (max >= 0 && max < min) return fail(c, SL_EINVAL, "JSON Schema: '%s' is below minItems (at %s)", "maxItems");
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
        int item = items ? sub_rule(c, items, "items", -1) : value_rule(c);
        return item < 0 ? -1 : array_rule(c, item, min, max);
    }
    if (!strcmp(type, "string")) return string_type(c, s);
    if (!strcmp(type, "number")) {
        js_bounds nb;
        if (num_bounds(c, s, &nb)) return -1;
        int r = nb.has_lo || nb.has_hi ? js_number_range_rule(c->b, &nb) : number_rule(c, 0);
        return r < 0 ? fail(c, SL_ENOMEM, "", "") : r;
    }
    if (!strcmp(type, "integer")) {
        int64_t lo, hi;
        int bounded = int_bounds(c, s, &lo, &hi);
        if (bounded <= 0) return bounded < 0 ? -1 : number_rule(c, 1);
        int r = js_int_range_rule(c->b, lo, hi);
        return r < 0 ? fail(c, SL_ENOMEM, "", "") : r;
    }
    if (!strcmp(type, "boolean")) {
        int r = literal_rule(c, "true");
        gr_alt(c->b, r);
        gr_lit(c->b, r, "false");
        return r;
    }
    if (!strcmp(type, "null")) return literal_rule(c, "null");
    return fail(c, SL_EINVAL, "JSON Schema: unknown type '%s' (at %s)", type);
}

/* ---- schemas ----------------------------------------------------------------------------------- */

/* The value a JSON pointer ("#", "#/a/b", with ~0 and ~1) names in the document, or NULL. */
static const cJSON *resolve(const cJSON *doc, const char *ref) {
    if (ref[0] != '#') return NULL;
    const cJSON *v = doc;
    const char *p = ref + 1;
    while (*p == '/' && v) {
        char key[256];
        size_t k = 0;
        for (p++; *p && *p != '/' && k + 1 < sizeof key; p++) {
            if (*p == '~' && (p[1] == '0' || p[1] == '1')) key[k++] = *++p == '0' ? '~' : '/';
            else key[k++] = *p;
        }
        key[k] = 0;
        v = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, atoi(key)) : cJSON_GetObjectItemCaseSensitive(v, key);
    }
    return *p ? NULL : v;
}

/* The rule of a $ref: one per target, reserved before its schema compiles (recursion refers to it). */
static int ref_rule(jsc *c, const cJSON *ref) {
    if (!cJSON_IsString(ref)) return fail(c, SL_EINVAL, "JSON Schema: '%s' must be a string (at %s)", "$ref");
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ref, ref->valuestring)) return c->refs[i].rule;
    const cJSON *t = resolve(c->doc, ref->valuestring);
    if (!t) return fail(c, SL_EINVAL, "JSON Schema: '$ref' %s names nothing in this schema (at %s)", ref->valuestring);
    if (c->n_refs == JS_MAX_REFS) return fail(c, SL_EINVAL, "JSON Schema: more than 128 '%s' targets (at %s)", "$ref");
    int r = gr_rule(c->b);
    c->refs[c->n_refs].ref = ref->valuestring;
    c->refs[c->n_refs++].rule = r;
    char saved[sizeof c->at];
    memcpy(saved, c->at, sizeof saved);
    snprintf(c->at, sizeof c->at, "%s", ref->valuestring + 1);
    int body = schema_rule(c, t);
    memcpy(c->at, saved, sizeof saved);
    if (body < 0) return -1;
    gr_ref(c->b, r, body);
    return r;
}

/* Alternatives: each value of enum (their JSON texts), or each schema of anyOf / oneOf. */
static int alternatives(jsc *c, const cJSON *list, const char *key, int schemas) {
    if (!cJSON_IsArray(list) || !list->child) return fail(c, SL_EINVAL, "JSON Schema: '%s' must be a non-empty array (at %s)", key);
    int r = gr_rule(c->b), i = 0;
    for (const cJSON *v = list->child; v; v = v->next, i++) {
        if (i) gr_alt(c->b, r);
        if (schemas) {
            int x = sub_rule(c, v, key, i);
            if (x < 0) return -1;
            gr_ref(c->b, r, x);
            continue;
        }
        char *t = cJSON_PrintUnformatted(v);
        if (!t) return fail(c, SL_ENOMEM, "", "");
        gr_lit(c->b, r, t);
        free(t);
    }
    return r;
}

/* 1 when s has a keyword that constrains values besides those named (annotations and $defs aside). */
static int has_other(const cJSON *s, const char *const *mine) {
    static const char *const free_[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                        "deprecated", "readOnly", "writeOnly", "$defs", "definitions", NULL};
    for (const cJSON *k = s->child; k; k = k->next) {
        int ok = 0;
        for (int i = 0; free_[i] && !ok; i++) ok = !strcmp(k->string, free_[i]);
        for (int i = 0; mine[i] && !ok; i++) ok = !strcmp(k->string, mine[i]);
        if (!ok) return 1;
    }
    return 0;
}

/* A schema with a combinator ($ref, const, enum, anyOf / oneOf / allOf), or -2 when it has none. */
static int combinator_rule(jsc *c, const cJSON *s) {
    static const char *const comb[] = {"$ref", "const", "enum", "anyOf", "oneOf", "allOf", NULL};
    for (int k = 0; comb[k]; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, comb[k]);
        if (!v) continue;
        const char *mine[] = {comb[k], k == 1 || k == 2 ? "type" : NULL, NULL}; /* a type beside const / enum is implied */
        if (has_other(s, mine)) return fail(c, SL_EINVAL, "JSON Schema: '%s' together with other keywords is not supported (at %s)", comb[k]);
        if (k == 0) return ref_rule(c, v);
        if (k == 1) {
            char *t = cJSON_PrintUnformatted(v);
            if (!t) return fail(c, SL_ENOMEM, "", "");
            int r = literal_rule(c, t);
            free(t);
            return r;
        }
        if (k == 2) return alternatives(c, v, "enum", 0);
        if (k == 5 && cJSON_GetArraySize(v) != 1)
            return fail(c, SL_EINVAL, "JSON Schema: '%s' of more than one schema is not supported (at %s)", "allOf");
        return alternatives(c, v, comb[k], 1);
    }
    return -2;
}

/* A schema without type, properties or items: a string when it has a string's keywords (any other
 * value would validate too: a string is one that does), an integer with bounds likewise, else any. */
static int untyped_rule(jsc *c, const cJSON *s) {
    static const char *const str[] = {"pattern", "format", "minLength", "maxLength", NULL};
    static const char *const num[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
    for (int k = 0; str[k]; k++)
        if (cJSON_GetObjectItemCaseSensitive(s, str[k])) return type_rule(c, s, "string");
    for (int k = 0; num[k]; k++)
        if (cJSON_GetObjectItemCaseSensitive(s, num[k])) return type_rule(c, s, "integer");
    return value_rule(c);
}

static int schema_rule(jsc *c, const cJSON *s) {
    if (c->failed) return -1;
    if (cJSON_IsTrue(s)) return value_rule(c);
    if (!cJSON_IsObject(s)) return fail(c, SL_EINVAL, "JSON Schema: %s (at %s)", cJSON_IsFalse(s) ? "the schema false matches nothing" : "a schema must be an object or a boolean");
    const char *bad = unknown_keyword(s);
    if (bad) return fail(c, SL_EINVAL, "JSON Schema keyword '%s' is not supported (at %s)", bad);
    if (++c->nest > JS_MAX_NEST) return fail(c, SL_EINVAL, "JSON Schema: nested deeper than %s levels (at %s)", "64");
    int r = combinator_rule(c, s);
    if (r == -2) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
        if (cJSON_IsString(type)) r = type_rule(c, s, type->valuestring);
        else if (cJSON_IsArray(type) && type->child) {
            r = gr_rule(c->b);
            for (const cJSON *t = type->child; t && !c->failed; t = t->next) {
                if (t != type->child) gr_alt(c->b, r);
                int x = cJSON_IsString(t) ? type_rule(c, s, t->valuestring)
                                          : fail(c, SL_EINVAL, "JSON Schema: '%s' must name types (at %s)", "type");
                if (x >= 0) gr_ref(c->b, r, x);
            }
        } else if (type) r = fail(c, SL_EINVAL, "JSON Schema: '%s' must be a name or a list of names (at %s)", "type");
        else if (cJSON_GetObjectItemCaseSensitive(s, "properties") || cJSON_GetObjectItemCaseSensitive(s, "additionalProperties"))
            r = type_rule(c, s, "object");
        else if (cJSON_GetObjectItemCaseSensitive(s, "items")) r = type_rule(c, s, "array");
        else r = untyped_rule(c, s);
    }
    c->nest--;
    return c->failed ? -1 : r;
}

/* ---- entry points ------------------------------------------------------------------------------ */

int js_schema_rule(gr_builder *b, const cJSON *schema, sl_error *err) {
    jsc *c = calloc(1, sizeof *c);
    if (!c) return err_set(err, SL_ENOMEM, "out of memory"), -1;
    c->b = b;
    c->doc = schema;
    c->err = err;
    c->ws = c->chr = c->bytechr = c->esc = c->str = c->num = c->integer = c->value = -1;
    int r = schema ? schema_rule(c, schema) : value_rule(c);
    if (r < 0 && !c->failed) fail(c, SL_ENOMEM, "", "");
    free(c);
    return r;
}

sl_status js_schema_grammar(const cJSON *schema, gr_grammar **out, sl_error *err) {
    *out = NULL;
    gr_builder *b = gr_builder_new();
    if (!b) return err_set(err, SL_ENOMEM, "out of memory");
    int r = js_schema_rule(b, schema, err);
    sl_status st = r < 0 ? (err && err->status ? err->status : SL_EINVAL) : gr_compile(b, r, out, err);
    gr_builder_free(b);
    return st;
}
