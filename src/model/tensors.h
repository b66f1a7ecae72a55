/*
 * tensors.h — the backbone tensors each architecture needs, with canonical names (see import/hf.h)
 * and expected shapes, in container order. Used by the importer (validation), the packer (layout)
 * and the loader (binding into sl_weights).
 */
#ifndef SL_TENSORS_H
#define SL_TENSORS_H

#include <stdint.h>

#include "model/config.h"

typedef struct arch_tensor {
    char name[96];
    int ndim;         /* 1 or 2 */
    int64_t shape[2];
    int matrix;       /* 1: a Linear/Embedding weight (quantisable); 0: a vector or conv kernel */
} arch_tensor;

/* Fills *out with a malloc'ed array of the backbone tensors; returns the count, or -1 on allocation
 * failure. Routed experts are not listed (see arch_expert_shape). */
int arch_backbone_tensors(const sl_config *c, arch_tensor **out);

/* Shape of routed-expert part p (0 gate_proj, 1 up_proj, 2 down_proj): [rows, cols]. */
void arch_expert_shape(const sl_config *c, int part, int64_t shape[2]);
extern const char *const arch_expert_part_names[3];

#endif
