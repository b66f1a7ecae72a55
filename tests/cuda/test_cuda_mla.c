/* ---- SLUICE_CUDA_MLA=2 (cuda_mla.cu's split launches, slcu_mla_set(2)) bitwise k_mla_attend (slcu_mla_set(1)): the
 * cache rows, q_abs and the latents of 1 and 3 tokens at depths 1 .. 4097, DeepSeek-V3's shape (128 heads, kv_lora
 * 512, rope 64, nope 128, v 128) and small ones (3 heads, kv_lora 40 / 96, rope 8), kv_b f32 and q4; then one token at
 * a depth past k_mla_attend's shared memory (the split path has no such limit): check_mla_split_all. --bench-mla: us a
 * call of both at depths 1, 512, 4096, 8192 (bench_mla). Included by test_cuda.c. ---- */

typedef struct {
    int nh, r, dr, dn, dv;
} mla_shape;

/* one case: n tokens after pos0 cached rows, both modes from the same inputs, compared bitwise */
static void mla_split_case(const mla_shape *s, const mat *kvb, int pos0, int n, const char *what) {
    char msg[256] = "";
    const int row = s->r + s->dr, qh = s->dn + s->dr, nk = pos0 + n;
    float *hc, *dq = rnd_dev((size_t)n * s->nh * qh, 1, NULL, msg), *dckv = rnd_dev((size_t)n * row, 1, NULL, msg);
    float *dc0 = rnd_dev((size_t)nk * row, 1, &hc, msg), *dc1 = dev_copy(hc, (size_t)nk * row * 4, msg);
    float *out[2][3] = {{NULL}};
    for (int m = 0; m < 2; m++) {
        float *dc = m ? dc1 : dc0, *dqa = slcu_alloc((size_t)n * s->nh * row * 4, msg, sizeof msg);
        float *dlat = slcu_alloc((size_t)n * s->nh * s->r * 4, msg, sizeof msg);
        poison(dqa, (size_t)n * s->nh * row * 4), poison(dlat, (size_t)n * s->nh * s->r * 4);
        const slcu_mla a = {.q = dq, .ldq = (size_t)s->nh * qh, .ckv = dckv, .cache = dc, .kv_b = kvb->d, .n = n, .pos0 = pos0,
                            .n_heads = s->nh, .r = s->r, .dr = s->dr, .dn = s->dn, .dv = s->dv, .scale = 0.0721f, .q_abs = dqa, .lat = dlat};
        slcu_mla_set(m ? 2 : 1);
        CK(!slcu_mla_attention(&a, msg, sizeof msg), "mla split %s: %s", what, msg);
        out[m][0] = dl(dc, (size_t)nk * row), out[m][1] = dl(dqa, (size_t)n * s->nh * row), out[m][2] = dl(dlat, (size_t)n * s->nh * s->r);
        slcu_free(dqa), slcu_free(dlat);
    }
    slcu_mla_set(-1);
    int fin = 1;
    for (size_t i = 0; i < (size_t)n * s->nh * s->r; i++) fin &= isfinite(out[0][2][i]) != 0;
    CK(fin, "mla split %s, depth %d, %d token%s: the old kernel's latents are not finite", what, nk, n, n > 1 ? "s" : "");
    CK(!memcmp(out[0][0], out[1][0], (size_t)nk * row * 4), "mla split %s, depth %d, %d tokens: the cache rows differ", what, nk, n);
    CK(!memcmp(out[0][1], out[1][1], (size_t)n * s->nh * row * 4), "mla split %s, depth %d, %d tokens: q_abs differs", what, nk, n);
    size_t bad_at = 0, nbad = 0;
    for (size_t i = 0; i < (size_t)n * s->nh * s->r; i++)
        if (memcmp(out[0][2] + i, out[1][2] + i, 4)) {
            if (!nbad++) bad_at = i;
        }
    CK(!nbad, "mla split %s, depth %d, %d tokens: %zu latents differ, the first [%zu] %.9g against the old %.9g", what, nk, n,
       nbad, bad_at, out[1][2][bad_at], out[0][2][bad_at]);
    for (int m = 0; m < 2; m++)
        for (int k = 0; k < 3; k++) free(out[m][k]);
    free(hc), slcu_free(dq), slcu_free(dckv), slcu_free(dc0), slcu_free(dc1);
}

static void check_mla_split_all(void) {
    char msg[256] = "";
    const mla_shape shapes[4] = {{128, 512, 64, 128, 128}, {128, 512, 64, 128, 128}, {3, 40, 8, 20, 12}, {3, 96, 8, 20, 12}};
    const dt_type dts[4] = {DT_F32, DT_Q4, DT_F32, DT_Q4};
    const int depths[] = {1, 2, 31, 256, 257, 1000, 4097}, nd = (int)(sizeof depths / sizeof *depths);
    const int f0 = failures;
    for (int k = 0; k < 4; k++) {
        const mla_shape *s = &shapes[k];
        mat kvb;
        if (make_mat(&kvb, dts[k], s->nh * (s->dn + s->dv), s->r, dts[k] == DT_Q4 ? 32 : 0, dts[k] == DT_Q4 ? DT_BF16 : DT_F32, msg)) {
            CK(0, "mla split: %s", msg);
            continue;
        }
        char what[96];
        snprintf(what, sizeof what, "%d heads, r %d, dr %d, kv_b %s", s->nh, s->r, s->dr, dts[k] == DT_Q4 ? "q4" : "f32");
        for (int d = 0; d < nd; d++)
            for (int n = 1; n <= 3; n += 2) mla_split_case(s, &kvb, depths[d] > n ? depths[d] - n : 0, n, what);
        free_mat(&kvb);
    }
    { /* one token at 70,000 positions: past k_mla_attend's shared memory (refused), the split path's latents finite */
        const mla_shape s = {128, 512, 64, 128, 128};
        const int nk = 70000, row = s.r + s.dr, qh = s.dn + s.dr;
        mat kvb;
        if (make_mat(&kvb, DT_Q4, s.nh * (s.dn + s.dv), s.r, 64, DT_BF16, msg)) CK(0, "mla split: %s", msg);
        else {
            float *dq = rnd_dev((size_t)s.nh * qh, 1, NULL, msg), *dckv = rnd_dev(row, 1, NULL, msg);
            float *dc = rnd_dev((size_t)nk * row, 1, NULL, msg), *dqa = slcu_alloc((size_t)s.nh * row * 4, msg, sizeof msg);
            float *dlat = slcu_alloc((size_t)s.nh * s.r * 4, msg, sizeof msg);
            poison(dlat, (size_t)s.nh * s.r * 4);
            const slcu_mla a = {.q = dq, .ldq = (size_t)s.nh * qh, .ckv = dckv, .cache = dc, .kv_b = kvb.d, .n = 1, .pos0 = nk - 1,
                                .n_heads = s.nh, .r = s.r, .dr = s.dr, .dn = s.dn, .dv = s.dv, .scale = 0.0721f, .q_abs = dqa, .lat = dlat};
            slcu_mla_set(1);
            const int old_rc = slcu_mla_attention(&a, msg, sizeof msg);
            slcu_mla_set(2);
            CK(!slcu_mla_attention(&a, msg, sizeof msg), "mla split at %d positions: %s", nk, msg);
            slcu_mla_set(-1);
            float *y = dl(dlat, (size_t)s.nh * s.r);
            int fin = 1;
            for (int i = 0; i < s.nh * s.r; i++) fin &= isfinite(y[i]) != 0;
            CK(fin, "mla split at %d positions: latents not finite", nk);
            printf("ok   mla split at %d positions (k_mla_attend: %s)\n", nk, old_rc ? "refused" : "took it");
            free(y), slcu_free(dq), slcu_free(dckv), slcu_free(dc), slcu_free(dqa), slcu_free(dlat), free_mat(&kvb);
        }
    }
    if (failures == f0)
        printf("ok   mla split (SLUICE_CUDA_MLA=2) bitwise k_mla_attend: cache, q_abs, latents; 128 heads r 512 and 3 heads r 40 / 96; "
               "f32 / q4 kv_b; depths 1 .. 4097; 1 and 3 tokens\n");
}

typedef struct {
    slcu_mla a;
} mla_bench;

static void mla_bench_run(void *p) {
    char msg[256];
    if (slcu_mla_attention(&((mla_bench *)p)->a, msg, sizeof msg)) fprintf(stderr, "bench-mla: %s\n", msg);
}

static void bench_mla(void) {
    char msg[256] = "";
    const mla_shape s = {128, 512, 64, 128, 128};
    const int depths[4] = {1, 512, 4096, 8192}, row = s.r + s.dr, qh = s.dn + s.dr;
    mat kvb;
    fast_fill = 1;
    if (make_mat(&kvb, DT_Q4, s.nh * (s.dn + s.dv), s.r, 64, DT_BF16, msg)) {
        CK(0, "bench-mla: %s", msg);
        return;
    }
    fast_fill = 0;
    printf("\nMLA one decode token, DeepSeek-V3 shape (128 heads, kv_lora 512, rope 64, q4 kv_b): us a call (store + absorb + "
           "attention; median of 50 after a warm-up), k_mla_attend (SLUICE_CUDA_MLA unset) against the split (=2)\n");
    printf("%-6s %10s %10s %8s\n", "depth", "old us", "split us", "old/new");
    for (int d = 0; d < 4; d++) {
        const int nk = depths[d];
        float *dq = rnd_dev((size_t)s.nh * qh, 1, NULL, msg), *dckv = rnd_dev(row, 1, NULL, msg);
        float *dc = rnd_dev((size_t)nk * row, 1, NULL, msg), *dqa = slcu_alloc((size_t)s.nh * row * 4, msg, sizeof msg);
        float *dlat = slcu_alloc((size_t)s.nh * s.r * 4, msg, sizeof msg);
        mla_bench b = {{.q = dq, .ldq = (size_t)s.nh * qh, .ckv = dckv, .cache = dc, .kv_b = kvb.d, .n = 1, .pos0 = nk - 1,
                        .n_heads = s.nh, .r = s.r, .dr = s.dr, .dn = s.dn, .dv = s.dv, .scale = 0.0721f, .q_abs = dqa, .lat = dlat}};
        float t[2] = {1e30f, 1e30f};
        for (int k = 0; k < 4; k++) { /* alternated, the best of two medians each */
            slcu_mla_set(k & 1 ? 2 : 1);
            const float v = 1e3f * slcu_time_median(mla_bench_run, &b, 50);
            if (v < t[k & 1]) t[k & 1] = v;
        }
        slcu_mla_set(-1);
        printf("%-6d %10.2f %10.2f %8.2f\n", nk, t[0], t[1], t[0] / t[1]);
        fflush(stdout);
        slcu_free(dq), slcu_free(dckv), slcu_free(dc), slcu_free(dqa), slcu_free(dlat);
    }
    free_mat(&kvb);
}
