/*
 * cuda_mv1p.cu — mv1p_i8, a one-token int8 matvec whose loads overlap its compute (SLUICE_CUDA_MV1=7,
 * slcu_i8_mv1_kernel(7); opt-in until a device run times it): cuda.h's canonical order on the same values as
 * cuda_mv.cu mv1c_i8, so bitwise its results (test_cuda checks it against the default on every shape).
 *
 * Why another kernel: mv1c_i8 gives each CTA one chunk (issue its loads, wait, compute, stage, fold, end), and with
 * every CTA of a launch resident in one wave no SM computes while DRAM works and DRAM idles while the SMs compute
 * (calls J and K, H100: 30% of DRAM throughput, a third of a warp's cycles at a CTA barrier). Here:
 *   - A unit is a tile of R rows of one job (launch_class's tiles, R = 4 .. 32) times KC = 256 P / R of its blocks:
 *     at most 256 P (row, block) pairs, P = 2 or (q4) 4 a thread (q4 P = 2: 8 KB of codes; q8: 16 KB). A tile's
 *     units are its chunks, in block order. P = 4 halves the unit's fixed work a pair (its job's words, its scale
 *     runs and activation, two barriers) where a row has KC blocks to give (mv1p_pairs).
 *   - The grid is a few CTAs an SM (mv1p_ctas, 3 unless set); CTA c takes the contiguous run of tiles
 *     [c T / G, (c + 1) T / G) and walks their units through MV1P_S = 3 stages of shared memory filled by cp.async:
 *     unit u + 2's loads are issued once unit u's have arrived, so two units are in flight while one is computed
 *     and folded (one commit group a unit; an empty group where no unit is left keeps the count).
 *   - Thread t takes block t % KC of rows t / KC + k R / P (k < P) of every unit: its pairs' shared offsets are fixed
 *     and the activation block is read once for all P.
 *   - A row's scale (and bias) words of a unit are one run of bytes, loaded as the 16-byte pieces that cover it
 *     (mv1c_i8 copies a 4-byte word a pair); where the run starts in its first piece is kept beside it. The pieces
 *     are 16-byte aligned blocks that each hold a byte of the run, so of the matrix's allocation.
 *   - Per unit: wait for its group, barrier, issue unit u + 2, compute the pairs' I_b, s_g d_b and biases into one
 *     staging ([block][row], odd stride), barrier; thread i < R then folds row i (fold_chunk: the two chains in block
 *     order, carried over the tile's chunks; y = acc + accb after the last) while the other warps go on to the next
 *     unit's wait. The fold of unit u ends before the barrier of unit u + 1, which is what frees the staging and the
 *     stage unit u + 3 will fill.
 *   - The down matvec's SwiGLU input (ijob sg) is made by swi_stage in its own room, SGB blocks at a time (64, or
 *     KC where that is more), when a unit's job or block range leaves what is there; other jobs' activation blocks
 *     come with their unit's weights.
 * PDL (cuda_pdl.cuh): the first unit's weights are issued before pdl_wait unless its job's matrix or row is chosen on
 * the device (tab, rows); everything else after. Words of the step (sel, rows, the activation, sg / su) are read by
 * cp.async or __ldcg after it.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdlib.h>

#include "backend/cuda/cuda_mv.cuh"

#define MV1P_THREADS 256
#define MV1P_S 3    /* stages */
#define MV1P_SGB 64 /* blocks of a SwiGLU input made at a time (2048 columns), or KC where that is more */

/* slcu_mv1p_prof(1) (cuda.h): launches of bf16 scales run FI = 1, whose threads 0 (a folding one) and 32 (not) sum
 * clock64 cycles by phase over the CTA's units, into mv1p_rec (SLCU_MV1P_W words a CTA, the first MV1P_RMAX after
 * the switch): smid | units << 32, %globaltimer at the start and the end, then thread 0's cycles before its first
 * unit (prologue: the first two units' issue, pdl_wait), in the wait + barrier of a unit, issuing, computing (the
 * SwiGLU room's making included), at the staging barrier and folding; then thread 32's wait + barrier, issue, compute
 * and staging barrier. Where a launch's time goes inside a CTA, as mvprof does for mv1c_i8 (docs/CUDA.md). */
#define MV1P_RMAX 8192
__device__ unsigned long long mv1p_rec[MV1P_RMAX * SLCU_MV1P_W];
__device__ unsigned mv1p_nrec;

/* The dynamic shared memory of mv1p_i8<DT, SDT, R, P, IB>, in bytes from its start (every offset 16-aligned):
 * MV1P_S stages of [codes 256 P BB | scale runs R x SSL | bias runs R x SSL (IB = 0) | activation codes KC x 32 |
 * block scales KC | group sums KC | run offsets 2 R bytes], then the staging sI | sM | sB ([KC][R + 1] floats each),
 * then (launches with a SwiGLU job) the SwiGLU room: codes sgb x 32 | sd | sbt | sxg sgb floats each. */
template <int DT, int SDT, int R, int P, int IB>
struct mv1p_lay {
    static constexpr int NP = MV1P_THREADS * P, KC = NP / R, SGB = KC > MV1P_SGB ? KC : MV1P_SGB, LD = R + 1;
    static constexpr int BB = DT == DT_Q4 ? 16 : 32, SSZ = SDT == DT_F32 ? 4 : 2;
    static constexpr int MAXPC = (KC * SSZ + 30) / 16; /* 16-byte pieces that cover a run of at most KC SSZ bytes */
    static constexpr int SSL = 16 * MAXPC;
    static constexpr int O_SC = NP * BB, O_BI = O_SC + R * SSL, O_SX = O_BI + (IB ? 0 : R * SSL);
    static constexpr int O_SD = O_SX + KC * 32, O_SXG = O_SD + KC * 4, O_OFF = O_SXG + KC * 4;
    static constexpr int STG = (O_OFF + 2 * R + 15) / 16 * 16;
    static constexpr int O_ST = MV1P_S * STG, O_SG = O_ST + 3 * KC * LD * 4;
    static constexpr size_t bytes(int sgb) { return (size_t)O_SG + (size_t)sgb * 44; }
};

/* a scale or bias value at p in shared memory: raw_sw's conversion of its word */
template <int SDT>
static __device__ __forceinline__ float sh_sw(const uint8_t *p) {
    if (SDT == DT_F32) return *(const float *)p;
    const unsigned h = *(const unsigned short *)p;
    return SDT == DT_BF16 ? __uint_as_float(h << 16) : __half2float(__ushort_as_half((unsigned short)h));
}

static __device__ __forceinline__ int mv1p_job(const ijobs &J, int t) { /* the job of tile t */
    int k = 0;
    while (k + 1 < J.n && t >= J.j[k + 1].tile0) k++;
    return k;
}

/* the unit after (jk, t, kb0): the tile's next chunk, else the next tile's first */
template <int KC>
static __device__ __forceinline__ void mv1p_next(const ijobs &J, int &jk, int &t, int &kb0) {
    kb0 += KC;
    if (kb0 >= J.j[jk].cols / 32) {
        kb0 = 0, t++;
        while (jk + 1 < J.n && t >= J.j[jk + 1].tile0) jk++;
    }
}

/* w: [nrows][cols] q4 (cols / 2 bytes a row) or q8, groups of j.group with SDT words; x: one row of int8 activation
 * (act_row(j, 0)) or the SwiGLU input j.sg / j.su -> y[r] for every row of the CTA's tiles. sgb: the SwiGLU room's
 * blocks (L::SGB, or 0 when no job of the launch has sg). */
template <int DT, int SDT, int R, int P, int IB, int FI>
__global__ void __launch_bounds__(MV1P_THREADS, 3) mv1p_i8(const __grid_constant__ ijobs J, int sgb) {
    using L = mv1p_lay<DT, SDT, R, P, IB>;
    constexpr int KC = L::KC, LD = L::LD, BB = L::BB, SSZ = L::SSZ, RS = MV1P_THREADS / KC;
    static_assert(RS * P == R && KC % 4 == 0 && L::SGB % KC == 0, "P pairs a thread; units of whole groups");
    extern __shared__ __align__(16) uint8_t mv1p_dyn[];
    float *sI = (float *)(mv1p_dyn + L::O_ST), *sM = sI + KC * LD, *sB = sM + KC * LD;
    uint8_t *sgx = mv1p_dyn + L::O_SG;
    float *sgd = (float *)(sgx + (size_t)sgb * 32), *sgbt = sgd + sgb, *sgxg = sgbt + sgb;
    const int tid = threadIdx.x, bl = tid % KC, rl0 = tid / KC;
    const int T = J.j[J.n - 1].tile0 + (J.j[J.n - 1].nrows + R - 1) / R;
    const int t1 = (int)((long long)(blockIdx.x + 1) * T / gridDim.x);
    int it = (int)((long long)blockIdx.x * T / gridDim.x), ijk = mv1p_job(J, it), ikb = 0; /* the issue's unit */
    int ct = it, cjk = ijk, ckb = 0;                                                          /* the compute's */
    if (it >= t1) return;
    const bool rec = FI && (tid == 0 || tid == 32); /* FI = 1: this thread sums its phases' cycles */
    unsigned long long g0 = 0, ck = 0, ph[6] = {0, 0, 0, 0, 0, 0};
    if (rec) g0 = gtimer(), ck = clock64();
#define MV1P_PH(i) do { if (rec) { const unsigned long long c_ = clock64(); ph[i] += c_ - ck, ck = c_; } } while (0)
    /* the issue's job: its matrix (resolved once a job) and activation row */
    int wjk = -1, ajk = -1, ar = 0;
    const uint8_t *wc = NULL, *ws = NULL, *wb = NULL;
    auto issue_w = [&](int s) { /* unit (ijk, it, ikb)'s codes, scale and bias runs into stage s */
        const ijob &j = J.j[ijk];
        if (wjk != ijk) {
            const ijob r = resolve(j);
            wc = r.codes, ws = (const uint8_t *)r.scales, wb = (const uint8_t *)r.biases, wjk = ijk;
        }
        uint8_t *st = mv1p_dyn + s * L::STG;
        const int cols = j.cols, nb = cols / 32, rb = DT == DT_Q4 ? cols / 2 : cols;
        const int gshift = j.group == 32 ? 0 : j.group == 64 ? 1 : 2, ng = nb >> gshift, r0 = (it - j.tile0) * R;
        const int nr = min(R, j.nrows - r0), kcn = min(KC, nb - ikb);
        const uint8_t *cb = wc + (size_t)r0 * rb + (size_t)ikb * BB;
#pragma unroll
        for (int k = 0; k < P; k++) {
            const int rl = rl0 + k * RS;
            if (rl < nr && bl < kcn) {
                const uint8_t *w = cb + (rl * rb + bl * BB);
                cp16(st + (rl * KC + bl) * BB, w, true);
                if (DT == DT_Q8) cp16(st + (rl * KC + bl) * BB + 16, w + 16, true);
            }
        }
        const size_t e0 = (size_t)r0 * ng + (size_t)(ikb >> gshift);
        const int len = (kcn >> gshift) * SSZ;
        for (int i = tid; i < (IB ? 1 : 2) * R * L::MAXPC; i += MV1P_THREADS) {
            const int wh = i >= R * L::MAXPC, ii = i - wh * R * L::MAXPC, rl = ii / L::MAXPC, p = ii - rl * L::MAXPC;
            if (rl >= nr) continue;
            const uintptr_t a = (uintptr_t)(wh ? wb : ws) + (e0 + (size_t)rl * ng) * SSZ, a0 = a & ~(uintptr_t)15;
            if (a0 + 16 * p < a + len) cp16(st + (wh ? L::O_BI : L::O_SC) + rl * L::SSL + 16 * p, (const void *)(a0 + 16 * p), true);
            if (!p) st[L::O_OFF + wh * R + rl] = (uint8_t)(a & 15);
        }
    };
    auto issue_a = [&](int s) { /* unit (ijk, ikb)'s activation blocks and group sums into stage s (not for sg) */
        const ijob &j = J.j[ijk];
        if (j.sg) return;
        if (ajk != ijk) ar = act_row(j, 0), ajk = ijk;
        uint8_t *st = mv1p_dyn + s * L::STG;
        const int cols = j.cols, nb = cols / 32, ns = nb + nb / 2 + nb / 4, kcn = min(KC, nb - ikb);
        const int gshift = j.group == 32 ? 0 : j.group == 64 ? 1 : 2, soff = j.group == 32 ? 0 : j.group == 64 ? nb : nb + nb / 2;
        const int8_t *xq = j.xq + (size_t)ar * cols + (size_t)ikb * 32;
        const float *xd = j.d + (size_t)ar * nb + ikb, *xs = j.s + (size_t)ar * ns + soff + (ikb >> gshift);
        for (int i = tid; i < 2 * kcn; i += MV1P_THREADS) cp16(st + L::O_SX + 16 * i, xq + 16 * i, true);
        for (int i = tid; i < kcn; i += MV1P_THREADS) cp4(st + L::O_SD + 4 * i, xd + i);
        for (int i = tid; i < (kcn >> gshift); i += MV1P_THREADS) cp4(st + L::O_SXG + 4 * i, xs + i);
    };
    /* the prologue: units 0 and 1 (the first's weights before pdl_wait unless the route chose them) */
    if (J.j[ijk].tab || J.j[ijk].rows) pdl_wait();
    issue_w(0);
    pdl_wait(); /* the weights' loads are out; the activation is the step's */
    issue_a(0);
    asm volatile("cp.async.commit_group;" ::: "memory");
    mv1p_next<KC>(J, ijk, it, ikb);
    if (it < t1) issue_w(1), issue_a(1);
    asm volatile("cp.async.commit_group;" ::: "memory");
    mv1p_next<KC>(J, ijk, it, ikb);
    float acc = 0.f, accb = 0.f;
    int sgk = -1, sg0 = 0, u = 0; /* the SwiGLU room holds job sgk's blocks sg0 .. sg0 + SGB - 1 */
    MV1P_PH(0);
    for (; ct < t1; u++) {
        asm volatile("cp.async.wait_group 1;" ::: "memory"); /* unit u's group (unit u + 1's may be in flight) */
        __syncthreads(); /* unit u in every thread's sight; the fold of unit u - 1 over (its staging, its stage) */
        MV1P_PH(1);
        if (it < t1) issue_w((u + 2) % MV1P_S), issue_a((u + 2) % MV1P_S);
        asm volatile("cp.async.commit_group;" ::: "memory");
        mv1p_next<KC>(J, ijk, it, ikb);
        MV1P_PH(2);
        const ijob &j = J.j[cjk];
        const uint8_t *st = mv1p_dyn + (u % MV1P_S) * L::STG;
        const int nb = j.cols / 32, r0 = (ct - j.tile0) * R, nr = min(R, j.nrows - r0), kcn = min(KC, nb - ckb);
        const int gshift = j.group == 32 ? 0 : j.group == 64 ? 1 : 2, bmask = j.group / 32 - 1;
        if (j.sg && (cjk != sgk || ckb < sg0 || ckb >= sg0 + L::SGB)) { /* uniform: the unit is the CTA's */
            sgk = cjk, sg0 = ckb - ckb % L::SGB;
            swi_stage<DT, MV1P_THREADS>(j, sg0, min(L::SGB, nb - sg0), gshift, (uint4 *)sgx, sgd, sgbt, sgxg);
        }
        const uint4 *ax = j.sg ? (const uint4 *)sgx + 2 * (ckb - sg0) : (const uint4 *)(st + L::O_SX);
        const float *ad = j.sg ? sgd + (ckb - sg0) : (const float *)(st + L::O_SD);
        const float *axg = j.sg ? sgxg + ((ckb - sg0) >> gshift) : (const float *)(st + L::O_SXG);
        if (bl < kcn) {
            const uint4 x0 = ax[2 * bl], x1 = ax[2 * bl + 1];
            const float db = ad[bl];
#pragma unroll
            for (int k = 0; k < P; k++) {
                const int rl = rl0 + k * RS;
                if (rl < nr) {
                    const uint4 *w = (const uint4 *)(st + (rl * KC + bl) * BB);
                    const int I = dot_block<DT>(w[0], DT == DT_Q8 ? w[1] : w[0], x0, x1);
                    const int go = (bl >> gshift) * SSZ;
                    const float sv = sh_sw<SDT>(st + L::O_SC + rl * L::SSL + st[L::O_OFF + rl] + go);
                    sI[bl * LD + rl] = (float)I;
                    sM[bl * LD + rl] = __fmul_rn(sv, db);
                    if (!(bl & bmask))
                        sB[(bl >> gshift) * LD + rl] = IB ? zbias<DT>(sv) : sh_sw<SDT>(st + L::O_BI + rl * L::SSL + st[L::O_OFF + R + rl] + go);
                }
            }
        }
        MV1P_PH(3);
        __syncthreads(); /* the unit's staging */
        MV1P_PH(4);
        if (tid < nr) {
            fold_chunk(sI + tid, sM + tid, sB + tid, LD, axg, kcn, bmask, gshift, acc, accb);
            if (ckb + KC >= nb) j.y[r0 + tid] = __fadd_rn(acc, accb), acc = accb = 0.f;
        }
        mv1p_next<KC>(J, cjk, ct, ckb);
        MV1P_PH(5);
    }
#undef MV1P_PH
    if (FI) { /* thread 32's sums come to thread 0 through the staging (free after this barrier) */
        __syncthreads();
        unsigned long long *x = (unsigned long long *)(mv1p_dyn + L::O_ST);
        if (tid == 32)
            for (int i = 0; i < 4; i++) x[i] = ph[1 + i];
        __syncthreads();
        if (tid == 0) {
            const unsigned i = atomicAdd(&mv1p_nrec, 1u);
            if (i < MV1P_RMAX) {
                unsigned sm;
                asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
                unsigned long long *w = mv1p_rec + (size_t)i * SLCU_MV1P_W;
                w[0] = sm | (unsigned long long)u << 32, w[1] = g0, w[2] = gtimer();
                for (int p = 0; p < 6; p++) w[3 + p] = ph[p];
                for (int p = 0; p < 4; p++) w[9 + p] = x[p];
            }
        }
    }
}

static int mv1p_cps; /* 0 unread; > 0 CTAs an SM at most; < 0 minus the CTAs in all */
static int mv1p_np;  /* 0 unread; -1 auto; else pairs a thread (2, 4) */
extern "C" void slcu_i8_mv1p_ctas(int n) { mv1p_cps = n >= -4096 && n <= 16 ? n : 0; }
extern "C" void slcu_i8_mv1p_pairs(int p) { mv1p_np = p == 2 || p == 4 || p == -1 ? p : 0; }
static int mv1p_ctas(void) {
    if (!mv1p_cps) {
        const char *e = getenv("SLUICE_CUDA_MV1P_CTAS");
        const int v = e ? atoi(e) : 0;
        mv1p_cps = v >= 1 && v <= 16 ? v : 3;
    }
    return mv1p_cps;
}
static int mv1p_sms(void) {
    static int n;
    if (!n) {
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0)
            n = 132; /* an H100's */
    }
    return n;
}

/* Rows a tile: the most (32, 16, 8; else 4) that still give every CTA of the grid a tile, so a large launch (the
 * experts) folds many rows at once over short chunks and a small one (o: 2048 rows) spreads over every SM. */
int mv1p_tile_rows(const ijobs *J) {
    const int c = mv1p_ctas();
    const long g = c > 0 ? (long)c * mv1p_sms() : -c;
    for (int r = 32; r >= 8; r /= 2) {
        long tiles = 0;
        for (int i = 0; i < J->n; i++) tiles += (J->j[i].nrows + r - 1) / r;
        if (tiles >= g) return r;
    }
    return 4;
}

/* Pairs a thread: SLUICE_CUDA_MV1P_P=2|4 (or slcu_i8_mv1p_pairs), else 4 for q4 launches whose every row has the
 * KC = 1024 / rows blocks a unit of 4 takes (so no thread of a unit idles), 2 otherwise (q8 always: 16 KB units). */
static int mv1p_pairs(int dt, int rows, const ijobs *J) {
    if (!mv1p_np) {
        const char *e = getenv("SLUICE_CUDA_MV1P_P");
        mv1p_np = e && (e[0] == '2' || e[0] == '4') && !e[1] ? e[0] - '0' : -1;
    }
    if (dt != DT_Q4) return 2;
    if (mv1p_np > 0) return mv1p_np;
    for (int i = 0; i < J->n; i++)
        if (J->j[i].cols / 32 < 1024 / rows) return 2;
    return 4;
}

static int mv1p_fi; /* slcu_mv1p_prof */
extern "C" int slcu_mv1p_prof(int on) {
    const unsigned z = 0;
    mv1p_fi = on != 0;
    return !on || cudaMemcpyToSymbol(mv1p_nrec, &z, sizeof z) == cudaSuccess ? 0 : -1;
}
extern "C" int slcu_mv1p_prof_read(unsigned long long *out, int max, int *clock_khz) {
    unsigned n = 0;
    if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpyFromSymbol(&n, mv1p_nrec, sizeof n) != cudaSuccess) return -1;
    n = n > MV1P_RMAX ? MV1P_RMAX : n;
    n = (int)n > max ? (unsigned)max : n;
    if (n && cudaMemcpyFromSymbol(out, mv1p_rec, (size_t)n * SLCU_MV1P_W * sizeof *out) != cudaSuccess) return -1;
    int dev = 0;
    *clock_khz = 0;
    if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(clock_khz, cudaDevAttrClockRate, dev);
    return (int)n;
}

template <int DT, int SDT, int R, int P, int IB>
static void mv1p_go(int tiles, int sg, int pdl, const ijobs *J) {
    using L = mv1p_lay<DT, SDT, R, P, IB>;
    const int f = SDT == DT_BF16 && mv1p_fi; /* the FI = 1 kernel (slcu_mv1p_prof) */
    void (*k)(ijobs, int) = f ? mv1p_i8<DT, DT_BF16, R, P, IB, 1> : mv1p_i8<DT, SDT, R, P, IB, 0>;
    const size_t dyn = L::bytes(sg ? L::SGB : 0);
    static size_t set[2]; /* the dynamic shared memory asked for (past 48 KB a kernel must opt in) */
    static int occ[2];    /* CTAs an SM at `set` bytes */
    if (dyn > set[f]) {
        cudaFuncSetAttribute((const void *)k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn), set[f] = dyn;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ[f], k, MV1P_THREADS, set[f]) != cudaSuccess || occ[f] < 1) occ[f] = 1;
    }
    const int c = mv1p_ctas();
    const long gmax = c > 0 ? (long)(c < occ[f] ? c : occ[f]) * mv1p_sms() : -c;
    const long per = (tiles + gmax - 1) / gmax; /* tiles a CTA at most; as many CTAs as that needs */
    const int grid = (int)((tiles + per - 1) / per);
    pdl_launch_on(pdl, k, dim3((unsigned)grid), dim3(MV1P_THREADS), dyn, SLS, *J, sg ? L::SGB : 0); /* pdl: cuda_pdl.cuh pdl_enabled */
}

template <int DT, int SDT, int R, int P>
static void mv1p_ib(int tiles, int sg, int pdl, const ijobs *J) {
    if (J->ib) mv1p_go<DT, SDT, R, P, 1>(tiles, sg, pdl, J);
    else mv1p_go<DT, SDT, R, P, 0>(tiles, sg, pdl, J);
}

template <int DT, int SDT, int P>
static void mv1p_rows(int rows, int tiles, int sg, int pdl, const ijobs *J) {
    if (rows == 4) mv1p_ib<DT, SDT, 4, P>(tiles, sg, pdl, J);
    else if (rows == 8) mv1p_ib<DT, SDT, 8, P>(tiles, sg, pdl, J);
    else if (rows == 16) mv1p_ib<DT, SDT, 16, P>(tiles, sg, pdl, J);
    else mv1p_ib<DT, SDT, 32, P>(tiles, sg, pdl, J);
}

template <int DT, int P>
static void mv1p_sdt(int sdt, int rows, int tiles, int sg, int pdl, const ijobs *J) {
    if (sdt == DT_F32) mv1p_rows<DT, DT_F32, P>(rows, tiles, sg, pdl, J);
    else if (sdt == DT_BF16) mv1p_rows<DT, DT_BF16, P>(rows, tiles, sg, pdl, J);
    else mv1p_rows<DT, DT_F16, P>(rows, tiles, sg, pdl, J);
}

int mv1p_launch(int dt, int sdt, int rows, int tiles, const ijobs *J, int pdl) {
    if (rows != 4 && rows != 8 && rows != 16 && rows != 32) return 0;
    int sg = 0; /* a job makes its SwiGLU input: the launch has the room (mv1p_go) */
    for (int i = 0; i < J->n; i++) sg |= J->j[i].sg != NULL;
    if (dt != DT_Q4) mv1p_sdt<DT_Q8, 2>(sdt, rows, tiles, sg, pdl, J);
    else if (mv1p_pairs(dt, rows, J) == 4) mv1p_sdt<DT_Q4, 4>(sdt, rows, tiles, sg, pdl, J);
    else mv1p_sdt<DT_Q4, 2>(sdt, rows, tiles, sg, pdl, J);
    return 1;
}
