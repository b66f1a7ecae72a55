/*
 * kernels_avx2.c — the AVX2 + FMA + F16C table (compiled with -mavx2 -mfma -mf16c; x86-64 only).
 *
 * The blocking every table shares (kernels_tile.h's driver; this file gives its pieces): columns dequantised
 * chunk by chunk into f32 and reused by every token of a block. Each y[t][r] keeps one 8-lane FMA accumulator (lane = column % 8) across all chunks; a
 * ragged tail is read with masked loads (zeros in the unused lanes), and the lanes are combined as
 * ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)). So the result depends only on the column count -- never on
 * n_tok, the row range or the thread split (kernels.h) -- and differs from the oracle only by FMA
 * rounding. Small vector kernels are the oracle's C code compiled for this ISA.
 *
 * Sections: dequantisation, matmul, the int8-activation matmul and its one-token loops, small vector kernels, the
 * table.
 */
#include "kernels/kernels.h"
#include "kernels/kernels_plain.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant/quant.h"

typedef __m256 tile_acc;
#include "kernels/kernels_tile.h"

/* ---- dequantisation --------------------------------------------------------------------------- */

static inline __m256 scale8(const sl_mat *m, size_t i) { return _mm256_set1_ps(q_scale_at(m->scales, m->sdtype, i)); }
static inline __m256 bias8(const sl_mat *m, size_t i) { return _mm256_set1_ps(q_scale_at(m->biases, m->sdtype, i)); }

/* [nc] f32 weights of row r from column c0: a pointer into m for f32, else dequantised into buf. */
static inline __attribute__((always_inline)) const float *tile_load(sl_dtype dt, const sl_mat *m, int r, int c0,
                                                                      int nc, float *buf) {
    const size_t off = (size_t)r * (size_t)m->cols + (size_t)c0;
    if (dt == DT_F32) return (const float *)m->data + off;
    if (dt == DT_F16 || dt == DT_BF16) {
        const uint16_t *s = (const uint16_t *)m->data + off;
        int i = 0;
        for (; i + 8 <= nc; i += 8) {
            __m128i h = _mm_loadu_si128((const __m128i *)(s + i));
            __m256 f = dt == DT_F16 ? _mm256_cvtph_ps(h)
                                    : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
            _mm256_storeu_ps(buf + i, f);
        }
        for (; i < nc; i++) {
            uint32_t u = dt == DT_F16 ? 0 : (uint32_t)s[i] << 16;
            float f;
            memcpy(&f, &u, 4);
            buf[i] = dt == DT_F16 ? f16_to_f32(s[i]) : f;
        }
        return buf;
    }
    const int g = m->group;
    const size_t sidx = off / (size_t)g;
    if (dt == DT_Q8) {
        const uint8_t *q = (const uint8_t *)m->data + off;
        for (int j = 0; j < nc; j += g) {
            __m256 sc = scale8(m, sidx + (size_t)(j / g)), bi = bias8(m, sidx + (size_t)(j / g));
            for (int i = j; i < j + g; i += 8) {
                __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + i)));
                _mm256_storeu_ps(buf + i, _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), sc, bi));
            }
        }
    } else if (dt == DT_Q4) {
        const uint8_t *q = (const uint8_t *)m->data + off / 2;
        const __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28), m4 = _mm256_set1_epi32(15);
        for (int j = 0; j < nc; j += g) {
            __m256 sc = scale8(m, sidx + (size_t)(j / g)), bi = bias8(m, sidx + (size_t)(j / g));
            for (int i = j; i < j + g; i += 8) {
                uint32_t w;
                memcpy(&w, q + i / 2, 4);
                __m256i v = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w), sh), m4);
                _mm256_storeu_ps(buf + i, _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), sc, bi));
            }
        }
    } else { /* DT_Q3: 8 codes per 3 bytes; the 8 levels fit one register */
        const uint8_t *q = (const uint8_t *)m->data + off / 8 * 3;
        const __m256i sh = _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21), m3 = _mm256_set1_epi32(7);
        const __m256 lv = _mm256_loadu_ps(Q3_LEVELS);
        for (int j = 0; j < nc; j += g) {
            __m256 sc = scale8(m, sidx + (size_t)(j / g));
            for (int i = j; i < j + g; i += 8) {
                const uint8_t *p = q + (size_t)i / 8 * 3;
                int w = (int)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16);
                __m256i v = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(w), sh), m3);
                _mm256_storeu_ps(buf + i, _mm256_mul_ps(_mm256_permutevar8x32_ps(lv, v), sc));
            }
        }
    }
    return buf;
}

/* ---- matmul: kernels_tile.h's driver over these pieces --------------------------------------- */

static inline __m256i tail_mask(int n) { /* lanes < n */
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline void tile_dot4(const float *const *wr, const float *x, int n, __m256 *acc) {
    __m256 a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    int c = 0;
    for (; c + 8 <= n; c += 8) {
        __m256 xv = _mm256_loadu_ps(x + c);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(wr[0] + c), xv, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(wr[1] + c), xv, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(wr[2] + c), xv, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(wr[3] + c), xv, a3);
    }
    if (c < n) {
        __m256i mk = tail_mask(n - c);
        __m256 xv = _mm256_maskload_ps(x + c, mk);
        a0 = _mm256_fmadd_ps(_mm256_maskload_ps(wr[0] + c, mk), xv, a0);
        a1 = _mm256_fmadd_ps(_mm256_maskload_ps(wr[1] + c, mk), xv, a1);
        a2 = _mm256_fmadd_ps(_mm256_maskload_ps(wr[2] + c, mk), xv, a2);
        a3 = _mm256_fmadd_ps(_mm256_maskload_ps(wr[3] + c, mk), xv, a3);
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

static inline float lanes_sum(__m256 v) {
    float a[8];
    _mm256_storeu_ps(a, v);
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

static inline float tile_sum(__m256 v) { return lanes_sum(v); }
static inline __m256 tile_zero(void) { return _mm256_setzero_ps(); }
static inline int tile_one_token(sl_dtype dt, const sl_mat *w, const float *x, float *y, int r0, int r1) { return 0; }

/* ---- int8-activation matmul (kernels.h: kern_matmul_act) -------------------------------------- */

#include "kernels/kernels_i8_x86.h"

/* The exact integer lane sums with maddubs (u8 x s8 pairs summed into int16, saturating) + madd (int16 pairs into
 * int32), kept below int16's limit:
 * q4: per 32-bit lane the sum of 8 products code * x (4 low-nibble ones with xe, 4 high with xo): each maddubs pair
 *     is at most 2 x 15 x 127, so the two add in int16 before one madd;
 * q8: codes reach 255 (2 x 255 x 127 overflows int16), so with s = code - 128 (code ^ 0x80) each lane is
 *     sum s * x + 128 sum x; maddubs(|s|, sign(x, s)) takes s * x as |s| (<= 128) times x with s's sign, whose
 *     pairs are at most 2 x 128 x 127, and xs128 (128 x the lane's sum of x) is per token, shared by the rows. */
static inline __m256i i8_dot4(__m256i lo, __m256i xe, __m256i hi, __m256i xo) {
    return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo)),
                             _mm256_set1_epi16(1));
}
static inline __m256i i8_dot8(__m256i abs_s, __m256i s, __m256i x, __m256i xs128) {
    return _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(abs_s, _mm256_sign_epi8(x, s)), _mm256_set1_epi16(1)),
                            xs128);
}
static inline __m256i i8_xs128(__m256i x) {
    return _mm256_slli_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), x), _mm256_set1_epi16(1)), 7);
}

/* 16 lanes as two halves of 8: half h holds lanes 8h .. 8h+7 */
static inline __attribute__((always_inline)) void i8_block(sl_dtype dt, const sl_mat *w, const kern_act *a,
                                                             float *y, size_t ldy, int r, int nr, int t0, int nt) {
    i8_blk B;
    i8_blk_init(&B, dt, w, r, nr);
    const int cols = B.cols, nb = B.nb, gsh = B.gsh, step = dt == DT_Q8 ? 64 : 128;
    __m256 acc[I8_KTOK][I8_RB][2];
    for (int t = 0; t < nt; t++)
        for (int i = 0; i < I8_RB; i++) acc[t][i][0] = acc[t][i][1] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(15);
    /* the same place I8_PFB row blocks further on (rows are contiguous, a block is I8_RB rows) */
    const size_t pf = (size_t)I8_PFB * I8_RB * (size_t)cols / (dt == DT_Q4 ? 2 : 1);
    int c0 = 0;
    /* one row's codes at a time, dotted with every token (AVX2 has 16 ymm registers: holding the row block's
     * codes as well as the accumulators would spill) */
    for (; c0 + step <= cols; c0 += step) {
        const int k = c0 / 32;
        for (int h = 0; h < 2; h++) { /* q8: lanes of half h are block k+h; q4: blocks k+2h and k+2h+1 */
            __m256i xs[I8_KTOK]; /* q8: 128 x each lane's sum of x, per token, for every row */
            for (int t = 0; dt == DT_Q8 && t < nt; t++)
                xs[t] = i8_xs128(_mm256_loadu_si256((const __m256i *)(a->q + (size_t)(t0 + t) * (size_t)cols + c0 + 32 * h)));
            for (int i = 0; i < I8_RB; i++) {
                __m256i lo, hi;
                __m256 sv;
                const uint8_t *p = B.qr[i] + (dt == DT_Q8 ? c0 : c0 / 2) + 32 * h;
                if (!h) _mm_prefetch((const char *)p + pf, I8_PFH); /* one 64-byte line per step */
                if (dt == DT_Q8) { /* hi: s = code - 128, lo: |s| */
                    hi = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)p), _mm256_set1_epi8((char)0x80));
                    lo = _mm256_abs_epi8(hi);
                    sv = _mm256_set1_ps(B.sf[i][(k + h) >> gsh]);
                } else {
                    __m256i c = _mm256_loadu_si256((const __m256i *)p);
                    lo = _mm256_and_si256(c, m4);
                    hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), m4);
                    sv = gsh ? _mm256_set1_ps(B.sf[i][(k + 2 * h) >> gsh]) : i8_pair(&B.sf[i][k + 2 * h]);
                }
                for (int t = 0; t < nt; t++) {
                    const size_t tt = (size_t)(t0 + t);
                    const float *d = a->d + tt * (size_t)nb + k;
                    __m256i I;
                    __m256 dv;
                    if (dt == DT_Q8) {
                        __m256i xv = _mm256_loadu_si256((const __m256i *)(a->q + tt * (size_t)cols + c0 + 32 * h));
                        I = i8_dot8(lo, hi, xv, xs[t]);
                        dv = _mm256_set1_ps(d[h]);
                    } else {
                        const int8_t *xq = a->q4 + tt * (size_t)cols + c0 + 32 * h;
                        I = i8_dot4(lo, _mm256_loadu_si256((const __m256i *)xq), hi,
                                    _mm256_loadu_si256((const __m256i *)(xq + 64)));
                        dv = i8_pair(d + 2 * h);
                    }
                    acc[t][i][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I), _mm256_mul_ps(sv, dv), acc[t][i][h]);
                }
            }
        }
    }
    if (c0 == cols && nr == I8_RB) { /* no short step: the 4 rows' sums at once, in the same order */
        __m256 b[I8_KTOK][I8_RB];
        for (int i = 0; i < I8_RB; i++) { /* one row's biases at a time: 8 KB of frame, not 32 */
            float bi[I8_MAXG];
            i8_row_f32(w, w->biases, r + i, B.ng, bi);
            for (int t = 0; t < nt; t++) b[t][i] = i8_bias(bi, a->s + (size_t)(t0 + t) * (size_t)B.ns + B.soff, B.ng);
        }
        for (int t = 0; t < nt; t++) {
            const size_t tt = (size_t)(t0 + t);
            __m256 hv[I8_RB];
            for (int i = 0; i < I8_RB; i++) hv[i] = _mm256_add_ps(acc[t][i][0], acc[t][i][1]); /* h[l] = acc[l] + acc[l + 8] */
            _mm_storeu_ps(y + tt * ldy + (size_t)r,
                          _mm_add_ps(i8_tree4(hv[0], hv[1], hv[2], hv[3]), i8_tree4(b[t][0], b[t][1], b[t][2], b[t][3])));
        }
        return;
    }
    for (int i = 0; i < nr; i++) {
        float bi[I8_MAXG], a16[16];
        i8_row_f32(w, w->biases, r + i, B.ng, bi);
        for (int t = 0; t < nt; t++) {
            const size_t tt = (size_t)(t0 + t);
            _mm256_storeu_ps(a16, acc[t][i][0]);
            _mm256_storeu_ps(a16 + 8, acc[t][i][1]);
            i8_out(dt, &B, w, a, bi, i, tt, c0, a16, y + tt * ldy + (size_t)(r + i));
        }
    }
}

/* ---- one token (decode): 4 rows with everything in registers ---------------------------------- */

/* i8_block's arithmetic for nt == 1, 4 whole rows and no short step: the row loop unrolled, the 8 accumulators
 * (4 rows x 2 halves) in registers, the token's activation bytes and block scales loaded once per half for the 4
 * rows, and gsh a constant in each caller (groups of 32, 64, 128), so a row's scale is one broadcast with no branch
 * in the loop (the generic loop kept its accumulators in memory and reloaded x and d per row). Per row and half:
 * q4: 32 code bytes unpacked (3 ops) and summed exactly (i8_dot4: 4); q8: 32 bytes as |s| and sign (3) and
 * i8_dot8 (3); then the scale product, the conversion and the FMA. */

/* Prefetches n bytes from p on, one line at a time, into L2. */
static inline void i8_pf_lines(const void *p, size_t n) {
    for (size_t o = 0; o < n; o += 64) _mm_prefetch((const char *)p + o, I8_PFH);
}

/* The row block's scales (B) and the scales and biases of the block I8_PFB blocks on: their own streams, prefetched
 * as the codes are. */
static inline void vec4_begin(i8_blk *B, sl_dtype dt, const sl_mat *w, int r) {
    i8_blk_init(B, dt, w, r, I8_RB);
    const int rp = r + I8_PFB * I8_RB;
    if (rp + I8_RB <= w->rows) {
        const size_t ss = w->sdtype == DT_F32 ? 4 : 2, o = (size_t)rp * (size_t)B->ng * ss,
                     n = (size_t)I8_RB * (size_t)B->ng * ss;
        i8_pf_lines((const char *)w->scales + o, n);
        i8_pf_lines((const char *)w->biases + o, n);
    }
}

/* y[0..3] as i8_block's end with no short step: h[l] = acc[l] + acc[l + 8], the lane trees, the bias lanes. */
static inline void vec4_end(const i8_blk *B, const sl_mat *w, const kern_act *a, int r, size_t tt, __m256 h0, __m256 h1,
                            __m256 h2, __m256 h3, float *y) {
    const float *xs = a->s + tt * (size_t)B->ns + B->soff;
    __m256 b[I8_RB];
    for (int i = 0; i < I8_RB; i++) {
        float bi[I8_MAXG];
        i8_row_f32(w, w->biases, r + i, B->ng, bi);
        b[i] = i8_bias(bi, xs, B->ng);
    }
    _mm_storeu_ps(y, _mm_add_ps(i8_tree4(h0, h1, h2, h3), i8_tree4(b[0], b[1], b[2], b[3])));
}

/* a row's scale for block b, as a vector: q4 lanes cover blocks b and b+1 (a pair when groups are 32), q8 block b */
#define VEC4_SV(sp, b, pair) (gsh ? _mm256_set1_ps((sp)[(b) >> gsh]) : (pair) ? i8_pair((sp) + (b)) : _mm256_set1_ps((sp)[b]))

static inline __attribute__((always_inline)) void q4_vec4(const sl_mat *w, const kern_act *a, float *y, int r, size_t tt,
                                                            const int gsh) {
    i8_blk B;
    vec4_begin(&B, DT_Q4, w, r);
    const int cols = B.cols;
    const int8_t *xq = a->q4 + tt * (size_t)cols;
    const float *d = a->d + tt * (size_t)B.nb;
    const uint8_t *q0 = B.qr[0], *q1 = B.qr[1], *q2 = B.qr[2], *q3 = B.qr[3];
    const float *s0 = B.sf[0], *s1 = B.sf[1], *s2 = B.sf[2], *s3 = B.sf[3];
    const size_t pf = (size_t)I8_PFB * I8_RB * (size_t)cols / 2; /* as i8_block */
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00, a31 = a00;
#define Q4V_ROW(qp, sp, acc, h)                                                                                       \
    do {                                                                                                              \
        const __m256i c = _mm256_loadu_si256((const __m256i *)(qp + o + 32 * h));                                    \
        const __m256i I = i8_dot4(_mm256_and_si256(c, m4), xe, _mm256_and_si256(_mm256_srli_epi16(c, 4), m4), xo);   \
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I), _mm256_mul_ps(VEC4_SV(sp, k + 2 * h, 1), dv), acc);              \
    } while (0)
    /* row after row, each row's two accumulators taking the same FMAs in the same order: the block is read front
     * to back as one stream (kernels_avx512.c i8_rows_1tok says why) */
#define Q4V_ROWS(qp, sp, acc0, acc1)                                                                                  \
    for (int c0 = 0; c0 < cols; c0 += 128) {                                                                          \
        const int k = c0 / 32;                                                                                        \
        const size_t o = (size_t)c0 / 2;                                                                              \
        _mm_prefetch((const char *)(qp + o) + pf, I8_PFH); /* one 64-byte line per step */                            \
        { /* half 0: blocks k, k+1 */                                                                                 \
            const __m256i xe = _mm256_loadu_si256((const __m256i *)(xq + c0)),                                        \
                          xo = _mm256_loadu_si256((const __m256i *)(xq + c0 + 64));                                   \
            const __m256 dv = i8_pair(d + k);                                                                         \
            Q4V_ROW(qp, sp, acc0, 0);                                                                                 \
        }                                                                                                             \
        { /* half 1: blocks k+2, k+3 */                                                                               \
            const __m256i xe = _mm256_loadu_si256((const __m256i *)(xq + c0 + 32)),                                   \
                          xo = _mm256_loadu_si256((const __m256i *)(xq + c0 + 96));                                   \
            const __m256 dv = i8_pair(d + k + 2);                                                                     \
            Q4V_ROW(qp, sp, acc1, 1);                                                                                 \
        }                                                                                                             \
    }
    Q4V_ROWS(q0, s0, a00, a01)
    Q4V_ROWS(q1, s1, a10, a11)
    Q4V_ROWS(q2, s2, a20, a21)
    Q4V_ROWS(q3, s3, a30, a31)
#undef Q4V_ROWS
#undef Q4V_ROW
    vec4_end(&B, w, a, r, tt, _mm256_add_ps(a00, a01), _mm256_add_ps(a10, a11), _mm256_add_ps(a20, a21),
             _mm256_add_ps(a30, a31), y);
}

static inline __attribute__((always_inline)) void q8_vec4(const sl_mat *w, const kern_act *a, float *y, int r, size_t tt,
                                                            const int gsh) {
    i8_blk B;
    vec4_begin(&B, DT_Q8, w, r);
    const int cols = B.cols;
    const int8_t *xq = a->q + tt * (size_t)cols;
    const float *d = a->d + tt * (size_t)B.nb;
    const uint8_t *q0 = B.qr[0], *q1 = B.qr[1], *q2 = B.qr[2], *q3 = B.qr[3];
    const float *s0 = B.sf[0], *s1 = B.sf[1], *s2 = B.sf[2], *s3 = B.sf[3];
    const size_t pf = (size_t)I8_PFB * I8_RB * (size_t)cols; /* as i8_block */
    const __m256i m80 = _mm256_set1_epi8((char)0x80);
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00, a31 = a00;
#define Q8V_ROW(qp, sp, acc, h)                                                                                       \
    do {                                                                                                              \
        const __m256i sc = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(qp + c0 + 32 * h)), m80);           \
        const __m256i I = i8_dot8(_mm256_abs_epi8(sc), sc, xv, xs);                                                   \
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I), _mm256_mul_ps(VEC4_SV(sp, k + h, 0), dv), acc);                  \
    } while (0)
    /* row after row, as q4_vec4 */
#define Q8V_ROWS(qp, sp, acc0, acc1)                                                                                  \
    for (int c0 = 0; c0 < cols; c0 += 64) {                                                                           \
        const int k = c0 / 32;                                                                                        \
        _mm_prefetch((const char *)(qp + c0) + pf, I8_PFH); /* one 64-byte line per step */                           \
        { /* half 0: block k */                                                                                       \
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + c0)), xs = i8_xs128(xv);                     \
            const __m256 dv = _mm256_set1_ps(d[k]);                                                                   \
            Q8V_ROW(qp, sp, acc0, 0);                                                                                 \
        }                                                                                                             \
        { /* half 1: block k+1 */                                                                                     \
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + c0 + 32)), xs = i8_xs128(xv);                \
            const __m256 dv = _mm256_set1_ps(d[k + 1]);                                                               \
            Q8V_ROW(qp, sp, acc1, 1);                                                                                 \
        }                                                                                                             \
    }
    Q8V_ROWS(q0, s0, a00, a01)
    Q8V_ROWS(q1, s1, a10, a11)
    Q8V_ROWS(q2, s2, a20, a21)
    Q8V_ROWS(q3, s3, a30, a31)
#undef Q8V_ROWS
#undef Q8V_ROW
    vec4_end(&B, w, a, r, tt, _mm256_add_ps(a00, a01), _mm256_add_ps(a10, a11), _mm256_add_ps(a20, a21),
             _mm256_add_ps(a30, a31), y);
}
#undef VEC4_SV

typedef void (*vec4_fn)(const sl_mat *w, const kern_act *a, float *y, int r, size_t tt);
static void q4_vec4_g32(const sl_mat *w, const kern_act *a, float *y, int r, size_t tt) { q4_vec4(w, a, y, r, tt, 0); }
static void q4_vec4_g64(const sl_mat *w, const kern_act *a, float *y, int r, size_t tt) { q4_vec4(w, a, y, r, tt, 1); }
static void q4_vec4_g128(const sl_mat *w, const kern_act *a, float *y, int r, size_t tt) { q4_vec4(w, a, y, r, tt, 2); }
static void q8_vec4_g32(const sl_mat *w, const kern_act *a, float *y, int r, size_t tt) { q8_vec4(w, a, y, r, tt, 0); }
static void q8_vec4_g64(const sl_mat *w, const kern_act *a, float *y, int r, size_t tt) { q8_vec4(w, a, y, r, tt, 1); }
static void q8_vec4_g128(const sl_mat *w, const kern_act *a, float *y, int r, size_t tt) { q8_vec4(w, a, y, r, tt, 2); }

/* i8_block for one dtype, as a function of its own (its ~45 KB frame apart from the one-token kernels' ~42 KB: a
 * thread stack holds one of them at a time; wide_q4_kernel_on_a_small_stack runs on 64 KiB) */
static __attribute__((noinline)) void blk_q8(const sl_mat *w, const kern_act *a, float *y, size_t ldy, int r, int nr,
                                             int t0, int nt) {
    if (nt == 1) i8_block(DT_Q8, w, a, y, ldy, r, nr, t0, 1);
    else i8_block(DT_Q8, w, a, y, ldy, r, nr, t0, nt);
}
static __attribute__((noinline)) void blk_q4(const sl_mat *w, const kern_act *a, float *y, size_t ldy, int r, int nr,
                                             int t0, int nt) {
    if (nt == 1) i8_block(DT_Q4, w, a, y, ldy, r, nr, t0, 1);
    else i8_block(DT_Q4, w, a, y, ldy, r, nr, t0, nt);
}

static inline __attribute__((always_inline)) void i8_mm(sl_dtype dt, const sl_mat *w, const kern_act *a, float *y,
                                                          size_t ldy, int r0, int r1) {
    for (int t0 = 0; t0 < a->n_tok; t0 += I8_KTOK) {
        int nt = a->n_tok - t0 < I8_KTOK ? a->n_tok - t0 : I8_KTOK;
        int r = r0;
        if (nt == 1 && a->cols % (dt == DT_Q8 ? 64 : 128) == 0) { /* decode: whole row blocks one token at a time */
            const int gi = w->group == 32 ? 0 : w->group == 64 ? 1 : 2;
            static const vec4_fn fq4[3] = {q4_vec4_g32, q4_vec4_g64, q4_vec4_g128},
                                 fq8[3] = {q8_vec4_g32, q8_vec4_g64, q8_vec4_g128};
            const vec4_fn f = dt == DT_Q8 ? fq8[gi] : fq4[gi];
            for (; r + I8_RB <= r1; r += I8_RB) f(w, a, y + (size_t)t0 * ldy + (size_t)r, r, (size_t)t0);
        }
        for (; r < r1; r += I8_RB) {
            int nr = r1 - r < I8_RB ? r1 - r : I8_RB;
            (dt == DT_Q8 ? blk_q8 : blk_q4)(w, a, y, ldy, r, nr, t0, nt);
        }
    }
}

static void mmi8_q8(const sl_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    i8_mm(DT_Q8, w, a, y, ldy, r0, r1);
}

static void mmi8_q4(const sl_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    i8_mm(DT_Q4, w, a, y, ldy, r0, r1);
}

/* ---- small vector kernels (the oracle's order) ------------------------------------------------ */

static float dot_v(const float *a, const float *b, int n) {
    __m256 acc = _mm256_setzero_ps();
    int c = 0;
    for (; c + 8 <= n; c += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + c), _mm256_loadu_ps(b + c), acc);
    if (c < n) {
        __m256i mk = tail_mask(n - c);
        acc = _mm256_fmadd_ps(_mm256_maskload_ps(a + c, mk), _mm256_maskload_ps(b + c, mk), acc);
    }
    return lanes_sum(acc);
}

/* ---- table ------------------------------------------------------------------------------------ */

static const kern_ops avx2_ops = {
    .name = "avx2",
    .matmul = TILE_MATMUL,
    .matmul_i8 = {[DT_Q8] = mmi8_q8, [DT_Q4] = mmi8_q4},
    .dot = dot_v,
    .axpy = plain_axpy,
    .rmsnorm = plain_rmsnorm,
    .swiglu = plain_swiglu,
};

const kern_ops *kern_avx2_ops(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? &avx2_ops : NULL;
}

#else
const kern_ops *kern_avx2_ops(void) { return NULL; }
#endif
