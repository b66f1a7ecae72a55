/*
 * kernels_avx512_i8p.c — the AVX-512 int8-activation kernel of a q4 matrix over several tokens (a prefill; compiled
 * with kernels_avx512.c's flags, the Makefile): kern_avx512_q4_prefill (kernels_avx512.h), which kernels_avx512.c's
 * q4 entry tries before kernels_tile_i8.h's driver, bitwise that driver's results (kernels.h's canonical order).
 *
 * The same canonical arithmetic as i8_block (kernels_tile_i8.h), arranged for many tokens. i8_block spends five
 * vector ops per (row, token, step of 128 columns): two vpdpbusd, the int->float conversion, the scale
 * product sv * dv and the FMA, with 64 accumulators that live on the stack. Here:
 *  - the products sd = scale(group) * d_b are computed once per (row, token, block) before the steps, 16
 *    at a time, and read back as a 128-bit broadcast load ([sd of the step's 4 blocks] x 4) -- a load, not a
 *    vector op. That needs the step's 16 lanes in a different physical order: physical lane p holds
 *    canonical lane pi(p) = 4 (p % 4) + p / 4 (block p % 4; i8p_pi), so the codes and the activations of a step
 *    are permuted by dwords (a dword is one lane's 4 bytes, for both nibbles), the codes once per row block
 *    and token block, the activations once per call; the lanes go back to canonical order (the same
 *    permutation: it is its own inverse) before the final sums, so every lane is the same FMA chain;
 *  - a register tile of 4 rows x up to 4 tokens keeps its 16 accumulators in registers over a chunk of
 *    I8P_KC steps, reading the unpacked codes from an L1 scratch;
 *  - up to 64 tokens per block (256 KiB of activations, L2-resident) instead of 16, so each code byte is unpacked,
 *    and each row block's scales, biases and bias sums set up, once per 64: a micro-batch's attention projections
 *    (64 tokens, even o's 4096 columns) and most experts of a 512-token prefill (~32 tokens, up to ~60) in one
 *    block, where 32 (and 64 KiB) split o into four and a 40-token expert into two;
 *  - the bias lanes (accb, lane = group % 8) of 32 tokens a pass per row (two 16-token vectors), over the
 *    tokens' group sums transposed, instead of one 8-lane pass per output.
 *  - those bias sums first, so that a whole tile's last chunk writes its 16 outputs from its registers, the lane
 *    trees of all 16 as vector adds (i8p_fin16), not spilled and reduced one token at a time.
 * Its ~310 KB of buffers are a per-thread workspace, not stack (frames < 4 KB): the library runs on its
 * callers' threads (musl's default stack is 128 KiB).
 * docs/PERFORMANCE.md gives what it reaches against a register-only vpdpbusd loop.
 */
#include "kernels/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels_avx512.h"

#define I8P_KC 16        /* steps (128 columns) per chunk of a row block */
#define I8P_TB 64        /* most tokens per block */
#define I8P_XB 262144    /* bytes of permuted activations per block of tokens */
#define I8P_MAXGT 128    /* most groups per row for the transposed bias pass */

/* The workspace: xp, st, then i8p_rows' accm, U, P, row block and a row's biases. */
enum {
    I8P_WS_ST = I8P_XB,
    I8P_WS_ACC = I8P_WS_ST + I8P_MAXGT * I8P_TB * 4,
    I8P_WS_U = I8P_WS_ACC + I8P_TB * I8_RB * 64,
    I8P_WS_P = I8P_WS_U + I8P_KC * I8_RB * 128,
    I8P_WS_BLK = I8P_WS_P + 4 * I8_RB * 4 * I8P_KC * 4,
    I8P_WS_BI = I8P_WS_BLK + (int)(sizeof(i8_blk) + 63) / 64 * 64,
    I8P_WS_BYTES = I8P_WS_BI + I8_MAXG * 4,
};

static pthread_key_t i8p_key;
static int i8p_key_ok;
static void i8p_key_make(void) { i8p_key_ok = pthread_key_create(&i8p_key, free) == 0; }

/* This thread's workspace (freed when it exits), or NULL: then the one-block kernel runs (the same bits). */
static uint8_t *i8p_ws(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    if (pthread_once(&once, i8p_key_make) || !i8p_key_ok) return NULL;
    uint8_t *ws = pthread_getspecific(i8p_key);
    if (ws) return ws;
    ws = aligned_alloc(64, I8P_WS_BYTES);
    if (ws && pthread_setspecific(i8p_key, ws)) {
        free(ws);
        ws = NULL;
    }
    return ws;
}

static inline __m512i i8p_pi(void) { return _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15); }

/* Scales of row sf (f32, one per group) for the 16 blocks b0 .. b0+15, the first nb of them (the rest 0). */
static inline __m512 i8p_sfb(const float *sf, int gsh, int b0, int nb) {
    nb = nb < 16 ? nb : 16;
    const __mmask16 mk = nb == 16 ? (__mmask16)0xffff : tail_mask(nb);
    if (gsh == 0) return _mm512_maskz_loadu_ps(mk, sf + b0);
    /* groups of 64 / 128: 8 / 4 scales, each repeated 2 / 4 times (b0 is a multiple of 4) */
    const int ng = (nb + (1 << gsh) - 1) >> gsh;
    const __m512 v = _mm512_maskz_loadu_ps(tail_mask(ng), sf + (b0 >> gsh));
    const __m512i ix = gsh == 1 ? _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7)
                                : _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_maskz_permutexvar_ps(mk, ix, v);
}

/* The final sums of 4 tokens x 4 rows at once: acc [token][row] in the permuted lane order (lane p holds
 * canonical lane pi(p)), bm [row][I8P_TB] the rows' bias sums from these tokens on; y[t * ldy + i] =
 * lane tree(acc[t][i]) + bm[i][t]. Each output is the same tree as i8_half and i8_tree4 after the permutation
 * back (h_l = c_l + c_(l+8), then ((h0+h1)+(h2+h3))+((h4+h5)+(h6+h7))), its adds done 16 outputs a vector: c_l
 * is lane m of 128-bit chunk a for l = 4m + a, so h_l pairs positions m and m+2 of a chunk (shuffle_ps),
 * h_a + h_(a+1) pairs chunks (shuffle_f32x4), and the accumulators enter in the order that leaves output
 * (t, i) in lane 4t + i. About 60 vector ops for 16 outputs, where the permutation, the halves, the hadds and the
 * bias's inserts took about 90 (docs/PERFORMANCE.md "At scale" §3: the down projection's 6 steps an output). */
static inline void i8p_fin16(const __m512 *acc, const float *bm, float *y, size_t ldy) {
    static const int ord[16] = {0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15};
    __m512 v[8], w[4], z[2];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        const __m512 a = acc[ord[2 * k]], b = acc[ord[2 * k + 1]];
        v[k] = _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x44), _mm512_shuffle_ps(a, b, 0xEE));
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0x88), _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0xDD));
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++)
        z[k] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], 0x88), _mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], 0xDD));
    const __m512 f = _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], 0x88), _mm512_shuffle_ps(z[0], z[1], 0xDD));
    /* bm rows' 4 tokens as [row][token], transposed to [token][row] by the same index pattern as i8p_pi */
    __m512 b = _mm512_castps128_ps512(_mm_loadu_ps(bm));
    b = _mm512_insertf32x4(b, _mm_loadu_ps(bm + I8P_TB), 1);
    b = _mm512_insertf32x4(b, _mm_loadu_ps(bm + 2 * I8P_TB), 2);
    b = _mm512_insertf32x4(b, _mm_loadu_ps(bm + 3 * I8P_TB), 3);
    const __m512 o = _mm512_add_ps(f, _mm512_permutexvar_ps(i8p_pi(), b));
    _mm_storeu_ps(y, _mm512_castps512_ps128(o));
    _mm_storeu_ps(y + ldy, _mm512_extractf32x4_ps(o, 1));
    _mm_storeu_ps(y + 2 * ldy, _mm512_extractf32x4_ps(o, 2));
    _mm_storeu_ps(y + 3 * ldy, _mm512_extractf32x4_ps(o, 3));
}

/* One row's bias lanes (accb, lane l = group % 8) for TT x 16 tokens: st [group][I8P_TB] the tokens' group sums
 * from the first of them, bi the row's ng biases; bm[t] = the lane tree of token t's 8 lanes. Each lane the same
 * FMAs in group order as i8_bias, 16 tokens a vector. */
static inline __attribute__((always_inline)) void i8p_bias_lanes(const float *bi, int ng, const float *st, const int TT,
                                                                   float *bm) {
    __m512 v[2][8];
#pragma GCC unroll 2
    for (int c = 0; c < TT; c++)
#pragma GCC unroll 8
        for (int l = 0; l < 8; l++) v[c][l] = _mm512_setzero_ps();
    int j = 0;
    for (; j + 8 <= ng; j += 8)
#pragma GCC unroll 8
        for (int l = 0; l < 8; l++) {
            const __m512 b = _mm512_set1_ps(bi[j + l]);
#pragma GCC unroll 2
            for (int c = 0; c < TT; c++)
                v[c][l] = _mm512_fmadd_ps(b, _mm512_load_ps(st + (size_t)(j + l) * I8P_TB + 16 * c), v[c][l]);
        }
    for (int l = 0; j + l < ng; l++) {
        const __m512 b = _mm512_set1_ps(bi[j + l]);
        for (int c = 0; c < TT; c++) v[c][l] = _mm512_fmadd_ps(b, _mm512_load_ps(st + (size_t)(j + l) * I8P_TB + 16 * c), v[c][l]);
    }
#pragma GCC unroll 2
    for (int c = 0; c < TT; c++)
        _mm512_store_ps(bm + 16 * c, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(v[c][0], v[c][1]), _mm512_add_ps(v[c][2], v[c][3])),
                                                   _mm512_add_ps(_mm512_add_ps(v[c][4], v[c][5]), _mm512_add_ps(v[c][6], v[c][7]))));
}

/* The tile: rows 0..3 of the block (unpacked codes U: [step][row][lo 64 | hi 64]) against TT tokens (xp, one
 * token every xs bytes: [step][even 64 | odd 64], permuted), over ns steps; products P: [token][row][4 ns]
 * floats (one pair every 4 * I8P_KC floats); accumulators in accm [token][row], zero when first. */
static inline __attribute__((always_inline)) void i8p_tile(const uint8_t *U, const uint8_t *xp, size_t xs,
                                                             const float *P, int ns, __m512 *accm, int first,
                                                             const int TT, const float *bm, float *y, size_t ldy) {
    __m512 acc[4][I8_RB];
    for (int j = 0; j < TT; j++)
#pragma GCC unroll 4
        for (int i = 0; i < I8_RB; i++) acc[j][i] = first ? _mm512_setzero_ps() : accm[j * I8_RB + i];
    const __m512i z = _mm512_setzero_si512();
    for (int s = 0; s < ns; s++) {
        __m512i lo[I8_RB], hi[I8_RB];
#pragma GCC unroll 4
        for (int i = 0; i < I8_RB; i++) {
            lo[i] = _mm512_load_si512(U + ((size_t)s * I8_RB + (size_t)i) * 128);
            hi[i] = _mm512_load_si512(U + ((size_t)s * I8_RB + (size_t)i) * 128 + 64);
        }
#pragma GCC unroll 4
        for (int j = 0; j < TT; j++) {
            const uint8_t *x = xp + (size_t)j * xs + (size_t)s * 128;
            const __m512i xe = _mm512_load_si512(x), xo = _mm512_load_si512(x + 64);
#pragma GCC unroll 4
            for (int i = 0; i < I8_RB; i++) {
                const __m512 sd = _mm512_broadcast_f32x4(_mm_load_ps(P + (size_t)(j * I8_RB + i) * (4 * I8P_KC) + 4 * s));
                acc[j][i] = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, lo[i], xe), hi[i], xo)), sd, acc[j][i]);
            }
        }
    }
    if (TT == 4 && bm) { /* the last chunk of a whole tile: its outputs straight from the registers */
        i8p_fin16(&acc[0][0], bm, y, ldy);
        return;
    }
    for (int j = 0; j < TT; j++)
#pragma GCC unroll 4
        for (int i = 0; i < I8_RB; i++) accm[j * I8_RB + i] = acc[j][i];
}

/* One row block of i8p_rows: rows [r, r+nr) (nr <= 4) against tokens [t0, t0+nt) (nt <= I8P_TB) of a q4 matrix with
 * S >= 1 full steps, its state in the workspace. */
typedef struct {
    const tn_mat *w;
    const kern_act *a;
    const i8_blk *B;
    const uint8_t *xp;  /* the tokens' permuted q4 codes ([token][step][128]) */
    uint8_t *U;         /* a chunk's unpacked codes: [step][row][lo 64 | hi 64] */
    float *P;           /* a tile's scale products: [token][row][4 I8P_KC] */
    __m512 *accm;       /* [token][row] accumulators between chunks */
    float *y;
    size_t ldy, xs, pf; /* xs: bytes per token of xp; pf: the codes' prefetch distance */
    int r, nr, t0, nt, S;
    int fast; /* no short step, 4 rows and the transposed group sums: bm holds the bias lanes */
} i8p_rb;

/* The bias lanes of the block's 4 rows for all its tokens into bm ([row][I8P_TB]), from st (the tokens' group sums
 * transposed, [group][I8P_TB tokens]): each row's lanes for 32 tokens a pass (two 16-token vectors), lane l =
 * group % 8, the same FMAs in the same order as i8_fin4; then the lane tree as vector adds. Computed first, so that
 * a whole tile's last chunk writes its outputs from its registers (i8p_fin16). */
static void i8p_bias_block(const i8p_rb *R, const float *st, float (*bm)[I8P_TB]) {
    const i8_blk *B = R->B;
    const int ng = B->ng;
    for (int i = 0; i < I8_RB; i++) {
        float bi[I8P_MAXGT];
        i8_bias_f32(DT_Q4, B, R->w, R->r, i, bi);
        int t = 0; /* 32 tokens a pass where there are: each bias broadcast once for both halves */
        for (; t + 16 < R->nt; t += 32) i8p_bias_lanes(bi, ng, st + t, 2, bm[i] + t);
        if (t < R->nt) i8p_bias_lanes(bi, ng, st + t, 1, bm[i] + t);
    }
}

/* Steps s0 .. s0+ns of the block's rows, unpacked and permuted into U (once for all the tokens). */
static void i8p_unpack(const i8p_rb *R, const uint8_t *const *qr, int s0, int ns) {
    const __m512i pi = i8p_pi(), m4 = _mm512_set1_epi8(15);
    for (int s = 0; s < ns; s++)
#pragma GCC unroll 4
        for (int i = 0; i < I8_RB; i++) {
            const uint8_t *q = qr[i] + (size_t)(s0 + s) * 64;
            _mm_prefetch((const char *)q + R->pf, I8_PFH);
            const __m512i c = _mm512_permutexvar_epi32(pi, _mm512_loadu_si512(q));
            uint8_t *u = R->U + ((size_t)s * I8_RB + (size_t)i) * 128;
            _mm512_store_si512(u, _mm512_and_si512(c, m4));
            _mm512_store_si512(u + 64, _mm512_and_si512(_mm512_srli_epi16(c, 4), m4));
        }
}

/* The chunk of steps s0 .. s0+ns for all the block's tokens, 4 at a time: their scale products into P, then the
 * register tile; the last chunk of a fast block writes whole tiles' outputs (bm: the bias lanes). */
static void i8p_chunk(const i8p_rb *R, int s0, int ns, float (*bm)[I8P_TB]) {
    const i8_blk *B = R->B;
    const int b0 = 4 * s0, nbk = 4 * ns, nk = (nbk + 15) / 16; /* the chunk's blocks, 16 a vector */
    __m512 sfb[I8_RB][I8P_KC / 4];
    __mmask16 mks[I8P_KC / 4];
    for (int k = 0; k < nk; k++) mks[k] = nbk - 16 * k >= 16 ? (__mmask16)0xffff : tail_mask(nbk - 16 * k);
    for (int i = 0; i < I8_RB; i++)
        for (int k = 0; k < nk; k++) sfb[i][k] = i8p_sfb(B->sf[i], B->gsh, b0 + 16 * k, nbk - 16 * k);
    const int fin = R->fast && s0 + ns == R->S, first = s0 == 0;
    for (int tj = 0; tj < R->nt; tj += 4) {
        const int tt = R->nt - tj < 4 ? R->nt - tj : 4;
        for (int j = 0; j < tt; j++) {
            const float *d = R->a->d + (size_t)(R->t0 + tj + j) * (size_t)B->nb + b0;
            for (int k = 0; k < nk; k++) {
                const __m512 dv = _mm512_maskz_loadu_ps(mks[k], d + 16 * k);
                float *pj = R->P + (size_t)(j * I8_RB) * (4 * I8P_KC) + 16 * k;
#pragma GCC unroll 4
                for (int i = 0; i < I8_RB; i++)
                    _mm512_store_ps(pj + (size_t)i * (4 * I8P_KC), _mm512_mul_ps(sfb[i][k], dv));
            }
        }
        const uint8_t *x = R->xp + (size_t)tj * R->xs + (size_t)s0 * 128;
        __m512 *am = R->accm + (size_t)tj * I8_RB;
        float *yt = R->y + (size_t)(R->t0 + tj) * R->ldy + (size_t)R->r;
        switch (tt) {
        case 4: i8p_tile(R->U, x, R->xs, R->P, ns, am, first, 4, fin ? bm[0] + tj : NULL, yt, R->ldy); break;
        case 3: i8p_tile(R->U, x, R->xs, R->P, ns, am, first, 3, NULL, yt, R->ldy); break;
        case 2: i8p_tile(R->U, x, R->xs, R->P, ns, am, first, 2, NULL, yt, R->ldy); break;
        default: i8p_tile(R->U, x, R->xs, R->P, ns, am, first, 1, NULL, yt, R->ldy); break;
        }
    }
}

/* The outputs not written by i8p_chunk, from the accumulators (permuted back to canonical lane order): a fast
 * block's short last tile with its bias lanes bm, a whole block without them (i8_fin4's sums), or row by row
 * (kernels_tile_i8.h's i8_out; bi: a row's biases in the workspace). */
static void i8p_rest(const i8p_rb *R, float (*bm)[I8P_TB], float *bi) {
    const i8_blk *B = R->B;
    const __m512i pi = i8p_pi();
    if (R->fast) {
        for (int t = R->nt / 4 * 4; t < R->nt; t++) { /* past the whole tiles finished in i8p_tile */
            __m256 h[I8_RB];
#pragma GCC unroll 4
            for (int i = 0; i < I8_RB; i++) h[i] = i8_half(_mm512_permutexvar_ps(pi, R->accm[t * I8_RB + i]));
            const __m128 b = _mm_setr_ps(bm[0][t], bm[1][t], bm[2][t], bm[3][t]);
            _mm_storeu_ps(R->y + (size_t)(R->t0 + t) * R->ldy + (size_t)R->r, _mm_add_ps(i8_tree4(h[0], h[1], h[2], h[3]), b));
        }
        return;
    }
    for (int t = 0; t < R->nt; t++) /* in place: the next row block starts its accumulators afresh */
        for (int i = 0; i < I8_RB; i++) R->accm[t * I8_RB + i] = _mm512_permutexvar_ps(pi, R->accm[t * I8_RB + i]);
    __m512(*acc)[I8_RB][I8_PARTS] = (__m512(*)[I8_RB][I8_PARTS])(void *)R->accm; /* [token][row], one part */
    if (R->S * 128 == B->cols && R->nr == I8_RB) { /* no short step: the 4 rows' sums at once */
        i8_fin4(DT_Q4, B, R->w, R->a, R->r, R->t0, R->nt, acc, R->y, R->ldy);
        return;
    }
    for (int i = 0; i < R->nr; i++) {
        float a16[16];
        i8_bias_f32(DT_Q4, B, R->w, R->r, i, bi);
        for (int t = 0; t < R->nt; t++) {
            const size_t tt = (size_t)(R->t0 + t);
            i8_store(acc[t][i], a16);
            R->y[tt * R->ldy + (size_t)(R->r + i)] = i8_out(DT_Q4, B, R->a, bi, i, tt, R->S * 128, a16);
        }
    }
}

/* Rows [r, r+nr) against tokens [t0, t0+nt) (i8p_rb); st: the tokens' group sums transposed, or NULL (too many
 * groups for that pass). */
static void i8p_rows(const tn_mat *w, const kern_act *a, uint8_t *ws, const float *st, float *y, size_t ldy, int r,
                     int nr, int t0, int nt) {
    i8_blk *B = (i8_blk *)(void *)(ws + I8P_WS_BLK);
    i8_blk_init(B, DT_Q4, w, r, nr);
    const uint8_t *qr[I8_RB] = {B->qr[0], B->qr[1], B->qr[2], B->qr[3]}; /* the stores to U may alias B */
    const int S = B->cols / 128;
    i8p_rb R = {.w = w, .a = a, .B = B, .xp = ws, .U = ws + I8P_WS_U, .P = (float *)(void *)(ws + I8P_WS_P),
                .accm = (__m512 *)(void *)(ws + I8P_WS_ACC), .y = y, .ldy = ldy, .xs = (size_t)S * 128,
                .pf = (size_t)I8_PFB * I8_RB * (size_t)B->cols / 2, .r = r, .nr = nr, .t0 = t0, .nt = nt, .S = S};
    R.fast = S * 128 == B->cols && nr == I8_RB && st;
    _Alignas(64) float bm[I8_RB][I8P_TB];
    if (R.fast) i8p_bias_block(&R, st, bm);
    for (int s0 = 0; s0 < S; s0 += I8P_KC) {
        const int ns = S - s0 < I8P_KC ? S - s0 : I8P_KC;
        i8p_unpack(&R, qr, s0, ns);
        i8p_chunk(&R, s0, ns, bm);
    }
    i8p_rest(&R, bm, (float *)(void *)(ws + I8P_WS_BI));
}

/* kernels_avx512.h: blocks of tokens whose permuted codes fit I8P_XB bytes. */
int kern_avx512_q4_prefill(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    if (a->n_tok < 2 || w->cols < 128 || w->cols > I8P_XB / 2) return -1;
    uint8_t *ws = i8p_ws();
    if (!ws) return -1;
    const int cols = w->cols, S = cols / 128;
    int tb = I8P_XB / (S * 128);
    tb = tb > I8P_TB ? I8P_TB : tb;
    { /* blocks of about equal size, whole tiles where possible (an expert's 33 tokens: 20 + 13, not 32 + 1) */
        const int nblk = (a->n_tok + tb - 1) / tb, even = ((a->n_tok + nblk - 1) / nblk + 3) / 4 * 4;
        tb = even < tb ? even : tb;
    }
    uint8_t *xp = ws;
    float *st = (float *)(void *)(ws + I8P_WS_ST);
    const int g = w->group, ng = cols / g, nb = cols / 32, ns = nb + nb / 2 + nb / 4;
    const size_t soff = g == 32 ? 0 : g == 64 ? (size_t)nb : (size_t)(nb + nb / 2);
    const __m512i pi = i8p_pi();
    for (int t0 = 0; t0 < a->n_tok; t0 += tb) {
        const int nt = a->n_tok - t0 < tb ? a->n_tok - t0 : tb;
        if (ng <= I8P_MAXGT) /* the tokens' group sums, transposed, zero past nt */
            for (int j = 0; j < ng; j++)
                for (int t = 0; t < (nt + 31) / 32 * 32; t++) /* i8p_bias_lanes: 32 a pass */
                    st[j * I8P_TB + t] = t < nt ? a->s[(size_t)(t0 + t) * (size_t)ns + soff + (size_t)j] : 0.0f;
        for (int t = 0; t < nt; t++)
            for (int s = 0; s < S; s++) {
                const int8_t *q = a->q4 + (size_t)(t0 + t) * (size_t)cols + (size_t)s * 128;
                uint8_t *o = xp + ((size_t)t * (size_t)S + (size_t)s) * 128;
                _mm512_store_si512(o, _mm512_permutexvar_epi32(pi, _mm512_loadu_si512(q)));
                _mm512_store_si512(o + 64, _mm512_permutexvar_epi32(pi, _mm512_loadu_si512(q + 64)));
            }
        for (int r = r0; r < r1; r += I8_RB)
            i8p_rows(w, a, ws, ng <= I8P_MAXGT ? st : NULL, y, ldy, r, r1 - r < I8_RB ? r1 - r : I8_RB, t0, nt);
    }
    return 0;
}
#else
typedef int kern_avx512_i8p_none; /* not an x86-64 build: kernels_avx512.c has no table either */
#endif
