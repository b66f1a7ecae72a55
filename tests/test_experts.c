/*
 * test_experts.c — the CPU backend's ffn_experts op (src/backend/cpu/cpu_experts.c): a MoE block's experts in a few
 * hand-offs for all of them, bitwise an ffn per expert over its gathered rows and then combine_rows over the experts
 * in order (out), or the outputs in their (token, slot) cells; on random q4 / q8 experts (house and llama.cpp
 * activation forms, a short last 128-row block), groups split at many pairs, 1, 3 and 16 threads, and f32 experts (the
 * exact kernels: the op's one-at-a-time path).
 */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "kernels/kernels.h"
#include "quant/quant.h"
#include "test.h"
#include "util/threadpool.h"

static float frand(void) { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }

/* One matrix [rows][cols] of dtype dt (group 32, f16 scales; act: the activation form its kernels read), random. */
static void *rand_mat(tn_mat *m, dt_type dt, int act, int rows, int cols) {
    float *w = malloc((size_t)rows * cols * sizeof(float));
    for (int i = 0; i < rows * cols; i++) w[i] = frand() * 0.2f;
    void *data;
    if (dt == DT_F32) {
        data = w;
        memset(m, 0, sizeof *m);
        m->data = data;
        m->dtype = DT_F32;
        m->rows = rows;
        m->cols = cols;
        return data;
    }
    data = malloc(q_mat_bytes(dt, rows, cols, 32, DT_F16));
    q_quantize(dt, w, rows, cols, 32, DT_F16, 1, data);
    q_mat_bind(m, data, dt, rows, cols, 32, DT_F16, 1);
    m->act = act;
    free(w);
    return data;
}

/* out [n][H] (or cells [n*k][H]) as moe.c ran the experts before the op: each expert's rows of h gathered, their
 * act, an ffn, then combine_rows (or each row into its cell). */
static void reference(be_backend *be, const be_experts *q, float *out, float *cells) {
    const int H = q->H, I = q->I;
    if (out) memset(out, 0, (size_t)q->n * H * sizeof(float));
    for (int i = 0; i < q->m; i++) {
        const int p0 = q->start[i], T = q->start[i + 1] - p0;
        float *x = malloc((size_t)T * H * sizeof(float)), *y = malloc((size_t)T * H * sizeof(float));
        float *g = malloc((size_t)T * I * sizeof(float)), *u = malloc((size_t)T * I * sizeof(float));
        void *xb = malloc(kern_act_bytes(T, H)), *mb = malloc(kern_act_bytes(T, I));
        for (int t = 0; t < T; t++) memcpy(x + (size_t)t * H, q->h + (size_t)q->tok[p0 + t] * H, (size_t)H * 4);
        kern_act a;
        kern_act_init(&a, xb, x, (size_t)H, T, H, q->int8);
        const be_ffn f = {.kind = BE_FFN_SWIGLU, .w = &q->ex[i], .x = &a, .inter = I, .g = g, .u = u, .mid_buf = mb,
                          .int8 = q->int8, .y = y, .ldy = (size_t)H};
        be->ffn(be, &f);
        if (out) be->combine_rows(be, out, H, q->k, q->tok + p0, q->slot + p0, q->top_w, y, T);
        else
            for (int t = 0; t < T; t++)
                memcpy(cells + ((size_t)q->tok[p0 + t] * q->k + q->slot[p0 + t]) * H, y + (size_t)t * H, (size_t)H * 4);
        free(x), free(y), free(g), free(u), free(xb), free(mb);
    }
}

TEST(cpu_ffn_experts_bitwise_an_ffn_each) {
    unsigned seed = test_seed();
    srand(seed);
    enum { H = 256, E = 12, K = 4 };
    static const int inters[] = {384, 160};
    static const int rows_l[] = {7, 300}; /* 300 x 4 pairs: groups split at 1024 */
    int cases = 0;
    for (int kind = 0; kind < 4 && !test_failed(); kind++) {
        /* q4 house, q8 house, q4 with llama.cpp's q8_0 activations, f32 (exact kernels) */
        const dt_type dt = kind == 1 ? DT_Q8 : kind == 3 ? DT_F32 : DT_Q4;
        const int act = kind == 2 ? TN_ACT_Q8_0 : TN_ACT_HOUSE, I = inters[kind & 1];
        tn_expert ex[E];
        void *data[E][3];
        memset(ex, 0, sizeof ex);
        for (int e = 0; e < E; e++) {
            data[e][0] = rand_mat(&ex[e].gate, dt, act, I, H);
            data[e][1] = rand_mat(&ex[e].up, dt, act, I, H);
            data[e][2] = rand_mat(&ex[e].down, dt, act, H, I);
        }
        for (int ri = 0; ri < 2 && !test_failed(); ri++) {
            const int n = rows_l[ri];
            float *h = malloc((size_t)n * H * sizeof(float)), *top_w = malloc((size_t)n * K * sizeof(float));
            int *top_e = malloc((size_t)n * K * sizeof(int));
            for (int i = 0; i < n * H; i++) h[i] = frand();
            for (int t = 0; t < n; t++) { /* K distinct experts, ascending; expert 5 never chosen */
                int got = 0;
                while (got < K) {
                    int e = rand() % E, dup = e == 5;
                    for (int j = 0; j < got; j++) dup |= top_e[t * K + j] == e;
                    if (!dup) top_e[t * K + got++] = e;
                }
                for (int a = 1; a < K; a++)
                    for (int b = a; b > 0 && top_e[t * K + b - 1] > top_e[t * K + b]; b--) {
                        int s = top_e[t * K + b];
                        top_e[t * K + b] = top_e[t * K + b - 1];
                        top_e[t * K + b - 1] = s;
                    }
                for (int s = 0; s < K; s++) top_w[t * K + s] = 0.1f + (float)rand() / (float)RAND_MAX;
            }
            /* grouped by expert as moe.c groups them: pairs in token order within each used expert */
            int *tok = malloc((size_t)n * K * sizeof(int)), *slot = malloc((size_t)n * K * sizeof(int));
            int start[E + 1], m = 0, p = 0;
            tn_expert used[E];
            for (int e = 0; e < E; e++) {
                const int p0 = p;
                for (int t = 0; t < n; t++)
                    for (int s = 0; s < K; s++)
                        if (top_e[t * K + s] == e) tok[p] = t, slot[p++] = s;
                if (p > p0) start[m] = p0, used[m++] = ex[e];
            }
            start[m] = p;
            const size_t ob = (size_t)n * H * sizeof(float), cb = (size_t)n * K * H * sizeof(float);
            float *ref = malloc(ob), *got = malloc(ob), *rcell = malloc(cb), *gcell = malloc(cb);
            for (int pt = 0; pt < 3 && !test_failed(); pt++) {
                pool_t *pool = pt ? pool_new(pt == 1 ? 3 : 16) : NULL;
                be_backend *be = be_cpu_new(NULL, pool);
                CHECK(be != NULL);
                be_experts q = {.n = n, .k = K, .H = H, .I = I, .m = m, .ex = used, .start = start, .tok = tok,
                                .slot = slot, .top_w = top_w, .h = h, .int8 = 1};
                reference(be, &q, ref, NULL);
                memset(got, 0, ob);
                q.out = got;
                CHECK(be->ffn_experts(be, &q) == 1);
                CHECK(be->sync(be) == SL_OK);
                CHECKF(!memcmp(got, ref, ob), "kind %d inter %d rows %d threads %d: out differs (seed %u)", kind, I, n,
                       pool_size(pool), seed);
                memset(rcell, 0xff, cb); /* NaN: the cells of no pair stay so in both */
                memset(gcell, 0xff, cb);
                reference(be, &q, NULL, rcell);
                q.out = NULL;
                q.cells = gcell;
                CHECK(be->ffn_experts(be, &q) == 1);
                CHECKF(!memcmp(gcell, rcell, cb), "kind %d inter %d rows %d threads %d: cells differ (seed %u)", kind,
                       I, n, pool_size(pool), seed);
                q.int8 = 0; /* not taken: nothing written */
                memcpy(gcell, rcell, cb);
                CHECK(be->ffn_experts(be, &q) == 0 && !memcmp(gcell, rcell, cb));
                be->destroy(be);
                pool_free(pool);
                cases++;
            }
            free(ref), free(got), free(rcell), free(gcell), free(tok), free(slot), free(h), free(top_w), free(top_e);
        }
        for (int e = 0; e < E; e++)
            for (int j = 0; j < 3; j++) free(data[e][j]);
    }
    CHECK(cases == 24);
}
