/*
 * mlx.h — MLX / mlx-lm checkpoints (docs/QUANT.md, MLX checkpoints): the "quantization" block of config.json and the
 * shape rules of an affine-quantized module (weight uint32 [..., out, in*bits/32], scales and biases
 * [..., out, in/group]). The tensors themselves are registered by hf.c, which calls these helpers.
 */
#ifndef SL_MLX_H
#define SL_MLX_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "sluice.h"
#include "util/dtype.h"

typedef struct mlx_quant {
    int bits, group;    /* defaults */
    cJSON *overrides;   /* owned copy of the quantization object (per-module entries) */
} mlx_quant;

/* Parses config.json's "quantization" (falling back to "quantization_config" without quant_method, and to
 * text_config's) into *out. Returns SL_OK with out->bits == 0 when the config has none; SL_EUNSUPPORTED
 * for a mode other than affine or bits other than 4 and 8; SL_ECONFIG for a group size other than 32, 64,
 * 128 — for the defaults and for every per-module entry. `path` names the file in messages. */
sl_status mlx_parse_quant(const cJSON *root, const char *path, mlx_quant *out, sl_error *err);
void mlx_quant_free(mlx_quant *q);

/* Bits and group of the module at MLX path `module` (the weight's name without ".weight"). */
void mlx_module_params(const mlx_quant *q, const char *module, int *bits, int *group);

/* Checks a quantized module: weight U32 of ndim (2, or 3 for stacked experts) dims `wshape`, scales and
 * biases of `sshape` / `bshape`, scale dtype sdt. On success sets *cols (logical input dim) and returns
 * SL_OK; otherwise SL_EFORMAT / SL_EUNSUPPORTED with a message naming `name`. */
sl_status mlx_check_module(const char *name, int bits, int group, int ndim, const int64_t *wshape,
                           int sndim, const int64_t *sshape, int bndim, const int64_t *bshape, dt_type sdt,
                           dt_type bdt, int64_t *cols, sl_error *err);

#endif
