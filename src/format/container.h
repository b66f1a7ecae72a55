/*
 * container.h — the .sluice container: header, manifest, sections (byte layout in docs/FORMAT.md).
 *
 *   [0, 4096)          header: magic, version, section offsets, header checksum
 *   backbone section   every non-routed tensor, each 64-byte aligned (loaded into RAM at open)
 *   expert section     4096-aligned; expert (slot s, index e) at expert_off + (s*E + e)*stride;
 *                      inside a block the family's parts back to back (64-byte aligned): gate_proj | up_proj |
 *                      down_proj, or gpt-oss gate_up_proj | gate_up_proj_bias | down_proj | down_proj_bias
 *   hash table         u64 xxh3-64 per expert block [n_moe_layers][E] (over the block's used bytes)
 *   blobs              config.json and tokenizer files of the source, verbatim
 *   manifest           JSON: normalised config, tensor table, expert layout, blobs, sources, pack options
 * "slot" s is the index of a MoE layer among MoE layers (dense layers have no expert blocks).
 */
#ifndef SL_CONTAINER_H
#define SL_CONTAINER_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "family/arch.h"
#include "family/config.h"
#include "sluice.h"
#include "util/dtype.h"
#include "util/tensor.h"

#define SLC_MAGIC "SLUICE\0\1"
#define SLC_VERSION 1
#define SLC_HEADER_BYTES 4096
#define SLC_ALIGN 4096
#define SLC_TENSOR_ALIGN 64

typedef struct slc_header {
    uint32_t version;
    uint64_t file_size;
    uint64_t manifest_off, manifest_len, manifest_hash;
    uint64_t backbone_off, backbone_len;
    uint64_t expert_off, expert_len, expert_stride;
    uint32_t n_moe_layers, n_experts;
    uint64_t hash_off, hash_len;
    uint64_t blob_off, blob_len;
} slc_header;

typedef struct slc_tensor {
    char *name;
    dt_type dtype;
    int ndim;
    int64_t shape[2];
    uint64_t off, size; /* absolute offset, bytes */
    uint64_t hash;
    /* quantized dtypes (q8/q4/q3): manifest "group", "scale_dtype", "seed"; q8/q4 from GGUF: "act" (tn_mat.act) */
    int group;
    dt_type sdtype;
    uint32_t seed;
    int act;
} slc_tensor;

typedef struct slc_part {
    dt_type dtype;
    int64_t shape[2];
    uint64_t off, size; /* offset inside the block */
    int group;          /* quantized dtypes, as in slc_tensor */
    dt_type sdtype;
    uint32_t seed;
    int act;
} slc_part;

/* The expert blocks of one MoE layer when the layout differs by layer (a GGUF whose part types vary by layer, as
 * llama-quantize's Q4_K_M gives ffn_down_exps Q6_K in some layers and Q4_K in the others): its parts, where its
 * blocks start (relative to the expert section), its stride and used bytes. */
typedef struct slc_slot {
    slc_part parts[ARCH_MAX_PARTS];
    uint64_t off, stride, bytes;
} slc_slot;

typedef struct slc_blob {
    char *name;
    uint64_t off, size, hash;
} slc_blob;

typedef struct slc_file {
    int fd;
    char *path;
    slc_header h;
    fam_config cfg;
    cJSON *manifest;
    int n_tensors;
    slc_tensor *t;
    int *moe_layers;       /* [n_moe_layers]: model layer of each slot */
    slc_part parts[ARCH_MAX_PARTS]; /* n_parts of them (the family's, family/arch.h); slot 0's when slots is set */
    int n_parts;
    uint64_t block_bytes;  /* used bytes of an expert block (<= stride); the largest slot's when slots is set */
    slc_slot *slots;       /* [n_moe_layers] when the layout differs by MoE layer (manifest experts.slots), else
                              NULL: every slot has parts[], h.expert_stride, block_bytes. Use the accessors below. */
    uint64_t *expert_hash; /* [n_moe_layers * E] */
    int n_blobs;
    slc_blob *blobs;
} slc_file;

/* Encodes / decodes the fixed header (4096 bytes). decode checks magic, version and checksum. */
void slc_header_encode(const slc_header *h, uint8_t *buf);
sl_status slc_header_decode(const uint8_t *buf, slc_header *h, const char *path, sl_error *err);

/* Opens a container: header, manifest and expert hash table, all structurally validated (sections
 * inside the file, tensors inside the backbone section, config consistent with the tensor table).
 * Tensor data is not read. */
sl_status slc_open(const char *path, slc_file *f, sl_error *err);
void slc_close(slc_file *f);

static inline uint64_t slc_expert_offset(const slc_file *f, int slot, int e) {
    if (f->slots) return f->h.expert_off + f->slots[slot].off + (uint64_t)e * f->slots[slot].stride;
    return f->h.expert_off + ((uint64_t)slot * f->h.n_experts + (uint64_t)e) * f->h.expert_stride;
}
/* An expert block's stride, used bytes and parts in MoE slot `slot` (h.expert_stride is the largest stride). */
static inline uint64_t slc_slot_stride(const slc_file *f, int slot) {
    return f->slots ? f->slots[slot].stride : f->h.expert_stride;
}
static inline uint64_t slc_block_bytes(const slc_file *f, int slot) {
    return f->slots ? f->slots[slot].bytes : f->block_bytes;
}
static inline const slc_part *slc_parts(const slc_file *f, int slot) { return f->slots ? f->slots[slot].parts : f->parts; }
const slc_tensor *slc_find(const slc_file *f, const char *name);
/* Points out's gate / up / down at an expert block of MoE slot `slot` held in memory (block = its first byte). */
void slc_bind_expert(const slc_file *f, int slot, const uint8_t *block, tn_expert *out);
/* The block an expert bound by slc_bind_expert lies in (its first part's address less that part's offset). */
const uint8_t *slc_expert_block(const slc_file *f, const tn_expert *e);
const slc_blob *slc_find_blob(const slc_file *f, const char *name);
/* Reads blob b whole into *out (malloc'ed, NUL-terminated after size bytes) and checks it against the
 * manifest's xxh3: SL_ECHECKSUM (naming it) when a byte of it changed. */
sl_status slc_read_blob(const slc_file *f, const slc_blob *b, char **out, sl_error *err);

/* Reads the quantization fields of a tensor or expert-part entry with dtype dt of `cols` columns into
 * *group, *sdt, *seed, *act (zero for plain dtypes; act: "act" of a q8/q4 entry, "q8_0" or "q8_1", absent 0). SL_OK,
 * or SL_EFORMAT with the reason in err, for the caller to prefix with the entry's name. */
sl_status slc_quant_from_json(const cJSON *o, dt_type dt, int64_t cols, int *group, dt_type *sdt, uint32_t *seed,
                              int *act, sl_error *err);
/* Adds "group", "scale_dtype" (and "seed" for q3, "act" for a q8/q4 with act set) to an entry when dt is
 * quantized. */
void slc_quant_to_json(cJSON *o, dt_type dt, int group, dt_type sdt, uint32_t seed, int act);

/* Manifest entries as slc_open reads them back: one backbone tensor; the "experts" object (the
 * layers list comes from c->layer_moe). NULL on allocation failure. */
cJSON *slc_tensor_to_json(const slc_tensor *t);
cJSON *slc_experts_to_json(const slc_header *h, const fam_config *c, uint64_t block_bytes, const slc_part *parts);
/* Adds experts.slots to an "experts" object (the per-slot layouts, n_moe_layers of them); its "parts" then name
 * dtype "per-layer", which readers without slots refuse. */
void slc_slots_to_json(cJSON *ex, const fam_config *c, const slc_slot *slots, int n_slots);

/* Normalised config <-> manifest JSON. */
cJSON *slc_config_to_json(const fam_config *c);
sl_status slc_config_from_json(const cJSON *j, fam_config *c, const char *path, sl_error *err);

/* xxh3-64 as 16 lowercase hex digits and back. */
void slc_hash_hex(uint64_t h, char out[17]);
int slc_hash_parse(const char *s, uint64_t *out);
uint64_t slc_round_up(uint64_t x, uint64_t a);

#endif
