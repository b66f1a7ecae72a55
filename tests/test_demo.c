/*
 * test_demo.c — the shipped demo model (models/demo.sluice, models/demo/README.md) against transformers:
 * float32 logits of its weights (q4 experts, q8 rest, dequantized) within 1e-4 relative over 96 tokens of
 * held-out text, greedy tokens identical, its tokenizer giving HF tokenizers' ids for that text, and its
 * experts streamed through a quarter-size cache giving bitwise the resident logits.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"
#include "test.h"

#define DEMO "models/demo.sluice"
#define MAXT 128

typedef struct {
    int32_t tokens[MAXT], greedy[32];
    int n, n_greedy;
    char *text;
    float *logits; /* [n][V] */
    size_t logits_len;
} demo_ref;

static int ids(const cJSON *a, int32_t *out, int max) {
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, a) {
        if (n == max || !cJSON_IsNumber(it)) return -1;
        out[n++] = (int32_t)it->valueint;
    }
    return n;
}

static int load(demo_ref *r) {
    memset(r, 0, sizeof *r);
    char *txt = test_read("models/demo/ref.json", NULL);
    cJSON *j = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    if (!j) return -1;
    r->n = ids(cJSON_GetObjectItemCaseSensitive(j, "tokens"), r->tokens, MAXT);
    r->n_greedy = ids(cJSON_GetObjectItemCaseSensitive(j, "greedy"), r->greedy, 32);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "text");
    r->text = cJSON_IsString(t) ? strdup(t->valuestring) : NULL;
    cJSON_Delete(j);
    r->logits = (float *)test_read("models/demo/ref_logits.f32", &r->logits_len);
    return r->n > 0 && r->n_greedy > 0 && r->text && r->logits ? 0 : -1;
}

static void unload(demo_ref *r) {
    free(r->text);
    free(r->logits);
}

static sl_model *open_demo(int resident, double cache_fraction) {
    sl_model_params mp = sl_model_params_default();
    mp.resident = resident;
    sl_model *m = NULL;
    sl_error err = {0};
    if (!resident) {
        /* a quarter of the expert section: most requests miss and are read from the file */
        sl_model *probe = NULL;
        if (sl_model_open(DEMO, &mp, &probe, &err)) { fprintf(stderr, "    open: %s\n", err.msg); return NULL; }
        sl_stats st;
        sl_model_stats(probe, &st);
        sl_model_close(probe);
        mp.cache_bytes = (uint64_t)((double)st.expert_bytes * cache_fraction);
    }
    if (sl_model_open(DEMO, &mp, &m, &err)) fprintf(stderr, "    open: %s\n", err.msg);
    return m;
}

/* all-position logits of toks, poisoned first so that every element must be written */
static float *eval(sl_model *m, const int32_t *toks, int n) {
    size_t len = (size_t)n * (size_t)sl_model_n_vocab(m);
    float *out = malloc(len * sizeof(float));
    sl_session *s = NULL;
    if (!out || sl_session_new(m, 0, &s)) { free(out); return NULL; }
    for (size_t i = 0; i < len; i++) out[i] = NAN;
    if (sl_session_eval(s, toks, n, out, 1)) {
        fprintf(stderr, "    eval: %s\n", sl_session_errmsg(s));
        free(out);
        out = NULL;
    }
    sl_session_free(s);
    return out;
}

TEST(demo_logits_match_transformers) {
    demo_ref r;
    CHECKF(load(&r) == 0, "models/demo/ref.json or ref_logits.f32 missing or malformed");
    sl_model *m = open_demo(1, 0);
    CHECK(m);
    int V = sl_model_n_vocab(m);
    CHECKF(r.logits_len == (size_t)r.n * (size_t)V * 4, "ref_logits.f32 has %zu bytes, want %d x %d floats",
           r.logits_len, r.n, V);
    float *got = eval(m, r.tokens, r.n);
    CHECK(got);
    double worst = test_rel_err(got, r.logits, r.n, V);
    printf("    demo: max relative logit error %.2e over %d positions\n", worst, r.n);
    free(got);
    /* greedy, token by token after the prompt */
    sl_session *s = NULL;
    CHECK(sl_session_new(m, 0, &s) == SL_OK);
    float *lg = malloc((size_t)V * sizeof(float));
    int ok = sl_session_eval(s, r.tokens, r.n, lg, 0) == SL_OK, mismatch = -1;
    for (int i = 0; ok && i < r.n_greedy; i++) {
        int best = 0;
        for (int v = 1; v < V; v++) best = lg[v] > lg[best] ? v : best;
        if (best != r.greedy[i]) { mismatch = i; break; }
        ok = sl_session_eval(s, &r.greedy[i], 1, lg, 0) == SL_OK;
    }
    free(lg);
    sl_session_free(s);
    sl_model_close(m);
    unload(&r);
    CHECKF(worst <= 1e-4, "max relative logit error %.3e (limit 1e-4)", worst);
    CHECK(ok);
    CHECKF(mismatch < 0, "greedy token %d differs from transformers'", mismatch);
}

TEST(demo_tokenizer_matches_hf) {
    demo_ref r;
    CHECK(load(&r) == 0);
    sl_tokenizer *tok = NULL;
    sl_error err = {0};
    CHECKF(sl_tokenizer_load(DEMO, &tok, &err) == SL_OK, "%s", err.msg);
    CHECK(sl_tokenizer_n_vocab(tok) == 4096);
    int32_t *got = NULL;
    int n = 0;
    sl_status st = sl_tokenize(tok, r.text, strlen(r.text), 0, &got, &n, &err);
    sl_tokenizer_free(tok);
    int same = st == SL_OK && n == r.n && !memcmp(got, r.tokens, (size_t)n * sizeof *got);
    free(got);
    unload(&r);
    CHECKF(same, "tokenizing ref.json's text gives %d ids (status %d), want HF tokenizers' %d", n, st, r.n);
}

TEST(demo_streamed_equals_resident) {
    demo_ref r;
    CHECK(load(&r) == 0);
    sl_model *res = open_demo(1, 0), *str = open_demo(0, 0.25);
    CHECK(res && str);
    float *a = eval(res, r.tokens, r.n), *b = eval(str, r.tokens, r.n);
    sl_stats st;
    sl_model_stats(str, &st);
    size_t len = (size_t)r.n * (size_t)sl_model_n_vocab(res);
    int same = a && b && !memcmp(a, b, len * sizeof(float));
    free(a);
    free(b);
    sl_model_close(res);
    sl_model_close(str);
    unload(&r);
    CHECK(!st.resident && st.misses > 0 && st.cache_bytes < st.expert_bytes);
    CHECKF(same, "streamed logits (cache %llu of %llu bytes) differ from resident", (unsigned long long)st.cache_bytes,
           (unsigned long long)st.expert_bytes);
}
