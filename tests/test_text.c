/*
 * test_text.c — tokenizer, streaming detokenizer, sampler, chat formatter and generation loop (the
 * comparisons with HF tokenizers and jinja2 are in tests/py).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice.h"
#include "test.h"
#include "text/tokenizer.h"

static sl_tokenizer *tiny(void) {
    sl_tokenizer *t = NULL;
    sl_error err = {0};
    if (sl_tokenizer_load("tests/data/tiny_tokenizer/tokenizer.json", &t, &err)) test_fail(__FILE__, __LINE__, "%s", err.msg);
    return t;
}

TEST(text_utf8_repair) {
    tok_buf b = {0};
    /* maximal subparts: a truncated 3-byte sequence is one U+FFFD; a lone continuation byte is one */
    const char in[] = "a\xe4\xb8" "b\x80" "c\xed\xa0\x80" "d";
    CHECK(!tok_utf8_valid(in, sizeof in - 1));
    CHECK(tok_utf8_lossy(&b, in, sizeof in - 1) == 0);
    CHECKF(!strcmp(b.p, "a\xef\xbf\xbd" "b\xef\xbf\xbd" "c\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" "d"), "%s", b.p);
    free(b.p);
    CHECK(tok_utf8_complete_prefix("ab\xe4\xb8", 4) == 2);  /* unfinished character waits */
    CHECK(tok_utf8_complete_prefix("ab\xff", 3) == 3);      /* never valid: not held */
    CHECK(tok_utf8_complete_prefix("\xf0\x9f\x98\x80", 4) == 4);
}

TEST(text_tokenize_roundtrip) {
    sl_tokenizer *t = tiny();
    CHECK(t);
    CHECK(sl_tokenizer_n_vocab(t) == 256);
    CHECK(sl_tokenizer_token_id(t, "<|im_end|>") == 255 && sl_tokenizer_is_eog(t, 255) && sl_tokenizer_is_special(t, 253));
    const char *text = "the quick <|im_start|>user\n  Привет 你好 👨‍👩‍👧\tx<|im_end|>";
    int32_t *ids = NULL;
    int n = 0;
    sl_error err = {0};
    CHECK(sl_tokenize(t, text, strlen(text), 0, &ids, &n, &err) == SL_OK);
    int specials = 0;
    for (int i = 0; i < n; i++) specials += ids[i] >= 253;
    CHECK(specials == 2);
    char *back = NULL;
    size_t bl = 0;
    CHECK(sl_detokenize(t, ids, n, 0, &back, &bl, &err) == SL_OK);
    CHECKF(!strcmp(back, text) && bl == strlen(text), "%s", back);
    free(back);
    CHECK(sl_detokenize(t, ids, n, 1, &back, &bl, &err) == SL_OK); /* skip_special drops the two */
    CHECK(bl == strlen(text) - strlen("<|im_start|>") - strlen("<|im_end|>"));
    free(back);
    free(ids);
    /* NO_SPECIAL: the marker is plain text */
    CHECK(sl_tokenize(t, "<|im_end|>", 10, SL_TOKENIZE_NO_SPECIAL, &ids, &n, &err) == SL_OK && n > 1);
    free(ids);
    int32_t bad = 999;
    CHECK(sl_detokenize(t, &bad, 1, 0, &back, &bl, &err) == SL_ERANGE);
    CHECK(sl_tokenize(t, "x\xff", 2, SL_TOKENIZE_STRICT_UTF8, &ids, &n, &err) == SL_EINVAL && strstr(err.msg, "UTF-8"));
    CHECK(sl_tokenize(t, "", 0, 0, &ids, &n, &err) == SL_OK && n == 0);
    free(ids);
    sl_tokenizer_free(t);
}

/* Random ids through the streaming decoder: the pieces never split a character and add up to the
 * one-shot decode. */
TEST(text_detok_stream_never_splits) {
    sl_tokenizer *t = tiny();
    CHECK(t);
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    for (int round = 0; round < 50; round++) {
        int32_t ids[64];
        int n = 1 + rand() % 64;
        for (int i = 0; i < n; i++) ids[i] = rand() % 256;
        char *whole = NULL;
        size_t wl;
        sl_error err = {0};
        CHECK(sl_detokenize(t, ids, n, 1, &whole, &wl, &err) == SL_OK);
        sl_detok *d = NULL;
        CHECK(sl_detok_new(t, 1, &d) == SL_OK);
        tok_buf acc = {0};
        int ok = 1;
        for (int i = 0; i <= n; i++) {
            size_t len;
            const char *p = i < n ? sl_detok_push(d, ids[i], &len) : sl_detok_flush(d, &len);
            ok &= p && tok_utf8_valid(p, len);
            tok_buf_put(&acc, p ? p : "", p ? len : 0);
        }
        ok &= acc.n == wl && !memcmp(acc.p, whole, wl);
        free(acc.p);
        free(whole);
        sl_detok_free(d);
        CHECKF(ok, "round %d (seed %u): streamed text differs from one-shot decode", round, seed);
    }
    sl_tokenizer_free(t);
}

/* Both merge forms ("a b" and ["a","b"]) and a missing byte in the vocabulary. */
TEST(text_merges_both_forms) {
    const char *fmt = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"c\":3,\"abc\":4},"
                      "\"merges\":%s},\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
                      "\"use_regex\":false},\"decoder\":{\"type\":\"ByteLevel\"}}";
    const char *forms[] = {"[\"a b\",\"ab c\"]", "[[\"a\",\"b\"],[\"ab\",\"c\"]]"};
    for (int f = 0; f < 2; f++) {
        char json[1024];
        snprintf(json, sizeof json, fmt, forms[f]);
        sl_tokenizer *t = NULL;
        sl_error err = {0};
        CHECKF(sl_tokenizer_from_json(json, strlen(json), NULL, NULL, &t, &err) == SL_OK, "%s", err.msg);
        int32_t *ids = NULL;
        int n = 0;
        CHECK(sl_tokenize(t, "abcabxa", 7, 0, &ids, &n, &err) == SL_OK);
        /* x is not in the vocabulary: dropped, as HF BPE without unk_token does */
        CHECKF(n == 3 && ids[0] == 4 && ids[1] == 2 && ids[2] == 0, "n=%d", n);
        free(ids);
        sl_tokenizer_free(t);
    }
    sl_tokenizer *t = NULL;
    sl_error err = {0};
    const char *bad = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a zz\"]},"
                      "\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}";
    CHECK(sl_tokenizer_from_json(bad, strlen(bad), NULL, NULL, &t, &err) == SL_EFORMAT && strstr(err.msg, "merge 0"));
    CHECK(t == NULL);
}

TEST(text_sampler) {
    enum { V = 1000 };
    float base[V], l[V];
    srand((unsigned)time(NULL));
    for (int i = 0; i < V; i++) base[i] = (float)(rand() % 10000) / 1000.0f;
    base[123] = 20.0f;
    sl_sampler_params p = sl_sampler_params_default();
    p.temp = 0;
    sl_sampler *s = NULL;
    CHECK(sl_sampler_new(&p, V, &s) == SL_OK);
    memcpy(l, base, sizeof l);
    CHECK(sl_sampler_sample(s, l) == 123); /* greedy */
    /* a strong repetition penalty moves greedy off a recent token */
    sl_sampler_free(s);
    p.repeat_penalty = 100.0f;
    CHECK(sl_sampler_new(&p, V, &s) == SL_OK);
    sl_sampler_accept(s, 123);
    memcpy(l, base, sizeof l);
    CHECK(sl_sampler_sample(s, l) != 123);
    sl_sampler_free(s);
    /* same seed, same draws; top-k 3 only ever returns one of the 3 best */
    p = sl_sampler_params_default();
    p.temp = 2.0f;
    p.top_k = 3;
    p.seed = 42;
    sl_sampler *a = NULL, *b = NULL;
    CHECK(sl_sampler_new(&p, V, &a) == SL_OK && sl_sampler_new(&p, V, &b) == SL_OK);
    int best[3] = {123, -1, -1};
    for (int i = 0; i < V; i++)
        if (i != 123 && (best[1] < 0 || base[i] > base[best[1]] || (base[i] == base[best[1]] && i < best[1]))) best[1] = i;
    for (int i = 0; i < V; i++)
        if (i != 123 && i != best[1] && (best[2] < 0 || base[i] > base[best[2]] || (base[i] == base[best[2]] && i < best[2]))) best[2] = i;
    int ok = 1, seen_other = 0;
    for (int k = 0; k < 200; k++) {
        float la[V], lb[V];
        memcpy(la, base, sizeof la);
        memcpy(lb, base, sizeof lb);
        int32_t x = sl_sampler_sample(a, la), y = sl_sampler_sample(b, lb);
        ok &= x == y && (x == best[0] || x == best[1] || x == best[2]);
        seen_other |= x != 123;
    }
    sl_sampler_free(a);
    sl_sampler_free(b);
    CHECK(ok);
    (void)seen_other; /* 123 dominates (logit 20): other picks are possible but not guaranteed */
    /* top-p tiny: always the most likely */
    p.top_k = 0;
    p.top_p = 0.01f;
    p.temp = 1.0f;
    CHECK(sl_sampler_new(&p, V, &a) == SL_OK);
    for (int k = 0; k < 50; k++) {
        memcpy(l, base, sizeof l);
        ok &= sl_sampler_sample(a, l) == 123;
    }
    sl_sampler_free(a);
    CHECK(ok);
}

TEST(text_chat_format_basic) {
    sl_tokenizer *t = tiny();
    CHECK(t);
    sl_chat_msg m[2] = {{"system", "Be brief.", NULL, NULL}, {"user", "Hi", NULL, NULL}};
    sl_chat_params p = sl_chat_params_default();
    p.enable_thinking = 0;
    char *out = NULL;
    sl_error err = {0};
    CHECK(sl_chat_format(t, m, 2, &p, &out, &err) == SL_OK);
    CHECKF(!strcmp(out, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                        "<|im_start|>assistant\n<think>\n\n</think>\n\n"), "%s", out);
    free(out);
    sl_chat_msg bad = {"robot", "x", NULL, NULL};
    CHECK(sl_chat_format(t, &bad, 1, NULL, &out, &err) == SL_EINVAL && strstr(err.msg, "robot"));
    p.tools = "{not json";
    CHECK(sl_chat_format(t, m, 2, &p, &out, &err) == SL_EINVAL);
    sl_tokenizer_free(t);
}

static int collect(void *user, int32_t id, const char *text, size_t len) {
    tok_buf *b = user;
    (void)id;
    tok_buf_put(b, text, len);
    return 0;
}

/* The generation loop on the tiny Qwen3-Next model: a stop string cuts the text exactly where the
 * unrestricted run has it, and a too-long prompt is refused before anything is evaluated. */
TEST(text_generate_stop_string) {
    sl_tokenizer *t = tiny();
    CHECK(t);
    sl_model *m = NULL;
    sl_session *s = NULL;
    sl_sampler *smp = NULL;
    sl_error err = {0};
    CHECKF(sl_model_open(test_packed("qwen3_next"), NULL, &m, &err) == SL_OK, "%s", err.msg);
    sl_sampler_params sp = sl_sampler_params_default();
    sp.temp = 0;
    CHECK(sl_session_new(m, 0, &s) == SL_OK && sl_sampler_new(&sp, sl_model_n_vocab(m), &smp) == SL_OK);
    int32_t prompt[] = {84, 104, 101}; /* "The" */
    sl_gen_params gp = sl_gen_params_default();
    gp.max_tokens = 40;
    tok_buf full = {0}, cut = {0};
    sl_gen_result r;
    CHECK(sl_generate(m, s, t, smp, prompt, 3, &gp, collect, &full, &r, &err) == SL_OK);
    int ok = full.n > 4;
    if (ok && r.stop == SL_STOP_LENGTH) {
        char stop[3] = {full.p[full.n / 2], full.p[full.n / 2 + 1], 0};
        const char *stops[] = {stop};
        if (strlen(stop) == 2) {
            gp.stop = stops;
            gp.n_stop = 1;
            sl_session_reset(s);
            sl_sampler_reset(smp);
            CHECK(sl_generate(m, s, t, smp, prompt, 3, &gp, collect, &cut, &r, &err) == SL_OK);
            ok = r.stop == SL_STOP_STRING && cut.n == (size_t)(strstr(full.p, stop) - full.p) &&
                 !memcmp(cut.p, full.p, cut.n);
        }
    }
    free(full.p);
    free(cut.p);
    CHECK(ok);
    int n_big = sl_model_n_ctx(m) + 1;
    int32_t *big = calloc((size_t)n_big, sizeof *big);
    int past = sl_session_n_past(s);
    CHECK(sl_generate(m, s, t, smp, big, n_big, &gp, NULL, NULL, &r, &err) == SL_ERANGE && strstr(err.msg, "does not fit"));
    CHECK(sl_session_n_past(s) == past);
    free(big);
    sl_sampler_free(smp);
    sl_session_free(s);
    sl_model_close(m);
    sl_tokenizer_free(t);
}
