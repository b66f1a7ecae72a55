/*
 * safetensors.c — see safetensors.h. The header is parsed with cJSON; every entry is checked before
 * the caller sees it, so later reads can trust offsets and sizes.
 */
#include "import/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/err.h"
#include "util/fileio.h"

#define ST_MAX_HEADER (256u << 20)

static int cmp_off(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : 0;
}

static sl_status parse_entry(st_file *f, const cJSON *it, uint64_t data_off, st_entry *e, sl_error *err) {
    const char *nm = it->string;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
    if (!cJSON_IsObject(it) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of) ||
        cJSON_GetArraySize(of) != 2)
        return err_set(err, SL_EFORMAT, "%s: tensor '%s': header entry lacks dtype, shape or data_offsets", f->path, nm);
    e->name = strdup(nm);
    if (!e->name) return err_set(err, SL_ENOMEM, "out of memory");
    snprintf(e->dtype_str, sizeof e->dtype_str, "%s", dt->valuestring);
    e->dtype = dt_from_safetensors(dt->valuestring);
    e->ndim = cJSON_GetArraySize(sh);
    if (e->ndim > 8) return err_set(err, SL_EFORMAT, "%s: tensor '%s': %d dimensions", f->path, nm, e->ndim);
    uint64_t n = 1;
    for (int i = 0; i < e->ndim; i++) {
        const cJSON *d = cJSON_GetArrayItem(sh, i);
        if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 1e15)
            return err_set(err, SL_EFORMAT, "%s: tensor '%s': bad shape", f->path, nm);
        e->shape[i] = (int64_t)d->valuedouble;
        if (e->shape[i] && n > UINT64_MAX / (uint64_t)e->shape[i])
            return err_set(err, SL_EFORMAT, "%s: tensor '%s': shape has more elements than fit 64 bits", f->path, nm);
        n *= (uint64_t)e->shape[i];
    }
    const cJSON *b = cJSON_GetArrayItem(of, 0), *en = cJSON_GetArrayItem(of, 1);
    /* bounded before the conversion to an integer (a value past 2^64 would be undefined: fuzz/regress/safetensors) */
    if (!cJSON_IsNumber(b) || !cJSON_IsNumber(en) || b->valuedouble < 0 || en->valuedouble < b->valuedouble ||
        en->valuedouble > 9007199254740992.0)
        return err_set(err, SL_EFORMAT, "%s: tensor '%s': bad data_offsets", f->path, nm);
    uint64_t bo = (uint64_t)b->valuedouble, eo = (uint64_t)en->valuedouble;
    if (data_off + eo > f->size)
        return err_set(err, SL_EFORMAT,
                      "%s: tensor '%s': data [%llu, %llu) runs past the end of the file (%llu bytes of data; "
                      "truncated file?)",
                      f->path, nm, (unsigned long long)bo, (unsigned long long)eo,
                      (unsigned long long)(f->size - data_off));
    e->off = data_off + bo;
    e->len = eo - bo;
    size_t es = 0;
    if (e->dtype != DT_NONE) es = dt_size(e->dtype);
    else if (!strcmp(e->dtype_str, "U32") || !strcmp(e->dtype_str, "I32")) es = 4;
    else if (!strcmp(e->dtype_str, "I64") || !strcmp(e->dtype_str, "U64") || !strcmp(e->dtype_str, "F64")) es = 8;
    else if (!strcmp(e->dtype_str, "U8") || !strcmp(e->dtype_str, "I8") || !strcmp(e->dtype_str, "BOOL")) es = 1;
    else if (!strcmp(e->dtype_str, "I16") || !strcmp(e->dtype_str, "U16")) es = 2;
    if (es && n * es != e->len)
        return err_set(err, SL_EFORMAT,
                      "%s: tensor '%s': shape and dtype %s need %llu bytes but data_offsets span %llu",
                      f->path, nm, e->dtype_str, (unsigned long long)(n * es), (unsigned long long)e->len);
    return SL_OK;
}

sl_status st_open(const char *path, st_file *f, sl_error *err) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    char *hdr = NULL;
    cJSON *root = NULL;
    sl_status st = SL_OK;
    f->path = strdup(path);
    if (!f->path) return err_set(err, SL_ENOMEM, "out of memory");
    const char *slash = strrchr(f->path, '/');
    f->name = slash ? (char *)slash + 1 : f->path;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        st = err_set(err, err_from_errno(errno), "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(f->fd, &sb) != 0) {
        st = err_set(err, SL_EIO, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    f->size = (uint64_t)sb.st_size;
    uint8_t lenb[8];
    if (f->size < 8) {
        st = err_set(err, SL_EFORMAT, "%s: %llu bytes, too short for a safetensors header", path,
                    (unsigned long long)f->size);
        goto fail;
    }
    if ((st = fio_pread_all(f->fd, lenb, 8, 0, path, err))) goto fail;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | lenb[i];
    if (hlen > ST_MAX_HEADER || 8 + hlen > f->size) {
        st = err_set(err, SL_EFORMAT, "%s: header length %llu does not fit in the file (%llu bytes; truncated?)",
                    path, (unsigned long long)hlen, (unsigned long long)f->size);
        goto fail;
    }
    hdr = malloc(hlen + 1);
    if (!hdr) {
        st = err_set(err, SL_ENOMEM, "%s: out of memory for a %llu-byte header", path, (unsigned long long)hlen);
        goto fail;
    }
    if ((st = fio_pread_all(f->fd, hdr, hlen, 8, path, err))) goto fail;
    hdr[hlen] = 0;
    root = cJSON_ParseWithLength(hdr, hlen);
    if (!cJSON_IsObject(root)) {
        st = err_set(err, SL_EFORMAT, "%s: header is not a JSON object", path);
        goto fail;
    }
    int cap = cJSON_GetArraySize(root);
    f->e = calloc((size_t)(cap > 0 ? cap : 1), sizeof *f->e);
    if (!f->e) {
        st = err_set(err, SL_ENOMEM, "out of memory");
        goto fail;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        if (!strcmp(it->string, "__metadata__")) continue;
        st = parse_entry(f, it, 8 + hlen, &f->e[f->n], err);
        f->n++;
        if (st) goto fail;
    }
    /* overlap check on a sorted copy (entries stay in header order for the caller) */
    st_entry *s = malloc((size_t)(f->n > 0 ? f->n : 1) * sizeof *s);
    if (!s) {
        st = err_set(err, SL_ENOMEM, "out of memory");
        goto fail;
    }
    memcpy(s, f->e, (size_t)f->n * sizeof *s);
    qsort(s, (size_t)f->n, sizeof *s, cmp_off);
    for (int i = 1; i < f->n; i++) {
        if (s[i].off < s[i - 1].off + s[i - 1].len) {
            st = err_set(err, SL_EFORMAT, "%s: tensors '%s' and '%s' overlap in the file", path, s[i - 1].name,
                        s[i].name);
            free(s);
            goto fail;
        }
    }
    free(s);
    cJSON_Delete(root);
    free(hdr);
    return SL_OK;
fail:
    cJSON_Delete(root);
    free(hdr);
    st_close(f);
    return st;
}

void st_close(st_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < f->n; i++) free(f->e[i].name);
    free(f->e);
    free(f->path);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

const st_entry *st_find(const st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->e[i].name, name)) return &f->e[i];
    return NULL;
}
