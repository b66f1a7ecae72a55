/*
 * imatrix.c — llama.cpp's importance-matrix files; see imatrix.h for the two formats.
 *
 * The file is read whole (its xxh3 is the pack's record of it); a GGUF one is then parsed by import/gguf.c, whose
 * ranges are checked against the same size, and its tensors' data taken from the bytes read. A legacy one is walked
 * with a cursor that checks every length against what is left.
 *
 * Sections: entries, the GGUF format, the legacy format, opening, lookups and names.
 */
#include "import/imatrix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family/arch.h"
#include "import/gguf.h"
#include "util/err.h"
#include "util/fileio.h"
#include "util/xxh3.h"

#define IMAT_MAX_NAME 4096

/* ---- entries ------------------------------------------------------------------------------------- */

static void entry_free(imat_entry *e) {
    free(e->name);
    free(e->w);
    free(e->counts);
}

void imat_close(imat_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) entry_free(&f->e[i]);
    free(f->e);
    free(f->path);
    free(f);
}

static imat_entry *entry_push(imat_file *f, sl_error *err) {
    if (f->n % 64 == 0) {
        imat_entry *e = realloc(f->e, ((size_t)f->n + 64) * sizeof *e);
        if (!e) {
            err_set(err, SL_ENOMEM, "out of memory");
            return NULL;
        }
        f->e = e;
    }
    imat_entry *e = &f->e[f->n++];
    memset(e, 0, sizeof *e);
    return e;
}

static float rd_f32(const uint8_t *p) {
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    float v;
    memcpy(&v, &u, 4);
    return v;
}

static int32_t rd_i32(const uint8_t *p) {
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    int32_t v;
    memcpy(&v, &u, 4);
    return v;
}

/* ---- GGUF ------------------------------------------------------------------------------------------ */

static const gguf_tensor *find_tensor(const gguf_file *g, const char *name) {
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->t[i].name, name)) return &g->t[i];
    return NULL;
}

static int64_t kv_count(const gguf_file *g, const char *key) {
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (!strcmp(g->kv[i].key, key) && (g->kv[i].type == GGUF_U32 || g->kv[i].type == GGUF_I32 ||
                                           g->kv[i].type == GGUF_U64 || g->kv[i].type == GGUF_I64))
            return g->kv[i].type == GGUF_I32 || g->kv[i].type == GGUF_I64 ? g->kv[i].v.i : (int64_t)g->kv[i].v.u;
    return -1;
}

static int64_t nelem(const gguf_tensor *t) {
    int64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) n *= t->ne[d];
    return n;
}

/* One weight's in_sum2 s and counts c (both checked F32, their shapes agreeing) into entry e named `name`. */
static sl_status gguf_entry(imat_file *f, const uint8_t *bytes, const gguf_tensor *s, const gguf_tensor *c,
                            const char *name, sl_error *err) {
    if (s->type != GGML_F32 || c->type != GGML_F32)
        return err_set(err, SL_EFORMAT, "%s: '%s': in_sum2 and counts must be F32 (they are %s and %s)", f->path, name,
                      gguf_type_name(s->type) ? gguf_type_name(s->type) : "?",
                      gguf_type_name(c->type) ? gguf_type_name(c->type) : "?");
    const int64_t cols = s->ne[0], n_mat = s->n_dims > 1 ? s->ne[1] : 1;
    if (s->n_dims > 2 || c->n_dims > 2 || cols < 1 || n_mat < 1 || nelem(s) != cols * n_mat || nelem(c) != n_mat ||
        c->ne[0] != 1)
        return err_set(err, SL_EFORMAT, "%s: '%s': in_sum2 of %u dims [%lld, %lld] and counts of %lld values do not "
                      "agree (want [cols, n_mat] and [1, n_mat])", f->path, name, s->n_dims, (long long)s->ne[0],
                      (long long)(s->n_dims > 1 ? s->ne[1] : 1), (long long)nelem(c));
    imat_entry *e = entry_push(f, err);
    if (!e) return SL_ENOMEM;
    e->name = strdup(name);
    e->w = malloc((size_t)(cols * n_mat) * sizeof *e->w);
    e->counts = malloc((size_t)n_mat * sizeof *e->counts);
    if (!e->name || !e->w || !e->counts) return err_set(err, SL_ENOMEM, "out of memory");
    e->cols = cols;
    e->n_mat = n_mat;
    e->n_vals = cols * n_mat;
    for (int64_t m = 0; m < n_mat; m++) {
        const float cnt = rd_f32(bytes + c->off + 4 * (uint64_t)m);
        if (!(cnt >= 0) || !isfinite(cnt))
            return err_set(err, SL_EFORMAT, "%s: '%s': count %lld is %g", f->path, name, (long long)m, (double)cnt);
        e->counts[m] = cnt;
        for (int64_t j = 0; j < cols; j++) {
            const float v = rd_f32(bytes + s->off + 4 * (uint64_t)(m * cols + j));
            if (!(v >= 0) || !isfinite(v))
                return err_set(err, SL_EFORMAT, "%s: '%s': in_sum2[%lld][%lld] is %g (sums of squares are >= 0 and "
                              "finite)", f->path, name, (long long)m, (long long)j, (double)v);
            e->w[m * cols + j] = cnt > 0 ? v / cnt : 0.0f;
        }
    }
    return SL_OK;
}

static sl_status gguf_parse(imat_file *f, const uint8_t *bytes, size_t len, sl_error *err) {
    gguf_file g;
    sl_status st = gguf_open_file(f->path, &g, err);
    if (st) return st;
    if (g.size != len) {
        st = err_set(err, SL_EIO, "%s: the file changed while it was read", f->path);
        goto done;
    }
    f->chunk_count = kv_count(&g, "imatrix.chunk_count");
    f->chunk_size = kv_count(&g, "imatrix.chunk_size");
    for (uint64_t i = 0; i < g.n_tensors && !st; i++) {
        const char *nm = g.t[i].name;
        size_t n = strlen(nm);
        const char *want = NULL;
        char base[IMAT_MAX_NAME];
        if (n > 7 && !strcmp(nm + n - 7, ".counts")) want = ".in_sum2", n -= 7;
        else if (n > 8 && !strcmp(nm + n - 8, ".in_sum2")) want = ".counts", n -= 8;
        else continue; /* another tensor: not ours */
        if (n + 9 > sizeof base) {
            st = err_set(err, SL_EFORMAT, "%s: tensor name of %zu bytes is too long", f->path, strlen(nm));
            break;
        }
        memcpy(base, nm, n);
        strcpy(base + n, want);
        const gguf_tensor *other = find_tensor(&g, base);
        base[n] = 0;
        if (!other)
            st = err_set(err, SL_EFORMAT, "%s: '%s' has %s but no %s", f->path, base, want[1] == 'c' ? "in_sum2" : "counts",
                         want + 1);
        else if (want[1] == 'c') /* the in_sum2 side makes the entry, once */
            st = gguf_entry(f, bytes, &g.t[i], other, base, err);
    }
    if (!st && f->n == 0)
        st = err_set(err, SL_EFORMAT, "%s: not an importance matrix (no '<name>.in_sum2' tensor; general.type of "
                    "llama-imatrix's files is \"imatrix\")", f->path);
done:
    gguf_close_file(&g);
    return st;
}

/* ---- legacy .dat ---------------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t len, pos;
} cur;

static int take(cur *c, size_t n, const uint8_t **out) {
    if (n > c->len - c->pos) return -1;
    *out = c->p + c->pos;
    c->pos += n;
    return 0;
}

static sl_status legacy_parse(imat_file *f, const uint8_t *bytes, size_t len, sl_error *err) {
    cur c = {bytes, len, 0};
    const uint8_t *p;
    if (take(&c, 4, &p))
        return err_set(err, SL_EFORMAT, "%s: truncated: %zu bytes, not an importance matrix", f->path, len);
    const int32_t n_entries = rd_i32(p);
    if (n_entries < 1 || (size_t)n_entries > len / 16)
        return err_set(err, SL_EFORMAT, "%s: not an importance matrix: %d entries in a file of %zu bytes (neither GGUF "
                      "nor llama-imatrix's .dat)", f->path, n_entries, len);
    for (int32_t i = 0; i < n_entries; i++) {
        if (take(&c, 4, &p)) goto trunc;
        const int32_t nl = rd_i32(p);
        if (nl < 1 || nl >= IMAT_MAX_NAME)
            return err_set(err, SL_EFORMAT, "%s: entry %d: name length %d at byte %zu", f->path, i, nl, c.pos - 4);
        if (take(&c, (size_t)nl, &p)) goto trunc;
        if (memchr(p, 0, (size_t)nl))
            return err_set(err, SL_EFORMAT, "%s: entry %d: its name holds a NUL byte", f->path, i);
        imat_entry *e = entry_push(f, err);
        if (!e) return SL_ENOMEM;
        if (!(e->name = strndup((const char *)p, (size_t)nl))) return err_set(err, SL_ENOMEM, "out of memory");
        if (take(&c, 8, &p)) goto trunc;
        const int32_t ncall = rd_i32(p), nval = rd_i32(p + 4);
        if (nval < 1 || ncall < 0)
            return err_set(err, SL_EFORMAT, "%s: '%s': %d values, ncall %d", f->path, e->name, nval, ncall);
        if (take(&c, 4 * (size_t)nval, &p)) goto trunc;
        if (!(e->w = malloc((size_t)nval * sizeof *e->w))) return err_set(err, SL_ENOMEM, "out of memory");
        e->n_vals = nval;
        for (int32_t j = 0; j < nval; j++) {
            const float v = rd_f32(p + 4 * (size_t)j);
            if (!(v >= 0) || !isfinite(v))
                return err_set(err, SL_EFORMAT, "%s: '%s': value %d is %g (mean squares are >= 0 and finite)", f->path,
                              e->name, j, (double)v);
            e->w[j] = ncall > 0 ? v / (float)ncall : v; /* llama-quantize's load_imatrix */
        }
    }
    if (c.pos + 4 <= len) { /* the optional trailer: the chunk count, then the dataset's name */
        take(&c, 4, &p);
        f->chunk_count = rd_i32(p);
    }
    return SL_OK;
trunc:
    return err_set(err, SL_EFORMAT, "%s: truncated at byte %zu of %zu (entry %d of %d)", f->path, c.pos, len, f->n,
                  n_entries);
}

/* ---- opening ------------------------------------------------------------------------------------- */

sl_status imat_open(const char *path, imat_file **out, sl_error *err) {
    imat_file *f = calloc(1, sizeof *f);
    char *bytes = NULL;
    size_t len = 0;
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return err_set(err, SL_ENOMEM, "out of memory");
    }
    f->chunk_count = f->chunk_size = -1;
    sl_status st = fio_read_file(path, &bytes, &len, err);
    if (!st) {
        f->hash = XXH3_64bits(bytes, len);
        f->legacy = !(len >= 4 && !memcmp(bytes, "GGUF", 4));
        st = f->legacy ? legacy_parse(f, (const uint8_t *)bytes, len, err) : gguf_parse(f, (const uint8_t *)bytes, len, err);
    }
    free(bytes);
    if (st) {
        imat_close(f);
        return st;
    }
    *out = f;
    return SL_OK;
}

/* ---- lookups and names ------------------------------------------------------------------------------ */

const imat_entry *imat_find(const imat_file *f, const char *gguf_name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->e[i].name, gguf_name)) return &f->e[i];
    return NULL;
}

sl_status imat_weights(const imat_file *f, const char *gguf_name, int64_t cols, int64_t n_mat, int64_t mat,
                       const float **w, sl_error *err) {
    *w = NULL;
    const imat_entry *e = imat_find(f, gguf_name);
    if (!e) return err_set(err, SL_ENOENT, "%s has no entry '%s'", f->path, gguf_name);
    if (cols < 1 || (e->cols && e->cols != cols) || e->n_vals % cols)
        return err_set(err, SL_EMISMATCH, "%s: entry '%s' has rows of %lld columns, the matrix %lld (an importance "
                      "matrix of another model?)", f->path, gguf_name, (long long)(e->cols ? e->cols : e->n_vals),
                      (long long)cols);
    const int64_t have = e->n_vals / cols;
    if (have != 1 && have != n_mat)
        return err_set(err, SL_EMISMATCH, "%s: entry '%s' holds %lld matrices of %lld columns, the model %lld (an "
                      "importance matrix of another model?)", f->path, gguf_name, (long long)have, (long long)cols,
                      (long long)n_mat);
    const int64_t m = have == 1 ? 0 : mat;
    if (e->counts && !(e->counts[m] > 0)) return SL_OK; /* this expert saw no token */
    *w = e->w + m * cols;
    return SL_OK;
}

/* The first source of a gguf_xf rule for `name` (a part's when part), when the rule keeps columns as they are. */
static const char *xf_source(const arch_desc *a, const char *name, int part) {
    for (int k = 0; k < a->n_gguf_xf; k++) {
        const arch_gguf_xf *r = &a->gguf_xf[k];
        if (r->part == part && !strcmp(r->name, name) && !r->f32) return r->src[0];
    }
    return NULL;
}

int imat_gguf_name(const fam_config *c, const char *name, int layer, int part, char *out, size_t cap) {
    const arch_desc *a = arch_get(c->arch);
    if (!a) return -1;
    const char *g = NULL;
    if (!name) { /* a routed expert part */
        const arch_pdef *p = arch_part(c, part);
        if (!p) return -1;
        g = p->gguf ? p->gguf : xf_source(a, p->name, 1);
    } else {
        const char *rel = name;
        int l = -1, nr = 0;
        if (sscanf(name, "layers.%d.%n", &l, &nr) == 1 && nr > 0) rel = name + nr;
        layer = l;
        for (int k = 0; k < a->n_tensors && !g; k++) {
            const arch_tdef *d = &a->tensors[k];
            const int global = d->when == AW_GLOBAL || d->when == AW_UNTIED;
            if (global == (layer < 0) && !strcmp(d->name, rel)) g = d->gguf ? d->gguf : xf_source(a, rel, 0);
        }
    }
    if (!g) return -1;
    int n = layer >= 0 ? snprintf(out, cap, "blk.%d.%s", layer, g) : snprintf(out, cap, "%s", g);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}
