/*
 * test_cuda_mv.c — issue 24's decode matvec in test_cuda (included by test_cuda.c, whose helpers it uses): the
 * one-token matvec's time a call on the Qwen3-30B-A3B decode step's shapes (q4 g64 bf16) for each number of rows a
 * CTA takes (cuda_mv.cu; check_i8 checks that each gives the default's bits). Sections: check_mv_rows (every one-token
 * kernel, cuda_mv1p.cu mv1p_i8 included, bitwise the default), bench_mv_rows, --mvprof (mv1c_i8's phases), --mvprof7
 * (mv1p_i8's), --bench-mv, check_swi_down, --bench-mv7 (mv1p_i8 against mv1c_i8 and a copy), --bench-fold (mv1c_i8's
 * fold as before against SLUICE_CUDA_MVFOLD=2's), --fold (the checks of the MVFOLD=2 kernel, then --bench-fold), --swi
 * (check_swi_gate: SLUICE_CUDA_SWIDOWN=2 | 3's gate/up + SwiGLU launch and early down bitwise today's pair, in the full
 * run too; then the two pairs timed).
 */

/* A benchmark's matrix without the host quantizer: random code bytes and scale and bias words of small finite values
 * (f32 2^-10 .. 2^-7, 16-bit words in the same range), made and uploaded in well under a second where make_mat
 * quantizes rows x cols floats on the host (the experts' stacks, 750 M parameters for --mvprof: past call P's 30 s
 * timeout before its first line). The kernels' time does not depend on the values. Freed by free_mat. */
static int make_mat_raw(mat *o, dt_type dt, int rows, int cols, int group, dt_type sdt, char *msg) {
    memset(o, 0, sizeof *o);
    o->bytes = q_mat_bytes(dt, rows, cols, group, sdt);
    if (!(o->host = malloc(o->bytes + 8))) {
        snprintf(msg, 256, "make_mat_raw: no host memory for %zu bytes", o->bytes);
        return -1;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull, *w = o->host;
    for (size_t i = 0; i < (o->bytes + 7) / 8; i++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, w[i] = x;
    q_mat_bind(&o->m, o->host, dt, rows, cols, group, sdt, 0);
    const size_t nw = (size_t)rows * (size_t)(cols / group);
    for (int h = 0; h < 2; h++) {
        uint8_t *p = (uint8_t *)(h ? o->m.biases : o->m.scales);
        for (size_t i = 0; p && i < nw; i++) {
            if (sdt == DT_F32) {
                const float v = ldexpf(1.0f + (float)(i & 7) / 8, -10 + (int)(i >> 3 & 3));
                memcpy(p + 4 * i, &v, 4);
            } else {
                const uint16_t v = sdt == DT_BF16 ? (uint16_t)(0x3a80 + (i & 0x7f)) : (uint16_t)(0x1400 + (i & 0x3ff));
                memcpy(p + 2 * i, &v, 2);
            }
        }
    }
    if (!(o->dev = slcu_alloc(o->bytes, msg, 256)) || slcu_upload(o->dev, o->host, o->bytes, msg, 256)) return -1;
    const uint8_t *hb = o->host, *dv = o->dev;
    o->d.data = dv + ((const uint8_t *)o->m.data - hb);
    o->d.scales = o->m.scales ? dv + ((const uint8_t *)o->m.scales - hb) : NULL;
    o->d.biases = o->m.biases ? dv + ((const uint8_t *)o->m.biases - hb) : NULL;
    o->d.dtype = dt, o->d.sdtype = sdt, o->d.rows = rows, o->d.cols = cols, o->d.group = group;
    return 0;
}

/* check_i8's one token with every kernel and row count a CTA of the one-token matvec may take (cuda_mv.cu,
 * cuda_mv1d.cu), directly, through the device table (dtab / dsel: entry 1 holds a), and as N one-token jobs through
 * the table in one call (as the experts' gate/up: launches of up to 32 jobs, each its own tiles): the same bits as
 * alone (the default's) */
static void check_mv_rows(const mat *a, const slcu_act *da, const int *drows, const int *idx, int N, const float *alone, float *dy,
                          const void *dtab, const void *dsel) {
    char msg[256] = "";
    const int rows = a->d.rows, cols = a->d.cols;
    const dt_type dt = a->d.dtype;
    float *yy = NULL;
    int gok;
    const int mvr[] = {4, 8, 16, 32, -1};
    /* mv1_i8 .. mv1d_i8 and mv1p_i8, with and without PDL; mv1p_i8 also on a grid of 3 CTAs (each walks many tiles,
     * and of the N jobs many jobs, through its pipeline), with its own pairs a thread and with 2 and 4; mv1c_i8 with the
     * row-major fold too (SLUICE_CUDA_MVFOLD=2, cuda.h slcu_i8_mvfold), with and without PDL */
    enum { NK = 14 };
    const int kern[NK] = {1, 2, 3, 3, 4, 4, 7, 7, 7, 7, 7, 7, 3, 3}, pdl[NK] = {0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
    const int ctas[NK] = {0, 0, 0, 0, 0, 0, 0, 0, -3, -3, -3, 0, 0, 0}, pairs[NK] = {0, 0, 0, 0, 0, 0, 0, 0, 2, 4, 4, 2, 0, 0};
    const int fold[NK] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2};
    slcu_mm *mm = malloc((size_t)N * sizeof *mm);
    for (int k = 0; k < NK * 5; k++) {
        slcu_i8_mv_rows(mvr[k % 5]);
        slcu_i8_mv1_kernel(kern[k / 5]);
        slcu_i8_pdl(pdl[k / 5]);
        slcu_i8_mv1p_ctas(ctas[k / 5]), slcu_i8_mv1p_pairs(pairs[k / 5]), slcu_i8_mvfold(fold[k / 5]);
        for (int via = 0; via < 3; via++) {
            if (via == 2 && kern[k / 5] < 3) continue;
            poison(dy, (size_t)N * rows * 4);
            for (int t = 0; t < N; t++) {
                mm[t] = (slcu_mm){a->d, da, drows + t, 1, dy + (size_t)t * rows, (size_t)rows, NULL, NULL};
                if (via) mm[t].w.data = mm[t].w.scales = mm[t].w.biases = NULL;
                if (via) mm[t].tab = (const void *const *)dtab, mm[t].sel = (const int *)dsel;
                if (via < 2) CK(!slcu_matmul_i8(&mm[t], 1, msg, sizeof msg), "%s", msg);
            }
            if (via == 2) CK(!slcu_matmul_i8(mm, N, msg, sizeof msg), "%s", msg);
            free(yy);
            yy = dl(dy, (size_t)N * rows);
            gok = 1;
            for (int t = 0; t < N; t++) gok &= !memcmp(yy + (size_t)t * rows, alone + (size_t)idx[t] * rows, (size_t)rows * 4);
            CK(gok, "%s %dx%d: one token, kernel %d%s%s%s (pairs %d) with %d rows a CTA%s, differs from the default", dt_name(dt), rows,
               cols, kern[k / 5], pdl[k / 5] ? " (PDL)" : "", ctas[k / 5] ? " (3 CTAs)" : "", fold[k / 5] == 2 ? " (MVFOLD=2)" : "",
               pairs[k / 5], mvr[k % 5],
               via == 2 ? " (N jobs in one call, device table)" : via ? " (device table)" : "");
        }
    }
    free(mm);
    slcu_i8_mv_rows(0), slcu_i8_mv1_kernel(0), slcu_i8_pdl(-1), slcu_i8_mv1p_ctas(0), slcu_i8_mv1p_pairs(0), slcu_i8_mvfold(0);
    /* 2-8 tokens with each kernel (mvn_i8, mvnc_i8, mv_i8, mvnd_i8), through the row indirection and the table too */
    const int nts[] = {2, 3, 5, 8};
    for (int k = 0; k < 4 * 4 * 2; k++) {
        const int n = nts[k % 4], via = k / 4 % 2;
        slcu_i8_mvn_kernel(1 + k / 8);
        poison(dy, (size_t)n * rows * 4);
        slcu_mm m = {a->d, da, via ? drows : NULL, n, dy, (size_t)rows, NULL, NULL};
        if (via) m.w.data = m.w.scales = m.w.biases = NULL, m.tab = (const void *const *)dtab, m.sel = (const int *)dsel;
        CK(!slcu_matmul_i8(&m, 1, msg, sizeof msg), "%s", msg);
        free(yy);
        yy = dl(dy, (size_t)n * rows);
        gok = 1;
        for (int t = 0; t < n; t++) gok &= !memcmp(yy + (size_t)t * rows, alone + (size_t)(via ? idx[t] : t) * rows, (size_t)rows * 4);
        CK(gok, "%s %dx%d: %d tokens, kernel %d%s, differ from alone", dt_name(dt), rows, cols, n, 1 + k / 8,
           via ? " (rows, device table)" : "");
    }
    /* jobs of 1, 3, 8 and 2 tokens in one call through the table (each its own tokens in the launch of 8) */
    const int jn[4] = {1, 3, 8, 2}, j0[4] = {0, 1, 4, 12};
    for (int v = 1; v <= 4; v++) {
        slcu_i8_mvn_kernel(v);
        slcu_mm m4[4];
        for (int q = 0; q < 4; q++) {
            m4[q] = (slcu_mm){a->d, da, drows + j0[q], jn[q], dy + (size_t)j0[q] * rows, (size_t)rows, (const void *const *)dtab, dsel};
            m4[q].w.data = m4[q].w.scales = m4[q].w.biases = NULL;
        }
        poison(dy, (size_t)14 * rows * 4);
        CK(!slcu_matmul_i8(m4, 4, msg, sizeof msg), "%s", msg);
        free(yy);
        yy = dl(dy, (size_t)14 * rows);
        gok = 1;
        for (int t = 0; t < 14; t++) gok &= !memcmp(yy + (size_t)t * rows, alone + (size_t)idx[t] * rows, (size_t)rows * 4);
        CK(gok, "%s %dx%d: jobs of 1, 3, 8 and 2 tokens in one call, kernel %d, differ from alone", dt_name(dt), rows, cols, v);
    }
    slcu_i8_mvn_kernel(0);
    free(yy);
}

static void bench_mv_rows(const mat *gu_, const mat *dn_, float *dx, float *dy, void *abuf, void *dbuf, double copy_gbs) {
    char msg[256];
    const mat gu = *gu_, dn = *dn_;
    const int dshape[2][2] = {{2048, 4096}, {5120, 2048}};
    slcu_act da, dd, sw[8];
    slcu_act_bind(&dd, dbuf, 1, 768, msg, sizeof msg), slcu_act_quantize(&dd, dx, 768, msg, sizeof msg);
    for (int e = 0; e < 8; e++) /* the down matvec's SwiGLU input made in its CTAs (slcu_act sg: the model's default) */
        sw[e] = (slcu_act){.n_tok = 1, .cols = 768, .sg = dx + (size_t)e * 768, .su = dx + (size_t)(8 + e) * 768};
    /* the one-token matvec's rows a CTA (cuda_mv.cu) on the decode step's shapes: microseconds a call */
    printf("one-token matvec, us a call by rows a CTA (16 the default, -1 auto): o 2048x4096 | qkv 5120x2048 | 8 experts "
           "gate+up | down | down, SwiGLU in\n");
    const int mvr[] = {16, 4, 8, 32, -1};
    float usk[20][5];
    for (int k = 0; k < 20; k++) { /* kernel 1 + k / 5 (cuda_mv.cu: mv1_i8, mv1b_i8, mv1c_i8; cuda_mv1d.cu mv1d_i8) */
        slcu_i8_mv_rows(mvr[k % 5]);
        slcu_i8_mv1_kernel(1 + k / 5);
        float *us = usk[k];
        for (int sh = 0; sh < 2; sh++) {
            const int rows = dshape[sh][0], cols = dshape[sh][1];
            mat a;
            if (make_mat_raw(&a, DT_Q4, rows * 8, cols, 64, DT_BF16, msg)) { printf("%s\n", msg); break; }
            slcu_act_bind(&da, abuf, 1, cols, msg, sizeof msg);
            slcu_act_quantize(&da, dx, (size_t)cols, msg, sizeof msg);
            slcu_mm m = {a.d, &da, NULL, 1, dy, (size_t)rows, NULL, NULL};
            m.w.rows = rows;
            mmrun r = {&m, 1, 1, 8, 0, rows};
            us[sh] = 1e3f * slcu_time(run_mm, &r, 50);
            free_mat(&a);
        }
        slcu_mm m1[16], m2[8], m3[8];
        for (int e = 0; e < 8; e++) {
            const int ex = (e * 13) % 16;
            for (int h = 0; h < 2; h++) m1[2 * e + h] = rows_job(&gu, (2 * ex + h) * 768, 768, &da, NULL, 1, dy + (size_t)(2 * e + h) * 768);
            m2[e] = rows_job(&dn, ex * 2048, 2048, &dd, NULL, 1, dy + (size_t)e * 2048);
            m3[e] = m2[e], m3[e].a = &sw[e];
        }
        slcu_act_bind(&da, abuf, 1, 2048, msg, sizeof msg), slcu_act_quantize(&da, dx, 2048, msg, sizeof msg);
        mmrun r1 = {m1, 16, 32, 8, 0, 16 * 2 * 768}, r2 = {m2, 8, 32, 8, 0, 16 * 2048}, r3 = {m3, 8, 32, 8, 0, 16 * 2048};
        us[2] = 1e3f * slcu_time(run_mm, &r1, 50), us[3] = 1e3f * slcu_time(run_mm, &r2, 50);
        us[4] = k >= 10 ? 1e3f * slcu_time(run_mm, &r3, 50) : 0.f; /* kernels 1, 2 refuse sg */
        printf("  kernel %d rows %3d: %7.2f | %7.2f | %7.2f | %7.2f | %7.2f   layer sum %7.2f us\n", 1 + k / 5, mvr[k % 5], us[0], us[1],
               us[2], us[3], us[4], us[0] + us[1] + us[2] + (k >= 10 ? us[4] : us[3])); /* the model's down: SwiGLU in from kernel 3 */
        fflush(stdout);
    }
    /* weight bytes read a call (q4 g64 bf16: cols / 2 code bytes and cols / 64 scale and bias words a row) against the
     * copy's rate, mv1c_i8 (the default) and mv1d_i8 with their own rows a CTA */
    const double rowb[5] = {4096 / 2 + 4096 / 16, 2048 / 2 + 2048 / 16, 2048 / 2 + 2048 / 16, 768 / 2 + 768 / 16, 768 / 2 + 768 / 16};
    const double nrows[5] = {2048, 5120, 16 * 768, 8 * 2048, 8 * 2048};
    const char *names[5] = {"o 2048x4096", "q|k|v 5120x2048", "8 experts gate+up", "8 experts down", "down, SwiGLU in"};
    printf("one-token matvec, GB/s of weights (%% of the copy's %.0f GB/s), auto rows: mv1c_i8 | mv1d_i8\n", copy_gbs);
    for (int sh = 0; sh < 5; sh++) {
        const double b = rowb[sh] * nrows[sh], g3 = b / (usk[14][sh] * 1e-6) / 1e9, g4 = b / (usk[19][sh] * 1e-6) / 1e9;
        printf("  %-18s %6.2f MB: %6.2f us %5.0f GB/s (%3.0f%%) | %6.2f us %5.0f GB/s (%3.0f%%)\n", names[sh], b / 1e6, usk[14][sh], g3,
               copy_gbs > 0 ? 100 * g3 / copy_gbs : 0.0, usk[19][sh], g4, copy_gbs > 0 ? 100 * g4 / copy_gbs : 0.0);
    }
    printf("2-8 tokens (batched decode), us a call on q|k|v 5120x2048, mvn_i8 | mvnc_i8 | mv_i8 | mvnd_i8:");
    for (int n = 2; n <= 8; n *= 2) {
        mat a;
        if (make_mat_raw(&a, DT_Q4, 5120 * 8, 2048, 64, DT_BF16, msg)) { printf("%s\n", msg); break; }
        slcu_act_bind(&da, abuf, n, 2048, msg, sizeof msg), slcu_act_quantize(&da, dx, 2048, msg, sizeof msg);
        float us2[4];
        for (int v = 0; v < 4; v++) {
            slcu_i8_mvn_kernel(1 + v);
            slcu_mm m = {a.d, &da, NULL, n, dy, 5120, NULL, NULL};
            m.w.rows = 5120;
            mmrun r = {&m, 1, 1, 8, 0, 5120};
            us2[v] = 1e3f * slcu_time(run_mm, &r, 50);
        }
        printf("  %d tok %.2f | %.2f | %.2f | %.2f", n, us2[0], us2[1], us2[2], us2[3]);
        free_mat(&a);
    }
    printf("\n");
    slcu_i8_mvn_kernel(0);
    slcu_i8_mv_rows(0), slcu_i8_mv1_kernel(0);
}

/* --mvprof: one launch of each decode shape by SLUICE_CUDA_MV1=6 (cuda.h slcu_mvprof_read), its CTAs' phases: when
 * they start and end in the launch (us from its first start) and, from thread 0's clock64, how long each phase of the
 * first chunk took (us: p10 / p50 / p90 over the CTAs). After a warm-up call each. */
static int cmp_d(const void *a, const void *b) { return *(const double *)a < *(const double *)b ? -1 : *(const double *)a > *(const double *)b; }
static void pct(double *v, int n, double *p10, double *p50, double *p90) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    *p10 = v[n / 10], *p50 = v[n / 2], *p90 = v[(n * 9) / 10];
}
static void mvprof_one(const char *name, mmrun *r) {
    enum { MAXC = 8192 };
    unsigned long long *rec = malloc((size_t)MAXC * SLCU_MVP_W * sizeof *rec);
    double *v = malloc(MAXC * sizeof *v);
    int khz = 0;
    run_mm(r);
    slcu_mvprof_reset();
    run_mm(r);
    const int n = rec && v ? slcu_mvprof_read(rec, MAXC, &khz) : -1;
    if (n <= 0 || khz <= 0) {
        printf("  %-22s no records (%d)\n", name, n);
        fflush(stdout);
        free(rec), free(v);
        return;
    }
    unsigned long long t0 = ~0ull, t1 = 0;
    for (int i = 0; i < n; i++) {
        const unsigned long long *w = rec + (size_t)i * SLCU_MVP_W;
        t0 = w[1] < t0 ? w[1] : t0, t1 = w[2] > t1 ? w[2] : t1;
    }
    double a, b, c;
    printf("  %-22s %d CTAs, %llu chunk(s), span %.2f us;", name, n, rec[0] >> 32, (t1 - t0) / 1e3);
    for (int i = 0; i < n; i++) v[i] = (rec[(size_t)i * SLCU_MVP_W + 1] - t0) / 1e3;
    pct(v, n, &a, &b, &c);
    printf(" start %.2f / %.2f / %.2f;", a, b, c);
    for (int i = 0; i < n; i++) v[i] = (rec[(size_t)i * SLCU_MVP_W + 2] - t0) / 1e3;
    pct(v, n, &a, &b, &c);
    printf(" end %.2f / %.2f / %.2f\n", a, b, c);
    static const char *ph[8] = {"resolve", "issue weights", "issue activation", "wait + barrier", "compute pairs",
                                "stage + barrier", "fold + barrier", "rest + store"};
    printf("   ");
    for (int p = 0; p < 8; p++) {
        for (int i = 0; i < n; i++) {
            const unsigned long long *w = rec + (size_t)i * SLCU_MVP_W;
            v[i] = (double)(w[3 + p] - (p ? w[2 + p] : 0)) / (khz / 1e3);
        }
        pct(v, n, &a, &b, &c);
        printf(" %s %.2f/%.2f/%.2f%s", ph[p], a, b, c, p == 3 ? "\n   " : ";");
    }
    printf("\n");
    fflush(stdout); /* a run cut by a timeout keeps its shapes */
    free(rec), free(v);
}

/* --mvprof7: mvprof's launches by mv1p_i8 (SLUICE_CUDA_MV1=7, its own rows, CTAs and pairs; cuda.h slcu_mv1p_prof):
 * each CTA's start and end in the launch and, from threads 0 (folds) and 32 (does not), the cycles of its phases summed
 * over its units, in us (p10 / p50 / p90 over the CTAs) */
static void mvprof7_one(const char *name, mmrun *r) {
    enum { MAXC = 8192 };
    unsigned long long *rec = malloc((size_t)MAXC * SLCU_MV1P_W * sizeof *rec);
    double *v = malloc(MAXC * sizeof *v);
    int khz = 0;
    run_mm(r);
    slcu_mv1p_prof(1);
    run_mm(r);
    const int n = rec && v ? slcu_mv1p_prof_read(rec, MAXC, &khz) : -1;
    slcu_mv1p_prof(0);
    if (n <= 0 || khz <= 0) {
        printf("  %-22s no records (%d)\n", name, n);
        fflush(stdout);
        free(rec), free(v);
        return;
    }
    unsigned long long t0 = ~0ull, t1 = 0;
    for (int i = 0; i < n; i++) {
        const unsigned long long *w = rec + (size_t)i * SLCU_MV1P_W;
        t0 = w[1] < t0 ? w[1] : t0, t1 = w[2] > t1 ? w[2] : t1;
    }
    double a, b, c;
    for (int i = 0; i < n; i++) v[i] = (double)(rec[(size_t)i * SLCU_MV1P_W] >> 32);
    pct(v, n, &a, &b, &c);
    printf("  %-22s %d CTAs, units %.0f / %.0f / %.0f, span %.2f us;", name, n, a, b, c, (t1 - t0) / 1e3);
    for (int i = 0; i < n; i++) v[i] = (rec[(size_t)i * SLCU_MV1P_W + 1] - t0) / 1e3;
    pct(v, n, &a, &b, &c);
    printf(" start %.2f / %.2f / %.2f;", a, b, c);
    for (int i = 0; i < n; i++) v[i] = (rec[(size_t)i * SLCU_MV1P_W + 2] - t0) / 1e3;
    pct(v, n, &a, &b, &c);
    printf(" end %.2f / %.2f / %.2f\n", a, b, c);
    static const char *ph[10] = {"t0 prologue", "wait + barrier", "issue", "compute", "staging barrier", "fold",
                                 "t32 wait + barrier", "issue", "compute", "staging barrier"};
    printf("   ");
    for (int p = 0; p < 10; p++) {
        for (int i = 0; i < n; i++) v[i] = (double)rec[(size_t)i * SLCU_MV1P_W + 3 + p] / (khz / 1e3);
        pct(v, n, &a, &b, &c);
        printf(" %s %.2f/%.2f/%.2f%s", ph[p], a, b, c, p == 5 ? "\n   " : ";");
    }
    printf("\n");
    fflush(stdout); /* a run cut by a timeout keeps its shapes */
    free(rec), free(v);
}

/* --mvprof (kern 6, mv1c_i8 with each fold: the default's and SLUICE_CUDA_MVFOLD=2's) and --mvprof7 (kern 7,
 * mv1p_i8): the decode step's four matvec shapes (q4 g32 bf16), each CTA's phases by one (mvprof_one / mvprof7_one) */
static void mvprof_run(int kern, void (*one)(const char *, mmrun *)) {
    char msg[256];
    fast_fill = 1;
    mat gu, dn, o, qkv;
    if (make_mat_raw(&gu, DT_Q4, 128 * 2 * 768, 2048, 32, DT_BF16, msg) || make_mat_raw(&dn, DT_Q4, 128 * 2048, 768, 32, DT_BF16, msg) ||
        make_mat_raw(&o, DT_Q4, 2048 * 8, 4096, 32, DT_BF16, msg) || make_mat_raw(&qkv, DT_Q4, 5120 * 8, 2048, 32, DT_BF16, msg)) {
        printf("%s\n", msg);
        return;
    }
    float *dx = rnd_dev((size_t)16 * 8192, 1, NULL, msg), *dy = slcu_alloc((size_t)16 * 16384 * 4, msg, sizeof msg);
    void *abuf = slcu_alloc(slcu_act_bytes(1, 8192), msg, sizeof msg), *bbuf = slcu_alloc(slcu_act_bytes(1, 8192), msg, sizeof msg);
    slcu_act a2, a4, sw[8];
    slcu_act_bind(&a2, abuf, 1, 2048, msg, sizeof msg), slcu_act_quantize(&a2, dx, 2048, msg, sizeof msg);
    slcu_act_bind(&a4, bbuf, 1, 4096, msg, sizeof msg), slcu_act_quantize(&a4, dx, 4096, msg, sizeof msg);
    for (int e = 0; e < 8; e++) /* the down matvec's SwiGLU input made in its CTAs (the model's default) */
        sw[e] = (slcu_act){.n_tok = 1, .cols = 768, .sg = dx + (size_t)e * 768, .su = dx + (size_t)(8 + e) * 768};
    slcu_i8_mv1_kernel(kern), slcu_i8_mv_rows(-1);
    slcu_mm mo = {o.d, &a4, NULL, 1, dy, 2048, NULL, NULL}, mq = {qkv.d, &a2, NULL, 1, dy, 5120, NULL, NULL};
    mo.w.rows = 2048, mq.w.rows = 5120;
    mmrun ro = {&mo, 1, 1, 8, 0, 2048}, rq = {&mq, 1, 1, 8, 0, 5120};
    slcu_mm m1[16], m3[8];
    for (int e = 0; e < 8; e++) {
        const int ex = (e * 13) % 16;
        for (int h = 0; h < 2; h++) m1[2 * e + h] = rows_job(&gu, (2 * ex + h) * 768, 768, &a2, NULL, 1, dy + (size_t)(2 * e + h) * 768);
        m3[e] = rows_job(&dn, ex * 2048, 2048, &sw[e], NULL, 1, dy + (size_t)e * 2048);
    }
    mmrun r1 = {m1, 16, 32, 8, 0, 16 * 2 * 768}, r3 = {m3, 8, 32, 8, 0, 16 * 2048};
    for (int f = 1; f <= (kern == 6 ? 2 : 1); f++) { /* mv1c_i8: the fold as before, then row-major (SLUICE_CUDA_MVFOLD=2) */
        if (kern == 6) {
            slcu_i8_mvfold(f);
            printf("one-token matvec phases (SLUICE_CUDA_MV1=6: mv1c_i8, q4 g32 bf16, auto rows, SLUICE_CUDA_MVFOLD=%d; us):\n", f);
        } else printf("mv1p_i8 phases (SLUICE_CUDA_MV1=7, q4 g32 bf16, its own rows, CTAs and pairs; us):\n");
        fflush(stdout);
        one("o 2048x4096", &ro);
        one("q|k|v 5120x2048", &rq);
        one("8 experts gate+up", &r1);
        one("8 experts down, SwiGLU", &r3);
    }
    slcu_i8_mv_rows(0), slcu_i8_mv1_kernel(0), slcu_i8_mvfold(0);
    free_mat(&gu), free_mat(&dn), free_mat(&o), free_mat(&qkv);
    slcu_free(dx), slcu_free(dy), slcu_free(abuf), slcu_free(bbuf);
}

static void mvprof(void) { mvprof_run(6, mvprof_one); }
static void mvprof7(void) { mvprof_run(7, mvprof7_one); }

/* --bench-mv: bench_mv_rows alone (its matrices made here) */
static void bench_mv(void) {
    char msg[256];
    fast_fill = 1;
    mat gu, dn;
    if (make_mat_raw(&gu, DT_Q4, 128 * 2 * 768, 2048, 64, DT_BF16, msg) || make_mat_raw(&dn, DT_Q4, 128 * 2048, 768, 64, DT_BF16, msg)) {
        printf("%s\n", msg);
        return;
    }
    float *dx = rnd_dev((size_t)8 * 8192, 1, NULL, msg), *dy = slcu_alloc((size_t)8 * 16384 * 4, msg, sizeof msg);
    void *abuf = slcu_alloc(slcu_act_bytes(8, 8192), msg, sizeof msg), *dbuf = slcu_alloc(slcu_act_bytes(1, 768), msg, sizeof msg);
    bench_mv_rows(&gu, &dn, dx, dy, abuf, dbuf, 0); /* no copy measured: the % columns read 0 */
    free_mat(&gu), free_mat(&dn);
    slcu_free(dx), slcu_free(dy), slcu_free(abuf), slcu_free(dbuf);
}

/* cuda.h slcu_act sg: the down matvec making its SwiGLU input in its CTAs == slcu_swiglu_q, then the matvec on its
 * int8 form, bitwise: q8 / q4, groups 32 / 64 / 128, a row of 768 (the 30B shape's experts) and one of 4096 (several
 * chunks), directly and through the device table, k rows in one launch as moe_resident gives them; with mv1c_i8 (the
 * default) and mv1d_i8 at 4, 32 and its own rows a CTA, all against the default on the separate int8 form */
static void check_swi_gate(void);
static void check_swi_down(void) {
    char msg[256] = "";
    enum { K = 3, ROWS = 99 }; /* odd: a part tile at every row count */
    const int cols_[2] = {768, 4096}, groups[3] = {32, 64, 128};
    for (int c = 0; c < 2 * 2 * 3; c++) {
        const dt_type dt = c % 2 ? DT_Q4 : DT_Q8;
        const int I = cols_[c / 6], group = groups[c / 2 % 3];
        mat a;
        if (make_mat(&a, dt, ROWS, I, group, DT_F16, msg)) { CK(0, "%s", msg); return; }
        float *g = rnd_dev((size_t)K * I, 2, NULL, msg), *u = rnd_dev((size_t)K * I, 1, NULL, msg);
        float *mid = slcu_alloc((size_t)K * I * 4, msg, sizeof msg), *dy = slcu_alloc((size_t)2 * K * ROWS * 4, msg, sizeof msg);
        void *ab = slcu_alloc(slcu_act_bytes(K, I), msg, sizeof msg);
        const void *tab[3] = {a.d.data, a.d.scales, a.d.biases};
        const int sel = 0;
        void *dtab = dev_copy(tab, sizeof tab, msg), *dsel = dev_copy(&sel, sizeof sel, msg);
        slcu_act ma, mi[K];
        slcu_mm mm[K];
        CK(!slcu_act_bind(&ma, ab, K, I, msg, sizeof msg) && !slcu_swiglu_q(g, u, mid, &ma, msg, sizeof msg), "%s", msg);
        const int nb = I / 32, ns = nb + nb / 2 + nb / 4;
        float *y0 = NULL; /* the default kernel on the separate int8 form: every other run's reference */
        /* mv1c_i8; mv1d_i8 auto, 1 and 8 rows a warp; mv1p_i8 auto, 4 and 32 rows a tile on 2 CTAs (each walks the three
         * jobs' tiles, making each job's SwiGLU input again; 4096 columns in runs of 64 blocks at 32 rows), 8 rows with
         * 4 pairs a thread (q4); mv1c_i8 with the row-major fold (SLUICE_CUDA_MVFOLD=2) at its own rows, 4 and 32 */
        enum { NV = 11 };
        const int kern[NV] = {3, 4, 4, 4, 7, 7, 7, 7, 3, 3, 3}, mvr[NV] = {0, -1, 4, 32, -1, 4, 32, 8, 0, 4, 32};
        const int ctas[NV] = {0, 0, 0, 0, 0, -2, -2, -2, 0, 0, 0};
        for (int v = 0; v < NV * 2 * 2; v++) {
            const int kv = v / 4, via = v / 2 % 2, fuse = v % 2;
            slcu_i8_mv1_kernel(kern[kv]), slcu_i8_mv_rows(mvr[kv]), slcu_i8_mv1p_ctas(ctas[kv]), slcu_i8_mv1p_pairs(kv == 7 ? 4 : 0);
            slcu_i8_mvfold(kv >= 8 ? 2 : 1);
            for (int s = 0; s < K; s++) {
                mi[s] = fuse ? (slcu_act){.n_tok = 1, .cols = I, .sg = g + (size_t)s * I, .su = u + (size_t)s * I}
                             : (slcu_act){.n_tok = 1, .cols = I, .q = ma.q + (size_t)s * I, .q4 = ma.q4 + (size_t)s * I,
                                          .d = ma.d + (size_t)s * nb, .s = ma.s + (size_t)s * ns};
                mm[s] = (slcu_mm){.w = a.d, .a = &mi[s], .n_tok = 1, .y = dy + (size_t)s * ROWS, .ldy = ROWS};
                if (via) mm[s].w.data = mm[s].w.scales = mm[s].w.biases = NULL, mm[s].tab = dtab, mm[s].sel = dsel;
            }
            poison(dy, (size_t)K * ROWS * 4);
            CK(!slcu_matmul_i8(mm, K, msg, sizeof msg), "%s", msg);
            float *y = dl(dy, (size_t)K * ROWS);
            if (!y0) y0 = y;
            else {
                CK(!memcmp(y, y0, (size_t)K * ROWS * 4), "%s %d cols group %d, kernel %d%s rows %d%s: %s differs", dt_name(dt), I, group,
                   kern[kv], kv >= 8 ? " (MVFOLD=2)" : "", mvr[kv], via ? " (device table)" : "",
                   fuse ? "the SwiGLU made in the down matvec" : "the matvec");
                free(y);
            }
        }
        slcu_i8_mv1_kernel(0), slcu_i8_mv_rows(0), slcu_i8_mv1p_ctas(0), slcu_i8_mv1p_pairs(0), slcu_i8_mvfold(0);
        free(y0);
        slcu_free(g), slcu_free(u), slcu_free(mid), slcu_free(dy), slcu_free(ab), slcu_free(dtab), slcu_free(dsel), free_mat(&a);
    }
    check_swi_gate(); /* SLUICE_CUDA_SWIDOWN=2 | 3: the SwiGLU made by gate/up's CTAs */
}

/* --bench-mv7: mv1p_i8 (SLUICE_CUDA_MV1=7) against mv1c_i8 (the default) on the 30B-A3B decode step's shapes, q4 with
 * bf16 scales in groups of 64 and of 32 (a Q4_0 GGUF's pack): microseconds a launch (50 back to back, each on weights
 * not in L2: run_mm's 8 sets), PDL off and on, mv1p_i8's rows a tile and CTAs an SM swept and its pairs a thread
 * forced to 2 and 4 (q4: 4 where a row has the blocks, else 2); then GB/s of the weights
 * read (codes, scale and bias words) against a device-to-device copy's (read + write) in the same process. */
static void bench_mv7(void) {
    char msg[256];
    fast_fill = 1;
    const size_t cb = (size_t)1 << 30;
    void *cs = slcu_alloc(cb, msg, sizeof msg), *cd = slcu_alloc(cb, msg, sizeof msg);
    float best = 1e30f;
    for (int i = 0; i < 5; i++) {
        float ms = 1e30f;
        slcu_bench_copy(cd, cs, cb, &ms);
        best = ms < best ? ms : best;
    }
    slcu_free(cs), slcu_free(cd);
    const double copy_gbs = 2.0 * cb / (best * 1e-3) / 1e9;
    printf("bandwidth: device-to-device copy %.0f GB/s (read + write)\n", copy_gbs);
    fflush(stdout);
    float *dx = rnd_dev((size_t)16 * 8192, 1, NULL, msg), *dy = slcu_alloc((size_t)16 * 16384 * 4, msg, sizeof msg);
    void *b2 = slcu_alloc(slcu_act_bytes(1, 8192), msg, sizeof msg), *b4 = slcu_alloc(slcu_act_bytes(1, 8192), msg, sizeof msg);
    void *b7 = slcu_alloc(slcu_act_bytes(1, 8192), msg, sizeof msg);
    slcu_act a2, a4, a7, sw[8];
    slcu_act_bind(&a2, b2, 1, 2048, msg, sizeof msg), slcu_act_quantize(&a2, dx, 2048, msg, sizeof msg);
    slcu_act_bind(&a4, b4, 1, 4096, msg, sizeof msg), slcu_act_quantize(&a4, dx, 4096, msg, sizeof msg);
    slcu_act_bind(&a7, b7, 1, 768, msg, sizeof msg), slcu_act_quantize(&a7, dx, 768, msg, sizeof msg);
    for (int e = 0; e < 8; e++) /* the down matvec's SwiGLU input made in its CTAs (the model's default) */
        sw[e] = (slcu_act){.n_tok = 1, .cols = 768, .sg = dx + (size_t)e * 768, .su = dx + (size_t)(8 + e) * 768};
    enum { NC = 4 + 5 * 3 + 2, NS = 5 };
    const char *names[NS] = {"o 2048x4096", "q|k|v 5120x2048", "8 experts gate+up", "8 experts down", "down, SwiGLU in"};
    for (int gi = 0; gi < 2; gi++) {
        const int group = gi ? 32 : 64;
        mat gu, dn, o, qkv;
        if (make_mat_raw(&gu, DT_Q4, 128 * 2 * 768, 2048, group, DT_BF16, msg) || make_mat_raw(&dn, DT_Q4, 128 * 2048, 768, group, DT_BF16, msg) ||
            make_mat_raw(&o, DT_Q4, 2048 * 8, 4096, group, DT_BF16, msg) || make_mat_raw(&qkv, DT_Q4, 5120 * 8, 2048, group, DT_BF16, msg)) {
            printf("%s\n", msg);
            return;
        }
        slcu_mm mo = {o.d, &a4, NULL, 1, dy, 2048, NULL, NULL}, mq = {qkv.d, &a2, NULL, 1, dy, 5120, NULL, NULL};
        mo.w.rows = 2048, mq.w.rows = 5120;
        slcu_mm m1[16], m2[8], m3[8];
        for (int e = 0; e < 8; e++) {
            const int ex = (e * 13) % 16;
            for (int h = 0; h < 2; h++) m1[2 * e + h] = rows_job(&gu, (2 * ex + h) * 768, 768, &a2, NULL, 1, dy + (size_t)(2 * e + h) * 768);
            m2[e] = rows_job(&dn, ex * 2048, 2048, &a7, NULL, 1, dy + (size_t)e * 2048);
            m3[e] = m2[e], m3[e].a = &sw[e];
        }
        mmrun rs[NS] = {{&mo, 1, 1, 8, 0, 2048}, {&mq, 1, 1, 8, 0, 5120}, {m1, 16, 32, 8, 0, 16 * 2 * 768},
                        {m2, 8, 32, 8, 0, 16 * 2048}, {m3, 8, 32, 8, 0, 16 * 2048}};
        const double rowb[NS] = {4096 / 2 + 4096.0 / group * 4, 2048 / 2 + 2048.0 / group * 4, 2048 / 2 + 2048.0 / group * 4,
                                 768 / 2 + 768.0 / group * 4, 768 / 2 + 768.0 / group * 4}; /* codes, scale and bias words */
        const double nrows[NS] = {2048, 5120, 16 * 768, 8 * 2048, 8 * 2048};
        printf("one-token matvec, q4 g%d bf16, us a launch: o 2048x4096 | q|k|v 5120x2048 | 8 experts gate+up | down | down, SwiGLU in\n", group);
        float us[NC][NS];
        for (int c = 0; c < NC; c++) { /* 0-3: mv1c_i8 and mv1p_i8 auto, PDL off / on; then mv1p_i8 rows x CTAs an SM; pairs 2, 4 */
            const int k7 = c == 1 || c == 3 || c >= 4, pd = c == 2 || c == 3, sweep = c >= 4 && c < NC - 2;
            const int rows = sweep ? (int[]){-1, 4, 8, 16, 32}[(c - 4) % 5] : -1, cps = sweep ? 1 + (c - 4) / 5 : 0;
            const int np = c == NC - 2 ? 2 : c == NC - 1 ? 4 : 0;
            slcu_i8_mv1_kernel(k7 ? 7 : 3), slcu_i8_mv_rows(rows), slcu_i8_pdl(pd), slcu_i8_mv1p_ctas(cps), slcu_i8_mv1p_pairs(np);
            for (int sh = 0; sh < NS; sh++) us[c][sh] = 1e3f * slcu_time(run_mm, &rs[sh], 50);
            printf("  %-7s %-3s rows %3d", k7 ? "mv1p_i8" : "mv1c_i8", pd ? "PDL" : "", rows);
            printf(k7 && cps ? " CTAs/SM %d" : k7 && np ? " pairs %d  " : "           ", k7 && cps ? cps : np);
            for (int sh = 0; sh < NS; sh++) printf(" %s %7.2f", sh ? "|" : ":", us[c][sh]);
            printf("   layer %7.2f us\n", us[c][0] + us[c][1] + us[c][2] + us[c][4]);
            fflush(stdout);
        }
        printf("  GB/s of the weights (%% of the copy's), auto rows, PDL off: mv1c_i8 | mv1p_i8\n");
        for (int sh = 0; sh < NS; sh++) {
            const double b = rowb[sh] * nrows[sh], g3 = b / (us[0][sh] * 1e-6) / 1e9, g7 = b / (us[1][sh] * 1e-6) / 1e9;
            printf("    %-18s %6.2f MB: %6.2f us %5.0f GB/s (%3.0f%%) | %6.2f us %5.0f GB/s (%3.0f%%)\n", names[sh], b / 1e6, us[0][sh], g3,
                   100 * g3 / copy_gbs, us[1][sh], g7, 100 * g7 / copy_gbs);
        }
        free_mat(&gu), free_mat(&dn), free_mat(&o), free_mat(&qkv);
    }
    slcu_i8_mv1_kernel(0), slcu_i8_mv_rows(0), slcu_i8_pdl(-1), slcu_i8_mv1p_ctas(0), slcu_i8_mv1p_pairs(0);
    slcu_free(dx), slcu_free(dy), slcu_free(b2), slcu_free(b4), slcu_free(b7);
}

/* --bench-fold: mv1c_i8 (the default kernel, auto rows) with its fold as before against row-major (SLUICE_CUDA_MVFOLD=2)
 * on the 30B-A3B decode step's shapes, q4 bf16 in groups of 32 and 64: microseconds a launch (50 back to back, each on
 * weights not in L2: run_mm's 8 sets), PDL off and on, the two folds alternated over 3 rounds; then each one's best
 * and their ratio. */
static void bench_fold(void) {
    char msg[256];
    fast_fill = 1;
    float *dx = rnd_dev((size_t)16 * 8192, 1, NULL, msg), *dy = slcu_alloc((size_t)16 * 16384 * 4, msg, sizeof msg);
    void *b2 = slcu_alloc(slcu_act_bytes(1, 8192), msg, sizeof msg), *b4 = slcu_alloc(slcu_act_bytes(1, 8192), msg, sizeof msg);
    slcu_act a2, a4, sw[8];
    slcu_act_bind(&a2, b2, 1, 2048, msg, sizeof msg), slcu_act_quantize(&a2, dx, 2048, msg, sizeof msg);
    slcu_act_bind(&a4, b4, 1, 4096, msg, sizeof msg), slcu_act_quantize(&a4, dx, 4096, msg, sizeof msg);
    for (int e = 0; e < 8; e++) /* the down matvec's SwiGLU input made in its CTAs (the model's default) */
        sw[e] = (slcu_act){.n_tok = 1, .cols = 768, .sg = dx + (size_t)e * 768, .su = dx + (size_t)(8 + e) * 768};
    enum { NS = 4, NR = 3 };
    for (int gi = 0; gi < 2; gi++) {
        const int group = gi ? 64 : 32;
        mat gu, dn, o, qkv;
        if (make_mat_raw(&gu, DT_Q4, 128 * 2 * 768, 2048, group, DT_BF16, msg) || make_mat_raw(&dn, DT_Q4, 128 * 2048, 768, group, DT_BF16, msg) ||
            make_mat_raw(&o, DT_Q4, 2048 * 8, 4096, group, DT_BF16, msg) || make_mat_raw(&qkv, DT_Q4, 5120 * 8, 2048, group, DT_BF16, msg)) {
            printf("%s\n", msg);
            return;
        }
        slcu_mm mo = {o.d, &a4, NULL, 1, dy, 2048, NULL, NULL}, mq = {qkv.d, &a2, NULL, 1, dy, 5120, NULL, NULL};
        mo.w.rows = 2048, mq.w.rows = 5120;
        slcu_mm m1[16], m3[8];
        for (int e = 0; e < 8; e++) {
            const int ex = (e * 13) % 16;
            for (int h = 0; h < 2; h++) m1[2 * e + h] = rows_job(&gu, (2 * ex + h) * 768, 768, &a2, NULL, 1, dy + (size_t)(2 * e + h) * 768);
            m3[e] = rows_job(&dn, ex * 2048, 2048, &sw[e], NULL, 1, dy + (size_t)e * 2048);
        }
        mmrun rs[NS] = {{&mo, 1, 1, 8, 0, 2048}, {&mq, 1, 1, 8, 0, 5120}, {m1, 16, 32, 8, 0, 16 * 2 * 768}, {m3, 8, 32, 8, 0, 16 * 2048}};
        printf("mv1c_i8, q4 g%d bf16, auto rows, us a launch: o 2048x4096 | q|k|v 5120x2048 | 8 experts gate+up | down, SwiGLU in\n", group);
        float best[2][2][NS];
        for (int i = 0; i < 2 * 2 * NS; i++) best[i / (2 * NS)][i / NS % 2][i % NS] = 1e30f;
        for (int rd = 0; rd < NR; rd++)
            for (int c = 0; c < 4; c++) { /* PDL off: fold 1, 2; PDL on: fold 1, 2 */
                const int pd = c / 2, f = c % 2;
                slcu_i8_mv1_kernel(3), slcu_i8_mv_rows(-1), slcu_i8_pdl(pd), slcu_i8_mvfold(1 + f);
                float us[NS];
                for (int sh = 0; sh < NS; sh++) {
                    us[sh] = 1e3f * slcu_time(run_mm, &rs[sh], 50);
                    if (us[sh] < best[pd][f][sh]) best[pd][f][sh] = us[sh];
                }
                printf("  round %d %-3s MVFOLD=%d", rd, pd ? "PDL" : "", 1 + f);
                for (int sh = 0; sh < NS; sh++) printf(" %s %7.2f", sh ? "|" : ":", us[sh]);
                printf("   layer %7.2f us\n", us[0] + us[1] + us[2] + us[3]);
                fflush(stdout);
            }
        for (int pd = 0; pd < 2; pd++) {
            printf("  best of %d, %-3s MVFOLD=2 / MVFOLD=1:", NR, pd ? "PDL" : "");
            float l1 = 0, l2 = 0;
            for (int sh = 0; sh < NS; sh++) {
                printf(" %s %.2f/%.2f = %.3f", sh ? "|" : "", best[pd][1][sh], best[pd][0][sh], best[pd][1][sh] / best[pd][0][sh]);
                l1 += best[pd][0][sh], l2 += best[pd][1][sh];
            }
            printf("   layer %.2f/%.2f = %.3f\n", l2, l1, l2 / l1);
        }
        fflush(stdout);
        free_mat(&gu), free_mat(&dn), free_mat(&o), free_mat(&qkv);
    }
    slcu_i8_mv1_kernel(0), slcu_i8_mv_rows(0), slcu_i8_pdl(-1), slcu_i8_mvfold(0);
    slcu_free(dx), slcu_free(dy), slcu_free(b2), slcu_free(b4);
}

/* --fold: the checks that take mv1c_i8 with SLUICE_CUDA_MVFOLD=2 (check_mv_rows: every shape and scale type of the full
 * run's check_i8, the implied biases' check_ibias_all; check_swi_down: the SwiGLU-in jobs), then bench_fold if they pass */
static int fold_main(void) {
    const int groups[] = {32, 64, 128};
    const dt_type sdts[] = {DT_F16, DT_BF16, DT_F32};
    for (int g = 0; g < 3; g++) {
        check_i8(DT_Q8, 300, 1024, groups[g], sdts[g]);
        check_i8(DT_Q4, 300, 1024, groups[g], sdts[(g + 1) % 3]);
    }
    check_i8(DT_Q4, 768, 2048, 64, DT_BF16);
    check_i8(DT_Q8, 129, 768, 128, DT_F16);
    check_i8(DT_Q4, 100, 160, 32, DT_BF16);
    check_i8(DT_Q8, 70, 96, 32, DT_F32);
    check_i8(DT_Q4, 257, 4096, 32, DT_BF16);
    check_ibias_all();
    check_swi_down();
    printf("%s: %d failure%s\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    fflush(stdout);
    if (!failures) bench_fold();
    return failures ? 1 : 0;
}

/* ---- SLUICE_CUDA_SWIDOWN=2 | 3 (cuda.h slcu_matmul_i8_swi): the down input made by gate/up's CTAs ---- */

/* One token's routed experts as backend_cuda.c moe_resident gives them: E experts' gate (rows 2 e I of gu), up (rows
 * (2 e + 1) I) and down (rows e H of dn) in a device table [3][E][3] (layer_tab's), k slots choosing sel (device) */
typedef struct {
    int E, k, I, H;
    const slcu_act *xa;              /* the token's int8 input, 1 x H */
    const void *const *tab;          /* device [3][E][3] */
    const int *sel;                  /* device [k] */
    slcu_mat gate, up, down;         /* the shapes and types (pointers from the table) */
    float *g, *u, *y;                /* device [k][I], [k][I], [k][H] */
    slcu_act mid;                    /* k x I: the new path's down input */
} swi_case;

/* gate/up's 2 k jobs (slot s: 2 s, 2 s + 1) and down's k: sg / su inputs (fused, the default) or mid's rows */
static void swi_jobs(const swi_case *c, slcu_mm *gu, slcu_mm *dn, slcu_act *mi, int fused) {
    const int nb = c->I / 32, ns = nb + nb / 2 + nb / 4;
    for (int s = 0; s < 2 * c->k; s++)
        gu[s] = (slcu_mm){.w = s & 1 ? c->up : c->gate, .a = c->xa, .tab = c->tab + (size_t)(s & 1) * 3 * c->E, .sel = c->sel + s / 2,
                          .n_tok = 1, .y = (s & 1 ? c->u : c->g) + (size_t)(s / 2) * c->I, .ldy = (size_t)c->I};
    for (int s = 0; s < c->k; s++) {
        mi[s] = fused ? (slcu_act){.n_tok = 1, .cols = c->I, .sg = c->g + (size_t)s * c->I, .su = c->u + (size_t)s * c->I}
                      : (slcu_act){.n_tok = 1, .cols = c->I, .q = c->mid.q + (size_t)s * c->I, .q4 = c->mid.q4 + (size_t)s * c->I,
                                   .d = c->mid.d + (size_t)s * nb, .s = c->mid.s + (size_t)s * ns};
        dn[s] = (slcu_mm){.w = c->down, .a = &mi[s], .tab = c->tab + (size_t)6 * c->E, .sel = c->sel + s, .n_tok = 1,
                          .y = c->y + (size_t)s * c->H, .ldy = (size_t)c->H};
    }
}

/* The pair: 0 as today (gate/up, then down with the SwiGLU made in its CTAs), 1 SLUICE_CUDA_SWIDOWN=2 (gate/up with the
 * SwiGLU tail into mid, then down on mid resolving early), 2 =3 (the tail's CTAs trigger the down launch), 3 =2's gate/up
 * and mv1c_i8's down on mid (waiting first, find_job: what the early down saves). part: 1 the gate/up launch alone, 2
 * the down launch alone, 3 both. 1 when the new path took the launch (0 for mode 0 or refused). */
static int swi_pair(const swi_case *c, int mode, int part, char *msg) {
    slcu_mm gu[64], dn[32];
    slcu_act mi[32];
    int took = 0;
    swi_jobs(c, gu, dn, mi, mode == 0);
    if (part & 1) {
        took = mode ? slcu_matmul_i8_swi(gu, 2 * c->k, &c->mid, mode == 2, msg, 256) : 0;
        if (took < 0 || (!took && slcu_matmul_i8(gu, 2 * c->k, msg, 256))) return -1;
    }
    if ((part & 2) && (mode == 1 || mode == 2 ? slcu_matmul_i8_early(dn, c->k, msg, 256) : slcu_matmul_i8(dn, c->k, msg, 256))) return -1;
    return took;
}

/* check_swi_gate (in check_swi_down: the full run, and --swi): the new pair bitwise today's: g and u, mid against
 * slcu_swiglu_q of them (codes in both orders, block scales, every group's sums), down's y; every rows a CTA, PDL off and
 * on, both folds (SLUICE_CUDA_MVFOLD), with and without the trigger, each twice (the quad counters put back, or the
 * second's mid stays poisoned); q4 / q8 gate/up and down, groups 32 / 64 / 128, f16 / bf16 / f32 scales; I = 768 (the
 * 30B shape), 160 (5 blocks: a last quad of one block), 192 (of two: a pair's s64, no s128) and 4096 (32 quads) with
 * 16 slots (32 jobs); slots choosing one expert twice */
static void check_swi_gate(void) {
    char msg[256] = "";
    enum { E = 4, H = 256, NV = 5 * 2 * 2 * 2 };
    const struct { dt_type gdt, ddt; int gg, dg; dt_type sdt; int I, k; } cs[4] = {
        {DT_Q4, DT_Q4, 64, 64, DT_BF16, 768, 8}, {DT_Q8, DT_Q4, 32, 32, DT_F16, 160, 8}, {DT_Q4, DT_Q8, 32, 64, DT_BF16, 192, 8},
        {DT_Q4, DT_Q8, 128, 128, DT_F32, 4096, 16}};
    for (int ci = 0; ci < 4; ci++) {
        const int I = cs[ci].I, k = cs[ci].k;
        mat gm, dm;
        if (make_mat(&gm, cs[ci].gdt, E * 2 * I, H, cs[ci].gg, cs[ci].sdt, msg) || make_mat(&dm, cs[ci].ddt, E * H, I, cs[ci].dg, cs[ci].sdt, msg)) {
            CK(0, "%s", msg);
            return;
        }
        const void *ht[3 * E * 3];
        for (int e = 0; e < E; e++)
            for (int m = 0; m < 3; m++) {
                const slcu_mat w = m < 2 ? sub_mat(&gm, (2 * e + m) * I, I) : sub_mat(&dm, e * H, H);
                const void **p = ht + ((size_t)m * E + e) * 3;
                p[0] = w.data, p[1] = w.scales, p[2] = w.biases;
            }
        int hs[16];
        for (int s = 0; s < 16; s++) hs[s] = (s * 3 + (s == 3)) % E; /* slots 0 and 4 (and more) choose one expert */
        void *xb = slcu_alloc(slcu_act_bytes(1, H), msg, sizeof msg), *mb = slcu_alloc(slcu_act_bytes(k, I), msg, sizeof msg);
        void *rb = slcu_alloc(slcu_act_bytes(k, I), msg, sizeof msg);
        float *dx = rnd_dev(H, 1, NULL, msg), *mf = slcu_alloc((size_t)k * I * 4, msg, sizeof msg);
        slcu_act xa, ref;
        swi_case c = {E, k, I, H, &xa, dev_copy(ht, sizeof ht, msg), dev_copy(hs, sizeof hs, msg), gm.d, gm.d, dm.d,
                      slcu_alloc((size_t)k * I * 4, msg, sizeof msg), slcu_alloc((size_t)k * I * 4, msg, sizeof msg),
                      slcu_alloc((size_t)k * H * 4, msg, sizeof msg), {0}};
        c.gate.rows = c.up.rows = I, c.down.rows = H;
        c.gate.data = c.gate.scales = c.gate.biases = c.up.data = c.up.scales = c.up.biases = NULL;
        c.down.data = c.down.scales = c.down.biases = NULL;
        CK(!slcu_act_bind(&xa, xb, 1, H, msg, sizeof msg) && !slcu_act_quantize(&xa, dx, H, msg, sizeof msg), "%s", msg);
        CK(!slcu_act_bind(&c.mid, mb, k, I, msg, sizeof msg) && !slcu_act_bind(&ref, rb, k, I, msg, sizeof msg), "%s", msg);
        /* the reference: today's pair with the default kernels, and slcu_swiglu_q of its g and u */
        CK(swi_pair(&c, 0, 3, msg) == 0, "%s", msg);
        CK(!slcu_swiglu_q(c.g, c.u, mf, &ref, msg, sizeof msg), "%s", msg);
        float *g0 = dl(c.g, (size_t)k * I), *u0 = dl(c.u, (size_t)k * I), *y0 = dl(c.y, (size_t)k * H);
        const int mvr[5] = {4, 8, 16, 32, -1};
        for (int v = 0; v < 2 * NV; v++) {
            const int rows = mvr[v / 2 % 5], pdl = v / 10 % 2, fold = 1 + v / 20 % 2, trig = v / 40 % 2;
            slcu_i8_mv_rows(rows), slcu_i8_pdl(pdl), slcu_i8_mvfold(fold);
            poison(c.g, (size_t)k * I * 4), poison(c.u, (size_t)k * I * 4), poison(c.y, (size_t)k * H * 4);
            poison(mb, slcu_act_bytes(k, I));
            const int took = swi_pair(&c, 1 + trig, 3, msg);
            CK(took == 1, "%s g%d / %s g%d I %d, %d slots: the gate/up + SwiGLU launch not taken (%d) %s", dt_name(cs[ci].gdt), cs[ci].gg,
               dt_name(cs[ci].ddt), cs[ci].dg, I, k, took, msg);
            float *g = dl(c.g, (size_t)k * I), *u = dl(c.u, (size_t)k * I), *y = dl(c.y, (size_t)k * H);
            CK(!memcmp(g, g0, (size_t)k * I * 4) && !memcmp(u, u0, (size_t)k * I * 4) && same_act(&c.mid, &ref) &&
                   !memcmp(y, y0, (size_t)k * H * 4),
               "%s g%d / %s g%d %s I %d, %d slots, rows %d%s MVFOLD=%d%s (run %d): %s differs", dt_name(cs[ci].gdt), cs[ci].gg,
               dt_name(cs[ci].ddt), cs[ci].dg, dt_name(cs[ci].sdt), I, k, rows, pdl ? " PDL" : "", fold, trig ? " trigger" : "", v % 2,
               memcmp(g, g0, (size_t)k * I * 4) || memcmp(u, u0, (size_t)k * I * 4) ? "gate/up's output"
               : !same_act(&c.mid, &ref)                                          ? "the int8 SwiGLU (mid)"
                                                                                  : "the down matvec's output");
            free(g), free(u), free(y);
        }
        slcu_i8_mv1_kernel(4); /* mv1d_i8 has no such tail: refused, nothing queued */
        CK(swi_pair(&c, 1, 1, msg) == 0, "the gate/up + SwiGLU launch taken with SLUICE_CUDA_MV1=4");
        slcu_i8_mv1_kernel(0), slcu_i8_mv_rows(0), slcu_i8_pdl(-1), slcu_i8_mvfold(0);
        free(g0), free(u0), free(y0);
        slcu_free(xb), slcu_free(mb), slcu_free(rb), slcu_free(dx), slcu_free(mf), slcu_free((void *)c.tab), slcu_free((void *)c.sel);
        slcu_free(c.g), slcu_free(c.u), slcu_free(c.y);
        free_mat(&gm), free_mat(&dm);
    }
}

/* --swi's timed call: the pair (or one launch of it) of mode on the next of NSEL slot sets (other experts each call: the
 * weights mostly not in L2) */
enum { SWI_NSEL = 16 };
typedef struct { swi_case c; const int *sel0; int mode, part, it; } swi_run;
static void swi_run_fn(void *p) {
    swi_run *r = p;
    char msg[256];
    r->c.sel = r->sel0 + (size_t)(r->it++ % SWI_NSEL) * r->c.k;
    if (swi_pair(&r->c, r->mode, r->part, msg) < 0) CK(0, "%s", msg);
}

/* --swi: check_swi_gate, then (if it passed) today's pair against SLUICE_CUDA_SWIDOWN=2 and =3 (and =2's gate/up with
 * mv1c_i8's down on mid) on the 30B-A3B decode shape (128 experts, 8 slots, H 2048, I 768; q4 bf16 in groups of 32 and
 * 64, auto rows, MVFOLD=1): us a call, the median of 200 (slcu_time_median: each call between its own events, after a
 * warm-up), of gate/up alone, of down alone and of the pair, PDL off and on, the four alternated over 3 rounds; then the
 * best round of each and new / today */
static int swi_main(void) {
    check_swi_gate();
    printf("%s: %d failure%s\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    fflush(stdout);
    if (failures) return 1;
    char msg[256] = "";
    fast_fill = 1;
    enum { E = 128, K = 8, H = 2048, I = 768, NR = 3, REPS = 200 };
    static const char *mname[4] = {"today (SwiGLU in down)", "SWIDOWN=2", "SWIDOWN=3 (trigger)", "=2, down waits first"};
    static const char *pname[3] = {"gate/up", "down", "pair"};
    for (int gi = 0; gi < 2; gi++) {
        const int group = gi ? 64 : 32;
        mat gm, dm;
        if (make_mat_raw(&gm, DT_Q4, E * 2 * I, H, group, DT_BF16, msg) || make_mat_raw(&dm, DT_Q4, E * H, I, group, DT_BF16, msg)) {
            printf("%s\n", msg);
            return 1;
        }
        static const void *ht[3 * E * 3];
        for (int e = 0; e < E; e++)
            for (int m = 0; m < 3; m++) {
                const slcu_mat w = m < 2 ? sub_mat(&gm, (2 * e + m) * I, I) : sub_mat(&dm, e * H, H);
                const void **p = ht + ((size_t)m * E + e) * 3;
                p[0] = w.data, p[1] = w.scales, p[2] = w.biases;
            }
        int hs[SWI_NSEL * K];
        for (int i = 0; i < SWI_NSEL * K; i++) hs[i] = (i / K * 37 + i % K * 13) % E; /* 8 experts a set, apart */
        void *xb = slcu_alloc(slcu_act_bytes(1, H), msg, sizeof msg), *mb = slcu_alloc(slcu_act_bytes(K, I), msg, sizeof msg);
        float *dx = rnd_dev(H, 1, NULL, msg);
        slcu_act xa;
        slcu_act_bind(&xa, xb, 1, H, msg, sizeof msg), slcu_act_quantize(&xa, dx, H, msg, sizeof msg);
        swi_run r = {{E, K, I, H, &xa, dev_copy(ht, sizeof ht, msg), NULL, gm.d, gm.d, dm.d, slcu_alloc((size_t)K * I * 4, msg, sizeof msg),
                      slcu_alloc((size_t)K * I * 4, msg, sizeof msg), slcu_alloc((size_t)K * H * 4, msg, sizeof msg), {0}},
                     dev_copy(hs, sizeof hs, msg), 0, 3, 0};
        r.c.gate.rows = r.c.up.rows = I, r.c.down.rows = H;
        slcu_act_bind(&r.c.mid, mb, K, I, msg, sizeof msg);
        slcu_i8_mv_rows(-1), slcu_i8_mvfold(1);
        float best[2][4][3];
        for (int i = 0; i < 24; i++) best[i / 12][i / 3 % 4][i % 3] = 1e30f;
        printf("experts' gate/up + down, q4 g%d bf16, %d of %d experts, H %d, I %d, auto rows: us a call (median of %d)\n", group, K, E,
               H, I, REPS);
        for (int rd = 0; rd < NR; rd++)
            for (int pd = 0; pd < 2; pd++)
                for (int m = 0; m < 4; m++) {
                    slcu_i8_pdl(pd);
                    r.mode = m;
                    float us[3];
                    for (int p = 0; p < 3; p++) { /* gate/up alone, down alone (on the last call's g, u or mid), the pair */
                        r.part = p + 1;
                        us[p] = 1e3f * slcu_time_median(swi_run_fn, &r, REPS);
                        if (us[p] < best[pd][m][p]) best[pd][m][p] = us[p];
                    }
                    printf("  round %d %-3s %-22s gate/up %7.2f | down %7.2f | pair %7.2f\n", rd, pd ? "PDL" : "", mname[m], us[0], us[1], us[2]);
                    fflush(stdout);
                }
        for (int pd = 0; pd < 2; pd++)
            for (int m = 1; m < 4; m++) {
                printf("  best of %d, %-3s %s / today:", NR, pd ? "PDL" : "", mname[m]);
                for (int p = 0; p < 3; p++) printf(" %s %.2f/%.2f = %.3f%s", pname[p], best[pd][m][p], best[pd][0][p], best[pd][m][p] / best[pd][0][p], p < 2 ? " |" : "\n");
            }
        fflush(stdout);
        slcu_i8_mv_rows(0), slcu_i8_mvfold(0), slcu_i8_pdl(-1);
        slcu_free(xb), slcu_free(mb), slcu_free(dx), slcu_free((void *)r.c.tab), slcu_free((void *)r.sel0);
        slcu_free(r.c.g), slcu_free(r.c.u), slcu_free(r.c.y);
        free_mat(&gm), free_mat(&dm);
    }
    return 0;
}
