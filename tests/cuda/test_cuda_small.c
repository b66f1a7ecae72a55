/*
 * test_cuda_small.c — issue 24's shorter one-row kernels (included by test_cuda.c, whose helpers they use): the norms
 * on a cluster of 8 CTAs (SLUICE_CUDA_NORM=2, cuda_fused.cu k_add_norm_cl) and the one-warp route in registers
 * (SLUICE_CUDA_ROUTE=2, cuda_route.cuh route_warp_reg), each bitwise the kernel it replaces (k_rmsnorm_q /
 * k_add_norm_q, route_warp_row) on random rows: check_small (in test_cuda's full run and alone by `--small`);
 * `--bench-small` times old against new per launch.
 */

/* d's bytes all set to byte: the two runs poison their outputs differently, so a word one of them leaves unwritten
 * differs */
static void poison_b(void *d, size_t bytes, int byte) {
    char msg[256];
    void *h = malloc(bytes);
    memset(h, byte, bytes);
    slcu_upload(d, h, bytes, msg, sizeof msg);
    free(h);
}

typedef struct { /* one row's inputs and one run's outputs */
    float *x, *y, *cy, *cw, *csh, *csg, *w, *h, *cout;
    void *abuf;
    slcu_act a;
} sn_run;

/* MODE 0: slcu_rmsnorm_q; 1: slcu_add_norm_q's add; 2: its combine of K experts (+ a gated shared one when sh) and add.
 * q8: with the int8 form. Runs slcu_norm_mode 1 and 2 on copies of the same inputs, compares every output. */
static void check_small_norm(int D, int mode, int K, int sh, int q8) {
    char msg[256] = "";
    float *hx = malloc((size_t)D * 4), *hy = malloc((size_t)D * 4), *hcy = malloc((size_t)K * D * 4), *hsh = malloc((size_t)D * 4);
    float *hw = malloc((size_t)D * 4), hcw[16], hsg = nrand();
    for (int i = 0; i < D; i++) hx[i] = nrand() * 2, hy[i] = nrand(), hsh[i] = nrand(), hw[i] = nrand() * 0.5f;
    for (int i = 0; i < K * D; i++) hcy[i] = nrand();
    for (int s = 0; s < K; s++) hcw[s] = (float)urand();
    for (int i = 5 * 32; i < 6 * 32; i++) { /* block 5 all zero: its scale 0 (the quantisation's other branch) */
        hx[i] = hy[i] = hsh[i] = 0;
        for (int s = 0; s < K; s++) hcy[(size_t)s * D + i] = 0;
    }
    const float w_off = urand() < 0.5 ? 0.0f : 1.0f, eps = 1e-6f;
    sn_run r[2];
    const int mode0 = slcu_norm_mode; /* the default's (2 since call P), restored after */
    for (int v = 0; v < 2; v++) {
        sn_run *p = &r[v];
        p->x = dev_copy(hx, (size_t)D * 4, msg), p->y = dev_copy(hy, (size_t)D * 4, msg);
        p->cy = dev_copy(hcy, (size_t)K * D * 4, msg), p->cw = dev_copy(hcw, (size_t)K * 4, msg);
        p->csh = dev_copy(hsh, (size_t)D * 4, msg), p->csg = dev_copy(&hsg, 4, msg), p->w = dev_copy(hw, (size_t)D * 4, msg);
        p->h = slcu_alloc((size_t)D * 4, msg, sizeof msg), p->cout = slcu_alloc((size_t)D * 4, msg, sizeof msg);
        p->abuf = slcu_alloc(slcu_act_bytes(1, D), msg, sizeof msg);
        poison_b(p->h, (size_t)D * 4, v ? 0x7f : 0xff), poison_b(p->cout, (size_t)D * 4, v ? 0x7f : 0xff);
        poison_b(p->abuf, slcu_act_bytes(1, D), v ? 0x7f : 0xff);
        slcu_act_bind(&p->a, p->abuf, 1, D, msg, sizeof msg);
        slcu_norm_mode = v ? 2 : 1;
        CK(slcu_norm_cluster_takes(D) == v, "%d columns: the cluster kernel %s", D, v ? "not taken" : "taken with the switch off");
        if (mode == 0) CK(!slcu_rmsnorm_q(p->x, p->h, D, p->w, w_off, eps, &p->a, msg, sizeof msg), "%s", msg);
        else {
            const slcu_addnorm an = {p->x, mode == 1 ? p->y : NULL, mode == 2 ? p->cy : NULL, p->cw, sh ? p->csh : NULL,
                                     sh ? p->csg : NULL, K, p->cout, p->h, p->w, w_off, eps, D};
            CK(!slcu_add_norm_q(&an, q8 ? &p->a : NULL, msg, sizeof msg), "%s", msg);
        }
    }
    slcu_norm_mode = mode0;
    float *x0 = dl(r[0].x, D), *x1 = dl(r[1].x, D), *h0 = dl(r[0].h, D), *h1 = dl(r[1].h, D);
    float *c0 = dl(r[0].cout, D), *c1 = dl(r[1].cout, D);
    int ok = !memcmp(x0, x1, (size_t)D * 4) && !memcmp(h0, h1, (size_t)D * 4) && (mode != 2 || !memcmp(c0, c1, (size_t)D * 4));
    if (q8 || mode == 0) ok &= same_act(&r[0].a, &r[1].a);
    int finite = 1;
    for (int i = 0; i < D; i++) finite &= isfinite(h0[i]) && isfinite(x0[i]);
    static const char *names[3] = {"rmsnorm", "add + rmsnorm", "combine + add + rmsnorm"};
    CK(ok && finite, "%s on a cluster, %d columns (k %d%s%s): differs from k_add_norm_q / k_rmsnorm_q", names[mode], D, K,
       sh ? ", shared" : "", q8 || !mode ? ", int8 form" : "");
    if (ok && finite)
        printf("ok   %s on a cluster of 8, %d columns%s%s%s: bitwise k_add_norm_q / k_rmsnorm_q\n", names[mode], D,
               mode == 2 ? (K == 8 ? ", k 8" : ", k 4") : "", mode == 2 && sh ? ", gated shared" : "", q8 || !mode ? ", int8 form" : "");
    free(x0), free(x1), free(h0), free(h1), free(c0), free(c1);
    free(hx), free(hy), free(hcy), free(hsh), free(hw);
    for (int v = 0; v < 2; v++) {
        sn_run *p = &r[v];
        slcu_free(p->x), slcu_free(p->y), slcu_free(p->cy), slcu_free(p->cw), slcu_free(p->csh), slcu_free(p->csg);
        slcu_free(p->w), slcu_free(p->h), slcu_free(p->cout), slcu_free(p->abuf);
    }
}

/* slcu_route with warp2 against without, T tokens: random logits; ties (steps of 0.5, +0 and -0); ninf: -inf logits
 * (token 0 with only 3 finite ones: kind 1's fallback past them) */
static void check_small_route(int E, int K, int kind, int norm_topk, int ties, int ninf) {
    char msg[256] = "";
    enum { T = 6 };
    float *hl = malloc((size_t)T * E * 4);
    for (int i = 0; i < T * E; i++) {
        hl[i] = nrand() * 2;
        if (ties) hl[i] = i % 7 == 3 ? (i % 2 ? -0.0f : 0.0f) : roundf(hl[i] * 2) / 2;
        if (ninf && (i < E ? i % (E / 3) != 1 : i % 5 == 2)) hl[i] = -INFINITY;
    }
    float *dl_ = dev_copy(hl, (size_t)T * E * 4, msg);
    int *de[2];
    float *dw[2];
    for (int v = 0; v < 2; v++) {
        de[v] = slcu_alloc((size_t)T * K * 4, msg, sizeof msg), dw[v] = slcu_alloc((size_t)T * K * 4, msg, sizeof msg);
        poison_b(de[v], (size_t)T * K * 4, v ? 0x7f : 0xff), poison_b(dw[v], (size_t)T * K * 4, v ? 0x7f : 0xff);
        slcu_router r = {kind, E, K, norm_topk, 1, 1, 1.0f, NULL, v};
        CK(!slcu_route(&r, dl_, T, de[v], dw[v], msg, sizeof msg), "%s", msg);
    }
    int *e0 = (int *)dl(de[0], (size_t)T * K), *e1 = (int *)dl(de[1], (size_t)T * K);
    float *w0 = dl(dw[0], (size_t)T * K), *w1 = dl(dw[1], (size_t)T * K);
    int ok = !memcmp(e0, e1, (size_t)T * K * 4) && !memcmp(w0, w1, (size_t)T * K * 4), valid = 1;
    for (int i = 0; i < T * K; i++) valid &= e0[i] >= 0 && e0[i] < E;
    CK(ok && valid, "route in registers E %d k %d kind %d norm %d%s%s: differs from route_warp_row", E, K, kind, norm_topk,
       ties ? " (ties)" : "", ninf ? " (-inf)" : "");
    if (ok && valid)
        printf("ok   route in registers E %3d k %2d kind %d norm %d%s%s: bitwise route_warp_row, %d tokens\n", E, K, kind,
               norm_topk, ties ? " (ties)" : "", ninf ? " (-inf)" : "", T);
    free(hl), free(e0), free(e1), free(w0), free(w1);
    slcu_free(dl_);
    for (int v = 0; v < 2; v++) slcu_free(de[v]), slcu_free(dw[v]);
}

static void check_router2_all(void);

static void check_small(void) {
    const int dims[] = {2048, 3072, 4096, 7168, 8192};
    for (int i = 0; i < 5; i++) {
        check_small_norm(dims[i], 0, 1, 0, 1);
        check_small_norm(dims[i], 1, 1, 0, 1);
        check_small_norm(dims[i], 2, 8, 0, 1);
    }
    check_small_norm(2048, 1, 1, 0, 0), check_small_norm(2048, 2, 4, 1, 1), check_small_norm(4096, 2, 8, 1, 0);
    check_small_norm(7168, 2, 8, 1, 1), check_small_norm(2048, 2, 16, 0, 1);
    const int Es[] = {64, 128, 256, 60, 200, 32}, Ks[] = {4, 8, 8, 6, 8, 32};
    for (int i = 0; i < 6; i++)
        for (int kind = 0; kind < 2; kind++) {
            check_small_route(Es[i], Ks[i], kind, 1, 0, 0);
            check_small_route(Es[i], Ks[i], kind, 1, 1, 0);
        }
    check_small_route(128, 8, 0, 0, 0, 0), check_small_route(128, 4, 0, 0, 1, 0), check_small_route(256, 8, 0, 1, 0, 0);
    check_small_route(128, 8, 1, 0, 0, 1), check_small_route(64, 8, 1, 0, 0, 1), check_small_route(256, 8, 0, 1, 0, 1);
    fuse_warp2 = 1; /* the router's matvec whose last CTA routes in registers (cuda_mat.cu k_matvec_route) */
    check_fuse_router(DT_BF16, 128, 2048, 8, 0, 1, 0), check_fuse_router(DT_F32, 128, 2048, 8, 1, 0, 1);
    check_fuse_router(DT_F16, 256, 1024, 8, 0, 1, 1), check_fuse_router(DT_BF16, 60, 512, 4, 0, 0, 0);
    fuse_warp2 = 0;
    check_router2_all(); /* SLUICE_CUDA_ROUTER=2 */
}

/* ---- --bench-small: old against new per launch (us): the median of 200 launches each timed alone by events, and the
 * mean of 200 back to back (with SLUICE_CUDA_PDL=1 each overlaps the one before), in alternating rounds ---- */
typedef struct { int what, D, K; sn_run *r; slcu_mat *wr; float *x, *lg; int *te, *done; float *tw; } sb_ctx;
static void sb_run(void *c) {
    sb_ctx *s = c;
    char msg[256];
    sn_run *p = s->r;
    if (s->what == 0) slcu_rmsnorm_q(p->x, p->h, s->D, p->w, 1.0f, 1e-6f, &p->a, msg, sizeof msg);
    else if (s->what <= 2) {
        const slcu_addnorm an = {p->x, s->what == 1 ? p->y : NULL, s->what == 2 ? p->cy : NULL, p->cw, NULL, NULL, s->K,
                                 p->cout, p->h, p->w, 0.0f, 1e-6f, s->D};
        slcu_add_norm_q(&an, &p->a, msg, sizeof msg);
    } else {
        const slcu_router r = {0, s->D, s->K, 1, 1, 1, 1.0f, NULL, slcu_route_mode == 2};
        if (s->what == 3) slcu_route(&r, s->lg, 1, s->te, s->tw, msg, sizeof msg);
        else slcu_matvec_route(s->wr, s->x, s->lg, &r, s->te, s->tw, s->done, msg, sizeof msg);
    }
}

static void bench_small(void) {
    char msg[256] = "";
    enum { DM = 8192, REPS = 200, ROUNDS = 3 };
    sn_run r;
    r.x = rnd_dev(DM, 1, NULL, msg), r.y = rnd_dev(DM, 0.01f, NULL, msg), r.cy = rnd_dev((size_t)8 * DM, 0.01f, NULL, msg);
    r.cw = rnd_dev(8, 0.1f, NULL, msg), r.w = rnd_dev(DM, 1, NULL, msg), r.h = slcu_alloc(DM * 4, msg, sizeof msg);
    r.cout = slcu_alloc(DM * 4, msg, sizeof msg), r.abuf = slcu_alloc(slcu_act_bytes(1, DM), msg, sizeof msg);
    mat wr;
    if (make_mat(&wr, DT_BF16, 128, 2048, 0, DT_F32, msg)) { printf("%s\n", msg); return; }
    int zero = 0, *done = dev_copy(&zero, sizeof zero, msg);
    float *lg = rnd_dev(256, 1, NULL, msg), *tw = slcu_alloc(64 * 4, msg, sizeof msg);
    int *te = slcu_alloc(64 * 4, msg, sizeof msg);
    static const struct { int what, D, K; const char *name; } cs[] = {
        {2, 2048, 8, "combine(8) + add + rmsnorm + int8, 2048"}, {1, 2048, 0, "add + rmsnorm + int8, 2048"},
        {0, 2048, 0, "rmsnorm + int8, 2048"}, {2, 4096, 8, "combine(8) + add + rmsnorm + int8, 4096"},
        {2, 7168, 8, "combine(8) + add + rmsnorm + int8, 7168"}, {3, 128, 8, "route E 128 k 8 (k_route_warp)"},
        {3, 256, 8, "route E 256 k 8 (k_route_warp)"}, {4, 128, 8, "router bf16 128 x 2048 + route (k_matvec_route)"},
        {5, 128, 8, "router bf16 128 x 2048 + route: ROUTER=1 / 2"}};
    printf("\nissue 24's one-row kernels, us a launch: old (mode 1) / new (mode 2); median of %d alone | mean of %d back to back\n",
           REPS, REPS);
    for (unsigned c = 0; c < sizeof cs / sizeof *cs; c++) {
        slcu_act_bind(&r.a, r.abuf, 1, cs[c].D < 256 ? 2048 : cs[c].D, msg, sizeof msg);
        sb_ctx s = {cs[c].what, cs[c].D, cs[c].K, &r, &wr.d, r.x, lg, te, done, tw};
        printf("%-50s", cs[c].name);
        for (int round = 0; round < ROUNDS; round++)
            for (int v = 1; v <= 2; v++) {
                slcu_norm_mode = slcu_route_mode = v;
                if (cs[c].what == 5) slcu_route_mode = 2, slcu_router_mode = v; /* k_matvec_route, then k_router2 */
                const float med = slcu_time_median(sb_run, &s, REPS), mean = slcu_time(sb_run, &s, REPS);
                printf(" %s%6.2f|%6.2f", v == 1 ? "  old " : " new ", med * 1e3, mean * 1e3);
            }
        printf("\n");
    }
    slcu_norm_mode = slcu_route_mode = slcu_router_mode = 2; /* the defaults */
    slcu_free(r.x), slcu_free(r.y), slcu_free(r.cy), slcu_free(r.cw), slcu_free(r.w), slcu_free(r.h), slcu_free(r.cout);
    slcu_free(r.abuf), slcu_free(done), slcu_free(lg), slcu_free(tw), slcu_free(te);
    free_mat(&wr);
}

/* ---- SLUICE_CUDA_ROUTER=2 (cuda_mat.cu k_router2): the router's matvec on a warp a row, the warp that completes
 * the count routes; checked bitwise against today's two launches (slcu_matmul, then slcu_route: k_route_warp, or
 * k_route for kind 2) and, for kinds 0 and 1, today's fused k_matvec_route (slcu_router_mode 1): logits, experts and
 * weights of STEPS tokens through the same counter (left zero), outputs poisoned with different bytes a run.
 * kind 2: n_group groups, topk_group of them, a bias [E] (or none), routed_scale 2.5. ties: every third row a copy of
 * the one before (equal logits; kind 2 with a bias of steps of 1/8 too). W: warps a CTA (slcu_router_warps). ---- */
typedef struct { int kind, E, H, K, norm, G, TG, bias, ties, w2; dt_type dt; const char *what; } r2_case;

static int check_router2(const r2_case *c, int W) {
    char msg[256] = "";
    mat w;
    if (make_mat(&w, c->dt, c->E, c->H, 0, DT_F32, msg)) { CK(0, "%s", msg); return 0; }
    if (c->ties) {
        char *rows = (char *)w.m.data;
        const size_t rb = (size_t)c->H * dt_size(c->dt);
        for (int r = 1; r < c->E; r += 3) memcpy(rows + (size_t)r * rb, rows + (size_t)(r - 1) * rb, rb);
        slcu_upload(w.dev, w.host, w.bytes, msg, sizeof msg);
    }
    enum { STEPS = 4 };
    float *dx = rnd_dev((size_t)STEPS * c->H, 1, NULL, msg), *hb = malloc((size_t)c->E * 4);
    for (int e = 0; e < c->E; e++) hb[e] = c->ties ? (float)(e / 3 % 5) / 8 : nrand() * 0.1f; /* a copied row's too */
    float *db = c->bias ? dev_copy(hb, (size_t)c->E * 4, msg) : NULL;
    const slcu_router r = {c->kind, c->E, c->K, c->norm, c->G, c->TG, c->kind == 2 ? 2.5f : 1.0f, db, c->w2};
    float *lg[3];
    int *te[3], zero = 0, *done = dev_copy(&zero, sizeof zero, msg);
    float *tw[3];
    for (int v = 0; v < 3; v++)
        lg[v] = slcu_alloc((size_t)c->E * 4, msg, sizeof msg), te[v] = slcu_alloc((size_t)c->K * 4, msg, sizeof msg),
        tw[v] = slcu_alloc((size_t)c->K * 4, msg, sizeof msg);
    const int mode0 = slcu_router_mode, w0 = slcu_router_warps;
    int same = 1, valid = 1, launched = 1;
    for (int s = 0; s < STEPS; s++) {
        const float *x = dx + (size_t)s * c->H;
        for (int v = 0; v < 3; v++)
            poison_b(lg[v], (size_t)c->E * 4, 0x7f + v * 0x40), poison_b(te[v], (size_t)c->K * 4, 0x7f + v * 0x40),
                poison_b(tw[v], (size_t)c->K * 4, 0x7f + v * 0x40);
        /* 0: the two launches; 1: today's fused kernel (kinds 0, 1); 2: k_router2 */
        CK(!slcu_matmul(&w.d, x, lg[0], 1, msg, sizeof msg) && !slcu_route(&r, lg[0], 1, te[0], tw[0], msg, sizeof msg),
           "%s", msg);
        slcu_router_mode = 1;
        const int rc1 = c->kind == 2 ? 0 : slcu_matvec_route(&w.d, x, lg[1], &r, te[1], tw[1], done, msg, sizeof msg);
        CK(rc1 >= 0, "%s", msg);
        slcu_router_mode = 2, slcu_router_warps = W;
        const int rc2 = slcu_matvec_route(&w.d, x, lg[2], &r, te[2], tw[2], done, msg, sizeof msg);
        CK(rc2 >= 0, "%s", msg);
        slcu_router_mode = mode0, slcu_router_warps = w0;
        launched &= rc2 == 1 && (c->kind == 2 || rc1 == 1);
        float *l[3], *ww[3];
        int *ee[3];
        for (int v = 0; v < 3; v++) l[v] = dl(lg[v], c->E), ww[v] = dl(tw[v], c->K), ee[v] = (int *)dl(te[v], c->K);
        for (int v = 1; v < 3; v++) {
            if (v == 1 && c->kind == 2) continue;
            same &= !memcmp(l[0], l[v], (size_t)c->E * 4) && !memcmp(ee[0], ee[v], (size_t)c->K * 4) &&
                    !memcmp(ww[0], ww[v], (size_t)c->K * 4);
        }
        for (int i = 0; i < c->K; i++) valid &= ee[0][i] >= 0 && ee[0][i] < c->E && isfinite(ww[0][i]);
        for (int v = 0; v < 3; v++) free(l[v]), free(ww[v]), free(ee[v]);
    }
    int *z = (int *)dl(done, 1);
    CK(launched, "router %s: k_router2 not launched", c->what);
    CK(same && valid && !*z, "router %s %s %d x %d k %d kind %d, %d warps a CTA: k_router2 differs from the two "
       "launches%s (counter %d)", c->what, dt_name(c->dt), c->E, c->H, c->K, c->kind, W,
       c->kind == 2 ? "" : " / k_matvec_route", *z);
    const int ok = launched && same && valid && !*z;
    if (ok)
        printf("ok   k_router2 %-22s %-4s %4d x %-5d k %2d kind %d%s%s%s, %d warp%s a CTA: bitwise, %d tokens\n",
               c->what, dt_name(c->dt), c->E, c->H, c->K, c->kind, c->norm ? " norm" : "", c->ties ? " ties" : "",
               c->w2 ? "" : " (route_warp_row)", W, W > 1 ? "s" : "", STEPS);
    free(z), free(hb);
    slcu_free(dx), slcu_free(db), slcu_free(done);
    for (int v = 0; v < 3; v++) slcu_free(lg[v]), slcu_free(te[v]), slcu_free(tw[v]);
    free_mat(&w);
    return ok;
}

static const r2_case r2_cases[] = {
    {0, 128, 2048, 8, 1, 1, 1, 0, 0, 1, DT_BF16, "Qwen3-30B-A3B (synth)"},
    {0, 128, 2048, 8, 1, 1, 1, 0, 1, 1, DT_BF16, "Qwen3-30B-A3B (synth)"},
    {0, 128, 2048, 8, 1, 1, 1, 0, 0, 1, DT_F32, "Qwen3-30B-A3B (GGUF)"},
    {0, 128, 2048, 8, 1, 1, 1, 0, 1, 1, DT_F16, "Qwen3-30B-A3B f16"},
    {0, 128, 2048, 8, 1, 1, 1, 0, 0, 0, DT_BF16, "30B, warp2 off"},
    {1, 64, 4096, 4, 0, 1, 1, 0, 0, 1, DT_F32, "top-k softmax, 4096"},
    {0, 60, 512, 4, 0, 1, 1, 0, 1, 1, DT_F16, "60 rows"},
    {0, 1024, 512, 16, 1, 1, 1, 0, 0, 1, DT_BF16, "1024 experts"},
    {0, 256, 7168, 8, 1, 1, 1, 0, 0, 1, DT_BF16, "E 256, hidden 7168"},
    {2, 256, 7168, 8, 1, 8, 4, 1, 0, 1, DT_BF16, "DeepSeek-V3"},
    {2, 256, 7168, 8, 1, 8, 4, 1, 1, 1, DT_F32, "DeepSeek-V3 f32"},
    {2, 256, 1024, 8, 0, 8, 4, 0, 0, 1, DT_F16, "sigmoid, groups, no bias"},
    {2, 32, 1024, 4, 1, 1, 1, 1, 1, 1, DT_BF16, "sigmoid, one group"},
    {2, 160, 2048, 8, 1, 1, 1, 1, 0, 1, DT_BF16, "sigmoid, 160, one group"},
    {2, 128, 2048, 6, 1, 64, 6, 1, 0, 1, DT_F32, "sigmoid, 64 groups"},
    {2, 100, 512, 8, 0, 4, 2, 1, 1, 1, DT_BF16, "sigmoid, 100, 4 groups"},
};

static void check_router2_all(void) {
    const int n = (int)(sizeof r2_cases / sizeof *r2_cases);
    for (int i = 0; i < n; i++) check_router2(&r2_cases[i], 1);
    check_router2(&r2_cases[0], 2), check_router2(&r2_cases[6], 4), check_router2(&r2_cases[9], 4);
    check_router2(&r2_cases[2], 4), check_router2(&r2_cases[13], 2);
}

/* ---- --router: us a launch, old (today's fused k_matvec_route; kind 2: slcu_matmul + k_route) against k_router2 with
 * 1, 2, 4 warps a CTA: the median of REPS launches each timed alone by events, and the mean of REPS back to back (with
 * PDL, the default, each overlaps the one before); "warm": one matrix (in L2 after the first launch); "cold": NC copies
 * of it in turn, more bytes than the L2 holds, as in a decode step (a layer's router read once a token) ---- */
typedef struct { const r2_case *c; mat *w; int nc, at, old; float *x, *lg, *tw; int *te, *done; slcu_router r; } r2b;

static void r2_run(void *p) {
    r2b *b = p;
    char msg[256];
    slcu_mat m = b->w->d;
    const size_t stride = b->w->bytes;
    if (b->nc > 1) { /* copy at of NC, one after the other in one buffer */
        const size_t off = (size_t)(b->at++ % b->nc) * stride;
        m.data = (const uint8_t *)m.data + off;
    }
    if (b->old && b->c->kind == 2) {
        slcu_matmul(&m, b->x, b->lg, 1, msg, sizeof msg);
        slcu_route(&b->r, b->lg, 1, b->te, b->tw, msg, sizeof msg);
    } else slcu_matvec_route(&m, b->x, b->lg, &b->r, b->te, b->tw, b->done, msg, sizeof msg);
}

static void bench_router2(void) {
    char msg[256] = "";
    enum { REPS = 400, ROUNDS = 3 };
    const int pick[] = {0, 2, 9};
    printf("\nthe router's matvec + route, us a launch: old (k_matvec_route; kind 2: matvec + k_route) | k_router2 "
           "(SLUICE_CUDA_ROUTER=2) with 1 / 2 / 4 warps a CTA; each: median of %d alone / mean of %d back to back\n",
           REPS, REPS);
    for (int pi = 0; pi < 3; pi++) {
        const r2_case *c = &r2_cases[pick[pi]];
        mat w;
        if (make_mat(&w, c->dt, c->E, c->H, 0, DT_F32, msg)) { printf("%s\n", msg); return; }
        const int nc = (int)(160e6 / (double)w.bytes) + 1; /* > 3 L2s of an H100 (50 MB) */
        uint8_t *big = slcu_alloc((size_t)nc * w.bytes, msg, sizeof msg);
        for (int i = 0; big && i < nc; i++) slcu_upload(big + (size_t)i * w.bytes, w.host, w.bytes, msg, sizeof msg);
        float *hb = malloc((size_t)c->E * 4);
        for (int e = 0; e < c->E; e++) hb[e] = nrand() * 0.1f;
        float *db = c->bias ? dev_copy(hb, (size_t)c->E * 4, msg) : NULL;
        int zero = 0;
        r2b b = {c, &w, 1, 0, 1, rnd_dev((size_t)c->H, 1, NULL, msg), slcu_alloc((size_t)c->E * 4, msg, sizeof msg),
                 slcu_alloc(64 * 4, msg, sizeof msg), slcu_alloc(64 * 4, msg, sizeof msg), dev_copy(&zero, 4, msg),
                 {c->kind, c->E, c->K, c->norm, c->G, c->TG, 2.5f, db, 1}};
        mat wbig = w;
        wbig.dev = big, wbig.d.data = big;
        for (int cold = 0; cold < 2 && (!cold || big); cold++) {
            b.w = cold ? &wbig : &w, b.nc = cold ? nc : 1;
            printf("%-28s %-4s %4d x %-5d %s:", c->what, dt_name(c->dt), c->E, c->H, cold ? "cold" : "warm");
            float bm[4] = {1e9f, 1e9f, 1e9f, 1e9f}, bb[4] = {1e9f, 1e9f, 1e9f, 1e9f}; /* the best round's */
            for (int round = 0; round < ROUNDS; round++) {
                for (int v = 0; v < 4; v++) {
                    b.old = v == 0;
                    slcu_router_mode = v ? 2 : 1, slcu_router_warps = v == 3 ? 4 : v;
                    const float med = slcu_time_median(r2_run, &b, REPS) * 1e3f;
                    const float mean = slcu_time(r2_run, &b, REPS) * 1e3f;
                    bm[v] = fminf(bm[v], med), bb[v] = fminf(bb[v], mean);
                    printf(" %s%5.2f/%5.2f", v == 0 ? " old " : v == 1 ? "| " : "", med, mean);
                }
                printf(round < ROUNDS - 1 ? "\n%52s" : "\n", "");
            }
            int bw = 1; /* the fastest warps a CTA back to back */
            for (int v = 2; v < 4; v++)
                if (bb[v] < bb[bw]) bw = v;
            printf("%52s best of the rounds: old %.2f us alone, %.2f back to back; k_router2 (1 warp a CTA) %.2f / "
                   "%.2f (%.2fx / %.2fx); fastest back to back: %d warp%s a CTA, %.2f us\n", "", bm[0], bb[0], bm[1],
                   bb[1], bm[0] / bm[1], bb[0] / bb[1], bw == 3 ? 4 : bw, bw > 1 ? "s" : "", bb[bw]);
        }
        slcu_router_mode = 1, slcu_router_warps = 1;
        slcu_free(b.x), slcu_free(b.lg), slcu_free(b.tw), slcu_free(b.te), slcu_free(b.done), slcu_free(db);
        slcu_free(big);
        free(hb);
        free_mat(&w);
    }
}
