/*
 * mlx.c — MLX quantization config and module shape checks; see mlx.h. The tensors are imported as they
 * are (codes, scales and biases verbatim), never requantized.
 */
#include "import/mlx.h"

#include <stdio.h>
#include <string.h>

#include "util/err.h"

static sl_status check_params(const char *path, const char *where, int bits, int group, sl_error *err) {
    if (bits != 4 && bits != 8)
        return err_set(err, SL_EUNSUPPORTED, "%s: %s: MLX %d-bit quantization is not supported (4 and 8 bits only)",
                      path, where, bits);
    if (group != 32 && group != 64 && group != 128)
        return err_set(err, SL_ECONFIG, "%s: %s: MLX group size %d is not supported (32, 64 or 128)", path, where,
                      group);
    return SL_OK;
}

static int get_int(const cJSON *o, const char *k, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valueint : dflt;
}

sl_status mlx_parse_quant(const cJSON *root, const char *path, mlx_quant *out, sl_error *err) {
    memset(out, 0, sizeof *out);
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "quantization");
    if (!cJSON_IsObject(q)) {
        const cJSON *qc = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
        if (!cJSON_IsObject(qc)) qc = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "text_config"),
                                                                       "quantization_config");
        if (cJSON_IsObject(qc) && !cJSON_GetObjectItemCaseSensitive(qc, "quant_method") &&
            cJSON_GetObjectItemCaseSensitive(qc, "bits"))
            q = qc;
    }
    if (!cJSON_IsObject(q)) return SL_OK;
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(q, "mode");
    if (cJSON_IsString(mode) && strcmp(mode->valuestring, "affine"))
        return err_set(err, SL_EUNSUPPORTED, "%s: quantization mode '%s' is not supported (affine only)", path,
                      mode->valuestring);
    out->bits = get_int(q, "bits", 4);
    out->group = get_int(q, "group_size", 64);
    sl_status st = check_params(path, "quantization", out->bits, out->group, err);
    const cJSON *it;
    cJSON_ArrayForEach(it, q) {
        if (st) break;
        if (!cJSON_IsObject(it)) continue;
        char where[200];
        snprintf(where, sizeof where, "quantization.%s", it->string);
        st = check_params(path, where, get_int(it, "bits", out->bits), get_int(it, "group_size", out->group), err);
    }
    if (st) return st;
    out->overrides = cJSON_Duplicate(q, 1);
    return out->overrides ? SL_OK : err_set(err, SL_ENOMEM, "out of memory");
}

void mlx_quant_free(mlx_quant *q) {
    if (!q) return;
    cJSON_Delete(q->overrides);
    memset(q, 0, sizeof *q);
}

void mlx_module_params(const mlx_quant *q, const char *module, int *bits, int *group) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(q->overrides, module);
    *bits = cJSON_IsObject(o) ? get_int(o, "bits", q->bits) : q->bits;
    *group = cJSON_IsObject(o) ? get_int(o, "group_size", q->group) : q->group;
}

static void fmt(char *b, size_t n, int nd, const int64_t *s) {
    size_t k = (size_t)snprintf(b, n, "[");
    for (int i = 0; i < nd && k < n; i++) k += (size_t)snprintf(b + k, n - k, i ? ",%lld" : "%lld", (long long)s[i]);
    if (k < n) snprintf(b + k, n - k, "]");
}

sl_status mlx_check_module(const char *name, int bits, int group, int ndim, const int64_t *wshape, int sndim,
                           const int64_t *sshape, int bndim, const int64_t *bshape, dt_type sdt, dt_type bdt,
                           int64_t *cols, sl_error *err) {
    if (sdt != DT_F16 && sdt != DT_BF16 && sdt != DT_F32)
        return err_set(err, SL_EUNSUPPORTED, "tensor '%s': scales must be F16, BF16 or F32", name);
    if (bdt != sdt) return err_set(err, SL_EFORMAT, "tensor '%s': biases and scales have different dtypes", name);
    if ((bits != 4 && bits != 8) || group <= 0 || ndim < 1 || ndim > 3)
        return err_set(err, SL_EFORMAT, "tensor '%s': %d-bit, group %d, %d-D: not an MLX-quantized weight", name, bits,
                      group, ndim);
    int64_t c = wshape[ndim - 1] * 32 / bits;
    if (c % group)
        return err_set(err, SL_EFORMAT, "tensor '%s': group size %d does not divide the row of %lld columns (%d-bit)",
                      name, group, (long long)c, bits);
    int64_t want[3];
    for (int i = 0; i < ndim; i++) want[i] = wshape[i];
    want[ndim - 1] = c / group;
    const int64_t *got[2] = {sshape, bshape};
    const int gnd[2] = {sndim, bndim};
    for (int k = 0; k < 2; k++) {
        int ok = gnd[k] == ndim;
        for (int i = 0; ok && i < ndim; i++) ok = got[k][i] == want[i];
        if (!ok) {
            char a[96], b[96];
            fmt(a, sizeof a, gnd[k], got[k]);
            fmt(b, sizeof b, ndim, want);
            return err_set(err, SL_EFORMAT, "tensor '%s': %s have shape %s, expected %s for %d-bit, group %d", name,
                          k ? "biases" : "scales", a, b, bits, group);
        }
    }
    *cols = c;
    return SL_OK;
}
