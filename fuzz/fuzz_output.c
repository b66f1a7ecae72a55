/*
 * fuzz_output.c — the parser of generated text (serve/output.c): <think> blocks and <tool_call> bodies in
 * both forms, fed in pieces cut where the input says (byte 0: flags; bytes 0x01 in the rest cut a piece),
 * into a non-streamed result and an SSE stream of each API at once. Every response body must be JSON
 * (abort otherwise: a finding).
 */
#include <cjson/cJSON.h>

#include "fuzz.h"
#include "serve/api.h"

typedef struct {
    api_result r;
    api_stream s[2];
} sink;

static int add(void *user, out_kind kind, const char *text, size_t len, const out_call *call) {
    sink *k = user;
    if (api_result_add(&k->r, kind, text, len, call)) return -1;
    for (int i = 0; i < 2; i++)
        if (api_stream_piece(&k->s[i], kind, text, len, call)) return -1;
    return 0;
}

static void must_parse(char *j) {
    if (!j) return; /* out of memory */
    cJSON *o = cJSON_Parse(j);
    if (!o) { fprintf(stderr, "not JSON: %s\n", j); abort(); }
    cJSON_Delete(o);
    free(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    out_parser p;
    out_init(&p, data[0] % 3, (data[0] >> 2) & 1);
    sink k;
    memset(&k, 0, sizeof k);
    api_meta m = {.id = "chatcmpl-fuzz", .model = "demo", .created = 1};
    api_stream_init(&k.s[0], API_CHAT, &m, 1, 3);
    api_stream_init(&k.s[1], API_MESSAGES, &m, 0, 3);
    int fail = api_stream_begin(&k.s[0]) || api_stream_begin(&k.s[1]);
    const char *s = (const char *)data + 1, *end = (const char *)data + size;
    while (!fail && s < end) {
        const char *cut = memchr(s, 1, (size_t)(end - s));
        if (!cut) cut = end;
        fail = out_push(&p, s, (size_t)(cut - s), add, &k);
        s = cut + (cut < end);
    }
    if (!fail && !out_end(&p, add, &k)) {
        api_done d = {.stop = SL_STOP_EOG, .n_prompt = 3, .n_generated = 7};
        must_parse(oai_chat_response(&m, &k.r, &d));
        must_parse(ant_message_response(&m, &k.r, &d));
        api_stream_end(&k.s[0], &d);
        api_stream_end(&k.s[1], &d);
    }
    out_free(&p);
    api_result_free(&k.r);
    api_stream_free(&k.s[0]);
    api_stream_free(&k.s[1]);
    return 0;
}
