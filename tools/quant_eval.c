/*
 * quant_eval.c — `make quant-eval`: accuracy of the quantized types on every fixture. For each fixture
 * and mode it packs tests/data/<fixture> (all matrices in the mode, router at >= 8 bits as pack does),
 * runs the 100 reference tokens, and compares with the f32 pack: bits per weight over the matrices that
 * were quantized (codes + scales + biases), the fraction of matrix weights quantized, max relative logit
 * error (max over positions of max|d| / max|ref|), top-1 agreement and mean KL(p_f32 || p_quant).
 * Prints a Markdown table (docs/QUANT.md). Usage: build/quant_eval [TMPDIR]
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice.h"
#include "util/fileio.h"
#include "weight_bits.h"

static float *logits(const char *path, const int32_t *toks, int n, int *V) {
    sl_model *m = NULL;
    sl_error err = {0};
    if (sl_model_open(path, NULL, &m, &err)) { fprintf(stderr, "%s\n", err.msg); return NULL; }
    *V = sl_model_n_vocab(m);
    float *out = malloc((size_t)n * *V * sizeof(float));
    sl_session *s = NULL;
    if (sl_session_new(m, 0, &s) || sl_session_eval(s, toks, n, out, 1)) { free(out); out = NULL; }
    sl_session_free(s);
    sl_model_close(m);
    return out;
}

int main(int argc, char **argv) {
    const char *tmp = argc > 1 ? argv[1] : "/tmp";
    const char *fixtures[] = {"qwen3_moe", "qwen3_next", "qwen3_5_moe", "qwen3_5_fused", "qwen3_next_fp8"};
    const struct { sl_quant q; int group; const char *name; } modes[] = {
        {SL_QUANT_Q8, 32, "q8 g32"}, {SL_QUANT_Q8, 64, "q8 g64"}, {SL_QUANT_Q4, 32, "q4 g32"}, {SL_QUANT_Q4, 64, "q4 g64"},
        {SL_QUANT_Q4, 128, "q4 g128"}, {SL_QUANT_Q3, 32, "q3 g32"}, {SL_QUANT_Q3, 64, "q3 g64"}, {SL_QUANT_Q3, 128, "q3 g128"},
        {SL_QUANT_BF16, 64, "bf16"}};
    printf("| fixture | mode | bits/weight (quantized matrices) | share of matrix weights quantized | max rel logit err "
           "| top-1 agree | mean KL |\n|---|---|---|---|---|---|---|\n");
    for (size_t fi = 0; fi < sizeof fixtures / sizeof *fixtures; fi++) {
        char dir[256], ref[512], path[512];
        snprintf(dir, sizeof dir, "tests/data/%s", fixtures[fi]);
        snprintf(path, sizeof path, "%s/%s/ref.json", "tests/data", fixtures[fi]);
        char *txt = NULL;
        sl_error err = {0};
        if (fio_read_file(path, &txt, NULL, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        cJSON *j = cJSON_Parse(txt);
        free(txt);
        int32_t toks[256];
        int n = 0, V = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "tokens")) if (n < 256) toks[n++] = it->valueint;
        cJSON_Delete(j);
        snprintf(ref, sizeof ref, "%s/qe-%d-f32.sluice", tmp, (int)getpid());
        sl_pack_params p = sl_pack_params_default();
        p.quant = SL_QUANT_F32;
        p.hash_sources = 0;
        if (sl_pack(dir, ref, &p, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        float *a = logits(ref, toks, n, &V);
        unlink(ref);
        if (!a) return 1;
        for (size_t mi = 0; mi < sizeof modes / sizeof *modes; mi++) {
            p.quant = modes[mi].q;
            p.group = modes[mi].group;
            snprintf(path, sizeof path, "%s/qe-%d-q.sluice", tmp, (int)getpid());
            if (sl_pack(dir, path, &p, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
            weight_bits wb;
            weight_bits_of(path, &wb);
            double bits = wb.quant_bits, frac = wb.quant_share;
            int Vq;
            float *b = logits(path, toks, n, &Vq);
            unlink(path);
            if (!b) return 1;
            double worst = 0, kl = 0;
            int agree = 0;
            for (int t = 0; t < n; t++) {
                const float *x = a + (size_t)t * V, *y = b + (size_t)t * V;
                double d = 0, mag = 0, mx = -INFINITY, my = -INFINITY, zx = 0, zy = 0;
                int ax = 0, ay = 0;
                for (int v = 0; v < V; v++) {
                    if (fabs((double)x[v] - y[v]) > d) d = fabs((double)x[v] - y[v]);
                    if (fabs(x[v]) > mag) mag = fabs(x[v]);
                    if (x[v] > mx) { mx = x[v]; ax = v; }
                    if (y[v] > my) { my = y[v]; ay = v; }
                }
                for (int v = 0; v < V; v++) { zx += exp(x[v] - mx); zy += exp(y[v] - my); }
                for (int v = 0; v < V; v++) {
                    double lp = x[v] - mx - log(zx), lq = y[v] - my - log(zy);
                    kl += exp(lp) * (lp - lq);
                }
                if (d / mag > worst) worst = d / mag;
                agree += ax == ay;
            }
            printf("| %s | %s | %.2f | %.0f%% | %.3g | %.1f%% | %.2e |\n", fixtures[fi], modes[mi].name,
                   modes[mi].q == SL_QUANT_BF16 ? 16.0 : bits, modes[mi].q == SL_QUANT_BF16 ? 100.0 : 100 * frac,
                   worst, 100.0 * agree / n, kl / n);
            free(b);
        }
        free(a);
    }
    return 0;
}
