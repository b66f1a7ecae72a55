/*
 * backbone.c — a model's backbone: the section read into RAM (on 2 MiB pages), every tensor's checksum checked,
 * each tensor of the family table bound to its fam_weights field (matrices stay in their stored dtype and point
 * into the buffer; vectors become f32), and for a backend whose memory is not the host's the section moved
 * there in one copy. See handles.h.
 */
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "engine/handles.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/fileio.h"
#include "util/xxh3.h"

/* n bytes (freed with free()) on 2 MiB boundaries, asked to be backed by 2 MiB pages (transparent huge pages,
 * madvise mode; handles.h): the resident weights are streamed whole every token, and with 4 KiB pages that is a TLB miss
 * every 4 KiB of every row stream. A hint only: without huge pages the memory works the same. NULL: no memory. */
void *engine_huge_alloc(uint64_t n) {
    const uint64_t huge = (uint64_t)2 << 20, len = slc_round_up(n, huge);
    void *p = aligned_alloc((size_t)huge, (size_t)len);
    if (p) (void)madvise(p, (size_t)len, MADV_HUGEPAGE);
    return p;
}

/* Binds one backbone tensor of the family table (family/tensors.h) to its fam_weights field. */
static sl_status bind_one(sl_model *m, const arch_tensor *at, sl_error *err) {
    const slc_tensor *t = slc_find(&m->f, at->name);
    if (!t) return err_set(err, SL_EFORMAT, "%s: tensor '%s' is missing from the container", m->f.path, at->name);
    if (t->ndim != at->ndim || t->shape[0] != at->shape[0] || (at->ndim == 2 && t->shape[1] != at->shape[1]))
        return err_set(err, SL_EFORMAT, "%s: tensor '%s' has shape [%lld,%lld] but the config implies [%lld,%lld]",
                      m->f.path, at->name, (long long)t->shape[0], (long long)t->shape[1], (long long)at->shape[0],
                      (long long)at->shape[1]);
    const uint8_t *data = m->backbone + (t->off - m->f.h.backbone_off);
    if (at->layer >= m->cfg.n_layers) return err_set(err, SL_EFORMAT, "%s: unexpected tensor '%s'", m->f.path, at->name);
    void *dst = at->layer >= 0 ? (char *)&m->w.layers[at->layer] + at->field : (char *)&m->w + at->field;
    int vec = !at->matrix;
    if (vec && q_is_quant(t->dtype))
        return err_set(err, SL_EFORMAT, "%s: tensor '%s' is a vector but has quantized dtype %s", m->f.path, at->name,
                      dt_name(t->dtype));
    if (vec) {
        size_t n = (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
        float *v = malloc(n * sizeof(float));
        if (!v) return err_set(err, SL_ENOMEM, "out of memory");
        dt_to_f32(t->dtype, data, v, n);
        if (!m->be->is_host) { /* the vector lives in the backend's memory (the CUDA backend: VRAM) */
            float *dv = m->be->alloc(m->be, n * sizeof(float), BE_BUF_DEVICE);
            if (dv) m->be->copy(m->be, dv, v, n * sizeof(float), BE_H2D);
            free(v);
            if (!dv) return err_set(err, SL_ENOMEM, "out of %s backend memory for tensor '%s'", m->be->name, at->name);
            v = dv;
            m->vec_bytes[m->n_vecs] = n * sizeof(float);
        }
        m->vecs[m->n_vecs++] = v;
        *(float **)dst = v;
    } else {
        q_mat_bind(dst, data, t->dtype, (int)t->shape[0], (int)t->shape[1], t->group, t->sdtype, t->seed);
        ((tn_mat *)dst)->bias_implied = q_biases_implied(dst);
        ((tn_mat *)dst)->act = t->act;
    }
    return SL_OK;
}

/* Qwen3-Next's in_proj_qkvz (the field qkvz), each row moved in place (the buffer is ours) from the stored order,
 * grouped per key head, to q | k | v | z (model/deltanet.c fwd_qkvz_row), so a layer's matmul writes the conv input
 * and z where the DeltaNet ops read them instead of a copy per key head and part. A row permutation changes no
 * row's value: the kernels compute each output row on its own, in an order set by the columns alone (kernels.h,
 * cuda.h), and every stored layout keeps a row's bytes apart from the others' in each of its sections (quant/quant.h:
 * the codes or blocks, then the scales, then the biases, [rows][...] each). Where a matrix's sections are not that,
 * it stays grouped (qkvz_flat 0; the forward pass then copies per key head as before), as every one does with
 * SLUICE_QKVZ_GROUPED=1 (tests: the old path, bitwise the new). SL_OK, or SL_ENOMEM. */
static sl_status flatten_qkvz(sl_model *m, const arch_tensor *at, int n, sl_error *err) {
    const char *env = getenv("SLUICE_QKVZ_GROUPED");
    if (env && *env && *env != '0') return SL_OK;
    uint8_t *tmp = NULL;
    size_t cap = 0;
    for (int i = 0; i < n; i++) {
        if (!at[i].matrix || at[i].layer < 0 || at[i].layer >= m->cfg.n_layers || at[i].field != offsetof(fam_layer_w, qkvz))
            continue;
        fam_layer_w *lw = &m->w.layers[at[i].layer];
        tn_mat *w = &lw->qkvz;
        const size_t rows = (size_t)w->rows, code = q_row_code_bytes(w->dtype, w->cols);
        const uint64_t all = q_mat_bytes(w->dtype, w->rows, w->cols, w->group, w->sdtype);
        const int scaled = w->scales && w->scales != w->data, two = scaled && w->biases;
        const uint64_t rest = all - (uint64_t)rows * code, per = rows ? rest / rows / (two ? 2 : 1) : 0;
        uint8_t *base = (uint8_t *)w->data;
        /* the sections: codes [rows][code], then (scaled) scales and (two) biases [rows][per] */
        const size_t sec_b[3] = {code, scaled ? (size_t)per : 0, two ? (size_t)per : 0};
        int ok = rows > 0 && code > 0 && all >= (uint64_t)rows * code && (!scaled || per * rows * (two ? 2 : 1) == rest) &&
                 (scaled || rest == 0) && (!scaled || (const uint8_t *)w->scales == base + rows * code) &&
                 (!two || (const uint8_t *)w->biases == base + rows * code + rows * per) && (two || !w->biases);
        for (size_t f = 0; ok && f < rows; f++) ok = fwd_qkvz_row(&m->cfg, (int64_t)rows, (int64_t)f) >= 0;
        if (!ok) continue;
        if (all > cap) {
            free(tmp);
            if (!(tmp = malloc((size_t)all))) return err_set(err, SL_ENOMEM, "out of memory regrouping '%s'", at[i].name);
            cap = (size_t)all;
        }
        memcpy(tmp, base, (size_t)all);
        size_t off = 0;
        for (int s = 0; s < 3; s++) {
            for (size_t f = 0; sec_b[s] && f < rows; f++)
                memcpy(base + off + f * sec_b[s], tmp + off + (size_t)fwd_qkvz_row(&m->cfg, (int64_t)rows, (int64_t)f) * sec_b[s],
                       sec_b[s]);
            off += rows * sec_b[s];
        }
        lw->qkvz_flat = 1;
    }
    free(tmp);
    return SL_OK;
}

/* p moved from the host range [from, from + len) to the same offset of to. */
static void rebase(const void **p, const uint8_t *from, uint64_t len, uint8_t *to) {
    const uint8_t *q = *p;
    if (q && q >= from && q < from + len) *p = to + (q - from);
}

/* A backend whose memory is not the host's (CUDA): the backbone section goes there in one copy and every
 * matrix of the family table is pointed at it; the host copy is freed. */
static sl_status upload_backbone(sl_model *m, const arch_tensor *at, int n, sl_error *err) {
    be_backend *be = m->be;
    const uint64_t len = m->f.h.backbone_len;
    m->backbone_dev = be->alloc(be, len + 1, BE_BUF_DEVICE);
    if (!m->backbone_dev)
        return err_set(err, SL_ENOMEM, "%s: out of %s backend memory for %llu backbone bytes", m->f.path, be->name,
                      (unsigned long long)len);
    be->copy(be, m->backbone_dev, m->backbone, len, BE_H2D);
    sl_status st = be_sync(be, err);
    if (st) return st;
    for (int i = 0; i < n; i++) {
        if (!at[i].matrix || at[i].layer >= m->cfg.n_layers) continue;
        tn_mat *mm = (tn_mat *)(at[i].layer >= 0 ? (char *)&m->w.layers[at[i].layer] + at[i].field
                                                 : (char *)&m->w + at[i].field);
        rebase(&mm->data, m->backbone, len, m->backbone_dev);
        rebase(&mm->scales, m->backbone, len, m->backbone_dev);
        rebase(&mm->biases, m->backbone, len, m->backbone_dev);
    }
    free(m->backbone);
    m->backbone = NULL;
    return SL_OK;
}

sl_status engine_load_backbone(sl_model *m, const char *path, const arch_tensor *at, int n, sl_error *err) {
    m->vecs = calloc(n > 0 ? (size_t)n : 1, sizeof *m->vecs);
    m->vec_bytes = calloc(n > 0 ? (size_t)n : 1, sizeof *m->vec_bytes);
    m->backbone = engine_huge_alloc(m->f.h.backbone_len + 1);
    if (n < 0 || !m->vecs || !m->vec_bytes || !m->backbone) {
        return err_set(err, SL_ENOMEM, "%s: out of memory loading %llu backbone bytes", path,
                      (unsigned long long)m->f.h.backbone_len);
    }
    sl_status st = fio_pread_all(m->f.fd, m->backbone, m->f.h.backbone_len, m->f.h.backbone_off, path, err);
    if (st) return st;
    /* the backbone now lives in our buffer: do not keep a second copy in the page cache */
    posix_fadvise(m->f.fd, (off_t)m->f.h.backbone_off, (off_t)m->f.h.backbone_len, POSIX_FADV_DONTNEED);
    for (int i = 0; i < m->f.n_tensors; i++) {
        const slc_tensor *t = &m->f.t[i];
        if (XXH3_64bits(m->backbone + (t->off - m->f.h.backbone_off), t->size) != t->hash)
            return err_set(err, SL_ECHECKSUM, "%s: backbone tensor '%s' fails its checksum (file offset %llu)", path,
                          t->name, (unsigned long long)t->off);
    }
    for (int i = 0; i < n; i++)
        if ((st = bind_one(m, &at[i], err))) return st;
    if ((st = flatten_qkvz(m, at, n, err))) return st;
    if (!m->be->is_host && (st = upload_backbone(m, at, n, err))) return st;
    if (m->cfg.tie_embeddings) m->w.lm_head = m->w.embed;
    return SL_OK;
}
