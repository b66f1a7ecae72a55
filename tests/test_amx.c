/*
 * test_amx.c — the AMX q4 prefill kernel (src/kernels/kernels_amx.c) on emulated tiles (src/kernels/amx_emu.h,
 * tests/kernels_amx_emu.c): bitwise the scalar oracle (kernels.h's canonical order) on random q4 matrices at every
 * group and scale type, implied and stored biases, short last steps (columns not a multiple of 128), short row
 * blocks, one to 70 tokens (token tiles of 16 and blocks of 64) and a row range split in two; every output written,
 * nothing outside the range. Needs AVX-512 VNNI (the fold's vectors); skipped without it. On an AMX host
 * tools/amx_check.c checks the real tiles the same way (`make amx-check`).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_amx.h"
#include "quant/quant.h"
#include "test.h"

static uint64_t rng = 0xa3a3ull;
static float frand(void) { /* uniform [-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static int has_vnni(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

TEST(kernels_amx_emulated_bitwise_oracle) {
    if (!has_vnni()) {
        fprintf(stderr, "    skipped: no AVX-512 VNNI here\n");
        return;
    }
    rng ^= test_seed();
    static const int cols_l[] = {32, 160, 768, 2048, 384, 4224};
    static const int rows_l[] = {16, 37, 5, 32};
    static const int tok_l[] = {1, 3, 16, 17, 70, 33};
    static const dt_type sdts[] = {DT_F16, DT_BF16, DT_F32};
    int cases = 0;
    for (int ci = 0; ci < 6; ci++)
        for (int gi = 0; gi < 3; gi++) {
            const int cols = cols_l[ci], group = 32 << gi;
            if (cols % group) continue;
            const int rows = rows_l[(ci + gi) % 4], n_tok = tok_l[(ci * 3 + gi) % 6], implied = (ci + gi) % 2;
            const dt_type sdt = sdts[(ci + 2 * gi) % 3];
            const size_t n = (size_t)rows * cols;
            float *w = malloc(n * sizeof(float));
            for (size_t i = 0; i < n; i++) w[i] = frand() * 0.1f + (i % 7 == 0 ? 0.03f : 0.0f);
            uint8_t *data = malloc(q_mat_bytes(DT_Q4, rows, cols, group, sdt));
            q_quantize(DT_Q4, w, rows, cols, group, sdt, 1, data);
            tn_mat m;
            q_mat_bind(&m, data, DT_Q4, rows, cols, group, sdt, 1);
            if (implied) { /* biases -8 x scale, as a GGUF Q4_0's (kernels_tile_i8.h i8_bias_f32) */
                const size_t ng = (size_t)rows * (size_t)(cols / group), ss = dt_size(sdt);
                for (size_t j = 0; j < ng; j++) {
                    float b = -8.0f * q_scale_at(m.scales, sdt, j);
                    dt_from_f32(sdt, &b, (uint8_t *)(uintptr_t)m.biases + j * ss, 1);
                }
                m.bias_implied = 1;
            }
            float *x = malloc((size_t)n_tok * cols * sizeof(float));
            for (size_t i = 0; i < (size_t)n_tok * cols; i++) x[i] = frand() * (i % 11 == 0 ? 4.0f : 1.0f);
            x[cols / 2] = 0.0f;
            void *buf = malloc(kern_act_bytes(n_tok, cols));
            kern_act a;
            kern_act_init(&a, buf, x, (size_t)cols, n_tok, cols, 1);
            const size_t ny = (size_t)n_tok * rows;
            float *ref = malloc(ny * sizeof(float)), *got = malloc(ny * sizeof(float));
            for (size_t i = 0; i < ny; i++) ref[i] = got[i] = NAN;
            kern_matmul_act(kern_scalar_ops(), NULL, &m, &a, ref, (size_t)rows); /* prepares a too */
            const int rs = rows > 16 ? 16 : rows / 2; /* a split: [0, rs) then [rs, rows) */
            int rc = 0;
            if (rs > 0) rc |= kern_amx_q4_prefill_emu(&m, &a, got, (size_t)rows, 0, rs);
            rc |= kern_amx_q4_prefill_emu(&m, &a, got, (size_t)rows, rs, rows);
            CHECKF(!rc, "cols %d group %d: the emulated AMX kernel refused", cols, group);
            for (size_t i = 0; i < ny; i++)
                CHECKF(!memcmp(&got[i], &ref[i], 4), "cols %d group %d %s implied %d rows %d tokens %d: out %zu (token %zu row %zu) %.9g != oracle %.9g",
                       cols, group, dt_name(sdt), implied, rows, n_tok, i, i / (size_t)rows, i % (size_t)rows, got[i], ref[i]);
            cases++;
            free(ref), free(got), free(buf), free(x), free(data), free(w);
        }
    fprintf(stderr, "    %d shapes bitwise equal to the oracle on emulated tiles\n", cases);
    CHECK(cases >= 14);
}
