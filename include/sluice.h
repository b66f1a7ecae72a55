/*
 * sluice.h — the one public header of libsluice.
 *
 * sluice runs Mixture-of-Experts language models from a packed `.sluice` container: the dense backbone
 * is resident, the routed experts are read from the file as the router picks them.
 *
 * Conventions (libuv / SQLite style):
 *  - every function that can fail returns an sl_status (0 = SL_OK, negative = error);
 *  - results come back through out-params, valid only on SL_OK;
 *  - functions without a handle take an `sl_error *` that receives a one-line message naming what was
 *    wrong (file, tensor, layer, expert, offset); handles keep their own last message
 *    (sl_model_errmsg);
 *  - the library never prints and never exits;
 *  - destroy functions accept NULL.
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SL_VERSION_STRING "0.1.0"

/* X(name, code, text). New codes go at the end. */
#define SL_STATUS_LIST(X)                                        \
    X(OK, 0, "ok")                                               \
    X(EINVAL, -1, "invalid argument")                            \
    X(EIO, -2, "input/output error")                             \
    X(ENOMEM, -3, "out of memory")                               \
    X(EFORMAT, -4, "malformed file")                             \
    X(ECONFIG, -5, "bad model configuration")                    \
    X(EUNSUPPORTED, -6, "unsupported")                           \
    X(ECHECKSUM, -7, "checksum mismatch")                        \
    X(ENOSPC, -8, "no space left on device")                     \
    X(ERANGE, -9, "value out of range")                          \
    X(ENOENT, -10, "no such file")                               \
    X(EMISMATCH, -11, "content differs from source")             \
    X(ECANCELED, -12, "canceled")

typedef enum {
#define SL_STATUS_ENUM(name, code, text) SL_##name = code,
    SL_STATUS_LIST(SL_STATUS_ENUM)
#undef SL_STATUS_ENUM
} sl_status;

/* Static text for a status code; never NULL. */
const char *sl_strerror(sl_status st);

/* Error detail for calls that have no handle yet. */
typedef struct sl_error {
    sl_status status;
    char msg[768];
} sl_error;

/* ---------------------------------------------------------------------------------------------- */
/* Packing a Hugging Face checkpoint into a .sluice container                                      */

typedef enum {
    SL_QUANT_KEEP = 0, /* store each tensor in its source dtype (FP8 sources become f32) */
    SL_QUANT_F32 = 1,
    SL_QUANT_BF16 = 2,
} sl_quant;

/* Progress callback: bytes written so far out of total; return non-zero to cancel. */
typedef int (*sl_progress_fn)(void *user, uint64_t done, uint64_t total);

typedef struct sl_pack_params {
    sl_quant quant;
    int hash_sources;        /* 1: xxh3-64 of every source file in the manifest (default 1) */
    sl_progress_fn progress; /* may be NULL */
    void *progress_user;
} sl_pack_params;

sl_pack_params sl_pack_params_default(void);

/* Packs the checkpoint directory `src_dir` (config.json + *.safetensors [+ index] [+ tokenizer files])
 * into `out_path`. Writes `out_path.tmp.<pid>` and renames it over `out_path` only when complete; on
 * any error the temporary file is removed and `out_path` is untouched. */
sl_status sl_pack(const char *src_dir, const char *out_path, const sl_pack_params *params, sl_error *err);

/* Verifies every checksum in a container; with `source_dir` non-NULL, also re-derives every tensor
 * from the checkpoint and compares byte for byte. On a mismatch returns SL_ECHECKSUM or SL_EMISMATCH
 * with the first bad tensor or expert (layer, index, file offset) in err. */
sl_status sl_verify(const char *path, const char *source_dir, sl_progress_fn progress, void *user, sl_error *err);

/* Describes a container as JSON (architecture, dimensions, layer types, expert layout, sizes).
 * *out_json is malloc'ed; the caller frees it. */
sl_status sl_info_json(const char *path, char **out_json, sl_error *err);

/* ---------------------------------------------------------------------------------------------- */
/* Models and sessions                                                                            */

typedef struct sl_model sl_model;
typedef struct sl_session sl_session;

typedef struct sl_model_params {
    int n_threads; /* 0 = number of online cores */
} sl_model_params;

sl_model_params sl_model_params_default(void);

/* Opens a container: backbone and experts into RAM. On error *out is NULL and err says why. */
sl_status sl_model_open(const char *path, const sl_model_params *params, sl_model **out, sl_error *err);
void sl_model_close(sl_model *model);

/* The model's last error message ("" if none). Valid until the next call on the model. */
const char *sl_model_errmsg(const sl_model *model);

int sl_model_n_vocab(const sl_model *model);
int sl_model_n_ctx(const sl_model *model); /* maximum positions */

/* A session holds the per-sequence state: KV cache (attention layers), conv and recurrent state
 * (DeltaNet layers). One session is used by one thread at a time. */
sl_status sl_session_new(sl_model *model, int n_ctx, sl_session **out);
void sl_session_free(sl_session *session);
void sl_session_reset(sl_session *session);
int sl_session_n_past(const sl_session *session);

/* Evaluates n_tokens more tokens after those already in the session. When logits is non-NULL it
 * receives float32 logits: [n_tokens][vocab] if all_logits, else [vocab] for the last token only.
 * Errors (token id out of range, context full, n_tokens < 1) leave the session unchanged. */
/* The session's last error message ("" if none). */
const char *sl_session_errmsg(const sl_session *session);

sl_status sl_session_eval(sl_session *session, const int32_t *tokens, int n_tokens, float *logits,
                          int all_logits);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_H */
