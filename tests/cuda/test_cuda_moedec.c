/*
 * test_cuda_moedec.c — issue 24's decode batches of a layer-major MoE block in test_cuda (included by test_cuda.c, whose
 * helpers it uses, after test_cuda_prefill.c and test_cuda_ibias.c): slcu_moe_ffn of 2-8 tokens as one-token matvec
 * jobs a (token, slot) pair (cuda_i8.cu moe_ffn_mv, SLUICE_CUDA_MOEN) bitwise its grouped GEMM (gemm_seg, the same call
 * with cuda.h slcu_moe_mv(0)), every (token, slot) row; with the SwiGLU made in the down matvec's CTAs and apart, with
 * each one-token kernel, with implied biases computed (their device words then NaN, so a read would show); and
 * slcu_moe_layer's whole output (route, experts, combine) bitwise either way.
 */

/* te [n][k]: k distinct experts of E a token, in random order (slcu_route sorts them; neither path needs it) */
static void rand_top_e(int *te, int n, int k, int E) {
    int *p = malloc((size_t)E * sizeof(int));
    for (int t = 0; t < n; t++) {
        for (int e = 0; e < E; e++) p[e] = e;
        for (int s = 0; s < k; s++) { /* a partial Fisher-Yates shuffle */
            const int j = s + (int)(urand() * (E - s)), x = p[s];
            p[s] = p[j], p[j] = x;
            te[t * k + s] = p[s];
        }
    }
    free(p);
}

/* 1 when slcu_moe_ffn's last run over the poisoned work buffer grouped the pairs (k_moe_group wrote off[0] = 0: the
 * first int of the buffer, cuda_i8.cu moe_carve), 0 when it left it poisoned (the matvec path groups nothing) */
static int grouped(const void *work) {
    float *w = dl(work, 1);
    unsigned v;
    memcpy(&v, w, 4);
    free(w);
    return v == 0 ? 1 : v == 0xffffffffu ? 0 : -1;
}

/* implied: bit 0 gate / up, bit 1 down have implied biases (test_cuda_ibias.c imply_mat) */
static void check_moe_dec(int n, int k, int E, int H, int I, dt_type gdt, int gg, dt_type gsdt, dt_type ddt, int dg,
                          dt_type dsdt, int implied) {
    char msg[256] = "";
    mat gu, dn;
    if (make_mat(&gu, gdt, 2 * E * I, H, gg, gsdt, msg) || make_mat(&dn, ddt, E * H, I, dg, dsdt, msg)) { CK(0, "%s", msg); return; }
    if (implied & 1) imply_mat(&gu, 0);
    if (implied & 2) imply_mat(&dn, 0);
    const size_t ny = (size_t)n * k * H;
    float *h = malloc((size_t)n * H * 4);
    for (size_t i = 0; i < (size_t)n * H; i++) h[i] = nrand() * (i / H % 3 == 1 ? 20.f : 1.f);
    int *te = malloc((size_t)n * k * sizeof(int));
    rand_top_e(te, n, k, E);
    const void **tab = moe_tab(&gu, &dn, E, I, H);
    float *dh = dev_copy(h, (size_t)n * H * 4, msg), *dy = slcu_alloc(ny * 4, msg, sizeof msg);
    int *dte = dev_copy(te, (size_t)n * k * sizeof(int), msg);
    void *dtab = dev_copy(tab, (size_t)9 * E * sizeof(void *), msg), *work = slcu_alloc(slcu_moe_bytes(n, k, E, H, I), msg, sizeof msg);
    slcu_moe m = {n, k, E, H, I, dh, dte, (const void *const *)dtab, sub_mat(&gu, 0, I), sub_mat(&gu, I, I), sub_mat(&dn, 0, H), work, dy, 1};
    /* the reference: the grouped GEMM (gemm_seg), which reads every bias */
    slcu_moe_mv(0);
    poison(dy, ny * 4), poison(work, slcu_moe_bytes(n, k, E, H, I));
    CK(!slcu_moe_ffn(&m, msg, sizeof msg), "%s", msg);
    float *ref = dl(dy, ny);
    CK(grouped(work) == 1, "slcu_moe_mv(0): the %d-token batch did not take the grouped GEMM", n);
    int finite = 1;
    for (size_t i = 0; i < ny; i++) finite &= isfinite(ref[i]) != 0;
    CK(finite, "MoE decode check: the GEMM's reference has a non-finite value (a row not written?)");
    /* the layer (route, experts, combine) by the GEMM, before the biases' words are poisoned */
    const slcu_router rr = {0, E, k, 1, 1, 1, 1.0f, NULL, 0};
    float *dlg = rnd_dev((size_t)n * E, 2, NULL, msg), *dout = slcu_alloc((size_t)n * H * 4, msg, sizeof msg);
    float *dtw = slcu_alloc((size_t)n * k * 4, msg, sizeof msg);
    int *dte2 = slcu_alloc((size_t)n * k * sizeof(int), msg, sizeof msg);
    void *lbuf = NULL;
    size_t lcap = 0;
    slcu_moe ml = m;
    ml.top_e = dte2;
    poison(dout, (size_t)n * H * 4);
    CK(slcu_moe_layer(&ml, &rr, dlg, dtw, dout, &lbuf, &lcap, msg, sizeof msg) == 1, "MoE layer (GEMM): %s", msg);
    float *lref = dl(dout, (size_t)n * H);
    if (implied & 1) poison((void *)gu.d.biases, bias_bytes(&gu)); /* computed from here on: a read makes NaN */
    if (implied & 2) poison((void *)dn.d.biases, bias_bytes(&dn));
    slcu_moe_mv(8), slcu_i8_ibias(1);
    /* the matvec path: the SwiGLU in the down CTAs (mv1c_i8, mv1d_i8) and apart; mv1_i8 takes no SwiGLU input */
    static const struct { int kern, swi; const char *name; } vs[] = {
        {0, 1, "SwiGLU in the down CTAs"}, {0, 0, "SwiGLU apart"}, {4, 1, "mv1d_i8"}, {1, 1, "mv1_i8 (SwiGLU apart)"}};
    int ok = 1;
    for (unsigned v = 0; v < sizeof vs / sizeof *vs; v++) {
        slcu_i8_mv1_kernel(vs[v].kern);
        m.swi = vs[v].swi;
        poison(dy, ny * 4), poison(work, slcu_moe_bytes(n, k, E, H, I));
        CK(!slcu_moe_ffn(&m, msg, sizeof msg), "%s", msg);
        float *y = dl(dy, ny);
        CK(grouped(work) == 0, "slcu_moe_mv(8): the %d-token batch took the grouped GEMM", n);
        size_t bad = ny;
        for (size_t i = 0; i < ny && bad == ny; i++)
            if (memcmp(&y[i], &ref[i], 4)) bad = i;
        CK(bad == ny, "MoE decode batch (%s %s, n %d k %d E %d, implied %d, %s): token %d slot %d row %d %.9g, the GEMM's %.9g",
           dt_name(gdt), dt_name(ddt), n, k, E, implied, vs[v].name, (int)(bad / H / k), (int)(bad / H % k), (int)(bad % H),
           bad < ny ? y[bad] : 0.0, bad < ny ? ref[bad] : 0.0);
        ok &= bad == ny;
        free(y);
    }
    slcu_i8_mv1_kernel(0);
    ml.swi = 1;
    poison(dout, (size_t)n * H * 4);
    CK(slcu_moe_layer(&ml, &rr, dlg, dtw, dout, &lbuf, &lcap, msg, sizeof msg) == 1, "MoE layer (matvecs): %s", msg);
    float *lout = dl(dout, (size_t)n * H);
    const int lsame = !memcmp(lout, lref, (size_t)n * H * 4);
    CK(lsame, "MoE layer of a decode batch (%s %s, n %d k %d E %d, implied %d): matvecs differ from the GEMM", dt_name(gdt),
       dt_name(ddt), n, k, E, implied);
    slcu_moe_mv(-1), slcu_i8_ibias(-1);
    printf("ok   MoE decode batch as matvecs == grouped GEMM: %s g%d %s / %s g%d %s, %d tokens x %d of %d experts, implied "
           "biases %d: %s, layer %s\n", dt_name(gdt), gg, dt_name(gsdt), dt_name(ddt), dg, dt_name(dsdt), n, k, E, implied,
           ok ? "bitwise" : "DIFFERS", lsame ? "bitwise" : "DIFFERS");
    free(h), free(te), free(tab), free(ref), free(lref), free(lout);
    slcu_free(dh), slcu_free(dy), slcu_free(dte), slcu_free(dtab), slcu_free(work), slcu_free(dlg), slcu_free(dout);
    slcu_free(dtw), slcu_free(dte2), slcu_free(lbuf);
    free_mat(&gu), free_mat(&dn);
}

static void check_moe_dec_all(void) {
    check_moe_dec(2, 4, 16, 512, 192, DT_Q4, 32, DT_F16, DT_Q8, 64, DT_BF16, 0);
    check_moe_dec(5, 8, 24, 512, 160, DT_Q8, 64, DT_BF16, DT_Q4, 32, DT_F16, 3);
    check_moe_dec(8, 8, 16, 1024, 384, DT_Q4, 64, DT_BF16, DT_Q4, 64, DT_BF16, 3); /* 64 pairs: two calls of MAXJ */
    check_moe_dec(8, 4, 32, 512, 256, DT_Q8, 32, DT_F16, DT_Q8, 32, DT_F16, 1);
    check_moe_dec(5, 4, 16, 256, 128, DT_Q4, 32, DT_BF16, DT_Q8, 64, DT_F16, 2);
    check_moe_dec(8, 8, 16, 2048, 768, DT_Q4, 32, DT_F16, DT_Q4, 32, DT_F16, 3); /* the 30B's matrices, as Q4_0 imports */
}
