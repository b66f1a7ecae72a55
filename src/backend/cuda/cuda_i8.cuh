/*
 * cuda_i8.cuh — the int8 matmuls' job table and device helpers, shared by cuda_i8.cu (mv_i8, the GEMMs) and
 * cuda_mv.cu (the one-token and few-token matvecs of decode). Only for src/backend/cuda/.
 */
#ifndef SL_CUDA_I8_CUH
#define SL_CUDA_I8_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_pdl.cuh"

#define MAXJ 32 /* matrices per launch (the job table is a kernel parameter) */

struct ijob {
    const uint8_t *codes;
    const void *scales, *biases;
    const int8_t *xq; /* the activation's q (q8) or q4 (q4) codes */
    const float *d, *s;
    const int *rows;
    const int *yrows;       /* y's row of token t (NULL: t) */
    const void *const *tab; /* device [E][3] codes, scales, biases; with sel: the matrix is tab[*sel] */
    const int *sel;
    const float *sg, *su; /* slcu_act sg, su: the activation made in the kernel (mv1c_i8) */
    float *y;
    size_t ldy;
    int nrows, cols, group, sdt, n_tok, tile0, ttiles;
};
struct ijobs {
    ijob j[MAXJ];
    int n;
    int ib; /* 1: every job's biases are implied (slcu_mat ibias, SLUICE_CUDA_IBIAS=1): the matvecs' IB = 1 instances */
    /* 1: every job's device-table cell (sel) was written by a kernel two launches or more before this one (cuda.h
     * slcu_matmul_i8_early: the experts' down after the route and gate/up), so cuda_mv.cu mv1c_sw (mv1c_body EX = 1;
     * mv1c_i8's instances ignore it) resolves it and issues its weights' loads before pdl_wait. A PDL launch starts
     * once every CTA of the kernel before it has exited or triggered, and every kernel of a step waits (pdl_wait)
     * before either (cuda_pdl.cuh), so by then every kernel before that one has finished and its writes are visible;
     * sel is still read by __ldcg (resolve). 0: wait first. */
    int early;
    int trig; /* 1 (cuda.h slcu_matmul_i8_swi trig; cuda_mv.cu SLUICE_CUDA_RESOLVE=3): mv1c_sw's (mv1c_i8 JR's) CTAs
               * trigger the launch after it (pdl_trigger) once they have waited, so its CTAs start as these end; 0 none
               * (the launch after starts as the last ends) */
    /* the tiles of each job when every job has as many (cuda_i8.cu tail_jobs), else 0: mv1c_sw finds its job as
     * blockIdx.x / uni (job_of) where find_job walks the tile0 words one dependent parameter load after another (a
     * constant-cache miss each, new for every launch: call R's "resolve" grew with the jobs, 0.5 us for o's one, 1.5
     * for down's 8, 2.1 for gate/up's 16 with no global load in it); the same job */
    int uni;
};

static __device__ __forceinline__ int dp4a_us(unsigned a, int b, int c) { /* unsigned bytes of a times signed bytes of b */
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

static __device__ __forceinline__ int find_job(const ijobs &J) {
    int k = 0;
    while (k + 1 < J.n && (int)blockIdx.x >= J.j[k + 1].tile0) k++;
    return k;
}

/* find_job, or with EX and J.uni (every job uni tiles: tile0 = jk uni) the quotient: the same job */
template <int EX>
static __device__ __forceinline__ int job_of(const ijobs &J) {
    return EX && J.uni ? (int)blockIdx.x / J.uni : find_job(J);
}

/* A job of the device-side table (slcu_mm tab / sel): its matrix's pointers, read on the device; and token t's row
 * of the activation. sel and rows are words a kernel of the step writes (the route's choice), so every kernel reads
 * them by __ldcg, never __ldg: ld.global.nc promises a word unchanged for the kernel's life, which a kernel launched
 * with PDL does not have (it starts before the kernel before it ends), and ptxas (CUDA 13.0, sm_90) issued those loads
 * above griddepcontrol.wait in mv1c_i8 and mv1d_i8, so the experts' matvec read the route's cell before the route
 * wrote it (tests/cuda/test_cuda_pdl.c check_pdl: an illegal address with PDL on the matvecs, session 32). */
static __device__ __forceinline__ ijob resolve(ijob j) {
    if (j.tab) {
        const void *const *p = j.tab + (size_t)3 * __ldcg(j.sel);
        j.codes = (const uint8_t *)p[0], j.scales = p[1], j.biases = p[2];
    }
    return j;
}

static __device__ __forceinline__ int act_row(const ijob &j, int t) {
    if (t >= j.n_tok) t = 0; /* a missing token repeats the first; never stored */
    return j.rows ? __ldcg(j.rows + t) : t;
}

/* A scale or bias as one aligned 32-bit load (no branch on its type, so loads can be batched ahead), then
 * its value. */
static __device__ __forceinline__ unsigned ld_sw(const void *p, int sdt, size_t i) {
    const uintptr_t a = sdt == DT_F32 ? (uintptr_t)((const float *)p + i) : (uintptr_t)((const unsigned short *)p + i);
    return __ldg((const unsigned *)(a & ~(uintptr_t)3));
}
static __device__ __forceinline__ float raw_sw(unsigned w, int hi, int sdt) { /* the value in word w (hi: upper half) */
    if (sdt == DT_F32) return __uint_as_float(w);
    const unsigned h = hi ? w >> 16 : w & 0xffffu;
    return sdt == DT_BF16 ? __uint_as_float(h << 16) : __half2float(__ushort_as_half((unsigned short)h));
}
static __device__ __forceinline__ float cv_sw(unsigned w, const void *p, int sdt, size_t i) {
    if (sdt == DT_F32) return __uint_as_float(w);
    const unsigned h = ((uintptr_t)((const unsigned short *)p + i) & 2) ? w >> 16 : w & 0xffffu;
    return sdt == DT_BF16 ? __uint_as_float(h << 16) : __half2float(__ushort_as_half((unsigned short)h));
}

/* A group's bias in a matvec of IB = 1 (ijobs ib: every job's matrix has tn_mat bias_implied, SLUICE_CUDA_IBIAS=1):
 * z times the group's decoded scale sw, z = -8 (q4) or -128 (q8), in f32: the float a bias word of the matrix
 * decodes to, since quant.c q_biases_implied holds only when that word's value is this f32 product bit for bit (an
 * overflow included: both infinite), so the same bits as loading it, without its bytes. The IB = 0 instances read
 * every bias word, as before (the same code and registers). */
template <int DT>
static __device__ __forceinline__ float zbias(float sw) { return __fmul_rn(DT == DT_Q4 ? -8.0f : -128.0f, sw); }

/* One 32-column block's integer dot: q4 codes w0 (16 bytes, low nibbles first) or q8 codes w0, w1 (32 bytes)
 * against the block's int8 activation x0, x1 (32 bytes), in one fixed dp4a order (both matvec kernels). */
template <int DT>
static __device__ __forceinline__ int dot_block(const uint4 &w0, const uint4 &w1, const uint4 &x0, const uint4 &x1) {
    int I = 0;
    if (DT == DT_Q4) {
        const unsigned M = 0x0f0f0f0fu;
        I = __dp4a((int)(w0.x & M), (int)x0.x, I);
        I = __dp4a((int)((w0.x >> 4) & M), (int)x0.y, I);
        I = __dp4a((int)(w0.y & M), (int)x0.z, I);
        I = __dp4a((int)((w0.y >> 4) & M), (int)x0.w, I);
        I = __dp4a((int)(w0.z & M), (int)x1.x, I);
        I = __dp4a((int)((w0.z >> 4) & M), (int)x1.y, I);
        I = __dp4a((int)(w0.w & M), (int)x1.z, I);
        I = __dp4a((int)((w0.w >> 4) & M), (int)x1.w, I);
    } else {
        I = dp4a_us(w0.x, (int)x0.x, I), I = dp4a_us(w0.y, (int)x0.y, I);
        I = dp4a_us(w0.z, (int)x0.z, I), I = dp4a_us(w0.w, (int)x0.w, I);
        I = dp4a_us(w1.x, (int)x1.x, I), I = dp4a_us(w1.y, (int)x1.y, I);
        I = dp4a_us(w1.z, (int)x1.z, I), I = dp4a_us(w1.w, (int)x1.w, I);
    }
    return I;
}

/* Block b (32 columns) of a token by one warp, lane = column, value v: its codes into qr / q4r (the token's rows of
 * the codes in column order and in q4's order), dr[b] and the block sum s32 = sr[b]; returns s32 (on every lane).
 * kern_act's act_row operation by operation (cuda_i8.cu act_quant; cuda_mv.cu mv1c_sw's SwiGLU quads). */
static __device__ __forceinline__ float quant_block(float v, int b, int lane, int8_t *qr, int8_t *q4r, float *dr, float *sr) {
    float amax = fmaxf(0.0f, fabsf(v)); /* fmaxf drops a NaN, as the CPU's running fmaxf from 0 does */
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float db = __fdiv_rn(amax, 127.0f), id = db != 0.0f ? __fdiv_rn(1.0f, db) : 0.0f;
    const float rv = rintf(__fmul_rn(v, id)); /* NaN (from Inf or NaN inputs) becomes 0 */
    const int qi = rv >= 127.0f ? 127 : rv <= -127.0f ? -127 : rv == rv ? (int)rv : 0;
    int sum = qi;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const size_t c = (size_t)b * 32;
    qr[c + lane] = (int8_t)qi;
    const int c8 = lane & 7;
    q4r[c + (lane & ~7) + ((c8 & 1) ? 4 + (c8 >> 1) : (c8 >> 1))] = (int8_t)qi;
    const float sb = __fmul_rn(db, (float)sum);
    if (lane == 0) dr[b] = db, sr[b] = sb;
    return sb;
}

/* cp.async of 4 bytes, and of 16 (zero-filled unless ok) */
static __device__ __forceinline__ void cp4(void *dst, const void *src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src));
}
static __device__ __forceinline__ void cp16(void *dst, const void *src, bool ok) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(ok ? 16 : 0));
}

/* cuda_mv.cu: rows a CTA of the one-token matvec takes for the jobs of one launch (its tiles), and the launch of
 * mv1_i8 (max_tok 1) or mvn_i8 (2 to 8 tokens) over J with J->j[].tile0 set for those rows. */
int mv_tile_rows(const ijobs *J, int max_tok);
int mv_takes(int max_tok); /* 1 when cuda_mv.cu runs max_tok (1-8) tokens, 0 when mv_i8 does (SLUICE_CUDA_MVN=3) */
int mv_swiglu_ok(void); /* the one-token kernel is mv1c_i8 or mv1d_i8, which take slcu_act sg inputs */
cudaError_t mv_launch(int dt, int sdt, int max_tok, int rows, int tiles, const ijobs *J);
/* SLUICE_CUDA_FUSE=qkv (cuda_mv.cu mv1c_nr): the one-token matvec over J, then slcu_norm_rope's parts (A) each on the
 * rows of job job[i], a head by the CTA that completes its rows (counters cnt [A.n0 + part 1's heads], zero before and
 * after); pd: the recorded step's position (NULL: A.pos). mv_nr_ok: 1 when the one-token kernel has this tail. */
struct nr_tail;
int mv_nr_ok(void);
cudaError_t mv_nr_launch(int dt, int sdt, int rows, int tiles, const ijobs *J, const nr_tail *T);
/* SLUICE_CUDA_FUSE=o (cuda_mv.cu mv1c_an): the one-token matvec of J's one job, then slcu_add_norm_q's work by the CTA
 * that finishes last (T: its arguments and the launch's counter) */
struct an_tail;
cudaError_t mv_an_launch(int dt, int sdt, int rows, int tiles, const ijobs *J, const an_tail *T);
/* SLUICE_CUDA_SWIDOWN=2 (cuda.h slcu_matmul_i8_swi; cuda_mv.cu mv1c_sw): one token's gate and up matvecs of k slots
 * (J's jobs 2 s and 2 s + 1, each I rows), then the SwiGLU of each slot's I outputs and its int8 form into the mid
 * activation's row s, a quad of 4 blocks (128 columns) by the CTA that completes that quad's gate and up rows
 * (counters cnt [k][nq], zero before and after; J->trig: every CTA triggers the launch after it once it has waited).
 * mv_sw_ok: 1 when the one-token kernel is mv1c_i8 (which has this tail); mv_sw_cnt: the counters for k nq quads
 * (cuda_mv.cu's, one set for the process: the launches that use them are in stream order), or NULL past their room. */
struct sw_tail {
    int8_t *q, *q4; /* the mid activation (slcu_act of k rows of I): codes, block scales, sums */
    float *d, *s;
    int I, nq; /* columns of a row (the gate and up rows), quads of a row; nq 0: no tail (slcu_matmul_i8_early) */
    int *cnt;
};
int mv_sw_ok(void);
int *mv_sw_cnt(int n);
cudaError_t mv_sw_launch(int dt, int sdt, int rows, int tiles, const ijobs *J, const sw_tail *T);
/* cuda_mv1d.cu (SLUICE_CUDA_MV1=4): the rows a CTA it picks for a launch, and its launch of one token's jobs with
 * those rows (4, 8, 16 or 32): 0 when it cannot take them (a row longer than it stages; mv1c_i8 runs them), else 1 */
int mv1d_tile_rows(const ijobs *J);
int mv1d_launch(int dt, int sdt, int rows, int tiles, const ijobs *J, int pdl);
/* cuda_mv1d.cu mvnd_i8 (SLUICE_CUDA_MVN=4): 2 to max_tok <= 8 tokens with 16 rows a CTA; 0 when it cannot take them */
int mvnd_launch(int dt, int sdt, int max_tok, int rows, int tiles, const ijobs *J);

#endif
