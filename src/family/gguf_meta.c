/*
 * gguf_meta.c — a GGUF model's metadata as the Hugging Face config.json sluice reads (so the family's own
 * config hook and checks run, family/hf_config.c); the tokenizer files are rebuilt in import/gguf_tokenizer.c.
 *
 * Keys are the ones llama.cpp's convert_hf_to_gguf.py writes (gguf-py constants.py Keys): "<arch>.block_count",
 * ".embedding_length", ".attention.head_count(_kv)", ".expert_count", ... A size the metadata does not give is
 * taken from the tensors (the expert width from ffn_gate_exps, the vocabulary from token_embd); which layers
 * are dense, whether q/k/v have biases and q/k norms, and tied embeddings are read from which tensors exist.
 * The keys every family shares are read here; the family's own go through its gguf_config hook
 * (src/family/arch/<family>.c), which reads with the ggm_* accessors of family/arch.h and writes config.json
 * fields with ggm_set_*.
 *
 * Sections: the key/value lookups (gguf_kv_*), the metadata accessors (ggm_*), config.json (gguf_config_json).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family/arch.h"
#include "family/gguf_meta.h"
#include "util/err.h"
#include "util/fileio.h"

struct ggm {
    const gguf_model *m;
    const gguf_file *f; /* files[0]: the metadata */
    const char *arch;   /* general.architecture */
    cJSON *c;           /* the config.json being built */
    sl_error *err;
    sl_status st;
};
typedef struct ggm meta;

const gguf_kv *gguf_kv_find(const gguf_file *f, const char *key) {
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (f->kv[i].key && !strcmp(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

static const gguf_kv *kv_arch(meta *x, const char *suffix) {
    char k[160];
    snprintf(k, sizeof k, "%s.%s", x->arch, suffix);
    return gguf_kv_find(x->f, k);
}

int gguf_kv_num(const gguf_kv *kv, double *v) {
    if (!kv) return 0;
    switch (kv->type) {
    case GGUF_U8: case GGUF_U16: case GGUF_U32: case GGUF_U64: case GGUF_BOOL: *v = (double)kv->v.u; return 1;
    case GGUF_I8: case GGUF_I16: case GGUF_I32: case GGUF_I64: *v = (double)kv->v.i; return 1;
    case GGUF_F32: case GGUF_F64: *v = kv->v.f; return 1;
    }
    return 0;
}

static void vfail(meta *x, sl_status st, const char *fmt, va_list ap) {
    if (x->st) return;
    char msg[500];
    vsnprintf(msg, sizeof msg, fmt, ap);
    x->st = err_set(x->err, st, "%s: %s", x->f->path, msg);
}

static void fail(meta *x, sl_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(meta *x, sl_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(x, st, fmt, ap);
    va_end(ap);
}

void ggm_fail(ggm *x, sl_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(x, st, fmt, ap);
    va_end(ap);
}

/* Element i of a numeric array kv as a number. */
static double arr_num(const gguf_kv *kv, uint64_t i) {
    int sz = kv->arr_type == GGUF_U8 || kv->arr_type == GGUF_I8 || kv->arr_type == GGUF_BOOL ? 1
             : kv->arr_type == GGUF_U16 || kv->arr_type == GGUF_I16                        ? 2
             : kv->arr_type == GGUF_U64 || kv->arr_type == GGUF_I64 || kv->arr_type == GGUF_F64 ? 8 : 4;
    const uint8_t *p = (const uint8_t *)kv->arr + i * (uint64_t)sz;
    uint64_t u = 0;
    for (int b = 0; b < sz; b++) u |= (uint64_t)p[b] << (8 * b);
    gguf_kv e = {0};
    e.type = kv->arr_type;
    if (e.type == GGUF_F32) { uint32_t w = (uint32_t)u; float f; memcpy(&f, &w, 4); e.v.f = f; }
    else if (e.type == GGUF_F64) memcpy(&e.v.f, &u, 8);
    else if (e.type == GGUF_I8) e.v.i = (int8_t)u;
    else if (e.type == GGUF_I16) e.v.i = (int16_t)u;
    else if (e.type == GGUF_I32) e.v.i = (int32_t)u;
    else if (e.type == GGUF_I64) e.v.i = (int64_t)u;
    else e.v.u = u;
    double y = 0;
    gguf_kv_num(&e, &y);
    return y;
}

static int num_array(const gguf_kv *kv) {
    return kv && kv->type == GGUF_ARRAY && !kv->nested && kv->n > 0 && kv->arr_type != GGUF_STRING;
}

double ggm_num(ggm *x, const char *suffix, int required, double def, int *found) {
    const gguf_kv *kv = kv_arch(x, suffix);
    double v = def;
    if (found) *found = 0;
    if (x->st) return def;
    if (!kv) {
        if (required) fail(x, SL_ECONFIG, "missing metadata key '%s.%s'", x->arch, suffix);
        return def;
    }
    if (num_array(kv)) { /* per layer */
        v = arr_num(kv, 0);
        for (uint64_t i = 1; i < kv->n; i++)
            if (arr_num(kv, i) != v) {
                fail(x, SL_EUNSUPPORTED, "'%s.%s' differs between layers (not supported)", x->arch, suffix);
                return def;
            }
    } else if (!gguf_kv_num(kv, &v)) {
        fail(x, SL_ECONFIG, "metadata key '%s.%s' must be a number", x->arch, suffix);
        return def;
    }
    if (found) *found = 1;
    return v;
}

int ggm_layer_nums(ggm *x, const char *suffix, int n, double *out) {
    const gguf_kv *kv = kv_arch(x, suffix);
    double v;
    if (x->st || !kv) return 0;
    if (num_array(kv)) {
        if (kv->n < (uint64_t)n) { /* more: the multi-token-prediction layers' entries follow */
            fail(x, SL_ECONFIG, "'%s.%s' has %llu entries for %d layers", x->arch, suffix, (unsigned long long)kv->n, n);
            return 0;
        }
        for (int i = 0; i < n; i++) out[i] = arr_num(kv, (uint64_t)i);
        return 1;
    }
    if (!gguf_kv_num(kv, &v)) {
        fail(x, SL_ECONFIG, "metadata key '%s.%s' must be a number or a per-layer array", x->arch, suffix);
        return 0;
    }
    for (int i = 0; i < n; i++) out[i] = v;
    return 1;
}

int ggm_count(ggm *x, const char *suffix, int required, int def, int *found) {
    int f = 0;
    double v = ggm_num(x, suffix, required, def, &f);
    if (found) *found = f;
    if (f && !(v >= 0 && v <= (double)(1 << 30) && v == floor(v))) {
        fail(x, SL_ECONFIG, "metadata key '%s.%s' is %g, not a count", x->arch, suffix, v);
        if (found) *found = 0;
        return def;
    }
    return f ? (int)v : def;
}

static const gguf_tensor *tensor(meta *x, const char *name) {
    for (int i = 0; i < x->m->n_files; i++)
        for (uint64_t j = 0; j < x->m->files[i].n_tensors; j++)
            if (!strcmp(x->m->files[i].t[j].name, name)) return &x->m->files[i].t[j];
    return NULL;
}

static const gguf_tensor *blk_tensor(meta *x, int l, const char *rel) {
    if (l < 0) return tensor(x, rel);
    char nm[200];
    snprintf(nm, sizeof nm, "blk.%d.%s", l, rel);
    return tensor(x, nm);
}

int ggm_has(ggm *x, int layer, const char *rel) { return blk_tensor(x, layer, rel) != NULL; }

int ggm_f32(ggm *x, int layer, const char *rel, float *out, int64_t n) {
    const gguf_tensor *t = blk_tensor(x, layer, rel);
    if (x->st || !t) return 0;
    if (t->type != 0 /* GGML F32 */ || t->bytes != (uint64_t)n * sizeof *out) {
        fail(x, SL_EUNSUPPORTED, "tensor '%s' must be F32 of %lld elements", t->name, (long long)n);
        return 0;
    }
    const gguf_file *f = NULL;
    for (int i = 0; i < x->m->n_files && !f; i++)
        if (t >= x->m->files[i].t && t < x->m->files[i].t + x->m->files[i].n_tensors) f = &x->m->files[i];
    if (!f) return 0;
    if ((x->st = fio_pread_all(f->fd, out, (size_t)t->bytes, t->off, f->path, x->err))) return 0;
    return 1;
}

int64_t ggm_ne(ggm *x, int layer, const char *rel, int d) {
    const gguf_tensor *t = blk_tensor(x, layer, rel);
    return t && d >= 0 && d < 4 ? t->ne[d] : 0;
}

/* The object a field lives in and the name in it: "a.b.c" is c of object b of object a (created when absent). */
static cJSON *field_home(meta *x, const char *field, const char **name, char *buf, size_t cap) {
    cJSON *o = x->c;
    snprintf(buf, cap, "%s", field);
    char *p = buf, *dot;
    while (o && (dot = strchr(p, '.'))) {
        *dot = 0;
        cJSON *c = cJSON_GetObjectItemCaseSensitive(o, p);
        o = cJSON_IsObject(c) ? c : c ? NULL : cJSON_AddObjectToObject(o, p);
        p = dot + 1;
    }
    *name = p;
    return o;
}

static void set_item(meta *x, const char *field, cJSON *v) {
    const char *name;
    char buf[160];
    cJSON *o = field_home(x, field, &name, buf, sizeof buf);
    if (!o || !v) {
        cJSON_Delete(v);
        if (!x->st) x->st = err_set(x->err, SL_ENOMEM, "out of memory");
        return;
    }
    if (cJSON_GetObjectItemCaseSensitive(o, name)) cJSON_ReplaceItemInObjectCaseSensitive(o, name, v);
    else cJSON_AddItemToObject(o, name, v);
}

void ggm_set_num(ggm *x, const char *field, double v) { set_item(x, field, cJSON_CreateNumber(v)); }
void ggm_set_bool(ggm *x, const char *field, int v) { set_item(x, field, cJSON_CreateBool(v)); }
void ggm_set_str(ggm *x, const char *field, const char *v) { set_item(x, field, cJSON_CreateString(v)); }
void ggm_set_strs(ggm *x, const char *field, const char *const *v, int n) {
    set_item(x, field, cJSON_CreateStringArray(v, n));
}
void ggm_set_nums(ggm *x, const char *field, const double *v, int n) {
    set_item(x, field, n > 0 ? cJSON_CreateDoubleArray(v, n) : cJSON_CreateArray());
}

double ggm_moe_inter(ggm *x, const arch_gguf_common *g) {
    if (!g->moe_inter_found) fail(x, SL_ECONFIG, "missing metadata key '%s.expert_feed_forward_length'", x->arch);
    return g->moe_inter;
}

const char *gguf_kv_str(const gguf_file *f, const char *key) {
    const gguf_kv *kv = gguf_kv_find(f, key);
    return kv && kv->type == GGUF_STRING ? kv->str : NULL;
}

/* attention.head_count_kv: a count, or a per-layer array whose layers without attention hold 0 (llama.cpp's LFM2 and
 * Granite hybrid files; the family hook reads the layer kinds from it with ggm_layer_nums): the first attention
 * layer's count; g->kv_heads_vary when the attention layers' counts differ (Gemma 4's full layers: refused after
 * the hook unless it cleared g->check_kv_heads, having read them per layer). */
static int kv_head_count(meta *x, int heads, arch_gguf_common *g) {
    const gguf_kv *kv = kv_arch(x, "attention.head_count_kv");
    if (!num_array(kv)) return ggm_count(x, "attention.head_count_kv", 0, heads, NULL);
    double v = 0;
    for (uint64_t i = 0; i < kv->n; i++) {
        double y = arr_num(kv, i);
        if (!(y >= 0 && y <= (double)(1 << 30) && y == floor(y))) {
            fail(x, SL_ECONFIG, "metadata key '%s.attention.head_count_kv' holds %g, not a count", x->arch, y);
            return 0;
        }
        if (y != 0 && v != 0 && y != v) g->kv_heads_vary = 1;
        if (y != 0 && v == 0) v = y;
    }
    return v > 0 ? (int)v : heads;
}

/* The keys every family shares (dimensions, heads, experts, context, eps, RoPE and its YaRN scaling, tied
 * embeddings) as config.json fields, into g what the family's hook needs of them. Errors go to x->st. */
static void common_fields(meta *x, const arch_desc *a, arch_gguf_common *g) {
    cJSON *c = x->c;
    const gguf_tensor *emb = tensor(x, "token_embd.weight");
    int n_layers = ggm_count(x, "block_count", 1, 0, NULL);
    int nextn = ggm_count(x, "nextn_predict_layers", 0, 0, NULL); /* multi-token-prediction layers, counted in block_count */
    int hidden = ggm_count(x, "embedding_length", 1, 0, NULL);
    int heads = ggm_count(x, "attention.head_count", 1, 0, NULL);
    int kv_heads = kv_head_count(x, heads, g);
    g->head_dim = ggm_count(x, "attention.key_length", 0, heads > 0 ? hidden / heads : 0, NULL);
    g->value_length = ggm_count(x, "attention.value_length", 0, g->head_dim, NULL);
    int experts = ggm_count(x, "expert_count", 0, 0, NULL);
    int used = ggm_count(x, "expert_used_count", 0, 0, NULL);
    if (x->st) return;
    if (!emb) {
        fail(x, SL_EFORMAT, "tensor 'token_embd.weight' is missing");
        return;
    }
    if (experts < 1) {
        fail(x, SL_EUNSUPPORTED, "'%s.expert_count' is %s: a dense model, which sluice does not serve (MoE only)",
             x->arch, kv_arch(x, "expert_count") ? "0" : "missing");
        return;
    }
    n_layers -= nextn;
    if (n_layers < 1 || n_layers > SL_MAX_LAYERS) {
        fail(x, SL_ECONFIG, "'%s.block_count' gives %d layers (1..%d)", x->arch, n_layers, SL_MAX_LAYERS);
        return;
    }
    g->n_layers = n_layers;
    char k[160];
    snprintf(k, sizeof k, "%s.rope.scaling.type", x->arch);
    const char *rt = gguf_kv_str(x->f, k);
    if (rt && strcmp(rt, "none") && strcmp(rt, "yarn")) {
        fail(x, SL_EUNSUPPORTED, "rope scaling '%s' is not supported (only none and yarn)", rt);
        return;
    }
    double gating = ggm_num(x, "expert_gating_func", 0, 0, NULL); /* 1 softmax, 2 sigmoid, 4 sqrt(softplus) */
    const int want = a->router == SL_ROUTER_SIGMOID_GROUP ? 2 : a->router == SL_ROUTER_SQRTSOFTPLUS ? 4 : 1;
    if (gating != 0 && gating != want) {
        fail(x, SL_EUNSUPPORTED, "'%s.expert_gating_func' is %g; %s routes with %s", x->arch, gating, a->name,
             want == 2 ? "a sigmoid (2)" : want == 4 ? "sqrt(softplus) (4)" : "a softmax (1)");
        return;
    }
    cJSON_AddStringToObject(c, "model_type", a->hf_types[0]);
    cJSON_AddNumberToObject(c, "vocab_size", (double)emb->ne[1]);
    cJSON_AddNumberToObject(c, "hidden_size", hidden);
    cJSON_AddNumberToObject(c, "num_hidden_layers", n_layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", kv_heads);
    cJSON_AddNumberToObject(c, "head_dim", g->head_dim);
    cJSON_AddNumberToObject(c, "max_position_embeddings", ggm_num(x, "context_length", 0, 32768, NULL));
    cJSON_AddNumberToObject(c, "num_experts", experts);
    cJSON_AddNumberToObject(c, "num_experts_per_tok", used);
    cJSON_AddNumberToObject(c, "rms_norm_eps", ggm_num(x, "attention.layer_norm_rms_epsilon", 0, 1e-6, NULL));
    cJSON_AddNumberToObject(c, "rope_theta", ggm_num(x, "rope.freq_base", 0, 10000.0, NULL));
    double rot = ggm_num(x, "rope.dimension_count", 0, 0, &g->rot_found);
    if (g->rot_found && g->head_dim > 0) cJSON_AddNumberToObject(c, "partial_rotary_factor", rot / g->head_dim);
    if (rt && !strcmp(rt, "yarn")) { /* transformers' rope_parameters of rope_type yarn (family/hf_config.c) */
        ggm_set_str(x, "rope_parameters.rope_type", "yarn");
        ggm_set_num(x, "rope_parameters.factor", ggm_num(x, "rope.scaling.factor", 1, 0, NULL));
        int f = 0;
        double v = ggm_num(x, "rope.scaling.original_context_length", 0, 0, &f);
        if (f) ggm_set_num(x, "rope_parameters.original_max_position_embeddings", v);
        if ((v = ggm_num(x, "rope.scaling.yarn_beta_fast", 0, 0, &f)), f) ggm_set_num(x, "rope_parameters.beta_fast", v);
        if ((v = ggm_num(x, "rope.scaling.yarn_beta_slow", 0, 0, &f)), f) ggm_set_num(x, "rope_parameters.beta_slow", v);
        if ((v = ggm_num(x, "rope.scaling.yarn_attn_factor", 0, 0, &f)), f)
            ggm_set_num(x, "rope_parameters.attention_factor", v);
        if ((v = ggm_num(x, "rope.scaling.yarn_ext_factor", 0, 1, &f)), f && v != 1)
            fail(x, SL_EUNSUPPORTED, "'%s.rope.scaling.yarn_ext_factor' is %g (only 1 is supported)", x->arch, v);
        if (x->st) return;
    }
    cJSON_AddBoolToObject(c, "tie_word_embeddings", tensor(x, "output.weight") == NULL);
}

/* What the tensors say of the layers: the dense ones (no router) as mlp_only_layers, the first routed layer, the
 * experts' width (the metadata, else ffn_gate_exps), the dense layers' width (as stored), q biases and q norms. */
static void layer_fields(meta *x, arch_gguf_common *g) {
    cJSON *dense = cJSON_CreateArray();
    cJSON_AddItemToObject(x->c, "mlp_only_layers", dense);
    g->l_moe = -1;
    for (int l = 0; l < g->n_layers; l++) {
        if (blk_tensor(x, l, "ffn_gate_inp.weight")) {
            if (g->l_moe < 0) g->l_moe = l;
        } else cJSON_AddItemToArray(dense, cJSON_CreateNumber(l));
    }
    if (g->l_moe < 0) {
        fail(x, SL_EFORMAT, "no layer has a router (blk.N.ffn_gate_inp.weight)");
        return;
    }
    g->first_dense = g->l_moe;
    const gguf_tensor *ge = blk_tensor(x, g->l_moe, "ffn_gate_exps.weight");
    g->moe_inter = ggm_num(x, "expert_feed_forward_length", 0, 0, &g->moe_inter_found);
    if (!g->moe_inter_found && ge && ge->n_dims == 3) g->moe_inter = (double)ge->ne[1], g->moe_inter_found = 1;
    g->ff = ggm_num(x, "feed_forward_length", 0, 0, &g->ff_found);
    const gguf_tensor *fg = NULL;
    for (int l = 0; l < g->n_layers && !fg; l++) fg = blk_tensor(x, l, "ffn_gate.weight");
    if (fg && fg->n_dims >= 2) g->ff = (double)fg->ne[1], g->ff_found = 1; /* the dense layers' width, as stored */
    g->wnorm = ggm_num(x, "expert_weights_norm", 0, 0, &g->wnorm_found);
    g->has_qbias = blk_tensor(x, 0, "attn_q.bias") != NULL;
    g->has_qnorm = blk_tensor(x, 0, "attn_q_norm.weight") != NULL;
}

sl_status gguf_config_json(const gguf_model *m, char **out, sl_error *err) {
    *out = NULL;
    meta x = {m, &m->files[0], NULL, NULL, err, SL_OK};
    x.arch = gguf_kv_str(x.f, "general.architecture");
    if (!x.arch) return err_set(err, SL_ECONFIG, "%s: missing metadata key 'general.architecture'", x.f->path);
    const arch_desc *a = arch_by_gguf(x.arch);
    if (!a)
        return err_set(err, SL_EUNSUPPORTED, "%s: GGUF architecture '%s' is not supported (supported: %s)", x.f->path,
                      x.arch, arch_gguf_list());
    if (!a->gguf_config) return err_set(err, SL_EUNSUPPORTED, "%s: GGUF import of %s is not implemented", x.f->path, a->name);
    if (!(x.c = cJSON_CreateObject())) return err_set(err, SL_ENOMEM, "out of memory");
    arch_gguf_common g = {0};
    g.arch = x.arch;
    g.check_value_length = g.check_kv_heads = 1;
    common_fields(&x, a, &g);
    if (!x.st) layer_fields(&x, &g);
    if (!x.st) a->gguf_config(&x, &g);
    if (!x.st && g.check_kv_heads && g.kv_heads_vary)
        fail(&x, SL_EUNSUPPORTED, "'%s.attention.head_count_kv' differs between layers (not supported)", x.arch);
    if (!x.st && g.check_value_length && g.value_length != g.head_dim)
        fail(&x, SL_EUNSUPPORTED, "attention.value_length (%d) differs from key_length (%d)", g.value_length,
             g.head_dim);
    if (!x.st && !(*out = cJSON_PrintUnformatted(x.c))) x.st = err_set(err, SL_ENOMEM, "out of memory");
    cJSON_Delete(x.c);
    return x.st;
}
