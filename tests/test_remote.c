/*
 * test_remote.c — experts that live elsewhere (issue 31; src/dist/remote.h), here over the in-process transport
 * (dist/loop.c): the expert ranks are threads running engine_expert_rank with shares of their own, rank 0 the
 * backbone. Every fixture's logits through them are bitwise one process's (prefill layer-major, in micro-batches
 * and token by token, then greedy decode steps; ranks resident and streamed); the partition balances counts and
 * profile loads, and a profile given to a model moves its shares; a rank that stops answering fails the
 * evaluation with its rank named, never a hang. tests/py/test_mpi.py runs the same over Open MPI (mpirun -np 3).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/remote.h"
#include "engine/engine.h"
#include "format/container.h"
#include "sluice.h"
#include "test.h"

#define RANKS 3

typedef struct {
    rx_transport *ends[RANKS];
    pthread_t th[RANKS];
    sl_status st[RANKS];
} ranks_t;

static void *rank_main(void *arg) {
    rx_transport *t = arg;
    sl_error err = {0};
    sl_status st = engine_expert_rank(t, &err);
    return (void *)(intptr_t)st;
}

static int ranks_start(ranks_t *r) {
    if (rx_loop_new(RANKS, r->ends)) return -1;
    for (int i = 1; i < RANKS; i++)
        if (pthread_create(&r->th[i], NULL, rank_main, r->ends[i])) return -1;
    return 0;
}

/* RX_QUIT to every rank, the threads joined, the transport freed; 0 when every rank ended with SL_OK. */
static int ranks_stop(ranks_t *r) {
    const rx_head q = {.magic = RX_MAGIC, .kind = RX_QUIT};
    int bad = 0;
    for (int i = 1; i < RANKS; i++) r->ends[0]->ops->send(r->ends[0], i, &q, sizeof q, 1.0, NULL);
    for (int i = 1; i < RANKS; i++) {
        void *ret = NULL;
        pthread_join(r->th[i], &ret);
        bad |= ret != NULL;
    }
    rx_loop_free(r->ends, RANKS);
    return bad;
}

/* The prompt in chunks of `step` (every position's logits), then 4 greedy steps: [n + 4][V], poisoned first. */
static float *eval_stats(const char *path, const sl_model_params *mp, const test_toks *t, int step, char *msg,
                         size_t *n_out, sl_rank_stats *rs) {
    sl_model *m = NULL;
    sl_error err = {0};
    if (sl_model_open(path, mp, &m, &err)) {
        snprintf(msg, 1024, "open: %s", err.msg);
        return NULL;
    }
    const int V = sl_model_n_vocab(m);
    const size_t total = (size_t)(t->n + 4) * V;
    if (n_out) *n_out = total;
    float *out = malloc(total * sizeof(float));
    for (size_t i = 0; i < total; i++) out[i] = NAN;
    sl_session *s = NULL;
    int rc = sl_session_new(m, 0, &s);
    for (int i = 0; i < t->n && !rc; i += step)
        rc = sl_session_eval(s, t->tokens + i, t->n - i < step ? t->n - i : step, out + (size_t)i * V, 1);
    for (int i = 0; i < 4 && !rc; i++) {
        int32_t best = test_argmax(out + (size_t)(t->n + i - 1) * V, V);
        rc = sl_session_eval(s, &best, 1, out + (size_t)(t->n + i) * V, 0);
    }
    if (rc) snprintf(msg, 1024, "eval: %s", s ? sl_session_errmsg(s) : "no session");
    for (int r = 0; rs && !rc && r < RANKS; r++) /* every rank's figures, before the model closes */
        if (sl_model_rank_stats(m, r, &rs[r], &err)) rc = snprintf(msg, 1024, "stats: %s", err.msg);
    for (size_t i = 0; i < total && !rc; i++)
        if (!isfinite(out[i])) rc = snprintf(msg, 1024, "logit %zu was not written", i);
    sl_session_free(s);
    sl_model_close(m);
    if (rc) {
        free(out);
        return NULL;
    }
    return out;
}

static float *eval_all(const char *path, const sl_model_params *mp, const test_toks *t, int step, char *msg,
                       size_t *n_out) {
    return eval_stats(path, mp, t, step, msg, n_out, NULL);
}

/* One process against rank 0 + two expert ranks, resident and streamed ranks, the ways of feeding the prompt
 * (layer-major in one pass, micro-batches of 13 or 7, token by token), f32 and q4 weights with int8 and exact
 * activations: bitwise the same logits. */
FIXTURE_TEST(remote_equals_one_process) {
    const char *path;
    test_toks t;
    OPEN_FIXTURE(arg, &path, &t, NULL);
    char msg[1024] = "";
    /* case 3: q4 weights, int8 activations (the rows' int8 form made on the ranks from the f32 rows) */
    const char *q4 = test_path("%s/remote-%s.q4.sluice", test_tmpdir(), arg);
    sl_pack_params pp = sl_pack_params_default();
    pp.quant = SL_QUANT_Q4;
    pp.group = 32;
    sl_error perr = {0};
    CHECKF(sl_pack(test_path("tests/data/%s", arg), q4, &pp, &perr) == SL_OK, "%s", perr.msg);
    const int steps[4] = {t.n, 13, 1, 7};
    for (int c = 0; c < 4; c++) {
        if (c == 3) path = q4;
        sl_model_params one = sl_model_params_default();
        one.resident = 1;
        one.n_threads = 1;
        one.exact = c == 2;
        float *ref = eval_all(path, &one, &t, steps[c], msg, NULL);
        CHECKF(ref, "one process: %s", msg);
        ranks_t r;
        CHECK(ranks_start(&r) == 0);
        sl_model_params mp = one;
        mp.remote = r.ends[0];
        mp.resident = c != 1; /* case 1: each rank streams its share through a cache of two blocks */
        mp.cache_bytes = c == 1 ? 160 << 10 : 0;
        size_t n = 0;
        sl_rank_stats rs[RANKS];
        float *got = eval_stats(path, &mp, &t, steps[c], msg, &n, rs);
        const int stopped = ranks_stop(&r);
        if (!got && strstr(msg, "remote experts do not take")) { /* Llama 4: refused at open, saying why */
            printf("     %s: %s\n", arg, msg);
            free(ref);
            break;
        }
        const int same = got && !memcmp(got, ref, n * sizeof(float)), got_ok = got != NULL;
        free(ref);
        free(got);
        CHECKF(got_ok, "case %d (step %d): %s", c, steps[c], msg);
        CHECKF(same, "case %d (step %d, %s ranks): logits differ from one process", c, steps[c],
               mp.resident ? "resident" : "streamed");
        CHECKF(!stopped, "case %d: an expert rank ended with an error", c);
        /* the experts ran on the ranks: each holds a share and computed outputs, rank 0 received them all */
        CHECKF(rs[1].pairs > 0 && rs[2].pairs > 0 && rs[0].pairs == rs[1].pairs + rs[2].pairs,
               "case %d: outputs %llu + %llu, rank 0 received %llu", c, (unsigned long long)rs[1].pairs,
               (unsigned long long)rs[2].pairs, (unsigned long long)rs[0].pairs);
        CHECK(rs[1].experts > 0 && rs[2].experts > 0 && rs[0].requests == rs[1].requests + rs[2].requests);
    }
}

/* By count: contiguous ranges of each slot, shares differing by one at most. By load: the heaviest first to
 * the lightest rank, so no rank carries more than the lightest plus the heaviest single expert. */
TEST(remote_partition_balances) {
    enum { S = 3, E = 128, N = 4 };
    uint8_t own[S * E];
    rx_partition(S, E, N, NULL, own);
    for (int s = 0; s < S; s++) {
        int cnt[N] = {0};
        for (int e = 0; e < E; e++) {
            CHECK(own[s * E + e] >= 1 && own[s * E + e] < N);
            CHECK(!e || own[s * E + e] >= own[s * E + e - 1]);
            cnt[own[s * E + e]]++;
        }
        CHECKF(cnt[1] >= 42 && cnt[1] <= 43 && cnt[2] >= 42 && cnt[2] <= 43 && cnt[3] >= 42 && cnt[3] <= 43,
               "slot %d: %d %d %d", s, cnt[1], cnt[2], cnt[3]);
    }
    uint64_t load[S * E];
    unsigned seed = test_seed();
    for (int i = 0; i < S * E; i++) {
        seed = seed * 1103515245u + 12345u;
        load[i] = (seed >> 16) % 1000 + (i % E < 4 ? 20000 : 0); /* four hot experts per slot */
    }
    rx_partition(S, E, N, load, own);
    for (int s = 0; s < S; s++) {
        uint64_t sum[N] = {0}, top = 0;
        for (int e = 0; e < E; e++) {
            sum[own[s * E + e]] += load[s * E + e] + 1;
            if (load[s * E + e] > top) top = load[s * E + e];
        }
        uint64_t lo = sum[1], hi = sum[1];
        for (int r = 2; r < N; r++) lo = sum[r] < lo ? sum[r] : lo, hi = sum[r] > hi ? sum[r] : hi;
        CHECKF(hi - lo <= top + 1, "slot %d (seed %u): loads %llu..%llu, heaviest %llu", s, test_seed(),
               (unsigned long long)lo, (unsigned long long)hi, (unsigned long long)top);
        int hot[N] = {0};
        for (int e = 0; e < 4; e++) hot[own[s * E + e]]++;
        CHECKF(hot[1] && hot[2] && hot[3], "slot %d: the four hot experts on ranks %d %d %d %d", s, own[s * E],
               own[s * E + 1], own[s * E + 2], own[s * E + 3]); /* every rank takes one */
    }
}

/* A rank that stops answering: the evaluation fails within the timeout with the rank named; the model is
 * closed and the other ranks end cleanly. */
TEST(remote_rank_that_stops_answering) {
    const char *path = test_packed("qwen3_moe");
    CHECK(path);
    test_toks t = {.n = 3, .tokens = {1, 2, 3}};
    ranks_t r;
    CHECK(ranks_start(&r) == 0);
    setenv("SLUICE_REMOTE_TIMEOUT", "0.5", 1);
    sl_model_params mp = sl_model_params_default();
    mp.resident = 1;
    mp.n_threads = 1;
    mp.remote = r.ends[0];
    rx_loop_drop_after(r.ends[2], 2, 1); /* rank 2 answers the open, then nothing */
    char msg[1024] = "";
    float *got = eval_all(path, &mp, &t, 3, msg, NULL);
    unsetenv("SLUICE_REMOTE_TIMEOUT");
    ranks_stop(&r);
    const int failed = !got;
    free(got);
    CHECK(failed);
    CHECKF(strstr(msg, "rank 2") && strstr(msg, "did not answer") && strstr(msg, "layer"), "%s", msg);
}

/* A rank that cannot open its share (a file it does not have) fails the open with its own message. */
TEST(remote_open_names_the_rank_and_its_error) {
    ranks_t r;
    CHECK(ranks_start(&r) == 0);
    rx_open_msg o = {.n_slots = 1, .n_experts = 4, .hidden = 8, .resident = 1, .n_threads = 1};
    rx_client *c = NULL;
    sl_error err = {0};
    sl_status st = rx_client_open(r.ends[0], "/nonexistent/model.sluice", &o, NULL, 5.0, &c, &err);
    ranks_stop(&r);
    rx_client_free(c);
    CHECK(st != SL_OK && !c);
    CHECKF(strstr(err.msg, "expert rank 1") && strstr(err.msg, "nonexistent"), "%s", err.msg);
}

/* Shares from a routing profile (sl_model_params.pin_profile): expert 0 of every MoE layer far the hottest, so
 * rank 1 takes it alone and rank 2 every other expert; the logits stay one process's. */
TEST(remote_profile_balances_the_load) {
    const char *path;
    test_toks t;
    slc_file f;
    OPEN_FIXTURE("qwen3_moe", &path, &t, &f);
    const int S = (int)f.h.n_moe_layers, E = (int)f.h.n_experts;
    char *prof = malloc(64 + (size_t)S * E * 32), *p = prof;
    p += sprintf(p, "sluice-profile 1 layers %d experts %d\n", S, E);
    for (int s = 0; s < S; s++)
        for (int e = 0; e < E; e++) p += sprintf(p, "%d %d %d\n", f.moe_layers[s], e, e == 0 ? 100000 : 1);
    slc_close(&f);
    const char *pf = test_path("%s/remote-profile.txt", test_tmpdir());
    CHECK(test_write(pf, prof, strlen(prof)) == 0);
    free(prof);
    sl_model_params one = sl_model_params_default();
    one.resident = 1;
    one.n_threads = 1;
    char msg[1024] = "";
    size_t n = 0;
    float *ref = eval_all(path, &one, &t, 13, msg, &n);
    CHECKF(ref, "%s", msg);
    ranks_t r;
    CHECK(ranks_start(&r) == 0);
    sl_model_params mp = one;
    mp.remote = r.ends[0];
    mp.pin_profile = pf;
    sl_rank_stats rs[RANKS];
    float *got = eval_stats(path, &mp, &t, 13, msg, NULL, rs);
    ranks_stop(&r);
    const int same = got && !memcmp(got, ref, n * sizeof(float));
    free(ref);
    free(got);
    CHECKF(same, "%s", msg[0] ? msg : "logits differ from one process");
    CHECKF(rs[1].experts == (uint64_t)S && rs[2].experts == (uint64_t)S * (E - 1), "rank 1 holds %llu, rank 2 %llu",
           (unsigned long long)rs[1].experts, (unsigned long long)rs[2].experts);
}
