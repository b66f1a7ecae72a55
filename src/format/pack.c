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
#include "import/imatrix.h"
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
    static const char *const n[] = {"keep", "f32", "bf16", "q8", "q4", "q3", "q2", "q2v"};
    return q >= SL_QUANT_KEEP && q <= SL_QUANT_Q2V ? n[q] : "same";
}

static dt_type quant_dtype(sl_quant q) {
    return q == SL_QUANT_Q8 ? DT_Q8 : q == SL_QUANT_Q4 ? DT_Q4 : q == SL_QUANT_Q3 ? DT_Q3 : q == SL_QUANT_Q2 ? DT_Q2
           : q == SL_QUANT_Q2V ? DT_Q2V : DT_NONE;
}

/* role: 0 backbone, 1 router / shared-expert gate, 2 routed experts */
static sl_quant role_mode(const sl_pack_params *p, int role) {
    sl_quant bb = p->quant_backbone == SL_QUANT_SAME ? p->quant : p->quant_backbone;
    if (role == 2) return p->quant_experts == SL_QUANT_SAME ? p->quant : p->quant_experts;
    if (role == 1) {
        if (p->quant_router != SL_QUANT_SAME) return p->quant_router;
        return bb == SL_QUANT_Q4 || bb == SL_QUANT_Q3 || bb == SL_QUANT_Q2 || bb == SL_QUANT_Q2V ? SL_QUANT_Q8 : bb;
    }
    return bb;
}

/* How tensor t (canonical name `name`) is stored under params p. */
/* role: 0 backbone, 1 router / shared-expert gate (the family table's AR_ROUTER), 2 routed experts */
static pack_tgt target_for(const sl_pack_params *p, const hf_tensor *t, const char *name, int matrix, int role) {
    pack_tgt g = {DT_NONE, 0, DT_NONE, 0, TN_ACT_HOUSE};
    if (q_is_quant(t->src_dtype)) { /* MLX, GGUF: as it is */
        g.dt = t->src_dtype;
        g.group = t->q_group;
        g.sdt = t->q_sdtype;
        g.act = t->q_act;
        return g;
    }
    sl_quant q = role_mode(p, role);
    dt_type qd = quant_dtype(q);
    const int bq = kq_is(qd); /* q2: blocks of 128 with their f16 scales, whatever --group */
    if (qd != DT_NONE && matrix && t->ndim == 2 &&
        !q_check(qd, t->shape[1], bq ? kq_blk(qd) : p->group, bq ? DT_NONE : p->scale_f16 ? DT_F16 : DT_BF16, NULL)) {
        g.dt = qd;
        g.group = bq ? kq_blk(qd) : p->group;
        g.sdt = bq ? DT_NONE : p->scale_f16 ? DT_F16 : DT_BF16;
        g.seed = qd == DT_Q3 ? (uint32_t)XXH3_64bits(name, strlen(name)) : 0;
        return g;
    }
    g.dt = pack_target_dtype(qd != DT_NONE ? SL_QUANT_KEEP : q, t->src_dtype, matrix);
    return g;
}

sl_status pack_derive(hf_ckpt *ck, const hf_tensor *t, const pack_tgt *tgt, void *dst, sl_error *err) {
    return pack_derive_imp(ck, t, tgt, NULL, dst, err);
}

sl_status pack_derive_imp(hf_ckpt *ck, const hf_tensor *t, const pack_tgt *tgt, const float *imp, void *dst,
                          sl_error *err) {
    if (q_is_quant(t->src_dtype)) {
        if (tgt->dt != t->src_dtype || tgt->group != t->q_group || tgt->sdt != t->q_sdtype)
            return err_set(err, SL_EMISMATCH, "tensor '%s' is %s group %d in the source, %s group %d in the container",
                          t->name, dt_name(t->src_dtype), t->q_group, dt_name(tgt->dt), tgt->group);
        return hf_read(ck, t, tgt->dt, dst, err);
    }
    if (!q_is_quant(tgt->dt)) return hf_read(ck, t, tgt->dt, dst, err);
    if (t->ndim != 2)
        return err_set(err, SL_EINVAL, "tensor '%s' cannot be stored as %s: not a matrix", t->name, dt_name(tgt->dt));
    sl_status st = q_check(tgt->dt, t->shape[1], tgt->group, tgt->sdt, err);
    if (st) {
        err_prefix(err, "tensor '%s' cannot be stored as %s", t->name, dt_name(tgt->dt));
        return st;
    }
    size_t n = (size_t)t->shape[0] * (size_t)t->shape[1];
    float *tmp = malloc(n * sizeof(float) + 1);
    if (!tmp) return err_set(err, SL_ENOMEM, "out of memory quantizing '%s'", t->name);
    st = hf_read(ck, t, DT_F32, tmp, err);
    if (!st) q_quantize_imp(tgt->dt, tmp, (int)t->shape[0], (int)t->shape[1], tgt->group, tgt->sdt, tgt->seed, imp, dst);
    free(tmp);
    return st;
}

static uint64_t tgt_bytes(const pack_tgt *g, int ndim, const int64_t *shape) {
    return q_mat_bytes(g->dt, shape[0], ndim == 1 ? 1 : shape[1], g->group, g->sdt);
}


dt_type pack_target_dtype(sl_quant q, dt_type src, int matrix) {
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
            return err_set(err, err_from_errno(e), "%s: write of %zu bytes at offset %llu failed: %s", w->path,
                          n, (unsigned long long)off, strerror(e));
        }
        if (r == 0) return err_set(err, SL_EIO, "%s: write made no progress", w->path);
        b += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return SL_OK;
}

static sl_status progress(writer *w, uint64_t add, sl_error *err) {
    w->done += add;
    if (w->p->progress && w->p->progress(w->p->progress_user, w->done, w->total))
        return err_set(err, SL_ECANCELED, "pack canceled");
    return SL_OK;
}

static void add_hash(cJSON *o, uint64_t h) {
    char hex[17];
    slc_hash_hex(h, hex);
    cJSON_AddStringToObject(o, "xxh3", hex);
}

static sl_status hash_file(const char *path, uint64_t *out, sl_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(err, err_from_errno(errno), "%s: cannot open: %s", path, strerror(errno));
    XXH3_state_t *s = XXH3_createState();
    size_t cap = 8u << 20;
    char *buf = malloc(cap);
    sl_status st = SL_OK;
    if (!s || !buf) { st = err_set(err, SL_ENOMEM, "out of memory"); goto out; }
    XXH3_64bits_reset(s);
    for (;;) {
        ssize_t r = read(fd, buf, cap);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { st = err_set(err, SL_EIO, "%s: read failed: %s", path, strerror(errno)); goto out; }
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

/* ---- pack_run: plan, write, describe, commit -------------------------------------------------- */

/* pack_run's stages, in order (the file's first comment), each given the job and returning SL_OK or an
 * error with err; the first error ends the pack and job_free removes the temporary file. */

/* The expert blocks of one MoE layer: each part's target and place (at.parts[p].off / size), the block's used
 * bytes and stride, and where the layer's blocks start in the expert section (at.off; per-slot layouts only). */
typedef struct {
    pack_tgt edt[ARCH_MAX_PARTS];
    slc_slot at;
    const hf_tensor *src; /* the part being planned: this layer's first expert's tensor */
} pk_slot;

/* One pack's state across its stages; everything it holds is freed by job_free. */
typedef struct {
    const sl_pack_params *p;
    const char *src_dir, *out_path;
    const pack_io *io;
    hf_ckpt *ck;
    const fam_config *c;
    arch_tensor *at; /* the backbone's tensors */
    int n_at;
    pack_tgt *tdt;   /* [n_at] how each is stored */
    uint64_t *toff;  /* [n_at] where */
    uint64_t max_tensor;
    int n_moe, E, n_parts;
    pk_slot *sl;     /* [n_moe] each MoE layer's expert block: how its parts are stored, where, its stride */
    int per_slot;    /* the layouts differ by layer: the manifest lists them (experts.slots) */
    slc_header h;
    cJSON *man, *tt; /* the manifest and its "tensors" array */
    char *tmp;       /* "<out>.tmp.<pid>", ours to remove until committed */
    int fd;
    writer w;
    uint8_t *buf;    /* one backbone tensor or one expert block */
    uint64_t *ehash; /* the expert hash table */
    imat_file *im;   /* p->imatrix read, or NULL */
    int n_weighted, n_plain; /* quantized matrices with importances / without an entry in im */
} pack_job;

static sl_status check_params(const sl_pack_params *p, sl_error *err) {
    if (p->quant < SL_QUANT_KEEP || p->quant > SL_QUANT_Q2V)
        return err_set(err, SL_EINVAL, "unknown quantization mode %d", (int)p->quant);
    const sl_quant roles[3] = {p->quant_experts, p->quant_backbone, p->quant_router};
    for (int i = 0; i < 3; i++)
        if (roles[i] < SL_QUANT_SAME || roles[i] > SL_QUANT_Q2V)
            return err_set(err, SL_EINVAL, "unknown quantization mode %d", (int)roles[i]);
    if (p->group != 32 && p->group != 64 && p->group != 128)
        return err_set(err, SL_EINVAL, "quantization group size %d is not 32, 64 or 128", p->group);
    return SL_OK;
}

/* The plan of the backbone: the manifest's start, each tensor's storage and offset. */
static sl_status plan_backbone(pack_job *j, sl_error *err) {
    const fam_config *c = j->c;
    if ((j->n_at = arch_backbone_tensors(c, &j->at)) < 0) return err_set(err, SL_ENOMEM, "out of memory");
    j->man = cJSON_CreateObject();
    cJSON_AddNumberToObject(j->man, "format_version", SLC_VERSION);
    cJSON_AddStringToObject(j->man, "sluice_version", SL_VERSION_STRING);
    cJSON_AddItemToObject(j->man, "config", slc_config_to_json(c));
    j->tt = cJSON_AddArrayToObject(j->man, "tensors");
    j->h.version = SLC_VERSION;
    j->h.backbone_off = SLC_HEADER_BYTES;
    uint64_t off = j->h.backbone_off;
    j->tdt = calloc((size_t)j->n_at + 1, sizeof *j->tdt);
    j->toff = calloc((size_t)j->n_at + 1, sizeof *j->toff);
    if (!j->man || !j->tt || !j->tdt || !j->toff) return err_set(err, SL_ENOMEM, "out of memory");
    for (int i = 0; i < j->n_at; i++) {
        const arch_tensor *a = &j->at[i];
        j->tdt[i] = target_for(j->p, hf_find(j->ck, a->name), a->name, a->matrix, a->router);
        uint64_t bytes = tgt_bytes(&j->tdt[i], a->ndim, a->shape);
        off = slc_round_up(off, SLC_TENSOR_ALIGN);
        j->toff[i] = off;
        off += bytes;
        if (bytes > j->max_tensor) j->max_tensor = bytes;
    }
    j->h.backbone_len = off - j->h.backbone_off;
    return SL_OK;
}

static int same_layout(const hf_tensor *a, const hf_tensor *b) {
    return a->src_dtype == b->src_dtype && a->q_group == b->q_group && a->q_sdtype == b->q_sdtype && a->q_act == b->q_act;
}

/* How expert part `part` is stored in each MoE layer: as its source, layer by layer (a GGUF's types may differ
 * by layer: the blocks of each layer then have their own layout, experts.slots); when the experts of one layer
 * differ, f32 for plain dtypes in every layer, refused for quantized ones. */
static sl_status plan_part(pack_job *j, int part, sl_error *err) {
    const fam_config *c = j->c;
    const hf_tensor *first = NULL;
    int mixed = 0; /* within a layer */
    for (int l = 0, s = 0; l < c->n_layers; l++) {
        if (!c->layer_moe[l]) continue;
        j->sl[s].src = NULL;
        for (int e = 0; e < j->E; e++) {
            char nm[96];
            snprintf(nm, sizeof nm, "layers.%d.mlp.experts.%d.%s", l, e, arch_expert_part_name(c, part));
            const hf_tensor *t = hf_find(j->ck, nm);
            if (!first) first = t;
            if (!j->sl[s].src) j->sl[s].src = t;
            else if (!same_layout(t, j->sl[s].src)) mixed = 1;
        }
        s++;
    }
    if (first && mixed && q_is_quant(first->src_dtype))
        return err_set(err, SL_EUNSUPPORTED, "%s: routed experts' %s mix quantization settings within a layer; "
                      "an expert block needs one layout", j->src_dir, arch_expert_part_name(c, part));
    char pn[64];
    snprintf(pn, sizeof pn, "experts.%s", arch_expert_part_name(c, part));
    int64_t sh[2];
    arch_expert_shape(c, part, sh);
    for (int s = 0; s < (j->n_moe ? j->n_moe : 1); s++) { /* no MoE layer: slot 0 still gives the manifest's parts */
        pack_tgt *g = &j->sl[s].edt[part];
        const hf_tensor *src = mixed ? first : j->sl[s].src;
        if (src) *g = target_for(j->p, src, pn, 1, 2);
        else *g = (pack_tgt){DT_F32, 0, DT_NONE, 0, TN_ACT_HOUSE};
        if (mixed && !q_is_quant(g->dt)) g->dt = DT_F32;
        if (arch_expert_part_is_vec(c, part)) *g = (pack_tgt){DT_F32, 0, DT_NONE, 0, TN_ACT_HOUSE}; /* biases: f32, bound as is */
        slc_slot *at = &j->sl[s].at;
        at->bytes = slc_round_up(at->bytes, SLC_TENSOR_ALIGN);
        at->parts[part] = (slc_part){g->dt, {sh[0], sh[1]}, at->bytes, tgt_bytes(g, 2, sh), g->group, g->sdt, g->seed,
                                     g->act};
        at->bytes += at->parts[part].size;
    }
    return SL_OK;
}

/* The plan of the expert blocks, and with it the rest of the header's sections. */
static sl_status plan_experts(pack_job *j, sl_error *err) {
    sl_status st;
    j->n_moe = cfg_n_moe_layers(j->c);
    j->E = j->c->n_experts;
    j->n_parts = arch_n_parts(j->c);
    if (!(j->sl = calloc((size_t)j->n_moe + 1, sizeof *j->sl))) return err_set(err, SL_ENOMEM, "out of memory");
    for (int part = 0; part < j->n_parts; part++)
        if ((st = plan_part(j, part, err))) return st;
    slc_header *h = &j->h;
    h->n_moe_layers = (uint32_t)j->n_moe;
    h->n_experts = (uint32_t)j->E;
    h->expert_len = 0;
    for (int s = 0; s < (j->n_moe ? j->n_moe : 1); s++) {
        slc_slot *at = &j->sl[s].at;
        at->stride = slc_round_up(at->bytes, SLC_ALIGN);
        at->off = h->expert_len;
        if (j->n_moe) h->expert_len += (uint64_t)j->E * at->stride;
        if (at->stride > h->expert_stride) h->expert_stride = at->stride;
        if (memcmp(at->parts, j->sl[0].at.parts, sizeof at->parts)) j->per_slot = 1;
    }
    h->expert_off = slc_round_up(h->backbone_off + h->backbone_len, SLC_ALIGN);
    h->hash_off = h->expert_off + h->expert_len;
    h->hash_len = (uint64_t)j->n_moe * (uint64_t)j->E * 8;
    h->blob_off = h->hash_off + h->hash_len;
    return SL_OK;
}

/* Creates the temporary file (never an existing one) and the write buffer. */
static sl_status open_temp(pack_job *j, sl_error *err) {
    sl_status st = fio_create_temp(j->out_path, &j->tmp, &j->fd, err);
    if (st) return st;
    j->w = (writer){j->fd, j->tmp, j->io, j->p, 0, j->h.backbone_len + j->h.expert_len};
    size_t bufsz = (size_t)(j->max_tensor > j->h.expert_stride ? j->max_tensor : j->h.expert_stride);
    j->buf = aligned_alloc(SLC_ALIGN, slc_round_up(bufsz, SLC_ALIGN));
    if (!j->buf) return err_set(err, SL_ENOMEM, "out of memory (%zu-byte buffer)", bufsz);
    return SL_OK;
}

/* The importances of tensor t, stored as tgt, from the imatrix (NULL when none is given, t is not quantized from floats
 * here, or the file has no entry for it): a backbone tensor by its canonical name, else expert e's part `part` of
 * layer l. An entry of the wrong shape is an error. */
static sl_status importances(pack_job *j, const hf_tensor *t, const pack_tgt *tgt, const char *name, int l, int part,
                             int e, const float **imp, sl_error *err) {
    *imp = NULL;
    if (!j->im || !t || t->ndim != 2 || q_is_quant(t->src_dtype) || !q_is_quant(tgt->dt)) return SL_OK;
    char g[160];
    if (imat_gguf_name(j->c, name, l, part, g, sizeof g)) {
        j->n_plain++;
        return SL_OK;
    }
    sl_status st = imat_weights(j->im, g, t->shape[1], name ? 1 : j->E, name ? 0 : e, imp, err);
    if (st == SL_ENOENT) {
        j->n_plain++;
        return SL_OK;
    }
    if (st) return err_prefix(err, "tensor '%s'", t->name);
    if (*imp) j->n_weighted++;
    else j->n_plain++; /* an expert that saw no token */
    return SL_OK;
}

/* Reads p->imatrix, when given. */
static sl_status open_imatrix(pack_job *j, sl_error *err) {
    return j->p->imatrix ? imat_open(j->p->imatrix, &j->im, err) : SL_OK;
}

/* Each backbone tensor converted, hashed, written, and listed in the manifest. */
static sl_status write_backbone(pack_job *j, sl_error *err) {
    sl_status st = SL_OK;
    for (int i = 0; i < j->n_at && !st; i++) {
        arch_tensor *a = &j->at[i];
        uint64_t bytes = tgt_bytes(&j->tdt[i], a->ndim, a->shape);
        const hf_tensor *t = hf_find(j->ck, a->name);
        const float *imp = NULL;
        if ((st = importances(j, t, &j->tdt[i], a->name, 0, 0, 1, &imp, err))) break;
        if ((st = pack_derive_imp(j->ck, t, &j->tdt[i], imp, j->buf, err))) break;
        uint64_t hsh = XXH3_64bits(j->buf, bytes);
        if ((st = wr(&j->w, j->buf, bytes, j->toff[i], err))) break;
        slc_tensor te = {a->name, j->tdt[i].dt, a->ndim, {a->shape[0], a->shape[1]}, j->toff[i], bytes, hsh,
                         j->tdt[i].group, j->tdt[i].sdt, j->tdt[i].seed, j->tdt[i].act};
        cJSON_AddItemToArray(j->tt, slc_tensor_to_json(&te));
        st = progress(&j->w, bytes, err);
    }
    return st;
}

/* Each expert's block (its parts at their offsets, zero between), its hash, then the hash table and the
 * manifest's "experts" (with experts.slots when the layouts differ by layer). */
static sl_status write_experts(pack_job *j, sl_error *err) {
    const fam_config *c = j->c;
    const slc_header *h = &j->h;
    const int E = j->E;
    sl_status st;
    if (!(j->ehash = calloc((size_t)j->n_moe * (size_t)E + 1, 8))) return err_set(err, SL_ENOMEM, "out of memory");
    uint64_t bytes = 0;
    for (int l = 0, s = 0; l < c->n_layers; l++) {
        if (!c->layer_moe[l]) continue;
        const pk_slot *sl = &j->sl[s];
        if (sl->at.bytes > bytes) bytes = sl->at.bytes;
        for (int e = 0; e < E; e++) {
            memset(j->buf, 0, sl->at.stride);
            for (int part = 0; part < j->n_parts; part++) {
                char nm[96];
                snprintf(nm, sizeof nm, "layers.%d.mlp.experts.%d.%s", l, e, arch_expert_part_name(c, part));
                const hf_tensor *t = hf_find(j->ck, nm);
                const float *imp = NULL;
                if ((st = importances(j, t, &sl->edt[part], NULL, l, part, e, &imp, err)) ||
                    (st = pack_derive_imp(j->ck, t, &sl->edt[part], imp, j->buf + sl->at.parts[part].off, err)))
                    return st;
            }
            uint64_t hsh = XXH3_64bits(j->buf, sl->at.bytes);
            uint8_t *hp = (uint8_t *)&j->ehash[(size_t)s * E + e];
            for (int k = 0; k < 8; k++) hp[k] = (uint8_t)(hsh >> (8 * k));
            if ((st = wr(&j->w, j->buf, sl->at.stride, h->expert_off + sl->at.off + (uint64_t)e * sl->at.stride, err)))
                return st;
            if ((st = progress(&j->w, sl->at.stride, err))) return st;
        }
        s++;
    }
    if (h->hash_len && (st = wr(&j->w, j->ehash, h->hash_len, h->hash_off, err))) return st;
    if (!j->n_moe) bytes = j->sl[0].at.bytes;
    cJSON *ex = slc_experts_to_json(h, c, bytes, j->sl[0].at.parts);
    if (ex && j->per_slot) {
        slc_slot *sv = malloc((size_t)j->n_moe * sizeof *sv);
        if (!sv) {
            cJSON_Delete(ex);
            return err_set(err, SL_ENOMEM, "out of memory");
        }
        for (int s = 0; s < j->n_moe; s++) sv[s] = j->sl[s].at;
        slc_slots_to_json(ex, c, sv, j->n_moe);
        free(sv);
    }
    cJSON_AddItemToObject(j->man, "experts", ex);
    return SL_OK;
}

static sl_status write_blobs(pack_job *j, sl_error *err) {
    sl_status st;
    cJSON *bl = cJSON_AddArrayToObject(j->man, "blobs");
    uint64_t boff = j->h.blob_off;
    for (int i = 0; pack_blob_names[i]; i++) {
        char *data = NULL;
        size_t len = 0;
        if ((st = hf_blob(j->ck, pack_blob_names[i], &data, &len, err))) return st;
        if (!data) continue;
        st = wr(&j->w, data, len, boff, err);
        if (!st) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddItemToArray(bl, o);
            cJSON_AddStringToObject(o, "name", pack_blob_names[i]);
            cJSON_AddNumberToObject(o, "offset", (double)boff);
            cJSON_AddNumberToObject(o, "size", (double)len);
            add_hash(o, XXH3_64bits(data, len));
        }
        free(data);
        if (st) return st;
        boff += len;
    }
    j->h.blob_len = boff - j->h.blob_off;
    return SL_OK;
}

/* The manifest's "source" (the directory, its files, their hashes unless turned off) and "pack" (the
 * options it was made with). */
static sl_status describe_source(pack_job *j, sl_error *err) {
    const sl_pack_params *p = j->p;
    sl_status st;
    cJSON *src = cJSON_AddObjectToObject(j->man, "source");
    cJSON_AddStringToObject(src, "dir", j->src_dir);
    cJSON *fl = cJSON_AddArrayToObject(src, "files");
    for (int i = 0; i < hf_n_files(j->ck); i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(fl, o);
        cJSON_AddStringToObject(o, "name", hf_file_name(j->ck, i));
        cJSON_AddNumberToObject(o, "size", (double)hf_file_size(j->ck, i));
        if (p->hash_sources) {
            uint64_t fh = 0;
            if ((st = hash_file(hf_file_path(j->ck, i), &fh, err))) return st;
            add_hash(o, fh);
        }
    }
    cJSON *po = cJSON_AddObjectToObject(j->man, "pack");
    cJSON_AddStringToObject(po, "quant", quant_name(p->quant));
    if (quant_dtype(p->quant) || quant_dtype(role_mode(p, 0)) || quant_dtype(role_mode(p, 1)) ||
        quant_dtype(role_mode(p, 2))) {
        cJSON_AddNumberToObject(po, "group", p->group);
        cJSON_AddStringToObject(po, "scale_dtype", p->scale_f16 ? "f16" : "bf16");
        cJSON_AddStringToObject(po, "backbone", quant_name(role_mode(p, 0)));
        cJSON_AddStringToObject(po, "router", quant_name(role_mode(p, 1)));
        cJSON_AddStringToObject(po, "experts", quant_name(role_mode(p, 2)));
    }
    if (j->im) {
        if (!j->n_weighted)
            return err_set(err, SL_EMISMATCH, "%s: no entry for any matrix quantized here (%d looked for; an importance "
                          "matrix of another model, or a pack that quantizes nothing?)", j->im->path, j->n_plain);
        cJSON *io = cJSON_AddObjectToObject(po, "imatrix");
        const char *sl = strrchr(j->im->path, '/');
        cJSON_AddStringToObject(io, "file", sl ? sl + 1 : j->im->path);
        cJSON_AddStringToObject(io, "format", j->im->legacy ? "dat" : "gguf");
        add_hash(io, j->im->hash);
        cJSON_AddNumberToObject(io, "weighted", j->n_weighted);
        cJSON_AddNumberToObject(io, "unweighted", j->n_plain);
    }
    return SL_OK;
}

/* The manifest after the blobs, the header last, then fsync and rename over out_path. */
static sl_status commit(pack_job *j, sl_error *err) {
    slc_header *h = &j->h;
    uint8_t hdr[SLC_HEADER_BYTES];
    sl_status st;
    char *mtxt = cJSON_PrintUnformatted(j->man);
    if (!mtxt) return err_set(err, SL_ENOMEM, "out of memory");
    h->manifest_off = slc_round_up(h->blob_off + h->blob_len, 8);
    h->manifest_len = strlen(mtxt);
    h->manifest_hash = XXH3_64bits(mtxt, h->manifest_len);
    st = wr(&j->w, mtxt, h->manifest_len, h->manifest_off, err);
    free(mtxt);
    if (st) return st;
    h->file_size = h->manifest_off + h->manifest_len;
    slc_header_encode(h, hdr);
    if ((st = wr(&j->w, hdr, SLC_HEADER_BYTES, 0, err))) return st;
    st = fio_commit(j->fd, h->file_size, j->tmp, j->out_path, err);
    j->fd = -1; /* closed by fio_commit */
    if (!st) {
        free(j->tmp);
        j->tmp = NULL; /* committed: nothing to remove */
    }
    return st;
}

/* Frees what the job holds; an uncommitted temporary file is closed and removed. */
static void job_free(pack_job *j) {
    if (j->fd >= 0) close(j->fd);
    if (j->tmp) unlink(j->tmp);
    free(j->tmp);
    free(j->buf);
    free(j->ehash);
    free(j->sl);
    free(j->tdt);
    free(j->toff);
    free(j->at);
    cJSON_Delete(j->man);
    hf_close(j->ck);
    imat_close(j->im);
}

sl_status pack_run(const char *src_dir, const char *out_path, const sl_pack_params *params, const pack_io *io,
                   sl_error *err) {
    static sl_status (*const stages[])(pack_job *, sl_error *) = {
        open_imatrix, plan_backbone, plan_experts, open_temp, write_backbone, write_experts, write_blobs, describe_source, commit,
    };
    sl_pack_params defp = sl_pack_params_default();
    pack_job j;
    memset(&j, 0, sizeof j);
    j.p = params ? params : &defp;
    j.src_dir = src_dir;
    j.out_path = out_path;
    j.io = io;
    j.fd = -1;
    sl_status st = check_params(j.p, err);
    if (!st && !(st = hf_open(src_dir, &j.ck, err))) j.c = hf_config(j.ck);
    for (size_t i = 0; i < sizeof stages / sizeof *stages && !st; i++) st = stages[i](&j, err);
    job_free(&j);
    return st;
}

sl_status sl_pack(const char *src_dir, const char *out_path, const sl_pack_params *params, sl_error *err) {
    return pack_run(src_dir, out_path, params, NULL, err);
}
