/*
 * test_state.c — saved session state (sl_session_save / _load / _file): a state saved after a prompt
 * and loaded into a fresh session continues bitwise as the original does, on every fixture; the file
 * form keeps its extra bytes and leaves no temporary behind; damaged, truncated, foreign and too-long
 * states are refused with the session unchanged.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice.h"
#include "test.h"

static sl_model *open_packed(const char *fixture) {
    sl_model *m = NULL;
    sl_error err = {0};
    const char *p = test_packed(fixture);
    if (!p || sl_model_open(p, NULL, &m, &err)) fprintf(stderr, "    open %s: %s\n", fixture, err.msg);
    return m;
}

/* n tokens of decode from s (greedy from the logits of each step), logits of each step into out [n][V] */
static int decode(sl_session *s, int32_t first, int n, int V, float *out) {
    int32_t t = first;
    for (int i = 0; i < n; i++) {
        for (int v = 0; v < V; v++) out[(size_t)i * V + v] = NAN;
        if (sl_session_eval(s, &t, 1, out + (size_t)i * V, 0)) return -1;
        int best = 0;
        for (int v = 1; v < V; v++) best = out[(size_t)i * V + v] > out[(size_t)i * V + best] ? v : best;
        t = best;
    }
    return 0;
}

FIXTURE_TEST(state_save_load_continues_bitwise) {
    sl_model *m = open_packed(arg);
    CHECK(m);
    const int V = sl_model_n_vocab(m);
    int32_t prompt[75];
    for (int i = 0; i < 75; i++) prompt[i] = (int32_t)((i * 37 + 11) % V);
    sl_session *a = NULL, *b = NULL;
    CHECK(sl_session_new(m, 0, &a) == SL_OK && sl_session_new(m, 0, &b) == SL_OK);
    CHECK(sl_session_eval(a, prompt, 75, NULL, 0) == SL_OK);
    void *blob = NULL;
    size_t len = 0;
    CHECK(sl_session_save(a, &blob, &len) == SL_OK && len > 0);
    CHECK(sl_session_eval(b, prompt, 3, NULL, 0) == SL_OK); /* b has a state of its own, replaced by the load */
    CHECKF(sl_session_load(b, blob, len) == SL_OK, "%s", sl_session_errmsg(b));
    CHECK(sl_session_n_past(b) == 75);
    float *la = malloc((size_t)8 * V * sizeof(float)), *lb = malloc((size_t)8 * V * sizeof(float));
    int ok = !decode(a, 5, 8, V, la) && !decode(b, 5, 8, V, lb) && !memcmp(la, lb, (size_t)8 * V * sizeof(float));
    free(la);
    free(lb);
    free(blob);
    sl_session_free(a);
    sl_session_free(b);
    sl_model_close(m);
    CHECKF(ok, "%s: the loaded session's next 8 steps differ from the original's", arg);
}

TEST(state_file_roundtrip_and_bad_states) {
    sl_model *m = open_packed("qwen3_next"), *other = open_packed("qwen3_5_moe");
    CHECK(m && other);
    const int V = sl_model_n_vocab(m);
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = (int32_t)((i * 13 + 1) % V);
    sl_session *a = NULL, *b = NULL, *small = NULL, *o = NULL;
    CHECK(sl_session_new(m, 0, &a) == SL_OK && sl_session_new(m, 0, &b) == SL_OK);
    CHECK(sl_session_new(m, 16, &small) == SL_OK && sl_session_new(other, 0, &o) == SL_OK);
    CHECK(sl_session_eval(a, prompt, 40, NULL, 0) == SL_OK);
    const char *path = test_path("%s/conv.state", test_tmpdir());
    const char extra[] = "{\"messages\": []}";
    sl_error err = {0};
    CHECKF(sl_session_save_file(a, path, extra, sizeof extra - 1, &err) == SL_OK, "%s", err.msg);
    CHECK(!test_dir_has_prefix(test_tmpdir(), "conv.state.tmp"));
    void *x = NULL;
    size_t xl = 0;
    CHECKF(sl_session_load_file(b, path, &x, &xl, &err) == SL_OK, "%s", err.msg);
    CHECK(xl == sizeof extra - 1 && x && !strcmp(x, extra) && sl_session_n_past(b) == 40);
    free(x);
    /* a directory that does not exist: an error, no file */
    const char *nodir = test_path("%s/no/such/dir/x.state", test_tmpdir());
    CHECK(sl_session_save_file(a, nodir, NULL, 0, &err) != SL_OK && !test_exists(nodir));

    void *blob = NULL;
    size_t len = 0;
    CHECK(sl_session_save(a, &blob, &len) == SL_OK);
    sl_session_reset(b);
    CHECK(sl_session_eval(b, prompt, 7, NULL, 0) == SL_OK);
    unsigned char *bad = malloc(len);
    memcpy(bad, blob, len);
    bad[len / 2] ^= 1;
    CHECK(sl_session_load(b, bad, len) == SL_ECHECKSUM);
    CHECK(sl_session_load(b, blob, len - 9) == SL_EFORMAT);
    CHECK(sl_session_load(b, "hello", 5) == SL_EFORMAT);
    CHECKF(sl_session_load(o, blob, len) == SL_EMISMATCH, "%s", sl_session_errmsg(o));
    CHECKF(sl_session_load(small, blob, len) == SL_ERANGE, "%s", sl_session_errmsg(small));
    CHECK(strstr(sl_session_errmsg(small), "40 positions") != NULL);
    CHECK(sl_session_n_past(b) == 7 && sl_session_n_past(small) == 0 && sl_session_n_past(o) == 0);
    /* b after the refused loads continues like a session that saw only those 7 tokens */
    sl_session *c = NULL;
    CHECK(sl_session_new(m, 0, &c) == SL_OK && sl_session_eval(c, prompt, 7, NULL, 0) == SL_OK);
    float *l1 = malloc((size_t)V * sizeof(float)), *l2 = malloc((size_t)V * sizeof(float));
    int same = !sl_session_eval(b, prompt + 7, 1, l1, 0) && !sl_session_eval(c, prompt + 7, 1, l2, 0) &&
               !memcmp(l1, l2, (size_t)V * sizeof(float));
    free(l1);
    free(l2);
    free(bad);
    free(blob);
    sl_session_free(a);
    sl_session_free(b);
    sl_session_free(c);
    sl_session_free(small);
    sl_session_free(o);
    sl_model_close(m);
    sl_model_close(other);
    CHECK(same);
}

/* MLA keeps its compressed cache: one more position adds, per attention layer, kv_lora + qk_rope_head_dim
 * floats (deepseek_v3 fixture: 3 layers x (32 + 8)), not the 2 x heads x head_dim of expanded K and V. */
TEST(mla_state_holds_the_compressed_cache) {
    sl_model *m = open_packed("deepseek_v3");
    CHECK(m);
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = (int32_t)((i * 7 + 3) % sl_model_n_vocab(m));
    sl_session *a = NULL;
    CHECK(sl_session_new(m, 0, &a) == SL_OK);
    void *b1 = NULL, *b2 = NULL;
    size_t l1 = 0, l2 = 0;
    CHECK(sl_session_eval(a, prompt, 39, NULL, 0) == SL_OK && sl_session_save(a, &b1, &l1) == SL_OK);
    CHECK(sl_session_eval(a, prompt + 39, 1, NULL, 0) == SL_OK && sl_session_save(a, &b2, &l2) == SL_OK);
    free(b1);
    free(b2);
    sl_session_free(a);
    sl_model_close(m);
    CHECKF(l2 - l1 == 3 * (32 + 8) * sizeof(float), "one position adds %zu bytes, want %zu", l2 - l1,
           3 * (32 + 8) * sizeof(float));
}
