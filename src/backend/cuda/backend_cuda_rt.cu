/*
 * backend_cuda_rt.cu — backend_cuda.h: buffers, copies, and cpu.c's add / add_bias / copy_rows and cpu_moe.c's
 * combine_rows in the CPU loops' order, with explicit round-to-nearest intrinsics (nothing fused); the recorded
 * decode steps (CUDA graphs) of backend_cuda.c. The ops' kernels wait (pdl_wait) before their first global access and
 * are launched by cuda_pdl.cuh pdl_launch (a decode step's overlapped launches; k_set_int only runs in recorded steps).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_pdl.cuh"

extern "C" {
void *slcu_cur_stream; /* cuda.h: NULL, the legacy default stream, but while a step is recorded */
int slcu_decode_kernels = 1;
}

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
    cudaError_t e = cudaMemsetAsync(p, 0, bytes, SLS);
    return e == cudaSuccess ? 0 : fail(msg, msglen, "cudaMemset", e);
}

__global__ void k_add(float *x, const float *y, size_t n) {
    pdl_wait();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = __fadd_rn(x[i], y[i]);
}

static unsigned blocks_for(size_t n) {
    size_t b = (n + 255) / 256;
    return (unsigned)(b < 4096 ? (b ? b : 1) : 4096);
}

extern "C" int slcb_add(float *x, const float *y, size_t n, char *msg, size_t msglen) {
    if (!n) return 0;
    pdl_launch(k_add, blocks_for(n), 256, 0, SLS, x, y, n);
    return launched(msg, msglen, "add launch");
}

__global__ void k_add_bias(float *x, size_t ld, const float *b, int cols) {
    pdl_wait();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < cols) x[(size_t)blockIdx.y * ld + i] = __fadd_rn(x[(size_t)blockIdx.y * ld + i], b[i]);
}

extern "C" int slcb_add_bias(float *x, size_t ld, const float *b, int n_rows, int cols, char *msg, size_t msglen) {
    if (n_rows <= 0 || cols <= 0) return 0;
    pdl_launch(k_add_bias, dim3((unsigned)((cols + 255) / 256), (unsigned)n_rows), 256, 0, SLS, x, ld, b, cols);
    return launched(msg, msglen, "add_bias launch");
}

__global__ void k_copy_rows(float *dst, size_t ldd, const int *didx, const float *src, size_t lds, const int *sidx,
                            int cols) {
    pdl_wait();
    const int r = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < cols) dst[(size_t)(didx ? didx[r] : r) * ldd + i] = src[(size_t)(sidx ? sidx[r] : r) * lds + i];
}

extern "C" int slcb_copy_rows(float *dst, size_t ldd, const int *didx, const float *src, size_t lds, const int *sidx,
                              int n, int cols, char *msg, size_t msglen) {
    if (n <= 0 || cols <= 0) return 0;
    pdl_launch(k_copy_rows, dim3((unsigned)((cols + 255) / 256), (unsigned)n), 256, 0, SLS, dst, ldd, didx, src, lds, sidx, cols);
    return launched(msg, msglen, "copy_rows launch");
}

/* a thread per column, rows in increasing j (the CPU's order when two rows hit one token) */
__global__ void k_axpy_rows(float *out, int H, const int *tok, const float *w, const float *y, int cnt) {
    pdl_wait();
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
    pdl_launch(k_axpy_rows, (unsigned)((H + 255) / 256), 256, 0, SLS, out, H, tok, w, y, cnt);
    return launched(msg, msglen, "combine_rows launch");
}

__global__ void k_add_shared(float *out, const float *sh, const float *sg, int H) {
    pdl_wait();
    const int t = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= H) return;
    const float g = sg ? __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-sg[t]))) : 1.0f;
    out[(size_t)t * H + i] = __fadd_rn(out[(size_t)t * H + i], __fmul_rn(g, sh[(size_t)t * H + i]));
}

extern "C" int slcb_add_shared(float *out, const float *sh, const float *sg, int n, int H, char *msg, size_t msglen) {
    if (n <= 0 || H <= 0) return 0;
    pdl_launch(k_add_shared, dim3((unsigned)((H + 255) / 256), (unsigned)n), 256, 0, SLS, out, sh, sg, H);
    return launched(msg, msglen, "combine launch");
}

/* ---- recorded decode steps: a blocking stream (ordered with the legacy default stream both ways, so work
 * queued before and after a replay needs no event), and per (key, bucket) slot a graph of the step's kernels,
 * captured on the stream the first time and replayed after. The captured kernels read the step's position
 * from pos (slcu_set_step), which a one-thread kernel sets before each launch. ---- */
#define NGRAPH 8

struct slcb_graphs {
    cudaStream_t s;
    int *pos; /* device */
    struct {
        unsigned long long key;
        int bucket, failed;
        cudaGraphExec_t exec;
    } slot[NGRAPH];
    int next, cur, mode; /* mode: 0 none, 1 replaying, 2 capturing */
};

extern "C" slcb_graphs *slcb_graphs_new(void) {
    slcb_graphs *g = (slcb_graphs *)calloc(1, sizeof *g);
    if (!g) return NULL;
    if (cudaStreamCreate(&g->s) != cudaSuccess) {
        free(g);
        return NULL;
    }
    if (cudaMalloc((void **)&g->pos, 256) != cudaSuccess) {
        cudaStreamDestroy(g->s);
        free(g);
        return NULL;
    }
    return g;
}

extern "C" void slcb_graphs_clear(slcb_graphs *g) {
    if (!g) return;
    for (int i = 0; i < NGRAPH; i++) {
        if (g->slot[i].exec) cudaGraphExecDestroy(g->slot[i].exec);
        g->slot[i].exec = NULL, g->slot[i].key = 0, g->slot[i].failed = 0;
    }
}

extern "C" void slcb_graphs_free(slcb_graphs *g) {
    if (!g) return;
    cudaStreamSynchronize(g->s);
    slcb_graphs_clear(g);
    cudaFree(g->pos);
    cudaStreamDestroy(g->s);
    free(g);
}

extern "C" const int *slcb_graphs_pos(const slcb_graphs *g) { return g->pos; }

extern "C" int slcb_step_begin(slcb_graphs *g, unsigned long long key, int bucket) {
    int i = 0;
    while (i < NGRAPH && !(g->slot[i].key == key && g->slot[i].bucket == bucket)) i++;
    if (i < NGRAPH && g->slot[i].exec) {
        g->cur = i, g->mode = 1;
        return 1;
    }
    if (i < NGRAPH) { /* a capture failed: once more (the first step may build tables, not the next), then never */
        if (g->slot[i].failed >= 2) return 0;
        g->cur = i;
    } else {
        i = g->cur = g->next, g->next = (g->next + 1) % NGRAPH;
        if (g->slot[i].exec) cudaGraphExecDestroy(g->slot[i].exec);
        g->slot[i].exec = NULL, g->slot[i].key = key, g->slot[i].bucket = bucket, g->slot[i].failed = 0;
    }
    if (cudaStreamBeginCapture(g->s, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        cudaGetLastError();
        g->slot[i].failed = 2;
        return 0;
    }
    slcu_cur_stream = g->s;
    g->mode = 2;
    return 2;
}

__global__ void k_set_int(int *p, int v) { *p = v; }

extern "C" int slcb_step_end(slcb_graphs *g, int ok, int pos, char *msg, size_t msglen) {
    const int mode = g->mode;
    g->mode = 0;
    if (!mode) return 0;
    if (mode == 2) {
        slcu_cur_stream = NULL;
        cudaGraph_t gr = NULL;
        cudaError_t e = cudaStreamEndCapture(g->s, &gr);
        if (ok && e == cudaSuccess && gr) e = cudaGraphInstantiate(&g->slot[g->cur].exec, gr, 0);
        if (gr) cudaGraphDestroy(gr);
        if (!ok || e != cudaSuccess || !g->slot[g->cur].exec) { /* nothing of the step ran: the caller runs it again */
            cudaGetLastError();
            g->slot[g->cur].failed++;
            g->slot[g->cur].exec = NULL;
            return 1;
        }
    } else if (!ok) {
        return 1; /* a replay skipped the ops: nothing ran */
    }
    k_set_int<<<1, 1, 0, g->s>>>(g->pos, pos);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaGraphLaunch(g->slot[g->cur].exec, g->s);
    return e == cudaSuccess ? 0 : fail(msg, msglen, "launching a recorded decode step", e);
}
