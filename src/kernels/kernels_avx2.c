/*
 * kernels_avx2.c — the AVX2 + FMA + F16C table (compiled with -mavx2 -mfma -mf16c; x86-64 only).
 *
 * The blocking every table shares (kernels_tile.h's driver; this file gives its pieces): columns dequantised
 * chunk by chunk into f32 and reused by every token of a block. Each y[t][r] keeps one 8-lane FMA accumulator
 * (lane = column % 8) across all chunks; a ragged tail is read with masked loads (zeros in the unused lanes),
 * and the lanes are combined as ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)). So the result depends only on the column
 * count -- never on n_tok, the row range or the thread split (kernels.h) -- and differs from the oracle only by
 * FMA rounding. Small vector kernels are the oracle's C code compiled for this ISA.
 *
 * Sections: dequantisation, matmul, the int8-activation matmul, small vector kernels, the table.
 */
#include "kernels/kernels.h"
#include "kernels/kernels_plain.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/softmax_common.h"
#include "quant/quant.h"

typedef __m256 tile_acc;
#include "kernels/kernels_tile.h"

/* ---- dequantisation --------------------------------------------------------------------------- */

static inline __m256 scale8(const tn_mat *m, size_t i) { return _mm256_set1_ps(q_scale_at(m->scales, m->sdtype, i)); }
static inline __m256 bias8(const tn_mat *m, size_t i) { return _mm256_set1_ps(q_scale_at(m->biases, m->sdtype, i)); }

/* [nc] f32 weights of row r from column c0: a pointer into m for f32, else dequantised into buf. */
static inline __attribute__((always_inline)) const float *tile_load(dt_type dt, const tn_mat *m, int r, int c0,
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
static inline int tile_one_token(dt_type dt, const tn_mat *w, const float *x, float *y, int r0, int r1) { return 0; }

/* ---- int8-activation matmul (kernels.h: kern_matmul_act): kernels_tile_i8.h's driver over these pieces ---- */

#include "kernels/kernels_i8_x86.h"

/* A step's 16 lanes in two halves of 8 (part h: lanes 8h .. 8h+7, q8 block k+h, q4 blocks k+2h and k+2h+1);
 * one row's codes held at a time (AVX2 has 16 ymm registers: a row block's codes and the activations would
 * spill). */
#define I8_KTOK 16
#define I8_PARTS 2
#define I8_ROWS_OUTER 1
typedef __m256 i8v;
typedef struct {
    __m256i lo, hi; /* q8: |s|, s = code - 128; q4: low, high nibbles */
    __m256 sv;      /* the lanes' scales */
} i8w;
typedef struct {
    __m256i xe, xo; /* q8: the codes, 128 x each lane's sum of them; q4: the even and the odd columns */
    __m256 dv;      /* the lanes' block scales */
} i8x;
#include "kernels/kernels_tile_i8.h"

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

static inline void i8_row_tail(const tn_mat *m, const uint16_t *h, int j, int ng, float *out) {
    for (; j < ng; j++) out[j] = q_scale_at(h, m->sdtype, (size_t)j);
}

static inline __m256 i8_zero(void) { return _mm256_setzero_ps(); }

static inline i8w i8_loadw(dt_type dt, const uint8_t *q, const float *sf, int c0, int h, int gsh) {
    const int k = c0 / 32;
    const uint8_t *p = q + (dt == DT_Q8 ? c0 : c0 / 2) + 32 * h;
    i8w w;
    if (dt == DT_Q8) {
        w.hi = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)p), _mm256_set1_epi8((char)0x80));
        w.lo = _mm256_abs_epi8(w.hi);
        w.sv = _mm256_set1_ps(sf[(k + h) >> gsh]);
    } else {
        const __m256i c = _mm256_loadu_si256((const __m256i *)p), m4 = _mm256_set1_epi8(15);
        w.lo = _mm256_and_si256(c, m4);
        w.hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), m4);
        w.sv = gsh ? _mm256_set1_ps(sf[(k + 2 * h) >> gsh]) : i8_pair(&sf[k + 2 * h]);
    }
    return w;
}

static inline i8x i8_loadx(dt_type dt, const int8_t *xq, const float *d, int c0, int h) {
    const int8_t *p = xq + c0 + 32 * h;
    d += c0 / 32;
    i8x x;
    if (dt == DT_Q8) {
        x.xe = _mm256_loadu_si256((const __m256i *)p);
        x.xo = i8_xs128(x.xe);
        x.dv = _mm256_set1_ps(d[h]);
    } else {
        x.xe = _mm256_loadu_si256((const __m256i *)p);
        x.xo = _mm256_loadu_si256((const __m256i *)(p + 64));
        x.dv = i8_pair(d + 2 * h);
    }
    return x;
}

static inline __m256 i8_fma(dt_type dt, i8w w, i8x x, __m256 acc) {
    const __m256i I = dt == DT_Q8 ? i8_dot8(w.lo, w.hi, x.xe, x.xo) : i8_dot4(w.lo, x.xe, w.hi, x.xo);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(I), _mm256_mul_ps(w.sv, x.dv), acc);
}

static inline void i8_store(const __m256 *acc, float *a16) {
    _mm256_storeu_ps(a16, acc[0]);
    _mm256_storeu_ps(a16 + 8, acc[1]);
}

/* The 4 rows' outputs of each token at once: h[l] = acc[l] + acc[l + 8], the bias lanes of each row (its biases
 * converted once for all the tokens), the lane trees of the 4 by hadd. */
static inline void i8_fin4(dt_type dt, const i8_blk *B, const tn_mat *w, const kern_act *a, int r, int t0, int nt,
                           __m256 (*acc)[I8_RB][I8_PARTS], float *y, size_t ldy) {
    __m256 b[I8_KTOK][I8_RB];
    for (int i = 0; i < I8_RB; i++) { /* one row's biases at a time: 8 KB of frame, not 32 */
        float bi[I8_MAXG];
        i8_bias_f32(dt, B, w, r, i, bi);
        for (int t = 0; t < nt; t++) b[t][i] = i8_bias(bi, a->s + (size_t)(t0 + t) * (size_t)B->ns + B->soff, B->ng);
    }
    for (int t = 0; t < nt; t++) {
        __m256 hv[I8_RB];
        for (int i = 0; i < I8_RB; i++) hv[i] = _mm256_add_ps(acc[t][i][0], acc[t][i][1]);
        _mm_storeu_ps(y + (size_t)(t0 + t) * ldy + (size_t)r,
                      _mm_add_ps(i8_tree4(hv[0], hv[1], hv[2], hv[3]), i8_tree4(b[t][0], b[t][1], b[t][2], b[t][3])));
    }
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

/* ---- attention's softmax ---------------------------------------------------------------------- */

/* glibc's expf as its FMA build __expf_fma computes it (sysdeps/ieee754/flt-32/e_expf.c; an AVX2 + FMA CPU runs that
 * build): kernels_avx512.c expf8_main's steps on 4 floats in double lanes, the table __exp2f_data.tab (N = 32,
 * softmax_common.h) read by a gather. Bitwise expf where -0x1.9d1d9ep6 <= x <= 0x1.62e42ep6 (its main path);
 * exp_lanes takes the rest. */
static inline __m128 expf4_main(__m128 x) {
    const __m256d invln2n = _mm256_set1_pd(0x1.71547652b82fep+5), shift = _mm256_set1_pd(0x1.8p52);
    const __m256d xd = _mm256_cvtps_pd(x);
    __m256d kd = _mm256_fmadd_pd(invln2n, xd, shift);
    const __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, shift);
    const __m256d r = _mm256_fmsub_pd(invln2n, xd, kd);
    const __m256i tb = _mm256_i64gather_epi64((const long long *)(const void *)exp2f_tab,
                                              _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
    const __m256i t = _mm256_add_epi64(tb, _mm256_slli_epi64(ki, 47));
    const __m256d z = _mm256_fmadd_pd(r, _mm256_set1_pd(0x1.c6af84b912394p-20), _mm256_set1_pd(0x1.ebfce50fac4f3p-13));
    __m256d y = _mm256_fmadd_pd(r, _mm256_set1_pd(0x1.62e42ff0c52d6p-6), _mm256_set1_pd(1.0));
    y = _mm256_fmadd_pd(z, _mm256_mul_pd(r, r), y);
    return _mm256_cvtpd_ps(_mm256_mul_pd(y, _mm256_castsi256_pd(t)));
}

/* sc[p] = expf(sc[p] - mx), p < n: expf4_main's lanes; below -0x1.9fe368p6 (and -inf) expf's +0 (its underflow);
 * the rest (NaN, overflow, the band where glibc may set errno) by expf itself. */
static void exp_lanes(float *sc, int n, float mx) {
    const __m128 m = _mm_set1_ps(mx), lo = _mm_set1_ps(-0x1.9d1d9ep6f), hi = _mm_set1_ps(0x1.62e42ep6f);
    const __m128 zlo = _mm_set1_ps(-0x1.9fe368p6f);
    for (int p = 0; p < n; p += 4) {
        const int k = n - p < 4 ? n - p : 4;
        float xs[4] = {0, 0, 0, 0}, ys[4];
        if (k == 4) _mm_storeu_ps(xs, _mm_sub_ps(_mm_loadu_ps(sc + p), m));
        else
            for (int i = 0; i < k; i++) xs[i] = sc[p + i] - mx;
        const __m128 x = _mm_loadu_ps(xs);
        __m128 y = expf4_main(x);
        const int ok = _mm_movemask_ps(_mm_and_ps(_mm_cmp_ps(x, lo, _CMP_GE_OQ), _mm_cmp_ps(x, hi, _CMP_LE_OQ)));
        const int mk = (1 << k) - 1;
        if ((ok & mk) != mk) {
            const __m128 zero = _mm_cmp_ps(x, zlo, _CMP_LT_OQ);
            y = _mm_andnot_ps(zero, y);
            const int rest = mk & ~ok & ~_mm_movemask_ps(zero);
            _mm_storeu_ps(ys, y);
            for (int i = 0; i < 4; i++)
                if (rest >> i & 1) ys[i] = expf(xs[i]);
            y = _mm_loadu_ps(ys);
        }
        if (k == 4) _mm_storeu_ps(sc + p, y);
        else {
            _mm_storeu_ps(ys, y);
            for (int i = 0; i < k; i++) sc[p + i] = ys[i];
        }
    }
}

/* kernels.h softmax_rows, kernels_avx512.c softmax_rows_v's steps: each row's scaling and max in 8 lanes (max is
 * exact in any order; a NaN score never wins; +0 and -0 give the same differences), exp_lanes, then four rows'
 * sums in double side by side, each in increasing p as kern_softmax_row's, and the divisions. */
static void softmax_rows_v(float *sc, size_t ld, int nr, int n, float scale, const float *sinks) {
    for (int r0 = 0; r0 < nr; r0 += 4) {
        const int m = nr - r0 < 4 ? nr - r0 : 4;
        double sum[4];
        for (int i = 0; i < m; i++) {
            float *row = sc + (size_t)(r0 + i) * ld;
            __m256 vm = _mm256_set1_ps(sinks ? sinks[r0 + i] : -INFINITY);
            float mx;
            const __m256 vs = _mm256_set1_ps(scale);
            int p = 0;
            for (; p + 8 <= n; p += 8) {
                const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(row + p), vs);
                _mm256_storeu_ps(row + p, v);
                vm = _mm256_max_ps(v, vm); /* maxps gives its second operand when either is NaN */
            }
            float l8[8];
            _mm256_storeu_ps(l8, vm);
            mx = l8[0];
            for (int k = 1; k < 8; k++) mx = l8[k] > mx ? l8[k] : mx;
            for (; p < n; p++) {
                row[p] *= scale;
                if (row[p] > mx) mx = row[p];
            }
            exp_lanes(row, n, mx);
            sum[i] = sinks ? (double)expf(sinks[r0 + i] - mx) : 0.0;
        }
        softmax_sums(sc, ld, r0, m, 4, n, sum);
        for (int i = 0; i < m; i++) {
            float *row = sc + (size_t)(r0 + i) * ld;
            const float f = (float)sum[i];
            const __m256 vf = _mm256_set1_ps(f);
            int p = 0;
            for (; p + 8 <= n; p += 8) _mm256_storeu_ps(row + p, _mm256_div_ps(_mm256_loadu_ps(row + p), vf));
            for (; p < n; p++) row[p] /= f;
        }
    }
}

#include "kernels/kv_x86.h"

/* ---- table ------------------------------------------------------------------------------------ */

static const kern_ops avx2_ops = {
    .name = "avx2",
    .matmul = TILE_MATMUL,
    .matmul_i8 = {[DT_Q8] = i8_mm_DT_Q8, [DT_Q4] = i8_mm_DT_Q4, KQ_I8_ENTRIES(kern_kq_i8_avx2)},
    .dot = dot_v,
    .axpy = plain_axpy,
    .kv_decode = kv_decode_x86,
    .softmax_rows = softmax_rows_v,
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
