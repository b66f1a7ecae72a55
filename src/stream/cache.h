/*
 * cache.h — the expert cache: a pool of stride-sized, 4096-aligned slots inside a byte budget, filled
 * through an I/O engine (stream/io.h), exposed to the forward pass as a streaming tn_expert_src. The slots
 * are one allocation of the backend's pinned memory (src/backend/backend.h), so a backend decides where
 * they live.
 *
 * Invariants:
 *  - a slot is FREE (no key), LOADING (a read in flight) or READY (holds expert `key` verbatim, its
 *    checksum verified when verification is on);
 *  - a slot with refs > 0 (reserved for, or held by, the current layer) or pinned is never evicted;
 *  - map[key] is the READY slot holding key, or -1.
 * Single-threaded: one layer request at a time (the model serialises evaluations). Prefetch reads may
 * stay in flight between requests; cache_free waits for them before freeing the slots.
 */
#ifndef SL_CACHE_H
#define SL_CACHE_H

#include <stdint.h>

#include "backend/backend.h"
#include "format/container.h"
#include "stream/io.h"
#include "util/tensor.h"

typedef enum { CACHE_LRU = 0, CACHE_LFU = 1 } cache_policy;

typedef struct cache_cfg {
    const slc_file *file;  /* layout, parts, hashes (borrowed; outlives the cache) */
    const fam_config *cfg;  /* borrowed */
    io_engine *io;         /* owned by the cache from cache_new on, even on failure */
    uint64_t budget;       /* bytes for slots; at least one slot is always made */
    cache_policy policy;
    int verify;            /* xxh3 of every block read */
    int dontneed;          /* posix_fadvise(DONTNEED) after each read (buffered mode) */
    int prefetch;          /* 1: score hints and act on them once they prove accurate (>= 80%); 2: always
                              act on them (tests); 0: ignore them */
    be_backend *be;        /* whose pinned memory the slots are (alloc BE_BUF_PINNED; borrowed: outlives the
                              cache) */
} cache_cfg;

typedef struct cache_stats {
    uint64_t hits, misses, bytes_read, reads, retries;
    uint64_t prefetch_reads, prefetch_used, prefetch_wasted, prefetch_failed;
    double prefetch_accuracy; /* moving average of the hints' precision; -1 before the first */
    int prefetch_active;      /* hints are currently acted on */
    uint64_t io_wait_ns, verify_ns;
    uint64_t engine_hash_ns; /* the I/O engines' threads checksumming whole reads (io_req.hash_ns) */
    uint64_t io_busy_ns, io_depth_ns; /* the engine's device occupancy (io.h busy): time with a read in the
                                         device, and reads x time */
    uint64_t slots, slot_bytes, pinned;
} cache_stats;

typedef struct cache cache;

/* SL_OK with *out the cache (cache_free), or SL_ENOMEM with *out NULL and err filled; cfg->io is the cache's
 * from the call on, freed with it or on failure. */
sl_status cache_new(const cache_cfg *cfg, cache **out, sl_error *err);
void cache_free(cache *c);
/* The streaming expert source backed by this cache (ctx = c). */
tn_expert_src cache_source(cache *c);
void cache_get_stats(const cache *c, cache_stats *out);
/* Per-layer counters: hits, misses, bytes read of model layer l (0 for dense layers). */
void cache_layer_stats(const cache *c, int layer, uint64_t *hits, uint64_t *misses, uint64_t *bytes);
void cache_reset_stats(cache *c);
/* Routing counts per (slot, expert) since open: [n_moe_layers * E]. */
const uint64_t *cache_route_counts(const cache *c);
/* Loads and pins experts (keys = slot * E + expert), hottest first, while pinned slots stay within
 * max_fraction of all slots. SL_OK, or an error with err naming the key or the expert block's read. */
sl_status cache_pin(cache *c, const int *keys, int n_keys, double max_fraction, sl_error *err);
/* Reads every expert not held yet into a free slot, layer by layer in expert order, until the slots run out; nothing
 * is evicted or pinned (the experts are then as any loaded one: LRU/LFU from here). *loaded: how many were read. For a
 * benchmark that compares against an engine whose weights are in the page cache (sluice bench --warm). Not inside a
 * request. SL_OK, or an error with err naming the expert block whose read failed. */
sl_status cache_warm(cache *c, uint64_t *loaded, sl_error *err);

#endif
