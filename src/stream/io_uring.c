/*
 * io_uring.c — liburing engine: prep_read per request, one io_uring_submit per flush (the caller's
 * thread owns the submission queue), and a reaper thread that owns the completion queue: it takes each
 * CQE as it arrives, checksums a whole read when asked (io_req.hash_len) and posts it to a completion
 * FIFO that wait() pops. So a block's check runs while the caller computes on the blocks before it and
 * the other reads are in flight (liburing's SQ and CQ rings are independent: one submitter and one
 * reaper need no lock between them). Falls back (returns NULL) when the kernel refuses io_uring (old
 * kernel, seccomp).
 */
#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stream/io.h"
#include "util/xxh3.h"

#define UQ_CAP 4096

typedef struct {
    io_engine base;
    struct io_uring ring;
    int queued;          /* prepared, not submitted (caller's thread) */
    pthread_t reaper;
    int reaper_up;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    io_req *fin[UQ_CAP]; /* completions not yet handed out, FIFO */
    int fin_head, fin_n;
    int outstanding;     /* submitted and not yet handed out */
    int fail;            /* the reaper's error (-errno), handed to the next wait */
    io_occ occ;          /* reads in the kernel's hands (io.h busy), under mu */
} uring_engine;

static uint64_t mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void *reap(void *arg) {
    uring_engine *u = arg;
    for (;;) {
        struct io_uring_cqe *cqe;
        int rc = io_uring_wait_cqe(&u->ring, &cqe);
        if (rc == -EINTR) continue;
        if (rc < 0) {
            pthread_mutex_lock(&u->mu);
            u->fail = rc;
            pthread_cond_broadcast(&u->cv);
            pthread_mutex_unlock(&u->mu);
            return NULL;
        }
        io_req *r = io_uring_cqe_get_data(cqe);
        int64_t res = cqe->res;
        io_uring_cqe_seen(&u->ring, cqe);
        if (!r) return NULL; /* the NOP destroy() sends */
        /* the request's fields were written before u_submit's unlock (the kernel's ordering is invisible
         * to ThreadSanitizer; the lock makes it plain) */
        pthread_mutex_lock(&u->mu);
        io_occ_step(&u->occ, mono_ns(), -1);
        const uint32_t hl = r->hash_len, len = r->len;
        const void *buf = r->buf;
        pthread_mutex_unlock(&u->mu);
        const int hashed = hl > 0 && hl <= len && res == (int64_t)len;
        struct timespec t0, t1;
        if (hashed) clock_gettime(CLOCK_MONOTONIC, &t0);
        const uint64_t h = hashed ? XXH3_64bits(buf, hl) : 0;
        if (hashed) clock_gettime(CLOCK_MONOTONIC, &t1);
        pthread_mutex_lock(&u->mu);
        r->res = res;
        r->hashed = hashed;
        r->hash = h;
        r->hash_ns = hashed ? (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000ll + (t1.tv_nsec - t0.tv_nsec)) : 0;
        u->fin[(u->fin_head + u->fin_n++) % UQ_CAP] = r;
        pthread_cond_signal(&u->cv);
        pthread_mutex_unlock(&u->mu);
    }
}

static int u_flush(io_engine *e) {
    uring_engine *u = (uring_engine *)e;
    if (!u->queued) return 0;
    /* counted in the device before the submit: a read served at once (from the page cache) may complete
     * inside io_uring_submit, and the reaper must never see more completions than reads counted */
    pthread_mutex_lock(&u->mu);
    io_occ_step(&u->occ, mono_ns(), u->queued);
    pthread_mutex_unlock(&u->mu);
    for (;;) {
        int r = io_uring_submit(&u->ring);
        if (r == -EINTR) continue;
        int gone = r < 0 ? u->queued : u->queued - r; /* not submitted: still queued, not in the device */
        if (gone > 0) {
            pthread_mutex_lock(&u->mu);
            io_occ_step(&u->occ, mono_ns(), -gone);
            pthread_mutex_unlock(&u->mu);
        }
        if (r < 0) return r;
        u->queued -= r;
        return 0;
    }
}

static void u_busy(io_engine *e, uint64_t *busy_ns, uint64_t *depth_ns) {
    uring_engine *u = (uring_engine *)e;
    pthread_mutex_lock(&u->mu);
    io_occ_step(&u->occ, mono_ns(), 0);
    *busy_ns = u->occ.busy_ns;
    *depth_ns = u->occ.depth_ns;
    pthread_mutex_unlock(&u->mu);
}

static int u_submit(io_engine *e, io_req *r) {
    uring_engine *u = (uring_engine *)e;
    pthread_mutex_lock(&u->mu);
    int full = u->outstanding >= UQ_CAP;
    pthread_mutex_unlock(&u->mu);
    if (full) return -EBUSY;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (!sqe) {
        int rc = u_flush(e);
        if (rc) return rc;
        sqe = io_uring_get_sqe(&u->ring);
        if (!sqe) return -EBUSY;
    }
    r->hashed = 0;
    io_uring_prep_read(sqe, e->fd, r->buf, r->len, r->off);
    io_uring_sqe_set_data(sqe, r);
    u->queued++;
    pthread_mutex_lock(&u->mu);
    u->outstanding++;
    pthread_mutex_unlock(&u->mu);
    return 0;
}

static int u_wait(io_engine *e, io_req **out) {
    uring_engine *u = (uring_engine *)e;
    int rc = u_flush(e);
    if (rc) return rc;
    pthread_mutex_lock(&u->mu);
    if (u->outstanding == 0) {
        pthread_mutex_unlock(&u->mu);
        return -EINVAL;
    }
    while (u->fin_n == 0 && !u->fail) pthread_cond_wait(&u->cv, &u->mu);
    if (u->fin_n == 0) {
        rc = u->fail;
        pthread_mutex_unlock(&u->mu);
        return rc;
    }
    *out = u->fin[u->fin_head];
    u->fin_head = (u->fin_head + 1) % UQ_CAP;
    u->fin_n--;
    u->outstanding--;
    pthread_mutex_unlock(&u->mu);
    return 0;
}

static void u_destroy(io_engine *e) {
    uring_engine *u = (uring_engine *)e;
    if (u->reaper_up) {
        /* the reaper stops at a NOP without data; every read before it completes first */
        struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
        if (!sqe && u_flush(e) == 0) sqe = io_uring_get_sqe(&u->ring);
        if (sqe) {
            io_uring_prep_nop(sqe);
            io_uring_sqe_set_data(sqe, NULL);
            u->queued++;
        }
        if (!sqe || u_flush(e)) pthread_cancel(u->reaper);
        pthread_join(u->reaper, NULL);
    }
    io_uring_queue_exit(&u->ring);
    pthread_mutex_destroy(&u->mu);
    pthread_cond_destroy(&u->cv);
    free(u);
}

static const io_ops uring_ops = {"io_uring", u_submit, u_flush, u_wait, u_destroy, u_busy};

io_engine *io_uring_engine_new(int fd, int depth, char *err, size_t errlen) {
    uring_engine *u = calloc(1, sizeof *u);
    if (!u) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (depth < 1) depth = 1;
    int rc = io_uring_queue_init((unsigned)depth, &u->ring, 0);
    if (rc < 0) {
        snprintf(err, errlen, "io_uring is not available: %s", strerror(-rc));
        free(u);
        return NULL;
    }
    u->base.ops = &uring_ops;
    u->base.fd = fd;
    u->base.depth = depth;
    pthread_mutex_init(&u->mu, NULL);
    pthread_cond_init(&u->cv, NULL);
    if (pthread_create(&u->reaper, NULL, reap, u) != 0) {
        snprintf(err, errlen, "cannot start the io_uring completion thread");
        u_destroy(&u->base);
        return NULL;
    }
    u->reaper_up = 1;
    return &u->base;
}
