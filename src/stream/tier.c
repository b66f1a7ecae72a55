/*
 * tier.c — see tier.h. Sections: slots and eviction; promotion (host block -> device slot); the
 * streaming protocol over the host source (unordered: device hits first, then the host source's
 * deliveries in its order; ordered: the list's order, each miss taken from the host source, which was
 * asked for the misses in the same order); lifecycle and stats.
 */
#include "stream/tier.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"
#include "util/clock.h"
#include "util/err.h"

#define TIER_HOLD 8 /* host slots kept for copies in flight, at most */
#define TIER_HALF 32.0f /* hybrid: the half-life of an expert's use count, in tokens (passes over the layers) */
#define TIER_AGAIN 1.5f /* hybrid: a count this high after a use means it was used before, recently: promote */
#define TIER_LN2 0.69314718f

typedef struct tslot {
    uint8_t *buf; /* device memory, stride bytes */
    int key;      /* moe slot * E + expert, or -1 */
    int refs;     /* held by the current request */
    int hpos;     /* its index in the heap of evictable slots, or -1 (free, or held) */
    uint64_t tick;
    uint64_t fence; /* async: the compute ops that read its block so far end before this fence (backend.h) */
    int used;       /* async: read by the current request, fence not taken yet */
} tslot;

struct tier {
    be_backend *be;
    const slc_file *f;
    const fam_config *cfg;
    tn_expert_src lo;
    int E, n_keys, n_slots;
    size_t stride, block;
    tslot *slots;
    uint8_t *arena;
    size_t arena_bytes;
    int *map; /* [n_keys] -> slot or -1 */
    uint64_t tick;
    /* eviction (victim): the free slots (a stack, the lowest index on top), and a binary min-heap of the evictable
     * ones (a key, no refs) by the policy's order (before()), so a miss finds its victim without a scan */
    int *freel, n_free;
    int *heap, n_heap;
    int *held, n_held; /* slots given refs in this request (t_end takes them back), a slot perhaps twice */
    int *prev, n_prev; /* the last ordered request's held slots not yet taken back by a miss (miss_victim) */
    /* the current request */
    int layer, mslot, ordered, active, lo_begun;
    int *list, n_list, pos;       /* ordered: the experts in order */
    uint8_t *dev;                 /* [E] 1: the expert was a device hit at begin */
    int *hits, n_hits, hits_head; /* unordered: device hits not yet handed out */
    int *miss, n_miss, miss_next; /* misses, in list order; miss_next: the next one get() fetches */
    int lo_left;                  /* misses the host source still owes */
    /* async copies (the backend has copy_async): host slots kept until their copies pass */
    int async, hold;              /* hold: at most this many host slots kept */
    int *pend_e, n_pend, pend_head; /* experts whose host slots are kept, oldest first ... */
    uint64_t *pend_f;             /* ... and their copies' fences */
    int *used, n_used;            /* slots with used set */
    int *pf;                      /* [E] prefetch: the hinted experts not in a device slot */
    tier_stats st;
    sl_error err; /* the current request's failure: the source's errmsg */
    /* the hybrid step (tier.h) */
    int hybrid, last_ms;
    int (*host_ok)(void *ctx, const tn_expert *ex);
    void *host_ctx;
    float *freq;        /* [n_keys] decayed use counts, as of ... */
    uint32_t *fseen;    /* [n_keys] ... this token */
    double *prio;       /* [n_keys] log2(freq) + fseen / TIER_HALF: the count's order at any later token */
    uint32_t tok;       /* passes over the MoE layers so far */
    uint8_t *hostd;     /* [E] handed out where it lies in the current request, not yet released */
    uint64_t *l_st;     /* [n_moe][3]: hits, copied, host */
    /* the cost model (device backends): seconds a byte computed on the host (measured) and copied up (measured at
     * tier_new), and this request's queues so far on each */
    int cost;
    double cpu_spb, pcie_spb, q_cpu, q_pcie;
    /* the host's rate, measured: a layer's host experts run together after its last next() (model/moe_hybrid.c),
     * so their first release ends the batch begun then */
    double t_next;      /* when the request's last next() returned */
    int n_host, timed;  /* this request's experts handed out on the host; their batch measured */
    int host_cap;       /* host experts held at once at most (their host slots: tier_new) */
    /* whether promotions pay for themselves (pays()): promotions a pass, decayed, give a slot's expected stay */
    int promos;
    double prate;
};

#define fail(t, st, ...) err_set(&(t)->err, (st), __VA_ARGS__)

/* ---- slots and eviction ---- */

/* hybrid: key's decayed use count now */
static float score(const tier *t, int key) {
    return t->freq[key] * exp2f(-(float)(t->tok - t->fseen[key]) / TIER_HALF);
}

/* hybrid: one more use of key, this token. Two counts decay by the same factor from one token to the next, so
 * their order never changes until one is used again: prio (log2 of the count, moved to token 0) keeps it. */
static void use(tier *t, int key) {
    t->freq[key] = score(t, key) + 1.0f;
    t->fseen[key] = t->tok;
    t->prio[key] = log2((double)t->freq[key]) + (double)t->tok / TIER_HALF;
}

/* The eviction order: slot a goes before slot b (LRU; hybrid: the lower use count, then the least recently used). */
static int before(const tier *t, int a, int b) {
    const tslot *x = &t->slots[a], *y = &t->slots[b];
    if (t->hybrid) {
        const double pa = t->prio[x->key], pb = t->prio[y->key];
        if (pa != pb) return pa < pb;
    }
    return x->tick < y->tick;
}

static void heap_set(tier *t, int i, int si) {
    t->heap[i] = si;
    t->slots[si].hpos = i;
}

static void heap_up(tier *t, int i) {
    const int si = t->heap[i];
    while (i > 0 && before(t, si, t->heap[(i - 1) / 2])) {
        heap_set(t, i, t->heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    heap_set(t, i, si);
}

static void heap_down(tier *t, int i) {
    const int si = t->heap[i];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= t->n_heap) break;
        if (c + 1 < t->n_heap && before(t, t->heap[c + 1], t->heap[c])) c++;
        if (!before(t, t->heap[c], si)) break;
        heap_set(t, i, t->heap[c]);
        i = c;
    }
    heap_set(t, i, si);
}

/* slot si (a key, no refs) becomes evictable */
static void heap_push(tier *t, int si) {
    heap_set(t, t->n_heap++, si);
    heap_up(t, t->n_heap - 1);
}

/* slot si leaves the heap (held, or taken as a victim) */
static void heap_del(tier *t, int si) {
    const int i = t->slots[si].hpos;
    if (i < 0) return;
    t->slots[si].hpos = -1;
    const int last = t->heap[--t->n_heap];
    if (last == si) return;
    heap_set(t, i, last);
    heap_up(t, i);
    heap_down(t, t->slots[last].hpos);
}

/* slot si gets a ref of the current request */
static void hold(tier *t, int si) {
    if (t->slots[si].refs++ == 0) {
        heap_del(t, si);
        t->held[t->n_held++] = si;
    }
}

/* one ref of slot si ends; the last makes it evictable again */
static void unhold(tier *t, int si) {
    tslot *s = &t->slots[si];
    if (s->refs > 0 && --s->refs == 0 && s->key >= 0) heap_push(t, si);
}

/* Every ref of the request ends (t_end; and a begin after a request that was not ended). */
static void drop_refs(tier *t) {
    for (int i = 0; i < t->n_held; i++) {
        tslot *s = &t->slots[t->held[i]];
        if (s->refs > 0) {
            s->refs = 1;
            unhold(t, t->held[i]);
        }
    }
    t->n_held = 0;
}

/* A free slot, else the first evictable one in the eviction order; -1 when every slot is held. */
static int victim(const tier *t) {
    return t->n_free > 0 ? t->freel[t->n_free - 1] : t->n_heap > 0 ? t->heap[0] : -1;
}

/* hybrid: whether the miss key pays its copy: a free slot; or (the cost model) the copy up ends before the host
 * would, given this request's queues on each, and the slot it takes is colder than key; or, whatever the queues,
 * key is hot enough that the copy buys at least one later hit: used before (TIER_AGAIN), hotter than the slot it
 * evicts, and its use rate (its count before this use over the count's mean life, TIER_HALF / ln 2) times a slot's
 * expected stay (the slots over the promotions a pass) at least 1. Under uniform routing the stay is short and no
 * expert hotter than another, so the queues decide alone (promoting every second use evicted as often as it hit,
 * docs/CUDA.md "The hybrid step"); skewed routing keeps its hot experts. The queue that takes it grows by its
 * estimate. */
static int pays(tier *t, int key) {
    int v = victim(t), up;
    if (v < 0) return 0;
    float sc = score(t, key), sv = t->slots[v].key < 0 ? -1.0f : score(t, t->slots[v].key);
    const double c_up = t->pcie_spb * (double)t->block, c_cpu = t->cpu_spb * (double)t->block;
    const double stay = (double)t->n_slots / (t->prate > 1e-3 ? t->prate : 1e-3);
    if (sv < 0 || t->n_host >= t->host_cap) up = 1;
    else if (t->cost && sc > sv && t->q_pcie + c_up < t->q_cpu + c_cpu) up = 1;
    else up = sc >= TIER_AGAIN && sc > sv && (double)(sc - 1.0f) * TIER_LN2 / TIER_HALF * stay >= 1.0;
    if (up) t->q_pcie += c_up;
    else t->q_cpu += c_cpu;
    return up;
}

/* The cost model's host -> device rate: the best of three waited copies of one block from pinned memory. */
static void measure_pcie(tier *t) {
    void *h = t->be->alloc(t->be, t->block, BE_BUF_PINNED);
    if (!h) return;
    memset(h, 0, t->block);
    double best = 0;
    for (int i = 0; i < 3; i++) {
        double t0 = clk_now_s();
        t->be->copy(t->be, t->slots[0].buf, h, t->block, BE_H2D);
        if (t->be->sync(t->be)) break;
        double dt = clk_now_s() - t0;
        if (best <= 0 || dt < best) best = dt;
    }
    t->be->free(t->be, h, t->block, BE_BUF_PINNED);
    if (best > 0) t->pcie_spb = best / (double)t->block;
}

static void deliver(tier *t, int si, int e, int *expert, tn_expert *out) {
    tslot *s = &t->slots[si];
    s->tick = ++t->tick;
    if (t->async && !s->used) { /* the compute about to be queued reads it */
        s->used = 1;
        t->used[t->n_used++] = si;
    }
    slc_bind_expert(t->f, s->key / t->E, s->buf, out);
    *expert = e;
}

/* async: one fence after the compute queued so far, taken by every slot read in this request */
static void take_mark(tier *t) {
    if (!t->n_used) return;
    uint64_t f = t->be->mark(t->be); /* 0 on failure: sync() reports it at the end of the block */
    for (int i = 0; i < t->n_used; i++) {
        tslot *s = &t->slots[t->used[i]];
        s->fence = f;
        s->used = 0;
    }
    t->n_used = 0;
}

/* async: hands the host slots whose copies have passed back to the host source, oldest first; waits for
 * the oldest while more than hold are kept, or (all) for every one. */
static void settle(tier *t, int all) {
    while (t->pend_head < t->n_pend) {
        int wait = all || t->n_pend - t->pend_head > t->hold;
        if (!t->be->fence_done(t->be, t->pend_f[t->pend_head], wait)) break;
        if (t->lo.release) t->lo.release(t->lo.ctx, t->pend_e[t->pend_head]);
        t->pend_head++;
    }
}

/* ---- promotion ---- */

/* The slot a miss of the current request takes: victim()'s, except in a layer of a pass over many tokens (ordered 2:
 * a prefill chunk's, with the hybrid step on or off) with no slot free: a recently used unheld slot of another
 * layer (the last ordered request's, latest first, with no scan while they last; then the most recently used by a
 * scan), when there is one; else the least recently used unheld slot (victim()'s without the hybrid step; with it, by
 * the same scan), so that a pass places its experts in the same slots with the hybrid step as without. The hybrid
 * step's decayed counts order decode steps only: a pass gives each expert of a layer one use at one token, so among
 * them the counts' order was LRU's, which evicts what the next pass wants first (issue 25: a model-routed pass of 37
 * experts over 27 slots copied 33 of them in again, 18 without the hybrid step; docs/CUDA.md "The hybrid step").
 * A prefill pass takes the layers' experts in turn, a cyclic scan, which LRU serves
 * worst of all: it evicts what the pass will want soonest, so a tier smaller than a pass keeps nothing from one pass
 * to the next (uniform routing at 2 GiB of the 30B shape's 16 GB: no hits). Taking the latest slot of another layer
 * leaves the rest of the tier as it is: the passes rotate one layer's worth of slots and the next pass finds the
 * others' experts (a share of hits about the tier's share of the experts). The slot's last compute is in its fence,
 * which the copy waits for as any; a layer-major pass routes each layer on the host (route() waits for the device),
 * so an earlier layer's compute has ended by then. Decode steps (unordered, or ordered 1: a serving batch's few tokens,
 * whose hot experts the next step wants again) keep victim()'s order. */
static int miss_victim(tier *t) {
    if (t->ordered != 2 || t->n_free > 0) return victim(t);
    while (t->n_prev > 0) { /* the last layer's slots, latest first: no scan while they last */
        const int si = t->prev[--t->n_prev];
        const tslot *s = &t->slots[si];
        if (s->key >= 0 && s->refs == 0 && s->key / t->E != t->mslot) return si;
    }
    int best = -1, lru = -1;
    for (int i = 0; i < t->n_slots; i++) {
        const tslot *s = &t->slots[i];
        if (s->key < 0 || s->refs > 0) continue;
        if (lru < 0 || s->tick < t->slots[lru].tick) lru = i;
        if (s->key / t->E == t->mslot) continue;
        if (best < 0 || s->tick > t->slots[best].tick) best = i;
    }
    return best >= 0 ? best : t->hybrid ? lru : victim(t);
}

/* Expert e of the current layer, delivered by the host source as hx, into a device slot (held): one
 * copy of its block. Synchronous backends: the copy is waited for and the host slot handed back at once.
 * Async ones (copy_async): the copy is queued on the copy stream after the compute that last read the
 * slot (its fence) and before the compute queued next; the host slot is kept until the copy's fence has
 * passed (settle), so the next expert's read and copy run while this one computes. Returns the slot or a
 * negative status. */
static int promote(tier *t, int e, const tn_expert *hx) {
    const uint8_t *block = slc_expert_block(t->f, hx);
    int v = miss_victim(t);
    if (v < 0) {
        if (t->lo.release) t->lo.release(t->lo.ctx, e);
        return fail(t, SL_ENOMEM, "device expert tier: all %d slots of %zu bytes are in use (budget too small for "
                    "this request)", t->n_slots, t->stride);
    }
    tslot *s = &t->slots[v];
    if (t->n_free > 0 && t->freel[t->n_free - 1] == v) t->n_free--; /* taken: a free slot, or out of the heap */
    else heap_del(t, v);
    if (s->key >= 0 && t->map[s->key] == v) t->map[s->key] = -1;
    s->key = -1;
    t->freel[t->n_free++] = v; /* free until its copy is queued */
    if (t->async) {
        if (s->used) take_mark(t); /* read earlier in this request: the copy waits for that compute */
        uint64_t f = t->be->copy_async(t->be, s->buf, block, t->block, s->fence);
        if (!f) {
            int rc = t->be->sync(t->be);
            if (t->lo.release) t->lo.release(t->lo.ctx, e);
            return fail(t, rc ? rc : SL_EIO, "device expert tier: copying layer %d expert %d to the device: %s",
                        t->layer, e, t->be->errmsg(t->be));
        }
        t->pend_e[t->n_pend] = e;
        t->pend_f[t->n_pend++] = f;
        settle(t, 0);
    } else {
        t->be->copy(t->be, s->buf, block, t->block, BE_H2D);
        int rc = t->be->sync(t->be); /* the host slot may be reused as soon as it is released */
        if (t->lo.release) t->lo.release(t->lo.ctx, e);
        if (rc)
            return fail(t, rc, "device expert tier: copying layer %d expert %d to the device: %s", t->layer, e,
                        t->be->errmsg(t->be));
    }
    int key = t->mslot * t->E + e;
    t->n_free--;
    s->key = key;
    hold(t, v);
    t->map[key] = v;
    t->st.misses++;
    t->promos++;
    t->st.bytes_copied += t->block;
    t->l_st[3 * t->mslot + 1]++;
    return v;
}

/* The next miss from the host source, in host memory: its expert in *e, its parts in *hx. */
static int fetch_lower(tier *t, int *e, tn_expert *hx) {
    int rc;
    if (t->lo_left <= 0) return fail(t, SL_EINVAL, "device expert tier: more next() calls than experts requested");
    if (t->async) settle(t, 0); /* slots whose copies are done can take the next reads */
    if (t->lo.begin) {
        rc = t->lo.next(t->lo.ctx, e, hx);
    } else { /* a resident host source: get() in list order */
        *e = t->miss[t->miss_next++];
        rc = t->lo.get(t->lo.ctx, t->layer, *e, hx);
    }
    if (rc) return fail(t, rc, "%s", t->lo.errmsg ? t->lo.errmsg(t->lo.ctx) : "the host expert source failed");
    t->lo_left--;
    return 0;
}

/* The next miss from the host source, promoted: its expert in *e, its device slot returned. */
static int fetch_miss(tier *t, int *e) {
    tn_expert hx;
    memset(&hx, 0, sizeof hx);
    int rc = fetch_lower(t, e, &hx);
    return rc ? rc : promote(t, *e, &hx);
}

/* hybrid, unordered: the next miss, promoted when it pays (pays()), else handed out where it lies (host 1) */
static int next_hybrid(tier *t, int *expert, tn_expert *out) {
    int e = -1;
    tn_expert hx;
    memset(&hx, 0, sizeof hx);
    int rc = fetch_lower(t, &e, &hx);
    if (rc) return rc;
    if ((!t->host_ok || t->host_ok(t->host_ctx, &hx)) && !pays(t, t->mslot * t->E + e)) {
        *out = hx;
        out->host = 1;
        *expert = e;
        t->hostd[e] = 1;
        t->n_host++;
        t->st.host++;
        t->l_st[3 * t->mslot + 2]++;
        return 0;
    }
    int si = promote(t, e, &hx);
    if (si < 0) return si;
    deliver(t, si, e, expert, out);
    return 0;
}

/* ---- the streaming protocol ---- */

static sl_status t_begin(void *ctx, int layer, const int *experts, int n, int ordered) {
    tier *t = ctx;
    int ms = cfg_moe_slot(t->cfg, layer);
    if (ms < 0) return fail(t, SL_EINVAL, "layer %d has no routed experts", layer);
    if (n > t->E) return fail(t, SL_EINVAL, "layer %d: %d experts requested of %d", layer, n, t->E);
    if (ms <= t->last_ms) { /* a new pass over the layers */
        t->tok++;
        t->prate = 0.9 * t->prate + 0.1 * (double)t->promos;
        t->promos = 0;
    }
    t->n_host = t->timed = 0;
    drop_refs(t);
    t->q_cpu = t->q_pcie = 0;
    t->last_ms = ms;
    t->layer = layer;
    t->mslot = ms;
    t->ordered = ordered;
    t->active = 1;
    t->err.status = SL_OK;
    t->err.msg[0] = 0;
    t->n_hits = t->hits_head = t->n_miss = t->miss_next = t->pos = 0;
    memcpy(t->list, experts, (size_t)n * sizeof *experts);
    t->n_list = n;
    for (int i = 0; i < n; i++) {
        int e = experts[i], si = t->map[ms * t->E + e];
        t->dev[e] = si >= 0;
        t->hostd[e] = 0;
        if (si >= 0) hold(t, si); /* out of the heap before its order changes */
        if (t->hybrid) use(t, ms * t->E + e);
        if (si >= 0) {
            t->hits[t->n_hits++] = e;
            t->st.hits++;
            t->l_st[3 * ms]++;
        } else {
            t->miss[t->n_miss++] = e;
        }
    }
    t->lo_left = t->n_miss;
    t->lo_begun = 0;
    t->n_pend = t->pend_head = 0;
    if (t->n_miss > 0 && t->lo.begin) {
        int rc = t->lo.begin(t->lo.ctx, layer, t->miss, t->n_miss, ordered);
        t->lo_begun = 1;
        if (rc) return fail(t, rc, "%s", t->lo.errmsg ? t->lo.errmsg(t->lo.ctx) : "the host expert source failed");
    }
    return 0;
}

static sl_status t_next(void *ctx, int *expert, tn_expert *out) {
    tier *t = ctx;
    if (t->ordered) {
        if (t->pos >= t->n_list) return fail(t, SL_EINVAL, "device expert tier: more next() calls than experts requested");
        int e = t->list[t->pos++];
        if (t->dev[e]) {
            deliver(t, t->map[t->mslot * t->E + e], e, expert, out);
            return 0;
        }
        int got = -1, si = fetch_miss(t, &got);
        if (si < 0) return si;
        if (got != e)
            return fail(t, SL_EINVAL, "device expert tier: the host source delivered expert %d where %d was next", got, e);
        deliver(t, si, e, expert, out);
        return 0;
    }
    if (t->hits_head < t->n_hits) {
        int e = t->hits[t->hits_head++];
        deliver(t, t->map[t->mslot * t->E + e], e, expert, out);
        return 0;
    }
    if (t->hybrid) {
        int rc = next_hybrid(t, expert, out);
        t->t_next = clk_now_s();
        return rc;
    }
    int e = -1, si = fetch_miss(t, &e);
    if (si < 0) return si;
    deliver(t, si, e, expert, out);
    return 0;
}

static void t_release(void *ctx, int expert) {
    tier *t = ctx;
    if (expert >= 0 && expert < t->E && t->hostd[expert]) { /* handed out where it lies: its host slot back */
        t->hostd[expert] = 0;
        if (t->lo.release) t->lo.release(t->lo.ctx, expert);
        if (!t->timed && !t->lo_left) { /* the batch of host experts since the last next(), measured */
            const double spb = (clk_now_s() - t->t_next) / ((double)t->n_host * (double)t->block);
            t->cpu_spb = 0.8 * t->cpu_spb + 0.2 * spb;
            t->timed = 1;
        }
        return;
    }
    int si = t->map[t->mslot * t->E + expert];
    if (si >= 0) unhold(t, si);
}

static void t_end(void *ctx) {
    tier *t = ctx;
    if (t->async) { /* the host source may reuse (or prefetch into) its slots once it ends: the copies first */
        settle(t, 1);
        t->n_pend = t->pend_head = 0;
        take_mark(t);
    }
    if (t->lo_begun && t->lo.end) t->lo.end(t->lo.ctx);
    t->lo_begun = 0;
    if (t->ordered == 2) { /* the next layer's misses take these back first (miss_victim) */
        memcpy(t->prev, t->held, (size_t)t->n_held * sizeof *t->prev);
        t->n_prev = t->n_held;
    }
    drop_refs(t);
    memset(t->hostd, 0, (size_t)t->E);
    t->active = 0;
}

static const char *t_errmsg(void *ctx) { return ((tier *)ctx)->err.msg; }

/* The hint goes down without the experts already in a device slot: reading those into the host source
 * would spend its reads and slots on blocks no request will ask it for (a warm tier holds most of them). */
static void t_prefetch(void *ctx, int layer, const int *experts, int n, int ordered) {
    tier *t = ctx;
    int ms = cfg_moe_slot(t->cfg, layer), np = 0;
    if (!t->lo.prefetch || ms < 0) return;
    for (int i = 0; i < n && np < t->E; i++)
        if (experts[i] >= 0 && experts[i] < t->E && t->map[ms * t->E + experts[i]] < 0) t->pf[np++] = experts[i];
    if (np) t->lo.prefetch(t->lo.ctx, layer, t->pf, np, ordered);
}

static sl_status t_get(void *ctx, int layer, int expert, tn_expert *out) {
    int rc = t_begin(ctx, layer, &expert, 1, 1); /* in order: a miss is promoted (its caller wants device memory) */
    int e = -1;
    if (!rc) rc = t_next(ctx, &e, out);
    if (!rc) t_release(ctx, e);
    t_end(ctx);
    return rc;
}

/* The device hits next() hands out next without a copy: unordered, the hits not yet handed out (they come
 * first); ordered, the run of hits from the current position of the list. Their slots are held (refs) from
 * begin to release, so taking them together needs no slot more. */
static int t_ready(void *ctx) {
    tier *t = ctx;
    if (!t->active) return 0;
    if (!t->ordered) return t->n_hits - t->hits_head;
    int n = 0;
    while (t->pos + n < t->n_list && t->dev[t->list[t->pos + n]]) n++;
    return n;
}

/* Ordered requests: how many of the list's experts from the current position next() can hand out before a
 * release: a hit costs nothing (its slot is held since begin), a miss takes a free or an unheld slot (promote's
 * victim), as many as there are. Unordered requests (hits first, then the host source's order): 0, not known. */
static int t_room(void *ctx) {
    tier *t = ctx;
    if (!t->active || !t->ordered) return 0;
    int slots = t->n_free + t->n_heap, n = 0;
    for (int i = t->pos; i < t->n_list; i++, n++)
        if (!t->dev[t->list[i]] && slots-- == 0) break;
    return n;
}

tn_expert_src tier_source(tier *t) {
    tn_expert_src s = {t_get, t_begin, t_next, t_release, t_end, t_errmsg, t_prefetch, t, t_ready, t_room};
    return s;
}

/* ---- lifecycle, stats ---- */

sl_status tier_new(const tier_cfg *cfg, tier **out, sl_error *err) {
    *out = NULL;
    tier *t = calloc(1, sizeof *t);
    if (!t) return err_set(err, SL_ENOMEM, "out of memory");
    t->be = cfg->be;
    t->f = cfg->file;
    t->cfg = cfg->cfg;
    t->lo = cfg->lower;
    t->E = (int)cfg->file->h.n_experts;
    t->n_keys = (int)cfg->file->h.n_moe_layers * t->E;
    t->stride = (size_t)cfg->file->h.expert_stride;
    t->block = (size_t)cfg->file->block_bytes;
    uint64_t n = t->stride ? cfg->budget / t->stride : 0;
    if (n > (uint64_t)t->n_keys) n = (uint64_t)t->n_keys;
    if (n < 1) n = 1;
    t->n_slots = (int)n;
    t->arena_bytes = (size_t)n * t->stride;
    t->slots = calloc(n, sizeof *t->slots);
    t->map = malloc((size_t)(t->n_keys > 0 ? t->n_keys : 1) * sizeof *t->map);
    int E = t->E > 0 ? t->E : 1;
    t->list = malloc((size_t)E * sizeof *t->list);
    t->hits = malloc((size_t)E * sizeof *t->hits);
    t->miss = malloc((size_t)E * sizeof *t->miss);
    t->dev = calloc((size_t)E, 1);
    t->pend_e = malloc((size_t)E * sizeof *t->pend_e);
    t->pend_f = malloc((size_t)E * sizeof *t->pend_f);
    t->used = malloc((size_t)E * sizeof *t->used);
    t->pf = malloc((size_t)E * sizeof *t->pf);
    t->hybrid = cfg->hybrid;
    t->host_ok = cfg->host_ok;
    t->host_ctx = cfg->host_ctx;
    t->last_ms = 1 << 30;
    t->freq = calloc((size_t)(t->n_keys > 0 ? t->n_keys : 1), sizeof *t->freq);
    t->fseen = calloc((size_t)(t->n_keys > 0 ? t->n_keys : 1), sizeof *t->fseen);
    t->prio = calloc((size_t)(t->n_keys > 0 ? t->n_keys : 1), sizeof *t->prio);
    t->freel = malloc((size_t)n * sizeof *t->freel);
    t->heap = malloc((size_t)n * sizeof *t->heap);
    t->held = malloc((size_t)2 * (size_t)E * sizeof *t->held);
    t->prev = malloc((size_t)2 * (size_t)E * sizeof *t->prev);
    t->hostd = calloc((size_t)E, 1);
    t->cost = cfg->hybrid && !cfg->be->is_host;
    /* until measured: 2.5 GB/s of weights a host thread (a 16-core host's 40 GB/s: near a PCIe 5 link, so the
     * first layers split their misses and the host's batches are measured; a guess far below the link's rate
     * sent every miss up and left the host never measured, call L's 2G rows) */
    t->cpu_spb = 1.0 / (2.5e9 * (cfg->host_threads > 0 ? cfg->host_threads : 4));
    t->pcie_spb = 1.0 / 25e9; /* 25 GB/s over PCIe */
    t->l_st = calloc((size_t)3 * (cfg->file->h.n_moe_layers > 0 ? cfg->file->h.n_moe_layers : 1), sizeof *t->l_st);
    t->async = t->be->copy_async && t->be->mark && t->be->fence_done;
#ifdef SL_TIER_SYNC /* tools/cuda_bench.sh's baseline: every copy waited for */
    t->async = 0;
#endif
    /* host slots kept for copies in flight: a few, and at most half of the host source's slots, so its
     * next reads always find one (a resident host source has none to run out of) */
    t->hold = cfg->lower_slots <= 0 ? E : cfg->lower_slots / 2 < TIER_HOLD ? cfg->lower_slots / 2 : TIER_HOLD;
    /* hybrid: host experts held at once (a layer's, until it runs them together) beside the copies' slots (hold),
     * leaving one for the next read; a resident host source has no slots to run out of */
    t->host_cap = cfg->lower_slots <= 0 ? E : cfg->lower_slots - t->hold - 1 > 0 ? cfg->lower_slots - t->hold - 1 : 0;
    t->arena = t->slots ? t->be->alloc(t->be, t->arena_bytes, BE_BUF_DEVICE) : NULL;
    if (!t->slots || !t->map || !t->list || !t->hits || !t->miss || !t->dev || !t->pend_e || !t->pend_f || !t->used ||
        !t->pf || !t->freq || !t->fseen || !t->prio || !t->freel || !t->heap || !t->held || !t->prev || !t->hostd || !t->l_st || !t->arena) {
        err_set(err, SL_ENOMEM, "out of %s memory for a device expert tier of %llu slots of %zu bytes",
               t->arena ? "host" : t->be->name, (unsigned long long)n, t->stride);
        tier_free(t);
        return SL_ENOMEM;
    }
    for (int i = 0; i < t->n_keys; i++) t->map[i] = -1;
    for (uint64_t i = 0; i < n; i++) {
        t->slots[i].buf = t->arena + i * t->stride;
        t->slots[i].key = -1;
        t->slots[i].hpos = -1;
        t->freel[n - 1 - i] = (int)i; /* slot 0 on top */
    }
    t->n_free = (int)n;
    t->st.slots = n;
    t->st.slot_bytes = t->stride;
    if (t->cost) measure_pcie(t);
    *out = t;
    return SL_OK;
}

void tier_free(tier *t) {
    if (!t) return;
    if (t->arena && t->async) t->be->sync(t->be); /* no copy still writes the arena */
    if (t->arena) t->be->free(t->be, t->arena, t->arena_bytes, BE_BUF_DEVICE);
    free(t->slots);
    free(t->map);
    free(t->list);
    free(t->hits);
    free(t->miss);
    free(t->dev);
    free(t->pend_e);
    free(t->pend_f);
    free(t->used);
    free(t->pf);
    free(t->freq);
    free(t->fseen);
    free(t->prio);
    free(t->freel);
    free(t->heap);
    free(t->held);
    free(t->prev);
    free(t->hostd);
    free(t->l_st);
    free(t);
}

/* The victim the order names, by a scan (what victim() kept in the heap): a free slot (the lowest index), else the
 * first unheld slot in before()'s order; -1 when every slot is held. */
static int victim_scan(const tier *t) {
    int best = -1;
    for (int i = 0; i < t->n_slots; i++) {
        if (t->slots[i].key < 0) return i;
        if (t->slots[i].refs == 0 && (best < 0 || before(t, i, best))) best = i;
    }
    return best;
}

int tier_audit(const tier *t, char *why, size_t n) {
    int free_n = 0, heap_n = 0;
    for (int i = 0; i < t->n_slots; i++) {
        const tslot *s = &t->slots[i];
        const int in_heap = s->hpos >= 0 && s->hpos < t->n_heap && t->heap[s->hpos] == i;
        const int evictable = s->key >= 0 && s->refs == 0;
        if (in_heap != evictable || (s->hpos >= 0 && !in_heap))
            return snprintf(why, n, "slot %d (key %d, refs %d): heap position %d", i, s->key, s->refs, s->hpos), -1;
        heap_n += in_heap;
        free_n += s->key < 0;
        if (in_heap && s->hpos > 0 && before(t, i, t->heap[(s->hpos - 1) / 2]))
            return snprintf(why, n, "slot %d goes before its parent in the heap", i), -1;
    }
    if (heap_n != t->n_heap || free_n != t->n_free)
        return snprintf(why, n, "heap %d / %d slots, free %d / %d", t->n_heap, heap_n, t->n_free, free_n), -1;
    const int v = victim(t), w = victim_scan(t);
    if (v != w && !(v >= 0 && w >= 0 && t->slots[v].key < 0 && t->slots[w].key < 0))
        return snprintf(why, n, "victim %d, the order's %d", v, w), -1;
    return 0;
}

void tier_get_stats(const tier *t, tier_stats *out) {
    *out = t->st;
    out->host_gbs = t->cost ? 1e-9 / t->cpu_spb : 0;
    out->pcie_gbs = t->cost ? 1e-9 / t->pcie_spb : 0;
}

void tier_reset_stats(tier *t) {
    t->st.hits = t->st.misses = t->st.bytes_copied = t->st.host = 0;
}

void tier_layer_stats(const tier *t, int moe_slot, uint64_t *hits, uint64_t *copied, uint64_t *host) {
    const int ok = moe_slot >= 0 && moe_slot < (int)t->f->h.n_moe_layers;
    *hits = ok ? t->l_st[3 * moe_slot] : 0;
    *copied = ok ? t->l_st[3 * moe_slot + 1] : 0;
    *host = ok ? t->l_st[3 * moe_slot + 2] : 0;
}
