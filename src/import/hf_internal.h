/*
 * hf_internal.h — a checkpoint's tensors as the importer keeps them (private to import/hf.c and
 * import/hf_gguf.c): each canonical tensor (hf_tensor, hf.h) with where its bytes are and how they are read.
 */
#ifndef SL_HF_INTERNAL_H
#define SL_HF_INTERNAL_H

#include <stdint.h>

#include "family/arch.h"
#include "import/gguf.h"
#include "import/hf.h"
#include "import/mlx.h"
#include "import/safetensors.h"

typedef struct hf_t {
    hf_tensor pub;
    int file;
    const st_entry *ent;   /* the on-disk entry (for fused experts: the whole stack) */
    uint64_t off, len;     /* bytes of this tensor (a slice for fused experts) */
    const st_entry *scale; /* FP8 weight_scale_inv, or NULL */
    int ints;              /* 8 / 4: an I64 / I32 tensor (DeepSeek-V4's tid2eid), read as f32 values */
    int mlx_u32;           /* an MLX uint32 weight: scales and biases attached by attach_mlx() */
    int qs_file, qb_file;  /* MLX scales / biases: file and byte range of this tensor's slice */
    uint64_t qs_off, qs_len, qb_off, qb_len;
    int transposed;        /* a slice of an [E, cols, rows] stack (x @ W): read as [cols][rows], transposed */
    int mx_blocks;         /* an MXFP4 *_blocks slice: its *_scales attached by attach_mxfp4() */
    int gg;                /* a GGUF tensor (or expert slice): converted by gguf_convert from gg_type */
    uint32_t gg_type;
    const arch_gguf_xf *xf; /* a tensor made of GGUF sources by the family's rule (family/arch.h), or NULL */
    int xf_n;              /* its sources: 1 or 2; source 0 is (file, off, len, gg_type), source 1 these: */
    int file2;
    uint64_t off2, len2;
    uint32_t gg_type2;
    int64_t src_cols[2], src_rows[2]; /* each source as rows of GGUF elements (a vector: rows of 1) */
} hf_t;

struct hf_ckpt {
    char *dir;
    char *config_text;
    fam_config cfg;
    int fp8, blk_r, blk_c;
    int n_files;
    st_file *files;
    hf_t *t;
    int n, cap;
    hf_t **experts; /* [n_layers][E][ARCH_MAX_PARTS] -> tensor, NULL if absent */
    int mxfp4;      /* quantization_config.quant_method mxfp4 (gpt-oss): experts.*_blocks + *_scales */
    mlx_quant mlx;  /* MLX "quantization" (bits 0: none) */
    gguf_model gm;  /* a GGUF source (gm.n_files > 0): its files, whose fds ck->files share */
    char *tok_json, *tok_cfg; /* tokenizer.json / tokenizer_config.json rebuilt from GGUF metadata */
};

/* A new zeroed tensor at the end of ck->t (expert_layer -1), or NULL when out of memory. Pointers into ck->t
 * are valid until the next call. */
hf_t *hf_push(hf_ckpt *ck);

/* A GGUF source (hf_gguf.c): opens the model at path (a file, its first split, or a directory of them) into
 * ck: config, tokenizer, files and tensors. What it makes is ck's (hf_close). */
sl_status hf_open_gguf(hf_ckpt *ck, const char *path, sl_error *err);
/* Reads GGUF tensor t converted to `to` into dst (hf_read's contract). */
sl_status hf_read_gguf(hf_ckpt *ck, const hf_t *t, dt_type to, void *dst, sl_error *err);

#endif
