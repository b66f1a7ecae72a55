/*
 * hf.c — Hugging Face checkpoint directory import; see hf.h. A GGUF source is read by hf_gguf.c, through the
 * same tensor list (hf_internal.h).
 *
 * Sections: name mapping (disk name -> canonical), opening (config, shards, index, each shard's entries
 * registered by what they hold: a plain tensor, one expert's part, a stack of experts), validation against the
 * architecture's tensor list, reading with dtype conversion and FP8 block dequantisation.
 */
#include "import/hf.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "family/arch.h"
#include "family/hf_config.h"
#include "family/tensors.h"
#include "import/gguf.h"
#include "import/hf_internal.h"
#include "import/mlx.h"
#include "import/safetensors.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/fileio.h"

/* ---- name mapping ---- */

/* Returns the canonical remainder of a disk name, or NULL for tensors we ignore. */
static const char *strip_prefix(const char *n) {
    static const char *const ignore[] = {"model.visual.", "visual.", "mtp.", "model.mtp.", "language_model.mtp."};
    for (size_t i = 0; i < sizeof ignore / sizeof *ignore; i++)
        if (!strncmp(n, ignore[i], strlen(ignore[i]))) return NULL;
    static const char *const pre[] = {"model.language_model.", "language_model.model.", "model."};
    for (size_t i = 0; i < sizeof pre / sizeof *pre; i++)
        if (!strncmp(n, pre[i], strlen(pre[i]))) return n + strlen(pre[i]);
    if (!strcmp(n, "lm_head.weight") || !strcmp(n, "language_model.lm_head.weight")) return "lm_head.weight";
    return NULL;
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

hf_t *hf_push(hf_ckpt *ck) {
    if (ck->n == ck->cap) {
        int cap = ck->cap ? ck->cap * 2 : 256;
        hf_t *t = realloc(ck->t, (size_t)cap * sizeof *t);
        if (!t) return NULL;
        ck->t = t;
        ck->cap = cap;
    }
    hf_t *t = &ck->t[ck->n++];
    memset(t, 0, sizeof *t);
    t->pub.expert_layer = -1;
    return t;
}

/* The expert part a name denotes: canonical (gate_proj, up_proj, down_proj) or the family's on-disk one. */
static int part_index(const hf_ckpt *ck, const char *s) {
    const arch_desc *a = arch_get(ck->cfg.arch);
    for (int p = 0; a && p < arch_n_parts(&ck->cfg); p++)
        if (!strcmp(s, a->parts[p].name) || (a->parts[p].disk && !strcmp(s, a->parts[p].disk))) return p;
    return -1;
}

/* Rewrites a layer-relative on-disk name ("layers.N.<rest>") into its canonical form with the family's
 * renames (prefixes) and tensor table (whole names). */
static void canon_layer_name(const hf_ckpt *ck, char *base, size_t cap) {
    const arch_desc *a = arch_get(ck->cfg.arch);
    int l, n = 0;
    if (a && (sscanf(base, "layers.%d.%n", &l, &n) != 1 || n == 0)) { /* a model-wide tensor: the table's disk names */
        for (int k = 0; k < a->n_tensors; k++)
            if ((a->tensors[k].when == AW_GLOBAL || a->tensors[k].when == AW_UNTIED) && a->tensors[k].disk &&
                !strcmp(base, a->tensors[k].disk)) {
                snprintf(base, cap, "%s", a->tensors[k].name);
                break;
            }
        return;
    }
    if (!a) return;
    char rest[256];
    snprintf(rest, sizeof rest, "%s", base + n);
    if (a->layer_name) { /* a sublayer of sluice's own numbering (LongCat-Flash) */
        char mapped[256];
        l = a->layer_name(l, rest, mapped, sizeof mapped);
        snprintf(rest, sizeof rest, "%s", mapped);
        n = snprintf(base, cap, "layers.%d.", l);
    }
    for (const char *const *r = a->renames; r && r[0]; r += 2)
        if (!strncmp(rest, r[0], strlen(r[0]))) {
            char tmp[256];
            snprintf(tmp, sizeof tmp, "%s%s", r[1], rest + strlen(r[0]));
            snprintf(rest, sizeof rest, "%s", tmp);
            break;
        }
    for (int k = 0; k < a->n_tensors; k++)
        if (a->tensors[k].disk && !strcmp(rest, a->tensors[k].disk)) {
            snprintf(rest, sizeof rest, "%s", a->tensors[k].name);
            break;
        }
    snprintf(base + n, cap - (size_t)n, "%s", rest);
}

/* ---- opening ---- */

static sl_status list_files(hf_ckpt *ck, char ***names, int *n, cJSON **index, sl_error *err) {
    *names = NULL;
    *n = 0;
    *index = NULL;
    char *ipath = fio_join(ck->dir, "model.safetensors.index.json");
    if (!ipath) return err_set(err, SL_ENOMEM, "out of memory");
    struct stat sb;
    sl_status st = SL_OK;
    if (stat(ipath, &sb) == 0) {
        char *txt = NULL;
        if ((st = fio_read_file(ipath, &txt, NULL, err))) goto out;
        cJSON *ix = cJSON_Parse(txt);
        free(txt);
        const cJSON *wm = cJSON_GetObjectItemCaseSensitive(ix, "weight_map");
        if (!cJSON_IsObject(wm)) {
            cJSON_Delete(ix);
            st = err_set(err, SL_EFORMAT, "%s: no 'weight_map' object", ipath);
            goto out;
        }
        const cJSON *it;
        char **v = calloc((size_t)cJSON_GetArraySize(wm) + 1, sizeof *v);
        if (!v) {
            cJSON_Delete(ix);
            st = err_set(err, SL_ENOMEM, "out of memory");
            goto out;
        }
        cJSON_ArrayForEach(it, wm) {
            if (!cJSON_IsString(it) || strchr(it->valuestring, '/')) {
                st = err_set(err, SL_EFORMAT, "%s: bad file name for tensor '%s'", ipath, it->string);
                break;
            }
            int seen = 0;
            for (int i = 0; i < *n; i++) seen |= !strcmp(v[i], it->valuestring);
            if (seen) continue;
            char *p = fio_join(ck->dir, it->valuestring);
            if (!p) { st = err_set(err, SL_ENOMEM, "out of memory"); break; }
            if (stat(p, &sb) != 0) {
                st = err_set(err, SL_ENOENT, "%s: shard '%s' (named in model.safetensors.index.json for tensor '%s') "
                            "is missing", ck->dir, it->valuestring, it->string);
                free(p);
                break;
            }
            free(p);
            v[(*n)++] = strdup(it->valuestring);
        }
        *names = v;
        if (st) cJSON_Delete(ix);
        else *index = ix;
        goto out;
    }
    DIR *d = opendir(ck->dir);
    if (!d) {
        st = err_set(err, err_from_errno(errno), "%s: cannot open directory: %s", ck->dir, strerror(errno));
        goto out;
    }
    struct dirent *de;
    char **v = NULL;
    while ((de = readdir(d))) {
        if (!ends_with(de->d_name, ".safetensors")) continue;
        char **nv = realloc(v, (size_t)(*n + 1) * sizeof *v);
        if (!nv) { st = err_set(err, SL_ENOMEM, "out of memory"); break; }
        v = nv;
        v[(*n)++] = strdup(de->d_name);
    }
    closedir(d);
    *names = v;
    if (!st && *n == 0) st = err_set(err, SL_ENOENT, "%s: no .safetensors files", ck->dir);
    /* deterministic order */
    for (int i = 1; i < *n; i++)
        for (int j = i; j > 0 && strcmp(v[j - 1], v[j]) > 0; j--) {
            char *x = v[j]; v[j] = v[j - 1]; v[j - 1] = x;
        }
out:
    free(ipath);
    return st;
}

static hf_t *find_t(hf_ckpt *ck, const char *name) {
    for (int i = 0; i < ck->n; i++)
        if (ck->t[i].pub.expert_layer < 0 && !strcmp(ck->t[i].pub.name, name)) return &ck->t[i];
    return NULL;
}

static const st_entry *find_any(hf_ckpt *ck, const char *name, int *file);

/* A stack [E, ...] of one expert part of a family whose parts are stored one stack each (gpt-oss): a matrix
 * [E, rows, cols] (or [E, cols, rows] when the part is disk_t), a bias [E, rows] (taken as [rows, 1]), or an
 * MXFP4 matrix's *_blocks [E, rows, cols/32, 16] (its *_scales, [E, rows, cols/32], attached later; the
 * *_scales entry itself is skipped here). Registers one slice per expert. */
static sl_status add_stacked_part(hf_ckpt *ck, int fi, const st_entry *e, int l, const char *name, sl_error *err) {
    const fam_config *c = &ck->cfg;
    char part[40];
    snprintf(part, sizeof part, "%s", name);
    int blocks = ends_with(part, "_blocks"), scales = ends_with(part, "_scales");
    if (blocks || scales) part[strlen(part) - 7] = 0;
    int p = part_index(ck, part);
    if (p < 0 || l < 0 || l >= c->n_layers) return SL_OK;
    const arch_pdef *pd = arch_part(c, p);
    if (scales) return pd->kind == AK_MAT ? SL_OK : err_set(err, SL_EFORMAT, "tensor '%s': a bias has no scales", e->name);
    int64_t E = c->n_experts, sh[2];
    arch_expert_shape(c, p, sh);
    const int64_t R = sh[0], C = sh[1];
    int ok;
    uint64_t slice;
    if (blocks) {
        ok = pd->kind == AK_MAT && ck->mxfp4 && !strcmp(e->dtype_str, "U8") && C % 32 == 0 && e->ndim == 4 &&
             e->shape[0] == E && e->shape[1] == R && e->shape[2] == C / 32 && e->shape[3] == 16;
        if (!ok)
            return err_set(err, SL_EFORMAT, "tensor '%s' must be U8 [%lld, %lld, %lld, 16] MXFP4 blocks (with "
                          "quantization_config.quant_method mxfp4)", e->name, (long long)E, (long long)R,
                          (long long)(C / 32));
        slice = (uint64_t)R * (uint64_t)C / 2;
    } else {
        int64_t a = pd->disk_t ? C : R, b = pd->disk_t ? R : C;
        ok = pd->kind == AK_VEC ? e->ndim == 2 && e->shape[0] == E && e->shape[1] == R
                                : e->ndim == 3 && e->shape[0] == E && e->shape[1] == a && e->shape[2] == b;
        if (!ok)
            return err_set(err, SL_EFORMAT, pd->kind == AK_VEC ? "tensor '%s' must be [%lld, %lld]"
                                                              : "tensor '%s' must be [%lld, %lld, %lld]",
                          e->name, (long long)E, (long long)a, (long long)b);
        if (e->dtype == DT_NONE || e->dtype == DT_F8E4M3)
            return err_set(err, SL_EUNSUPPORTED, "tensor '%s': dtype %s is not supported for stacked experts", e->name,
                          e->dtype_str);
        slice = (uint64_t)R * (uint64_t)C * dt_size(e->dtype);
    }
    for (int x = 0; x < E; x++) {
        hf_t *t = hf_push(ck);
        if (!t) return err_set(err, SL_ENOMEM, "out of memory");
        char nm[128];
        snprintf(nm, sizeof nm, "layers.%d.mlp.experts.%d.%s", l, x, pd->name);
        if (!(t->pub.name = strdup(nm))) return err_set(err, SL_ENOMEM, "out of memory");
        t->file = fi;
        t->ent = e;
        t->off = e->off + (uint64_t)x * slice;
        t->len = slice;
        t->pub.src_dtype = blocks ? DT_MXFP4 : e->dtype;
        t->pub.q_group = blocks ? 32 : 0;
        t->pub.ndim = 2;
        t->pub.shape[0] = R;
        t->pub.shape[1] = C;
        t->pub.expert_layer = l;
        t->pub.expert = x;
        t->pub.expert_part = p;
        t->transposed = !blocks && pd->kind == AK_MAT && pd->disk_t;
        t->mx_blocks = blocks;
    }
    return SL_OK;
}

/* MXFP4: gives every *_blocks slice the matching slice of its *_scales (U8 [E, rows, cols/32], E8M0). */
static sl_status attach_mxfp4(hf_ckpt *ck, sl_error *err) {
    for (int i = 0; i < ck->n; i++) {
        hf_t *t = &ck->t[i];
        if (!t->mx_blocks) continue;
        const st_entry *e = t->ent;
        char sn[310];
        snprintf(sn, sizeof sn, "%.*s_scales", (int)(strlen(e->name) - 7), e->name);
        int sf = 0;
        const st_entry *se = find_any(ck, sn, &sf);
        const int64_t R = t->pub.shape[0], G = t->pub.shape[1] / 32;
        if (!se || strcmp(se->dtype_str, "U8") || se->ndim != 3 || se->shape[0] != e->shape[0] || se->shape[1] != R ||
            se->shape[2] != G)
            return err_set(err, SL_EFORMAT, "%s: MXFP4 tensor '%s' needs '%s' U8 [%lld, %lld, %lld]",
                          ck->files[t->file].name, e->name, sn, (long long)e->shape[0], (long long)R, (long long)G);
        t->qs_file = t->qb_file = sf;
        t->qs_len = (uint64_t)R * (uint64_t)G;
        t->qs_off = se->off + (uint64_t)t->pub.expert * t->qs_len;
        t->qb_off = se->off;
        t->qb_len = 0;
    }
    return SL_OK;
}

/* MLX stacked experts: layers.l.mlp.switch_mlp.<part> [E, out, in (or packed u32 words)], one slice per expert. */
static sl_status add_mlx_stack(hf_ckpt *ck, int fi, const st_entry *e, int l, const char *part, int u32,
                               sl_error *err) {
    const fam_config *c = &ck->cfg;
    int p = part_index(ck, part);
    if (p < 0 || l < 0 || l >= c->n_layers) return SL_OK;
    if (e->ndim != 3 || e->shape[0] != c->n_experts)
        return err_set(err, SL_EFORMAT, "tensor '%s' must be [%d, out, in] (stacked experts), has %d dims", e->name,
                      c->n_experts, e->ndim);
    size_t es = u32 ? 4 : dt_size(e->dtype);
    if (!es) return err_set(err, SL_EUNSUPPORTED, "tensor '%s': dtype %s is not supported", e->name, e->dtype_str);
    uint64_t slice = (uint64_t)e->shape[1] * (uint64_t)e->shape[2] * es;
    for (int x = 0; x < c->n_experts; x++) {
        hf_t *t = hf_push(ck);
        if (!t) return err_set(err, SL_ENOMEM, "out of memory");
        char nm[128];
        snprintf(nm, sizeof nm, "layers.%d.mlp.experts.%d.%s", l, x, arch_expert_part_name(&ck->cfg, p));
        if (!(t->pub.name = strdup(nm))) return err_set(err, SL_ENOMEM, "out of memory");
        t->file = fi;
        t->ent = e;
        t->off = e->off + (uint64_t)x * slice;
        t->len = slice;
        t->pub.src_dtype = e->dtype;
        t->pub.ndim = 2;
        t->pub.shape[0] = e->shape[1];
        t->pub.shape[1] = e->shape[2];
        t->pub.expert_layer = l;
        t->pub.expert = x;
        t->pub.expert_part = p;
        t->mlx_u32 = u32;
    }
    return SL_OK;
}

/* One expert's part stored alone: layers.l.mlp.experts.x.<part>. */
static sl_status add_expert_part(hf_ckpt *ck, int fi, const st_entry *e, int l, int ex, const char *part,
                                 sl_error *err) {
    const fam_config *c = &ck->cfg;
    int p = part_index(ck, part);
    if (p < 0 || l < 0 || l >= c->n_layers || ex < 0 || ex >= c->n_experts) return SL_OK;
    hf_t *t = hf_push(ck);
    if (!t) return err_set(err, SL_ENOMEM, "out of memory");
    char nm[128];
    snprintf(nm, sizeof nm, "layers.%d.mlp.experts.%d.%s", l, ex, arch_expert_part_name(&ck->cfg, p));
    t->pub.name = strdup(nm);
    t->file = fi;
    t->ent = e;
    t->off = e->off;
    t->len = e->len;
    t->pub.src_dtype = e->dtype;
    t->pub.ndim = e->ndim;
    memcpy(t->pub.shape, e->shape, sizeof t->pub.shape);
    t->pub.expert_layer = l;
    t->pub.expert = ex;
    t->pub.expert_part = p;
    return t->pub.name ? SL_OK : err_set(err, SL_ENOMEM, "out of memory");
}

/* Fused SwiGLU experts: layers.l.mlp.experts.gate_up_proj [E, 2I, H] (each expert's gate rows, then its up rows)
 * or .down_proj [E, H, I], one slice per expert and part. */
static sl_status add_fused(hf_ckpt *ck, int fi, const st_entry *e, int l, int up, sl_error *err) {
    const fam_config *c = &ck->cfg;
    if (l < 0 || l >= c->n_layers) return SL_OK;
    int64_t E = c->n_experts, I = c->moe_inter, H = c->hidden;
    int64_t want0 = E, want1 = up ? 2 * I : H, want2 = up ? H : I;
    if (e->ndim != 3 || e->shape[0] != want0 || e->shape[1] != want1 || e->shape[2] != want2)
        return err_set(err, SL_EFORMAT, "tensor '%s' has shape [%lld,%lld,%lld], config implies [%lld,%lld,%lld]",
                      e->name, (long long)e->shape[0], (long long)(e->ndim > 1 ? e->shape[1] : 0),
                      (long long)(e->ndim > 2 ? e->shape[2] : 0), (long long)want0, (long long)want1,
                      (long long)want2);
    if (e->dtype == DT_NONE || e->dtype == DT_F8E4M3)
        return err_set(err, SL_EUNSUPPORTED, "tensor '%s': dtype %s is not supported for fused experts", e->name,
                      e->dtype_str);
    size_t es = dt_size(e->dtype);
    uint64_t part_bytes = (uint64_t)I * (uint64_t)H * es;
    for (int x = 0; x < E; x++) {
        for (int k = 0; k < (up ? 2 : 1); k++) {
            hf_t *t = hf_push(ck);
            if (!t) return err_set(err, SL_ENOMEM, "out of memory");
            int p = up ? k : 2;
            char nm[128];
            snprintf(nm, sizeof nm, "layers.%d.mlp.experts.%d.%s", l, x, arch_expert_part_name(&ck->cfg, p));
            t->pub.name = strdup(nm);
            if (!t->pub.name) return err_set(err, SL_ENOMEM, "out of memory");
            t->file = fi;
            t->ent = e;
            t->off = e->off + (uint64_t)x * (up ? 2 : 1) * part_bytes + (uint64_t)k * part_bytes;
            t->len = part_bytes;
            t->pub.src_dtype = e->dtype;
            t->pub.ndim = 2;
            t->pub.shape[0] = up ? I : H;
            t->pub.shape[1] = up ? H : I;
            t->pub.expert_layer = l;
            t->pub.expert = x;
            t->pub.expert_part = p;
        }
    }
    return SL_OK;
}

/* A backbone tensor under its canonical name `base` (conv1d kernels [Cq,1,K] / MLX [Cq,K,1] taken as [Cq,K]). */
static sl_status add_plain(hf_ckpt *ck, int fi, const st_entry *e, const char *base, int u32, sl_error *err) {
    hf_t *t = hf_push(ck);
    if (!t) return err_set(err, SL_ENOMEM, "out of memory");
    t->pub.name = strdup(base);
    if (!t->pub.name) return err_set(err, SL_ENOMEM, "out of memory");
    t->file = fi;
    t->ent = e;
    t->off = e->off;
    t->len = e->len;
    t->pub.src_dtype = e->dtype;
    t->pub.ndim = e->ndim;
    memcpy(t->pub.shape, e->shape, sizeof t->pub.shape);
    t->mlx_u32 = u32;
    t->ints = !strcmp(e->dtype_str, "I64") ? 8 : !strcmp(e->dtype_str, "I32") ? 4 : 0; /* integer ids (tid2eid) */
    if (t->ints) t->pub.src_dtype = DT_F32; /* the values it reads as */
    if (ends_with(base, "conv1d") && e->ndim == 3 && e->shape[1] == 1) { /* [Cq,1,K] -> [Cq,K] (Kimi: q/k/v_conv1d) */
        t->pub.ndim = 2;
        t->pub.shape[1] = e->shape[2];
        t->pub.shape[2] = 0;
    } else if (ends_with(base, "linear_attn.conv1d") && e->ndim == 3 && e->shape[2] == 1) { /* MLX [Cq,K,1] */
        t->pub.ndim = 2;
        t->pub.shape[2] = 0;
    } else if (ends_with(base, "e_score_correction_bias") && e->ndim == 2 && e->shape[0] == 1) { /* ERNIE's [1,E] */
        t->pub.ndim = 1;
        t->pub.shape[0] = e->shape[1];
        t->pub.shape[1] = 0;
    } else if (ends_with(base, "A_log") && e->ndim == 4 && e->shape[0] == 1 && e->shape[1] == 1 && e->shape[3] == 1) {
        t->pub.ndim = 1; /* Kimi Linear's [1, 1, heads, 1] */
        t->pub.shape[0] = e->shape[2];
        t->pub.shape[1] = t->pub.shape[2] = t->pub.shape[3] = 0;
    }
    return SL_OK;
}

/* Registers one disk tensor under its canonical name(s): by what its canonical name says it holds, an MLX
 * stack of experts, one expert's part, a family's stacked part (gpt-oss), fused SwiGLU experts, or a plain
 * backbone tensor. FP8 scales and MLX scales / biases are attached in later passes. */
static sl_status add_entry(hf_ckpt *ck, int fi, const st_entry *e, sl_error *err) {
    const char *rest = strip_prefix(e->name);
    if (!rest) return SL_OK;
    char base[256];
    snprintf(base, sizeof base, "%s", rest);
    if (ends_with(base, ".weight_scale_inv")) return SL_OK; /* attached in a second pass */
    if (ends_with(base, ".scales") || ends_with(base, ".biases")) return SL_OK; /* MLX: attach_mlx() */
    int u32 = e->dtype == DT_NONE && !strcmp(e->dtype_str, "U32") && ends_with(base, ".weight");
    if (ends_with(base, ".weight")) base[strlen(base) - 7] = 0;
    canon_layer_name(ck, base, sizeof base);
    int l, ex, nread = 0;
    char part[32];
    if (sscanf(base, "layers.%d.mlp.switch_mlp.%31[a-z_]%n", &l, part, &nread) == 2 && base[nread] == 0)
        return add_mlx_stack(ck, fi, e, l, part, u32, err);
    if (sscanf(base, "layers.%d.mlp.experts.%d.%31[a-z0-9_]%n", &l, &ex, part, &nread) == 3 && base[nread] == 0)
        return add_expert_part(ck, fi, e, l, ex, part, err);
    if ((ck->cfg.expert_kind == SL_EXPERT_GPTOSS || ck->cfg.expert_kind == SL_EXPERT_SWIGLU_FUSED) &&
        sscanf(base, "layers.%d.mlp.experts.%31[a-z_]%n", &l, part, &nread) == 2 && base[nread] == 0)
        return add_stacked_part(ck, fi, e, l, part, err);
    if (sscanf(base, "layers.%d.mlp.experts.%31[a-z_]%n", &l, part, &nread) == 2 && base[nread] == 0 &&
        (!strcmp(part, "gate_up_proj") || !strcmp(part, "down_proj")))
        return add_fused(ck, fi, e, l, !strcmp(part, "gate_up_proj"), err);
    return add_plain(ck, fi, e, base, u32, err);
}

static int shape_eq(const hf_tensor *t, int ndim, const int64_t *shape) {
    if (t->ndim != ndim) return 0;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i]) return 0;
    return 1;
}

static void fmt_shape(char *buf, size_t n, int ndim, const int64_t *s) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++) k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)s[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static sl_status check_tensor(hf_ckpt *ck, hf_t *t, int ndim, const int64_t *shape, sl_error *err) {
    const char *file = ck->files[t->file].name;
    if (!shape_eq(&t->pub, ndim, shape)) {
        char a[96], b[96];
        fmt_shape(a, sizeof a, t->pub.ndim, t->pub.shape);
        fmt_shape(b, sizeof b, ndim, shape);
        return err_set(err, SL_EFORMAT, "%s: tensor '%s' has shape %s, config implies %s", file, t->ent->name, a, b);
    }
    if (t->pub.src_dtype == DT_NONE)
        return err_set(err, SL_EUNSUPPORTED, "%s: tensor '%s' has dtype %s (supported: F32, F16, BF16, F8_E4M3)",
                      file, t->ent->name, t->ent->dtype_str);
    if (t->pub.src_dtype == DT_F8E4M3) {
        if (!ck->fp8 || ndim != 2)
            return err_set(err, SL_EFORMAT, "%s: tensor '%s' is F8_E4M3 but config.json declares no fp8 "
                          "quantization_config", file, t->ent->name);
        /* find its weight_scale_inv among all files */
        char want[300];
        size_t nl = strlen(t->ent->name);
        if (!ends_with(t->ent->name, ".weight") || nl + 8 >= sizeof want)
            return err_set(err, SL_EFORMAT, "%s: FP8 tensor '%s' is not a .weight", file, t->ent->name);
        snprintf(want, sizeof want, "%.*s.weight_scale_inv", (int)(nl - 7), t->ent->name);
        const st_entry *s = NULL;
        for (int f = 0; f < ck->n_files && !s; f++) s = st_find(&ck->files[f], want);
        int64_t br = (shape[0] + ck->blk_r - 1) / ck->blk_r, bc = (shape[1] + ck->blk_c - 1) / ck->blk_c;
        if (!s) return err_set(err, SL_EFORMAT, "%s: FP8 tensor '%s' has no '%s'", file, t->ent->name, want);
        if (s->ndim != 2 || s->shape[0] != br || s->shape[1] != bc || (s->dtype != DT_F32 && s->dtype != DT_BF16))
            return err_set(err, SL_EFORMAT, "tensor '%s' must be F32 or BF16 of shape [%lld,%lld] (blocks of %dx%d)",
                          want, (long long)br, (long long)bc, ck->blk_r, ck->blk_c);
        t->scale = s;
    }
    return SL_OK;
}

static const st_entry *find_any(hf_ckpt *ck, const char *name, int *file) {
    for (int f = 0; f < ck->n_files; f++) {
        const st_entry *e = st_find(&ck->files[f], name);
        if (e) {
            *file = f;
            return e;
        }
    }
    return NULL;
}

/* MLX: gives every uint32 weight its scales and biases, its logical shape and its dtype (q4 / q8). */
static sl_status attach_mlx(hf_ckpt *ck, sl_error *err) {
    for (int i = 0; i < ck->n; i++) {
        hf_t *t = &ck->t[i];
        if (!t->mlx_u32) continue;
        const st_entry *e = t->ent;
        const char *file = ck->files[t->file].name;
        if (!ck->mlx.bits)
            return err_set(err, SL_EFORMAT, "%s: tensor '%s' is U32 but config.json has no MLX 'quantization'", file,
                          e->name);
        char module[300], sn[310], bn[310];
        snprintf(module, sizeof module, "%.*s", (int)(strlen(e->name) - 7), e->name);
        snprintf(sn, sizeof sn, "%s.scales", module);
        snprintf(bn, sizeof bn, "%s.biases", module);
        const st_entry *se = find_any(ck, sn, &t->qs_file), *be = find_any(ck, bn, &t->qb_file);
        if (!se || !be)
            return err_set(err, SL_EFORMAT, "%s: MLX-quantized tensor '%s' has no '%s'", file, e->name, se ? bn : sn);
        int bits, group;
        mlx_module_params(&ck->mlx, module, &bits, &group);
        int64_t cols;
        sl_status st = mlx_check_module(e->name, bits, group, e->ndim, e->shape, se->ndim, se->shape, be->ndim,
                                        be->shape, se->dtype, be->dtype, &cols, err);
        if (st) {
            err_prefix(err, "%s", file);
            return st;
        }
        t->pub.src_dtype = bits == 8 ? DT_Q8 : DT_Q4;
        t->pub.q_group = group;
        t->pub.q_sdtype = se->dtype;
        t->pub.shape[1] = cols;
        uint64_t slen = (uint64_t)t->pub.shape[0] * (uint64_t)(cols / group) * dt_size(se->dtype);
        uint64_t x = e->ndim == 3 ? (uint64_t)t->pub.expert : 0;
        t->qs_off = se->off + x * slen;
        t->qb_off = be->off + x * slen;
        t->qs_len = t->qb_len = slen;
    }
    return SL_OK;
}

/* No tokenizer.json: the one tiktoken.model means (Kimi K2 / Kimi Linear's release; import/tiktoken.c), if there. */
static sl_status tiktoken_blob(const char *dir, char **data, size_t *len, sl_error *err) {
    char *tp = fio_join(dir, "tiktoken.model"), *cp = fio_join(dir, "tokenizer_config.json"), *text = NULL, *cfg = NULL;
    size_t n = 0, cn = 0;
    sl_status st = !tp || !cp ? err_set(err, SL_ENOMEM, "out of memory") : SL_OK;
    if (!st && access(tp, F_OK) == 0) {
        st = fio_read_file(tp, &text, &n, err);
        if (!st && access(cp, F_OK) == 0) st = fio_read_file(cp, &cfg, &cn, err);
        if (!st) st = tiktoken_tokenizer_json(text, n, cfg, "kimi-k2", data, err);
        if (st) err_prefix(err, "%s", tp);
        else *len = strlen(*data);
    }
    free(tp), free(cp), free(text), free(cfg);
    return st;
}

sl_status hf_blob(hf_ckpt *ck, const char *name, char **data, size_t *len, sl_error *err) {
    *data = NULL;
    *len = 0;
    if (ck->gm.n_files) {
        const char *s = !strcmp(name, "config.json") ? ck->config_text
                        : !strcmp(name, "tokenizer.json") ? ck->tok_json
                        : !strcmp(name, "tokenizer_config.json") ? ck->tok_cfg : NULL;
        if (!s) return SL_OK;
        if (!(*data = strdup(s))) return err_set(err, SL_ENOMEM, "out of memory");
        *len = strlen(s);
        return SL_OK;
    }
    char *bp = fio_join(ck->dir, name);
    if (!bp) return err_set(err, SL_ENOMEM, "out of memory");
    sl_status st = access(bp, F_OK) == 0 ? fio_read_file(bp, data, len, err) : SL_OK;
    free(bp);
    if (!st && !*data && !strcmp(name, "tokenizer.json")) st = tiktoken_blob(ck->dir, data, len, err);
    return st;
}

int hf_is_gguf(const hf_ckpt *ck) { return ck->gm.n_files > 0; }

static sl_status validate(hf_ckpt *ck, sl_error *err) {
    const fam_config *c = &ck->cfg;
    arch_tensor *at = NULL;
    int n = arch_backbone_tensors(c, &at);
    if (n < 0) return err_set(err, SL_ENOMEM, "out of memory");
    sl_status st = SL_OK;
    for (int i = 0; i < n && !st; i++) {
        hf_t *t = find_t(ck, at[i].name);
        if (!t) {
            st = err_set(err, SL_EFORMAT, "%s: tensor '%s' (canonical name '%s') is missing from the checkpoint",
                        ck->dir, at[i].name, at[i].name);
            break;
        }
        st = check_tensor(ck, t, at[i].ndim, at[i].shape, err);
    }
    free(at);
    if (st) return st;
    size_t ne = (size_t)c->n_layers * (size_t)c->n_experts * ARCH_MAX_PARTS;
    ck->experts = calloc(ne, sizeof *ck->experts);
    if (!ck->experts) return err_set(err, SL_ENOMEM, "out of memory");
    for (int i = 0; i < ck->n; i++) {
        hf_t *t = &ck->t[i];
        if (t->pub.expert_layer < 0) continue;
        size_t k = ((size_t)t->pub.expert_layer * (size_t)c->n_experts + (size_t)t->pub.expert) * ARCH_MAX_PARTS +
                   (size_t)t->pub.expert_part;
        if (ck->experts[k])
            return err_set(err, SL_EFORMAT, "%s: expert tensor '%s' appears twice (per-expert and fused?)", ck->dir,
                          t->pub.name);
        ck->experts[k] = t;
    }
    for (int l = 0; l < c->n_layers; l++) {
        if (!c->layer_moe[l]) continue;
        for (int e = 0; e < c->n_experts; e++)
            for (int p = 0; p < arch_n_parts(c); p++) {
                hf_t *t = ck->experts[((size_t)l * (size_t)c->n_experts + (size_t)e) * ARCH_MAX_PARTS + (size_t)p];
                if (!t)
                    return err_set(err, SL_EFORMAT, "%s: expert tensor 'layers.%d.mlp.experts.%d.%s' is missing "
                                  "(neither per-expert nor fused experts.gate_up_proj/down_proj)",
                                  ck->dir, l, e, arch_expert_part_name(&ck->cfg, p));
                int64_t sh[2];
                arch_expert_shape(c, p, sh);
                if ((st = check_tensor(ck, t, 2, sh, err))) return st;
            }
    }
    return SL_OK;
}

/* config.json of the directory into ck (its text, the fam_config, quantization_config: FP8 blocks or gpt-oss's
 * MXFP4 experts, MLX "quantization"). */
static sl_status read_config(hf_ckpt *ck, const char *dir, sl_error *err) {
    cJSON *cfgjson = NULL;
    char *cpath = fio_join(dir, "config.json");
    sl_status st = cpath ? SL_OK : err_set(err, SL_ENOMEM, "out of memory");
    if (!st) st = fio_read_file(cpath, &ck->config_text, NULL, err);
    if (!st) st = hf_parse_config(ck->config_text, cpath, &ck->cfg, err);
    if (!st) {
        cfgjson = cJSON_Parse(ck->config_text);
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(cfgjson, "quantization_config");
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
        if (cJSON_IsString(m)) {
            if (!strcmp(m->valuestring, "mxfp4") && ck->cfg.arch == SL_ARCH_GPT_OSS) {
                ck->mxfp4 = 1; /* the experts' *_blocks / *_scales (add_stacked_part); the rest is plain */
            } else if (strcmp(m->valuestring, "fp8")) {
                st = err_set(err, SL_EUNSUPPORTED, "%s: quantization_config.quant_method '%s' is not supported (fp8; "
                            "mxfp4 for gpt_oss)", cpath, m->valuestring);
            } else {
                const cJSON *b = cJSON_GetObjectItemCaseSensitive(q, "weight_block_size");
                ck->fp8 = 1;
                ck->blk_r = ck->blk_c = 128;
                if (cJSON_IsArray(b) && cJSON_GetArraySize(b) == 2) {
                    ck->blk_r = cJSON_GetArrayItem(b, 0)->valueint;
                    ck->blk_c = cJSON_GetArrayItem(b, 1)->valueint;
                }
                if (ck->blk_r < 1 || ck->blk_c < 1)
                    st = err_set(err, SL_ECONFIG, "%s: bad quantization_config.weight_block_size", cpath);
            }
        }
    }
    if (!st && (st = mlx_parse_quant(cfgjson, cpath, &ck->mlx, err)) == SL_OK && ck->mlx.bits &&
        ck->cfg.zero_centred_norm) {
        /* mlx-lm saves the (1 + w) norms already shifted */
        ck->cfg.zero_centred_norm = 0;
        ck->cfg.norms_shifted = 1;
    }
    free(cpath);
    cJSON_Delete(cfgjson);
    return st;
}

/* Opens every safetensors shard of the directory (st_open checks each header against its file) and checks
 * that every tensor model.safetensors.index.json names is in the file it names. */
static sl_status open_shards(hf_ckpt *ck, const char *dir, sl_error *err) {
    char **names = NULL;
    int n_names = 0;
    cJSON *index = NULL;
    sl_status st = list_files(ck, &names, &n_names, &index, err);
    if (st) goto done;
    ck->files = calloc((size_t)n_names, sizeof *ck->files);
    if (!ck->files) { st = err_set(err, SL_ENOMEM, "out of memory"); goto done; }
    for (int i = 0; i < n_names; i++) {
        char *p = fio_join(dir, names[i]);
        if (!p) { st = err_set(err, SL_ENOMEM, "out of memory"); goto done; }
        st = st_open(p, &ck->files[i], err);
        free(p);
        if (st) goto done;
        ck->n_files++;
    }
    if (index) { /* every tensor the index names must be in the file it names */
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(index, "weight_map")) {
            for (int i = 0; i < ck->n_files; i++) {
                if (strcmp(ck->files[i].name, it->valuestring)) continue;
                if (!st_find(&ck->files[i], it->string)) {
                    st = err_set(err, SL_EFORMAT, "%s: tensor '%s' is named in model.safetensors.index.json but "
                                "not in the file", ck->files[i].path, it->string);
                    goto done;
                }
            }
        }
    }
done:
    for (int i = 0; i < n_names; i++) free(names[i]);
    free(names);
    cJSON_Delete(index);
    return st;
}

sl_status hf_open(const char *dir, hf_ckpt **out, sl_error *err) {
    *out = NULL;
    hf_ckpt *ck = calloc(1, sizeof *ck);
    sl_status st = SL_OK;
    if (!ck) return err_set(err, SL_ENOMEM, "out of memory");
    if (!(ck->dir = strdup(dir))) {
        st = err_set(err, SL_ENOMEM, "out of memory");
        goto done;
    }
    if (gguf_is_model(dir)) {
        if (!(st = hf_open_gguf(ck, dir, err))) st = validate(ck, err);
        goto done;
    }
    struct stat sb;
    if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode)) { /* a file, but not a GGUF one */
        st = err_set(err, SL_EFORMAT, "%s: neither a checkpoint directory (config.json and *.safetensors) nor a GGUF file", dir);
        goto done;
    }
    if ((st = read_config(ck, dir, err)) || (st = open_shards(ck, dir, err))) goto done;
    for (int f = 0; f < ck->n_files; f++)
        for (int i = 0; i < ck->files[f].n; i++)
            if ((st = add_entry(ck, f, &ck->files[f].e[i], err))) {
                err_prefix(err, "%s", ck->files[f].path);
                goto done;
            }
    if ((st = attach_mlx(ck, err)) || (st = attach_mxfp4(ck, err))) goto done;
    st = validate(ck, err);
done:
    if (st) hf_close(ck);
    else *out = ck;
    return st;
}

void hf_close(hf_ckpt *ck) {
    if (!ck) return;
    for (int i = 0; i < ck->n_files; i++) {
        if (ck->gm.n_files) ck->files[i].fd = -1; /* gguf_close_model closes it */
        st_close(&ck->files[i]);
    }
    gguf_close_model(&ck->gm);
    free(ck->tok_json);
    free(ck->tok_cfg);
    free(ck->files);
    for (int i = 0; i < ck->n; i++) free(ck->t[i].pub.name);
    free(ck->t);
    free(ck->experts);
    mlx_quant_free(&ck->mlx);
    free(ck->config_text);
    free(ck->dir);
    free(ck);
}

const fam_config *hf_config(const hf_ckpt *ck) { return &ck->cfg; }
int hf_n_tensors(const hf_ckpt *ck) { return ck->n; }
const hf_tensor *hf_tensor_at(const hf_ckpt *ck, int i) { return &ck->t[i].pub; }
int hf_n_files(const hf_ckpt *ck) { return ck->n_files; }
const char *hf_file_name(const hf_ckpt *ck, int i) { return ck->files[i].name; }
const char *hf_file_path(const hf_ckpt *ck, int i) { return ck->files[i].path; }
uint64_t hf_file_size(const hf_ckpt *ck, int i) { return ck->files[i].size; }
const char *hf_config_text(const hf_ckpt *ck) { return ck->config_text; }
const char *hf_dir(const hf_ckpt *ck) { return ck->dir; }

const hf_tensor *hf_find(const hf_ckpt *ck, const char *name) {
    int l, e, nr = 0;
    char part[32];
    if (ck->experts && sscanf(name, "layers.%d.mlp.experts.%d.%31[a-z_]%n", &l, &e, part, &nr) == 3 && !name[nr]) {
        int p = part_index(ck, part);
        if (p < 0 || l < 0 || l >= ck->cfg.n_layers || e < 0 || e >= ck->cfg.n_experts) return NULL;
        hf_t *t = ck->experts[((size_t)l * (size_t)ck->cfg.n_experts + (size_t)e) * ARCH_MAX_PARTS + (size_t)p];
        return t ? &t->pub : NULL;
    }
    hf_t *t = find_t((hf_ckpt *)ck, name);
    return t ? &t->pub : NULL;
}

/* ---- reading ---- */

/* w [R][C] read from its [C][R] on-disk layout (a slice of an x @ W stack), transposed in place. */
static sl_status transpose(float *w, int64_t R, int64_t C, const char *name, sl_error *err) {
    const size_t n = (size_t)R * (size_t)C;
    float *tr = malloc(n * sizeof(float) + 1);
    if (!tr) return err_set(err, SL_ENOMEM, "out of memory reading '%s'", name);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) tr[r * C + c] = w[c * R + r];
    memcpy(w, tr, n * sizeof(float));
    free(tr);
    return SL_OK;
}

/* FP8 weights w [R][C] (dequantised to f32) times their weight_scale_inv, one scale per blk_r x blk_c block. */
static sl_status fp8_scale(hf_ckpt *ck, const hf_t *t, float *w, sl_error *err) {
    const st_file *sf = NULL;
    for (int i = 0; i < ck->n_files && !sf; i++)
        if (t->scale >= ck->files[i].e && t->scale < ck->files[i].e + ck->files[i].n) sf = &ck->files[i];
    size_t ns = (size_t)(t->scale->shape[0] * t->scale->shape[1]);
    void *sraw = malloc(t->scale->len);
    float *sc = malloc(ns * sizeof(float));
    sl_status st = SL_OK;
    if (!sraw || !sc) {
        st = err_set(err, SL_ENOMEM, "out of memory");
        goto done;
    }
    if ((st = fio_pread_all(sf->fd, sraw, t->scale->len, t->scale->off, sf->path, err))) goto done;
    dt_to_f32(t->scale->dtype, sraw, sc, ns);
    int64_t R = t->pub.shape[0], C = t->pub.shape[1], bc = t->scale->shape[1];
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) w[r * C + c] *= sc[(r / ck->blk_r) * bc + c / ck->blk_c];
done:
    free(sraw);
    free(sc);
    return st;
}

/* An MLX-quantized tensor as it is stored: codes, then its scales and biases (quant/quant.h's layout). */
static sl_status read_mlx(hf_ckpt *ck, const hf_t *t, dt_type to, uint8_t *d, sl_error *err) {
    const st_file *f = &ck->files[t->file];
    if (to != t->pub.src_dtype)
        return err_set(err, SL_EUNSUPPORTED, "tensor '%s' is MLX-quantized (%s); it is imported as it is", t->pub.name,
                      dt_name(t->pub.src_dtype));
    sl_status st = fio_pread_all(f->fd, d, t->len, t->off, f->path, err);
    if (!st) st = fio_pread_all(ck->files[t->qs_file].fd, d + t->len, t->qs_len, t->qs_off, ck->files[t->qs_file].path, err);
    if (!st) st = fio_pread_all(ck->files[t->qb_file].fd, d + t->len + t->qs_len, t->qb_len, t->qb_off,
                                ck->files[t->qb_file].path, err);
    return st;
}

sl_status hf_read(hf_ckpt *ck, const hf_tensor *pub, dt_type to, void *dst, sl_error *err) {
    const hf_t *t = (const hf_t *)pub;
    if (t->gg) return hf_read_gguf(ck, t, to, dst, err);
    if (q_is_quant(pub->src_dtype)) return read_mlx(ck, t, to, dst, err);
    const st_file *f = &ck->files[t->file];
    size_t n = 1;
    for (int i = 0; i < pub->ndim; i++) n *= (size_t)pub->shape[i];
    if (pub->src_dtype == to && !t->scale && !t->transposed && !t->ints)
        return fio_pread_all(f->fd, dst, t->len, t->off, f->path, err);
    void *raw = malloc(t->len ? t->len : 1);
    float *tmp = (to == DT_F32) ? dst : malloc(n * sizeof(float) + 1);
    sl_status st = SL_OK;
    if (!raw || !tmp) { st = err_set(err, SL_ENOMEM, "out of memory reading '%s'", pub->name); goto out; }
    if ((st = fio_pread_all(f->fd, raw, t->len, t->off, f->path, err))) goto out;
    if (t->ints && t->len != n * (size_t)t->ints) {
        st = err_set(err, SL_EFORMAT, "tensor '%s': %zu bytes for %zu integers", pub->name, (size_t)t->len, n);
        goto out;
    }
    for (size_t i = 0; t->ints && i < n; i++) { /* little-endian ids, exact as floats below 2^24 */
        int64_t v = 0;
        memcpy(&v, (const char *)raw + i * (size_t)t->ints, (size_t)t->ints); /* I32: the low half, sign below */
        if (t->ints == 4) v = (int32_t)(uint32_t)v;
        tmp[i] = (float)v;
    }
    if (!t->ints) dt_to_f32(pub->src_dtype, raw, tmp, n);
    if (t->transposed && (st = transpose(tmp, pub->shape[0], pub->shape[1], pub->name, err))) goto out;
    if (t->scale && (st = fp8_scale(ck, t, tmp, err))) goto out;
    if (to != DT_F32) dt_from_f32(to, tmp, dst, n);
out:
    free(raw);
    if (tmp != dst) free(tmp);
    return st;
}
