/*
 * cmd_store.c — `sluice ls`, `sluice rm NAME` and `sluice show NAME`: the models of the store that
 * `sluice run ORG/NAME` fills (store.c has its layout and rules).
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/store.h"
#include "util/fileio.h"

/* "just now", "5 minutes ago", ... or the date. */
static void ago(time_t t, char *out, size_t n) {
    double s = difftime(time(NULL), t);
    if (s < 60) store_pathf(out, n, "just now");
    else if (s < 3600) store_pathf(out, n, "%d minute%s ago", (int)(s / 60), (int)(s / 60) == 1 ? "" : "s");
    else if (s < 86400) store_pathf(out, n, "%d hour%s ago", (int)(s / 3600), (int)(s / 3600) == 1 ? "" : "s");
    else if (s < 30 * 86400) store_pathf(out, n, "%d day%s ago", (int)(s / 86400), (int)(s / 86400) == 1 ? "" : "s");
    else strftime(out, n, "%Y-%m-%d", localtime(&t));
}

static int open_store(const char *cmd, char *root, size_t n) {
    if (store_root(root, n)) return cli_fail(cmd, "no model store: set SLUICE_HOME (or HOME)");
    return 0;
}

int cmd_ls(int argc, char **argv) {
    if (argc > 1) return cli_bad_option("ls", argc, argv, 1);
    char root[4096];
    if (open_store("ls", root, sizeof root)) return 1;
    store_entry *e;
    int n = store_scan_all(root, &e);
    if (n == 0) {
        fprintf(stderr, "sluice ls: no models in %s yet; 'sluice run ORG/NAME' downloads one\n", root);
        return 0;
    }
    int w = 4;
    for (int i = 0; i < n; i++) w = (int)strlen(e[i].repo) > w ? (int)strlen(e[i].repo) : w;
    printf("%-*s  %-8s  %10s  %s\n", w, "NAME", "QUANT", "SIZE", "LAST USED");
    for (int i = 0; i < n; i++) {
        char size[32], used[64];
        fmt_bytes(size, sizeof size, (double)e[i].bytes);
        ago(e[i].used, used, sizeof used);
        printf("%-*s  %-8s  %10s  %s\n", w, e[i].repo, e[i].tag, size, used);
    }
    free(e);
    return 0;
}

/* The models of the store that spec (ORG/NAME or ORG/NAME:TAG) names: *out malloc'ed, the count
 * returned; -1 (printed) when spec is not a name. */
static int find(const char *cmd, const char *root, const char *spec, store_entry **out) {
    store_ref r;
    char full[600], near[1024];
    struct stat sb;
    *out = NULL;
    if (stat(spec, &sb) == 0) /* a file (or folder) named as a model: say what takes files */
        return cli_fail(cmd, "%s is a path here, not a model of the store (%s)", spec,
                        !strcmp(cmd, "show") ? "'sluice info FILE' describes a container" : "the store holds what "
                        "'sluice run ORG/NAME' put there; 'sluice ls' lists it"), -1;
    if (store_parse(spec, &r)) {
        if (strchr(spec, '/') || !spec[0] || spec[0] == '.')
            return cli_fail(cmd, "'%s' is not a model name (ORG/NAME or ORG/NAME:QUANT; 'sluice ls' lists the store)",
                            spec), -1;
        if (store_resolve_word(cmd, root, spec, 0, full, sizeof full) || store_parse(full, &r)) return -1;
        spec = full; /* NAME alone, of one model of the store */
    }
    char dir[4400];
    store_model_dir(root, r.repo, dir, sizeof dir);
    int n = store_scan_dir(dir, r.repo, out), k = 0;
    for (int i = 0; i < n; i++)
        if (!r.tag[0] || !strcmp((*out)[i].tag, r.tag)) (*out)[k++] = (*out)[i];
    if (k == 0) {
        store_suggest(root, spec, near, sizeof near);
        cli_fail(cmd, "%s is not in the store (%s); %s%s", spec, root, near[0] ? "there: " : "'sluice ls' lists what is",
                 near);
    }
    return k;
}

/* Removes ROOT/models/ORG/NAME and ROOT/models/ORG when they hold nothing more. */
static void prune(const char *root, const char *repo) {
    char dir[4400];
    store_model_dir(root, repo, dir, sizeof dir);
    if (rmdir(dir) == 0) {
        char *slash = strrchr(dir, '/');
        *slash = 0;
        rmdir(dir);
    }
}

int cmd_rm(int argc, char **argv) {
    char root[4096];
    int rc = 0, names = 0;
    if (open_store("rm", root, sizeof root)) return 1;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-') return cli_bad_option("rm", argc, argv, i);
        names++;
        store_entry *e;
        int n = find("rm", root, argv[i], &e);
        if (n <= 0) rc = 1;
        for (int k = 0; k < n; k++) {
            char size[32];
            fmt_bytes(size, sizeof size, (double)e[k].bytes);
            if (unlink(e[k].meta) != 0 || unlink(e[k].path) != 0) {
                rc = cli_fail("rm", "%s: %s", e[k].path, strerror(errno));
                continue;
            }
            printf("removed %s:%s (%s)\n", e[k].repo, e[k].tag, size);
            prune(root, e[k].repo);
        }
        free(e);
    }
    if (!names) return cli_fail("rm", "usage: sluice rm ORG/NAME[:QUANT]... ('sluice ls' lists the store)");
    return rc;
}

/* The record's lines of show: where the model came from and how it was packed. */
static void print_record(const store_entry *e) {
    char *txt = NULL, used[64];
    size_t len;
    sl_error ignored;
    printf("name        %s:%s\n", e->repo, e->tag);
    if (fio_read_file(e->meta, &txt, &len, &ignored) == SL_OK) {
        cJSON *j = cJSON_Parse(txt);
        const char *k[] = {"endpoint", "commit", "format", "file", "packed", "pulled"};
        const char *v[6];
        for (int i = 0; i < 6; i++) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, k[i]);
            v[i] = cJSON_IsString(x) ? x->valuestring : "?";
        }
        printf("from        %s/%s at commit %.12s (%s%s%s), downloaded %s\n", v[0], e->repo, v[1], v[2],
               strcmp(v[3], "?") ? ": " : "", strcmp(v[3], "?") ? v[3] : "", v[5]);
        printf("packed      %s\n", v[4]);
        cJSON_Delete(j);
    }
    free(txt);
    ago(e->used, used, sizeof used);
    printf("last used   %s\n", used);
}

int cmd_show(int argc, char **argv) {
    char root[4096];
    int rc = 0, names = 0;
    if (open_store("show", root, sizeof root)) return 1;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-') return cli_bad_option("show", argc, argv, i);
        names++;
        store_entry *e;
        int n = find("show", root, argv[i], &e);
        if (n <= 0) rc = 1;
        for (int k = 0; k < n; k++) {
            if (names > 1 || k > 0) printf("\n");
            print_record(&e[k]);
            char *info_argv[] = {"info", e[k].path, NULL};
            rc |= cmd_info(2, info_argv);
        }
        free(e);
    }
    if (!names) return cli_fail("show", "usage: sluice show ORG/NAME[:QUANT]... ('sluice ls' lists the store)");
    return rc;
}
