/*
 * test_serve.c — the HTTP server's parts that need no socket (src/serve/api.h): the answer parser
 * (reasoning, content, tool calls; streamed in random pieces == whole), the three request parsers
 * (fields mapped, every refusal a 400 naming its field), error objects in both shapes, whole and
 * streamed responses (event order, indices, [DONE]), the /metrics text, and the dialect and route tables
 * (every dialect complete and routed once, to the generation handler).
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "serve/api.h"
#include "serve/http.h"
#include "test.h"

/* ---- the answer parser ------------------------------------------------------------------------- */

/* What the parser gave, flattened: "R[...]" reasoning, "C[...]" content, "T[name|args]" calls, with
 * adjacent pieces of one kind merged. */
typedef struct {
    char s[4096];
    int last;
} flat;

static int flat_add(void *user, out_kind kind, const char *text, size_t len, const out_call *call) {
    flat *f = user;
    size_t n = strlen(f->s);
    if (kind == OUT_TOOL_CALL) {
        snprintf(f->s + n, sizeof f->s - n, "T[%s|%s]", call->name, call->arguments);
        f->last = -1;
        return 0;
    }
    if (f->last == (int)kind && n && f->s[n - 1] == ']') n--; /* merge: reopen the piece */
    else n += (size_t)snprintf(f->s + n, sizeof f->s - n, "%c[", kind == OUT_REASONING ? 'R' : 'C');
    snprintf(f->s + n, sizeof f->s - n, "%.*s]", (int)len, text);
    f->last = (int)kind;
    return 0;
}

/* Parses text whole, then in pieces of random lengths (seeded), and checks both give want. */
static int parse_check(const char *text, int think, int tools, const char *want, unsigned *seed) {
    for (int round = 0; round < 4; round++) {
        flat f = {"", -2};
        out_parser p;
        out_init(&p, think, tools);
        size_t n = strlen(text), at = 0;
        while (at < n) {
            size_t k = round == 0 ? n : 1 + (size_t)(rand_r(seed) % 5);
            if (k > n - at) k = n - at;
            if (out_push(&p, text + at, k, flat_add, &f)) return 0;
            at += k;
        }
        if (out_end(&p, flat_add, &f)) return 0;
        out_free(&p);
        if (strcmp(f.s, want)) {
            fprintf(stderr, "    text %s (round %d, seed %u)\n      got  %s\n      want %s\n", text, round, test_seed(), f.s, want);
            return 0;
        }
    }
    return 1;
}

TEST(serve_parse_thinking) {
    unsigned seed = test_seed();
    CHECK(parse_check("<think>\nI ponder.\n</think>\n\nThe answer.", 1, 0, "R[I ponder.]C[The answer.]", &seed));
    CHECK(parse_check("  <think>a\nb</think>c", 1, 0, "R[a\nb]C[c]", &seed));
    /* no think block: the text as it came, leading whitespace included */
    CHECK(parse_check(" Plain <think> later", 1, 0, "C[ Plain <think> later]", &seed));
    CHECK(parse_check("<thin", 1, 0, "C[<thin]", &seed)); /* cut off while it could still have been a tag */
    /* the prompt opened the block */
    CHECK(parse_check("\nstill thinking\n</think>\n\nout", 2, 0, "R[still thinking]C[out]", &seed));
    /* cut off inside the block: all of it is reasoning */
    CHECK(parse_check("<think>\nhalf a tho", 1, 0, "R[half a tho]", &seed));
    /* completions: nothing is parsed */
    CHECK(parse_check("<think>x</think>y<tool_call>{}</tool_call>", 0, 0, "C[<think>x</think>y<tool_call>{}</tool_call>]", &seed));
    CHECK(parse_check("", 1, 1, "", &seed));
}

TEST(serve_parse_tool_calls) {
    unsigned seed = test_seed() + 1;
    CHECK(parse_check("Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                      1, 1, "C[Let me look.]T[get_weather|{\"city\":\"Paris\"}]", &seed));
    /* two calls, thinking first; whitespace between and after them dropped */
    CHECK(parse_check("<think>need two</think>\n\n<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>\n"
                      "<tool_call>{\"name\":\"b\",\"arguments\":\"{\\\"x\\\": 1}\"}</tool_call>\n",
                      1, 1, "R[need two]T[a|{}]T[b|{\"x\": 1}]", &seed));
    /* no arguments: {} */
    CHECK(parse_check("<tool_call>{\"name\":\"now\"}</tool_call>", 1, 1, "T[now|{}]", &seed));
    /* the XML form of Qwen3-Coder / Qwen3.5 */
    CHECK(parse_check("<tool_call>\n<function=search>\n<parameter=query>\nsluice MoE\n</parameter>\n<parameter=k>\n3\n"
                      "</parameter>\n</function>\n</tool_call>",
                      1, 1, "T[search|{\"query\":\"sluice MoE\",\"k\":3}]", &seed));
    /* not a call: given back as content, tags included */
    CHECK(parse_check("<tool_call>not json</tool_call> after", 1, 1, "C[<tool_call>not json</tool_call>after]", &seed));
    CHECK(parse_check("<tool_call>{\"arguments\":{}}</tool_call>", 1, 1, "C[<tool_call>{\"arguments\":{}}</tool_call>]", &seed));
    /* cut off inside a call: content, raw (the whitespace before the tag was already dropped) */
    CHECK(parse_check("x <tool_call>{\"name\":", 1, 1, "C[x<tool_call>{\"name\":]", &seed));
    /* without tools the tags are text */
    CHECK(parse_check("<tool_call>{\"name\":\"a\"}</tool_call>", 1, 0, "C[<tool_call>{\"name\":\"a\"}</tool_call>]", &seed));
    /* text that only looks like the start of a tag comes out when it turns out not to be one */
    CHECK(parse_check("a <tool b", 1, 1, "C[a <tool b]", &seed));
}

/* DeepSeek-V4's DSML calls (the form src/text/chat_dsv4.c renders them in): string="true" values as
 * they are, the others JSON; several invokes in one block; malformed blocks back as content. */
#define DS "｜DSML｜"
TEST(serve_parse_dsml_tool_calls) {
    unsigned seed = test_seed() + 2;
    CHECK(parse_check("I will look.\n\n<" DS "tool_calls>\n<" DS "invoke name=\"get_weather\">\n<" DS
                      "parameter name=\"city\" string=\"true\">Paris, \"FR\"</" DS "parameter>\n<" DS
                      "parameter name=\"days\" string=\"false\">3</" DS "parameter>\n</" DS "invoke>\n</" DS "tool_calls>",
                      1, 1, "C[I will look.]T[get_weather|{\"city\":\"Paris, \\\"FR\\\"\",\"days\":3}]", &seed));
    /* thinking opened by the prompt (DeepSeek-V4's ends with "<think>"), two invokes, no arguments, JSON values */
    CHECK(parse_check("need two</think><" DS "tool_calls>\n<" DS "invoke name=\"a\">\n</" DS "invoke>\n<" DS
                      "invoke name=\"b\">\n<" DS "parameter name=\"o\" string=\"false\">{\"x\": [1, null]}</" DS
                      "parameter>\n</" DS "invoke>\n</" DS "tool_calls>",
                      2, 1, "R[need two]T[a|{}]T[b|{\"o\":{\"x\":[1,null]}}]", &seed));
    /* not calls: the raw text is content */
    CHECK(parse_check("<" DS "tool_calls>junk</" DS "tool_calls>", 1, 1, "C[<" DS "tool_calls>junk</" DS "tool_calls>]", &seed));
    CHECK(parse_check("<" DS "tool_calls>\n</" DS "tool_calls>", 1, 1, "C[<" DS "tool_calls>\n</" DS "tool_calls>]", &seed));
    CHECK(parse_check("<" DS "tool_calls><" DS "invoke name=\"a\">\n<" DS "parameter name=\"n\" string=\"false\">nan?</" DS
                      "parameter>\n</" DS "invoke></" DS "tool_calls>",
                      1, 1, "C[<" DS "tool_calls><" DS "invoke name=\"a\">\n<" DS "parameter name=\"n\" string=\"false\">nan?</" DS
                      "parameter>\n</" DS "invoke></" DS "tool_calls>]", &seed));
    /* cut off inside the block; without tools the block is text */
    CHECK(parse_check("x <" DS "tool_calls>\n<" DS "invoke", 1, 1, "C[x<" DS "tool_calls>\n<" DS "invoke]", &seed));
    CHECK(parse_check("<" DS "tool_calls></" DS "tool_calls>", 1, 0, "C[<" DS "tool_calls></" DS "tool_calls>]", &seed));
    /* a Qwen call after a DSML one's look-alike text */
    CHECK(parse_check("<" DS "tool<tool_call>{\"name\":\"q\"}</tool_call>", 1, 1, "C[<" DS "tool]T[q|{}]", &seed));
}
#undef DS

/* The parser never holds back more than a tag's length of plain text (streaming stays live). */
TEST(serve_parse_holds_little) {
    flat f = {"", -2};
    out_parser p;
    out_init(&p, 1, 1);
    const char *t = "Hello there, this is plain text with <angle> brackets and more words";
    size_t sent = 0;
    for (size_t i = 0; t[i]; i++) {
        CHECK(out_push(&p, t + i, 1, flat_add, &f) == 0);
        sent = strlen(f.s) > 3 ? strlen(f.s) - 3 : 0; /* minus "C[" and "]" */
        CHECKF(i + 1 - sent <= 12, "after %zu bytes only %zu out: %s", i + 1, sent, f.s);
    }
    out_end(&p, flat_add, &f);
    out_free(&p);
    CHECK(!strncmp(f.s + 2, t, strlen(t)));
}

/* ---- requests ---------------------------------------------------------------------------------- */

static int parse(api_kind k, const char *body, api_gen *g, api_error *e) {
    memset(e, 0, sizeof *e);
    return k == API_CHAT ? oai_parse_chat(body, strlen(body), g, e)
         : k == API_COMPLETION ? oai_parse_completion(body, strlen(body), g, e)
                               : ant_parse_messages(body, strlen(body), g, e);
}

TEST(serve_parse_chat_request) {
    api_gen g;
    api_error e;
    const char *body =
        "{\"model\":\"demo\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0.3,"
        "\"top_p\":0.5,\"top_k\":7,\"min_p\":0.2,\"seed\":42,\"presence_penalty\":1.5,\"frequency_penalty\":0,"
        "\"max_tokens\":99,\"max_completion_tokens\":12,\"stop\":[\"\\n\\n\",\"END\",\"\"],\"user\":\"ignored\","
        "\"messages\":[{\"role\":\"developer\",\"content\":\"Be terse.\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},"
        "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"hm\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"42\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}],"
        "\"chat_template_kwargs\":{\"enable_thinking\":false}}";
    CHECKF(parse(API_CHAT, body, &g, &e) == 0, "%s", e.message);
    CHECK(g.kind == API_CHAT && !strcmp(g.model, "demo") && g.stream && g.include_usage);
    CHECK(g.sp.temp == 0.3f && g.sp.top_p == 0.5f && g.sp.top_k == 7 && g.sp.min_p == 0.2f && g.sp.seed == 42 && g.seed_set);
    CHECK(g.sp.presence_penalty == 1.5f && g.sp.repeat_penalty == 1.0f);
    CHECK(g.max_tokens == 12); /* max_completion_tokens wins */
    CHECK(g.n_stop == 2 && !strcmp(g.stop[0], "\n\n") && !strcmp(g.stop[1], "END"));
    CHECK(g.n_msgs == 4 && !strcmp(g.msgs[0].role, "system") && !strcmp(g.msgs[0].content, "Be terse."));
    CHECK(!strcmp(g.msgs[1].content, "a\nb"));
    CHECK(!strcmp(g.msgs[2].role, "assistant") && !g.msgs[2].content && !strcmp(g.msgs[2].reasoning, "hm"));
    CHECK(g.msgs[2].tool_calls && strstr(g.msgs[2].tool_calls, "\"name\":\"f\""));
    CHECK(!strcmp(g.msgs[3].role, "tool") && !strcmp(g.msgs[3].content, "42"));
    CHECK(g.tools && strstr(g.tools, "\"function\"") && g.enable_thinking == 0);
    api_gen_free(&g);
    /* defaults: the library's sampler, no max_tokens, no stop, template's thinking, tool_choice none */
    CHECK(parse(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tool_choice\":\"none\","
                          "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", &g, &e) == 0);
    sl_sampler_params d = sl_sampler_params_default();
    CHECK(!g.model && !g.stream && g.max_tokens == 0 && g.n_stop == 0 && g.enable_thinking == -1 && !g.tools && !g.seed_set);
    CHECK(g.sp.temp == d.temp && g.sp.top_k == d.top_k && g.sp.top_p == d.top_p && g.sp.min_p == d.min_p);
    api_gen_free(&g);
    CHECK(parse(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stop\":\"###\"}", &g, &e) == 0);
    CHECK(g.n_stop == 1 && !strcmp(g.stop[0], "###"));
    api_gen_free(&g);
    /* seeds: any integer, negative ones as two's complement, the top of the range too */
    CHECK(parse(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"seed\":-1}", &g, &e) == 0);
    CHECK(g.seed_set && g.sp.seed == UINT64_MAX);
    api_gen_free(&g);
    CHECK(parse(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"seed\":1e19}", &g, &e) == 0);
    CHECK(g.seed_set && g.sp.seed == 10000000000000000000ull);
    api_gen_free(&g);
}

/* Each bad body gets a 400 naming the field at fault (param, "" for none). */
TEST(serve_parse_refusals) {
    static const struct { api_kind k; const char *body, *param; } bad[] = {
        {API_CHAT, "{\"messages\": [", ""},
        {API_COMPLETION, "{\"prompt\": \"ok \xff\xfe\"}", ""}, /* not UTF-8 (tools/soak.py found it served) */
        {API_CHAT, "[1, 2]", ""},
        {API_CHAT, "", ""},
        {API_CHAT, "{}", "messages"},
        {API_CHAT, "{\"messages\": \"hi\"}", "messages"},
        {API_CHAT, "{\"messages\": []}", "messages"},
        {API_CHAT, "{\"messages\": [{\"content\": \"x\"}]}", "messages[0]"},
        {API_CHAT, "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", "messages[0]"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "messages[0].content"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]}", "messages[0].content"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"temperature\": \"hot\"}", "temperature"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"temperature\": -1}", "temperature"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_p\": 1.5}", "top_p"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_k\": 2.5}", "top_k"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": 0}", "max_tokens"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": \"5\"}", "max_tokens"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"n\": 17}", "n"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stream\": \"yes\"}", "stream"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stop\": [1]}", "stop"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"seed\": 1.5}", "seed"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"frequency_penalty\": 0.5}", "frequency_penalty"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 2}", "top_logprobs"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": true, \"top_logprobs\": 21}", "top_logprobs"},
        {API_COMPLETION, "{\"prompt\": \"x\", \"logprobs\": 21}", "logprobs"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": {\"type\": \"xml\"}}", "response_format.type"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"type\": \"string\", \"pattern\": \"(?!a)\"}}}}", "response_format.json_schema.schema"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": \"required\"}", "tool_choice"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": {}}", "tools"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": \"function\"}]}", "tools"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stream_options\": {\"include_usage\": 1}}", "stream_options.include_usage"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"model\": 7}", "model"},
        {API_COMPLETION, "{}", "prompt"},
        {API_COMPLETION, "{\"prompt\": [\"a\", \"b\"]}", "prompt"},
        {API_COMPLETION, "{\"prompt\": [1, -2]}", "prompt"},
        {API_COMPLETION, "{\"prompt\": {}}", "prompt"},
        {API_COMPLETION, "{\"prompt\": \"x\", \"best_of\": 3}", "best_of"},
        {API_COMPLETION, "{\"prompt\": \"x\", \"suffix\": \"y\"}", "suffix"},
        {API_COMPLETION, "{\"prompt\": \"x\", \"echo\": 1}", "echo"},
        {API_MESSAGES, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", "max_tokens"},
        {API_MESSAGES, "{\"max_tokens\": 5, \"messages\": []}", "messages"},
        {API_MESSAGES, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"system\", \"content\": \"x\"}]}", "messages.0"},
        {API_MESSAGES, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image\"}]}]}", "messages.0"},
        {API_MESSAGES, "{\"max_tokens\": 5, \"system\": 3, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", "system"},
        {API_MESSAGES, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"name\": \"f\"}]}", "tools"},
        {API_MESSAGES, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"thinking\": {\"type\": \"sometimes\"}}", "thinking"},
        {API_MESSAGES, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stop_sequences\": \"x\\u0000\", \"top_k\": -1}", "stop_sequences"},
        /* a NUL in text would cut the prompt there (issue 29): 400 naming the field */
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\\u0000b\"}]}", "messages[0].content"},
        {API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"\\u0000\"}]}]}", "messages[0].content[0].text"},
        {API_COMPLETION, "{\"prompt\": \"x\", \"stop\": [\"a\", \"b\\u0000\"]}", "stop[1]"},
        {API_MESSAGES, "{\"max_tokens\": 5, \"system\": \"s\\u0000\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", "system"},
    };
    api_gen ok;
    api_error oe;
    CHECKF(parse(API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\\\\u0000\"}]}", &ok, &oe) == 0, "%s", oe.message);
    api_gen_free(&ok);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        api_gen g;
        api_error e;
        int r = parse(bad[i].k, bad[i].body, &g, &e);
        CHECKF(r == -1 && e.status == 400 && e.message[0] && !strcmp(e.param, bad[i].param),
               "%s: r %d status %d param '%s' (want '%s'): %s", bad[i].body, r, e.status, e.param, bad[i].param, e.message);
        api_gen_free(&g);
    }
}

/* Structured outputs: a grammar for json_object / json_schema / output_config and forced tool calls,
 * thinking off; no grammar for text, auto and none. */
TEST(serve_parse_structured_outputs) {
    static const struct { api_kind k; const char *extra; int grammar; } rows[] = {
        {API_CHAT, "\"response_format\": {\"type\": \"text\"}", 0},
        {API_CHAT, "\"response_format\": {\"type\": \"json_object\"}", 1},
        {API_CHAT, "\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"a\", \"schema\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}}}", 1},
        {API_CHAT, "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"tool_choice\": \"auto\"", 0},
        {API_CHAT, "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"tool_choice\": \"required\"", 1},
        {API_CHAT, "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"f\"}}", 1},
        {API_COMPLETION, "\"response_format\": {\"type\": \"json_object\"}", 1},
        {API_MESSAGES, "\"output_config\": {\"format\": {\"type\": \"json_schema\", \"schema\": {\"type\": \"object\"}}}, \"thinking\": {\"type\": \"enabled\"}", 1},
        {API_MESSAGES, "\"tools\": [{\"name\": \"f\", \"input_schema\": {\"type\": \"object\"}}], \"tool_choice\": {\"type\": \"any\"}", 1},
        {API_MESSAGES, "\"tools\": [{\"name\": \"f\", \"input_schema\": {\"type\": \"object\"}}], \"tool_choice\": {\"type\": \"auto\"}", 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        char body[1024];
        const char *head = rows[i].k == API_COMPLETION ? "\"prompt\": \"x\"" : "\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]";
        snprintf(body, sizeof body, "{%s, %s}", head, rows[i].extra);
        api_gen g;
        api_error e;
        CHECKF(api_dialect_of(rows[i].k)->parse(body, strlen(body), &g, &e) == 0, "row %zu: %s", i, e.message);
        int ok = (g.grammar != NULL) == rows[i].grammar && (!g.grammar || g.enable_thinking == 0);
        api_gen_free(&g);
        CHECKF(ok, "row %zu", i);
    }
    /* a named tool that is not there; a schema keyword that is not supported, in a tool */
    const char *bad[] = {
        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"number\", \"multipleOf\": 3}}}}}], \"tool_choice\": \"required\"}"};
    const char *needle[] = {"'g'", "'multipleOf' is not supported (at /properties/n)"};
    for (int i = 0; i < 2; i++) {
        api_gen g;
        api_error e;
        int r = oai_parse_chat(bad[i], strlen(bad[i]), &g, &e);
        api_gen_free(&g);
        CHECKF(r == -1 && e.status == 400 && strstr(e.message, needle[i]), "%d: %s", i, e.message);
    }
}

TEST(serve_parse_completion_request) {
    api_gen g;
    api_error e;
    CHECK(parse(API_COMPLETION, "{\"prompt\": \"Once\", \"echo\": true}", &g, &e) == 0);
    CHECK(!strcmp(g.prompt, "Once") && g.echo && g.max_tokens == 16 && !g.prompt_ids); /* OpenAI's default 16 */
    api_gen_free(&g);
    CHECK(parse(API_COMPLETION, "{\"prompt\": [\"Twice\"], \"max_tokens\": 3}", &g, &e) == 0);
    CHECK(!strcmp(g.prompt, "Twice") && g.max_tokens == 3);
    api_gen_free(&g);
    CHECK(parse(API_COMPLETION, "{\"prompt\": [[5, 6, 7]]}", &g, &e) == 0);
    CHECK(g.n_prompt_ids == 3 && g.prompt_ids[0] == 5 && g.prompt_ids[2] == 7 && !g.prompt);
    api_gen_free(&g);
}

TEST(serve_parse_messages_request) {
    api_gen g;
    api_error e;
    const char *body =
        "{\"model\":\"demo\",\"max_tokens\":64,\"system\":[{\"type\":\"text\",\"text\":\"S1\"},{\"type\":\"text\",\"text\":\"S2\"}],"
        "\"stop_sequences\":[\"Amen\"],\"top_k\":3,\"temperature\":0.5,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"call it\",\"signature\":\"\"},"
        "{\"type\":\"text\",\"text\":\"Checking.\"},{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"w\",\"input\":{\"c\":\"Oslo\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":\"-3C\"},"
        "{\"type\":\"text\",\"text\":\"And tomorrow?\"}]}],"
        "\"tools\":[{\"name\":\"w\",\"description\":\"weather\",\"input_schema\":{\"type\":\"object\"}}]}";
    CHECKF(parse(API_MESSAGES, body, &g, &e) == 0, "%s", e.message);
    CHECK(g.kind == API_MESSAGES && g.max_tokens == 64 && g.sp.top_k == 3 && g.n_stop == 1 && g.enable_thinking == 1);
    CHECK(g.n_msgs == 5);
    CHECK(!strcmp(g.msgs[0].role, "system") && !strcmp(g.msgs[0].content, "S1\nS2"));
    CHECK(!strcmp(g.msgs[1].role, "user") && !strcmp(g.msgs[1].content, "Weather?"));
    CHECK(!strcmp(g.msgs[2].role, "assistant") && !strcmp(g.msgs[2].content, "Checking.") && !strcmp(g.msgs[2].reasoning, "call it"));
    CHECK(g.msgs[2].tool_calls && strstr(g.msgs[2].tool_calls, "\"arguments\":{\"c\":\"Oslo\"}"));
    CHECK(!strcmp(g.msgs[3].role, "tool") && !strcmp(g.msgs[3].content, "-3C"));
    CHECK(!strcmp(g.msgs[4].role, "user") && !strcmp(g.msgs[4].content, "And tomorrow?"));
    cJSON *t = cJSON_Parse(g.tools);
    const cJSON *f = cJSON_GetObjectItem(cJSON_GetArrayItem(t, 0), "function");
    CHECK(f && !strcmp(cJSON_GetObjectItem(f, "name")->valuestring, "w") && cJSON_IsObject(cJSON_GetObjectItem(f, "parameters")));
    cJSON_Delete(t);
    /* what the chat template makes of it: the tool result as a tool response, the call as a tool call */
    sl_tokenizer *tok = NULL;
    sl_error err = {0};
    CHECKF(sl_tokenizer_load("tests/data/tiny_tokenizer/tokenizer.json", &tok, &err) == 0, "%s", err.msg);
    sl_chat_params cp = sl_chat_params_default();
    cp.tools = g.tools;
    char *text = NULL;
    sl_status st = sl_chat_format(tok, g.msgs, g.n_msgs, &cp, &text, &err);
    sl_tokenizer_free(tok);
    CHECKF(st == 0, "%s", err.msg);
    CHECKF(strstr(text, "<tool_response>\n-3C\n</tool_response>") && strstr(text, "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": \"Oslo\"}}") &&
               strstr(text, "\"description\": \"weather\"") && strstr(text, "S1\nS2"),
           "%s", text);
    free(text);
    api_gen_free(&g);
}

/* ---- errors and responses ---------------------------------------------------------------------- */

TEST(serve_error_objects) {
    static const int st[] = {400, 401, 404, 405, 413, 500, 503};
    for (size_t i = 0; i < sizeof st / sizeof *st; i++) {
        api_error e;
        api_fail(&e, st[i], i ? NULL : "messages", i ? NULL : "invalid_type", "bad \"thing\" \xff number %d", st[i]);
        char *o = api_error_json(&e, 0), *a = api_error_json(&e, 1);
        cJSON *jo = cJSON_Parse(o), *ja = cJSON_Parse(a);
        const cJSON *eo = cJSON_GetObjectItem(jo, "error"), *ea = cJSON_GetObjectItem(ja, "error");
        CHECKF(cJSON_IsString(cJSON_GetObjectItem(eo, "message")) && cJSON_IsString(cJSON_GetObjectItem(eo, "type")) &&
                   cJSON_GetObjectItem(eo, "param") && cJSON_GetObjectItem(eo, "code"), "%s", o);
        CHECK(strstr(cJSON_GetObjectItem(eo, "message")->valuestring, "bad \"thing\" \xef\xbf\xbd number")); /* U+FFFD */
        CHECK(i ? cJSON_IsNull(cJSON_GetObjectItem(eo, "param")) : !strcmp(cJSON_GetObjectItem(eo, "param")->valuestring, "messages"));
        CHECKF(!strcmp(cJSON_GetObjectItem(ja, "type")->valuestring, "error") && cJSON_IsString(cJSON_GetObjectItem(ea, "type")) &&
                   cJSON_IsString(cJSON_GetObjectItem(ea, "message")), "%s", a);
        free(o);
        free(a);
        cJSON_Delete(jo);
        cJSON_Delete(ja);
    }
    /* 500-class messages name a model's file, never its folder (issue 29); others are left whole */
    api_error e;
    api_fail(&e, 500, NULL, NULL, "generation failed: cannot read '/home/ann/models/next.sluice': I/O error (/tmp/x)");
    char *o = api_error_json(&e, 0), *a = api_error_json(&e, 1);
    CHECKF(strstr(o, "cannot read 'next.sluice': I/O error (x)") && !strstr(o, "/home") && !strstr(a, "/home"), "%s", o);
    free(o);
    free(a);
    api_fail(&e, 404, NULL, NULL, "no such endpoint: GET /v2/x");
    CHECK((o = api_error_json(&e, 0)) && strstr(o, "GET /v2/x"));
    free(o);
    CHECK(!strcmp(api_error_type(401, 0), "authentication_error") && !strcmp(api_error_type(404, 1), "not_found_error"));
    CHECK(!strcmp(api_error_type(413, 1), "request_too_large") && !strcmp(api_error_type(503, 1), "overloaded_error"));
    CHECK(!strcmp(api_error_type(500, 0), "server_error") && !strcmp(api_error_type(500, 1), "api_error"));
}

static api_result sample_result(void) {
    api_result r;
    memset(&r, 0, sizeof r);
    api_result_add(&r, OUT_REASONING, "why", 3, NULL);
    api_result_add(&r, OUT_CONTENT, "Hi", 2, NULL);
    out_call c = {"lookup", "{\"q\":\"x\"}"};
    api_result_add(&r, OUT_TOOL_CALL, NULL, 0, &c);
    return r;
}

TEST(serve_whole_responses) {
    api_meta m = {"chatcmpl-1", "demo", 1700000000};
    api_result r = sample_result();
    api_done d = {SL_STOP_EOG, NULL, 10, 5, 2, 0, 0};
    char *s = oai_chat_response(&m, &r, &d);
    cJSON *j = cJSON_Parse(s);
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), *msg = cJSON_GetObjectItem(c, "message");
    CHECKF(!strcmp(cJSON_GetObjectItem(c, "finish_reason")->valuestring, "tool_calls"), "%s", s);
    CHECK(!strcmp(cJSON_GetObjectItem(msg, "content")->valuestring, "Hi") &&
          !strcmp(cJSON_GetObjectItem(msg, "reasoning_content")->valuestring, "why"));
    const cJSON *tc = cJSON_GetArrayItem(cJSON_GetObjectItem(msg, "tool_calls"), 0), *fn = cJSON_GetObjectItem(tc, "function");
    CHECK(!strncmp(cJSON_GetObjectItem(tc, "id")->valuestring, "call_", 5) && !strcmp(cJSON_GetObjectItem(tc, "type")->valuestring, "function"));
    CHECK(!strcmp(cJSON_GetObjectItem(fn, "name")->valuestring, "lookup") && !strcmp(cJSON_GetObjectItem(fn, "arguments")->valuestring, "{\"q\":\"x\"}"));
    const cJSON *u = cJSON_GetObjectItem(j, "usage");
    CHECK(cJSON_GetObjectItem(u, "prompt_tokens")->valueint == 10 && cJSON_GetObjectItem(u, "completion_tokens")->valueint == 5 &&
          cJSON_GetObjectItem(u, "total_tokens")->valueint == 15);
    CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(u, "prompt_tokens_details"), "cached_tokens")->valueint == 2);
    CHECK(!strcmp(cJSON_GetObjectItem(j, "object")->valuestring, "chat.completion") && cJSON_GetObjectItem(j, "created")->valuedouble == 1700000000);
    free(s);
    cJSON_Delete(j);

    api_done ds = {SL_STOP_STRING, "Amen", 10, 5, 3, 0, 2}; /* 3 read from the prefix cache, 2 added to it */
    s = ant_message_response(&m, &r, &ds);
    j = cJSON_Parse(s);
    const cJSON *ct = cJSON_GetObjectItem(j, "content");
    CHECKF(cJSON_GetArraySize(ct) == 3, "%s", s);
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(ct, 0), "type")->valuestring, "thinking"));
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(ct, 1), "text")->valuestring, "Hi"));
    const cJSON *tu = cJSON_GetArrayItem(ct, 2);
    CHECK(!strcmp(cJSON_GetObjectItem(tu, "type")->valuestring, "tool_use") && !strncmp(cJSON_GetObjectItem(tu, "id")->valuestring, "toolu_", 6));
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(tu, "input"), "q")->valuestring, "x"));
    CHECK(!strcmp(cJSON_GetObjectItem(j, "stop_reason")->valuestring, "stop_sequence") &&
          !strcmp(cJSON_GetObjectItem(j, "stop_sequence")->valuestring, "Amen"));
    u = cJSON_GetObjectItem(j, "usage");
    CHECKF(cJSON_GetObjectItem(u, "input_tokens")->valueint == 5 && cJSON_GetObjectItem(u, "cache_read_input_tokens")->valueint == 3 &&
               cJSON_GetObjectItem(u, "cache_creation_input_tokens")->valueint == 2 && cJSON_GetObjectItem(u, "output_tokens")->valueint == 5,
           "%s", s);
    free(s);
    cJSON_Delete(j);

    api_done dl = {SL_STOP_LENGTH, NULL, 3, 16, 0, 0, 0};
    s = oai_completion_response(&m, "abc", 3, &dl);
    j = cJSON_Parse(s);
    c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    CHECK(!strcmp(cJSON_GetObjectItem(c, "text")->valuestring, "abc") && !strcmp(cJSON_GetObjectItem(c, "finish_reason")->valuestring, "length"));
    free(s);
    cJSON_Delete(j);
    api_result_free(&r);
    /* an answer of nothing is still an answer: content "" (OpenAI), one empty text block (Anthropic) */
    api_result empty;
    memset(&empty, 0, sizeof empty);
    s = oai_chat_response(&m, &empty, &d);
    CHECKF(strstr(s, "\"content\":\"\"") && strstr(s, "\"finish_reason\":\"stop\""), "%s", s);
    free(s);
    s = ant_message_response(&m, &empty, &d);
    CHECKF(strstr(s, "\"content\":[{\"type\":\"text\",\"text\":\"\"}]") && strstr(s, "\"stop_reason\":\"end_turn\""), "%s", s);
    free(s);
}

/* The SSE events of a stream: their "data:" JSON objects in order (event names checked against the
 * "type" field when present). Returns the count; objs gets them (caller deletes). */
static int sse_events(const char *s, cJSON **objs, int max, int *done) {
    int n = 0;
    *done = 0;
    while (*s && n < max) {
        const char *end = strstr(s, "\n\n");
        if (!end) return -1;
        char ev[64] = "";
        const char *data = strstr(s, "data: ");
        if (!data || data > end) return -1;
        if (!strncmp(s, "event: ", 7)) sscanf(s + 7, "%63[^\n]", ev);
        if (!strncmp(data + 6, "[DONE]", 6)) { *done = 1; s = end + 2; continue; }
        if (*done) return -1; /* nothing after [DONE] */
        objs[n] = cJSON_ParseWithLength(data + 6, (size_t)(end - data - 6));
        if (!objs[n]) return -1;
        const cJSON *t = cJSON_GetObjectItem(objs[n], "type");
        if (ev[0] && (!cJSON_IsString(t) || strcmp(t->valuestring, ev))) return -1;
        n++;
        s = end + 2;
    }
    return n;
}

TEST(serve_stream_openai) {
    api_meta m = {"chatcmpl-2", "demo", 1};
    api_stream s;
    api_stream_init(&s, API_CHAT, &m, 1, 7);
    out_call c = {"f", "{}"};
    CHECK(api_stream_piece(&s, OUT_REASONING, "r", 1, NULL) == 0 && api_stream_piece(&s, OUT_CONTENT, "a", 1, NULL) == 0);
    CHECK(api_stream_piece(&s, OUT_TOOL_CALL, NULL, 0, &c) == 0 && api_stream_piece(&s, OUT_TOOL_CALL, NULL, 0, &c) == 0);
    api_done d = {SL_STOP_EOG, NULL, 7, 4, 0, 0, 0};
    CHECK(api_stream_end(&s, &d) == 0 && tok_buf_put(&s.out, "", 1) == 0);
    cJSON *ev[16];
    int done, n = sse_events(s.out.p, ev, 16, &done);
    CHECKF(n == 7 && done, "%d events: %s", n, s.out.p);
    const cJSON *d0 = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(ev[0], "choices"), 0), "delta");
    CHECK(!strcmp(cJSON_GetObjectItem(d0, "role")->valuestring, "assistant"));
    const cJSON *d1 = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(ev[1], "choices"), 0), "delta");
    CHECK(!strcmp(cJSON_GetObjectItem(d1, "reasoning_content")->valuestring, "r"));
    for (int i = 3; i < 5; i++) { /* the calls are numbered */
        const cJSON *d = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(ev[i], "choices"), 0), "delta");
        CHECK(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(d, "tool_calls"), 0), "index")->valueint == i - 3);
    }
    const cJSON *last = cJSON_GetArrayItem(cJSON_GetObjectItem(ev[5], "choices"), 0);
    CHECK(!strcmp(cJSON_GetObjectItem(last, "finish_reason")->valuestring, "tool_calls"));
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(ev[6], "choices")) == 0 &&
          cJSON_GetObjectItem(cJSON_GetObjectItem(ev[6], "usage"), "total_tokens")->valueint == 11);
    for (int i = 0; i < n; i++) {
        CHECK(!strcmp(cJSON_GetObjectItem(ev[i], "id")->valuestring, "chatcmpl-2") &&
              !strcmp(cJSON_GetObjectItem(ev[i], "object")->valuestring, "chat.completion.chunk"));
        cJSON_Delete(ev[i]);
    }
    api_stream_free(&s);
    /* an error after the start: an error object, then [DONE] */
    api_stream_init(&s, API_COMPLETION, &m, 0, 7);
    api_error e;
    api_fail(&e, 500, NULL, NULL, "disk on fire");
    CHECK(api_stream_piece(&s, OUT_CONTENT, "x", 1, NULL) == 0 && api_stream_error(&s, &e) == 0 && tok_buf_put(&s.out, "", 1) == 0);
    n = sse_events(s.out.p, ev, 16, &done);
    CHECKF(n == 2 && done && !strcmp(cJSON_GetObjectItem(ev[0], "object")->valuestring, "text_completion") &&
               strstr(cJSON_GetObjectItem(cJSON_GetObjectItem(ev[1], "error"), "message")->valuestring, "fire"), "%s", s.out.p);
    for (int i = 0; i < n; i++) cJSON_Delete(ev[i]);
    api_stream_free(&s);
}

TEST(serve_stream_anthropic) {
    api_meta m = {"msg_3", "demo", 1};
    api_stream s;
    api_stream_init(&s, API_MESSAGES, &m, 0, 9);
    s.n_reused = 4; /* known at the first piece (gen.c) */
    out_call c = {"f", "{\"a\":1}"};
    CHECK(api_stream_piece(&s, OUT_REASONING, "r1", 2, NULL) == 0 && api_stream_piece(&s, OUT_REASONING, "r2", 2, NULL) == 0);
    CHECK(api_stream_piece(&s, OUT_CONTENT, "t", 1, NULL) == 0 && api_stream_piece(&s, OUT_TOOL_CALL, NULL, 0, &c) == 0);
    api_done d = {SL_STOP_EOG, NULL, 9, 6, 4, 0, 0};
    CHECK(api_stream_end(&s, &d) == 0 && tok_buf_put(&s.out, "", 1) == 0);
    static const char *const want[] = {"message_start", "ping", "content_block_start", "content_block_delta",
                                       "content_block_delta", "content_block_stop", "content_block_start",
                                       "content_block_delta", "content_block_stop", "content_block_start",
                                       "content_block_delta", "content_block_stop", "message_delta", "message_stop"};
    static const int index[] = {-1, -1, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, -1, -1};
    cJSON *ev[32];
    int done, n = sse_events(s.out.p, ev, 32, &done);
    CHECKF(n == 14 && !done, "%d events: %s", n, s.out.p);
    for (int i = 0; i < n; i++) {
        CHECKF(!strcmp(cJSON_GetObjectItem(ev[i], "type")->valuestring, want[i]), "event %d: %s", i, s.out.p);
        if (index[i] >= 0) CHECKF(cJSON_GetObjectItem(ev[i], "index")->valueint == index[i], "event %d: %s", i, s.out.p);
    }
    const cJSON *u0 = cJSON_GetObjectItem(cJSON_GetObjectItem(ev[0], "message"), "usage");
    CHECK(cJSON_GetObjectItem(u0, "input_tokens")->valueint == 5 && cJSON_GetObjectItem(u0, "cache_read_input_tokens")->valueint == 4);
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(ev[2], "content_block"), "type")->valuestring, "thinking"));
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(ev[4], "delta"), "thinking")->valuestring, "r2"));
    const cJSON *tu = cJSON_GetObjectItem(ev[9], "content_block");
    CHECK(!strcmp(cJSON_GetObjectItem(tu, "type")->valuestring, "tool_use") && !strcmp(cJSON_GetObjectItem(tu, "name")->valuestring, "f"));
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(ev[10], "delta"), "partial_json")->valuestring, "{\"a\":1}"));
    const cJSON *md = ev[12];
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(md, "delta"), "stop_reason")->valuestring, "tool_use") &&
          cJSON_GetObjectItem(cJSON_GetObjectItem(md, "usage"), "output_tokens")->valueint == 6);
    const cJSON *ud = cJSON_GetObjectItem(md, "usage"); /* cumulative: the input figures again */
    CHECK(cJSON_GetObjectItem(ud, "input_tokens")->valueint == 5 && cJSON_GetObjectItem(ud, "cache_read_input_tokens")->valueint == 4 &&
          cJSON_GetObjectItem(ud, "cache_creation_input_tokens")->valueint == 0);
    for (int i = 0; i < n; i++) cJSON_Delete(ev[i]);
    api_stream_free(&s);
    /* nothing generated: still one (empty) text block */
    api_stream_init(&s, API_MESSAGES, &m, 0, 9);
    api_done dl = {SL_STOP_LENGTH, NULL, 9, 0, 0, 0, 0};
    CHECK(api_stream_end(&s, &dl) == 0 && tok_buf_put(&s.out, "", 1) == 0);
    CHECKF(strstr(s.out.p, "\"content_block\":{\"type\":\"text\",\"text\":\"\"}") && strstr(s.out.p, "\"stop_reason\":\"max_tokens\""), "%s", s.out.p);
    api_stream_free(&s);
}

/* ---- metrics ----------------------------------------------------------------------------------- */

TEST(serve_metrics_text) {
    api_model_metrics m[2];
    memset(m, 0, sizeof m);
    m[0].name = "demo";
    m[1].name = "we\"ird\\name";
    m[0].sched.requests = 12;
    m[0].sched.active = 3;
    m[0].sched.queued = 1;
    m[0].sched.generated_tokens = 500;
    m[0].model.hits = 75;
    m[0].model.misses = 25;
    m[0].model.bytes_read = 1000;
    m[0].model.tokens = 10;
    m[0].model.io_wait_s = 0.5;
    m[0].tok_per_s = 12.5;
    m[0].sched.ttft_bucket[0] = 2; /* two at or under 25 ms, one in (0.1, 0.25] */
    m[0].sched.ttft_bucket[3] = 1;
    m[0].sched.ttft_sum_s = 0.25;
    m[0].sched.ttft_count = 3;
    api_http_metrics h;
    memset(&h, 0, sizeof h);
    h.by_class[2] = 7;
    h.by_class[4] = 2;
    h.disconnects = 1;
    tok_buf b = {0};
    CHECK(api_metrics_text(&b, &h, m, 2) == 0 && tok_buf_put(&b, "", 1) == 0);
    static const char *const want[] = {
        "sluice_requests_total{model=\"demo\"} 12\n", "sluice_active_sequences{model=\"demo\"} 3\n",
        "sluice_queued_sequences{model=\"demo\"} 1\n", "sluice_generated_tokens_total{model=\"demo\"} 500\n",
        "sluice_expert_cache_hit_ratio{model=\"demo\"} 0.75\n", "sluice_bytes_read_per_token{model=\"demo\"} 100\n",
        "sluice_io_wait_seconds_total{model=\"demo\"} 0.5\n", "sluice_generation_tokens_per_second{model=\"demo\"} 12.5\n",
        "sluice_requests_total{model=\"we\\\"ird\\\\name\"} 0\n", "sluice_http_requests_total{code=\"2xx\"} 7\n",
        "sluice_http_requests_total{code=\"4xx\"} 2\n", "sluice_http_disconnects_total 1\n",
        "# TYPE sluice_requests_total counter\n", "# TYPE sluice_active_sequences gauge\n",
        "# TYPE sluice_time_to_first_token_seconds histogram\n",
        "sluice_time_to_first_token_seconds_bucket{model=\"demo\",le=\"0.025\"} 2\n",
        "sluice_time_to_first_token_seconds_bucket{model=\"demo\",le=\"0.1\"} 2\n",
        "sluice_time_to_first_token_seconds_bucket{model=\"demo\",le=\"0.25\"} 3\n",
        "sluice_time_to_first_token_seconds_bucket{model=\"demo\",le=\"+Inf\"} 3\n",
        "sluice_time_to_first_token_seconds_sum{model=\"demo\"} 0.25\n",
        "sluice_time_to_first_token_seconds_count{model=\"demo\"} 3\n",
        "sluice_queue_wait_seconds_count{model=\"demo\"} 0\n"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) CHECKF(strstr(b.p, want[i]), "no '%s' in\n%s", want[i], b.p);
    /* every sample line: a sluice_ name, its TYPE declared before it, a number */
    for (const char *l = b.p; *l; l = strchr(l, '\n') + 1) {
        if (*l == '#') continue;
        char name[128];
        double v;
        CHECKF(sscanf(l, "%127[a-z_]", name) == 1 && !strncmp(name, "sluice_", 7), "%.*s", (int)strcspn(l, "\n"), l);
        const char *sp = strchr(l, ' ');
        CHECK(sp && sscanf(sp, " %lf", &v) == 1);
        /* a histogram's _bucket / _sum / _count samples belong to the metric declared without them */
        char decl[160];
        snprintf(decl, sizeof decl, "# TYPE %s ", name);
        for (const char *suf = "_bucket\0_sum\0_count\0"; *suf && !strstr(b.p, decl); suf += strlen(suf) + 1) {
            size_t nl = strlen(name), sl = strlen(suf);
            if (nl > sl && !strcmp(name + nl - sl, suf)) snprintf(decl, sizeof decl, "# TYPE %.*s histogram", (int)(nl - sl), name);
        }
        const char *t = strstr(b.p, decl);
        CHECKF(t && t < l, "%s has no TYPE before its sample", name);
    }
    free(b.p);
}

/* ---- the routing counts behind the page's heatmap ---------------------------------------------- */

/* sl_model_expert_counts: after one decode step of a streamed model, each MoE layer's counts sum to
 * the experts per token; dense layers have none; a resident model counts nothing. */
TEST(serve_expert_counts) {
    const char *path = test_packed("qwen3_next");
    CHECK(path);
    sl_error err = {0};
    char *info = NULL;
    CHECKF(sl_info_json(path, &info, &err) == 0, "%s", err.msg);
    cJSON *j = cJSON_Parse(info);
    free(info);
    const cJSON *cfg = cJSON_GetObjectItem(j, "config");
    int E = cJSON_GetObjectItem(cfg, "n_experts")->valueint, K = cJSON_GetObjectItem(cfg, "n_experts_used")->valueint;
    cJSON_Delete(j);
    for (int resident = 0; resident < 2; resident++) {
        sl_model_params mp = sl_model_params_default();
        mp.resident = resident;
        sl_model *m = NULL;
        CHECKF(sl_model_open(path, &mp, &m, &err) == 0, "%s", err.msg);
        sl_session *s = NULL;
        CHECK(sl_session_new(m, 0, &s) == 0);
        int32_t tok = 7;
        CHECK(sl_session_eval(s, &tok, 1, NULL, 0) == 0);
        int moe = 0, n_layers = sl_model_n_layers(m);
        uint64_t c[1024];
        for (int l = 0; l < n_layers; l++) {
            for (int e = 0; e < E; e++) c[e] = 0xdeadbeef;
            int ne = -1;
            CHECK(sl_model_expert_counts(m, l, c, E, &ne) == 0);
            if (ne == 0) continue; /* a dense layer */
            CHECK(ne == E);
            moe++;
            uint64_t sum = 0;
            for (int e = 0; e < E; e++) {
                CHECKF(c[e] <= 1, "layer %d expert %d: %llu", l, e, (unsigned long long)c[e]);
                sum += c[e];
            }
            CHECKF(sum == (uint64_t)(resident ? 0 : K), "layer %d: %llu expert requests (resident %d, K %d)", l,
                   (unsigned long long)sum, resident, K);
        }
        CHECK(moe > 0 && moe < n_layers); /* the fixture has a dense layer */
        int ne = 0;
        CHECK(sl_model_expert_counts(m, n_layers, c, E, &ne) == SL_ERANGE && sl_model_expert_counts(m, -1, c, E, NULL) == SL_ERANGE);
        sl_session_free(s);
        sl_model_close(m);
    }
}

/* ---- the dialect and route tables -------------------------------------------------------------- */

/* Every api_kind has a complete dialect of its own, and exactly one generating route: a POST, behind the
 * key, answered by gen_endpoint (other rows may name a dialect for the shape of their answers, as a
 * count_tokens would). A new API that misses its row, or a pointer, fails here. */
TEST(serve_dialect_table_is_complete) {
    int n_routes = 0;
    const srv_route *routes = srv_routes(&n_routes);
    for (int k = 0; k < API_N_KINDS; k++) {
        const api_dialect *d = api_dialect_of((api_kind)k);
        CHECKF(d && (int)d->kind == k && d->name && *d->name && d->id_prefix && *d->id_prefix && d->prompt_param, "kind %d", k);
        CHECKF(d->parse && d->response && d->stream_begin && d->stream_piece && d->stream_end && d->stream_error &&
                   d->error_json && d->error_type && d->models_json && d->model_json, "%s: a NULL entry", d->name);
        for (int j = 0; j < k; j++) CHECKF(strcmp(api_dialect_of((api_kind)j)->name, d->name), "two dialects named %s", d->name);
        int rows = 0;
        for (int i = 0; i < n_routes; i++) {
            if (routes[i].api != d || routes[i].handler != gen_endpoint) continue;
            rows++;
            CHECKF(!strcmp(routes[i].method, "POST") && !routes[i].open, "%s", routes[i].path);
        }
        CHECKF(rows == 1, "%s: %d routes", d->name, rows);
    }
    for (int i = 0; i < n_routes; i++) {
        const char *rest = NULL;
        CHECKF(routes[i].handler && (routes[i].api || routes[i].handler != gen_endpoint), "%s", routes[i].path);
        if (!routes[i].prefix) CHECKF(srv_route_of(routes[i].path, &rest) == &routes[i] && !rest, "%s", routes[i].path);
    }
}

/* Paths: whole ones match whole; a prefix route needs a non-empty rest, which its handler gets. */
TEST(serve_route_lookup) {
    const char *rest = NULL;
    const srv_route *r = srv_route_of("/v1/models/qwen", &rest);
    CHECK(r && r->prefix && !strcmp(r->method, "GET") && rest && !strcmp(rest, "qwen"));
    CHECK(!srv_route_of("/v1/models/", &rest) && !srv_route_of("/v1/chat/completions/", &rest) && !srv_route_of("/nope", &rest));
    CHECK(!srv_route_of("/v1/chat", &rest) && !srv_route_of("", &rest));
    r = srv_route_of("/v1/messages", &rest);
    CHECK(r && r->api == &api_anthropic_messages && !rest);
    r = srv_route_of("/health", &rest);
    CHECK(r && r->open && !r->api);
    r = srv_route_of("/metrics", &rest);
    CHECK(r && !r->open);
}

/* 1 when text is a whole sentence of the request's grammar. */
static int grammar_takes(const api_gen *g, const char *text) {
    gr_state *st = NULL;
    if (!g->grammar || gr_state_new(g->grammar, &st)) return -1;
    int ok = gr_accept(st, text, strlen(text)) == 0 && gr_complete(st);
    gr_state_free(st);
    return ok;
}

/* tool_choice auto (or absent) with a strict tool: free text, or text then calls whose names are
 * tools and whose strict arguments validate; nothing after the calls. Without a strict tool, or with a
 * response_format, no grammar (the calls are not constrained). OpenAI and Anthropic forms. */
TEST(serve_parse_strict_tools_auto) {
#define VERSE_PARAMS "{\"type\": \"object\", \"properties\": {\"chapter\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 4}}, \"required\": [\"chapter\"], \"additionalProperties\": false}"
    static const char *const bodies[] = {
        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"verse\", \"strict\": true, \"parameters\": " VERSE_PARAMS "}}, {\"type\": \"function\", \"function\": {\"name\": \"search\"}}]}",
        "{\"max_tokens\": 9, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": {\"type\": \"auto\"}, \"tools\": [{\"name\": \"verse\", \"strict\": true, \"input_schema\": " VERSE_PARAMS "}, {\"name\": \"search\", \"input_schema\": {\"type\": \"object\"}}]}"};
    static const char *const yes[] = {
        "", "Amen.", "I read <tool> and <tool_cal but no call",
        "Let me look.<tool_call>\n{\"name\": \"verse\", \"arguments\": {\"chapter\": 2}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": [1, \"x\"]}}\n</tool_call>\n<tool_call>\n{\"name\": \"verse\", \"arguments\": {\"chapter\": 4}}\n</tool_call>"};
    static const char *const no[] = {
        "<tool_call>\n{\"name\": \"verse\", \"arguments\": {\"chapter\": 5}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"verse\", \"arguments\": {\"chapter\": 2, \"x\": 1}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"verse\", \"arguments\": {\"chapter\": 2}}\n</tool_call> and more text",
        "<<tool_call>\n{\"name\": \"verse\"}"};
    for (int k = 0; k < 2; k++) {
        api_gen g;
        api_error e;
        CHECKF(parse(k ? API_MESSAGES : API_CHAT, bodies[k], &g, &e) == 0, "%d: %s", k, e.message);
        CHECKF(g.grammar && g.enable_thinking == 0, "%d: no grammar", k);
        for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) CHECKF(grammar_takes(&g, yes[i]) == 1, "%d: refused %s", k, yes[i]);
        for (size_t i = 0; i < sizeof no / sizeof *no; i++) CHECKF(grammar_takes(&g, no[i]) == 0, "%d: took %s", k, no[i]);
        api_gen_free(&g);
    }
    static const char *const free_[] = {
        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"verse\", \"parameters\": " VERSE_PARAMS "}}]}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": {\"type\": \"json_object\"}, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"verse\", \"strict\": true, \"parameters\": " VERSE_PARAMS "}}]}"};
    for (int k = 0; k < 2; k++) {
        api_gen g;
        api_error e;
        CHECKF(parse(API_CHAT, free_[k], &g, &e) == 0, "%d: %s", k, e.message);
        CHECKF(k ? grammar_takes(&g, "{}") == 1 : !g.grammar, "%d: the tools' grammar applies", k);
        api_gen_free(&g);
    }
#undef VERSE_PARAMS
}
