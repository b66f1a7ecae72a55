/*
 * cpu_experts.c — the CPU backend's ffn_experts op (backend.h be_experts): a MoE block's resident SwiGLU experts
 * over many rows (a prefill's layer-major block, a few tokens' decode step) in a few thread hand-offs for all of
 * them, instead of three to five per expert (cpu_moe.c swiglu_ffn: the input's int8 form, gate and up, the SwiGLU,
 * the down input's int8 form, the down). A 512-token prefill of the 30B shape runs 128 experts of ~32 rows a
 * layer; at 16 threads each expert's gate / up (1536 rows) was split into ~100 claims and every hand-off waited for
 * its slowest thread, 640 hand-offs a layer.
 *
 * The experts go in groups of consecutive experts of at most GROUP_ROWS pairs (one expert more than that alone);
 * a group is four passes over the pool (five for a GGUF expert):
 *   1. gather: each pair's row of h into X [P][H] and the int8 form the gate reads (kern_act_prepare_rows_for;
 *      the house form, or llama.cpp's q8_0 for a GGUF Q4_0 / Q8_0 expert);
 *   2. gate and up of every expert of the group with the SwiGLU and the down input's int8 form, items (expert,
 *      128 rows) for all its rows (kern_swiglu_multi), into G, U [P][I];
 *   3. every down over its expert's rows of G (kern_matmul_multi), into Y [P][H]; where the down reads another
 *      form than the house one pass 2 fills (a GGUF type's), that form of G in a pass before;
 *   4. the combine: each token's pairs of the group in increasing pair order, out[t] += w * y (ops->axpy), or the
 *      cells' copies; tokens split over the pool, each row whole in one call.
 * Each expert's rows go through the kernels an ffn of that expert would run on them, and every row's int8 forms,
 * products and SwiGLU depend on that row alone (kernels.h: batch == alone), so each y is bitwise an ffn per expert;
 * groups are ascending runs and a token's pairs are added in pair order, so out gets combine_rows' sums over
 * ascending experts bit for bit. A group the int8 kernels refuse (kern_swiglu_multi: nothing done) runs its experts
 * one at a time through cpu_ffn before the same combine.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"

/* Pairs a group holds at most (an expert with more: a group of its own). 1024 pairs of the 30B shape are ~30 MB of
 * scratch (X and Y 8 KB a pair, G and U 6 KB, the int8 forms ~5 KB) and ~32 experts: 192 items of pass 2. */
#define GROUP_ROWS 1024
/* Experts a group holds at most (kern_swiglu_multi's and kern_matmul_multi's limits). */
#define GROUP_EXPERTS 256

static size_t round64(size_t n) { return (n + 63) / 64 * 64; }

/* The scratch of a group of P pairs and m experts, carved from c->ex_buf. */
typedef struct {
    float *x, *g, *u, *y;
    void *xbuf, *mbuf;
    int *head, *next;
    kern_act *xs, *ms;
    kern_mm *gm, *um, *dm;
} ex_scratch;

static size_t carve(ex_scratch *s, char *p, int n, int P, int H, int I, int m) {
    size_t off = 0;
#define TAKE(field, bytes)                               \
    do {                                                 \
        if (p) s->field = (void *)(p + off);             \
        off += round64(bytes);                           \
    } while (0)
    TAKE(x, (size_t)P * H * sizeof(float));
    TAKE(g, (size_t)P * I * sizeof(float));
    TAKE(u, (size_t)P * I * sizeof(float));
    TAKE(y, (size_t)P * H * sizeof(float));
    TAKE(xbuf, kern_act_bytes(P, H));
    TAKE(mbuf, kern_act_bytes(P, I));
    TAKE(head, (size_t)n * sizeof(int));
    TAKE(next, (size_t)P * sizeof(int));
    TAKE(xs, (size_t)m * sizeof(kern_act));
    TAKE(ms, (size_t)m * sizeof(kern_act));
    TAKE(gm, (size_t)m * sizeof(kern_mm));
    TAKE(um, (size_t)m * sizeof(kern_mm));
    TAKE(dm, (size_t)m * sizeof(kern_mm));
#undef TAKE
    return off;
}

/* Pass 1: pairs [b, e) of the group (from p0): rows of h into X, and the int8 form the gate reads of each. */
typedef struct {
    const be_experts *q;
    const ex_scratch *s;
    kern_act *xa;
    const tn_mat *gate;
    int p0;
} gather_job;

static void gather_part(void *ctx, size_t b, size_t e) {
    const gather_job *j = ctx;
    const size_t H = (size_t)j->q->H;
    for (size_t i = b; i < e; i++)
        memcpy(j->s->x + i * H, j->q->h + (size_t)j->q->tok[j->p0 + (int)i] * H, H * sizeof(float));
    kern_act_prepare_rows_for(j->xa, j->gate, (int)b, (int)e);
}

/* Pass 4: tokens [b, e): each one's pairs of the group (the list from head, increasing pairs) into out or cells. */
typedef struct {
    const be_experts *q;
    const ex_scratch *s;
    const kern_ops *ops;
    int p0;
} combine_job;

static void combine_part(void *ctx, size_t b, size_t e) {
    const combine_job *j = ctx;
    const be_experts *q = j->q;
    const size_t H = (size_t)q->H;
    for (size_t t = b; t < e; t++)
        for (int i = j->s->head[t]; i >= 0; i = j->s->next[i]) {
            const int p = j->p0 + i, s = q->slot[p];
            const float *y = j->s->y + (size_t)i * H;
            if (q->out) j->ops->axpy(q->top_w[t * (size_t)q->k + (size_t)s], y, q->out + t * H, (int)H);
            else memcpy(q->cells + (t * (size_t)q->k + (size_t)s) * H, y, H * sizeof(float));
        }
}

/* The experts [e0, e1) of q, pairs p0 .. P0 + P, over s. */
static void run_group(be_backend *be, const be_experts *q, const ex_scratch *s, int e0, int e1) {
    cpu_ctx *c = cpu_of(be);
    const int H = q->H, I = q->I, p0 = q->start[e0], P = q->start[e1] - p0, m = e1 - e0;
    const tn_expert *ex = q->ex + e0;
    kern_act xa, mid;
    kern_act_init(&xa, s->xbuf, s->x, (size_t)H, P, H, q->int8);
    gather_job gj = {q, s, &xa, &ex[0].gate, p0};
    pool_for_any(c->pool, (size_t)P, 4, gather_part, &gj);
    kern_act_ready_for(&xa, &ex[0].gate);
    kern_act_prepare_for(&xa, &ex[0].up, c->pool); /* (another form than the gate's: its own pass) */
    kern_act_init(&mid, s->mbuf, s->g, (size_t)I, P, I, q->int8);
    for (int i = 0; i < m; i++) {
        const int r = q->start[e0 + i] - p0, T = q->start[e0 + i + 1] - q->start[e0 + i];
        kern_act_rows(&s->xs[i], &xa, r, T);
        s->gm[i] = (kern_mm){&ex[i].gate, &s->xs[i], s->g + (size_t)r * I, (size_t)I};
        s->um[i] = (kern_mm){&ex[i].up, &s->xs[i], s->u + (size_t)r * I, (size_t)I};
    }
    if (ex[0].down.cols == I && !kern_swiglu_multi(c->ops, c->pool, s->gm, s->um, m, &mid)) {
        kern_act_prepare_for(&mid, &ex[0].down, c->pool);
        for (int i = 0; i < m; i++) {
            const int r = q->start[e0 + i] - p0, T = q->start[e0 + i + 1] - q->start[e0 + i];
            kern_act_rows(&s->ms[i], &mid, r, T);
            s->dm[i] = (kern_mm){&ex[i].down, &s->ms[i], s->y + (size_t)r * H, (size_t)H};
        }
        int rc = kern_matmul_multi(c->ops, c->pool, s->dm, m);
        if (rc) cpu_fail(be, rc, "experts: a down projection failed");
    } else { /* one at a time, as an ffn each (cpu_moe.c swiglu_ffn) */
        for (int i = 0; i < m; i++) {
            const int r = q->start[e0 + i] - p0;
            const be_ffn f = {.kind = BE_FFN_SWIGLU, .w = &ex[i], .x = &s->xs[i], .inter = I, .g = s->g, .u = s->u,
                              .mid_buf = s->mbuf, .int8 = q->int8, .y = s->y + (size_t)r * H, .ldy = (size_t)H};
            cpu_ffn(be, &f);
        }
    }
    /* each token's pairs of the group, in increasing order: lists built from the last pair back */
    for (int t = 0; t < q->n; t++) s->head[t] = -1;
    for (int i = P - 1; i >= 0; i--) {
        const int t = q->tok[p0 + i];
        s->next[i] = s->head[t];
        s->head[t] = i;
    }
    combine_job cj = {q, s, c->ops, p0};
    pool_for_any(c->pool, (size_t)q->n, 4, combine_part, &cj);
}

int cpu_ffn_experts(be_backend *be, const be_experts *q) {
    cpu_ctx *c = cpu_of(be);
    if (!q->int8 || q->m < 1 || q->n < 1 || (!q->out && !q->cells)) return 0;
    for (int i = 0; i < q->m; i++)
        if (!q->ex[i].gate.data || !q->ex[i].up.data || !q->ex[i].down.data || q->start[i + 1] < q->start[i])
            return 0;
    /* the groups' largest scratch */
    size_t need = 0;
    for (int e0 = 0; e0 < q->m;) {
        int e1 = e0 + 1;
        while (e1 < q->m && e1 - e0 < GROUP_EXPERTS && q->start[e1 + 1] - q->start[e0] <= GROUP_ROWS) e1++;
        const size_t b = carve(NULL, NULL, q->n, q->start[e1] - q->start[e0], q->H, q->I, e1 - e0);
        if (b > need) need = b;
        e0 = e1;
    }
    if (need > c->ex_bytes) {
        void *p = aligned_alloc(64, round64(need));
        if (!p) return 0; /* not taken: the caller runs each expert as before */
        free(c->ex_buf);
        c->ex_buf = p;
        c->ex_bytes = round64(need);
    }
    for (int e0 = 0; e0 < q->m;) {
        int e1 = e0 + 1;
        while (e1 < q->m && e1 - e0 < GROUP_EXPERTS && q->start[e1 + 1] - q->start[e0] <= GROUP_ROWS) e1++;
        ex_scratch s;
        carve(&s, c->ex_buf, q->n, q->start[e1] - q->start[e0], q->H, q->I, e1 - e0);
        if (q->start[e1] > q->start[e0]) run_group(be, q, &s, e0, e1);
        e0 = e1;
    }
    return 1;
}
