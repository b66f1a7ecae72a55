/*
 * json_string.h — grammars of JSON texts that JSON Schema keywords ask for beyond their type
 * (text/json_schema.c uses them): a string matching a regular expression (`pattern`), a string of a
 * `format`, an integer within bounds (`minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`).
 *
 * Each rule's sentences all validate (with Python's `re` and with ECMAScript regular expressions;
 * with Python's datetime / uuid / ipaddress for the formats); a rule may leave out some texts that
 * would validate (a `.` writes no JSON escape but \t; a class such as \D writes ASCII only), never the
 * other way round.
 */
#ifndef SL_TEXT_JSON_STRING_H
#define SL_TEXT_JSON_STRING_H

#include <stddef.h>
#include <stdint.h>

#include "text/grammar.h"

/* The rule of a JSON string (quotes included) whose value matches pattern, as `re.search` and
 * ECMAScript's RegExp.test do (unanchored ends match anything there). Supported: literal characters
 * (any UTF-8), `.`, classes `[...]` / `[^...]` of ASCII characters and ranges, escapes \d \w \s \D \W
 * \S \t \n \r \f \v \0 \xHH \uHHHH and escaped punctuation, groups `(...)`, `(?:...)`, `(?<name>...)`,
 * `(?P<name>...)`, alternation `|`, quantifiers * + ? {n} {n,} {n,m} (lazy forms alike; counts up to
 * 1000), `^` first and `$` last. Anything else (lookaround, back references, \b, \p{...}, anchors
 * elsewhere, non-ASCII characters in a class) is refused: -1 with why (a sentence). Out of memory:
 * -1, why "" (b records the failure). */
int js_pattern_rule(gr_builder *b, const char *pattern, char *why, size_t n_why);

/* The rule of a JSON string escape's "uXXXX" (after the backslash) of a character: no surrogates.
 * hex: a rule of one hex digit. */
int js_u_escape_rule(gr_builder *b, int hex);

/* The rule of a JSON string of a format: "date" (YYYY-MM-DD, a real calendar day, year 0001-9999),
 * "time" (HH:MM:SS, optional fraction, then Z or an offset, as RFC 3339), "date-time" (date "T" time),
 * "uuid" (8-4-4-4-12 hex digits), "email" (dot-atom "@" a domain of 2-4 labels; words and labels of at most 32 characters), "ipv4"
 * (four decimal bytes, no leading zeros). -1 for another format (the caller refuses it), or out of
 * memory (b records it). */
int js_format_rule(gr_builder *b, const char *format);

/* The rule of the integers lo..hi as JSON texts (no leading zeros, no "-0"); |lo|, |hi| at most
 * JS_INT_MAX. -1 out of memory (b records it). */
#define JS_INT_MAX 999999999999999LL /* 15 digits: the integer rule's limit (json_schema.c) */
int js_int_range_rule(gr_builder *b, int64_t lo, int64_t hi);

/* Bounds of a number: lo (exclusive when lo_ex) if has_lo, hi likewise; integers within JS_INT_MAX. */
typedef struct js_bounds {
    int has_lo, lo_ex, has_hi, hi_ex;
    int64_t lo, hi;
} js_bounds;
/* The rule of the numbers within bounds (which must admit one; an integer or a whole range does) as
 * JSON texts: an integer part of at most 15 digits, a fraction or none, no exponent. -1 out of memory. */
int js_number_range_rule(gr_builder *b, const js_bounds *k);

#endif
