/*
 * container.c — header codec, manifest parsing and structural validation of a .sluice file.
 * Sections: header, config JSON, open/close.
 */
#include "format/container.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "family/arch.h"
#include "family/tensors.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/fileio.h"

uint64_t slc_round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

void slc_hash_hex(uint64_t h, char out[17]) { snprintf(out, 17, "%016llx", (unsigned long long)h); }

int slc_hash_parse(const char *s, uint64_t *out) {
    if (!s || strlen(s) != 16) return -1;
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 0;
}

/* ---- header ---- */

static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint64_t get64(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }
static uint32_t get32(const uint8_t *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | p[i]; return v; }

void slc_header_encode(const slc_header *h, uint8_t *b) {
    memset(b, 0, SLC_HEADER_BYTES);
    memcpy(b, SLC_MAGIC, 8);
    put32(b + 8, h->version);
    put32(b + 12, SLC_HEADER_BYTES);
    put64(b + 16, h->file_size);
    put64(b + 24, h->manifest_off);
    put64(b + 32, h->manifest_len);
    put64(b + 40, h->manifest_hash);
    put64(b + 48, h->backbone_off);
    put64(b + 56, h->backbone_len);
    put64(b + 64, h->expert_off);
    put64(b + 72, h->expert_len);
    put64(b + 80, h->expert_stride);
    put32(b + 88, h->n_moe_layers);
    put32(b + 92, h->n_experts);
    put64(b + 96, h->hash_off);
    put64(b + 104, h->hash_len);
    put64(b + 112, h->blob_off);
    put64(b + 120, h->blob_len);
    put64(b + SLC_HEADER_BYTES - 8, XXH3_64bits(b, SLC_HEADER_BYTES - 8));
}

sl_status slc_header_decode(const uint8_t *b, slc_header *h, const char *path, sl_error *err) {
    if (memcmp(b, SLC_MAGIC, 8))
        return err_set(err, SL_EFORMAT, "%s: not a .sluice container (bad magic)", path);
    if (get64(b + SLC_HEADER_BYTES - 8) != XXH3_64bits(b, SLC_HEADER_BYTES - 8))
        return err_set(err, SL_ECHECKSUM, "%s: header checksum mismatch (file offset 0)", path);
    memset(h, 0, sizeof *h);
    h->version = get32(b + 8);
    if (h->version != SLC_VERSION || get32(b + 12) != SLC_HEADER_BYTES)
        return err_set(err, SL_EUNSUPPORTED, "%s: container version %u is not supported (this build reads %d)", path,
                      h->version, SLC_VERSION);
    h->file_size = get64(b + 16);
    h->manifest_off = get64(b + 24);
    h->manifest_len = get64(b + 32);
    h->manifest_hash = get64(b + 40);
    h->backbone_off = get64(b + 48);
    h->backbone_len = get64(b + 56);
    h->expert_off = get64(b + 64);
    h->expert_len = get64(b + 72);
    h->expert_stride = get64(b + 80);
    h->n_moe_layers = get32(b + 88);
    h->n_experts = get32(b + 92);
    h->hash_off = get64(b + 96);
    h->hash_len = get64(b + 104);
    h->blob_off = get64(b + 112);
    h->blob_len = get64(b + 120);
    return SL_OK;
}

/* ---- config JSON ---- */

cJSON *slc_config_to_json(const fam_config *c) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddStringToObject(j, "arch", cfg_arch_name(c->arch));
#define X(name, type, presence) cJSON_AddNumberToObject(j, #name, (double)c->name);
    SL_CONFIG_FIELDS(X)
#undef X
    cJSON *lt = cJSON_AddArrayToObject(j, "layer_types");
    cJSON *lm = cJSON_AddArrayToObject(j, "layer_moe");
    for (int l = 0; l < c->n_layers; l++) {
        cJSON_AddItemToArray(lt, cJSON_CreateString(c->layer_linear[l]    ? "linear_attention"
                                                    : c->layer_sliding[l] ? "sliding_attention"
                                                                          : "full_attention"));
        cJSON_AddItemToArray(lm, cJSON_CreateBool(c->layer_moe[l]));
    }
    if (c->dsa_topk > 0) { /* DSA layers without an indexer of their own (GLM-5's shared ones) */
        cJSON *ls = cJSON_AddArrayToObject(j, "layer_dsa_shared");
        for (int l = 0; l < c->n_layers; l++) cJSON_AddItemToArray(ls, cJSON_CreateBool(c->layer_dsa_shared[l]));
    }
    if (c->hc_mult > 0) { /* DeepSeek-V4's per-layer kinds (absent for every other family) */
        cJSON *lc = cJSON_AddArrayToObject(j, "layer_compress"), *lh = cJSON_AddArrayToObject(j, "layer_hash");
        for (int l = 0; l < c->n_layers; l++) {
            cJSON_AddItemToArray(lc, cJSON_CreateNumber(c->layer_compress[l]));
            cJSON_AddItemToArray(lh, cJSON_CreateBool(c->layer_hash[l]));
        }
    }
    if (c->expert_kind == SL_EXPERT_SWIGLU_CLIP) { /* Bailing hybrid's per-layer SwiGLU limits */
        cJSON *lc = cJSON_AddArrayToObject(j, "layer_clip"), *ls = cJSON_AddArrayToObject(j, "layer_sh_clip");
        for (int l = 0; l < c->n_layers; l++) {
            cJSON_AddItemToArray(lc, cJSON_CreateNumber(c->layer_clip[l]));
            cJSON_AddItemToArray(ls, cJSON_CreateNumber(c->layer_sh_clip[l]));
        }
    }
    return j;
}

/* SL_EXPERT_SWIGLU_CLIP's per-layer limits (required with it): 0, or -1 when absent, short or not >= 0. */
static int clip_lists(const cJSON *j, fam_config *c) {
    if (c->expert_kind != SL_EXPERT_SWIGLU_CLIP) return 0;
    const cJSON *lc = cJSON_GetObjectItemCaseSensitive(j, "layer_clip"), *ls = cJSON_GetObjectItemCaseSensitive(j, "layer_sh_clip");
    if (cJSON_GetArraySize(lc) != c->n_layers || cJSON_GetArraySize(ls) != c->n_layers) return -1;
    for (int l = 0; l < c->n_layers; l++) {
        const cJSON *a = cJSON_GetArrayItem(lc, l), *b = cJSON_GetArrayItem(ls, l);
        if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b) || !(a->valuedouble >= 0) || !(b->valuedouble >= 0) ||
            a->valuedouble > 1e30 || b->valuedouble > 1e30)
            return -1;
        c->layer_clip[l] = (float)a->valuedouble;
        c->layer_sh_clip[l] = (float)b->valuedouble;
    }
    return 0;
}

/* Reads field `name` of j into *v; 0, or -1 when a required field is missing or not a number (an
 * optional one that is absent keeps *v). */
static int cfg_field(const cJSON *j, const char *name, int required, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, name);
    if (cJSON_IsNumber(x)) {
        *v = x->valuedouble;
        return 0;
    }
    return required || x ? -1 : 0;
}

#define CFG_CAST_I (int)
#define CFG_CAST_D (double)
#define CFG_CAST_F (float)

sl_status slc_config_from_json(const cJSON *j, fam_config *c, const char *path, sl_error *err) {
    memset(c, 0, sizeof *c);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "arch");
    if (!cJSON_IsString(a) || (c->arch = cfg_arch_from_name(a->valuestring)) == SL_ARCH_NONE)
        return err_set(err, SL_EFORMAT, "%s: manifest: unknown architecture", path);
    arch_set_traits(c); /* what containers written before a trait was stored get */
#define X(name, type, presence)                                                                        \
    {                                                                                                  \
        double v = (double)c->name;                                                                    \
        if (cfg_field(j, #name, #presence[0] == 'R', &v))                                              \
            return err_set(err, SL_EFORMAT, "%s: manifest: config lacks '%s'", path, #name);            \
        c->name = CFG_CAST_##type v;                                                                   \
    }
    SL_CONFIG_FIELDS(X)
#undef X
    c->norms_shifted = c->norms_shifted != 0;
    if (c->norms_shifted && c->zero_centred_norm)
        return err_set(err, SL_EFORMAT, "%s: manifest: norms_shifted and zero_centred_norm are both set", path);
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(j, "layer_types");
    const cJSON *lm = cJSON_GetObjectItemCaseSensitive(j, "layer_moe");
    if (c->n_layers < 1 || c->n_layers > SL_MAX_LAYERS || cJSON_GetArraySize(lt) != c->n_layers ||
        cJSON_GetArraySize(lm) != c->n_layers)
        return err_set(err, SL_EFORMAT, "%s: manifest: layer lists do not match n_layers", path);
    int any_linear = 0, any_sliding = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const cJSON *t = cJSON_GetArrayItem(lt, l);
        c->layer_linear[l] = cJSON_IsString(t) && !strcmp(t->valuestring, "linear_attention");
        c->layer_sliding[l] = cJSON_IsString(t) && !strcmp(t->valuestring, "sliding_attention");
        any_sliding |= c->layer_sliding[l];
        c->layer_moe[l] = cJSON_IsTrue(cJSON_GetArrayItem(lm, l));
        any_linear |= c->layer_linear[l];
    }
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(j, "layer_dsa_shared"); /* optional: written with DSA */
    if (ls && cJSON_GetArraySize(ls) != c->n_layers)
        return err_set(err, SL_EFORMAT, "%s: manifest: layer lists do not match n_layers", path);
    for (int l = 0; ls && l < c->n_layers; l++) c->layer_dsa_shared[l] = cJSON_IsTrue(cJSON_GetArrayItem(ls, l));
    const cJSON *lc = cJSON_GetObjectItemCaseSensitive(j, "layer_compress"), *lh = cJSON_GetObjectItemCaseSensitive(j, "layer_hash");
    if ((lc || lh) && (cJSON_GetArraySize(lc) != c->n_layers || cJSON_GetArraySize(lh) != c->n_layers))
        return err_set(err, SL_EFORMAT, "%s: manifest: layer lists do not match n_layers", path);
    for (int l = 0; lc && l < c->n_layers; l++) {
        const cJSON *k = cJSON_GetArrayItem(lc, l);
        c->layer_compress[l] = (uint8_t)(cJSON_IsNumber(k) && k->valuedouble >= 0 && k->valuedouble <= SL_CMP_HCA ? k->valueint : 255);
        c->layer_hash[l] = cJSON_IsTrue(cJSON_GetArrayItem(lh, l));
    }
    if (clip_lists(j, c)) return err_set(err, SL_EFORMAT, "%s: manifest: layer lists do not match n_layers", path);
    if (c->vocab < 1 || c->hidden < 1 || c->n_heads < 1 || c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads ||
        c->head_dim < 1 || c->n_experts < 1 || c->n_experts_used < 1 || c->n_experts_used > c->n_experts ||
        c->rot_dim > c->head_dim || c->rot_dim % 2 || c->router < 0 || c->router > SL_ROUTER_SOFTMAX_ZERO || !cfg_dsv4_ok(c) ||
        (c->router == SL_ROUTER_SIGMOID_GROUP && !cfg_groups_ok(c)) ||
        c->qk_norm < 0 || c->qk_norm > SL_QK_NORM_ALL || !cfg_mla_ok(c) ||
        c->rope_type < SL_ROPE_DEFAULT || c->rope_type > SL_ROPE_LLAMA3 ||
        (c->rope_type == SL_ROPE_YARN && (c->rope_orig_max_pos < 1 || !(c->rope_factor > 0) || c->rope_attn_factor < 0)) ||
        (any_sliding && c->sliding_window < 1) || c->expert_kind < SL_EXPERT_SWIGLU || c->expert_kind > SL_EXPERT_SWIGLU_CLIP ||
        (c->expert_kind == SL_EXPERT_GPTOSS && !(c->swiglu_limit > 0)) ||
        (any_linear && !c->short_conv && (c->lin_nk < 1 || c->lin_nv % c->lin_nk || c->conv_k < 1)) ||
        (any_linear && c->short_conv && c->conv_k < 2))
        return err_set(err, SL_EFORMAT, "%s: manifest: inconsistent model dimensions", path);
    return SL_OK;
}

/* ---- quantized entries ---- */

static const char *const ACT_NAMES[] = {"house", "q8_0", "q8_1"};

sl_status slc_quant_from_json(const cJSON *o, dt_type dt, int64_t cols, int *group, dt_type *sdt, uint32_t *seed,
                              int *act, sl_error *err) {
    *group = 0;
    *sdt = DT_NONE;
    *seed = 0;
    *act = TN_ACT_HOUSE;
    if (!q_is_quant(dt)) return SL_OK;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(o, "group"), *sd = cJSON_GetObjectItemCaseSensitive(o, "scale_dtype");
    const cJSON *se = cJSON_GetObjectItemCaseSensitive(o, "seed"), *ac = cJSON_GetObjectItemCaseSensitive(o, "act");
    if (ac) { /* llama.cpp's activation form of a GGUF Q8_0 .. Q5_1 (tn_mat.act) */
        *act = !cJSON_IsString(ac) || (dt != DT_Q8 && dt != DT_Q4) ? -1
               : !strcmp(ac->valuestring, ACT_NAMES[TN_ACT_Q8_0]) ? TN_ACT_Q8_0
               : !strcmp(ac->valuestring, ACT_NAMES[TN_ACT_Q8_1]) ? TN_ACT_Q8_1 : -1;
        if (*act < 0) return err_set(err, SL_EFORMAT, "%s entry has an unknown 'act'", dt_name(dt));
    }
    if (!cJSON_IsNumber(g) || !cJSON_IsString(sd))
        return err_set(err, SL_EFORMAT, "%s entry lacks 'group' or 'scale_dtype'", dt_name(dt));
    *group = g->valueint;
    /* mxfp4: E8M0 bytes; the GGUF block types: scales inside the blocks */
    *sdt = dt == DT_MXFP4 || kq_is(dt) ? DT_NONE : dt_from_name(sd->valuestring);
    if (cJSON_IsNumber(se) && se->valuedouble >= 0 && se->valuedouble < 4294967296.0) *seed = (uint32_t)se->valuedouble;
    if (!q_check(dt, cols, *group, *sdt, err)) return SL_OK;
    if (err) err->status = SL_EFORMAT; /* a manifest's entry: the file is malformed */
    return SL_EFORMAT;
}

void slc_quant_to_json(cJSON *o, dt_type dt, int group, dt_type sdt, uint32_t seed, int act) {
    if (!q_is_quant(dt)) return;
    cJSON_AddNumberToObject(o, "group", group);
    cJSON_AddStringToObject(o, "scale_dtype", dt == DT_MXFP4 ? "e8m0" : kq_is(dt) ? "in-block" : dt_name(sdt));
    if (dt == DT_Q3) cJSON_AddNumberToObject(o, "seed", (double)seed);
    if ((dt == DT_Q8 || dt == DT_Q4) && (act == TN_ACT_Q8_0 || act == TN_ACT_Q8_1))
        cJSON_AddStringToObject(o, "act", ACT_NAMES[act]);
}

static void add_shape(cJSON *o, int ndim, const int64_t *s) {
    cJSON *a = cJSON_AddArrayToObject(o, "shape");
    for (int i = 0; i < ndim; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)s[i]));
}

cJSON *slc_tensor_to_json(const slc_tensor *t) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    char hex[17];
    slc_hash_hex(t->hash, hex);
    cJSON_AddStringToObject(o, "name", t->name);
    cJSON_AddStringToObject(o, "dtype", dt_name(t->dtype));
    slc_quant_to_json(o, t->dtype, t->group, t->sdtype, t->seed, t->act);
    add_shape(o, t->ndim, t->shape);
    cJSON_AddNumberToObject(o, "offset", (double)t->off);
    cJSON_AddNumberToObject(o, "size", (double)t->size);
    cJSON_AddStringToObject(o, "xxh3", hex);
    return o;
}

static cJSON *part_to_json(const fam_config *c, int p, const slc_part *pp) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "name", arch_expert_part_name(c, p));
    cJSON_AddStringToObject(o, "dtype", dt_name(pp->dtype));
    slc_quant_to_json(o, pp->dtype, pp->group, pp->sdtype, pp->seed, pp->act);
    add_shape(o, 2, pp->shape);
    cJSON_AddNumberToObject(o, "offset", (double)pp->off);
    cJSON_AddNumberToObject(o, "size", (double)pp->size);
    return o;
}

cJSON *slc_experts_to_json(const slc_header *h, const fam_config *c, uint64_t block_bytes, const slc_part *parts) {
    cJSON *ex = cJSON_CreateObject();
    if (!ex) return NULL;
    cJSON_AddNumberToObject(ex, "n_experts", c->n_experts);
    cJSON_AddNumberToObject(ex, "offset", (double)h->expert_off);
    cJSON_AddNumberToObject(ex, "stride", (double)h->expert_stride);
    cJSON_AddNumberToObject(ex, "block_bytes", (double)block_bytes);
    cJSON_AddNumberToObject(ex, "hash_table_offset", (double)h->hash_off);
    cJSON *ly = cJSON_AddArrayToObject(ex, "layers");
    for (int l = 0; l < c->n_layers; l++)
        if (c->layer_moe[l]) cJSON_AddItemToArray(ly, cJSON_CreateNumber(l));
    cJSON *pa = cJSON_AddArrayToObject(ex, "parts");
    for (int p = 0; p < arch_n_parts(c); p++) cJSON_AddItemToArray(pa, part_to_json(c, p, &parts[p]));
    return ex;
}

void slc_slots_to_json(cJSON *ex, const fam_config *c, const slc_slot *slots, int n_slots) {
    cJSON *it, *sa = cJSON_AddArrayToObject(ex, "slots");
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(ex, "parts"))
        cJSON_ReplaceItemInObjectCaseSensitive(it, "dtype", cJSON_CreateString("per-layer"));
    for (int s = 0; s < n_slots; s++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(sa, o);
        cJSON_AddNumberToObject(o, "offset", (double)slots[s].off);
        cJSON_AddNumberToObject(o, "stride", (double)slots[s].stride);
        cJSON_AddNumberToObject(o, "block_bytes", (double)slots[s].bytes);
        cJSON *pa = cJSON_AddArrayToObject(o, "parts");
        for (int p = 0; p < arch_n_parts(c); p++) cJSON_AddItemToArray(pa, part_to_json(c, p, &slots[s].parts[p]));
    }
}

/* ---- open ---- */

static int get_shape(const cJSON *s, int64_t shape[2], int *ndim) {
    int n = cJSON_GetArraySize(s);
    if (!cJSON_IsArray(s) || n < 1 || n > 2) return -1;
    *ndim = n;
    shape[1] = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *d = cJSON_GetArrayItem(s, i);
        if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 9007199254740992.0) return -1;
        shape[i] = (int64_t)d->valuedouble;
    }
    return 0;
}

static uint64_t num_u64(const cJSON *o, const char *k, int *bad) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    /* bounded before the conversion (a value past 2^64 would be undefined behaviour) */
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9007199254740992.0) { *bad = 1; return 0; }
    return (uint64_t)v->valuedouble;
}


static int in_range(uint64_t off, uint64_t len, uint64_t lo, uint64_t hi) {
    return off >= lo && len <= hi - lo && off - lo <= hi - lo - len;
}

/* slc_open's stages, in the order of the file's checks: each reads into f (f->path, f->fd set) and
 * returns SL_OK or an error with err; slc_open closes f on the first error. */

/* The file, its size, the header, and the header's sections inside the file and consistent. */
static sl_status open_header(slc_file *f, sl_error *err) {
    const char *path = f->path;
    uint8_t hb[SLC_HEADER_BYTES];
    sl_status st;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) return err_set(err, err_from_errno(errno), "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(f->fd, &sb) != 0) return err_set(err, SL_EIO, "%s: cannot stat", path);
    uint64_t fsize = (uint64_t)sb.st_size;
    if (fsize < SLC_HEADER_BYTES)
        return err_set(err, SL_EFORMAT, "%s: %llu bytes, too short for a .sluice container", path, (unsigned long long)fsize);
    if ((st = fio_pread_all(f->fd, hb, SLC_HEADER_BYTES, 0, path, err))) return st;
    if ((st = slc_header_decode(hb, &f->h, path, err))) return st;
    const slc_header *h = &f->h;
    if (h->file_size != fsize)
        return err_set(err, SL_EFORMAT, "%s: file is %llu bytes but its header says %llu (truncated or appended to)", path,
                      (unsigned long long)fsize, (unsigned long long)h->file_size);
    if (!in_range(h->manifest_off, h->manifest_len, SLC_HEADER_BYTES, fsize) || !in_range(h->backbone_off, h->backbone_len, SLC_HEADER_BYTES, fsize) ||
        !in_range(h->expert_off, h->expert_len, SLC_HEADER_BYTES, fsize) || !in_range(h->hash_off, h->hash_len, SLC_HEADER_BYTES, fsize) ||
        !in_range(h->blob_off, h->blob_len, SLC_HEADER_BYTES, fsize) || h->manifest_len > (1ull << 31))
        return err_set(err, SL_EFORMAT, "%s: header: a section lies outside the file", path);
    if (h->expert_stride % SLC_ALIGN || h->expert_off % SLC_ALIGN ||
        h->expert_len % SLC_ALIGN || h->expert_len > (uint64_t)h->n_moe_layers * h->n_experts * h->expert_stride ||
        h->hash_len != (uint64_t)h->n_moe_layers * h->n_experts * 8)
        return err_set(err, SL_EFORMAT, "%s: header: inconsistent expert section", path);
    return SL_OK;
}

/* The manifest: read, checksummed, parsed; its config, which must agree with the header's experts. */
static sl_status read_manifest(slc_file *f, sl_error *err) {
    const char *path = f->path;
    const slc_header *h = &f->h;
    sl_status st;
    char *mtxt = malloc(h->manifest_len + 1);
    if (!mtxt) return err_set(err, SL_ENOMEM, "out of memory");
    if ((st = fio_pread_all(f->fd, mtxt, h->manifest_len, h->manifest_off, path, err))) goto out;
    mtxt[h->manifest_len] = 0;
    if (XXH3_64bits(mtxt, h->manifest_len) != h->manifest_hash) {
        st = err_set(err, SL_ECHECKSUM, "%s: manifest checksum mismatch (file offset %llu)", path, (unsigned long long)h->manifest_off);
        goto out;
    }
    f->manifest = cJSON_ParseWithLength(mtxt, h->manifest_len);
    if (!cJSON_IsObject(f->manifest)) { st = err_set(err, SL_EFORMAT, "%s: manifest is not a JSON object", path); goto out; }
    if ((st = slc_config_from_json(cJSON_GetObjectItemCaseSensitive(f->manifest, "config"), &f->cfg, path, err))) goto out;
    if ((uint32_t)cfg_n_moe_layers(&f->cfg) != h->n_moe_layers || h->n_experts != (uint32_t)f->cfg.n_experts)
        st = err_set(err, SL_EFORMAT, "%s: header expert layout (%u layers x %u experts) does not match the config", path,
                    h->n_moe_layers, h->n_experts);
out:
    free(mtxt);
    return st;
}

/* One tensor entry into t: fields present and well-formed, its quantization valid, its bytes inside
 * the backbone section. i: its index, for the message. t->name is set (owned) once the fields parse. */
static sl_status read_tensor(slc_file *f, const cJSON *it, int i, slc_tensor *t, sl_error *err) {
    const char *path = f->path;
    const slc_header *h = &f->h;
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name"), *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
    const cJSON *hs = cJSON_GetObjectItemCaseSensitive(it, "xxh3");
    int bad = 0;
    if (!cJSON_IsString(nm) || !cJSON_IsString(dt) || (t->dtype = dt_from_name(dt->valuestring)) == DT_NONE ||
        t->dtype == DT_F8E4M3 || get_shape(cJSON_GetObjectItemCaseSensitive(it, "shape"), t->shape, &t->ndim) ||
        !cJSON_IsString(hs) || slc_hash_parse(hs->valuestring, &t->hash)) bad = 1;
    t->off = num_u64(it, "offset", &bad);
    t->size = num_u64(it, "size", &bad);
    if (bad) return err_set(err, SL_EFORMAT, "%s: manifest: malformed tensor entry %d", path, i);
    t->name = strdup(nm->valuestring);
    f->n_tensors++;
    if (!t->name) return err_set(err, SL_ENOMEM, "out of memory");
    if (q_is_quant(t->dtype) && t->ndim != 2)
        return err_set(err, SL_EFORMAT, "%s: manifest: tensor '%s' (%s): a quantized tensor must be 2-D", path,
                      t->name, dt_name(t->dtype));
    sl_status st = slc_quant_from_json(it, t->dtype, t->shape[1], &t->group, &t->sdtype, &t->seed, &t->act, err);
    if (st) {
        err_prefix(err, "%s: manifest: tensor '%s' (%s)", path, t->name, dt_name(t->dtype));
        return st;
    }
    if (t->size != q_mat_bytes(t->dtype, t->shape[0], t->ndim == 2 ? t->shape[1] : 1, t->group, t->sdtype) ||
        !in_range(t->off, t->size, h->backbone_off, h->backbone_off + h->backbone_len))
        return err_set(err, SL_EFORMAT, "%s: manifest: tensor '%s' has a size or offset outside the backbone section", path, t->name);
    return SL_OK;
}

/* The tensor table. */
static sl_status read_tensors(slc_file *f, sl_error *err) {
    const cJSON *tt = cJSON_GetObjectItemCaseSensitive(f->manifest, "tensors"), *it;
    sl_status st;
    if (!cJSON_IsArray(tt)) return err_set(err, SL_EFORMAT, "%s: manifest has no tensor table", f->path);
    f->t = calloc((size_t)cJSON_GetArraySize(tt) + 1, sizeof *f->t);
    if (!f->t) return err_set(err, SL_ENOMEM, "out of memory");
    cJSON_ArrayForEach(it, tt)
        if ((st = read_tensor(f, it, f->n_tensors, &f->t[f->n_tensors], err))) return st;
    return SL_OK;
}

/* Expert part p of a layout into *pp: its dtype, shape (the config's), quantization and place in a block of
 * `stride` bytes; *used grows to the part's end. */
static sl_status read_part(slc_file *f, const cJSON *o, int p, slc_part *pp, uint64_t stride, uint64_t *used,
                           sl_error *err) {
    const char *path = f->path;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(o, "dtype");
    int bad = 0, nd = 0;
    if (!cJSON_IsString(dt) || (pp->dtype = dt_from_name(dt->valuestring)) == DT_NONE || pp->dtype == DT_F8E4M3 ||
        get_shape(cJSON_GetObjectItemCaseSensitive(o, "shape"), pp->shape, &nd) || nd != 2) bad = 1;
    pp->off = num_u64(o, "offset", &bad);
    pp->size = num_u64(o, "size", &bad);
    int64_t want[2];
    arch_expert_shape(&f->cfg, p, want);
    sl_status st = bad ? SL_OK
                       : slc_quant_from_json(o, pp->dtype, pp->shape[1], &pp->group, &pp->sdtype, &pp->seed, &pp->act,
                                                             err);
    if (st) {
        err_prefix(err, "%s: manifest: expert part %s (%s)", path, arch_expert_part_name(&f->cfg, p),
                      dt_name(pp->dtype));
        return st;
    }
    if (bad || pp->shape[0] != want[0] || pp->shape[1] != want[1] ||
        (arch_expert_part_is_vec(&f->cfg, p) && (pp->dtype != DT_F32 || pp->off % 4)) ||
        pp->size != q_mat_bytes(pp->dtype, pp->shape[0], pp->shape[1], pp->group, pp->sdtype) ||
        pp->off + pp->size > stride)
        return err_set(err, SL_EFORMAT, "%s: manifest: expert part %s does not match the config", path, arch_expert_part_name(&f->cfg, p));
    if (pp->off + pp->size > *used) *used = pp->off + pp->size;
    return SL_OK;
}

/* experts.slots: one layout per MoE slot, the slots' blocks back to back in slot order, filling the section. */
static sl_status read_slots(slc_file *f, const cJSON *sa, sl_error *err) {
    const slc_header *h = &f->h;
    if (cJSON_GetArraySize(sa) != (int)h->n_moe_layers || !(f->slots = calloc(h->n_moe_layers + 1, sizeof *f->slots)))
        return cJSON_GetArraySize(sa) != (int)h->n_moe_layers
                   ? err_set(err, SL_EFORMAT, "%s: manifest: experts.slots does not list every MoE layer", f->path)
                   : err_set(err, SL_ENOMEM, "out of memory");
    uint64_t at = 0;
    for (uint32_t s = 0; s < h->n_moe_layers; s++) {
        const cJSON *o = cJSON_GetArrayItem(sa, (int)s), *pa = cJSON_GetObjectItemCaseSensitive(o, "parts");
        slc_slot *sl = &f->slots[s];
        int bad = cJSON_GetArraySize(pa) != f->n_parts;
        sl->off = num_u64(o, "offset", &bad);
        sl->stride = num_u64(o, "stride", &bad);
        uint64_t bytes = num_u64(o, "block_bytes", &bad);
        if (bad || sl->off != at || sl->stride % SLC_ALIGN || sl->stride > h->expert_stride || bytes > sl->stride ||
            sl->stride * h->n_experts > h->expert_len - at)
            return err_set(err, SL_EFORMAT, "%s: manifest: malformed experts.slots entry %u", f->path, s);
        for (int p = 0; p < f->n_parts; p++) {
            sl_status st = read_part(f, cJSON_GetArrayItem(pa, p), p, &sl->parts[p], sl->stride, &sl->bytes, err);
            if (st) return st;
        }
        if (sl->bytes != bytes || sl->parts[0].off != 0)
            return err_set(err, SL_EFORMAT, "%s: manifest: experts.slots entry %u: block_bytes does not match its parts",
                          f->path, s);
        if (sl->bytes > f->block_bytes) f->block_bytes = sl->bytes;
        at += sl->stride * h->n_experts;
    }
    if (at != h->expert_len) return err_set(err, SL_EFORMAT, "%s: manifest: experts.slots do not fill the expert section", f->path);
    memcpy(f->parts, f->slots[0].parts, sizeof f->parts);
    return SL_OK;
}

/* The expert layout: the MoE layers (the config's) and the parts of a block. */
static sl_status read_experts(slc_file *f, sl_error *err) {
    const slc_header *h = &f->h;
    const cJSON *ex = cJSON_GetObjectItemCaseSensitive(f->manifest, "experts");
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(ex, "parts");
    const cJSON *ly = cJSON_GetObjectItemCaseSensitive(ex, "layers");
    sl_status st;
    f->n_parts = arch_n_parts(&f->cfg);
    if (cJSON_GetArraySize(pa) != f->n_parts || cJSON_GetArraySize(ly) != (int)h->n_moe_layers)
        return err_set(err, SL_EFORMAT, "%s: manifest: malformed expert layout", f->path);
    f->moe_layers = calloc(h->n_moe_layers + 1, sizeof *f->moe_layers);
    if (!f->moe_layers) return err_set(err, SL_ENOMEM, "out of memory");
    for (uint32_t s = 0; s < h->n_moe_layers; s++) {
        f->moe_layers[s] = cJSON_GetArrayItem(ly, (int)s)->valueint;
        if (cfg_moe_slot(&f->cfg, f->moe_layers[s]) != (int)s)
            return err_set(err, SL_EFORMAT, "%s: manifest: expert layer list does not match the config", f->path);
    }
    const cJSON *sa = cJSON_GetObjectItemCaseSensitive(ex, "slots");
    if (sa) return h->n_moe_layers ? read_slots(f, sa, err) : err_set(err, SL_EFORMAT, "%s: manifest: slots without MoE layers", f->path);
    if (h->expert_len != (uint64_t)h->n_moe_layers * h->n_experts * h->expert_stride) /* one layout: one stride */
        return err_set(err, SL_EFORMAT, "%s: header: inconsistent expert section", f->path);
    for (int p = 0; p < f->n_parts; p++)
        if ((st = read_part(f, cJSON_GetArrayItem(pa, p), p, &f->parts[p], h->expert_stride, &f->block_bytes, err)))
            return st;
    return SL_OK;
}

/* The blob table: each blob inside the blob section. */
static sl_status read_blobs(slc_file *f, sl_error *err) {
    const slc_header *h = &f->h;
    const cJSON *bl = cJSON_GetObjectItemCaseSensitive(f->manifest, "blobs"), *it;
    f->blobs = calloc((size_t)cJSON_GetArraySize(bl) + 1, sizeof *f->blobs);
    if (!f->blobs) return err_set(err, SL_ENOMEM, "out of memory");
    cJSON_ArrayForEach(it, bl) {
        slc_blob *b = &f->blobs[f->n_blobs];
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name"), *hs = cJSON_GetObjectItemCaseSensitive(it, "xxh3");
        int bad = !cJSON_IsString(nm) || !cJSON_IsString(hs) || slc_hash_parse(hs->valuestring, &b->hash);
        b->off = num_u64(it, "offset", &bad);
        b->size = num_u64(it, "size", &bad);
        if (bad || !in_range(b->off, b->size, h->blob_off, h->blob_off + h->blob_len))
            return err_set(err, SL_EFORMAT, "%s: manifest: malformed blob entry", f->path);
        b->name = strdup(nm->valuestring);
        f->n_blobs++;
        if (!b->name) return err_set(err, SL_ENOMEM, "out of memory");
    }
    return SL_OK;
}

/* The expert hash table, little-endian on disk. */
static sl_status read_hashes(slc_file *f, sl_error *err) {
    const slc_header *h = &f->h;
    size_t nh = (size_t)h->n_moe_layers * h->n_experts;
    sl_status st;
    f->expert_hash = malloc(nh * 8 + 8);
    if (!f->expert_hash) return err_set(err, SL_ENOMEM, "out of memory");
    if ((st = fio_pread_all(f->fd, f->expert_hash, nh * 8, h->hash_off, f->path, err))) return st;
    for (size_t i = 0; i < nh; i++) f->expert_hash[i] = get64((const uint8_t *)&f->expert_hash[i]);
    return SL_OK;
}

sl_status slc_open(const char *path, slc_file *f, sl_error *err) {
    static sl_status (*const stages[])(slc_file *, sl_error *) = {
        open_header, read_manifest, read_tensors, read_experts, read_blobs, read_hashes,
    };
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->path = strdup(path);
    if (!f->path) return err_set(err, SL_ENOMEM, "out of memory");
    sl_status st = SL_OK;
    for (size_t i = 0; i < sizeof stages / sizeof *stages && !st; i++) st = stages[i](f, err);
    if (st) slc_close(f);
    return st;
}

void slc_close(slc_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < f->n_tensors; i++) free(f->t[i].name);
    for (int i = 0; i < f->n_blobs; i++) free(f->blobs[i].name);
    free(f->t);
    free(f->blobs);
    free(f->moe_layers);
    free(f->slots);
    free(f->expert_hash);
    cJSON_Delete(f->manifest);
    free(f->path);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

void slc_bind_expert(const slc_file *f, int slot, const uint8_t *block, tn_expert *out) {
    memset(out, 0, sizeof *out);
    for (int p = 0; p < f->n_parts; p++) {
        const slc_part *pp = &slc_parts(f, slot)[p];
        const arch_pdef *d = arch_part(&f->cfg, p);
        char *dst = (char *)out + d->field;
        if (d->kind == AK_VEC) /* a bias, stored f32 (checked at open) */
            *(const float **)dst = (const float *)(const void *)(block + pp->off);
        else
        {
            q_mat_bind((tn_mat *)dst, block + pp->off, pp->dtype, (int)pp->shape[0], (int)pp->shape[1], pp->group,
                       pp->sdtype, pp->seed);
            ((tn_mat *)dst)->act = pp->act;
        }
    }
}

_Static_assert(offsetof(tn_mat, data) == 0, "slc_expert_block reads a matrix part's data through its first member");

const uint8_t *slc_expert_block(const slc_file *f, const tn_expert *e) {
    const arch_pdef *d = arch_part(&f->cfg, 0);
    /* a matrix part's first member is its data pointer, a bias part is the pointer itself */
    const uint8_t *p0 = *(const uint8_t *const *)(const void *)((const char *)e + d->field);
    return p0 - f->parts[0].off;
}

const slc_tensor *slc_find(const slc_file *f, const char *name) {
    for (int i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

const slc_blob *slc_find_blob(const slc_file *f, const char *name) {
    for (int i = 0; i < f->n_blobs; i++)
        if (!strcmp(f->blobs[i].name, name)) return &f->blobs[i];
    return NULL;
}

sl_status slc_read_blob(const slc_file *f, const slc_blob *b, char **out, sl_error *err) {
    *out = NULL;
    char *p = b->size < SIZE_MAX ? malloc((size_t)b->size + 1) : NULL;
    if (!p) return err_set(err, SL_ENOMEM, "out of memory");
    sl_status st = fio_pread_all(f->fd, p, (size_t)b->size, b->off, f->path, err);
    if (!st && XXH3_64bits(p, (size_t)b->size) != b->hash)
        st = err_set(err, SL_ECHECKSUM, "%s: embedded file '%s' fails its checksum (file offset %llu): the file is damaged",
                     f->path, b->name, (unsigned long long)b->off);
    if (st) {
        free(p);
        return st;
    }
    p[b->size] = 0;
    *out = p;
    return SL_OK;
}
