/*
 * cuda_route.cuh — the one-warp router of a decode step (kinds 0 and 1: softmax then top-k, top-k then softmax) as
 * device functions, for src/backend/cuda/ only: k_route_warp (cuda_ops.cu) and the router's matvec whose last CTA
 * routes (cuda_mat.cu k_matvec_route, SLUICE_CUDA_FUSE=router) run the same code on the same logits, so they choose
 * the same experts with the same weights, bit for bit. rt_better and rt_weights serve k_route too.
 */
#ifndef SL_CUDA_ROUTE_CUH
#define SL_CUDA_ROUTE_CUH

#define RT_MAXE 1024

/* (v, i) := the better of (v, i) and (v2, i2): the larger value, on a tie the lower index; i < 0 is none. */
__device__ __forceinline__ void rt_better(float &v, int &i, float v2, int i2) {
    if (i2 < 0) return;
    if (i < 0 || v2 > v || (!(v > v2) && i2 < i)) v = v2, i = i2;
}

/* kinds 0 and 1 after the choice (one thread): top-k-then-softmax's softmax over the k, or the renormalisation */
static __device__ void rt_weights(const slcu_router &r, float *tw) {
    const int k = r.k;
    if (r.kind == 1) {
        const float mx = tw[0];
        double sum = 0.0;
        for (int s = 0; s < k; s++) tw[s] = expf(__fsub_rn(tw[s], mx)), sum += tw[s];
        const float fsum = (float)sum;
        for (int s = 0; s < k; s++) tw[s] = __fdiv_rn(tw[s], fsum);
    } else if (r.norm_topk) {
        float wsum = 0.0f;
        for (int s = 0; s < k; s++) wsum = __fadd_rn(wsum, tw[s]);
        for (int s = 0; s < k; s++) tw[s] = __fdiv_rn(tw[s], wsum);
    }
}

/* A float's order as an unsigned key (-0 as +0: equal floats, equal keys), for the warp's max reduction. */
__device__ __forceinline__ unsigned rt_key(float v) {
    const unsigned u = __float_as_uint(v == 0.0f ? 0.0f : v);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}
__device__ __forceinline__ unsigned rt_wmax(unsigned x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    return __reduce_max_sync(0xffffffffu, x);
#else
    for (int o = 16; o; o >>= 1) x = max(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
#endif
}
__device__ __forceinline__ unsigned rt_wmin(unsigned x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    return __reduce_min_sync(0xffffffffu, x);
#else
    for (int o = 16; o; o >>= 1) x = min(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
#endif
}

/* Kinds 0 and 1 on one warp (decode: one token a CTA, no block barriers): the same choice as k_route (the
 * argmax rounds, ties to the lower index) and the same operations, but for the softmax's double sum: per lane
 * over e = lane mod 32 in order, then a shuffle tree (k_route: 128 partitions), so the weights agree with
 * k_route's to rounding. Both paths of the CUDA backend (route, moe_resident) call slcu_route, so they choose
 * alike (streamed == resident). Each lane keeps the best of its own entries (rt_better's order); a round takes the
 * warp's largest key, then the lowest index holding it (two reductions, not a shuffle tree of pairs), and only
 * the winner's lane looks at its entries again; the choice is then placed by expert index in parallel (a stable
 * rank: rt_sort's order). The same choice and weights as before for any logits but NaN.
 * Here: row t of logits (read past L1: a fused caller reads what other CTAs of its launch wrote) on one warp
 * (lane), into top_e / top_w [t][k]; p, te, tw: shared [RT_MAXE] each. */
static __device__ void route_warp_row(const slcu_router &r, const float *logits, int t, int *top_e, float *top_w,
                                      float *p, int *te, float *tw, int lane) {
    const int E = r.E, k = r.k;
    const float *lg = logits + (size_t)t * E;
    const float taken = r.kind == 1 ? -INFINITY : -1.0f;
    if (r.kind == 1) {
#pragma unroll 4
        for (int e = lane; e < E; e += 32) p[e] = __ldcg(lg + e);
    } else {
        float mx = -INFINITY;
#pragma unroll 4
        for (int e = lane; e < E; e += 32) mx = fmaxf(mx, p[e] = __ldcg(lg + e));
        for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        double sum = 0.0;
        for (int e = lane; e < E; e += 32) {
            p[e] = expf(__fsub_rn(p[e], mx));
            sum += p[e];
        }
        for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        const float fsum = (float)sum;
        for (int e = lane; e < E; e += 32) p[e] = __fdiv_rn(p[e], fsum);
    }
    float v = 0.f; /* this lane's best untaken entry (i < 0: none) */
    int i = -1;
    for (int e = lane; e < E; e += 32)
        if (p[e] != taken) rt_better(v, i, p[e], e);
    for (int s = 0; s < k; s++) {
        const unsigned mk = rt_wmax(i >= 0 ? rt_key(v) : 0u);
        int b = (int)rt_wmin(i >= 0 && rt_key(v) == mk ? (unsigned)i : 0xffffffffu);
        if (b < 0 || b >= E) b = 0; /* none left: k_route's fallback */
        if (!lane) te[s] = b, tw[s] = p[b];
        __syncwarp();
        if ((b & 31) == lane) {
            p[b] = taken;
            v = 0.f, i = -1;
            for (int e = lane; e < E; e += 32)
                if (p[e] != taken) rt_better(v, i, p[e], e);
        }
        __syncwarp();
    }
    if (!lane) rt_weights(r, tw);
    __syncwarp();
    for (int s = lane; s < k; s += 32) { /* rt_sort's stable order by expert index */
        const int e = te[s];
        int rank = 0;
        for (int j = 0; j < k; j++) rank += te[j] < e || (te[j] == e && j < s);
        top_e[(size_t)t * k + rank] = e, top_w[(size_t)t * k + rank] = tw[s];
    }
}

#endif
