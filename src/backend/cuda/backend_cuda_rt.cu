/*
 * backend_cuda_rt.cu — backend_cuda.h: buffers, copies, and cpu.c's add / add_bias / copy_rows and cpu_moe.c's
 * combine_rows in the CPU loops' order, with explicit round-to-nearest intrinsics (nothing fused).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/backend_cuda.h"

static int fail(char *msg, size_t n, const char *what, cudaError_t e) {
    if (msg && n) snprintf(msg, n, "%s: %s", what, cudaGetErrorString(e));
    return -1;
}
static int launched(char *msg, size_t n, const char *what) {
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : fail(msg, n, what, e);
}

extern "C" void *slcb_alloc(size_t bytes, int pinned) {
    void *p = NULL;
    cudaError_t e = pinned ? cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable | cudaHostAllocMapped)
                           : cudaMalloc(&p, bytes ? bytes : 1);
    return e == cudaSuccess ? p : NULL;
}

extern "C" void slcb_free(void *p, int pinned) {
    if (!p) return;
    if (pinned) cudaFreeHost(p);
    else cudaFree(p);
}

extern "C" int slcb_copy(void *dst, const void *src, size_t bytes, int wait, char *msg, size_t msglen) {
    if (!bytes) return 0;
    cudaError_t e = wait ? cudaMemcpy(dst, src, bytes, cudaMemcpyDefault)
                         : cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, 0);
    return e == cudaSuccess ? 0 : fail(msg, msglen, "cudaMemcpy", e);
}

/* ---- the copy queue: a non-blocking stream and a ring of events. Fence f is event ev[f % RING], which holds
 * it while id[f % RING] == f; an event is reused for fence f + RING only after fence f has passed, so a
 * fence no longer in the ring has passed. The compute ops run on the legacy default stream, which a
 * non-blocking stream does not synchronise with: the order comes from the events alone. ---- */
#define RING 1024

struct slcb_queue {
    cudaStream_t copy;
    cudaEvent_t ev[RING];
    unsigned long long id[RING];
    unsigned long long next; /* the next fence */
};

extern "C" slcb_queue *slcb_queue_new(char *msg, size_t msglen) {
    slcb_queue *q = (slcb_queue *)calloc(1, sizeof *q);
    if (!q) {
        if (msg && msglen) snprintf(msg, msglen, "out of host memory (CUDA copy queue)");
        return NULL;
    }
    cudaError_t e = cudaStreamCreateWithFlags(&q->copy, cudaStreamNonBlocking);
    int n = 0;
    for (; e == cudaSuccess && n < RING; n++) e = cudaEventCreateWithFlags(&q->ev[n], cudaEventDisableTiming);
    if (e != cudaSuccess) {
        fail(msg, msglen, "creating the copy stream and its events", e);
        for (int i = 0; i < n - 1; i++) cudaEventDestroy(q->ev[i]);
        if (q->copy) cudaStreamDestroy(q->copy);
        free(q);
        return NULL;
    }
    q->next = 1;
    return q;
}

extern "C" void slcb_queue_free(slcb_queue *q) {
    if (!q) return;
    cudaStreamSynchronize(q->copy);
    for (int i = 0; i < RING; i++) cudaEventDestroy(q->ev[i]);
    cudaStreamDestroy(q->copy);
    free(q);
}

/* the event of fence f while the ring holds it, else NULL (f has passed) */
static cudaEvent_t held(slcb_queue *q, unsigned long long f) {
    return f && q->id[f % RING] == f ? q->ev[f % RING] : NULL;
}

/* a new fence recorded on stream s; 0 on failure */
static unsigned long long record(slcb_queue *q, cudaStream_t s, char *msg, size_t msglen) {
    unsigned long long f = q->next, old = q->id[f % RING];
    cudaError_t e = cudaSuccess;
    if (old) e = cudaEventSynchronize(q->ev[f % RING]); /* long passed in practice: RING fences ago */
    if (e == cudaSuccess) e = cudaEventRecord(q->ev[f % RING], s);
    if (e != cudaSuccess) {
        fail(msg, msglen, "cudaEventRecord", e);
        return 0;
    }
    q->id[f % RING] = f;
    q->next++;
    return f;
}

extern "C" unsigned long long slcb_copy_async(slcb_queue *q, void *dst, const void *src, size_t bytes,
                                              unsigned long long after, char *msg, size_t msglen) {
    cudaEvent_t a = held(q, after);
    cudaError_t e = a ? cudaStreamWaitEvent(q->copy, a, 0) : cudaSuccess;
    if (e == cudaSuccess && bytes) e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, q->copy);
    if (e != cudaSuccess) {
        fail(msg, msglen, "cudaMemcpyAsync on the copy stream", e);
        return 0;
    }
    unsigned long long f = record(q, q->copy, msg, msglen);
    if (!f) return 0;
    e = cudaStreamWaitEvent(0, q->ev[f % RING], 0); /* the compute queued from now on reads dst */
    if (e != cudaSuccess) {
        fail(msg, msglen, "cudaStreamWaitEvent", e);
        return 0;
    }
    return f;
}

extern "C" unsigned long long slcb_mark(slcb_queue *q, char *msg, size_t msglen) { return record(q, 0, msg, msglen); }

extern "C" int slcb_fence_done(slcb_queue *q, unsigned long long f, int wait, char *msg, size_t msglen) {
    cudaEvent_t ev = held(q, f);
    if (!ev) return 1;
    cudaError_t e = wait ? cudaEventSynchronize(ev) : cudaEventQuery(ev);
    if (e == cudaSuccess) return 1;
    if (e == cudaErrorNotReady) return 0;
    return fail(msg, msglen, "waiting for a copy", e);
}

extern "C" int slcb_zero(void *p, size_t bytes, char *msg, size_t msglen) {
    if (!bytes) return 0;
    cudaError_t e = cudaMemsetAsync(p, 0, bytes, 0);
    return e == cudaSuccess ? 0 : fail(msg, msglen, "cudaMemset", e);
}

__global__ void k_add(float *x, const float *y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = __fadd_rn(x[i], y[i]);
}

static unsigned blocks_for(size_t n) {
    size_t b = (n + 255) / 256;
    return (unsigned)(b < 4096 ? (b ? b : 1) : 4096);
}

extern "C" int slcb_add(float *x, const float *y, size_t n, char *msg, size_t msglen) {
    if (!n) return 0;
    k_add<<<blocks_for(n), 256>>>(x, y, n);
    return launched(msg, msglen, "add launch");
}

__global__ void k_add_bias(float *x, size_t ld, const float *b, int cols) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < cols) x[(size_t)blockIdx.y * ld + i] = __fadd_rn(x[(size_t)blockIdx.y * ld + i], b[i]);
}

extern "C" int slcb_add_bias(float *x, size_t ld, const float *b, int n_rows, int cols, char *msg, size_t msglen) {
    if (n_rows <= 0 || cols <= 0) return 0;
    k_add_bias<<<dim3((unsigned)((cols + 255) / 256), (unsigned)n_rows), 256>>>(x, ld, b, cols);
    return launched(msg, msglen, "add_bias launch");
}

__global__ void k_copy_rows(float *dst, size_t ldd, const int *didx, const float *src, size_t lds, const int *sidx,
                            int cols) {
    const int r = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < cols) dst[(size_t)(didx ? didx[r] : r) * ldd + i] = src[(size_t)(sidx ? sidx[r] : r) * lds + i];
}

extern "C" int slcb_copy_rows(float *dst, size_t ldd, const int *didx, const float *src, size_t lds, const int *sidx,
                              int n, int cols, char *msg, size_t msglen) {
    if (n <= 0 || cols <= 0) return 0;
    k_copy_rows<<<dim3((unsigned)((cols + 255) / 256), (unsigned)n), 256>>>(dst, ldd, didx, src, lds, sidx, cols);
    return launched(msg, msglen, "copy_rows launch");
}

/* a thread per column, rows in increasing j (the CPU's order when two rows hit one token) */
__global__ void k_axpy_rows(float *out, int H, const int *tok, const float *w, const float *y, int cnt) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= H) return;
    for (int j = 0; j < cnt; j++) {
        float *o = out + (size_t)tok[j] * H + i;
        *o = __fadd_rn(*o, __fmul_rn(w[j], y[(size_t)j * H + i]));
    }
}

extern "C" int slcb_axpy_rows(float *out, int H, const int *tok, const float *w, const float *y, int cnt, char *msg,
                              size_t msglen) {
    if (cnt <= 0 || H <= 0) return 0;
    k_axpy_rows<<<(unsigned)((H + 255) / 256), 256>>>(out, H, tok, w, y, cnt);
    return launched(msg, msglen, "combine_rows launch");
}

__global__ void k_add_shared(float *out, const float *sh, const float *sg, int H) {
    const int t = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= H) return;
    const float g = sg ? __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-sg[t]))) : 1.0f;
    out[(size_t)t * H + i] = __fadd_rn(out[(size_t)t * H + i], __fmul_rn(g, sh[(size_t)t * H + i]));
}

extern "C" int slcb_add_shared(float *out, const float *sh, const float *sg, int n, int H, char *msg, size_t msglen) {
    if (n <= 0 || H <= 0) return 0;
    k_add_shared<<<dim3((unsigned)((H + 255) / 256), (unsigned)n), 256>>>(out, sh, sg, H);
    return launched(msg, msglen, "combine launch");
}
