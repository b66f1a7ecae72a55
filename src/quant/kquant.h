/*
 * kquant.h — llama.cpp's k-quant and 4-bit i-quant blocks kept as GGUF stores them (DT_Q2_K .. DT_IQ4_XS,
 * util/dtype.h): the layout, the dequantiser (the oracle: bitwise gguf-py's gguf.quants.dequantize) and the
 * integer sums of the int8-activation matmul (kernels/kquant_i8.c; docs/QUANT.md "GGUF block types").
 *
 * Layout of a [rows][cols] matrix: rows back to back, each cols / kq_blk(dt) blocks of kq_bytes(dt) bytes,
 * byte for byte the GGUF tensor's row (llama.cpp ggml-common.h block_q2_K .. block_iq4_xs). Scales live inside
 * the blocks, so a tn_mat of these types has scales == data, biases NULL, group == kq_blk(dt) and sdtype
 * DT_NONE (quant.h q_mat_bind). Blocks hold 256 values (32 for IQ4_NL, Q5_0, Q5_1), which the row length must be a
 * multiple of. Values (e: index in the block, d / dmin the block's f16 scales as f32, every product rounded to f32 in
 * this order, no fused multiply-add: gguf-py's numpy order):
 *   Q2_K  (84 B)   sc[16] qs[64] d dmin      q = qs[32(e/128) + e%32] >> 2((e%128)/32) & 3;
 *                                           w = (d * (sc[e/16] & 15)) * q - dmin * (sc[e/16] >> 4)
 *   Q3_K  (110 B)  hmask[32] qs[64] sc[12] d q = (qs bits as Q2_K) - 4 * !(hmask[e%32] >> (e/32) & 1);
 *                                           w = (d * s) * q, s the 6-bit scale of e/16 less 32
 *   Q4_K  (144 B)  d dmin sc[12] qs[128]     8 sub-blocks of 32 with 6-bit scale a and min m (get_scale_min_k4);
 *                                           q = qs[32(j/2) + e%32] >> 4(j%2) & 15, j = e/32; w = (d * a) * q - dmin * m
 *   Q5_K  (176 B)  d dmin sc[12] qh[32] qs[128]  as Q4_K, q |= (qh[e%32] >> j & 1) << 4
 *   Q6_K  (210 B)  ql[128] qh[64] sc[16] d   q = (ql nibble | qh 2 bits << 4) - 32; w = (d * sc[e/16]) * q
 *   IQ4_NL (18 B)  d qs[16]                  w = d * KV[nibble], elements 0-15 low nibbles, 16-31 high
 *   Q5_0  (22 B)   d qh(u32) qs[16]          q = (nibble as IQ4_NL's) | (qh >> e & 1) << 4; w = d * (q - 16)
 *   Q5_1  (24 B)   d m qh(u32) qs[16]        q as Q5_0's; w = d * q + m (kq_unpacked: sc = mn = 1, dmin = -m, so
 *                                           the formula's (d * 1) * q - (-m * 1) is that sum bitwise)
 *   IQ4_XS (136 B) d sh(u16) sl[4] qs[128]   8 sub-blocks of 32, 6-bit scale less 32; w = (d * s) * KV[nibble]
 *   IQ2_XXS (66 B), IQ2_XS (74 B), IQ2_S (82 B), IQ3_XXS (98 B), IQ3_S (110 B), IQ1_S (50 B), IQ1_M (56 B): values
 *   from lattice grids (8 or 4 values an index), sign bits and 3/4-bit scales per 16 or 32; kquant_iq.c gives each
 *   layout and how its value is (d' * sc) * qv with integers sc, qv, as below.
 * DT_Q2 is sluice's own 2-bit type (quant/q2.c, docs/QUANT.md "q2"), not a GGUF one, kept here because it is a
 * block type like these and runs their kernels: 128 rotated values a block,
 *   Q2    (34 B)   qs[32] d                  q = qs[e % 32] >> 2(e / 32) & 3; w = d * Q2_LEVELS[q] (the rotated
 *                                           weight: a matmul multiplies it by the rotated activations, q2_rotate)
 *   Q2V   (34 B)   code[16] (u16) d          values 8 j .. 8 j + 7 = d * q2v_decode8(code[j]) (quant/q2.c: the E8P
 *                                           lattice codebook), rotated as Q2's
 */
#ifndef SL_KQUANT_H
#define SL_KQUANT_H

#include <stddef.h>
#include <stdint.h>

#include "util/dtype.h"

/* IQ4_NL's 16 levels (llama.cpp kvalues_iq4nl, gguf-py IQ4_NL.kvalues). */
extern const int8_t KQ_IQ4_LEVELS[16];

/* 1 for the block types (the GGUF ones and sluice's q2, q2v; DT_Q5_0, DT_Q5_1 follow DT_Q2V) */
static inline int kq_is(dt_type dt) { return dt >= DT_Q2_K && dt <= DT_Q5_1; }
/* sluice's own block types on rotated values (q2, q2v): kernels.h kern_act qr / dr */
static inline int kq_rotated(dt_type dt) { return dt == DT_Q2 || dt == DT_Q2V; }
/* q2's integer levels, code order: d * Q2_LEVELS[q] approximates the Lloyd-Max levels of N(0, 1), +-0.4528 and
 * +-1.5104, at a common scale (3 : 10 against 1 : 3.336) */
extern const int8_t Q2_LEVELS[4];
/* q2v: the 8 integer values (odd, -11 .. 11) of one 16-bit code (quant/q2.c), and its 256 magnitude patterns [256][8]
 * (made on first use; thread-safe). */
void q2v_decode8(uint16_t code, int8_t *out);
/* The 256 patterns [256][8] are followed by 256 bytes "sixes" and 128 bytes "signs" (as uint8_t), the SIMD unpackers'
 * form of q2v_decode8's rule: the sign byte of a code (bit i: value i negative) is signs[bits 8-14] ^ sixes[bits 0-7]
 * (signs[s] = s | parity(s) << 7; sixes[k] = 0x80 when pattern k has an odd number of magnitudes 6 (3/2), else 0). */
const int8_t *q2v_patterns(void);
/* Whether dt's int8 kernels take llama.cpp's q8_K activations (one scale per 256 values: kernels.h kern_act qk /
 * dk), as its vec_dot_type is GGML_TYPE_Q8_K (ggml-cpu.c type_traits_cpu); IQ4_NL's and Q5_0's is q8_0, Q5_1's
 * q8_1 (per 32: q0 / d0, and Q5_1's min times the block sums s1: kquant_i8.c). */
static inline int kq_act_k(dt_type dt) {
    return kq_is(dt) && dt != DT_IQ4_NL && dt != DT_Q5_0 && dt != DT_Q5_1 && !kq_rotated(dt);
}
/* q2 and q2v read neither: their activations are rotated first (kernels.h kern_act qr / dr). */
/* Values per block (256; 32 for IQ4_NL, Q5_0, Q5_1; 128 for q2) and bytes per block; 0 for other types. */
int kq_blk(dt_type dt);
int kq_bytes(dt_type dt);
/* Bytes of one row of cols values (cols a multiple of kq_blk). */
static inline size_t kq_row_bytes(dt_type dt, int64_t cols) {
    return kq_blk(dt) ? (size_t)(cols / kq_blk(dt)) * (size_t)kq_bytes(dt) : 0;
}
/* The container dtype of a GGUF type id (ggml_type: Q5_0 = 6, Q5_1 = 7, Q2_K = 10 ... IQ4_XS = 23, IQ1_M = 29), DT_NONE
 * if not one of these;
 * and back (0 for q2, which has none). */
dt_type kq_from_ggml(uint32_t ggml_type);
uint32_t kq_to_ggml(dt_type dt);

/* One block's kq_blk(dt) values as f32 (the layout above; bitwise gguf-py). Cannot fail. */
void kq_block_to_f32(dt_type dt, const uint8_t *blk, float *out);
/* n values (a multiple of kq_blk) of a row from its start: n / kq_blk blocks. */
void kq_row_to_f32(dt_type dt, const uint8_t *row, int n, float *out);

/* n_blocks random but valid blocks of dt at out (for tests and benchmarks): random code and scale bytes, the f16
 * scales finite, of either sign, magnitudes 2^-12 .. 2^-3. *state is the generator's state. Cannot fail. */
void kq_random(dt_type dt, uint8_t *out, size_t n_blocks, uint64_t *state);

/* A block unpacked: value codes qv as the formula multiplies them (Q6_K's q - 32, Q3_K's signed q, IQ4's level,
 * Q5_0's q - 16),
 * per group of gs values (16 or 32) an integer scale sc and min mn (0 where the type has none), the f16 scales
 * as f32; n values. */
typedef struct kq_unpacked {
    int8_t qv[256];
    int16_t sc[16], mn[16];
    int gs, n, has_min;
    float d, dmin; /* dmin 0 when !has_min */
} kq_unpacked;
/* Unpacks one block. Cannot fail. */
void kq_unpack(dt_type dt, const uint8_t *blk, kq_unpacked *u);
/* The grid i-quants' part of kq_unpack (kquant_iq.c: dt one of DT_IQ2_XXS .. DT_IQ1_M; sets gs, sc, qv, d). */
void kq_unpack_iq(dt_type dt, const uint8_t *blk, kq_unpacked *u);
/* The grid of a grid i-quant as kq_unpack_iq uses it (expanded on first use; thread-safe), for the SIMD unpackers:
 * entry i's values at grid + W i, W = 4 for IQ3_XXS / IQ3_S, else 8 (IQ1_S and IQ1_M share one grid of -1 / 0 / 1;
 * the others hold gguf-py's positive grid values); NULL for any other type. */
const int8_t *kq_iq_grid(dt_type dt);
/* IQ1_S / IQ1_M's 8 values of grid entry i with a delta of +1, as kq_unpack_iq gives them, plus 9: 8 bytes each,
 * 8 grid_i + 10, 2 .. 18 (2048 entries, 16 KiB; made on first use; thread-safe), for the SIMD unpackers
 * (kernels/kquant_iq_x86.h: unsigned values for vpdpbusd). */
const int8_t *kq_iq1_plus10(void);

/* The integer part of one block against int8 activations q (u->n values, column order), per 32 values b
 * (kernels/kquant_i8.c's canonical arithmetic, docs/QUANT.md); exact integer arithmetic:
 *   isum[b] = sum_i sc(i) * qv_i * q_i,   msum[b] = sum_i mn(i) * q_i. */
void kq_sums(const kq_unpacked *u, const int8_t *q, int32_t *isum, int32_t *msum);

#endif
