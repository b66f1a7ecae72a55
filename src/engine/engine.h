/*
 * engine.h — internal entry points of the engine (src/engine/) for tests and tools.
 */
#ifndef SL_ENGINE_H
#define SL_ENGINE_H

#include "sluice.h"
#include "stream/io.h"

/* sl_model_open with a fault-injecting I/O engine wrapped around the real one (fault may be NULL). */
sl_status model_open_ex(const char *path, const sl_model_params *params, const io_fault_cfg *fault, sl_model **out,
                        sl_error *err);

/* An expert rank (ranks 1..N-1 of t; docs/SCALE.md): serves rank 0's requests (open a share of a model's experts,
 * compute a layer's experts, report figures, close) until rank 0 says quit. SL_OK then; an error when the
 * transport fails (rank 0 gone). The rank's own errors (a model it cannot open, an expert that fails) go back
 * to rank 0 as its answer and do not end the loop. */
sl_status engine_expert_rank(sl_remote *t, sl_error *err);

/* Tests: evaluate long inputs layer-major (1, default) or in micro-batches through all layers (0). */
void model_session_set_wide(sl_session *s, int on);

#endif
