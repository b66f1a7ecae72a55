/*
 * threadpool.c — see threadpool.h. Workers sleep on a condition variable between jobs; a job is a
 * (fn, ctx, n, chunk) tuple published under the mutex with a generation counter.
 */
#include "util/threadpool.h"

#include <pthread.h>
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
};

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
    p->pending = p->n - 1;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    run_part(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
