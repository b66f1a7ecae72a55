/*
 * gguf_meta.h — a GGUF model's metadata as parsed (import/gguf.c reads and checks the file: key/values, tensor
 * infos), the lookups over it, and config.json rebuilt from it for the family's config hook
 * (family/gguf_meta.c). It lives in the family room because the family tables' gguf_config hooks read it
 * (through the ggm_* reader of family/arch.h); opening files and converting tensors stay in import/gguf.h.
 * Layout: llama.cpp's ggml/include/gguf.h and gguf-py's gguf/gguf_reader.py.
 */
#ifndef SL_GGUF_META_H
#define SL_GGUF_META_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

/* Metadata value types (gguf_type in llama.cpp's gguf.h). */
enum {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6,
    GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12,
};

typedef struct gguf_kv {
    char *key;
    uint32_t type;     /* GGUF_* */
    uint32_t arr_type; /* element type of an array */
    uint64_t n;        /* array length */
    int nested;        /* an array of arrays: validated, contents not kept */
    union {
        uint64_t u;
        int64_t i;
        double f;
    } v;               /* a scalar (bool: u) */
    char *str;         /* GGUF_STRING, NUL-terminated (len: str_len) */
    uint64_t str_len;
    void *arr;         /* numeric array: n raw little-endian elements; string array: char *[n] */
    uint64_t *lens;    /* string array: each string's length */
} gguf_kv;

typedef struct gguf_tensor {
    char *name;
    uint32_t n_dims;
    int64_t ne[4];     /* innermost first */
    uint32_t type;     /* GGML_* */
    uint64_t off;      /* absolute offset in the file */
    uint64_t bytes;
} gguf_tensor;

typedef struct gguf_file {
    char *path;
    const char *name;  /* base name, for messages */
    int fd;
    uint64_t size;
    uint32_t version;
    uint64_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *t;
    uint32_t alignment;
    uint64_t data_off;
} gguf_file;

const gguf_kv *gguf_kv_find(const gguf_file *f, const char *key);
/* A scalar number's value (any integer, bool or float type) into *v: 1, or 0 when kv is NULL or not a number. */
int gguf_kv_num(const gguf_kv *kv, double *v);
/* The string value of key, or NULL when absent or not a string. */
const char *gguf_kv_str(const gguf_file *f, const char *key);

/* A whole model: one file, or every split of one (import/gguf.h gguf_open_model). files[0] carries the
 * model's metadata. */
typedef struct gguf_model {
    gguf_file *files;
    int n_files;
} gguf_model;

/* config.json (the Hugging Face fields the family's config hook reads) rebuilt from the metadata of m,
 * for the family general.architecture names (family/arch.h arch_by_gguf). malloc'ed text. */
sl_status gguf_config_json(const gguf_model *m, char **out, sl_error *err);

#endif
