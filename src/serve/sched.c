/*
 * sched.c — continuous batching over one model (sched.h). One thread runs steps; everything shared with
 * the submitting threads (the queue, cancel flags, counters) is under mu, and the thread never holds mu
 * while it evaluates or calls emit().
 *
 * A step: every active sequence that is decoding contributes its last sampled token; the sequences
 * still in their prompt share the step's prefill budget round-robin, each taking a chunk that is a
 * multiple of FWD_CHUNK tokens (or the rest of its prompt), so the micro-batch boundaries inside a
 * prompt are where sl_session_eval would put them alone and the logits are bitwise the same. After the
 * step each sequence whose prompt is done, or that decoded, samples its next token, exactly as
 * sl_generate would, and hands it to its textgen.
 *
 * When a batched step fails (an expert read error), its items are run one by one, so the error lands on
 * the requests whose own evaluation fails and the others go on.
 */
#include "serve/sched.h"
#include "util/clock.h"
#include "util/fileio.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <unistd.h>
#include <xxhash.h>

#include "text/sampler.h"
#include "text/textgen.h"
#include "util/err.h"

#define FWD_CHUNK 64 /* sl_session_eval's micro-batch: prompt chunks are multiples of it */

/* One prompt evaluated for several requests (srv_request.share_prompt_of): the one evaluating it (the
 * leader) leaves its state and logits here after its prompt, the others start from copies. refs and
 * leader are under mu; state, blob and logits belong to the scheduler thread. */
typedef struct pshare {
    int refs;              /* requests pointing here */
    struct sreq *leader;   /* evaluating the prompt; NULL once it ended (the next waiting one takes over) */
    int state;             /* 0: not yet; 1: blob and logits ready; -1: could not be kept (each its own) */
    void *blob;            /* sl_session_save after the prompt */
    size_t len;
    float *logits;         /* [V] after the prompt, before any sampling */
    int n_reused;          /* the leader's prompt positions from the prefix cache */
} pshare;

typedef struct sreq {
    uint64_t id;
    int32_t *prompt;
    int n_prompt, fed; /* prompt tokens evaluated so far */
    char **stop;
    int n_stop;
    srv_request p;
    srv_emit_fn emit;
    void *user;
    sl_session *sess;
    sl_sampler *smp;
    textgen tg;
    int tg_ok;
    float *logits;    /* [V] */
    float *lp_logits; /* [V] with logprobs: the logits as they were before sampling */
    srv_logprob lp;   /* with logprobs: the last sampled token's */
    int32_t next;     /* sampled, to be evaluated in the next step (-1: none) */
    int32_t *force;   /* with a thinking budget: the ids of "\n</think>\n\n", generated when it is spent */
    int n_force, i_force; /* i_force: how many of them were generated (0 until the budget is spent) */
    int snap_at;      /* prefix cache: keep the state when the prompt reaches this position (0: never) */
    int n_reused;     /* prompt positions restored from the prefix cache */
    int n_kept;       /* prompt positions after those that this request's state added to the cache */
    pshare *share;    /* with share_prompt_of (or followed by such requests); under mu */
    int prompt_done;  /* under mu: the prompt is evaluated (too late to start sharing it) */
    int waiting;      /* this step: waits for the leader's prompt (share_take) */
    int looked;       /* the prefix cache was looked up (cache_start) */
    int paged;        /* the pages of its whole prompt are reserved (KV pool: pages_for) */
    /* the tokens delivered so far (gen_ok 0: out of memory for them), for a preemption (unstick): its prompt and
     * all but the last of them evaluated again, the last one (next) pending as it was */
    int32_t *gen;
    int n_gen, cap_gen, gen_ok;
    int preempted;     /* its state was given back; the prompt is evaluated again without sampling after it */
    int n_replay, replayed; /* then gen[0 .. n_replay) one a step as decode rows, replayed of them so far */
    int shifted;       /* a context shift moved its positions: never preempted */
    int canceled;
    double t_submit, t_start, t_first;
    struct sreq *link;
} sreq;

/* A kept prefix: its tokens and the sequence state after them (scheduler thread only). */
typedef struct pentry {
    int32_t *tokens;
    int n;
    void *blob;
    size_t len;
    uint64_t used, key; /* LRU clock; xxh3 of the tokens (the file name under state_dir) */
    struct pentry *next;
} pentry;

struct srv_sched {
    sl_model *m;
    const sl_tokenizer *tok;
    srv_sched_params p;
    int V, n_ctx;
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sreq *q_head, *q_tail; /* waiting for a slot, oldest first */
    int n_queued;
    sreq **active;
    int n_active;       /* entries of active (finished ones leave it at the end of a step) */
    int n_live;         /* admitted and not finished: what the stats call active */
    sl_session **spare; /* sessions of finished requests, reset before reuse */
    int n_spare;
    int quit;
    uint64_t next_id;
    int rr; /* round-robin start among prefilling sequences */
    srv_sched_stats st;
    pentry *pc;         /* prefix cache (scheduler thread only; its counters in st under mu) */
    uint64_t pc_bytes, pc_clock;
    char *state_dir;
    /* step buffers (scheduler thread only) */
    sl_batch_item *items;
    sreq **item_req;
};

const double srv_latency_bounds[SRV_LAT_BUCKETS - 1] = {0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

/* Counts one latency into a histogram (under mu). */
static void observe(uint64_t *bucket, double *sum, uint64_t *count, double v) {
    int b = 0;
    while (b < SRV_LAT_BUCKETS - 1 && v > srv_latency_bounds[b]) b++;
    bucket[b]++;
    *sum += v;
    (*count)++;
}

srv_sched_params srv_sched_params_default(void) {
    srv_sched_params p = {16, 64, 0, 256, 0, NULL, 0, 0};
    return p;
}

static void req_free(sreq *r) {
    if (!r) return;
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->prompt);
    free(r->force);
    free(r->gen);
    free(r->logits);
    free(r->lp_logits);
    sl_sampler_free(r->smp);
    if (r->tg_ok) textgen_free(&r->tg);
    free(r);
}

/* r no longer takes part in its shared prompt (under mu); the last one frees it. */
static void share_leave(sreq *r) {
    pshare *f = r->share;
    if (!f) return;
    r->share = NULL;
    if (f->leader == r) f->leader = NULL;
    if (--f->refs) return;
    free(f->blob);
    free(f->logits);
    free(f);
}

/* Makes r (being submitted, under mu) share the prompt of the request `of`, when that one is still
 * queued or active, has not evaluated its prompt yet (unless it keeps it for others already) and has
 * the same prompt. Without memory for it, r evaluates its own. */
static void share_link(srv_sched *s, sreq *r, uint64_t of) {
    sreq *l = NULL;
    for (sreq *q = s->q_head; q && !l; q = q->link)
        if (q->id == of) l = q;
    for (int i = 0; i < s->n_active && !l; i++)
        if (s->active[i] && s->active[i]->id == of) l = s->active[i];
    if (!l || l->canceled || (l->prompt_done && !l->share) || l->n_prompt != r->n_prompt ||
        memcmp(l->prompt, r->prompt, (size_t)r->n_prompt * sizeof *r->prompt))
        return;
    if (!l->share) {
        if (!(l->share = calloc(1, sizeof *l->share))) return;
        l->share->refs = 1;
        l->share->leader = l;
    }
    r->share = l->share;
    r->share->refs++;
}

/* Counts the request's end and returns its session to the spare list (its KV pages given back: sl_session_trim),
 * then sends its done event, so whoever the event wakes sees the counters already updated. Called without mu. */
static void finish(srv_sched *s, sreq *r, sl_status status, const char *msg, sl_stop_reason why) {
    double t = clk_now_s();
    if (r->sess) { /* its pages back (the pool's: the others may wait for them) */
        sl_session_reset(r->sess);
        sl_session_trim(r->sess);
    }
    pthread_mutex_lock(&s->mu);
    if (r->sess) s->spare[s->n_spare++] = r->sess, r->sess = NULL;
    if (status == SL_OK) s->st.completed++;
    else if (status == SL_ECANCELED) s->st.canceled++;
    else s->st.failed++;
    if (r->t_start) s->n_live--;
    share_leave(r);
    /* the step works on a snapshot of the active list and writes it back later; until then another
     * thread (srv_cancel) must not find r there once it is freed */
    for (int i = 0; i < s->n_active; i++)
        if (s->active[i] == r) s->active[i] = NULL;
    pthread_mutex_unlock(&s->mu);
    srv_event ev;
    memset(&ev, 0, sizeof ev);
    ev.done = 1;
    ev.id = -1;
    ev.text = "";
    ev.status = status;
    ev.errmsg = msg ? msg : "";
    ev.stop = why;
    ev.n_prompt = r->n_prompt;
    ev.n_generated = r->tg_ok ? r->tg.n_generated : 0;
    ev.n_thinking = r->tg_ok ? r->tg.n_thinking : 0;
    ev.n_reused = r->n_reused;
    ev.n_kept = r->n_kept;
    ev.queued_s = (r->t_start ? r->t_start : t) - r->t_submit;
    ev.ttft_s = r->t_first ? r->t_first - r->t_submit : 0;
    ev.total_s = t - r->t_submit;
    r->emit(r->user, &ev);
    req_free(r);
}

/* Hands a sampled token to the request; returns 1 when the request is finished (and freed). */
static int deliver(srv_sched *s, sreq *r, int32_t id) {
    const char *text;
    size_t len;
    sl_stop_reason why = SL_STOP_LENGTH;
    int room = s->p.context_shift || sl_session_n_past(r->sess) < s->n_ctx;
    int end = textgen_push(&r->tg, id, room, &text, &len, &why);
    int first = !r->t_first;
    if (first) r->t_first = clk_now_s();
    pthread_mutex_lock(&s->mu);
    s->st.generated_tokens++;
    if (first) observe(s->st.ttft_bucket, &s->st.ttft_sum_s, &s->st.ttft_count, r->t_first - r->t_submit);
    int canceled = r->canceled;
    pthread_mutex_unlock(&s->mu);
    if (end < 0) {
        finish(s, r, SL_ENOMEM, "out of memory", SL_STOP_LENGTH);
        return 1;
    }
    srv_event ev;
    memset(&ev, 0, sizeof ev);
    ev.id = id;
    ev.text = text;
    ev.len = len;
    ev.logprob = r->p.logprobs > 0 ? &r->lp : NULL;
    ev.n_reused = r->n_reused;
    ev.n_kept = r->n_kept;
    int stop_cb = canceled ? 1 : r->emit(r->user, &ev);
    if (end) {
        finish(s, r, SL_OK, NULL, why);
        return 1;
    }
    if (stop_cb) {
        finish(s, r, SL_ECANCELED, "canceled", SL_STOP_CALLBACK);
        return 1;
    }
    if (r->p.deadline > 0 && clk_now_s() >= r->p.deadline) { /* out of time: ends as max_tokens would */
        ev.id = -1;
        ev.logprob = NULL;
        ev.text = textgen_flush(&r->tg, &ev.len);
        if (ev.text && ev.len) r->emit(r->user, &ev);
        finish(s, r, ev.text ? SL_OK : SL_ENOMEM, ev.text ? NULL : "out of memory", SL_STOP_LENGTH);
        return 1;
    }
    if (r->gen_ok && r->n_gen == r->cap_gen) {
        int cap = r->cap_gen ? 2 * r->cap_gen : 64;
        int32_t *g = realloc(r->gen, (size_t)cap * sizeof *g);
        if (g) r->gen = g, r->cap_gen = cap;
        else r->gen_ok = 0; /* never preempted */
    }
    if (r->gen_ok) r->gen[r->n_gen++] = id;
    r->next = id;
    return 0;
}

/* The k (<= SRV_MAX_TOP_LOGPROBS) most likely ids of x[V] (-inf and NaN never), most likely first, ties to the
 * lower id, into out; their count: the sampler's one-pass top-k (text/sampler.h sampler_top_k). */
static int top_ids(const float *x, int V, int k, int32_t *out) {
    sampler_cand c[SRV_MAX_TOP_LOGPROBS];
    if (k <= 0) return 0;
    const int n = sampler_top_k(x, V, k < SRV_MAX_TOP_LOGPROBS ? k : SRV_MAX_TOP_LOGPROBS, c, 1);
    for (int i = 0; i < n; i++) out[i] = c[i].id;
    return n;
}

/* r->lp of the token id, from the logits saved before sampling (r->lp_logits). */
static void logprob_of(sreq *r, int V, int32_t id) {
    const float *x = r->lp_logits;
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
    double sum = 0;
    for (int v = 0; v < V; v++)
        if (x[v] != -INFINITY) sum += exp((double)x[v] - mx);
    double lse = mx + log(sum);
    r->lp.logprob = (float)(x[id] - lse);
    r->lp.n_top = top_ids(x, V, r->p.logprobs - 1, r->lp.top_id);
    for (int i = 0; i < r->lp.n_top; i++) r->lp.top_logprob[i] = (float)(x[r->lp.top_id[i]] - lse);
}

/* Samples from the request's logits, as sl_generate does; with a grammar, from the tokens it allows
 * (the others' logits -inf), which it then accepts. */
static int sample_and_deliver(srv_sched *s, sreq *r) {
    if (r->p.grammar && gr_mask(r->p.grammar, r->p.vocab, r->logits) < 0) {
        finish(s, r, SL_ENOMEM, "out of memory", SL_STOP_LENGTH);
        return 1;
    }
    if (r->p.logprobs > 0) memcpy(r->lp_logits, r->logits, (size_t)s->V * sizeof *r->logits);
    /* a spent thinking budget: the block's closing tag instead of what the model would say */
    int forcing = r->n_force && r->i_force < r->n_force &&
                  (r->i_force > 0 || (r->tg.phase == TG_THINK && r->tg.n_thinking >= r->p.think_budget));
    int32_t id = forcing ? r->force[r->i_force++] : sl_sampler_sample(r->smp, r->logits);
    if (r->p.logprobs > 0) logprob_of(r, s->V, id);
    sl_sampler_accept(r->smp, id);
    if (r->p.grammar) gr_accept_token(r->p.grammar, r->p.vocab, id);
    return deliver(s, r, id);
}

/* Takes queued requests into free slots (under mu). */
static void admit(srv_sched *s) {
    while (s->q_head && s->n_active < s->p.max_active) {
        sreq *r = s->q_head;
        s->q_head = r->link;
        if (!s->q_head) s->q_tail = NULL;
        s->n_queued--;
        r->link = NULL;
        r->t_start = clk_now_s();
        observe(s->st.queue_bucket, &s->st.queue_sum_s, &s->st.queue_count, r->t_start - r->t_submit);
        if (s->n_spare) r->sess = s->spare[--s->n_spare];
        s->active[s->n_active++] = r;
        s->n_live++;
    }
}

/* Removes finished requests (marked by a NULL entry) from the active list, keeping order (under mu). */
static void compact(srv_sched *s) {
    int j = 0;
    for (int i = 0; i < s->n_active; i++)
        if (s->active[i]) s->active[j++] = s->active[i];
    s->n_active = j;
}

/* ---- prefix cache ---- */

static void pc_count(srv_sched *s) {
    uint64_t n = 0;
    for (pentry *e = s->pc; e; e = e->next) n++;
    pthread_mutex_lock(&s->mu);
    s->st.state_entries = n;
    s->st.state_bytes = s->pc_bytes;
    pthread_mutex_unlock(&s->mu);
}

static char *pc_path(const srv_sched *s, uint64_t key) {
    char *p = malloc(strlen(s->state_dir) + 32);
    if (p) sprintf(p, "%s/%016llx.state", s->state_dir, (unsigned long long)key);
    return p;
}

static void pc_drop(srv_sched *s, pentry **link) {
    pentry *e = *link;
    *link = e->next;
    s->pc_bytes -= e->len;
    if (s->state_dir) {
        char *p = pc_path(s, e->key);
        if (p) unlink(p);
        free(p);
    }
    free(e->tokens);
    free(e->blob);
    free(e);
}

/* Keeps blob (taken over) as the state after tokens[0..n); the least recently used go to make room.
 * Returns 1 when it is a new entry, 0 when it was kept already or could not be. */
static int pc_insert(srv_sched *s, const int32_t *tokens, int n, void *blob, size_t len, int persist, sl_session *sess) {
    uint64_t key = XXH3_64bits(tokens, (size_t)n * sizeof *tokens);
    for (pentry *e = s->pc; e; e = e->next)
        if (e->key == key && e->n == n && !memcmp(e->tokens, tokens, (size_t)n * sizeof *tokens)) {
            e->used = ++s->pc_clock;
            free(blob);
            return 0;
        }
    if (len > s->p.state_cache_bytes) {
        free(blob);
        return 0;
    }
    while (s->pc && s->pc_bytes + len > s->p.state_cache_bytes) {
        pentry **lru = &s->pc;
        for (pentry **l = &s->pc; *l; l = &(*l)->next)
            if ((*l)->used < (*lru)->used) lru = l;
        pc_drop(s, lru);
    }
    pentry *e = calloc(1, sizeof *e);
    int32_t *t = malloc((size_t)n * sizeof *t);
    if (!e || !t) {
        free(e);
        free(t);
        free(blob);
        return 0;
    }
    memcpy(t, tokens, (size_t)n * sizeof *t);
    *e = (pentry){t, n, blob, len, ++s->pc_clock, key, s->pc};
    s->pc = e;
    s->pc_bytes += len;
    if (persist && s->state_dir && sess) { /* best effort: the memory copy serves either way */
        char *p = pc_path(s, key);
        sl_error err;
        if (p) sl_session_save_file(sess, p, tokens, (size_t)n * sizeof *tokens, &err);
        free(p);
    }
    pc_count(s);
    return 1;
}

/* Starts r from the longest kept prefix of its prompt (at least one prompt token is left to evaluate,
 * for the logits). */
static void pc_lookup(srv_sched *s, sreq *r) {
    pentry *best = NULL;
    for (pentry *e = s->pc; e; e = e->next)
        if (e->n < r->n_prompt && (!best || e->n > best->n) && !memcmp(e->tokens, r->prompt, (size_t)e->n * sizeof *r->prompt))
            best = e;
    if (best && sl_session_load(r->sess, best->blob, best->len) == SL_OK) {
        sl_session_set_tokens(r->sess, r->prompt, best->n); /* for a context shift later (out of memory: none) */
        best->used = ++s->pc_clock;
        r->fed = r->n_reused = best->n;
    }
    pthread_mutex_lock(&s->mu);
    if (r->n_reused) {
        s->st.state_hits++;
        s->st.reused_tokens += (uint64_t)r->n_reused;
    } else {
        s->st.state_misses++;
    }
    pthread_mutex_unlock(&s->mu);
}

/* A name of ours: 16 hex digits and ".state" (pc_path). */
static int pc_name(const char *nm) {
    for (int i = 0; i < 16; i++)
        if (!strchr("0123456789abcdef", nm[i]) || !nm[i]) return 0;
    return !strncmp(nm + 16, ".state", 6);
}

/* The temporaries of state files a killed server left ("<16 hex>.state.tmp.<dead pid>", written by
 * sl_session_save_file): only those; other programs' "*.tmp.<pid>" in the folder are theirs. */
static void pc_remove_temps(srv_sched *s) {
    DIR *d = opendir(s->state_dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!pc_name(de->d_name) || strncmp(de->d_name + 22, ".tmp.", 5)) continue;
        char *p = malloc(strlen(s->state_dir) + 24);
        if (!p) break;
        sprintf(p, "%s/%.22s", s->state_dir, de->d_name);
        fio_remove_stale_temps(p, NULL); /* "<p>.tmp.<pid>" of a dead pid */
        free(p);
    }
    closedir(d);
}

/* The states a previous scheduler left in state_dir; damaged or foreign files are skipped. */
static void pc_load_dir(srv_sched *s) {
    pc_remove_temps(s);
    DIR *d = opendir(s->state_dir);
    if (!d) return;
    sl_session *tmp = NULL;
    if (sl_session_new(s->m, s->n_ctx, &tmp)) {
        closedir(d);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t nl = strlen(de->d_name);
        if (nl != 22 || strcmp(de->d_name + 16, ".state")) continue;
        char *p = malloc(strlen(s->state_dir) + nl + 2);
        if (!p) break;
        sprintf(p, "%s/%s", s->state_dir, de->d_name);
        void *extra = NULL, *blob = NULL;
        size_t xl = 0, len = 0;
        sl_error err;
        if (sl_session_load_file(tmp, p, &extra, &xl, &err) == SL_OK && xl && xl % sizeof(int32_t) == 0 &&
            (int)(xl / sizeof(int32_t)) == sl_session_n_past(tmp) && sl_session_save(tmp, &blob, &len) == SL_OK)
            pc_insert(s, extra, (int)(xl / sizeof(int32_t)), blob, len, 0, NULL);
        free(extra);
        free(p);
    }
    closedir(d);
    sl_session_free(tmp);
}

/* With the prefix cache: r starts from the longest kept prefix of its prompt, and keeps a state on the
 * way (scheduler thread). */
static void cache_start(srv_sched *s, sreq *r) {
    if (!s->p.state_cache_bytes || r->looked) return;
    r->looked = 1;
    pc_lookup(s, r);
    r->snap_at = r->n_prompt / FWD_CHUNK * FWD_CHUNK;
    if (r->snap_at <= r->n_reused) r->snap_at = 0;
}

/* A new active request's session and sampler (scheduler thread, without mu). One that shares another's
 * prompt looks the prefix cache up only when it has to evaluate the prompt itself (share_take). */
static sl_status activate(srv_sched *s, sreq *r, sl_error *err) {
    if (!r->sess && sl_session_new(s->m, s->n_ctx, &r->sess))
        return err_set(err, SL_ENOMEM, "out of memory for a session of %d positions", s->n_ctx);
    if (sl_sampler_new(&r->p.sampling, s->V, &r->smp)) return err_set(err, SL_ENOMEM, "out of memory");
    for (int i = 0; i < r->n_prompt; i++) sl_sampler_accept(r->smp, r->prompt[i]);
    pthread_mutex_lock(&s->mu);
    int follows = r->share && r->share->leader != r;
    pthread_mutex_unlock(&s->mu);
    if (!follows) cache_start(s, r);
    return SL_OK;
}

/* A generating sequence at n_ctx (context_shift): its oldest half after n_keep dropped (sl_session_shift). 1 when
 * that failed and r is finished, else 0. */
static int make_room(srv_sched *s, sreq *r) {
    const int past = sl_session_n_past(r->sess), keep = s->p.n_keep < past ? s->p.n_keep : past;
    if (past < s->n_ctx || past - keep < 2) return 0;
    r->shifted = 1; /* its positions are no longer its prompt and tokens: never preempted */
    if (!sl_session_shift(r->sess, keep, (past - keep) / 2)) return 0;
    char msg[sizeof ((sl_error *)0)->msg];
    snprintf(msg, sizeof msg, "%s", sl_session_errmsg(r->sess));
    finish(s, r, SL_ERANGE, msg, SL_STOP_LENGTH);
    return 1;
}

/* The leader r has evaluated its prompt: keeps the state and logits for the requests sharing it
 * (before sampling changes the logits). */
static void share_give(srv_sched *s, sreq *r) {
    pthread_mutex_lock(&s->mu);
    r->prompt_done = 1;
    pshare *f = r->share && r->share->leader == r && !r->share->state ? r->share : NULL;
    pthread_mutex_unlock(&s->mu);
    if (!f) return;
    f->logits = malloc((size_t)s->V * sizeof *f->logits);
    if (!f->logits || sl_session_save(r->sess, &f->blob, &f->len) != SL_OK) {
        f->state = -1; /* each evaluates its own */
        return;
    }
    memcpy(f->logits, r->logits, (size_t)s->V * sizeof *f->logits);
    f->n_reused = r->n_reused;
    f->state = 1;
}

/* An active r that shares another's prompt and has not started: 1 while it waits for the leader's
 * prompt (or leads now, the leader having ended first: then it evaluates it, 0); 2 when it starts from
 * the leader's state now (its prompt done, the logits of its first token in r->logits); 0 otherwise
 * (scheduler thread, without mu). */
static int share_take(srv_sched *s, sreq *r) {
    pthread_mutex_lock(&s->mu);
    pshare *f = r->fed < r->n_prompt ? r->share : NULL;
    int lead = 0;
    if (f && !f->state && !f->leader) f->leader = r; /* the leader ended before its prompt did */
    if (f) lead = f->leader == r;
    pthread_mutex_unlock(&s->mu);
    if (!f || f->state < 0 || (lead && !f->state)) {
        if (lead) cache_start(s, r);
        return 0;
    }
    if (!f->state) return 1;
    if (sl_session_load(r->sess, f->blob, f->len) != SL_OK) return 0; /* evaluates its own */
    sl_session_set_tokens(r->sess, r->prompt, r->n_prompt); /* for a context shift (out of memory: none) */
    memcpy(r->logits, f->logits, (size_t)s->V * sizeof *r->logits);
    r->fed = r->n_prompt;
    r->n_reused = f->n_reused;
    r->snap_at = 0;
    return 2;
}

/* The step's requests before their evaluation: the canceled ones end, new ones get a session and
 * sampler, those sharing a prompt wait for it or start from it. Finished ones leave act (NULL); returns
 * whether any did. */
static int step_begin(srv_sched *s, sreq **act, int n) {
    int gone = 0;
    for (int i = 0; i < n; i++) {
        sreq *r = act[i];
        int canceled;
        pthread_mutex_lock(&s->mu);
        canceled = r->canceled;
        pthread_mutex_unlock(&s->mu);
        sl_error err = {0};
        if (canceled) {
            finish(s, r, SL_ECANCELED, "canceled", SL_STOP_CALLBACK);
            act[i] = NULL;
            gone = 1;
        } else if (!r->smp && activate(s, r, &err)) {
            finish(s, r, err.status, err.msg, SL_STOP_LENGTH);
            act[i] = NULL;
            gone = 1;
        } else if ((r->waiting = share_take(s, r)) == 2) { /* its prompt done: its first token now */
            r->waiting = 0;
            if (sample_and_deliver(s, r)) act[i] = NULL, gone = 1;
        }
    }
    return gone;
}

/* The KV pages for r's next n positions (sl_session_reserve); a request whose prompt has not started takes its
 * whole prompt's first, unless *hold (an earlier one waits for its own: first come, first served), and waits
 * holding none. 0, or 1 when the pool has them not now (r waits this step; *hold set for a new one). Other
 * failures are left to the evaluation. */
static int pages_for(sreq *r, int n, int *hold) {
    if (!r->paged) {
        const int ctx = sl_session_n_ctx(r->sess), want = r->n_prompt + 1 < ctx ? r->n_prompt + 1 : ctx;
        if (*hold || sl_session_reserve(r->sess, want) == SL_EBUSY) {
            if (!sl_session_n_past(r->sess)) sl_session_trim(r->sess); /* waits holding no pages */
            return *hold = 1;
        }
        r->paged = 1;
    }
    return sl_session_reserve(r->sess, sl_session_n_past(r->sess) + n) == SL_EBUSY;
}

/* The step's rows into s->items: a token for every decoding sequence, then prompt chunks round-robin within the
 * prefill budget; a sequence whose pages the KV pool cannot give now waits (counted in *waits). *stuck: the
 * youngest such one, or NULL. Returns the item count. */
static int build_step(srv_sched *s, sreq **act, int n, int *gone, sreq **stuck, int *waits) {
    int ni = 0, n_prefill = 0, hold = 0;
    *stuck = NULL;
    for (int i = 0; i < n; i++) {
        sreq *r = act[i];
        if (!r || r->waiting) continue;
        if (r->fed < r->n_prompt) {
            n_prefill++;
            continue;
        }
        if (s->p.context_shift && make_room(s, r)) { /* finished: the shift failed */
            act[i] = NULL;
            *gone = 1;
            continue;
        }
        if (pages_for(r, 1, &hold)) {
            if (!*stuck || r->t_start > (*stuck)->t_start) *stuck = r;
            (*waits)++;
            continue;
        }
        const int replay = r->replayed < r->n_replay; /* a preempted one's tokens again, no logits */
        s->items[ni] = (sl_batch_item){r->sess, replay ? r->gen + r->replayed : &r->next, 1, replay ? NULL : r->logits, 0};
        s->item_req[ni++] = r;
    }
    int budget = s->p.prefill_chunk;
    for (int k = 0; k < n && n_prefill && budget > 0; k++) {
        sreq *r = act[(s->rr + k) % n];
        if (!r || r->waiting || r->fed >= r->n_prompt) continue;
        int share = budget / n_prefill > FWD_CHUNK ? budget / n_prefill : FWD_CHUNK;
        share -= share % FWD_CHUNK;
        int left = r->n_prompt - r->fed, c = left <= share ? left : share;
        if (r->snap_at > r->fed && r->fed + c > r->snap_at) c = r->snap_at - r->fed; /* end a chunk there */
        n_prefill--;
        if (pages_for(r, c, &hold)) {
            if (!*stuck || r->t_start > (*stuck)->t_start) *stuck = r;
            (*waits)++;
            continue;
        }
        budget -= c;
        s->items[ni] = (sl_batch_item){r->sess, r->prompt + r->fed, c, c == left ? r->logits : NULL, 0};
        s->item_req[ni++] = r;
    }
    if (n) s->rr = (s->rr + 1) % n;
    return ni;
}

/* Every sequence of the step waits for KV pages (stuck: the youngest waiting). The youngest that holds its prompt's
 * pages and has generated (its tokens known, never shifted) gives every page back and evaluates its prompt and
 * tokens again as pages come: the prompt in the chunks of its first time, then the tokens one a step, so its state
 * is bitwise what it was, and its pending token goes on from there (nothing is sampled or delivered twice). Without
 * such a one the youngest waiting ends with SL_EBUSY (a prompt the pool cannot hold). 1 when a request ended. */
static int unstick(srv_sched *s, sreq **act, int n, sreq *stuck) {
    sreq *v = NULL;
    for (int i = 0; i < n; i++) {
        sreq *r = act[i];
        if (r && r->paged && r->gen_ok && !r->shifted && r->n_gen > 0 && (!v || r->t_start > v->t_start)) v = r;
    }
    pthread_mutex_lock(&s->mu);
    if (v) s->st.kv_preempted++;
    else s->st.kv_evicted++;
    pthread_mutex_unlock(&s->mu);
    if (v) {
        sl_session_reset(v->sess);
        sl_session_trim(v->sess);
        v->fed = v->paged = v->snap_at = v->replayed = 0;
        v->preempted = 1;
        v->n_replay = v->n_gen - 1;
        return 0;
    }
    char msg[sizeof ((sl_error *)0)->msg];
    snprintf(msg, sizeof msg, "%s (lower --parallel or --ctx, or raise --kv-pool)", sl_session_errmsg(stuck->sess));
    finish(s, stuck, SL_EBUSY, msg, SL_STOP_LENGTH);
    for (int j = 0; j < n; j++)
        if (act[j] == stuck) act[j] = NULL;
    return 1;
}

static void step(srv_sched *s) {
    /* snapshot the active list; new arrivals wait for the next step */
    pthread_mutex_lock(&s->mu);
    admit(s);
    int n = s->n_active;
    sreq **act = s->item_req + s->p.max_active; /* second half of item_req: the snapshot */
    memcpy(act, s->active, (size_t)n * sizeof *act);
    pthread_mutex_unlock(&s->mu);

    int gone = step_begin(s, act, n);
    sreq *stuck = NULL;
    int waits = 0;
    int ni = build_step(s, act, n, &gone, &stuck, &waits);
    if (waits) {
        pthread_mutex_lock(&s->mu);
        s->st.kv_waits += (uint64_t)waits;
        pthread_mutex_unlock(&s->mu);
    }
    if (!ni && stuck && unstick(s, act, n, stuck)) gone = 1; /* every sequence waits for KV pages */
    if (ni) {
        double t0 = clk_now_s();
        sl_status st = sl_batch_eval(s->m, s->items, ni);
        double dt = clk_now_s() - t0;
        pthread_mutex_lock(&s->mu);
        s->st.steps++;
        for (int i = 0; i < ni; i++) s->st.step_rows += (uint64_t)s->items[i].n_tokens;
        s->st.busy_s += dt;
        pthread_mutex_unlock(&s->mu);
        for (int i = 0; i < ni; i++) {
            sreq *r = s->item_req[i];
            sl_status ist = st;
            if (st != SL_OK) /* find out whose evaluation fails: each item on its own */
                ist = sl_session_eval(r->sess, s->items[i].tokens, s->items[i].n_tokens, s->items[i].logits, 0);
            if (ist != SL_OK) {
                char msg[sizeof ((sl_error *)0)->msg];
                snprintf(msg, sizeof msg, "%s", sl_session_errmsg(r->sess));
                finish(s, r, ist, msg, SL_STOP_LENGTH);
                gone = 1;
                for (int j = 0; j < n; j++)
                    if (act[j] == r) act[j] = NULL;
                continue;
            }
            int was_prefill = s->items[i].tokens != &r->next;
            if (was_prefill && r->fed >= r->n_prompt) { /* a preempted one's token evaluated again */
                r->replayed++;
                continue;
            }
            if (was_prefill) {
                r->fed += s->items[i].n_tokens;
                void *blob = NULL;
                size_t len = 0;
                if (r->fed == r->snap_at && sl_session_save(r->sess, &blob, &len) == SL_OK &&
                    pc_insert(s, r->prompt, r->fed, blob, len, 1, r->sess))
                    r->n_kept = r->fed - r->n_reused;
                if (r->fed < r->n_prompt || r->preempted) continue; /* preempted: its next token is pending */
                share_give(s, r);
            }
            if (sample_and_deliver(s, r)) {
                gone = 1;
                for (int j = 0; j < n; j++)
                    if (act[j] == r) act[j] = NULL;
            }
        }
    }
    if (gone) {
        pthread_mutex_lock(&s->mu);
        /* only this thread changes the active list: the snapshot's NULLs mark what finished */
        for (int i = 0; i < n; i++) s->active[i] = act[i];
        compact(s);
        pthread_mutex_unlock(&s->mu);
    }
}

static void *loop(void *arg) {
    srv_sched *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->quit) {
        if (!s->n_active && !s->q_head) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        step(s);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

sl_status srv_sched_new(sl_model *m, const sl_tokenizer *tok, const srv_sched_params *p, srv_sched **out,
                        sl_error *err) {
    *out = NULL;
    srv_sched *s = calloc(1, sizeof *s);
    if (!s) return err_set(err, SL_ENOMEM, "out of memory");
    s->m = m;
    s->tok = tok;
    s->p = p ? *p : srv_sched_params_default();
    if (s->p.max_active < 1) s->p.max_active = 16;
    if (s->p.max_queue < 0) s->p.max_queue = 0;
    if (s->p.prefill_chunk < FWD_CHUNK) s->p.prefill_chunk = FWD_CHUNK;
    s->p.state_dir = NULL; /* our own copy below */
    s->V = sl_model_n_vocab(m);
    s->n_ctx = s->p.n_ctx > 0 && s->p.n_ctx < sl_model_n_ctx(m) ? s->p.n_ctx : sl_model_n_ctx(m);
    s->active = calloc((size_t)s->p.max_active, sizeof *s->active);
    s->spare = calloc((size_t)s->p.max_active, sizeof *s->spare);
    s->items = calloc((size_t)s->p.max_active, sizeof *s->items);
    s->item_req = calloc((size_t)s->p.max_active * 2, sizeof *s->item_req);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (!s->active || !s->spare || !s->items || !s->item_req) {
        srv_sched_free(s);
        return err_set(err, SL_ENOMEM, "out of memory");
    }
    if (p && p->state_dir && p->state_cache_bytes) {
        if (!(s->state_dir = strdup(p->state_dir))) {
            srv_sched_free(s);
            return err_set(err, SL_ENOMEM, "out of memory");
        }
        pc_load_dir(s);
    }
    if (pthread_create(&s->th, NULL, loop, s)) {
        srv_sched_free(s);
        return err_set(err, SL_ENOMEM, "cannot start the scheduler thread");
    }
    s->started = 1;
    *out = s;
    return SL_OK;
}

void srv_sched_free(srv_sched *s) {
    if (!s) return;
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->quit = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
    }
    /* nothing runs now: whatever is left is told it was canceled */
    while (s->q_head) {
        sreq *r = s->q_head;
        s->q_head = r->link;
        finish(s, r, SL_ECANCELED, "the server is shutting down", SL_STOP_CALLBACK);
    }
    for (int i = 0; i < s->n_active; i++)
        if (s->active[i]) finish(s, s->active[i], SL_ECANCELED, "the server is shutting down", SL_STOP_CALLBACK);
    for (int i = 0; i < s->n_spare; i++) sl_session_free(s->spare[i]);
    while (s->pc) { /* the memory copies; files under state_dir stay for the next scheduler */
        pentry *e = s->pc;
        s->pc = e->next;
        free(e->tokens);
        free(e->blob);
        free(e);
    }
    free(s->state_dir);
    free(s->active);
    free(s->spare);
    free(s->items);
    free(s->item_req);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

sl_status srv_submit(srv_sched *s, const srv_request *rq, srv_emit_fn emit, void *user, uint64_t *id, sl_error *err) {
    if (!rq || !emit || rq->n_prompt < 1 || !rq->prompt) return err_set(err, SL_EINVAL, "empty prompt: nothing to generate from");
    if (rq->n_prompt > s->n_ctx)
        return err_set(err, SL_ERANGE, "the prompt of %d tokens does not fit the context of %d positions", rq->n_prompt,
                      s->n_ctx);
    for (int i = 0; i < rq->n_prompt; i++)
        if (rq->prompt[i] < 0 || rq->prompt[i] >= s->V)
            return err_set(err, SL_ERANGE, "token %d at index %d is out of range [0, %d)", rq->prompt[i], i, s->V);
    sreq *r = calloc(1, sizeof *r);
    if (!r) return err_set(err, SL_ENOMEM, "out of memory");
    r->p = *rq;
    r->n_prompt = rq->n_prompt;
    r->prompt = malloc((size_t)rq->n_prompt * sizeof *r->prompt);
    r->logits = malloc((size_t)s->V * sizeof *r->logits);
    r->stop = rq->n_stop > 0 ? calloc((size_t)rq->n_stop, sizeof *r->stop) : NULL;
    if (rq->logprobs > 0) {
        r->p.logprobs = rq->logprobs > SRV_MAX_TOP_LOGPROBS + 1 ? SRV_MAX_TOP_LOGPROBS + 1 : rq->logprobs;
        r->lp_logits = malloc((size_t)s->V * sizeof *r->lp_logits);
    }
    int ok = r->prompt && r->logits && (rq->n_stop <= 0 || r->stop) && (rq->logprobs <= 0 || r->lp_logits);
    for (int i = 0; ok && i < rq->n_stop; i++) {
        r->stop[i] = strdup(rq->stop[i] ? rq->stop[i] : "");
        ok = r->stop[i] != NULL;
        r->n_stop = i + 1;
    }
    if (ok) {
        memcpy(r->prompt, rq->prompt, (size_t)rq->n_prompt * sizeof *r->prompt);
        sl_gen_params gp = sl_gen_params_default();
        gp.max_tokens = rq->max_tokens;
        gp.stop = (const char *const *)r->stop;
        gp.n_stop = r->n_stop;
        gp.skip_special = rq->skip_special;
        ok = textgen_init(&r->tg, s->tok, &gp) == SL_OK;
        r->tg_ok = ok;
        if (ok) textgen_think(&r->tg, rq->think);
        r->tg.answer_only = ok && rq->think && rq->answer_only;
        if (ok && rq->think && rq->think_budget > 0 && s->tok && !rq->grammar) {
            sl_error e2 = {0};
            static const char close_tag[] = "\n</think>\n\n";
            ok = sl_tokenize(s->tok, close_tag, sizeof close_tag - 1, 0, &r->force, &r->n_force, &e2) == SL_OK;
        }
    }
    if (!ok) {
        req_free(r);
        return err_set(err, SL_ENOMEM, "out of memory");
    }
    r->emit = emit;
    r->user = user;
    r->next = -1;
    r->gen_ok = 1;
    r->t_submit = clk_now_s();
    pthread_mutex_lock(&s->mu);
    if (s->n_queued >= s->p.max_queue && s->n_active >= s->p.max_active) {
        s->st.rejected++;
        pthread_mutex_unlock(&s->mu);
        req_free(r);
        return err_set(err, SL_EBUSY, "the server is busy: %d requests are queued (the limit)", s->p.max_queue);
    }
    r->id = ++s->next_id;
    if (rq->share_prompt_of) share_link(s, r, rq->share_prompt_of);
    if (s->q_tail) s->q_tail->link = r;
    else s->q_head = r;
    s->q_tail = r;
    s->n_queued++;
    s->st.requests++;
    s->st.prompt_tokens += (uint64_t)rq->n_prompt;
    if (id) *id = r->id;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return SL_OK;
}

void srv_cancel(srv_sched *s, uint64_t id) {
    pthread_mutex_lock(&s->mu);
    for (sreq *r = s->q_head; r; r = r->link)
        if (r->id == id) r->canceled = 1;
    for (int i = 0; i < s->n_active; i++)
        if (s->active[i] && s->active[i]->id == id) s->active[i]->canceled = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void srv_sched_stats_get(srv_sched *s, srv_sched_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    out->active = s->n_live;
    out->queued = s->n_queued;
    pthread_mutex_unlock(&s->mu);
    out->kv_pool_used = sl_model_kv_pool_used(s->m, &out->kv_pool_limit);
}
