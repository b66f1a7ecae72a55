/*
 * main.c — `sluice` entry point: dispatches subcommands and holds the helpers they share
 * (error printing, progress bar, argument parsing).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"

int cli_fail(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "sluice %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cli_progress_init(cli_progress *p, const char *label) {
    p->label = label;
    p->t0 = p->last = cli_now();
    p->tty = isatty(2);
    p->last_pct = -1;
}

static void human(double b, char *out, size_t n) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) { b /= 1024; i++; }
    snprintf(out, n, "%.1f %s", b, u[i]);
}

int cli_progress_cb(void *user, uint64_t done, uint64_t total) {
    cli_progress *p = user;
    double now = cli_now(), dt = now - p->t0;
    int pct = total ? (int)(100.0 * (double)done / (double)total) : 100;
    if (p->tty) {
        if (now - p->last < 0.1 && done < total) return 0;
        p->last = now;
        double rate = dt > 0 ? (double)done / dt : 0, eta = rate > 0 ? (double)(total - done) / rate : 0;
        char a[32], b[32], r[32];
        human((double)done, a, sizeof a);
        human((double)total, b, sizeof b);
        human(rate, r, sizeof r);
        int w = 30, fill = total ? (int)((double)w * (double)done / (double)total) : w;
        char bar[64];
        for (int i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
        bar[w] = 0;
        fprintf(stderr, "\r%s [%s] %3d%% %s / %s  %s/s  ETA %d:%02d ", p->label, bar, pct, a, b, r, (int)eta / 60,
                (int)eta % 60);
    } else if ((pct / 10 != p->last_pct / 10 && now - p->last >= 1.0) || (done == total && now - p->t0 >= 1.0)) {
        p->last = now;
        char a[32], b[32];
        human((double)done, a, sizeof a);
        human((double)total, b, sizeof b);
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

static void usage(FILE *f) {
    fprintf(f,
            "sluice %s — run Mixture-of-Experts models larger than memory\n\n"
            "usage:\n"
            "  sluice pack SRC_DIR -o MODEL.sluice [--quant keep|f32|bf16] [--no-source-hash]\n"
            "  sluice info MODEL.sluice [--json]\n"
            "  sluice verify MODEL.sluice [--source SRC_DIR]\n"
            "  sluice run -m MODEL.sluice --tokens 1,2,3 [-n N] [--temp 0] [--ids] [--threads N] [--stats]\n"
            "  sluice logits -m MODEL.sluice --tokens 1,2,3 --out FILE [--threads N]\n"
            "  sluice bench -m MODEL.sluice [--prompt N] [--gen N] [--cache SIZE ...] [--policy lru|lfu] [--json]\n"
            "  sluice synth --shape NAME [--layers N] -o MODEL.sluice [--quant bf16|f32|q8|q4|q3]\n"
            "  sluice profile -m MODEL.sluice --tokens 1,2,3 -o PROFILE\n"
            "model options (run, logits, chat, bench, profile):\n"
            "  --cache SIZE (expert cache, e.g. 4G) --resident --io auto|direct|buffered --engine auto|uring|pread\n"
            "  --policy lru|lfu --pin PROFILE --no-verify --prefetch auto|on|off --threads N --io-depth N\n"
            "  sluice run -m MODEL.sluice -p TEXT [--chat] [--think on|off] [--system TEXT] [-n N] [--temp T]\n"
            "             [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--presence-penalty P]\n"
            "             [--seed S] [--stop STR]... [--stats]\n"
            "  sluice chat -m MODEL.sluice [sampling flags as run] [--system TEXT] [--think on|off]\n"
            "  sluice tokenize (-m MODEL.sluice | --tokenizer tokenizer.json) [--decode] [TEXT]   (TEXT or stdin)\n"
            "  sluice version\n",
            SL_VERSION_STRING);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *c = argv[1];
    if (!strcmp(c, "pack")) return cmd_pack(argc - 1, argv + 1);
    if (!strcmp(c, "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(c, "verify")) return cmd_verify(argc - 1, argv + 1);
    if (!strcmp(c, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(c, "logits")) return cmd_logits(argc - 1, argv + 1);
    if (!strcmp(c, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(c, "chat")) return cmd_chat(argc - 1, argv + 1);
    if (!strcmp(c, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(c, "synth")) return cmd_synth(argc - 1, argv + 1);
    if (!strcmp(c, "profile")) return cmd_profile(argc - 1, argv + 1);
    if (!strcmp(c, "version") || !strcmp(c, "--version")) {
        printf("sluice %s\n", SL_VERSION_STRING);
        return 0;
    }
    fprintf(stderr, "sluice: unknown command '%s'\n", c);
    usage(stderr);
    return 2;
}
