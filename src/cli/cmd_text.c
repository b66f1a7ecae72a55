/*
 * cmd_text.c — `sluice tokenize` (text -> ids, or ids -> text with --decode) and the text side of
 * `sluice run` (-p, --chat, sampling flags, stop strings; cmd_run.c hands over when they are used).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* Reads all of stdin into a malloc'ed buffer; NULL on error. */
char *cli_read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0, k;
    char *b = malloc(cap);
    if (!b) return NULL;
    while ((k = fread(b + n, 1, cap - n - 1, stdin)) > 0) {
        n += k;
        if (n + 1 == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) { free(b); return NULL; }
            b = nb;
        }
    }
    b[n] = 0;
    *len = n;
    return b;
}

int cli_load_tokenizer(const char *cmd, const char *path, sl_tokenizer **tok) {
    sl_error err = {0};
    if (sl_tokenizer_load(path, tok, &err)) return cli_fail(cmd, "%s", err.msg);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL;
    int decode = 0, no_special = 0, strict = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        int more = i + 1 < argc;
        if ((!strcmp(s, "-m") || !strcmp(s, "--model") || !strcmp(s, "--tokenizer")) && more) model = argv[++i];
        else if (!strcmp(s, "--decode")) decode = 1;
        else if (!strcmp(s, "--no-special")) no_special = 1;
        else if (!strcmp(s, "--strict-utf8")) strict = 1;
        else if (s[0] == '-' && s[1]) return cli_fail("tokenize", "unknown or incomplete option '%s'", s);
        else if (!text) text = s;
        else return cli_fail("tokenize", "one TEXT argument at most (quote it, or pipe it on stdin)");
    }
    if (!model) return cli_fail("tokenize", "no tokenizer: pass -m MODEL.sluice or --tokenizer tokenizer.json");
    sl_tokenizer *tok = NULL;
    if (cli_load_tokenizer("tokenize", model, &tok)) return 1;
    char *in = NULL, *out = NULL;
    int32_t *ids = NULL;
    size_t len = 0;
    int rc = 1, n = 0;
    if (text) len = strlen(text);
    else if (!(in = cli_read_stdin(&len))) { cli_fail("tokenize", "reading stdin failed"); goto done; }
    const char *src = text ? text : in;
    sl_error err = {0};
    if (decode) {
        if ((n = cli_parse_tokens(src, &ids)) < 0) {
            /* also accept the space-separated form this command prints */
            char *c = strdup(src);
            for (char *p = c; p && *p; p++)
                if (*p == ' ' || *p == '\n' || *p == '\t') *p = ',';
            size_t cl = c ? strlen(c) : 0;
            while (cl && c[cl - 1] == ',') c[--cl] = 0;
            n = c ? cli_parse_tokens(c, &ids) : -1;
            free(c);
            if (n < 0) { cli_fail("tokenize", "--decode needs token ids (space or comma separated)"); goto done; }
        }
        size_t ol;
        if (sl_detokenize(tok, ids, n, 0, &out, &ol, &err)) { cli_fail("tokenize", "%s", err.msg); goto done; }
        fwrite(out, 1, ol, stdout);
        putchar('\n');
    } else {
        int flags = (no_special ? SL_TOKENIZE_NO_SPECIAL : 0) | (strict ? SL_TOKENIZE_STRICT_UTF8 : 0);
        if (sl_tokenize(tok, src, len, flags, &ids, &n, &err)) { cli_fail("tokenize", "%s", err.msg); goto done; }
        for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    }
    rc = 0;
done:
    free(in);
    free(out);
    free(ids);
    sl_tokenizer_free(tok);
    return rc;
}
