/*
 * kernels_dev.c — a SwiGLU expert in the CUDA backend's arithmetic, on the host's threads (issue 25, the hybrid
 * step: an expert that lies in RAM is computed where it lies and gives the bits the GPU gives; docs/CUDA.md
 * "The hybrid step"). The order is src/backend/cuda/cuda.h's canonical one, not the CPU tables' 16 lanes:
 *   per output, per block b of 32 columns in order: I_b = sum code * xq (exact int32),
 *     acc = fma((float)I_b, scale(group of b) * d_b, acc);
 *   per group j in order: accb = fma(bias_j, s<group>_j, accb);  y = acc + accb;
 * the SwiGLU as the device's, silu(g) * u with canon_exp.h's e^x; the mid rows quantized by kern_act (bitwise
 * the device's slcu_act_quantize, cuda.h). The integer sums are exact and the float operations are single
 * rounded ones (the Makefile's -ffp-contract=off), so the result is the device's bit for bit
 * (tests/cuda/test_cuda.c checks it there; tests/test_kernels_dev.c checks it here against the order written
 * out plainly).
 */
#include <string.h>

#include "kernels/canon_exp.h"
#include "kernels/kernels.h"
#include "quant/quant.h"
#include "sluice.h"

/* The exact integer dot of one block: 32 q8 codes (unsigned) with 32 int8 activations. */
static inline int32_t blk_q8(const uint8_t *w, const int8_t *x) {
    int32_t I = 0;
    for (int i = 0; i < 32; i++) I += (int32_t)w[i] * (int32_t)x[i];
    return I;
}

/* The same for 16 bytes of q4 codes: column 2i in the low nibble of byte i, 2i + 1 in the high one. */
static inline int32_t blk_q4(const uint8_t *w, const int8_t *x) {
    int32_t I = 0;
    for (int i = 0; i < 16; i++) I += (int32_t)(w[i] & 15) * (int32_t)x[2 * i] + (int32_t)(w[i] >> 4) * (int32_t)x[2 * i + 1];
    return I;
}

#define DEV_R 4 /* rows folded together: independent fma chains */

/* Rows r0 .. r1 of w times token t of a (ready) into y[r]: cuda.h's order, DEV_R rows at a time. */
static void dev_rows(const tn_mat *w, const kern_act *a, int t, float *y, int r0, int r1) {
    const int cols = w->cols, g = w->group, ng = cols / g, nb = cols / 32, ns = nb + nb / 2 + nb / 4, gb = g / 32;
    const int q4 = w->dtype == DT_Q4;
    const size_t rb = q4 ? (size_t)cols / 2 : (size_t)cols, bb = q4 ? 16 : 32;
    const int8_t *xq = a->q + (size_t)t * (size_t)cols;
    const float *d = a->d + (size_t)t * (size_t)nb;
    const float *xs = a->s + (size_t)t * (size_t)ns + (g == 32 ? 0 : g == 64 ? nb : nb + nb / 2);
    for (int r = r0; r < r1; r += DEV_R) {
        const int nr = r1 - r < DEV_R ? r1 - r : DEV_R;
        float acc[DEV_R] = {0}, accb[DEV_R] = {0};
        for (int b = 0; b < nb; b++)
            for (int i = 0; i < nr; i++) {
                const uint8_t *code = (const uint8_t *)w->data + (size_t)(r + i) * rb + (size_t)b * bb;
                const int32_t I = q4 ? blk_q4(code, xq + (size_t)b * 32) : blk_q8(code, xq + (size_t)b * 32);
                const float sw = q_scale_at(w->scales, w->sdtype, (size_t)(r + i) * (size_t)ng + (size_t)(b / gb));
                acc[i] = fmaf((float)I, sw * d[b], acc[i]);
            }
        for (int j = 0; j < ng; j++)
            for (int i = 0; i < nr; i++)
                accb[i] = fmaf(q_scale_at(w->biases, w->sdtype, (size_t)(r + i) * (size_t)ng + (size_t)j), xs[j], accb[i]);
        for (int i = 0; i < nr; i++) y[r + i] = acc[i] + accb[i];
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DEV_AVX2 1
#define AVX2_FN __attribute__((target("avx2,fma")))

/* The eight int32 lanes of v[i] summed, for each i < 8: lane i of the result (exact integer sums). */
AVX2_FN static inline __m256i sum8x8(const __m256i *v) {
    const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

#define DEV_X4_MAX 8192 /* columns of the staged codes on the stack; wider rows take dev_rows */
#define DEV_NG_MAX (DEV_X4_MAX / 32)

/* Eight rows' scales (or biases) as f32, group-major: t[j][i] = row r + i's value of group j (q_scale_at's values:
 * bf16 and f32 converted eight at a time, f16 one by one), each row's converted in order, then 8 x 8 transposes:
 * the chain below loads whole vectors of values stored long before. */
AVX2_FN static void rows8_table(const void *p, dt_type sdt, int r, int ng, float (*t)[8]) {
    float rt[8][DEV_NG_MAX];
    for (int i = 0; i < 8; i++) {
        const size_t o = (size_t)(r + i) * (size_t)ng;
        int j = 0;
        for (; sdt != DT_F16 && j + 8 <= ng; j += 8) {
            const __m256 v = sdt == DT_F32 ? _mm256_loadu_ps((const float *)p + o + j)
                                           : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(
                                                 _mm_loadu_si128((const __m128i *)((const uint16_t *)p + o + j))), 16));
            _mm256_storeu_ps(rt[i] + j, v);
        }
        for (; j < ng; j++) rt[i][j] = q_scale_at(p, sdt, o + (size_t)j);
    }
    int j0 = 0;
    for (; j0 + 8 <= ng; j0 += 8) {
        __m256 x[8], u[8];
        for (int i = 0; i < 8; i++) x[i] = _mm256_loadu_ps(rt[i] + j0);
        for (int i = 0; i < 8; i += 2) u[i] = _mm256_unpacklo_ps(x[i], x[i + 1]), u[i + 1] = _mm256_unpackhi_ps(x[i], x[i + 1]);
        for (int h = 0; h < 8; h += 4) { /* h 0: rows 0-3, 4: rows 4-7; x[h + c]: columns c | c + 4 */
            x[h] = _mm256_shuffle_ps(u[h], u[h + 2], 0x44), x[h + 1] = _mm256_shuffle_ps(u[h], u[h + 2], 0xEE);
            x[h + 2] = _mm256_shuffle_ps(u[h + 1], u[h + 3], 0x44), x[h + 3] = _mm256_shuffle_ps(u[h + 1], u[h + 3], 0xEE);
        }
        for (int c = 0; c < 4; c++) {
            _mm256_storeu_ps(t[j0 + c], _mm256_permute2f128_ps(x[c], x[4 + c], 0x20));
            _mm256_storeu_ps(t[j0 + 4 + c], _mm256_permute2f128_ps(x[c], x[4 + c], 0x31));
        }
    }
    for (; j0 < ng; j0++)
        for (int i = 0; i < 8; i++) t[j0][i] = rt[i][j0];
}

/* The token's q4 codes per block as 16 even then 16 odd columns (x4), 32 bytes a block. */
AVX2_FN static void stage_x4(const int8_t *xq, int cols, int8_t *x4) {
    const __m256i sh = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14, 1, 3,
                                        5, 7, 9, 11, 13, 15);
    for (int b = 0; b < cols / 32; b++) {
        const __m256i v = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(xq + 32 * b)), sh);
        _mm256_storeu_si256((__m256i *)(x4 + 32 * b), _mm256_permute4x64_epi64(v, _MM_SHUFFLE(3, 1, 2, 0)));
    }
}

/* Eight rows r .. r+7 of w (q8/q4) times token t: dev_rows' operations with the rows in the lanes (each lane
 * its own row's chain, in block order). x4: the token's codes per block as 16 even then 16 odd columns (q4). */
AVX2_FN static void dev_rows8(const tn_mat *w, const kern_act *a, int t, const int8_t *x4, float *y, int r) {
    const int cols = w->cols, g = w->group, ng = cols / g, nb = cols / 32, ns = nb + nb / 2 + nb / 4;
    const int gs = g == 32 ? 0 : g == 64 ? 1 : 2; /* blocks a group: 1 << gs */
    const int q4 = w->dtype == DT_Q4;
    const size_t rb = q4 ? (size_t)cols / 2 : (size_t)cols, bb = q4 ? 16 : 32;
    const int8_t *xq = a->q + (size_t)t * (size_t)cols;
    const float *d = a->d + (size_t)t * (size_t)nb;
    const float *xs = a->s + (size_t)t * (size_t)ns + (g == 32 ? 0 : g == 64 ? nb : nb + nb / 2);
    const uint8_t *base = (const uint8_t *)w->data + (size_t)r * rb;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m128i lo4 = _mm_set1_epi8(15);
    __m256 acc = _mm256_setzero_ps(), accb = _mm256_setzero_ps(), sw = acc;
    float st[DEV_NG_MAX][8], bt[DEV_NG_MAX][8];
    rows8_table(w->scales, w->sdtype, r, ng, st);
    rows8_table(w->biases, w->sdtype, r, ng, bt);
    for (int b = 0; b < nb; b++) {
        if (!(b & ((1 << gs) - 1))) sw = _mm256_loadu_ps(st[b >> gs]);
        __m256i p[8];
        if (q4) {
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(x4 + (size_t)b * 32));
            for (int i = 0; i < 8; i++) {
                const __m128i c = _mm_loadu_si128((const __m128i *)(base + (size_t)i * rb + (size_t)b * bb));
                const __m256i cw = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(c, 4), lo4), _mm_and_si128(c, lo4));
                p[i] = _mm256_madd_epi16(_mm256_maddubs_epi16(cw, xv), ones);
            }
        } else {
            const __m256i x0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(xq + (size_t)b * 32)));
            const __m256i x1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(xq + (size_t)b * 32 + 16)));
            for (int i = 0; i < 8; i++) {
                const uint8_t *c = base + (size_t)i * rb + (size_t)b * bb;
                const __m256i c0 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)c));
                const __m256i c1 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(c + 16)));
                p[i] = _mm256_add_epi32(_mm256_madd_epi16(c0, x0), _mm256_madd_epi16(c1, x1));
            }
        }
        const __m256 I = _mm256_cvtepi32_ps(sum8x8(p)); /* |I| < 2^24: exact */
        acc = _mm256_fmadd_ps(I, _mm256_mul_ps(sw, _mm256_set1_ps(d[b])), acc);
    }
    for (int j = 0; j < ng; j++) accb = _mm256_fmadd_ps(_mm256_loadu_ps(bt[j]), _mm256_set1_ps(xs[j]), accb);
    _mm256_storeu_ps(y + r, _mm256_add_ps(acc, accb));
}

#define VNNI_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))

/* 8 rows' (token, block) sums of two blocks at once: v[i] = vpdpbusd over row i's codes of blocks b, b + 1 (64
 * bytes: q8 natural, b in lanes 0-1 and b + 1 in lanes 2-3; q4 low nibbles of b, b + 1 in lanes 0, 1 and high
 * ones in lanes 2, 3). Their lanes' int32 partials summed (exact) into I of b (low half) and b + 1 (high). */
VNNI_FN static inline __m512i hadd512(__m512i a, __m512i b) {
    const __m512 fa = _mm512_castsi512_ps(a), fb = _mm512_castsi512_ps(b);
    return _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(fa, fb, _MM_SHUFFLE(2, 0, 2, 0))),
                            _mm512_castps_si512(_mm512_shuffle_ps(fa, fb, _MM_SHUFFLE(3, 1, 3, 1))));
}

VNNI_FN static inline __m512i sum8x2(const __m512i *v, int q4) {
    const __m512i a = hadd512(hadd512(v[0], v[1]), hadd512(v[2], v[3])); /* lane k: rows 0-3, lane k's sums */
    const __m512i c = hadd512(hadd512(v[4], v[5]), hadd512(v[6], v[7])); /* rows 4-7 */
    const __m512i p = q4 ? _mm512_shuffle_i64x2(a, c, _MM_SHUFFLE(1, 0, 1, 0)) : _mm512_shuffle_i64x2(a, c, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i q = q4 ? _mm512_shuffle_i64x2(a, c, _MM_SHUFFLE(3, 2, 3, 2)) : _mm512_shuffle_i64x2(a, c, _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i s = _mm512_add_epi32(p, q); /* b rows 0-3, b+1 rows 0-3, b rows 4-7, b+1 rows 4-7 */
    return _mm512_shuffle_i64x2(s, s, _MM_SHUFFLE(3, 1, 2, 0));
}

/* One block b's I for 8 rows (the odd last block): 256-bit vpdpbusd, then sum8x8. x: its 32 codes (q4: 16 even
 * then 16 odd columns). */
VNNI_FN static inline __m256i blk8_vnni(const uint8_t *base, size_t rb, int b, int q4, const int8_t *x) {
    const __m256i xv = _mm256_loadu_si256((const __m256i *)x), z = _mm256_setzero_si256();
    const __m128i lo4 = _mm_set1_epi8(15);
    __m256i p[8];
    for (int i = 0; i < 8; i++) {
        const uint8_t *c = base + (size_t)i * rb + (size_t)b * (q4 ? 16 : 32);
        __m256i cw;
        if (q4) {
            const __m128i c16 = _mm_loadu_si128((const __m128i *)c);
            cw = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(c16, 4), lo4), _mm_and_si128(c16, lo4));
        } else {
            cw = _mm256_loadu_si256((const __m256i *)c);
        }
        p[i] = _mm256_dpbusd_epi32(z, cw, xv);
    }
    return sum8x8(p);
}

/* dev_rows8 with VNNI: the same integer sums (exact) two blocks at a time, the same fma chain per row. x2: the
 * token's codes by pairs of blocks, 64 bytes each (q8: as they are; q4: even columns of b, of b + 1, odd of b, of
 * b + 1), an odd last block's 32 as dev_rows8's x4. */
VNNI_FN static void dev_rows8_vnni(const tn_mat *w, const kern_act *a, int t, const int8_t *x2, float *y, int r) {
    const int cols = w->cols, g = w->group, ng = cols / g, nb = cols / 32, ns = nb + nb / 2 + nb / 4;
    const int gs = g == 32 ? 0 : g == 64 ? 1 : 2; /* blocks a group: 1 << gs */
    const int q4 = w->dtype == DT_Q4;
    const size_t rb = q4 ? (size_t)cols / 2 : (size_t)cols;
    const float *d = a->d + (size_t)t * (size_t)nb;
    const float *xs = a->s + (size_t)t * (size_t)ns + (g == 32 ? 0 : g == 64 ? nb : nb + nb / 2);
    const uint8_t *base = (const uint8_t *)w->data + (size_t)r * rb;
    const __m512i m4 = _mm512_set1_epi8(15), z = _mm512_setzero_si512();
    __m256 acc = _mm256_setzero_ps(), accb = _mm256_setzero_ps(), sw = acc;
    float st[DEV_NG_MAX][8], bt[DEV_NG_MAX][8];
    rows8_table(w->scales, w->sdtype, r, ng, st);
    rows8_table(w->biases, w->sdtype, r, ng, bt);
    for (int b = 0; b < nb; b += 2) {
        __m256i I[2];
        if (b + 1 < nb) {
            const __m512i xz = _mm512_loadu_si512((const void *)(x2 + (size_t)b * 32));
            __m512i v[8];
            for (int i = 0; i < 8; i++) {
                const uint8_t *c = base + (size_t)i * rb + (size_t)b * (q4 ? 16 : 32);
                __m512i cz;
                if (q4) {
                    const __m256i c32 = _mm256_loadu_si256((const __m256i *)c);
                    cz = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(c32), _mm256_srli_epi16(c32, 4), 1), m4);
                } else {
                    cz = _mm512_loadu_si512((const void *)c);
                }
                v[i] = _mm512_dpbusd_epi32(z, cz, xz);
            }
            const __m512i T = sum8x2(v, q4);
            I[0] = _mm512_castsi512_si256(T), I[1] = _mm512_extracti64x4_epi64(T, 1);
        } else {
            I[0] = blk8_vnni(base, rb, b, q4, x2 + (size_t)b * 32);
        }
        for (int j = 0; j < 2 && b + j < nb; j++) {
            if (!((b + j) & ((1 << gs) - 1))) sw = _mm256_loadu_ps(st[(b + j) >> gs]);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I[j]), _mm256_mul_ps(sw, _mm256_set1_ps(d[b + j])), acc);
        }
    }
    for (int j = 0; j < ng; j++) accb = _mm256_fmadd_ps(_mm256_loadu_ps(bt[j]), _mm256_set1_ps(xs[j]), accb);
    _mm256_storeu_ps(y + r, _mm256_add_ps(acc, accb));
}

static int dev_isa_max = 2; /* kern_dev_isa: 0 scalar, 1 AVX2, 2 VNNI */

static int dev_avx2(void) {
    static int have = -1;
    if (have < 0) have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return have && dev_isa_max >= 1;
}

static int dev_vnni(void) {
    static int have = -1;
    if (have < 0)
        have = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return have && dev_isa_max >= 2;
}

/* The token's codes for dev_rows8_vnni: by pairs of blocks (q4: even of b, of b + 1, odd of b, of b + 1, from
 * x4's [even | odd] of each), an odd last block as x4's. */
AVX2_FN static void stage_x2(const int8_t *xq, int cols, int q4, int8_t *x2) {
    const int nb = cols / 32;
    if (!q4) {
        memcpy(x2, xq, (size_t)cols);
        return;
    }
    stage_x4(xq, cols, x2);
    for (int b = 0; b + 1 < nb; b += 2) {
        const __m256i v0 = _mm256_loadu_si256((const __m256i *)(x2 + 32 * b));
        const __m256i v1 = _mm256_loadu_si256((const __m256i *)(x2 + 32 * b + 32));
        _mm256_storeu_si256((__m256i *)(x2 + 32 * b), _mm256_permute2x128_si256(v0, v1, 0x20));
        _mm256_storeu_si256((__m256i *)(x2 + 32 * b + 32), _mm256_permute2x128_si256(v0, v1, 0x31));
    }
}
#endif

int kern_dev_isa(int max) {
    int old = 0;
#ifdef DEV_AVX2
    old = dev_isa_max;
    dev_isa_max = max;
#else
    (void)max;
#endif
    return old;
}


/* Rows r0 .. r1 of w times every token of a into y (row stride ldy), eight rows at a time where AVX2 is. */
static void dev_mm(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
#ifdef DEV_AVX2
    if (dev_vnni() && w->cols <= DEV_X4_MAX && r1 - r0 >= 8) {
        int8_t x2[DEV_X4_MAX];
        for (int t = 0; t < a->n_tok; t++) {
            stage_x2(a->q + (size_t)t * (size_t)w->cols, w->cols, w->dtype == DT_Q4, x2);
            int r = r0;
            for (; r + 8 <= r1; r += 8) dev_rows8_vnni(w, a, t, x2, y + (size_t)t * ldy, r);
            if (r < r1) dev_rows(w, a, t, y + (size_t)t * ldy, r, r1);
        }
        return;
    }
    if (dev_avx2() && w->cols <= DEV_X4_MAX && r1 - r0 >= 8) {
        int8_t x4[DEV_X4_MAX];
        for (int t = 0; t < a->n_tok; t++) {
            if (w->dtype == DT_Q4) stage_x4(a->q + (size_t)t * (size_t)w->cols, w->cols, x4);
            int r = r0;
            for (; r + 8 <= r1; r += 8) dev_rows8(w, a, t, x4, y + (size_t)t * ldy, r);
            if (r < r1) dev_rows(w, a, t, y + (size_t)t * ldy, r, r1);
        }
        return;
    }
#endif
    for (int t = 0; t < a->n_tok; t++) dev_rows(w, a, t, y + (size_t)t * ldy, r0, r1);
}

void kern_matmul_i8_dev(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
    dev_mm(w, a, y, ldy, r0, r1);
}

void kern_swiglu_dev(const float *g, const float *u, float *y, int n) {
    for (int i = 0; i < n; i++) y[i] = canon_silu(g[i]) * u[i];
}

/* A matrix the device order covers: q8/q4 with biases, groups of 32 / 64 / 128, whole blocks. */
static int dev_mat_ok(const tn_mat *m) {
    return m->data && (m->dtype == DT_Q8 || m->dtype == DT_Q4) && m->scales && m->biases && m->cols > 0 &&
           m->cols % 32 == 0 && (m->group == 32 || m->group == 64 || m->group == 128) && m->cols % m->group == 0;
}

int kern_ffn_dev_ok(const tn_expert *ex, int inter) {
    return dev_mat_ok(&ex->gate) && dev_mat_ok(&ex->up) && dev_mat_ok(&ex->down) && inter % 32 == 0 &&
           ex->gate.rows == inter && ex->up.rows == inter && ex->down.cols == inter;
}

typedef struct {
    const tn_mat *m[2];
    const kern_act *a;
    float *y[2];
    size_t ldy[2];
    int rows; /* of m[0]; items past it are m[1]'s */
} dev_job;

#define DEV_GRAIN 32 /* rows an item: a few blocks of weights, many items for the threads */

static void dev_part(void *ctx, size_t begin, size_t end) {
    const dev_job *j = ctx;
    for (size_t it = begin; it < end; it++) {
        int r = (int)it * DEV_GRAIN, which = r >= j->rows;
        if (which) r -= j->rows;
        const tn_mat *m = j->m[which];
        const int r1 = r + DEV_GRAIN < m->rows ? r + DEV_GRAIN : m->rows;
        dev_mm(m, j->a, j->y[which], j->ldy[which], r, r1);
    }
}

/* Items of DEV_GRAIN rows over m0 (and m1 after it, NULL: none) on pool. */
static void dev_matmul2(pool_t *pool, const tn_mat *m0, const tn_mat *m1, const kern_act *a, float *y0, float *y1,
                        size_t ldy) {
    const size_t n0 = ((size_t)m0->rows + DEV_GRAIN - 1) / DEV_GRAIN, n1 = m1 ? ((size_t)m1->rows + DEV_GRAIN - 1) / DEV_GRAIN : 0;
    /* m0's last item may be short: the split index is in whole items */
    dev_job j = {{m0, m1}, a, {y0, y1}, {ldy, ldy}, (int)n0 * DEV_GRAIN};
    /* dynamic: the caller and the awake threads take the items while the others wake (a host expert of the hybrid
     * step comes after the GPU's work, when the workers sleep; a static split waited for the last to wake) */
    if (pool) pool_for_any(pool, n0 + n1, 1, dev_part, &j);
    else dev_part(&j, 0, n0 + n1);
}

int kern_ffn_dev(pool_t *pool, const tn_expert *ex, kern_act *x, int inter, float *g, float *u, void *mid_buf,
                 float *y, size_t ldy) {
    if (!kern_ffn_dev_ok(ex, inter) || !x->int8 || x->cols != ex->gate.cols) return SL_EUNSUPPORTED;
    kern_act_prepare(x);
    if (!x->int8) return SL_EUNSUPPORTED;
    const int n = x->n_tok;
    dev_matmul2(pool, &ex->gate, &ex->up, x, g, u, (size_t)inter);
    for (int t = 0; t < n; t++)
        kern_swiglu_dev(g + (size_t)t * inter, u + (size_t)t * inter, g + (size_t)t * inter, inter);
    kern_act m;
    kern_act_init(&m, mid_buf, g, (size_t)inter, n, inter, 1);
    kern_act_prepare(&m);
    dev_matmul2(pool, &ex->down, NULL, &m, y, NULL, ldy);
    return SL_OK;
}
