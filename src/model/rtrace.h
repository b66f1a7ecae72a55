/*
 * rtrace.h — routing traces (issue 25, docs/STREAMING.md "Routing traces"): the experts every routed row chose, per
 * (token, MoE layer), recorded from a real model (sl_model_params.record_routing; `--record-routing FILE`) and
 * replayed on another model (SL_ROUTING_TRACE; `sluice bench --routing trace:FILE`), so that the caches of a
 * synthesised shape see a trained model's routing.
 *
 * Rows: the MoE layer's routed rows in the order they are routed, one counter per MoE layer; in a single
 * sequence (bench, perplexity) every layer routes every token once, in order, so row r of every layer is token r.
 * Replay: MoE layer l of the model takes the trace's layer l mod L, its routed row r the trace's token r mod T;
 * slot s < k the trace's expert e[s mod k_t] + s / k_t, modulo the model's E, the next free expert up when taken
 * (so the k are distinct), sorted ascending, weights 1/k. With the trace's own shape (L, E, k) that is the
 * recorded choice, expert for expert; otherwise the mapping is what rtrace_describe says. The choice depends on
 * the order rows are routed, not on the token: a replay is for benchmarks, never for text.
 *
 * The file (little-endian): "SLRTRACE", then u32 version (1), tokens, layers, experts, k, width (bytes a value:
 * 1 when every value is below 256, else 2), then tokens x layers x k values, token-major (about 24 KB for 1024
 * tokens of a model of 6 MoE layers, top-4).
 */
#ifndef SL_RTRACE_H
#define SL_RTRACE_H

#include <stdint.h>

#include "sluice.h"

typedef struct rtrace rtrace;

/* An empty recording of a model of `layers` MoE layers, E experts, k a token (SL_ENOMEM, err filled). */
sl_status rtrace_new(int layers, int experts, int k, rtrace **out, sl_error *err);
/* A trace file, to replay on a model of `layers` MoE layers, E experts, k a token. SL_EIO / SL_EFORMAT naming
 * the file, SL_ENOMEM. */
sl_status rtrace_load(const char *path, int layers, int experts, int k, rtrace **out, sl_error *err);
/* The recording's rows so far (the fewest of any layer) into path. SL_EIO naming it, SL_EINVAL for a replay. */
sl_status rtrace_save(const rtrace *t, const char *path, sl_error *err);
void rtrace_free(rtrace *t);
/* After MoE layer ms routed n rows into top_e / top_w [n][k] (host memory): a recording appends their choice, a
 * replay replaces it with the trace's (above). SL_OK or SL_ENOMEM (a recording that cannot grow). */
sl_status rtrace_route(rtrace *t, int ms, int n, int *top_e, float *top_w);
/* The trace's own shape: its tokens (rows held; a recording's so far), MoE layers, experts and k. Cannot fail. */
void rtrace_shape(const rtrace *t, int *tokens, int *layers, int *experts, int *k);
/* One line: the trace's shape, the rows so far, and for a replay how it maps onto the model's shape. */
const char *rtrace_describe(rtrace *t);

#endif
