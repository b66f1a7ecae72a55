/*
 * cuda_gemm.cuh — the int8 GEMM tiles of cuda_i8.cu (included there, after its job table and helpers: ijob, act_row,
 * ld_sw / raw_sw / cv_sw, cp4 / cp16). Every tile computes cuda.h's canonical order per output: per 32-column block b
 * in order, I_b exact from mma.sync m16n8k32 (u8 codes x s8 activations), acc = fma((float)I_b, s_g * d_b, acc); per
 * group accb = fma(bias_j, s_j, accb); y = acc + accb. So gemm_tile, gemm_tile2 and gemm_tile3 give the same bits,
 * and the same as the matvecs.
 */
#define GM 64 /* rows per CTA of gemm_i8 */
#define GN 64 /* tokens per CTA of gemm_i8 */

__device__ __forceinline__ void mma_u8s8(int *c, const unsigned *a, const unsigned *b) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0), "r"(0), "r"(0), "r"(0));
}

/* One block's operands of a GEMM thread: A fragments of its 4 rows, B of its 4 token columns, the raw scale
 * and bias words of its rows. */
struct gstage {
    unsigned a[2][4], b[4][2], s[2][2], bi[2][2];
};
template <int DT>
__device__ __forceinline__ void gemm_load(const ijob &j, int b, int gshift, const uint8_t *const (&pa)[2][2],
                                          const int8_t *const (&pb)[4], const size_t (&sb)[2][2], gstage &st) {
#pragma unroll
    for (int mi = 0; mi < 2; mi++) {
        if (DT == DT_Q4) {
            const unsigned u0 = __ldg((const unsigned *)(pa[mi][0] + (size_t)b * 16));
            const unsigned u1 = __ldg((const unsigned *)(pa[mi][1] + (size_t)b * 16));
            const unsigned M = 0x0f0f0f0fu;
            st.a[mi][0] = u0 & M, st.a[mi][1] = u1 & M, st.a[mi][2] = (u0 >> 4) & M, st.a[mi][3] = (u1 >> 4) & M;
        } else {
            const uint2 u0 = __ldg((const uint2 *)(pa[mi][0] + (size_t)b * 32));
            const uint2 u1 = __ldg((const uint2 *)(pa[mi][1] + (size_t)b * 32));
            st.a[mi][0] = u0.x, st.a[mi][1] = u1.x, st.a[mi][2] = u0.y, st.a[mi][3] = u1.y;
        }
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            st.s[mi][hh] = ld_sw(j.scales, j.sdt, sb[mi][hh] + (size_t)(b >> gshift));
            st.bi[mi][hh] = ld_sw(j.biases, j.sdt, sb[mi][hh] + (size_t)(b >> gshift));
        }
    }
#pragma unroll
    for (int ni = 0; ni < 4; ni++) {
        const uint2 v = __ldg((const uint2 *)(pb[ni] + (size_t)b * 32));
        st.b[ni][0] = v.x, st.b[ni][1] = v.y;
    }
}

/* int -> float exactly for |i| < 2^22 (a block's I_b is at most 32 * 255 * 127 < 2^20): 1.5 * 2^23 + i is
 * representable, and the subtraction is exact. An integer add and an FADD instead of I2F, which sm_90 runs at a
 * quarter of the FP32 rate; the value is (float)i bit for bit. */
__device__ __forceinline__ float i2f_exact(int i) { return __fsub_rn(__int_as_float(0x4B400000 + i), 12582912.0f); }

/* y's cells of this thread's fragments (row g / g + 8 of each m16, tokens 2 tig, 2 tig + 1 of each n8): acc + accb. */
__device__ __forceinline__ void tile_store(const ijob &j, int wr, int wt, int g, int tig, const float (&acc)[2][4][4],
                                           const float (&accb)[2][4][4]) {
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int r = wr + mi * 16 + (q >> 1) * 8 + g, t = wt + ni * 8 + 2 * tig + (q & 1);
                if (r < j.nrows && t < j.n_tok)
                    j.y[(size_t)(j.yrows ? __ldg(j.yrows + t) : t) * j.ldy + r] = __fadd_rn(acc[mi][ni][q], accb[mi][ni][q]);
            }
}

/* The output tile of 4 warps, each 32 rows (2 m16) x 32 tokens (4 n8): WN warps along the tokens, 4 / WN
 * along the rows (WN 2: 64 x 64, WN 1: 128 rows x 32 tokens, the shape of a MoE prefill's expert segments).
 * rt, tt: the row and token tile. */
template <int DT, int SDT, int WN>
__device__ __forceinline__ void gemm_tile(ijob j, int rt, int tt) {
    j.sdt = SDT; /* known here: the conversions below need no branch */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    const int wr = rt * (128 / WN) + (warp / WN) * 32, wt = tt * (32 * WN) + (warp % WN) * 32;
    const int cols = j.cols, nb = cols / 32, ng = cols / j.group, ns = nb + nb / 2 + nb / 4;
    const int rb = DT == DT_Q4 ? cols / 2 : cols;
    const int gshift = j.group == 32 ? 0 : j.group == 64 ? 1 : 2, soff = j.group == 32 ? 0 : j.group == 64 ? nb : nb + nb / 2;
    const int bmask = j.group / 32 - 1;
    if (wr >= j.nrows || wt >= j.n_tok) return; /* a warp past the matrix or the segment: nothing to store */
    const uint8_t *pa[2][2];
    size_t sb[2][2];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            int r = wr + mi * 16 + hh * 8 + g;
            r = r < j.nrows ? r : j.nrows - 1;
            pa[mi][hh] = j.codes + (size_t)r * rb + (DT == DT_Q4 ? 4 : 8) * tig;
            sb[mi][hh] = (size_t)r * ng;
        }
    const int8_t *pb[4];
    int ca[4][2]; /* the activation rows of the outputs' tokens */
#pragma unroll
    for (int ni = 0; ni < 4; ni++) {
        pb[ni] = j.xq + (size_t)act_row(j, wt + ni * 8 + g) * cols + 8 * tig;
        ca[ni][0] = act_row(j, wt + ni * 8 + 2 * tig);
        ca[ni][1] = act_row(j, wt + ni * 8 + 2 * tig + 1);
    }
    float acc[2][4][4], accb[2][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[mi][ni][c] = 0.f, accb[mi][ni][c] = 0.f;
    gstage cur, nxt;
    gemm_load<DT>(j, 0, gshift, pa, pb, sb, cur);
#pragma unroll 2
    for (int b = 0; b < nb; b++) {
        gemm_load<DT>(j, b + 1 < nb ? b + 1 : b, gshift, pa, pb, sb, nxt); /* the next block's, in flight meanwhile */
        const bool first = !(b & bmask); /* a group's first block: its biases */
        float sw[2][2], bw[2][2], dd[4][2], sg[4][2];
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const size_t gi = sb[mi][hh] + (size_t)(b >> gshift);
                sw[mi][hh] = cv_sw(cur.s[mi][hh], j.scales, j.sdt, gi), bw[mi][hh] = cv_sw(cur.bi[mi][hh], j.biases, j.sdt, gi);
            }
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                dd[ni][e] = __ldg(j.d + (size_t)ca[ni][e] * nb + b);
                sg[ni][e] = __ldg(j.s + (size_t)ca[ni][e] * ns + soff + (b >> gshift));
            }
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                int c[4];
                mma_u8s8(c, cur.a[mi], cur.b[ni]);
#pragma unroll
                for (int q = 0; q < 4; q++) { /* c0, c1: row g, tokens 2 tig, 2 tig + 1; c2, c3: row g + 8 */
                    acc[mi][ni][q] = __fmaf_rn(i2f_exact(c[q]), __fmul_rn(sw[mi][q >> 1], dd[ni][q & 1]), acc[mi][ni][q]);
                    if (first) accb[mi][ni][q] = __fmaf_rn(bw[mi][q >> 1], sg[ni][q & 1], accb[mi][ni][q]);
                }
            }
        cur = nxt;
    }
    tile_store(j, wr, wt, g, tig, acc, accb);
}

/* gemm_tile's arithmetic on operands staged in shared memory: every block's codes (the tile's rows and
 * tokens), the raw scale and bias words of its rows and the d and s of its tokens travel by cp.async,
 * PSTAGES blocks ahead, so that each warp's loads are shared-memory reads and many blocks' global loads are in
 * flight at once (gemm_tile keeps one block ahead in registers: latency-bound at 254 registers). The same
 * fragments, the same per-block fold: bitwise gemm_tile. */
#define PSTAGES 4
template <int R, int T, int BB>
struct pstage {
    uint8_t a[R][BB]; /* the block's codes of each row of the tile */
    int8_t b[T][32];  /* its activation codes of each token */
    unsigned sw[R], bw[R];
    float d[T], s[T];
};

/* One staged block into a warp's 32 x 32 accumulators: gemm_tile's fragments and fold, from shared memory. par: the
 * 16-bit halves of the rows' scale / bias words at block 0 (gemm_tile2), flip: (b >> gshift) & 1, first: a group's
 * first block (its biases). */
template <int DT, int SDT, int R, int T, int BB>
__device__ __forceinline__ void tile2_fold(const pstage<R, T, BB> &P, int lr0, int lt0, int g, int tig, unsigned par,
                                       unsigned flip, bool first, float (&acc)[2][4][4], float (&accb)[2][4][4]) {
    unsigned a[2][4], bf[4][2];
    float sw[2][2], bw[2][2], dd[4][2], sg[4][2];
#pragma unroll
    for (int mi = 0; mi < 2; mi++) {
        const int l0 = lr0 + mi * 16 + g;
        if (DT == DT_Q4) {
            const unsigned u0 = *(const unsigned *)&P.a[l0][4 * tig], u1 = *(const unsigned *)&P.a[l0 + 8][4 * tig];
            const unsigned M = 0x0f0f0f0fu;
            a[mi][0] = u0 & M, a[mi][1] = u1 & M, a[mi][2] = (u0 >> 4) & M, a[mi][3] = (u1 >> 4) & M;
        } else {
            const uint2 u0 = *(const uint2 *)&P.a[l0][8 * tig], u1 = *(const uint2 *)&P.a[l0 + 8][8 * tig];
            a[mi][0] = u0.x, a[mi][1] = u1.x, a[mi][2] = u0.y, a[mi][3] = u1.y;
        }
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const unsigned pb = par >> (2 * (2 * mi + hh));
            sw[mi][hh] = raw_sw(P.sw[l0 + hh * 8], (pb ^ flip) & 1u, SDT), bw[mi][hh] = raw_sw(P.bw[l0 + hh * 8], ((pb >> 1) ^ flip) & 1u, SDT);
        }
    }
#pragma unroll
    for (int ni = 0; ni < 4; ni++) {
        const uint2 v = *(const uint2 *)&P.b[lt0 + ni * 8 + g][8 * tig];
        bf[ni][0] = v.x, bf[ni][1] = v.y;
        const float2 d2 = *(const float2 *)&P.d[lt0 + ni * 8 + 2 * tig], s2 = *(const float2 *)&P.s[lt0 + ni * 8 + 2 * tig];
        dd[ni][0] = d2.x, dd[ni][1] = d2.y, sg[ni][0] = s2.x, sg[ni][1] = s2.y;
    }
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) {
            int c[4];
            mma_u8s8(c, a[mi], bf[ni]);
#pragma unroll
            for (int q = 0; q < 4; q++) {
                acc[mi][ni][q] = __fmaf_rn(i2f_exact(c[q]), __fmul_rn(sw[mi][q >> 1], dd[ni][q & 1]), acc[mi][ni][q]);
                if (first) accb[mi][ni][q] = __fmaf_rn(bw[mi][q >> 1], sg[ni][q & 1], accb[mi][ni][q]);
            }
        }
}

template <int DT, int SDT, int WN>
__device__ __forceinline__ void gemm_tile2(ijob j, int rt, int tt) {
    constexpr int R = 128 / WN, T = 32 * WN, BB = DT == DT_Q4 ? 16 : 32, AC = R * BB / 16; /* A's 16-byte chunks */
    __shared__ __align__(16) pstage<R, T, BB> st[PSTAGES];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tig = lane & 3;
    const int r0 = rt * R, t0 = tt * T, lr0 = (warp / WN) * 32, lt0 = (warp % WN) * 32;
    const int cols = j.cols, nb = cols / 32, ng = cols / j.group, ns = nb + nb / 2 + nb / 4, rb = DT == DT_Q4 ? cols / 2 : cols;
    const int gshift = j.group == 32 ? 0 : j.group == 64 ? 1 : 2, soff = j.group == 32 ? 0 : j.group == 64 ? nb : nb + nb / 2;
    const int bmask = j.group / 32 - 1;
    constexpr int ssz = SDT == DT_F32 ? 4 : 2;
    /* this thread's copies: A chunks tid and tid + 128; B chunk tid (< 2T); d (tid < T) or s (T <= tid < 2T) of
     * token tid % T; the scale (tid < R) or bias (R <= tid < 2R, WN 2; both, WN 1) word of row tid % R */
    const uint8_t *asrc[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int q = tid + 128 * h, i = q / (BB / 16) % R;
        asrc[h] = j.codes + (size_t)min(r0 + i, j.nrows - 1) * rb + (q % (BB / 16)) * 16;
    }
    const int brow = act_row(j, t0 + (tid >> 1) % T), trow = act_row(j, t0 + tid % T);
    const int8_t *bsrc = j.xq + (size_t)brow * cols + (tid & 1) * 16;
    const size_t srow = (size_t)min(r0 + tid % R, j.nrows - 1) * ng;
    auto issue = [&](int b) {
        if (b < nb) {
            pstage<R, T, BB> &P = st[b % PSTAGES];
#pragma unroll
            for (int h = 0; h < 2; h++)
                if (tid + 128 * h < AC) cp16(&P.a[0][0] + (size_t)(tid + 128 * h) * 16, asrc[h] + (size_t)b * BB, true);
            if (tid < 2 * T) cp16(&P.b[0][0] + (size_t)tid * 16, bsrc + (size_t)b * 32, true);
            if (tid < T) cp4(&P.d[tid], j.d + (size_t)trow * nb + b);
            else if (tid < 2 * T) cp4(&P.s[tid - T], j.s + (size_t)trow * ns + soff + (b >> gshift));
            const size_t gi = srow + (size_t)(b >> gshift);
            const uintptr_t sa = ((uintptr_t)j.scales + gi * ssz) & ~(uintptr_t)3, ba = ((uintptr_t)j.biases + gi * ssz) & ~(uintptr_t)3;
            if (WN == 1) cp4(&P.sw[tid], (const void *)sa), cp4(&P.bw[tid], (const void *)ba);
            else if (tid < R) cp4(&P.sw[tid], (const void *)sa);
            else cp4(&P.bw[tid - R], (const void *)ba);
        }
        asm volatile("cp.async.commit_group;");
    };
    float acc[2][4][4], accb[2][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[mi][ni][c] = 0.f, accb[mi][ni][c] = 0.f;
    /* which half of its staged word holds a 16-bit scale / bias of this thread's fragment row mi, hh at block 0
     * (bits 2 (2 mi + hh) and + 1); at block b that parity flips with (b >> gshift) & 1 (cv_sw's choice) */
    unsigned par = 0;
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const size_t gi = (size_t)min(r0 + lr0 + mi * 16 + hh * 8 + g, j.nrows - 1) * ng;
            par |= (unsigned)((((uintptr_t)j.scales >> 1) + gi) & 1) << (2 * (2 * mi + hh));
            par |= (unsigned)((((uintptr_t)j.biases >> 1) + gi) & 1) << (2 * (2 * mi + hh) + 1);
        }
#pragma unroll 1
    for (int k = 0; k < PSTAGES - 1; k++) issue(k);
#pragma unroll 1
    for (int b = 0; b < nb; b++) {
        asm volatile("cp.async.wait_group %0;" ::"n"(PSTAGES - 2));
        __syncthreads(); /* block b has landed for every thread; stage (b - 1) % PSTAGES is read by no one now */
        issue(b + PSTAGES - 1);
        const pstage<R, T, BB> &P = st[b % PSTAGES];
        tile2_fold<DT, SDT, R, T, BB>(P, lr0, lt0, g, tig, par, (unsigned)(b >> gshift) & 1u, !(b & bmask), acc, accb);
    }
    asm volatile("cp.async.wait_group 0;");
    const int wr = r0 + lr0, wt = t0 + lt0;
    tile_store(j, wr, wt, g, tig, acc, accb);
}


/* gemm_tile3: gemm_tile2's fragments and fold with fewer instructions and waits a block (the same bits):
 * - K3 blocks (128 columns) a stage, S3 stages in flight: one cp.async wait and one barrier per K3 blocks, where
 *   gemm_tile2 had one a block;
 * - the mma's C operand is 0x4B400000 (1.5 * 2^23 as an int), so its result is i2f_exact's integer sum and the
 *   conversion to float is one FADD (i2f_exact: an integer add and an FADD);
 * - the staged rows padded (80 / 160 bytes) so that every fragment load hits 32 distinct banks;
 * - a warp with no rows or no tokens in the tile skips the fold (its copies and barriers stay).
 * Dynamic shared memory: S3 * sizeof(qstage) (58-92 KiB), set by the launchers (g3_bytes). */
#define K3 4
#define S3 3
template <int R, int T, int BB>
struct qstage {
    uint8_t a[R][K3 * BB + (BB == 16 ? 16 : 32)]; /* the stage's codes of each row of the tile */
    int8_t b[T][K3 * 32 + 32];                    /* its activation codes of each token */
    unsigned sw[K3][R], bw[K3][R];                /* per block, the raw scale / bias word of each row */
    float d[K3][T], s[K3][T];                     /* per block, each token's d and its group's s */
};
template <int DT, int WN>
static constexpr int g3_bytes() { return S3 * (int)sizeof(qstage<128 / WN, 32 * WN, DT == DT_Q4 ? 16 : 32>); }

extern __shared__ __align__(16) uint8_t g3_smem[];

__device__ __forceinline__ void mma_u8s8_m(int *c, const unsigned *a, const unsigned *b) { /* C = 1.5 * 2^23's bits */
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0x4B400000));
}

/* Block kb of a staged stage into a warp's 32 x 32 accumulators: tile2_fold's fragments and arithmetic. Only the
 * first nlive groups of 8 tokens (the rest are past the segment: a MoE expert's last tile is often mostly empty). */
template <int DT, int SDT, int R, int T, int BB>
__device__ __forceinline__ void tile3_fold(const qstage<R, T, BB> &P, int kb, int lr0, int lt0, int g, int tig, unsigned par,
                                           unsigned flip, bool first, int nlive, float (&acc)[2][4][4], float (&accb)[2][4][4]) {
    unsigned a[2][4], bf[4][2];
    float sw[2][2], dd[4][2];
#pragma unroll
    for (int mi = 0; mi < 2; mi++) {
        const int l0 = lr0 + mi * 16 + g;
        if (DT == DT_Q4) {
            const unsigned u0 = *(const unsigned *)&P.a[l0][kb * 16 + 4 * tig], u1 = *(const unsigned *)&P.a[l0 + 8][kb * 16 + 4 * tig];
            const unsigned M = 0x0f0f0f0fu;
            a[mi][0] = u0 & M, a[mi][1] = u1 & M, a[mi][2] = (u0 >> 4) & M, a[mi][3] = (u1 >> 4) & M;
        } else {
            const uint2 u0 = *(const uint2 *)&P.a[l0][kb * 32 + 8 * tig], u1 = *(const uint2 *)&P.a[l0 + 8][kb * 32 + 8 * tig];
            a[mi][0] = u0.x, a[mi][1] = u1.x, a[mi][2] = u0.y, a[mi][3] = u1.y;
        }
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const unsigned pb = par >> (2 * (2 * mi + hh));
            sw[mi][hh] = raw_sw(P.sw[kb][l0 + hh * 8], (pb ^ flip) & 1u, SDT);
        }
    }
#pragma unroll
    for (int ni = 0; ni < 4; ni++) {
        if (ni >= nlive) break;
        const uint2 v = *(const uint2 *)&P.b[lt0 + ni * 8 + g][kb * 32 + 8 * tig];
        bf[ni][0] = v.x, bf[ni][1] = v.y;
        const float2 d2 = *(const float2 *)&P.d[kb][lt0 + ni * 8 + 2 * tig];
        dd[ni][0] = d2.x, dd[ni][1] = d2.y;
    }
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) {
            if (ni >= nlive) break;
            int c[4];
            mma_u8s8_m(c, a[mi], bf[ni]);
#pragma unroll
            for (int q = 0; q < 4; q++) { /* (float)I_b = (1.5 * 2^23 + I_b) - 1.5 * 2^23, exact */
                const float fi = __fsub_rn(__int_as_float(c[q]), 12582912.0f);
                acc[mi][ni][q] = __fmaf_rn(fi, __fmul_rn(sw[mi][q >> 1], dd[ni][q & 1]), acc[mi][ni][q]);
            }
        }
    if (!first) return; /* a group's first block: its biases times the tokens' group sums (accb's own chain) */
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const unsigned pb = par >> (2 * (2 * mi + hh));
            const float bw = raw_sw(P.bw[kb][lr0 + mi * 16 + g + hh * 8], ((pb >> 1) ^ flip) & 1u, SDT);
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                if (ni >= nlive) break;
                const float2 s2 = *(const float2 *)&P.s[kb][lt0 + ni * 8 + 2 * tig];
                accb[mi][ni][2 * hh] = __fmaf_rn(bw, s2.x, accb[mi][ni][2 * hh]);
                accb[mi][ni][2 * hh + 1] = __fmaf_rn(bw, s2.y, accb[mi][ni][2 * hh + 1]);
            }
        }
}

/* One stage (blocks K3 s .. K3 s + K3 - 1) of the tile into shared memory by cp.async; this thread's share: A chunks
 * tid + 128 h (row q / AC, chunk q % AC), B chunks (token q / 8), d / s of token tid % T at block tid / T + h 128 / T,
 * the scale / bias words of row tid % R at block tid / R + h 128 / R. Past the last block: zeros or a clamped copy,
 * never folded. */
template <int DT, int SDT, int WN>
__device__ __forceinline__ void tile3_issue(const ijob &j, int s, int r0, const int (&brow)[WN * 2], int trow, size_t srow) {
    constexpr int R = 128 / WN, T = 32 * WN, BB = DT == DT_Q4 ? 16 : 32, AC = K3 * BB / 16, ssz = SDT == DT_F32 ? 4 : 2;
    qstage<R, T, BB> &P = ((qstage<R, T, BB> *)g3_smem)[s % S3];
    const int tid = threadIdx.x, cols = j.cols, nb = cols / 32, ns = nb + nb / 2 + nb / 4, rb = DT == DT_Q4 ? cols / 2 : cols;
    const int gshift = j.group == 32 ? 0 : j.group == 64 ? 1 : 2, soff = j.group == 32 ? 0 : j.group == 64 ? nb : nb + nb / 2;
    const int b0 = s * K3;
    {
        const int c = tid % AC, ok = b0 + c * 16 / BB < nb;
#pragma unroll
        for (int h = 0; h < R * AC / 128; h++) {
            const int i = tid / AC + h * (128 / AC);
            cp16(&P.a[i][c * 16], j.codes + (size_t)min(r0 + i, j.nrows - 1) * rb + (ok ? (size_t)b0 * BB + c * 16 : 0), ok);
        }
    }
    {
        const int c = tid % 8, ok = b0 + c / 2 < nb;
#pragma unroll
        for (int h = 0; h < T * 8 / 128; h++)
            cp16(&P.b[tid / 8 + h * 16][c * 16], j.xq + (size_t)brow[h] * cols + (ok ? (size_t)b0 * 32 + c * 16 : 0), ok);
    }
#pragma unroll
    for (int h = 0; h < T * K3 / 128; h++) {
        const int kb = tid / T + h * (128 / T), b = min(b0 + kb, nb - 1);
        cp4(&P.d[kb][tid % T], j.d + (size_t)trow * nb + b);
        cp4(&P.s[kb][tid % T], j.s + (size_t)trow * ns + soff + (b >> gshift));
    }
#pragma unroll
    for (int h = 0; h < R * K3 / 128; h++) {
        const int kb = tid / R + h * (128 / R), b = min(b0 + kb, nb - 1);
        const size_t gi = srow + (size_t)(b >> gshift);
        cp4(&P.sw[kb][tid % R], (const void *)(((uintptr_t)j.scales + gi * ssz) & ~(uintptr_t)3));
        cp4(&P.bw[kb][tid % R], (const void *)(((uintptr_t)j.biases + gi * ssz) & ~(uintptr_t)3));
    }
    asm volatile("cp.async.commit_group;");
}

/* The tile of 4 warps (WN as gemm_tile: 64 x 64 or 128 rows x 32 tokens) over S3 stages of K3 blocks. U: the stage's
 * K3 blocks unrolled (the next block's fragment loads overlap this one's mma and fold; SLUICE_CUDA_GEMM=4). */
template <int DT, int SDT, int WN, bool U = false>
__device__ __forceinline__ void gemm_tile3(ijob j, int rt, int tt) {
    constexpr int R = 128 / WN, T = 32 * WN, BB = DT == DT_Q4 ? 16 : 32;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tig = lane & 3;
    const int r0 = rt * R, t0 = tt * T, lr0 = (warp / WN) * 32, lt0 = (warp % WN) * 32;
    const int nb = j.cols / 32, ng = j.cols / j.group, gshift = j.group == 32 ? 0 : j.group == 64 ? 1 : 2, bmask = j.group / 32 - 1;
    const int nst = (nb + K3 - 1) / K3;
    const bool live = r0 + lr0 < j.nrows && t0 + lt0 < j.n_tok;
    const int nlive = min(4, (j.n_tok - t0 - lt0 + 7) / 8); /* groups of 8 tokens with a token of the job */
    int brow[WN * 2];
#pragma unroll
    for (int h = 0; h < WN * 2; h++) brow[h] = act_row(j, t0 + tid / 8 + h * 16);
    const int trow = act_row(j, t0 + tid % T);
    const size_t srow = (size_t)min(r0 + tid % R, j.nrows - 1) * ng;
    float acc[2][4][4], accb[2][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[mi][ni][c] = 0.f, accb[mi][ni][c] = 0.f;
    unsigned par = 0; /* as gemm_tile2: the half of a staged word that holds a 16-bit scale / bias at block 0 */
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const size_t gi = (size_t)min(r0 + lr0 + mi * 16 + hh * 8 + g, j.nrows - 1) * ng;
            par |= (unsigned)((((uintptr_t)j.scales >> 1) + gi) & 1) << (2 * (2 * mi + hh));
            par |= (unsigned)((((uintptr_t)j.biases >> 1) + gi) & 1) << (2 * (2 * mi + hh) + 1);
        }
#pragma unroll 1
    for (int s = 0; s < S3 - 1; s++) {
        if (s < nst) tile3_issue<DT, SDT, WN>(j, s, r0, brow, trow, srow);
        else asm volatile("cp.async.commit_group;");
    }
#pragma unroll 1
    for (int s = 0; s < nst; s++) {
        asm volatile("cp.async.wait_group %0;" ::"n"(S3 - 2));
        __syncthreads(); /* stage s has landed for every thread; stage s - 1's buffer is read by no one now */
        if (s + S3 - 1 < nst) tile3_issue<DT, SDT, WN>(j, s + S3 - 1, r0, brow, trow, srow);
        else asm volatile("cp.async.commit_group;");
        const qstage<R, T, BB> &P = ((const qstage<R, T, BB> *)g3_smem)[s % S3];
        if (live && U) {
#pragma unroll
            for (int kb = 0; kb < K3; kb++) {
                const int b = s * K3 + kb;
                if (b >= nb) break;
                tile3_fold<DT, SDT, R, T, BB>(P, kb, lr0, lt0, g, tig, par, (unsigned)(b >> gshift) & 1u, !(b & bmask), nlive, acc, accb);
            }
        } else if (live)
#pragma unroll 1
            for (int kb = 0; kb < K3 && s * K3 + kb < nb; kb++) {
                const int b = s * K3 + kb;
                tile3_fold<DT, SDT, R, T, BB>(P, kb, lr0, lt0, g, tig, par, (unsigned)(b >> gshift) & 1u, !(b & bmask), nlive, acc, accb);
            }
    }
    asm volatile("cp.async.wait_group 0;");
    tile_store(j, r0 + lr0, t0 + lt0, g, tig, acc, accb);
}

/* gemm_tile5 (SLUICE_CUDA_GEMM=5): gemm_tile3's stages, fragments and per-block fold (the same bits) over a tile twice
 * as large, NW = 8 warps (256 threads) of 32 x 32: 128 rows x 64 tokens (WN 2) or 256 rows x 32 tokens (WN 1, the
 * MoE's expert segments), so each staged A row serves twice the tokens or each B row twice the rows (SLUICE_CUDA_GEMM=6:
 * NW = 4, gemm_tile3's tiles with the two changes below, 4 CTAs an SM). Besides:
 * - a stage's small words are copied so that a warp's 4-byte copies fall on few lines: K3 consecutive threads take one
 *   token's d, or one row's scale words, of the stage's K3 blocks (contiguous in global memory), where gemm_tile3's
 *   32 threads took 32 tokens or rows of one block (32 lines a copy for d, 16 for the scale words);
 * - the bias chain (accb = fma(bias_g, s_g, accb) for the groups in order, from 0) runs after the blocks, from the
 *   tile's biases and group sums staged in shared memory (tile5_bias): the same operations in the same order per
 *   output, so the same bits, without 32 accumulators held through the loop nor the biases and sums in every stage.
 * Why: at ~100 TOPS gemm_tile3 issues ~7 L1 wavefronts of staging a mma (mostly those 4-byte copies), ~1.5 here.
 * Dynamic shared memory S3 * sizeof(q5stage) (69-149 KiB at NW 8, g5_bytes); 2 CTAs an SM in 128 registers (q8 at
 * 256 rows: 1). */
#define NT5 256 /* threads of gemm_tile5 at NW 8 */
#define GC5 32 /* groups of biases staged at a time after the blocks */
template <int R, int T, int BB>
struct q5stage {
    uint8_t a[R][K3 * BB + (BB == 16 ? 16 : 32)]; /* the stage's codes of each row of the tile (padded as qstage) */
    int8_t b[T][K3 * 32 + 32];                    /* its activation codes of each token */
    unsigned sw[K3][R];                           /* per block, the raw scale word of each row */
    float d[K3][T];                               /* per block, each token's d */
};
template <int DT, int WN, int NW>
static constexpr int g5_bytes() { return S3 * (int)sizeof(q5stage<32 * NW / WN, 32 * WN, DT == DT_Q4 ? 16 : 32>); }

/* Stage s (blocks K3 s .. K3 s + K3 - 1) of the tile by cp.async; NTH = 32 NW threads. This thread: A chunk tid % AC
 * of rows tid / AC + h NTH / AC; B chunk tid % 8 of tokens tid / 8 + h NTH / 8 (brow[h]); below T K3, block tid % K3's
 * d of tokens tid / K3 + h NTH / K3 (trow[h]); block tid % K3's scale words of rows tid / K3 + h NTH / K3. Past the
 * last block: zeros or a clamped copy, never folded (gemm_tile3's rule). */
template <int DT, int SDT, int WN, int NW>
__device__ __forceinline__ void tile5_issue(const ijob &j, int s, int r0, const int (&brow)[WN * 8 / NW], const int (&trow)[(WN * 4 + NW - 1) / NW]) {
    constexpr int NTH = 32 * NW, R = NTH / WN, T = 32 * WN, BB = DT == DT_Q4 ? 16 : 32, AC = K3 * BB / 16, ssz = SDT == DT_F32 ? 4 : 2;
    static_assert((R * AC) % NTH == 0 && T * 8 == WN * 8 / NW * NTH && (R * K3) % NTH == 0, "gemm_tile5's shares");
    q5stage<R, T, BB> &P = ((q5stage<R, T, BB> *)g3_smem)[s % S3];
    const int tid = threadIdx.x, cols = j.cols, nb = cols / 32, rb = DT == DT_Q4 ? cols / 2 : cols;
    const int ng = cols / j.group, gshift = j.group == 32 ? 0 : j.group == 64 ? 1 : 2;
    const int b0 = s * K3, kb = tid % K3, b = min(b0 + kb, nb - 1);
    {
        const int c = tid % AC, ok = b0 + c * 16 / BB < nb;
#pragma unroll
        for (int h = 0; h < R * AC / NTH; h++) {
            const int i = tid / AC + h * (NTH / AC);
            cp16(&P.a[i][c * 16], j.codes + (size_t)min(r0 + i, j.nrows - 1) * rb + (ok ? (size_t)b0 * BB + c * 16 : 0), ok);
        }
    }
    {
        const int c = tid % 8, ok = b0 + c / 2 < nb;
#pragma unroll
        for (int h = 0; h < WN * 8 / NW; h++)
            cp16(&P.b[tid / 8 + h * (NTH / 8)][c * 16], j.xq + (size_t)brow[h] * cols + (ok ? (size_t)b0 * 32 + c * 16 : 0), ok);
    }
#pragma unroll
    for (int h = 0; h < (WN * 4 + NW - 1) / NW; h++) /* T K3 = 128 WN copies */
        if (tid + h * NTH < T * K3) cp4(&P.d[kb][tid / K3 + h * (NTH / K3)], j.d + (size_t)trow[h] * nb + b);
#pragma unroll
    for (int h = 0; h < R * K3 / NTH; h++) {
        const int i = tid / K3 + h * (NTH / K3);
        const size_t gi = (size_t)min(r0 + i, j.nrows - 1) * ng + (size_t)(b >> gshift);
        cp4(&P.sw[kb][i], (const void *)(((uintptr_t)j.scales + gi * ssz) & ~(uintptr_t)3));
    }
    asm volatile("cp.async.commit_group;");
}

/* Block kb of a stage into a warp's 32 x 32 accumulators: tile3_fold's fragments and per-block fold, without the
 * biases (tile5_bias). */
template <int DT, int SDT, int R, int T, int BB>
__device__ __forceinline__ void tile5_fold(const q5stage<R, T, BB> &P, int kb, int lr0, int lt0, int g, int tig, unsigned par,
                                           unsigned flip, int nlive, float (&acc)[2][4][4]) {
    unsigned a[2][4], bf[4][2];
    float sw[2][2], dd[4][2];
#pragma unroll
    for (int mi = 0; mi < 2; mi++) {
        const int l0 = lr0 + mi * 16 + g;
        if (DT == DT_Q4) {
            const unsigned u0 = *(const unsigned *)&P.a[l0][kb * 16 + 4 * tig], u1 = *(const unsigned *)&P.a[l0 + 8][kb * 16 + 4 * tig];
            const unsigned M = 0x0f0f0f0fu;
            a[mi][0] = u0 & M, a[mi][1] = u1 & M, a[mi][2] = (u0 >> 4) & M, a[mi][3] = (u1 >> 4) & M;
        } else {
            const uint2 u0 = *(const uint2 *)&P.a[l0][kb * 32 + 8 * tig], u1 = *(const uint2 *)&P.a[l0 + 8][kb * 32 + 8 * tig];
            a[mi][0] = u0.x, a[mi][1] = u1.x, a[mi][2] = u0.y, a[mi][3] = u1.y;
        }
#pragma unroll
        for (int hh = 0; hh < 2; hh++) sw[mi][hh] = raw_sw(P.sw[kb][l0 + hh * 8], ((par >> (2 * mi + hh)) ^ flip) & 1u, SDT);
    }
#pragma unroll
    for (int ni = 0; ni < 4; ni++) {
        if (ni >= nlive) break;
        const uint2 v = *(const uint2 *)&P.b[lt0 + ni * 8 + g][kb * 32 + 8 * tig];
        bf[ni][0] = v.x, bf[ni][1] = v.y;
        const float2 d2 = *(const float2 *)&P.d[kb][lt0 + ni * 8 + 2 * tig];
        dd[ni][0] = d2.x, dd[ni][1] = d2.y;
    }
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) {
            if (ni >= nlive) break;
            int c[4];
            mma_u8s8_m(c, a[mi], bf[ni]);
#pragma unroll
            for (int q = 0; q < 4; q++) { /* (float)I_b = (1.5 * 2^23 + I_b) - 1.5 * 2^23, exact */
                const float fi = __fsub_rn(__int_as_float(c[q]), 12582912.0f);
                acc[mi][ni][q] = __fmaf_rn(fi, __fmul_rn(sw[mi][q >> 1], dd[ni][q & 1]), acc[mi][ni][q]);
            }
        }
}

/* The bias chain of this thread's outputs after the blocks: per GC5 groups, the raw words of the tile's rows' biases
 * and its tokens' group sums staged in shared memory by cp.async (the stages' buffers, free now; no registers held by
 * loads in flight), then accb = fma(bias_g, s_g, accb) for g in order, from 0: gemm_tile3's chain (its per-group
 * first-block updates), operation by operation. */
template <int SDT, int R, int T, int NTH>
__device__ __forceinline__ void tile5_bias(const ijob &j, int r0, int t0, int lr0, int lt0, int g, int tig, bool live, int nlive,
                                           float (&accb)[2][4][4]) {
    unsigned *fb = (unsigned *)g3_smem; /* [R][GC5 + 1] bias words, then [T][GC5 + 1] sums: no bank conflicts */
    float *fs = (float *)(fb + R * (GC5 + 1));
    constexpr int ssz = SDT == DT_F32 ? 4 : 2;
    const int tid = threadIdx.x, nb = j.cols / 32, ng = j.cols / j.group, ns = nb + nb / 2 + nb / 4;
    const int soff = j.group == 32 ? 0 : j.group == 64 ? nb : nb + nb / 2, kc = tid % GC5;
    static_assert(NTH % GC5 == 0 && (R * GC5) % NTH == 0 && (T * GC5) % NTH == 0, "tile5_bias's shares");
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int c = 0; c < 4; c++) accb[mi][ni][c] = 0.f;
#pragma unroll 1
    for (int g0 = 0; g0 < ng; g0 += GC5) {
        const int gc = min(GC5, ng - g0);
        __syncthreads(); /* the last stage, or the previous groups, are read by no one now */
        if (kc < gc) {
#pragma unroll 1
            for (int h = 0; h < R * GC5 / NTH; h++) {
                const int i = tid / GC5 + h * (NTH / GC5);
                const size_t gi = (size_t)min(r0 + i, j.nrows - 1) * ng + g0 + kc;
                cp4(&fb[i * (GC5 + 1) + kc], (const void *)(((uintptr_t)j.biases + gi * ssz) & ~(uintptr_t)3));
            }
#pragma unroll 1
            for (int h = 0; h < T * GC5 / NTH; h++) {
                const int t = tid / GC5 + h * (NTH / GC5);
                cp4(&fs[t * (GC5 + 1) + kc], j.s + (size_t)act_row(j, t0 + t) * ns + soff + g0 + kc);
            }
        }
        asm volatile("cp.async.commit_group;");
        asm volatile("cp.async.wait_group 0;");
        __syncthreads();
        if (!live) continue;
        unsigned pb = 0; /* bit 2 mi + hh: the half of row (mi, hh)'s staged word that holds its 16-bit bias of group g0 */
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const size_t gi = (size_t)min(r0 + lr0 + mi * 16 + hh * 8 + g, j.nrows - 1) * ng + g0;
                pb |= (unsigned)((((uintptr_t)j.biases >> 1) + gi) & 1) << (2 * mi + hh);
            }
#pragma unroll 1
        for (int k = 0; k < gc; k++) {
            float bw[2][2];
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int hh = 0; hh < 2; hh++)
                    bw[mi][hh] = raw_sw(fb[(lr0 + mi * 16 + hh * 8 + g) * (GC5 + 1) + k], ((pb >> (2 * mi + hh)) ^ (unsigned)k) & 1u, SDT);
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                if (ni >= nlive) break;
                const int t = lt0 + ni * 8 + 2 * tig;
                const float s0 = fs[t * (GC5 + 1) + k], s1 = fs[(t + 1) * (GC5 + 1) + k];
#pragma unroll
                for (int mi = 0; mi < 2; mi++)
#pragma unroll
                    for (int hh = 0; hh < 2; hh++) {
                        accb[mi][ni][2 * hh] = __fmaf_rn(bw[mi][hh], s0, accb[mi][ni][2 * hh]);
                        accb[mi][ni][2 * hh + 1] = __fmaf_rn(bw[mi][hh], s1, accb[mi][ni][2 * hh + 1]);
                    }
            }
        }
    }
}

/* The tile of NW warps: (NW / WN) along the rows x WN along the tokens, each 32 x 32 as in gemm_tile3. */
template <int DT, int SDT, int WN, int NW>
__device__ __forceinline__ void gemm_tile5(ijob j, int rt, int tt) {
    constexpr int NTH = 32 * NW, R = NTH / WN, T = 32 * WN, BB = DT == DT_Q4 ? 16 : 32;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tig = lane & 3;
    const int r0 = rt * R, t0 = tt * T, lr0 = (warp / WN) * 32, lt0 = (warp % WN) * 32;
    const int nb = j.cols / 32, ng = j.cols / j.group, gshift = j.group == 32 ? 0 : j.group == 64 ? 1 : 2;
    const int nst = (nb + K3 - 1) / K3;
    const bool live = r0 + lr0 < j.nrows && t0 + lt0 < j.n_tok;
    const int nlive = min(4, (j.n_tok - t0 - lt0 + 7) / 8); /* groups of 8 tokens with a token of the job */
    int brow[WN * 8 / NW], trow[(WN * 4 + NW - 1) / NW];
#pragma unroll
    for (int h = 0; h < WN * 8 / NW; h++) brow[h] = act_row(j, t0 + tid / 8 + h * (NTH / 8));
#pragma unroll
    for (int h = 0; h < (WN * 4 + NW - 1) / NW; h++) trow[h] = act_row(j, t0 + (tid / K3 + h * (NTH / K3)) % T);
    float acc[2][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[mi][ni][c] = 0.f;
    unsigned par = 0; /* bit 2 mi + hh: the half of a staged word that holds row (mi, hh)'s 16-bit scale at block 0 */
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const size_t gi = (size_t)min(r0 + lr0 + mi * 16 + hh * 8 + g, j.nrows - 1) * ng;
            par |= (unsigned)((((uintptr_t)j.scales >> 1) + gi) & 1) << (2 * mi + hh);
        }
#pragma unroll 1
    for (int s = 0; s < S3 - 1; s++) {
        if (s < nst) tile5_issue<DT, SDT, WN, NW>(j, s, r0, brow, trow);
        else asm volatile("cp.async.commit_group;");
    }
#pragma unroll 1
    for (int s = 0; s < nst; s++) {
        asm volatile("cp.async.wait_group %0;" ::"n"(S3 - 2));
        __syncthreads(); /* stage s has landed for every thread; stage s - 1's buffer is read by no one now */
        if (s + S3 - 1 < nst) tile5_issue<DT, SDT, WN, NW>(j, s + S3 - 1, r0, brow, trow);
        else asm volatile("cp.async.commit_group;");
        const q5stage<R, T, BB> &P = ((const q5stage<R, T, BB> *)g3_smem)[s % S3];
        if (live)
#pragma unroll 1
            for (int kb = 0; kb < K3 && s * K3 + kb < nb; kb++)
                tile5_fold<DT, SDT, R, T, BB>(P, kb, lr0, lt0, g, tig, par, (unsigned)((s * K3 + kb) >> gshift) & 1u, nlive, acc);
    }
    asm volatile("cp.async.wait_group 0;");
    float accb[2][4][4];
    tile5_bias<SDT, R, T, NTH>(j, r0, t0, lr0, lt0, g, tig, live, nlive, accb);
    if (live) tile_store(j, r0 + lr0, t0 + lt0, g, tig, acc, accb);
}
