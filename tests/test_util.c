/* test_util.c — dtype conversions, the thread pool, and the layering of the rooms under src/. */
#include <dirent.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test.h"
#include "util/dtype.h"
#include "util/err.h"
#include "util/threadpool.h"

TEST(f16_roundtrip_all_values) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaN */
        float f = f16_to_f32((uint16_t)h);
        if (f32_to_f16(f) != h) bad++;
    }
    CHECKF(bad == 0, "%d f16 values do not round-trip", bad);
    CHECK(f16_to_f32(0x3c00) == 1.0f && f16_to_f32(0xc000) == -2.0f && f16_to_f32(0x0001) == ldexpf(1, -24));
    CHECK(f32_to_f16(1.0f + ldexpf(1, -11)) == 0x3c00);          /* tie to even */
    CHECK(f32_to_f16(1.0f + 3 * ldexpf(1, -11)) == 0x3c02);
    CHECK(f32_to_f16(70000.0f) == 0x7c00);
}

TEST(bf16_rounding) {
    CHECK(bf16_to_f32(0x3f80) == 1.0f);
    CHECK(f32_to_bf16(1.0f + ldexpf(1, -8)) == 0x3f80);          /* tie to even, down */
    CHECK(f32_to_bf16(1.0f + 3 * ldexpf(1, -8)) == 0x3f82);      /* tie to even, up */
    srand(test_seed());
    for (int i = 0; i < 1000; i++) {
        uint16_t h = (uint16_t)(rand() & 0x7f7f);
        CHECKF(f32_to_bf16(bf16_to_f32(h)) == h, "0x%04x does not round-trip (seed %u)", h, test_seed());
    }
}

TEST(fp8_e4m3_values) {
    CHECK(f8e4m3_to_f32(0x38) == 1.0f);
    CHECK(f8e4m3_to_f32(0x7e) == 448.0f);
    CHECK(f8e4m3_to_f32(0xfe) == -448.0f);
    CHECK(f8e4m3_to_f32(0x01) == ldexpf(1, -9));
    CHECK(f8e4m3_to_f32(0x08) == ldexpf(1, -6));
    CHECK(isnan(f8e4m3_to_f32(0x7f)));
    CHECK(f8e4m3_to_f32(0x3c) == 1.5f);
}

static void fill_idx(void *ctx, size_t b, size_t e) {
    int *v = ctx;
    for (size_t i = b; i < e; i++) v[i] += (int)i + 1;
}

/* An error message is one line: control bytes from a name read out of a file become '?' (fuzzed GGUF headers
 * put a newline into an architecture name), in err_set and in err_prefix's prefix. */
TEST(error_messages_are_one_line) {
    sl_error e = {0};
    CHECK(err_set(&e, SL_EFORMAT, "arch '%s' bad", "qwen3\nmo\x1b[2J\x7f") == SL_EFORMAT);
    CHECKF(!strcmp(e.msg, "arch 'qwen3?mo?[2J?' bad"), "got '%s'", e.msg);
    CHECK(err_prefix(&e, "file\t%s", "a\rb") == SL_EFORMAT);
    CHECKF(!strcmp(e.msg, "file?a?b: arch 'qwen3?mo?[2J?' bad"), "got '%s'", e.msg);
    CHECK(err_set(&e, SL_EIO, "caf\xc3\xa9 ok") == SL_EIO && !strcmp(e.msg, "caf\xc3\xa9 ok")); /* UTF-8 kept */
}

TEST(threadpool_covers_each_index_once) {
    for (int t = 1; t <= 4; t++) {
        pool_t *p = pool_new(t);
        CHECK(p && pool_size(p) == t);
        for (size_t n = 1; n < 200; n += 37) {
            int *v = calloc(n, sizeof *v);
            pool_for(p, n, 1, fill_idx, v);
            pool_for(p, n, 7, fill_idx, v);
            int ok = 1;
            for (size_t i = 0; i < n; i++) ok &= v[i] == 2 * ((int)i + 1);
            free(v);
            if (!ok) pool_free(p);
            CHECKF(ok, "threads %d n %zu", t, n);
        }
        pool_free(p);
    }
    pool_for(NULL, 3, 1, fill_idx, (int[3]){0});
}

/* pool_for_any: ranges claimed by any thread. Each index is covered exactly once (fill_any adds, so a
 * range run twice or skipped shows), every range starts at a multiple of the grain and is a multiple of it
 * long but the last; static and dynamic jobs interleave back to back on one pool (a worker late for one job
 * must not run a range of the next). */
typedef struct {
    int *v;
    size_t grain, n;
    atomic_int bad;
} any_ctx;

static void fill_any(void *ctx, size_t b, size_t e) {
    any_ctx *c = ctx;
    if (b % c->grain || (e != c->n && (e - b) % c->grain) || e <= b || e > c->n) atomic_store(&c->bad, 1);
    for (size_t i = b; i < e && i < c->n; i++) c->v[i] += (int)i + 1;
}

TEST(threadpool_any_covers_each_index_once) {
    for (int t = 1; t <= 4; t++) {
        pool_t *p = pool_new(t);
        CHECK(p);
        for (int round = 0; round < 310; round++) { /* the last 10: past the pool's largest chunk */
            size_t n = round < 300 ? 1 + (size_t)(round * 97 % 3000) : 40000 + (size_t)round * 131,
                   grain = 1 + (size_t)(round % 9);
            int *v = calloc(n, sizeof *v);
            any_ctx c = {v, grain, n, 0};
            pool_for_any(p, n, grain, fill_any, &c);
            pool_for(p, n, 1, fill_idx, v); /* a static job right after a dynamic one */
            pool_for_any(p, n, grain, fill_any, &c);
            int ok = !atomic_load(&c.bad);
            for (size_t i = 0; i < n; i++) ok &= v[i] == 3 * ((int)i + 1);
            free(v);
            if (!ok) pool_free(p);
            CHECKF(ok, "threads %d n %zu grain %zu", t, n, grain);
        }
        pool_free(p);
    }
    int one[3] = {0};
    any_ctx c = {one, 1, 3, 0};
    pool_for_any(NULL, 3, 1, fill_any, &c);
    CHECK(one[0] == 1 && one[2] == 3);
}

/* Guided chunks: a big dynamic job's ranges shrink towards its end (the one holding the last item is at most
 * 256 items, the first is larger), and back-to-back dynamic jobs, each with its own ctx, never mix one job's
 * parameters with another's (the two parameter slots are reused every other job, read without a lock). */
typedef struct {
    atomic_int *hits; /* [n] */
    size_t n, grain, first_len, last_len;
    atomic_int bad;
    int tag;
} guided_ctx;

static void guided_part(void *ctx, size_t b, size_t e) {
    guided_ctx *c = ctx;
    if (b >= e || e > c->n || b % c->grain) atomic_store(&c->bad, 1);
    if (b == 0) c->first_len = e - b;
    if (e == c->n) c->last_len = e - b;
    for (size_t i = b; i < e && i < c->n; i++) atomic_fetch_add(&c->hits[i], c->tag);
}

TEST(threadpool_any_chunks_shrink_and_jobs_stay_apart) {
    for (int t = 2; t <= 3; t++) {
        pool_t *p = pool_new(t);
        CHECK(p);
        const size_t n = 151936, grain = 32; /* an LM head's rows, claimed in row blocks */
        guided_ctx g = {calloc(n, sizeof(atomic_int)), n, grain, 0, 0, 0, 1};
        pool_for_any(p, n, grain, guided_part, &g);
        int ok = !atomic_load(&g.bad);
        for (size_t i = 0; i < n; i++) ok &= atomic_load(&g.hits[i]) == 1;
        CHECKF(ok, "threads %d: every row once", t);
        CHECKF(g.last_len <= 256 && g.first_len > 1024, "threads %d: first chunk %zu rows, last %zu", t, g.first_len,
               g.last_len);
        free(g.hits);
        enum { JOBS = 2000, N = 40 };
        guided_ctx *c = calloc(JOBS, sizeof *c);
        atomic_int *hits = calloc((size_t)JOBS * N, sizeof *hits);
        for (int k = 0; k < JOBS; k++) {
            c[k] = (guided_ctx){hits + (size_t)k * N, N, 1 + (size_t)(k % 3), 0, 0, 0, k + 1};
            pool_for_any(p, N, c[k].grain, guided_part, &c[k]);
        }
        ok = 1;
        for (int k = 0; k < JOBS; k++) {
            ok &= !atomic_load(&c[k].bad);
            for (int i = 0; i < N; i++) ok &= atomic_load(&hits[(size_t)k * N + i]) == k + 1;
        }
        CHECKF(ok, "threads %d: %d back-to-back jobs, each item once with its own job's tag", t, JOBS);
        free(c);
        free(hits);
        pool_free(p);
    }
}

/* A worker late for a dynamic job (nobody waits for it) must never take a later static job's parameters for
 * that job's: with more threads than cores, workers are preempted anywhere, between loading the generation and
 * reading its slot too, while the caller runs dynamic, dynamic, static jobs back to back (the static job reuses
 * the first one's slot). Every static job's items are each done exactly once, and done when pool_for
 * returns; nothing runs a part twice later. */
typedef struct {
    atomic_int *hits;
    size_t n;
} count_ctx;

static void count_part(void *ctx, size_t b, size_t e) {
    count_ctx *c = ctx;
    for (size_t i = b; i < e && i < c->n; i++) atomic_fetch_add(&c->hits[i], 1);
}

static void noop_part(void *ctx, size_t b, size_t e) {
    (void)ctx;
    for (volatile size_t i = b; i < e; i++) {
    }
}

TEST(threadpool_late_worker_never_reads_a_refilled_slot) {
    enum { ROUNDS = 3000, N = 64 };
    for (int t = 4; t <= 8; t += 4) {
        pool_t *p = pool_new(t);
        CHECK(p);
        atomic_int *hits = calloc((size_t)ROUNDS * N, sizeof *hits);
        CHECK(hits);
        int ok = 1;
        for (int r = 0; r < ROUNDS && ok; r++) {
            pool_for_any(p, 2, 1, noop_part, NULL);
            pool_for_any(p, 2, 1, noop_part, NULL);
            count_ctx c = {hits + (size_t)r * N, N};
            pool_for(p, N, 1, count_part, &c);
            for (int i = 0; i < N; i++) ok &= atomic_load(&c.hits[i]) == 1;
        }
        pool_free(p); /* joins the workers: a part run twice late would show now */
        for (size_t i = 0; i < (size_t)ROUNDS * N; i++) ok &= atomic_load(&hits[i]) <= 1;
        free(hits);
        CHECKF(ok, "threads %d: each static job's items once, done at its return", t);
    }
}

/* pool_hint: hints before jobs (the workers prefetch while the caller works alone), several in a row,
 * while the workers sleep, with NULL and empty ranges, more ranges than SL_POOL_HINT_MAX and ranges far larger
 * than a gap, on pools of 1-8 threads: every job still covers each index once, no byte of the hinted memory
 * changes, and a pool with a hint outstanding is freed cleanly. Without a pool or arguments it does nothing. */
static void spin_us(int us) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 < us);
}

TEST(threadpool_hints_change_nothing) {
    enum { BUF = 8 << 20 };
    unsigned char *buf = malloc(BUF);
    CHECK(buf);
    for (size_t i = 0; i < BUF; i++) buf[i] = (unsigned char)(i * 131 + 7);
    pool_hint(NULL, NULL, NULL, 1);
    static int *kept[400];
    static size_t kept_n[400];
    static const int threads[] = {1, 2, 3, 4, 8};
    for (int ti = 0; ti < 5; ti++) {
        pool_t *p = pool_new(threads[ti]);
        CHECK(p);
        pool_hint(p, NULL, NULL, 2);
        int ok = 1;
        for (int round = 0; round < 400 && ok; round++) {
            const void *hp[SL_POOL_HINT_MAX + 2];
            size_t hl[SL_POOL_HINT_MAX + 2];
            const int nh = 1 + round % (SL_POOL_HINT_MAX + 2);
            for (int k = 0; k < nh; k++) {
                size_t off = (size_t)(round * 7919 + k * 104729) % (BUF / 2);
                hp[k] = k == 1 && round % 5 == 0 ? NULL : buf + off;
                hl[k] = round % 11 == 0 ? BUF / 2 : round % 7 == 0 ? 0 : (size_t)(1 + round * 977 % 300000);
            }
            pool_hint(p, hp, hl, nh);
            if (round % 3 == 0) pool_hint(p, hp, hl, nh > 1 ? nh - 1 : 1); /* a later one replaces it */
            if (round % 4 == 1) spin_us(20 + round % 40); /* the caller's serial work: workers prefetch */
            if (round % 50 == 7) spin_us(3000);          /* longer than any spin: workers asleep */
            size_t n = 1 + (size_t)(round * 389 % 5000), grain = 1 + (size_t)(round % 5);
            int *v = calloc(n, sizeof *v);
            any_ctx c = {v, grain, n, 0};
            if (round % 2) pool_for_any(p, n, grain, fill_any, &c);
            else pool_for(p, n, grain, fill_idx, v);
            for (size_t i = 0; i < n; i++) ok &= v[i] == (int)i + 1;
            ok &= !atomic_load(&c.bad);
            kept[round] = v, kept_n[round] = n; /* looked at again once the pool is gone: nothing ran twice late */
            if (!ok) fprintf(stderr, "    threads %d round %d: a job's items not each once\n", threads[ti], round);
        }
        pool_hint(p, (const void *[]){buf}, (size_t[]){BUF}, 1); /* outstanding when the pool goes */
        pool_free(p);
        for (int r = 0; r < 400; r++) {
            for (size_t i = 0; kept[r] && i < kept_n[r]; i++) ok &= kept[r][i] == (int)i + 1;
            free(kept[r]);
            kept[r] = NULL;
        }
        CHECKF(ok, "threads %d: a job's items not each once", threads[ti]);
    }
    int same = 1;
    for (size_t i = 0; i < BUF; i++) same &= buf[i] == (unsigned char)(i * 131 + 7);
    free(buf);
    CHECKF(same, "a hint changed the hinted memory");
}

/* pool_thread: inside a job every call gets an index below the pool's size that no other call running at
 * the same time holds (a busy flag per index), and both the caller (0) and the workers take part; jobs come
 * back to back (the spinning hand-off), after a pause longer than any spin (workers asleep), and with the
 * workers' share slower than the caller's (the caller waits, then sleeps). */
typedef struct {
    pool_t *p;
    atomic_int busy[8], seen[8], bad;
    int slow_us;
} tid_ctx;

static void tid_part(void *ctx, size_t b, size_t e) {
    tid_ctx *c = ctx;
    int id = pool_thread(c->p);
    if (id < 0 || id >= pool_size(c->p) || atomic_exchange(&c->busy[id], 1)) {
        atomic_store(&c->bad, 1);
        return;
    }
    atomic_store(&c->seen[id], 1);
    if (c->slow_us && id) {
        struct timespec ts = {0, (long)c->slow_us * 1000};
        nanosleep(&ts, NULL);
    }
    for (volatile size_t i = b; i < e; i++) {
    }
    atomic_store(&c->busy[id], 0);
}

TEST(threadpool_thread_index_is_unique_per_running_call) {
    for (int t = 1; t <= 4; t++) {
        pool_t *p = pool_new(t);
        CHECK(p);
        tid_ctx c = {.p = p};
        int workers_seen = 0;
        for (int round = 0; round < 60; round++) {
            c.slow_us = round % 3 == 2 ? 300 : 0;
            if (round % 3 == 1) {
                struct timespec ts = {0, 2000000}; /* 2 ms: every worker is asleep */
                nanosleep(&ts, NULL);
            }
            pool_for_any(p, 4096, 1, tid_part, &c);
            pool_for(p, 64, 1, tid_part, &c);
            for (int i = 1; i < t; i++) workers_seen += atomic_load(&c.seen[i]);
        }
        CHECKF(!atomic_load(&c.bad), "threads %d: an index out of range or held twice at once", t);
        CHECKF(t == 1 || workers_seen > 0, "threads %d: no worker ever ran a part", t);
        CHECK(pool_thread(p) == 0); /* the caller */
        pool_free(p);
    }
    CHECK(pool_thread(NULL) == 0);
}

/* The rooms of src/ (its folders), lowest first: a file may include its own room's headers and those of the
 * rooms before it, never one after (tools/rooms.py counts the same order's arrows up and folder loops; keep
 * the two lists in step). util: dtypes, tensors, errors, the pool; quant: the quantised layouts; kernels:
 * per-ISA matmuls; family: config, the family tables, the readers their hooks use; import: checkpoints;
 * format: the container; backend: the ops table; stream: the expert cache and its I/O; model: the forward
 * pass; engine: the public API; text, pull, serve, cli: what people use. */
static const char *const ROOMS[] = {"util",   "quant",  "kernels", "family", "import", "format", "backend",
                                    "stream", "dist",   "model",   "engine", "text",   "pull",   "serve", "cli"};
enum { N_ROOMS = sizeof ROOMS / sizeof ROOMS[0] };

static int room_rank(const char *name, size_t len) {
    for (int i = 0; i < N_ROOMS; i++)
        if (strlen(ROOMS[i]) == len && !strncmp(ROOMS[i], name, len)) return i;
    return -1;
}

/* Checks every #include "..." of src/<sub> (a room's folder, recursively) against the room of rank `rank`:
 * "sluice.h" (the public header) or "<room>/..." of a room at or below it. Returns the files read; each bad
 * include is a failure naming the file and line. */
static int scan_room(const char *sub, int rank, int *bad) {
    DIR *d = opendir(test_path("src/%s", sub));
    if (!d) return 0;
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *nm = e->d_name;
        size_t n = strlen(nm);
        char path[512];
        if (nm[0] == '.' || snprintf(path, sizeof path, "%s/%s", sub, nm) >= (int)sizeof path) continue;
        if (e->d_type == DT_DIR) {
            files += scan_room(path, rank, bad);
            continue;
        }
        if (!(n > 2 && (!strcmp(nm + n - 2, ".c") || !strcmp(nm + n - 2, ".h"))) && !(n > 3 && !strcmp(nm + n - 3, ".cu")))
            continue;
        FILE *f = fopen(test_path("src/%s", path), "r");
        if (!f) continue;
        files++;
        char line[512];
        for (int ln = 1; fgets(line, sizeof line, f); ln++) {
            char inc[256];
            if (sscanf(line, " #include \"%255[^\"]\"", inc) != 1) continue;
            const char *slash = strchr(inc, '/');
            int to = slash ? room_rank(inc, (size_t)(slash - inc)) : -1;
            if (!strcmp(inc, "sluice.h") || (to >= 0 && to <= rank)) continue;
            if (to > rank)
                test_fail(__FILE__, __LINE__, "src/%s:%d includes \"%s\": %s is above %s in the room order", path, ln,
                          inc, ROOMS[to], ROOMS[rank]);
            else
                test_fail(__FILE__, __LINE__, "src/%s:%d includes \"%s\", not a room's header (\"<room>/<file>.h\")",
                          path, ln, inc);
            (*bad)++;
        }
        fclose(f);
    }
    closedir(d);
    return files;
}

TEST(rooms_include_downward) {
    int bad = 0;
    for (int i = 0; i < N_ROOMS; i++)
        CHECKF(scan_room(ROOMS[i], i, &bad) > 0, "src/%s: no sources found (run from the repository root)", ROOMS[i]);
    CHECK(bad == 0);
    /* every folder of src/ has its place in the order */
    DIR *d = opendir(test_path("src"));
    CHECK(d);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_type == DT_DIR && e->d_name[0] != '.')
            CHECKF(room_rank(e->d_name, strlen(e->d_name)) >= 0, "src/%s is not in the room order (tests/test_util.c ROOMS)",
                   e->d_name);
    if (d) closedir(d);
}
