/*
 * test_wide.c — the int8 kernels' wide paths inside a forward pass. Every transformers fixture is 64 wide,
 * below the 128 columns of the AVX-512 several-token q4 kernel (kernels_avx512.c i8p_mm) and of the decode
 * kernels' full-width main loop, so the fixture tests never run them. Here `sluice synth` writes models of
 * the tiny-wide shapes (qwen3_moe and qwen3_next's: hidden 256, experts 192 wide) at q4 and q8, groups 32
 * and 64, and on each the contract of docs/QUANT.md / kernels.h holds bitwise over a 48-token prefill and
 * 8 decode steps (random ids, as sluice bench feeds a synthetic model: random weights' greedy choice loops):
 *  - streamed through the smallest cache the model allows == resident;
 *  - 1 thread == 2 threads;
 *  - on the attention-only shape, the prompt in one pass == token by token == 7-token chunks (kernels.h: an
 *    output's arithmetic depends only on the column count, never on n_tok, so the several-token kernels equal
 *    the one-token ones). Not on DeltaNet's: its chunked prefill and its recurrence differ by float rounding
 *    already (docs/QUANT.md), so there token by token is compared with itself, streamed against resident;
 *  - the sequence in an sl_batch_eval with two others == alone.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "format/synth.h"
#include "sluice.h"
#include "test.h"

enum { NP = 48, ND = 8, NT = NP + ND };

typedef struct {
    const char *shape;
    sl_quant q;
    int group;
} wide_model;

static const wide_model models[] = {
    {"tiny-wide", SL_QUANT_Q4, 32},      {"tiny-wide", SL_QUANT_Q4, 64},      {"tiny-wide", SL_QUANT_Q8, 32},
    {"tiny-wide", SL_QUANT_Q8, 64},      {"tiny-wide-next", SL_QUANT_Q4, 32}, {"tiny-wide-next", SL_QUANT_Q4, 64},
    {"tiny-wide-next", SL_QUANT_Q8, 32}, {"tiny-wide-next", SL_QUANT_Q8, 64},
};
enum { NM = sizeof models / sizeof *models };

static const char *model_path(int i) {
    static char paths[NM][512];
    if (!paths[i][0]) {
        const wide_model *w = &models[i];
        snprintf(paths[i], sizeof paths[i], "%s/%s-%s-g%d.sluice", test_tmpdir(), w->shape,
                 w->q == SL_QUANT_Q4 ? "q4" : "q8", w->group);
        sl_error err = {0};
        if (synth_write(w->shape, 0, w->q, w->group, 0, 1, paths[i], NULL, NULL, &err)) {
            fprintf(stderr, "    synth %s: %s\n", paths[i], err.msg);
            paths[i][0] = 0;
            return NULL;
        }
    }
    return paths[i];
}

static sl_model *open_wide(const char *path, int streamed, int threads) {
    sl_model_params mp = sl_model_params_default();
    mp.resident = !streamed;
    mp.n_threads = threads;
    if (streamed) mp.cache_bytes = 1; /* the smallest cache the model allows: a few slots */
    mp.prefetch = -1;
    sl_model *m = NULL;
    sl_error err = {0};
    if (sl_model_open(path, &mp, &m, &err)) fprintf(stderr, "    open %s: %s\n", path, err.msg);
    return m;
}

/* Logits [NT][V] of toks: the prompt NP in chunks of `step`, then one token at a time. NULL on failure. */
static float *run_seq(sl_model *m, const int32_t *toks, int step) {
    const int V = sl_model_n_vocab(m);
    float *out = malloc((size_t)NT * (size_t)V * sizeof(float));
    sl_session *s = NULL;
    if (!out || sl_session_new(m, 0, &s)) {
        free(out);
        return NULL;
    }
    int rc = 0;
    for (int i = 0; !rc && i < NT;) {
        const int k = i < NP ? (NP - i < step ? NP - i : step) : 1;
        rc = sl_session_eval(s, toks + i, k, out + (size_t)i * (size_t)V, 1);
        if (rc) fprintf(stderr, "    eval: %s\n", sl_session_errmsg(s));
        i += k;
    }
    sl_session_free(s);
    if (rc) free(out);
    return rc ? NULL : out;
}

/* The same sequence in sl_batch_eval beside two others (a 30-token prompt, a 1-token step after a 12-token
 * history): the prompt as one batch step, then each decode step batched with one token of each other. */
static float *run_batched(sl_model *m, const int32_t *toks) {
    const int V = sl_model_n_vocab(m);
    float *out = malloc((size_t)NT * (size_t)V * sizeof(float)), *junk = malloc((size_t)40 * (size_t)V * sizeof(float));
    sl_session *s[3] = {0};
    int32_t other[2][64];
    for (int j = 0; j < 64; j++) other[0][j] = (int32_t)((j * 37 + 5) % V), other[1][j] = (int32_t)((j * 101 + 3) % V);
    int rc = !out || !junk;
    for (int i = 0; !rc && i < 3; i++) rc = sl_session_new(m, 0, &s[i]);
    if (!rc) rc = sl_session_eval(s[2], other[1], 12, NULL, 0);
    int p1 = 0, p2 = 12;
    for (int i = 0; !rc && i < NT;) {
        const int k = i < NP ? NP : 1, k1 = p1 == 0 ? 30 : 1;
        sl_batch_item it[3] = {{s[1], other[0] + p1, k1, junk, 1},
                               {s[0], toks + i, k, out + (size_t)i * (size_t)V, 1},
                               {s[2], other[1] + p2, 1, NULL, 0}};
        rc = sl_batch_eval(m, it, 3);
        if (rc) fprintf(stderr, "    batch: %s\n", sl_model_errmsg(m));
        i += k, p1 += k1, p2 += 1;
    }
    for (int i = 0; i < 3; i++) sl_session_free(s[i]);
    free(junk);
    if (rc) free(out);
    return rc ? NULL : out;
}

/* The first position whose logits differ from ref's bitwise, or -1. */
static int first_diff(const float *a, const float *ref, int V) {
    if (!a) return -2;
    for (int t = 0; t < NT; t++)
        if (memcmp(a + (size_t)t * (size_t)V, ref + (size_t)t * (size_t)V, (size_t)V * sizeof(float))) return t;
    return -1;
}

TEST(wide_models_streamed_batched_threads_prefill_bitwise) {
    for (int i = 0; i < NM; i++) {
        const char *path = model_path(i);
        CHECKF(path, "synth of model %d failed", i);
        int32_t toks[NT];
        for (int j = 0; j < NT; j++) toks[j] = (int32_t)((j * 2654435761u >> 7) % 512u);
        sl_model *m1 = open_wide(path, 0, 1), *m2 = open_wide(path, 0, 2), *ms = open_wide(path, 1, 2);
        CHECK(m1 && m2 && ms);
        const int V = sl_model_n_vocab(m1);
        const int deltanet = !strcmp(models[i].shape, "tiny-wide-next");
        float *ref = run_seq(m1, toks, NP); /* resident, 1 thread, the prompt in one pass */
        float *thr = run_seq(m2, toks, NP), *one = run_seq(m2, toks, 1), *chunk = run_seq(m2, toks, 7);
        float *str = run_seq(ms, toks, NP), *str1 = run_seq(ms, toks, 1);
        float *bat = run_batched(m2, toks), *bats = run_batched(ms, toks);
        sl_model_close(m1), sl_model_close(m2), sl_model_close(ms);
        CHECK(ref);
        int d[7] = {first_diff(thr, ref, V), first_diff(one, ref, V),  first_diff(chunk, ref, V), first_diff(str, ref, V),
                    first_diff(str1, one, V), first_diff(bat, ref, V), first_diff(bats, ref, V)};
        double lo = 0, hi = 0; /* the logits are not degenerate: finite, spread, and differ between positions */
        int finite = 1, moved = 0;
        for (size_t j = 0; j < (size_t)NT * (size_t)V; j++) {
            finite &= isfinite(ref[j]) != 0;
            lo = ref[j] < lo ? ref[j] : lo, hi = ref[j] > hi ? ref[j] : hi;
            moved += j >= (size_t)V && ref[j] != ref[j - (size_t)V];
        }
        free(ref), free(thr), free(one), free(chunk), free(str), free(str1), free(bat), free(bats);
        const char *name = test_path("%s q%d group %d", models[i].shape, models[i].q == SL_QUANT_Q4 ? 4 : 8, models[i].group);
        CHECKF(d[0] == -1, "%s: 2 threads differ from 1 at position %d", name, d[0]);
        CHECKF(d[1] == -1 || (deltanet && d[1] >= 0), "%s: token by token differs from the prompt in one pass at position %d", name, d[1]);
        CHECKF(d[2] == -1 || (deltanet && d[2] >= 0), "%s: 7-token chunks differ from the prompt in one pass at position %d", name, d[2]);
        CHECKF(d[3] == -1, "%s: streamed differs from resident at position %d", name, d[3]);
        CHECKF(d[4] == -1, "%s: streamed token by token differs from resident token by token at position %d", name, d[4]);
        CHECKF(d[5] == -1, "%s: in a batch differs from alone at position %d", name, d[5]);
        CHECKF(d[6] == -1, "%s: streamed in a batch differs from resident alone at position %d", name, d[6]);
        CHECKF(finite && hi - lo > 1.0 && hi - lo < 1e4 && moved > NT * V / 2, "%s: degenerate logits (finite %d, range %g, %d moved)",
               name, finite, hi - lo, moved);
    }
}
