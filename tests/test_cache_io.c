/*
 * test_cache_io.c — the I/O engines and the expert cache driven directly, without a model (stream/io.h,
 * stream/cache.h): the engines checksum whole reads in their completion path, io_uring's pieces and handed
 * flushes come back whole, occupancy adds up; through the cache API, failed prefetch and hinted reads stay
 * quiet and are read again on demand, a block corrupted on disk is caught on the I/O thread, and hints between
 * requests are read (a layer-major union) or scored (a decode guess). The streamed model's tests are
 * test_stream.c's.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "backend/backend.h"
#include "format/container.h"
#include "sluice.h"
#include "stream/cache.h"
#include "stream/io.h"
#include "stream_rig.h"
#include "test.h"

/* The io_uring engine as an expression, beside stream_rig.h's pread_new and cache_make. */
static io_engine *uring_new(int fd, int depth, sl_error *why) {
    io_engine *e;
    io_uring_engine_new(fd, depth, &e, why);
    return e;
}

/* The reads' file: size bytes of the LCG stream from seed written to p; the bytes (malloc'ed), or NULL when p could
 * not be written. */
static uint8_t *rand_file(const char *p, size_t size, uint64_t seed) {
    uint8_t *data = malloc(size);
    uint64_t r = seed;
    for (size_t i = 0; data && i < size; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        data[i] = (uint8_t)(r >> 56);
    }
    FILE *fp = data ? fopen(p, "wb") : NULL;
    const int ok = fp && fwrite(data, 1, size, fp) == size;
    if (fp) fclose(fp);
    if (!ok) free(data);
    return ok ? data : NULL;
}

/* Both engines checksum whole reads in their completion path when asked (io_req.hash_len): the hash of
 * the first hash_len bytes, set before the completion is handed out; none for a read not asked for or
 * cut short; the fault injector's corruption shows in the engine's hash. */
TEST(engines_checksum_whole_reads) {
    const char *p = test_path("%s/io-hash.bin", test_tmpdir());
    enum { NB = 4, BL = 65536 };
    uint8_t *data = rand_file(p, NB * BL, 99);
    CHECK(data);
    for (int kind = 0; kind < 4; kind++) { /* uring, pread, fault(pread) corrupting, fault(pread) short */
        int fd = open(p, O_RDONLY);
        CHECK(fd >= 0);
        sl_error why = {0};
        io_engine *e = kind == 0 ? uring_new(fd, 8, &why) : pread_new(fd, 2, &why);
        if (!e && kind == 0) { /* no io_uring here */
            close(fd);
            continue;
        }
        CHECKF(e, "%s", why.msg);
        io_fault_cfg fc;
        memset(&fc, 0, sizeof fc);
        fc.corrupt_every = kind == 2;
        fc.short_every = kind == 3;
        if (kind >= 2) e = io_fault_engine_new(e, &fc);
        uint8_t *bufs[NB];
        io_req rq[NB];
        for (int b = 0; b < NB; b++) {
            bufs[b] = aligned_alloc(4096, BL);
            rq[b] = (io_req){.off = (uint64_t)b * BL, .len = BL, .buf = bufs[b], .hash_len = b == 3 ? 0 : BL - 100 * b};
            CHECK(e->ops->submit(e, &rq[b]) == 0);
        }
        CHECK(e->ops->flush(e) == 0);
        for (int n = 0; n < NB; n++) {
            io_req *got = NULL;
            CHECK(e->ops->wait(e, &got) == 0 && got);
            int b = (int)(got - rq);
            uint64_t want = XXH3_64bits(data + (size_t)b * BL, got->hash_len);
            if (kind == 3 || b == 3) {
                CHECKF(!got->hashed, "engine %d block %d: hashed a read %s", kind, b, b == 3 ? "not asked for" : "cut short");
                continue;
            }
            CHECKF(got->res == BL && got->hashed, "engine %d block %d: res %lld hashed %d", kind, b, (long long)got->res,
                   got->hashed);
            CHECKF(kind == 2 ? got->hash != want && got->hash == XXH3_64bits(bufs[b], got->hash_len) : got->hash == want,
                   "engine %d block %d: hash %016llx, data's %016llx", kind, b, (unsigned long long)got->hash,
                   (unsigned long long)want);
        }
        io_destroy(e);
        close(fd);
        for (int b = 0; b < NB; b++) free(bufs[b]);
    }
    free(data);
}

/* io_uring's chunked chains (io_uring.c): reads cut into 4 KiB pieces dealt into linked chains (3 of them,
 * or as many as the flush's pieces / rounds for rounds 1, 2, 3 and 7, the last chains of one piece besides
 * longer ones) come back whole, once per request, with the data and the checksum of the whole block; a read
 * running past the end of the file reports the bytes before it (the piece at the end short, the pieces after
 * it read nothing or cancelled with their chain), which the cache resumes as any short read; a lone read in
 * pieces (one wave with rounds) likewise. */
TEST(uring_pieces_reassemble) {
    const char *p = test_path("%s/io-pieces.bin", test_tmpdir());
    enum { NB = 4, BL = 65536, TAIL = 1808 };
    const size_t size = (size_t)NB * BL + TAIL;
    uint8_t *data = rand_file(p, size, 7);
    CHECK(data);
    int fd = open(p, O_RDONLY);
    CHECK(fd >= 0);
    sl_error why = {0};
    io_engine *e = uring_new(fd, 8, &why);
    if (!e) { /* no io_uring here */
        close(fd);
        free(data);
        return;
    }
    e->chunk = 4096;
    static const int layouts[][2] = {{3, 0}, {3, 1}, {0, 2}, {0, 3}, {0, 7}}; /* chains, rounds */
    for (int round = 0; round < 10; round++) { /* the engine's piece slots are reused */
        e->chains = layouts[round % 5][0];
        e->rounds = layouts[round % 5][1];
        uint8_t *bufs[NB + 1];
        io_req rq[NB + 1];
        for (int b = 0; b <= NB; b++) {
            bufs[b] = aligned_alloc(4096, BL);
            memset(bufs[b], 0, BL);
            /* block NB starts 8 KiB before the last full block's end: 10000 bytes are left in the file */
            const uint64_t off = b < NB ? (uint64_t)b * BL : (uint64_t)NB * BL - 8192;
            rq[b] = (io_req){.off = off, .len = BL, .buf = bufs[b], .hash_len = b < NB ? BL - 64 * b : BL};
            CHECK(e->ops->submit(e, &rq[b]) == 0);
        }
        CHECK(e->ops->flush(e) == 0);
        for (int n = 0; n <= NB; n++) {
            io_req *got = NULL;
            CHECK(e->ops->wait(e, &got) == 0 && got);
            int b = (int)(got - rq);
            CHECK(b >= 0 && b <= NB);
            if (b == NB) {
                CHECKF(got->res == 8192 + TAIL && !got->hashed, "past the end: res %lld hashed %d (want %d, none)",
                       (long long)got->res, got->hashed, 8192 + TAIL);
                CHECK(memcmp(bufs[b], data + (size_t)NB * BL - 8192, 8192 + TAIL) == 0);
                continue;
            }
            CHECKF(got->res == BL && got->hashed && got->hash == XXH3_64bits(data + (size_t)b * BL, got->hash_len),
                   "round %d block %d: res %lld hashed %d", round, b, (long long)got->res, got->hashed);
            CHECKF(memcmp(bufs[b], data + (size_t)b * BL, BL) == 0, "round %d block %d: the pieces' data differ", round, b);
        }
        /* a lone read: block 2 again, and the one past the end */
        for (int b = 2; b <= NB; b += NB - 2) {
            memset(bufs[b], 0, BL);
            rq[b].res = 0;
            CHECK(e->ops->submit(e, &rq[b]) == 0 && e->ops->flush(e) == 0);
            io_req *got = NULL;
            CHECK(e->ops->wait(e, &got) == 0 && got == &rq[b]);
            const int64_t want = b < NB ? BL : 8192 + TAIL;
            CHECKF(got->res == want && got->hashed == (b < NB), "round %d lone block %d: res %lld hashed %d", round, b,
                   (long long)got->res, got->hashed);
            CHECK(memcmp(bufs[b], data + (size_t)rq[b].off, (size_t)want) == 0);
        }
        for (int b = 0; b <= NB; b++) free(bufs[b]);
    }
    io_destroy(e);
    close(fd);
    free(data);
}

/* io_uring's thread submits what the caller hands it (io_uring.c): several flushes handed over before the
 * first wait are each submitted, in pieces of several hash slices (64 KiB) dealt into chains, and every read
 * comes back once, whole, with the checksum of its block; the engine is then destroyed with nothing in flight
 * and made again (its thread and ring end and start cleanly), three times. */
TEST(uring_thread_submits_handed_flushes) {
    const char *p = test_path("%s/io-handoff.bin", test_tmpdir());
    enum { NB = 6, BL = 512 << 10, PER_FLUSH = 2 };
    uint8_t *data = rand_file(p, (size_t)NB * BL, 11);
    CHECK(data);
    uint8_t *bufs[NB];
    for (int b = 0; b < NB; b++) bufs[b] = aligned_alloc(4096, BL);
    for (int life = 0; life < 3; life++) {
        int fd = open(p, O_RDONLY);
        CHECK(fd >= 0);
        sl_error why = {0};
        io_engine *e = uring_new(fd, 8, &why);
        if (!e) { /* no io_uring here */
            close(fd);
            break;
        }
        e->chunk = 128 << 10; /* 4 pieces a block, 2 hash slices a piece */
        e->rounds = 2;
        io_req rq[NB];
        for (int b = 0; b < NB; b++) {
            memset(bufs[b], 0, BL);
            rq[b] = (io_req){.off = (uint64_t)b * BL, .len = BL, .buf = bufs[b], .hash_len = BL - 4096 * b};
            CHECK(e->ops->submit(e, &rq[b]) == 0);
            if (b % PER_FLUSH == PER_FLUSH - 1) CHECK(e->ops->flush(e) == 0);
        }
        int seen[NB] = {0};
        for (int n = 0; n < NB; n++) {
            io_req *got = NULL;
            CHECK(e->ops->wait(e, &got) == 0 && got);
            const int b = (int)(got - rq);
            CHECK(b >= 0 && b < NB && !seen[b]);
            seen[b] = 1;
            CHECKF(got->res == BL && got->hashed && got->hash == XXH3_64bits(data + (size_t)b * BL, got->hash_len),
                   "life %d block %d: res %lld hashed %d", life, b, (long long)got->res, got->hashed);
            CHECKF(memcmp(bufs[b], data + (size_t)b * BL, BL) == 0, "life %d block %d: the data differ", life, b);
        }
        io_destroy(e);
        close(fd);
    }
    for (int b = 0; b < NB; b++) free(bufs[b]);
    free(data);
}

/* Device occupancy (io.h busy): a read counts from its submission to its completion, so the busy time lies
 * within the wall time around the reads, the depth integral is at least the busy time, and at most as many
 * reads as were in the device at once (pread: its worker count) times it; nothing moves while idle. */
TEST(engines_report_occupancy) {
    const char *p = test_path("%s/io-busy.bin", test_tmpdir());
    enum { NB = 6, BL = 1 << 20 };
    uint8_t *data = calloc(NB, BL);
    FILE *fp = fopen(p, "wb");
    CHECK(data && fp && fwrite(data, 1, (size_t)NB * BL, fp) == (size_t)NB * BL);
    fclose(fp);
    free(data);
    for (int kind = 0; kind < 3; kind++) { /* uring, pread (2 workers), fault(pread) */
        int fd = open(p, O_RDONLY);
        CHECK(fd >= 0);
        sl_error why = {0};
        io_engine *e = kind == 0 ? uring_new(fd, 8, &why) : pread_new(fd, 2, &why);
        if (!e && kind == 0) {
            close(fd);
            continue;
        }
        CHECKF(e, "%s", why.msg);
        io_fault_cfg fc;
        memset(&fc, 0, sizeof fc);
        if (kind == 2) e = io_fault_engine_new(e, &fc);
        CHECK(e->ops->busy);
        uint64_t b0, d0, b1, d1, b2, d2;
        e->ops->busy(e, &b0, &d0);
        CHECKF(b0 == 0 && d0 == 0, "engine %d: busy %llu ns before any read", kind, (unsigned long long)b0);
        uint8_t *buf = aligned_alloc(4096, (size_t)NB * BL);
        io_req rq[NB];
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int b = 0; b < NB; b++) {
            rq[b] = (io_req){.off = (uint64_t)b * BL, .len = BL, .buf = buf + (size_t)b * BL};
            CHECK(e->ops->submit(e, &rq[b]) == 0);
        }
        CHECK(e->ops->flush(e) == 0);
        for (int n = 0; n < NB; n++) {
            io_req *got = NULL;
            CHECK(e->ops->wait(e, &got) == 0 && got && got->res == BL);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const uint64_t wall = (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000ll + (t1.tv_nsec - t0.tv_nsec));
        e->ops->busy(e, &b1, &d1);
        const uint64_t most = kind == 0 ? NB : 2;
        CHECKF(b1 > 0 && b1 <= wall && d1 >= b1 && d1 <= most * b1,
               "engine %d: busy %llu ns, depth integral %llu ns, wall %llu ns", kind, (unsigned long long)b1,
               (unsigned long long)d1, (unsigned long long)wall);
        struct timespec nap = {0, 20 * 1000 * 1000};
        nanosleep(&nap, NULL);
        e->ops->busy(e, &b2, &d2);
        CHECKF(b2 == b1 && d2 == d1, "engine %d: busy time grew while idle (%llu -> %llu ns)", kind,
               (unsigned long long)b1, (unsigned long long)b2);
        io_destroy(e);
        close(fd);
        free(buf);
    }
}

/* The fault tests' cache over f: io wrapped in a fault injector that hits the first read of slot 1's expert 7 (model
 * layer 2; layer 1 is dense) once, corrupting it when corrupt, else failing it; 8 blocks, LRU, checksums on, hint
 * mode `hints`, on a CPU backend (*be: be_close after cache_free). On a failure the test has failed, f is closed and
 * *out is NULL. */
static void fault_cache(slc_file *f, io_engine *io, int corrupt, int hints, be_backend **be, cache **out) {
    *out = NULL;
    io_fault_cfg fc;
    memset(&fc, 0, sizeof fc);
    fc.only_off = slc_expert_offset(f, 1, 7);
    if (corrupt) fc.corrupt_every = 1;
    else fc.fail_every = 1;
    fc.max_faults = 1;
    *be = be_cpu_new(NULL, NULL);
    CHECK(*be != NULL);
    sl_error why = {0};
    cache_cfg cc = {f, &f->cfg, io_fault_engine_new(io, &fc), 8 * f->h.expert_stride, CACHE_LRU, 1, 0, hints, *be};
    *out = cache_make(&cc, &why);
    if (!*out) {
        slc_close(f);
        be_close(*be);
    }
    CHECKF(*out, "%s", why.msg);
}

/* A prefetch read that fails (I/O error or corruption) is never reported by itself: unclaimed, it is
 * dropped; claimed by a request meanwhile, it is read again as that request's read. Driven through the
 * cache API directly, on a fault that hits only the first read of layer 2 expert 7. */
static int demand(tn_expert_src *src, int layer, int e) {
    int got = -1, rc = src->begin(src->ctx, layer, &e, 1, 0);
    tn_expert ex;
    if (!rc) rc = src->next(src->ctx, &got, &ex);
    if (!rc) src->release(src->ctx, got);
    src->end(src->ctx);
    return rc ? rc : got == e && ex.gate.data ? 0 : -100;
}

TEST(failed_prefetch_is_quiet_and_retried) {
    const char *path = test_packed("qwen3_next");
    CHECK(path);
    for (int k8 = 0; k8 < 8; k8++) { /* kinds 0-3 through pread, 4-7 the same through io_uring's pieces */
        const int kind = k8 % 4;
        slc_file f;
        sl_error err = {0};
        CHECK(slc_open(path, &f, &err) == SL_OK);
        sl_error why = {0};
        io_engine *io = k8 < 4 ? pread_new(f.fd, 2, &why) : uring_new(f.fd, 8, &why);
        if (!io && k8 >= 4) { /* no io_uring here */
            slc_close(&f);
            continue;
        }
        CHECKF(io, "%s", why.msg);
        io->chunk = 4096; /* the 24 KiB blocks in 6 pieces, 3 chains */
        io->chains = 3;
        be_backend *be;
        cache *c;
        fault_cache(&f, io, kind % 2, 2, &be, &c);
        if (!c) return;
        tn_expert_src src = cache_source(c);
        int seven = 7, rc = 0;
        src.prefetch(src.ctx, 2, &seven, 1, 1); /* this read fails or comes back corrupted */
        if (kind >= 2) rc = demand(&src, 2, 5); /* unclaimed: the failure lands while serving expert 5 */
        if (!rc) rc = demand(&src, 2, 7);
        cache_stats st;
        cache_get_stats(c, &st);
        cache_free(c);
        be_close(be);
        slc_close(&f);
        CHECKF(rc == 0, "kind %d: rc %d", k8, rc);
        CHECKF(st.prefetch_failed == 1 && st.prefetch_reads == 1 && st.reads == (kind >= 2 ? 3u : 2u), "kind %d: prefetch failed %llu reads %llu",
               k8, (unsigned long long)st.prefetch_failed, (unsigned long long)st.reads);
    }
}

/* A block corrupted on disk (no fault injector: the bytes the engine reads are the bad ones) is caught by the
 * checksum computed on the I/O engine's own thread: io_uring's reaper, which hashes the pieces as they land
 * (io_uring.c), with the bad byte in the first, a middle or the last of the 6 pieces, and the pread engine's
 * workers. The demand fails with a message naming the file, layer and expert; the block is not kept (asked
 * again it fails again), and a sound block of the same layer is served. */
TEST(corrupt_block_on_disk_caught_on_the_io_thread) {
    const char *src = test_packed("qwen3_next");
    CHECK(src);
    const char *p = test_path("%s/corrupt-piece.sluice", test_tmpdir());
    for (int kind = 0; kind < 4; kind++) { /* io_uring pieces: first, middle, last; pread */
        CHECK(test_copy_file(src, p) == 0);
        slc_file f;
        sl_error err = {0};
        CHECK(slc_open(p, &f, &err) == SL_OK);
        const uint64_t at = kind == 0 ? 5 : kind == 1 ? 2 * 4096 + 100 : f.block_bytes - 1;
        const uint64_t off = slc_expert_offset(&f, 1, 5) + (kind == 3 ? 3 * 4096 : at); /* slot 1 = layer 2 */
        const int layer = f.moe_layers[1];
        slc_close(&f);
        size_t n;
        char *b = test_read(p, &n);
        CHECK(b && off < n);
        b[off] ^= 0x04;
        test_write(p, b, n);
        free(b);
        CHECK(slc_open(p, &f, &err) == SL_OK); /* the header and manifest are sound */
        sl_error why = {0};
        io_engine *io = kind < 3 ? uring_new(f.fd, 8, &why) : pread_new(f.fd, 2, &why);
        if (!io) { /* no io_uring here */
            slc_close(&f);
            continue;
        }
        io->chunk = 4096; /* the 24 KiB blocks in 6 pieces, 3 chains */
        io->chains = 3;
        be_backend *be = be_cpu_new(NULL, NULL);
        CHECK(be != NULL);
        cache_cfg cc = {&f, &f.cfg, io, 8 * f.h.expert_stride, CACHE_LRU, 1, 0, 0, be};
        cache *c = cache_make(&cc, &why);
        CHECKF(c, "%s", why.msg);
        tn_expert_src es = cache_source(c);
        const int bad = demand(&es, 2, 5);
        char msg[600];
        snprintf(msg, sizeof msg, "%s", es.errmsg(es.ctx));
        const int again = demand(&es, 2, 5), good = demand(&es, 2, 4);
        cache_stats st;
        cache_get_stats(c, &st);
        cache_free(c);
        be_close(be);
        slc_close(&f);
        char want[64];
        snprintf(want, sizeof want, "layer %d, expert 5", layer);
        CHECKF(bad == SL_ECHECKSUM && strstr(msg, want) && strstr(msg, p) && strstr(msg, "checksum"),
               "kind %d: rc %d, message: %s", kind, bad, msg);
        CHECKF(again == SL_ECHECKSUM && good == 0, "kind %d: asked again %d, a sound block %d", kind, again, good);
        CHECKF(st.reads == 3 && (kind == 3 || st.engine_hash_ns > 0) && st.verify_ns == 0,
               "kind %d: %llu reads, engine hash %llu ns, caller hash %llu ns", kind, (unsigned long long)st.reads,
               (unsigned long long)st.engine_hash_ns, (unsigned long long)st.verify_ns);
    }
}

/* An ordered (layer-major) request over `list`, with a hint for the next layer given right after begin
 * as the forward pass gives it; every expert must arrive in list order with its data bound. */
static int ordered_run(tn_expert_src *src, int layer, const int *list, int n, int hint_layer, const int *hint, int n_hint) {
    int rc = src->begin(src->ctx, layer, list, n, 1);
    if (!rc && hint) src->prefetch(src->ctx, hint_layer, hint, n_hint, 1);
    for (int i = 0; !rc && i < n; i++) {
        int got = -1;
        tn_expert ex;
        memset(&ex, 0, sizeof ex);
        rc = src->next(src->ctx, &got, &ex);
        if (!rc && (got != list[i] || !ex.gate.data)) rc = -100;
        if (!rc) src->release(src->ctx, got);
    }
    src->end(src->ctx);
    return rc;
}

/* A hint given during an ordered request (the next layer's union of predicted experts) is read while that
 * request runs and once it ends, and the next request finds the blocks as hits. One hinted read fails (an
 * I/O error, or corruption caught by the checksum): the next layer not needing that expert does not
 * notice; needing it, it reads it again on demand. No request fails either way. */
TEST(ordered_hint_read_ahead_and_its_failures_are_quiet) {
    const char *path = test_packed("qwen3_next");
    CHECK(path);
    for (int kind = 0; kind < 4; kind++) {
        slc_file f;
        sl_error err = {0};
        CHECK(slc_open(path, &f, &err) == SL_OK);
        sl_error why = {0};
        /* one worker: reads complete in the order they were submitted, so every count below is exact */
        io_engine *io = pread_new(f.fd, 1, &why);
        CHECKF(io, "%s", why.msg);
        io->depth = 8;
        be_backend *be;
        cache *c;
        fault_cache(&f, io, kind % 2, 1, &be, &c);
        if (!c) return;
        tn_expert_src src = cache_source(c);
        const int l1[3] = {0, 3, 5}, hint[3] = {5, 7, 9}, l2[3] = {5, 7, 9}, l2_skip[2] = {5, 9};
        int rc = ordered_run(&src, 0, l1, 3, 2, hint, 3);
        cache_stats before;
        cache_get_stats(c, &before); /* the hint's reads are out before layer 2 asks */
        if (!rc) rc = kind >= 2 ? ordered_run(&src, 2, l2, 3, 0, NULL, 0) : ordered_run(&src, 2, l2_skip, 2, 0, NULL, 0);
        cache_stats st;
        cache_get_stats(c, &st);
        cache_free(c);
        be_close(be);
        slc_close(&f);
        CHECKF(rc == 0, "kind %d: rc %d", kind, rc);
        CHECKF(before.prefetch_reads == 3 && before.misses == 3, "kind %d: %llu hint reads, %llu misses before layer 2",
               kind, (unsigned long long)before.prefetch_reads, (unsigned long long)before.misses);
        /* layer 2 claims 5, then waits for 9 (or for 7, claimed: read again) behind the failed read of 7 */
        const unsigned want_hits = kind >= 2 ? 3u : 2u;
        CHECKF(st.prefetch_failed == 1 && st.reads == (kind >= 2 ? 7u : 6u) && st.hits == want_hits && st.misses == 3 &&
                   st.prefetch_used == want_hits,
               "kind %d: prefetch failed %llu, reads %llu, hits %llu, misses %llu, hinted blocks used %llu", kind,
               (unsigned long long)st.prefetch_failed, (unsigned long long)st.reads, (unsigned long long)st.hits,
               (unsigned long long)st.misses, (unsigned long long)st.prefetch_used);
    }
}

/* The two hint tests' cache: the qwen3_next fixture's experts through the pread engine, 8 blocks, LRU, hints
 * in the default mode (1: act on guesses once they prove accurate), checksums on. On a failure the test has
 * failed and h->c is NULL. */
typedef struct {
    slc_file f;
    be_backend *be;
    cache *c;
    tn_expert_src src;
} hint_rig;

static void hint_rig_open(hint_rig *h) {
    memset(h, 0, sizeof *h);
    OPEN_FIXTURE("qwen3_next", NULL, NULL, &h->f);
    sl_error why = {0};
    io_engine *io = pread_new(h->f.fd, 4, &why);
    CHECKF(io, "%s", why.msg);
    h->be = be_cpu_new(NULL, NULL);
    CHECK(h->be != NULL);
    cache_cfg cc = {&h->f, &h->f.cfg, io, 8 * h->f.h.expert_stride, CACHE_LRU, 1, 0, 1, h->be};
    h->c = cache_make(&cc, &why);
    CHECKF(h->c, "%s", why.msg);
    h->src = cache_source(h->c);
}

static void hint_rig_close(hint_rig *h) {
    cache_free(h->c);
    be_close(h->be);
    slc_close(&h->f);
}

/* A layer-major pass hints its first MoE layer before that layer's mixer, with no request active
 * (forward.c eval_multi, moe.c fwd_moe_hint_first): in the default mode (1: act on hints once they prove
 * accurate) that hint is acted on at once, as the next layer's hint during a layer-major request is, and the
 * ordered request that follows claims the blocks it read. Expert 7's read is the request's own. */
TEST(hint_between_requests_reads_ahead) {
    hint_rig h;
    hint_rig_open(&h);
    if (!h.c) return;
    cache *c = h.c;
    tn_expert_src src = h.src;
    const int hint[2] = {3, 5}, want[3] = {3, 5, 7};
    src.prefetch(src.ctx, 2, hint, 2, 1); /* slot 1 = model layer 2 (layer 1 is dense) */
    cache_stats before;
    cache_get_stats(c, &before);
    int rc = src.begin(src.ctx, 2, want, 3, 1), bad = 0;
    for (int i = 0; i < 3 && !rc; i++) {
        int got = -1;
        tn_expert ex;
        memset(&ex, 0, sizeof ex);
        rc = src.next(src.ctx, &got, &ex);
        if (!rc) {
            bad += got != want[i] || !ex.gate.data;
            src.release(src.ctx, got);
        }
    }
    src.end(src.ctx);
    cache_stats st;
    cache_get_stats(c, &st);
    hint_rig_close(&h);
    CHECKF(rc == 0 && bad == 0, "rc %d, %d experts out of order or empty", rc, bad);
    CHECKF(before.prefetch_reads == 2 && st.prefetch_reads == 2 && st.prefetch_used == 2 && st.reads == 3,
           "hint reads %llu before the request, %llu after, used %llu, reads %llu",
           (unsigned long long)before.prefetch_reads, (unsigned long long)st.prefetch_reads,
           (unsigned long long)st.prefetch_used, (unsigned long long)st.reads);
}

/* A decode step's router guess that comes between requests (a device tier that served the whole step from
 * its slots opens none here) is a guess, not a layer-major union: in the default mode (1: act on guesses
 * once they prove accurate) it starts no read before any guess has been scored, whereas the same experts
 * hinted as an ordered union are read at once (hint_between_requests_reads_ahead). */
TEST(decode_guess_between_requests_is_scored_not_read) {
    hint_rig h;
    hint_rig_open(&h);
    if (!h.c) return;
    cache *c = h.c;
    tn_expert_src src = h.src;
    const int hint[2] = {3, 5};
    src.prefetch(src.ctx, 2, hint, 2, 0);
    cache_stats guess;
    cache_get_stats(c, &guess);
    src.prefetch(src.ctx, 2, hint, 2, 1);
    cache_stats ordered;
    cache_get_stats(c, &ordered);
    hint_rig_close(&h);
    CHECKF(guess.prefetch_reads == 0 && guess.reads == 0 && ordered.prefetch_reads == 2,
           "after the guess %llu hint reads (%llu reads), after the ordered hint %llu",
           (unsigned long long)guess.prefetch_reads, (unsigned long long)guess.reads,
           (unsigned long long)ordered.prefetch_reads);
}
