/*
 * imatrix_ratio.c — what importance weighting does per matrix (docs/QUANT.md "Importance matrices"): for named entries
 * of a llama.cpp importance matrix, 64 random Gaussian rows (seed 1) quantized plainly and under the entry's
 * importances (expert 1 where the entry holds one row per expert), in q3 g64, q2v and q4 g64; prints the weighted
 * error of the weighted quantizer over the plain one's, the same for the plain error, and the CPU time of the weighted
 * quantizer over the plain one's (clock(3), 3 rounds alternating the two, the sums). With a second file, first
 * compares the two files' importances value by value (the GGUF and .dat forms of one imatrix).
 *
 * Usage: build/imatrix_ratio IMATRIX [OTHER] [ENTRY ...]   (default entries: four of the demo model's)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "import/imatrix.h"
#include "quant/quant.h"

static double gauss(void) {
    double u = (rand() + 1.0) / (RAND_MAX + 2.0), v = (rand() + 1.0) / (RAND_MAX + 2.0);
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

static void compare(const imat_file *a, const imat_file *b) {
    double mx = 0;
    long n = 0, none = 0;
    sl_error err = {0};
    for (int i = 0; i < a->n; i++) {
        const imat_entry *ea = &a->e[i], *eb = imat_find(b, ea->name);
        if (!eb || eb->n_vals != ea->n_vals) {
            printf("%s: missing or of another size in the second file\n", ea->name);
            continue;
        }
        const int64_t cols = ea->cols ? ea->cols : eb->cols ? eb->cols : ea->n_vals, nm = ea->n_vals / cols;
        for (int64_t m = 0; m < nm; m++) {
            const float *wa = NULL, *wb = NULL;
            imat_weights(a, ea->name, cols, nm, m, &wa, &err);
            imat_weights(b, ea->name, cols, nm, m, &wb, &err);
            if (!wa || !wb) {
                none++;
                continue;
            }
            for (int64_t j = 0; j < cols; j++, n++) mx = fmax(mx, fabs(wa[j] - wb[j]) / fmax(1e-30, fabs(wa[j])));
        }
    }
    printf("%d / %d entries; %ld values compared, max relative difference %.3g; %ld matrices without data in one\n",
           a->n, b->n, n, mx, none);
}

int main(int argc, char **argv) {
    static const char *const defaults[] = {"blk.0.ffn_down_exps.weight", "blk.3.ssm_out.weight",
                                           "blk.0.ffn_gate_exps.weight", "blk.2.attn_output.weight"};
    if (argc < 2) {
        fprintf(stderr, "usage: imatrix_ratio IMATRIX [OTHER] [ENTRY ...]\n");
        return 2;
    }
    imat_file *f = NULL, *g = NULL;
    sl_error err = {0};
    if (imat_open(argv[1], &f, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int k0 = 2;
    if (argc > 2 && !imat_open(argv[2], &g, &err)) {
        compare(f, g);
        imat_close(g);
        k0 = 3;
    }
    const int n_names = argc > k0 ? argc - k0 : 4;
    const dt_type dts[3] = {DT_Q3, DT_Q2V, DT_Q4};
    srand(1);
    for (int k = 0; k < n_names; k++) {
        const char *name = argc > k0 ? argv[k0 + k] : defaults[k];
        const imat_entry *e = imat_find(f, name);
        if (!e || !e->cols) {
            printf("%s: no such entry (or a legacy one: its width is unknown)\n", name);
            continue;
        }
        const int cols = (int)e->cols, rows = 64;
        const float *imp = NULL;
        imat_weights(f, name, cols, e->n_mat, e->n_mat > 1 ? 1 : 0, &imp, &err);
        float *w = malloc(sizeof(float) * (size_t)rows * (size_t)cols);
        for (int i = 0; i < rows * cols; i++) w[i] = (float)gauss();
        for (int d = 0; d < 3 && imp; d++) {
            const int grp = dts[d] == DT_Q2V ? 128 : 64;
            const dt_type sdt = dts[d] == DT_Q2V ? DT_NONE : DT_BF16;
            if (q_check(dts[d], cols, grp, sdt, NULL)) continue;
            const size_t n = (size_t)q_mat_bytes(dts[d], rows, cols, grp, sdt);
            void *a = malloc(n), *b = malloc(n);
            double tp = 0, tw = 0;
            for (int round = 0; round < 3; round++) {
                clock_t c0 = clock();
                q_quantize(dts[d], w, rows, cols, grp, sdt, 5, a);
                clock_t c1 = clock();
                q_quantize_imp(dts[d], w, rows, cols, grp, sdt, 5, imp, b);
                tp += (double)(c1 - c0), tw += (double)(clock() - c1);
            }
            tn_mat ma, mb;
            q_mat_bind(&ma, a, dts[d], rows, cols, grp, sdt, 5);
            q_mat_bind(&mb, b, dts[d], rows, cols, grp, sdt, 5);
            double ta = 0, tb = 0, ua = 0, ub = 0;
            for (int r = 0; r < rows; r++) {
                const float *x = w + (size_t)r * cols;
                ta += q_row_werr(&ma, r, x, imp), tb += q_row_werr(&mb, r, x, imp);
                ua += q_row_werr(&ma, r, x, NULL), ub += q_row_werr(&mb, r, x, NULL);
            }
            printf("%-28s %-4s weighted error %.3f of plain's (plain error %.3f), CPU time %.2fx\n", name, dt_name(dts[d]),
                   tb / ta, ub / ua, tw / tp);
            free(a), free(b);
        }
        free(w);
    }
    imat_close(f);
    return 0;
}
