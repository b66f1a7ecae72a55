/*
 * state.c — a session's state as bytes and files (sl_session_save / _load, sl_session_save_file / _load_file:
 * docs/FORMAT.md "Saved session state"), and the stale temporaries a killed writer leaves
 * (sl_remove_stale_temps). See handles.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/handles.h"
#include "util/err.h"
#include "util/fileio.h"
#include "util/xxh3.h"

/* A saved state (docs/FORMAT.md): header, state bytes, extra bytes, then xxh3-64 of all before it. */
#define STATE_MAGIC "SLUICEST"
#define STATE_VERSION 1u
typedef struct {
    char magic[8];
    uint32_t version;
    uint32_t kv_type;   /* the sessions' sl_kv_type K | (K ^ V) << 8 of keys K and values V: the type when both are
                           one (0, f32, in states written before KV types existed) */
    uint64_t model_id;  /* the container's manifest hash with its expert checksums: same weights, same id */
    int32_t n_past, n_layers;
    uint64_t state_len, extra_len;
} state_hdr;

/* The header's KV word of m's sessions (state_hdr kv_type). */
static uint32_t kv_word(const sl_model *m) { return (uint32_t)m->kv_type | ((uint32_t)m->kv_type ^ (uint32_t)m->kv_type_v) << 8; }

static uint64_t model_id(const sl_model *m) {
    size_t n = (size_t)m->f.h.n_moe_layers * (size_t)m->f.h.n_experts;
    return m->f.expert_hash ? XXH3_64bits_withSeed(m->f.expert_hash, n * sizeof(uint64_t), m->f.h.manifest_hash)
                            : m->f.h.manifest_hash;
}

static sl_status state_blob(const sl_session *s, const void *extra, size_t extra_len, void **blob, size_t *len) {
    state_hdr h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, STATE_MAGIC, 8);
    h.version = STATE_VERSION;
    h.model_id = model_id(s->m);
    h.n_past = fwd_seq_n_past(s->sq);
    h.n_layers = s->m->cfg.n_layers;
    h.kv_type = kv_word(s->m);
    h.state_len = fwd_seq_state_bytes(s->sq);
    h.extra_len = extra ? extra_len : 0;
    size_t total = sizeof h + h.state_len + h.extra_len + 8;
    char *b = malloc(total);
    if (!b) return SL_ENOMEM;
    memcpy(b, &h, sizeof h);
    fwd_seq_save(s->sq, b + sizeof h);
    if (h.extra_len) memcpy(b + sizeof h + h.state_len, extra, h.extra_len);
    uint64_t x = XXH3_64bits(b, total - 8);
    memcpy(b + total - 8, &x, 8);
    *blob = b;
    *len = total;
    return SL_OK;
}

sl_status sl_session_save(const sl_session *s, void **blob, size_t *len) {
    *blob = NULL;
    *len = 0;
    return state_blob(s, NULL, 0, blob, len);
}

/* Checks a blob and loads it; *extra / *extra_len point into the blob. SL_OK, or the failure with err naming
 * what (the file or "state") and why. */
static sl_status state_load(sl_session *s, const void *blob, size_t len, const char *what, const void **extra,
                            size_t *extra_len, sl_error *err) {
    state_hdr h;
    if (len < sizeof h + 8) return err_set(err, SL_EFORMAT, "%s: not a sluice session state (%zu bytes)", what, len);
    memcpy(&h, blob, sizeof h);
    uint64_t x;
    memcpy(&x, (const char *)blob + len - 8, 8);
    if (memcmp(h.magic, STATE_MAGIC, 8) || h.version != STATE_VERSION)
        return err_set(err, SL_EFORMAT, "%s: not a sluice session state (bad magic or version)", what);
    if (h.state_len > len || h.extra_len > len || sizeof h + h.state_len + h.extra_len + 8 != len)
        return err_set(err, SL_EFORMAT, "%s: session state is truncated or has trailing bytes", what);
    if (XXH3_64bits(blob, len - 8) != x) return err_set(err, SL_ECHECKSUM, "%s: session state fails its checksum", what);
    if (h.model_id != model_id(s->m) || h.n_layers != s->m->cfg.n_layers)
        return err_set(err, SL_EMISMATCH, "%s: the session state was saved with another model", what);
    if (h.kv_type != kv_word(s->m)) {
        const sl_kv_type k = (sl_kv_type)(h.kv_type & 0xff), v = (sl_kv_type)((h.kv_type & 0xff) ^ (h.kv_type >> 8));
        return err_set(err, SL_EMISMATCH, "%s: the session state has a %s%s%s KV cache, this model's sessions %s%s%s (--kv)",
                       what, sl_kv_type_name(k), v != k ? "," : "", v != k ? sl_kv_type_name(v) : "",
                       sl_kv_type_name(s->m->kv_type), s->m->kv_type_v != s->m->kv_type ? "," : "",
                       s->m->kv_type_v != s->m->kv_type ? sl_kv_type_name(s->m->kv_type_v) : "");
    }
    sl_status st = fwd_seq_load(s->sq, h.n_past, (const char *)blob + sizeof h, h.state_len);
    if (st == SL_ERANGE)
        return err_set(err, st, "%s: the saved state has %d positions, more than the session's %d", what, h.n_past,
                      s->n_ctx);
    if (st) return err_set(err, st, "%s: the session state does not match the model's layout", what);
    session_forget_tokens(s, h.n_past == 0); /* a state holds no tokens: no sl_session_shift after it */
    if (extra) *extra = (const char *)blob + sizeof h + h.state_len;
    if (extra_len) *extra_len = h.extra_len;
    return SL_OK;
}

sl_status sl_session_load(sl_session *s, const void *blob, size_t len) {
    return state_load(s, blob, len, "state", NULL, NULL, &s->err);
}

sl_status sl_session_save_file(const sl_session *s, const char *path, const void *extra, size_t extra_len,
                               sl_error *err) {
    void *b = NULL;
    size_t n = 0;
    char *tmp = NULL;
    int fd = -1;
    sl_status st = SL_OK;
    if (state_blob(s, extra, extra_len, &b, &n) || !(tmp = malloc(strlen(path) + 32))) {
        st = err_set(err, SL_ENOMEM, "out of memory");
        goto done;
    }
    sprintf(tmp, "%s.tmp.%d", path, (int)getpid());
    fd = open(tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600); /* it holds a conversation */
    st = fd < 0 ? err_set(err, errno == ENOSPC ? SL_ENOSPC : SL_EIO, "%s: %s", tmp, strerror(errno))
                : fio_pwrite_all(fd, b, n, 0, tmp, err);
    if (fd >= 0 && st) close(fd);
    if (fd >= 0 && !st) st = fio_commit(fd, n, tmp, path, err);
    if (st && fd >= 0) unlink(tmp);
done:
    free(tmp);
    free(b);
    return st;
}

sl_status sl_session_load_file(sl_session *s, const char *path, void **extra, size_t *extra_len, sl_error *err) {
    if (extra) *extra = NULL;
    if (extra_len) *extra_len = 0;
    char *b = NULL;
    size_t n = 0, xl = 0;
    const void *x = NULL;
    sl_status st = fio_read_file(path, &b, &n, err);
    if (st || (st = state_load(s, b, n, path, &x, &xl, err))) goto done;
    if (extra && xl) {
        if (!(*extra = malloc(xl + 1))) {
            st = err_set(err, SL_ENOMEM, "out of memory");
            goto done;
        }
        memcpy(*extra, x, xl);
        ((char *)*extra)[xl] = 0;
        *extra_len = xl;
    }
done:
    free(b);
    return st;
}

int sl_remove_stale_temps(const char *path, char **removed) { return fio_remove_stale_temps(path, removed); }
