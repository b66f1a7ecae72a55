/*
 * test_sched.c — the continuous-batching scheduler (src/serve/sched.h) on the demo model: requests
 * submitted together give exactly the tokens and text sl_generate gives each alone (greedy and sampled,
 * prompts of several chunks, stop strings), resident and streamed; a canceled request frees its slot for
 * the next; a full queue says SL_EBUSY; a long prompt does not stall a short request; bad requests are
 * refused at submit; a thinking block is not searched for stop strings and a budget closes it.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "serve/sched.h"
#include "sluice.h"
#include "test.h"

#define DEMO "models/demo.sluice"

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t ids[512];
    int n;
    char text[8192];
    size_t len;
    int done, cancel_after;
    srv_event end;
    long first_seq, done_seq; /* order of the first token and of the end among all events */
} collect;

static long seq_counter;
static pthread_mutex_t seq_mu = PTHREAD_MUTEX_INITIALIZER;

static long next_seq(void) {
    pthread_mutex_lock(&seq_mu);
    long v = ++seq_counter;
    pthread_mutex_unlock(&seq_mu);
    return v;
}

static int on_event(void *user, const srv_event *ev) {
    collect *c = user;
    pthread_mutex_lock(&c->mu);
    if (ev->done) {
        c->end = *ev;
        c->end.text = c->end.errmsg = NULL;
        c->done = 1;
        c->done_seq = next_seq();
        pthread_cond_broadcast(&c->cv);
    } else {
        if (!c->n) c->first_seq = next_seq();
        if (c->n < 512) c->ids[c->n++] = ev->id;
        if (c->len + ev->len < sizeof c->text) {
            memcpy(c->text + c->len, ev->text, ev->len);
            c->len += ev->len;
        }
    }
    int stop = c->cancel_after && c->n >= c->cancel_after;
    pthread_mutex_unlock(&c->mu);
    return stop;
}

static void collect_init(collect *c) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
}

static void wait_done(collect *c) {
    pthread_mutex_lock(&c->mu);
    while (!c->done) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

static sl_model *open_demo(int streamed) {
    sl_model_params mp = sl_model_params_default();
    mp.resident = !streamed;
    if (streamed) mp.cache_bytes = 3u << 20; /* about a quarter of the expert section */
    sl_model *m = NULL;
    sl_error err = {0};
    if (sl_model_open(DEMO, &mp, &m, &err)) fprintf(stderr, "    open: %s\n", err.msg);
    return m;
}

/* Held-out text as ids, from a given offset: prompts of real text. */
static int prompt_ids(const sl_tokenizer *tok, int from, int n, int32_t *out) {
    char *txt = test_read("models/demo/heldout.txt", NULL);
    if (!txt) return -1;
    int32_t *ids = NULL;
    int got = 0;
    sl_error err;
    sl_status st = sl_tokenize(tok, txt, strlen(txt), 0, &ids, &got, &err);
    free(txt);
    if (st || got < from + n) { free(ids); return -1; }
    memcpy(out, ids + from, (size_t)n * sizeof *out);
    free(ids);
    return n;
}

enum { NREQ = 6 };
static const struct {
    int from, n_prompt, max_tokens;
    float temp;
    uint64_t seed;
    const char *stop;
} reqs[NREQ] = {
    {0, 3, 24, 0.0f, 0, NULL},      /* greedy, a short prompt */
    {100, 70, 24, 0.8f, 7, NULL},   /* sampled, a prompt of two micro-batches */
    {400, 300, 16, 0.8f, 11, NULL}, /* more than one step's prefill budget */
    {900, 20, 32, 0.0f, 0, ","},    /* greedy with a stop string */
    {1200, 5, 20, 1.0f, 3, NULL},
    {1500, 150, 12, 0.0f, 0, NULL},
};

static sl_sampler_params sampling(int i) {
    sl_sampler_params sp = sl_sampler_params_default();
    sp.temp = reqs[i].temp;
    sp.seed = reqs[i].seed;
    return sp;
}

static int gen_cb(void *user, int32_t id, const char *text, size_t len) {
    collect *c = user;
    if (id >= 0 && c->n < 512) c->ids[c->n++] = id;
    if (c->len + len < sizeof c->text) {
        memcpy(c->text + c->len, text, len);
        c->len += len;
    }
    return 0;
}

static void sched_vs_generate(int streamed) {
    sl_model *m = open_demo(streamed);
    CHECK(m);
    sl_tokenizer *tok = NULL;
    sl_error err = {0};
    CHECKF(sl_tokenizer_load(DEMO, &tok, &err) == SL_OK, "%s", err.msg);
    static int32_t prompts[NREQ][300];
    for (int i = 0; i < NREQ; i++) CHECK(prompt_ids(tok, reqs[i].from, reqs[i].n_prompt, prompts[i]) > 0);
    /* alone: sl_generate on a fresh session each */
    static collect alone[NREQ], batched[NREQ];
    sl_stop_reason why[NREQ];
    for (int i = 0; i < NREQ; i++) {
        collect_init(&alone[i]);
        sl_session *s = NULL;
        sl_sampler *smp = NULL;
        sl_sampler_params sp = sampling(i);
        CHECK(sl_session_new(m, 0, &s) == SL_OK && sl_sampler_new(&sp, sl_model_n_vocab(m), &smp) == SL_OK);
        sl_gen_params gp = sl_gen_params_default();
        gp.max_tokens = reqs[i].max_tokens;
        const char *stop[1] = {reqs[i].stop};
        gp.stop = stop;
        gp.n_stop = reqs[i].stop ? 1 : 0;
        sl_gen_result res;
        CHECKF(sl_generate(m, s, tok, smp, prompts[i], reqs[i].n_prompt, &gp, gen_cb, &alone[i], &res, &err) == SL_OK,
               "%s", err.msg);
        why[i] = res.stop;
        sl_sampler_free(smp);
        sl_session_free(s);
    }
    /* together, through the scheduler */
    srv_sched_params p = srv_sched_params_default();
    p.prefill_chunk = 128;
    srv_sched *sch = NULL;
    CHECKF(srv_sched_new(m, tok, &p, &sch, &err) == SL_OK, "%s", err.msg);
    for (int i = 0; i < NREQ; i++) {
        collect_init(&batched[i]);
        const char *stop[1] = {reqs[i].stop};
        srv_request r = {prompts[i], reqs[i].n_prompt, sampling(i), reqs[i].max_tokens, stop, reqs[i].stop ? 1 : 0, 1, NULL, NULL, 0, 0, 0, 0, 0, 0};
        CHECKF(srv_submit(sch, &r, on_event, &batched[i], NULL, &err) == SL_OK, "%s", err.msg);
    }
    for (int i = 0; i < NREQ; i++) wait_done(&batched[i]);
    srv_sched_stats st;
    srv_sched_stats_get(sch, &st);
    srv_sched_free(sch);
    sl_tokenizer_free(tok);
    sl_model_close(m);
    printf("    %s: %d requests in %llu steps (%llu rows)\n", streamed ? "streamed" : "resident", NREQ,
           (unsigned long long)st.steps, (unsigned long long)st.step_rows);
    for (int i = 0; i < NREQ; i++) {
        collect *a = &alone[i], *b = &batched[i];
        CHECKF(b->end.status == SL_OK, "request %d failed: status %d", i, b->end.status);
        CHECKF(a->n == b->n && !memcmp(a->ids, b->ids, (size_t)a->n * sizeof(int32_t)),
               "request %d: %d tokens alone, %d through the scheduler, or different ids", i, a->n, b->n);
        CHECKF(a->len == b->len && !memcmp(a->text, b->text, a->len), "request %d: text differs: '%.*s' vs '%.*s'", i,
               (int)a->len, a->text, (int)b->len, b->text);
        CHECKF(b->end.stop == why[i], "request %d: stop reason %d, alone %d", i, b->end.stop, why[i]);
        CHECK(b->end.n_generated == a->n && b->end.n_prompt == reqs[i].n_prompt);
    }
    CHECK(st.completed == NREQ && st.active == 0 && st.queued == 0);
    uint64_t in_buckets = 0;
    for (int b = 0; b < SRV_LAT_BUCKETS; b++) in_buckets += st.ttft_bucket[b];
    CHECKF(st.ttft_count == NREQ && st.queue_count == NREQ && in_buckets == NREQ && st.ttft_sum_s > 0,
           "latency histograms: %llu first tokens (%llu in buckets), %llu admissions", (unsigned long long)st.ttft_count,
           (unsigned long long)in_buckets, (unsigned long long)st.queue_count);
    CHECKF(st.steps < (unsigned long long)(NREQ * 20), "%llu steps: the requests did not share steps",
           (unsigned long long)st.steps);
}

TEST(sched_equals_generate_resident) { sched_vs_generate(0); }
TEST(sched_equals_generate_streamed) { sched_vs_generate(1); }

static srv_sched *one_slot(sl_model *m, sl_tokenizer **tok, int max_queue, int chunk) {
    sl_error err = {0};
    if (sl_tokenizer_load(DEMO, tok, &err)) return NULL;
    srv_sched_params p = srv_sched_params_default();
    p.max_active = 1;
    p.max_queue = max_queue;
    p.prefill_chunk = chunk;
    srv_sched *s = NULL;
    return srv_sched_new(m, *tok, &p, &s, &err) ? NULL : s;
}

TEST(sched_cancel_frees_the_slot) {
    sl_model *m = open_demo(0);
    CHECK(m);
    sl_tokenizer *tok = NULL;
    srv_sched *s = one_slot(m, &tok, 4, 256);
    CHECK(s);
    int32_t p[4] = {10, 20, 30, 40};
    collect a, b, c;
    collect_init(&a);
    collect_init(&b);
    collect_init(&c);
    a.cancel_after = 3; /* emit's non-zero return cancels */
    srv_request r = {p, 4, sl_sampler_params_default(), 1000, NULL, 0, 1, NULL, NULL, 0, 0, 0, 0, 0, 0};
    uint64_t idb = 0;
    sl_error err;
    CHECK(srv_submit(s, &r, on_event, &a, NULL, &err) == SL_OK);
    CHECK(srv_submit(s, &r, on_event, &b, &idb, &err) == SL_OK);
    srv_cancel(s, idb); /* canceled while queued (or just admitted) */
    r.max_tokens = 5;
    CHECK(srv_submit(s, &r, on_event, &c, NULL, &err) == SL_OK);
    wait_done(&a);
    wait_done(&b);
    wait_done(&c);
    srv_sched_stats st;
    srv_sched_stats_get(s, &st);
    srv_sched_free(s);
    sl_tokenizer_free(tok);
    sl_model_close(m);
    CHECKF(a.end.status == SL_ECANCELED && a.n == 3, "a: status %d after %d tokens", a.end.status, a.n);
    CHECKF(b.end.status == SL_ECANCELED && b.n == 0, "b: status %d after %d tokens", b.end.status, b.n);
    CHECKF(c.end.status == SL_OK && c.n == 5, "c: status %d, %d tokens", c.end.status, c.n);
    CHECK(st.canceled == 2 && st.completed == 1 && st.active == 0);
}

/* A client that goes away as its request ends (fuzz/fuzz_http.c found it): srv_cancel racing the
 * scheduler's finish must not touch the freed request. Meaningful under ASan (make asan). */
TEST(sched_cancel_racing_the_end_is_safe) {
    sl_model *m = open_demo(0);
    CHECK(m);
    sl_tokenizer *tok = NULL;
    srv_sched *s = one_slot(m, &tok, 4, 256);
    CHECK(s);
    int32_t p[2] = {10, 20};
    int ok = 0, canceled = 0;
    for (int i = 0; i < 60; i++) {
        collect c;
        collect_init(&c);
        srv_request r = {p, 2, sl_sampler_params_default(), 1 + i % 3, NULL, 0, 1, NULL, NULL, 0, 0, 0, 0, 0, 0};
        uint64_t id = 0;
        sl_error err;
        CHECK(srv_submit(s, &r, on_event, &c, &id, &err) == SL_OK);
        for (;;) { /* cancel over and over until it is over: some land in the window after the end */
            srv_cancel(s, id);
            pthread_mutex_lock(&c.mu);
            int done = c.done;
            pthread_mutex_unlock(&c.mu);
            if (done) break;
        }
        ok += c.end.status == SL_OK;
        canceled += c.end.status == SL_ECANCELED;
    }
    srv_sched_stats st;
    srv_sched_stats_get(s, &st);
    srv_sched_free(s);
    sl_tokenizer_free(tok);
    sl_model_close(m);
    CHECKF(ok + canceled == 60 && st.active == 0 && st.completed + st.canceled == 60, "%d ok, %d canceled", ok,
           canceled);
}

TEST(sched_full_queue_is_busy) {
    sl_model *m = open_demo(0);
    CHECK(m);
    sl_tokenizer *tok = NULL;
    srv_sched *s = one_slot(m, &tok, 1, 64);
    CHECK(s);
    static int32_t p[4000];
    for (int i = 0; i < 4000; i++) p[i] = 10 + i % 200;
    collect c[3];
    for (int i = 0; i < 3; i++) collect_init(&c[i]);
    /* the first takes the one slot for a while: 4000 prompt tokens, 64 a step */
    srv_request r = {p, 4000, sl_sampler_params_default(), 50, NULL, 0, 1, NULL, NULL, 0, 0, 0, 0, 0, 0};
    uint64_t id[3] = {0};
    sl_error err;
    CHECK(srv_submit(s, &r, on_event, &c[0], &id[0], &err) == SL_OK);
    srv_sched_stats ss;
    do srv_sched_stats_get(s, &ss);
    while (ss.active < 1);
    r.n_prompt = 4;
    CHECK(srv_submit(s, &r, on_event, &c[1], &id[1], &err) == SL_OK);
    sl_status st = srv_submit(s, &r, on_event, &c[2], &id[2], &err);
    CHECKF(st == SL_EBUSY && strstr(err.msg, "busy"), "third request: status %d (%s)", st, err.msg);
    srv_sched_free(s); /* cancels what is left */
    CHECK(c[0].done && c[0].end.status == SL_ECANCELED && c[1].done && c[1].end.status == SL_ECANCELED);
    CHECK(!c[2].done);
    sl_tokenizer_free(tok);
    sl_model_close(m);
}

TEST(sched_long_prompt_does_not_stall_a_short_one) {
    sl_model *m = open_demo(0);
    CHECK(m);
    sl_tokenizer *tok = NULL;
    sl_error err = {0};
    CHECK(sl_tokenizer_load(DEMO, &tok, &err) == SL_OK);
    srv_sched_params p = srv_sched_params_default();
    p.max_active = 2;
    p.prefill_chunk = 64;
    srv_sched *s = NULL;
    CHECK(srv_sched_new(m, tok, &p, &s, &err) == SL_OK);
    static int32_t longp[640];
    CHECK(prompt_ids(tok, 0, 640, longp) > 0);
    collect L, S;
    collect_init(&L);
    collect_init(&S);
    srv_request rl = {longp, 640, sl_sampler_params_default(), 4, NULL, 0, 1, NULL, NULL, 0, 0, 0, 0, 0, 0};
    srv_request rs = {longp, 3, sl_sampler_params_default(), 6, NULL, 0, 1, NULL, NULL, 0, 0, 0, 0, 0, 0};
    CHECK(srv_submit(s, &rl, on_event, &L, NULL, &err) == SL_OK);
    CHECK(srv_submit(s, &rs, on_event, &S, NULL, &err) == SL_OK);
    wait_done(&L);
    wait_done(&S);
    srv_sched_free(s);
    sl_tokenizer_free(tok);
    sl_model_close(m);
    CHECK(L.end.status == SL_OK && S.end.status == SL_OK && S.n >= 1);
    /* 640 prompt tokens at 64 a step take 10 steps; the short request needs 1 + 6 */
    CHECKF(S.done_seq < L.first_seq, "the short request finished after the long one's first token (%ld vs %ld)",
           S.done_seq, L.first_seq);
}

TEST(sched_refuses_bad_requests) {
    sl_model *m = open_demo(0);
    CHECK(m);
    sl_tokenizer *tok = NULL;
    srv_sched *s = one_slot(m, &tok, 4, 256);
    CHECK(s);
    collect c;
    collect_init(&c);
    int32_t p[2] = {1, 99999};
    sl_error err;
    srv_request r = {p, 0, sl_sampler_params_default(), 4, NULL, 0, 1, NULL, NULL, 0, 0, 0, 0, 0, 0};
    CHECK(srv_submit(s, &r, on_event, &c, NULL, &err) == SL_EINVAL);
    r.n_prompt = 2;
    CHECK(srv_submit(s, &r, on_event, &c, NULL, &err) == SL_ERANGE && strstr(err.msg, "99999"));
    static int32_t big[5000];
    r.prompt = big;
    r.n_prompt = 5000;
    CHECK(srv_submit(s, &r, on_event, &c, NULL, &err) == SL_ERANGE && strstr(err.msg, "context"));
    srv_sched_free(s);
    CHECK(!c.done);
    sl_tokenizer_free(tok);
    sl_model_close(m);
}

/* One request through a scheduler; returns its collect (done). */
static void run_one(srv_sched *s, const int32_t *p, int n, int max_tokens, collect *c) {
    collect_init(c);
    srv_request r = {p, n, sl_sampler_params_default(), max_tokens, NULL, 0, 1, NULL, NULL, 0, 0, 0, 0, 0, 0};
    r.sampling.temp = 0;
    sl_error err;
    if (srv_submit(s, &r, on_event, c, NULL, &err) == SL_OK) wait_done(c);
}

/* A follow-up turn (the first prompt plus more) starts from the state kept after the first prompt's
 * last multiple of 64 tokens, and gives exactly what a cold request gives; a second scheduler finds
 * the states the first left in its state directory. */
TEST(sched_prefix_cache_hit_equals_cold) {
    sl_model *m = open_demo(0);
    CHECK(m);
    sl_tokenizer *tok = NULL;
    sl_error err = {0};
    CHECK(sl_tokenizer_load(DEMO, &tok, &err) == SL_OK);
    static int32_t p[360];
    CHECK(prompt_ids(tok, 2000, 360, p) > 0);
    srv_sched *cold = NULL, *warm = NULL, *again = NULL;
    srv_sched_params pp = srv_sched_params_default();
    CHECK(srv_sched_new(m, tok, &pp, &cold, &err) == SL_OK);
    collect c_cold, c1, c2, c3;
    run_one(cold, p, 350, 12, &c_cold);
    srv_sched_free(cold);
    pp.state_cache_bytes = 64u << 20;
    static char dir[1024]; /* test_path's buffers rotate: a copy of its own */
    snprintf(dir, sizeof dir, "%s", test_path("%s/states", test_tmpdir()));
    pp.state_dir = dir;
    CHECK(mkdir(pp.state_dir, 0755) == 0);
    CHECK(srv_sched_new(m, tok, &pp, &warm, &err) == SL_OK);
    run_one(warm, p, 200, 4, &c1);   /* keeps the state after 192 tokens */
    run_one(warm, p, 350, 12, &c2);  /* the follow-up: starts at 192 */
    srv_sched_stats st;
    srv_sched_stats_get(warm, &st);
    srv_sched_free(warm);
    /* the state files hold conversations: 0600; a restart removes only its own temporaries (issue 29) */
    int n_states = 0;
    DIR *d = opendir(pp.state_dir);
    for (struct dirent *de; d && (de = readdir(d));) {
        struct stat sb;
        if (!strstr(de->d_name, ".state") || stat(test_path("%s/%s", pp.state_dir, de->d_name), &sb)) continue;
        n_states++;
        CHECKF((sb.st_mode & 0777) == 0600, "%s: mode %o (want 600)", de->d_name, (unsigned)(sb.st_mode & 0777));
    }
    if (d) closedir(d);
    CHECK(n_states == 2);
    static const char *planted[] = {"0123456789abcdef.state.tmp.2000000000", "notes.txt.tmp.2000000000",
                                    "0123456789abcdef.tmp.2000000000", "0123456789abcdeg.state.tmp.2000000000"};
    for (int i = 0; i < 4; i++) {
        FILE *f = fopen(test_path("%s/%s", pp.state_dir, planted[i]), "w");
        CHECK(f && fclose(f) == 0);
    }
    CHECK(srv_sched_new(m, tok, &pp, &again, &err) == SL_OK); /* reads the states the first left */
    for (int i = 0; i < 4; i++)
        CHECKF((access(test_path("%s/%s", pp.state_dir, planted[i]), F_OK) == 0) == (i > 0), "%s %s", planted[i],
               i ? "was removed: not ours" : "was left");
    run_one(again, p, 350, 12, &c3);
    srv_sched_free(again);
    sl_tokenizer_free(tok);
    sl_model_close(m);
    CHECK(c_cold.end.status == SL_OK && c1.end.status == SL_OK && c2.end.status == SL_OK && c3.end.status == SL_OK);
    CHECKF(c1.end.n_reused == 0 && c2.end.n_reused == 192, "reused %d, then %d (want 0, 192)", c1.end.n_reused,
           c2.end.n_reused);
    CHECKF(c3.end.n_reused >= 192, "after a restart: reused %d (want >= 192)", c3.end.n_reused);
    /* what each added to the cache: c1 its first 192, c2 192..320 (n_kept counts after n_reused) */
    CHECKF(c_cold.end.n_kept == 0 && c1.end.n_kept == 192 && c2.end.n_kept == 128 && c3.end.n_reused + c3.end.n_kept == 320,
           "kept %d %d %d %d", c_cold.end.n_kept, c1.end.n_kept, c2.end.n_kept, c3.end.n_kept);
    CHECK(st.state_hits == 1 && st.state_misses == 1 && st.reused_tokens == 192 && st.state_entries == 2);
    for (collect *c = &c2; c; c = c == &c2 ? &c3 : NULL)
        CHECKF(c->n == c_cold.n && !memcmp(c->ids, c_cold.ids, (size_t)c->n * sizeof(int32_t)) &&
                   c->len == c_cold.len && !memcmp(c->text, c_cold.text, c->len),
               "a prefix-cache hit gave other tokens than the cold request (%d vs %d)", c->n, c_cold.n);
}

/* A model without a tokenizer (a fixture): ids only; greedy through the scheduler gives transformers'
 * greedy tokens. */
TEST(sched_ids_only_model_matches_transformers_greedy) {
    sl_model *m = NULL;
    sl_error err = {0};
    CHECK(sl_model_open(test_packed("qwen3_next"), NULL, &m, &err) == SL_OK);
    int32_t toks[128], greedy[32];
    int n = test_ref_ids("qwen3_next", "tokens", toks, 128), ng = test_ref_ids("qwen3_next", "greedy", greedy, 32);
    CHECK(n > 0 && ng >= 8);
    srv_sched *s = NULL;
    CHECK(srv_sched_new(m, NULL, NULL, &s, &err) == SL_OK);
    collect c;
    run_one(s, toks, n, 8, &c);
    srv_sched_free(s);
    sl_model_close(m);
    CHECKF(c.end.status == SL_OK && c.n == 8 && c.len == 0 && c.end.stop == SL_STOP_LENGTH, "status %d, %d ids",
           c.end.status, c.n);
    CHECKF(!memcmp(c.ids, greedy, 8 * sizeof(int32_t)), "greedy ids differ from transformers'");
}

/* Runs one greedy request of `text` (special tokens recognised) with thinking mode think, a budget,
 * max_tokens and a stop string (or NULL). */
static void run_think(srv_sched *s, const sl_tokenizer *tok, const char *text, int think, int budget, int max_tokens,
                      const char *stop, collect *c) {
    int32_t *ids = NULL;
    int n = 0;
    sl_error err;
    collect_init(c);
    if (sl_tokenize(tok, text, strlen(text), 0, &ids, &n, &err)) return;
    srv_request r = {ids, n, sl_sampler_params_default(), max_tokens, &stop, stop ? 1 : 0, 1, NULL, NULL, 0, think, budget, 0, 0, 0};
    r.sampling.temp = 0;
    if (srv_submit(s, &r, on_event, c, NULL, &err) == SL_OK) wait_done(c);
    free(ids);
}

/* A prompt that ends inside a <think> block (the demo model goes on with scripture there, no
 * </think> for a long while): stop strings are not looked for inside the block, and a budget closes it
 * with "\n</think>\n\n" after that many tokens, the answer following within max_tokens (which counts
 * the block too); n_thinking counts the block's tokens. */
TEST(sched_thinking_budget_and_stops) {
    sl_model *m = open_demo(0);
    CHECK(m);
    sl_tokenizer *tok = NULL;
    srv_sched *s = one_slot(m, &tok, 4, 256);
    CHECK(s);
    const char *p = "<|im_start|>user\nRead me Ruth chapter 2.<|im_end|>\n<|im_start|>assistant\n<think>\nAnd the";
    int32_t *close = NULL;
    int n_close = 0;
    sl_error err;
    CHECK(sl_tokenize(tok, "\n</think>\n\n", 11, 0, &close, &n_close, &err) == SL_OK && n_close > 0);
    collect free_run, budget, stops;
    int total = 6 + n_close + 8; /* 6 thinking tokens, the closing tag's, 8 of the answer */
    run_think(s, tok, p, 0, 0, 30, NULL, &free_run); /* no thinking mode: the plain continuation */
    run_think(s, tok, p, 2, 6, total, NULL, &budget);
    const char *word = "Moses"; /* in the block and in the answer */
    run_think(s, tok, p, 2, 6, total, word, &stops);
    srv_sched_free(s);
    sl_model_close(m);
    sl_tokenizer_free(tok);
    CHECKF(!strstr(free_run.text, "</think>") && free_run.n == 30, "the model closed the block itself: %s", free_run.text);
    /* the budget: the free run's first 6 tokens, the closing tag's, then 8 answer tokens */
    CHECKF(budget.end.status == SL_OK && budget.end.stop == SL_STOP_LENGTH && budget.n == total,
           "%d tokens, stop %d", budget.n, budget.end.stop);
    CHECK(!memcmp(budget.ids, free_run.ids, 6 * sizeof *budget.ids));
    CHECK(!memcmp(budget.ids + 6, close, (size_t)n_close * sizeof *close));
    CHECKF(budget.end.n_thinking == 6 + n_close && budget.end.n_generated == budget.n, "thinking %d of %d",
           budget.end.n_thinking, budget.end.n_generated);
    CHECK(strstr(budget.text, "</think>\n\n") != NULL);
    /* a stop string met inside the block does not end it; the answer is cut before its first one */
    const char *ans = strstr(budget.text, "</think>");
    const char *in_block = strstr(budget.text, word), *in_answer = ans ? strstr(ans, word) : NULL;
    CHECKF(in_block && in_block < ans && in_answer, "'%s' not in both parts of: %s", word, budget.text);
    CHECKF(stops.end.stop == SL_STOP_STRING && stops.len == (size_t)(in_answer - budget.text) &&
           !memcmp(stops.text, budget.text, stops.len), "stop %d: %s", stops.end.stop, stops.text);
    free(close);
}

/* n choices of one request (srv_request.share_prompt_of): the prompt is evaluated once (the step rows
 * are one prompt plus each choice's decoded tokens), and each choice gives what its seed gives alone.
 * When the request evaluating the prompt is canceled first, the next one evaluates it for the rest;
 * an unknown id or another prompt evaluates its own. */
static void submit_choice(srv_sched *s, const int32_t *p, int n, uint64_t seed, uint64_t of, collect *c, uint64_t *id) {
    collect_init(c);
    srv_request r = {p, n, sl_sampler_params_default(), 10, NULL, 0, 1, NULL, NULL, 0, 0, 0, 0, of, 0};
    r.sampling.temp = 0.9f;
    r.sampling.seed = seed;
    sl_error err;
    if (srv_submit(s, &r, on_event, c, id, &err) != SL_OK) c->done = 1, c->end.status = err.status;
}

static int same_tokens(const collect *a, const collect *b) {
    return a->end.status == SL_OK && b->end.status == SL_OK && a->n == b->n && a->n > 0 &&
           !memcmp(a->ids, b->ids, (size_t)a->n * sizeof(int32_t)) && a->len == b->len && !memcmp(a->text, b->text, a->len);
}

TEST(sched_n_choices_share_the_prompt) {
    sl_model *m = open_demo(0);
    CHECK(m);
    sl_tokenizer *tok = NULL;
    sl_error err = {0};
    CHECK(sl_tokenizer_load(DEMO, &tok, &err) == SL_OK);
    static int32_t p[300], q[300];
    CHECK(prompt_ids(tok, 3000, 300, p) > 0);
    memcpy(q, p, sizeof q);
    q[299] = p[298]; /* another prompt: its last token differs */
    srv_sched_params pp = srv_sched_params_default();
    pp.prefill_chunk = 64;
    srv_sched *s = NULL;
    CHECK(srv_sched_new(m, tok, &pp, &s, &err) == SL_OK);
    enum { K = 4 };
    collect alone[K], ch[K], other, stray;
    for (int i = 0; i < K; i++) {
        submit_choice(s, p, 300, 40 + (uint64_t)i, 0, &alone[i], NULL);
        wait_done(&alone[i]);
    }
    srv_sched_stats st0, st1, st2;
    srv_sched_stats_get(s, &st0);
    uint64_t id0 = 0;
    for (int i = 0; i < K; i++) submit_choice(s, p, 300, 40 + (uint64_t)i, id0, &ch[i], i ? NULL : &id0);
    for (int i = 0; i < K; i++) wait_done(&ch[i]);
    srv_sched_stats_get(s, &st1);
    uint64_t decoded = 0;
    for (int i = 0; i < K; i++) {
        CHECKF(same_tokens(&ch[i], &alone[i]), "choice %d: %d tokens, status %d; alone %d", i, ch[i].n, ch[i].end.status,
               alone[i].n);
        decoded += (uint64_t)ch[i].n - 1; /* the last sampled token is never evaluated */
    }
    CHECKF(st1.step_rows - st0.step_rows == 300 + decoded, "rows %llu (want the prompt once: %llu)",
           (unsigned long long)(st1.step_rows - st0.step_rows), (unsigned long long)(300 + decoded));
    /* the one evaluating the prompt canceled: the others still share one evaluation between them */
    submit_choice(s, p, 300, 99, 0, &ch[0], &id0);
    for (int i = 1; i < K; i++) submit_choice(s, p, 300, 40 + (uint64_t)i, id0, &ch[i], NULL);
    submit_choice(s, q, 300, 41, id0, &other, NULL);     /* another prompt: its own */
    srv_cancel(s, id0);
    submit_choice(s, p, 300, 42, 1u << 30, &stray, NULL); /* no such request: its own */
    for (int i = 0; i < K; i++) wait_done(&ch[i]);
    wait_done(&other);
    wait_done(&stray);
    srv_sched_stats_get(s, &st2);
    CHECKF(ch[0].end.status == SL_ECANCELED, "canceled: status %d", ch[0].end.status);
    for (int i = 1; i < K; i++) CHECKF(same_tokens(&ch[i], &alone[i]), "after the cancel, choice %d differs", i);
    CHECK(same_tokens(&stray, &alone[2]));
    CHECK(other.end.status == SL_OK && other.n == 10);
    decoded = (uint64_t)other.n + (uint64_t)stray.n - 2;
    for (int i = 1; i < K; i++) decoded += (uint64_t)ch[i].n - 1;
    /* rows: what the canceled one evaluated (at most its prompt), one prompt for choices 1..3, other's and
     * stray's (each choice its own would be 5 prompts at least) */
    CHECKF(st2.step_rows - st1.step_rows <= 4 * 300 + decoded, "rows %llu > %llu",
           (unsigned long long)(st2.step_rows - st1.step_rows), (unsigned long long)(4 * 300 + decoded));
    srv_sched_free(s);
    sl_tokenizer_free(tok);
    sl_model_close(m);
}

/* --context-shift (srv_sched_params context_shift): sequences of a 40-position context generate past it, each
 * token the one sl_generate with context_shift gives alone (the same shifts at the same points: a shift is a
 * fresh prefill of the kept tokens, and a batch row is its sequence alone); without it, the length ends them. */
TEST(sched_context_shift_matches_generate) {
    sl_model *m = open_demo(0);
    CHECK(m);
    sl_tokenizer *tok = NULL;
    sl_error err = {0};
    CHECKF(sl_tokenizer_load(DEMO, &tok, &err) == SL_OK, "%s", err.msg);
    enum { N = 2, CTX = 40, KEEP = 4 };
    static int32_t prompts[N][30];
    const int n_prompt[N] = {20, 30}, max_tokens[N] = {60, 50};
    static collect alone[N], batched[N];
    for (int i = 0; i < N; i++) {
        CHECK(prompt_ids(tok, 200 + 300 * i, n_prompt[i], prompts[i]) > 0);
        collect_init(&alone[i]);
        sl_session *s = NULL;
        sl_sampler *smp = NULL;
        sl_sampler_params sp = sampling(i); /* greedy, then sampled */
        CHECK(sl_session_new(m, CTX, &s) == SL_OK && sl_sampler_new(&sp, sl_model_n_vocab(m), &smp) == SL_OK);
        sl_gen_params gp = sl_gen_params_default();
        gp.max_tokens = max_tokens[i];
        gp.context_shift = 1;
        gp.n_keep = KEEP;
        CHECKF(sl_generate(m, s, tok, smp, prompts[i], n_prompt[i], &gp, gen_cb, &alone[i], NULL, &err) == SL_OK, "%s",
               err.msg);
        sl_sampler_free(smp);
        sl_session_free(s);
    }
    for (int shift = 1; shift >= 0; shift--) {
        srv_sched_params p = srv_sched_params_default();
        p.n_ctx = CTX;
        p.context_shift = shift;
        p.n_keep = KEEP;
        srv_sched *sch = NULL;
        CHECKF(srv_sched_new(m, tok, &p, &sch, &err) == SL_OK, "%s", err.msg);
        for (int i = 0; i < N; i++) {
            collect_init(&batched[i]);
            srv_request r = {prompts[i], n_prompt[i], sampling(i), max_tokens[i], NULL, 0, 1, NULL, NULL, 0, 0, 0, 0, 0, 0};
            CHECKF(srv_submit(sch, &r, on_event, &batched[i], NULL, &err) == SL_OK, "%s", err.msg);
        }
        for (int i = 0; i < N; i++) wait_done(&batched[i]);
        srv_sched_free(sch);
        for (int i = 0; i < N; i++) {
            collect *a = &alone[i], *b = &batched[i];
            if (shift)
                CHECKF(b->end.status == SL_OK && a->n == b->n && a->n == max_tokens[i] &&
                           !memcmp(a->ids, b->ids, (size_t)a->n * sizeof(int32_t)),
                       "request %d: %d tokens alone, %d through the scheduler (status %d), or different ids", i, a->n,
                       b->n, b->end.status);
            else
                CHECKF(b->end.status == SL_OK && b->end.stop == SL_STOP_LENGTH && b->n <= CTX - n_prompt[i] + 1,
                       "request %d without a shift: %d tokens (status %d, stop %d)", i, b->n, b->end.status,
                       b->end.stop);
        }
    }
    sl_tokenizer_free(tok);
    sl_model_close(m);
}

/* KV page pool (sl_model_set_kv_pool): requests that must wait for pages give exactly sl_generate's tokens alone;
 * when every sequence waits, the newest gives its pages back and is evaluated again later (preempted), still
 * giving the tokens it gives alone; a prompt the pool cannot hold ends with SL_EBUSY; the pool's count goes back
 * to nothing. */
static void pool_run(sl_model *m, const sl_tokenizer *tok, int max_active, uint64_t pool, int n, int32_t (*prompts)[300],
                     const int *n_prompt, const int *max_tokens, const int *smp, collect *out, srv_sched_stats *st) {
    srv_sched_params p = srv_sched_params_default();
    p.max_active = max_active;
    sl_model_set_kv_pool(m, pool);
    srv_sched *sch = NULL;
    sl_error err = {0};
    CHECKF(srv_sched_new(m, tok, &p, &sch, &err) == SL_OK, "%s", err.msg);
    for (int i = 0; sch && i < n; i++) {
        collect_init(&out[i]);
        srv_request r = {prompts[i], n_prompt[i], sampling(smp[i]), max_tokens[i], NULL, 0, 1, NULL, NULL, 0, 0, 0, 0, 0, 0};
        CHECKF(srv_submit(sch, &r, on_event, &out[i], NULL, &err) == SL_OK, "%s", err.msg);
    }
    for (int i = 0; sch && i < n; i++) wait_done(&out[i]);
    memset(st, 0, sizeof *st);
    if (sch) srv_sched_stats_get(sch, st);
    srv_sched_free(sch);
    uint64_t limit = 0;
    CHECKF(sl_model_kv_pool_used(m, &limit) == 0 && limit == pool, "%llu bytes still held",
           (unsigned long long)sl_model_kv_pool_used(m, NULL));
}

TEST(sched_kv_pool_waits_and_equals_generate) {
    sl_model *m = open_demo(0);
    CHECK(m);
    sl_tokenizer *tok = NULL;
    sl_error err = {0};
    CHECKF(sl_tokenizer_load(DEMO, &tok, &err) == SL_OK, "%s", err.msg);
    enum { N = 4 };
    static int32_t prompts[N][300];
    /* two sequences of 2 pages (a prompt past 256, or generating past it), two of one */
    const int from[N] = {100, 1000, 700, 400}, n_prompt[N] = {280, 240, 30, 200}, max_tokens[N] = {40, 40, 8, 80};
    static collect alone[N], pooled[N], stuck[2];
    for (int i = 0; i < N; i++) {
        CHECK(prompt_ids(tok, from[i], n_prompt[i], prompts[i]) > 0);
        collect_init(&alone[i]);
        sl_session *s = NULL;
        sl_sampler *smp = NULL;
        sl_sampler_params sp = sampling(i % 2);
        CHECK(sl_session_new(m, 0, &s) == SL_OK && sl_sampler_new(&sp, sl_model_n_vocab(m), &smp) == SL_OK);
        sl_gen_params gp = sl_gen_params_default();
        gp.max_tokens = max_tokens[i];
        CHECKF(sl_generate(m, s, tok, smp, prompts[i], n_prompt[i], &gp, gen_cb, &alone[i], NULL, &err) == SL_OK, "%s",
               err.msg);
        sl_sampler_free(smp);
        sl_session_free(s);
    }
    const uint64_t page = sl_model_kv_bytes(m, 512) - sl_model_kv_bytes(m, 256); /* 256 positions, every layer */
    /* two slots in 3 pages: a sequence of 2 pages and the other's first; the others wait for theirs */
    srv_sched_stats st;
    const int smp[N] = {0, 1, 0, 1};
    pool_run(m, tok, 2, 3 * page, N, prompts, n_prompt, max_tokens, smp, pooled, &st);
    printf("    alone %d %d %d %d tokens\n", alone[0].n, alone[1].n, alone[2].n, alone[3].n);
    CHECKF(st.kv_waits > 0 && !st.kv_evicted && !st.kv_preempted, "%llu waits, %llu ended, %llu preempted",
           (unsigned long long)st.kv_waits, (unsigned long long)st.kv_evicted, (unsigned long long)st.kv_preempted);
    for (int i = 0; i < N; i++)
        CHECKF(pooled[i].end.status == SL_OK && alone[i].n == pooled[i].n &&
                   !memcmp(alone[i].ids, pooled[i].ids, (size_t)alone[i].n * sizeof(int32_t)),
               "request %d: %d tokens alone, %d in the pool (status %d), or different ids", i, alone[i].n,
               pooled[i].n, pooled[i].end.status);
    /* two slots in 2 pages, both generating past their first page: both wait, the newest is preempted (its prompt
     * and 56 tokens evaluated again once the oldest is done) and both give their tokens alone */
    static int32_t p2[2][300];
    memcpy(p2[0], prompts[1], sizeof p2[0]);
    memcpy(p2[1], prompts[3], sizeof p2[1]);
    const int np2[2] = {240, 200}, mt2[2] = {40, 80}, smp2[2] = {1, 1};
    pool_run(m, tok, 2, 2 * page, 2, p2, np2, mt2, smp2, stuck, &st);
    CHECKF(st.kv_preempted == 1 && !st.kv_evicted, "%llu preempted, %llu ended", (unsigned long long)st.kv_preempted,
           (unsigned long long)st.kv_evicted);
    for (int i = 0; i < 2; i++) {
        const collect *a = &alone[1 + 2 * i];
        CHECKF(stuck[i].end.status == SL_OK && stuck[i].n == a->n && !memcmp(stuck[i].ids, a->ids, (size_t)a->n * 4),
               "request %d: status %d, %d tokens, alone %d", i, stuck[i].end.status, stuck[i].n, a->n);
    }
    /* a prompt that cannot fit the pool at all ends the same way, alone */
    const int np3[1] = {280}, mt3[1] = {4};
    const int smp3[1] = {0};
    pool_run(m, tok, 1, page, 1, prompts, np3, mt3, smp3, stuck, &st);
    CHECKF(stuck[0].end.status == SL_EBUSY && stuck[0].n == 0 && st.kv_evicted == 1, "a prompt past the pool: status %d",
           stuck[0].end.status);
    sl_model_set_kv_pool(m, 0);
    sl_tokenizer_free(tok);
    sl_model_close(m);
}
