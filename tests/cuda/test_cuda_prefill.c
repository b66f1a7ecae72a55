/*
 * test_cuda_prefill.c — issue 24's prefill paths in test_cuda (included by test_cuda.c, whose helpers it uses):
 * slcu_moe_ffn (a layer-major MoE block's experts grouped on the device) against each expert's own calls, the
 * prefill attention (cuda_fattn.cu) against the tokens one at a time, both bitwise; and the MoE layer's bench.
 */

typedef struct { slcu_moe m; } moerun;
static void run_moe(void *c) {
    char msg[256];
    slcu_moe_ffn(&((moerun *)c)->m, msg, sizeof msg);
}

/* The 30B shape's MoE layer (q4 g64: gate/up 768 x 2048, down 2048 x 768) through slcu_moe_ffn: 512 tokens x 8 of
 * 128 experts, grouped on the device, with gemm_tile2, gemm_tile3 (the default) and gemm_tile5 (8 and 4 warps). */
static void bench_moe_wide(const mat *gu, const mat *dn, float *dx) {
    char msg[256];
    enum { NT = 512, K = 8, E = 128 };
    int *te = malloc(NT * K * sizeof(int));
    for (int t = 0; t < NT; t++)
        for (int s = 0; s < K; s++) te[t * K + s] = s * 16 + (int)(urand() * 16); /* ascending, distinct */
    const void **tab = malloc((size_t)9 * E * sizeof(void *));
    for (int e = 0; e < E; e++)
        for (int i = 0; i < 3; i++) {
            const uint8_t *base = i < 2 ? gu->d.data : dn->d.data, *sc = i < 2 ? gu->d.scales : dn->d.scales;
            const uint8_t *bi = i < 2 ? gu->d.biases : dn->d.biases;
            const size_t r0 = i < 2 ? (size_t)(2 * e + i) * 768 : (size_t)e * 2048, rb = i < 2 ? 1024 : 384, sb = i < 2 ? 64 : 24;
            const void **p = tab + ((size_t)i * E + e) * 3;
            p[0] = base + r0 * rb, p[1] = sc + r0 * sb, p[2] = bi + r0 * sb;
        }
    int *dte = slcu_alloc(NT * K * sizeof(int), msg, sizeof msg);
    void *dtab = slcu_alloc((size_t)9 * E * sizeof(void *), msg, sizeof msg), *work = slcu_alloc(slcu_moe_bytes(NT, K, E, 2048, 768), msg, sizeof msg);
    float *my = slcu_alloc((size_t)NT * K * 2048 * 4, msg, sizeof msg);
    slcu_upload(dte, te, NT * K * sizeof(int), msg, sizeof msg), slcu_upload(dtab, tab, (size_t)9 * E * sizeof(void *), msg, sizeof msg);
    slcu_mat g0 = gu->d, d0 = dn->d;
    g0.rows = 768, d0.rows = 2048;
    moerun mr = {{NT, K, E, 2048, 768, dx, dte, (const void *const *)dtab, g0, g0, d0, work, my, 1}};
    for (int v = 2; v <= 6; v++) {
        if (v == 4) continue; /* gemm_tile2, 3 (the default), 5 and 6 */
        slcu_i8_gemm(v);
        float ms = slcu_time(run_moe, &mr, 20);
        printf("MoE prefill, slcu_moe_ffn (grouped on the device, GEMM %d), %d tokens x %d of %d experts: %6.3f ms %5.1f TOPS\n", v,
               NT, K, E, ms, 2.0 * 3 * 768 * 2048 * NT * K / (ms * 1e-3) / 1e12);
    }
    slcu_i8_gemm(0);
    free(te), free(tab);
    slcu_free(dte), slcu_free(dtab), slcu_free(work), slcu_free(my);
}

/* ---- the exact matvec of many tokens in one call (a prefill's router: 4 rows a warp from ~264 CTAs) against its
 * tokens one at a time, bitwise ---- */
static void check_many_tokens(dt_type dt, int rows, int cols, int n) {
    char msg[256] = "";
    mat a;
    if (make_mat(&a, dt, rows, cols, 64, DT_BF16, msg)) { CK(0, "%s", msg); return; }
    float *dx = rnd_dev((size_t)n * cols, 1, NULL, msg), *dy = slcu_alloc((size_t)n * rows * 4, msg, sizeof msg);
    poison(dy, (size_t)n * rows * 4);
    for (int t = 0; t < n; t++) CK(!slcu_matmul(&a.d, dx + (size_t)t * cols, dy + (size_t)t * rows, 1, msg, sizeof msg), "%s", msg);
    float *one = dl(dy, (size_t)n * rows);
    poison(dy, (size_t)n * rows * 4);
    CK(!slcu_matmul(&a.d, dx, dy, n, msg, sizeof msg), "%s", msg);
    float *all = dl(dy, (size_t)n * rows);
    CK(!memcmp(one, all, (size_t)n * rows * 4), "%s %d x %d, %d tokens in one call: differs from one at a time", dt_name(dt), rows, cols, n);
    printf("ok   %-4s %5d x %-5d %d tokens in one call == one at a time, bitwise\n", dt_name(dt), rows, cols, n);
    free(one), free(all);
    slcu_free(dx), slcu_free(dy);
    free_mat(&a);
}

/* ---- rmsnorm of many rows (a warp per row from 64 rows) against the rows one at a time (a CTA per row), bitwise,
 * in place and not: n tokens of nh heads of dim at stride hs in rows of ld ---- */
static void check_rmsnorm_rows(int n, int nh, int dim, size_t hs, size_t ld) {
    char msg[256] = "";
    const size_t tot = (size_t)n * ld;
    float *hx, *dx = rnd_dev(tot, 3, &hx, msg), *dw = rnd_dev((size_t)dim, 1, NULL, msg), *dy = slcu_alloc(tot * 4, msg, sizeof msg);
    slcu_upload(dy, hx, tot * 4, msg, sizeof msg);
    for (int t = 0; t < n; t++)
        CK(!slcu_rmsnorm(dx + (size_t)t * ld, dy + (size_t)t * ld, 1, ld, nh, hs, dim, dw, 1.0f, 1e-6f, msg, sizeof msg), "%s", msg);
    float *one = dl(dy, tot);
    slcu_upload(dy, hx, tot * 4, msg, sizeof msg);
    CK(!slcu_rmsnorm(dx, dy, n, ld, nh, hs, dim, dw, 1.0f, 1e-6f, msg, sizeof msg), "%s", msg);
    float *all = dl(dy, tot);
    CK(!slcu_rmsnorm(dx, dx, n, ld, nh, hs, dim, dw, 1.0f, 1e-6f, msg, sizeof msg), "%s", msg); /* in place */
    float *inpl = dl(dx, tot);
    CK(!memcmp(one, all, tot * 4) && !memcmp(one, inpl, tot * 4), "rmsnorm of %d x %d heads of %d at once differs from one token at a time",
       n, nh, dim);
    printf("ok   rmsnorm of %d tokens x %d heads of %d at once == one at a time, bitwise\n", n, nh, dim);
    free(hx), free(one), free(all), free(inpl);
    slcu_free(dx), slcu_free(dw), slcu_free(dy);
}

/* ---- RoPE of many rows (a warp per row with SLUICE_CUDA_ROWS=1) against one token at a time, bitwise ---- */
static void check_rope_rows(int n, int nh, int hd, int rot, int inter) {
    char msg[256] = "";
    const size_t ld = (size_t)nh * hd + 16, tot = (size_t)n * ld;
    float fq[512];
    for (int i = 0; i < rot / 2; i++) fq[i] = powf(10000.f, -2.f * i / rot);
    float *hx, *dx = rnd_dev(tot, 2, &hx, msg);
    for (int t = 0; t < n; t++)
        CK(!slcu_rope(dx + (size_t)t * ld, 1, ld, nh, hd, rot, fq, 1.1f, 300 + t, inter, msg, sizeof msg), "%s", msg);
    float *one = dl(dx, tot);
    slcu_upload(dx, hx, tot * 4, msg, sizeof msg);
    CK(!slcu_rope(dx, n, ld, nh, hd, rot, fq, 1.1f, 300, inter, msg, sizeof msg), "%s", msg);
    float *all = dl(dx, tot);
    CK(!memcmp(one, all, tot * 4), "rope of %d x %d heads (rot %d, interleave %d) at once differs from one token at a time", n, nh, rot, inter);
    printf("ok   rope of %d tokens x %d heads (rot %d of %d, interleave %d) at once == one at a time, bitwise\n", n, nh, rot, hd, inter);
    free(hx), free(one), free(all);
    slcu_free(dx);
}

/* ---- slcu_moe_ffn (a layer-major MoE block's experts, grouped on the device) against each expert's own
 * slcu_matmul_i8 / slcu_swiglu / quantisation calls over its rows: bitwise, every (token, slot) cell ---- */

/* expert e's reference outputs into ref's cells (t k + s) of the pairs that chose it */
static void moe_ref_expert(const slcu_mat *gm, const slcu_mat *um, const slcu_mat *dm, const slcu_act *xa, const int *pair,
                           int cnt, int H, int I, float *ref) {
    char msg[256] = "";
    int *rows = malloc((size_t)cnt * sizeof(int));
    for (int i = 0; i < cnt; i++) rows[i] = pair[i] / 100000;
    int *drows = dev_copy(rows, (size_t)cnt * sizeof(int), msg);
    float *g = slcu_alloc((size_t)cnt * I * 8, msg, sizeof msg), *y = slcu_alloc((size_t)cnt * H * 4, msg, sizeof msg);
    void *mbuf = slcu_alloc(slcu_act_bytes(cnt, I), msg, sizeof msg);
    slcu_mm mm[2] = {{*gm, xa, drows, cnt, g, (size_t)I, NULL, NULL}, {*um, xa, drows, cnt, g + (size_t)cnt * I, (size_t)I, NULL, NULL}};
    slcu_act ma;
    CK(!slcu_matmul_i8(mm, 2, msg, sizeof msg) && !slcu_swiglu(g, g + (size_t)cnt * I, g, (size_t)cnt * I, msg, sizeof msg) &&
       !slcu_act_bind(&ma, mbuf, cnt, I, msg, sizeof msg) && !slcu_act_quantize(&ma, g, (size_t)I, msg, sizeof msg), "%s", msg);
    slcu_mm dn = {*dm, &ma, NULL, cnt, y, (size_t)H, NULL, NULL};
    CK(!slcu_matmul_i8(&dn, 1, msg, sizeof msg), "%s", msg);
    float *hy = dl(y, (size_t)cnt * H);
    for (int i = 0; i < cnt; i++) memcpy(ref + (size_t)(pair[i] % 100000) * H, hy + (size_t)i * H, (size_t)H * 4);
    free(hy), free(rows);
    slcu_free(drows), slcu_free(g), slcu_free(y), slcu_free(mbuf);
}

/* The layer's device table [gate, up, down][E][data, scales, biases] (backend_cuda.c layer_tab's layout) of experts
 * whose gate and up are rows 2 e I and (2 e + 1) I of gu and whose down is rows e H of dn: host memory, malloc'd */
static const void **moe_tab(const mat *gu, const mat *dn, int E, int I, int H) {
    const void **tab = malloc((size_t)9 * E * sizeof(void *));
    for (int e = 0; tab && e < E; e++) {
        const slcu_mat m3[3] = {sub_mat(gu, 2 * e * I, I), sub_mat(gu, (2 * e + 1) * I, I), sub_mat(dn, e * H, H)};
        for (int i = 0; i < 3; i++) {
            const void **p = tab + ((size_t)i * E + e) * 3;
            p[0] = m3[i].data, p[1] = m3[i].scales, p[2] = m3[i].biases;
        }
    }
    return tab;
}

static void check_moe(int n, int k, int E, int H, int I, dt_type gdt, int gg, dt_type gsdt, dt_type ddt, int dg, dt_type dsdt) {
    char msg[256] = "";
    mat gu, dn;
    if (make_mat(&gu, gdt, 2 * E * I, H, gg, gsdt, msg) || make_mat(&dn, ddt, E * H, I, dg, dsdt, msg)) { CK(0, "%s", msg); return; }
    float *h = malloc((size_t)n * H * 4), *ref = malloc((size_t)n * k * H * 4);
    for (size_t i = 0; i < (size_t)n * H; i++) h[i] = nrand() * (i / H % 5 == 2 ? 30.f : 1.f);
    int *te = malloc((size_t)n * k * sizeof(int));
    for (int t = 0; t < n; t++) { /* k distinct of experts 0 .. E-2, ascending; even tokens take expert 0 */
        int s = 0;
        for (int e = 0; e < E - 1 && s < k; e++)
            if ((e == 0 && t % 2 == 0) || urand() < (double)(k - s) / (E - 1 - e)) te[t * k + s++] = e;
        for (int e = E - 2; s < k; e--) { /* fill up from the top, keeping ascending order unique */
            int used = 0;
            for (int j = 0; j < s; j++) used |= te[t * k + j] == e;
            if (!used) te[t * k + s++] = e;
        }
        for (int a = 0; a < k; a++) /* sort */
            for (int b = a + 1, x; b < k; b++)
                if (te[t * k + b] < te[t * k + a]) x = te[t * k + a], te[t * k + a] = te[t * k + b], te[t * k + b] = x;
    }
    const void **tab = moe_tab(&gu, &dn, E, I, H);
    float *dh = dev_copy(h, (size_t)n * H * 4, msg), *dy = slcu_alloc((size_t)n * k * H * 4, msg, sizeof msg);
    int *dte = dev_copy(te, (size_t)n * k * sizeof(int), msg);
    void *dtab = dev_copy(tab, (size_t)9 * E * sizeof(void *), msg), *work = slcu_alloc(slcu_moe_bytes(n, k, E, H, I), msg, sizeof msg);
    slcu_moe m = {n, k, E, H, I, dh, dte, (const void *const *)dtab, sub_mat(&gu, 0, I), sub_mat(&gu, I, I), sub_mat(&dn, 0, H), work, dy, 1};
    float *y[6];
    for (int v = 0; v < 6; v++) { /* every GEMM kernel */
        slcu_i8_gemm(v + 1);
        poison(dy, (size_t)n * k * H * 4);
        CK(!slcu_moe_ffn(&m, msg, sizeof msg), "%s", msg);
        y[v] = dl(dy, (size_t)n * k * H);
    }
    slcu_i8_gemm(0);
    /* the reference: h's rows quantised once, each expert's calls over its pairs (t * 100000 + t k + s) */
    slcu_act xa;
    void *abuf = slcu_alloc(slcu_act_bytes(n, H), msg, sizeof msg);
    CK(!slcu_act_bind(&xa, abuf, n, H, msg, sizeof msg) && !slcu_act_quantize(&xa, dh, (size_t)H, msg, sizeof msg), "%s", msg);
    int *pair = malloc((size_t)n * k * sizeof(int)), maxc = 0;
    for (int e = 0, cnt = 0; e < E; e++, cnt = 0) {
        for (int i = 0; i < n * k; i++) cnt += te[i] == e ? (pair[cnt] = i / k * 100000 + i, 1) : 0;
        slcu_mat g3[3] = {sub_mat(&gu, 2 * e * I, I), sub_mat(&gu, (2 * e + 1) * I, I), sub_mat(&dn, e * H, H)};
        if (cnt) moe_ref_expert(&g3[0], &g3[1], &g3[2], &xa, pair, cnt, H, I, ref), maxc = cnt > maxc ? cnt : maxc;
    }
    for (int v = 0; v < 6; v++)
        CK(!memcmp(y[v], ref, (size_t)n * k * H * 4), "MoE on the device (%s %s, n %d k %d E %d, GEMM %d): a cell differs from its expert's calls",
           dt_name(gdt), dt_name(ddt), n, k, E, v + 1);
    printf("ok   MoE experts grouped on the device: %s g%d / %s g%d, %d tokens x %d of %d experts (largest %d rows): bitwise\n",
           dt_name(gdt), gg, dt_name(ddt), dg, n, k, E, maxc);
    free(h), free(ref), free(te), free(tab), free(y[0]), free(y[1]), free(y[2]), free(y[3]), free(y[4]), free(y[5]), free(pair);
    slcu_free(dh), slcu_free(dy), slcu_free(dte), slcu_free(dtab), slcu_free(work), slcu_free(abuf);
    free_mat(&gu), free_mat(&dn);
}

/* ---- attention of many tokens at once (cuda_fattn.cu, from 9 tokens) against the same tokens one at a time
 * (k_attention's path): bitwise, every output ---- */
static void check_attn_prefill(int T, int NH, int NKV, int HD, int cap, int window, int pos0, int sinks, int gated) {
    char msg[256] = "";
    const int ROW = NKV * HD, qs = gated ? 2 * HD : HD;
    float *hq, *hk, *hv, *hs, *hn;
    float *dq = rnd_dev((size_t)T * NH * qs, 1, &hq, msg), *dk = rnd_dev((size_t)cap * ROW, 1, &hk, msg);
    float *dv = rnd_dev((size_t)cap * ROW, 1, &hv, msg), *dsk = rnd_dev(NH, 1, &hs, msg);
    float *dnew = rnd_dev((size_t)T * 2 * ROW, 1, &hn, msg), *dout = slcu_alloc((size_t)T * NH * HD * 4, msg, sizeof msg);
    slcu_attn ap = {dq, (size_t)NH * qs, qs, gated, dnew, dnew + ROW, 2 * ROW, dk, dv, cap, T, pos0, NH, NKV, HD,
                    window, sinks ? dsk : NULL, 1.0f / sqrtf((float)HD), dout, (size_t)NH * HD, 0};
    poison(dout, (size_t)T * NH * HD * 4);
    for (int t = 0; t < T; t++) { /* one at a time: k_attention */
        slcu_attn one = ap;
        one.q = dq + (size_t)t * NH * qs, one.k = dnew + (size_t)t * 2 * ROW, one.v = one.k + ROW;
        one.n = 1, one.pos0 = pos0 + t, one.out = dout + (size_t)t * NH * HD;
        CK(!slcu_attention(&one, msg, sizeof msg), "%s", msg);
    }
    float *ref = dl(dout, (size_t)T * NH * HD);
    slcu_upload(dk, hk, (size_t)cap * ROW * 4, msg, sizeof msg), slcu_upload(dv, hv, (size_t)cap * ROW * 4, msg, sizeof msg);
    poison(dout, (size_t)T * NH * HD * 4);
    CK(!slcu_attention(&ap, msg, sizeof msg), "%s", msg);
    float *y = dl(dout, (size_t)T * NH * HD);
    CK(!memcmp(y, ref, (size_t)T * NH * HD * 4), "prefill attention (%d tokens at %d, %d/%d heads, hd %d, window %d): differs from token by token",
       T, pos0, NH, NKV, HD, window);
    printf("ok   attention of %d tokens at once (from position %d, %d/%d heads, hd %d, window %d%s%s) == token by token, bitwise\n", T,
           pos0, NH, NKV, HD, window, sinks ? ", sinks" : "", gated ? ", gated" : "");
    free(hq), free(hk), free(hv), free(hs), free(hn), free(ref), free(y);
    slcu_free(dq), slcu_free(dk), slcu_free(dv), slcu_free(dsk), slcu_free(dnew), slcu_free(dout);
}
