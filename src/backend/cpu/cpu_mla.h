/*
 * cpu_mla.h — the tests' handles on the CPU backend's multi-head latent attention (cpu_mla.c): which of its two
 * paths a call takes, and how often it took the split. Both paths give the same bits; these exist so a test can run
 * each and compare them. The mla op itself is cpu.h's cpu_mla, reached through the backend's table.
 */
#ifndef SL_BACKEND_CPU_MLA_H
#define SL_BACKEND_CPU_MLA_H

/* The split of a micro-batch's tokens (cpu_mla.c mla_split): -1 where it applies (the default: micro-batches of up
 * to 64 tokens, unless SLUICE_CPU_MLA_SPLIT=0), 0 never, 1 always where the scratch holds it (any n); returns the
 * previous mode. Not thread-safe: set it while nothing runs. */
int be_cpu_mla_split(int mode);
/* How many mla calls the split has done since the process started (a test checks its case took it). */
long be_cpu_mla_splits(void);

#endif
