/*
 * stats.c — what a model did (sl_model_stats: the cache's and the tier's counters, evaluation time, memory; per
 * layer hits and routing counts) and its routing profile written for a later open to pin
 * (sl_model_write_profile; read by experts.c). See handles.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "engine/handles.h"
#include "util/err.h"

/* Bytes of the model file resident in the page cache (mincore over a read-only mapping). */
static uint64_t page_cache_bytes(const sl_model *m) {
    uint64_t size = m->f.h.file_size, page = (uint64_t)sysconf(_SC_PAGESIZE), n = (size + page - 1) / page, res = 0;
    if (!size) return 0;
    void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, m->f.fd, 0);
    if (map == MAP_FAILED) return 0;
    unsigned char *vec = malloc(n);
    if (vec && mincore(map, size, vec) == 0)
        for (uint64_t i = 0; i < n; i++) res += vec[i] & 1;
    free(vec);
    munmap(map, size);
    return res * page;
}

sl_status sl_model_stats(sl_model *m, sl_stats *o) {
    memset(o, 0, sizeof *o);
    pthread_mutex_lock(&m->mu);
    if (m->cache) {
        cache_stats cs;
        cache_get_stats(m->cache, &cs);
        o->hits = cs.hits;
        o->misses = cs.misses;
        o->bytes_read = cs.bytes_read;
        o->reads = cs.reads;
        o->retries = cs.retries;
        o->io_wait_s = (double)cs.io_wait_ns * 1e-9;
        o->verify_s = (double)cs.verify_ns * 1e-9;
        o->engine_verify_s = (double)cs.engine_hash_ns * 1e-9;
        o->io_busy_s = (double)cs.io_busy_ns * 1e-9;
        o->io_depth_s = (double)cs.io_depth_ns * 1e-9;
        o->cache_slots = cs.slots;
        o->cache_bytes = cs.slots * cs.slot_bytes;
        o->pinned = cs.pinned;
        o->prefetch_reads = cs.prefetch_reads;
        o->prefetch_used = cs.prefetch_used;
        o->prefetch_wasted = cs.prefetch_wasted;
        o->prefetch_accuracy = cs.prefetch_accuracy;
        o->prefetch_active = cs.prefetch_active;
    } else {
        o->resident = 1;
        o->cache_bytes = m->f.h.expert_len;
    }
    if (m->tier) {
        tier_stats ts;
        tier_get_stats(m->tier, &ts);
        o->tier_hits = ts.hits;
        o->tier_misses = ts.misses;
        o->tier_bytes_copied = ts.bytes_copied;
        o->tier_slots = ts.slots;
        o->tier_bytes = ts.slots * ts.slot_bytes;
        o->tier_host = ts.host;
        o->tier_host_gbs = ts.host_gbs;
        o->tier_pcie_gbs = ts.pcie_gbs;
    }
    o->eval_s = m->eval_s;
    o->tokens = m->tokens;
    pthread_mutex_unlock(&m->mu);
    o->backbone_bytes = m->f.h.backbone_len;
    o->expert_bytes = m->f.h.expert_len;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) o->peak_rss_bytes = (uint64_t)ru.ru_maxrss * 1024;
    o->page_cache_bytes = page_cache_bytes(m);
    o->io_engine = m->io_engine;
    o->io_mode = m->io_mode;
    return SL_OK;
}

void sl_model_reset_stats(sl_model *m) {
    pthread_mutex_lock(&m->mu);
    if (m->cache) cache_reset_stats(m->cache);
    if (m->tier) tier_reset_stats(m->tier);
    m->eval_s = 0;
    m->tokens = 0;
    pthread_mutex_unlock(&m->mu);
}

sl_status sl_model_layer_stats(const sl_model *m, int layer, uint64_t *hits, uint64_t *misses, uint64_t *bytes) {
    *hits = *misses = *bytes = 0;
    if (layer < 0 || layer >= m->cfg.n_layers) return SL_ERANGE;
    if (m->cache) cache_layer_stats(m->cache, layer, hits, misses, bytes);
    return SL_OK;
}

sl_status sl_model_layer_where(const sl_model *m, int layer, uint64_t *vram, uint64_t *copied, uint64_t *host) {
    *vram = *copied = *host = 0;
    if (layer < 0 || layer >= m->cfg.n_layers) return SL_ERANGE;
    if (m->tier) tier_layer_stats(m->tier, cfg_moe_slot(&m->cfg, layer), vram, copied, host);
    return SL_OK;
}

sl_status sl_model_expert_counts(sl_model *m, int layer, uint64_t *out, int n, int *n_experts) {
    if (n_experts) *n_experts = 0;
    if (layer < 0 || layer >= m->cfg.n_layers) return SL_ERANGE;
    int ms = cfg_moe_slot(&m->cfg, layer), E = m->cfg.n_experts;
    if (ms < 0) return SL_OK;
    if (n_experts) *n_experts = E;
    pthread_mutex_lock(&m->mu);
    const uint64_t *r = m->cache ? cache_route_counts(m->cache) : NULL;
    for (int e = 0; e < n && e < E; e++) out[e] = r ? r[(size_t)ms * E + e] : 0;
    pthread_mutex_unlock(&m->mu);
    return SL_OK;
}

sl_status sl_model_write_profile(const sl_model *m, const char *path, sl_error *err) {
    if (!m->cache) return err_set(err, SL_EINVAL, "routing profiles need a streaming model (not --resident)");
    const uint64_t *r = cache_route_counts(m->cache);
    size_t tl = strlen(path) + 32;
    char *tmp = malloc(tl);
    sl_status st = SL_OK;
    if (!tmp) return err_set(err, SL_ENOMEM, "out of memory");
    snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        st = err_set(err, err_from_errno(errno), "%s: %s", tmp, strerror(errno));
        goto done;
    }
    int E = m->cfg.n_experts;
    fprintf(f, "sluice-profile 1 layers %u experts %d\n", m->f.h.n_moe_layers, E);
    for (uint32_t s = 0; s < m->f.h.n_moe_layers; s++)
        for (int e = 0; e < E; e++)
            if (r[(size_t)s * E + e]) fprintf(f, "%d %d %llu\n", m->f.moe_layers[s], e, (unsigned long long)r[(size_t)s * E + e]);
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        unlink(tmp);
        st = err_set(err, SL_EIO, "%s: cannot write the profile", path);
    }
done:
    free(tmp);
    return st;
}

sl_status sl_model_write_routing(sl_model *m, const char *path, sl_error *err) {
    if (!m->rt) return err_set(err, SL_EINVAL, "the model does not record its routing (record_routing)");
    return rtrace_save(m->rt, path, err);
}

const char *sl_model_routing_trace(sl_model *m) { return m->rt ? rtrace_describe(m->rt) : ""; }
