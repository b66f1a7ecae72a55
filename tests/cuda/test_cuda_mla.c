/* ---- SLUICE_CUDA_MLA=2 (cuda_mla.cu's split launches, slcu_mla_set(2)) bitwise k_mla_attend (slcu_mla_set(1)): the
 * cache rows, q_abs and the latents of 1 and 3 tokens at depths 1 .. 4097, DeepSeek-V3's shape (128 heads, kv_lora
 * 512, rope 64, nope 128, v 128) and small ones (3 heads, kv_lora 40 / 96, rope 8), kv_b f32 and q4; a prefill's calls
 * of 9, 17 and 64 tokens at pos0 0 and 1000 (token t sees pos0 + t + 1 keys), and at DeepSeek-V3's shape 64 tokens
 * after 4033 (its scratch past MLA2_SCAP: chunks of 31, 31 and 2 tokens); then one token at a depth past
 * k_mla_attend's shared memory (the split path has no such limit): check_mla_split_all. --bench-mla: us a
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
    const int depths[] = {1, 2, 31, 256, 257, 1000, 4097}, nd = (int)(sizeof depths / sizeof *depths), pn[3] = {9, 17, 64};
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
        for (int p = 0; p < 2; p++) /* a prefill's micro-batches (cuda_mla.cu mla2_attend: one chunk each) */
            for (int k2 = 0; k2 < 3; k2++) mla_split_case(s, &kvb, p ? 1000 : 0, pn[k2], what);
        if (k < 2) mla_split_case(s, &kvb, 4033, 64, what); /* 64 x 128 x 4097 floats: three chunks */
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
               "f32 / q4 kv_b; depths 1 .. 4097; 1 and 3 tokens; 9, 17, 64 tokens at pos0 0 / 1000, 64 at 4033 (chunked)\n");
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

/* ---- k_mla_absorb (cuda_mla.cu: the absorbed queries in tiles) bitwise k_mla_absorb_ref (slcu_mla_set bit 4, on the
 * device) at every output and bitwise a host transcription of its order (acc = 0, acc = acc + q_i w_at(i, c) for
 * i = 0 .. dn - 1, each operation rounded alone) at the tokens checked on the host (all, or 4 of 100 / 512 at
 * DeepSeek-V3's shape); a token alone (the decode tile) equals it in the batch (the prefill tile from 17 tokens).
 * Shapes: DeepSeek-V3's (128 heads, r 512, dr 64, dn 128, dv 128) and r 96 / 192 / 384 / 40 / 36 / 8 with dn 33 / 7 /
 * 65 / 20 / 1 / 129 (r not a multiple of the 64-column tile, dn not of the rows a chunk), kv_b f32 / bf16 / f16 / q8 /
 * q4 in groups of 32, 64, 128 with f16 / bf16 / f32 scales, its words 4 bytes off 16-byte alignment too (the w_at
 * loads); 1, 3, 8, 100, 512 tokens. tools/cuda_absorb_emu.c runs the kernel's loops on the host for these shapes.
 * --bench-absorb: us a launch, the reference against the tiles, DeepSeek-V3's shape with q4 kv_b (bench_absorb). ---- */

static float ab_mul(float a, float b) { volatile float r = a * b; return r; } /* one rounding each, no contraction */
static float ab_add(float a, float b) { volatile float r = a + b; return r; }
static float ab_sc(const void *p, dt_type sdt, size_t i) {
    if (sdt == DT_F32) return ((const float *)p)[i];
    const uint16_t h = ((const uint16_t *)p)[i];
    return sdt == DT_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}
static float ab_w(const tn_mat *m, int row, int c) { /* cuda_mla.cu w_at on the host words */
    const size_t k = (size_t)row * m->cols + c;
    if (m->dtype == DT_F32) return ((const float *)m->data)[k];
    if (m->dtype == DT_BF16) return bf16_to_f32(((const uint16_t *)m->data)[k]);
    if (m->dtype == DT_F16) return f16_to_f32(((const uint16_t *)m->data)[k]);
    const uint8_t *codes = m->data;
    const int code = m->dtype == DT_Q8 ? codes[k] : (codes[k / 2] >> (4 * (k & 1))) & 15;
    const size_t g = (size_t)row * (m->cols / m->group) + c / m->group;
    return ab_add(ab_mul(ab_sc(m->scales, m->sdtype, g), (float)code), ab_sc(m->biases, m->sdtype, g));
}

/* q_abs of n tokens by the launch alone (slcu_mla_set(8 | ref)) into a fresh poisoned buffer, downloaded */
static float *ab_run(const mla_shape *s, const slcu_mat *w, const float *dq, size_t ldq, int n, int ref) {
    char msg[256] = "";
    const size_t nout = (size_t)n * s->nh * (s->r + s->dr);
    float *dqa = slcu_alloc(nout * 4, msg, sizeof msg);
    poison(dqa, nout * 4);
    const slcu_mla a = {.q = dq, .ldq = ldq, .kv_b = *w, .n = n, .n_heads = s->nh, .r = s->r, .dr = s->dr, .dn = s->dn,
                        .dv = s->dv, .scale = 0.1f, .q_abs = dqa};
    slcu_mla_set(ref ? 8 | 4 : 8);
    CK(!slcu_mla_attention(&a, msg, sizeof msg), "absorb: %s", msg);
    slcu_mla_set(-1);
    float *y = dl(dqa, nout);
    slcu_free(dqa);
    return y;
}

static void absorb_case(const mla_shape *s, dt_type dt, int group, dt_type sdt, int n, int off) {
    char msg[256] = "", what[160];
    const int rows = s->nh * (s->dn + s->dv), row = s->r + s->dr, qh = s->dn + s->dr, quant = dt == DT_Q8 || dt == DT_Q4;
    snprintf(what, sizeof what, "%d heads r %d dr %d dn %d, kv_b %s g%d %s%s, %d token%s", s->nh, s->r, s->dr, s->dn, dt_name(dt),
             quant ? group : 0, quant ? dt_name(sdt) : "-", off ? " (4 bytes off)" : "", n, n > 1 ? "s" : "");
    mat kvb;
    if (make_mat(&kvb, dt, rows, s->r, quant ? group : 0, quant ? sdt : DT_F32, msg)) {
        CK(0, "absorb %s: %s", what, msg);
        return;
    }
    slcu_mat w = kvb.d;
    uint8_t *moved = NULL;
    if (off) { /* the same words at 4 bytes past a 16-byte boundary */
        moved = slcu_alloc(kvb.bytes + 16, msg, sizeof msg);
        slcu_upload(moved + off, kvb.host, kvb.bytes, msg, sizeof msg);
        const uint8_t *h = kvb.host;
        w.data = moved + off + ((const uint8_t *)kvb.m.data - h);
        if (quant) w.scales = moved + off + ((const uint8_t *)kvb.m.scales - h), w.biases = moved + off + ((const uint8_t *)kvb.m.biases - h);
    }
    const size_t ldq = (size_t)s->nh * qh + 3, nout = (size_t)n * s->nh * row;
    float *hq, *dq = rnd_dev((size_t)n * ldq, 1, &hq, msg);
    float *y = ab_run(s, &w, dq, ldq, n, 0), *yr = ab_run(s, &w, dq, ldq, n, 1);
    size_t nbad = 0, at = 0;
    for (size_t i = 0; i < nout; i++)
        if (memcmp(y + i, yr + i, 4) && !nbad++) at = i;
    CK(!nbad, "absorb %s: %zu outputs differ from k_mla_absorb_ref's, the first [%zu] %.9g against %.9g", what, nbad, at, y[at], yr[at]);
    const int big = (size_t)s->nh * s->r * s->dn > 100000 && n > 8, hts[4] = {0, 1, n / 2, n - 1};
    nbad = 0;
    float first = 0.0f;
    for (int k = 0; k < (big ? 4 : n); k++) { /* the host transcription */
        const int t = big ? hts[k] : k;
        const float *q = hq + (size_t)t * ldq;
        for (int h = 0; h < s->nh; h++)
            for (int c = 0; c < row; c++) {
                float ref = 0.0f;
                if (c >= s->r) ref = q[h * qh + s->dn + c - s->r];
                else
                    for (int i = 0; i < s->dn; i++) ref = ab_add(ref, ab_mul(q[h * qh + i], ab_w(&kvb.m, h * (s->dn + s->dv) + i, c)));
                const size_t o = ((size_t)t * s->nh + h) * row + c;
                if (memcmp(&ref, y + o, 4) && !nbad++) at = o, first = ref;
            }
    }
    CK(!nbad, "absorb %s: %zu outputs differ from the host's order, the first [%zu] %.9g against %.9g", what, nbad, at, y[at], first);
    if (n > 1) { /* the last token alone */
        float *y1 = ab_run(s, &w, dq + (size_t)(n - 1) * ldq, ldq, 1, 0);
        CK(!memcmp(y1, y + (size_t)(n - 1) * s->nh * row, (size_t)s->nh * row * 4), "absorb %s: the last token alone differs", what);
        free(y1);
    }
    free(y), free(yr), free(hq), slcu_free(dq), slcu_free(moved), free_mat(&kvb);
}

static void check_absorb_all(void) {
    const int f0 = failures, ns[5] = {1, 3, 8, 100, 512};
    const mla_shape v3 = {128, 512, 64, 128, 128};
    for (int k = 0; k < 5; k++) absorb_case(&v3, DT_Q4, 64, DT_BF16, ns[k], 0);
    absorb_case(&v3, DT_Q8, 32, DT_F16, 1, 0), absorb_case(&v3, DT_Q8, 32, DT_F16, 512, 0);
    absorb_case(&v3, DT_F32, 0, DT_F32, 1, 0), absorb_case(&v3, DT_BF16, 0, DT_F32, 100, 0), absorb_case(&v3, DT_F16, 0, DT_F32, 3, 0);
    absorb_case(&v3, DT_Q4, 128, DT_F32, 100, 0), absorb_case(&v3, DT_Q4, 64, DT_BF16, 1, 4), absorb_case(&v3, DT_Q4, 64, DT_BF16, 512, 4);
    const mla_shape odd[6] = {{5, 96, 8, 33, 12}, {3, 192, 16, 7, 5}, {2, 384, 8, 65, 9}, {3, 40, 8, 20, 12}, {3, 36, 4, 1, 3}, {2, 8, 0, 129, 2}};
    const dt_type dts[5] = {DT_F32, DT_BF16, DT_F16, DT_Q8, DT_Q4}, sdts[3] = {DT_F16, DT_BF16, DT_F32};
    for (int d = 0; d < 5; d++)
        for (int k = 0; k < 5; k++) {
            const int quant = dts[d] == DT_Q8 || dts[d] == DT_Q4;
            absorb_case(&odd[0], dts[d], 32, sdts[(d + k) % 3], ns[k], 0);
            absorb_case(&odd[1], dts[d], 64, sdts[(d + k + 1) % 3], ns[k], k == 2 ? 4 : 0);
            absorb_case(&odd[2], dts[d], 128, sdts[(d + k + 2) % 3], ns[k], k == 3 ? 4 : 0);
            for (int o = 3; o < 6 && !quant; o++) absorb_case(&odd[o], dts[d], 0, DT_F32, ns[k], k == 4 ? 4 : 0);
        }
    if (failures == f0)
        printf("ok   mla absorb tiles bitwise k_mla_absorb_ref and the host's order: DeepSeek-V3 and r 8 .. 384, dn 1 .. 129; "
               "f32 / bf16 / f16 / q8 / q4 kv_b, groups 32 / 64 / 128, aligned and not; 1 .. 512 tokens, alone == batched\n");
}

typedef struct {
    slcu_mla a;
    size_t bytes;
    int sets, it;
} ab_bench;

static void ab_bench_run(void *p) { /* set it % sets of the copies: weights not in L2, as a model's layer finds them */
    ab_bench *b = p;
    char msg[256];
    slcu_mla a = b->a;
    const size_t d = (size_t)(b->it++ % b->sets) * b->bytes;
    a.kv_b.data = (const uint8_t *)a.kv_b.data + d;
    a.kv_b.scales = (const uint8_t *)a.kv_b.scales + d, a.kv_b.biases = (const uint8_t *)a.kv_b.biases + d;
    if (slcu_mla_attention(&a, msg, sizeof msg)) fprintf(stderr, "bench-absorb: %s\n", msg);
}

static void bench_absorb(void) {
    char msg[256] = "";
    const mla_shape s = {128, 512, 64, 128, 128};
    const int ns[5] = {1, 2, 8, 64, 512}, row = s.r + s.dr, qh = s.dn + s.dr, sets = 16;
    mat kvb;
    fast_fill = 1;
    if (make_mat(&kvb, DT_Q4, s.nh * (s.dn + s.dv), s.r, 64, DT_BF16, msg)) {
        CK(0, "bench-absorb: %s", msg);
        return;
    }
    fast_fill = 0;
    const size_t bytes = (kvb.bytes + 255) / 256 * 256;
    uint8_t *big = slcu_alloc(bytes * sets, msg, sizeof msg);
    for (int k = 0; k < sets; k++) slcu_upload(big + (size_t)k * bytes, kvb.host, kvb.bytes, msg, sizeof msg);
    slcu_mat w = kvb.d;
    const uint8_t *h = kvb.host;
    w.data = big + ((const uint8_t *)kvb.m.data - h);
    w.scales = big + ((const uint8_t *)kvb.m.scales - h), w.biases = big + ((const uint8_t *)kvb.m.biases - h);
    printf("\nMLA absorbed queries alone, DeepSeek-V3 shape (128 heads, kv_lora 512, nope 128, q4 kv_b g64 bf16, W_uk %.1f MB; %d copies "
           "in turn): us a launch (median of 50 after a warm-up, best of two), k_mla_absorb_ref against the tiles\n",
           kvb.bytes / 2 / 1e6, sets);
    printf("%-7s %10s %10s %8s %12s\n", "tokens", "ref us", "tiles us", "ref/new", "tiles GB/s");
    for (int k = 0; k < 5; k++) {
        const int n = ns[k];
        float *dq = rnd_dev((size_t)n * s.nh * qh, 1, NULL, msg), *dqa = slcu_alloc((size_t)n * s.nh * row * 4, msg, sizeof msg);
        ab_bench b = {{.q = dq, .ldq = (size_t)s.nh * qh, .kv_b = w, .n = n, .n_heads = s.nh, .r = s.r, .dr = s.dr, .dn = s.dn,
                       .dv = s.dv, .scale = 0.1f, .q_abs = dqa}, bytes, sets, 0};
        float t[2] = {1e30f, 1e30f};
        for (int r = 0; r < 4; r++) { /* alternated */
            slcu_mla_set(r & 1 ? 8 : 8 | 4);
            const float v = 1e3f * slcu_time_median(ab_bench_run, &b, 50);
            if (v < t[r & 1]) t[r & 1] = v;
        }
        slcu_mla_set(-1);
        printf("%-7d %10.2f %10.2f %8.2f %12.1f\n", n, t[0], t[1], t[0] / t[1], kvb.bytes / 2 / (t[1] * 1e3));
        fflush(stdout);
        slcu_free(dq), slcu_free(dqa);
    }
    slcu_free(big), free_mat(&kvb);
}

/* --mla, --bench-mla: the split's checks (then its timings); --absorb, --bench-absorb: the tiles' (then theirs). -1: none */
static int mla_main(int argc, char **argv) {
    if (argc < 2) return -1;
    const int split = !strcmp(argv[1], "--mla") || !strcmp(argv[1], "--bench-mla");
    if (!split && strcmp(argv[1], "--absorb") && strcmp(argv[1], "--bench-absorb")) return -1;
    if (split) check_mla_split_all();
    else check_absorb_all();
    printf("%s: %d failure%s\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    if (!strcmp(argv[1], "--bench-mla")) bench_mla(); /* timed even after a mismatch (the FAIL lines above say so) */
    if (!strcmp(argv[1], "--bench-absorb")) bench_absorb();
    return failures ? 1 : 0;
}
