/*
 * cuda_fa_scan_emu.c — a CPU emulation of src/backend/cuda/cuda_flash_cl.cu fa16_comb_row_sc (SLUICE_CUDA_FA_CL's fold
 * beyond 16 chunks), for changes made without a GPU: a row's chunks in segments of nthr (32 .. 128), the warp's
 * shfl_up max scan (every lane reads before any lane writes), the warps' maxima and the carry, a_c and b_c made as
 * cuda_flash.cuh f16_fold makes them, then the L and O chains of f16_mix, against f16_fold / f16_mix applied serially
 * (fa16_comb_row's chain). Random rows of 1 .. 600 chunks with zeros of both signs, NaN, -inf, +inf and ties among
 * the maxima; L and O compared bitwise, M by value (a zero's sign may differ and is harmless: see the kernel's
 * comment). expf is the host's on both sides, as the device's is on both of its sides.
 * Build and run: cc -O2 -std=c11 -ffp-contract=off -o /tmp/fa_scan_emu tools/cuda_fa_scan_emu.c -lm && /tmp/fa_scan_emu
 * (prints "N runs, F differ"; exit 1 on a difference).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* f16_mix (and f16_fold's L update) */
static float mixf(float O, float o, float a, float b) { return fmaf(o, b, O * a); }
/* fa16_comb_row's chain: f16_fold then f16_mix, chunk after chunk */
static void serial(int n, const float *m, const float *l, const float *o, float *M, float *L, float *O) {
    *M = -INFINITY, *L = 0, *O = 0;
    for (int c = 0; c < n; c++) {
        float Mn = fmaxf(*M, m[c]), a = expf(*M - Mn), b = expf(m[c] - Mn);
        *L = fmaf(l[c], b, *L * a); *M = Mn; *O = mixf(*O, o[c], a, b);
    }
}
/* fa16_comb_row_sc, transcribed: thread t of nthr takes chunk s0 + t of each segment */
static void scan(int N, int nthr, const float *m, const float *l, const float *o, float *Mo, float *Lo, float *Oo) {
    float M = -INFINITY, L = 0, O = 0;
    int nw = nthr / 32;
    for (int s0 = 0; s0 < N; s0 += nthr) {
        int n = N - s0 < nthr ? N - s0 : nthr;
        float x[128], mm[128], xe[128], wmx[4], ab[128][2], sl[128];
        for (int t = 0; t < nthr; t++) mm[t] = t < n ? m[s0 + t] : -INFINITY, x[t] = mm[t];
        for (int off = 1; off < 32; off <<= 1) { /* shfl_up: all lanes read before any writes */
            float y[128];
            for (int t = 0; t < nthr; t++) y[t] = (t % 32) >= off ? x[t - off] : x[t];
            for (int t = 0; t < nthr; t++) if ((t % 32) >= off) x[t] = fmaxf(x[t], y[t]);
        }
        for (int t = 0; t < nthr; t++) xe[t] = (t % 32) >= 1 ? x[t - 1] : x[t];
        for (int w = 0; w < nw; w++) wmx[w] = x[w * 32 + 31];
        float tot = M;
        for (int t = 0; t < nthr; t++) {
            int warp = t / 32, lane = t % 32;
            float pre = M, tt = M;
            for (int w = 0; w < nw; w++) { if (w < warp) pre = fmaxf(pre, wmx[w]); tt = fmaxf(tt, wmx[w]); }
            tot = tt;
            if (t < n) {
                float Mp = lane ? fmaxf(pre, xe[t]) : pre, Mn = fmaxf(pre, x[t]);
                ab[t][0] = expf(Mp - Mn), ab[t][1] = expf(mm[t] - Mn), sl[t] = l[s0 + t];
            }
        }
        for (int c = 0; c < n; c++) { L = mixf(L, sl[c], ab[c][0], ab[c][1]); O = mixf(O, o[s0 + c], ab[c][0], ab[c][1]); }
        M = tot;
    }
    *Mo = M, *Lo = L, *Oo = O;
}
static float rnd(void) { return (float)((double)rand() / RAND_MAX * 20 - 10); }
int main(void) {
    int bad = 0, runs = 0;
    static float m[3000], l[3000], o[3000];
    for (int it = 0; it < 20000; it++) {
        int N = 1 + rand() % 600, nthr = 32 * (1 + rand() % 4);
        int mode = rand() % 6;
        for (int c = 0; c < N; c++) {
            m[c] = rnd(); l[c] = fabsf(rnd()); o[c] = rnd();
            if (mode == 1 && rand() % 5 == 0) m[c] = rand() % 2 ? 0.0f : -0.0f;
            if (mode == 2 && rand() % 7 == 0) m[c] = NAN;
            if (mode == 3 && rand() % 7 == 0) m[c] = -INFINITY;
            if (mode == 4) m[c] = (float)(rand() % 3) - 1.0f; /* ties */
            if (mode == 5 && rand() % 9 == 0) m[c] = INFINITY;
        }
        float a[3], b[3];
        serial(N, m, l, o, &a[0], &a[1], &a[2]);
        scan(N, nthr, m, l, o, &b[0], &b[1], &b[2]);
        runs++;
        /* M compared by value (zero sign may differ), L and O bitwise */
        if (!(a[0] == b[0] || (a[0] != a[0] && b[0] != b[0])) || memcmp(&a[1], &b[1], 4) || memcmp(&a[2], &b[2], 4)) {
            if (bad++ < 5) printf("diff N %d nthr %d mode %d: M %g/%g L %g/%g O %g/%g\n", N, nthr, mode, a[0], b[0], a[1], b[1], a[2], b[2]);
        }
    }
    printf("%d runs, %d differ\n", runs, bad);
    return bad != 0;
}
