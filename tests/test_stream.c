/*
 * test_stream.c — the streaming engine: streamed logits are bitwise equal to --resident for every
 * cache size (down to one slot), policy, I/O engine and thread count; faults (EIO, short reads,
 * EINTR, corruption, scrambled completion order) give clear errors or are recovered, and the model
 * stays usable; stats add up.
 */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <xxhash.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "format/container.h"
#include "sluice.h"
#include "stream/cache.h"
#include "stream/io.h"
#include "stream_rig.h"
#include "test.h"

typedef struct {
    int32_t tokens[256];
    int n;
} toks_t;

/* The io_uring engine as an expression, beside stream_rig.h's pread_new and cache_make. */
static io_engine *uring_new(int fd, int depth, sl_error *why) {
    io_engine *e;
    io_uring_engine_new(fd, depth, &e, why);
    return e;
}

static int load_tokens(const char *fixture, toks_t *t) {
    t->n = test_ref_ids(fixture, "tokens", t->tokens, 256);
    return t->n > 0 ? 0 : -1;
}

/* Evaluates the prompt in chunks of `step` (all logits) and then 4 greedy decode steps; returns a
 * malloc'ed [n + 4][V] array or NULL (message in msg). The array is poisoned (NaN) first and every
 * element must have been written, so two runs can only compare equal on values they computed. */
static float *run(const char *path, const sl_model_params *mp, const io_fault_cfg *fault, const toks_t *t, int step,
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
        const float *last = out + (size_t)(t->n + i - 1) * V;
        int32_t best = 0;
        for (int v = 1; v < V; v++)
            if (last[v] > last[best]) best = v;
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
    const char *path = test_packed(arg);
    CHECK(path);
    toks_t t;
    CHECK(load_tokens(arg, &t) == 0);
    slc_file f;
    sl_error err = {0};
    CHECK(slc_open(path, &f, &err) == SL_OK);
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
    const char *path = test_packed(arg);
    CHECK(path);
    toks_t t;
    CHECK(load_tokens(arg, &t) == 0);
    slc_file f;
    sl_error err = {0};
    CHECK(slc_open(path, &f, &err) == SL_OK);
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

static float *reference(const char *path, const toks_t *t, int step) {
    char msg[1024];
    sl_model_params rp = sl_model_params_default();
    rp.resident = 1;
    return run(path, &rp, NULL, t, step, msg, NULL);
}

TEST(faults_recovered_bitwise) {
    const char *path = test_packed("qwen3_next");
    CHECK(path);
    toks_t t;
    CHECK(load_tokens("qwen3_next", &t) == 0);
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
static sl_status step_all(sl_session *s, const toks_t *t, int V, float *out, int *fault_at, sl_status *fault_st,
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

/* One failing read of a chosen expert: a clear error naming layer, expert and offset, and the session
 * unchanged by it (n_past, KV cache, DeltaNet state): evaluating the same token again on the same
 * session and model, then the rest, gives bitwise the resident model's logits token by token; so does
 * a fresh session on that model afterwards (the cache kept no bad block). */
static sl_io_engine one_fault_engine = SL_ENGINE_AUTO; /* the engine under the fault injector */

static int one_fault_tier_slots; /* > 0: a device tier of this many slots over the cache (stream/tier.h) */

static void one_fault(io_fault_cfg *fc, sl_status want, const char *what) {
    const char *path = test_packed("qwen3_5_moe");
    CHECK(path);
    slc_file f;
    sl_error err = {0};
    CHECK(slc_open(path, &f, &err) == SL_OK);
    fc->only_off = slc_expert_offset(&f, 1, 9); /* layer 1, expert 9 */
    const uint64_t stride = f.h.expert_stride;
    char off[32];
    snprintf(off, sizeof off, "%llu", (unsigned long long)fc->only_off);
    slc_close(&f);
    toks_t t;
    CHECK(load_tokens("qwen3_5_moe", &t) == 0);
    float *ref = reference(path, &t, 1);
    CHECK(ref);
    sl_model_params mp = sl_model_params_default();
    mp.prefetch = -1; /* a prefetch could absorb the one fault quietly (failed_prefetch_is_quiet_and_retried) */
    mp.io_engine = one_fault_engine;
    mp.vram_bytes = (uint64_t)one_fault_tier_slots * stride;
    sl_model *m = NULL;
    CHECK(model_open_ex(path, &mp, fc, &m, &err) == SL_OK);
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
    io_fault_cfg fc;
    memset(&fc, 0, sizeof fc);
    fc.fail_every = 1;
    fc.max_faults = 1;
    one_fault(&fc, SL_EIO, "Input/output error");
}

/* The engine's wait() itself fails (its reaper gone): the eval reports it by name and closing the model
 * returns instead of waiting forever for the reads that will never be reported (cache.c drain). */
TEST(broken_engine_wait_fails_the_eval_and_close_returns) {
    const char *path = test_packed("qwen3_5_moe");
    CHECK(path);
    toks_t t;
    CHECK(load_tokens("qwen3_5_moe", &t) == 0);
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
    io_fault_cfg fc;
    memset(&fc, 0, sizeof fc);
    fc.fail_every = 1;
    fc.max_faults = 1;
    one_fault_tier_slots = 8;
    one_fault(&fc, SL_EIO, "Input/output error");
    one_fault_tier_slots = 0;
}

TEST(fault_corruption_caught_by_checksum) {
    io_fault_cfg fc;
    memset(&fc, 0, sizeof fc);
    fc.corrupt_every = 1;
    fc.max_faults = 1;
    one_fault(&fc, SL_ECHECKSUM, "checksum");
}

/* The same with the pread engine, whose workers checksum the block (io_uring's reaper does above). */
TEST(fault_corruption_caught_by_checksum_pread) {
    io_fault_cfg fc;
    memset(&fc, 0, sizeof fc);
    fc.corrupt_every = 1;
    fc.max_faults = 1;
    one_fault_engine = SL_ENGINE_PREAD;
    one_fault(&fc, SL_ECHECKSUM, "checksum");
    one_fault_engine = SL_ENGINE_AUTO;
}

/* Both engines checksum whole reads in their completion path when asked (io_req.hash_len): the hash of
 * the first hash_len bytes, set before the completion is handed out; none for a read not asked for or
 * cut short; the fault injector's corruption shows in the engine's hash. */
TEST(engines_checksum_whole_reads) {
    const char *p = test_path("%s/io-hash.bin", test_tmpdir());
    enum { NB = 4, BL = 65536 };
    uint8_t *data = malloc(NB * BL);
    uint64_t r = 99;
    for (int i = 0; i < NB * BL; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        data[i] = (uint8_t)(r >> 56);
    }
    FILE *fp = fopen(p, "wb");
    CHECK(fp && fwrite(data, 1, NB * BL, fp) == NB * BL);
    fclose(fp);
    for (int kind = 0; kind < 4; kind++) { /* uring, pread, fault(pread) corrupting, fault(pread) short */
        int fd = open(p, O_RDONLY);
        CHECK(fd >= 0);
        sl_error why = {0};
        io_engine *e = kind == 0 ? uring_new(fd, 8, &why) : pread_new(fd, 2, &why);
        if (!e && kind == 0) { /* no io_uring here */
            close(fd);
            continue;
        }
        CHECKF(e, "%s", why.msg);
        io_fault_cfg fc;
        memset(&fc, 0, sizeof fc);
        fc.corrupt_every = kind == 2;
        fc.short_every = kind == 3;
        if (kind >= 2) e = io_fault_engine_new(e, &fc);
        uint8_t *bufs[NB];
        io_req rq[NB];
        for (int b = 0; b < NB; b++) {
            bufs[b] = aligned_alloc(4096, BL);
            rq[b] = (io_req){.off = (uint64_t)b * BL, .len = BL, .buf = bufs[b], .hash_len = b == 3 ? 0 : BL - 100 * b};
            CHECK(e->ops->submit(e, &rq[b]) == 0);
        }
        CHECK(e->ops->flush(e) == 0);
        for (int n = 0; n < NB; n++) {
            io_req *got = NULL;
            CHECK(e->ops->wait(e, &got) == 0 && got);
            int b = (int)(got - rq);
            uint64_t want = XXH3_64bits(data + (size_t)b * BL, got->hash_len);
            if (kind == 3 || b == 3) {
                CHECKF(!got->hashed, "engine %d block %d: hashed a read %s", kind, b, b == 3 ? "not asked for" : "cut short");
                continue;
            }
            CHECKF(got->res == BL && got->hashed, "engine %d block %d: res %lld hashed %d", kind, b, (long long)got->res,
                   got->hashed);
            CHECKF(kind == 2 ? got->hash != want && got->hash == XXH3_64bits(bufs[b], got->hash_len) : got->hash == want,
                   "engine %d block %d: hash %016llx, data's %016llx", kind, b, (unsigned long long)got->hash,
                   (unsigned long long)want);
        }
        io_destroy(e);
        close(fd);
        for (int b = 0; b < NB; b++) free(bufs[b]);
    }
    free(data);
}

/* io_uring's chunked chains (io_uring.c): reads cut into 4 KiB pieces dealt into linked chains (3 of them,
 * or as many as the flush's pieces / rounds for rounds 1, 2, 3 and 7, the last chains of one piece besides
 * longer ones) come back whole, once per request, with the data and the checksum of the whole block; a read
 * running past the end of the file reports the bytes before it (the piece at the end short, the pieces after
 * it read nothing or cancelled with their chain), which the cache resumes as any short read; a lone read in
 * pieces (one wave with rounds) likewise. */
TEST(uring_pieces_reassemble) {
    const char *p = test_path("%s/io-pieces.bin", test_tmpdir());
    enum { NB = 4, BL = 65536, TAIL = 1808 };
    const size_t size = (size_t)NB * BL + TAIL;
    uint8_t *data = malloc(size);
    uint64_t r = 7;
    for (size_t i = 0; i < size; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        data[i] = (uint8_t)(r >> 56);
    }
    FILE *fp = fopen(p, "wb");
    CHECK(fp && fwrite(data, 1, size, fp) == size);
    fclose(fp);
    int fd = open(p, O_RDONLY);
    CHECK(fd >= 0);
    sl_error why = {0};
    io_engine *e = uring_new(fd, 8, &why);
    if (!e) { /* no io_uring here */
        close(fd);
        free(data);
        return;
    }
    e->chunk = 4096;
    static const int layouts[][2] = {{3, 0}, {3, 1}, {0, 2}, {0, 3}, {0, 7}}; /* chains, rounds */
    for (int round = 0; round < 10; round++) { /* the engine's piece slots are reused */
        e->chains = layouts[round % 5][0];
        e->rounds = layouts[round % 5][1];
        uint8_t *bufs[NB + 1];
        io_req rq[NB + 1];
        for (int b = 0; b <= NB; b++) {
            bufs[b] = aligned_alloc(4096, BL);
            memset(bufs[b], 0, BL);
            /* block NB starts 8 KiB before the last full block's end: 10000 bytes are left in the file */
            const uint64_t off = b < NB ? (uint64_t)b * BL : (uint64_t)NB * BL - 8192;
            rq[b] = (io_req){.off = off, .len = BL, .buf = bufs[b], .hash_len = b < NB ? BL - 64 * b : BL};
            CHECK(e->ops->submit(e, &rq[b]) == 0);
        }
        CHECK(e->ops->flush(e) == 0);
        for (int n = 0; n <= NB; n++) {
            io_req *got = NULL;
            CHECK(e->ops->wait(e, &got) == 0 && got);
            int b = (int)(got - rq);
            CHECK(b >= 0 && b <= NB);
            if (b == NB) {
                CHECKF(got->res == 8192 + TAIL && !got->hashed, "past the end: res %lld hashed %d (want %d, none)",
                       (long long)got->res, got->hashed, 8192 + TAIL);
                CHECK(memcmp(bufs[b], data + (size_t)NB * BL - 8192, 8192 + TAIL) == 0);
                continue;
            }
            CHECKF(got->res == BL && got->hashed && got->hash == XXH3_64bits(data + (size_t)b * BL, got->hash_len),
                   "round %d block %d: res %lld hashed %d", round, b, (long long)got->res, got->hashed);
            CHECKF(memcmp(bufs[b], data + (size_t)b * BL, BL) == 0, "round %d block %d: the pieces' data differ", round, b);
        }
        /* a lone read: block 2 again, and the one past the end */
        for (int b = 2; b <= NB; b += NB - 2) {
            memset(bufs[b], 0, BL);
            rq[b].res = 0;
            CHECK(e->ops->submit(e, &rq[b]) == 0 && e->ops->flush(e) == 0);
            io_req *got = NULL;
            CHECK(e->ops->wait(e, &got) == 0 && got == &rq[b]);
            const int64_t want = b < NB ? BL : 8192 + TAIL;
            CHECKF(got->res == want && got->hashed == (b < NB), "round %d lone block %d: res %lld hashed %d", round, b,
                   (long long)got->res, got->hashed);
            CHECK(memcmp(bufs[b], data + (size_t)rq[b].off, (size_t)want) == 0);
        }
        for (int b = 0; b <= NB; b++) free(bufs[b]);
    }
    io_destroy(e);
    close(fd);
    free(data);
}

/* io_uring's thread submits what the caller hands it (io_uring.c): several flushes handed over before the
 * first wait are each submitted, in pieces of several hash slices (64 KiB) dealt into chains, and every read
 * comes back once, whole, with the checksum of its block; the engine is then destroyed with nothing in flight
 * and made again (its thread and ring end and start cleanly), three times. */
TEST(uring_thread_submits_handed_flushes) {
    const char *p = test_path("%s/io-handoff.bin", test_tmpdir());
    enum { NB = 6, BL = 512 << 10, PER_FLUSH = 2 };
    uint8_t *data = malloc((size_t)NB * BL);
    uint64_t r = 11;
    for (size_t i = 0; i < (size_t)NB * BL; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        data[i] = (uint8_t)(r >> 56);
    }
    FILE *fp = fopen(p, "wb");
    CHECK(fp && fwrite(data, 1, (size_t)NB * BL, fp) == (size_t)NB * BL);
    fclose(fp);
    uint8_t *bufs[NB];
    for (int b = 0; b < NB; b++) bufs[b] = aligned_alloc(4096, BL);
    for (int life = 0; life < 3; life++) {
        int fd = open(p, O_RDONLY);
        CHECK(fd >= 0);
        sl_error why = {0};
        io_engine *e = uring_new(fd, 8, &why);
        if (!e) { /* no io_uring here */
            close(fd);
            break;
        }
        e->chunk = 128 << 10; /* 4 pieces a block, 2 hash slices a piece */
        e->rounds = 2;
        io_req rq[NB];
        for (int b = 0; b < NB; b++) {
            memset(bufs[b], 0, BL);
            rq[b] = (io_req){.off = (uint64_t)b * BL, .len = BL, .buf = bufs[b], .hash_len = BL - 4096 * b};
            CHECK(e->ops->submit(e, &rq[b]) == 0);
            if (b % PER_FLUSH == PER_FLUSH - 1) CHECK(e->ops->flush(e) == 0);
        }
        int seen[NB] = {0};
        for (int n = 0; n < NB; n++) {
            io_req *got = NULL;
            CHECK(e->ops->wait(e, &got) == 0 && got);
            const int b = (int)(got - rq);
            CHECK(b >= 0 && b < NB && !seen[b]);
            seen[b] = 1;
            CHECKF(got->res == BL && got->hashed && got->hash == XXH3_64bits(data + (size_t)b * BL, got->hash_len),
                   "life %d block %d: res %lld hashed %d", life, b, (long long)got->res, got->hashed);
            CHECKF(memcmp(bufs[b], data + (size_t)b * BL, BL) == 0, "life %d block %d: the data differ", life, b);
        }
        io_destroy(e);
        close(fd);
    }
    for (int b = 0; b < NB; b++) free(bufs[b]);
    free(data);
}

/* Device occupancy (io.h busy): a read counts from its submission to its completion, so the busy time lies
 * within the wall time around the reads, the depth integral is at least the busy time, and at most as many
 * reads as were in the device at once (pread: its worker count) times it; nothing moves while idle. */
TEST(engines_report_occupancy) {
    const char *p = test_path("%s/io-busy.bin", test_tmpdir());
    enum { NB = 6, BL = 1 << 20 };
    uint8_t *data = calloc(NB, BL);
    FILE *fp = fopen(p, "wb");
    CHECK(data && fp && fwrite(data, 1, (size_t)NB * BL, fp) == (size_t)NB * BL);
    fclose(fp);
    free(data);
    for (int kind = 0; kind < 3; kind++) { /* uring, pread (2 workers), fault(pread) */
        int fd = open(p, O_RDONLY);
        CHECK(fd >= 0);
        sl_error why = {0};
        io_engine *e = kind == 0 ? uring_new(fd, 8, &why) : pread_new(fd, 2, &why);
        if (!e && kind == 0) {
            close(fd);
            continue;
        }
        CHECKF(e, "%s", why.msg);
        io_fault_cfg fc;
        memset(&fc, 0, sizeof fc);
        if (kind == 2) e = io_fault_engine_new(e, &fc);
        CHECK(e->ops->busy);
        uint64_t b0, d0, b1, d1, b2, d2;
        e->ops->busy(e, &b0, &d0);
        CHECKF(b0 == 0 && d0 == 0, "engine %d: busy %llu ns before any read", kind, (unsigned long long)b0);
        uint8_t *buf = aligned_alloc(4096, (size_t)NB * BL);
        io_req rq[NB];
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int b = 0; b < NB; b++) {
            rq[b] = (io_req){.off = (uint64_t)b * BL, .len = BL, .buf = buf + (size_t)b * BL};
            CHECK(e->ops->submit(e, &rq[b]) == 0);
        }
        CHECK(e->ops->flush(e) == 0);
        for (int n = 0; n < NB; n++) {
            io_req *got = NULL;
            CHECK(e->ops->wait(e, &got) == 0 && got && got->res == BL);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const uint64_t wall = (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000ll + (t1.tv_nsec - t0.tv_nsec));
        e->ops->busy(e, &b1, &d1);
        const uint64_t most = kind == 0 ? NB : 2;
        CHECKF(b1 > 0 && b1 <= wall && d1 >= b1 && d1 <= most * b1,
               "engine %d: busy %llu ns, depth integral %llu ns, wall %llu ns", kind, (unsigned long long)b1,
               (unsigned long long)d1, (unsigned long long)wall);
        struct timespec nap = {0, 20 * 1000 * 1000};
        nanosleep(&nap, NULL);
        e->ops->busy(e, &b2, &d2);
        CHECKF(b2 == b1 && d2 == d1, "engine %d: busy time grew while idle (%llu -> %llu ns)", kind,
               (unsigned long long)b1, (unsigned long long)b2);
        io_destroy(e);
        close(fd);
        free(buf);
    }
}

TEST(stats_add_up) {
    const char *path = test_packed("qwen3_next");
    CHECK(path);
    toks_t t;
    CHECK(load_tokens("qwen3_next", &t) == 0);
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
    const char *path = test_packed("qwen3_next");
    CHECK(path);
    toks_t t;
    CHECK(load_tokens("qwen3_next", &t) == 0);
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

/* A prefetch read that fails (I/O error or corruption) is never reported by itself: unclaimed, it is
 * dropped; claimed by a request meanwhile, it is read again as that request's read. Driven through the
 * cache API directly, on a fault that hits only the first read of layer 2 expert 7. */
static int demand(tn_expert_src *src, int layer, int e) {
    int got = -1, rc = src->begin(src->ctx, layer, &e, 1, 0);
    tn_expert ex;
    if (!rc) rc = src->next(src->ctx, &got, &ex);
    if (!rc) src->release(src->ctx, got);
    src->end(src->ctx);
    return rc ? rc : got == e && ex.gate.data ? 0 : -100;
}

TEST(failed_prefetch_is_quiet_and_retried) {
    const char *path = test_packed("qwen3_next");
    CHECK(path);
    for (int k8 = 0; k8 < 8; k8++) { /* kinds 0-3 through pread, 4-7 the same through io_uring's pieces */
        const int kind = k8 % 4;
        slc_file f;
        sl_error err = {0};
        CHECK(slc_open(path, &f, &err) == SL_OK);
        sl_error why = {0};
        io_engine *io = k8 < 4 ? pread_new(f.fd, 2, &why) : uring_new(f.fd, 8, &why);
        if (!io && k8 >= 4) { /* no io_uring here */
            slc_close(&f);
            continue;
        }
        CHECKF(io, "%s", why.msg);
        io->chunk = 4096; /* the 24 KiB blocks in 6 pieces, 3 chains */
        io->chains = 3;
        io_fault_cfg fc;
        memset(&fc, 0, sizeof fc);
        fc.only_off = slc_expert_offset(&f, 1, 7); /* slot 1 = model layer 2 (layer 1 is dense) */
        if (kind % 2) fc.corrupt_every = 1;
        else fc.fail_every = 1;
        fc.max_faults = 1;
        be_backend *be = be_cpu_new(NULL, NULL);
        CHECK(be != NULL);
        cache_cfg cc = {&f, &f.cfg, io_fault_engine_new(io, &fc), 8 * f.h.expert_stride, CACHE_LRU, 1, 0, 2, be};
        cache *c = cache_make(&cc, &why);
        if (!c) {
            slc_close(&f);
            be_close(be);
        }
        CHECKF(c, "%s", why.msg);
        tn_expert_src src = cache_source(c);
        int seven = 7, rc = 0;
        src.prefetch(src.ctx, 2, &seven, 1, 1); /* this read fails or comes back corrupted */
        if (kind >= 2) rc = demand(&src, 2, 5); /* unclaimed: the failure lands while serving expert 5 */
        if (!rc) rc = demand(&src, 2, 7);
        cache_stats st;
        cache_get_stats(c, &st);
        cache_free(c);
        be_close(be);
        slc_close(&f);
        CHECKF(rc == 0, "kind %d: rc %d", k8, rc);
        CHECKF(st.prefetch_failed == 1 && st.prefetch_reads == 1 && st.reads == (kind >= 2 ? 3u : 2u), "kind %d: prefetch failed %llu reads %llu",
               k8, (unsigned long long)st.prefetch_failed, (unsigned long long)st.reads);
    }
}

/* A block corrupted on disk (no fault injector: the bytes the engine reads are the bad ones) is caught by the
 * checksum computed on the I/O engine's own thread: io_uring's reaper, which hashes the pieces as they land
 * (io_uring.c), with the bad byte in the first, a middle or the last of the 6 pieces, and the pread engine's
 * workers. The demand fails with a message naming the file, layer and expert; the block is not kept (asked
 * again it fails again), and a sound block of the same layer is served. */
TEST(corrupt_block_on_disk_caught_on_the_io_thread) {
    const char *src = test_packed("qwen3_next");
    CHECK(src);
    const char *p = test_path("%s/corrupt-piece.sluice", test_tmpdir());
    for (int kind = 0; kind < 4; kind++) { /* io_uring pieces: first, middle, last; pread */
        CHECK(test_copy_file(src, p) == 0);
        slc_file f;
        sl_error err = {0};
        CHECK(slc_open(p, &f, &err) == SL_OK);
        const uint64_t at = kind == 0 ? 5 : kind == 1 ? 2 * 4096 + 100 : f.block_bytes - 1;
        const uint64_t off = slc_expert_offset(&f, 1, 5) + (kind == 3 ? 3 * 4096 : at); /* slot 1 = layer 2 */
        const int layer = f.moe_layers[1];
        slc_close(&f);
        size_t n;
        char *b = test_read(p, &n);
        CHECK(b && off < n);
        b[off] ^= 0x04;
        test_write(p, b, n);
        free(b);
        CHECK(slc_open(p, &f, &err) == SL_OK); /* the header and manifest are sound */
        sl_error why = {0};
        io_engine *io = kind < 3 ? uring_new(f.fd, 8, &why) : pread_new(f.fd, 2, &why);
        if (!io) { /* no io_uring here */
            slc_close(&f);
            continue;
        }
        io->chunk = 4096; /* the 24 KiB blocks in 6 pieces, 3 chains */
        io->chains = 3;
        be_backend *be = be_cpu_new(NULL, NULL);
        CHECK(be != NULL);
        cache_cfg cc = {&f, &f.cfg, io, 8 * f.h.expert_stride, CACHE_LRU, 1, 0, 0, be};
        cache *c = cache_make(&cc, &why);
        CHECKF(c, "%s", why.msg);
        tn_expert_src es = cache_source(c);
        const int bad = demand(&es, 2, 5);
        char msg[600];
        snprintf(msg, sizeof msg, "%s", es.errmsg(es.ctx));
        const int again = demand(&es, 2, 5), good = demand(&es, 2, 4);
        cache_stats st;
        cache_get_stats(c, &st);
        cache_free(c);
        be_close(be);
        slc_close(&f);
        char want[64];
        snprintf(want, sizeof want, "layer %d, expert 5", layer);
        CHECKF(bad == SL_ECHECKSUM && strstr(msg, want) && strstr(msg, p) && strstr(msg, "checksum"),
               "kind %d: rc %d, message: %s", kind, bad, msg);
        CHECKF(again == SL_ECHECKSUM && good == 0, "kind %d: asked again %d, a sound block %d", kind, again, good);
        CHECKF(st.reads == 3 && (kind == 3 || st.engine_hash_ns > 0) && st.verify_ns == 0,
               "kind %d: %llu reads, engine hash %llu ns, caller hash %llu ns", kind, (unsigned long long)st.reads,
               (unsigned long long)st.engine_hash_ns, (unsigned long long)st.verify_ns);
    }
}

/* An ordered (layer-major) request over `list`, with a hint for the next layer given right after begin
 * as the forward pass gives it; every expert must arrive in list order with its data bound. */
static int ordered_run(tn_expert_src *src, int layer, const int *list, int n, int hint_layer, const int *hint, int n_hint) {
    int rc = src->begin(src->ctx, layer, list, n, 1);
    if (!rc && hint) src->prefetch(src->ctx, hint_layer, hint, n_hint, 1);
    for (int i = 0; !rc && i < n; i++) {
        int got = -1;
        tn_expert ex;
        memset(&ex, 0, sizeof ex);
        rc = src->next(src->ctx, &got, &ex);
        if (!rc && (got != list[i] || !ex.gate.data)) rc = -100;
        if (!rc) src->release(src->ctx, got);
    }
    src->end(src->ctx);
    return rc;
}

/* A hint given during an ordered request (the next layer's union of predicted experts) is read while that
 * request runs and once it ends, and the next request finds the blocks as hits. One hinted read fails (an
 * I/O error, or corruption caught by the checksum): the next layer not needing that expert does not
 * notice; needing it, it reads it again on demand. No request fails either way. */
TEST(ordered_hint_read_ahead_and_its_failures_are_quiet) {
    const char *path = test_packed("qwen3_next");
    CHECK(path);
    for (int kind = 0; kind < 4; kind++) {
        slc_file f;
        sl_error err = {0};
        CHECK(slc_open(path, &f, &err) == SL_OK);
        sl_error why = {0};
        /* one worker: reads complete in the order they were submitted, so every count below is exact */
        io_engine *io = pread_new(f.fd, 1, &why);
        CHECKF(io, "%s", why.msg);
        io->depth = 8;
        io_fault_cfg fc;
        memset(&fc, 0, sizeof fc);
        fc.only_off = slc_expert_offset(&f, 1, 7); /* slot 1 = model layer 2 (layer 1 is dense) */
        if (kind % 2) fc.corrupt_every = 1;
        else fc.fail_every = 1;
        fc.max_faults = 1;
        be_backend *be = be_cpu_new(NULL, NULL);
        CHECK(be != NULL);
        cache_cfg cc = {&f, &f.cfg, io_fault_engine_new(io, &fc), 8 * f.h.expert_stride, CACHE_LRU, 1, 0, 1, be};
        cache *c = cache_make(&cc, &why);
        if (!c) {
            slc_close(&f);
            be_close(be);
        }
        CHECKF(c, "%s", why.msg);
        tn_expert_src src = cache_source(c);
        const int l1[3] = {0, 3, 5}, hint[3] = {5, 7, 9}, l2[3] = {5, 7, 9}, l2_skip[2] = {5, 9};
        int rc = ordered_run(&src, 0, l1, 3, 2, hint, 3);
        cache_stats before;
        cache_get_stats(c, &before); /* the hint's reads are out before layer 2 asks */
        if (!rc) rc = kind >= 2 ? ordered_run(&src, 2, l2, 3, 0, NULL, 0) : ordered_run(&src, 2, l2_skip, 2, 0, NULL, 0);
        cache_stats st;
        cache_get_stats(c, &st);
        cache_free(c);
        be_close(be);
        slc_close(&f);
        CHECKF(rc == 0, "kind %d: rc %d", kind, rc);
        CHECKF(before.prefetch_reads == 3 && before.misses == 3, "kind %d: %llu hint reads, %llu misses before layer 2",
               kind, (unsigned long long)before.prefetch_reads, (unsigned long long)before.misses);
        /* layer 2 claims 5, then waits for 9 (or for 7, claimed: read again) behind the failed read of 7 */
        const unsigned want_hits = kind >= 2 ? 3u : 2u;
        CHECKF(st.prefetch_failed == 1 && st.reads == (kind >= 2 ? 7u : 6u) && st.hits == want_hits && st.misses == 3 &&
                   st.prefetch_used == want_hits,
               "kind %d: prefetch failed %llu, reads %llu, hits %llu, misses %llu, hinted blocks used %llu", kind,
               (unsigned long long)st.prefetch_failed, (unsigned long long)st.reads, (unsigned long long)st.hits,
               (unsigned long long)st.misses, (unsigned long long)st.prefetch_used);
    }
}

/* The read-ahead of a layer-major prefill (the next layer's predicted experts, read while this layer runs),
 * through the model, on every fixture: bitwise the resident logits; the reads it starts are counted as
 * prefetch reads and used. Then with faults in those reads: (a) the first read of an expert the next layer
 * uses fails once, (b) every read of an expert the hint predicts but the prompt never uses fails. Neither
 * fails the evaluation, and the logits stay bitwise the resident ones. */
static sl_status prefill_once(const char *path, const sl_model_params *mp, const io_fault_cfg *fc, const toks_t *t,
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
    const char *path = test_packed(arg);
    CHECK(path);
    toks_t t;
    CHECK(load_tokens(arg, &t) == 0);
    slc_file f;
    sl_error err = {0};
    CHECK(slc_open(path, &f, &err) == SL_OK);
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
    const char *path = test_packed(arg);
    CHECK(path);
    toks_t t;
    CHECK(load_tokens(arg, &t) == 0);
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
    const char *path = test_packed("qwen3_next");
    CHECK(path);
    toks_t t;
    CHECK(load_tokens("qwen3_next", &t) == 0);
    slc_file f;
    sl_error err = {0};
    CHECK(slc_open(path, &f, &err) == SL_OK);
    io_fault_cfg fc;
    memset(&fc, 0, sizeof fc);
    fc.only_off = slc_expert_offset(&f, 1, 3); /* the last MoE layer (2): earlier layers are done by then */
    fc.fail_every = 1;
    fc.max_faults = 1;
    slc_close(&f);
    sl_model_params mp = sl_model_params_default();
    mp.prefetch = -1;
    sl_model *m = NULL;
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
    const char *path = test_packed("gpt_oss");
    CHECK(path);
    toks_t t;
    CHECK(load_tokens("gpt_oss", &t) == 0);
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
    const char *path = test_packed(arg);
    CHECK(path);
    toks_t t;
    CHECK(load_tokens(arg, &t) == 0);
    slc_file f;
    sl_error err = {0};
    CHECK(slc_open(path, &f, &err) == SL_OK);
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
    const char *path = test_packed("qwen3_moe");
    CHECK(path);
    slc_file f;
    sl_error err = {0};
    CHECK(slc_open(path, &f, &err) == SL_OK);
    uint64_t stride = f.h.expert_stride, n_blocks = (uint64_t)f.h.n_moe_layers * f.h.n_experts;
    slc_close(&f);
    sl_model_params mp = sl_model_params_default();
    mp.routing = SL_ROUTING_UNIFORM;
    mp.routing_seed = 3;
    mp.prefetch = -1;
    mp.cache_bytes = stride * (n_blocks / 4);
    sl_model *m = NULL;
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

/* The two hint tests' cache: the qwen3_next fixture's experts through the pread engine, 8 blocks, LRU, hints
 * in the default mode (1: act on guesses once they prove accurate), checksums on. On a failure the test has
 * failed and h->c is NULL. */
typedef struct {
    slc_file f;
    be_backend *be;
    cache *c;
    tn_expert_src src;
} hint_rig;

static void hint_rig_open(hint_rig *h) {
    memset(h, 0, sizeof *h);
    const char *path = test_packed("qwen3_next");
    CHECK(path);
    sl_error err = {0};
    CHECK(slc_open(path, &h->f, &err) == SL_OK);
    sl_error why = {0};
    io_engine *io = pread_new(h->f.fd, 4, &why);
    CHECKF(io, "%s", why.msg);
    h->be = be_cpu_new(NULL, NULL);
    CHECK(h->be != NULL);
    cache_cfg cc = {&h->f, &h->f.cfg, io, 8 * h->f.h.expert_stride, CACHE_LRU, 1, 0, 1, h->be};
    h->c = cache_make(&cc, &why);
    CHECKF(h->c, "%s", why.msg);
    h->src = cache_source(h->c);
}

static void hint_rig_close(hint_rig *h) {
    cache_free(h->c);
    be_close(h->be);
    slc_close(&h->f);
}

/* A layer-major pass hints its first MoE layer before that layer's mixer, with no request active
 * (forward.c eval_multi, moe.c fwd_moe_hint_first): in the default mode (1: act on hints once they prove
 * accurate) that hint is acted on at once, as the next layer's hint during a layer-major request is, and the
 * ordered request that follows claims the blocks it read. Expert 7's read is the request's own. */
TEST(hint_between_requests_reads_ahead) {
    hint_rig h;
    hint_rig_open(&h);
    if (!h.c) return;
    cache *c = h.c;
    tn_expert_src src = h.src;
    const int hint[2] = {3, 5}, want[3] = {3, 5, 7};
    src.prefetch(src.ctx, 2, hint, 2, 1); /* slot 1 = model layer 2 (layer 1 is dense) */
    cache_stats before;
    cache_get_stats(c, &before);
    int rc = src.begin(src.ctx, 2, want, 3, 1), bad = 0;
    for (int i = 0; i < 3 && !rc; i++) {
        int got = -1;
        tn_expert ex;
        memset(&ex, 0, sizeof ex);
        rc = src.next(src.ctx, &got, &ex);
        if (!rc) {
            bad += got != want[i] || !ex.gate.data;
            src.release(src.ctx, got);
        }
    }
    src.end(src.ctx);
    cache_stats st;
    cache_get_stats(c, &st);
    hint_rig_close(&h);
    CHECKF(rc == 0 && bad == 0, "rc %d, %d experts out of order or empty", rc, bad);
    CHECKF(before.prefetch_reads == 2 && st.prefetch_reads == 2 && st.prefetch_used == 2 && st.reads == 3,
           "hint reads %llu before the request, %llu after, used %llu, reads %llu",
           (unsigned long long)before.prefetch_reads, (unsigned long long)st.prefetch_reads,
           (unsigned long long)st.prefetch_used, (unsigned long long)st.reads);
}

/* A decode step's router guess that comes between requests (a device tier that served the whole step from
 * its slots opens none here) is a guess, not a layer-major union: in the default mode (1: act on guesses
 * once they prove accurate) it starts no read before any guess has been scored, whereas the same experts
 * hinted as an ordered union are read at once (hint_between_requests_reads_ahead). */
TEST(decode_guess_between_requests_is_scored_not_read) {
    hint_rig h;
    hint_rig_open(&h);
    if (!h.c) return;
    cache *c = h.c;
    tn_expert_src src = h.src;
    const int hint[2] = {3, 5};
    src.prefetch(src.ctx, 2, hint, 2, 0);
    cache_stats guess;
    cache_get_stats(c, &guess);
    src.prefetch(src.ctx, 2, hint, 2, 1);
    cache_stats ordered;
    cache_get_stats(c, &ordered);
    hint_rig_close(&h);
    CHECKF(guess.prefetch_reads == 0 && guess.reads == 0 && ordered.prefetch_reads == 2,
           "after the guess %llu hint reads (%llu reads), after the ordered hint %llu",
           (unsigned long long)guess.prefetch_reads, (unsigned long long)guess.reads,
           (unsigned long long)ordered.prefetch_reads);
}

