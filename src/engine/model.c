/*
 * model.c — the public model and session API: opens a container, loads the backbone into RAM, binds
 * it to an sl_weights (matrices stay in their stored dtype, vectors become f32), loads every expert
 * block (resident mode), checks every checksum on the way, and runs sessions through fwd_eval().
 *
 * Ownership: the model owns the backbone buffer, the f32 vectors and the expert buffer; sessions
 * borrow the model and must be freed before it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "format/container.h"
#include "model/model.h"
#include "model/tensors.h"
#include "util/err.h"
#include "util/fileio.h"

struct sl_model {
    slc_file f;
    sl_config cfg;
    sl_weights w;
    uint8_t *backbone;    /* the backbone section, 4096-aligned */
    float **vecs;         /* owned f32 vectors */
    int n_vecs;
    uint8_t *experts;     /* the whole expert section (resident) */
    sl_expert_src src;
    sl_pool *pool;
    char err[768];
};

struct sl_session {
    sl_model *m;
    fwd_state *st;
    int n_ctx;
    char err[768];
};

sl_model_params sl_model_params_default(void) {
    sl_model_params p;
    memset(&p, 0, sizeof p);
    return p;
}

/* ---- binding ---- */

typedef struct {
    const char *suffix;
    size_t field; /* offsetof in sl_layer_w */
    int vec;      /* 1: float* vector, 0: sl_mat */
} bind_entry;

#define M(s, f) {s, offsetof(sl_layer_w, f), 0}
#define V(s, f) {s, offsetof(sl_layer_w, f), 1}
static const bind_entry layer_binds[] = {
    V("input_layernorm", attn_norm), V("post_attention_layernorm", ffn_norm),
    M("self_attn.q_proj", q), M("self_attn.k_proj", k), M("self_attn.v_proj", v), M("self_attn.o_proj", o),
    V("self_attn.q_norm", q_norm), V("self_attn.k_norm", k_norm),
    M("linear_attn.in_proj_qkvz", qkvz), M("linear_attn.in_proj_ba", ba), M("linear_attn.in_proj_qkv", qkv),
    M("linear_attn.in_proj_z", z), M("linear_attn.in_proj_b", b), M("linear_attn.in_proj_a", a),
    V("linear_attn.conv1d", conv_w), V("linear_attn.dt_bias", dt_bias), V("linear_attn.A_log", A_log),
    V("linear_attn.norm", lin_norm), M("linear_attn.out_proj", lin_out),
    M("mlp.gate", router), M("mlp.shared_expert.gate_proj", sh_gate), M("mlp.shared_expert.up_proj", sh_up),
    M("mlp.shared_expert.down_proj", sh_down), M("mlp.shared_expert_gate", sh_expert_gate),
    M("mlp.gate_proj", mlp_gate), M("mlp.up_proj", mlp_up), M("mlp.down_proj", mlp_down),
};
#undef M
#undef V

static sl_status bind_one(sl_model *m, const arch_tensor *at, sl_error *err) {
    const slc_tensor *t = slc_find(&m->f, at->name);
    if (!t) return sl_err(err, SL_EFORMAT, "%s: tensor '%s' is missing from the container", m->f.path, at->name);
    if (t->ndim != at->ndim || t->shape[0] != at->shape[0] || (at->ndim == 2 && t->shape[1] != at->shape[1]))
        return sl_err(err, SL_EFORMAT, "%s: tensor '%s' has shape [%lld,%lld] but the config implies [%lld,%lld]",
                      m->f.path, at->name, (long long)t->shape[0], (long long)t->shape[1], (long long)at->shape[0],
                      (long long)at->shape[1]);
    const uint8_t *data = m->backbone + (t->off - m->f.h.backbone_off);
    void *dst = NULL;
    int vec = 0;
    if (!strcmp(at->name, "embed_tokens")) dst = &m->w.embed;
    else if (!strcmp(at->name, "lm_head")) dst = &m->w.lm_head;
    else if (!strcmp(at->name, "norm")) { dst = &m->w.final_norm; vec = 1; }
    else {
        int l = -1, n = 0;
        if (sscanf(at->name, "layers.%d.%n", &l, &n) != 1 || l < 0 || l >= m->cfg.n_layers)
            return sl_err(err, SL_EFORMAT, "%s: unexpected tensor '%s'", m->f.path, at->name);
        for (size_t i = 0; i < sizeof layer_binds / sizeof *layer_binds; i++)
            if (!strcmp(at->name + n, layer_binds[i].suffix)) {
                dst = (char *)&m->w.layers[l] + layer_binds[i].field;
                vec = layer_binds[i].vec;
            }
        if (!dst) return sl_err(err, SL_EFORMAT, "%s: unexpected tensor '%s'", m->f.path, at->name);
    }
    if (vec) {
        size_t n = (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
        float *v = malloc(n * sizeof(float));
        if (!v) return sl_err(err, SL_ENOMEM, "out of memory");
        dt_to_f32(t->dtype, data, v, n);
        m->vecs[m->n_vecs++] = v;
        *(float **)dst = v;
    } else {
        sl_mat *mat = dst;
        mat->data = data;
        mat->dtype = t->dtype;
        mat->rows = (int)t->shape[0];
        mat->cols = (int)t->shape[1];
    }
    return SL_OK;
}

static int resident_get(void *ctx, int layer, int expert, sl_expert *out) {
    sl_model *m = ctx;
    int slot = cfg_moe_slot(&m->cfg, layer);
    if (slot < 0 || expert < 0 || expert >= m->cfg.n_experts) return SL_EINVAL;
    const uint8_t *blk = m->experts + (slc_expert_offset(&m->f, slot, expert) - m->f.h.expert_off);
    sl_mat *mats[3] = {&out->gate, &out->up, &out->down};
    for (int p = 0; p < 3; p++) {
        mats[p]->data = blk + m->f.parts[p].off;
        mats[p]->dtype = m->f.parts[p].dtype;
        mats[p]->rows = (int)m->f.parts[p].shape[0];
        mats[p]->cols = (int)m->f.parts[p].shape[1];
    }
    return SL_OK;
}

sl_status sl_model_open(const char *path, const sl_model_params *params, sl_model **out, sl_error *err) {
    *out = NULL;
    sl_model_params defp = sl_model_params_default();
    const sl_model_params *p = params ? params : &defp;
    sl_model *m = calloc(1, sizeof *m);
    arch_tensor *at = NULL;
    if (!m) return sl_err(err, SL_ENOMEM, "out of memory");
    sl_status st = slc_open(path, &m->f, err);
    if (st) { free(m); return st; }
    m->cfg = m->f.cfg;
    int n = arch_backbone_tensors(&m->cfg, &at);
    m->vecs = calloc(n > 0 ? (size_t)n : 1, sizeof *m->vecs);
    m->backbone = aligned_alloc(SLC_ALIGN, slc_round_up(m->f.h.backbone_len + 1, SLC_ALIGN));
    m->experts = aligned_alloc(SLC_ALIGN, slc_round_up(m->f.h.expert_len + 1, SLC_ALIGN));
    if (n < 0 || !m->vecs || !m->backbone || !m->experts) {
        st = sl_err(err, SL_ENOMEM, "%s: out of memory loading %llu backbone + %llu expert bytes", path,
                    (unsigned long long)m->f.h.backbone_len, (unsigned long long)m->f.h.expert_len);
        goto fail;
    }
    if ((st = fio_pread_all(m->f.fd, m->backbone, m->f.h.backbone_len, m->f.h.backbone_off, path, err))) goto fail;
    for (int i = 0; i < m->f.n_tensors; i++) {
        const slc_tensor *t = &m->f.t[i];
        if (XXH3_64bits(m->backbone + (t->off - m->f.h.backbone_off), t->size) != t->hash) {
            st = sl_err(err, SL_ECHECKSUM, "%s: backbone tensor '%s' fails its checksum (file offset %llu)", path,
                        t->name, (unsigned long long)t->off);
            goto fail;
        }
    }
    for (int i = 0; i < n; i++)
        if ((st = bind_one(m, &at[i], err))) goto fail;
    if (m->cfg.tie_embeddings) m->w.lm_head = m->w.embed;
    if ((st = fio_pread_all(m->f.fd, m->experts, m->f.h.expert_len, m->f.h.expert_off, path, err))) goto fail;
    for (uint32_t s = 0; s < m->f.h.n_moe_layers; s++)
        for (uint32_t e = 0; e < m->f.h.n_experts; e++) {
            uint64_t off = slc_expert_offset(&m->f, (int)s, (int)e);
            if (XXH3_64bits(m->experts + (off - m->f.h.expert_off), m->f.block_bytes) !=
                m->f.expert_hash[(size_t)s * m->f.h.n_experts + e]) {
                st = sl_err(err, SL_ECHECKSUM, "%s: expert block (layer %d, expert %u) fails its checksum (file "
                            "offset %llu)", path, m->f.moe_layers[s], e, (unsigned long long)off);
                goto fail;
            }
        }
    m->src.get = resident_get;
    m->src.ctx = m;
    m->pool = sl_pool_new(p->n_threads);
    if (!m->pool) { st = sl_err(err, SL_ENOMEM, "cannot start the thread pool"); goto fail; }
    free(at);
    *out = m;
    return SL_OK;
fail:
    free(at);
    sl_model_close(m);
    return st;
}

void sl_model_close(sl_model *m) {
    if (!m) return;
    sl_pool_free(m->pool);
    for (int i = 0; i < m->n_vecs; i++) free(m->vecs[i]);
    free(m->vecs);
    free(m->backbone);
    free(m->experts);
    slc_close(&m->f);
    free(m);
}

const char *sl_model_errmsg(const sl_model *m) { return m ? m->err : ""; }
int sl_model_n_vocab(const sl_model *m) { return m->cfg.vocab; }
int sl_model_n_ctx(const sl_model *m) { return m->cfg.max_pos; }

/* ---- sessions ---- */

sl_status sl_session_new(sl_model *m, int n_ctx, sl_session **out) {
    *out = NULL;
    if (n_ctx <= 0 || n_ctx > m->cfg.max_pos) n_ctx = m->cfg.max_pos;
    sl_session *s = calloc(1, sizeof *s);
    if (!s) return SL_ENOMEM;
    s->m = m;
    s->n_ctx = n_ctx;
    s->st = fwd_state_new(&m->cfg, n_ctx);
    if (!s->st) {
        free(s);
        snprintf(m->err, sizeof m->err, "out of memory for a session of %d positions", n_ctx);
        return SL_ENOMEM;
    }
    *out = s;
    return SL_OK;
}

void sl_session_free(sl_session *s) {
    if (!s) return;
    fwd_state_free(s->st);
    free(s);
}

void sl_session_reset(sl_session *s) { fwd_state_reset(s->st); }
int sl_session_n_past(const sl_session *s) { return fwd_state_n_past(s->st); }
const char *sl_session_errmsg(const sl_session *s) { return s ? s->err : ""; }

sl_status sl_session_eval(sl_session *s, const int32_t *tokens, int n_tokens, float *logits, int all_logits) {
    s->err[0] = 0;
    int r = fwd_eval(s->st, &s->m->cfg, &s->m->w, &s->m->src, s->m->pool, tokens, n_tokens, logits, all_logits, s->err,
                     sizeof s->err);
    return (sl_status)r;
}
