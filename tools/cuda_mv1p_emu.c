/*
 * cuda_mv1p_emu.c — a CPU emulation of src/backend/cuda/cuda_mv1p.cu mv1p_i8, for changes made without a GPU: every
 * CTA of a grid walks its run of tiles unit by unit as the kernel does (the same index arithmetic, transcribed): the
 * issue of unit u + 2 into stage (u + 2) % 3 (its codes, the 16-byte pieces of each row's scale and bias runs and their
 * offsets, the activation blocks; P = 2 or 4 pairs a thread), the compute of unit u's pairs into the staging, then the fold, in the order the
 * kernel's barriers give (a cp.async is emulated as a copy at its issue: the stage it fills is read by nobody until
 * unit u + 2's barrier). A SwiGLU job's room is filled from the job's int8 activation in windows of SGB blocks (the
 * kernel makes those values with swi_stage, cuda_mv.cuh; the windows are what is emulated). Checked: each row's y
 * bitwise the canonical chains computed directly (cuda.h), every stage and staged value read is the unit's (a tag), and
 * every 16-byte piece of a run holds a byte of its word array (so lies in the array's allocation).
 * Build and run: cc -O2 -std=c11 -o /tmp/mv1p_emu tools/cuda_mv1p_emu.c -lm && /tmp/mv1p_emu
 * (prints a line every so many cases and "emu: N cases, F failures"; exit 1 on a failure).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_emu.h"

enum { NTH = 256, S = 3, SGBMIN = 64 };

typedef struct { /* one job: the kernel's ijob fields it reads (one token, activation row 0) */
    const uint8_t *codes, *scales, *biases;
    const uint8_t *sbeg, *send, *bbeg, *bend; /* the scale and bias arrays */
    const int8_t *xq;
    const float *d, *s;
    float *y;
    int nrows, cols, group, tile0, sg;
} job;

static int fails, stale;

static float sh_sw(const uint8_t *p, int sdt) { return elem(p, sdt, 0); } /* cuda_mv1p.cu sh_sw */

static int job_of(const job *J, int nj, int t) { /* mv1p_job */
    int k = 0;
    while (k + 1 < nj && t >= J[k + 1].tile0) k++;
    return k;
}
static void next_unit(const job *J, int nj, int KC, int *jk, int *t, int *kb0) { /* mv1p_next */
    *kb0 += KC;
    if (*kb0 >= J[*jk].cols / 32) {
        *kb0 = 0, (*t)++;
        while (*jk + 1 < nj && *t >= J[*jk + 1].tile0) (*jk)++;
    }
}

/* mv1p_i8<DT, SDT, R, P, IB> on a grid of G CTAs over the jobs */
static void run_grid(int DT, int SDT, int R, int P, int IB, const job *J, int nj, int G) {
    const int NP = NTH * P, KC = NP / R, SGB = KC > SGBMIN ? KC : SGBMIN, LD = R + 1, BB = DT == Q4 ? 16 : 32, SSZ = SDT == F32 ? 4 : 2;
    const int RS = NTH / KC, MAXPC = (KC * SSZ + 30) / 16, SSL = 16 * MAXPC;
    const int O_SC = NP * BB, O_BI = O_SC + R * SSL, O_SX = O_BI + (IB ? 0 : R * SSL), O_SD = O_SX + KC * 32;
    const int O_SXG = O_SD + KC * 4, O_OFF = O_SXG + KC * 4, STG = (O_OFF + 2 * R + 15) / 16 * 16;
    uint8_t *sta = aligned_alloc(16, (size_t)S * STG), *sgx = aligned_alloc(16, (size_t)SGB * 32);
    float *sI = malloc((size_t)KC * LD * 4), *sM = malloc((size_t)KC * LD * 4), *sB = malloc((size_t)KC * LD * 4);
    float *sgd = malloc((size_t)SGB * 4), *sgxg = malloc((size_t)SGB * 4);
    int *tI = malloc((size_t)KC * LD * 4), *tB = malloc((size_t)KC * LD * 4), tag[S];
    const int T = J[nj - 1].tile0 + (J[nj - 1].nrows + R - 1) / R;
    for (int cta = 0; cta < G; cta++) {
        const int t1 = (int)((long long)(cta + 1) * T / G);
        int it = (int)((long long)cta * T / G), ijk = job_of(J, nj, it), ikb = 0, ct = it, cjk = ijk, ckb = 0, iu = 0;
        if (it >= t1) continue;
        for (int i = 0; i < S; i++) tag[i] = -1;
        for (int i = 0; i < KC * LD; i++) tI[i] = tB[i] = -1;
#define ISSUE(s_)                                                                                                          \
    do {                                                                                                                   \
        const job *j = &J[ijk];                                                                                            \
        uint8_t *st = sta + (size_t)(s_) * STG;                                                                            \
        const int cols = j->cols, nb = cols / 32, ng = nb >> (j->group == 32 ? 0 : j->group == 64 ? 1 : 2), rb = DT == Q4 ? cols / 2 : cols; \
        const int gshift = j->group == 32 ? 0 : j->group == 64 ? 1 : 2, r0 = (it - j->tile0) * R;                          \
        const int nr = R < j->nrows - r0 ? R : j->nrows - r0, kcn = KC < nb - ikb ? KC : nb - ikb;                       \
        const int ns = nb + nb / 2 + nb / 4, soff = j->group == 32 ? 0 : j->group == 64 ? nb : nb + nb / 2;             \
        tag[s_] = iu++;                                                                                                    \
        const uint8_t *cb = j->codes + (size_t)r0 * rb + (size_t)ikb * BB;                                                 \
        for (int tid = 0; tid < NTH; tid++)                                                                                \
            for (int k = 0; k < P; k++) {                                                                                  \
                const int rl = tid / KC + k * RS, bl = tid % KC;                                                           \
                if (rl < nr && bl < kcn) memcpy(st + (rl * KC + bl) * BB, cb + (rl * rb + bl * BB), (size_t)BB);          \
            }                                                                                                              \
        const size_t e0 = (size_t)r0 * ng + (size_t)(ikb >> gshift);                                                      \
        const int len = (kcn >> gshift) * SSZ;                                                                             \
        for (int i = 0; i < (IB ? 1 : 2) * R * MAXPC; i++) {                                                               \
            const int wh = i >= R * MAXPC, ii = i - wh * R * MAXPC, rl = ii / MAXPC, p = ii - rl * MAXPC;                  \
            if (rl >= nr) continue;                                                                                        \
            const uintptr_t a = (uintptr_t)(wh ? j->biases : j->scales) + (e0 + (size_t)rl * ng) * SSZ, a0 = a & ~(uintptr_t)15; \
            if (a0 + 16 * p < a + len) {                                                                                   \
                const uint8_t *pc = (const uint8_t *)(a0 + 16 * p), *beg = wh ? j->bbeg : j->sbeg, *end = wh ? j->bend : j->send; \
                if (pc + 16 <= beg || pc >= end || 16 * p + 16 > SSL) fails++, printf("  a piece outside its run's array or slot\n"); \
                memcpy(st + (wh ? O_BI : O_SC) + rl * SSL + 16 * p, pc, 16);                                               \
            }                                                                                                              \
            if (!p) st[O_OFF + wh * R + rl] = (uint8_t)(a & 15);                                                           \
        }                                                                                                                  \
        if (!j->sg) {                                                                                                      \
            memcpy(st + O_SX, j->xq + (size_t)ikb * 32, (size_t)32 * kcn);                                                 \
            memcpy(st + O_SD, j->d + ikb, (size_t)4 * kcn);                                                                \
            memcpy(st + O_SXG, j->s + soff + (ikb >> gshift), (size_t)4 * (kcn >> gshift));                                \
            (void)ns;                                                                                                      \
        }                                                                                                                  \
    } while (0)
        ISSUE(0);
        next_unit(J, nj, KC, &ijk, &it, &ikb);
        if (it < t1) ISSUE(1);
        else iu++;
        next_unit(J, nj, KC, &ijk, &it, &ikb);
        float acc[32] = {0}, accb[32] = {0}; /* R <= 32 */
        int sgk = -1, sg0 = 0;
        for (int u = 0; ct < t1; u++) {
            if (it < t1) ISSUE((u + 2) % S);
            else iu++;
            next_unit(J, nj, KC, &ijk, &it, &ikb);
            const job *j = &J[cjk];
            const uint8_t *st = sta + (size_t)(u % S) * STG;
            if (tag[u % S] != u) stale++;
            const int nb = j->cols / 32, r0 = (ct - j->tile0) * R, nr = R < j->nrows - r0 ? R : j->nrows - r0;
            const int kcn = KC < nb - ckb ? KC : nb - ckb, gshift = j->group == 32 ? 0 : j->group == 64 ? 1 : 2, bmask = j->group / 32 - 1;
            const int soff = j->group == 32 ? 0 : j->group == 64 ? nb : nb + nb / 2;
            if (j->sg && (cjk != sgk || ckb < sg0 || ckb >= sg0 + SGB)) { /* swi_stage's window */
                sgk = cjk, sg0 = ckb - ckb % SGB;
                const int n = SGB < nb - sg0 ? SGB : nb - sg0;
                memcpy(sgx, j->xq + (size_t)sg0 * 32, (size_t)32 * n);
                memcpy(sgd, j->d + sg0, (size_t)4 * n);
                for (int i = 0; i < (n >> gshift); i++) sgxg[i] = j->s[soff + (sg0 >> gshift) + i];
            }
            const u4 *ax = j->sg ? (const u4 *)sgx + 2 * (ckb - sg0) : (const u4 *)(st + O_SX);
            const float *ad = j->sg ? sgd + (ckb - sg0) : (const float *)(st + O_SD);
            const float *axg = j->sg ? sgxg + ((ckb - sg0) >> gshift) : (const float *)(st + O_SXG);
            for (int tid = 0; tid < NTH; tid++) {
                const int bl = tid % KC, rl0 = tid / KC;
                if (bl >= kcn) continue;
                const u4 x0 = ax[2 * bl], x1 = ax[2 * bl + 1];
                const float db = ad[bl];
                for (int k = 0; k < P; k++) {
                    const int rl = rl0 + k * RS;
                    if (rl >= nr) continue;
                    u4 w0, w1;
                    memcpy(&w0, st + (rl * KC + bl) * BB, 16), memcpy(&w1, st + (rl * KC + bl) * BB + (DT == Q8 ? 16 : 0), 16);
                    const int I = dot_block(DT, w0, w1, x0, x1), go = (bl >> gshift) * SSZ;
                    const float sv = sh_sw(st + O_SC + rl * SSL + st[O_OFF + rl] + go, SDT);
                    sI[bl * LD + rl] = (float)I, sM[bl * LD + rl] = sv * db, tI[bl * LD + rl] = u;
                    if (!(bl & bmask))
                        sB[(bl >> gshift) * LD + rl] = IB ? zbias(DT, sv) : sh_sw(st + O_BI + rl * SSL + st[O_OFF + R + rl] + go, SDT),
                                               tB[(bl >> gshift) * LD + rl] = u;
                }
            }
            for (int tid = 0; tid < nr; tid++) { /* fold_chunk */
                for (int bl = 0; bl < kcn; bl++) {
                    if (tI[bl * LD + tid] != u) stale++;
                    acc[tid] = fmaf(sI[bl * LD + tid], sM[bl * LD + tid], acc[tid]);
                    if (!(bl & bmask)) {
                        if (tB[(bl >> gshift) * LD + tid] != u) stale++;
                        accb[tid] = fmaf(sB[(bl >> gshift) * LD + tid], axg[bl >> gshift], accb[tid]);
                    }
                }
                if (ckb + KC >= nb) j->y[r0 + tid] = acc[tid] + accb[tid], acc[tid] = accb[tid] = 0.f;
            }
            next_unit(J, nj, KC, &cjk, &ct, &ckb);
        }
#undef ISSUE
    }
    free(sta), free(sgx), free(sI), free(sM), free(sB), free(sgd), free(sgxg), free(tI), free(tB);
}

/* one case: three jobs of one shape in a launch (the second a SwiGLU job when sg), R rows a tile, G CTAs (0: one a
 * tile); returns 1 when it failed */
static int run_case(int DT, int SDT, int R, int P, int G, int group, int cols, int rows, int ib, int sg) {
    enum { NJ = 3 };
    const int nb = cols / 32, ng = cols / group, ns = nb + nb / 2 + nb / 4, rb = DT == Q4 ? cols / 2 : cols;
    const int ssz = SDT == F32 ? 4 : 2;
    job jobs[NJ];
    void *mem[NJ][6];
    int tiles = 0;
    for (int q = 0; q < NJ; q++) {
        uint8_t *codes = aligned_alloc(16, ((size_t)rows * rb + 31) / 16 * 16);
        uint8_t *sc = aligned_alloc(16, ((size_t)rows * ng * ssz + 64) / 16 * 16), *bi = aligned_alloc(16, ((size_t)rows * ng * ssz + 64) / 16 * 16);
        int8_t *xq = malloc((size_t)cols);
        float *d = malloc((size_t)nb * 4), *s = malloc((size_t)ns * 4), *y = malloc((size_t)rows * 4);
        rand_inputs(codes, (size_t)rows * rb, xq, d, s, 1, cols, nb, ns);
        const int off = 16 + (q == 1 ? 0 : ssz); /* words at an offset that is not 16-aligned (job 1: aligned) */
        uint8_t *scp = sc + off, *bip = bi + off;
        rand_words(DT, SDT, ib, scp, bip, (size_t)rows * ng);
        for (int i = 0; i < rows; i++) y[i] = NAN;
        const size_t wb = (size_t)rows * ng * ssz;
        jobs[q] = (job){codes, scp, bip, scp, scp + wb, bip, bip + wb, xq, d, s, y, rows, cols, group, tiles, sg && q == 1};
        tiles += (rows + R - 1) / R;
        mem[q][0] = codes, mem[q][1] = sc, mem[q][2] = bi, mem[q][3] = xq, mem[q][4] = d, mem[q][5] = s;
    }
    const int f0 = fails, st0 = stale;
    run_grid(DT, SDT, R, P, ib, jobs, NJ, G ? (G < tiles ? G : tiles) : tiles);
    int bad = 0;
    for (int q = 0; q < NJ; q++)
        for (int r = 0; r < rows; r++) {
            const job *j = &jobs[q];
            const float a = j->y[r], b = ref_row(DT, SDT, j->codes, j->scales, j->biases, j->xq, j->d, j->s, cols, group, r);
            if (memcmp(&a, &b, 4)) bad++;
        }
    fails += bad + (stale != st0);
    const int failed = fails != f0;
    static int shown;
    if (failed || shown++ % 97 == 0)
        printf("%s %s %-4s R %2d P %d G %3d group %3d %4d x %-4d%s%s: %d outputs differ, %d stale reads\n", failed ? "FAIL" : "ok  ",
               DT == Q4 ? "q4" : "q8", SDT == F32 ? "f32" : SDT == BF16 ? "bf16" : "f16", R, P, G, group, rows, cols,
               ib ? " implied biases" : "", sg ? " sg" : "", bad, stale - st0);
    for (int q = 0; q < NJ; q++) {
        for (int m = 0; m < 6; m++) free(mem[q][m]);
        free(jobs[q].y);
    }
    return failed;
}

int main(void) {
    const int dts[2] = {Q4, Q8}, sdts[3] = {F32, BF16, F16}, rs[4] = {4, 8, 16, 32}, groups[3] = {32, 64, 128};
    const int colss[6] = {96, 160, 768, 2048, 4096, 8192}, rowss[3] = {1, 33, 300}, gs[4] = {0, 1, 3, 7};
    int cases = 0;
    for (int c = 0; c < 2 * 3 * 4 * 3 * 6 * 3 * 4; c++) {
        int k = c;
        const int DT = dts[k % 2]; k /= 2;
        const int SDT = sdts[k % 3]; k /= 3;
        const int R = rs[k % 4]; k /= 4;
        const int group = groups[k % 3]; k /= 3;
        const int cols = colss[k % 6]; k /= 6;
        const int rows = rowss[k % 3]; k /= 3;
        const int G = gs[k % 4];
        if (cols % group) continue;
        for (int v = 0; v < (DT == Q4 ? 8 : 4); v++) run_case(DT, SDT, R, v & 4 ? 4 : 2, G, group, cols, rows, v & 1, v >> 1 & 1), cases++;
    }
    printf("emu: %d cases, %d failures\n", cases, fails);
    return fails ? 1 : 0;
}
