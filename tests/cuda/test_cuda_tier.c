/*
 * test_cuda_tier.c — issue 25: a layer-major MoE block's experts run in batches through cuda_i8.cu slcu_moe_ffn_gemm
 * (backend_cuda_tier.c, the device tier's prefill): every batch a run of the experts, the others' pairs set to -1 and
 * their table entries NULL (a kernel that read one faults), all into one cell buffer poisoned once; then every cell
 * == slcu_moe_ffn's over the whole layer, and slcu_combine of the cells == the whole layer's, bitwise, for each GEMM
 * kernel. Included by test_cuda.c; `test_cuda --tier` runs it alone.
 */

/* The experts 0 .. E-1 cut into runs of 1 .. max_run (random), each run one batch. */
static void check_moe_batches(int n, int k, int E, int H, int I, dt_type gdt, int gg, dt_type gsdt, dt_type ddt, int dg,
                              dt_type dsdt, int max_run) {
    char msg[256] = "";
    mat gu, dn;
    if (make_mat(&gu, gdt, 2 * E * I, H, gg, gsdt, msg) || make_mat(&dn, ddt, E * H, I, dg, dsdt, msg)) { CK(0, "%s", msg); return; }
    const size_t nk = (size_t)n * k, cells = nk * (size_t)H;
    float *h = malloc((size_t)n * H * 4), *w = malloc(nk * 4);
    int *te = malloc(nk * sizeof(int)), *tb = malloc(nk * sizeof(int));
    for (size_t i = 0; i < (size_t)n * H; i++) h[i] = nrand() * (i / H % 7 == 3 ? 20.f : 1.f);
    for (int t = 0; t < n; t++) { /* k distinct experts, ascending (route's order); the last expert never chosen */
        int s = 0;
        for (int e = 0; e < E - 1 && s < k; e++)
            if (urand() < (double)(k - s) / (E - 1 - e)) te[t * k + s++] = e;
        for (int j = 0; j < k; j++) w[t * k + j] = (float)urand();
    }
    const void **tab = moe_tab(&gu, &dn, E, I, H), **tabb = malloc((size_t)9 * E * sizeof(void *));
    float *dh = dev_copy(h, (size_t)n * H * 4, msg), *dw = dev_copy(w, nk * 4, msg);
    float *dy = slcu_alloc(cells * 4, msg, sizeof msg), *dout = slcu_alloc((size_t)n * H * 4, msg, sizeof msg);
    int *dte = dev_copy(te, nk * sizeof(int), msg), *dtb = slcu_alloc(nk * sizeof(int), msg, sizeof msg);
    void *dtab = dev_copy(tab, (size_t)9 * E * sizeof(void *), msg), *dtabb = slcu_alloc((size_t)9 * E * sizeof(void *), msg, sizeof msg);
    void *work = slcu_alloc(slcu_moe_bytes(n, k, E, H, I), msg, sizeof msg);
    slcu_moe m = {n, k, E, H, I, dh, dte, (const void *const *)dtab, sub_mat(&gu, 0, I), sub_mat(&gu, I, I), sub_mat(&dn, 0, H), work, dy, 0};
    int runs = 0;
    for (int v = 0; v < 3; v++) { /* the default GEMM, then two others */
        const int ver = v == 0 ? 0 : v == 1 ? 3 : 5;
        slcu_i8_gemm(ver);
        poison(dy, cells * 4);
        m.top_e = dte, m.tab = (const void *const *)dtab;
        CK(!slcu_moe_ffn(&m, msg, sizeof msg), "%s", msg);
        CK(!slcu_combine(dy, dw, k, NULL, NULL, dout, n, H, msg, sizeof msg), "%s", msg);
        float *ref = dl(dy, cells), *oref = dl(dout, (size_t)n * H);
        poison(dy, cells * 4), poison(dout, (size_t)n * H * 4);
        runs = 0;
        for (int lo = 0; lo < E; runs++) {
            const int run = (int)(urand() * max_run), hi = lo + run < E ? lo + run : E - 1; /* a run of 1 .. max_run */
            memset(tabb, 0, (size_t)9 * E * sizeof(void *));
            for (int e = lo; e <= hi; e++)
                for (int z = 0; z < 9; z++) tabb[(size_t)(z / 3 * E + e) * 3 + z % 3] = tab[(size_t)(z / 3 * E + e) * 3 + z % 3];
            for (size_t p = 0; p < nk; p++) tb[p] = te[p] >= lo && te[p] <= hi ? te[p] : -1;
            slcu_upload(dtb, tb, nk * sizeof(int), msg, sizeof msg);
            slcu_upload(dtabb, tabb, (size_t)9 * E * sizeof(void *), msg, sizeof msg);
            m.top_e = dtb, m.tab = (const void *const *)dtabb;
            CK(!slcu_moe_ffn_gemm(&m, msg, sizeof msg) && !slcu_sync(msg, sizeof msg), "batch %d..%d: %s", lo, hi, msg);
            lo = hi + 1;
        }
        CK(!slcu_combine(dy, dw, k, NULL, NULL, dout, n, H, msg, sizeof msg), "%s", msg);
        float *y = dl(dy, cells), *o = dl(dout, (size_t)n * H);
        CK(!memcmp(y, ref, cells * 4), "MoE in %d batches (%s %s, n %d k %d E %d, GEMM %d): a cell differs from the whole layer's",
           runs, dt_name(gdt), dt_name(ddt), n, k, E, ver);
        CK(!memcmp(o, oref, (size_t)n * H * 4), "MoE in %d batches (GEMM %d): the combine differs from the whole layer's", runs, ver);
        free(ref), free(oref), free(y), free(o);
    }
    slcu_i8_gemm(0);
    printf("ok   MoE experts in batches (the device tier's prefill): %s g%d / %s g%d, %d tokens x %d of %d experts, %d batches of "
           "up to %d: cells and combine bitwise the whole layer's\n", dt_name(gdt), gg, dt_name(ddt), dg, n, k, E, runs, max_run);
    free(h), free(w), free(te), free(tb), free(tab), free(tabb);
    slcu_free(dh), slcu_free(dw), slcu_free(dy), slcu_free(dout), slcu_free(dte), slcu_free(dtb), slcu_free(dtab),
        slcu_free(dtabb), slcu_free(work);
    free_mat(&gu), free_mat(&dn);
}

static void check_moe_batches_all(void) {
    check_moe_batches(100, 3, 9, 512, 160, DT_Q4, 64, DT_BF16, DT_Q8, 32, DT_F16, 3);
    check_moe_batches(300, 8, 40, 256, 96, DT_Q8, 128, DT_F32, DT_Q4, 32, DT_BF16, 12);
    check_moe_batches(512, 8, 32, 2048, 768, DT_Q4, 64, DT_BF16, DT_Q4, 64, DT_BF16, 10); /* the 30B shape's matrices */
    check_moe_batches(20, 8, 128, 256, 64, DT_Q4, 32, DT_F16, DT_Q8, 64, DT_F16, 1); /* one expert a batch, E 128 */
}
