/*
 * hf.h — Hugging Face checkpoint import: config.json (every supported spelling), safetensors shards
 * (single file or model.safetensors.index.json), per-expert and fused expert layouts, FP8 block scales.
 *
 * Tensors are addressed by canonical names, independent of the on-disk prefix and expert layout:
 *   "embed_tokens", "norm", "lm_head",
 *   "layers.N.<module path>" without ".weight", e.g. "layers.0.self_attn.q_proj",
 *   "layers.0.linear_attn.A_log", "layers.0.linear_attn.conv1d" (stored [Cq][K]),
 *   routed experts always per expert: "layers.N.mlp.experts.E.<part>" with the family's part names
 *   (gate_proj / up_proj / down_proj; gpt-oss gate_up_proj, gate_up_proj_bias, down_proj, down_proj_bias), slices
 *   of the fused tensors when the checkpoint is fused (gpt-oss's [E, in, out] stacks read transposed, its MXFP4
 *   *_blocks + *_scales as DT_MXFP4).
 * Prefixes "model.", "model.language_model." are stripped; "model.visual.*", "mtp.*" are ignored.
 */
#ifndef SL_HF_H
#define SL_HF_H

#include <stddef.h>
#include <stdint.h>

#include "family/config.h"
#include "sluice.h"
#include "util/dtype.h"

typedef struct hf_ckpt hf_ckpt;

typedef struct hf_tensor {
    char *name;        /* canonical name */
    dt_type src_dtype;/* dtype on disk (DT_F8E4M3 for FP8) */
    int ndim;
    int64_t shape[4];  /* canonical shape (conv1d: [Cq][K]; expert slices: 2-D) */
    int expert_layer;  /* >= 0 for routed expert parts */
    int expert;        /* expert index */
    int expert_part;   /* index in the family's parts (0 gate, 1 up, 2 down for SwiGLU experts) */
    /* MLX-quantized sources (src_dtype DT_Q8 / DT_Q4, shape the logical [out, in]): */
    int q_group;
    dt_type q_sdtype; /* dtype of scales and biases */
    int q_act;        /* GGUF Q8_0 .. Q5_1 held as q8 / q4: tn_mat.act (import/gguf.h gguf_type_act); else 0 */
} hf_tensor;

/* Opens a checkpoint directory (or a GGUF model: a .gguf file, the first of its splits, or a directory holding
 * them; import/gguf.h): parses config.json into an fam_config, reads every safetensors header
 * and validates it against its file (offsets in range, no overlap, shape x dtype = byte size) and
 * against the config (every tensor the architecture needs is present with the right shape). */
sl_status hf_open(const char *dir, hf_ckpt **out, sl_error *err);
void hf_close(hf_ckpt *ck);

const fam_config *hf_config(const hf_ckpt *ck);
int hf_n_tensors(const hf_ckpt *ck);
const hf_tensor *hf_tensor_at(const hf_ckpt *ck, int i);
const hf_tensor *hf_find(const hf_ckpt *ck, const char *canon_name);

/* Reads one canonical tensor, converted to `to` (DT_F32, DT_F16, DT_BF16; FP8 is dequantised with its
 * block scales), into dst (elements x dt_size(to) bytes). An MLX-quantized tensor is read only as its own
 * dtype: codes, scales, biases in the layout of quant/quant.h (q_mat_bytes bytes); other `to` give
 * SL_EUNSUPPORTED. */
sl_status hf_read(hf_ckpt *ck, const hf_tensor *t, dt_type to, void *dst, sl_error *err);

/* A file the container keeps as a blob (format/pack.c pack_blob_names): the checkpoint directory's file, or
 * for a GGUF source the one rebuilt from its metadata (config.json, tokenizer.json, tokenizer_config.json).
 * *data NULL (and SL_OK) when there is none; else malloc'ed, *len bytes (NUL-terminated). */
sl_status hf_blob(hf_ckpt *ck, const char *name, char **data, size_t *len, sl_error *err);
/* Whether the source is a GGUF model (a .gguf file, its first split, or a directory of them). */
int hf_is_gguf(const hf_ckpt *ck);

/* Source files (for the manifest): count, name, size. */
int hf_n_files(const hf_ckpt *ck);
const char *hf_file_name(const hf_ckpt *ck, int i);
uint64_t hf_file_size(const hf_ckpt *ck, int i);
const char *hf_file_path(const hf_ckpt *ck, int i);
/* The raw config.json text and the directory. */
const char *hf_config_text(const hf_ckpt *ck);
const char *hf_dir(const hf_ckpt *ck);

#endif
