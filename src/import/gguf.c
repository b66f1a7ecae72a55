/*
 * gguf.c — GGUF parsing, split models and block conversion; see gguf.h. Config and tokenizer
 * reconstruction from the metadata are in gguf_meta.c.
 *
 * File layout (llama.cpp ggml/include/gguf.h, gguf-py gguf/gguf_reader.py), all little-endian:
 *   "GGUF" u32 version  u64 n_tensors  u64 n_kv
 *   n_kv x { string key, u32 type, value }       string = u64 length + bytes; array = u32 type, u64 n, n values
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset (relative to the data) }
 *   padding to general.alignment (default 32), then the data; every tensor offset a multiple of the alignment.
 */
#include "import/gguf.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant/quant.h"
#include "util/err.h"
#include "util/fileio.h"

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_STR (1ull << 30)

/* ---- types ---------------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int blk, bytes; /* elements and bytes per block; 0: size unknown to us */
} ggml_tinfo;

/* ggml/include/ggml.h ggml_type; gguf-py constants.py GGML_QUANT_SIZES */
static const ggml_tinfo TYPES[] = {
    [0] = {"F32", 1, 4},         [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},      [6] = {"Q5_0", 32, 22},      [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},      [9] = {"Q8_1", 32, 36},      [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},   [12] = {"Q4_K", 256, 144},   [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},   [15] = {"Q8_K", 256, 292},   [16] = {"IQ2_XXS", 256, 66},
    [17] = {"IQ2_XS", 256, 74},  [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},   [21] = {"IQ3_S", 256, 110},  [22] = {"IQ2_S", 256, 82},
    [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},         [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},        [27] = {"I64", 1, 8},        [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 256, 56},   [30] = {"BF16", 1, 2},       [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},   [39] = {"MXFP4", 32, 17},    [40] = {"NVFP4", 64, 36},
    [41] = {"Q1_0", 128, 18},
};
#define N_TYPES (sizeof TYPES / sizeof *TYPES)

const char *gguf_type_name(uint32_t type) { return type < N_TYPES ? TYPES[type].name : NULL; }

/* The container layout that holds a type exactly by up-conversion (q4 / q8 codes, f32 scales, group 32), for
 * expert parts that mix types across layers and for the types kept as such below. */
int gguf_type_wide(uint32_t type, dt_type *dt, int *group, dt_type *sdt) {
    *group = 0;
    *sdt = DT_NONE;
    switch (type) {
    case GGML_F32: *dt = DT_F32; return 0;
    case GGML_F16: *dt = DT_F16; return 0;
    case GGML_BF16: *dt = DT_BF16; return 0;
    case GGML_Q8_0: *dt = DT_Q8; *group = 32; *sdt = DT_F16; return 0;
    /* llama-quantize's fallbacks for rows that are not whole 256-blocks, kept native (gguf_type_target); wide: 5-bit
     * codes in q8 */
    case GGML_Q5_0: case GGML_Q5_1: *dt = DT_Q8; *group = 32; *sdt = DT_F16; return 0;
    case GGML_Q4_0: case GGML_Q4_1: *dt = DT_Q4; *group = 32; *sdt = DT_F16; return 0;
    case GGML_Q4_K: *dt = DT_Q4; *group = 32; *sdt = DT_F32; return 0;
    case GGML_Q5_K: *dt = DT_Q8; *group = 32; *sdt = DT_F32; return 0;
    case GGML_MXFP4: *dt = DT_MXFP4; *group = 32; return 0; /* the container's own mxfp4 (quant/quant.h) */
    case GGML_Q6_K: *dt = DT_F32; return 0; /* groups of 16 with their own scale: f32 is the lossless home */
    }
    if (kq_from_ggml(type) != DT_NONE) { /* Q2_K, Q3_K, IQ*: f32 */
        *dt = DT_F32;
        return 0;
    }
    *dt = DT_NONE;
    return -1;
}

int gguf_type_target(uint32_t type, dt_type *dt, int *group, dt_type *sdt) {
    dt_type k = kq_from_ggml(type);
    if (k == DT_NONE) return gguf_type_wide(type, dt, group, sdt);
    *dt = k; /* kept as GGUF stores it (quant/kquant.h) */
    *group = kq_blk(k);
    *sdt = DT_NONE;
    return 0;
}

int gguf_type_act(uint32_t type) {
    switch (type) { /* ggml-cpu/ggml-cpu.c type_traits_cpu: vec_dot_type */
    case GGML_Q8_0: case GGML_Q4_0: case GGML_Q5_0: return TN_ACT_Q8_0;
    case GGML_Q4_1: case GGML_Q5_1: return TN_ACT_Q8_1;
    }
    return TN_ACT_HOUSE;
}

const char *gguf_supported_types(void) {
    return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, IQ2_XXS, "
           "IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, MXFP4";
}

static uint64_t type_row_bytes(uint32_t type, int64_t ne0) {
    const ggml_tinfo *ti = &TYPES[type];
    return (uint64_t)(ne0 / ti->blk) * (uint64_t)ti->bytes;
}

/* ---- reading the header ------------------------------------------------------------------------- */

typedef struct {
    gguf_file *f;
    uint64_t pos;
    uint8_t *buf;
    uint64_t boff, blen; /* buf holds [boff, boff + blen) */
    sl_error *err;
    char what[160];      /* the field being read, for messages */
} rdr;

#define RBUF (1u << 20)

static sl_status rd(rdr *r, void *dst, uint64_t n) {
    if (n > r->f->size || r->pos > r->f->size - n)
        return err_set(r->err, SL_EFORMAT, "%s: truncated at byte %llu reading %s (%llu bytes needed, file has %llu)",
                      r->f->path, (unsigned long long)r->pos, r->what, (unsigned long long)n,
                      (unsigned long long)r->f->size);
    uint8_t *d = dst;
    while (n > 0) {
        if (r->pos < r->boff || r->pos >= r->boff + r->blen) {
            uint64_t want = r->f->size - r->pos < RBUF ? r->f->size - r->pos : RBUF;
            sl_status st = fio_pread_all(r->f->fd, r->buf, (size_t)want, r->pos, r->f->path, r->err);
            if (st) return st;
            r->boff = r->pos;
            r->blen = want;
        }
        uint64_t k = r->boff + r->blen - r->pos;
        if (k > n) k = n;
        memcpy(d, r->buf + (r->pos - r->boff), (size_t)k);
        d += k;
        n -= k;
        r->pos += k;
    }
    return SL_OK;
}

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

static sl_status rd_u32(rdr *r, uint32_t *v) {
    uint8_t b[4];
    sl_status st = rd(r, b, 4);
    if (!st) *v = le32(b);
    return st;
}

static sl_status rd_u64(rdr *r, uint64_t *v) {
    uint8_t b[8];
    sl_status st = rd(r, b, 8);
    if (!st) *v = le64(b);
    return st;
}

static sl_status rd_str(rdr *r, char **out, uint64_t *len) {
    uint64_t n;
    sl_status st = rd_u64(r, &n);
    if (st) return st;
    if (n > GGUF_MAX_STR || n > r->f->size - r->pos)
        return err_set(r->err, SL_EFORMAT, "%s: %s: string length %llu at byte %llu runs past the end of the file",
                      r->f->path, r->what, (unsigned long long)n, (unsigned long long)(r->pos - 8));
    char *s = malloc((size_t)n + 1);
    if (!s) return err_set(r->err, SL_ENOMEM, "out of memory");
    if ((st = rd(r, s, n))) {
        free(s);
        return st;
    }
    s[n] = 0;
    *out = s;
    if (len) *len = n;
    return SL_OK;
}

static int scalar_size(uint32_t t) {
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    }
    return 0;
}

static void scalar_decode(uint32_t t, const uint8_t *p, gguf_kv *kv) {
    switch (t) {
    case GGUF_U8: case GGUF_BOOL: kv->v.u = p[0]; break;
    case GGUF_I8: kv->v.i = (int8_t)p[0]; break;
    case GGUF_U16: kv->v.u = (uint16_t)(p[0] | p[1] << 8); break;
    case GGUF_I16: kv->v.i = (int16_t)(p[0] | p[1] << 8); break;
    case GGUF_U32: kv->v.u = le32(p); break;
    case GGUF_I32: kv->v.i = (int32_t)le32(p); break;
    case GGUF_U64: kv->v.u = le64(p); break;
    case GGUF_I64: kv->v.i = (int64_t)le64(p); break;
    case GGUF_F32: {
        uint32_t u = le32(p);
        float x;
        memcpy(&x, &u, 4);
        kv->v.f = x;
        break;
    }
    case GGUF_F64: {
        uint64_t u = le64(p);
        memcpy(&kv->v.f, &u, 8);
        break;
    }
    }
}

/* Skips (validates) one value of type t; for nested arrays. depth bounds the recursion. */
static sl_status skip_value(rdr *r, uint32_t t, int depth) {
    if (t == GGUF_STRING) {
        uint64_t n;
        sl_status st = rd_u64(r, &n);
        if (st) return st;
        if (n > r->f->size - r->pos)
            return err_set(r->err, SL_EFORMAT, "%s: %s: string of %llu bytes runs past the end of the file", r->f->path,
                          r->what, (unsigned long long)n);
        r->pos += n;
        return SL_OK;
    }
    if (t == GGUF_ARRAY) {
        if (depth > 8) return err_set(r->err, SL_EFORMAT, "%s: %s: arrays nested too deeply", r->f->path, r->what);
        uint32_t et;
        uint64_t n;
        sl_status st = rd_u32(r, &et);
        if (!st) st = rd_u64(r, &n);
        if (st) return st;
        int es = scalar_size(et);
        if (!es && et != GGUF_STRING && et != GGUF_ARRAY)
            return err_set(r->err, SL_EFORMAT, "%s: %s: unknown array element type %u", r->f->path, r->what, et);
        if (es) {
            if (n > (r->f->size - r->pos) / (uint64_t)es)
                return err_set(r->err, SL_EFORMAT, "%s: %s: array of %llu elements runs past the end of the file",
                              r->f->path, r->what, (unsigned long long)n);
            r->pos += n * (uint64_t)es;
            return SL_OK;
        }
        if (n > r->f->size - r->pos) /* every element takes at least one byte */
            return err_set(r->err, SL_EFORMAT, "%s: %s: array of %llu elements runs past the end of the file",
                          r->f->path, r->what, (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++)
            if ((st = skip_value(r, et, depth + 1))) return st;
        return SL_OK;
    }
    int es = scalar_size(t);
    if (!es) return err_set(r->err, SL_EFORMAT, "%s: %s: unknown value type %u", r->f->path, r->what, t);
    if ((uint64_t)es > r->f->size - r->pos)
        return err_set(r->err, SL_EFORMAT, "%s: truncated at byte %llu reading %s", r->f->path,
                      (unsigned long long)r->pos, r->what);
    r->pos += (uint64_t)es;
    return SL_OK;
}

static sl_status read_kv(rdr *r, gguf_kv *kv) {
    sl_status st;
    uint32_t t;
    if ((st = rd_u32(r, &t))) return st;
    kv->type = t;
    int es = scalar_size(t);
    if (es) {
        uint8_t b[8];
        if ((st = rd(r, b, (uint64_t)es))) return st;
        scalar_decode(t, b, kv);
        if (t == GGUF_BOOL && kv->v.u > 1)
            return err_set(r->err, SL_EFORMAT, "%s: %s: bool value %llu is not 0 or 1", r->f->path, r->what,
                          (unsigned long long)kv->v.u);
        return SL_OK;
    }
    if (t == GGUF_STRING) return rd_str(r, &kv->str, &kv->str_len);
    if (t != GGUF_ARRAY) return err_set(r->err, SL_EFORMAT, "%s: %s: unknown value type %u", r->f->path, r->what, t);
    uint32_t et;
    uint64_t n;
    if ((st = rd_u32(r, &et)) || (st = rd_u64(r, &n))) return st;
    kv->arr_type = et;
    kv->n = n;
    es = scalar_size(et);
    if (es) {
        if (n > (r->f->size - r->pos) / (uint64_t)es)
            return err_set(r->err, SL_EFORMAT, "%s: %s: array of %llu elements runs past the end of the file",
                          r->f->path, r->what, (unsigned long long)n);
        kv->arr = malloc((size_t)(n * (uint64_t)es) + 1);
        if (!kv->arr) return err_set(r->err, SL_ENOMEM, "out of memory");
        return rd(r, kv->arr, n * (uint64_t)es);
    }
    if (et != GGUF_STRING && et != GGUF_ARRAY)
        return err_set(r->err, SL_EFORMAT, "%s: %s: unknown array element type %u", r->f->path, r->what, et);
    if (n > (r->f->size - r->pos) / 8) /* a string or an array takes at least 8 bytes */
        return err_set(r->err, SL_EFORMAT, "%s: %s: array of %llu elements runs past the end of the file", r->f->path,
                      r->what, (unsigned long long)n);
    if (et == GGUF_ARRAY) {
        kv->nested = 1;
        for (uint64_t i = 0; i < n; i++)
            if ((st = skip_value(r, GGUF_ARRAY, 1))) return st;
        return SL_OK;
    }
    char **v = calloc((size_t)n + 1, sizeof *v);
    kv->lens = calloc((size_t)n + 1, sizeof *kv->lens);
    kv->arr = v;
    if (!v || !kv->lens) return err_set(r->err, SL_ENOMEM, "out of memory");
    for (uint64_t i = 0; i < n; i++)
        if ((st = rd_str(r, &v[i], &kv->lens[i]))) return st;
    return SL_OK;
}

static void kv_free(gguf_kv *kv) {
    free(kv->key);
    free(kv->str);
    if (kv->arr_type == GGUF_STRING && kv->arr && !kv->nested)
        for (uint64_t i = 0; i < kv->n; i++) free(((char **)kv->arr)[i]);
    free(kv->arr);
    free(kv->lens);
}

void gguf_close_file(gguf_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    for (uint64_t i = 0; f->kv && i < f->n_kv; i++) kv_free(&f->kv[i]);
    free(f->kv);
    for (uint64_t i = 0; f->t && i < f->n_tensors; i++) free(f->t[i].name);
    free(f->t);
    free(f->path);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

static int cmp_toff(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : 0;
}

/* The header after the file is open: magic, version (2 or 3, little-endian), tensor and metadata counts (bounded
 * by what the file can hold). */
static sl_status read_header(rdr *r) {
    gguf_file *f = r->f;
    sl_error *err = r->err;
    uint8_t magic[4];
    sl_status st;
    snprintf(r->what, sizeof r->what, "the magic");
    if ((st = rd(r, magic, 4))) return st;
    if (memcmp(magic, "GGUF", 4)) return err_set(err, SL_EFORMAT, "%s: not a GGUF file (magic is not 'GGUF')", f->path);
    snprintf(r->what, sizeof r->what, "the version");
    if ((st = rd_u32(r, &f->version))) return st;
    if ((f->version & 0xffffu) == 0 && f->version != 0) /* byte-swapped: written on a big-endian machine */
        return err_set(err, SL_EUNSUPPORTED, "%s: a big-endian GGUF file (version %u byte-swapped); only little-endian "
                      "files are supported", f->path, __builtin_bswap32(f->version));
    if (f->version != 2 && f->version != 3)
        return err_set(err, SL_EUNSUPPORTED, "%s: GGUF version %u is not supported (2 and 3 are)", f->path, f->version);
    snprintf(r->what, sizeof r->what, "the tensor count");
    if ((st = rd_u64(r, &f->n_tensors))) return st;
    snprintf(r->what, sizeof r->what, "the metadata count");
    if ((st = rd_u64(r, &f->n_kv))) return st;
    /* every key/value takes >= 13 bytes, every tensor info >= 24: counts beyond that are corrupt */
    if (f->n_kv > f->size / 13 || f->n_tensors > f->size / 24) {
        uint64_t nk = f->n_kv, nt = f->n_tensors;
        f->n_kv = f->n_tensors = 0;
        return err_set(err, SL_EFORMAT, "%s: truncated or corrupt: the header claims %llu metadata entries and %llu tensors, more than a %llu-byte "
                      "file can hold", f->path, (unsigned long long)nk, (unsigned long long)nt, (unsigned long long)f->size);
    }
    return SL_OK;
}

/* The metadata key/values (each key once) and general.alignment. f->kv and f->t are allocated. */
static sl_status read_metadata(rdr *r) {
    gguf_file *f = r->f;
    sl_status st;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        snprintf(r->what, sizeof r->what, "the key of metadata entry %llu", (unsigned long long)i);
        if ((st = rd_str(r, &f->kv[i].key, NULL))) return st;
        snprintf(r->what, sizeof r->what, "metadata '%.120s'", f->kv[i].key);
        if ((st = read_kv(r, &f->kv[i]))) return st;
        for (uint64_t j = 0; j < i; j++)
            if (!strcmp(f->kv[j].key, f->kv[i].key))
                return err_set(r->err, SL_EFORMAT, "%s: metadata key '%s' appears twice", f->path, f->kv[i].key);
    }
    f->alignment = 32;
    const gguf_kv *al = gguf_kv_find(f, "general.alignment");
    if (al) {
        if (al->type != GGUF_U32 || al->v.u == 0 || (al->v.u & (al->v.u - 1)))
            return err_set(r->err, SL_EFORMAT, "%s: general.alignment must be a u32 power of two", f->path);
        f->alignment = (uint32_t)al->v.u;
    }
    return SL_OK;
}

/* Tensor info i: name (each once), dims (each 1..2^40, at most 2^50 elements), a known type whose blocks make
 * whole rows, an aligned offset relative to the data section; its byte size. */
static sl_status read_tensor_info(rdr *r, uint64_t i) {
    gguf_file *f = r->f;
    gguf_tensor *t = &f->t[i];
    sl_error *err = r->err;
    sl_status st;
    snprintf(r->what, sizeof r->what, "the name of tensor %llu", (unsigned long long)i);
    if ((st = rd_str(r, &t->name, NULL))) return st;
    snprintf(r->what, sizeof r->what, "tensor '%.120s'", t->name);
    if ((st = rd_u32(r, &t->n_dims))) return st;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return err_set(err, SL_EFORMAT, "%s: tensor '%s' has %u dimensions (1 to %d)", f->path, t->name, t->n_dims,
                      GGUF_MAX_DIMS);
    uint64_t nel = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t v;
        if ((st = rd_u64(r, &v))) return st;
        if (v == 0 || v > (1ull << 40) || nel > (1ull << 50) / v)
            return err_set(err, SL_EFORMAT, "%s: tensor '%s': dimension %u is %llu", f->path, t->name, d,
                          (unsigned long long)v);
        t->ne[d] = (int64_t)v;
        nel *= v;
    }
    uint64_t rel;
    if ((st = rd_u32(r, &t->type)) || (st = rd_u64(r, &rel))) return st;
    if (!gguf_type_name(t->type) || !TYPES[t->type].bytes)
        return err_set(err, SL_EUNSUPPORTED, "%s: tensor '%s' has unknown type %u", f->path, t->name, t->type);
    if (t->ne[0] % TYPES[t->type].blk)
        return err_set(err, SL_EFORMAT, "%s: tensor '%s': row of %lld elements is not a whole number of %s blocks "
                      "(%d)", f->path, t->name, (long long)t->ne[0], TYPES[t->type].name, TYPES[t->type].blk);
    if (rel % f->alignment)
        return err_set(err, SL_EFORMAT, "%s: tensor '%s': offset %llu is not a multiple of the alignment %u", f->path,
                      t->name, (unsigned long long)rel, f->alignment);
    t->bytes = type_row_bytes(t->type, t->ne[0]) * (nel / (uint64_t)t->ne[0]);
    t->off = rel; /* made absolute by place_data */
    for (uint64_t j = 0; j < i; j++)
        if (!strcmp(f->t[j].name, t->name))
            return err_set(err, SL_EFORMAT, "%s: tensor '%s' appears twice", f->path, t->name);
    return SL_OK;
}

/* The data section after the header (pos: the header's end): every tensor's range inside the file, its offset
 * made absolute, no two overlapping. */
static sl_status place_data(gguf_file *f, uint64_t pos, sl_error *err) {
    const uint64_t nt = f->n_tensors;
    gguf_tensor **order = NULL;
    sl_status st = SL_OK;
    f->data_off = (pos + f->alignment - 1) / f->alignment * f->alignment;
    if (nt && f->data_off > f->size) {
        st = err_set(err, SL_EFORMAT, "%s: truncated: the data section would start at byte %llu of %llu", f->path,
                    (unsigned long long)f->data_off, (unsigned long long)f->size);
        goto done;
    }
    uint64_t room = f->size > f->data_off ? f->size - f->data_off : 0;
    for (uint64_t i = 0; i < nt; i++) {
        gguf_tensor *t = &f->t[i];
        if (t->off > room || t->bytes > room - t->off) {
            st = err_set(err, SL_EFORMAT, "%s: tensor '%s': data [%llu, %llu) runs past the end of the file (%llu bytes "
                        "of data; truncated file?)", f->path, t->name, (unsigned long long)t->off,
                        (unsigned long long)(t->off + t->bytes), (unsigned long long)room);
            goto done;
        }
        t->off += f->data_off;
    }
    order = malloc(((size_t)nt + 1) * sizeof *order);
    if (!order) { st = err_set(err, SL_ENOMEM, "out of memory"); goto done; }
    for (uint64_t i = 0; i < nt; i++) order[i] = &f->t[i];
    qsort(order, (size_t)nt, sizeof *order, cmp_toff);
    for (uint64_t i = 1; i < nt; i++)
        if (order[i]->off < order[i - 1]->off + order[i - 1]->bytes) {
            st = err_set(err, SL_EFORMAT, "%s: tensors '%s' and '%s' overlap", f->path, order[i - 1]->name,
                        order[i]->name);
            goto done;
        }
done:
    free(order);
    return st;
}

sl_status gguf_open_file(const char *path, gguf_file *f, sl_error *err) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    if (!(f->path = strdup(path))) return err_set(err, SL_ENOMEM, "out of memory");
    const char *sl = strrchr(f->path, '/');
    f->name = sl ? sl + 1 : f->path;
    rdr r = {f, 0, NULL, 0, 0, err, "the header"};
    sl_status st = SL_OK;
    struct stat sb;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        st = err_set(err, err_from_errno(errno), "%s: cannot open: %s", path, strerror(errno));
        goto done;
    }
    if (fstat(f->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = err_set(err, SL_EFORMAT, "%s: not a regular file", path);
        goto done;
    }
    f->size = (uint64_t)sb.st_size;
    if (!(r.buf = malloc(RBUF))) { st = err_set(err, SL_ENOMEM, "out of memory"); goto done; }
    if ((st = read_header(&r))) goto done;
    f->kv = calloc((size_t)f->n_kv + 1, sizeof *f->kv);
    f->t = calloc((size_t)f->n_tensors + 1, sizeof *f->t);
    if (!f->kv || !f->t) { st = err_set(err, SL_ENOMEM, "out of memory"); goto done; }
    if ((st = read_metadata(&r))) goto done;
    for (uint64_t i = 0; i < f->n_tensors && !st; i++) st = read_tensor_info(&r, i);
    if (!st) st = place_data(f, r.pos, err);
done:
    free(r.buf);
    if (st) gguf_close_file(f);
    return st;
}

/* ---- models: one file or its splits -------------------------------------------------------------- */

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* "<prefix>-00001-of-00003.gguf": the split number and count; 0 if the name is not a split's. */
static int split_name(const char *name, char *prefix, size_t cap, int *no, int *count) {
    size_t n = strlen(name);
    if (n < 20 || !ends_with(name, ".gguf")) return 0;
    const char *p = name + n - 5 - 15; /* "-NNNNN-of-MMMMM" */
    int a, b, used = 0;
    if (p[0] != '-' || sscanf(p, "-%5d-of-%5d%n", &a, &b, &used) != 2 || used != 15) return 0;
    snprintf(prefix, cap, "%.*s", (int)(p - name), name);
    *no = a;
    *count = b;
    return 1;
}

int gguf_is_model(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) return 0;
    if (S_ISREG(sb.st_mode)) {
        char m[4];
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return 0;
        ssize_t k = pread(fd, m, 4, 0);
        close(fd);
        return k == 4 && !memcmp(m, "GGUF", 4);
    }
    if (!S_ISDIR(sb.st_mode)) return 0;
    char *cj = fio_join(path, "config.json");
    int has_cfg = cj && stat(cj, &sb) == 0;
    free(cj);
    if (has_cfg) return 0;
    DIR *d = opendir(path);
    if (!d) return 0;
    struct dirent *de;
    int found = 0;
    while (!found && (de = readdir(d))) found = ends_with(de->d_name, ".gguf");
    closedir(d);
    return found;
}

void gguf_close_model(gguf_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_files; i++) gguf_close_file(&m->files[i]);
    free(m->files);
    memset(m, 0, sizeof *m);
}

static int64_t kv_int(const gguf_kv *kv) {
    if (!kv) return -1;
    switch (kv->type) {
    case GGUF_U8: case GGUF_U16: case GGUF_U32: case GGUF_U64: return kv->v.u > INT64_MAX ? -1 : (int64_t)kv->v.u;
    case GGUF_I8: case GGUF_I16: case GGUF_I32: case GGUF_I64: return kv->v.i;
    }
    return -1;
}

/* The file that carries a model's metadata: path itself, or a directory's one model (a single .gguf, or the
 * first of the splits of one prefix) into first[cap]. */
static sl_status first_file(const char *path, char *first, size_t cap, sl_error *err) {
    struct stat sb;
    if (stat(path, &sb) != 0) return err_set(err, err_from_errno(errno), "%s: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) {
        snprintf(first, cap, "%s", path);
        return SL_OK;
    }
    DIR *d = opendir(path);
    if (!d) return err_set(err, err_from_errno(errno), "%s: cannot open directory: %s", path, strerror(errno));
    struct dirent *de;
    char single[1024] = "", pfx[1024] = "", p[1024];
    int n_single = 0, n_first = 0, no, cnt;
    while ((de = readdir(d))) {
        if (!ends_with(de->d_name, ".gguf")) continue;
        if (split_name(de->d_name, p, sizeof p, &no, &cnt)) {
            if (no == 1 && strcmp(p, pfx)) {
                n_first++;
                snprintf(pfx, sizeof pfx, "%s", de->d_name);
            }
        } else {
            n_single++;
            snprintf(single, sizeof single, "%s", de->d_name);
        }
    }
    closedir(d);
    if (n_single + n_first == 0) return err_set(err, SL_ENOENT, "%s: no .gguf file", path);
    if (n_single + n_first > 1)
        return err_set(err, SL_EINVAL, "%s: holds more than one GGUF model; name the file (or the first split)", path);
    snprintf(first, cap, "%s/%s", path, n_first ? pfx : single);
    return SL_OK;
}

/* The splits of an open model agree: split.no in order, split.tensors.count the tensors they hold, every tensor
 * name in one split only. */
static sl_status check_splits(const gguf_model *m, int64_t count, sl_error *err) {
    uint64_t total = 0;
    for (int i = 0; i < m->n_files; i++) {
        const gguf_file *f = &m->files[i];
        int64_t sn = kv_int(gguf_kv_find(f, "split.no"));
        if (count > 1 && sn != i)
            return err_set(err, SL_EFORMAT, "%s: split.no is %lld, expected %d", f->path, (long long)sn, i);
        total += f->n_tensors;
    }
    const gguf_kv *ktc = gguf_kv_find(&m->files[0], "split.tensors.count");
    if (count > 1 && ktc && kv_int(ktc) != (int64_t)total)
        return err_set(err, SL_EFORMAT, "%s: split.tensors.count is %lld but the %lld splits hold %llu tensors",
                      m->files[0].path, (long long)kv_int(ktc), (long long)count, (unsigned long long)total);
    for (int i = 1; i < m->n_files; i++) /* a tensor name is unique across the splits */
        for (uint64_t a = 0; a < m->files[i].n_tensors; a++)
            for (int j = 0; j < i; j++)
                for (uint64_t b = 0; b < m->files[j].n_tensors; b++)
                    if (!strcmp(m->files[i].t[a].name, m->files[j].t[b].name))
                        return err_set(err, SL_EFORMAT, "%s: tensor '%s' is also in %s", m->files[i].path,
                                      m->files[i].t[a].name, m->files[j].name);
    return SL_OK;
}

sl_status gguf_open_model(const char *path, gguf_model *m, sl_error *err) {
    memset(m, 0, sizeof *m);
    char first[4096], prefix[1024];
    sl_status st = first_file(path, first, sizeof first, err);
    if (st) goto done;
    const char *base = strrchr(first, '/');
    base = base ? base + 1 : first;
    int no = 0, cnt = 0, is_split = split_name(base, prefix, sizeof prefix, &no, &cnt);
    if (is_split && no != 1) {
        st = err_set(err, SL_EINVAL, "%s: split %d of %d; name the first split (-00001-of-%05d.gguf)", first, no, cnt,
                    cnt);
        goto done;
    }
    if (!(m->files = calloc(1, sizeof *m->files))) { st = err_set(err, SL_ENOMEM, "out of memory"); goto done; }
    if ((st = gguf_open_file(first, &m->files[0], err))) goto done;
    m->n_files = 1;
    const gguf_kv *kc = gguf_kv_find(&m->files[0], "split.count");
    int64_t count = kc ? kv_int(kc) : 1;
    if (count < 1 || count > 99999) {
        st = err_set(err, SL_EFORMAT, "%s: split.count must be an integer 1..99999", first);
        goto done;
    }
    if (count > 1 && !is_split) {
        st = err_set(err, SL_EFORMAT, "%s: split.count is %lld but the name is not <name>-00001-of-%05lld.gguf", first,
                    (long long)count, (long long)count);
        goto done;
    }
    if (is_split && count != cnt) {
        st = err_set(err, SL_EFORMAT, "%s: split.count is %lld but the name says %d", first, (long long)count, cnt);
        goto done;
    }
    gguf_file *nf = realloc(m->files, (size_t)count * sizeof *nf);
    if (!nf) { st = err_set(err, SL_ENOMEM, "out of memory"); goto done; }
    m->files = nf;
    size_t dl = (size_t)(base - first);
    for (int64_t i = 1; i < count; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%.*s%s-%05d-of-%05d.gguf", (int)dl, first, prefix, (int)i + 1, (int)count);
        if ((st = gguf_open_file(p, &m->files[i], err))) goto done;
        m->n_files++;
    }
    st = check_splits(m, count, err);
done:
    if (st) gguf_close_model(m);
    return st;
}

/* ---- block conversion ---------------------------------------------------------------------------- */

/* One block decoded: unsigned codes per element, a scale and a bias per group (w = scale * code + bias,
 * exactly the value ggml / gguf-py dequantise to). */
typedef struct {
    uint8_t code[256];
    float scale[16], bias[16];
    int group;
} blk_dec;

static float h2f(const uint8_t *p) { return f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

/* get_scale_min_k4 (ggml-quants.c; gguf-py quants.py Q4_K.get_scale_min) */
static void scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static const int8_t MXFP4_K[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* ggml_e8m0_to_fp32_half (ggml-impl.h): 2^(e - 128) */
static float e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Q5_0 / Q5_1: d (, m) f16, qh u32 (bit i: element i's fifth bit), qs[16] as Q4_0's; w = d q - 16 d, or d q + m */
static void decode_q5(int one, const uint8_t *b, blk_dec *o) {
    const uint8_t *qh = b + 2 + 2 * one, *qs = qh + 4;
    const uint32_t h = le32(qh);
    o->group = 32;
    o->scale[0] = h2f(b);
    o->bias[0] = one ? h2f(b + 2) : -16.0f * o->scale[0];
    for (int i = 0; i < 16; i++) {
        o->code[i] = (uint8_t)((qs[i] & 0xF) | ((h >> i) & 1) << 4);
        o->code[i + 16] = (uint8_t)((qs[i] >> 4) | ((h >> (i + 16)) & 1) << 4);
    }
}

/* Decodes one block; returns 0, or -1 with *why when its values cannot be held exactly (a non-finite scale). */
static int decode_block(uint32_t type, const uint8_t *b, blk_dec *o, const char **why) {
    switch (type) {
    case GGML_Q8_0: {
        float d = h2f(b);
        o->group = 32;
        o->scale[0] = d;
        o->bias[0] = -128.0f * d;
        for (int i = 0; i < 32; i++) o->code[i] = (uint8_t)((int8_t)b[2 + i] + 128);
        break;
    }
    case GGML_Q4_0: {
        float d = h2f(b);
        o->group = 32;
        o->scale[0] = d;
        o->bias[0] = -8.0f * d;
        for (int i = 0; i < 16; i++) {
            o->code[i] = b[2 + i] & 0xF;
            o->code[i + 16] = b[2 + i] >> 4;
        }
        break;
    }
    case GGML_Q4_1: {
        o->group = 32;
        o->scale[0] = h2f(b);
        o->bias[0] = h2f(b + 2);
        for (int i = 0; i < 16; i++) {
            o->code[i] = b[4 + i] & 0xF;
            o->code[i + 16] = b[4 + i] >> 4;
        }
        break;
    }
    case GGML_Q5_0: case GGML_Q5_1: decode_q5(type == GGML_Q5_1, b, o); break;
    case GGML_Q4_K: case GGML_Q5_K: {
        float d = h2f(b), dmin = h2f(b + 2);
        const uint8_t *sc = b + 4, *qh = b + 16, *qs = type == GGML_Q4_K ? b + 16 : b + 48;
        o->group = 32;
        for (int s = 0; s < 8; s++) {
            int a, m;
            scale_min_k4(s, sc, &a, &m);
            o->scale[s] = d * (float)a;
            o->bias[s] = -(dmin * (float)m);
            for (int l = 0; l < 32; l++) {
                int q = (qs[(s / 2) * 32 + l] >> (4 * (s % 2))) & 0xF;
                if (type == GGML_Q5_K) q |= ((qh[l] >> s) & 1) << 4;
                o->code[s * 32 + l] = (uint8_t)q;
            }
        }
        break;
    }
    case GGML_Q6_K: {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = h2f(b + 208);
        o->group = 16;
        for (int g = 0; g < 16; g++) {
            o->scale[g] = d * (float)sc[g];
            o->bias[g] = -32.0f * o->scale[g];
        }
        for (int g = 0; g < 8; g++) { /* 32 elements: half h, quarter j */
            int h = g / 4, j = g % 4;
            for (int l = 0; l < 32; l++) {
                int lo = (ql[h * 64 + (j % 2) * 32 + l] >> (4 * (j / 2))) & 0xF;
                int hi = (qh[h * 32 + l] >> (2 * j)) & 3;
                o->code[g * 32 + l] = (uint8_t)(lo | hi << 4);
            }
        }
        break;
    }
    case GGML_MXFP4: {
        float d = e8m0_half(b[0]);
        o->group = 32;
        o->scale[0] = d;
        o->bias[0] = -128.0f * d;
        for (int i = 0; i < 16; i++) {
            o->code[i] = (uint8_t)(MXFP4_K[b[1 + i] & 0xF] + 128);
            o->code[i + 16] = (uint8_t)(MXFP4_K[b[1 + i] >> 4] + 128);
        }
        break;
    }
    default: *why = "not a block type"; return -1;
    }
    int ng = TYPES[type].blk / o->group;
    for (int g = 0; g < ng; g++)
        if (!isfinite(o->scale[g]) || !isfinite(o->bias[g])) {
            *why = "a block scale is not finite (or too large to hold as scale and bias)";
            return -1;
        }
    return 0;
}

static void put_scale(dt_type sdt, void *base, size_t i, float v) {
    if (sdt == DT_F32) ((float *)base)[i] = v;
    else ((uint16_t *)base)[i] = f32_to_f16(v);
}

/* F32 / F16 / BF16 rows as `to` (one of those), each row copied or through f32. */
static sl_status convert_float(uint32_t type, dt_type from, const uint8_t *s, int64_t rows, int64_t cols,
                               const int64_t *perm, dt_type to, void *dst, const char *name, sl_error *err) {
    if (to != DT_F32 && to != DT_F16 && to != DT_BF16)
        return err_set(err, SL_EUNSUPPORTED, "tensor '%s' (%s) cannot be read as %s", name, TYPES[type].name,
                      dt_name(to));
    uint64_t rb = type_row_bytes(type, cols);
    size_t osz = dt_size(to);
    float *tmp = from == to ? NULL : malloc((size_t)cols * sizeof(float));
    if (from != to && !tmp) return err_set(err, SL_ENOMEM, "out of memory converting '%s'", name);
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *sr = s + (uint64_t)(perm ? perm[r] : r) * rb;
        uint8_t *dr = (uint8_t *)dst + (uint64_t)r * (uint64_t)cols * osz;
        if (from == to) memcpy(dr, sr, (size_t)rb);
        else {
            dt_to_f32(from, sr, tmp, (size_t)cols);
            dt_from_f32(to, tmp, dr, (size_t)cols);
        }
    }
    free(tmp);
    return SL_OK;
}

/* GGUF's MXFP4 block (E8M0 e, 16 bytes: elements 0-15 low nibbles, 16-31 high) is the container's group of 32
 * with its nibbles in column order; 2^(e-128) * 2v = 2^(e-127) * v. Cannot fail. */
static void convert_mxfp4(const uint8_t *s, int64_t rows, int64_t cols, const int64_t *perm, void *dst) {
    const uint64_t rb = type_row_bytes(GGML_MXFP4, cols);
    const int nb = (int)(cols / 32);
    uint8_t *codes = dst, *scales = codes + (uint64_t)rows * (uint64_t)(cols / 2);
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *sr = s + (uint64_t)(perm ? perm[r] : r) * rb;
        for (int k = 0; k < nb; k++) {
            const uint8_t *b = sr + (size_t)k * 17;
            uint8_t e[32], *o = codes + (uint64_t)r * (uint64_t)(cols / 2) + (size_t)k * 16;
            for (int i = 0; i < 16; i++) {
                e[i] = b[1 + i] & 0xF;
                e[i + 16] = b[1 + i] >> 4;
            }
            for (int i = 0; i < 16; i++) o[i] = (uint8_t)(e[2 * i] | e[2 * i + 1] << 4);
            scales[(uint64_t)r * (uint64_t)nb + (uint64_t)k] = b[0];
        }
    }
}

/* Block-quantised rows decoded block by block: into the container's q8 / q4 layout (codes | scales | biases,
 * group and sdt the caller checked) when `to` is one, else dequantised to f32 and stored as `to`. */
static sl_status convert_blocks(uint32_t type, const uint8_t *s, int64_t rows, int64_t cols, const int64_t *perm,
                                dt_type to, int group, dt_type sdt, void *dst, const char *name, sl_error *err) {
    const int quant_out = to == DT_Q8 || to == DT_Q4;
    const int blk = TYPES[type].blk, bb = TYPES[type].bytes, nb = (int)(cols / blk);
    const uint64_t rb = type_row_bytes(type, cols);
    float *row = quant_out ? NULL : malloc((size_t)cols * sizeof(float));
    if (!quant_out && !row) return err_set(err, SL_ENOMEM, "out of memory converting '%s'", name);
    int bits = to == DT_Q8 ? 8 : 4;
    uint64_t crow = (uint64_t)cols * (uint64_t)bits / 8, ng = quant_out ? (uint64_t)(cols / group) : 0;
    uint8_t *codes = dst, *scales = codes + crow * (uint64_t)rows;
    uint8_t *biases = scales + (uint64_t)rows * ng * dt_size(sdt);
    size_t osz = quant_out ? 0 : dt_size(to);
    sl_status st = SL_OK;
    blk_dec d;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *sr = s + (uint64_t)(perm ? perm[r] : r) * rb;
        const dt_type kq = quant_out ? DT_NONE : kq_from_ggml(type);
        if (kq != DT_NONE) { /* quant/kquant.c: bitwise gguf-py's dequantize */
            kq_row_to_f32(kq, sr, (int)cols, row);
            dt_from_f32(to, row, (uint8_t *)dst + (uint64_t)r * (uint64_t)cols * osz, (size_t)cols);
            continue;
        }
        for (int k = 0; k < nb; k++) {
            const char *why = NULL;
            if (decode_block(type, sr + (size_t)k * (size_t)bb, &d, &why)) {
                st = err_set(err, SL_EFORMAT, "tensor '%s' (%s): row %lld block %d: %s", name, TYPES[type].name,
                            (long long)r, k, why);
                goto done;
            }
            int64_t c0 = (int64_t)k * blk;
            if (quant_out) {
                uint8_t *cr = codes + (uint64_t)r * crow;
                if (bits == 8) memcpy(cr + c0, d.code, (size_t)blk);
                else
                    for (int i = 0; i < blk; i += 2) cr[(c0 + i) / 2] = (uint8_t)(d.code[i] | d.code[i + 1] << 4);
                for (int g = 0; g < blk / d.group; g++) {
                    size_t gi = (size_t)((uint64_t)r * ng + (uint64_t)(c0 / d.group + g));
                    if (sdt == DT_F16 && (f16_to_f32(f32_to_f16(d.scale[g])) != d.scale[g] ||
                                          f16_to_f32(f32_to_f16(d.bias[g])) != d.bias[g])) {
                        st = err_set(err, SL_EFORMAT, "tensor '%s' (%s): row %lld block %d: scale %g / bias %g do "
                                    "not fit f16", name, TYPES[type].name, (long long)r, k, d.scale[g], d.bias[g]);
                        goto done;
                    }
                    put_scale(sdt, scales, gi, d.scale[g]);
                    put_scale(sdt, biases, gi, d.bias[g]);
                }
            } else {
                for (int i = 0; i < blk; i++) {
                    /* two statements, two roundings (never contracted into an fma): the product is exact
                     * for every type here, the sum is what ggml's dequantize_row_* and gguf-py compute */
                    float p = d.scale[i / d.group] * (float)d.code[i];
                    row[c0 + i] = p + d.bias[i / d.group];
                }
            }
        }
        if (!quant_out) dt_from_f32(to, row, (uint8_t *)dst + (uint64_t)r * (uint64_t)cols * osz, (size_t)cols);
    }
done:
    free(row);
    return st;
}

sl_status gguf_convert(uint32_t type, const void *src, int64_t rows, int64_t cols, const int64_t *perm, dt_type to,
                       int group, dt_type sdt, void *dst, const char *name, sl_error *err) {
    if (type >= N_TYPES || !TYPES[type].bytes)
        return err_set(err, SL_EUNSUPPORTED, "tensor '%s': unknown GGUF type %u", name, type);
    dt_type own, own_sdt;
    int own_group;
    if (gguf_type_target(type, &own, &own_group, &own_sdt))
        return err_set(err, SL_EUNSUPPORTED, "tensor '%s' has GGUF type %s, which sluice does not import (supported: %s)",
                      name, TYPES[type].name, gguf_supported_types());
    if (TYPES[type].blk == 1) return convert_float(type, own, src, rows, cols, perm, to, dst, name, err);
    if (kq_is(to)) {
        if (own != to || cols % kq_blk(to))
            return err_set(err, SL_EUNSUPPORTED, "tensor '%s' (%s) cannot be held as %s", name, TYPES[type].name,
                          dt_name(to));
        const uint64_t rb = type_row_bytes(type, cols);
        for (int64_t r = 0; r < rows; r++) /* the blocks as they are */
            memcpy((uint8_t *)dst + (uint64_t)r * rb, (const uint8_t *)src + (uint64_t)(perm ? perm[r] : r) * rb, (size_t)rb);
        return SL_OK;
    }
    if (kq_is(own)) gguf_type_wide(type, &own, &own_group, &own_sdt); /* to f32 or a wider layout: decoded below */
    if (to == DT_MXFP4) {
        if (type != GGML_MXFP4)
            return err_set(err, SL_EUNSUPPORTED, "tensor '%s' (%s) cannot be held as mxfp4", name, TYPES[type].name);
        convert_mxfp4(src, rows, cols, perm, dst);
        return SL_OK;
    }
    int quant_out = to == DT_Q8 || to == DT_Q4;
    if (quant_out && (!q_is_quant(own) || q_bits(to) < q_bits(own) || group != own_group ||
                      (own == DT_MXFP4 && to != DT_Q8) ||
                      (sdt != own_sdt && sdt != DT_F32)))
        return err_set(err, SL_EUNSUPPORTED, "tensor '%s' (%s) cannot be held exactly as %s group %d with %s scales", name,
                      TYPES[type].name, dt_name(to), group, dt_name(sdt));
    if (!quant_out && to != DT_F32 && to != DT_F16 && to != DT_BF16)
        return err_set(err, SL_EUNSUPPORTED, "tensor '%s' (%s) cannot be read as %s", name, TYPES[type].name, dt_name(to));
    return convert_blocks(type, src, rows, cols, perm, to, group, sdt, dst, name, err);
}
