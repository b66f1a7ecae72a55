/*
 * cmd_run.c — `sluice run` (greedy generation from token ids) and `sluice logits`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "util/fileio.h"

typedef struct {
    const char *model, *tokens, *out;
    int n_gen, ids, stats, ctx_shift, n_keep; /* --context-shift, --keep */
    double temp;
    sl_model_params mp;
} run_args;

/* Returns 0, or the exit code after printing why. */
static int parse(const char *cmd, int argc, char **argv, run_args *a) {
    memset(a, 0, sizeof *a);
    a->n_gen = 16;
    a->mp = cli_model_params();
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        int more = i + 1 < argc, bad = 0;
        if (cli_model_opt(argc, argv, &i, &a->mp, cmd, &bad)) {
            if (bad) return 1;
            continue;
        }
        if ((!strcmp(s, "-m") || !strcmp(s, "--model")) && more) a->model = argv[++i];
        else if (!strcmp(s, "--tokens") && more) a->tokens = argv[++i];
        else if ((!strcmp(s, "-o") || !strcmp(s, "--out")) && more) a->out = argv[++i];
        else if ((!strcmp(s, "-n") || !strcmp(s, "--max-tokens") || !strcmp(s, "--temp") || !strcmp(s, "--keep")) &&
                 more) {
            double x;
            if (cli_num(cmd, s, argv[++i], &x)) return 1;
            if (!strcmp(s, "--temp")) a->temp = x;
            else if (!strcmp(s, "--keep")) a->n_keep = (int)x;
            else a->n_gen = (int)x;
        }
        else if (!strcmp(s, "--context-shift")) a->ctx_shift = 1;
        else if (!strcmp(s, "--ids")) a->ids = 1;
        else if (!strcmp(s, "--stats")) a->stats = 1;
        else if (s[0] != '-' && !a->model) a->model = s; /* sluice run MODEL --tokens ... */
        else return cli_bad_option(cmd, argc, argv, i);
    }
    if (!a->tokens) return cli_fail(cmd, "no input: pass %s--tokens 1,2,3", strcmp(cmd, "run") ? "" : "-p TEXT or ");
    if (cli_model_path(cmd, &a->model)) return 1;
    return 0;
}

static int open_model(const char *cmd, const run_args *a, sl_model **m) {
    sl_error err = {0};
    sl_model_params mp = a->mp;
    cli_gpu_split(&mp);
    if (sl_model_open(a->model, &mp, m, &err)) return cli_fail(cmd, "%s", err.msg);
    cli_say_backend(cmd, *m, &mp);
    return 0;
}

int cmd_run(int argc, char **argv) {
    int tokens = 0;
    for (int i = 1; i < argc; i++) { /* text prompts: cmd_text.c */
        if (!strcmp(argv[i], "-p") || !strcmp(argv[i], "--prompt")) return cmd_run_text(argc, argv);
        tokens |= !strcmp(argv[i], "--tokens");
    }
    if (!tokens) return cmd_chat(argc, argv); /* no prompt: a conversation, as `ollama run NAME` */
    run_args a;
    int bad = parse("run", argc, argv, &a);
    if (bad) return bad;
    if (a.temp != 0) return cli_fail("run", "only greedy decoding (--temp 0) is available in this build");
    int32_t *toks = NULL;
    int n = cli_parse_tokens(a.tokens, &toks);
    if (n <= 0) return cli_fail("run", "--tokens must be a comma-separated list of token ids");
    sl_model *m = NULL;
    sl_session *s = NULL;
    float *logits = NULL;
    int rc = 1;
    if (open_model("run", &a, &m)) goto out;
    int V = sl_model_n_vocab(m);
    logits = malloc((size_t)V * sizeof(float));
    if (!logits || sl_session_new(m, 0, &s)) { cli_fail("run", "out of memory"); goto out; }
    double t0 = clk_now_s();
    if (sl_session_eval(s, toks, n, logits, 0)) { cli_fail("run", "%s", sl_session_errmsg(s)); goto out; }
    double t1 = clk_now_s();
    for (int i = 0; i < a.n_gen; i++) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (logits[v] > logits[best]) best = v;
        printf(i ? " %d" : "%d", best);
        fflush(stdout);
        if (i + 1 == a.n_gen) break;
        int32_t t = best;
        const int past = sl_session_n_past(s), keep = a.n_keep < past ? a.n_keep : past;
        if (a.ctx_shift && past == sl_session_n_ctx(s) && past - keep >= 2 &&
            sl_session_shift(s, keep, (past - keep) / 2)) { printf("\n"); cli_fail("run", "%s", sl_session_errmsg(s)); goto out; }
        if (sl_session_eval(s, &t, 1, logits, 0)) { printf("\n"); cli_fail("run", "%s", sl_session_errmsg(s)); goto out; }
    }
    printf("\n");
    fflush(stdout);
    double t2 = clk_now_s();
    if (a.stats) cli_print_stats(m, n, a.n_gen, t1 - t0, t2 - t1, NULL);
    rc = 0;
out:
    free(logits);
    free(toks);
    sl_session_free(s);
    if (cli_close_model("run", m, !rc)) rc = 1;
    return rc;
}

int cmd_logits(int argc, char **argv) {
    run_args a;
    int bad = parse("logits", argc, argv, &a);
    if (bad) return bad;
    if (!a.out) return cli_fail("logits", "no output: pass -o FILE");
    int32_t *toks = NULL;
    int n = cli_parse_tokens(a.tokens, &toks);
    if (n <= 0) return cli_fail("logits", "--tokens must be a comma-separated list of token ids");
    sl_model *m = NULL;
    sl_session *s = NULL;
    float *logits = NULL;
    int rc = 1, fd = -1;
    char *tmp = NULL;
    if (open_model("logits", &a, &m)) goto out;
    size_t V = (size_t)sl_model_n_vocab(m);
    logits = malloc((size_t)n * V * sizeof(float));
    if (!logits || sl_session_new(m, 0, &s)) { cli_fail("logits", "out of memory"); goto out; }
    if (sl_session_eval(s, toks, n, logits, 1)) { cli_fail("logits", "%s", sl_session_errmsg(s)); goto out; }
    /* little-endian float32 [n][V]; written to a temporary name, then renamed */
    size_t len = (size_t)n * V * sizeof(float);
    sl_error err = {0};
    sl_status st = fio_create_temp(a.out, &tmp, &fd, &err);
    if (!st) st = fio_pwrite_all(fd, logits, len, 0, tmp, &err);
    if (!st) {
        st = fio_commit(fd, len, tmp, a.out, &err);
        fd = -1; /* closed by fio_commit */
    }
    if (st) { cli_fail("logits", "%s", err.msg); goto out; }
    rc = 0;
out:
    if (fd >= 0) close(fd);
    if (rc && tmp) unlink(tmp); /* not renamed into place */
    free(tmp);
    free(logits);
    free(toks);
    sl_session_free(s);
    if (cli_close_model("logits", m, !rc)) rc = 1;
    return rc;
}
