/*
 * dsv4.c — DeepSeek-V4's attention (cfg->hc_mult > 0), after transformers' src/transformers/models/deepseek_v4/
 * modeling_deepseek_v4.py (DeepseekV4Attention, DeepseekV4HCACompressor, DeepseekV4CSACompressor,
 * DeepseekV4Indexer, DeepseekV4IndexerScorer), and the compressor state it keeps in a sequence.
 *
 * Per token (hd = head_dim, r = rot_dim, RoPE on adjacent pairs of each head's last r dims: the "main" table
 * (rope_theta) on sliding layers, the "compress" one (rope_theta_c, YaRN fields) on CSA / HCA layers):
 *   qr = rmsnorm(q_a x)   q = norm(q_b qr) per head (unweighted), roped   kv = kv_norm(kv_proj x), roped
 *   attention over the last sliding_window kv rows (key = value) and, on a compressed layer, the entries of its
 *   closed windows (HCA: all of them; CSA: the idx_topk its indexer picks), sinks, scale hd^-0.5;
 *   the output's rope part rotated back (-sin at the query's position), o_b (o_a per group of heads).
 * A compressor keeps each position's projections [kv | gate] (c d each: CSA c = 2, two series) in a ring of
 * 2 rate + FWD_BATCH rows; when a token closes window w (position (w + 1) rate - 1), entry w is computed from the
 * ring (the compress op: a softmax over the window's slots per feature, CSA's overlapping the previous window's
 * first series, kv_norm, RoPE at w rate) into the layer's entries [n_ctx / rate + 1][d]. CSA's indexer has its own
 * compressor at idx_dim and scores its entries with idx_heads queries (q_b of qr, roped) weighted by weights_proj
 * x (the index_topk op). A query at position p sees entry w when (w + 1) rate <= p + 1, as transformers' masks.
 * Every step is a backend op over the micro-batch; a token's results depend on its own position and the state.
 */
#include <math.h>

#include "family/rope.h"
#include "model/fwd_internal.h"
#include "quant/quant.h"

/* ---- state ------------------------------------------------------------------------------------ */

static int rate_of(const fam_config *c, int l) {
    return c->layer_compress[l] == SL_CMP_CSA ? c->csa_rate : c->layer_compress[l] == SL_CMP_HCA ? c->hca_rate : 0;
}

/* Ring rows, ring row floats and entries of layer l's compressor (idx: its indexer's). */
static void cmp_dims(const fwd_seq *sq, int l, int idx, int *cap, size_t *row, size_t *n_ent, int *d) {
    const fam_config *c = &sq->shape;
    const int rate = rate_of(c, l), cw = c->layer_compress[l] == SL_CMP_CSA ? 2 : 1;
    *d = idx ? c->idx_dim : c->head_dim;
    *cap = 2 * rate + FWD_BATCH < sq->n_ctx ? 2 * rate + FWD_BATCH : sq->n_ctx;
    *row = (size_t)(2 * cw * *d);
    *n_ent = (size_t)(sq->n_ctx / (rate > 0 ? rate : 1) + 1);
}

size_t fwd_dsv4_ring_bytes(const fwd_seq *sq, int l, int idx) {
    int cap, d;
    size_t row, n_ent;
    cmp_dims(sq, l, idx, &cap, &row, &n_ent, &d);
    return (size_t)cap * row * sizeof(float);
}

static size_t ent_bytes(const fwd_seq *sq, int l, int idx) {
    int cap, d;
    size_t row, n_ent;
    cmp_dims(sq, l, idx, &cap, &row, &n_ent, &d);
    return n_ent * (size_t)d * sizeof(float);
}

int fwd_dsv4_alloc(fwd_seq *sq, int l) {
    const fam_config *c = &sq->shape;
    be_backend *be = sq->be;
    for (int idx = 0; idx < (c->layer_compress[l] == SL_CMP_CSA ? 2 : c->layer_compress[l] ? 1 : 0); idx++) {
        float **ring = idx ? &sq->idx_ring[l] : &sq->cmp_ring[l], **ent = idx ? &sq->idx_ent[l] : &sq->cmp_ent[l];
        if (!(*ring = be->alloc(be, fwd_dsv4_ring_bytes(sq, l, idx), BE_BUF_DEVICE))) return -1;
        if (!(*ent = be->alloc(be, ent_bytes(sq, l, idx), BE_BUF_DEVICE))) return -1;
    }
    return 0;
}

void fwd_dsv4_free(fwd_seq *sq, int l) {
    for (int idx = 0; idx < 2; idx++) {
        float *ring = idx ? sq->idx_ring[l] : sq->cmp_ring[l], *ent = idx ? sq->idx_ent[l] : sq->cmp_ent[l];
        if (ring) sq->be->free(sq->be, ring, fwd_dsv4_ring_bytes(sq, l, idx), BE_BUF_DEVICE);
        if (ent) sq->be->free(sq->be, ent, ent_bytes(sq, l, idx), BE_BUF_DEVICE);
    }
}

/* The positions of layer l's ring a state keeps at n_past: those the next windows read (CSA: the last closed
 * window's too, for its first series), and the entries of the closed windows. */
size_t fwd_dsv4_state_io(const fwd_seq *sq, int l, int n_past, char *p, int to_state) {
    const fam_config *c = &sq->shape;
    const int rate = rate_of(c, l), csa = c->layer_compress[l] == SL_CMP_CSA;
    size_t moved = 0;
    if (!rate) return 0;
    const int closed = n_past / rate, from = (closed - csa > 0 ? closed - csa : 0) * rate;
    for (int idx = 0; idx <= csa; idx++) {
        int cap, d;
        size_t row, n_ent;
        cmp_dims(sq, l, idx, &cap, &row, &n_ent, &d);
        float *ring = idx ? sq->idx_ring[l] : sq->cmp_ring[l], *ent = idx ? sq->idx_ent[l] : sq->cmp_ent[l];
        const size_t rb = row * sizeof(float), eb = (size_t)closed * (size_t)d * sizeof(float);
        for (int pos = from; pos < n_past; pos++, moved += rb) {
            char *r = (char *)(ring + (size_t)(pos % cap) * row);
            if (p) sq->be->copy(sq->be, to_state ? p + moved : r, to_state ? r : p + moved, rb, to_state ? BE_D2H : BE_H2D);
        }
        if (p && eb) sq->be->copy(sq->be, to_state ? p + moved : (char *)ent, to_state ? (char *)ent : p + moved, eb,
                                  to_state ? BE_D2H : BE_H2D);
        moved += eb;
    }
    return moved;
}

/* ---- attention -------------------------------------------------------------------------------- */

/* y = W x through the int8 rule of fwd_matmul's slot */
#define MM(w, x, ldx, y, ldy, slot) fwd_matmul(ws, (w), (x), (size_t)(ldx), (y), (size_t)(ldy), n, (slot))

/* Layer l's compressor (idx: its indexer's) over the micro-batch: projections into the ring, then the entries of
 * the windows its tokens close. */
static void compressor(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_layer_w *lw, int l, int n, int pos0,
                       int idx, const float *inv, float af) {
    be_backend *be = ws->be;
    const int H = cfg->hidden, rate = rate_of(cfg, l), csa = cfg->layer_compress[l] == SL_CMP_CSA;
    int cap, d;
    size_t row, n_ent;
    cmp_dims(sq, l, idx, &cap, &row, &n_ent, &d);
    const int cd = (int)row / 2;
    float *ring = idx ? sq->idx_ring[l] : sq->cmp_ring[l];
    MM(idx ? &lw->idx_kv : &lw->cmp_kv, ws->h, H, ws->cmp, row, FWD_ACT_IN);
    MM(idx ? &lw->idx_gate : &lw->cmp_gate, ws->h, H, ws->cmp + cd, row, FWD_ACT_IN);
    int rows[FWD_BATCH];
    for (int t = 0; t < n; t++) rows[t] = (pos0 + t) % cap;
    be->copy_rows(be, ring, row, rows, ws->cmp, row, NULL, n, (int)row);
    const int w0 = pos0 / rate, w1 = (pos0 + n) / rate;
    if (w1 <= w0) return;
    const be_cmp c = {.ring = ring, .cap = cap, .ldr = row, .d = d, .overlap = csa, .rate = rate, .w0 = w0,
                      .n_win = w1 - w0, .ape = idx ? lw->idx_ape : lw->cmp_ape, .norm_w = idx ? lw->idx_norm : lw->cmp_norm,
                      .eps = cfg->eps, .rot = cfg->rot_dim, .inv_freq = inv, .attn_factor = af,
                      .out = idx ? sq->idx_ent[l] : sq->cmp_ent[l], .ldo = (size_t)d};
    be->compress(be, &c);
}

/* CSA's indexer: its compressor, its queries (q_b of qr in ws->v, roped), the head weights, the top-k into
 * ws->isel [n][idx_topk]. */
static void indexer(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_layer_w *lw, int l, int n, int pos0,
                    const float *inv, float af) {
    const int ih = cfg->idx_heads, id = cfg->idx_dim, r = cfg->rot_dim;
    compressor(ws, sq, cfg, lw, l, n, pos0, 1, inv, af);
    MM(&lw->idx_q_b, ws->v, cfg->q_lora, ws->iq, ih * id, FWD_ACT_MID);
    ws->be->rope(ws->be, ws->iq + id - r, n, (size_t)ih * id, ih, (size_t)id, r, inv, af, pos0, 2);
    MM(&lw->idx_w, ws->h, cfg->hidden, ws->iw, ih, FWD_ACT_IN);
    const be_index x = {.q = ws->iq, .ldq = (size_t)ih * id, .w = ws->iw, .ldw = (size_t)ih, .keys = sq->idx_ent[l],
                        .ldk = (size_t)id, .n = n, .pos0 = pos0, .n_heads = ih, .d = id, .rate = cfg->csa_rate,
                        .topk = cfg->idx_topk, .scale = 1.0f / sqrtf((float)id), .w_scale = 1.0f / sqrtf((float)ih),
                        .idx = ws->isel};
    ws->be->index_topk(ws->be, &x);
}

int fwd_dsv4_attention(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_layer_w *lw, int l, int n, int pos0) {
    be_backend *be = ws->be;
    const int H = cfg->hidden, nh = cfg->n_heads, hd = cfg->head_dim, r = cfg->rot_dim, ql = cfg->q_lora;
    const int kind = cfg->layer_compress[l], G = cfg->o_groups, gin = nh * hd / G, ldo = G * cfg->o_lora;
    const size_t ldq = (size_t)ws->n_big, ldm = (size_t)ws->n_mix;
    fam_config rc = *cfg; /* the layer's RoPE table: "main" (default, rope_theta) or "compress" */
    if (kind == SL_CMP_NONE) rc.rope_type = SL_ROPE_DEFAULT;
    else rc.rope_theta = cfg->rope_theta_c;
    float inv[SL_ROPE_MAX_FREQS], af;
    rope_freqs(&rc, inv, &af);

    MM(&lw->q_a, ws->h, H, ws->v, ql, FWD_ACT_IN);
    be->rmsnorm(be, ws->v, ws->v, n, (size_t)ql, 1, 0, ql, lw->q_a_norm, 0.0f, cfg->eps);
    MM(&lw->q_b, ws->v, ql, ws->big, ldq, FWD_ACT_MID);
    be->rmsnorm(be, ws->big, ws->big, n, ldq, nh, (size_t)hd, hd, ws->ones, 0.0f, cfg->eps);
    be->rope(be, ws->big + hd - r, n, ldq, nh, (size_t)hd, r, inv, af, pos0, 2);
    MM(&lw->k, ws->h, H, ws->k, hd, FWD_ACT_IN);
    be->rmsnorm(be, ws->k, ws->k, n, (size_t)hd, 1, 0, hd, lw->k_norm, 0.0f, cfg->eps);
    be->rope(be, ws->k + hd - r, n, (size_t)hd, 1, 0, r, inv, af, pos0, 2);

    be_attn a = {.q = ws->big, .ldq = ldq, .qstride = hd, .k = ws->k, .v = ws->k, .ldkv = (size_t)hd,
                 .k_cache = sq->k_cache[l], .v_cache = sq->k_cache[l], .cap = sq->kv_cap[l], .n = n, .pos0 = pos0,
                 .n_heads = nh, .n_kv_heads = 1, .head_dim = hd, .window = cfg->sliding_window, .sinks = lw->sinks,
                 .scale = 1.0f / sqrtf((float)hd), .out = ws->mix, .ldo = ldm};
    if (kind != SL_CMP_NONE) {
        compressor(ws, sq, cfg, lw, l, n, pos0, 0, inv, af);
        a.extra = sq->cmp_ent[l];
        a.extra_rate = rate_of(cfg, l);
        if (kind == SL_CMP_CSA) {
            indexer(ws, sq, cfg, lw, l, n, pos0, inv, af);
            a.extra_idx = ws->isel;
            a.extra_k = cfg->idx_topk;
        }
    }
    be->attention(be, &a);
    be->rope(be, ws->mix + hd - r, n, ldm, nh, (size_t)hd, r, inv, af, pos0, 3); /* K = V carried the rotation */
    for (int g = 0; g < G; g++) {
        const tn_mat wg = q_rows_view(&lw->o_a, g * cfg->o_lora, cfg->o_lora);
        MM(&wg, ws->mix + (size_t)g * gin, ldm, ws->oa + (size_t)g * cfg->o_lora, ldo, FWD_ACT_MID);
    }
    MM(&lw->o, ws->oa, ldo, ws->out, H, FWD_ACT_GATHER);
    return 0;
}

#undef MM
