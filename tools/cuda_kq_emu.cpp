/*
 * cuda_kq_emu.cpp — src/backend/cuda/cuda_kq.cu's decoders and chunk staging run on the CPU, for changes made
 * without a GPU: cuda_kq_dec.cuh compiled as plain C++ (-ffp-contract=off: one rounding an operation, as the device's
 * __fmul_rn / __fsub_rn), every type's random valid blocks (kq_random) decoded piece by piece as k_kq does (a row at
 * 0-3 bytes past a 4-byte boundary, chunk by chunk: kq_chunk's aligned words copied to a staging buffer, lane l's
 * piece decoded from there at the kernel's offset) and compared bitwise with kq_row_to_f32, the scalar oracle; every
 * staged word read must lie in the span kq_chunk names. And launch_mm's token chunks (kq_launch_tokens, kq_launch_next)
 * for 1-4100 rows and larger, 1 token to 2^31 - 1: every token once, in order, every grid within 2^31 - 1 CTAs.
 * Build and run (after `make`):
 *   g++ -std=c++17 -O2 -ffp-contract=off -Wall -Wextra -Wno-unknown-pragmas -Isrc -Iinclude -o /tmp/kq_emu \
 *       tools/cuda_kq_emu.cpp build/libsluice.a -lm -pthread && /tmp/kq_emu
 * (one line a type, then "kq emu: N cases, F failures"; exit 1 on a failure).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "quant/kquant.h"
}

static int8_t g_iq2xxs[256 * 8], g_iq2xs[512 * 8], g_iq2s[1024 * 8], g_iq3xxs[256 * 4], g_iq3s[512 * 4], g_iq1s[2048 * 8];
#include "backend/cuda/cuda_kq_dec.cuh"

static int cases, fails;

/* the staged words of one chunk, as the warp's shared memory; guard: bytes past the span are poisoned */
template <int DT> static int run_type(int rows, int cols, int mis) {
    constexpr int BLK = KT<DT>::BLK, BYTES = KT<DT>::BYTES, PPB = BLK / 32;
    const int nb = cols / BLK, np = cols / 32;
    const size_t rb = (size_t)nb * BYTES;
    uint8_t *buf = (uint8_t *)malloc(rows * rb + 64), *h = buf + mis; /* malloc: 16-aligned, then mis bytes in */
    uint64_t st = 1234567 + (uint64_t)DT * 77 + (uint64_t)mis;
    kq_random((dt_type)DT, h, (size_t)rows * nb, &st);
    float *ref = (float *)malloc((size_t)cols * 4);
    int bad = 0;
    uint32_t sm[32 * 7 + 8];
    for (int r = 0; r < rows && !bad; r++) {
        const uint8_t *row = h + (size_t)r * rb;
        kq_row_to_f32((dt_type)DT, row, cols, ref);
        for (int c0 = 0, k = 0; c0 < np; c0 += 32, k++) {
            uintptr_t a;
            int nw;
            const int off = kq_chunk<DT>((uintptr_t)row, k, nb, &a, &nw);
            if (nw > 32 * 7) { printf("  chunk of %d words > the kernel's %d\n", nw, 32 * 7); return 1; }
            memset(sm, 0xA5, sizeof sm);
            memcpy(sm, (const void *)a, (size_t)nw * 4); /* the words the lanes load (lane + 32 i < nw) */
            if (a & 3 || (uintptr_t)row + (size_t)k * (32 / PPB) * BYTES - a > 3) { bad = 1; break; }
            for (int lane = 0; lane < 32 && c0 + lane < np; lane++) {
                const int p = c0 + lane;
                const size_t at = (size_t)off + (size_t)(lane / PPB) * BYTES;
                if (at + BYTES > (size_t)nw * 4) { printf("  lane %d reads past the staged words\n", lane); bad = 1; break; }
                float w[32];
                dec<DT>((const uint8_t *)sm + at, lane % PPB, w);
                if (memcmp(w, ref + (size_t)p * 32, sizeof w)) {
                    for (int i = 0; i < 32; i++)
                        if (memcmp(&w[i], &ref[p * 32 + i], 4)) {
                            printf("  row %d value %d: %.9g != oracle %.9g\n", r, p * 32 + i, w[i], ref[p * 32 + i]);
                            break;
                        }
                    bad = 1;
                    break;
                }
            }
        }
    }
    free(buf), free(ref);
    return bad;
}

template <int DT> static void run(void) {
    const int blk = KT<DT>::BLK;
    const int shapes[][2] = {{9, blk}, {5, 3 * blk}, {4, 33 * blk}, {3, (blk == 32 ? 4096 : 2560)}};
    int bad = 0;
    for (const auto &s : shapes)
        for (int mis = 0; mis < 4; mis++) {
            cases++;
            bad |= run_type<DT>(s[0], s[1], mis);
        }
    fails += bad;
    printf("%-8s %s\n", dt_name((dt_type)DT), bad ? "DIFFERS from kq_row_to_f32" : "bitwise kq_row_to_f32 (every piece, chunk, offset)");
}

/* launch_mm's launches (kq_launch_tokens, kq_launch_next) for rows and n tokens: they take [0, n) in order, each a
 * positive number of tokens within the step, with a grid of at most 2^31 - 1 CTAs, and end */
static int check_launch(int rows, int n) {
    const int most = kq_launch_tokens(rows);
    const long long rb = ((long long)rows + KQ_WARPS - 1) / KQ_WARPS;
    if (most <= 0 || most % KQ_T || rb * (most / KQ_T) > 0x7fffffffLL) {
        printf("  rows %d: %d tokens a launch\n", rows, most);
        return 1;
    }
    long long launches = 0, covered = 0;
    for (int t0 = 0; t0 < n; t0 = kq_launch_next(t0, n, most)) {
        const int m = n - t0 < most ? n - t0 : most;
        if (t0 != covered || m <= 0 || rb * ((m + KQ_T - 1) / KQ_T) > 0x7fffffffLL || ++launches > n / most + 1) {
            printf("  rows %d, %d tokens: launch %lld at token %d of %d tokens\n", rows, n, launches, t0, m);
            return 1;
        }
        covered += m;
    }
    if (covered != n) printf("  rows %d, %d tokens: %lld covered\n", rows, n, covered);
    return covered != n;
}

int main(void) {
    const int ns[] = {1, 7, 8, 9, 37, 512, 0x7fffffff}, big[] = {65536, 1 << 28, 0x7ffffff0, 0x7fffffff};
    int lbad = 0;
    for (int rows = 1; rows <= 4096 + 4 && !lbad; rows++)
        for (int n : ns) lbad = lbad || check_launch(rows, n);
    for (int rows : big)
        for (int n : ns) lbad = lbad || check_launch(rows, n);
    cases++, fails += lbad;
    printf("launches %s\n", lbad ? "WRONG" : "take every token once for rows 1-4100 and larger (router rows included)");
    memcpy(g_iq2xxs, kq_iq_grid(DT_IQ2_XXS), sizeof g_iq2xxs), memcpy(g_iq2xs, kq_iq_grid(DT_IQ2_XS), sizeof g_iq2xs);
    memcpy(g_iq2s, kq_iq_grid(DT_IQ2_S), sizeof g_iq2s), memcpy(g_iq3xxs, kq_iq_grid(DT_IQ3_XXS), sizeof g_iq3xxs);
    memcpy(g_iq3s, kq_iq_grid(DT_IQ3_S), sizeof g_iq3s), memcpy(g_iq1s, kq_iq_grid(DT_IQ1_S), sizeof g_iq1s);
    run<DT_Q2_K>(), run<DT_Q3_K>(), run<DT_Q4_K>(), run<DT_Q5_K>(), run<DT_Q6_K>(), run<DT_IQ4_NL>(), run<DT_IQ4_XS>();
    run<DT_Q5_0>(), run<DT_Q5_1>(), run<DT_IQ2_XXS>(), run<DT_IQ2_XS>(), run<DT_IQ2_S>(), run<DT_IQ3_XXS>();
    run<DT_IQ3_S>(), run<DT_IQ1_S>(), run<DT_IQ1_M>();
    printf("kq emu: %d cases, %d failures\n", cases, fails);
    return fails ? 1 : 0;
}
