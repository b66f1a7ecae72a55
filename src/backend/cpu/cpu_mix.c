/*
 * cpu_mix.c — the CPU backend's token mixers (backend.h: attention, dn_*): softmax attention over a KV cache
 * (full, a sliding ring, sink logits, the sigmoid gate), and the Gated DeltaNet's conv1d, gates, token recurrence,
 * chunked form and gated norm (multi-head latent attention has its own file, cpu_mla.c). The algebra and its
 * references are in src/model/attention.c and deltanet.c, which call these.
 *
 * The parallel work items are (token, head) pairs for attention (one token with fewer KV heads than threads:
 * attn_split's (KV head, key chunk), query head and (KV head, value slice) items in three hand-offs), value heads
 * for DeltaNet; each uses one per-thread scratch slot (cpu_ctx, reserve) and computes from its own token, head and
 * the state only, so the split over threads never changes a bit.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "quant/kv.h"

#define DN_CHUNK 64 /* the chunked form's row length of its scratch matrices (backend.h: n <= 64) */

/* ---- attention -------------------------------------------------------------------------------- */

typedef struct {
    const be_attn *a;
    const kern_ops *ops;
    cpu_ctx *c;
    int group, kvrow, vrow, vd; /* f32 row floats of K / V, a value head's size (be_attn v_dim) */
    size_t row_bytes, head_bytes, vrow_bytes, vhead_bytes; /* K's cache row and head, V's (quant/kv.h) */
    int block, ldsc; /* attn_block_part: tokens a block, score row stride (the last token's keys) */
    int cols; /* attn_block_part: each key tile transposed (below the rotated queries) for the table's dot_cols_q */
    /* what K and V rows decode as: the caches' types, but q4r's rotated values KV_Q4R_Y (quant/kv.h): then the
     * queries are rotated once (kv_q4r_rotate, into the slot below the tile) and the outputs once
     * (kv_q4r_unrotate), attn_part and attn_block_part alike, instead of every row inverse-rotated */
    sl_kv_type kt, vt;
    /* attn_split (one token): keys a chunk and chunks a KV head (its scores' items), dims a slice and slices a value
     * head (its sums' items), the token's keys p0 .. p0 + nk - 1, score row stride, floats of each slot's tail */
    int sp_chunk, sp_nch, sp_w, sp_nsl, sp_p0, sp_nk;
    size_t sp_ldsc, sp_tail;
} attn_job;

/* Query heads q_i (q + i * qs, i < nq) as f32 rows of hd for K rows decoded as j->kt: q itself (*ld = qs), or
 * rotated into qr (*ld = hd) for q4r's rotated keys. */
static const float *attn_query(const attn_job *j, const float *q, size_t qs, int nq, float *qr, size_t *ld) {
    const int hd = j->a->head_dim;
    if (j->kt != KV_Q4R_Y) {
        *ld = qs;
        return q;
    }
    for (int i = 0; i < nq; i++) kv_q4r_rotate(q + (size_t)i * qs, hd, qr + (size_t)i * hd);
    *ld = (size_t)hd;
    return qr;
}

/* The extra keys token t sees (backend.h be_attn extra): with extra_idx their indices into xs (extra_k <= 4096:
 * model/dsv4.c checks idx_topk), ascending; else the count of the run 0 .. n - 1 (xs untouched). */
static int extra_list(const be_attn *a, int t, int *xs) {
    if (!a->extra) return 0;
    const int vis = (a->pos0 + t + 1) / a->extra_rate;
    if (!a->extra_idx) return vis;
    int n = 0;
    for (int i = 0; i < a->extra_k && n < 4096; i++) {
        const int e = a->extra_idx[(size_t)t * a->extra_k + i];
        if (e >= 0 && e < vis) xs[n++] = e;
    }
    return n;
}

/* The table's KV decoder, or the scalar one (bitwise the same). */
static void kv_decode(const kern_ops *ops, sl_kv_type t, const void *src, size_t ld, int n, int hd, float *dst,
                      size_t ldd) {
    if (ops->kv_decode) ops->kv_decode(t, src, ld, n, hd, dst, ldd);
    else kv_decode_heads(t, src, ld, n, hd, dst, ldd);
}

/* Scores sc[i * ldsc + p] = q_i . key (p0 + p) for nq query heads (q_i = q + i * qs: attn_query's) and p <
 * n_keys, the keys of KV head g: straight from an f32 cache (at most two runs of rows: a ring wraps once), else
 * decoded BE_KV_TILE rows at a time into tile; each score the same dot of the same values either way. */
static void attn_scores(const attn_job *j, const float *q, size_t qs, int nq, int g, int p0, int n_keys, float *sc,
                        size_t ldsc, float *tile) {
    const be_attn *a = j->a;
    const int hd = a->head_dim, cap = a->cap;
    if (a->kv_type == SL_KV_F32) {
        const float *kb = (const float *)a->k_cache + (size_t)g * hd;
        const int s0 = p0 % cap, n1 = n_keys < cap - s0 ? n_keys : cap - s0;
        const size_t ld = (size_t)j->kvrow;
        kern_dot_rows_q(j->ops, q, qs, nq, kb + (size_t)s0 * ld, ld, n1, hd, sc, ldsc);
        if (n_keys > n1) kern_dot_rows_q(j->ops, q, qs, nq, kb, ld, n_keys - n1, hd, sc + n1, ldsc);
        return;
    }
    const char *kb = (const char *)a->k_cache + (size_t)g * j->head_bytes;
    for (int p = 0; p < n_keys;) {
        const int s = (p0 + p) % cap, run = n_keys - p < cap - s ? n_keys - p : cap - s;
        const int nt = run < BE_KV_TILE ? run : BE_KV_TILE;
        kv_decode(j->ops, j->kt, kb + (size_t)s * j->row_bytes, j->row_bytes, nt, hd, tile, (size_t)hd);
        kern_dot_rows_q(j->ops, q, qs, nq, tile, (size_t)hd, nt, hd, sc + p, ldsc);
        p += nt;
    }
}

/* o_i (rows of vd, o + i * vd) = sum over p < n_keys of w[i * ldw + p] * value (p0 + p) of KV head g, in
 * increasing p, o zeroed first: one axpy_rows_q over consecutive rows equals the same over their split in runs
 * (kernels.h), so a decoded tile at a time gives the f32 cache's sums of the same values. q4r's values are summed
 * rotated (KV_Q4R_Y), each o_i inverse-rotated once at the end. */
static void attn_values(const attn_job *j, const float *w, size_t ldw, int nq, int g, int p0, int n_keys, float *o,
                        float *tile) {
    const be_attn *a = j->a;
    const int vd = j->vd, cap = a->cap;
    memset(o, 0, (size_t)nq * (size_t)vd * sizeof(float));
    if (a->kv_type_v == SL_KV_F32) {
        const float *vb = (const float *)a->v_cache + (size_t)g * vd;
        const int s0 = p0 % cap, n1 = n_keys < cap - s0 ? n_keys : cap - s0;
        const size_t ld = (size_t)j->vrow;
        kern_axpy_rows_q(j->ops, w, ldw, nq, n1, vb + (size_t)s0 * ld, ld, o, (size_t)vd, vd);
        if (n_keys > n1) kern_axpy_rows_q(j->ops, w + n1, ldw, nq, n_keys - n1, vb, ld, o, (size_t)vd, vd);
        return;
    }
    const char *vb = (const char *)a->v_cache + (size_t)g * j->vhead_bytes;
    for (int p = 0; p < n_keys;) {
        const int s = (p0 + p) % cap, run = n_keys - p < cap - s ? n_keys - p : cap - s;
        const int nt = run < BE_KV_TILE ? run : BE_KV_TILE;
        kv_decode(j->ops, j->vt, vb + (size_t)s * j->vrow_bytes, j->vrow_bytes, nt, vd, tile, (size_t)vd);
        kern_axpy_rows_q(j->ops, w + p, ldw, nq, nt, tile, (size_t)vd, o, (size_t)vd, vd);
        p += nt;
    }
    for (int i = 0; j->vt == KV_Q4R_Y && i < nq; i++) kv_q4r_unrotate(o + (size_t)i * vd, vd);
}

/* The keys p0 .. pos of the token t at pos = pos0 + t: its window (p0 = pos - window + 1), its chunk (p0 = pos -
 * pos % chunk) or every position before it. */
static void key_range(const be_attn *a, int t, int *p0, int *n_keys) {
    const int pos = a->pos0 + t;
    *p0 = a->window > 0 && pos >= a->window ? pos - a->window + 1 : a->chunk > 0 ? pos - pos % a->chunk : 0;
    *n_keys = pos + 1 - *p0;
}

/* (token, head) items begin..end; called any number of times per thread (pool_for_any), each thread's
 * scores in its own scratch slot (and, for a cache that is not f32, its last BE_KV_TILE * hd floats the
 * decoded rows). A KV head's query heads of one token whose items are all in the range go together, as many
 * as the slot holds scores for (kern_dot_rows_q, kern_axpy_rows_q: each key and value row loaded once for
 * several heads); every head's scores, softmax and sum are the same operations either way. */
static void attn_part(void *ctx, size_t begin, size_t end) {
    attn_job *j = ctx;
    const be_attn *a = j->a;
    float *sc0 = j->c->scratch + (size_t)pool_thread(j->c->pool) * j->c->slot_floats;
    const int hd = a->head_dim, vd = j->vd;
    const int f32 = a->kv_type == SL_KV_F32 && a->kv_type_v == SL_KV_F32;
    const size_t qr_floats = j->kt == KV_Q4R_Y ? (size_t)j->group * (size_t)hd : 0; /* rotated queries */
    const size_t tile_floats = (f32 ? 0 : (size_t)BE_KV_TILE * (size_t)(hd > vd ? hd : vd)) + qr_floats;
    float *qr = sc0 + (j->c->slot_floats - tile_floats), *tile = qr + qr_floats;
    for (size_t it = begin; it < end;) {
        int t = (int)(it / (size_t)a->n_heads), h = (int)(it % (size_t)a->n_heads);
        int p0, n_keys; /* keys p0 .. pos, scores sc[0 .. n_keys) */
        key_range(a, t, &p0, &n_keys);
        int xs[4096], n_x = extra_list(a, t, xs); /* the extra keys, scores sc[n_keys .. + n_x) */
        int nq = 1; /* heads h .. h + nq - 1, of one KV head; head i's scores at sc0 + i * (n_keys + n_x) */
        if (h % j->group == 0 && it + (size_t)j->group <= end) {
            const size_t fit = (j->c->slot_floats - tile_floats) / (size_t)(n_keys + n_x);
            nq = fit < (size_t)j->group ? (int)fit : j->group;
            if (nq < 1) nq = 1;
        }
        const float *q = a->q + (size_t)t * a->ldq + (size_t)h * a->qstride;
        const size_t ldsc = (size_t)(n_keys + n_x);
        size_t qs;
        const float *qk = attn_query(j, q, (size_t)a->qstride, nq, qr, &qs);
        attn_scores(j, qk, qs, nq, h / j->group, p0, n_keys, sc0, ldsc, tile);
        for (int x = 0; a->extra_idx && x < n_x; x++)
            kern_dot_rows_q(j->ops, q, (size_t)a->qstride, nq, a->extra + (size_t)xs[x] * hd, (size_t)hd, 1, hd,
                            sc0 + n_keys + x, ldsc);
        if (!a->extra_idx && n_x > 0)
            kern_dot_rows_q(j->ops, q, (size_t)a->qstride, nq, a->extra, (size_t)hd, n_x, hd, sc0 + n_keys, ldsc);
        /* the one softmax attn_block_part shares (kernels.h kern_softmax_row: sink a logit whose value is dropped) */
        kern_softmax_rows(j->ops, sc0, ldsc, nq, n_keys + n_x, a->scale, a->sinks ? a->sinks + h : NULL);
        float *o = a->out + (size_t)t * a->ldo + (size_t)h * vd; /* heads h .. h + nq - 1: rows of vd */
        attn_values(j, sc0, ldsc, nq, h / j->group, p0, n_keys, o, tile);
        for (int x = 0; a->extra_idx && x < n_x; x++) /* V4's extra keys are values of hd (its vd = hd) */
            kern_axpy_rows_q(j->ops, sc0 + n_keys + x, ldsc, nq, 1, a->extra + (size_t)xs[x] * hd, (size_t)hd, o,
                             (size_t)hd, hd);
        if (!a->extra_idx && n_x > 0)
            kern_axpy_rows_q(j->ops, sc0 + n_keys, ldsc, nq, n_x, a->extra, (size_t)hd, o, (size_t)hd, hd);
        it += (size_t)nq;
    }
}

/* Rows nt of the K (v 0) or V (v 1) cache from position p (no ring wrap inside: the caller splits there) as f32:
 * the f32 cache's own rows (*ld = its row floats), else decoded into tile (*ld = the head's size). */
static const float *kv_rows(const attn_job *j, int v, int g, int p, int nt, float *tile, size_t *ld) {
    const be_attn *a = j->a;
    const int s = p % a->cap, d = v ? j->vd : a->head_dim, row = v ? j->vrow : j->kvrow;
    const size_t rb = v ? j->vrow_bytes : j->row_bytes, hb = v ? j->vhead_bytes : j->head_bytes;
    const void *cache = v ? a->v_cache : a->k_cache;
    const sl_kv_type t = v ? j->vt : j->kt;
    if (t == SL_KV_F32) {
        *ld = (size_t)row;
        return (const float *)cache + (size_t)s * row + (size_t)g * d;
    }
    *ld = (size_t)d;
    kv_decode(j->ops, t, (const char *)cache + (size_t)s * rb + (size_t)g * hb, rb, nt, d, tile, (size_t)d);
    return tile;
}

/* The cache lines attn_block_part's token loop reads next, asked for while it computes token t - 1 of the tile of
 * keys p .. p + nt - 1: token t's scores of those keys (pass 0 writes them, pass 1 reads them as weights: by then out
 * of the caches, a block's scores being megabytes) and one row of the next tile of the cache, row t - 1 - t0 (a tile's
 * decoding waits on its loads). Hints only, no value changes; cannot fail. */
static void prefetch_next(const attn_job *j, int pass, int g, int t, int t0, int p, int nt, int hi, float *sc0) {
    const be_attn *a = j->a;
    int p0, nk;
    if (t < a->n && t < t0 + j->block) {
        key_range(a, t, &p0, &nk);
        const int b = p > p0 ? p : p0, e = p + nt < p0 + nk ? p + nt : p0 + nk;
        for (int i = 0; b < e && i < j->group; i++) {
            const char *r = (const char *)(sc0 + ((size_t)(t - t0) * (size_t)j->group + (size_t)i) * (size_t)j->ldsc +
                                           (size_t)(b - p0));
            for (size_t o = 0; o < (size_t)(e - b) * sizeof(float); o += 64) {
                if (pass == 0) __builtin_prefetch(r + o, 1);
                else __builtin_prefetch(r + o, 0);
            }
        }
    }
    const int q = p + nt + (t - 1 - t0);
    if (q < hi) {
        const size_t hb = pass ? j->vhead_bytes : j->head_bytes, rb = pass ? j->vrow_bytes : j->row_bytes;
        const char *r = (const char *)(pass ? a->v_cache : a->k_cache) + (size_t)(q % a->cap) * rb + (size_t)g * hb;
        for (size_t o = 0; o < hb; o += 64) __builtin_prefetch(r + o, 0);
    }
}

/* Items (KV head g, block of j->block tokens) of a micro-batch: every key and value tile (BE_KV_TILE rows, cut
 * at the ring's wrap) is read, or decoded, once for the block's tokens and the group's query heads, where
 * attn_part reads every row once per token (flash attention's tiling; the scores of a row are kept whole, so
 * the softmax is attn_part's). Each (token, head)'s scores, softmax and weighted sum are attn_part's operations
 * on the same values in the same order (kernels.h: a dot per score; axpy_rows_q over consecutive rows equals
 * it over their split), so the result is bitwise attn_part's. Scores: [block][group][ldsc] in the slot; q4r's
 * rotated queries (attn_query) [block][group][hd] below the tile, its outputs inverse-rotated after their sums. */
static void attn_block_part(void *ctx, size_t begin, size_t end) {
    attn_job *j = ctx;
    const be_attn *a = j->a;
    const int hd = a->head_dim, vd = j->vd, G = j->group, nblk = (a->n + j->block - 1) / j->block;
    float *sc0 = j->c->scratch + (size_t)pool_thread(j->c->pool) * j->c->slot_floats;
    float *tile = sc0 + (j->c->slot_floats - (size_t)BE_KV_TILE * (size_t)(hd > vd ? hd : vd));
    float *qr = tile - (j->kt == KV_Q4R_Y ? (size_t)j->block * (size_t)G * (size_t)hd : 0);
    float *xt = qr - (j->cols ? (size_t)BE_KV_TILE * (size_t)hd : 0); /* a key tile, column c at xt[c * BE_KV_TILE] */
    for (size_t it = begin; it < end; it++) {
        const int g = (int)(it / (size_t)nblk), t0 = (int)(it % (size_t)nblk) * j->block;
        const int t1 = t0 + j->block < a->n ? t0 + j->block : a->n;
        size_t qs = (size_t)a->qstride, qt = a->ldq; /* the queries of KV head g: token t's at qk + (t - t0) * qt */
        const float *qk = a->q + (size_t)t0 * a->ldq + (size_t)g * G * a->qstride;
        if (j->kt == KV_Q4R_Y) {
            for (int t = t0; t < t1; t++)
                attn_query(j, qk + (size_t)(t - t0) * a->ldq, (size_t)a->qstride, G, qr + (size_t)(t - t0) * G * hd, &qs);
            qk = qr, qt = (size_t)G * (size_t)hd;
        }
        int lo, hi, p0, nk;
        key_range(a, t0, &lo, &nk);
        key_range(a, t1 - 1, &p0, &nk);
        hi = p0 + nk; /* keys lo .. hi - 1 cover the block's */
        const size_t ldsc = (size_t)j->ldsc;
        for (int pass = 0; pass < 2; pass++) {
            if (pass == 1) { /* the softmax of each (token, head) over its own keys, as attn_part's */
                for (int t = t0; t < t1; t++) {
                    key_range(a, t, &p0, &nk);
                    kern_softmax_rows(j->ops, sc0 + (size_t)(t - t0) * G * ldsc, ldsc, G, nk, a->scale,
                                      a->sinks ? a->sinks + (size_t)g * G : NULL);
                    memset(a->out + (size_t)t * a->ldo + (size_t)g * G * vd, 0, (size_t)G * (size_t)vd * sizeof(float));
                }
            }
            for (int p = lo; p < hi;) {
                const int s = p % a->cap, run = hi - p < a->cap - s ? hi - p : a->cap - s;
                const int nt = run < BE_KV_TILE ? run : BE_KV_TILE;
                size_t ld;
                const float *rows = kv_rows(j, pass, g, p, nt, tile, &ld);
                if (pass == 0 && j->cols) kern_transpose(j->ops, rows, ld, nt, hd, xt, BE_KV_TILE);
                for (int t = t0; t < t1; t++) {
                    prefetch_next(j, pass, g, t + 1, t0, p, nt, hi, sc0);
                    key_range(a, t, &p0, &nk);
                    const int b = p > p0 ? p : p0, e = p + nt < p0 + nk ? p + nt : p0 + nk;
                    if (b >= e) continue;
                    float *sc = sc0 + (size_t)(t - t0) * G * ldsc + (size_t)(b - p0);
                    const float *r = rows + (size_t)(b - p) * ld;
                    if (pass == 0 && j->cols)
                        j->ops->dot_cols_q(qk + (size_t)(t - t0) * qt, qs, G, xt + (b - p), BE_KV_TILE, e - b, hd, sc, ldsc);
                    else if (pass == 0)
                        kern_dot_rows_q(j->ops, qk + (size_t)(t - t0) * qt, qs, G, r, ld, e - b, hd, sc, ldsc);
                    else
                        kern_axpy_rows_q(j->ops, sc, ldsc, G, e - b, r, ld,
                                         a->out + (size_t)t * a->ldo + (size_t)g * G * vd, (size_t)vd, vd);
                }
                p += nt;
            }
        }
        for (int t = t0; j->vt == KV_Q4R_Y && t < t1; t++) /* attn_values' last step, for each (token, head) */
            for (int i = 0; i < G; i++) kv_q4r_unrotate(a->out + (size_t)t * a->ldo + (size_t)(g * G + i) * vd, vd);
    }
}

/* The new rows of tokens begin..end into the caches (kv_encode_head: each head from its own values only). */
static void encode_part(void *ctx, size_t begin, size_t end) {
    const attn_job *j = ctx;
    const be_attn *a = j->a;
    const int hd = a->head_dim, vd = j->vd;
    const size_t ldv = a->ldv ? a->ldv : a->ldkv;
    for (size_t t = begin; t < end; t++) {
        const size_t slot = (size_t)((a->pos0 + (int)t) % a->cap);
        for (int g = 0; g < a->n_kv_heads; g++) {
            kv_encode_head(a->kv_type, a->k + t * a->ldkv + (size_t)g * hd, hd,
                           (char *)a->k_cache + slot * j->row_bytes + (size_t)g * j->head_bytes);
            kv_encode_head(a->kv_type_v, a->v + t * ldv + (size_t)g * vd, vd,
                           (char *)a->v_cache + slot * j->vrow_bytes + (size_t)g * j->vhead_bytes);
        }
    }
}

/* ---- one token's attention split three ways: decode at depth with fewer KV heads than threads ---------------
 * attn_part's items are query heads: with few KV heads for the threads (the 30B shape's 4 for 32 query heads on 16
 * threads) a claim holds one query head, which decodes and reads its KV head's K and V rows itself, G times a row
 * in all. Here (1) the scores are items (KV head, chunk of keys) with all G query heads of the group at once, each
 * score the same dot of the same values (attn_scores: kernels.h dot_rows_q is bitwise a dot per score); (2) the
 * softmax is an item per query head (kern_softmax_rows of its row, as attn_part's); (3) the weighted sums are items
 * (KV head, slice of the value's dims) for the G heads at once: each output element's chain still runs over every
 * key in increasing position from zero (axpy_rows_q is element-wise y + a * x, so a slice of the columns is the
 * same arithmetic), each value row decoded once. So the output is bitwise attn_part's, and K and V are read once.
 * The scores of KV head g: [G][sp_ldsc] in scratch slot g % n_slots (below the slot's tail: each thread's rotated
 * queries, decoded rows and repacked value slices). */

static int attn_split_mode = -1; /* be_cpu_attn_split */
static int attn_split_off;       /* SLUICE_CPU_ATTN_SPLIT=0: the automatic choice never splits (timing the items it
                                    replaces in one process's environment; the bits are the same either way) */
static pthread_once_t attn_split_once = PTHREAD_ONCE_INIT;

static void attn_split_env(void) {
    const char *e = getenv("SLUICE_CPU_ATTN_SPLIT");
    attn_split_off = e && !strcmp(e, "0");
}

int be_cpu_attn_split(int mode) {
    const int old = attn_split_mode;
    attn_split_mode = mode;
    return old;
}

static float *split_scores(const attn_job *j, int g) {
    const cpu_ctx *c = j->c;
    return c->scratch + (size_t)(g % c->n_slots) * c->slot_floats +
           (size_t)(g / c->n_slots) * (size_t)j->group * j->sp_ldsc;
}

/* This thread's tail of its slot: [rotated queries (q4r): G * hd][BE_KV_TILE rows of max(hd, vd)][repacked
 * value slices (bytes)]. */
static float *split_tail(const attn_job *j) {
    const cpu_ctx *c = j->c;
    return c->scratch + (size_t)pool_thread(c->pool) * c->slot_floats + (c->slot_floats - j->sp_tail);
}

/* (1): items (KV head g, chunk of keys). */
static void split_scores_part(void *ctx, size_t begin, size_t end) {
    attn_job *j = ctx;
    const be_attn *a = j->a;
    const int G = j->group;
    float *qr = split_tail(j), *tile = qr + (j->kt == KV_Q4R_Y ? (size_t)G * (size_t)a->head_dim : 0);
    for (size_t it = begin; it < end; it++) {
        const int g = (int)(it / (size_t)j->sp_nch), k0 = (int)(it % (size_t)j->sp_nch) * j->sp_chunk;
        const int kn = j->sp_nk - k0 < j->sp_chunk ? j->sp_nk - k0 : j->sp_chunk;
        size_t qs;
        const float *qk = attn_query(j, a->q + (size_t)g * G * a->qstride, (size_t)a->qstride, G, qr, &qs);
        attn_scores(j, qk, qs, G, g, j->sp_p0 + k0, kn, split_scores(j, g) + k0, j->sp_ldsc, tile);
    }
}

/* (2): items query heads. */
static void split_softmax_part(void *ctx, size_t begin, size_t end) {
    const attn_job *j = ctx;
    const be_attn *a = j->a;
    for (size_t h = begin; h < end; h++)
        kern_softmax_rows(j->ops, split_scores(j, (int)h / j->group) + (h % (size_t)j->group) * j->sp_ldsc,
                          j->sp_ldsc, 1, j->sp_nk, a->scale, a->sinks ? a->sinks + h : NULL);
}

/* Values c0 .. c0 + cw - 1 of nt value rows from src (row i at src + i * vrow_bytes, KV head g's) into tile [nt][cw]:
 * f16 / bf16 from their own halves; q8 / q4 (and q4r's rotated values) through a head of cw values made of the
 * slice's whole blocks (their scales, then their codes: a block decodes from its own scale and codes alone, and
 * q4r's values from the run length of the head, which the caller's slices keep: kv.h), so every value is the one
 * kv_decode gives it in the whole head. */
static void split_decode(const attn_job *j, const char *src, int nt, int c0, int cw, float *tile, unsigned char *rp) {
    const sl_kv_type t = j->vt;
    const size_t rb = j->vrow_bytes;
    if (t == SL_KV_F16 || t == SL_KV_BF16 || cw == j->vd) {
        kv_decode(j->ops, t, src + (cw == j->vd ? 0 : 2 * (size_t)c0), rb, nt, cw, tile, (size_t)cw);
        return;
    }
    const size_t nb = (size_t)(j->vd + 31) / 32, b0 = (size_t)c0 / 32, nbw = (size_t)(cw + 31) / 32;
    const size_t hbw = kv_head_bytes(t, cw), codes = hbw - 2 * nbw; /* a slice's codes start at the code of c0 */
    const size_t at = 2 * nb + (t == SL_KV_Q8 ? (size_t)c0 : 16 * b0);
    for (int i = 0; i < nt; i++) {
        memcpy(rp + (size_t)i * hbw, src + (size_t)i * rb + 2 * b0, 2 * nbw);
        memcpy(rp + (size_t)i * hbw + 2 * nbw, src + (size_t)i * rb + at, codes);
    }
    kv_decode(j->ops, t, rp, hbw, nt, cw, tile, (size_t)cw);
}

/* (3): items (KV head g, slice of the value dims): attn_values' sums on the slice's columns. */
static void split_values_part(void *ctx, size_t begin, size_t end) {
    attn_job *j = ctx;
    const be_attn *a = j->a;
    const int G = j->group, vd = j->vd, cap = a->cap, nk = j->sp_nk;
    float *tile = split_tail(j) + (j->kt == KV_Q4R_Y ? (size_t)G * (size_t)a->head_dim : 0);
    unsigned char *rp = (unsigned char *)(tile + (size_t)BE_KV_TILE * (size_t)(a->head_dim > vd ? a->head_dim : vd));
    for (size_t it = begin; it < end; it++) {
        const int g = (int)(it / (size_t)j->sp_nsl), c0 = (int)(it % (size_t)j->sp_nsl) * j->sp_w;
        const int cw = vd - c0 < j->sp_w ? vd - c0 : j->sp_w;
        const float *w = split_scores(j, g);
        const size_t ldw = j->sp_ldsc;
        float *o = a->out + (size_t)g * G * vd + (size_t)c0; /* query head g * G + i's at o + i * vd */
        for (int i = 0; i < G; i++) memset(o + (size_t)i * vd, 0, (size_t)cw * sizeof(float));
        if (a->kv_type_v == SL_KV_F32) {
            const float *vb = (const float *)a->v_cache + (size_t)g * vd + c0;
            const int s0 = j->sp_p0 % cap, n1 = nk < cap - s0 ? nk : cap - s0;
            const size_t ld = (size_t)j->vrow;
            kern_axpy_rows_q(j->ops, w, ldw, G, n1, vb + (size_t)s0 * ld, ld, o, (size_t)vd, cw);
            if (nk > n1) kern_axpy_rows_q(j->ops, w + n1, ldw, G, nk - n1, vb, ld, o, (size_t)vd, cw);
        } else {
            const char *vb = (const char *)a->v_cache + (size_t)g * j->vhead_bytes;
            for (int p = 0; p < nk;) {
                const int s = (j->sp_p0 + p) % cap, run = nk - p < cap - s ? nk - p : cap - s;
                const int nt = run < BE_KV_TILE ? run : BE_KV_TILE;
                split_decode(j, vb + (size_t)s * j->vrow_bytes, nt, c0, cw, tile, rp);
                kern_axpy_rows_q(j->ops, w + p, ldw, G, nt, tile, (size_t)cw, o, (size_t)vd, cw);
                p += nt;
            }
        }
        for (int i = 0; j->vt == KV_Q4R_Y && cw == vd && i < G; i++) kv_q4r_unrotate(o + (size_t)i * vd, vd);
    }
}

/* The split for one token (n == 1, no extra keys) when it applies: fewer KV heads than two per thread (attn_part
 * then claims single query heads), or always (be_cpu_attn_split(1)), and the scores of every query head fit below
 * the slots' tails. Returns 1 when done, 0 to leave it to attn_part. */
static int attn_split(cpu_ctx *c, attn_job *j) {
    const be_attn *a = j->a;
    const int T = pool_size(c->pool), nkv = a->n_kv_heads, G = j->group, hd = a->head_dim, vd = j->vd;
    pthread_once(&attn_split_once, attn_split_env);
    if (a->n != 1 || a->extra || attn_split_mode == 0 ||
        (attn_split_mode < 0 && (attn_split_off || T < 2 || nkv >= 2 * T)))
        return 0;
    key_range(a, 0, &j->sp_p0, &j->sp_nk);
    const int nk = j->sp_nk;
    /* chunks of whole tiles, about four items a thread; slices of whole q8 / q4 blocks (and whole 64-byte f16
     * lines), two a thread; q4r's rotated values in slices of their run length (kv.h), so a slice decodes them
     * with the head's scale factor, and inverse-rotated here once all slices are summed */
    int nch = (4 * T + nkv - 1) / nkv, chunk = (nk + nch - 1) / nch;
    chunk = (chunk + BE_KV_TILE - 1) / BE_KV_TILE * BE_KV_TILE;
    if (chunk < 4 * BE_KV_TILE) chunk = 4 * BE_KV_TILE;
    j->sp_chunk = chunk, j->sp_nch = (nk + chunk - 1) / chunk;
    const int nsl = (2 * T + nkv - 1) / nkv, p = kv_q4r_run(vd) < 1024 ? kv_q4r_run(vd) : 1024;
    int w = (vd + nsl - 1) / nsl;
    w = (w + 31) / 32 * 32;
    if (j->vt == KV_Q4R_Y) w = p % 32 == 0 ? p : vd;
    if (w > vd) w = vd;
    j->sp_w = w, j->sp_nsl = (vd + w - 1) / w;
    j->sp_ldsc = ((size_t)nk + 15) / 16 * 16;
    const size_t rp_bytes = j->vt == SL_KV_F32 ? 0 : (size_t)BE_KV_TILE * kv_head_bytes(j->vt, w);
    j->sp_tail = (j->kt == KV_Q4R_Y ? (size_t)G * (size_t)hd : 0) + (size_t)BE_KV_TILE * (size_t)(hd > vd ? hd : vd) +
                 (rp_bytes + sizeof(float) - 1) / sizeof(float);
    const size_t per = (size_t)((nkv + c->n_slots - 1) / c->n_slots) * (size_t)G * j->sp_ldsc;
    if (j->sp_tail > c->slot_floats || per > c->slot_floats - j->sp_tail) return 0;
    pool_for_any(c->pool, (size_t)nkv * (size_t)j->sp_nch, 1, split_scores_part, j);
    pool_for_any(c->pool, (size_t)a->n_heads, 1, split_softmax_part, j);
    pool_for_any(c->pool, (size_t)nkv * (size_t)j->sp_nsl, 1, split_values_part, j);
    for (int h = 0; j->vt == KV_Q4R_Y && w < vd && h < a->n_heads; h++) kv_q4r_unrotate(a->out + (size_t)h * vd, vd);
    return 1;
}

void cpu_attention(be_backend *be, const be_attn *a) {
    cpu_ctx *c = cpu_of(be);
    const int hd = a->head_dim, kvrow = a->n_kv_heads * hd, vd = a->v_dim > 0 ? a->v_dim : hd;
    const size_t hb = kv_head_bytes(a->kv_type, hd), rb = hb * (size_t)a->n_kv_heads;
    const size_t vhb = kv_head_bytes(a->kv_type_v, vd), vrb = vhb * (size_t)a->n_kv_heads;
    attn_job j = {.a = a, .ops = c->ops, .c = c, .group = a->n_heads / a->n_kv_heads, .kvrow = kvrow,
                  .vrow = a->n_kv_heads * vd, .vd = vd, .row_bytes = rb, .head_bytes = hb, .vrow_bytes = vrb,
                  .vhead_bytes = vhb, .kt = a->kv_type == SL_KV_Q4R ? KV_Q4R_Y : a->kv_type,
                  .vt = a->kv_type_v == SL_KV_Q4R ? KV_Q4R_Y : a->kv_type_v};
    /* q4r's fit costs: the tokens' rows in parallel where no two of them share a ring slot */
    if ((a->kv_type == SL_KV_F32 && a->kv_type_v == SL_KV_F32) || a->n == 1 || a->n > a->cap) encode_part(&j, 0, (size_t)a->n);
    else pool_for(c->pool, (size_t)a->n, 1, encode_part, &j);
    int p0, nk = 0; /* the most keys a token of the batch sees (a chunked layer's: not always the last's) */
    for (int t = a->chunk > 0 ? 0 : a->n - 1, m; t < a->n; t++) {
        key_range(a, t, &p0, &m);
        if (m > nk) nk = m;
    }
    /* a transposed key tile (attn_block_part's dot_cols_q) where the table has the op and the slot holds it beside
     * the decoded rows (forward.c slot_floats does not count it: a small --ctx leaves no room, then no tile) */
    const size_t rows_floats = (size_t)BE_KV_TILE * (size_t)(hd > vd ? hd : vd);
    const size_t xt_floats = c->ops->dot_cols_q && c->slot_floats - rows_floats > (size_t)2 * BE_KV_TILE * (size_t)hd
                                 ? (size_t)BE_KV_TILE * (size_t)hd : 0;
    const size_t room = c->slot_floats - rows_floats - xt_floats;
    const size_t per = (size_t)j.group * ((size_t)nk + (j.kt == KV_Q4R_Y ? (size_t)hd : 0)); /* + rotated queries */
    const int bmax = (int)(room / per < (size_t)a->n ? room / per : (size_t)a->n);
    if (a->n > 1 && bmax >= 1 && !a->extra) { /* blocks of tokens per KV head, enough for two per thread where tokens allow */
        const int threads2 = 2 * pool_size(c->pool), per_head = (threads2 + a->n_kv_heads - 1) / a->n_kv_heads;
        const int want = (a->n + per_head - 1) / per_head;
        j.block = want < bmax ? want : bmax;
        j.cols = xt_floats > 0 && j.block >= 4; /* the transposition pays for itself over 4 tokens' query heads */
        j.ldsc = nk;
        const size_t items = (size_t)a->n_kv_heads * (size_t)((a->n + j.block - 1) / j.block);
        pool_for_any(c->pool, items, 1, attn_block_part, &j);
        goto gate;
    }
    /* claimed dynamically: a thread the system delays holds up only the heads it holds; a KV head's query
     * heads at a time (items t * n_heads + h), so one thread reads each KV head's rows from memory and its
     * other query heads find them in its cache, where half-group claims had both threads fetch them; whole
     * heads only when there are enough for two claims per thread */
    if (attn_split(c, &j)) goto gate;
    const size_t items = (size_t)a->n * (size_t)a->n_heads, kv_items = (size_t)a->n * (size_t)a->n_kv_heads;
    pool_for_any(c->pool, items, kv_items >= 2 * (size_t)pool_size(c->pool) ? (size_t)j.group : 1, attn_part, &j);
gate:
    if (a->gated) {
        for (int t = 0; t < a->n; t++)
            for (int h = 0; h < a->n_heads; h++) {
                const float *gate = a->q + (size_t)t * a->ldq + (size_t)h * a->qstride + hd;
                float *o = a->out + (size_t)t * a->ldo + (size_t)h * vd; /* (gated: vd = hd) */
                for (int d = 0; d < hd; d++) o[d] *= kern_sigmoid(gate[d]);
            }
    }
}

/* ---- Gated DeltaNet --------------------------------------------------------------------------- */

void cpu_dn_conv(be_backend *be, const be_dn *d) {
    (void)be;
    const int n = d->n, K = d->conv_k, cq = 2 * d->nk * d->dk + d->nv * d->dv;
    const float *cs_in = d->conv_in_state;
    /* Row s of the window: s < 0 -> conv state row K-1+s, else conv_in[s]. */
    for (int t = 0; t < n; t++) {
        float *y = d->conv_out + (size_t)t * cq;
        for (int c = 0; c < cq; c++) {
            const int qk = d->nk * d->dk, part = c < qk ? 0 : c < 2 * qk ? 1 : 2;
            const float *wc = d->conv_w ? d->conv_w + (size_t)c * K : d->conv_parts[part] + (size_t)(c - part * qk) * K;
            float acc = 0.0f;
            for (int i = 0; i < K; i++) {
                int s = t - K + 1 + i;
                float u = s < 0 ? cs_in[(size_t)(K - 1 + s) * cq + c] : d->conv_in[(size_t)s * cq + c];
                acc += wc[i] * u;
            }
            y[c] = kern_silu(acc);
        }
    }
    for (int i = 0; i < K - 1; i++) {
        int s = n - K + 1 + i;
        const float *src = s < 0 ? cs_in + (size_t)(K - 1 + s) * cq : d->conv_in + (size_t)s * cq;
        memcpy(d->conv_out_state + (size_t)i * cq, src, (size_t)cq * sizeof(float));
    }
}

static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

static void l2norm(float *x, int n, float scale) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    float inv = (float)(1.0 / sqrt(ss + 1e-6));
    for (int i = 0; i < n; i++) x[i] = (x[i] * inv) * scale;
}

void cpu_dn_gates(be_backend *be, const be_dn *d) {
    (void)be;
    const int nk = d->nk, nv = d->nv, dk = d->dk, r = nv / nk, cq = 2 * nk * dk + nv * d->dv;
    const float qscale = 1.0f / sqrtf((float)dk);
    for (int t = 0; t < d->n; t++) {
        const float *ba = d->ba + (size_t)t * 2 * nv;
        float *gt = d->gates + (size_t)t * 2 * nv;
        for (int h = 0; h < nv; h++) {
            float b, a;
            if (!d->ba_grouped) {
                b = ba[h];
                a = ba[nv + h];
            } else { /* block g = h / r: [b (r) | a (r)] */
                b = ba[(h / r) * 2 * r + h % r];
                a = ba[(h / r) * 2 * r + r + h % r];
            }
            gt[h] = kern_sigmoid(b);
            gt[nv + h] = -expf(d->A_log[h]) * softplus(a + d->dt_bias[h]);
        }
        float *c = d->conv_out + (size_t)t * cq;
        for (int g = 0; g < nk; g++) {
            l2norm(c + (size_t)g * dk, dk, qscale);
            l2norm(c + (size_t)(nk + g) * dk, dk, 1.0f);
        }
    }
}

void cpu_kda_gates(be_backend *be, const be_dn *d) {
    (void)be;
    const int nk = d->nk, nv = d->nv, dk = d->dk, cq = 2 * nk * dk + nv * d->dv, lg = nv + nv * dk;
    const float qscale = 1.0f / sqrtf((float)dk);
    for (int t = 0; t < d->n; t++) {
        const float *ba = d->ba + (size_t)t * lg;
        float *gt = d->gates + (size_t)t * lg;
        for (int h = 0; h < nv; h++) {
            gt[h] = kern_sigmoid(ba[h]);
            const float decay = expf(d->A_log[h]);
            for (int i = 0; i < dk; i++) {
                const int c = h * dk + i;
                gt[nv + c] = d->kda_lower < 0 ? d->kda_lower * kern_sigmoid(decay * (ba[nv + c] + d->dt_bias[c]))
                                              : -decay * softplus(ba[nv + c] + d->dt_bias[c]);
            }
        }
        float *c = d->conv_out + (size_t)t * cq;
        for (int g = 0; g < nk; g++) {
            l2norm(c + (size_t)g * dk, dk, qscale);
            l2norm(c + (size_t)(nk + g) * dk, dk, 1.0f);
        }
    }
}

typedef struct {
    const be_dn *d;
    const kern_ops *ops;
    cpu_ctx *c;
    int chunked;
    atomic_int next_slot;
} dn_job;

/* q, k, v of token t for value head h. */
static inline const float *tok_q(const be_dn *d, int t, int h) {
    return d->conv_out + (size_t)t * (2 * d->nk * d->dk + d->nv * d->dv) + (size_t)(h / (d->nv / d->nk)) * d->dk;
}
static inline const float *tok_k(const be_dn *d, int t, int h) { return tok_q(d, t, h) + (size_t)d->nk * d->dk; }
static inline const float *tok_v(const be_dn *d, int t, int h) {
    return d->conv_out + (size_t)t * (2 * d->nk * d->dk + d->nv * d->dv) + (size_t)2 * d->nk * d->dk + (size_t)h * d->dv;
}

/* Token recurrence for head h: S <- a S; m = S^T k; d = beta (v - m); S += k d^T; o = S^T q. */
static void head_recurrent(const be_dn *d, const kern_ops *ops, int h, float *S, float *tmp) {
    const int dk = d->dk, dv = d->dv, nv = d->nv;
    float *m = tmp;
    const size_t lg = d->kda ? (size_t)nv + (size_t)nv * dk : (size_t)2 * nv; /* a token's gates */
    for (int t = 0; t < d->n; t++) {
        const float *q = tok_q(d, t, h), *k = tok_k(d, t, h), *v = tok_v(d, t, h);
        const float *gt = d->gates + (size_t)t * lg;
        const float beta = gt[h];
        const float alpha = d->kda ? 0.0f : expf(gt[nv + h]);
        memset(m, 0, (size_t)dv * sizeof(float));
        for (int i = 0; i < dk; i++) {
            float *row = S + (size_t)i * dv;
            const float a = d->kda ? expf(gt[nv + h * dk + i]) : alpha; /* KDA: a decay per key dimension */
            for (int e = 0; e < dv; e++) row[e] *= a;
            ops->axpy(k[i], row, m, dv);
        }
        for (int e = 0; e < dv; e++) m[e] = (v[e] - m[e]) * beta;
        float *o = d->out + (size_t)t * d->ldo + (size_t)h * dv;
        memset(o, 0, (size_t)dv * sizeof(float));
        for (int i = 0; i < dk; i++) {
            float *row = S + (size_t)i * dv;
            ops->axpy(k[i], m, row, dv);
            ops->axpy(q[i], row, o, dv);
        }
    }
}

/* Chunked form (docs/MATH.md, Gated DeltaNet) over the whole micro-batch as one chunk of n <= DN_CHUNK tokens;
 * mathematically equal to head_recurrent, summed in another order (agrees to ~1e-6 relative).
 * Scratch: G [C], T [C][C], M [C][C], U [C][dv], W [C][dk], ks [C][dk], kb [C][dk], tmp [dv]. */
static void head_chunked(const be_dn *d, const kern_ops *ops, int h, float *S, float *scratch) {
    const int n = d->n, dk = d->dk, dv = d->dv, nv = d->nv, C = DN_CHUNK;
    float *G = scratch, *T = G + C, *M = T + (size_t)C * C, *U = M + (size_t)C * C;
    float *W = U + (size_t)C * dv, *ks = W + (size_t)C * dk, *kb = ks + (size_t)C * dk, *tmp = kb + (size_t)C * dk;

    /* cumulative log decay, k~ = beta k, ks = k~ exp(G) */
    float acc = 0.0f;
    for (int i = 0; i < n; i++) {
        acc += d->gates[(size_t)i * 2 * nv + nv + h];
        G[i] = acc;
        const float beta = d->gates[(size_t)i * 2 * nv + h], eg = expf(G[i]);
        const float *k = tok_k(d, i, h);
        for (int a = 0; a < dk; a++) {
            kb[(size_t)i * dk + a] = k[a] * beta;
            ks[(size_t)i * dk + a] = kb[(size_t)i * dk + a] * eg;
        }
    }
    /* T = (I + A)^-1 by forward substitution, A_ij = (k~_i . k_j) D_ij (j < i). Row i first holds
     * N = -A, then T_ij = N_ij + sum_{j<m<i} N_im T_mj in increasing j (N_im, m > j, still unread). */
    for (int i = 0; i < n; i++) {
        float *Ti = T + (size_t)i * C;
        for (int c = 0; c < i; c++)
            Ti[c] = -(ops->dot(kb + (size_t)i * dk, tok_k(d, c, h), dk) * expf(G[i] - G[c]));
        for (int c = 0; c < i; c++) {
            float s = Ti[c];
            for (int m = c + 1; m < i; m++) s += Ti[m] * T[(size_t)m * C + c];
            Ti[c] = s;
        }
        Ti[i] = 1.0f;
    }
    /* U = T (beta v), W = T ks; then V' = U - W S (in U) */
    for (int i = 0; i < n; i++) {
        float *Ui = U + (size_t)i * dv, *Wi = W + (size_t)i * dk;
        memset(Ui, 0, (size_t)dv * sizeof(float));
        memset(Wi, 0, (size_t)dk * sizeof(float));
        for (int m = 0; m <= i; m++) {
            const float tim = T[(size_t)i * C + m], beta = d->gates[(size_t)m * 2 * nv + h];
            const float *v = tok_v(d, m, h);
            for (int e = 0; e < dv; e++) Ui[e] += tim * (v[e] * beta);
            ops->axpy(tim, ks + (size_t)m * dk, Wi, dk);
        }
        memset(tmp, 0, (size_t)dv * sizeof(float));
        for (int a = 0; a < dk; a++) ops->axpy(Wi[a], S + (size_t)a * dv, tmp, dv);
        for (int e = 0; e < dv; e++) Ui[e] -= tmp[e];
    }
    /* O_i = (q_i exp(G_i)) S + sum_{c<=i} (q_i . k_c) D_ic V'_c */
    for (int i = 0; i < n; i++) {
        const float *q = tok_q(d, i, h);
        const float eg = expf(G[i]);
        float *o = d->out + (size_t)i * d->ldo + (size_t)h * dv;
        memset(o, 0, (size_t)dv * sizeof(float));
        for (int a = 0; a < dk; a++) ops->axpy(q[a] * eg, S + (size_t)a * dv, o, dv);
        float *Mi = M + (size_t)i * C;
        for (int c = 0; c <= i; c++) Mi[c] = ops->dot(q, tok_k(d, c, h), dk) * expf(G[i] - G[c]);
        for (int c = 0; c <= i; c++) ops->axpy(Mi[c], U + (size_t)c * dv, o, dv);
    }
    /* S <- exp(G_last) S + sum_c (k_c exp(G_last - G_c)) V'_c^T */
    const float gl = G[n - 1], el = expf(gl);
    for (int c = 0; c < n; c++) tmp[c] = expf(gl - G[c]);
    for (int a = 0; a < dk; a++) {
        float *row = S + (size_t)a * dv;
        for (int e = 0; e < dv; e++) row[e] *= el;
        for (int c = 0; c < n; c++) ops->axpy(tok_k(d, c, h)[a] * tmp[c], U + (size_t)c * dv, row, dv);
    }
}

static void dn_part(void *ctx, size_t begin, size_t end) {
    dn_job *j = ctx;
    int slot = atomic_fetch_add(&j->next_slot, 1);
    float *tmp = j->c->scratch + (size_t)slot * j->c->slot_floats;
    size_t hs = (size_t)j->d->dk * j->d->dv;
    for (size_t h = begin; h < end; h++) {
        float *S = j->d->ssm_out + h * hs;
        memcpy(S, j->d->ssm_in + h * hs, hs * sizeof(float));
        if (j->chunked) head_chunked(j->d, j->ops, (int)h, S, tmp);
        else head_recurrent(j->d, j->ops, (int)h, S, tmp);
    }
}

static void dn_run(be_backend *be, const be_dn *d, int chunked) {
    cpu_ctx *c = cpu_of(be);
    if (chunked && d->n > DN_CHUNK) {
        cpu_fail(be, SL_EINVAL, "dn_chunk: more than 64 tokens");
        return;
    }
    dn_job j = {.d = d, .ops = c->ops, .c = c, .chunked = chunked};
    atomic_init(&j.next_slot, 0);
    pool_for(c->pool, (size_t)d->nv, 1, dn_part, &j);
}

void cpu_dn_step(be_backend *be, const be_dn *d) { dn_run(be, d, 0); }
void cpu_dn_chunk(be_backend *be, const be_dn *d) { dn_run(be, d, 1); }

void cpu_dn_norm(be_backend *be, const be_dn *d) {
    const kern_ops *ops = cpu_of(be)->ops;
    const int nv = d->nv, dv = d->dv, zd = nv * dv;
    for (int t = 0; t < d->n; t++)
        for (int h = 0; h < nv; h++) {
            float *o = d->out + (size_t)t * d->ldo + (size_t)h * dv;
            const float *z = d->z + (size_t)t * zd + (size_t)h * dv;
            ops->rmsnorm(o, d->norm_w, 0.0f, d->eps, o, dv);
            for (int e = 0; e < dv; e++) o[e] *= d->kda ? kern_sigmoid(z[e]) : kern_silu(z[e]);
        }
}

/* ---- LFM2 short convolution ------------------------------------------------------------------- */

void cpu_short_conv(be_backend *be, const be_sconv *s) {
    (void)be;
    const int ch = s->ch, K = s->k, n = s->n;
    for (int t = 0; t < n; t++) { /* u = B * x over x */
        float *r = s->bcx + (size_t)t * s->ldb;
        for (int c = 0; c < ch; c++) r[2 * ch + c] = r[c] * r[2 * ch + c];
    }
#define U(p, c) ((p) < 0 ? s->state_in[(size_t)(K - 1 + (p)) * ch + (c)] : s->bcx[(size_t)(p) * s->ldb + 2 * ch + (c)])
    for (int t = 0; t < n; t++)
        for (int c = 0; c < ch; c++) {
            float y = 0.0f;
            for (int j = 0; j < K; j++) y += s->w[(size_t)c * K + j] * U(t - K + 1 + j, c);
            s->out[(size_t)t * s->ldo + c] = s->bcx[(size_t)t * s->ldb + ch + c] * y;
        }
    for (int i = 0; i < K - 1; i++) /* the last K-1 rows of [state; u] */
        for (int c = 0; c < ch; c++) s->state_out[(size_t)i * ch + c] = U(n - (K - 1) + i, c);
#undef U
}

/* ---- Mamba2 ----------------------------------------------------------------------------------- */

/* softplus as torch computes it (threshold 20: x itself above). */
static float softplus_t(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* The causal depthwise conv1d with bias and SiLU over x B C, and the new conv state (be_mamba). */
static void mamba_conv(const be_mamba *m, int ch) {
    const int K = m->k, n = m->n, gi = m->nh * m->hd;
#define U(p, c) ((p) < 0 ? m->conv_in_state[(size_t)(K - 1 + (p)) * ch + (c)] : m->in[(size_t)(p) * m->ldi + gi + (c)])
    for (int t = 0; t < n; t++)
        for (int c = 0; c < ch; c++) {
            float y = m->conv_b ? m->conv_b[c] : 0.0f;
            for (int j = 0; j < K; j++) y += m->conv_w[(size_t)c * K + j] * U(t - K + 1 + j, c);
            m->conv_out[(size_t)t * ch + c] = kern_silu(y);
        }
    for (int i = 0; i < K - 1; i++)
        for (int c = 0; c < ch; c++) m->conv_out_state[(size_t)i * ch + c] = U(n - (K - 1) + i, c);
#undef U
}

void cpu_mamba2(be_backend *be, const be_mamba *m) {
    (void)be;
    const int nh = m->nh, hd = m->hd, G = m->g, N = m->ns, I = nh * hd, ch = I + 2 * G * N, per = nh / G;
    mamba_conv(m, ch);
    float *S = m->ssm_out;
    memcpy(S, m->ssm_in, (size_t)nh * hd * N * sizeof(float));
    for (int t = 0; t < m->n; t++) {
        const float *xc = m->conv_out + (size_t)t * ch, *row = m->in + (size_t)t * m->ldi;
        float *o = m->out + (size_t)t * m->ldo;
        for (int h = 0; h < nh; h++) {
            const float dt = softplus_t(row[I + ch + h] + m->dt_bias[h]), A = -expf(m->A_log[h]), dA = expf(dt * A);
            const float *B = xc + I + (h / per) * N, *C = xc + I + G * N + (h / per) * N, *x = xc + (size_t)h * hd;
            for (int p = 0; p < hd; p++) {
                float *s = S + ((size_t)h * hd + p) * N, y = 0.0f;
                const float dx = dt * x[p];
                for (int j = 0; j < N; j++) {
                    s[j] = s[j] * dA + dx * B[j];
                    y += s[j] * C[j];
                }
                o[(size_t)h * hd + p] = y + m->D[h] * x[p];
            }
        }
        const int gs = I / G; /* the gated RMSNorm per group */
        for (int i = 0; i < I; i++) o[i] *= kern_silu(row[i]);
        for (int g = 0; g < G; g++) {
            double ss = 0.0;
            for (int i = 0; i < gs; i++) ss += (double)o[g * gs + i] * (double)o[g * gs + i];
            const float inv = (float)(1.0 / sqrt(ss / gs + (double)m->eps));
            for (int i = 0; i < gs; i++) o[g * gs + i] = m->norm_w[g * gs + i] * (o[g * gs + i] * inv);
        }
    }
}
