/*
 * threadpool.c — see threadpool.h. Workers sleep on a condition variable between jobs; a job is a
 * (fn, ctx, n, chunk) tuple published under the mutex with a generation counter. A static job
 * (sl_pool_for) gives thread i the i-th chunk and waits for every worker; a dynamic one (sl_pool_for_any)
 * lets every thread claim chunks from `ticket` = (generation << 32 | next chunk), so a claim can only take
 * a chunk of the job the claimer read (a worker that wakes late for a finished job claims nothing), and
 * waits for the chunks to be done, not for the workers.
 */
#include "util/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

struct sl_pool {
    int n;
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long gen;
    int pending, quit;
    sl_pool_fn fn;
    void *ctx;
    size_t items, chunk;
    int dynamic;             /* the current job is sl_pool_for_any's */
    size_t n_chunks;         /* dynamic: chunks of the job */
    _Atomic uint64_t ticket; /* dynamic: (uint32_t)gen << 32 | the next chunk to claim */
    atomic_size_t finished;  /* dynamic: chunks done */
};

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
        if (atomic_fetch_add(&p->finished, 1) + 1 == n_chunks) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
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

static void *worker(void *arg) {
    worker_arg *wa = arg;
    sl_pool *p = wa->p;
    int id = wa->id;
    free(wa);
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->gen == seen) pthread_cond_wait(&p->go, &p->mu);
        if (p->quit) break;
        seen = p->gen;
        if (p->dynamic) { /* nobody waits for this worker: only for the chunks */
            sl_pool_fn fn = p->fn;
            void *ctx = p->ctx;
            size_t items = p->items, chunk = p->chunk, n_chunks = p->n_chunks;
            pthread_mutex_unlock(&p->mu);
            run_dynamic(p, (uint32_t)seen, fn, ctx, items, chunk, n_chunks);
            pthread_mutex_lock(&p->mu);
            continue;
        }
        pthread_mutex_unlock(&p->mu);
        run_part(p, id);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
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
        p->quit = 1;
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
    p->pending = p->n - 1;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    run_part(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void sl_pool_for_any(sl_pool *p, size_t n, size_t grain, sl_pool_fn fn, void *ctx) {
    if (n == 0) return;
    if (grain < 1) grain = 1;
    if (!p || p->n == 1 || n <= grain) {
        fn(ctx, 0, n);
        return;
    }
    /* about four chunks per thread: small enough that a delayed thread costs little, large enough that
     * claiming stays cheap; a multiple of grain (kernels keep their row blocks whole) */
    size_t chunk = (n + (size_t)p->n * 4 - 1) / ((size_t)p->n * 4);
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
    p->gen++;
    const uint32_t gen = (uint32_t)p->gen;
    atomic_store(&p->ticket, (uint64_t)gen << 32);
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    run_dynamic(p, gen, fn, ctx, n, chunk, n_chunks);
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->finished) < n_chunks) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
