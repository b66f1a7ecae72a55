/*
 * backend_cuda.c — the CUDA backend's table (src/backend/backend.h; issue 13 §2): the ops over the kernels of
 * cuda.h and backend_cuda.h, queued on one stream (SLS) in the forward pass's order. Built with
 * `make CUDA=1` (SL_CUDA); be_open makes it. docs/CUDA.md says what it does and lacks: q3 / q2 / q2v matmuls stay NULL
 * (be_check_mat refuses such a model at open; GGUF blocks: cuda_kq.h); dn_chunk runs dn_step's kernel.
 * copy() to or from the host returns once done (a caller may reuse its buffer); copy_async queues a host ->
 * device copy on the copy stream of backend_cuda_rt.cu, ordered by events (the tier's promotions). A
 * kern_act's int8 form is made on the device in slcu_act's layout on first use.
 * route chooses on the device and copies the choice back; moe_resident keeps it there (docs/CUDA.md
 * "Routing on the device"). embed runs on the device (cuda_embed.cu; on the host in a recorded step).
 */
#ifdef SL_CUDA

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/backend_cuda_ctx.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_kq.h"
#include "backend/cuda/cuda_mvn.h"
#include "quant/quant.h"
#include "sluice.h"

#define SLACK 1024 /* past every device allocation: slcu_act_bytes exceeds kern_act_bytes by < 1 KiB */

void cu_fail(be_backend *be, int status, const char *what) {
    cu_ctx *c = cu_of(be);
    if (c->status) return;
    c->status = status;
    snprintf(c->msg, sizeof c->msg, "%s", what);
}

static void *host_scratch(be_backend *be, size_t bytes) {
    cu_ctx *c = cu_of(be);
    if (bytes > c->host_cap) {
        void *p = realloc(c->host, bytes);
        if (!p) {
            cu_fail(be, SL_ENOMEM, "out of host memory (CUDA scratch)");
            return NULL;
        }
        c->host = p;
        c->host_cap = bytes;
    }
    return c->host;
}

/* bytes of device memory holding src (host), for the ops queued next: the next piece of the upload ring,
 * copied asynchronously from its pinned staging twin, so the host does not wait for the queue (a blocking
 * copy here made every expert of a decode step wait for the one before, and the tier's copies with it).
 * A piece is reused only after a full sync: on wrap-around, or after sync() (cu_sync resets the ring). */
void *dev_upload(be_backend *be, const void *src, size_t bytes) {
    cu_ctx *c = cu_of(be);
    const size_t need = (bytes + 255) & ~(size_t)255;
    if (c->up_off + need > c->up_cap) {
        if (slcu_sync(MSG(be))) { /* everything queued, which may read the ring, first */
            cu_fail(be, SL_EIO, c->tmp);
            return NULL;
        }
        c->up_off = 0;
        if (need > c->up_cap) {
            size_t cap = need > 2 * c->up_cap ? need : 2 * c->up_cap;
            if (cap < ((size_t)1 << 20)) cap = (size_t)1 << 20;
            slcb_free(c->up_host, 1);
            slcb_free(c->up_dev, 0);
            c->up_host = slcb_alloc(cap, 1);
            c->up_dev = slcb_alloc(cap, 0);
            c->up_cap = c->up_host && c->up_dev ? cap : 0;
            if (!c->up_cap) {
                cu_fail(be, SL_ENOMEM, "out of device or pinned memory (CUDA upload ring)");
                return NULL;
            }
        }
    }
    uint8_t *h = (uint8_t *)c->up_host + c->up_off, *d = (uint8_t *)c->up_dev + c->up_off;
    memcpy(h, src, bytes);
    if (slcb_copy(d, h, bytes, 0, MSG(be))) {
        cu_fail(be, SL_EIO, c->tmp);
        return NULL;
    }
    c->up_off += need;
    return d;
}

static void *cu_alloc(be_backend *be, size_t bytes, int flags) {
    (void)be;
    return (flags & BE_BUF_PINNED) ? slcb_alloc(bytes, 1) : slcb_alloc(bytes + SLACK, 0);
}

static void cu_free(be_backend *be, void *p, size_t bytes, int flags) {
    pend_flush(be);
    (void)be, (void)bytes;
    slcb_free(p, flags & BE_BUF_PINNED);
}

static void cu_copy(be_backend *be, void *dst, const void *src, size_t bytes, int dir) {
    pend_flush(be);
    cu_of(be)->nq_y = NULL;
    CU(be, slcb_copy(dst, src, bytes, dir == BE_H2D || dir == BE_D2H, MSG(be))); /* BE_D2H_ASYNC: queued */
}

/* copy_async / mark / fence_done (backend.h): the copy queue of backend_cuda_rt.cu */
static uint64_t cu_copy_async(be_backend *be, void *dst, const void *src, size_t bytes, uint64_t after) {
    pend_flush(be);
    /* the overlapped launches' early weight loads are not ordered after the copy stream's events (call D: a tier's slot
     * read before its copy landed), so none is overlapped from this backend's first such copy until it is destroyed */
    if (!cu_of(be)->pdl_blocked) cu_of(be)->pdl_blocked = 1, slcu_pdl_block(1);
    uint64_t f = slcb_copy_async(cu_of(be)->q, dst, src, bytes, after, MSG(be));
    if (!f) cu_fail(be, SL_EIO, cu_of(be)->tmp);
    return f;
}

static uint64_t cu_mark(be_backend *be) {
    pend_flush(be);
    uint64_t f = slcb_mark(cu_of(be)->q, MSG(be));
    if (!f) cu_fail(be, SL_EIO, cu_of(be)->tmp);
    return f;
}

static int cu_fence_done(be_backend *be, uint64_t f, int wait) {
    int rc = slcb_fence_done(cu_of(be)->q, f, wait, MSG(be));
    if (rc < 0) cu_fail(be, SL_EIO, cu_of(be)->tmp);
    return rc != 0;
}

static void cu_zero(be_backend *be, void *p, size_t bytes) {
    SKIP(be);
    CU(be, slcb_zero(p, bytes, MSG(be)));
}

static sl_status cu_sync(be_backend *be) {
    pend_flush(be);
    cu_ctx *c = cu_of(be);
    if (slcu_sync(MSG(be))) cu_fail(be, SL_EIO, c->tmp);
    else c->up_off = 0; /* nothing queued reads the upload ring now */
    sl_status st = c->status;
    c->status = 0;
    return st;
}

/* backend.h check: the failures recorded so far (each launch's own error is read as it is queued), no wait:
 * a fault of queued work shows at the next cu_sync, which the forward pass calls before it commits a step. The
 * upload ring is not reset here: its pieces are reused after a full sync only. */
static sl_status cu_check(be_backend *be) {
    if (!slcu_decode_kernels) return cu_sync(be); /* SLUICE_CUDA_DECODE=0: a wait after every block, as before */
    cu_ctx *c = cu_of(be);
    sl_status st = c->status;
    c->status = 0;
    return st;
}

/* backend.h step_begin / step_end over backend_cuda_rt.cu's recorded steps; the position buckets of STEP_KEYS
 * keep the attention's shared memory for the keys of that bucket (a new bucket is recorded anew). */
#define STEP_KEYS 1024
static int cu_step_begin(be_backend *be, uint64_t key, int pos) {
    pend_flush(be);
    cu_ctx *c = cu_of(be);
    if (!c->gr || c->status || c->step || pos < 0) return 0;
    const int r = slcb_step_begin(c->gr, key, pos / STEP_KEYS);
    if (!r) return 0;
    c->step = r, c->step_pos = pos;
    slcu_set_step(slcb_graphs_pos(c->gr), (pos / STEP_KEYS + 1) * STEP_KEYS);
    return 1;
}

static int cu_step_end(be_backend *be, int ok) {
    pend_flush(be);
    cu_ctx *c = cu_of(be);
    if (!c->step) return 0;
    if (c->step == 2 && c->status) ok = 0; /* an op could not be recorded */
    c->step = 0;
    slcu_set_step(NULL, 0);
    const int r = slcb_step_end(c->gr, ok, c->step_pos, MSG(be));
    if (r < 0) cu_fail(be, SL_EIO, c->tmp);
    if (r > 0) c->status = 0; /* nothing ran: what failed was the recording; the rerun meets any real failure */
    return r > 0;
}

static const char *cu_errmsg(be_backend *be) { return cu_of(be)->msg; }

static sl_status cu_reserve(be_backend *be, size_t slot_floats) {
    (void)be, (void)slot_floats; /* the kernels size their own shared memory */
    return 0;
}

static void cu_destroy(be_backend *be) {
    if (!be) return;
    cu_ctx *c = cu_of(be);
    pend_flush(be);
    slcu_sync(MSG(be));
    slcb_queue_free(c->q);
    slcb_graphs_free(c->gr);
    if (c->pdl_blocked) slcu_pdl_block(0); /* its copies are done (synced above) */
    slcu_free(c->mw);
    slcb_free(c->up_host, 1);
    slcb_free(c->up_dev, 0);
    slcu_free(c->rt);
    slcb_free(c->nq_buf, 0);
    slcu_free(c->fz);
    for (int i = 0; i < c->n_tab; i++) slcu_free(c->tab[i].dev);
    free(c->tab);
    free(c->host);
    be_close(c->cpu);
    free(c);
    free(be);
}

/* Row tokens[t] of the device table: slcu_embed, or (SLUICE_CUDA_EMBED=0, a bad id) dequantised on the host. */
static void cu_embed(be_backend *be, const tn_mat *table, const int32_t *tokens, int n, float *x, size_t ldx) {
    pend_flush(be);
    cu_ctx *c = cu_of(be);
    c->nq_y = NULL;
    int ok = !c->embed_host && !c->step && n > 0; /* on the device (slcu_embed, the ids by the ring), not in a recorded step */
    for (int t = 0; ok && t < n; t++) ok = tokens[t] >= 0 && tokens[t] < table->rows; /* else the host path reports it */
    const int *d = ok ? dev_upload(be, tokens, (size_t)n * sizeof(int32_t)) : NULL;
    const slcu_mat dm = mat_of(table);
    if (ok && d && (slcu_kq_takes(dm.dtype) ? slcu_embed_kq : slcu_embed)(&dm, d, n, x, ldx, MSG(be))) cu_fail(be, SL_EUNSUPPORTED, c->tmp);
    if (ok) return;
    const dt_type dt = table->dtype;
    const int quant = dt == DT_Q8 || dt == DT_Q4, cols = table->cols;
    if (!quant && !slcu_kq_takes(dt) && dt != DT_F32 && dt != DT_BF16 && dt != DT_F16) {
        snprintf(MSG(be), "the CUDA backend cannot embed from a %s table", dt_name(dt));
        cu_fail(be, SL_EUNSUPPORTED, c->tmp);
        return;
    }
    const size_t code_b = quant || slcu_kq_takes(dt) ? q_row_code_bytes(dt, cols) : (size_t)cols * dt_size(dt);
    const size_t ng = quant ? (size_t)(cols / table->group) : 0, sb = ng * dt_size(table->sdtype);
    uint8_t *h = host_scratch(be, (size_t)cols * sizeof(float) + code_b + 2 * sb + 64);
    if (!h) return;
    float *row = (float *)h;
    uint8_t *codes = h + (size_t)cols * sizeof(float), *sc = codes + code_b, *bi = sc + sb;
    for (int t = 0; t < n; t++) {
        const size_t r = (size_t)tokens[t];
        if (tokens[t] < 0 || tokens[t] >= table->rows) {
            cu_fail(be, SL_ERANGE, "embed: a token outside the vocabulary");
            return;
        }
        tn_mat one = *table;
        one.rows = 1;
        one.data = codes;
        if (slcb_copy(codes, (const uint8_t *)table->data + r * code_b, code_b, 1, MSG(be))) break;
        if (quant) {
            one.scales = sc;
            one.biases = table->biases ? bi : NULL;
            if (slcb_copy(sc, (const uint8_t *)table->scales + r * sb, sb, 1, MSG(be))) break;
            if (table->biases && slcb_copy(bi, (const uint8_t *)table->biases + r * sb, sb, 1, MSG(be)))
                break;
        }
        q_row_to_f32(&one, 0, row);
        if (slcb_copy(x + (size_t)t * ldx, row, (size_t)cols * sizeof(float), 1, MSG(be))) break;
        if (t == n - 1) return;
    }
    if (n > 0) cu_fail(be, SL_EIO, c->tmp);
}

slcu_mat mat_of(const tn_mat *w) {
    return (slcu_mat){.data = w->data, .scales = w->scales, .biases = w->biases, .dtype = w->dtype,
                      .sdtype = w->sdtype, .rows = w->rows, .cols = w->cols, .group = w->group, .ibias = w->bias_implied};
}

/* x's int8 form on the device, quantized on first use. 0, or -1 (recorded). */
int act_ready(be_backend *be, kern_act *x, slcu_act *a) {
    cu_ctx *c = cu_of(be);
    if (x->ready && (x->q != (int8_t *)c->nq_buf || x == c->nq_owner)) {
        *a = (slcu_act){.n_tok = x->n_tok, .cols = x->cols, .q = x->q, .q4 = x->q4, .d = x->d, .s = x->s};
        return 0;
    }
    x->ready = 0; /* (its int8 form was the norm's, made again since) */
    if (c->nq_y && x->x == c->nq_y && x->n_tok == c->nq_rows && x->cols == c->nq_dim &&
        (x->n_tok == 1 || x->ldx == (size_t)x->cols) && !slcu_act_bind(a, c->nq_buf, x->n_tok, x->cols, MSG(be))) { /* the norm made it */
        x->q = a->q, x->q4 = a->q4, x->d = a->d, x->s = a->s;
        x->ready = 1;
        c->nq_owner = x;
        return 0;
    }
    if (slcu_act_bind(a, x->buf, x->n_tok, x->cols, MSG(be)) ||
        slcu_act_quantize(a, x->x, x->ldx, MSG(be))) {
        cu_fail(be, SL_EIO, c->tmp);
        return -1;
    }
    x->q = a->q, x->q4 = a->q4, x->d = a->d, x->s = a->s;
    x->ready = 1;
    return 0;
}

int int8_path(const tn_mat *w, const kern_act *x) {
    return x->int8 && x->buf && (w->dtype == DT_Q8 || w->dtype == DT_Q4) && x->cols % 32 == 0 && w->group % 32 == 0;
}

/* SLUICE_CUDA_MVG=1 (cuda_mvn.h): 2-8 token jobs of one activation through slcu_mvg_matmul, each row read once for all
 * tokens (the same bits); 1 taken (queued, or failed: the sticky error), 0 not its case */
static int mvg_run(be_backend *be, const slcu_mm *mm, int n) {
    if (mm[0].n_tok < 2 || !slcu_mvg_on() || !slcu_decode_kernels) return 0;
    const int r = slcu_mvg_matmul(mm, n, MSG(be));
    if (r < 0) cu_fail(be, SL_EIO, cu_of(be)->tmp);
    return r != 0;
}

/* hold: a one-token matvec may be held for the op after it (SLUICE_CUDA_FUSE; the table's matmul, not the ops that
 * launch kernels of their own after one) */
static void mm_run(be_backend *be, const tn_mat *w, kern_act *x, float *y, size_t ldy, int hold) {
    SKIP_MM(be);
    if (y == cu_of(be)->nq_y) cu_of(be)->nq_y = NULL; /* (after its reads: the stream orders them) */
    if (x->n_tok <= 0) return;
    if (w->dtype == DT_MXFP4 || slcu_kq_takes(w->dtype)) { /* f32 activations whatever x->int8 (GGUF blocks: cuda_kq.h) */
        const slcu_mat m = mat_of(w);
        CU(be, (w->dtype == DT_MXFP4 ? slcu_matmul_mxfp4 : slcu_matmul_kq)(&m, x->x, x->ldx, y, ldy, x->n_tok, MSG(be)));
        return;
    }
    if (hold && !int8_path(w, x) && hold_router(be, w, x, y, ldy)) return; /* SLUICE_CUDA_FUSE=router: routed in its launch */
    if (int8_path(w, x)) {
        slcu_act a;
        if (act_ready(be, x, &a)) return;
        slcu_mm mm = {.w = mat_of(w), .a = &a, .rows = NULL, .n_tok = x->n_tok, .y = y, .ldy = ldy};
        if (mvg_run(be, &mm, 1)) return; /* (SLUICE_CUDA_MVG=1: a decode batch's 2-8 tokens) */
        if (!hold || !hold_mm(be, &mm, 1, FUSE_O)) CU(be, slcu_matmul_i8(&mm, 1, MSG(be))); /* (SLUICE_CUDA_FUSE=o) */
        return;
    }
    /* exact kernels: a token's order is fixed by the shapes (cuda_mat.cu), so rows batched == one at a time */
    const slcu_mat m = mat_of(w);
    if (x->ldx == (size_t)w->cols && ldy == (size_t)w->rows) {
        CU(be, slcu_matmul(&m, x->x, y, x->n_tok, MSG(be)));
        return;
    }
    for (int t = 0; t < x->n_tok; t++)
        CU(be, slcu_matmul(&m, x->x + (size_t)t * x->ldx, y + (size_t)t * ldy, 1, MSG(be)));
}

static void cu_matmul(be_backend *be, const tn_mat *w, kern_act *x, float *y, size_t ldy) { mm_run(be, w, x, y, ldy, 1); }

/* The int8 ones in one slcu_matmul_i8 call (k and v beside q, not after it; bitwise each alone), the rest alone. */
#define MM_GROUP 16
static void cu_matmul_multi(be_backend *be, const kern_mm *mm, int n) {
    SKIP_MM(be);
    for (int i = 0; i < n; i++)
        if (mm[i].y == cu_of(be)->nq_y) cu_of(be)->nq_y = NULL;
    slcu_act a[MM_GROUP];
    slcu_mm g[MM_GROUP];
    int ng = 0;
    for (int i = 0; i < n; i++) {
        const kern_mm *m = &mm[i];
        if (n > 1 && ng < MM_GROUP && m->a->n_tok > 0 && m->w->dtype != DT_MXFP4 && int8_path(m->w, m->a)) {
            if (act_ready(be, m->a, &a[ng])) return;
            g[ng] = (slcu_mm){.w = mat_of(m->w), .a = &a[ng], .n_tok = m->a->n_tok, .y = m->y, .ldy = m->ldy};
            ng++;
        } else {
            mm_run(be, m->w, m->a, m->y, m->ldy, 0);
        }
    }
    if (ng && !mvg_run(be, g, ng) && !(ng == n && hold_mm(be, g, ng, FUSE_QKV)))
        CU(be, slcu_matmul_i8(g, ng, MSG(be))); /* (SLUICE_CUDA_MVG=1; SLUICE_CUDA_FUSE=qkv) */
}

/* The gathered rows' own int8 form, made when a matrix reads it: bitwise the gather. */
static void cu_act_gather(be_backend *be, kern_act *dst, void *buf, kern_act *src, const int *idx, int n,
                          const float *x_rows) {
    (void)be, (void)idx;
    kern_act_init(dst, buf, x_rows, (size_t)src->cols, n, src->cols, src->int8);
}

/* room for one row's int8 form in nq_buf (grown outside recorded steps only); 1 when there is */
int nq_room(be_backend *be, int dim) {
    cu_ctx *c = cu_of(be);
    const size_t need = slcu_act_bytes(1, dim);
    if (need <= c->nq_cap) return 1;
    if (c->step || slcu_sync(MSG(be))) return 0; /* queued work may read the old buffer */
    slcb_free(c->nq_buf, 0);
    c->nq_buf = slcb_alloc(need + SLACK, 0);
    c->nq_cap = c->nq_buf ? need : 0;
    return c->nq_buf != NULL;
}

static void cu_add_bias(be_backend *be, float *x, size_t ld, const float *b, int n_rows, int cols) {
    SKIP(be);
    CU(be, slcb_add_bias(x, ld, b, n_rows, cols, MSG(be)));
}

/* Only the index lists given go up (the upload ring); an absent one is k_copy_rows's NULL (rows 0 .. n-1), so a
 * strided block copy (neither given) is one launch and no upload. */
static void cu_copy_rows(be_backend *be, float *dst, size_t ldd, const int *didx, const float *src, size_t lds,
                         const int *sidx, int n, int cols) {
    SKIP(be);
    if (n <= 0) return;
    const int m = (didx != NULL) + (sidx != NULL);
    const int *d = NULL;
    if (m) {
        int *h = host_scratch(be, (size_t)m * (size_t)n * sizeof(int));
        if (!h) return;
        if (didx) memcpy(h, didx, (size_t)n * sizeof(int));
        if (sidx) memcpy(h + (didx ? n : 0), sidx, (size_t)n * sizeof(int));
        if (!(d = dev_upload(be, h, (size_t)m * (size_t)n * sizeof(int)))) return;
    }
    CU(be, slcb_copy_rows(dst, ldd, didx ? d : NULL, src, lds, sidx ? d + (didx ? n : 0) : NULL, n, cols, MSG(be)));
}

static slcu_attn attn_of(const be_attn *a) {
    return (slcu_attn){.q = a->q, .ldq = a->ldq, .qstride = a->qstride, .gated = a->gated, .k = a->k, .v = a->v,
                       .ldkv = a->ldkv, .k_cache = a->k_cache, .v_cache = a->v_cache, .cap = a->cap, .n = a->n,
                       .pos0 = a->pos0, .n_heads = a->n_heads, .n_kv = a->n_kv_heads, .hd = a->head_dim,
                       .window = a->window, .sinks = a->sinks, .scale = a->scale, .out = a->out, .ldo = a->ldo,
                       .f16 = a->kv_type == SL_KV_F16};
}

static void cu_attention(be_backend *be, const be_attn *a) {
    SKIP(be);
    if ((a->kv_type != SL_KV_F32 && a->kv_type != SL_KV_F16) || a->kv_type_v != a->kv_type) { cu_fail(be, SL_EUNSUPPORTED, "no bf16/q8 KV cache on CUDA"); return; }
    const slcu_attn s = attn_of(a);
    cu_ctx *c = cu_of(be);
    const int cols = a->n_heads * a->head_dim;
    slcu_act q;
    if (!c->nq_off && a->n == 1 && a->head_dim % 128 == 0 && nq_room(be, cols) && !slcu_act_bind(&q, c->nq_buf, 1, cols, MSG(be))) {
        const int r = slcu_attention_q(&s, &q, MSG(be)); /* one token: its output's int8 form for o too (nq_*) */
        if (r < 0) cu_fail(be, SL_EIO, c->tmp);
        if (r == 1) c->nq_y = a->out, c->nq_dim = cols, c->nq_rows = 1, c->nq_owner = NULL;
        return;
    }
    CU(be, slcu_attention(&s, MSG(be)));
}

/* m items of one KV type in one launch set, or (not taken) each alone */
static void items_run(be_backend *be, const be_attn *a, const int *at, const slcu_attn *s, int m, int f16) {
    const int r = m < 2 ? 0 : f16 ? slcu_attention_f16_items(s, m, MSG(be)) : slcu_attention_f32_items(s, m, MSG(be));
    if (r < 0) cu_fail(be, SL_EIO, cu_of(be)->tmp);
    for (int j = 0; !r && j < m; j++) cu_attention(be, a + at[j]);
}

/* SLUICE_CUDA_ATTN_ITEMS (on unless =0): a decode batch's one-token items of f16 (f32) caches in launches of up to SLCU_ATTN_ITEMS
 * (slcu_attention_f16_items, _f32_items), the others, and a launch not taken, each alone: every item bitwise
 * cu_attention */
static void cu_attention_items(be_backend *be, const be_attn *a, int n) {
    SKIP(be);
    for (int i = 0; i < n;) {
        slcu_attn s[2][SLCU_ATTN_ITEMS];
        int at[2][SLCU_ATTN_ITEMS], m[2] = {0, 0};
        for (; i < n && m[0] < SLCU_ATTN_ITEMS && m[1] < SLCU_ATTN_ITEMS; i++) {
            const int t = a[i].kv_type == SL_KV_F16; /* 1 f16, 0 f32 */
            if ((t || a[i].kv_type == SL_KV_F32) && a[i].kv_type_v == a[i].kv_type && a[i].n == 1 && a[i].k)
                s[t][m[t]] = attn_of(a + i), at[t][m[t]++] = i;
            else cu_attention(be, a + i);
        }
        for (int t = 0; t < 2; t++) items_run(be, a, at[t], s[t], m[t], t);
    }
}

/* SLUICE_CUDA_ATTN_ITEMS (on unless =0): a decode batch's RoPE in one launch (slcu_rope_at), bitwise cu_rope of each token */
static void cu_rope_at(be_backend *be, float *x, int n_tok, size_t ld, int n_heads, size_t head_stride, int rot,
                       const float *inv_freq, float attn_factor, const int *pos, int interleave) {
    if (n_tok == 1) { /* (a held norm's RoPE) */
        cu_rope(be, x, 1, ld, n_heads, head_stride, rot, inv_freq, attn_factor, pos[0], interleave);
        return;
    }
    if (nr_rows(be, x, n_tok, ld, n_heads, head_stride, rot, inv_freq, attn_factor, pos, interleave)) return; /* (NROWS=1) */
    SKIP(be);
    CU(be, slcu_rope_at(x, n_tok, ld, n_heads, head_stride, rot, inv_freq, attn_factor, pos, interleave, MSG(be)));
}

static void cu_mla(be_backend *be, const be_mla *a) {
    SKIP(be);
    if (a->sel || a->ldc != a->r + a->dr) { cu_fail(be, SL_EUNSUPPORTED, "mla: no CUDA kernel for DSA's sparse choice"); return; }
    const slcu_mla s = {.q = a->q, .ldq = a->ldq, .ckv = a->ckv, .cache = a->cache, .kv_b = mat_of(a->kv_b), .n = a->n,
                        .pos0 = a->pos0, .n_heads = a->n_heads, .r = a->r, .dr = a->dr, .dn = a->dn, .dv = a->dv,
                        .scale = a->scale, .q_abs = a->q_abs, .lat = a->lat};
    CU(be, slcu_mla_attention(&s, MSG(be)));
}

/* backend.h mla_out: cuda_mla_out.cu's one launch; 0 (mla.c's matmul a head) for a kv_b it has no kernel for */
static int cu_mla_out(be_backend *be, const be_mla *a) {
    const slcu_mat w = mat_of(a->kv_b);
    if (!slcu_mla_out_takes(&w, a->n_heads, a->r, a->dn, a->dv)) return 0;
    if (cu_of(be)->step == 1) return 1; /* (SKIP's, in an op that returns) */
    pend_flush(be);
    cu_of(be)->nq_y = NULL;
    CU(be, slcu_mla_out(&w, a->lat, a->out, a->ldo, a->n, a->n_heads, a->r, a->dn, a->dv, MSG(be)));
    return 1;
}

static slcu_dn dn_of(const be_dn *d) {
    return (slcu_dn){.n = d->n, .nk = d->nk, .nv = d->nv, .dk = d->dk, .dv = d->dv, .conv_k = d->conv_k,
                     .conv_in = d->conv_in, .conv_w = d->conv_w, .conv_in_state = d->conv_in_state,
                     .conv_out_state = d->conv_out_state, .conv_out = d->conv_out, .ba = d->ba,
                     .ba_grouped = d->ba_grouped, .A_log = d->A_log, .dt_bias = d->dt_bias, .gates = d->gates,
                     .out = d->out, .ldo = d->ldo, .z = d->z, .norm_w = d->norm_w, .eps = d->eps};
}

static void cu_dn_conv(be_backend *be, const be_dn *d) {
    SKIP(be);
    const slcu_dn s = dn_of(d);
    CU(be, slcu_dn_conv(&s, MSG(be)));
}

static void cu_dn_gates(be_backend *be, const be_dn *d) {
    SKIP(be);
    const slcu_dn s = dn_of(d);
    CU(be, slcu_dn_gates(&s, MSG(be)));
}

/* dn_step and dn_chunk: the token recurrence (backend.h lets dn_chunk be ~1e-6 of dn_step; here it is dn_step) */
static void cu_dn_step(be_backend *be, const be_dn *d) {
    SKIP(be);
    CU(be, slcu_dn_step(d->conv_out, d->gates, d->ssm_in, d->ssm_out, d->out, d->ldo, d->n, d->nk, d->nv, d->dk, d->dv,
                        MSG(be)));
}

static void cu_dn_norm(be_backend *be, const be_dn *d) {
    SKIP(be);
    const slcu_dn s = dn_of(d);
    CU(be, slcu_dn_norm(&s, MSG(be)));
}

/* cfg's router on the device (slcu_route: cpu_moe.c route_token's rules), or 0: uniform routing (XXH3). */
static int router_of(const fam_config *cfg, const float *bias, slcu_router *r) {
    if (cfg->uniform_routing || cfg->n_experts > 1024 || cfg->n_experts_used < 1 || cfg->n_experts_used > cfg->n_experts)
        return 0;
    if (cfg->router == SL_ROUTER_SOFTMAX_BIAS) return 0; /* no device rule: the CPU backend's chooses */
    if (cfg->router == SL_ROUTER_SIGMOID_GROUP && (cfg->n_group < 1 || cfg->n_group > 64 || !cfg_groups_ok(cfg))) return 0;
    *r = (slcu_router){.kind = cfg->router, .E = cfg->n_experts, .k = cfg->n_experts_used, .norm_topk = cfg->norm_topk,
                       .n_group = cfg->n_group, .topk_group = cfg->topk_group, .routed_scale = (float)cfg->routed_scale,
                       .bias = bias, .warp2 = slcu_route_mode == 2};
    return 1;
}

static int *route_buf(be_backend *be, size_t nk) {
    cu_ctx *c = cu_of(be);
    if (nk > c->rt_cap) {
        if (slcu_sync(MSG(be))) return cu_fail(be, SL_EIO, c->tmp), NULL; /* queued work may read the old one */
        slcu_free(c->rt);
        slcb_graphs_clear(c->gr); /* recorded steps may read the old one */
        c->rt_cap = 0;
        if (!(c->rt = slcu_alloc(nk * (sizeof(int) + sizeof(float)), MSG(be)))) return cu_fail(be, SL_ENOMEM, c->tmp), NULL;
        c->rt_cap = nk;
    }
    return c->rt;
}

/* The device router's choice, copied back (so streamed steps weigh experts as moe_resident does): its experts and
 * weights side by side in the route buffer, one blocking download (where there were two); a hint or uniform routing:
 * the logits come back and the CPU backend's rule chooses. */
static sl_status cu_route(be_backend *be, const be_route *r) {
    pend_flush(be);
    cu_ctx *c = cu_of(be);
    slcu_router rr;
    if (c->step) return SL_EIO; /* a recorded step cannot give the host its choice: step_end reruns it as usual */
    if (!r->hint && router_of(r->cfg, r->bias, &rr)) {
        const size_t nk = (size_t)r->n * (size_t)r->cfg->n_experts_used;
        int *de = route_buf(be, nk), *h = de ? host_scratch(be, 2 * nk * sizeof(int)) : NULL;
        if (!h) return cu_sync(be);
        float *dw = (float *)(de + nk); /* (route_buf holds 2 rt_cap words, rt_cap >= nk) */
        if (slcu_route(&rr, r->logits, r->n, de, dw, MSG(be)) || slcb_copy(h, de, 2 * nk * sizeof(int), 1, MSG(be))) {
            cu_fail(be, SL_EIO, c->tmp);
        } else {
            memcpy(r->top_e, h, nk * sizeof(int));
            memcpy(r->top_w, h + nk, nk * sizeof(float));
        }
        return cu_sync(be);
    }
    sl_status st = cu_sync(be);
    if (st) return st;
    const size_t E = (size_t)r->cfg->n_experts, nE = (size_t)r->n * E;
    float *h = host_scratch(be, (nE + E) * sizeof(float));
    if (!h) return cu_sync(be);
    be_route rh = *r;
    rh.logits = h;
    rh.bias = r->bias ? h + nE : NULL;
    if (slcb_copy(h, r->logits, nE * sizeof(float), 1, MSG(be)) ||
        (r->bias && slcb_copy(h + nE, r->bias, E * sizeof(float), 1, MSG(be)))) {
        cu_fail(be, SL_EIO, c->tmp);
        return cu_sync(be);
    }
    st = c->cpu->route(c->cpu, &rh);
    if (st) cu_fail(be, st, c->cpu->errmsg(c->cpu));
    return cu_sync(be);
}

/* y = down(a), a [n][cols] the FFN's mid activation with its own int8 form (mid_buf) */
static void ffn_down(be_backend *be, const be_ffn *f, const tn_mat *down, const float *a, int cols) {
    kern_act m;
    kern_act_init(&m, f->mid_buf, a, (size_t)cols, f->x->n_tok, down->cols, f->int8);
    mm_run(be, down, &m, f->y, f->ldy, 0);
}

static void cu_ffn(be_backend *be, const be_ffn *f) {
    SKIP(be);
    const int n = f->x->n_tok, I = f->inter;
    if (f->kind == BE_FFN_GPTOSS) {
        const tn_expert *ex = f->w;
        mm_run(be, &ex->gate_up, f->x, f->g, (size_t)(2 * I), 0);
        CU(be, slcu_swiglu_clamped(f->g, ex->gate_up_bias, f->limit, f->u, n, I, MSG(be)));
        ffn_down(be, f, &ex->down, f->u, I);
        cu_add_bias(be, f->y, f->ldy, ex->down_bias, n, ex->down.rows);
        return;
    }
    mm_run(be, &f->w->gate, f->x, f->g, (size_t)I, 0);
    mm_run(be, &f->w->up, f->x, f->u, (size_t)I, 0);
    CU(be, slcu_swiglu(f->g, f->u, f->g, (size_t)n * (size_t)I, MSG(be)));
    ffn_down(be, f, &f->w->down, f->g, I);
}

/* g = silu(g) u over n rows of I, and their int8 form in mid_buf (one kernel), bound in *m. 0, or -1 (recorded). */
static int swiglu_mid(be_backend *be, float *g, const float *u, void *mid_buf, int n, int I, slcu_act *m) {
    if (slcu_act_bind(m, mid_buf, n, I, MSG(be)) ||
        (cu_of(be)->nq_off ? slcu_swiglu(g, u, g, (size_t)n * I, MSG(be)) || slcu_act_quantize(m, g, (size_t)I, MSG(be))
                           : slcu_swiglu_q(g, u, g, m, MSG(be)))) {
        cu_fail(be, SL_EIO, cu_of(be)->tmp);
        return -1;
    }
    return 0;
}

#define MULTI_MAX 64 /* experts of one grouped ffn_multi (moe.c FUSED_MAX is 32) */

/* ffn_multi's int8 case: every f[i] a SwiGLU expert over the same one-token int8 activation, q8/q4 parts,
 * g / u consecutive rows of f[0]'s (backend.h) and a q8/q4 down on int8 input. */
static int multi_i8(const be_ffn *f, int n) {
    if (n < 2 || n > MULTI_MAX || f[0].x->n_tok != 1) return 0;
    const int I = f[0].inter;
    for (int i = 0; i < n; i++) {
        const tn_mat *dn = &f[i].w->down;
        if (f[i].kind != BE_FFN_SWIGLU || f[i].x != f[0].x || f[i].inter != I || !f[i].int8 ||
            f[i].g != f[0].g + (size_t)i * I || f[i].u != f[0].u + (size_t)i * I || !int8_path(&f[i].w->gate, f[0].x) ||
            !int8_path(&f[i].w->up, f[0].x) || (dn->dtype != DT_Q8 && dn->dtype != DT_Q4) || dn->group % 32 || I % 32)
            return 0;
    }
    return 1;
}

/* n experts over one token. int8 (multi_i8): gate and up of all n in one slcu_matmul_i8 call, one SwiGLU
 * over the n rows, one quantization of those n rows (mid_buf), every down in a second call, matrix i on
 * row i: four launches instead of five per expert. Each output is bitwise cu_ffn's alone: the grouped
 * call computes each matrix as a separate one does (cuda.h's canonical order, the same kernel for one
 * token), SwiGLU is element-wise and quantization per row. Otherwise each expert alone in turn (one
 * stream: the scratch is free again for the next). */
static void cu_ffn_multi(be_backend *be, const be_ffn *f, int n) {
    SKIP(be);
    if (!multi_i8(f, n)) {
        for (int i = 0; i < n; i++) {
            be_ffn one = f[i];
            one.mid_buf = f[0].mid_buf;
            cu_ffn(be, &one);
        }
        return;
    }
    const int I = f[0].inter;
    slcu_act a, m, mi[MULTI_MAX];
    slcu_mm mm[2 * MULTI_MAX];
    if (act_ready(be, f[0].x, &a)) return;
    for (int i = 0; i < n; i++) {
        mm[2 * i] = (slcu_mm){.w = mat_of(&f[i].w->gate), .a = &a, .n_tok = 1, .y = f[i].g, .ldy = (size_t)I};
        mm[2 * i + 1] = (slcu_mm){.w = mat_of(&f[i].w->up), .a = &a, .n_tok = 1, .y = f[i].u, .ldy = (size_t)I};
    }
    CU(be, slcu_matmul_i8(mm, 2 * n, MSG(be)));
    if (swiglu_mid(be, f[0].g, f[0].u, f[0].mid_buf, n, I, &m)) return;
    const size_t nb = (size_t)I / 32, ns = nb + nb / 2 + nb / 4;
    for (int i = 0; i < n; i++) { /* row i of the n-row activation, as a one-row one */
        mi[i] = (slcu_act){.n_tok = 1, .cols = I, .q = m.q + (size_t)i * I, .q4 = m.q4 + (size_t)i * I,
                           .d = m.d + (size_t)i * nb, .s = m.s + (size_t)i * ns};
        mm[i] = (slcu_mm){.w = mat_of(&f[i].w->down), .a = &mi[i], .n_tok = 1, .y = f[i].y, .ldy = f[i].ldy};
    }
    CU(be, slcu_matmul_i8(mm, n, MSG(be)));
}

static int same_mat(const tn_mat *a, const tn_mat *b) {
    return a->dtype == b->dtype && a->sdtype == b->sdtype && a->rows == b->rows && a->cols == b->cols &&
           a->group == b->group && !a->scales == !b->scales && !a->biases == !b->biases;
}

/* Layer L's device table [gate, up, down][E][data, scales, biases], built on first use: 1, 0 (experts
 * unlike expert 0, in *ex0: the host path) or -1 (recorded). Its implied[i]: every expert's matrix i has implied
 * biases (tn_mat bias_implied), so the decode's matvecs may compute them (cuda.h slcu_mat ibias, SLUICE_CUDA_IBIAS).
 * oss (gpt-oss's experts, cuda.h slcu_moex): [gate_up, down][E][data, scales, biases], then [gate_up_bias,
 * down_bias][E] (every expert has both). */
static int layer_tab(be_backend *be, const tn_expert_src *xs, int L, int E, int oss, tn_expert *ex0) {
    cu_ctx *c = cu_of(be);
    memset(ex0, 0, sizeof *ex0);
    if (L < 0 || xs->get(xs->ctx, L, 0, ex0)) return 0; /* the host path reports it */
    if (L >= c->n_tab) {
        struct cu_tab *t = realloc(c->tab, (size_t)(L + 1) * sizeof *t);
        if (!t) return cu_fail(be, SL_ENOMEM, "out of host memory (CUDA expert tables)"), -1;
        memset(t + c->n_tab, 0, (size_t)(L + 1 - c->n_tab) * sizeof *t);
        c->tab = t, c->n_tab = L + 1;
    }
    struct cu_tab *t = &c->tab[L];
    const void *key = oss ? ex0->gate_up.data : ex0->gate.data;
    if (t->src == xs->ctx && t->key == key && t->oss == oss) return t->ok == 1;
    const int nm = oss ? 2 : 3; /* matrices an expert */
    const size_t bytes = (size_t)(oss ? 8 : 9) * (size_t)E * sizeof(void *);
    const void **h = host_scratch(be, bytes);
    if (!h) return -1;
    int ok = 1, implied[3] = {1, 1, 1};
    for (int e = 0; e < E && ok; e++) {
        tn_expert ex;
        memset(&ex, 0, sizeof ex);
        if (xs->get(xs->ctx, L, e, &ex)) return 0;
        const tn_mat *m[3] = {&ex.gate, &ex.up, &ex.down}, *m0[3] = {&ex0->gate, &ex0->up, &ex0->down};
        if (oss) m[0] = &ex.gate_up, m[1] = &ex.down, m0[0] = &ex0->gate_up, m0[1] = &ex0->down;
        for (int i = 0; i < nm; i++) {
            ok &= m[i]->data && same_mat(m[i], m0[i]);
            const void **p = h + ((size_t)i * E + e) * 3;
            p[0] = m[i]->data, p[1] = m[i]->scales, p[2] = m[i]->biases;
            implied[i] &= m[i]->bias_implied != 0;
        }
        if (oss) {
            ok &= ex.gate_up_bias && ex.down_bias;
            h[(size_t)6 * E + e] = ex.gate_up_bias, h[(size_t)7 * E + e] = ex.down_bias;
        }
    }
    slcb_graphs_clear(c->gr); /* recorded steps may read the old table */
    slcu_free(t->dev);
    t->dev = NULL;
    if (ok && !(t->dev = slcu_alloc(bytes, MSG(be)))) return cu_fail(be, SL_ENOMEM, c->tmp), -1;
    if (ok && slcu_upload(t->dev, h, bytes, MSG(be))) return cu_fail(be, SL_EIO, c->tmp), -1;
    t->src = xs->ctx, t->key = key, t->ok = ok ? 1 : -1, t->oss = oss;
    memcpy(t->implied, implied, sizeof implied);
    return ok;
}

/* backend.h moe_resident: cu_ffn_multi's int8 launches (multi_i8's case; else 0) on slcu_route's choice in
 * device memory, each job's matrices read from the layer's table at its id: bitwise cu_route + ffn_multi. */
static int cu_moe_resident(be_backend *be, const be_route *r, const tn_expert_src *xs, const be_ffn *f,
                           const float **w_dev) {
    if (!router_held(be, r->logits)) pend_flush(be); /* (held: joined to the route below, or flushed by the next op) */
    cu_ctx *c = cu_of(be);
    const fam_config *cfg = r->cfg;
    const int k = cfg->n_experts_used, E = cfg->n_experts, I = f->inter;
    slcu_router rr;
    tn_expert ex0;
    if (f->kind != BE_FFN_SWIGLU || f->x->n_tok != 1 || !f->int8 || k > MULTI_MAX || I % 32 ||
        !router_of(cfg, r->bias, &rr))
        return 0;
    int ok = layer_tab(be, xs, r->layer, E, 0, &ex0);
    const tn_mat *dn = &ex0.down;
    if (ok < 0) return cu_sync(be);
    if (!ok || !int8_path(&ex0.gate, f->x) || !int8_path(&ex0.up, f->x) || (dn->dtype != DT_Q8 && dn->dtype != DT_Q4) ||
        dn->group % 32 || ex0.gate.rows != I || ex0.up.rows != I || dn->cols != I)
        return 0;
    int *de = route_buf(be, (size_t)k);
    if (!de) return cu_sync(be);
    float *dw = (float *)(de + c->rt_cap);
    const void *const *tab = c->tab[r->layer].dev;
    const int *implied = c->tab[r->layer].implied; /* of every expert's gate, up, down: slcu_mat ibias */
    slcu_act a, ma, mi[MULTI_MAX];
    slcu_mm mm[2 * MULTI_MAX];
    if (c->nq_y == f->g || c->nq_y == f->u || c->nq_y == f->y) c->nq_y = NULL; /* written below */
    if (c->step == 1) { /* replayed: the launches below are in the graph */
        *w_dev = dw;
        return 1;
    }
    if (route_held(be, &rr, r->logits, de, dw) || act_ready(be, f->x, &a))
        return cu_fail(be, SL_EIO, c->tmp), cu_sync(be);
    for (int s = 0; s < 2 * k; s++) {
        mm[s] = (slcu_mm){.w = mat_of(s & 1 ? &ex0.up : &ex0.gate), .a = &a, .tab = tab + (size_t)(s & 1) * 3 * E,
                          .sel = de + s / 2, .n_tok = 1, .y = (s & 1 ? f->u : f->g) + (size_t)(s / 2) * I, .ldy = (size_t)I};
        mm[s].w.ibias = implied[s & 1];
    }
    /* SLUICE_CUDA_SWIDOWN=2 | 3: the SwiGLU's int8 form made once a slot by gate/up's CTAs into mid_buf (cuda.h
     * slcu_matmul_i8_swi; 3: they trigger the down launch), the down resolving early; else, by default, made in the down
     * matvec's CTAs (cuda.h slcu_act sg); =0 apart (swiglu_mid). The same bits. */
    int swi = 0;
    if (c->swi_down >= 2 && (slcu_act_bind(&ma, f->mid_buf, k, I, MSG(be)) ||
                             (swi = slcu_matmul_i8_swi(mm, 2 * k, &ma, c->swi_down == 3, MSG(be))) < 0))
        return cu_fail(be, SL_EIO, c->tmp), cu_sync(be);
    if (!swi) CU(be, slcu_matmul_i8(mm, 2 * k, MSG(be)));
    const int fuse = !swi && c->swi_down && slcu_i8_swiglu_fused();
    if (!fuse && !swi && swiglu_mid(be, f->g, f->u, f->mid_buf, k, I, &ma)) return cu_sync(be);
    const size_t nb = (size_t)I / 32, ns = nb + nb / 2 + nb / 4;
    for (int s = 0; s < k; s++) { /* row s of the k-row activation, as in cu_ffn_multi */
        mi[s] = fuse ? (slcu_act){.n_tok = 1, .cols = I, .sg = f->g + (size_t)s * I, .su = f->u + (size_t)s * I}
                     : (slcu_act){.n_tok = 1, .cols = I, .q = ma.q + (size_t)s * I, .q4 = ma.q4 + (size_t)s * I,
                                  .d = ma.d + (size_t)s * nb, .s = ma.s + (size_t)s * ns};
        mm[s] = (slcu_mm){.w = mat_of(dn), .a = &mi[s], .tab = tab + (size_t)6 * E, .sel = de + s, .n_tok = 1,
                          .y = f->y + (size_t)s * f->ldy, .ldy = f->ldy};
        mm[s].w.ibias = implied[2];
    }
    if (!hold_mm(be, mm, k, FUSE_DOWN)) /* (SLUICE_CUDA_FUSE=down) */
        CU(be, swi ? slcu_matmul_i8_early(mm, k, MSG(be)) : slcu_matmul_i8(mm, k, MSG(be)));
    *w_dev = dw;
    return 1;
}

/* backend.h moe_wide: slcu_moe_layer routes into device memory, groups and runs the layer's experts (layer_tab's
 * table), sums the slots: bitwise cu_route + cu_ffn per expert + combine_rows (the same arithmetic, expert order).
 * A decode batch (up to SLUICE_CUDA_MOEN tokens) runs as cu_moe_resident's one-token jobs, each pair's (cuda.h
 * slcu_moe_mv): the matrices' ibias are the table's (every expert's), the SwiGLU in the down CTAs unless SWIDOWN=0.
 * With SLUICE_CUDA_MOEG=1 a decode batch of up to 8 tokens goes through cuda_mvn.cu slcu_moeg_layer instead: each
 * chosen expert read once for all of its tokens, two launches (the same bits; docs/CUDA.md). */
static int cu_moe_wide(be_backend *be, const be_route *r, const tn_expert_src *xs, const float *h, int inter,
                       float *out) {
    const int rh = router_take_rows(be, r->logits, r->n); /* the batch's router matvec held (NROWS=1): routed below or alone */
    pend_flush(be);
    cu_ctx *c = cu_of(be);
    slcu_act ha; /* h's int8 form, made by its norm over the batch's rows (SLUICE_CUDA_NROWS=1: add_norm_rows) */
    const int hq = c->nq_y == h && c->nq_rows == r->n && r->n > 1 && c->nq_dim == r->cfg->hidden &&
                   !slcu_act_bind(&ha, c->nq_buf, r->n, r->cfg->hidden, MSG(be));
    c->nq_y = NULL;
    const fam_config *cfg = r->cfg;
    slcu_router rr;
    tn_expert ex0;
    const int oss = cfg->expert_kind == SL_EXPERT_GPTOSS, E = cfg->n_experts;
    if (c->moe_wide_off || (c->step && !oss) || r->n < 1 || !router_of(cfg, r->bias, &rr)) {
        if (rh) router_alone(be);
        return 0;
    }
    if (c->step && (r->layer >= c->n_tab || !c->tab[r->layer].dev)) return 0; /* built (and uploaded) unrecorded */
    const int ok = layer_tab(be, xs, r->layer, E, oss, &ex0);
    int *de = ok > 0 ? route_buf(be, (size_t)r->n * (size_t)cfg->n_experts_used) : NULL;
    if (ok < 0 || (ok && !de)) {
        if (rh) router_alone(be);
        return cu_sync(be);
    }
    if (oss) { /* gpt-oss's experts grouped (cuda_moex.cu), or 0 where its table or types are not slcu_moex's case */
        if (rh) router_alone(be);
        const void **tab = ok ? c->tab[r->layer].dev : NULL;
        const slcu_moex mx = {.n = r->n, .k = cfg->n_experts_used, .E = E, .H = cfg->hidden, .I = inter,
                              .limit = (float)cfg->swiglu_limit, .h = h, .top_e = de, .tab = tab,
                              .bias = tab ? (const float *const *)(tab + (size_t)6 * E) : NULL,
                              .gate_up = mat_of(&ex0.gate_up), .down = mat_of(&ex0.down)};
        /* a one-token step may be recorded (cu_step_begin): slcu_moex_layer's launches read only the table, the route
         * buffer and c->mw, each of which forgets the recorded steps when it moves; a step that would grow c->mw is
         * not recorded (the host path refuses it too: the step runs again unrecorded) */
        const size_t need = slcu_moex_bytes(r->n, mx.k, E, mx.H, inter) + (size_t)r->n * mx.k * mx.H * sizeof(float);
        if (c->step && (need > c->mw_cap || !ok)) return 0;
        if (c->step == 1) return slcu_moex_takes(&mx); /* replayed: its launches are in the graph */
        const void *mw = c->mw;
        const int rc = ok ? slcu_moex_layer(&mx, &rr, r->logits, (float *)(de + c->rt_cap), out, &c->mw, &c->mw_cap, MSG(be))
                          : 0;
        if (c->mw != mw) slcb_graphs_clear(c->gr); /* recorded steps may read the old one */
        return rc < 0 ? (cu_fail(be, SL_EIO, c->tmp), cu_sync(be)) : rc;
    }
    slcu_moe mo = {.n = r->n, .k = cfg->n_experts_used, .E = cfg->n_experts, .H = cfg->hidden, .I = inter, .h = h,
                   .top_e = de, .tab = ok ? c->tab[r->layer].dev : NULL, .gate = mat_of(&ex0.gate), .up = mat_of(&ex0.up),
                   .down = mat_of(&ex0.down), .swi = c->swi_down};
    const int *implied = ok ? c->tab[r->layer].implied : NULL; /* every expert's: expert 0's is not enough for the table */
    if (implied) mo.gate.ibias = implied[0], mo.up.ibias = implied[1], mo.down.ibias = implied[2];
    int rc = 0;
    const int mg = ok && r->n <= SLCU_MOEG_MAXN && slcu_moeg_on() && slcu_decode_kernels; /* SLUICE_CUDA_MOEG=1 */
    const int routed = rh && mg && route_rows(be, &rr, de, (float *)(de + c->rt_cap)); /* logits and choice in one launch */
    if (rh && !routed) router_alone(be);
    if (mg) /* grouped by expert */
        rc = slcu_moeg_layer_a(&mo, hq ? &ha : NULL, routed, &rr, r->logits, (float *)(de + c->rt_cap), out, &c->mw, &c->mw_cap,
                               MSG(be));
    if (ok && !rc) rc = slcu_moe_layer(&mo, &rr, r->logits, (float *)(de + c->rt_cap), out, &c->mw, &c->mw_cap, MSG(be));
    return rc < 0 ? (cu_fail(be, SL_EIO, c->tmp), cu_sync(be)) : rc;
}

static void cu_combine_rows(be_backend *be, float *out, int H, int k, const int *tok, const int *slot,
                            const float *top_w, const float *y, int cnt) {
    SKIP(be);
    if (cnt <= 0) return;
    const size_t b = (size_t)cnt * sizeof(int);
    uint8_t *h = host_scratch(be, 2 * b);
    if (!h) return;
    int *ht = (int *)h;
    float *hw = (float *)(h + b);
    for (int j = 0; j < cnt; j++) {
        ht[j] = tok[j];
        hw[j] = top_w[(size_t)tok[j] * k + slot[j]];
    }
    uint8_t *d = dev_upload(be, h, 2 * b);
    if (!d) return;
    CU(be, slcb_axpy_rows(out, H, (const int *)d, (const float *)(d + b), y, cnt, MSG(be)));
}

be_backend *be_cuda_new(pool_t *pool) {
    be_backend *be = calloc(1, sizeof *be);
    cu_ctx *c = calloc(1, sizeof *c);
    if (!be || !c || !(c->cpu = be_cpu_new(NULL, pool)) || !(c->q = slcb_queue_new(c->tmp, sizeof c->tmp))) {
        if (c) be_close(c->cpu);
        free(be);
        free(c);
        return NULL;
    }
    *be = (be_backend){
        .name = "cuda",
        .is_host = 0,
        .ctx = c,
        .alloc = cu_alloc,
        .free = cu_free,
        .copy = cu_copy,
        .zero = cu_zero,
        .sync = cu_sync,
        .check = cu_check,
        .step_begin = cu_step_begin,
        .step_end = cu_step_end,
        .errmsg = cu_errmsg,
        .reserve = cu_reserve,
        .destroy = cu_destroy,
        .copy_async = cu_copy_async,
        .mark = cu_mark,
        .fence_done = cu_fence_done,
        .embed = cu_embed,
        .matmul_multi = cu_matmul_multi,
        .act_gather = cu_act_gather,
        .rmsnorm = cu_rmsnorm,
        .rope = cu_rope,
        .add = cu_add,
        .add_bias = cu_add_bias,
        .copy_rows = cu_copy_rows,
        .attention = cu_attention,
        .mla = cu_mla,
        .mla_out = cu_mla_out,
        .dn_conv = cu_dn_conv,
        .dn_gates = cu_dn_gates,
        .dn_step = cu_dn_step,
        .dn_chunk = cu_dn_step,
        .dn_norm = cu_dn_norm,
        .route = cu_route,
        .ffn = cu_ffn,
        .ffn_multi = cu_ffn_multi,
        .moe_resident = cu_moe_resident,
        .moe_wide = cu_moe_wide,
        .combine = cu_combine,
        .combine_rows = cu_combine_rows,
    };
    be->matmul[DT_F32] = be->matmul[DT_BF16] = be->matmul[DT_F16] = be->matmul[DT_Q8] = be->matmul[DT_Q4] = cu_matmul;
    for (int dt = 0; dt < DT_COUNT; dt++) be->matmul[dt] = dt == DT_MXFP4 || slcu_kq_takes((dt_type)dt) ? cu_matmul : be->matmul[dt];
    /* switches, each back to what came before it: SLUICE_CUDA_DECODE=0 all of issue 24's decode work (the
     * kernels of cuda.h slcu_decode_kernels, the wait after every block, and the two below). The joined ops (a
     * norm's int8 form, the held add / combine / q-k norms) are on unless SLUICE_CUDA_NQ=0; the recorded steps
     * are opt-in, SLUICE_CUDA_GRAPH=1 (slower on the H100 at depth 512: docs/CUDA.md); f16 KV caches
     * (cuda_flash.cu) are taken unless SLUICE_CUDA_KV16=0. */
    const char *g = getenv("SLUICE_CUDA_DECODE");
    slcu_decode_kernels = !(g && !strcmp(g, "0"));
    if (slcu_decode_kernels && (g = getenv("SLUICE_CUDA_GRAPH")) && !strcmp(g, "1")) {
        c->gr = slcb_graphs_new();
        slcu_i8_pdl(0); /* recorded steps and SLUICE_CUDA_PDL failed call D's model test together: never both */
    }
    g = getenv("SLUICE_CUDA_NQ");
    c->nq_off = !slcu_decode_kernels || (g && !strcmp(g, "0"));
    /* issue 24's prefill (also cuda_i8.cu SLUICE_CUDA_GEMM=1, cuda_fattn.cu SLUICE_CUDA_FATTN=0, SLUICE_MIX_ROWS=64);
     * cuda_i8.cu SLUICE_CUDA_MOEN=N: moe_wide's batches of up to N tokens as one-token matvec jobs a (token, slot)
     * pair, larger ones the grouped GEMM; unset or 0 the GEMM for every batch, as before (cuda.h slcu_moe_mv); a decode
     * batch's 2-8 token dense matvecs (cuda_i8.cu, read at the first matmul): SLUICE_CUDA_MVSPLIT=MiB as one-token jobs,
     * SLUICE_CUDA_MVGEMM=ROWS by the GEMM, both off unset (cuda.h slcu_i8_mvsplit, slcu_i8_mvgemm) */
    c->moe_wide_off = (g = getenv("SLUICE_CUDA_MOE")) && !strcmp(g, "0");
    slcu_moeg_init(); /* cuda_mvn.h SLUICE_CUDA_MOEG=1: a decode batch's experts grouped by expert; SLUICE_CUDA_MVG=1: its
                       * 2-8 token matmuls each row read once for all tokens (both off unset) */
    g = getenv("SLUICE_CUDA_SWIDOWN"); /* 0 apart, 2 | 3 by gate/up's CTAs (cu_moe_resident), else in the down CTAs */
    c->swi_down = g && !strcmp(g, "0") ? 0 : g && !strcmp(g, "2") ? 2 : g && !strcmp(g, "3") ? 3 : 1;
    /* a layer-major block streamed through the device tier as moe_wide's grouped FFN (backend_cuda_tier.c): on since
     * call R (bitwise on an H100: test_cuda --tier, the model test; a 16-layer prefill 2.4x), SLUICE_CUDA_TIER_GEMM=0 off */
    if (!((g = getenv("SLUICE_CUDA_TIER_GEMM")) && !strcmp(g, "0"))) be->moe_batch = cu_moe_batch;
    c->embed_host = (g = getenv("SLUICE_CUDA_EMBED")) && !strcmp(g, "0");
    be->kv_types = 1u << SL_KV_F32 | ((g = getenv("SLUICE_CUDA_KV16")) && !strcmp(g, "0") ? 0 : 1u << SL_KV_F16);
    if (!((g = getenv("SLUICE_CUDA_ATTN_ITEMS")) && !strcmp(g, "0"))) /* on since call R (bitwise on an H100); =0 off */
        be->rope_at = cu_rope_at, be->attention_items = cu_attention_items;
    /* the decode attention on clusters / its fold's loads deeper (cuda_flash_cl.cu), the default since call T (bitwise on an
     * H100; 13.0 -> 8.9 us a layer's attention at depth 512); SLUICE_CUDA_FA_CL=0 the pair before it, =2 the deeper folds
     * where they lost too (cuda_flash.cu fl_deep) */
    g = getenv("SLUICE_CUDA_FA_CL");
    slcu_fa16_cl(g && !strcmp(g, "0") ? 0 : g && !strcmp(g, "2") ? 2 : 1);
    /* the one-token matvec's job from its grid where a launch's jobs have as many tiles (cuda_mv.cu mv1c_i8 JR, the same
     * bits; opt-in, not yet timed on a GPU): SLUICE_CUDA_RESOLVE=2, =3 with its CTAs triggering the next launch; else
     * find_job's walk */
    g = getenv("SLUICE_CUDA_RESOLVE");
    slcu_i8_resolve(g && !strcmp(g, "2") ? 2 : g && !strcmp(g, "3") ? 3 : 1);
    if (fuse_env(be)) { /* SLUICE_CUDA_FUSE (router unless set): launches that end in their last CTA's work (backend_cuda_hold.c) */
        cu_destroy(be);
        return NULL;
    }
    return be;
}

#else
typedef int backend_cuda_unused; /* without CUDA=1 this file is empty */
#endif
