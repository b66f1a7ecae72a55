/*
 * synth.c — `sluice synth`: a container of the real dimensions of a released model, filled with
 * random weights, written directly (no checkpoint needed). Random weights of the real shape cost the
 * same to read and multiply as the real ones, so benchmarks of I/O and compute are honest; routing of
 * a random router is close to uniform, which makes cache hit rates pessimistic (real routers are
 * skewed).
 *
 * The shapes come from the families' tables (model/arch.h), one list over every family.
 * Values: matrices uniform in ±1/sqrt(cols) (activations stay O(1)), norm weights 0 for zero-centred
 * families and 1 otherwise, A_log = log(U(1,16)), dt_bias 0, conv1d ±0.5. Matrices are bf16 by
 * default, f32 with --quant f32, or quantized with --quant q8|q4|q3 (group 64, bf16 scales, the
 * packer's quantiser; routers stay bf16 as pack keeps them at >= 8 bits).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "format/synth.h"

#include "format/container.h"
#include "model/arch.h"
#include "model/tensors.h"
#include "quant/quant.h"
#include "sluice.h"
#include "util/err.h"
#include "util/fileio.h"

/* The shapes are the families' (model/arch/<family>.c: the released config.json files' dimensions). */
const char *sl_synth_shapes(void) {
    static char buf[1024];
    if (buf[0]) return buf;
    size_t n = 0;
    for (int i = 0; arch_list[i]; i++)
        for (int k = 0; k < arch_list[i]->n_shapes && n < sizeof buf; k++)
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", n ? ", " : "", arch_list[i]->shapes[k].name);
    return buf;
}

#define SYNTH_GROUP 64

static uint64_t rng_next(uint64_t *s) { /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* Fills n values of dtype dt, uniform in ±a (by 16-bit pieces of one 64-bit draw). */
static void fill(uint64_t *s, sl_dtype dt, void *dst, size_t n, float a) {
    for (size_t i = 0; i < n;) {
        uint64_t r = rng_next(s);
        for (int k = 0; k < 4 && i < n; k++, i++) {
            float u = ((float)((r >> (16 * k)) & 0xffff) / 32768.0f - 1.0f) * a;
            if (dt == DT_BF16) ((uint16_t *)dst)[i] = f32_to_bf16(u);
            else ((float *)dst)[i] = u;
        }
    }
}

/* Matrix of rows x cols in dtype dt at dst (q_mat_bytes bytes); f32 scratch tmp holds rows*cols. */
static void fill_mat(uint64_t *s, sl_dtype dt, const char *name, int64_t rows, int64_t cols, float *tmp, void *dst) {
    size_t n = (size_t)(rows * cols);
    float a = 1.0f / sqrtf((float)cols);
    if (!q_is_quant(dt)) {
        fill(s, dt, dst, n, a);
        return;
    }
    fill(s, DT_F32, tmp, n, a);
    uint32_t seed = dt == DT_Q3 ? (uint32_t)XXH3_64bits(name, strlen(name)) : 0;
    q_quantize(dt, tmp, (int)rows, (int)cols, SYNTH_GROUP, DT_BF16, seed, dst);
}

static void fill_vec(uint64_t *s, const char *name, const sl_config *c, sl_dtype dt, void *dst, size_t n) {
    float *tmp = malloc(n * sizeof(float));
    if (!tmp) return;
    for (size_t i = 0; i < n; i++) {
        float v = c->zero_centred_norm ? 0.0f : 1.0f;
        if (strstr(name, "A_log")) v = logf(1.0f + 15.0f * (float)(rng_next(s) >> 40) / (float)(1 << 24));
        else if (strstr(name, "dt_bias")) v = 0.0f;
        else if (strstr(name, "conv1d")) v = ((float)(rng_next(s) >> 40) / (float)(1 << 24) - 0.5f);
        else if (strstr(name, "linear_attn.norm")) v = 1.0f;
        else if (strstr(name, "_proj.bias")) v = 0.0f;
        else if (strstr(name, "e_score_correction_bias")) v = 0.0f;
        tmp[i] = v;
    }
    dt_from_f32(dt, tmp, dst, n);
    free(tmp);
}

/* dtype of a backbone tensor: vectors f32; routers bf16 when the rest is quantized; else mdt. */
static sl_dtype tensor_dtype(const arch_tensor *t, sl_dtype mdt) {
    if (!t->matrix) return DT_F32;
    if (q_is_quant(mdt) && t->router) return DT_BF16;
    if (q_is_quant(mdt) && t->shape[1] % SYNTH_GROUP) return DT_BF16;
    return mdt;
}

static sl_status make_config(const arch_desc *a, const arch_shape *sh, int layers, sl_config *c, sl_error *err) {
    memset(c, 0, sizeof *c);
    c->arch = a->id;
    arch_set_traits(c);
    c->vocab = sh->vocab;
    c->hidden = sh->hidden;
    c->n_layers = layers > 0 ? layers : sh->layers;
    if (c->n_layers > SL_MAX_LAYERS) return sl_err(err, SL_EINVAL, "--layers %d is too many", c->n_layers);
    c->n_heads = sh->heads;
    c->n_kv_heads = sh->kv_heads;
    c->head_dim = sh->head_dim;
    c->rot_dim = (int)(sh->head_dim * sh->prf);
    c->rope_theta = sh->theta;
    c->eps = 1e-6f;
    c->max_pos = sh->max_pos;
    c->n_experts = sh->experts;
    c->n_experts_used = sh->used;
    c->moe_inter = sh->moe_inter;
    c->shared_inter = sh->shared_inter;
    c->norm_topk = sh->norm_topk;
    c->attn_bias = sh->attn_bias;
    if (sh->qk_norm) c->qk_norm = SL_QK_NORM_HEAD;
    c->dense_inter = sh->first_dense > 0 ? sh->dense_inter : 0;
    c->n_group = sh->n_group;
    c->topk_group = sh->topk_group;
    c->routed_scale = sh->routed_scale;
    int linear = sh->interval > 0;
    c->lin_nk = sh->nk;
    c->lin_nv = sh->nv;
    c->lin_dk = sh->dk;
    c->lin_dv = sh->dv;
    c->conv_k = linear ? 4 : 0;
    for (int l = 0; l < c->n_layers; l++) {
        c->layer_linear[l] = linear && (l + 1) % sh->interval != 0;
        c->layer_moe[l] = l >= sh->first_dense;
        c->layer_sliding[l] = sh->sliding_window > 0 && l % 2 == 0; /* gpt-oss: sliding at even layers */
    }
    c->sliding_window = sh->sliding_window;
    if (c->expert_kind == SL_EXPERT_GPTOSS) c->swiglu_limit = 7.0;
    if (sh->yarn_factor > 0) {
        c->rope_type = SL_ROPE_YARN;
        c->rope_factor = sh->yarn_factor;
        c->rope_orig_max_pos = sh->yarn_orig;
        c->yarn_beta_fast = 32;
        c->yarn_beta_slow = 1;
    }
    if (a->shape_config) a->shape_config(sh, c);
    return SL_OK;
}

sl_status synth_config(const char *shape_name, int layers, sl_config *out, sl_error *err) {
    const arch_shape *sh = NULL;
    const arch_desc *a = NULL;
    for (int i = 0; arch_list[i] && !sh; i++)
        for (int k = 0; k < arch_list[i]->n_shapes && !sh; k++)
            if (!strcmp(arch_list[i]->shapes[k].name, shape_name)) {
                sh = &arch_list[i]->shapes[k];
                a = arch_list[i];
            }
    if (!sh) return sl_err(err, SL_EINVAL, "unknown shape '%s' (known: %s)", shape_name, sl_synth_shapes());
    return make_config(a, sh, layers, out, err);
}

sl_status sl_synth(const char *shape_name, int layers, sl_quant quant, uint64_t seed, const char *out_path,
                   sl_progress_fn progress, void *user, sl_error *err) {
    sl_config c;
    sl_status st = synth_config(shape_name, layers, &c, err);
    if (st) return st;
    sl_dtype mdt = quant == SL_QUANT_F32 ? DT_F32 : quant == SL_QUANT_Q8 ? DT_Q8 : quant == SL_QUANT_Q4 ? DT_Q4
                 : quant == SL_QUANT_Q3 ? DT_Q3 : DT_BF16;
    arch_tensor *at = NULL;
    int n_at = arch_backbone_tensors(&c, &at);
    if (n_at < 0) return sl_err(err, SL_ENOMEM, "out of memory");
    cJSON *man = cJSON_CreateObject(), *tt = NULL;
    char *tmp = NULL, *mtxt = NULL;
    uint8_t *buf = NULL, *hdr = NULL, *hashes = NULL;
    float *ftmp = NULL;
    int fd = -1;
    uint64_t rs = seed ? seed : 0x9e3779b97f4a7c15ull;
    slc_header h;
    memset(&h, 0, sizeof h);
    h.version = SLC_VERSION;
    h.backbone_off = SLC_HEADER_BYTES;
    uint64_t off = h.backbone_off, maxb = 0, maxn = 0;
    for (int i = 0; i < n_at; i++) {
        uint64_t n = (uint64_t)at[i].shape[0] * (uint64_t)(at[i].ndim == 2 ? at[i].shape[1] : 1);
        uint64_t b = q_mat_bytes(tensor_dtype(&at[i], mdt), at[i].shape[0], at[i].ndim == 2 ? at[i].shape[1] : 1,
                                 SYNTH_GROUP, DT_BF16);
        off = slc_round_up(off, SLC_TENSOR_ALIGN) + b;
        if (b > maxb) maxb = b;
        if (n > maxn) maxn = n;
    }
    h.backbone_len = off - h.backbone_off;
    int64_t psh[ARCH_MAX_PARTS][2];
    uint64_t poff[ARCH_MAX_PARTS], psz[ARCH_MAX_PARTS], block = 0;
    sl_dtype pdt[ARCH_MAX_PARTS];
    const int n_parts = arch_n_parts(&c);
    for (int p = 0; p < n_parts; p++) {
        arch_expert_shape(&c, p, psh[p]);
        pdt[p] = arch_expert_part_is_vec(&c, p) ? DT_F32 : mdt; /* biases: f32 (zeros) */
        block = slc_round_up(block, SLC_TENSOR_ALIGN);
        poff[p] = block;
        psz[p] = q_mat_bytes(pdt[p], psh[p][0], psh[p][1], SYNTH_GROUP, DT_BF16);
        block += psz[p];
        if ((uint64_t)(psh[p][0] * psh[p][1]) > maxn) maxn = (uint64_t)(psh[p][0] * psh[p][1]);
    }
    h.n_moe_layers = (uint32_t)cfg_n_moe_layers(&c);
    h.n_experts = (uint32_t)c.n_experts;
    h.expert_stride = slc_round_up(block, SLC_ALIGN);
    h.expert_off = slc_round_up(off, SLC_ALIGN);
    h.expert_len = (uint64_t)h.n_moe_layers * h.n_experts * h.expert_stride;
    h.hash_off = h.expert_off + h.expert_len;
    h.hash_len = (uint64_t)h.n_moe_layers * h.n_experts * 8;
    h.blob_off = h.hash_off + h.hash_len;
    h.blob_len = 0;
    size_t tl = strlen(out_path) + 32;
    tmp = malloc(tl);
    buf = aligned_alloc(SLC_ALIGN, slc_round_up((maxb > h.expert_stride ? maxb : h.expert_stride) + 1, SLC_ALIGN));
    hashes = malloc(h.hash_len + 8);
    hdr = malloc(SLC_HEADER_BYTES);
    ftmp = q_is_quant(mdt) ? malloc(maxn * sizeof(float)) : NULL;
    if (!man || !tmp || !buf || !hashes || !hdr || (q_is_quant(mdt) && !ftmp)) { st = sl_err(err, SL_ENOMEM, "out of memory"); goto fail; }
    snprintf(tmp, tl, "%s.tmp.%ld", out_path, (long)getpid());
    fd = open(tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = sl_err(err, sl_status_from_errno(errno), "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        tmp = NULL;
        goto fail;
    }
    cJSON_AddNumberToObject(man, "format_version", SLC_VERSION);
    cJSON_AddStringToObject(man, "sluice_version", SL_VERSION_STRING);
    cJSON_AddItemToObject(man, "config", slc_config_to_json(&c));
    tt = cJSON_AddArrayToObject(man, "tensors");
    uint64_t total = h.backbone_len + h.expert_len, done = 0;
    off = h.backbone_off;
    for (int i = 0; i < n_at; i++) {
        sl_dtype dt = tensor_dtype(&at[i], mdt);
        uint64_t n = (uint64_t)at[i].shape[0] * (uint64_t)(at[i].ndim == 2 ? at[i].shape[1] : 1);
        uint64_t b = q_mat_bytes(dt, at[i].shape[0], at[i].ndim == 2 ? at[i].shape[1] : 1, SYNTH_GROUP, DT_BF16);
        off = slc_round_up(off, SLC_TENSOR_ALIGN);
        if (at[i].matrix) fill_mat(&rs, dt, at[i].name, at[i].shape[0], at[i].shape[1], ftmp, buf);
        else fill_vec(&rs, at[i].name, &c, dt, buf, n);
        if ((st = fio_pwrite_all(fd, buf, b, off, tmp, err))) goto fail;
        slc_tensor te = {at[i].name, dt, at[i].ndim, {at[i].shape[0], at[i].shape[1]}, off, b, XXH3_64bits(buf, b),
                         SYNTH_GROUP, DT_BF16, dt == DT_Q3 ? (uint32_t)XXH3_64bits(at[i].name, strlen(at[i].name)) : 0};
        cJSON_AddItemToArray(tt, slc_tensor_to_json(&te));
        off += b;
        done += b;
        if (progress && progress(user, done, total)) { st = sl_err(err, SL_ECANCELED, "canceled"); goto fail; }
    }
    for (uint64_t k = 0; k < (uint64_t)h.n_moe_layers * h.n_experts; k++) {
        memset(buf, 0, h.expert_stride);
        for (int p = 0; p < n_parts; p++)
            if (!arch_expert_part_is_vec(&c, p))
                fill_mat(&rs, mdt, arch_expert_part_name(&c, p), psh[p][0], psh[p][1], ftmp, buf + poff[p]);
        uint64_t hv = XXH3_64bits(buf, block);
        for (int b = 0; b < 8; b++) hashes[k * 8 + (uint64_t)b] = (uint8_t)(hv >> (8 * b));
        if ((st = fio_pwrite_all(fd, buf, h.expert_stride, h.expert_off + k * h.expert_stride, tmp, err))) goto fail;
        done += h.expert_stride;
        if (progress && progress(user, done, total)) { st = sl_err(err, SL_ECANCELED, "canceled"); goto fail; }
    }
    if (h.hash_len && (st = fio_pwrite_all(fd, hashes, h.hash_len, h.hash_off, tmp, err))) goto fail;
    slc_part parts[ARCH_MAX_PARTS];
    for (int p = 0; p < n_parts; p++) {
        const char *pn = arch_expert_part_name(&c, p);
        parts[p] = (slc_part){pdt[p], {psh[p][0], psh[p][1]}, poff[p], psz[p], SYNTH_GROUP, DT_BF16,
                              pdt[p] == DT_Q3 ? (uint32_t)XXH3_64bits(pn, strlen(pn)) : 0};
    }
    cJSON_AddItemToObject(man, "experts", slc_experts_to_json(&h, &c, block, parts));
    cJSON_AddArrayToObject(man, "blobs");
    cJSON *src = cJSON_AddObjectToObject(man, "source");
    cJSON_AddStringToObject(src, "synthetic", shape_name);
    cJSON_AddNumberToObject(src, "seed", (double)(seed ? seed : 0));
    cJSON_AddArrayToObject(src, "files");
    cJSON *po = cJSON_AddObjectToObject(man, "pack");
    cJSON_AddStringToObject(po, "quant", dt_name(mdt));
    mtxt = cJSON_PrintUnformatted(man);
    if (!mtxt) { st = sl_err(err, SL_ENOMEM, "out of memory"); goto fail; }
    h.manifest_off = slc_round_up(h.blob_off, 8);
    h.manifest_len = strlen(mtxt);
    h.manifest_hash = XXH3_64bits(mtxt, h.manifest_len);
    h.file_size = h.manifest_off + h.manifest_len;
    if ((st = fio_pwrite_all(fd, mtxt, h.manifest_len, h.manifest_off, tmp, err))) goto fail;
    slc_header_encode(&h, hdr);
    if ((st = fio_pwrite_all(fd, hdr, SLC_HEADER_BYTES, 0, tmp, err))) goto fail;
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
    free(hashes);
    free(ftmp);
    free(at);
    cJSON_Delete(man);
    return st;
}
