/*
 * cuda_fused.cu — the one-row kernels of a decode step that make the row's int8 form where its floats are computed
 * (cuda.h slcu_rmsnorm_q, slcu_swiglu_q, slcu_add_norm_q): each does the separate kernels' operations in their
 * order (cuda_ops.cu k_rmsnorm, k_swiglu, k_combine; backend_cuda_rt.cu k_add) and cuda_i8.cu act_quant's on
 * the same floats (cuda_quant.cuh), so every output is bitwise what the separate launches give. Each kernel here
 * waits (pdl_wait) before its first global access and is launched by cuda_pdl.cuh pdl_launch. Sections: the norm
 * on one CTA (k_rmsnorm_q); the same on a cluster of 8 (k_add_norm_cl, SLUICE_CUDA_NORM=2); SwiGLU; the residual
 * step on one CTA (k_add_norm_q); per-head norm + RoPE; slcu_time_median (benchmarks).
 */
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_addnorm.cuh"
#include "backend/cuda/cuda_normrope.cuh"
#include "backend/cuda/cuda_quant.cuh"
#include "backend/cuda/cuda_mvn.h"
#include "kernels/canon_exp.h"

static int bad(char *msg, size_t n, const char *what) {
    if (msg && n) snprintf(msg, n, "%s", what);
    return -1;
}
static int launched(char *msg, size_t n, const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return 0;
    if (msg && n) snprintf(msg, n, "%s: %s", what, cudaGetErrorString(e));
    return -1;
}


/* Row t of an n-row launch (slcu_add_norm_rows, blockIdx.y): the int8 form's row t (cuda.h slcu_act's layout), and x,
 * y, h at t dim (the combine is not taken there) */
static __device__ __forceinline__ void act_row(slcu_act &a, int t) {
    if (!a.q) return;
    const size_t c = (size_t)a.cols, nb = c / 32;
    a.q += (size_t)t * c, a.q4 += (size_t)t * c, a.d += (size_t)t * nb, a.s += (size_t)t * (nb + nb / 2 + nb / 4);
}
static __device__ __forceinline__ slcu_addnorm an_row(slcu_addnorm p, int t) {
    const size_t o = (size_t)t * (size_t)p.dim;
    p.x += o, p.h += o;
    if (p.y) p.y += o;
    return p;
}

/* ---- one row's rmsnorm with its int8 form (kern_act's, as cuda_i8.cu act_quant makes it). A CTA of RN_THREADS
 * loads the row into shared memory (its loads in flight together); then k_rmsnorm's operations: thread t < 256
 * sums the squares of i = t, t + 256, ... in order (double), the same tree of 256; then every warp quantizes the
 * blocks it holds (lane = column) by act_quant's operations on the same floats: bitwise a separate norm and
 * quantisation. dim <= RN_MAXD. ---- */
#define RN_THREADS 1024
#define RN_MAXD 8192
#define RN_PER (RN_MAXD / RN_THREADS) /* columns a thread holds at most */

template <bool ROWS>
__global__ void __launch_bounds__(RN_THREADS) k_rmsnorm_q(const float *x, float *y, int n, const float *w, float w_off,
                                                          float eps, slcu_act a) {
    pdl_wait();
    if (ROWS) x += (size_t)blockIdx.y * n, y += (size_t)blockIdx.y * n, act_row(a, blockIdx.y); /* slcu_add_norm_rows */
    pdl_trigger(); /* the matvec after it may start loading its weights (cuda_pdl.cuh) */
    __shared__ double part[256];
    __shared__ float xs[RN_MAXD], sbs[RN_MAXD / 32];
    float wv[RN_PER];
#pragma unroll
    for (int c = 0; c < RN_PER; c++) {
        const int i = threadIdx.x + c * RN_THREADS;
        wv[c] = i < n ? w[i] : 0.0f;
        if (i < n) xs[i] = x[i];
    }
    __syncthreads();
    norm_q_tail<RN_THREADS, RN_MAXD>(xs, y, n, wv, w_off, eps, a, part, sbs);
}

/* ---- the same row over a cluster of AC_CTAS CTAs (SLUICE_CUDA_NORM=2, slcu_norm_mode): CTA r holds columns [rW, rW
 * + W), W = dim / AC_CTAS (a multiple of 128, 256 .. AC_PER * 256), in its shared memory, one column a thread (up to
 * AC_PER: the kernel's CPT). Each CTA makes its columns (k_add_norm_q's combine and add, or k_rmsnorm_q's load), the
 * cluster syncs, and every CTA's thread t < 256 sums the squares of columns t, t + 256, ... in that order from the
 * CTAs that hold them (distributed shared memory), so part[t] is k_rmsnorm's partial bit for bit; tree256 as there.
 * Each CTA then norms and quantizes its own columns (whole blocks, whole quads: quant_sums_part), as norm_q_tail
 * does. No CTA leaves before the others read its columns (barrier.cluster arrive after its reads, wait before it
 * exits). What the step writes is read by __ldcg (cuda_pdl.cuh's rule). ---- */
#define AC_CTAS 8
#define AC_NT 256
#define AC_PER 4

/* the second barrier only says "this CTA's reads of the others' columns are done": their values are already used (no
 * release: it would fence the global stores made after the first) */
static __device__ __forceinline__ void cl_arrive() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
static __device__ __forceinline__ void cl_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

/* MODE 0: rmsnorm (p.x's row to p.h); 1: add (x += y); 2: combine then add (k_add_norm_q with cy). CPT: columns a
 * thread, W / 256 rounded up (1 at 2048 columns: no instruction for columns a thread does not have) */
template <int MODE, int CPT, bool ROWS = false>
__global__ void __cluster_dims__(AC_CTAS, 1, 1) __launch_bounds__(AC_NT) k_add_norm_cl(const slcu_addnorm p0, slcu_act a) {
    pdl_wait();
    const slcu_addnorm p = ROWS ? an_row(p0, blockIdx.y) : p0; /* ROWS: the cluster of row blockIdx.y (slcu_add_norm_rows) */
    if (ROWS) act_row(a, blockIdx.y);
    pdl_trigger(); /* the matvec after it may start loading its weights (cuda_pdl.cuh) */
    namespace cg = cooperative_groups;
    __shared__ double part[256];
    __shared__ float xs[AC_PER * AC_NT], sbs[AC_PER * AC_NT / 32];
    cg::cluster_group cl = cg::this_cluster();
    const int n = p.dim, W = n / AC_CTAS, rank = (int)cl.block_rank(), c0 = rank * W, tid = threadIdx.x;
    float wv[CPT], ov[CPT], vv[CPT]; /* norm weights; the combine and the sum, stored after the cluster's barrier */
#pragma unroll
    for (int c = 0; c < CPT; c++) {
        const int j = tid + c * AC_NT;
        wv[c] = j < W ? p.w[c0 + j] : 0.0f;
        ov[c] = vv[c] = 0.0f;
    }
    if (MODE == 2) { /* k_combine's order: the k slots in order, then the gated shared expert; every column's loads
                      * first (no global store before the barrier, so nothing orders them: 7168 columns in one trip) */
        const float g = p.csh && p.csg ? sigm(__ldcg(p.csg)) : 1.0f;
        float cw[AN_MAXK], ys[CPT][AN_MAXK], xv[CPT], sh[CPT];
#pragma unroll
        for (int s = 0; s < AN_MAXK; s++) cw[s] = s < p.ck ? __ldcg(p.cw + s) : 0.0f;
#pragma unroll
        for (int c = 0; c < CPT; c++) {
            const int j = tid + c * AC_NT, i = c0 + j, in = j < W;
            const float *cy = p.cy + i; /* slot s's column i, a row of n on */
#pragma unroll
            for (int s = 0; s < AN_MAXK; s++, cy += n) ys[c][s] = in && s < p.ck ? __ldcg(cy) : 0.0f;
            xv[c] = in ? __ldcg(p.x + i) : 0.0f;
            sh[c] = in && p.csh ? __ldcg(p.csh + i) : 0.0f;
        }
#pragma unroll
        for (int c = 0; c < CPT; c++) {
            const int j = tid + c * AC_NT;
            if (j >= W) break;
            float o = 0.0f;
#pragma unroll
            for (int s = 0; s < AN_MAXK; s++)
                if (s < p.ck) o = __fadd_rn(o, __fmul_rn(cw[s], ys[c][s]));
            if (p.csh) o = __fadd_rn(o, __fmul_rn(g, sh[c]));
            ov[c] = o;
            xs[j] = vv[c] = __fadd_rn(xv[c], o);
        }
    } else {
        float xv[CPT], yv[CPT];
#pragma unroll
        for (int c = 0; c < CPT; c++) {
            const int j = tid + c * AC_NT;
            xv[c] = j < W ? __ldcg(p.x + c0 + j) : 0.0f;
            yv[c] = MODE == 1 && j < W ? __ldcg(p.y + c0 + j) : 0.0f;
        }
#pragma unroll
        for (int c = 0; c < CPT; c++) {
            const int j = tid + c * AC_NT;
            if (j >= W) break;
            xs[j] = vv[c] = MODE == 1 ? __fadd_rn(xv[c], yv[c]) : xv[c];
        }
    }
    cl.sync(); /* every CTA's columns written and visible to the cluster (its release fences no global store yet) */
    { /* k_rmsnorm's partial t: columns t, t + 256, ... in order */
        double ss = 0.0;
        int r = 0, off = tid;
        if (W % 256 == 0) /* CTA r holds W / 256 of them, at t, t + 256, ...: one address a CTA */
#pragma unroll
            for (int q0 = 0; q0 < AC_CTAS; q0++) {
                const float *rp = cl.map_shared_rank(xs, q0) + tid;
#pragma unroll
                for (int q = 0; q < CPT; q++)
                    if (q < W / 256) {
                        const float v = rp[q * 256];
                        ss += (double)v * (double)v;
                    }
            }
        else { /* W >= 256: the owner advances by at most one a column */
            for (int m0 = 0; m0 < n / 256; m0 += 8) {
                float v[8];
    #pragma unroll
                for (int m = 0; m < 8; m++) {
                    v[m] = m0 + m < n / 256 ? *cl.map_shared_rank(xs + off, r) : 0.0f;
                    off += 256;
                    if (off >= W) off -= W, r++;
                }
    #pragma unroll
                for (int m = 0; m < 8; m++)
                    if (m0 + m < n / 256) ss += (double)v[m] * (double)v[m];
            }
        }
        part[tid] = ss;
    }
    cl_arrive(); /* this CTA's reads of the others' columns are done */
#pragma unroll
    for (int c = 0; c < CPT; c++) { /* the residual and the combine out */
        const int j = tid + c * AC_NT;
        if (MODE == 0 || j >= W) break;
        p.x[c0 + j] = vv[c];
        if (MODE == 2) p.cout[c0 + j] = ov[c];
    }
    tree256(part);
    /* norm_q_tail's inverse, on every thread (the same double operations: the same float), not once and a barrier */
    const float inv = (float)(1.0 / sqrt(part[0] / (double)n + (double)p.eps));
#pragma unroll
    for (int c = 0; c < CPT; c++) {
        const int j = tid + c * AC_NT, i = c0 + j;
        if (j >= W) break;
        const float v = __fmul_rn(__fmul_rn(xs[j], inv), __fadd_rn(p.w_off, wv[c]));
        p.h[i] = v;
        if (a.q) quant_lane(v, i, tid & 31, a, sbs, c0 / 32);
    }
    if (a.q) {
        __syncthreads();
        quant_sums_part(a, n / 32, c0 / 32, W / 32, sbs, tid, AC_NT);
    }
    cl_wait(); /* the others' reads of this CTA's columns are done */
}

int slcu_norm_mode = 2;

/* the cluster's shapes: dim / AC_CTAS a multiple of 128 (whole quads a CTA) from 256 to AC_PER * 256 */
static int cl_takes(int dim) {
    return slcu_norm_mode == 2 && dim % (128 * AC_CTAS) == 0 && dim >= 256 * AC_CTAS && dim <= AC_PER * AC_NT * AC_CTAS;
}

extern "C" int slcu_norm_cluster_takes(int dim) { return cl_takes(dim); }

/* rows > 1: a cluster a row (slcu_add_norm_rows) */
template <int MODE, bool ROWS = false> static void cl_launch(const slcu_addnorm &p, const slcu_act &a, int rows = 1) {
    const int cpt = (p.dim / AC_CTAS + AC_NT - 1) / AC_NT;
    const dim3 g(AC_CTAS, (unsigned)rows);
    if (cpt == 1) pdl_launch(k_add_norm_cl<MODE, 1, ROWS>, g, AC_NT, 0, SLS, p, a);
    else if (cpt == 2) pdl_launch(k_add_norm_cl<MODE, 2, ROWS>, g, AC_NT, 0, SLS, p, a);
    else if (cpt == 3) pdl_launch(k_add_norm_cl<MODE, 3, ROWS>, g, AC_NT, 0, SLS, p, a);
    else pdl_launch(k_add_norm_cl<MODE, 4, ROWS>, g, AC_NT, 0, SLS, p, a);
}

extern "C" int slcu_rmsnorm_q(const float *x, float *y, int dim, const float *w, float w_off, float eps, const slcu_act *a,
                              char *msg, size_t msglen) {
    if (dim <= 0 || dim % 32 || dim > RN_MAXD || a->n_tok != 1 || a->cols != dim)
        return bad(msg, msglen, "rmsnorm_q: one row of 32k columns, at most 8192");
    if (cl_takes(dim)) { /* k_add_norm_cl's MODE 0: x only read */
        const slcu_addnorm p = {(float *)x, NULL, NULL, NULL, NULL, NULL, 0, NULL, y, w, w_off, eps, dim};
        cl_launch<0>(p, *a);
    } else pdl_launch(k_rmsnorm_q<false>, 1, RN_THREADS, 0, SLS, x, y, dim, w, w_off, eps, *a);
    return launched(msg, msglen, "rmsnorm launch");
}

/* SwiGLU of n_tok rows of I with the rows' int8 form (cuda_i8.cu act_quant's grid and operations on the same
 * floats: bitwise a separate slcu_swiglu then slcu_act_quantize); y may be g. */
__global__ void k_swiglu_q(const float *g, const float *u, float *y, int I, slcu_act a) {
    pdl_wait();
    pdl_trigger(); /* the matvec after it may start loading its weights (cuda_pdl.cuh) */
    const int t = blockIdx.y, nb = I / 32, ns = nb + nb / 2 + nb / 4, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.x * 4 + w;
    __shared__ float s32[4];
    if (b < nb) {
        const size_t c = (size_t)t * I + (size_t)b * 32;
        const float v = __fmul_rn(canon_silu(g[c + lane]), u[c + lane]); /* k_swiglu's (canon_exp.h) */
        y[c + lane] = v;
        float amax = fmaxf(0.0f, fabsf(v));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float db = __fdiv_rn(amax, 127.0f), id = db != 0.0f ? __fdiv_rn(1.0f, db) : 0.0f;
        const float rv = rintf(__fmul_rn(v, id));
        const int qi = rv >= 127.0f ? 127 : rv <= -127.0f ? -127 : rv == rv ? (int)rv : 0;
        int sum = qi;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        a.q[c + lane] = (int8_t)qi;
        const int c8 = lane & 7;
        a.q4[c + (lane & ~7) + ((c8 & 1) ? 4 + (c8 >> 1) : (c8 >> 1))] = (int8_t)qi;
        if (lane == 0) {
            const float sb = __fmul_rn(db, (float)sum);
            a.d[(size_t)t * nb + b] = db;
            a.s[(size_t)t * ns + b] = sb;
            s32[w] = sb;
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 0; i < 2; i++) {
            const int jj = 2 * blockIdx.x + i;
            if (jj < nb / 2) a.s[(size_t)t * ns + nb + jj] = __fadd_rn(s32[2 * i], s32[2 * i + 1]);
        }
        if ((int)blockIdx.x < nb / 4)
            a.s[(size_t)t * ns + nb + nb / 2 + blockIdx.x] = __fadd_rn(__fadd_rn(s32[0], s32[1]), __fadd_rn(s32[2], s32[3]));
    }
}

extern "C" int slcu_swiglu_q(const float *g, const float *u, float *y, const slcu_act *a, char *msg, size_t msglen) {
    if (a->cols <= 0 || a->cols % 32) return bad(msg, msglen, "swiglu_q: rows of a multiple of 32");
    if (a->n_tok <= 0) return 0;
    pdl_launch(k_swiglu_q, dim3((unsigned)((a->cols / 32 + 3) / 4), (unsigned)a->n_tok), 128, 0, SLS, g, u, y, a->cols, *a);
    return launched(msg, msglen, "swiglu launch");
}


/* One CTA of RN_THREADS: cuda_addnorm.cuh add_norm_row (the combine, k_add's add, k_rmsnorm's norm and the int8 form);
 * ROWS: row blockIdx.y of slcu_add_norm_rows */
template <bool ROWS>
__global__ void __launch_bounds__(RN_THREADS) k_add_norm_q(const slcu_addnorm p0, slcu_act a) {
    pdl_wait();
    const slcu_addnorm p = ROWS ? an_row(p0, blockIdx.y) : p0;
    if (ROWS) act_row(a, blockIdx.y);
    pdl_trigger(); /* the matvec after it may start loading its weights (cuda_pdl.cuh) */
    __shared__ double part[256];
    __shared__ float xs[RN_MAXD], sbs[RN_MAXD / 32];
    add_norm_row<RN_THREADS, RN_MAXD, false>(p, a, part, xs, sbs);
}

extern "C" int slcu_add_norm_q(const slcu_addnorm *p, const slcu_act *a, char *msg, size_t msglen) {
    if (p->dim <= 0 || p->dim > RN_MAXD || (p->cy && p->ck > AN_MAXK) || (a && (p->dim % 32 || a->n_tok != 1 || a->cols != p->dim)))
        return bad(msg, msglen, "add_norm_q: one row of at most 8192 (a multiple of 32 for its int8 form), 16 experts");
    slcu_act none = {};
    if (cl_takes(p->dim)) {
        if (p->cy) cl_launch<2>(*p, a ? *a : none);
        else cl_launch<1>(*p, a ? *a : none);
    } else pdl_launch(k_add_norm_q<false>, 1, RN_THREADS, 0, SLS, *p, a ? *a : none);
    return launched(msg, msglen, "add + rmsnorm launch");
}

/* ---- a decode batch's rows (SLUICE_CUDA_NROWS=1, cuda_mvn.h): row t of n the launch's blockIdx.y, its CTAs the one-row
 * kernels' above (a cluster of 8 a row, or one CTA of RN_THREADS), so each row's bits are the bits it gets alone ---- */
extern "C" int slcu_add_norm_rows(const slcu_addnorm *p, int n_rows, const slcu_act *a, char *msg, size_t msglen) {
    if (p->dim <= 0 || p->dim > RN_MAXD || p->dim % 32 || p->cy || n_rows < 1 || n_rows > 65535 ||
        (a && (a->n_tok != n_rows || a->cols != p->dim)))
        return bad(msg, msglen, "add_norm_rows: rows of at most 8192 (a multiple of 32), no combine, the int8 form's rows");
    slcu_act none = {};
    none.cols = p->dim;
    const slcu_act &q = a ? *a : none;
    if (cl_takes(p->dim)) {
        if (p->y) cl_launch<1, true>(*p, q, n_rows);
        else cl_launch<0, true>(*p, q, n_rows);
    } else if (p->y) pdl_launch(k_add_norm_q<true>, dim3(1, (unsigned)n_rows), RN_THREADS, 0, SLS, *p, q);
    else pdl_launch(k_rmsnorm_q<true>, dim3(1, (unsigned)n_rows), RN_THREADS, 0, SLS, (const float *)p->x, p->h, p->dim, p->w,
                    p->w_off, p->eps, q);
    return launched(msg, msglen, "add + rmsnorm rows launch");
}

/* ---- per-head norm then RoPE of one token (slcu_norm_rope): a CTA of 256 per head (cuda_normrope.cuh) ---- */
__global__ void __launch_bounds__(256) k_norm_rope(const __grid_constant__ nr_args A, const int *pd) {
    pdl_wait();
    __shared__ double part[256];
    __shared__ float v0[1024];
    const int part_i = (int)blockIdx.x >= A.n0, h = (int)blockIdx.x - (part_i ? A.n0 : 0);
    norm_rope_head(A, A.p[part_i], h, pd ? *pd : A.pos, part, v0);
}

extern "C" int slcu_norm_rope(const slcu_normrope *p, int n_parts, int rot, const float *inv_freq, float attn_factor, int pos,
                              char *msg, size_t msglen) {
    if (n_parts < 1 || n_parts > 2 || rot < 0 || rot % 2 || rot > 1024) return bad(msg, msglen, "norm_rope: 1 or 2 parts, rot even <= 1024");
    nr_args A;
    int heads = 0;
    for (int i = 0; i < n_parts; i++) {
        if (p[i].dim <= 0 || p[i].dim < rot || p[i].n_heads <= 0) return bad(msg, msglen, "norm_rope: rot past the head");
        A.p[i] = p[i];
        heads += p[i].n_heads;
    }
    if (n_parts == 1) A.p[1] = p[0];
    A.n0 = p[0].n_heads, A.half = rot / 2, A.af = attn_factor, A.pos = pos;
    memcpy(A.f, inv_freq, (size_t)rot / 2 * sizeof(float));
    pdl_launch(k_norm_rope, heads, 256, 0, SLS, A, slcu_step_pos());
    return launched(msg, msglen, "norm + rope launch");
}

/* slcu_norm_rope_rows: token t (blockIdx.y) at ld[part] t floats from the part's rows, at position pos[t] */
struct nr_rows {
    nr_args A;
    size_t ld[2];
    int pos[SLCU_NROWS_MAX];
};
__global__ void __launch_bounds__(256) k_norm_rope_rows(const __grid_constant__ nr_rows R) {
    pdl_wait();
    __shared__ double part[256];
    __shared__ float v0[1024];
    const int t = blockIdx.y, part_i = (int)blockIdx.x >= R.A.n0, h = (int)blockIdx.x - (part_i ? R.A.n0 : 0);
    slcu_normrope p = R.A.p[part_i];
    p.x += (size_t)t * R.ld[part_i], p.y += (size_t)t * R.ld[part_i];
    norm_rope_head(R.A, p, h, R.pos[t], part, v0);
}

extern "C" int slcu_norm_rope_rows(const slcu_normrope *p, const size_t *ld, int n_parts, int n_tok, int rot, const float *inv_freq,
                                   float attn_factor, const int *pos, char *msg, size_t msglen) {
    if (n_parts < 1 || n_parts > 2 || rot < 0 || rot % 2 || rot > 1024)
        return bad(msg, msglen, "norm_rope_rows: 1 or 2 parts, rot even <= 1024");
    if (n_tok < 1 || n_tok > SLCU_NROWS_MAX || slcu_step_pos())
        return bad(msg, msglen, "norm_rope_rows: 1 to 8 tokens, not in a recorded step");
    nr_rows R;
    int heads = 0;
    for (int i = 0; i < n_parts; i++) {
        if (p[i].dim <= 0 || p[i].dim < rot || p[i].n_heads <= 0) return bad(msg, msglen, "norm_rope_rows: rot past the head");
        R.A.p[i] = p[i], R.ld[i] = ld[i];
        heads += p[i].n_heads;
    }
    if (n_parts == 1) R.A.p[1] = p[0], R.ld[1] = ld[0];
    R.A.n0 = p[0].n_heads, R.A.half = rot / 2, R.A.af = attn_factor, R.A.pos = 0;
    memcpy(R.A.f, inv_freq, (size_t)rot / 2 * sizeof(float));
    memset(R.pos, 0, sizeof R.pos);
    memcpy(R.pos, pos, (size_t)n_tok * sizeof(int));
    pdl_launch(k_norm_rope_rows, dim3((unsigned)heads, (unsigned)n_tok), 256, 0, SLS, R);
    return launched(msg, msglen, "norm + rope rows launch");
}

extern "C" float slcu_time_median(void (*fn)(void *), void *ctx, int reps) {
    enum { MAXR = 1000 };
    static cudaEvent_t ev[2 * MAXR];
    static float ms[MAXR];
    reps = reps < 1 ? 1 : reps > MAXR ? MAXR : reps;
    fn(ctx); /* warm-up */
    for (int i = 0; i < 2 * reps; i++) cudaEventCreate(&ev[i]);
    for (int i = 0; i < reps; i++) {
        cudaEventRecord(ev[2 * i], SLS);
        fn(ctx);
        cudaEventRecord(ev[2 * i + 1], SLS);
    }
    cudaEventSynchronize(ev[2 * reps - 1]);
    for (int i = 0; i < reps; i++) {
        cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]);
        for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) { /* insertion sort */
            const float t = ms[j];
            ms[j] = ms[j - 1], ms[j - 1] = t;
        }
    }
    for (int i = 0; i < 2 * reps; i++) cudaEventDestroy(ev[i]);
    return ms[reps / 2];
}
