/*
 * mxfp4.c — the decoder choice per kernel table (the scalar oracle is quant.c's) and the matmul;
 * see mxfp4.h.
 */
#include "kernels/mxfp4.h"

#include <stdlib.h>
#include <string.h>

#include "sluice.h"

mxfp4_row_fn mxfp4_row_for(const kern_ops *ops) {
    mxfp4_row_fn f = NULL;
    if (!strcmp(ops->name, "avx512")) f = mxfp4_row_avx512();
    else if (!strcmp(ops->name, "avx2")) f = mxfp4_row_avx2();
    else if (!strcmp(ops->name, "neon")) f = mxfp4_row_neon();
    return f ? f : mxfp4_row_scalar;
}

typedef struct {
    const kern_ops *ops;
    mxfp4_row_fn row;
    const tn_mat *w;
    const float *x;
    float *y;
    size_t ldx, ldy;
    int n_tok;
} mx_job;

#define MX_STACK_COLS 8192

static void mx_part(void *ctx, size_t begin, size_t end) {
    const mx_job *j = ctx;
    const int cols = j->w->cols;
    float stack[MX_STACK_COLS], *buf = cols <= MX_STACK_COLS ? stack : malloc((size_t)cols * sizeof(float));
    if (!buf) { /* cannot happen for any released shape; leave a visible mark rather than garbage */
        for (size_t r = begin; r < end; r++)
            for (int t = 0; t < j->n_tok; t++) j->y[(size_t)t * j->ldy + r] = NAN;
        return;
    }
    const uint8_t *codes = j->w->data, *scales = j->w->scales;
    for (size_t r = begin; r < end; r++) {
        j->row(codes + r * (size_t)(cols / 2), scales + r * (size_t)(cols / 32), cols, buf);
        for (int t = 0; t < j->n_tok; t++) j->y[(size_t)t * j->ldy + r] = j->ops->dot(buf, j->x + (size_t)t * j->ldx, cols);
    }
    if (buf != stack) free(buf);
}

int mxfp4_matmul(const kern_ops *ops, pool_t *pool, const tn_mat *w, const float *x, size_t ldx, float *y,
                 size_t ldy, int n_tok) {
    if (!w->data || !w->scales || w->cols <= 0 || w->cols % 32) return SL_EINVAL;
    if (n_tok <= 0 || w->rows <= 0) return 0;
    mx_job j = {ops, mxfp4_row_for(ops), w, x, y, ldx, ldy, n_tok};
    size_t work = (size_t)w->cols * (size_t)n_tok;
    size_t grain = work >= 65536 ? 4 : (65536 / (work ? work : 1) + 3) / 4 * 4;
    pool_for_any(pool, (size_t)w->rows, grain, mx_part, &j);
    return 0;
}
