/*
 * cmd_serve.c — `sluice serve`: opens the models (-m [NAME=]PATH, repeatable; the default model
 * without one), starts the HTTP server (src/serve/serve.h) and prints one line per request to stderr
 * until SIGINT or SIGTERM, which stop it cleanly: new generations get 503 while those in flight have
 * up to --drain seconds to finish (a second signal cuts that short); then the rest end (an error event
 * or a 503), connections close.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/store.h"
#include "serve/serve.h"
#include "util/clock.h"

enum { MAX_MODELS = 16 };

static void print_line(void *user, const char *line) {
    (void)user;
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
}

/* Splits "NAME=PATH" (NAME without '/') or "PATH" (NAME: the file name without .sluice; a model of the
 * store, ORG/NAME[:TAG], is served under that name: cmd_serve). */
static void name_path(const char *arg, char *name, size_t n, const char **path) {
    const char *eq = strchr(arg, '=');
    if (eq && eq > arg && !memchr(arg, '/', (size_t)(eq - arg))) {
        snprintf(name, n, "%.*s", (int)(eq - arg), arg);
        *path = eq + 1;
        return;
    }
    const char *base = strrchr(arg, '/');
    base = base ? base + 1 : arg;
    size_t bl = strlen(base);
    if (bl > 7 && !strcmp(base + bl - 7, ".sluice")) bl -= 7;
    snprintf(name, n, "%.*s", (int)bl, base);
    *path = arg;
}

/* Opens the model of one -m: its name, path (a model of the store is fetched first: cli_model_path),
 * tokenizer and model. 0, or 1 printed (what was opened is the caller's to free). */
static int open_model(const char *spec, const sl_model_params *mp, char *name, size_t n, const char **path, sl_model **m,
                      sl_tokenizer **tok) {
    sl_error err = {0};
    name_path(spec, name, n, path);
    if (*path == spec && store_is_name(spec)) snprintf(name, n, "%s", spec); /* ORG/NAME[:QUANT] */
    if (cli_model_path("serve", path)) return 1;
    if (!name[0]) return cli_fail("serve", "-m %s: an empty model name", spec);
    if (cli_load_tokenizer("serve", *path, tok)) return 1;
    if (sl_model_open(*path, mp, m, &err)) return cli_fail("serve", "%s", err.msg);
    cli_say_backend("serve", *m, mp);
    return 0;
}

/* A positive integer option's value, or -1 (printed). */
static int count_opt(const char *opt, const char *v, int min) {
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < min || x > 1000000) {
        cli_fail("serve", "%s: '%s' is not a whole number of at least %d", opt, v, min);
        return -1;
    }
    return (int)x;
}

/* MemAvailable of /proc/meminfo in bytes, 0 when it cannot be read. */
static uint64_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    return (uint64_t)kb * 1024;
}

/* The sequences' context of model m (--ctx, at most the model's). */
static int seq_ctx(sl_model *m, const srv_params *p) {
    int ctx = sl_model_n_ctx(m);
    return p->sched.n_ctx > 0 && p->sched.n_ctx < ctx ? p->sched.n_ctx : ctx;
}

/* Each model's pool of KV pages (sl_model_set_kv_pool), which its --parallel sequences share as they fill: pool
 * bytes (--kv-pool) or, with 0, --parallel sequences at the full --ctx when that fits in three quarters of the
 * memory available now (shared among the models), else that share: the sequences then take pages as they fill
 * and wait for them (sched.c). 0, or 1 after saying what to lower when the pool cannot hold one sequence at its
 * full --ctx besides the other slots' first pages (such a request could never finish). */
static int kv_room(sl_model *const *m, int n, const srv_params *p, uint64_t pool, uint64_t *pools) {
    const uint64_t share = mem_available() / 4 * 3 / (uint64_t)n;
    const int par = p->sched.max_active > 0 ? p->sched.max_active : 16;
    for (int i = 0; i < n; i++) {
        const int ctx = seq_ctx(m[i], p);
        const uint64_t one = sl_model_kv_bytes(m[i], ctx), page = (one - sl_model_kv_bytes(m[i], 1)) / (uint64_t)(ctx - 1) * 256;
        const uint64_t all = (uint64_t)par * one, need = one + (uint64_t)(par - 1) * page;
        const uint64_t got = pool ? pool : !share || all <= share ? all : share;
        if (got < need) {
            char a[32], b[32];
            fmt_bytes(a, sizeof a, (double)need);
            fmt_bytes(b, sizeof b, (double)got);
            return cli_fail("serve", "a sequence at --ctx %d needs %s of KV cache (with the other %d slots' first page), "
                            "more than the %s %s: lower --ctx or --parallel, or store the cache in fewer bytes "
                            "(--kv q8)", ctx, a, par - 1, b, pool ? "of --kv-pool" : "of memory available for it");
        }
        sl_model_set_kv_pool(m[i], pools[i] = got);
    }
    return 0;
}

/* One line on stderr: the model's name, file, context and KV cache. */
static void print_model(sl_model *m, const char *name, const char *path, const srv_params *p, uint64_t pool) {
    const int ctx = seq_ctx(m, p);
    char kvb[32], pb[32];
    fmt_bytes(kvb, sizeof kvb, (double)sl_model_kv_bytes(m, ctx));
    fmt_bytes(pb, sizeof pb, (double)pool);
    fprintf(stderr, "model %s: %s (%d positions per sequence, %s KV cache: %s at the full context; the sequences "
            "share a pool of %s)\n", name, path, ctx, sl_kv_type_name(sl_model_kv_type(m)), kvb, pb);
}

/* A server option a with its value v into p (cors: room for the --cors origins; *drain, *key). Returns
 * 0, 1 when it was bad (said), -1 when a is no server option. */
static int server_opt(const char *a, const char *v, srv_params *p, const char **cors, double *drain, const char **key) {
    if (!strcmp(a, "--host")) p->host = v;
    else if (!strcmp(a, "--port")) {
        char *end;
        long x = strtol(v, &end, 10);
        if (end == v || *end || x < 0 || x > 65535) return cli_fail("serve", "--port: '%s' is not a port (0 to 65535)", v);
        p->port = (int)x;
    } else if (!strcmp(a, "--api-key")) *key = v;
    else if (!strcmp(a, "--max-body")) {
        long long b = cli_parse_size(v);
        if (b <= 0) return cli_fail("serve", "--max-body: bad size '%s' (e.g. 512K, 4M)", v);
        p->max_body = (size_t)b;
    } else if (!strcmp(a, "--parallel")) {
        if ((p->sched.max_active = count_opt(a, v, 1)) < 0) return 1;
    } else if (!strcmp(a, "--queue")) {
        if ((p->sched.max_queue = count_opt(a, v, 0)) < 0) return 1;
    } else if (!strcmp(a, "--state-cache")) {
        long long b = cli_parse_size(v);
        if (b < 0) return cli_fail("serve", "--state-cache: bad size '%s' (e.g. 512M, 2G; 0 is off)", v);
        p->sched.state_cache_bytes = (uint64_t)b;
    } else if (!strcmp(a, "--max-connections")) {
        if ((p->max_connections = count_opt(a, v, 1)) < 0) return 1;
    } else if (!strcmp(a, "--max-connections-per-ip")) {
        if ((p->per_ip_connections = count_opt(a, v, 1)) < 0) return 1;
    } else if (!strcmp(a, "--read-timeout")) {
        char *end;
        p->read_timeout = strtod(v, &end);
        if (end == v || *end || !(p->read_timeout >= 0.1 && p->read_timeout <= 3600))
            return cli_fail("serve", "--read-timeout: '%s' is not a number of seconds (0.1 to 3600)", v);
    } else if (!strcmp(a, "--max-tokens")) {
        if ((p->max_tokens = count_opt(a, v, 1)) < 0) return 1;
    } else if (!strcmp(a, "--timeout")) {
        char *end;
        p->timeout = strtod(v, &end);
        if (end == v || *end || !(p->timeout > 0 && p->timeout <= 86400))
            return cli_fail("serve", "--timeout: '%s' is not a number of seconds (above 0, at most 86400)", v);
    } else if (!strcmp(a, "--drain")) {
        char *end;
        *drain = strtod(v, &end);
        if (end == v || *end || !(*drain >= 0 && *drain <= 3600)) return cli_fail("serve", "--drain: '%s' is not a number of seconds (0 to 3600)", v);
    } else if (!strcmp(a, "--state-dir")) p->sched.state_dir = v;
    else if (!strcmp(a, "--cors")) {
        if (p->n_cors == MAX_MODELS) return cli_fail("serve", "at most %d --cors origins", MAX_MODELS);
        cors[p->n_cors++] = v;
        p->cors = cors;
    }
    else
        return -1;
    return 0;
}

/* Waits for SIGINT / SIGTERM (blocked in set), then drains: new generations are refused while those
 * in flight get up to drain seconds, or until a second signal. */
static void serve_until_signal(srv_server *srv, const sigset_t *set, double drain) {
    int sig = 0;
    sigwait(set, &sig);
    int n = srv_server_drain(srv);
    fprintf(stderr, "sluice serve: %s, stopping", sig == SIGINT ? "interrupted" : "terminated");
    if (n && drain > 0)
        fprintf(stderr, " (%d request%s in flight: up to %g s to finish; another signal stops them now)", n, n == 1 ? "" : "s",
                drain);
    fprintf(stderr, "\n");
    fflush(stderr);
    double end = clk_now_s() + drain;
    while (srv_server_in_flight(srv) > 0 && clk_now_s() < end) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        if (sigtimedwait(set, NULL, &ts) > 0) break;
    }
    if ((n = srv_server_in_flight(srv)) > 0) fprintf(stderr, "sluice serve: ending %d request%s still in flight\n", n, n == 1 ? "" : "s");
}

int cmd_serve(int argc, char **argv) {
    srv_params p = srv_params_default();
    sl_model_params mp = cli_model_params();
    const char *specs[MAX_MODELS];
    const char *cors[MAX_MODELS];
    int n_specs = 0, bad = 0;
    double drain = 5;
    uint64_t kv_pool = 0; /* --kv-pool; 0: automatic (kv_room) */
    const char *key = getenv("SLUICE_API_KEY");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--ctx") && v) { /* the sequences' context: the scheduler's, not the model option's */
            if ((p.sched.n_ctx = count_opt(a, v, 2)) < 0) return 1;
            i++;
            continue;
        }
        if (cli_model_opt(argc, argv, &i, &mp, "serve", &bad)) {
            if (bad) return 1;
            continue;
        }
        if (!strcmp(a, "--kv-pool") && v) {
            long long b = cli_parse_size(v);
            if (b < 0) return cli_fail("serve", "--kv-pool: bad size '%s' (e.g. 512M, 2G; 0 is automatic)", v);
            kv_pool = (uint64_t)b;
            i++;
            continue;
        }
        if (!strcmp(a, "--context-shift")) {
            p.sched.context_shift = 1;
            continue;
        }
        if (!strcmp(a, "--keep") && v) {
            if ((p.sched.n_keep = count_opt(a, v, 0)) < 0) return 1;
            i++;
            continue;
        }
        if (a[0] != '-' || ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v)) { /* sluice serve ORG/NAME */
            if (n_specs == MAX_MODELS) return cli_fail("serve", "at most %d models", MAX_MODELS);
            specs[n_specs++] = a[0] != '-' ? a : v;
            i += a[0] == '-';
            continue;
        }
        if (!v) return cli_bad_option("serve", argc, argv, i);
        int r = server_opt(a, v, &p, cors, &drain, &key);
        if (r > 0) return 1;
        if (r < 0) return cli_bad_option("serve", argc, argv, i);
        i++;
    }
    if (!n_specs && cli_default_model("serve", &specs[n_specs++])) return 1;
    if (n_specs > 1 && cli_routing_file()) return cli_fail("serve", "--record-routing records one model; %d are served", n_specs);
    p.api_key = key && *key ? key : NULL;
    p.log = print_line;

    int rc = 1, n = 0;
    srv_model_entry models[MAX_MODELS];
    char names[MAX_MODELS][256];
    const char *paths[MAX_MODELS];
    sl_model *opened[MAX_MODELS] = {0};
    uint64_t pools[MAX_MODELS] = {0};
    sl_tokenizer *toks[MAX_MODELS] = {0};
    srv_server *srv = NULL;
    sl_error err = {0};
    for (; n < n_specs; n++) {
        cli_gpu_split(&mp);
        if (open_model(specs[n], &mp, names[n], sizeof names[n], &paths[n], &opened[n], &toks[n])) goto out;
        models[n] = (srv_model_entry){names[n], opened[n], toks[n]};
    }
    /* SIGINT / SIGTERM are taken by sigwait below: blocked here, before any thread starts, so every
     * thread inherits the mask and none is interrupted */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (kv_room(opened, n, &p, kv_pool, pools)) goto out;
    if (srv_server_new(&p, models, n, &srv, &err)) { cli_fail("serve", "%s", err.msg); goto out; }
    for (int i = 0; i < n; i++) print_model(opened[i], names[i], paths[i], &p, pools[i]);
    int v6 = strchr(p.host, ':') != NULL;
    fprintf(stderr, "listening on http://%s%s%s:%d\n", v6 ? "[" : "", p.host, v6 ? "]" : "", srv_server_port(srv));
    fflush(stderr);
    serve_until_signal(srv, &set, drain);
    rc = 0;
out:
    srv_server_free(srv);
    for (int i = 0; i < n_specs; i++) {
        if (cli_close_model("serve", opened[i], !rc)) rc = 1;
        sl_tokenizer_free(toks[i]);
    }
    return rc;
}
