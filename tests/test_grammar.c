/* test_grammar.c — the byte grammar's recogniser (text/grammar.h), JSON Schema grammars
 * (text/json_schema.h) on texts that validate and texts that do not, the refusals of unsupported
 * keywords, and the logit mask against a brute-force check of every token, then random walks under the
 * mask that always end in text that parses. */
#include <cjson/cJSON.h>
#include <math.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "text/grammar.h"
#include "text/json_schema.h"

/* 1 when text is a whole sentence of g: every byte accepted, and complete at its end. */
static int matches(const gr_grammar *g, const char *text) {
    gr_state *st = NULL;
    if (gr_state_new(g, &st)) return -1;
    int ok = gr_accept(st, text, strlen(text)) == 0 && gr_complete(st);
    gr_state_free(st);
    return ok;
}

static gr_grammar *schema_grammar(const char *json, sl_error *err) {
    cJSON *s = json ? cJSON_Parse(json) : NULL;
    gr_grammar *g = NULL;
    memset(err, 0, sizeof *err);
    js_schema_grammar(s, &g, err);
    cJSON_Delete(s);
    return g;
}

TEST(grammar_builder_rules) {
    /* root ::= "a" x | "b"; x ::= [0-9] x | "" (digits, right recursive); also "c" y where y nests */
    gr_builder *b = gr_builder_new();
    int root = gr_rule(b), x = gr_rule(b), y = gr_rule(b);
    gr_lit(b, root, "a");
    gr_ref(b, root, x);
    gr_alt(b, root);
    gr_lit(b, root, "b");
    gr_alt(b, root);
    gr_lit(b, root, "(");
    gr_ref(b, root, y);
    gr_lit(b, root, ")");
    gr_range(b, x, '0', '9');
    gr_ref(b, x, x);
    gr_alt(b, x);
    gr_lit(b, y, "(");
    gr_ref(b, y, y); /* balanced parentheses: the stack grows */
    gr_lit(b, y, ")");
    gr_alt(b, y);
    int rep = gr_repeat(b, x, 0, 0);
    (void)rep;
    gr_grammar *g = NULL;
    sl_error err = {0};
    CHECK(gr_compile(b, root, &g, &err) == SL_OK);
    gr_builder_free(b);
    static const char *yes[] = {"a", "a0", "a0123456789", "b", "()", "(())", "((((()))))"};
    static const char *no[] = {"", "ab", "b0", "c", "(", "(()", "())", "a0a"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) CHECKF(matches(g, yes[i]) == 1, "%s", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) CHECKF(matches(g, no[i]) == 0, "%s", no[i]);
    /* a refused byte leaves the state as it was; finished only when nothing may follow */
    gr_state *st = NULL;
    CHECK(gr_state_new(g, &st) == SL_OK);
    CHECK(gr_accept(st, "a1", 2) == 0 && gr_complete(st) && !gr_finished(st));
    CHECK(gr_accept(st, "x", 1) == -1 && gr_accept(st, "2", 1) == 0 && gr_complete(st));
    gr_state_free(st);
    CHECK(gr_state_new(g, &st) == SL_OK);
    CHECK(gr_accept(st, "b", 1) == 0 && gr_finished(st));
    gr_state_free(st);
    gr_grammar_free(g);
    /* a rule without an alternative, a reference to nothing */
    b = gr_builder_new();
    root = gr_rule(b);
    gr_ref(b, root, gr_rule(b));
    CHECK(gr_compile(b, root, &g, &err) == SL_EINVAL && g == NULL);
    gr_builder_free(b);
}

TEST(grammar_repeat_bounds) {
    gr_builder *b = gr_builder_new();
    int d = gr_rule(b);
    gr_range(b, d, '0', '9');
    int r = gr_repeat(b, d, 2, 4);
    gr_grammar *g = NULL;
    sl_error err = {0};
    CHECK(gr_compile(b, r, &g, &err) == SL_OK);
    gr_builder_free(b);
    CHECK(!matches(g, "1") && matches(g, "12") && matches(g, "123") && matches(g, "1234") && !matches(g, "12345"));
    gr_grammar_free(g);
}

TEST(grammar_json_schema_texts) {
    static const struct {
        const char *schema;
        const char *yes[6], *no[6];
    } cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"}},"
         "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
         {"{\"name\":\"Ruth\",\"age\":30}", "{ \"name\": \"Bo\\\"az\", \"age\": -1 }", "{\n  \"name\": \"é\",\n  \"age\": 0\n}"},
         {"{\"age\":30,\"name\":\"Ruth\"}", "{\"name\":\"Ruth\"}", "{\"name\":\"Ruth\",\"age\":3.5}",
          "{\"name\":\"Ruth\",\"age\":30,\"x\":1}", "{\"name\":\"a\nb\",\"age\":1}", "{\"name\":\"Ruth\",\"age\":01}"}},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":\"null\"},\"c\":{\"enum\":[\"x\",2]}},"
         "\"required\":[\"b\"]}",
         {"{\"b\":null}", "{\"a\":true,\"b\":null}", "{\"b\":null,\"c\":2}", "{\"a\":false,\"b\":null,\"c\":\"x\"}"},
         {"{}", "{\"a\":true}", "{\"b\":null,\"c\":3}", "{\"b\":null,}", "{,\"b\":null}", "{\"b\":null \"c\":2}"}},
        {"{\"type\":\"array\",\"items\":{\"type\":\"number\"},\"minItems\":1,\"maxItems\":3}",
         {"[1]", "[1.5, -2e10, 0.25]", "[ 3 ]", "[1E+2,2]"},
         {"[]", "[1,2,3,4]", "[1,]", "[.5]", "[1.]", "[\"1\"]"}},
        {"{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"null\"}]}",
         {"\"\"", "\"ab\"", "null", "\"\\u00e9x\""},
         {"\"abc\"", "nul", "1", "\"\\x\""}},
        {"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"const\":1},\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},"
         "{\"type\":\"null\"}]}},\"required\":[\"v\",\"next\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}",
         {"{\"v\":1,\"next\":null}", "{\"v\":1,\"next\":{\"v\":1,\"next\":{\"v\":1,\"next\":null}}}"},
         {"{\"v\":2,\"next\":null}", "{\"v\":1,\"next\":{\"v\":1}}", "{\"v\":1}"}},
        {"{\"type\":[\"integer\",\"boolean\"]}", {"7", "true", "-12"}, {"7.5", "\"7\"", "null"}},
        {"{\"type\":\"object\"}", /* json_object: any object */
         {"{}", "{\"a\":[1,{\"b\":null}],\"c\":\"d\"}", "{ }"},
         {"[]", "\"x\"", "{\"a\"}", "{\"a\":}"}},
        {NULL, {"1", "[{\"a\":[]}]", "\"x\"", "null"}, {"", "[", "{\"a\":1,}", "tru"}}, /* any value */
        /* pattern: anchored, unanchored (anything around), classes, escapes written as JSON escapes */
        {"{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}$\"}",
         {"\"AB-123\"", "\"ZZ-000\""},
         {"\"AB-12\"", "\"ab-123\"", "\"AB-1234\"", "\"xAB-123\"", "\"AB123\""}},
        {"{\"pattern\":\"b+c\"}",
         {"\"bc\"", "\"abbbcd\"", "\"é\\\"bc\\n\""},
         {"\"b\"", "\"cb\"", "\"\"", "bc"}},
        {"{\"type\":\"string\",\"pattern\":\"^(?:a|\\\"|\\\\\\\\)?[^a-z\\\\s]*$\"}",
         {"\"\"", "\"a\"", "\"\\\"A1\"", "\"\\\\Z9\"", "\"\\u0001\"", "\"\\\"\\\"\""},
         {"\"aa\"", "\"ab\"", "\"a b\"", "\"\\t\"", "\"é\""}},
        /* formats */
        {"{\"type\":\"string\",\"format\":\"date-time\"}",
         {"\"2024-02-29T23:59:59Z\"", "\"0001-01-01T00:00:00.5+14:00\"", "\"2000-02-29T12:00:00-05:30\""},
         {"\"2023-02-29T00:00:00Z\"", "\"2024-02-29T24:00:00Z\"", "\"2024-02-29 00:00:00Z\"", "\"2024-02-29T00:00:00\"", "\"0000-01-01T00:00:00Z\"", "\"1900-02-29T00:00:00Z\""}},
        {"{\"type\":\"string\",\"format\":\"uuid\"}",
         {"\"0f8fad5b-d9cb-469f-a165-70867728950e\"", "\"0F8FAD5B-D9CB-469F-A165-70867728950E\""},
         {"\"0f8fad5b-d9cb-469f-a165-70867728950\"", "\"0f8fad5bd9cb469fa16570867728950e\"", "\"0g8fad5b-d9cb-469f-a165-70867728950e\""}},
        {"{\"type\":\"string\",\"format\":\"email\"}",
         {"\"ruth@moab.example\"", "\"a.b+c@x-y.co.uk\""},
         {"\"ruth@moab\"", "\"@moab.example\"", "\"ruth.@moab.example\"", "\"ruth@-moab.example\"", "\"a b@c.d\""}},
        {"{\"type\":\"string\",\"format\":\"ipv4\"}",
         {"\"0.0.0.0\"", "\"255.255.255.255\"", "\"10.249.1.99\""},
         {"\"256.1.1.1\"", "\"01.1.1.1\"", "\"1.1.1\"", "\"1.1.1.1.1\""}},
        /* integer bounds, inclusive and exclusive, draft 4's boolean form */
        {"{\"type\":\"integer\",\"minimum\":-12,\"exclusiveMaximum\":105}",
         {"-12", "0", "104", "-1", "99"},
         {"-13", "105", "-0", "007", "1000", "5.0"}},
        {"{\"type\":\"integer\",\"minimum\":3,\"exclusiveMinimum\":true}",
         {"4", "1000000", "999999999999999"},
         {"3", "-4", "0", "1000000000000000"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sl_error err;
        gr_grammar *g = schema_grammar(cases[i].schema, &err);
        CHECKF(g, "case %zu: %s", i, err.msg);
        for (int k = 0; k < 6 && cases[i].yes[k]; k++) CHECKF(matches(g, cases[i].yes[k]) == 1, "case %zu: %s refused", i, cases[i].yes[k]);
        for (int k = 0; k < 6 && cases[i].no[k]; k++) CHECKF(matches(g, cases[i].no[k]) == 0, "case %zu: %s accepted", i, cases[i].no[k]);
        gr_grammar_free(g);
    }
}

TEST(grammar_json_schema_refusals) {
    static const struct {
        const char *schema, *needle;
    } cases[] = {
        {"{\"type\":\"string\",\"pattern\":\"^a(?=b)\"}", "'pattern': a pattern uses lookaround"},
        {"{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\",\"minimum\":0.5}}}", "on a number must be an integer of at most 15 digits (at /properties/n)"},
        {"{\"type\":\"array\",\"items\":{\"format\":\"hostname\"}}", "format 'hostname' is not supported (at /items)"},
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "escape (\\b, \\B, back references"},
        {"{\"type\":\"string\",\"pattern\":\"^a|b$\"}", "anchors and '|' outside a group"},
        {"{\"type\":\"string\",\"pattern\":\"[é]\"}", "class with non-ASCII"},
        {"{\"type\":\"string\",\"pattern\":\"a{2,1}\"}", "m below n"},
        {"{\"type\":\"string\",\"pattern\":\"(a\"}", "'(' without its ')'"},
        {"{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}", "'pattern' together with another"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4.5}", "no integer is within the bounds"},
        {"{\"type\":\"integer\",\"maximum\":\"3\"}", "'maximum' must be a number"},
        {"{\"anyOf\":[{\"type\":\"string\"},{\"not\":{}}]}", "'not' is not supported (at /anyOf/1)"},
        {"{\"$ref\":\"#/$defs/missing\"}", "names nothing"},
        {"{\"type\":\"object\",\"properties\":{},\"required\":[\"x\"],\"additionalProperties\":false}", "'x' is not among"},
        {"{\"type\":\"widget\"}", "unknown type 'widget'"},
        {"{\"allOf\":[{},{}]}", "'allOf' of more than one"},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "'maxItems' is below minItems"},
        {"false", "matches nothing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sl_error err;
        gr_grammar *g = schema_grammar(cases[i].schema, &err);
        CHECKF(!g && err.status == SL_EINVAL && strstr(err.msg, cases[i].needle), "case %zu: %s", i, err.msg);
    }
}

/* A small vocabulary: every printable ASCII byte, multi-byte pieces of JSON, UTF-8 (whole and cut),
 * and an end-of-generation id (the last, no bytes). */
static const char *const pieces[] = {
    "{\"", "\":", "\": ", "true", "false", "null", "\"}", "}", ", \"", ",\"", "  ", "\n", "\n  ", "12", "0.", "é",
    "\xc3", "\xa9", "ab", "name", "age", "[", "]", "[{", "}]", "\"", "\\\"", "\\u00", "-", "e+", "Ruth", "\":\"",
    "<|x|>", "\xff\xfe"};
#define N_FIXED ((int)(sizeof pieces / sizeof *pieces))
#define V_TEST (N_FIXED + 95 + 1)

static gr_vocab *test_vocab(const char **p, size_t *len, char *bytes) {
    for (int i = 0; i < N_FIXED; i++) p[i] = pieces[i], len[i] = strlen(pieces[i]);
    for (int c = 0; c < 95; c++) {
        bytes[c] = (char)(0x20 + c);
        p[N_FIXED + c] = bytes + c;
        len[N_FIXED + c] = 1;
    }
    p[V_TEST - 1] = NULL, len[V_TEST - 1] = 0;
    int32_t eog = V_TEST - 1;
    gr_vocab *v = NULL;
    gr_vocab_from_pieces(p, len, V_TEST, &eog, 1, &v);
    return v;
}

/* The mask equals, token by token, what accepting the token's bytes after text says. */
static int mask_is_exact(const gr_grammar *g, gr_state *st, const gr_vocab *v, const char **p, const size_t *len,
                         const char *text, size_t n) {
    float logits[V_TEST];
    for (int i = 0; i < V_TEST; i++) logits[i] = 0;
    int allowed = gr_mask(st, v, logits), count = 0;
    for (int id = 0; id < V_TEST - 1; id++) {
        gr_state *x = NULL;
        gr_state_new(g, &x);
        int ok = gr_accept(x, text, n) == 0 && gr_accept(x, p[id], len[id]) == 0;
        gr_state_free(x);
        if (ok != (logits[id] == 0)) return 0;
        count += ok;
    }
    int eog_ok = logits[V_TEST - 1] == 0;
    if (eog_ok != (gr_complete(st) || count == 0)) return 0;
    return allowed == count + eog_ok;
}

TEST(grammar_mask_walks) {
    static const char *schemas[] = {
        ("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":6},\"age\":{\"type\":\"integer\"},"
         "\"ok\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"age\"],\"additionalProperties\":false}"),
        "{\"type\":\"array\",\"items\":{\"enum\":[\"ab\",null,12]},\"maxItems\":4}",
        "{\"anyOf\":[{\"type\":\"number\"},{\"type\":\"string\",\"maxLength\":3}]}",
        "{\"type\":\"array\",\"items\":{\"type\":\"string\"}}", /* unbounded strings: the mask cache's hits */
    };
    const char *p[V_TEST];
    size_t len[V_TEST];
    char bytes[95];
    gr_vocab *v = test_vocab(p, len, bytes);
    CHECK(v);
    unsigned seed = test_seed();
    int ended = 0;
    for (size_t s = 0; s < sizeof schemas / sizeof *schemas; s++) {
        sl_error err;
        gr_grammar *g = schema_grammar(schemas[s], &err);
        CHECKF(g, "%s", err.msg);
        for (int walk = 0; walk < 20; walk++) {
            gr_state *st = NULL;
            CHECK(gr_state_new(g, &st) == SL_OK);
            char text[4096];
            size_t n = 0;
            for (int step = 0; step < 200 && n < sizeof text - 64; step++) {
                CHECKF(mask_is_exact(g, st, v, p, len, text, n), "schema %zu walk %d step %d seed %u: %.*s", s, walk, step, seed, (int)n, text);
                float logits[V_TEST];
                for (int i = 0; i < V_TEST; i++) logits[i] = 0;
                gr_mask(st, v, logits);
                int pick[V_TEST], k = 0;
                for (int i = 0; i < V_TEST; i++)
                    if (logits[i] == 0) pick[k++] = i;
                seed = seed * 1103515245u + 12345u;
                int id = gr_complete(st) && (seed >> 16) % 4 == 0 ? V_TEST - 1 : pick[(seed >> 8) % (unsigned)k];
                CHECK(gr_accept_token(st, v, id) == 0);
                if (id == V_TEST - 1) break;
                memcpy(text + n, p[id], len[id]);
                n += len[id];
            }
            text[n] = 0;
            if (gr_finished(st)) { /* ended: the text parses as JSON */
                cJSON *j = cJSON_Parse(text);
                CHECKF(j, "schema %zu: %s does not parse", s, text);
                if (s == 0) CHECK(cJSON_IsString(cJSON_GetObjectItem(j, "name")) && cJSON_IsNumber(cJSON_GetObjectItem(j, "age")));
                cJSON_Delete(j);
                ended++;
            }
            gr_state_free(st);
        }
        gr_grammar_free(g);
    }
    gr_vocab_free(v);
    CHECKF(ended >= 10, "only %d walks ended", ended);
}

/* Inside an unbounded string every token leaves the same set of stacks: gr_mask walks the vocabulary
 * once for it and reuses the result (exact: the same mask as brute force), until the string ends. */
TEST(grammar_mask_cache_in_strings) {
    const char *p[V_TEST];
    size_t len[V_TEST];
    char bytes[95];
    gr_vocab *v = test_vocab(p, len, bytes);
    sl_error err;
    gr_grammar *g = schema_grammar("{\"type\":\"string\"}", &err);
    gr_state *st = NULL;
    CHECK(v && g && gr_state_new(g, &st) == SL_OK);
    const char *steps[] = {"\"", "ab", "Ruth", "\xc3", "\xa9", "name", "\\\"", "é", "\""};
    char text[64] = "";
    size_t n = 0;
    uint64_t hits[9];
    for (int i = 0; i < 9; i++) {
        CHECK(gr_accept(st, steps[i], strlen(steps[i])) == 0);
        memcpy(text + n, steps[i], strlen(steps[i]));
        n += strlen(steps[i]);
        CHECKF(mask_is_exact(g, st, v, p, len, text, n), "after %.*s", (int)n, text);
        hits[i] = gr_mask_hits(st);
    }
    /* after the opening quote: walked; "ab", "Ruth", the cut é's bytes, "name", the escaped quote and é:
     * the same set each time (the byte class of an unbounded string); the closing quote: a new set */
    CHECKF(hits[0] == 0 && hits[7] == 7 && hits[8] == 7, "hits %llu %llu %llu", (unsigned long long)hits[0],
           (unsigned long long)hits[7], (unsigned long long)hits[8]);
    gr_state_free(st);
    gr_grammar_free(g);
    gr_vocab_free(v);
}

/* Random walks under the mask of a vocabulary of every ASCII byte and a few whole non-ASCII
 * characters (the walks' text is UTF-8, as a tokenizer's text is): each pattern's strings, once ended,
 * are JSON strings whose value PCRE2 (UTF mode) finds the pattern in. Then dates against the calendar. */
#define V_WALK (128 + 5 + 1)
static gr_vocab *walk_vocab(const char **p, size_t *len, char *bytes) {
    static const char *const wide[] = {"é", "è", "ü", "中", "😀"};
    for (int c = 0; c < 128; c++) bytes[c] = (char)c, p[c] = bytes + c, len[c] = 1;
    for (int k = 0; k < 5; k++) p[128 + k] = wide[k], len[128 + k] = strlen(wide[k]);
    p[V_WALK - 1] = NULL, len[V_WALK - 1] = 0;
    int32_t eog = V_WALK - 1;
    gr_vocab *v = NULL;
    gr_vocab_from_pieces(p, len, V_WALK, &eog, 1, &v);
    return v;
}

/* A walk of g under v into text (the ids' bytes); 1 when it ended (the text is whole). */
static int walk_text(const gr_grammar *g, const gr_vocab *v, const char **p, const size_t *len, unsigned *seed,
                     char *text, size_t cap) {
    gr_state *st = NULL;
    if (gr_state_new(g, &st)) return 0;
    size_t n = 0;
    int ended = 0;
    float logits[V_WALK];
    while (n + 8 < cap) {
        for (int i = 0; i < V_WALK; i++) logits[i] = 0;
        gr_mask(st, v, logits);
        int pick[V_WALK], k = 0;
        for (int i = 0; i < V_WALK; i++)
            if (logits[i] == 0) pick[k++] = i;
        *seed = *seed * 1103515245u + 12345u;
        int id = logits[V_WALK - 1] == 0 && (n > 24 || (*seed >> 16) % 3 == 0) ? V_WALK - 1 : pick[(*seed >> 8) % (unsigned)k];
        if (gr_accept_token(st, v, id)) break;
        if (id == V_WALK - 1) { ended = 1; break; }
        memcpy(text + n, p[id], len[id]);
        n += len[id];
    }
    text[n] = 0;
    gr_state_free(st);
    return ended;
}

static int days_in(int y, int m) {
    static const int d[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && ((y % 4 == 0 && y % 100) || y % 400 == 0) ? 29 : d[m - 1];
}

TEST(grammar_patterns_and_formats_walk) {
    static const char *patterns[] = {"^[A-Z]{2}-\\d{3}$", "^x*b+c", /* (an unanchored start rarely ends a walk) */ "^(?:a|\"|\\\\)?[^a-z\\s]{0,5}$", "^\\w+@\\w+\\.(com|org)$",
                                     "^[^\"]{1,8}x?$", "^(é|\\xe8|\\.){2,3}\\t?$", "^\\S\\D\\W.$", "^(?<y>\\d{4})-(?:0[1-9]|1[0-2])$",
                                     "^[^a]{1,3}中$"};
    const char *p[V_WALK];
    size_t len[V_WALK];
    char bytes[128];
    gr_vocab *v = walk_vocab(p, len, bytes);
    CHECK(v);
    unsigned seed = test_seed();
    for (size_t i = 0; i < sizeof patterns / sizeof *patterns; i++) {
        cJSON *schema = cJSON_CreateObject();
        cJSON_AddStringToObject(schema, "type", "string");
        cJSON_AddStringToObject(schema, "pattern", patterns[i]);
        gr_grammar *g = NULL;
        sl_error err = {0};
        CHECKF(js_schema_grammar(schema, &g, &err) == SL_OK, "%s: %s", patterns[i], err.msg);
        cJSON_Delete(schema);
        int errc;
        PCRE2_SIZE erro;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)patterns[i], PCRE2_ZERO_TERMINATED, PCRE2_UTF, &errc, &erro, NULL);
        CHECK(re);
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        int ended = 0;
        for (int w = 0; w < 30; w++) {
            char text[256];
            if (!walk_text(g, v, p, len, &seed, text, sizeof text)) continue;
            ended++;
            cJSON *j = cJSON_Parse(text);
            CHECKF(cJSON_IsString(j), "%s: %s is not a JSON string (seed %u)", patterns[i], text, seed);
            int rc = pcre2_match(re, (PCRE2_SPTR)j->valuestring, strlen(j->valuestring), 0, 0, md, NULL);
            CHECKF(rc > 0, "%s: %s does not match (seed %u)", patterns[i], text, seed);
            cJSON_Delete(j);
        }
        CHECKF(ended >= 10, "%s: %d walks ended", patterns[i], ended);
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        gr_grammar_free(g);
    }
    /* date: a sample of years (leap rules, the ends) with every month and day 00..32 */
    sl_error err = {0};
    gr_grammar *g = schema_grammar("{\"type\":\"string\",\"format\":\"date\"}", &err);
    CHECK(g);
    static const int years[] = {0, 1, 4, 99, 100, 400, 1600, 1899, 1900, 1996, 2000, 2023, 2024, 2100, 2400, 9996, 9999};
    for (size_t y = 0; y < sizeof years / sizeof *years; y++)
        for (int m = 0; m <= 13; m++)
            for (int d = 0; d <= 32; d++) {
                char t[32];
                snprintf(t, sizeof t, "\"%04d-%02d-%02d\"", years[y], m, d);
                int valid = years[y] >= 1 && m >= 1 && m <= 12 && d >= 1 && d <= days_in(years[y], m);
                CHECKF(matches(g, t) == valid, "%s: %s", t, valid ? "refused" : "accepted");
            }
    gr_grammar_free(g);
    gr_vocab_free(v);
}

/* Integer bounds: every integer near the bounds, and random ones, is accepted exactly when in range. */
TEST(grammar_integer_ranges) {
    static const long long bounds[][2] = {{0, 0}, {1, 9}, {-5, 5}, {-100, -7}, {7, 1234}, {-999, 1000}, {99, 101},
                                          {12345, 99999999}, {-1, 0}, {0, 999999999999999LL}, {-42, 999999999999999LL}};
    unsigned seed = test_seed();
    for (size_t i = 0; i < sizeof bounds / sizeof *bounds; i++) {
        char schema[160];
        snprintf(schema, sizeof schema, "{\"type\":\"integer\",\"minimum\":%lld,\"maximum\":%lld}", bounds[i][0], bounds[i][1]);
        sl_error err;
        gr_grammar *g = schema_grammar(schema, &err);
        CHECKF(g, "%s: %s", schema, err.msg);
        long long probe[64];
        int n = 0;
        for (int k = -3; k <= 3; k++) probe[n++] = bounds[i][0] + k, probe[n++] = bounds[i][1] + k;
        for (long long x = 1; x <= 100000000000000LL; x *= 10) probe[n++] = x, probe[n++] = -x, probe[n++] = x - 1;
        while (n < 64) {
            seed = seed * 1103515245u + 12345u;
            long long span = bounds[i][1] - bounds[i][0] + 20;
            probe[n++] = bounds[i][0] - 10 + (long long)(seed % (unsigned)(span < 4000000000LL ? span : 4000000000LL));
        }
        for (int k = 0; k < n; k++) {
            char t[32];
            snprintf(t, sizeof t, "%lld", probe[k]);
            int in = probe[k] >= bounds[i][0] && probe[k] <= bounds[i][1];
            CHECKF(matches(g, t) == in, "%s: %s %s", schema, t, in ? "refused" : "accepted");
        }
        CHECKF(!matches(g, "-0") && !matches(g, "00") && !matches(g, "+1"), "%s", schema);
        gr_grammar_free(g);
    }
}

/* Number bounds (integer-valued, inclusive or exclusive): a number text is accepted exactly when its
 * value is within them (never "-0", leading zeros or an exponent). */
TEST(grammar_number_ranges) {
    static const char *const schemas[] = {
        "{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":1}",
        "{\"type\":\"number\",\"minimum\":-2,\"exclusiveMaximum\":3}", "{\"type\":\"number\",\"exclusiveMinimum\":-4,\"maximum\":-1}",
        "{\"type\":\"number\",\"minimum\":5}", "{\"type\":\"number\",\"exclusiveMaximum\":0}",
        "{\"type\":\"number\",\"minimum\":-1,\"exclusiveMinimum\":true,\"maximum\":12}", "{\"type\":\"number\",\"minimum\":7,\"maximum\":7}"};
    static const char *const fracs[] = {"", ".0", ".5", ".000", ".001", ".999", ".25"};
    for (size_t i = 0; i < sizeof schemas / sizeof *schemas; i++) {
        sl_error err;
        gr_grammar *g = schema_grammar(schemas[i], &err);
        CHECKF(g, "%s: %s", schemas[i], err.msg);
        cJSON *s = cJSON_Parse(schemas[i]);
        const cJSON *mn = cJSON_GetObjectItem(s, "minimum"), *xmn = cJSON_GetObjectItem(s, "exclusiveMinimum"),
                    *mx = cJSON_GetObjectItem(s, "maximum"), *xmx = cJSON_GetObjectItem(s, "exclusiveMaximum");
        for (int sign = 0; sign < 2; sign++)
            for (int m = 0; m <= 14; m++)
                for (size_t f = 0; f < sizeof fracs / sizeof *fracs; f++) {
                    char t[48];
                    snprintf(t, sizeof t, "%s%d%s", sign ? "-" : "", m, fracs[f]);
                    double x = strtod(t, NULL);
                    int in = (!mn || x >= mn->valuedouble) && (!mx || x <= mx->valuedouble) &&
                             (!cJSON_IsNumber(xmn) || x > xmn->valuedouble) && (!cJSON_IsNumber(xmx) || x < xmx->valuedouble) &&
                             (!cJSON_IsTrue(xmn) || x > mn->valuedouble);
                    if (sign && x == 0) in = 0; /* "-0": never written */
                    CHECKF(matches(g, t) == in, "%s: %s %s", schemas[i], t, in ? "refused" : "accepted");
                }
        CHECKF(!matches(g, "07") && !matches(g, "1e0") && !matches(g, ".5") && !matches(g, "5."), "%s", schemas[i]);
        cJSON_Delete(s);
        gr_grammar_free(g);
    }
    sl_error err;
    CHECK(!schema_grammar("{\"type\":\"number\",\"minimum\":0.5}", &err) && strstr(err.msg, "must be an integer"));
    CHECK(!schema_grammar("{\"type\":\"number\",\"exclusiveMinimum\":1,\"maximum\":1}", &err) && strstr(err.msg, "no number"));
}
