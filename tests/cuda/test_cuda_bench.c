/*
 * test_cuda_bench.c — test_cuda's timings (included by test_cuda.c where these stood, whose helpers they use): the
 * int8 matvec and GEMM kernels against a device copy (--bench-i8) and the older kernels' table (--bench).
 */

static void bench_i8(double copy_gbs) {
    char msg[256];
    const dt_type dts[2] = {DT_Q4, DT_Q8};
    enum { SETS = 2, MAXN = 2048 };
    float *dx = slcu_alloc((size_t)MAXN * 8192 * 4, msg, sizeof msg), *dy = slcu_alloc((size_t)MAXN * 16384 * 4, msg, sizeof msg);
    float *hx = malloc((size_t)MAXN * 8192 * 4);
    for (size_t i = 0; i < (size_t)MAXN * 8192; i++) hx[i] = nrand();
    slcu_upload(dx, hx, (size_t)MAXN * 8192 * 4, msg, sizeof msg);
    free(hx);
    slcu_act da;
    void *abuf = slcu_alloc(slcu_act_bytes(MAXN, 8192), msg, sizeof msg);
    printf("\nint8 activations (dp4a matvec below 16 tokens, mma.sync GEMM from 16), weights GB/s against the copy\n");
    for (int k = 0; k < 2; k++) { /* one big matrix, 4 copies rotated */
        const int rows = 16384, cols = 8192;
        mat a;
        if (make_mat(&a, dts[k], rows * SETS, cols, 64, DT_BF16, msg)) { printf("%s\n", msg); continue; }
        slcu_act_bind(&da, abuf, MAXN, cols, msg, sizeof msg);
        slcu_act_quantize(&da, dx, (size_t)cols, msg, sizeof msg);
        const double bytes = (double)a.bytes / SETS;
        const int toks[] = {1, 2, 4, 8};
        for (int ti = 0; ti < 4; ti++) {
            slcu_mm m = {a.d, &da, NULL, toks[ti], dy, (size_t)rows, NULL, NULL};
            m.w.rows = rows;
            mmrun r = {&m, 1, 1, SETS, 0, rows};
            float ms = slcu_time(run_mm, &r, 20);
            printf("%-4s %6d x %-5d %4d tok  %7.3f ms %6.0f GB/s %4.0f%% of copy\n", dt_name(dts[k]), rows, cols, toks[ti], ms,
                   bytes / (ms * 1e-3) / 1e9, 100 * bytes / (ms * 1e-3) / 1e9 / copy_gbs);
        }
        const int gt[] = {16, 64, 256, 1024, 2048};
        for (int v = 1; v <= 6; v++) /* gemm_tile2, 3 (the default), 5 and 6 */
            for (int ti = 0; ti < 5 && v != 1 && v != 4; ti++) {
                slcu_i8_gemm(v);
                slcu_mm m = {a.d, &da, NULL, gt[ti], dy, (size_t)4096, NULL, NULL};
                m.w.rows = 4096;
                mmrun r = {&m, 1, 1, SETS, 0, rows};
                float ms = slcu_time(run_mm, &r, 10);
                printf("%-4s %6d x %-5d %4d tok  %7.3f ms %6.1f TOPS %6.0f GB/s  (GEMM %d)\n", dt_name(dts[k]), 4096, cols, gt[ti], ms,
                       2.0 * 4096 * cols * gt[ti] / (ms * 1e-3) / 1e12, (double)a.bytes / SETS / 4 / (ms * 1e-3) / 1e9, v);
            }
        slcu_i8_gemm(0), free_mat(&a);
    }
    /* the one-token matvec on the 30B shape's dense matrices (q4 g64 bf16): o, q|k|v, the LM head */
    const int dshape[3][2] = {{2048, 4096}, {5120, 2048}, {151936, 2048}};
    for (int k = 0; k < 3; k++) {
        const int rows = dshape[k][0], cols = dshape[k][1];
        mat a;
        if (make_mat(&a, DT_Q4, rows * SETS, cols, 64, DT_BF16, msg)) { printf("%s\n", msg); continue; }
        float *dy2 = slcu_alloc((size_t)rows * 4, msg, sizeof msg);
        slcu_act_bind(&da, abuf, 1, cols, msg, sizeof msg);
        slcu_act_quantize(&da, dx, (size_t)cols, msg, sizeof msg);
        slcu_mm m = {a.d, &da, NULL, 1, dy2, (size_t)rows, NULL, NULL};
        m.w.rows = rows;
        mmrun r = {&m, 1, 1, SETS, 0, rows};
        float ms = slcu_time(run_mm, &r, 50);
        const double bytes = (double)a.bytes / SETS;
        printf("q4   %6d x %-5d    1 tok  %7.4f ms %6.0f GB/s %4.0f%% of copy\n", rows, cols, ms, bytes / (ms * 1e-3) / 1e9,
               100 * bytes / (ms * 1e-3) / 1e9 / copy_gbs);
        slcu_free(dy2);
        free_mat(&a);
    }
    /* A Qwen3-30B-A3B MoE layer, q4 g64: 128 experts of gate/up 768 x 2048 and down 2048 x 768; decode reads 8
     * (16 gate/up matmuls in one call, then 8 down), prefill of 512 tokens gives each expert 32 rows. */
    mat gu, dn;
    if (make_mat(&gu, DT_Q4, 128 * 2 * 768, 2048, 64, DT_BF16, msg) || make_mat(&dn, DT_Q4, 128 * 2048, 768, 64, DT_BF16, msg)) {
        printf("%s\n", msg);
        return;
    }
    slcu_act dd;
    void *dbuf = slcu_alloc(slcu_act_bytes(MAXN, 768), msg, sizeof msg);
    slcu_act_bind(&da, abuf, MAXN, 2048, msg, sizeof msg), slcu_act_quantize(&da, dx, 2048, msg, sizeof msg);
    slcu_act_bind(&dd, dbuf, MAXN, 768, msg, sizeof msg), slcu_act_quantize(&dd, dx, 768, msg, sizeof msg);
    int idx[4096];
    for (int i = 0; i < 4096; i++) idx[i] = (int)(urand() * 512);
    int *didx = slcu_alloc(sizeof idx, msg, sizeof msg);
    slcu_upload(didx, idx, sizeof idx, msg, sizeof msg);
    for (int pre = 0; pre < 2; pre++) {
        const int ne = pre ? 128 : 8, nt = pre ? 32 : 1;
        slcu_mm m1[256], m2[128];
        for (int e = 0; e < ne; e++) {
            const int ex = pre ? e : (e * 13) % 16; /* sets of 16 experts rotate by run_mm's stride */
            for (int h = 0; h < 2; h++)
                m1[2 * e + h] = rows_job(&gu, (2 * ex + h) * 768, 768, &da, didx + e * nt, nt, dy + (size_t)(2 * e + h) * nt * 768);
            m2[e] = rows_job(&dn, ex * 2048, 2048, &dd, didx + e * nt, nt, dy + (size_t)e * nt * 2048);
        }
        mmrun r1 = {m1, 2 * ne, 32, pre ? 1 : 8, 0, 16 * 2 * 768}, r2 = {m2, ne, 32, pre ? 1 : 8, 0, 16 * 2048};
        float ms1 = slcu_time(run_mm, &r1, 20), ms2 = slcu_time(run_mm, &r2, 20);
        const double b1 = (double)gu.bytes / 256 * 2 * ne, b2 = (double)dn.bytes / 128 * ne;
        const double ops = 2.0 * 3 * 768 * 2048 * ne * nt;
        printf("MoE %s, %3d experts x %2d tok: gate+up %6.3f ms (%4.0f GB/s), down %6.3f ms (%4.0f GB/s): %6.0f GB/s %5.1f TOPS\n",
               pre ? "prefill" : "decode ", ne, nt, ms1, b1 / (ms1 * 1e-3) / 1e9, ms2, b2 / (ms2 * 1e-3) / 1e9,
               (b1 + b2) / ((ms1 + ms2) * 1e-3) / 1e9, ops / ((ms1 + ms2) * 1e-3) / 1e12);
    }
    bench_mv_rows(&gu, &dn, dx, dy, abuf, dbuf, copy_gbs); /* test_cuda_mv.c */
    bench_moe_wide(&gu, &dn, dx); /* test_cuda_prefill.c */
    free_mat(&gu), free_mat(&dn);
    slcu_free(dx), slcu_free(dy), slcu_free(abuf), slcu_free(dbuf), slcu_free(didx);
}

static void bench_kq(double copy_gbs); /* test_cuda_kq.c: the GGUF block types' rows, after --bench-i8's */
static void bench(int i8_only) {
    char msg[256];
    fast_fill = 1;
    const size_t copy_bytes = (size_t)1 << 30;
    void *s = slcu_alloc(copy_bytes, msg, sizeof msg), *d = slcu_alloc(copy_bytes, msg, sizeof msg);
    slcu_set_timing(1);
    /* the bound: a device-to-device copy (bytes read + written) */
    float best_copy = 1e30f;
    for (int i = 0; i < 5; i++) {
        float ms;
        slcu_bench_copy(d, s, copy_bytes, &ms);
        if (ms < best_copy) best_copy = ms;
    }
    double copy_gbs = 2.0 * copy_bytes / (best_copy * 1e-3) / 1e9;
    slcu_free(s), slcu_free(d);
    printf("\nbandwidth: device-to-device copy %.0f GB/s (read + write)\n", copy_gbs);
    if (i8_only) { bench_i8(copy_gbs), bench_kq(copy_gbs); return; }
    printf("%-6s %-14s %6s %10s %8s\n", "dtype", "matrix", "tokens", "GB/s", "of copy");
    const struct { dt_type dt; int rows, cols; } cs[] = {{DT_Q4, 16384, 8192}, {DT_Q8, 16384, 8192}, {DT_BF16, 16384, 8192}, {DT_F32, 8192, 8192}};
    for (unsigned k = 0; k < sizeof cs / sizeof *cs; k++) {
        mat a;
        if (make_mat(&a, cs[k].dt, cs[k].rows, cs[k].cols, 64, DT_BF16, msg)) { printf("%s\n", msg); continue; }
        float *dx = slcu_alloc((size_t)8 * cs[k].cols * 4, msg, sizeof msg), *dy = slcu_alloc((size_t)8 * cs[k].rows * 4, msg, sizeof msg);
        const int toks[] = {1, 4, 8};
        for (int ti = 0; ti < 3; ti++) {
            float best = 1e30f;
            for (int i = 0; i < 10; i++) {
                slcu_matmul(&a.d, dx, dy, toks[ti], msg, sizeof msg);
                if (slcu_last_ms() < best) best = slcu_last_ms();
            }
            double gbs = (double)a.bytes / (best * 1e-3) / 1e9;
            printf("%-6s %6d x %-6d %6d %10.0f %7.0f%%\n", dt_name(cs[k].dt), cs[k].rows, cs[k].cols, toks[ti], gbs, 100 * gbs / copy_gbs);
        }
        slcu_free(dx), slcu_free(dy);
        free_mat(&a);
    }
    slcu_set_timing(0);
    bench_i8(copy_gbs);
}
