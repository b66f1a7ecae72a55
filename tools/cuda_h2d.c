/*
 * cuda_h2d.c — the host -> device copy rate from pinned memory, the H2D bound of docs/CUDA.md's tier tables
 * (tools/cuda_bench.sh builds it with the CUDA runtime linked statically and runs it beside sluice).
 * Usage: cuda_h2d [BLOCK_BYTES]. Prints one JSON object: one 256 MiB cudaMemcpy, and BLOCK_BYTES copies
 * (an expert block) queued back to back with cudaMemcpyAsync on one stream, as the tier issues them; each
 * the best of 5 timed rounds after a warm-up.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define CK(call)                                                                        \
    do {                                                                                \
        cudaError_t e_ = (call);                                                        \
        if (e_ != cudaSuccess) {                                                        \
            fprintf(stderr, "cuda_h2d: %s: %s\n", #call, cudaGetErrorString(e_));       \
            return 1;                                                                   \
        }                                                                               \
    } while (0)

int main(int argc, char **argv) {
    const size_t big = (size_t)256 << 20;
    size_t block = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : (size_t)2 << 20;
    if (block == 0 || block > big) {
        fprintf(stderr, "cuda_h2d: BLOCK_BYTES must be 1 .. %zu\n", big);
        return 2;
    }
    void *h = NULL, *d = NULL;
    cudaStream_t s;
    CK(cudaHostAlloc(&h, big, cudaHostAllocPortable));
    CK(cudaMalloc(&d, big));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (size_t i = 0; i < big; i += 4096) ((volatile char *)h)[i] = (char)i;
    double best_big = 1e30, best_blk = 1e30;
    size_t n_blk = big / block;
    for (int r = 0; r < 6; r++) {
        double t0 = now();
        CK(cudaMemcpy(d, h, big, cudaMemcpyHostToDevice));
        double t1 = now();
        for (size_t i = 0; i < n_blk; i++)
            CK(cudaMemcpyAsync((char *)d + i * block, (char *)h + i * block, block, cudaMemcpyHostToDevice, s));
        CK(cudaStreamSynchronize(s));
        double t2 = now();
        if (r == 0) continue; /* warm-up */
        if (t1 - t0 < best_big) best_big = t1 - t0;
        if (t2 - t1 < best_blk) best_blk = t2 - t1;
    }
    printf("{\"h2d_bytes_s\": %.6e, \"h2d_block_bytes\": %zu, \"h2d_block_bytes_s\": %.6e, \"bytes\": %zu}\n",
           (double)big / best_big, block, (double)(n_blk * block) / best_blk, big);
    cudaFree(d);
    cudaFreeHost(h);
    return 0;
}
