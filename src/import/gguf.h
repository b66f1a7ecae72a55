/*
 * gguf.h — reader for GGUF files (llama.cpp's format, versions 2 and 3, little-endian): the header, the
 * metadata key/values (every value type, arrays included), the tensor infos and the data section; split
 * models (split.no / split.count / split.tensors.count); the lossless conversion of GGUF's block types into
 * the container's dtypes (docs/FORMAT.md, "GGUF import"); the tokenizer files rebuilt from the metadata
 * (import/gguf_tokenizer.c). The parsed metadata's types and config.json rebuilt from it are the family
 * room's (family/gguf_meta.h), since the family hooks read them. Layout: llama.cpp's ggml/include/gguf.h and gguf-py's gguf/gguf_reader.py.
 *
 * Everything read from a file is bounds-checked before use: a truncated or corrupt file gives one error
 * naming the file and the field or tensor, never a crash. Tensor dims are as GGUF lists them, innermost
 * first (ne[0] is a row's length).
 */
#ifndef SL_GGUF_H
#define SL_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "family/gguf_meta.h"
#include "sluice.h"
#include "util/dtype.h"

/* ggml tensor types (ggml_type in llama.cpp's ggml/include/ggml.h; gguf-py GGMLQuantizationType). */
enum {
    GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q5_0 = 6, GGML_Q5_1 = 7, GGML_Q8_0 = 8, GGML_Q4_K = 12, GGML_Q5_K = 13,
    GGML_Q6_K = 14, GGML_I32 = 26, GGML_BF16 = 30, GGML_MXFP4 = 39,
};

/* Parses one file (header, metadata, tensor infos) and checks every tensor's range against the file. */
sl_status gguf_open_file(const char *path, gguf_file *out, sl_error *err);
void gguf_close_file(gguf_file *f);

/* Opens a whole model (gguf_model, family/gguf_meta.h): one file, or every split of one (path: a .gguf file,
 * the first split, or a directory holding one model's .gguf files). files[0] carries the model's metadata. */
sl_status gguf_open_model(const char *path, gguf_model *out, sl_error *err);
void gguf_close_model(gguf_model *m);
/* Whether path names a GGUF model: a file whose first bytes are "GGUF", or a directory with a .gguf file
 * and no config.json. */
int gguf_is_model(const char *path);

/* "Q4_0", ...; NULL for a type id ggml does not define. */
const char *gguf_type_name(uint32_t type);
/* The container dtype a GGUF type is stored as (docs/FORMAT.md): Q8_0 / Q4_0 / Q4_1 as DT_Q8 / DT_Q4 with its
 * group and scale dtype, the k-quants, i-quants, Q5_0 and Q5_1 as themselves (quant/kquant.h kq_from_ggml: group
 * the block's length, no scale dtype). Returns 0, or -1 for a type sluice does not import. */
int gguf_type_target(uint32_t type, dt_type *dt, int *group, dt_type *sdt);
/* The layout that holds a type by up-conversion: q4 / q8 group 32 with f32 scales for Q4_K / Q5_K (as for Q4_0 /
 * Q8_0 with f16 scales), f32 for Q6_K, Q3_K, Q2_K and IQ4_*; for expert parts whose type differs by layer. */
int gguf_type_wide(uint32_t type, dt_type *dt, int *group, dt_type *sdt);
/* The activation form llama.cpp multiplies a GGUF type's blocks with, for the q8 / q4 it is stored as (tn_mat.act,
 * util/tensor.h): TN_ACT_Q8_0 for Q8_0, Q4_0, Q5_0, TN_ACT_Q8_1 for Q4_1, Q5_1 (their vec_dot_type), else
 * TN_ACT_HOUSE. */
int gguf_type_act(uint32_t type);
/* "F32, F16, ..." — the types gguf_type_target accepts. */
const char *gguf_supported_types(void);

/* Converts `rows` rows of `cols` elements of GGUF type `type` (src: the raw rows, back to back) into dst:
 * `to` F32 / F16 / BF16 (dequantised as gguf-py's gguf.quants.dequantize does, bit for bit), or a container
 * layout (codes | scales | biases, quant/quant.h) that holds the type exactly: its own from gguf_type_target,
 * or a wider one (q4 -> q8 codes, f16 -> f32 scales; same group), which lets one expert part mix types.
 * perm, when not NULL, gives the source row of each output row. `name` names the tensor in messages. */
sl_status gguf_convert(uint32_t type, const void *src, int64_t rows, int64_t cols, const int64_t *perm, dt_type to,
                       int group, dt_type sdt, void *dst, const char *name, sl_error *err);

/* tokenizer.json and tokenizer_config.json rebuilt from tokenizer.ggml.* and tokenizer.chat_template
 * (gpt2 BPE); *tok and *cfg NULL (and SL_OK) when the file has no tokenizer. */
sl_status gguf_tokenizer_json(const gguf_model *m, char **tok, char **cfg, sl_error *err);

/* The normalizer, pre_tokenizer and decoder of the byte-level BPE that tokenizer.ggml.pre `pre` names (e.g.
 * "kimi-k2") into a tokenizer.json object; -1 for a name not supported. */
struct cJSON;
int gguf_pre_pipeline(struct cJSON *root, const char *pre);

/* tokenizer.json rebuilt from a tiktoken BPE file (import/tiktoken.c): the ranks of `ranks` (its text, n bytes:
 * "base64 rank" lines) as a byte-level BPE vocabulary with the merges that reproduce them (llama.cpp's
 * conversion/qwen.py QwenModel.bpe), special tokens after them named by config_json's added_tokens_decoder
 * (Kimi's tokenization_kimi.py), the pre-tokenizer of `pre` (kimi-k2). *tok malloc'ed. */
sl_status tiktoken_tokenizer_json(const char *ranks, size_t n, const char *config_json, const char *pre, char **tok,
                                  sl_error *err);

#endif
