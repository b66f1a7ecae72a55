/*
 * tier.h — a device tier of expert slots (VRAM on the CUDA backend) over a host expert source (the RAM
 * cache of stream/cache.h over the SSD), exposed to the forward pass as a streaming tn_expert_src whose
 * experts point into the device's memory (issue 13: VRAM over RAM over SSD).
 *
 * Policy (docs/CUDA.md "Tiers"):
 *  - promotion: every expert the forward pass uses is in the device tier while it is used. A device miss
 *    asks the host source for it (a RAM hit, or a read from the SSD into a pinned RAM slot) and copies the
 *    block host -> device once. On a backend with copy_async (CUDA) the copy goes on the copy stream, after
 *    the compute that last read the device slot and before the compute that reads it next, and the host
 *    slot is handed back once the copy has passed: the next expert's read and copy overlap this one's
 *    compute, with at most min(8, lower_slots / 2) host slots kept, and all of them handed back before the
 *    request ends. Elsewhere (the CPU) the copy is waited for and the host slot handed back at once;
 *  - demotion: a full device tier evicts its least recently used unreferenced expert (a min-heap of the
 *    unreferenced slots: no scan per miss); a miss of an ordered request of a pass (in_order 2: a prefill chunk's
 *    layer; the hybrid step on or off alike) the most recently used slot of another layer (a scan: tier.c
 *    miss_victim), so that the passes' cyclic scans of the layers keep most of the tier from one pass to the next;
 *    the RAM tier keeps its
 *    own LRU/LFU, so an expert dropped from VRAM is often still in RAM and costs one copy, not a read. The
 *    tiers are neither inclusive nor exclusive: each keeps what its own policy says;
 *  - prefetch hints go to the host source (reads from the SSD ahead of need), not to the device;
 *  - results: the device copy is the block byte for byte, bound by slc_bind_expert like a RAM slot, so any
 *    VRAM and RAM budget gives the logits of all-resident bitwise (tests/test_tier.c).
 *
 * The hybrid step (hybrid = 1; issue 25, docs/CUDA.md "The hybrid step"): in a decode-like (unordered) request
 * a miss is promoted only when it pays: a free slot, or its per-expert decayed use count (half-life TIER_HALF
 * tokens) says it was used before (the second use promotes) and beats the coldest unheld slot's, which it
 * evicts (the slots' order kept as log2(count) + token / TIER_HALF, which decay does not change); or, on a
 * device backend, when the cost model says the copy ends first: each request queues its misses on the host
 * (seconds a byte of the host's expert compute, measured per expert) or on the copy up (a block's waited copy,
 * measured at tier_new), each miss where its estimated finish is earlier, taking only a slot colder than itself
 * (uniform routing splits the misses; skewed routing keeps its hot experts). Any other miss is handed out where
 * it lies, in the host source's slot (tn_expert.host = 1, host_ok permitting), for the caller to compute on the host's threads (be_backend.ffn_host, bitwise the device's);
 * release() hands that slot back. Layer-major (ordered) requests promote every miss as above, and a pass's (in_order
 * 2) evicts as without the hybrid step (the counts order decode steps only): a prefill
 * chunk's experts stream through the device once each; room() says how many of them the caller may hold at once
 * (the hits, and a free or unheld slot per miss), which model/moe.c runs as one grouped FFN.
 * Single-threaded like the cache: one layer request at a time.
 */
#ifndef SL_TIER_H
#define SL_TIER_H

#include <stdint.h>

#include "backend/backend.h"
#include "family/config.h"
#include "format/container.h"
#include "util/tensor.h"

typedef struct tier_cfg {
    be_backend *be;        /* the device's backend: slots from alloc(BE_BUF_DEVICE), blocks in by copy(BE_H2D) */
    const slc_file *file;  /* layout (borrowed) */
    const fam_config *cfg;  /* borrowed */
    tn_expert_src lower;   /* the host source (borrowed; outlives the tier); its experts are in host memory */
    uint64_t budget;       /* device bytes for slots; at least one slot is always made */
    int lower_slots;       /* the host source's slots it may evict (unpinned), or 0: it has none (resident) */
    int hybrid;            /* 1: the hybrid step (above) */
    int host_threads;      /* hybrid: the host's threads, for the cost model's first guess of their rate (0: 4) */
    /* hybrid: may this expert (host memory) be computed on the host? NULL: any */
    int (*host_ok)(void *ctx, const tn_expert *ex);
    void *host_ctx;
} tier_cfg;

typedef struct tier_stats {
    uint64_t hits, misses, bytes_copied, slots, slot_bytes;
    uint64_t host; /* hybrid: experts handed out where they lie (not copied) */
    double host_gbs, pcie_gbs; /* hybrid, a device backend: the cost model's rates now (GB/s of blocks); else 0 */
} tier_stats;

typedef struct tier tier;

/* SL_OK with *out the tier (tier_free), or SL_ENOMEM with *out NULL and err naming the memory that ran out. */
sl_status tier_new(const tier_cfg *cfg, tier **out, sl_error *err);
void tier_free(tier *t);
tn_expert_src tier_source(tier *t);
void tier_get_stats(const tier *t, tier_stats *out);
void tier_reset_stats(tier *t); /* the counters, not slots and bytes */
/* Per MoE slot (cfg_moe_slot) since open: experts found in the device tier, copied in, computed on the host. */
void tier_layer_stats(const tier *t, int moe_slot, uint64_t *hits, uint64_t *copied, uint64_t *host);
/* Tests: 0 when the eviction structures agree with the slots (every unheld slot with a key in the heap, in heap
 * order; the free ones counted) and the victim is the one a scan in the policy's order finds; else -1, why. */
int tier_audit(const tier *t, char *why, size_t n);

#endif
