/*
 * cmd_bench.c — the --stats line of the commands that open a model, and the commands `sluice bench`,
 * `sluice synth` and `sluice profile`. (The model options they share are in opts.c.)
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "format/synth.h"
#include "util/err.h"

/* Where each MoE layer's experts ran (the device tier; the hybrid step's host share): one line. Per layer: found in
 * the device tier, copied up, computed on the CPU where they lay in RAM (the hybrid step), and of the last two those
 * the RAM cache read from the SSD on demand (its misses of the layer: an expert read ahead by a prefetch and used
 * counts as a RAM hit, the first stats line counts those reads; a resident model reads none). */
static void print_where(sl_model *m, const sl_stats *st) {
    uint64_t all = st->tier_hits + st->tier_misses + st->tier_host;
    fprintf(stderr, "stats: experts ran on the device %.1f%% (found %.1f%%, copied up %.1f%%), on the CPU where they "
            "lay %.1f%% (hybrid), read from the SSD on demand %.1f%%; per layer device-found/copied/CPU/SSD-read:",
            all ? 100.0 * (double)(st->tier_hits + st->tier_misses) / (double)all : 0.0,
            all ? 100.0 * (double)st->tier_hits / (double)all : 0.0, all ? 100.0 * (double)st->tier_misses / (double)all : 0.0,
            all ? 100.0 * (double)st->tier_host / (double)all : 0.0, all ? 100.0 * (double)st->misses / (double)all : 0.0);
    for (int l = 0; l < sl_model_n_layers(m); l++) {
        uint64_t v, c, h, rh, rm, rb;
        sl_model_layer_where(m, l, &v, &c, &h);
        sl_model_layer_stats(m, l, &rh, &rm, &rb);
        if (v + c + h)
            fprintf(stderr, " %d:%llu/%llu/%llu/%llu", l, (unsigned long long)v, (unsigned long long)c, (unsigned long long)h,
                    (unsigned long long)rm);
    }
    fputc('\n', stderr);
}

void cli_print_stats(sl_model *m, int n_prompt, int n_gen, double prefill_s, double decode_s, const char *stop) {
    sl_stats st;
    sl_model_stats(m, &st);
    char rd[32], rss[32], bb[32], cb[32], pc[32];
    fmt_bytes(rd, sizeof rd, (double)st.bytes_read);
    fmt_bytes(rss, sizeof rss, (double)st.peak_rss_bytes);
    fmt_bytes(bb, sizeof bb, (double)st.backbone_bytes);
    fmt_bytes(cb, sizeof cb, (double)st.cache_bytes);
    fmt_bytes(pc, sizeof pc, (double)st.page_cache_bytes);
    uint64_t req = st.hits + st.misses;
    fprintf(stderr,
            "stats: %d prompt + %d generated tokens%s%s%s; prefill %.1f tok/s, decode %.2f tok/s; cache %s (%llu slots, "
            "%s), hit rate %.1f%%, read %s (%.1f MiB/token), io wait %.0f%%, disk busy %.0f%% (depth %.1f), checksums %.1f ms/token (%.1f on the I/O threads), prefetch "
            "%llu reads (%llu used, predictions %.0f%% right%s); peak RSS %s, backbone %s, page cache %s; io %s/%s\n",
            n_prompt, n_gen, stop ? " (stop: " : "", stop ? stop : "", stop ? ")" : "", prefill_s > 0 ? n_prompt / prefill_s : 0.0, decode_s > 0 && n_gen > 1 ? (n_gen - 1) / decode_s : 0.0, cb,
            (unsigned long long)st.cache_slots, st.resident ? "resident" : "streamed",
            req ? 100.0 * (double)st.hits / (double)req : 100.0, rd,
            st.tokens ? (double)st.bytes_read / (double)st.tokens / 1048576.0 : 0.0,
            st.eval_s > 0 ? 100.0 * st.io_wait_s / st.eval_s : 0.0, st.eval_s > 0 ? 100.0 * st.io_busy_s / st.eval_s : 0.0,
            st.io_busy_s > 0 ? st.io_depth_s / st.io_busy_s : 0.0, st.tokens ? 1e3 * st.verify_s / (double)st.tokens : 0.0,
            st.tokens ? 1e3 * st.engine_verify_s / (double)st.tokens : 0.0, (unsigned long long)st.prefetch_reads, (unsigned long long)st.prefetch_used,
            st.prefetch_accuracy >= 0 ? 100 * st.prefetch_accuracy : 0.0,
            st.prefetch_accuracy < 0 ? ", none scored" : st.prefetch_active ? ", active" : ", not acted on", rss, bb, pc,
            st.io_engine,
            st.io_mode);
    if (st.tier_slots) {
        char tb[32], cp[32];
        fmt_bytes(tb, sizeof tb, (double)st.tier_bytes);
        fmt_bytes(cp, sizeof cp, (double)st.tier_bytes_copied);
        uint64_t treq = st.tier_hits + st.tier_misses + st.tier_host;
        fprintf(stderr, "stats: device tier %s (%llu slots), hit rate %.1f%%, copied in %s (%.1f MiB/token)\n", tb,
                (unsigned long long)st.tier_slots, treq ? 100.0 * (double)st.tier_hits / (double)treq : 100.0, cp,
                st.tokens ? (double)st.tier_bytes_copied / (double)st.tokens / 1048576.0 : 0.0);
        print_where(m, &st);
    }
}

/* ---- synth ---- */

int cmd_synth(int argc, char **argv) {
    const char *shape = NULL, *out = NULL;
    int layers = 0, threads = 0, group = SYNTH_GROUP;
    sl_quant q = SL_QUANT_KEEP;
    unsigned long long seed = 0;
    for (int i = 1; i < argc; i++) {
        int more = i + 1 < argc;
        if (!strcmp(argv[i], "--shape") && more) shape = argv[++i];
        else if (!strcmp(argv[i], "--arch") && more) i++; /* implied by the shape */
        else if ((!strcmp(argv[i], "--layers") || !strcmp(argv[i], "--threads")) && more) {
            double x;
            if (cli_num("synth", argv[i], argv[i + 1], &x)) return 1;
            *(!strcmp(argv[i++], "--layers") ? &layers : &threads) = (int)x;
        }
        else if (!strcmp(argv[i], "-o") && more) out = argv[++i];
        else if (!strcmp(argv[i], "--group") && more) {
            const char *v = argv[++i];
            group = atoi(v);
            if (group != 32 && group != 64 && group != 128)
                return cli_fail("synth", "--group must be 32, 64 or 128 (q8 / q4), not '%s'", v);
        } else if (!strcmp(argv[i], "--seed") && more) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--quant") && more) {
            const char *v = argv[++i];
            if (!strcmp(v, "f32")) q = SL_QUANT_F32;
            else if (!strcmp(v, "bf16") || !strcmp(v, "keep")) q = SL_QUANT_BF16;
            else if (!strcmp(v, "q8")) q = SL_QUANT_Q8;
            else if (!strcmp(v, "q4")) q = SL_QUANT_Q4;
            else if (!strcmp(v, "q3")) q = SL_QUANT_Q3;
            else return cli_fail("synth", "--quant '%s' (bf16, f32, q8, q4, q3)", v);
        } else return cli_bad_option("synth", argc, argv, i);
    }
    if (!shape || !out)
        return cli_fail("synth", "usage: sluice synth --shape NAME [--layers N] -o MODEL.sluice (shapes: %s)",
                        sl_synth_shapes());
    cli_progress pr;
    cli_progress_init(&pr, "synthesising");
    sl_error err = {0};
    cli_remove_stale("synth", out);
    sl_status st = synth_write(shape, layers, q, group, seed, threads, out, cli_progress_cb, &pr, &err);
    cli_progress_end(&pr);
    if (st) return cli_fail("synth", "%s", err.msg);
    double dt = clk_now_s() - pr.t0;
    struct stat sb;
    double sz = stat(out, &sb) == 0 ? (double)sb.st_size : 0.0;
    fprintf(stderr, "wrote %s in %.1f s (%.0f MB/s)\n", out, dt, dt > 0 ? sz / dt / 1e6 : 0.0);
    return 0;
}

/* ---- bench ---- */

static uint64_t rng(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

typedef struct {
    double prefill_tps, decode_tps, hit_rate, bytes_per_token, read_mbps, io_wait_frac, verify_ms_per_token;
    double prefill_bytes, prefill_io_wait_frac; /* expert bytes the prompt read; its share of time waiting on them */
    uint64_t prefill_prefetch_reads;             /* ... of which read ahead on the next layer's predicted experts */
    double engine_verify_ms_per_token;           /* decode: the I/O threads' checksum time per token */
    double busy_frac, depth, prefill_busy_frac;  /* decode (prefill): the disk's busy share of the time and its
                                                    mean queue depth while busy (sl_stats.io_busy_s) */
    uint64_t prefetch_reads, prefetch_used;
    double prefetch_accuracy;
    uint64_t cache_bytes, peak_rss, backbone, page_cache_growth;
    double tier_hit_rate, tier_bytes_per_token, tier_prefill_bytes; /* the device tier (--vram): decode, prompt */
    double tier_prefill_hit_rate; /* the prompt's experts found in the device tier (of found, copied up, on the host) */
    double tier_host_frac; /* decode: experts computed on the CPU where they lay (the hybrid step) */
    double tier_host_gbs, tier_pcie_gbs; /* the hybrid step's cost model's rates at the end (sl_stats) */
    uint64_t tier_bytes;
    const char *engine, *mode;
    int random_ids; /* decode fed random ids (else greedy) */
    cJSON *layers; /* per-layer hits / misses / bytes over the whole run (owned by the row) */
    cJSON *ranks;  /* experts on other ranks (mpirun): each rank's figures since open (owned by the row), or NULL */
    int warm_cache;          /* --warm-cache: the RAM cache filled before timing ... */
    uint64_t warm_experts;   /* ... with this many experts (sl_model_warm) */
    char trace[256];    /* the routing trace replayed or recorded (sl_model_routing_trace), or "" */
} bench_row;

/* Each rank's figures (sl_rank_stats) of a model whose experts live on other ranks: a JSON array, NULL when the
 * model runs in this process only. Network bytes per token divide by rank 0's tokens (prompt and decode, warm-up
 * included: every token since open). */
static cJSON *bench_ranks(sl_model *m, sl_error *err) {
    const int n = sl_model_n_ranks(m);
    if (n < 2) return NULL;
    cJSON *a = cJSON_CreateArray();
    uint64_t tokens = 0;
    for (int r = 0; r < n; r++) {
        sl_rank_stats rs;
        if (sl_model_rank_stats(m, r, &rs, err)) {
            cJSON_Delete(a);
            return NULL;
        }
        if (r == 0) tokens = rs.tokens;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", r);
        cJSON_AddStringToObject(o, "host", rs.host);
        cJSON_AddNumberToObject(o, "experts", (double)rs.experts);
        cJSON_AddNumberToObject(o, "expert_bytes", (double)rs.expert_bytes);
        cJSON_AddStringToObject(o, "experts_held", r == 0 ? "none (backbone)" : rs.resident ? "resident" : "streamed");
        cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)rs.peak_rss);
        cJSON_AddNumberToObject(o, "requests", (double)rs.requests);
        cJSON_AddNumberToObject(o, "expert_outputs", (double)rs.pairs);
        cJSON_AddNumberToObject(o, "compute_s", rs.compute_s);
        cJSON_AddNumberToObject(o, "wait_s", rs.wait_s);
        cJSON_AddNumberToObject(o, "net_bytes_in", (double)rs.bytes_in);
        cJSON_AddNumberToObject(o, "net_bytes_out", (double)rs.bytes_out);
        cJSON_AddNumberToObject(o, "net_bytes_per_token", tokens ? (double)(rs.bytes_in + rs.bytes_out) / (double)tokens : 0);
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

/* Decode feeds: the argmax of the last logits, or random token ids (as llama-bench does: a random
 * model's greedy text loops, so its routing repeats and the cache looks better than it is). */
enum { FEED_AUTO = 0, FEED_GREEDY = 1, FEED_RANDOM = 2 };

/* The untimed warm-up of a resident run, as llama-bench's (its default): the prompt and one decoded token in a
 * session of their own, dropped. The first steps after the open ran ~0.1 s slower in all (first touches of
 * scratch, state and the threads' caches), 12% of a 32-token decode at 2 threads. A streamed run's expert caches
 * are not warmed (it measures from a cold cache, as before) unless --warm-cache asks: then every expert is read
 * into the RAM cache while it has room (sl_model_warm) and this warm-up runs too, which leaves in the device tier
 * what the prompt's pass left there, as a first run would (llama-bench's warm-up runs the whole prompt). */
static void bench_warmup(sl_model *m, const int32_t *toks, int n_prompt, float *lg) {
    sl_session *w = NULL;
    if (sl_session_new(m, n_prompt + 2, &w)) return;
    const int32_t one = toks[0];
    if (!sl_session_eval(w, toks, n_prompt > 0 ? n_prompt : 1, lg, 0)) sl_session_eval(w, &one, 1, lg, 0);
    sl_session_free(w);
}

/* The routing trace m replays or records, into r->trace; the recording written to --record-routing's file (when
 * given: cli_routing_file). 0, or 1 after printing why it could not be. */
static int bench_trace(sl_model *m, bench_row *r) {
    snprintf(r->trace, sizeof r->trace, "%s", sl_model_routing_trace(m));
    return cli_write_routing("bench", m, cli_routing_file());
}

/* One row of the table: SL_OK with r filled, or the failure with err naming it. */
static sl_status bench_one(const char *path, sl_model_params mp, int n_prompt, int n_gen, int feed, uint64_t seed,
                           int warm, bench_row *r, sl_error *err) {
    sl_model *m = NULL;
    sl_status rc = sl_model_open(path, &mp, &m, err);
    if (rc) return rc;
    int V = sl_model_n_vocab(m);
    int32_t *toks = malloc((size_t)(n_prompt > 0 ? n_prompt : 1) * sizeof *toks);
    float *lg = malloc((size_t)V * sizeof(float));
    if (!toks || !lg) {
        free(toks);
        free(lg);
        sl_model_close(m);
        return err_set(err, SL_ENOMEM, "out of memory");
    }
    if (feed == FEED_AUTO) feed = sl_model_synthetic(m) ? FEED_RANDOM : FEED_GREEDY;
    r->random_ids = feed == FEED_RANDOM;
    for (int i = 0; i < n_prompt; i++) toks[i] = (int32_t)(rng(&seed) % (uint64_t)V);
    if (n_prompt < 1) toks[0] = 0;
    if (r->warm_cache && !mp.resident && (rc = sl_model_warm(m, &r->warm_experts, err))) {
        free(toks);
        free(lg);
        sl_model_close(m);
        return rc;
    }
    if (warm && (mp.resident || r->warm_cache)) bench_warmup(m, toks, n_prompt, lg);
    sl_stats s0;
    sl_model_stats(m, &s0);
    sl_session *s = NULL;
    rc = sl_session_new(m, n_prompt + n_gen + 1, &s);
    /* the run's KV cache allocated before the timing, as llama-bench's context (n_ctx = prompt + gen + depth, made
     * before its runs): a prompt that fills whole pages (8192, 32768) left the cache at exactly its rows
     * (state.c grow_to), so the first decoded token re-allocated and copied every layer's cache inside the decode
     * timing (on the GPU a cudaMalloc, a device copy and a cudaFree a cache: 512 MiB copied at depth 32768 on 8
     * layers) */
    if (!rc) rc = sl_session_reserve(s, n_prompt + n_gen + 1);
    double t0 = clk_now_s(), t1 = t0, t1d = t0, t2 = t0;
    if (!rc && n_prompt > 0) rc = sl_session_eval(s, toks, n_prompt, lg, 0);
    t1 = clk_now_s();
    sl_stats sp;
    sl_model_stats(m, &sp); /* outside both timings: its mincore over the file (stats.c page_cache_bytes) took 44 ms on a
                              * 5.4 GB pack (docs/CUDA.md "Call I"), which the decode rate used to include */
    sl_sampler_params gp = sl_sampler_params_default();
    gp.temp = 0; /* greedy: the argmax, no penalties */
    sl_sampler *greedy = NULL;
    int no_sampler = !rc && feed != FEED_RANDOM && sl_sampler_new(&gp, V, &greedy) != SL_OK;
    t1d = clk_now_s();
    for (int i = 0; i < n_gen && !rc && !no_sampler; i++) {
        int32_t next = feed == FEED_RANDOM ? (int32_t)(rng(&seed) % (uint64_t)V) : sl_sampler_sample(greedy, lg);
        rc = sl_session_eval(s, &next, 1, lg, 0);
    }
    sl_sampler_free(greedy);
    t2 = clk_now_s();
    if (rc || no_sampler) {
        rc = err_set(err, rc ? rc : SL_ENOMEM, "%s", rc ? sl_session_errmsg(s) : "out of memory");
    } else {
        sl_stats st;
        sl_model_stats(m, &st);
        uint64_t dh = st.hits - sp.hits, dm = st.misses - sp.misses, db = st.bytes_read - sp.bytes_read;
        double dt = t2 - t1d;
        r->prefill_tps = n_prompt > 0 ? n_prompt / (t1 - t0) : 0;
        r->prefill_bytes = (double)(sp.bytes_read - s0.bytes_read);
        r->prefill_io_wait_frac = n_prompt > 0 && t1 > t0 ? (sp.io_wait_s - s0.io_wait_s) / (t1 - t0) : 0;
        r->prefill_prefetch_reads = sp.prefetch_reads - s0.prefetch_reads;
        r->decode_tps = n_gen > 0 ? n_gen / dt : 0;
        r->hit_rate = dh + dm ? (double)dh / (double)(dh + dm) : 1.0;
        r->bytes_per_token = n_gen > 0 ? (double)db / n_gen : 0;
        r->read_mbps = dt > 0 ? (double)db / dt / 1048576.0 : 0;
        r->io_wait_frac = dt > 0 ? (st.io_wait_s - sp.io_wait_s) / dt : 0;
        r->cache_bytes = st.cache_bytes;
        r->peak_rss = st.peak_rss_bytes;
        r->backbone = st.backbone_bytes;
        r->page_cache_growth = st.page_cache_bytes > s0.page_cache_bytes ? st.page_cache_bytes - s0.page_cache_bytes : 0;
        r->engine = st.io_engine;
        r->mode = st.io_mode;
        r->verify_ms_per_token = st.tokens ? 1e3 * st.verify_s / (double)st.tokens : 0;
        r->engine_verify_ms_per_token = n_gen > 0 ? 1e3 * (st.engine_verify_s - sp.engine_verify_s) / n_gen : 0;
        r->busy_frac = dt > 0 ? (st.io_busy_s - sp.io_busy_s) / dt : 0;
        r->depth = st.io_busy_s > sp.io_busy_s ? (st.io_depth_s - sp.io_depth_s) / (st.io_busy_s - sp.io_busy_s) : 0;
        r->prefill_busy_frac = n_prompt > 0 && t1 > t0 ? (sp.io_busy_s - s0.io_busy_s) / (t1 - t0) : 0;
        r->prefetch_reads = st.prefetch_reads - sp.prefetch_reads;
        r->prefetch_used = st.prefetch_used - sp.prefetch_used;
        r->prefetch_accuracy = st.prefetch_accuracy;
        uint64_t th = st.tier_hits - sp.tier_hits, tm = st.tier_misses - sp.tier_misses;
        const uint64_t tx = st.tier_host - sp.tier_host;
        r->tier_hit_rate = th + tm + tx ? (double)th / (double)(th + tm + tx) : 0;
        r->tier_host_frac = th + tm + tx ? (double)tx / (double)(th + tm + tx) : 0;
        r->tier_host_gbs = st.tier_host_gbs;
        r->tier_pcie_gbs = st.tier_pcie_gbs;
        r->tier_bytes_per_token = n_gen > 0 ? (double)(st.tier_bytes_copied - sp.tier_bytes_copied) / n_gen : 0;
        r->tier_prefill_bytes = (double)(sp.tier_bytes_copied - s0.tier_bytes_copied);
        const uint64_t ph = sp.tier_hits - s0.tier_hits, pall = ph + sp.tier_misses - s0.tier_misses + sp.tier_host - s0.tier_host;
        r->tier_prefill_hit_rate = pall ? (double)ph / (double)pall : 0;
        r->tier_bytes = st.tier_bytes;
        r->layers = cJSON_CreateArray();
        for (int l = 0; l < sl_model_n_layers(m); l++) {
            uint64_t h, mi, b;
            sl_model_layer_stats(m, l, &h, &mi, &b);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "layer", l);
            cJSON_AddNumberToObject(o, "hits", (double)h);
            cJSON_AddNumberToObject(o, "misses", (double)mi);
            cJSON_AddNumberToObject(o, "bytes_read", (double)b);
            uint64_t tv, tc, th_;
            sl_model_layer_where(m, l, &tv, &tc, &th_);
            cJSON_AddNumberToObject(o, "device_found", (double)tv);
            cJSON_AddNumberToObject(o, "device_copied", (double)tc);
            cJSON_AddNumberToObject(o, "host", (double)th_);
            cJSON_AddItemToArray(r->layers, o);
        }
    }
    if (!rc && sl_model_n_ranks(m) > 1 && !(r->ranks = bench_ranks(m, err))) rc = err->status ? err->status : SL_ENOMEM;
    if (bench_trace(m, r) && !rc) rc = err_set(err, SL_EIO, "--record-routing failed");
    sl_session_free(s);
    free(toks);
    free(lg);
    sl_model_close(m);
    return rc;
}

/* One cache size's row as a JSON object; takes r->layers. */
static cJSON *bench_row_json(const sl_model_params *p, bench_row *r, int n_prompt, int n_gen, uint64_t seed) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "cache_bytes", (double)r->cache_bytes);
    cJSON_AddStringToObject(o, "policy", p->policy == SL_POLICY_LFU ? "lfu" : "lru");
    cJSON_AddStringToObject(o, "io_engine", r->engine);
    cJSON_AddStringToObject(o, "io_mode", r->mode);
    cJSON_AddNumberToObject(o, "prompt_tokens", n_prompt);
    cJSON_AddNumberToObject(o, "gen_tokens", n_gen);
    cJSON_AddStringToObject(o, "routing", p->routing == SL_ROUTING_UNIFORM ? "uniform"
                                          : p->routing == SL_ROUTING_TRACE ? "trace" : "model");
    if (r->trace[0]) cJSON_AddStringToObject(o, "routing_trace", r->trace);
    cJSON_AddNumberToObject(o, "routing_seed", (double)seed);
    cJSON_AddStringToObject(o, "decode_ids", r->random_ids ? "random" : "greedy");
    cJSON_AddNumberToObject(o, "prefill_tok_s", r->prefill_tps);
    cJSON_AddNumberToObject(o, "prefill_bytes", r->prefill_bytes);
    cJSON_AddNumberToObject(o, "prefill_io_wait_fraction", r->prefill_io_wait_frac);
    cJSON_AddNumberToObject(o, "prefill_prefetch_reads", (double)r->prefill_prefetch_reads);
    cJSON_AddNumberToObject(o, "decode_tok_s", r->decode_tps);
    cJSON_AddNumberToObject(o, "hit_rate", r->hit_rate);
    cJSON_AddNumberToObject(o, "bytes_per_token", r->bytes_per_token);
    cJSON_AddNumberToObject(o, "read_mib_s", r->read_mbps);
    cJSON_AddNumberToObject(o, "io_wait_fraction", r->io_wait_frac);
    cJSON_AddNumberToObject(o, "disk_busy_fraction", r->busy_frac);
    cJSON_AddNumberToObject(o, "queue_depth", r->depth);
    cJSON_AddNumberToObject(o, "prefill_disk_busy_fraction", r->prefill_busy_frac);
    cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)r->peak_rss);
    cJSON_AddNumberToObject(o, "backbone_bytes", (double)r->backbone);
    cJSON_AddNumberToObject(o, "page_cache_growth_bytes", (double)r->page_cache_growth);
    cJSON_AddNumberToObject(o, "checksum_ms_per_token", r->verify_ms_per_token);
    cJSON_AddNumberToObject(o, "engine_checksum_ms_per_token", r->engine_verify_ms_per_token);
    cJSON_AddNumberToObject(o, "prefetch_reads", (double)r->prefetch_reads);
    cJSON_AddNumberToObject(o, "prefetch_used", (double)r->prefetch_used);
    cJSON_AddNumberToObject(o, "prefetch_accuracy", r->prefetch_accuracy);
    cJSON_AddNumberToObject(o, "vram_bytes", (double)r->tier_bytes);
    cJSON_AddNumberToObject(o, "vram_hit_rate", r->tier_hit_rate);
    cJSON_AddNumberToObject(o, "hybrid_host_fraction", r->tier_host_frac);
    cJSON_AddNumberToObject(o, "hybrid_host_gbs", r->tier_host_gbs);
    cJSON_AddNumberToObject(o, "hybrid_pcie_gbs", r->tier_pcie_gbs);
    cJSON_AddNumberToObject(o, "vram_copied_bytes_per_token", r->tier_bytes_per_token);
    cJSON_AddNumberToObject(o, "vram_prefill_copied_bytes", r->tier_prefill_bytes);
    cJSON_AddNumberToObject(o, "vram_prefill_hit_rate", r->tier_prefill_hit_rate);
    cJSON_AddBoolToObject(o, "warm_cache", r->warm_cache);
    cJSON_AddNumberToObject(o, "warm_cache_experts", (double)r->warm_experts);
    cJSON_AddItemToObject(o, "layers", r->layers);
    r->layers = NULL;
    if (r->ranks) cJSON_AddItemToObject(o, "ranks", r->ranks);
    r->ranks = NULL;
    return o;
}

/* One cache size's row of the table. */
static void bench_row_print(const sl_model_params *p, const bench_row *r) {
    printf("%-10.0f %-8s %-6s %10.1f %10.2f %7.1f%% %12.1f %10.0f %7.0f%% %9.0fM %9.0fM\n",
           (double)r->cache_bytes / 1048576.0, p->policy == SL_POLICY_LFU ? "lfu" : "lru",
           !strcmp(r->mode, "direct") ? "direct" : !strcmp(r->mode, "resident") ? "ram" : !strcmp(r->mode, "remote") ? "remote" : "buf", r->prefill_tps,
           r->decode_tps, 100 * r->hit_rate, r->bytes_per_token / 1048576.0, r->read_mbps, 100 * r->io_wait_frac,
           (double)r->peak_rss / 1048576.0, (double)r->page_cache_growth / 1048576.0);
    fflush(stdout);
}

/* The ranks' figures under a table row (mpirun): one line each. */
static void bench_ranks_print(const cJSON *ranks) {
    const cJSON *o;
    cJSON_ArrayForEach(o, ranks) {
        double v[8];
        static const char *const k[8] = {"rank", "experts", "expert_bytes", "peak_rss_bytes", "compute_s", "wait_s",
                                          "net_bytes_per_token", "requests"};
        for (int i = 0; i < 8; i++) v[i] = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, k[i]));
        printf("  rank %.0f (%s): %.0f experts, %.0f MiB, peak RSS %.0f MiB, compute %.2f s, wait %.2f s, "
               "%.0f requests, %.0f network bytes/token\n", v[0],
               cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "host")), v[1], v[2] / 1048576.0,
               v[3] / 1048576.0, v[4], v[5], v[7], v[6]);
    }
}

int cmd_bench(int argc, char **argv) {
    const char *path = NULL;
    int n_prompt = 32, n_gen = 16, json = 0, n_cache = 0, bad = 0, feed = FEED_AUTO, warm = 1, warm_cache = 0;
    uint64_t caches[16], seed = 42;
    sl_model_params mp = cli_model_params();
    for (int i = 1; i < argc; i++) {
        int more = i + 1 < argc;
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && more) path = argv[++i];
        else if ((!strcmp(argv[i], "--prompt") || !strcmp(argv[i], "--gen")) && more) {
            double x;
            if (cli_num("bench", argv[i], argv[i + 1], &x)) return 1;
            *(!strcmp(argv[i++], "--gen") ? &n_gen : &n_prompt) = (int)x;
        }
        else if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--no-warmup")) warm = 0;
        else if (!strcmp(argv[i], "--warm-cache")) warm_cache = 1;
        else if (!strcmp(argv[i], "--seed") && more) {
            char *end;
            seed = strtoull(argv[++i], &end, 10);
            if (end == argv[i] || *end) return cli_fail("bench", "--seed: '%s' is not a whole number", argv[i]);
        } else if (!strcmp(argv[i], "--routing") && more) {
            const char *v = argv[++i];
            if (!strcmp(v, "uniform")) mp.routing = SL_ROUTING_UNIFORM;
            else if (!strcmp(v, "model")) mp.routing = SL_ROUTING_MODEL;
            else if (!strncmp(v, "trace:", 6) && v[6]) mp.routing = SL_ROUTING_TRACE, mp.routing_trace = v + 6;
            else return cli_fail("bench", "--routing '%s' (model, uniform, trace:FILE)", v);
        } else if (!strcmp(argv[i], "--decode") && more) {
            const char *v = argv[++i];
            if (!strcmp(v, "random")) feed = FEED_RANDOM;
            else if (!strcmp(v, "greedy")) feed = FEED_GREEDY;
            else return cli_fail("bench", "--decode '%s' (random, greedy)", v);
        } else if (!strcmp(argv[i], "--cache") && more) {
            long long b = cli_parse_size(argv[++i]);
            if (b <= 0 || n_cache == 16) return cli_fail("bench", "--cache: bad size '%s'", argv[i]);
            caches[n_cache++] = (uint64_t)b;
        } else if (cli_model_opt(argc, argv, &i, &mp, "bench", &bad)) {
            if (bad) return 1;
        } else return cli_bad_option("bench", argc, argv, i);
    }
    if (cli_model_path("bench", &path)) return 1;
    if (n_cache == 0) caches[n_cache++] = mp.cache_bytes;
    mp.routing_seed = seed;
    cJSON *arr = cJSON_CreateArray();
    if (!json)
        printf("%-10s %-8s %-6s %10s %10s %8s %12s %10s %8s %10s %10s\n", "cache", "policy", "io", "prefill/s",
               "decode/s", "hit%", "MiB/token", "read MiB/s", "io wait", "peak RSS", "pagecache+");
    for (int c = 0; c < n_cache; c++) {
        sl_model_params p = mp;
        p.cache_bytes = caches[c];
        bench_row r;
        memset(&r, 0, sizeof r);
        r.warm_cache = warm_cache;
        sl_error err = {0};
        if (bench_one(path, p, n_prompt, n_gen, feed, seed, warm, &r, &err)) {
            cJSON_Delete(arr);
            return cli_fail("bench", "%s", err.msg);
        }
        if (p.routing == SL_ROUTING_TRACE && c == 0) fprintf(stderr, "sluice bench: %s\n", r.trace);
        if (warm_cache && !p.resident)
            fprintf(stderr, "sluice bench: %llu experts read into the RAM cache before timing (--warm-cache)\n",
                    (unsigned long long)r.warm_experts);
        if (json) cJSON_AddItemToArray(arr, bench_row_json(&p, &r, n_prompt, n_gen, seed));
        else bench_row_print(&p, &r), bench_ranks_print(r.ranks);
        cJSON_Delete(r.layers);
        cJSON_Delete(r.ranks);
    }
    if (json) {
        char *t = cJSON_Print(arr);
        printf("%s\n", t);
        free(t);
    }
    cJSON_Delete(arr);
    return 0;
}

/* ---- profile ---- */

int cmd_profile(int argc, char **argv) {
    const char *path = NULL, *out = NULL, *tokens = NULL;
    int bad = 0;
    sl_model_params mp = cli_model_params();
    for (int i = 1; i < argc; i++) {
        int more = i + 1 < argc;
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && more) path = argv[++i];
        else if (!strcmp(argv[i], "-o") && more) out = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && more) tokens = argv[++i];
        else if (cli_model_opt(argc, argv, &i, &mp, "profile", &bad)) {
            if (bad) return 1;
        } else return cli_bad_option("profile", argc, argv, i);
    }
    if (!out || !tokens) return cli_fail("profile", "usage: sluice profile [-m MODEL.sluice] --tokens 1,2,3 -o PROFILE");
    if (cli_model_path("profile", &path)) return 1;
    if (mp.resident) return cli_fail("profile", "--resident models do not count routing; drop --resident");
    int32_t *toks = NULL;
    int n = cli_parse_tokens(tokens, &toks);
    if (n <= 0) return cli_fail("profile", "--tokens must be a comma-separated list of token ids");
    sl_model *m = NULL;
    sl_session *s = NULL;
    sl_error err = {0};
    int rc = 1;
    if (sl_model_open(path, &mp, &m, &err)) { cli_fail("profile", "%s", err.msg); goto out; }
    if (sl_session_new(m, 0, &s) || sl_session_eval(s, toks, n, NULL, 0)) {
        cli_fail("profile", "%s", s ? sl_session_errmsg(s) : "out of memory");
        goto out;
    }
    cli_remove_stale("profile", out);
    if (sl_model_write_profile(m, out, &err)) { cli_fail("profile", "%s", err.msg); goto out; }
    fprintf(stderr, "wrote %s (routing of %d tokens)\n", out, n);
    rc = 0;
out:
    free(toks);
    sl_session_free(s);
    if (cli_close_model("profile", m, !rc)) rc = 1;
    return rc;
}
