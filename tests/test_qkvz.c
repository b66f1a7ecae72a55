/*
 * test_qkvz.c — Qwen3-Next's in_proj_qkvz regrouped at load (engine/backbone.c flatten_qkvz; model/deltanet.c
 * fwd_qkvz_row): the row map is the inverse of the GGUF import's (family/arch/qwen3_next.c qkvz_rows), and a model
 * opened with its rows regrouped gives bitwise the logits of the one kept grouped (SLUICE_QKVZ_GROUPED=1, the
 * forward pass's per key head copies as before), prefill, token by token and in 7-token chunks, for every storage
 * type a pack makes of the fixture (as stored, bf16, q8, q4, q3) and the MLX q4 checkpoint, int8 and exact
 * activations. The transformers reference itself is test_forward.c's (1e-4), on the regrouped load.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/handles.h"
#include "family/arch.h"
#include "model/fwd_internal.h"
#include "sluice.h"
#include "test.h"

TEST(qkvz_row_map_inverts_the_gguf_import) {
    const arch_desc *a = arch_get(SL_ARCH_QWEN3_NEXT);
    CHECK(a);
    const arch_gguf_xf *xf = NULL;
    for (int i = 0; i < a->n_gguf_xf; i++)
        if (!strcmp(a->gguf_xf[i].name, "linear_attn.in_proj_qkvz")) xf = &a->gguf_xf[i];
    CHECK(xf && xf->rows);
    /* nk, nv, dk, dv: the 80B's, the fixtures', r = 1 and odd sizes */
    static const int S[][4] = {{16, 32, 128, 128}, {2, 4, 16, 24}, {2, 4, 64, 64}, {3, 3, 8, 4}, {1, 5, 4, 3}};
    for (size_t s = 0; s < sizeof S / sizeof *S; s++) {
        fam_config c;
        memset(&c, 0, sizeof c);
        c.lin_nk = S[s][0], c.lin_nv = S[s][1], c.lin_dk = S[s][2], c.lin_dv = S[s][3];
        const int64_t rows = 2 * (int64_t)c.lin_nk * c.lin_dk + 2 * (int64_t)c.lin_nv * c.lin_dv;
        int64_t *perm = malloc((size_t)rows * sizeof *perm);
        CHECK(perm);
        xf->rows(&c, rows, perm); /* perm[o]: the flat (attn_qkv | attn_gate) row of stored row o */
        int64_t bad = -1;
        for (int64_t o = 0; o < rows && bad < 0; o++)
            if (perm[o] < 0 || perm[o] >= rows || fwd_qkvz_row(&c, rows, perm[o]) != o) bad = o;
        free(perm);
        CHECKF(bad < 0, "shape %zu: stored row %lld", s, (long long)bad);
        CHECK(fwd_qkvz_row(&c, rows + 1, 0) == -1 && fwd_qkvz_row(&c, rows, rows) == -1 && fwd_qkvz_row(&c, rows, -1) == -1);
    }
    fam_config c;
    memset(&c, 0, sizeof c);
    c.lin_nk = 2, c.lin_nv = 3, c.lin_dk = 4, c.lin_dv = 4; /* nv not a multiple of nk: no map */
    CHECK(fwd_qkvz_row(&c, 2 * 8 + 2 * 12, 0) == -1);
}

/* path opened on the CPU (2 threads), its in_proj_qkvz grouped (SLUICE_QKVZ_GROUPED=1) or regrouped; the linear
 * layers whose in_proj_qkvz was regrouped counted into *flat, the linear layers into *lin */
static sl_model *open_qkvz(const char *path, int grouped, int exact, int *flat, int *lin) {
    if (grouped) setenv("SLUICE_QKVZ_GROUPED", "1", 1);
    sl_model_params mp = sl_model_params_default();
    mp.n_threads = 2;
    mp.exact = exact;
    sl_model *m = NULL;
    sl_error err = {0};
    if (sl_model_open(path, &mp, &m, &err)) fprintf(stderr, "    open %s: %s\n", path, err.msg);
    unsetenv("SLUICE_QKVZ_GROUPED");
    *flat = *lin = 0;
    for (int l = 0; m && l < m->cfg.n_layers; l++) {
        *lin += m->cfg.layer_linear[l] != 0;
        *flat += m->w.layers[l].qkvz_flat != 0;
    }
    return m;
}

/* logits [n][V] of toks, step tokens an evaluation */
static float *logits(sl_model *m, const int32_t *toks, int n, int step) {
    const int V = sl_model_n_vocab(m);
    float *out = malloc((size_t)n * V * sizeof(float));
    sl_session *s = NULL;
    if (!out || sl_session_new(m, 0, &s)) {
        free(out);
        return NULL;
    }
    for (int i = 0; i < n; i += step) {
        const int k = n - i < step ? n - i : step;
        if (sl_session_eval(s, toks + i, k, out + (size_t)i * V, 1)) {
            fprintf(stderr, "    eval: %s\n", sl_session_errmsg(s));
            free(out);
            out = NULL;
            break;
        }
    }
    sl_session_free(s);
    return out;
}

/* 1 when path's regrouped load is bitwise its grouped one (steps n, 1 and 7; *what says which differs) */
static int same_as_grouped(const char *path, int exact, const int32_t *toks, int n, char *what, size_t len) {
    int fa, la, fb, lb;
    sl_model *a = open_qkvz(path, 1, exact, &fa, &la), *b = a ? open_qkvz(path, 0, exact, &fb, &lb) : NULL;
    int ok = a && b;
    snprintf(what, len, "%s", ok ? "" : "open failed");
    if (ok && (fa != 0 || fb != lb || lb < 1)) {
        snprintf(what, len, "in_proj_qkvz regrouped in %d of %d linear layers (grouped load: %d)", fb, lb, fa);
        ok = 0;
    }
    static const int steps[3] = {0, 1, 7};
    for (int k = 0; ok && k < 3; k++) {
        const int st = steps[k] ? steps[k] : n;
        float *x = logits(a, toks, n, st), *y = logits(b, toks, n, st);
        ok = x && y && !memcmp(x, y, (size_t)n * (size_t)sl_model_n_vocab(a) * sizeof(float));
        if (!ok) snprintf(what, len, "%d tokens an evaluation: %s", st, x && y ? "logits differ" : "eval failed");
        free(x);
        free(y);
    }
    sl_model_close(b);
    sl_model_close(a);
    return ok;
}

TEST(qkvz_regrouped_load_bitwise_grouped) {
    int32_t toks[256];
    const int n = test_ref_ids("qwen3_next", "tokens", toks, 256);
    CHECK(n > 8);
    static const struct {
        const char *tag;
        sl_quant bb;
    } P[] = {{"keep", SL_QUANT_KEEP}, {"bf16", SL_QUANT_BF16}, {"q8", SL_QUANT_Q8}, {"q4", SL_QUANT_Q4}, {"q3", SL_QUANT_Q3}};
    char what[256];
    for (size_t k = 0; k < sizeof P / sizeof *P; k++) {
        sl_pack_params p = sl_pack_params_default();
        p.quant = SL_QUANT_KEEP;
        p.quant_backbone = P[k].bb;
        p.quant_experts = P[k].bb == SL_QUANT_Q3 ? SL_QUANT_Q8 : P[k].bb;
        p.group = 32;
        p.hash_sources = 0;
        char out[512];
        snprintf(out, sizeof out, "%s/qkvz-%s.sluice", test_tmpdir(), P[k].tag);
        sl_error err = {0};
        CHECKF(sl_pack("tests/data/qwen3_next", out, &p, &err) == SL_OK, "pack %s: %s", P[k].tag, err.msg);
        for (int exact = 0; exact < 2; exact++) {
            const int ok = same_as_grouped(out, exact, toks, n, what, sizeof what);
            printf("     qwen3_next %s%s: regrouped in_proj_qkvz %s\n", P[k].tag, exact ? " exact" : "",
                   ok ? "bitwise the grouped one" : what);
            CHECKF(ok, "%s%s: %s", P[k].tag, exact ? " exact" : "", what);
        }
    }
    /* the MLX q4 checkpoint (its own tokens: tests/data/mlx_qwen3_next/ref.json) */
    int32_t mt[256];
    const int mn = test_ref_ids("mlx_qwen3_next", "tokens", mt, 256);
    CHECK(mn > 8);
    char out[512];
    snprintf(out, sizeof out, "%s/qkvz-mlx.sluice", test_tmpdir());
    sl_error err = {0};
    CHECKF(sl_pack("tests/data/mlx_qwen3_next", out, NULL, &err) == SL_OK, "pack mlx: %s", err.msg);
    const int ok = same_as_grouped(out, 0, mt, mn, what, sizeof what);
    printf("     mlx_qwen3_next: regrouped in_proj_qkvz %s\n", ok ? "bitwise the grouped one" : what);
    CHECKF(ok, "mlx_qwen3_next: %s", what);
}
