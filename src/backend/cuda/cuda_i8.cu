/*
 * cuda_i8.cu — int8 activations and the q8/q4 integer kernels of the CUDA tier (cuda.h: the canonical order).
 *
 * act_quant: kern_act's quantisation (src/kernels/kernels_scalar.c act_row) operation by operation, IEEE
 * divisions and rint, so codes, block scales and sums are bitwise the CPU's.
 *
 * mv_i8 (decode, fewer than 16 tokens): a warp takes 32 rows, a thread a row; the codes and the scale words
 * stream through shared memory by cp.async (3 stages of 256 bytes a row), each thread dots its row's blocks
 * with the int8 activations by dp4a (the idea of llama.cpp's ggml/src/ggml-cuda/mmvq.cu; q8 codes are
 * unsigned: dp4a.u32.s32) and folds them in order; activation loads are one address across the warp.
 *
 * gemm_i8 (16 tokens or more, the grouped GEMM over expert segments): a CTA of 4 warps computes 64 rows x
 * 64 tokens of one matrix; per 32-column block each warp issues mma.sync m16n8k32 (u8 codes x s8
 * activations -> s32: the block's exact I_b for 32 rows x 32 tokens) and folds it into its f32
 * accumulators in the same order as mv_i8. Within a block the columns are paired in another order than
 * column order (thread tig of a quad takes bytes 8 tig .. 8 tig + 7 for logical k 4 tig .. and 16 + 4 tig
 * ..); A and B use the same pairing and integer sums are exact, so I_b is unchanged.
 *
 * act_quant and act_quant_rows wait (pdl_wait) before their first global access; slcu_act_quantize launches them by
 * cuda_pdl.cuh pdl_launch (a decode step's overlapped launches).
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_i8.cuh"
#include "backend/cuda/cuda_addnorm.cuh"
#include "backend/cuda/cuda_normrope.cuh"
#include "kernels/canon_exp.h"

static int fail(char *msg, size_t n, const char *what, cudaError_t e) {
    if (msg && n) snprintf(msg, n, "%s: %s", what, cudaGetErrorString(e));
    return -1;
}

static size_t rnd256(size_t n) { return (n + 255) / 256 * 256; }

extern "C" size_t slcu_act_bytes(int n_tok, int cols) {
    size_t n = (size_t)(n_tok > 0 ? n_tok : 0), c = (size_t)(cols > 0 ? cols : 0), nb = c / 32, ns = nb + nb / 2 + nb / 4;
    return 2 * rnd256(n * c) + rnd256(n * nb * 4) + rnd256(n * ns * 4);
}

extern "C" int slcu_act_bind(slcu_act *a, void *buf, int n_tok, int cols, char *msg, size_t msglen) {
    if (cols <= 0 || cols % 32 || n_tok < 0) {
        if (msg && msglen) snprintf(msg, msglen, "int8 activations need a positive multiple of 32 columns, not %d", cols);
        return -1;
    }
    size_t n = (size_t)n_tok, c = (size_t)cols, nb = c / 32;
    uint8_t *p = (uint8_t *)buf;
    a->n_tok = n_tok, a->cols = cols, a->sg = a->su = NULL;
    a->q = (int8_t *)p;
    p += rnd256(n * c);
    a->q4 = (int8_t *)p;
    p += rnd256(n * c);
    a->d = (float *)p;
    p += rnd256(n * nb * 4);
    a->s = (float *)p;
    return 0;
}

/* grid (ceil(nb/4), n_tok), 128 threads: warp w quantizes block 4 blockIdx.x + w of token blockIdx.y, lane
 * = column; thread 0 then adds the block sums into s64 / s128 as act_row does. */
__global__ void act_quant(const float *__restrict__ x, size_t ldx, int cols, int8_t *__restrict__ q,
                          int8_t *__restrict__ q4, float *__restrict__ d, float *__restrict__ s) {
    pdl_wait();
    const int t = blockIdx.y, nb = cols / 32, ns = nb + nb / 2 + nb / 4, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.x * 4 + w;
    __shared__ float s32[4];
    if (b < nb) {
        const float sb = quant_block(x[(size_t)t * ldx + (size_t)b * 32 + lane], b, lane, q + (size_t)t * cols,
                                     q4 + (size_t)t * cols, d + (size_t)t * nb, s + (size_t)t * ns);
        if (lane == 0) s32[w] = sb;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 0; i < 2; i++) {
            const int jj = 2 * blockIdx.x + i;
            if (jj < nb / 2) s[(size_t)t * ns + nb + jj] = __fadd_rn(s32[2 * i], s32[2 * i + 1]);
        }
        if ((int)blockIdx.x < nb / 4)
            s[(size_t)t * ns + nb + nb / 2 + blockIdx.x] = __fadd_rn(__fadd_rn(s32[0], s32[1]), __fadd_rn(s32[2], s32[3]));
    }
}

/* The same for many tokens (a prefill's rows): a CTA per token, warp w takes the row's quads of 4 blocks w, w + 8, ...
 * and lane 0 adds each quad's s64 / s128 as act_quant's thread 0 does. act_quant launched a CTA of 128 per 4 blocks
 * (8192 for 512 x 2048: 14 us on the H100, CTA launches more than bytes). SW: the values are SwiGLU's of gate x and
 * up u (k_swiglu's operations, canon_silu), quantised where they are computed (never stored as floats). */
template <bool SW>
__global__ void __launch_bounds__(256) act_quant_rows(const float *__restrict__ x, const float *__restrict__ u, size_t ldx, int cols,
                                                      int8_t *__restrict__ q, int8_t *__restrict__ q4, float *__restrict__ d,
                                                      float *__restrict__ s) {
    pdl_wait();
    const int t = blockIdx.x, nb = cols / 32, ns = nb + nb / 2 + nb / 4, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const float *xr = x + (size_t)t * ldx, *ur = SW ? u + (size_t)t * ldx : NULL;
    int8_t *qr = q + (size_t)t * cols, *q4r = q4 + (size_t)t * cols;
    float *dr = d + (size_t)t * nb, *sr = s + (size_t)t * ns;
    for (int qd = threadIdx.x >> 5; qd * 4 < nb; qd += nw) {
        float v[4], sb[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const size_t c = (size_t)(qd * 4 + i) * 32 + lane;
            v[i] = qd * 4 + i >= nb ? 0.f : SW ? __fmul_rn(canon_silu(xr[c]), ur[c]) : xr[c];
        }
#pragma unroll
        for (int i = 0; i < 4; i++)
            if (qd * 4 + i < nb) sb[i] = quant_block(v[i], qd * 4 + i, lane, qr, q4r, dr, sr);
        if (lane == 0) {
            for (int i = 0; i < 2; i++)
                if (2 * qd + i < nb / 2) sr[nb + 2 * qd + i] = __fadd_rn(sb[2 * i], sb[2 * i + 1]);
            if (qd < nb / 4) sr[nb + nb / 2 + qd] = __fadd_rn(__fadd_rn(sb[0], sb[1]), __fadd_rn(sb[2], sb[3]));
        }
    }
}

/* SLUICE_CUDA_ROWS=1 (off by default until a device run proves it): the MoE block's SwiGLU quantised in the same
 * pass (act_quant_rows<true>) and cuda_ops.cu's rmsnorm a warp per row for many rows. Bitwise either way. */
static int rows_kernels(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("SLUICE_CUDA_ROWS");
        v = e && e[0] == '1';
    }
    return v;
}

extern "C" int slcu_act_quantize(const slcu_act *a, const float *x, size_t ldx, char *msg, size_t msglen) {
    if (a->n_tok <= 0) return 0;
    const int nb = a->cols / 32, quads = (nb + 3) / 4;
    if (a->n_tok >= 16) {
        pdl_launch(act_quant_rows<false>, (unsigned)a->n_tok, 32 * (quads < 8 ? quads : 8), 0, SLS, x, (const float *)NULL, ldx,
                   a->cols, a->q, a->q4, a->d, a->s);
    } else {
        dim3 grid((unsigned)quads, (unsigned)a->n_tok);
        pdl_launch(act_quant, grid, 128, 0, SLS, x, ldx, a->cols, a->q, a->q4, a->d, a->s);
    }
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : fail(msg, msglen, "activation quantisation launch", e);
}

/* ---- the matmuls ---------------------------------------------------------------------------------------- */

/* One warp, 32 rows, a thread a row. The rows' codes stream through shared memory in tiles of MV_TILE bytes
 * a row, MV_STAGES deep (cp.async, coalesced: 16 lanes cover 256 contiguous bytes), so that each thread
 * folds its own row's blocks in order with no shuffles, and the activation loads are the same address
 * across the warp (one broadcast). The tile's scales and biases travel with it (the aligned 32-bit words
 * that hold them, cp.async of 4 bytes). */
#define MV_ROWS 32
#define MV_TILE 256
#define MV_STAGES 3
#define MV_BPT (MV_TILE / 16) /* q4 blocks per tile (q8: half) */
#define MV_SW 17              /* 32-bit words of a tile's scales of a row, at most: 16 f32 + 1 (odd: no conflicts) */


template <int DT, int NT, int SDT, int IB>
__global__ void __launch_bounds__(32) mv_i8(const __grid_constant__ ijobs J) {
    const ijob j = resolve(J.j[find_job(J)]); /* a copy: registers, not a parameter load at every use */
    constexpr int sdt = SDT; /* the scale type fixed: no branch between the blocks of a tile */
    __shared__ __align__(16) uint8_t tile[MV_STAGES][MV_ROWS][MV_TILE + 16]; /* + 16: no bank conflicts */
    __shared__ unsigned ssc[MV_STAGES][2][MV_ROWS][MV_SW]; /* the tile's scale and bias words of each row */
    constexpr int BPT = DT == DT_Q4 ? MV_BPT : MV_BPT / 2, BB = DT == DT_Q4 ? 16 : 32; /* blocks a tile, bytes a block */
    const int lane = threadIdx.x, r0 = ((int)blockIdx.x - j.tile0) * MV_ROWS, r = r0 + lane;
    const int cols = j.cols, nb = cols / 32, ng = cols / j.group, ns = nb + nb / 2 + nb / 4;
    const int rb = DT == DT_Q4 ? cols / 2 : cols, ntl = (rb + MV_TILE - 1) / MV_TILE;
    const int gshift = j.group == 32 ? 0 : j.group == 64 ? 1 : 2, soff = j.group == 32 ? 0 : j.group == 64 ? nb : nb + nb / 2;
    const int bmask = j.group / 32 - 1;
    constexpr int ssz = sdt == DT_F32 ? 4 : 2;
    const uint8_t *codes = j.codes;
    const int8_t *xq = j.xq;
    const float *xd = j.d, *xs = j.s;
    for (int t0 = 0; t0 < j.n_tok; t0 += NT) {
        const int nt = j.n_tok - t0 < NT ? j.n_tok - t0 : NT;
        int ar[NT];
        float acc[NT], accb[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) ar[t] = act_row(j, t0 + t < j.n_tok ? t0 + t : 0), acc[t] = 0.f, accb[t] = 0.f;
        auto issue = [&](int k) { /* tile k into stage k % MV_STAGES: 32 rows x 16 chunks, and their scale words */
            if (k < ntl) {
                const int st = k % MV_STAGES;
#pragma unroll 1
                for (int it = 0; it < MV_ROWS * (MV_TILE / 16) / 32; it++) {
                    const int q = it * 32 + lane, i = q / (MV_TILE / 16), c = q % (MV_TILE / 16);
                    const int off = k * MV_TILE + c * 16, row = r0 + i < j.nrows ? r0 + i : j.nrows - 1;
                    cp16(&tile[st][i][c * 16], codes + (size_t)row * rb + (off < rb ? off : 0), off < rb);
                }
                const int gk = (k * BPT) >> gshift, gn = min(BPT >> gshift, ng - gk); /* the tile's groups */
#pragma unroll 1
                for (int h = 0; h < (IB ? 1 : 2); h++) { /* (biases NULL: computed from the scales) */
                    const uintptr_t base = (uintptr_t)(h ? j.biases : j.scales);
                    const int nw = (ssz == 4 ? gn : gn / 2 + 1) + (ssz == 4 ? 0 : 1); /* words a row needs, at most */
#pragma unroll 1
                    for (int q = lane; q < MV_ROWS * nw; q += 32) {
                        const int i = q / nw, w = q % nw;
                        const size_t row = (size_t)min(r0 + i, j.nrows - 1);
                        const uintptr_t a0 = (base + (row * ng + gk) * ssz) & ~(uintptr_t)3;
                        const uintptr_t last = (base + ((row + 1) * ng) * ssz - 1) & ~(uintptr_t)3, a = a0 + 4 * (uintptr_t)w;
                        cp4(&ssc[st][h][i][w], (const void *)(a < last ? a : last));
                    }
                }
            }
            asm volatile("cp.async.commit_group;");
        };
        __syncwarp();
#pragma unroll 1
        for (int k = 0; k < MV_STAGES - 1; k++) issue(k);
        for (int k = 0; k < ntl; k++) {
            issue(k + MV_STAGES - 1);
            asm volatile("cp.async.wait_group %0;" ::"n"(MV_STAGES - 1));
            __syncwarp();
            const uint8_t *w = tile[k % MV_STAGES][lane];
#pragma unroll
            for (int bi = 0; bi < BPT; bi++) { /* no branch: a block past the row's end is loaded clamped, not added */
                const int bu = k * BPT + bi, b = bu < nb ? bu : nb - 1;
                float sw, bw;
                { /* this row's scale and bias of block b, from the words staged with the tile */
                    const size_t e0 = (size_t)min(r, j.nrows - 1) * ng + ((k * BPT) >> gshift);
                    const int o = (int)(((uintptr_t)j.scales + e0 * ssz) & 3) + ((b >> gshift) - ((k * BPT) >> gshift)) * ssz;
                    const int ob = (int)(((uintptr_t)j.biases + e0 * ssz) & 3) + ((b >> gshift) - ((k * BPT) >> gshift)) * ssz;
                    sw = raw_sw(ssc[k % MV_STAGES][0][lane][o >> 2], o & 2, SDT);
                    bw = !IB ? raw_sw(ssc[k % MV_STAGES][1][lane][ob >> 2], ob & 2, SDT) : zbias<DT>(sw);
                }
                const uint4 w0 = *(const uint4 *)(w + bi * BB), w1 = DT == DT_Q8 ? *(const uint4 *)(w + bi * BB + 16) : w0;
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    if (t >= nt) break;
                    const uint4 *xa = (const uint4 *)(xq + (size_t)ar[t] * cols + (size_t)b * 32);
                    const int I = dot_block<DT>(w0, w1, __ldg(xa), __ldg(xa + 1));
                    const float a1 = __fmaf_rn((float)I, __fmul_rn(sw, __ldg(xd + (size_t)ar[t] * nb + b)), acc[t]);
                    const float a2 = __fmaf_rn(bw, __ldg(xs + (size_t)ar[t] * ns + soff + (b >> gshift)), accb[t]);
                    acc[t] = bu < nb ? a1 : acc[t];
                    accb[t] = bu < nb && !(b & bmask) ? a2 : accb[t];
                }
            }
            __syncwarp(); /* this stage is refilled by the next iteration's issue */
        }
        asm volatile("cp.async.wait_group 0;");
        if (r < j.nrows)
#pragma unroll
            for (int t = 0; t < NT; t++)
                if (t < nt) j.y[(size_t)(t0 + t) * j.ldy + r] = __fadd_rn(acc[t], accb[t]);
    }
}

#include "backend/cuda/cuda_gemm.cuh"

/* 128 threads over a 64 x 64 tile of one job; V 1 gemm_tile, 2 gemm_tile2, 3 gemm_tile3 (the same bits); V 5
 * gemm_tile5: 256 threads over 128 x 64 (2 CTAs an SM in 128 registers); V 6 gemm_tile5 of 4 warps, 64 x 64 (4). */
#define GEMM_MINB(V) (V == 2 || V == 6 ? 4 : V == 5 ? 2 : V >= 3 ? 3 : 1)
#define GEMM_NT(V) (V == 5 ? NT5 : 128)
#define GEMM_NW(V) (V == 5 ? 8 : 4)
template <int DT, int SDT, int V>
__global__ void __launch_bounds__(GEMM_NT(V), GEMM_MINB(V)) gemm_i8(const __grid_constant__ ijobs J) {
    const ijob j = resolve(J.j[find_job(J)]);
    const int tile = (int)blockIdx.x - j.tile0;
    if constexpr (V >= 5) gemm_tile5<DT, SDT, 2, GEMM_NW(V)>(j, tile / j.ttiles, tile % j.ttiles);
    else if constexpr (V >= 3) gemm_tile3<DT, SDT, 2, V == 4>(j, tile / j.ttiles, tile % j.ttiles);
    else if constexpr (V == 2) gemm_tile2<DT, SDT, 2>(j, tile / j.ttiles, tile % j.ttiles);
    else gemm_tile<DT, SDT, 2>(j, tile / j.ttiles, tile % j.ttiles);
}

/* The GEMM kernel of both launchers: 6 (gemm_tile5, 4 warps) unless SLUICE_CUDA_GEMM=1 .. 5 or slcu_i8_gemm says otherwise
 * (docs/CUDA.md "Call G": a 16-layer 30B q4's prefill of 512 tokens 1.19x gemm_tile3's, 5 1.15x, on an H100). */
static int gemm_ver;
static int gemm_version(void) {
    if (!gemm_ver) {
        const char *e = getenv("SLUICE_CUDA_GEMM");
        gemm_ver = e && e[0] >= '1' && e[0] <= '6' && !e[1] ? e[0] - '0' : 6; /* every kernel bitwise the others (test_cuda) */
    }
    return gemm_ver;
}
extern "C" void slcu_i8_gemm(int v) { gemm_ver = v >= 1 && v <= 6 ? v : 0; }

/* gemm_tile3's stages take dynamic shared memory above the 48 KiB that needs no opt-in: the attribute, once per
 * kernel (each instance of these launchers has its own flag). */
static void dyn_smem(const void *k, int dyn, int *set) {
    if (dyn > 48 * 1024 && !*set) cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn), *set = 1;
}
template <int D, int S, int V>
static void ge_launch(int tiles, const ijobs &J) {
    static int set;
    const int dyn = V >= 5 ? g5_bytes<D, 2, GEMM_NW(V)>() : V >= 3 ? g3_bytes<D, 2>() : 0;
    dyn_smem((const void *)gemm_i8<D, S, V>, dyn, &set);
    gemm_i8<D, S, V><<<tiles, GEMM_NT(V), dyn, SLS>>>(J);
}

static int force_kernel;
extern "C" void slcu_i8_force(int kernel) { force_kernel = kernel; }

/* SLUICE_CUDA_IBIAS=1 (cuda.h slcu_i8_ibias): the matvec jobs of matrices with slcu_mat ibias go to launches of their
 * own (ijobs ib), whose kernels compute the biases (cuda_i8.cuh zbias) and never read them. On by default since call J
 * (docs/CUDA.md: bitwise on an H100, each matvec 2-9% faster on groups of 32); SLUICE_CUDA_IBIAS=0 reads them. */
static int ibias_on = -1;
extern "C" void slcu_i8_ibias(int on) { ibias_on = on; }
static int ibias_enabled(void) {
    if (ibias_on < 0) ibias_on = !(getenv("SLUICE_CUDA_IBIAS") && getenv("SLUICE_CUDA_IBIAS")[0] == '0');
    return ibias_on;
}

/* One launch of the jobs of one (dtype, kernel) class. */
static cudaError_t launch_class(int dt, int sdt, int gemm, ijobs *J, int max_tok) {
    int tiles = 0;
    const int mv1 = !gemm && max_tok <= 8 && slcu_decode_kernels && mv_takes(max_tok); /* cuda_mv.cu's kernels */
    const int rows = mv1 ? mv_tile_rows(J, max_tok) : MV_ROWS, gm = gemm_version() == 5 ? 2 * GM : GM;
    for (int i = 0; i < J->n; i++) {
        ijob &j = J->j[i];
        j.tile0 = tiles;
        if (gemm) {
            j.ttiles = (j.n_tok + GN - 1) / GN;
            tiles += (j.nrows + gm - 1) / gm * j.ttiles;
        } else {
            j.ttiles = 1;
            tiles += (j.nrows + rows - 1) / rows;
        }
    }
    if (!tiles) return cudaSuccess;
    if (gemm) {
#define GE1(D, V) (sdt == DT_F32 ? ge_launch<D, DT_F32, V>(tiles, *J) : sdt == DT_BF16 ? ge_launch<D, DT_BF16, V>(tiles, *J) \
                                                                  : ge_launch<D, DT_F16, V>(tiles, *J))
#define GE(D) (gemm_version() == 6 ? GE1(D, 6) : gemm_version() == 5 ? GE1(D, 5) : gemm_version() == 4 ? GE1(D, 4) : gemm_version() == 3 ? GE1(D, 3) : gemm_version() == 2 ? GE1(D, 2) : GE1(D, 1))
        if (dt == DT_Q4) GE(DT_Q4);
        else GE(DT_Q8);
#undef GE
#undef GE1
    } else {
#define MV1(D, NT, S) (J->ib ? mv_i8<D, NT, S, 1> : mv_i8<D, NT, S, 0>)<<<tiles, 32, 0, SLS>>>(*J)
#define MV(D, NT) (sdt == DT_F32 ? MV1(D, NT, DT_F32) : sdt == DT_BF16 ? MV1(D, NT, DT_BF16) : MV1(D, NT, DT_F16))
        if (mv1) {
            return mv_launch(dt, sdt, max_tok, rows, tiles, J);
        } else if (dt == DT_Q4) {
            if (max_tok <= 1) MV(DT_Q4, 1);
            else if (max_tok <= 2) MV(DT_Q4, 2);
            else if (max_tok <= 4) MV(DT_Q4, 4);
            else MV(DT_Q4, 8);
        } else {
            if (max_tok <= 1) MV(DT_Q8, 1);
            else if (max_tok <= 2) MV(DT_Q8, 2);
            else if (max_tok <= 4) MV(DT_Q8, 4);
            else MV(DT_Q8, 8);
        }
#undef MV1
#undef MV
    }
    return cudaGetLastError();
}

/* A row of an n-row activation as a one-row one (backend_cuda.c cu_ffn_multi's views) */
static slcu_act act_row_view(const slcu_act &a, int t) {
    const size_t nb = (size_t)a.cols / 32, ns = nb + nb / 2 + nb / 4;
    slcu_act r;
    memset(&r, 0, sizeof r);
    r.n_tok = 1, r.cols = a.cols, r.q = a.q + (size_t)t * a.cols, r.q4 = a.q4 + (size_t)t * a.cols;
    r.d = a.d + (size_t)t * nb, r.s = a.s + (size_t)t * ns;
    return r;
}

/* SLUICE_CUDA_MVSPLIT (cuda.h slcu_i8_mvsplit): the MiB bound of a 2-8 token job's codes taken as one-token jobs, 0 off.
 * Read once (the first int8 matmul, under the backend's open). The choice by reading the kernels (docs/CUDA.md "A batch
 * of decode steps' waits and matvecs"): mvn_i8 takes 16 rows a CTA, so a decode batch's o (2048 rows) is 128 CTAs of 256
 * threads on 132 SMs and the router (128 rows) 8, latency-bound; the one-token kernel picks its rows a CTA to fill ~6
 * CTAs an SM, so 8 one-token jobs of o are 512 CTAs and of the router 256, each reading the matrix (4 MiB for o, from
 * the L2 after the first). A large matrix (the LM head, 155 MiB) read once a token from memory would lose: the bound. */
static int mvsplit_mib = -1;
extern "C" void slcu_i8_mvsplit(int mib) { mvsplit_mib = mib >= 0 ? mib : -1; }
static int mv_split(const slcu_mm *m) {
    if (mvsplit_mib < 0) {
        const char *e = getenv("SLUICE_CUDA_MVSPLIT");
        const int v = e && *e ? atoi(e) : 0;
        mvsplit_mib = v > 0 ? v : 0;
    }
    if (!mvsplit_mib || m->n_tok < 2 || m->n_tok > 8 || m->rows || m->tab || m->a->sg || force_kernel || !slcu_decode_kernels)
        return 0;
    const size_t codes = (size_t)m->w.rows * (size_t)m->w.cols / (m->w.dtype == DT_Q4 ? 2 : 1);
    return codes <= ((size_t)mvsplit_mib << 20);
}

/* SLUICE_CUDA_MVGEMM=ROWS (cuda.h slcu_i8_mvgemm; off unset or 0): a 2-8 token job (not split) of a matrix of at least
 * ROWS rows takes gemm_i8, as 16 tokens and more do: mvn_i8 stages every token's products of a block through shared
 * memory and ran q4 16384 x 8192 at 8 tokens in 0.223 ms where one token took 0.042 (docs/CUDA.md), compute-bound,
 * where the GEMM's tensor cores take the 8 tokens in one fragment (a 64-token tile mostly empty) and its tiles of 64
 * rows fill the SMs only on tall matrices (the LM head's 151936 rows: 2374 CTAs; o's 2048: 32). Read once. */
static int mvgemm_rows = -1; /* (jobs through a device table keep the matvec: their bias words may be NULL) */
extern "C" void slcu_i8_mvgemm(int rows) { mvgemm_rows = rows >= 0 ? rows : -1; }
static int mv_gemm(const slcu_mm *m) {
    if (mvgemm_rows < 0) {
        const char *e = getenv("SLUICE_CUDA_MVGEMM");
        const int v = e && *e ? atoi(e) : 0;
        mvgemm_rows = v > 0 ? v : 0;
    }
    return mvgemm_rows && m->n_tok >= 2 && m->n_tok <= 8 && !m->tab && !m->a->sg && m->w.rows >= mvgemm_rows;
}

/* mm with each mv_split job as n_tok one-token jobs (row t of its activation, row t of its output), MAXJ jobs a call */
static int matmul_split(const slcu_mm *mm, int n, char *msg, size_t msglen) {
    slcu_mm ex[MAXJ];
    slcu_act av[MAXJ];
    int ne = 0;
    for (int i = 0; i < n; i++) {
        const int k = mv_split(&mm[i]) ? mm[i].n_tok : 1;
        if (ne + k > MAXJ) {
            if (slcu_matmul_i8(ex, ne, msg, msglen)) return -1;
            ne = 0;
        }
        for (int t = 0; t < k; t++, ne++) {
            ex[ne] = mm[i];
            if (k == 1) continue;
            av[ne] = act_row_view(*mm[i].a, t);
            ex[ne].a = &av[ne], ex[ne].n_tok = 1, ex[ne].y = mm[i].y + (size_t)t * mm[i].ldy;
        }
    }
    return ne ? slcu_matmul_i8(ex, ne, msg, msglen) : 0;
}

extern "C" int slcu_matmul_i8(const slcu_mm *mm, int n, char *msg, size_t msglen) {
    static int sw_seen; /* slcu_matmul_i8_swi's counters' address taken at the first matmul (a prefill's or a check's), */
    if (!sw_seen) sw_seen = 1, (void)mv_sw_cnt(1); /* not inside a step being recorded (SLUICE_CUDA_GRAPH=1) */
    for (int i = 0; i < n; i++) {
        const slcu_mm *m = &mm[i];
        const slcu_mat *w = &m->w;
        const char *why = NULL;
        if (w->dtype != DT_Q8 && w->dtype != DT_Q4) why = "the int8 matmul takes q8 and q4 matrices only";
        else if (w->group != 32 && w->group != 64 && w->group != 128) why = "group is not 32, 64 or 128";
        else if (w->cols <= 0 || w->cols % w->group) why = "the group does not divide the columns";
        else if (w->rows <= 0) why = "no rows";
        else if (!m->a || m->a->cols != w->cols) why = "the activation's columns differ from the matrix's";
        else if (m->n_tok < 0 || (!m->rows && m->n_tok > m->a->n_tok)) why = "more tokens than the activation holds";
        else if (w->sdtype != DT_F32 && w->sdtype != DT_F16 && w->sdtype != DT_BF16) why = "scales are not f32, f16 or bf16";
        else if (m->a->sg && (m->n_tok != 1 || m->rows || !m->a->su || force_kernel == 2 || !mv_swiglu_ok()))
            why = "a SwiGLU input made in the kernel needs one token and the default one-token matvec";
        if (why) {
            if (msg && msglen) snprintf(msg, msglen, "int8 matmul %d of %d (%s %d x %d): %s", i, n, dt_name(w->dtype), w->rows, w->cols, why);
            return -1;
        }
    }
    for (int i = 0; i < n; i++)
        if (mv_split(&mm[i])) return matmul_split(mm, n, msg, msglen); /* (its jobs are not split again) */
    ijobs J; /* the kernel parameter, staged on the host */
    static const int sdts[3] = {DT_F32, DT_F16, DT_BF16};
    for (int dt = DT_Q8; dt <= DT_Q4; dt++)
        for (int si = 0; si < 3; si++)
        for (int cls = 0; cls < 3; cls++) { /* the matvec, the matvec of implied biases (SLUICE_CUDA_IBIAS), the GEMM */
            const int sdt = sdts[si], gemm = cls == 2, ib = cls == 1;
            J.n = 0, J.ib = ib, J.early = 0, J.trig = 0, J.uni = 0;
            int max_tok = 0;
            for (int i = 0; i <= n; i++) {
                if (i < n) {
                    const slcu_mm *m = &mm[i];
                    const int use_gemm = force_kernel ? force_kernel == 2 : m->n_tok >= 16 || mv_gemm(m);
                    const int implied = !use_gemm && m->w.ibias && ibias_enabled();
                    if (m->w.dtype != dt || m->w.sdtype != sdt || use_gemm != gemm || implied != ib || m->n_tok == 0) continue;
                    ijob &j = J.j[J.n++];
                    j.codes = (const uint8_t *)m->w.data, j.scales = m->w.scales, j.biases = ib ? NULL : m->w.biases;
                    j.xq = dt == DT_Q4 ? m->a->q4 : m->a->q, j.d = m->a->d, j.s = m->a->s, j.rows = m->rows;
                    j.tab = m->tab, j.sel = m->sel, j.yrows = NULL, j.sg = m->a->sg, j.su = m->a->su;
                    j.y = m->y, j.ldy = m->ldy;
                    j.nrows = m->w.rows, j.cols = m->w.cols, j.group = m->w.group, j.sdt = m->w.sdtype, j.n_tok = m->n_tok;
                    if (m->n_tok > max_tok) max_tok = m->n_tok;
                }
                if (J.n == MAXJ || (i == n && J.n)) {
                    cudaError_t e = launch_class(dt, sdt, gemm, &J, max_tok);
                    if (e != cudaSuccess) return fail(msg, msglen, "int8 matmul launch", e);
                    J.n = 0, max_tok = 0;
                }
            }
        }
    return 0;
}

/* The one-token jobs of mm[0 .. n) (one dtype and scale type, no rows; a device table, a SwiGLU input allowed) as
 * slcu_matmul_i8 builds and tiles one launch class of them (launch_class: the same rows a CTA): 0, or -1 when they
 * are not such jobs (the fused launches' case). */
static int tail_jobs(const slcu_mm *mm, int n, ijobs *J, int *rows, int *tiles) {
    const int dt = mm[0].w.dtype, sdt = mm[0].w.sdtype;
    if (n < 1 || n > MAXJ || (dt != DT_Q8 && dt != DT_Q4) || (sdt != DT_F32 && sdt != DT_F16 && sdt != DT_BF16)) return -1;
    J->n = 0, J->ib = ibias_enabled(), J->early = 0, J->trig = 0, J->uni = 0;
    for (int i = 0; i < n; i++) J->ib &= mm[i].w.ibias != 0; /* one launch: the biases computed when all are implied */
    for (int i = 0; i < n; i++) {
        const slcu_mm *m = &mm[i];
        const slcu_mat *w = &m->w;
        if (w->dtype != dt || w->sdtype != sdt || m->n_tok != 1 || m->rows || !m->a || (m->a->sg && !m->a->su) ||
            m->a->n_tok < 1 || m->a->cols != w->cols || w->rows <= 0 || w->cols <= 0 || (m->tab && !m->sel) ||
            (w->group != 32 && w->group != 64 && w->group != 128) || w->cols % w->group)
            return -1;
        ijob &j = J->j[J->n++]; /* slcu_matmul_i8's job for mm[i] */
        j.codes = (const uint8_t *)w->data, j.scales = w->scales, j.biases = J->ib ? NULL : w->biases;
        j.xq = dt == DT_Q4 ? m->a->q4 : m->a->q, j.d = m->a->d, j.s = m->a->s, j.rows = NULL;
        j.tab = m->tab, j.sel = m->sel, j.yrows = NULL, j.sg = m->a->sg, j.su = m->a->su;
        j.y = m->y, j.ldy = m->ldy;
        j.nrows = w->rows, j.cols = w->cols, j.group = w->group, j.sdt = w->sdtype, j.n_tok = 1;
    }
    *rows = mv_tile_rows(J, 1);
    *tiles = 0;
    const int t0 = (J->j[0].nrows + *rows - 1) / *rows;
    J->uni = t0; /* (read by mv1c_sw only) */
    for (int i = 0; i < J->n; i++) {
        J->j[i].tile0 = *tiles, J->j[i].ttiles = 1;
        *tiles += (J->j[i].nrows + *rows - 1) / *rows;
        if ((J->j[i].nrows + *rows - 1) / *rows != t0) J->uni = 0;
    }
    return 0;
}

/* cuda.h: one token's q/k/v matvecs with q's and k's per-head norm + RoPE in the same launch (cuda_mv.cu mv1c_nr):
 * 1 queued, 0 not its case (nothing queued), -1 failed. The jobs are built and tiled as slcu_matmul_i8 builds one
 * launch class of them (the same rows a CTA), so y is bitwise its; the heads are slcu_norm_rope's code. */
extern "C" int slcu_matmul_i8_nr(const slcu_mm *mm, int n, const slcu_normrope *p, int n_parts, int rot,
                                 const float *inv_freq, float attn_factor, int pos, int *cnt, int cnt_n, char *msg,
                                 size_t msglen) {
    if (n < 1 || n > MAXJ || n_parts < 1 || n_parts > 2 || rot < 0 || rot % 2 || rot > 1024 || !cnt || force_kernel ||
        !slcu_decode_kernels || !mv_takes(1) || !mv_nr_ok())
        return 0;
    ijobs J;
    int rows, tiles;
    if (tail_jobs(mm, n, &J, &rows, &tiles)) return 0;
    nr_tail T;
    memset(&T, 0, sizeof T);
    int heads = 0;
    for (int i = 0; i < 2; i++) {
        T.job[i] = -1;
        if (i >= n_parts) continue;
        const slcu_normrope *q = &p[i];
        for (int k = 0; k < n; k++)
            if (mm[k].y == q->x) T.job[i] = k;
        if (T.job[i] < 0 || q->dim <= 0 || q->dim < rot || q->n_heads <= 0 || q->hs < (size_t)q->dim ||
            (size_t)(q->n_heads - 1) * q->hs + (size_t)q->dim > (size_t)mm[T.job[i]].w.rows)
            return 0;
        T.A.p[i] = *q;
        heads += q->n_heads;
    }
    if (heads > cnt_n || (n_parts == 2 && T.job[0] == T.job[1])) return 0;
    if (n_parts == 1) T.A.p[1] = p[0];
    T.A.n0 = p[0].n_heads, T.A.half = rot / 2, T.A.af = attn_factor, T.A.pos = pos;
    memcpy(T.A.f, inv_freq, (size_t)rot / 2 * sizeof(float));
    T.pd = slcu_step_pos(), T.cnt = cnt;
    const cudaError_t e = mv_nr_launch(mm[0].w.dtype, mm[0].w.sdtype, rows, tiles, &J, &T);
    return e != cudaSuccess ? fail(msg, msglen, "int8 matmul + norm + rope launch", e) : 1;
}

/* cuda.h: one token's matvecs (mm: the o projection, or with p->cy the experts' down matrices) with slcu_add_norm_q
 * of p (its y the matvec's output, or cy's rows the n outputs) done by the launch's last CTA (cuda_mv.cu mv1c_an):
 * 1 queued, 0 not its case (nothing queued), -1 failed. Jobs and tiles as slcu_matmul_i8's, so y is bitwise its;
 * the tail is k_add_norm_q's code. */
extern "C" int slcu_matmul_i8_an(const slcu_mm *mm, int n, const slcu_addnorm *p, const slcu_act *a, int *cnt, char *msg,
                                 size_t msglen) {
    if (!cnt || force_kernel || !slcu_decode_kernels || !mv_takes(1) || !mv_nr_ok() || p->dim <= 0 ||
        p->dim > AN_FUSE_MAXD || (a && (p->dim % 32 || a->n_tok != 1 || a->cols != p->dim)) ||
        (p->cy ? n != p->ck || p->ck > AN_MAXK : n != 1 || p->y != mm->y))
        return 0;
    for (int s = 0; s < n; s++)
        if (mm[s].w.rows != p->dim || (p->cy && mm[s].y != p->cy + (size_t)s * p->dim)) return 0;
    ijobs J;
    int rows, tiles;
    if (tail_jobs(mm, n, &J, &rows, &tiles)) return 0;
    an_tail T;
    memset(&T, 0, sizeof T);
    T.p = *p, T.cnt = cnt;
    if (a) T.a = *a;
    const cudaError_t e = mv_an_launch(mm->w.dtype, mm->w.sdtype, rows, tiles, &J, &T);
    return e != cudaSuccess ? fail(msg, msglen, "int8 matmul + add + rmsnorm launch", e) : 1;
}

/* cuda.h: one token's gate and up matvecs of k = n / 2 slots (mm[2 s] gate, mm[2 s + 1] up, I rows each) whose CTAs
 * also make each slot's SwiGLU and its int8 form into mid's row s (cuda_mv.cu mv1c_sw): 1 queued, 0 not its case
 * (nothing queued), -1 failed. Jobs and tiles as slcu_matmul_i8's, so g and u are bitwise its; mid is slcu_swiglu_q's. */
extern "C" int slcu_matmul_i8_swi(const slcu_mm *mm, int n, const slcu_act *mid, int trig, char *msg, size_t msglen) {
    if (n < 2 || n % 2 || n > MAXJ || !mid || force_kernel || !slcu_decode_kernels || !mv_takes(1) || !mv_sw_ok()) return 0;
    const int k = n / 2, I = mm[0].w.rows, nq = (I / 32 + 3) / 4;
    if (I <= 0 || I % 32 || mid->cols != I || mid->n_tok < k || !mid->q || !mid->q4 || !mid->d || !mid->s) return 0;
    for (int i = 0; i < n; i++)
        if (mm[i].w.rows != I || !mm[i].y) return 0;
    ijobs J;
    int rows, tiles;
    if (tail_jobs(mm, n, &J, &rows, &tiles)) return 0;
    sw_tail T = {mid->q, mid->q4, mid->d, mid->s, I, nq, mv_sw_cnt(k * nq)};
    if (!T.cnt) return 0;
    J.trig = trig != 0 && pdl_enabled();
    const cudaError_t e = mv_sw_launch(mm[0].w.dtype, mm[0].w.sdtype, rows, tiles, &J, &T);
    return e != cudaSuccess ? fail(msg, msglen, "int8 gate/up matmul + SwiGLU launch", e) : 1;
}

/* cuda.h: slcu_matmul_i8 of one-token jobs whose table cells were written two launches or more before: where they are
 * one launch class of mv1c_i8 (tail_jobs), mv1c_sw without its tail (T.nq 0) and with J.early, which mv1c_i8's own
 * instances ignore (their code as before); else slcu_matmul_i8 (waiting first). The same jobs and tiles: the same bits. */
extern "C" int slcu_matmul_i8_early(const slcu_mm *mm, int n, char *msg, size_t msglen) {
    ijobs J;
    int rows, tiles;
    if (n < 1 || n > MAXJ || force_kernel || !slcu_decode_kernels || !mv_takes(1) || !mv_sw_ok() || tail_jobs(mm, n, &J, &rows, &tiles))
        return slcu_matmul_i8(mm, n, msg, msglen);
    sw_tail T;
    memset(&T, 0, sizeof T); /* nq 0: no tail */
    J.early = 1;
    const cudaError_t e = mv_sw_launch(mm[0].w.dtype, mm[0].w.sdtype, rows, tiles, &J, &T);
    return e != cudaSuccess ? fail(msg, msglen, "int8 matmul launch", e) : 0;
}

/* ---- the experts of a layer-major MoE block (slcu_moe_ffn) ----------------------------------------------
 * k_moe_group sorts the n k (token, slot) pairs by expert on the device (one CTA: counts, exclusive sums of the
 * counts and of their 32-token tiles, a scatter); gemm_seg then runs every expert's rows through gemm_tile in
 * one launch: CTA (row tile, token tile, matrix) finds its expert by a binary search over the tile sums. A
 * pair's place within its expert's segment depends on the atomics' order, which no result does: every row's
 * output depends only on its own activation row (cuda.h's canonical order). A decode batch of a few tokens, whose
 * GEMM tiles would be mostly empty, takes the one-token matvecs instead (moe_ffn_mv; SLUICE_CUDA_MOEN). */
#define SEG_TOK 32 /* tokens per CTA of gemm_seg (gemm_tile WN 1: 128 rows x 32 tokens) */

__global__ void __launch_bounds__(1024) k_moe_group(const int *__restrict__ top_e, int nk, int k, int E, int *off,
                                                    int *toff, int *tok, int *cell) {
    __shared__ int cnt[1024], cur[1024];
    for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < nk; i += blockDim.x) {
        const int e = top_e[i];
        if ((unsigned)e < (unsigned)E) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    if (threadIdx.x < 32) { /* warp 0: lane l sums a run of experts, a warp scan gives each run's start */
        const int lane = threadIdx.x, per = (E + 31) / 32, e0 = min(lane * per, E), e1 = min(e0 + per, E);
        int a = 0, t = 0;
        for (int e = e0; e < e1; e++) a += cnt[e], t += (cnt[e] + SEG_TOK - 1) / SEG_TOK;
        int ia = a, it = t;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int va = __shfl_up_sync(0xffffffffu, ia, o), vt = __shfl_up_sync(0xffffffffu, it, o);
            if (lane >= o) ia += va, it += vt;
        }
        a = ia - a, t = it - t;
        for (int e = e0; e < e1; e++) {
            off[e] = a, toff[e] = t, cur[e] = a;
            a += cnt[e], t += (cnt[e] + SEG_TOK - 1) / SEG_TOK;
        }
        if (lane == 31) off[E] = ia, toff[E] = it;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < nk; i += blockDim.x) {
        const int e = top_e[i];
        if ((unsigned)e >= (unsigned)E) continue;
        const int p = atomicAdd(&cur[e], 1);
        tok[p] = i / k, cell[p] = i;
    }
}

/* One gemm_seg launch: matrix z of every expert (tab + (z E + e) 3: data, scales, biases) over its segment. */
struct segjob {
    const void *const *tab;
    const int *off, *toff; /* [E + 1]: each expert's first sorted pair and first token tile */
    const int *tok;        /* the activation row of sorted pair p, or NULL: row p */
    const int *yrows;      /* y's row of sorted pair p, or NULL: row p */
    const int8_t *xq;
    const float *d, *s;
    float *y[2];
    size_t ldy;
    int nrows, cols, group, E;
};

template <int DT, int SDT, int V>
__global__ void __launch_bounds__(GEMM_NT(V), GEMM_MINB(V)) gemm_seg(const __grid_constant__ segjob S) {
    const int tt = blockIdx.y;
    if (tt >= __ldg(S.toff + S.E)) return;
    int lo = 0, hi = S.E - 1; /* the last expert whose tiles start at or before tt (empty ones share a start) */
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (__ldg(S.toff + mid) <= tt) lo = mid;
        else hi = mid - 1;
    }
    const int e = lo, o = __ldg(S.off + e), nb = S.cols / 32, ns = nb + nb / 2 + nb / 4;
    const void *const *p = S.tab + ((size_t)blockIdx.z * S.E + e) * 3;
    ijob j;
    j.codes = (const uint8_t *)p[0], j.scales = p[1], j.biases = p[2];
    j.tab = NULL, j.sel = NULL, j.sg = NULL, j.su = NULL;
    j.rows = S.tok ? S.tok + o : NULL;
    j.xq = S.tok ? S.xq : S.xq + (size_t)o * S.cols;
    j.d = S.tok ? S.d : S.d + (size_t)o * nb;
    j.s = S.tok ? S.s : S.s + (size_t)o * ns;
    j.yrows = S.yrows ? S.yrows + o : NULL;
    j.y = S.yrows ? S.y[blockIdx.z] : S.y[blockIdx.z] + (size_t)o * S.ldy;
    j.ldy = S.ldy;
    j.nrows = S.nrows, j.cols = S.cols, j.group = S.group, j.sdt = SDT, j.n_tok = __ldg(S.off + e + 1) - o;
    j.tile0 = 0, j.ttiles = 1;
    if constexpr (V >= 5) gemm_tile5<DT, SDT, 1, GEMM_NW(V)>(j, blockIdx.x, tt - __ldg(S.toff + e));
    else if constexpr (V >= 3) gemm_tile3<DT, SDT, 1, V == 4>(j, blockIdx.x, tt - __ldg(S.toff + e));
    else if constexpr (V == 2) gemm_tile2<DT, SDT, 1>(j, blockIdx.x, tt - __ldg(S.toff + e));
    else gemm_tile<DT, SDT, 1>(j, blockIdx.x, tt - __ldg(S.toff + e));
}

template <int D, int SD, int V>
static void sg_launch(dim3 grid, const segjob &S) {
    static int set;
    const int dyn = V >= 5 ? g5_bytes<D, 1, GEMM_NW(V)>() : V >= 3 ? g3_bytes<D, 1>() : 0;
    dyn_smem((const void *)gemm_seg<D, SD, V>, dyn, &set);
    gemm_seg<D, SD, V><<<grid, GEMM_NT(V), dyn, SLS>>>(S);
}
static cudaError_t launch_seg(const slcu_mat *w, const segjob &S, int nk, int nmat) {
    const int ty = (nk + SEG_TOK - 1) / SEG_TOK + (S.E < nk ? S.E : nk); /* at most one partial tile an expert */
    const int rt = gemm_version() == 5 ? 256 : 128; /* rows a CTA: gemm_tile5 or the others, WN 1 */
    const dim3 grid((unsigned)((w->rows + rt - 1) / rt), (unsigned)ty, (unsigned)nmat);
#define SG1(D, V) (w->sdtype == DT_F32 ? sg_launch<D, DT_F32, V>(grid, S) : w->sdtype == DT_BF16 ? sg_launch<D, DT_BF16, V>(grid, S) \
                                                                   : sg_launch<D, DT_F16, V>(grid, S))
#define SG(D) (gemm_version() == 6 ? SG1(D, 6) : gemm_version() == 5 ? SG1(D, 5) : gemm_version() == 4 ? SG1(D, 4) : gemm_version() == 3 ? SG1(D, 3) : gemm_version() == 2 ? SG1(D, 2) : SG1(D, 1))
    if (w->dtype == DT_Q4) SG(DT_Q4);
    else SG(DT_Q8);
#undef SG
#undef SG1
    return cudaGetLastError();
}

/* slcu_moe's work buffer: ints off, toff [E + 1], tok, cell [n k]; g, u [n k][I]; the int8 forms of h and of
 * the mid rows. */
struct moe_work {
    int *off, *toff, *tok, *cell;
    float *g, *u;
    void *xa, *ma;
};
static size_t moe_carve(const slcu_moe *m, moe_work *w) {
    const size_t nk = (size_t)m->n * m->k, E1 = (size_t)m->E + 1;
    const size_t sz[8] = {E1 * 4, E1 * 4, nk * 4, nk * 4, nk * m->I * 4, nk * m->I * 4, slcu_act_bytes(m->n, m->H),
                          slcu_act_bytes((int)nk, m->I)};
    uint8_t *p = (uint8_t *)m->work;
    void *at[8];
    size_t tot = 0;
    for (int i = 0; i < 8; i++) at[i] = p ? p + tot : NULL, tot += rnd256(sz[i]);
    if (w) *w = (moe_work){(int *)at[0], (int *)at[1], (int *)at[2], (int *)at[3], (float *)at[4], (float *)at[5], at[6], at[7]};
    return tot;
}

extern "C" size_t slcu_moe_bytes(int n, int k, int E, int H, int I) {
    slcu_moe m;
    memset(&m, 0, sizeof m);
    m.n = n > 0 ? n : 0, m.k = k > 0 ? k : 0, m.E = E > 0 ? E : 0, m.H = H > 0 ? H : 0, m.I = I > 0 ? I : 0;
    return moe_carve(&m, NULL);
}

static const char *moe_why(const slcu_moe *m) {
    const slcu_mat *w[3] = {&m->gate, &m->up, &m->down};
    const int rows[3] = {m->I, m->I, m->H}, cols[3] = {m->H, m->H, m->I};
    if (m->n < 0 || m->k < 1 || m->E < 1 || m->E > 1024 || m->H % 32 || m->I % 32 || m->H <= 0 || m->I <= 0)
        return "n, k, E (1 .. 1024), H and I (multiples of 32) out of range";
    if (!m->work || !m->h || !m->top_e || !m->tab || !m->y) return "a NULL buffer";
    for (int i = 0; i < 3; i++)
        if ((w[i]->dtype != DT_Q8 && w[i]->dtype != DT_Q4) || w[i]->rows != rows[i] || w[i]->cols != cols[i] ||
            (w[i]->group != 32 && w[i]->group != 64 && w[i]->group != 128) ||
            (w[i]->sdtype != DT_F32 && w[i]->sdtype != DT_F16 && w[i]->sdtype != DT_BF16))
            return "a matrix is not q8/q4 of the FFN's shape with a group of 32, 64 or 128";
    if (m->up.dtype != m->gate.dtype || m->up.sdtype != m->gate.sdtype || m->up.group != m->gate.group)
        return "gate and up differ in type";
    return NULL;
}

/* The n k mid rows g = silu(g) u (w.g, w.u) and their int8 form in ma, as both paths of slcu_moe_ffn make them. */
static int moe_mid(const slcu_moe *m, const moe_work &w, slcu_act *ma, char *msg, size_t msglen) {
    const int nk = m->n * m->k;
    if (slcu_act_bind(ma, w.ma, nk, m->I, msg, msglen)) return -1;
    if (rows_kernels()) { /* SwiGLU and its int8 form in one pass, a CTA a row (the mid floats are not stored) */
        const int quads = (m->I / 32 + 3) / 4;
        act_quant_rows<true><<<(unsigned)nk, 32 * (quads < 8 ? quads : 8), 0, SLS>>>(w.g, w.u, (size_t)m->I, m->I, ma->q, ma->q4, ma->d, ma->s);
        const cudaError_t e = cudaGetLastError();
        return e == cudaSuccess ? 0 : fail(msg, msglen, "MoE SwiGLU launch", e);
    }
    return slcu_swiglu(w.g, w.u, w.g, (size_t)nk * m->I, msg, msglen) || slcu_act_quantize(ma, w.g, (size_t)m->I, msg, msglen) ? -1 : 0;
}

/* SLUICE_CUDA_MOEN (cuda.h slcu_moe_mv): up to how many tokens slcu_moe_ffn takes the matvec path below */
static int moe_mv_max = -1;
extern "C" void slcu_moe_mv(int max_tok) { moe_mv_max = max_tok >= 0 && max_tok <= 64 ? max_tok : -1; }
static int moe_mv_bound(void) {
    if (moe_mv_max < 0) {
        const char *e = getenv("SLUICE_CUDA_MOEN");
        /* 0 unset: the grouped GEMM was the faster on the H100 at 8 streams of the 30B synth (485 against 432 tok/s,
         * session 32's call M; its routing is concentrated, so the GEMM reads a shared expert once where the pairs
         * read it per pair): the matvec path stays opt-in until uniform or traced routing is timed */
        const int v = e && *e ? atoi(e) : 0;
        moe_mv_max = v >= 0 && v <= 64 ? v : 0;
    }
    return moe_mv_max;
}

/* slcu_moe_ffn of a decode batch: pair p = t k + s is a one-token job per matrix, its matrices the table's at top_e[p]
 * (slcu_mm tab / sel, read on the device: no host round trip), its input row t of xa (gate, up) or mid row p (down),
 * its output row p of g, u or y; so every row is the one-token matvec of its own activation row and expert's matrix,
 * which cuda.h's canonical order makes bitwise gemm_seg's. MAXJ pairs a call: 2 MAXJ gate / up jobs and MAXJ down jobs,
 * which slcu_matmul_i8 splits into launches of MAXJ of one class. A chosen expert is read once per pair that chose it
 * (the grouping is known on the device only; the L2 may hold it for the next pair). */
static int moe_ffn_mv(const slcu_moe *m, const moe_work &w, const slcu_act &xa, char *msg, size_t msglen) {
    const int nk = m->n * m->k, E = m->E, H = m->H, I = m->I;
    /* mv_i8 (SLUICE_CUDA_DECODE=0) and the GEMM (slcu_i8_force 2) take no SwiGLU input */
    const int fuse = m->swi && slcu_decode_kernels && force_kernel != 2 && mv_swiglu_ok();
    slcu_act av[MAXJ], ma;
    slcu_mm mm[2 * MAXJ];
    for (int p0 = 0; p0 < nk; p0 += MAXJ) {
        const int np = nk - p0 < MAXJ ? nk - p0 : MAXJ;
        for (int i = 0; i < np; i++) {
            const int p = p0 + i;
            av[i] = act_row_view(xa, p / m->k);
            for (int z = 0; z < 2; z++) {
                slcu_mm &j = mm[2 * i + z];
                memset(&j, 0, sizeof j);
                j.w = z ? m->up : m->gate, j.a = &av[i], j.n_tok = 1, j.y = (z ? w.u : w.g) + (size_t)p * I, j.ldy = (size_t)I;
                j.tab = m->tab + (size_t)z * 3 * E, j.sel = m->top_e + p;
            }
        }
        if (slcu_matmul_i8(mm, 2 * np, msg, msglen)) return -1;
    }
    if (!fuse && moe_mid(m, w, &ma, msg, msglen)) return -1;
    for (int p0 = 0; p0 < nk; p0 += MAXJ) {
        const int np = nk - p0 < MAXJ ? nk - p0 : MAXJ;
        for (int i = 0; i < np; i++) {
            const int p = p0 + i;
            if (fuse) {
                memset(&av[i], 0, sizeof av[i]);
                av[i].n_tok = 1, av[i].cols = I, av[i].sg = w.g + (size_t)p * I, av[i].su = w.u + (size_t)p * I;
            } else {
                av[i] = act_row_view(ma, p);
            }
            slcu_mm &j = mm[i];
            memset(&j, 0, sizeof j);
            j.w = m->down, j.a = &av[i], j.n_tok = 1, j.y = m->y + (size_t)p * H, j.ldy = (size_t)H;
            j.tab = m->tab + (size_t)6 * E, j.sel = m->top_e + p;
        }
        if (slcu_matmul_i8(mm, np, msg, msglen)) return -1;
    }
    return 0;
}

/* slcu_moe_ffn's work; mv: batches of up to moe_mv_bound() tokens may take the matvecs (moe_ffn_mv), else the GEMM */
static int moe_ffn_run(const slcu_moe *m, int mv, char *msg, size_t msglen) {
    const char *why = moe_why(m);
    if (why) {
        if (msg && msglen) snprintf(msg, msglen, "MoE experts on the device: %s", why);
        return -1;
    }
    if (!m->n) return 0;
    const int nk = m->n * m->k;
    moe_work w;
    moe_carve(m, &w);
    slcu_act xa, ma;
    if (slcu_act_bind(&xa, w.xa, m->n, m->H, msg, msglen) || slcu_act_quantize(&xa, m->h, (size_t)m->H, msg, msglen)) return -1;
    if (mv && m->n <= moe_mv_bound()) return moe_ffn_mv(m, w, xa, msg, msglen);
    k_moe_group<<<1, 1024, 0, SLS>>>(m->top_e, nk, m->k, m->E, w.off, w.toff, w.tok, w.cell);
    segjob S = {m->tab, w.off, w.toff, w.tok, NULL, m->gate.dtype == DT_Q4 ? xa.q4 : xa.q, xa.d, xa.s, {w.g, w.u},
                (size_t)m->I, m->I, m->H, m->gate.group, m->E};
    cudaError_t e = launch_seg(&m->gate, S, nk, 2);
    if (e != cudaSuccess) return fail(msg, msglen, "MoE gate/up launch", e);
    if (moe_mid(m, w, &ma, msg, msglen)) return -1;
    segjob D = {m->tab + (size_t)6 * m->E, w.off, w.toff, NULL, w.cell, m->down.dtype == DT_Q4 ? ma.q4 : ma.q, ma.d, ma.s,
                {m->y, m->y}, (size_t)m->H, m->H, m->I, m->down.group, m->E};
    e = launch_seg(&m->down, D, nk, 1);
    return e == cudaSuccess ? 0 : fail(msg, msglen, "MoE down launch", e);
}

extern "C" int slcu_moe_ffn(const slcu_moe *m, char *msg, size_t msglen) { return moe_ffn_run(m, 1, msg, msglen); }

/* slcu_moe_ffn's grouped GEMM for one batch of a layer's experts (backend_cuda_tier.c: a layer-major block streamed
 * through the device tier): always the GEMM, never slcu_moe_mv's matvecs; only the pairs of m->top_e within [0, E)
 * run (the caller sets the others' to -1: k_moe_group skips them), so only their cells of m->y are written. Each
 * cell written is bitwise slcu_moe_ffn's (the same kernels, and a row's output depends only on its activation row). */
extern "C" int slcu_moe_ffn_gemm(const slcu_moe *m, char *msg, size_t msglen) { return moe_ffn_run(m, 0, msg, msglen); }

/* cuda.h slcu_moe_group / slcu_seg_i8: moe_ffn_run's two steps for cuda_moex.cu (the same kernels) */
extern "C" int slcu_moe_group(const int *top_e, int nk, int k, int E, int *off, int *toff, int *tok, int *cell, char *msg,
                              size_t msglen) {
    if (nk < 0 || k < 1 || E < 1 || E > 1024) {
        if (msg && msglen) snprintf(msg, msglen, "MoE grouping: %d pairs, k %d, E %d (1 .. 1024) out of range", nk, k, E);
        return -1;
    }
    k_moe_group<<<1, 1024, 0, SLS>>>(top_e, nk, k, E, off, toff, tok, cell);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : fail(msg, msglen, "MoE grouping launch", e);
}

extern "C" int slcu_seg_i8(const slcu_seg *s, char *msg, size_t msglen) {
    const slcu_mat *w = &s->w;
    if ((w->dtype != DT_Q8 && w->dtype != DT_Q4) || (w->group != 32 && w->group != 64 && w->group != 128) ||
        (w->sdtype != DT_F32 && w->sdtype != DT_F16 && w->sdtype != DT_BF16) || w->cols % 32 || w->rows < 1 ||
        s->a->cols != w->cols || s->E < 1 || s->E > 1024) {
        if (msg && msglen) snprintf(msg, msglen, "grouped int8 GEMM: a matrix not q8/q4 in groups of 32, 64 or 128");
        return -1;
    }
    if (s->nk <= 0) return 0;
    const segjob S = {s->tab, s->off, s->toff, s->tok, s->yrows, w->dtype == DT_Q4 ? s->a->q4 : s->a->q, s->a->d, s->a->s,
                      {s->y, s->y}, s->ldy, w->rows, w->cols, w->group, s->E};
    const cudaError_t e = launch_seg(w, S, s->nk, 1);
    return e == cudaSuccess ? 0 : fail(msg, msglen, "grouped int8 GEMM launch", e);
}

extern "C" int slcu_moe_layer(const slcu_moe *m, const slcu_router *r, const float *logits, float *top_w, float *out,
                              void **buf, size_t *cap, char *msg, size_t msglen) {
    slcu_moe mo = *m;
    mo.work = mo.y = (float *)1; /* moe_why checks the shapes and types; the buffers come below */
    if (moe_why(&mo) || !mo.tab) return 0;
    const size_t wb = slcu_moe_bytes(m->n, m->k, m->E, m->H, m->I), need = wb + (size_t)m->n * m->k * m->H * sizeof(float);
    if (need > *cap) {
        if (slcu_sync(msg, msglen)) return -1;
        slcu_free(*buf);
        *cap = 0;
        if (!(*buf = slcu_alloc(need, msg, msglen))) return -1;
        *cap = need;
    }
    mo.work = *buf, mo.y = (float *)((uint8_t *)*buf + wb);
    if (slcu_route(r, logits, m->n, (int *)m->top_e, top_w, msg, msglen) || slcu_moe_ffn(&mo, msg, msglen) ||
        slcu_combine(mo.y, top_w, m->k, NULL, NULL, out, m->n, m->H, msg, msglen))
        return -1;
    return 1;
}

extern "C" float slcu_time(void (*fn)(void *), void *ctx, int reps) {
    cudaEvent_t a, b;
    float ms = 0;
    fn(ctx); /* warm-up */
    cudaEventCreate(&a), cudaEventCreate(&b);
    cudaEventRecord(a);
    for (int i = 0; i < reps; i++) fn(ctx);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a), cudaEventDestroy(b);
    return ms / reps;
}
