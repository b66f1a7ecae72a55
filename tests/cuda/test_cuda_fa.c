/* ---- --bench-fa: the one-token decode attention of the 30B shape (32 / 4 heads, head_dim 128) at depths 1, 65, 512,
 * 8192, 32768, us a call, the decode pair as it is (SLUICE_CUDA_FA_CL off) against SLUICE_CUDA_FA_CL's launches
 * (cuda_flash_cl.cu: 2 .. 16 chunks on clusters in one launch, the fold's loads deeper beyond), alternated twice;
 * f16 caches with and without the output's int8 form (the o matvec's input, as a decode step asks), and f32 caches;
 * then a batch of 8 items (a decode batch's attention, SLUICE_CUDA_ATTN_ITEMS) at depths 1 .. 8192.
 * The checks that FA_CL's rows are the pair's bits are check_attn_f16's and check_attn_items' (the full run). ---- */

typedef struct {
    slcu_attn a;
    const slcu_act *q8;
    int f32;
} fa_bench;

static void fa_bench_run(void *p) {
    fa_bench *b = p;
    char msg[256];
    const int r = b->f32 ? slcu_attention_f32(&b->a, NULL, 0, msg, sizeof msg) : slcu_attention_q(&b->a, b->q8, msg, sizeof msg);
    if (r < 0) fprintf(stderr, "bench-fa: %s\n", msg);
}

static void bench_fa(void) {
    const int depths[5] = {1, 65, 512, 8192, 32768};
    char msg[256] = "";
    void *qb = slcu_alloc(slcu_act_bytes(1, 32 * 128), msg, sizeof msg);
    slcu_act q8;
    slcu_act_bind(&q8, qb, 1, 32 * 128, msg, sizeof msg);
    printf("\none-token decode attention, 30B shape (32 / 4 heads, hd 128): us a call, the pair (FA_CL off) / FA_CL on, "
           "alternated twice (200 calls each)\n");
    printf("%-7s %-6s %-12s %-17s %-17s %s\n", "cache", "depth", "output", "off", "FA_CL", "off / on");
    for (int f = 0; f < 3; f++) { /* f16 output only, f16 with the int8 form, f32 */
        const int f32 = f == 2;
        for (int d = 0; d < 5; d++) {
            ai_item it;
            ai_make(&it, 32, 4, 128, depths[d] + 64, 0, depths[d] - 1, NULL, 0, f32);
            fa_bench b = {it.a, f == 1 ? &q8 : NULL, f32};
            float t[4];
            for (int k = 0; k < 4; k++) {
                slcu_fa16_cl(k & 1);
                t[k] = 1e3f * slcu_time(fa_bench_run, &b, 200);
            }
            slcu_fa16_cl(-1);
            printf("%-7s %-6d %-12s %7.2f / %-7.2f %7.2f / %-7.2f %.2fx\n", f32 ? "f32" : "f16", depths[d],
                   f == 1 ? "int8 form" : "output only", t[0], t[2], t[1], t[3], (t[0] + t[2]) / (t[1] + t[3]));
            ai_free(&it);
        }
    }
    slcu_free(qb);
    printf("\na decode batch of 8 items (slcu_attention_f16_items / _f32_items), 30B shape: us a batch, FA_CL off / on, "
           "alternated twice\n");
    for (int f32 = 0; f32 < 2; f32++)
        for (int d = 0; d < 4; d++) {
            ai_item it[8];
            ai_bench b = {.n = 8, .items = 1, .f32 = f32};
            for (int i = 0; i < 8; i++) ai_make(&it[i], 32, 4, 128, depths[d] + 64, 0, depths[d] - 1, NULL, 0, f32), b.s[i] = it[i].a;
            float t[4];
            for (int k = 0; k < 4; k++) {
                slcu_fa16_cl(k & 1);
                t[k] = 1e3f * slcu_time(ai_run, &b, 200);
            }
            slcu_fa16_cl(-1);
            printf("%-7s %-6d %-12s %7.2f / %-7.2f %7.2f / %-7.2f %.2fx\n", f32 ? "f32" : "f16", depths[d], "8 items", t[0],
                   t[2], t[1], t[3], (t[0] + t[2]) / (t[1] + t[3]));
            for (int i = 0; i < 8; i++) ai_free(&it[i]);
        }
}
