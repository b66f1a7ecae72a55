/*
 * main.c — `sluice` entry point: dispatches subcommands through the table in help.c (answering
 * --help and --version itself) and holds the helpers they share (error printing, progress bar,
 * argument parsing).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "dist/remote.h"
#include "engine/engine.h"

int cli_fail(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "sluice %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

void cli_remove_stale(const char *cmd, const char *path) {
    char *names = NULL;
    if (sl_remove_stale_temps(path, &names) > 0 && names)
        for (const char *n = names; *n; n += strlen(n) + 1)
            fprintf(stderr, "sluice %s: removed %s, left by an interrupted earlier run\n", cmd, n);
    free(names);
}

void cli_progress_init(cli_progress *p, const char *label) {
    p->label = label;
    p->t0 = p->last = clk_now_s();
    p->tty = isatty(2);
    p->last_pct = -1;
}

int cli_progress_cb(void *user, uint64_t done, uint64_t total) {
    cli_progress *p = user;
    double now = clk_now_s(), dt = now - p->t0;
    int pct = total ? (int)(100.0 * (double)done / (double)total) : 100;
    if (p->tty) {
        if (now - p->last < 0.1 && done < total) return 0;
        p->last = now;
        double rate = dt > 0 ? (double)done / dt : 0, eta = rate > 0 ? (double)(total - done) / rate : 0;
        char a[32], b[32], r[32];
        fmt_bytes(a, sizeof a, (double)done);
        fmt_bytes(b, sizeof b, (double)total);
        fmt_bytes(r, sizeof r, rate);
        int w = 30, fill = total ? (int)((double)w * (double)done / (double)total) : w;
        char bar[64];
        for (int i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
        bar[w] = 0;
        fprintf(stderr, "\r%s [%s] %3d%% %s / %s  %s/s  ETA %d:%02d ", p->label, bar, pct, a, b, r, (int)eta / 60,
                (int)eta % 60);
    } else if ((pct / 10 != p->last_pct / 10 && now - p->last >= 1.0) || (done == total && now - p->t0 >= 1.0)) {
        p->last = now;
        char a[32], b[32];
        fmt_bytes(a, sizeof a, (double)done);
        fmt_bytes(b, sizeof b, (double)total);
        fprintf(stderr, "%s: %d%% (%s / %s, %.1f s)\n", p->label, pct, a, b, dt);
    }
    p->last_pct = pct;
    return 0;
}

void cli_progress_end(cli_progress *p) {
    if (p->tty) fputc('\n', stderr);
}

int cli_parse_tokens(const char *s, int32_t **out) {
    int cap = 16, n = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    if (!v) return -1;
    const char *p = s;
    while (*p) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < 0 || x > 0x7fffffff) { free(v); return -1; }
        if (n == cap) {
            cap *= 2;
            int32_t *nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) { free(v); return -1; }
            v = nv;
        }
        v[n++] = (int32_t)x;
        p = end;
        while (*p == ' ') p++;
        if (*p == ',') p++;
        else if (*p) { free(v); return -1; }
    }
    *out = v;
    return n;
}

long long cli_parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0) return -1;
    long long mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1LL << 10, end++;
    else if (*end == 'M' || *end == 'm') mul = 1LL << 20, end++;
    else if (*end == 'G' || *end == 'g') mul = 1LL << 30, end++;
    else if (*end == 'T' || *end == 't') mul = 1LL << 40, end++;
    if (*end == 'i' || *end == 'B') end++;
    if (*end == 'B') end++;
    if (*end) return -1;
    return (long long)(v * (double)mul);
}

static int dispatch(int argc, char **argv);

/* Started by mpirun with several ranks (docs/SCALE.md): rank 0 runs the command with the experts on ranks
 * 1..N-1, which serve it (engine_expert_rank) until it ends. A rank that failed or went silent ends the job with
 * MPI_Abort once rank 0 has said which (never a hang at MPI_Finalize). */
static int mpi_main(int argc, char **argv) {
    sl_error err = {0};
    rx_transport *t = NULL;
    if (rx_mpi_new(&argc, &argv, &t, &err)) {
        fprintf(stderr, "sluice: started by mpirun with %s ranks, but %s\n", getenv("OMPI_COMM_WORLD_SIZE") ?
                getenv("OMPI_COMM_WORLD_SIZE") : getenv("PMI_SIZE"), err.msg);
        return 1;
    }
    if (t->rank > 0) {
        const sl_status st = engine_expert_rank(t, &err);
        if (st) fprintf(stderr, "sluice (expert rank %d on %s): %s\n", t->rank, t->ops->host(t, t->rank), err.msg);
        rx_mpi_end(t, st == SL_OK);
        return st ? 1 : 0;
    }
    cli_set_remote(t);
    const int rc = dispatch(argc, argv);
    rx_mpi_end(t, !t->failed);
    return rc;
}

int main(int argc, char **argv) {
    if (rx_mpi_launched()) return mpi_main(argc, argv);
    return dispatch(argc, argv);
}

static int dispatch(int argc, char **argv) {
    if (argc < 2) {
        cli_help_main(stderr);
        return 2;
    }
    const char *c = argv[1];
    if (!strcmp(c, "-h") || !strcmp(c, "--help")) {
        cli_help_main(stdout);
        return 0;
    }
    if (!strcmp(c, "version") || !strcmp(c, "--version") || !strcmp(c, "-V")) {
        printf("sluice %s\n", SL_VERSION_STRING);
        return 0;
    }
    if (!strcmp(c, "help")) { /* sluice help [COMMAND] */
        if (argc < 3) { cli_help_main(stdout); return 0; }
        const cli_command *h = cli_command_find(argv[2]);
        if (h) return cli_help(h);
        fprintf(stderr, "sluice help: unknown command '%s' (see 'sluice --help')\n", argv[2]);
        return 2;
    }
    const cli_command *cmd = cli_command_find(c);
    if (!cmd) {
        fprintf(stderr, "sluice: unknown command '%s' (see 'sluice --help')\n", c);
        return 2;
    }
    if (cli_help_requested(argc - 1, argv + 1)) return cli_help(cmd);
    return cmd->run(argc - 1, argv + 1);
}
