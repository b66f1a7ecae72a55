/* ---- cuda_mla_out.cu (slcu_mla_out, backend.h mla_out): W_uv of every head and token in one launch, against the
 * oracle (q_row_to_f32's rows of kv_b, sums in double: max |y - ref| <= 1e-5 max |ref|), every output written and
 * nothing between the heads' outputs (ldo > heads * dv); bitwise: two calls alike, every token of a batch of n its
 * value alone (n = 1) and in the batch of 70 (other token tiles), so a prefill's rows equal its decode steps'. DeepSeek-
 * V3's shape (128 heads, kv_lora 512, nope 128, v 128) and small ones (3 heads, r 40 / 96, v 12: a CTA's rows past
 * dv), kv_b f32 / bf16 / f16 / q8 / q4 in groups of 32 and 64; 1, 2, 3, 7, 16, 17 and 70 tokens (tiles of 1 .. 16):
 * check_mlaout_all. --bench-mlaout: us a call at 1, 8, 64 and 512 tokens against the matmul a head and token it replaces
 * (mm_run's exact path for ldx != cols) where that is cheap to time (bench_mlaout). Included by test_cuda.c. ---- */

typedef struct {
    int nh, r, dn, dv;
    dt_type dt;
    int group;
    dt_type sdt;
} mlaout_case;

static void mlaout_case_run(const mlaout_case *c) {
    char msg[256] = "";
    enum { NMAX = 70 };
    const int ns[] = {1, 2, 3, 7, 16, 17, NMAX}, rows = c->nh * (c->dn + c->dv), ldo = c->nh * c->dv + 3;
    mat kvb;
    if (make_mat(&kvb, c->dt, rows, c->r, c->group, c->sdt, msg)) {
        CK(0, "mla_out: %s", msg);
        return;
    }
    char what[128];
    snprintf(what, sizeof what, "mla_out %d heads r %d dv %d %s g%d", c->nh, c->r, c->dv, dt_name(c->dt), c->group);
    CK(slcu_mla_out_takes(&kvb.d, c->nh, c->r, c->dn, c->dv), "%s: not taken", what);
    const size_t nlat = (size_t)NMAX * c->nh * c->r, nout = (size_t)NMAX * ldo;
    float *hl, *dlat = rnd_dev(nlat, 1, &hl, msg), *dout = slcu_alloc(nout * 4, msg, sizeof msg);
    float *dref = slcu_alloc(nout * 4, msg, sizeof msg);
    /* the oracle [NMAX][heads * dv], in double */
    double *ref = malloc((size_t)NMAX * c->nh * c->dv * sizeof(double));
    float *row = malloc((size_t)c->r * sizeof(float));
    for (int h = 0; h < c->nh; h++)
        for (int v = 0; v < c->dv; v++) {
            q_row_to_f32(&kvb.m, h * (c->dn + c->dv) + c->dn + v, row);
            for (int t = 0; t < NMAX; t++) {
                double s = 0;
                for (int k = 0; k < c->r; k++) s += (double)row[k] * hl[((size_t)t * c->nh + h) * c->r + k];
                ref[((size_t)t * c->nh + h) * c->dv + v] = s;
            }
        }
    poison(dref, nout * 4);
    CK(!slcu_mla_out(&kvb.d, dlat, dref, (size_t)ldo, NMAX, c->nh, c->r, c->dn, c->dv, msg, sizeof msg), "%s: %s", what, msg);
    float *full = dl(dref, nout);
    double worst = 0;
    for (unsigned k = 0; k < sizeof ns / sizeof *ns; k++) {
        const int n = ns[k];
        poison(dout, nout * 4);
        CK(!slcu_mla_out(&kvb.d, dlat, dout, (size_t)ldo, n, c->nh, c->r, c->dn, c->dv, msg, sizeof msg), "%s: %s", what, msg);
        float *y = dl(dout, (size_t)n * ldo);
        CK(!slcu_mla_out(&kvb.d, dlat, dout, (size_t)ldo, n, c->nh, c->r, c->dn, c->dv, msg, sizeof msg), "%s: %s", what, msg);
        float *y2 = dl(dout, (size_t)n * ldo);
        CK(!memcmp(y, y2, (size_t)n * ldo * 4), "%s, %d tokens: two calls differ", what, n);
        double maxref = 0, maxerr = 0;
        int fin = 1, gaps = 1;
        for (int t = 0; t < n; t++) {
            for (int i = 0; i < c->nh * c->dv; i++) {
                const double g = y[(size_t)t * ldo + i], e = ref[(size_t)t * c->nh * c->dv + i];
                fin &= isfinite(g) != 0;
                maxref = fmax(maxref, fabs(e)), maxerr = fmax(maxerr, fabs(g - e));
            }
            uint32_t u;
            for (int i = c->nh * c->dv; i < ldo; i++) memcpy(&u, &y[(size_t)t * ldo + i], 4), gaps &= u == 0xffffffffu;
        }
        const double rel = maxerr / (maxref > 0 ? maxref : 1);
        worst = fmax(worst, rel);
        CK(fin, "%s, %d tokens: an output not written or not finite", what, n);
        CK(gaps, "%s, %d tokens: written past the heads' outputs", what, n);
        CK(rel <= 1e-5, "%s, %d tokens: relative error %.3g", what, n, rel);
        CK(!memcmp(y, full, (size_t)n * ldo * 4), "%s: %d tokens differ from the same tokens among %d", what, n, NMAX);
        free(y), free(y2);
    }
    for (int t = 0; t < NMAX; t += t < 4 ? 1 : 11) { /* token t alone: bitwise its row of the batch */
        CK(!slcu_mla_out(&kvb.d, dlat + (size_t)t * c->nh * c->r, dout, (size_t)ldo, 1, c->nh, c->r, c->dn, c->dv, msg,
                         sizeof msg), "%s: %s", what, msg);
        float *y1 = dl(dout, (size_t)c->nh * c->dv);
        CK(!memcmp(y1, full + (size_t)t * ldo, (size_t)c->nh * c->dv * 4), "%s: token %d alone differs from it in the batch",
           what, t);
        free(y1);
    }
    printf("ok   %s  max rel err %.2e\n", what, worst);
    free(full), free(ref), free(row), free(hl);
    slcu_free(dlat), slcu_free(dout), slcu_free(dref);
    free_mat(&kvb);
}

static void check_mlaout_all(void) {
    static const mlaout_case cases[] = {
        {128, 512, 128, 128, DT_Q4, 32, DT_BF16}, {128, 512, 128, 128, DT_Q4, 64, DT_F16}, {128, 512, 128, 128, DT_Q8, 32, DT_F32},
        {128, 512, 128, 128, DT_F32, 0, DT_F32},  {3, 40, 20, 12, DT_BF16, 0, DT_F32},     {3, 40, 20, 12, DT_F16, 0, DT_F32},
        {3, 96, 20, 12, DT_Q4, 32, DT_BF16},      {3, 96, 0, 12, DT_Q8, 32, DT_F16},      {5, 64, 16, 40, DT_Q4, 64, DT_F32},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) mlaout_case_run(&cases[i]);
    /* refused (mla.c then multiplies head by head): a q4 kv_b whose rows are not whole groups, a GGUF block type */
    static const uint32_t words[4] = {0};
    slcu_mat w = {.data = words, .scales = words, .biases = words, .dtype = DT_Q4, .sdtype = DT_F16, .rows = 3 * 32,
                  .cols = 40, .group = 32};
    CK(!slcu_mla_out_takes(&w, 3, 40, 20, 12), "mla_out: took a q4 kv_b of 40 columns in groups of 32");
    w.dtype = DT_Q4_K, w.cols = 256, w.group = 256;
    CK(!slcu_mla_out_takes(&w, 3, 256, 20, 12), "mla_out: took a Q4_K kv_b");
}

typedef struct {
    const slcu_mat *w;
    const float *lat;
    float *out;
    int n, nh, r, dn, dv, old;
} mlaout_bench;

static void mlaout_bench_run(void *p) {
    const mlaout_bench *b = p;
    char msg[256];
    if (!b->old) {
        if (slcu_mla_out(b->w, b->lat, b->out, (size_t)b->nh * b->dv, b->n, b->nh, b->r, b->dn, b->dv, msg, sizeof msg))
            fprintf(stderr, "bench-mlaout: %s\n", msg);
        return;
    }
    for (int h = 0; h < b->nh; h++) { /* the matmul a head, token by token (mm_run's exact path, ldx != cols) */
        slcu_mat m = *b->w;
        const size_t rb = (size_t)m.cols / 2, sb = (size_t)(m.cols / m.group) * dt_size(m.sdtype);
        const size_t r0 = (size_t)h * (b->dn + b->dv) + b->dn;
        m.data = (const uint8_t *)m.data + r0 * rb;
        m.scales = (const uint8_t *)m.scales + r0 * sb, m.biases = (const uint8_t *)m.biases + r0 * sb;
        m.rows = b->dv;
        for (int t = 0; t < b->n; t++)
            slcu_matmul(&m, b->lat + ((size_t)t * b->nh + h) * b->r, b->out + (size_t)t * b->nh * b->dv + (size_t)h * b->dv, 1,
                        msg, sizeof msg);
    }
}

static void bench_mlaout(void) {
    char msg[256] = "";
    const int nh = 128, r = 512, dn = 128, dv = 128, ns[4] = {1, 8, 64, 512};
    mat kvb;
    fast_fill = 1;
    if (make_mat(&kvb, DT_Q4, nh * (dn + dv), r, 64, DT_BF16, msg)) {
        CK(0, "bench-mlaout: %s", msg);
        return;
    }
    fast_fill = 0;
    float *dlat = rnd_dev((size_t)512 * nh * r, 1, NULL, msg), *dout = slcu_alloc((size_t)512 * nh * dv * 4, msg, sizeof msg);
    const double wbytes = (double)nh * dv * (r / 2 + (r / 64) * 4); /* W_uv's codes, scales and biases */
    printf("\nMLA's W_uv, DeepSeek-V3 shape (128 heads, kv_lora 512, v 128, q4 g64 bf16 kv_b: %.1f MB): us a call (median of "
           "50 after a warm-up), one launch (slcu_mla_out) against a matmul a head and token (the path before it; n <= 8)\n",
           wbytes / 1e6);
    printf("%-6s %10s %10s %8s %10s\n", "tokens", "one us", "old us", "old/one", "one GB/s");
    for (int k = 0; k < 4; k++) {
        mlaout_bench b = {&kvb.d, dlat, dout, ns[k], nh, r, dn, dv, 0};
        const float t1 = 1e3f * slcu_time_median(mlaout_bench_run, &b, 50);
        float t0 = 0;
        if (ns[k] <= 8) b.old = 1, t0 = 1e3f * slcu_time_median(mlaout_bench_run, &b, 10);
        printf("%-6d %10.2f %10.2f %8.2f %10.1f\n", ns[k], t1, t0, t0 > 0 ? t0 / t1 : 0.0, wbytes / (t1 * 1e-6) / 1e9);
        fflush(stdout);
    }
    slcu_free(dlat), slcu_free(dout);
    free_mat(&kvb);
}

/* --mlaout: check_mlaout_all alone; --bench-mlaout: then bench_mlaout. -1 for any other argument (test_cuda.c main). */
static int mlaout_main(int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "--mlaout") && strcmp(argv[1], "--bench-mlaout"))) return -1;
    check_mlaout_all();
    printf("%s: %d failure%s\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    if (!strcmp(argv[1], "--bench-mlaout")) bench_mlaout(); /* timed even after a mismatch (the FAIL lines say so) */
    return 0;
}
