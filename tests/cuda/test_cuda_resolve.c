/* Included by test_cuda.c (after test_cuda_mv.c: swi_case, swi_pair). SLUICE_CUDA_RESOLVE=2 (cuda.h slcu_i8_resolve):
 * the one-token matvec's job from its grid (cuda_mv.cu mv1c_i8 JR = 1) where find_job walked the jobs' first tiles.
 * check_resolve_all (the full run and --resolve): every output bitwise the walk's with RESOLVE=2 and =3 (the CTAs
 * trigger the launch after them), the grid's launches counted (so a check that never took them fails); --resolve then
 * times the 30B-A3B experts' pair and o in the three modes. */

/* y of the n jobs mm (each y[i] of rows[i] floats) into one host buffer, after poisoning them and running the launch */
static float *rs_run(slcu_mm *mm, int n, const int *rows, int total, char *msg) {
    for (int i = 0; i < n; i++) poison(mm[i].y, (size_t)rows[i] * 4);
    if (slcu_matmul_i8(mm, n, msg, 256)) CK(0, "%s", msg);
    float *h = malloc((size_t)total * 4 + 4);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        float *y = dl(mm[i].y, (size_t)rows[i]);
        memcpy(h + at, y, (size_t)rows[i] * 4), at += (size_t)rows[i];
        free(y);
    }
    return h;
}

/* n jobs of rows[i] rows of one matrix (q4 or q8, its group and scale type) on one token of cols columns: the walk's y
 * against the grid's at every rows a CTA and PDL off / on; the grid's launch counted where every job has as many tiles
 * (and only there) */
static void check_resolve_plain(dt_type dt, int group, dt_type sdt, int cols, int n, const int *rows) {
    char msg[256] = "";
    int total = 0;
    for (int i = 0; i < n; i++) total += rows[i];
    mat w;
    if (make_mat(&w, dt, total, cols, group, sdt, msg)) {
        CK(0, "%s", msg);
        return;
    }
    void *xb = slcu_alloc(slcu_act_bytes(1, cols), msg, sizeof msg);
    float *dx = rnd_dev(cols, 1, NULL, msg), *dy = slcu_alloc((size_t)total * 4, msg, sizeof msg);
    slcu_act xa;
    CK(!slcu_act_bind(&xa, xb, 1, cols, msg, sizeof msg) && !slcu_act_quantize(&xa, dx, cols, msg, sizeof msg), "%s", msg);
    slcu_mm mm[32];
    for (int i = 0, r0 = 0; i < n; r0 += rows[i], i++) mm[i] = rows_job(&w, r0, rows[i], &xa, NULL, 1, dy + r0);
    const int mvr[5] = {4, 8, 16, 32, -1};
    for (int v = 0; v < 10; v++) {
        const int R = mvr[v % 5], pdl = v / 5;
        slcu_i8_mv_rows(R), slcu_i8_pdl(pdl), slcu_i8_mv1_kernel(3), slcu_i8_mvfold(2); /* (the grid's launch is mv1c_i8's, MF 2) */
        slcu_i8_resolve(1);
        const int n0 = slcu_i8_resolve_launches();
        float *y0 = rs_run(mm, n, rows, total, msg);
        CK(slcu_i8_resolve_launches() == n0, "RESOLVE=1 took the grid's job");
        int uni = 1; /* as many tiles a job at rows R (auto: what cuda_mv.cu picks, unknown here: not asserted) */
        for (int i = 0; i < n && R > 0; i++) uni &= (rows[i] + R - 1) / R == (rows[0] + R - 1) / R;
        for (int m = 2; m <= 3; m++) { /* the grid's job; and its CTAs triggering the launch after it */
            slcu_i8_resolve(m);
            const int n1 = slcu_i8_resolve_launches();
            float *y1 = rs_run(mm, n, rows, total, msg);
            if (R > 0) CK(slcu_i8_resolve_launches() - n1 == uni, "%s g%d %d jobs, rows %d: %d grid launches, expected %d",
                          dt_name(dt), group, n, R, slcu_i8_resolve_launches() - n1, uni);
            CK(!memcmp(y0, y1, (size_t)total * 4), "%s g%d %s %d jobs of %d.. rows x %d, rows %d%s, RESOLVE=%d: the grid's job "
               "differs from find_job's", dt_name(dt), group, dt_name(sdt), n, rows[0], cols, R, pdl ? " PDL" : "", m);
            free(y1);
        }
        free(y0);
    }
    slcu_i8_resolve(0), slcu_i8_mv_rows(0), slcu_i8_pdl(-1), slcu_i8_mv1_kernel(0), slcu_i8_mvfold(0);
    slcu_free(xb), slcu_free(dx), slcu_free(dy);
    free_mat(&w);
}

/* the experts' pair as the resident step runs it (swi_pair mode 0: gate/up through the device table, down on the SwiGLU
 * made in its CTAs): g, u and y with the grid's job bitwise the walk's, at every rows a CTA, PDL off / on */
static void check_resolve_pair(dt_type gdt, dt_type ddt, int gg, int dg, dt_type sdt, int I, int k) {
    char msg[256] = "";
    enum { E = 4, H = 256 };
    mat gm, dm;
    if (make_mat(&gm, gdt, E * 2 * I, H, gg, sdt, msg) || make_mat(&dm, ddt, E * H, I, dg, sdt, msg)) {
        CK(0, "%s", msg);
        return;
    }
    const void *ht[3 * E * 3];
    for (int e = 0; e < E; e++)
        for (int m = 0; m < 3; m++) {
            const slcu_mat w = m < 2 ? sub_mat(&gm, (2 * e + m) * I, I) : sub_mat(&dm, e * H, H);
            const void **p = ht + ((size_t)m * E + e) * 3;
            p[0] = w.data, p[1] = w.scales, p[2] = w.biases;
        }
    int hs[16];
    for (int s = 0; s < 16; s++) hs[s] = (s * 3 + (s == 3)) % E; /* slots 0 and 4 (and more) choose one expert */
    void *xb = slcu_alloc(slcu_act_bytes(1, H), msg, sizeof msg);
    float *dx = rnd_dev(H, 1, NULL, msg);
    slcu_act xa;
    swi_case c = {E, k, I, H, &xa, dev_copy(ht, sizeof ht, msg), dev_copy(hs, sizeof hs, msg), gm.d, gm.d, dm.d,
                  slcu_alloc((size_t)k * I * 4, msg, sizeof msg), slcu_alloc((size_t)k * I * 4, msg, sizeof msg),
                  slcu_alloc((size_t)k * H * 4, msg, sizeof msg), {0}};
    c.gate.rows = c.up.rows = I, c.down.rows = H;
    c.gate.data = c.gate.scales = c.gate.biases = c.up.data = c.up.scales = c.up.biases = NULL;
    c.down.data = c.down.scales = c.down.biases = NULL;
    CK(!slcu_act_bind(&xa, xb, 1, H, msg, sizeof msg) && !slcu_act_quantize(&xa, dx, H, msg, sizeof msg), "%s", msg);
    const size_t gn = (size_t)k * I, yn = (size_t)k * H;
    const int mvr[5] = {4, 8, 16, 32, -1};
    for (int v = 0; v < 10; v++) {
        const int R = mvr[v % 5], pdl = v / 5;
        slcu_i8_mv_rows(R), slcu_i8_pdl(pdl), slcu_i8_mv1_kernel(3), slcu_i8_mvfold(2);
        float *o[3][3];
        for (int m = 0; m < 3; m++) { /* RESOLVE=1 (find_job), 2 (the grid's job), 3 (and the trigger) */
            slcu_i8_resolve(1 + m);
            const int n0 = slcu_i8_resolve_launches();
            poison(c.g, gn * 4), poison(c.u, gn * 4), poison(c.y, yn * 4);
            CK(swi_pair(&c, 0, 3, msg) == 0, "%s", msg);
            o[m][0] = dl(c.g, gn), o[m][1] = dl(c.u, gn), o[m][2] = dl(c.y, yn);
            CK(slcu_i8_resolve_launches() - n0 == (m ? 2 : 0), "RESOLVE=%d, rows %d: %d grid launches, expected %d", 1 + m, R,
               slcu_i8_resolve_launches() - n0, m ? 2 : 0);
        }
        for (int m = 1; m < 3; m++)
            CK(!memcmp(o[0][0], o[m][0], gn * 4) && !memcmp(o[0][1], o[m][1], gn * 4) && !memcmp(o[0][2], o[m][2], yn * 4),
               "%s g%d / %s g%d %s I %d, %d slots, rows %d%s, RESOLVE=%d: the grid's job gives another %s", dt_name(gdt), gg,
               dt_name(ddt), dg, dt_name(sdt), I, k, R, pdl ? " PDL" : "", 1 + m,
               memcmp(o[0][0], o[m][0], gn * 4) || memcmp(o[0][1], o[m][1], gn * 4) ? "gate/up output" : "down output");
        for (int m = 0; m < 3; m++) free(o[m][0]), free(o[m][1]), free(o[m][2]);
    }
    slcu_i8_resolve(0), slcu_i8_mv_rows(0), slcu_i8_pdl(-1), slcu_i8_mv1_kernel(0), slcu_i8_mvfold(0);
    slcu_free(xb), slcu_free(dx), slcu_free((void *)c.tab), slcu_free((void *)c.sel);
    slcu_free(c.g), slcu_free(c.u), slcu_free(c.y);
    free_mat(&gm), free_mat(&dm);
}

static void check_resolve_all(void) {
    const int f0 = failures;
    check_resolve_pair(DT_Q4, DT_Q4, 32, 32, DT_BF16, 768, 8);  /* the 30B shape's types: 16 + 8 jobs */
    check_resolve_pair(DT_Q8, DT_Q4, 64, 32, DT_F16, 160, 3);   /* 5 blocks a row, a last tile part empty */
    check_resolve_pair(DT_Q4, DT_Q8, 128, 128, DT_F32, 4096, 16); /* 32 jobs (MAXJ) */
    const int one[1] = {2048}, same[4] = {300, 300, 300, 300}, mixed[3] = {4096, 512, 512}, near[2] = {33, 40};
    check_resolve_plain(DT_Q4, 32, DT_BF16, 4096, 1, one);    /* o: one job */
    check_resolve_plain(DT_Q8, 32, DT_F16, 1024, 4, same);    /* 300 rows: the last tile short at every R */
    check_resolve_plain(DT_Q4, 64, DT_F32, 2048, 3, mixed);   /* q | k | v: not as many tiles, the walk */
    check_resolve_plain(DT_Q8, 128, DT_BF16, 256, 2, near);   /* as many tiles at R 8, 16, 32 (rows apart), not at 4 */
    printf("%s the one-token matvec's job from its grid (SLUICE_CUDA_RESOLVE=2) == find_job's, %d launches\n",
           failures == f0 ? "ok  " : "FAIL", slcu_i8_resolve_launches());
    fflush(stdout);
}

/* --resolve: check_resolve_all, then on the 30B-A3B decode shape (128 experts, 8 slots, H 2048, I 768, q4 g32, bf16 and
 * f16 scales, auto rows, the default fold) gate/up alone, down alone, the pair, and o (2048 x 4096, one job) with
 * RESOLVE=1 (find_job), =2 (the grid's job) and =3 (and the trigger) alternated, PDL on (the step's) and off, 3 rounds:
 * us a call, the median of 200 each between its own events and the mean of 200 back to back; then the best round of
 * each and =1 / =2, =1 / =3 (above 1: faster than find_job) */
typedef struct { swi_run s; slcu_mm o; int what; } rs_bench;
static void rs_fn(void *p) {
    rs_bench *b = p;
    char msg[256];
    if (b->what < 3) {
        b->s.part = b->what + 1;
        swi_run_fn(&b->s);
    } else if (slcu_matmul_i8(&b->o, 1, msg, sizeof msg))
        CK(0, "%s", msg);
}
static int resolve_main(void) {
    check_resolve_all();
    printf("%s: %d failure%s\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    fflush(stdout);
    if (failures) return 1;
    char msg[256] = "";
    fast_fill = 1;
    enum { E = 128, K = 8, H = 2048, I = 768, NR = 3, REPS = 200 };
    static const char *wname[4] = {"gate/up (16 jobs)", "down (8 jobs)", "pair", "o (1 job)"};
    for (int si = 0; si < 2; si++) {
        const dt_type sdt = si ? DT_F16 : DT_BF16;
        mat gm, dm, om;
        if (make_mat_raw(&gm, DT_Q4, E * 2 * I, H, 32, sdt, msg) || make_mat_raw(&dm, DT_Q4, E * H, I, 32, sdt, msg) ||
            make_mat_raw(&om, DT_Q4, H, 4096, 32, sdt, msg)) {
            printf("%s\n", msg);
            return 1;
        }
        static const void *ht[3 * E * 3];
        for (int e = 0; e < E; e++)
            for (int m = 0; m < 3; m++) {
                const slcu_mat w = m < 2 ? sub_mat(&gm, (2 * e + m) * I, I) : sub_mat(&dm, e * H, H);
                const void **p = ht + ((size_t)m * E + e) * 3;
                p[0] = w.data, p[1] = w.scales, p[2] = w.biases;
            }
        int hs[SWI_NSEL * K];
        for (int i = 0; i < SWI_NSEL * K; i++) hs[i] = (i / K * 37 + i % K * 13) % E; /* 8 experts a set, apart */
        void *xb = slcu_alloc(slcu_act_bytes(1, H), msg, sizeof msg), *ob = slcu_alloc(slcu_act_bytes(1, 4096), msg, sizeof msg);
        float *dx = rnd_dev(4096, 1, NULL, msg), *oy = slcu_alloc((size_t)H * 4, msg, sizeof msg);
        slcu_act xa, oa;
        slcu_act_bind(&xa, xb, 1, H, msg, sizeof msg), slcu_act_quantize(&xa, dx, H, msg, sizeof msg);
        slcu_act_bind(&oa, ob, 1, 4096, msg, sizeof msg), slcu_act_quantize(&oa, dx, 4096, msg, sizeof msg);
        rs_bench b = {{{E, K, I, H, &xa, dev_copy(ht, sizeof ht, msg), NULL, gm.d, gm.d, dm.d,
                        slcu_alloc((size_t)K * I * 4, msg, sizeof msg), slcu_alloc((size_t)K * I * 4, msg, sizeof msg),
                        slcu_alloc((size_t)K * H * 4, msg, sizeof msg), {0}},
                       dev_copy(hs, sizeof hs, msg), 0, 3, 0},
                      rows_job(&om, 0, H, &oa, NULL, 1, oy), 0};
        b.s.c.gate.rows = b.s.c.up.rows = I, b.s.c.down.rows = H;
        slcu_i8_mv_rows(-1), slcu_i8_mvfold(2);
        float best[2][3][4][2]; /* [pdl][mode][what][alone, back to back] */
        for (int i = 0; i < 48; i++) best[i / 24][i / 8 % 3][i / 2 % 4][i % 2] = 1e30f;
        printf("\nthe one-token matvec's job: find_job (RESOLVE=1) / the grid's (=2) / the grid's + trigger (=3); q4 g32 %s, "
               "%d of %d experts, H %d, I %d, auto rows: us a call, median of %d alone | mean of %d back to back\n",
               dt_name(sdt), K, E, H, I, REPS, REPS);
        for (int rd = 0; rd < NR; rd++)
            for (int pd = 1; pd >= 0; pd--)
                for (int w = 0; w < 4; w++) {
                    slcu_i8_pdl(pd);
                    float v[3][2];
                    for (int m = 0; m < 3; m++) {
                        slcu_i8_resolve(1 + m);
                        b.what = w;
                        v[m][0] = 1e3f * slcu_time_median(rs_fn, &b, REPS);
                        v[m][1] = 1e3f * slcu_time(rs_fn, &b, REPS);
                        for (int t = 0; t < 2; t++)
                            if (v[m][t] < best[pd][m][w][t]) best[pd][m][w][t] = v[m][t];
                    }
                    printf("  round %d %-6s %-18s =1 %7.2f | %7.2f   =2 %7.2f | %7.2f   =3 %7.2f | %7.2f\n", rd,
                           pd ? "PDL" : "no PDL", wname[w], v[0][0], v[0][1], v[1][0], v[1][1], v[2][0], v[2][1]);
                    fflush(stdout);
                }
        for (int pd = 1; pd >= 0; pd--)
            for (int w = 0; w < 4; w++)
                for (int m = 1; m < 3; m++)
                    printf("  best of %d, %-6s %-18s =1 -> =%d: alone %.2f -> %.2f (%.3fx) | back to back %.2f -> %.2f (%.3fx)\n",
                           NR, pd ? "PDL" : "no PDL", wname[w], m + 1, best[pd][0][w][0], best[pd][m][w][0],
                           best[pd][0][w][0] / best[pd][m][w][0], best[pd][0][w][1], best[pd][m][w][1],
                           best[pd][0][w][1] / best[pd][m][w][1]);
        fflush(stdout);
        slcu_i8_resolve(0), slcu_i8_mv_rows(0), slcu_i8_mvfold(0), slcu_i8_pdl(-1);
        slcu_free(xb), slcu_free(ob), slcu_free(dx), slcu_free(oy), slcu_free((void *)b.s.c.tab), slcu_free((void *)b.s.sel0);
        slcu_free(b.s.c.g), slcu_free(b.s.c.u), slcu_free(b.s.c.y);
        free_mat(&gm), free_mat(&dm), free_mat(&om);
    }
    return 0;
}
