/*
 * test_text.c — tokenizer, streaming detokenizer, sampler, chat formatter and generation loop (the
 * comparisons with HF tokenizers and jinja2 are in tests/py).
 */
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "sluice.h"
#include "test.h"
#include "text/sampler.h"
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
    unsigned seed = test_seed();
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

/* The sampler's one-pass top-k (sampler_top_k scan 1, sl_sampler_sample's path for top_k <= 256) gives the copy
 * and select's candidates in its order, on logits with many ties, NaN, -inf and +inf, at vocabularies around its
 * 16-wide blocks and k below, at and past the valid count. */
TEST(text_sampler_top_k_scan) {
    const int Vs[] = {1, 15, 16, 17, 33, 1000, 4099}, ks[] = {1, 2, 7, 40, 256, 5000};
    uint64_t r = 0x9E3779B97F4A7C15ull;
    for (int vi = 0; vi < 7; vi++)
        for (int ki = 0; ki < 6; ki++)
            for (int rep = 0; rep < 4; rep++) {
                int V = Vs[vi], k = ks[ki];
                float *x = malloc((size_t)V * sizeof *x);
                sampler_cand *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
                for (int v = 0; v < V; v++) {
                    r = r * 6364136223846793005ull + 1442695040888963407ull;
                    unsigned u = (unsigned)(r >> 33);
                    x[v] = rep == 3 ? (float)(v % 5) /* rising ties only */
                         : u % 97 == 0 ? NAN : u % 89 == 0 ? -INFINITY : u % 211 == 0 ? INFINITY
                         : (float)((int)(u % (rep ? 23u : 1000u)) - 500) * 0.25f;
                }
                int na = sampler_top_k(x, V, k, a, 1), nb = sampler_top_k(x, V, k, b, 0), same = na == nb;
                for (int i = 0; same && i < na; i++)
                    same = a[i].id == b[i].id && memcmp(&a[i].logit, &b[i].logit, sizeof(float)) == 0;
                if (!same) fprintf(stderr, "V %d k %d rep %d: %d / %d candidates differ\n", V, k, rep, na, nb);
                CHECK(same);
                CHECK(na <= k && (V < 40 || na > 0));
                free(x), free(a), free(b);
            }
}

/* Draws n tokens from logits l with a (and b, when not NULL); counts[v] += how often a drew v. Returns
 * 1 when every draw was an id in range and b drew the same as a, else 0. */
static int draws(sl_sampler *a, sl_sampler *b, const float *l, int V, int n, int *counts) {
    int same = 1;
    float *la = malloc((size_t)V * sizeof *la), *lb = malloc((size_t)V * sizeof *lb);
    for (int k = 0; k < n; k++) {
        memcpy(la, l, (size_t)V * sizeof *la);
        memcpy(lb, l, (size_t)V * sizeof *lb);
        int32_t x = sl_sampler_sample(a, la), y = b ? sl_sampler_sample(b, lb) : x;
        same &= x == y && x >= 0 && x < V;
        if (x >= 0 && x < V) counts[x]++;
    }
    free(la);
    free(lb);
    return same;
}

/* Each filter on its own (the others off), on distributions where it changes the outcome: a filter
 * that does nothing is caught, not just one that picks the wrong token. */
TEST(text_sampler) {
    enum { V = 1000, N = 2000 };
    const unsigned seed = test_seed();
    srand(seed);
    float base[V], l[V];
    static int counts[V];
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

    /* top-k 3 on three close leaders (p ~ 0.51, 0.31, 0.19 among them) over ~1000 low ones holding ~40%
     * of the mass without the filter: only the three come, each of them does, and the same seed gives
     * the same draws while another seed does not */
    for (int i = 0; i < V; i++) base[i] = (float)(rand() % 5000) / 1000.0f;
    const int lead[3] = {rand() % 300, 300 + rand() % 300, 600 + rand() % 300};
    base[lead[0]] = 10.0f;
    base[lead[1]] = 9.5f;
    base[lead[2]] = 9.0f;
    p = sl_sampler_params_default();
    p.temp = 1.0f;
    p.top_k = 3;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 42;
    sl_sampler *a = NULL, *b = NULL;
    CHECK(sl_sampler_new(&p, V, &a) == SL_OK && sl_sampler_new(&p, V, &b) == SL_OK);
    memset(counts, 0, sizeof counts);
    int same = draws(a, b, base, V, N, counts);
    sl_sampler_free(a);
    sl_sampler_free(b);
    CHECKF(same, "same seed, different draws (seed %u)", seed);
    int in3 = counts[lead[0]] + counts[lead[1]] + counts[lead[2]];
    CHECKF(in3 == N && counts[lead[0]] > counts[lead[1]] && counts[lead[1]] > counts[lead[2]] && counts[lead[2]] > 0,
           "top-k 3: %d of %d draws among the three (%d %d %d) (seed %u)", in3, N, counts[lead[0]], counts[lead[1]],
           counts[lead[2]], seed);
    int32_t seq42[64], seq43[64];
    for (int pass = 0; pass < 2; pass++) {
        p.seed = 42 + (uint64_t)pass;
        CHECK(sl_sampler_new(&p, V, &a) == SL_OK);
        for (int k = 0; k < 64; k++) {
            memcpy(l, base, sizeof l);
            (pass ? seq43 : seq42)[k] = sl_sampler_sample(a, l);
        }
        sl_sampler_free(a);
    }
    CHECKF(memcmp(seq42, seq43, sizeof seq42), "seeds 42 and 43 drew the same 64 tokens");

    /* top-p and min-p on p = 0.4, 0.3, 0.2 and 0.1 spread over the other 997 ids: top-p 0.5 keeps the
     * two whose mass first reaches 0.5, min-p 0.6 keeps those >= 0.24; both then renormalise (the first
     * comes 4/7 of the time); top-p 0.01 keeps the first alone */
    for (int i = 0; i < V; i++) base[i] = logf(0.1f / (V - 3));
    base[lead[0]] = logf(0.4f);
    base[lead[1]] = logf(0.3f);
    base[lead[2]] = logf(0.2f);
    for (int mode = 0; mode < 3; mode++) {
        static const char *const name[] = {"top-p 0.5", "min-p 0.6", "top-p 0.01"};
        p = sl_sampler_params_default();
        p.temp = 1.0f;
        p.top_k = 0;
        p.top_p = mode == 0 ? 0.5f : mode == 2 ? 0.01f : 1.0f;
        p.min_p = mode == 1 ? 0.6f : 0.0f;
        p.seed = (uint64_t)seed;
        CHECK(sl_sampler_new(&p, V, &a) == SL_OK);
        memset(counts, 0, sizeof counts);
        draws(a, NULL, base, V, N, counts);
        sl_sampler_free(a);
        int c0 = counts[lead[0]], c1 = counts[lead[1]];
        if (mode == 2) CHECKF(c0 == N, "%s: %d of %d draws were the most likely token (seed %u)", name[mode], c0, N, seed);
        else
            CHECKF(c0 + c1 == N && c0 > N / 2 && c0 < N * 2 / 3, "%s: %d + %d of %d draws among the two kept (seed %u)",
                   name[mode], c0, c1, N, seed);
    }
}

/* Greedy sampling is the one-pass argmax `if (l[v] > l[best]) best = v` exactly: the lowest id of the largest
 * non-NaN logit, 0 when logits[0] is NaN, +0 and -0 equal; on random lengths (the 16-lane body and its tail)
 * full of ties, NaN, signed zeros and infinities. */
TEST(text_sampler_greedy_is_the_argmax) {
    const unsigned seed = test_seed();
    srand(seed);
    sl_sampler_params p = sl_sampler_params_default();
    p.temp = 0;
    static float l[600];
    for (int round = 0; round < 3000; round++) {
        int n = 1 + rand() % 600;
        for (int i = 0; i < n; i++) {
            int r = rand() % 12;
            l[i] = r == 0 ? NAN : r == 1 ? -0.0f : r == 2 ? 0.0f : r == 3 ? INFINITY : r == 4 ? -INFINITY
                                                                                         : (float)(rand() % 9) - 6;
        }
        int best = 0;
        for (int v = 1; v < n; v++)
            if (l[v] > l[best]) best = v;
        sl_sampler *s = NULL;
        CHECK(sl_sampler_new(&p, n, &s) == SL_OK);
        int got = sl_sampler_sample(s, l);
        sl_sampler_free(s);
        CHECKF(got == best, "n %d: greedy %d, the argmax %d (seed %u)", n, got, best, seed);
    }
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
    CHECKF(r.stop == SL_STOP_LENGTH && full.n > 4, "stop %d after %zu bytes", r.stop, full.n);
    /* two bytes from the middle of the text (no NUL: stop strings are C strings) */
    size_t mid = full.n / 2;
    while (mid + 2 < full.n && (!full.p[mid] || !full.p[mid + 1])) mid++;
    char stop[3] = {full.p[mid], full.p[mid + 1], 0};
    const char *stops[] = {stop};
    CHECKF(strlen(stop) == 2, "no two NUL-free bytes after the middle of %zu", full.n);
    size_t first = (size_t)((const char *)memmem(full.p, full.n, stop, 2) - full.p);
    gp.stop = stops;
    gp.n_stop = 1;
    sl_session_reset(s);
    sl_sampler_reset(smp);
    CHECK(sl_generate(m, s, t, smp, prompt, 3, &gp, collect, &cut, &r, &err) == SL_OK);
    int ok = r.stop == SL_STOP_STRING && cut.n == first && !memcmp(cut.p, full.p, cut.n);
    CHECKF(ok, "stop string at byte %zu of %zu: stop %d, %zu bytes delivered", first, full.n, r.stop, cut.n);
    free(full.p);
    free(cut.p);
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
