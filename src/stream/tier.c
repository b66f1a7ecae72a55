/*
 * tier.c — see tier.h. Sections: slots and eviction; promotion (host block -> device slot); the
 * streaming protocol over the host source (unordered: device hits first, then the host source's
 * deliveries in its order; ordered: the list's order, each miss taken from the host source, which was
 * asked for the misses in the same order); lifecycle and stats.
 */
#include "stream/tier.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

typedef struct tslot {
    uint8_t *buf; /* device memory, stride bytes */
    int key;      /* moe slot * E + expert, or -1 */
    int refs;     /* held by the current request */
    uint64_t tick;
} tslot;

struct tier {
    sl_backend *be;
    const slc_file *f;
    const sl_config *cfg;
    sl_expert_src lo;
    int E, n_keys, n_slots;
    size_t stride, block;
    tslot *slots;
    uint8_t *arena;
    size_t arena_bytes;
    int *map; /* [n_keys] -> slot or -1 */
    uint64_t tick;
    /* the current request */
    int layer, mslot, ordered, active, lo_begun;
    int *list, n_list, pos;       /* ordered: the experts in order */
    uint8_t *dev;                 /* [E] 1: the expert was a device hit at begin */
    int *hits, n_hits, hits_head; /* unordered: device hits not yet handed out */
    int *miss, n_miss, miss_next; /* misses, in list order; miss_next: the next one get() fetches */
    int lo_left;                  /* misses the host source still owes */
    tier_stats st;
    char err[512];
};

static int fail(tier *t, int st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(tier *t, int st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->err, sizeof t->err, fmt, ap);
    va_end(ap);
    return st;
}

/* ---- slots and eviction ---- */

/* A free slot, else the least recently used unreferenced one; -1 when every slot is held. */
static int victim(tier *t) {
    int best = -1;
    for (int i = 0; i < t->n_slots; i++) {
        tslot *s = &t->slots[i];
        if (s->key < 0) return i;
        if (s->refs > 0) continue;
        if (best < 0 || s->tick < t->slots[best].tick) best = i;
    }
    return best;
}

static void deliver(tier *t, int si, int e, int *expert, sl_expert *out) {
    tslot *s = &t->slots[si];
    s->tick = ++t->tick;
    slc_bind_expert(t->f, s->buf, out);
    *expert = e;
}

/* ---- promotion ---- */

/* Expert e of the current layer, delivered by the host source as hx, into a device slot (held): one
 * copy of its block; the host slot goes back to the host source once the copy is done. Returns the
 * slot or a negative status. */
static int promote(tier *t, int e, const sl_expert *hx) {
    const uint8_t *block = slc_expert_block(t->f, hx);
    int v = victim(t);
    if (v < 0) {
        if (t->lo.release) t->lo.release(t->lo.ctx, e);
        return fail(t, SL_ENOMEM, "device expert tier: all %d slots of %zu bytes are in use (budget too small for "
                    "this request)", t->n_slots, t->stride);
    }
    tslot *s = &t->slots[v];
    if (s->key >= 0 && t->map[s->key] == v) t->map[s->key] = -1;
    s->key = -1;
    t->be->copy(t->be, s->buf, block, t->block, BE_H2D);
    int rc = t->be->sync(t->be); /* the host slot may be reused as soon as it is released */
    if (t->lo.release) t->lo.release(t->lo.ctx, e);
    if (rc) return fail(t, rc, "device expert tier: copying layer %d expert %d to the device: %s", t->layer, e,
                        t->be->errmsg(t->be));
    int key = t->mslot * t->E + e;
    s->key = key;
    s->refs = 1;
    t->map[key] = v;
    t->st.misses++;
    t->st.bytes_copied += t->block;
    return v;
}

/* The next miss from the host source, promoted: its expert in *e, its device slot returned. */
static int fetch_miss(tier *t, int *e) {
    sl_expert hx;
    int rc;
    if (t->lo_left <= 0) return fail(t, SL_EINVAL, "device expert tier: more next() calls than experts requested");
    if (t->lo.begin) {
        rc = t->lo.next(t->lo.ctx, e, &hx);
    } else { /* a resident host source: get() in list order */
        *e = t->miss[t->miss_next++];
        rc = t->lo.get(t->lo.ctx, t->layer, *e, &hx);
    }
    if (rc) return fail(t, rc, "%s", t->lo.errmsg ? t->lo.errmsg(t->lo.ctx) : "the host expert source failed");
    t->lo_left--;
    return promote(t, *e, &hx);
}

/* ---- the streaming protocol ---- */

static int t_begin(void *ctx, int layer, const int *experts, int n, int ordered) {
    tier *t = ctx;
    int ms = cfg_moe_slot(t->cfg, layer);
    if (ms < 0) return fail(t, SL_EINVAL, "layer %d has no routed experts", layer);
    if (n > t->E) return fail(t, SL_EINVAL, "layer %d: %d experts requested of %d", layer, n, t->E);
    t->layer = layer;
    t->mslot = ms;
    t->ordered = ordered;
    t->active = 1;
    t->err[0] = 0;
    t->n_hits = t->hits_head = t->n_miss = t->miss_next = t->pos = 0;
    memcpy(t->list, experts, (size_t)n * sizeof *experts);
    t->n_list = n;
    for (int i = 0; i < n; i++) {
        int e = experts[i], si = t->map[ms * t->E + e];
        t->dev[e] = si >= 0;
        if (si >= 0) {
            t->slots[si].refs++;
            t->hits[t->n_hits++] = e;
            t->st.hits++;
        } else {
            t->miss[t->n_miss++] = e;
        }
    }
    t->lo_left = t->n_miss;
    t->lo_begun = 0;
    if (t->n_miss > 0 && t->lo.begin) {
        int rc = t->lo.begin(t->lo.ctx, layer, t->miss, t->n_miss, ordered);
        t->lo_begun = 1;
        if (rc) return fail(t, rc, "%s", t->lo.errmsg ? t->lo.errmsg(t->lo.ctx) : "the host expert source failed");
    }
    return 0;
}

static int t_next(void *ctx, int *expert, sl_expert *out) {
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
    int e = -1, si = fetch_miss(t, &e);
    if (si < 0) return si;
    deliver(t, si, e, expert, out);
    return 0;
}

static void t_release(void *ctx, int expert) {
    tier *t = ctx;
    int si = t->map[t->mslot * t->E + expert];
    if (si >= 0 && t->slots[si].refs > 0) t->slots[si].refs--;
}

static void t_end(void *ctx) {
    tier *t = ctx;
    if (t->lo_begun && t->lo.end) t->lo.end(t->lo.ctx);
    t->lo_begun = 0;
    for (int i = 0; i < t->n_slots; i++) t->slots[i].refs = 0;
    t->active = 0;
}

static const char *t_errmsg(void *ctx) { return ((tier *)ctx)->err; }

static void t_prefetch(void *ctx, int layer, const int *experts, int n) {
    tier *t = ctx;
    if (t->lo.prefetch) t->lo.prefetch(t->lo.ctx, layer, experts, n);
}

static int t_get(void *ctx, int layer, int expert, sl_expert *out) {
    int rc = t_begin(ctx, layer, &expert, 1, 0);
    int e = -1;
    if (!rc) rc = t_next(ctx, &e, out);
    if (!rc) t_release(ctx, e);
    t_end(ctx);
    return rc;
}

sl_expert_src tier_source(tier *t) {
    sl_expert_src s = {t_get, t_begin, t_next, t_release, t_end, t_errmsg, t_prefetch, t};
    return s;
}

/* ---- lifecycle, stats ---- */

tier *tier_new(const tier_cfg *cfg, char *err, size_t errlen) {
    tier *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
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
    t->arena = t->slots ? t->be->alloc(t->be, t->arena_bytes, BE_BUF_DEVICE) : NULL;
    if (!t->slots || !t->map || !t->list || !t->hits || !t->miss || !t->dev || !t->arena) {
        snprintf(err, errlen, "out of %s memory for a device expert tier of %llu slots of %zu bytes",
                 t->arena ? "host" : t->be->name, (unsigned long long)n, t->stride);
        tier_free(t);
        return NULL;
    }
    for (int i = 0; i < t->n_keys; i++) t->map[i] = -1;
    for (uint64_t i = 0; i < n; i++) {
        t->slots[i].buf = t->arena + i * t->stride;
        t->slots[i].key = -1;
    }
    t->st.slots = n;
    t->st.slot_bytes = t->stride;
    return t;
}

void tier_free(tier *t) {
    if (!t) return;
    if (t->arena) t->be->free(t->be, t->arena, t->arena_bytes, BE_BUF_DEVICE);
    free(t->slots);
    free(t->map);
    free(t->list);
    free(t->hits);
    free(t->miss);
    free(t->dev);
    free(t);
}

void tier_get_stats(const tier *t, tier_stats *out) { *out = t->st; }

void tier_reset_stats(tier *t) {
    t->st.hits = t->st.misses = t->st.bytes_copied = 0;
}
