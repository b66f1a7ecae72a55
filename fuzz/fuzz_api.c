/*
 * fuzz_api.c — request bodies of the server's endpoints (serve/api_openai.c, serve/api_anthropic.c) and
 * chat formatting of what they carry (text/chat.c: arbitrary messages, tool calls and tools JSON). Input
 * byte 0 picks the API dialect (api_dialect_of: chat, completions, messages, ...); the rest is the body.
 * A chat request that parses is rendered with the demo model's template and tokenized, as the server does.
 */
#include "fuzz.h"
#include "serve/api.h"
#include "sluice.h"

static sl_tokenizer *tok;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sl_error err;
    if (!tok) {
        char p[4096];
        snprintf(p, sizeof p, "%s/models/demo.sluice", FUZZ_ROOT);
        if (sl_tokenizer_load(p, &tok, &err) != SL_OK) { fprintf(stderr, "fuzz: %s\n", err.msg); abort(); }
    }
    if (size < 1) return 0;
    const char *body = (const char *)data + 1;
    size_t n = size - 1;
    api_gen g;
    api_error e;
    const api_dialect *api = api_dialect_of((api_kind)(data[0] % API_N_KINDS));
    if (api->parse(body, n, &g, &e)) {
        char *j = api->error_json(&e);
        free(j);
        api_gen_free(&g); /* a failed parse may hold the JSON tree */
        return 0;
    }
    if (g.n_msgs) {
        sl_chat_params cp = sl_chat_params_default();
        cp.enable_thinking = g.enable_thinking;
        cp.tools = g.tools;
        char *text = NULL;
        if (sl_chat_format(tok, g.msgs, g.n_msgs, &cp, &text, &err) == SL_OK) {
            int32_t *ids = NULL;
            int ni = 0;
            if (sl_tokenize(tok, text, strlen(text), 0, &ids, &ni, &err) == SL_OK) free(ids);
            free(text);
        }
    }
    api_gen_free(&g);
    return 0;
}
