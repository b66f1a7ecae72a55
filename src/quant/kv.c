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

/* One q4 head (kv.h): llama.cpp's q4_0 of each block, scales first. */
static void q4_encode(const float *x, int hd, uint8_t *dst) {
    const int nb = (hd + KV_Q4_BLOCK - 1) / KV_Q4_BLOCK;
    uint8_t *q = dst + 2 * nb;
    for (int b = 0; b < nb; b++) {
        const int c0 = b * KV_Q4_BLOCK, n = c0 + KV_Q4_BLOCK < hd ? KV_Q4_BLOCK : hd - c0, h = (n + 1) / 2;
        float amax = 0.0f, mx = 0.0f;
        for (int c = 0; c < n; c++)
            if (fabsf(x[c0 + c]) > amax) amax = fabsf(x[c0 + c]), mx = x[c0 + c];
        const float d = mx / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t hd16 = f32_to_f16(d);
        memcpy(dst + 2 * b, &hd16, 2);
        for (int j = 0; j < h; j++) {
            const int lo = (int)(x[c0 + j] * id + 8.5f), hi = j + h < n ? (int)(x[c0 + j + h] * id + 8.5f) : 0;
            q[j] = (uint8_t)((lo < 15 ? lo : 15) | (hi < 15 ? hi : 15) << 4);
        }
        q += h;
    }
}

const float KV_Q4R_LEVEL[16] = {-7.5f,   -6.185f, -5.179f, -4.243f, -3.298f, -2.344f, -1.394f, -0.463f,
                                0.463f, 1.394f,  2.344f,  3.298f,  4.243f,  5.179f,  6.185f,  7.5f};

/* The code of the level nearest v (ties to the lower code). */
static int q4r_code(float v) {
    const float a = fabsf(v);
    int k = 0; /* the nearest of the positive levels 8 .. 15 to |v| */
    while (k < 7 && a > 0.5f * (KV_Q4R_LEVEL[8 + k] + KV_Q4R_LEVEL[9 + k])) k++;
    return v < 0.0f ? 7 - k : 8 + k;
}

/* One block of n rotated values z: the candidate scale (of 9 around max|z| / 7.5) whose codes, with their
 * least-squares scale, leave the least squared error; codes into c [n], the scale returned. */
static float q4r_block(const float *z, int n, uint8_t *c) {
    float amax = 0.0f, best = -1.0f, d = 0.0f;
    for (int i = 0; i < n; i++) amax = fabsf(z[i]) > amax ? fabsf(z[i]) : amax;
    for (int i = 0; i < n; i++) c[i] = 8;
    if (amax == 0.0f) return 0.0f;
    for (int k = -4; k <= 4; k++) {
        const float id = 7.5f / (amax * (1.0f + 0.04f * (float)k));
        uint8_t cc[KV_Q4_BLOCK];
        float sqx = 0.0f, sq2 = 0.0f;
        for (int i = 0; i < n; i++) {
            cc[i] = (uint8_t)q4r_code(z[i] * id);
            const float l = KV_Q4R_LEVEL[cc[i]];
            sqx += l * z[i];
            sq2 += l * l;
        }
        if (sq2 > 0.0f && sqx * sqx / sq2 > best) { /* error = sum z^2 - sqx^2 / sq2 */
            best = sqx * sqx / sq2;
            d = sqx / sq2;
            memcpy(c, cc, (size_t)n);
        }
    }
    return d < 65504.0f ? d : 65504.0f; /* f16's largest: the codes saturate past it */
}

/* One q4r head (kv.h): rotate, then q4r_block per block, stored as q4's layout. */
static void q4r_encode(const float *x, int hd, uint8_t *dst) {
    float z[1024];
    uint8_t c[KV_Q4_BLOCK];
    const int nb = (hd + KV_Q4_BLOCK - 1) / KV_Q4_BLOCK;
    uint8_t *q = dst + 2 * nb;
    for (int c0 = 0; c0 < hd; c0 += 1024) { /* heads of more than 1024 values: runs of at most 1024 */
        const int m = hd - c0 < 1024 ? hd - c0 : 1024;
        for (int i = 0; i < m; i++) z[i] = kv_q4r_sign(c0 + i) ? -x[c0 + i] : x[c0 + i];
        kv_fwht(z, m, kv_q4r_run(hd) < 1024 ? kv_q4r_run(hd) : 1024);
        for (int b0 = 0; b0 < m; b0 += KV_Q4_BLOCK) {
            const int n = b0 + KV_Q4_BLOCK < m ? KV_Q4_BLOCK : m - b0, h = (n + 1) / 2, b = (c0 + b0) / KV_Q4_BLOCK;
            const uint16_t d16 = f32_to_f16(q4r_block(z + b0, n, c));
            memcpy(dst + 2 * b, &d16, 2);
            for (int j = 0; j < h; j++) q[j] = (uint8_t)(c[j] | (j + h < n ? c[j + h] : 0) << 4);
            q += h;
        }
    }
}

void kv_fwht(float *y, int n, int p) {
    for (int h = 1; h < p; h *= 2)
        for (int r = 0; r < n; r += p)
            for (int i = r; i < r + p; i += 2 * h)
                for (int k = i; k < i + h; k++) {
                    const float a = y[k], b = y[k + h];
                    y[k] = a + b;
                    y[k + h] = a - b;
                }
}

/* q4 (rot 0), q4r (rot 1) or q4r's rotated values (rot 2, KV_Q4R_Y) head: the levels times the scales, then for
 * q4r the inverse rotation (kv_q4r_unrotate). */
static void q4_decode(const uint8_t *src, int hd, float *y, int rot) {
    const int nb = (hd + KV_Q4_BLOCK - 1) / KV_Q4_BLOCK;
    const uint8_t *q = src + 2 * nb;
    const int p = kv_q4r_run(hd) < 1024 ? kv_q4r_run(hd) : 1024;
    const float inv = 1.0f / (float)p;
    for (int b = 0; b < nb; b++) {
        uint16_t h16;
        memcpy(&h16, src + 2 * b, 2);
        const float d = rot ? f16_to_f32(h16) * inv : f16_to_f32(h16);
        const int c0 = b * KV_Q4_BLOCK, n = c0 + KV_Q4_BLOCK < hd ? KV_Q4_BLOCK : hd - c0, h = (n + 1) / 2;
        for (int j = 0; j < n; j++) {
            const int code = j < h ? q[j] & 15 : q[j - h] >> 4;
            y[c0 + j] = rot ? KV_Q4R_LEVEL[code] * d : (float)(code - 8) * d;
        }
        q += h;
    }
    if (rot == 1) kv_q4r_unrotate(y, hd);
}

void kv_q4r_rotate(const float *x, int hd, float *z) {
    for (int i = 0; i < hd; i++) z[i] = kv_q4r_sign(i) ? -x[i] : x[i];
    kv_fwht(z, hd, kv_q4r_run(hd) < 1024 ? kv_q4r_run(hd) : 1024);
}

void kv_q4r_unrotate(float *y, int hd) {
    kv_fwht(y, hd, kv_q4r_run(hd) < 1024 ? kv_q4r_run(hd) : 1024);
    for (int i = 0; i < hd; i++)
        if (kv_q4r_sign(i)) y[i] = -y[i];
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
    case SL_KV_Q4: q4_encode(x, hd, dst); break;
    case SL_KV_Q4R: q4r_encode(x, hd, dst); break;
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
        case SL_KV_Q4:
        case SL_KV_Q4R:
        case KV_Q4R_Y: q4_decode(s, hd, y, t == SL_KV_Q4 ? 0 : t == SL_KV_Q4R ? 1 : 2); break;
        default: memcpy(y, s, (size_t)hd * sizeof(float)); break;
        }
    }
}
