/*
 * io.h — the I/O engine behind the expert cache: an ops table (SQLite io_methods style) with three
 * implementations:
 *   io_uring   liburing, many reads in flight; a reaper thread consumes completions as they arrive
 *              (and checksums them, io_req.hash_len) while the caller computes;
 *   pread      a small thread pool issuing pread(2) (and checksumming), for systems without io_uring;
 *   fault      wraps another engine and injects EIO, short reads, EINTR, delays and corrupted bytes
 *              (tests only).
 * An engine reports raw results (bytes read or -errno), exactly one completion per submitted request;
 * retrying short reads and EINTR is the caller's job (stream/cache.c), so every engine — and the fault
 * injector — exercises the same recovery code. Engines are called from one thread at a time (their
 * own threads are internal).
 */
#ifndef SL_IO_H
#define SL_IO_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

typedef struct io_req {
    uint64_t off;      /* file offset (4096-aligned for O_DIRECT) */
    uint32_t len;      /* bytes */
    void *buf;         /* destination (4096-aligned for O_DIRECT) */
    int64_t res;       /* at completion: bytes read (may be short) or -errno */
    void *user;
    /* Checksum in the completion path: with hash_len > 0 (<= len) the engine computes hash = XXH3-64 of
     * buf[0, hash_len) on its own thread as soon as the read lands whole (res == len), and sets hashed;
     * otherwise hashed is 0 and the caller hashes. Overlaps the check with the caller's work and with the
     * other reads in flight. */
    uint32_t hash_len;
    int hashed;
    uint64_t hash;
    uint64_t hash_ns; /* set with hashed: the engine thread's time for the checksum (stats) */
} io_req;

typedef struct io_engine io_engine;

typedef struct io_ops {
    const char *name;
    /* Queues one read (the request must stay valid until it completes). 0 or -errno. */
    int (*submit)(io_engine *e, io_req *r);
    /* Starts every queued read. 0 or -errno; an engine whose own thread submits (io_uring's reaper) hands the
     * reads over and returns 0, and a submission error then comes back from the next wait(). */
    int (*flush)(io_engine *e);
    /* Blocks until a submitted read completes; *out receives it with res set. 0 or -errno. */
    int (*wait)(io_engine *e, io_req **out);
    void (*destroy)(io_engine *e);
    /* The device's side since the engine was made (NULL: not tracked): *busy_ns = time with at least one
     * read issued and not yet completed (the disk working for us), *depth_ns = the integral over time of
     * how many were (so depth_ns / busy_ns is the mean queue depth while busy). A read counts from its
     * flush (io_uring: its hand-over to the reaper, which submits it) or pread(2) starting to its completion's
     * arrival, before any checksum. Safe to call between requests. */
    void (*busy)(io_engine *e, uint64_t *busy_ns, uint64_t *depth_ns);
} io_ops;

struct io_engine {
    const io_ops *ops;
    int fd;
    int depth;      /* most reads in flight */
    /* io_uring only (io_uring.c, chunked chains): reads of at least 2 x chunk bytes (a multiple of 4096)
     * go to the disk as chunk-sized pieces dealt into linked chains, so the blocks of one flush complete
     * in order instead of all together; chunk 0: whole reads. The chains: `chains` of them, or with
     * rounds > 0, as many as a flush's pieces divided by rounds (rounded up), so 1/rounds of the flush's
     * bytes are in flight at once whatever its size (chains is then ignored). Set before the first submit. */
    uint32_t chunk;
    int chains;
    int rounds;
};

/* Device occupancy bookkeeping shared by the engines (io.h busy): call io_occ_step with the lock that
 * guards it held, at every change of the number of reads in the device. */
typedef struct io_occ {
    int in_dev;
    uint64_t last_ns, busy_ns, depth_ns;
} io_occ;

static inline void io_occ_step(io_occ *o, uint64_t now_ns, int delta) {
    if (o->in_dev > 0 && now_ns > o->last_ns) {
        o->busy_ns += now_ns - o->last_ns;
        o->depth_ns += (uint64_t)o->in_dev * (now_ns - o->last_ns);
    }
    o->last_ns = now_ns;
    o->in_dev += delta;
}

/* Each constructor: SL_OK with *out the engine (the caller's, io_destroy), or an error with *out NULL and err
 * naming why (io_uring: SL_EUNSUPPORTED where the kernel or its limits refuse a ring, SL_ENOMEM, SL_EIO). */
sl_status io_uring_engine_new(int fd, int depth, io_engine **out, sl_error *err);
sl_status io_pread_engine_new(int fd, int n_threads, io_engine **out, sl_error *err);

typedef struct io_fault_cfg {
    /* Counting the completed reads that match (all, or only those starting at `only_off` when it is
     * non-zero) from 1, each fault fires on the counts that are multiples of its value (0 = never). */
    unsigned fail_every;    /* completes with -EIO */
    unsigned short_every;   /* completes with half the bytes */
    unsigned eintr_every;   /* completes with -EINTR, nothing read */
    unsigned corrupt_every; /* flips one byte of the data */
    unsigned max_faults;    /* stop injecting after this many (0 = no limit) */
    unsigned delay_us;      /* sleeps before every completion */
    uint64_t only_off;
    int reverse;            /* hand completions out newest-first (scrambles completion order) */
    unsigned wait_fail_after; /* wait() fails with -EIO from the (n + 1)-th call on, reporting nothing more,
                               * as an engine whose reaper died would (0 = never) */
} io_fault_cfg;

/* Takes ownership of inner. NULL only when out of memory (inner destroyed), as malloc. */
io_engine *io_fault_engine_new(io_engine *inner, const io_fault_cfg *cfg);

static inline void io_destroy(io_engine *e) {
    if (e) e->ops->destroy(e);
}

#endif
