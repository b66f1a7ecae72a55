/* ---- --bench-fa: the one-token decode attention of the 30B shape (32 / 4 heads, head_dim 128) at depths 1, 65, 512,
 * 1100, 2048, 8192, 32768, us a call, with SLUICE_CUDA_FA_CL=0 (the decode pair), =1 (the default: cuda_flash_cl.cu's
 * clusters for 2 .. 16 chunks, k_fa16_comb2's scan fold past them at head_dim <= 128: cuda_flash.cu fl_deep) and =2
 * (k_fa16_comb2 for every fold), alternated; f16 caches with and without the output's int8 form (the o matvec's input, as
 * a decode step asks), and f32 caches; then a batch of 8 items (a decode batch's attention, SLUICE_CUDA_ATTN_ITEMS) at
 * depths 1 .. 8192. The checks that every mode's rows are the pair's bits are check_attn_f16's and check_attn_items'
 * (the full run). ---- */

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

/* us a call of fn at FA_CL 0, 1, 2 (t[3]), each the best of two alternated rounds of 200 back to back */
static void fa_modes(void (*fn)(void *), void *b, float t[3]) {
    t[0] = t[1] = t[2] = 1e30f;
    for (int k = 0; k < 6; k++) {
        slcu_fa16_cl(k % 3);
        const float v = 1e3f * slcu_time(fn, b, 200);
        if (v < t[k % 3]) t[k % 3] = v;
    }
    slcu_fa16_cl(-1);
}
static void fa_row(const char *cache, int depth, const char *what, const float t[3]) {
    printf("%-7s %-6d %-12s %8.2f %8.2f %8.2f   %.3f   %.3f\n", cache, depth, what, t[0], t[1], t[2], t[0] / t[1], t[0] / t[2]);
    fflush(stdout);
}

static void bench_fa(void) {
    enum { ND = 7 };
    const int depths[ND] = {1, 65, 512, 1100, 2048, 8192, 32768}; /* 1100: 18 chunks, the first past the clusters */
    char msg[256] = "";
    void *qb = slcu_alloc(slcu_act_bytes(1, 32 * 128), msg, sizeof msg);
    slcu_act q8;
    slcu_act_bind(&q8, qb, 1, 32 * 128, msg, sizeof msg);
    printf("\none-token decode attention, 30B shape (32 / 4 heads, hd 128): us a call (best of 2 alternated rounds of 200 "
           "back to back) with SLUICE_CUDA_FA_CL=0 (the pair), =1 (the default: clusters to 16 chunks, the scan fold past "
           "them at hd <= 128), =2 (k_fa16_comb2 for every fold); then 0 / 1 and 0 / 2 (above 1: faster than the pair)\n");
    printf("%-7s %-6s %-12s %8s %8s %8s   %-5s   %s\n", "cache", "depth", "output", "=0", "=1", "=2", "0/1", "0/2");
    for (int f = 0; f < 3; f++) { /* f16 output only, f16 with the int8 form, f32 */
        const int f32 = f == 2;
        for (int d = 0; d < ND; d++) {
            ai_item it;
            ai_make(&it, 32, 4, 128, depths[d] + 64, 0, depths[d] - 1, NULL, 0, f32);
            fa_bench b = {it.a, f == 1 ? &q8 : NULL, f32};
            float t[3];
            fa_modes(fa_bench_run, &b, t);
            fa_row(f32 ? "f32" : "f16", depths[d], f == 1 ? "int8 form" : "output only", t);
            ai_free(&it);
        }
    }
    slcu_free(qb);
    printf("\na decode batch of 8 items (slcu_attention_f16_items / _f32_items), 30B shape: us a batch, as above\n");
    for (int f32 = 0; f32 < 2; f32++)
        for (int d = 0; d < ND - 1; d++) {
            ai_item it[8];
            ai_bench b = {.n = 8, .items = 1, .f32 = f32};
            for (int i = 0; i < 8; i++) ai_make(&it[i], 32, 4, 128, depths[d] + 64, 0, depths[d] - 1, NULL, 0, f32), b.s[i] = it[i].a;
            float t[3];
            fa_modes(ai_run, &b, t);
            fa_row(f32 ? "f32" : "f16", depths[d], "8 items", t);
            for (int i = 0; i < 8; i++) ai_free(&it[i]);
        }
}
