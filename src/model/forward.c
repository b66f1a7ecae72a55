/*
 * forward.c — the forward pass's skeleton: workspace, validation, the decoder loop (docs/MATH.md, Decoder),
 * norms and the LM head. The mixers live in attention.c / deltanet.c / mla.c, the FFNs in moe.c;
 * fwd_internal.h describes the state layout they share. Every computation is an op of the workspace's
 * backend (src/backend/backend.h; the CPU one is the oracle), called at block level; the buffers are
 * its memory.
 *
 * Invariants:
 *  - fwd_eval validates everything it can (arguments, token ids, context room, every weight's shape
 *    and dtype) before touching the state; a failure there leaves the state unchanged.
 *  - tokens run in micro-batches of FWD_BATCH; every per-token result is computed in an order that
 *    does not depend on the batch size or the thread count (kernels.h), so "n tokens at once" equals
 *    "one at a time" bitwise with the recurrent DeltaNet and to ~1e-6 with the chunked one.
 *  - nothing is allocated per token: scratch lives in the workspace, the backend's per-thread scratch is
 *    reserved at fwd_ws_new (and again, idempotently, before each evaluation).
 *  - the backend's sticky error is read after every block of a micro-batch step (be_check: without waiting for
 *    the device where the backend can) and once at the end of a layer-major pass, and a micro-batch syncs
 *    (be_sync) before it commits, so a failing op fails the
 *    evaluation before its state is committed.
 *
 * Sections: helpers, workspace, weight validation, fwd_eval; a sequence's state lives in state.c.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family/arch.h"
#include "model/fwd_internal.h"
#include "quant/quant.h"
#include "sluice.h"
#include "util/err.h"

/* ---- helpers ---------------------------------------------------------------------------------- */

void fwd_norm_rows(fwd_ws *ws, const float *x, const float *w, int zero_centred, float eps, float *y, int n_rows,
                   int dim) {
    ws->be->rmsnorm(ws->be, x, y, n_rows, (size_t)dim, 1, 0, dim, w, zero_centred ? 1.0f : 0.0f, eps);
}

uint64_t fwd_next_uid(void) {
    static _Atomic uint64_t n;
    return atomic_fetch_add(&n, 1) + 1;
}

static int imax(int a, int b) { return a > b ? a : b; }

int fwd_any_layer(const fam_config *cfg, int linear) {
    for (int l = 0; l < cfg->n_layers; l++)
        if (!!cfg->layer_linear[l] == linear) return 1;
    return 0;
}

/* Floats one thread needs: attention scores over the context, or the DeltaNet chunk matrices
 * (deltanet.c: 3*C*C + C*(3*dk + 3*dv) + 4*C + 4*dv with C = FWD_BATCH, rounded up generously). */
static size_t slot_floats(const fam_config *cfg, int n_ctx) {
    size_t c = FWD_BATCH, dk = (size_t)cfg->lin_dk, dv = (size_t)cfg->lin_dv;
    size_t dn = 4 * c * c + c * (4 * dk + 4 * dv) + 8 * c + 8 * dv + 8 * dk;
    /* attention: scores of a block of up to FWD_BATCH tokens x a KV head's query heads over the context (as many
     * as 4M floats hold; backend/cpu/cpu_mix.c attn_block_part), and BE_KV_TILE decoded rows */
    size_t group = 1, hd = (size_t)cfg->head_dim; /* the largest over the layers (cfg_attn_at: Gemma 4, MiMo) */
    for (int l = 0; l < cfg->n_layers; l++) {
        const cfg_attn a = cfg_attn_at(cfg, l);
        const size_t g = (size_t)(a.n_kv_heads > 0 ? cfg->n_heads / a.n_kv_heads : 1);
        group = g > group ? g : group;
        hd = (size_t)a.head_dim > hd ? (size_t)a.head_dim : hd;
        hd = (size_t)a.v_dim > hd ? (size_t)a.v_dim : hd;
    }
    size_t at = (size_t)FWD_BATCH * group * (size_t)n_ctx;
    at = (at < ((size_t)1 << 22) ? at : (size_t)1 << 22) + (size_t)n_ctx;
    at += cfg->hc_mult > 0 ? (size_t)n_ctx / 2 + 16 : 0; /* V4: + compressed entries */
    at += (size_t)BE_KV_TILE * hd + group * hd; /* decoded rows; q4r's rotated queries (cpu_mix.c attn_query) */
    size_t mla = fwd_mla_slot_floats(cfg, n_ctx);
    if (mla > at) at = mla;
    return (dn > at ? dn : at) + 16;
}

void fwd_act(fwd_ws *ws, kern_act *a, int slot, const float *x, size_t ldx, int n, int cols) {
    kern_act_init(a, ws->act[slot], x, ldx, n, cols, ws->int8 && n <= ws->mb && cols <= ws->act_cols);
}

void fwd_matmul(fwd_ws *ws, const tn_mat *w, const float *x, size_t ldx, float *y, size_t ldy, int n, int slot) {
    for (int r0 = 0; r0 < n; r0 += ws->mb) {
        int nb = n - r0 < ws->mb ? n - r0 : ws->mb;
        kern_act a;
        fwd_act(ws, &a, slot, x + (size_t)r0 * ldx, ldx, nb, w->cols);
        be_matmul(ws->be, w, &a, y + (size_t)r0 * ldy, ldy);
    }
}

void fwd_hint_mat(fwd_ws *ws, const tn_mat *w) {
    if (!ws->be->hint || !w || !w->data || w->rows < 1 || w->cols < 1) return;
    const int bits = q_bits(w->dtype);
    const size_t code = q_row_code_bytes(w->dtype, w->cols); /* GGUF block types: scales included */
    size_t sc = 0, bi = 0; /* a row's scales and biases ([rows][cols/group], quant.h) */
    if (bits && w->dtype != DT_MXFP4 && w->scales && w->group > 0) {
        sc = (size_t)(w->cols / w->group) * dt_size(w->sdtype);
        bi = w->biases && !w->bias_implied ? sc : 0;
    }
    size_t rows = FWD_HINT_BYTES / (code + sc + bi + 1);
    if (rows < 1) rows = 1;
    if (rows > (size_t)w->rows) rows = (size_t)w->rows;
    const void *p[3] = {w->data, sc ? w->scales : NULL, bi ? w->biases : NULL};
    const size_t bytes[3] = {rows * code, rows * sc, rows * bi};
    ws->be->hint(ws->be, p, bytes, 1 + (sc > 0) + (bi > 0));
}

/* The LM head over rows normed rows ws->h [rows][H] into the caller's (host) logits [rows][V]: straight
 * there when the backend's memory is the host's, else through ws->lg. rows <= FWD_BATCH. */
void fwd_emit_logits(fwd_ws *ws, const tn_mat *head, int rows, float *logits) {
    const size_t H = (size_t)ws->shape.hidden, V = (size_t)ws->shape.vocab;
    if (ws->be->is_host) {
        fwd_matmul(ws, head, ws->h, H, logits, V, rows, FWD_ACT_IN);
        fwd_softcap(ws, &ws->shape, logits, rows);
        return;
    }
    fwd_matmul(ws, head, ws->h, H, ws->lg, V, rows, FWD_ACT_IN);
    fwd_softcap(ws, &ws->shape, ws->lg, rows);
    ws->be->copy(ws->be, logits, ws->lg, (size_t)rows * V * sizeof(float), BE_D2H);
}

/* p[0 .. n) = 1.0f (backend memory). */
static void fill_ones(be_backend *be, float *p, size_t n) {
    const float one = 1.0f;
    for (size_t i = 0; i < n; i++) be->copy(be, p + i, &one, sizeof one, BE_H2D);
}

/* The widths of ws's big (q_proj / in_proj rows), mix (the mixer's output) and ffn (an FFN's inner rows)
 * buffers for cfg's layers; hd: the widest head. */
static void ws_widths(fwd_ws *ws, const fam_config *cfg, int has_attn, int has_lin, int hd) {
    const int nh = cfg->n_heads, nk = cfg->lin_nk, nv = cfg->lin_nv, dk = cfg->lin_dk, dv = cfg->lin_dv;
    const int H = cfg->hidden;
    ws->n_big = 1;
    if (has_attn) ws->n_big = imax(ws->n_big, nh * hd * (cfg->gated_attn ? 2 : 1));
    if (has_lin && !cfg->split_lin_proj && !cfg->qkvz_split) ws->n_big = imax(ws->n_big, 2 * nk * dk + 2 * nv * dv);
    ws->n_mix = imax(has_attn ? imax(nh * hd, nh * cfg->v_head_dim) : 1, has_lin ? nv * dv : 1);
    if (has_lin && cfg->mamba) ws->n_big = imax(ws->n_big, 2 * nv * dv + 2 * nk * dk + nv); /* Mamba2's in_proj */
    if (has_lin && cfg->short_conv) { /* LFM2: in_proj's B | C | x, the conv's output */
        ws->n_big = imax(ws->n_big, 3 * H);
        ws->n_mix = imax(ws->n_mix, H);
    }
    ws->n_ffn = imax(imax(cfg->moe_inter, 2 * cfg->shared_inter), imax(cfg->dense_inter, 1)); /* 2: fused shared */
    if (cfg->expert_kind == SL_EXPERT_GPTOSS || cfg->expert_kind == SL_EXPERT_SWIGLU_FUSED)
        ws->n_ffn = imax(ws->n_ffn, 2 * cfg->moe_inter); /* fused gate_up rows */
}

fwd_ws *fwd_ws_new(const fam_config *cfg, int n_ctx, be_backend *be) {
    if (!cfg || !be || n_ctx < 1 || cfg->n_layers < 1 || cfg->n_layers > SL_MAX_LAYERS || cfg->hidden < 1) return NULL;
    fwd_ws *ws = calloc(1, sizeof *ws);
    if (!ws) return NULL;
    ws->uid = fwd_next_uid();
    const size_t B = FWD_BATCH, H = (size_t)cfg->hidden;
    ws->be = be;
    ws->int8 = 1;
    ws->mb = FWD_BATCH;
    const char *mr = getenv("SLUICE_MIX_ROWS");
    ws->mix_rows = mr ? atoi(mr) : be->is_host ? FWD_BATCH : FWD_MIX_ROWS;
    ws->mix_rows = ws->mix_rows < FWD_BATCH ? FWD_BATCH : ws->mix_rows > 1024 ? 1024 : ws->mix_rows;
    ws->n_ctx = n_ctx;
    ws->shape = *cfg;
    ws->chunked = 1;

    int has_attn = fwd_any_layer(cfg, 0), has_lin = fwd_any_layer(cfg, 1);
    int nh = cfg->n_heads, hd = imax(cfg->head_dim, cfg->full_head_dim), nkv = cfg->n_kv_heads;
    int nk = cfg->lin_nk, nv = cfg->lin_nv, dk = cfg->lin_dk, dv = cfg->lin_dv;
    int cq = has_lin ? 2 * nk * dk + nv * dv : 0;
    ws_widths(ws, cfg, has_attn, has_lin, hd);
    const int lg = cfg->kda ? nv + nv * dk : 2 * nv; /* a token's b|a (KDA: b|f) and gates */
    int E = imax(cfg_router_rows(cfg), 1), k = imax(cfg->n_experts_used, 1); /* router rows (zero experts too) */
    /* k, v: [B][nkv*hd] each; MLA: k the kv_a output [B][kv_lora + rot_dim], v the q_a output [B][q_lora] */
    int kvrow = imax(nkv * hd, cfg_kv_row(cfg)), vrow = imax(imax(nkv * hd, cfg_v_row(cfg)), cfg->q_lora);
/* host memory: index arrays and routing weights; backend memory (DEV): every float buffer */
#define ALLOC(p, n)                                      \
    do {                                                 \
        (p) = malloc((size_t)(n) * sizeof *(p));         \
        if (!(p)) goto fail;                             \
    } while (0)
#define DEV(ptr, n)                                                                \
    do {                                                                           \
        size_t bytes_ = (size_t)(n) * sizeof *(ptr);                               \
        if (!((ptr) = be->alloc(be, bytes_, BE_BUF_DEVICE))) goto fail;            \
        ws->dev[ws->n_dev].p = (ptr);                                              \
        ws->dev[ws->n_dev++].bytes = bytes_;                                       \
    } while (0)
    const size_t R = (size_t)cfg_res_width(cfg), v4 = cfg->hc_mult > 0, cmpd = (size_t)imax(hd, cfg->idx_dim);
    DEV(ws->x, B * R);
    DEV(ws->ones, v4 ? imax((int)R, hd) : 1);
    DEV(ws->hc_tmp, v4 ? B * R : 1);
    DEV(ws->hc_mix, B * (size_t)fwd_hc_ldm(cfg));
    DEV(ws->cmp, v4 ? B * 4 * cmpd : 1);
    DEV(ws->iq, v4 ? B * (size_t)imax(cfg->idx_heads * cfg->idx_dim, 1) : 1);
    DEV(ws->iw, v4 ? B * (size_t)imax(cfg->idx_heads, 1) : 1);
    DEV(ws->oa, v4 ? B * (size_t)imax(cfg->o_groups * cfg->o_lora, 1) : 1);
    DEV(ws->isel, v4 ? B * (size_t)imax(cfg->idx_topk, 1) : 1);
    DEV(ws->h, B * H);
    DEV(ws->out, B * H);
    DEV(ws->big, B * ws->n_big);
    DEV(ws->k, B * imax(kvrow, 1));
    DEV(ws->v, B * imax(vrow, 1));
    DEV(ws->mix, B * ws->n_mix);
    DEV(ws->mla_q, cfg->kv_lora > 0 ? B * (size_t)nh * (size_t)cfg_kv_row(cfg) : 1);
    DEV(ws->mla_lat, cfg->kv_lora > 0 ? B * (size_t)nh * (size_t)cfg->kv_lora : 1);
    DEV(ws->conv_in, B * imax(cq, 1));
    DEV(ws->conv_out, B * imax(cq, 1));
    DEV(ws->z, B * imax(imax(nv * dv, 1), cfg->attn_head_gate ? nh : 1)); /* KDA's output gate, MLA's head gate */
    DEV(ws->ba, B * imax(lg, 1));
    DEV(ws->gates, B * imax(lg, 1));
    DEV(ws->router, B * E);
    ALLOC(ws->top_e, B * k);
    ALLOC(ws->top_w, B * k);
    ALLOC(ws->e_count, E);
    ALLOC(ws->e_tok, B * k);
    ALLOC(ws->e_slot, B * k);
    DEV(ws->ffn_x, B * H);
    DEV(ws->ffn_g, B * ws->n_ffn);
    DEV(ws->ffn_u, B * ws->n_ffn);
    DEV(ws->ffn_y, B * H);
    DEV(ws->exp_out, B * k * H);
    DEV(ws->sh_y, B * H);
    ALLOC(ws->e_list, E);
    ALLOC(ws->at_ex, E);
    ALLOC(ws->at_start, E + 1);
    ws->e_cap = E;
    ALLOC(ws->pf_list, E);
    ALLOC(ws->pf_mark, E);
    if (!be->is_host) DEV(ws->lg, B * (size_t)cfg->vocab);
    DEV(ws->zeros, hd); /* the weight of a norm without one (v_norm: 1 + 0) */
    DEV(ws->sc, cfg->moe_shortcut ? B * H : 1); /* LongCat-Flash's shortcut MoE output */
    be->zero(be, ws->zeros, (size_t)hd * sizeof(float));
    ws->prefetch = 1;
    ws->act_cols = imax(imax((int)H, ws->n_mix), ws->n_ffn);
    if (v4) fill_ones(be, ws->ones, (size_t)imax((int)R, hd)); /* the unweighted norms' weight */
    for (int i = 0; i < 3; i++) {
        unsigned char *a;
        DEV(a, kern_act_bytes((int)B, ws->act_cols));
        ws->act[i] = a;
    }
#undef ALLOC
#undef DEV
    if (fwd_mla_ws_alloc(ws, cfg)) goto fail;
    ws->slot_floats = slot_floats(cfg, n_ctx);
    if (be->reserve(be, ws->slot_floats)) goto fail;
    return ws;
fail:
    fwd_ws_free(ws);
    return NULL;
}

void fwd_ws_free(fwd_ws *ws) {
    if (!ws) return;
    void *bufs[] = {ws->top_e,  ws->top_w,   ws->e_count, ws->e_tok, ws->e_slot,
                    ws->e_list, ws->pf_list, ws->pf_mark, ws->at_ex, ws->at_start};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    fwd_hybrid_free(ws);
    fwd_remote_free(ws);
    for (int i = 0; i < ws->n_dev; i++) ws->be->free(ws->be, ws->dev[i].p, ws->dev[i].bytes, BE_BUF_DEVICE);
    for (int i = 0; i < FWD_MP_BUFS; i++)
        if (ws->mp[i].p) ws->be->free(ws->be, ws->mp[i].p, ws->mp[i].bytes, BE_BUF_DEVICE);
    if (ws->lg_host) ws->be->free(ws->be, ws->lg_host, ws->lg_host_bytes, ws->lg_host_flags);
    free(ws);
}

void fwd_ws_set_trace(fwd_ws *ws, fwd_trace_fn fn, void *ctx) {
    ws->trace = fn;
    ws->trace_ctx = ctx;
}

void fwd_ws_set_chunked(fwd_ws *ws, int chunked) { ws->chunked = chunked; }
void fwd_ws_set_prefetch(fwd_ws *ws, int on) { ws->prefetch = on; }

void fwd_ws_set_rtrace(fwd_ws *ws, struct rtrace *rt) { ws->rt = rt; }
void fwd_ws_set_int8(fwd_ws *ws, int on) { ws->int8 = on; }

/* ---- weight validation ------------------------------------------------------------------------ */

static sl_status check_mat(const be_backend *be, const tn_mat *m, int rows, int cols, int layer, const char *name,
                           sl_error *err) {
    if (!m->data) return err_set(err, SL_EINVAL, "layer %d: weight %s missing", layer, name);
    if ((m->dtype != DT_F32 && m->dtype != DT_F16 && m->dtype != DT_BF16 && !q_is_quant(m->dtype)) ||
        (q_is_quant(m->dtype) && (!m->scales || m->group <= 0 || m->cols % m->group))) {
        return err_set(err, SL_EINVAL, "layer %d: weight %s has unsupported dtype %s", layer, name, dt_name(m->dtype));
    }
    if (m->rows != rows || m->cols != cols)
        return err_set(err, SL_EINVAL, "layer %d: weight %s is [%d, %d], expected [%d, %d]", layer, name, m->rows,
                      m->cols, rows, cols);
    if (be_check_mat(be, m))
        return err_set(err, SL_EUNSUPPORTED, "layer %d: weight %s is %s, which the %s backend cannot multiply", layer,
                      name, dt_name(m->dtype), be->name);
    return 0;
}

static sl_status check_vec(const float *v, int layer, const char *name, sl_error *err) {
    if (v) return 0;
    return err_set(err, SL_EINVAL, "layer %d: weight %s missing", layer, name);
}

#define CK(expr)                   \
    do {                           \
        int rc_ = (expr);          \
        if (rc_) return rc_;       \
    } while (0)

static sl_status check_config(const fam_config *c, sl_error *err) {
    if (!arch_get(c->arch)) return err_set(err, SL_EINVAL, "unknown architecture %d", (int)c->arch);
    int ok = c->vocab > 0 && c->hidden > 0 && c->n_layers > 0 && c->n_layers <= SL_MAX_LAYERS;
    if (ok && fwd_any_layer(c, 0))
        ok = c->n_heads > 0 && c->n_kv_heads > 0 && c->n_heads % c->n_kv_heads == 0 && c->head_dim > 0 &&
             c->rot_dim >= 0 && c->rot_dim <= c->head_dim && c->rot_dim <= 1024 && c->rot_dim % 2 == 0;
    if (ok && fwd_any_layer(c, 1) && c->short_conv) ok = c->conv_k >= 2;
    else if (ok && fwd_any_layer(c, 1))
        ok = c->lin_nk > 0 && c->lin_nv > 0 && c->lin_nv % c->lin_nk == 0 && c->lin_dk > 0 && c->lin_dv > 0 &&
             c->conv_k >= 1;
    ok = ok && (c->router == SL_ROUTER_SOFTMAX_TOPK || c->router == SL_ROUTER_TOPK_SOFTMAX ||
                c->router == SL_ROUTER_SOFTMAX_BIAS || c->router == SL_ROUTER_TOPK_SIGMOID ||
                c->router == SL_ROUTER_SOFTMAX_ZERO || (c->router == SL_ROUTER_SIGMOID_GROUP && cfg_groups_ok(c)) ||
                (c->router == SL_ROUTER_SQRTSOFTPLUS && c->hc_mult > 0)) &&
         cfg_dsv4_ok(c) && (c->hc_mult == 0 || c->idx_topk <= 4096) && /* cpu_mix.c extra_list */
         c->qk_norm >= SL_QK_NORM_NONE && c->qk_norm <= SL_QK_NORM_ALL &&
         !(c->gated_attn && (c->attn_bias || c->qk_norm == SL_QK_NORM_ALL)) && /* attention.c: q rows [nh*hd] */
         (c->rope_type == SL_ROPE_DEFAULT || (c->rope_type == SL_ROPE_YARN && c->rope_orig_max_pos > 0 &&
                                              c->rope_factor > 0 && c->rope_attn_factor >= 0) ||
          (c->rope_type == SL_ROPE_LLAMA3 && c->rope_orig_max_pos > 0 && c->rope_factor > 0 &&
           c->rope_high_freq >= c->rope_low_freq && c->rope_low_freq > 0)) &&
         c->attn_chunk >= 0 && !(c->attn_floor_scale < 0) &&
         !(c->attn_chunk > 0 && c->sliding_window != c->attn_chunk) &&
         cfg_mla_ok(c) &&
         (c->expert_kind == SL_EXPERT_SWIGLU || c->expert_kind == SL_EXPERT_GEGLU ||
          c->expert_kind == SL_EXPERT_SWIGLU_FUSED || c->expert_kind == SL_EXPERT_SWIGLU_CLIP ||
          (c->expert_kind == SL_EXPERT_GPTOSS && c->swiglu_limit > 0) ||
          (c->expert_kind == SL_EXPERT_SWIGLU_CLAMP && c->swiglu_limit > 0)) &&
         (c->full_head_dim == 0 ||
          (c->full_head_dim > 0 && c->full_head_dim <= 1024 && c->full_head_dim % 2 == 0 && c->full_kv_heads >= 0 &&
           c->full_rot_dim >= 0 && c->full_rot_dim <= c->full_head_dim && c->kv_lora == 0 && !c->gated_attn &&
           c->n_heads % (c->full_kv_heads > 0 ? c->full_kv_heads : c->n_kv_heads) == 0)) &&
         !(c->kv_lora == 0 && c->v_head_dim > 0 && (c->gated_attn || c->k_eq_v || c->v_norm)) && /* vd = hd there */
         (!c->ffn_beside || c->dense_inter > 0) && (!c->moe_shortcut || c->dense_inter > 0) && c->zero_experts >= 0 &&
         (c->router != SL_ROUTER_SOFTMAX_ZERO || c->routed_scale > 0) && c->kda_lower <= 0 &&
         !(c->attn_head_gate && c->kv_lora <= 0); /* the head gate: MLA's (mla.c) */
    for (int l = 0; ok && l < c->n_layers; l++)
        if (c->layer_sliding[l]) ok = !c->layer_linear[l] && c->sliding_window >= 1;

    for (int l = 0; ok && l < c->n_layers; l++) {
        ok = c->layer_clip[l] >= 0 && c->layer_sh_clip[l] >= 0; /* NaN too */
        if (!ok) break;
        if (c->layer_moe[l])
            ok = c->n_experts > 0 && c->n_experts_used > 0 && c->n_experts_used <= c->n_experts && c->moe_inter > 0;
        else
            ok = c->dense_inter > 0;
    }
    return ok ? SL_OK : err_set(err, SL_EINVAL, "inconsistent model configuration");
}

/* Every backbone weight the family's table gives this config: present, and of the implied shape. */
static sl_status check_weights(const be_backend *be, const fam_config *c, const fam_weights *w, sl_error *err) {
    const arch_desc *a = arch_get(c->arch);
    for (int k = 0; k < a->n_tensors; k++) {
        const arch_tdef *d = &a->tensors[k];
        int global = d->when == AW_GLOBAL || d->when == AW_UNTIED;
        for (int l = global ? -1 : 0; l < (global ? 0 : c->n_layers); l++) {
            if (!arch_applies(c, d->when, l)) continue;
            const char *base = l < 0 ? (const char *)w : (const char *)&w->layers[l];
            if (d->kind == AK_VEC) {
                CK(check_vec(*(float *const *)(base + d->field), l, d->name, err));
            } else {
                int rows = (int)arch_dim_value(c, d->rows), cols = (int)arch_dim_value(c, d->cols);
                CK(check_mat(be, (const tn_mat *)(base + d->field), rows, cols, l, d->name, err));
            }
        }
    }
    return 0;
}

/* ---- fwd_eval --------------------------------------------------------------------------------- */

/* Every field that sizes a state buffer must match the config the state was made for. */
static int same_shape(const fam_config *a, const fam_config *b) {
    if (a->vocab != b->vocab || a->hidden != b->hidden || a->n_layers != b->n_layers || a->n_heads != b->n_heads ||
        a->n_kv_heads != b->n_kv_heads || a->head_dim != b->head_dim || a->gated_attn != b->gated_attn ||
        a->n_experts != b->n_experts || a->n_experts_used != b->n_experts_used || a->moe_inter != b->moe_inter ||
        a->shared_inter != b->shared_inter || a->dense_inter != b->dense_inter || a->lin_nk != b->lin_nk ||
        a->lin_nv != b->lin_nv || a->lin_dk != b->lin_dk || a->lin_dv != b->lin_dv || a->conv_k != b->conv_k ||
        a->split_lin_proj != b->split_lin_proj || a->rot_dim != b->rot_dim || a->q_lora != b->q_lora ||
        a->kv_lora != b->kv_lora || a->qk_nope != b->qk_nope || a->v_head_dim != b->v_head_dim ||
        a->expert_kind != b->expert_kind || a->kda != b->kda || a->dsa_topk != b->dsa_topk || a->dsa_dim != b->dsa_dim ||
        memcmp(a->layer_dsa_shared, b->layer_dsa_shared, sizeof a->layer_dsa_shared) || a->hc_mult != b->hc_mult ||
        a->csa_rate != b->csa_rate || a->hca_rate != b->hca_rate || a->idx_dim != b->idx_dim ||
        a->idx_heads != b->idx_heads || a->idx_topk != b->idx_topk || a->o_groups != b->o_groups ||
        a->o_lora != b->o_lora || memcmp(a->layer_compress, b->layer_compress, sizeof a->layer_compress) ||
        a->full_head_dim != b->full_head_dim || a->full_kv_heads != b->full_kv_heads)
        return 0;
    return !memcmp(a->layer_linear, b->layer_linear, sizeof a->layer_linear) && a->sliding_window == b->sliding_window &&
           !memcmp(a->layer_sliding, b->layer_sliding, sizeof a->layer_sliding); /* the KV rings' size */
}

/* The first matrix layer l's mixer multiplies (its q of softmax attention), for a hint; NULL for the others. */
static const tn_mat *first_mat(const fam_config *cfg, const fam_layer_w *lw, int l) {
    return cfg->hc_mult > 0 ? &lw->q_a : !cfg->layer_linear[l] && cfg->kv_lora <= 0 ? &lw->q : NULL;
}

/* Layer l's mixer over ws->h's n rows (positions pos0..) into ws->out. */
int fwd_mixer(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_layer_w *lw, int l, int n, int pos0) {
    if (cfg->layer_linear[l]) return cfg->kda ? fwd_kda(ws, sq, cfg, lw, l, n) : fwd_deltanet(ws, sq, cfg, lw, l, n);
    if (cfg->hc_mult > 0) return fwd_dsv4_attention(ws, sq, cfg, lw, l, n, pos0);
    return cfg->kv_lora > 0 ? fwd_mla(ws, sq, cfg, lw, l, n, pos0) : fwd_attention(ws, sq, cfg, lw, l, n, pos0);
}

/* A one-token step of a model with softmax attention only, its layers recorded by the backend (backend.h
 * step_begin): 1 when the backend records or replays it. */
static int step_begin(fwd_ws *ws, const fwd_seq *sq, const fam_config *cfg, int n, int graph) {
    if (!graph || n != 1 || ws->trace || !ws->be->step_begin || cfg->kv_lora > 0 || cfg->hc_mult > 0 ||
        fwd_any_layer(cfg, 1))
        return 0;
    return ws->be->step_begin(ws->be, ws->uid << 32 ^ sq->uid, sq->n_past);
}

/* The end of a recorded step: 0 when it ran, FWD_RERUN when nothing of it did (run it again as usual). */
#define FWD_RERUN 1
static int step_end(fwd_ws *ws, int ok) { return ws->be->step_end(ws->be, ok) ? FWD_RERUN : 0; }

/* One micro-batch of n tokens at positions sq->n_past..; commits the recurrent state and n_past on
 * success. logits_out: NULL or [n][V] rows to fill (all_rows) / [V] for the last row. graph: the layers of a
 * one-token step may be recorded (step_begin); FWD_RERUN: they were not run, call again with graph 0. */
static sl_status eval_batch(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_weights *w,
                            const tn_expert_src *experts, const int32_t *tokens, int n, float *logits_out, int all_rows,
                            int graph, sl_error *err) {
    const int pos0 = sq->n_past;
    const tn_mat *head = w->lm_head.data ? &w->lm_head : &w->embed;
    fwd_embed_rows(ws, cfg, w, tokens, n, ws->x);
    ws->tok = tokens;
    fwd_embed_scale(ws, cfg, ws->x, n);
    if (ws->trace) ws->trace(ws->trace_ctx, 0, pos0, n, ws->x);
    const int graphed = step_begin(ws, sq, cfg, n, graph);

    for (int l = 0; l < cfg->n_layers; l++) {
        const fam_layer_w *lw = &w->layers[l];
        int rc;
        fwd_block_in_rows(ws, cfg, lw, 0, ws->x, n, ws->hc_tmp, ws->hc_mix, ws->h);
        rc = fwd_mixer(ws, sq, cfg, lw, l, n, pos0);
        if (!rc) rc = be_check(ws->be, err);
        if (rc) return graphed ? step_end(ws, 0) : rc;
        /* the caller's serial work until the FFN's first matmul: the other threads bring its start into the
         * caches meanwhile; likewise the FFN's tail before the next layer's q/k/v (or the LM head) */
        fwd_hint_mat(ws, cfg->layer_moe[l] ? &lw->router : &lw->mlp_gate);
        fwd_post_norm(ws, cfg, lw->post_attn_norm, ws->out, n);
        fwd_block_out_rows(ws, cfg, ws->x, ws->out, ws->hc_mix, n);
        ws->ffn_next = l + 1 < cfg->n_layers ? first_mat(cfg, &w->layers[l + 1], l + 1) : logits_out ? head : NULL;

        int nl = l + 1;
        while (nl < cfg->n_layers && !cfg->layer_moe[nl]) nl++;
        const fam_layer_w *nlw = nl < cfg->n_layers ? &w->layers[nl] : NULL;
        if (cfg->layer_moe[l] && cfg->ffn_beside) {
            rc = fwd_ffn_beside(ws, cfg, lw, l, nlw, nl, experts, n, err);
        } else if (cfg->moe_shortcut) {
            rc = fwd_ffn_shortcut(ws, cfg, lw, l, nlw, nl, experts, n, err);
        } else {
            fwd_block_in_rows(ws, cfg, lw, 1, ws->x, n, ws->hc_tmp, ws->hc_mix, ws->h);
            rc = cfg->layer_moe[l] ? fwd_moe(ws, cfg, lw, l, nlw, nl, experts, n, err) : fwd_dense_mlp(ws, cfg, lw, n);
            if (!rc) fwd_post_norm(ws, cfg, lw->post_ffn_norm, ws->out, n);
        }
        if (!rc) rc = be_check(ws->be, err);
        fwd_hint_mat(ws, ws->ffn_next); /* unless the FFN did, before its own tail */
        ws->ffn_next = NULL;
        if (rc) return graphed ? step_end(ws, 0) : rc;
        fwd_block_out_rows(ws, cfg, ws->x, ws->out, ws->hc_mix, n);
        fwd_shortcut_end(ws, cfg, l, ws->x, ws->sc, n);
        fwd_layer_end(ws, cfg, lw, ws->x, n);
        if (ws->trace) ws->trace(ws->trace_ctx, l + 1, pos0, n, ws->x);
    }
    if (graphed && step_end(ws, 1)) return FWD_RERUN;

    if (logits_out) {
        int first = all_rows ? 0 : n - 1, rows = n - first;
        fwd_final_rows(ws, cfg, w, ws->x + (size_t)first * (size_t)cfg_res_width(cfg), rows, ws->h);
        if (ws->trace) ws->trace(ws->trace_ctx, cfg->n_layers + 1, pos0 + first, rows, ws->h);
        fwd_emit_logits(ws, head, rows, logits_out);
    }
    /* every op of the step has run without failing (the step's one wait: the logits' copy has waited
     * already); commit: nothing below can fail */
    sl_status rc = be_sync(ws->be, err);
    if (rc) return rc;
    for (int l = 0; l < cfg->n_layers; l++)
        if (cfg->layer_linear[l]) sq->lin_cur[l] ^= 1;
    sq->n_past += n;
    /* the next step's first matmul, while the caller samples from these logits and embeds the next token */
    fwd_hint_mat(ws, first_mat(cfg, &w->layers[0], 0));
    return 0;
}

#define WIDE_MAX 1024 /* tokens of one layer-major chunk of a long input (multi.c fwd_eval_multi) */

/* The checks of one sequence's part of an evaluation; nothing is touched before they pass. */
static sl_status check_seq(const fwd_ws *ws, const fwd_seq *sq, const fam_config *cfg, const int32_t *tokens, int n,
                           sl_error *err) {
    if (!sq || !tokens) return err_set(err, SL_EINVAL, "NULL sequence or tokens");
    if (n < 1) return err_set(err, SL_EINVAL, "n_tokens %d < 1", n);
    if (!same_shape(cfg, &ws->shape) || !same_shape(cfg, &sq->shape) || sq->n_ctx > ws->n_ctx)
        return err_set(err, SL_EINVAL, "configuration differs from the one the state was made for");
    if (n > sq->n_ctx - sq->n_past)
        return err_set(err, SL_ERANGE, "context full: %d tokens past + %d new > n_ctx %d", sq->n_past, n, sq->n_ctx);
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= cfg->vocab)
            return err_set(err, SL_ERANGE, "token %d at index %d out of range [0, %d)", tokens[i], i, cfg->vocab);
    }
    return 0;
}

/* The KV caches grown for n more positions (fwd_seq_reserve); growing changes no result. */
static sl_status reserve_kv(fwd_seq *sq, int n, sl_error *err) {
    sl_status st = fwd_seq_reserve(sq, sq->n_past + n);
    if (!st) return 0;
    size_t per = 0; /* every attention layer's K and V row */
    for (int l = 0; l < sq->n_layers; l++)
        per += sq->shape.layer_linear[l] ? 0 : fwd_kv_row_bytes(sq, l, 0) + fwd_kv_row_bytes(sq, l, 1);
    if (st == SL_EBUSY)
        return err_set(err, SL_EBUSY, "the KV pool is full: %llu of its %llu bytes in use, %d positions need more "
                       "(%zu bytes a position)", (unsigned long long)sq->pool->used, sq->pool->limit, sq->n_past + n, per);
    return err_set(err, SL_ENOMEM, "out of memory for the KV cache at %d positions (%zu bytes a position)",
                   sq->n_past + n, per);
}

/* The checks of the model side: configuration, weights, expert source, per-thread scratch. */
static sl_status check_model(fwd_ws *ws, const fam_config *cfg, const fam_weights *w, const tn_expert_src *experts,
                             sl_error *err) {
    CK(check_config(cfg, err));
    CK(fwd_check_ops(ws, cfg, err));
    CK(check_weights(ws->be, cfg, w, err));
    if (cfg_n_moe_layers(cfg) > 0 && (!experts || !experts->get))
        return err_set(err, SL_EINVAL, "no expert source for a model with MoE layers");
    if (ws->be->reserve(ws->be, ws->slot_floats)) return err_set(err, SL_ENOMEM, "out of memory for per-thread scratch");
    return 0;
}

sl_status fwd_eval(fwd_ws *ws, fwd_seq *sq, const fam_config *cfg, const fam_weights *w, const tn_expert_src *experts,
                   const int32_t *tokens, int n, float *logits, int all_logits, sl_error *err) {
    if (!ws || !cfg || !w) return err_set(err, SL_EINVAL, "fwd_eval: NULL argument");
    CK(check_seq(ws, sq, cfg, tokens, n, err));
    CK(check_model(ws, cfg, w, experts, err));
    CK(reserve_kv(sq, n, err));
    CK(be_check(ws->be, err)); /* nothing left over from an earlier call (no wait: the step's one is at its end) */

    /* many tokens: layer-major chunks of up to WIDE_MAX (each expert read once per layer per chunk);
     * a few: micro-batches through all layers */
    const int wide = sq->wide && cfg_n_moe_layers(cfg) > 0;
    for (int done = 0; done < n;) {
        int rest = n - done, nb = wide && rest > FWD_BATCH ? (rest < WIDE_MAX ? rest : WIDE_MAX)
                                                          : (rest < FWD_BATCH ? rest : FWD_BATCH);
        int last = done + nb == n;
        float *lo = NULL;
        if (logits && all_logits) lo = logits + (size_t)done * (size_t)cfg->vocab;
        else if (logits && last) lo = logits;
        fwd_item one = {sq, tokens + done, nb, lo, all_logits};
        int rc = nb > FWD_BATCH ? fwd_eval_multi(ws, cfg, w, experts, &one, 1, err)
                                : eval_batch(ws, sq, cfg, w, experts, tokens + done, nb, lo, all_logits, 1, err);
        if (rc == FWD_RERUN) rc = eval_batch(ws, sq, cfg, w, experts, tokens + done, nb, lo, all_logits, 0, err);
        if (rc) return rc;
        done += nb;
    }
    return 0;
}

sl_status fwd_eval_batch(fwd_ws *ws, const fam_config *cfg, const fam_weights *w, const tn_expert_src *experts,
                         const fwd_item *items, int n_items, sl_error *err) {
    if (!ws || !cfg || !w || !items || n_items < 1)
        return err_set(err, SL_EINVAL, "fwd_eval_batch: NULL argument or no items");
    /* one sequence: fwd_eval's own path (a batch of one is that sequence alone, so the same bits). Its decode step
     * keeps the route on the device where eval_multi's does not: a serving stream alone on an H100 ran at half
     * `sluice bench`'s rate through eval_multi (docs/CUDA.md "Call J") */
    if (n_items == 1) {
        const int rc = fwd_eval(ws, items[0].sq, cfg, w, experts, items[0].tokens, items[0].n, items[0].logits,
                                items[0].all_logits, err);
        if (rc && err) err_prefix(err, "batch item 0");
        return rc;
    }
    for (int i = 0; i < n_items; i++) {
        int rc = check_seq(ws, items[i].sq, cfg, items[i].tokens, items[i].n, err);
        for (int j = 0; !rc && j < i; j++)
            if (items[j].sq == items[i].sq) rc = err_set(err, SL_EINVAL, "the same sequence as item %d", j);
        if (rc) {
            if (err) err_prefix(err, "batch item %d", i);
            return rc;
        }
    }
    CK(check_model(ws, cfg, w, experts, err));
    for (int i = 0; i < n_items; i++) {
        int rc = reserve_kv(items[i].sq, items[i].n, err);
        if (rc) {
            if (err) err_prefix(err, "batch item %d", i);
            return rc;
        }
    }
    CK(be_check(ws->be, err)); /* as fwd_eval */
    return fwd_eval_multi(ws, cfg, w, experts, items, n_items, err);
}
