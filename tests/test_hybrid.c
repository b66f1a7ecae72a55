/*
 * test_hybrid.c — issue 25's hybrid step, here without a GPU: the device arithmetic on the host
 * (src/kernels/kernels_dev.c, canon_exp.h) against cuda.h's order written out plainly, and against the CPU's own
 * kernels to rounding. That the device computes the same bits is tests/cuda/test_cuda.c's check on the GPU
 * machine; that any VRAM / RAM split with experts run where they lie gives the all-resident logits bitwise is
 * tests/test_stream.c's tiered_equals_resident (the hybrid rows). Also the routing traces (src/model/rtrace.h) that
 * replay a real model's routing on a synthesised shape for the tiers' hit rates.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/canon_exp.h"
#include "kernels/kernels.h"
#include "model/rtrace.h"
#include "quant/quant.h"
#include "sluice.h"
#include "test.h"

static uint64_t hy_rng;
static float hy_rand(void) { /* uniform in [-1, 1) */
    hy_rng = hy_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((hy_rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ulps between two finite floats of the same sign */
static int64_t ulps(float a, float b) { return llabs((int64_t)f2u(a) - (int64_t)f2u(b)); }

/* canon_expf within 2 ulp of e^x (glibc's expf, itself within 1) over the float range, its ends and specials */
TEST(hybrid_canon_expf_accuracy) {
    int64_t worst = 0;
    float at = 0;
    for (float x = -103.0f; x < 88.7f; x += 0.0137f) {
        float got = canon_expf(x), want = expf(x);
        if (want < 1.2e-38f) continue; /* subnormal results: checked below by value */
        int64_t u = ulps(got, want);
        if (u > worst) worst = u, at = x;
    }
    CHECKF(worst <= 2, "canon_expf off expf by %lld ulp at %.9g", (long long)worst, at);
    CHECK(canon_expf(0.0f) == 1.0f);
    CHECK(isinf(canon_expf(89.0f)) && canon_expf(-104.0f) == 0.0f && isnan(canon_expf(NAN)));
    CHECK(fabsf(canon_expf(-100.0f) - expf(-100.0f)) <= 2e-45f * 4);
    CHECK(canon_silu(-200.0f) == -0.0f && canon_silu(200.0f) == 200.0f);
    fprintf(stderr, "    canon_expf: worst %lld ulp of expf\n", (long long)worst);
}

/* cuda.h's order for one output, as its text says it */
static float plain_dev(const tn_mat *w, int r, const kern_act *a, int t) {
    const int cols = w->cols, g = w->group, ng = cols / g, nb = cols / 32, ns = nb + nb / 2 + nb / 4;
    const int soff = g == 32 ? 0 : g == 64 ? nb : nb + nb / 2;
    float acc = 0, accb = 0;
    for (int b = 0; b < nb; b++) {
        int32_t I = 0;
        for (int c = 32 * b; c < 32 * b + 32; c++) {
            const uint8_t *q = (const uint8_t *)w->data;
            int code = w->dtype == DT_Q8 ? q[(size_t)r * cols + c] : (q[((size_t)r * cols + c) / 2] >> (c & 1) * 4) & 15;
            I += code * a->q[(size_t)t * cols + c];
        }
        float sd = q_scale_at(w->scales, w->sdtype, (size_t)r * ng + (size_t)(32 * b / g)) * a->d[(size_t)t * nb + b];
        acc = fmaf((float)I, sd, acc);
    }
    for (int j = 0; j < ng; j++)
        accb = fmaf(q_scale_at(w->biases, w->sdtype, (size_t)r * ng + j), a->s[(size_t)t * ns + soff + j], accb);
    return acc + accb;
}

static void *hy_mat(dt_type dt, int rows, int cols, int group, dt_type sdt, tn_mat *m) {
    size_t n = (size_t)rows * cols;
    float *w = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) w[i] = hy_rand() * 0.1f + (i % 7 == 0 ? 0.05f : 0.0f);
    void *data = malloc(q_mat_bytes(dt, rows, cols, group, sdt));
    q_quantize(dt, w, rows, cols, group, sdt, 1, data);
    q_mat_bind(m, data, dt, rows, cols, group, sdt, 1);
    free(w);
    return data;
}

/* n_tok rows of cols random activations (x, returned) and their int8 form in a (its buffer in *buf), prepared */
static float *hy_act(kern_act *a, void **buf, int n_tok, int cols) {
    float *x = malloc((size_t)n_tok * cols * sizeof(float));
    for (int i = 0; i < n_tok * cols; i++) x[i] = hy_rand() * 2.0f;
    *buf = malloc(kern_act_bytes(n_tok, cols));
    kern_act_init(a, *buf, x, (size_t)cols, n_tok, cols, 1);
    kern_act_prepare(a);
    return x;
}

/* kern_matmul_i8_dev bitwise plain_dev, q8 / q4, every group and scale type, on each of its paths (scalar, AVX2,
 * AVX-512 VNNI where the CPU has them): a number of blocks not a multiple of the VNNI path's step (4), groups
 * past its tables' 16, rows not a multiple of its 16 (nor of AVX2's 8); within int8 rounding of the CPU's own
 * int8 kernels (another float order) */
TEST(hybrid_matmul_dev_is_cuda_order) {
    hy_rng = 0x5eed ^ test_seed();
    static const int cols_l[] = {32, 96, 160, 384, 1120, 2048};
    static const dt_type sdts[] = {DT_BF16, DT_F16, DT_F32};
    int cases = 0;
    for (int c = 0; c < 6; c++) /* path (scalar, AVX2, VNNI) x q8 / q4 */
        for (int ci = 0; ci < 6; ci++)
            for (int gi = 0; gi < 3; gi++) {
                const int isa = c / 2, dq = c % 2;
                const int cols = cols_l[ci], group = 32 << gi, rows = 37, n_tok = 1 + ci % 3;
                if (cols % group) continue;
                const dt_type dt = dq ? DT_Q4 : DT_Q8, sdt = sdts[(ci + gi) % 3];
                tn_mat m;
                void *data = hy_mat(dt, rows, cols, group, sdt, &m);
                float y[3 * 37], cpu[3 * 37];
                void *buf;
                kern_act a;
                float *x = hy_act(&a, &buf, n_tok, cols);
                kern_dev_isa(isa);
                kern_matmul_i8_dev(&m, &a, y, (size_t)rows, 0, rows);
                kern_dev_isa(2);
                CHECK(!kern_matmul_act(kern_scalar_ops(), NULL, &m, &a, cpu, (size_t)rows));
                for (int t = 0; t < n_tok; t++)
                    for (int r = 0; r < rows; r++) {
                        float want = plain_dev(&m, r, &a, t), got = y[t * rows + r];
                        CHECKF(!memcmp(&got, &want, 4), "path %d %s cols %d group %d sdt %s: row %d token %d %.9g != %.9g",
                               isa, dt_name(dt), cols, group, dt_name(sdt), r, t, got, want);
                        /* another order of up to 64 + 64 roundings of terms near 1: a sanity bound, not the contract */
                        CHECKF(fabsf(got - cpu[t * rows + r]) <= 3e-4f * (1.0f + fabsf(got)), "%s: %.9g vs CPU %.9g",
                               dt_name(dt), got, cpu[t * rows + r]);
                    }
                free(buf);
                free(x);
                free(data);
                cases++;
            }
    CHECK(cases >= 60);
}

/* kern_swiglu_dev bitwise canon_silu(g) * u on each path (the AVX-512 one 16 lanes at a time, a tail of 5), over
 * the exp's range, its ends, the subnormal results, infinities, zeros and NaN (its bits too) */
TEST(hybrid_swiglu_dev_bitwise) {
    hy_rng = 0x5117 ^ test_seed();
    enum { N = 4096 + 5 };
    static const float special[] = {0.0f, -0.0f, 88.72284f, -88.72284f, 103.97208f, -103.97208f, 87.5f, -104.5f,
                                    1e-40f, -1e-40f, 1e30f, -1e30f, INFINITY, -INFINITY, NAN, -NAN, 150.0f, -150.0f};
    float *g = malloc(N * sizeof(float)), *u = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) {
        g[i] = i < (int)(sizeof special / sizeof *special) ? special[i] : hy_rand() * (i % 3 ? 12.0f : 120.0f);
        u[i] = i % 11 == 0 ? 1.0f : hy_rand() * 4.0f;
    }
    for (int isa = 0; isa <= 2; isa++) {
        kern_dev_isa(isa);
        kern_swiglu_dev(g, u, y, N);
        kern_dev_isa(2);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            const float want = canon_silu(g[i]) * u[i];
            if (memcmp(&want, &y[i], 4) && !bad++)
                CHECKF(0, "path %d: g %.9g u %.9g: %.9g != %.9g", isa, g[i], u[i], y[i], want);
        }
        CHECK(!bad);
    }
    free(g);
    free(u);
    free(y);
}

/* kern_ffn_dev: the plain order's gate, up, canon SwiGLU, the mid rows' int8 form and down, bitwise, on a pool of
 * any size; refused for what it does not cover */
TEST(hybrid_ffn_dev_bitwise) {
    hy_rng = 0xffe1 ^ test_seed();
    const int H = 256, I = 96, n = 3;
    tn_expert ex;
    memset(&ex, 0, sizeof ex);
    void *d0 = hy_mat(DT_Q4, I, H, 64, DT_BF16, &ex.gate), *d1 = hy_mat(DT_Q4, I, H, 64, DT_BF16, &ex.up),
         *d2 = hy_mat(DT_Q8, H, I, 32, DT_F16, &ex.down);
    float x[3 * 256], g[3 * 96], u[3 * 96], y[3 * 256], pg[3 * 96], pu[3 * 96];
    for (int i = 0; i < n * H; i++) x[i] = hy_rand() * 3.0f;
    void *xb = malloc(kern_act_bytes(n, H)), *mb = malloc(kern_act_bytes(n, I)), *pb = malloc(kern_act_bytes(n, I));
    pool_t *pool = pool_new(3);
    for (int pi = 0; pi < 6; pi++) { /* pool or not x the paths (scalar, AVX2, VNNI) */
        kern_act a;
        kern_act_init(&a, xb, x, (size_t)H, n, H, 1);
        kern_dev_isa(pi / 2);
        const int rc = kern_ffn_dev(pi % 2 ? pool : NULL, &ex, &a, I, g, u, mb, y, (size_t)H);
        kern_dev_isa(2);
        CHECK(rc == SL_OK);
        for (int t = 0; t < n; t++)
            for (int r = 0; r < I; r++) {
                pg[t * I + r] = plain_dev(&ex.gate, r, &a, t);
                pu[t * I + r] = plain_dev(&ex.up, r, &a, t);
                pg[t * I + r] = canon_silu(pg[t * I + r]) * pu[t * I + r];
            }
        kern_act m;
        kern_act_init(&m, pb, pg, (size_t)I, n, I, 1);
        kern_act_prepare(&m);
        for (int t = 0; t < n; t++)
            for (int r = 0; r < H; r++) {
                float want = plain_dev(&ex.down, r, &m, t);
                CHECKF(!memcmp(&y[t * H + r], &want, 4), "pool %d: token %d row %d %.9g != %.9g", pi, t, r, y[t * H + r],
                       want);
            }
    }
    kern_act a;
    kern_act_init(&a, xb, x, (size_t)H, n, H, 0);
    CHECK(kern_ffn_dev(NULL, &ex, &a, I, g, u, mb, y, (size_t)H) == SL_EUNSUPPORTED); /* f32 activations */
    const dt_type down_dt = ex.down.dtype;
    ex.down.dtype = DT_F32;
    kern_act_init(&a, xb, x, (size_t)H, n, H, 1);
    CHECK(!kern_ffn_dev_ok(&ex, I) && kern_ffn_dev(NULL, &ex, &a, I, g, u, mb, y, (size_t)H) == SL_EUNSUPPORTED);
    ex.down.dtype = down_dt;
    CHECK(kern_ffn_dev_ok(&ex, I));
    for (int dt = DT_Q2_K; dt <= DT_Q5_1; dt++) { /* GGUF block types: the device's f32 order (cuda_kq.cu), never here */
        ex.down.dtype = (dt_type)dt;
        CHECK(!kern_ffn_dev_ok(&ex, I));
    }
    pool_free(pool);
    free(xb);
    free(mb);
    free(pb);
    free(d0);
    free(d1);
    free(d2);
}

/* m's biases rewritten as z times its scales (a GGUF Q8_0 / Q4_0's form) and bias_implied set: 1 when they are */
static int hy_implied(tn_mat *m) {
    const float z = m->dtype == DT_Q8 ? -128.0f : -8.0f;
    const size_t ng = (size_t)m->rows * (size_t)(m->cols / m->group);
    for (size_t i = 0; i < ng; i++) {
        const float b = z * q_scale_at(m->scales, m->sdtype, i);
        if (m->sdtype == DT_F32) ((float *)m->biases)[i] = b;
        else ((uint16_t *)m->biases)[i] = m->sdtype == DT_BF16 ? f32_to_bf16(b) : f32_to_f16(b);
    }
    return m->bias_implied = q_biases_implied(m);
}

/* kernels_dev.c with implied biases (tn_mat bias_implied: computed from the scales, not read) bitwise plain_dev
 * (which reads the stored ones), q8 / q4, every group and scale type, each path */
TEST(hybrid_matmul_dev_implied_biases) {
    hy_rng = 0x1b1a ^ test_seed();
    static const dt_type sdts[] = {DT_BF16, DT_F16, DT_F32};
    int cases = 0;
    for (int c = 0; c < 6; c++)
        for (int gi = 0; gi < 3; gi++) {
            const int isa = c / 2, cols = gi == 0 ? 1120 : gi == 1 ? 2048 : 1152, group = 32 << gi, rows = 53, n_tok = 1 + gi;
            if (cols % group) continue;
            const dt_type dt = c % 2 ? DT_Q4 : DT_Q8, sdt = sdts[(c + gi) % 3];
            tn_mat m;
            void *data = hy_mat(dt, rows, cols, group, sdt, &m);
            CHECKF(hy_implied(&m), "%s %s group %d: biases not implied", dt_name(dt), dt_name(sdt), group);
            float y[3 * 53];
            void *buf;
            kern_act a;
            float *x = hy_act(&a, &buf, n_tok, cols);
            kern_dev_isa(isa);
            kern_matmul_i8_dev(&m, &a, y, (size_t)rows, 0, rows);
            kern_dev_isa(2);
            for (int t = 0; t < n_tok; t++)
                for (int r = 0; r < rows; r++) {
                    float want = plain_dev(&m, r, &a, t), got = y[t * rows + r];
                    CHECKF(!memcmp(&got, &want, 4), "path %d %s %s group %d: row %d token %d %.9g != %.9g", isa,
                           dt_name(dt), dt_name(sdt), group, r, t, got, want);
                }
            free(buf);
            free(x);
            free(data);
            cases++;
        }
    CHECK(cases == 18);
}

/* kern_ffn_dev_multi: each expert bitwise kern_ffn_dev alone, on 1 and 3 threads and inline, experts of 1 to 3
 * tokens (one act shared by several), q4 / q8 parts; refused as kern_ffn_dev refuses */
TEST(hybrid_ffn_dev_multi_bitwise) {
    hy_rng = 0x3a17 ^ test_seed();
    enum { NX = 5, H = 256, I = 96, T = 3 };
    tn_expert ex[NX];
    void *data[3 * NX];
    memset(ex, 0, sizeof ex);
    for (int e = 0; e < NX; e++) {
        data[3 * e] = hy_mat(e % 2 ? DT_Q8 : DT_Q4, I, H, 32 << (e % 3), e % 2 ? DT_F16 : DT_BF16, &ex[e].gate);
        data[3 * e + 1] = hy_mat(DT_Q4, I, H, 64, DT_BF16, &ex[e].up);
        data[3 * e + 2] = hy_mat(e % 3 ? DT_Q4 : DT_Q8, H, I, 32, DT_F16, &ex[e].down);
        if (e == 2) CHECK(hy_implied(&ex[e].down));
    }
    float x[T * H], g[NX * T * I], u[NX * T * I], y[NX * T * H], want[T * H];
    for (int i = 0; i < T * H; i++) x[i] = hy_rand() * 3.0f;
    const size_t xab = kern_act_bytes(T, H), mab = kern_act_bytes(T, I);
    uint8_t *xb = malloc((NX + 1) * xab), *mb = malloc(NX * mab);
    pool_t *pool = pool_new(3);
    for (int pi = 0; pi < 3; pi++) {
        kern_act shared, own[NX];
        kern_act_init(&shared, xb + NX * xab, x, (size_t)H, 1, H, 1);
        kern_ffn_arg args[NX];
        for (int e = 0; e < NX; e++) { /* experts 0, 2, 4 take the shared one-token act; 1, 3 their own 2-3 tokens */
            kern_act_init(&own[e], xb + e * xab, x, (size_t)H, 2 + e % 2, H, 1);
            args[e] = (kern_ffn_arg){&ex[e], e % 2 ? &own[e] : &shared, g + e * T * I, u + e * T * I, mb + e * mab,
                                     y + e * T * H, H};
        }
        for (int i = 0; i < NX * T * H; i++) y[i] = NAN;
        CHECK(kern_ffn_dev_multi(pi == 0 ? NULL : pool, args, NX, I) == SL_OK);
        for (int e = 0; e < NX; e++) {
            const int n = args[e].x->n_tok;
            kern_act a;
            kern_act_init(&a, xb + NX * xab, x, (size_t)H, n, H, 1); /* overwrites shared's buffer: done with it */
            float gg[T * I], uu[T * I];
            void *m1 = malloc(mab);
            CHECK(kern_ffn_dev(NULL, &ex[e], &a, I, gg, uu, m1, want, (size_t)H) == SL_OK);
            for (int i = 0; i < n * H; i++)
                CHECKF(!memcmp(&y[e * T * H + i], &want[i], 4), "pool %d expert %d: %d %.9g != %.9g", pi, e, i,
                       y[e * T * H + i], want[i]);
            free(m1);
        }
    }
    kern_act a;
    kern_act_init(&a, xb, x, (size_t)H, 1, H, 0);
    kern_ffn_arg bad = {&ex[0], &a, g, u, mb, y, H};
    CHECK(kern_ffn_dev_multi(pool, &bad, 1, I) == SL_EUNSUPPORTED); /* f32 activations */
    pool_free(pool);
    free(xb);
    free(mb);
    for (int i = 0; i < 3 * NX; i++) free(data[i]);
}

/* The fixture model streamed over toks (one prefill, then one token at a time), with mp; its routing counts
 * written as a profile to prof, its routing trace to rec (when given). 0, or -1 with why; why holds the model's
 * sl_model_routing_trace line on success. */
static int trace_run(const char *path, sl_model_params mp, const int32_t *toks, int n, const char *rec,
                     const char *prof, char *why, size_t whylen) {
    sl_model *m = NULL;
    sl_session *s = NULL;
    sl_error err = {0};
    int rc = sl_model_open(path, &mp, &m, &err);
    float *lg = rc ? NULL : malloc((size_t)sl_model_n_vocab(m) * (size_t)n * sizeof(float));
    if (!rc && (!lg || sl_session_new(m, 0, &s))) rc = SL_ENOMEM;
    if (!rc) rc = sl_session_eval(s, toks, n / 2, lg, 0);
    for (int i = n / 2; !rc && i < n; i++) rc = sl_session_eval(s, toks + i, 1, lg, 0);
    if (!rc && rec) rc = sl_model_write_routing(m, rec, &err);
    if (!rc) rc = sl_model_write_profile(m, prof, &err);
    if (rc) snprintf(why, whylen, "%.400s", err.msg[0] ? err.msg : s ? sl_session_errmsg(s) : "out of memory");
    else snprintf(why, whylen, "%.400s", sl_model_routing_trace(m));
    sl_session_free(s);
    sl_model_close(m);
    free(lg);
    return rc ? -1 : 0;
}

/* A routing trace recorded from a fixture and replayed on it chooses what the model chose, row by row: the routing
 * counts of the replay (uniform weights, so other logits) are the recording's. Replayed on another family's shape
 * it maps layers and experts modulo and says so. A file that is not a trace is refused. */
TEST(routing_trace_record_and_replay) {
    const char *path = test_packed("qwen3_moe"), *other = test_packed("mixtral");
    CHECK(path && other);
    int32_t toks[24];
    for (int i = 0; i < 24; i++) toks[i] = (int32_t)((i * 37 + 5) % 200);
    const char *tr = test_path("%s/routing.trace", test_tmpdir()), *p1 = test_path("%s/rec.profile", test_tmpdir());
    const char *p2 = test_path("%s/play.profile", test_tmpdir()), *p3 = test_path("%s/other.profile", test_tmpdir());
    char why[512];
    sl_model_params mp = sl_model_params_default();
    mp.record_routing = 1;
    CHECKF(trace_run(path, mp, toks, 24, tr, p1, why, sizeof why) == 0, "record: %s", why);
    CHECKF(strstr(why, "24 tokens") && strstr(why, "recording"), "%s", why);
    mp = sl_model_params_default();
    mp.routing = SL_ROUTING_TRACE;
    mp.routing_trace = tr;
    CHECKF(trace_run(path, mp, toks, 24, NULL, p2, why, sizeof why) == 0, "replay: %s", why);
    CHECKF(strstr(why, "replayed as recorded"), "%s", why);
    size_t n1 = 0, n2 = 0;
    char *a = test_read(p1, &n1), *b = test_read(p2, &n2);
    const int same = a && b && n1 == n2 && !memcmp(a, b, n1);
    free(a);
    free(b);
    CHECKF(same, "the replay's routing counts differ from the recording's (%s, %s)", p1, p2);
    CHECKF(trace_run(other, mp, toks, 24, NULL, p3, why, sizeof why) == 0, "replay on mixtral: %s", why);
    CHECKF(strstr(why, "another shape"), "%s", why);
    mp.routing_trace = p1; /* a profile, not a trace */
    sl_model *m = NULL;
    sl_error err = {0};
    CHECK(sl_model_open(path, &mp, &m, &err) == SL_EFORMAT && strstr(err.msg, "not a routing trace"));
}

/* The mapping onto another shape (rtrace.h): a trace of 4 experts, 2 a token, 1 layer, on a model of 2 layers, 5
 * experts, 3 a token: e[s mod 2] + s / 2 modulo 5, the next free one up when taken, ascending, weights 1/3. */
TEST(routing_trace_maps_onto_another_shape) {
    const char *f = test_path("%s/small.trace", test_tmpdir());
    unsigned char file[8 + 24 + 4] = "SLRTRACE";
    const uint32_t h[6] = {1, 2, 1, 4, 2, 1};
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 4; j++) file[8 + 4 * i + j] = (unsigned char)(h[i] >> (8 * j));
    const unsigned char vals[4] = {3, 0, 1, 2}; /* token 0: {3, 0}; token 1: {1, 2} */
    memcpy(file + 32, vals, 4);
    CHECK(test_write(f, file, sizeof file) == 0);
    rtrace *t = NULL;
    sl_error err = {0};
    CHECKF(rtrace_load(f, 2, 5, 3, &t, &err) == SL_OK, "%s", err.msg);
    int e[3 * 3];
    float w[3 * 3];
    /* layer 0, rows 0 and 1: {3, 0, 3+1 = 4} and {1, 2, 1+1 = 2 taken -> 3}; layer 1 (trace layer 0), row 0 */
    rtrace_route(t, 0, 2, e, w);
    rtrace_route(t, 1, 1, e + 6, w + 6);
    const int want[9] = {0, 3, 4, 1, 2, 3, 0, 3, 4};
    int ok = 1;
    for (int i = 0; i < 9; i++) ok &= e[i] == want[i] && w[i] == 1.0f / 3.0f;
    CHECKF(ok, "got %d %d %d | %d %d %d | %d %d %d", e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7], e[8]);
    CHECK(strstr(rtrace_describe(t), "another shape"));
    rtrace_free(t);
    file[16] = 9; /* layers 9: the values run out */
    CHECK(test_write(f, file, sizeof file) == 0);
    CHECK(rtrace_load(f, 2, 5, 3, &t, &err) == SL_EFORMAT && !t && strstr(err.msg, "cut short"));
}

/* models/demo/route128.rtrace (models/demo/README.md): the routing of a trained 128-expert top-8 Qwen3-MoE on
 * held-out text, 2048 tokens x 8 MoE layers, as sluice recorded it. Loaded on its own shape (that of `sluice synth
 * --shape qwen3-30b-a3b --layers 8`) it replays as recorded: the first token's experts in layers 0 and 7 are those
 * transformers' routers chose (tools/rtrace_check.py prints them from the unpacked checkpoint, float32), and row
 * 2048 wraps to row 0. Replayed on a fixture of another shape it maps and runs. */
TEST(routing_trace_route128) {
    const char *f = "models/demo/route128.rtrace";
    rtrace *t = NULL;
    sl_error err = {0};
    CHECKF(rtrace_load(f, 8, 128, 8, &t, &err) == SL_OK, "%s", err.msg);
    int T = 0, L = 0, E = 0, k = 0;
    rtrace_shape(t, &T, &L, &E, &k);
    CHECKF(T == 2048 && L == 8 && E == 128 && k == 8, "%d tokens x %d layers x %d experts, %d a token", T, L, E, k);
    CHECKF(strstr(rtrace_describe(t), "replayed as recorded"), "%s", rtrace_describe(t));
    static const int want0[8] = {9, 25, 53, 76, 77, 82, 84, 106}, want7[8] = {9, 11, 27, 48, 50, 52, 102, 111};
    int e[8 * 8], w_ok = 1, ok0 = 1, ok7 = 1;
    float w[8 * 8];
    for (int i = 0; i < 64; i++) e[i] = -1, w[i] = NAN; /* poisoned: every slot must be written */
    for (int l = 0; l < 8; l++) rtrace_route(t, l, 1, e + 8 * l, w + 8 * l); /* row 0 of every layer */
    for (int s = 0; s < 8; s++) ok0 &= e[s] == want0[s], ok7 &= e[56 + s] == want7[s];
    for (int i = 0; i < 64; i++) w_ok &= w[i] == 0.125f;
    if (!ok0 || !ok7 || !w_ok) rtrace_free(t);
    CHECKF(ok0, "layer 0: %d %d %d %d %d %d %d %d", e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]);
    CHECKF(ok7, "layer 7: %d %d %d %d %d %d %d %d", e[56], e[57], e[58], e[59], e[60], e[61], e[62], e[63]);
    CHECK(w_ok);
    for (int r = 1; r <= 2048; r++) rtrace_route(t, 0, 1, e, w); /* rows 1 .. 2047 of layer 0, then 2048: row 0 */
    rtrace_free(t);
    for (int s = 0; s < 8; s++) ok0 &= e[s] == want0[s];
    CHECKF(ok0, "row 2048, layer 0: %d %d %d %d %d %d %d %d", e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]);
    /* on the qwen3_moe fixture (another shape): mapped, and a short run replays it */
    const char *path = test_packed("qwen3_moe");
    CHECK(path);
    int32_t toks[8];
    for (int i = 0; i < 8; i++) toks[i] = (int32_t)((i * 53 + 7) % 200);
    char why[512];
    sl_model_params mp = sl_model_params_default();
    mp.routing = SL_ROUTING_TRACE;
    mp.routing_trace = f;
    CHECKF(trace_run(path, mp, toks, 8, NULL, test_path("%s/r128.profile", test_tmpdir()), why, sizeof why) == 0,
           "replay: %s", why);
    CHECKF(strstr(why, "2048 tokens x 8 MoE layers x 128 experts, 8 a token") && strstr(why, "another shape"), "%s",
           why);
}
