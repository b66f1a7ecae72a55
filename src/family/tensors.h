/*
 * tensors.h — the backbone tensors a config needs, expanded from its family's table (family/arch.h):
 * canonical names (see import/hf.h), expected shapes and where each binds, in container order. Used by
 * the importer (validation), the packer and synth (layout) and the loader (binding into fam_weights).
 */
#ifndef SL_TENSORS_H
#define SL_TENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "family/config.h"

typedef struct arch_tensor {
    char name[96];
    int ndim;         /* 1 or 2 */
    int64_t shape[2];
    int matrix;       /* 1: a Linear/Embedding weight (quantisable, an tn_mat); 0: an f32 vector or conv kernel */
    int layer;        /* its layer, or -1 for model-wide tensors */
    size_t field;     /* offsetof in fam_layer_w (layer >= 0) or fam_weights */
    int router;       /* 1: a router or shared-expert gate (quantised at >= 8 bits) */
} arch_tensor;

/* Fills *out with a malloc'ed array of the backbone tensors; returns the count, or -1 on allocation
 * failure or an unknown family. Routed experts are not listed (see arch_expert_shape). */
int arch_backbone_tensors(const fam_config *c, arch_tensor **out);

/* Routed-expert part p of the family (arch_n_parts of them; 0 gate_proj, 1 up_proj, 2 down_proj for SwiGLU
 * experts): its shape [rows, cols] (a bias: [rows, 1], always stored f32), its canonical name, whether it is
 * a bias vector. */
void arch_expert_shape(const fam_config *c, int part, int64_t shape[2]);
const char *arch_expert_part_name(const fam_config *c, int part);
int arch_expert_part_is_vec(const fam_config *c, int part);

#endif
