/*
 * kernels_neon.c — the NEON table (AArch64 Advanced SIMD, always present there; FMA via vfmaq_f32).
 *
 * The blocking every table shares (kernels_tile.h's driver; this file gives its pieces). Each y[t][r] keeps
 * 8 lanes as two float32x4 FMA accumulators (lane = column % 8) across all chunks; a ragged tail adds its
 * products lane by lane in the same lane positions, and the lanes are combined as
 * ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)); so results depend only on the column count (kernels.h) and differ from
 * the oracle by FMA rounding only.
 * The int8-activation q8/q4 kernels (kern_matmul_act) are kernels_neon_dot.c's SDOT ones when the CPU has the
 * Armv8.2 dot product (HWCAP_ASIMDDP), else the scalar oracle's (same results bitwise, slower).
 * Cross-compiled with aarch64-linux-gnu-gcc and tested under qemu-user (tools/neon_test.sh).
 *
 * Sections: dequantisation, matmul, small vector kernels, the table.
 */
#include "kernels/kernels.h"
#include "kernels/kernels_plain.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/auxv.h>

#include "kernels/softmax_common.h"
#include "quant/quant.h"

#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20) /* linux/arch/arm64/include/uapi/asm/hwcap.h */
#endif

typedef struct {
    float32x4_t lo, hi;
} tile_acc; /* lanes 0-3, 4-7 */
#include "kernels/kernels_tile.h"

/* ---- dequantisation --------------------------------------------------------------------------- */

static inline __attribute__((always_inline)) const float *tile_load(dt_type dt, const tn_mat *m, int r, int c0,
                                                                      int nc, float *buf) {
    const size_t off = (size_t)r * (size_t)m->cols + (size_t)c0;
    if (dt == DT_F32) return (const float *)m->data + off;
    if (dt == DT_F16 || dt == DT_BF16) {
        const uint16_t *s = (const uint16_t *)m->data + off;
        int i = 0;
        for (; i + 4 <= nc; i += 4) {
            uint16x4_t h = vld1_u16(s + i);
            float32x4_t f = dt == DT_F16 ? vcvt_f32_f16(vreinterpret_f16_u16(h))
                                         : vreinterpretq_f32_u32(vshll_n_u16(h, 16));
            vst1q_f32(buf + i, f);
        }
        for (; i < nc; i++) buf[i] = dt == DT_F16 ? f16_to_f32(s[i]) : bf16_to_f32(s[i]);
        return buf;
    }
    const int g = m->group;
    const size_t sidx = off / (size_t)g;
    if (dt == DT_Q8) {
        const uint8_t *q = (const uint8_t *)m->data + off;
        for (int j = 0; j < nc; j += g) {
            float32x4_t sc = vdupq_n_f32(q_scale_at(m->scales, m->sdtype, sidx + (size_t)(j / g)));
            float32x4_t bi = vdupq_n_f32(q_scale_at(m->biases, m->sdtype, sidx + (size_t)(j / g)));
            for (int i = j; i < j + g; i += 8) {
                uint16x8_t v = vmovl_u8(vld1_u8(q + i));
                vst1q_f32(buf + i, vfmaq_f32(bi, vcvtq_f32_u32(vmovl_u16(vget_low_u16(v))), sc));
                vst1q_f32(buf + i + 4, vfmaq_f32(bi, vcvtq_f32_u32(vmovl_u16(vget_high_u16(v))), sc));
            }
        }
    } else if (dt == DT_Q4) {
        const uint8_t *q = (const uint8_t *)m->data + off / 2;
        for (int j = 0; j < nc; j += g) {
            float32x4_t sc = vdupq_n_f32(q_scale_at(m->scales, m->sdtype, sidx + (size_t)(j / g)));
            float32x4_t bi = vdupq_n_f32(q_scale_at(m->biases, m->sdtype, sidx + (size_t)(j / g)));
            for (int i = j; i < j + g; i += 16) {
                uint8x8_t b = vld1_u8(q + i / 2);
                uint8x8x2_t z = vzip_u8(vand_u8(b, vdup_n_u8(15)), vshr_n_u8(b, 4)); /* lo, hi interleaved */
                uint16x8_t v0 = vmovl_u8(z.val[0]), v1 = vmovl_u8(z.val[1]);
                vst1q_f32(buf + i, vfmaq_f32(bi, vcvtq_f32_u32(vmovl_u16(vget_low_u16(v0))), sc));
                vst1q_f32(buf + i + 4, vfmaq_f32(bi, vcvtq_f32_u32(vmovl_u16(vget_high_u16(v0))), sc));
                vst1q_f32(buf + i + 8, vfmaq_f32(bi, vcvtq_f32_u32(vmovl_u16(vget_low_u16(v1))), sc));
                vst1q_f32(buf + i + 12, vfmaq_f32(bi, vcvtq_f32_u32(vmovl_u16(vget_high_u16(v1))), sc));
            }
        }
    } else { /* DT_Q3 */
        const uint8_t *q = (const uint8_t *)m->data + off / 8 * 3;
        for (int j = 0; j < nc; j += g) {
            float sc = q_scale_at(m->scales, m->sdtype, sidx + (size_t)(j / g));
            for (int i = j; i < j + g; i += 8) {
                const uint8_t *p = q + (size_t)i / 8 * 3;
                uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
                for (int k = 0; k < 8; k++) buf[i + k] = sc * Q3_LEVELS[(v >> (3 * k)) & 7];
            }
        }
    }
    return buf;
}

/* ---- matmul: kernels_tile.h's driver over these pieces --------------------------------------- */

static inline void tile_dot4(const float *const *wr, const float *x, int n, tile_acc *acc) {
    tile_acc a[TILE_RB];
    memcpy(a, acc, sizeof a);
    int c = 0;
    for (; c + 8 <= n; c += 8) {
        float32x4_t x0 = vld1q_f32(x + c), x1 = vld1q_f32(x + c + 4);
        for (int i = 0; i < TILE_RB; i++) {
            a[i].lo = vfmaq_f32(a[i].lo, vld1q_f32(wr[i] + c), x0);
            a[i].hi = vfmaq_f32(a[i].hi, vld1q_f32(wr[i] + c + 4), x1);
        }
    }
    for (int i = 0; i < TILE_RB && c < n; i++) {
        float l[8];
        vst1q_f32(l, a[i].lo);
        vst1q_f32(l + 4, a[i].hi);
        for (int k = c; k < n; k++) l[k & 7] = fmaf(wr[i][k], x[k], l[k & 7]);
        a[i].lo = vld1q_f32(l);
        a[i].hi = vld1q_f32(l + 4);
    }
    memcpy(acc, a, sizeof a);
}

static inline float tile_sum(tile_acc v) {
    float a[8];
    vst1q_f32(a, v.lo);
    vst1q_f32(a + 4, v.hi);
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

static inline tile_acc tile_zero(void) { return (tile_acc){vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}; }
static inline int tile_one_token(dt_type dt, const tn_mat *w, const float *x, float *y, int r0, int r1) { return 0; }

/* ---- small vector kernels --------------------------------------------------------------------- */

static float dot_v(const float *a, const float *b, int n) {
    float l[8] = {0};
    int c = 0;
    for (; c + 8 <= n; c += 8)
        for (int j = 0; j < 8; j++) l[j] += a[c + j] * b[c + j];
    for (; c < n; c++) l[c & 7] += a[c] * b[c];
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* ---- attention's softmax ---------------------------------------------------------------------- */

/* glibc's expf as its AArch64 build computes it (sysdeps/ieee754/flt-32/e_expf.c with TOINT_INTRINSICS; read from
 * libm's disassembly: z = x * N/ln2 rounded, kd = z rounded half away from zero (frinta), ki the same as an integer
 * (fcvtas), r = z - kd, s = 2^(k/N) from the table __exp2f_data.tab (N = 32, softmax_common.h) and the exponent
 * bits, y = (C0 r + C1) r^2 + (C2 r + 1) by three fused multiply-adds, times s, rounded to float) in two double
 * lanes. Bitwise expf where -0x1.9d1d9ep6 <= x <= 0x1.62e42ep6 (its main path); exp_lanes takes the rest. */
static inline float32x2_t expf2_main(float32x2_t x) {
    const float64x2_t z = vmulq_f64(vcvt_f64_f32(x), vdupq_n_f64(0x1.71547652b82fep+5));
    const float64x2_t kd = vrndaq_f64(z);
    const int64x2_t ki = vcvtaq_s64_f64(z);
    const float64x2_t r = vsubq_f64(z, kd);
    const uint64x2_t tb = vcombine_u64(vcreate_u64(exp2f_tab[vgetq_lane_s64(ki, 0) & 31]),
                                       vcreate_u64(exp2f_tab[vgetq_lane_s64(ki, 1) & 31]));
    const uint64x2_t t = vaddq_u64(tb, vshlq_n_u64(vreinterpretq_u64_s64(ki), 47));
    const float64x2_t c = vfmaq_f64(vdupq_n_f64(0x1.ebfce50fac4f3p-13), vdupq_n_f64(0x1.c6af84b912394p-20), r);
    float64x2_t y = vfmaq_f64(vdupq_n_f64(1.0), vdupq_n_f64(0x1.62e42ff0c52d6p-6), r);
    y = vfmaq_f64(y, c, vmulq_f64(r, r));
    return vcvt_f32_f64(vmulq_f64(y, vreinterpretq_f64_u64(t)));
}

/* sc[p] = expf(sc[p] - mx), p < n: expf2_main's lanes; below -0x1.9fe368p6 (and -inf) expf's +0 (its underflow);
 * the rest (NaN, overflow, the band where glibc may set errno) by expf itself. */
static void exp_lanes(float *sc, int n, float mx) {
    for (int p = 0; p < n; p += 4) {
        const int k = n - p < 4 ? n - p : 4;
        float xs[4] = {0, 0, 0, 0}, ys[4];
        for (int i = 0; i < k; i++) xs[i] = sc[p + i] - mx;
        const float32x4_t x = vld1q_f32(xs);
        vst1q_f32(ys, vcombine_f32(expf2_main(vget_low_f32(x)), expf2_main(vget_high_f32(x))));
        for (int i = 0; i < k; i++) {
            const float v = xs[i];
            sc[p + i] = v >= -0x1.9d1d9ep6f && v <= 0x1.62e42ep6f ? ys[i] : v < -0x1.9fe368p6f ? 0.0f : expf(v);
        }
    }
}

/* kernels.h softmax_rows, kernels_avx512.c softmax_rows_v's steps: each row's scaling and max in 4 lanes (v > m ?
 * v : m, the scalar loop's test, so a NaN score never wins; max is exact in any order; +0 and -0 give the same
 * differences), exp_lanes, then four rows' sums in double side by side, each in increasing p as
 * kern_softmax_row's, and the divisions. */
static void softmax_rows_v(float *sc, size_t ld, int nr, int n, float scale, const float *sinks) {
    for (int r0 = 0; r0 < nr; r0 += 4) {
        const int m = nr - r0 < 4 ? nr - r0 : 4;
        double sum[4];
        for (int i = 0; i < m; i++) {
            float *row = sc + (size_t)(r0 + i) * ld;
            float32x4_t vm = vdupq_n_f32(sinks ? sinks[r0 + i] : -INFINITY);
            const float32x4_t vs = vdupq_n_f32(scale);
            int p = 0;
            for (; p + 4 <= n; p += 4) {
                const float32x4_t v = vmulq_f32(vld1q_f32(row + p), vs);
                vst1q_f32(row + p, v);
                vm = vbslq_f32(vcgtq_f32(v, vm), v, vm);
            }
            float l4[4], mx;
            vst1q_f32(l4, vm);
            mx = l4[0];
            for (int k = 1; k < 4; k++) mx = l4[k] > mx ? l4[k] : mx;
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
            const float32x4_t vf = vdupq_n_f32(f);
            int p = 0;
            for (; p + 4 <= n; p += 4) vst1q_f32(row + p, vdivq_f32(vld1q_f32(row + p), vf));
            for (; p < n; p++) row[p] /= f;
        }
    }
}

/* ---- table ------------------------------------------------------------------------------------ */

static const kern_ops neon_ops = {
    .name = "neon",
    .matmul = TILE_MATMUL,
    .matmul_i8 = {KQ_I8_ENTRIES(kern_kq_i8_neon)},
    .dot = dot_v,
    .axpy = plain_axpy,
    .softmax_rows = softmax_rows_v,
    .rmsnorm = plain_rmsnorm,
    .swiglu = plain_swiglu,
};

static const kern_ops neon_dot_ops = {
    .name = "neon",
    .matmul = TILE_MATMUL,
    .matmul_i8 = {[DT_Q8] = kern_neon_dot_q8, [DT_Q4] = kern_neon_dot_q4, KQ_I8_ENTRIES(kern_kq_i8_neon)},
    .dot = dot_v,
    .axpy = plain_axpy,
    .softmax_rows = softmax_rows_v,
    .rmsnorm = plain_rmsnorm,
    .swiglu = plain_swiglu,
};

const kern_ops *kern_neon_ops(void) { return getauxval(AT_HWCAP) & HWCAP_ASIMDDP ? &neon_dot_ops : &neon_ops; }

#else
const kern_ops *kern_neon_ops(void) { return NULL; }
#endif
