/*
 * neon_check.c — the NEON kernel table against the scalar oracle on random inputs of awkward sizes,
 * built without the rest of the library so it cross-compiles with aarch64-linux-gnu-gcc and runs under
 * qemu-user (tools/neon_test.sh). Same tolerance as tests/test_quant.c; prints "N passed, N failed".
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "quant/quant.h"

static uint64_t rng = 99;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

int main(void) {
    const kern_ops *sc = kern_scalar_ops(), *ne = kern_neon_ops();
    if (!ne) { printf("no NEON table on this build\n0 passed, 1 failed\n"); return 1; }
    int pass = 0, fail = 0;
    static const int plain_cols[] = {1, 7, 13, 100, 257, 300}, q_cols[] = {32, 96, 160, 384}, rows_l[] = {1, 5, 13};
    for (int dt = DT_F32; dt < DT_COUNT; dt++) {
        if (dt == DT_F8E4M3) continue;
        int q = q_is_quant((sl_dtype)dt);
        for (int ci = 0; ci < (q ? 4 : 6); ci++)
            for (int gi = 0; gi < (q ? 3 : 1); gi++) {
                int cols = q ? q_cols[ci] : plain_cols[ci], group = 32 << gi, rows = rows_l[(ci + gi) % 3], nt = 3;
                if (q && cols % group) continue;
                size_t n = (size_t)rows * cols;
                float *w = malloc(n * 4), *x = malloc((size_t)nt * cols * 4), *a = malloc((size_t)nt * rows * 4),
                      *b = malloc((size_t)nt * rows * 4);
                for (size_t i = 0; i < n; i++) w[i] = frand() * 0.1f;
                for (int i = 0; i < nt * cols; i++) x[i] = frand();
                void *data = malloc(q_mat_bytes((sl_dtype)dt, rows, cols, group, DT_BF16) + 64);
                if (q) q_quantize((sl_dtype)dt, w, rows, cols, group, DT_BF16, 7, data);
                else dt_from_f32((sl_dtype)dt, w, data, n);
                sl_mat m;
                q_mat_bind(&m, data, (sl_dtype)dt, rows, cols, group, DT_BF16, 7);
                kern_matmul(sc, NULL, &m, x, cols, a, rows, nt);
                kern_matmul(ne, NULL, &m, x, cols, b, rows, nt);
                int ok = 1;
                for (int i = 0; i < nt * rows; i++) ok &= fabsf(a[i] - b[i]) <= 1e-5f * (float)cols * 0.3f + 1e-6f;
                if (ok) pass++;
                else { fail++; printf("FAIL neon %s rows %d cols %d group %d\n", dt_name((sl_dtype)dt), rows, cols, group); }
                free(w); free(x); free(a); free(b); free(data);
            }
    }
    float u[37], v[37];
    for (int i = 0; i < 37; i++) { u[i] = frand(); v[i] = frand(); }
    if (fabsf(ne->dot(u, v, 37) - sc->dot(u, v, 37)) < 1e-5f) pass++; else { fail++; printf("FAIL dot\n"); }
    printf("%d passed, %d failed\n", pass, fail);
    return fail != 0;
}
