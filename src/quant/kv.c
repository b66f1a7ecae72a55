/* kv.c — the KV cache's row types: encode and decode one head (kv.h). The scalar definition every backend's
 * cache must reproduce bytewise (a row's bytes are what a saved state holds). */
#include "quant/kv.h"

#include <math.h>
#include <string.h>

#include "util/dtype.h"

/* One q8 head: the scales of its blocks, then the codes. */
static void q8_encode(const float *x, int hd, uint8_t *dst) {
    const int nb = (hd + KV_Q8_BLOCK - 1) / KV_Q8_BLOCK;
    int8_t *q = (int8_t *)(dst + 2 * nb);
    for (int b = 0; b < nb; b++) {
        const int c0 = b * KV_Q8_BLOCK, c1 = c0 + KV_Q8_BLOCK < hd ? c0 + KV_Q8_BLOCK : hd;
        float amax = 0.0f;
        for (int c = c0; c < c1; c++) amax = fabsf(x[c]) > amax ? fabsf(x[c]) : amax;
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t h = f32_to_f16(d);
        memcpy(dst + 2 * b, &h, 2);
        for (int c = c0; c < c1; c++) q[c] = (int8_t)roundf(x[c] * id);
    }
}

static void q8_decode(const uint8_t *src, int hd, float *y) {
    const int nb = (hd + KV_Q8_BLOCK - 1) / KV_Q8_BLOCK;
    const int8_t *q = (const int8_t *)(src + 2 * nb);
    for (int b = 0; b < nb; b++) {
        uint16_t h;
        memcpy(&h, src + 2 * b, 2);
        const float d = f16_to_f32(h);
        const int c0 = b * KV_Q8_BLOCK, c1 = c0 + KV_Q8_BLOCK < hd ? c0 + KV_Q8_BLOCK : hd;
        for (int c = c0; c < c1; c++) y[c] = (float)q[c] * d;
    }
}

void kv_encode_head(sl_kv_type t, const float *x, int hd, void *dst) {
    uint16_t *h = dst;
    switch (t) {
    case SL_KV_F16:
        for (int i = 0; i < hd; i++) h[i] = f32_to_f16(x[i]);
        break;
    case SL_KV_BF16:
        for (int i = 0; i < hd; i++) h[i] = f32_to_bf16(x[i]);
        break;
    case SL_KV_Q8: q8_encode(x, hd, dst); break;
    default: memcpy(dst, x, (size_t)hd * sizeof(float)); break;
    }
}

void kv_decode_heads(sl_kv_type t, const void *src, size_t ld, int n, int hd, float *dst, size_t ldd) {
    for (int i = 0; i < n; i++) {
        const uint8_t *s = (const uint8_t *)src + (size_t)i * ld;
        float *y = dst + (size_t)i * ldd;
        const uint16_t *h = (const uint16_t *)(const void *)s;
        switch (t) {
        case SL_KV_F16:
            for (int c = 0; c < hd; c++) y[c] = f16_to_f32(h[c]);
            break;
        case SL_KV_BF16:
            for (int c = 0; c < hd; c++) y[c] = bf16_to_f32(h[c]);
            break;
        case SL_KV_Q8: q8_decode(s, hd, y); break;
        default: memcpy(y, s, (size_t)hd * sizeof(float)); break;
        }
    }
}
