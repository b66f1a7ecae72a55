/* ---- SLUICE_CUDA_FUSE's launches (issue 24: a decode layer's kernel boundaries) against the separate kernels they
 * replace, bitwise, on the same inputs: each output poisoned first, several shapes, several tokens in turn through
 * the same counters (a counter left non-zero by one launch would make the next one's tail run early or never). ---- */

static int fuse_warp2; /* the fused launch's router with warp2 (test_cuda_small.c): the route in registers */

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
    const slcu_router r = {kind, E, K, norm_topk, 1, 1, 1.0f, NULL, 0};
    int same = 1, launched = 1;
    for (int s = 0; s < STEPS; s++) {
        const float *x = dx + (size_t)s * H;
        poison(l1, (size_t)E * 4), poison(l2, (size_t)E * 4), poison(e1, (size_t)K * 4), poison(e2, (size_t)K * 4);
        poison(w1, (size_t)K * 4), poison(w2, (size_t)K * 4);
        CK(!slcu_matmul(&w.d, x, l1, 1, msg, sizeof msg) && !slcu_route(&r, l1, 1, e1, w1, msg, sizeof msg), "%s", msg);
        slcu_router r2 = r;
        r2.warp2 = fuse_warp2;
        const int rc = slcu_matvec_route(&w.d, x, l2, &r2, e2, w2, done, msg, sizeof msg);
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
    printf("ok   router matvec + route fused %-4s %4d x %-5d k %d kind %d%s%s: bitwise, %d tokens\n", dt_name(dt), E, H, K,
           kind, ties ? " (ties)" : "", fuse_warp2 ? " (route in registers)" : "", STEPS);
    free(z), free(hx);
    slcu_free(dx), slcu_free(l1), slcu_free(l2), slcu_free(e1), slcu_free(e2), slcu_free(w1), slcu_free(w2);
    slcu_free(done);
    free_mat(&w);
}

/* q/k/v's one-token int8 matvecs + q's and k's per-head norm + RoPE (cuda_mv.cu mv1c_nr) against slcu_matmul_i8
 * then slcu_norm_rope: q heads at a stride qs (gated: 2 hd), parts 1 (q alone) or 2, mvr rows a CTA (-1: auto) */
static void check_fuse_qkv(dt_type dt, int group, dt_type sdt, int H, int NH, int NKV, int HD, int gated, int rot,
                           int parts, int mvr) {
    char msg[256] = "";
    const int qs = gated ? 2 * HD : HD, nrow[3] = {NH * qs, NKV * HD, NKV * HD};
    mat w[3];
    for (int i = 0; i < 3; i++)
        if (make_mat(&w[i], dt, nrow[i], H, group, sdt, msg)) { CK(0, "%s", msg); return; }
    for (int i = 0; fuse_ibias && i < 3; i++) imply_mat(&w[i], 1);
    enum { STEPS = 4 };
    float *hx, *dx = rnd_dev((size_t)STEPS * H, 1, &hx, msg), *wn = rnd_dev(2 * (size_t)HD, 1, NULL, msg), *y[2][3];
    void *ab = slcu_alloc(slcu_act_bytes(1, H), msg, sizeof msg);
    for (int f = 0; f < 2; f++)
        for (int i = 0; i < 3; i++) y[f][i] = slcu_alloc((size_t)nrow[i] * 4, msg, sizeof msg);
    int *cnt = slcu_alloc(1024 * 4, msg, sizeof msg);
    poison(cnt, 1024 * 4);
    { /* zero, as the backend's */
        int *z = calloc(1024, 4);
        slcu_upload(cnt, z, 1024 * 4, msg, sizeof msg);
        free(z);
    }
    float fq[512];
    for (int i = 0; i < rot / 2; i++) fq[i] = powf(10000.0f, -2.0f * i / rot);
    slcu_act a;
    slcu_act_bind(&a, ab, 1, H, msg, sizeof msg);
    slcu_i8_mv1_kernel(3), slcu_i8_mv_rows(mvr);
    int same = 1, launched = 1;
    for (int s = 0; s < STEPS; s++) {
        const int pos = 100 + 37 * s;
        CK(!slcu_act_quantize(&a, dx + (size_t)s * H, (size_t)H, msg, sizeof msg), "%s", msg);
        slcu_mm mm[2][3];
        slcu_normrope nr[2][2];
        for (int f = 0; f < 2; f++) {
            for (int i = 0; i < 3; i++) {
                poison(y[f][i], (size_t)nrow[i] * 4);
                mm[f][i] = (slcu_mm){.w = w[i].d, .a = &a, .n_tok = 1, .y = y[f][i], .ldy = (size_t)nrow[i]};
            }
            nr[f][0] = (slcu_normrope){y[f][0], y[f][0], NH, HD, (size_t)qs, wn, 0.0f, 1e-6f};
            nr[f][1] = (slcu_normrope){y[f][1], y[f][1], NKV, HD, (size_t)HD, wn + HD, 0.0f, 1e-6f};
        }
        CK(!slcu_matmul_i8(mm[0], 3, msg, sizeof msg) && !slcu_norm_rope(nr[0], parts, rot, fq, 1.1f, pos, msg, sizeof msg),
           "%s", msg);
        const int rc = slcu_matmul_i8_nr(mm[1], 3, nr[1], parts, rot, fq, 1.1f, pos, cnt, 1024, msg, sizeof msg);
        CK(rc >= 0, "%s", msg);
        launched &= rc == 1;
        for (int i = 0; i < 3; i++) {
            float *a1 = dl(y[0][i], nrow[i]), *a2 = dl(y[1][i], nrow[i]);
            same &= !memcmp(a1, a2, (size_t)nrow[i] * 4);
            free(a1), free(a2);
        }
    }
    int *z = (int *)dl(cnt, 1024), nz = 0;
    for (int i = 0; i < 1024; i++) nz += z[i] != 0;
    slcu_i8_mv1_kernel(0), slcu_i8_mv_rows(0);
    CK(launched, "q/k/v matvec + norm + rope %s %dx%d: not launched fused", dt_name(dt), NH, HD);
    CK(same && !nz, "q/k/v matvec + norm + rope %s g%d %s H %d heads %d/%d x %d%s rot %d parts %d rows %d: differs from "
       "the separate launches (%d counters left non-zero)", dt_name(dt), group, dt_name(sdt), H, NH, NKV, HD,
       gated ? " gated" : "", rot, parts, mvr, nz);
    printf("ok   q/k/v matvec + norm + rope fused %s g%d heads %d/%d x %d%s rot %d parts %d rows %d: bitwise, %d tokens\n",
           dt_name(dt), group, NH, NKV, HD, gated ? " gated" : "", rot, parts, mvr, STEPS);
    free(z), free(hx);
    for (int f = 0; f < 2; f++)
        for (int i = 0; i < 3; i++) slcu_free(y[f][i]);
    for (int i = 0; i < 3; i++) free_mat(&w[i]);
    slcu_free(dx), slcu_free(wn), slcu_free(ab), slcu_free(cnt);
}

/* o's one-token int8 matvec + the residual add + rmsnorm [+ its int8 form] (cuda_mv.cu mv1c_an) against
 * slcu_matmul_i8 then slcu_add_norm_q, the norm's int8 form over the buffer the matvec read (as the backend's nq_buf) */
static void check_fuse_o(dt_type dt, int group, dt_type sdt, int H, int C, int q8out, int mvr) {
    char msg[256] = "";
    mat w;
    if (make_mat(&w, dt, H, C, group, sdt, msg)) { CK(0, "%s", msg); return; }
    if (fuse_ibias) imply_mat(&w, 1);
    enum { STEPS = 4 };
    const size_t ab = slcu_act_bytes(1, C > H ? C : H);
    float *hr, *dx = rnd_dev((size_t)STEPS * C, 1, NULL, msg), *dr[2], *dy[2], *dh[2], *nw = rnd_dev(H, 1, NULL, msg);
    dr[0] = rnd_dev(H, 2, &hr, msg), dr[1] = dev_copy(hr, (size_t)H * 4, msg);
    void *buf[2];
    for (int f = 0; f < 2; f++) {
        dy[f] = slcu_alloc((size_t)H * 4, msg, sizeof msg), dh[f] = slcu_alloc((size_t)H * 4, msg, sizeof msg);
        buf[f] = slcu_alloc(ab, msg, sizeof msg);
    }
    int zero = 0, *cnt = dev_copy(&zero, sizeof zero, msg);
    slcu_i8_mv1_kernel(3), slcu_i8_mv_rows(mvr);
    int same = 1, launched = 1;
    for (int s = 0; s < STEPS; s++) {
        slcu_act ain[2], aout[2];
        for (int f = 0; f < 2; f++) {
            poison(dy[f], (size_t)H * 4), poison(dh[f], (size_t)H * 4), poison(buf[f], ab);
            slcu_act_bind(&ain[f], buf[f], 1, C, msg, sizeof msg);
            if (q8out) slcu_act_bind(&aout[f], buf[f], 1, H, msg, sizeof msg);
            CK(!slcu_act_quantize(&ain[f], dx + (size_t)s * C, (size_t)C, msg, sizeof msg), "%s", msg);
        }
        slcu_mm mm[2];
        slcu_addnorm an[2];
        for (int f = 0; f < 2; f++) {
            mm[f] = (slcu_mm){.w = w.d, .a = &ain[f], .n_tok = 1, .y = dy[f], .ldy = (size_t)H};
            an[f] = (slcu_addnorm){.x = dr[f], .y = dy[f], .h = dh[f], .w = nw, .w_off = 0.0f, .eps = 1e-6f, .dim = H};
        }
        CK(!slcu_matmul_i8(&mm[0], 1, msg, sizeof msg) && !slcu_add_norm_q(&an[0], q8out ? &aout[0] : NULL, msg, sizeof msg),
           "%s", msg);
        const int rc = slcu_matmul_i8_an(&mm[1], 1, &an[1], q8out ? &aout[1] : NULL, cnt, msg, sizeof msg);
        CK(rc >= 0, "%s", msg);
        launched &= rc == 1;
        float *d[2][3];
        for (int f = 0; f < 2; f++) d[f][0] = dl(dy[f], H), d[f][1] = dl(dr[f], H), d[f][2] = dl(dh[f], H);
        for (int i = 0; i < 3; i++) same &= !memcmp(d[0][i], d[1][i], (size_t)H * 4), free(d[0][i]), free(d[1][i]);
        if (q8out) same &= same_act(&aout[0], &aout[1]);
    }
    int *z = (int *)dl(cnt, 1);
    slcu_i8_mv1_kernel(0), slcu_i8_mv_rows(0);
    CK(launched, "o matvec + add + rmsnorm %s %dx%d: not launched fused", dt_name(dt), H, C);
    CK(same && !*z, "o matvec + add + rmsnorm%s %s g%d %s %d x %d rows %d: differs from the separate launches (counter %d)",
       q8out ? " + int8" : "", dt_name(dt), group, dt_name(sdt), H, C, mvr, *z);
    printf("ok   o matvec + add + rmsnorm%s fused %s g%d %d x %d rows %d: bitwise, %d tokens\n", q8out ? " + int8" : "",
           dt_name(dt), group, H, C, mvr, STEPS);
    free(z), free(hr);
    for (int f = 0; f < 2; f++) slcu_free(dr[f]), slcu_free(dy[f]), slcu_free(dh[f]), slcu_free(buf[f]);
    slcu_free(dx), slcu_free(nw), slcu_free(cnt);
    free_mat(&w);
}

/* the experts' down matvecs (a device table, the SwiGLU input made in the kernel) + the combine (k slots, [a gated
 * shared expert]) + the residual add + rmsnorm [+ int8] (cuda_mv.cu mv1c_an with the combine) against slcu_matmul_i8
 * then slcu_add_norm_q */
static void check_fuse_down(dt_type dt, int group, dt_type sdt, int H, int I, int K, int shared, int q8out, int mvr) {
    char msg[256] = "";
    enum { E = 3, STEPS = 3 };
    mat w[E];
    for (int e = 0; e < E; e++)
        if (make_mat(&w[e], dt, H, I, group, sdt, msg)) { CK(0, "%s", msg); return; }
    for (int e = 0; fuse_ibias && e < E; e++) imply_mat(&w[e], 1);
    const void *tab[E * 3]; /* (fuse_ibias: the decode copy of backend_cuda.c layer_tab, bias pointers NULL) */
    for (int e = 0; e < E; e++)
        tab[3 * e] = w[e].d.data, tab[3 * e + 1] = w[e].d.scales, tab[3 * e + 2] = fuse_ibias ? NULL : w[e].d.biases;
    int sel[16];
    for (int s = 0; s < K; s++) sel[s] = (s * 2 + 1) % E;
    void *dtab = dev_copy(tab, sizeof tab, msg), *dsel = dev_copy(sel, (size_t)K * 4, msg);
    float *g = rnd_dev((size_t)STEPS * K * I, 2, NULL, msg), *u = rnd_dev((size_t)STEPS * K * I, 1, NULL, msg);
    float *cw = rnd_dev(K, 1, NULL, msg), *sh = rnd_dev(H, 1, NULL, msg), *sg = rnd_dev(1, 1, NULL, msg);
    float *nw = rnd_dev(H, 1, NULL, msg), *hr, *dr[2], *dy[2], *dh[2], *dc[2];
    dr[0] = rnd_dev(H, 2, &hr, msg), dr[1] = dev_copy(hr, (size_t)H * 4, msg);
    void *buf[2];
    for (int f = 0; f < 2; f++) {
        dy[f] = slcu_alloc((size_t)K * H * 4, msg, sizeof msg), dh[f] = slcu_alloc((size_t)H * 4, msg, sizeof msg);
        dc[f] = slcu_alloc((size_t)H * 4, msg, sizeof msg), buf[f] = slcu_alloc(slcu_act_bytes(1, H), msg, sizeof msg);
    }
    int zero = 0, *cnt = dev_copy(&zero, sizeof zero, msg);
    slcu_i8_mv1_kernel(3), slcu_i8_mv_rows(mvr);
    int same = 1, launched = 1;
    for (int st = 0; st < STEPS; st++) {
        slcu_act mi[16], aout[2];
        slcu_mm mm[2][16];
        slcu_addnorm an[2];
        for (int f = 0; f < 2; f++) {
            poison(dy[f], (size_t)K * H * 4), poison(dh[f], (size_t)H * 4), poison(dc[f], (size_t)H * 4);
            poison(buf[f], slcu_act_bytes(1, H));
            if (q8out) slcu_act_bind(&aout[f], buf[f], 1, H, msg, sizeof msg);
            for (int s = 0; s < K; s++) {
                const size_t o = ((size_t)st * K + s) * I;
                mi[s] = (slcu_act){.n_tok = 1, .cols = I, .sg = g + o, .su = u + o};
                mm[f][s] = (slcu_mm){.w = w[0].d, .a = &mi[s], .n_tok = 1, .y = dy[f] + (size_t)s * H, .ldy = (size_t)H,
                                     .tab = dtab, .sel = (const int *)dsel + s};
                mm[f][s].w.data = mm[f][s].w.scales = mm[f][s].w.biases = NULL;
            }
            an[f] = (slcu_addnorm){.x = dr[f], .cy = dy[f], .cw = cw, .csh = shared ? sh : NULL, .csg = shared ? sg : NULL,
                                   .ck = K, .cout = dc[f], .h = dh[f], .w = nw, .w_off = 1.0f, .eps = 1e-5f, .dim = H};
        }
        CK(!slcu_matmul_i8(mm[0], K, msg, sizeof msg) && !slcu_add_norm_q(&an[0], q8out ? &aout[0] : NULL, msg, sizeof msg),
           "%s", msg);
        const int rc = slcu_matmul_i8_an(mm[1], K, &an[1], q8out ? &aout[1] : NULL, cnt, msg, sizeof msg);
        CK(rc >= 0, "%s", msg);
        launched &= rc == 1;
        float *a1 = dl(dy[0], (size_t)K * H), *a2 = dl(dy[1], (size_t)K * H);
        same &= !memcmp(a1, a2, (size_t)K * H * 4);
        free(a1), free(a2);
        float *d[2][3];
        for (int f = 0; f < 2; f++) d[f][0] = dl(dc[f], H), d[f][1] = dl(dr[f], H), d[f][2] = dl(dh[f], H);
        for (int i = 0; i < 3; i++) same &= !memcmp(d[0][i], d[1][i], (size_t)H * 4), free(d[0][i]), free(d[1][i]);
        if (q8out) same &= same_act(&aout[0], &aout[1]);
    }
    int *z = (int *)dl(cnt, 1);
    slcu_i8_mv1_kernel(0), slcu_i8_mv_rows(0);
    CK(launched, "down matvecs + combine + add + rmsnorm %s %dx%d: not launched fused", dt_name(dt), H, I);
    CK(same && !*z, "down matvecs + combine%s + add + rmsnorm%s %s g%d %s %d x %d k %d rows %d: differs from the separate "
       "launches (counter %d)", shared ? " (shared)" : "", q8out ? " + int8" : "", dt_name(dt), group, dt_name(sdt), H, I, K,
       mvr, *z);
    printf("ok   down matvecs + combine%s + add + rmsnorm%s fused %s g%d %d x %d k %d rows %d: bitwise, %d tokens\n",
           shared ? " (shared)" : "", q8out ? " + int8" : "", dt_name(dt), group, H, I, K, mvr, STEPS);
    free(z), free(hr);
    for (int f = 0; f < 2; f++) slcu_free(dr[f]), slcu_free(dy[f]), slcu_free(dh[f]), slcu_free(dc[f]), slcu_free(buf[f]);
    slcu_free(dtab), slcu_free(dsel), slcu_free(g), slcu_free(u), slcu_free(cw), slcu_free(sh), slcu_free(sg), slcu_free(nw);
    slcu_free(cnt);
    for (int e = 0; e < E; e++) free_mat(&w[e]);
}

static void check_fuse(void) {
    check_fuse_router(DT_BF16, 128, 2048, 8, 0, 1, 0); /* Qwen3-30B-A3B's router */
    check_fuse_router(DT_BF16, 128, 2048, 8, 0, 1, 1);
    check_fuse_router(DT_F32, 64, 4096, 4, 1, 0, 0);   /* top-k then softmax (Mixtral's rule) */
    check_fuse_router(DT_F16, 60, 1024, 4, 0, 0, 1);   /* 60 rows: the last CTA's warps partly past the rows */
    check_fuse_router(DT_BF16, 1024, 512, 16, 0, 1, 0);
    check_fuse_router(DT_F32, 256, 96, 8, 1, 0, 1);
    check_fuse_qkv(DT_Q4, 64, DT_BF16, 2048, 32, 4, 128, 0, 128, 2, -1); /* Qwen3-30B-A3B's attention */
    check_fuse_qkv(DT_Q4, 64, DT_BF16, 2048, 32, 4, 128, 0, 128, 2, 4);
    check_fuse_qkv(DT_Q8, 32, DT_F16, 1024, 16, 2, 64, 1, 48, 2, 32); /* gated q (a head's gate after it), partial rot */
    check_fuse_qkv(DT_Q4, 128, DT_F32, 512, 8, 8, 80, 0, 80, 2, 32);  /* heads of 80 rows across CTAs of 32 */
    check_fuse_qkv(DT_Q4, 32, DT_BF16, 768, 4, 2, 256, 0, 64, 1, 8);  /* q's norm alone */
    check_fuse_qkv(DT_Q8, 64, DT_BF16, 2048, 12, 4, 16, 0, 16, 2, 32); /* two heads a CTA */
    check_fuse_o(DT_Q4, 64, DT_BF16, 2048, 4096, 1, -1); /* Qwen3-30B-A3B's o projection */
    check_fuse_o(DT_Q8, 32, DT_F16, 1024, 2048, 1, 32);
    check_fuse_o(DT_Q4, 128, DT_F32, 96, 256, 1, 4);
    check_fuse_o(DT_Q4, 32, DT_BF16, 2000, 512, 0, 8); /* no int8 form (2000 columns) */
    check_fuse_down(DT_Q4, 64, DT_BF16, 2048, 768, 8, 0, 1, -1); /* Qwen3-30B-A3B's experts */
    check_fuse_down(DT_Q8, 32, DT_F16, 1024, 512, 4, 1, 1, 32);  /* a gated shared expert */
    check_fuse_down(DT_Q4, 128, DT_F32, 96, 256, 2, 1, 0, 4);
    /* SLUICE_CUDA_IBIAS=1: the matrices' biases implied and computed, their words NaN (test_cuda_ibias.c imply_mat) */
    fuse_ibias = 1, slcu_i8_ibias(1);
    check_fuse_qkv(DT_Q4, 32, DT_F16, 2048, 32, 4, 128, 0, 128, 2, -1);
    check_fuse_qkv(DT_Q8, 32, DT_BF16, 1024, 16, 2, 64, 1, 48, 2, 32);
    check_fuse_o(DT_Q4, 32, DT_F16, 2048, 4096, 1, -1);
    check_fuse_o(DT_Q8, 64, DT_F32, 1024, 2048, 1, 8);
    check_fuse_down(DT_Q4, 32, DT_F16, 2048, 768, 8, 0, 1, -1);
    check_fuse_down(DT_Q8, 32, DT_BF16, 1024, 512, 4, 1, 1, 32);
    fuse_ibias = 0, slcu_i8_ibias(-1);
}
