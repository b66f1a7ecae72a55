/*
 * state.c — a sequence's state (fwd_internal.h fwd_seq): its buffers' lifetime, the KV rows and DeltaNet state
 * a saved state holds, and their save and load (model.h). Moved out of forward.c, which keeps the evaluation.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "model/fwd_internal.h"
#include "quant/kv.h"

static int imax(int a, int b) { return a > b ? a : b; }

/* Layer l's K (v 0) / V (v 1) cache row bytes (fwd_kv_row_bytes) for c and t. */
static size_t row_bytes(const fam_config *c, sl_kv_type t, int l, int v) {
    if (c->kv_lora > 0 || c->hc_mult > 0) return v ? 0 : (size_t)cfg_kv_row_at(c, l) * sizeof(float); /* MLA, V4 */
    const cfg_attn a = cfg_attn_at(c, l); /* Gemma 4's full layers, MiMo's values: their own head dims */
    return (size_t)a.n_kv_heads * kv_head_bytes(t, v ? a.v_dim : a.head_dim);
}

size_t fwd_kv_row_bytes(const fwd_seq *sq, int l, int v) {
    return row_bytes(&sq->shape, v ? sq->kv_type_v : sq->kv_type, l, v);
}

size_t fwd_seq_mem_bytes(const fam_config *c, int n_pos, sl_kv_type t, sl_kv_type tv) {
    const int has_lin = fwd_any_layer(c, 1);
    const size_t cq = has_lin ? (size_t)(2 * c->lin_nk * c->lin_dk + c->lin_nv * c->lin_dv) : 0;
    const size_t conv = (size_t)(c->conv_k > 1 ? c->conv_k - 1 : 1) * (cq > 1 ? cq : 1);
    const size_t ssm = (size_t)imax(c->lin_nv * c->lin_dk * c->lin_dv, 1);
    size_t n = 0;
    for (int l = 0; l < c->n_layers; l++) {
        long ring = (long)c->sliding_window - 1 + FWD_BATCH;
        int rows = c->layer_sliding[l] && c->sliding_window > 0 && ring < n_pos ? (int)ring : n_pos;
        n += c->layer_linear[l] ? 2 * (conv + ssm) * sizeof(float) : (size_t)rows * (row_bytes(c, t, l, 0) + row_bytes(c, tv, l, 1));
    }
    return n;
}

size_t fwd_kv_bytes(const fwd_seq *sq, int l, int v) { return (size_t)sq->kv_cap[l] * fwd_kv_row_bytes(sq, l, v); }

int fwd_kv_ring(const fwd_seq *sq, int l) { return sq->kv_max[l] < sq->n_ctx; }

/* Takes n bytes from sq's pool (force: past its limit too); 0, or -1 when the limit has not room. */
static int pool_take(fwd_seq *sq, size_t n, int force) {
    fwd_kv_pool *p = sq->pool;
    if (!p) return 0;
    unsigned long long u = p->used;
    do {
        if (!force && p->limit && u + n > p->limit) return -1;
    } while (!atomic_compare_exchange_weak(&p->used, &u, u + n));
    return 0;
}

static void pool_give(fwd_seq *sq, size_t n) {
    if (sq->pool) atomic_fetch_sub(&sq->pool->used, (unsigned long long)n);
}

size_t fwd_seq_kv_held(const fwd_seq *sq) {
    size_t n = 0;
    for (int l = 0; l < sq->n_layers; l++) n += fwd_kv_bytes(sq, l, 0) + fwd_kv_bytes(sq, l, 1);
    return n;
}

void fwd_seq_set_pool(fwd_seq *sq, fwd_kv_pool *pool) {
    pool_give(sq, fwd_seq_kv_held(sq));
    sq->pool = pool;
    pool_take(sq, fwd_seq_kv_held(sq), 1);
}

/* Layer l's caches at cap rows: new buffers holding rows 0 .. min(n_past, kv_cap, cap) - 1 of the old ones
 * (positions below kv_cap sit at their own rows: a cache that can still grow has never wrapped; a smaller cap
 * is asked for only where n_past <= cap). The pool is the caller's. SL_ENOMEM leaves the layer as it was. */
static sl_status kv_resize(fwd_seq *sq, int l, int cap) {
    be_backend *be = sq->be;
    const size_t rb = fwd_kv_row_bytes(sq, l, 0), vrb = fwd_kv_row_bytes(sq, l, 1);
    size_t keep = (size_t)(sq->n_past < sq->kv_cap[l] ? sq->n_past : sq->kv_cap[l]);
    keep = keep < (size_t)cap ? keep : (size_t)cap;
    const int two = vrb > 0; /* one cache: MLA's rows, V4's key = value */
    void *nk = NULL, *nv = NULL; /* cap 0: none (fwd_seq_trim of a sequence of no positions) */
    if (cap > 0) nk = be->alloc(be, (size_t)cap * rb, BE_BUF_DEVICE);
    if (cap > 0 && two) nv = be->alloc(be, (size_t)cap * vrb, BE_BUF_DEVICE);
    if (cap > 0 && (!nk || (two && !nv))) {
        be->free(be, nk, (size_t)cap * rb, BE_BUF_DEVICE);
        be->free(be, nv, (size_t)cap * vrb, BE_BUF_DEVICE);
        return SL_ENOMEM;
    }
    if (keep) be->copy(be, nk, sq->k_cache[l], keep * rb, BE_D2D);
    if (keep && two) be->copy(be, nv, sq->v_cache[l], keep * vrb, BE_D2D);
    be->free(be, sq->k_cache[l], fwd_kv_bytes(sq, l, 0), BE_BUF_DEVICE);
    be->free(be, sq->v_cache[l], fwd_kv_bytes(sq, l, 1), BE_BUF_DEVICE);
    sq->k_cache[l] = nk;
    sq->v_cache[l] = nv;
    sq->kv_cap[l] = cap;
    return SL_OK;
}

static int page_up(long n) { return (int)((n + FWD_KV_PAGE - 1) / FWD_KV_PAGE * FWD_KV_PAGE); }

/* The rows layer l grows to for n_pos positions (kv_cap when it needs none): doubling, or (min) only the
 * pages it needs. */
static int grow_to(const fwd_seq *sq, int l, int n_pos, int min) {
    if (sq->shape.layer_linear[l] || sq->kv_cap[l] >= sq->kv_max[l] || sq->kv_cap[l] >= n_pos) return sq->kv_cap[l];
    const int need = page_up(n_pos), want = min ? need : page_up(imax(need, 2 * sq->kv_cap[l]));
    return want < sq->kv_max[l] ? want : sq->kv_max[l];
}

/* The bytes sq's caches grow by for n_pos positions (grow_to). */
static size_t grow_bytes(const fwd_seq *sq, int n_pos, int min) {
    size_t n = 0;
    for (int l = 0; l < sq->n_layers; l++)
        n += (size_t)(grow_to(sq, l, n_pos, min) - sq->kv_cap[l]) * (fwd_kv_row_bytes(sq, l, 0) + fwd_kv_row_bytes(sq, l, 1));
    return n;
}

sl_status fwd_seq_reserve(fwd_seq *sq, int n_pos) {
    int min = sq->pool && sq->pool->limit; /* under a limit: pages as needed, not doubling */
    size_t add = grow_bytes(sq, n_pos, min);
    if (!add) return SL_OK;
    if (pool_take(sq, add, 0)) return SL_EBUSY;
    int moved = 0;
    for (int l = 0; l < sq->n_layers; l++) {
        int cap = grow_to(sq, l, n_pos, min);
        if (cap == sq->kv_cap[l]) continue;
        size_t rb = fwd_kv_row_bytes(sq, l, 0) + fwd_kv_row_bytes(sq, l, 1), was = (size_t)sq->kv_cap[l] * rb;
        if (kv_resize(sq, l, cap)) { /* the layers grown so far keep their rows; the rest goes back */
            pool_give(sq, add);
            if (moved) sq->uid = fwd_next_uid();
            return SL_ENOMEM;
        }
        add -= (size_t)cap * rb - was;
        moved = 1;
    }
    sq->uid = fwd_next_uid(); /* other buffers: a recorded step (step_begin) must not replay */
    return SL_OK;
}

void fwd_seq_trim(fwd_seq *sq) {
    int moved = 0;
    for (int l = 0; l < sq->n_layers; l++) {
        if (sq->shape.layer_linear[l] || sq->n_past > sq->kv_cap[l]) continue; /* a wrapped ring keeps its rows */
        int want = page_up(sq->n_past);
        want = want < sq->kv_max[l] ? want : sq->kv_max[l];
        const size_t was = fwd_kv_bytes(sq, l, 0) + fwd_kv_bytes(sq, l, 1);
        if (want >= sq->kv_cap[l] || kv_resize(sq, l, want)) continue; /* ENOMEM: keeps the bigger one */
        pool_give(sq, was - fwd_kv_bytes(sq, l, 0) - fwd_kv_bytes(sq, l, 1));
        moved = 1;
    }
    if (moved) sq->uid = fwd_next_uid();
}

fwd_seq *fwd_seq_new(const fam_config *cfg, int n_ctx, sl_kv_type kv_type, sl_kv_type kv_type_v, be_backend *be) {
    if (!cfg || !be || n_ctx < 1 || cfg->n_layers < 1 || cfg->n_layers > SL_MAX_LAYERS || cfg->hidden < 1) return NULL;
    if ((int)kv_type < 0 || kv_type >= SL_KV_COUNT || (int)kv_type_v < 0 || kv_type_v >= SL_KV_COUNT) return NULL;
    fwd_seq *sq = calloc(1, sizeof *sq);
    if (!sq) return NULL;
    sq->uid = fwd_next_uid();
    sq->be = be;
    sq->n_ctx = n_ctx;
    sq->n_layers = cfg->n_layers;
    sq->shape = *cfg;
    sq->kv_type = cfg->kv_lora > 0 || cfg->hc_mult > 0 ? SL_KV_F32 : kv_type; /* MLA, V4 (dsv4.c): f32 only */
    sq->kv_type_v = cfg->kv_lora > 0 || cfg->hc_mult > 0 ? SL_KV_F32 : kv_type_v;
    sq->wide = 1;
    int has_lin = fwd_any_layer(cfg, 1);
    int nk = cfg->lin_nk, nv = cfg->lin_nv, dk = cfg->lin_dk, dv = cfg->lin_dv;
    int cq = !has_lin ? 0 : cfg->short_conv ? cfg->hidden : 2 * nk * dk + nv * dv; /* LFM2: the conv over hidden */
    sq->conv_floats = (size_t)(cfg->conv_k > 1 ? cfg->conv_k - 1 : 1) * (size_t)imax(cq, 1);
    sq->ssm_floats = (size_t)imax(nv * dk * dv, 1);
    for (int l = 0; l < cfg->n_layers; l++) {
        if (cfg->layer_linear[l]) {
            for (int s = 0; s < 2; s++) {
                sq->conv[l][s] = be->alloc(be, sq->conv_floats * sizeof(float), BE_BUF_DEVICE);
                sq->ssm[l][s] = be->alloc(be, sq->ssm_floats * sizeof(float), BE_BUF_DEVICE);
                if (!sq->conv[l][s] || !sq->ssm[l][s]) goto fail;
                be->zero(be, sq->conv[l][s], sq->conv_floats * sizeof(float));
                be->zero(be, sq->ssm[l][s], sq->ssm_floats * sizeof(float));
            }
        } else {
            long ring = (long)cfg->sliding_window - 1 + FWD_BATCH;
            sq->kv_max[l] = cfg->layer_sliding[l] && cfg->sliding_window > 0 && ring < n_ctx ? (int)ring : n_ctx;
            if (fwd_dsv4_alloc(sq, l)) goto fail;
        }
    }
    if (fwd_mla_seq_alloc(sq, cfg)) goto fail;
    if (fwd_seq_reserve(sq, 1)) goto fail; /* the first page */
    return sq;
fail:
    fwd_seq_free(sq);
    return NULL;
}

void fwd_seq_free(fwd_seq *sq) {
    if (!sq) return;
    be_backend *be = sq->be;
    pool_give(sq, fwd_seq_kv_held(sq));
    fwd_mla_seq_free(sq);
    for (int l = 0; l < SL_MAX_LAYERS; l++) {
        be->free(be, sq->k_cache[l], fwd_kv_bytes(sq, l, 0), BE_BUF_DEVICE);
        be->free(be, sq->v_cache[l], fwd_kv_bytes(sq, l, 1), BE_BUF_DEVICE);
        fwd_dsv4_free(sq, l);
        for (int s = 0; s < 2; s++) {
            be->free(be, sq->conv[l][s], sq->conv_floats * sizeof(float), BE_BUF_DEVICE);
            be->free(be, sq->ssm[l][s], sq->ssm_floats * sizeof(float), BE_BUF_DEVICE);
        }
    }
    free(sq);
}

void fwd_seq_reset(fwd_seq *sq) {
    if (!sq) return;
    sq->n_past = 0;
    /* KV rows need no clearing (only rows < n_past are read); recurrent state restarts at zero */
    for (int l = 0; l < sq->n_layers; l++) {
        if (!sq->conv[l][0]) continue;
        sq->lin_cur[l] = 0;
        sq->be->zero(sq->be, sq->conv[l][0], sq->conv_floats * sizeof(float));
        sq->be->zero(sq->be, sq->ssm[l][0], sq->ssm_floats * sizeof(float));
    }
}

int fwd_seq_n_past(const fwd_seq *sq) { return sq ? sq->n_past : 0; }
void fwd_seq_set_wide(fwd_seq *sq, int on) { sq->wide = on; }

/* State bytes: per layer, the current DeltaNet conv and recurrent state, or the KV rows in use (MLA: the
 * compressed rows only; V4: its one cache, and each compressor's ring rows and entries). */
size_t fwd_seq_state_bytes(const fwd_seq *sq) {
    const fam_config *c = &sq->shape;
    size_t n = 0;
    for (int l = 0; l < sq->n_layers; l++) {
        const size_t row = fwd_kv_row_bytes(sq, l, 0) + fwd_kv_row_bytes(sq, l, 1); /* K and V (MLA, V4: K only) */
        n += c->layer_linear[l] ? (sq->conv_floats + sq->ssm_floats) * sizeof(float)
                                : (size_t)fwd_kv_keep(sq, l, sq->n_past) * row;
        n += fwd_dsv4_state_io(sq, l, sq->n_past, NULL, 0); /* V4's compressors: their ring rows and entries */
    }
    return n;
}

int fwd_kv_keep(const fwd_seq *sq, int layer, int n_past) {
    const fam_config *c = &sq->shape;
    if (!c->layer_sliding[layer] || c->sliding_window < 1) return n_past;
    if (c->attn_chunk > 0) return n_past % c->attn_chunk; /* the positions of the next query's chunk */
    return n_past < c->sliding_window - 1 ? n_past : c->sliding_window - 1;
}

/* Copies the KV rows of positions n_past - keep .. n_past - 1 of layer l between the cache (ring slots) and a
 * state buffer p; to_state: cache -> p. The positions' slots are consecutive up to the ring's end, so each cache
 * moves in at most two copies (one a row made a device run's save or load of 48 layers x 64 positions 6,144
 * synchronous copies: a follow-up turn's first token 5x later with the prefix cache than without it, docs/CUDA.md
 * "Call V"). Returns the bytes moved. */
static size_t kv_rows_io(const fwd_seq *sq, int l, int n_past, char *p, int to_state) {
    const int keep = fwd_kv_keep(sq, l, n_past), cap = sq->kv_cap[l];
    size_t moved = 0;
    void *const caches[2] = {sq->k_cache[l], sq->v_cache[l]};
    for (int k = 0; k < 2; k++) {
        if (!caches[k]) continue;
        const size_t rb = fwd_kv_row_bytes(sq, l, k);
        for (int pos = n_past - keep; pos < n_past;) {
            const int slot = pos % cap, run = n_past - pos < cap - slot ? n_past - pos : cap - slot;
            char *rows = (char *)caches[k] + (size_t)slot * rb;
            const size_t nb = (size_t)run * rb;
            if (to_state) sq->be->copy(sq->be, p + moved, rows, nb, BE_D2H);
            else sq->be->copy(sq->be, rows, p + moved, nb, BE_H2D);
            pos += run, moved += nb;
        }
    }
    return moved;
}

void fwd_seq_save(const fwd_seq *sq, void *buf) {
    const fam_config *c = &sq->shape;
    char *p = buf;
#define PUT(src, nf)                                                   \
    do {                                                               \
        sq->be->copy(sq->be, p, (src), (nf) * sizeof(float), BE_D2H);  \
        p += (nf) * sizeof(float);                                     \
    } while (0)
    for (int l = 0; l < sq->n_layers; l++) {
        if (c->layer_linear[l]) {
            PUT(sq->conv[l][sq->lin_cur[l]], sq->conv_floats);
            PUT(sq->ssm[l][sq->lin_cur[l]], sq->ssm_floats);
        } else {
            p += kv_rows_io(sq, l, sq->n_past, p, 1);
            p += fwd_dsv4_state_io(sq, l, sq->n_past, p, 1);
        }
    }
#undef PUT
}

sl_status fwd_seq_load(fwd_seq *sq, int n_past, const void *buf, size_t len) {
    const fam_config *c = &sq->shape;
    if (n_past < 0 || n_past > sq->n_ctx) return SL_ERANGE;
    if (fwd_seq_reserve(sq, n_past)) return SL_ENOMEM; /* before anything changes */
    int old = sq->n_past;
    sq->n_past = n_past;
    size_t want = fwd_seq_state_bytes(sq);
    if (len != want) {
        sq->n_past = old;
        return SL_EFORMAT;
    }
    const char *p = buf;
#define GET(dst, nf)                                                   \
    do {                                                               \
        sq->be->copy(sq->be, (dst), p, (nf) * sizeof(float), BE_H2D);  \
        p += (nf) * sizeof(float);                                     \
    } while (0)
    for (int l = 0; l < sq->n_layers; l++) {
        if (c->layer_linear[l]) {
            sq->lin_cur[l] = 0;
            GET(sq->conv[l][0], sq->conv_floats);
            GET(sq->ssm[l][0], sq->ssm_floats);
        } else {
            p += kv_rows_io(sq, l, n_past, (char *)p, 0);
            p += fwd_dsv4_state_io(sq, l, n_past, (char *)p, 0);
        }
    }
#undef GET
    return 0;
}

