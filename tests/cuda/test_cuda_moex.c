/*
 * test_cuda_moex.c — gpt-oss's experts grouped on the device (cuda_moex.cu slcu_moex_ffn / slcu_moex_layer; included
 * by test_cuda.c, whose helpers it uses; `test_cuda --moex` runs it alone). Random q8/q4 gate_up [2I][H] and down
 * [H][I] per expert with random biases (large enough that the clamp at the limit bites), tokens routed to k of E
 * experts, some rows 30x larger. Checks, for every GEMM kernel:
 *   - every (token, slot) cell bitwise the token ALONE through the per-expert path backend_cuda.c cu_ffn runs for
 *     gpt-oss (h's row quantised alone, slcu_matmul_i8 of gate_up for one token, slcu_swiglu_clamped with the
 *     expert's gate_up_bias, the mid row quantised, slcu_matmul_i8 of down, slcb_add_bias of down_bias): batch == alone;
 *   - and bitwise the per-expert loop of a prefill (routed_wide's expert_wide: an expert's rows in pieces of up to 8);
 *   - the layer in batches of experts (the device tier: the others' pairs -1, their table entries NULL) == the layer;
 *   - slcu_moex_layer (routed on the device, combined) == slcu_combine of the alone cells on slcu_route's choice;
 *   - the cells against a host reference in double (f32 activations: within the int8 activations' error).
 */

typedef struct {
    int n, k, E, H, I;
    float limit;
    mat gu, dn;
    float *h, *gub, *db;      /* host [n][H], [E][2I], [E][H] */
    float *dh, *dgub, *ddb;   /* device copies */
    int *te;                  /* host [n][k] ascending, distinct */
} oss_case;

/* expert e through the per-expert path (backend_cuda.c cu_ffn) over h's rows hrows[0 .. cnt), output i into cell[i] of
 * out_cells [n k][H] */
static void oss_expert_rows(const oss_case *c, int e, const int *hrows, int cnt, float *out_cells, const int *cell) {
    char msg[256] = "";
    const int H = c->H, I = c->I;
    float *x = slcu_alloc((size_t)cnt * H * 4, msg, sizeof msg), *g = slcu_alloc((size_t)cnt * 2 * I * 4, msg, sizeof msg);
    float *a = slcu_alloc((size_t)cnt * I * 4, msg, sizeof msg), *y = slcu_alloc((size_t)cnt * H * 4, msg, sizeof msg);
    void *xb = slcu_alloc(slcu_act_bytes(cnt, H), msg, sizeof msg), *mb = slcu_alloc(slcu_act_bytes(cnt, I), msg, sizeof msg);
    /* the rows gathered (cu_copy_rows), their own int8 form (act_ready) */
    for (int i = 0; i < cnt; i++) slcu_upload(x + (size_t)i * H, c->h + (size_t)hrows[i] * H, (size_t)H * 4, msg, sizeof msg);
    slcu_act xa, ma;
    CK(!slcu_act_bind(&xa, xb, cnt, H, msg, sizeof msg) && !slcu_act_quantize(&xa, x, (size_t)H, msg, sizeof msg), "%s", msg);
    const slcu_mm gj = {sub_mat(&c->gu, e * 2 * I, 2 * I), &xa, NULL, cnt, g, (size_t)2 * I, NULL, NULL};
    const int gmx = c->gu.d.dtype == DT_MXFP4, dmx = c->dn.d.dtype == DT_MXFP4; /* f32 rows (mm_run's MXFP4 branch) */
    CK(!(gmx ? slcu_matmul_mxfp4(&gj.w, x, (size_t)H, g, (size_t)2 * I, cnt, msg, sizeof msg) : slcu_matmul_i8(&gj, 1, msg, sizeof msg)) &&
       !slcu_swiglu_clamped(g, c->dgub + (size_t)e * 2 * I, c->limit, a, cnt, I, msg, sizeof msg) &&
       !slcu_act_bind(&ma, mb, cnt, I, msg, sizeof msg) && !slcu_act_quantize(&ma, a, (size_t)I, msg, sizeof msg), "%s", msg);
    const slcu_mm dj = {sub_mat(&c->dn, e * H, H), &ma, NULL, cnt, y, (size_t)H, NULL, NULL};
    CK(!(dmx ? slcu_matmul_mxfp4(&dj.w, a, (size_t)I, y, (size_t)H, cnt, msg, sizeof msg) : slcu_matmul_i8(&dj, 1, msg, sizeof msg)) &&
       !slcb_add_bias(y, (size_t)H, c->ddb + (size_t)e * H, cnt, H, msg, sizeof msg),
       "%s", msg);
    float *hy = dl(y, (size_t)cnt * H);
    for (int i = 0; i < cnt; i++) memcpy(out_cells + (size_t)cell[i] * H, hy + (size_t)i * H, (size_t)H * 4);
    free(hy);
    slcu_free(x), slcu_free(g), slcu_free(a), slcu_free(y), slcu_free(xb), slcu_free(mb);
}

/* the cells through the per-expert path: each pair alone (piece 1), or each expert's rows in pieces of up to piece */
static float *oss_ref_cells(const oss_case *c, int piece) {
    const int nk = c->n * c->k;
    float *ref = malloc((size_t)nk * c->H * 4);
    int tok[8], cell[8];
    for (int e = 0; e < c->E; e++) {
        int m = 0;
        for (int p = 0; p <= nk; p++) {
            if (p < nk && c->te[p] == e) tok[m] = p / c->k, cell[m++] = p;
            if (m && (m == piece || p == nk)) oss_expert_rows(c, e, tok, m, ref, cell), m = 0;
        }
    }
    return ref;
}

/* max over cells of max |y - ref| / max |ref| within the cell, ref in double from the dequantised matrices and f32 rows
 * of h. The GPU's int8 activations (h's rows, then the mid rows) leave up to ~2.5e-2 of a cell's largest value (a
 * pure-Python model of the two quantisations on these shapes: the clamp's slope (up + 1) ~ 8 amplifies gate's error);
 * a dropped or wrong bias or expert is 0.1 - 1. */
static double oss_host_err(const oss_case *c, const float *y) {
    const int H = c->H, I = c->I, nk = c->n * c->k;
    float *row = malloc((size_t)(H > I ? H : I) * 4);
    double *gu = malloc((size_t)2 * I * 8), *act = malloc((size_t)I * 8), *ref = malloc((size_t)H * 8), worst = 0;
    for (int p = 0; p < nk; p++) {
        const int e = c->te[p], t = p / c->k;
        for (int r = 0; r < 2 * I; r++) {
            q_row_to_f32(&c->gu.m, e * 2 * I + r, row);
            double s = c->gub[(size_t)e * 2 * I + r];
            for (int j = 0; j < H; j++) s += (double)row[j] * c->h[(size_t)t * H + j];
            gu[r] = s;
        }
        for (int i = 0; i < I; i++) { /* modeling_gpt_oss.py GptOssExperts: gate clamped above, up both ways */
            double gt = fmin(gu[2 * i], c->limit), up = fmax(fmin(gu[2 * i + 1], c->limit), -c->limit);
            act[i] = (up + 1) * gt / (1 + exp(-1.702 * gt));
        }
        double mx = 0, err = 0;
        for (int r = 0; r < H; r++) {
            q_row_to_f32(&c->dn.m, e * H + r, row);
            double s = c->db[(size_t)e * H + r];
            for (int j = 0; j < I; j++) s += (double)row[j] * act[j];
            ref[r] = s, mx = fmax(mx, fabs(s));
        }
        for (int r = 0; r < H; r++) err = nanmax(err, fabs(y[(size_t)p * H + r] - ref[r]));
        worst = nanmax(worst, err / mx);
    }
    free(row), free(gu), free(act), free(ref);
    return worst;
}

static void check_moex(int n, int k, int E, int H, int I, dt_type gdt, int gg, dt_type gsdt, dt_type ddt, int dg, dt_type dsdt) {
    char msg[256] = "";
    oss_case c = {.n = n, .k = k, .E = E, .H = H, .I = I, .limit = 7.0f};
    if (make_mat(&c.gu, gdt, E * 2 * I, H, gg, gsdt, msg) || make_mat(&c.dn, ddt, E * H, I, dg, dsdt, msg)) { CK(0, "%s", msg); return; }
    const int nk = n * k;
    c.h = malloc((size_t)n * H * 4), c.te = malloc((size_t)nk * sizeof(int));
    for (size_t i = 0; i < (size_t)n * H; i++) c.h[i] = nrand() * (i / H % 5 == 2 ? 30.f : 1.f);
    c.dgub = rnd_dev((size_t)E * 2 * I, 3.0f, &c.gub, msg), c.ddb = rnd_dev((size_t)E * H, 0.5f, &c.db, msg);
    c.dh = dev_copy(c.h, (size_t)n * H * 4, msg);
    float *logits = malloc((size_t)n * E * 4);
    for (size_t i = 0; i < (size_t)n * E; i++) logits[i] = nrand();
    for (int t = 0; t < n; t++) /* even tokens prefer expert 0 (a segment longer than a tile) */
        if (t % 2 == 0) logits[(size_t)t * E] = 10.f;
    float *dlog = dev_copy(logits, (size_t)n * E * 4, msg), *dw = slcu_alloc((size_t)nk * 4, msg, sizeof msg);
    int *dte = slcu_alloc((size_t)nk * sizeof(int), msg, sizeof msg);
    const slcu_router rr = {.kind = 1, .E = E, .k = k, .routed_scale = 1.0f}; /* gpt-oss's: top-k, softmax over those k */
    CK(!slcu_route(&rr, dlog, n, dte, dw, msg, sizeof msg), "%s", msg);
    slcu_sync(msg, sizeof msg), slcu_download(c.te, dte, (size_t)nk * sizeof(int), msg, sizeof msg);
    /* the layer's table (backend_cuda.c layer_tab's oss layout) */
    const void **tab = calloc((size_t)8 * E, sizeof(void *)), **tabb = malloc((size_t)8 * E * sizeof(void *));
    for (int e = 0; e < E; e++) {
        const slcu_mat m2[2] = {sub_mat(&c.gu, e * 2 * I, 2 * I), sub_mat(&c.dn, e * H, H)};
        for (int z = 0; z < 2; z++) {
            const void **p = tab + ((size_t)z * E + e) * 3;
            p[0] = m2[z].data, p[1] = m2[z].scales, p[2] = m2[z].biases;
        }
        tab[(size_t)6 * E + e] = c.dgub + (size_t)e * 2 * I, tab[(size_t)7 * E + e] = c.ddb + (size_t)e * H;
    }
    void *dtab = dev_copy(tab, (size_t)8 * E * sizeof(void *), msg), *dtabb = slcu_alloc((size_t)8 * E * sizeof(void *), msg, sizeof msg);
    void *work = slcu_alloc(slcu_moex_bytes(n, k, E, H, I), msg, sizeof msg);
    float *dy = slcu_alloc((size_t)nk * H * 4, msg, sizeof msg), *dout = slcu_alloc((size_t)n * H * 4, msg, sizeof msg);
    int *dtb = slcu_alloc((size_t)nk * sizeof(int), msg, sizeof msg), *tb = malloc((size_t)nk * sizeof(int));
    slcu_moex m = {n, k, E, H, I, c.limit, c.dh, dte, (const void *const *)dtab, (const float *const *)((const void **)dtab + (size_t)6 * E),
                   sub_mat(&c.gu, 0, 2 * I), sub_mat(&c.dn, 0, H), work, dy};
    CK(slcu_moex_takes(&m), "slcu_moex_takes refuses a q8/q4 gpt-oss layer");
    float *alone = oss_ref_cells(&c, 1), *pieces = oss_ref_cells(&c, 8);
    CK(!memcmp(alone, pieces, (size_t)nk * H * 4), "gpt-oss per-expert path: pieces of 8 rows differ from the tokens alone");
    const size_t cells = (size_t)nk * H;
    for (int v = 0; v <= 6; v++) { /* the default GEMM, then every kernel */
        slcu_i8_gemm(v);
        poison(dy, cells * 4);
        m.top_e = dte, m.tab = (const void *const *)dtab, m.bias = (const float *const *)((const void **)dtab + (size_t)6 * E);
        CK(!slcu_moex_ffn(&m, msg, sizeof msg), "%s", msg);
        float *y = dl(dy, cells);
        CK(!memcmp(y, alone, cells * 4), "gpt-oss grouped (%s %s, n %d k %d E %d, GEMM %d): a cell differs from the token alone",
           dt_name(gdt), dt_name(ddt), n, k, E, v);
        if (v == 0) {
            const double err = oss_host_err(&c, y);
            CK(err <= 8e-2, "gpt-oss grouped: relative error %.3g against the host reference in double", err);
            printf("     gpt-oss grouped against the host reference in double: relative error %.3g\n", err);
        }
        free(y);
        /* in batches of experts (the device tier): runs of 1 .. 5 experts, the others -1 and NULL */
        poison(dy, cells * 4);
        for (int lo = 0; lo < E;) {
            const int run = (int)(urand() * 5), hi = lo + run < E ? lo + run : E - 1;
            memset(tabb, 0, (size_t)8 * E * sizeof(void *));
            for (int e = lo; e <= hi; e++) {
                for (int z = 0; z < 6; z++) tabb[(size_t)(z / 3 * E + e) * 3 + z % 3] = tab[(size_t)(z / 3 * E + e) * 3 + z % 3];
                tabb[(size_t)6 * E + e] = tab[(size_t)6 * E + e], tabb[(size_t)7 * E + e] = tab[(size_t)7 * E + e];
            }
            for (int p = 0; p < nk; p++) tb[p] = c.te[p] >= lo && c.te[p] <= hi ? c.te[p] : -1;
            slcu_upload(dtb, tb, (size_t)nk * sizeof(int), msg, sizeof msg);
            slcu_upload(dtabb, tabb, (size_t)8 * E * sizeof(void *), msg, sizeof msg);
            m.top_e = dtb, m.tab = (const void *const *)dtabb, m.bias = (const float *const *)((const void **)dtabb + (size_t)6 * E);
            CK(!slcu_moex_ffn(&m, msg, sizeof msg) && !slcu_sync(msg, sizeof msg), "batch %d..%d: %s", lo, hi, msg);
            lo = hi + 1;
        }
        y = dl(dy, cells);
        CK(!memcmp(y, alone, cells * 4), "gpt-oss grouped in batches of experts (GEMM %d): a cell differs from the token alone", v);
        free(y);
    }
    slcu_i8_gemm(0);
    /* the layer: routed on the device, grouped, combined == slcu_combine of the alone cells on the same choice */
    void *buf = NULL;
    size_t cap = 0;
    m.top_e = dte, m.tab = (const void *const *)dtab, m.bias = (const float *const *)((const void **)dtab + (size_t)6 * E);
    float *dref = dev_copy(alone, cells * 4, msg), *dout2 = slcu_alloc((size_t)n * H * 4, msg, sizeof msg);
    poison(dout, (size_t)n * H * 4), poison(dout2, (size_t)n * H * 4);
    CK(!slcu_combine(dref, dw, k, NULL, NULL, dout2, n, H, msg, sizeof msg), "%s", msg);
    CK(slcu_moex_layer(&m, &rr, dlog, dw, dout, &buf, &cap, msg, sizeof msg) == 1, "slcu_moex_layer: %s", msg);
    float *o = dl(dout, (size_t)n * H), *o2 = dl(dout2, (size_t)n * H);
    CK(!memcmp(o, o2, (size_t)n * H * 4), "gpt-oss layer (routed, grouped, combined) differs from the combine of the tokens alone");
    int maxc = 0;
    for (int e = 0, cnt = 0; e < E; e++, cnt = 0) {
        for (int p = 0; p < nk; p++) cnt += c.te[p] == e;
        maxc = cnt > maxc ? cnt : maxc;
    }
    printf("ok   gpt-oss experts grouped on the device: %s g%d / %s g%d, %d tokens x %d of %d experts (largest %d rows), biases "
           "and clamp: bitwise each token alone, in batches, and the layer\n", dt_name(gdt), gg, dt_name(ddt), dg, n, k, E, maxc);
    free(o), free(o2), free(alone), free(pieces), free(logits), free(tab), free(tabb), free(tb);
    free(c.h), free(c.te), free(c.gub), free(c.db);
    slcu_free(buf), slcu_free(dref), slcu_free(dout2), slcu_free(dlog), slcu_free(dw), slcu_free(dte), slcu_free(dtab),
        slcu_free(dtabb), slcu_free(work), slcu_free(dy), slcu_free(dout), slcu_free(dtb), slcu_free(c.dgub), slcu_free(c.ddb),
        slcu_free(c.dh);
    free_mat(&c.gu), free_mat(&c.dn);
}

static void check_moex_all(void) {
    check_moex(70, 4, 9, 256, 96, DT_Q4, 64, DT_BF16, DT_Q8, 32, DT_F16);
    check_moex(150, 4, 16, 512, 160, DT_Q8, 128, DT_F32, DT_Q4, 32, DT_BF16);
    check_moex(40, 4, 32, 384, 288, DT_Q4, 32, DT_F16, DT_Q4, 32, DT_F16); /* I = 288 = 9 blocks: gpt-oss's 2880 / 10 */
    check_moex(60, 4, 16, 256, 96, DT_MXFP4, 32, DT_F32, DT_MXFP4, 32, DT_F32);  /* gpt-oss's own type (cuda_mxfp4.cu's segments) */
    check_moex(130, 4, 8, 384, 288, DT_MXFP4, 32, DT_F32, DT_Q8, 32, DT_F16);   /* mixed: MXFP4 gate_up, q8 down */
    for (int n = 1; n <= 8; n++) { /* a decode step and small batches (moe.c fwd_moe's gpt-oss case, a token alone) */
        check_moex(n, 4, 32, 256, 96, DT_MXFP4, 32, DT_F32, DT_MXFP4, 32, DT_F32);
        check_moex(n, 4, 16, 384, 288, DT_Q4, 32, DT_F16, DT_Q8, 32, DT_F16);
    }
}
