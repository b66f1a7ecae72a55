/*
 * handles.h — the model and session handles behind the public API (include/sluice.h), shared by the engine's
 * files (private to src/engine/): open.c opens and closes a model, backbone.c loads and binds its backbone,
 * experts.c sets up its expert source (resident or streamed), session.c runs sessions and batches, state.c
 * saves and loads their state, stats.c reports what a model did.
 *
 * Ownership: the model owns the backbone buffer, the f32 vectors, the expert buffer or cache; sessions borrow
 * the model and must be freed before it. Evaluations are serialised per model (mu), since the cache and the
 * thread pool serve one request at a time.
 */
#ifndef SL_ENGINE_HANDLES_H
#define SL_ENGINE_HANDLES_H

#include <pthread.h>
#include <stdint.h>

#include "engine/engine.h"
#include "family/tensors.h"
#include "format/container.h"
#include "model/fwd_internal.h"
#include "model/model.h"
#include "model/rtrace.h"
#include "stream/cache.h"
#include "stream/tier.h"

struct sl_model {
    slc_file f;
    fam_config cfg;
    fam_weights w;
    uint8_t *backbone;    /* the backbone section, 4096-aligned */
    float **vecs;         /* owned f32 vectors (backend memory: vec_bytes each when the backend is not the host) */
    size_t *vec_bytes;
    int n_vecs;
    uint8_t *backbone_dev; /* the backbone section in the backend's memory (!be->is_host), or NULL */
    uint8_t *experts;     /* the whole expert section (resident; in the backend's memory when experts_dev) */
    int experts_dev;
    uint8_t *expert_implied; /* [n_moe_layers][n_experts] (resident): 1 when every q8/q4 part's biases are implied */
    uint64_t *share_off;  /* an expert rank's resident share: [n_moe_layers][n_experts] offsets in experts, or
                             UINT64_MAX for an expert another rank holds (engine_open_share); NULL otherwise */
    uint64_t share_experts, share_bytes;
    struct rx_client *remote; /* rank 0 of experts on other ranks (sl_model_params.remote; remote.c), or NULL */
    cache *cache;         /* streaming mode */
    tier *tier;           /* the device tier over src (vram_bytes > 0), or NULL */
    int stream_fd;        /* descriptor the cache reads from (-1 when resident) */
    const char *io_engine, *io_mode;
    tn_expert_src src;
    pool_t *pool;
    be_backend *be;       /* what computes (src/backend/backend.h); the workspace, states and cache slots are its */
    fwd_ws *ws;           /* the evaluation workspace; mu makes evaluations take turns in it */
    rtrace *rt;           /* the routing trace ws replays or records (sl_model_params.routing_trace), or NULL */
    sl_kv_type kv_type, kv_type_v; /* its sessions' K and V caches (sl_model_params.kv_type, kv_type_v) */
    int n_ctx;            /* positions of a session made with n_ctx 0 (sl_model_params.n_ctx, or cfg.max_pos) */
    fwd_kv_pool kv_pool;  /* the KV bytes its sessions hold, and their limit (sl_model_set_kv_pool) */
    pthread_mutex_t mu;
    double eval_s;
    uint64_t tokens;
    sl_error err; /* the last failure of a call without an sl_error of its own (sl_model_errmsg) */
    /* SL_BACKEND_AUTO on the CPU with a usable GPU: the GPU's refusal (sl_model_backend_note), else "" */
    char backend_note[sizeof ((sl_error *)0)->msg];
};

struct sl_session {
    sl_model *m;
    fwd_seq *sq;
    int n_ctx;
    /* the tokens of its positions, for sl_session_shift (toks_ok 0: not known: after a load, or out of memory) */
    int32_t *toks;
    int n_toks, cap_toks, toks_ok;
    sl_error err; /* the last evaluation's or load's failure (sl_session_errmsg) */
};

/* The session's record of its tokens emptied (session.c): known 1 for a state of no positions, else 0 (a loaded
 * state's tokens are not known, so sl_session_shift refuses it). */
void session_forget_tokens(sl_session *s, int known);

/* n bytes (freed with free()) on 2 MiB boundaries, asked to be backed by 2 MiB pages (backbone.c). NULL: no
 * memory. */
void *engine_huge_alloc(uint64_t n);

/* Reads the backbone section of m->f into memory, checks every tensor's checksum, binds the n tensors of the
 * family table at (family/tensors.h) into m->w and, for a backend whose memory is not the host's, moves the
 * section there (backbone.c). m->cfg, m->be are set; what it allocates is m's, freed by sl_model_close. */
sl_status engine_load_backbone(sl_model *m, const char *path, const arch_tensor *at, int n, sl_error *err);

/* The expert source m->src (experts.c): every expert block read, checked and kept (resident), or the expert
 * cache over a descriptor of its own (streamed, p's I/O engine, mode and budget; fault, when not NULL, wraps
 * the engine). What it makes is m's, freed by sl_model_close. */
sl_status engine_open_resident(sl_model *m, const char *path, sl_error *err);
sl_status engine_open_stream(sl_model *m, const char *path, const sl_model_params *p, const io_fault_cfg *fault,
                             sl_error *err);
/* An expert rank's resident share (experts.c): the blocks own[slot * E + e] marks, read and checked. */
sl_status engine_open_share(sl_model *m, const char *path, const uint8_t *own, sl_error *err);
/* Rank 0 of a model whose experts live on p->remote's other ranks (remote.c): their shares opened there (by
 * p->pin_profile's load when given, else by count), m->remote and an expert source that holds nothing here. */
sl_status engine_open_remote(sl_model *m, const char *path, const sl_model_params *p, sl_error *err);

#endif
