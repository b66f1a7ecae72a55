/*
 * deltanet.c — Gated DeltaNet mixer of qwen3_next / qwen3_5_moe (MODELS.md 3.5).
 *
 * Per micro-batch of n tokens:
 *   1. projections -> conv_in [n][Cq] = q|k|v (Next: regrouped from in_proj_qkvz), z [n][nv*dv],
 *      ba [n][2nv] (Next: raw grouped b|a per key head; Qwen3.5: b then a);
 *   2. causal depthwise conv1d + SiLU over [conv state (K-1 rows); conv_in] -> conv_out; the new conv
 *      state (last K-1 pre-conv rows) goes to the other slot;
 *   3. beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias) -> gates [n][2nv];
 *      q, k L2-normalised in place (q also times dk^-1/2);
 *   4. per value head (one pool work item each): the token recurrence (3.5.4) or, for n > 1 when
 *      enabled, the chunked form (3.5.5) with the whole micro-batch as one chunk; the state moves from
 *      slot lin_cur to slot 1-lin_cur;
 *   5. gated RMSNorm per head (plain w, times silu(z)), out_proj.
 * Value head h reads key/query head h / (nv/nk) (HF repeat_interleave).
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "model/fwd_internal.h"

typedef struct {
    fwd_ws *ws;
    const float *s_in; /* [nv][dk][dv] entering state */
    float *s_out;      /* [nv][dk][dv] leaving state */
    int n, nk, nv, dk, dv, chunked;
    atomic_int next_slot;
} dn_job;

/* q, k, v of token t for value head h. */
static inline const float *tok_q(const dn_job *j, int t, int h) {
    return j->ws->conv_out + (size_t)t * (2 * j->nk * j->dk + j->nv * j->dv) + (size_t)(h / (j->nv / j->nk)) * j->dk;
}
static inline const float *tok_k(const dn_job *j, int t, int h) { return tok_q(j, t, h) + (size_t)j->nk * j->dk; }
static inline const float *tok_v(const dn_job *j, int t, int h) {
    return j->ws->conv_out + (size_t)t * (2 * j->nk * j->dk + j->nv * j->dv) + (size_t)2 * j->nk * j->dk +
           (size_t)h * j->dv;
}

/* Token recurrence for head h: S <- a S; m = S^T k; d = beta (v - m); S += k d^T; o = S^T q. */
static void head_recurrent(const dn_job *j, int h, float *S, float *tmp) {
    fwd_ws *ws = j->ws;
    const kern_ops *ops = ws->ops;
    const int dk = j->dk, dv = j->dv, nv = j->nv;
    float *m = tmp;
    for (int t = 0; t < j->n; t++) {
        const float *q = tok_q(j, t, h), *k = tok_k(j, t, h), *v = tok_v(j, t, h);
        const float beta = ws->gates[(size_t)t * 2 * nv + h];
        const float alpha = expf(ws->gates[(size_t)t * 2 * nv + nv + h]);
        memset(m, 0, (size_t)dv * sizeof(float));
        for (int i = 0; i < dk; i++) {
            float *row = S + (size_t)i * dv;
            for (int d = 0; d < dv; d++) row[d] *= alpha;
            ops->axpy(k[i], row, m, dv);
        }
        for (int d = 0; d < dv; d++) m[d] = (v[d] - m[d]) * beta;
        float *o = ws->mix + (size_t)t * ws->n_mix + (size_t)h * dv;
        memset(o, 0, (size_t)dv * sizeof(float));
        for (int i = 0; i < dk; i++) {
            float *row = S + (size_t)i * dv;
            ops->axpy(k[i], m, row, dv);
            ops->axpy(q[i], row, o, dv);
        }
    }
}

/* Chunked form (MODELS.md 3.5.5) over the whole micro-batch as one chunk of n <= FWD_BATCH tokens;
 * mathematically equal to head_recurrent, summed in another order (agrees to ~1e-6 relative).
 * Scratch: G [C], T [C][C], M [C][C], U [C][dv], W [C][dk], ks [C][dk], kb [C][dk], tmp [dv]. */
static void head_chunked(const dn_job *j, int h, float *S, float *scratch) {
    fwd_ws *ws = j->ws;
    const kern_ops *ops = ws->ops;
    const int n = j->n, dk = j->dk, dv = j->dv, nv = j->nv, C = FWD_BATCH;
    float *G = scratch, *T = G + C, *M = T + (size_t)C * C, *U = M + (size_t)C * C;
    float *W = U + (size_t)C * dv, *ks = W + (size_t)C * dk, *kb = ks + (size_t)C * dk, *tmp = kb + (size_t)C * dk;

    /* cumulative log decay, k~ = beta k, ks = k~ exp(G) */
    float acc = 0.0f;
    for (int i = 0; i < n; i++) {
        acc += ws->gates[(size_t)i * 2 * nv + nv + h];
        G[i] = acc;
        const float beta = ws->gates[(size_t)i * 2 * nv + h], eg = expf(G[i]);
        const float *k = tok_k(j, i, h);
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
            Ti[c] = -(ops->dot(kb + (size_t)i * dk, tok_k(j, c, h), dk) * expf(G[i] - G[c]));
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
            const float tim = T[(size_t)i * C + m], beta = ws->gates[(size_t)m * 2 * nv + h];
            const float *v = tok_v(j, m, h);
            for (int d = 0; d < dv; d++) Ui[d] += tim * (v[d] * beta);
            ops->axpy(tim, ks + (size_t)m * dk, Wi, dk);
        }
        memset(tmp, 0, (size_t)dv * sizeof(float));
        for (int a = 0; a < dk; a++) ops->axpy(Wi[a], S + (size_t)a * dv, tmp, dv);
        for (int d = 0; d < dv; d++) Ui[d] -= tmp[d];
    }
    /* O_i = (q_i exp(G_i)) S + sum_{c<=i} (q_i . k_c) D_ic V'_c */
    for (int i = 0; i < n; i++) {
        const float *q = tok_q(j, i, h);
        const float eg = expf(G[i]);
        float *o = ws->mix + (size_t)i * ws->n_mix + (size_t)h * dv;
        memset(o, 0, (size_t)dv * sizeof(float));
        for (int a = 0; a < dk; a++) ops->axpy(q[a] * eg, S + (size_t)a * dv, o, dv);
        float *Mi = M + (size_t)i * C;
        for (int c = 0; c <= i; c++) Mi[c] = ops->dot(q, tok_k(j, c, h), dk) * expf(G[i] - G[c]);
        for (int c = 0; c <= i; c++) ops->axpy(Mi[c], U + (size_t)c * dv, o, dv);
    }
    /* S <- exp(G_last) S + sum_c (k_c exp(G_last - G_c)) V'_c^T */
    const float gl = G[n - 1], el = expf(gl);
    for (int c = 0; c < n; c++) tmp[c] = expf(gl - G[c]);
    for (int a = 0; a < dk; a++) {
        float *row = S + (size_t)a * dv;
        for (int d = 0; d < dv; d++) row[d] *= el;
        for (int c = 0; c < n; c++) ops->axpy(tok_k(j, c, h)[a] * tmp[c], U + (size_t)c * dv, row, dv);
    }
}

static void dn_part(void *ctx, size_t begin, size_t end) {
    dn_job *j = ctx;
    int slot = atomic_fetch_add(&j->next_slot, 1);
    float *tmp = j->ws->scratch + (size_t)slot * j->ws->slot_floats;
    size_t hs = (size_t)j->dk * j->dv;
    for (size_t h = begin; h < end; h++) {
        float *S = j->s_out + h * hs;
        memcpy(S, j->s_in + h * hs, hs * sizeof(float));
        if (j->chunked && j->n > 1)
            head_chunked(j, (int)h, S, tmp);
        else
            head_recurrent(j, (int)h, S, tmp);
    }
}

static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

static void l2norm(float *x, int n, float scale) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    float inv = (float)(1.0 / sqrt(ss + 1e-6));
    for (int i = 0; i < n; i++) x[i] = (x[i] * inv) * scale;
}

int fwd_deltanet(fwd_ws *ws, fwd_seq *sq, const sl_config *cfg, const sl_layer_w *lw, int layer, sl_pool *pool, int n,
                 char *err, size_t errlen) {
    const kern_ops *ops = ws->ops;
    const size_t H = (size_t)cfg->hidden;
    const int nk = cfg->lin_nk, nv = cfg->lin_nv, dk = cfg->lin_dk, dv = cfg->lin_dv, K = cfg->conv_k;
    const int r = nv / nk, cq = 2 * nk * dk + nv * dv, zd = nv * dv;

    /* 1. projections, the input quantized once for all of them */
    kern_act hx;
    fwd_act(ws, &hx, FWD_ACT_IN, ws->h, H, n, (int)H);
    if (cfg->split_lin_proj) {
        const kern_mm mm[4] = {{&lw->qkv, &hx, ws->conv_in, (size_t)cq}, {&lw->z, &hx, ws->z, (size_t)zd},
                               {&lw->b, &hx, ws->ba, (size_t)2 * nv}, {&lw->a, &hx, ws->ba + nv, (size_t)2 * nv}};
        kern_matmul_multi(ops, pool, mm, 4);
    } else {
        /* in_proj_qkvz block g: [q_g (dk) | k_g (dk) | v heads g*r.. (r*dv) | z same heads (r*dv)] */
        const int bs = 2 * dk + 2 * r * dv;
        const kern_mm mm[2] = {{&lw->qkvz, &hx, ws->big, (size_t)ws->n_big}, {&lw->ba, &hx, ws->ba, (size_t)2 * nv}};
        kern_matmul_multi(ops, pool, mm, 2);
        for (int t = 0; t < n; t++) {
            float *u = ws->conv_in + (size_t)t * cq, *z = ws->z + (size_t)t * zd;
            for (int g = 0; g < nk; g++) {
                const float *blk = ws->big + (size_t)t * ws->n_big + (size_t)g * bs;
                memcpy(u + (size_t)g * dk, blk, (size_t)dk * sizeof(float));
                memcpy(u + (size_t)(nk + g) * dk, blk + dk, (size_t)dk * sizeof(float));
                memcpy(u + (size_t)2 * nk * dk + (size_t)g * r * dv, blk + 2 * dk, (size_t)r * dv * sizeof(float));
                memcpy(z + (size_t)g * r * dv, blk + 2 * dk + r * dv, (size_t)r * dv * sizeof(float));
            }
        }
    }

    /* 2. causal conv1d + SiLU. Row s of the window: s < 0 -> conv state row K-1+s, else conv_in[s]. */
    const int cur = sq->lin_cur[layer];
    const float *cs_in = sq->conv[layer][cur];
    float *cs_out = sq->conv[layer][cur ^ 1];
    for (int t = 0; t < n; t++) {
        float *y = ws->conv_out + (size_t)t * cq;
        for (int c = 0; c < cq; c++) {
            const float *wc = lw->conv_w + (size_t)c * K;
            float acc = 0.0f;
            for (int i = 0; i < K; i++) {
                int s = t - K + 1 + i;
                float u = s < 0 ? cs_in[(size_t)(K - 1 + s) * cq + c] : ws->conv_in[(size_t)s * cq + c];
                acc += wc[i] * u;
            }
            y[c] = kern_silu(acc);
        }
    }
    for (int i = 0; i < K - 1; i++) {
        int s = n - K + 1 + i;
        const float *src = s < 0 ? cs_in + (size_t)(K - 1 + s) * cq : ws->conv_in + (size_t)s * cq;
        memcpy(cs_out + (size_t)i * cq, src, (size_t)cq * sizeof(float));
    }

    /* 3. gates and q/k normalisation */
    const float qscale = 1.0f / sqrtf((float)dk);
    for (int t = 0; t < n; t++) {
        const float *ba = ws->ba + (size_t)t * 2 * nv;
        float *gt = ws->gates + (size_t)t * 2 * nv;
        for (int h = 0; h < nv; h++) {
            float b, a;
            if (cfg->split_lin_proj) {
                b = ba[h];
                a = ba[nv + h];
            } else { /* block g = h / r: [b (r) | a (r)] */
                b = ba[(h / r) * 2 * r + h % r];
                a = ba[(h / r) * 2 * r + r + h % r];
            }
            gt[h] = kern_sigmoid(b);
            gt[nv + h] = -expf(lw->A_log[h]) * softplus(a + lw->dt_bias[h]);
        }
        float *c = ws->conv_out + (size_t)t * cq;
        for (int g = 0; g < nk; g++) {
            l2norm(c + (size_t)g * dk, dk, qscale);
            l2norm(c + (size_t)(nk + g) * dk, dk, 1.0f);
        }
    }

    /* 4. recurrence per value head */
    dn_job j = {.ws = ws, .s_in = sq->ssm[layer][cur], .s_out = sq->ssm[layer][cur ^ 1], .n = n, .nk = nk,
                .nv = nv, .dk = dk, .dv = dv, .chunked = ws->chunked};
    atomic_init(&j.next_slot, 0);
    sl_pool_for(pool, (size_t)nv, 1, dn_part, &j);

    /* 5. gated RMSNorm and out_proj */
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nv; h++) {
            float *o = ws->mix + (size_t)t * ws->n_mix + (size_t)h * dv;
            const float *z = ws->z + (size_t)t * zd + (size_t)h * dv;
            ops->rmsnorm(o, lw->lin_norm, 0.0f, cfg->eps, o, dv);
            for (int d = 0; d < dv; d++) o[d] *= kern_silu(z[d]);
        }
    fwd_matmul(ws, pool, &lw->lin_out, ws->mix, (size_t)ws->n_mix, ws->out, H, n, FWD_ACT_MID);
    return 0;
}
