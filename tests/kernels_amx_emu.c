/*
 * kernels_amx_emu.c — kernels_amx.c built a second time on src/kernels/amx_emu.h's scalar tiles (its entry then
 * kern_amx_q4_prefill_emu), for tests/test_amx.c: the AMX kernel's packing, tiling and float order checked on a CPU
 * without AMX. Compiled with the AVX-512 flags (the Makefile).
 */
#define SL_AMX_EMU 1
#include "kernels/kernels_amx.c"
