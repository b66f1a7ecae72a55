/*
 * cuda_pdl.cu — the overlapped launches' switch (cuda_pdl.cuh pdl_enabled / pdl_all, cuda.h slcu_i8_pdl; docs/CUDA.md
 * "Overlapped launches"). SLUICE_CUDA_PDL: 1, every kernel of a decode step launched through pdl_launch and the
 * one-token matvecs (the default since call P: test_cuda --pdl and the model test of every family passed on an H100);
 * 2, the matvecs only (session 31's launches); 0, none. backend_cuda.c turns all of
 * it off while a backend that made copy-stream copies lives (slcu_pdl_block) and with recorded steps (slcu_i8_pdl(0)).
 */
#include <stdlib.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_pdl.cuh"

static int pdl_mode = -1; /* 0 off, 1 every kernel, 2 the matvecs only; -1 unread */

extern "C" void slcu_i8_pdl(int on) { pdl_mode = on >= 0 && on <= 2 ? on : -1; }

static int mode(void) {
    if (pdl_mode < 0) {
        const char *e = getenv("SLUICE_CUDA_PDL");
        /* unset: 1, every kernel (-9 to -13% a step, call N; session 32's fix of the early read, cuda_i8.cuh
         * resolve, passed test_cuda --pdl and the model test on an H100 in call P); 2 the matvecs; 0 none */
        pdl_mode = !e || !e[0] ? 1 : e[0] == '1' ? 1 : e[0] == '2' ? 2 : 0;
    }
    return pdl_mode;
}

/* backend_cuda.c: backends alive that have made copy-stream copies (a device tier's): while any does, no launch is
 * overlapped (the matvecs' early weight loads are not ordered after those copies: call D) */
static int blocked;
extern "C" void slcu_pdl_block(int on) { __atomic_add_fetch(&blocked, on ? 1 : -1, __ATOMIC_SEQ_CST); }

int pdl_enabled(void) { return !__atomic_load_n(&blocked, __ATOMIC_SEQ_CST) && mode() != 0; }
int pdl_all(void) { return !__atomic_load_n(&blocked, __ATOMIC_SEQ_CST) && mode() == 1; }
