/*
 * cuda.h — the CUDA tier's kernels (issue 13), a C interface over the .cu files of src/backend/cuda/, built only with
 * `make CUDA=1` (nvcc -arch=sm_90 by default, CUDA_ARCH to change it). Matrices are the container's
 * layouts as they are (src/quant/quant.h: f32, bf16, f16, and the MLX group-affine q8 / q4), in device
 * memory; activations are f32. Every kernel sums in a fixed order that depends only on the shapes, so
 * results are bitwise repeatable run to run and independent of where a weight came from (VRAM cache,
 * a copy from pinned RAM): streamed equals resident on the GPU.
 * Functions return 0, or -1 with a message in msg (no CUDA device, no driver, out of device memory, a
 * launch failure); none aborts or prints.
 */
#ifndef SL_BACKEND_CUDA_H
#define SL_BACKEND_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "util/dtype.h" /* a C header: its functions have C linkage */

/* A matrix in device memory: the sl_mat fields the kernels read (src/model/model.h). */
typedef struct slcu_mat {
    const void *data;   /* f32/bf16/f16 [rows][cols], or the q8/q4 codes [rows][cols*bits/8] */
    const void *scales; /* q8/q4: [rows][cols/group] of sdtype */
    const void *biases; /* q8/q4: [rows][cols/group] of sdtype */
    sl_dtype dtype, sdtype;
    int rows, cols, group;
} slcu_mat;

/* Selects device 0 and checks that it runs our code. 0, or -1 with why ("no CUDA device: ...",
 * "CUDA driver ...", "compute capability 8.0 < 9.0 built for"). */
int slcu_init(char *msg, size_t msglen);
/* The device's name and memory (after slcu_init). */
void slcu_device_info(char *name, size_t namelen, uint64_t *total_bytes, uint64_t *free_bytes);

void *slcu_alloc(size_t bytes, char *msg, size_t msglen); /* NULL with a message when out of memory */
void slcu_free(void *p);
int slcu_upload(void *dst, const void *src, size_t bytes, char *msg, size_t msglen);
int slcu_download(void *dst, const void *src, size_t bytes, char *msg, size_t msglen);

/* y[t][r] = sum_c W[r][c] * x[t][c] for t < n (x [n][cols], y [n][rows], device memory). Decode (n small)
 * reads each weight byte once per call for up to 8 tokens; larger n loops over blocks of 8. */
int slcu_matmul(const slcu_mat *w, const float *x, float *y, int n, char *msg, size_t msglen);

/* Device time of the last slcu_matmul in ms, measured with CUDA events when timing is on (benchmarks). */
void slcu_set_timing(int on);
float slcu_last_ms(void);
/* One device-to-device copy of bytes, its time in *ms (the bandwidth reference of benchmarks). */
int slcu_bench_copy(void *dst, const void *src, size_t bytes, float *ms);

#ifdef __cplusplus
}
#endif

#endif
