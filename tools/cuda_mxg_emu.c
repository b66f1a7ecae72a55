/*
 * cuda_mxg_emu.c — checks src/backend/cuda/cuda_mxfp4.cu's many-token kernels on the CPU (no GPU here): k_mxg's tile
 * (mxg_tile: its thread layout, the staging of one 32-column block at a time into Ws / Xs, the classes' order by
 * mxg_next, the fma chains, the binary-counter merges) and k_mxg_seg's search for its expert and tile, transliterated
 * with the CTA's threads as a loop (a barrier is the loop's end) and shared memory as arrays of the same layout,
 * against k_mxfp4 (a warp a row, lane l its blocks l, l + 32, ..., the xor butterfly done lane by lane), compared
 * bitwise: shapes 2880 x 2880, 5760 x 2880, 100 x 96, odd rows, 32 / 64 / 1024 / 1056 columns, 1 .. 100 tokens, x at
 * a stride and off 16-byte alignment, every tile shape (64 x 16, 128 x 32, 64 x 64, 32 x 8 with 2 x 2 a thread), and
 * segments of random experts
 * (some empty, gathered x rows, scattered y rows) against the per-expert calls.
 * Build: cc -O2 -std=c11 -ffp-contract=off tools/cuda_mxg_emu.c -lm -o /tmp/mxg_emu (exit 0: every case agrees).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 88172645463325252ull;
static uint32_t rnd(void) { rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17; return (uint32_t)(rs >> 11); }

static const float mx_values[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
static float bits(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
static float mx_scale(unsigned s) { return bits(s == 0 ? 0x00400000u : s == 255 ? 0x7f800000u : s << 23); }
static unsigned word(const uint8_t *p) { return (unsigned)p[0] | (unsigned)p[1] << 8 | (unsigned)p[2] << 16 | (unsigned)p[3] << 24; }

/* ---- k_mxfp4: nt <= 8 tokens, every row (a warp each; lanes as an array) ---- */
static void k_mxfp4(const uint8_t *codes, const uint8_t *scales, int rows, int cols, const float *x, size_t ldx, float *y,
                    size_t ldy, int nt) {
    const int nb = cols / 32;
    for (int r = 0; r < rows; r++) {
        float acc[32][8];
        for (int lane = 0; lane < 32; lane++) {
            const uint8_t *rc = codes + (size_t)r * (cols / 2), *rsc = scales + (size_t)r * nb;
            for (int t = 0; t < 8; t++) acc[lane][t] = 0.0f;
            for (int b = lane; b < nb; b += 32) {
                unsigned wd[4];
                for (int k = 0; k < 4; k++) wd[k] = word(rc + (size_t)b * 16 + 4 * k);
                const float s = mx_scale(rsc[b]);
                float w[32];
                for (int k = 0; k < 4; k++)
                    for (int j = 0; j < 8; j++) w[8 * k + j] = mx_values[(wd[k] >> (4 * j)) & 15] * s;
                for (int t = 0; t < 8; t++) {
                    if (t >= nt) break;
                    const float *xt = x + (size_t)t * ldx + (size_t)b * 32;
                    float d = 0.0f;
                    for (int j = 0; j < 32; j++) d = fmaf(w[j], xt[j], d);
                    acc[lane][t] = acc[lane][t] + d;
                }
            }
        }
        for (int t = 0; t < nt; t++) {
            float v[32], u[32];
            for (int l = 0; l < 32; l++) v[l] = acc[l][t];
            for (int o = 16; o > 0; o >>= 1) { /* every lane adds its partner's value of before the step */
                for (int l = 0; l < 32; l++) u[l] = v[l] + v[l ^ o];
                memcpy(v, u, sizeof v);
            }
            y[(size_t)t * ldy + r] = v[0];
        }
    }
}

/* slcu_matmul_mxfp4's k_mxfp4 path: launches of 8 tokens */
static void ref_matmul(const uint8_t *c, const uint8_t *s, int rows, int cols, const float *x, size_t ldx, float *y, size_t ldy, int n) {
    for (int t0 = 0; t0 < n; t0 += 8)
        k_mxfp4(c, s, rows, cols, x + (size_t)t0 * ldx, ldx, y + (size_t)t0 * ldy, ldy, n - t0 < 8 ? n - t0 : 8);
}

/* ---- mxg_tile ---- */
static int brev5(int i) { int r = 0; for (int k = 0; k < 5; k++) r |= ((i >> k) & 1) << (4 - k); return r; }
static int mxg_next(int b, int nb) {
    if (b + 32 < nb) return b + 32;
    for (int i = brev5(b & 31) + 1; i < 32; i++)
        if (brev5(i) < nb) return brev5(i);
    return -1;
}
static int ffs32(unsigned v) { for (int k = 0; k < 32; k++) if (v >> k & 1) return k + 1; return 0; }

#define PAD 4
#define MAXNT 256
#define MAXBM 128
#define MAXTN 64
typedef struct {
    unsigned wq[4], sq[4];
    float xq[4][4];
    const uint8_t *wrow[4], *srow[4];
    const float *xrow[4];
    float acc[4][4], S[5][4][4];
    int rb, tb;
} thr;
static thr th[MAXNT];
static float Ws[2][32][MAXBM + PAD], Xs[2][32][MAXTN + PAD], lut[16];

static void mxg_tile(int R, int T, int WR, int WT, const uint8_t *codes, const uint8_t *scales, int rows, int cols, const float *x, size_t ldx,
                     const int *xrows, float *y, size_t ldy, const int *yrows, int ntok, int r0, int t0) {
    const int BM = 8 * R * WR, TN = 4 * T * WT, NT = 32 * WR * WT, NWQ = BM * 4 / NT, NXQ = TN * 8 / NT;
    const int nb = cols / 32, aligned = !((uintptr_t)codes & 3), xal = !((uintptr_t)x & 15) && !(ldx & 3);
    (void)aligned, (void)xal; /* the loads' width: the same words */
    for (int tid = 0; tid < NT; tid++) {
        thr *h = &th[tid];
        const int lane = tid & 31, w = tid >> 5;
        h->rb = R * (8 * (w / WT) + (lane >> 2)), h->tb = T * (4 * (w % WT) + (lane & 3));
        if (tid < 16) lut[tid] = mx_values[tid];
        for (int u = 0; u < NWQ; u++) {
            const int idx = tid + u * NT, r = r0 + idx % BM;
            h->wrow[u] = r < rows ? codes + (size_t)r * (cols / 2) + 4 * (idx / BM) : NULL;
            h->srow[u] = r < rows ? scales + (size_t)r * nb : NULL;
        }
        for (int u = 0; u < NXQ; u++) {
            const int idx = tid + u * NT, t = t0 + idx % TN;
            h->xrow[u] = t < ntok ? x + (size_t)(xrows ? xrows[t] : t) * ldx + 4 * (idx / TN) : NULL;
        }
        for (int k = 0; k < 5; k++)
            for (int r = 0; r < R; r++)
                for (int t = 0; t < T; t++) h->S[k][r][t] = 0.0f;
    }
#define LOAD(h, b)                                                                                                     \
    do {                                                                                                               \
        for (int u = 0; u < NWQ; u++) {                                                                                \
            h->wq[u] = 0, h->sq[u] = 0;                                                                                \
            if (!h->wrow[u]) continue;                                                                                 \
            h->wq[u] = word(h->wrow[u] + (size_t)(b) * 16);                                                            \
            h->sq[u] = h->srow[u][b];                                                                                  \
        }                                                                                                              \
        for (int u = 0; u < NXQ; u++) {                                                                                \
            for (int j = 0; j < 4; j++) h->xq[u][j] = 0.0f;                                                            \
            if (!h->xrow[u]) continue;                                                                                 \
            for (int j = 0; j < 4; j++) h->xq[u][j] = h->xrow[u][(size_t)(b) * 32 + j];                                \
        }                                                                                                              \
    } while (0)
#define STORE(h, tid, buf)                                                                                             \
    do {                                                                                                               \
        for (int u = 0; u < NWQ; u++) {                                                                                \
            const int idx = (tid) + u * NT, r = idx % BM, q = idx / BM;                                                \
            const float s = mx_scale(h->sq[u]);                                                                        \
            for (int j = 0; j < 8; j++) Ws[buf][8 * q + j][r] = lut[(h->wq[u] >> (4 * j)) & 15] * s;                    \
        }                                                                                                              \
        for (int u = 0; u < NXQ; u++) {                                                                                \
            const int idx = (tid) + u * NT, t = idx % TN, q = idx / TN;                                                \
            for (int j = 0; j < 4; j++) Xs[buf][4 * q + j][t] = h->xq[u][j];                                           \
        }                                                                                                              \
    } while (0)
    for (int tid = 0; tid < NT; tid++) LOAD((&th[tid]), 0);
    for (int tid = 0; tid < NT; tid++) STORE((&th[tid]), tid, 0);
    int cur = 0;
    for (int i = 0; i < 32; i++) {
        for (int tid = 0; tid < NT; tid++)
            for (int r = 0; r < R; r++)
                for (int t = 0; t < T; t++) th[tid].acc[r][t] = 0.0f;
        for (int b = brev5(i); b < nb; b += 32) {
            const int nx = mxg_next(b, nb);
            for (int tid = 0; tid < NT; tid++) {
                thr *h = &th[tid];
                if (nx >= 0) LOAD(h, nx);
                float d[4][4];
                for (int r = 0; r < R; r++)
                    for (int t = 0; t < T; t++) d[r][t] = 0.0f;
                for (int k = 0; k < 32; k++)
                    for (int r = 0; r < R; r++)
                        for (int t = 0; t < T; t++) d[r][t] = fmaf(Ws[cur][k][h->rb + r], Xs[cur][k][h->tb + t], d[r][t]);
                for (int r = 0; r < R; r++)
                    for (int t = 0; t < T; t++) h->acc[r][t] = h->acc[r][t] + d[r][t];
                if (nx >= 0) STORE(h, tid, cur ^ 1);
            } /* __syncthreads */
            cur ^= 1;
        }
        const int lv = ffs32(~(unsigned)i) - 1;
        for (int tid = 0; tid < NT; tid++) {
            thr *h = &th[tid];
            for (int k = 0; k < 5; k++)
                if (k < lv)
                    for (int r = 0; r < R; r++)
                        for (int t = 0; t < T; t++) h->acc[r][t] = h->S[k][r][t] + h->acc[r][t];
            for (int k = 0; k < 5; k++)
                if (k == lv)
                    for (int r = 0; r < R; r++)
                        for (int t = 0; t < T; t++) h->S[k][r][t] = h->acc[r][t];
        }
    }
    for (int tid = 0; tid < NT; tid++) {
        thr *h = &th[tid];
        for (int t = 0; t < T; t++) {
            const int tt = t0 + h->tb + t;
            if (tt >= ntok) break;
            float *yt = y + (size_t)(yrows ? yrows[tt] : tt) * ldy;
            for (int r = 0; r < R; r++)
                if (r0 + h->rb + r < rows) yt[r0 + h->rb + r] = h->acc[r][t];
        }
    }
#undef LOAD
#undef STORE
}

static void k_mxg(const int *g, const uint8_t *c, const uint8_t *s, int rows, int cols, const float *x, size_t ldx, float *y,
                  size_t ldy, int n) { /* g: R, T, WR, WT */
    const int BM = 8 * g[0] * g[2], TN = 4 * g[1] * g[3];
    for (int bx = 0; bx < (rows + BM - 1) / BM; bx++)
        for (int by = 0; by < (n + TN - 1) / TN; by++)
            mxg_tile(g[0], g[1], g[2], g[3], c, s, rows, cols, x, ldx, NULL, y, ldy, NULL, n, bx * BM, by * TN);
}

/* ---- k_mxg_seg ---- */
typedef struct {
    const void *const *tab;
    const int *off, *tok, *yrows;
    const float *x;
    size_t ldx, ldy;
    float *y[2];
    int rows, cols, E;
} mxg_seg;

static void k_mxg_seg(const int *g, const mxg_seg *S, int gy, int gz) {
    const int R = g[0], T = g[1], WR = g[2], WT = g[3], NT = 32 * WR * WT, TN = 4 * T * WT, per = (S->E + NT - 1) / NT;
    for (int bz = 0; bz < gz; bz++)
        for (int tt = 0; tt < gy; tt++) {
            int found[2] = {-1, 0}, part[8], c[MAXNT], v[MAXNT];
            for (int tid = 0; tid < NT; tid++) {
                const int e0 = tid * per < S->E ? tid * per : S->E, e1 = e0 + per < S->E ? e0 + per : S->E;
                c[tid] = 0;
                for (int e = e0; e < e1; e++) c[tid] += (S->off[e + 1] - S->off[e] + TN - 1) / TN;
                v[tid] = c[tid];
            }
            for (int o = 1; o < 32; o <<= 1) { /* __shfl_up_sync: every lane reads the value before the step */
                int u[MAXNT];
                for (int tid = 0; tid < NT; tid++) u[tid] = (tid & 31) >= o ? v[tid - o] : 0;
                for (int tid = 0; tid < NT; tid++)
                    if ((tid & 31) >= o) v[tid] += u[tid];
            }
            for (int tid = 0; tid < NT; tid++)
                if ((tid & 31) == 31) part[tid >> 5] = v[tid];
            for (int tid = 0; tid < NT; tid++) {
                const int e0 = tid * per < S->E ? tid * per : S->E, e1 = e0 + per < S->E ? e0 + per : S->E;
                int p = v[tid] - c[tid];
                for (int k = 0; k < (tid >> 5); k++) p += part[k];
                for (int e = e0; e < e1; e++) {
                    const int ce = (S->off[e + 1] - S->off[e] + TN - 1) / TN;
                    if (tt >= p && tt < p + ce) found[0] = e, found[1] = tt - p;
                    p += ce;
                }
            }
            const int e = found[0];
            if (e < 0) continue;
            const int o = S->off[e];
            const void *const *m = S->tab + 2 * ((size_t)bz * S->E + e);
            for (int bx = 0; bx < (S->rows + 8 * R * WR - 1) / (8 * R * WR); bx++)
                mxg_tile(R, T, WR, WT, m[0], m[1], S->rows, S->cols, S->tok ? S->x : S->x + (size_t)o * S->ldx, S->ldx,
                         S->tok ? S->tok + o : NULL, S->y[bz] + (S->yrows ? 0 : (size_t)o * S->ldy), S->ldy,
                         S->yrows ? S->yrows + o : NULL, S->off[e + 1] - o, bx * 8 * R * WR, found[1] * TN);
        }
}

/* ---- the cases ---- */
static int fails;
static float frand(void) { return ((float)(rnd() % 200001) - 100000.0f) * 1e-5f; }
static void fill_mat(uint8_t *c, uint8_t *s, int rows, int cols) {
    for (size_t i = 0; i < (size_t)rows * cols / 2; i++) c[i] = (uint8_t)rnd();
    for (size_t i = 0; i < (size_t)rows * cols / 32; i++) s[i] = (uint8_t)(119 + rnd() % 11);
    s[0] = 0; /* 2^-127: subnormal weights */
}
static int same(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * 4); }

#define NCFG 4
static const int cfg[NCFG][4] = {{4, 4, 2, 1}, {4, 4, 4, 2}, {4, 4, 2, 4}, {2, 2, 2, 1}}; /* R, T, WR, WT: cuda_mxfp4.cu's four */

static void check_plain(int rows, int cols, int n, int xoff) {
    const size_t ldx = (size_t)cols + 4 + xoff, ldy = (size_t)rows + 3;
    uint8_t *buf = malloc((size_t)rows * cols / 2 + 3 + (size_t)rows * cols / 32);
    uint8_t *c = buf + (xoff & 3), *s = c + (size_t)rows * cols / 2; /* codes at an odd address too */
    fill_mat(c, s, rows, cols);
    float *xb = malloc(((size_t)n * ldx + 4) * 4), *x = xb + xoff, *y0 = malloc((size_t)n * ldy * 4), *y1 = malloc((size_t)n * ldy * 4);
    for (size_t i = 0; i < (size_t)n * ldx; i++) x[i] = frand();
    for (size_t i = 0; i < (size_t)n * ldy; i++) y0[i] = y1[i] = -77.0f;
    ref_matmul(c, s, rows, cols, x, ldx, y0, ldy, n);
    for (int k = 0; k < NCFG; k++) {
        for (size_t i = 0; i < (size_t)n * ldy; i++) y1[i] = -77.0f;
        k_mxg(cfg[k], c, s, rows, cols, x, ldx, y1, ldy, n);
        if (!same(y0, y1, (size_t)n * ldy)) {
            fails++;
            size_t i = 0;
            while (!memcmp(y0 + i, y1 + i, 4)) i++;
            printf("FAIL %dx%d n=%d tile %dx%d: first difference at token %zu row %zu: %.9g vs %.9g\n", rows, cols, n,
                   8 * cfg[k][0] * cfg[k][2], 4 * cfg[k][1] * cfg[k][3], i / ldy, i % ldy, y0[i], y1[i]);
        }
    }
    printf("ok   %5d x %-5d %3d tokens (x offset %d): k_mxg's four tiles bitwise k_mxfp4\n", rows, cols, n, xoff);
    free(buf), free(xb), free(y0), free(y1);
}

/* E experts of rows x cols, nmat matrices each, n rows of the segment order routed at random (some experts empty) */
static void check_seg(int E, int nmat, int rows, int cols, int n, int gather) {
    const size_t cb = (size_t)rows * cols / 2, sb = (size_t)rows * cols / 32;
    uint8_t *w = malloc((size_t)nmat * E * (cb + sb));
    const void **tab = malloc(sizeof(void *) * 2 * nmat * E);
    for (int z = 0; z < nmat; z++)
        for (int e = 0; e < E; e++) {
            uint8_t *c = w + ((size_t)z * E + e) * (cb + sb);
            fill_mat(c, c + cb, rows, cols);
            tab[2 * (z * E + e)] = c, tab[2 * (z * E + e) + 1] = c + cb;
        }
    int *ex = malloc(sizeof(int) * (n + 1)), *off = calloc((size_t)E + 1, sizeof(int)), *tok = malloc(sizeof(int) * (n + 1)),
        *yr = malloc(sizeof(int) * (n + 1));
    for (int p = 0; p < n; p++) ex[p] = (int)(rnd() % (unsigned)(E > 2 ? E - 1 : E)); /* the last expert empty */
    for (int p = 0; p < n; p++) off[ex[p] + 1]++;
    for (int e = 0; e < E; e++) off[e + 1] += off[e];
    int *cur = malloc(sizeof(int) * E);
    memcpy(cur, off, sizeof(int) * E);
    const int ntok = n / 2 + 1; /* gathered: x rows of ntok tokens */
    for (int p = 0; p < n; p++) {
        const int q = cur[ex[p]]++;
        tok[q] = (int)(rnd() % (unsigned)ntok), yr[q] = p; /* y rows: the unsorted order */
    }
    const size_t ldx = (size_t)cols + 8, ldy = (size_t)rows + 1;
    const int nx = gather ? ntok : n;
    float *x = malloc((size_t)nx * ldx * 4), *y0[2], *y1[2];
    for (size_t i = 0; i < (size_t)nx * ldx; i++) x[i] = frand();
    for (int z = 0; z < 2; z++) {
        y0[z] = malloc((size_t)n * ldy * 4), y1[z] = malloc((size_t)n * ldy * 4);
        for (size_t i = 0; i < (size_t)n * ldy; i++) y0[z][i] = -77.0f;
    }
    /* the reference: per expert, its rows gathered into a run, one slcu_matmul_mxfp4 (k_mxfp4) call, scattered back */
    float *xr = malloc((size_t)(n + 1) * ldx * 4), *yrun = malloc((size_t)(n + 1) * rows * 4);
    for (int z = 0; z < nmat; z++)
        for (int e = 0; e < E; e++) {
            const int o = off[e], cnt = off[e + 1] - o;
            if (!cnt) continue;
            for (int q = 0; q < cnt; q++) memcpy(xr + (size_t)q * ldx, x + (size_t)(gather ? tok[o + q] : o + q) * ldx, (size_t)cols * 4);
            ref_matmul(tab[2 * (z * E + e)], tab[2 * (z * E + e) + 1], rows, cols, xr, ldx, yrun, (size_t)rows, cnt);
            for (int q = 0; q < cnt; q++) memcpy(y0[z] + (size_t)(gather ? yr[o + q] : o + q) * ldy, yrun + (size_t)q * rows, (size_t)rows * 4);
        }
    for (int k = 0; k < NCFG; k++) {
        for (int z = 0; z < 2; z++)
            for (size_t i = 0; i < (size_t)n * ldy; i++) y1[z][i] = -77.0f;
        const mxg_seg S = {(const void *const *)tab, off, gather ? tok : NULL, gather ? yr : NULL, x, ldx, ldy, {y1[0], y1[1]}, rows, cols, E};
        const int TN = 4 * cfg[k][1] * cfg[k][3];
        k_mxg_seg(cfg[k], &S, (n + TN - 1) / TN + (E < n ? E : n), nmat);
        for (int z = 0; z < nmat; z++)
            if (!same(y0[z], y1[z], (size_t)n * ldy)) {
                fails++;
                printf("FAIL segments E %d, %d rows of %dx%d, matrix %d, tile %dx%d\n", E, n, rows, cols, z, 8 * cfg[k][0] * cfg[k][2], TN);
            }
    }
    printf("ok   segments: %3d experts x %d matrices of %4d x %-4d, %3d rows%s: bitwise the per-expert calls\n", E, nmat, rows,
           cols, n, gather ? " (gathered x, scattered y)" : "");
    free(w), free(tab), free(ex), free(off), free(tok), free(yr), free(cur), free(x), free(xr), free(yrun);
    for (int z = 0; z < 2; z++) free(y0[z]), free(y1[z]);
}

int main(int argc, char **argv) {
    const int big = argc > 1 && !strcmp(argv[1], "--big"); /* 2880 x 2880 and 5760 x 2880 at more tokens (slow) */
    check_plain(100, 96, 1, 0), check_plain(100, 96, 9, 1), check_plain(100, 96, 33, 0);
    check_plain(70, 32, 17, 0), check_plain(129, 64, 8, 2), check_plain(64, 1024, 20, 0), check_plain(33, 1056, 65, 3);
    check_plain(1, 2880, 5, 1), check_plain(200, 5760, 40, 0);
    check_plain(2880, 2880, big ? 100 : 9, 0);
    check_plain(5760, 2880, big ? 33 : 3, 1);
    check_seg(5, 1, 100, 96, 40, 1), check_seg(5, 2, 70, 64, 40, 0), check_seg(37, 1, 64, 2880, 100, 1);
    check_seg(300, 2, 33, 32, 200, 1); /* more experts than a CTA's threads (runs of 2) */
    printf("%s: %d failure%s\n", fails ? "FAIL" : "PASS", fails, fails == 1 ? "" : "s");
    return fails ? 1 : 0;
}
