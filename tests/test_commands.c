/*
 * test_commands.c — what every `sluice` subcommand promises (runs $SLUICE_BIN): --help and -h on
 * stdout with exit 0, an option's default in its help, one message for an unknown option, the default
 * model (SLUICE_MODEL, then the demo model beside the executable), and `perplexity`'s figures against
 * an independent computation from `logits`.
 */
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sluice.h"
#include "test.h"


static const char *sluice(void) {
    static char path[PATH_MAX];
    const char *b = getenv("SLUICE_BIN");
    if (!realpath(b ? b : "build/sluice", path)) snprintf(path, sizeof path, "%s", b ? b : "build/sluice");
    return path;
}

static const char *const commands[] = {"pull", "pack",   "info",    "verify", "run",   "chat",     "tokenize", "ls", "show", "rm",
                                       "perplexity", "logits", "profile", "bench", "serve", "synth", "completion", NULL};
static const char *const model_commands[] = {"run", "chat", "perplexity", "logits", "profile", "bench", "serve", NULL};

/* The tiny Qwen3-Next fixture packed with the tiny tokenizer (256 byte-level ids), once per run. */
static const char *tiny_model(void) {
    static char path[1024];
    if (path[0]) return path;
    char src[1024]; /* not test_path's: test_copy_dir turns its buffers over */
    snprintf(src, sizeof src, "%s/tiny-src", test_tmpdir());
    if (test_copy_dir("tests/data/qwen3_next", src) || test_copy_dir("tests/data/tiny_tokenizer", src)) return NULL;
    snprintf(path, sizeof path, "%s/tiny-tok.sluice", test_tmpdir());
    sl_error err = {0};
    if (sl_pack(src, path, NULL, &err)) {
        fprintf(stderr, "    pack: %s\n", err.msg);
        path[0] = 0;
        return NULL;
    }
    return path;
}

/* ---- help ----------------------------------------------------------------------------------------- */

/* Every option line of a help text that takes a value ("  -n, --max-tokens N   ...") says its default
 * or that it is required, somewhere in its text; returns the first that does not, or NULL. */
static char *option_without_default(const char *help) {
    static char bad[1024];
    for (const char *l = help; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
        if (strncmp(l, "  -", 3)) continue;
        /* the option's text runs on over the lines indented past the option column */
        const char *end = l;
        do end = strchr(end + 1, '\n'); while (end && !strncmp(end + 1, "      ", 6));
        size_t len = end ? (size_t)(end - l) : strlen(l);
        char block[1024];
        snprintf(block, sizeof block, "%.*s", (int)(len < sizeof block ? len : sizeof block - 1), l);
        /* flags are "-x" or "--xx" words separated by ", "; a word after them is the value */
        const char *p = block + 2;
        for (;;) {
            p += strcspn(p, " ,");
            if (*p == ',') { p += 2; continue; }
            break;
        }
        int valued = p[0] == ' ' && p[1] != ' ';
        if (valued && !strstr(block, "default") && !strstr(block, "required")) {
            snprintf(bad, sizeof bad, "%s", block);
            return bad;
        }
    }
    return NULL;
}

TEST(cmd_help_every_command) {
    char *o = NULL, *e = NULL;
    int rc = test_sh(0, &o, "%s --help", sluice());
    CHECKF(rc == 0 && !strncmp(o, "Usage: sluice COMMAND", 21) && strstr(o, "\nCommands:\n"), "rc %d: %s", rc, o);
    /* the list of commands is this test's list, no more and no less */
    int listed = 0;
    for (const char *l = strstr(o, "\nCommands:\n") + 11; !strncmp(l, "  ", 2); l = strchr(l, '\n') + 1) {
        char name[32];
        CHECK(sscanf(l, " %31s", name) == 1);
        int known = 0;
        for (int i = 0; commands[i]; i++) known |= !strcmp(commands[i], name);
        CHECKF(known && strlen(l) > 14 && l[14] != '\n', "'sluice --help' lists '%s' with no test or no summary", name);
        listed++;
    }
    int n_commands = 0;
    while (commands[n_commands]) n_commands++;
    CHECKF(listed == n_commands, "'sluice --help' lists %d commands, not the %d of this test", listed, n_commands);
    free(o);
    rc = test_sh(0, &o, "%s --version", sluice());
    CHECKF(rc == 0 && !strcmp(o, "sluice " SL_VERSION_STRING "\n"), "rc %d: %s", rc, o);
    free(o);
    for (int i = 0; commands[i]; i++) {
        const char *c = commands[i];
        rc = test_sh(0, &o, "%s %s --help 2>/dev/null", sluice(), c);
        char want[64];
        snprintf(want, sizeof want, "Usage: sluice %s ", c);
        char example[64];
        snprintf(example, sizeof example, "\nExample:\n  sluice %s", c);
        const char *ex = strstr(o, example);
        ex = ex && (ex[strlen(example)] == ' ' || ex[strlen(example)] == '\n') ? ex : NULL; /* ls: no argument */
        CHECKF(rc == 0 && !strncmp(o, want, strlen(want)) && strstr(o, "\nOptions:\n") && ex &&
                   strstr(o, "  -h, --help"),
               "sluice %s --help: rc %d: %s", c, rc, o);
        const char *nd = option_without_default(o);
        CHECKF(!nd, "sluice %s --help: an option without its default:\n%s", c, nd);
        for (const char *l = o; *l; l = strchr(l, '\n') + 1) CHECKF(strcspn(l, "\n") <= 80 || !strncmp(l, "  sluice ", 9), "sluice %s --help: a line longer than 80 columns: %.*s", c, (int)strcspn(l, "\n"), l);
        /* nothing on stderr; -h and 'sluice help CMD' say the same; --help wins wherever it is */
        rc = test_sh(0, &e, "%s %s --help 2>&1 >/dev/null", sluice(), c);
        CHECKF(rc == 0 && !*e, "sluice %s --help wrote to stderr: %s", c, e);
        free(e);
        rc = test_sh(0, &e, "%s %s -h", sluice(), c);
        CHECKF(rc == 0 && !strcmp(o, e), "sluice %s -h differs from --help", c);
        free(e);
        rc = test_sh(0, &e, "%s help %s", sluice(), c);
        CHECKF(rc == 0 && !strcmp(o, e), "sluice help %s differs from --help", c);
        free(e);
        rc = test_sh(0, &e, "%s %s --frob --help", sluice(), c);
        CHECKF(rc == 0 && !strcmp(o, e), "sluice %s --frob --help: rc %d", c, rc);
        free(e);
        free(o);
    }
    /* the commands that open a model list the shared model options and say where the default model is */
    for (int i = 0; model_commands[i]; i++) {
        rc = test_sh(0, &o, "%s %s --help", sluice(), model_commands[i]);
        CHECKF(rc == 0 && strstr(o, "\nModel options:\n") && strstr(o, "  --cache SIZE") && strstr(o, "  --threads N") &&
                   strstr(o, "  --prefetch MODE") && strstr(o, "  --no-verify") && strstr(o, "\nDefault model:\n") &&
                   strstr(o, "SLUICE_MODEL") && strstr(o, "share/sluice/demo.sluice"),
               "sluice %s --help: %s", model_commands[i], o);
        free(o);
    }
    /* perplexity's help states the method */
    rc = test_sh(0, &o, "%s perplexity --help", sluice());
    CHECKF(rc == 0 && strstr(o, "second half") && strstr(o, "default: 512") && strstr(o, "bits per byte"), "%s", o);
    free(o);
}

TEST(cmd_unknown_option) {
    char *o = NULL;
    for (int i = 0; commands[i]; i++) {
        const char *c = commands[i];
        int rc = test_sh(0, &o, "%s %s --frob 2>&1", sluice(), c);
        char want[160];
        snprintf(want, sizeof want, "sluice %s: unknown option '--frob' (see 'sluice %s --help')\n", c, c);
        CHECKF(rc == 2 && !strcmp(o, want), "sluice %s --frob: rc %d: '%s'", c, rc, o);
        free(o);
    }
    /* after other arguments too, and on the text path of run */
    int rc = test_sh(0, &o, "%s run -p hello --frob 2>&1", sluice());
    CHECKF(rc == 2 && strstr(o, "unknown option '--frob'"), "rc %d: %s", rc, o);
    free(o);
    /* an option of the command without its value: named as such */
    static const char *const missing[][2] = {{"run", "--tokens"}, {"run", "-p x --temp"}, {"perplexity", "-f"},
                                             {"bench", "--cache"}, {"pack", "dir -o"}, {"chat", "--seed"}};
    for (int i = 0; i < 6; i++) {
        rc = test_sh(0, &o, "%s %s %s 2>&1", sluice(), missing[i][0], missing[i][1]);
        CHECKF(rc == 2 && strstr(o, "needs a value") && strstr(o, "--help"), "sluice %s %s: rc %d: %s", missing[i][0],
               missing[i][1], rc, o);
        free(o);
    }
    rc = test_sh(0, &o, "%s nonesuch 2>&1", sluice());
    CHECKF(rc == 2 && strstr(o, "unknown command 'nonesuch'") && strstr(o, "sluice --help"), "rc %d: %s", rc, o);
    free(o);
}

/* ---- the default model ---------------------------------------------------------------------------- */

TEST(cmd_default_model_from_environment) {
    const char *m = tiny_model();
    CHECK(m);
    char *want = NULL, *o = NULL;
    int rc = test_sh(0, &want, "%s run -m %s --tokens 1,2,3 -n 4 --ids 2>&1", sluice(), m);
    CHECKF(rc == 0 && strlen(want) > 4, "rc %d: %s", rc, want);
    rc = test_sh(0, &o, "SLUICE_MODEL=%s %s run --tokens 1,2,3 -n 4 --ids 2>&1", m, sluice());
    CHECKF(rc == 0 && !strcmp(o, want), "rc %d: '%s', want '%s'", rc, o, want);
    free(o);
    /* -m comes first: SLUICE_MODEL is not even looked at */
    rc = test_sh(0, &o, "SLUICE_MODEL=/nonexistent/x.sluice %s run -m %s --tokens 1,2,3 -n 4 --ids 2>&1", sluice(), m);
    CHECKF(rc == 0 && !strcmp(o, want), "rc %d: %s", rc, o);
    free(o);
    free(want);
    /* every command that opens a model for inference takes it */
    const char *txt = test_path("%s/default-model.txt", test_tmpdir());
    CHECK(test_write(txt, "In the beginning was the word.", 30) == 0);
    const char *lf = test_path("%s/default-model.f32", test_tmpdir()), *prof = test_path("%s/default.profile", test_tmpdir());
    const char *cmds[] = {"run -p 'the' -n 3 --temp 0", "perplexity --ctx 16 -f", "logits --tokens 1,2 --out",
                          "profile --tokens 1,2 -o", "bench --prompt 4 --gen 2", "chat -n 3 --temp 0 < /dev/null"};
    const char *args[] = {"", txt, lf, prof, "", ""};
    for (int i = 0; i < 6; i++) {
        rc = test_sh(0, &o, "SLUICE_MODEL=%s %s %s %s 2>&1", m, sluice(), cmds[i], args[i]);
        CHECKF(rc == 0, "SLUICE_MODEL=... sluice %s: rc %d: %s", cmds[i], rc, o);
        free(o);
    }
    /* a SLUICE_MODEL naming nothing is an error, not a fall back to the demo model */
    rc = test_sh(0, &o, "SLUICE_MODEL=%s/nonesuch.sluice %s run --tokens 1 2>&1", test_tmpdir(), sluice());
    CHECKF(rc == 1 && strstr(o, "SLUICE_MODEL=") && strstr(o, "nonesuch.sluice") && strstr(o, "-m MODEL"), "rc %d: %s", rc, o);
    free(o);
}

TEST(cmd_default_model_beside_the_executable) {
    const char *m = tiny_model();
    CHECK(m);
    /* a copy of the binary at TREE/build/sluice: the source tree's layout, and an install's
     * (PREFIX/bin/sluice with PREFIX/share/sluice/demo.sluice) */
    char tree[PATH_MAX];
    CHECK(realpath(test_tmpdir(), tree));
    strncat(tree, "/tree", sizeof tree - strlen(tree) - 1);
    char *o = NULL;
    int rc = test_sh(0, &o, "mkdir -p %s/build %s/models %s/share/sluice && cp %s %s/build/sluice 2>&1", tree, tree, tree, sluice(), tree);
    CHECKF(rc == 0, "%s", o);
    free(o);
    rc = test_sh(0, &o, "env -u SLUICE_MODEL %s/build/sluice run --tokens 1,2,3 -n 4 --ids 2>&1", tree);
    CHECKF(rc == 1 && strstr(o, "pass -m MODEL.sluice") && strstr(o, test_path("%s/models/demo.sluice", tree)) &&
               strstr(o, test_path("%s/share/sluice/demo.sluice", tree)) && strstr(o, "SLUICE_MODEL") &&
               strchr(o, '\n') == o + strlen(o) - 1,
           "rc %d: %s", rc, o);
    free(o);
    char *want = NULL;
    rc = test_sh(0, &want, "%s run -m %s --tokens 1,2,3 -n 4 --ids 2>&1", sluice(), m);
    CHECK(rc == 0);
    /* installed: PREFIX/share/sluice/demo.sluice */
    CHECK(test_copy_file(m, test_path("%s/share/sluice/demo.sluice", tree)) == 0);
    rc = test_sh(0, &o, "env -u SLUICE_MODEL %s/build/sluice run --tokens 1,2,3 -n 4 --ids 2>&1", tree);
    CHECKF(rc == 0 && !strcmp(o, want), "rc %d: %s", rc, o);
    free(o);
    /* the source tree's models/demo.sluice comes first: with it unreadable as a model, the run fails on it */
    CHECK(test_copy_file("README.md", test_path("%s/models/demo.sluice", tree)) == 0);
    rc = test_sh(0, &o, "env -u SLUICE_MODEL %s/build/sluice run --tokens 1,2,3 -n 4 --ids 2>&1", tree);
    CHECKF(rc == 1 && strstr(o, "models/demo.sluice"), "rc %d: %s", rc, o);
    free(o);
    CHECK(test_copy_file(m, test_path("%s/models/demo.sluice", tree)) == 0);
    CHECK(test_copy_file("README.md", test_path("%s/share/sluice/demo.sluice", tree)) == 0);
    rc = test_sh(0, &o, "env -u SLUICE_MODEL %s/build/sluice run --tokens 1,2,3 -n 4 --ids 2>&1", tree);
    CHECKF(rc == 0 && !strcmp(o, want), "rc %d: %s", rc, o);
    free(o);
    free(want);
}

/* ---- perplexity ----------------------------------------------------------------------------------- */

/* The reference: NLL of tokens ids[n/2 .. n-1] from the logits `sluice logits` writes for ids[0..n),
 * log-softmax in double, and the bytes of those tokens decoded one by one. Returns 0 or -1. */
static int reference_window(const char *model, const sl_tokenizer *tok, const int32_t *ids, int n, double *nll,
                            long long *bytes) {
    char *list = malloc((size_t)n * 12 + 1), *o = NULL;
    size_t at = 0;
    for (int i = 0; i < n; i++) at += (size_t)sprintf(list + at, i ? ",%d" : "%d", ids[i]);
    const char *lf = test_path("%s/ppl-window.f32", test_tmpdir());
    int rc = test_sh(0, &o, "%s logits -m %s --tokens %s --out %s 2>&1", sluice(), model, list, lf);
    free(list);
    if (rc) fprintf(stderr, "    logits: %s\n", o);
    free(o);
    size_t len = 0;
    float *lg = rc ? NULL : (float *)test_read(lf, &len);
    if (!lg || len != (size_t)n * 256 * sizeof(float)) { free(lg); return -1; }
    for (int j = n / 2; j < n; j++) {
        const float *row = lg + (size_t)(j - 1) * 256;
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < 256; v++) mx = row[v] > mx ? row[v] : mx;
        for (int v = 0; v < 256; v++) sum += exp((double)row[v] - mx);
        *nll += mx + log(sum) - (double)row[ids[j]];
        char *text = NULL;
        size_t tl = 0;
        sl_error err = {0};
        if (sl_detokenize(tok, &ids[j], 1, 0, &text, &tl, &err)) { free(lg); return -1; }
        *bytes += (long long)tl;
        free(text);
    }
    free(lg);
    return 0;
}

static double num(const cJSON *j, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(j, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static int rel_close(double a, double b, double tol) { return fabs(a - b) <= tol * fabs(b); }

TEST(cmd_perplexity_matches_logits) {
    const char *m = tiny_model();
    CHECK(m);
    /* English, a special token's text (plain text here), two- and three-byte characters */
    const char *text =
        "In the beginning God created the heaven and the earth. And the earth was without form, and void; "
        "and darkness was upon the face of the deep.<|im_end|> Caf\xc3\xa9 cr\xc3\xa8me, \xe6\x97\xa5\xe6\x9c\xac "
        "\xe8\xaa\x9e. And the Spirit of God moved upon the face of the waters. And God said, Let there be light.";
    const char *f = test_path("%s/ppl.txt", test_tmpdir());
    CHECK(test_write(f, text, strlen(text)) == 0);
    sl_tokenizer *tok = NULL;
    sl_error err = {0};
    CHECKF(sl_tokenizer_load(m, &tok, &err) == 0, "%s", err.msg);
    int32_t *ids = NULL;
    int n = 0;
    CHECK(sl_tokenize(tok, text, strlen(text), SL_TOKENIZE_NO_SPECIAL, &ids, &n, &err) == 0);
    const int ctx = 64;
    int nw = n / ctx;
    double nll = 0;
    long long bytes = 0;
    int ok = nw >= 3 && n % ctx != 0; /* a partial window to drop */
    for (int w = 0; ok && w < nw; w++) ok = reference_window(m, tok, ids + w * ctx, ctx, &nll, &bytes) == 0;
    char *o = NULL;
    int rc = test_sh(0, &o, "%s perplexity -m %s -f %s --ctx %d --json 2>&1", sluice(), m, f, ctx);
    cJSON *j = cJSON_Parse(o);
    int scored = nw * (ctx - ctx / 2);
    double ppl = exp(nll / scored), bpb = nll / log(2.0) / (double)bytes;
    ok = ok && rc == 0 && j && rel_close(num(j, "ppl"), ppl, 1e-6) && rel_close(num(j, "bpb"), bpb, 1e-6) &&
         rel_close(num(j, "nll"), nll, 1e-6) && num(j, "tokens") == scored && num(j, "bytes") == (double)bytes &&
         num(j, "windows") == nw && num(j, "ctx") == ctx && num(j, "file_tokens") == n && num(j, "seconds") > 0 &&
         num(j, "tok_per_s") > 0;
    CHECKF(ok, "rc %d, %d tokens: want ppl %.17g bpb %.17g over %d tokens, %lld bytes; got %s", rc, n, ppl, bpb, scored,
           bytes, o);
    cJSON_Delete(j);
    free(o);
    /* a file shorter than --ctx is one window of all its tokens */
    nll = 0;
    bytes = 0;
    CHECK(reference_window(m, tok, ids, n, &nll, &bytes) == 0);
    rc = test_sh(0, &o, "%s perplexity -m %s -f %s --json 2>&1", sluice(), m, f);
    j = cJSON_Parse(o);
    ok = rc == 0 && j && rel_close(num(j, "ppl"), exp(nll / (n - n / 2)), 1e-6) && num(j, "windows") == 1 &&
         num(j, "ctx") == n && num(j, "tokens") == n - n / 2 && num(j, "bytes") == (double)bytes;
    CHECKF(ok, "rc %d: want ppl %.17g; got %s", rc, exp(nll / (n - n / 2)), o);
    cJSON_Delete(j);
    free(o);
    /* the line for people, from stdin, with model options */
    rc = test_sh(0, &o, "%s perplexity -m %s -f - --ctx %d --cache 100K --threads 1 < %s 2>&1", sluice(), m, ctx, f);
    char want[128];
    snprintf(want, sizeof want, " over %d tokens (%d windows of %d, second half scored); ", scored, nw, ctx);
    CHECKF(rc == 0 && !strncmp(o, "perplexity: ", 12) && strstr(o, want) && strstr(o, " bits per byte; ") &&
               strstr(o, " tok/s\n"),
           "rc %d: %s", rc, o);
    free(o);
    free(ids);
    sl_tokenizer_free(tok);
}

TEST(cmd_perplexity_errors) {
    const char *m = tiny_model();
    CHECK(m);
    char *o = NULL;
    int rc = test_sh(0, &o, "%s perplexity -m %s -f %s/no-such.txt 2>&1", sluice(), m, test_tmpdir());
    CHECKF(rc == 1 && strstr(o, "no-such.txt: No such file or directory") && strchr(o, '\n') == o + strlen(o) - 1,
           "rc %d: %s", rc, o);
    free(o);
    const char *f = test_path("%s/one-token.txt", test_tmpdir());
    CHECK(test_write(f, "a", 1) == 0);
    rc = test_sh(0, &o, "%s perplexity -m %s -f %s 2>&1", sluice(), m, f);
    CHECKF(rc == 1 && strstr(o, "1 token") && strstr(o, "at least 2"), "rc %d: %s", rc, o);
    free(o);
    rc = test_sh(0, &o, "%s perplexity -m %s -f %s --ctx 1 2>&1", sluice(), m, f);
    CHECKF(rc == 1 && strstr(o, "--ctx"), "rc %d: %s", rc, o);
    free(o);
    rc = test_sh(0, &o, "%s perplexity -m %s -f README.md --ctx 100000 2>&1", sluice(), m);
    CHECKF(rc == 1 && strstr(o, "longer than the model's context of 4096"), "rc %d: %s", rc, o);
    free(o);
    rc = test_sh(0, &o, "%s perplexity -m %s 2>&1", sluice(), m);
    CHECKF(rc == 1 && strstr(o, "-f FILE"), "rc %d: %s", rc, o);
    free(o);
    /* a container without a tokenizer */
    rc = test_sh(0, &o, "%s perplexity -m %s -f README.md 2>&1", sluice(), test_packed("qwen3_next"));
    CHECKF(rc == 1 && strstr(o, "tokenizer"), "rc %d: %s", rc, o);
    free(o);
}

/* ---- the man page --------------------------------------------------------------------------------- */

TEST(cmd_man_page) {
    char *o = NULL;
    if (test_sh(0, &o, "command -v help2man >/dev/null 2>&1")) {
        free(o);
        printf("     (help2man is not installed: tools/gen_man.sh not run)\n");
        return;
    }
    free(o);
    const char *man = test_path("%s/sluice.1", test_tmpdir());
    int rc = test_sh(0, &o, "tools/gen_man.sh %s %s 2>&1", man, sluice());
    CHECKF(rc == 0, "rc %d: %s", rc, o);
    free(o);
    char *page = test_read(man, NULL);
    CHECK(page);
    int ok = strstr(page, ".TH SLUICE \"1\"") && strstr(page, "sluice " SL_VERSION_STRING) && strstr(page, ".SS \"Commands:\"") &&
             strstr(page, ".SH EXAMPLES");
    for (int i = 0; ok && commands[i]; i++) {
        char sec[64];
        snprintf(sec, sizeof sec, ".SH \"SLUICE %s\"", commands[i]);
        for (char *p = sec + 12; *p; p++) *p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
        ok = strstr(page, sec) != NULL;
        CHECKF(ok, "no section %s in the man page", sec);
    }
    free(page);
    CHECK(ok);
    /* it renders without warnings */
    rc = test_sh(0, &o, "man --warnings -E UTF-8 -l %s 2>&1 >/dev/null", man);
    CHECKF(rc == 0 && !*o, "rc %d: %s", rc, o);
    free(o);
}

/* make install installs sluice and nothing else: no apt-get (a fake one on PATH records any call), the docs
 * the help texts and the man page name under PREFIX/share/doc/sluice, and the man page saying where they
 * are (issue 30: it ran apt on its own, and pointed at docs it did not install). */
TEST(cmd_make_install_runs_no_apt) {
    char *o = NULL, build[PATH_MAX];
    snprintf(build, sizeof build, "%s", sluice());
    *strrchr(build, '/') = 0; /* the build folder of the binary under test: already built */
    const char *fake = test_path("%s/fakebin", test_tmpdir()), *prefix = test_path("%s/prefix", test_tmpdir());
    const char *calls = test_path("%s/apt-calls", test_tmpdir());
    int rc = test_sh(1, &o, "mkdir -p %s && for t in apt-get apt sudo; do printf '#!/bin/sh\\necho \"$0 $*\" >>%s\\nexit 1\\n' "
                     "> %s/$t && chmod +x %s/$t; done", fake, calls, fake, fake);
    CHECKF(rc == 0, "%s", o);
    free(o);
    rc = test_sh(1, &o, "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL PATH=%s:$PATH make -s install BUILD=%s PREFIX=%s 2>&1", fake,
                 build, prefix);
    CHECKF(rc == 0, "make install: rc %d: %s", rc, o);
    free(o);
    CHECKF(access(calls, F_OK) != 0, "make install called apt: %s", test_read(calls, NULL));
    CHECK(access(test_path("%s/bin/sluice", prefix), X_OK) == 0);
    CHECK(access(test_path("%s/share/sluice/demo.sluice", prefix), R_OK) == 0);
    CHECK(access(test_path("%s/share/doc/sluice/PULL.md", prefix), R_OK) == 0);
    CHECK(access(test_path("%s/share/doc/sluice/SERVER.md", prefix), R_OK) == 0);
    char *comp = test_read(test_path("%s/share/bash-completion/completions/sluice", prefix), NULL);
    CHECKF(comp && strstr(comp, "complete -o filenames -F _sluice sluice"), "%s", comp ? comp : "(no completion file)");
    free(comp);
    if (test_sh(0, &o, "command -v help2man >/dev/null 2>&1") == 0) {
        char *page = test_read(test_path("%s/share/man/man1/sluice.1", prefix), NULL);
        CHECKF(page && strstr(page, ".SH \"SEE ALSO\"") && strstr(page, "share/doc/sluice") && strstr(page, "PULL.md"),
               "man page: %.300s", page ? page : "(none)");
        free(page);
    }
    free(o);
}
