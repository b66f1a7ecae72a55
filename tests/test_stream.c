/*
 * test_stream.c — the streaming engine through the model: streamed logits are bitwise equal to --resident for
 * every cache size (down to one slot), policy, I/O engine and thread count; faults (EIO, short reads, EINTR,
 * corruption, scrambled completion order) give clear errors or are recovered, and the model stays usable;
 * stats add up. The I/O engines and the cache driven without a model are test_cache_io.c's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "format/container.h"
#include "sluice.h"
#include "stream/io.h"
#include "test.h"

/* Evaluates the prompt in chunks of `step` (all logits) and then 4 greedy decode steps; returns a
 * malloc'ed [n + 4][V] array or NULL (message in msg). The array is poisoned (NaN) first and every
 * element must have been written, so two runs can only compare equal on values they computed. */
static float *run(const char *path, const sl_model_params *mp, const io_fault_cfg *fault, const test_toks *t, int step,
                  char *msg, sl_model **keep) {
    sl_model *m = NULL;
    sl_error err = {0};
    if (keep) *keep = NULL;
    if (model_open_ex(path, mp, fault, &m, &err)) {
        snprintf(msg, 1024, "open: %s", err.msg);
        return NULL;
    }
    int V = sl_model_n_vocab(m);
    size_t total = (size_t)(t->n + 4) * V;
    float *out = malloc(total * sizeof(float));
    for (size_t i = 0; i < total; i++) out[i] = NAN;
    sl_session *s = NULL;
    sl_session_new(m, 0, &s);
    int rc = 0;
    for (int i = 0; i < t->n && !rc; i += step) {
        int k = t->n - i < step ? t->n - i : step;
        rc = sl_session_eval(s, t->tokens + i, k, out + (size_t)i * V, 1);
    }
    for (int i = 0; i < 4 && !rc; i++) {
        int32_t best = test_argmax(out + (size_t)(t->n + i - 1) * V, V);
        rc = sl_session_eval(s, &best, 1, out + (size_t)(t->n + i) * V, 0);
    }
    if (rc) snprintf(msg, 1024, "eval: %s", sl_session_errmsg(s));
    for (size_t i = 0; i < total && !rc; i++)
        if (!isfinite(out[i])) {
            snprintf(msg, 1024, "logit %zu of row %zu was not written", i % (size_t)V, i / (size_t)V);
            rc = 1;
        }
    if (rc) {
        free(out);
        out = NULL;
    }
    sl_session_free(s);
    if (keep) *keep = m;
    else sl_model_close(m);
    return out;
}

FIXTURE_TEST(streamed_equals_resident) {
    const char *path;
    test_toks t;
    slc_file f;
    OPEN_FIXTURE(arg, &path, &t, &f);
    uint64_t stride = f.h.expert_stride, total = f.h.expert_len;
    slc_close(&f);
    char msg[1024] = "";
    sl_model_params rp = sl_model_params_default();
    rp.resident = 1;
    int steps[] = {t.n, 1, 13};
    float *refs[3]; /* the resident result for each way of feeding the prompt */
    for (int i = 0; i < 3; i++) {
        refs[i] = run(path, &rp, NULL, &t, steps[i], msg, NULL);
        CHECKF(refs[i], "%s", msg);
    }
    size_t bytes = (size_t)(t.n + 4) * 256 * sizeof(float);
    uint64_t budgets[] = {stride, 3 * stride, total / 2, total};
    int cases = 0;
    for (int b = 0; b < 4; b++)
        for (int pol = 0; pol < 2; pol++)
            for (int eng = 1; eng <= 2; eng++) {
                sl_model_params mp = sl_model_params_default();
                mp.cache_bytes = budgets[b];
                mp.policy = (sl_cache_policy)pol;
                mp.io_engine = (sl_io_engine)eng;
                mp.io_mode = (b + pol) % 2 ? SL_IO_DIRECT : SL_IO_BUFFERED;
                mp.n_threads = 1 + (b + eng) % 2;
                mp.prefetch = (b + pol) % 3 - 1; /* never, auto, always */
                int si = (b + pol + eng) % 3, step = steps[si];
                float *ref = refs[si];
                float *got = run(path, &mp, NULL, &t, step, msg, NULL);
                CHECKF(got, "budget %llu policy %d engine %d: %s", (unsigned long long)budgets[b], pol, eng, msg);
                int same = !memcmp(got, ref, bytes);
                free(got);
                CHECKF(same, "budget %llu policy %d engine %d step %d: logits differ from --resident",
                       (unsigned long long)budgets[b], pol, eng, step);
                cases++;
            }
    for (int i = 0; i < 3; i++) free(refs[i]);
    CHECK(cases == 16);
}

/* The device tier (stream/tier.h; on the CPU backend a second cache in host memory) over the RAM cache or the
 * resident experts: any split of the two budgets gives the logits of all-resident bitwise, prefill in one
 * pass (layer-major, ordered requests: the experts held in batches as the tier has room, model/moe.c grouped_wide),
 * in a layer-major chunk of 70 then token-major ones, and token by token (unordered), and its counters add up. */
FIXTURE_TEST(tiered_equals_resident) {
    const char *path;
    test_toks t;
    slc_file f;
    OPEN_FIXTURE(arg, &path, &t, &f);
    uint64_t stride = f.h.expert_stride, total = f.h.expert_len, used = (uint64_t)f.h.n_experts;
    slc_close(&f);
    char msg[1024] = "";
    sl_model_params rp = sl_model_params_default();
    rp.resident = 1;
    int steps[] = {t.n, 1, 70};
    float *refs[3];
    for (int i = 0; i < 3; i++) {
        refs[i] = run(path, &rp, NULL, &t, steps[i], msg, NULL);
        CHECKF(refs[i], "%s", msg);
    }
    size_t bytes = (size_t)(t.n + 4) * 256 * sizeof(float);
    /* {vram, ram (0: resident below)}: a tier of one layer's experts over one slot of RAM, a small tier over a
     * large cache, a large tier over a small cache, all of it over resident experts */
    const uint64_t split[][2] = {{used * stride, stride}, {3 * stride, total / 2}, {total, 2 * stride}, {total / 4, 0},
                                 {total, 0}};
    uint64_t host = 0;
    for (size_t c = 0; c < sizeof split / sizeof *split; c++)
        for (int si = 0; si < 6; si++) { /* si % 3: the step; si >= 3: the hybrid step (docs/CUDA.md) */
            const int st_i = si % 3;
            sl_model_params mp = sl_model_params_default();
            mp.vram_bytes = split[c][0];
            if (split[c][1]) mp.cache_bytes = split[c][1];
            else mp.resident = 1;
            mp.n_threads = 1 + (int)(c + (size_t)si) % 2;
            mp.hybrid = si >= 3 ? 1 : -1;
            sl_model *m = NULL;
            float *got = run(path, &mp, NULL, &t, steps[st_i], msg, &m);
            CHECKF(got, "vram %llu ram %llu step %d hybrid %d: %s", (unsigned long long)split[c][0],
                   (unsigned long long)split[c][1], steps[st_i], mp.hybrid, msg);
            int same = !memcmp(got, refs[st_i], bytes);
            free(got);
            sl_stats st;
            sl_model_stats(m, &st);
            sl_model_close(m);
            CHECKF(same, "vram %llu ram %llu step %d hybrid %d: logits differ from --resident",
                   (unsigned long long)split[c][0], (unsigned long long)split[c][1], steps[st_i], mp.hybrid);
            CHECKF(mp.hybrid > 0 || !st.tier_host, "hybrid off: %llu experts on the host", (unsigned long long)st.tier_host);
            host += st.tier_host;
            CHECKF(st.tier_slots >= 1 && st.tier_misses > 0 && st.tier_bytes_copied > 0,
                   "vram %llu: tier slots %llu misses %llu copied %llu", (unsigned long long)split[c][0],
                   (unsigned long long)st.tier_slots, (unsigned long long)st.tier_misses,
                   (unsigned long long)st.tier_bytes_copied);
            if (split[c][0] >= total) /* every expert fits: each is copied once, then always found */
                CHECKF(st.tier_hits > 0 && st.tier_misses <= st.tier_slots, "vram all: hits %llu misses %llu slots %llu",
                       (unsigned long long)st.tier_hits, (unsigned long long)st.tier_misses,
                       (unsigned long long)st.tier_slots);
        }
    CHECKF(host > 0, "the hybrid step ran no expert on the host"); /* the token-by-token runs' small tiers do */
    for (int i = 0; i < 3; i++) free(refs[i]);
}

static float *reference(const char *path, const test_toks *t, int step) {
    char msg[1024];
    sl_model_params rp = sl_model_params_default();
    rp.resident = 1;
    return run(path, &rp, NULL, t, step, msg, NULL);
}

TEST(faults_recovered_bitwise) {
    const char *path;
    test_toks t;
    OPEN_FIXTURE("qwen3_next", &path, &t, NULL);
    float *ref = reference(path, &t, 11);
    CHECK(ref);
    size_t bytes = (size_t)(t.n + 4) * 256 * sizeof(float);
    io_fault_cfg cases[4];
    memset(cases, 0, sizeof cases);
    cases[0].short_every = 3;
    cases[1].eintr_every = 2;
    cases[2].reverse = 1;
    cases[3].delay_us = 50;
    cases[3].short_every = 5;
    cases[3].eintr_every = 7;
    for (int i = 0; i < 4; i++) {
        char msg[1024] = "";
        sl_model_params mp = sl_model_params_default();
        mp.cache_bytes = 3 * 24576; /* small: many reads per token */
        mp.io_engine = i % 2 ? SL_ENGINE_PREAD : SL_ENGINE_URING;
        sl_model *m = NULL;
        float *got = run(path, &mp, &cases[i], &t, 11, msg, &m);
        if (!got) { free(ref); sl_model_close(m); }
        CHECKF(got, "case %d: %s", i, msg);
        sl_stats st;
        sl_model_stats(m, &st);
        sl_model_close(m);
        int same = !memcmp(got, ref, bytes);
        free(got);
        if (!same) free(ref);
        CHECKF(same, "fault case %d changed the logits", i);
        if (i != 2 && st.retries == 0) free(ref);
        CHECKF(i == 2 || st.retries > 0, "case %d: no retries recorded", i);
    }
    free(ref);
}

/* Feeds the prompt token by token, then 4 greedy steps, into s; out: [n + 4][V] logits. The first
 * evaluation that fails is recorded (*fault_at, *fault_st, fault_msg, *fault_past: n_past right after
 * it) and the same token is evaluated again. Returns the status of the last evaluation. */
static sl_status step_all(sl_session *s, const test_toks *t, int V, float *out, int *fault_at, sl_status *fault_st,
                          char *fault_msg, int *fault_past) {
    sl_status st = SL_OK;
    *fault_at = -1;
    for (int i = 0; i < t->n + 4 && st == SL_OK; i++) {
        int32_t tok = i < t->n ? t->tokens[i] : 0;
        for (int v = 1; i >= t->n && v < V; v++)
            if (out[(size_t)(i - 1) * V + v] > out[(size_t)(i - 1) * V + tok]) tok = v;
        st = sl_session_eval(s, &tok, 1, out + (size_t)i * V, 0);
        if (st != SL_OK && *fault_at < 0) {
            *fault_at = i;
            *fault_st = st;
            snprintf(fault_msg, 1024, "%s", sl_session_errmsg(s));
            *fault_past = sl_session_n_past(s);
            st = sl_session_eval(s, &tok, 1, out + (size_t)i * V, 0);
        }
    }
    return st;
}

/* One failing read of a chosen expert (corrupt: its bytes corrupted, else the read failing): a clear error naming
 * layer, expert and offset, and the session
 * unchanged by it (n_past, KV cache, DeltaNet state): evaluating the same token again on the same
 * session and model, then the rest, gives bitwise the resident model's logits token by token; so does
 * a fresh session on that model afterwards (the cache kept no bad block). */
static sl_io_engine one_fault_engine = SL_ENGINE_AUTO; /* the engine under the fault injector */

static int one_fault_tier_slots; /* > 0: a device tier of this many slots over the cache (stream/tier.h) */

static void one_fault(int corrupt, sl_status want, const char *what) {
    const char *path;
    test_toks t;
    slc_file f;
    OPEN_FIXTURE("qwen3_5_moe", &path, &t, &f);
    io_fault_cfg fc;
    memset(&fc, 0, sizeof fc);
    fc.fail_every = !corrupt;
    fc.corrupt_every = corrupt;
    fc.max_faults = 1;
    fc.only_off = slc_expert_offset(&f, 1, 9); /* layer 1, expert 9 */
    const uint64_t stride = f.h.expert_stride;
    char off[32];
    snprintf(off, sizeof off, "%llu", (unsigned long long)fc.only_off);
    slc_close(&f);
    float *ref = reference(path, &t, 1);
    CHECK(ref);
    sl_model_params mp = sl_model_params_default();
    mp.prefetch = -1; /* a prefetch could absorb the one fault quietly (failed_prefetch_is_quiet_and_retried) */
    mp.io_engine = one_fault_engine;
    mp.vram_bytes = (uint64_t)one_fault_tier_slots * stride;
    sl_model *m = NULL;
    sl_error err = {0};
    CHECK(model_open_ex(path, &mp, &fc, &m, &err) == SL_OK);
    const int V = sl_model_n_vocab(m);
    const size_t total = (size_t)(t.n + 4) * V;
    float *got = malloc(total * sizeof(float)), *fresh = malloc(total * sizeof(float));
    for (size_t i = 0; i < total; i++) got[i] = fresh[i] = NAN;
    sl_session *s = NULL, *s2 = NULL;
    sl_session_new(m, 0, &s);
    int at = -1, past = -1, at2 = -1, past2 = -1;
    sl_status fst = SL_OK, fst2 = SL_OK;
    char msg[1024] = "", msg2[1024] = "";
    sl_status st = step_all(s, &t, V, got, &at, &fst, msg, &past);
    sl_session_new(m, 0, &s2);
    sl_status st2 = step_all(s2, &t, V, fresh, &at2, &fst2, msg2, &past2);
    sl_session_free(s);
    sl_session_free(s2);
    sl_model_close(m);
    size_t diff = total, diff2 = total; /* first element that differs from the reference */
    for (size_t i = total; i-- > 0;) {
        if (memcmp(&got[i], &ref[i], sizeof *ref)) diff = i;
        if (memcmp(&fresh[i], &ref[i], sizeof *ref)) diff2 = i;
    }
    free(ref);
    free(got);
    free(fresh);
    CHECKF(at >= 0, "expert 9 of layer 1 was never read: the fault did not fire");
    int named = fst == want && strstr(msg, "layer 1, expert 9") && strstr(msg, off) && strstr(msg, what);
    CHECKF(named, "status %d, message: %s", fst, msg);
    CHECKF(past == at, "a failed eval must leave the session unchanged (n_past %d, expected %d)", past, at);
    CHECKF(st == SL_OK && st2 == SL_OK && at2 < 0, "after the fault: status %d, fresh session %d (failed at %d)", st, st2, at2);
    CHECKF(diff == total, "the faulted session's logits differ from resident at row %zu (fault at token %d)",
           diff / (size_t)V, at);
    CHECKF(diff2 == total, "a fresh session after the fault differs from resident at row %zu", diff2 / (size_t)V);
}

TEST(fault_eio_names_expert) {
    one_fault(0, SL_EIO, "Input/output error");
}

/* The engine's wait() itself fails (its reaper gone): the eval reports it by name and closing the model
 * returns instead of waiting forever for the reads that will never be reported (cache.c drain). */
TEST(broken_engine_wait_fails_the_eval_and_close_returns) {
    const char *path;
    test_toks t;
    OPEN_FIXTURE("qwen3_5_moe", &path, &t, NULL);
    io_fault_cfg fc;
    memset(&fc, 0, sizeof fc);
    fc.wait_fail_after = 3;
    sl_model_params mp = sl_model_params_default();
    mp.prefetch = -1;
    sl_model *m = NULL;
    sl_error err = {0};
    CHECK(model_open_ex(path, &mp, &fc, &m, &err) == SL_OK);
    sl_session *s = NULL;
    CHECK(sl_session_new(m, 0, &s) == SL_OK);
    const int V = sl_model_n_vocab(m);
    float *logits = malloc((size_t)(t.n + 4) * (size_t)V * sizeof(float));
    int at = -1, past = -1;
    sl_status fst = SL_OK;
    char msg[1024] = "";
    step_all(s, &t, V, logits, &at, &fst, msg, &past);
    free(logits);
    sl_session_free(s);
    sl_model_close(m); /* used to spin in drain() for ever */
    CHECKF(at >= 0 && fst == SL_EIO && strstr(msg, "waiting for expert reads failed"), "status %d at token %d, message: %s",
           fst, at, msg);
}

/* The same read error under a device tier of 8 slots: the tier passes the cache's message on, the failed
 * eval leaves the session as it was, and the next request reads the expert again. */
TEST(fault_eio_through_the_tier) {
    one_fault_tier_slots = 8;
    one_fault(0, SL_EIO, "Input/output error");
    one_fault_tier_slots = 0;
}

TEST(fault_corruption_caught_by_checksum) {
    one_fault(1, SL_ECHECKSUM, "checksum");
}

/* The same with the pread engine, whose workers checksum the block (io_uring's reaper does above). */
TEST(fault_corruption_caught_by_checksum_pread) {
    one_fault_engine = SL_ENGINE_PREAD;
    one_fault(1, SL_ECHECKSUM, "checksum");
    one_fault_engine = SL_ENGINE_AUTO;
}

TEST(stats_add_up) {
    const char *path;
    test_toks t;
    OPEN_FIXTURE("qwen3_next", &path, &t, NULL);
    sl_model_params mp = sl_model_params_default();
    mp.cache_bytes = 16 * 24576; /* half of the 2 MoE layers x 16 experts */
    mp.io_mode = SL_IO_DIRECT;
    mp.prefetch = 1;
    char msg[1024];
    sl_model *m = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    float *got = run(path, &mp, NULL, &t, 1, msg, &m);
    CHECKF(got, "%s", msg);
    free(got);
    sl_stats st;
    CHECK(sl_model_stats(m, &st) == SL_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double since_open = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    uint64_t lh = 0, lm = 0, lb = 0;
    for (int l = 0; l < sl_model_n_layers(m); l++) {
        uint64_t h, mi, b;
        sl_model_layer_stats(m, l, &h, &mi, &b);
        lh += h;
        lm += mi;
        lb += b;
    }
    sl_model_close(m);
    CHECK(st.tokens == (uint64_t)t.n + 4);
    CHECKF(st.cache_slots == 16 && st.hits > 0 && st.misses > 0, "slots %llu hits %llu misses %llu",
           (unsigned long long)st.cache_slots, (unsigned long long)st.hits, (unsigned long long)st.misses);
    CHECKF(st.bytes_read == (st.misses + st.prefetch_reads) * 24576 && lb == st.bytes_read, "bytes %llu misses %llu prefetch %llu layers %llu",
           (unsigned long long)st.bytes_read, (unsigned long long)st.misses, (unsigned long long)st.prefetch_reads, (unsigned long long)lb);
    CHECK(st.prefetch_accuracy >= 0 && st.prefetch_accuracy <= 1 && st.prefetch_used <= st.hits);
    CHECK(st.prefetch_reads > 0 && st.prefetch_used > 0 && st.prefetch_active);
    CHECK(lh == st.hits && lm == st.misses);
    CHECKF(st.engine_verify_s > 0 && st.engine_verify_s < st.eval_s, "the I/O threads' checksum time %g s (eval %g s)",
           st.engine_verify_s, st.eval_s); /* every whole read is hashed there */
    CHECK(st.peak_rss_bytes > st.backbone_bytes);
    CHECK(st.io_engine && st.io_mode);
    /* the disk's busy time: within the time since open, and at least one read deep on average */
    CHECKF(st.io_busy_s > 0 && st.io_busy_s < since_open && st.io_depth_s >= st.io_busy_s &&
               st.io_depth_s <= 64 * st.io_busy_s,
           "disk busy %g s, depth integral %g s, %g s since open", st.io_busy_s, st.io_depth_s, since_open);
}

TEST(profile_roundtrip_and_pin) {
    const char *path;
    test_toks t;
    OPEN_FIXTURE("qwen3_next", &path, &t, NULL);
    sl_model_params mp = sl_model_params_default();
    char msg[1024];
    sl_model *m = NULL;
    float *got = run(path, &mp, NULL, &t, 1, msg, &m);
    CHECKF(got, "%s", msg);
    const char *prof = test_path("%s/routing.profile", test_tmpdir());
    sl_error err = {0};
    sl_status st = sl_model_write_profile(m, prof, &err);
    sl_model_close(m);
    CHECKF(st == SL_OK, "%s", err.msg);
    mp.pin_profile = prof;
    mp.cache_bytes = 8 * 24576;
    sl_model *m2 = NULL;
    float *pinned = run(path, &mp, NULL, &t, 1, msg, &m2);
    if (!pinned) free(got);
    CHECKF(pinned, "%s", msg);
    sl_stats s2;
    sl_model_stats(m2, &s2);
    sl_model_close(m2);
    int same = !memcmp(got, pinned, (size_t)t.n * 256 * sizeof(float));
    free(got);
    free(pinned);
    CHECK(s2.pinned == 4); /* half of 8 slots */
    CHECK(same);
    mp.pin_profile = "tests/data/qwen3_next/config.json";
    CHECK(sl_model_open(path, &mp, &m2, &err) == SL_EFORMAT && strstr(err.msg, "profile"));
}

/* The read-ahead of a layer-major prefill (the next layer's predicted experts, read while this layer runs),
 * through the model, on every fixture: bitwise the resident logits; the reads it starts are counted as
 * prefetch reads and used. Then with faults in those reads: (a) the first read of an expert the next layer
 * uses fails once, (b) every read of an expert the hint predicts but the prompt never uses fails. Neither
 * fails the evaluation, and the logits stay bitwise the resident ones. */
static sl_status prefill_once(const char *path, const sl_model_params *mp, const io_fault_cfg *fc, const test_toks *t,
                              float *out, sl_stats *st, uint64_t counts[][64], int n_layers) {
    sl_model *m = NULL;
    sl_error err = {0};
    sl_status rc = model_open_ex(path, mp, fc, &m, &err);
    if (rc) return rc;
    sl_session *s = NULL;
    rc = sl_session_new(m, 0, &s);
    if (!rc) rc = sl_session_eval(s, t->tokens, t->n, out, 1);
    sl_model_stats(m, st);
    for (int l = 0; counts && l < n_layers; l++) sl_model_expert_counts(m, l, counts[l], 64, NULL);
    sl_session_free(s);
    sl_model_close(m);
    return rc;
}

FIXTURE_TEST(prefill_read_ahead_is_bitwise_and_its_faults_are_quiet) {
    const char *path;
    test_toks t;
    slc_file f;
    OPEN_FIXTURE(arg, &path, &t, &f);
    const int L = f.cfg.n_layers, E = (int)f.h.n_experts;
    uint64_t total = f.h.expert_len;
    int moe[64], n_moe = 0;
    for (int l = 0; l < L && n_moe < 64; l++)
        if (f.cfg.layer_moe[l]) moe[n_moe++] = l;
    if (t.n <= 64 || n_moe < 2 || E > 64 || L > 64) { /* a one-chunk micro-batch, or nothing to read ahead */
        slc_close(&f);
        return;
    }
    const size_t bytes = (size_t)t.n * 256 * sizeof(float);
    float *ref = malloc(bytes), *got = malloc(bytes);
    sl_model_params rp = sl_model_params_default();
    rp.resident = 1;
    sl_stats st;
    CHECK(prefill_once(path, &rp, NULL, &t, ref, &st, NULL, 0) == SL_OK);
    sl_model_params mp = sl_model_params_default(); /* prefetch auto: a chunk's hints act from the start */
    mp.cache_bytes = total;
    static uint64_t counts[64][64];
    memset(counts, 0, sizeof counts);
    for (size_t i = 0; i < bytes / sizeof(float); i++) got[i] = NAN;
    sl_status rc = prefill_once(path, &mp, NULL, &t, got, &st, counts, L);
    int same = rc == SL_OK && !memcmp(got, ref, bytes);
    if (!same) { free(ref); free(got); slc_close(&f); }
    CHECKF(same, "status %d: streamed with read-ahead differs from resident", rc);
    if (st.prefetch_reads == 0 || st.prefetch_used == 0) { free(ref); free(got); slc_close(&f); }
    CHECKF(st.prefetch_reads > 0 && st.prefetch_used > 0, "no read-ahead: %llu prefetch reads, %llu used",
           (unsigned long long)st.prefetch_reads, (unsigned long long)st.prefetch_used);
    /* (a) an expert of the last MoE layer that the prompt uses; (b) one it never uses, when the layer before
     * used >= 90% of its experts (then the hint is every expert, so that one is read ahead too) */
    int la = moe[n_moe - 1], ea = -1, eb = -1, used_before = 0;
    for (int e = 0; e < E; e++) {
        if (counts[la][e] && ea < 0) ea = e;
        if (!counts[la][e] && eb < 0) eb = e;
        used_before += counts[moe[n_moe - 2]][e] > 0;
    }
    if (10 * used_before < 9 * E) eb = -1;
    printf("     %llu read ahead, %llu used; failing layer %d expert %d (used)%s\n", (unsigned long long)st.prefetch_reads,
           (unsigned long long)st.prefetch_used, la, ea, eb >= 0 ? " and one never used" : "");
    for (int c = 0; c < 2; c++) {
        int e = c ? eb : ea;
        if (e < 0) continue;
        io_fault_cfg fc;
        memset(&fc, 0, sizeof fc);
        fc.only_off = slc_expert_offset(&f, n_moe - 1, e);
        fc.fail_every = 1;
        fc.max_faults = c ? 0 : 1; /* (b): every read of it fails */
        for (size_t i = 0; i < bytes / sizeof(float); i++) got[i] = NAN;
        rc = prefill_once(path, &mp, &fc, &t, got, &st, NULL, 0);
        same = rc == SL_OK && !memcmp(got, ref, bytes);
        if (!same) { free(ref); free(got); slc_close(&f); }
        CHECKF(same, "case %c (layer %d expert %d failing): status %d, or logits differ from resident", 'a' + c, la, e, rc);
    }
    free(ref);
    free(got);
    slc_close(&f);
}

/* Long inputs run layer-major (each expert read once per layer for the whole chunk): bitwise the same
 * logits as micro-batches through all layers, streamed or resident, and far fewer expert reads. */
FIXTURE_TEST(layer_major_prefill_is_bitwise_and_reads_less) {
    const char *path;
    test_toks t;
    OPEN_FIXTURE(arg, &path, &t, NULL);
    float *res[3];
    uint64_t reads[3] = {0};
    for (int i = 0; i < 3; i++) { /* 0: wide streamed, 1: micro-batches streamed, 2: wide resident */
        sl_model_params mp = sl_model_params_default();
        mp.resident = i == 2;
        mp.cache_bytes = 1; /* one slot: every expert use is a read */
        mp.prefetch = -1;
        sl_model *m = NULL;
        sl_error err = {0};
        CHECKF(sl_model_open(path, &mp, &m, &err) == SL_OK, "%s", err.msg);
        sl_session *s = NULL;
        sl_session_new(m, 0, &s);
        model_session_set_wide(s, i != 1);
        res[i] = malloc((size_t)t.n * 256 * sizeof(float));
        sl_status st = sl_session_eval(s, t.tokens, t.n, res[i], 1);
        sl_stats ss;
        sl_model_stats(m, &ss);
        reads[i] = ss.reads;
        sl_session_free(s);
        sl_model_close(m);
        CHECK(st == SL_OK);
    }
    size_t bytes = (size_t)t.n * 256 * sizeof(float);
    int same = !memcmp(res[0], res[1], bytes) && !memcmp(res[0], res[2], bytes);
    for (int i = 0; i < 3; i++) free(res[i]);
    CHECK(same);
    CHECKF(reads[0] < reads[1], "layer-major %llu reads, micro-batches %llu", (unsigned long long)reads[0],
           (unsigned long long)reads[1]);
}

/* A read failing in the middle of a layer-major prefill: a clear error, the session unchanged (n_past 0
 * and the DeltaNet state intact: evaluating again gives bitwise a fresh session's logits). */
TEST(layer_major_failure_leaves_session_unchanged) {
    const char *path;
    test_toks t;
    slc_file f;
    OPEN_FIXTURE("qwen3_next", &path, &t, &f);
    io_fault_cfg fc;
    memset(&fc, 0, sizeof fc);
    fc.only_off = slc_expert_offset(&f, 1, 3); /* the last MoE layer (2): earlier layers are done by then */
    fc.fail_every = 1;
    fc.max_faults = 1;
    slc_close(&f);
    sl_model_params mp = sl_model_params_default();
    mp.prefetch = -1;
    sl_model *m = NULL;
    sl_error err = {0};
    CHECK(model_open_ex(path, &mp, &fc, &m, &err) == SL_OK);
    sl_session *s = NULL;
    sl_session_new(m, 0, &s);
    float *a = malloc((size_t)t.n * 256 * sizeof(float)), *b = malloc((size_t)t.n * 256 * sizeof(float));
    int32_t first = 5;
    sl_status st0 = sl_session_eval(s, &first, 1, a, 0); /* some state to protect */
    sl_status st1 = sl_session_eval(s, t.tokens, t.n, a, 1);
    int named = strstr(sl_session_errmsg(s), "expert 3") != NULL;
    int past = sl_session_n_past(s);
    sl_status st2 = sl_session_eval(s, t.tokens, t.n, a, 1); /* the fault fired once: now it works */
    sl_session *fresh = NULL;
    sl_session_new(m, 0, &fresh);
    sl_session_eval(fresh, &first, 1, b, 0);
    sl_status st3 = sl_session_eval(fresh, t.tokens, t.n, b, 1);
    int same = !memcmp(a, b, (size_t)t.n * 256 * sizeof(float));
    free(a);
    free(b);
    sl_session_free(s);
    sl_session_free(fresh);
    sl_model_close(m);
    CHECK(st0 == SL_OK);
    CHECKF(st1 == SL_EIO && named, "status %d", st1);
    CHECKF(past == 1, "n_past %d after a failed evaluation (expected 1)", past);
    CHECK(st2 == SL_OK && st3 == SL_OK);
    CHECK(same);
}

/* gpt-oss's sliding layers keep a ring of window - 1 + 64 KV rows: a 100-token layer-major pass that fails in
 * the last MoE layer has by then written all 100 positions through layer 0's ring (71 rows), over rows the
 * session still needs; they are put back, so evaluating again gives bitwise a fresh session's logits. */
TEST(sliding_ring_failure_leaves_session_unchanged) {
    const char *path;
    test_toks t;
    OPEN_FIXTURE("gpt_oss", &path, &t, NULL);
    const int n0 = 20; /* more than the window (8): the ring's rows matter */
    sl_error err = {0};
    sl_model_params mp = sl_model_params_default();
    mp.prefetch = -1;
    /* the expert to fail: one the last MoE layer (layer 1) uses for the 100 tokens but not for the first 20 */
    uint64_t c20[16], c90[16];
    int fail_e = -1;
    for (int pass = 0; pass < 2; pass++) {
        sl_model *pm = NULL;
        sl_session *ps = NULL;
        CHECK(sl_model_open(path, &mp, &pm, &err) == SL_OK);
        sl_session_new(pm, 0, &ps);
        CHECK(sl_session_eval(ps, t.tokens, pass ? t.n : n0, NULL, 0) == SL_OK);
        CHECK(sl_model_expert_counts(pm, 1, pass ? c90 : c20, 16, NULL) == SL_OK);
        sl_session_free(ps);
        sl_model_close(pm);
    }
    for (int e = 0; e < 16 && fail_e < 0; e++)
        if (!c20[e] && c90[e]) fail_e = e;
    CHECKF(fail_e >= 0, "every expert of layer 1 the 100 tokens choose is chosen by the first 20 too");
    slc_file f;
    CHECK(slc_open(path, &f, &err) == SL_OK);
    io_fault_cfg fc;
    memset(&fc, 0, sizeof fc);
    fc.only_off = slc_expert_offset(&f, 1, fail_e);
    fc.fail_every = 1;
    fc.max_faults = 1;
    slc_close(&f);
    sl_model *m = NULL;
    CHECK(model_open_ex(path, &mp, &fc, &m, &err) == SL_OK);
    sl_session *s = NULL, *fresh = NULL;
    sl_session_new(m, 0, &s);
    sl_session_new(m, 0, &fresh);
    float *a = malloc((size_t)t.n * 256 * sizeof(float)), *b = malloc((size_t)t.n * 256 * sizeof(float));
    sl_status st0 = sl_session_eval(s, t.tokens, n0, a, 0);
    sl_status st1 = sl_session_eval(s, t.tokens, t.n, a, 1);
    int past = sl_session_n_past(s);
    sl_status st2 = sl_session_eval(s, t.tokens, t.n, a, 1); /* the fault fired once: now it works */
    sl_session_eval(fresh, t.tokens, n0, b, 0);
    sl_status st3 = sl_session_eval(fresh, t.tokens, t.n, b, 1);
    int same = !memcmp(a, b, (size_t)t.n * 256 * sizeof(float));
    free(a);
    free(b);
    sl_session_free(s);
    sl_session_free(fresh);
    sl_model_close(m);
    CHECK(st0 == SL_OK);
    CHECKF(st1 == SL_EIO, "status %d (expected the injected I/O error)", st1);
    CHECKF(past == n0, "n_past %d after a failed evaluation (expected %d)", past, n0);
    CHECK(st2 == SL_OK && st3 == SL_OK);
    CHECK(same);
}

/* A budget beyond the expert section is capped at it (a budget beyond available memory is refused at
 * open with a message; that needs a model larger than the test machine's memory, so it is checked by
 * hand: `sluice run -m <26 GB model> --cache 64G` says "expert cache of 24.0 GiB requested but only
 * 21.1 GiB of memory is available"). */
TEST(cache_budget_capped_at_expert_section) {
    const char *path = test_packed("qwen3_next");
    CHECK(path);
    sl_error err = {0};
    sl_model_params mp = sl_model_params_default();
    mp.cache_bytes = (uint64_t)1 << 50;
    sl_model *m = NULL;
    sl_status st = sl_model_open(path, &mp, &m, &err);
    CHECKF(st == SL_OK, "%s", err.msg);
    sl_stats ss;
    sl_model_stats(m, &ss);
    sl_model_close(m);
    CHECK(ss.cache_bytes <= ss.expert_bytes && ss.cache_slots == 32);
}

/* Uniform routing (SL_ROUTING_UNIFORM): streamed == resident bitwise for cache sizes down to one slot,
 * either policy, 1 or 2 threads, whole-prompt and token-by-token feeding; the seed matters, and the
 * routing is not the model's. */
FIXTURE_TEST(uniform_routing_streamed_equals_resident) {
    const char *path;
    test_toks t;
    slc_file f;
    OPEN_FIXTURE(arg, &path, &t, &f);
    uint64_t stride = f.h.expert_stride, total = f.h.expert_len;
    slc_close(&f);
    char msg[1024] = "";
    size_t bytes = (size_t)(t.n + 4) * 256 * sizeof(float);
    sl_model_params rp = sl_model_params_default();
    rp.resident = 1;
    float *model_ref = run(path, &rp, NULL, &t, t.n, msg, NULL);
    CHECKF(model_ref, "%s", msg);
    rp.routing = SL_ROUTING_UNIFORM;
    rp.routing_seed = 7;
    int steps[] = {t.n, 1};
    float *refs[2];
    for (int i = 0; i < 2; i++) {
        refs[i] = run(path, &rp, NULL, &t, steps[i], msg, NULL);
        CHECKF(refs[i], "%s", msg);
    }
    rp.routing_seed = 8;
    float *other = run(path, &rp, NULL, &t, t.n, msg, NULL);
    CHECKF(other, "%s", msg);
    int differs = memcmp(model_ref, refs[0], bytes) && memcmp(other, refs[0], bytes);
    free(model_ref);
    free(other);
    CHECKF(differs, "uniform routing gave the model's logits, or seeds 7 and 8 gave the same");
    uint64_t budgets[] = {stride, 3 * stride, total / 2};
    for (int b = 0; b < 3; b++)
        for (int pol = 0; pol < 2; pol++) {
            sl_model_params mp = sl_model_params_default();
            mp.routing = SL_ROUTING_UNIFORM;
            mp.routing_seed = 7;
            mp.cache_bytes = budgets[b];
            mp.policy = (sl_cache_policy)pol;
            mp.n_threads = 1 + (b + pol) % 2;
            mp.prefetch = pol ? 1 : -1;
            int si = (b + pol) % 2;
            float *got = run(path, &mp, NULL, &t, steps[si], msg, NULL);
            CHECKF(got, "budget %llu policy %d: %s", (unsigned long long)budgets[b], pol, msg);
            int same = !memcmp(got, refs[si], bytes);
            free(got);
            CHECKF(same, "uniform routing, budget %llu policy %d step %d: logits differ from --resident",
                   (unsigned long long)budgets[b], pol, steps[si]);
        }
    for (int i = 0; i < 2; i++) free(refs[i]);
}

/* Uniform routing over random token ids: an LRU cache of a quarter of the experts hits about a quarter
 * of the requests (independent uniform requests: hit rate = slot fraction), and every expert of every
 * MoE layer is chosen about equally often. */
TEST(uniform_routing_hit_rate_is_the_slot_fraction) {
    const char *path;
    slc_file f;
    OPEN_FIXTURE("qwen3_moe", &path, NULL, &f);
    uint64_t stride = f.h.expert_stride, n_blocks = (uint64_t)f.h.n_moe_layers * f.h.n_experts;
    slc_close(&f);
    sl_model_params mp = sl_model_params_default();
    mp.routing = SL_ROUTING_UNIFORM;
    mp.routing_seed = 3;
    mp.prefetch = -1;
    mp.cache_bytes = stride * (n_blocks / 4);
    sl_model *m = NULL;
    sl_error err = {0};
    CHECKF(sl_model_open(path, &mp, &m, &err) == SL_OK, "%s", err.msg);
    sl_session *s = NULL;
    CHECK(sl_session_new(m, 0, &s) == SL_OK);
    int V = sl_model_n_vocab(m), n = 400 < sl_model_n_ctx(m) ? 400 : sl_model_n_ctx(m), rc = 0;
    uint64_t r = 12345;
    for (int i = 0; i < n && !rc; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        int32_t tok = (int32_t)((r >> 33) % (uint64_t)V);
        rc = sl_session_eval(s, &tok, 1, NULL, 0);
    }
    CHECKF(rc == 0, "%s", sl_session_errmsg(s));
    sl_stats st;
    sl_model_stats(m, &st);
    double hit = (double)st.hits / (double)(st.hits + st.misses), frac = (double)st.cache_slots / (double)n_blocks;
    printf("     %d tokens: hit rate %.3f, slot fraction %.3f\n", n, hit, frac);
    CHECKF(fabs(hit - frac) < 0.05, "hit rate %.3f, slot fraction %.3f", hit, frac);
    for (int l = 0; l < sl_model_n_layers(m); l++) {
        uint64_t cnt[1024];
        int E = 0;
        CHECK(sl_model_expert_counts(m, l, cnt, 1024, &E) == SL_OK);
        uint64_t sum = 0, lo = UINT64_MAX, hi = 0;
        for (int e = 0; e < E; e++) {
            sum += cnt[e];
            if (cnt[e] < lo) lo = cnt[e];
            if (cnt[e] > hi) hi = cnt[e];
        }
        double mean = E ? (double)sum / E : 0;
        CHECKF(!E || (lo > 0.6 * mean && hi < 1.4 * mean), "layer %d: expert counts %llu..%llu, mean %.1f", l,
               (unsigned long long)lo, (unsigned long long)hi, mean);
    }
    sl_session_free(s);
    sl_model_close(m);
}
