/*
 * experts.c — a model's expert source (tn_expert_src, util/tensor.h): all resident (--resident, the exactness
 * reference: every block read and checked at open, on the device when the backend's memory is not the host's),
 * or streamed through the expert cache (stream/cache.c) from a second descriptor opened with O_DIRECT where the
 * filesystem allows it, with the hottest experts of a routing profile pinned. See handles.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/handles.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/fileio.h"
#include "util/xxh3.h"

/* ---- resident ---- */

/* The q8/q4 matrices of an expert: all of them have implied biases (q_biases_implied) when set is -1 (returns
 * whether they do); set 0 / 1 marks them so. */
static int expert_implied(tn_expert *ex, int set) {
    tn_mat *const ms[4] = {&ex->gate, &ex->up, &ex->down, &ex->gate_up};
    int all = 1;
    for (int i = 0; i < 4; i++) {
        if (ms[i]->dtype != DT_Q8 && ms[i]->dtype != DT_Q4) continue;
        if (set >= 0) ms[i]->bias_implied = set;
        else all = all && q_biases_implied(ms[i]);
    }
    return all;
}

static sl_status resident_get(void *ctx, int layer, int expert, tn_expert *out) {
    sl_model *m = ctx;
    int slot = cfg_moe_slot(&m->cfg, layer);
    if (slot < 0 || expert < 0 || expert >= m->cfg.n_experts) return SL_EINVAL;
    uint64_t off = slc_expert_offset(&m->f, slot, expert) - m->f.h.expert_off;
    if (m->share_off) { /* an expert rank's share (engine_open_share) */
        off = m->share_off[(size_t)slot * (size_t)m->cfg.n_experts + (size_t)expert];
        if (off == UINT64_MAX) return SL_EINVAL;
    }
    slc_bind_expert(&m->f, slot, m->experts + off, out);
    if (m->expert_implied[(size_t)slot * (size_t)m->cfg.n_experts + (size_t)expert]) expert_implied(out, 1);
    return SL_OK;
}

sl_status engine_open_resident(sl_model *m, const char *path, sl_error *err) {
    const size_t n_blocks = (size_t)m->f.h.n_moe_layers * (size_t)m->f.h.n_experts;
    m->experts = engine_huge_alloc(m->f.h.expert_len + 1);
    m->expert_implied = calloc(n_blocks ? n_blocks : 1, 1);
    if (!m->experts || !m->expert_implied)
        return err_set(err, SL_ENOMEM, "%s: out of memory loading %llu expert bytes", path,
                      (unsigned long long)m->f.h.expert_len);
    sl_status st = fio_pread_all(m->f.fd, m->experts, m->f.h.expert_len, m->f.h.expert_off, path, err);
    if (st) return st;
    for (uint32_t s = 0; s < m->f.h.n_moe_layers; s++)
        for (uint32_t e = 0; e < m->f.h.n_experts; e++) {
            uint64_t off = slc_expert_offset(&m->f, (int)s, (int)e);
            if (XXH3_64bits(m->experts + (off - m->f.h.expert_off), slc_block_bytes(&m->f, (int)s)) !=
                m->f.expert_hash[(size_t)s * m->f.h.n_experts + e])
                return err_set(err, SL_ECHECKSUM, "%s: expert block (layer %d, expert %u) fails its checksum (file "
                              "offset %llu)", path, m->f.moe_layers[s], e, (unsigned long long)off);
            tn_expert ex;
            slc_bind_expert(&m->f, (int)s, m->experts + (off - m->f.h.expert_off), &ex);
            m->expert_implied[(size_t)s * m->f.h.n_experts + e] = (uint8_t)expert_implied(&ex, -1);
        }
    if (!m->be->is_host) { /* all resident on the device: the section in one copy, bound there */
        uint8_t *dev = m->be->alloc(m->be, m->f.h.expert_len + 1, BE_BUF_DEVICE);
        if (!dev)
            return err_set(err, SL_ENOMEM, "%s: out of %s backend memory for %llu resident expert bytes", path,
                          m->be->name, (unsigned long long)m->f.h.expert_len);
        m->be->copy(m->be, dev, m->experts, m->f.h.expert_len, BE_H2D);
        free(m->experts);
        m->experts = dev;
        m->experts_dev = 1;
        if ((st = be_sync(m->be, err))) return st;
    }
    m->src.get = resident_get;
    m->src.ctx = m;
    m->io_engine = m->io_mode = "resident";
    return SL_OK;
}

/* ---- streamed ---- */

/* MemAvailable of /proc/meminfo in bytes (8 GiB when it cannot be read). */
static uint64_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb ? (uint64_t)kb * 1024 : (uint64_t)8 << 30;
}

/* Reads a routing profile (sluice profile, stats.c sl_model_write_profile) and pins its hottest experts. */
static sl_status load_pins(sl_model *m, const char *path, sl_error *err) {
    char *txt = NULL;
    int *keys = NULL;
    unsigned long long *cnt = NULL;
    size_t cap = 1024, n = 0;
    int nl = 0, ne = 0, off = 0;
    sl_status st = fio_read_file(path, &txt, NULL, err);
    if (st) goto done;
    if (sscanf(txt, "sluice-profile 1 layers %d experts %d%n", &nl, &ne, &off) != 2 ||
        nl != (int)m->f.h.n_moe_layers || ne != m->cfg.n_experts) {
        st = err_set(err, SL_EFORMAT, "%s: not a routing profile of this model (expected %u MoE layers x %d experts)",
                    path, m->f.h.n_moe_layers, m->cfg.n_experts);
        goto done;
    }
    keys = malloc(cap * sizeof *keys);
    cnt = malloc(cap * sizeof *cnt);
    const char *p = txt + off;
    int layer, e, used;
    unsigned long long c;
    while (keys && cnt && sscanf(p, "%d %d %llu%n", &layer, &e, &c, &used) == 3) {
        p += used;
        int slot = cfg_moe_slot(&m->cfg, layer);
        if (slot < 0 || e < 0 || e >= ne) continue;
        if (n == cap) {
            cap *= 2;
            int *k2 = realloc(keys, cap * sizeof *keys);
            unsigned long long *c2 = realloc(cnt, cap * sizeof *cnt);
            if (k2) keys = k2;
            if (c2) cnt = c2;
            if (!k2 || !c2) break;
        }
        keys[n] = slot * ne + e;
        cnt[n++] = c;
    }
    if (!keys || !cnt) {
        st = err_set(err, SL_ENOMEM, "out of memory");
        goto done;
    }
    /* hottest first (insertion sort is fine for profile sizes; stable) */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && cnt[j] > cnt[j - 1]; j--) {
            unsigned long long tc = cnt[j]; cnt[j] = cnt[j - 1]; cnt[j - 1] = tc;
            int tk = keys[j]; keys[j] = keys[j - 1]; keys[j - 1] = tk;
        }
    if ((st = cache_pin(m->cache, keys, (int)n, 0.5, err))) err_prefix(err, "%s: pinning", path);
done:
    free(txt);
    free(keys);
    free(cnt);
    return st;
}

/* The descriptor the cache reads from (m->stream_fd, m->io_mode): O_DIRECT when asked, or by default when the
 * experts pass half the available memory, and the filesystem serves it; else buffered, with *dontneed set
 * when O_DIRECT was refused (the cache then drops what it read from the page cache). */
static sl_status open_stream_fd(sl_model *m, const char *path, const sl_model_params *p, uint64_t avail,
                                int *dontneed, sl_error *err) {
    int direct = p->io_mode == SL_IO_DIRECT || (p->io_mode == SL_IO_AUTO && m->f.h.expert_len > avail / 2);
    *dontneed = 0;
    m->stream_fd = -1;
    if (direct) {
        m->stream_fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
        if (m->stream_fd >= 0 && m->f.h.n_moe_layers > 0) { /* some filesystems accept the flag, refuse the read */
            void *probe = aligned_alloc(SLC_ALIGN, m->f.h.expert_stride);
            ssize_t r = probe ? pread(m->stream_fd, probe, m->f.h.expert_stride, (off_t)m->f.h.expert_off) : -1;
            free(probe);
            if (r != (ssize_t)m->f.h.expert_stride) {
                close(m->stream_fd);
                m->stream_fd = -1;
            }
        }
        if (m->stream_fd < 0) *dontneed = 1; /* O_DIRECT refused: buffered reads, dropped after use */
    }
    if (m->stream_fd < 0) m->stream_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (m->stream_fd < 0)
        return err_set(err, err_from_errno(errno), "%s: cannot open: %s", path, strerror(errno));
    m->io_mode = direct && !*dontneed ? "direct" : *dontneed ? "buffered+dontneed" : "buffered";
    return SL_OK;
}

/* The I/O engine over m->stream_fd into *out (m->io_engine names it): io_uring unless pread is asked, pread
 * where io_uring is missing and not required; big blocks read in pieces; wrapped by the fault engine when
 * fault is not NULL. *out is the caller's (io_destroy). */
static sl_status open_io(sl_model *m, const sl_model_params *p, const io_fault_cfg *fault, io_engine **out,
                         sl_error *err) {
    int depth = p->io_depth > 0 ? p->io_depth : 64;
    io_engine *io = NULL;
    *out = NULL;
    sl_status st = SL_EUNSUPPORTED;
    if (p->io_engine != SL_ENGINE_PREAD) /* auto: a refused ring falls back to pread without a word */
        st = io_uring_engine_new(m->stream_fd, depth, &io, p->io_engine == SL_ENGINE_URING ? err : NULL);
    if (st && p->io_engine == SL_ENGINE_URING) return st;
    if (st && (st = io_pread_engine_new(m->stream_fd, depth < 16 ? depth : 16, &io, err))) return st;
    /* each expert block of 1 MiB or more goes to the disk as 4 pieces in linked chains, half of a layer's
     * pieces in flight at once: its blocks land in two waves, the first half's experts computed while the
     * second half is read (src/stream/io_uring.c, docs/STREAMING.md). Was 8 pieces in 16 chains: 2-2.5
     * blocks' bytes in flight, too few for this disk when it is busy (docs/STREAMING.md).
     * Smaller reads are bound by latency, not bandwidth, and stay whole (in pieces the demo model's 56 KiB
     * blocks decoded 1.5-3x slower) */
    const uint64_t piece = (m->f.h.expert_stride / 4 + 4095) / 4096 * 4096;
    if (m->f.h.expert_stride >= 1024 * 1024) {
        io->chunk = (uint32_t)piece;
        io->rounds = 2;
    }
    m->io_engine = io->ops->name;
    if (fault && !(io = io_fault_engine_new(io, fault))) /* which destroys io when it fails */
        return err_set(err, SL_ENOMEM, "out of memory");
    *out = io;
    return SL_OK;
}

sl_status engine_open_stream(sl_model *m, const char *path, const sl_model_params *p, const io_fault_cfg *fault,
                             sl_error *err) {
    uint64_t avail = mem_available();
    int dontneed = 0;
    io_engine *io = NULL;
    sl_status st = open_stream_fd(m, path, p, avail, &dontneed, err);
    if (st || (st = open_io(m, p, fault, &io, err))) goto done;
    uint64_t budget = p->cache_bytes;
    if (budget > m->f.h.expert_len) budget = m->f.h.expert_len; /* more than every expert buys nothing */
    if (budget > avail) { /* the arena is touched at open: past available memory that is an OOM kill */
        st = err_set(err, SL_ENOMEM, "expert cache of %.1f GiB requested but only %.1f GiB of memory is available",
                    (double)budget / 1073741824.0, (double)avail / 1073741824.0);
        goto done;
    }
    if (!budget) {
        budget = avail / 2 > m->f.h.backbone_len ? avail / 2 - m->f.h.backbone_len : m->f.h.expert_stride;
        if (budget > m->f.h.expert_len) budget = m->f.h.expert_len;
    }
    cache_cfg cc = {&m->f, &m->cfg, io, budget, p->policy == SL_POLICY_LFU ? CACHE_LFU : CACHE_LRU, !p->no_verify,
                    dontneed, p->prefetch < 0 ? 0 : p->prefetch > 0 ? 2 : 1, m->be};
    st = cache_new(&cc, &m->cache, err);
    io = NULL; /* the cache's now, or destroyed by cache_new when it failed */
    if (st) goto done;
    m->src = cache_source(m->cache);
    if (p->pin_profile) st = load_pins(m, p->pin_profile, err);
done:
    io_destroy(io);
    return st;
}

sl_status sl_model_warm(sl_model *m, uint64_t *n_read, sl_error *err) {
    uint64_t n = 0;
    sl_status st = SL_OK;
    pthread_mutex_lock(&m->mu);
    if (m->cache) st = cache_warm(m->cache, &n, err);
    if (!st && m->cache && m->tier) {
        /* every expert in RAM for good (a cache of a slot each never evicts): a decode layer's hint of the next layer's
         * experts (model/moe.c hint_next: the next router on the device and a round trip to read its choice) could
         * start no read, so the device tier's source stops taking hints (issue 25: ~25 us a layer on an H100) */
        cache_stats cs;
        cache_get_stats(m->cache, &cs);
        if (cs.slots >= (uint64_t)m->f.h.n_moe_layers * m->f.h.n_experts) m->src.prefetch = NULL;
    }
    pthread_mutex_unlock(&m->mu);
    if (n_read) *n_read = n;
    return st;
}

/* ---- an expert rank's share ---- */

/* The blocks of (slot, e) with own[slot * E + e] set, read and checked into one buffer (m->experts), each
 * expert's offset there in m->share_off (UINT64_MAX: not held); runs of held experts of a slot (contiguous in
 * the file) are read with one call each. m->share_experts / share_bytes say what is held. */
sl_status engine_open_share(sl_model *m, const char *path, const uint8_t *own, sl_error *err) {
    const size_t E = m->f.h.n_experts, n_blocks = (size_t)m->f.h.n_moe_layers * E;
    uint64_t total = 0;
    m->share_off = malloc((n_blocks ? n_blocks : 1) * sizeof *m->share_off);
    m->expert_implied = calloc(n_blocks ? n_blocks : 1, 1);
    if (!m->share_off || !m->expert_implied) return err_set(err, SL_ENOMEM, "out of memory");
    for (size_t b = 0; b < n_blocks; b++) {
        m->share_off[b] = UINT64_MAX;
        if (own[b]) total += slc_slot_stride(&m->f, (int)(b / E));
    }
    if (!(m->experts = engine_huge_alloc(total + 1)))
        return err_set(err, SL_ENOMEM, "%s: out of memory loading a share of %llu expert bytes", path,
                       (unsigned long long)total);
    uint64_t at = 0;
    for (uint32_t s = 0; s < m->f.h.n_moe_layers; s++) {
        const uint64_t stride = slc_slot_stride(&m->f, (int)s);
        for (size_t e = 0; e < E;) {
            size_t run = 0;
            while (e + run < E && own[s * E + e + run]) run++;
            if (!run) { e++; continue; }
            sl_status st = fio_pread_all(m->f.fd, m->experts + at, run * stride, slc_expert_offset(&m->f, (int)s, (int)e),
                                         path, err);
            if (st) return st;
            for (size_t i = 0; i < run; i++, at += stride) {
                const size_t b = s * E + e + i;
                if (XXH3_64bits(m->experts + at, slc_block_bytes(&m->f, (int)s)) != m->f.expert_hash[b])
                    return err_set(err, SL_ECHECKSUM, "%s: expert block (layer %d, expert %zu) fails its checksum", path,
                                   m->f.moe_layers[s], e + i);
                tn_expert ex;
                slc_bind_expert(&m->f, (int)s, m->experts + at, &ex);
                m->expert_implied[b] = (uint8_t)expert_implied(&ex, -1);
                m->share_off[b] = at;
                m->share_experts++;
            }
            e += run;
        }
    }
    m->share_bytes = total;
    m->src.get = resident_get;
    m->src.ctx = m;
    m->io_engine = m->io_mode = "resident";
    return SL_OK;
}
