/*
 * sluice.h — the one public header of libsluice.
 *
 * sluice runs Mixture-of-Experts language models from a packed `.sluice` container: the dense backbone
 * is resident, the routed experts are read from the file as the router picks them.
 *
 * Conventions (libuv / SQLite style):
 *  - every function that can fail returns an sl_status (0 = SL_OK, negative = error);
 *  - results come back through out-params, valid only on SL_OK;
 *  - functions without a handle take an `sl_error *` that receives a one-line message naming what was
 *    wrong (file, tensor, layer, expert, offset); handles keep their own last message
 *    (sl_model_errmsg);
 *  - the library never prints and never exits;
 *  - destroy functions accept NULL.
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SL_VERSION_STRING "0.1.0"

/* X(name, code, text). New codes go at the end. */
#define SL_STATUS_LIST(X)                                        \
    X(OK, 0, "ok")                                               \
    X(EINVAL, -1, "invalid argument")                            \
    X(EIO, -2, "input/output error")                             \
    X(ENOMEM, -3, "out of memory")                               \
    X(EFORMAT, -4, "malformed file")                             \
    X(ECONFIG, -5, "bad model configuration")                    \
    X(EUNSUPPORTED, -6, "unsupported")                           \
    X(ECHECKSUM, -7, "checksum mismatch")                        \
    X(ENOSPC, -8, "no space left on device")                     \
    X(ERANGE, -9, "value out of range")                          \
    X(ENOENT, -10, "no such file")                               \
    X(EMISMATCH, -11, "content differs from source")             \
    X(ECANCELED, -12, "canceled")                                \
    X(EBUSY, -13, "busy")

typedef enum {
#define SL_STATUS_ENUM(name, code, text) SL_##name = code,
    SL_STATUS_LIST(SL_STATUS_ENUM)
#undef SL_STATUS_ENUM
} sl_status;

/* Static text for a status code; never NULL. */
const char *sl_strerror(sl_status st);

/* Error detail for calls that have no handle yet. */
typedef struct sl_error {
    sl_status status;
    char msg[768];
} sl_error;

/* ---------------------------------------------------------------------------------------------- */
/* Packing a Hugging Face checkpoint into a .sluice container                                      */

typedef enum {
    SL_QUANT_SAME = -1, /* per-role fields of sl_pack_params: follow `quant` (router: see below) */
    SL_QUANT_KEEP = 0, /* store each tensor in its source dtype (FP8 sources become f32) */
    SL_QUANT_F32 = 1,
    SL_QUANT_BF16 = 2,
    SL_QUANT_Q8 = 3, /* 8-bit group-affine, MLX layout (docs/QUANT.md) */
    SL_QUANT_Q4 = 4, /* 4-bit group-affine, MLX layout */
    SL_QUANT_Q3 = 5, /* 3-bit randomised-Hadamard rotation + Lloyd-Max codebook */
    SL_QUANT_Q2 = 6, /* 2-bit: blocks of 128 rotated, 4-level Lloyd-Max codebook, an f16 scale (2.125 bits) */
    SL_QUANT_Q2V = 7, /* 2-bit: the same blocks, the E8P lattice codebook of 8-vectors (2.125 bits) */
} sl_quant;

/* Progress callback: bytes written so far out of total; return non-zero to cancel. */
typedef int (*sl_progress_fn)(void *user, uint64_t done, uint64_t total);

typedef struct sl_pack_params {
    sl_quant quant;
    int hash_sources;        /* 1: xxh3-64 of every source file in the manifest (default 1) */
    sl_progress_fn progress; /* may be NULL */
    void *progress_user;
    /* Quantized modes (q8/q4/q3) apply to matrices (Linear, Embedding, experts) whose column count the
     * group divides; the others keep their source dtype, as mlx-lm does. Tensors of an MLX checkpoint
     * that are already quantized are imported as they are, whatever the mode. */
    int group;                /* 32, 64 or 128 (default 64) */
    int scale_f16;            /* 1: scales and biases in f16; 0 (default): bf16 */
    sl_quant quant_experts;   /* routed experts; SL_QUANT_SAME (default) = quant */
    sl_quant quant_backbone;  /* every other matrix; SL_QUANT_SAME (default) = quant */
    sl_quant quant_router;    /* mlp.gate, mlp.shared_expert_gate; SL_QUANT_SAME (default) = q8 when the
                                 backbone mode is q4/q3, else the backbone mode */
    /* llama.cpp's importance matrix (llama-imatrix's GGUF or legacy .dat file) or NULL (default): the matrices it
     * has an entry for (per expert where it has one per expert) are quantized minimising the importance-weighted
     * error instead of the plain one (docs/QUANT.md "Importance matrices"); the manifest's pack.imatrix records the
     * file's xxh3. Those quantized from the file's GGUF names the family table gives; the others, plainly. */
    const char *imatrix;
} sl_pack_params;

sl_pack_params sl_pack_params_default(void);

/* Packs the checkpoint directory `src_dir` (config.json + *.safetensors [+ index] [+ tokenizer files])
 * into `out_path`. Writes `out_path.tmp.<pid>` and renames it over `out_path` only when complete; on
 * any error the temporary file is removed and `out_path` is untouched. */
sl_status sl_pack(const char *src_dir, const char *out_path, const sl_pack_params *params, sl_error *err);

/* Verifies every checksum in a container; with `source_dir` non-NULL, also re-derives every tensor
 * from the checkpoint and compares byte for byte. On a mismatch returns SL_ECHECKSUM or SL_EMISMATCH
 * with the first bad tensor or expert (layer, index, file offset) in err. */
sl_status sl_verify(const char *path, const char *source_dir, sl_progress_fn progress, void *user, sl_error *err);

/* Every whole file sluice writes (sl_pack, sl_synth, sl_session_save_file, sl_model_write_profile, the
 * server's state files) is written as "<path>.tmp.<pid>", fsynced and renamed over path, so path is
 * always absent, the old file or the whole new one. A process killed before its rename leaves the
 * temporary: this removes those of path whose process is gone (a path ending in '/': of every file in
 * that folder) and returns how many; *removed (when not NULL) gets their names, each NUL-terminated, an
 * empty string after the last (free it; NULL when none). Temporaries of running processes stay. */
int sl_remove_stale_temps(const char *path, char **removed);

/* Writes a container of a released model's real dimensions with random weights (benchmarks):
 * shape one of sl_synth_shapes(); layers 0 = all; quant keep/bf16 (bf16), f32, q8, q4 or q3 (group 64); seed 0 = default. */
sl_status sl_synth(const char *shape, int layers, sl_quant quant, uint64_t seed, const char *out_path,
                   sl_progress_fn progress, void *user, sl_error *err);
/* sl_synth on n_threads writer threads (0: two per online core). The file is the same for any n_threads:
 * every row of every tensor and expert comes from its own stream of (seed, tensor or expert, row). */
sl_status sl_synth_threads(const char *shape, int layers, sl_quant quant, uint64_t seed, int n_threads,
                           const char *out_path, sl_progress_fn progress, void *user, sl_error *err);
const char *sl_synth_shapes(void);

/* Describes a container as JSON (architecture, dimensions, layer types, expert layout, sizes).
 * *out_json is malloc'ed; the caller frees it. */
sl_status sl_info_json(const char *path, char **out_json, sl_error *err);

/* ---------------------------------------------------------------------------------------------- */
/* Downloading a Hugging Face model repository (src/pull, docs/PULL.md)                           */

typedef struct sl_pull_params {
    const char *repo;              /* "ORG/NAME" (required) */
    const char *revision;          /* branch, tag or commit; NULL = "main" */
    const char *const *include;    /* fnmatch patterns matched against the repository paths ('*' also
                                      matches '/'); NULL or n_include 0 = what sl_pack reads: config.json,
                                      generation_config.json, the tokenizer files, model.safetensors.index.json
                                      and the *.safetensors it names (all top-level *.safetensors without one) */
    int n_include;
    const char *out_dir;           /* the files go straight into this directory; NULL = the Hugging Face cache
                                      (<cache>/models--ORG--NAME/snapshots/COMMIT, links into blobs/) */
    const char *cache_dir;         /* NULL = $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub */
    const char *endpoint;          /* NULL = $HF_ENDPOINT, else https://huggingface.co */
    const char *token;             /* NULL = $HF_TOKEN, else the file $HF_TOKEN_PATH or $HF_HOME/token
                                      (~/.cache/huggingface/token); "" = none. Sent only to the endpoint's host */
    int jobs;                      /* files downloaded at once; 0 = 4 */
    int retries;                   /* failed attempts in a row (no byte received) before a file fails; 0 = 6 */
} sl_pull_params;

sl_pull_params sl_pull_params_default(void);

/* What a pull did. */
typedef struct sl_pull_result {
    char commit[48];               /* the revision's commit (40 hex digits) */
    int n_files;                   /* files selected */
    int n_present;                 /* ... already complete and verified: not downloaded */
    int n_fetched;                 /* ... downloaded */
    int n_resumed;                 /* downloads continued from a partial file (Range) */
    int n_corrupt;                 /* downloads that failed their sha256/size check and were fetched again */
    uint64_t n_retries;            /* attempts after a broken connection, a 5xx or a timeout */
    uint64_t bytes_fetched;        /* body bytes received */
} sl_pull_result;

/* Downloads the files of a model repository: the file list from {endpoint}/api/models/{repo}/revision/
 * {rev}?blobs=true, each file from {endpoint}/{repo}/resolve/{commit}/{path} (redirects followed), `jobs`
 * at once. Each file is written under a temporary name (NAME.incomplete), resumed with a Range request
 * when one is there (a server answering 200 instead of 206 is read from the start), checked against the
 * hub's size and sha256 (LFS files) or git blob id (the others), and renamed to its final name only then;
 * a file that fails its check is deleted and fetched again (3 times at most). Files already complete are
 * not downloaded again. progress (may be NULL) gets body bytes received out of bytes still needed (the
 * total can grow when a download starts over); non-zero from it cancels (SL_ECANCELED), leaving the
 * partial files for the next pull. On success *out_dir (malloc'ed, the caller frees it) is the directory
 * that holds the files, ready for sl_pack; res (may be NULL) says what was done. Errors: SL_EINVAL for a
 * bad repository name or a refused token (401/403: the message says to set HF_TOKEN), SL_ENOENT for a
 * repository, revision or file not found (404), SL_EIO for network errors after the retries,
 * SL_ECHECKSUM for a file still wrong after its re-downloads, SL_ENOSPC for a full disk, or before any
 * download when the bytes still needed exceed the free space where they go (both named); the message
 * names the file. Never a partial file under a final name. */
sl_status sl_pull(const sl_pull_params *params, sl_progress_fn progress, void *user, char **out_dir,
                  sl_pull_result *res, sl_error *err);

/* Lists the files of a repository at a revision: the listing sl_pull starts with (params' repo, revision,
 * endpoint and token; the other fields are not used), with the same errors. *names (malloc'ed; the caller
 * frees it) gets every repository path, each NUL-terminated, an empty string after the last; commit (may
 * be NULL) the revision's commit. Nothing is written to disk. For a caller that picks files to pull
 * (sl_pull_params.include), such as one GGUF file among a repository's quantizations. */
sl_status sl_pull_list(const sl_pull_params *params, char **names, char commit[48], sl_error *err);

/* ---------------------------------------------------------------------------------------------- */
/* Models and sessions                                                                            */

typedef struct sl_model sl_model;
typedef struct sl_session sl_session;

typedef enum { SL_IO_AUTO = 0, SL_IO_DIRECT = 1, SL_IO_BUFFERED = 2 } sl_io_mode;
typedef enum { SL_ENGINE_AUTO = 0, SL_ENGINE_URING = 1, SL_ENGINE_PREAD = 2 } sl_io_engine;
typedef enum { SL_POLICY_LRU = 0, SL_POLICY_LFU = 1 } sl_cache_policy;
/* How tokens choose their experts: the model's routers, or (benchmarks of synthetic models) k distinct
 * experts drawn uniformly by a generator seeded with routing_seed and keyed by the layer and the token's
 * router logits, so the choice is a function of the token's state: the same streamed or resident, alone
 * or in a batch, for any thread count, while the cache sees independent uniform requests (its hit rate
 * is then the pessimistic bound, about the cached fraction of the experts). Weights 1/k. */
typedef enum { SL_ROUTING_MODEL = 0, SL_ROUTING_UNIFORM = 1, SL_ROUTING_TRACE = 2 } sl_routing;

/* The backend that computes (src/backend/backend.h). */
typedef enum {
    SL_BACKEND_CPU = 0,
    SL_BACKEND_CUDA = 1,
    SL_BACKEND_AUTO = 2, /* CUDA where this build has it, a device is usable and the model opens there (the
                            family's ops, the weights' types, the memory); else the CPU. The command line's
                            default; sl_model_backend says which one it became */
} sl_backend_kind;

/* How a session's attention KV cache stores its rows (docs/PERFORMANCE.md has the bytes and the quality of
 * each): f32 (the exact reference), f16 / bf16 (each value rounded to nearest even), q8 (per head, blocks of
 * 32 values: int8 codes and one f16 scale each, round(x / d) with d = max|x| / 127: llama.cpp's q8_0), q4
 * (blocks of 32: 4-bit codes and one f16 scale, llama.cpp's q4_0), q4r (the head rotated by a fixed signed
 * Walsh-Hadamard transform, then blocks of 32: 4-bit codes of a 16-level codebook and one fitted f16 scale:
 * q4's bytes, less error; src/quant/kv.h). Attention
 * computes in f32 on the stored values, so every exactness property (streamed == resident, a sequence in a
 * batch == alone, prefill == token by token, any thread count) holds bitwise at each type. MLA's compressed
 * cache and the DeltaNet states stay f32 whatever the type. */
typedef enum { SL_KV_F32 = 0, SL_KV_F16 = 1, SL_KV_BF16 = 2, SL_KV_Q8 = 3, SL_KV_Q4 = 4, SL_KV_Q4R = 5, SL_KV_COUNT } sl_kv_type;
/* "f32", "f16", "bf16", "q8", "q4", "q4r"; "?" for another value. */
const char *sl_kv_type_name(sl_kv_type t);
/* The type a name (as sl_kv_type_name gives) stands for, or -1. */
int sl_kv_type_from_name(const char *name);

/* The transport to expert ranks (src/dist/remote.h; made by the command line under mpirun). */
typedef struct sl_remote sl_remote;

typedef struct sl_model_params {
    int n_threads;          /* 0 = number of online cores */
    int resident;           /* 1: read every expert at open (the exactness reference) */
    uint64_t cache_bytes;   /* expert cache budget; 0 = default (half of available RAM, at most the
                               expert section) */
    sl_io_mode io_mode;     /* auto: page cache when the expert section fits comfortably in RAM,
                               O_DIRECT otherwise */
    sl_io_engine io_engine; /* auto: io_uring, else a pread thread pool */
    sl_cache_policy policy;
    const char *pin_profile; /* routing profile (sluice profile) whose hottest experts are pinned */
    int no_verify;          /* 1: skip the xxh3 check of each expert block read */
    int io_depth;           /* reads in flight at most; 0 = 64 */
    int prefetch;           /* reading the next layer's predicted experts ahead of time: 0 auto (only while
                               the predictions prove >= 80% accurate), 1 always, -1 never */
    sl_routing routing;     /* SL_ROUTING_MODEL (default) or SL_ROUTING_UNIFORM */
    uint64_t routing_seed;  /* the uniform router's seed */
    const char *routing_trace; /* SL_ROUTING_TRACE: a routing trace (record_routing's file) replayed: the experts
                               each routed row chose in the recorded model, row by row in routing order, mapped onto
                               this model's shape (layers and experts modulo; src/model/rtrace.h), weights 1/k.
                               For benchmarks of synthetic models: the choice follows the order rows are routed,
                               not the tokens */
    int record_routing;     /* 1: keep every routed row's choice (sl_model_write_routing writes it) */
    int exact;              /* 1: q8/q4 matrices multiply f32 activations (the reference: within 1e-4 of
                               transformers on the dequantized weights); 0 (default): activations quantized
                               to int8 per 32 values and dotted with the codes directly, as llama.cpp does
                               (several times faster; accuracy cost in docs/QUANT.md). Same result resident
                               or streamed, batched or alone, on any thread count, either way */
    sl_backend_kind backend; /* what computes: SL_BACKEND_CPU (default) or SL_BACKEND_CUDA (--gpu: the backbone
                               and resident experts in VRAM; SL_EUNSUPPORTED "built without CUDA ...", "no
                               usable CUDA device ...", or naming an op the family needs that the CUDA
                               backend lacks yet: MLA, DeltaNet; docs/CUDA.md) */
    uint64_t vram_bytes;    /* the device tier's expert budget (--vram; stream/tier.h): experts in use live in
                               slots of the backend's memory (VRAM with SL_BACKEND_CUDA) over the RAM cache
                               over the file, each promoted by one copy; 0 (default): none. On the CPU
                               backend the tier is a second cache in host memory, which is how the tests show
                               that any VRAM / RAM split gives the logits of all-resident bitwise.
                               SL_VRAM_AUTO: the device's free memory once the backbone is in, less a reserve
                               for the sessions (the larger of 2 GiB and a tenth of the card), at most the
                               expert section; none on a backend without device memory (the CPU) */
    int hybrid;             /* the hybrid step with a device tier (issue 25, docs/CUDA.md): a decode step's miss
                               that does not pay its copy up (the tier's decayed use counts) runs on the host's
                               threads from the RAM cache, in the device's arithmetic (bitwise the same logits),
                               while the device runs the experts it holds. 1: on (with a tier; on the CPU
                               backend the tests' stand-in); 0 (default, auto): on with a device backend's tier
                               (CUDA), off on the CPU; -1: off (every miss copied up) */
    int n_ctx;              /* positions of a session made with n_ctx 0 (sl_session_new); 0: the model's
                               context; more than the model's: SL_ERANGE at open */
    sl_kv_type kv_type;     /* the sessions' KV cache (above); the library default is SL_KV_F32 (the exact
                               reference), the command line's f16. A backend without the type refuses it at
                               open, naming it (SL_EUNSUPPORTED), unless kv_fallback. It stores the keys, and the
                               values too unless kv_type_v says otherwise */
    sl_kv_type kv_type_v;   /* the values' type when it differs from the keys' (llama.cpp's -ctv; --kv K,V), e.g. q4r
                               keys (whose outlier channels the rotation tames) with q8 values; SL_KV_F32 (0, the
                               default): the same as kv_type (f32 values beside other keys are not offered). The CPU
                               backend only */
    int kv_fallback;        /* 1: kv_type is a preference: a backend whose attention has no such cache (the CUDA
                               backend's f16 / bf16 / q8, so far) takes f32, the exact type every backend has,
                               instead of refusing the model (the command line without --kv); 0 (default):
                               refused. With SL_BACKEND_AUTO and 0, a type the GPU lacks computes on the CPU */
    sl_remote *remote;      /* NULL (default): every expert in this process. Else the endpoint of rank 0 of a
                               transport whose ranks 1..N-1 hold the experts (the command line's under mpirun -np N;
                               docs/SCALE.md): this process keeps the backbone only, each MoE layer's chosen experts
                               run on the ranks owning them (shares by pin_profile's load when given, else by
                               count), and the logits are bitwise one process's. Borrowed; outlives the model */
} sl_model_params;

#define SL_VRAM_AUTO UINT64_MAX /* sl_model_params.vram_bytes: choose from the device's free memory */

sl_model_params sl_model_params_default(void);
/* The backend an open model computes on: SL_BACKEND_CPU or SL_BACKEND_CUDA (what SL_BACKEND_AUTO became). */
sl_backend_kind sl_model_backend(const sl_model *model);
/* Why SL_BACKEND_AUTO computes on the CPU although this build has a usable GPU: the GPU's refusal of the model
 * (e.g. "the cuda backend has no f16 KV cache yet (--kv f32)"); "" when it did not fall back. */
const char *sl_model_backend_note(const sl_model *model);

/* Opens a container: backbone and experts into RAM. On error *out is NULL and err says why. */
sl_status sl_model_open(const char *path, const sl_model_params *params, sl_model **out, sl_error *err);
void sl_model_close(sl_model *model);

/* The model's last error message ("" if none). Valid until the next call on the model. */
const char *sl_model_errmsg(const sl_model *model);

/* Counters since open (or the last sl_model_reset_stats). */
typedef struct sl_stats {
    uint64_t hits, misses;        /* expert requests served from the cache / read from the file */
    uint64_t bytes_read;          /* expert bytes read from the file */
    uint64_t reads, retries;      /* expert block reads; resubmissions (short reads, EINTR) */
    double io_wait_s;             /* time the forward pass waited for expert reads */
    double verify_s;              /* time the evaluating thread spent checking expert checksums (the I/O
                                     engines check whole reads on their own threads, io.h) */
    double eval_s;                /* wall time inside sl_session_eval */
    uint64_t tokens;              /* tokens evaluated */
    uint64_t cache_slots, cache_bytes, pinned;
    uint64_t backbone_bytes;      /* resident backbone */
    uint64_t expert_bytes;        /* expert section of the file */
    uint64_t peak_rss_bytes;      /* of the process */
    uint64_t page_cache_bytes;    /* model-file pages resident in the page cache (mincore) */
    int resident;                 /* experts all in RAM */
    const char *io_engine;        /* "io_uring", "pread", "resident" */
    const char *io_mode;          /* "direct", "buffered", "buffered+dontneed", "resident" */
    uint64_t prefetch_reads;      /* expert reads started on a prediction of the next layer's routing */
    uint64_t prefetch_used;       /* ... that a later request used (counted in hits) */
    uint64_t prefetch_wasted;     /* ... evicted unused */
    double prefetch_accuracy;     /* recent precision of the predictions (-1: none scored yet) */
    int prefetch_active;          /* predictions are being acted on */
    uint64_t tier_hits, tier_misses; /* device tier (vram_bytes > 0): experts found there / copied in */
    uint64_t tier_bytes_copied;   /* host -> device bytes of those copies */
    uint64_t tier_slots, tier_bytes; /* its slots and their bytes */
    uint64_t tier_host;           /* the hybrid step: experts computed on the host where they lie, not copied */
    double engine_verify_s;       /* time the I/O engines' own threads spent checking expert checksums (CPU
                                     time taken beside the forward pass; verify_s is the evaluating thread's) */
    double io_busy_s;             /* time with at least one expert read in flight (submit to completion) */
    double io_depth_s;            /* reads in flight integrated over time (/ io_busy_s: mean queue depth) */
    double tier_host_gbs;         /* the hybrid step's cost model: the host threads' rate, GB/s of expert weights
                                     (measured per layer's batch, decayed; before any, its first guess) ... */
    double tier_pcie_gbs;         /* ... and the copy up's, measured when the tier was made (0: no cost model) */
} sl_stats;

sl_status sl_model_stats(sl_model *model, sl_stats *out);
void sl_model_reset_stats(sl_model *model);
/* Per-layer expert counters of model layer `layer` (zeros for dense layers). */
sl_status sl_model_layer_stats(const sl_model *model, int layer, uint64_t *hits, uint64_t *misses,
                               uint64_t *bytes);
/* Where model layer `layer`'s experts ran since open, with a device tier (vram_bytes; zeros without one or for a
 * dense layer): found in the tier (vram), copied up to it (copied), computed on the host where they lay (host:
 * the hybrid step). */
sl_status sl_model_layer_where(const sl_model *model, int layer, uint64_t *vram, uint64_t *copied, uint64_t *host);
/* Routing counts of model layer `layer` since open: out[e] (e < n) = how many expert requests of that
 * layer chose expert e (one per step that routed any token to it). *n_experts (may be NULL) gets the
 * layer's expert count, 0 for a dense layer. Counted by the expert cache: a resident model gives
 * zeros. Thread-safe. */
sl_status sl_model_expert_counts(sl_model *model, int layer, uint64_t *out, int n, int *n_experts);
/* A rank of a model whose experts live in other processes (sl_model_params.remote): what it holds and did. */
typedef struct sl_rank_stats {
    char host[64];
    int32_t rank, resident;
    uint64_t experts;             /* expert blocks it holds (its share; rank 0: none) */
    uint64_t expert_bytes;        /* their bytes (resident), or its cache's budget (streamed) */
    uint64_t peak_rss;            /* of its process */
    uint64_t requests;            /* layer requests served (rank 0: sent to every rank) */
    uint64_t pairs;               /* (row, expert) outputs computed (rank 0: received) */
    uint64_t bytes_in, bytes_out; /* over the network */
    double compute_s, wait_s;     /* computing requests / idle waiting for one (rank 0: waiting for replies) */
    uint64_t tokens;              /* rank 0: tokens evaluated */
} sl_rank_stats;
/* Ranks of the model's transport (1 when every expert is in this process). */
int sl_model_n_ranks(const sl_model *model);
/* Rank r's figures (0: this process; others asked over the transport now). SL_EIO naming a rank that fails. */
sl_status sl_model_rank_stats(sl_model *model, int rank, sl_rank_stats *out, sl_error *err);
/* Writes the routing counts since open as a profile for `pin_profile`. */
/* Writes the routing recorded since open (record_routing) as a routing trace for SL_ROUTING_TRACE: SL_EINVAL
 * when the model does not record or no token was routed yet, SL_EIO naming the file. */
sl_status sl_model_write_routing(sl_model *model, const char *path, sl_error *err);
/* One line on the routing trace being replayed or recorded (its shape, and how it maps onto the model's), or ""
 * for neither. */
const char *sl_model_routing_trace(sl_model *model);
sl_status sl_model_write_profile(const sl_model *model, const char *path, sl_error *err);
int sl_model_n_layers(const sl_model *model);
/* The shape name of a model written by sl_synth (random weights), or NULL for a packed checkpoint. */
const char *sl_model_synthetic(const sl_model *model);
/* Reads the routed experts into the model's RAM expert cache (streamed models) while it has free slots, layer by layer
 * in expert order, evicting nothing; the device tier (vram_bytes) is left as it is. What a benchmark does before it
 * times a streamed run against an engine whose weights sit in the page cache (sluice bench --warm). *n_read (may be
 * NULL): the experts read; 0 for a resident model. The reads count in sl_stats' reads and bytes, not as misses.
 * Thread-safe (waits for an evaluation in progress). SL_OK, or the failed read's error. */
sl_status sl_model_warm(sl_model *model, uint64_t *n_read, sl_error *err);

int sl_model_n_vocab(const sl_model *model);
int sl_model_n_ctx(const sl_model *model); /* maximum positions */
/* The KV cache type of the model's sessions (sl_model_params.kv_type): of the keys, and of the values unless ... */
sl_kv_type sl_model_kv_type(const sl_model *model);
/* ... the values' type says otherwise (kv_type_v as it became: never SL_KV_F32 standing for "the same"). */
sl_kv_type sl_model_kv_type_v(const sl_model *model);
/* Bytes of a session's state at n_ctx positions (<= 0 or past the model's: its maximum): the KV caches of every
 * attention layer (a sliding layer's ring only) and the DeltaNet states. A session starts small and grows
 * toward this as its positions fill (so a server can refuse a context up front that would not fit). */
uint64_t sl_model_kv_bytes(const sl_model *model, int n_ctx);
/* A pool of KV pages the model's sessions share (the server's slots): from now on a session's attention caches grow
 * (in pages of 256 positions, as they fill) only while all its sessions' caches together stay within `bytes`
 * (0, the default: no limit; the DeltaNet states and MLA's extras are not counted). An evaluation that would need
 * more is refused before anything changes with SL_EBUSY "the KV pool is full: ..."; sl_session_reserve asks
 * ahead. A session's first page is always given. Set it before any session is made. */
void sl_model_set_kv_pool(sl_model *model, uint64_t bytes);
/* Bytes of KV cache the model's sessions hold now (counted with or without a limit); *limit (may be NULL): the
 * pool's (0: none). */
uint64_t sl_model_kv_pool_used(const sl_model *model, uint64_t *limit);

/* A session holds the per-sequence state: KV cache (attention layers), conv and recurrent state
 * (DeltaNet layers). One session is used by one thread at a time. */
/* n_ctx: the positions it may hold (<= 0: sl_model_params.n_ctx, or the model's context; at most the model's).
 * Its KV caches start at a page and grow as positions fill, so memory follows the positions used; a session
 * whose next evaluation would pass n_ctx is refused with SL_ERANGE "context full". */
sl_status sl_session_new(sl_model *model, int n_ctx, sl_session **out);
void sl_session_free(sl_session *session);
void sl_session_reset(sl_session *session);
int sl_session_n_past(const sl_session *session);
/* The positions the session may hold (its n_ctx as made). */
int sl_session_n_ctx(const sl_session *session);
/* Grows the session's KV caches to hold n_pos positions (an evaluation does it itself): SL_OK; SL_EBUSY when the
 * model's KV pool has not the pages (sl_model_set_kv_pool) and SL_ENOMEM when memory lacks, both with nothing
 * changed; SL_ERANGE past its n_ctx. A scheduler asks before a step, so that a sequence waits for pages. */
sl_status sl_session_reserve(sl_session *session, int n_pos);
/* Gives back the session's KV pages beyond those its positions use (a sliding layer's ring that wrapped keeps its
 * rows); after sl_session_reset every page (the next evaluation takes its pages again): a finished or waiting
 * sequence's memory. Results do not change. */
void sl_session_trim(sl_session *session);

/* Context shifting (llama.cpp's --context-shift): drops the n_discard positions after the first n_keep and
 * re-evaluates the tokens that remain from a reset state in one evaluation, so that the session is bitwise a
 * fresh one that evaluated them (every family: recurrent states cannot drop tokens, and RoPE re-rotation of
 * stored keys would not be exact). It costs a prefill of n_past - n_discard tokens. The session records the
 * tokens it evaluated for this; SL_EUNSUPPORTED after sl_session_load (a state holds no tokens), SL_EINVAL for
 * counts outside 0 <= n_keep, 1 <= n_discard, n_keep + n_discard <= n_past. A failed re-evaluation leaves the
 * kept tokens it got through (sl_session_n_past). */
sl_status sl_session_shift(sl_session *session, int n_keep, int n_discard);
/* Declares the tokens of a session's positions after sl_session_load (n_tokens == sl_session_n_past, else
 * SL_EINVAL), so that sl_session_shift can take it: the caller knows what the state was made of (a prefix
 * cache keyed by its tokens, say). */
sl_status sl_session_set_tokens(sl_session *session, const int32_t *tokens, int n_tokens);

/* The session's last error message ("" if none). */
const char *sl_session_errmsg(const sl_session *session);

/* Evaluates n_tokens more tokens after those already in the session. When logits is non-NULL it
 * receives float32 logits: [n_tokens][vocab] if all_logits, else [vocab] for the last token only.
 * Bad arguments (token id out of range, context full, n_tokens < 1) are refused before anything is
 * evaluated. Inputs are evaluated in chunks (up to 1024 tokens, layer-major; 64 for short inputs):
 * when a later chunk fails (an expert read error, say), the chunks before it stay in the session and
 * sl_session_n_past() says how far it got; the failed chunk leaves no trace. */

sl_status sl_session_eval(sl_session *session, const int32_t *tokens, int n_tokens, float *logits,
                          int all_logits);

/* Session state: the position, the KV rows in use and the DeltaNet states, as one blob (a header naming
 * the model it belongs to, the state, an xxh3-64 checksum; docs/FORMAT.md). *blob is malloc'ed. */
sl_status sl_session_save(const sl_session *session, void **blob, size_t *len);
/* Replaces the session's state with a saved one. SL_EFORMAT for bytes that are not a state,
 * SL_ECHECKSUM for a damaged one, SL_EMISMATCH for one saved with another model (other weights),
 * SL_ERANGE for one longer than the session's context; on any error the session is unchanged. */
sl_status sl_session_load(sl_session *session, const void *blob, size_t len);
/* The same through a file, with `extra` bytes (may be NULL: a conversation, the tokens, ...) stored
 * beside the state. Saving writes a temporary name, fsyncs and renames, so `path` is never half a
 * file; loading gives *extra malloc'ed and NUL-terminated (NULL when none). */
sl_status sl_session_save_file(const sl_session *session, const char *path, const void *extra, size_t extra_len,
                               sl_error *err);
sl_status sl_session_load_file(sl_session *session, const char *path, void **extra, size_t *extra_len,
                               sl_error *err);

/* One session's part of a batched step. */
typedef struct sl_batch_item {
    sl_session *session;
    const int32_t *tokens;
    int n_tokens;
    float *logits;  /* NULL, or [n_tokens][vocab] when all_logits, else [vocab] for the last token */
    int all_logits;
} sl_batch_item;

/* Evaluates several sessions of one model in one forward pass (continuous batching: prefill chunks and
 * decode steps of different sequences together). Every MoE layer routes the tokens of all the
 * sessions together, so an expert that several of them chose is fetched once and applied to all: in a
 * streamed model B sequences cost far fewer reads than B separate steps. Each session's logits and
 * state are bitwise what sl_session_eval(session, tokens, ...) alone gives. A session may appear once;
 * every session must belong to `model`. Bad arguments in any item (token out of range, context full,
 * ...) are refused before anything is evaluated, with a message naming the item; a failure during
 * the pass (an expert read error) leaves every session as it was. The message is the model's
 * (sl_model_errmsg) and each item's session's. */
sl_status sl_batch_eval(sl_model *model, const sl_batch_item *items, int n_items);


/* ---------------------------------------------------------------------------------------------- */
/* Text: tokenizer, chat formatting, sampling, generation (src/text, docs/TEXT.md)                */

typedef struct sl_tokenizer sl_tokenizer;

/* Loads a tokenizer from a tokenizer.json file (tokenizer_config.json and chat_template.jinja beside it
 * are read when present: chat template, EOS token), from a .sluice container (the same files, stored
 * as blobs by sl_pack) or from a GGUF file's tokenizer.ggml.* metadata (docs/TEXT.md). Byte-level BPE only (Qwen, GPT-2 style); anything else is SL_EUNSUPPORTED.
 * A file that is none of these (its first non-blank byte not '{') fails as .sluice containers do (SL_EFORMAT, "bad magic").
 * *out is freed with sl_tokenizer_free. A tokenizer may be used from several threads at once. */
sl_status sl_tokenizer_load(const char *path, sl_tokenizer **out, sl_error *err);
/* The same from memory: tokenizer.json text (len bytes), tokenizer_config.json text (NUL-terminated
 * or NULL) and a chat template overriding the config's (or NULL). */
sl_status sl_tokenizer_from_json(const char *tokenizer_json, size_t len, const char *config_json,
                                 const char *chat_template, sl_tokenizer **out, sl_error *err);
void sl_tokenizer_free(sl_tokenizer *tok);

int sl_tokenizer_n_vocab(const sl_tokenizer *tok); /* largest id + 1 */
/* Id of a token given its vocabulary text (e.g. "<|im_end|>"), or -1. */
int32_t sl_tokenizer_token_id(const sl_tokenizer *tok, const char *text);
int sl_tokenizer_is_special(const sl_tokenizer *tok, int32_t id);
/* 1 for the tokens that end a generation: the config's eos_token, <|im_end|>, <|endoftext|>. */
int sl_tokenizer_is_eog(const sl_tokenizer *tok, int32_t id);

#define SL_TOKENIZE_NO_SPECIAL 1  /* added/special token text is tokenized as plain text */
#define SL_TOKENIZE_STRICT_UTF8 2 /* invalid UTF-8 is SL_EINVAL (default: replaced by U+FFFD) */

/* Text (len bytes, need not be NUL-terminated) -> ids, as HF tokenizers' encode (no BOS/EOS added).
 * *out_ids is malloc'ed (the caller frees it, also when *out_n is 0). */
sl_status sl_tokenize(const sl_tokenizer *tok, const char *text, size_t len, int flags, int32_t **out_ids,
                      int *out_n, sl_error *err);
/* Ids -> UTF-8 text (invalid byte sequences become U+FFFD), as HF decode. *out is malloc'ed and
 * NUL-terminated. Ids outside the vocabulary are SL_ERANGE. */
sl_status sl_detokenize(const sl_tokenizer *tok, const int32_t *ids, int n, int skip_special, char **out,
                        size_t *out_len, sl_error *err);

/* Streaming detokenizer: feed ids one at a time, get the text that is complete so far. Never returns
 * part of a UTF-8 character: bytes of an unfinished character wait for the next id. */
typedef struct sl_detok sl_detok;
sl_status sl_detok_new(const sl_tokenizer *tok, int skip_special, sl_detok **out);
/* Returns the new text (may be empty, *len 0); the pointer is valid until the next call on d. NULL
 * only when out of memory. An id outside the vocabulary adds nothing. */
const char *sl_detok_push(sl_detok *d, int32_t id, size_t *len);
/* Returns what is left (an unfinished character becomes U+FFFD) and empties d. */
const char *sl_detok_flush(sl_detok *d, size_t *len);
void sl_detok_free(sl_detok *d);

/* Chat formatting with the model's template (Qwen ChatML, DeepSeek-V4; see docs/TEXT.md for what is rendered). */
typedef struct sl_chat_msg {
    const char *role;       /* "system", "user", "assistant", "tool" */
    const char *content;    /* may be NULL (= "") */
    const char *reasoning;  /* assistant only: reasoning_content, or NULL */
    const char *tool_calls; /* assistant only: JSON array of {"name", "arguments"} or {"function": {...}}, or NULL */
} sl_chat_msg;

typedef struct sl_chat_params {
    int add_generation_prompt; /* default 1 */
    int enable_thinking;       /* -1: template default (default), 0: off, 1: on */
    const char *tools;         /* JSON array of tool definitions, or NULL */
} sl_chat_params;

sl_chat_params sl_chat_params_default(void);

/* Renders messages as the template stored with the tokenizer would (transformers'
 * apply_chat_template(tokenize=False)). *out is malloc'ed. SL_EUNSUPPORTED when the tokenizer has no
 * template or one that is neither ChatML nor DeepSeek-V4's; SL_EINVAL for a bad role or tools JSON. */
sl_status sl_chat_format(const sl_tokenizer *tok, const sl_chat_msg *msgs, int n_msgs, const sl_chat_params *params,
                         char **out, sl_error *err);

/* Sampling. Order: repetition and presence penalties over the last repeat_last_n tokens, then
 * temperature (<= 0: greedy), top-k, top-p, min-p, then a draw from a generator seeded with seed. */
typedef struct sl_sampler_params {
    float temp;             /* default 0.8; 0 = greedy */
    int top_k;              /* default 40; 0 = off */
    float top_p;            /* default 0.95; 1 = off */
    float min_p;            /* default 0.05; 0 = off */
    float repeat_penalty;   /* default 1.0 (off); logits of recent tokens: >0 divided, <0 multiplied */
    float presence_penalty; /* default 0.0; subtracted once from recent tokens' logits */
    int repeat_last_n;      /* default 64 */
    uint64_t seed;          /* same seed, same prompt, same model -> same tokens */
} sl_sampler_params;

sl_sampler_params sl_sampler_params_default(void);

typedef struct sl_sampler sl_sampler;
sl_status sl_sampler_new(const sl_sampler_params *params, int n_vocab, sl_sampler **out);
void sl_sampler_free(sl_sampler *smp);
/* Records a token (prompt or generated) in the penalty window. */
void sl_sampler_accept(sl_sampler *smp, int32_t id);
/* Picks the next token from logits [n_vocab] (modified in place). Cannot fail. */
int32_t sl_sampler_sample(sl_sampler *smp, float *logits);
void sl_sampler_reset(sl_sampler *smp); /* forgets the penalty window (the generator keeps going) */

/* Generation: evaluates the prompt, then samples until an end-of-generation token, a stop string,
 * max_tokens, or the callback returning non-zero. */
typedef int (*sl_token_fn)(void *user, int32_t id, const char *text, size_t len);

typedef enum {
    SL_STOP_EOG = 0,       /* an end-of-generation token (evaluated into the session) */
    SL_STOP_STRING = 1,    /* a stop string (text up to it was delivered; the string was not) */
    SL_STOP_LENGTH = 2,    /* max_tokens or the context is full */
    SL_STOP_CALLBACK = 3,  /* the callback asked to stop */
} sl_stop_reason;

typedef struct sl_gen_params {
    int max_tokens;           /* default 256 */
    const char *const *stop;  /* stop strings, or NULL */
    int n_stop;
    int skip_special;         /* default 1: special tokens are not delivered as text */
    int context_shift;        /* default 0: a full context ends generation (SL_STOP_LENGTH) and a prompt that does
                                 not fit is SL_ERANGE; 1: sl_session_shift keeps n_keep and drops half of the rest
                                 (or what the prompt needs, if more) */
    int n_keep;               /* the first positions a shift keeps (default 0) */
} sl_gen_params;

sl_gen_params sl_gen_params_default(void);

typedef struct sl_gen_result {
    int n_prompt, n_generated;
    sl_stop_reason stop;
    int32_t last_token; /* the last sampled token (-1 if none) */
    double prefill_s, decode_s;
} sl_gen_result;

/* Appends prompt (n_prompt >= 1 tokens) to the session of model m and generates. cb (may be NULL)
 * receives each sampled token with the text that became complete (possibly empty: unfinished UTF-8 and
 * text that could still begin a stop string are held back). A prompt that does not fit the context is
 * SL_ERANGE before anything is evaluated. The end-of-generation token is evaluated into the session,
 * so a following turn continues after it; a stop by string, length or callback leaves the last sampled
 * token unevaluated (res->last_token). res may be NULL; err gets the message on error. */
sl_status sl_generate(sl_model *m, sl_session *s, const sl_tokenizer *tok, sl_sampler *smp, const int32_t *prompt,
                      int n_prompt, const sl_gen_params *params, sl_token_fn cb, void *user, sl_gen_result *res,
                      sl_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_H */
