/*
 * cmd_perplexity.c — `sluice perplexity`: perplexity and bits per byte of a text file, measured the way
 * llama.cpp's llama-perplexity does (the method, in words, is the command's --help in help.c).
 *
 * The file is tokenized once, as plain text. Window w is tokens [w*n, (w+1)*n) with n = --ctx (or all
 * tokens when the file is shorter), evaluated by one sl_session_eval from a reset session with every
 * row's logits: row j-1 predicts token j, and tokens n/2 .. n-1 are scored. The window's logits,
 * n * vocab floats, are the memory this command adds to the model's.
 *
 * Sections: arguments; scoring; the command.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

/* ---- arguments --------------------------------------------------------------------------------- */

typedef struct {
    const char *model, *file;
    int ctx, json;
    sl_model_params mp;
} ppl_args;

/* Returns 0, or the exit code after printing why. */
static int parse(int argc, char **argv, ppl_args *a) {
    memset(a, 0, sizeof *a);
    a->ctx = 512;
    a->mp = cli_model_params();
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        int more = i + 1 < argc, bad = 0;
        if (strcmp(s, "--ctx") && cli_model_opt(argc, argv, &i, &a->mp, "perplexity", &bad)) { /* --ctx: windows */
            if (bad) return 1;
        } else if ((!strcmp(s, "-m") || !strcmp(s, "--model")) && more) a->model = argv[++i];
        else if ((!strcmp(s, "-f") || !strcmp(s, "--file")) && more) a->file = argv[++i];
        else if (!strcmp(s, "--ctx") && more) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (end == argv[i] || *end || v < 2 || v > 1 << 24)
                return cli_fail("perplexity", "--ctx: '%s' is not a window length (a whole number, at least 2)", argv[i]);
            a->ctx = (int)v;
        } else if (!strcmp(s, "--json")) a->json = 1;
        else return cli_bad_option("perplexity", argc, argv, i);
    }
    if (!a->file) return cli_fail("perplexity", "no text: pass -f FILE (see 'sluice perplexity --help')");
    if (cli_model_path("perplexity", &a->model)) return 1;
    return 0;
}

/* Reads a whole file ("-": stdin) into a malloc'ed NUL-terminated buffer; NULL after printing why. */
static char *read_text(const char *path, size_t *len) {
    if (!strcmp(path, "-")) {
        char *b = cli_read_stdin(len);
        if (!b) cli_fail("perplexity", "reading stdin failed");
        return b;
    }
    FILE *f = fopen(path, "rb");
    if (!f) { cli_fail("perplexity", "%s: %s", path, strerror(errno)); return NULL; }
    size_t cap = 1 << 16, n = 0, k;
    char *b = malloc(cap);
    while (b && (k = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (n + 1 == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) { free(b); b = NULL; break; }
            b = nb;
        }
    }
    int failed = !b || ferror(f);
    fclose(f);
    if (failed) {
        cli_fail("perplexity", "%s: %s", path, b ? "read error" : "out of memory");
        free(b);
        return NULL;
    }
    b[n] = 0;
    *len = n;
    return b;
}

/* ---- scoring ----------------------------------------------------------------------------------- */

/* -log softmax(row)[target] in double: log(sum_v exp(row[v] - max)) + max - row[target].
 * row: [n_vocab] logits of the position before target. Cannot fail. */
static double token_nll(const float *row, int n_vocab, int32_t target) {
    double mx = row[0];
    for (int v = 1; v < n_vocab; v++)
        if (row[v] > mx) mx = row[v];
    double sum = 0;
    for (int v = 0; v < n_vocab; v++) sum += exp((double)row[v] - mx);
    return log(sum) + mx - (double)row[target];
}

/* Bytes of token id decoded on its own (what HF decode([id]) gives: a piece of a UTF-8 character is
 * U+FFFD, a special token its text), memoised in cache[id] (-1: not yet). Returns -1 after printing
 * the error. */
static long token_bytes(const sl_tokenizer *tok, int32_t id, long *cache) {
    if (cache[id] >= 0) return cache[id];
    char *text = NULL;
    size_t len = 0;
    sl_error err = {0};
    if (sl_detokenize(tok, &id, 1, 0, &text, &len, &err)) { cli_fail("perplexity", "%s", err.msg); return -1; }
    free(text);
    return cache[id] = (long)len;
}

typedef struct {
    double nll, seconds;
    long long bytes;
    int scored, windows, win, n_tokens;
} ppl_result;

/* Scores ids[0..n) as described at the top. Returns 0, or 1 after printing the error. */
static int score(sl_model *m, const sl_tokenizer *tok, const int32_t *ids, int n, int ctx, int progress, ppl_result *r) {
    int V = sl_model_n_vocab(m);
    memset(r, 0, sizeof *r);
    r->n_tokens = n;
    r->win = n >= ctx ? ctx : n;
    r->windows = n >= ctx ? n / ctx : 1;
    sl_session *s = NULL;
    float *logits = malloc((size_t)r->win * (size_t)V * sizeof(float)); /* [win][V] */
    long *bytes = malloc((size_t)V * sizeof *bytes);
    int rc = 1;
    if (!logits || !bytes || sl_session_new(m, r->win, &s)) {
        cli_fail("perplexity", "out of memory for a window of %d tokens of %d logits", r->win, V);
        goto out;
    }
    for (int v = 0; v < V; v++) bytes[v] = -1;
    double t0 = clk_now_s();
    for (int w = 0; w < r->windows; w++) {
        const int32_t *t = ids + (size_t)w * (size_t)r->win;
        sl_session_reset(s);
        if (sl_session_eval(s, t, r->win, logits, 1)) { cli_fail("perplexity", "%s", sl_session_errmsg(s)); goto out; }
        for (int j = r->win / 2; j < r->win; j++) {
            long b = token_bytes(tok, t[j], bytes);
            if (b < 0) goto out;
            r->nll += token_nll(logits + (size_t)(j - 1) * (size_t)V, V, t[j]);
            r->bytes += b;
            r->scored++;
        }
        if (progress) fprintf(stderr, "\rwindow %d of %d: perplexity so far %.4f ", w + 1, r->windows, exp(r->nll / r->scored));
    }
    if (progress) fputc('\n', stderr);
    r->seconds = clk_now_s() - t0;
    rc = 0;
out:
    sl_session_free(s);
    free(logits);
    free(bytes);
    return rc;
}

/* ---- the command ------------------------------------------------------------------------------- */

static void print_json(const ppl_args *a, const ppl_result *r, size_t file_bytes) {
    double ppl = exp(r->nll / r->scored), bpb = r->bytes > 0 ? r->nll / log(2.0) / (double)r->bytes : 0;
    double evaluated = (double)r->windows * r->win;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", a->model);
    cJSON_AddStringToObject(o, "file", a->file);
    cJSON_AddNumberToObject(o, "ppl", ppl);
    cJSON_AddNumberToObject(o, "bpb", bpb);
    cJSON_AddNumberToObject(o, "nll", r->nll);
    cJSON_AddNumberToObject(o, "tokens", r->scored);
    cJSON_AddNumberToObject(o, "bytes", (double)r->bytes);
    cJSON_AddNumberToObject(o, "windows", r->windows);
    cJSON_AddNumberToObject(o, "ctx", r->win);
    cJSON_AddNumberToObject(o, "file_tokens", r->n_tokens);
    cJSON_AddNumberToObject(o, "file_bytes", (double)file_bytes);
    cJSON_AddNumberToObject(o, "seconds", r->seconds);
    cJSON_AddNumberToObject(o, "tok_per_s", r->seconds > 0 ? evaluated / r->seconds : 0);
    char *txt = cJSON_Print(o);
    if (txt) printf("%s\n", txt);
    free(txt);
    cJSON_Delete(o);
}

int cmd_perplexity(int argc, char **argv) {
    ppl_args a;
    int rc = parse(argc, argv, &a);
    if (rc) return rc;
    sl_tokenizer *tok = NULL;
    sl_model *m = NULL;
    int32_t *ids = NULL;
    size_t len = 0;
    int n = 0;
    rc = 1;
    char *text = read_text(a.file, &len);
    if (!text) goto out;
    if (cli_load_tokenizer("perplexity", a.model, &tok)) goto out;
    sl_error err = {0};
    /* plain text: special-token text in the file is scored as the ordinary text it is */
    if (sl_tokenize(tok, text, len, SL_TOKENIZE_NO_SPECIAL, &ids, &n, &err)) { cli_fail("perplexity", "%s: %s", a.file, err.msg); goto out; }
    if (n < 2) { cli_fail("perplexity", "%s: %d token%s; perplexity needs at least 2", a.file, n, n == 1 ? "" : "s"); goto out; }
    if (sl_model_open(a.model, &a.mp, &m, &err)) { cli_fail("perplexity", "%s", err.msg); goto out; }
    if (sl_tokenizer_n_vocab(tok) > sl_model_n_vocab(m)) {
        cli_fail("perplexity", "the tokenizer has %d ids but the model only %d", sl_tokenizer_n_vocab(tok), sl_model_n_vocab(m));
        goto out;
    }
    if (a.ctx > sl_model_n_ctx(m)) {
        cli_fail("perplexity", "--ctx %d is longer than the model's context of %d positions", a.ctx, sl_model_n_ctx(m));
        goto out;
    }
    ppl_result r;
    if (score(m, tok, ids, n, a.ctx, !a.json && isatty(2), &r) || cli_write_routing("perplexity", m, cli_routing_file())) goto out;
    if (a.json) print_json(&a, &r, len);
    else
        printf("perplexity: %.4f over %d tokens (%d window%s of %d, second half scored); %.4f bits per byte; "
               "%.1f tok/s\n", exp(r.nll / r.scored), r.scored, r.windows, r.windows == 1 ? "" : "s", r.win,
               r.bytes > 0 ? r.nll / log(2.0) / (double)r.bytes : 0.0,
               r.seconds > 0 ? (double)r.windows * r.win / r.seconds : 0.0);
    rc = 0;
out:
    free(text);
    free(ids);
    sl_model_close(m);
    sl_tokenizer_free(tok);
    return rc;
}
