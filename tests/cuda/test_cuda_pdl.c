/*
 * test_cuda_pdl.c — overlapped launches (cuda_pdl.cu; docs/CUDA.md "Overlapped launches") in test_cuda (included by
 * test_cuda.c, whose helpers it uses): a decode layer's chain of kernels, queued PD_STEPS tokens deep with no wait
 * between them (the embedding, add + norm + int8 form, q/k/v, q/k norm + RoPE, the f16 attention with the KV append,
 * o, the router's matvec and choice, the experts' gate/up through the device table, SwiGLU, down, the combine), run
 * with programmatic dependent launch off, on the one-token matvecs only (SLUICE_CUDA_PDL=2) and on every kernel
 * (unset or 1), with mv1c_i8 and mv1d_i8: every output bitwise the run without it. Each step writes new values over
 * the same buffers (the int8 form of one norm is the next norm's, as the backend's nq_buf; the token id comes by a
 * queued copy from pinned memory, as backend_cuda.c dev_upload's), so a kernel that touched them before its pdl_wait
 * would read the step before's. The expert ids start as one valid id in every cell (PD_E - 1, which no route's choice
 * of k distinct experts is), so a matvec that read its cell before the route wrote it computes with a wrong expert: a
 * bitwise difference, named, where the 0xff poison made tab[-1] an illegal address that ended the device context for
 * the runs after it (session 32's first device run: cuda_i8.cuh resolve says why it happened).
 */

enum { PD_H = 1024, PD_NH = 8, PD_NKV = 2, PD_HD = 128, PD_E = 16, PD_K = 4, PD_I = 256, PD_V = 64, PD_STEPS = 6,
       PD_CAP = 256, PD_P0 = 150 }; /* positions 150 ..: three chunks of the attention's decode pair */

typedef struct {
    mat emb, wq, wk, wv, wo, wr, gate, up, down;
    const void **tab; /* device [gate | up | down][E][data, scales, biases] */
    int *tok, *htok, *te; /* tok: the step's id on the device, copied from htok (pinned [PD_STEPS]) */
    float *resid, *xe, *hn, *nw[3], *qn, *kn, *yq, *yk, *yv, *ao, *yo, *logits, *tw, *g, *u, *ys, *comb;
    void *kc, *vc, *abuf, *obuf, *mbuf;
    float *h_resid;
    uint16_t *h_kc, *h_vc;
} pd_layer;

/* the device table of one kind of expert matrix: E experts of rows rows each, consecutive in m */
static void pd_tab(const void **h, const mat *m, int rows) {
    const size_t cb = q_row_code_bytes(m->d.dtype, m->d.cols);
    const size_t sb = (size_t)(m->d.cols / m->d.group) * dt_size(m->d.sdtype);
    for (int e = 0; e < PD_E; e++) {
        const size_t r0 = (size_t)e * rows;
        h[3 * e] = (const uint8_t *)m->d.data + r0 * cb;
        h[3 * e + 1] = (const uint8_t *)m->d.scales + r0 * sb, h[3 * e + 2] = (const uint8_t *)m->d.biases + r0 * sb;
    }
}

static int pd_make(pd_layer *L, char *msg) {
    const int Q = PD_NH * PD_HD, KV = PD_NKV * PD_HD;
    memset(L, 0, sizeof *L);
    if (make_mat(&L->emb, DT_Q8, PD_V, PD_H, 64, DT_F16, msg) || make_mat(&L->wq, DT_Q4, Q, PD_H, 64, DT_BF16, msg) ||
        make_mat(&L->wk, DT_Q4, KV, PD_H, 64, DT_BF16, msg) || make_mat(&L->wv, DT_Q4, KV, PD_H, 64, DT_BF16, msg) ||
        make_mat(&L->wo, DT_Q8, PD_H, Q, 32, DT_F16, msg) || make_mat(&L->wr, DT_F32, PD_E, PD_H, 0, DT_F32, msg) ||
        make_mat(&L->gate, DT_Q4, PD_E * PD_I, PD_H, 64, DT_BF16, msg) ||
        make_mat(&L->up, DT_Q4, PD_E * PD_I, PD_H, 64, DT_BF16, msg) ||
        make_mat(&L->down, DT_Q8, PD_E * PD_H, PD_I, 32, DT_F16, msg))
        return -1;
    const void *h[9 * PD_E];
    pd_tab(h, &L->gate, PD_I), pd_tab(h + 3 * PD_E, &L->up, PD_I), pd_tab(h + 6 * PD_E, &L->down, PD_H);
    L->tab = dev_copy(h, sizeof h, msg);
    if (!(L->htok = slcb_alloc(PD_STEPS * sizeof(int), 1)) || !(L->tok = slcu_alloc(sizeof(int), msg, 256))) return -1;
    for (int s = 0; s < PD_STEPS; s++) L->htok[s] = (int)(urand() * PD_V) % PD_V;
    L->resid = rnd_dev(PD_H, 1, &L->h_resid, msg);
    for (int i = 0; i < 3; i++) L->nw[i] = rnd_dev(PD_H, 1, NULL, msg);
    L->qn = rnd_dev(PD_HD, 1, NULL, msg), L->kn = rnd_dev(PD_HD, 1, NULL, msg);
    float **out[] = {&L->xe, &L->hn, &L->yq, &L->yk, &L->yv, &L->ao, &L->yo, &L->logits, &L->tw, &L->g, &L->u, &L->ys,
                     &L->comb};
    const size_t n[] = {PD_H, PD_H, Q, KV, KV, Q, PD_H, PD_STEPS * PD_E, PD_STEPS * PD_K, PD_K * PD_I, PD_K * PD_I,
                        (size_t)PD_K * PD_H, PD_H};
    for (int i = 0; i < 13; i++)
        if (!(*out[i] = slcu_alloc(n[i] * 4, msg, 256))) return -1;
    const size_t cb = (size_t)PD_CAP * KV * 2;
    L->h_kc = malloc(cb), L->h_vc = malloc(cb);
    for (size_t i = 0; i < (size_t)PD_CAP * KV; i++) L->h_kc[i] = f32_to_f16(nrand()), L->h_vc[i] = f32_to_f16(nrand());
    L->te = slcu_alloc((size_t)PD_STEPS * PD_K * 4, msg, 256);
    L->kc = slcu_alloc(cb, msg, 256), L->vc = slcu_alloc(cb, msg, 256);
    L->abuf = slcu_alloc(slcu_act_bytes(1, PD_H), msg, 256), L->obuf = slcu_alloc(slcu_act_bytes(1, Q), msg, 256);
    L->mbuf = slcu_alloc(slcu_act_bytes(PD_K, PD_I), msg, 256);
    return L->tab && L->tok && L->te && L->kc && L->vc && L->abuf && L->obuf && L->mbuf ? 0 : -1;
}

static void pd_free(pd_layer *L) {
    mat *m[] = {&L->emb, &L->wq, &L->wk, &L->wv, &L->wo, &L->wr, &L->gate, &L->up, &L->down};
    for (int i = 0; i < 9; i++) free_mat(m[i]);
    float *f[] = {L->resid, L->xe, L->hn, L->nw[0], L->nw[1], L->nw[2], L->qn, L->kn, L->yq, L->yk, L->yv, L->ao, L->yo,
                  L->logits, L->tw, L->g, L->u, L->ys, L->comb};
    for (int i = 0; i < 19; i++) slcu_free(f[i]);
    slcu_free((void *)L->tab), slcu_free(L->tok), slcu_free(L->te);
    slcu_free(L->kc), slcu_free(L->vc), slcu_free(L->abuf), slcu_free(L->obuf), slcu_free(L->mbuf);
    slcb_free(L->htok, 1);
    free(L->h_resid), free(L->h_kc), free(L->h_vc);
}

/* token s of the chain, queued (no wait); step s % 3 picks one of the backend's equivalent launches where it has
 * several (the joined ops or the separate kernels), so every kernel of a decode step is in the chain */
static void pd_step(pd_layer *L, int s, const float *fq) {
    char msg[256] = "";
    const int Q = PD_NH * PD_HD, KV = PD_NKV * PD_HD, v = s % 3, pos = PD_P0 + s;
    const int nb = PD_I / 32, ns = nb + nb / 2 + nb / 4;
    slcu_act a, o, m, mi[PD_K];
    slcu_act_bind(&a, L->abuf, 1, PD_H, msg, sizeof msg), slcu_act_bind(&o, L->obuf, 1, Q, msg, sizeof msg);
    slcu_act_bind(&m, L->mbuf, PD_K, PD_I, msg, sizeof msg);
    slcu_addnorm an = {.x = L->resid, .y = L->xe, .h = L->hn, .w = L->nw[0], .eps = 1e-6f, .dim = PD_H};
    CK(!slcb_copy(L->tok, L->htok + s, sizeof(int), 0, msg, sizeof msg) &&
       !slcu_embed(&L->emb.d, L->tok, 1, L->xe, PD_H, msg, sizeof msg) && !slcu_add_norm_q(&an, &a, msg, sizeof msg), "%s", msg);
    slcu_mm mm[2 * PD_K];
    mm[0] = (slcu_mm){.w = L->wq.d, .a = &a, .n_tok = 1, .y = L->yq, .ldy = Q};
    mm[1] = (slcu_mm){.w = L->wk.d, .a = &a, .n_tok = 1, .y = L->yk, .ldy = KV};
    mm[2] = (slcu_mm){.w = L->wv.d, .a = &a, .n_tok = 1, .y = L->yv, .ldy = KV};
    CK(!slcu_matmul_i8(mm, 3, msg, sizeof msg), "%s", msg);
    if (v == 0) {
        const slcu_normrope nr[2] = {{L->yq, L->yq, PD_NH, PD_HD, PD_HD, L->qn, 0.0f, 1e-6f},
                                     {L->yk, L->yk, PD_NKV, PD_HD, PD_HD, L->kn, 0.0f, 1e-6f}};
        CK(!slcu_norm_rope(nr, 2, PD_HD, fq, 1.0f, pos, msg, sizeof msg), "%s", msg);
    } else {
        CK(!slcu_rmsnorm(L->yq, L->yq, 1, Q, PD_NH, PD_HD, PD_HD, L->qn, 0.0f, 1e-6f, msg, sizeof msg) &&
           !slcu_rmsnorm(L->yk, L->yk, 1, KV, PD_NKV, PD_HD, PD_HD, L->kn, 0.0f, 1e-6f, msg, sizeof msg) &&
           !slcu_rope(L->yq, 1, Q, PD_NH, PD_HD, PD_HD, fq, 1.0f, pos, 0, msg, sizeof msg) &&
           !slcu_rope(L->yk, 1, KV, PD_NKV, PD_HD, PD_HD, fq, 1.0f, pos, 0, msg, sizeof msg), "%s", msg);
    }
    const slcu_attn at = {.q = L->yq, .ldq = Q, .qstride = PD_HD, .k = L->yk, .v = L->yv, .ldkv = KV, .k_cache = L->kc,
                          .v_cache = L->vc, .cap = PD_CAP, .n = 1, .pos0 = pos, .n_heads = PD_NH, .n_kv = PD_NKV,
                          .hd = PD_HD, .scale = 1.0f / sqrtf((float)PD_HD), .out = L->ao, .ldo = Q, .f16 = 1};
    if (v == 0) CK(slcu_attention_q(&at, &o, msg, sizeof msg) == 1, "attention_q made no int8 form: %s", msg);
    else CK(!slcu_attention(&at, msg, sizeof msg) && !slcu_act_quantize(&o, L->ao, Q, msg, sizeof msg), "%s", msg);
    mm[0] = (slcu_mm){.w = L->wo.d, .a = &o, .n_tok = 1, .y = L->yo, .ldy = PD_H};
    an = (slcu_addnorm){.x = L->resid, .y = L->yo, .h = L->hn, .w = L->nw[1], .eps = 1e-6f, .dim = PD_H};
    CK(!slcu_matmul_i8(mm, 1, msg, sizeof msg) && !slcu_add_norm_q(&an, &a, msg, sizeof msg), "%s", msg);
    const slcu_router r = {0, PD_E, PD_K, 1, 1, 1, 1.0f, NULL, 0};
    float *lg = L->logits + (size_t)s * PD_E, *tw = L->tw + (size_t)s * PD_K;
    int *te = L->te + (size_t)s * PD_K;
    CK(!slcu_matmul(&L->wr.d, L->hn, lg, 1, msg, sizeof msg) && !slcu_route(&r, lg, 1, te, tw, msg, sizeof msg), "%s", msg);
    for (int j = 0; j < 2 * PD_K; j++) { /* as backend_cuda.c cu_moe_resident: the matrices chosen by the route */
        mm[j] = (slcu_mm){.w = (j & 1 ? L->up : L->gate).d, .a = &a, .n_tok = 1, .ldy = PD_I, .sel = te + j / 2,
                          .y = (j & 1 ? L->u : L->g) + (size_t)(j / 2) * PD_I, .tab = L->tab + (size_t)(j & 1) * 3 * PD_E};
        mm[j].w.rows = PD_I, mm[j].w.data = mm[j].w.scales = mm[j].w.biases = NULL;
    }
    CK(!slcu_matmul_i8(mm, 2 * PD_K, msg, sizeof msg), "%s", msg);
    if (v == 0) CK(!slcu_swiglu_q(L->g, L->u, L->g, &m, msg, sizeof msg), "%s", msg);
    if (v == 1)
        CK(!slcu_swiglu(L->g, L->u, L->g, (size_t)PD_K * PD_I, msg, sizeof msg) &&
           !slcu_act_quantize(&m, L->g, PD_I, msg, sizeof msg), "%s", msg);
    for (int j = 0; j < PD_K; j++) { /* v 2: the SwiGLU made in the down matvec's CTAs (slcu_act sg) */
        mi[j] = v == 2 ? (slcu_act){.n_tok = 1, .cols = PD_I, .sg = L->g + (size_t)j * PD_I, .su = L->u + (size_t)j * PD_I}
                       : (slcu_act){.n_tok = 1, .cols = PD_I, .q = m.q + (size_t)j * PD_I, .q4 = m.q4 + (size_t)j * PD_I,
                                    .d = m.d + (size_t)j * nb, .s = m.s + (size_t)j * ns};
        mm[j] = (slcu_mm){.w = L->down.d, .a = &mi[j], .n_tok = 1, .y = L->ys + (size_t)j * PD_H, .ldy = PD_H,
                          .tab = L->tab + (size_t)6 * PD_E, .sel = te + j};
        mm[j].w.rows = PD_H, mm[j].w.data = mm[j].w.scales = mm[j].w.biases = NULL;
    }
    CK(!slcu_matmul_i8(mm, PD_K, msg, sizeof msg), "%s", msg);
    an = (slcu_addnorm){.x = L->resid, .cy = L->ys, .cw = tw, .ck = PD_K, .cout = L->comb, .h = L->hn, .w = L->nw[2],
                        .eps = 1e-6f, .dim = PD_H};
    if (v != 1) CK(!slcu_add_norm_q(&an, v == 0 ? &a : NULL, msg, sizeof msg), "%s", msg);
    else CK(!slcu_combine(L->ys, tw, PD_K, NULL, NULL, L->comb, 1, PD_H, msg, sizeof msg) &&
            !slcb_add(L->resid, L->comb, PD_H, msg, sizeof msg) &&
            !slcu_rmsnorm_q(L->resid, L->hn, PD_H, L->nw[2], 0.0f, 1e-6f, &a, msg, sizeof msg), "%s", msg);
}

static const char *const pd_out[10] = {"hn", "ao", "logits", "tw", "te", "comb", "resid", "k cache", "v cache",
                                       "int8 form"};

/* the chain from the same start (residual, caches, expert ids; every other output poisoned), its results back: [n]
 * words, malloc'd, the first *nf of them floats (then the caches' halves and the int8 form), output i from off[i]. NULL
 * when the device failed (a FAIL naming the run: the context is lost, so the caller runs no more). */
static float *pd_run(pd_layer *L, const float *fq, const char *what, int kern, size_t *n, size_t *nf, size_t off[11]) {
    char msg[256] = "";
    const int Q = PD_NH * PD_HD, KV = PD_NKV * PD_HD;
    const size_t cb = (size_t)PD_CAP * KV * 2;
    int hte[PD_STEPS * PD_K];
    for (int i = 0; i < PD_STEPS * PD_K; i++) hte[i] = PD_E - 1;
    CK(!slcu_upload(L->resid, L->h_resid, PD_H * 4, msg, sizeof msg) &&
       !slcu_upload(L->te, hte, sizeof hte, msg, sizeof msg) && !slcu_upload(L->kc, L->h_kc, cb, msg, sizeof msg) &&
       !slcu_upload(L->vc, L->h_vc, cb, msg, sizeof msg), "%s", msg);
    const void *d[] = {L->hn, L->ao, L->logits, L->tw, L->te, L->comb, L->resid, L->kc, L->vc, L->abuf};
    const size_t b[] = {PD_H * 4, (size_t)Q * 4, PD_STEPS * PD_E * 4, PD_STEPS * PD_K * 4, PD_STEPS * PD_K * 4, PD_H * 4,
                        PD_H * 4, cb, cb, slcu_act_bytes(1, PD_H) & ~(size_t)3};
    for (int i = 0; i < 10; i++) /* the outputs but te (set above) and the caches (uploaded) */
        if ((i < 6 && i != 4) || i == 9) poison((void *)d[i], b[i]);
    poison(L->xe, PD_H * 4), poison(L->ys, (size_t)PD_K * PD_H * 4);
    poison(L->g, PD_K * PD_I * 4), poison(L->u, PD_K * PD_I * 4);
    for (int s = 0; s < PD_STEPS; s++) pd_step(L, s, fq);
    if (slcu_sync(msg, sizeof msg)) {
        CK(0, "overlapped launches %s, kernel %d: the chain of %d tokens failed on the device: %s", what, kern, PD_STEPS,
           msg);
        return NULL;
    }
    *n = *nf = 0;
    for (int i = 0; i < 10; i++) off[i] = *n, *n += b[i] / 4, *nf += i < 7 ? b[i] / 4 : 0;
    off[10] = *n;
    float *out = malloc(*n * 4), *o = out;
    for (int i = 0; i < 10; i++) {
        float *y = dl(d[i], b[i] / 4);
        memcpy(o, y, b[i]);
        o += b[i] / 4;
        free(y);
    }
    /* each step's choice: k distinct experts in increasing order (the route's; hte's cells are not one) */
    int te[PD_STEPS * PD_K], bad = 0;
    memcpy(te, out + off[4], sizeof te);
    for (int i = 0; i < PD_STEPS * PD_K; i++) bad += te[i] < 0 || te[i] >= PD_E || (i % PD_K && te[i] <= te[i - 1]);
    CK(!bad, "overlapped launches %s, kernel %d: %d expert ids are not a route's choice", what, kern, bad);
    return out;
}

/* nk: the matvec kernels chained (2: mv1c_i8 and mv1d_i8, the full run's; 3: and mv1p_i8, `test_cuda --pdl`, apart
 * until a device has run mv1p_i8: a fault there would end the full run's context) */
static void check_pdl(int nk) {
    char msg[256] = "";
    pd_layer L;
    if (pd_make(&L, msg)) {
        CK(0, "overlapped launches: %s", msg);
        pd_free(&L);
        return;
    }
    float fq[PD_HD / 2];
    for (int i = 0; i < PD_HD / 2; i++) fq[i] = powf(10000.0f, -2.0f * i / PD_HD);
    const int pdl[3] = {0, 2, 1}, kern[3] = {3, 4, 7}; /* SLUICE_CUDA_PDL's values; mv1c_i8, mv1d_i8, mv1p_i8 */
    const char *what[3] = {"off", "on the matvecs", "on every kernel"};
    float *ref = NULL;
    size_t n = 0, n2 = 0, nf = 0, off[11];
    const int f0 = failures;
    for (int k = 0; k < nk * 3; k++) {
        slcu_i8_mv1_kernel(kern[k / 3]), slcu_i8_pdl(pdl[k % 3]);
        float *y = pd_run(&L, fq, what[k % 3], kern[k / 3], k ? &n2 : &n, &nf, off);
        if (!y) break; /* the device context is lost: every later run would fail the same way */
        int nan = 0; /* the float outputs (te's small ints are not NaNs either) */
        for (size_t i = 0; i < nf; i++) nan += y[i] != y[i];
        if (!ref) {
            CK(!nan, "overlapped launches: %d outputs of the chain not written (PDL off)", nan);
            ref = y;
            continue;
        }
        size_t i = 0; /* the first word that differs, and its output */
        while (n2 == n && i < n && !memcmp(y + i, ref + i, 4)) i++;
        int o = 0;
        while (o < 9 && off[o + 1] <= i) o++;
        CK(n2 == n && i == n, "overlapped launches %s, kernel %d: a decode layer's chain of %d tokens differs from the "
           "launches in stream order (first in %s, word %zu of it)", what[k % 3], kern[k / 3], PD_STEPS, pd_out[o],
           i - off[o]);
        free(y);
    }
    slcu_i8_mv1_kernel(0), slcu_i8_pdl(-1);
    if (failures == f0)
        printf("ok   overlapped launches (PDL) off / matvecs / every kernel, mv1c_i8, mv1d_i8%s: a decode layer's chain "
               "of %d tokens bitwise\n", nk > 2 ? " and mv1p_i8" : "", PD_STEPS);
    free(ref);
    pd_free(&L);
}
