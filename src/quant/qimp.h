/*
 * qimp.h — importance-weighted quantisation (`sluice pack --imatrix`, docs/QUANT.md "Importance matrices"): the
 * error measure and its search, shared by the affine types (quant.c), q3 (quant.c) and q2 / q2v (q2.c).
 *
 * With importances c_j >= 0 per column (llama-imatrix's mean squared activation of column j), the error of a row is
 * sum_j c_j (w_j - q_j)^2: the diagonal part of E[(w.x - q.x)^2]. The affine types store w itself and minimise it
 * directly (llama.cpp's quantize_row_*_impl with quant_weights). The rotated types store v = R w per group of g
 * columns, R = H D / sqrt(g) (quant.h), and w - q = R^T e with e the rotated error, so the same measure is
 *   E(e) = e^T M e,  M = R diag(c) R^T = H D diag(c) D H / g = H diag(c) H / g   (D^2 = 1: the signs drop out),
 * and since H's entries are +-1 with H[i][j] H[k][j] = H[i ^ k][j] (Sylvester's order), M[i][k] = m[i ^ k] with
 * m = H c / g: a dyadic convolution. Its diagonal is m[0] = mean(c) for every i, so weighting each rotated value by
 * its own importance would change nothing; the weight lives in M's off-diagonal terms, which couple the rotated
 * values of a group. The rotated quantisers therefore choose scales by E and then move codes one at a time while
 * E falls: dE of e_i -> e_i + d is 2 d (M e)_i + d^2 m[0], and M e is kept up to date in O(g) per move.
 * With c NULL nobody calls in here: the unweighted quantisers stay byte for byte as they were.
 */
#ifndef SL_QIMP_H
#define SL_QIMP_H

/* m[g] = H c / g for the importances c [g] of a group (g a power of two). */
void qimp_metric(const float *c, int g, float *m);
/* E(e) = sum_j c_j (R^T e)_j^2 = (1/g) sum_j c_j ((H e)_j)^2 for a rotated error e [g]. */
double qimp_err(const float *e, const float *c, int g);
/* u[g] = M e. */
void qimp_apply(const float *e, const float *c, int g, float *u);
/* Scalar codebooks (q3, q2): rotated values v [g] stored as s * lev[code[i]], lev ascending of n_lev levels; moves
 * codes to a neighbouring level while E falls (at most `passes` sweeps). Returns E of the result. */
double qimp_descend(const float *v, int g, float s, const float *lev, int n_lev, unsigned char *code, const float *c,
                    const float *m, int passes);
/* 1 when c [n] holds a positive importance (else the group is quantised unweighted). */
int qimp_any(const float *c, int n);

#endif
