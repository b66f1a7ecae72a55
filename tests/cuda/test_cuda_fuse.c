/* ---- SLUICE_CUDA_FUSE's launches (issue 24: a decode layer's kernel boundaries) against the separate kernels they
 * replace, bitwise, on the same inputs: each output poisoned first, several shapes, several tokens in turn through
 * the same counters (a counter left non-zero by one launch would make the next one's tail run early or never). ---- */

/* the router's matvec + route (cuda_mat.cu k_matvec_route) against slcu_matmul then slcu_route */
static void check_fuse_router(dt_type dt, int E, int H, int K, int kind, int norm_topk, int ties) {
    char msg[256] = "";
    mat w;
    if (make_mat(&w, dt, E, H, 0, DT_F32, msg)) { CK(0, "%s", msg); return; }
    enum { STEPS = 5 };
    float *hx, *dx = rnd_dev((size_t)STEPS * H, 1, &hx, msg);
    if (ties) { /* every third row a copy of the one before: equal logits (the same sums), the lower index wins */
        char *rows = (char *)w.m.data;
        const size_t rb = (size_t)H * dt_size(dt);
        for (int r = 1; r < E; r += 3) memcpy(rows + (size_t)r * rb, rows + (size_t)(r - 1) * rb, rb);
        slcu_upload(w.dev, w.host, w.bytes, msg, sizeof msg);
    }
    float *l1 = slcu_alloc((size_t)E * 4, msg, sizeof msg), *l2 = slcu_alloc((size_t)E * 4, msg, sizeof msg);
    int *e1 = slcu_alloc((size_t)K * 4, msg, sizeof msg), *e2 = slcu_alloc((size_t)K * 4, msg, sizeof msg);
    float *w1 = slcu_alloc((size_t)K * 4, msg, sizeof msg), *w2 = slcu_alloc((size_t)K * 4, msg, sizeof msg);
    int zero = 0, *done = dev_copy(&zero, sizeof zero, msg);
    const slcu_router r = {kind, E, K, norm_topk, 1, 1, 1.0f, NULL};
    int same = 1, launched = 1;
    for (int s = 0; s < STEPS; s++) {
        const float *x = dx + (size_t)s * H;
        poison(l1, (size_t)E * 4), poison(l2, (size_t)E * 4), poison(e1, (size_t)K * 4), poison(e2, (size_t)K * 4);
        poison(w1, (size_t)K * 4), poison(w2, (size_t)K * 4);
        CK(!slcu_matmul(&w.d, x, l1, 1, msg, sizeof msg) && !slcu_route(&r, l1, 1, e1, w1, msg, sizeof msg), "%s", msg);
        const int rc = slcu_matvec_route(&w.d, x, l2, &r, e2, w2, done, msg, sizeof msg);
        CK(rc >= 0, "%s", msg);
        launched &= rc == 1;
        float *a = dl(l1, E), *b = dl(l2, E), *c = dl(w1, K), *d = dl(w2, K);
        int *f = (int *)dl(e1, K), *g = (int *)dl(e2, K);
        same &= !memcmp(a, b, (size_t)E * 4) && !memcmp(c, d, (size_t)K * 4) && !memcmp(f, g, (size_t)K * 4);
        free(a), free(b), free(c), free(d), free(f), free(g);
    }
    int *z = (int *)dl(done, 1);
    CK(launched, "router matvec + route %s %dx%d: not launched fused", dt_name(dt), E, H);
    CK(same && !*z, "router matvec + route %s %dx%d k %d kind %d%s: differs from the two launches (counter %d)",
       dt_name(dt), E, H, K, kind, ties ? " (ties)" : "", *z);
    printf("ok   router matvec + route fused %-4s %4d x %-5d k %d kind %d%s: bitwise, %d tokens\n", dt_name(dt), E, H, K,
           kind, ties ? " (ties)" : "", STEPS);
    free(z), free(hx);
    slcu_free(dx), slcu_free(l1), slcu_free(l2), slcu_free(e1), slcu_free(e2), slcu_free(w1), slcu_free(w2);
    slcu_free(done);
    free_mat(&w);
}

static void check_fuse(void) {
    check_fuse_router(DT_BF16, 128, 2048, 8, 0, 1, 0); /* Qwen3-30B-A3B's router */
    check_fuse_router(DT_BF16, 128, 2048, 8, 0, 1, 1);
    check_fuse_router(DT_F32, 64, 4096, 4, 1, 0, 0);   /* top-k then softmax (Mixtral's rule) */
    check_fuse_router(DT_F16, 60, 1024, 4, 0, 0, 1);   /* 60 rows: the last CTA's warps partly past the rows */
    check_fuse_router(DT_BF16, 1024, 512, 16, 0, 1, 0);
    check_fuse_router(DT_F32, 256, 96, 8, 1, 0, 1);
}
