/* test_cuda_hybrid.c — included by test_cuda.c (its helpers: make_mat, dev_copy, dl, poison, CK): issue 25's
 * exactness contract on the device. An expert the hybrid step runs on the host (src/kernels/kernels_dev.c) must
 * give the device's bits: the int8 matmul in cuda.h's canonical order (matvec and GEMM, 1 - 40 tokens), the
 * SwiGLU with canon_exp.h's e^x (slcu_swiglu and the fused slcu_swiglu_q), and a whole q8/q4 expert (gate, up,
 * SwiGLU with the mid rows' int8 form, down) as the CUDA backend's ffn runs it, alone and as kern_ffn_dev_multi runs
 * a layer's host experts (session 34); matrices with implied biases (a GGUF Q4_0 / Q8_0 pack's: the host computes
 * them from the scales, the device with slcu_mat ibias). Every comparison is bitwise. */

/* a's biases rewritten as z times its scales (q_biases_implied) on the host and the device; 1 when they are */
static int imply(mat *a) {
    const float z = a->m.dtype == DT_Q8 ? -128.0f : -8.0f;
    const size_t ng = (size_t)a->m.rows * (size_t)(a->m.cols / a->m.group);
    for (size_t i = 0; i < ng; i++) {
        const float b = z * q_scale_at(a->m.scales, a->m.sdtype, i);
        if (a->m.sdtype == DT_F32) ((float *)a->m.biases)[i] = b;
        else ((uint16_t *)a->m.biases)[i] = a->m.sdtype == DT_BF16 ? f32_to_bf16(b) : f32_to_f16(b);
    }
    char msg[256] = "";
    a->m.bias_implied = a->d.ibias = q_biases_implied(&a->m);
    CK(!slcu_upload(a->dev, a->host, a->bytes, msg, sizeof msg), "%s", msg);
    return a->m.bias_implied;
}

static void check_hybrid_mm(dt_type dt, int rows, int cols, int group, dt_type sdt, int implied) {
    char msg[256] = "";
    mat a;
    if (make_mat(&a, dt, rows, cols, group, sdt, msg)) { CK(0, "%s", msg); return; }
    if (implied) CK(imply(&a), "%s g%d %s: biases not implied", dt_name(dt), group, dt_name(sdt));
    enum { N = 40 };
    float *x = malloc((size_t)N * cols * 4), *host = malloc((size_t)N * rows * 4);
    for (size_t i = 0; i < (size_t)N * cols; i++) x[i] = nrand() * (i / cols % 5 == 2 ? 30.f : 1.f);
    kern_act ca;
    void *cbuf = malloc(kern_act_bytes(N, cols));
    kern_act_init(&ca, cbuf, x, (size_t)cols, N, cols, 1);
    kern_act_prepare(&ca);
    kern_matmul_i8_dev(&a.m, &ca, host, (size_t)rows, 0, rows);
    float *dx = dev_copy(x, (size_t)N * cols * 4, msg), *dy = slcu_alloc((size_t)N * rows * 4, msg, sizeof msg);
    slcu_act da;
    void *abuf = slcu_alloc(slcu_act_bytes(N, cols), msg, sizeof msg);
    CK(!slcu_act_bind(&da, abuf, N, cols, msg, sizeof msg) && !slcu_act_quantize(&da, dx, (size_t)cols, msg, sizeof msg), "%s", msg);
    const int ns_[] = {1, 3, 8, 16, 40};
    for (unsigned k = 0; k < sizeof ns_ / sizeof *ns_; k++) {
        poison(dy, (size_t)N * rows * 4);
        slcu_mm m = {a.d, &da, NULL, ns_[k], dy, (size_t)rows, NULL, NULL};
        CK(!slcu_matmul_i8(&m, 1, msg, sizeof msg), "%s", msg);
        float *y = dl(dy, (size_t)ns_[k] * rows);
        CK(!memcmp(y, host, (size_t)ns_[k] * rows * 4), "%s g%d %s %dx%d n=%d: the host's device-order matmul differs",
           dt_name(dt), group, dt_name(sdt), rows, cols, ns_[k]);
        free(y);
    }
    printf("ok   hybrid: %-4s group %-3d %-4s %4d x %-4d%s host (kernels_dev.c) == device, bitwise (1-40 tokens)\n",
           dt_name(dt), group, dt_name(sdt), rows, cols, implied ? " implied biases" : "");
    free(x), free(host), free(cbuf), slcu_free(dx), slcu_free(dy), slcu_free(abuf);
    free_mat(&a);
}

static void check_hybrid_swiglu(void) {
    char msg[256] = "";
    enum { T = 4, I = 1024, n = T * I };
    float *g = malloc(n * 4), *u = malloc(n * 4), *ref = malloc(n * 4);
    for (int i = 0; i < n; i++) g[i] = (float)(urand() * 240 - 120) * (i % 3 ? 0.05f : 1.f), u[i] = nrand();
    g[0] = 0.f, g[1] = -0.f, g[2] = 88.8f, g[3] = -104.f, g[4] = 1e-30f, g[5] = -89.f;
    kern_swiglu_dev(g, u, ref, n);
    float *dg = dev_copy(g, n * 4, msg), *du = dev_copy(u, n * 4, msg), *dy = slcu_alloc(n * 4, msg, sizeof msg);
    CK(!slcu_swiglu(dg, du, dy, n, msg, sizeof msg), "%s", msg);
    float *y = dl(dy, n);
    CK(!memcmp(y, ref, n * 4), "slcu_swiglu differs from kern_swiglu_dev");
    slcu_act qa;
    void *qb = slcu_alloc(slcu_act_bytes(T, I), msg, sizeof msg);
    CK(!slcu_act_bind(&qa, qb, T, I, msg, sizeof msg) && !slcu_swiglu_q(dg, du, dy, &qa, msg, sizeof msg), "%s", msg);
    float *yq = dl(dy, n);
    CK(!memcmp(yq, ref, n * 4), "slcu_swiglu_q differs from kern_swiglu_dev");
    printf("ok   hybrid: SwiGLU (canon_exp.h) host == device, bitwise (slcu_swiglu, slcu_swiglu_q)\n");
    free(g), free(u), free(ref), free(y), free(yq), slcu_free(dg), slcu_free(du), slcu_free(dy), slcu_free(qb);
}

/* A whole expert: the CUDA backend's ffn (gate and up, slcu_swiglu_q with the mid rows' int8 form, down) against
 * kern_ffn_dev over the same n token rows. */
static void check_hybrid_ffn(int H, int I, dt_type dt, int group, dt_type sdt, dt_type ddt, int dgroup, int n, int implied) {
    char msg[256] = "";
    mat gm, um, dm;
    if (make_mat(&gm, dt, I, H, group, sdt, msg) || make_mat(&um, dt, I, H, group, sdt, msg) ||
        make_mat(&dm, ddt, H, I, dgroup, sdt, msg)) { CK(0, "%s", msg); return; }
    if (implied) CK(imply(&gm) && imply(&um) && imply(&dm), "expert: biases not implied");
    float *x = malloc((size_t)n * H * 4), *g = malloc((size_t)n * I * 4), *u = malloc((size_t)n * I * 4);
    float *y = malloc((size_t)n * H * 4);
    for (size_t i = 0; i < (size_t)n * H; i++) x[i] = nrand() * 2.f;
    void *xb = malloc(kern_act_bytes(n, H)), *mb = malloc(kern_act_bytes(n, I));
    kern_act ca;
    kern_act_init(&ca, xb, x, (size_t)H, n, H, 1);
    tn_expert ex;
    memset(&ex, 0, sizeof ex);
    ex.gate = gm.m, ex.up = um.m, ex.down = dm.m;
    pool_t *pool = pool_new(4);
    CK(kern_ffn_dev(pool, &ex, &ca, I, g, u, mb, y, (size_t)H) == 0, "kern_ffn_dev refused the expert");
    /* the same expert twice in one kern_ffn_dev_multi call (a layer's host experts, one act shared) */
    float *g2 = malloc((size_t)2 * n * I * 4), *u2 = malloc((size_t)2 * n * I * 4), *y2 = malloc((size_t)2 * n * H * 4);
    void *xb2 = malloc(kern_act_bytes(n, H)), *mb2 = malloc(2 * kern_act_bytes(n, I));
    kern_act ca2;
    kern_act_init(&ca2, xb2, x, (size_t)H, n, H, 1);
    kern_ffn_arg args[2];
    for (int i = 0; i < 2; i++)
        args[i] = (kern_ffn_arg){&ex, &ca2, g2 + (size_t)i * n * I, u2 + (size_t)i * n * I,
                                 (uint8_t *)mb2 + (size_t)i * kern_act_bytes(n, I), y2 + (size_t)i * n * H, (size_t)H};
    CK(kern_ffn_dev_multi(pool, args, 2, I) == 0, "kern_ffn_dev_multi refused the expert");
    pool_free(pool);
    float *dx = dev_copy(x, (size_t)n * H * 4, msg), *dg = slcu_alloc((size_t)n * I * 4, msg, sizeof msg);
    float *du = slcu_alloc((size_t)n * I * 4, msg, sizeof msg), *dy = slcu_alloc((size_t)n * H * 4, msg, sizeof msg);
    void *ab = slcu_alloc(slcu_act_bytes(n, H), msg, sizeof msg), *mbd = slcu_alloc(slcu_act_bytes(n, I), msg, sizeof msg);
    slcu_act da, dmid;
    CK(!slcu_act_bind(&da, ab, n, H, msg, sizeof msg) && !slcu_act_quantize(&da, dx, (size_t)H, msg, sizeof msg) &&
       !slcu_act_bind(&dmid, mbd, n, I, msg, sizeof msg), "%s", msg);
    slcu_mm gu[2] = {{gm.d, &da, NULL, n, dg, (size_t)I, NULL, NULL}, {um.d, &da, NULL, n, du, (size_t)I, NULL, NULL}};
    slcu_mm dn = {dm.d, &dmid, NULL, n, dy, (size_t)H, NULL, NULL};
    poison(dy, (size_t)n * H * 4);
    CK(!slcu_matmul_i8(gu, 2, msg, sizeof msg) && !slcu_swiglu_q(dg, du, dg, &dmid, msg, sizeof msg) &&
       !slcu_matmul_i8(&dn, 1, msg, sizeof msg), "%s", msg);
    float *yd = dl(dy, (size_t)n * H);
    CK(!memcmp(yd, y, (size_t)n * H * 4), "%s/%s expert %dx%d, %d tokens: the host's differs from the device's", dt_name(dt),
       dt_name(ddt), H, I, n);
    CK(!memcmp(yd, y2, (size_t)n * H * 4) && !memcmp(yd, y2 + (size_t)n * H, (size_t)n * H * 4),
       "%s/%s expert %dx%d, %d tokens: kern_ffn_dev_multi's differs from the device's", dt_name(dt), dt_name(ddt), H, I, n);
    printf("ok   hybrid: expert %s g%d / down %s g%d, H %d I %d, %d token%s%s: host (alone, multi) == device, bitwise\n",
           dt_name(dt), group, dt_name(ddt), dgroup, H, I, n, n == 1 ? "" : "s", implied ? ", implied biases" : "");
    free(x), free(g), free(u), free(y), free(xb), free(mb), free(yd), free(g2), free(u2), free(y2), free(xb2), free(mb2);
    slcu_free(dx), slcu_free(dg), slcu_free(du), slcu_free(dy), slcu_free(ab), slcu_free(mbd);
    free_mat(&gm), free_mat(&um), free_mat(&dm);
}

static void check_hybrid(void) {
    check_hybrid_swiglu();
    check_hybrid_mm(DT_Q4, 768, 2048, 64, DT_BF16, 0);
    check_hybrid_mm(DT_Q4, 130, 1024, 32, DT_F16, 0);
    check_hybrid_mm(DT_Q8, 257, 768, 128, DT_F32, 0);
    check_hybrid_mm(DT_Q8, 64, 2048, 32, DT_BF16, 0);
    check_hybrid_mm(DT_Q4, 768, 2048, 32, DT_F16, 1); /* the GGUF Q4_0 pack's gate / up */
    check_hybrid_mm(DT_Q8, 130, 1024, 32, DT_F16, 1);
    check_hybrid_ffn(2048, 768, DT_Q4, 64, DT_BF16, DT_Q4, 64, 1, 0);
    check_hybrid_ffn(512, 160, DT_Q8, 32, DT_F16, DT_Q4, 32, 3, 0);
    check_hybrid_ffn(256, 96, DT_Q4, 128, DT_F32, DT_Q8, 32, 17, 0);
    check_hybrid_ffn(2048, 768, DT_Q4, 32, DT_F16, DT_Q4, 32, 1, 1); /* the 30B shape's GGUF Q4_0 expert */
}
