/*
 * kernels_amx.c — the q4 int8-activation matmul over several tokens (a prefill) on AMX-INT8 tiles (TDPBUSD),
 * bitwise kernels.h's canonical arithmetic (so bitwise kernels_avx512_i8p.c and the scalar oracle): compiled with
 * kernels_avx512.c's flags and -mamx-tile -mamx-int8 (the Makefile), tried first by kernels_avx512.c's q4 entry where
 * kern_amx_ready says the CPU and the kernel allow tiles, and SLUICE_CPU_AMX is not 0.
 *
 * The canonical order folds one exact integer per lane of 8 columns (kernels.h: acc[l] = fma((float)I_l, scale *
 * d_b, acc[l])), so a tile product may sum only one lane: K is 8 bytes (the lane's 4 even-column codes against the
 * token's 4 even-column values, and the 4 odd ones), not the 64 a tile holds. Per (row block of 16, token tile of
 * 16, step of 128 columns, lane l): C[row][token] = TDPBUSD(A = the 16 rows' 8 unpacked codes of lane l, B = the 16
 * tokens' 8 values of lane l), stored, and each row's 16 tokens folded as one vector: acc[row] =
 * fma(cvt(C[row]), sd[row], acc[row]) with sd = scale(row, group) * d_b(tokens), the lanes held in registers over
 * all the steps of one lane, lane after lane. Then per row, as vectors over the 16 tokens, the bias lanes (accb,
 * lane = group % 8, in group order) and the lane trees, exactly as the oracle's scalars. A tile does 1/8 of the
 * products it could; what it buys is the integer dot off the vector units: two FMA-port ops (cvt, fma) per 16 lanes
 * where vpdpbusd needs four (tools/amx_check.c measures it on an AMX host; docs/PERFORMANCE.md).
 *
 * Layouts (the workspace, per thread), each tile's bytes contiguous: WU [lanes][16 rows][8] the row block's codes
 * as bytes, lane l of step s at (16 s + l) * 128, row i's [4 low nibbles | 4 high nibbles] (= columns 8l, 8l+2, .. |
 * 8l+1, ..) at 8 i; XB [tile][lanes][2][16 tokens][4]
 * the tokens' q4-order codes (kern_act q4: each 128 columns as 64 even then 64 odd) as B tiles, lane l of step s at
 * (16 s + l) * 128: the 16 tokens' even dwords, then their odd ones. Missing rows and tokens are zeros, discarded.
 *
 * With SL_AMX_EMU (tests/kernels_amx_emu.c) the tile instructions are amx_emu.h's scalar emulation and the entry is
 * kern_amx_q4_prefill_emu, without the CPU check: the same loops run on any AVX-512 VNNI machine.
 *
 * Sections: tiles, detection, workspace, packing, the tile loop, the final sums, the entry.
 */
#include "kernels/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels_amx.h"
#include "quant/quant.h"

/* ---- tiles: the hardware's, or amx_emu.h's ---------------------------------------------------------------- */

#ifdef SL_AMX_EMU
#include "kernels/amx_emu.h"
#define AMX_NAME(f) f##_emu
#define T_CFG(c) amx_emu_loadconfig(c)
#define T_RELEASE() amx_emu_release()
#define T_ZERO(t) amx_emu_zero(t)
#define T_LOAD(t, p, s) amx_emu_load(t, p, s)
#define T_STORE(t, p, s) amx_emu_store(t, p, s)
#define T_DP(c, a, b) amx_emu_dpbusd(c, a, b)
#else
#include <sys/syscall.h>
#include <unistd.h>
#define AMX_NAME(f) f
#define T_CFG(c) _tile_loadconfig(c)
#define T_RELEASE() _tile_release()
#define T_ZERO(t) _tile_zero(t)
#define T_LOAD(t, p, s) _tile_loadd(t, p, s)
#define T_STORE(t, p, s) _tile_stored(t, p, s)
#define T_DP(c, a, b) _tile_dpbusd(c, a, b)
#endif

#define AMX_MAXC 8192   /* most columns (WU and XB sizes) */
#define AMX_TS 4        /* most token tiles of 16 per block (XB: 4 x 16 x cols bytes) */
#define AMX_XB 262144   /* bytes of packed activations per block of tokens */

/* LDTILECFG's operand, palette 1. Tiles 0, 1: C (16 rows x 16 int32); 2, 3: A (16 rows x 8 bytes); 4, 5: B (2 rows
 * x 64 bytes); the step loop alternates the pairs, so one step's store overlaps the next one's product. */
typedef struct {
    uint8_t palette, start_row, rsv[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

static void amx_cfg_make(amx_cfg *c) {
    memset(c, 0, sizeof *c);
    c->palette = 1;
    for (int t = 0; t < 2; t++) {
        c->rows[t] = 16, c->colsb[t] = 64;
        c->rows[2 + t] = 16, c->colsb[2 + t] = 8;
        c->rows[4 + t] = 2, c->colsb[4 + t] = 64;
    }
}

/* ---- detection: CPUID leaf 7 AMX-TILE and AMX-INT8, the OS's tile state, Linux's permission ---------------- */

static int amx_hw, amx_min_tok; /* the CPU and OS allow tiles; the smallest n_tok (0: off) */

#ifdef SL_AMX_EMU
static int amx_probe(void) { return 1; }
#else
#define AMX_ARCH_REQ_XCOMP_PERM 0x1023
#define AMX_XFEATURE_XTILEDATA 18
static void amx_cpuid(unsigned leaf, unsigned sub, unsigned r[4]) {
    __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}
static int amx_probe(void) {
    unsigned r[4];
    amx_cpuid(0, 0, r);
    if (r[0] < 7) return 0;
    amx_cpuid(7, 0, r);
    if (!(r[3] & (1u << 24)) || !(r[3] & (1u << 25))) return 0; /* EDX: AMX-TILE, AMX-INT8 */
    amx_cpuid(1, 0, r);
    if (!(r[2] & (1u << 27))) return 0; /* OSXSAVE */
    /* XTILEDATA is off in XCR0 until the process asks (Linux 5.16+, arch/x86/kernel/fpu/xstate.c) */
    if (syscall(SYS_arch_prctl, AMX_ARCH_REQ_XCOMP_PERM, AMX_XFEATURE_XTILEDATA)) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & (3u << 17)) == (3u << 17); /* XTILECFG, XTILEDATA */
}
#endif

static void amx_decide(void) {
    amx_hw = amx_probe();
    const char *e = getenv("SLUICE_CPU_AMX");
    const long n = e && *e ? strtol(e, NULL, 10) : 0; /* off until an AMX host has checked it (docs/PERFORMANCE.md) */
    amx_min_tok = n <= 0 ? 0 : n > 1 << 20 ? 1 << 20 : (int)n;
}

int AMX_NAME(kern_amx_ready)(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, amx_decide);
    return amx_hw ? amx_min_tok : 0;
}

void AMX_NAME(kern_amx_set_min)(int n_tok) {
    AMX_NAME(kern_amx_ready)();
    amx_min_tok = n_tok > 0 ? n_tok : 0;
}

/* ---- workspace: per thread, freed when it exits ------------------------------------------------------------ */

enum {
    AMX_WS_XB = 0,
    AMX_WS_WU = AMX_WS_XB + AMX_XB,
    AMX_WS_DT = AMX_WS_WU + 16 * AMX_MAXC,                 /* [tile][nb][16] token block scales */
    AMX_WS_ST = AMX_WS_DT + AMX_TS * (AMX_MAXC / 32) * 64, /* [tile][ng][16] token group sums */
    AMX_WS_SF = AMX_WS_ST + AMX_TS * (AMX_MAXC / 32) * 64, /* [16][ng] the rows' scales */
    AMX_WS_BI = AMX_WS_SF + 16 * (AMX_MAXC / 32) * 4,      /* [16][ng] the rows' biases */
    AMX_WS_SD = AMX_WS_BI + 16 * (AMX_MAXC / 32) * 4,      /* [step][16 rows][16 tokens] one quad's products */
    AMX_WS_ACC = AMX_WS_SD + (AMX_MAXC / 128) * 1024,      /* [16 lanes][16 rows][16 tokens] */
    AMX_WS_C = AMX_WS_ACC + 16 * 1024,                     /* four C tiles stored (amx_tile's pipeline) */
    AMX_WS_OUT = AMX_WS_C + 4 * 1024,                      /* [16 rows][16 tokens] outputs */
    AMX_WS_BYTES = AMX_WS_OUT + 1024,
};

static pthread_key_t amx_key;
static int amx_key_ok;
static void amx_key_make(void) { amx_key_ok = pthread_key_create(&amx_key, free) == 0; }

static uint8_t *amx_ws(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    if (pthread_once(&once, amx_key_make) || !amx_key_ok) return NULL;
    uint8_t *ws = pthread_getspecific(amx_key);
    if (ws) return ws;
    ws = aligned_alloc(64, AMX_WS_BYTES);
    if (ws && pthread_setspecific(amx_key, ws)) {
        free(ws);
        ws = NULL;
    }
    return ws;
}

/* ---- packing ----------------------------------------------------------------------------------------------- */

typedef struct {
    const tn_mat *w;
    const kern_act *a;
    uint8_t *ws;
    float *y;
    size_t ldy;
    int cols, nb, ng, gsh, S, ns;  /* S: steps (the last may be short); ns: kern_act's sums per token */
    size_t soff;                   /* the group sums' offset in a->s */
    int t0, nt, ntile;             /* the token block */
} amx_job;

/* The 16 x 16 dword transpose: r[t] dword l -> r[l] dword t (unpacks within 128-bit lanes, then the lanes). */
static inline __attribute__((always_inline)) void amx_tr16(__m512i *r) {
    __m512i t[16], u[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]), t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) { /* u[4i + c], 128-bit lane k: dword 4k + c of rows 4i .. 4i+3 */
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88), v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xDD);
        const __m512i v2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88), v3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xDD);
        r[c] = _mm512_shuffle_i32x4(v0, v2, 0x88), r[8 + c] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
        r[4 + c] = _mm512_shuffle_i32x4(v1, v3, 0x88), r[12 + c] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
    }
}

/* Tokens [t0, t0+nt) into XB (16 tokens' even, then odd, dwords of a step transposed at once), DT, ST (tile j:
 * tokens t0+16j ..), zeros past nt. */
static void amx_pack_tokens(const amx_job *J) {
    const kern_act *a = J->a;
    uint8_t *xb = J->ws + AMX_WS_XB;
    float *dt = (float *)(void *)(J->ws + AMX_WS_DT), *st = (float *)(void *)(J->ws + AMX_WS_ST);
    const size_t tile_xb = (size_t)J->S * 16 * 128;
    memset(dt, 0, (size_t)J->ntile * (size_t)J->nb * 64);
    memset(st, 0, (size_t)J->ntile * (size_t)J->ng * 64);
    for (int j = 0; j < J->ntile; j++) {
        const int nt = J->nt - 16 * j < 16 ? J->nt - 16 * j : 16;
        const int8_t *q = a->q4 + (size_t)(J->t0 + 16 * j) * (size_t)J->cols;
        for (int s = 0; s < J->S; s++) {
            const int m = J->cols - 128 * s < 128 ? J->cols - 128 * s : 128; /* a short step: m/2 even, m/2 odd */
            const __mmask64 mk = m == 128 ? ~(__mmask64)0 : (((__mmask64)1 << (m / 2)) - 1);
            uint8_t *x = xb + (size_t)j * tile_xb + (size_t)s * 16 * 128;
            for (int h = 0; h < 2; h++) {
                __m512i r[16];
                for (int t = 0; t < 16; t++)
                    r[t] = t < nt ? _mm512_maskz_loadu_epi8(mk, q + (size_t)t * (size_t)J->cols + 128 * s + h * (m / 2))
                                  : _mm512_setzero_si512();
                amx_tr16(r);
                for (int l = 0; l < 16; l++) _mm512_store_si512(x + (size_t)l * 128 + 64 * h, r[l]);
            }
        }
    }
    for (int t = 0; t < J->nt; t++) {
        const size_t tt = (size_t)(J->t0 + t);
        const int j = t / 16, n = t % 16;
        for (int b = 0; b < J->nb; b++) dt[((size_t)j * J->nb + (size_t)b) * 16 + (size_t)n] = a->d[tt * (size_t)J->nb + (size_t)b];
        const float *xs = a->s + tt * (size_t)J->ns + J->soff;
        for (int g = 0; g < J->ng; g++) st[((size_t)j * J->ng + (size_t)g) * 16 + (size_t)n] = xs[g];
    }
}

/* ng scales (or biases) p[o ..] of w as f32 (the exact conversions of q_scale_at, 16 a vector). */
static void amx_row_f32(const tn_mat *w, const void *p, size_t o, int ng, float *out) {
    if (w->sdtype == DT_F32) {
        memcpy(out, (const float *)p + o, (size_t)ng * sizeof(float));
        return;
    }
    const uint16_t *h = (const uint16_t *)p + o;
    int g = 0;
    for (; g + 16 <= ng; g += 16) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(h + g));
        _mm512_storeu_ps(out + g, w->sdtype == DT_BF16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16))
                                                      : _mm512_cvtph_ps(v));
    }
    for (; g < ng; g++) out[g] = q_scale_at(p, w->sdtype, o + (size_t)g);
}

/* Rows [r, r+nr) into WU (each step's 16 rows of low nibbles, then of high nibbles, transposed to lanes at once),
 * SF and BI (f32); zeros past nr. */
static void amx_pack_rows(const amx_job *J, int r, int nr) {
    const tn_mat *w = J->w;
    uint8_t *wu = J->ws + AMX_WS_WU;
    float *sf = (float *)(void *)(J->ws + AMX_WS_SF), *bi = (float *)(void *)(J->ws + AMX_WS_BI);
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i i0 = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i i1 = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    const uint8_t *q = (const uint8_t *)w->data + (size_t)r * (size_t)J->cols / 2;
    for (int s = 0; s < J->S; s++) {
        const int m = J->cols - 128 * s < 128 ? J->cols - 128 * s : 128;
        const __mmask64 mk = m == 128 ? ~(__mmask64)0 : (((__mmask64)1 << (m / 2)) - 1);
        __m512i lo[16], hi[16];
        for (int i = 0; i < 16; i++) {
            const __m512i c = i < nr ? _mm512_maskz_loadu_epi8(mk, q + (size_t)i * (size_t)J->cols / 2 + 64 * (size_t)s)
                                     : _mm512_setzero_si512();
            lo[i] = _mm512_and_si512(c, m4), hi[i] = _mm512_and_si512(_mm512_srli_epi16(c, 4), m4);
        }
        amx_tr16(lo);
        amx_tr16(hi);
        uint8_t *u = wu + (size_t)s * 16 * 128;
        for (int l = 0; l < 16; l++) { /* lane l: row i's [4 low | 4 high] at 8 i */
            _mm512_store_si512(u + (size_t)l * 128, _mm512_permutex2var_epi32(lo[l], i0, hi[l]));
            _mm512_store_si512(u + (size_t)l * 128 + 64, _mm512_permutex2var_epi32(lo[l], i1, hi[l]));
        }
    }
    for (int i = 0; i < 16; i++) {
        float *sfi = sf + (size_t)i * (size_t)J->ng, *bii = bi + (size_t)i * (size_t)J->ng;
        if (i >= nr) {
            memset(sfi, 0, (size_t)J->ng * sizeof(float));
            memset(bii, 0, (size_t)J->ng * sizeof(float));
            continue;
        }
        const size_t o = (size_t)(r + i) * (size_t)J->ng;
        amx_row_f32(w, w->scales, o, J->ng, sfi);
        if (w->bias_implied) /* computed from the scales, the same values bit for bit (kernels_tile_i8.h i8_bias_f32) */
            for (int g = 0; g < J->ng; g++) bii[g] = -8.0f * sfi[g];
        else
            amx_row_f32(w, w->biases, o, J->ng, bii);
    }
}

/* ---- the tile loop ----------------------------------------------------------------------------------------- */

/* One step of lane l on tiles (C, A, B): the 16 rows' lane sums for the 16 tokens of XB tile xb, stored in slot
 * s % 4 of cb. */
#define AMX_STEP(C, A, B, s)                                                                                      \
    do {                                                                                                          \
        T_ZERO(C);                                                                                                \
        T_LOAD(A, wu + (size_t)(16 * (s) + l) * 128, 8);                                                          \
        T_LOAD(B, xb + (size_t)(16 * (s) + l) * 128, 64);                                                         \
        T_DP(C, A, B);                                                                                            \
        T_STORE(C, cb + 1024 * ((s) & 3), 64);                                                                    \
    } while (0)

/* acc[i] = fma((float)C[i], sd[s][i], acc[i]) for the 16 rows: the oracle's FMA of lane l, 16 tokens a vector */
static inline __attribute__((always_inline)) void amx_fold(const uint8_t *c, const float *sd, __m512 *acc) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 64 * i)), _mm512_load_ps(sd + 16 * i), acc[i]);
}

/* Token tile j of the block against the packed rows: every lane's 16 row accumulators (vectors over the tokens)
 * into ACC [lane][row]. */
static void amx_tile(const amx_job *J, int j) {
    const uint8_t *wu = J->ws + AMX_WS_WU, *xb = J->ws + AMX_WS_XB + (size_t)j * (size_t)J->S * 16 * 128;
    const float *sf = (const float *)(const void *)(J->ws + AMX_WS_SF);
    const float *dt = (const float *)(const void *)(J->ws + AMX_WS_DT) + (size_t)j * (size_t)J->nb * 16;
    float *sd = (float *)(void *)(J->ws + AMX_WS_SD);
    __m512 *accs = (__m512 *)(void *)(J->ws + AMX_WS_ACC);
    uint8_t *cb = J->ws + AMX_WS_C;
    for (int q = 0; q < 4; q++) {
        const int sq = (J->nb - q + 3) / 4; /* the steps holding block 4s + q, so lanes 4q .. 4q+3 */
        for (int s = 0; s < sq; s++) { /* sd[s][row] = scale(row, group of block 4s+q) * d(tokens), the oracle's product */
            const int b = 4 * s + q;
            const __m512 dv = _mm512_load_ps(dt + (size_t)b * 16);
            for (int i = 0; i < 16; i++)
                _mm512_store_ps(sd + ((size_t)s * 16 + (size_t)i) * 16,
                                _mm512_mul_ps(_mm512_set1_ps(sf[(size_t)i * (size_t)J->ng + (size_t)(b >> J->gsh)]), dv));
        }
        for (int l = 4 * q; l < 4 * q + 4; l++) {
            __m512 acc[16]; /* in registers: every loop over it unrolled */
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
            /* a pipeline: steps s, s+1 on the tiles while s-2, s-1 (stored two steps earlier) are folded, so the
             * vector loads never wait for the tile store just issued */
            for (int s = 0; s < sq; s += 2) {
                AMX_STEP(0, 2, 4, s);
                if (s + 1 < sq) AMX_STEP(1, 3, 5, s + 1);
                if (s >= 2) {
                    amx_fold(cb + 1024 * ((s - 2) & 3), sd + (size_t)(s - 2) * 256, acc);
                    amx_fold(cb + 1024 * ((s - 1) & 3), sd + (size_t)(s - 1) * 256, acc);
                }
            }
            for (int s = sq < 2 ? 0 : (sq - 1) / 2 * 2; s < sq; s++) /* the last pair's steps, or the one step */
                amx_fold(cb + 1024 * (s & 3), sd + (size_t)s * 256, acc);
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) accs[l * 16 + i] = acc[i];
        }
    }
}

/* ---- the final sums ---------------------------------------------------------------------------------------- */

/* Rows [r, r+nr) x tile j's nt tokens from ACC: per row, as vectors over the tokens, h_k = acc_k + acc_(k+8), the
 * bias lanes v_(g%8) = fma(bias_g, s_g, v) in group order and the two lane trees (kernels.h), then y. */
static void amx_out(const amx_job *J, int j, int r, int nr, int nt) {
    const __m512 *accs = (const __m512 *)(const void *)(J->ws + AMX_WS_ACC);
    const float *bi = (const float *)(const void *)(J->ws + AMX_WS_BI);
    const float *st = (const float *)(const void *)(J->ws + AMX_WS_ST) + (size_t)j * (size_t)J->ng * 16;
    float *out = (float *)(void *)(J->ws + AMX_WS_OUT);
    for (int i = 0; i < nr; i++) {
        __m512 h[8], v[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) h[k] = _mm512_add_ps(accs[k * 16 + i], accs[(k + 8) * 16 + i]), v[k] = _mm512_setzero_ps();
        const float *bii = bi + (size_t)i * (size_t)J->ng;
        int g = 0;
        for (; g + 8 <= J->ng; g += 8) /* lane k = group % 8, constant indices: v stays in registers */
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) v[k] = _mm512_fmadd_ps(_mm512_set1_ps(bii[g + k]), _mm512_load_ps(st + (size_t)(g + k) * 16), v[k]);
        for (int k = 0; g + k < J->ng; k++) v[k] = _mm512_fmadd_ps(_mm512_set1_ps(bii[g + k]), _mm512_load_ps(st + (size_t)(g + k) * 16), v[k]);
        const __m512 th = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(h[0], h[1]), _mm512_add_ps(h[2], h[3])),
                                        _mm512_add_ps(_mm512_add_ps(h[4], h[5]), _mm512_add_ps(h[6], h[7])));
        const __m512 tb = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(v[0], v[1]), _mm512_add_ps(v[2], v[3])),
                                        _mm512_add_ps(_mm512_add_ps(v[4], v[5]), _mm512_add_ps(v[6], v[7])));
        _mm512_store_ps(out + 16 * i, _mm512_add_ps(th, tb));
    }
    for (int t = 0; t < nt; t++) {
        float *yt = J->y + (size_t)(J->t0 + 16 * j + t) * J->ldy + (size_t)r;
        for (int i = 0; i < nr; i++) yt[i] = out[16 * i + t];
    }
}

/* ---- the entry --------------------------------------------------------------------------------------------- */

int AMX_NAME(kern_amx_q4_prefill)(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) {
#ifndef SL_AMX_EMU
    const int mt = kern_amx_ready();
    if (!mt || a->n_tok < mt || r1 - r0 < 16) return -1;
#endif
    const int cols = w->cols, g = w->group;
    if (w->dtype != DT_Q4 || a->n_tok < 1 || r1 <= r0 || cols < 32 || cols % 32 || cols > AMX_MAXC ||
        (g != 32 && g != 64 && g != 128) || cols % g)
        return -1;
    uint8_t *ws = amx_ws();
    if (!ws) return -1;
    amx_job J = {.w = w, .a = a, .ws = ws, .y = y, .ldy = ldy, .cols = cols, .nb = cols / 32, .ng = cols / g,
                 .gsh = g == 32 ? 0 : g == 64 ? 1 : 2, .S = (cols + 127) / 128};
    J.ns = kern_act_ns(J.nb);
    J.soff = g == 32 ? 0 : g == 64 ? (size_t)J.nb : (size_t)(J.nb + J.nb / 2);
    int tiles = AMX_XB / (J.S * 16 * 128);
    tiles = tiles > AMX_TS ? AMX_TS : tiles;
    _Alignas(64) amx_cfg cfg;
    amx_cfg_make(&cfg);
    T_CFG(&cfg);
    for (int t0 = 0; t0 < a->n_tok; t0 += 16 * tiles) {
        J.t0 = t0;
        J.nt = a->n_tok - t0 < 16 * tiles ? a->n_tok - t0 : 16 * tiles;
        J.ntile = (J.nt + 15) / 16;
        amx_pack_tokens(&J);
        for (int r = r0; r < r1; r += 16) {
            const int nr = r1 - r < 16 ? r1 - r : 16;
            amx_pack_rows(&J, r, nr);
            for (int j = 0; j < J.ntile; j++) {
                amx_tile(&J, j);
                amx_out(&J, j, r, nr, J.nt - 16 * j < 16 ? J.nt - 16 * j : 16);
            }
        }
    }
    T_RELEASE();
    return 0;
}
#elif defined(SL_AMX_EMU)
int kern_amx_q4_prefill_emu(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) { return -1; }
#else /* not an x86-64 build: no AMX */
int kern_amx_ready(void) { return 0; }
void kern_amx_set_min(int n_tok) { (void)n_tok; }
int kern_amx_q4_prefill(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1) { return -1; }
#endif
