/*
 * io_fault.c — fault-injecting engine for tests: forwards to an inner engine and, on chosen requests,
 * turns the result into -EIO, a short read, -EINTR (nothing read), corrupts a byte, delays, or
 * delivers completions in reverse order. See io_fault_cfg in io.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stream/io.h"

typedef struct {
    io_engine base;
    io_engine *inner;
    io_fault_cfg cfg;
    unsigned count;
    io_req *held[256];
    int n_held;
} fault_engine;

static int hit(const fault_engine *f, unsigned every, const io_req *r, unsigned nr) {
    if (!every) return 0;
    if (f->cfg.only_off) return r->off == f->cfg.only_off && nr % every == 0;
    return nr % every == 0;
}

static int f_submit(io_engine *e, io_req *r) {
    fault_engine *f = (fault_engine *)e;
    return f->inner->ops->submit(f->inner, r);
}

static int f_flush(io_engine *e) {
    fault_engine *f = (fault_engine *)e;
    return f->inner->ops->flush(f->inner);
}

static void mangle(fault_engine *f, io_req *r) {
    unsigned nr = ++f->count;
    if (f->cfg.delay_us) usleep(f->cfg.delay_us);
    if (r->res <= 0) return;
    if (hit(f, f->cfg.fail_every, r, nr)) r->res = -EIO;
    else if (hit(f, f->cfg.eintr_every, r, nr)) r->res = -EINTR;
    else if (hit(f, f->cfg.short_every, r, nr) && r->res > 1) r->res /= 2;
    else if (hit(f, f->cfg.corrupt_every, r, nr)) ((unsigned char *)r->buf)[r->res / 3] ^= 0x5a;
}

static int f_wait(io_engine *e, io_req **out) {
    fault_engine *f = (fault_engine *)e;
    if (!f->cfg.reverse) {
        int rc = f->inner->ops->wait(f->inner, out);
        if (!rc) mangle(f, *out);
        return rc;
    }
    /* reverse: collect everything in flight, hand out the newest first */
    if (f->n_held == 0) {
        io_req *r;
        int rc = f->inner->ops->wait(f->inner, &r);
        if (rc) return rc;
        f->held[f->n_held++] = r;
        /* drain whatever else completes quickly so there is something to reorder */
        usleep(200);
        while (f->n_held < 256) {
            /* the inner engines block in wait; only take what is certainly there by probing once */
            break;
        }
    }
    *out = f->held[--f->n_held];
    mangle(f, *out);
    return 0;
}

static void f_destroy(io_engine *e) {
    fault_engine *f = (fault_engine *)e;
    io_destroy(f->inner);
    free(f);
}

static const io_ops fault_ops = {"fault", f_submit, f_flush, f_wait, f_destroy};

io_engine *io_fault_engine_new(io_engine *inner, const io_fault_cfg *cfg) {
    fault_engine *f = calloc(1, sizeof *f);
    if (!f) {
        io_destroy(inner);
        return NULL;
    }
    f->base.ops = &fault_ops;
    f->base.fd = inner->fd;
    f->base.depth = inner->depth;
    f->inner = inner;
    f->cfg = *cfg;
    return &f->base;
}
