/*
 * backend.c — the backends this build has (backend.h): registration and the checks every backend shares.
 * The one #ifdef of the seam is here: a build with `make CUDA=1` (SL_CUDA) knows the CUDA tier.
 */
#include <stdio.h>

#include "backend/backend.h"
#include "sluice.h"
#include "util/err.h"
#ifdef SL_CUDA
#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/cuda.h"
#endif

#ifdef SL_CUDA
/* The CUDA backend's ffn_host (backend.h): a q8/q4 SwiGLU expert on int8 activations in the device's arithmetic
 * on the host's threads (kernels_dev.c), bitwise its ffn; anything else is refused. */
static sl_status cuda_ffn_host(be_backend *be, pool_t *pool, const be_ffn *f) {
    (void)be;
    if (f->kind != BE_FFN_SWIGLU || !f->int8 || !f->x->int8) return SL_EUNSUPPORTED;
    return kern_ffn_dev(pool, f->w, f->x, f->inter, f->g, f->u, f->mid_buf, f->y, f->ldy);
}

/* ffn_host_multi: every expert as cuda_ffn_host takes it, or none (SL_EUNSUPPORTED) */
static sl_status cuda_ffn_host_multi(be_backend *be, pool_t *pool, const be_ffn *f, int n) {
    (void)be;
    kern_ffn_arg a[32];
    for (int i = 0; i < n; i++)
        if (f[i].kind != BE_FFN_SWIGLU || !f[i].int8 || !f[i].x->int8 || f[i].inter != f[0].inter ||
            !kern_ffn_dev_ok(f[i].w, f[i].inter) || f[i].w->down.rows != f[0].w->down.rows)
            return SL_EUNSUPPORTED;
    sl_status st = SL_OK;
    for (int i0 = 0; !st && i0 < n; i0 += 32) { /* 32 experts a call */
        const int m = n - i0 < 32 ? n - i0 : 32;
        for (int i = 0; i < m; i++) {
            const be_ffn *fi = &f[i0 + i];
            a[i] = (kern_ffn_arg){fi->w, fi->x, fi->g, fi->u, fi->mid_buf, fi->y, fi->ldy};
        }
        st = kern_ffn_dev_multi(pool, a, m, f[0].inter);
    }
    return st;
}

static void cuda_mem_info(be_backend *be, uint64_t *free_bytes, uint64_t *total_bytes) {
    (void)be;
    char name[8];
    *free_bytes = *total_bytes = 0;
    slcu_device_info(name, sizeof name, total_bytes, free_bytes);
}
#endif

sl_status be_open(int kind, pool_t *pool, be_backend **out, sl_error *err) {
    *out = NULL;
    if (kind == SL_BACKEND_CPU) {
        *out = be_cpu_new(NULL, pool);
        return *out ? SL_OK : err_set(err, SL_ENOMEM, "out of memory for the CPU backend");
    }
    if (kind != SL_BACKEND_CUDA) return err_set(err, SL_EINVAL, "backend %d: neither SL_BACKEND_CPU nor SL_BACKEND_CUDA", kind);
#ifdef SL_CUDA
    char msg[256]; /* the CUDA runtime's side (.cu) keeps C++-friendly char buffers: its one crossing */
    if (slcu_init(msg, sizeof msg)) return err_set(err, SL_EUNSUPPORTED, "%s", msg); /* "no usable CUDA device ..." */
    *out = be_cuda_new(pool);
    if (*out) (*out)->ffn_host = cuda_ffn_host, (*out)->ffn_host_multi = cuda_ffn_host_multi, (*out)->mem_info = cuda_mem_info;
    return *out ? SL_OK : err_set(err, SL_ENOMEM, "out of memory for the CUDA backend");
#else
    return err_set(err, SL_EUNSUPPORTED, "built without CUDA (rebuild with make CUDA=1)");
#endif
}

int be_usable(int kind) {
    if (kind == SL_BACKEND_CPU) return 1;
#ifdef SL_CUDA
    char msg[256];
    return kind == SL_BACKEND_CUDA && slcu_init(msg, sizeof msg) == 0;
#else
    return 0;
#endif
}

int be_kv_takes(const be_backend *be, sl_kv_type t) {
    const unsigned have = be->kv_types ? be->kv_types : 1u << SL_KV_F32;
    return (int)t >= 0 && t < SL_KV_COUNT && (have >> t & 1u);
}

void be_close(be_backend *be) {
    if (be) be->destroy(be);
}

sl_status be_check_mat(const be_backend *be, const tn_mat *m) {
    return m->dtype > DT_NONE && m->dtype < DT_COUNT && be->matmul[m->dtype] ? SL_OK : SL_EUNSUPPORTED;
}

sl_status be_sync(be_backend *be, sl_error *err) {
    sl_status st = be->sync(be);
    return st ? err_set(err, st, "%s backend: %s", be->name, be->errmsg(be)) : SL_OK;
}

sl_status be_check(be_backend *be, sl_error *err) {
    sl_status st = be->check ? be->check(be) : be->sync(be);
    return st ? err_set(err, st, "%s backend: %s", be->name, be->errmsg(be)) : SL_OK;
}
