/*
 * model.c — the public model and session API: opens a container, loads the backbone into RAM, binds
 * it to an sl_weights (matrices stay in their stored dtype, vectors become f32), loads every expert
 * block (resident mode), checks every checksum on the way, and runs sessions through fwd_eval(): a session is a sequence's state (fwd_seq), the model holds the
 * one workspace (fwd_ws) evaluations take turns in.
 *
 * Experts are either all resident (--resident, the exactness reference) or streamed through the
 * expert cache (stream/cache.c) from a second descriptor opened with O_DIRECT where the filesystem
 * allows it. Evaluations are serialised per model (one mutex), since the cache and the thread pool
 * serve one request at a time.
 *
 * Ownership: the model owns the backbone buffer, the f32 vectors, the expert buffer or cache;
 * sessions borrow the model and must be freed before it.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "stream/cache.h"
#include "stream/tier.h"

#include "family/tensors.h"
#include "format/container.h"
#include "model/fwd_internal.h"
#include "model/model.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/fileio.h"
#include "util/xxh3.h"

struct sl_model {
    slc_file f;
    sl_config cfg;
    sl_weights w;
    uint8_t *backbone;    /* the backbone section, 4096-aligned */
    float **vecs;         /* owned f32 vectors (backend memory: vec_bytes each when the backend is not the host) */
    size_t *vec_bytes;
    int n_vecs;
    uint8_t *backbone_dev; /* the backbone section in the backend's memory (!be->is_host), or NULL */
    uint8_t *experts;     /* the whole expert section (resident; in the backend's memory when experts_dev) */
    int experts_dev;
    uint8_t *expert_implied; /* [n_moe_layers][n_experts] (resident): 1 when every q8/q4 part's biases are implied */
    cache *cache;         /* streaming mode */
    tier *tier;           /* the device tier over src (vram_bytes > 0), or NULL */
    int stream_fd;        /* descriptor the cache reads from (-1 when resident) */
    const char *io_engine, *io_mode;
    sl_expert_src src;
    sl_pool *pool;
    sl_backend *be;       /* what computes (src/backend/backend.h); the workspace, states and cache slots are its */
    fwd_ws *ws;           /* the evaluation workspace; mu makes evaluations take turns in it */
    pthread_mutex_t mu;
    double eval_s;
    uint64_t tokens;
    char err[768];
};

struct sl_session {
    sl_model *m;
    fwd_seq *sq;
    int n_ctx;
    char err[768];
};

sl_model_params sl_model_params_default(void) {
    sl_model_params p;
    memset(&p, 0, sizeof p);
    return p;
}

/* n bytes (freed with free()) on 2 MiB boundaries, asked to be backed by 2 MiB pages (transparent huge pages,
 * madvise mode): the resident weights are streamed whole every token, and with 4 KiB pages that is a TLB miss
 * every 4 KiB of every row stream. A hint only: without huge pages the memory works the same. NULL: no memory. */
static void *huge_alloc(uint64_t n) {
    const uint64_t huge = (uint64_t)2 << 20, len = slc_round_up(n, huge);
    void *p = aligned_alloc((size_t)huge, (size_t)len);
    if (p) (void)madvise(p, (size_t)len, MADV_HUGEPAGE);
    return p;
}

/* ---- binding ---- */

/* Binds one backbone tensor of the family table (family/tensors.h) to its sl_weights field. */
static sl_status bind_one(sl_model *m, const arch_tensor *at, sl_error *err) {
    const slc_tensor *t = slc_find(&m->f, at->name);
    if (!t) return sl_err(err, SL_EFORMAT, "%s: tensor '%s' is missing from the container", m->f.path, at->name);
    if (t->ndim != at->ndim || t->shape[0] != at->shape[0] || (at->ndim == 2 && t->shape[1] != at->shape[1]))
        return sl_err(err, SL_EFORMAT, "%s: tensor '%s' has shape [%lld,%lld] but the config implies [%lld,%lld]",
                      m->f.path, at->name, (long long)t->shape[0], (long long)t->shape[1], (long long)at->shape[0],
                      (long long)at->shape[1]);
    const uint8_t *data = m->backbone + (t->off - m->f.h.backbone_off);
    if (at->layer >= m->cfg.n_layers) return sl_err(err, SL_EFORMAT, "%s: unexpected tensor '%s'", m->f.path, at->name);
    void *dst = at->layer >= 0 ? (char *)&m->w.layers[at->layer] + at->field : (char *)&m->w + at->field;
    int vec = !at->matrix;
    if (vec && q_is_quant(t->dtype))
        return sl_err(err, SL_EFORMAT, "%s: tensor '%s' is a vector but has quantized dtype %s", m->f.path, at->name,
                      dt_name(t->dtype));
    if (vec) {
        size_t n = (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
        float *v = malloc(n * sizeof(float));
        if (!v) return sl_err(err, SL_ENOMEM, "out of memory");
        dt_to_f32(t->dtype, data, v, n);
        if (!m->be->is_host) { /* the vector lives in the backend's memory (the CUDA backend: VRAM) */
            float *dv = m->be->alloc(m->be, n * sizeof(float), BE_BUF_DEVICE);
            if (dv) m->be->copy(m->be, dv, v, n * sizeof(float), BE_H2D);
            free(v);
            if (!dv) return sl_err(err, SL_ENOMEM, "out of %s backend memory for tensor '%s'", m->be->name, at->name);
            v = dv;
            m->vec_bytes[m->n_vecs] = n * sizeof(float);
        }
        m->vecs[m->n_vecs++] = v;
        *(float **)dst = v;
    } else {
        q_mat_bind(dst, data, t->dtype, (int)t->shape[0], (int)t->shape[1], t->group, t->sdtype, t->seed);
        ((sl_mat *)dst)->bias_implied = q_biases_implied(dst);
    }
    return SL_OK;
}

/* The q8/q4 matrices of an expert: all of them have implied biases (q_biases_implied) when set is -1 (returns
 * whether they do); set 0 / 1 marks them so. */
static int expert_implied(sl_expert *ex, int set) {
    sl_mat *const ms[4] = {&ex->gate, &ex->up, &ex->down, &ex->gate_up};
    int all = 1;
    for (int i = 0; i < 4; i++) {
        if (ms[i]->dtype != DT_Q8 && ms[i]->dtype != DT_Q4) continue;
        if (set >= 0) ms[i]->bias_implied = set;
        else all = all && q_biases_implied(ms[i]);
    }
    return all;
}

/* p moved from the host range [from, from + len) to the same offset of to. */
static void rebase(const void **p, const uint8_t *from, uint64_t len, uint8_t *to) {
    const uint8_t *q = *p;
    if (q && q >= from && q < from + len) *p = to + (q - from);
}

/* A backend whose memory is not the host's (CUDA): the backbone section goes there in one copy and every
 * matrix of the family table is pointed at it; the host copy is freed. */
static sl_status upload_backbone(sl_model *m, const arch_tensor *at, int n, sl_error *err) {
    sl_backend *be = m->be;
    const uint64_t len = m->f.h.backbone_len;
    m->backbone_dev = be->alloc(be, len + 1, BE_BUF_DEVICE);
    if (!m->backbone_dev)
        return sl_err(err, SL_ENOMEM, "%s: out of %s backend memory for %llu backbone bytes", m->f.path, be->name,
                      (unsigned long long)len);
    be->copy(be, m->backbone_dev, m->backbone, len, BE_H2D);
    if (be->sync(be)) return sl_err(err, SL_EIO, "%s backend: %s", be->name, be->errmsg(be));
    for (int i = 0; i < n; i++) {
        if (!at[i].matrix || at[i].layer >= m->cfg.n_layers) continue;
        sl_mat *mm = (sl_mat *)(at[i].layer >= 0 ? (char *)&m->w.layers[at[i].layer] + at[i].field
                                                 : (char *)&m->w + at[i].field);
        rebase(&mm->data, m->backbone, len, m->backbone_dev);
        rebase(&mm->scales, m->backbone, len, m->backbone_dev);
        rebase(&mm->biases, m->backbone, len, m->backbone_dev);
    }
    free(m->backbone);
    m->backbone = NULL;
    return SL_OK;
}

static int resident_get(void *ctx, int layer, int expert, sl_expert *out) {
    sl_model *m = ctx;
    int slot = cfg_moe_slot(&m->cfg, layer);
    if (slot < 0 || expert < 0 || expert >= m->cfg.n_experts) return SL_EINVAL;
    slc_bind_expert(&m->f, m->experts + (slc_expert_offset(&m->f, slot, expert) - m->f.h.expert_off), out);
    if (m->expert_implied[(size_t)slot * (size_t)m->cfg.n_experts + (size_t)expert]) expert_implied(out, 1);
    return SL_OK;
}

static uint64_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb ? (uint64_t)kb * 1024 : (uint64_t)8 << 30;
}

/* Reads a routing profile (sluice profile) and pins its hottest experts. */
static sl_status load_pins(sl_model *m, const char *path, sl_error *err) {
    char *txt = NULL;
    sl_status st = fio_read_file(path, &txt, NULL, err);
    if (st) return st;
    int nl = 0, ne = 0, off = 0;
    if (sscanf(txt, "sluice-profile 1 layers %d experts %d%n", &nl, &ne, &off) != 2 ||
        nl != (int)m->f.h.n_moe_layers || ne != m->cfg.n_experts) {
        free(txt);
        return sl_err(err, SL_EFORMAT, "%s: not a routing profile of this model (expected %u MoE layers x %d experts)",
                      path, m->f.h.n_moe_layers, m->cfg.n_experts);
    }
    size_t cap = 1024, n = 0;
    int *keys = malloc(cap * sizeof *keys);
    unsigned long long *cnt = malloc(cap * sizeof *cnt);
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
    free(txt);
    if (!keys || !cnt) {
        free(keys);
        free(cnt);
        return sl_err(err, SL_ENOMEM, "out of memory");
    }
    /* hottest first (insertion sort is fine for profile sizes; stable) */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && cnt[j] > cnt[j - 1]; j--) {
            unsigned long long tc = cnt[j]; cnt[j] = cnt[j - 1]; cnt[j - 1] = tc;
            int tk = keys[j]; keys[j] = keys[j - 1]; keys[j - 1] = tk;
        }
    int rc = cache_pin(m->cache, keys, (int)n, 0.5);
    free(keys);
    free(cnt);
    return rc ? sl_err(err, (sl_status)rc, "%s: pinning: %s", path, cache_errmsg(m->cache)) : SL_OK;
}

static sl_status open_stream(sl_model *m, const char *path, const sl_model_params *p, const io_fault_cfg *fault,
                             sl_error *err) {
    uint64_t avail = mem_available();
    int direct = p->io_mode == SL_IO_DIRECT || (p->io_mode == SL_IO_AUTO && m->f.h.expert_len > avail / 2);
    int dontneed = 0;
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
        if (m->stream_fd < 0) dontneed = 1; /* O_DIRECT refused: buffered reads, dropped after use */
    }
    if (m->stream_fd < 0) m->stream_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (m->stream_fd < 0)
        return sl_err(err, sl_status_from_errno(errno), "%s: cannot open: %s", path, strerror(errno));
    m->io_mode = direct && !dontneed ? "direct" : dontneed ? "buffered+dontneed" : "buffered";
    int depth = p->io_depth > 0 ? p->io_depth : 64;
    char msg[256] = "";
    io_engine *io = NULL;
    if (p->io_engine != SL_ENGINE_PREAD) io = io_uring_engine_new(m->stream_fd, depth, msg, sizeof msg);
    if (!io && p->io_engine == SL_ENGINE_URING) return sl_err(err, SL_EUNSUPPORTED, "%s", msg);
    if (!io) io = io_pread_engine_new(m->stream_fd, depth < 16 ? depth : 16, msg, sizeof msg);
    if (!io) return sl_err(err, SL_ENOMEM, "%s", msg);
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
    if (fault) {
        io = io_fault_engine_new(io, fault);
        if (!io) return sl_err(err, SL_ENOMEM, "out of memory");
    }
    uint64_t budget = p->cache_bytes;
    if (budget > m->f.h.expert_len) budget = m->f.h.expert_len; /* more than every expert buys nothing */
    if (budget > avail) { /* the arena is touched at open: past available memory that is an OOM kill */
        io_destroy(io);
        return sl_err(err, SL_ENOMEM, "expert cache of %.1f GiB requested but only %.1f GiB of memory is available",
                      (double)budget / 1073741824.0, (double)avail / 1073741824.0);
    }
    if (!budget) {
        budget = avail / 2 > m->f.h.backbone_len ? avail / 2 - m->f.h.backbone_len : m->f.h.expert_stride;
        if (budget > m->f.h.expert_len) budget = m->f.h.expert_len;
    }
    cache_cfg cc = {&m->f, &m->cfg, io, budget, p->policy == SL_POLICY_LFU ? CACHE_LFU : CACHE_LRU, !p->no_verify,
                    dontneed, p->prefetch < 0 ? 0 : p->prefetch > 0 ? 2 : 1, m->be};
    m->cache = cache_new(&cc, msg, sizeof msg);
    if (!m->cache) return sl_err(err, SL_ENOMEM, "%s", msg);
    m->src = cache_source(m->cache);
    if (p->pin_profile) return load_pins(m, p->pin_profile, err);
    return SL_OK;
}

static sl_status open_resident(sl_model *m, const char *path, sl_error *err) {
    const size_t n_blocks = (size_t)m->f.h.n_moe_layers * (size_t)m->f.h.n_experts;
    m->experts = huge_alloc(m->f.h.expert_len + 1);
    m->expert_implied = calloc(n_blocks ? n_blocks : 1, 1);
    if (!m->experts || !m->expert_implied)
        return sl_err(err, SL_ENOMEM, "%s: out of memory loading %llu expert bytes", path,
                      (unsigned long long)m->f.h.expert_len);
    sl_status st = fio_pread_all(m->f.fd, m->experts, m->f.h.expert_len, m->f.h.expert_off, path, err);
    if (st) return st;
    for (uint32_t s = 0; s < m->f.h.n_moe_layers; s++)
        for (uint32_t e = 0; e < m->f.h.n_experts; e++) {
            uint64_t off = slc_expert_offset(&m->f, (int)s, (int)e);
            if (XXH3_64bits(m->experts + (off - m->f.h.expert_off), m->f.block_bytes) !=
                m->f.expert_hash[(size_t)s * m->f.h.n_experts + e])
                return sl_err(err, SL_ECHECKSUM, "%s: expert block (layer %d, expert %u) fails its checksum (file "
                              "offset %llu)", path, m->f.moe_layers[s], e, (unsigned long long)off);
            sl_expert ex;
            slc_bind_expert(&m->f, m->experts + (off - m->f.h.expert_off), &ex);
            m->expert_implied[(size_t)s * m->f.h.n_experts + e] = (uint8_t)expert_implied(&ex, -1);
        }
    if (!m->be->is_host) { /* all resident on the device: the section in one copy, bound there */
        uint8_t *dev = m->be->alloc(m->be, m->f.h.expert_len + 1, BE_BUF_DEVICE);
        if (!dev)
            return sl_err(err, SL_ENOMEM, "%s: out of %s backend memory for %llu resident expert bytes", path,
                          m->be->name, (unsigned long long)m->f.h.expert_len);
        m->be->copy(m->be, dev, m->experts, m->f.h.expert_len, BE_H2D);
        free(m->experts);
        m->experts = dev;
        m->experts_dev = 1;
        if (m->be->sync(m->be)) return sl_err(err, SL_EIO, "%s backend: %s", m->be->name, m->be->errmsg(m->be));
    }
    m->src.get = resident_get;
    m->src.ctx = m;
    m->io_engine = m->io_mode = "resident";
    return SL_OK;
}

sl_status model_open_ex(const char *path, const sl_model_params *params, const io_fault_cfg *fault, sl_model **out,
                        sl_error *err) {
    *out = NULL;
    sl_model_params defp = sl_model_params_default();
    const sl_model_params *p = params ? params : &defp;
    sl_model *m = calloc(1, sizeof *m);
    arch_tensor *at = NULL;
    if (!m) return sl_err(err, SL_ENOMEM, "out of memory");
    m->stream_fd = -1;
    pthread_mutex_init(&m->mu, NULL);
    sl_status st = slc_open(path, &m->f, err);
    if (st) {
        pthread_mutex_destroy(&m->mu);
        free(m);
        return st;
    }
    m->cfg = m->f.cfg;
    if (p->routing != SL_ROUTING_MODEL && p->routing != SL_ROUTING_UNIFORM) {
        st = sl_err(err, SL_EINVAL, "routing %d: neither SL_ROUTING_MODEL nor SL_ROUTING_UNIFORM", (int)p->routing);
        goto fail;
    }
    m->cfg.uniform_routing = p->routing == SL_ROUTING_UNIFORM;
    m->cfg.routing_seed = p->routing_seed;
    m->pool = sl_pool_new(p->n_threads);
    if (!m->pool) { st = sl_err(err, SL_ENOMEM, "cannot start the thread pool"); goto fail; }
    { /* the backend first: --gpu without a usable one fails before anything is read */
        char msg[256] = "";
        int rc = be_open(p->backend, m->pool, &m->be, msg, sizeof msg);
        if (rc) { st = sl_err(err, (sl_status)rc, "%s", msg); goto fail; }
    }
    int n = arch_backbone_tensors(&m->cfg, &at);
    m->vecs = calloc(n > 0 ? (size_t)n : 1, sizeof *m->vecs);
    m->vec_bytes = calloc(n > 0 ? (size_t)n : 1, sizeof *m->vec_bytes);
    m->backbone = huge_alloc(m->f.h.backbone_len + 1);
    if (n < 0 || !m->vecs || !m->vec_bytes || !m->backbone) {
        st = sl_err(err, SL_ENOMEM, "%s: out of memory loading %llu backbone bytes", path,
                    (unsigned long long)m->f.h.backbone_len);
        goto fail;
    }
    if ((st = fio_pread_all(m->f.fd, m->backbone, m->f.h.backbone_len, m->f.h.backbone_off, path, err))) goto fail;
    /* the backbone now lives in our buffer: do not keep a second copy in the page cache */
    posix_fadvise(m->f.fd, (off_t)m->f.h.backbone_off, (off_t)m->f.h.backbone_len, POSIX_FADV_DONTNEED);
    for (int i = 0; i < m->f.n_tensors; i++) {
        const slc_tensor *t = &m->f.t[i];
        if (XXH3_64bits(m->backbone + (t->off - m->f.h.backbone_off), t->size) != t->hash) {
            st = sl_err(err, SL_ECHECKSUM, "%s: backbone tensor '%s' fails its checksum (file offset %llu)", path,
                        t->name, (unsigned long long)t->off);
            goto fail;
        }
    }
    for (int i = 0; i < n; i++)
        if ((st = bind_one(m, &at[i], err))) goto fail;
    if (!m->be->is_host && (st = upload_backbone(m, at, n, err))) goto fail;
    if (m->cfg.tie_embeddings) m->w.lm_head = m->w.embed;
    st = p->resident ? open_resident(m, path, err) : open_stream(m, path, p, fault, err);
    if (st) goto fail;
    if (p->vram_bytes > 0) { /* the device tier over the RAM cache (or the resident experts) */
        char msg[256] = "";
        tier_cfg tc = {m->be, &m->f, &m->cfg, m->src, p->vram_bytes, 0};
        if (m->cache) { /* the RAM slots the tier may keep while their copies run (tier.h) */
            cache_stats cs;
            cache_get_stats(m->cache, &cs);
            tc.lower_slots = cs.slots > cs.pinned ? (int)(cs.slots - cs.pinned) : 1;
        }
        m->tier = tier_new(&tc, msg, sizeof msg);
        if (!m->tier) { st = sl_err(err, SL_ENOMEM, "%s", msg); goto fail; }
        m->src = tier_source(m->tier);
    }
    m->ws = fwd_ws_new(&m->cfg, m->cfg.max_pos, m->be);
    if (!m->ws) { st = sl_err(err, SL_ENOMEM, "%s: out of memory for the evaluation workspace", path); goto fail; }
    fwd_ws_set_int8(m->ws, !p->exact);
    { /* a backend without an op these layers call refuses the model now, not at its first evaluation */
        char msg[256] = "";
        if (fwd_check_ops(m->ws, &m->cfg, msg, sizeof msg)) { st = sl_err(err, SL_EUNSUPPORTED, "%s", msg); goto fail; }
    }
    free(at);
    *out = m;
    return SL_OK;
fail:
    free(at);
    sl_model_close(m);
    return st;
}

sl_status sl_model_open(const char *path, const sl_model_params *params, sl_model **out, sl_error *err) {
    return model_open_ex(path, params, NULL, out, err);
}

void sl_model_close(sl_model *m) {
    if (!m) return;
    fwd_ws_free(m->ws);
    for (int i = 0; i < m->n_vecs; i++) {
        if (m->vec_bytes && m->vec_bytes[i]) m->be->free(m->be, m->vecs[i], m->vec_bytes[i], BE_BUF_DEVICE);
        else free(m->vecs[i]);
    }
    free(m->vecs);
    free(m->vec_bytes);
    free(m->backbone);
    if (m->backbone_dev) m->be->free(m->be, m->backbone_dev, m->f.h.backbone_len + 1, BE_BUF_DEVICE);
    if (m->experts_dev) m->be->free(m->be, m->experts, m->f.h.expert_len + 1, BE_BUF_DEVICE);
    else free(m->experts);
    free(m->expert_implied);
    tier_free(m->tier); /* before the cache it reads from and the backend that owns its slots */
    cache_free(m->cache);
    be_close(m->be);
    sl_pool_free(m->pool);
    if (m->stream_fd >= 0) close(m->stream_fd);
    slc_close(&m->f);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

const char *sl_model_errmsg(const sl_model *m) { return m ? m->err : ""; }
int sl_model_n_vocab(const sl_model *m) { return m->cfg.vocab; }
int sl_model_n_ctx(const sl_model *m) { return m->cfg.max_pos; }

/* ---- sessions ---- */

sl_status sl_session_new(sl_model *m, int n_ctx, sl_session **out) {
    *out = NULL;
    if (n_ctx <= 0 || n_ctx > m->cfg.max_pos) n_ctx = m->cfg.max_pos;
    sl_session *s = calloc(1, sizeof *s);
    if (!s) return SL_ENOMEM;
    s->m = m;
    s->n_ctx = n_ctx;
    s->sq = fwd_seq_new(&m->cfg, n_ctx, m->be);
    if (!s->sq) {
        free(s);
        snprintf(m->err, sizeof m->err, "out of memory for a session of %d positions", n_ctx);
        return SL_ENOMEM;
    }
    *out = s;
    return SL_OK;
}

void sl_session_free(sl_session *s) {
    if (!s) return;
    fwd_seq_free(s->sq);
    free(s);
}

void sl_session_reset(sl_session *s) { fwd_seq_reset(s->sq); }
int sl_session_n_past(const sl_session *s) { return fwd_seq_n_past(s->sq); }
const char *sl_session_errmsg(const sl_session *s) { return s ? s->err : ""; }
void model_session_set_wide(sl_session *s, int on) { fwd_seq_set_wide(s->sq, on); }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

sl_status sl_session_eval(sl_session *s, const int32_t *tokens, int n_tokens, float *logits, int all_logits) {
    s->err[0] = 0;
    sl_model *m = s->m;
    pthread_mutex_lock(&m->mu);
    double t0 = now_s();
    int r = fwd_eval(m->ws, s->sq, &m->cfg, &m->w, &m->src, tokens, n_tokens, logits, all_logits, s->err,
                     sizeof s->err);
    m->eval_s += now_s() - t0;
    if (!r) m->tokens += (uint64_t)n_tokens;
    pthread_mutex_unlock(&m->mu);
    return (sl_status)r;
}

sl_status sl_batch_eval(sl_model *m, const sl_batch_item *items, int n_items) {
    enum { STACK = 64 };
    fwd_item stack[STACK], *fi = n_items > STACK ? malloc((size_t)n_items * sizeof *fi) : stack;
    if (n_items < 1 || !items || !fi) {
        if (fi != stack) free(fi);
        snprintf(m->err, sizeof m->err, n_items < 1 || !items ? "sl_batch_eval: no items" : "out of memory");
        return n_items < 1 || !items ? SL_EINVAL : SL_ENOMEM;
    }
    uint64_t n_tok = 0;
    for (int i = 0; i < n_items; i++) {
        const sl_batch_item *b = &items[i];
        if (!b->session || b->session->m != m) {
            snprintf(m->err, sizeof m->err, "batch item %d: %s", i,
                     b->session ? "the session belongs to another model" : "NULL session");
            if (fi != stack) free(fi);
            return SL_EINVAL;
        }
        fi[i] = (fwd_item){b->session->sq, b->tokens, b->n_tokens, b->logits, b->all_logits};
        n_tok += (uint64_t)(b->n_tokens > 0 ? b->n_tokens : 0);
    }
    pthread_mutex_lock(&m->mu);
    double t0 = now_s();
    int r = fwd_eval_batch(m->ws, &m->cfg, &m->w, &m->src, fi, n_items, m->err, sizeof m->err);
    m->eval_s += now_s() - t0;
    if (!r) m->tokens += n_tok;
    for (int i = 0; i < n_items; i++) snprintf(items[i].session->err, sizeof items[i].session->err, "%s", r ? m->err : "");
    pthread_mutex_unlock(&m->mu);
    if (fi != stack) free(fi);
    return (sl_status)r;
}

/* ---- session state ---- */

/* A saved state (docs/FORMAT.md): header, state bytes, extra bytes, then xxh3-64 of all before it. */
#define STATE_MAGIC "SLUICEST"
#define STATE_VERSION 1u
typedef struct {
    char magic[8];
    uint32_t version, reserved;
    uint64_t model_id;  /* the container's manifest hash with its expert checksums: same weights, same id */
    int32_t n_past, n_layers;
    uint64_t state_len, extra_len;
} state_hdr;

static uint64_t model_id(const sl_model *m) {
    size_t n = (size_t)m->f.h.n_moe_layers * (size_t)m->f.h.n_experts;
    return m->f.expert_hash ? XXH3_64bits_withSeed(m->f.expert_hash, n * sizeof(uint64_t), m->f.h.manifest_hash)
                            : m->f.h.manifest_hash;
}

static sl_status state_blob(const sl_session *s, const void *extra, size_t extra_len, void **blob, size_t *len) {
    state_hdr h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, STATE_MAGIC, 8);
    h.version = STATE_VERSION;
    h.model_id = model_id(s->m);
    h.n_past = fwd_seq_n_past(s->sq);
    h.n_layers = s->m->cfg.n_layers;
    h.state_len = fwd_seq_state_bytes(s->sq);
    h.extra_len = extra ? extra_len : 0;
    size_t total = sizeof h + h.state_len + h.extra_len + 8;
    char *b = malloc(total);
    if (!b) return SL_ENOMEM;
    memcpy(b, &h, sizeof h);
    fwd_seq_save(s->sq, b + sizeof h);
    if (h.extra_len) memcpy(b + sizeof h + h.state_len, extra, h.extra_len);
    uint64_t x = XXH3_64bits(b, total - 8);
    memcpy(b + total - 8, &x, 8);
    *blob = b;
    *len = total;
    return SL_OK;
}

sl_status sl_session_save(const sl_session *s, void **blob, size_t *len) {
    *blob = NULL;
    *len = 0;
    return state_blob(s, NULL, 0, blob, len);
}

/* Checks a blob and loads it; *extra / *extra_len point into the blob. */
static sl_status state_load(sl_session *s, const void *blob, size_t len, const char *what, const void **extra,
                            size_t *extra_len, char *msg, size_t msglen) {
    state_hdr h;
    if (len < sizeof h + 8) {
        snprintf(msg, msglen, "%s: not a sluice session state (%zu bytes)", what, len);
        return SL_EFORMAT;
    }
    memcpy(&h, blob, sizeof h);
    uint64_t x;
    memcpy(&x, (const char *)blob + len - 8, 8);
    if (memcmp(h.magic, STATE_MAGIC, 8) || h.version != STATE_VERSION) {
        snprintf(msg, msglen, "%s: not a sluice session state (bad magic or version)", what);
        return SL_EFORMAT;
    }
    if (h.state_len > len || h.extra_len > len || sizeof h + h.state_len + h.extra_len + 8 != len) {
        snprintf(msg, msglen, "%s: session state is truncated or has trailing bytes", what);
        return SL_EFORMAT;
    }
    if (XXH3_64bits(blob, len - 8) != x) {
        snprintf(msg, msglen, "%s: session state fails its checksum", what);
        return SL_ECHECKSUM;
    }
    if (h.model_id != model_id(s->m) || h.n_layers != s->m->cfg.n_layers) {
        snprintf(msg, msglen, "%s: the session state was saved with another model", what);
        return SL_EMISMATCH;
    }
    int r = fwd_seq_load(s->sq, h.n_past, (const char *)blob + sizeof h, h.state_len);
    if (r == SL_ERANGE)
        snprintf(msg, msglen, "%s: the saved state has %d positions, more than the session's %d", what, h.n_past,
                 s->n_ctx);
    else if (r)
        snprintf(msg, msglen, "%s: the session state does not match the model's layout", what);
    if (r) return (sl_status)r;
    if (extra) *extra = (const char *)blob + sizeof h + h.state_len;
    if (extra_len) *extra_len = h.extra_len;
    return SL_OK;
}

sl_status sl_session_load(sl_session *s, const void *blob, size_t len) {
    return state_load(s, blob, len, "state", NULL, NULL, s->err, sizeof s->err);
}

sl_status sl_session_save_file(const sl_session *s, const char *path, const void *extra, size_t extra_len,
                               sl_error *err) {
    void *b = NULL;
    size_t n = 0;
    if (state_blob(s, extra, extra_len, &b, &n)) return sl_err(err, SL_ENOMEM, "out of memory");
    char *tmp = malloc(strlen(path) + 32);
    if (!tmp) {
        free(b);
        return sl_err(err, SL_ENOMEM, "out of memory");
    }
    sprintf(tmp, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    sl_status st = fd < 0 ? sl_err(err, errno == ENOSPC ? SL_ENOSPC : SL_EIO, "%s: %s", tmp, strerror(errno))
                          : fio_pwrite_all(fd, b, n, 0, tmp, err);
    if (fd >= 0 && st) close(fd);
    if (fd >= 0 && !st) st = fio_commit(fd, n, tmp, path, err);
    if (st && fd >= 0) unlink(tmp);
    free(tmp);
    free(b);
    return st;
}

sl_status sl_session_load_file(sl_session *s, const char *path, void **extra, size_t *extra_len, sl_error *err) {
    if (extra) *extra = NULL;
    if (extra_len) *extra_len = 0;
    char *b = NULL;
    size_t n = 0;
    sl_status st = fio_read_file(path, &b, &n, err);
    if (st) return st;
    const void *x = NULL;
    size_t xl = 0;
    char msg[sizeof err->msg];
    st = state_load(s, b, n, path, &x, &xl, msg, sizeof msg);
    if (st) {
        free(b);
        return sl_err(err, st, "%s", msg);
    }
    if (extra && xl) {
        *extra = malloc(xl + 1);
        if (!*extra) {
            free(b);
            return sl_err(err, SL_ENOMEM, "out of memory");
        }
        memcpy(*extra, x, xl);
        ((char *)*extra)[xl] = 0;
        *extra_len = xl;
    }
    free(b);
    return SL_OK;
}

/* ---- stats ---- */

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

int sl_model_n_layers(const sl_model *m) { return m->cfg.n_layers; }

const char *sl_model_synthetic(const sl_model *m) {
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(m->f.manifest, "source");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(src, "synthetic");
    return cJSON_IsString(sh) ? sh->valuestring : NULL;
}

sl_status sl_model_write_profile(const sl_model *m, const char *path, sl_error *err) {
    if (!m->cache) return sl_err(err, SL_EINVAL, "routing profiles need a streaming model (not --resident)");
    const uint64_t *r = cache_route_counts(m->cache);
    size_t tl = strlen(path) + 32;
    char *tmp = malloc(tl);
    if (!tmp) return sl_err(err, SL_ENOMEM, "out of memory");
    snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        sl_status st = sl_err(err, sl_status_from_errno(errno), "%s: %s", tmp, strerror(errno));
        free(tmp);
        return st;
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
        free(tmp);
        return sl_err(err, SL_EIO, "%s: cannot write the profile", path);
    }
    free(tmp);
    return SL_OK;
}

int sl_remove_stale_temps(const char *path, char **removed) { return fio_remove_stale_temps(path, removed); }
