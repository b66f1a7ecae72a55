/*
 * imatrix.h — llama.cpp's importance-matrix files (llama-imatrix's output) for importance-weighted quantisation
 * (`sluice pack --imatrix FILE`, docs/QUANT.md "Importance matrices").
 *
 * Both formats llama-imatrix writes (llama.cpp tools/imatrix/imatrix.cpp save_imatrix / save_imatrix_legacy, read
 * back by common/imatrix-loader.cpp):
 *   GGUF (the default): per weight matrix NAME two F32 tensors, NAME.in_sum2 [n_mat][cols] (the sums of the squared
 *     activations that met each column; n_mat > 1 for a stacked expert tensor, one row per expert) and NAME.counts
 *     [n_mat][1] (the tokens summed); metadata general.type "imatrix", imatrix.datasets, imatrix.chunk_count,
 *     imatrix.chunk_size.
 *   legacy .dat: i32 n_entries, then per entry i32 len, the name, i32 ncall, i32 nval, f32 values[nval] (each the mean
 *     squared activation times ncall; an expert that saw no token written as 1 * ncall), then optionally i32
 *     chunk count, i32 len and the dataset's name.
 * Both become one importance per column, w = in_sum2 / counts (GGUF) or value / ncall (legacy), as llama-quantize's
 * load_imatrix computes them (tools/quantize/quantize.cpp); a GGUF matrix whose count is 0 has no importance (the
 * quantiser then runs unweighted, where llama-quantize passes ones).
 *
 * Every read is bounds-checked: a truncated or corrupt file fails with one message naming the file and the entry.
 */
#ifndef SL_IMATRIX_H
#define SL_IMATRIX_H

#include <stdint.h>

#include "family/config.h"
#include "sluice.h"

typedef struct imat_entry {
    char *name;      /* the GGUF weight's name: "blk.3.ffn_up_exps.weight" */
    int64_t n_vals;  /* n_mat * cols */
    int64_t cols;    /* a row's length (GGUF); 0 in a legacy file, which does not say (n_vals / the matrix's cols) */
    int64_t n_mat;   /* matrices (GGUF: counts' rows); 0 in a legacy file */
    float *w;        /* [n_vals] the importance of each column, >= 0 and finite */
    float *counts;   /* [n_mat] tokens per matrix (GGUF); NULL for legacy */
} imat_entry;

typedef struct imat_file {
    char *path;
    int legacy;          /* 1: the .dat format */
    int n;               /* entries, in file order */
    imat_entry *e;
    uint64_t hash;       /* xxh3-64 of the file's bytes */
    int64_t chunk_count; /* imatrix.chunk_count / the legacy trailer's; -1 when absent */
    int64_t chunk_size;  /* imatrix.chunk_size; -1 when absent (legacy files never say) */
} imat_file;

/* Reads path (either format, told apart by GGUF's magic) into *out (free with imat_close). SL_OK; SL_ENOENT / SL_EIO
 * when it cannot be read; SL_EFORMAT naming the file and the entry for a malformed one: truncated, a name that is not
 * NUL-free, an in_sum2 without its counts (or the reverse), a tensor that is not F32, shapes that disagree, a negative
 * or non-finite value, no entry at all. */
sl_status imat_open(const char *path, imat_file **out, sl_error *err);
void imat_close(imat_file *f); /* NULL: nothing */

/* The entry named gguf_name, or NULL. */
const imat_entry *imat_find(const imat_file *f, const char *gguf_name);

/* The importances [cols] of matrix `mat` (an expert's index, 0 for a plain matrix) of a weight with n_mat matrices
 * (the experts of a layer, or 1) of cols columns, from entry gguf_name: SL_OK with *w pointing into f (valid until
 * imat_close), or *w NULL when that matrix saw no token (a GGUF count of 0). SL_ENOENT when the file has no such
 * entry; SL_EMISMATCH naming the entry when its column count is not cols or it holds neither 1 nor n_mat matrices
 * (an imatrix made for another model). */
sl_status imat_weights(const imat_file *f, const char *gguf_name, int64_t cols, int64_t n_mat, int64_t mat,
                       const float **w, sl_error *err);

/* The GGUF name llama.cpp gives a weight matrix of c's family (the family table's gguf names, family/arch.h; for a
 * tensor that llama.cpp's converter splits, its first source, which reads the same input): a backbone tensor by its
 * canonical name ("layers.3.self_attn.q_proj", "lm_head"), a routed expert part by layer and part (name NULL). Writes
 * "blk.3.attn_q.weight" into out and returns 0, or -1 when the family names none (or out is too small). */
int imat_gguf_name(const fam_config *c, const char *name, int layer, int part, char *out, size_t cap);

#endif
