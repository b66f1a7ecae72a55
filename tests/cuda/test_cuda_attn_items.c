/* ---- a decode batch's attention and RoPE in one launch (issue 24; cuda_flash.cu slcu_attention_f16_items and
 * _f32_items, cuda_ops.cu slcu_rope_at): every item's output and cache bitwise the item alone (the house's batch ==
 * alone); --attn-items also times the items' launches against one launch pair per item on the 30B shape ---- */

/* one decode item: its own query row, new K/V row, f16 or f32 caches (two copies: alone, items) and output rows */
typedef struct {
    slcu_attn a;             /* the items' run (caches kc[1], vc[1], out o[1]) */
    void *kc[2], *vc[2];     /* [cap][n_kv * hd] halves or floats, the same random contents */
    float *q, *kv, *o[2];
    size_t cbytes;
} ai_item;

static void ai_make(ai_item *it, int NH, int NKV, int HD, int cap, int window, int pos, const float *sinks, int gated,
                    int f32) {
    char msg[256] = "";
    const int ROW = NKV * HD, qs = gated ? 2 * HD : HD;
    it->cbytes = (size_t)cap * ROW * (f32 ? 4 : 2);
    uint16_t *h = malloc(it->cbytes);
    for (int c = 0; c < 2; c++) { /* K, then V: the same bytes into both copies */
        for (size_t i = 0; i < (size_t)cap * ROW; i++) {
            if (f32) ((float *)h)[i] = nrand();
            else h[i] = f32_to_f16(nrand());
        }
        for (int k = 0; k < 2; k++) {
            void **d = c ? &it->vc[k] : &it->kc[k];
            *d = slcu_alloc(it->cbytes, msg, sizeof msg);
            slcu_upload(*d, h, it->cbytes, msg, sizeof msg);
        }
    }
    free(h);
    it->q = rnd_dev((size_t)NH * qs, 1, NULL, msg), it->kv = rnd_dev((size_t)2 * ROW, 1, NULL, msg);
    for (int k = 0; k < 2; k++) {
        it->o[k] = slcu_alloc((size_t)NH * HD * 4, msg, sizeof msg);
        poison(it->o[k], (size_t)NH * HD * 4);
    }
    it->a = (slcu_attn){it->q, (size_t)NH * qs, qs, gated, it->kv, it->kv + ROW, 2 * ROW, it->kc[1], it->vc[1], cap, 1, pos,
                        NH, NKV, HD, window, sinks, 1.0f / sqrtf((float)HD), it->o[1], (size_t)NH * HD, !f32};
}

static void ai_free(ai_item *it) {
    for (int k = 0; k < 2; k++) slcu_free(it->kc[k]), slcu_free(it->vc[k]), slcu_free(it->o[k]);
    slcu_free(it->q), slcu_free(it->kv);
}

/* n items at positions pos[i] (caps cap[i]): alone (slcu_attention on copy 0, the fold launched) == in one items call
 * (copy 1; one: the one-chunk items ended in k_fa16_part_items, slcu_fa16_one; f32: f32 caches, their items call),
 * outputs and caches bitwise */
static int ai_cl = -1; /* the items' run: slcu_fa16_cl's (SLUICE_CUDA_FA_CL) switch; the alone runs take the pair, off */

static void check_items(int n, int NH, int NKV, int HD, const int *pos, const int *cap, int window, int sinks, int gated,
                        int one, int f32) {
    char msg[256] = "";
    float *dsk = rnd_dev(NH, 1, NULL, msg);
    ai_item it[SLCU_ATTN_ITEMS];
    slcu_attn s[SLCU_ATTN_ITEMS];
    for (int i = 0; i < n; i++)
        ai_make(&it[i], NH, NKV, HD, cap[i], window, pos[i], sinks ? dsk : NULL, gated, f32), s[i] = it[i].a;
    slcu_fa16_one(0), slcu_fa16_cl(0);
    for (int i = 0; i < n; i++) {
        slcu_attn a = it[i].a;
        a.k_cache = it[i].kc[0], a.v_cache = it[i].vc[0], a.out = it[i].o[0];
        CK(!slcu_attention(&a, msg, sizeof msg), "%s", msg);
    }
    slcu_fa16_one(one), slcu_fa16_cl(ai_cl);
    const int r = f32 ? slcu_attention_f32_items(s, n, msg, sizeof msg) : slcu_attention_f16_items(s, n, msg, sizeof msg);
    slcu_fa16_one(-1), slcu_fa16_cl(-1);
    char name[160];
    snprintf(name, sizeof name, "%s attention of %d items %d/%d hd %d w %d%s%s%s%s (first @%d, last @%d)",
             f32 ? "f32" : "f16", n, NH, NKV, HD, window, sinks ? " sinks" : "", gated ? " gated" : "",
             one ? " one-chunk end" : "", ai_cl == 1 ? " FA_CL" : ai_cl == 2 ? " FA_CL=2" : "", pos[0], pos[n - 1]);
    CK(r == 1, "%s: not taken (%d): %s", name, r, msg);
    int same = 1;
    for (int i = 0; i < n; i++) {
        float *o0 = dl(it[i].o[0], (size_t)NH * HD), *o1 = dl(it[i].o[1], (size_t)NH * HD);
        float *k0 = dl(it[i].kc[0], it[i].cbytes / 4), *k1 = dl(it[i].kc[1], it[i].cbytes / 4);
        float *v0 = dl(it[i].vc[0], it[i].cbytes / 4), *v1 = dl(it[i].vc[1], it[i].cbytes / 4);
        const int ok = !memcmp(o0, o1, (size_t)NH * HD * 4) && !memcmp(k0, k1, it[i].cbytes) && !memcmp(v0, v1, it[i].cbytes);
        int fin = 1;
        for (int j = 0; j < NH * HD; j++) fin &= isfinite(o0[j]) != 0;
        CK(ok && fin, "%s: item %d (@%d) differs from it alone (output / caches) or is not finite", name, i, pos[i]);
        same &= ok && fin;
        free(o0), free(o1), free(k0), free(k1), free(v0), free(v1);
    }
    if (same) printf("ok   %s == each alone, outputs and caches bitwise\n", name);
    for (int i = 0; i < n; i++) ai_free(&it[i]);
    slcu_free(dsk);
}

/* RoPE of n tokens at their own positions in one launch == each token alone at its position, bitwise */
static void check_rope_at(int n, int nh, int hd, int rot, int inter) {
    char msg[256] = "";
    const size_t ld = (size_t)nh * hd + 16, tot = (size_t)n * ld;
    float fq[512];
    int pos[300];
    for (int i = 0; i < rot / 2; i++) fq[i] = powf(10000.f, -2.f * i / rot);
    for (int t = 0; t < n; t++) pos[t] = (int)(urand() * 9000);
    float *hx, *dx = rnd_dev(tot, 2, &hx, msg);
    for (int t = 0; t < n; t++)
        CK(!slcu_rope(dx + (size_t)t * ld, 1, ld, nh, hd, rot, fq, 1.1f, pos[t], inter, msg, sizeof msg), "%s", msg);
    float *one = dl(dx, tot);
    slcu_upload(dx, hx, tot * 4, msg, sizeof msg);
    CK(!slcu_rope_at(dx, n, ld, nh, hd, rot, fq, 1.1f, pos, inter, msg, sizeof msg), "%s", msg);
    float *all = dl(dx, tot);
    int moved = 0;
    for (size_t i = 0; i < tot; i++) moved |= all[i] != hx[i];
    const int same = moved && !memcmp(one, all, tot * 4);
    CK(same, "rope of %d tokens at their positions (rot %d, interleave %d) differs from each alone", n, rot, inter);
    if (same)
        printf("ok   rope of %d tokens x %d heads at their own positions (rot %d of %d, interleave %d) == each alone, "
               "bitwise\n", n, nh, rot, hd, inter);
    free(hx), free(one), free(all);
    slcu_free(dx);
}

static void check_attn_items(void) {
    const int p8[8] = {0, 5, 63, 64, 200, 511, 1000, 3000}, c8[8] = {64, 70, 64, 200, 512, 600, 1024, 4096};
    /* f16 caches with the one-chunk end off and on, then f32 caches (f = 2) */
    for (int f = 0; f < 3; f++) {
        const int one = f == 1, f32 = f == 2;
        check_items(8, 32, 4, 128, p8, c8, 0, 0, 0, one, f32); /* the 30B shape, depths 1 .. 3001 */
        const int p3[3] = {7, 7, 7}, c3[3] = {8, 100, 4096};
        check_items(3, 32, 4, 128, p3, c3, 0, 0, 1, one, f32); /* the same position in three sequences, gated: one chunk */
        const int pw[5] = {3, 49, 50, 130, 251}, cw[5] = {64, 64, 64, 69, 69}; /* window 50 in rings of 64 / 69: wrapped */
        check_items(5, 8, 2, 64, pw, cw, 50, 1, 0, one, f32);
        const int pg[4] = {10, 100, 700, 70}, cg[4] = {16, 128, 800, 80};
        check_items(4, 64, 2, 128, pg, cg, 0, 0, 0, one, f32); /* 32 query heads a KV head: two row tiles an item */
        check_items(4, 32, 4, 256, pg, cg, 0, 1, 1, one, f32); /* head_dim 256 (two warps a CTA; f32: one) */
        check_items(4, 6, 2, 20, pg, cg, 0, 0, 0, one, f32);   /* head_dim 20: element loads */
    }
    int p16[16], c16[16];
    for (int i = 0; i < 16; i++) p16[i] = 37 * i * i, c16[i] = 37 * i * i + 1 + i;
    check_items(16, 16, 4, 64, p16, c16, 0, 0, 0, 0, 0); /* SLCU_ATTN_ITEMS items */
    check_items(16, 16, 4, 64, p16, c16, 0, 0, 0, 0, 1);
    /* SLUICE_CUDA_FA_CL == each alone in the pair: items of up to 16 chunks on clusters (k_fa16_cl_items), with the
     * one-chunk end off and on; more than 16 in the pair (=2: k_fa16_comb2_items' folds); f32 caches */
    const int q8[8] = {0, 5, 63, 64, 200, 511, 700, 1000}, d8[8] = {64, 70, 64, 200, 512, 600, 1024, 1100};
    for (ai_cl = 1; ai_cl <= 2; ai_cl++) { /* =2: k_fa16_comb2_items past the clusters (cuda_flash.cu fl_deep) */
        for (int one = 0; one < 2; one++) {
            check_items(8, 32, 4, 128, q8, d8, 0, 0, 0, one, 0);
            const int pw[5] = {3, 49, 50, 130, 251}, cw[5] = {64, 64, 64, 69, 69};
            check_items(5, 8, 2, 64, pw, cw, 50, 1, 0, one, 0);
            const int pg[4] = {10, 100, 700, 70}, cg[4] = {16, 128, 800, 80};
            check_items(4, 64, 2, 128, pg, cg, 0, 0, 0, one, 0);
            check_items(4, 32, 4, 256, pg, cg, 0, 1, 1, one, 0);
            check_items(4, 6, 2, 20, pg, cg, 0, 0, 0, one, 0);
        }
        check_items(8, 32, 4, 128, p8, c8, 0, 0, 0, 0, 0), check_items(8, 32, 4, 128, p8, c8, 0, 0, 0, 0, 1);
        check_items(16, 16, 4, 64, p16, c16, 0, 0, 0, 0, 0);
        const int pd[4] = {1100, 5, 2000, 64}, cd[4] = {1200, 70, 2100, 200}; /* past 16 chunks at head_dim 256 (=2: */
        check_items(4, 32, 4, 256, pd, cd, 0, 1, 1, 0, 0);                   /* fa16_comb_row_pf), f16 and f32 */
        check_items(4, 32, 4, 256, pd, cd, 0, 1, 1, 0, 1);
    }
    ai_cl = -1;
    check_rope_at(8, 32, 128, 128, 0), check_rope_at(8, 4, 128, 64, 1), check_rope_at(300, 4, 64, 64, 0);
}

/* --attn-items: us of a decode batch's attention on the 30B shape (32 / 4 heads, head_dim 128, f16 caches), one launch
 * pair per item (slcu_attention, today's loop) against the items' one pair, at depths 1, 512 and 8192 */
typedef struct {
    slcu_attn s[SLCU_ATTN_ITEMS];
    int n, items, f32;
} ai_bench;

static void ai_run(void *p) {
    ai_bench *b = p;
    char msg[256];
    if (b->items) {
        const int r = b->f32 ? slcu_attention_f32_items(b->s, b->n, msg, sizeof msg)
                             : slcu_attention_f16_items(b->s, b->n, msg, sizeof msg);
        if (r != 1) fprintf(stderr, "items: %s\n", msg);
        return;
    }
    for (int i = 0; i < b->n; i++)
        if (slcu_attention(&b->s[i], msg, sizeof msg)) fprintf(stderr, "alone: %s\n", msg);
}

typedef struct {
    slcu_attn a;
    const slcu_act *q8;
} ai_one;

static void ai_one_run(void *p) {
    ai_one *o = p;
    char msg[256];
    if (slcu_attention_q(&o->a, o->q8, msg, sizeof msg) < 0) fprintf(stderr, "one: %s\n", msg);
}

static void bench_attn_items(void) {
    const int depths[3] = {1, 512, 8192}, counts[2] = {1, 8};
    for (int f32 = 0; f32 < 2; f32++) {
        printf("\na decode batch's attention, 30B shape (32 / 4 heads, hd 128, %s caches): us a batch (us an item)\n",
               f32 ? "f32" : "f16");
        printf("%-8s %-6s %-20s %-20s %s\n", "depth", "items", "a pair per item", "one items pair", "ratio");
        for (int d = 0; d < 3; d++)
            for (int c = 0; c < 2; c++) {
                const int n = counts[c];
                ai_item it[8];
                ai_bench b = {.n = n, .f32 = f32};
                for (int i = 0; i < n; i++)
                    ai_make(&it[i], 32, 4, 128, depths[d] + 64, 0, depths[d] - 1, NULL, 0, f32), b.s[i] = it[i].a;
                b.items = 0;
                const float t0 = 1e3f * slcu_time(ai_run, &b, 200);
                b.items = 1;
                const float t1 = 1e3f * slcu_time(ai_run, &b, 200);
                b.items = 0;
                const float t2 = 1e3f * slcu_time(ai_run, &b, 200); /* again: the machine's drift */
                printf("%-8d %-6d %8.2f / %-9.2f %8.2f (%6.2f)    %.2fx\n", depths[d], n, t0, t2, t1, t1 / n,
                       (t0 + t2) / 2 / t1);
                for (int i = 0; i < n; i++) ai_free(&it[i]);
            }
    }
    /* the one-token decode in one chunk: the fold launched (k_fa16_part + k_fa16_comb) against SLUICE_CUDA_FA_ONE's end
     * in k_fa16_part on its CTA's 4 warps, alternated, with and without the output's int8 form (the o matvec's input) */
    printf("\none token, one chunk, 30B shape: us a call, the fold launched / the one-chunk end (alternated twice)\n");
    const int d1[3] = {1, 32, 64};
    char msg[256] = "";
    void *qb = slcu_alloc(slcu_act_bytes(1, 32 * 128), msg, sizeof msg);
    slcu_act q8;
    slcu_act_bind(&q8, qb, 1, 32 * 128, msg, sizeof msg);
    for (int d = 0; d < 3; d++)
        for (int withq = 0; withq < 2; withq++) {
            ai_item it;
            ai_make(&it, 32, 4, 128, d1[d] + 64, 0, d1[d] - 1, NULL, 0, 0);
            ai_one o = {it.a, withq ? &q8 : NULL};
            float t[4];
            for (int k = 0; k < 4; k++) {
                slcu_fa16_one(k & 1);
                t[k] = 1e3f * slcu_time(ai_one_run, &o, 200);
            }
            slcu_fa16_one(-1);
            printf("depth %-5d %-12s %6.2f / %-6.2f  %6.2f / %-6.2f  %.2fx\n", d1[d], withq ? "int8 form" : "output only", t[0],
                   t[1], t[2], t[3], (t[0] + t[2]) / (t[1] + t[3]));
            ai_free(&it);
        }
    slcu_free(qb);
}
