/*
 * io_uring.c — liburing engine: prep_read per request, one io_uring_submit per flush, one CQE per
 * completion. Falls back (returns NULL) when the kernel refuses io_uring (old kernel, seccomp).
 */
#include <errno.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stream/io.h"

typedef struct {
    io_engine base;
    struct io_uring ring;
    int queued;
} uring_engine;

static int u_flush(io_engine *e) {
    uring_engine *u = (uring_engine *)e;
    if (!u->queued) return 0;
    for (;;) {
        int r = io_uring_submit(&u->ring);
        if (r == -EINTR) continue;
        if (r < 0) return r;
        u->queued = 0;
        return 0;
    }
}

static int u_submit(io_engine *e, io_req *r) {
    uring_engine *u = (uring_engine *)e;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (!sqe) {
        int rc = u_flush(e);
        if (rc) return rc;
        sqe = io_uring_get_sqe(&u->ring);
        if (!sqe) return -EBUSY;
    }
    io_uring_prep_read(sqe, e->fd, r->buf, r->len, r->off);
    io_uring_sqe_set_data(sqe, r);
    u->queued++;
    return 0;
}

static int u_wait(io_engine *e, io_req **out) {
    uring_engine *u = (uring_engine *)e;
    int rc = u_flush(e);
    if (rc) return rc;
    struct io_uring_cqe *cqe;
    for (;;) {
        rc = io_uring_wait_cqe(&u->ring, &cqe);
        if (rc == -EINTR) continue;
        if (rc < 0) return rc;
        break;
    }
    io_req *r = io_uring_cqe_get_data(cqe);
    r->res = cqe->res;
    io_uring_cqe_seen(&u->ring, cqe);
    *out = r;
    return 0;
}

static void u_destroy(io_engine *e) {
    uring_engine *u = (uring_engine *)e;
    io_uring_queue_exit(&u->ring);
    free(u);
}

static const io_ops uring_ops = {"io_uring", u_submit, u_flush, u_wait, u_destroy};

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
    return &u->base;
}
