/*
 * test_cuda_split.c — SLUICE_CUDA_MVSPLIT and SLUICE_CUDA_MVGEMM (cuda_i8.cu mv_split, mv_gemm; cuda.h slcu_i8_mvsplit,
 * slcu_i8_mvgemm) in test_cuda (included by test_cuda.c, whose helpers it uses): a matvec job of 2-8 tokens taken as
 * one-token jobs, or by the GEMM, gives each token's bits alone (check_mv_split, from check_i8), and `test_cuda
 * --mvsplit` times a decode batch's dense matvecs the three ways.
 */

/* alone: check_i8's reference, activation row r's output at alone + r * rows; a's jobs read rows 0 .. n - 1 of da */
static void check_mv_split(const mat *a, const slcu_act *da, const float *alone, float *dy) {
    char msg[256] = "";
    const int rows = a->d.rows, cols = a->d.cols;
    const dt_type dt = a->d.dtype;
    slcu_i8_mvsplit(4096); /* every matrix of these checks */
    const int nts[] = {2, 3, 5, 8};
    for (int k = 0; k < 4; k++) {
        const int n = nts[k];
        poison(dy, (size_t)n * rows * 4);
        slcu_mm m = {a->d, da, NULL, n, dy, (size_t)rows, NULL, NULL};
        CK(!slcu_matmul_i8(&m, 1, msg, sizeof msg), "%s", msg);
        float *yy = dl(dy, (size_t)n * rows);
        CK(!memcmp(yy, alone, (size_t)n * rows * 4), "%s %dx%d: %d tokens as one-token jobs (MVSPLIT) differ from alone",
           dt_name(dt), rows, cols, n);
        free(yy);
    }
    /* one call: five jobs of 8 tokens (40 one-token jobs: two calls of at most 32), a job of 3 tokens through the row
     * indirection (not split) and one of a token; each job its own output rows */
    enum { NJ = 7 };
    int idx3[3] = {5, 0, 2}, nt[NJ] = {8, 8, 3, 8, 1, 8, 8}, y0[NJ];
    int *drows = dev_copy(idx3, sizeof idx3, msg), idx8[8] = {7, 3, 0, 5, 1, 6, 2, 4};
    int *drows3 = dev_copy(idx8, sizeof idx8, msg);
    slcu_mm mj[NJ];
    for (int j = 0, r = 0; j < NJ; r += nt[j], j++) {
        y0[j] = r;
        mj[j] = (slcu_mm){a->d, da, j == 2 ? drows : NULL, nt[j], dy + (size_t)r * rows, (size_t)rows, NULL, NULL};
    }
    const int tot = y0[NJ - 1] + nt[NJ - 1];
    poison(dy, (size_t)tot * rows * 4);
    CK(!slcu_matmul_i8(mj, NJ, msg, sizeof msg), "%s", msg);
    float *yy = dl(dy, (size_t)tot * rows);
    int ok = 1;
    for (int j = 0; j < NJ; j++)
        for (int t = 0; t < nt[j]; t++)
            ok &= !memcmp(yy + (size_t)(y0[j] + t) * rows, alone + (size_t)(j == 2 ? idx3[t] : t) * rows, (size_t)rows * 4);
    CK(ok, "%s %dx%d: jobs of 8, 3 (rows) and 1 tokens in one call with MVSPLIT differ from alone", dt_name(dt), rows, cols);
    free(yy);
    slcu_free(drows);
    slcu_i8_mvsplit(-1);
    /* SLUICE_CUDA_MVGEMM: 2-8 tokens through the GEMM (every matrix here), directly and through the row indirection */
    slcu_i8_mvgemm(1);
    for (int k = 0; k < 8; k++) {
        const int n = nts[k % 4], via = k / 4;
        poison(dy, (size_t)n * rows * 4);
        slcu_mm m = {a->d, da, via ? drows3 : NULL, n, dy, (size_t)rows, NULL, NULL};
        CK(!slcu_matmul_i8(&m, 1, msg, sizeof msg), "%s", msg);
        float *yg = dl(dy, (size_t)n * rows);
        int gok = 1;
        for (int t = 0; t < n; t++) gok &= !memcmp(yg + (size_t)t * rows, alone + (size_t)(via ? idx8[t] : t) * rows, (size_t)rows * 4);
        CK(gok, "%s %dx%d: %d tokens through the GEMM (MVGEMM)%s differ from alone", dt_name(dt), rows, cols, n,
           via ? ", rows" : "");
        free(yg);
    }
    slcu_free(drows3);
    slcu_i8_mvgemm(-1);
}

/* --mvsplit: us a call of a decode batch's dense matvecs (q4 g64 bf16; the 30B-A3B's q|k|v 5120 x 2048, o 2048 x 4096,
 * router 128 x 2048, lm head 151936 x 2048) at 2, 4 and 8 tokens: mvn_i8 (the default) | one-token jobs (MVSPLIT=64,
 * not taken by the LM head) | the GEMM (MVGEMM=1);
 * eight copies of each matrix taken in turn, so a call's weights are not in the L2 from the call before */
static void bench_mv_split(void) {
    char msg[256] = "";
    const int shape[4][2] = {{5120, 2048}, {2048, 4096}, {128, 2048}, {151936, 2048}};
    const char *names[4] = {"q|k|v 5120x2048", "o 2048x4096", "router 128x2048", "lm head 151936x2048"};
    float *x = malloc((size_t)8 * 4096 * 4);
    for (int i = 0; i < 8 * 4096; i++) x[i] = nrand();
    float *dx = dev_copy(x, (size_t)8 * 4096 * 4, msg), *dy = slcu_alloc((size_t)8 * 151936 * 4, msg, sizeof msg);
    void *abuf = slcu_alloc(slcu_act_bytes(8, 4096), msg, sizeof msg);
    fast_fill = 1;
    printf("2-8 token matvecs (a decode batch), us a call: mvn_i8 | one-token jobs (SLUICE_CUDA_MVSPLIT=64) | gemm_i8 "
           "(SLUICE_CUDA_MVGEMM=1)\n");
    for (int sh = 0; sh < 4; sh++) {
        const int rows = shape[sh][0], cols = shape[sh][1], sets = sh == 3 ? 1 : 8;
        mat a;
        if (make_mat(&a, DT_Q4, rows * sets, cols, 64, DT_BF16, msg)) { printf("%s\n", msg); break; }
        printf("  %-20s", names[sh]);
        for (int n = 2; n <= 8; n *= 2) {
            slcu_act da;
            slcu_act_bind(&da, abuf, n, cols, msg, sizeof msg), slcu_act_quantize(&da, dx, (size_t)cols, msg, sizeof msg);
            float us[3];
            for (int v = 0; v < 3; v++) {
                slcu_i8_mvsplit(v == 1 ? 64 : 0);
                slcu_i8_mvgemm(v == 2 ? 1 : 0);
                slcu_mm m = {a.d, &da, NULL, n, dy, (size_t)rows, NULL, NULL};
                m.w.rows = rows;
                mmrun r = {&m, 1, 1, sets, 0, (size_t)rows};
                us[v] = 1e3f * slcu_time(run_mm, &r, 50);
            }
            printf("  %d tok %8.2f | %8.2f | %8.2f", n, us[0], us[1], us[2]);
        }
        printf("\n");
        free_mat(&a);
    }
    fast_fill = 0;
    slcu_i8_mvsplit(-1), slcu_i8_mvgemm(-1);
    slcu_free(dx), slcu_free(dy), slcu_free(abuf);
    free(x);
}
