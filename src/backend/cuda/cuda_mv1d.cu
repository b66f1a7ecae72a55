/*
 * cuda_mv1d.cu — mv1d_i8, a one-token int8 matvec that streams its weights (SLUICE_CUDA_MV1=4, slcu_i8_mv1_kernel(4);
 * opt-in until a device run times it): cuda.h's canonical order on the same values as cuda_mv.cu mv1c_i8, so bitwise
 * its results (test_cuda checks every kernel against the default).
 *
 * Why another kernel: mv1c_i8 stages a CTA's whole chunk by cp.async, waits, computes, then 16 of its 256 threads
 * fold: one wave of CTAs whose loading and computing never overlap (call G, H100: 0.8 TB/s on the experts' gate/up).
 * Here each warp works alone after one barrier:
 *   - A CTA of MV1D_WARPS warps takes R = MV1D_WARPS * WR rows of one job (launch_class's tiles); warp w rows
 *     wr0 .. wr0 + WR - 1. A row's codes are np = cols / 16 pieces of 16 bytes (q4: a block, q8: half of one).
 *   - A chunk of a warp is PPR = 256 / WR pieces of each of its WR rows: lane l's slot u (MV1D_KP of them) is row
 *     32 u / PPR, piece pb0 + 32 u % PPR + l, so each load instruction reads 512 contiguous bytes of one row. The
 *     loads go straight to registers (ld.global.nc, no L1 allocation) with the scale and bias words, all in flight at
 *     once; the next chunk's are issued before this chunk's fold.
 *   - The activation (codes, block scales, group sums; or the SwiGLU input made here, swi_stage) is staged whole in
 *     shared memory once per CTA, after the first chunk's weight loads are out (and after the route's choice, read
 *     first by resolve for the experts' jobs).
 *   - Each slot's exact I_b (q8: its two halves' integer sums added by a shuffle; integer, so any order), and
 *     s_g * d_b and the group's bias go to the warp's staging, [block][row] with an odd stride; lane i < WR then folds
 *     row i's chunk with fold_chunk, acc = fma(I_b, s_g d_b, acc) block by block and accb = fma(bias_j, xg_j, accb)
 *     group by group, mv1c_i8's chains; y = acc + accb.
 * WR (1, 2, 4, 8; rows a CTA 4 .. 32) is chosen per launch by mv1d_tile_rows unless SLUICE_CUDA_MVR fixes it.
 * A launch whose rows are longer than MV1D_MAXCOLS (the staged activation) runs mv1c_i8 (mv1d_launch says so).
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_mv.cuh"

#define MV1D_WARPS 4
#define MV1D_THREADS (32 * MV1D_WARPS)
#define MV1D_KP 8          /* 16-byte pieces a lane loads per chunk: 4 KB of codes a warp in flight */
#define MV1D_MAXCOLS 16384 /* the activation staged whole: cols + 12 nb bytes of shared memory (with the static
                              * staging, at most 41 KB: within the 48 KB a launch gets without opting in) */
#define MV1D_SMS 132       /* an H100's SMs: auto rows keep 6 warps an SM busy */

/* 16 bytes of weights, read once: through the non-coherent path, not kept in L1 (the activation is in shared memory) */
static __device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* one 16-byte half of a q8 block against its 16 activation codes: dot_block's four dp4a of that half */
static __device__ __forceinline__ int dot_half(const uint4 &w, const uint4 &x) {
    int I = dp4a_us(w.x, (int)x.x, 0);
    I = dp4a_us(w.y, (int)x.y, I), I = dp4a_us(w.z, (int)x.z, I);
    return dp4a_us(w.w, (int)x.w, I);
}

/* w: [nrows][cols] q4 (cols / 2 bytes a row) or q8 (cols), groups of j.group with SDT words; x: one row of int8
 * activation (act_row(j, 0)) or the SwiGLU input j.sg / j.su -> y[r] for the CTA's rows. Dynamic shared memory:
 * cols + 12 * (cols / 32) bytes for the launch's largest cols. */
template <int DT, int SDT, int WR, int IB>
__global__ void __launch_bounds__(MV1D_THREADS, 4) mv1d_i8(const __grid_constant__ ijobs J) {
    constexpr int PB = DT == DT_Q4 ? 1 : 2;      /* pieces a block */
    constexpr int PPR = 32 * MV1D_KP / WR;       /* pieces of a row a chunk (a multiple of 32) */
    constexpr int KB = PPR / PB;                 /* blocks of a row a chunk (a multiple of 4: whole groups) */
    constexpr int LDW = WR % 2 ? WR : WR + 1;    /* staging stride: odd, so the stores of a warp hit 32 banks */
    __shared__ float sI[MV1D_WARPS][KB * LDW], sM[MV1D_WARPS][KB * LDW], sB[MV1D_WARPS][KB * LDW];
    extern __shared__ __align__(16) uint8_t mv1d_dyn[]; /* sx: cols codes | sd: nb | sxg: nb | sbt: nb floats */
    const int jk = find_job(J);
    if (J.j[jk].tab || J.j[jk].rows) pdl_wait(); /* the matrix or the row chosen by a kernel of the step */
    const ijob j = resolve(J.j[jk]);
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int cols = j.cols, nb = cols / 32, np = nb * PB, ng = cols / j.group, ns = nb + nb / 2 + nb / 4;
    const int gshift = j.group == 32 ? 0 : j.group == 64 ? 1 : 2, soff = j.group == 32 ? 0 : j.group == 64 ? nb : nb + nb / 2;
    const int bmask = j.group / 32 - 1;
    const int wr0 = ((int)blockIdx.x - j.tile0) * (MV1D_WARPS * WR) + w * WR, nrw = min(WR, j.nrows - wr0);
    const uint4 *wc = (const uint4 *)j.codes + (size_t)(nrw > 0 ? wr0 : 0) * np; /* the warp's first row */
    uint4 *sx = (uint4 *)mv1d_dyn;
    float *sd = (float *)(mv1d_dyn + cols), *sxg = sd + nb, *sbt = sxg + nb;
    uint4 cw[MV1D_KP];
    unsigned sw[MV1D_KP], bw[MV1D_KP];
    auto issue = [&](int pb0) { /* the chunk's codes, scale and bias words into registers */
#pragma unroll
        for (int u = 0; u < MV1D_KP; u++) {
            const int rl = 32 * u / PPR, p = pb0 + 32 * u % PPR + lane, b = p >> (PB - 1);
            if (rl < nrw && p < np) {
                cw[u] = ld_stream(wc + (size_t)rl * np + p);
                if (PB == 1 || !(p & 1)) { /* q8: the block's first half holds its words */
                    const size_t e = (size_t)(wr0 + rl) * ng + (size_t)(b >> gshift);
                    sw[u] = ld_sw(j.scales, SDT, e);
                    if (!(b & bmask) && !IB) bw[u] = ld_sw(j.biases, SDT, e);
                }
            }
        }
    };
    if (nrw > 0) issue(0);
    pdl_wait(); /* the weights' loads are out; the activation is the step's */
    if (j.sg) {
        swi_stage<DT, MV1D_THREADS>(j, 0, nb, gshift, sx, sd, sbt, sxg);
    } else {
        const int ar = act_row(j, 0);
        const uint4 *xq = (const uint4 *)(j.xq + (size_t)ar * cols);
        const float *xd = j.d + (size_t)ar * nb, *xs = j.s + (size_t)ar * ns + soff; /* the group sums */
        for (int i = tid; i < cols / 16; i += MV1D_THREADS) sx[i] = __ldcg(xq + i);
        for (int i = tid; i < nb; i += MV1D_THREADS) sd[i] = __ldcg(xd + i);
        for (int i = tid; i < ng; i += MV1D_THREADS) sxg[i] = __ldcg(xs + i);
    }
    __syncthreads(); /* the CTA's only barrier: from here each warp alone */
    if (nrw <= 0) return;
    float *wI = sI[w], *wM = sM[w], *wB = sB[w];
    float acc = 0.f, accb = 0.f;
    for (int pb0 = 0; pb0 < np; pb0 += PPR) {
        const int kb0 = pb0 / PB, kcn = min(KB, nb - kb0);
#pragma unroll
        for (int u = 0; u < MV1D_KP; u++) {
            const int rl = 32 * u / PPR, p = pb0 + 32 * u % PPR + lane, b = p >> (PB - 1);
            const bool ok = rl < nrw && p < np;
            int I;
            if (DT == DT_Q4) {
                I = ok ? dot_block<DT_Q4>(cw[u], cw[u], sx[2 * b], sx[2 * b + 1]) : 0;
            } else { /* lane l + 1 holds the second half of lane l's block (l even: p even) */
                const int h = ok ? dot_half(cw[u], sx[p]) : 0;
                I = h + __shfl_down_sync(0xffffffffu, h, 1);
            }
            if (ok && (PB == 1 || !(p & 1))) {
                const int bl = b - kb0, i = bl * LDW + rl;
                const size_t e = (size_t)(wr0 + rl) * ng + (size_t)(b >> gshift);
                wI[i] = (float)I;
                const float sv = cv_sw(sw[u], j.scales, SDT, e);
                wM[i] = __fmul_rn(sv, sd[b]);
                if (!(b & bmask)) wB[(bl >> gshift) * LDW + rl] = !IB ? cv_sw(bw[u], j.biases, SDT, e) : zbias<DT>(sv);
            }
        }
        if (pb0 + PPR < np) issue(pb0 + PPR); /* the next chunk's loads in flight during this fold */
        __syncwarp();
        if (lane < nrw) fold_chunk(wI + lane, wM + lane, wB + lane, LDW, sxg + (kb0 >> gshift), kcn, bmask, gshift, acc, accb);
        __syncwarp(); /* the staging is read before the next chunk's stores */
    }
    if (lane < nrw) j.y[wr0 + lane] = __fadd_rn(acc, accb);
}

/* ---- mvnd_i8: 2 to 8 tokens the same way (SLUICE_CUDA_MVN=4, slcu_i8_mvn_kernel(4); opt-in) ----------------------
 * mv1d_i8's warps, chunks and slots, with WR 4 (launch_class's 16 rows a CTA for several tokens) and each job's own
 * nt = min(NT, n_tok) tokens: a slot's codes are loaded once and dotted with each token's staged activation (nt
 * rows of codes, block scales and group sums in shared memory: NT (cols + 8 nb) bytes, an odd stride between the
 * tokens' scales); the warp stages I_b per token and the scale and bias once, and lane t WR + i folds row i for
 * token t (WR NT <= 32) with s_g d_b made in the fold: mvn_i8's operations on the same values in the same order
 * (acc = fma(I_b, s_g * d_b, acc), accb = fma(bias_j, xg_j, accb), y = acc + accb), so the same bits, and a
 * one-token job of a launch pays for its one token only. A SwiGLU job (one token) stages token 0 by swi_stage. */
#define MVND_WR 4

/* fold_chunk with s_g d_b made here from the staged scale and the token's block scales d (the same product) */
static __device__ __forceinline__ void fold_chunk_d(const float *si, const float *ss, const float *sb, int ld, const float *d,
                                                    const float *xg, int kcn, int bmask, int gshift, float &acc, float &accb) {
#pragma unroll 8
    for (int bl = 0; bl < kcn; bl++) {
        acc = __fmaf_rn(si[bl * ld], __fmul_rn(ss[bl * ld], d[bl]), acc);
        if (!(bl & bmask)) accb = __fmaf_rn(sb[(bl >> gshift) * ld], xg[bl >> gshift], accb);
    }
}

template <int DT, int SDT, int NT, int IB>
__global__ void __launch_bounds__(MV1D_THREADS, 4) mvnd_i8(const __grid_constant__ ijobs J) {
    constexpr int WR = MVND_WR, KP = NT <= 2 ? 8 : 4; /* pieces a lane a chunk (fewer for more tokens: shared memory) */
    constexpr int PB = DT == DT_Q4 ? 1 : 2, PPR = 32 * KP / WR, KB = PPR / PB, LDW = WR + 1;
    constexpr int TS = (KB * LDW + 31) / 32 * 32 + 4; /* a token's staging stride: token t's rows on banks 4 t .. 4 t + 3 */
    static_assert(WR * NT <= 32, "a lane a (row, token)");
    __shared__ float sI[MV1D_WARPS][NT * TS], sS[MV1D_WARPS][KB * LDW], sB[MV1D_WARPS][KB * LDW];
    extern __shared__ __align__(16) uint8_t mvnd_dyn[]; /* sx: NT x cols codes | sd, sxg: NT x (nb + 1) | sbt: nb floats */
    const int jk = find_job(J);
    if (J.j[jk].tab || J.j[jk].rows) pdl_wait();
    const ijob j = resolve(J.j[jk]);
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int cols = j.cols, nb = cols / 32, np = nb * PB, ng = cols / j.group, ns = nb + nb / 2 + nb / 4, ds = nb + 1;
    const int gshift = j.group == 32 ? 0 : j.group == 64 ? 1 : 2, soff = j.group == 32 ? 0 : j.group == 64 ? nb : nb + nb / 2;
    const int bmask = j.group / 32 - 1, nt = j.sg ? 1 : min(NT, j.n_tok);
    const int wr0 = ((int)blockIdx.x - j.tile0) * (MV1D_WARPS * WR) + w * WR, nrw = min(WR, j.nrows - wr0);
    const uint4 *wc = (const uint4 *)j.codes + (size_t)(nrw > 0 ? wr0 : 0) * np;
    uint4 *sx = (uint4 *)mvnd_dyn; /* token t: sx + t cols / 16 */
    float *sd = (float *)(mvnd_dyn + (size_t)NT * cols), *sxg = sd + NT * ds, *sbt = sxg + NT * ds;
    uint4 cw[KP];
    unsigned sw[KP], bw[KP];
    auto issue = [&](int pb0) {
#pragma unroll
        for (int u = 0; u < KP; u++) {
            const int rl = 32 * u / PPR, p = pb0 + 32 * u % PPR + lane, b = p >> (PB - 1);
            if (rl < nrw && p < np) {
                cw[u] = ld_stream(wc + (size_t)rl * np + p);
                if (PB == 1 || !(p & 1)) {
                    const size_t e = (size_t)(wr0 + rl) * ng + (size_t)(b >> gshift);
                    sw[u] = ld_sw(j.scales, SDT, e);
                    if (!(b & bmask) && !IB) bw[u] = ld_sw(j.biases, SDT, e);
                }
            }
        }
    };
    if (nrw > 0) issue(0);
    pdl_wait();
    if (j.sg) {
        swi_stage<DT, MV1D_THREADS>(j, 0, nb, gshift, sx, sd, sbt, sxg);
    } else {
        for (int t = 0; t < nt; t++) {
            const int ar = act_row(j, t);
            const uint4 *xq = (const uint4 *)(j.xq + (size_t)ar * cols);
            const float *xd = j.d + (size_t)ar * nb, *xs = j.s + (size_t)ar * ns + soff;
            for (int i = tid; i < cols / 16; i += MV1D_THREADS) sx[(size_t)t * (cols / 16) + i] = __ldg(xq + i);
            for (int i = tid; i < nb; i += MV1D_THREADS) sd[t * ds + i] = __ldg(xd + i);
            for (int i = tid; i < ng; i += MV1D_THREADS) sxg[t * ds + i] = __ldg(xs + i);
        }
    }
    __syncthreads();
    if (nrw <= 0) return;
    float *wI = sI[w], *wS = sS[w], *wB = sB[w];
    const int ft = lane / WR, fr = lane % WR, folds = ft < nt && fr < nrw; /* this lane folds row fr for token ft */
    float acc = 0.f, accb = 0.f;
    for (int pb0 = 0; pb0 < np; pb0 += PPR) {
        const int kb0 = pb0 / PB, kcn = min(KB, nb - kb0);
#pragma unroll
        for (int u = 0; u < KP; u++) {
            const int rl = 32 * u / PPR, p = pb0 + 32 * u % PPR + lane, b = p >> (PB - 1);
            const bool ok = rl < nrw && p < np, st = ok && (PB == 1 || !(p & 1));
            const int i = (b - kb0) * LDW + rl;
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t >= nt) break; /* nt is the warp's: the shuffle below stays convergent */
                const uint4 *xt = sx + (size_t)t * (cols / 16);
                int I;
                if (DT == DT_Q4) {
                    I = ok ? dot_block<DT_Q4>(cw[u], cw[u], xt[2 * b], xt[2 * b + 1]) : 0;
                } else {
                    const int h = ok ? dot_half(cw[u], xt[p]) : 0;
                    I = h + __shfl_down_sync(0xffffffffu, h, 1);
                }
                if (st) wI[t * TS + i] = (float)I;
            }
            if (st) {
                const size_t e = (size_t)(wr0 + rl) * ng + (size_t)(b >> gshift);
                const float sv = cv_sw(sw[u], j.scales, SDT, e);
                wS[i] = sv;
                if (!(b & bmask)) wB[((b - kb0) >> gshift) * LDW + rl] = !IB ? cv_sw(bw[u], j.biases, SDT, e) : zbias<DT>(sv);
            }
        }
        if (pb0 + PPR < np) issue(pb0 + PPR);
        __syncwarp();
        if (folds)
            fold_chunk_d(wI + ft * TS + fr, wS + fr, wB + fr, LDW, sd + ft * ds + kb0, sxg + ft * ds + (kb0 >> gshift), kcn, bmask,
                         gshift, acc, accb);
        __syncwarp();
    }
    if (folds) j.y[(size_t)ft * j.ldy + wr0 + fr] = __fadd_rn(acc, accb);
}

template <int DT, int SDT, int NT, int IB> /* IB: the biases computed (ijobs ib, cuda_i8.cuh zbias) */
static void mvnd_go_ib(int tiles, size_t dyn, const ijobs *J) {
    static size_t set; /* the dynamic shared memory this kernel may take: asked for past what it was (48 KB with the static) */
    if (dyn > set) cudaFuncSetAttribute((const void *)mvnd_i8<DT, SDT, NT, IB>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn), set = dyn;
    mvnd_i8<DT, SDT, NT, IB><<<tiles, MV1D_THREADS, dyn, SLS>>>(*J);
}
template <int DT, int SDT, int NT>
static void mvnd_go(int tiles, size_t dyn, const ijobs *J) {
    if (J->ib) mvnd_go_ib<DT, SDT, NT, 1>(tiles, dyn, J);
    else mvnd_go_ib<DT, SDT, NT, 0>(tiles, dyn, J);
}

template <int DT, int SDT>
static void mvnd_nt(int max_tok, int tiles, size_t dyn, const ijobs *J) {
    if (max_tok <= 2) mvnd_go<DT, SDT, 2>(tiles, dyn, J);
    else if (max_tok <= 4) mvnd_go<DT, SDT, 4>(tiles, dyn, J);
    else mvnd_go<DT, SDT, 8>(tiles, dyn, J);
}

template <int DT>
static void mvnd_sdt(int sdt, int max_tok, int tiles, size_t dyn, const ijobs *J) {
    if (sdt == DT_F32) mvnd_nt<DT, DT_F32>(max_tok, tiles, dyn, J);
    else if (sdt == DT_BF16) mvnd_nt<DT, DT_BF16>(max_tok, tiles, dyn, J);
    else mvnd_nt<DT, DT_F16>(max_tok, tiles, dyn, J);
}

int mvnd_launch(int dt, int sdt, int max_tok, int rows, int tiles, const ijobs *J) {
    int cols = 0;
    for (int i = 0; i < J->n; i++) cols = J->j[i].cols > cols ? J->j[i].cols : cols;
    if (cols > MV1D_MAXCOLS || rows != MV1D_WARPS * MVND_WR || max_tok < 2 || max_tok > 8) return 0;
    const int nt = max_tok <= 2 ? 2 : max_tok <= 4 ? 4 : 8, nb = cols / 32;
    const size_t dyn = (size_t)nt * cols + (size_t)8 * nt * (nb + 1) + (size_t)4 * nb;
    if (dt == DT_Q4) mvnd_sdt<DT_Q4>(sdt, max_tok, tiles, dyn, J);
    else mvnd_sdt<DT_Q8>(sdt, max_tok, tiles, dyn, J);
    return 1;
}

/* Rows a CTA for the jobs of one launch: the most (32, 16, 8; else 4) that still give every SM of an H100 six
 * warps, so a small matrix (o: 2048 rows) has loads in flight everywhere and a large one (the experts, the LM head)
 * folds eight rows a warp. */
int mv1d_tile_rows(const ijobs *J) {
    for (int r = 32; r >= 8; r /= 2) {
        long tiles = 0;
        for (int i = 0; i < J->n; i++) tiles += (J->j[i].nrows + r - 1) / r;
        if (tiles * MV1D_WARPS >= 6 * MV1D_SMS) return r;
    }
    return 4;
}

template <int DT, int SDT, int WR>
static void mv1d_go(int tiles, size_t dyn, int pdl, const ijobs *J) {
    void (*k)(ijobs) = J->ib ? mv1d_i8<DT, SDT, WR, 1> : mv1d_i8<DT, SDT, WR, 0>;
    pdl_launch_on(pdl, k, dim3((unsigned)tiles), dim3(MV1D_THREADS), dyn, SLS, *J); /* pdl: cuda_pdl.cuh pdl_enabled */
}

template <int DT, int SDT>
static void mv1d_rows(int rows, int tiles, size_t dyn, int pdl, const ijobs *J) {
    if (rows == 4) mv1d_go<DT, SDT, 1>(tiles, dyn, pdl, J);
    else if (rows == 8) mv1d_go<DT, SDT, 2>(tiles, dyn, pdl, J);
    else if (rows == 16) mv1d_go<DT, SDT, 4>(tiles, dyn, pdl, J);
    else mv1d_go<DT, SDT, 8>(tiles, dyn, pdl, J);
}

template <int DT>
static void mv1d_sdt(int sdt, int rows, int tiles, size_t dyn, int pdl, const ijobs *J) {
    if (sdt == DT_F32) mv1d_rows<DT, DT_F32>(rows, tiles, dyn, pdl, J);
    else if (sdt == DT_BF16) mv1d_rows<DT, DT_BF16>(rows, tiles, dyn, pdl, J);
    else mv1d_rows<DT, DT_F16>(rows, tiles, dyn, pdl, J);
}

int mv1d_launch(int dt, int sdt, int rows, int tiles, const ijobs *J, int pdl) {
    int cols = 0;
    for (int i = 0; i < J->n; i++) cols = J->j[i].cols > cols ? J->j[i].cols : cols;
    if (cols > MV1D_MAXCOLS || (rows != 4 && rows != 8 && rows != 16 && rows != 32)) return 0;
    const size_t dyn = (size_t)cols + (size_t)12 * (cols / 32);
    if (dt == DT_Q4) mv1d_sdt<DT_Q4>(sdt, rows, tiles, dyn, pdl, J);
    else mv1d_sdt<DT_Q8>(sdt, rows, tiles, dyn, pdl, J);
    return 1;
}
