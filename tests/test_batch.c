/*
 * test_batch.c — sl_batch_eval: several sessions in one forward pass. On every fixture, resident and
 * streamed, a batch of mixed prefill and decode items gives each session bitwise the logits it gets
 * alone, and leaves each session's state so that its next step is bitwise the same too; a shared expert
 * is read once for the whole batch; a bad item is refused before anything runs; an I/O error during
 * the pass leaves every session unchanged.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "sluice.h"
#include "test.h"

enum { NSEQ = 5, MAXN = 140 };

/* Each sequence: a history evaluated first (0 = fresh session), then the batched step of n tokens. */
typedef struct {
    int hist, n, all;
} seq_plan;

static const seq_plan plans_mixed[NSEQ] = {
    {0, 70, 1},  /* a prompt longer than a micro-batch, every row's logits */
    {0, 5, 0},   /* a short prompt, last row only */
    {20, 1, 0},  /* a decode step */
    {9, 1, 1},   /* another decode step */
    {64, 3, 0},  /* a second chunk of a prompt */
};
/* every row in one micro-batch (continuous batching's decode steps): forward.c's joint attention pass */
static const seq_plan plans_decode[NSEQ] = {{20, 1, 0}, {9, 1, 1}, {64, 3, 0}, {0, 5, 1}, {33, 1, 0}};
static const seq_plan *plans = plans_mixed;

static void fill_tokens(int32_t *t, int n, int V, unsigned salt) {
    unsigned x = 2166136261u ^ salt;
    for (int i = 0; i < n; i++) {
        x = x * 16777619u + 12345u;
        t[i] = (int32_t)((x >> 8) % (unsigned)V);
    }
}

static sl_model *open_model(const char *path, int streamed, const io_fault_cfg *fault) {
    sl_model_params mp = sl_model_params_default();
    mp.resident = !streamed;
    mp.n_threads = 2;
    if (streamed) mp.cache_bytes = 1; /* the smallest cache the model allows: nearly every request misses */
    mp.prefetch = -1;                 /* reads only on demand: counts are the same run to run */
    sl_model *m = NULL;
    sl_error err = {0};
    if (model_open_ex(path, &mp, fault, &m, &err)) fprintf(stderr, "    open %s: %s\n", path, err.msg);
    return m;
}

static float *poisoned(size_t n) {
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; p && i < n; i++) p[i] = NAN;
    return p;
}

/* The plans' sessions on model m, histories evaluated; tokens[s] holds hist + n (+1 for the next step). */
static int setup(sl_model *m, sl_session **s, int32_t tok[NSEQ][MAXN], int V) {
    for (int i = 0; i < NSEQ; i++) {
        fill_tokens(tok[i], plans[i].hist + plans[i].n + 1, V, 7u * (unsigned)i + 1u);
        if (sl_session_new(m, 0, &s[i])) return -1;
        if (plans[i].hist && sl_session_eval(s[i], tok[i], plans[i].hist, NULL, 0)) return -1;
    }
    return 0;
}

/* The step of every plan, alone (session by session) or as one batch; then one more decode step each,
 * alone. out[i]: the step's logits, next[i]: the next step's. */
static int run_plans(sl_model *m, int batched, float *out[NSEQ], float *next[NSEQ], int V) {
    sl_session *s[NSEQ] = {0};
    int32_t tok[NSEQ][MAXN];
    int rc = setup(m, s, tok, V);
    sl_batch_item items[NSEQ];
    for (int i = 0; !rc && i < NSEQ; i++) {
        out[i] = poisoned((size_t)(plans[i].all ? plans[i].n : 1) * V);
        next[i] = poisoned((size_t)V);
        items[i] = (sl_batch_item){s[i], tok[i] + plans[i].hist, plans[i].n, out[i], plans[i].all};
        if (!batched) rc = sl_session_eval(s[i], items[i].tokens, plans[i].n, out[i], plans[i].all);
    }
    if (!rc && batched) {
        rc = sl_batch_eval(m, items, NSEQ);
        if (rc) fprintf(stderr, "    batch: %s\n", sl_model_errmsg(m));
    }
    for (int i = 0; !rc && i < NSEQ; i++) {
        if (sl_session_n_past(s[i]) != plans[i].hist + plans[i].n) rc = -1;
        else rc = sl_session_eval(s[i], tok[i] + plans[i].hist + plans[i].n, 1, next[i], 0);
    }
    for (int i = 0; i < NSEQ; i++) sl_session_free(s[i]);
    return rc;
}

/* batch_vs_alone on the container at path (named fixture in the messages) */
static void batch_vs_alone_at(const char *path, const char *fixture, int streamed) {
    CHECK(path);
    sl_model *m = open_model(path, streamed, NULL);
    CHECK(m);
    const int V = sl_model_n_vocab(m);
    float *a[NSEQ] = {0}, *an[NSEQ] = {0}, *b[NSEQ] = {0}, *bn[NSEQ] = {0};
    int rc_a = run_plans(m, 0, a, an, V), rc_b = run_plans(m, 1, b, bn, V);
    sl_model_close(m);
    int bad = -1, bad_next = -1;
    for (int i = 0; !rc_a && !rc_b && i < NSEQ; i++) {
        size_t len = (size_t)(plans[i].all ? plans[i].n : 1) * V;
        if (bad < 0 && memcmp(a[i], b[i], len * sizeof(float))) bad = i;
        if (bad_next < 0 && memcmp(an[i], bn[i], (size_t)V * sizeof(float))) bad_next = i;
    }
    for (int i = 0; i < NSEQ; i++) free(a[i]), free(an[i]), free(b[i]), free(bn[i]);
    CHECKF(!rc_a && !rc_b, "%s: evaluation failed (alone %d, batched %d)", fixture, rc_a, rc_b);
    CHECKF(bad < 0, "%s (%s): sequence %d's logits in the batch differ from its logits alone", fixture,
           streamed ? "streamed" : "resident", bad);
    CHECKF(bad_next < 0, "%s (%s): sequence %d's next step after the batch differs", fixture,
           streamed ? "streamed" : "resident", bad_next);
}

static void batch_vs_alone(const char *fixture, int streamed) { batch_vs_alone_at(test_packed(fixture), fixture, streamed); }

FIXTURE_TEST(batch_equals_alone_resident) { batch_vs_alone(arg, 0); }
FIXTURE_TEST(batch_equals_alone_streamed) { batch_vs_alone(arg, 1); }
FIXTURE_TEST(batch_of_decode_steps_equals_alone) {
    plans = plans_decode;
    batch_vs_alone(arg, 0);
    plans = plans_mixed;
}

/* Decode steps of four sequences: the batch reads each chosen expert once, so fewer expert reads than
 * four separate steps through the same (tiny) cache. */
TEST(batch_shares_expert_reads) {
    sl_model *m = open_model("models/demo.sluice", 1, NULL);
    CHECK(m);
    const int V = sl_model_n_vocab(m);
    enum { B = 4, HIST = 12 };
    uint64_t misses[2] = {0};
    for (int batched = 0; batched < 2; batched++) {
        sl_session *s[B] = {0};
        int32_t tok[B][HIST + 1];
        sl_batch_item items[B];
        for (int i = 0; i < B; i++) {
            fill_tokens(tok[i], HIST + 1, V, 100u + (unsigned)i);
            CHECK(sl_session_new(m, 0, &s[i]) == SL_OK);
            CHECK(sl_session_eval(s[i], tok[i], HIST, NULL, 0) == SL_OK);
            items[i] = (sl_batch_item){s[i], &tok[i][HIST], 1, NULL, 0};
        }
        sl_model_reset_stats(m);
        if (batched) CHECK(sl_batch_eval(m, items, B) == SL_OK);
        for (int i = 0; !batched && i < B; i++) CHECK(sl_session_eval(s[i], &tok[i][HIST], 1, NULL, 0) == SL_OK);
        sl_stats st;
        sl_model_stats(m, &st);
        misses[batched] = st.misses;
        for (int i = 0; i < B; i++) sl_session_free(s[i]);
    }
    sl_model_close(m);
    printf("    4 decode steps: %llu expert reads one by one, %llu batched\n", (unsigned long long)misses[0],
           (unsigned long long)misses[1]);
    CHECKF(misses[1] < misses[0], "batched step read %llu experts, separate steps %llu",
           (unsigned long long)misses[1], (unsigned long long)misses[0]);
}

TEST(batch_bad_item_refused_before_anything_runs) {
    sl_model *m = open_model(test_packed("qwen3_next"), 0, NULL);
    CHECK(m);
    const int V = sl_model_n_vocab(m);
    sl_session *s[3] = {0};
    int32_t ok[4] = {1, 2, 3, 4}, bad[2] = {5, V + 3};
    for (int i = 0; i < 3; i++) CHECK(sl_session_new(m, 0, &s[i]) == SL_OK);
    CHECK(sl_session_eval(s[0], ok, 2, NULL, 0) == SL_OK);
    sl_batch_item items[3] = {{s[0], ok, 4, NULL, 0}, {s[1], ok, 4, NULL, 0}, {s[2], bad, 2, NULL, 0}};
    CHECK(sl_batch_eval(m, items, 3) == SL_ERANGE);
    CHECKF(strstr(sl_model_errmsg(m), "batch item 2") != NULL, "message: %s", sl_model_errmsg(m));
    CHECK(sl_session_n_past(s[0]) == 2 && sl_session_n_past(s[1]) == 0 && sl_session_n_past(s[2]) == 0);
    items[2].session = s[0]; /* the same session twice */
    items[2].tokens = ok;
    CHECK(sl_batch_eval(m, items, 3) == SL_EINVAL);
    CHECK(sl_session_n_past(s[0]) == 2);
    CHECK(sl_batch_eval(m, items, 0) == SL_EINVAL);
    for (int i = 0; i < 3; i++) sl_session_free(s[i]);
    sl_model_close(m);
}

/* An expert read that fails in the middle of a batched pass: every session is as it was, and its next
 * step is bitwise what an untouched twin session's is. */
TEST(batch_io_error_leaves_every_session_unchanged) {
    const char *path = test_packed("qwen3_next");
    sl_model *good = open_model(path, 1, NULL);
    CHECK(good);
    const int V = sl_model_n_vocab(good);
    enum { S = 3 };
    int32_t tok[S][40];
    sl_session *s[2][S] = {{0}};
    for (int i = 0; i < S; i++) {
        fill_tokens(tok[i], 40, V, 300u + (unsigned)i);
        CHECK(sl_session_new(good, 0, &s[1][i]) == SL_OK);
        CHECK(sl_session_eval(s[1][i], tok[i], 10 + 5 * i, NULL, 0) == SL_OK);
    }
    sl_stats st;
    sl_model_stats(good, &st);
    /* the twin model reads exactly as much for the same histories; its fault fires on the batch's 2nd read */
    io_fault_cfg fault;
    memset(&fault, 0, sizeof fault);
    fault.fail_every = (unsigned)st.reads + 2;
    fault.max_faults = 1;
    sl_model *bad = open_model(path, 1, &fault);
    CHECK(bad);
    for (int i = 0; i < S; i++) {
        CHECK(sl_session_new(bad, 0, &s[0][i]) == SL_OK);
        CHECK(sl_session_eval(s[0][i], tok[i], 10 + 5 * i, NULL, 0) == SL_OK);
    }
    sl_batch_item items[S];
    for (int i = 0; i < S; i++) items[i] = (sl_batch_item){s[0][i], tok[i] + 10 + 5 * i, 3 + 10 * (i == 1), NULL, 0};
    sl_status rc = sl_batch_eval(bad, items, S);
    CHECKF(rc == SL_EIO, "the batch with a failing read returned %d (%s)", rc, sl_model_errmsg(bad));
    for (int i = 0; i < S; i++) CHECKF(sl_session_n_past(s[0][i]) == 10 + 5 * i, "session %d moved", i);
    for (int i = 0; i < S; i++) {
        float *x = poisoned((size_t)V), *y = poisoned((size_t)V);
        int r0 = sl_session_eval(s[0][i], tok[i] + 10 + 5 * i, 1, x, 0);
        int r1 = sl_session_eval(s[1][i], tok[i] + 10 + 5 * i, 1, y, 0);
        int same = !r0 && !r1 && !memcmp(x, y, (size_t)V * sizeof(float));
        free(x);
        free(y);
        CHECKF(same, "session %d after the failed batch differs from an untouched one (rc %d %d)", i, r0, r1);
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < S; i++) sl_session_free(s[k][i]);
    sl_model_close(bad);
    sl_model_close(good);
}

/* ---- MLA on the quantized path ----------------------------------------------------------------------------------
 * mla.c's projections take int8 activations for q8/q4 matrices (attention.c's fwd_act), which the f32 fixtures above
 * never reach. The MLA fixtures packed q4 (group 32) and run with the default int8 activations: a sequence in a batch
 * (mixed prefill and decode, and a batch of decode steps) bitwise alone, a prefill bitwise its tokens one at a time
 * and in 7-token chunks, at 1, 2 and 3 threads alike; the int8 logits differ from --exact's (the int8 kernels ran) and
 * are finite. */

static float *mla_logits(const char *path, const int32_t *toks, int n, int threads, int step, int exact, int *V) {
    sl_model_params mp = sl_model_params_default();
    mp.n_threads = threads;
    mp.exact = exact;
    mp.resident = 1;
    sl_model *m = NULL;
    sl_error err = {0};
    if (sl_model_open(path, &mp, &m, &err)) {
        fprintf(stderr, "    open %s: %s\n", path, err.msg);
        return NULL;
    }
    *V = sl_model_n_vocab(m);
    float *out = poisoned((size_t)n * (size_t)*V);
    sl_session *s = NULL;
    int bad = !out || sl_session_new(m, 0, &s) != SL_OK;
    for (int i = 0; !bad && i < n; i += step)
        bad = sl_session_eval(s, toks + i, n - i < step ? n - i : step, out + (size_t)i * (size_t)*V, 1) != SL_OK;
    sl_session_free(s);
    sl_model_close(m);
    if (bad) free(out);
    return bad ? NULL : out;
}

TEST(mla_q4_int8_batch_and_prefill_bitwise) {
    static const char *fixtures[] = {"deepseek_v3", "deepseek_v32", "glm_moe_dsa", "longcat_flash"};
    enum { N = 80 }; /* more than a micro-batch */
    for (size_t f = 0; f < sizeof fixtures / sizeof *fixtures && !test_failed(); f++) {
        char out[512];
        snprintf(out, sizeof out, "%s/mla-q4-%s.sluice", test_tmpdir(), fixtures[f]);
        sl_pack_params p = sl_pack_params_default();
        p.quant = SL_QUANT_Q4;
        p.group = 32;
        p.hash_sources = 0;
        sl_error err = {0};
        CHECKF(sl_pack(test_path("tests/data/%s", fixtures[f]), out, &p, &err) == SL_OK, "pack %s: %s", fixtures[f],
               err.msg);
        batch_vs_alone_at(out, fixtures[f], 0);
        plans = plans_decode;
        batch_vs_alone_at(out, fixtures[f], 0);
        plans = plans_mixed;
        int32_t toks[N];
        int V = 0;
        fill_tokens(toks, N, 64, 99u + (unsigned)f); /* (ids below every fixture's vocabulary) */
        float *full = mla_logits(out, toks, N, 3, N, 0, &V), *one = mla_logits(out, toks, N, 1, 1, 0, &V);
        float *chunks = mla_logits(out, toks, N, 2, 7, 0, &V), *ex = mla_logits(out, toks, N, 2, N, 1, &V);
        const size_t bytes = (size_t)N * (size_t)V * sizeof(float);
        const int ok = full && one && chunks && ex;
        const int same = ok && !memcmp(full, one, bytes) && !memcmp(full, chunks, bytes), differs = ok && memcmp(full, ex, bytes);
        const double e = ok ? test_rel_err(full, ex, N, V) : 1.0;
        free(full), free(one), free(chunks), free(ex);
        printf("     %s q4: int8 vs exact max relative logit error %.3g\n", fixtures[f], e);
        CHECKF(ok, "%s: evaluation failed", fixtures[f]);
        CHECKF(same, "%s q4: the prefill differs from its tokens one at a time or in 7-token chunks", fixtures[f]);
        /* (these random fixtures amplify weight and activation rounding: a routing flip moves a position's logits a
         * lot, as test_quant.c's q4 bound says; measured max 0.39 .. 1.3) */
        CHECKF(differs && isfinite(e) && e < 3.0, "%s q4: int8 logits %s exact's (max relative error %.3g)", fixtures[f],
               differs ? "far from" : "bitwise", e);
    }
}
