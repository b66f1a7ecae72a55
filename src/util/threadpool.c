/*
 * threadpool.c — see threadpool.h. A job is a (fn, ctx, n, chunk) tuple published under the mutex with a
 * generation counter. A static job (pool_for) gives thread i the i-th chunk and waits for every worker; a
 * dynamic one (pool_for_any) lets every thread claim chunks from `ticket` = (generation << 32 | next
 * chunk), so a claim can only take a chunk of the job the claimer read (a worker that wakes late for a
 * finished job claims nothing), and waits for the chunks to be done, not for the workers.
 *
 * Waiting is a short spin, then sleep. A decode step is ~75 parallel-fors 5-40 us apart, and waking a thread
 * asleep on a futex costs tens of microseconds in a VM (an IPI and a vCPU wake-up), often more than the job:
 * so a worker that finishes a job watches the generation for up to POOL_SPIN_NS before sleeping on `go`, and
 * a caller that finishes its share watches the job's counter likewise before sleeping on `done`. The spin
 * only executes pause (never sched_yield: on a loaded machine a yield hands the core to another process for
 * a whole time slice, which is how an earlier polling pool, dbc3ba4, lost 3-6x under load), and it is
 * bounded, so an idle pool sleeps and a loaded machine loses at most POOL_SPIN_NS of one core per hand-off.
 * A job's parameters go in one of two slots (by the generation's parity) before the generation moves, and
 * workers read them without the mutex: a worker that saw the new generation while the caller still held the
 * mutex used to block on it, and the caller's unlock then had to wake it through the kernel (tens of
 * microseconds in a VM), the very hand-off the spin is there to avoid. The mutex is taken only to sleep and
 * to wake a sleeper, and only when one is asleep (`sleepers`, `waiting`), so a hand-off between spinning
 * threads makes no system call and takes no lock.
 *
 * A dynamic job's chunks shrink towards its end (guided self-scheduling: the rest / (threads x POOL_CHUNKS),
 * between POOL_MIN_CHUNK and POOL_MAX_CHUNK items), so its threads end within a small chunk of each other.
 */
#include "util/clock.h"
#include "util/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define POOL_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define POOL_PAUSE() __asm__ __volatile__("yield")
#else
#define POOL_PAUSE() ((void)0)
#endif

#ifndef POOL_SPIN_NS
#define POOL_SPIN_NS 50000L /* 50 us: longer than most gaps of a decode step, short against a token */
#endif

/* pool_hint's prefetches: __builtin_prefetch's locality. 0 (prefetchnta): in a microbenchmark (a 4 MiB
 * dynamic job after 10-30 us of the caller's serial work, the hint's first 0.25-2 MiB, in-process alternation)
 * it took 4-18 us off the job, against 0-20 us for 3 (T0) and ~2 us for 1 (T2). */
#ifndef POOL_HINT_LOCALITY
#define POOL_HINT_LOCALITY 0
#endif

#ifndef POOL_CHUNKS
#define POOL_CHUNKS 4
#endif
/* At most this many items a chunk: the threads of a job end within one chunk of each other, and a decode
 * step's LM head (151,936 rows, ~2.6 ms a chunk at four chunks per thread) left one thread idle for 2.6 ms
 * per token at its end (a timed build, 2 threads); 4096 rows is ~0.3 ms of it. */
#ifndef POOL_MAX_CHUNK
#define POOL_MAX_CHUNK 4096
#endif
/* Chunks shrink as a dynamic job runs out (guided: the rest / (threads x POOL_CHUNKS)), down to this many
 * items (or the job / (threads x POOL_CHUNKS x 4) when that is less), so the threads end within a small
 * chunk of each other: with fixed chunks a decode step's matmuls ended ~half a chunk apart on average
 * (gate/up of 8 experts: 1536-row chunks, ~100 us each). */
#ifndef POOL_MIN_CHUNK
#define POOL_MIN_CHUNK 256
#endif

/* A job's parameters. Two slots, by generation parity: the caller fills the slot of the next generation
 * while a late worker may still read the other, and workers read a slot without the mutex. */
typedef struct {
    _Atomic(pool_fn) fn;
    _Atomic(void *) ctx;
    atomic_size_t items;  /* static: items; dynamic: units of `unit` items (the last one may be short) */
    atomic_size_t chunk;  /* static: items per thread; dynamic: the largest chunk, in units */
    atomic_size_t minc;   /* dynamic: the smallest chunk, in units */
    atomic_size_t unit;   /* dynamic: items per unit (the grain) */
    atomic_size_t total;  /* dynamic: items */
    atomic_int dynamic;   /* pool_for_any's */
} job_slot;

struct pool_t {
    int n;
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    _Atomic unsigned long gen; /* the current job's generation (seq_cst stores: the slot is filled before) */
    atomic_int sleepers;       /* workers asleep on go (incremented under mu) */
    atomic_int waiting;        /* the caller is asleep on done (set under mu) */
    atomic_int quit;
    job_slot slot[2];
    atomic_int pending;      /* static: workers that have not finished their part */
    _Atomic uint64_t ticket; /* dynamic: (uint32_t)gen << 32 | the next unit to claim */
    atomic_size_t finished;  /* dynamic: units done */
    /* pool_hint's ranges: a sequence lock (odd while the caller writes them), the generation they were
     * given after (a worker takes them only while waiting after that one: they are for the next job) */
    _Atomic unsigned long hint_seq, hint_gen;
    _Atomic(uintptr_t) hint_p[SL_POOL_HINT_MAX];
    atomic_size_t hint_len[SL_POOL_HINT_MAX];
    atomic_int hint_n;
};

/* Spins until done(p, arg) or POOL_SPIN_NS pass; returns done's last answer. */
static int spin_until(int (*done)(pool_t *, uintptr_t), pool_t *p, uintptr_t arg) {
    if (done(p, arg)) return 1;
    const uint64_t end = clk_now_ns() + POOL_SPIN_NS;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            POOL_PAUSE();
            if (done(p, arg)) return 1;
        }
        if (clk_now_ns() > end) return 0;
    }
}

static int gen_moved(pool_t *p, uintptr_t seen) {
    return atomic_load_explicit(&p->gen, memory_order_acquire) != (unsigned long)seen ||
           atomic_load_explicit(&p->quit, memory_order_relaxed);
}
static int static_done(pool_t *p, uintptr_t unused) {
    (void)unused;
    return atomic_load_explicit(&p->pending, memory_order_acquire) == 0;
}
static int units_done(pool_t *p, uintptr_t n_units) {
    return atomic_load_explicit(&p->finished, memory_order_acquire) >= (size_t)n_units;
}

/* The caller's wait for the job's end (cond true): spin, then sleep on done; the worker that ends the job
 * wakes it when `waiting` says it sleeps (both sides order their store before their load: seq_cst). */
static void wait_end(pool_t *p, int (*cond)(pool_t *, uintptr_t), uintptr_t arg) {
    if (spin_until(cond, p, arg)) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->waiting, 1);
    while (!cond(p, arg)) pthread_cond_wait(&p->done, &p->mu);
    atomic_store(&p->waiting, 0);
    pthread_mutex_unlock(&p->mu);
}

/* The worker that ended the job: wakes the caller if it sleeps. */
static void end_job(pool_t *p) {
    if (!atomic_load(&p->waiting)) return;
    pthread_mutex_lock(&p->mu);
    pthread_cond_signal(&p->done);
    pthread_mutex_unlock(&p->mu);
}

/* Makes generation g current: its slot is filled; wakes sleeping workers. The slot's and the counters'
 * stores come before the seq_cst store of gen, and a worker reads them after loading gen; a worker that
 * increments sleepers before its last look at gen is seen here, or sees g (both seq_cst). */
static void publish(pool_t *p, unsigned long g) {
    atomic_store(&p->gen, g);
    if (atomic_load(&p->sleepers)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->go);
        pthread_mutex_unlock(&p->mu);
    }
}

/* The units of the chunk starting at unit b of a dynamic job of n units: the rest / (threads x POOL_CHUNKS),
 * within [minc, maxc] and the rest. A function of b alone, so every claimer agrees on it. */
static size_t chunk_at(size_t b, size_t n, size_t threads, size_t minc, size_t maxc) {
    size_t rest = n - b, c = (rest + threads * POOL_CHUNKS - 1) / (threads * POOL_CHUNKS);
    if (c > maxc) c = maxc;
    if (c < minc) c = minc;
    return c < rest ? c : rest;
}

/* Claims and runs chunks of the dynamic job of generation gen (its slot's values) until none is left; the
 * thread that finishes the last one wakes the caller. A slot read while the caller refills it for a later
 * generation is never used: the ticket then no longer holds gen (the caller moves the ticket on before it
 * refills a slot), so the claim fails. */
static void run_dynamic(pool_t *p, uint32_t gen, pool_fn fn, void *ctx, size_t n, size_t unit, size_t total,
                        size_t minc, size_t maxc) {
    const size_t threads = (size_t)p->n;
    uint64_t t = atomic_load(&p->ticket);
    for (;;) {
        const size_t b = (size_t)(t & 0xffffffffu);
        if ((uint32_t)(t >> 32) != gen || b >= n) return;
        const size_t c = chunk_at(b, n, threads, minc, maxc);
        if (!atomic_compare_exchange_weak(&p->ticket, &t, t + c)) continue; /* t reloaded */
        const size_t ib = b * unit, ie = (b + c) * unit < total ? (b + c) * unit : total;
        fn(ctx, ib, ie);
        if (atomic_fetch_add(&p->finished, c) + c == n) end_job(p);
        t = atomic_load(&p->ticket);
    }
}

/* A hint's ranges are prefetched in blocks of this many bytes, dealt round-robin to the workers, each looking
 * at the generation before every block: a job published meanwhile waits at most one block's prefetches. */
#define HINT_BLOCK 2048

static int prefetch_ranges(pool_t *p, unsigned long seen, int id, const uintptr_t *hp, const size_t *hl, int hn) {
    const size_t workers = (size_t)p->n - 1, me = (size_t)id - 1;
    size_t blk = 0;
    for (int r = 0; r < hn; r++)
        for (size_t off = 0; off < hl[r]; off += HINT_BLOCK, blk++) {
            if (blk % workers != me) continue;
            if (gen_moved(p, seen)) return 1;
            const char *b = (const char *)hp[r] + off;
            const size_t e = hl[r] - off < HINT_BLOCK ? hl[r] - off : HINT_BLOCK;
            for (size_t i = 0; i < e; i += 64) __builtin_prefetch(b + i, 0, POOL_HINT_LOCALITY);
        }
    return 0;
}

/* A worker's wait for the generation after seen: spin_until's, and meanwhile it prefetches its share of a hint
 * given after seen that it has not taken yet (*taken: the last hint's sequence number it took). 1 when the
 * generation moved, 0 when POOL_SPIN_NS passed. */
static int worker_spin(pool_t *p, unsigned long seen, int id, unsigned long *taken) {
    if (gen_moved(p, (uintptr_t)seen)) return 1;
    const uint64_t end = clk_now_ns() + POOL_SPIN_NS;
    for (;;) {
        const unsigned long hs = atomic_load(&p->hint_seq);
        if (hs != *taken && !(hs & 1)) {
            uintptr_t hp[SL_POOL_HINT_MAX];
            size_t hl[SL_POOL_HINT_MAX];
            int hn = atomic_load(&p->hint_n);
            hn = hn < 0 ? 0 : hn > SL_POOL_HINT_MAX ? SL_POOL_HINT_MAX : hn;
            const unsigned long hg = atomic_load(&p->hint_gen);
            for (int i = 0; i < hn; i++) {
                hp[i] = atomic_load(&p->hint_p[i]);
                hl[i] = atomic_load(&p->hint_len[i]);
            }
            if (atomic_load(&p->hint_seq) != hs) continue; /* rewritten meanwhile: read it again */
            *taken = hs;
            if (hg == seen && prefetch_ranges(p, seen, id, hp, hl, hn)) return 1;
        }
        for (int i = 0; i < 64; i++) {
            POOL_PAUSE();
            if (gen_moved(p, (uintptr_t)seen)) return 1;
        }
        if (clk_now_ns() > end) return 0;
    }
}

typedef struct {
    pool_t *p;
    int id;
} worker_arg;

static void run_part(const job_slot *s, int id) {
    const size_t chunk = atomic_load(&s->chunk), items = atomic_load(&s->items);
    size_t b = (size_t)id * chunk;
    if (b >= items) return;
    size_t e = b + chunk;
    if (e > items) e = items;
    atomic_load(&s->fn)(atomic_load(&s->ctx), b, e);
}

/* The pool this thread works for and its index there (pool_thread); NULL in every other thread. */
static _Thread_local const pool_t *tl_pool;
static _Thread_local int tl_id;

int pool_thread(const pool_t *p) { return p && tl_pool == p ? tl_id : 0; }

static void *worker(void *arg) {
    worker_arg *wa = arg;
    pool_t *p = wa->p;
    int id = wa->id;
    free(wa);
    tl_pool = p;
    tl_id = id;
    unsigned long seen = 0, hint_taken = 0;
    for (;;) {
        if (!worker_spin(p, seen, id, &hint_taken)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (!atomic_load(&p->quit) && atomic_load(&p->gen) == seen) pthread_cond_wait(&p->go, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->quit)) break;
        seen = atomic_load(&p->gen);
        const job_slot *s = &p->slot[seen & 1];
        const int dynamic = atomic_load(&s->dynamic);
        /* Nobody waits for a worker in a dynamic job, so by now the caller may have finished seen and seen + 1
         * and refilled this slot for seen + 2: the flag just read would then be a later job's. The caller
         * refills the slot only after it has published seen + 1, so gen still at seen means the flag is seen's;
         * else look again at the current job. (A static job cannot move on without this worker.) */
        if (atomic_load(&p->gen) != seen) continue;
        if (dynamic) { /* nobody waits for this worker: only for the units */
            run_dynamic(p, (uint32_t)seen, atomic_load(&s->fn), atomic_load(&s->ctx), atomic_load(&s->items),
                        atomic_load(&s->unit), atomic_load(&s->total), atomic_load(&s->minc), atomic_load(&s->chunk));
            continue;
        }
        run_part(s, id); /* the caller waits for this part: the slot stays put */
        if (atomic_fetch_sub(&p->pending, 1) == 1) end_job(p);
    }
    return NULL;
}

pool_t *pool_new(int n_threads) {
    if (n_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int)c : 1;
    }
    if (n_threads > 256) n_threads = 256;
    pool_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    if (n_threads > 1) {
        p->th = calloc((size_t)n_threads, sizeof *p->th);
        if (!p->th) { pool_free(p); return NULL; }
        for (int i = 1; i < n_threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (!wa || (wa->p = p, wa->id = i, pthread_create(&p->th[i], NULL, worker, wa)) != 0) {
                free(wa);
                p->n = i; /* only threads 1..i-1 exist */
                pool_free(p);
                return NULL;
            }
        }
    }
    return p;
}

void pool_free(pool_t *p) {
    if (!p) return;
    if (p->th) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->quit, 1);
        pthread_cond_broadcast(&p->go);
        pthread_mutex_unlock(&p->mu);
        for (int i = 1; i < p->n; i++) pthread_join(p->th[i], NULL);
        free(p->th);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p);
}

int pool_size(const pool_t *p) { return p ? p->n : 1; }

void pool_for(pool_t *p, size_t n, size_t grain, pool_fn fn, void *ctx) {
    if (n == 0) return;
    if (grain < 1) grain = 1;
    if (!p || p->n == 1 || n <= grain) {
        fn(ctx, 0, n);
        return;
    }
    size_t parts = (size_t)p->n;
    if (parts > (n + grain - 1) / grain) parts = (n + grain - 1) / grain;
    const unsigned long g = atomic_load(&p->gen) + 1; /* only the caller writes gen */
    job_slot *s = &p->slot[g & 1];
    atomic_store(&s->fn, fn);
    atomic_store(&s->ctx, ctx);
    atomic_store(&s->items, n);
    atomic_store(&s->chunk, (n + parts - 1) / parts);
    atomic_store(&s->dynamic, 0);
    atomic_store(&p->pending, p->n - 1);
    publish(p, g);
    run_part(s, 0);
    wait_end(p, static_done, 0);
}

void pool_for_any(pool_t *p, size_t n, size_t grain, pool_fn fn, void *ctx) {
    if (n == 0) return;
    if (grain < 1) grain = 1;
    if (!p || p->n == 1 || n <= grain) {
        fn(ctx, 0, n);
        return;
    }
    /* claimed in units of grain (kernels keep their row blocks whole); the ticket holds 32 bits of unit */
    size_t unit = grain, units = (n + unit - 1) / unit;
    if (units > 0xffffffffu) {
        unit = (n + 0xfffffffeu) / 0xffffffffu;
        unit = (unit + grain - 1) / grain * grain;
        units = (n + unit - 1) / unit;
    }
    /* the largest chunk: POOL_CHUNKS per thread, at most POOL_MAX_CHUNK items; the smallest: POOL_MIN_CHUNK
     * items or the job / (threads x POOL_CHUNKS x 4) if less, at least a unit */
    const size_t threads = (size_t)p->n;
    size_t maxc = (units + threads * POOL_CHUNKS - 1) / (threads * POOL_CHUNKS), cap = POOL_MAX_CHUNK / unit;
    if (maxc > cap) maxc = cap;
    if (maxc < 1) maxc = 1;
    size_t minc = units / (threads * POOL_CHUNKS * 4);
    if (minc > POOL_MIN_CHUNK / unit) minc = POOL_MIN_CHUNK / unit;
    if (minc > maxc) minc = maxc;
    if (minc < 1) minc = 1;
    const unsigned long g = atomic_load(&p->gen) + 1; /* only the caller writes gen */
    job_slot *s = &p->slot[g & 1];
    atomic_store(&s->fn, fn);
    atomic_store(&s->ctx, ctx);
    atomic_store(&s->items, units);
    atomic_store(&s->unit, unit);
    atomic_store(&s->total, n);
    atomic_store(&s->chunk, maxc);
    atomic_store(&s->minc, minc);
    atomic_store(&s->dynamic, 1);
    atomic_store(&p->finished, 0);
    atomic_store(&p->ticket, (uint64_t)(uint32_t)g << 32);
    publish(p, g);
    run_dynamic(p, (uint32_t)g, fn, ctx, units, unit, n, minc, maxc);
    wait_end(p, units_done, (uintptr_t)units);
}

void pool_hint(pool_t *p, const void *const *ptr, const size_t *bytes, int n) {
    if (!p || p->n < 2 || n <= 0 || !ptr || !bytes) return;
    if (n > SL_POOL_HINT_MAX) n = SL_POOL_HINT_MAX;
    const unsigned long s = atomic_load(&p->hint_seq); /* only the caller writes it */
    atomic_store(&p->hint_seq, s + 1);
    atomic_store(&p->hint_gen, atomic_load(&p->gen));
    for (int i = 0; i < n; i++) {
        atomic_store(&p->hint_p[i], (uintptr_t)ptr[i]);
        atomic_store(&p->hint_len[i], ptr[i] ? bytes[i] : 0);
    }
    atomic_store(&p->hint_n, n);
    atomic_store(&p->hint_seq, s + 2);
}
