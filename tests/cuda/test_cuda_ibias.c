/*
 * test_cuda_ibias.c — issue 24's implied biases in test_cuda (included by test_cuda.c, whose helpers it uses): with
 * SLUICE_CUDA_IBIAS=1 (cuda.h slcu_i8_ibias) the int8 matvecs compute a q4 / q8 matrix's biases as z times its scales
 * (z = -8 / -128, what GGUF Q4_0 / Q8_0 import to) instead of loading them. check_ibias: every matvec of 1-8 tokens
 * bitwise the same matrix with its biases loaded; imply_mat and fuse_ibias: test_cuda_fuse.c's fused launches
 * (cuda_mv.cu mv1c_nr, mv1c_an) on such matrices.
 */

static int fuse_ibias; /* test_cuda_fuse.c: its matrices through imply_mat, their bias words NaN, the switch on */

static size_t bias_bytes(const mat *o) { return (size_t)o->m.rows * (size_t)(o->m.cols / o->m.group) * dt_size(o->m.sdtype); }

/* Rewrites o's biases (host and device) as z times its scales, each rounded to the scale's type (exact for the
 * fixtures' scales: no overflow), and marks o so (tn_mat bias_implied by quant.c q_biases_implied, slcu_mat ibias);
 * poisoned: the device's bias words then NaN, so a kernel that read them would make NaN. */
static void imply_mat(mat *o, int poisoned) {
    char msg[256] = "";
    const size_t ng = (size_t)o->m.rows * (size_t)(o->m.cols / o->m.group);
    const float z = o->m.dtype == DT_Q8 ? -128.0f : -8.0f;
    const dt_type sdt = o->m.sdtype;
    for (size_t i = 0; i < ng; i++) {
        if (sdt == DT_F32) {
            ((float *)o->m.biases)[i] = z * ((const float *)o->m.scales)[i];
        } else {
            const uint16_t s = ((const uint16_t *)o->m.scales)[i];
            ((uint16_t *)o->m.biases)[i] = sdt == DT_BF16 ? f32_to_bf16(z * bf16_to_f32(s)) : f32_to_f16(z * f16_to_f32(s));
        }
    }
    o->m.bias_implied = q_biases_implied(&o->m);
    o->d.ibias = o->m.bias_implied;
    CK(o->m.bias_implied, "%s g%d %s: biases written as z * scale are not implied (q_biases_implied)", dt_name(o->m.dtype),
       o->m.group, dt_name(sdt));
    CK(!slcu_upload((void *)o->d.biases, o->m.biases, bias_bytes(o), msg, sizeof msg), "%s", msg);
    if (poisoned) poison((void *)o->d.biases, bias_bytes(o));
}

static void check_ibias(dt_type dt, int rows, int cols, int group, dt_type sdt) {
    char msg[256] = "";
    mat a;
    if (make_mat(&a, dt, rows, cols, group, sdt, msg)) { CK(0, "%s", msg); return; }
    imply_mat(&a, 0);
    enum { N = 40 };
    float *dx = rnd_dev((size_t)N * cols, 1, NULL, msg), *dy = slcu_alloc((size_t)N * rows * 4, msg, sizeof msg);
    int idx[N];
    for (int i = 0; i < N; i++) idx[i] = (i * 17 + 5) % N;
    int *drows = dev_copy(idx, sizeof idx, msg);
    slcu_act da;
    void *abuf = slcu_alloc(slcu_act_bytes(N, cols), msg, sizeof msg);
    CK(!slcu_act_bind(&da, abuf, N, cols, msg, sizeof msg) && !slcu_act_quantize(&da, dx, (size_t)cols, msg, sizeof msg), "%s", msg);
    /* the reference: token t alone, the biases loaded (the switch off), the default one-token kernel */
    slcu_i8_ibias(0);
    float *alone = mm_alone(a.d, &da, drows, idx, N, rows, dy);
    /* 16 and 40 tokens (the GEMM) with the switch on: it still reads the biases, the same bits */
    slcu_i8_ibias(1);
    for (int n = 16; n <= N; n += N - 16) {
        poison(dy, (size_t)n * rows * 4);
        slcu_mm m = {a.d, &da, NULL, n, dy, (size_t)rows, NULL, NULL};
        CK(!slcu_matmul_i8(&m, 1, msg, sizeof msg), "%s", msg);
        float *yy = dl(dy, (size_t)n * rows);
        CK(!memcmp(yy, alone, (size_t)n * rows * 4), "%s g%d %s %dx%d: %d tokens (GEMM) with SLUICE_CUDA_IBIAS=1 differ",
           dt_name(dt), group, dt_name(sdt), rows, cols, n);
        free(yy);
    }
    /* the device's bias words NaN: read (the switch off), the result differs (so the checks below can fail) */
    poison((void *)a.d.biases, bias_bytes(&a));
    slcu_i8_ibias(0);
    poison(dy, (size_t)rows * 4);
    slcu_mm m0 = {a.d, &da, drows, 1, dy, (size_t)rows, NULL, NULL};
    CK(!slcu_matmul_i8(&m0, 1, msg, sizeof msg), "%s", msg);
    float *y0 = dl(dy, (size_t)rows);
    CK(memcmp(y0, alone + (size_t)idx[0] * rows, (size_t)rows * 4), "NaN bias words read with the switch off made no difference");
    free(y0);
    /* the switch on: every one-token kernel and row count, directly, through a device table whose bias pointer is NULL
     * (the decode copy of backend_cuda.c layer_tab) and as N jobs; 2-8 tokens with every kernel (test_cuda_mv.c) */
    slcu_i8_ibias(1);
    const void *htab[6] = {NULL, NULL, NULL, a.d.data, a.d.scales, NULL};
    const int hsel[2] = {1, 0};
    void *dtab = dev_copy(htab, sizeof htab, msg), *dsel = dev_copy(hsel, sizeof hsel, msg);
    const int before = failures;
    check_mv_rows(&a, &da, drows, idx, N, alone, dy, dtab, dsel);
    /* one call of an implied matrix and one whose biases are not (cuda_i8.cu: launches of their own), 1 and 3 tokens */
    mat b;
    if (make_mat(&b, dt, rows, cols, group, sdt, msg)) CK(0, "%s", msg);
    float *dy2 = slcu_alloc((size_t)3 * rows * 4, msg, sizeof msg), *yb[2] = {NULL, NULL};
    for (int on = 0; on < 2; on++) {
        slcu_i8_ibias(on);
        poison(dy, (size_t)3 * rows * 4), poison(dy2, (size_t)3 * rows * 4);
        slcu_mm m2[3] = {{a.d, &da, drows, 1, dy, (size_t)rows, NULL, NULL}, {b.d, &da, drows, 3, dy2, (size_t)rows, NULL, NULL},
                         {a.d, &da, drows + 1, 2, dy + rows, (size_t)rows, NULL, NULL}};
        CK(!slcu_matmul_i8(on ? m2 : m2 + 1, on ? 3 : 1, msg, sizeof msg), "%s", msg);
        yb[on] = dl(dy2, (size_t)3 * rows);
        if (!on) continue;
        float *ya = dl(dy, (size_t)3 * rows);
        int ok = 1;
        for (int t = 0; t < 3; t++) ok &= !memcmp(ya + (size_t)t * rows, alone + (size_t)idx[t] * rows, (size_t)rows * 4);
        CK(ok && !memcmp(yb[0], yb[1], (size_t)3 * rows * 4), "%s g%d %s %dx%d: an implied and a read matrix in one call "
           "differ from each alone", dt_name(dt), group, dt_name(sdt), rows, cols);
        free(ya);
    }
    free(yb[0]), free(yb[1]), slcu_free(dy2);
    free_mat(&b);
    slcu_i8_ibias(-1);
    if (failures == before)
        printf("ok   %-4s int8 group %-3d scales %-4s %5d x %-5d  implied biases (SLUICE_CUDA_IBIAS=1): every matvec bitwise\n",
               dt_name(dt), group, dt_name(sdt), rows, cols);
    slcu_free(dtab), slcu_free(dsel), slcu_free(dx), slcu_free(dy), slcu_free(drows), slcu_free(abuf);
    free(alone);
    free_mat(&a);
}

static void check_ibias_all(void) {
    check_ibias(DT_Q4, 300, 1024, 32, DT_F16); /* a GGUF Q4_0's groups and scales */
    check_ibias(DT_Q8, 300, 1024, 32, DT_BF16);
    check_ibias(DT_Q4, 129, 768, 32, DT_F32);
    check_ibias(DT_Q8, 129, 768, 128, DT_F16);
    check_ibias(DT_Q4, 257, 4096, 64, DT_BF16); /* several chunks at every row count (cuda_mv.cu) */
    check_ibias(DT_Q4, 100, 160, 32, DT_BF16);  /* 5 blocks */
}
