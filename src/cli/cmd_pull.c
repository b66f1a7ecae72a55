/*
 * cmd_pull.c — `sluice pull REPO`: downloads a Hugging Face model repository (sl_pull) and prints the
 * directory that holds it as the last line on stdout, so that `sluice pack "$(sluice pull REPO)" -o
 * m.sluice` works; the progress bar and the summary go to stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

enum { MAX_INCLUDE = 64 };

/* Whole bytes below 1 KiB ("512 B"), else fmt_bytes. */
static void human_bytes(uint64_t b, char *out, size_t n) {
    if (b < 1024) snprintf(out, n, "%llu B", (unsigned long long)b);
    else fmt_bytes(out, n, (double)b);
}

int cmd_pull(int argc, char **argv) {
    sl_pull_params p = sl_pull_params_default();
    const char *include[MAX_INCLUDE];
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-o") && i + 1 < argc) p.out_dir = argv[++i];
        else if (!strcmp(a, "--revision") && i + 1 < argc) p.revision = argv[++i];
        else if (!strcmp(a, "--cache-dir") && i + 1 < argc) p.cache_dir = argv[++i];
        else if (!strcmp(a, "--include") && i + 1 < argc) {
            if (p.n_include == MAX_INCLUDE) return cli_fail("pull", "at most %d --include patterns", MAX_INCLUDE);
            include[p.n_include++] = argv[++i];
        } else if (!strcmp(a, "--jobs") && i + 1 < argc) {
            char *end;
            long n = strtol(argv[++i], &end, 10);
            if (*end || n < 1 || n > 64) return cli_fail("pull", "--jobs must be 1 to 64, not '%s'", argv[i]);
            p.jobs = (int)n;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) quiet = 1;
        else if (a[0] == '-') return cli_bad_option("pull", argc, argv, i);
        else if (!p.repo) p.repo = a;
        else return cli_fail("pull", "unexpected argument '%s'", a);
    }
    if (!p.repo)
        return cli_fail("pull", "usage: sluice pull ORG/NAME [--revision REV] [--include GLOB]... [-o DIR] [--jobs N]");
    p.include = include;
    cli_progress pr;
    cli_progress_init(&pr, "downloading");
    char *dir = NULL;
    sl_pull_result res;
    sl_error err = {0};
    sl_status st = sl_pull(&p, quiet ? NULL : cli_progress_cb, &pr, &dir, &res, &err);
    if (!quiet) cli_progress_end(&pr);
    if (st) return cli_fail("pull", "%s%s", err.msg, st == SL_ENOSPC ? ": free some space, or download elsewhere "
                                                                       "(-o DIR, or HF_HOME)" : "");
    if (!quiet) {
        char got[32];
        human_bytes(res.bytes_fetched, got, sizeof got);
        fprintf(stderr, "%s at %.12s: %d files, %d downloaded (%s), %d already present", p.repo, res.commit, res.n_files,
                res.n_fetched, got, res.n_present);
        if (res.n_resumed) fprintf(stderr, ", %d resumed", res.n_resumed);
        if (res.n_retries) fprintf(stderr, ", %llu retries", (unsigned long long)res.n_retries);
        if (res.n_corrupt) fprintf(stderr, ", %d fetched again after a failed check", res.n_corrupt);
        fprintf(stderr, "; %.1f s\n", clk_now_s() - pr.t0);
    }
    printf("%s\n", dir);
    free(dir);
    return 0;
}
