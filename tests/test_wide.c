/*
 * test_wide.c — the int8 kernels' wide paths (kernels_avx512_i8p.c's q4 prefill needs 128 columns; the fixtures
 * are 64 wide) in a forward pass of synth's tiny-wide shapes: 48 prompt tokens, 8 decode steps. Bitwise: 2 threads
 * == 1, streamed == resident, batched == alone, prompt in one pass == token by token == 7-token chunks
 * (kernels.h) but with DeltaNet (its chunked prefill and recurrence differ already: docs/QUANT.md).
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "format/container.h"
#include "format/synth.h"
#include "kernels/kernels.h"
#include "quant/quant.h"
#include "sluice.h"
#include "test.h"
#include "util/fileio.h"

enum { NP = 48, NT = NP + 8 };

/* q4 at both groups where a broken q4 prefill kernel (kernels_avx512_i8p.c) shows as prefill != token by token */
static const struct {
    const char *shape;
    sl_quant q;
    int group;
} models[] = {{"tiny-wide", SL_QUANT_Q4, 32},      {"tiny-wide", SL_QUANT_Q4, 64},
              {"tiny-wide", SL_QUANT_Q8, 32},      {"tiny-wide-next", SL_QUANT_Q4, 64},
              {"tiny-wide-next", SL_QUANT_Q8, 64}};

static sl_model *open_wide(const char *path, int streamed, int threads) {
    sl_model_params mp = sl_model_params_default();
    mp.resident = !streamed;
    mp.n_threads = threads;
    mp.cache_bytes = streamed; /* 1: the smallest cache the model allows */
    mp.prefetch = -1;
    sl_model *m = NULL;
    sl_error err = {0};
    if (sl_model_open(path, &mp, &m, &err)) fprintf(stderr, "    open %s: %s\n", path, err.msg);
    return m;
}

/* Logits [NT][V]: the prompt in chunks of `step`, then one token a step; with batch, each step in an
 * sl_batch_eval beside a 30-token prompt and its decode, and a decode after 12 tokens. */
static float *run_seq(sl_model *m, const int32_t *toks, int step, int batch) {
    if (!m) return NULL;
    const int V = sl_model_n_vocab(m);
    float *out = malloc((size_t)NT * V * sizeof(float)), *junk = malloc((size_t)30 * V * sizeof(float));
    sl_session *s[3] = {0};
    int32_t o[2][64];
    for (int j = 0; j < 64; j++) o[0][j] = (j * 37 + 5) % V, o[1][j] = (j * 101 + 3) % V;
    int rc = !out || !junk;
    for (int i = 0; !rc && i < 3; i++) rc = sl_session_new(m, 0, &s[i]);
    if (!rc && batch) rc = sl_session_eval(s[2], o[1], 12, NULL, 0);
    for (int i = 0, p = 0; !rc && i < NT; p++) {
        const int k = i < NP ? (NP - i < step ? NP - i : step) : 1;
        sl_batch_item it[3] = {{s[0], toks + i, k, out + (size_t)i * V, 1},
                               {s[1], o[0] + (p ? 29 + p : 0), p ? 1 : 30, junk, 1},
                               {s[2], o[1] + 12 + p, 1, NULL, 0}};
        rc = batch ? sl_batch_eval(m, it, 3) : sl_session_eval(s[0], toks + i, k, it[0].logits, 1);
        i += k;
    }
    for (int i = 0; i < 3; i++) sl_session_free(s[i]);
    free(junk);
    if (rc) free(out);
    return rc ? NULL : out;
}

/* The first position whose logits differ, -1 if none, -2 if a run failed. */
static int first_diff(const float *a, const float *ref, int V) {
    if (!a || !ref) return -2;
    for (int t = 0; t < NT; t++)
        if (memcmp(a + (size_t)t * V, ref + (size_t)t * V, (size_t)V * sizeof(float))) return t;
    return -1;
}

TEST(wide_models_streamed_batched_threads_prefill_bitwise) {
    static const char *what[7] = {"2 threads", "token by token", "7-token chunks", "streamed",
                                  "streamed token by token", "batched", "streamed batched"};
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        const char *path = test_path("%s/w%zu.sluice", test_tmpdir(), i);
        sl_error err = {0};
        CHECKF(synth_write(models[i].shape, 0, models[i].q, models[i].group, 0, 1, path, NULL, NULL, &err) == SL_OK,
               "synth: %s", err.msg);
        { /* groups of 32 have a GGUF Q4_0 / Q8_0's biases (synth.c emit_mat): implied, so the kernels compute them */
            slc_file f;
            CHECK(slc_open(path, &f, &err) == SL_OK);
            uint8_t *blk = malloc(f.h.expert_stride);
            tn_expert ex;
            CHECK(fio_pread_all(f.fd, blk, f.h.expert_stride, slc_expert_offset(&f, 0, 1), path, &err) == SL_OK);
            slc_bind_expert(&f, 0, blk, &ex);
            CHECKF(q_biases_implied(&ex.gate) == (models[i].group == 32) && q_biases_implied(&ex.down) == (models[i].group == 32),
                   "%s group %d: an expert's biases %s implied", models[i].shape, models[i].group,
                   models[i].group == 32 ? "not" : "wrongly");
            free(blk);
            slc_close(&f);
        }
        int32_t toks[NT];
        for (int j = 0; j < NT; j++) toks[j] = (int32_t)((j * 2654435761u >> 7) % 512);
        sl_model *m1 = open_wide(path, 0, 1), *m2 = open_wide(path, 0, 2), *ms = open_wide(path, 1, 2);
        const int V = m1 ? sl_model_n_vocab(m1) : 0, dn = !strcmp(models[i].shape, "tiny-wide-next");
        float *r[8] = {run_seq(m1, toks, NP, 0), run_seq(m2, toks, NP, 0), run_seq(m2, toks, 1, 0),
                       run_seq(m2, toks, 7, 0),  run_seq(ms, toks, NP, 0), run_seq(ms, toks, 1, 0),
                       run_seq(m2, toks, NP, 1), run_seq(ms, toks, NP, 1)};
        sl_model_close(m1), sl_model_close(m2), sl_model_close(ms);
        int d[7];
        for (int k = 0; k < 7; k++) d[k] = first_diff(r[k + 1], k == 4 ? r[2] : r[0], V);
        double lo = 0, hi = 0; /* not degenerate */
        int finite = r[0] != NULL, moved = 0;
        for (size_t j = 0; finite && j < (size_t)NT * V; j++) {
            finite &= isfinite(r[0][j]) != 0;
            lo = fmin(lo, r[0][j]), hi = fmax(hi, r[0][j]);
            moved += j >= (size_t)V && r[0][j] != r[0][j - V];
        }
        for (int k = 0; k < 8; k++) free(r[k]);
        for (int k = 0; k < 7; k++)
            CHECKF(d[k] == -1 || (dn && (k == 1 || k == 2) && d[k] >= 0), "%s q%d group %d: %s differs at position %d",
                   models[i].shape, models[i].q == SL_QUANT_Q4 ? 4 : 8, models[i].group, what[k], d[k]);
        CHECKF(finite && hi - lo > 1 && hi - lo < 1e4 && moved > NT * V / 2, "%s: degenerate logits", path);
    }
}

typedef struct {
    const tn_mat *w;
    kern_act *a;
    float *y;
    int rc;
} stack_job;

static void *stack_run(void *arg) {
    stack_job *j = arg;
    j->rc = kern_matmul_act(kern_default_ops(), NULL, j->w, j->a, j->y, (size_t)j->w->rows);
    return NULL;
}

/* A q4 matmul of 32 tokens on a thread of a 64 KiB stack (the library runs on its callers' threads) */
TEST(wide_q4_kernel_on_a_small_stack) {
    enum { R = 64, C = 2048, T = 32 };
    float *wf = malloc((R + T) * C * 4), *x = wf + R * C, *y = malloc(T * R * 8), *yr = y + T * R;
    void *data = malloc(q_mat_bytes(DT_Q4, R, C, 32, DT_BF16)), *ab = malloc(kern_act_bytes(T, C) * 2);
    CHECK(wf && y && data && ab);
    unsigned u = 12345u;
    for (int i = 0; i < (R + T) * C; i++) u = u * 1103515245u + 12345u, wf[i] = (float)((u >> 9) % 2001u) / 1000 - 1;
    q_quantize(DT_Q4, wf, R, C, 32, DT_BF16, 0, data);
    tn_mat w;
    q_mat_bind(&w, data, DT_Q4, R, C, 32, DT_BF16, 0);
    kern_act a, ar;
    kern_act_init(&a, ab, x, C, T, C, 1);
    kern_act_init(&ar, (char *)ab + kern_act_bytes(T, C), x, C, T, C, 1);
    CHECK(kern_matmul_act(kern_ops_by_name("scalar"), NULL, &w, &ar, yr, R) == 0);
    stack_job j = {&w, &a, y, -1};
    pthread_attr_t at;
    pthread_t th;
    CHECK(!pthread_attr_init(&at) && !pthread_attr_setstacksize(&at, 64 << 10) && !pthread_create(&th, &at, stack_run, &j));
    pthread_join(th, NULL);
    int same = j.rc == 0 && !memcmp(y, yr, T * R * 4);
    free(wf), free(y), free(data), free(ab);
    CHECKF(same, "%s table on a 64 KiB stack != the scalar oracle", kern_default_ops()->name);
}
