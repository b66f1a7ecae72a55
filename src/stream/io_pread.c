/*
 * io_pread.c — portable engine: worker threads take requests from a FIFO, issue one pread(2) each,
 * checksum a whole read when asked (io_req.hash_len) and post the raw result to a completion FIFO. No
 * retries here (see io.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stream/io.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/xxh3.h"

#define PQ_CAP 4096

typedef struct {
    io_req *v[PQ_CAP];
    int head, n;
} fifo;

static void push(fifo *q, io_req *r) { q->v[(q->head + q->n++) % PQ_CAP] = r; }
static io_req *pop(fifo *q) {
    io_req *r = q->v[q->head];
    q->head = (q->head + 1) % PQ_CAP;
    q->n--;
    return r;
}

typedef struct {
    io_engine base;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    fifo todo, fin;
    int outstanding, quit, n_threads;
    pthread_t th[64];
    io_occ occ; /* workers inside pread(2) (io.h busy), under mu */
} pread_engine;

static void *worker(void *arg) {
    pread_engine *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->todo.n == 0) pthread_cond_wait(&p->work, &p->mu);
        if (p->quit) break;
        io_req *r = pop(&p->todo);
        io_occ_step(&p->occ, clk_now_ns(), 1);
        pthread_mutex_unlock(&p->mu);
        ssize_t n = pread(p->base.fd, r->buf, r->len, (off_t)r->off);
        r->res = n < 0 ? -errno : n;
        pthread_mutex_lock(&p->mu);
        io_occ_step(&p->occ, clk_now_ns(), -1);
        pthread_mutex_unlock(&p->mu);
        r->hashed = r->hash_len > 0 && r->hash_len <= r->len && n == (ssize_t)r->len;
        r->hash_ns = 0;
        if (r->hashed) { /* before the caller sees it, off its thread */
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            r->hash = XXH3_64bits(r->buf, r->hash_len);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            r->hash_ns = (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000ll + (t1.tv_nsec - t0.tv_nsec));
        }
        pthread_mutex_lock(&p->mu);
        push(&p->fin, r);
        pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static int p_submit(io_engine *e, io_req *r) {
    pread_engine *p = (pread_engine *)e;
    pthread_mutex_lock(&p->mu);
    if (p->outstanding >= PQ_CAP) {
        pthread_mutex_unlock(&p->mu);
        return -EBUSY;
    }
    p->outstanding++;
    push(&p->todo, r);
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

static int p_flush(io_engine *e) {
    (void)e;
    return 0;
}

static int p_wait(io_engine *e, io_req **out) {
    pread_engine *p = (pread_engine *)e;
    pthread_mutex_lock(&p->mu);
    if (p->outstanding == 0) {
        pthread_mutex_unlock(&p->mu);
        return -EINVAL;
    }
    while (p->fin.n == 0) pthread_cond_wait(&p->done, &p->mu);
    *out = pop(&p->fin);
    p->outstanding--;
    pthread_mutex_unlock(&p->mu);
    return 0;
}

static void p_destroy(io_engine *e) {
    pread_engine *p = (pread_engine *)e;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads; i++) pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    free(p);
}

static void p_busy(io_engine *e, uint64_t *busy_ns, uint64_t *depth_ns) {
    pread_engine *p = (pread_engine *)e;
    pthread_mutex_lock(&p->mu);
    io_occ_step(&p->occ, clk_now_ns(), 0);
    *busy_ns = p->occ.busy_ns;
    *depth_ns = p->occ.depth_ns;
    pthread_mutex_unlock(&p->mu);
}

static const io_ops pread_ops = {"pread", p_submit, p_flush, p_wait, p_destroy, p_busy};

sl_status io_pread_engine_new(int fd, int n_threads, io_engine **out, sl_error *err) {
    *out = NULL;
    pread_engine *p = calloc(1, sizeof *p);
    if (!p) return err_set(err, SL_ENOMEM, "out of memory");
    if (n_threads < 1) n_threads = 1;
    if (n_threads > 64) n_threads = 64;
    p->base.ops = &pread_ops;
    p->base.fd = fd;
    p->base.depth = n_threads * 2;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int i = 0; i < n_threads; i++) {
        if (pthread_create(&p->th[i], NULL, worker, p) != 0) {
            p_destroy(&p->base);
            return err_set(err, SL_ENOMEM, "cannot start I/O threads");
        }
        p->n_threads++;
    }
    *out = &p->base;
    return SL_OK;
}
