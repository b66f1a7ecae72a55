/*
 * cuda_mv1d_emu.c — a CPU emulation of src/backend/cuda/cuda_mv1d.cu mv1d_i8's indexing, for changes made without a
 * GPU: every CTA, warp, chunk, slot and lane of the kernel run in turn with the kernel's index arithmetic (the same
 * expressions, transcribed), the q8 halves' shuffle, the per-warp staging and fold_chunk, on random q4 / q8 rows with
 * 16-bit and 32-bit scale words at an odd 2-byte offset; each row's result is compared bitwise with the canonical
 * chains computed directly (cuda.h), and every staged value the fold reads must have been written in its chunk.
 * mvnd_i8 (2-8 tokens) likewise, its launches holding jobs of 1, NT and 2 tokens. Every case also with implied biases
 * (SLUICE_CUDA_IBIAS=1, the kernels' IB = 1): the words written as z times the scale (z = -8 q4, -128 q8), the jobs'
 * biases NULL so the kernels compute them (cuda_i8.cuh zbias), the reference reading the words.
 * Build and run: cc -O2 -std=c11 -o /tmp/mv1d_emu tools/cuda_mv1d_emu.c -lm && /tmp/mv1d_emu
 * (prints one line a case and "emu: N cases, F failures"; exit 1 on a failure).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_emu.h"

enum { WARPS = 4, KP = 8 };

static int dot_half(u4 w, u4 x) { return dp4a_us(w.w, x.w, dp4a_us(w.z, x.z, dp4a_us(w.y, x.y, dp4a_us(w.x, x.x, 0)))); }

static unsigned ld_sw(const uint8_t *p, int sdt, size_t i) { /* cuda_i8.cuh ld_sw: the aligned word holding element i */
    const uintptr_t a = sdt == F32 ? (uintptr_t)(p + 4 * i) : (uintptr_t)(p + 2 * i);
    unsigned w;
    memcpy(&w, (const void *)(a & ~(uintptr_t)3), 4);
    return w;
}
static float cv_sw(unsigned w, const uint8_t *p, int sdt, size_t i) { /* cuda_i8.cuh cv_sw */
    float f;
    if (sdt == F32) { memcpy(&f, &w, 4); return f; }
    const unsigned h = ((uintptr_t)(p + 2 * i) & 2) ? w >> 16 : w & 0xffffu;
    if (sdt == BF16) { const unsigned u = h << 16; memcpy(&f, &u, 4); return f; }
    return h2f((uint16_t)h);
}

typedef struct { /* one job: the kernel's ijob fields it reads (activation rows t < n_tok: token t) */
    const uint8_t *codes, *scales, *biases;
    const int8_t *xq;
    const float *d, *s;
    float *y;
    int nrows, cols, group, tile0, n_tok, ldy;
} job;

static int fails, stale;

/* cuda_mv1d.cu fold_chunk */
static void fold_chunk(const float *si, const float *sm, const float *sb, int ld, const float *xg, int kcn, int bmask, int gshift,
                       float *acc, float *accb, const int *stI, const int *stB, int chunk) {
    for (int bl = 0; bl < kcn; bl++) {
        if (stI[bl * ld] != chunk) stale++;
        *acc = fmaf(si[bl * ld], sm[bl * ld], *acc);
        if (!(bl & bmask)) {
            if (stB[(bl >> gshift) * ld] != chunk) stale++;
            *accb = fmaf(sb[(bl >> gshift) * ld], xg[bl >> gshift], *accb);
        }
    }
}

/* issue(pb0) of a warp whose rows are the job's wr0 .. wr0 + nrw - 1: each lane's kp units of the chunk's pairs from
 * pb0 (PPR pairs a row, PB a block) loaded into its registers as the kernel loads them, the codes (cw) and the scale and
 * bias words of the pairs that start a block (sw, bw; cuda_i8.cuh ld_sw) */
static void issue(const job *j, int SDT, int PB, int PPR, int kp, int wr0, int nrw, int pb0, u4 cw[32][KP], unsigned sw[32][KP],
                  unsigned bw[32][KP]) {
    const int nb = j->cols / 32, np = nb * PB, ng = j->cols / j->group, bmask = j->group / 32 - 1;
    const int gshift = j->group == 32 ? 0 : j->group == 64 ? 1 : 2;
    const u4 *wc = (const u4 *)j->codes + (size_t)wr0 * np;
    for (int lane = 0; lane < 32; lane++)
        for (int u = 0; u < kp; u++) {
            const int rl = 32 * u / PPR, p = pb0 + 32 * u % PPR + lane, b = p >> (PB - 1);
            if (rl < nrw && p < np) {
                if (wr0 + rl >= j->nrows || p >= np) fails++, printf("  load out of range\n");
                cw[lane][u] = wc[(size_t)rl * np + p];
                if (PB == 1 || !(p & 1)) {
                    const size_t e = (size_t)(wr0 + rl) * ng + (size_t)(b >> gshift);
                    sw[lane][u] = ld_sw(j->scales, SDT, e);
                    if (!(b & bmask) && j->biases) bw[lane][u] = ld_sw(j->biases, SDT, e);
                }
            }
        }
}

/* mv1d_i8<DT, SDT, WR> for CTA `cta` of the jobs: the kernel's body, lanes and warps in turn */
static void run_cta(int DT, int SDT, int WR, const job *jobs, int nj, int cta) {
    const int PB = DT == Q4 ? 1 : 2, PPR = 32 * KP / WR, KB = PPR / PB, LDW = WR % 2 ? WR : WR + 1;
    int jk = 0;
    while (jk + 1 < nj && cta >= jobs[jk + 1].tile0) jk++; /* find_job */
    const job j = jobs[jk];
    const int cols = j.cols, nb = cols / 32, np = nb * PB, ng = cols / j.group, ns = nb + nb / 2 + nb / 4;
    const int gshift = j.group == 32 ? 0 : j.group == 64 ? 1 : 2, soff = j.group == 32 ? 0 : j.group == 64 ? nb : nb + nb / 2;
    const int bmask = j.group / 32 - 1;
    /* the staged activation (non-sg: x codes, d, group sums) */
    u4 *sx = malloc((size_t)cols);
    float *sd = malloc((size_t)nb * 4), *sxg = malloc((size_t)nb * 4);
    memcpy(sx, j.xq, (size_t)cols);
    memcpy(sd, j.d, (size_t)nb * 4);
    for (int i = 0; i < ng; i++) sxg[i] = j.s[ns * 0 + soff + i];
    float *sI = malloc((size_t)KB * LDW * 4), *sM = malloc((size_t)KB * LDW * 4), *sB = malloc((size_t)KB * LDW * 4);
    int *stI = malloc((size_t)KB * LDW * 4), *stB = malloc((size_t)KB * LDW * 4);
    for (int w = 0; w < WARPS; w++) {
        const int wr0 = (cta - j.tile0) * (WARPS * WR) + w * WR, nrw = WR < j.nrows - wr0 ? WR : j.nrows - wr0;
        if (nrw <= 0) continue;
        for (int i = 0; i < KB * LDW; i++) stI[i] = stB[i] = -1;
        float acc[32] = {0}, accb[32] = {0};
        u4 cw[32][KP];
        unsigned sw[32][KP], bw[32][KP];
        int chunk = 0;
        for (int pb0 = 0; pb0 < np; pb0 += PPR, chunk++) {
            /* (the kernel issues chunk 0 before the staging and the next chunk after this one's compute) */
            issue(&j, SDT, PB, PPR, KP, wr0, nrw, pb0, cw, sw, bw);
            const int kb0 = pb0 / PB, kcn = KB < nb - kb0 ? KB : nb - kb0;
            for (int u = 0; u < KP; u++) {
                int h[33];
                for (int lane = 0; lane < 32; lane++) { /* q8: the halves, before the shuffle */
                    const int rl = 32 * u / PPR, p = pb0 + 32 * u % PPR + lane, ok = rl < nrw && p < np;
                    h[lane] = DT == Q8 && ok ? dot_half(cw[lane][u], sx[p]) : 0;
                }
                h[32] = h[31]; /* __shfl_down_sync past the last lane: its own value */
                for (int lane = 0; lane < 32; lane++) {
                    const int rl = 32 * u / PPR, p = pb0 + 32 * u % PPR + lane, b = p >> (PB - 1), ok = rl < nrw && p < np;
                    int I;
                    if (DT == Q4) I = ok ? dot_block(Q4, cw[lane][u], cw[lane][u], sx[2 * b], sx[2 * b + 1]) : 0;
                    else I = h[lane] + h[lane + 1 < 32 ? lane + 1 : 32];
                    if (ok && (PB == 1 || !(p & 1))) {
                        const int bl = b - kb0, i = bl * LDW + rl;
                        if (bl < 0 || bl >= kcn || rl >= WR || i >= KB * LDW) fails++, printf("  staging index out of range\n");
                        const size_t e = (size_t)(wr0 + rl) * ng + (size_t)(b >> gshift);
                        sI[i] = (float)I, stI[i] = chunk;
                        const float sv = cv_sw(sw[lane][u], j.scales, SDT, e);
                        sM[i] = sv * sd[b];
                        if (!(b & bmask))
                            sB[(bl >> gshift) * LDW + rl] = j.biases ? cv_sw(bw[lane][u], j.biases, SDT, e) : zbias(DT, sv),
                                                       stB[(bl >> gshift) * LDW + rl] = chunk;
                    }
                }
            }
            for (int lane = 0; lane < nrw; lane++)
                fold_chunk(sI + lane, sM + lane, sB + lane, LDW, sxg + (kb0 >> gshift), kcn, bmask, gshift, &acc[lane], &accb[lane],
                           stI + lane, stB + lane, chunk);
        }
        for (int lane = 0; lane < nrw; lane++) j.y[wr0 + lane] = acc[lane] + accb[lane];
    }
    free(sx), free(sd), free(sxg), free(sI), free(sM), free(sB), free(stI), free(stB);
}

/* mvnd_i8<DT, SDT, NT> for CTA `cta` (cuda_mv1d.cu): WR 4, each job's nt tokens, the token-strided staging */
static void run_cta_n(int DT, int SDT, int NT, const job *jobs, int nj, int cta) {
    const int WR = 4, KPn = NT <= 2 ? 8 : 4, PB = DT == Q4 ? 1 : 2, PPR = 32 * KPn / WR, KB = PPR / PB, LDW = WR + 1;
    const int TS = (KB * LDW + 31) / 32 * 32 + 4;
    int jk = 0;
    while (jk + 1 < nj && cta >= jobs[jk + 1].tile0) jk++;
    const job j = jobs[jk];
    const int cols = j.cols, nb = cols / 32, np = nb * PB, ng = cols / j.group, ns = nb + nb / 2 + nb / 4, ds = nb + 1;
    const int gshift = j.group == 32 ? 0 : j.group == 64 ? 1 : 2, soff = j.group == 32 ? 0 : j.group == 64 ? nb : nb + nb / 2;
    const int bmask = j.group / 32 - 1, nt = NT < j.n_tok ? NT : j.n_tok;
    u4 *sx = malloc((size_t)NT * cols);
    float *sd = malloc((size_t)NT * ds * 4), *sxg = malloc((size_t)NT * ds * 4);
    for (int t = 0; t < nt; t++) {
        memcpy((uint8_t *)sx + (size_t)t * cols, j.xq + (size_t)t * cols, (size_t)cols);
        for (int i = 0; i < nb; i++) sd[t * ds + i] = j.d[(size_t)t * nb + i];
        for (int i = 0; i < ng; i++) sxg[t * ds + i] = j.s[(size_t)t * ns + soff + i];
    }
    float *sI = malloc((size_t)NT * TS * 4), *sS = malloc((size_t)KB * LDW * 4), *sB = malloc((size_t)KB * LDW * 4);
    int *stI = malloc((size_t)NT * TS * 4), *stS = malloc((size_t)KB * LDW * 4), *stB = malloc((size_t)KB * LDW * 4);
    for (int w = 0; w < WARPS; w++) {
        const int wr0 = (cta - j.tile0) * (WARPS * WR) + w * WR, nrw = WR < j.nrows - wr0 ? WR : j.nrows - wr0;
        if (nrw <= 0) continue;
        for (int i = 0; i < NT * TS; i++) stI[i] = -1;
        for (int i = 0; i < KB * LDW; i++) stS[i] = stB[i] = -1;
        float acc[32] = {0}, accb[32] = {0};
        u4 cw[32][KP];
        unsigned sw[32][KP], bw[32][KP];
        int chunk = 0;
        for (int pb0 = 0; pb0 < np; pb0 += PPR, chunk++) {
            issue(&j, SDT, PB, PPR, KPn, wr0, nrw, pb0, cw, sw, bw);
            const int kb0 = pb0 / PB, kcn = KB < nb - kb0 ? KB : nb - kb0;
            for (int u = 0; u < KPn; u++) {
                for (int t = 0; t < NT; t++) {
                    if (t >= nt) break;
                    const u4 *xt = sx + (size_t)t * (cols / 16);
                    int h[33];
                    for (int lane = 0; lane < 32; lane++) {
                        const int rl = 32 * u / PPR, p = pb0 + 32 * u % PPR + lane, ok = rl < nrw && p < np;
                        h[lane] = DT == Q8 && ok ? dot_half(cw[lane][u], xt[p]) : 0;
                    }
                    h[32] = h[31];
                    for (int lane = 0; lane < 32; lane++) {
                        const int rl = 32 * u / PPR, p = pb0 + 32 * u % PPR + lane, b = p >> (PB - 1), ok = rl < nrw && p < np;
                        const int st = ok && (PB == 1 || !(p & 1)), i = (b - kb0) * LDW + rl;
                        int I;
                        if (DT == Q4) I = ok ? dot_block(Q4, cw[lane][u], cw[lane][u], xt[2 * b], xt[2 * b + 1]) : 0;
                        else I = h[lane] + h[lane + 1 < 32 ? lane + 1 : 32];
                        if (st) {
                            if (i < 0 || i >= KB * LDW || t * TS + i >= NT * TS) fails++, printf("  staging index out of range\n");
                            sI[t * TS + i] = (float)I, stI[t * TS + i] = chunk;
                        }
                    }
                }
                for (int lane = 0; lane < 32; lane++) {
                    const int rl = 32 * u / PPR, p = pb0 + 32 * u % PPR + lane, b = p >> (PB - 1), ok = rl < nrw && p < np;
                    const int st = ok && (PB == 1 || !(p & 1)), i = (b - kb0) * LDW + rl;
                    if (st) {
                        const size_t e = (size_t)(wr0 + rl) * ng + (size_t)(b >> gshift);
                        sS[i] = cv_sw(sw[lane][u], j.scales, SDT, e), stS[i] = chunk;
                        if (!(b & bmask)) sB[((b - kb0) >> gshift) * LDW + rl] = j.biases ? cv_sw(bw[lane][u], j.biases, SDT, e) : zbias(DT, sS[i]),
                                          stB[((b - kb0) >> gshift) * LDW + rl] = chunk;
                    }
                }
            }
            for (int lane = 0; lane < 32; lane++) { /* fold_chunk_d */
                const int ft = lane / WR, fr = lane % WR;
                if (!(ft < nt && fr < nrw)) continue;
                const float *si = sI + ft * TS + fr, *ss = sS + fr, *sb = sB + fr, *d = sd + ft * ds + kb0, *xg = sxg + ft * ds + (kb0 >> gshift);
                for (int bl = 0; bl < kcn; bl++) {
                    if (stI[ft * TS + fr + bl * LDW] != chunk || stS[fr + bl * LDW] != chunk) stale++;
                    acc[lane] = fmaf(si[bl * LDW], ss[bl * LDW] * d[bl], acc[lane]);
                    if (!(bl & bmask)) {
                        if (stB[fr + (bl >> gshift) * LDW] != chunk) stale++;
                        accb[lane] = fmaf(sb[(bl >> gshift) * LDW], xg[bl >> gshift], accb[lane]);
                    }
                }
            }
        }
        for (int lane = 0; lane < 32; lane++) {
            const int ft = lane / WR, fr = lane % WR;
            if (ft < nt && fr < nrw) j.y[(size_t)ft * j.ldy + wr0 + fr] = acc[lane] + accb[lane];
        }
    }
    free(sx), free(sd), free(sxg), free(sI), free(sS), free(sB), free(stI), free(stS), free(stB);
}

/* one case: three jobs of one shape in a launch (find_job, tile0), mv1d_i8 with WR rows a warp (NT 0) or mvnd_i8 for
 * NT tokens (the jobs with 1, NT and 2 tokens), against ref_row; returns 1 when it failed */
static int run_case(int DT, int SDT, int WR, int NT, int group, int cols, int rows, int ib) {
    enum { NJ = 3 };
    const int nb = cols / 32, ng = cols / group, ns = nb + nb / 2 + nb / 4, rb = DT == Q4 ? cols / 2 : cols;
    const int ssz = SDT == F32 ? 4 : 2, R = WARPS * (NT ? 4 : WR), ntoks[NJ] = {1, NT ? NT : 1, NT ? 2 : 1};
    job jobs[NJ];
    void *mem[NJ][6];
    const uint8_t *bis[NJ]; /* the bias words, for the reference when the kernel's jobs have none (ib) */
    int tiles = 0;
    for (int q = 0; q < NJ; q++) {
        const int n = ntoks[q];
        uint8_t *codes = malloc((size_t)rows * rb + 16), *sc = malloc((size_t)rows * ng * ssz + 8), *bi = malloc((size_t)rows * ng * ssz + 8);
        int8_t *xq = malloc((size_t)n * cols);
        float *d = malloc((size_t)n * nb * 4), *s = malloc((size_t)n * ns * 4), *y = malloc((size_t)n * rows * 4);
        rand_inputs(codes, (size_t)rows * rb, xq, d, s, n, cols, nb, ns);
        uint8_t *scp = sc + (ssz == 2 ? 2 : 0), *bip = bi + (ssz == 2 ? 2 : 0); /* 16-bit words at an odd offset */
        rand_words(DT, SDT, ib, scp, bip, (size_t)rows * ng);
        for (int i = 0; i < n * rows; i++) y[i] = NAN;
        jobs[q] = (job){codes, scp, bip, xq, d, s, y, rows, cols, group, tiles, n, rows};
        bis[q] = bip;
        tiles += (rows + R - 1) / R;
        mem[q][0] = codes, mem[q][1] = sc, mem[q][2] = bi, mem[q][3] = xq, mem[q][4] = d, mem[q][5] = s;
    }
    const int f0 = fails, st0 = stale;
    for (int q = 0; ib && q < NJ; q++) jobs[q].biases = NULL;
    for (int cta = 0; cta < tiles; cta++) {
        if (NT) run_cta_n(DT, SDT, NT, jobs, NJ, cta);
        else run_cta(DT, SDT, WR, jobs, NJ, cta);
    }
    int bad = 0;
    for (int q = 0; q < NJ; q++) jobs[q].biases = bis[q];
    for (int q = 0; q < NJ; q++)
        for (int t = 0; t < ntoks[q]; t++)
            for (int r = 0; r < rows; r++) {
                const job *j = &jobs[q];
                const float a = j->y[(size_t)t * rows + r];
                const float b = ref_row(DT, SDT, j->codes, j->scales, j->biases, j->xq + (size_t)t * cols, j->d + (size_t)t * nb,
                                        j->s + (size_t)t * ns, cols, group, r);
                if (memcmp(&a, &b, 4)) bad++;
            }
    fails += bad + (stale != st0);
    const int failed = fails != f0;
    static int shown;
    if (failed || shown++ % 61 == 0)
        printf("%s %s %-4s %s %d group %3d %4d x %-4d%s: %d outputs differ, %d stale staging reads\n", failed ? "FAIL" : "ok  ",
               DT == Q4 ? "q4" : "q8", SDT == F32 ? "f32" : SDT == BF16 ? "bf16" : "f16", NT ? "mvnd NT" : "mv1d WR", NT ? NT : WR,
               group, rows, cols, ib ? " implied biases" : "", bad, stale - st0);
    for (int q = 0; q < NJ; q++) {
        for (int m = 0; m < 6; m++) free(mem[q][m]);
        free(jobs[q].y);
    }
    return failed;
}

int main(void) {
    const int dts[2] = {Q4, Q8}, sdts[3] = {F32, BF16, F16}, wrs[7] = {1, 2, 4, 8, -2, -4, -8}, groups[3] = {32, 64, 128};
    const int colss[6] = {96, 160, 768, 1024, 2048, 4096}, rowss[4] = {1, 7, 33, 300};
    int cases = 0;
    for (int c = 0; c < 2 * 3 * 7 * 3 * 6 * 4; c++) {
        int k = c;
        const int DT = dts[k % 2]; k /= 2;
        const int SDT = sdts[k % 3]; k /= 3;
        const int wr = wrs[k % 7]; k /= 7; /* > 0: mv1d_i8's WR; < 0: mvnd_i8 for -wr tokens */
        const int group = groups[k % 3]; k /= 3;
        const int cols = colss[k % 6]; k /= 6;
        const int rows = rowss[k % 4];
        if (cols % group) continue;
        for (int ib = 0; ib < 2; ib++) run_case(DT, SDT, wr > 0 ? wr : 4, wr > 0 ? 0 : -wr, group, cols, rows, ib), cases++;
    }
    printf("emu: %d cases, %d failures\n", cases, fails);
    return fails ? 1 : 0;
}
