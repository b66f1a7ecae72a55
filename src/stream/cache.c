/*
 * cache.c — see cache.h. Sections: slots and eviction; the read path (submit / complete / retry, and
 * what a failed prefetch read becomes); the streaming protocol: unordered requests (decode: hits first,
 * then reads in completion order) and ordered ones (layer-major prefill: list order, bounded
 * read-ahead); prefetch hints (scored against the real routing, acted on only while accurate);
 * lifecycle, pinning and stats.
 */
#include "stream/cache.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/xxh3.h"

enum { S_FREE = 0, S_LOADING = 1, S_READY = 2 };
#define PF_ON 0.80
#define PF_OFF 0.70
enum { R_NONE = 0, R_RESERVED, R_QUEUED, R_INFLIGHT, R_READY, R_DELIVERED };

typedef struct slot {
    uint8_t *buf;
    int key, state, refs, pinned;
    uint64_t tick;     /* last use (LRU) */
    double freq;       /* decayed use count (LFU) */
    uint64_t freq_tick;
    io_req req;
    uint64_t done;     /* bytes of the block read so far */
    int prefetched;    /* loaded on a prefetch hint and not requested yet */
    int from_prefetch; /* the read in flight was started by a prefetch hint */
} slot;

struct cache {
    const slc_file *f;
    const fam_config *cfg;
    io_engine *io;
    int E, n_slots, n_keys, depth, verify, dontneed, prefetch;
    cache_policy policy;
    slot *slots;
    be_backend *be;    /* the slots' memory */
    uint8_t *arena;    /* pinned memory of be: every slot */
    size_t arena_bytes;
    int *map;          /* [n_keys] -> slot or -1 */
    uint64_t tick;
    double halflife;   /* LFU: accesses over which a count halves */
    /* current layer request */
    int layer, mslot, active;
    int ordered;       /* deliver in list order (see c_begin) */
    int *list, n_list, pos, ahead, held;
    uint8_t *rstate;   /* [E] */
    int *ready, n_ready, ready_head;  /* FIFO of experts ready to deliver */
    int *queued, n_queued, queued_head;
    int inflight;
    int io_broken; /* the engine's wait() itself failed: the reads in flight will never be reported */
    /* prefetch accuracy, measured on every hint whether or not it is acted on (no I/O needed) */
    unsigned char *pred;   /* [E] experts of the last hint */
    int pred_layer, pred_n, pred_seen, pf_on;
    double pred_acc;       /* moving average of |hint ∩ actual| / |hint| */
    /* a hint given during an ordered request (layer-major prefill): the next layer's predicted experts in
     * ascending order, read into slots as they free up (see c_prefetch); scored like the others but on its
     * own average, since a chunk's union of experts is far easier to predict than one token's */
    int *wl, wl_n, wl_pos, wl_slot, wl_seen, wl_on;
    int wl_scored;          /* 0: the hint came between requests (a pass's first layer): not scored */
    unsigned char *wl_mark; /* [E] experts of wl */
    double wl_acc;
    /* stats */
    cache_stats st;
    uint64_t busy0_ns, depth0_ns; /* the engine's occupancy at the last reset */
    uint64_t *l_hits, *l_miss, *l_bytes; /* [n_layers] */
    uint64_t *routes;                    /* [n_keys] */
    sl_error err; /* the current request's failure (status 0: none): the source's errmsg, cache_pin's */
};

#define fail(c, st, ...) err_set(&(c)->err, (st), __VA_ARGS__)

/* Clears the request's failure (a hint's that is not taken, or the last request's). */
static void clear_err(cache *c) {
    c->err.status = SL_OK;
    c->err.msg[0] = 0;
}

/* ---- slots and eviction ---- */

static double lfu_score(const cache *c, const slot *s) {
    return s->freq * exp2(-(double)(c->tick - s->freq_tick) / c->halflife);
}

static void touch(cache *c, slot *s) {
    c->tick++;
    s->tick = c->tick;
    s->freq = lfu_score(c, s) + 1.0;
    s->freq_tick = c->tick;
}

/* What a victim search leaves alone besides busy slots: experts the current ordered request lists and
 * has not claimed yet (evicting one only to read it again later in the same request wastes a read), and
 * blocks read for the pending ordered hint and not claimed yet (the next layer's, about to be used). */
enum { SPARE_PENDING = 1, SPARE_HINT = 2 };

static int spared(const cache *c, const slot *s, int spare) {
    if ((spare & SPARE_PENDING) && c->active && c->ordered && s->key / c->E == c->mslot &&
        c->rstate[s->key % c->E] == R_QUEUED)
        return 1;
    return (spare & SPARE_HINT) && s->prefetched && c->wl_n > 0 && s->key / c->E == c->wl_slot;
}

/* A slot to load into: a free one, else the policy's victim among unreferenced, unpinned READY
 * slots that `spare` does not protect; -1 if there is none. */
static int victim_among(cache *c, int spare) {
    int best = -1;
    double best_score = 0;
    for (int i = 0; i < c->n_slots; i++) {
        slot *s = &c->slots[i];
        if (s->state == S_FREE) return i;
        if (s->state != S_READY || s->refs > 0 || s->pinned || (spare && spared(c, s, spare))) continue;
        double score = c->policy == CACHE_LFU ? lfu_score(c, s) : (double)s->tick;
        if (best < 0 || score < best_score) {
            best = i;
            best_score = score;
        }
    }
    return best;
}

static int victim(cache *c) { return victim_among(c, 0); }

static void drop(cache *c, int i) {
    slot *s = &c->slots[i];
    if (s->prefetched && s->state == S_READY) c->st.prefetch_wasted++;
    s->prefetched = 0;
    if (s->key >= 0 && c->map[s->key] == i) c->map[s->key] = -1;
    s->key = -1;
    s->state = S_FREE;
    s->refs = 0;
    s->pinned = 0;
}

/* ---- read path ---- */

static uint64_t key_offset(const cache *c, int key) {
    return slc_expert_offset(c->f, key / c->E, key % c->E);
}

static sl_status submit_rest(cache *c, int i) {
    slot *s = &c->slots[i];
    uint64_t stride = slc_slot_stride(c->f, s->key / c->E);
    s->req.off = key_offset(c, s->key) + s->done;
    s->req.len = (uint32_t)(stride - s->done);
    s->req.buf = s->buf + s->done;
    s->req.user = s;
    /* a read of the whole block is checksummed by the engine, off this thread (io.h) */
    s->req.hash_len = c->verify && s->done == 0 ? (uint32_t)slc_block_bytes(c->f, s->key / c->E) : 0;
    s->req.hashed = 0;
    int rc = c->io->ops->submit(c->io, &s->req);
    if (rc) return fail(c, SL_EIO, "cannot submit a read: %s", strerror(-rc));
    c->inflight++;
    return SL_OK;
}

/* Starts reading key into slot i: for the current request (refs 1, a miss) or on a prefetch hint
 * (refs 0). map[key] points at the slot from now on; its state says whether the data is there. */
static sl_status start_load(cache *c, int i, int key, int prefetch) {
    slot *s = &c->slots[i];
    if (s->state != S_FREE) drop(c, i);
    s->key = key;
    s->state = S_LOADING;
    s->refs = prefetch ? 0 : 1;
    s->prefetched = prefetch;
    s->from_prefetch = prefetch;
    s->done = 0;
    c->map[key] = i;
    c->tick++;
    s->tick = c->tick; /* a fresh load is recent: not the next victim */
    if (prefetch) c->st.prefetch_reads++;
    else c->st.misses++;
    c->st.reads++;
    return submit_rest(c, i);
}

/* Names a key for messages. */
#define KEY_FMT "layer %d, expert %d (file offset %llu)"
#define KEY_ARGS(c, key) (c)->f->moe_layers[(key) / (c)->E], (key) % (c)->E, (unsigned long long)key_offset(c, key)

/* A read started by a prefetch hint failed (error, end of file or bad checksum). Nobody waits for it:
 * drop it quietly. A request has claimed it meanwhile: read it again as that request's own read, so
 * only a failure of the demanded read is reported. */
static sl_status prefetch_failed(cache *c, int i) {
    slot *s = &c->slots[i];
    c->st.prefetch_failed++;
    if (s->refs == 0) {
        drop(c, i);
        return SL_OK;
    }
    s->from_prefetch = 0;
    s->done = 0;
    c->st.reads++;
    return submit_rest(c, i);
}

/* Waits for one completion and advances that slot. SL_OK with *done_slot the slot whose block is complete and
 * verified, or -1 (the read was resubmitted: short read, EINTR; or a hint's read failed quietly); else the
 * error, as c->err. */
static sl_status complete_one(cache *c, int *done_slot) {
    io_req *r = NULL;
    uint64_t t0 = clk_now_ns();
    int rc = c->io->ops->wait(c->io, &r);
    c->st.io_wait_ns += clk_now_ns() - t0;
    *done_slot = -1;
    if (rc) {
        c->io_broken = 1;
        return fail(c, SL_EIO, "waiting for expert reads failed: %s", strerror(-rc));
    }
    c->inflight--;
    slot *s = r->user;
    int i = (int)(s - c->slots);
    if (r->res == -EINTR || r->res == -EAGAIN) {
        c->st.retries++;
        return submit_rest(c, i);
    }
    if (r->res <= 0 && s->from_prefetch) return prefetch_failed(c, i);
    if (r->res < 0) {
        int key = s->key;
        drop(c, i);
        return fail(c, SL_EIO, "%s: read of expert block (" KEY_FMT ") failed: %s", c->f->path, KEY_ARGS(c, key),
                    strerror((int)-r->res));
    }
    if (r->res == 0) {
        int key = s->key;
        drop(c, i);
        return fail(c, SL_EIO, "%s: unexpected end of file reading expert block (" KEY_FMT ")", c->f->path,
                    KEY_ARGS(c, key));
    }
    s->done += (uint64_t)r->res;
    c->st.bytes_read += (uint64_t)r->res;
    if (s->done < slc_slot_stride(c->f, s->key / c->E)) {
        c->st.retries++;
        return submit_rest(c, i);
    }
    if (c->dontneed)
        posix_fadvise(c->io->fd, (off_t)key_offset(c, s->key), (off_t)slc_slot_stride(c->f, s->key / c->E), POSIX_FADV_DONTNEED);
    if (c->verify) {
        uint64_t h = r->hash;
        if (r->hashed) c->st.engine_hash_ns += r->hash_ns;
        const uint64_t bb = slc_block_bytes(c->f, s->key / c->E);
        if (!r->hashed || r->buf != s->buf || r->hash_len != bb) { /* a short read was resumed */
            uint64_t t1 = clk_now_ns();
            h = XXH3_64bits(s->buf, bb);
            c->st.verify_ns += clk_now_ns() - t1;
        }
        if (h != c->f->expert_hash[s->key] && s->from_prefetch) return prefetch_failed(c, i);
        if (h != c->f->expert_hash[s->key]) {
            int key = s->key;
            drop(c, i);
            return fail(c, SL_ECHECKSUM, "%s: expert block (" KEY_FMT ") fails its checksum", c->f->path, KEY_ARGS(c, key));
        }
    }
    s->state = S_READY;
    s->from_prefetch = 0;
    *done_slot = i;
    return SL_OK;
}

/* ---- streaming protocol ---- */

static void fill_expert(const cache *c, const slot *s, tn_expert *out) { slc_bind_expert(c->f, s->key / c->E, s->buf, out); }

/* Ordered requests (prefill over many tokens: the caller accumulates each expert's output straight
 * into its tokens, so experts must arrive in list order). Nothing is reserved up front; the head of the
 * list is loaded on demand, and reads run ahead down the list while they leave a slot free for the
 * head (so a cache of any size makes progress). */
static sl_status ordered_load(cache *c, int e, int v) {
    sl_status rc = start_load(c, v, c->mslot * c->E + e, 0); /* counts the miss; the slot is reserved (refs 1) */
    if (rc) return rc;
    c->rstate[e] = R_INFLIGHT;
    c->held++;
    c->l_miss[c->layer]++;
    return SL_OK;
}

static sl_status ordered_readahead(cache *c) {
    int limit = c->n_slots - (int)c->st.pinned - 2; /* always leave a slot for the head */
    if (c->ahead <= c->pos) c->ahead = c->pos + 1;
    while (c->ahead < c->n_list && c->held < limit && c->inflight < c->depth) {
        int e = c->list[c->ahead];
        if (c->map[c->mslot * c->E + e] < 0) {
            int v = victim_among(c, SPARE_PENDING | SPARE_HINT);
            if (v < 0) break;
            sl_status rc = ordered_load(c, e, v);
            if (rc) return rc;
        }
        c->ahead++;
    }
    return SL_OK;
}

/* Reads the pending ordered hint's experts (the next layer's, ascending: the order that layer will take
 * them in) into slots that neither the current request nor the hint still needs, while the depth allows.
 * During an ordered request only once it has every read of its own list started (the head's and the
 * read-ahead's), so the hint never delays the current layer; after it (c_end), at once, so the reads overlap the next layer's mixer.
 * A hint that cannot be submitted is simply dropped; a failed hint read is dropped or re-read on demand
 * (prefetch_failed): neither ever fails a request. */
static void hint_issue(cache *c) {
    if (!c->wl_n || !c->wl_on || c->err.status) return;
    if (c->active && c->ordered && /* the head and the read-ahead first */
        (c->ahead < c->n_list || (c->pos < c->n_list && c->map[c->mslot * c->E + c->list[c->pos]] < 0)))
        return;
    int started = 0;
    while (c->wl_pos < c->wl_n && c->inflight < c->depth) {
        int key = c->wl_slot * c->E + c->wl[c->wl_pos];
        if (c->map[key] >= 0) { /* cached or in flight already */
            c->wl_pos++;
            continue;
        }
        int v = victim_among(c, SPARE_PENDING | SPARE_HINT);
        if (v < 0) break;
        if (start_load(c, v, key, 1)) {
            clear_err(c);
            c->wl_pos = c->wl_n;
            break;
        }
        c->wl_pos++;
        started++;
    }
    if (started) c->io->ops->flush(c->io);
}

static sl_status ordered_next(cache *c, int *expert, tn_expert *out) {
    if (c->pos >= c->n_list) return fail(c, SL_EINVAL, "expert cache: more next() calls than experts requested");
    int e = c->list[c->pos], key = c->mslot * c->E + e;
    for (;;) {
        int rc = ordered_readahead(c);
        if (!rc) hint_issue(c);
        if (!rc) rc = c->io->ops->flush(c->io);
        if (rc) return c->err.status ? rc : fail(c, SL_EIO, "cannot start expert reads: %s", strerror(-rc));
        int si = c->map[key];
        if (si >= 0 && c->rstate[e] != R_INFLIGHT) { /* cached or being prefetched: claim it */
            slot *sl = &c->slots[si];
            sl->refs++;
            if (sl->prefetched) c->st.prefetch_used++;
            sl->prefetched = 0;
            c->rstate[e] = R_INFLIGHT;
            c->held++;
            c->st.hits++;
            c->l_hits[c->layer]++;
        } else if (si < 0) { /* the head is neither cached nor in flight: load it now (into any slot, if need be) */
            int v = victim_among(c, SPARE_PENDING | SPARE_HINT);
            if (v < 0) v = victim_among(c, SPARE_PENDING);
            if (v < 0) v = victim(c);
            if (v >= 0 && (rc = ordered_load(c, e, v))) return rc;
            if (v >= 0) continue;
        }
        si = c->map[key];
        if (si >= 0 && c->slots[si].state == S_READY) {
            slot *sl = &c->slots[si];
            c->held--;
            c->rstate[e] = R_DELIVERED;
            touch(c, sl);
            fill_expert(c, sl, out);
            *expert = e;
            c->pos++;
            return 0;
        }
        if (c->inflight == 0)
            return fail(c, SL_ENOMEM, "expert cache: all %d slots are in use (budget too small for this request)", c->n_slots);
        int done = -1;
        if ((rc = complete_one(c, &done))) return rc;
        if (done >= 0)
            c->l_bytes[c->f->moe_layers[c->slots[done].key / c->E]] += slc_slot_stride(c->f, c->slots[done].key / c->E);
    }
}

static sl_status c_begin(void *ctx, int layer, const int *experts, int n, int ordered) {
    cache *c = ctx;
    int ms = cfg_moe_slot(c->cfg, layer);
    if (ms < 0) return fail(c, SL_EINVAL, "layer %d has no routed experts", layer);
    /* score the ordered hint for this layer; not one given before any request of a pass (its first layer's:
     * every expert of it, moe.c fwd_moe_hint_first), which would only switch off the hints that follow */
    if (c->wl_n > 0 && c->wl_slot == ms && c->wl_scored) {
        int good = 0;
        for (int i = 0; i < n; i++) good += c->wl_mark[experts[i]];
        double prec = (double)good / c->wl_n;
        /* a prefill gives one hint per layer and chunk, so the average moves faster than decode's */
        c->wl_acc = c->wl_seen ? 0.75 * c->wl_acc + 0.25 * prec : prec;
        c->wl_seen++;
        if (c->prefetch == 1) c->wl_on = c->wl_on ? c->wl_acc >= PF_OFF : c->wl_acc >= PF_ON;
    }
    if (c->wl_n > 0) { /* a hint is for the request right after it only */
        for (int i = 0; i < c->wl_n; i++) c->wl_mark[c->wl[i]] = 0;
        c->wl_n = c->wl_pos = 0;
    }
    if (ordered) {
        c->layer = layer;
        c->mslot = ms;
        c->active = 1;
        c->ordered = 1;
        clear_err(c);
        c->n_ready = c->ready_head = c->n_queued = c->queued_head = 0;
        memcpy(c->list, experts, (size_t)n * sizeof *experts);
        c->n_list = n;
        c->pos = c->ahead = c->held = 0;
        for (int i = 0; i < n; i++) {
            c->routes[ms * c->E + experts[i]]++;
            c->rstate[experts[i]] = R_QUEUED; /* listed, not claimed yet (spared by read-ahead and hints) */
        }
        return 0;
    }
    c->ordered = 0;
    if (c->pred_n > 0 && c->pred_layer == layer) { /* score the last hint against the real routing */
        int good = 0;
        for (int i = 0; i < n; i++) good += c->pred[experts[i]];
        c->pred_acc = c->pred_seen ? 0.95 * c->pred_acc + 0.05 * good / c->pred_n : (double)good / c->pred_n;
        c->pred_seen++;
        /* act on hints only when they are right often enough to pay for the reads they waste
         * (hysteresis: on at 80%, off below 70%; decided after 16 scored hints) */
        if (c->prefetch == 1 && c->pred_seen >= 16) c->pf_on = c->pf_on ? c->pred_acc >= PF_OFF : c->pred_acc >= PF_ON;
        c->pred_n = 0;
    }
    c->layer = layer;
    c->mslot = ms;
    c->active = 1;
    clear_err(c);
    c->n_ready = c->ready_head = c->n_queued = c->queued_head = 0;
    for (int i = 0; i < n; i++) {
        int e = experts[i], key = ms * c->E + e;
        c->routes[key]++;
        int si = c->map[key];
        if (si >= 0) {
            slot *s = &c->slots[si];
            s->refs++;
            if (s->prefetched) c->st.prefetch_used++;
            s->prefetched = 0;
            if (s->state == S_READY) {
                c->rstate[e] = R_RESERVED;
                c->ready[c->n_ready++] = e;
            } else {
                c->rstate[e] = R_INFLIGHT; /* a prefetch is already reading it */
            }
            c->st.hits++;
            c->l_hits[layer]++;
        } else {
            c->rstate[e] = R_QUEUED;
            c->queued[c->n_queued++] = e;
            c->l_miss[layer]++;
        }
    }
    /* submit as many misses as slots and depth allow, all at once */
    while (c->queued_head < c->n_queued && c->inflight < c->depth) {
        int v = victim(c);
        if (v < 0) break;
        int e = c->queued[c->queued_head++];
        c->rstate[e] = R_INFLIGHT;
        int rc = start_load(c, v, ms * c->E + e, 0);
        if (rc) return rc;
    }
    int rc = c->io->ops->flush(c->io);
    return rc ? fail(c, SL_EIO, "cannot start expert reads: %s", strerror(-rc)) : 0;
}

static sl_status c_next(void *ctx, int *expert, tn_expert *out) {
    cache *c = ctx;
    if (c->ordered) return ordered_next(c, expert, out);
    for (;;) {
        if (c->ready_head < c->n_ready) {
            int e = c->ready[c->ready_head++];
            int si = c->map[c->mslot * c->E + e];
            slot *s = &c->slots[si];
            touch(c, s);
            c->rstate[e] = R_DELIVERED;
            fill_expert(c, s, out);
            *expert = e;
            return 0;
        }
        /* top up reads: slots freed by release() can take queued misses now */
        while (c->queued_head < c->n_queued && c->inflight < c->depth) {
            int v = victim(c);
            if (v < 0) break;
            int e = c->queued[c->queued_head++];
            c->rstate[e] = R_INFLIGHT;
            int rc = start_load(c, v, c->mslot * c->E + e, 0);
            if (rc) return rc;
        }
        if (c->inflight == 0)
            return fail(c, SL_ENOMEM, "expert cache: all %d slots are in use (budget too small for this request)", c->n_slots);
        int rc = c->io->ops->flush(c->io);
        if (rc) return fail(c, SL_EIO, "cannot start expert reads: %s", strerror(-rc));
        int done = -1;
        rc = complete_one(c, &done);
        if (rc) return rc;
        if (done >= 0) {
            int key = c->slots[done].key, e = key % c->E;
            if (key / c->E == c->mslot && c->rstate[e] == R_INFLIGHT) { /* else a prefetch landed */
                c->rstate[e] = R_READY;
                c->ready[c->n_ready++] = e;
            }
            c->l_bytes[c->f->moe_layers[key / c->E]] += slc_slot_stride(c->f, key / c->E);
        }
    }
}

static void c_release(void *ctx, int expert) {
    cache *c = ctx;
    int si = c->map[c->mslot * c->E + expert];
    if (si >= 0 && c->slots[si].refs > 0) c->slots[si].refs--;
}

/* Waits for every read in flight (prefetches included); completed blocks stay cached. */
static void drain(cache *c) {
    while (c->inflight > 0 && !c->io_broken) { /* a broken engine reports nothing more: waiting would hang */
        int done = -1;
        const sl_error saved = c->err;
        complete_one(c, &done);
        c->err = saved;
        if (done >= 0 && !c->slots[done].prefetched) c->slots[done].refs = 0;
    }
}

static void c_end(void *ctx) {
    cache *c = ctx;
    /* after an error, settle every read; otherwise prefetch reads stay in flight across layers */
    if (c->err.status) drain(c);
    /* undelivered reservations */
    for (int i = c->ready_head; i < c->n_ready; i++) {
        int si = c->map[c->mslot * c->E + c->ready[i]];
        if (si >= 0 && c->slots[si].refs > 0) c->slots[si].refs--;
    }
    for (int i = 0; i < c->n_slots; i++)
        if (c->slots[i].state == S_READY && !c->slots[i].pinned) c->slots[i].refs = 0;
    memset(c->rstate, 0, (size_t)c->E);
    c->active = 0;
    c->ordered = 0;
    hint_issue(c); /* the next layer's predicted reads, into the slots this request has just let go */
}

static const char *c_errmsg(void *ctx) { return ((cache *)ctx)->err.msg; }

/* Prefetch hint: start reading experts of `layer` that are neither cached nor in flight, into free or
 * evictable slots, while the I/O depth allows. Never evicts what the current request holds, never
 * waits, and does nothing while the current request still has misses to submit. The caller says which
 * kind of hint it is (tn_expert_src.prefetch): a decode step's guess is scored even when it comes between
 * requests (a device tier that served a whole step from its slots never opened one here). */
static void c_prefetch(void *ctx, int layer, const int *experts, int n, int ordered) {
    cache *c = ctx;
    int ms = cfg_moe_slot(c->cfg, layer);
    if (!c->prefetch || ms < 0) return;
    /* a layer-major pass's union of that layer, read in order: during its request, or between requests (its
     * first MoE layer, hinted before the mixer: forward.c eval_multi) */
    if (ordered) {
        for (int i = 0; i < c->wl_n; i++) c->wl_mark[c->wl[i]] = 0; /* replaces an earlier hint */
        c->wl_n = 0;
        for (int i = 0; i < n; i++) {
            int e = experts[i];
            if (e < 0 || e >= c->E || c->wl_mark[e]) continue;
            c->wl_mark[e] = 1;
            c->wl[c->wl_n++] = e;
        }
        c->wl_slot = ms;
        c->wl_pos = 0;
        c->wl_scored = c->active;
        hint_issue(c);
        return;
    }
    memset(c->pred, 0, (size_t)c->E);
    for (int i = 0; i < n; i++)
        if (experts[i] >= 0 && experts[i] < c->E) c->pred[experts[i]] = 1;
    c->pred_layer = layer;
    c->pred_n = n;
    if (!c->pf_on || c->err.status || (c->active && c->queued_head < c->n_queued)) return;
    int started = 0;
    for (int i = 0; i < n && c->inflight < c->depth; i++) {
        if (experts[i] < 0 || experts[i] >= c->E) continue;
        int key = ms * c->E + experts[i];
        if (c->map[key] >= 0) continue;
        int v = victim(c);
        if (v < 0) break;
        if (start_load(c, v, key, 1)) {
            clear_err(c); /* a hint that cannot be submitted is simply not taken */
            break;
        }
        started++;
    }
    if (started) c->io->ops->flush(c->io);
}

/* Blocking single fetch (not used by the forward pass when begin() exists; kept for tools). */
static sl_status c_get(void *ctx, int layer, int expert, tn_expert *out) {
    cache *c = ctx;
    int rc = c_begin(c, layer, &expert, 1, 0);
    int e = -1;
    if (!rc) rc = c_next(c, &e, out);
    if (!rc) c_release(c, e);
    c_end(c);
    return rc;
}

tn_expert_src cache_source(cache *c) {
    tn_expert_src s = {c_get, c_begin, c_next, c_release, c_end, c_errmsg, c_prefetch, c, NULL, NULL};
    return s;
}

/* ---- lifecycle, pinning, stats ---- */

sl_status cache_new(const cache_cfg *cfg, cache **out, sl_error *err) {
    *out = NULL;
    cache *c = calloc(1, sizeof *c);
    if (!c) {
        io_destroy(cfg->io);
        return err_set(err, SL_ENOMEM, "out of memory");
    }
    c->f = cfg->file;
    c->cfg = cfg->cfg;
    c->io = cfg->io;
    c->E = (int)cfg->file->h.n_experts;
    c->n_keys = (int)cfg->file->h.n_moe_layers * c->E;
    c->policy = cfg->policy;
    c->verify = cfg->verify;
    c->dontneed = cfg->dontneed;
    c->prefetch = cfg->prefetch;
    c->pf_on = cfg->prefetch == 2;
    c->wl_on = cfg->prefetch != 0; /* a chunk's union is usually predictable: act until it proves not */
    uint64_t stride = cfg->file->h.expert_stride;
    uint64_t n = stride ? cfg->budget / stride : 0;
    if (n > (uint64_t)c->n_keys) n = (uint64_t)c->n_keys;
    if (n < 1) n = 1; /* a model without MoE layers (synth --layers inside the dense ones) keeps one idle slot */
    c->n_slots = (int)n;
    c->depth = c->io->depth < c->n_slots ? c->io->depth : c->n_slots;
    c->halflife = 8.0 * c->n_slots;
    c->slots = calloc(n, sizeof *c->slots);
    c->be = cfg->be;
    c->arena_bytes = n * stride;
    c->arena = c->be->alloc(c->be, c->arena_bytes, BE_BUF_PINNED); /* touched up front: backend.h */
    c->map = malloc((size_t)(c->n_keys > 0 ? c->n_keys : 1) * sizeof *c->map);
    c->rstate = calloc((size_t)c->E, 1);
    c->ready = malloc((size_t)c->E * sizeof *c->ready);
    c->queued = malloc((size_t)c->E * sizeof *c->queued);
    c->pred = calloc((size_t)c->E, 1);
    c->list = malloc((size_t)c->E * sizeof *c->list);
    c->wl = malloc((size_t)c->E * sizeof *c->wl);
    c->wl_mark = calloc((size_t)c->E, 1);
    int L = cfg->cfg->n_layers;
    c->l_hits = calloc((size_t)L, 8);
    c->l_miss = calloc((size_t)L, 8);
    c->l_bytes = calloc((size_t)L, 8);
    c->routes = calloc((size_t)(c->n_keys > 0 ? c->n_keys : 1), 8);
    if (!c->slots || !c->arena || !c->map || !c->rstate || !c->ready || !c->queued || !c->pred || !c->list || !c->wl || !c->wl_mark || !c->l_hits || !c->l_miss ||
        !c->l_bytes || !c->routes) {
        cache_free(c);
        return err_set(err, SL_ENOMEM, "out of memory for an expert cache of %llu slots of %llu bytes",
                      (unsigned long long)n, (unsigned long long)stride);
    }
    for (int i = 0; i < c->n_keys; i++) c->map[i] = -1;
    for (uint64_t i = 0; i < n; i++) {
        c->slots[i].buf = c->arena + i * stride;
        c->slots[i].key = -1;
    }
    c->st.slots = n;
    c->st.slot_bytes = stride;
    *out = c;
    return SL_OK;
}

void cache_free(cache *c) {
    if (!c) return;
    if (c->io && c->slots) drain(c); /* no read may land in freed memory */
    io_destroy(c->io);
    free(c->slots);
    if (c->arena) c->be->free(c->be, c->arena, c->arena_bytes, BE_BUF_PINNED);
    free(c->map);
    free(c->rstate);
    free(c->ready);
    free(c->queued);
    free(c->pred);
    free(c->list);
    free(c->wl);
    free(c->wl_mark);
    free(c->l_hits);
    free(c->l_miss);
    free(c->l_bytes);
    free(c->routes);
    free(c);
}

static void engine_busy(const cache *c, uint64_t *busy, uint64_t *depth) {
    *busy = *depth = 0;
    if (c->io->ops->busy) c->io->ops->busy(c->io, busy, depth);
}

void cache_get_stats(const cache *c, cache_stats *out) {
    *out = c->st;
    engine_busy(c, &out->io_busy_ns, &out->io_depth_ns);
    out->io_busy_ns -= c->busy0_ns;
    out->io_depth_ns -= c->depth0_ns;
    out->prefetch_accuracy = c->pred_seen ? c->pred_acc : -1;
    out->prefetch_active = c->pf_on;
    out->pinned = 0;
    for (int i = 0; i < c->n_slots; i++) out->pinned += c->slots[i].pinned ? 1 : 0;
}

void cache_layer_stats(const cache *c, int layer, uint64_t *hits, uint64_t *misses, uint64_t *bytes) {
    *hits = c->l_hits[layer];
    *misses = c->l_miss[layer];
    *bytes = c->l_bytes[layer];
}

void cache_reset_stats(cache *c) {
    uint64_t slots = c->st.slots, sb = c->st.slot_bytes;
    memset(&c->st, 0, sizeof c->st);
    c->st.slots = slots;
    c->st.slot_bytes = sb;
    engine_busy(c, &c->busy0_ns, &c->depth0_ns);
    int L = c->cfg->n_layers;
    memset(c->l_hits, 0, (size_t)L * 8);
    memset(c->l_miss, 0, (size_t)L * 8);
    memset(c->l_bytes, 0, (size_t)L * 8);
}

const uint64_t *cache_route_counts(const cache *c) { return c->routes; }

/* The pinning loop; failures in c->err (cache_pin copies them out). */
static sl_status pin_keys(cache *c, const int *keys, int n_keys, double max_fraction) {
    int max_pin = (int)(max_fraction * c->n_slots);
    int pinned = 0;
    for (int i = 0; i < n_keys && pinned < max_pin; i++) {
        int key = keys[i];
        if (key < 0 || key >= c->n_keys) return fail(c, SL_EINVAL, "pin: expert key %d out of range", key);
        int si = c->map[key];
        if (si < 0) {
            si = victim(c);
            if (si < 0) break;
            sl_status rc = start_load(c, si, key, 0);
            if (rc) return rc;
            int done = -1;
            while (c->inflight > 0) {
                rc = complete_one(c, &done);
                if (rc) return rc;
            }
            if (done != si) return fail(c, SL_EIO, "pin: read did not complete");
            c->st.misses--; /* pinning is not a miss of the workload */
        }
        c->slots[si].pinned = 1;
        c->slots[si].refs = 0;
        pinned++;
    }
    return SL_OK;
}

sl_status cache_pin(cache *c, const int *keys, int n_keys, double max_fraction, sl_error *err) {
    sl_status st = pin_keys(c, keys, n_keys, max_fraction);
    return st ? err_set(err, st, "%s", c->err.msg) : SL_OK;
}

/* The warming loop; failures in c->err (cache_warm copies them out). Free slots are taken in index order (a cursor:
 * nothing frees a slot meanwhile), the reads kept depth deep. */
static sl_status warm_keys(cache *c, uint64_t *loaded) {
    int next_free = 0;
    sl_status rc = SL_OK;
    for (int key = 0; key < c->n_keys && !rc; key++) {
        if (c->map[key] >= 0) continue;
        while (next_free < c->n_slots && c->slots[next_free].state != S_FREE) next_free++;
        if (next_free == c->n_slots) break; /* full: nothing is evicted */
        while (!rc && c->inflight >= c->depth) {
            int done = -1;
            if (!(rc = complete_one(c, &done)) && done >= 0) c->slots[done].refs = 0;
        }
        if (!rc && !(rc = start_load(c, next_free, key, 0))) {
            c->st.misses--; /* not a miss of the workload (the reads and their bytes are counted) */
            (*loaded)++;
        }
    }
    while (c->inflight > 0) { /* the reads started are waited for even after a failure: none may land later */
        int done = -1;
        sl_status r2 = complete_one(c, &done);
        if (!r2 && done >= 0) c->slots[done].refs = 0;
        if (r2 && !rc) rc = r2;
        if (r2 && c->io_broken) break;
    }
    return rc;
}

sl_status cache_warm(cache *c, uint64_t *loaded, sl_error *err) {
    *loaded = 0;
    if (c->active) return err_set(err, SL_EINVAL, "expert cache: warming inside a request");
    clear_err(c);
    sl_status st = warm_keys(c, loaded);
    return st ? err_set(err, st, "%s", c->err.msg) : SL_OK;
}
