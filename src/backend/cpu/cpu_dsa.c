/*
 * cpu_dsa.c — the CPU backend's DeepSeek sparse-attention indexer (backend.h: dsa_select) and LayerNorm
 * (layernorm), the indexer's key norm. The algebra is in src/model/mla.c, after transformers'
 * models/deepseek_v32/modeling_deepseek_v32.py DeepseekV32Indexer and models/glm_moe_dsa/modeling_glm_moe_dsa.py.
 *
 * The parallel work items are tokens (dsa_select) and rows (layernorm); each token's scores and choice depend on
 * its own query, weights and the cached keys only, in an order fixed by the shapes, so the split over threads and
 * the batch never change a bit.
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu.h"

/* ---- layernorm -------------------------------------------------------------------------------- */

typedef struct {
    const float *x, *w, *b;
    float *y;
    size_t ld;
    int dim;
    float eps;
} ln_job;

static void ln_part(void *ctx, size_t begin, size_t end) {
    const ln_job *j = ctx;
    for (size_t t = begin; t < end; t++) {
        const float *x = j->x + t * j->ld;
        float *y = j->y + t * j->ld;
        double mean = 0.0, var = 0.0;
        for (int i = 0; i < j->dim; i++) mean += x[i];
        mean /= j->dim;
        for (int i = 0; i < j->dim; i++) var += ((double)x[i] - mean) * ((double)x[i] - mean);
        const float m = (float)mean, inv = (float)(1.0 / sqrt(var / j->dim + (double)j->eps));
        for (int i = 0; i < j->dim; i++) y[i] = (x[i] - m) * inv * j->w[i] + j->b[i];
    }
}

void cpu_layernorm(be_backend *be, const float *x, float *y, int n_tok, size_t ld, int dim, const float *w,
                   const float *b, float eps) {
    ln_job j = {x, w, b, y, ld, dim, eps};
    pool_for(cpu_of(be)->pool, (size_t)(n_tok > 0 ? n_tok : 0), 16, ln_part, &j);
}

/* ---- dsa_select ------------------------------------------------------------------------------- */

/* The k-th largest of v[0..n) (1 <= k <= n), v reordered: Hoare's selection. */
static float kth_largest(float *v, int n, int k) {
    int lo = 0, hi = n - 1, want = n - k; /* the want-th smallest, ascending */
    while (lo < hi) {
        const float piv = v[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (v[i] < piv) i++;
            while (v[j] > piv) j--;
            if (i <= j) {
                float t = v[i];
                v[i++] = v[j];
                v[j--] = t;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else return v[want];
    }
    return v[want];
}

typedef struct {
    const be_dsa *d;
    cpu_ctx *c;
} dsa_job;

/* The scores of token t against positions 0..pos into sc. */
static void dsa_scores(const be_dsa *d, int t, float *sc) {
    const int pos = d->pos0 + t;
    const float *q = d->q + (size_t)t * d->ldq, *w = d->w + (size_t)t * d->ldw;
    for (int p = 0; p <= pos; p++) {
        const float *key = d->cache + (size_t)p * d->ldc + d->koff;
        float s = 0.0f;
        for (int h = 0; h < d->heads; h++) {
            const float *qh = q + (size_t)h * d->dim;
            double dot = 0.0;
            for (int i = 0; i < d->dim; i++) dot += (double)qh[i] * key[i];
            const float v = (float)dot * d->scale;
            s += (w[h] * d->wscale) * (v > 0.0f ? v : 0.0f);
        }
        sc[p] = s;
    }
}

static void dsa_part(void *ctx, size_t begin, size_t end) {
    const dsa_job *j = ctx;
    const be_dsa *d = j->d;
    float *sc = j->c->scratch + (size_t)pool_thread(j->c->pool) * j->c->slot_floats;
    for (size_t t = begin; t < end; t++) {
        const int n_keys = d->pos0 + (int)t + 1;
        int32_t *sel = d->sel + t * (size_t)d->sel_ld;
        if (n_keys <= d->topk) { /* every position */
            for (int p = 0; p < n_keys; p++) sel[p] = p;
            continue;
        }
        float *tmp = sc + n_keys;
        dsa_scores(d, (int)t, sc);
        memcpy(tmp, sc, (size_t)n_keys * sizeof(float));
        const float cut = kth_largest(tmp, n_keys, d->topk);
        int above = 0;
        for (int p = 0; p < n_keys; p++) above += sc[p] > cut;
        int ties = d->topk - above, k = 0;
        for (int p = 0; p < n_keys; p++)
            if (sc[p] > cut || (sc[p] == cut && ties-- > 0)) sel[k++] = p;
    }
}

void cpu_dsa_select(be_backend *be, const be_dsa *d) {
    cpu_ctx *c = cpu_of(be);
    for (int t = 0; t < d->n; t++)
        memcpy(d->cache + (size_t)(d->pos0 + t) * d->ldc + d->koff, d->k + (size_t)t * d->ldk,
               (size_t)d->dim * sizeof(float));
    if (c->slot_floats < 2 * (size_t)(d->pos0 + d->n) + 1) {
        cpu_fail(be, SL_EINVAL, "dsa_select: the per-thread scratch holds fewer than two rows of scores");
        return;
    }
    dsa_job j = {d, c};
    pool_for(c->pool, (size_t)d->n, 1, dsa_part, &j);
}
