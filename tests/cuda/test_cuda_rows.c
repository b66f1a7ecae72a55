/*
 * test_cuda_rows.c — a decode batch's n-row forms (SLUICE_CUDA_NROWS=1, cuda_mvn.h) in test_cuda (included by
 * test_cuda_serve.c, whose check_moeg_all runs check_rows_all; it uses test_cuda.c's helpers): slcu_add_norm_rows
 * (residual add + rmsnorm + int8 form of n rows in one launch) bitwise slcb_add, slcu_rmsnorm and slcu_act_quantize
 * of the rows, and each row bitwise that row alone through slcu_add_norm_q / slcu_rmsnorm_q; slcu_norm_rope_rows (q and
 * k per-head norms and RoPE of n tokens at their positions in one launch) bitwise slcu_rmsnorm x 2 then slcu_rope_at
 * x 2, and each token bitwise slcu_norm_rope of it alone. n = 1 .. 8, on the cluster and the one-CTA kernels.
 * `test_cuda --serve-rows` runs these checks, then times old against new (us a launch set) on the 30B-A3B's shapes.
 */

/* rows t of the n-row int8 form a against the one-row form b: codes, q4 codes, scales, sums bitwise */
static int act_row_same(const slcu_act *a, int t, const slcu_act *b) {
    const size_t c = (size_t)a->cols, nb = c / 32, ns = nb + nb / 2 + nb / 4;
    const slcu_act r = {1, a->cols, a->q + t * c, a->q4 + t * c, a->d + t * nb, a->s + t * ns, NULL, NULL};
    return same_act(&r, b);
}

/* n rows of dim: x += y (add) or not, norm (w_off, eps), int8 form: new (one launch) vs the three kernels vs each row
 * alone; every output poisoned first */
static void check_add_norm_rows(int n, int dim, int add, int mode) {
    char msg[256] = "";
    const size_t nf = (size_t)n * dim;
    float *hx, *dx = rnd_dev(nf, 3, &hx, msg), *dx2 = dev_copy(hx, nf * 4, msg), *dx3 = dev_copy(hx, nf * 4, msg);
    float *dy = rnd_dev(nf, 1, NULL, msg), *dw = rnd_dev((size_t)dim, 1, NULL, msg);
    float *dh = slcu_alloc(nf * 4, msg, sizeof msg), *dh2 = slcu_alloc(nf * 4, msg, sizeof msg);
    float *dh3 = slcu_alloc((size_t)dim * 4, msg, sizeof msg);
    void *b1 = slcu_alloc(slcu_act_bytes(n, dim), msg, sizeof msg), *b2 = slcu_alloc(slcu_act_bytes(n, dim), msg, sizeof msg);
    void *b3 = slcu_alloc(slcu_act_bytes(1, dim), msg, sizeof msg);
    slcu_act a1, a2, a3;
    slcu_act_bind(&a1, b1, n, dim, msg, sizeof msg), slcu_act_bind(&a2, b2, n, dim, msg, sizeof msg);
    slcu_act_bind(&a3, b3, 1, dim, msg, sizeof msg);
    poison(dh, nf * 4), poison(dh2, nf * 4), poison(b1, slcu_act_bytes(n, dim)), poison(b2, slcu_act_bytes(n, dim));
    const int keep = slcu_norm_mode;
    slcu_norm_mode = mode;
    const float w_off = add ? 0.0f : 1.0f, eps = add ? 1e-6f : 1e-5f;
    const slcu_addnorm p = {.x = dx, .y = add ? dy : NULL, .h = dh, .w = dw, .w_off = w_off, .eps = eps, .dim = dim};
    CK(!slcu_add_norm_rows(&p, n, &a1, msg, sizeof msg), "%s", msg);
    CK((!add || !slcb_add(dx2, dy, nf, msg, sizeof msg)) &&
       !slcu_rmsnorm(dx2, dh2, n, (size_t)dim, 1, 0, dim, dw, w_off, eps, msg, sizeof msg) &&
       !slcu_act_quantize(&a2, dh2, (size_t)dim, msg, sizeof msg), "%s", msg);
    float *x1 = dl(dx, nf), *x2 = dl(dx2, nf), *h1 = dl(dh, nf), *h2 = dl(dh2, nf);
    int same = !memcmp(x1, x2, nf * 4) && !memcmp(h1, h2, nf * 4) && same_act(&a1, &a2), alone = 1;
    for (int t = 0; t < n; t++) { /* row t alone, through the one-row kernel of this mode */
        poison(dh3, (size_t)dim * 4), poison(b3, slcu_act_bytes(1, dim));
        const slcu_addnorm q = {.x = dx3 + (size_t)t * dim, .y = dy + (size_t)t * dim, .h = dh3, .w = dw, .w_off = w_off,
                                .eps = eps, .dim = dim};
        CK(add ? !slcu_add_norm_q(&q, &a3, msg, sizeof msg) : !slcu_rmsnorm_q(q.x, dh3, dim, dw, w_off, eps, &a3, msg, sizeof msg),
           "%s", msg);
        float *h3 = dl(dh3, (size_t)dim), *x3 = dl(dx3 + (size_t)t * dim, (size_t)dim);
        alone &= !memcmp(h3, h1 + (size_t)t * dim, (size_t)dim * 4) && !memcmp(x3, x1 + (size_t)t * dim, (size_t)dim * 4) &&
                 act_row_same(&a1, t, &a3);
        free(h3), free(x3);
    }
    slcu_norm_mode = keep;
    CK(same && alone, "add_norm_rows n %d dim %d add %d norm mode %d: %s", n, dim, add, mode,
       !same ? "differs from add, rmsnorm, act_quantize" : "a row differs from the row alone");
    free(hx), free(x1), free(x2), free(h1), free(h2);
    slcu_free(dx), slcu_free(dx2), slcu_free(dx3), slcu_free(dy), slcu_free(dw), slcu_free(dh), slcu_free(dh2), slcu_free(dh3);
    slcu_free(b1), slcu_free(b2), slcu_free(b3);
}

/* n tokens: q nh heads of hd at a stride qs (rows of ldq), k nkv heads of hd (rows of ldk), partial rot; parts 1 (q
 * alone) or 2; positions pos0 + 37 t with a repeat (two tokens of one position) */
static void check_norm_rope_rows(int n, int nh, int nkv, int hd, int qs, int rot, int parts) {
    char msg[256] = "";
    const size_t ldq = (size_t)nh * qs + 64, ldk = (size_t)nkv * hd, nq = (size_t)n * ldq, nk = (size_t)n * ldk;
    float fq[512];
    for (int i = 0; i < rot / 2; i++) fq[i] = powf(10000.0f, -2.0f * i / rot);
    int pos[SLCU_NROWS_MAX];
    for (int t = 0; t < n; t++) pos[t] = 5 + 37 * t + (t == 3 ? -37 : 0);
    float *hq, *hk, *q1 = rnd_dev(nq, 2, &hq, msg), *k1 = rnd_dev(nk, 2, &hk, msg);
    float *q2 = dev_copy(hq, nq * 4, msg), *k2 = dev_copy(hk, nk * 4, msg);
    float *q3 = dev_copy(hq, nq * 4, msg), *k3 = dev_copy(hk, nk * 4, msg);
    float *wq = rnd_dev((size_t)hd, 1, NULL, msg), *wk = rnd_dev((size_t)hd, 1, NULL, msg);
    const slcu_normrope nr[2] = {{q1, q1, nh, hd, (size_t)qs, wq, 0.0f, 1e-6f}, {k1, k1, nkv, hd, (size_t)hd, wk, 1.0f, 1e-5f}};
    const size_t ld[2] = {ldq, ldk};
    CK(!slcu_norm_rope_rows(nr, ld, parts, n, rot, fq, 1.1f, pos, msg, sizeof msg), "%s", msg);
    CK(!slcu_rmsnorm(q2, q2, n, ldq, nh, (size_t)qs, hd, wq, 0.0f, 1e-6f, msg, sizeof msg) &&
       (parts < 2 || !slcu_rmsnorm(k2, k2, n, ldk, nkv, (size_t)hd, hd, wk, 1.0f, 1e-5f, msg, sizeof msg)) &&
       !slcu_rope_at(q2, n, ldq, nh, (size_t)qs, rot, fq, 1.1f, pos, 0, msg, sizeof msg) &&
       (parts < 2 || !slcu_rope_at(k2, n, ldk, nkv, (size_t)hd, rot, fq, 1.1f, pos, 0, msg, sizeof msg)), "%s", msg);
    int alone_ok = 1;
    for (int t = 0; t < n; t++) { /* token t alone: one-token k_norm_rope */
        const slcu_normrope one[2] = {{q3 + t * ldq, q3 + t * ldq, nh, hd, (size_t)qs, wq, 0.0f, 1e-6f},
                                      {k3 + t * ldk, k3 + t * ldk, nkv, hd, (size_t)hd, wk, 1.0f, 1e-5f}};
        alone_ok &= !slcu_norm_rope(one, parts, rot, fq, 1.1f, pos[t], msg, sizeof msg);
    }
    CK(alone_ok, "%s", msg);
    float *a = dl(q1, nq), *b = dl(q2, nq), *c = dl(k1, nk), *d = dl(k2, nk), *e = dl(q3, nq), *f = dl(k3, nk);
    const int same = !memcmp(a, b, nq * 4) && !memcmp(c, d, nk * 4), alone = !memcmp(a, e, nq * 4) && !memcmp(c, f, nk * 4);
    int moved = 1, gap = 1; /* the heads' first rot columns changed (norm + RoPE ran), the gap after the heads did not */
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < rot; i++) moved &= a[t * ldq + (size_t)h * qs + i] != hq[t * ldq + (size_t)h * qs + i];
        for (size_t i = (size_t)nh * qs; i < ldq; i++) gap &= !memcmp(&a[t * ldq + i], &hq[t * ldq + i], 4);
    }
    CK(same && alone && moved && gap, "norm_rope_rows n %d heads %d/%d hd %d rot %d parts %d: %s", n, nh, nkv, hd, rot, parts,
       !same ? "differs from rmsnorm x 2, rope_at x 2"
             : !alone ? "a token differs from the token alone" : "the gap written or nothing moved");
    free(a), free(b), free(c), free(d), free(e), free(f), free(hq), free(hk);
    slcu_free(q1), slcu_free(q2), slcu_free(q3), slcu_free(k1), slcu_free(k2), slcu_free(k3), slcu_free(wq), slcu_free(wk);
}

/* n tokens' router (E rows of cols, dt, kind 0 / 1, warp2): slcu_router_rows against slcu_matmul + slcu_route of the n
 * rows, and each token against its one-token k_router2 (slcu_matvec_route, SLUICE_CUDA_ROUTER=2); logits, choice and
 * weights bitwise, every counter left zero, three steps through the same counters (outputs poisoned each time) */
static void check_router_rows(int n, int E, int k, int cols, dt_type dt, int kind, int w2) {
    char msg[256] = "";
    mat w;
    if (make_mat(&w, dt, E, cols, 0, DT_F32, msg)) { CK(0, "%s", msg); return; }
    const slcu_router r = {kind, E, k, 1, 1, 1, 1.0f, NULL, w2};
    const size_t nl = (size_t)n * E, nk = (size_t)n * k;
    int zeros[SLCU_NROWS_MAX + 1] = {0}, *done = dev_copy(zeros, sizeof zeros, msg), *done1 = dev_copy(zeros, sizeof zeros, msg);
    float *lg[3], *tw[3];
    int *te[3];
    for (int v = 0; v < 3; v++)
        lg[v] = slcu_alloc(nl * 4, msg, sizeof msg), te[v] = slcu_alloc(nk * 4, msg, sizeof msg),
        tw[v] = slcu_alloc(nk * 4, msg, sizeof msg);
    const int mode0 = slcu_router_mode;
    int same = 1, alone = 1, zero = 1, taken = 1;
    for (int step = 0; step < 3; step++) {
        float *dx = rnd_dev((size_t)n * cols, step ? 1 : 4, NULL, msg);
        for (int v = 0; v < 3; v++) poison(lg[v], nl * 4), poison(te[v], nk * 4), poison(tw[v], nk * 4);
        CK(!slcu_matmul(&w.d, dx, lg[0], n, msg, sizeof msg) && !slcu_route(&r, lg[0], n, te[0], tw[0], msg, sizeof msg), "%s", msg);
        taken &= slcu_router_rows(&w.d, dx, lg[1], &r, n, te[1], tw[1], done, msg, sizeof msg) == 1;
        slcu_router_mode = 2;
        for (int t = 0; t < n; t++) {
            const float *xt = dx + (size_t)t * cols;
            float *l2 = lg[2] + (size_t)t * E, *w2p = tw[2] + (size_t)t * k;
            int *t2 = te[2] + (size_t)t * k;
            const int rc = slcu_matvec_route(&w.d, xt, l2, &r, t2, w2p, done1, msg, sizeof msg);
            CK(rc >= 0 && (rc || (!slcu_matmul(&w.d, xt, l2, 1, msg, sizeof msg) && !slcu_route(&r, l2, 1, t2, w2p, msg, sizeof msg))),
               "%s", msg);
        }
        slcu_router_mode = mode0;
        float *h[3], *hw[3];
        int *ht[3];
        for (int v = 0; v < 3; v++) h[v] = dl(lg[v], nl), ht[v] = (int *)dl(te[v], nk), hw[v] = dl(tw[v], nk);
        same &= !memcmp(h[1], h[0], nl * 4) && !memcmp(ht[1], ht[0], nk * 4) && !memcmp(hw[1], hw[0], nk * 4);
        alone &= !memcmp(h[1], h[2], nl * 4) && !memcmp(ht[1], ht[2], nk * 4) && !memcmp(hw[1], hw[2], nk * 4);
        for (size_t i = 0; i < nk; i++) same &= ht[0][i] >= 0 && ht[0][i] < E; /* the reference chose */
        int *hd = (int *)dl(done, SLCU_NROWS_MAX + 1);
        for (int t = 0; t <= SLCU_NROWS_MAX; t++) zero &= hd[t] == 0;
        free(hd);
        for (int v = 0; v < 3; v++) free(h[v]), free(ht[v]), free(hw[v]);
        slcu_free(dx);
    }
    CK(taken && same && alone && zero, "router_rows n %d E %d k %d cols %d %s kind %d warp2 %d: %s", n, E, k, cols, dt_name(dt),
       kind, w2, !taken ? "not taken" : !same ? "differs from matmul + route" : !alone ? "a token differs from k_router2 alone"
       : "a counter left non-zero");
    for (int v = 0; v < 3; v++) slcu_free(lg[v]), slcu_free(te[v]), slcu_free(tw[v]);
    slcu_free(done), slcu_free(done1);
    free_mat(&w);
}

static void check_rows_all(void) {
    const int before = failures;
    for (int n = 1; n <= SLCU_NROWS_MAX; n++) {
        check_add_norm_rows(n, 2048, n % 2, 2);      /* a cluster of 8 a row, CPT 1 (the 30B's hidden) */
        check_add_norm_rows(n, 2048, (n + 1) % 2, 1); /* one CTA a row (SLUICE_CUDA_NORM=1) */
        check_norm_rope_rows(n, 32, 4, 128, 128, 128, 2); /* the 30B's q / k heads */
    }
    check_add_norm_rows(8, 7168, 1, 2); /* CPT 4, W not a multiple of 256 (the cluster's other sum path) */
    check_add_norm_rows(5, 4096, 0, 2);
    check_add_norm_rows(3, 1056, 1, 2); /* not the cluster's shape: one CTA */
    check_add_norm_rows(8, 8192, 1, 1);
    check_norm_rope_rows(8, 8, 2, 128, 256, 96, 2); /* gated q (a stride of 2 hd), partial RoPE */
    check_norm_rope_rows(6, 16, 16, 64, 64, 64, 1); /* q alone */
    check_norm_rope_rows(7, 4, 1, 256, 256, 128, 2);
    check_norm_rope_rows(2, 64, 8, 80, 80, 80, 2); /* hd not a power of two */
    for (int n = 1; n <= SLCU_NROWS_MAX; n++) check_router_rows(n, 128, 8, 2048, DT_BF16, n % 2, n > 4); /* the 30B's */
    check_router_rows(8, 64, 4, 1024, DT_F32, 0, 0);
    check_router_rows(5, 256, 8, 768, DT_F16, 1, 1);
    check_router_rows(3, 60, 6, 4096, DT_BF16, 0, 1); /* E not a multiple of the CTA's 4 warps */
    check_router_rows(8, 512, 8, 2048, DT_BF16, 0, 0); /* warp2 cannot take E 512: the shared-memory route */
    printf("%s  decode batch rows (SLUICE_CUDA_NROWS=1): add + rmsnorm + int8 form, q/k norm + RoPE, router + route of n = 1 .. 8 "
           "rows in one launch == the separate kernels == each row alone, bitwise\n", failures == before ? "ok  " : "FAIL");
}

/* --serve-rows: us a launch set (back to back, mean over reps, 8 copies of the buffers taken in turn), old (the separate
 * kernels the batch step launches today) | new (one launch) */
typedef struct {
    int way, n, it;
    float *x, *y, *h, *w, *q, *k, *wq, *wk;
    slcu_act a[8];
    int pos[SLCU_NROWS_MAX];
    float fq[64];
    slcu_mat wr; /* the router: bf16 128 x 2048 */
    float *lg, *tw;
    int *te, *done;
} rows_run;
enum { RR_H = 2048, RR_NH = 32, RR_NKV = 4, RR_HD = 128 };
static void run_an(void *p) {
    rows_run *r = p;
    char msg[256];
    const int s = r->it++ % 8;
    const size_t o = (size_t)s * 8 * RR_H, nf = (size_t)r->n * RR_H;
    if (r->way) {
        const slcu_addnorm an = {.x = r->x + o, .y = r->y + o, .h = r->h + o, .w = r->w, .w_off = 0.0f, .eps = 1e-6f, .dim = RR_H};
        slcu_add_norm_rows(&an, r->n, &r->a[s], msg, sizeof msg);
        return;
    }
    slcb_add(r->x + o, r->y + o, nf, msg, sizeof msg);
    slcu_rmsnorm(r->x + o, r->h + o, r->n, RR_H, 1, 0, RR_H, r->w, 0.0f, 1e-6f, msg, sizeof msg);
    slcu_act_quantize(&r->a[s], r->h + o, RR_H, msg, sizeof msg);
}
static void run_nr(void *p) {
    rows_run *r = p;
    char msg[256];
    const int s = r->it++ % 8;
    const size_t ldq = (size_t)RR_NH * RR_HD, ldk = (size_t)RR_NKV * RR_HD;
    float *q = r->q + (size_t)s * 8 * ldq, *k = r->k + (size_t)s * 8 * ldk;
    if (r->way) {
        const slcu_normrope nr[2] = {{q, q, RR_NH, RR_HD, RR_HD, r->wq, 0.0f, 1e-6f}, {k, k, RR_NKV, RR_HD, RR_HD, r->wk, 0.0f, 1e-6f}};
        const size_t ld[2] = {ldq, ldk};
        slcu_norm_rope_rows(nr, ld, 2, r->n, RR_HD, r->fq, 1.0f, r->pos, msg, sizeof msg);
        return;
    }
    slcu_rmsnorm(q, q, r->n, ldq, RR_NH, RR_HD, RR_HD, r->wq, 0.0f, 1e-6f, msg, sizeof msg);
    slcu_rmsnorm(k, k, r->n, ldk, RR_NKV, RR_HD, RR_HD, r->wk, 0.0f, 1e-6f, msg, sizeof msg);
    slcu_rope_at(q, r->n, ldq, RR_NH, RR_HD, RR_HD, r->fq, 1.0f, r->pos, 0, msg, sizeof msg);
    slcu_rope_at(k, r->n, ldk, RR_NKV, RR_HD, RR_HD, r->fq, 1.0f, r->pos, 0, msg, sizeof msg);
}

static void run_rt(void *p) {
    rows_run *r = p;
    char msg[256];
    const int s = r->it++ % 8;
    const float *x = r->x + (size_t)s * 8 * RR_H;
    const slcu_router rr = {0, 128, 8, 1, 1, 1, 1.0f, NULL, slcu_route_mode == 2};
    if (r->way) {
        slcu_router_rows(&r->wr, x, r->lg, &rr, r->n, r->te, r->tw, r->done, msg, sizeof msg);
        return;
    }
    slcu_matmul(&r->wr, x, r->lg, r->n, msg, sizeof msg);
    slcu_route(&rr, r->lg, r->n, r->te, r->tw, msg, sizeof msg);
}

static void bench_rows(void) {
    char msg[256] = "";
    rows_run r;
    memset(&r, 0, sizeof r);
    const size_t nx = (size_t)8 * 8 * RR_H;
    r.x = rnd_dev(nx, 1, NULL, msg), r.y = rnd_dev(nx, 1e-3f, NULL, msg), r.h = slcu_alloc(nx * 4, msg, sizeof msg);
    r.w = rnd_dev(RR_H, 1, NULL, msg);
    r.q = rnd_dev((size_t)64 * RR_NH * RR_HD, 1, NULL, msg), r.k = rnd_dev((size_t)64 * RR_NKV * RR_HD, 1, NULL, msg);
    r.wq = rnd_dev(RR_HD, 1, NULL, msg), r.wk = rnd_dev(RR_HD, 1, NULL, msg);
    void *ab = slcu_alloc(8 * slcu_act_bytes(8, RR_H), msg, sizeof msg);
    mat wr;
    if (make_mat(&wr, DT_BF16, 128, RR_H, 0, DT_F32, msg)) { CK(0, "%s", msg); return; }
    int zeros[SLCU_NROWS_MAX] = {0};
    r.wr = wr.d, r.done = dev_copy(zeros, sizeof zeros, msg);
    r.lg = slcu_alloc((size_t)8 * 128 * 4, msg, sizeof msg), r.te = slcu_alloc(64 * 4, msg, sizeof msg);
    r.tw = slcu_alloc(64 * 4, msg, sizeof msg);
    for (int i = 0; i < RR_HD / 2; i++) r.fq[i] = powf(1e6f, -2.0f * i / RR_HD);
    for (int t = 0; t < SLCU_NROWS_MAX; t++) r.pos[t] = 300 + 11 * t;
    printf("--serve-rows: us a launch set, back to back (mean of 200), a decode batch of n rows on the 30B-A3B's shapes: "
           "old (the separate kernels) | new (SLUICE_CUDA_NROWS=1, one launch); then alone (median of 200, events around each)\n");
    static const char *kinds[3] = {"add + rmsnorm + int8 form (2048)", "q/k norm + RoPE (32 + 4 heads of 128)",
                                   "router bf16 128 x 2048 + route (k 8)"};
    void (*runs[3])(void *) = {run_an, run_nr, run_rt};
    for (int kind = 0; kind < 3; kind++) {
        printf("  %-37s", kinds[kind]);
        for (int n = 1; n <= 8; n *= 2) {
            for (int s = 0; s < 8; s++)
                slcu_act_bind(&r.a[s], (char *)ab + (size_t)s * slcu_act_bytes(8, RR_H), n, RR_H, msg, sizeof msg);
            r.n = n;
            float us[4];
            for (int way = 0; way < 2; way++) {
                r.way = way, r.it = 0;
                us[way] = 1e3f * slcu_time(runs[kind], &r, 200);
                r.it = 0;
                us[2 + way] = 1e3f * slcu_time_median(runs[kind], &r, 200);
            }
            printf("  n %d %5.1f | %5.1f (alone %5.1f | %5.1f)", n, us[0], us[1], us[2], us[3]);
        }
        printf("\n");
    }
    printf("  launches a layer at 8 rows (the 30B's step, from the code): add + norm + int8 3 -> 1 twice (the FFN's int8 form "
           "read by the experts), q/k norms + RoPE 4 -> 1, router + route 2 -> 1: 20 -> 12\n");
    CK(!slcu_sync(msg, sizeof msg), "--serve-rows: %s", msg);
    slcu_free(r.x), slcu_free(r.y), slcu_free(r.h), slcu_free(r.w), slcu_free(r.q), slcu_free(r.k), slcu_free(r.wq);
    slcu_free(r.wk), slcu_free(ab), slcu_free(r.done), slcu_free(r.lg), slcu_free(r.te), slcu_free(r.tw);
    free_mat(&wr);
}
