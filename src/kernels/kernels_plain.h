/*
 * kernels_plain.h — the element-wise kernels every table shares, in plain C (no intrinsics). Each
 * kernels_<isa>.c includes this, so the compiler vectorises them with that file's ISA flags; their
 * arithmetic is the same everywhere (rmsnorm sums in double, in index order), so tables agree exactly.
 * Internal to src/kernels/.
 */
#ifndef SL_KERNELS_PLAIN_H
#define SL_KERNELS_PLAIN_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"

static inline void plain_axpy16(float a, const float *restrict x, float *restrict y) {
    for (int j = 0; j < 16; j++) y[j] += a * x[j];
}

/* y[i] += a * x[i]: a multiply and an add per element (no fused multiply-add: C11 mode contracts nothing),
 * so every table gets the same bits. When x and y do not overlap, in blocks of 16 of known length and
 * no aliasing, which GCC's -O2 cost model vectorises (the plain loop it leaves scalar; the AVX2, NEON and
 * scalar tables use this one, AVX-512 has its own axpy_v). */
static inline void plain_axpy(float a, const float *x, float *y, int n) {
    int i = 0;
    const uintptr_t px = (uintptr_t)x, py = (uintptr_t)y, nb = (uintptr_t)(n > 0 ? n : 0) * sizeof(float);
    if (px + nb <= py || py + nb <= px)
        for (; i + 16 <= n; i += 16) plain_axpy16(a, x + i, y + i);
    for (; i < n; i++) y[i] += a * x[i];
}

/* y = (w_off + w) * x / sqrt(mean(x^2) + eps); y may alias x. The squares are summed in double in four
 * running sums, element i into sum i % 4 (the tail's elements too), then (s0 + s1) + (s2 + s3): one sum was
 * a chain of n dependent double adds (~3 us for a 2048-wide row, four rows a layer on a decode step's
 * critical path, each thread idle meanwhile). */
static inline void plain_rmsnorm(const float *x, const float *w, float w_off, float eps, float *y, int n) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += (double)x[i] * (double)x[i];
        s1 += (double)x[i + 1] * (double)x[i + 1];
        s2 += (double)x[i + 2] * (double)x[i + 2];
        s3 += (double)x[i + 3] * (double)x[i + 3];
    }
    if (i < n) s0 += (double)x[i] * (double)x[i];
    if (i + 1 < n) s1 += (double)x[i + 1] * (double)x[i + 1];
    if (i + 2 < n) s2 += (double)x[i + 2] * (double)x[i + 2];
    const double ss = (s0 + s1) + (s2 + s3);
    float inv = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    i = 0;
    for (; i + 16 <= n; i += 16) { /* 16 at a time through locals (y may alias x): the same products */
        float a[16], b[16];
        memcpy(a, x + i, sizeof a);
        memcpy(b, w + i, sizeof b);
        for (int j = 0; j < 16; j++) a[j] = (a[j] * inv) * (w_off + b[j]);
        memcpy(y + i, a, sizeof a);
    }
    for (; i < n; i++) y[i] = (x[i] * inv) * (w_off + w[i]);
}

/* y[i] = silu(g[i]) * u[i]. */
static inline void plain_swiglu(const float *g, const float *u, float *y, int n) {
    for (int i = 0; i < n; i++) y[i] = kern_silu(g[i]) * u[i];
}

/* The lanes of an int8 kernel's short last step (columns c0 .. cols; kernels_i8_x86.h, kernels_neon_dot.c), one
 * by one in the canonical arithmetic, into acc[16]; sf: the row's scales as f32. */
static inline void plain_i8_tail(dt_type dt, const uint8_t *q, const float *sf, int g, const int8_t *xq,
                                 const float *d, int c0, int cols, float *acc) {
    const int per = dt == DT_Q8 ? 4 : 8;
    for (int l = 0; c0 + per * l < cols; l++) {
        int c = c0 + per * l;
        int32_t I = 0;
        for (int i = 0; i < per; i++) {
            int code = dt == DT_Q8 ? q[c + i] : (q[(c + i) / 2] >> ((c + i) & 1) * 4) & 15;
            I += (int32_t)code * (int32_t)xq[c + i];
        }
        acc[l] = fmaf((float)I, sf[c / g] * d[c / 32], acc[l]);
    }
}

#endif
