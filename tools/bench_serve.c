/*
 * bench_serve.c — `make bench-serve`: what continuous batching buys on a streamed model (docs/PERFORMANCE.md).
 * For B concurrent streams (default 1, 2, 4, 8, 16) it submits B sampled requests with short distinct
 * prompts to the scheduler (src/serve/sched.h, the engine under `sluice serve`) and measures aggregate
 * decode tokens/s (generated tokens over the wall time from the first to the last token), expert bytes
 * read per generated token, hit rate, steps, the mean time a step spent in sl_batch_eval (its rows a step
 * beside it: the prompts' steps are in the mean too) and a decode step's wall time (the difference: the host's work a
 * step). Then the time to first token of a follow-up turn (a long first prompt, then the same plus a short new turn)
 * with and without the prefix cache (--followup 0: not run, so that a timeline of the run holds the serving steps only).
 *
 * Usage: build/bench_serve MODEL.sluice [--cache SIZE_MIB] [--tokens N] [--streams 1,2,4,8,16] [--resident 1]
 *                          [--io direct|buffered] [--prompt N] [--temp T (default 1: sampled)] [--gpu 1 (CUDA, resident)]
 *                          [--kv TYPE (default f16, as `sluice serve` gives: a backend without it takes f32)]
 *                          [--followup 0]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/sched.h"
#include "sluice.h"

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending, tokens;
    double t_first, t_last, ttft;
} tally;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int on_event(void *user, const srv_event *ev) {
    tally *t = user;
    pthread_mutex_lock(&t->mu);
    double now = now_s();
    if (ev->done) {
        if (ev->status) fprintf(stderr, "request failed: %s\n", ev->errmsg);
        t->ttft = ev->ttft_s;
        if (--t->pending == 0) pthread_cond_broadcast(&t->cv);
    } else {
        if (!t->t_first) t->t_first = now;
        t->t_last = now;
        t->tokens++;
    }
    pthread_mutex_unlock(&t->mu);
    return 0;
}

static void wait_all(tally *t) {
    pthread_mutex_lock(&t->mu);
    while (t->pending) pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

static sl_model *open_model(const char *path, long long cache_mib, sl_io_mode io, int gpu, int resident, int kv) {
    sl_model_params mp = sl_model_params_default();
    /* the KV cache `sluice serve` opens with (src/cli/opts.c cli_model_params: f16, a preference), not the library's
     * exact f32: call K's serving figures ran on f32 caches, whose attention kernels are the slow ones on the GPU */
    mp.kv_type = mp.kv_type_v = kv < 0 ? SL_KV_F16 : (sl_kv_type)kv;
    mp.kv_fallback = kv < 0;
    mp.cache_bytes = (uint64_t)cache_mib << 20;
    mp.resident = resident; /* --resident 1: every expert in memory (sluice serve --resident) */
    if (gpu) mp.backend = SL_BACKEND_CUDA, mp.resident = 1; /* --gpu 1: sluice serve --gpu --resident */
    mp.io_mode = io;
    mp.prefetch = -1; /* batched steps do not use next-layer hints; keep the single stream comparable */
    sl_model *m = NULL;
    sl_error err = {0};
    if (sl_model_open(path, &mp, &m, &err)) fprintf(stderr, "%s\n", err.msg);
    return m;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.sluice [--cache MIB] [--tokens N] [--streams 1,2,4] [--io direct|buffered] [--prompt N] [--gpu 1] [--resident 1] [--kv TYPE]\n", argv[0]);
        return 2;
    }
    const char *path = argv[1], *streams = "1,2,4,8,16";
    long long cache_mib = 256;
    int n_tok = 32, n_prompt_long = 1024;
    float temp = 1.0f;
    int gpu = 0, resident = 0, kv = -1, followup = 1;
    sl_io_mode io = SL_IO_DIRECT;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--cache")) cache_mib = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--tokens")) n_tok = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--streams")) streams = argv[i + 1];
        else if (!strcmp(argv[i], "--prompt")) n_prompt_long = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--temp")) temp = (float)atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--gpu")) gpu = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--resident")) resident = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--followup")) followup = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--io")) io = strcmp(argv[i + 1], "buffered") ? SL_IO_DIRECT : SL_IO_BUFFERED;
        else if (!strcmp(argv[i], "--kv") && (kv = sl_kv_type_from_name(argv[i + 1])) < 0) {
            fprintf(stderr, "--kv: '%s' is not a KV cache type (f32, f16, bf16, q8, q4, q4r)\n", argv[i + 1]);
            return 2;
        }
    }
    sl_model *m = open_model(path, cache_mib, io, gpu, resident, kv);
    if (!m) return 1;
    sl_tokenizer *tok = NULL; /* synthetic models carry no tokenizer: ids only */
    sl_error err = {0};
    sl_tokenizer_load(path, &tok, &err);
    const int V = sl_model_n_vocab(m);
    sl_stats st0;
    sl_model_stats(m, &st0);
    printf("model %s: experts %.1f GiB, cache %lld MiB, io %s, %d tokens per stream\n\n", path,
           (double)st0.expert_bytes / (1 << 30), cache_mib, io == SL_IO_DIRECT ? "direct" : "buffered", n_tok);
    printf("| streams | aggregate decode tok/s | per stream | x 1 stream | expert MiB read / token | hit rate | steps | "
           "ms a step in the model | rows a step | wall ms a decode step |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    double base = 0;
    for (const char *p = streams; *p;) {
        int B = atoi(p);
        while (*p && *p != ',') p++;
        if (*p == ',') p++;
        if (B < 1) continue;
        srv_sched_params sp = srv_sched_params_default();
        sp.max_active = B;
        sp.n_ctx = 512;
        srv_sched *s = NULL;
        if (srv_sched_new(m, tok, &sp, &s, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        tally t;
        memset(&t, 0, sizeof t);
        pthread_mutex_init(&t.mu, NULL);
        pthread_cond_init(&t.cv, NULL);
        t.pending = B;
        sl_model_reset_stats(m);
        int32_t prompts[16][4];
        for (int i = 0; i < B; i++) {
            for (int j = 0; j < 4; j++) prompts[i % 16][j] = (int32_t)((1000 + 7919 * (i * 4 + j)) % V);
            srv_request r = {prompts[i % 16], 4, sl_sampler_params_default(), n_tok, NULL, 0, 1, NULL, NULL, 0, 0, 0, 0, 0, 0};
            r.sampling.temp = temp; /* sampled: greedy on random weights repeats one token, and so its experts */
            r.sampling.seed = (uint64_t)i + 1;
            if (srv_submit(s, &r, on_event, &t, NULL, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        }
        wait_all(&t);
        srv_sched_stats ss;
        srv_sched_stats_get(s, &ss);
        srv_sched_free(s);
        sl_stats st;
        sl_model_stats(m, &st);
        double dt = t.t_last - t.t_first, tps = dt > 0 ? (t.tokens - B) / dt : 0; /* first tokens end the prefills */
        if (B == 1 || !base) base = tps;
        uint64_t req = st.hits + st.misses;
        /* the wall time of a decode step (first token to last over the (tokens - B) / B steps between them) beside the
         * time sl_batch_eval took (the model's: its mean includes the prompts' step): what is left is the scheduler's
         * host work a step, chiefly sampling each stream's logits one after another (src/text/sampler.c) */
        const double wall_step = t.tokens > B ? 1e3 * dt * B / (double)(t.tokens - B) : 0;
        printf("| %d | %.2f | %.2f | %.2f | %.1f | %.1f%% | %llu | %.3f | %.2f | %.3f |\n", B, tps, tps / B, base > 0 ? tps / base : 0,
               t.tokens ? (double)st.bytes_read / t.tokens / 1048576.0 : 0, req ? 100.0 * st.hits / req : 0,
               (unsigned long long)ss.steps, ss.steps ? 1e3 * ss.busy_s / (double)ss.steps : 0,
               ss.steps ? (double)ss.step_rows / (double)ss.steps : 0, wall_step);
        fflush(stdout);
    }
    if (!followup) {
        sl_tokenizer_free(tok);
        sl_model_close(m);
        return 0;
    }
    /* follow-up turn: TTFT with and without the prefix cache */
    int n_long = n_prompt_long < sl_model_n_ctx(m) - 64 ? n_prompt_long : sl_model_n_ctx(m) - 64;
    int32_t *conv = malloc((size_t)(n_long + 32) * sizeof *conv);
    for (int i = 0; i < n_long + 32; i++) conv[i] = (int32_t)((17 + 104729 * i) % V);
    printf("\n| follow-up turn (%d history + 32 new tokens) | time to first token | prompt tokens evaluated |\n", n_long);
    printf("|---|---|---|\n");
    for (int cached = 0; cached < 2; cached++) {
        srv_sched_params sp = srv_sched_params_default();
        sp.state_cache_bytes = cached ? 1ull << 30 : 0;
        sp.n_ctx = n_long + 64;
        sp.prefill_chunk = 1024;
        srv_sched *s = NULL;
        if (srv_sched_new(m, tok, &sp, &s, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        tally t;
        for (int turn = 0; turn < 2; turn++) {
            memset(&t, 0, sizeof t);
            pthread_mutex_init(&t.mu, NULL);
            pthread_cond_init(&t.cv, NULL);
            t.pending = 1;
            srv_request r = {conv, turn ? n_long + 32 : n_long, sl_sampler_params_default(), 2, NULL, 0, 1, NULL, NULL, 0, 0, 0, 0, 0, 0};
            r.sampling.temp = 0;
            if (srv_submit(s, &r, on_event, &t, NULL, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
            wait_all(&t);
        }
        srv_sched_stats ss;
        srv_sched_stats_get(s, &ss);
        srv_sched_free(s);
        printf("| %s | %.3f s | %llu |\n", cached ? "prefix cache on" : "prefix cache off", t.ttft,
               (unsigned long long)(n_long + 32 - (cached ? ss.reused_tokens : 0)));
    }
    free(conv);
    sl_tokenizer_free(tok);
    sl_model_close(m);
    return 0;
}
