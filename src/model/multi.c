/*
 * multi.c — layer-major evaluation (fwd_eval_multi): several sequences in one pass (sl_batch_eval: a server's batch of
 * decode steps and prompt chunks), or one sequence's long input in chunks of WIDE_MAX (forward.c fwd_eval). Moved out
 * of forward.c (the decoder skeleton and the micro-batch step stay there), whose helpers it calls through
 * fwd_internal.h (fwd_mixer, fwd_emit_logits).
 *
 * Sections: the wider attention buffers (mix_set), joint attention of a decode batch, the pass's buffers (multi_pass,
 * kept in fwd_ws between passes), embed, mixers, FFNs, settle, logits, fwd_eval_multi.
 */
#include <stdlib.h>
#include <string.h>

#include "model/fwd_internal.h"
#include "sluice.h"
#include "util/err.h"

/* Layer-major evaluation of several sequences together (one sequence: a long input). Each layer runs
 * over every row before the next layer starts: the mixers sequence by sequence, micro-batch by
 * micro-batch from the start of each sequence's tokens (its DeltaNet state carried from one to the
 * next), the MoE block over all rows of all sequences at once (fwd_moe_wide), so a streaming provider
 * reads each chosen expert once per layer per call, however many sequences chose it. Every row's
 * arithmetic depends only on its own sequence (kernels.h: a matmul row depends only on its input row),
 * so each sequence gets bitwise what eval_batch gives it over the same micro-batches, alone.
 * The DeltaNet state of the call is built in the non-current slot and a spare buffer, so a failure
 * leaves every sequence exactly as it was (nothing of this call is committed).
 * Stages: multi_alloc (the pass's buffers), multi_begin (embed), per layer multi_mixer and multi_ffn, multi_logits
 * (the gathered last rows' logits, downloaded once: the pass's wait), multi_settle (snapshot put back: commit or roll
 * back), multi_finish (positions and logits), multi_free. A batch of decode steps on a device backend waits for the
 * device once (one download of every sequence's logits, then the sync that reads the sticky error) and allocates
 * nothing once its buffers have grown (tests/test_batch_ops.c counts its backend calls). */
#define FWD_SAVED 4 /* rings a pass may save per (item, layer): ring_of */

/* One layer-major pass's buffers: backend memory for the rows' floats, host memory for routing (fwd_wide's
 * index arrays and weights) and the rollback records. */
/* A layer-major pass's wider buffers for softmax attention (ws->mix_rows rows where ws's hold FWD_BATCH): the
 * block input h, q/k/v, the mixer output, out and the IN and MID int8 slots, swapped into ws around a layer's
 * attention and MoE router (mix_swap) so that fwd_attention runs unchanged over micro-batches of that size. Every
 * op's row depends on its own row only: the same bits as FWD_BATCH at a time, in fewer and fuller launches. */
typedef struct mix_set {
    float *h, *big, *k, *v, *mix, *out;
    void *act[2];
    size_t bytes[8];
    int rows;
} mix_set;

static void mix_set_free(fwd_ws *ws, mix_set *m) {
    void *p[8] = {m->h, m->big, m->k, m->v, m->mix, m->out, m->act[0], m->act[1]};
    for (int i = 0; i < 8; i++)
        if (p[i]) ws->be->free(ws->be, p[i], m->bytes[i], BE_BUF_DEVICE); /* (a decode batch made none) */
    memset(m, 0, sizeof *m);
}

/* 0 (m->rows 0: FWD_BATCH micro-batches do), or SL_ENOMEM. rows: the longest item's. */
static sl_status mix_set_new(fwd_ws *ws, const fam_config *cfg, int rows, mix_set *m) {
    memset(m, 0, sizeof *m);
    if (rows > ws->mix_rows) rows = ws->mix_rows;
    if (rows <= FWD_BATCH || cfg->kv_lora > 0 || cfg->hc_mult > 0 || !fwd_any_layer(cfg, 0)) return SL_OK;
    const size_t R = (size_t)rows, kvrow = (size_t)cfg_kv_row(cfg), f = sizeof(float);
    const size_t b[8] = {R * (size_t)cfg->hidden * f, R * (size_t)ws->n_big * f, R * kvrow * f,
                         R * (size_t)cfg_v_row(cfg) * f,
                         R * (size_t)ws->n_mix * f, R * (size_t)cfg->hidden * f, kern_act_bytes(rows, ws->act_cols),
                         kern_act_bytes(rows, ws->act_cols)};
    void *p[8];
    for (int i = 0; i < 8; i++) p[i] = ws->be->alloc(ws->be, b[i], BE_BUF_DEVICE);
    *m = (mix_set){p[0], p[1], p[2], p[3], p[4], p[5], {p[6], p[7]}, {b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]}, rows};
    for (int i = 0; i < 8; i++)
        if (!p[i]) {
            mix_set_free(ws, m);
            return SL_ENOMEM;
        }
    return SL_OK;
}

/* ws's micro-batch buffers <-> m's (twice: back as they were). */
static void mix_swap(fwd_ws *ws, mix_set *m) {
    float *t;
    void *a;
#define SWAP(x, y) (t = (x), (x) = (y), (y) = t)
    SWAP(ws->h, m->h), SWAP(ws->big, m->big), SWAP(ws->k, m->k), SWAP(ws->v, m->v), SWAP(ws->mix, m->mix);
    SWAP(ws->out, m->out);
#undef SWAP
    a = ws->act[FWD_ACT_IN], ws->act[FWD_ACT_IN] = m->act[0], m->act[0] = a;
    a = ws->act[FWD_ACT_MID], ws->act[FWD_ACT_MID] = m->act[1], m->act[1] = a;
    int r = ws->mb;
    ws->mb = m->rows, m->rows = r;
}

/* Layer l's attention over every item's rows at once, where they fit one micro-batch (a batch of decode steps,
 * continuous batching): fwd_attention_items, each row bitwise its sequence's own pass. 1 done, 0 not this case. */
static int joint_mixer(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int l, const fwd_item *it, int n_items,
                       int n, float *X) {
    if (n_items < 2 || n > FWD_BATCH || cfg->layer_linear[l] || cfg->kv_lora > 0 || cfg->hc_mult > 0) return 0;
    fwd_seq *sqs[FWD_BATCH];
    int ns[FWD_BATCH], p0[FWD_BATCH];
    for (int i = 0; i < n_items; i++) sqs[i] = it[i].sq, ns[i] = it[i].n, p0[i] = it[i].sq->n_past;
    fwd_norm_rows(ws, X, lw->attn_norm, cfg->zero_centred_norm, cfg->eps, ws->h, n, cfg->hidden);
    fwd_attention_items(ws, sqs, ns, p0, n_items, cfg, lw, l);
    fwd_post_norm(ws, cfg, lw->post_attn_norm, ws->out, n);
    ws->be->add(ws->be, X, ws->out, (size_t)n * (size_t)cfg->hidden);
    return 1;
}

typedef struct multi_pass {
    const fwd_item *it;
    int n_items, n, n_last, n_lg, traced;
    size_t nH, nR;      /* bytes of n rows of H floats, of the residual's (cfg_res_width) */
    float *X, *HN, *O;  /* [n][R], [n][H], [n][H]: the residual stream, its norm, the MoE output */
    float *HT, *HM;     /* V4: [n][R] the normed streams, [n][fwd_hc_ldm] the FFN's hyper-connection (else NULL) */
    int32_t *tok;       /* [n] HOST: every row's token (hash routing) */
    float *SC;          /* [n][H]: LongCat-Flash's shortcut MoE output, from a pair's first layer to its second */
    fwd_wide wb;
    /* per (item, layer): the original DeltaNet buffers a multi-micro-batch item displaced, and its slot; for a
     * sliding layer's KV ring that more than one micro-batch writes, a copy of the ring (k, v): those writes
     * reach rows the sequence still needs if the pass fails and is rolled back */
    float **saved;
    unsigned char *orig;
    int *row0;                     /* [n_items] the item's first row */
    float *last_rows, *last_logits; /* [n_last][R], [n_lg][V]: the gathered last rows of last-token items (device
                                     * logits: NULL on a host backend, whose LM head writes ws->lg_host) */
    int *last_idx;                  /* [n_last] HOST: X's row of each (multi_logits) */
    mix_set ms;                     /* wider attention micro-batches (a device backend's) */
} multi_pass;

#define DEV(bytes) be->alloc(be, (bytes), BE_BUF_DEVICE)
#define UNDEV(p, bytes) be->free(be, (p), (bytes), BE_BUF_DEVICE)

/* Every buffer of the pass; mp is zeroed first, so multi_free may follow any failure. 0 or SL_ENOMEM. */
/* Buffer i of eval_multi's (fwd_ws mp): at least bytes, kept from the pass before when it holds them (its contents
 * are not kept: every pass writes before it reads); a larger one replaces it. NULL when out of memory. */
static void *mp_buf(fwd_ws *ws, int i, size_t bytes) {
    if (ws->mp[i].p && ws->mp[i].bytes >= bytes) return ws->mp[i].p;
    if (ws->mp[i].p) ws->be->free(ws->be, ws->mp[i].p, ws->mp[i].bytes, BE_BUF_DEVICE);
    ws->mp[i].p = ws->be->alloc(ws->be, bytes, BE_BUF_DEVICE);
    ws->mp[i].bytes = ws->mp[i].p ? bytes : 0;
    return ws->mp[i].p;
}

/* ws->lg_host of at least bytes (fwd_ws): pinned memory for a device backend's downloads, the backend's own (host)
 * memory on a host backend; kept from the pass before when it holds them. 1, or 0 when out of memory. */
static int lg_host(fwd_ws *ws, size_t bytes) {
    if (ws->lg_host && ws->lg_host_bytes >= bytes) return 1;
    if (ws->lg_host) ws->be->free(ws->be, ws->lg_host, ws->lg_host_bytes, ws->lg_host_flags);
    ws->lg_host_flags = ws->be->is_host ? BE_BUF_DEVICE : BE_BUF_PINNED;
    ws->lg_host = ws->be->alloc(ws->be, bytes, ws->lg_host_flags);
    ws->lg_host_bytes = ws->lg_host ? bytes : 0;
    return ws->lg_host != NULL;
}

static sl_status multi_alloc(fwd_ws *ws, const fam_config *cfg, const fwd_item *it, int n_items, multi_pass *mp,
                             sl_error *err) {
    const size_t H = (size_t)cfg->hidden, E = (size_t)cfg_router_rows(cfg), k = (size_t)cfg->n_experts_used;
    const size_t V = (size_t)cfg->vocab, L = (size_t)cfg->n_layers;
    memset(mp, 0, sizeof *mp);
    mp->it = it;
    mp->n_items = n_items;
    for (int i = 0; i < n_items; i++) {
        mp->n += it[i].n;
        mp->n_last += it[i].logits && !it[i].all_logits;
    }
    mp->n_lg = mp->n_last < FWD_BATCH ? mp->n_last : FWD_BATCH;
    const size_t n = (size_t)mp->n, nH = mp->nH = n * H * sizeof(float), R = (size_t)cfg_res_width(cfg);
    mp->nR = n * R * sizeof(float);
    mp->X = mp_buf(ws, 0, mp->nR);
    mp->HT = cfg->hc_mult > 0 ? mp_buf(ws, 1, mp->nR) : NULL;
    mp->HM = cfg->hc_mult > 0 ? mp_buf(ws, 2, n * (size_t)fwd_hc_ldm(cfg) * sizeof(float)) : NULL;
    mp->tok = malloc(n * sizeof(int32_t));
    mp->HN = mp_buf(ws, 3, nH);
    mp->O = mp_buf(ws, 4, nH);
    mp->SC = cfg->moe_shortcut ? mp_buf(ws, 5, nH) : NULL;
    mp->wb = (fwd_wide){mp_buf(ws, 6, n * E * sizeof(float)), malloc(n * k * sizeof(int)), malloc(n * k * sizeof(float)),
                        malloc(n * k * sizeof(int)), malloc(n * k * sizeof(int)), mp_buf(ws, 7, nH), mp_buf(ws, 8, n * sizeof(float))};
    mp->saved = calloc((size_t)n_items * L * FWD_SAVED, sizeof *mp->saved);
    mp->orig = malloc((size_t)n_items * L);
    mp->row0 = malloc((size_t)n_items * sizeof(int));
    mp->last_rows = mp->n_last ? mp_buf(ws, 9, (size_t)mp->n_last * R * sizeof(float)) : NULL;
    mp->last_logits = mp->n_last && !ws->be->is_host ? mp_buf(ws, 10, (size_t)mp->n_lg * V * sizeof(float)) : NULL;
    mp->last_idx = malloc((size_t)(mp->n_last ? mp->n_last : 1) * sizeof(int));
    const int lg_ok = !mp->n_last || lg_host(ws, (size_t)mp->n_last * V * sizeof(float));
    const fwd_wide *wb = &mp->wb;
    if (!mp->X || !mp->HN || !mp->O || (cfg->moe_shortcut && !mp->SC) || !wb->router || !wb->top_e || !wb->top_w || !wb->e_tok || !wb->e_slot ||
        !wb->sh_y || !wb->sg || !mp->saved || !mp->orig || !mp->row0 || !mp->tok ||
        (cfg->hc_mult > 0 && (!mp->HT || !mp->HM)) ||
        (mp->n_last && (!mp->last_rows || (!ws->be->is_host && !mp->last_logits))) || !mp->last_idx || !lg_ok) {
        return err_set(err, SL_ENOMEM, "out of memory for a %d-token evaluation", mp->n);
    }
    return 0;
}

/* The one cleanup path of the pass: frees what multi_alloc made but the backend buffers, which the workspace keeps
 * for the next pass (fwd_ws mp; fwd_ws_free gives them back). NULL pointers are no-ops. */
static void multi_free(multi_pass *mp) {
    free(mp->tok);
    free(mp->wb.top_e);
    free(mp->wb.top_w);
    free(mp->wb.e_tok);
    free(mp->wb.e_slot);
    free(mp->saved);
    free(mp->orig);
    free(mp->row0);
    free(mp->last_idx);
}

/* Each item's rows embedded and its DeltaNet slots recorded (the rollback's reference); the first MoE layer's
 * reads start now, under its mixer's compute. Cannot fail (a backend failure is sticky: the first sync). */
static void multi_begin(fwd_ws *ws, const fam_config *cfg, const fam_weights *w, const tn_expert_src *experts,
                        multi_pass *mp) {
    const int L = cfg->n_layers;
    const fwd_item *it = mp->it;
    for (int i = 0, r = 0; i < mp->n_items; r += it[i].n, i++) {
        mp->row0[i] = r;
        for (int l = 0; l < L; l++) mp->orig[(size_t)i * L + l] = it[i].sq->lin_cur[l];
        memcpy(mp->tok + r, it[i].tokens, (size_t)it[i].n * sizeof(int32_t));
    }
    /* every item's rows in one op (a row depends on its token only): one upload and launch a pass on a device, where
     * an op per item made a serving step's eight */
    fwd_embed_rows(ws, cfg, w, mp->tok, mp->n, mp->X);
    fwd_embed_scale(ws, cfg, mp->X, mp->n);
    mp->traced = ws->trace && mp->n_items == 1; /* the hook follows one sequence's positions */
    for (int l = 0; l < L; l++)
        if (cfg->layer_moe[l]) {
            fwd_moe_hint_first(ws, cfg, &w->layers[l], l, experts, mp->n, mp->X, &mp->wb);
            break;
        }
    if (mp->traced) ws->trace(ws->trace_ctx, 0, it[0].sq->n_past, mp->n, mp->X);
}

/* The rings of layer l a pass over more than one micro-batch may overwrite, slot k2 < FWD_SAVED: the KV ring's
 * k and v, V4's compressor and indexer rings (NULL: none), and their bytes. */
static float *ring_of(const fwd_seq *sq, int l, int k2, size_t *bytes) {
    *bytes = k2 < 2 ? fwd_kv_bytes(sq, l, k2) : sq->cmp_ring[l] ? fwd_dsv4_ring_bytes(sq, l, k2 - 2) : 0;
    return k2 == 0 ? sq->k_cache[l] : k2 == 1 ? sq->v_cache[l] : k2 == 2 ? sq->cmp_ring[l] : sq->idx_ring[l];
}

/* A copy of sliding layer l's rings (ring_of) into sv[0..FWD_SAVED), for multi_settle to put back on failure. */
static sl_status save_ring(be_backend *be, fwd_seq *sq, int l, float **sv, sl_error *err) {
    for (int k2 = 0; k2 < FWD_SAVED; k2++) {
        size_t ring;
        const float *src = ring_of(sq, l, k2, &ring);
        if (!src) continue;
        if (!(sv[k2] = DEV(ring))) return err_set(err, SL_ENOMEM, "out of memory for a copy of the KV ring");
        be->copy(be, sv[k2], src, ring, BE_D2D);
    }
    return 0;
}

/* Layer l's mixer over item i's rows, micro-batch by micro-batch. A DeltaNet layer's second and later
 * micro-batches read the newest state (slot o^1) and write into a buffer that is not the original (kept in
 * sv for multi_settle); the newest state ends in slot o^1. */
static sl_status multi_mixer(fwd_ws *ws, const fam_config *cfg, const fam_layer_w *lw, int l, multi_pass *mp, int i,
                             sl_error *err) {
    be_backend *be = ws->be;
    const int L = cfg->n_layers, lin = cfg->layer_linear[l], n = mp->it[i].n;
    fwd_seq *sq = mp->it[i].sq;
    const size_t R = (size_t)cfg_res_width(cfg);
    float *Xi = mp->X + (size_t)mp->row0[i] * R;
    float **sv = mp->saved + ((size_t)i * L + l) * FWD_SAVED;
    const int o = mp->orig[(size_t)i * L + l], pos0 = sq->n_past;
    int rc = 0;
    if (!lin && n > FWD_BATCH && fwd_kv_ring(sq, l)) rc = save_ring(be, sq, l, sv, err);
    const int wmix = mp->ms.rows && !lin && cfg->kv_lora <= 0 && n > FWD_BATCH && !fwd_kv_ring(sq, l);
    const int step = wmix ? mp->ms.rows : FWD_BATCH;
    if (wmix) mix_swap(ws, &mp->ms); /* back after the loop, which does not return early for these layers */
    for (int r0 = 0, b = 0; r0 < n && !rc; r0 += step, b++) {
        int nb = n - r0 < step ? n - r0 : step;
        fwd_block_in_rows(ws, cfg, lw, 0, Xi + (size_t)r0 * R, nb, ws->hc_tmp, ws->hc_mix, ws->h);
        if (lin && b > 0) {
            if (b == 1) {
                sv[0] = sq->conv[l][o];
                sv[1] = sq->ssm[l][o];
                sq->conv[l][o] = DEV(sq->conv_floats * sizeof(float));
                sq->ssm[l][o] = DEV(sq->ssm_floats * sizeof(float));
                if (!sq->conv[l][o] || !sq->ssm[l][o])
                    return err_set(err, SL_ENOMEM, "out of memory for DeltaNet state");
            }
            sq->lin_cur[l] = (unsigned char)(o ^ 1);
        }
        rc = fwd_mixer(ws, sq, cfg, lw, l, nb, pos0 + r0);
        if (lin && b > 0) { /* the newest state is now in slot o: move it to slot o^1 */
            float *tc = sq->conv[l][0], *ts = sq->ssm[l][0];
            sq->conv[l][0] = sq->conv[l][1];
            sq->conv[l][1] = tc;
            sq->ssm[l][0] = sq->ssm[l][1];
            sq->ssm[l][1] = ts;
            sq->lin_cur[l] = (unsigned char)o;
        }
        if (!rc) fwd_post_norm(ws, cfg, lw->post_attn_norm, ws->out, nb);
        if (!rc) fwd_block_out_rows(ws, cfg, Xi + (size_t)r0 * R, ws->out, ws->hc_mix, nb);
    }
    if (wmix) mix_swap(ws, &mp->ms);
    return rc;
}

/* Layer l's FFN over all rows of all items: the MoE block at once (fwd_moe_wide), a dense MLP by
 * micro-batches. */
static sl_status multi_ffn(fwd_ws *ws, const fam_config *cfg, const fam_weights *w, const tn_expert_src *experts, int l,
                           multi_pass *mp, sl_error *err) {
    const fam_layer_w *lw = &w->layers[l];
    const size_t R = (size_t)cfg_res_width(cfg), H = (size_t)cfg->hidden;
    const int L = cfg->n_layers, n = mp->n;
    float *X = mp->X;
    int rc = 0;
    ws->tok = mp->tok;
    if (cfg->layer_moe[l] && cfg->moe_shortcut) { /* LongCat-Flash: the MoE into mp->SC, then the dense MLP below */
        int nl = l + 1;
        while (nl < L && !cfg->layer_moe[nl]) nl++;
        fwd_norm_rows(ws, X, lw->ffn_norm, cfg->zero_centred_norm, cfg->eps, mp->HN, n, (int)H);
        rc = fwd_moe_wide(ws, cfg, lw, l, nl < L ? &w->layers[nl] : NULL, nl, experts, n, X, mp->HN, mp->SC, &mp->wb,
                          err);
    } else if (cfg->layer_moe[l]) {
        int nl = l + 1;
        while (nl < L && !cfg->layer_moe[nl]) nl++;
        const fam_layer_w *nlw = nl < L ? &w->layers[nl] : NULL;
        if (cfg->ffn_beside) {
            rc = fwd_ffn_beside_wide(ws, cfg, lw, l, nlw, nl, experts, n, X, mp->HN, mp->O, &mp->wb, err);
            if (!rc) ws->be->add(ws->be, X, mp->O, (size_t)n * H);
        } else {
            fwd_block_in_rows(ws, cfg, lw, 1, X, n, mp->HT, mp->HM, mp->HN);
            if (mp->ms.rows) mix_swap(ws, &mp->ms); /* the router's rows through the wider IN slot (ws->mb) */
            /* the next layer's hint norms rows of H: V4's streams are not, its block input is */
            rc = fwd_moe_wide(ws, cfg, lw, l, nlw, nl, experts, n, cfg->hc_mult > 0 ? mp->HN : X, mp->HN, mp->O, &mp->wb,
                              err);
            if (mp->ms.rows) mix_swap(ws, &mp->ms);
            if (!rc) fwd_post_norm(ws, cfg, lw->post_ffn_norm, mp->O, n);
            if (!rc) fwd_block_out_rows(ws, cfg, X, mp->O, mp->HM, n);
        }
        if (!rc) fwd_layer_end(ws, cfg, lw, X, n);
        return rc;
    }
    for (int r0 = 0; r0 < n && !rc; r0 += FWD_BATCH) {
        int nb = n - r0 < FWD_BATCH ? n - r0 : FWD_BATCH;
        fwd_block_in_rows(ws, cfg, lw, 1, X + (size_t)r0 * R, nb, ws->hc_tmp, ws->hc_mix, ws->h);
        rc = fwd_dense_mlp(ws, cfg, lw, nb);
        if (!rc) fwd_post_norm(ws, cfg, lw->post_ffn_norm, ws->out, nb);
        if (!rc) fwd_block_out_rows(ws, cfg, X + (size_t)r0 * R, ws->out, ws->hc_mix, nb);
    }
    if (!rc) fwd_shortcut_end(ws, cfg, l, X, mp->SC, n);
    if (!rc) fwd_layer_end(ws, cfg, lw, X, n);
    return rc;
}

/* Puts every original buffer back in its slot and commits (ok) or rolls back each sequence: the newest
 * DeltaNet state (on success) is in slot o^1; a sliding layer's saved ring is copied back on failure. */
static void multi_settle(be_backend *be, const fam_config *cfg, multi_pass *mp, int ok) {
    const int L = cfg->n_layers;
    for (int i = 0; i < mp->n_items; i++) {
        fwd_seq *sq = mp->it[i].sq;
        for (int l = 0; l < L; l++) {
            float **sv = mp->saved + ((size_t)i * L + l) * FWD_SAVED;
            if (!cfg->layer_linear[l]) { /* a sliding layer's rings: put back on failure */
                for (int k2 = 0; k2 < FWD_SAVED; k2++) {
                    size_t ring;
                    float *dst = ring_of(sq, l, k2, &ring);
                    if (sv[k2] && !ok) be->copy(be, dst, sv[k2], ring, BE_D2D);
                    if (sv[k2]) UNDEV(sv[k2], ring); /* (none saved for a pass of one micro-batch) */
                }
                continue;
            }
            const int o = mp->orig[(size_t)i * L + l];
            if (sv[0]) {
                UNDEV(sq->conv[l][o], sq->conv_floats * sizeof(float));
                UNDEV(sq->ssm[l][o], sq->ssm_floats * sizeof(float));
                sq->conv[l][o] = sv[0];
                sq->ssm[l][o] = sv[1];
            }
            sq->lin_cur[l] = (unsigned char)(ok ? o ^ 1 : o); /* commit or roll back */
        }
    }
}

/* The logits of the items that want their last row's only, into ws->lg_host [n_last][V] (HOST), queued before the
 * pass's sync: their rows (X's row of each, mp->last_idx) gathered by one copy_rows, or read where they are when they
 * are X's first n_last rows (a batch of decode steps); one LM-head pass over them FWD_BATCH rows at a time; on a
 * device backend one download a chunk, whose wait is the pass's (eval_batch's order: the logits' copy, then the sync
 * finds the queue empty). multi_finish hands each item its row once the pass has committed. Cannot fail (a backend
 * failure is sticky: the sync after it). */
static void multi_logits(fwd_ws *ws, const fam_config *cfg, const fam_weights *w, multi_pass *mp) {
    be_backend *be = ws->be;
    const size_t H = (size_t)cfg->hidden, V = (size_t)cfg->vocab, R = (size_t)cfg_res_width(cfg);
    const tn_mat *head = w->lm_head.data ? &w->lm_head : &w->embed;
    const fwd_item *it = mp->it;
    if (!mp->n_last) return;
    int in_place = 1;
    for (int i = 0, j = 0; i < mp->n_items; i++)
        if (it[i].logits && !it[i].all_logits) {
            mp->last_idx[j] = mp->row0[i] + it[i].n - 1;
            in_place &= mp->last_idx[j] == j;
            j++;
        }
    const float *rows = mp->X;
    if (!in_place) {
        be->copy_rows(be, mp->last_rows, R, NULL, mp->X, R, mp->last_idx, mp->n_last, (int)R);
        rows = mp->last_rows;
    }
    for (int r0 = 0; r0 < mp->n_last; r0 += FWD_BATCH) {
        const int nb = mp->n_last - r0 < FWD_BATCH ? mp->n_last - r0 : FWD_BATCH;
        float *lg = be->is_host ? ws->lg_host + (size_t)r0 * V : mp->last_logits;
        fwd_final_rows(ws, cfg, w, rows + (size_t)r0 * R, nb, ws->h);
        if (mp->traced) ws->trace(ws->trace_ctx, cfg->n_layers + 1, it[0].sq->n_past + it[0].n - 1, nb, ws->h);
        fwd_matmul(ws, head, ws->h, H, lg, V, nb, FWD_ACT_IN);
        fwd_softcap(ws, cfg, lg, nb);
        if (!be->is_host) be->copy(be, ws->lg_host + (size_t)r0 * V, lg, (size_t)nb * V * sizeof(float), BE_D2H);
    }
}

/* After a committed pass: every sequence's position advanced, the logits asked for written: all rows of an
 * all_logits item by micro-batches, the last row of the others from multi_logits' host rows. */
static void multi_finish(fwd_ws *ws, const fam_config *cfg, const fam_weights *w, multi_pass *mp) {
    const size_t V = (size_t)cfg->vocab, R = (size_t)cfg_res_width(cfg);
    const tn_mat *head = w->lm_head.data ? &w->lm_head : &w->embed;
    const fwd_item *it = mp->it;
    for (int i = 0, j = 0; i < mp->n_items; i++) {
        const int pos0 = it[i].sq->n_past;
        it[i].sq->n_past += it[i].n;
        if (!it[i].logits) continue;
        if (!it[i].all_logits) {
            memcpy(it[i].logits, ws->lg_host + (size_t)j++ * V, V * sizeof(float));
            continue;
        }
        const float *Xi = mp->X + (size_t)mp->row0[i] * R;
        for (int r0 = 0; r0 < it[i].n; r0 += FWD_BATCH) {
            int nb = it[i].n - r0 < FWD_BATCH ? it[i].n - r0 : FWD_BATCH;
            fwd_final_rows(ws, cfg, w, Xi + (size_t)r0 * R, nb, ws->h);
            if (mp->traced) ws->trace(ws->trace_ctx, cfg->n_layers + 1, pos0 + r0, nb, ws->h);
            fwd_emit_logits(ws, head, nb, it[i].logits + (size_t)r0 * V);
        }
    }
}

#undef DEV
#undef UNDEV

sl_status fwd_eval_multi(fwd_ws *ws, const fam_config *cfg, const fam_weights *w, const tn_expert_src *experts,
                         const fwd_item *it, int n_items, sl_error *err) {
    multi_pass mp;
    int rc = multi_alloc(ws, cfg, it, n_items, &mp, err), max_n = 0;
    for (int i = 0; i < n_items; i++) max_n = it[i].n > max_n ? it[i].n : max_n;
    if (!rc && mix_set_new(ws, cfg, max_n, &mp.ms)) rc = err_set(err, SL_ENOMEM, "out of memory for a %d-token evaluation", mp.n);
    if (rc) goto done;
    multi_begin(ws, cfg, w, experts, &mp);
    for (int l = 0; l < cfg->n_layers && !rc; l++) {
        const int joint = joint_mixer(ws, cfg, &w->layers[l], l, it, n_items, mp.n, mp.X);
        for (int i = 0; i < n_items && !rc && !joint; i++) rc = multi_mixer(ws, cfg, &w->layers[l], l, &mp, i, err);
        if (!rc) rc = multi_ffn(ws, cfg, w, experts, l, &mp, err);
        if (!rc) rc = be_check(ws->be, err); /* a failure so far, without waiting for the device */
        if (!rc && mp.traced) rc = be_sync(ws->be, err); /* the hook reads X */
        if (!rc && mp.traced) ws->trace(ws->trace_ctx, l + 1, it[0].sq->n_past, mp.n, mp.X);
    }
    if (!rc) multi_logits(ws, cfg, w, &mp); /* its download waits for the pass */
    if (!rc) rc = be_sync(ws->be, err); /* the pass's sticky error, read once before anything is committed */
    multi_settle(ws->be, cfg, &mp, !rc);
    if (!rc) multi_finish(ws, cfg, w, &mp);
done:
    mix_set_free(ws, &mp.ms);
    multi_free(&mp);
    return rc;
}

