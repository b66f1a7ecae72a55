/*
 * logprobs.c — OpenAI's logprobs objects (api.h) from the scheduler's per-token log-probabilities
 * (sched.h srv_logprob): chat's {"content": [{"token", "logprob", "bytes", "top_logprobs"}], "refusal"}
 * and completions' {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; put into a whole
 * response's first choice, or sent as a chunk of their own in a stream (after the text they belong to).
 * Special tokens (an end of turn) have no text and are left out, as OpenAI leaves its end token out.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "serve/api.h"

/* The token's text (invalid UTF-8 replaced) as a cJSON string, and its bytes as an array. */
static int token_text(const sl_tokenizer *tok, int32_t id, cJSON **text, cJSON **bytes) {
    size_t n = 0;
    const char *p = tok_piece(tok, id, &n);
    tok_buf b = {0};
    *text = NULL;
    *bytes = cJSON_CreateArray();
    if (!*bytes || tok_utf8_lossy(&b, p ? p : "", n) || !(*text = api_text(b.p, b.n))) {
        free(b.p);
        cJSON_Delete(*bytes);
        return -1;
    }
    free(b.p);
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(*bytes, cJSON_CreateNumber((unsigned char)p[i]));
    return 0;
}

/* {"token", "logprob", "bytes"} */
static cJSON *chat_entry(const sl_tokenizer *tok, int32_t id, float lp) {
    cJSON *e = cJSON_CreateObject(), *text, *bytes;
    if (!e || token_text(tok, id, &text, &bytes)) {
        cJSON_Delete(e);
        return NULL;
    }
    cJSON_AddItemToObject(e, "token", text);
    cJSON_AddNumberToObject(e, "logprob", lp);
    cJSON_AddItemToObject(e, "bytes", bytes);
    return e;
}

static cJSON *chat_logprobs(const sl_tokenizer *tok, const api_token_lp *t, int n) {
    cJSON *o = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(o, "content");
    cJSON_AddNullToObject(o, "refusal");
    for (int i = 0; i < n && content; i++) {
        if (sl_tokenizer_is_special(tok, t[i].id) || sl_tokenizer_is_eog(tok, t[i].id)) continue;
        cJSON *e = chat_entry(tok, t[i].id, t[i].lp.logprob), *top = cJSON_CreateArray();
        for (int k = 0; e && top && k < t[i].lp.n_top; k++)
            cJSON_AddItemToArray(top, chat_entry(tok, t[i].lp.top_id[k], t[i].lp.top_logprob[k]));
        cJSON_AddItemToObject(e, "top_logprobs", top);
        cJSON_AddItemToArray(content, e);
    }
    return o;
}

static cJSON *completion_logprobs(const sl_tokenizer *tok, const api_token_lp *t, int n, size_t offset) {
    cJSON *o = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
    for (int i = 0; i < n && offs; i++) {
        if (sl_tokenizer_is_special(tok, t[i].id) || sl_tokenizer_is_eog(tok, t[i].id)) continue;
        cJSON *text, *bytes, *top = cJSON_CreateObject();
        if (token_text(tok, t[i].id, &text, &bytes)) break;
        cJSON_Delete(bytes);
        cJSON_AddItemToArray(tokens, text);
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(t[i].lp.logprob));
        for (int k = 0; top && k < t[i].lp.n_top; k++) {
            cJSON *kt, *kb;
            if (token_text(tok, t[i].lp.top_id[k], &kt, &kb)) break;
            cJSON_Delete(kb);
            if (!cJSON_GetObjectItemCaseSensitive(top, kt->valuestring)) /* two ids of one text: the likelier */
                cJSON_AddNumberToObject(top, kt->valuestring, t[i].lp.top_logprob[k]);
            cJSON_Delete(kt);
        }
        cJSON_AddItemToArray(tops, top);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)offset));
        size_t len = 0;
        tok_piece(tok, t[i].id, &len);
        offset += len;
    }
    return o;
}

cJSON *api_logprobs_json(api_kind kind, const sl_tokenizer *tok, const api_token_lp *t, int n, size_t offset) {
    return kind == API_COMPLETION ? completion_logprobs(tok, t, n, offset) : chat_logprobs(tok, t, n);
}

char *api_with_logprobs(char *body, cJSON *lp) {
    cJSON *j = body ? cJSON_Parse(body) : NULL;
    free(body);
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    char *out = NULL;
    if (c && lp) {
        if (cJSON_GetObjectItemCaseSensitive(c, "logprobs")) cJSON_ReplaceItemInObjectCaseSensitive(c, "logprobs", lp);
        else cJSON_AddItemToObject(c, "logprobs", lp);
        lp = NULL;
        out = cJSON_PrintUnformatted(j);
    }
    cJSON_Delete(lp);
    cJSON_Delete(j);
    return out;
}

int api_stream_logprobs(api_stream *s, cJSON *lp) {
    if (!lp) return -1;
    if (!s->started && api_stream_begin(s)) {
        cJSON_Delete(lp);
        return -1;
    }
    cJSON *j = cJSON_CreateObject(), *c = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", s->meta.id);
    cJSON_AddStringToObject(j, "object", s->kind == API_COMPLETION ? "text_completion" : "chat.completion.chunk");
    cJSON_AddNumberToObject(j, "created", (double)s->meta.created);
    cJSON_AddStringToObject(j, "model", s->meta.model);
    cJSON *choices = cJSON_AddArrayToObject(j, "choices");
    cJSON_AddNumberToObject(c, "index", s->choice);
    if (s->kind == API_COMPLETION) cJSON_AddStringToObject(c, "text", "");
    else cJSON_AddItemToObject(c, "delta", cJSON_CreateObject());
    cJSON_AddItemToObject(c, "logprobs", lp);
    cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    return api_sse(&s->out, NULL, j);
}
