/*
 * io_uring.c — liburing engine with one I/O thread, the reaper, that owns the ring: it creates it,
 * submits every read and takes every completion. The caller's submit() and flush() only hand the
 * flush's requests to it (a FIFO under the mutex, and a write to an eventfd whose read the reaper keeps
 * in the ring, so the kick is one more completion); the reaper prepares and submits them, takes each CQE
 * as it arrives, checksums a whole read when asked (io_req.hash_len) and posts it to a completion FIFO
 * that wait() pops. So a block's check runs while the caller computes on the blocks before it and the
 * other reads are in flight. Falls back (returns NULL) when the kernel refuses io_uring (old kernel,
 * seccomp).
 *
 * Why the reaper submits (issue 11 §1, docs/STREAMING.md): an O_DIRECT read's completion is task work
 * of the thread that submitted it — posting the CQE and issuing a linked chain's next piece. With the
 * caller as the submitter that was the evaluating thread: interrupted for every piece while it computes,
 * and, when it was not running (asleep, or queued behind the reaper hashing on its core), the disk's
 * next pieces and the reaper's CQEs waited for it. Now the ring is made by the reaper with
 * IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN (plain flags when the kernel refuses them; the reaper is
 * still the submitter), so that work runs on the reaper alone, when it enters the kernel: while it
 * waits for completions, and between 64 KiB slices of a hash whenever the ring says some is pending
 * (IORING_SQ_TASKRUN), so a chain's next piece never waits for a checksum.
 *
 * Chunked chains (io_engine.chunk / .chains / .rounds, io.h; docs/STREAMING.md): each read is cut into
 * chunk-sized pieces and a flush deals its pieces, in order, round-robin into `chains` chains (with rounds:
 * the flush's pieces / rounds of them) linked with IOSQE_IO_LINK, one io_uring_submit per chain (no merging
 * back): the disk keeps one piece per chain in flight and finishes the blocks in about `rounds` waves, in
 * order, instead of all at once. A request completes once, with its last piece:
 * res = len (checksummed then) when every piece is whole, else the bytes of the whole pieces from its start
 * (a short read the caller resumes) or the first piece's error; a piece cancelled by an earlier failure in
 * its chain (-ECANCELED) counts as unread, and nothing read that way gives -EAGAIN, which the caller retries.
 * The checksum runs as the pieces land: the reaper feeds XXH3's streaming state every whole piece of the
 * run that has landed from the start (pieces land in about their order), so when the last one arrives
 * only the pieces not yet hashed are left to hash before the completion is posted, not the whole block;
 * the result is the same XXH3-64 as one call over the block. The completion is still posted only after
 * the digest, so nothing hands out a block before its check (docs/STREAMING.md).
 */
#include <errno.h>
#include <liburing.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "stream/io.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/xxh3.h"

#define UQ_CAP 4096
#define JOB_CAP 1024 /* requests submitted and not yet completed, at most */
#define MAX_PIECES 16 /* more pieces than this: the read goes whole */
#define KICK_TAG UINT64_MAX /* user_data of the eventfd read (jobs' tags are (slot + 1) << 8 | piece) */
#define HASH_SLICE 65536 /* bytes hashed between two looks at the ring's pending task work */

/* One submitted request and its pieces (one piece when not chunked). */
typedef struct job {
    io_req *req;
    int n, left;             /* pieces, and those not completed yet */
    int64_t res[MAX_PIECES]; /* each piece's result */
    int next_free;
    /* the reaper's alone from submission to completion: the checksum of the pieces landed so far */
    XXH3_state_t *hs;        /* made on first use, kept with the job slot */
    int hashing;             /* the request asks for a checksum and every piece so far came back whole */
    int hashed_n;            /* pieces fed to hs, from the first */
    uint64_t hash_ns;
} job;

typedef struct {
    io_engine base;
    struct io_uring ring; /* the reaper's alone (made and used on its thread) */
    unsigned ring_entries;
    int deferred;        /* the ring runs task work only when the reaper enters (DEFER_TASKRUN) */
    int deal_err;        /* the reaper's: a flush dealt between hash slices failed (-errno) */
    int queued;          /* prepared, not submitted (reaper's thread) */
    job *jobs;           /* [JOB_CAP] */
    int free_job;        /* free list head, under mu */
    int pend[JOB_CAP];   /* jobs submitted since the last flush, in order (caller's thread) */
    int n_pend;
    int kick_fd;         /* eventfd: the caller's writes wake the reaper */
    uint64_t kick_val;   /* the reaper's read of it lands here */
    /* flushes handed to the reaper, under mu: their jobs in order, and each flush's count (FIFOs) */
    int ho[JOB_CAP], ho_flush[JOB_CAP], ho_n, ho_fn;
    int quit;            /* destroy(): the reaper ends at its next kick, under mu */
    int setup;           /* 0 until the reaper has made the ring, then 1 or -errno, under mu */
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

/* A request's result from its pieces (see the top of the file). */
static int64_t job_result(const job *jb, uint32_t len, uint32_t piece) {
    int64_t got = 0;
    for (int p = 0; p < jb->n; p++) {
        const uint32_t want = p + 1 < jb->n ? piece : len - (uint32_t)p * piece;
        const int64_t r = jb->res[p];
        if (r == (int64_t)want) {
            got += r;
            continue;
        }
        if (r > 0) return got + r; /* short: what is there from the start */
        if (got > 0) return got;
        return r == -ECANCELED ? -EAGAIN : r;
    }
    return got;
}

/* Runs the ring's pending task work (completions to post, chains' next pieces to issue) when the ring
 * says there is some: with DEFER_TASKRUN it waits for the reaper to enter the kernel. Reaper's thread. */
static void run_task_work(uring_engine *u) {
    if (u->deferred && (IO_URING_READ_ONCE(*u->ring.sq.kflags) & IORING_SQ_TASKRUN))
        (void)syscall(__NR_io_uring_enter, u->ring.ring_fd, 0, 0, IORING_ENTER_GETEVENTS, NULL, 0);
}

static int deal_handoff(uring_engine *u);

/* Feeds hs the whole pieces landed from the first one not fed yet (the bytes of each below hash_len),
 * stopping at a piece still in flight; a piece that came back short or failed ends the checksum (the
 * request then completes unhashed and the caller checks it). In slices, with the ring's task work run
 * and the flushes handed over meanwhile dealt between them (run_task_work, deal_handoff). The reaper's
 * thread, no lock: nothing else touches these fields between submission and completion. */
static void hash_landed(uring_engine *u, job *jb, uint32_t piece) {
    const io_req *r = jb->req;
    const uint64_t t0 = clk_now_ns();
    while (jb->hashing && jb->hashed_n < jb->n) {
        const int p = jb->hashed_n;
        const uint32_t at = (uint32_t)p * piece, want = p + 1 < jb->n ? piece : r->len - at;
        const int64_t res = jb->res[p];
        if (res == INT64_MIN) break; /* not landed yet */
        if (res != (int64_t)want) {
            jb->hashing = 0;
            break;
        }
        const uint32_t end = at + want < r->hash_len ? at + want : r->hash_len;
        for (uint32_t o = at; o < end && jb->hashing; o += HASH_SLICE) {
            const uint32_t n = end - o < HASH_SLICE ? end - o : HASH_SLICE;
            if (XXH3_64bits_update(jb->hs, (const char *)r->buf + o, n) != XXH_OK) jb->hashing = 0;
            run_task_work(u);
            if (!u->deal_err) { /* a flush handed over meanwhile goes to the disk now, not after the burst */
                const int rc = deal_handoff(u);
                if (rc < 0) u->deal_err = rc;
            }
        }
        jb->hashed_n++;
    }
    jb->hash_ns += clk_now_ns() - t0;
}

static int submit_ring(uring_engine *u) {
    for (;;) {
        int r = io_uring_submit(&u->ring);
        if (r == -EINTR) continue;
        if (r >= 0) u->queued -= r;
        return r < 0 ? r : 0;
    }
}

static void prep_piece(uring_engine *u, struct io_uring_sqe *sqe, int ji, int p, int link) {
    const job *jb = &u->jobs[ji];
    const io_req *r = jb->req;
    const uint32_t piece = jb->n > 1 ? u->base.chunk : r->len, at = (uint32_t)p * piece;
    const uint32_t len = p + 1 < jb->n ? piece : r->len - at;
    io_uring_prep_read(sqe, u->base.fd, (char *)r->buf + at, len, r->off + at);
    sqe->user_data = ((uint64_t)(ji + 1) << 8) | (uint64_t)p;
    if (link) sqe->flags |= IOSQE_IO_LINK;
    u->queued++;
}

/* Prepares and submits the jobs of one flush, pend[0..n_pend): one SQE each, or their pieces dealt into
 * chains (the top of the file). The reaper's thread. 0 or -errno. */
static int deal(uring_engine *u, const int *pend, int n_pend) {
    const io_engine *e = &u->base;
    int total = 0;
    for (int i = 0; i < n_pend; i++) total += u->jobs[pend[i]].n;
    /* with rounds, a lone read goes in one wave: there is no order among blocks to keep */
    const int want = e->rounds > 0 ? (n_pend > 1 ? (total + e->rounds - 1) / e->rounds : total) : e->chains;
    const int chains = total > n_pend && want > 0 ? (want < total ? want : total) : total;
    int rc = 0;
    for (int c = 0; c < chains && !rc; c++) {
        /* chain c: pieces c, c + chains, c + 2 chains, ... of the flush's pieces in order */
        int idx = 0, len = (total - c + chains - 1) / chains, k = 0;
        if ((unsigned)len > u->ring_entries) len = (int)u->ring_entries; /* never: the ring holds a flush */
        for (int i = 0; i < n_pend && k < len; i++) {
            const int ji = pend[i], n = u->jobs[ji].n;
            for (int p = 0; p < n && k < len; p++, idx++) {
                if ((idx - c) % chains != 0 || idx < c) continue;
                struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
                if (!sqe && (rc = submit_ring(u)) == 0) sqe = io_uring_get_sqe(&u->ring);
                if (!sqe) {
                    rc = rc ? rc : -EBUSY;
                    break;
                }
                k++;
                prep_piece(u, sqe, ji, p, k < len);
            }
            if (rc) break;
        }
        /* one submit per chain (a single piece each when not chunked: all of them at once) */
        if (!rc && (chains == total ? c == chains - 1 : 1)) rc = submit_ring(u);
    }
    return rc;
}

/* Prepares and submits every flush handed over so far, in order, each counted in the device as it is taken
 * (before its submit: the reaper must never see more completions than reads counted). 1 when destroy()
 * asks the reaper to end, else 0, or -errno. The reaper's: at each kick (take_handoff) and between the
 * slices of a hash (hash_landed), so that a flush never waits for a checksum burst. */
static int deal_handoff(uring_engine *u) {
    int quit = 0, rc = 0, pend[JOB_CAP];
    for (;;) {
        int n = 0;
        pthread_mutex_lock(&u->mu);
        quit = u->quit;
        if (u->ho_fn) {
            n = u->ho_flush[0];
            io_occ_step(&u->occ, clk_now_ns(), n);
            memcpy(pend, u->ho, (size_t)n * sizeof *pend);
            memmove(u->ho, u->ho + n, (size_t)(u->ho_n - n) * sizeof *u->ho);
            memmove(u->ho_flush, u->ho_flush + 1, (size_t)(u->ho_fn - 1) * sizeof *u->ho_flush);
            u->ho_n -= n;
            u->ho_fn--;
        }
        pthread_mutex_unlock(&u->mu);
        if (!n) break;
        if ((rc = deal(u, pend, n))) return rc;
    }
    if (u->queued && (rc = submit_ring(u))) return rc;
    return quit;
}

/* The reaper's, at start and at each kick: arms the next kick (a read of the eventfd), then deals every
 * flush handed over (deal_handoff; one taken earlier, between hash slices, leaves a kick with nothing to
 * take). 1 when destroy() asks it to end, else 0, or -errno. */
static int take_handoff(uring_engine *u) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    int rc = 0;
    if (!sqe && (rc = submit_ring(u)) == 0) sqe = io_uring_get_sqe(&u->ring);
    if (!sqe) return rc ? rc : -EBUSY;
    io_uring_prep_read(sqe, u->kick_fd, &u->kick_val, sizeof u->kick_val, 0);
    sqe->user_data = KICK_TAG;
    u->queued++;
    return deal_handoff(u);
}

/* The reaper's error (-errno) for the next wait(); the reaper ends after it. */
static void *reaper_fails(uring_engine *u, int rc) {
    pthread_mutex_lock(&u->mu);
    u->fail = rc;
    pthread_cond_broadcast(&u->cv);
    pthread_mutex_unlock(&u->mu);
    return NULL;
}

/* The ring, made on the reaper's thread so that it is the ring's single issuer; the result goes to
 * io_uring_engine_new through u->setup. */
static int ring_setup(uring_engine *u) {
    /* a flush's ring_entries pieces and the kick's read, which take_handoff prepares before dealing them */
    int rc = io_uring_queue_init(u->ring_entries + 1, &u->ring,
                                 IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG);
    u->deferred = rc == 0;
    if (rc < 0) rc = io_uring_queue_init(u->ring_entries + 1, &u->ring, 0); /* before Linux 6.1 */
    pthread_mutex_lock(&u->mu);
    u->setup = rc < 0 ? rc : 1;
    pthread_cond_broadcast(&u->cv);
    pthread_mutex_unlock(&u->mu);
    return rc;
}

static void *reap(void *arg) {
    uring_engine *u = arg;
    if (ring_setup(u) < 0) return NULL;
    int rc = take_handoff(u); /* arms the kick */
    if (rc < 0) return reaper_fails(u, rc);
    for (;;) {
        struct io_uring_cqe *cqe;
        rc = io_uring_wait_cqe(&u->ring, &cqe);
        if (rc == -EINTR) continue;
        if (rc < 0) return reaper_fails(u, rc);
        const uint64_t ud = cqe->user_data;
        int64_t res = cqe->res;
        io_uring_cqe_seen(&u->ring, cqe);
        if (ud == KICK_TAG) { /* the caller handed reads over, or destroy() asks the reaper to end */
            rc = take_handoff(u);
            if (rc < 0) return reaper_fails(u, rc);
            if (rc > 0) return NULL;
            continue;
        }
        /* the request's fields were written before u_submit's unlock (the kernel's ordering is invisible
         * to ThreadSanitizer; the lock makes it plain) */
        pthread_mutex_lock(&u->mu);
        job *jb = &u->jobs[(ud >> 8) - 1];
        jb->res[ud & 0xff] = res;
        const int left = --jb->left;
        const uint32_t piece = jb->n > 1 ? u->base.chunk : jb->req->len;
        if (!left) io_occ_step(&u->occ, clk_now_ns(), -1);
        pthread_mutex_unlock(&u->mu);
        /* the checksum of what has landed, while the other pieces are still on their way (top of the file) */
        if (jb->hashing) hash_landed(u, jb, piece);
        if (u->deal_err) return reaper_fails(u, u->deal_err);
        if (left > 0) continue;
        io_req *r = jb->req;
        res = job_result(jb, r->len, piece);
        const int hashed = jb->hashing && jb->hashed_n == jb->n && res == (int64_t)r->len;
        uint64_t h = 0;
        if (hashed) {
            const uint64_t t0 = clk_now_ns();
            h = XXH3_64bits_digest(jb->hs);
            jb->hash_ns += clk_now_ns() - t0;
        }
        pthread_mutex_lock(&u->mu);
        r->res = res;
        r->hashed = hashed;
        r->hash = h;
        r->hash_ns = hashed ? jb->hash_ns : 0;
        jb->next_free = u->free_job; /* the slot is the caller's again from here */
        u->free_job = (int)(jb - u->jobs);
        u->fin[(u->fin_head + u->fin_n++) % UQ_CAP] = r;
        pthread_cond_signal(&u->cv);
        pthread_mutex_unlock(&u->mu);
    }
}

/* Wakes the reaper (its read of the eventfd completes). Cannot fail: an eventfd write fails only when
 * the counter would overflow, and the reaper's reads reset it. */
static void kick(uring_engine *u) {
    const uint64_t one = 1;
    while (write(u->kick_fd, &one, sizeof one) < 0 && errno == EINTR) {
    }
}

/* Hands the requests queued since the last flush to the reaper, which submits them (the top of the
 * file). Cannot fail here: a failed submission is the reaper's error, reported by the next wait(). */
static int u_flush(io_engine *e) {
    uring_engine *u = (uring_engine *)e;
    if (!u->n_pend) return 0;
    pthread_mutex_lock(&u->mu);
    memcpy(u->ho + u->ho_n, u->pend, (size_t)u->n_pend * sizeof *u->ho);
    u->ho_n += u->n_pend;
    u->ho_flush[u->ho_fn++] = u->n_pend;
    pthread_mutex_unlock(&u->mu);
    u->n_pend = 0;
    kick(u);
    return 0;
}

static int u_submit(io_engine *e, io_req *r) {
    uring_engine *u = (uring_engine *)e;
    pthread_mutex_lock(&u->mu);
    int ji = u->outstanding >= UQ_CAP || u->n_pend >= JOB_CAP ? -1 : u->free_job;
    if (ji >= 0) {
        u->free_job = u->jobs[ji].next_free;
        u->outstanding++;
    }
    pthread_mutex_unlock(&u->mu);
    if (ji < 0) return -EBUSY;
    job *jb = &u->jobs[ji];
    const uint32_t piece = e->chunk;
    jb->req = r;
    jb->n = piece >= 4096 && r->len >= 2 * piece ? (int)((r->len + piece - 1) / piece) : 1;
    if (jb->n > MAX_PIECES) jb->n = 1;
    jb->left = jb->n;
    for (int p = 0; p < jb->n; p++) jb->res[p] = INT64_MIN; /* not landed */
    jb->hashed_n = 0;
    jb->hash_ns = 0;
    jb->hashing = r->hash_len > 0 && r->hash_len <= r->len;
    if (jb->hashing && !jb->hs) jb->hs = XXH3_createState();
    if (jb->hashing && (!jb->hs || XXH3_64bits_reset(jb->hs) != XXH_OK)) jb->hashing = 0; /* the caller hashes */
    r->hashed = 0;
    u->pend[u->n_pend++] = ji;
    return 0;
}

static void u_busy(io_engine *e, uint64_t *busy_ns, uint64_t *depth_ns) {
    uring_engine *u = (uring_engine *)e;
    pthread_mutex_lock(&u->mu);
    io_occ_step(&u->occ, clk_now_ns(), 0);
    *busy_ns = u->occ.busy_ns;
    *depth_ns = u->occ.depth_ns;
    pthread_mutex_unlock(&u->mu);
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
        /* the reaper ends at its next kick (or has ended on an error); the caller has waited for every
         * read it submitted (cache.c drain) */
        pthread_mutex_lock(&u->mu);
        u->quit = 1;
        pthread_mutex_unlock(&u->mu);
        kick(u);
        pthread_join(u->reaper, NULL);
    }
    if (u->setup > 0) io_uring_queue_exit(&u->ring);
    if (u->kick_fd >= 0) close(u->kick_fd);
    pthread_mutex_destroy(&u->mu);
    pthread_cond_destroy(&u->cv);
    for (int i = 0; i < JOB_CAP; i++) XXH3_freeState(u->jobs[i].hs);
    free(u->jobs);
    free(u);
}

static const io_ops uring_ops = {"io_uring", u_submit, u_flush, u_wait, u_destroy, u_busy};

sl_status io_uring_engine_new(int fd, int depth, io_engine **out, sl_error *err) {
    *out = NULL;
    uring_engine *u = calloc(1, sizeof *u);
    if (!u) return err_set(err, SL_ENOMEM, "out of memory");
    if (depth < 1) depth = 1;
    u->jobs = calloc(JOB_CAP, sizeof *u->jobs);
    if (!u->jobs) {
        free(u);
        return err_set(err, SL_ENOMEM, "out of memory");
    }
    for (int i = 0; i < JOB_CAP; i++) u->jobs[i].next_free = i + 1 < JOB_CAP ? i + 1 : -1;
    /* room for a flush's pieces: depth reads of up to 16 pieces (more are submitted in turns); ring_setup adds
     * the kick's */
    u->ring_entries = (unsigned)(depth * 16 < 4096 ? depth * 16 : 4096);
    u->base.ops = &uring_ops;
    u->base.fd = fd;
    u->base.depth = depth;
    pthread_mutex_init(&u->mu, NULL);
    pthread_cond_init(&u->cv, NULL);
    sl_status st = SL_OK;
    u->kick_fd = eventfd(0, EFD_CLOEXEC);
    if (u->kick_fd < 0) {
        st = err_set(err, err_from_errno(errno), "cannot make the io_uring thread's eventfd: %s",
                    strerror(errno));
        goto fail;
    }
    if (pthread_create(&u->reaper, NULL, reap, u) != 0) {
        st = err_set(err, SL_ENOMEM, "cannot start the io_uring thread");
        goto fail;
    }
    u->reaper_up = 1;
    pthread_mutex_lock(&u->mu);
    while (!u->setup) pthread_cond_wait(&u->cv, &u->mu);
    const int rc = u->setup;
    pthread_mutex_unlock(&u->mu);
    if (rc < 0) {
        st = err_set(err, SL_EUNSUPPORTED, "io_uring is not available: %s", strerror(-rc));
        goto fail;
    }
    *out = &u->base;
    return SL_OK;
fail:
    u_destroy(&u->base);
    return st;
}
