/*
 * hf_config.c — Hugging Face config.json -> fam_config.
 *
 * The model_type picks the family (family/arch.h); the fields every family shares are read here, the
 * family's own by its config hook through the hfc_* reader. Accepts every spelling docs/MATH.md (Config) lists:
 * num_experts / num_local_experts / n_routed_experts, rope_theta at top level or in rope_parameters, partial_rotary_factor
 * in either place, layer_types or full_attention_interval, a VLM wrapper's nested text_config. Missing
 * required fields and contradictions are errors naming the field; an unknown model_type lists the
 * supported ones.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family/arch.h"
#include "family/hf_config.h"
#include "util/err.h"

struct hfc {
    const cJSON *t;    /* text config object (or the root) */
    const cJSON *root;
    const char *path;
    sl_error *err;
    sl_status st;
};
typedef struct hfc cfgctx;

static const cJSON *field(const cfgctx *c, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->t, name);
    if (!v && c->t != c->root) v = cJSON_GetObjectItemCaseSensitive(c->root, name);
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

static int get_int(cfgctx *c, const char *name, int required, int def) {
    const cJSON *v = field(c, name);
    if (!v) {
        if (required && !c->st) c->st = err_set(c->err, SL_ECONFIG, "%s: missing required field '%s'", c->path, name);
        return def;
    }
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > 0) { /* a per-layer list of one value (HunYuan's moe_topk) */
        const cJSON *e0 = cJSON_GetArrayItem(v, 0), *e;
        cJSON_ArrayForEach(e, v) if (!cJSON_IsNumber(e) || !cJSON_IsNumber(e0) || e->valuedouble != e0->valuedouble) {
            if (!c->st) c->st = err_set(c->err, SL_ECONFIG, "%s: field '%s' varies per layer (not supported)", c->path, name);
            return def;
        }
        v = e0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 || v->valuedouble > 1e9) {
        if (!c->st) c->st = err_set(c->err, SL_ECONFIG, "%s: field '%s' must be a non-negative integer", c->path, name);
        return def;
    }
    return (int)v->valuedouble;
}

static double get_num(cfgctx *c, const cJSON *obj, const char *name, double def, int *found) {
    const cJSON *v = obj ? cJSON_GetObjectItemCaseSensitive(obj, name) : NULL;
    if (found) *found = 0;
    if (!v || cJSON_IsNull(v)) return def;
    if (!cJSON_IsNumber(v)) {
        if (!c->st) c->st = err_set(c->err, SL_ECONFIG, "%s: field '%s' must be a number", c->path, name);
        return def;
    }
    if (found) *found = 1;
    return v->valuedouble;
}

static int get_bool(cfgctx *c, const char *name, int def) {
    const cJSON *v = field(c, name);
    if (!v) return def;
    if (!cJSON_IsBool(v)) {
        if (!c->st) c->st = err_set(c->err, SL_ECONFIG, "%s: field '%s' must be true or false", c->path, name);
        return def;
    }
    return cJSON_IsTrue(v);
}

/* ---- the reader family hooks use (family/arch.h) ---- */

int hfc_int(hfc *c, const char *name, int required, int def) { return get_int(c, name, required, def); }
int hfc_bool(hfc *c, const char *name, int def) { return get_bool(c, name, def); }
int hfc_has(hfc *c, const char *name) { return field(c, name) != NULL; }

int hfc_product(hfc *c, const char *name, int a, int b) {
    int64_t p = (int64_t)a * b; /* both are 0..1e9 (get_int): no overflow in 64 bits */
    if (p <= 1000000000) return (int)p;
    if (!c->st) c->st = err_set(c->err, SL_ECONFIG, "%s: field '%s' (%d) times %d is out of range", c->path, name, a, b);
    return 0;
}

double hfc_num(hfc *c, const char *name, double def, int *found) {
    const cJSON *v = field(c, name);
    if (found) *found = 0;
    if (!v) return def;
    if (!cJSON_IsNumber(v)) {
        if (!c->st) c->st = err_set(c->err, SL_ECONFIG, "%s: field '%s' must be a number", c->path, name);
        return def;
    }
    if (found) *found = 1;
    return v->valuedouble;
}

/* The value at a dotted path ("rope_parameters.full_attention.rope_theta", "layer_types.3": an array's element) under
 * the text config, else the root. */
static const cJSON *at_path(const cfgctx *c, const char *path) {
    char key[64];
    const char *p = path, *dot = strchr(p, '.');
    size_t n = dot ? (size_t)(dot - p) : strlen(p);
    if (n >= sizeof key) return NULL;
    memcpy(key, p, n);
    key[n] = 0;
    const cJSON *v = field(c, key);
    while (v && dot) {
        p = dot + 1;
        dot = strchr(p, '.');
        n = dot ? (size_t)(dot - p) : strlen(p);
        if (n >= sizeof key || (!cJSON_IsObject(v) && !cJSON_IsArray(v))) return NULL;
        memcpy(key, p, n);
        key[n] = 0;
        v = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, atoi(key)) : cJSON_GetObjectItemCaseSensitive(v, key);
    }
    return v && !cJSON_IsNull(v) ? v : NULL;
}

double hfc_path_num(hfc *c, const char *path, double def, int *found) {
    const cJSON *v = at_path(c, path);
    if (found) *found = 0;
    if (!v) return def;
    if (!cJSON_IsNumber(v)) {
        if (!c->st) c->st = err_set(c->err, SL_ECONFIG, "%s: field '%s' must be a number", c->path, path);
        return def;
    }
    if (found) *found = 1;
    return v->valuedouble;
}

int hfc_path_is_str(hfc *c, const char *path) { return cJSON_IsString(at_path(c, path)); }

int hfc_array_size(hfc *c, const char *path) {
    const cJSON *v = at_path(c, path);
    return cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
}

const char *hfc_path_str(hfc *c, const char *path) {
    const cJSON *v = at_path(c, path);
    if (v && !cJSON_IsString(v)) {
        if (!c->st) c->st = err_set(c->err, SL_ECONFIG, "%s: field '%s' must be a string", c->path, path);
        return NULL;
    }
    return v ? v->valuestring : NULL;
}

void hfc_fail(hfc *c, sl_status st, const char *fmt, ...) {
    if (c->st) return;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->st = err_set(c->err, st, "%s: %s", c->path, msg);
}

/* layer_types, when config.json has it, into flags: 1 for `kind`, 0 for full attention. Returns 1 when
 * read, 0 when absent, -1 on an error (recorded in c). */
static int layer_types(hfc *c, const fam_config *o, const char *kind, uint8_t *flags) {
    const cJSON *lt = field(c, "layer_types");
    if (!lt) return 0;
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != o->n_layers) {
        hfc_fail(c, SL_ECONFIG, "'layer_types' has %d entries but num_hidden_layers is %d",
                 cJSON_IsArray(lt) ? cJSON_GetArraySize(lt) : -1, o->n_layers);
        return -1;
    }
    for (int i = 0; i < o->n_layers; i++) {
        const cJSON *e = cJSON_GetArrayItem(lt, i);
        if (cJSON_IsString(e) && !strcmp(e->valuestring, kind)) flags[i] = 1;
        else if (cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention")) flags[i] = 0;
        else {
            hfc_fail(c, SL_ECONFIG, "layer_types[%d] must be '%s' or 'full_attention'", i, kind);
            return -1;
        }
    }
    return 1;
}

int hfc_layer_flags(hfc *c, const fam_config *o, const char *name, const char *zero, const char *one, uint8_t *flags) {
    const cJSON *lt = field(c, name);
    if (c->st || !lt || cJSON_IsNull(lt)) return 0;
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != o->n_layers) {
        hfc_fail(c, SL_ECONFIG, "'%s' has %d entries but num_hidden_layers is %d", name,
                 cJSON_IsArray(lt) ? cJSON_GetArraySize(lt) : -1, o->n_layers);
        return 0;
    }
    for (int i = 0; i < o->n_layers; i++) {
        const cJSON *e = cJSON_GetArrayItem(lt, i);
        const int z = cJSON_IsString(e) && !strcmp(e->valuestring, zero), n1 = cJSON_IsString(e) && !strcmp(e->valuestring, one);
        if (!z && !n1) {
            hfc_fail(c, SL_ECONFIG, "%s[%d] must be '%s' or '%s'", name, i, zero, one);
            return 0;
        }
        flags[i] = (uint8_t)n1;
    }
    return 1;
}

void hfc_linear_layers(hfc *c, fam_config *o) {
    if (c->st) return;
    int got = layer_types(c, o, "linear_attention", o->layer_linear);
    if (got) return;
    int iv = get_int(c, "full_attention_interval", 0, 4);
    if (iv < 1) {
        hfc_fail(c, SL_ECONFIG, "full_attention_interval must be >= 1");
        return;
    }
    for (int i = 0; i < o->n_layers; i++) o->layer_linear[i] = (i + 1) % iv != 0;
}

void hfc_sliding_layers(hfc *c, fam_config *o) {
    if (c->st) return;
    int any = 0, got = layer_types(c, o, "sliding_attention", o->layer_sliding);
    if (got < 0) return;
    if (!got) /* configuration_gpt_oss.py's default: sliding at even layers */
        for (int i = 0; i < o->n_layers; i++) o->layer_sliding[i] = (i + 1) % 2 != 0;
    for (int i = 0; i < o->n_layers; i++) any |= o->layer_sliding[i];
    if (!any) return;
    o->sliding_window = get_int(c, "sliding_window", 1, 0);
    if (!c->st && o->sliding_window < 1) hfc_fail(c, SL_ECONFIG, "sliding_window must be >= 1");
}

static void yarn_fields(hfc *c, const cJSON *rp, fam_config *o);

const char *hfc_str(hfc *c, const char *name) {
    const cJSON *v = field(c, name);
    if (v && !cJSON_IsString(v)) {
        hfc_fail(c, SL_ECONFIG, "field '%s' must be a string", name);
        return NULL;
    }
    return v ? v->valuestring : NULL;
}

int hfc_strs(hfc *c, const char *name, int n, uint8_t *out, int (*map)(const char *)) {
    const cJSON *a = field(c, name);
    if (!a || c->st) return 0;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n) {
        hfc_fail(c, SL_ECONFIG, "'%s' must be a list of %d entries (num_hidden_layers)", name, n);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(a, i);
        int v = cJSON_IsString(e) ? map(e->valuestring) : -1;
        if (v < 0) {
            hfc_fail(c, SL_ECONFIG, "%s[%d] is not a kind sluice knows", name, i);
            return 0;
        }
        out[i] = (uint8_t)v;
    }
    return 1;
}

int hfc_ints(hfc *c, const char *name, int n, int *out) {
    const cJSON *a = field(c, name);
    if (!a || c->st) return 0;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) < n) {
        hfc_fail(c, SL_ECONFIG, "'%s' must be a list of at least %d entries (num_hidden_layers)", name, n);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 || e->valuedouble > 1e9) {
            hfc_fail(c, SL_ECONFIG, "%s[%d] must be a non-negative integer", name, i);
            return 0;
        }
        out[i] = (int)e->valuedouble;
    }
    return 1;
}

int hfc_nums(hfc *c, const char *name, int n, float *out) {
    const cJSON *a = field(c, name);
    if (!a || cJSON_IsNull(a) || c->st) return 0;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n) {
        hfc_fail(c, SL_ECONFIG, "'%s' must be a list of %d numbers (num_hidden_layers)", name, n);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0) || e->valuedouble > 1e30) {
            hfc_fail(c, SL_ECONFIG, "%s[%d] must be a number >= 0", name, i);
            return 0;
        }
        out[i] = (float)e->valuedouble;
    }
    return 1;
}

int hfc_sub_int(hfc *c, const char *object, const char *name, int def) {
    const cJSON *o = field(c, object), *v = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, name) : NULL;
    if (!v || cJSON_IsNull(v)) return def;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 || v->valuedouble > 1e9) {
        hfc_fail(c, SL_ECONFIG, "'%s.%s' must be a non-negative integer", object, name);
        return def;
    }
    return (int)v->valuedouble;
}

int hfc_sub_ints(hfc *c, const char *object, const char *name, int n, int *out) {
    const cJSON *o = field(c, object), *a = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, name) : NULL;
    if (!cJSON_IsArray(a) || c->st) return 0;
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        if (k >= n) break;
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 || e->valuedouble > 1e9) {
            hfc_fail(c, SL_ECONFIG, "%s.%s[%d] must be a non-negative integer", object, name, k);
            return 0;
        }
        out[k++] = (int)e->valuedouble;
    }
    return k;
}

void hfc_rope_sub(hfc *c, const char *sub, fam_config *o) {
    const cJSON *rp = field(c, "rope_parameters");
    const cJSON *s = cJSON_IsObject(rp) ? cJSON_GetObjectItemCaseSensitive(rp, sub) : NULL;
    if (!cJSON_IsObject(s) || c->st) return;
    const cJSON *rt = cJSON_GetObjectItemCaseSensitive(s, "rope_type");
    if (cJSON_IsString(rt) && !strcmp(rt->valuestring, "yarn")) yarn_fields(c, s, o);
    else if (cJSON_IsString(rt) && strcmp(rt->valuestring, "default"))
        hfc_fail(c, SL_EUNSUPPORTED, "rope_parameters.%s.rope_type '%s' is not supported (only 'default' and 'yarn')",
                 sub, rt->valuestring);
}

void hfc_sparse_layers(hfc *c, fam_config *o) {
    if (c->st) return;
    int step = get_int(c, "decoder_sparse_step", 0, 1);
    const cJSON *mo = field(c, "mlp_only_layers");
    int any_dense = 0;
    for (int i = 0; i < o->n_layers; i++) {
        int dense = (step < 1) || ((i + 1) % step != 0) || o->n_experts == 0;
        if (cJSON_IsArray(mo)) {
            const cJSON *e;
            cJSON_ArrayForEach(e, mo) if (cJSON_IsNumber(e) && e->valuedouble == (double)i) dense = 1; /* no int cast: any number */
        }
        o->layer_moe[i] = !dense;
        any_dense |= dense;
    }
    if (any_dense) o->dense_inter = get_int(c, "intermediate_size", 1, 0);
}

/* ---- hf_parse_config ---- */

/* rope_type 'yarn' (transformers' modeling_rope_utils.py _compute_yarn_parameters): factor, original_max_position_embeddings
 * (default max_position_embeddings), beta_fast, beta_slow, mscale, mscale_all_dim, truncate (default true),
 * attention_factor. Needs o->max_pos. */
/* rope_type "dynamic" with a fixed alpha (HunYuan's checkpoints; transformers' modeling_hunyuan_v1_moe.py
 * compute_ntk_alpha_rope_parameters): the base stretched to rope_theta * alpha^(head_dim / (head_dim - 2)), in double
 * as Python computes it; a factor other than 1 (true dynamic NTK, which depends on the sequence length) is refused. */
static void ntk_alpha(hfc *c, const cJSON *rp, fam_config *o) {
    int fa = 0;
    const double alpha = get_num(c, rp, "alpha", 1.0, &fa), factor = get_num(c, rp, "factor", 1.0, NULL);
    if (!fa || factor != 1.0 || !(alpha > 0) || o->head_dim <= 2) {
        hfc_fail(c, SL_EUNSUPPORTED, "rope_type 'dynamic' is supported with a fixed alpha and factor 1 only (HunYuan's)");
        return;
    }
    o->rope_theta *= pow(alpha, (double)o->head_dim / (o->head_dim - 2));
}

static void yarn_fields(hfc *c, const cJSON *rp, fam_config *o) {
    int found = 0;
    o->rope_type = SL_ROPE_YARN;
    double omp = get_num(c, rp, "original_max_position_embeddings", o->max_pos, &found);
    if (!c->st && (omp != floor(omp) || omp < 1 || omp > 1e9))
        hfc_fail(c, SL_ECONFIG, "rope 'original_max_position_embeddings' must be a positive integer");
    o->rope_orig_max_pos = omp >= 1 && omp <= 1e9 ? (int)omp : 0; /* converted only in range (fuzz/regress/hf_config) */
    o->rope_factor = get_num(c, rp, "factor", 0, &found);
    if (!found) o->rope_factor = (double)o->max_pos / (omp >= 1 ? omp : 1);
    o->yarn_beta_fast = get_num(c, rp, "beta_fast", 32, NULL);
    o->yarn_beta_slow = get_num(c, rp, "beta_slow", 1, NULL);
    o->yarn_mscale = get_num(c, rp, "mscale", 0, NULL);
    o->yarn_mscale_all_dim = get_num(c, rp, "mscale_all_dim", 0, NULL);
    o->rope_attn_factor = get_num(c, rp, "attention_factor", 0, &found);
    if (found && !(o->rope_attn_factor > 0) && !c->st) hfc_fail(c, SL_ECONFIG, "rope 'attention_factor' must be positive");
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(rp, "truncate");
    o->yarn_truncate = !cJSON_IsBool(tr) || cJSON_IsTrue(tr);
    if (!c->st && !(o->rope_factor > 0 && isfinite(o->rope_factor)))
        hfc_fail(c, SL_ECONFIG, "rope 'factor' must be positive");
    if (!c->st && !(o->yarn_beta_fast > 0 && o->yarn_beta_slow > 0 && isfinite(o->yarn_beta_fast) &&
                    isfinite(o->yarn_beta_slow)))
        hfc_fail(c, SL_ECONFIG, "rope 'beta_fast' and 'beta_slow' must be positive");
}

/* rope_type 'llama3' (modeling_rope_utils.py _compute_llama3_parameters): factor, low_freq_factor,
 * high_freq_factor, original_max_position_embeddings, all required. high == low (Llama-4-Scout's config) leaves
 * no blended band: transformers only warns of it (src/transformers/modeling_rope_utils.py _validate_llama3_rope_parameters). */
static void llama3_fields(hfc *c, const cJSON *rp, fam_config *o) {
    int f1 = 0, f2 = 0, f3 = 0, f4 = 0;
    o->rope_type = SL_ROPE_LLAMA3;
    o->rope_factor = get_num(c, rp, "factor", 0, &f1);
    o->rope_low_freq = get_num(c, rp, "low_freq_factor", 0, &f2);
    o->rope_high_freq = get_num(c, rp, "high_freq_factor", 0, &f3);
    double omp = get_num(c, rp, "original_max_position_embeddings", 0, &f4);
    o->rope_orig_max_pos = omp >= 1 && omp <= 1e9 && omp == floor(omp) ? (int)omp : 0;
    if (!c->st && (!f1 || !f2 || !f3 || !f4 || !(o->rope_factor > 0) || !(o->rope_low_freq > 0) ||
                   !(o->rope_high_freq >= o->rope_low_freq) || o->rope_orig_max_pos < 1))
        hfc_fail(c, SL_ECONFIG, "rope 'llama3' needs factor > 0, 0 < low_freq_factor <= high_freq_factor and "
                 "original_max_position_embeddings");
}

/* The fields every family reads the same way: vocabulary, dimensions, heads, experts, eps, RoPE, tied
 * embeddings. */
static void common_fields(hfc *c, const arch_desc *a, fam_config *o) {
    const char *path = c->path;
    sl_error *err = c->err;
    o->vocab = get_int(c, "vocab_size", 1, 0);
    o->hidden = get_int(c, "hidden_size", 1, 0);
    const int by_num_layers = !field(c, "num_hidden_layers") && field(c, "num_layers"); /* LongCat-Flash */
    o->n_layers = get_int(c, by_num_layers ? "num_layers" : "num_hidden_layers", 1, 0);
    o->n_heads = get_int(c, "num_attention_heads", 1, 0);
    o->n_kv_heads = get_int(c, "num_key_value_heads", 0, o->n_heads);
    o->head_dim = get_int(c, "head_dim", 0, o->n_heads ? o->hidden / (o->n_heads ? o->n_heads : 1) : 0);
    o->max_pos = get_int(c, "max_position_embeddings", 0, 32768);
    o->n_experts_used = get_int(c, "num_experts_per_tok", 0, -1);
    if (o->n_experts_used < 0) o->n_experts_used = get_int(c, "moe_k", 0, -1); /* ERNIE 4.5's name */
    if (o->n_experts_used < 0) o->n_experts_used = get_int(c, "moe_topk", 0, -1); /* HunYuan's */
    if (o->n_experts_used < 0) o->n_experts_used = get_int(c, "num_experts_per_token", 0, -1); /* Kimi Linear's */
    if (o->n_experts_used < 0) o->n_experts_used = get_int(c, "top_k_experts", 0, -1); /* Gemma 4's */
    if (o->n_experts_used < 0) o->n_experts_used = get_int(c, "num_experts_per_tok", 1, 0); /* the error names it */
    int ne = get_int(c, "num_experts", 0, -1), nle = get_int(c, "num_local_experts", 0, -1);
    if (ne < 0) ne = get_int(c, "moe_num_experts", 0, -1); /* ERNIE 4.5's name */
    int nre = get_int(c, "n_routed_experts", 0, -1); /* GLM-4.5, DeepSeek-V3 */
    if (!c->st && ne >= 0 && nle >= 0 && ne != nle)
        c->st = err_set(err, SL_ECONFIG, "%s: 'num_experts' (%d) and 'num_local_experts' (%d) disagree", path, ne, nle);
    if (ne < 0) ne = nle;
    if (!c->st && ne >= 0 && nre >= 0 && ne != nre)
        c->st = err_set(err, SL_ECONFIG, "%s: 'num_experts' (%d) and 'n_routed_experts' (%d) disagree", path, ne, nre);
    if (ne < 0) ne = nre;
    if (!c->st && ne < 0)
        c->st = err_set(err, SL_ECONFIG, "%s: missing required field 'num_experts' (or 'num_local_experts', "
                       "'n_routed_experts')", path);
    o->n_experts = ne;
    {
        const cJSON *v = field(c, "rms_norm_eps");
        o->eps = cJSON_IsNumber(v) ? (float)v->valuedouble : 1e-6f;
    }
    /* rope: top-level rope_theta and/or rope_parameters.rope_theta; partial_rotary_factor likewise */
    const cJSON *rp = field(c, "rope_parameters");
    if (!rp) rp = field(c, "rope_scaling");
    int f1 = 0, f2 = 0;
    double th1 = get_num(c, c->t, "rope_theta", 10000.0, &f1);
    double th2 = get_num(c, cJSON_IsObject(rp) ? rp : NULL, "rope_theta", 10000.0, &f2);
    if (!c->st && f1 && f2 && th1 != th2)
        c->st = err_set(err, SL_ECONFIG, "%s: 'rope_theta' (%g) and 'rope_parameters.rope_theta' (%g) disagree", path,
                       th1, th2);
    o->rope_theta = f1 ? th1 : th2;
    if (cJSON_IsObject(rp)) {
        const cJSON *rt = cJSON_GetObjectItemCaseSensitive(rp, "rope_type");
        if (!rt) rt = cJSON_GetObjectItemCaseSensitive(rp, "type");
        if (cJSON_IsString(rt) && !strcmp(rt->valuestring, "yarn"))
            yarn_fields(c, rp, o);
        else if (cJSON_IsString(rt) && !strcmp(rt->valuestring, "dynamic"))
            ntk_alpha(c, rp, o);
        else if (cJSON_IsString(rt) && !strcmp(rt->valuestring, "llama3"))
            llama3_fields(c, rp, o);
        else if (cJSON_IsString(rt) && strcmp(rt->valuestring, "default") && !c->st)
            c->st = err_set(err, SL_EUNSUPPORTED, "%s: rope_type '%s' is not supported (only 'default', 'yarn', "
                           "'dynamic' and 'llama3')", path, rt->valuestring);
    }
    double prf = a->prf_default;
    int fp1 = 0, fp2 = 0;
    double p1 = get_num(c, c->t, "partial_rotary_factor", prf, &fp1);
    double p2 = get_num(c, cJSON_IsObject(rp) ? rp : NULL, "partial_rotary_factor", prf, &fp2);
    if (!c->st && fp1 && fp2 && p1 != p2)
        c->st = err_set(err, SL_ECONFIG, "%s: 'partial_rotary_factor' (%g) and 'rope_parameters.partial_rotary_factor' "
                       "(%g) disagree", path, p1, p2);
    prf = fp1 ? p1 : p2;
    /* checked before the conversion: a factor far out of range does not fit an int (fuzz/regress/hf_config) */
    if (!c->st && !(prf >= 0 && prf <= 1))
        c->st = err_set(err, SL_ECONFIG, "%s: partial_rotary_factor = %g (must be in [0, 1])", path, prf);
    o->rot_dim = prf >= 0 && prf <= 1 ? (int)(o->head_dim * prf) : 0;
    o->tie_embeddings = get_bool(c, "tie_word_embeddings", 0);
    if (cJSON_GetObjectItemCaseSensitive(c->root, "tie_word_embeddings") && c->t != c->root) {
        /* the VLM wrapper's top-level value is the one transformers uses */
        const cJSON *tv = cJSON_GetObjectItemCaseSensitive(c->root, "tie_word_embeddings");
        if (cJSON_IsBool(tv)) o->tie_embeddings = cJSON_IsTrue(tv);
    }
    if (!a->reads_attention_bias && get_bool(c, "attention_bias", 0) && !c->st)
        c->st = err_set(err, SL_EUNSUPPORTED, "%s: attention_bias = true is not supported", path);
}

sl_status hf_parse_config(const char *text, const char *path, fam_config *out, sl_error *err) {
    memset(out, 0, sizeof *out);
    cJSON *root = cJSON_Parse(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return err_set(err, SL_ECONFIG, "%s: not a JSON object", path);
    }
    hfc c = {root, root, path, err, SL_OK};
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (!cJSON_IsString(mt)) {
        cJSON_Delete(root);
        return err_set(err, SL_ECONFIG, "%s: missing required field 'model_type'", path);
    }
    const char *type = mt->valuestring;
    const arch_desc *a = arch_by_hf_type(type);
    if (!a) {
        sl_status st = err_set(err, SL_EUNSUPPORTED, "%s: unsupported model_type '%s' (supported: %s)", path, type,
                              arch_hf_type_list());
        cJSON_Delete(root);
        return st;
    }
    out->arch = a->id;
    arch_set_traits(out);
    if (a->text_config_type && !strcmp(type, a->text_config_type)) {
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
        if (!cJSON_IsObject(tc)) {
            sl_status st = err_set(err, SL_ECONFIG, "%s: model_type %s needs a 'text_config' object", path, type);
            cJSON_Delete(root); /* after the message: type points into root */
            return st;
        }
        c.t = tc;
    }
    fam_config *o = out;
    common_fields(&c, a, o);
    if (c.st) goto done;
    if (o->n_layers < 1 || o->n_layers > SL_MAX_LAYERS) {
        c.st = err_set(err, SL_ECONFIG, "%s: num_hidden_layers = %d (must be 1..%d)", path, o->n_layers, SL_MAX_LAYERS);
        goto done;
    }
    for (int i = 0; i < o->n_layers; i++) o->layer_moe[i] = 1;
    a->config(&c, o); /* the family's fields, layer kinds */
    if (c.st) goto done;
    int any_linear = 0;
    for (int i = 0; i < o->n_layers; i++) any_linear |= o->layer_linear[i];
    /* consistency */
#define BAD(...) do { c.st = err_set(err, SL_ECONFIG, __VA_ARGS__); goto done; } while (0)
    if (o->vocab < 1 || o->hidden < 1 || o->n_heads < 1 || o->head_dim < 1) BAD("%s: vocab_size, hidden_size, num_attention_heads and head_dim must be positive", path);
    if (o->n_kv_heads < 1 || o->n_heads % o->n_kv_heads) BAD("%s: num_attention_heads (%d) is not a multiple of num_key_value_heads (%d)", path, o->n_heads, o->n_kv_heads);
    if (o->n_experts < 1) BAD("%s: num_experts must be positive", path);
    if (o->n_experts_used < 1 || o->n_experts_used > o->n_experts) BAD("%s: num_experts_per_tok (%d) must be in 1..num_experts (%d)", path, o->n_experts_used, o->n_experts);
    if (o->moe_inter < 1) BAD("%s: moe_intermediate_size must be positive", path);
    if (o->rot_dim < 0 || o->rot_dim > o->head_dim || o->rot_dim % 2) BAD("%s: partial_rotary_factor gives %d rotary dims of head_dim %d (must be even and <= head_dim)", path, o->rot_dim, o->head_dim);
    if (!(o->rope_theta > 0)) BAD("%s: rope_theta must be positive", path);
    if (!(o->eps > 0)) BAD("%s: rms_norm_eps must be positive", path);
    if (any_linear && !o->short_conv) {
        if (o->lin_nk < 1 || o->lin_nv < 1 || o->lin_dk < 1 || o->lin_dv < 1 || o->conv_k < 1) BAD("%s: linear attention dimensions must be positive", path);
        if (o->lin_nv % o->lin_nk) BAD("%s: linear_num_value_heads (%d) is not a multiple of linear_num_key_heads (%d)", path, o->lin_nv, o->lin_nk);
    }
#undef BAD
done:
    cJSON_Delete(root);
    return c.st;
}
