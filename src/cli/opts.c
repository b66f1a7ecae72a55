/*
 * opts.c — what the commands that open a model share: the model options (--cache, --resident, --io,
 * --engine, --policy, --pin, --prefetch, --no-verify, --threads, --io-depth, --exact, --gpu, --kv, --ctx),
 * parsed by cli_model_opt and described, once, by cli_model_opts for every command's --help; and the default model that
 * run, chat, logits, profile, bench and perplexity open when no -m is given (cli_default_model).
 *
 * Sections: model options (help table, parser); default model.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

/* ---- model options ----------------------------------------------------------------------------- */

/* The one description of the model options; cli_model_opt below parses the same names, and each
 * default here is what cli_model_params() gives (the library's defaults but for --kv). */
const cli_opt cli_model_opts[] = {
    {"--cache", "SIZE", "expert cache budget, K/M/G/T suffixes in powers of 1024 (default: half of the "
                        "available memory, at most the expert section)"},
    {"--resident", NULL, "read every expert into memory at open, no streaming (default: streamed through "
                         "the cache)"},
    {"--io", "MODE", "auto, direct (O_DIRECT) or buffered (page cache) expert reads (default: auto: the "
                     "page cache when the expert section fits comfortably in memory, else direct)"},
    {"--engine", "ENGINE", "auto, uring or pread (default: auto: io_uring, else a pread thread pool)"},
    {"--policy", "POLICY", "cache eviction, lru or lfu (default: lru)"},
    {"--pin", "PROFILE", "keep the hottest experts of a routing profile written by 'sluice profile' in the "
                         "cache (default: none)"},
    {"--prefetch", "MODE", "read the next layer's predicted experts ahead: auto, on or off (default: auto: "
                           "only while the predictions prove at least 80% right)"},
    {"--no-verify", NULL, "skip the xxh3 checksum of each expert block read (default: every read is checked)"},
    {"--threads", "N", "compute threads (default: the number of online cores)"},
    {"--record-routing", "FILE", "write the experts every routed row chose (prompt and generated tokens) as a "
                                 "routing trace for 'sluice bench --routing trace:FILE', when the command ends; "
                                 "the route is then computed on the host (default: none)"},
    {"--io-depth", "N", "expert reads in flight at most (default: 64)"},
    {"--exact", NULL, "q8/q4 weights multiply f32 activations, the reference arithmetic (default: activations "
                      "quantized to int8 per 32 values, as llama.cpp; docs/QUANT.md)"},
    {"--vram", "SIZE", "the device tier's expert budget: experts in use are copied from the RAM cache (--cache) "
                       "into this many bytes of the backend's memory, VRAM with --gpu, or auto: the card's free memory less "
                       "a reserve (default: none; run, chat and serve --gpu without --vram, --cache or --resident: auto)"},
    {"--hybrid", "MODE", "with --vram: a decode step's expert the device tier does not take runs on the CPU threads "
                         "from the RAM cache, bitwise the GPU's result: auto (on when computing on the GPU), on or off "
                         "(every miss copied to the device) (default: auto)"},
    {"--gpu", NULL, "compute on the GPU, and fail saying why where it cannot: a build without CUDA, no usable "
                    "device, or what the model needs that the CUDA backend lacks (q3, q2 and q2v "
                    "weights are refused with the weight named) (default: auto: the GPU of a make CUDA=1 build when there is one and the model "
                    "opens there, else the CPU)"},
    {"--cpu", NULL, "compute on the CPU, even where a GPU could (default: auto, as for --gpu)"},
    {"--kv", "TYPE", "the attention KV cache: f32 (exact), f16, bf16, q8 (8.5 bits a value, llama.cpp's q8_0), q4 "
                     "(4.5 bits, llama.cpp's q4_0) or q4r (4.5 bits: rotated, half q4's error); K,V for keys and "
                     "values apart (CPU only; e.g. q4r,q8); "
                     "docs/PERFORMANCE.md has each one's bytes and quality; a type the GPU lacks computes on the "
                     "CPU unless --gpu is given; the GPU takes f32 and f16 (default: f16, as llama.cpp)"},
    {"--ctx", "N", "positions a sequence may hold, at most the model's; the KV cache grows with the positions used "
                   "up to it (default: the model's context)"},
    {NULL, NULL, NULL},
};

void cli_gpu_split(sl_model_params *p) { /* auto too: SL_VRAM_AUTO is none where the CPU ends up computing */
    if ((p->backend == SL_BACKEND_CUDA || p->backend == SL_BACKEND_AUTO) && !p->resident && !p->vram_bytes && !p->cache_bytes)
        p->vram_bytes = SL_VRAM_AUTO;
}

static sl_remote *remote; /* rank 0's endpoint under mpirun (main.c), or NULL */

void cli_set_remote(sl_remote *t) { remote = t; }

sl_model_params cli_model_params(void) {
    sl_model_params p = sl_model_params_default();
    p.backend = SL_BACKEND_AUTO; /* the library's default is the CPU; the command's is the GPU where there is one */
    p.kv_type = SL_KV_F16;       /* half the bytes of f32 (docs/PERFORMANCE.md); --kv chooses, and insists */
    p.kv_fallback = 1;           /* a backend without f16 caches (the GPU's, so far) takes f32 */
    p.remote = remote;           /* under mpirun: the experts on ranks 1..N-1 */
    return p;
}

void cli_say_backend(const char *cmd, const sl_model *m, const sl_model_params *p) {
    if (p->backend != SL_BACKEND_AUTO) return;
    const char *why = sl_model_backend_note(m);
    if (sl_model_backend(m) == SL_BACKEND_CUDA && isatty(2))
        fprintf(stderr, "sluice %s: computing on the GPU (--cpu computes on the CPU)\n", cmd);
    else if (why[0]) /* a GPU is there but refused the model: the user expects it, so say why, terminal or not */
        fprintf(stderr, "sluice %s: computing on the CPU: the GPU cannot take this model: %s\n", cmd, why);
}

/* --record-routing's FILE (one command a process, one model it records) */
static const char *routing_file;

const char *cli_routing_file(void) { return routing_file; }

int cli_close_model(const char *cmd, sl_model *m, int ok) {
    const int bad = ok && cli_write_routing(cmd, m, routing_file);
    sl_model_close(m);
    return bad;
}

int cli_write_routing(const char *cmd, sl_model *m, const char *path) {
    if (!path || !m) return 0;
    sl_error err = {0};
    if (sl_model_write_routing(m, path, &err)) return cli_fail(cmd, "--record-routing: %s", err.msg);
    fprintf(stderr, "sluice %s: wrote %s (%s)\n", cmd, path, sl_model_routing_trace(m));
    return 0;
}

int cli_model_opt(int argc, char **argv, int *i, sl_model_params *p, const char *cmd, int *bad) {
    const char *s = argv[*i];
    int more = *i + 1 < argc;
    const char *v = more ? argv[*i + 1] : NULL;
    if (!strcmp(s, "--resident")) { p->resident = 1; return 1; }
    if (!strcmp(s, "--no-verify")) { p->no_verify = 1; return 1; }
    if (!strcmp(s, "--exact")) { p->exact = 1; return 1; }
    if (!strcmp(s, "--gpu")) { p->backend = SL_BACKEND_CUDA; return 1; }
    if (!strcmp(s, "--cpu")) { p->backend = SL_BACKEND_CPU; return 1; }
    if (!more) return 0;
    if (!strcmp(s, "--cache")) {
        long long b = cli_parse_size(v);
        if (b <= 0) { *bad = cli_fail(cmd, "--cache: bad size '%s' (e.g. 512M, 4G)", v); return 1; }
        p->cache_bytes = (uint64_t)b;
    } else if (!strcmp(s, "--vram")) {
        if (!strcmp(v, "auto")) { p->vram_bytes = SL_VRAM_AUTO; return 1; }
        long long b = cli_parse_size(v);
        if (b <= 0) { *bad = cli_fail(cmd, "--vram: bad size '%s' (e.g. 4G)", v); return 1; }
        p->vram_bytes = (uint64_t)b;
    } else if (!strcmp(s, "--hybrid")) {
        if (!strcmp(v, "auto")) p->hybrid = 0;
        else if (!strcmp(v, "on")) p->hybrid = 1;
        else if (!strcmp(v, "off")) p->hybrid = -1;
        else { *bad = cli_fail(cmd, "--hybrid: '%s' (auto, on, off)", v); return 1; }
    } else if (!strcmp(s, "--io")) {
        if (!strcmp(v, "auto")) p->io_mode = SL_IO_AUTO;
        else if (!strcmp(v, "direct")) p->io_mode = SL_IO_DIRECT;
        else if (!strcmp(v, "buffered")) p->io_mode = SL_IO_BUFFERED;
        else { *bad = cli_fail(cmd, "--io: '%s' (auto, direct, buffered)", v); return 1; }
    } else if (!strcmp(s, "--engine")) {
        if (!strcmp(v, "auto")) p->io_engine = SL_ENGINE_AUTO;
        else if (!strcmp(v, "uring") || !strcmp(v, "io_uring")) p->io_engine = SL_ENGINE_URING;
        else if (!strcmp(v, "pread")) p->io_engine = SL_ENGINE_PREAD;
        else { *bad = cli_fail(cmd, "--engine: '%s' (auto, uring, pread)", v); return 1; }
    } else if (!strcmp(s, "--policy")) {
        if (!strcmp(v, "lru")) p->policy = SL_POLICY_LRU;
        else if (!strcmp(v, "lfu")) p->policy = SL_POLICY_LFU;
        else { *bad = cli_fail(cmd, "--policy: '%s' (lru, lfu)", v); return 1; }
    } else if (!strcmp(s, "--prefetch")) {
        if (!strcmp(v, "auto")) p->prefetch = 0;
        else if (!strcmp(v, "on")) p->prefetch = 1;
        else if (!strcmp(v, "off")) p->prefetch = -1;
        else { *bad = cli_fail(cmd, "--prefetch: '%s' (auto, on, off)", v); return 1; }
    } else if (!strcmp(s, "--kv")) {
        char k[16] = "";
        const char *comma = strchr(v, ',');
        snprintf(k, sizeof k, "%.*s", comma ? (int)(comma - v) : (int)strlen(v), v);
        int t = sl_kv_type_from_name(k), tv = comma ? sl_kv_type_from_name(comma + 1) : t;
        if (t < 0 || tv < 0) { *bad = cli_fail(cmd, "--kv: '%s' (f32, f16, bf16, q8, q4, q4r; or K,V)", v); return 1; }
        if (tv == SL_KV_F32 && t != SL_KV_F32) {
            *bad = cli_fail(cmd, "--kv %s: f32 values beside %s keys are not offered", v, k);
            return 1;
        }
        p->kv_type = (sl_kv_type)t;
        p->kv_type_v = (sl_kv_type)tv;
        p->kv_fallback = 0;
    } else if (!strcmp(s, "--ctx")) {
        double x;
        if (cli_num(cmd, s, v, &x)) { *bad = 1; return 1; }
        p->n_ctx = (int)x;
    } else if (!strcmp(s, "--pin")) p->pin_profile = v;
    else if (!strcmp(s, "--record-routing")) {
        p->record_routing = 1;
        routing_file = v;
    } else if (!strcmp(s, "--threads") || !strcmp(s, "--io-depth")) {
        double x;
        if (cli_num(cmd, s, v, &x)) { *bad = 1; return 1; }
        *(!strcmp(s, "--threads") ? &p->n_threads : &p->io_depth) = (int)x;
    } else return 0;
    (*i)++;
    return 1;
}

/* ---- numeric options --------------------------------------------------------------------------- */

/* The one place that knows each numeric option's accepted range (and whether it takes only whole
 * numbers); cli_num checks against it, so every message names the range. The bounds are what the
 * library takes (include/sluice.h: sl_sampler_params, sl_model_params) and a sane ceiling beyond that. */
typedef struct { const char *name; double lo, hi; int whole; } num_range;
static const num_range num_ranges[] = {
    {"-n", 1, 1 << 20, 1},          {"--max-tokens", 1, 1 << 20, 1},   {"--temp", 0, 100, 0},
    {"--top-k", 0, 1 << 20, 1},     {"--top-p", 0, 1, 0},              {"--min-p", 0, 1, 0},
    {"--repeat-penalty", -100, 100, 0}, {"--presence-penalty", -100, 100, 0}, {"--repeat-last-n", 0, 1 << 20, 1},
    {"--threads", 1, 1024, 1},      {"--io-depth", 1, 4096, 1},        {"--ctx", 2, 1 << 24, 1},
    {"--prompt", 0, 1 << 20, 1},    {"--gen", 0, 1 << 20, 1},            {"--layers", 0, 1 << 16, 1}, /* bench, synth */
    {"--keep", 0, 1 << 24, 1},
};

int cli_num(const char *cmd, const char *opt, const char *v, double *out) {
    const num_range *r = NULL;
    for (size_t k = 0; k < sizeof num_ranges / sizeof *num_ranges; k++)
        if (!strcmp(num_ranges[k].name, opt)) r = &num_ranges[k];
    char *end = NULL;
    double x = strtod(v, &end);
    if (end == v || *end || x != x) return cli_fail(cmd, "option '%s': '%s' is not a number", opt, v);
    if (r && (x < r->lo || x > r->hi || (r->whole && x != (double)(long long)x)))
        return cli_fail(cmd, "option '%s' must be %sbetween %.10g and %.10g, not '%s'", opt, r->whole ? "a whole number " : "",
                        r->lo, r->hi, v);
    *out = x;
    return 0;
}

/* ---- default model ----------------------------------------------------------------------------- */

static int is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The directory above the one holding this executable (/usr/local for /usr/local/bin/sluice, the
 * source tree for build/sluice) into out; 0, or -1 when /proc/self/exe cannot be read. */
static int exe_parent(char *out, size_t n) {
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) return -1;
    exe[k] = 0;
    for (int up = 0; up < 2; up++) { /* strip the file name, then its directory */
        char *slash = strrchr(exe, '/');
        if (!slash) return -1;
        *slash = 0;
    }
    snprintf(out, n, "%s", exe[0] ? exe : "/");
    return 0;
}

const char *cli_default_model_doc =
    "Without -m, the model is the first of these that exists: the file named by the environment variable "
    "SLUICE_MODEL; DIR/../models/demo.sluice (the demo model of a source tree, where the binary is "
    "build/sluice); DIR/../share/sluice/demo.sluice (an installed copy, PREFIX/bin/sluice), DIR being the "
    "directory of the sluice executable.";

int cli_default_model(const char *cmd, const char **path) {
    static char found[4200];
    const char *env = getenv("SLUICE_MODEL");
    if (env && *env) {
        /* an explicit choice: a wrong name is an error, not a silent fall back to the demo model */
        if (!is_file(env)) return cli_fail(cmd, "SLUICE_MODEL=%s: %s; fix or unset it, or pass -m MODEL.sluice", env,
                                           access(env, F_OK) ? strerror(errno) : "not a regular file");
        *path = env;
        return 0;
    }
    char base[4096], tree[4200] = "", inst[4200] = "";
    if (exe_parent(base, sizeof base) == 0) {
        const char *sep = strcmp(base, "/") ? "/" : "";
        snprintf(tree, sizeof tree, "%s%smodels/demo.sluice", base, sep);
        snprintf(inst, sizeof inst, "%s%sshare/sluice/demo.sluice", base, sep);
        const char *cand[] = {tree, inst};
        for (int i = 0; i < 2; i++)
            if (is_file(cand[i])) {
                snprintf(found, sizeof found, "%s", cand[i]);
                *path = found;
                return 0;
            }
        return cli_fail(cmd, "no model: pass -m MODEL.sluice (no default model: SLUICE_MODEL is not set, and "
                        "neither %s nor %s exists)", tree, inst);
    }
    return cli_fail(cmd, "no model: pass -m MODEL.sluice (no default model: SLUICE_MODEL is not set, and "
                    "/proc/self/exe, needed to find the demo model, cannot be read)");
}
