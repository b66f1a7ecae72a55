/*
 * cpu.c — the CPU backend's table (backend.h): buffers on the heap (pinned ones: anonymous memory on
 * transparent huge pages, touched at allocation), the dense ops on the kernel table this CPU gets
 * (kernels.h: kern_default_ops), the per-thread scratch of the mixers, and the sticky error.
 * The mixers are in cpu_mix.c, routing, FFNs and combine in cpu_moe.c.
 *
 * Every op runs to completion before it returns (sync only reports), on the pool the backend was made with
 * (one pool_for at a time: the model serialises evaluations).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backend/cpu/cpu.h"
#include "quant/quant.h"
#include "sluice.h"
#include "util/err.h"

void cpu_fail(be_backend *be, sl_status status, const char *what) {
    cpu_ctx *c = cpu_of(be);
    if (!c->err.status) err_set(&c->err, status, "%s", what);
}

/* ---- buffers ---------------------------------------------------------------------------------- */

/* Pinned memory: anonymous memory on transparent huge pages where the kernel offers them, touched once up
 * front. Reads into never-touched pages cost a page fault and a zeroing per 4 KiB inside the I/O path
 * (measured: a cold 8 GiB expert cache decoded at 0.6 tok/s against 1.6 tok/s warm), so the budget is paid
 * at allocation, as the memory it is. */
static void *cpu_alloc(be_backend *be, size_t bytes, int flags) {
    (void)be;
    if (flags & BE_BUF_PINNED) {
        if (!bytes) bytes = 1;
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return NULL;
        madvise(p, bytes, MADV_HUGEPAGE);
        for (size_t i = 0; i < bytes; i += 4096) ((volatile unsigned char *)p)[i] = 0;
        return p;
    }
    return malloc(bytes ? bytes : 1);
}

static void cpu_free(be_backend *be, void *p, size_t bytes, int flags) {
    (void)be;
    if (!p) return;
    if (flags & BE_BUF_PINNED) munmap(p, bytes ? bytes : 1);
    else free(p);
}

static void cpu_copy(be_backend *be, void *dst, const void *src, size_t bytes, int dir) {
    (void)be;
    (void)dir;
    if (bytes) memcpy(dst, src, bytes);
}

static void cpu_zero(be_backend *be, void *p, size_t bytes) {
    (void)be;
    if (bytes) memset(p, 0, bytes);
}

static sl_status cpu_sync(be_backend *be) {
    cpu_ctx *c = cpu_of(be);
    sl_status st = c->err.status;
    c->err.status = SL_OK;
    return st;
}

static const char *cpu_errmsg(be_backend *be) { return cpu_of(be)->err.msg; }

static sl_status cpu_reserve(be_backend *be, size_t slot_floats) {
    cpu_ctx *c = cpu_of(be);
    int n = pool_size(c->pool);
    if (n < 1) n = 1;
    if (slot_floats <= c->slot_floats && n <= c->n_slots) return SL_OK;
    size_t sf = slot_floats > c->slot_floats ? slot_floats : c->slot_floats;
    int ns = n > c->n_slots ? n : c->n_slots;
    float *p = malloc((size_t)ns * sf * sizeof(float));
    if (!p) return SL_ENOMEM;
    free(c->scratch);
    c->scratch = p;
    c->slot_floats = sf;
    c->n_slots = ns;
    return SL_OK;
}

static void cpu_destroy(be_backend *be) {
    if (!be) return;
    cpu_ctx *c = cpu_of(be);
    free(c->scratch);
    free(c->rope_c);
    free(c->rope_s);
    free(c->ex_buf);
    free(c);
    free(be);
}

/* ---- dense ops -------------------------------------------------------------------------------- */

static void cpu_embed(be_backend *be, const tn_mat *table, const int32_t *tokens, int n, float *x, size_t ldx) {
    (void)be;
    for (int t = 0; t < n; t++) q_row_to_f32(table, tokens[t], x + (size_t)t * ldx); /* any dtype, quantized too */
}

static void cpu_matmul(be_backend *be, const tn_mat *w, kern_act *x, float *y, size_t ldy) {
    cpu_ctx *c = cpu_of(be);
    int rc = kern_matmul_act(c->ops, c->pool, w, x, y, ldy);
    if (rc) cpu_fail(be, rc, rc == SL_ENOMEM ? "out of memory in a matmul" : "matmul of an unsupported matrix");
}

static void cpu_matmul_multi(be_backend *be, const kern_mm *mm, int n) {
    cpu_ctx *c = cpu_of(be);
    int rc = kern_matmul_multi(c->ops, c->pool, mm, n);
    if (rc) cpu_fail(be, rc, rc == SL_ENOMEM ? "out of memory in a matmul" : "matmul of an unsupported matrix");
}

static void cpu_act_gather(be_backend *be, kern_act *dst, void *buf, kern_act *src, const int *idx, int n,
                           const float *x_rows) {
    (void)be;
    kern_act_gather(dst, buf, src, idx, n, x_rows);
}

typedef struct {
    const kern_ops *ops;
    const float *x, *w;
    float *y, w_off, eps;
    size_t ld, head_stride;
    int n_heads, dim;
} norm_job;

static void norm_part(void *ctx, size_t b, size_t e) {
    const norm_job *j = ctx;
    for (size_t t = b; t < e; t++)
        for (int h = 0; h < j->n_heads; h++) {
            size_t o = t * j->ld + (size_t)h * j->head_stride;
            j->ops->rmsnorm(j->x + o, j->w, j->w_off, j->eps, j->y + o, j->dim);
        }
}

/* Rows of a prefill on the pool (each row the same ops): 512 rows of 2048 were ~2% of a prefill's time on the
 * calling thread alone. */
static void cpu_rmsnorm(be_backend *be, const float *x, float *y, int n_tok, size_t ld, int n_heads, size_t head_stride,
                        int dim, const float *w, float w_off, float eps) {
    norm_job j = {cpu_of(be)->ops, x, w, y, w_off, eps, ld, head_stride, n_heads, dim};
    const size_t grain = (size_t)(n_heads * dim >= 16384 ? 4 : 65536 / (n_heads * dim > 0 ? n_heads * dim : 1));
    pool_for(cpu_of(be)->pool, (size_t)(n_tok > 0 ? n_tok : 0), grain, norm_part, &j);
}

/* cos and sin of position pos for NeoX RoPE, computed in f32 as HF does: angle = pos * inv_freq (f32), cos and
 * sin times the table's attention factor (YaRN's attention_scaling, 1 otherwise). c, s: [rot/2]; once per
 * position for all its heads. */
void cpu_rope_cs(int rot, const float *inv_freq, float attn_factor, int pos, float *c, float *s) {
    for (int i = 0; i < rot / 2; i++) {
        float ang = (float)pos * inv_freq[i];
        c[i] = cosf(ang) * attn_factor;
        s[i] = sinf(ang) * attn_factor;
    }
}

/* NeoX rotate-half RoPE on the first rot dims of x with rope_cs's c, s; interleaved pairs de-interleaved first
 * (MLA, transformers' apply_rotary_pos_emb_interleave). */
void cpu_rope_one(float *x, int rot, const float *c, const float *s, int interleave) {
    const int half = rot / 2;
    if (interleave >= 2) { /* DeepSeek-V4: adjacent pairs in place; 3: the inverse rotation (-sin) */
        for (int i = 0; i < half; i++) {
            const float a = x[2 * i], b = x[2 * i + 1], si = interleave == 3 ? -s[i] : s[i];
            x[2 * i] = a * c[i] - b * si;
            x[2 * i + 1] = b * c[i] + a * si;
        }
        return;
    }
    if (interleave) {
        float tmp[1024]; /* rot <= 1024: model/forward.c checks rot_dim */
        for (int i = 0; i < half; i++) {
            tmp[i] = x[2 * i];
            tmp[i + half] = x[2 * i + 1];
        }
        memcpy(x, tmp, (size_t)rot * sizeof(float));
    }
    int i = 0;
    for (; i + 16 <= half; i += 16) { /* the same products and sums 16 at a time, through locals: no aliasing */
        float a[16], b[16], cc[16], ss[16], ya[16], yb[16];
        memcpy(a, x + i, sizeof a);
        memcpy(b, x + i + half, sizeof b);
        memcpy(cc, c + i, sizeof cc);
        memcpy(ss, s + i, sizeof ss);
        for (int j = 0; j < 16; j++) {
            ya[j] = a[j] * cc[j] - b[j] * ss[j];
            yb[j] = b[j] * cc[j] + a[j] * ss[j];
        }
        memcpy(x + i, ya, sizeof ya);
        memcpy(x + i + half, yb, sizeof yb);
    }
    for (; i < half; i++) {
        float a = x[i], b = x[i + half];
        x[i] = a * c[i] - b * s[i];
        x[i + half] = b * c[i] + a * s[i];
    }
}

/* The cos/sin rows of tokens pos0 .. pos0+n-1: the memo's when the last call had the same positions and
 * frequencies (q and k of a micro-batch, MLA's k_pe and q_pe), else computed into it. Returns 1, or 0 when n
 * exceeds the memo (the caller computes per token). */
static int rope_memo(cpu_ctx *c, int n, int rot, const float *inv_freq, float attn_factor, int pos0) {
    const int half = rot / 2;
    if (n > ROPE_MEMO_TOK || half > 512) return 0;
    if (c->rope_n == n && c->rope_pos0 == pos0 && c->rope_rot == rot && c->rope_af == attn_factor &&
        !memcmp(c->rope_inv, inv_freq, (size_t)half * sizeof(float)))
        return 1;
    for (int t = 0; t < n; t++)
        cpu_rope_cs(rot, inv_freq, attn_factor, pos0 + t, c->rope_c + (size_t)t * 512, c->rope_s + (size_t)t * 512);
    memcpy(c->rope_inv, inv_freq, (size_t)half * sizeof(float));
    c->rope_n = n;
    c->rope_pos0 = pos0;
    c->rope_rot = rot;
    c->rope_af = attn_factor;
    return 1;
}

static void cpu_rope(be_backend *be, float *x, int n_tok, size_t ld, int n_heads, size_t head_stride, int rot,
                     const float *inv_freq, float attn_factor, int pos0, int interleave) {
    cpu_ctx *ctx = cpu_of(be);
    const int memo = rope_memo(ctx, n_tok, rot, inv_freq, attn_factor, pos0);
    float c1[512], s1[512]; /* rot / 2 <= 512 (family/rope.h SL_ROPE_MAX_FREQS) */
    for (int t = 0; t < n_tok; t++) {
        const float *c = c1, *s = s1;
        if (memo) {
            c = ctx->rope_c + (size_t)t * 512;
            s = ctx->rope_s + (size_t)t * 512;
        } else {
            cpu_rope_cs(rot, inv_freq, attn_factor, pos0 + t, c1, s1);
        }
        for (int h = 0; h < n_heads; h++) cpu_rope_one(x + (size_t)t * ld + (size_t)h * head_stride, rot, c, s, interleave);
    }
}

/* rope_at and attention_items as the forward pass's loops ran them (a rope per run of consecutive positions, an
 * attention per item: the same operations, so the same bits); the CPU's batch tests drive attention.c's batched
 * branch through them */
static void cpu_rope_at(be_backend *be, float *x, int n_tok, size_t ld, int n_heads, size_t head_stride, int rot,
                        const float *inv_freq, float attn_factor, const int *pos, int interleave) {
    for (int t0 = 0, t1; t0 < n_tok; t0 = t1) {
        for (t1 = t0 + 1; t1 < n_tok && pos[t1] == pos[t1 - 1] + 1; t1++) {}
        cpu_rope(be, x + (size_t)t0 * ld, t1 - t0, ld, n_heads, head_stride, rot, inv_freq, attn_factor, pos[t0], interleave);
    }
}
static void cpu_attention_items(be_backend *be, const be_attn *a, int n) {
    for (int i = 0; i < n; i++) cpu_attention(be, a + i);
}

static void cpu_add(be_backend *be, float *x, const float *y, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

static void cpu_scale(be_backend *be, float *x, size_t n, float s, const float *sv) {
    (void)be;
    const float m = sv ? sv[0] : s;
    for (size_t i = 0; i < n; i++) x[i] *= m;
}

static void cpu_softcap(be_backend *be, float *x, size_t n, float cap) {
    (void)be;
    for (size_t i = 0; i < n; i++) x[i] = tanhf(x[i] / cap) * cap;
}

static void cpu_row_scale(be_backend *be, float *x, size_t ld, int n_rows, int cols, const float *s) {
    (void)be;
    for (int t = 0; t < n_rows; t++)
        for (int i = 0; i < cols; i++) x[(size_t)t * ld + (size_t)i] *= s[t];
}

static void cpu_head_gate(be_backend *be, float *x, size_t ld, size_t hs, int dim, const float *g, size_t ldg,
                          int n_rows, int heads) {
    (void)be;
    for (int t = 0; t < n_rows; t++)
        for (int h = 0; h < heads; h++) {
            const float s = kern_sigmoid(g[(size_t)t * ldg + (size_t)h]);
            float *r = x + (size_t)t * ld + (size_t)h * hs;
            for (int i = 0; i < dim; i++) r[i] *= s;
        }
}

static void cpu_add_bias(be_backend *be, float *x, size_t ld, const float *b, int n_rows, int cols) {
    (void)be;
    for (int t = 0; t < n_rows; t++) {
        float *r = x + (size_t)t * ld;
        for (int i = 0; i < cols; i++) r[i] += b[i];
    }
}

static void cpu_copy_rows(be_backend *be, float *dst, size_t ldd, const int *didx, const float *src, size_t lds,
                          const int *sidx, int n, int cols) {
    (void)be;
    for (int i = 0; i < n; i++)
        memcpy(dst + (size_t)(didx ? didx[i] : i) * ldd, src + (size_t)(sidx ? sidx[i] : i) * lds,
               (size_t)cols * sizeof(float));
}

static void cpu_hint(be_backend *be, const void *const *p, const size_t *bytes, int n) {
    pool_hint(cpu_of(be)->pool, p, bytes, n);
}

/* ---- the table -------------------------------------------------------------------------------- */

be_backend *be_cpu_new(const kern_ops *ops, pool_t *pool) {
    be_backend *be = calloc(1, sizeof *be);
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return NULL;
    }
    c->ops = ops ? ops : kern_default_ops();
    c->pool = pool;
    *be = (be_backend){
        .name = "cpu",
        .is_host = 1,
        .kv_types = 1u << SL_KV_F32 | 1u << SL_KV_F16 | 1u << SL_KV_BF16 | 1u << SL_KV_Q8 | 1u << SL_KV_Q4 |
                    1u << SL_KV_Q4R,
        .kv_split = 1,
        .ctx = c,
        .alloc = cpu_alloc,
        .free = cpu_free,
        .copy = cpu_copy,
        .zero = cpu_zero,
        .sync = cpu_sync,
        .errmsg = cpu_errmsg,
        .reserve = cpu_reserve,
        .destroy = cpu_destroy,
        .embed = cpu_embed,
        .matmul_multi = cpu_matmul_multi,
        .act_gather = cpu_act_gather,
        .rmsnorm = cpu_rmsnorm,
        .rope = cpu_rope,
        .rope_at = cpu_rope_at,
        .add = cpu_add,
        .add_bias = cpu_add_bias,
        .scale = cpu_scale,
        .softcap = cpu_softcap,
        .row_scale = cpu_row_scale,
        .head_gate = cpu_head_gate,
        .copy_rows = cpu_copy_rows,
        .hint = cpu_hint,
        .attention = cpu_attention,
        .attention_items = cpu_attention_items,
        .mla = cpu_mla,
        .mla_out = cpu_mla_out,
        .dsa_select = cpu_dsa_select,
        .layernorm = cpu_layernorm,
        .dn_conv = cpu_dn_conv,
        .dn_gates = cpu_dn_gates,
        .dn_step = cpu_dn_step,
        .dn_chunk = cpu_dn_chunk,
        .dn_norm = cpu_dn_norm,
        .kda_gates = cpu_kda_gates,
        .hc_mix = cpu_hc_mix,
        .hc_post = cpu_hc_post,
        .compress = cpu_compress,
        .index_topk = cpu_index_topk,
        .short_conv = cpu_short_conv,
        .mamba2 = cpu_mamba2,
        .route = cpu_route,
        .ffn = cpu_ffn,
        .ffn_multi = cpu_ffn_multi,
        .ffn_host = cpu_ffn_host,
        .ffn_experts = cpu_ffn_experts,
        .combine = cpu_combine,
        .combine_rows = cpu_combine_rows,
    };
    /* SLUICE_CPU_EXPERTS=0: a MoE block's experts one at a time again (moe.c's loop), for A/B timings of the same
     * binary; the bits are the same either way (cpu_experts.c) */
    const char *ex_env = getenv("SLUICE_CPU_EXPERTS");
    if (ex_env && !strcmp(ex_env, "0")) be->ffn_experts = NULL;
    /* every stored type: the table's kernels, and mxfp4 through kernels/mxfp4.c */
    for (int dt = DT_NONE + 1; dt < DT_COUNT; dt++)
        if (c->ops->matmul[dt] || dt == DT_MXFP4) be->matmul[dt] = cpu_matmul;
    c->rope_c = malloc((size_t)ROPE_MEMO_TOK * 512 * sizeof(float));
    c->rope_s = malloc((size_t)ROPE_MEMO_TOK * 512 * sizeof(float));
    c->rope_n = -1;
    if (!c->rope_c || !c->rope_s || cpu_reserve(be, 16)) {
        cpu_destroy(be);
        return NULL;
    }
    return be;
}
