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
#include "util/xxh3.h"

typedef struct {
    io_engine base;
    io_engine *inner;
    io_fault_cfg cfg;
    unsigned count, faults;
    int outstanding;        /* submitted to inner, not yet handed out */
    unsigned waits;         /* wait() calls so far (wait_fail_after) */
    io_req *held[4096];     /* reverse mode: completions waiting to be handed out, newest last */
    int n_held;
} fault_engine;

static int f_submit(io_engine *e, io_req *r) {
    fault_engine *f = (fault_engine *)e;
    int rc = f->inner->ops->submit(f->inner, r);
    if (!rc) f->outstanding++;
    return rc;
}

static int f_flush(io_engine *e) {
    fault_engine *f = (fault_engine *)e;
    return f->inner->ops->flush(f->inner);
}

static void mangle(fault_engine *f, io_req *r) {
    if (f->cfg.delay_us) usleep(f->cfg.delay_us);
    if (r->res <= 0 || (f->cfg.only_off && r->off != f->cfg.only_off)) return;
    if (f->cfg.max_faults && f->faults >= f->cfg.max_faults) return;
    unsigned nr = ++f->count;
#define FIRES(every) ((every) && nr % (every) == 0)
    if (FIRES(f->cfg.fail_every)) r->res = -EIO;
    else if (FIRES(f->cfg.eintr_every)) r->res = -EINTR;
    else if (FIRES(f->cfg.short_every) && r->res > 1) r->res /= 2;
    else if (FIRES(f->cfg.corrupt_every)) {
        ((unsigned char *)r->buf)[r->res / 3] ^= 0x5a;
        /* the bytes "read" are corrupt: so is the engine's checksum of them */
        if (r->hashed) r->hash = XXH3_64bits(r->buf, r->hash_len);
    } else return;
    if (r->res != (int64_t)r->len) r->hashed = 0;
#undef FIRES
    f->faults++;
}

static int f_wait(io_engine *e, io_req **out) {
    fault_engine *f = (fault_engine *)e;
    if (f->cfg.wait_fail_after && f->waits++ >= f->cfg.wait_fail_after) return -EIO;
    if (f->cfg.reverse && f->n_held == 0) {
        /* collect every read in flight, then hand them out newest-first */
        while (f->outstanding > f->n_held && f->n_held < (int)(sizeof f->held / sizeof *f->held)) {
            int rc = f->inner->ops->wait(f->inner, &f->held[f->n_held]);
            if (rc) return rc;
            f->n_held++;
        }
    }
    if (f->n_held > 0) {
        *out = f->held[--f->n_held];
    } else {
        int rc = f->inner->ops->wait(f->inner, out);
        if (rc) return rc;
    }
    f->outstanding--;
    mangle(f, *out);
    return 0;
}

static void f_destroy(io_engine *e) {
    fault_engine *f = (fault_engine *)e;
    io_destroy(f->inner);
    free(f);
}

static void f_busy(io_engine *e, uint64_t *busy_ns, uint64_t *depth_ns) {
    fault_engine *f = (fault_engine *)e;
    *busy_ns = *depth_ns = 0;
    if (f->inner->ops->busy) f->inner->ops->busy(f->inner, busy_ns, depth_ns);
}

static const io_ops fault_ops = {"fault", f_submit, f_flush, f_wait, f_destroy, f_busy};

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
