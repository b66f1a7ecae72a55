/*
 * json_string.c — grammars for `pattern`, `format` and integer bounds (json_string.h).
 *
 * A pattern is parsed by recursive descent (alternatives of sequences of quantified atoms), each
 * construct becoming a rule of the builder; a character becomes its JSON text (an escape where JSON
 * needs one), a class the alternatives of its raw bytes, its escaped characters and, where it admits
 * them, any non-ASCII character (well-formed UTF-8). The design follows llama.cpp's
 * common/json-schema-to-grammar.cpp (_visit_pattern, _build_min_max_int), written for this builder.
 *
 * Sections: characters and classes; patterns; formats; integer ranges.
 */
#include "text/json_string.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- characters and classes -------------------------------------------------------------------- */

/* Appends the JSON text of code point cp (inside a string) to rule r's last alternative. */
static void put_char(gr_builder *b, int r, uint32_t cp) {
    static const char short_esc[] = {['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't'};
    char s[8];
    size_t n = 0;
    if (cp == '"' || cp == '\\') s[n++] = '\\', s[n++] = (char)cp;
    else if (cp < 0x20 && cp < sizeof short_esc && short_esc[cp]) s[n++] = '\\', s[n++] = short_esc[cp];
    else if (cp < 0x20) n = (size_t)snprintf(s, sizeof s, "\\u%04x", (unsigned)cp);
    else if (cp < 0x80) s[n++] = (char)cp;
    else if (cp < 0x800) s[n++] = (char)(0xc0 | cp >> 6), s[n++] = (char)(0x80 | (cp & 0x3f));
    else if (cp < 0x10000)
        s[n++] = (char)(0xe0 | cp >> 12), s[n++] = (char)(0x80 | (cp >> 6 & 0x3f)), s[n++] = (char)(0x80 | (cp & 0x3f));
    else
        s[n++] = (char)(0xf0 | cp >> 18), s[n++] = (char)(0x80 | (cp >> 12 & 0x3f)),
        s[n++] = (char)(0x80 | (cp >> 6 & 0x3f)), s[n++] = (char)(0x80 | (cp & 0x3f));
    gr_litn(b, r, s, n);
}

/* One non-ASCII character as well-formed UTF-8: no surrogates, nothing above U+10FFFF, and not
 * U+2028 / U+2029 (which ECMAScript's `.` does not match). */
static int utf8_rule(gr_builder *b) {
    int r = gr_rule(b), cont = gr_rule(b);
    gr_range(b, cont, 0x80, 0xbf);
    static const uint8_t lead[][3] = {/* first byte range, the second's range; then continuation bytes */
                                      {0xc2, 0xdf, 0}, {0xe0, 0xe0, 1}, {0xe1, 0xe1, 1}, {0xe3, 0xec, 1},
                                      {0xed, 0xed, 1}, {0xee, 0xef, 1}, {0xf0, 0xf0, 2}, {0xf1, 0xf3, 2},
                                      {0xf4, 0xf4, 2}};
    static const uint8_t second[][2] = {{0x80, 0xbf}, {0xa0, 0xbf}, {0x80, 0xbf}, {0x80, 0xbf}, {0x80, 0x9f},
                                        {0x80, 0xbf}, {0x90, 0xbf}, {0x80, 0xbf}, {0x80, 0x8f}};
    for (int k = 0; k < 9; k++) {
        gr_alt(b, r);
        gr_range(b, r, lead[k][0], lead[k][1]);
        gr_range(b, r, second[k][0], second[k][1]);
        for (int j = 0; j < lead[k][2]; j++) gr_ref(b, r, cont);
    }
    /* E2: all but E2 80 A8 and E2 80 A9 */
    gr_alt(b, r);
    gr_lit(b, r, "\xe2");
    gr_range(b, r, 0x81, 0xbf);
    gr_ref(b, r, cont);
    uint32_t bits[8] = {0};
    for (int c = 0x80; c < 0xc0; c++)
        if (c != 0xa8 && c != 0xa9) bits[c >> 5] |= 1u << (c & 31);
    gr_alt(b, r);
    gr_lit(b, r, "\xe2\x80");
    gr_set(b, r, bits);
    return r;
}

/* A class of characters: ASCII ones by bit, and maybe every non-ASCII one. */
typedef struct cclass {
    uint32_t ascii[4];
    int non_ascii;
} cclass;

static void cc_add(cclass *k, int lo, int hi) {
    for (int c = lo; c <= hi; c++) k->ascii[c >> 5] |= 1u << (c & 31);
}

static int cc_has(const cclass *k, int c) { return k->ascii[c >> 5] >> (c & 31) & 1; }

/* The rule of one character of k: the raw bytes in one set, the characters JSON escapes one by one,
 * any non-ASCII character (utf8, made on first use). -1 when k is empty. */
static int class_rule(gr_builder *b, const cclass *k, int *utf8) {
    int r = gr_rule(b), n = 0;
    uint32_t raw[8] = {0};
    for (int c = 0x20; c < 0x80; c++)
        if (c != '"' && c != '\\' && cc_has(k, c)) raw[c >> 5] |= 1u << (c & 31), n++;
    if (n) gr_set(b, r, raw);
    for (int c = 1; c < 0x80; c++) { /* never U+0000: C strings (and this server's input) end there */
        if (!cc_has(k, c) || (c >= 0x20 && c != '"' && c != '\\')) continue;
        if (n++) gr_alt(b, r);
        put_char(b, r, (uint32_t)c);
    }
    if (k->non_ascii) {
        if (*utf8 < 0) *utf8 = utf8_rule(b);
        if (n++) gr_alt(b, r);
        gr_ref(b, r, *utf8);
    }
    return n ? r : -1;
}

int js_u_escape_rule(gr_builder *b, int hex) {
    /* u then four hex digits, D800-DFFF left out: a lone surrogate is not a character (cJSON refuses it) */
    int r = gr_rule(b), lo = gr_rule(b), s = gr_rule(b);
    gr_range(b, lo, '0', '7');
    gr_range(b, s, 'd', 'd');
    gr_alt(b, s);
    gr_range(b, s, 'D', 'D');
    uint32_t first[8] = {0};
    for (const char *q = "0123456789abcefABCEF"; *q; q++) first[(uint8_t)*q >> 5] |= 1u << (*q & 31);
    gr_lit(b, r, "u");
    gr_set(b, r, first);
    for (int j = 0; j < 3; j++) gr_ref(b, r, hex);
    gr_alt(b, r);
    gr_lit(b, r, "u");
    gr_ref(b, r, s);
    gr_ref(b, r, lo);
    gr_ref(b, r, hex);
    gr_ref(b, r, hex);
    return r;
}

/* ---- patterns ---------------------------------------------------------------------------------- */

typedef struct pat {
    gr_builder *b;
    const char *p, *end;
    char *why;
    size_t n_why;
    int depth, utf8, failed;
} pat;

static int refuse(pat *c, const char *what) {
    if (!c->failed) snprintf(c->why, c->n_why, "%s", what);
    c->failed = 1;
    return -1;
}

/* The code point of the UTF-8 character at c->p (moved past it), or -1 (malformed). */
static long next_cp(pat *c) {
    const uint8_t *s = (const uint8_t *)c->p;
    size_t left = (size_t)(c->end - c->p);
    int n = s[0] < 0x80 ? 1 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : s[0] >= 0xe0 && s[0] < 0xf0 ? 3 : s[0] >= 0xf0 && s[0] < 0xf5 ? 4 : 0;
    if (!n || (size_t)n > left) return -1;
    long cp = n == 1 ? s[0] : s[0] & (0x3f >> (n - 1));
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return -1;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    static const long min_of[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_of[n] || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) return -1;
    c->p += n;
    return cp;
}

/* n hex digits at c->p as a number, or -1. */
static long hex_of(pat *c, int n) {
    long v = 0;
    for (int i = 0; i < n; i++, c->p++) {
        if (c->p >= c->end) return -1;
        char h = *c->p;
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* \d \w \s and their complements (ASCII only: Python's \d, \w, \s also match other scripts' digits,
 * letters and spaces, ECMAScript's do not; both agree on ASCII) into k. */
static void shorthand(cclass *k, char e) {
    cclass s = {{0}, 0};
    if (e == 'd' || e == 'D') cc_add(&s, '0', '9');
    if (e == 'w' || e == 'W') cc_add(&s, '0', '9'), cc_add(&s, 'A', 'Z'), cc_add(&s, 'a', 'z'), cc_add(&s, '_', '_');
    if (e == 's' || e == 'S') cc_add(&s, '\t', '\r'), cc_add(&s, ' ', ' '), cc_add(&s, 0x1c, 0x1f);
    int neg = e == 'D' || e == 'W' || e == 'S';
    for (int c = 0; c < 0x80; c++)
        if (cc_has(&s, c) != neg && !(e == 's' && c >= 0x1c && c <= 0x1f)) /* 0x1c-0x1f: Python's \s only */
            cc_add(k, c, c);
}

/* After a backslash: a character (its code point) or, for \d \w \s \D \W \S, -2 with the class
 * added to k. -1 refused. in_class: \b is a backspace there. */
static long escape(pat *c, cclass *k, int in_class) {
    if (c->p >= c->end) return refuse(c, "a pattern ends with a lone backslash");
    char e = *c->p;
    if (strchr("dwsDWS", e) && e) {
        c->p++;
        shorthand(k, e);
        return -2;
    }
    static const char plain[] = "tnrfv";
    static const char value[] = "\t\n\r\f\v";
    const char *at = strchr(plain, e);
    if (at && e) return c->p++, (unsigned char)value[at - plain];
    if (e == 'b' && in_class) return c->p++, '\b';
    if (e == '0' && !(c->p + 1 < c->end && c->p[1] >= '0' && c->p[1] <= '9')) return c->p++, 0;
    if (e == 'x' || e == 'u') {
        c->p++;
        long v = hex_of(c, e == 'x' ? 2 : 4);
        if (v < 0) return refuse(c, "a pattern's \\x or \\u escape needs 2 or 4 hex digits");
        if (v >= 0xd800 && v < 0xe000) return refuse(c, "a pattern's \\u escape of a surrogate is not supported");
        return v;
    }
    if ((unsigned char)e >= 0x80) { /* an escaped non-ASCII character: itself */
        long cp = next_cp(c);
        return cp < 0 ? refuse(c, "a pattern is not UTF-8") : cp;
    }
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
        return refuse(c, "a pattern uses an escape (\\b, \\B, back references, \\p, \\k, \\c, ...) that is not supported");
    return (unsigned char)*c->p++; /* escaped punctuation: itself */
}

/* After "[": the class up to "]", as a rule. ASCII characters and ranges, escapes; a negated class
 * admits non-ASCII characters unless it holds a shorthand (whose non-ASCII members differ between
 * Python and ECMAScript). */
static int class_atom(pat *c) {
    cclass k = {{0}, 0};
    int neg = c->p < c->end && *c->p == '^', shorthands = 0;
    if (neg) c->p++;
    if (c->p < c->end && *c->p == ']') return refuse(c, "a pattern's class '[]' or '[^]' is not supported");
    while (c->p < c->end && *c->p != ']') {
        long lo, hi;
        if (*c->p == '\\') {
            c->p++;
            lo = escape(c, &k, 1);
            if (lo == -2) { shorthands = 1; continue; }
        } else lo = next_cp(c);
        if (lo < 0) return c->failed ? -1 : refuse(c, "a pattern is not UTF-8");
        hi = lo;
        if (c->p + 1 < c->end && *c->p == '-' && c->p[1] != ']') {
            c->p++;
            if (*c->p == '\\') {
                c->p++;
                hi = escape(c, &k, 1);
                if (hi == -2) return refuse(c, "a pattern's class has a range ending in a shorthand (\\d, \\w, ...)");
            } else hi = next_cp(c);
            if (hi < 0) return c->failed ? -1 : refuse(c, "a pattern is not UTF-8");
            if (hi < lo) return refuse(c, "a pattern's class has a range out of order");
        }
        if (hi >= 0x80) return refuse(c, "a pattern's class with non-ASCII characters is not supported");
        cc_add(&k, (int)lo, (int)hi);
    }
    if (c->p >= c->end) return refuse(c, "a pattern has a '[' without its ']'");
    c->p++;
    if (neg) {
        for (int i = 0; i < 4; i++) k.ascii[i] = ~k.ascii[i];
        k.non_ascii = !shorthands;
    }
    int r = class_rule(c->b, &k, &c->utf8);
    return r < 0 ? refuse(c, "a pattern's class matches nothing") : r;
}

static int alt_rule(pat *c);

/* One atom at c->p: a group, a class, ".", an escape or a literal character. */
static int atom(pat *c) {
    gr_builder *b = c->b;
    char ch = *c->p;
    if (ch == '(') {
        c->p++;
        if (c->p < c->end && *c->p == '?') {
            const char *q = c->p + 1;
            if (q < c->end && *q == ':') c->p = q + 1;
            else if (q + 1 < c->end && (*q == '<' || (*q == 'P' && q[1] == '<')) && q[*q == 'P' ? 2 : 1] != '=' &&
                     q[*q == 'P' ? 2 : 1] != '!') {
                const char *e = memchr(q, '>', (size_t)(c->end - q));
                if (!e) return refuse(c, "a pattern's group name has no '>'");
                c->p = e + 1;
            } else
                return refuse(c, "a pattern uses lookaround or a '(?' construct that is not supported");
        }
        c->depth++;
        int r = alt_rule(c);
        c->depth--;
        if (r < 0) return -1;
        if (c->p >= c->end || *c->p != ')') return refuse(c, "a pattern has a '(' without its ')'");
        c->p++;
        return r;
    }
    if (ch == '[') {
        c->p++;
        return class_atom(c);
    }
    cclass k = {{0}, 0};
    long cp;
    if (ch == '.') {
        c->p++;
        cc_add(&k, 0, 0x7f);
        k.ascii[0] &= ~(1u << '\n' | 1u << '\r');
        k.non_ascii = 1;
        return class_rule(b, &k, &c->utf8);
    }
    if (ch == '\\') {
        c->p++;
        cp = escape(c, &k, 0);
        if (cp == -2) return class_rule(b, &k, &c->utf8);
    } else if (strchr("*+?{", ch)) {
        return refuse(c, "a pattern has a quantifier with nothing before it");
    } else if (ch == '^' || ch == '$') {
        return refuse(c, "a pattern's '^' or '$' other than at its very start or end is not supported");
    } else {
        cp = next_cp(c);
        if (cp < 0) return refuse(c, "a pattern is not UTF-8");
    }
    if (cp < 0) return -1;
    int r = gr_rule(b);
    put_char(b, r, (uint32_t)cp);
    return r;
}

/* A count of a {n,m} quantifier at c->p, or -1. */
static int count_at(pat *c) {
    int v = 0, n = 0;
    for (; c->p < c->end && *c->p >= '0' && *c->p <= '9' && v <= 1000; c->p++, n++) v = v * 10 + (*c->p - '0');
    return n ? v : -1;
}

/* The atom x under the quantifier at c->p, if any. */
static int quantified(pat *c, int x) {
    if (c->p >= c->end) return x;
    int min, max;
    char q = *c->p;
    if (q == '*') min = 0, max = -1;
    else if (q == '+') min = 1, max = -1;
    else if (q == '?') min = 0, max = 1;
    else if (q == '{') {
        c->p++;
        min = count_at(c);
        max = min;
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            max = c->p < c->end && *c->p == '}' ? -1 : count_at(c);
            if (max == -1 && (c->p >= c->end || *c->p != '}')) return refuse(c, "a pattern's {n,m} is malformed");
        }
        if (min < 0 || c->p >= c->end || *c->p != '}') return refuse(c, "a pattern's {n,m} is malformed");
        if (min > 1000 || max > 1000) return refuse(c, "a pattern's {n,m} counts above 1000 are not supported");
        if (max >= 0 && max < min) return refuse(c, "a pattern's {n,m} has m below n");
    } else
        return x;
    c->p++;
    if (c->p < c->end && *c->p == '?') c->p++; /* lazy: the same strings */
    else if (c->p < c->end && *c->p == '+') return refuse(c, "a pattern's possessive quantifiers are not supported");
    if (c->p < c->end && strchr("*+?{", *c->p)) return refuse(c, "a pattern has a quantifier after a quantifier");
    return gr_repeat(c->b, x, min, max);
}

/* Alternatives separated by "|", up to ")" or the end. */
static int alt_rule(pat *c) {
    gr_builder *b = c->b;
    int r = gr_rule(b);
    gr_alt(b, r);
    while (c->p < c->end && *c->p != ')') {
        if (*c->p == '|') {
            c->p++;
            gr_alt(b, r);
            continue;
        }
        int x = atom(c);
        if (x >= 0) x = quantified(c, x);
        if (x < 0) return -1;
        gr_ref(b, r, x);
    }
    return r;
}

/* Any characters (an unanchored end): raw bytes of UTF-8 text and escapes, as json_schema.c's
 * unbounded strings. */
static int any_rule(gr_builder *b) {
    int chr = gr_rule(b), hex = gr_rule(b), esc = gr_rule(b);
    uint32_t bits[8] = {0};
    for (int k = 0x20; k < 0x100; k++)
        if (k != '"' && k != '\\' && k != 0xc0 && k != 0xc1 && k < 0xf5) bits[k >> 5] |= 1u << (k & 31);
    gr_set(b, chr, bits);
    gr_alt(b, chr);
    gr_lit(b, chr, "\\");
    gr_ref(b, chr, esc);
    uint32_t e[8] = {0};
    for (const char *q = "\"\\/bfnrt"; *q; q++) e[(uint8_t)*q >> 5] |= 1u << (*q & 31);
    gr_set(b, esc, e);
    gr_range(b, hex, '0', '9');
    gr_alt(b, hex);
    gr_range(b, hex, 'a', 'f');
    gr_alt(b, hex);
    gr_range(b, hex, 'A', 'F');
    gr_alt(b, esc);
    gr_ref(b, esc, js_u_escape_rule(b, hex));
    return gr_repeat(b, chr, 0, -1);
}

int js_pattern_rule(gr_builder *b, const char *pattern, char *why, size_t n_why) {
    pat c = {b, pattern, pattern + strlen(pattern), why, n_why, 0, -1, 0};
    if (n_why) why[0] = 0;
    int head = c.p < c.end && *c.p == '^', tail = 0;
    c.p += head;
    /* a "$" at the very end (not escaped) anchors the end */
    if (c.end > c.p && c.end[-1] == '$') {
        size_t bs = 0;
        for (const char *q = c.end - 2; q >= c.p && *q == '\\'; q--) bs++;
        if (bs % 2 == 0) tail = 1, c.end--;
    }
    int body = alt_rule(&c);
    if (body < 0) return -1;
    if (c.p < c.end) return refuse(&c, "a pattern has a ')' without its '('");
    if ((head || tail) && memchr(pattern, '|', strlen(pattern))) {
        /* "^a|b$" anchors a's start and b's end only: allowed when every "|" is inside a group */
        int depth = 0, top_bar = 0;
        for (const char *q = pattern; *q; q++) {
            if (*q == '\\' && q[1]) q++;
            else if (*q == '[') { /* skip the class */
                for (q++; *q && *q != ']'; q++)
                    if (*q == '\\' && q[1]) q++;
                if (!*q) break;
            } else if (*q == '(') depth++;
            else if (*q == ')') depth--;
            else if (*q == '|' && depth == 0) top_bar = 1;
        }
        if (top_bar) return refuse(&c, "a pattern with anchors and '|' outside a group is not supported (write ^(a|b)$)");
    }
    int r = gr_rule(b), any = head && tail ? -1 : any_rule(b);
    gr_lit(b, r, "\"");
    if (!head) gr_ref(b, r, any);
    gr_ref(b, r, body);
    if (!tail) gr_ref(b, r, any);
    gr_lit(b, r, "\"");
    return r;
}

/* ---- formats ----------------------------------------------------------------------------------- */

/* A rule of alternatives given as a tiny notation: "|" separates alternatives; "[xy]" is the byte
 * range x..y; "<n>" refers to refs[n]; any other byte is itself. */
static int alts(gr_builder *b, const char *spec, const int *refs) {
    int r = gr_rule(b);
    gr_alt(b, r);
    for (const char *q = spec; *q; q++) {
        if (*q == '|') gr_alt(b, r);
        else if (*q == '[' && q[1] && q[2] && q[3] == ']') gr_range(b, r, (uint8_t)q[1], (uint8_t)q[2]), q += 3;
        else if (*q == '<' && q[1] >= '0' && q[1] <= '9' && q[2] == '>') gr_ref(b, r, refs[q[1] - '0']), q += 2;
        else gr_litn(b, r, q, 1);
    }
    return r;
}

/* YYYY-MM-DD of a day that exists (29 February in leap years only), years 0001-9999. */
static int date_rule(gr_builder *b) {
    int d = alts(b, "[09]", NULL), a = alts(b, "0|4|8", NULL), c = alts(b, "2|6", NULL);
    int l2 = alts(b, "04|08|2<0>|4<0>|6<0>|8<0>|1<1>|3<1>|5<1>|7<1>|9<1>", (int[]){a, c}); /* 04 .. 96, by 4 */
    int year = alts(b, "000[19]|00[19]<0>|0[19]<0><0>|[19]<0><0><0>", (int[]){d});
    int leap = alts(b, "<0><0><1>|<1>00", (int[]){d, l2});
    int d28 = alts(b, "0[19]|1[09]|2[08]", NULL);
    int d30 = alts(b, "<0>|29|30", (int[]){d28});
    int d31 = alts(b, "<0>|31", (int[]){d30});
    int m31 = alts(b, "01|03|05|07|08|10|12", NULL), m30 = alts(b, "04|06|09|11", NULL);
    return alts(b, "<0>-<5>-<3>|<0>-<6>-<2>|<0>-02-<1>|<4>-02-29", (int[]){year, d28, d30, d31, leap, m31, m30});
}

/* HH:MM:SS, a fraction of 1-6 digits or none, Z or +HH:MM / -HH:MM. */
static int time_rule(gr_builder *b) {
    int d = alts(b, "[09]", NULL);
    int hh = alts(b, "[01]<0>|2[03]", (int[]){d}), mm = alts(b, "[05]<0>", (int[]){d});
    int frac = alts(b, "|.<0>", (int[]){gr_repeat(b, d, 1, 6)});
    return alts(b, "<0>:<1>:<1><2>Z|<0>:<1>:<1><2>+<0>:<1>|<0>:<1>:<1><2>-<0>:<1>", (int[]){hh, mm, frac});
}

int js_format_rule(gr_builder *b, const char *format) {
    int body;
    if (!strcmp(format, "date")) body = date_rule(b);
    else if (!strcmp(format, "time")) body = time_rule(b);
    else if (!strcmp(format, "date-time")) body = alts(b, "<0>T<1>", (int[]){date_rule(b), time_rule(b)});
    else if (!strcmp(format, "uuid")) {
        int h = alts(b, "[09]|[af]|[AF]", NULL);
        int h4 = gr_repeat(b, h, 4, 4);
        body = alts(b, "<0><0>-<0>-<0>-<0>-<0><0><0>", (int[]){h4});
    } else if (!strcmp(format, "email")) {
        uint32_t at[8] = {0};
        for (const char *q = "!#$%&'*+/=?^_`{|}~-"; *q; q++) at[(uint8_t)*q >> 5] |= 1u << (*q & 31);
        int atext = alts(b, "[09]|[AZ]|[az]", NULL);
        gr_alt(b, atext);
        gr_set(b, atext, at);
        /* bounded (a subset of what RFC 5321 allows): up to 4 words of 32 before the @, up to 4 labels
         * of 32 after it, so that the answer reaches its end */
        int word = gr_repeat(b, atext, 1, 32), an = alts(b, "[09]|[AZ]|[az]", NULL);
        int dot_word = alts(b, ".<0>", (int[]){word});
        int local = alts(b, "<0><1>", (int[]){word, gr_repeat(b, dot_word, 0, 3)});
        int inner = alts(b, "<0>|-", (int[]){an});
        int label = alts(b, "<0>|<0><1><0>", (int[]){an, gr_repeat(b, inner, 0, 30)});
        int dot_label = alts(b, ".<0>", (int[]){label});
        body = alts(b, "<0>@<1><2>", (int[]){local, label, gr_repeat(b, dot_label, 1, 3)});
    } else if (!strcmp(format, "ipv4")) {
        int d = alts(b, "[09]", NULL);
        int octet = alts(b, "25[05]|2[04]<0>|1<0><0>|[19]<0>|<0>", (int[]){d});
        body = alts(b, "<0>.<0>.<0>.<0>", (int[]){octet});
    } else
        return -1;
    return alts(b, "\"<0>\"", (int[]){body});
}

/* ---- integer ranges ---------------------------------------------------------------------------- */

/* The digit strings from lo to hi, both of n digits (lo <= hi). */
static int same_length(gr_builder *b, const char *lo, const char *hi, int n, int digit) {
    int r = gr_rule(b);
    gr_alt(b, r);
    if (n == 0) return r;
    if (lo[0] == hi[0]) {
        gr_litn(b, r, lo, 1);
        gr_ref(b, r, same_length(b, lo + 1, hi + 1, n - 1, digit));
        return r;
    }
    int lo_zeros = 1, hi_nines = 1;
    for (int i = 1; i < n; i++) lo_zeros &= lo[i] == '0', hi_nines &= hi[i] == '9';
    char nines[16], zeros[16];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    int first = 1;
    if (!lo_zeros) { /* lo[0] then lo's rest .. 9...9 */
        gr_litn(b, r, lo, 1);
        gr_ref(b, r, same_length(b, lo + 1, nines, n - 1, digit));
        first = 0;
    }
    char from = (char)(lo[0] + !lo_zeros), to = (char)(hi[0] - !hi_nines);
    if (from <= to) { /* the whole decades between */
        if (!first) gr_alt(b, r);
        gr_range(b, r, (uint8_t)from, (uint8_t)to);
        gr_ref(b, r, gr_repeat(b, digit, n - 1, n - 1));
        first = 0;
    }
    if (!hi_nines) {
        if (!first) gr_alt(b, r);
        gr_litn(b, r, hi, 1);
        gr_ref(b, r, same_length(b, zeros, hi + 1, n - 1, digit));
    }
    return r;
}

/* The decimal texts of lo..hi, 0 <= lo <= hi, as alternatives of r. */
static void nonneg_range(gr_builder *b, int r, int64_t lo, int64_t hi, int digit) {
    char a[24], z[24];
    int la = snprintf(a, sizeof a, "%lld", (long long)lo), lz = snprintf(z, sizeof z, "%lld", (long long)hi);
    int64_t p = 1;
    for (int i = 1; i < la; i++) p *= 10;
    for (int len = la; len <= lz; len++, p *= 10) {
        int64_t from = len == la ? lo : p, to = len == lz ? hi : p * 10 - 1;
        char f[24], t[24];
        snprintf(f, sizeof f, "%lld", (long long)from);
        snprintf(t, sizeof t, "%lld", (long long)to);
        gr_alt(b, r);
        gr_ref(b, r, same_length(b, f, t, len, digit));
    }
}

int js_int_range_rule(gr_builder *b, int64_t lo, int64_t hi) {
    if (lo < -JS_INT_MAX) lo = -JS_INT_MAX;
    if (hi > JS_INT_MAX) hi = JS_INT_MAX;
    int digit = alts(b, "[09]", NULL), r = gr_rule(b);
    if (hi >= 0 && lo <= hi) nonneg_range(b, r, lo > 0 ? lo : 0, hi, digit);
    if (lo < 0 && lo <= hi) {
        int neg = gr_rule(b);
        nonneg_range(b, neg, hi < 0 ? -hi : 1, -lo, digit);
        gr_alt(b, r);
        gr_lit(b, r, "-");
        gr_ref(b, r, neg);
    }
    return r;
}

/* ---- number ranges ----------------------------------------------------------------------------- */

enum { F_ANY, F_ZERO, F_NONZERO }; /* a fraction: any or none; only zeros or none; one not zero */

/* Which pieces m = I.F with lo <= m (lo < m when lo_ex) and m <= hi (m < hi when hi_ex; hi < 0: no
 * bound) takes: 1 I in lo+lo_ex .. hi-1 with any F; 2 I = lo with F not zero (lo_ex); 4 I = hi with F
 * zero (not hi_ex). */
static int mag_pieces(int64_t lo, int lo_ex, int64_t hi, int hi_ex) {
    int64_t ihi = hi < 0 ? JS_INT_MAX : hi - 1;
    int p = lo + lo_ex <= ihi;
    if (lo_ex && (hi < 0 || lo < hi)) p |= 2;
    if (hi >= 0 && !hi_ex && (hi > lo || !lo_ex)) p |= 4;
    return p;
}

/* One piece: I in a..b, then a fraction of its kind, as r's next alternative. */
static void mag_piece(gr_builder *b, int r, int64_t a, int64_t z, int digit, int frac) {
    int ip = gr_rule(b);
    nonneg_range(b, ip, a, z, digit);
    gr_alt(b, r);
    gr_ref(b, r, ip);
    gr_ref(b, r, frac);
}

/* The magnitudes mag_pieces describes (p != 0), as a rule. */
static int magnitude(gr_builder *b, int64_t lo, int lo_ex, int64_t hi, int hi_ex, int digit, const int *frac) {
    int p = mag_pieces(lo, lo_ex, hi, hi_ex), r = gr_rule(b);
    if (p & 1) mag_piece(b, r, lo + lo_ex, hi < 0 ? JS_INT_MAX : hi - 1, digit, frac[F_ANY]);
    if (p & 2) mag_piece(b, r, lo, lo, digit, frac[F_NONZERO]);
    if (p & 4) mag_piece(b, r, hi, hi, digit, frac[F_ZERO]);
    return r;
}

int js_number_range_rule(gr_builder *b, const js_bounds *k) {
    int digit = alts(b, "[09]", NULL), frac[3];
    frac[F_ANY] = alts(b, "|.<0>", (int[]){gr_repeat(b, digit, 1, 16)});
    frac[F_ZERO] = alts(b, "|.<0>", (int[]){gr_repeat(b, alts(b, "0", NULL), 1, 16)});
    frac[F_NONZERO] = alts(b, ".<0>[19]<1>", (int[]){gr_repeat(b, alts(b, "0", NULL), 0, 15), gr_repeat(b, digit, 0, 15)});
    int r = gr_rule(b), n = 0;
    /* x >= 0: m = x, from max(lo, 0) (inclusive when lo < 0) up to hi */
    if (!k->has_hi || k->hi > 0 || (k->hi == 0 && !k->hi_ex)) {
        int64_t lo = k->has_lo && k->lo > 0 ? k->lo : 0;
        int lo_ex = k->has_lo && k->lo >= 0 ? k->lo_ex : 0;
        if (mag_pieces(lo, lo_ex, k->has_hi ? k->hi : -1, k->hi_ex)) {
            gr_alt(b, r);
            gr_ref(b, r, magnitude(b, lo, lo_ex, k->has_hi ? k->hi : -1, k->hi_ex, digit, frac));
            n++;
        }
    }
    /* x < 0: "-" m, m > 0, m from -hi (or 0) up to -lo (or no bound) */
    if (!k->has_lo || k->lo < 0) {
        int64_t lo = k->has_hi && k->hi < 0 ? -k->hi : 0, hi = k->has_lo ? -k->lo : -1;
        int lo_ex = k->has_hi && k->hi < 0 ? k->hi_ex : 1, hi_ex = k->has_lo ? k->lo_ex : 0;
        if (mag_pieces(lo, lo_ex, hi, hi_ex)) {
            gr_alt(b, r);
            gr_lit(b, r, "-");
            gr_ref(b, r, magnitude(b, lo, lo_ex, hi, hi_ex, digit, frac));
            n++;
        }
    }
    if (!n) gr_alt(b, r); /* the caller's bounds admit a number: not reached */
    return r;
}
