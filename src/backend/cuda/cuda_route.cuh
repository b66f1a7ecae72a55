/*
 * cuda_route.cuh — the one-warp router of a decode step (kinds 0 and 1: softmax then top-k, top-k then softmax) as
 * device functions, for src/backend/cuda/ only: k_route_warp (cuda_ops.cu) and the router's matvec whose last CTA
 * routes (cuda_mat.cu k_matvec_route, SLUICE_CUDA_FUSE=router) run the same code on the same logits, so they choose
 * the same experts with the same weights, bit for bit. rt_better and rt_weights serve k_route too. With the router's
 * warp2 (SLUICE_CUDA_ROUTE=2) route_warp_row hands the row to route_warp_reg: the same choice and bits from registers.
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
template <int NPL>
static __device__ void route_warp_reg(const slcu_router &r, const float *logits, int t, int *top_e, float *top_w, int lane);

static __device__ void route_warp_row(const slcu_router &r, const float *logits, int t, int *top_e, float *top_w,
                                      float *p, int *te, float *tw, int lane) {
    const int E = r.E, k = r.k;
    if (r.warp2 && k <= 32 && E <= 256) { /* SLUICE_CUDA_ROUTE=2: the same choice and weights, in registers */
        if (E <= 64) route_warp_reg<2>(r, logits, t, top_e, top_w, lane);
        else if (E <= 128) route_warp_reg<4>(r, logits, t, top_e, top_w, lane);
        else route_warp_reg<8>(r, logits, t, top_e, top_w, lane);
        return;
    }
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

/* route_warp_row with the row in registers (SLUICE_CUDA_ROUTE=2, cuda.h slcu_router warp2; E <= 32 NPL, k <= 32):
 * the same operations on the same floats in the same order, so the same choice and bits, with fewer serial steps.
 * The softmax (kind 0) as there, lane by lane over e = lane + 32 j, then the same shuffle tree. Each lane sorts its
 * candidates (entries not equal to `taken`) once by rt_key, descending, stably (ties keep the lower index first:
 * rt_better's order); a round takes the warp's largest head key, then the lowest index holding it (the same two
 * reductions as route_warp_row), the winner's lane drops its head (its next best is the next in its list: no rescan,
 * no shared memory), and every lane receives the value by one shuffle (none left: b = 0 and `taken`, which p[0]
 * holds then in route_warp_row). rt_weights' sums are made as the rounds go, in choice order, by every lane (the
 * same additions); lane s keeps slot s and divides it; the stable rank by expert index as rt_sort's, by shuffles. */
template <int NPL>
static __device__ void route_warp_reg(const slcu_router &r, const float *logits, int t, int *top_e, float *top_w, int lane) {
    const int E = r.E, k = r.k;
    const float *lg = logits + (size_t)t * E;
    const float taken = r.kind == 1 ? -INFINITY : -1.0f;
    float pv[NPL];
#pragma unroll
    for (int j = 0; j < NPL; j++) pv[j] = lane + 32 * j < E ? __ldcg(lg + lane + 32 * j) : 0.0f;
    if (r.kind != 1) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < NPL; j++)
            if (lane + 32 * j < E) mx = fmaxf(mx, pv[j]);
        for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        double sum = 0.0;
#pragma unroll
        for (int j = 0; j < NPL; j++)
            if (lane + 32 * j < E) {
                pv[j] = expf(__fsub_rn(pv[j], mx));
                sum += pv[j];
            }
        for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        const float fsum = (float)sum;
#pragma unroll
        for (int j = 0; j < NPL; j++)
            if (lane + 32 * j < E) pv[j] = __fdiv_rn(pv[j], fsum);
    }
    unsigned kk[NPL]; /* the lane's candidates: key (0: none), expert, value */
    int ii[NPL];
#pragma unroll
    for (int j = 0; j < NPL; j++) {
        const int e = lane + 32 * j, cand = e < E && pv[j] != taken;
        kk[j] = cand ? rt_key(pv[j]) : 0u, ii[j] = cand ? e : -1;
    }
#pragma unroll
    for (int a = 0; a < NPL - 1; a++) /* a stable bubble sort, descending by key */
#pragma unroll
        for (int j = 0; j < NPL - 1 - a; j++)
            if (kk[j + 1] > kk[j]) {
                const unsigned tk = kk[j];
                const int ti = ii[j];
                const float tv = pv[j];
                kk[j] = kk[j + 1], ii[j] = ii[j + 1], pv[j] = pv[j + 1];
                kk[j + 1] = tk, ii[j + 1] = ti, pv[j + 1] = tv;
            }
    float wsum = 0.0f, mx1 = 0.0f, my_w = 0.0f;
    double dsum = 0.0;
    int my_e = 0;
    for (int s = 0; s < k; s++) {
        const unsigned mk = rt_wmax(kk[0]);
        int b = (int)rt_wmin(ii[0] >= 0 && kk[0] == mk ? (unsigned)ii[0] : 0xffffffffu);
        const int none = b < 0 || b >= E;
        const float vb = __shfl_sync(0xffffffffu, pv[0], none ? 0 : b & 31);
        float val = none ? taken : vb;
        if (none) b = 0;
        else if (ii[0] == b) { /* the winner's lane: its next best moves up */
#pragma unroll
            for (int j = 0; j < NPL - 1; j++) kk[j] = kk[j + 1], ii[j] = ii[j + 1], pv[j] = pv[j + 1];
            kk[NPL - 1] = 0u, ii[NPL - 1] = -1;
        }
        if (r.kind == 1) { /* rt_weights: mx = the first chosen, the exponentials' double sum in choice order */
            if (!s) mx1 = val;
            val = expf(__fsub_rn(val, mx1));
            dsum += val;
        } else wsum = __fadd_rn(wsum, val);
        if (lane == s) my_w = val, my_e = b;
    }
    if (r.kind == 1) my_w = __fdiv_rn(my_w, (float)dsum);
    else if (r.norm_topk) my_w = __fdiv_rn(my_w, wsum);
    int rank = 0;
    for (int j = 0; j < k; j++) { /* rt_sort's stable order by expert index */
        const int ej = __shfl_sync(0xffffffffu, my_e, j);
        rank += ej < my_e || (ej == my_e && j < lane);
    }
    if (lane < k) top_e[(size_t)t * k + rank] = my_e, top_w[(size_t)t * k + rank] = my_w;
}

/* Kind 2 (sigmoid, group-limited: DeepSeek-V3's rule) on one warp, bitwise cuda_ops.cu k_route's one-thread code for
 * E <= 32 NPL, n_group <= 64, k <= 32 (the router's SLUICE_CUDA_ROUTER=2 launch, cuda_mat.cu k_router2). The scores
 * (rt_sigm, k_route's sigm) and biased scores as there, lane + 32 j a lane; sb: shared [E], the biased scores, where
 * lane g (and g + 32) scans group g serially with k_route's code (the group's two largest, their sum: the same floats
 * in the same order, so the same bits, signed zeros too). The groups' rounds and the experts' rounds are the argmax of
 * k_route's loops (strict >, so the lowest index among equals; -inf groups skipped, -inf experts candidates) as two
 * warp reductions over rt_key (equal floats, equal keys), the experts' taken by their lane (a bit each). The weights:
 * the unbiased score of the choice (none left: expert 0, p[0]), norm_topk's float sum in choice order on every lane
 * (+ 1e-20), lane s divides slot s and scales it; the stable rank by expert index as route_warp_reg's. Row t of logits
 * (read past L1) into top_e / top_w [t][k]. */
__device__ __forceinline__ float rt_sigm(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x))); }

template <int NPL>
static __device__ void route_warp_sig(const slcu_router &r, const float *logits, int t, int *top_e, float *top_w,
                                      float *sb, int lane) {
    const int E = r.E, k = r.k, G = r.n_group, per = E / G;
    const float *lg = logits + (size_t)t * E;
    float pv[NPL], bv[NPL];
#pragma unroll
    for (int j = 0; j < NPL; j++) {
        const int e = lane + 32 * j;
        pv[j] = e < E ? rt_sigm(__ldcg(lg + e)) : 0.0f;
        bv[j] = e < E && r.bias ? __fadd_rn(pv[j], r.bias[e]) : pv[j];
        if (e < E) sb[e] = bv[j];
    }
    __syncwarp();
    float gs[2] = {-INFINITY, -INFINITY}; /* groups lane and lane + 32 */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int g = lane + 32 * h;
        if (g >= G) continue;
        float a = -INFINITY, b = -INFINITY;
        for (int e = g * per; e < (g + 1) * per; e++) {
            const float v = sb[e];
            if (v > a) b = a, a = v;
            else if (v > b) b = v;
        }
        gs[h] = __fadd_rn(a, b);
    }
    unsigned long long chosen = 0; /* the groups taken, bit g */
    for (int s = 0; s < r.topk_group; s++) {
        unsigned key = 0;
        int gi = -1;
#pragma unroll
        for (int h = 1; h >= 0; h--) { /* the lower group last: ties to it */
            const int g = lane + 32 * h;
            if (g < G && gs[h] != -INFINITY && !(chosen >> g & 1) && rt_key(gs[h]) >= key) key = rt_key(gs[h]), gi = g;
        }
        const unsigned mk = rt_wmax(gi >= 0 ? key : 0u);
        if (!mk) break;
        const int b = (int)rt_wmin(gi >= 0 && key == mk ? (unsigned)gi : 0xffffffffu);
        chosen |= 1ull << b;
    }
    unsigned allowed = 0; /* this lane's experts still allowed, bit j */
#pragma unroll
    for (int j = 0; j < NPL; j++) {
        const int e = lane + 32 * j;
        if (e < E && (chosen >> (e / per) & 1)) allowed |= 1u << j;
    }
    float wsum = 0.0f, my_w = 0.0f;
    int my_e = 0;
    for (int s = 0; s < k; s++) {
        unsigned key = 0;
        int ji = -1;
#pragma unroll
        for (int j = NPL - 1; j >= 0; j--) /* the lower index last: ties to it */
            if ((allowed >> j & 1) && rt_key(bv[j]) >= key) key = rt_key(bv[j]), ji = j;
        const unsigned mk = rt_wmax(ji >= 0 ? key : 0u);
        int b = (int)rt_wmin(ji >= 0 && key == mk ? (unsigned)(lane + 32 * ji) : 0xffffffffu);
        if (!mk || b >= E) b = 0; /* none left: k_route's fallback (expert 0, its score) */
        float vb = 0.0f;
#pragma unroll
        for (int j = 0; j < NPL; j++)
            if (j == b >> 5) vb = pv[j];
        const float val = __shfl_sync(0xffffffffu, vb, b & 31);
        if ((b & 31) == lane) allowed &= ~(1u << (b >> 5));
        wsum = __fadd_rn(wsum, val);
        if (lane == s) my_w = val, my_e = b;
    }
    if (r.norm_topk) my_w = __fdiv_rn(my_w, __fadd_rn(wsum, 1e-20f));
    my_w = __fmul_rn(my_w, r.routed_scale);
    int rank = 0;
    for (int j = 0; j < k; j++) { /* rt_sort's stable order by expert index */
        const int ej = __shfl_sync(0xffffffffu, my_e, j);
        rank += ej < my_e || (ej == my_e && j < lane);
    }
    if (lane < k) top_e[(size_t)t * k + rank] = my_e, top_w[(size_t)t * k + rank] = my_w;
}

#endif
