/*
 * test_tier.c — the device tier's async copies (stream/tier.h) against a backend whose copy engine reads
 * late: the CPU backend with copy_async / mark / fence_done added, where a queued copy takes its bytes from
 * the host slot only when its fence passes (a fence_done poll passes it on its third ask, a wait or sync()
 * at once). A tier that handed a RAM slot back before its copy passed lets the cache read another expert
 * into that slot first, and the copy then lands the wrong block; so every expert delivered must equal the
 * file's block, over caches of 1 - 32 slots, decode-like (unordered) and layer-major (ordered) requests.
 * The whole-model check of the same path is tools/cuda_model_test.sh on the GPU (streamed + tier ==
 * resident, bitwise).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "format/container.h"
#include "stream/cache.h"
#include "stream/io.h"
#include "stream/tier.h"
#include "stream_rig.h"
#include "test.h"

#define MAXQ 256

/* The tier as an expression, beside stream_rig.h's pread_new and cache_make. */
static tier *tier_make(const tier_cfg *tc, sl_error *why) {
    tier *t;
    tier_new(tc, &t, why);
    return t;
}

static struct {
    struct {
        void *dst;
        const void *src;
        size_t bytes;
        int asks;
    } q[MAXQ];
    uint64_t first, next; /* fences first .. next-1 are queued copies, oldest first */
    int max_inflight, marks;
    int (*sync)(be_backend *);
} late;

static void pass_upto(uint64_t f) {
    while (late.first <= f && late.first < late.next) {
        int i = (int)(late.first % MAXQ);
        memcpy(late.q[i].dst, late.q[i].src, late.q[i].bytes);
        late.first++;
    }
}

static uint64_t late_copy_async(be_backend *be, void *dst, const void *src, size_t bytes, uint64_t after) {
    (void)be, (void)after; /* the compute is synchronous here: every fence from mark() has passed */
    if (late.next - late.first >= MAXQ) pass_upto(late.first);
    int i = (int)(late.next % MAXQ);
    late.q[i].dst = dst;
    late.q[i].src = src;
    late.q[i].bytes = bytes;
    late.q[i].asks = 0;
    int inflight = (int)(late.next + 1 - late.first);
    if (inflight > late.max_inflight) late.max_inflight = inflight;
    return late.next++;
}

static uint64_t late_mark(be_backend *be) {
    (void)be;
    late.marks++;
    return late.next > 1 ? late.next - 1 : 1;
}

static int late_fence_done(be_backend *be, uint64_t f, int wait) {
    (void)be;
    if (f < late.first) return 1;
    if (!wait && ++late.q[f % MAXQ].asks < 3) return 0;
    pass_upto(f);
    return 1;
}

static int late_sync(be_backend *be) {
    pass_upto(late.next);
    return late.sync(be);
}

/* The tests' stack: the qwen3_moe fixture's file (rig_open, with want: a block's bytes, and rand() seeded from the
 * run's seed), and over it, one configuration at a time (rig_stack), the CPU backend, a pread engine of 2 threads,
 * an LRU RAM cache of ram_slots experts and a tier of tier_slots experts on the CPU backend, or with RIG_LATE on
 * fake: the CPU's ops and context with the late copy engine above (`late` reset). On a failure the test has failed
 * (test_failed()). rig_unstack frees a configuration, rig_close all of it. */
enum { RIG_LATE = 1, RIG_HYBRID = 2 };

typedef struct {
    slc_file f;
    uint8_t *want;
    be_backend *cpu, fake;
    cache *c;
    tier *t;
    tn_expert_src src;
} rig;

static void rig_open(rig *r) {
    memset(r, 0, sizeof *r);
    OPEN_FIXTURE("qwen3_moe", NULL, NULL, &r->f);
    r->want = malloc((size_t)r->f.block_bytes);
    CHECK(r->want);
    srand(test_seed());
}

static void rig_stack(rig *r, int ram_slots, int tier_slots, int flags) {
    sl_error se = {0};
    r->cpu = be_cpu_new(NULL, NULL);
    CHECK(r->cpu);
    r->fake = *r->cpu;
    if (flags & RIG_LATE) {
        memset(&late, 0, sizeof late);
        late.first = late.next = 1;
        late.sync = r->cpu->sync;
        r->fake.copy_async = late_copy_async;
        r->fake.mark = late_mark;
        r->fake.fence_done = late_fence_done;
        r->fake.sync = late_sync;
    }
    io_engine *io = pread_new(r->f.fd, 2, &se);
    CHECKF(io, "%s", se.msg);
    cache_cfg cc = {&r->f, &r->f.cfg, io, (uint64_t)ram_slots * r->f.h.expert_stride, CACHE_LRU, 1, 0, 0, r->cpu};
    r->c = cache_make(&cc, &se);
    CHECKF(r->c, "%s", se.msg);
    tier_cfg tc = {.be = flags & RIG_LATE ? &r->fake : r->cpu, .file = &r->f, .cfg = &r->f.cfg,
                   .lower = cache_source(r->c), .budget = (uint64_t)tier_slots * r->f.h.expert_stride,
                   .lower_slots = ram_slots, .hybrid = !!(flags & RIG_HYBRID)};
    r->t = tier_make(&tc, &se);
    CHECKF(r->t, "%s", se.msg);
    r->src = tier_source(r->t);
}

static void rig_unstack(rig *r) {
    tier_free(r->t);
    cache_free(r->c);
    be_close(r->cpu);
    r->t = NULL;
    r->c = NULL;
    r->cpu = NULL;
}

static void rig_close(rig *r) {
    rig_unstack(r);
    free(r->want);
    slc_close(&r->f);
}

/* Every expert of each request arrives once, with the file's block (compared once the request ended, when
 * every copy has passed). */
static int request(tn_expert_src *src, const slc_file *f, int layer, int ms, const int *list, int n, int ordered,
                   uint8_t *want, char *why, size_t whylen) {
    const uint8_t *got[64];
    int seen[64];
    int rc = src->begin(src->ctx, layer, list, n, ordered);
    for (int i = 0; !rc && i < n; i++) {
        tn_expert ex;
        memset(&ex, 0, sizeof ex);
        rc = src->next(src->ctx, &seen[i], &ex);
        if (!rc) {
            got[i] = slc_expert_block(f, &ex);
            src->release(src->ctx, seen[i]);
        }
    }
    src->end(src->ctx);
    if (rc) {
        snprintf(why, whylen, "layer %d: %s", layer, src->errmsg(src->ctx));
        return rc;
    }
    for (int i = 0; i < n; i++) {
        if (ordered && seen[i] != list[i]) {
            snprintf(why, whylen, "layer %d: expert %d delivered where %d was next", layer, seen[i], list[i]);
            return -1;
        }
        size_t bb = (size_t)f->block_bytes;
        if (pread(f->fd, want, bb, (off_t)slc_expert_offset(f, ms, seen[i])) != (ssize_t)bb) return -2;
        if (memcmp(got[i], want, bb)) {
            snprintf(why, whylen, "layer %d expert %d: the device block differs from the file's", layer, seen[i]);
            return -3;
        }
    }
    return 0;
}

TEST(tier_async_copies_keep_ram_slots_until_they_pass) {
    rig rg;
    rig_open(&rg);
    if (test_failed()) return;
    const int E = (int)rg.f.h.n_experts, L = rg.f.cfg.n_layers;
    const int slots[] = {1, 2, 5, 32};
    for (int ci = 0; ci < 4; ci++) {
        char why[512] = "";
        /* the tier holds a third of the experts: hits, misses and evictions in every layer */
        rig_stack(&rg, slots[ci], L * E / 3 + 1, RIG_LATE);
        if (test_failed()) return;
        int rc = 0;
        for (int r = 0; !rc && r < 60; r++) {
            int layer = rand() % L, ms = cfg_moe_slot(&rg.f.cfg, layer), n = 0, list[64];
            if (ms < 0) continue;
            int ordered = r % 3 == 2, want_n = ordered ? E / 2 : rg.f.cfg.n_experts_used;
            for (int e = 0; e < E && n < want_n; e++) /* ascending, as the forward pass lists them */
                if (rand() % E < want_n + 1) list[n++] = e;
            if (n > 0) rc = request(&rg.src, &rg.f, layer, ms, list, n, ordered, rg.want, why, sizeof why);
        }
        tier_stats ts;
        tier_get_stats(rg.t, &ts);
        rig_unstack(&rg);
        CHECKF(rc == 0, "%d RAM slots (seed %u): %s", slots[ci], test_seed(), why);
        CHECKF(ts.misses > 0 && ts.hits > 0, "%d RAM slots: tier hits %llu misses %llu", slots[ci],
               (unsigned long long)ts.hits, (unsigned long long)ts.misses);
        CHECKF(late.next - 1 == ts.misses && late.marks > 0, "%d RAM slots: %llu copies queued for %llu misses",
               slots[ci], (unsigned long long)(late.next - 1), (unsigned long long)ts.misses);
        /* copies overlapped the next requests once the cache had slots to spare, and never more than the
         * tier may keep */
        CHECKF(slots[ci] < 5 || late.max_inflight >= 2, "%d RAM slots: at most %d copies in flight", slots[ci],
               late.max_inflight);
        CHECKF(late.max_inflight <= (slots[ci] / 2 < 8 ? slots[ci] / 2 : 8) + 1,
               "%d RAM slots: %d copies in flight", slots[ci], late.max_inflight);
    }
    rig_close(&rg);
}

/* One request through src with tier_audit after every hand-out and release and after the end; 0, or why. */
static int audited_request(tier *t, tn_expert_src *src, int layer, const int *list, int n, int ordered, char *why,
                           size_t whylen) {
    int rc = src->begin(src->ctx, layer, list, n, ordered);
    for (int i = 0; !rc && i < n; i++) {
        tn_expert ex;
        memset(&ex, 0, sizeof ex);
        int e = -1;
        if ((rc = src->next(src->ctx, &e, &ex))) break;
        if ((rc = tier_audit(t, why, whylen))) break;
        src->release(src->ctx, e);
        if ((rc = tier_audit(t, why, whylen))) break;
    }
    if (rc && !why[0]) snprintf(why, whylen, "layer %d: %s", layer, src->errmsg(src->ctx));
    src->end(src->ctx);
    return rc ? rc : tier_audit(t, why, whylen);
}

/* The victim kept in a heap (tier.c) is the one the policy's order names (a scan over the slots: LRU, or the hybrid
 * step's decayed counts then LRU), over random decode-like and layer-major requests that evict in every layer. */
TEST(tier_eviction_heap_keeps_the_policy_order) {
    rig rg;
    rig_open(&rg);
    if (test_failed()) return;
    const int E = (int)rg.f.h.n_experts, L = rg.f.cfg.n_layers;
    for (int hybrid = 0; hybrid < 2; hybrid++) {
        char why[512] = "";
        rig_stack(&rg, 16, L * E / 4 + 1, hybrid ? RIG_HYBRID : 0);
        if (test_failed()) return;
        int rc = 0;
        for (int r = 0; !rc && r < 300; r++) {
            int layer = r % L, n = 0, list[64];
            if (cfg_moe_slot(&rg.f.cfg, layer) < 0) continue;
            int ordered = r % 7 == 6, want_n = ordered ? E / 2 : rg.f.cfg.n_experts_used;
            for (int e = 0; e < E && n < want_n; e++) /* skewed: the low experts more often */
                if (rand() % (E + 4 * e) < 2 * want_n + 1) list[n++] = e;
            if (n > 0) rc = audited_request(rg.t, &rg.src, layer, list, n, ordered, why, sizeof why);
        }
        tier_stats ts;
        tier_get_stats(rg.t, &ts);
        rig_unstack(&rg);
        CHECKF(rc == 0, "hybrid %d (seed %u): %s", hybrid, test_seed(), why);
        CHECKF(ts.misses > (uint64_t)ts.slots && ts.hits > 0, "hybrid %d: %llu slots, hits %llu misses %llu", hybrid,
               (unsigned long long)ts.slots, (unsigned long long)ts.hits, (unsigned long long)ts.misses);
        CHECKF(!hybrid || ts.host > 0, "hybrid: no expert handed out on the host");
    }
    rig_close(&rg);
}

/* An ordered request taken in batches as model/moe.c's grouped_wide does (tn_expert_src room): room() experts held at
 * once, every one's device block the file's once the copies have passed (the compute's wait: sync), then all released;
 * room() is 0 right after a batch exactly when the list goes on (its next expert a miss with every slot held), and
 * never leaves the list unfinished; over tiers of 1 - 9 slots and a late copy engine. */
TEST(tier_room_holds_a_batch_whole) {
    rig rg;
    rig_open(&rg);
    if (test_failed()) return;
    const int E = (int)rg.f.h.n_experts, L = rg.f.cfg.n_layers;
    int batches = 0, most = 0;
    for (int slots = 1; slots <= 9; slots += 4) {
        char why[512] = "";
        rig_stack(&rg, 4, slots, RIG_LATE);
        if (test_failed()) return;
        tn_expert_src src = rg.src;
        int rc = 0;
        for (int r = 0; !rc && r < 40; r++) {
            int layer = r % L, ms = cfg_moe_slot(&rg.f.cfg, layer), n = 0, list[64];
            if (ms < 0) continue;
            for (int e = 0; e < E && n < 64; e++)
                if (rand() % 3) list[n++] = e;
            if (!n || (rc = src.begin(src.ctx, layer, list, n, 1))) continue;
            for (int i = 0; !rc && i < n;) {
                int m = src.room(src.ctx), seen[64];
                const uint8_t *got[64];
                if (m < 1 || m > n - i) {
                    snprintf(why, sizeof why, "layer %d: room %d with %d of %d experts left", layer, m, n - i, n);
                    rc = -1;
                    break;
                }
                for (int j = 0; !rc && j < m; j++) {
                    tn_expert ex;
                    memset(&ex, 0, sizeof ex);
                    if ((rc = src.next(src.ctx, &seen[j], &ex))) snprintf(why, sizeof why, "layer %d: %s", layer, src.errmsg(src.ctx));
                    else got[j] = slc_expert_block(&rg.f, &ex);
                }
                if (!rc && src.room(src.ctx) != 0 && i + m < n) {
                    snprintf(why, sizeof why, "layer %d: room %d after a batch of %d", layer, src.room(src.ctx), m);
                    rc = -1;
                }
                rg.fake.sync(&rg.fake); /* the batch's compute waits for its copies */
                for (int j = 0; !rc && j < m; j++) {
                    size_t bb = (size_t)rg.f.block_bytes;
                    if (seen[j] != list[i + j] ||
                        pread(rg.f.fd, rg.want, bb, (off_t)slc_expert_offset(&rg.f, ms, seen[j])) != (ssize_t)bb ||
                        memcmp(got[j], rg.want, bb)) {
                        snprintf(why, sizeof why, "layer %d: expert %d of a batch of %d is not the file's block", layer, seen[j], m);
                        rc = -1;
                    }
                }
                for (int j = 0; j < m; j++) src.release(src.ctx, seen[j]);
                batches++;
                most = m > most ? m : most;
                i += m;
            }
            src.end(src.ctx);
        }
        rig_unstack(&rg);
        CHECKF(rc == 0, "%d slots (seed %u): %s", slots, test_seed(), why);
    }
    CHECKF(batches > 40 && most >= 9, "%d batches, the largest %d experts", batches, most);
    rig_close(&rg);
}

/* Prefill passes (ordered requests of every expert of each MoE layer in turn, a cyclic scan) through a tier of a layer
 * and a half: the misses take the latest slot of another layer (tier.c miss_victim), so the tier keeps the rest from
 * one pass to the next and each later pass finds at least the tier's slots less a layer's in it (LRU: it evicts what
 * the pass wants next, and finds almost none); a decode-like request after them still hits and misses as LRU says. */
TEST(tier_prefill_passes_keep_what_they_can) {
    rig rg;
    rig_open(&rg);
    if (test_failed()) return;
    const int E = (int)rg.f.h.n_experts, L = rg.f.cfg.n_layers, S = E + E / 2;
    rig_stack(&rg, L * E, S, 0);
    if (test_failed()) return;
    int list[64], rc = 0, n_moe = 0;
    for (int e = 0; e < E; e++) list[e] = e;
    uint64_t hits[3] = {0};
    char why[512] = "";
    for (int pass = 0; pass < 3 && !rc; pass++) {
        tier_stats a, b;
        tier_get_stats(rg.t, &a);
        n_moe = 0;
        for (int layer = 0; layer < L && !rc; layer++) {
            if (cfg_moe_slot(&rg.f.cfg, layer) < 0) continue;
            n_moe++;
            rc = audited_request(rg.t, &rg.src, layer, list, E, 2, why, sizeof why); /* 2: a prefill pass's layer */
        }
        tier_get_stats(rg.t, &b);
        hits[pass] = b.hits - a.hits;
    }
    CHECKF(rc == 0, "%s", why);
    CHECKF(n_moe * E > S, "%d MoE layers of %d experts fit in %d slots: nothing to show", n_moe, E, S);
    for (int pass = 1; pass < 3; pass++)
        CHECKF(hits[pass] >= (uint64_t)(S - E), "pass %d found %llu experts in a tier of %d slots (a layer: %d)", pass,
               (unsigned long long)hits[pass], S, E);
    /* a decode-like request: LRU, as before (its hits are the tier's, its misses promoted) */
    int one[2] = {0, E - 1};
    for (int layer = 0; layer < L && !rc; layer++)
        if (cfg_moe_slot(&rg.f.cfg, layer) >= 0) rc = audited_request(rg.t, &rg.src, layer, one, 2, 0, why, sizeof why);
    CHECKF(rc == 0, "%s", why);
    rig_close(&rg);
}

/* A tier of S slots (flags: rig_stack's) over P layer-major passes (in_order 2) of lists[p][l] (ns[p][l] experts):
 * per pass and layer the hits and the experts copied in, into st. 0, or the failing status with why set. */
static int prefill_passes(rig *rg, int S, int flags, int P, int lists[][16][64], int ns[][16], uint64_t st[][16][2],
                          char *why, size_t whylen) {
    const int L = rg->f.cfg.n_layers;
    int rc = 0;
    rig_stack(rg, L * (int)rg->f.h.n_experts, S, flags);
    if (test_failed()) return -1;
    for (int p = 0; p < P && !rc; p++) {
        uint64_t was[16][3], now[3];
        for (int l = 0; l < L; l++) tier_layer_stats(rg->t, cfg_moe_slot(&rg->f.cfg, l), &was[l][0], &was[l][1], &was[l][2]);
        for (int l = 0; l < L && !rc; l++)
            if (cfg_moe_slot(&rg->f.cfg, l) >= 0) rc = audited_request(rg->t, &rg->src, l, lists[p][l], ns[p][l], 2, why, whylen);
        for (int l = 0; l < L; l++) {
            tier_layer_stats(rg->t, cfg_moe_slot(&rg->f.cfg, l), &now[0], &now[1], &now[2]);
            st[p][l][0] = now[0] - was[l][0];
            st[p][l][1] = now[1] - was[l][1];
        }
    }
    rig_unstack(rg);
    return rc;
}

/* issue 25: a prefill pass (layer-major, in_order 2) with the hybrid step on places as it does without: the same
 * hits and copies in every layer of every pass over random lists, in a tier of a layer and a half (lists of about
 * 3/4 of a layer's experts: the passes rotate the latest slots of other layers, tier.c miss_victim) and of 3/4 of a
 * layer (lists of 1/4 .. all: a layer's list may evict its own, the least recently used). Under the decayed counts'
 * order (the hybrid step before) every expert of a pass was as hot as any other and LRU decided: a pass found almost
 * none of the last one's experts (call T's model-routed prefill 30% slower with the hybrid step). Then the hybrid tier with decode-like steps (the
 * counts' order) between passes of every expert still finds the tier less a layer in a pass. */
TEST(tier_hybrid_prefill_passes_place_as_without) {
    rig rg;
    rig_open(&rg);
    if (test_failed()) return;
    const int E = (int)rg.f.h.n_experts, L = rg.f.cfg.n_layers, P = 4;
    int lists[4][16][64], ns[4][16], rc = 0;
    CHECKF(L <= 16 && E <= 64, "fixture of %d layers of %d experts: the test's arrays are smaller", L, E);
    char why[512] = "";
    for (int z = 0; z < 2 && !rc; z++) {
        const int S = z ? E - E / 4 : E + E / 2;
        for (int p = 0; p < P; p++)
            for (int l = 0; l < L; l++) { /* about 3/4 of the layer's experts, at least half; the small tier: 1/4 .. all */
                uint8_t on[64];
                const int q = z ? 1 + rand() % 4 : 3;
                int n = 0;
                for (int e = 0; e < E; e++) n += on[e] = rand() % 4 < q;
                for (int e = 0; !z && n < E / 2; e++) n += !on[e], on[e] = 1;
                ns[p][l] = 0;
                for (int e = 0; e < E; e++) /* ascending, as grouped_wide asks */
                    if (on[e]) lists[p][l][ns[p][l]++] = e;
            }
        uint64_t st[2][4][16][2], kept = 0;
        for (int h = 0; h < 2 && !rc; h++) rc = prefill_passes(&rg, S, h ? RIG_HYBRID : 0, P, lists, ns, st[h], why, sizeof why);
        if (rc) break;
        for (int p = 0; p < P; p++)
            for (int l = 0; l < L; l++) {
                kept += p > 0 ? st[0][p][l][0] : 0;
                CHECKF(st[1][p][l][0] == st[0][p][l][0] && st[1][p][l][1] == st[0][p][l][1],
                       "%d slots, pass %d layer %d: hybrid %llu hits %llu copied, without %llu hits %llu copied", S, p, l,
                       (unsigned long long)st[1][p][l][0], (unsigned long long)st[1][p][l][1],
                       (unsigned long long)st[0][p][l][0], (unsigned long long)st[0][p][l][1]);
            }
        int least = 1 << 30; /* the smallest pass, in experts */
        for (int p = 0; p < P; p++) {
            int tot = 0;
            for (int l = 0; l < L; l++) tot += cfg_moe_slot(&rg.f.cfg, l) >= 0 ? ns[p][l] : 0;
            least = tot < least ? tot : least;
        }
        CHECKF(z || (kept > 0 && least > S), "%d slots: %llu hits in passes 2..%d, the smallest pass %d experts: nothing to show",
               S, (unsigned long long)kept, P, least);
    }
    CHECKF(rc == 0, "%s", why);
    /* decode-like steps (the counts' order) between passes of every expert: a pass still finds the tier less a layer */
    const int S = E + E / 2;
    rig_stack(&rg, L * E, S, RIG_HYBRID);
    if (test_failed()) return;
    int all[64], one[2] = {0, E - 1};
    for (int e = 0; e < E; e++) all[e] = e;
    uint64_t hits = 0;
    for (int p = 0; p < 3 && !rc; p++) {
        tier_stats a, b;
        tier_get_stats(rg.t, &a);
        for (int l = 0; l < L && !rc; l++)
            if (cfg_moe_slot(&rg.f.cfg, l) >= 0) rc = audited_request(rg.t, &rg.src, l, all, E, 2, why, sizeof why);
        tier_get_stats(rg.t, &b);
        hits = b.hits - a.hits;
        for (int t = 0; t < 4 && !rc; t++)
            for (int l = 0; l < L && !rc; l++)
                if (cfg_moe_slot(&rg.f.cfg, l) >= 0) rc = audited_request(rg.t, &rg.src, l, one, 2, 0, why, sizeof why);
    }
    CHECKF(rc == 0, "%s", why);
    CHECKF(hits >= (uint64_t)(S - E), "hybrid: the last pass found %llu experts in a tier of %d slots (a layer: %d)",
           (unsigned long long)hits, S, E);
    rig_close(&rg);
}

/* hybrid, n_tokens decode steps over every MoE layer: n_hot fixed experts a layer (0 .. n_hot-1) and the rest of k
 * drawn uniformly from the others; the stats of the last three quarters in *ts. 0, or the failing status. */
static int hybrid_steps(rig *rg, int n_tokens, int n_hot, tier_stats *ts, char *why, size_t whylen) {
    const int E = (int)rg->f.h.n_experts, L = rg->f.cfg.n_layers, k = rg->f.cfg.n_experts_used;
    int rc = 0;
    for (int t = 0; !rc && t < n_tokens; t++) {
        if (t == n_tokens / 4) tier_reset_stats(rg->t);
        for (int layer = 0; !rc && layer < L; layer++) {
            if (cfg_moe_slot(&rg->f.cfg, layer) < 0) continue;
            uint8_t on[256] = {0};
            int list[64], n = 0;
            for (int e = 0; e < n_hot; e++) on[e] = 1;
            for (int m = n_hot; m < k;) {
                int e = n_hot + rand() % (E - n_hot);
                if (!on[e]) on[e] = 1, m++;
            }
            for (int e = 0; e < E; e++)
                if (on[e]) list[n++] = e;
            rc = audited_request(rg->t, &rg->src, layer, list, n, 0, why, whylen);
        }
    }
    tier_get_stats(rg->t, ts);
    return rc;
}

/* The hybrid step's promotions pay (tier.c pays(); the CPU stand-in has no cost model, so the use counts decide):
 * under uniform routing over a tier of an eighth of the experts a copy up buys about one later hit at best, so the
 * experts the tier copies in number no more than its hits (+25%), the rest run on the host (promoting every miss:
 * 3104 copied for 496 hits); with two hot experts a layer the tier keeps them (their uses hit; promoting none but
 * into free slots: 1377 hits of 3600 uses). */
TEST(tier_hybrid_promotes_what_pays) {
    rig rg;
    rig_open(&rg);
    if (test_failed()) return;
    const int E = (int)rg.f.h.n_experts, L = rg.f.cfg.n_layers, k = rg.f.cfg.n_experts_used;
    char why[512] = "";
    tier_stats ts;
    rig_stack(&rg, 2 * k + 16, L * E / 8, RIG_HYBRID);
    if (test_failed()) return;
    int rc = hybrid_steps(&rg, 400, 0, &ts, why, sizeof why);
    rig_unstack(&rg);
    CHECKF(rc == 0, "uniform: %s", why);
    CHECKF(ts.host > 0 && ts.misses <= ts.hits + ts.hits / 4 + 8,
           "uniform routing: %llu copied in, %llu hits, %llu on the host", (unsigned long long)ts.misses,
           (unsigned long long)ts.hits, (unsigned long long)ts.host);
    rig_stack(&rg, 2 * k + 16, L * E / 8, RIG_HYBRID);
    if (test_failed()) return;
    rc = hybrid_steps(&rg, 400, 2, &ts, why, sizeof why);
    rig_unstack(&rg);
    CHECKF(rc == 0, "skewed: %s", why);
    const uint64_t uses = ts.hits + ts.misses + ts.host, hot = uses * 2 / (uint64_t)k;
    CHECKF(ts.hits >= hot, "two hot experts a layer: %llu hits of %llu uses, %llu copied in, %llu on the host",
           (unsigned long long)ts.hits, (unsigned long long)uses, (unsigned long long)ts.misses,
           (unsigned long long)ts.host);
    rig_close(&rg);
}
