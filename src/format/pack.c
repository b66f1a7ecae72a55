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
#include <xxhash.h>

#include "format/container.h"
#include "import/hf.h"
#include "model/tensors.h"
#include "util/err.h"
#include "util/fileio.h"

const char *const pack_blob_names[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                       "generation_config.json", "special_tokens_map.json", "chat_template.jinja",
                                       "chat_template.json", NULL};

sl_pack_params sl_pack_params_default(void) {
    sl_pack_params p;
    memset(&p, 0, sizeof p);
    p.quant = SL_QUANT_KEEP;
    p.hash_sources = 1;
    return p;
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

static void add_shape(cJSON *o, int ndim, const int64_t *s) {
    cJSON *a = cJSON_AddArrayToObject(o, "shape");
    for (int i = 0; i < ndim; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)s[i]));
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
    if (p->quant != SL_QUANT_KEEP && p->quant != SL_QUANT_F32 && p->quant != SL_QUANT_BF16)
        return sl_err(err, SL_EINVAL, "unknown quantization mode %d", (int)p->quant);
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
    sl_dtype *tdt = calloc((size_t)n_at + 1, sizeof *tdt);
    uint64_t *toff = calloc((size_t)n_at + 1, sizeof *toff);
    if (!man || !tt || !tdt || !toff) { free(tdt); free(toff); st = sl_err(err, SL_ENOMEM, "out of memory"); goto fail; }
    for (int i = 0; i < n_at; i++) {
        const hf_tensor *t = hf_find(ck, at[i].name);
        tdt[i] = pack_target_dtype(p->quant, t->src_dtype, at[i].matrix);
        uint64_t bytes = (at[i].ndim == 1 ? (uint64_t)at[i].shape[0] : (uint64_t)(at[i].shape[0] * at[i].shape[1])) * dt_size(tdt[i]);
        off = slc_round_up(off, SLC_TENSOR_ALIGN);
        toff[i] = off;
        off += bytes;
        if (bytes > max_tensor) max_tensor = bytes;
    }
    h.backbone_len = off - h.backbone_off;
    int n_moe = cfg_n_moe_layers(c), E = c->n_experts;
    sl_dtype edt[3];
    uint64_t poff[3], psz[3], block = 0;
    for (int part = 0; part < 3; part++) {
        sl_dtype src = DT_NONE;
        int mixed = 0;
        for (int l = 0; l < c->n_layers; l++) {
            if (!c->layer_moe[l]) continue;
            for (int e = 0; e < E; e++) {
                char nm[96];
                snprintf(nm, sizeof nm, "layers.%d.mlp.experts.%d.%s", l, e, arch_expert_part_names[part]);
                sl_dtype d = hf_find(ck, nm)->src_dtype;
                if (src == DT_NONE) src = d;
                else if (d != src) mixed = 1;
            }
        }
        edt[part] = mixed ? DT_F32 : pack_target_dtype(p->quant, src, 1);
        int64_t sh[2];
        arch_expert_shape(c, part, sh);
        block = slc_round_up(block, SLC_TENSOR_ALIGN);
        poff[part] = block;
        psz[part] = (uint64_t)(sh[0] * sh[1]) * dt_size(edt[part]);
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
        uint64_t bytes = (at[i].ndim == 1 ? (uint64_t)at[i].shape[0] : (uint64_t)(at[i].shape[0] * at[i].shape[1])) * dt_size(tdt[i]);
        if ((st = hf_read(ck, t, tdt[i], buf, err))) break;
        uint64_t hsh = XXH3_64bits(buf, bytes);
        if ((st = wr(&w, buf, bytes, toff[i], err))) break;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(tt, o);
        cJSON_AddStringToObject(o, "name", at[i].name);
        cJSON_AddStringToObject(o, "dtype", dt_name(tdt[i]));
        add_shape(o, at[i].ndim, at[i].shape);
        cJSON_AddNumberToObject(o, "offset", (double)toff[i]);
        cJSON_AddNumberToObject(o, "size", (double)bytes);
        add_hash(o, hsh);
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
            for (int part = 0; part < 3; part++) {
                char nm[96];
                snprintf(nm, sizeof nm, "layers.%d.mlp.experts.%d.%s", l, e, arch_expert_part_names[part]);
                if ((st = hf_read(ck, hf_find(ck, nm), edt[part], buf + poff[part], err))) goto fail;
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
    cJSON *ex = cJSON_AddObjectToObject(man, "experts");
    cJSON_AddNumberToObject(ex, "n_experts", E);
    cJSON_AddNumberToObject(ex, "offset", (double)h.expert_off);
    cJSON_AddNumberToObject(ex, "stride", (double)h.expert_stride);
    cJSON_AddNumberToObject(ex, "block_bytes", (double)block);
    cJSON_AddNumberToObject(ex, "hash_table_offset", (double)h.hash_off);
    cJSON *ly = cJSON_AddArrayToObject(ex, "layers");
    for (int l = 0; l < c->n_layers; l++)
        if (c->layer_moe[l]) cJSON_AddItemToArray(ly, cJSON_CreateNumber(l));
    cJSON *pa = cJSON_AddArrayToObject(ex, "parts");
    for (int part = 0; part < 3; part++) {
        cJSON *o = cJSON_CreateObject();
        int64_t sh[2];
        arch_expert_shape(c, part, sh);
        cJSON_AddItemToArray(pa, o);
        cJSON_AddStringToObject(o, "name", arch_expert_part_names[part]);
        cJSON_AddStringToObject(o, "dtype", dt_name(edt[part]));
        add_shape(o, 2, sh);
        cJSON_AddNumberToObject(o, "offset", (double)poff[part]);
        cJSON_AddNumberToObject(o, "size", (double)psz[part]);
    }
    /* blobs */
    cJSON *bl = cJSON_AddArrayToObject(man, "blobs");
    uint64_t boff = h.blob_off;
    for (int i = 0; pack_blob_names[i]; i++) {
        char *bp = fio_join(src_dir, pack_blob_names[i]), *data = NULL;
        size_t len = 0;
        if (!bp) { st = sl_err(err, SL_ENOMEM, "out of memory"); goto fail; }
        if (access(bp, F_OK) != 0) { free(bp); continue; }
        st = fio_read_file(bp, &data, &len, err);
        free(bp);
        if (st) goto fail;
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
    cJSON_AddStringToObject(po, "quant", p->quant == SL_QUANT_F32 ? "f32" : p->quant == SL_QUANT_BF16 ? "bf16" : "keep");
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
    if (ftruncate(fd, (off_t)h.file_size) != 0 || fsync(fd) != 0) {
        st = sl_err(err, sl_status_from_errno(errno), "%s: cannot finish the file: %s", tmp, strerror(errno));
        goto fail;
    }
    if (close(fd) != 0) {
        fd = -1;
        st = sl_err(err, sl_status_from_errno(errno), "%s: close failed: %s", tmp, strerror(errno));
        goto fail;
    }
    fd = -1;
    if (rename(tmp, out_path) != 0) {
        st = sl_err(err, sl_status_from_errno(errno), "%s: cannot rename to %s: %s", tmp, out_path, strerror(errno));
        goto fail;
    }
    st = SL_OK;
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
