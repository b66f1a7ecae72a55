/*
 * tensor.h — the types every room shares to describe weights: a matrix in its stored layout (tn_mat),
 * one routed expert's parts (tn_expert), and where routed experts come from (tn_expert_src).
 *
 * They live at the bottom of the house, beside dtype.h, because the kernels, the quantisers, the
 * expert cache, the container and the backends all take them, and none of those may include the model
 * room (src/model/) above them; this header needs nothing but util/dtype.h. tests/test_util.c's
 * lower_rooms_stay_below_the_model fails when a lower room includes the forward pass again.
 *
 * Shapes follow PyTorch: a matrix is [rows = out][cols = in] row-major and computes y = W x. The
 * pointers of an tn_mat point into memory of the backend that computes with it (src/backend/backend.h):
 * host memory for the CPU backend.
 */
#ifndef SL_TENSOR_H
#define SL_TENSOR_H

#include <stdint.h>

#include "sluice.h"
#include "util/dtype.h"

typedef struct tn_mat {
    const void *data; /* NULL: absent; quantized types: the codes, [rows][cols*bits/8] bytes */
    dt_type dtype;   /* DT_F32, DT_F16, DT_BF16, or quantized DT_Q8 / DT_Q4 / DT_Q3 / DT_MXFP4 */
    int rows, cols;
    /* quantized types only (src/quant/quant.h; q_mat_bind fills them from one contiguous tensor) */
    const void *scales; /* [rows][cols/group] of sdtype */
    const void *biases; /* [rows][cols/group] of sdtype (q8/q4); NULL for q3 */
    int group;          /* 32, 64 or 128 */
    dt_type sdtype;    /* DT_F16, DT_BF16 or DT_F32 */
    uint32_t seed;      /* q3: seed of the randomised Hadamard rotation */
    /* q8/q4: 1 when every bias is, bit for bit, -2^(bits-1) times its scale (GGUF Q8_0 / Q4_0; set by
     * q_biases_implied's caller): a kernel may compute the biases from the scales instead of reading them,
     * the same values, so the same bits, and 10% (q4) / 6% (q8) fewer bytes streamed. 0: read them. */
    int bias_implied;
    /* q8/q4: the form of the activations its int8 kernels read (kernels.h kern_act). TN_ACT_HOUSE: the house's (q, d,
     * s: f32 d, x * (1/d)); TN_ACT_Q8_0 / TN_ACT_Q8_1: llama.cpp's q8_0 / q8_1 (q0, q04, d0 with s0 / s1), for the
     * blocks of a GGUF Q8_0, Q4_0, Q5_0 / Q4_1, Q5_1 tensor (manifest "act"), as llama.cpp multiplies them */
    int act;
} tn_mat;

enum { TN_ACT_HOUSE = 0, TN_ACT_Q8_0 = 1, TN_ACT_Q8_1 = 2 };

/* One routed expert: gate, up [I, H]; down [H, I] (SL_EXPERT_SWIGLU); or gate_up [2I, H] (rows interleaved
 * gate, up), down [H, I] and the biases gate_up_bias [2I], down_bias [H] (SL_EXPERT_GPTOSS). Absent parts NULL. */
typedef struct tn_expert {
    tn_mat gate, up, down;
    tn_mat gate_up;
    const float *gate_up_bias, *down_bias;
    int host; /* 1: the parts lie in host memory on a device backend (the device tier's hybrid step hands out a
                 miss where it lies, for the host's threads: stream/tier.h); 0: in the backend's memory */
} tn_expert;

/* Where routed experts come from.
 *
 * Simple providers (everything resident) set get(): it fills *out for (layer, expert) and returns SL_OK
 * or an error. get, begin and next return an sl_status; the text of the provider's last error is errmsg()'s
 * (the handle's message, as SQLite's sqlite3_errmsg: these are the hot path, called per expert), which the
 * MoE block copies into its sl_error with the layer and expert (model/moe.c).
 *
 * Streaming providers also set begin/next/release/end; the MoE block then drives them per layer:
 *   begin(layer, experts, n, in_order)
 *                             announces the n distinct experts the layer needs (ascending); misses
 *                             are submitted to the I/O engine at once;
 *                             (in_order 2: in order, and one layer of a pass over the layers for many
 *                             tokens, a prefill chunk: the device tier then keeps what the next pass reuses);
 *   next(&e, &ex)             hands out one of them as soon as it is in memory (hits first, then reads
 *                             in completion order; with in_order, strictly in the list's order, reads
 *                             running ahead) — blocks while none is ready;
 *   release(e)                the caller is done with e; it must release each expert before the next
 *                             next() (so a cache of a single slot still makes progress), but for the
 *                             ready() or room() experts it may hold together;
 *   end()                     closes the layer; after an error it cancels and drains outstanding reads.
 * The MoE block keeps each expert's output in its own slot and sums in a fixed order, so the order
 * of delivery never changes a bit. errmsg() returns the provider's message for its last error. */
typedef struct tn_expert_src {
    sl_status (*get)(void *ctx, int layer, int expert, tn_expert *out);
    sl_status (*begin)(void *ctx, int layer, const int *experts, int n, int in_order);
    sl_status (*next)(void *ctx, int *expert, tn_expert *out);
    void (*release)(void *ctx, int expert);
    void (*end)(void *ctx);
    const char *(*errmsg)(void *ctx);
    /* optional: a hint that `layer` will probably need these experts soon; the provider may start
     * reading them (never required for correctness; never blocks). ordered 1: a layer-major pass's union
     * of that layer, ascending, the order its request will ask for them in (stream/cache.c reads it in
     * that order, as a worklist); 0: a decode step's router guess (the cache scores such guesses and acts
     * on them only once they prove accurate), whether or not a request is open. */
    void (*prefetch)(void *ctx, int layer, const int *experts, int n, int ordered);
    void *ctx;
    /* optional (NULL: none known): how many of the experts next() still owes are already where the compute
     * reads them (the device tier's hits: stream/tier.c), so the caller may take them without waiting and
     * hold them together until it releases them (model/moe.c runs them as one grouped FFN). */
    int (*ready)(void *ctx);
    /* optional (NULL: unknown): in an ordered request, how many of the experts next() still owes it can hand out
     * from here before the caller releases any (the device tier: its hits, held since begin, and as many misses as
     * it has slots to take; stream/tier.c), each in the backend's memory; model/moe.c holds that many at once and
     * runs them as one grouped FFN (a layer-major block's experts on the device). */
    int (*room)(void *ctx);
} tn_expert_src;

#endif
