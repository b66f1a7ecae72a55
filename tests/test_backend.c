/*
 * test_backend.c — the backend seam (src/backend/backend.h): the CPU backend's layout ops against plain
 * per-row references on random inputs (poisoned gaps stay untouched), the router's hint mode, the
 * kernel-table independence of route, and the one clear error of a backend this build lacks.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "format/container.h"
#include "model/fwd_internal.h"
#include "sluice.h"
#include "test.h"

static float frand(void) { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }

/* rmsnorm and rope over (tokens, heads, stride) layouts equal the kernel table's row functions and the
 * formula on each slice, and write nothing between the slices. */
TEST(backend_layout_ops_match_rows) {
    srand(test_seed());
    be_backend *be = be_cpu_new(kern_scalar_ops(), NULL);
    CHECK(be);
    enum { T = 3, NH = 4, HS = 20, DIM = 16, LD = NH * HS + 5, ROT = 8 };
    float x[T * LD], y[T * LD], w[DIM], ref[DIM], inv[ROT / 2];
    for (int i = 0; i < T * LD; i++) x[i] = frand();
    for (int i = 0; i < DIM; i++) w[i] = frand();
    for (int i = 0; i < ROT / 2; i++) inv[i] = powf(10000.0f, -(float)(2 * i) / ROT);
    for (int i = 0; i < T * LD; i++) y[i] = NAN; /* poison */
    be->rmsnorm(be, x, y, T, LD, NH, HS, DIM, w, 1.0f, 1e-6f);
    int bad = 0;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < NH; h++) {
            const float *xs = x + t * LD + h * HS;
            kern_scalar_ops()->rmsnorm(xs, w, 1.0f, 1e-6f, ref, DIM);
            double ss = 0;
            for (int i = 0; i < DIM; i++) ss += (double)xs[i] * xs[i];
            for (int i = 0; i < DIM; i++) {
                float want = (1.0f + w[i]) * xs[i] / (float)sqrt(ss / DIM + 1e-6);
                bad += memcmp(&y[t * LD + h * HS + i], &ref[i], sizeof(float)) != 0 ||
                       fabsf(y[t * LD + h * HS + i] - want) > 1e-5f * (1 + fabsf(want));
            }
            for (int i = DIM; i < HS && h * HS + i < LD; i++) bad += !isnan(y[t * LD + h * HS + i]);
        }
    CHECKF(bad == 0, "%d rmsnorm values wrong or written outside the heads (seed %u)", bad, test_seed());
    memcpy(y, x, sizeof x);
    be->rope(be, y, T, LD, NH, HS, ROT, inv, 1.0f, 7, 0);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < NH; h++) {
            const float *a = x + t * LD + h * HS;
            const float *b = y + t * LD + h * HS;
            for (int i = 0; i < ROT / 2; i++) {
                float ang = (float)(7 + t) * inv[i], c = cosf(ang), s = sinf(ang);
                float w0 = a[i] * c - a[i + ROT / 2] * s, w1 = a[i + ROT / 2] * c + a[i] * s;
                bad += fabsf(b[i] - w0) > 1e-6f || fabsf(b[i + ROT / 2] - w1) > 1e-6f;
            }
            for (int i = ROT; i < HS && h * HS + i < LD; i++) bad += b[i] != a[i];
        }
    CHECKF(bad == 0, "%d rope values wrong (seed %u)", bad, test_seed());
    int didx[2] = {2, 0}, sidx[2] = {1, 2};
    for (int i = 0; i < T * LD; i++) y[i] = NAN;
    be->copy_rows(be, y, LD, didx, x, LD, sidx, 2, LD - 1);
    CHECK(!memcmp(y + 2 * LD, x + 1 * LD, (LD - 1) * sizeof(float)) && !memcmp(y, x + 2 * LD, (LD - 1) * sizeof(float)));
    CHECK(isnan(y[LD]) && isnan(y[LD - 1]));
    CHECK(be->sync(be) == 0);
    be_close(be);
}

/* route: the hint's plain top-k in the order taken, -1 past the finite logits; the model's softmax
 * router sorted by expert index with weights summing to 1 (norm_topk). */
TEST(backend_route_kinds) {
    be_backend *be = be_cpu_new(NULL, NULL);
    CHECK(be);
    fam_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_experts = 6;
    cfg.n_experts_used = 3;
    cfg.router = SL_ROUTER_SOFTMAX_TOPK;
    cfg.norm_topk = 1;
    float lg[2][6] = {{0.5f, 3.0f, -1.0f, 2.0f, 0.1f, 2.5f}, {-INFINITY, 1.0f, -INFINITY, -INFINITY, 0.0f, -INFINITY}};
    float keep[2][6];
    memcpy(keep, lg, sizeof lg);
    int te[6];
    float tw[6];
    be_route r = {.cfg = &cfg, .layer = 0, .n = 2, .hint = 1, .logits = &lg[0][0], .top_e = te};
    CHECK(be->route(be, &r) == 0);
    CHECKF(te[0] == 1 && te[1] == 5 && te[2] == 3 && te[3] == 1 && te[4] == 4 && te[5] == -1, "hint %d %d %d / %d %d %d",
           te[0], te[1], te[2], te[3], te[4], te[5]);
    memcpy(lg, keep, sizeof lg);
    cfg.n_experts_used = 2;
    r = (be_route){.cfg = &cfg, .layer = 0, .n = 1, .logits = &lg[0][0], .top_e = te, .top_w = tw};
    CHECK(be->route(be, &r) == 0);
    double e1 = exp(3.0), e5 = exp(2.5);
    CHECKF(te[0] == 1 && te[1] == 5 && fabs(tw[0] - e1 / (e1 + e5)) < 1e-6 && fabs(tw[0] + tw[1] - 1) < 1e-6,
           "route %d %d %g %g", te[0], te[1], tw[0], tw[1]);
    be_close(be);
}

/* A backend this build cannot give: one clear error, SL_EUNSUPPORTED, from be_open and from a model
 * opened with it; nothing crashes, nothing leaks. */
TEST(backend_gpu_refused_clearly) {
    be_backend *be = (be_backend *)1;
    sl_error be_err = {0};
    sl_status rc = be_open(SL_BACKEND_CUDA, NULL, &be, &be_err);
    const char *msg = be_err.msg;
#ifdef SL_CUDA
    int named = strstr(msg, "no usable CUDA device") != NULL; /* a build with CUDA=1 on a machine without a GPU */
#else
    int named = strstr(msg, "built without CUDA") != NULL;
#endif
    CHECKF(rc == SL_EUNSUPPORTED && !be && named, "rc %d: %s", rc, msg);
    sl_model_params p = sl_model_params_default();
    CHECK(p.backend == SL_BACKEND_CPU);
    p.backend = SL_BACKEND_CUDA;
    sl_model *m = (sl_model *)1;
    sl_error err = {0};
    sl_status st = sl_model_open(test_packed("qwen3_moe"), &p, &m, &err);
    CHECKF(st == SL_EUNSUPPORTED && !m && strstr(err.msg, "CUDA"), "%d: %s", st, err.msg);
    p.backend = (sl_backend_kind)7;
    st = sl_model_open(test_packed("qwen3_moe"), &p, &m, &err);
    CHECKF(st == SL_EINVAL && !m && strstr(err.msg, "backend 7"), "%d: %s", st, err.msg);
    /* auto (the command line's default): the GPU where there is one, else the CPU, no error */
    p.backend = SL_BACKEND_AUTO;
    st = sl_model_open(test_packed("qwen3_moe"), &p, &m, &err);
    sl_backend_kind want = be_usable(SL_BACKEND_CUDA) ? SL_BACKEND_CUDA : SL_BACKEND_CPU;
    CHECKF(st == SL_OK && m && sl_model_backend(m) == want, "%d: %s", st, err.msg);
    CHECKF(!strcmp(sl_model_backend_note(m), ""), "note '%s'", sl_model_backend_note(m));
    sl_model_close(m);
}

/* Which KV cache types a backend takes is said once (be_kv_takes): the CPU every type, a backend whose kv_types
 * is 0 (the CUDA backend so far) f32 only. The command line's default (f16, kv_fallback) opens with f16 where the
 * backend has it and f32 where not; a type given with --kv (no fallback) is refused by a backend without it, so
 * auto computes on the CPU and says why (sl_model_backend_note) where a GPU is usable. */
TEST(backend_kv_types_one_rule) {
    be_backend *cpu = be_cpu_new(NULL, NULL);
    CHECK(cpu);
    for (int t = 0; t < SL_KV_COUNT; t++) CHECKF(be_kv_takes(cpu, (sl_kv_type)t), "cpu takes %d", t);
    CHECK(!be_kv_takes(cpu, SL_KV_COUNT) && !be_kv_takes(cpu, (sl_kv_type)-1));
    be_backend f32_only = {.name = "f32 only"};
    CHECK(be_kv_takes(&f32_only, SL_KV_F32) && !be_kv_takes(&f32_only, SL_KV_F16) && !be_kv_takes(&f32_only, SL_KV_Q8));
    be_close(cpu);
    const int gpu = be_usable(SL_BACKEND_CUDA);
    for (int fallback = 0; fallback < 2; fallback++) {
        sl_model_params p = sl_model_params_default();
        p.backend = SL_BACKEND_AUTO;
        p.kv_type = SL_KV_F16;
        p.kv_fallback = fallback;
        sl_model *m = NULL;
        sl_error err = {0};
        sl_status st = sl_model_open(test_packed("qwen3_moe"), &p, &m, &err);
        CHECKF(st == SL_OK && m, "%d: %s", st, err.msg);
        if (!m) continue;
        const int on_gpu = sl_model_backend(m) == SL_BACKEND_CUDA;
        const sl_kv_type kv = sl_model_kv_type(m);
        const char *note = sl_model_backend_note(m);
        if (!on_gpu || !fallback) CHECKF(kv == SL_KV_F16, "fallback %d, gpu %d: kv %d", fallback, on_gpu, (int)kv);
        else CHECKF(kv == SL_KV_F16 || kv == SL_KV_F32, "kv %d", (int)kv);
        if (gpu && fallback) CHECKF(on_gpu && !note[0], "auto on a GPU: cpu, '%s'", note); /* qwen3_moe runs there */
        if (gpu && !on_gpu) CHECKF(strstr(note, "f16"), "the GPU refused --kv f16, saying '%s'", note);
        if (!gpu) CHECKF(!note[0], "no GPU, yet a note '%s'", note);
        sl_model_close(m);
    }
}

/* Leaves be's op `op` NULL (the ops the cases below name). */
static void drop_op(be_backend *be, const char *op) {
    if (!strcmp(op, "mla")) be->mla = NULL;
    else if (!strcmp(op, "attention")) be->attention = NULL;
    else if (!strcmp(op, "scale")) be->scale = NULL;
    else if (!strcmp(op, "row_scale")) be->row_scale = NULL;
    else if (!strcmp(op, "short_conv")) be->short_conv = NULL;
    else if (!strcmp(op, "mamba2")) be->mamba2 = NULL;
    else if (!strcmp(op, "head_gate")) be->head_gate = NULL;
    else if (!strcmp(op, "kda_gates")) be->kda_gates = NULL;
    else be->dn_chunk = NULL;
}

/* A backend that leaves an op NULL (the CUDA backend has no MLA and no DeltaNet yet, nor the ops of issue 26's
 * families: scale, softcap, row_scale, short_conv, mamba2) refuses, at open, a model whose layers call it, naming
 * the op and the family; a full table accepts it. */
TEST(backend_missing_op_refused_at_open) {
    static const struct {
        const char *fixture, *op;
    } cases[] = {{"qwen3_next", "dn_chunk"}, {"deepseek_v3", "mla"}, {"qwen3_moe", "attention"}, {"gemma4", "scale"},
                 {"llama4", "row_scale"}, {"mimo_v2_flash", "scale"}, {"lfm2_moe", "short_conv"},
                 {"longcat_flash", "row_scale"}, {"granitemoehybrid", "mamba2"}, {"bailing_hybrid", "head_gate"},
                 {"bailing_hybrid", "kda_gates"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        slc_file f;
        sl_error err = {0};
        CHECKF(slc_open(test_packed(cases[i].fixture), &f, &err) == SL_OK, "%s: %s", cases[i].fixture, err.msg);
        be_backend *be = be_cpu_new(NULL, NULL);
        fwd_ws *ws = be ? fwd_ws_new(&f.cfg, 64, be) : NULL;
        CHECK(ws);
        sl_error ops_err = {0};
        const char *msg = ops_err.msg;
        CHECKF(fwd_check_ops(ws, &f.cfg, &ops_err) == 0, "%s with every op: %s", cases[i].fixture, msg);
        drop_op(be, cases[i].op);
        int rc = fwd_check_ops(ws, &f.cfg, &ops_err);
        CHECKF(rc == SL_EUNSUPPORTED && strstr(msg, cases[i].op) && strstr(msg, cases[i].fixture), "%s: %d %s",
               cases[i].fixture, rc, msg);
        fwd_ws_free(ws);
        be_close(be);
        slc_close(&f);
    }
}

/* dsa_select (DeepSeek sparse attention's indexer, backend.h be_dsa): each token's choice is the top-k positions of
 * sum_h (w_h * wscale) * relu(scale * q_h . key_p) over p <= pos, ascending, every position while pos < topk, a tie at
 * the cut to the lower position; the new keys are stored in the cache rows' tail. layernorm against its formula. */
TEST(backend_dsa_select_and_layernorm) {
    srand(test_seed());
    be_backend *be = be_cpu_new(kern_scalar_ops(), NULL);
    CHECK(be);
    enum { N = 4, P0 = 9, CTX = P0 + N, H = 3, D = 6, K = 5, LDC = D + 2 };
    CHECK(be->reserve(be, 2 * CTX + 16) == SL_OK);
    float q[N * H * D], w[N * H], k[N * D], cache[CTX * LDC], ln[N * D];
    int32_t sel[N * K];
    for (int i = 0; i < N * H * D; i++) q[i] = frand();
    for (int i = 0; i < N * H; i++) w[i] = frand();
    for (int i = 0; i < N * D; i++) k[i] = frand();
    for (int i = 0; i < CTX * LDC; i++) cache[i] = frand();
    memcpy(cache + 3 * LDC + 2, cache + 7 * LDC + 2, D * sizeof(float)); /* positions 3 and 7: equal scores */
    const be_dsa d = {.q = q, .ldq = H * D, .w = w, .ldw = H, .k = k, .ldk = D, .cache = cache, .ldc = LDC, .koff = 2,
                      .n = N, .pos0 = P0, .heads = H, .dim = D, .topk = K, .scale = 0.5f, .wscale = 0.25f, .sel = sel,
                      .sel_ld = K};
    be->dsa_select(be, &d);
    CHECK(be->sync(be) == SL_OK);
    CHECK(!memcmp(cache + (P0 + 1) * LDC + 2, k + D, D * sizeof(float)));
    for (int t = 0; t < N; t++) {
        double s[CTX];
        for (int p = 0; p <= P0 + t; p++) {
            s[p] = 0;
            for (int h = 0; h < H; h++) {
                double dot = 0;
                for (int i = 0; i < D; i++) dot += (double)q[(t * H + h) * D + i] * cache[p * LDC + 2 + i];
                s[p] += w[t * H + h] * 0.25 * (dot > 0 ? dot * 0.5 : 0);
            }
        }
        for (int i = 0; i < K; i++) { /* the i-th chosen beats (or ties, from a higher position) every unchosen */
            const int a = sel[t * K + i];
            CHECKF(a >= 0 && a <= P0 + t && (i == 0 || a > sel[t * K + i - 1]), "token %d slot %d: %d", t, i, a);
            for (int p = 0, j = 0; p <= P0 + t; p++) {
                while (j < K && sel[t * K + j] < p) j++;
                if (j < K && sel[t * K + j] == p) continue;
                CHECKF(s[a] > s[p] + 1e-6 || (fabs(s[a] - s[p]) <= 1e-6 && a < p), "token %d: %d (%g) over %d (%g)", t, a,
                       s[a], p, s[p]);
            }
        }
    }
    const float lw[D] = {1, 2, 0.5f, -1, 3, 1}, lb[D] = {0, 1, -1, 0.5f, 0, 2};
    be->layernorm(be, k, ln, N, D, D, lw, lb, 1e-6f);
    for (int t = 0; t < N; t++) {
        double m = 0, v = 0;
        for (int i = 0; i < D; i++) m += k[t * D + i] / (double)D;
        for (int i = 0; i < D; i++) v += (k[t * D + i] - m) * (k[t * D + i] - m) / D;
        for (int i = 0; i < D; i++)
            CHECK(fabs(ln[t * D + i] - ((k[t * D + i] - m) / sqrt(v + 1e-6) * lw[i] + lb[i])) < 1e-5);
    }
    be_close(be);
}

/* Bailing hybrid's pieces (modeling_bailing_hybrid.py) against their formulas: head_gate (each head's dim floats
 * times sigmoid of its gate, nothing else written), kda_gates' bounded gate g = lower * sigmoid(exp(A_log) (f +
 * dt_bias)) with beta = sigmoid(b), and BE_FFN_SWIGLU_CLIP y = down(min(silu(gate x), L) * clamp(up x, +-L)). */
TEST(backend_bailing_ops) {
    srand(test_seed());
    be_backend *be = be_cpu_new(kern_scalar_ops(), NULL);
    CHECK(be);
    enum { T = 3, NH = 3, HS = 7, DIM = 5, LD = NH * HS + 2, LDG = NH + 1 };
    float x[T * LD], y[T * LD], g[T * LDG];
    for (int i = 0; i < T * LD; i++) x[i] = y[i] = frand();
    for (int i = 0; i < T * LDG; i++) g[i] = 4 * frand();
    be->head_gate(be, y, LD, HS, DIM, g, LDG, T, NH);
    int bad = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < LD; i++) {
            const int h = i / HS, in = h < NH && i % HS < DIM;
            const double want = in ? x[t * LD + i] / (1.0 + exp(-(double)g[t * LDG + h])) : x[t * LD + i];
            bad += fabs(y[t * LD + i] - want) > 1e-6 * (1 + fabs(want)) || (!in && y[t * LD + i] != x[t * LD + i]);
        }
    CHECKF(bad == 0, "%d head_gate values wrong (seed %u)", bad, test_seed());
    enum { N = 2, NV = 2, DK = 4, LG = NV + NV * DK, CQ = 3 * NV * DK };
    float ba[N * LG], gates[N * LG], conv[N * CQ], A_log[NV], dt[NV * DK];
    for (int i = 0; i < N * LG; i++) ba[i] = 3 * frand();
    for (int i = 0; i < N * CQ; i++) conv[i] = frand();
    for (int i = 0; i < NV; i++) A_log[i] = frand();
    for (int i = 0; i < NV * DK; i++) dt[i] = frand();
    const be_dn d = {.n = N, .nk = NV, .nv = NV, .dk = DK, .dv = DK, .ba = ba, .A_log = A_log, .dt_bias = dt,
                     .gates = gates, .conv_out = conv, .kda = 1, .kda_lower = -5.0f};
    be->kda_gates(be, &d);
    for (int t = 0; t < N; t++)
        for (int h = 0; h < NV; h++) {
            bad += fabs(gates[t * LG + h] - 1 / (1 + exp(-(double)ba[t * LG + h]))) > 1e-6;
            for (int i = 0; i < DK; i++) {
                const int c = NV + h * DK + i;
                const double want = -5.0 / (1 + exp(-exp((double)A_log[h]) * ((double)ba[t * LG + c] + dt[h * DK + i])));
                bad += fabs(gates[t * LG + c] - want) > 1e-5;
            }
        }
    CHECKF(bad == 0, "%d kda_gates values wrong (seed %u)", bad, test_seed());
    enum { H = 6, I = 5 };
    float wg[I * H], wu[I * H], wd[H * I], xin[N * H], gs[N * I], us[N * I], out[N * H];
    for (int i = 0; i < I * H; i++) wg[i] = 2 * frand(), wu[i] = 2 * frand(), wd[i] = frand();
    for (int i = 0; i < N * H; i++) xin[i] = frand();
    const tn_expert ex = {.gate = {.data = wg, .dtype = DT_F32, .rows = I, .cols = H},
                          .up = {.data = wu, .dtype = DT_F32, .rows = I, .cols = H},
                          .down = {.data = wd, .dtype = DT_F32, .rows = H, .cols = I}};
    kern_act a;
    kern_act_init(&a, NULL, xin, H, N, H, 0);
    void *mid = malloc(kern_act_bytes(N, I));
    const float L = 0.6f;
    const be_ffn f = {.kind = BE_FFN_SWIGLU_CLIP, .limit = L, .w = &ex, .x = &a, .inter = I, .g = gs, .u = us,
                      .mid_buf = mid, .y = out, .ldy = H};
    be->ffn(be, &f);
    int clipped = 0;
    for (int t = 0; t < N; t++) {
        double m[I];
        for (int j = 0; j < I; j++) {
            double gv = 0, uv = 0;
            for (int k = 0; k < H; k++) gv += (double)wg[j * H + k] * xin[t * H + k], uv += (double)wu[j * H + k] * xin[t * H + k];
            const double sg = gv / (1 + exp(-gv));
            clipped += sg > L || fabs(uv) > L;
            m[j] = (sg > L ? L : sg) * (uv > L ? L : uv < -L ? -L : uv);
        }
        for (int k = 0; k < H; k++) {
            double want = 0;
            for (int j = 0; j < I; j++) want += (double)wd[k * I + j] * m[j];
            bad += fabs(out[t * H + k] - want) > 1e-5 * (1 + fabs(want));
        }
    }
    CHECKF(bad == 0 && clipped > 0, "%d clipped SwiGLU outputs wrong, %d entries clipped (seed %u)", bad, clipped,
           test_seed());
    CHECK(be->sync(be) == 0);
    free(mid);
    be_close(be);
}
