/*
 * cuda_mvfold_emu.c — a CPU emulation of src/backend/cuda/cuda_mv.cu mv1c_body's fold with MF = 2 (SLUICE_CUDA_MVFOLD=2)
 * and cuda_mv.cuh fold_row, for changes made without a GPU (tools/cuda_mv1p_emu.c's approach: the kernel's index
 * arithmetic transcribed, values replaced by tags). For q4 (1024 pairs a chunk) and q8 (512), R = 4, 8, 16, 32 rows a
 * CTA, groups of 1, 2 and 4 blocks, every chunk length kcn (a multiple of the group's blocks, up to KC = pairs / R) and
 * every number of rows nr of a tile (1 .. R), exhaustively: each of the 256 threads takes its P pairs q = tid + k 256
 * (mv1c_pair: the row by the f32 reciprocal of kcn, as the kernel computes it) and stores the tags of its I_b,
 * s_g d_b and group bias row-major (RS = KC + 4 words a row) into the codes' room (NP * BB bytes); then each folding
 * thread walks fold_row_g's quads and tail, and the operands its two chains consume are compared with fold_chunk's:
 * acc = fma(I(r, b), M(r, b), acc) for b = 0 .. kcn - 1 and accb = fma(B(r, g), xg(g), accb) for each group g in
 * order. Also checked: no word is stored twice, every store and load stays in the codes' room (or in sxg[KC]), every
 * load (16, 8 or 4 bytes) is aligned and reads words that were staged, and each load instruction of the nr folding
 * threads has no bank conflict (sB's rows at RS >> G words: their LDS.64 / LDS too); the stores' worst bank conflict
 * is printed.
 * Build and run: cc -O2 -std=c11 -o /tmp/mvfold_emu tools/cuda_mvfold_emu.c && /tmp/mvfold_emu
 * (prints one line a (type, R) and "emu: N cases, F failures"; exit 1 on a failure).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NTH = 256, U = 16 };
enum { T_NONE = 0, T_I = 1, T_M = 2, T_B = 3, T_X = 4 };
#define TAG(k, r, b) ((k) << 24 | (r) << 16 | (b))

static long cases, fails;
static int worst_store, worst_store32; /* the stores' worst conflict: any kcn, kcn a multiple of 32 */
#define FAIL(...) do { if (fails++ < 20) printf(__VA_ARGS__); } while (0)

static void mv1c_pair(int q, int kcn, float rk, int *rl, int *bl) { /* cuda_mv.cu mv1c_pair: f32 operations, as the kernel's */
    volatile float t = ((float)q + 0.5f) * rk; /* __fmul_rn(__fadd_rn(q, 0.5), rk): the sum is exact */
    *rl = (int)t;
    *bl = q - *rl * kcn;
}

/* a warp's store of one word a thread (-1: no store): the ways of its worst bank conflict */
static int store_ways(const int *addr) {
    int ways = 1;
    for (int i = 0; i < 32; i++) {
        if (addr[i] < 0) continue;
        int n = 0, seen[32], ns = 0;
        for (int k = 0; k < 32; k++) {
            if (addr[k] < 0 || addr[k] % 32 != addr[i] % 32) continue;
            int dup = 0;
            for (int s = 0; s < ns; s++) dup |= seen[s] == addr[k];
            if (!dup) seen[ns++] = addr[k], n++;
        }
        if (n > ways) ways = n;
    }
    return ways;
}

/* one load instruction of the nr folding threads (t < nr <= 32), w words each (4: LDS.128, 2: LDS.64, 1: LDS) at word
 * addresses addr[t]: the warp's request goes in phases of 32 / w threads, within which distinct addresses must take
 * distinct banks */
static int lds_ok(const int *addr, int nr, int w) {
    const int ph = 32 / w;
    for (int p = 0; p < nr; p += ph)
        for (int a = p; a < p + ph && a < nr; a++)
            for (int b = a + 1; b < p + ph && b < nr; b++)
                if (addr[a] != addr[b])
                    for (int e = 0; e < w; e++)
                        for (int f = 0; f < w; f++)
                            if ((addr[a] + e) % 32 == (addr[b] + f) % 32) return 0;
    return 1;
}

static int emu_R, emu_kcn; /* the case, for messages */

/* one load of the fold, w words at word w0 of arr (lim words; lim < 0: -lim, and the address noted negated: sxg's)
 * into dst, its address into *la */
static void ldw(int *dst, const int *arr, int lim, int w0, int w, int *la) {
    *la = lim < 0 ? -1 - w0 : w0;
    if (lim < 0) lim = -lim;
    if (w0 % w || w0 < 0 || w0 + w > lim) { FAIL("R %d kcn %d: a load of %d words at word %d\n", emu_R, emu_kcn, w, w0); return; }
    for (int e = 0; e < w; e++) {
        dst[e] = arr[w0 + e];
        if (dst[e] == T_NONE) FAIL("R %d kcn %d: a load reads an unstaged word %d\n", emu_R, emu_kcn, w0 + e);
    }
}

typedef struct { int i[4], m[4], b[4], x[4]; } slot; /* a quad's operands in registers (cuda_mv.cuh fold_row_g) */

static void one(int np_chunk, int BB, int R, int G, int kcn, int nr, int *sc, int *sxg) {
    const int KC = np_chunk / R, RS = KC + 4, P = np_chunk / NTH, words = np_chunk * BB / 4, bmask = (1 << G) - 1;
    const int oI = 0, oM = R * RS, oB = 2 * R * RS, RSB = RS >> G; /* sB's rows: RS >> gshift words */
    const int np = nr * kcn;
    const float rk = 1.0f / (float)kcn;
    cases++;
    emu_R = R, emu_kcn = kcn;
    for (int i = 0; i < words; i++) sc[i] = T_NONE;
    for (int i = 0; i < KC; i++) sxg[i] = i < (kcn >> G) ? TAG(T_X, 0, i) : T_NONE; /* the kernel's cp4 / swi_stage */
    /* the staging: pair k of every thread is one store instruction of each warp */
    for (int k = 0; k < P; k++)
        for (int w = 0; w < NTH / 32; w++) {
            int aI[32], aB[32];
            for (int l = 0; l < 32; l++) {
                const int q = w * 32 + l + k * NTH;
                aI[l] = aB[l] = -1;
                if (q >= np) continue;
                int rl, bl;
                mv1c_pair(q, kcn, rk, &rl, &bl);
                if (rl != q / kcn || bl != q % kcn) { FAIL("pair %d kcn %d: row %d block %d\n", q, kcn, rl, bl); continue; }
                const int st[3] = {oI + rl * RS + bl, oM + rl * RS + bl, !(bl & bmask) ? oB + rl * RSB + (bl >> G) : -1};
                const int tg[3] = {TAG(T_I, rl, bl), TAG(T_M, rl, bl), TAG(T_B, rl, bl >> G)};
                for (int s = 0; s < 3; s++) {
                    if (st[s] < 0) continue;
                    if (st[s] >= words) { FAIL("R %d kcn %d: store past the codes' room\n", R, kcn); continue; }
                    if (sc[st[s]] != T_NONE) FAIL("R %d kcn %d G %d: word %d stored twice\n", R, kcn, G, st[s]);
                    sc[st[s]] = tg[s];
                }
                aI[l] = st[0], aB[l] = st[2];
            }
            const int wa = store_ways(aI), wb = store_ways(aB);
            if (wa > worst_store) worst_store = wa;
            if (wb > worst_store) worst_store = wb;
            if (!(kcn % 32) && wa > worst_store32) worst_store32 = wa;
            if (!(kcn % 32) && wb > worst_store32) worst_store32 = wb;
        }
    /* the fold: fold_row_g<G> of each thread t < nr, transcribed (fold_slot's registers as words) */
    const int nq = kcn >> 2, NL = nq * 4, BW = 4 >> G; /* loads a slot: i, m, b, x; words of b and x */
    int *seqA = malloc((size_t)2 * kcn * nr * sizeof *seqA), *seqB = malloc((size_t)2 * kcn * nr * sizeof *seqB);
    int *la = malloc((size_t)NL * 32 * sizeof *la); /* the word address of load l of thread t: la[l * 32 + t] */
    int na = 0, nbb = 0;
    for (int t = 0; t < nr; t++) {
        const int si = oI + t * RS, sm = oM + t * RS, sb = oB + t * RSB;
        slot A;
        int nl = 0;
        na = nbb = 0;
        for (int q = 0; q < nq; q++) { /* a quad's four loads, then its operations */
            ldw(A.i, sc, words, si + 4 * q, 4, la + nl++ * 32 + t), ldw(A.m, sc, words, sm + 4 * q, 4, la + nl++ * 32 + t);
            ldw(A.b, sc, words, sb + BW * q, BW, la + nl++ * 32 + t), ldw(A.x, sxg, -KC, BW * q, BW, la + nl++ * 32 + t);
            for (int k = 0; k < 4; k++) {
                seqA[t * 2 * kcn + na++] = A.i[k], seqA[t * 2 * kcn + na++] = A.m[k];
                if (!(k & bmask)) seqB[t * 2 * kcn + nbb++] = A.b[k >> G], seqB[t * 2 * kcn + nbb++] = A.x[k >> G];
            }
        }
        for (int bl = nq << 2; bl < kcn; bl++) { /* the tail, one word at a time */
            seqA[t * 2 * kcn + na++] = sc[si + bl], seqA[t * 2 * kcn + na++] = sc[sm + bl];
            if (!(bl & bmask)) seqB[t * 2 * kcn + nbb++] = sc[sb + (bl >> G)], seqB[t * 2 * kcn + nbb++] = sxg[bl >> G];
        }
        if (nl != 4 * nq) FAIL("R %d kcn %d: %d loads, expected %d\n", R, kcn, nl, 4 * nq);
        /* fold_chunk's operands for row t */
        int ok = na == 2 * kcn && nbb == 2 * (kcn >> G);
        for (int bl = 0; ok && bl < kcn; bl++)
            ok = seqA[t * 2 * kcn + 2 * bl] == TAG(T_I, t, bl) && seqA[t * 2 * kcn + 2 * bl + 1] == TAG(T_M, t, bl);
        for (int g = 0; ok && g < (kcn >> G); g++)
            ok = seqB[t * 2 * kcn + 2 * g] == TAG(T_B, t, g) && seqB[t * 2 * kcn + 2 * g + 1] == TAG(T_X, 0, g);
        if (!ok) FAIL("BB %d R %d G %d kcn %d nr %d: row %d's chains differ from fold_chunk's\n", BB, R, G, kcn, nr, t);
    }
    /* each load instruction of the nr threads (those of sI, sM, sB: sxg's is one address, a broadcast) */
    for (int l = 0; nq && l < NL; l++) {
        int addr[32], shared_ = 1;
        for (int t = 0; t < nr; t++) addr[t] = la[l * 32 + t], shared_ &= addr[t] < 0;
        if (!shared_ && !lds_ok(addr, nr, l % 4 < 2 ? 4 : BW)) FAIL("R %d kcn %d G %d: load %d: bank conflict\n", R, kcn, G, l);
        for (int t = 1; shared_ && t < nr; t++)
            if (addr[t] != addr[0]) FAIL("R %d kcn %d: load %d of sxg not one address\n", R, kcn, l);
    }
    free(seqA), free(seqB), free(la);
}

int main(void) {
    for (int dt = 0; dt < 2; dt++) {
        const int NPC = dt ? 512 : 1024, BB = dt ? 32 : 16; /* cuda_mv.cu MV1C_NP: q8, q4 */
        int *sc = malloc((size_t)NPC * BB), *sxg = malloc((size_t)NPC * sizeof *sxg);
        for (int R = 4; R <= 32; R *= 2) {
            const int KC = NPC / R;
            if (3 * R * (KC + 4) * 4 > NPC * BB || KC % 8) { FAIL("%s R %d: the static_assert fails\n", dt ? "q8" : "q4", R); continue; }
            const long c0 = cases;
            worst_store = worst_store32 = 1;
            for (int G = 0; G <= 2; G++)
                for (int kcn = 1 << G; kcn <= KC; kcn += 1 << G)
                    for (int nr = 1; nr <= R; nr++) one(NPC, BB, R, G, kcn, nr, sc, sxg);
            printf("%s R %2d (KC %3d, RS %3d): %ld cases, worst store conflict %d-way (kcn a multiple of 32: %d-way)\n", dt ? "q8" : "q4", R, KC,
                   KC + 4, cases - c0, worst_store, worst_store32);
        }
        free(sc), free(sxg);
    }
    printf("emu: %ld cases, %ld failures\n", cases, fails);
    return fails ? 1 : 0;
}
