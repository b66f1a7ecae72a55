/*
 * cpu_dsv4.c — the CPU backend's DeepSeek-V4 ops (backend.h: hc_mix, hc_post, compress, index_topk), after
 * transformers' src/transformers/models/deepseek_v4/modeling_deepseek_v4.py (DeepseekV4HyperConnection,
 * DeepseekV4HyperHead, DeepseekV4DecoderLayer, DeepseekV4HCACompressor / CSACompressor, DeepseekV4Indexer). The
 * algebra's story is in src/model/hc.c and src/model/dsv4.c, which call these.
 *
 * Every result depends on its own token (hc_*, index_topk) or window (compress) only, in a fixed order: the
 * sums run over streams, slots and heads in increasing index, softmaxes take their max first and sum in f32 as
 * torch does; so a token in a batch equals the token alone, and the thread count changes nothing.
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu.h"

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* One token's pre / post / comb from its mixes m, in place (backend.h be_hc). */
static void hc_weights(const be_hc *h, float *m) {
    const int hc = h->hc;
    const float eps = h->eps;
    for (int i = 0; i < hc; i++) m[i] = sigmoidf(m[i] * h->scale[0] + h->base[i]) + eps;
    if (h->head) return;
    for (int i = 0; i < hc; i++) m[hc + i] = 2.0f * sigmoidf(m[hc + i] * h->scale[1] + h->base[hc + i]);
    float *cm = m + 2 * hc;
    for (int j = 0; j < hc; j++) { /* softmax over each row, + eps */
        float *r = cm + (size_t)j * hc, mx = -INFINITY, sum = 0.0f;
        for (int k = 0; k < hc; k++) {
            r[k] = r[k] * h->scale[2] + h->base[2 * hc + j * hc + k];
            mx = r[k] > mx ? r[k] : mx;
        }
        for (int k = 0; k < hc; k++) sum += (r[k] = expf(r[k] - mx));
        for (int k = 0; k < hc; k++) r[k] = r[k] / sum + eps;
    }
    for (int it = 0; it < h->iters; it++) {
        if (it > 0) /* rows (it 0 normalises the columns only) */
            for (int j = 0; j < hc; j++) {
                float s = 0.0f;
                for (int k = 0; k < hc; k++) s += cm[j * hc + k];
                for (int k = 0; k < hc; k++) cm[j * hc + k] /= s + eps;
            }
        for (int k = 0; k < hc; k++) { /* columns */
            float s = 0.0f;
            for (int j = 0; j < hc; j++) s += cm[j * hc + k];
            for (int j = 0; j < hc; j++) cm[j * hc + k] /= s + eps;
        }
    }
}

void cpu_hc_mix(be_backend *be, const be_hc *h) {
    (void)be;
    const size_t H = (size_t)h->H, R = (size_t)h->hc * H;
    for (int t = 0; t < h->n; t++) {
        float *m = h->mix + (size_t)t * h->ldm;
        hc_weights(h, m);
        const float *x = h->x + (size_t)t * R;
        float *y = h->y + (size_t)t * H;
        for (size_t i = 0; i < H; i++) {
            float acc = 0.0f;
            for (int j = 0; j < h->hc; j++) acc += m[j] * x[(size_t)j * H + i];
            y[i] = acc;
        }
    }
}

void cpu_hc_post(be_backend *be, float *x, const float *out, const float *mix, size_t ldm, int n, int hc, int H) {
    (void)be;
    float xs[16]; /* hc <= 16 (config.c cfg_dsv4_ok) */
    for (int t = 0; t < n; t++) {
        const float *m = mix + (size_t)t * ldm, *post = m + hc, *comb = m + 2 * hc, *o = out + (size_t)t * H;
        float *xt = x + (size_t)t * hc * H;
        for (int i = 0; i < H; i++) {
            for (int j = 0; j < hc; j++) xs[j] = xt[(size_t)j * H + i];
            for (int k = 0; k < hc; k++) {
                float acc = 0.0f;
                for (int j = 0; j < hc; j++) acc += comb[j * hc + k] * xs[j];
                xt[(size_t)k * H + i] = post[k] * o[i] + acc;
            }
        }
    }
}

/* One compressed entry (backend.h be_cmp) into e [d]; sc: scratch [2 * rate]. */
static void compress_one(const be_cmp *c, int w, float *e, float *sc) {
    const int d = c->d, r = c->rate, cw = c->overlap ? 2 : 1, cd = cw * d, slots = cw * r;
    for (int i = 0; i < d; i++) {
        float mx = -INFINITY;
        for (int s = 0; s < slots; s++) {
            const int prev = c->overlap && s < r; /* the previous window's first half */
            const int p = prev ? (w - 1) * r + s : w * r + (c->overlap ? s - r : s), off = c->overlap && !prev ? d : 0;
            if (p < 0) {
                sc[s] = -INFINITY;
                continue;
            }
            const float *row = c->ring + (size_t)(p % c->cap) * c->ldr;
            sc[s] = row[cd + off + i] + c->ape[(size_t)(prev ? s : c->overlap ? s - r : s) * cd + off + i];
            mx = sc[s] > mx ? sc[s] : mx;
        }
        float sum = 0.0f;
        for (int s = 0; s < slots; s++) sum += (sc[s] = sc[s] == -INFINITY ? 0.0f : expf(sc[s] - mx));
        float acc = 0.0f;
        for (int s = 0; s < slots; s++) {
            const int prev = c->overlap && s < r;
            const int p = prev ? (w - 1) * r + s : w * r + (c->overlap ? s - r : s), off = c->overlap && !prev ? d : 0;
            if (p >= 0) acc += c->ring[(size_t)(p % c->cap) * c->ldr + off + i] * (sc[s] / sum);
        }
        e[i] = acc;
    }
    double ss = 0.0;
    for (int i = 0; i < d; i++) ss += (double)e[i] * e[i];
    const float inv = 1.0f / sqrtf((float)(ss / d) + c->eps);
    for (int i = 0; i < d; i++) e[i] = c->norm_w[i] * (e[i] * inv);
    float cs[512], sn[512];
    cpu_rope_cs(c->rot, c->inv_freq, c->attn_factor, w * r, cs, sn);
    cpu_rope_one(e + d - c->rot, c->rot, cs, sn, 2);
}

void cpu_compress(be_backend *be, const be_cmp *c) {
    float sc[2 * 4096 + 16]; /* 2 * rate: rate <= 4096 (config.c cfg_dsv4_ok) */
    if (c->rot > 1024 || c->rot > c->d) {
        cpu_fail(be, SL_EINVAL, "compress: rotary dims beyond the entry");
        return;
    }
    for (int w = c->w0; w < c->w0 + c->n_win; w++) compress_one(c, w, c->out + (size_t)w * c->ldo, sc);
}

typedef struct {
    const be_index *x;
    cpu_ctx *c;
} index_job;

/* Tokens begin..end: scores of the visible keys in the thread's scratch slot, the top-k, ascending. */
static void index_part(void *ctx, size_t begin, size_t end) {
    const index_job *j = ctx;
    const be_index *x = j->x;
    const kern_ops *ops = j->c->ops;
    float *sc = j->c->scratch + (size_t)pool_thread(j->c->pool) * j->c->slot_floats;
    for (size_t t = begin; t < end; t++) {
        const int vis = (x->pos0 + (int)t + 1) / x->rate, k = x->topk;
        int *idx = x->idx + t * (size_t)k, n = 0;
        if (vis <= k) {
            for (; n < vis; n++) idx[n] = n;
        } else {
            const float *q = x->q + t * x->ldq, *wt = x->w + t * x->ldw;
            for (int s = 0; s < vis; s++) {
                const float *key = x->keys + (size_t)s * x->ldk;
                float acc = 0.0f;
                for (int h = 0; h < x->n_heads; h++) {
                    float dot = ops->dot(q + (size_t)h * x->d, key, x->d);
                    acc += (wt[h] * x->w_scale) * ((dot > 0.0f ? dot : 0.0f) * x->scale);
                }
                sc[s] = acc;
            }
            for (; n < k; n++) { /* repeated argmax, ties to the lower index */
                int best = -1;
                for (int s = 0; s < vis; s++)
                    if (sc[s] != -INFINITY && (best < 0 || sc[s] > sc[best])) best = s;
                sc[best] = -INFINITY;
                idx[n] = best;
            }
            for (int a = 1; a < n; a++) /* ascending */
                for (int b = a; b > 0 && idx[b - 1] > idx[b]; b--) {
                    const int tmp = idx[b];
                    idx[b] = idx[b - 1];
                    idx[b - 1] = tmp;
                }
        }
        for (; n < k; n++) idx[n] = -1;
    }
}

void cpu_index_topk(be_backend *be, const be_index *x) {
    cpu_ctx *c = cpu_of(be);
    index_job j = {x, c};
    pool_for_any(c->pool, (size_t)x->n, 1, index_part, &j);
}
