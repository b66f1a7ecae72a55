/*
 * pack.c — HF checkpoint directory -> .sluice container (layout in container.h / docs/FORMAT.md).
 *
 * Order of work: open + validate the checkpoint (import/hf.c), plan the layout, write backbone tensors,
 * expert blocks, the expert hash table, blobs, the manifest and finally the header into
 * "<out>.tmp.<pid>"; fsync and rename over <out>. Any error removes the temporary file, so a failed
 * pack never leaves a file that looks valid and never touches an existing <out>.
 */
#include "format/pack.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "family/tensors.h"
#include "format/container.h"
#include "import/hf.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/fileio.h"
#include "util/xxh3.h"

const char *const pack_blob_names[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                       "generation_config.json", "special_tokens_map.json", "chat_template.jinja",
                                       "chat_template.json", NULL};

sl_pack_params sl_pack_params_default(void) {
    sl_pack_params p;
    memset(&p, 0, sizeof p);
    p.quant = SL_QUANT_KEEP;
    p.hash_sources = 1;
    p.group = 64;
    p.quant_experts = p.quant_backbone = p.quant_router = SL_QUANT_SAME;
    return p;
}

static const char *quant_name(sl_quant q) {
    static const char *const n[] = {"keep", "f32", "bf16", "q8", "q4", "q3"};
    return q >= SL_QUANT_KEEP && q <= SL_QUANT_Q3 ? n[q] : "same";
}

static sl_dtype quant_dtype(sl_quant q) {
    return q == SL_QUANT_Q8 ? DT_Q8 : q == SL_QUANT_Q4 ? DT_Q4 : q == SL_QUANT_Q3 ? DT_Q3 : DT_NONE;
}

/* role: 0 backbone, 1 router / shared-expert gate, 2 routed experts */
static sl_quant role_mode(const sl_pack_params *p, int role) {
    sl_quant bb = p->quant_backbone == SL_QUANT_SAME ? p->quant : p->quant_backbone;
    if (role == 2) return p->quant_experts == SL_QUANT_SAME ? p->quant : p->quant_experts;
    if (role == 1) {
        if (p->quant_router != SL_QUANT_SAME) return p->quant_router;
        return bb == SL_QUANT_Q4 || bb == SL_QUANT_Q3 ? SL_QUANT_Q8 : bb;
    }
    return bb;
}

/* How tensor t (canonical name `name`) is stored under params p. */
/* role: 0 backbone, 1 router / shared-expert gate (the family table's AR_ROUTER), 2 routed experts */
static pack_tgt target_for(const sl_pack_params *p, const hf_tensor *t, const char *name, int matrix, int role) {
    pack_tgt g = {DT_NONE, 0, DT_NONE, 0};
    if (q_is_quant(t->src_dtype)) { /* MLX: as it is */
        g.dt = t->src_dtype;
        g.group = t->q_group;
        g.sdt = t->q_sdtype;
        return g;
    }
    sl_quant q = role_mode(p, role);
    sl_dtype qd = quant_dtype(q);
    char why[128];
    if (qd != DT_NONE && matrix && t->ndim == 2 &&
        !q_check(qd, t->shape[1], p->group, p->scale_f16 ? DT_F16 : DT_BF16, why, sizeof why)) {
        g.dt = qd;
        g.group = p->group;
        g.sdt = p->scale_f16 ? DT_F16 : DT_BF16;
        g.seed = qd == DT_Q3 ? (uint32_t)XXH3_64bits(name, strlen(name)) : 0;
        return g;
    }
    g.dt = pack_target_dtype(qd != DT_NONE ? SL_QUANT_KEEP : q, t->src_dtype, matrix);
    return g;
}

sl_status pack_derive(hf_ckpt *ck, const hf_tensor *t, const pack_tgt *tgt, void *dst, sl_error *err) {
    if (q_is_quant(t->src_dtype)) {
        if (tgt->dt != t->src_dtype || tgt->group != t->q_group || tgt->sdt != t->q_sdtype)
            return sl_err(err, SL_EMISMATCH, "tensor '%s' is %s group %d in the source, %s group %d in the container",
                          t->name, dt_name(t->src_dtype), t->q_group, dt_name(tgt->dt), tgt->group);
        return hf_read(ck, t, tgt->dt, dst, err);
    }
    if (!q_is_quant(tgt->dt)) return hf_read(ck, t, tgt->dt, dst, err);
    char why[128];
    if (t->ndim != 2 || q_check(tgt->dt, t->shape[1], tgt->group, tgt->sdt, why, sizeof why))
        return sl_err(err, SL_EINVAL, "tensor '%s' cannot be stored as %s: %s", t->name, dt_name(tgt->dt),
                      t->ndim != 2 ? "not a matrix" : why);
    size_t n = (size_t)t->shape[0] * (size_t)t->shape[1];
    float *tmp = malloc(n * sizeof(float) + 1);
    if (!tmp) return sl_err(err, SL_ENOMEM, "out of memory quantizing '%s'", t->name);
    sl_status st = hf_read(ck, t, DT_F32, tmp, err);
    if (!st) q_quantize(tgt->dt, tmp, (int)t->shape[0], (int)t->shape[1], tgt->group, tgt->sdt, tgt->seed, dst);
    free(tmp);
    return st;
}

static uint64_t tgt_bytes(const pack_tgt *g, int ndim, const int64_t *shape) {
    return q_mat_bytes(g->dt, shape[0], ndim == 1 ? 1 : shape[1], g->group, g->sdt);
}


sl_dtype pack_target_dtype(sl_quant q, sl_dtype src, int matrix) {
    switch (q) {
    case SL_QUANT_F32: return DT_F32;
    case SL_QUANT_BF16: return matrix ? DT_BF16 : DT_F32;
    default: return src == DT_F8E4M3 ? DT_F32 : src;
    }
}

typedef struct {
    int fd;
    const char *path;
    const pack_io *io;
    const sl_pack_params *p;
    uint64_t done, total;
} writer;

static sl_status wr(writer *w, const void *buf, size_t n, uint64_t off, sl_error *err) {
    const char *b = buf;
    while (n > 0) {
        ssize_t r = w->io && w->io->pwrite ? w->io->pwrite(w->io->ctx, w->fd, b, n, (off_t)off)
                                           : pwrite(w->fd, b, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            return sl_err(err, sl_status_from_errno(e), "%s: write of %zu bytes at offset %llu failed: %s", w->path,
                          n, (unsigned long long)off, strerror(e));
        }
        if (r == 0) return sl_err(err, SL_EIO, "%s: write made no progress", w->path);
        b += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return SL_OK;
}

static sl_status progress(writer *w, uint64_t add, sl_error *err) {
    w->done += add;
    if (w->p->progress && w->p->progress(w->p->progress_user, w->done, w->total))
        return sl_err(err, SL_ECANCELED, "pack canceled");
    return SL_OK;
}

static void add_hash(cJSON *o, uint64_t h) {
    char hex[17];
    slc_hash_hex(h, hex);
    cJSON_AddStringToObject(o, "xxh3", hex);
}

static sl_status hash_file(const char *path, uint64_t *out, sl_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sl_err(err, sl_status_from_errno(errno), "%s: cannot open: %s", path, strerror(errno));
    XXH3_state_t *s = XXH3_createState();
    size_t cap = 8u << 20;
    char *buf = malloc(cap);
    sl_status st = SL_OK;
    if (!s || !buf) { st = sl_err(err, SL_ENOMEM, "out of memory"); goto out; }
    XXH3_64bits_reset(s);
    for (;;) {
        ssize_t r = read(fd, buf, cap);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { st = sl_err(err, SL_EIO, "%s: read failed: %s", path, strerror(errno)); goto out; }
        if (r == 0) break;
        XXH3_64bits_update(s, buf, (size_t)r);
    }
    *out = XXH3_64bits_digest(s);
out:
    free(buf);
    if (s) XXH3_freeState(s);
    close(fd);
    return st;
}

sl_status pack_run(const char *src_dir, const char *out_path, const sl_pack_params *params, const pack_io *io,
                   sl_error *err) {
    sl_pack_params defp = sl_pack_params_default();
    const sl_pack_params *p = params ? params : &defp;
    hf_ckpt *ck = NULL;
    arch_tensor *at = NULL;
    cJSON *man = NULL;
    char *tmp = NULL, *mtxt = NULL;
    uint8_t *buf = NULL, *hdr = NULL;
    uint64_t *ehash = NULL;
    int fd = -1, n_at = 0;
    sl_status st;
    if (p->quant < SL_QUANT_KEEP || p->quant > SL_QUANT_Q3)
        return sl_err(err, SL_EINVAL, "unknown quantization mode %d", (int)p->quant);
    const sl_quant roles[3] = {p->quant_experts, p->quant_backbone, p->quant_router};
    for (int i = 0; i < 3; i++)
        if (roles[i] < SL_QUANT_SAME || roles[i] > SL_QUANT_Q3)
            return sl_err(err, SL_EINVAL, "unknown quantization mode %d", (int)roles[i]);
    if (p->group != 32 && p->group != 64 && p->group != 128)
        return sl_err(err, SL_EINVAL, "quantization group size %d is not 32, 64 or 128", p->group);
    if ((st = hf_open(src_dir, &ck, err))) return st;
    const sl_config *c = hf_config(ck);
    if ((n_at = arch_backbone_tensors(c, &at)) < 0) { st = sl_err(err, SL_ENOMEM, "out of memory"); goto fail; }

    /* ---- plan ---- */
    man = cJSON_CreateObject();
    cJSON_AddNumberToObject(man, "format_version", SLC_VERSION);
    cJSON_AddStringToObject(man, "sluice_version", SL_VERSION_STRING);
    cJSON_AddItemToObject(man, "config", slc_config_to_json(c));
    cJSON *tt = cJSON_AddArrayToObject(man, "tensors");
    slc_header h;
    memset(&h, 0, sizeof h);
    h.version = SLC_VERSION;
    h.backbone_off = SLC_HEADER_BYTES;
    uint64_t off = h.backbone_off, max_tensor = 0;
    pack_tgt *tdt = calloc((size_t)n_at + 1, sizeof *tdt);
    uint64_t *toff = calloc((size_t)n_at + 1, sizeof *toff);
    if (!man || !tt || !tdt || !toff) { free(tdt); free(toff); st = sl_err(err, SL_ENOMEM, "out of memory"); goto fail; }
    for (int i = 0; i < n_at; i++) {
        const hf_tensor *t = hf_find(ck, at[i].name);
        tdt[i] = target_for(p, t, at[i].name, at[i].matrix, at[i].router);
        uint64_t bytes = tgt_bytes(&tdt[i], at[i].ndim, at[i].shape);
        off = slc_round_up(off, SLC_TENSOR_ALIGN);
        toff[i] = off;
        off += bytes;
        if (bytes > max_tensor) max_tensor = bytes;
    }
    h.backbone_len = off - h.backbone_off;
    int n_moe = cfg_n_moe_layers(c), E = c->n_experts;
    pack_tgt edt[ARCH_MAX_PARTS];
    uint64_t poff[ARCH_MAX_PARTS], psz[ARCH_MAX_PARTS], block = 0;
    const int n_parts = arch_n_parts(c);
    for (int part = 0; part < n_parts; part++) {
        const hf_tensor *first = NULL;
        int mixed = 0;
        for (int l = 0; l < c->n_layers; l++) {
            if (!c->layer_moe[l]) continue;
            for (int e = 0; e < E; e++) {
                char nm[96];
                snprintf(nm, sizeof nm, "layers.%d.mlp.experts.%d.%s", l, e, arch_expert_part_name(c, part));
                const hf_tensor *t = hf_find(ck, nm);
                if (!first) first = t;
                else if (t->src_dtype != first->src_dtype || t->q_group != first->q_group ||
                         t->q_sdtype != first->q_sdtype) mixed = 1;
            }
        }
        char pn[64];
        snprintf(pn, sizeof pn, "experts.%s", arch_expert_part_name(c, part));
        if (first && mixed && q_is_quant(first->src_dtype)) {
            st = sl_err(err, SL_EUNSUPPORTED, "%s: routed experts' %s mix quantization settings across layers; "
                        "an expert block needs one layout", src_dir, arch_expert_part_name(c, part));
            free(tdt); free(toff);
            goto fail;
        }
        if (first) edt[part] = target_for(p, first, pn, 1, 2);
        else edt[part] = (pack_tgt){DT_F32, 0, DT_NONE, 0};
        if (mixed && !q_is_quant(edt[part].dt)) edt[part].dt = DT_F32;
        if (arch_expert_part_is_vec(c, part)) edt[part] = (pack_tgt){DT_F32, 0, DT_NONE, 0}; /* biases: f32, bound as is */
        int64_t sh[2];
        arch_expert_shape(c, part, sh);
        block = slc_round_up(block, SLC_TENSOR_ALIGN);
        poff[part] = block;
        psz[part] = tgt_bytes(&edt[part], 2, sh);
        block += psz[part];
    }
    h.n_moe_layers = (uint32_t)n_moe;
    h.n_experts = (uint32_t)E;
    h.expert_stride = slc_round_up(block, SLC_ALIGN);
    h.expert_off = slc_round_up(off, SLC_ALIGN);
    h.expert_len = (uint64_t)n_moe * (uint64_t)E * h.expert_stride;
    h.hash_off = h.expert_off + h.expert_len;
    h.hash_len = (uint64_t)n_moe * (uint64_t)E * 8;
    h.blob_off = h.hash_off + h.hash_len;

    /* ---- write ---- */
    size_t tl = strlen(out_path) + 32;
    tmp = malloc(tl);
    if (!tmp) { free(tdt); free(toff); st = sl_err(err, SL_ENOMEM, "out of memory"); goto fail; }
    snprintf(tmp, tl, "%s.tmp.%ld", out_path, (long)getpid());
    fd = open(tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(tdt); free(toff);
        st = sl_err(err, sl_status_from_errno(errno), "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        tmp = NULL;
        goto fail;
    }
    writer w = {fd, tmp, io, p, 0, h.backbone_len + h.expert_len};
    size_t bufsz = (size_t)(max_tensor > h.expert_stride ? max_tensor : h.expert_stride);
    buf = aligned_alloc(SLC_ALIGN, slc_round_up(bufsz, SLC_ALIGN));
    if (!buf) { free(tdt); free(toff); st = sl_err(err, SL_ENOMEM, "out of memory (%zu-byte buffer)", bufsz); goto fail; }
    for (int i = 0; i < n_at && !st; i++) {
        const hf_tensor *t = hf_find(ck, at[i].name);
        uint64_t bytes = tgt_bytes(&tdt[i], at[i].ndim, at[i].shape);
        if ((st = pack_derive(ck, t, &tdt[i], buf, err))) break;
        uint64_t hsh = XXH3_64bits(buf, bytes);
        if ((st = wr(&w, buf, bytes, toff[i], err))) break;
        slc_tensor te = {at[i].name, tdt[i].dt, at[i].ndim, {at[i].shape[0], at[i].shape[1]}, toff[i], bytes, hsh,
                         tdt[i].group, tdt[i].sdt, tdt[i].seed};
        cJSON_AddItemToArray(tt, slc_tensor_to_json(&te));
        st = progress(&w, bytes, err);
    }
    free(tdt);
    free(toff);
    if (st) goto fail;
    ehash = calloc((size_t)n_moe * (size_t)E + 1, 8);
    if (!ehash) { st = sl_err(err, SL_ENOMEM, "out of memory"); goto fail; }
    for (int l = 0, s = 0; l < c->n_layers; l++) {
        if (!c->layer_moe[l]) continue;
        for (int e = 0; e < E; e++) {
            memset(buf, 0, h.expert_stride);
            for (int part = 0; part < n_parts; part++) {
                char nm[96];
                snprintf(nm, sizeof nm, "layers.%d.mlp.experts.%d.%s", l, e, arch_expert_part_name(c, part));
                if ((st = pack_derive(ck, hf_find(ck, nm), &edt[part], buf + poff[part], err))) goto fail;
            }
            uint64_t hsh = XXH3_64bits(buf, block);
            uint8_t *hp = (uint8_t *)&ehash[(size_t)s * E + e];
            for (int k = 0; k < 8; k++) hp[k] = (uint8_t)(hsh >> (8 * k));
            if ((st = wr(&w, buf, h.expert_stride, h.expert_off + ((uint64_t)s * E + e) * h.expert_stride, err))) goto fail;
            if ((st = progress(&w, h.expert_stride, err))) goto fail;
        }
        s++;
    }
    if (h.hash_len && (st = wr(&w, ehash, h.hash_len, h.hash_off, err))) goto fail;
    slc_part parts[ARCH_MAX_PARTS];
    for (int part = 0; part < n_parts; part++) {
        int64_t sh[2];
        arch_expert_shape(c, part, sh);
        parts[part] = (slc_part){edt[part].dt, {sh[0], sh[1]}, poff[part], psz[part], edt[part].group, edt[part].sdt,
                                 edt[part].seed};
    }
    cJSON_AddItemToObject(man, "experts", slc_experts_to_json(&h, c, block, parts));
    /* blobs */
    cJSON *bl = cJSON_AddArrayToObject(man, "blobs");
    uint64_t boff = h.blob_off;
    for (int i = 0; pack_blob_names[i]; i++) {
        char *data = NULL;
        size_t len = 0;
        if ((st = hf_blob(ck, pack_blob_names[i], &data, &len, err))) goto fail;
        if (!data) continue;
        st = wr(&w, data, len, boff, err);
        if (!st) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddItemToArray(bl, o);
            cJSON_AddStringToObject(o, "name", pack_blob_names[i]);
            cJSON_AddNumberToObject(o, "offset", (double)boff);
            cJSON_AddNumberToObject(o, "size", (double)len);
            add_hash(o, XXH3_64bits(data, len));
        }
        free(data);
        if (st) goto fail;
        boff += len;
    }
    h.blob_len = boff - h.blob_off;
    /* sources and options */
    cJSON *src = cJSON_AddObjectToObject(man, "source");
    cJSON_AddStringToObject(src, "dir", src_dir);
    cJSON *fl = cJSON_AddArrayToObject(src, "files");
    for (int i = 0; i < hf_n_files(ck); i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(fl, o);
        cJSON_AddStringToObject(o, "name", hf_file_name(ck, i));
        cJSON_AddNumberToObject(o, "size", (double)hf_file_size(ck, i));
        if (p->hash_sources) {
            uint64_t fh = 0;
            if ((st = hash_file(hf_file_path(ck, i), &fh, err))) goto fail;
            add_hash(o, fh);
        }
    }
    cJSON *po = cJSON_AddObjectToObject(man, "pack");
    cJSON_AddStringToObject(po, "quant", quant_name(p->quant));
    if (quant_dtype(p->quant) || quant_dtype(role_mode(p, 0)) || quant_dtype(role_mode(p, 1)) ||
        quant_dtype(role_mode(p, 2))) {
        cJSON_AddNumberToObject(po, "group", p->group);
        cJSON_AddStringToObject(po, "scale_dtype", p->scale_f16 ? "f16" : "bf16");
        cJSON_AddStringToObject(po, "backbone", quant_name(role_mode(p, 0)));
        cJSON_AddStringToObject(po, "router", quant_name(role_mode(p, 1)));
        cJSON_AddStringToObject(po, "experts", quant_name(role_mode(p, 2)));
    }
    mtxt = cJSON_PrintUnformatted(man);
    if (!mtxt) { st = sl_err(err, SL_ENOMEM, "out of memory"); goto fail; }
    h.manifest_off = slc_round_up(boff, 8);
    h.manifest_len = strlen(mtxt);
    h.manifest_hash = XXH3_64bits(mtxt, h.manifest_len);
    if ((st = wr(&w, mtxt, h.manifest_len, h.manifest_off, err))) goto fail;
    h.file_size = h.manifest_off + h.manifest_len;
    hdr = malloc(SLC_HEADER_BYTES);
    if (!hdr) { st = sl_err(err, SL_ENOMEM, "out of memory"); goto fail; }
    slc_header_encode(&h, hdr);
    if ((st = wr(&w, hdr, SLC_HEADER_BYTES, 0, err))) goto fail;
    st = fio_commit(fd, h.file_size, tmp, out_path, err);
    fd = -1;
    if (st) goto fail;
    goto done;
fail:
    if (fd >= 0) close(fd);
    if (tmp) unlink(tmp);
done:
    free(tmp);
    free(mtxt);
    free(buf);
    free(hdr);
    free(ehash);
    free(at);
    cJSON_Delete(man);
    hf_close(ck);
    return st;
}

sl_status sl_pack(const char *src_dir, const char *out_path, const sl_pack_params *params, sl_error *err) {
    return pack_run(src_dir, out_path, params, NULL, err);
}
