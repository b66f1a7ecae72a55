/* test_grammar.c — the byte grammar's recogniser (text/grammar.h), JSON Schema grammars
 * (text/json_schema.h) on texts that validate and texts that do not, the refusals of unsupported
 * keywords, and the logit mask against a brute-force check of every token, then random walks under the
 * mask that always end in text that parses. */
#include <cjson/cJSON.h>
#include <math.h>
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
        {"{\"type\":\"string\",\"pattern\":\"^a$\"}", "'pattern' is not supported (at /)"},
        {"{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":0}}}", "'minimum' is not supported (at /properties/n)"},
        {"{\"type\":\"array\",\"items\":{\"format\":\"date\"}}", "'format' is not supported (at /items)"},
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
