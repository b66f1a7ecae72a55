/*
 * backend_cuda.h — the CUDA runtime calls and element-wise kernels (backend_cuda_rt.cu) of the CUDA table
 * (backend_cuda.c), on the default stream; 0, or -1 with a message. Only for src/backend/cuda/.
 */
#ifndef SL_BACKEND_CUDA_RT_H
#define SL_BACKEND_CUDA_RT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The table, after slcu_init; pool: the routing CPU backend's. NULL: no memory. */
struct be_backend;
struct pool_t;
struct be_backend *be_cuda_new(struct pool_t *pool);

/* VRAM (pinned 0), or page-locked host memory kernels can read (pinned 1, cudaHostAlloc); NULL: none. */
void *slcb_alloc(size_t bytes, int pinned);
void slcb_free(void *p, int pinned);
/* Any direction (unified addressing); wait: return once the bytes have arrived. */
int slcb_copy(void *dst, const void *src, size_t bytes, int wait, char *msg, size_t msglen);
/* The copy queue (backend.h copy_async / mark / fence_done): host -> device copies on a stream of their own,
 * ordered against the compute on the default stream by events; fences as backend.h's. slcb_fence_done: 1
 * passed, 0 not yet, -1 failed (message). */
typedef struct slcb_queue slcb_queue;
slcb_queue *slcb_queue_new(char *msg, size_t msglen);
void slcb_queue_free(slcb_queue *q);
unsigned long long slcb_copy_async(slcb_queue *q, void *dst, const void *src, size_t bytes, unsigned long long after,
                                   char *msg, size_t msglen);
unsigned long long slcb_mark(slcb_queue *q, char *msg, size_t msglen);
int slcb_fence_done(slcb_queue *q, unsigned long long f, int wait, char *msg, size_t msglen);
int slcb_zero(void *p, size_t bytes, char *msg, size_t msglen);

int slcb_add(float *x, const float *y, size_t n, char *msg, size_t msglen);
int slcb_add_bias(float *x, size_t ld, const float *b, int n_rows, int cols, char *msg, size_t msglen);
/* add, add_bias, copy_rows as backend.h's ops, index arrays in device memory */
int slcb_copy_rows(float *dst, size_t ldd, const int *didx, const float *src, size_t lds, const int *sidx, int n,
                   int cols, char *msg, size_t msglen);
/* out[tok[j]*H + i] += w[j] * y[j*H + i], j = 0 .. cnt-1 in turn (tok, w device). */
int slcb_axpy_rows(float *out, int H, const int *tok, const float *w, const float *y, int cnt, char *msg,
                   size_t msglen);
/* out[t] += (sg ? sigmoid(sg[t]) : 1) * sh[t], t < n (a combine without routed weights). */
int slcb_add_shared(float *out, const float *sh, const float *sg, int n, int H, char *msg, size_t msglen);

/* Recorded decode steps (CUDA graphs, backend_cuda.c step_begin / step_end): per (key, bucket) the kernels of
 * one step, captured once on a stream of their own and replayed; a capture that fails (an op queued elsewhere
 * or waiting for the host) marks its slot so that the step runs as usual from then on. NULL: no memory. */
typedef struct slcb_graphs slcb_graphs;
slcb_graphs *slcb_graphs_new(void);
void slcb_graphs_free(slcb_graphs *g);
void slcb_graphs_clear(slcb_graphs *g); /* forgets every recorded step (the weights or tables they read changed) */
const int *slcb_graphs_pos(const slcb_graphs *g); /* the device int the recorded kernels read the position from */
/* 2: capturing (slcu_cur_stream is the graphs' stream: queue the step's ops), 1: replaying (skip the ops: the
 * graph has them), 0: run the step as usual. */
int slcb_step_begin(slcb_graphs *g, unsigned long long key, int bucket);
/* Ends the step begun: ok 0 (the forward pass gave up) discards it. 0: the step was launched (position pos), or
 * there was none; 1: nothing of it ran (the capture failed or was discarded): run it again as usual; -1: the
 * launch failed (message). */
int slcb_step_end(slcb_graphs *g, int ok, int pos, char *msg, size_t msglen);

/* backend_cuda_tier.c: the batches of experts its moe_batch has run in this process so far (tests/cuda/test_model.c
 * checks that SLUICE_CUDA_TIER_GEMM=1, the default, took a fixture's streamed prefill) */
unsigned long long slcb_tier_batches(void);

#ifdef __cplusplus
}
#endif

#endif
