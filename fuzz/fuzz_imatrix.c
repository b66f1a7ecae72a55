/*
 * fuzz_imatrix.c — a llama.cpp importance matrix (import/imatrix.c, `sluice pack --imatrix`): GGUF or legacy .dat;
 * one that reads has every entry looked up at its own width and at a wrong one.
 */
#include "fuzz.h"
#include "import/imatrix.h"
#include "sluice.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    imat_file *f = NULL;
    sl_error err;
    if (imat_open(fuzz_file(0, data, size), &f, &err) != SL_OK) return 0;
    for (int i = 0; i < f->n; i++) {
        const imat_entry *e = &f->e[i];
        const int64_t cols = e->cols ? e->cols : e->n_vals, n = e->n_mat ? e->n_mat : 1;
        const float *w;
        volatile float sink = 0;
        for (int64_t m = 0; m < n; m++)
            if (imat_weights(f, e->name, cols, n, m, &w, &err) == SL_OK && w) sink += w[0] + w[cols - 1];
        imat_weights(f, e->name, cols + 1, n, 0, &w, &err);
        (void)sink;
    }
    imat_close(f);
    return 0;
}
