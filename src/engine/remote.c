/*
 * remote.c — a model whose experts live on other ranks (dist/remote.h; docs/SCALE.md), the engine's part: rank 0
 * opening the shares (engine_open_remote) and reporting every rank's figures (sl_model_rank_stats), and an expert
 * rank's serve loop (engine_expert_rank), which opens its share of the model's experts when rank 0 asks, computes
 * each layer's request through the forward pass's own expert code (model/moe_remote.c) and answers.
 *
 * An expert rank holds no backbone: the container's header and manifest (slc_open), the backend, its share of
 * the expert section (resident: read and checked at open, engine_open_share; or streamed through its own cache,
 * whose budget is at most its share's bytes) and a workspace for one micro-batch of experts.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/remote.h"
#include "engine/engine.h"
#include "engine/handles.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/fileio.h"

/* ---- rank 0 ---- */

/* A routing profile (sluice profile; stats.c) as load [n_slots][E] (*out, malloc'ed, the caller's). */
static sl_status read_load(const sl_model *m, const char *path, uint64_t **out, sl_error *err) {
    const int E = m->cfg.n_experts, S = (int)m->f.h.n_moe_layers;
    char *txt = NULL;
    int nl = 0, ne = 0, off = 0, layer, e, used;
    unsigned long long c;
    *out = NULL;
    sl_status st = fio_read_file(path, &txt, NULL, err);
    if (st) return st;
    if (sscanf(txt, "sluice-profile 1 layers %d experts %d%n", &nl, &ne, &off) != 2 || nl != S || ne != E) {
        free(txt);
        return err_set(err, SL_EFORMAT, "%s: not a routing profile of this model (expected %d MoE layers x %d experts)",
                       path, S, E);
    }
    uint64_t *load = calloc((size_t)S * E + 1, sizeof *load);
    if (!load) {
        free(txt);
        return err_set(err, SL_ENOMEM, "out of memory");
    }
    for (const char *p = txt + off; sscanf(p, "%d %d %llu%n", &layer, &e, &c, &used) == 3; p += used) {
        int slot = cfg_moe_slot(&m->cfg, layer);
        if (slot >= 0 && e >= 0 && e < E) load[(size_t)slot * E + e] += c;
    }
    free(txt);
    *out = load;
    return SL_OK;
}

static sl_status nothing_here(void *ctx, int layer, int expert, tn_expert *out) {
    (void)ctx, (void)layer, (void)expert, (void)out;
    return SL_EINVAL; /* every expert is another rank's: moe.c sends them there (moe_remote.c) */
}

static const char *nothing_msg(void *ctx) {
    (void)ctx;
    return "the experts live on the expert ranks";
}

sl_status engine_open_remote(sl_model *m, const char *path, const sl_model_params *p, sl_error *err) {
    uint64_t *load = NULL;
    char full[PATH_MAX];
    if (!realpath(path, full)) snprintf(full, sizeof full, "%s", path);
    sl_status st = p->pin_profile ? read_load(m, p->pin_profile, &load, err) : SL_OK;
    if (st) return st;
    const rx_open_msg o = {.n_slots = (int32_t)m->f.h.n_moe_layers, .n_experts = m->cfg.n_experts,
                           .hidden = m->cfg.hidden, .resident = p->resident, .exact = p->exact,
                           .no_verify = p->no_verify, .n_threads = p->n_threads, .io_mode = p->io_mode,
                           .io_engine = p->io_engine, .policy = p->policy, .io_depth = p->io_depth,
                           .cache_bytes = p->cache_bytes};
    const char *v = getenv("SLUICE_REMOTE_OPEN_TIMEOUT");
    st = rx_client_open(p->remote, full, &o, load, v && atof(v) > 0 ? atof(v) : 3600, &m->remote, err);
    free(load);
    if (st) return st;
    m->src = (tn_expert_src){.get = nothing_here, .errmsg = nothing_msg, .ctx = m};
    m->io_engine = m->io_mode = "remote";
    return SL_OK;
}

int sl_model_n_ranks(const sl_model *m) { return m->remote ? rx_client_size(m->remote) : 1; }

sl_status sl_model_rank_stats(sl_model *m, int rank, sl_rank_stats *out, sl_error *err) {
    memset(out, 0, sizeof *out);
    if (!m->remote) {
        if (rank) return err_set(err, SL_ERANGE, "rank %d: the model runs in this process only", rank);
        gethostname(out->host, sizeof out->host - 1);
        out->resident = m->cache == NULL;
        out->experts = (uint64_t)m->f.h.n_moe_layers * (uint64_t)m->f.h.n_experts;
        out->expert_bytes = m->f.h.expert_len;
        out->peak_rss = rx_peak_rss();
        out->tokens = m->tokens;
        return SL_OK;
    }
    pthread_mutex_lock(&m->mu); /* the transport carries one exchange at a time */
    sl_status st = rx_client_stats(m->remote, rank, out, err);
    pthread_mutex_unlock(&m->mu);
    if (!st && rank == 0) { /* rank 0 computes whenever it does not wait for the ranks */
        out->tokens = m->tokens;
        out->compute_s = m->eval_s > out->wait_s ? m->eval_s - out->wait_s : 0;
    }
    return st;
}

/* ---- an expert rank ---- */

typedef struct rank_state {
    rx_transport *t;
    sl_model *m;          /* the share open now, or NULL */
    void *in, *out;       /* the message received; the reply being built */
    size_t in_cap, out_cap;
    rx_rank_stats rs;
} rank_state;

/* Opens the share o asks for: the container, the CPU backend, the experts owner[] gives this rank. */
static sl_status share_open(rank_state *s, const rx_open_msg *o, const char *path, const uint8_t *owner,
                            sl_error *err) {
    sl_model *m = calloc(1, sizeof *m);
    if (!m) return err_set(err, SL_ENOMEM, "out of memory");
    m->stream_fd = -1;
    pthread_mutex_init(&m->mu, NULL);
    s->m = m;
    sl_status st = slc_open(path, &m->f, err);
    if (st) return st;
    m->cfg = m->f.cfg;
    if (o->n_slots != (int)m->f.h.n_moe_layers || o->n_experts != m->cfg.n_experts || o->hidden != m->cfg.hidden)
        return err_set(err, SL_EMISMATCH, "%s: %u MoE layers x %d experts of %d here, rank 0's has %d x %d of %d", path,
                       m->f.h.n_moe_layers, m->cfg.n_experts, m->cfg.hidden, o->n_slots, o->n_experts, o->hidden);
    if (!(m->pool = pool_new(o->n_threads))) return err_set(err, SL_ENOMEM, "cannot start the thread pool");
    if ((st = be_open(SL_BACKEND_CPU, m->pool, &m->be, err))) return st;
    const size_t n = (size_t)o->n_slots * (size_t)o->n_experts;
    uint8_t *own = malloc(n ? n : 1);
    if (!own) return err_set(err, SL_ENOMEM, "out of memory");
    uint64_t bytes = 0, count = 0;
    for (size_t b = 0; b < n; b++)
        if ((own[b] = owner[b] == s->t->rank)) bytes += slc_slot_stride(&m->f, (int)(b / (size_t)o->n_experts)), count++;
    if (o->resident) {
        st = engine_open_share(m, path, own, err);
    } else { /* its own cache over the file, no larger than the share */
        sl_model_params p = sl_model_params_default();
        p.cache_bytes = o->cache_bytes && o->cache_bytes < bytes ? o->cache_bytes : bytes;
        p.io_mode = (sl_io_mode)o->io_mode;
        p.io_engine = (sl_io_engine)o->io_engine;
        p.policy = (sl_cache_policy)o->policy;
        p.io_depth = o->io_depth;
        p.no_verify = o->no_verify;
        p.prefetch = -1; /* no hints reach a rank */
        if (!(st = engine_open_stream(m, path, &p, NULL, err))) {
            m->share_experts = count;
            m->share_bytes = p.cache_bytes;
        }
    }
    free(own);
    if (st) return st;
    if (!(m->ws = fwd_ws_new(&m->cfg, 1, m->be))) return err_set(err, SL_ENOMEM, "out of memory for the workspace");
    fwd_ws_set_int8(m->ws, !o->exact);
    s->rs.resident = o->resident;
    s->rs.experts = m->share_experts;
    s->rs.expert_bytes = m->share_bytes;
    return SL_OK;
}

/* Room for a reply of `body` bytes after its header in s->out. */
static int reply_room(rank_state *s, size_t body) {
    const size_t need = sizeof(rx_head) + body;
    if (s->out_cap >= need) return 1;
    void *p = realloc(s->out, need);
    if (!p) return 0;
    s->out = p;
    s->out_cap = need;
    return 1;
}

static sl_status reply(rank_state *s, const rx_head *h, size_t body, sl_error *err) {
    memcpy(s->out, h, sizeof *h);
    s->rs.bytes_out += sizeof *h + body;
    return s->t->ops->send(s->t, 0, s->out, sizeof *h + body, -1, err);
}

/* RX_FAIL with the text of what failed (e). */
static sl_status reply_fail(rank_state *s, const sl_error *e, sl_error *err) {
    const size_t n = strlen(e->msg) + 1;
    const rx_head h = {.magic = RX_MAGIC, .kind = RX_FAIL};
    if (!reply_room(s, n)) return err_set(err, SL_ENOMEM, "out of memory");
    memcpy((char *)s->out + sizeof h, e->msg, n);
    return reply(s, &h, n, err);
}

static sl_status reply_stats(rank_state *s, sl_error *err) {
    const rx_head h = {.magic = RX_MAGIC, .kind = RX_READY};
    s->rs.peak_rss = rx_peak_rss();
    if (!reply_room(s, sizeof s->rs)) return err_set(err, SL_ENOMEM, "out of memory");
    s->rs.bytes_out += sizeof h + sizeof s->rs; /* counted before it goes, so the figures include themselves */
    memcpy((char *)s->out + sizeof h, &s->rs, sizeof s->rs);
    s->rs.bytes_out -= sizeof h + sizeof s->rs;
    return reply(s, &h, sizeof s->rs, err);
}

static sl_status on_open(rank_state *s, size_t len, sl_error *err) {
    sl_error e = {0};
    const rx_open_msg *o = (const rx_open_msg *)((const char *)s->in + sizeof(rx_head));
    sl_model_close(s->m);
    s->m = NULL;
    sl_status st = SL_OK;
    if (len < sizeof(rx_head) + sizeof *o || o->n_path < 1 || o->n_slots < 0 || o->n_experts < 0 ||
        len != sizeof(rx_head) + sizeof *o + (size_t)o->n_path + (size_t)o->n_slots * (size_t)o->n_experts ||
        ((const char *)(o + 1))[o->n_path - 1])
        st = err_set(&e, SL_EFORMAT, "a malformed open request (%zu bytes)", len);
    else
        st = share_open(s, o, (const char *)(o + 1), (const uint8_t *)(o + 1) + o->n_path, &e);
    if (st) {
        sl_model_close(s->m);
        s->m = NULL;
        err_prefix(&e, "opening its share");
        return reply_fail(s, &e, err);
    }
    return reply_stats(s, err);
}

static sl_status on_moe(rank_state *s, size_t len, sl_error *err) {
    const rx_head *h = s->in;
    sl_error e = {0};
    sl_status st = SL_OK;
    const size_t body = h->n_pairs > 0 ? (size_t)h->n_pairs * (size_t)(h->hidden > 0 ? h->hidden : 0) * sizeof(float) : 0;
    const double t0 = clk_now_s();
    if (!s->m) st = err_set(&e, SL_EINVAL, "a layer request with no model open");
    else if (!reply_room(s, body)) st = err_set(&e, SL_ENOMEM, "out of memory for %d outputs", h->n_pairs);
    else st = fwd_rm_serve(s->m->ws, &s->m->cfg, &s->m->src, s->in, len, (float *)((char *)s->out + sizeof *h), &e);
    s->rs.compute_s += clk_now_s() - t0;
    s->rs.requests++;
    if (st) return reply_fail(s, &e, err);
    s->rs.pairs += (uint64_t)h->n_pairs;
    const rx_head out = {.magic = RX_MAGIC, .kind = RX_OUT, .layer = h->layer, .slot = h->slot, .n_pairs = h->n_pairs,
                         .hidden = h->hidden, .seq = h->seq};
    return reply(s, &out, body, err);
}

sl_status engine_expert_rank(sl_remote *t, sl_error *err) {
    rank_state s = {.t = t};
    s.rs.rank = t->rank;
    snprintf(s.rs.host, sizeof s.rs.host, "%s", t->ops->host(t, t->rank));
    sl_status st = SL_OK;
    for (int quit = 0; !quit && !st;) {
        size_t len = 0;
        const double t0 = clk_now_s();
        if ((st = t->ops->recv(t, 0, &s.in, &s.in_cap, &len, -1, err))) break;
        s.rs.wait_s += clk_now_s() - t0;
        s.rs.bytes_in += len;
        const rx_head *h = s.in;
        if (len < sizeof *h || h->magic != RX_MAGIC) {
            sl_error e;
            err_set(&e, SL_EFORMAT, "a malformed message (%zu bytes) from rank 0", len);
            st = reply_fail(&s, &e, err);
            continue;
        }
        switch (h->kind) {
        case RX_OPEN: st = on_open(&s, len, err); break;
        case RX_MOE: st = on_moe(&s, len, err); break;
        case RX_STATS: st = reply_stats(&s, err); break;
        case RX_CLOSE:
            sl_model_close(s.m);
            s.m = NULL;
            break;
        case RX_QUIT: quit = 1; break;
        default: {
            sl_error e;
            err_set(&e, SL_EFORMAT, "a message of unknown kind %u from rank 0", h->kind);
            st = reply_fail(&s, &e, err);
        }
        }
    }
    sl_model_close(s.m);
    free(s.in);
    free(s.out);
    return st;
}
