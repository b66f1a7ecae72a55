/*
 * verify.c — sl_verify (every checksum; optionally byte-for-byte against the source checkpoint) and
 * sl_info_json (a description of a container for `sluice info`).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family/tensors.h"
#include "format/container.h"
#include "format/pack.h"
#include "import/hf.h"
#include "util/err.h"
#include "util/fileio.h"
#include "util/xxh3.h"

static sl_status check_source(slc_file *f, hf_ckpt *ck, const char *name, const pack_tgt *tgt, const void *have,
                              uint64_t bytes, void *scratch, uint64_t file_off, sl_error *err) {
    const hf_tensor *t = hf_find(ck, name);
    if (!t) return err_set(err, SL_EMISMATCH, "%s: tensor '%s' is not in the source checkpoint", f->path, name);
    sl_status st = pack_derive(ck, t, tgt, scratch, err); /* quantized the way pack does: deterministic */
    if (st) return st;
    if (memcmp(scratch, have, bytes)) {
        const uint8_t *a = have, *b = scratch;
        uint64_t i = 0;
        while (a[i] == b[i]) i++;
        return err_set(err, SL_EMISMATCH, "%s: tensor '%s' differs from the source at file offset %llu", f->path, name,
                      (unsigned long long)(file_off + i));
    }
    return SL_OK;
}

sl_status sl_verify(const char *path, const char *source_dir, sl_progress_fn progress, void *user, sl_error *err) {
    slc_file f;
    hf_ckpt *ck = NULL;
    uint8_t *buf = NULL, *scratch = NULL;
    sl_status st = slc_open(path, &f, err);
    if (st) return st;
    if (source_dir) {
        if (cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f.manifest, "pack"), "imatrix")) {
            st = err_set(err, SL_EUNSUPPORTED, "%s was packed with an importance matrix (pack.imatrix): its quantized "
                        "tensors cannot be re-derived from the source alone; verify without --source checks its "
                        "checksums", path);
            goto out;
        }
        if ((st = hf_open(source_dir, &ck, err))) goto out;
        const fam_config *a = hf_config(ck), *b = &f.cfg;
        if (a->arch != b->arch || a->n_layers != b->n_layers || a->hidden != b->hidden || a->n_experts != b->n_experts) {
            st = err_set(err, SL_EMISMATCH, "%s: the source %s describes a different model", path, source_dir);
            goto out;
        }
    }
    uint64_t maxb = f.h.expert_stride;
    for (int i = 0; i < f.n_tensors; i++)
        if (f.t[i].size > maxb) maxb = f.t[i].size;
    buf = malloc(maxb + 1);
    scratch = malloc(maxb + 1);
    if (!buf || !scratch) { st = err_set(err, SL_ENOMEM, "out of memory"); goto out; }
    uint64_t total = f.h.backbone_len + f.h.expert_len, done = 0;
    for (int i = 0; i < f.n_tensors; i++) {
        slc_tensor *t = &f.t[i];
        if ((st = fio_pread_all(f.fd, buf, t->size, t->off, path, err))) goto out;
        if (XXH3_64bits(buf, t->size) != t->hash) {
            st = err_set(err, SL_ECHECKSUM, "%s: backbone tensor '%s' fails its checksum (file offset %llu, %llu bytes)",
                        path, t->name, (unsigned long long)t->off, (unsigned long long)t->size);
            goto out;
        }
        pack_tgt tg = {t->dtype, t->group, t->sdtype, t->seed, t->act};
        if (ck && (st = check_source(&f, ck, t->name, &tg, buf, t->size, scratch, t->off, err))) goto out;
        done += t->size;
        if (progress && progress(user, done, total)) { st = err_set(err, SL_ECANCELED, "verify canceled"); goto out; }
    }
    for (uint32_t s = 0; s < f.h.n_moe_layers; s++) {
        int layer = f.moe_layers[s];
        for (uint32_t e = 0; e < f.h.n_experts; e++) {
            const uint64_t off = slc_expert_offset(&f, (int)s, (int)e), bb = slc_block_bytes(&f, (int)s);
            const slc_part *parts = slc_parts(&f, (int)s);
            if ((st = fio_pread_all(f.fd, buf, bb, off, path, err))) goto out;
            if (XXH3_64bits(buf, bb) != f.expert_hash[(size_t)s * f.h.n_experts + e]) {
                st = err_set(err, SL_ECHECKSUM, "%s: expert block (layer %d, expert %u) fails its checksum (file offset "
                            "%llu, %llu bytes)", path, layer, e, (unsigned long long)off, (unsigned long long)bb);
                goto out;
            }
            for (int p = 0; ck && p < f.n_parts; p++) {
                char nm[96];
                snprintf(nm, sizeof nm, "layers.%d.mlp.experts.%u.%s", layer, e, arch_expert_part_name(&f.cfg, p));
                pack_tgt tg = {parts[p].dtype, parts[p].group, parts[p].sdtype, parts[p].seed, parts[p].act};
                if ((st = check_source(&f, ck, nm, &tg, buf + parts[p].off, parts[p].size, scratch, off + parts[p].off,
                                       err))) {
                    err_prefix(err, "expert block (layer %d, expert %u)", layer, e);
                    goto out;
                }
            }
            done += slc_slot_stride(&f, (int)s);
            if (progress && progress(user, done, total)) { st = err_set(err, SL_ECANCELED, "verify canceled"); goto out; }
        }
    }
    for (int i = 0; i < f.n_blobs; i++) {
        char *data = NULL;
        st = slc_read_blob(&f, &f.blobs[i], &data, err);
        free(data);
        if (st) goto out;
    }
out:
    free(buf);
    free(scratch);
    hf_close(ck);
    slc_close(&f);
    return st;
}

sl_status sl_info_json(const char *path, char **out_json, sl_error *err) {
    slc_file f;
    sl_status st = slc_open(path, &f, err);
    if (st) return st;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "path", path);
    cJSON_AddNumberToObject(j, "format_version", f.h.version);
    cJSON_AddStringToObject(j, "arch", cfg_arch_name(f.cfg.arch));
    cJSON_AddItemReferenceToObject(j, "config", cJSON_GetObjectItemCaseSensitive(f.manifest, "config"));
    cJSON *ex = cJSON_AddObjectToObject(j, "experts");
    cJSON_AddNumberToObject(ex, "moe_layers", f.h.n_moe_layers);
    cJSON_AddNumberToObject(ex, "experts_per_layer", f.h.n_experts);
    cJSON_AddNumberToObject(ex, "stride", (double)f.h.expert_stride);
    cJSON_AddNumberToObject(ex, "block_bytes", (double)f.block_bytes);
    cJSON_AddStringToObject(ex, "dtype", dt_name(f.parts[0].dtype));
    cJSON *pd = cJSON_AddObjectToObject(ex, "part_dtypes"); /* each part's dtypes over the MoE layers, in slot order */
    for (int p = 0; p < f.n_parts; p++) {
        cJSON *a = cJSON_AddArrayToObject(pd, arch_expert_part_name(&f.cfg, p));
        for (uint32_t s = 0; s < (f.slots ? f.h.n_moe_layers : 1); s++)
            cJSON_AddItemToArray(a, cJSON_CreateString(dt_name(slc_parts(&f, (int)s)[p].dtype)));
    }
    cJSON_AddNumberToObject(j, "file_bytes", (double)f.h.file_size);
    cJSON_AddNumberToObject(j, "backbone_bytes", (double)f.h.backbone_len);
    cJSON_AddNumberToObject(j, "expert_bytes", (double)f.h.expert_len);
    cJSON_AddNumberToObject(j, "tensors", f.n_tensors);
    /* backbone bytes per dtype */
    cJSON *bd = cJSON_AddObjectToObject(j, "backbone_dtypes");
    for (int d = DT_F32; d < DT_COUNT; d++) {
        uint64_t b = 0;
        for (int i = 0; i < f.n_tensors; i++) b += (int)f.t[i].dtype == d ? f.t[i].size : 0;
        if (b) cJSON_AddNumberToObject(bd, dt_name((dt_type)d), (double)b);
    }
    cJSON_AddItemReferenceToObject(j, "pack", cJSON_GetObjectItemCaseSensitive(f.manifest, "pack"));
    cJSON_AddItemReferenceToObject(j, "source", cJSON_GetObjectItemCaseSensitive(f.manifest, "source"));
    cJSON *bl = cJSON_AddArrayToObject(j, "embedded_files");
    for (int i = 0; i < f.n_blobs; i++) cJSON_AddItemToArray(bl, cJSON_CreateString(f.blobs[i].name));
    *out_json = cJSON_Print(j);
    cJSON_Delete(j);
    slc_close(&f);
    return *out_json ? SL_OK : err_set(err, SL_ENOMEM, "out of memory");
}
