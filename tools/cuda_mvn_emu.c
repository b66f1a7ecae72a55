/*
 * cuda_mvn_emu.c — checks cuda_mvn.cu's index arithmetic on the CPU (no GPU here): mg_group's choice of the d-th chosen
 * expert and its pairs against a plain grouping, and mg_rows' staging (codes, scale and bias words, the tokens' codes,
 * block scales, group sums or the block sums they are added from) and fold against cuda.h's canonical order computed
 * straight from the matrix and activation arrays, for NR 16 and 64, q4 / q8, f32 / f16 / bf16 scales, groups 32 / 64 /
 * 128, implied biases or read ones, several chunks a row, a part tile, 1-8 tokens. The kernels' statements are
 * transliterated with the CTA's threads as a loop (a barrier is the loop's end), shared memory as arrays of the same
 * layout. And the kernels' plumbing: k_moeg_gu (the experts' gate / up rows from the table, the tokens' rows, the
 * SwiGLU block quantised by quant_lane's operations into the pair's mid row, the group table) and k_moeg_dn (the down
 * rows for the table's pairs into y's cells) against a plain per-pair reference (gate, up, SwiGLU, act_quant of the
 * whole mid row, down), for both gate/up ways (=1: 32 + 32 rows a CTA with the SwiGLU in it; =2: 16 rows a CTA, then
 * the SwiGLU and quantisation of the n k rows); and k_mvg_dense's job lookup and outputs.
 * Build: cc -O2 -std=c11 -ffp-contract=off -Isrc tools/cuda_mvn_emu.c -lm -o /tmp/mvn_emu (exit 0: every case agrees).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/canon_exp.h"

enum { Q8 = 0, Q4 = 1, F32 = 0, F16 = 1, BF16 = 2 };
#define NTH 256
#define MAXT 8
#define MAXP 256
#define GS 33
#define ROWB 512
#define RSTR (ROWB + 16)

static uint64_t rs = 88172645463325252ull;
static uint32_t rnd(void) { rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17; return (uint32_t)(rs >> 11); }

static float h2f(uint16_t h) { /* IEEE half to float */
    const uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
    uint32_t b;
    if (e == 0) {
        if (!m) b = s;
        else { float f = ldexpf((float)m, -24); memcpy(&b, &f, 4); b |= s; }
    } else if (e == 31) b = s | 0x7f800000u | (m << 13);
    else b = s | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &b, 4);
    return f;
}
static float bits(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
/* cuda_i8.cuh raw_sw: the value in word w (hi: its upper half) */
static float raw_sw(uint32_t w, int hi, int sdt) {
    if (sdt == F32) return bits(w);
    const uint32_t h = hi ? w >> 16 : w & 0xffffu;
    return sdt == BF16 ? bits(h << 16) : h2f((uint16_t)h);
}
static float zbias(int dt, float sw) { return (dt == Q4 ? -8.0f : -128.0f) * sw; }
static int dp4a_ss(uint32_t a, uint32_t b, int c) {
    for (int i = 0; i < 4; i++) c += (int8_t)(a >> 8 * i) * (int8_t)(b >> 8 * i);
    return c;
}
static int dp4a_us(uint32_t a, uint32_t b, int c) {
    for (int i = 0; i < 4; i++) c += (int)((a >> 8 * i) & 255) * (int8_t)(b >> 8 * i);
    return c;
}
/* cuda_i8.cuh dot_block: w 16 (q4) or 32 (q8) code bytes, x 32 activation bytes */
static int dot_block(int dt, const uint8_t *w, const uint8_t *x) {
    uint32_t W[8], X[8];
    memcpy(W, w, dt == Q4 ? 16 : 32), memcpy(X, x, 32);
    int I = 0;
    if (dt == Q4) {
        const uint32_t M = 0x0f0f0f0fu;
        for (int k = 0; k < 4; k++) I = dp4a_ss(W[k] & M, X[2 * k], I), I = dp4a_ss((W[k] >> 4) & M, X[2 * k + 1], I);
    } else {
        for (int k = 0; k < 8; k++) I = dp4a_us(W[k], X[k], I);
    }
    return I;
}

/* a matrix: codes [rows][rb], scales / biases [rows][ng] of ssz bytes (the base a given offset, so the halves vary) */
typedef struct { uint8_t *codes, *scales, *biases; int row0; } mmat;

/* mg_group, transliterated: returns D; su[0], su[1], su[2..] for d < D */
static int mg_group(const int *top_e, int nk, int E, int d, int *su) {
    uint32_t bm[32] = {0};
    int se[MAXP], wc[MAXP / 32] = {0}, sD = 0, sE = -1;
    for (int i = 0; i < nk; i++) {
        se[i] = top_e[i];
        if ((unsigned)se[i] < (unsigned)E) bm[se[i] >> 5] |= 1u << (se[i] & 31);
    }
    int incs[32], run = 0;
    for (int lane = 0; lane < 32; lane++) run += __builtin_popcount(bm[lane]), incs[lane] = run;
    sD = incs[31];
    for (int lane = 0; lane < 32; lane++) {
        const int cnt = __builtin_popcount(bm[lane]), inc = incs[lane];
        if (d >= inc - cnt && d < inc) {
            uint32_t bb = bm[lane];
            for (int q = inc - cnt; q < d; q++) bb &= bb - 1;
            sE = lane * 32 + __builtin_ffs((int)bb) - 1;
        }
    }
    if (d >= sD) return sD;
    const int nw = (nk + 31) / 32;
    uint32_t bal[MAXP / 32] = {0};
    for (int w = 0; w < nw; w++) {
        for (int lane = 0; lane < 32; lane++)
            if (w * 32 + lane < nk && se[w * 32 + lane] == sE) bal[w] |= 1u << lane;
        wc[w] = __builtin_popcount(bal[w]);
    }
    for (int w = 0; w < nw; w++)
        for (int lane = 0; lane < 32; lane++)
            if ((bal[w] >> lane) & 1) {
                int pos = __builtin_popcount(bal[w] & ((1u << lane) - 1));
                for (int x = 0; x < w; x++) pos += wc[x];
                if (pos < MAXT) su[2 + pos] = w * 32 + lane;
            }
    int c = 0;
    for (int x = 0; x < nw; x++) c += wc[x];
    su[0] = sE, su[1] = c < MAXT ? c : MAXT;
    return sD;
}

/* mg_rows, transliterated (cp.async as a copy, zero-filled when not ok; every thread's statements in turn) */
static void mg_rows(int NR, int DT, int SDT, int IB, int S32, mmat m0, mmat m1, int split, int nr, int cols, int group,
                    const int8_t *xq, const float *xd, const float *xs, int soff, const int *ar, int c, float out[NTH][2]) {
    const int BB = DT == Q4 ? 16 : 32, KC = ROWB / BB, ssz = SDT == F32 ? 4 : 2, TG = NTH / NR;
    static uint8_t scode[64 * RSTR];
    static uint32_t ssw[64 * GS], sbw[64 * GS];
    static uint8_t sx[MAXT * 64 * 16];
    static float sd[MAXT * 32], sxg[MAXT * 32], ss32[MAXT * 32];
    memset(scode, 0xcd, sizeof scode), memset(ssw, 0xcd, sizeof ssw), memset(sbw, 0xcd, sizeof sbw);
    memset(sx, 0xcd, sizeof sx), memset(sd, 0xcd, sizeof sd), memset(sxg, 0xcd, sizeof sxg), memset(ss32, 0xcd, sizeof ss32);
    const int nb = cols / 32, ng = cols / group, ns = nb + nb / 2 + nb / 4;
    const int gshift = group == 32 ? 0 : group == 64 ? 1 : 2, bmask = group / 32 - 1, rb = DT == Q4 ? cols / 2 : cols;
    float acc[NTH][2] = {{0}}, accb[NTH][2] = {{0}};
    for (int kb0 = 0; kb0 < nb; kb0 += KC) {
        const int kcn = nb - kb0 < KC ? nb - kb0 : KC, gpc = kcn >> gshift, pcs = kcn * BB / 16;
        for (int tid = 0; tid < NTH; tid++) {
            for (int q = tid; q < NR * pcs; q += NTH) {
                const int rr = q / pcs, pc = q - rr * pcs;
                const int row2 = rr < split ? m0.row0 + rr : m1.row0 + rr - split;
                const int ok = rr < nr;
                const uint8_t *cb = rr < split ? m0.codes : m1.codes;
                if (ok) memcpy(scode + rr * RSTR + pc * 16, cb + (size_t)row2 * rb + (size_t)kb0 * BB + pc * 16, 16);
                else memset(scode + rr * RSTR + pc * 16, 0, 16);
            }
            for (int q = tid; q < NR * gpc; q += NTH) {
                const int rr = q / gpc, g = q - rr * gpc;
                if (rr >= nr) continue;
                const size_t e = (size_t)(rr < split ? m0.row0 + rr : m1.row0 + rr - split) * ng + (size_t)(kb0 >> gshift) + g;
                const uint8_t *sc = rr < split ? m0.scales : m1.scales, *bi = rr < split ? m0.biases : m1.biases;
                memcpy(&ssw[rr * GS + g], (const void *)(((uintptr_t)sc + e * ssz) & ~(uintptr_t)3), 4);
                if (!IB) memcpy(&sbw[rr * GS + g], (const void *)(((uintptr_t)bi + e * ssz) & ~(uintptr_t)3), 4);
            }
            for (int q = tid; q < c * 2 * kcn; q += NTH) {
                const int i = q / (2 * kcn), pc = q - i * 2 * kcn;
                memcpy(sx + (i * 64 + pc) * 16, xq + (size_t)ar[i] * cols + (size_t)kb0 * 32 + (size_t)pc * 16, 16);
            }
            for (int q = tid; q < c * kcn; q += NTH) {
                const int i = q / kcn, b = q - i * kcn;
                sd[i * 32 + b] = xd[(size_t)ar[i] * nb + kb0 + b];
                if (S32 && gshift) ss32[i * 32 + b] = xs[(size_t)ar[i] * ns + kb0 + b];
            }
            if (!S32 || !gshift)
                for (int q = tid; q < c * gpc; q += NTH) {
                    const int i = q / gpc, g = q - i * gpc;
                    sxg[i * 32 + g] = xs[(size_t)ar[i] * ns + soff + (kb0 >> gshift) + g];
                }
        }
        if (S32 && gshift)
            for (int q = 0; q < c * gpc; q++) {
                const int i = q / gpc, g = q - i * gpc;
                const float *s = ss32 + i * 32 + (g << gshift);
                sxg[i * 32 + g] = gshift == 1 ? s[0] + s[1] : (s[0] + s[1]) + (s[2] + s[3]);
            }
        for (int tid = 0; tid < NTH; tid++) {
            const int r = tid % NR, i0 = tid / NR, row = r < split ? m0.row0 + r : m1.row0 + r - split;
            const uint8_t *rsc = r < split ? m0.scales : m1.scales, *rbi = r < split ? m0.biases : m1.biases;
            if (i0 >= c) continue;
            const int two = TG < MAXT && i0 + TG < c;
            const size_t e0 = (size_t)row * ng + (size_t)(kb0 >> gshift);
            const uintptr_t sa = (uintptr_t)rsc + e0 * ssz, ba = (uintptr_t)rbi + e0 * ssz;
            const uint8_t *cr = scode + r * RSTR;
            const uint32_t *swr = ssw + r * GS, *sbr = sbw + r * GS;
            const int i1 = two ? i0 + TG : i0;
            for (int bl = 0; bl < kcn; bl++) {
                const int g = bl >> gshift;
                const float sv = raw_sw(swr[g], ((sa + (uintptr_t)g * ssz) & 2) != 0, SDT);
                const int first = !(bl & bmask);
                const float bv = !first ? 0.f : IB ? zbias(DT, sv) : raw_sw(sbr[g], ((ba + (uintptr_t)g * ssz) & 2) != 0, SDT);
                const int I0 = dot_block(DT, cr + bl * BB, sx + (i0 * 64 + 2 * bl) * 16);
                acc[tid][0] = fmaf((float)I0, sv * sd[i0 * 32 + bl], acc[tid][0]);
                if (first) accb[tid][0] = fmaf(bv, sxg[i0 * 32 + g], accb[tid][0]);
                if (two) {
                    const int I1 = dot_block(DT, cr + bl * BB, sx + (i1 * 64 + 2 * bl) * 16);
                    acc[tid][1] = fmaf((float)I1, sv * sd[i1 * 32 + bl], acc[tid][1]);
                    if (first) accb[tid][1] = fmaf(bv, sxg[i1 * 32 + g], accb[tid][1]);
                }
            }
        }
    }
    for (int tid = 0; tid < NTH; tid++) out[tid][0] = acc[tid][0] + accb[tid][0], out[tid][1] = acc[tid][1] + accb[tid][1];
}

/* the element's value (scale or bias) of matrix m at (row, group), read by its own address */
static float elem(const uint8_t *base, int sdt, size_t e) {
    if (sdt == F32) { float f; memcpy(&f, base + e * 4, 4); return f; }
    uint16_t h;
    memcpy(&h, base + e * 2, 2);
    return sdt == BF16 ? bits((uint32_t)h << 16) : h2f(h);
}

/* cuda.h's canonical order for row `row` of (codes, scales, biases) and activation row t, straight from the arrays;
 * group sums from s (soff) or added from s32 (S32) */
static float canon(int DT, int SDT, int IB, int S32, const uint8_t *codes, const uint8_t *sc, const uint8_t *bi, int row,
                   int cols, int group, const int8_t *xq, const float *xd, const float *xs, int soff, int t) {
    const int nb = cols / 32, ng = cols / group, ns = nb + nb / 2 + nb / 4, gb = group / 32, BB = DT == Q4 ? 16 : 32;
    const int rb = DT == Q4 ? cols / 2 : cols;
    float acc = 0.f, accb = 0.f;
    for (int b = 0; b < nb; b++) {
        const int I = dot_block(DT, codes + (size_t)row * rb + (size_t)b * BB, (const uint8_t *)xq + (size_t)t * cols + (size_t)b * 32);
        const float s = elem(sc, SDT, (size_t)row * ng + b / gb);
        acc = fmaf((float)I, s * xd[(size_t)t * nb + b], acc);
    }
    for (int j = 0; j < ng; j++) {
        const float s = elem(sc, SDT, (size_t)row * ng + j), bv = IB ? zbias(DT, s) : elem(bi, SDT, (size_t)row * ng + j);
        float xg;
        const float *s32 = xs + (size_t)t * ns;
        if (!S32) xg = xs[(size_t)t * ns + soff + j];
        else xg = gb == 1 ? s32[j] : gb == 2 ? s32[2 * j] + s32[2 * j + 1] : (s32[4 * j] + s32[4 * j + 1]) + (s32[4 * j + 2] + s32[4 * j + 3]);
        accb = fmaf(bv, xg, accb);
    }
    return acc + accb;
}

static int fails;

static uint16_t rnd_scale(int sdt) { /* a modest positive half / bf16 */
    if (sdt == BF16) return (uint16_t)(0x3c00 + (rnd() & 0x3ff)); /* ~2^-7 .. 2^-6 */
    return (uint16_t)(0x2000 + (rnd() & 0x7ff));
}

/* one case: NR rows a CTA over a matrix of rows x cols (two matrices when split < NR), c tokens, a tile at r0 */
static void one_case(int NR, int DT, int SDT, int IB, int S32, int rows, int cols, int group, int c, int split, int tile) {
    const int nb = cols / 32, ng = cols / group, ns = nb + nb / 2 + nb / 4, rb = DT == Q4 ? cols / 2 : cols, ssz = SDT == F32 ? 4 : 2;
    const int T = 9, soff = S32 ? 0 : group == 32 ? 0 : group == 64 ? nb : nb + nb / 2;
    mmat m[2];
    uint8_t *mem[2][3];
    for (int k = 0; k < 2; k++) {
        mem[k][0] = malloc((size_t)rows * rb), mem[k][1] = malloc((size_t)rows * ng * ssz + 8), mem[k][2] = malloc((size_t)rows * ng * ssz + 8);
        for (size_t i = 0; i < (size_t)rows * rb; i++) mem[k][0][i] = (uint8_t)rnd();
        const int off = SDT == F32 ? 0 : 2 * (int)(rnd() & 1); /* a base at a half word's odd position */
        for (int z = 1; z < 3; z++)
            for (size_t i = 0; i < (size_t)rows * ng; i++) {
                if (SDT == F32) { float f = ldexpf(1.0f + (float)(rnd() & 1023) / 1024.0f, -7); memcpy(mem[k][z] + off + i * 4, &f, 4); }
                else { uint16_t h = rnd_scale(SDT); memcpy(mem[k][z] + off + i * 2, &h, 2); }
            }
        m[k] = (mmat){mem[k][0], mem[k][1] + off, mem[k][2] + off, 0};
    }
    int8_t *xq = malloc((size_t)T * cols);
    float *xd = malloc((size_t)T * nb * 4), *xs = malloc((size_t)T * ns * 4);
    for (size_t i = 0; i < (size_t)T * cols; i++) xq[i] = (int8_t)(rnd() % 255 - 127);
    for (size_t i = 0; i < (size_t)T * nb; i++) xd[i] = (float)(rnd() % 1000 + 1) / 65536.0f;
    for (int t = 0; t < T; t++) { /* s32 | s64 | s128 as act_quant adds them */
        float *s = xs + (size_t)t * ns;
        for (int b = 0; b < nb; b++) s[b] = (float)((int)(rnd() % 2001) - 1000) / 128.0f;
        for (int j = 0; j < nb / 2; j++) s[nb + j] = s[2 * j] + s[2 * j + 1];
        for (int j = 0; j < nb / 4; j++) s[nb + nb / 2 + j] = (s[4 * j] + s[4 * j + 1]) + (s[4 * j + 2] + s[4 * j + 3]);
    }
    int ar[MAXT];
    for (int i = 0; i < c; i++) ar[i] = (int)(rnd() % T);
    const int r0 = tile * (split < NR ? split : NR), nr = split < NR ? NR : (rows - r0 < NR ? rows - r0 : NR);
    m[0].row0 = r0, m[1].row0 = r0;
    static float out[NTH][2];
    mg_rows(NR, DT, SDT, IB, S32, m[0], split < NR ? m[1] : m[0], split, nr, cols, group, xq, xd, xs, soff, ar, c, out);
    const int TG = NTH / NR;
    int bad = 0;
    for (int tid = 0; tid < NTH && !bad; tid++) {
        const int r = tid % NR, i0 = tid / NR;
        for (int h = 0; h < 2; h++) {
            const int i = i0 + h * TG;
            if ((h && TG >= MAXT) || i >= c || r >= nr) continue;
            const mmat *mm = r < split ? &m[0] : &m[1];
            const int row = mm->row0 + (r < split ? r : r - split);
            const float ref = canon(DT, SDT, IB, S32, mm->codes, mm->scales, mm->biases, row, cols, group, xq, xd, xs, soff, ar[i]);
            if (memcmp(&ref, &out[tid][h], 4)) {
                printf("DIFF NR %d dt %d sdt %d ib %d s32 %d rows %d cols %d group %d c %d split %d tile %d: row %d token %d %.9g ref %.9g\n",
                       NR, DT, SDT, IB, S32, rows, cols, group, c, split, tile, r, i, out[tid][h], ref);
                bad = 1;
                break;
            }
        }
    }
    fails += bad;
    for (int k = 0; k < 2; k++) free(mem[k][0]), free(mem[k][1]), free(mem[k][2]);
    free(xq), free(xd), free(xs);
}

/* act_quant's operations on a 32-float block v (lane = column): the codes into q / q4 (row-relative block b), d, s32 */
static void quant_block(const float *v, int b, int8_t *q, int8_t *q4, float *d, float *s) {
    float amax = 0.0f;
    for (int l = 0; l < 32; l++) amax = fmaxf(amax, fmaxf(0.0f, fabsf(v[l])));
    const float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
    int sum = 0;
    for (int l = 0; l < 32; l++) {
        const float rv = rintf(v[l] * id);
        const int qi = rv >= 127.0f ? 127 : rv <= -127.0f ? -127 : rv == rv ? (int)rv : 0;
        sum += qi;
        const int c8 = l & 7;
        q[b * 32 + l] = (int8_t)qi;
        q4[b * 32 + (l & ~7) + ((c8 & 1) ? 4 + (c8 >> 1) : (c8 >> 1))] = (int8_t)qi;
    }
    d[b] = db, s[b] = db * (float)sum;
}

/* a random matrix of rows x cols: codes, and scales / biases at a base of either half-word parity */
static mmat rnd_mat(int DT, int SDT, int rows, int cols, int group, uint8_t **mem) {
    const int rb = DT == Q4 ? cols / 2 : cols, ng = cols / group, ssz = SDT == F32 ? 4 : 2;
    mem[0] = malloc((size_t)rows * rb), mem[1] = malloc((size_t)rows * ng * ssz + 8), mem[2] = malloc((size_t)rows * ng * ssz + 8);
    for (size_t i = 0; i < (size_t)rows * rb; i++) mem[0][i] = (uint8_t)rnd();
    const int off = SDT == F32 ? 0 : 2 * (int)(rnd() & 1);
    for (int z = 1; z < 3; z++)
        for (size_t i = 0; i < (size_t)rows * ng; i++) {
            if (SDT == F32) { float f = ldexpf(1.0f + (float)(rnd() & 1023) / 1024.0f, -7) * (z == 2 ? -8.0f : 1.0f); memcpy(mem[z] + off + i * 4, &f, 4); }
            else { uint16_t h = rnd_scale(SDT); memcpy(mem[z] + off + i * 2, &h, 2); }
        }
    return (mmat){mem[0], mem[1] + off, mem[2] + off, 0};
}

/* one MoE decode batch through the emulated kernels against the per-pair reference; way 1 or 2 (SLUICE_CUDA_MOEG) */
static void moe_case(int n, int k, int E, int H, int I, int DTG, int SDTG, int gg, int DTD, int SDTD, int dg, int IBG, int IBD,
                     int mode, int way) {
    const int nk = n * k, nbH = H / 32, nsH = nbH + nbH / 2 + nbH / 4, nbI = I / 32, nsI = nbI + nbI / 2 + nbI / 4;
    uint8_t *mem[3][64][3];
    mmat tab[3][64];
    for (int e = 0; e < E; e++) {
        tab[0][e] = rnd_mat(DTG, SDTG, I, H, gg, mem[0][e]), tab[1][e] = rnd_mat(DTG, SDTG, I, H, gg, mem[1][e]);
        tab[2][e] = rnd_mat(DTD, SDTD, H, I, dg, mem[2][e]);
    }
    int te[MAXP];
    for (int t = 0; t < n; t++) /* k distinct a token: of all E, or of the first k (every token the same experts) */
        for (int s = 0; s < k; s++) {
            int e, dup;
            do {
                e = (int)(rnd() % (mode == 2 ? k : E));
                dup = 0;
                for (int q = 0; q < s; q++) dup |= te[t * k + q] == e;
            } while (dup);
            te[t * k + s] = e;
        }
    if (mode == 3) te[nk - 1] = -1;
    /* h's int8 form: random codes (q and q4 the same bytes: the kernels pick by dtype), d, sums */
    int8_t *xq = malloc((size_t)n * H);
    float *xd = malloc((size_t)n * nbH * 4), *xs = malloc((size_t)n * nsH * 4);
    for (size_t i = 0; i < (size_t)n * H; i++) xq[i] = (int8_t)(rnd() % 255 - 127);
    for (size_t i = 0; i < (size_t)n * nbH; i++) xd[i] = (float)(rnd() % 1000 + 1) / 262144.0f;
    for (int t = 0; t < n; t++) {
        float *sv = xs + (size_t)t * nsH;
        for (int b = 0; b < nbH; b++) sv[b] = (float)((int)(rnd() % 2001) - 1000) / 128.0f;
        for (int j = 0; j < nbH / 2; j++) sv[nbH + j] = sv[2 * j] + sv[2 * j + 1];
        for (int j = 0; j < nbH / 4; j++) sv[nbH + nbH / 2 + j] = (sv[4 * j] + sv[4 * j + 1]) + (sv[4 * j + 2] + sv[4 * j + 3]);
    }
    const int soffG = gg == 32 ? 0 : gg == 64 ? nbH : nbH + nbH / 2;
    /* the reference, pair by pair */
    float *yref = malloc((size_t)nk * H * 4), *v = malloc((size_t)I * 4);
    int8_t *rq = malloc((size_t)I), *rq4 = malloc((size_t)I);
    float *rd = malloc((size_t)nbI * 4), *rs = malloc((size_t)nsI * 4);
    for (int p = 0; p < nk; p++) {
        const int e = te[p], t = p / k;
        if (e < 0) continue;
        for (int j = 0; j < I; j++) {
            const float g = canon(DTG, SDTG, IBG, 0, tab[0][e].codes, tab[0][e].scales, tab[0][e].biases, j, H, gg, xq, xd, xs, soffG, t);
            const float u = canon(DTG, SDTG, IBG, 0, tab[1][e].codes, tab[1][e].scales, tab[1][e].biases, j, H, gg, xq, xd, xs, soffG, t);
            v[j] = canon_silu(g) * u;
        }
        for (int b = 0; b < nbI; b++) quant_block(v + b * 32, b, rq, rq4, rd, rs);
        for (int j = 0; j < nbI / 2; j++) rs[nbI + j] = rs[2 * j] + rs[2 * j + 1];
        for (int j = 0; j < nbI / 4; j++) rs[nbI + nbI / 2 + j] = (rs[4 * j] + rs[4 * j + 1]) + (rs[4 * j + 2] + rs[4 * j + 3]);
        const int soffD = dg == 32 ? 0 : dg == 64 ? nbI : nbI + nbI / 2;
        for (int h = 0; h < H; h++)
            yref[(size_t)p * H + h] = canon(DTD, SDTD, IBD, 0, tab[2][e].codes, tab[2][e].scales, tab[2][e].biases, h, I, dg,
                                            DTD == Q4 ? rq4 : rq, rd, rs, soffD, 0);
    }
    /* the kernels */
    int8_t *mq = malloc((size_t)nk * I), *mq4 = malloc((size_t)nk * I);
    float *md = malloc((size_t)nk * nbI * 4), *ms = malloc((size_t)nk * nsI * 4), *y = malloc((size_t)nk * H * 4);
    float *gbuf = malloc((size_t)nk * I * 4), *ubuf = malloc((size_t)nk * I * 4);
    memset(ms, 0xcd, (size_t)nk * nsI * 4); /* the s64 / s128 k_moeg_gu leaves unwritten */
    memset(y, 0xff, (size_t)nk * H * 4);
    int gt[1 + MAXP * (2 + MAXT)];
    const int ny = nk < E ? nk : E;
    static float out[NTH][2];
    if (way == 1) {
        for (int d = 0; d < ny; d++)
            for (int x = 0; x < I / 32; x++) {
                int su[2 + MAXT];
                const int D = mg_group(te, nk, E, d, su);
                if (x == 0 && d == 0) gt[0] = D;
                if (d >= D) continue;
                const int e = su[0], c = su[1];
                int sar[MAXT];
                for (int i = 0; i < c; i++) sar[i] = su[2 + i] / k;
                if (x == 0) memcpy(gt + 1 + d * (2 + MAXT), su, sizeof su);
                const int j0 = x * 32;
                mmat m0 = tab[0][e], m1 = tab[1][e];
                m0.row0 = m1.row0 = j0;
                mg_rows(64, DTG, SDTG, IBG, 0, m0, m1, 32, 64, H, gg, xq, xd, xs, soffG, sar, c, out);
                float so[MAXT * 64];
                for (int tid = 0; tid < NTH; tid++) {
                    const int r = tid & 63, i0 = tid >> 6;
                    if (i0 < c) so[i0 * 64 + r] = out[tid][0];
                    if (i0 + 4 < c) so[(i0 + 4) * 64 + r] = out[tid][1];
                }
                for (int w = 0; w < c; w++) {
                    const int p = su[2 + w];
                    float vb[32];
                    for (int l = 0; l < 32; l++) vb[l] = canon_silu(so[w * 64 + l]) * so[w * 64 + 32 + l];
                    quant_block(vb, j0 / 32, mq + (size_t)p * I, mq4 + (size_t)p * I, md + (size_t)p * nbI, ms + (size_t)p * nsI);
                }
            }
    } else {
        for (int d = 0; d < ny; d++)
            for (int x = 0; x < I / 8; x++) {
                int su[2 + MAXT];
                const int D = mg_group(te, nk, E, d, su);
                if (x == 0 && d == 0) gt[0] = D;
                if (d >= D) continue;
                const int e = su[0], c = su[1];
                int sar[MAXT];
                for (int i = 0; i < c; i++) sar[i] = su[2 + i] / k;
                if (x == 0) memcpy(gt + 1 + d * (2 + MAXT), su, sizeof su);
                const int half = I / 16, up = x >= half, r0 = (x - (up ? half : 0)) * 16;
                mmat m0 = tab[up][e];
                m0.row0 = r0;
                mg_rows(16, DTG, SDTG, IBG, 0, m0, m0, 16, 16, H, gg, xq, xd, xs, soffG, sar, c, out);
                for (int tid = 0; tid < NTH; tid++) {
                    const int r = tid % 16, i0 = tid / 16;
                    if (i0 < c) (up ? ubuf : gbuf)[(size_t)su[2 + i0] * I + r0 + r] = out[tid][0];
                }
            }
        for (int p = 0; p < nk; p++) { /* slcu_swiglu_q over the n k rows (the unrouted ones' values unused) */
            if (te[p] < 0) continue;
            for (int b = 0; b < nbI; b++) {
                float vb[32];
                for (int l = 0; l < 32; l++) vb[l] = canon_silu(gbuf[(size_t)p * I + b * 32 + l]) * ubuf[(size_t)p * I + b * 32 + l];
                quant_block(vb, b, mq + (size_t)p * I, mq4 + (size_t)p * I, md + (size_t)p * nbI, ms + (size_t)p * nsI);
            }
        }
    }
    for (int d = 0; d < ny; d++) /* k_moeg_dn */
        for (int x = 0; x < (H + 63) / 64; x++) {
            if (d >= gt[0]) continue;
            const int *su = gt + 1 + d * (2 + MAXT), e = su[0], c = su[1], r0 = x * 64, nr = H - r0 < 64 ? H - r0 : 64;
            mmat m0 = tab[2][e];
            m0.row0 = r0;
            mg_rows(64, DTD, SDTD, IBD, 1, m0, m0, 64, nr, I, dg, DTD == Q4 ? mq4 : mq, md, ms, 0, su + 2, c, out);
            for (int tid = 0; tid < NTH; tid++) {
                const int r = tid & 63, i0 = tid >> 6;
                if (r >= nr) continue;
                if (i0 < c) y[(size_t)su[2 + i0] * H + r0 + r] = out[tid][0];
                if (i0 + 4 < c) y[(size_t)su[2 + i0 + 4] * H + r0 + r] = out[tid][1];
            }
        }
    int bad = 0;
    for (size_t i = 0; i < (size_t)nk * H && !bad; i++) {
        uint32_t u;
        memcpy(&u, &y[i], 4);
        if (te[i / H] < 0 ? u != 0xffffffffu : memcmp(&y[i], &yref[i], 4) != 0) {
            printf("DIFF moe way %d n %d k %d E %d H %d I %d dt %d/%d sdt %d/%d g %d/%d ib %d/%d mode %d: pair %d row %d %.9g ref %.9g\n",
                   way, n, k, E, H, I, DTG, DTD, SDTG, SDTD, gg, dg, IBG, IBD, mode, (int)(i / H), (int)(i % H), y[i], yref[i]);
            bad = 1;
        }
    }
    fails += bad;
    for (int z = 0; z < 3; z++)
        for (int e = 0; e < E; e++) free(mem[z][e][0]), free(mem[z][e][1]), free(mem[z][e][2]);
    free(xq), free(xd), free(xs), free(yref), free(v), free(rq), free(rq4), free(rd), free(rs);
    free(mq), free(mq4), free(md), free(ms), free(y), free(gbuf), free(ubuf);
}

/* k_mvg_dense: nj matrices of rows[j] x cols sharing n tokens, NR rows a CTA, the job found from the tile starts */
static void dense_case(int NR, int DT, int SDT, int IB, int cols, int group, const int *rows, int nj, int n) {
    const int nb = cols / 32, ns = nb + nb / 2 + nb / 4, soff = group == 32 ? 0 : group == 64 ? nb : nb + nb / 2;
    uint8_t *mem[4][3];
    mmat w[4];
    int tile0[4], tiles = 0, tot = 0;
    for (int j = 0; j < nj; j++) {
        w[j] = rnd_mat(DT, SDT, rows[j], cols, group, mem[j]);
        tile0[j] = tiles, tiles += (rows[j] + NR - 1) / NR, tot += rows[j];
    }
    int8_t *xq = malloc((size_t)n * cols);
    float *xd = malloc((size_t)n * nb * 4), *xs = malloc((size_t)n * ns * 4), *y = malloc((size_t)8 * tot * 4);
    for (size_t i = 0; i < (size_t)n * cols; i++) xq[i] = (int8_t)(rnd() % 255 - 127);
    for (size_t i = 0; i < (size_t)n * nb; i++) xd[i] = (float)(rnd() % 1000 + 1) / 65536.0f;
    for (size_t i = 0; i < (size_t)n * ns; i++) xs[i] = (float)((int)(rnd() % 2001) - 1000) / 128.0f;
    memset(y, 0xff, (size_t)8 * tot * 4);
    const int sar[MAXT] = {0, 1, 2, 3, 4, 5, 6, 7}, TG = NTH / NR;
    static float out[NTH][2];
    for (int bx = 0; bx < tiles; bx++) {
        int jk = 0;
        while (jk + 1 < nj && bx >= tile0[jk + 1]) jk++;
        const int r0 = (bx - tile0[jk]) * NR, nr = rows[jk] - r0 < NR ? rows[jk] - r0 : NR;
        int y0 = 0;
        for (int j = 0; j < jk; j++) y0 += rows[j];
        mmat m0 = w[jk];
        m0.row0 = r0;
        mg_rows(NR, DT, SDT, IB, 0, m0, m0, NR, nr, cols, group, xq, xd, xs, soff, sar, n, out);
        for (int tid = 0; tid < NTH; tid++) {
            const int r = tid % NR, i0 = tid / NR;
            if (r >= nr) continue;
            if (i0 < n) y[(size_t)8 * y0 + (size_t)i0 * rows[jk] + r0 + r] = out[tid][0];
            if (TG < MAXT && i0 + TG < n) y[(size_t)8 * y0 + (size_t)(i0 + TG) * rows[jk] + r0 + r] = out[tid][1];
        }
    }
    int bad = 0;
    for (int j = 0, y0 = 0; j < nj && !bad; y0 += rows[j], j++)
        for (int t = 0; t < n && !bad; t++)
            for (int r = 0; r < rows[j] && !bad; r++) {
                const float ref = canon(DT, SDT, IB, 0, w[j].codes, w[j].scales, w[j].biases, r, cols, group, xq, xd, xs, soff, t);
                const float got = y[(size_t)8 * y0 + (size_t)t * rows[j] + r];
                if (memcmp(&ref, &got, 4)) {
                    printf("DIFF dense NR %d dt %d sdt %d ib %d cols %d group %d: matrix %d token %d row %d %.9g ref %.9g\n", NR, DT,
                           SDT, IB, cols, group, j, t, r, got, ref);
                    bad = 1;
                }
            }
    fails += bad;
    for (int j = 0; j < nj; j++) free(mem[j][0]), free(mem[j][1]), free(mem[j][2]);
    free(xq), free(xd), free(xs), free(y);
}

int main(void) {
    int cases = 0;
    /* mg_group against a plain grouping */
    for (int it = 0; it < 3000; it++) {
        const int E = 1 + (int)(rnd() % 1024), n = 1 + (int)(rnd() % 8), k = 1 + (int)(rnd() % (E < 32 ? E : 32));
        const int nk = n * k;
        if (nk > MAXP) continue;
        int te[MAXP];
        for (int t = 0; t < n; t++) /* k distinct of E a token (a pool of 12 sometimes: concentrated), some -1 */
            for (int s = 0; s < k; s++) {
                int e, dup;
                const int pool = (it & 1) && E >= k + 12 ? k + 12 : E;
                do {
                    e = (int)(rnd() % pool);
                    dup = 0;
                    for (int q = 0; q < s; q++) dup |= te[t * k + q] == e;
                } while (dup);
                te[t * k + s] = rnd() % 50 == 0 ? -1 : e;
            }
        int chosen[1024] = {0}, D = 0;
        for (int i = 0; i < nk; i++)
            if (te[i] >= 0 && te[i] < E) chosen[te[i]] = 1;
        for (int e = 0; e < E; e++) D += chosen[e];
        for (int d = 0, e = 0; d <= D; d++) {
            int su[2 + MAXT];
            memset(su, 0xff, sizeof su);
            const int got = mg_group(te, nk, E, d, su);
            cases++;
            if (got != D) { printf("DIFF group: D %d, got %d\n", D, got); fails++; break; }
            if (d == D) break;
            while (!chosen[e]) e++;
            int c = 0, ok = su[0] == e;
            for (int i = 0; i < nk; i++)
                if (te[i] == e) ok &= c < MAXT && su[2 + c] == i, c++;
            ok &= su[1] == c;
            if (!ok) { printf("DIFF group: E %d n %d k %d d %d: expert %d (%d), %d pairs (%d)\n", E, n, k, d, su[0], e, su[1], c); fails++; break; }
            e++;
        }
    }
    /* mg_rows against the canonical order */
    static const int NRS[2] = {16, 64}, groups[3] = {32, 64, 128}, colss[4] = {64, 160, 1024, 2048};
    for (int a = 0; a < 2; a++)
        for (int DT = 0; DT < 2; DT++)
            for (int SDT = 0; SDT < 3; SDT++)
                for (int IB = 0; IB < 2; IB++)
                    for (int S32 = 0; S32 < 2; S32++)
                        for (int gi = 0; gi < 3; gi++)
                            for (int ci = 0; ci < 4; ci++) {
                                const int NR = NRS[a], cols = colss[ci], group = groups[gi];
                                if (cols % group) continue;
                                const int c = 1 + (int)(rnd() % 8), split = NR == 64 && (rnd() & 1) ? 32 : NR;
                                const int rows = split < NR ? 96 : 100 + (int)(rnd() % 60);
                                const int tiles = split < NR ? 3 : (rows + NR - 1) / NR;
                                one_case(NR, DT, SDT, IB, S32, rows, cols, group, c, split, (int)(rnd() % tiles));
                                one_case(NR, DT, SDT, IB, S32, rows, cols, group, 8, split, tiles - 1); /* the last (a part) tile */
                                cases += 2;
                            }
    /* the MoE kernels' plumbing, both ways */
    static const struct { int n, k, E, H, I, dtg, sdtg, gg, dtd, sdtd, dg, ibg, ibd, mode; } mc[] = {
        {2, 4, 16, 128, 64, Q4, F16, 32, Q8, BF16, 64, 0, 0, 0},      {5, 8, 24, 256, 96, Q8, BF16, 64, Q4, F16, 32, 1, 1, 0},
        {8, 8, 16, 192, 128, Q4, BF16, 64, Q4, BF16, 128, 1, 1, 2}, {8, 4, 32, 128, 64, Q8, F16, 32, Q8, F32, 32, 1, 0, 3},
        {1, 8, 40, 160, 32, Q4, F32, 32, Q8, F32, 32, 0, 1, 0},     {8, 8, 64, 2048, 96, Q4, BF16, 32, Q4, BF16, 32, 1, 1, 0}};
    for (unsigned i = 0; i < sizeof mc / sizeof *mc; i++)
        for (int way = 1; way <= 2; way++, cases++)
            moe_case(mc[i].n, mc[i].k, mc[i].E, mc[i].H, mc[i].I, mc[i].dtg, mc[i].sdtg, mc[i].gg, mc[i].dtd, mc[i].sdtd, mc[i].dg,
                     mc[i].ibg, mc[i].ibd, mc[i].mode, way);
    /* the dense jobs */
    static const int qkv[3] = {160, 48, 48}, one[1] = {300}, tall[2] = {700, 90};
    for (int DT = 0; DT < 2; DT++)
        for (int n = 2; n <= 8; n += 3, cases += 3) {
            dense_case(16, DT, BF16, 1, 1024, 32, qkv, 3, n);
            dense_case(16, DT, F16, 0, 160, 32, one, 1, n);
            dense_case(64, DT, F32, 0, 512, 128, tall, 2, n);
        }
    printf("%s: %d cases, %d differ\n", fails ? "FAIL" : "PASS", cases, fails);
    return fails ? 1 : 0;
}
