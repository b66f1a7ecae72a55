/* ---- attention over an f16 KV cache on tensor cores (cuda_flash.cu): the prefill kernel and the decode pair,
 * all tokens at once and one at a time, bitwise the same; against attention in double on the cache's values
 * (q and the weights rounded to f16 as the kernels do) within 3e-3 ---- */
static void fa16_ref(const float *q, const uint16_t *kc, const uint16_t *vc, const float *sinks, int T, int NH, int NKV,
                     int HD, int cap, int window, int pos0, int gated, float scale, float *out) {
    const int qs = gated ? 2 * HD : HD, ROW = NKV * HD;
    double *sc = malloc(sizeof(double) * (size_t)(pos0 + T));
    for (int t = 0; t < T; t++)
        for (int h = 0; h < NH; h++) {
            const float *qv = q + ((size_t)t * NH + h) * qs;
            const int pos = pos0 + t, p0 = window > 0 && pos >= window ? pos - window + 1 : 0, kvh = h / (NH / NKV);
            double mx = sinks ? sinks[h] : -INFINITY, sum = 0;
            for (int p = p0; p <= pos; p++) {
                double d = 0;
                for (int c = 0; c < HD; c++)
                    d += (double)f16_to_f32(f32_to_f16(qv[c])) * f16_to_f32(kc[(size_t)(p % cap) * ROW + kvh * HD + c]);
                sc[p - p0] = d * scale;
                if (sc[p - p0] > mx) mx = sc[p - p0];
            }
            for (int p = p0; p <= pos; p++) sc[p - p0] = exp(sc[p - p0] - mx), sum += sc[p - p0];
            if (sinks) sum += exp(sinks[h] - mx);
            for (int d = 0; d < HD; d++) {
                double o = 0;
                for (int p = p0; p <= pos; p++) o += sc[p - p0] * f16_to_f32(vc[(size_t)(p % cap) * ROW + kvh * HD + d]);
                o /= sum;
                if (gated) o /= 1 + exp(-(double)qv[HD + d]);
                out[((size_t)t * NH + h) * HD + d] = (float)o;
            }
        }
    free(sc);
}

/* out of T tokens: mode (slcu_fa16_force), all at once (one) or one at a time; f32: slcu_attention_f32 */
static float *fa16_run(const slcu_attn *ap, int mode, int one, int f32) {
    char msg[256] = "";
    const int T = ap->n, row = ap->n_heads * ap->hd;
    poison(ap->out, (size_t)T * row * 4);
    slcu_fa16_force(mode);
    for (int t = 0; t < T; t += one ? 1 : T) {
        slcu_attn a = *ap;
        if (one) {
            a.q += (size_t)t * ap->ldq, a.k += (size_t)t * ap->ldkv, a.v += (size_t)t * ap->ldkv;
            a.n = 1, a.pos0 += t, a.out += (size_t)t * ap->ldo;
        }
        CK(!(f32 ? slcu_attention_f32(&a, NULL, 0, msg, sizeof msg) : slcu_attention(&a, msg, sizeof msg)), "%s", msg);
    }
    slcu_fa16_force(0);
    return dl(ap->out, (size_t)T * row);
}

static void check_fa16(int T, int NH, int NKV, int HD, int cap, int window, int pos0, int sinks, int gated) {
    char msg[256] = "";
    const int ROW = NKV * HD, qs = gated ? 2 * HD : HD;
    float *hq, *hs, *hn;
    float *dq = rnd_dev((size_t)T * NH * qs, 1, &hq, msg), *dsk = rnd_dev(NH, 1, &hs, msg);
    float *dnew = rnd_dev((size_t)T * 2 * ROW, 1, &hn, msg), *dout = slcu_alloc((size_t)T * NH * HD * 4, msg, sizeof msg);
    uint16_t *hk = malloc((size_t)cap * ROW * 2), *hv = malloc((size_t)cap * ROW * 2);
    for (size_t i = 0; i < (size_t)cap * ROW; i++) hk[i] = f32_to_f16(nrand()), hv[i] = f32_to_f16(nrand());
    for (int t = 0; t < T; t++) /* the new rows as the append stores them */
        for (int i = 0; i < ROW; i++) {
            const size_t r = (size_t)((pos0 + t) % cap) * ROW + i;
            hk[r] = f32_to_f16(hn[(size_t)t * 2 * ROW + i]), hv[r] = f32_to_f16(hn[(size_t)t * 2 * ROW + ROW + i]);
        }
    void *dk = slcu_alloc((size_t)cap * ROW * 2, msg, sizeof msg), *dv = slcu_alloc((size_t)cap * ROW * 2, msg, sizeof msg);
    slcu_upload(dk, hk, (size_t)cap * ROW * 2, msg, sizeof msg), slcu_upload(dv, hv, (size_t)cap * ROW * 2, msg, sizeof msg);
    const float scale = 1.0f / sqrtf((float)HD);
    const slcu_attn ap = {dq, (size_t)NH * qs, qs, gated, dnew, dnew + ROW, 2 * ROW, dk, dv, cap, T, pos0, NH, NKV, HD,
                          window, sinks ? dsk : NULL, scale, dout, (size_t)NH * HD, 1};
    float *ref = malloc((size_t)T * NH * HD * 4);
    fa16_ref(hq, hk, hv, sinks ? hs : NULL, T, NH, NKV, HD, cap, window, pos0, gated, scale, ref);
    float *y1 = fa16_run(&ap, 1, 0, 0), *y2 = fa16_run(&ap, 2, 0, 0), *y3 = fa16_run(&ap, 0, 1, 0);
    float *y4 = fa16_run(&ap, 1, 1, 0);
    slcu_fa16_fuse(1); /* token by token with the decode pair's fused fold (k_fa16_part's last warp a KV head) */
    float *y5 = fa16_run(&ap, 0, 1, 0);
    slcu_fa16_fuse(-1);
    slcu_fa16_one(1); /* token by token with a one-chunk context ended in k_fa16_part (fa16_part_fin), no fold launch */
    float *y6 = fa16_run(&ap, 0, 1, 0), *y7 = fa16_run(&ap, 2, 0, 0); /* and all tokens in the decode pair at once */
    slcu_fa16_one(-1);
    slcu_fa16_cl(1); /* SLUICE_CUDA_FA_CL: 2 .. 16 chunks on clusters, the fold's loads deeper beyond (cuda_flash_cl.cu) */
    float *y8 = fa16_run(&ap, 0, 1, 0), *y9 = fa16_run(&ap, 2, 0, 0); /* token by token; all at once in the decode path */
    slcu_fa16_cl(2); /* =2: k_fa16_comb2 for every fold of the pair (cuda_flash.cu fl_deep) */
    float *y10 = fa16_run(&ap, 0, 1, 0);
    slcu_fa16_cl(-1);
    const size_t nb = (size_t)T * NH * HD * 4;
    char name[128];
    snprintf(name, sizeof name, "f16 attention %d tok @%d %d/%d hd %d w %d%s%s", T, pos0, NH, NKV, HD, window,
             sinks ? " sinks" : "", gated ? " gated" : "");
    OPCHECK(name, relerr(y1, ref, (size_t)T * NH * HD), 3e-3);
    CK(!memcmp(y1, y2, nb) && !memcmp(y1, y3, nb) && !memcmp(y1, y4, nb) && !memcmp(y1, y5, nb) && !memcmp(y1, y6, nb) &&
           !memcmp(y1, y7, nb) && !memcmp(y1, y8, nb) && !memcmp(y1, y9, nb) && !memcmp(y1, y10, nb),
       "%s: prefill kernel / decode pair / token by token / fused fold / one-chunk end (token by token, all at once) / "
       "FA_CL (token by token, all at once) / FA_CL=2 differ (%d %d %d %d %d %d %d %d %d)", name, !memcmp(y1, y2, nb),
       !memcmp(y1, y3, nb), !memcmp(y1, y4, nb), !memcmp(y1, y5, nb), !memcmp(y1, y6, nb), !memcmp(y1, y7, nb),
       !memcmp(y1, y8, nb), !memcmp(y1, y9, nb), !memcmp(y1, y10, nb));
    if (HD % 128 == 0) { /* the last token alone with its output's int8 form (k_fa16_comb): bitwise y3's row, and
                          * the form bitwise slcu_act_quantize's of it */
        const int row = NH * HD;
        void *b1 = slcu_alloc(slcu_act_bytes(1, row), msg, sizeof msg), *b2 = slcu_alloc(slcu_act_bytes(1, row), msg, sizeof msg);
        slcu_act a1, a2;
        slcu_act_bind(&a1, b1, 1, row, msg, sizeof msg), slcu_act_bind(&a2, b2, 1, row, msg, sizeof msg);
        slcu_attn a = ap;
        a.q += (size_t)(T - 1) * ap.ldq, a.k += (size_t)(T - 1) * ap.ldkv, a.v += (size_t)(T - 1) * ap.ldkv;
        a.n = 1, a.pos0 += T - 1, a.out += (size_t)(T - 1) * ap.ldo;
        for (int fu = 0; fu < 5; fu++) { /* the separate fold, the fused one, the one-chunk end (where one chunk), FA_CL, =2 */
            slcu_fa16_fuse(fu == 1), slcu_fa16_one(fu == 2), slcu_fa16_cl(fu == 3 ? 1 : fu == 4 ? 2 : 0);
            poison(dout, nb);
            CK(slcu_attention_q(&a, &a1, msg, sizeof msg) == 1, "%s: attention_q made no int8 form: %s", name, msg);
            float *yq = dl(a.out, row);
            const char *how = fu == 1 ? " (fused fold)" : fu == 2 ? " (one-chunk end)" : fu == 3 ? " (FA_CL)" : fu == 4 ? " (FA_CL=2)" : "";
            CK(!memcmp(yq, y3 + (size_t)(T - 1) * row, (size_t)row * 4), "%s: the output beside its int8 form differs%s",
               name, how);
            CK(!slcu_act_quantize(&a2, a.out, row, msg, sizeof msg) && same_act(&a1, &a2),
               "%s: the int8 form differs from act_quantize's%s", name, how);
            free(yq);
        }
        slcu_fa16_fuse(-1), slcu_fa16_one(-1), slcu_fa16_cl(-1);
        slcu_free(b1), slcu_free(b2);
    }
    free(hq), free(hs), free(hn), free(hk), free(hv), free(ref);
    free(y1), free(y2), free(y3), free(y4), free(y5), free(y6), free(y7), free(y8), free(y9), free(y10);
    slcu_free(dq), slcu_free(dsk), slcu_free(dnew), slcu_free(dout), slcu_free(dk), slcu_free(dv);
}

/* the same over an f32 cache (slcu_attention_f32): bitwise between its kernels, within 1e-5 of k_attention's order */
static void check_fa32(int T, int NH, int NKV, int HD, int cap, int window, int pos0, int sinks, int gated) {
    char msg[256] = "";
    const int ROW = NKV * HD, qs = gated ? 2 * HD : HD;
    float *dq = rnd_dev((size_t)T * NH * qs, 1, NULL, msg), *dsk = rnd_dev(NH, 1, NULL, msg);
    float *dnew = rnd_dev((size_t)T * 2 * ROW, 1, NULL, msg), *dout = slcu_alloc((size_t)T * NH * HD * 4, msg, sizeof msg);
    float *dk = rnd_dev((size_t)cap * ROW, 1, NULL, msg), *dv = rnd_dev((size_t)cap * ROW, 1, NULL, msg);
    const slcu_attn ap = {dq, (size_t)NH * qs, qs, gated, dnew, dnew + ROW, 2 * ROW, dk, dv, cap, T, pos0, NH, NKV, HD,
                          window, sinks ? dsk : NULL, 1.0f / sqrtf((float)HD), dout, (size_t)NH * HD, 0};
    poison(dout, (size_t)T * NH * HD * 4);
    slcu_attn_force(1); /* k_attention, all at once (the rows appended first: the same cache for every run) */
    CK(!slcu_attention(&ap, msg, sizeof msg), "%s", msg);
    slcu_attn_force(0);
    float *ref = dl(dout, (size_t)T * NH * HD);
    float *y1 = fa16_run(&ap, 1, 0, 1), *y2 = fa16_run(&ap, 2, 0, 1), *y3 = fa16_run(&ap, 0, 1, 1);
    float *y4 = fa16_run(&ap, 1, 1, 1);
    slcu_fa16_cl(1); /* token by token with SLUICE_CUDA_FA_CL's fold (k_fa16_comb2 past 16 chunks) */
    float *y5 = fa16_run(&ap, 0, 1, 1);
    slcu_fa16_cl(2); /* and k_fa16_comb2 for every fold */
    float *y6 = fa16_run(&ap, 0, 1, 1);
    slcu_fa16_cl(-1);
    const size_t nb = (size_t)T * NH * HD * 4;
    char name[128];
    snprintf(name, sizeof name, "f32 flash %d tok @%d %d/%d hd %d w %d%s%s", T, pos0, NH, NKV, HD, window,
             sinks ? " sinks" : "", gated ? " gated" : "");
    OPCHECK(name, relerr(y1, ref, (size_t)T * NH * HD), 1e-5);
    CK(!memcmp(y1, y2, nb) && !memcmp(y1, y3, nb) && !memcmp(y1, y4, nb) && !memcmp(y1, y5, nb) && !memcmp(y1, y6, nb),
       "%s: prefill kernel / decode pair / token by token / FA_CL token by token / FA_CL=2 differ (%d %d %d %d %d)", name,
       !memcmp(y1, y2, nb), !memcmp(y1, y3, nb), !memcmp(y1, y4, nb), !memcmp(y1, y5, nb), !memcmp(y1, y6, nb));
    free(ref), free(y1), free(y2), free(y3), free(y4), free(y5), free(y6);
    slcu_free(dq), slcu_free(dsk), slcu_free(dnew), slcu_free(dout), slcu_free(dk), slcu_free(dv);
}

static void check_attn_f16(void) {
    const int cl0 = slcu_fa16_cl_launches();
    check_fa32(40, 8, 2, 128, 400, 0, 150, 0, 1);
    check_fa32(20, 8, 2, 64, 300, 50, 250, 1, 0);
    check_fa32(9, 6, 2, 20, 64, 0, 0, 0, 1);
    check_fa32(10, 32, 4, 256, 200, 0, 100, 1, 1);
    check_fa32(16, 32, 4, 128, 4096, 0, 3000, 0, 0);
    check_fa32(20, 8, 2, 64, 69, 50, 250, 1, 0); /* a ring of n + window - 1 rows, wrapped */
    check_fa16(40, 8, 2, 128, 400, 0, 150, 0, 1);
    check_fa16(20, 8, 2, 64, 300, 50, 250, 1, 0); /* with sinks; the first key 201: an odd first chunk (call C's NaN) */
    check_fa16(20, 8, 2, 64, 69, 50, 250, 1, 0);  /* the same in a ring of n + window - 1 rows, wrapped */
    check_fa16(40, 8, 2, 128, 400, 200, 300, 0, 1); /* keys 101 .. 339: chunks 1 .. 5, both buffers in turn */
    check_fa16(26, 4, 2, 16, 71, 8, 64, 0, 0);    /* dots1's window layer, its second micro-batch (ring of 71) */
    check_fa16(12, 4, 4, 8, 100, 0, 30, 0, 0);    /* head_dim 8 (padded to 16) */
    check_fa16(9, 6, 2, 20, 64, 0, 0, 0, 1);      /* head_dim 20: element loads */
    check_fa16(10, 32, 4, 256, 200, 0, 100, 1, 1);
    check_fa16(16, 32, 4, 128, 4096, 0, 3000, 0, 0); /* at depth: 48 chunks */
    check_fa16(3, 16, 16, 128, 1100, 0, 1000, 0, 0); /* no GQA */
    check_fa16(8, 32, 4, 128, 64, 0, 40, 0, 0);      /* the 30B shape in one chunk: the last token's int8 form ended in
                                                      * k_fa16_part (SLUICE_CUDA_FA_ONE) */
    check_fa16(6, 8, 2, 256, 100, 0, 10, 1, 1);      /* the same at head_dim 256, sinks, gated */
    check_fa16(4, 64, 2, 128, 70, 0, 0, 0, 0);       /* two row tiles a KV head, depths 1 .. 4 */
    /* SLUICE_CUDA_FA_CL's edges (cuda_flash_cl.cu): the 30B shape over 512 (8 -> 9 chunks, clusters of 8 and 9), over
     * 1024 (16 chunks on a cluster, then 17 in the pair), two row tiles on 4 chunks (clusters of 16), 32k positions (513
     * chunks: the fold's loads two batches deep), the same with a window and sinks */
    check_fa16(4, 32, 4, 128, 1100, 0, 510, 0, 0);
    check_fa16(3, 32, 4, 128, 1100, 0, 1022, 0, 1);
    check_fa16(3, 64, 2, 128, 300, 0, 200, 0, 0);
    check_fa16(2, 32, 4, 128, 32800, 0, 32767, 0, 0);
    check_fa16(3, 8, 2, 64, 2100, 1000, 2040, 1, 0);
    check_fa16(2, 8, 2, 256, 1300, 0, 1200, 1, 1);  /* 19 chunks at head_dim 256: k_fa16_comb2's fa16_comb_row_pf */
    check_fa16(2, 8, 2, 64, 1300, 0, 1250, 1, 0);   /* 20 at head_dim 64: fa16_comb_row_sc on two warps */
    check_fa32(2, 6, 2, 20, 1300, 0, 1100, 0, 1);   /* 18 at head_dim 20 (one warp) */
    check_fa32(4, 32, 4, 128, 1100, 0, 510, 0, 0);
    check_fa32(2, 32, 4, 128, 32800, 0, 32767, 0, 0);
    const int ncl = slcu_fa16_cl_launches() - cl0;
    CK(ncl > 0, "SLUICE_CUDA_FA_CL made no cluster launch (the device holds no cluster of 8 CTAs?): its checks ran the pair");
    printf("ok   FA_CL: %d cluster launches checked\n", ncl);
}
