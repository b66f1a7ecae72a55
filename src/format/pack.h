/*
 * pack.h — the packer (HF checkpoint -> .sluice) with an overridable write call, so tests can inject
 * a full disk or an I/O error at any byte.
 */
#ifndef SL_PACK_H
#define SL_PACK_H

#include <stdint.h>
#include <sys/types.h>

#include "sluice.h"

typedef struct pack_io {
    /* pwrite(2) semantics: returns bytes written or -1 with errno set. */
    ssize_t (*pwrite)(void *ctx, int fd, const void *buf, size_t n, off_t off);
    void *ctx;
} pack_io;

/* sl_pack with an explicit writer (NULL: pwrite). */
sl_status pack_run(const char *src_dir, const char *out_path, const sl_pack_params *p, const pack_io *io,
                   sl_error *err);

/* The dtype a tensor is stored in for a given non-quantized pack mode. */
#include "util/dtype.h"
dt_type pack_target_dtype(sl_quant q, dt_type src, int matrix);

/* How one tensor is stored: dtype and, for quantized dtypes, group, scale dtype, q3 seed and the activation form of
 * q8 / q4 from GGUF (tn_mat.act). */
typedef struct pack_tgt {
    dt_type dt;
    int group;
    dt_type sdt;
    uint32_t seed;
    int act;
} pack_tgt;

struct hf_ckpt;
struct hf_tensor;
/* Reads source tensor t converted to tgt into dst (q_mat_bytes bytes): plain conversion, quantization
 * of a float source (deterministic), or a verbatim copy of an MLX-quantized source (which must then
 * already have tgt's dtype, group and scale dtype). Used by pack and by verify --source. */
sl_status pack_derive(struct hf_ckpt *ck, const struct hf_tensor *t, const pack_tgt *tgt, void *dst, sl_error *err);
/* pack_derive quantizing a float source under importances imp [cols] (quant.h q_quantize_imp; NULL: pack_derive). */
sl_status pack_derive_imp(struct hf_ckpt *ck, const struct hf_tensor *t, const pack_tgt *tgt, const float *imp, void *dst,
                          sl_error *err);

/* Names of files copied verbatim into the container's blob section when present in the source. */
extern const char *const pack_blob_names[];

#endif
