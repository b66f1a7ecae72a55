/*
 * threadpool.c — see threadpool.h. A job is a (fn, ctx, n, chunk) tuple published under the mutex with a
 * generation counter. A static job (sl_pool_for) gives thread i the i-th chunk and waits for every worker; a
 * dynamic one (sl_pool_for_any) lets every thread claim chunks from `ticket` = (generation << 32 | next
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
 * The mutex is taken only to publish or read a job and to sleep; a sleeper is woken only when one is asleep
 * (`sleepers`, `waiting`), so a hand-off between spinning threads makes no system call.
 */
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

#ifndef POOL_CHUNKS
#define POOL_CHUNKS 4
#endif
/* At most this many items a chunk: the threads of a job end within one chunk of each other, and a decode
 * step's LM head (151,936 rows, ~2.6 ms a chunk at four chunks per thread) left one thread idle for 2.6 ms
 * per token at its end (a timed build, 2 threads); 4096 rows is ~0.3 ms of it. */
#ifndef POOL_MAX_CHUNK
#define POOL_MAX_CHUNK 4096
#endif

struct sl_pool {
    int n;
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    _Atomic unsigned long gen; /* written under mu; read by spinners without it */
    int sleepers;              /* workers asleep on go (under mu) */
    atomic_int waiting;        /* the caller is asleep on done (set under mu) */
    atomic_int quit;
    sl_pool_fn fn;
    void *ctx;
    size_t items, chunk;
    int dynamic;             /* the current job is sl_pool_for_any's */
    size_t n_chunks;         /* dynamic: chunks of the job */
    atomic_int pending;      /* static: workers that have not finished their part */
    _Atomic uint64_t ticket; /* dynamic: (uint32_t)gen << 32 | the next chunk to claim */
    atomic_size_t finished;  /* dynamic: chunks done */
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Spins until done(p, arg) or POOL_SPIN_NS pass; returns done's last answer. */
static int spin_until(int (*done)(sl_pool *, uintptr_t), sl_pool *p, uintptr_t arg) {
    if (done(p, arg)) return 1;
    const int64_t end = now_ns() + POOL_SPIN_NS;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            POOL_PAUSE();
            if (done(p, arg)) return 1;
        }
        if (now_ns() > end) return 0;
    }
}

static int gen_moved(sl_pool *p, uintptr_t seen) {
    return atomic_load_explicit(&p->gen, memory_order_acquire) != (unsigned long)seen ||
           atomic_load_explicit(&p->quit, memory_order_relaxed);
}
static int static_done(sl_pool *p, uintptr_t unused) {
    (void)unused;
    return atomic_load_explicit(&p->pending, memory_order_acquire) == 0;
}
static int chunks_done(sl_pool *p, uintptr_t n_chunks) {
    return atomic_load_explicit(&p->finished, memory_order_acquire) >= (size_t)n_chunks;
}

/* The caller's wait for the job's end (cond true): spin, then sleep on done; the worker that ends the job
 * wakes it when `waiting` says it sleeps (both sides order their store before their load: seq_cst). */
static void wait_end(sl_pool *p, int (*cond)(sl_pool *, uintptr_t), uintptr_t arg) {
    if (spin_until(cond, p, arg)) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->waiting, 1);
    while (!cond(p, arg)) pthread_cond_wait(&p->done, &p->mu);
    atomic_store(&p->waiting, 0);
    pthread_mutex_unlock(&p->mu);
}

/* The worker that ended the job: wakes the caller if it sleeps. */
static void end_job(sl_pool *p) {
    if (!atomic_load(&p->waiting)) return;
    pthread_mutex_lock(&p->mu);
    pthread_cond_signal(&p->done);
    pthread_mutex_unlock(&p->mu);
}

/* Claims and runs chunks of the dynamic job of generation gen (its parameters as read under the mutex)
 * until none is left; the thread that finishes the last one wakes the caller. */
static void run_dynamic(sl_pool *p, uint32_t gen, sl_pool_fn fn, void *ctx, size_t items, size_t chunk,
                        size_t n_chunks) {
    uint64_t t = atomic_load(&p->ticket);
    for (;;) {
        if ((uint32_t)(t >> 32) != gen || (t & 0xffffffffu) >= n_chunks) return;
        if (!atomic_compare_exchange_weak(&p->ticket, &t, t + 1)) continue; /* t reloaded */
        size_t b = (size_t)(t & 0xffffffffu) * chunk, e = b + chunk < items ? b + chunk : items;
        fn(ctx, b, e);
        if (atomic_fetch_add(&p->finished, 1) + 1 == n_chunks) end_job(p);
        t = atomic_load(&p->ticket);
    }
}

typedef struct {
    sl_pool *p;
    int id;
} worker_arg;

static void run_part(sl_pool *p, int id) {
    size_t b = (size_t)id * p->chunk;
    if (b >= p->items) return;
    size_t e = b + p->chunk;
    if (e > p->items) e = p->items;
    p->fn(p->ctx, b, e);
}

/* The pool this thread works for and its index there (sl_pool_thread); NULL in every other thread. */
static _Thread_local const sl_pool *tl_pool;
static _Thread_local int tl_id;

int sl_pool_thread(const sl_pool *p) { return p && tl_pool == p ? tl_id : 0; }

static void *worker(void *arg) {
    worker_arg *wa = arg;
    sl_pool *p = wa->p;
    int id = wa->id;
    free(wa);
    tl_pool = p;
    tl_id = id;
    unsigned long seen = 0;
    for (;;) {
        int moved = spin_until(gen_moved, p, (uintptr_t)seen);
        pthread_mutex_lock(&p->mu);
        if (!moved) {
            p->sleepers++;
            while (!atomic_load(&p->quit) && atomic_load(&p->gen) == seen) pthread_cond_wait(&p->go, &p->mu);
            p->sleepers--;
        }
        if (atomic_load(&p->quit)) break;
        seen = atomic_load(&p->gen);
        if (p->dynamic) { /* nobody waits for this worker: only for the chunks */
            sl_pool_fn fn = p->fn;
            void *ctx = p->ctx;
            size_t items = p->items, chunk = p->chunk, n_chunks = p->n_chunks;
            pthread_mutex_unlock(&p->mu);
            run_dynamic(p, (uint32_t)seen, fn, ctx, items, chunk, n_chunks);
            continue;
        }
        pthread_mutex_unlock(&p->mu);
        run_part(p, id); /* the caller waits for this part: the job's parameters stay put */
        if (atomic_fetch_sub(&p->pending, 1) == 1) end_job(p);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

sl_pool *sl_pool_new(int n_threads) {
    if (n_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int)c : 1;
    }
    if (n_threads > 256) n_threads = 256;
    sl_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    if (n_threads > 1) {
        p->th = calloc((size_t)n_threads, sizeof *p->th);
        if (!p->th) { sl_pool_free(p); return NULL; }
        for (int i = 1; i < n_threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (!wa || (wa->p = p, wa->id = i, pthread_create(&p->th[i], NULL, worker, wa)) != 0) {
                free(wa);
                p->n = i; /* only threads 1..i-1 exist */
                sl_pool_free(p);
                return NULL;
            }
        }
    }
    return p;
}

void sl_pool_free(sl_pool *p) {
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

int sl_pool_size(const sl_pool *p) { return p ? p->n : 1; }

void sl_pool_for(sl_pool *p, size_t n, size_t grain, sl_pool_fn fn, void *ctx) {
    if (n == 0) return;
    if (grain < 1) grain = 1;
    if (!p || p->n == 1 || n <= grain) {
        fn(ctx, 0, n);
        return;
    }
    size_t parts = (size_t)p->n;
    if (parts > (n + grain - 1) / grain) parts = (n + grain - 1) / grain;
    size_t chunk = (n + parts - 1) / parts;
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->items = n;
    p->chunk = chunk;
    p->dynamic = 0;
    atomic_store(&p->pending, p->n - 1);
    atomic_store_explicit(&p->gen, p->gen + 1, memory_order_release);
    if (p->sleepers) pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    run_part(p, 0);
    wait_end(p, static_done, 0);
}

void sl_pool_for_any(sl_pool *p, size_t n, size_t grain, sl_pool_fn fn, void *ctx) {
    if (n == 0) return;
    if (grain < 1) grain = 1;
    if (!p || p->n == 1 || n <= grain) {
        fn(ctx, 0, n);
        return;
    }
    /* POOL_CHUNKS chunks per thread: small enough that a delayed thread costs little and the threads end
     * together, large enough that claiming stays cheap; a multiple of grain (kernels keep their row blocks
     * whole) */
    size_t chunk = (n + (size_t)p->n * POOL_CHUNKS - 1) / ((size_t)p->n * POOL_CHUNKS);
    if (chunk > POOL_MAX_CHUNK) chunk = POOL_MAX_CHUNK;
    chunk = (chunk + grain - 1) / grain * grain;
    size_t n_chunks = (n + chunk - 1) / chunk;
    if (n_chunks > 0xffffffffu) { /* the ticket holds 32 bits of chunk index */
        chunk = (n + 0xfffffffeu) / 0xffffffffu;
        chunk = (chunk + grain - 1) / grain * grain;
        n_chunks = (n + chunk - 1) / chunk;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->items = n;
    p->chunk = chunk;
    p->n_chunks = n_chunks;
    p->dynamic = 1;
    atomic_store(&p->finished, 0);
    const unsigned long g = p->gen + 1;
    const uint32_t gen = (uint32_t)g;
    atomic_store(&p->ticket, (uint64_t)gen << 32);
    atomic_store_explicit(&p->gen, g, memory_order_release);
    if (p->sleepers) pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    run_dynamic(p, gen, fn, ctx, n, chunk, n_chunks);
    wait_end(p, chunks_done, (uintptr_t)n_chunks);
}
