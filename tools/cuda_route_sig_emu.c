/*
 * cuda_route_sig_emu.c — a CPU emulation of src/backend/cuda/cuda_route.cuh route_warp_sig (kind 2: sigmoid scores,
 * n_group groups of which topk_group, an optional bias; SLUICE_CUDA_ROUTER=2's k_router2) against
 * src/backend/cuda/cuda_ops.cu k_route's one-thread kind-2 code, for a change made without a GPU (tools/
 * cuda_mvfold_emu.c's approach): the warp's 32 lanes as arrays, each step of route_warp_sig transcribed (a lane's
 * entries e = lane + 32 j, lane g's serial scan of group g, the group and expert rounds as a max reduction of rt_key
 * then a min reduction of the index holding it, the winner's lane dropping its bit, norm_topk's sum in choice order,
 * the stable rank), the same float operations in the same order (host expf for CUDA's: both sides use it). 8
 * configurations (DeepSeek-V3's 256 / 8 groups / 4, one group of 32 and of 160, 64 groups of 2, 4 groups of 25, k 32)
 * x 3000 random rows, with ties (logits in steps of 0.5, biases shared by copied rows), scores of +0 against biases of
 * +0 / -0, -inf logits, rows of nothing but -inf (the fallbacks), with and without a bias: the experts and the weights
 * must be bitwise k_route's. A mutation (`>=` to `>` in the lane's expert pick, or the norm's + 1e-20 dropped) makes
 * hundreds to thousands of cases differ.
 * Build and run: cc -O1 -std=c11 -ffp-contract=off -o /tmp/route_sig_emu tools/cuda_route_sig_emu.c -lm &&
 * /tmp/route_sig_emu
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static unsigned long long rng = 88172645463325252ull;
static double urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }
static unsigned key(float v) {
    uint32_t u;
    float z = v == 0.0f ? 0.0f : v;
    memcpy(&u, &z, 4);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}
typedef struct {
    int E, k, norm, G, TG;
    float scale;
    const float *bias;
} R;

static void ref(const R *r, const float *lg, int *te, float *tw) {
    int E = r->E, k = r->k, G = r->G, per = E / G;
    float p[1024];
    unsigned char allowed[1024];
    float gscore[64];
    for (int e = 0; e < E; e++)
        p[e] = sigm(lg[e]);
#define BIASED(e) (r->bias ? p[e] + r->bias[e] : p[e])
    for (int g = 0; g < G; g++) {
        float a = -INFINITY, b = -INFINITY;
        for (int e = g * per; e < (g + 1) * per; e++) {
            float v = BIASED(e);
            if (v > a)
                b = a, a = v;
            else if (v > b)
                b = v;
        }
        gscore[g] = a + b;
    }
    for (int e = 0; e < E; e++)
        allowed[e] = 0;
    for (int s = 0; s < r->TG; s++) {
        int best = -1;
        for (int g = 0; g < G; g++)
            if (gscore[g] != -INFINITY && (best < 0 || gscore[g] > gscore[best]))
                best = g;
        if (best < 0)
            break;
        gscore[best] = -INFINITY;
        for (int e = best * per; e < (best + 1) * per; e++)
            allowed[e] = 1;
    }
    for (int s = 0; s < k; s++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (allowed[e] && (best < 0 || BIASED(e) > BIASED(best)))
                best = e;
        if (best < 0)
            best = 0;
        allowed[best] = 0;
        te[s] = best;
        tw[s] = p[best];
    }
    if (r->norm) {
        float ws = 0;
        for (int s = 0; s < k; s++)
            ws += tw[s];
        ws += 1e-20f;
        for (int s = 0; s < k; s++)
            tw[s] /= ws;
    }
    for (int s = 0; s < k; s++)
        tw[s] *= r->scale;
    for (int s = 1; s < k; s++) {
        int e = te[s], i = s - 1;
        float w = tw[s];
        for (; i >= 0 && te[i] > e; i--)
            te[i + 1] = te[i], tw[i + 1] = tw[i];
        te[i + 1] = e, tw[i + 1] = w;
    }
}

#define NPL 8
static void warp(const R *r, const float *lg, int *top_e, float *top_w) {
    int E = r->E, k = r->k, G = r->G, per = E / G;
    float pv[32][NPL], bv[32][NPL], sb[256];
    for (int l = 0; l < 32; l++)
        for (int j = 0; j < NPL; j++) {
            int e = l + 32 * j;
            pv[l][j] = e < E ? sigm(lg[e]) : 0.0f;
            bv[l][j] = e < E && r->bias ? pv[l][j] + r->bias[e] : pv[l][j];
            if (e < E)
                sb[e] = bv[l][j];
        }
    float gs[32][2];
    for (int l = 0; l < 32; l++)
        for (int h = 0; h < 2; h++) {
            gs[l][h] = -INFINITY;
            int g = l + 32 * h;
            if (g >= G)
                continue;
            float a = -INFINITY, b = -INFINITY;
            for (int e = g * per; e < (g + 1) * per; e++) {
                float v = sb[e];
                if (v > a)
                    b = a, a = v;
                else if (v > b)
                    b = v;
            }
            gs[l][h] = a + b;
        }
    unsigned long long chosen = 0;
    for (int s = 0; s < r->TG; s++) {
        unsigned kk[32];
        int gi[32];
        for (int l = 0; l < 32; l++) {
            unsigned key_ = 0;
            int g_ = -1;
            for (int h = 1; h >= 0; h--) {
                int g = l + 32 * h;
                if (g < G && gs[l][h] != -INFINITY && !(chosen >> g & 1) && key(gs[l][h]) >= key_)
                    key_ = key(gs[l][h]), g_ = g;
            }
            kk[l] = key_, gi[l] = g_;
        }
        unsigned mk = 0;
        for (int l = 0; l < 32; l++) {
            unsigned v = gi[l] >= 0 ? kk[l] : 0u;
            if (v > mk)
                mk = v;
        }
        if (!mk)
            break;
        unsigned b = 0xffffffffu;
        for (int l = 0; l < 32; l++) {
            unsigned v = gi[l] >= 0 && kk[l] == mk ? (unsigned)gi[l] : 0xffffffffu;
            if (v < b)
                b = v;
        }
        chosen |= 1ull << b;
    }
    unsigned allowed[32];
    for (int l = 0; l < 32; l++) {
        allowed[l] = 0;
        for (int j = 0; j < NPL; j++) {
            int e = l + 32 * j;
            if (e < E && (chosen >> (e / per) & 1))
                allowed[l] |= 1u << j;
        }
    }
    float wsum = 0, my_w[32] = {0};
    int my_e[32] = {0};
    for (int s = 0; s < k; s++) {
        unsigned kk[32];
        int ji[32];
        for (int l = 0; l < 32; l++) {
            unsigned key_ = 0;
            int j_ = -1;
            for (int j = NPL - 1; j >= 0; j--)
                if ((allowed[l] >> j & 1) && key(bv[l][j]) >= key_)
                    key_ = key(bv[l][j]), j_ = j;
            kk[l] = key_, ji[l] = j_;
        }
        unsigned mk = 0;
        for (int l = 0; l < 32; l++) {
            unsigned v = ji[l] >= 0 ? kk[l] : 0u;
            if (v > mk)
                mk = v;
        }
        unsigned bb = 0xffffffffu;
        for (int l = 0; l < 32; l++) {
            unsigned v = ji[l] >= 0 && kk[l] == mk ? (unsigned)(l + 32 * ji[l]) : 0xffffffffu;
            if (v < bb)
                bb = v;
        }
        int b = (int)bb;
        if (!mk || b >= E)
            b = 0;
        float val = pv[b & 31][b >> 5];
        allowed[b & 31] &= ~(1u << (b >> 5));
        wsum = wsum + val;
        my_w[s] = val, my_e[s] = b;
    }
    for (int l = 0; l < 32; l++) {
        if (r->norm)
            my_w[l] = my_w[l] / (wsum + 1e-20f);
        my_w[l] = my_w[l] * r->scale;
    }
    for (int l = 0; l < k; l++) {
        int rank = 0;
        for (int j = 0; j < k; j++)
            rank += my_e[j] < my_e[l] || (my_e[j] == my_e[l] && j < l);
        top_e[rank] = my_e[l], top_w[rank] = my_w[l];
    }
}

int main(void) {
    int fails = 0, n = 0;
    const int cfg[][5] = {{256, 8, 8, 4, 1},  {256, 8, 8, 4, 0}, {32, 4, 1, 1, 1},  {160, 8, 1, 1, 1},
                          {128, 6, 64, 6, 1}, {100, 8, 4, 2, 0}, {64, 32, 8, 8, 1}, {256, 32, 2, 1, 1}};
    for (int c = 0; c < 8; c++)
        for (int it = 0; it < 3000; it++) {
            R r = {cfg[c][0], cfg[c][1], cfg[c][4], cfg[c][2], cfg[c][3], 2.5f, NULL};
            float lg[256], bias[256];
            int mode = it % 6;
            for (int e = 0; e < r.E; e++) {
                lg[e] = (float)((urand() - 0.5) * 8);
                if (mode == 1 || mode == 4)
                    lg[e] = roundf(lg[e] * 2) / 2; /* ties */
                if (mode == 2)
                    lg[e] = e % 7 == 3 ? -200.0f : lg[e]; /* sigmoid 0 (+0) */
                if (mode == 3)
                    lg[e] = urand() < 0.3 ? -INFINITY : lg[e];
                bias[e] = mode == 4   ? (float)((e / 3) % 5) / 8
                          : mode == 2 ? (e % 2 ? -0.0f : 0.0f)
                                      : (float)(urand() - 0.5) * 0.2f;
            }
            if (mode == 5)
                for (int e = 0; e < r.E; e++)
                    lg[e] = -INFINITY; /* nothing: the fallbacks */
            r.bias = it % 2 ? bias : NULL;
            int e0[32], e1[32];
            float w0[32], w1[32];
            ref(&r, lg, e0, w0), warp(&r, lg, e1, w1);
            n++;
            if (memcmp(e0, e1, r.k * 4) || memcmp(w0, w1, r.k * 4)) {
                if (fails++ < 5)
                    printf("differs: cfg %d it %d mode %d e0 %d e1 %d\n", c, it, mode, e0[0], e1[0]);
            }
        }
    printf("%d cases, %d differ\n", n, fails);
    return fails != 0;
}
