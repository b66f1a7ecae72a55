/*
 * cuda_kq.cu — the GGUF block types on the device (cuda_kq.h): y = W x on f32 activations and the embedding rows,
 * for Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, Q5_0, Q5_1 and the grid i-quants IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ1_S, IQ1_M (layouts: src/quant/kquant.h, kquant_iq.c).
 *
 * Decoding: a piece is 32 consecutive values (a sub-block of a 256-block, a whole 32-block); dec<DT>(block, j, w)
 * gives piece j's values exactly as kq_block_to_f32 does: dl = d * sc, ml = dmin * mn, w = dl * q (- ml), every
 * product and difference a single rounded IEEE operation (__fmul_rn / __fsub_rn: nvcc would otherwise contract
 * them into an fma), the i-quants' d times 1/8 or 1/4 first as kquant_iq.c does (cuda_kq_dec.cuh, which
 * tools/cuda_kq_emu.cpp checks on the CPU). The grids are kq_iq_grid's, copied to device memory on first use.
 *
 * The matmul: a warp per row, KQ_WARPS rows a CTA. The row is read in chunks of 32 pieces (4 blocks of 256 or 32
 * blocks of 32), each chunk's bytes loaded by the warp as aligned 32-bit words (coalesced; the next chunk's words
 * in registers while the current one is computed) into shared memory, where lane l decodes piece l of the chunk.
 * Sums, fixed by the shapes alone: per piece and token d = fma chain over its 32 values from 0, acc += d (the
 * lane's pieces in order), then a butterfly over the lanes. Up to KQ_T tokens share one read of the weights; more
 * are chunks of KQ_T tokens in the same launch (a CTA for each row block and chunk), each token's sum the same as
 * alone. Both kernels wait (pdl_wait) before their first global access and are launched by cuda_pdl.cuh pdl_launch.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <atomic>
#include <mutex>

#include "backend/cuda/cuda_kq.h"
#include "backend/cuda/cuda_pdl.cuh"

extern "C" {
#include "quant/kquant.h"
}

#define KQ_NW 7                 /* words a lane loads per chunk: the largest chunk (Q6_K's 840 B) + 3 B of alignment */
#define KQ_SMW (32 * KQ_NW)     /* words of shared memory per warp */

/* the grids of kquant_iq.c (kq_iq_grid): entries of 8 values (4 for IQ3_*) */
__device__ int8_t g_iq2xxs[256 * 8], g_iq2xs[512 * 8], g_iq2s[1024 * 8], g_iq3xxs[256 * 4], g_iq3s[512 * 4],
    g_iq1s[2048 * 8];
#include "backend/cuda/cuda_kq_dec.cuh"

/* chunk k's words into pre (kq_chunk's span; 0 past it); returns where its first block starts in them */
template <int DT>
__device__ __forceinline__ int chunk_load(const uint8_t *row, int k, int nb, int lane, uint32_t *pre) {
    uintptr_t a;
    int nw;
    const int off = kq_chunk<DT>((uintptr_t)row, k, nb, &a, &nw);
    const uint32_t *p = (const uint32_t *)a;
#pragma unroll
    for (int i = 0; i < KQ_NW; i++) pre[i] = lane + 32 * i < nw ? __ldg(p + lane + 32 * i) : 0u;
    return off;
}

template <int DT>
__global__ void __launch_bounds__(32 * KQ_WARPS) k_kq(const uint8_t *__restrict__ W, int rows, int cols,
                                                     const float *__restrict__ x, size_t ldx, float *__restrict__ y,
                                                     size_t ldy, int n, int xal) {
    pdl_wait();
    constexpr int BLK = KT<DT>::BLK, BYTES = KT<DT>::BYTES, PPB = BLK / 32;
    __shared__ uint32_t sm[KQ_WARPS][KQ_SMW];
    /* CTA: (rows 4 q .. 4 q + 3, tokens KQ_T c ..), q = blockIdx.x / nc, c = blockIdx.x % nc: a row block's token
     * chunks run side by side, their reads of the same rows close together */
    const int nc = (n + KQ_T - 1) / KQ_T, c = (int)(blockIdx.x % (unsigned)nc), t0 = c * KQ_T;
    const int nt = n - t0 < KQ_T ? n - t0 : KQ_T;
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, r = (int)(blockIdx.x / (unsigned)nc) * KQ_WARPS + wp;
    x += (size_t)t0 * ldx, y += (size_t)t0 * ldy;
    if (r >= rows) return; /* the whole warp: only __syncwarp below */
    const int nb = cols / BLK, np = cols / 32;
    const uint8_t *row = W + (size_t)r * (size_t)nb * BYTES;
    float acc[KQ_T];
#pragma unroll
    for (int t = 0; t < KQ_T; t++) acc[t] = 0.0f;
    uint32_t pre[KQ_NW];
    int off = chunk_load<DT>(row, 0, nb, lane, pre);
    for (int c0 = 0, k = 0; c0 < np; c0 += 32, k++) {
        __syncwarp();
#pragma unroll
        for (int i = 0; i < KQ_NW; i++) sm[wp][lane + 32 * i] = pre[i];
        __syncwarp();
        const int cur = off;
        if (c0 + 32 < np) off = chunk_load<DT>(row, k + 1, nb, lane, pre);
        const int p = c0 + lane;
        if (p >= np) continue;
        float w[32];
        dec<DT>((const uint8_t *)sm[wp] + cur + (lane / PPB) * BYTES, lane % PPB, w);
#pragma unroll
        for (int t = 0; t < KQ_T; t++) {
            if (t >= nt) break;
            const float *xt = x + (size_t)t * ldx + (size_t)p * 32;
            float xv[32];
            if (xal) {
#pragma unroll
                for (int v = 0; v < 8; v++) {
                    const float4 q = __ldg((const float4 *)xt + v);
                    xv[4 * v] = q.x, xv[4 * v + 1] = q.y, xv[4 * v + 2] = q.z, xv[4 * v + 3] = q.w;
                }
            } else {
#pragma unroll
                for (int v = 0; v < 32; v++) xv[v] = __ldg(xt + v);
            }
            float d = 0.0f;
#pragma unroll
            for (int v = 0; v < 32; v++) d = fmaf(w[v], xv[v], d);
            acc[t] = __fadd_rn(acc[t], d);
        }
    }
#pragma unroll
    for (int t = 0; t < KQ_T; t++) {
        if (t >= nt) break;
        float v = acc[t];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (!lane) y[(size_t)t * ldy + r] = v;
    }
}

/* grid (ceil(pieces / 128), n): thread p decodes piece p of token t's row */
template <int DT>
__global__ void k_embed_kq(const uint8_t *__restrict__ W, int cols, const int *__restrict__ tokens, float *x, size_t ldx) {
    pdl_wait();
    constexpr int BLK = KT<DT>::BLK, BYTES = KT<DT>::BYTES, PPB = BLK / 32;
    const int t = blockIdx.y, p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= cols / 32) return;
    const uint8_t *row = W + (size_t)tokens[t] * (size_t)(cols / BLK) * BYTES;
    uint32_t blk[(BYTES + 3) / 4 + 1]; /* the block by bytes: the decoder's word loads stay inside this copy */
    const uint8_t *src = row + (size_t)(p / PPB) * BYTES;
    for (int i = 0; i < BYTES; i++) ((uint8_t *)blk)[i] = src[i];
    float w[32];
    dec<DT>((const uint8_t *)blk, p % PPB, w);
    float *o = x + (size_t)t * ldx + (size_t)p * 32;
#pragma unroll
    for (int v = 0; v < 32; v++) o[v] = w[v];
}

/* the grids into device memory on the first call of a grid type (a failure is not kept: the next call tries again;
 * never inside a recorded step, whose capture the copy would break: the step fails and runs unrecorded, as
 * backend_cuda.c reruns a step that could not be recorded) */
static std::mutex grids_mu;
static std::atomic<int> grids_done{0};
static int grids_ready(dt_type dt, char *msg, size_t msglen) {
    if (grids_done.load(std::memory_order_acquire) || !kq_iq_grid(dt)) return 0;
    std::lock_guard<std::mutex> lock(grids_mu);
    if (grids_done.load(std::memory_order_relaxed)) return 0;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(SLS, &cs);
    const char *why = cs != cudaStreamCaptureStatusNone ? "inside a recorded step" : NULL;
    const struct { const void *sym; dt_type dt; size_t bytes; } g[] = {
        {g_iq2xxs, DT_IQ2_XXS, sizeof g_iq2xxs}, {g_iq2xs, DT_IQ2_XS, sizeof g_iq2xs}, {g_iq2s, DT_IQ2_S, sizeof g_iq2s},
        {g_iq3xxs, DT_IQ3_XXS, sizeof g_iq3xxs}, {g_iq3s, DT_IQ3_S, sizeof g_iq3s}, {g_iq1s, DT_IQ1_S, sizeof g_iq1s}};
    for (const auto &e : g)
        if (!why && cudaMemcpyToSymbol(e.sym, kq_iq_grid(e.dt), e.bytes) != cudaSuccess) why = "a copy failed";
    if (why) {
        if (msg && msglen) snprintf(msg, msglen, "the i-quant grids could not be copied to the device: %s", why);
        return -1;
    }
    grids_done.store(1, std::memory_order_release);
    return 0;
}

/* On since call I (docs/CUDA.md "GGUF block types on the GPU": test_cuda --kq and tests/cuda/test_model.c's block-type
 * fixtures passed on an H100); SLUICE_CUDA_KQ=0 refuses these types at open as before (auto then picks the CPU). */
static int kq_on = -1;
extern "C" int slcu_kq_takes(dt_type dt) {
    if (kq_on < 0) kq_on = !(getenv("SLUICE_CUDA_KQ") && getenv("SLUICE_CUDA_KQ")[0] == '0');
    return kq_on && kq_is(dt) && !kq_rotated(dt);
}

template <int DT> static void launch_mm(const slcu_mat *w, const float *x, size_t ldx, float *y, size_t ldy, int n) {
    const long long rb = ((long long)w->rows + KQ_WARPS - 1) / KQ_WARPS;
    const int most = kq_launch_tokens(w->rows), xal = !((uintptr_t)x & 15) && ldx % 4 == 0; /* tokens a launch */
    for (int t0 = 0; t0 < n; t0 = kq_launch_next(t0, n, most)) {
        const int m = n - t0 < most ? n - t0 : most;
        const unsigned grid = (unsigned)(rb * ((m + KQ_T - 1) / KQ_T));
        pdl_launch(k_kq<DT>, grid, 32 * KQ_WARPS, 0, SLS, (const uint8_t *)w->data, w->rows, w->cols, x + (size_t)t0 * ldx,
                   ldx, y + (size_t)t0 * ldy, ldy, m, xal);
    }
}

template <int DT> static void launch_emb(const slcu_mat *m, const int *tokens, int n, float *x, size_t ldx) {
    const int np = m->cols / 32;
    pdl_launch(k_embed_kq<DT>, dim3((unsigned)((np + 127) / 128), (unsigned)n), 128, 0, SLS, (const uint8_t *)m->data,
               m->cols, tokens, x, ldx);
}

/* f<DT>(args...) for the dtype dt (slcu_kq_takes) */
#define KQ_SWITCH(dt, f, ...)                                       \
    switch (dt) {                                                   \
    case DT_Q2_K: f<DT_Q2_K>(__VA_ARGS__); break;                   \
    case DT_Q3_K: f<DT_Q3_K>(__VA_ARGS__); break;                   \
    case DT_Q4_K: f<DT_Q4_K>(__VA_ARGS__); break;                   \
    case DT_Q5_K: f<DT_Q5_K>(__VA_ARGS__); break;                   \
    case DT_Q6_K: f<DT_Q6_K>(__VA_ARGS__); break;                   \
    case DT_IQ4_NL: f<DT_IQ4_NL>(__VA_ARGS__); break;               \
    case DT_IQ4_XS: f<DT_IQ4_XS>(__VA_ARGS__); break;               \
    case DT_IQ2_XXS: f<DT_IQ2_XXS>(__VA_ARGS__); break;             \
    case DT_IQ2_XS: f<DT_IQ2_XS>(__VA_ARGS__); break;               \
    case DT_IQ2_S: f<DT_IQ2_S>(__VA_ARGS__); break;                 \
    case DT_IQ3_XXS: f<DT_IQ3_XXS>(__VA_ARGS__); break;             \
    case DT_IQ3_S: f<DT_IQ3_S>(__VA_ARGS__); break;                 \
    case DT_IQ1_S: f<DT_IQ1_S>(__VA_ARGS__); break;                 \
    case DT_IQ1_M: f<DT_IQ1_M>(__VA_ARGS__); break;                 \
    case DT_Q5_0: f<DT_Q5_0>(__VA_ARGS__); break;                   \
    default: f<DT_Q5_1>(__VA_ARGS__); break;                        \
    }

static int launched(const char *what, char *msg, size_t msglen) {
    const cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return 0;
    if (msg && msglen) snprintf(msg, msglen, "%s launch: %s", what, cudaGetErrorString(e));
    return -1;
}

static int bad_mat(const slcu_mat *w, const char *what, char *msg, size_t msglen) {
    if (kq_is(w->dtype) && !kq_rotated(w->dtype) && w->data && w->cols > 0 && w->cols % kq_blk(w->dtype) == 0 && w->rows >= 0) return 0;
    if (msg && msglen)
        snprintf(msg, msglen, "%s: a %s matrix of %d columns is not one the block kernels take", what,
                 dt_name(w->dtype), w->cols);
    return -1;
}

extern "C" int slcu_matmul_kq(const slcu_mat *w, const float *x, size_t ldx, float *y, size_t ldy, int n, char *msg,
                              size_t msglen) {
    if (bad_mat(w, "block-type matmul", msg, msglen) || grids_ready(w->dtype, msg, msglen)) return -1;
    if (n <= 0 || w->rows <= 0) return 0;
    KQ_SWITCH(w->dtype, launch_mm, w, x, ldx, y, ldy, n);
    return launched("block-type matmul", msg, msglen);
}

extern "C" int slcu_embed_kq(const slcu_mat *table, const int *tokens, int n, float *x, size_t ldx, char *msg,
                             size_t msglen) {
    if (bad_mat(table, "block-type embed", msg, msglen) || grids_ready(table->dtype, msg, msglen)) return -1;
    if (n <= 0 || table->cols <= 0) return 0;
    KQ_SWITCH(table->dtype, launch_emb, table, tokens, n, x, ldx);
    return launched("block-type embed", msg, msglen);
}
