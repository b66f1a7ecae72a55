/* ---- MXFP4's many-token kernels (cuda_mxfp4.cu k_mxg, k_mxg_seg; included by test_cuda.c) ----
 * check_mxg: slcu_matmul_mxfp4 forced onto k_mxg (slcu_mxfp4_gemm(1), every n) bitwise the same call forced onto
 * k_mxfp4 (slcu_mxfp4_gemm(0): launches of 8 tokens, the reference), at 2880 x 2880, 5760 x 2880, 100 x 96, odd rows,
 * 32, 64 and 1056 columns; 1, 8, 9, 20, 33, 100, 512 and 1100 tokens (one matrix's three tiles); x and y at strides, x off 16 bytes,
 * the codes off 4 bytes; scales 2^-8 .. 2^2 with the subnormal 0 and the infinite 255 (NaN where k_mxfp4 has one);
 * each output written (k_mxg's poisoned first with a finite pattern), nothing between rows or past n.
 * check_mxg_seg: slcu_matmul_mxfp4_seg bitwise each expert's slcu_matmul_mxfp4 (k_mxfp4) on its rows gathered: experts
 * of random routes (the last ones empty), 1 or 2 matrices, x gathered by tok and y scattered by yrows or both
 * contiguous, runs of about 16, 25 and 64 rows (the three tiles), more experts than a CTA's threads.
 * --bench-mxfp4: us a call and TFLOPS (2 rows cols n / t) of k_mxfp4 against k_mxg at 1 .. 512 tokens, 2880 x 5760 and
 * 5760 x 2880, and a 120b-like layer's gate_up: 128 experts of 5760 x 2880, 2048 rows (512 tokens x top-4) in one
 * segmented launch against per-expert calls. */

static void mx_fill(uint8_t *c, uint8_t *s, int rows, int cols, int special) {
    for (size_t i = 0; i < (size_t)rows * cols / 2; i++) c[i] = (uint8_t)(urand() * 256);
    for (size_t i = 0; i < (size_t)rows * cols / 32; i++) s[i] = (uint8_t)(119 + (int)(urand() * 11));
    if (special) s[0] = 0, s[(size_t)(rows - 1) * (cols / 32)] = 255; /* 2^-127; infinite weights in the last row */
}
static void *mx_dev(const void *h, size_t n, size_t off, char *msg) { /* h at off bytes into a new device buffer */
    uint8_t *d = slcu_alloc(n + off + 16, msg, 256);
    if (d && slcu_upload(d + off, h, n, msg, 256)) CK(0, "%s", msg);
    return d;
}
static int mx_same(float a, float b) { return !memcmp(&a, &b, 4) || (a != a && b != b); } /* bitwise, or both NaN */
static void mx_pattern(void *d, size_t bytes, int byte) { /* 0x55: finite (1.5e13), 0xff: NaN */
    char msg[256];
    void *h = malloc(bytes);
    memset(h, byte, bytes);
    slcu_upload(d, h, bytes, msg, sizeof msg);
    free(h);
}

static void check_mxg(int rows, int cols, int n, int xoff, int coff) {
    char msg[256] = "";
    const size_t ldx = (size_t)cols + 4 + xoff, ldy = (size_t)rows + 3, cb = (size_t)rows * cols / 2, sb = (size_t)rows * cols / 32;
    uint8_t *h = malloc(cb + sb);
    mx_fill(h, h + cb, rows, cols, 1);
    uint8_t *dc = mx_dev(h, cb, (size_t)coff, msg), *ds = mx_dev(h + cb, sb, 0, msg);
    float *hx, *dxb = rnd_dev((size_t)n * ldx + 4, 1, &hx, msg), *dx = dxb + xoff;
    float *dy0 = slcu_alloc((size_t)n * ldy * 4, msg, sizeof msg), *dy1 = slcu_alloc((size_t)n * ldy * 4, msg, sizeof msg);
    const slcu_mat m = {.data = dc + coff, .scales = ds, .dtype = DT_MXFP4, .sdtype = DT_NONE, .rows = rows, .cols = cols, .group = 32};
    mx_pattern(dy0, (size_t)n * ldy * 4, 0xff), mx_pattern(dy1, (size_t)n * ldy * 4, 0x55);
    slcu_mxfp4_gemm(0);
    CK(!slcu_matmul_mxfp4(&m, dx, ldx, dy0, ldy, n, msg, sizeof msg), "%s", msg);
    slcu_mxfp4_gemm(1);
    CK(!slcu_matmul_mxfp4(&m, dx, ldx, dy1, ldy, n, msg, sizeof msg), "%s", msg);
    slcu_mxfp4_gemm(-1);
    float *y0 = dl(dy0, (size_t)n * ldy), *y1 = dl(dy1, (size_t)n * ldy);
    long bad = 0, nan = 0, first = -1;
    for (size_t i = 0; i < (size_t)n * ldy; i++) {
        const int out = i % ldy < (size_t)rows; /* an output, or the gap after a token's rows (never written) */
        uint32_t u;
        memcpy(&u, y1 + i, 4);
        if (out ? !mx_same(y0[i], y1[i]) : u != 0x55555555u) bad++, first = first < 0 ? (long)i : first;
        nan += out && y0[i] != y0[i];
    }
    CK(!bad, "mxfp4 k_mxg %dx%d, %d tokens (x +%d, codes +%d): %ld outputs differ from k_mxfp4 (or a gap written), the "
       "first token %ld row %ld: %.9g vs %.9g", rows, cols, n, xoff, coff, bad, first / (long)ldy, first % (long)ldy,
       first >= 0 ? y0[first] : 0.0, first >= 0 ? y1[first] : 0.0);
    printf("ok   mxfp4 k_mxg %4d x %-4d %3d tokens bitwise k_mxfp4 (%ld NaN from the infinite scale)\n", rows, cols, n, nan);
    free(h), free(hx), free(y0), free(y1);
    slcu_free(dc), slcu_free(ds), slcu_free(dxb), slcu_free(dy0), slcu_free(dy1);
}

/* E experts of nmat matrices rows x cols; n rows routed at random over the first E - skip experts */
static void check_mxg_seg(int E, int skip, int nmat, int rows, int cols, int n, int gather) {
    char msg[256] = "";
    const size_t cb = (size_t)rows * cols / 2, sb = (size_t)rows * cols / 32, per = cb + sb, ldx = (size_t)cols + 1, ldy = (size_t)rows + 2;
    uint8_t *h = malloc(per * E * nmat);
    for (int i = 0; i < E * nmat; i++) mx_fill(h + i * per, h + i * per + cb, rows, cols, i == 1);
    uint8_t *dw = mx_dev(h, per * E * nmat, 0, msg);
    const void **tab = malloc(sizeof(void *) * 2 * E * nmat);
    for (int i = 0; i < E * nmat; i++) tab[2 * i] = dw + i * per, tab[2 * i + 1] = dw + i * per + cb;
    int *ex = malloc(sizeof(int) * n), *off = calloc((size_t)E + 1, sizeof(int)), *tok = malloc(sizeof(int) * n + 4),
        *yr = malloc(sizeof(int) * n + 4), *cur = malloc(sizeof(int) * E);
    for (int p = 0; p < n; p++) ex[p] = (int)(urand() * (E - skip)), off[ex[p] + 1]++;
    for (int e = 0; e < E; e++) off[e + 1] += off[e];
    memcpy(cur, off, sizeof(int) * E);
    const int ntok = gather ? n / 4 + 1 : n; /* gathered: top-4 of n / 4 tokens, as a MoE layer's rows */
    for (int p = 0; p < n; p++) {
        const int q = cur[ex[p]]++;
        tok[q] = (int)(urand() * ntok), yr[q] = p;
    }
    float *hx, *dx = rnd_dev((size_t)ntok * ldx, 1, &hx, msg), *dy[2], *ref[2];
    const void *const *dtab = dev_copy(tab, sizeof(void *) * 2 * E * nmat, msg);
    int *doff = dev_copy(off, sizeof(int) * (E + 1), msg), *dtok = dev_copy(tok, sizeof(int) * n + 4, msg),
        *dyr = dev_copy(yr, sizeof(int) * n + 4, msg);
    float *dxr = slcu_alloc((size_t)n * ldx * 4 + 4, msg, sizeof msg), *dyrun = slcu_alloc((size_t)n * rows * 4 + 4, msg, sizeof msg);
    float *xr = malloc((size_t)n * ldx * 4 + 4);
    slcu_mxfp4_gemm(0); /* the reference: k_mxfp4 per expert on its rows gathered */
    for (int z = 0; z < nmat; z++) {
        ref[z] = malloc((size_t)n * ldy * 4);
        dy[z] = slcu_alloc((size_t)n * ldy * 4, msg, sizeof msg);
        mx_pattern(dy[z], (size_t)n * ldy * 4, 0x55);
        for (int e = 0; e < E; e++) {
            const int o = off[e], cnt = off[e + 1] - o;
            if (!cnt) continue;
            for (int q = 0; q < cnt; q++) memcpy(xr + (size_t)q * ldx, hx + (size_t)(gather ? tok[o + q] : o + q) * ldx, (size_t)cols * 4);
            slcu_upload(dxr, xr, (size_t)cnt * ldx * 4, msg, sizeof msg);
            const slcu_mat m = {.data = tab[2 * (z * E + e)], .scales = tab[2 * (z * E + e) + 1], .dtype = DT_MXFP4, .rows = rows, .cols = cols, .group = 32};
            CK(!slcu_matmul_mxfp4(&m, dxr, ldx, dyrun, (size_t)rows, cnt, msg, sizeof msg), "%s", msg);
            float *yrun = dl(dyrun, (size_t)cnt * rows);
            for (int q = 0; q < cnt; q++) memcpy(ref[z] + (size_t)(gather ? yr[o + q] : o + q) * ldy, yrun + (size_t)q * rows, (size_t)rows * 4);
            free(yrun);
        }
    }
    slcu_mxfp4_gemm(-1);
    const slcu_mxseg S = {.tab = dtab, .w = {.dtype = DT_MXFP4, .rows = rows, .cols = cols, .group = 32}, .off = doff,
                          .tok = gather ? dtok : NULL, .yrows = gather ? dyr : NULL, .x = dx, .ldx = ldx, .ldy = ldy,
                          .y = {dy[0], nmat > 1 ? dy[1] : NULL}, .E = E, .nmat = nmat, .n = n};
    CK(!slcu_matmul_mxfp4_seg(&S, msg, sizeof msg), "%s", msg);
    for (int z = 0; z < nmat; z++) {
        float *y = dl(dy[z], (size_t)n * ldy);
        long bad = 0;
        for (int p = 0; p < n; p++)
            for (size_t r = 0; r < ldy; r++) {
                const size_t i = (size_t)p * ldy + r;
                uint32_t u;
                memcpy(&u, y + i, 4);
                bad += r < (size_t)rows ? !mx_same(ref[z][i], y[i]) : u != 0x55555555u;
            }
        CK(!bad, "mxfp4 segments: %d experts, %d rows of %dx%d, matrix %d: %ld outputs differ from the per-expert calls", E, n,
           rows, cols, z, bad);
        free(y), free(ref[z]), slcu_free(dy[z]);
    }
    printf("ok   mxfp4 segments %3d experts x %d of %4d x %-4d, %4d rows%s bitwise the per-expert calls\n", E, nmat, rows, cols,
           n, gather ? " (tok, yrows)" : "");
    free(h), free(tab), free(ex), free(off), free(tok), free(yr), free(cur), free(hx), free(xr);
    slcu_free(dw), slcu_free((void *)dtab), slcu_free(doff), slcu_free(dtok), slcu_free(dyr), slcu_free(dx), slcu_free(dxr), slcu_free(dyrun);
}

static void check_mxfp4_all(void) {
    const int ns[] = {1, 8, 9, 20, 33, 100, 512};
    for (int k = 0; k < 7; k++) check_mxg(2880, 2880, ns[k], k & 1, 0);
    for (int k = 0; k < 7; k += 2) check_mxg(5760, 2880, ns[k], 0, k == 2 ? 1 : 0);
    for (int k = 0; k < 7; k++) check_mxg(100, 96, ns[k], 2 * (k & 1), k & 3);
    check_mxg(70, 32, 33, 1, 0), check_mxg(129, 64, 20, 0, 2), check_mxg(33, 1056, 100, 3, 1), check_mxg(1, 64, 9, 0, 0);
    check_mxg(1000, 64, 1100, 1, 3); /* the 64 x 64 tile (enough CTAs to fill the SMs) with a part tile of rows and of tokens */
    check_mxg_seg(128, 0, 1, 256, 2880, 2048, 1); /* about 16 rows an expert: the 64 x 16 tile */
    check_mxg_seg(16, 3, 2, 100, 96, 300, 0);     /* about 25: 128 x 32; three experts empty */
    check_mxg_seg(32, 1, 1, 2880, 2880, 2048, 1); /* about 64: 64 x 64 */
    check_mxg_seg(300, 20, 2, 33, 32, 500, 1);    /* more experts than a CTA's 64 or 256 threads */
    for (int on = 0; on < 2; on++) { /* small calls: the tiles (default), then k_mxseg_rows (SLUICE_CUDA_MXSEG=1) */
        if (on) setenv("SLUICE_CUDA_MXSEG", "1", 1);
        check_mxg_seg(128, 0, 1, 2880, 2880, 32, 1); /* a decode batch's 8 x 4 pairs (k_mxseg_rows: at most 64 rows) */
        check_mxg_seg(16, 3, 2, 100, 96, 5, 0);      /* 5 rows of 16 experts, three empty, two matrices */
        check_mxg_seg(300, 20, 1, 33, 1056, 64, 1);  /* the rows kernel's largest call; many empty experts */
        unsetenv("SLUICE_CUDA_MXSEG");
    }
}

/* ---- --bench-mxfp4 ---- */
typedef struct { const slcu_mat *m; const float *x; float *y; int n; const slcu_mxseg *seg; const int *off; const void **tab; } mxrun;
static void mx_run(void *c) {
    const mxrun *r = c;
    char msg[256];
    if (r->seg && !r->tab) slcu_matmul_mxfp4_seg(r->seg, msg, sizeof msg);
    else if (r->seg) /* per-expert calls on the same rows (contiguous x and y) */
        for (int e = 0; e < r->seg->E; e++) {
            const int o = r->off[e], cnt = r->off[e + 1] - o;
            slcu_mat m = r->seg->w;
            m.data = r->tab[2 * e], m.scales = r->tab[2 * e + 1];
            if (cnt) slcu_matmul_mxfp4(&m, r->seg->x + (size_t)o * r->seg->ldx, r->seg->ldx, r->seg->y[0] + (size_t)o * r->seg->ldy, r->seg->ldy, cnt, msg, sizeof msg);
        }
    else slcu_matmul_mxfp4(r->m, r->x, (size_t)r->m->cols, r->y, (size_t)r->m->rows, r->n, msg, sizeof msg);
}

static void bench_mxfp4(void) {
    char msg[256] = "";
    const int shp[2][2] = {{2880, 5760}, {5760, 2880}}, ns[] = {1, 8, 16, 64, 512};
    printf("mxfp4 matmul: us a call (TFLOPS), k_mxfp4 (8 tokens a launch) against k_mxg\n");
    for (int s = 0; s < 2; s++) {
        const int rows = shp[s][0], cols = shp[s][1];
        const size_t cb = (size_t)rows * cols / 2, sb = (size_t)rows * cols / 32;
        uint8_t *h = malloc(cb + sb);
        mx_fill(h, h + cb, rows, cols, 0);
        uint8_t *dw = dev_copy(h, cb + sb, msg);
        float *dx = rnd_dev((size_t)512 * cols, 1, NULL, msg), *dy = slcu_alloc((size_t)512 * rows * 4, msg, sizeof msg);
        const slcu_mat m = {.data = dw, .scales = dw + cb, .dtype = DT_MXFP4, .rows = rows, .cols = cols, .group = 32};
        for (int k = 0; k < 5; k++) {
            mxrun r = {.m = &m, .x = dx, .y = dy, .n = ns[k]};
            const double fl = 2.0 * rows * cols * ns[k];
            slcu_mxfp4_gemm(0);
            const double t0 = slcu_time(mx_run, &r, ns[k] >= 64 ? 3 : 20) * 1e3;
            slcu_mxfp4_gemm(1);
            const double t1 = slcu_time(mx_run, &r, 20) * 1e3;
            printf("  %4d x %-4d %3d tokens: k_mxfp4 %9.1f us (%6.2f TFLOPS)  k_mxg %8.1f us (%6.2f TFLOPS)  %6.1fx\n", rows, cols,
                   ns[k], t0, fl / t0 * 1e-6, t1, fl / t1 * 1e-6, t0 / t1);
        }
        slcu_mxfp4_gemm(-1);
        free(h), slcu_free(dw), slcu_free(dx), slcu_free(dy);
    }
    /* a 120b-like gate_up: 128 experts of 5760 x 2880, 2048 rows at random */
    const int E = 128, rows = 5760, cols = 2880, n = 2048;
    const size_t cb = (size_t)rows * cols / 2, sb = (size_t)rows * cols / 32, per = cb + sb;
    uint8_t *h = malloc(per * E), *dw = slcu_alloc(per * E, msg, sizeof msg);
    if (!h || !dw) { printf("  segments: no memory (%s)\n", msg); free(h); return; }
    for (size_t i = 0; i < per * E; i += 4) { const uint32_t v = (uint32_t)(urand() * 4294967295.0); memcpy(h + i, &v, 4); }
    for (int e = 0; e < E; e++) memset(h + e * per + cb, 127, sb); /* scales 1 */
    slcu_upload(dw, h, per * E, msg, sizeof msg);
    const void **tab = malloc(sizeof(void *) * 2 * E);
    for (int e = 0; e < E; e++) tab[2 * e] = dw + e * per, tab[2 * e + 1] = dw + e * per + cb;
    int *off = calloc(E + 1, sizeof(int));
    for (int p = 0; p < n; p++) off[(int)(urand() * E) + 1]++;
    for (int e = 0; e < E; e++) off[e + 1] += off[e];
    float *dx = rnd_dev((size_t)n * cols, 1, NULL, msg), *dy = slcu_alloc((size_t)n * rows * 4, msg, sizeof msg);
    const slcu_mxseg S = {.tab = dev_copy(tab, sizeof(void *) * 2 * E, msg), .w = {.dtype = DT_MXFP4, .rows = rows, .cols = cols, .group = 32},
                          .off = dev_copy(off, sizeof(int) * (E + 1), msg), .x = dx, .ldx = cols, .ldy = rows, .y = {dy, NULL},
                          .E = E, .nmat = 1, .n = n};
    mxrun seg = {.seg = &S}, each = {.seg = &S, .off = off, .tab = tab};
    const double fl = 2.0 * rows * cols * n, t0 = slcu_time(mx_run, &each, 5) * 1e3, t1 = slcu_time(mx_run, &seg, 5) * 1e3;
    printf("  segments: %d experts of %d x %d, %d rows: per-expert calls %8.1f us (%5.2f TFLOPS), one launch %8.1f us "
           "(%5.2f TFLOPS)\n", E, rows, cols, n, t0, fl / t0 * 1e-6, t1, fl / t1 * 1e-6);
    free(h), free(tab), free(off), slcu_free(dw), slcu_free(dx), slcu_free(dy), slcu_free((void *)S.tab), slcu_free((void *)S.off);
}

/* --bench-mxfp4 (the checks, then the figures) or --mxfp4 (the checks alone): the exit status; -1 neither */
static int mxfp4_main(int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "--mxfp4") && strcmp(argv[1], "--bench-mxfp4"))) return -1;
    check_mxfp4_all();
    printf("%s: %d failure%s\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    if (!strcmp(argv[1], "--bench-mxfp4")) bench_mxfp4();
    return failures ? 1 : 0;
}
