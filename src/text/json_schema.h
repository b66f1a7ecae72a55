/*
 * json_schema.h — a JSON Schema as a byte grammar (text/grammar.h) of the JSON texts it validates: the
 * grammar behind structured outputs (OpenAI's response_format json_schema / json_object, Anthropic's
 * output_format, a forced tool call's arguments). The design follows llama.cpp's
 * common/json-schema-to-grammar.cpp (a rule per schema, properties in their declared order, bounded
 * repetitions spelled out), written for this grammar builder.
 *
 * Supported: type (a name or a list of names: object, array, string, number, integer, boolean, null),
 * properties, required, additionalProperties (false, true or a schema; absent: none when there are
 * properties, any when there are none), items, minItems, maxItems, minLength, maxLength, enum, const,
 * anyOf, oneOf (as anyOf), allOf of one schema, $ref to "#" or a JSON pointer in the same document
 * ("#/$defs/NAME", "#/definitions/NAME"; recursion allowed), $defs / definitions, and the annotations
 * title, description, default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly
 * (ignored). Through text/json_string.c: pattern (a regular expression subset), format (date, time,
 * date-time, uuid, email, ipv4), minimum / maximum / exclusiveMinimum / exclusiveMaximum on integers
 * (any bounds) and on numbers (integer-valued bounds); a string takes one of pattern, format or
 * minLength / maxLength. A schema without a type but with a string's keywords is a string, with bounds
 * an integer. Anything else (multipleOf, uniqueItems, prefixItems, not, if / then / else,
 * patternProperties, other formats, non-integer bounds on numbers, ...) is refused naming the keyword,
 * since the output could not be guaranteed to validate.
 *
 * The texts: objects and arrays with optional whitespace (none, one space, or a newline and up to 32
 * spaces) after "{", "[", "," and ":" and before "}", "]", ","; strings of JSON escapes and UTF-8
 * (well-formed, counted in characters, under minLength / maxLength; without them any byte that UTF-8
 * uses, which the tokens' text supplies, for a mask ~3.5x cheaper); numbers of at most 15 integer digits, 16 fraction digits and 3 exponent digits (integers:
 * no fraction or exponent); no whitespace before or after the whole value.
 */
#ifndef SL_TEXT_JSON_SCHEMA_H
#define SL_TEXT_JSON_SCHEMA_H

#include "sluice.h"
#include "text/grammar.h"

struct cJSON;

/* Adds to b the rules of schema's JSON texts; returns the rule's id, or -1 with err (SL_EINVAL: an
 * unsupported or malformed schema, the message naming the keyword and where it is, as a JSON pointer;
 * SL_ENOMEM). schema NULL: any JSON value. */
int js_schema_rule(gr_builder *b, const struct cJSON *schema, sl_error *err);
/* The rule of optional whitespace between tokens (as above), made once per builder call. */
int js_ws_rule(gr_builder *b);

/* A whole grammar for schema (js_schema_rule as the root). */
sl_status js_schema_grammar(const struct cJSON *schema, gr_grammar **out, sl_error *err);

#endif
