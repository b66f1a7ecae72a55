/*
 * locality.c — `make locality`: routing locality of the trained demo model (models/demo/README.md) in
 * the expert cache, measured on real routing in teacher-forced decode.
 *
 * Held-out text is fed one token per sl_session_eval (n_tokens = 1, the logits of every step computed,
 * as in decoding). The stream is `--windows` windows of 512 tokens spread evenly over the text (the
 * perplexity windows of `sluice perplexity`); the session is reset at the start of each window, so a
 * token sees at most 511 tokens of context. Counters are reset after the first `--warmup` tokens.
 *
 * Configurations (experts streamed: resident 0, cache_bytes = fraction x the expert section, io direct
 * unless the filesystem refuses O_DIRECT; 1 compute thread each):
 *  - policies at cache fractions 5..50%, prefetch off (-1) so that the policy alone is measured: lru,
 *    lfu, and lru + pin, where the pin profile comes from a model that first decoded
 *    `--profile-windows` windows of the *training* text (sl_model_write_profile);
 *  - prefetch off (-1), auto (0) and on (1) at 10/25/50%, lru.
 * Every configuration is open at once; `--jobs` threads share them out and feed each the stream token
 * by token (token outer, configuration inner, so load from elsewhere on the machine falls on all alike;
 * with O_DIRECT most of a step is waiting for the disk, which the threads overlap).
 *
 * Beside the measured cache: a resident model gives the reference logits (every configuration must
 * match them bitwise at every token); the uniform baseline is the slot fraction (what independent
 * uniform routing gives any policy); the routing trace (each token's (layer, expert) keys, from the
 * routing counts after every token) is replayed through a model of LRU (a check on the cache) and
 * through Belady's offline optimum (the bound no online policy can beat).
 *
 * Output: Markdown tables on stdout, and a CSV of every configuration (`--csv`, default
 * build/locality.csv) for tools/plot_locality.py.
 *
 * `--trace FILE` alone: no model runs; a recorded routing trace (`--record-routing`, src/model/rtrace.h, e.g.
 * models/demo/heldout.rtrace, models/demo/route128.rtrace) is replayed through the model of LRU and Belady's
 * optimum at the policy table's cache fractions (slots = fraction x MoE layers x experts), after `--warmup`
 * tokens, and its skew printed (layers pooled, ranked on itself): the locality of one trace beside another's.
 * Usage: build/locality [--model FILE] [--text FILE] [--train FILE] [--windows N] [--warmup N]
 *                       [--profile-windows N] [--io direct|buffered|auto] [--jobs N] [--threads N]
 *                       [--csv FILE] [--tmp DIR]
 *        build/locality --trace FILE [--warmup N]
 *
 * Sections: configurations; token streams; profiles and skew; replaying the trace; the measurement;
 * output; a recorded trace; the program.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model/rtrace.h"
#include "sluice.h"
#include "util/fileio.h"

#define WIN 512

/* ---- configurations ---------------------------------------------------------------------------- */

static const int POLICY_PCT[] = {5, 10, 15, 20, 30, 40, 50};
static const int PREFETCH_PCT[] = {10, 25, 50};
#define N_POLICY_PCT ((int)(sizeof POLICY_PCT / sizeof *POLICY_PCT))
#define N_PREFETCH_PCT ((int)(sizeof PREFETCH_PCT / sizeof *PREFETCH_PCT))
#define MAX_RUNS (3 * N_POLICY_PCT + 3 * N_PREFETCH_PCT)
#define LAYER_PCT 20 /* the cache size of the per-layer table */

enum { K_LRU, K_LFU, K_PIN, K_PF_OFF, K_PF_AUTO, K_PF_ON, N_KINDS };
static const char *KIND_NAME[N_KINDS] = {"lru", "lfu", "lru + pin", "off", "auto", "on"};
static const char *KIND_CSV[N_KINDS] = {"lru", "lfu", "pin", "prefetch_off", "prefetch_auto", "prefetch_on"};

typedef struct {
    int kind, pct;
    sl_model *m;
    sl_session *s;
    sl_stats st;               /* at the end */
    long differ;               /* tokens whose logits were not bitwise the resident model's */
    double acc_sum;            /* prefetch_accuracy summed over the measured tokens ... */
    long acc_n;                /* ... and how many were summed */
    uint64_t *l_hits, *l_miss; /* [n_layers] at the end */
} run;

typedef struct {
    const char *model, *text, *train, *csv, *tmp, *trace;
    int windows, warmup, profile_windows, jobs, threads;
    sl_io_mode io;
} args;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The configuration of kind k at pct, or NULL. "prefetch off" at a size the policy table has is that
 * table's lru run (the same configuration). */
static const run *find(const run *runs, int n, int kind, int pct) {
    for (int i = 0; i < n; i++)
        if (runs[i].kind == kind && runs[i].pct == pct) return &runs[i];
    return kind == K_PF_OFF ? find(runs, n, K_LRU, pct) : NULL;
}

static int in_policy_table(int pct) {
    for (int i = 0; i < N_POLICY_PCT; i++)
        if (POLICY_PCT[i] == pct) return 1;
    return 0;
}

/* Opens the model of one configuration. Returns 0, or 1 after printing why. */
static int open_run(const args *a, run *r, uint64_t expert_bytes, const char *profile) {
    sl_model_params mp = sl_model_params_default();
    mp.n_threads = a->threads;
    mp.resident = 0;
    mp.cache_bytes = expert_bytes * (uint64_t)r->pct / 100;
    mp.io_mode = a->io;
    mp.policy = r->kind == K_LFU ? SL_POLICY_LFU : SL_POLICY_LRU;
    mp.pin_profile = r->kind == K_PIN ? profile : NULL;
    mp.prefetch = r->kind == K_PF_AUTO ? 0 : r->kind == K_PF_ON ? 1 : -1;
    sl_error err = {0};
    if (sl_model_open(a->model, &mp, &r->m, &err)) { fprintf(stderr, "locality: %s\n", err.msg); return 1; }
    if (sl_session_new(r->m, WIN, &r->s)) { fprintf(stderr, "locality: %s\n", sl_model_errmsg(r->m)); return 1; }
    return 0;
}

/* ---- token streams ----------------------------------------------------------------------------- */

/* *n_windows windows of WIN tokens of the file's text, evenly spaced over its whole windows, as one
 * malloc'ed array of *n_windows * WIN ids (*n_windows lowered when the text has fewer). NULL after
 * printing why. */
static int32_t *window_stream(const sl_tokenizer *tok, const char *file, int *n_windows) {
    char *text = NULL;
    size_t len = 0;
    int32_t *ids = NULL, *out = NULL;
    int n = 0;
    sl_error err = {0};
    if (fio_read_file(file, &text, &len, &err) || sl_tokenize(tok, text, len, SL_TOKENIZE_NO_SPECIAL, &ids, &n, &err)) {
        fprintf(stderr, "locality: %s: %s\n", file, err.msg);
        goto out;
    }
    int text_windows = n / WIN;
    if (*n_windows > text_windows) *n_windows = text_windows;
    if (*n_windows < 1) { fprintf(stderr, "locality: %s: fewer than %d tokens\n", file, WIN); goto out; }
    out = malloc((size_t)*n_windows * WIN * sizeof *out);
    if (!out) { fprintf(stderr, "locality: out of memory\n"); goto out; }
    for (int w = 0; w < *n_windows; w++) {
        long src = (long)w * text_windows / *n_windows;
        memcpy(out + (size_t)w * WIN, ids + (size_t)src * WIN, WIN * sizeof *out);
    }
out:
    free(text);
    free(ids);
    return out;
}

/* Feeds n tokens one at a time, resetting the session every WIN tokens; token i's logits go to
 * logits + i * V when all, else every step overwrites logits [V]. Returns 0, or 1 after printing. */
static int decode_stream(sl_session *s, const int32_t *ids, int n, float *logits, int V, int all) {
    for (int i = 0; i < n; i++) {
        if (i % WIN == 0) sl_session_reset(s);
        if (sl_session_eval(s, ids + i, 1, logits + (all ? (size_t)i * V : 0), 0)) {
            fprintf(stderr, "locality: %s\n", sl_session_errmsg(s));
            return 1;
        }
    }
    return 0;
}

/* ---- profiles and skew ------------------------------------------------------------------------- */

/* Experts per layer named in a profile's header, or -1. */
static int profile_experts(const char *path) {
    char *txt = NULL;
    sl_error err = {0};
    int nl = 0, E = -1;
    if (fio_read_file(path, &txt, NULL, &err) || sscanf(txt, "sluice-profile 1 layers %d experts %d", &nl, &E) != 2) E = -1;
    free(txt);
    return E;
}

/* Reads a profile (sluice-profile 1, lines "layer expert count") into counts [n_layers * E], key =
 * model layer * E + expert. Returns 0 or -1. */
static int read_profile(const char *path, int n_layers, int E, double *counts) {
    char *txt = NULL;
    sl_error err = {0};
    if (fio_read_file(path, &txt, NULL, &err)) return -1;
    int nl = 0, ne = 0, off = 0, layer, e, used;
    unsigned long long c;
    if (sscanf(txt, "sluice-profile 1 layers %d experts %d%n", &nl, &ne, &off) != 2 || ne != E || nl > n_layers) {
        free(txt);
        return -1;
    }
    memset(counts, 0, (size_t)n_layers * E * sizeof *counts);
    for (const char *p = txt + off; sscanf(p, "%d %d %llu%n", &layer, &e, &c, &used) == 3; p += used)
        if (layer >= 0 && layer < n_layers && e >= 0 && e < E) counts[(size_t)layer * E + e] = (double)c;
    free(txt);
    return 0;
}

static const double *g_sort_key;
static int by_key_desc(const void *x, const void *y) {
    double a = g_sort_key[*(const int *)x], b = g_sort_key[*(const int *)y];
    return a < b ? 1 : a > b ? -1 : *(const int *)x - *(const int *)y;
}

/* Share of the routings counted in mass[n] that fall on the top `share` of the keys ranked by rank[n]. */
static double top_share(const double *rank, const double *mass, int n, double share) {
    int *order = malloc((size_t)n * sizeof *order);
    if (!order) return NAN;
    for (int i = 0; i < n; i++) order[i] = i;
    g_sort_key = rank;
    qsort(order, (size_t)n, sizeof *order, by_key_desc);
    int k = (int)lround(share * n);
    double top = 0, all = 0;
    for (int i = 0; i < n; i++) {
        all += mass[order[i]];
        if (i < k) top += mass[order[i]];
    }
    free(order);
    return all > 0 ? top / all : 0;
}

/* ---- replaying the trace ----------------------------------------------------------------------- */

/* trace [n_tok][per_tok]: the keys each token routed to, in layer order (per_tok = MoE layers x k).
 * Replays it through `slots` slots: lru (opt 0) or Belady's offline optimum (opt 1: evict the key
 * needed again farthest ahead). A layer's k keys are requested and held together, as the cache does.
 * Returns the hit rate over tokens >= warmup, or -1 when out of memory. */
static double replay(const int *trace, int n_tok, int per_tok, int k, int n_keys, int slots, int opt, int warmup) {
    long n = (long)n_tok * per_tok, hits = 0, total = 0, tick = 0;
    long *next = malloc((size_t)n * sizeof *next), *stamp = calloc((size_t)n_keys, sizeof *stamp);
    char *in = calloc((size_t)n_keys, 1), *cur = calloc((size_t)n_keys, 1);
    double rate = -1;
    if (!next || !stamp || !in || !cur) goto out;
    for (int key = 0; key < n_keys; key++) stamp[key] = n; /* while filling next[]: the key's next position */
    for (long i = n - 1; i >= 0; i--) {
        next[i] = stamp[trace[i]];
        stamp[trace[i]] = i;
    }
    memset(stamp, 0, (size_t)n_keys * sizeof *stamp); /* from here: lru tick, or opt next use */
    int used = 0;
    for (long g = 0; g < n; g += k) {
        int counted = g / per_tok >= warmup;
        for (int j = 0; j < k; j++) cur[trace[g + j]] = 1;
        for (int j = 0; j < k; j++) {
            int key = trace[g + j];
            total += counted;
            if (in[key]) { hits += counted; continue; }
            if (used < slots) used++;
            else {
                int victim = -1;
                for (int v = 0; v < n_keys; v++)
                    if (in[v] && !cur[v] && (victim < 0 || (opt ? stamp[v] > stamp[victim] : stamp[v] < stamp[victim]))) victim = v;
                if (victim < 0) goto out;
                in[victim] = 0;
            }
            in[key] = 1;
        }
        for (int j = 0; j < k; j++) {
            int key = trace[g + j];
            stamp[key] = opt ? next[g + j] : ++tick;
            cur[key] = 0;
        }
    }
    rate = total ? (double)hits / (double)total : 0;
out:
    free(next);
    free(stamp);
    free(in);
    free(cur);
    return rate;
}

/* ---- the measurement --------------------------------------------------------------------------- */

typedef struct {
    const args *a;
    run *runs;
    int n_runs, job;
    const int32_t *held;
    int n_held, V, n_layers, E;
    const float *ref;          /* [n_held][V] resident logits */
    const run *tracer;         /* the run whose routing counts give the trace */
    int *trace;                /* [n_held][n_layers * E] keys of each token (first per_tok used) */
    int per_tok;               /* keys per token, set by the tracer's job */
    const char *trace_profile; /* scratch file for the tracer's counts */
    int rc;
} job;

/* One job: the runs i with i % jobs == job, token outer. Sets j->rc (0, or 1 after printing why). */
static void *job_main(void *arg) {
    job *j = arg;
    const args *a = j->a;
    int n_keys = j->n_layers * j->E;
    float *logits = malloc((size_t)j->V * sizeof *logits);
    double *cur = malloc((size_t)n_keys * sizeof *cur), *prev = calloc((size_t)n_keys, sizeof *prev);
    j->rc = 1;
    if (!logits || !cur || !prev) { fprintf(stderr, "locality: out of memory\n"); goto out; }
    for (int t = 0; t < j->n_held; t++) {
        for (int i = j->job; i < j->n_runs; i += a->jobs) {
            run *r = &j->runs[i];
            if (t == a->warmup) sl_model_reset_stats(r->m);
            if (t % WIN == 0) sl_session_reset(r->s);
            if (sl_session_eval(r->s, j->held + t, 1, logits, 0)) {
                fprintf(stderr, "locality: %s %d%%: %s\n", KIND_NAME[r->kind], r->pct, sl_session_errmsg(r->s));
                goto out;
            }
            r->differ += memcmp(logits, j->ref + (size_t)t * j->V, (size_t)j->V * sizeof *logits) != 0;
            if ((r->kind == K_PF_AUTO || r->kind == K_PF_ON) && t >= a->warmup) {
                sl_stats s;
                sl_model_stats(r->m, &s);
                if (s.prefetch_accuracy >= 0) { r->acc_sum += s.prefetch_accuracy; r->acc_n++; }
            }
            if (r != j->tracer) continue;
            sl_error err = {0}; /* this token's keys: what its routing added to the counts */
            if (sl_model_write_profile(r->m, j->trace_profile, &err) || read_profile(j->trace_profile, j->n_layers, j->E, cur)) {
                fprintf(stderr, "locality: routing trace: %s\n", err.msg[0] ? err.msg : "cannot read the profile back");
                goto out;
            }
            int got = 0;
            for (int key = 0; key < n_keys; key++)
                if (cur[key] > prev[key]) j->trace[(size_t)t * n_keys + got++] = key;
            if (t == 0) j->per_tok = got;
            if (got != j->per_tok) {
                fprintf(stderr, "locality: token %d was routed to %d experts, token 0 to %d\n", t, got, j->per_tok);
                goto out;
            }
            memcpy(prev, cur, (size_t)n_keys * sizeof *prev);
        }
        if (j->job == 0 && isatty(2) && (t + 1) % 64 == 0) fprintf(stderr, "\rtoken %d of %d", t + 1, j->n_held);
    }
    if (j->job == 0 && isatty(2)) fputc('\n', stderr);
    j->rc = 0;
out:
    free(logits);
    free(cur);
    free(prev);
    return NULL;
}

/* ---- output ------------------------------------------------------------------------------------ */

typedef struct {
    double lru[N_POLICY_PCT], opt[N_POLICY_PCT]; /* replayed hit rates at the policy table's slot counts */
} replays;

#define N_SKEW 5
static const int SKEW_PCT[N_SKEW] = {5, 10, 20, 25, 50};
typedef struct {
    double train[N_SKEW], held[N_SKEW], cross[N_SKEW]; /* routing shares of the hottest SKEW_PCT% experts */
} skew;

static double hit_rate(uint64_t hits, uint64_t misses) { return hits + misses ? (double)hits / (double)(hits + misses) : 0; }
static double mib_per_token(const sl_stats *s) { return s->tokens ? (double)s->bytes_read / (double)s->tokens / 1048576.0 : 0; }
static double tok_s(const sl_stats *s) { return s->eval_s > 0 ? (double)s->tokens / s->eval_s : 0; }
static double io_wait_pct(const sl_stats *s) { return s->eval_s > 0 ? 100 * s->io_wait_s / s->eval_s : 0; }

static void print_tables(const args *a, const run *runs, int n_runs, int n_layers, int n_keys, const replays *rp,
                         const skew *sk) {
    const sl_stats *s0 = &runs[0].st;
    double stride = (double)s0->expert_bytes / n_keys;
    printf("Experts: %d (layer, expert) blocks of %.0f bytes, %.1f MiB in all; io %s, engine %s; %d compute thread%s "
           "per model, %d configurations decoding at once. Held-out stream: %d windows of %d tokens spread over the "
           "text, one token per eval, session reset per window; %d warm-up tokens, %d measured. Pin profile: %d "
           "windows (%d tokens) of the training text.\n\n",
           n_keys, stride, (double)s0->expert_bytes / 1048576.0, s0->io_mode, s0->io_engine, a->threads,
           a->threads == 1 ? "" : "s", a->jobs, a->windows, WIN, a->warmup, a->windows * WIN - a->warmup,
           a->profile_windows, a->profile_windows * WIN);
    printf("Expert-cache hit rate, prefetch off. Uniform routing: the slot fraction, what independent uniform "
           "routing gives any policy. Replayed lru: the routing trace through a model of LRU (a check on the "
           "cache). Offline optimum: Belady's, the bound for any policy.\n\n"
           "| cache | slots | uniform routing | lru | lfu | lru + pin (pinned) | replayed lru | offline optimum |\n"
           "|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < N_POLICY_PCT; i++) {
        const run *l = find(runs, n_runs, K_LRU, POLICY_PCT[i]), *f = find(runs, n_runs, K_LFU, POLICY_PCT[i]),
                  *p = find(runs, n_runs, K_PIN, POLICY_PCT[i]);
        printf("| %d%% | %llu | %.1f%% | %.1f%% | %.1f%% | %.1f%% (%llu) | %.1f%% | %.1f%% |\n", POLICY_PCT[i],
               (unsigned long long)l->st.cache_slots, 100.0 * (double)l->st.cache_slots / n_keys,
               100 * hit_rate(l->st.hits, l->st.misses), 100 * hit_rate(f->st.hits, f->st.misses),
               100 * hit_rate(p->st.hits, p->st.misses), (unsigned long long)p->st.pinned, 100 * rp->lru[i], 100 * rp->opt[i]);
    }
    printf("\nExpert bytes read per token (MiB), same runs (uniform: requests per token x block x (1 - slot "
           "fraction)):\n\n| cache | uniform routing | lru | lfu | lru + pin |\n|---|---|---|---|---|\n");
    for (int i = 0; i < N_POLICY_PCT; i++) {
        const run *l = find(runs, n_runs, K_LRU, POLICY_PCT[i]), *f = find(runs, n_runs, K_LFU, POLICY_PCT[i]),
                  *p = find(runs, n_runs, K_PIN, POLICY_PCT[i]);
        double reqs = (double)(l->st.hits + l->st.misses) / (double)l->st.tokens;
        printf("| %d%% | %.3f | %.3f | %.3f | %.3f |\n", POLICY_PCT[i],
               reqs * stride * (1 - (double)l->st.cache_slots / n_keys) / 1048576.0, mib_per_token(&l->st),
               mib_per_token(&f->st), mib_per_token(&p->st));
    }
    printf("\nPer-layer hit rate at %d%% (prefetch off):\n\n| layer | lru | lfu | lru + pin |\n|---|---|---|---|\n", LAYER_PCT);
    const run *l = find(runs, n_runs, K_LRU, LAYER_PCT), *f = find(runs, n_runs, K_LFU, LAYER_PCT),
              *p = find(runs, n_runs, K_PIN, LAYER_PCT);
    for (int L = 0; L < n_layers; L++) {
        if (!l->l_hits[L] && !l->l_miss[L]) continue;
        printf("| %d | %.1f%% | %.1f%% | %.1f%% |\n", L, 100 * hit_rate(l->l_hits[L], l->l_miss[L]),
               100 * hit_rate(f->l_hits[L], f->l_miss[L]), 100 * hit_rate(p->l_hits[L], p->l_miss[L]));
    }
    printf("\nRouting skew: share of all routings (layers pooled) that go to the hottest experts:\n\n"
           "| hottest | uniform | training text, ranked on itself | held-out, ranked on itself | held-out, ranked on "
           "training |\n|---|---|---|---|---|\n");
    for (int i = 0; i < N_SKEW; i++)
        printf("| %d%% | %d%% | %.1f%% | %.1f%% | %.1f%% |\n", SKEW_PCT[i], SKEW_PCT[i], 100 * sk->train[i],
               100 * sk->held[i], 100 * sk->cross[i]);
    printf("\nNext-layer prefetch, lru. A request served by a prefetched block counts as a hit; bytes include the "
           "prefetch reads; demand reads are the misses the forward pass waits for. Prediction accuracy: "
           "sl_stats.prefetch_accuracy (|predicted ∩ routed| / |predicted|, a moving average), its mean over the "
           "measured tokens and its value at the end; reads used: prefetch_used / prefetch_reads.\n\n"
           "| cache | prefetch | hit rate | MiB read per token | demand reads per token | prefetch reads per token | "
           "prediction accuracy, mean (end) | prefetch reads used | acting at end | decode tok/s (I/O wait) |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < N_PREFETCH_PCT; i++)
        for (int k = K_PF_OFF; k <= K_PF_ON; k++) {
            const run *r = find(runs, n_runs, k, PREFETCH_PCT[i]);
            const sl_stats *s = &r->st;
            char acc[48] = "–", used[32] = "–";
            if (r->acc_n) snprintf(acc, sizeof acc, "%.1f%% (%.1f%%)", 100 * r->acc_sum / r->acc_n, 100 * s->prefetch_accuracy);
            if (s->prefetch_reads)
                snprintf(used, sizeof used, "%.1f%%", 100.0 * (double)s->prefetch_used / (double)s->prefetch_reads);
            printf("| %d%% | %s | %.1f%% | %.3f | %.2f | %.2f | %s | %s | %s | %.0f (%.0f%%) |\n", PREFETCH_PCT[i],
                   KIND_NAME[k], 100 * hit_rate(s->hits, s->misses), mib_per_token(s), (double)s->misses / (double)s->tokens,
                   (double)s->prefetch_reads / (double)s->tokens, acc, used,
                   k == K_PF_OFF ? "–" : s->prefetch_active ? "yes" : "no", tok_s(s), io_wait_pct(s));
        }
    printf("\nDecode tok/s of the policy runs, and the share of it spent waiting for expert reads (noisy: %d "
           "configurations share the cores):\n\n| cache | lru | lfu | lru + pin |\n|---|---|---|---|\n", a->jobs);
    for (int i = 0; i < N_POLICY_PCT; i++) {
        printf("| %d%% |", POLICY_PCT[i]);
        for (int k = K_LRU; k <= K_PIN; k++) {
            const sl_stats *s = &find(runs, n_runs, k, POLICY_PCT[i])->st;
            printf(" %.0f (%.0f%%) |", tok_s(s), io_wait_pct(s));
        }
        printf("\n");
    }
    long differ = 0;
    for (int i = 0; i < n_runs; i++) differ += runs[i].differ;
    printf("\nLogits of all %d streamed configurations against the resident model's, every token: ", n_runs);
    if (differ) printf("%ld token-configurations DIFFER.\n", differ);
    else printf("bitwise equal.\n");
}

static int write_csv(const char *path, const run *runs, int n_runs, int n_keys, const replays *rp) {
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); return 1; }
    fprintf(f, "policy,cache_pct,slots,slot_fraction,hit_rate,bytes_per_token,demand_reads_per_token,tok_s,prefetch_accuracy,"
               "prefetch_used_share\n");
    for (int i = 0; i < N_POLICY_PCT; i++) { /* the baselines, at the policy runs' slot counts */
        unsigned long long slots = find(runs, n_runs, K_LRU, POLICY_PCT[i])->st.cache_slots;
        double frac = (double)slots / n_keys;
        fprintf(f, "uniform,%d,%llu,%.6f,%.6f,,,,,\n", POLICY_PCT[i], slots, frac, frac);
        fprintf(f, "replayed_lru,%d,%llu,%.6f,%.6f,,,,,\n", POLICY_PCT[i], slots, frac, rp->lru[i]);
        fprintf(f, "optimum,%d,%llu,%.6f,%.6f,,,,,\n", POLICY_PCT[i], slots, frac, rp->opt[i]);
    }
    for (int kind = 0; kind < N_KINDS; kind++) {
        int n_pct = kind < K_PF_OFF ? N_POLICY_PCT : N_PREFETCH_PCT;
        for (int i = 0; i < n_pct; i++) {
            const run *r = find(runs, n_runs, kind, kind < K_PF_OFF ? POLICY_PCT[i] : PREFETCH_PCT[i]);
            const sl_stats *s = &r->st;
            double per_tok = s->tokens ? 1.0 / (double)s->tokens : 0;
            fprintf(f, "%s,%d,%llu,%.6f,%.6f,%.1f,%.4f,%.1f,", KIND_CSV[kind], kind < K_PF_OFF ? POLICY_PCT[i] : PREFETCH_PCT[i],
                    (unsigned long long)s->cache_slots, (double)s->cache_slots / n_keys, hit_rate(s->hits, s->misses),
                    (double)s->bytes_read * per_tok, (double)s->misses * per_tok, tok_s(s));
            if (r->acc_n) fprintf(f, "%.6f", r->acc_sum / r->acc_n);
            fputc(',', f);
            if (s->prefetch_reads) fprintf(f, "%.6f", (double)s->prefetch_used / (double)s->prefetch_reads);
            fputc('\n', f);
        }
    }
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    if (bad) fprintf(stderr, "locality: %s: write error\n", path);
    return bad;
}

/* ---- a recorded trace --------------------------------------------------------------------------- */

/* --trace: the file's routing replayed through LRU and the offline optimum, and its skew. Returns 0, or 1 after
 * printing why. */
static int trace_mode(const args *a) {
    sl_error err = {0};
    rtrace *t = NULL;
    int T, L, E, k, rc = 1, *keys = NULL, *e = NULL;
    float *w = NULL;
    double *count = NULL;
    if (rtrace_load(a->trace, 1, 1, 1, &t, &err)) goto fail; /* its shape, then loaded again on it */
    rtrace_shape(t, &T, &L, &E, &k);
    rtrace_free(t);
    t = NULL;
    if (rtrace_load(a->trace, L, E, k, &t, &err)) goto fail;
    const int n_keys = L * E, per_tok = L * k, warmup = a->warmup < T ? a->warmup : 0;
    keys = malloc((size_t)T * per_tok * sizeof *keys);
    count = calloc((size_t)n_keys, sizeof *count);
    e = malloc((size_t)k * sizeof *e);
    w = malloc((size_t)k * sizeof *w);
    if (!keys || !count || !e || !w) { snprintf(err.msg, sizeof err.msg, "out of memory"); goto fail; }
    for (int i = 0; i < T; i++) /* replayed on its own shape: the recorded choice, ascending */
        for (int l = 0; l < L; l++) {
            rtrace_route(t, l, 1, e, w);
            for (int j = 0; j < k; j++) {
                keys[(size_t)i * per_tok + l * k + j] = l * E + e[j];
                count[l * E + e[j]] += 1;
            }
        }
    printf("%s: %d tokens x %d MoE layers x %d experts, %d a token: %d (layer, expert) keys; %d warm-up tokens, "
           "%d measured.\n\n| cache | slots | uniform routing | replayed lru | offline optimum |\n|---|---|---|---|---|\n",
           a->trace, T, L, E, k, n_keys, warmup, T - warmup);
    for (int i = 0; i < N_POLICY_PCT; i++) {
        int slots = (int)((long)n_keys * POLICY_PCT[i] / 100);
        double lru = replay(keys, T, per_tok, k, n_keys, slots, 0, warmup);
        double opt = replay(keys, T, per_tok, k, n_keys, slots, 1, warmup);
        if (lru < 0 || opt < 0) { snprintf(err.msg, sizeof err.msg, "out of memory"); goto fail; }
        printf("| %d%% | %d | %.1f%% | %.1f%% | %.1f%% |\n", POLICY_PCT[i], slots, 100.0 * slots / n_keys, 100 * lru,
               100 * opt);
    }
    int used = 0;
    for (int i = 0; i < n_keys; i++) used += count[i] > 0;
    printf("\nRouting skew: share of all routings (layers pooled) that go to the hottest experts, ranked on the trace "
           "itself; %d of the %d keys used:\n\n| hottest | uniform | this trace |\n|---|---|---|\n", used, n_keys);
    for (int i = 0; i < N_SKEW; i++)
        printf("| %d%% | %d%% | %.1f%% |\n", SKEW_PCT[i], SKEW_PCT[i], 100 * top_share(count, count, n_keys, SKEW_PCT[i] / 100.0));
    rc = 0;
fail:
    if (rc) fprintf(stderr, "locality: %s\n", err.msg);
    rtrace_free(t);
    free(keys);
    free(count);
    free(e);
    free(w);
    return rc;
}

/* ---- the program ------------------------------------------------------------------------------- */

static int usage(void) {
    fprintf(stderr, "usage: locality [--model FILE] [--text FILE] [--train FILE] [--windows N] [--warmup N] "
                    "[--profile-windows N] [--io direct|buffered|auto] [--jobs N] [--threads N] [--csv FILE] [--tmp DIR]\n"
                    "       locality --trace FILE [--warmup N]\n");
    return 2;
}

static int parse(int argc, char **argv, args *a) {
    const char *t = getenv("TMPDIR");
    *a = (args){"models/demo.sluice", "models/demo/heldout.txt", "build/demo/corpus/train.txt", "build/locality.csv",
                t && *t ? t : "/tmp", NULL, 8, 200, 8, 2, 1, SL_IO_DIRECT};
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(s, "--model") && more) a->model = argv[++i];
        else if (!strcmp(s, "--text") && more) a->text = argv[++i];
        else if (!strcmp(s, "--train") && more) a->train = argv[++i];
        else if (!strcmp(s, "--csv") && more) a->csv = argv[++i];
        else if (!strcmp(s, "--tmp") && more) a->tmp = argv[++i];
        else if (!strcmp(s, "--trace") && more) a->trace = argv[++i];
        else if (!strcmp(s, "--windows") && more) a->windows = atoi(argv[++i]);
        else if (!strcmp(s, "--warmup") && more) a->warmup = atoi(argv[++i]);
        else if (!strcmp(s, "--profile-windows") && more) a->profile_windows = atoi(argv[++i]);
        else if (!strcmp(s, "--jobs") && more) a->jobs = atoi(argv[++i]);
        else if (!strcmp(s, "--threads") && more) a->threads = atoi(argv[++i]);
        else if (!strcmp(s, "--io") && more) {
            const char *v = argv[++i];
            if (!strcmp(v, "direct")) a->io = SL_IO_DIRECT;
            else if (!strcmp(v, "buffered")) a->io = SL_IO_BUFFERED;
            else if (!strcmp(v, "auto")) a->io = SL_IO_AUTO;
            else return usage();
        } else return usage();
    }
    if (a->jobs > MAX_RUNS) a->jobs = MAX_RUNS;
    return a->windows < 1 || a->profile_windows < 1 || a->warmup < 0 || a->jobs < 1 || a->threads < 0 ? usage() : 0;
}

int main(int argc, char **argv) {
    args a;
    if (parse(argc, argv, &a)) return 2;
    if (a.trace) return trace_mode(&a);
    double t_start = now_s();
    int n_runs = 0, rc = 1;
    run runs[MAX_RUNS];
    job jobs[MAX_RUNS];
    pthread_t tid[MAX_RUNS];
    memset(runs, 0, sizeof runs);
    sl_tokenizer *tok = NULL;
    sl_model *ref = NULL, *prof = NULL;
    sl_session *ref_s = NULL, *prof_s = NULL;
    int32_t *held = NULL, *train = NULL;
    float *ref_logits = NULL, *scratch = NULL;
    double *c_train = NULL, *c_held = NULL;
    int *trace = NULL;
    char profile[1024], held_profile[1024];
    snprintf(profile, sizeof profile, "%s/locality-%d-train.profile", a.tmp, (int)getpid());
    snprintf(held_profile, sizeof held_profile, "%s/locality-%d-heldout.profile", a.tmp, (int)getpid());
    sl_error err = {0};
    if (sl_tokenizer_load(a.model, &tok, &err)) { fprintf(stderr, "locality: %s\n", err.msg); goto out; }
    held = window_stream(tok, a.text, &a.windows);
    train = held ? window_stream(tok, a.train, &a.profile_windows) : NULL;
    if (!train) goto out;
    int n_held = a.windows * WIN, n_train = a.profile_windows * WIN;
    if (a.warmup >= n_held) a.warmup = 0;

    /* the reference: every expert resident, logits of every token */
    double t0 = now_s();
    sl_model_params mp = sl_model_params_default();
    mp.resident = 1;
    mp.n_threads = a.threads;
    if (sl_model_open(a.model, &mp, &ref, &err)) { fprintf(stderr, "locality: %s\n", err.msg); goto out; }
    if (sl_session_new(ref, WIN, &ref_s)) { fprintf(stderr, "locality: %s\n", sl_model_errmsg(ref)); goto out; }
    int V = sl_model_n_vocab(ref), n_layers = sl_model_n_layers(ref);
    sl_stats rs;
    sl_model_stats(ref, &rs);
    uint64_t expert_bytes = rs.expert_bytes;
    ref_logits = malloc((size_t)n_held * V * sizeof *ref_logits);
    if (!ref_logits) { fprintf(stderr, "locality: out of memory\n"); goto out; }
    if (decode_stream(ref_s, held, n_held, ref_logits, V, 1)) goto out;

    /* the pin profile, from training text: a streaming model holding every expert, prefetch off */
    mp.resident = 0;
    mp.cache_bytes = expert_bytes;
    mp.prefetch = -1;
    if (sl_model_open(a.model, &mp, &prof, &err)) { fprintf(stderr, "locality: %s\n", err.msg); goto out; }
    if (sl_session_new(prof, WIN, &prof_s)) { fprintf(stderr, "locality: %s\n", sl_model_errmsg(prof)); goto out; }
    scratch = malloc((size_t)V * sizeof *scratch);
    if (!scratch) { fprintf(stderr, "locality: out of memory\n"); goto out; }
    if (decode_stream(prof_s, train, n_train, scratch, V, 0)) goto out;
    if (sl_model_write_profile(prof, profile, &err)) { fprintf(stderr, "locality: %s\n", err.msg); goto out; }
    double t_setup = now_s() - t0;
    int E = profile_experts(profile), n_keys = n_layers * (E > 0 ? E : 0); /* keys by model layer */
    if (E <= 0) { fprintf(stderr, "locality: %s: not a profile\n", profile); goto out; }
    c_train = malloc((size_t)n_keys * sizeof *c_train);
    c_held = malloc((size_t)n_keys * sizeof *c_held);
    trace = malloc((size_t)n_held * n_keys * sizeof *trace);
    if (!c_train || !c_held || !trace || read_profile(profile, n_layers, E, c_train)) {
        fprintf(stderr, "locality: cannot read %s\n", profile);
        goto out;
    }

    for (int i = 0; i < N_POLICY_PCT; i++)
        for (int kind = K_LRU; kind <= K_PIN; kind++) runs[n_runs++] = (run){.kind = kind, .pct = POLICY_PCT[i]};
    for (int i = 0; i < N_PREFETCH_PCT; i++)
        for (int kind = K_PF_OFF; kind <= K_PF_ON; kind++)
            if (kind != K_PF_OFF || !in_policy_table(PREFETCH_PCT[i]))
                runs[n_runs++] = (run){.kind = kind, .pct = PREFETCH_PCT[i]};
    for (int i = 0; i < n_runs; i++)
        if (open_run(&a, &runs[i], expert_bytes, profile)) goto out;
    const run *tracer = find(runs, n_runs, K_LRU, 50);

    /* the held-out stream through every configuration */
    t0 = now_s();
    for (int j = 0; j < a.jobs; j++) {
        jobs[j] = (job){&a, runs, n_runs, j, held, n_held, V, n_layers, E, ref_logits, tracer, trace, -1, held_profile, 1};
        if (pthread_create(&tid[j], NULL, job_main, &jobs[j])) { fprintf(stderr, "locality: cannot start a thread\n"); a.jobs = j; goto join; }
    }
join:
    for (int j = 0; j < a.jobs; j++) pthread_join(tid[j], NULL);
    if (a.jobs < 1) goto out;
    int per_tok = -1;
    for (int j = 0; j < a.jobs; j++) {
        if (jobs[j].rc) goto out;
        if (jobs[j].per_tok > 0) per_tok = jobs[j].per_tok;
    }
    double t_held = now_s() - t0;
    for (int i = 0; i < n_runs; i++) {
        sl_model_stats(runs[i].m, &runs[i].st);
        runs[i].l_hits = calloc((size_t)n_layers, sizeof *runs[i].l_hits);
        runs[i].l_miss = calloc((size_t)n_layers, sizeof *runs[i].l_miss);
        if (!runs[i].l_hits || !runs[i].l_miss) { fprintf(stderr, "locality: out of memory\n"); goto out; }
        for (int L = 0; L < n_layers; L++) {
            uint64_t bytes;
            sl_model_layer_stats(runs[i].m, L, &runs[i].l_hits[L], &runs[i].l_miss[L], &bytes);
        }
    }
    if (per_tok < 1) { fprintf(stderr, "locality: no routing trace\n"); goto out; }
    for (int t = 0; t < n_held; t++) /* pack the trace to [n_held][per_tok] */
        memmove(trace + (size_t)t * per_tok, trace + (size_t)t * n_keys, (size_t)per_tok * sizeof *trace);
    int top_k = 0;
    for (int j = 0; j < per_tok; j++) top_k += trace[j] / E == trace[0] / E; /* token 0's keys in its first layer */
    int section_keys = per_tok / top_k * E;                                 /* MoE layers x experts */
    replays rp;
    for (int i = 0; i < N_POLICY_PCT; i++) {
        int slots = (int)find(runs, n_runs, K_LRU, POLICY_PCT[i])->st.cache_slots;
        rp.lru[i] = replay(trace, n_held, per_tok, top_k, n_keys, slots, 0, a.warmup);
        rp.opt[i] = replay(trace, n_held, per_tok, top_k, n_keys, slots, 1, a.warmup);
    }

    /* routing skew: the training profile against the held-out routing (the tracer saw all of it) */
    if (sl_model_write_profile(tracer->m, held_profile, &err) || read_profile(held_profile, n_layers, E, c_held)) {
        fprintf(stderr, "locality: %s: cannot write or read the held-out profile\n", held_profile);
        goto out;
    }
    skew sk;
    for (int i = 0; i < N_SKEW; i++) { /* ranked over all n_keys: keys of dense layers count 0 and rank last */
        double share = SKEW_PCT[i] / 100.0 * section_keys / n_keys;
        sk.train[i] = top_share(c_train, c_train, n_keys, share);
        sk.held[i] = top_share(c_held, c_held, n_keys, share);
        sk.cross[i] = top_share(c_train, c_held, n_keys, share);
    }
    print_tables(&a, runs, n_runs, n_layers, section_keys, &rp, &sk);
    printf("\nTimes: reference and profile %.1f s (%d + %d tokens); held-out stream %.1f s (%d tokens x %d "
           "configurations); %.1f s in all.\n", t_setup, n_held, n_train, t_held, n_held, n_runs, now_s() - t_start);
    if (write_csv(a.csv, runs, n_runs, section_keys, &rp)) goto out;
    fprintf(stderr, "locality: wrote %s\n", a.csv);
    rc = 0;
out:
    for (int i = 0; i < n_runs; i++) {
        sl_session_free(runs[i].s);
        sl_model_close(runs[i].m);
        free(runs[i].l_hits);
        free(runs[i].l_miss);
    }
    unlink(profile);
    unlink(held_profile);
    sl_session_free(ref_s);
    sl_model_close(ref);
    sl_session_free(prof_s);
    sl_model_close(prof);
    sl_tokenizer_free(tok);
    free(held);
    free(train);
    free(ref_logits);
    free(scratch);
    free(c_train);
    free(c_held);
    free(trace);
    return rc;
}
