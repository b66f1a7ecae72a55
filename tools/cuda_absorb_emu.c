/*
 * cuda_absorb_emu.c — a CPU emulation of src/backend/cuda/cuda_mla.cu k_mla_absorb (the absorbed queries in tiles) and
 * its host choice (mla_absorb, ab_launch), for changes made without a GPU: every CTA of the grid runs the kernel's
 * phases in the order its barriers give (each thread's fetch of rows 0 .. DI - 1 into its registers; per chunk of DI
 * rows: every thread's stage into ws / qs, the barrier, the next fetch, every thread's sums over the chunk's rows, the
 * barrier; the outputs), with the kernel's index arithmetic transcribed and f32 operations done one at a time (volatile:
 * no contraction, as __fmul_rn / __fadd_rn). Checked, for each case: every q_abs element is written exactly once and is
 * bitwise k_mla_absorb_ref's chain (acc = 0, acc = acc + q_i w_at(i, c) for i = 0 .. dn - 1; q_pe copied), transcribed;
 * every shared word read in a chunk's sums was staged in that chunk, no word is staged twice in a chunk, no shared
 * access leaves ws / qs, the 16-byte shared accesses are aligned; every global load of an oct (ab_load) is aligned to
 * its size and inside the matrix's codes / scales / biases (the data at an emulated address offset: 0, or 4 to take
 * the w_at path). Shapes: DeepSeek-V3's (128 heads, r 512, dr 64, dn 128, dv 128; 4 heads for 100 and 512 tokens),
 * r 96 / 192 / 384 / 40 / 36 / 8, dn 33 / 7 / 1, dr 0, f32 / bf16 / f16 / q8 / q4 with f32 / bf16 / f16 scales in groups
 * of 32, 64, 128; 1, 3, 8, 16, 17, 100 and 512 tokens.
 * Build and run: cc -O2 -std=c11 -ffp-contract=off -o /tmp/absorb_emu tools/cuda_absorb_emu.c -lm && /tmp/absorb_emu
 * (prints a line a case and "emu: N cases, F failures"; exit 1 on a failure).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* sluice's dt_type values (src/util/dtype.h) and cuda_mla.cu's VT codes */
enum { DT_F32 = 1, DT_F16 = 2, DT_BF16 = 3, DT_Q8 = 5, DT_Q4 = 6 };
enum { AB_GEN = 0, AB_F32, AB_BF16, AB_F16, AB_Q8, AB_Q4 };
#define AB_SMALLN 16

static long cases, fails;
#define FAIL(...) do { if (fails++ < 30) { printf("FAIL "); printf(__VA_ARGS__); printf("\n"); } } while (0)

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint32_t rnd(void) { rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17; return (uint32_t)(rng >> 16); }
static float frnd(void) { return ((float)(rnd() % 20001) - 10000.0f) * 1e-4f; }

static float fmul(float a, float b) { volatile float r = a * b; return r; } /* __fmul_rn */
static float fadd(float a, float b) { volatile float r = a + b; return r; } /* __fadd_rn */
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static float h2f(uint16_t h) { /* __half2float: IEEE half to float, exact */
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
    return s ? -v : v;
}

typedef struct { /* slcu_mat: the words at an emulated device address (addr % 16 == off) */
    const uint8_t *data, *scales, *biases;
    size_t data_bytes, sc_bytes;
    int dtype, sdtype, rows, cols, group, off;
} emat;
typedef struct { /* slcu_mla's fields k_mla_absorb reads */
    const float *q;
    size_t ldq;
    emat kv_b;
    int n, n_heads, r, dr, dn, dv;
    float *q_abs;
    int *written; /* per q_abs element: the stores */
} emla;

static float sc_at(const uint8_t *p, int sdt, size_t i) {
    if (sdt == DT_F32) { uint32_t u; memcpy(&u, p + 4 * i, 4); return u2f(u); }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    if (sdt == DT_BF16) return u2f((uint32_t)h << 16);
    return h2f(h);
}
static float w_at(const emat *m, int row, int c) { /* cuda_mla.cu w_at: element reads need no alignment check */
    const size_t k = (size_t)row * m->cols + c;
    uint16_t h;
    if (m->dtype == DT_F32) { uint32_t u; memcpy(&u, m->data + 4 * k, 4); return u2f(u); }
    if (m->dtype == DT_BF16) { memcpy(&h, m->data + 2 * k, 2); return u2f((uint32_t)h << 16); }
    if (m->dtype == DT_F16) { memcpy(&h, m->data + 2 * k, 2); return h2f(h); }
    const int code = m->dtype == DT_Q8 ? m->data[k] : (m->data[k / 2] >> (4 * (k & 1))) & 15;
    const size_t g = (size_t)row * (m->cols / m->group) + c / m->group;
    return fadd(fmul(sc_at(m->scales, m->sdtype, g), (float)code), sc_at(m->biases, m->sdtype, g));
}

/* a global load of bytes at byte offset o of an array of n bytes whose address is off modulo 16 */
static void gload(void *dst, const uint8_t *base, size_t o, size_t bytes, size_t n, int off, const char *what) {
    if ((off + o) % bytes) FAIL("%s: a %zu-byte load at offset %zu (address %% 16 = %d) is not aligned", what, bytes, o, off);
    if (o + bytes > n) FAIL("%s: a %zu-byte load at offset %zu past the %zu bytes", what, bytes, o, n);
    else memcpy(dst, base + o, bytes);
}

static float ab_word(uint32_t u, int sdt) {
    if (sdt == DT_F32) return u2f(u);
    if (sdt == DT_BF16) return u2f(u << 16);
    return h2f((uint16_t)u);
}
static void ab_load(int VT, const emat *m, int row, int c, uint32_t *w, uint32_t *s, uint32_t *b) {
    const size_t k = (size_t)row * m->cols + c;
    if (VT == AB_F32) {
        gload(w, m->data, 4 * k, 16, m->data_bytes, m->off, "f32 oct"), gload(w + 4, m->data, 4 * k + 16, 16, m->data_bytes, m->off, "f32 oct");
    } else if (VT == AB_BF16 || VT == AB_F16) gload(w, m->data, 2 * k, 16, m->data_bytes, m->off, "16-bit oct");
    else if (VT == AB_Q8) gload(w, m->data, k, 8, m->data_bytes, m->off, "q8 oct");
    else gload(w, m->data, k / 2, 4, m->data_bytes, m->off, "q4 oct");
    if (VT == AB_Q8 || VT == AB_Q4) {
        const size_t g = (size_t)row * (m->cols / m->group) + c / m->group;
        if (m->sdtype == DT_F32) gload(s, m->scales, 4 * g, 4, m->sc_bytes, 0, "scale"), gload(b, m->biases, 4 * g, 4, m->sc_bytes, 0, "bias");
        else {
            uint16_t hs = 0, hb = 0;
            gload(&hs, m->scales, 2 * g, 2, m->sc_bytes, 0, "scale"), gload(&hb, m->biases, 2 * g, 2, m->sc_bytes, 0, "bias");
            *s = hs, *b = hb;
        }
    }
}
static void ab_dequant(int VT, const uint32_t *w, uint32_t s, uint32_t b, int sdt, float *v) {
    for (int j = 0; j < 8; j++) {
        if (VT == AB_F32) v[j] = u2f(w[j]);
        else if (VT == AB_BF16) v[j] = u2f(((w[j / 2] >> (16 * (j & 1))) & 0xffffu) << 16);
        else if (VT == AB_F16) v[j] = h2f((uint16_t)(w[j / 2] >> (16 * (j & 1))));
        else {
            const int code = VT == AB_Q8 ? (int)((w[j / 4] >> (8 * (j & 3))) & 255) : (int)((w[0] >> (4 * j)) & 15);
            v[j] = fadd(fmul(ab_word(s, sdt), (float)code), ab_word(b, sdt));
        }
    }
}

typedef struct { int NT, CT, TPT, CPT, DI; } cfg;
static const cfg AB_D = {128, 64, 1, 1, 64}, AB_P = {256, 64, 4, 4, 32};

/* shared memory: the words and the chunk that staged each (-1 none) */
static float *ws, *qs;
static int *wst, *qst;
static void sstore(float *sm, int *st, int idx, int size, int chunk, float v, const char *what) {
    if (idx < 0 || idx >= size) { FAIL("%s: a store at %d outside its %d words", what, idx, size); return; }
    if (st[idx] == chunk) FAIL("%s: word %d stored twice in chunk %d", what, idx, chunk);
    st[idx] = chunk, sm[idx] = v;
}
static float sload(const float *sm, const int *st, int idx, int size, int chunk, const char *what) {
    if (idx < 0 || idx >= size) { FAIL("%s: a load at %d outside its %d words", what, idx, size); return NAN; }
    if (st[idx] != chunk) FAIL("%s: word %d read in chunk %d was staged in chunk %d", what, idx, chunk, st[idx]);
    return sm[idx];
}

/* one CTA (bx, by, bz) of k_mla_absorb<c, VT> */
static void run_cta(const cfg *cf, int VT, const emla *a, int bx, int by, int bz) {
    const int NT = cf->NT, CT = cf->CT, TPT = cf->TPT, CPT = cf->CPT, DI = cf->DI;
    const int NCG = CT / CPT, TT = NT / NCG * TPT, WS = CT + 4, QS = TT + 4;
    const int UO = VT ? DI * CT / 8 / NT : 1, UQ = DI * TT / NT, UE = DI * CT / NT;
    if (CT % CPT || NT % NCG || CT % 8 || (DI * CT) % (8 * NT) || (DI * TT) % NT) { FAIL("the tile's static_assert"); return; }
    const int h = by, t0 = bz * TT, c0 = bx * CT, row = a->r + a->dr, qh = a->dn + a->dr;
    const int nt = TT < a->n - t0 ? TT : a->n - t0;
    const float *q = a->q + (size_t)t0 * a->ldq + (size_t)h * qh;
    if (c0 >= a->r) {
        for (int tid = 0; tid < NT; tid++)
            for (int k = tid; k < nt * a->dr; k += NT) {
                const int tt = k / a->dr, j = k % a->dr;
                const size_t o = ((size_t)(t0 + tt) * a->n_heads + h) * row + a->r + j;
                a->q_abs[o] = q[(size_t)tt * a->ldq + a->dn + j], a->written[o]++;
            }
        return;
    }
    const int wr0 = h * (a->dn + a->dv);
    uint32_t(*rw)[8] = calloc((size_t)NT * UO, sizeof *rw), *rs = calloc((size_t)NT * UO, 4), *rb = calloc((size_t)NT * UO, 4);
    float *rq = calloc((size_t)NT * UQ, 4), *acc = calloc((size_t)NT * TPT * CPT, 4);
    for (int i = 0; i < DI * WS; i++) wst[i] = -1;
    for (int i = 0; i < DI * QS; i++) qst[i] = -1;
#define FETCH(i0)                                                                                                            \
    for (int tid = 0; tid < NT; tid++) {                                                                                     \
        for (int u = 0; u < UQ; u++) {                                                                                       \
            const int k = tid + u * NT, i = k % DI, tt = k / DI;                                                             \
            rq[tid * UQ + u] = (i0) + i < a->dn && tt < nt ? q[(size_t)tt * a->ldq + (i0) + i] : 0.0f;                       \
        }                                                                                                                    \
        if (VT != AB_GEN)                                                                                                    \
            for (int u = 0; u < UO; u++) {                                                                                   \
                const int k = tid + u * NT, i = k / (CT / 8), c = c0 + k % (CT / 8) * 8;                                     \
                if ((i0) + i < a->dn && c < a->r) ab_load(VT, &a->kv_b, wr0 + (i0) + i, c, rw[tid * UO + u], &rs[tid * UO + u], &rb[tid * UO + u]); \
            }                                                                                                                \
    }
    FETCH(0);
    for (int i0 = 0; i0 < a->dn; i0 += DI) {
        const int ch = i0 / DI;
        for (int tid = 0; tid < NT; tid++) { /* stage */
            for (int u = 0; u < UQ; u++) {
                const int k = tid + u * NT;
                sstore(qs, qst, k % DI * QS + k / DI, DI * QS, ch, rq[tid * UQ + u], "qs");
            }
            if (VT != AB_GEN) {
                for (int u = 0; u < UO; u++) {
                    const int k = tid + u * NT, i = k / (CT / 8), oc = k % (CT / 8), c = c0 + oc * 8;
                    float v[8] = {0};
                    if (i0 + i < a->dn && c < a->r) ab_dequant(VT, rw[tid * UO + u], rs[tid * UO + u], rb[tid * UO + u], a->kv_b.sdtype, v);
                    const int d = i * WS + oc * 8;
                    if (d % 4) FAIL("ws: a float4 store at word %d", d);
                    for (int j = 0; j < 8; j++) sstore(ws, wst, d + j, DI * WS, ch, v[j], "ws");
                }
            } else {
                for (int u = 0; u < UE; u++) {
                    const int k = tid + u * NT, i = k / CT, cc = k % CT;
                    sstore(ws, wst, i * WS + cc, DI * WS, ch, i0 + i < a->dn && c0 + cc < a->r ? w_at(&a->kv_b, wr0 + i0 + i, c0 + cc) : 0.0f, "ws");
                }
            }
        }
        /* __syncthreads */
        if (i0 + DI < a->dn) FETCH(i0 + DI);
        const int ni = DI < a->dn - i0 ? DI : a->dn - i0;
        for (int tid = 0; tid < NT; tid++) {
            const int cg = tid % NCG, tg = tid / NCG;
            for (int i = 0; i < ni; i++) {
                float qv[4], wv[4];
                const int qi = i * QS + tg * TPT, wi = i * WS + cg * CPT;
                if ((TPT == 4 && qi % 4) || (CPT == 4 && wi % 4)) FAIL("a float4 load of qs / ws at words %d / %d", qi, wi);
                for (int x = 0; x < TPT; x++) qv[x] = sload(qs, qst, qi + x, DI * QS, ch, "qs");
                for (int y = 0; y < CPT; y++) wv[y] = sload(ws, wst, wi + y, DI * WS, ch, "ws");
                for (int x = 0; x < TPT; x++)
                    for (int y = 0; y < CPT; y++) {
                        float *p = &acc[(tid * TPT + x) * CPT + y];
                        *p = fadd(*p, fmul(qv[x], wv[y]));
                    }
            }
        }
        /* __syncthreads */
    }
#undef FETCH
    for (int tid = 0; tid < NT; tid++) {
        const int cg = tid % NCG, tg = tid / NCG, c = c0 + cg * CPT;
        for (int x = 0; x < TPT; x++) {
            const int tt = tg * TPT + x;
            if (tt >= nt) break;
            const size_t o = ((size_t)(t0 + tt) * a->n_heads + h) * row + c;
            for (int y = 0; y < CPT; y++)
                if (c + y < a->r) a->q_abs[o + y] = acc[(tid * TPT + x) * CPT + y], a->written[o + y]++;
        }
    }
    free(rw), free(rs), free(rb), free(rq), free(acc);
}

/* mla_absorb's choice and ab_launch's grid */
static void launch(const emla *a, const char **which) {
    const emat *w = &a->kv_b;
    const int quant = w->dtype == DT_Q8 || w->dtype == DT_Q4;
    int vt = AB_GEN;
    if (a->r % 8 == 0 && !(w->off & 15) && (!quant || w->group % 8 == 0))
        vt = w->dtype == DT_F32 ? AB_F32 : w->dtype == DT_BF16 ? AB_BF16 : w->dtype == DT_F16 ? AB_F16 : w->dtype == DT_Q8 ? AB_Q8 : AB_Q4;
    const cfg *cf = a->n <= AB_SMALLN ? &AB_D : &AB_P;
    static const char *names[2][6] = {{"D gen", "D f32", "D bf16", "D f16", "D q8", "D q4"}, {"P gen", "P f32", "P bf16", "P f16", "P q8", "P q4"}};
    *which = names[cf == &AB_P][vt];
    const int TT = cf->NT / (cf->CT / cf->CPT) * cf->TPT;
    const int gx = (a->r + cf->CT - 1) / cf->CT + (a->dr > 0), gz = (a->n + TT - 1) / TT;
    for (int z = 0; z < gz; z++)
        for (int y = 0; y < a->n_heads; y++)
            for (int x = 0; x < gx; x++) run_cta(cf, vt, a, x, y, z);
}

static uint16_t rnd_half(void) { return (uint16_t)((rnd() & 0x8000) | ((10 + rnd() % 8) << 10) | (rnd() & 1023)); }
static uint16_t rnd_bf16(void) { return (uint16_t)((rnd() & 0x8000) | ((118 + rnd() % 10) << 7) | (rnd() & 127)); }

static void one_case(int nh, int r, int dr, int dn, int dv, int dt, int group, int sdt, int n, int off) {
    const int rows = nh * (dn + dv), row = r + dr, qh = dn + dr;
    const int quant = dt == DT_Q8 || dt == DT_Q4;
    const size_t nel = (size_t)rows * r;
    const size_t db = dt == DT_F32 ? 4 * nel : dt == DT_BF16 || dt == DT_F16 ? 2 * nel : dt == DT_Q8 ? nel : nel / 2;
    const size_t ng = quant ? (size_t)rows * (r / group) : 0, sb = ng * (sdt == DT_F32 ? 4 : 2);
    uint8_t *data = malloc(db), *sc = malloc(sb + 4), *bi = malloc(sb + 4);
    for (size_t i = 0; i < nel; i++) {
        if (dt == DT_F32) { const float f = frnd() * 0.1f; memcpy(data + 4 * i, &f, 4); }
        else if (dt == DT_BF16) { const uint16_t u = rnd_bf16(); memcpy(data + 2 * i, &u, 2); }
        else if (dt == DT_F16) { const uint16_t u = rnd_half(); memcpy(data + 2 * i, &u, 2); }
    }
    if (quant)
        for (size_t i = 0; i < db; i++) data[i] = (uint8_t)rnd();
    for (size_t g = 0; g < ng; g++) {
        if (sdt == DT_F32) {
            const float s = 1e-3f + (float)(rnd() % 1000) * 1e-5f, b = frnd() * 0.05f;
            memcpy(sc + 4 * g, &s, 4), memcpy(bi + 4 * g, &b, 4);
        } else {
            const uint16_t s = sdt == DT_BF16 ? rnd_bf16() & 0x7fff : rnd_half() & 0x7fff, b = sdt == DT_BF16 ? rnd_bf16() : rnd_half();
            memcpy(sc + 2 * g, &s, 2), memcpy(bi + 2 * g, &b, 2);
        }
    }
    const size_t ldq = (size_t)nh * qh + 3, nout = (size_t)n * nh * row;
    float *q = malloc((size_t)n * ldq * 4), *out = malloc(nout * 4);
    int *written = calloc(nout, sizeof(int));
    for (size_t i = 0; i < (size_t)n * ldq; i++) q[i] = frnd();
    for (size_t i = 0; i < nout; i++) out[i] = NAN;
    const emla a = {q, ldq, {data, sc, bi, db, sb, dt, sdt, rows, r, group, off}, n, nh, r, dr, dn, dv, out, written};
    const char *which = "";
    const long f0 = fails;
    launch(&a, &which);
    size_t nbad = 0, nwr = 0;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nh; h++)
            for (int c = 0; c < row; c++) {
                const size_t o = ((size_t)t * nh + h) * row + c;
                float ref;
                if (c >= r) ref = q[(size_t)t * ldq + (size_t)h * qh + dn + c - r];
                else {
                    ref = 0.0f;
                    for (int i = 0; i < dn; i++) ref = fadd(ref, fmul(q[(size_t)t * ldq + (size_t)h * qh + i], w_at(&a.kv_b, h * (dn + dv) + i, c)));
                }
                if (written[o] != 1) nwr++;
                if (memcmp(&ref, &out[o], 4)) {
                    if (!nbad++) FAIL("t %d h %d c %d: %.9g, the reference %.9g", t, h, c, out[o], ref);
                }
            }
    if (nwr) FAIL("%zu outputs not written exactly once", nwr);
    if (nbad) FAIL("%zu outputs differ", nbad);
    cases++;
    printf("%s  %3d heads r %3d dr %2d dn %3d dv %3d %-4s g%-3d %-4s %3d tokens, data at +%d: %s\n", fails == f0 ? "ok  " : "FAIL", nh, r, dr,
           dn, dv, dt == DT_F32 ? "f32" : dt == DT_BF16 ? "bf16" : dt == DT_F16 ? "f16" : dt == DT_Q8 ? "q8" : "q4", quant ? group : 0,
           !quant ? "-" : sdt == DT_F32 ? "f32" : sdt == DT_BF16 ? "bf16" : "f16", n, off, which);
    fflush(stdout);
    free(data), free(sc), free(bi), free(q), free(out), free(written);
}

int main(void) {
    ws = malloc(64 * 68 * 4), qs = malloc(64 * 68 * 4), wst = malloc(64 * 68 * sizeof(int)), qst = malloc(64 * 68 * sizeof(int));
    /* DeepSeek-V3 */
    const int ns_dec[] = {1, 3, 8};
    for (int k = 0; k < 3; k++) one_case(128, 512, 64, 128, 128, DT_Q4, 64, DT_BF16, ns_dec[k], 0);
    one_case(128, 512, 64, 128, 128, DT_Q8, 32, DT_F16, 1, 0);
    one_case(128, 512, 64, 128, 128, DT_F32, 0, 0, 1, 0);
    one_case(128, 512, 64, 128, 128, DT_Q4, 64, DT_BF16, 1, 4); /* the data off 16 bytes: w_at */
    const int ns_pre[] = {16, 17, 100, 512};
    for (int k = 0; k < 4; k++) one_case(4, 512, 64, 128, 128, DT_Q4, 64, DT_BF16, ns_pre[k], 0);
    one_case(4, 512, 64, 128, 128, DT_Q4, 128, DT_F32, 100, 4);
    /* odd shapes, every type and path */
    const int dts[5] = {DT_F32, DT_BF16, DT_F16, DT_Q8, DT_Q4}, sdts[3] = {DT_F16, DT_BF16, DT_F32};
    const int ns[] = {1, 3, 8, 100, 512};
    for (int d = 0; d < 5; d++)
        for (int k = 0; k < 5; k++) {
            const int quant = dts[d] == DT_Q8 || dts[d] == DT_Q4;
            one_case(5, 96, 8, 33, 12, dts[d], 32, sdts[(d + k) % 3], ns[k], 0);
            one_case(3, 192, 16, 7, 5, dts[d], 64, sdts[(d + k + 1) % 3], ns[k], k == 2 ? 4 : 0);
            one_case(2, 384, 8, 65, 9, dts[d], 128, sdts[(d + k + 2) % 3], ns[k], k == 3 ? 4 : 0);
            if (!quant) {
                one_case(3, 40, 8, 20, 12, dts[d], 0, 0, ns[k], 0);
                one_case(3, 36, 4, 1, 3, dts[d], 0, 0, ns[k], 0); /* r % 8: w_at */
                one_case(2, 8, 0, 129, 2, dts[d], 0, 0, ns[k], 0); /* no rope part, dn past two chunks */
            }
        }
    printf("emu: %ld cases, %ld failures\n", cases, fails);
    return fails ? 1 : 0;
}
