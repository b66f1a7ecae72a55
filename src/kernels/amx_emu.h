/*
 * amx_emu.h — a scalar emulation of the AMX tile instructions kernels_amx.c uses (LDTILECFG, TILEZERO, TILELOADD,
 * TILESTORED, TDPBUSD, TILERELEASE), so that its packing, tiling and float order run on a CPU without AMX:
 * tests/kernels_amx_emu.c builds kernels_amx.c a second time with SL_AMX_EMU defined (the entry then named
 * kern_amx_q4_prefill_emu) and tests/test_amx.c checks it bitwise against the other tables.
 *
 * The semantics are the Intel SDM's (Vol. 2, TDPBUSD): eight tiles of up to 16 rows x 64 bytes, each with the
 * rows and bytes per row of the last configuration; TDPBUSD C, A, B: for m < C.rows, n < C.colsb / 4,
 * C[m][n] (int32) += sum over k < A.colsb / 4 and i < 4 of (uint8) A[m][4k+i] * (int8) B[k][4n+i], the shapes
 * required to agree (A.rows == C.rows, A.colsb == 4 B.rows, B.colsb == C.colsb; the hardware faults otherwise,
 * here SL_ASSERT aborts). Bytes of a tile past its configured shape read as zero. Per thread, as on the hardware.
 * Test builds only. Internal to src/kernels/.
 */
#ifndef SL_KERNELS_AMX_EMU_H
#define SL_KERNELS_AMX_EMU_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util/err.h"

typedef struct {
    int rows, colsb;
    uint8_t b[16][64];
} amx_emu_tile;

static _Thread_local amx_emu_tile amx_emu_t[8];
static _Thread_local int amx_emu_on;

/* cfg: the 64-byte LDTILECFG operand (palette 1: colsb as 16 uint16 at byte 16, rows as 16 bytes at 48). */
static inline void amx_emu_loadconfig(const void *cfg) {
    const uint8_t *c = cfg;
    SL_ASSERT(c[0] == 1);
    for (int t = 0; t < 8; t++) {
        uint16_t cb;
        memcpy(&cb, c + 16 + 2 * t, 2);
        SL_ASSERT(cb <= 64 && c[48 + t] <= 16 && cb % 4 == 0);
        amx_emu_t[t].colsb = cb;
        amx_emu_t[t].rows = c[48 + t];
        memset(amx_emu_t[t].b, 0, sizeof amx_emu_t[t].b);
    }
    amx_emu_on = 1;
}

static inline void amx_emu_release(void) {
    memset(amx_emu_t, 0, sizeof amx_emu_t);
    amx_emu_on = 0;
}

static inline void amx_emu_zero(int t) {
    SL_ASSERT(amx_emu_on);
    memset(amx_emu_t[t].b, 0, sizeof amx_emu_t[t].b);
}

static inline void amx_emu_load(int t, const void *base, size_t stride) {
    SL_ASSERT(amx_emu_on);
    amx_emu_tile *T = &amx_emu_t[t];
    memset(T->b, 0, sizeof T->b);
    for (int r = 0; r < T->rows; r++) memcpy(T->b[r], (const uint8_t *)base + (size_t)r * stride, (size_t)T->colsb);
}

static inline void amx_emu_store(int t, void *base, size_t stride) {
    SL_ASSERT(amx_emu_on);
    const amx_emu_tile *T = &amx_emu_t[t];
    for (int r = 0; r < T->rows; r++) memcpy((uint8_t *)base + (size_t)r * stride, T->b[r], (size_t)T->colsb);
}

static inline void amx_emu_dpbusd(int c, int a, int b) {
    SL_ASSERT(amx_emu_on);
    amx_emu_tile *C = &amx_emu_t[c];
    const amx_emu_tile *A = &amx_emu_t[a], *B = &amx_emu_t[b];
    SL_ASSERT(A->rows == C->rows && A->colsb == 4 * B->rows && B->colsb == C->colsb);
    for (int m = 0; m < C->rows; m++)
        for (int n = 0; n < C->colsb / 4; n++) {
            int32_t acc;
            memcpy(&acc, C->b[m] + 4 * n, 4);
            for (int k = 0; k < A->colsb / 4; k++)
                for (int i = 0; i < 4; i++) acc += (int32_t)A->b[m][4 * k + i] * (int32_t)(int8_t)B->b[k][4 * n + i];
            memcpy(C->b[m] + 4 * n, &acc, 4);
        }
}

#endif
