/*
 * cuda_pdl.cuh — programmatic dependent launch (PDL, docs/CUDA.md "Overlapped launches"), for src/backend/cuda/ only:
 * the two device calls (pdl_wait, pdl_trigger), the switch (pdl_enabled, pdl_all: cuda_pdl.cu) and the one launch
 * helper (pdl_launch) every PDL launch goes through.
 * Invariant: a kernel launched by pdl_launch calls pdl_wait() before any global read or write, so it runs in exact
 * stream order; only the one-token matvecs (cuda_mv.cu mv1c_i8, cuda_mv1d.cu mv1d_i8) load weights before it.
 */
#ifndef SL_CUDA_PDL_CUH
#define SL_CUDA_PDL_CUH

#include <cuda_runtime.h>

#include <utility>

/* Programmatic dependent launch (Hopper): a kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization
 * may start while the kernel before it runs, once every CTA of that one has executed pdl_trigger (or exited). Before
 * pdl_wait it may read only what no kernel of the step writes (weights); pdl_wait returns once the kernel before it
 * has finished and its writes are visible (and, as that one waited too or was launched in stream order, every kernel
 * before). Both are no-ops for a kernel launched without the attribute. */
/* The rule for a kernel launched with PDL: what a kernel of the step writes (activations, the route's choice, rows) is
 * read after pdl_wait by plain or __ldcg loads, never by __ldg: ld.global.nc promises the word unchanged for the
 * kernel's life, and ptxas (CUDA 13.0, sm_90) issued such loads above griddepcontrol.wait, so the experts' matvec read
 * the route's cell before the route wrote it (session 32: tests/cuda/test_cuda_pdl.c check_pdl, cuda_i8.cuh
 * resolve). Weights, which no kernel of the step writes, may be read by __ldg before it. */
static __device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
static __device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* The switch (cuda_pdl.cu; cuda.h slcu_i8_pdl, SLUICE_CUDA_PDL): pdl_enabled: the one-token matvecs mv1c_i8 / mv1d_i8
 * are launched with PDL (SLUICE_CUDA_PDL unset, 1 or 2); pdl_all: every other kernel of a decode step that goes
 * through pdl_launch is too (unset or 1). Both 0 once backend_cuda.c turned PDL off (slcu_i8_pdl(0)). Host only. */
int pdl_enabled(void);
int pdl_all(void);

/* kernel<<<grid, block, smem, stream>>>(args...), launched with the PDL attribute when on is non-zero (the kernel's
 * first statement must then be pdl_wait(), but for the matvecs' weight loads: see the invariant above). Errors are
 * left for cudaGetLastError, as a <<<>>> launch leaves them. */
template <typename... P, typename... A>
static inline void pdl_launch_on(int on, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                 A &&...args) {
    if (!on) {
        kernel<<<grid, block, smem, stream>>>(std::forward<A>(args)...);
        return;
    }
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = stream;
    cfg.attrs = at, cfg.numAttrs = 1;
    cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

/* A decode step's kernel (every one but the matvecs): with PDL while pdl_all() */
template <typename... P, typename... A>
static inline void pdl_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, A &&...args) {
    pdl_launch_on(pdl_all(), kernel, grid, block, smem, stream, std::forward<A>(args)...);
}

#endif
