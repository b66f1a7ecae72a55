/*
 * test_cuda_serve.c — a decode batch's routed experts grouped by expert (cuda_mvn.cu slcu_moeg_ffn / slcu_moeg_layer,
 * SLUICE_CUDA_MOEG=1) in test_cuda (included by test_cuda.c after test_cuda_moedec.c, whose rand_top_e it uses, and
 * whose helpers it uses): every (token, slot) row bitwise slcu_moe_ffn's grouped GEMM (cuda_i8.cu gemm_seg, through
 * cuda.h slcu_moe_mv(0)), each token alone bitwise its row in the batch, a pair of an expert outside [0, E) left
 * unwritten, implied biases computed (their device words NaN), and the layer (route, experts, combine) bitwise
 * slcu_moe_layer's. And a decode batch's 2-8 token dense matmuls each row read once for all tokens (slcu_mvg_matmul,
 * SLUICE_CUDA_MVG=1) bitwise slcu_matmul_i8. `test_cuda --serve8` runs these checks, then times each way on the
 * 30B-A3B's shapes.
 */

static void check_mvg_all(void); /* (below: check_moeg_all runs it first) */

/* te [n][k] of routing mode mode: 0 uniform (rand_top_e), 1 k distinct experts of a pool of 16 starting at e0, 2 the same
 * k experts e0 .. e0 + k - 1 for every token (the 16-layer synth's routing after its first layer: docs/CUDA.md) */
static void mode_top_e(int *te, int n, int k, int E, int mode, int e0) {
    if (mode == 0) {
        rand_top_e(te, n, k, E);
        return;
    }
    const int pool = mode == 1 ? 16 : k;
    for (int t = 0; t < n; t++) {
        rand_top_e(te + (size_t)t * k, 1, k, pool);
        for (int s = 0; s < k; s++) te[(size_t)t * k + s] = (e0 + te[(size_t)t * k + s]) % E;
    }
}

static size_t moeg_work(int n, int k, int E, int H, int I) {
    const size_t a = slcu_moe_bytes(n, k, E, H, I), b = slcu_moeg_bytes(n, k, E, H, I);
    return a > b ? a : b;
}

/* implied: bit 0 gate / up, bit 1 down (test_cuda_ibias.c imply_mat); mode: mode_top_e's, or 3 uniform with two pairs'
 * experts -1 (not routed: their rows stay unwritten) */
static void check_moeg(int n, int k, int E, int H, int I, dt_type gdt, int gg, dt_type gsdt, dt_type ddt, int dg,
                       dt_type dsdt, int implied, int mode) {
    char msg[256] = "";
    mat gu, dn;
    if (make_mat(&gu, gdt, 2 * E * I, H, gg, gsdt, msg) || make_mat(&dn, ddt, E * H, I, dg, dsdt, msg)) { CK(0, "%s", msg); return; }
    if (implied & 1) imply_mat(&gu, 0);
    if (implied & 2) imply_mat(&dn, 0);
    const size_t ny = (size_t)n * k * H;
    float *h = malloc((size_t)n * H * 4);
    for (size_t i = 0; i < (size_t)n * H; i++) h[i] = nrand() * (i / H % 3 == 1 ? 20.f : 1.f);
    int *te = malloc((size_t)n * k * sizeof(int));
    mode_top_e(te, n, k, E, mode == 3 ? 0 : mode, 3);
    if (mode == 3) te[0] = -1, te[(size_t)n * k - 1] = -1;
    const void **tab = moe_tab(&gu, &dn, E, I, H);
    float *dh = dev_copy(h, (size_t)n * H * 4, msg), *dy = slcu_alloc(ny * 4, msg, sizeof msg);
    int *dte = dev_copy(te, (size_t)n * k * sizeof(int), msg);
    const size_t wbytes = moeg_work(n, k, E, H, I);
    void *dtab = dev_copy(tab, (size_t)9 * E * sizeof(void *), msg), *work = slcu_alloc(wbytes, msg, sizeof msg);
    slcu_moe m = {n, k, E, H, I, dh, dte, (const void *const *)dtab, sub_mat(&gu, 0, I), sub_mat(&gu, I, I), sub_mat(&dn, 0, H), work, dy, 1};
    /* the reference: the grouped GEMM (gemm_seg), which reads every bias */
    slcu_moe_mv(0);
    poison(dy, ny * 4), poison(work, wbytes);
    CK(!slcu_moe_ffn(&m, msg, sizeof msg), "%s", msg);
    float *ref = dl(dy, ny);
    int finite = 1;
    for (size_t i = 0; i < ny; i++) finite &= isfinite(ref[i]) != 0 || (mode == 3 && te[i / H] < 0);
    CK(finite, "grouped MoE check: the GEMM's reference has a non-finite value (a row not written?)");
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
    /* grouped by expert: SLUICE_CUDA_MOEG=1 (gate / up and the SwiGLU in one launch), then =2 (16 rows a CTA, the SwiGLU
     * apart); y is the last one's */
    float *y = NULL;
    size_t bad = ny;
    for (int v = 1; v <= 2; v++) {
        slcu_moeg_set(v);
        poison(dy, ny * 4), poison(work, wbytes);
        CK(!slcu_moeg_ffn(&m, msg, sizeof msg), "%s", msg);
        free(y);
        y = dl(dy, ny);
        for (size_t i = 0; i < ny && bad == ny; i++) {
            unsigned u;
            memcpy(&u, &y[i], 4);
            if (te[i / H] < 0 ? u != 0xffffffffu : memcmp(&y[i], &ref[i], 4) != 0) bad = i;
        }
        CK(bad == ny, "grouped MoE %d (%s g%d %s / %s g%d %s, n %d k %d E %d, implied %d, routing %d): token %d slot %d row %d %.9g, the GEMM's %.9g%s",
           v, dt_name(gdt), gg, dt_name(gsdt), dt_name(ddt), dg, dt_name(dsdt), n, k, E, implied, mode, (int)(bad / H / k),
           (int)(bad / H % k), (int)(bad % H), bad < ny ? y[bad] : 0.0, bad < ny ? ref[bad] : 0.0,
           bad < ny && te[bad / H] < 0 ? " (a pair not routed: its row was written)" : "");
    }
    /* each token alone (=2, then =1 for the layer): its k rows bitwise the batch's */
    int alone = 1;
    for (int t = 0; t < n; t++) {
        slcu_moe m1 = m;
        m1.n = 1, m1.h = dh + (size_t)t * H, m1.top_e = dte + (size_t)t * k;
        poison(dy, (size_t)k * H * 4);
        CK(!slcu_moeg_ffn(&m1, msg, sizeof msg), "%s", msg);
        float *y1 = dl(dy, (size_t)k * H);
        for (size_t i = 0; i < (size_t)k * H; i++)
            if (te[(size_t)t * k + i / H] >= 0) alone &= !memcmp(&y1[i], &y[(size_t)t * k * H + i], 4);
        free(y1);
    }
    CK(alone, "grouped MoE (n %d k %d E %d, routing %d): a token alone differs from its rows in the batch", n, k, E, mode);
    slcu_moeg_set(1);
    /* the layer: route, experts, combine */
    poison(dout, (size_t)n * H * 4);
    const int lr = slcu_moeg_layer(&ml, &rr, dlg, dtw, dout, &lbuf, &lcap, msg, sizeof msg);
    CK(lr == 1, "grouped MoE layer: %d (%s)", lr, msg);
    float *lout = dl(dout, (size_t)n * H);
    const int lsame = !memcmp(lout, lref, (size_t)n * H * 4);
    CK(lsame, "grouped MoE layer (%s %s, n %d k %d E %d, implied %d): differs from the GEMM's", dt_name(gdt), dt_name(ddt), n,
       k, E, implied);
    { /* with h's int8 form made before (slcu_moeg_layer_a, SLUICE_CUDA_NROWS=1's norm: here slcu_act_quantize, poisoned first) */
        void *hb = slcu_alloc(slcu_act_bytes(n, H), msg, sizeof msg);
        slcu_act ha;
        poison(hb, slcu_act_bytes(n, H)), poison(dout, (size_t)n * H * 4);
        CK(!slcu_act_bind(&ha, hb, n, H, msg, sizeof msg) && !slcu_act_quantize(&ha, dh, (size_t)H, msg, sizeof msg) &&
           slcu_moeg_layer_a(&ml, &ha, 0, &rr, dlg, dtw, dout, &lbuf, &lcap, msg, sizeof msg) == 1, "grouped MoE layer_a: %s", msg);
        float *la = dl(dout, (size_t)n * H);
        CK(!memcmp(la, lref, (size_t)n * H * 4), "grouped MoE layer with h's int8 form given (n %d k %d E %d): differs", n, k, E);
        free(la);
        slcu_free(hb);
    }
    slcu_moe_mv(-1), slcu_moeg_set(-1);
    printf("ok   MoE decode batch grouped by expert (both ways) == grouped GEMM: %s g%d %s / %s g%d %s, %d tokens x %d of %d experts, "
           "implied %d, routing %d: %s, alone %s, layer %s\n", dt_name(gdt), gg, dt_name(gsdt), dt_name(ddt), dg,
           dt_name(dsdt), n, k, E, implied, mode, bad == ny ? "bitwise" : "DIFFERS", alone ? "bitwise" : "DIFFERS",
           lsame ? "bitwise" : "DIFFERS");
    free(h), free(te), free(tab), free(ref), free(y), free(lref), free(lout);
    slcu_free(dh), slcu_free(dy), slcu_free(dte), slcu_free(dtab), slcu_free(work), slcu_free(dlg), slcu_free(dout);
    slcu_free(dtw), slcu_free(dte2), slcu_free(lbuf);
    free_mat(&gu), free_mat(&dn);
}

static void check_rows_all(void); /* test_cuda_rows.c, included at the end */
static void check_moeg_all(void) {
    check_rows_all();
    check_mvg_all();
    check_moeg(2, 4, 16, 512, 192, DT_Q4, 32, DT_F16, DT_Q8, 64, DT_BF16, 0, 0);
    check_moeg(5, 8, 24, 512, 160, DT_Q8, 64, DT_BF16, DT_Q4, 32, DT_F16, 3, 0);
    check_moeg(8, 8, 16, 1024, 384, DT_Q4, 64, DT_BF16, DT_Q4, 128, DT_BF16, 3, 1); /* down's s128 added in its CTA */
    check_moeg(8, 4, 32, 512, 256, DT_Q8, 32, DT_F16, DT_Q8, 32, DT_F32, 1, 2);
    check_moeg(5, 4, 16, 256, 128, DT_Q4, 32, DT_BF16, DT_Q8, 64, DT_F16, 2, 3);
    /* H not a multiple of 64: a part tile; down g32 (I = 96 holds no group of 128: mg_why refuses it, the GEMM takes it) */
    check_moeg(1, 8, 40, 1056, 96, DT_Q4, 32, DT_F32, DT_Q8, 32, DT_F32, 0, 0);
    check_moeg(3, 2, 8, 4096, 64, DT_Q8, 128, DT_BF16, DT_Q4, 64, DT_F16, 3, 2); /* several chunks a row (gate/up) */
    check_moeg(8, 8, 10, 2048, 768, DT_Q4, 32, DT_BF16, DT_Q4, 32, DT_BF16, 3, 0); /* the 30B's matrices, as Q4_0 imports */
    check_moeg(8, 8, 8, 2048, 768, DT_Q4, 32, DT_BF16, DT_Q4, 32, DT_BF16, 3, 2); /* (few experts: the full run's time) */
}

/* SLUICE_CUDA_MVG: nj matrices of rows[j] x cols sharing one activation of n_tok tokens through slcu_mvg_matmul, bitwise
 * slcu_matmul_i8 (cuda_mv.cu mvn_i8), every output; implied: the matrices' biases implied, their device words NaN */
static void check_mvg(dt_type dt, int group, dt_type sdt, int cols, const int *rows, int nj, int implied) {
    char msg[256] = "";
    mat w[3];
    int tot = 0;
    for (int j = 0; j < nj; j++) {
        if (make_mat(&w[j], dt, rows[j], cols, group, sdt, msg)) { CK(0, "%s", msg); return; }
        if (implied) imply_mat(&w[j], 0);
        tot += rows[j];
    }
    float *dx = rnd_dev((size_t)8 * cols, 1, NULL, msg), *dy = slcu_alloc((size_t)8 * tot * 4, msg, sizeof msg);
    void *abuf = slcu_alloc(slcu_act_bytes(8, cols), msg, sizeof msg);
    slcu_act a;
    CK(!slcu_act_bind(&a, abuf, 8, cols, msg, sizeof msg) && !slcu_act_quantize(&a, dx, (size_t)cols, msg, sizeof msg), "%s", msg);
    int ok = 1;
    for (int n = 2; n <= 8; n += n < 4 ? 1 : 4) { /* 2, 3, 4, 8 tokens */
        slcu_mm mm[3];
        for (int j = 0, r = 0; j < nj; r += rows[j], j++)
            mm[j] = (slcu_mm){w[j].d, &a, NULL, n, dy + (size_t)8 * r, (size_t)rows[j], NULL, NULL};
        poison(dy, (size_t)8 * tot * 4);
        CK(!slcu_matmul_i8(mm, nj, msg, sizeof msg), "%s", msg);
        float *ref = dl(dy, (size_t)8 * tot);
        if (implied)
            for (int j = 0; j < nj; j++) poison((void *)w[j].d.biases, bias_bytes(&w[j]));
        poison(dy, (size_t)8 * tot * 4);
        const int r = slcu_mvg_matmul(mm, nj, msg, sizeof msg);
        CK(r == 1, "slcu_mvg_matmul: %d (%s)", r, msg);
        float *y = dl(dy, (size_t)8 * tot);
        int same = 1;
        for (int j = 0, r0 = 0; j < nj; r0 += rows[j], j++)
            same &= !memcmp(y + (size_t)8 * r0, ref + (size_t)8 * r0, (size_t)n * rows[j] * 4);
        CK(same, "%s g%d %s, %d matrices of %d columns, %d tokens: grouped rows (MVG) differ from slcu_matmul_i8", dt_name(dt),
           group, dt_name(sdt), nj, cols, n);
        ok &= same;
        if (implied) /* the words back for the next reference */
            for (int j = 0; j < nj; j++) imply_mat(&w[j], 0);
        free(ref), free(y);
    }
    printf("ok   2-8 token matmuls, rows read once for all tokens (MVG) == slcu_matmul_i8: %s g%d %s, %d matrices x %d "
           "columns (%d rows), implied %d: %s\n", dt_name(dt), group, dt_name(sdt), nj, cols, tot, implied, ok ? "bitwise" : "DIFFERS");
    slcu_free(dx), slcu_free(dy), slcu_free(abuf);
    for (int j = 0; j < nj; j++) free_mat(&w[j]);
}

static void check_mvg_all(void) {
    const int qkv[3] = {512, 128, 128}, one[1] = {300}, tall[1] = {17000}, o[1] = {2048};
    check_mvg(DT_Q4, 32, DT_BF16, 2048, qkv, 3, 1);
    check_mvg(DT_Q8, 64, DT_F16, 1024, qkv, 3, 0);
    check_mvg(DT_Q4, 128, DT_F32, 4096, o, 1, 0); /* several chunks a row */
    check_mvg(DT_Q8, 32, DT_BF16, 160, one, 1, 1); /* 5 blocks: a part chunk */
    check_mvg(DT_Q4, 64, DT_BF16, 256, tall, 1, 1); /* 64 rows a CTA (the LM head's case) */
}

/* --serve8's runs: set it % 4 of the te sets (disjoint experts in modes 1 and 2, so a call's experts are not in the L2
 * from the call before) through way 0 the grouped GEMM, 1 the per-pair matvecs, 2 grouped by expert; layer: the whole
 * layer from logits (ways 0 and 2) */
typedef struct {
    slcu_moe m;
    int *dte, *dte_l;
    float *dlg, *dtw, *dout;
    void *lbuf;
    size_t lcap;
    int way, layer, it, nk, n_e;
} moeg_run;
static void run_moeg(void *p) {
    moeg_run *r = p;
    char msg[256];
    const int s = r->it++ % 4;
    slcu_moe m = r->m;
    if (r->layer) {
        const slcu_router rr = {0, m.E, m.k, 1, 1, 1, 1.0f, NULL, 0};
        m.top_e = r->dte_l;
        if (r->way == 2) slcu_moeg_layer(&m, &rr, r->dlg + (size_t)s * m.n * m.E, r->dtw, r->dout, &r->lbuf, &r->lcap, msg, sizeof msg);
        else slcu_moe_layer(&m, &rr, r->dlg + (size_t)s * m.n * m.E, r->dtw, r->dout, &r->lbuf, &r->lcap, msg, sizeof msg);
        return;
    }
    m.top_e = r->dte + (size_t)s * r->nk;
    if (r->way == 2) slcu_moeg_ffn(&m, msg, sizeof msg);
    else slcu_moe_ffn(&m, msg, sizeof msg);
}

/* --serve8's dense runs: set it % sets of each matrix (rows[j] rows at set s), way 0 slcu_matmul_i8, 1 slcu_mvg_matmul */
typedef struct {
    const mat *w[3];
    const slcu_act *a;
    float *dy;
    int rows[3], nj, n, sets, it, way;
} dense_run;
static void run_dense(void *p) {
    dense_run *r = p;
    char msg[256];
    const int s = r->it++ % r->sets;
    slcu_mm mm[3];
    for (int j = 0, y0 = 0; j < r->nj; y0 += r->rows[j], j++)
        mm[j] = (slcu_mm){sub_mat(r->w[j], s * r->rows[j], r->rows[j]), r->a, NULL, r->n, r->dy + (size_t)8 * y0, (size_t)r->rows[j], NULL, NULL};
    if (r->way) slcu_mvg_matmul(mm, r->nj, msg, sizeof msg);
    else slcu_matmul_i8(mm, r->nj, msg, sizeof msg);
}

/* us a call of the 30B-A3B's dense matmuls of a decode batch (q4 g32 bf16, implied biases): q|k|v (4096, 512 and 512
 * rows x 2048, one call), o (2048 x 4096), the LM head (151936 x 2048) at 2, 4 and 8 tokens: slcu_matmul_i8 (mvn_i8, the
 * default) | rows read once for all tokens (SLUICE_CUDA_MVG=1); eight copies of the small ones taken in turn */
static void bench_mvg(void) {
    char msg[256] = "";
    const int shapes[3][4] = {{3, 4096, 512, 512}, {1, 2048, 0, 0}, {1, 151936, 0, 0}}, cols[3] = {2048, 4096, 2048};
    const char *names[3] = {"q|k|v", "o", "lm head"};
    float *dx = rnd_dev((size_t)8 * 4096, 1, NULL, msg), *dy = slcu_alloc((size_t)8 * 151936 * 4, msg, sizeof msg);
    void *abuf = slcu_alloc(slcu_act_bytes(8, 4096), msg, sizeof msg);
    printf("  dense matmuls of a decode batch, us a call: slcu_matmul_i8 (mvn_i8) | rows read once for all tokens "
           "(SLUICE_CUDA_MVG=1)\n");
    fast_fill = 1;
    for (int sh = 0; sh < 3; sh++) {
        dense_run r;
        memset(&r, 0, sizeof r);
        mat w[3];
        r.nj = shapes[sh][0], r.sets = sh == 2 ? 1 : 8, r.dy = dy;
        int bad = 0;
        for (int j = 0; j < r.nj; j++) {
            r.rows[j] = shapes[sh][1 + j];
            bad |= make_mat(&w[j], DT_Q4, r.rows[j] * r.sets, cols[sh], 32, DT_BF16, msg);
            if (!bad) imply_mat(&w[j], 0);
            r.w[j] = &w[j];
        }
        if (bad) { printf("%s\n", msg); break; }
        printf("  %-10s", names[sh]);
        for (int n = 2; n <= 8; n *= 2) {
            slcu_act a;
            slcu_act_bind(&a, abuf, n, cols[sh], msg, sizeof msg), slcu_act_quantize(&a, dx, (size_t)cols[sh], msg, sizeof msg);
            r.a = &a, r.n = n;
            float us[2];
            for (int way = 0; way < 2; way++) {
                r.way = way, r.it = 0;
                us[way] = 1e3f * slcu_time(run_dense, &r, 40);
            }
            printf("  n %d %7.1f | %7.1f", n, us[0], us[1]);
        }
        printf("\n");
        for (int j = 0; j < r.nj; j++) free_mat(&w[j]);
    }
    fast_fill = 0;
    slcu_free(dx), slcu_free(dy), slcu_free(abuf);
}

/* --serve8: us a call, the 30B-A3B's routed experts (E 128, k 8, gate / up 768 x 2048, down 2048 x 768, q4 g32 bf16
 * scales with implied biases: a Q4_0 GGUF's pack) for 1, 2, 4 and 8 tokens under three routings */
static void bench_serve8(void) {
    char msg[256] = "";
    const int E = 128, k = 8, H = 2048, I = 768;
    mat gu, dn;
    fast_fill = 1;
    if (make_mat(&gu, DT_Q4, 2 * E * I, H, 32, DT_BF16, msg) || make_mat(&dn, DT_Q4, E * H, I, 32, DT_BF16, msg)) {
        printf("%s\n", msg);
        fast_fill = 0;
        return;
    }
    fast_fill = 0;
    imply_mat(&gu, 0), imply_mat(&dn, 0);
    const void **tab = moe_tab(&gu, &dn, E, I, H);
    void *dtab = dev_copy(tab, (size_t)9 * E * sizeof(void *), msg), *work = slcu_alloc(moeg_work(8, k, E, H, I), msg, sizeof msg);
    float *dh = rnd_dev((size_t)8 * H, 1, NULL, msg), *dy = slcu_alloc((size_t)8 * k * H * 4, msg, sizeof msg);
    int *te = malloc((size_t)4 * 8 * k * sizeof(int)), *dte = slcu_alloc((size_t)4 * 8 * k * sizeof(int), msg, sizeof msg);
    moeg_run r;
    memset(&r, 0, sizeof r);
    r.dte = dte;
    r.dte_l = slcu_alloc((size_t)8 * k * sizeof(int), msg, sizeof msg);
    r.dtw = slcu_alloc((size_t)8 * k * 4, msg, sizeof msg), r.dout = slcu_alloc((size_t)8 * H * 4, msg, sizeof msg);
    float *lg = malloc((size_t)4 * 8 * E * 4);
    r.dlg = slcu_alloc((size_t)4 * 8 * E * 4, msg, sizeof msg);
    static const char *modes[3] = {"uniform", "16 experts", "the same 8"};
    printf("--serve8: a decode batch's routed experts, E %d, k %d, %d x %d, q4 g32 bf16, implied biases; us a call of the "
           "FFN (h's int8 form to y): grouped GEMM (default) | per-pair matvecs (SLUICE_CUDA_MOEN=8) | grouped by expert "
           "(SLUICE_CUDA_MOEG=1) | the same at 16 rows a CTA (SLUICE_CUDA_MOEG=2)\n", E, k, I, H);
    for (int mode = 0; mode < 3; mode++) {
        printf("  %-11s", modes[mode]);
        for (int n = 1; n <= 8; n *= 2) {
            r.nk = n * k;
            for (int s = 0; s < 4; s++) mode_top_e(te + (size_t)s * n * k, n, k, E, mode, 32 * s);
            slcu_upload(dte, te, (size_t)4 * n * k * sizeof(int), msg, sizeof msg);
            r.m = (slcu_moe){n, k, E, H, I, dh, dte, (const void *const *)dtab, sub_mat(&gu, 0, I), sub_mat(&gu, I, I),
                             sub_mat(&dn, 0, H), work, dy, 1};
            r.m.gate.ibias = r.m.up.ibias = r.m.down.ibias = 1;
            float us[4];
            for (int way = 0; way < 4; way++) {
                slcu_moe_mv(way == 1 ? 8 : 0), slcu_moeg_set(way == 3 ? 2 : 1);
                r.way = way < 3 ? way : 2, r.layer = 0, r.it = 0;
                us[way] = 1e3f * slcu_time(run_moeg, &r, 40);
            }
            printf("  n %d %6.1f | %6.1f | %6.1f | %6.1f", n, us[0], us[1], us[2], us[3]);
        }
        printf("\n");
    }
    /* the layer from router logits: uniform (random logits), and the same 8 experts a set (logits 8 above the rest) */
    printf("  the layer (route, FFN, combine), us a call: grouped GEMM | grouped by expert (MOEG=1) | (MOEG=2)\n");
    for (int mode = 0; mode < 2; mode++) {
        printf("  %-11s", mode ? "the same 8" : "uniform");
        for (int n = 1; n <= 8; n *= 2) {
            for (int s = 0; s < 4; s++)
                for (int t = 0; t < n; t++)
                    for (int e = 0; e < E; e++)
                        lg[((size_t)s * n + t) * E + e] = nrand() + (mode && e >= 32 * s && e < 32 * s + k ? 8.f : 0.f);
            slcu_upload(r.dlg, lg, (size_t)4 * n * E * 4, msg, sizeof msg);
            r.m = (slcu_moe){n, k, E, H, I, dh, NULL, (const void *const *)dtab, sub_mat(&gu, 0, I), sub_mat(&gu, I, I),
                             sub_mat(&dn, 0, H), NULL, NULL, 1};
            r.m.gate.ibias = r.m.up.ibias = r.m.down.ibias = 1;
            float us[3];
            for (int way = 0; way < 3; way++) {
                slcu_moe_mv(0), slcu_moeg_set(way == 2 ? 2 : 1);
                r.way = way ? 2 : 0, r.layer = 1, r.it = 0;
                us[way] = 1e3f * slcu_time(run_moeg, &r, 40);
            }
            printf("  n %d %6.1f | %6.1f | %6.1f", n, us[0], us[1], us[2]);
        }
        printf("\n");
    }
    slcu_moe_mv(-1), slcu_moeg_set(-1);
    bench_mvg();
    CK(!slcu_sync(msg, sizeof msg), "--serve8: %s", msg);
    free(tab), free(te), free(lg);
    slcu_free(dtab), slcu_free(work), slcu_free(dh), slcu_free(dy), slcu_free(dte), slcu_free(r.dte_l), slcu_free(r.dtw);
    slcu_free(r.dout), slcu_free(r.dlg), slcu_free(r.lbuf);
    free_mat(&gu), free_mat(&dn);
}

#include "test_cuda_rows.c" /* SLUICE_CUDA_NROWS=1: a decode batch's rows in one launch: check_rows_all, --serve-rows */
