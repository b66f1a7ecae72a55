/*
 * hf_gguf.c — a GGUF model as a checkpoint source of hf.h (import/gguf.h reads the files): config.json and the
 * tokenizer rebuilt from its metadata, its tensors mapped to canonical names through the family table's gguf
 * names (family/arch.h), the tensors llama.cpp's converter rewrote put back by the family's gguf_xf rules, and
 * their reading, converted by gguf_convert. See hf_internal.h.
 *
 * Sections: registering tensors (gguf_add, the gguf_xf rules), opening
 * (hf_open_gguf), reading (hf_read_gguf).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family/arch.h"
#include "family/hf_config.h"
#include "family/tensors.h"
#include "import/gguf.h"
#include "import/hf_internal.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/fileio.h"

/* How tensor t of GGUF type `type` is read for a row of kind `kind` (AK_*): the container dtype. */
static int gguf_src_dtype(hf_t *t, uint32_t type, int kind) {
    dt_type dt, sdt;
    int group;
    if (gguf_type_target(type, &dt, &group, &sdt)) return -1;
    if (kind == AK_VEC && q_is_quant(dt)) dt = DT_F32, group = 0, sdt = DT_NONE; /* vectors are read as f32 */
    t->pub.src_dtype = dt;
    t->pub.q_group = group;
    t->pub.q_sdtype = sdt;
    t->pub.q_act = dt == DT_Q8 || dt == DT_Q4 ? gguf_type_act(type) : TN_ACT_HOUSE;
    t->gg = 1;
    t->gg_type = type;
    return 0;
}

static sl_status gguf_type_err(const gguf_file *f, const gguf_tensor *g, sl_error *err) {
    return err_set(err, SL_EUNSUPPORTED, "%s: tensor '%s' has GGUF type %s, which sluice does not import (supported: %s)",
                  f->path, g->name, gguf_type_name(g->type), gguf_supported_types());
}

/* The table entry of rule r's tensor (NULL for a part's rule, or when the table has none). */
static const arch_tdef *xf_tdef(const arch_desc *a, const arch_gguf_xf *r) {
    for (int i = 0; !r->part && i < a->n_tensors; i++)
        if (!strcmp(a->tensors[i].name, r->name)) return &a->tensors[i];
    return NULL;
}

/* Whether rule r makes its tensor at layer l (a part's rule: always; a tensor the config does not have there, as
 * in_proj_qkvz under qkvz_split: no, and its sources are then read as what the table names them). */
static int xf_applies(const fam_config *c, const arch_desc *a, const arch_gguf_xf *r, int l) {
    const arch_tdef *d = xf_tdef(a, r);
    return !d || arch_applies(c, d->when, l);
}

/* Expert part p of every expert of layer l from the stack g: of each expert's slice, piece `half` of `n_pieces`
 * (rows are whole blocks, so a piece of rows is a piece of bytes). */
static sl_status push_part(hf_ckpt *ck, int fi, const gguf_tensor *g, const st_entry *e, int l, int p, int half,
                           int n_pieces, sl_error *err) {
    const fam_config *c = &ck->cfg;
    int64_t sh[2];
    arch_expert_shape(c, p, sh);
    uint64_t slice = g->bytes / (uint64_t)c->n_experts, piece = slice / (uint64_t)n_pieces;
    for (int x = 0; x < c->n_experts; x++) {
        hf_t *t = hf_push(ck);
        if (!t) return err_set(err, SL_ENOMEM, "out of memory");
        char nm[128];
        snprintf(nm, sizeof nm, "layers.%d.mlp.experts.%d.%s", l, x, arch_expert_part_name(c, p));
        if (!(t->pub.name = strdup(nm))) return err_set(err, SL_ENOMEM, "out of memory");
        t->file = fi;
        t->ent = e;
        t->off = g->off + (uint64_t)x * slice + (uint64_t)half * piece;
        t->len = piece;
        t->pub.ndim = 2;
        t->pub.shape[0] = sh[0];
        t->pub.shape[1] = sh[1];
        t->pub.expert_layer = l;
        t->pub.expert = x;
        t->pub.expert_part = p;
        if (gguf_src_dtype(t, g->type, arch_part(c, p)->kind)) return gguf_type_err(&ck->gm.files[fi], g, err);
    }
    return SL_OK;
}

/* llama.cpp's fused ffn_gate_up_exps [E][2I][H] (Gemma 4: the checkpoint's experts.gate_up_proj as it is; its graph
 * takes the first I rows as the gate, llama-graph.cpp build_moe_ffn): the gate_proj and up_proj parts. */
static sl_status gguf_add_gate_up(hf_ckpt *ck, int fi, const gguf_tensor *g, const st_entry *e, int l, sl_error *err) {
    const fam_config *c = &ck->cfg;
    int pg = -1, pu = -1;
    for (int p = 0; p < arch_n_parts(c); p++) {
        if (!strcmp(arch_part(c, p)->name, "gate_proj")) pg = p;
        if (!strcmp(arch_part(c, p)->name, "up_proj")) pu = p;
    }
    const char *path = ck->gm.files[fi].path;
    if (pg < 0 || pu < 0)
        return err_set(err, SL_EFORMAT, "%s: tensor '%s': this family has no gate_proj / up_proj experts", path, g->name);
    int64_t sh[2];
    arch_expert_shape(c, pg, sh);
    if (g->n_dims != 3 || g->ne[2] != c->n_experts || g->ne[1] != 2 * sh[0] || g->ne[0] != sh[1])
        return err_set(err, SL_EFORMAT, "%s: tensor '%s' has dims [%lld, %lld, %lld], config implies [%lld, %lld, %d] "
                      "(innermost first)", path, g->name, (long long)g->ne[0], (long long)g->ne[1], (long long)g->ne[2],
                      (long long)sh[1], (long long)(2 * sh[0]), c->n_experts);
    sl_status st = push_part(ck, fi, g, e, l, pg, 0, 2, err);
    return st ? st : push_part(ck, fi, g, e, l, pu, 1, 2, err);
}

/* Registers GGUF tensor g (file fi, entry e) under its canonical name, or ignores it. */
static sl_status gguf_add(hf_ckpt *ck, const arch_desc *a, int fi, const gguf_tensor *g, const st_entry *e,
                          sl_error *err) {
    const fam_config *c = &ck->cfg;
    const gguf_file *f = &ck->gm.files[fi];
    int l = -1, nr = 0;
    const char *rel = g->name;
    if (sscanf(g->name, "blk.%d.%n", &l, &nr) == 1 && nr > 0) {
        if (l < 0 || l >= c->n_layers) return SL_OK; /* e.g. GLM-4.5's multi-token-prediction layer */
        rel = g->name + nr;
        for (int k = 0; k < a->n_gguf_xf; k++) /* read by its rule (gguf_add_xf) */
            for (int s = 0; s < 2; s++)
                if (a->gguf_xf[k].src[s] && !strcmp(rel, a->gguf_xf[k].src[s]) && xf_applies(c, a, &a->gguf_xf[k], l))
                    return SL_OK;
        for (int p = 0; p < arch_n_parts(c); p++) {
            const arch_pdef *pd = arch_part(c, p);
            if (!pd->gguf || strcmp(rel, pd->gguf)) continue;
            int64_t sh[2];
            arch_expert_shape(c, p, sh);
            if (pd->kind == AK_VEC) { /* a bias stack [E][rows] */
                if (g->n_dims != 2 || g->ne[1] != c->n_experts || g->ne[0] != sh[0])
                    return err_set(err, SL_EFORMAT, "%s: tensor '%s' has dims [%lld, %lld], config implies [%lld, %d] "
                                  "(innermost first)", f->path, g->name, (long long)g->ne[0], (long long)g->ne[1],
                                  (long long)sh[0], c->n_experts);
            } else if (g->n_dims != 3 || g->ne[2] != c->n_experts || g->ne[1] != sh[0] || g->ne[0] != sh[1])
                return err_set(err, SL_EFORMAT, "%s: tensor '%s' has dims [%lld, %lld, %lld], config implies [%lld, %lld, "
                              "%d] (innermost first)", f->path, g->name, (long long)g->ne[0], (long long)g->ne[1],
                              (long long)g->ne[2], (long long)sh[1], (long long)sh[0], c->n_experts);
            return push_part(ck, fi, g, e, l, p, 0, 1, err);
        }
        if (!strcmp(rel, "ffn_gate_up_exps.weight")) return gguf_add_gate_up(ck, fi, g, e, l, err);
    }
    const arch_tdef *d = NULL;
    for (int k = 0; k < a->n_tensors && !d; k++) {
        const arch_tdef *r = &a->tensors[k];
        int global = r->when == AW_GLOBAL || r->when == AW_UNTIED;
        if (r->gguf && global == (l < 0) && !strcmp(r->gguf, rel)) d = r;
    }
    if (!d) return SL_OK; /* not read: rope_freqs, MTP tensors, ... */
    hf_t *t = hf_push(ck);
    if (!t) return err_set(err, SL_ENOMEM, "out of memory");
    char nm[160];
    if (l >= 0) snprintf(nm, sizeof nm, "layers.%d.%s", l, d->name);
    else snprintf(nm, sizeof nm, "%s", d->name);
    if (!(t->pub.name = strdup(nm))) return err_set(err, SL_ENOMEM, "out of memory");
    t->file = fi;
    t->ent = e;
    t->off = g->off;
    t->len = g->bytes;
    /* canonical shape: GGUF dims reversed; a [1, n] matrix may be stored 1-D, a vector as [n, 1] */
    t->pub.ndim = (int)g->n_dims;
    for (uint32_t i = 0; i < g->n_dims; i++) t->pub.shape[i] = g->ne[g->n_dims - 1 - i];
    if (d->kind == AK_MAT && g->n_dims == 1) {
        t->pub.ndim = 2;
        t->pub.shape[0] = 1;
        t->pub.shape[1] = g->ne[0];
    } else if (d->kind == AK_VEC && g->n_dims == 2 && (g->ne[1] == 1 || (g->ne[0] == 1 && d->cols == AD_NONE))) {
        t->pub.ndim = 1; /* [n, 1] or [1, n] (Mamba2's D) */
        t->pub.shape[0] = g->ne[0] * g->ne[1];
    } else if (d->kind == AK_VEC && (g->n_dims == 3 || (g->n_dims == 4 && g->ne[3] == 1)) && g->ne[1] == 1) {
        t->pub.ndim = 2; /* Kimi's conv kernels [K, 1, inner, 1] (or [K, 1, inner]): [inner, K], the same values */
        t->pub.shape[0] = g->ne[2];
        t->pub.shape[1] = g->ne[0];
    }
    if (g->type == GGML_I32 && d->kind == AK_VEC) { /* integer ids (DeepSeek-V4's tid2eid): read as hf.c reads I32 */
        t->ints = 4;
        t->pub.src_dtype = DT_F32;
        return SL_OK;
    }
    if (gguf_src_dtype(t, g->type, d->kind)) return gguf_type_err(f, g, err);
    return SL_OK;
}

static const gguf_tensor *gguf_find(const hf_ckpt *ck, int l, const char *rel, int *file) {
    char nm[200];
    snprintf(nm, sizeof nm, "blk.%d.%s", l, rel);
    for (int i = 0; i < ck->gm.n_files; i++)
        for (uint64_t j = 0; j < ck->gm.files[i].n_tensors; j++)
            if (!strcmp(ck->gm.files[i].t[j].name, nm)) {
                *file = i;
                return &ck->gm.files[i].t[j];
            }
    return NULL;
}

static int is_float_type(uint32_t type) { return type == GGML_F32 || type == GGML_F16 || type == GGML_BF16; }

/* One tensor (an expert's slice x of the sources when x >= 0) by rule r: its sources, their row layout, its
 * dtype (arch.h arch_gguf_xf). */
static sl_status xf_tensor(hf_ckpt *ck, const arch_gguf_xf *r, int kind, const gguf_tensor *const g[2],
                           const int fi[2], int n_src, int x, hf_t *t, sl_error *err) {
    const fam_config *c = &ck->cfg;
    const int64_t rows = t->pub.shape[0], cols = t->pub.ndim == 1 ? 1 : t->pub.shape[1];
    const char *path = ck->gm.files[fi[0]].path;
    int64_t total = 0, src_rows = 0;
    t->xf = r;
    t->xf_n = n_src;
    for (int s = 0; s < n_src; s++) {
        uint64_t nel = 1;
        for (uint32_t d = 0; d < g[s]->n_dims; d++) nel *= (uint64_t)g[s]->ne[d];
        uint64_t len = g[s]->bytes;
        uint64_t off = g[s]->off;
        if (x >= 0) { /* an expert's slice of the stack */
            if (g[s]->ne[g[s]->n_dims - 1] != c->n_experts || g[s]->n_dims < 2)
                return err_set(err, SL_EFORMAT, "%s: tensor '%s' is not a stack of %d experts (outermost dimension %lld)",
                              path, g[s]->name, c->n_experts, (long long)g[s]->ne[g[s]->n_dims - 1]);
            nel /= (uint64_t)c->n_experts;
            len /= (uint64_t)c->n_experts;
            off += (uint64_t)x * len;
        }
        int64_t sc = cols == 1 ? 1 : g[s]->ne[0]; /* a vector: rows of one element */
        if (cols == 1 && !is_float_type(g[s]->type))
            return err_set(err, SL_EUNSUPPORTED, "%s: tensor '%s' is %s; sluice reads it only as F32, F16 or BF16", path,
                          g[s]->name, gguf_type_name(g[s]->type));
        t->src_cols[s] = sc;
        t->src_rows[s] = (int64_t)nel / sc;
        total += (int64_t)nel;
        src_rows += t->src_rows[s];
        if (s == 0) {
            t->file = fi[0];
            t->off = off;
            t->len = len;
            t->gg_type = g[0]->type;
        } else {
            t->file2 = fi[1];
            t->off2 = off;
            t->len2 = len;
            t->gg_type2 = g[1]->type;
        }
        dt_type dt, sdt;
        int grp;
        if (gguf_type_target(g[s]->type, &dt, &grp, &sdt)) return gguf_type_err(&ck->gm.files[fi[s]], g[s], err);
    }
    int same = n_src == 1 || t->gg_type == t->gg_type2;
    if (r->f32) {
        if (total != rows * cols)
            return err_set(err, SL_EFORMAT, "%s: tensor '%s'%s%s hold %lld elements; '%s' needs %lld", path, g[0]->name,
                          n_src > 1 ? " and " : "", n_src > 1 ? g[1]->name : "", (long long)total, t->pub.name,
                          (long long)(rows * cols));
    } else {
        for (int s = 0; s < n_src; s++)
            if (t->src_cols[s] != cols)
                return err_set(err, SL_EFORMAT, "%s: tensor '%s' has rows of %lld, '%s' needs %lld", path, g[s]->name,
                              (long long)t->src_cols[s], t->pub.name, (long long)cols);
        if (src_rows != rows)
            return err_set(err, SL_EFORMAT, "%s: tensor '%s'%s%s hold %lld rows; '%s' needs %lld", path, g[0]->name,
                          n_src > 1 ? " and " : "", n_src > 1 ? g[1]->name : "", (long long)src_rows, t->pub.name,
                          (long long)rows);
    }
    gguf_src_dtype(t, g[0]->type, kind); /* sets gg and the type's own layout; replaced below when rewritten */
    if (!same || (r->f32 && !(kind == AK_MAT && is_float_type(t->gg_type)))) {
        t->pub.src_dtype = DT_F32;
        t->pub.q_group = 0;
        t->pub.q_sdtype = DT_NONE;
        t->pub.q_act = TN_ACT_HOUSE;
    }
    return SL_OK;
}

/* Registers the tensors of the family's gguf_xf rules, for every layer whose GGUF file has the first source. */
static sl_status gguf_add_xf(hf_ckpt *ck, const arch_desc *a, sl_error *err) {
    const fam_config *c = &ck->cfg;
    for (int k = 0; k < a->n_gguf_xf; k++) {
        const arch_gguf_xf *r = &a->gguf_xf[k];
        int kind = AK_MAT, part = -1;
        int64_t sh[2] = {0, 0};
        int ndim = 2;
        if (r->part) {
            for (int p = 0; p < arch_n_parts(c) && part < 0; p++)
                if (!strcmp(arch_part(c, p)->name, r->name)) part = p;
            if (part < 0) continue;
            kind = arch_part(c, part)->kind;
            arch_expert_shape(c, part, sh);
        } else {
            const arch_tdef *d = xf_tdef(a, r);
            if (!d) continue;
            kind = d->kind;
            sh[0] = arch_dim_value(c, d->rows);
            sh[1] = arch_dim_value(c, d->cols);
            ndim = d->cols == AD_NONE ? 1 : 2;
        }
        for (int l = 0; l < c->n_layers; l++) {
            const gguf_tensor *g[2] = {NULL, NULL};
            int fi[2] = {0, 0}, n_src = r->src[1] ? 2 : 1;
            if (!xf_applies(c, a, r, l)) continue; /* its sources registered as themselves (gguf_add) */
            if (!(g[0] = gguf_find(ck, l, r->src[0], &fi[0]))) continue; /* a layer without it, or missing: validate() */
            if (n_src == 2 && !(g[1] = gguf_find(ck, l, r->src[1], &fi[1])))
                return err_set(err, SL_EFORMAT, "%s: tensor 'blk.%d.%s' is missing (with 'blk.%d.%s' it makes '%s')",
                              ck->gm.files[fi[0]].path, l, r->src[1], l, r->src[0], r->name);
            for (int x = r->part ? 0 : -1; x < (r->part ? c->n_experts : 0); x++) {
                hf_t *t = hf_push(ck);
                if (!t) return err_set(err, SL_ENOMEM, "out of memory");
                char nm[160];
                if (r->part) snprintf(nm, sizeof nm, "layers.%d.mlp.experts.%d.%s", l, x, r->name);
                else snprintf(nm, sizeof nm, "layers.%d.%s", l, r->name);
                if (!(t->pub.name = strdup(nm))) return err_set(err, SL_ENOMEM, "out of memory");
                t->ent = NULL;
                for (int j = 0; j < ck->files[fi[0]].n && !t->ent; j++)
                    if (!strcmp(ck->files[fi[0]].e[j].name, g[0]->name)) t->ent = &ck->files[fi[0]].e[j];
                t->pub.ndim = ndim;
                t->pub.shape[0] = sh[0];
                t->pub.shape[1] = ndim == 2 ? sh[1] : 0;
                if (r->part) {
                    t->pub.expert_layer = l;
                    t->pub.expert = x;
                    t->pub.expert_part = part;
                }
                sl_status st = xf_tensor(ck, r, kind, g, fi, n_src, x, t, err);
                if (st) return st;
            }
        }
    }
    return SL_OK;
}

/* qkvz_split (config.h) when the two sources of the rule of an AW_LIN_QKVZ tensor (arch.h) differ in GGUF type in
 * some layer: joined they would be f32 (4x the bytes, and f32 activations where llama.cpp multiplies each in its
 * own type). */
static void gguf_choose_split(hf_ckpt *ck, const arch_desc *a) {
    for (int k = 0; k < a->n_gguf_xf; k++) {
        const arch_gguf_xf *r = &a->gguf_xf[k];
        const arch_tdef *d = xf_tdef(a, r);
        for (int l = 0; d && d->when == AW_LIN_QKVZ && r->src[1] && l < ck->cfg.n_layers; l++) {
            int f0, f1;
            const gguf_tensor *g0 = gguf_find(ck, l, r->src[0], &f0), *g1 = gguf_find(ck, l, r->src[1], &f1);
            if (g0 && g1 && g0->type != g1->type) ck->cfg.qkvz_split = 1;
        }
    }
}

sl_status hf_open_gguf(hf_ckpt *ck, const char *path, sl_error *err) {
    sl_status st = gguf_open_model(path, &ck->gm, err);
    if (st) return st;
    if ((st = gguf_config_json(&ck->gm, &ck->config_text, err))) return st;
    char where[1100];
    snprintf(where, sizeof where, "%s (metadata)", ck->gm.files[0].path);
    if ((st = hf_parse_config(ck->config_text, where, &ck->cfg, err))) return st;
    if ((st = gguf_tokenizer_json(&ck->gm, &ck->tok_json, &ck->tok_cfg, err))) return st;
    const arch_desc *a = arch_get(ck->cfg.arch);
    if (a->gguf_norms_shifted && ck->cfg.zero_centred_norm) { /* the converter stored 1 + w */
        ck->cfg.zero_centred_norm = 0;
        ck->cfg.norms_shifted = 1;
    }
    gguf_choose_split(ck, a);
    ck->files = calloc((size_t)ck->gm.n_files, sizeof *ck->files);
    if (!ck->files) return err_set(err, SL_ENOMEM, "out of memory");
    for (int i = 0; i < ck->gm.n_files; i++) {
        const gguf_file *g = &ck->gm.files[i];
        st_file *sf = &ck->files[i];
        sf->fd = g->fd; /* owned by ck->gm */
        sf->size = g->size;
        if (!(sf->path = strdup(g->path))) return err_set(err, SL_ENOMEM, "out of memory");
        const char *sl = strrchr(sf->path, '/');
        sf->name = sl ? (char *)sl + 1 : sf->path;
        sf->e = calloc((size_t)g->n_tensors + 1, sizeof *sf->e);
        if (!sf->e) return err_set(err, SL_ENOMEM, "out of memory");
        ck->n_files++;
        for (uint64_t j = 0; j < g->n_tensors; j++) {
            const gguf_tensor *gt = &g->t[j];
            st_entry *e = &sf->e[sf->n];
            if (!(e->name = strdup(gt->name))) return err_set(err, SL_ENOMEM, "out of memory");
            sf->n++;
            snprintf(e->dtype_str, sizeof e->dtype_str, "%s", gguf_type_name(gt->type));
            e->ndim = (int)gt->n_dims;
            for (uint32_t d = 0; d < gt->n_dims; d++) e->shape[d] = gt->ne[gt->n_dims - 1 - d];
            e->off = gt->off;
            e->len = gt->bytes;
            if ((st = gguf_add(ck, a, i, gt, e, err))) return st;
        }
    }
    /* an expert part whose GGUF type differs by layer (Q4_K_M's ffn_down_exps) keeps each layer's type: the
     * container gives each MoE layer its own block layout (format/pack.c plan_part) */
    return gguf_add_xf(ck, a, err);
}

/* A tensor of a gguf_xf rule: its sources read back to back, rows reordered by the rule (in the GGUF type when
 * it needs no more), else dequantised to f32 (gguf_convert: gguf-py's values) and rewritten by the rule's f32
 * hook, then converted to `to`. */
static sl_status read_gguf_xf(hf_ckpt *ck, const hf_t *t, dt_type to, void *dst, sl_error *err) {
    const hf_tensor *pub = &t->pub;
    const arch_gguf_xf *r = t->xf;
    const int64_t rows = pub->shape[0], cols = pub->ndim == 1 ? 1 : pub->shape[1], n = rows * cols;
    const char *path = ck->files[t->file].path;
    uint8_t *raw = malloc((size_t)(t->len + (t->xf_n > 1 ? t->len2 : 0)) + 1);
    int64_t *perm = NULL;
    float *f = NULL, *g = NULL;
    sl_status st = SL_OK;
    if (!raw) return err_set(err, SL_ENOMEM, "out of memory reading '%s'", pub->name);
    if ((st = fio_pread_all(ck->files[t->file].fd, raw, t->len, t->off, path, err))) goto out;
    if (t->xf_n > 1 && (st = fio_pread_all(ck->files[t->file2].fd, raw + t->len, t->len2, t->off2,
                                           ck->files[t->file2].path, err)))
        goto out;
    if (r->rows) {
        if (!(perm = malloc((size_t)rows * sizeof *perm))) { st = err_set(err, SL_ENOMEM, "out of memory"); goto out; }
        r->rows(&ck->cfg, rows, perm);
        uint8_t *seen = calloc((size_t)rows, 1); /* a permutation: every source row exactly once */
        if (!seen) { st = err_set(err, SL_ENOMEM, "out of memory"); goto out; }
        for (int64_t i = 0; i < rows && !st; i++)
            if (perm[i] < 0 || perm[i] >= rows || seen[perm[i]]++)
                st = err_set(err, SL_EFORMAT, "tensor '%s': its %lld rows do not regroup under this config (row %lld)",
                            pub->name, (long long)rows, (long long)i);
        free(seen);
        if (st) goto out;
    }
    int same = t->xf_n == 1 || t->gg_type == t->gg_type2;
    if (same && !r->f32) { /* rows in their GGUF type */
        st = gguf_convert(t->gg_type, raw, rows, cols, perm, to, pub->q_group, pub->q_sdtype, dst, pub->name, err);
        goto out;
    }
    if (to != DT_F32 && to != DT_F16 && to != DT_BF16) {
        st = err_set(err, SL_EUNSUPPORTED, "tensor '%s' is imported from GGUF as %s, not %s", pub->name,
                    dt_name(pub->src_dtype), dt_name(to));
        goto out;
    }
    f = malloc((size_t)n * sizeof *f);
    g = malloc((size_t)n * sizeof *g);
    if (!f || !g) { st = err_set(err, SL_ENOMEM, "out of memory reading '%s'", pub->name); goto out; }
    int64_t at = 0;
    const uint8_t *sp = raw;
    for (int s = 0; s < t->xf_n; s++) { /* each source to f32, back to back */
        uint32_t type = s ? t->gg_type2 : t->gg_type;
        if ((st = gguf_convert(type, sp, t->src_rows[s], t->src_cols[s], NULL, DT_F32, 0, DT_NONE, f + at, pub->name,
                               err)))
            goto out;
        at += t->src_rows[s] * t->src_cols[s];
        sp += s ? t->len2 : t->len;
    }
    if (perm)
        for (int64_t i = 0; i < rows; i++) memcpy(g + i * cols, f + perm[i] * cols, (size_t)cols * sizeof *g);
    else memcpy(g, f, (size_t)n * sizeof *g);
    if (r->f32) {
        int64_t bad = r->f32(&ck->cfg, g, f);
        if (bad >= 0) {
            st = err_set(err, SL_EFORMAT, "tensor '%s': source element %lld (%g) cannot be mapped back", pub->name,
                        (long long)bad, (double)g[bad]);
            goto out;
        }
    } else memcpy(f, g, (size_t)n * sizeof *f);
    dt_from_f32(to, f, dst, (size_t)n);
out:
    if (st) err_prefix(err, "%s", path);
    free(g);
    free(f);
    free(perm);
    free(raw);
    return st;
}

sl_status hf_read_gguf(hf_ckpt *ck, const hf_t *t, dt_type to, void *dst, sl_error *err) {
    const hf_tensor *pub = &t->pub;
    const st_file *f = &ck->files[t->file];
    int64_t rows = pub->ndim == 1 ? 1 : pub->shape[0], cols = pub->ndim == 1 ? pub->shape[0] : pub->shape[1];
    for (int i = 2; i < pub->ndim; i++) rows *= pub->shape[i - 1], cols = pub->shape[pub->ndim - 1];
    if (q_is_quant(to) && (to != pub->src_dtype))
        return err_set(err, SL_EUNSUPPORTED, "tensor '%s' is imported from GGUF as %s, not %s", pub->name,
                      dt_name(pub->src_dtype), dt_name(to));
    if (t->xf) return read_gguf_xf(ck, t, to, dst, err);
    uint8_t *raw = malloc(t->len ? t->len : 1);
    sl_status st = SL_OK;
    if (!raw) return err_set(err, SL_ENOMEM, "out of memory reading '%s'", pub->name);
    if ((st = fio_pread_all(f->fd, raw, t->len, t->off, f->path, err))) goto out;
    st = gguf_convert(t->gg_type, raw, rows, cols, NULL, to, pub->q_group, pub->q_sdtype, dst, t->ent->name, err);
    if (st) err_prefix(err, "%s", f->path);
out:
    free(raw);
    return st;
}

