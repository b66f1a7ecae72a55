/*
 * backend.c — the backends this build has (backend.h): registration and the checks every backend shares.
 * The one #ifdef of the seam is here: a build with `make CUDA=1` (SL_CUDA) knows the CUDA tier.
 */
#include <stdio.h>

#include "backend/backend.h"
#include "sluice.h"
#ifdef SL_CUDA
#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/cuda.h"
#endif

int be_open(int kind, sl_pool *pool, sl_backend **out, char *err, size_t errlen) {
    *out = NULL;
    if (kind == SL_BACKEND_CPU) {
        *out = be_cpu_new(NULL, pool);
        if (*out) return 0;
        snprintf(err, errlen, "out of memory for the CPU backend");
        return SL_ENOMEM;
    }
    if (kind != SL_BACKEND_CUDA) {
        snprintf(err, errlen, "backend %d: neither SL_BACKEND_CPU nor SL_BACKEND_CUDA", kind);
        return SL_EINVAL;
    }
#ifdef SL_CUDA
    char msg[256];
    if (slcu_init(msg, sizeof msg)) { /* its message starts "no usable CUDA device" */
        snprintf(err, errlen, "%s", msg);
        return SL_EUNSUPPORTED;
    }
    if ((*out = be_cuda_new(pool))) return 0;
    snprintf(err, errlen, "out of memory for the CUDA backend");
    return SL_ENOMEM;
#else
    snprintf(err, errlen, "built without CUDA (rebuild with make CUDA=1)");
    return SL_EUNSUPPORTED;
#endif
}

void be_close(sl_backend *be) {
    if (be) be->destroy(be);
}

int be_check_mat(const sl_backend *be, const sl_mat *m) {
    return m->dtype > DT_NONE && m->dtype < DT_COUNT && be->matmul[m->dtype] ? 0 : SL_EUNSUPPORTED;
}
