/*
 * cuda_pdl.cuh — programmatic dependent launch's two device calls, for src/backend/cuda/ only.
 */
#ifndef SL_CUDA_PDL_CUH
#define SL_CUDA_PDL_CUH

/* Programmatic dependent launch (Hopper; docs/CUDA.md "Overlapped launches"): a kernel launched with
 * cudaLaunchAttributeProgrammaticStreamSerialization may start while the kernel before it runs, once every CTA of
 * that one has executed pdl_trigger (or exited). Before pdl_wait it may read only what no kernel of the step
 * writes (weights); pdl_wait returns once the kernel before it has finished and its writes are visible (and, as
 * that one waited too, every kernel before). Both are no-ops for a kernel launched without the attribute. */
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

#endif
