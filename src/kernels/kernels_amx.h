/*
 * kernels_amx.h — the AMX-INT8 q4 prefill kernel (kernels_amx.c), which kernels_avx512.c's q4 entry tries first.
 * Internal to src/kernels/.
 */
#ifndef SL_KERNELS_AMX_H
#define SL_KERNELS_AMX_H

#include "kernels/kernels.h"

/* kern_matmul_act's rows [r0, r1) of a q4 matrix over a->n_tok tokens on AMX tiles, bitwise the canonical order
 * (kernels.h) and so every table's result. -1 (nothing written) where it does not apply: no AMX (CPUID, the OS's
 * permission), SLUICE_CPU_AMX=0, fewer tokens than the smallest count (SLUICE_CPU_AMX=N; unset: off until an AMX host has timed it, docs/PERFORMANCE.md), fewer than 16
 * rows, more than 8192 columns, a group other than 32/64/128, no workspace. Thread-safe; tiles are configured and
 * released inside each call. */
int kern_amx_q4_prefill(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1);
/* The smallest n_tok kern_amx_q4_prefill takes, 0 when it takes none (no AMX, or SLUICE_CPU_AMX=0). The first call
 * asks the kernel for the tile state (arch_prctl ARCH_REQ_XCOMP_PERM). Thread-safe. */
int kern_amx_ready(void);
/* Sets that smallest count (0: off; ignored without AMX), for tools/amx_check.c and tests: not while kernels run. */
void kern_amx_set_min(int n_tok);

/* The same kernel on amx_emu.h's emulated tiles (tests/kernels_amx_emu.c, test builds only): no CPU check, no
 * smallest counts; needs AVX-512 VNNI (kernels_avx512.c's table). */
int kern_amx_q4_prefill_emu(const tn_mat *w, const kern_act *a, float *y, size_t ldy, int r0, int r1);

#endif
