/*
 * rtrace.c — see rtrace.h: a routing trace recorded from a model's routing, saved, loaded and replayed.
 */
#include "model/rtrace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

#define RT_MAGIC "SLRTRACE"
#define RT_NONE 0xffff /* a choice out of the 16-bit range (none of the families' routers gives one); replayed modulo E */

struct rtrace {
    int layers, experts, k; /* the trace's shape */
    int tokens, cap;        /* rows held (a replay's; a recording's fewest of any layer), rows allocated */
    uint16_t *e;            /* [cap][layers][k] */
    int *cur;               /* [layers] recording: rows of each layer so far; [m_layers] replay: the next row */
    int play;               /* 1: a replay onto the model's shape below */
    int m_layers, m_experts, m_k;
    char desc[256];
};

static rtrace *rt_alloc(int layers, int experts, int k, int cur_n) {
    rtrace *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->layers = layers, t->experts = experts, t->k = k;
    t->cur = calloc((size_t)(cur_n > 0 ? cur_n : 1), sizeof *t->cur);
    if (!t->cur) {
        free(t);
        return NULL;
    }
    return t;
}

sl_status rtrace_new(int layers, int experts, int k, rtrace **out, sl_error *err) {
    *out = NULL;
    if (layers < 1 || experts < 1 || k < 1)
        return err_set(err, SL_EINVAL, "routing trace: a model of %d MoE layers, %d experts, %d a token", layers,
                       experts, k);
    rtrace *t = rt_alloc(layers, experts, k, layers);
    if (!t) return err_set(err, SL_ENOMEM, "out of memory for a routing trace");
    *out = t;
    return SL_OK;
}

void rtrace_free(rtrace *t) {
    if (!t) return;
    free(t->e);
    free(t->cur);
    free(t);
}

static int rd_u32(FILE *f, uint32_t *v) {
    unsigned char b[4];
    if (fread(b, 1, 4, f) != 4) return -1;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return 0;
}

static void wr_u32(FILE *f, uint32_t v) {
    const unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                                (unsigned char)(v >> 24)};
    fwrite(b, 1, 4, f);
}

/* The header's shape into t (the values after it are read by the caller); SL_EFORMAT naming path. */
static sl_status read_header(FILE *f, const char *path, uint32_t h[6], sl_error *err) {
    char magic[8];
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, RT_MAGIC, 8))
        return err_set(err, SL_EFORMAT, "%s: not a routing trace (sluice bench --record-routing writes them)", path);
    for (int i = 0; i < 6; i++)
        if (rd_u32(f, &h[i])) return err_set(err, SL_EFORMAT, "%s: a routing trace cut short in its header", path);
    if (h[0] != 1) return err_set(err, SL_EFORMAT, "%s: routing trace version %u (this build reads 1)", path, h[0]);
    if (h[1] < 1 || h[1] > (1u << 24) || h[2] < 1 || h[2] > 4096 || h[3] < 1 || h[3] > 65535 || h[4] < 1 ||
        h[4] > h[3] || h[4] > 1024 || (h[5] != 1 && h[5] != 2))
        return err_set(err, SL_EFORMAT, "%s: a routing trace of %u tokens x %u layers x %u experts (%u a token, %u "
                       "bytes a value): out of range", path, h[1], h[2], h[3], h[4], h[5]);
    return SL_OK;
}

static void describe(rtrace *t) {
    int same = t->m_layers == t->layers && t->m_experts == t->experts && t->m_k == t->k;
    snprintf(t->desc, sizeof t->desc,
             "routing trace: %d tokens x %d MoE layers x %d experts, %d a token%s%s", t->tokens, t->layers,
             t->experts, t->k, !t->play ? " (recording)" : same ? ", replayed as recorded" : ", replayed",
             !t->play || same ? "" : " on another shape: layers modulo the trace's, experts modulo the model's");
    if (t->play && !same) {
        size_t n = strlen(t->desc);
        snprintf(t->desc + n, sizeof t->desc - n, " (%d MoE layers x %d experts, %d a token)", t->m_layers,
                 t->m_experts, t->m_k);
    }
}

sl_status rtrace_load(const char *path, int layers, int experts, int k, rtrace **out, sl_error *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, SL_EIO, "%s: cannot open the routing trace", path);
    uint32_t h[6];
    rtrace *t = NULL;
    sl_status st = read_header(f, path, h, err);
    if (!st && !(t = rt_alloc((int)h[2], (int)h[3], (int)h[4], layers))) st = err_set(err, SL_ENOMEM, "out of memory");
    const size_t n = st ? 0 : (size_t)h[1] * h[2] * h[4];
    unsigned char *raw = n ? malloc(n * h[5]) : NULL;
    if (!st && (!raw || !(t->e = malloc(n * sizeof *t->e)))) st = err_set(err, SL_ENOMEM, "out of memory");
    if (!st && fread(raw, h[5], n, f) != n)
        st = err_set(err, SL_EFORMAT, "%s: a routing trace cut short (%zu values expected)", path, n);
    fclose(f);
    if (!st) {
        for (size_t i = 0; i < n; i++) t->e[i] = h[5] == 1 ? raw[i] : (uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8);
        t->tokens = t->cap = (int)h[1];
        t->play = 1;
        t->m_layers = layers, t->m_experts = experts, t->m_k = k;
        describe(t);
        *out = t;
    } else {
        rtrace_free(t);
    }
    free(raw);
    return st;
}

sl_status rtrace_save(const rtrace *t, const char *path, sl_error *err) {
    if (t->play) return err_set(err, SL_EINVAL, "routing trace: a replay, not a recording");
    int rows = t->cur[0];
    for (int l = 1; l < t->layers; l++)
        if (t->cur[l] < rows) rows = t->cur[l];
    if (rows < 1) return err_set(err, SL_EINVAL, "routing trace: no token routed in every MoE layer yet");
    FILE *f = fopen(path, "wb");
    if (!f) return err_set(err, SL_EIO, "%s: cannot write the routing trace", path);
    const size_t n = (size_t)rows * (size_t)t->layers * (size_t)t->k;
    unsigned maxv = 0;
    for (size_t i = 0; i < n; i++) maxv = t->e[i] > maxv ? t->e[i] : maxv;
    const int width = maxv <= 255 ? 1 : 2;
    fwrite(RT_MAGIC, 1, 8, f);
    const uint32_t h[6] = {1, (uint32_t)rows, (uint32_t)t->layers, (uint32_t)t->experts, (uint32_t)t->k, (uint32_t)width};
    for (int i = 0; i < 6; i++) wr_u32(f, h[i]);
    for (size_t i = 0; i < n; i++) {
        const unsigned char b[2] = {(unsigned char)t->e[i], (unsigned char)(t->e[i] >> 8)};
        fwrite(b, 1, (size_t)width, f);
    }
    const int bad = ferror(f) != 0;
    if (fclose(f) || bad) return err_set(err, SL_EIO, "%s: cannot write the routing trace", path);
    return SL_OK;
}

/* a recording: n more rows of layer ms */
static sl_status record(rtrace *t, int ms, int n, const int *top_e) {
    const int r0 = t->cur[ms], L = t->layers, k = t->k;
    if (r0 + n > t->cap) {
        int cap = t->cap ? 2 * t->cap : 1024;
        while (cap < r0 + n) cap *= 2;
        uint16_t *e = realloc(t->e, (size_t)cap * (size_t)L * (size_t)k * sizeof *e);
        if (!e) return SL_ENOMEM;
        t->e = e, t->cap = cap;
    }
    for (int r = 0; r < n; r++)
        for (int s = 0; s < k; s++) {
            const int v = top_e[(size_t)r * k + s];
            t->e[((size_t)(r0 + r) * L + ms) * k + s] = v >= 0 && v < RT_NONE ? (uint16_t)v : RT_NONE;
        }
    t->cur[ms] = r0 + n;
    return SL_OK;
}

/* a replay: the rows' choice from the trace (rtrace.h's mapping) */
static void replay(rtrace *t, int ms, int n, int *top_e, float *top_w) {
    const int E = t->m_experts, k = t->m_k, tl = ms % t->layers;
    for (int r = 0; r < n; r++) {
        const uint16_t *src = t->e + ((size_t)(t->cur[ms] % t->tokens) * t->layers + tl) * t->k;
        int *te = top_e + (size_t)r * k;
        for (int s = 0; s < k; s++) {
            int e = (int)((src[s % t->k] + (unsigned)(s / t->k)) % (unsigned)E), at;
            for (int tries = 0; tries < E; tries++, e = (e + 1) % E) { /* the next free one up */
                int used = 0;
                for (int j = 0; j < s; j++) used |= te[j] == e;
                if (!used) break;
            }
            for (at = s; at > 0 && te[at - 1] > e; at--) te[at] = te[at - 1]; /* ascending */
            te[at] = e;
        }
        for (int s = 0; s < k; s++) top_w[(size_t)r * k + s] = 1.0f / (float)k;
        t->cur[ms]++;
    }
}

sl_status rtrace_route(rtrace *t, int ms, int n, int *top_e, float *top_w) {
    if (!t || ms < 0 || n <= 0) return SL_OK;
    if (!t->play) return ms < t->layers ? record(t, ms, n, top_e) : SL_OK;
    if (ms < t->m_layers) replay(t, ms, n, top_e, top_w);
    return SL_OK;
}

void rtrace_shape(const rtrace *t, int *tokens, int *layers, int *experts, int *k) {
    int rows = t->tokens;
    if (!t->play) { /* a recording: the rows every layer has */
        rows = t->cur[0];
        for (int l = 1; l < t->layers; l++) rows = t->cur[l] < rows ? t->cur[l] : rows;
    }
    *tokens = rows, *layers = t->layers, *experts = t->experts, *k = t->k;
}

const char *rtrace_describe(rtrace *t) {
    if (!t) return "";
    if (!t->play) { /* the rows so far */
        t->tokens = t->cur[0];
        describe(t);
    }
    return t->desc;
}
