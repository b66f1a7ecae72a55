/*
 * qimp.c — the importance-weighted error of a rotated group and the code search under it; see qimp.h.
 * Deterministic and thread-safe (no state).
 */
#include "quant/qimp.h"

#include <string.h>

#include "quant/quant.h"

int qimp_any(const float *c, int n) {
    for (int i = 0; i < n; i++)
        if (c[i] > 0) return 1;
    return 0;
}

void qimp_metric(const float *c, int g, float *m) {
    memcpy(m, c, (size_t)g * sizeof *m);
    q_fwht(m, g);
    for (int i = 0; i < g; i++) m[i] /= (float)g;
}

double qimp_err(const float *e, const float *c, int g) {
    float t[128];
    memcpy(t, e, (size_t)g * sizeof *t);
    q_fwht(t, g);
    double s = 0;
    for (int j = 0; j < g; j++) s += (double)c[j] * t[j] * t[j];
    return s / g;
}

void qimp_apply(const float *e, const float *c, int g, float *u) {
    memcpy(u, e, (size_t)g * sizeof *u);
    q_fwht(u, g);
    for (int j = 0; j < g; j++) u[j] *= c[j];
    q_fwht(u, g);
    for (int j = 0; j < g; j++) u[j] /= (float)g;
}

double qimp_descend(const float *v, int g, float s, const float *lev, int n_lev, unsigned char *code, const float *c,
                    const float *m, int passes) {
    float e[128], u[128];
    for (int i = 0; i < g; i++) e[i] = v[i] - s * lev[code[i]];
    qimp_apply(e, c, g, u);
    for (int p = 0; p < passes; p++) {
        int moved = 0;
        for (int i = 0; i < g; i++) {
            int best = -1;
            float bd = 0.0f, be = 0.0f;
            for (int k = code[i] - 1; k <= code[i] + 1; k += 2) {
                if (k < 0 || k >= n_lev) continue;
                const float d = s * (lev[code[i]] - lev[k]); /* e_i -> e_i + d */
                const float de = 2.0f * d * u[i] + d * d * m[0];
                if (de < be) be = de, bd = d, best = k;
            }
            if (best < 0 || !(be < -1e-7f * m[0] * s * s)) continue; /* a float-noise gain is no move */
            e[i] += bd;
            code[i] = (unsigned char)best;
            for (int k = 0; k < g; k++) u[k] += bd * m[k ^ i];
            moved = 1;
        }
        if (!moved) break;
    }
    return qimp_err(e, c, g);
}
