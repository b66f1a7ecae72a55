/*
 * cuda_mv.cu — the int8 matvecs of a decode step (cuda.h's canonical order): mv1_i8 for one token, mvn_i8 for 2 to 8
 * (continuous batching), launched by cuda_i8.cu slcu_matmul_i8 (launch_class) over its job table (cuda_i8.cuh). How
 * many rows a CTA of mv1_i8 takes (mv_tile_rows) changes which CTA computes a row, not a row's operations, so every
 * choice gives the same bits (test_cuda checks each against the default). Every kernel's IB: 0 reads the bias words,
 * 1 (ijobs ib: SLUICE_CUDA_IBIAS=1 and every job's biases implied) computes them from the scales (cuda_i8.cuh zbias).
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_mv.cuh"
#include "backend/cuda/cuda_addnorm.cuh"
#include "backend/cuda/cuda_normrope.cuh"

/* One token (mv1_i8), and 2 to 8 (mvn_i8, NT of them: its general case; the one-token kernel kept apart, since
 * the general loop ran one token 28% slower on the H100): a CTA of MV1_THREADS takes R rows (mvn_i8: MV1_ROWS). Per chunk of up to
 * MV1_PAIRS / R blocks (mvn_i8: MV1_KC / NT)
 * blocks, every thread takes (row, block) pairs, consecutive threads consecutive blocks of a row (coalesced code
 * loads, each block's codes loaded once for all NT tokens), and stages each token's exact I_b as a float and its
 * scale product s_g * d_b (and the row's group biases) in shared memory; then thread (t, i) folds row i's chunk
 * for token t in block order, acc = fma(I_b, s_g d_b, acc), and its biases, accb = fma(bias_j, s_j, accb):
 * mv_i8's operations in mv_i8's order, so bitwise its results (and a token's the same in any batch), with the
 * loads of a row spread over the CTA instead of one thread. */
#define MV1_ROWS 16
#define MV1_THREADS 256
#define MV1_KC 128
#define MV1_LD (MV1_ROWS + 1) /* odd: the staging stores of consecutive blocks hit different banks */
#define MV1_PAIRS 2048 /* (row, block) pairs a chunk of mv1_i8: R rows x 2048 / R blocks */
#define MV1_MAXT 8 /* up to 8 tokens (a batch of decode steps): NT of them staged, 16 x NT fold threads */

template <int DT, int SDT, int R, int IB>
__global__ void __launch_bounds__(MV1_THREADS) mv1_i8(const __grid_constant__ ijobs J) {
    const ijob j = resolve(J.j[find_job(J)]);
    constexpr int KC = MV1_PAIRS / R, LD = R + 1; /* blocks a chunk; LD odd: staging stores of consecutive blocks hit different banks */
    __shared__ float sI[KC * LD], sM[KC * LD], sB[KC * LD], sxg[KC];
    const int tid = threadIdx.x, r0 = ((int)blockIdx.x - j.tile0) * R, cols = j.cols, nb = cols / 32;
    const int ng = cols / j.group, ns = nb + nb / 2 + nb / 4, nr = min(R, j.nrows - r0);
    const int gshift = j.group == 32 ? 0 : j.group == 64 ? 1 : 2, soff = j.group == 32 ? 0 : j.group == 64 ? nb : nb + nb / 2;
    const int bmask = j.group / 32 - 1, rb = DT == DT_Q4 ? cols / 2 : cols, ar = act_row(j, 0);
    const int8_t *xq = j.xq + (size_t)ar * cols;
    const float *xd = j.d + (size_t)ar * nb, *xs = j.s + (size_t)ar * ns + soff; /* the group sums */
    float acc = 0.f, accb = 0.f;
    for (int kb0 = 0; kb0 < nb; kb0 += KC) {
        const int kcn = min(KC, nb - kb0), np = nr * kcn;
#pragma unroll 4
        for (int q = tid; q < np; q += MV1_THREADS) {
            const int rl = q / kcn, bl = q - rl * kcn, b = kb0 + bl, r = r0 + rl;
            const uint8_t *w = j.codes + (size_t)r * rb + (size_t)b * (DT == DT_Q4 ? 16 : 32);
            const uint4 *xa = (const uint4 *)(xq + (size_t)b * 32);
            const uint4 w0 = __ldg((const uint4 *)w), x0 = __ldg(xa), x1 = __ldg(xa + 1);
            const int I = dot_block<DT>(w0, DT == DT_Q8 ? __ldg((const uint4 *)w + 1) : w0, x0, x1);
            const size_t e = (size_t)r * ng + (size_t)(b >> gshift);
            const float sw = cv_sw(ld_sw(j.scales, SDT, e), j.scales, SDT, e);
            sI[bl * LD + rl] = (float)I;
            sM[bl * LD + rl] = __fmul_rn(sw, __ldg(xd + b));
            if (!(b & bmask)) sB[(bl >> gshift) * LD + rl] = !IB ? cv_sw(ld_sw(j.biases, SDT, e), j.biases, SDT, e) : zbias<DT>(sw);
        }
        for (int i = tid; i < (kcn >> gshift); i += MV1_THREADS) sxg[i] = __ldg(xs + (kb0 >> gshift) + i);
        __syncthreads();
        if (tid < nr) fold_chunk(sI + tid, sM + tid, sB + tid, LD, sxg, kcn, bmask, gshift, acc, accb);
        __syncthreads();
    }
    if (tid < nr) j.y[r0 + tid] = __fadd_rn(acc, accb);
}

/* mv1_i8's operations on the same values in the same order (so bitwise its results), with every global load of a
 * thread's pairs in flight at once: a chunk's codes, scale and bias words go to registers (P pairs a thread) and
 * the activation's codes and block scales of the chunk to shared memory before any is used. mv1_i8's loop
 * waited for each pair's codes before it asked for the next pair's (and for the scales after the codes): some
 * eight dependent round trips a thread where this has one (SLUICE_CUDA_MV1=2; slcu_i8_mv1_kernel). */
template <int DT, int SDT, int R, int IB>
__global__ void __launch_bounds__(MV1_THREADS) mv1b_i8(const __grid_constant__ ijobs J) {
    constexpr int KC = MV1_PAIRS / R < 256 ? MV1_PAIRS / R : 256, LD = R + 1, P = R * KC / MV1_THREADS;
    constexpr int BB = DT == DT_Q4 ? 16 : 32; /* code bytes a block */
    const ijob j = resolve(J.j[find_job(J)]);
    __shared__ float sI[KC * LD], sM[KC * LD], sB[KC * LD], sd[KC], sxg[KC];
    __shared__ uint4 sx[KC * 2];
    const int tid = threadIdx.x, r0 = ((int)blockIdx.x - j.tile0) * R, cols = j.cols, nb = cols / 32;
    const int ng = cols / j.group, ns = nb + nb / 2 + nb / 4, nr = min(R, j.nrows - r0);
    const int gshift = j.group == 32 ? 0 : j.group == 64 ? 1 : 2, soff = j.group == 32 ? 0 : j.group == 64 ? nb : nb + nb / 2;
    const int bmask = j.group / 32 - 1, rb = DT == DT_Q4 ? cols / 2 : cols, ar = act_row(j, 0);
    const int8_t *xq = j.xq + (size_t)ar * cols;
    const float *xd = j.d + (size_t)ar * nb, *xs = j.s + (size_t)ar * ns + soff; /* the group sums */
    float acc = 0.f, accb = 0.f;
    for (int kb0 = 0; kb0 < nb; kb0 += KC) {
        const int kcn = min(KC, nb - kb0), np = nr * kcn;
        uint4 w0[P], w1[P];
        unsigned sw[P], bw[P];
#pragma unroll
        for (int k = 0; k < P; k++) {
            const int q = tid + k * MV1_THREADS, rl = q / kcn, b = kb0 + q - rl * kcn, r = r0 + rl;
            sw[k] = bw[k] = 0;
            if (q < np) {
                const uint4 *w = (const uint4 *)(j.codes + (size_t)r * rb + (size_t)b * BB);
                w0[k] = __ldg(w);
                if (DT == DT_Q8) w1[k] = __ldg(w + 1);
                const size_t e = (size_t)r * ng + (size_t)(b >> gshift);
                sw[k] = ld_sw(j.scales, SDT, e);
                if (!(b & bmask) && !IB) bw[k] = ld_sw(j.biases, SDT, e);
            }
        }
        for (int i = tid; i < 2 * kcn; i += MV1_THREADS) sx[i] = __ldg((const uint4 *)(xq + (size_t)kb0 * 32) + i);
        for (int i = tid; i < kcn; i += MV1_THREADS) sd[i] = __ldg(xd + kb0 + i);
        for (int i = tid; i < (kcn >> gshift); i += MV1_THREADS) sxg[i] = __ldg(xs + (kb0 >> gshift) + i);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < P; k++) {
            const int q = tid + k * MV1_THREADS, rl = q / kcn, bl = q - rl * kcn, b = kb0 + bl, r = r0 + rl;
            if (q < np) {
                const size_t e = (size_t)r * ng + (size_t)(b >> gshift);
                const int I = dot_block<DT>(w0[k], DT == DT_Q8 ? w1[k] : w0[k], sx[2 * bl], sx[2 * bl + 1]);
                sI[bl * LD + rl] = (float)I;
                const float sv = cv_sw(sw[k], j.scales, SDT, e);
                sM[bl * LD + rl] = __fmul_rn(sv, sd[bl]);
                if (!(b & bmask)) sB[(bl >> gshift) * LD + rl] = !IB ? cv_sw(bw[k], j.biases, SDT, e) : zbias<DT>(sv);
            }
        }
        __syncthreads();
        if (tid < nr) fold_chunk(sI + tid, sM + tid, sB + tid, LD, sxg, kcn, bmask, gshift, acc, accb);
        __syncthreads();
    }
    if (tid < nr) j.y[r0 + tid] = __fadd_rn(acc, accb);
}

/* mv1_i8's operations on the same values in the same order (so bitwise its results) with every load of a chunk in
 * flight at once and none in registers: a chunk of MV1C_NP (row, block) pairs' codes, scale and bias words, and
 * the activation's codes and block scales, go to shared memory by cp.async; after one wait each thread computes
 * its pairs' I_b, s_g d_b and biases (P of them, in registers), then stores them where the codes were for the
 * fold (SLUICE_CUDA_MV1=3). */
#define MV1C_NP(DT) ((DT) == DT_Q4 ? 1024 : 512)

/* SLUICE_CUDA_MV1=6 (cuda.h slcu_mvprof_read): mv1c_i8 as FI = 1, with each CTA's thread 0 stamping clock64 at the
 * phases of its first chunk and %globaltimer at its start and end, into mvp_rec (MVP_W words a CTA, the first MVP_MAX
 * CTAs after slcu_mvprof_reset): where a launch's time goes inside a CTA (docs/CUDA.md "Fewer instructions a pair").
 * Words: smid | chunks << 32, start and end (ns), then the cycles from the start to: the job resolved, the weights'
 * loads issued, the activation's issued, the wait and barrier passed, the pairs computed, staged (barrier), folded
 * (barrier), and the CTA's end. */
#define MVP_MAX 8192
#define MVP_W 11
__device__ unsigned long long mvp_rec[MVP_MAX * MVP_W];
__device__ unsigned mvp_n;

/* A (row, block) pair q of a chunk of kcn blocks: its row rl = q / kcn and block bl, by the chunk's reciprocal
 * rk = 1 / kcn in f32: (q + 0.5) rk is within 2^-12 of the true (q + 0.5) / kcn for q < 2^11, kcn <= 2^9, and that
 * quotient is at least 0.5 / kcn >= 2^-10 from an integer, so its truncation is q / kcn exactly (every q and kcn a
 * chunk has was checked exhaustively: docs/CUDA.md "Fewer instructions a pair"). */
static __device__ __forceinline__ void mv1c_pair(int q, int kcn, float rk, int &rl, int &bl) {
    rl = __float2int_rz(__fmul_rn(__fadd_rn(__int2float_rn(q), 0.5f), rk));
    bl = q - rl * kcn;
}

/* sc: the caller's shared [MV1C_NP(DT) * BB] bytes, 16-aligned (free again after the call's last barrier). A pair's
 * row and block by mv1c_pair's reciprocal, its code and scale addresses as 32-bit offsets from the chunk's first row
 * (R rows of a matrix: far below 2^31 bytes), and a scale word's half from those offsets' low bits (where it divided
 * and addressed in 64 bits for each pair, three times: call K timed the two, docs/CUDA.md). FI = 2
 * (SLUICE_CUDA_MV1=6) records the phases (mvp_rec); FI = 1 is the kernel. MF = 2 (SLUICE_CUDA_MVFOLD=2) stages the fold's
 * operands row-major: a row's I_b and s_g d_b at RS consecutive words (RS = KC + 4: 16-byte rows whose starts fall 4
 * banks apart, so the R folding threads' LDS.128 of a quarter warp hit distinct banks; consecutive pairs store to
 * consecutive words) and its group biases at RS >> gshift (so their LDS.128, LDS.64 or LDS of a quarter, half or whole
 * warp hit distinct banks too: RS / 4 is odd), and folds them by cuda_mv.cuh fold_row (a quad of blocks' loads at once);
 * the same operands in the same order (docs/CUDA.md "Fewer instructions a pair"). */
template <int DT, int SDT, int R, int IB, int FI, int MF = 1, int EX = 0, int JR = 0>
static __device__ __forceinline__ void mv1c_body(const ijobs &J, uint8_t *sc) {
    constexpr int BB = DT == DT_Q4 ? 16 : 32, NP = MV1C_NP(DT), KC = NP / R, LD = R + 1, P = NP / MV1_THREADS;
    constexpr int ssz = SDT == DT_F32 ? 4 : 2, RS = KC + 4;
    static_assert(3 * KC * LD * 4 <= NP * BB, "the fold's staging fits where the codes were");
    static_assert(MF != 2 || (3 * R * RS * 4 <= NP * BB && KC % 8 == 0), "MF = 2: its staging fits; RS / 4 odd");
    static_assert(NP <= 2048 && KC <= 512, "mv1c_pair's reciprocal is exact for these");
    __shared__ long long sck[9]; /* FI = 2: thread 0's clock64 at each phase (mvp_rec) */
    unsigned long long gt0 = 0;
#define MVP(i) do { if (FI == 2 && threadIdx.x == 0) sck[i] = clock64(); } while (0)
    if (FI == 2 && threadIdx.x == 0) gt0 = gtimer();
    MVP(0);
    const int jk = JR ? (int)blockIdx.y : job_of<EX>(J); /* JR: the grid's y is the job (mv1c_launch, SLUICE_CUDA_RESOLVE=2) */
    if ((J.j[jk].tab && !(EX && J.early)) || J.j[jk].rows) pdl_wait(); /* the matrix or rows chosen by a kernel of the step (the route) */
    const ijob j = resolve(J.j[jk]);
    MVP(1);
    /* sc: codes, then sI | sM | sB */
    __shared__ unsigned ssw[NP], sbw[NP];
    __shared__ __align__(16) uint4 sx[KC * 2];
    __shared__ float sd[KC];
    __shared__ __align__(MF == 2 ? 16 : 4) float sxg[KC]; /* MF = 2: read 16 bytes at a time */
    __shared__ float sbt[KC];
    float *sI = (float *)sc, *sM = sI + (MF == 2 ? R * RS : KC * LD), *sB = sM + (MF == 2 ? R * RS : KC * LD);
    const int tid = threadIdx.x, r0 = (JR ? (int)blockIdx.x : (int)blockIdx.x - j.tile0) * R, cols = j.cols, nb = cols / 32;
    const int ng = cols / j.group, ns = nb + nb / 2 + nb / 4, nr = min(R, j.nrows - r0);
    const int gshift = j.group == 32 ? 0 : j.group == 64 ? 1 : 2, soff = j.group == 32 ? 0 : j.group == 64 ? nb : nb + nb / 2;
    const int bmask = j.group / 32 - 1, rb = DT == DT_Q4 ? cols / 2 : cols, ar = act_row(j, 0);
    const int8_t *xq = j.xq + (size_t)ar * cols;
    const float *xd = j.d + (size_t)ar * nb, *xs = j.s + (size_t)ar * ns + soff; /* the group sums */
    float acc = 0.f, accb = 0.f;
    for (int kb0 = 0; kb0 < nb; kb0 += KC) {
        const int kcn = min(KC, nb - kb0), np = nr * kcn;
        const float rk = __frcp_rn((float)kcn);
        /* the chunk's first row's codes, scale and bias words (KC is a multiple of 4 blocks, so a block's group is
         * the chunk's first group + bl >> gshift and b & bmask is bl & bmask) */
        const size_t e0 = (size_t)r0 * ng + (size_t)(kb0 >> gshift);
        const uint8_t *cb = j.codes + (size_t)r0 * rb + (size_t)kb0 * BB;
        const uint8_t *sb = (const uint8_t *)j.scales + e0 * ssz, *bb = (const uint8_t *)j.biases + e0 * ssz;
#pragma unroll
        for (int k = 0; k < P; k++) {
            const int q = tid + k * MV1_THREADS;
            if (q < np) {
                int rl, bl;
                mv1c_pair(q, kcn, rk, rl, bl);
                const uint8_t *w = cb + (rl * rb + bl * BB);
                cp16(sc + q * BB, w, true);
                if (DT == DT_Q8) cp16(sc + q * BB + 16, w + 16, true);
                const int eo = (rl * ng + (bl >> gshift)) * ssz;
                cp4(&ssw[q], (const void *)((uintptr_t)(sb + eo) & ~(uintptr_t)3));
                if (!(bl & bmask) && !IB) cp4(&sbw[q], (const void *)((uintptr_t)(bb + eo) & ~(uintptr_t)3));
            }
        }
        if (kb0 == 0) MVP(2);
        if (kb0 == 0) pdl_wait(); /* the weights' loads are in flight; the activation is the step's (again: a no-op) */
        if ((EX || JR) && kb0 == 0 && J.trig) pdl_trigger(); /* (mv1c_sw's, RESOLVE=3's: the launch after it may start, its CTAs as these end) */
        if (j.sg) {
            swi_stage<DT, MV1_THREADS>(j, kb0, kcn, gshift, sx, sd, sbt, sxg); /* while the weights' loads are in flight */
        } else {
            for (int i = tid; i < 2 * kcn; i += MV1_THREADS) cp16(&sx[i], xq + (size_t)kb0 * 32 + (size_t)i * 16, true);
            for (int i = tid; i < kcn; i += MV1_THREADS) cp4(&sd[i], xd + kb0 + i);
            for (int i = tid; i < (kcn >> gshift); i += MV1_THREADS) cp4(&sxg[i], xs + (kb0 >> gshift) + i);
        }
        if (kb0 == 0) MVP(3);
        asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
        __syncthreads();
        if (kb0 == 0) MVP(4);
        float vI[P], vM[P], vB[P];
#pragma unroll
        for (int k = 0; k < P; k++) {
            const int q = tid + k * MV1_THREADS;
            vI[k] = vM[k] = vB[k] = 0.f;
            if (q < np) {
                int rl, bl;
                mv1c_pair(q, kcn, rk, rl, bl);
                const uint4 *w = (const uint4 *)(sc + q * BB);
                vI[k] = (float)dot_block<DT>(w[0], DT == DT_Q8 ? w[1] : w[0], sx[2 * bl], sx[2 * bl + 1]);
                float bv = 0.f;
                /* a 16-bit word's half: bit 1 of its address (the base's low bits plus the offset) */
                const unsigned ea = (unsigned)(uintptr_t)sb + (unsigned)((rl * ng + (bl >> gshift)) * ssz);
                const unsigned eb = (unsigned)(uintptr_t)bb + (unsigned)((rl * ng + (bl >> gshift)) * ssz);
                const float sv = raw_sw(ssw[q], (ea & 2) != 0, SDT);
                if (!IB && !(bl & bmask)) bv = raw_sw(sbw[q], (eb & 2) != 0, SDT);
                vM[k] = __fmul_rn(sv, sd[bl]);
                if (!(bl & bmask)) vB[k] = !IB ? bv : zbias<DT>(sv);
            }
        }
        if (kb0 == 0) MVP(5);
        __syncthreads(); /* the codes are read: their room takes the fold's staging */
#pragma unroll
        for (int k = 0; k < P; k++) {
            const int q = tid + k * MV1_THREADS;
            if (q < np) {
                int rl, bl;
                mv1c_pair(q, kcn, rk, rl, bl);
                if (MF == 2) {
                    sI[rl * RS + bl] = vI[k], sM[rl * RS + bl] = vM[k];
                    if (!(bl & bmask)) sB[rl * (RS >> gshift) + (bl >> gshift)] = vB[k];
                } else {
                    sI[bl * LD + rl] = vI[k], sM[bl * LD + rl] = vM[k];
                    if (!(bl & bmask)) sB[(bl >> gshift) * LD + rl] = vB[k];
                }
            }
        }
        __syncthreads();
        if (kb0 == 0) MVP(6);
        if (MF == 2 && tid < nr) fold_row(sI + tid * RS, sM + tid * RS, sB + tid * (RS >> gshift), sxg, kcn, gshift, acc, accb);
        if (MF != 2 && tid < nr) fold_chunk(sI + tid, sM + tid, sB + tid, LD, sxg, kcn, bmask, gshift, acc, accb);
        __syncthreads();
        if (kb0 == 0) MVP(7);
    }
    if (tid < nr) j.y[r0 + tid] = __fadd_rn(acc, accb);
    MVP(8);
    if (FI == 2 && threadIdx.x == 0) {
        const unsigned i = atomicAdd(&mvp_n, 1u);
        if (i < MVP_MAX) {
            unsigned sm;
            asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
            unsigned long long *w = mvp_rec + (size_t)i * MVP_W;
            w[0] = sm | (unsigned long long)((nb + KC - 1) / KC) << 32, w[1] = gt0, w[2] = gtimer();
            for (int p = 1; p <= 8; p++) w[2 + p] = (unsigned long long)(sck[p] - sck[0]);
        }
    }
#undef MVP
}

/* JR = 1 (SLUICE_CUDA_RESOLVE=2, mv1c_launch): a launch whose jobs all have the same tiles on a grid (tiles a job, jobs),
 * the job blockIdx.y and the tile in it blockIdx.x, where JR = 0 walks the jobs' tile0 words (find_job: a dependent
 * parameter load a job, call R's "resolve" 0.5 us for one job, 2.1 for gate/up's 16). The same job and rows (tile0 is
 * jk times the tiles a job: cuda_i8.cu launch_class), the same CTA order (x before y), the same arithmetic after. */
template <int DT, int SDT, int R, int IB, int FI, int MF = 1, int JR = 0>
__global__ void __launch_bounds__(MV1_THREADS, 6) mv1c_i8(const __grid_constant__ ijobs J) {
    __shared__ __align__(16) uint8_t sc[MV1C_NP(DT) * (DT == DT_Q4 ? 16 : 32)];
    mv1c_body<DT, SDT, R, IB, FI, MF, 0, JR>(J, sc);
}

/* SLUICE_CUDA_FUSE=qkv: mv1c_i8's rows, then per-head norm + RoPE (cuda_normrope.cuh norm_rope_head, k_norm_rope's code)
 * of each head whose rows this CTA completes. T.job[i]: the job whose y is part i's x (-1: none). A CTA counts the rows
 * of each head it wrote (rows h hs .. h hs + dim - 1 of its job) into that head's counter after a fence (release);
 * the CTA whose count completes the head's dim rows fences (acquire), resets the counter (for the next launch, in
 * stream order) and does the head. No CTA waits for another; a head's rows may span any number of CTAs. */
template <int DT, int SDT, int R, int IB>
__global__ void __launch_bounds__(MV1_THREADS, 6) mv1c_nr(const __grid_constant__ ijobs J, const __grid_constant__ nr_tail T) {
    __shared__ __align__(16) uint8_t sc[MV1C_NP(DT) * (DT == DT_Q4 ? 16 : 32)]; /* then part [256], v0 [1024] */
    static_assert(MV1C_NP(DT) * (DT == DT_Q4 ? 16 : 32) >= 256 * 8 + 1024 * 4, "the tail's room in the codes'");
    __shared__ int lasth[R + 1], nlast;
    mv1c_body<DT, SDT, R, IB, 1>(J, sc);
    double *part = (double *)sc;
    float *v0 = (float *)(sc + 256 * 8);
    const int jk = find_job(J), pi = T.job[0] == jk ? 0 : T.job[1] == jk ? 1 : -1;
    if (pi < 0) return; /* (v's rows) */
    const slcu_normrope &p = T.A.p[pi];
    const int r0 = ((int)blockIdx.x - J.j[jk].tile0) * R, r1 = min(r0 + R, J.j[jk].nrows), hs = (int)p.hs;
    __threadfence(); /* this CTA's rows, device-wide, before its counts */
    __syncthreads(); /* (and sc is free) */
    if (!threadIdx.x) {
        int n = 0;
        for (int h = r0 / hs; h < p.n_heads && h * hs < r1; h++) {
            const int got = min(r1, h * hs + p.dim) - max(r0, h * hs);
            if (got <= 0) continue;
            int *c = T.cnt + (pi ? T.A.n0 : 0) + h;
            if (atomicAdd(c, got) + got == p.dim) lasth[n++] = h, *c = 0;
        }
        nlast = n;
    }
    __syncthreads();
    if (!nlast) return;
    __threadfence(); /* the other CTAs' rows of these heads, after their counts */
    const int pos = T.pd ? *T.pd : T.A.pos;
    for (int i = 0; i < nlast; i++) norm_rope_head(T.A, p, lasth[i], pos, part, v0);
}

/* mv1c_an's tail, a call of its own: inlined, its registers made the matvec's loop spill under the 40 a thread */
static __device__ __noinline__ void an_run(const an_tail &T, uint8_t *sc) {
    double *part = (double *)sc;
    float *xs = (float *)(sc + 256 * 8), *sbs = xs + AN_FUSE_MAXD;
    add_norm_row<MV1_THREADS, AN_FUSE_MAXD, true>(T.p, T.a, part, xs, sbs);
}

/* SLUICE_CUDA_FUSE=o / down: mv1c_i8's rows of the jobs (the o projection; or the experts' down matrices), then the
 * CTA that finishes last (a counter for the launch: release fence, count; acquire fence) runs slcu_add_norm_q's code
 * (cuda_addnorm.cuh add_norm_row, k_add_norm_q's operations on 256 threads) on T.p, whose y (or the combine's rows cy)
 * the jobs wrote, in the codes' shared memory. */
template <int DT, int SDT, int R, int IB>
__global__ void __launch_bounds__(MV1_THREADS, 6) mv1c_an(const __grid_constant__ ijobs J, const __grid_constant__ an_tail T) {
    constexpr int SCB = MV1C_NP(DT) * (DT == DT_Q4 ? 16 : 32);
    __shared__ __align__(16) uint8_t sc[SCB]; /* then part [256], xs [AN_FUSE_MAXD], sbs [AN_FUSE_MAXD / 32] */
    static_assert(SCB >= 256 * 8 + AN_FUSE_MAXD * 4 + AN_FUSE_MAXD / 32 * 4, "the tail's room in the codes'");
    __shared__ int last;
    mv1c_body<DT, SDT, R, IB, 1>(J, sc);
    __threadfence(); /* this CTA's rows, device-wide, before its count */
    __syncthreads(); /* (and sc is free) */
    if (!threadIdx.x) last = atomicAdd(T.cnt, 1) == (int)gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence(); /* the other CTAs' rows, after their counts */
    an_run(T, sc);
    if (!threadIdx.x) *T.cnt = 0; /* for the next launch (stream order) */
}

/* SLUICE_CUDA_SWIDOWN=2 (cuda.h slcu_matmul_i8_swi; cuda_i8.cuh sw_tail): mv1c_i8's rows of one token's gate (job 2 s)
 * and up (job 2 s + 1) matrices of k slots, then each slot's down input made once where the down matvec's every CTA made
 * it (swi_stage): a CTA adds the rows it stored to the counter of their quad of the slot (4 blocks, 128 columns of the
 * SwiGLU: 2 x 128 rows of gate and up) after a fence (release: thread 0 after the CTA's barrier, as cooperative groups'
 * grid sync does); the CTA whose count completes the quad fences (acquire), resets the counter (for the next launch,
 * in stream order) and makes the quad: v = silu(g) u by k_swiglu's operations (canon_silu) on the floats the CTAs
 * stored (__ldcg: this launch's), a warp a block, lane = column, and its int8 form by act_quant's (quant_block; thread 0
 * the quad's s64 and s128 as act_quant's thread 0), so the row is slcu_swiglu_q's bit for bit and the down matvec reads
 * it as any int8 activation. No CTA waits for another. With T.nq 0 it is mv1c_i8 honouring J.early (and J.trig), for
 * the down launch after it (slcu_matmul_i8_early): so mv1c_i8's own instances keep their code. */
template <int DT, int SDT, int R, int IB, int MF>
__global__ void __launch_bounds__(MV1_THREADS, 6) mv1c_sw(const __grid_constant__ ijobs J, const __grid_constant__ sw_tail T) {
    __shared__ __align__(16) uint8_t sc[MV1C_NP(DT) * (DT == DT_Q4 ? 16 : 32)];
    __shared__ int lastq[R / 128 + 2], nlast;
    __shared__ float s32[4];
    mv1c_body<DT, SDT, R, IB, 1, MF, 1>(J, sc); /* J.early, J.trig honoured (the default instances' code ignores them) */
    if (!T.nq) return; /* no tail: cuda_i8.cu slcu_matmul_i8_early's down */
    const int jk = job_of<1>(J), slot = jk >> 1, I = T.I, nb = I / 32, ns = nb + nb / 2 + nb / 4;
    const int r0 = ((int)blockIdx.x - J.j[jk].tile0) * R, r1 = min(r0 + R, J.j[jk].nrows);
    __syncthreads(); /* the CTA's rows are stored */
    if (!threadIdx.x) {
        __threadfence(); /* release: the CTA's rows, device-wide, before its counts */
        int n = 0;
        for (int qd = r0 >> 7; qd * 128 < r1; qd++) {
            const int got = min(r1, qd * 128 + 128) - max(r0, qd * 128), need = 2 * min(128, I - qd * 128);
            int *c = T.cnt + slot * T.nq + qd;
            if (atomicAdd(c, got) + got == need) lastq[n++] = qd, *c = 0;
        }
        nlast = n;
        if (n) __threadfence(); /* acquire: the other CTAs' rows of these quads, after their counts */
    }
    __syncthreads();
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float *g = J.j[2 * slot].y, *u = J.j[2 * slot + 1].y;
    int8_t *qr = T.q + (size_t)slot * I, *q4r = T.q4 + (size_t)slot * I;
    float *dr = T.d + (size_t)slot * nb, *sr = T.s + (size_t)slot * ns;
    for (int i = 0; i < nlast; i++) {
        const int qd = lastq[i], b = qd * 4 + w;
        if (w < 4 && b < nb) {
            const size_t c = (size_t)b * 32 + lane;
            const float sb = quant_block(__fmul_rn(canon_silu(__ldcg(g + c)), __ldcg(u + c)), b, lane, qr, q4r, dr, sr);
            if (!lane) s32[w] = sb;
        }
        __syncthreads();
        if (!threadIdx.x) { /* act_quant's thread 0: the whole pairs' and the whole quad's sums */
            for (int h = 0; h < 2; h++)
                if (2 * qd + h < nb / 2) sr[nb + 2 * qd + h] = __fadd_rn(s32[2 * h], s32[2 * h + 1]);
            if (qd < nb / 4) sr[nb + nb / 2 + qd] = __fadd_rn(__fadd_rn(s32[0], s32[1]), __fadd_rn(s32[2], s32[3]));
        }
        __syncthreads();
    }
}

template <int DT, int SDT, int NT, int IB>
__global__ void __launch_bounds__(MV1_THREADS) mvn_i8(const __grid_constant__ ijobs J) {
    constexpr int KC = MV1_KC / NT; /* blocks a chunk: NT tokens' staging in the room of one's */
    const ijob j = resolve(J.j[find_job(J)]);
    __shared__ float sI[NT * KC * MV1_LD], sM[NT * KC * MV1_LD], sB[KC * MV1_LD], sxg[NT * KC];
    const int tid = threadIdx.x, r0 = ((int)blockIdx.x - j.tile0) * MV1_ROWS, cols = j.cols, nb = cols / 32;
    const int ng = cols / j.group, ns = nb + nb / 2 + nb / 4, nr = min(MV1_ROWS, j.nrows - r0), nt = min(NT, j.n_tok);
    const int gshift = j.group == 32 ? 0 : j.group == 64 ? 1 : 2, soff = j.group == 32 ? 0 : j.group == 64 ? nb : nb + nb / 2;
    const int bmask = j.group / 32 - 1, rb = DT == DT_Q4 ? cols / 2 : cols;
    int ar[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) ar[t] = act_row(j, t);
    /* the fold: thread (token ft, row fr) sums row fr for token ft */
    const int fr = tid % MV1_ROWS, ft = tid / MV1_ROWS, folds = fr < nr && ft < nt;
    float acc = 0.f, accb = 0.f;
    for (int kb0 = 0; kb0 < nb; kb0 += KC) {
        const int kcn = min(KC, nb - kb0), np = nr * kcn;
#pragma unroll 4
        for (int q = tid; q < np; q += MV1_THREADS) {
            const int rl = q / kcn, bl = q - rl * kcn, b = kb0 + bl, r = r0 + rl;
            const uint8_t *w = j.codes + (size_t)r * rb + (size_t)b * (DT == DT_Q4 ? 16 : 32);
            const uint4 w0 = __ldg((const uint4 *)w), w1 = DT == DT_Q8 ? __ldg((const uint4 *)w + 1) : w0;
            const size_t e = (size_t)r * ng + (size_t)(b >> gshift);
            const float sw = cv_sw(ld_sw(j.scales, SDT, e), j.scales, SDT, e);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t >= nt) break;
                const uint4 *xa = (const uint4 *)(j.xq + (size_t)ar[t] * cols + (size_t)b * 32);
                sI[(t * KC + bl) * MV1_LD + rl] = (float)dot_block<DT>(w0, w1, __ldg(xa), __ldg(xa + 1));
                sM[(t * KC + bl) * MV1_LD + rl] = __fmul_rn(sw, __ldg(j.d + (size_t)ar[t] * nb + b));
            }
            if (!(b & bmask)) sB[(bl >> gshift) * MV1_LD + rl] = !IB ? cv_sw(ld_sw(j.biases, SDT, e), j.biases, SDT, e) : zbias<DT>(sw);
        }
        for (int i = tid; i < nt * (kcn >> gshift); i += MV1_THREADS) {
            const int t = i / (kcn >> gshift), c = i - t * (kcn >> gshift);
            sxg[t * KC + c] = __ldg(j.s + (size_t)act_row(j, t) * ns + soff + (kb0 >> gshift) + c);
        }
        __syncthreads();
        if (folds)
            fold_chunk(sI + (size_t)ft * KC * MV1_LD + fr, sM + (size_t)ft * KC * MV1_LD + fr, sB + fr, MV1_LD,
                       sxg + ft * KC, kcn, bmask, gshift, acc, accb);
        __syncthreads();
    }
    if (folds) j.y[(size_t)ft * j.ldy + r0 + fr] = __fadd_rn(acc, accb);
}

/* mvn_i8's operations on the same values in the same order (bitwise its results) with a chunk's loads in flight at
 * once, as mv1c_i8: the chunk's codes, scale and bias words and the NT tokens' activation codes and block scales go
 * to shared memory by cp.async, one wait, then each thread stages its pairs' NT I_b and s_g d_b for the fold
 * (SLUICE_CUDA_MVN=2; slcu_i8_mvn_kernel). Chunks of at most 32 blocks (shared memory). */
template <int DT, int SDT, int NT, int IB>
__global__ void __launch_bounds__(MV1_THREADS) mvnc_i8(const __grid_constant__ ijobs J) {
    constexpr int BB = DT == DT_Q4 ? 16 : 32, KC = MV1_KC / NT < 32 ? MV1_KC / NT : 32, NP = MV1_ROWS * KC;
    constexpr int P = (NP + MV1_THREADS - 1) / MV1_THREADS, ssz = SDT == DT_F32 ? 4 : 2;
    const ijob j = resolve(J.j[find_job(J)]);
    __shared__ __align__(16) uint8_t sc[NP * BB];
    __shared__ unsigned ssw[NP], sbw[NP];
    __shared__ __align__(16) uint4 sx[NT * KC * 2];
    __shared__ float sd[NT * KC], sI[NT * KC * MV1_LD], sM[NT * KC * MV1_LD], sB[KC * MV1_LD], sxg[NT * KC];
    const int tid = threadIdx.x, r0 = ((int)blockIdx.x - j.tile0) * MV1_ROWS, cols = j.cols, nb = cols / 32;
    const int ng = cols / j.group, ns = nb + nb / 2 + nb / 4, nr = min(MV1_ROWS, j.nrows - r0), nt = min(NT, j.n_tok);
    const int gshift = j.group == 32 ? 0 : j.group == 64 ? 1 : 2, soff = j.group == 32 ? 0 : j.group == 64 ? nb : nb + nb / 2;
    const int bmask = j.group / 32 - 1, rb = DT == DT_Q4 ? cols / 2 : cols;
    const int fr = tid % MV1_ROWS, ft = tid / MV1_ROWS, folds = fr < nr && ft < nt;
    float acc = 0.f, accb = 0.f;
    for (int kb0 = 0; kb0 < nb; kb0 += KC) {
        const int kcn = min(KC, nb - kb0), np = nr * kcn;
#pragma unroll
        for (int k = 0; k < P; k++) {
            const int q = tid + k * MV1_THREADS, rl = q / kcn, b = kb0 + q - rl * kcn, r = r0 + rl;
            if (q < np) {
                const uint8_t *w = j.codes + (size_t)r * rb + (size_t)b * BB;
                cp16(sc + (size_t)q * BB, w, true);
                if (DT == DT_Q8) cp16(sc + (size_t)q * BB + 16, w + 16, true);
                const size_t e = (size_t)r * ng + (size_t)(b >> gshift);
                cp4(&ssw[q], (const void *)(((uintptr_t)j.scales + e * ssz) & ~(uintptr_t)3));
                if (!(b & bmask) && !IB) cp4(&sbw[q], (const void *)(((uintptr_t)j.biases + e * ssz) & ~(uintptr_t)3));
            }
        }
        for (int i = tid; i < nt * 2 * kcn; i += MV1_THREADS) {
            const int t = i / (2 * kcn), c = i - t * 2 * kcn;
            cp16(&sx[t * 2 * KC + c], j.xq + (size_t)act_row(j, t) * cols + (size_t)kb0 * 32 + (size_t)c * 16, true);
        }
        for (int i = tid; i < nt * kcn; i += MV1_THREADS) {
            const int t = i / kcn, c = i - t * kcn;
            cp4(&sd[t * KC + c], j.d + (size_t)act_row(j, t) * nb + kb0 + c);
        }
        for (int i = tid; i < nt * (kcn >> gshift); i += MV1_THREADS) {
            const int t = i / (kcn >> gshift), c = i - t * (kcn >> gshift);
            cp4(&sxg[t * KC + c], j.s + (size_t)act_row(j, t) * ns + soff + (kb0 >> gshift) + c);
        }
        asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
        __syncthreads();
#pragma unroll
        for (int k = 0; k < P; k++) {
            const int q = tid + k * MV1_THREADS, rl = q / kcn, bl = q - rl * kcn, b = kb0 + bl, r = r0 + rl;
            if (q < np) {
                const size_t e = (size_t)r * ng + (size_t)(b >> gshift);
                const uint4 *w = (const uint4 *)(sc + (size_t)q * BB);
                const uint4 w0 = w[0], w1 = DT == DT_Q8 ? w[1] : w[0];
                const float sw = cv_sw(ssw[q], j.scales, SDT, e);
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    if (t >= nt) break;
                    sI[(t * KC + bl) * MV1_LD + rl] = (float)dot_block<DT>(w0, w1, sx[t * 2 * KC + 2 * bl], sx[t * 2 * KC + 2 * bl + 1]);
                    sM[(t * KC + bl) * MV1_LD + rl] = __fmul_rn(sw, sd[t * KC + bl]);
                }
                if (!(b & bmask)) sB[(bl >> gshift) * MV1_LD + rl] = !IB ? cv_sw(sbw[q], j.biases, SDT, e) : zbias<DT>(sw);
            }
        }
        __syncthreads();
        if (folds)
            fold_chunk(sI + (size_t)ft * KC * MV1_LD + fr, sM + (size_t)ft * KC * MV1_LD + fr, sB + fr, MV1_LD,
                       sxg + ft * KC, kcn, bmask, gshift, acc, accb);
        __syncthreads();
    }
    if (folds) j.y[(size_t)ft * j.ldy + r0 + fr] = __fadd_rn(acc, accb);
}

/* Rows a CTA of the one-token matvec takes: SLUICE_CUDA_MVR's 4, 8, 16 or 32 (or slcu_i8_mv_rows for tests), else
 * "auto": the fewest of 4 .. 32 that keep the launch within one wave of CTAs on an H100, so a small matrix
 * (the o projection: 2048 rows) spreads over every SM and a large group (8 experts' gate and up: 12288 rows) runs in
 * one wave of CTAs instead of two; a launch of more rows (the LM head) keeps 16. */
static int mv1_kernel; /* 0 unread; 1 mv1_i8, 2 mv1b_i8, 3 mv1c_i8, 4 cuda_mv1d.cu mv1d_i8, 6 mv1c_i8 recording (FI = 2),
                        * 7 cuda_mv1p.cu mv1p_i8 */
extern "C" void slcu_i8_mv1_kernel(int v) { mv1_kernel = (v >= 1 && v <= 4) || v == 6 || v == 7 ? v : 0; }
static int mv1_version(void) {
    if (!mv1_kernel) {
        const char *e = getenv("SLUICE_CUDA_MV1");
        mv1_kernel = e && ((e[0] >= '1' && e[0] <= '4') || e[0] == '6' || e[0] == '7') && !e[1] ? e[0] - '0' : 3; /* mv1c_i8 unless SLUICE_CUDA_MV1=1|2|4|6|7 */
    }
    return mv1_kernel;
}
#define MV_WAVE 640
static int mv_rows_mode = -2; /* -2 unread; -1 auto; else the rows */
extern "C" void slcu_i8_mv_rows(int rows) { mv_rows_mode = rows == -1 || rows == 4 || rows == 8 || rows == 16 || rows == 32 ? rows : -2; }

int mv_swiglu_ok(void) { return mv1_version() >= 3; } /* mv1c_i8 and mv1d_i8 make a SwiGLU input (swi_stage) */
extern "C" int slcu_i8_swiglu_fused(void) { return mv_swiglu_ok(); }

int mv_tile_rows(const ijobs *J, int max_tok) {
    if (max_tok > 1) return MV1_ROWS;
    if (mv_rows_mode == -2) {
        const char *e = getenv("SLUICE_CUDA_MVR");
        const int v = e ? atoi(e) : 0;
        mv_rows_mode = v == 4 || v == 8 || v == 16 || v == 32 ? v : -1; /* auto unless SLUICE_CUDA_MVR=4|8|16|32 */
    }
    if (mv_rows_mode > 0) return mv_rows_mode;
    if (mv1_version() == 4) return mv1d_tile_rows(J);
    if (mv1_version() == 7) return mv1p_tile_rows(J);
    const int wave = mv1_version() == 3 || mv1_version() == 6 ? 6 * 132 : mv1_version() == 2 ? 2 * 132 : MV_WAVE; /* CTAs an H100 holds */
    for (int r = 4; r <= 32; r *= 2) {
        int tiles = 0;
        for (int i = 0; i < J->n; i++) tiles += (J->j[i].nrows + r - 1) / r;
        if (tiles <= wave) return r;
    }
    return MV1_ROWS;
}


/* mv1c_i8 (and its recording form) with MF = 2, the row-major fold (mv1c_body), by default since call S (docs/CUDA.md:
 * bitwise on an H100, a layer's matvecs 35.3 -> 30.5 us); SLUICE_CUDA_MVFOLD=1 (or slcu_i8_mvfold(1)) the fold as before.
 * The same bits either way. */
static int mvfold_mode; /* 0 unread */
extern "C" void slcu_i8_mvfold(int v) { mvfold_mode = v == 1 || v == 2 ? v : 0; }
static int mvfold(void) {
    if (!mvfold_mode) {
        const char *e = getenv("SLUICE_CUDA_MVFOLD");
        mvfold_mode = e && e[0] == '1' && !e[1] ? 1 : 2;
    }
    return mvfold_mode;
}

/* Overlapped launches (docs/CUDA.md): mv1c_i8 is launched to overlap the kernel before it (pdl_wait: its weights'
 * loads go out while that kernel runs; cuda_pdl.cuh); the same bits. Call J timed it (a resident step 7-9% shorter
 * on an H100); on unless SLUICE_CUDA_PDL=0 (cuda_pdl.cu pdl_enabled: 2, the matvecs alone), and never after the process's
 * first copy-stream copy nor with recorded steps (backend_cuda.c: the two ways call D's model test failed). */
/* SLUICE_CUDA_RESOLVE=2 (cuda.h slcu_i8_resolve; read when the backend opens, else at the first launch): the default
 * one-token launches (mv1c_i8, MF = 2) whose jobs all have as many tiles (the experts' gate/up and down, o, the LM head)
 * find their job from the grid (mv1c_i8 JR = 1); =3 as 2, and where the launch is one wave of CTAs its CTAs trigger the
 * launch after it once they have waited (J.trig: its CTAs become resident as these end and do their prologue, where
 * mv1c_i8 lets it start only when its last CTA exits; downswi34's trigger saved 2.6 us a pair, docs/CUDA.md); 1 (unset)
 * find_job as before. The same bits in each: the trigger is after pdl_wait (cuda_pdl.cuh's rule). */
static int resolve_mode; /* 0 unread */
static int resolve_n;    /* launches that took JR = 1 (tests: slcu_i8_resolve_launches) */
extern "C" void slcu_i8_resolve(int mode) { resolve_mode = mode >= 1 && mode <= 3 ? mode : 0; }
extern "C" int slcu_i8_resolve_launches(void) { return resolve_n; }
static int resolve_on(void) {
    if (!resolve_mode) {
        const char *e = getenv("SLUICE_CUDA_RESOLVE");
        resolve_mode = e && (e[0] == '2' || e[0] == '3') && !e[1] ? e[0] - '0' : 1;
    }
    return resolve_mode >= 2;
}
static int mv_wave(void) { /* CTAs of mv1c_i8 the device holds at once (its launch bounds: 6 an SM) */
    static int sms;
    int dev = 0;
    if (!sms && (cudaGetDevice(&dev) || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) || sms <= 0))
        sms = 132, (void)cudaGetLastError();
    return 6 * sms;
}
/* the tiles of every job of J at R rows a CTA when all have as many and tile0 is jk times that, else 0 */
static int jobs_uni(const ijobs *J, int R, int tiles) {
    const int u = (J->j[0].nrows + R - 1) / R;
    for (int i = 0; i < J->n; i++)
        if ((J->j[i].nrows + R - 1) / R != u || J->j[i].tile0 != i * u) return 0;
    return u * J->n == tiles ? u : 0;
}

template <int DT, int SDT, int R>
static void mv1c_launch(int tiles, const ijobs *J) {
    const int u = mvfold() == 2 && mv1_version() == 3 && resolve_on() ? jobs_uni(J, R, tiles) : 0;
    if (u) {
        void (*kr)(ijobs) = J->ib ? mv1c_i8<DT, SDT, R, 1, 1, 2, 1> : mv1c_i8<DT, SDT, R, 0, 1, 2, 1>;
        resolve_n++;
        if (resolve_mode == 3 && pdl_enabled() && tiles <= mv_wave()) {
            ijobs T = *J;
            T.trig = 1;
            pdl_launch_on(1, kr, dim3((unsigned)u, (unsigned)J->n), dim3(MV1_THREADS), 0, SLS, T);
        } else {
            pdl_launch_on(pdl_enabled(), kr, dim3((unsigned)u, (unsigned)J->n), dim3(MV1_THREADS), 0, SLS, *J);
        }
        return;
    }
    void (*k)(ijobs) = mvfold() == 2 ? (mv1_version() == 6 ? (J->ib ? mv1c_i8<DT, SDT, R, 1, 2, 2> : mv1c_i8<DT, SDT, R, 0, 2, 2>)
                                                           : (J->ib ? mv1c_i8<DT, SDT, R, 1, 1, 2> : mv1c_i8<DT, SDT, R, 0, 1, 2>))
                       : mv1_version() == 6 ? (J->ib ? mv1c_i8<DT, SDT, R, 1, 2> : mv1c_i8<DT, SDT, R, 0, 2>)
                                            : (J->ib ? mv1c_i8<DT, SDT, R, 1, 1> : mv1c_i8<DT, SDT, R, 0, 1>);
    pdl_launch_on(pdl_enabled(), k, dim3((unsigned)tiles), dim3(MV1_THREADS), 0, SLS, *J);
}

template <int DT, int SDT, int R>
static void mv_r(int tiles, const ijobs *J) { /* mv1d_i8's launches that it cannot take run mv1c_i8 */
    if (mv1_version() >= 3) mv1c_launch<DT, SDT, R>(tiles, J);
    else if (mv1_version() == 2) (J->ib ? mv1b_i8<DT, SDT, R, 1> : mv1b_i8<DT, SDT, R, 0>)<<<tiles, MV1_THREADS, 0, SLS>>>(*J);
    else (J->ib ? mv1_i8<DT, SDT, R, 1> : mv1_i8<DT, SDT, R, 0>)<<<tiles, MV1_THREADS, 0, SLS>>>(*J);
}

template <int DT, int SDT>
static void mv_one(int rows, int tiles, const ijobs *J) {
    if (rows == 4) mv_r<DT, SDT, 4>(tiles, J);
    else if (rows == 8) mv_r<DT, SDT, 8>(tiles, J);
    else if (rows == 32) mv_r<DT, SDT, 32>(tiles, J);
    else mv_r<DT, SDT, MV1_ROWS>(tiles, J);
}

static int mvn_kernel; /* 0 unread; 1 mvn_i8, 2 mvnc_i8, 3 cuda_i8.cu mv_i8 (not here: mv_takes), 4 cuda_mv1d.cu mvnd_i8 */
extern "C" void slcu_i8_mvn_kernel(int v) { mvn_kernel = v >= 1 && v <= 4 ? v : 0; }
static int mvn_version(void) {
    if (!mvn_kernel) {
        const char *e = getenv("SLUICE_CUDA_MVN");
        mvn_kernel = e && e[0] >= '2' && e[0] <= '4' && !e[1] ? e[0] - '0' : 1;
    }
    return mvn_kernel;
}
/* SLUICE_CUDA_MVN=3 leaves 2-8 tokens to cuda_i8.cu mv_i8: a thread a row of 32 (its loads staged by cp.async), so each
 * activation load is one address for the warp where mvn_i8's threads each read their own block's (a token's 32 bytes
 * per 16 bytes of q4 codes); the same bits (cuda.h's order), to be timed against mvn_i8 at 8 streams. */
int mv_takes(int max_tok) { return max_tok <= 1 || mvn_version() != 3; }

template <int DT, int SDT, int NT>
static void mv_nt(int tiles, const ijobs *J) {
    if (mvn_version() == 2) (J->ib ? mvnc_i8<DT, SDT, NT, 1> : mvnc_i8<DT, SDT, NT, 0>)<<<tiles, MV1_THREADS, 0, SLS>>>(*J);
    else (J->ib ? mvn_i8<DT, SDT, NT, 1> : mvn_i8<DT, SDT, NT, 0>)<<<tiles, MV1_THREADS, 0, SLS>>>(*J);
}

template <int DT, int SDT>
static void mv_n(int max_tok, int tiles, const ijobs *J) {
    if (max_tok <= 2) mv_nt<DT, SDT, 2>(tiles, J);
    else if (max_tok <= 4) mv_nt<DT, SDT, 4>(tiles, J);
    else mv_nt<DT, SDT, 8>(tiles, J);
}

template <int DT>
static void mv_dt(int sdt, int max_tok, int rows, int tiles, const ijobs *J) {
    if (max_tok <= 1) {
        if (sdt == DT_F32) mv_one<DT, DT_F32>(rows, tiles, J);
        else if (sdt == DT_BF16) mv_one<DT, DT_BF16>(rows, tiles, J);
        else mv_one<DT, DT_F16>(rows, tiles, J);
    } else {
        if (sdt == DT_F32) mv_n<DT, DT_F32>(max_tok, tiles, J);
        else if (sdt == DT_BF16) mv_n<DT, DT_BF16>(max_tok, tiles, J);
        else mv_n<DT, DT_F16>(max_tok, tiles, J);
    }
}

cudaError_t mv_launch(int dt, int sdt, int max_tok, int rows, int tiles, const ijobs *J) {
    if (max_tok <= 1 && mv1_version() == 4 && mv1d_launch(dt, sdt, rows, tiles, J, pdl_enabled())) return cudaGetLastError();
    if (max_tok <= 1 && mv1_version() == 7 && mv1p_launch(dt, sdt, rows, tiles, J, pdl_enabled())) return cudaGetLastError();
    if (max_tok > 1 && mvn_version() == 4 && mvnd_launch(dt, sdt, max_tok, rows, tiles, J)) return cudaGetLastError();
    if (dt == DT_Q4) mv_dt<DT_Q4>(sdt, max_tok, rows, tiles, J);
    else mv_dt<DT_Q8>(sdt, max_tok, rows, tiles, J);
    return cudaGetLastError();
}

/* mv1c_nr's launch (cuda_i8.cu slcu_matmul_i8_nr): J's tiles of rows as mv_launch would make them (mv1c_i8's) */
template <int DT, int SDT>
static void nr_one(int rows, int tiles, const ijobs *J, const nr_tail *T) {
    if (rows == 4) (J->ib ? mv1c_nr<DT, SDT, 4, 1> : mv1c_nr<DT, SDT, 4, 0>)<<<tiles, MV1_THREADS, 0, SLS>>>(*J, *T);
    else if (rows == 8) (J->ib ? mv1c_nr<DT, SDT, 8, 1> : mv1c_nr<DT, SDT, 8, 0>)<<<tiles, MV1_THREADS, 0, SLS>>>(*J, *T);
    else if (rows == 32) (J->ib ? mv1c_nr<DT, SDT, 32, 1> : mv1c_nr<DT, SDT, 32, 0>)<<<tiles, MV1_THREADS, 0, SLS>>>(*J, *T);
    else (J->ib ? mv1c_nr<DT, SDT, MV1_ROWS, 1> : mv1c_nr<DT, SDT, MV1_ROWS, 0>)<<<tiles, MV1_THREADS, 0, SLS>>>(*J, *T);
}

cudaError_t mv_nr_launch(int dt, int sdt, int rows, int tiles, const ijobs *J, const nr_tail *T) {
#define NR(D) (sdt == DT_F32 ? nr_one<D, DT_F32>(rows, tiles, J, T) : sdt == DT_BF16 ? nr_one<D, DT_BF16>(rows, tiles, J, T) \
                                                                   : nr_one<D, DT_F16>(rows, tiles, J, T))
    if (dt == DT_Q4) NR(DT_Q4);
    else NR(DT_Q8);
#undef NR
    return cudaGetLastError();
}

/* mv1c_an's launch (cuda_i8.cu slcu_matmul_i8_an), tiled as mv_launch would */
template <int DT, int SDT>
static void an_one(int rows, int tiles, const ijobs *J, const an_tail *T) {
    if (rows == 4) (J->ib ? mv1c_an<DT, SDT, 4, 1> : mv1c_an<DT, SDT, 4, 0>)<<<tiles, MV1_THREADS, 0, SLS>>>(*J, *T);
    else if (rows == 8) (J->ib ? mv1c_an<DT, SDT, 8, 1> : mv1c_an<DT, SDT, 8, 0>)<<<tiles, MV1_THREADS, 0, SLS>>>(*J, *T);
    else if (rows == 32) (J->ib ? mv1c_an<DT, SDT, 32, 1> : mv1c_an<DT, SDT, 32, 0>)<<<tiles, MV1_THREADS, 0, SLS>>>(*J, *T);
    else (J->ib ? mv1c_an<DT, SDT, MV1_ROWS, 1> : mv1c_an<DT, SDT, MV1_ROWS, 0>)<<<tiles, MV1_THREADS, 0, SLS>>>(*J, *T);
}

cudaError_t mv_an_launch(int dt, int sdt, int rows, int tiles, const ijobs *J, const an_tail *T) {
#define AN(D) (sdt == DT_F32 ? an_one<D, DT_F32>(rows, tiles, J, T) : sdt == DT_BF16 ? an_one<D, DT_BF16>(rows, tiles, J, T) \
                                                                   : an_one<D, DT_F16>(rows, tiles, J, T))
    if (dt == DT_Q4) AN(DT_Q4);
    else AN(DT_Q8);
#undef AN
    return cudaGetLastError();
}

int mv_nr_ok(void) { return mv1_version() == 3 || mv1_version() == 6; } /* mv1c_i8 is the one-token kernel (mv1d_i8 has no tails) */

/* mv1c_sw's launch (cuda_i8.cu slcu_matmul_i8_swi), tiled as mv_launch would; the fold SLUICE_CUDA_MVFOLD's, overlapped
 * as mv1c_i8 (pdl_enabled) */
template <int DT, int SDT, int R>
static void sw_one(int tiles, const ijobs *J, const sw_tail *T) {
    void (*k)(ijobs, sw_tail) = mvfold() == 2 ? (J->ib ? mv1c_sw<DT, SDT, R, 1, 2> : mv1c_sw<DT, SDT, R, 0, 2>)
                                              : (J->ib ? mv1c_sw<DT, SDT, R, 1, 1> : mv1c_sw<DT, SDT, R, 0, 1>);
    pdl_launch_on(pdl_enabled(), k, dim3((unsigned)tiles), dim3(MV1_THREADS), 0, SLS, *J, *T);
}
template <int DT, int SDT>
static void sw_rows(int rows, int tiles, const ijobs *J, const sw_tail *T) {
    if (rows == 4) sw_one<DT, SDT, 4>(tiles, J, T);
    else if (rows == 8) sw_one<DT, SDT, 8>(tiles, J, T);
    else if (rows == 32) sw_one<DT, SDT, 32>(tiles, J, T);
    else sw_one<DT, SDT, MV1_ROWS>(tiles, J, T);
}
cudaError_t mv_sw_launch(int dt, int sdt, int rows, int tiles, const ijobs *J, const sw_tail *T) {
#define SW(D) (sdt == DT_F32 ? sw_rows<D, DT_F32>(rows, tiles, J, T) : sdt == DT_BF16 ? sw_rows<D, DT_BF16>(rows, tiles, J, T) \
                                                                    : sw_rows<D, DT_F16>(rows, tiles, J, T))
    if (dt == DT_Q4) SW(DT_Q4);
    else SW(DT_Q8);
#undef SW
    return cudaGetLastError();
}
int mv_sw_ok(void) { return mv_nr_ok(); }

/* mv1c_sw's quad counters: zero when the module loads, and each launch's last CTA of a quad puts its counter back */
#define SW_CNT 4096
__device__ int sw_cnt[SW_CNT] = {0};
int *mv_sw_cnt(int n) {
    static int *p;
    if (!p && cudaGetSymbolAddress((void **)&p, sw_cnt) != cudaSuccess) p = NULL, (void)cudaGetLastError();
    return n >= 1 && n <= SW_CNT ? p : NULL;
}

/* cuda.h: SLUICE_CUDA_MV1=6's records (mvp_rec) */
extern "C" int slcu_mvprof_reset(void) {
    const unsigned z = 0;
    return cudaMemcpyToSymbol(mvp_n, &z, sizeof z) == cudaSuccess ? 0 : -1;
}
extern "C" int slcu_mvprof_read(unsigned long long *out, int max, int *clock_khz) {
    unsigned n = 0;
    if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpyFromSymbol(&n, mvp_n, sizeof n) != cudaSuccess) return -1;
    if (n > MVP_MAX) n = MVP_MAX;
    if ((int)n > max) n = (unsigned)max;
    if (n && cudaMemcpyFromSymbol(out, mvp_rec, (size_t)n * MVP_W * sizeof *out) != cudaSuccess) return -1;
    int dev = 0;
    *clock_khz = 0;
    if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(clock_khz, cudaDevAttrClockRate, dev);
    return (int)n;
}
