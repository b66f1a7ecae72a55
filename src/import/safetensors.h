/*
 * safetensors.h — reader for one .safetensors file: 8-byte little-endian header length, a JSON header
 * {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data.
 *
 * st_open validates the header against the file before anything is read: the header fits, offsets are
 * in range, ranges do not overlap, and shape x dtype size equals the byte range (for known dtypes).
 */
#ifndef SL_SAFETENSORS_H
#define SL_SAFETENSORS_H

#include <stdint.h>

#include "sluice.h"
#include "util/dtype.h"

typedef struct st_entry {
    char *name;
    char dtype_str[16]; /* as written, e.g. "BF16" */
    dt_type dtype;     /* DT_NONE for dtypes we do not convert (U32, I64, ...) */
    int ndim;
    int64_t shape[8];
    uint64_t off; /* absolute file offset */
    uint64_t len; /* bytes */
} st_entry;

typedef struct st_file {
    char *path;
    char *name; /* base name, for messages */
    int fd;
    uint64_t size;
    int n;
    st_entry *e;
} st_file;

sl_status st_open(const char *path, st_file *out, sl_error *err);
void st_close(st_file *f);
const st_entry *st_find(const st_file *f, const char *name);

#endif
