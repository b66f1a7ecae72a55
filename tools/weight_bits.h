/*
 * weight_bits.h — storage cost of a container's matrices, for the measurement tools (quant_eval.c,
 * demo_eval.c). Header-only (static): each tool is one object file linked with libsluice.a.
 *
 * Matrices are the 2-D backbone tensors (Linear, Embedding) and the three parts of every routed expert;
 * vectors (norms, conv1d, A_log, dt_bias) are left out. Bits count everything a matrix stores: codes,
 * scales and biases.
 */
#ifndef SL_TOOLS_WEIGHT_BITS_H
#define SL_TOOLS_WEIGHT_BITS_H

#include "format/container.h"
#include "quant/quant.h"
#include "sluice.h"

typedef struct weight_bits {
    double quant_bits;  /* bits per weight over the quantized (q8/q4/q3) matrices; 0 when there are none */
    double quant_share; /* share of matrix weights that are quantized */
    double all_bits;    /* bits per weight over every matrix, whatever its dtype */
} weight_bits;

/* Fills *out from the manifest of the container at path. Returns 0, or -1 (out zeroed) when the file
 * cannot be opened as a container. */
static inline int weight_bits_of(const char *path, weight_bits *out) {
    slc_file f;
    sl_error err;
    *out = (weight_bits){0, 0, 0};
    if (slc_open(path, &f, &err)) return -1;
    double qb = 0, qn = 0, ab = 0, an = 0;
    for (int i = 0; i < f.n_tensors; i++) {
        if (f.t[i].ndim != 2) continue;
        double n = (double)f.t[i].shape[0] * (double)f.t[i].shape[1], b = 8.0 * (double)f.t[i].size;
        an += n;
        ab += b;
        if (q_is_quant(f.t[i].dtype)) { qb += b; qn += n; }
    }
    double ne = (double)f.h.n_moe_layers * f.h.n_experts;
    for (int p = 0; p < 3; p++) {
        double n = (double)f.parts[p].shape[0] * (double)f.parts[p].shape[1] * ne, b = 8.0 * (double)f.parts[p].size * ne;
        an += n;
        ab += b;
        if (q_is_quant(f.parts[p].dtype)) { qb += b; qn += n; }
    }
    out->quant_bits = qn > 0 ? qb / qn : 0;
    out->quant_share = an > 0 ? qn / an : 0;
    out->all_bits = an > 0 ? ab / an : 0;
    slc_close(&f);
    return 0;
}

#endif
