/*
 * open.c — opening and closing a model (sl_model_open, model_open_ex): the container, the thread pool and the
 * backend, the backbone (backbone.c), the expert source (experts.c), the device tier over it, the evaluation
 * workspace; and the model's accessors. Sessions run in session.c. See handles.h for what a model holds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/remote.h"
#include "engine/handles.h"
#include "util/err.h"

sl_model_params sl_model_params_default(void) {
    sl_model_params p;
    memset(&p, 0, sizeof p);
    return p;
}

/* The hybrid step (sluice.h hybrid; docs/CUDA.md "The hybrid step"): on when asked for, or by default (auto) on a
 * device backend (the CPU backend's tier is the tests' stand-in), and only where the backend can run an expert on
 * the host as on the device (a device backend: SwiGLU experts on int8 activations, kernels_dev.c). */
static int hybrid_on(const sl_model *m, const sl_model_params *p) {
    if (!m->be->ffn_host || p->hybrid < 0 || (p->hybrid == 0 && m->be->is_host)) return 0;
    return m->be->is_host || (!p->exact && m->cfg.expert_kind != SL_EXPERT_GPTOSS);
}

/* SL_VRAM_AUTO (sluice.h): the device's free memory now (the backbone is in), less the larger of 2 GiB and a tenth
 * of the card for the sessions' KV caches and the workspace, at most the expert section; 0 without device memory. */
static uint64_t vram_auto(const sl_model *m) {
    uint64_t fr = 0, tot = 0;
    if (!m->be->mem_info || m->be->is_host) return 0;
    m->be->mem_info(m->be, &fr, &tot);
    const uint64_t reserve = tot / 10 > ((uint64_t)2 << 30) ? tot / 10 : (uint64_t)2 << 30;
    const uint64_t v = fr > reserve ? fr - reserve : 0;
    return v < m->f.h.expert_stride ? 0 : v > m->f.h.expert_len ? m->f.h.expert_len : v;
}

/* tier_cfg.host_ok: an expert's parts the backend's ffn_host takes (a device backend: q8/q4 with biases) */
static int host_ok(void *ctx, const tn_expert *ex) {
    const sl_model *m = ctx;
    return m->be->is_host || kern_ffn_dev_ok(ex, m->cfg.moe_inter);
}

/* sl_model_params.routing_trace / record_routing: the trace the workspace replays or records (model/rtrace.h). */
static sl_status open_rtrace(sl_model *m, const sl_model_params *p, sl_error *err) {
    const int L = (int)m->f.h.n_moe_layers, E = m->cfg.n_experts, k = m->cfg.n_experts_used;
    const int play = p->routing == SL_ROUTING_TRACE;
    if (!play && !p->record_routing) return SL_OK;
    if (play && p->record_routing) return err_set(err, SL_EINVAL, "routing: a trace is replayed or recorded, not both");
    if (play && !p->routing_trace) return err_set(err, SL_EINVAL, "routing: SL_ROUTING_TRACE without routing_trace");
    if (L < 1 || E < 1 || k < 1) return err_set(err, SL_EINVAL, "routing trace: the model has no routed experts");
    sl_status st = play ? rtrace_load(p->routing_trace, L, E, k, &m->rt, err) : rtrace_new(L, E, k, &m->rt, err);
    if (!st) fwd_ws_set_rtrace(m->ws, m->rt);
    return st;
}

const char *sl_kv_type_name(sl_kv_type t) {
    static const char *const names[SL_KV_COUNT] = {"f32", "f16", "bf16", "q8", "q4", "q4r"};
    return (int)t >= 0 && t < SL_KV_COUNT ? names[t] : "?";
}

int sl_kv_type_from_name(const char *name) {
    for (int t = 0; name && t < SL_KV_COUNT; t++)
        if (!strcmp(name, sl_kv_type_name((sl_kv_type)t))) return t;
    return -1;
}

/* m->kv_type, kv_type_v := t, tv (tv SL_KV_F32: t) when they are types and m's backend takes them for the model's
 * attention layers (MLA's cache stays f32 anyway); with fallback, f32 where it does not. */
static sl_status check_kv_type(sl_model *m, sl_kv_type t, sl_kv_type tv, int fallback, sl_error *err) {
    if ((int)t < 0 || t >= SL_KV_COUNT) return err_set(err, SL_EINVAL, "KV cache type %d: not a type", (int)t);
    if ((int)tv < 0 || tv >= SL_KV_COUNT) return err_set(err, SL_EINVAL, "KV cache type %d: not a type", (int)tv);
    if (tv == SL_KV_F32) tv = t;
    const int plain_attn = fwd_any_layer(&m->cfg, 0) && m->cfg.kv_lora <= 0;
    const int split = tv != t && !m->be->kv_split;
    if (plain_attn && (!be_kv_takes(m->be, t) || !be_kv_takes(m->be, tv) || split)) {
        if (fallback) t = tv = SL_KV_F32;
        else
            return err_set(err, SL_EUNSUPPORTED, "the %s backend has no %s%s%s KV cache yet (--kv f32)", m->be->name,
                           sl_kv_type_name(t), tv != t ? "," : "", tv != t ? sl_kv_type_name(tv) : "");
    }
    m->kv_type = t;
    m->kv_type_v = tv;
    return SL_OK;
}

uint64_t sl_model_kv_bytes(const sl_model *m, int n_ctx) {
    if (n_ctx <= 0 || n_ctx > m->cfg.max_pos) n_ctx = m->cfg.max_pos;
    return fwd_seq_mem_bytes(&m->cfg, n_ctx, m->kv_type, m->kv_type_v);
}

sl_kv_type sl_model_kv_type(const sl_model *m) { return m->kv_type; }
sl_kv_type sl_model_kv_type_v(const sl_model *m) { return m->kv_type_v; }
void sl_model_set_kv_pool(sl_model *m, uint64_t bytes) { m->kv_pool.limit = bytes; }
uint64_t sl_model_kv_pool_used(const sl_model *m, uint64_t *limit) {
    if (limit) *limit = m->kv_pool.limit;
    return m->kv_pool.used;
}

sl_status model_open_ex(const char *path, const sl_model_params *params, const io_fault_cfg *fault, sl_model **out,
                        sl_error *err) {
    *out = NULL;
    sl_model_params defp = sl_model_params_default();
    const sl_model_params *p = params ? params : &defp;
    sl_model *m = calloc(1, sizeof *m);
    arch_tensor *at = NULL;
    if (!m) return err_set(err, SL_ENOMEM, "out of memory");
    m->stream_fd = -1;
    pthread_mutex_init(&m->mu, NULL);
    sl_status st = slc_open(path, &m->f, err); /* on failure m->f is closed: sl_model_close may run */
    if (st) goto fail;
    m->cfg = m->f.cfg;
    if (p->routing != SL_ROUTING_MODEL && p->routing != SL_ROUTING_UNIFORM && p->routing != SL_ROUTING_TRACE) {
        st = err_set(err, SL_EINVAL, "routing %d: none of SL_ROUTING_MODEL, _UNIFORM, _TRACE", (int)p->routing);
        goto fail;
    }
    m->cfg.uniform_routing = p->routing == SL_ROUTING_UNIFORM;
    m->cfg.routing_seed = p->routing_seed;
    m->pool = pool_new(p->n_threads);
    if (!m->pool) { st = err_set(err, SL_ENOMEM, "cannot start the thread pool"); goto fail; }
    /* the backend first: --gpu without a usable one fails before anything is read */
    if ((st = be_open(p->backend, m->pool, &m->be, err))) goto fail;
    if ((st = check_kv_type(m, p->kv_type, p->kv_type_v, p->kv_fallback, err))) goto fail;
    if (p->n_ctx > m->cfg.max_pos) {
        st = err_set(err, SL_ERANGE, "a context of %d positions is longer than the model's context of %d", p->n_ctx,
                     m->cfg.max_pos);
        goto fail;
    }
    m->n_ctx = p->n_ctx > 0 ? p->n_ctx : m->cfg.max_pos;
    int n = arch_backbone_tensors(&m->cfg, &at);
    if ((st = engine_load_backbone(m, path, at, n, err))) goto fail;
    st = p->remote     ? engine_open_remote(m, path, p, err) /* the experts on other ranks (remote.c) */
         : p->resident ? engine_open_resident(m, path, err)
                       : engine_open_stream(m, path, p, fault, err);
    if (st) goto fail;
    const uint64_t vram = p->remote ? 0 : p->vram_bytes == SL_VRAM_AUTO ? vram_auto(m) : p->vram_bytes;
    if (vram > 0) { /* the device tier over the RAM cache (or the resident experts) */
        tier_cfg tc = {.be = m->be, .file = &m->f, .cfg = &m->cfg, .lower = m->src, .budget = vram};
        if (m->cache) { /* the RAM slots the tier may keep while their copies run (tier.h) */
            cache_stats cs;
            cache_get_stats(m->cache, &cs);
            tc.lower_slots = cs.slots > cs.pinned ? (int)(cs.slots - cs.pinned) : 1;
        }
        tc.hybrid = hybrid_on(m, p);
        tc.host_threads = m->pool ? pool_size(m->pool) : 1;
        tc.host_ok = host_ok;
        tc.host_ctx = m;
        if ((st = tier_new(&tc, &m->tier, err))) goto fail;
        m->src = tier_source(m->tier);
    }
    m->ws = fwd_ws_new(&m->cfg, m->cfg.max_pos, m->be);
    if (!m->ws) { st = err_set(err, SL_ENOMEM, "%s: out of memory for the evaluation workspace", path); goto fail; }
    fwd_ws_set_int8(m->ws, !p->exact);
    if (m->remote && m->cfg.moe_scale_input) { /* the ranks would need each (token, expert) pair's weight */
        st = err_set(err, SL_EUNSUPPORTED, "%s: remote experts do not take Llama 4's scaled expert input yet", path);
        goto fail;
    }
    if (m->remote && fwd_ws_set_remote(m->ws, m->remote)) {
        st = err_set(err, SL_ENOMEM, "%s: out of memory for the expert ranks' buffers", path);
        goto fail;
    }
    if (m->tier && hybrid_on(m, p) && fwd_ws_set_hybrid(m->ws, m->pool)) {
        st = err_set(err, SL_ENOMEM, "%s: out of memory for the hybrid step's host buffers", path);
        goto fail;
    }
    if ((st = open_rtrace(m, p, err))) goto fail;
    /* a backend without an op these layers call refuses the model now, not at its first evaluation */
    if ((st = fwd_check_ops(m->ws, &m->cfg, err))) goto fail;
    free(at);
    *out = m;
    return SL_OK;
fail:
    free(at);
    sl_model_close(m);
    return st;
}

sl_status sl_model_open(const char *path, const sl_model_params *params, sl_model **out, sl_error *err) {
    if (!params || params->backend != SL_BACKEND_AUTO) return model_open_ex(path, params, NULL, out, err);
    /* auto: the GPU when it can take the model (a refusal there is no error: the CPU takes it) */
    sl_model_params p = *params;
    sl_error gpu_err;
    p.backend = SL_BACKEND_CUDA;
    const int gpu = be_usable(SL_BACKEND_CUDA);
    if (gpu && model_open_ex(path, &p, NULL, out, &gpu_err) == SL_OK) return SL_OK;
    p.backend = SL_BACKEND_CPU;
    sl_status st = model_open_ex(path, &p, NULL, out, err);
    if (!st && gpu) snprintf((*out)->backend_note, sizeof (*out)->backend_note, "%s", gpu_err.msg);
    return st;
}

const char *sl_model_backend_note(const sl_model *m) { return m->backend_note; }

sl_backend_kind sl_model_backend(const sl_model *m) {
    return strcmp(m->be->name, "cuda") ? SL_BACKEND_CPU : SL_BACKEND_CUDA;
}

void sl_model_close(sl_model *m) {
    if (!m) return;
    fwd_ws_free(m->ws);
    rtrace_free(m->rt);
    for (int i = 0; i < m->n_vecs; i++) {
        if (m->vec_bytes && m->vec_bytes[i]) m->be->free(m->be, m->vecs[i], m->vec_bytes[i], BE_BUF_DEVICE);
        else free(m->vecs[i]);
    }
    free(m->vecs);
    free(m->vec_bytes);
    free(m->backbone);
    if (m->backbone_dev) m->be->free(m->be, m->backbone_dev, m->f.h.backbone_len + 1, BE_BUF_DEVICE);
    if (m->experts_dev) m->be->free(m->be, m->experts, m->f.h.expert_len + 1, BE_BUF_DEVICE);
    else free(m->experts);
    free(m->expert_implied);
    free(m->share_off);
    rx_client_free(m->remote); /* the ranks drop their shares */
    tier_free(m->tier); /* before the cache it reads from and the backend that owns its slots */
    cache_free(m->cache);
    be_close(m->be);
    pool_free(m->pool);
    if (m->stream_fd >= 0) close(m->stream_fd);
    slc_close(&m->f);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

const char *sl_model_errmsg(const sl_model *m) { return m ? m->err.msg : ""; }
int sl_model_n_vocab(const sl_model *m) { return m->cfg.vocab; }
int sl_model_n_ctx(const sl_model *m) { return m->cfg.max_pos; }
int sl_model_n_layers(const sl_model *m) { return m->cfg.n_layers; }

const char *sl_model_synthetic(const sl_model *m) {
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(m->f.manifest, "source");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(src, "synthetic");
    return cJSON_IsString(sh) ? sh->valuestring : NULL;
}
