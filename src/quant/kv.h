/*
 * kv.h — the attention KV cache's row types (include/sluice.h sl_kv_type): a cache row [n_kv_heads][hd] is
 * n_kv_heads heads of kv_head_bytes(type, hd) bytes each, head g at g * kv_head_bytes. Per head:
 *   f32:  hd floats;  f16 / bf16: hd halves (round to nearest even, util/dtype.h);
 *   q8:   nb = ceil(hd / 32) f16 scales d[b], then hd int8 codes; block b = values 32b .. 32b+31 (the last one
 *         short when hd % 32 != 0), d = f16(max|x| / 127), q = round(x / d) (0 when d == 0), value = q * d:
 *         llama.cpp's q8_0 (ggml-quants.c quantize_row_q8_0_ref), 34 bytes per 32 values.
 * Encoding and decoding are deterministic and depend on the head's own values only, so a cache row is the same
 * bytes whoever writes it; decoding is exact (f16 / bf16 / q8 values are f32 values). Thread-safe, cannot fail.
 */
#ifndef SL_QUANT_KV_H
#define SL_QUANT_KV_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

#define KV_Q8_BLOCK 32

/* Bytes of one head of hd values stored as type t. */
static inline size_t kv_head_bytes(sl_kv_type t, int hd) {
    const size_t n = (size_t)hd;
    switch (t) {
    case SL_KV_F16:
    case SL_KV_BF16: return 2 * n;
    case SL_KV_Q8: return 2 * ((n + KV_Q8_BLOCK - 1) / KV_Q8_BLOCK) + n;
    default: return 4 * n;
    }
}

/* One head: x [hd] (f32) into dst (kv_head_bytes(t, hd) bytes). */
void kv_encode_head(sl_kv_type t, const float *x, int hd, void *dst);
/* n heads of hd values, head i at src + i * ld bytes, into dst + i * ldd floats. */
void kv_decode_heads(sl_kv_type t, const void *src, size_t ld, int n, int hd, float *dst, size_t ldd);

#endif
