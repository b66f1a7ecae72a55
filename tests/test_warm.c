/*
 * test_warm.c — sl_model_warm (sluice bench --warm-cache, stream/cache.c cache_warm): the RAM expert cache filled
 * before a timed run without evicting anything, the reads not counted as misses, and the logits unchanged.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/container.h"
#include "sluice.h"
#include "test.h"

/* The prompt's logits [n][*vocab] of a model opened with mp (malloc'd), or NULL with msg; its stats in *st. */
static float *prefill(const char *path, const sl_model_params *mp, int warm, const int32_t *toks, int n, sl_stats *st,
                      int *vocab, char *msg, size_t msglen) {
    sl_model *m = NULL;
    sl_error err = {0};
    if (sl_model_open(path, mp, &m, &err)) {
        snprintf(msg, msglen, "open: %s", err.msg);
        return NULL;
    }
    uint64_t got = 0;
    sl_session *s = NULL;
    const int V = *vocab = sl_model_n_vocab(m);
    float *lg = malloc((size_t)n * V * sizeof(float));
    int rc = warm ? sl_model_warm(m, &got, &err) : 0;
    if (rc) snprintf(msg, msglen, "warm: %s", err.msg);
    if (!rc && (rc = sl_session_new(m, 0, &s))) snprintf(msg, msglen, "session");
    if (!rc && (rc = sl_session_eval(s, toks, n, lg, 1))) snprintf(msg, msglen, "eval: %s", sl_session_errmsg(s));
    sl_model_stats(m, st);
    sl_session_free(s);
    sl_model_close(m);
    if (rc) {
        free(lg);
        return NULL;
    }
    return lg;
}

/* sl_model_warm (sluice bench --warm-cache): every expert read into a RAM cache that holds them all, so the prefill
 * misses nothing and is bitwise --resident; into a smaller one, as many as it has slots (nothing evicted, so a second
 * call reads none); a resident model reads none. */
TEST(warm_fills_the_ram_cache) {
    const char *path;
    test_toks t;
    slc_file f;
    OPEN_FIXTURE("qwen3_moe", &path, &t, &f);
    sl_error err = {0};
    const uint64_t stride = f.h.expert_stride, total = f.h.expert_len, all = (uint64_t)f.h.n_moe_layers * f.h.n_experts;
    slc_close(&f);
    char msg[1024] = "";
    sl_model_params rp = sl_model_params_default();
    rp.resident = 1;
    sl_stats rs;
    int V = 0;
    float *ref = prefill(path, &rp, 0, t.tokens, t.n, &rs, &V, msg, sizeof msg);
    CHECKF(ref, "%s", msg);
    const uint64_t budgets[] = {total, 5 * stride};
    for (int b = 0; b < 2; b++) {
        sl_model_params mp = sl_model_params_default();
        mp.cache_bytes = budgets[b];
        sl_model *m = NULL;
        CHECK(sl_model_open(path, &mp, &m, &err) == SL_OK);
        uint64_t n = 0, again = 1;
        sl_status st = sl_model_warm(m, &n, &err);
        if (!st) st = sl_model_warm(m, &again, &err);
        sl_stats s0;
        sl_model_stats(m, &s0);
        sl_model_close(m);
        CHECKF(st == SL_OK, "warm: %s", err.msg);
        CHECKF(n == (b ? 5 : all) && again == 0 && s0.misses == 0 && s0.reads == n,
               "budget %llu: %llu experts read (then %llu), %llu misses, %llu reads", (unsigned long long)budgets[b],
               (unsigned long long)n, (unsigned long long)again, (unsigned long long)s0.misses, (unsigned long long)s0.reads);
    }
    sl_model_params mp = sl_model_params_default();
    mp.cache_bytes = total;
    sl_stats st;
    float *lg = prefill(path, &mp, 1, t.tokens, t.n, &st, &V, msg, sizeof msg);
    CHECKF(lg, "%s", msg);
    CHECKF(st.misses == 0 && st.hits > 0, "after warming: %llu misses, %llu hits", (unsigned long long)st.misses,
           (unsigned long long)st.hits);
    CHECKF(!memcmp(lg, ref, (size_t)t.n * V * sizeof(float)), "the warmed cache's prefill differs from --resident");
    sl_model *r = NULL;
    CHECK(sl_model_open(path, &rp, &r, &err) == SL_OK);
    uint64_t n = 1;
    CHECK(sl_model_warm(r, &n, &err) == SL_OK && n == 0);
    sl_model_close(r);
    free(lg);
    free(ref);
}
