/*
 * kernels_avx2.c — the AVX2 + FMA + F16C table (compiled with -mavx2 -mfma -mf16c; x86-64 only).
 *
 * Same blocking as the scalar oracle (kernels_scalar.c): tokens in blocks of KTOK, rows in blocks of RB,
 * columns in chunks of KCHUNK dequantised once per (row block, chunk) into f32 and reused by every token
 * of the block. Each y[t][r] keeps one 8-lane FMA accumulator (lane = column % 8) across all chunks; a
 * ragged tail is read with masked loads (zeros in the unused lanes), and the lanes are combined as
 * ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)). So the result depends only on the column count -- never on
 * n_tok, the row range or the thread split (kernels.h) -- and differs from the oracle only by FMA
 * rounding. Small vector kernels are the oracle's C code compiled for this ISA.
 *
 * Sections: dequantisation, matmul, small vector kernels, the table.
 */
#include "kernels/kernels.h"
#include "kernels/kernels_plain.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant/quant.h"

#define KCHUNK 256
#define KTOK 32
#define RB 4

/* ---- dequantisation --------------------------------------------------------------------------- */

static inline __m256 scale8(const sl_mat *m, size_t i) { return _mm256_set1_ps(q_scale_at(m->scales, m->sdtype, i)); }
static inline __m256 bias8(const sl_mat *m, size_t i) { return _mm256_set1_ps(q_scale_at(m->biases, m->sdtype, i)); }

/* [nc] f32 weights of row r from column c0: a pointer into m for f32, else dequantised into buf. */
static inline __attribute__((always_inline)) const float *load_chunk(sl_dtype dt, const sl_mat *m, int r, int c0,
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

/* ---- matmul ----------------------------------------------------------------------------------- */

static inline __m256i tail_mask(int n) { /* lanes < n */
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline void dot_rb(const float *const *wr, const float *x, int n, __m256 *acc) {
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

static inline __attribute__((always_inline)) void mm_any(sl_dtype dt, const sl_mat *w, const float *x, size_t ldx,
                                                           float *y, size_t ldy, int n_tok, int r0, int r1) {
    const int cols = w->cols;
    float buf[RB][KCHUNK];
    __m256 acc[KTOK][RB];
    for (int t0 = 0; t0 < n_tok; t0 += KTOK) {
        int nt = n_tok - t0 < KTOK ? n_tok - t0 : KTOK;
        for (int r = r0; r < r1; r += RB) {
            int nr = r1 - r < RB ? r1 - r : RB;
            for (int t = 0; t < nt; t++)
                for (int i = 0; i < RB; i++) acc[t][i] = _mm256_setzero_ps();
            for (int c0 = 0; c0 < cols; c0 += KCHUNK) {
                int nc = cols - c0 < KCHUNK ? cols - c0 : KCHUNK;
                const float *wr[RB];
                for (int i = 0; i < RB; i++) wr[i] = i < nr ? load_chunk(dt, w, r + i, c0, nc, buf[i]) : wr[0];
                for (int t = 0; t < nt; t++) dot_rb(wr, x + (size_t)(t0 + t) * ldx + c0, nc, acc[t]);
            }
            for (int t = 0; t < nt; t++)
                for (int i = 0; i < nr; i++) y[(size_t)(t0 + t) * ldy + (size_t)(r + i)] = lanes_sum(acc[t][i]);
        }
    }
}

#define MM(name, DT)                                                                                      \
    static void name(const sl_mat *w, const float *x, size_t ldx, float *y, size_t ldy, int n_tok, int r0, \
                     int r1) {                                                                            \
        mm_any(DT, w, x, ldx, y, ldy, n_tok, r0, r1);                                                     \
    }
MM(mm_f32, DT_F32)
MM(mm_f16, DT_F16)
MM(mm_bf16, DT_BF16)
MM(mm_q8, DT_Q8)
MM(mm_q4, DT_Q4)
MM(mm_q3, DT_Q3)

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
    .matmul = {[DT_F32] = mm_f32, [DT_F16] = mm_f16, [DT_BF16] = mm_bf16, [DT_Q8] = mm_q8, [DT_Q4] = mm_q4,
               [DT_Q3] = mm_q3},
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
