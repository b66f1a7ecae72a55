/*
 * store.c — the model store: `sluice run|chat|serve ORG/NAME[:TAG]` (or -m ORG/NAME[:TAG]) finds the
 * model in the store, or downloads it from the Hugging Face Hub (sl_pull, with its resume and checks),
 * packs it there and opens it; `sluice ls`, `rm` and `show` (cmd_store.c) read the same folders.
 *
 * Layout, under ROOT = $SLUICE_HOME, else $XDG_CACHE_HOME/sluice, else ~/.cache/sluice:
 *   ROOT/models/ORG/NAME/TAG.sluice  the container, written by sl_pack (a temporary renamed when whole)
 *   ROOT/models/ORG/NAME/TAG.json    where it came from (repo, revision, commit, endpoint, format, files,
 *                                    pack modes, time); written after the container, temp + rename; its
 *                                    modification time is when the model was last used
 *   ROOT/downloads/ORG--NAME/        what sl_pull fetched (pull -o); a partial download stays for the next
 *                                    try to resume; removed once the container is packed
 * A model counts as present when both its .sluice and its .json are there, so a pack cut short (its
 * temporary) or a container without its record is packed again, never opened half made.
 *
 * TAG: for a repository of safetensors, the pack mode: keep, f32, bf16, q8 (every matrix in that mode),
 * q4 or q3 (the routed experts in that mode, the rest q8: docs/QUANT.md's "q4 experts, q8 rest" row,
 * within 0.02% of f32's perplexity on the demo model, where q4 everywhere loses 1.6%). The default is keep
 * for a checkpoint that is quantized already (MXFP4, MLX), else q4. For a repository of GGUF files, the
 * quantization in the file names (Q4_K_M, Q8_0, ...; any case), default Q4_K_M, else Q4_0, else Q8_0,
 * else the only one there is; the file is packed as it is (sluice pack FILE.gguf).
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/store.h"
#include "util/fileio.h"

/* ---- names and paths --------------------------------------------------------------------------- */

static const char *const pack_tags[] = {"keep", "f32", "bf16", "q8", "q4", "q3", NULL};

static int is_pack_tag(const char *t) {
    for (int i = 0; pack_tags[i]; i++)
        if (!strcasecmp(t, pack_tags[i])) return 1;
    return 0;
}

static int name_char(char c) { return isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.'; }

int store_parse(const char *spec, store_ref *r) {
    memset(r, 0, sizeof *r);
    const char *slash = strchr(spec, '/'), *colon = strchr(spec, ':');
    size_t rl = colon ? (size_t)(colon - spec) : strlen(spec);
    if (!slash || slash > spec + rl || rl >= sizeof r->repo || spec[0] == '.' || spec[0] == '-') return -1;
    for (size_t i = 0; i < rl; i++)
        if (!name_char(spec[i]) && spec + i != slash) return -1;
    if (slash == spec || slash + 1 == spec + rl || slash[1] == '.' || strstr(spec, "..")) return -1;
    memcpy(r->repo, spec, rl);
    if (colon) {
        const char *t = colon + 1;
        if (!*t || strlen(t) >= sizeof r->tag) return -1;
        for (const char *q = t; *q; q++)
            if (!name_char(*q)) return -1;
        for (size_t i = 0; t[i]; i++) /* pack modes in lower case, GGUF quantizations in upper case */
            r->tag[i] = (char)(is_pack_tag(t) ? tolower((unsigned char)t[i]) : toupper((unsigned char)t[i]));
    }
    return 0;
}

int store_is_name(const char *spec) {
    store_ref r;
    struct stat sb;
    size_t n = strlen(spec);
    if (stat(spec, &sb) == 0 || store_parse(spec, &r)) return 0; /* a file that is there stays a file */
    return !(n > 7 && !strcmp(spec + n - 7, ".sluice")) && !(n > 5 && !strcmp(spec + n - 5, ".gguf"));
}

int store_root(char *out, size_t n) {
    const char *h = getenv("SLUICE_HOME"), *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (h && *h) return store_pathf(out, n, "%s", h);
    if (x && *x) return store_pathf(out, n, "%s/sluice", x);
    if (home && *home) return store_pathf(out, n, "%s/.cache/sluice", home);
    return -1;
}

void store_model_dir(const char *root, const char *repo, char *out, size_t n) {
    store_pathf(out, n, "%s/models/%s", root, repo);
}

int store_pathf(char *out, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(out, n, fmt, ap);
    va_end(ap);
    if (k >= 0 && (size_t)k < n) return 0;
    out[0] = 0;
    return -1;
}

/* mkdir -p path. 0, or -1 with errno. */
static int mkdir_p(const char *path) {
    char p[4200];
    snprintf(p, sizeof p, "%s", path);
    for (char *q = p + 1;; q++) {
        if (*q != '/' && *q) continue;
        char c = *q;
        *q = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
        *q = c;
        if (!c) return 0;
    }
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

int store_remove_tree(const char *path) { return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

void store_touch(const char *meta) { utimensat(AT_FDCWD, meta, NULL, 0); }

static int is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The present model of r in dir with the latest use when r has no tag: its tag into r->tag. 0, or -1. */
static int latest_tag(const char *dir, store_ref *r) {
    store_entry *e = NULL;
    int n = store_scan_dir(dir, r->repo, &e), best = -1;
    for (int i = 0; i < n; i++)
        if (best < 0 || e[i].used > e[best].used) best = i;
    if (best >= 0) store_pathf(r->tag, sizeof r->tag, "%s", e[best].tag);
    free(e);
    return best >= 0 ? 0 : -1;
}

int store_scan_dir(const char *dir, const char *repo, store_entry **out) {
    *out = NULL;
    int n = 0, cap = 0;
    struct dirent **names = NULL;
    int k = scandir(dir, &names, NULL, alphasort);
    for (int i = 0; i < k; i++) {
        const char *f = names[i]->d_name;
        size_t fl = strlen(f);
        char sl[4600], js[4600];
        struct stat sb, mb;
        if (fl > 7 && !strcmp(f + fl - 7, ".sluice") && fl - 7 < sizeof((store_entry *)0)->tag) {
            store_pathf(sl, sizeof sl, "%s/%s", dir, f);
            store_pathf(js, sizeof js, "%s/%.*s.json", dir, (int)(fl - 7), f);
            if (stat(sl, &sb) == 0 && S_ISREG(sb.st_mode) && stat(js, &mb) == 0) {
                if (n == cap) {
                    store_entry *ne = realloc(*out, (size_t)(cap = cap ? cap * 2 : 4) * sizeof *ne);
                    if (!ne) break;
                    *out = ne;
                }
                store_entry *e = &(*out)[n++];
                memset(e, 0, sizeof *e);
                store_pathf(e->repo, sizeof e->repo, "%s", repo);
                store_pathf(e->tag, sizeof e->tag, "%.*s", (int)(fl - 7), f);
                store_pathf(e->path, sizeof e->path, "%s", sl);
                store_pathf(e->meta, sizeof e->meta, "%s", js);
                e->bytes = (uint64_t)sb.st_size;
                e->used = mb.st_mtime;
            }
        }
        free(names[i]);
    }
    free(names);
    return n;
}

int store_scan_all(const char *root, store_entry **out) {
    *out = NULL;
    char models[4200];
    store_pathf(models, sizeof models, "%s/models", root);
    struct dirent **orgs = NULL;
    int n = 0, no = scandir(models, &orgs, NULL, alphasort);
    for (int i = 0; i < no; i++) {
        char od[4400];
        store_pathf(od, sizeof od, "%s/%s", models, orgs[i]->d_name);
        struct dirent **reps = NULL;
        int nr = orgs[i]->d_name[0] == '.' ? 0 : scandir(od, &reps, NULL, alphasort);
        for (int k = 0; k < nr; k++) {
            char repo[600], dir[4600];
            store_pathf(repo, sizeof repo, "%s/%s", orgs[i]->d_name, reps[k]->d_name);
            store_pathf(dir, sizeof dir, "%s/%s", od, reps[k]->d_name);
            store_entry *e = NULL;
            int m = reps[k]->d_name[0] == '.' ? 0 : store_scan_dir(dir, repo, &e);
            store_entry *all = m ? realloc(*out, (size_t)(n + m) * sizeof *all) : *out;
            if (all && m) { /* m == 0: e is NULL, nothing to copy (memcpy from NULL is undefined even for 0 bytes) */
                memcpy(all + n, e, (size_t)m * sizeof *e);
                *out = all;
                n += m;
            }
            free(e);
            free(reps[k]);
        }
        free(reps);
        free(orgs[i]);
    }
    free(orgs);
    return n;
}

/* ---- names without their ORG, and names that are not there ----------------------------------------- */

/* The NAME of ORG/NAME. */
static const char *name_part(const char *repo) {
    const char *s = strrchr(repo, '/');
    return s ? s + 1 : repo;
}

int store_short_name(const char *root, const char *spec, char *full, size_t n) {
    char name[256], tag[64] = "";
    const char *colon = strchr(spec, ':');
    store_pathf(name, sizeof name, "%.*s", colon ? (int)(colon - spec) : (int)strlen(spec), spec);
    if (colon) store_pathf(tag, sizeof tag, "%s", colon + 1);
    store_entry *e;
    int n_all = store_scan_all(root, &e), k = 0;
    const char *hit = NULL;
    for (int i = 0; i < n_all; i++) {
        if (strcasecmp(name_part(e[i].repo), name)) continue;
        if (!hit || strcmp(hit, e[i].repo)) k++; /* sorted by name: one repository's tags are together */
        hit = e[i].repo;
        store_pathf(full, n, "%s%s%s", e[i].repo, tag[0] ? ":" : "", tag); /* a tag not there yet: fetched */
    }
    free(e);
    return k;
}

int store_resolve_word(const char *cmd, const char *root, const char *word, int files, char *full, size_t n) {
    int k = store_short_name(root, word, full, n);
    if (k == 1) return 0;
    char near[1024];
    store_suggest(root, word, near, sizeof near);
    if (k > 1) return cli_fail(cmd, "%s names models of %d organisations in the store (%s): give ORG/NAME", word, k, near);
    return cli_fail(cmd, "%s: %sno model of the store is called so; a model is named ORG/NAME[:QUANT] (e.g. "
                    "Qwen/Qwen3-30B-A3B)%s%s", word, files ? "no such file, and " : "",
                    near[0] ? "; in the store: " : "; 'sluice ls' lists the store", near);
}

void store_suggest(const char *root, const char *spec, char *out, size_t n) {
    char word[256];
    const char *colon = strchr(spec, ':'), *w = name_part(spec);
    store_pathf(word, sizeof word, "%.*s", colon && colon > w ? (int)(colon - w) : (int)strlen(w), w);
    store_entry *e;
    int n_all = store_scan_all(root, &e), shown = 0;
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < n_all && shown < 4 && word[0]; i++) {
        if (!strcasestr(e[i].repo, word) || len + strlen(e[i].repo) + 70 > n) continue;
        len += (size_t)snprintf(out + len, n - len, "%s%s:%s", shown ? ", " : "", e[i].repo, e[i].tag);
        shown++;
    }
    free(e);
}

/* ---- what to download ---------------------------------------------------------------------------- */

enum { MAX_PICK = 64 };

/* What a repository's listing and the tag asked for come to. */
typedef struct pick {
    int gguf;                      /* 1: GGUF files; 0: a safetensors checkpoint */
    char tag[64];                  /* GGUF: the quantization picked; safetensors: the tag asked ("" none) */
    char *inc[MAX_PICK];           /* GGUF: the files to pull, as fnmatch patterns (malloc'ed) */
    int n_inc;
    char first[1024];              /* GGUF: the file to pack (the only one, or part 1 of a split) */
} pick;

/* The quantization of a GGUF file name (the last '-' or '.' separated word before ".gguf" and any
 * "-00001-of-00003"), in upper case, into tag, and its split part into *part (1 when not split);
 * 0, or -1 when path is not a model's GGUF (mmproj-*.gguf are vision towers). */
static int gguf_tag(const char *path, char *tag, size_t n, int *part) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t bl = strlen(base);
    if (bl < 6 || strcasecmp(base + bl - 5, ".gguf") || !strncasecmp(base, "mmproj", 6)) return -1;
    bl -= 5;
    int a = 0, b = 0, k = 0;
    *part = 1;
    if (bl > 15 && sscanf(base + bl - 15, "-%5d-of-%5d%n", &a, &b, &k) == 2 && k == 15) bl -= 15, *part = a;
    size_t s = bl;
    while (s > 0 && base[s - 1] != '-' && base[s - 1] != '.') s--;
    if (bl - s == 0 || bl - s >= n) return -1;
    for (size_t i = s; i < bl; i++) tag[i - s] = (char)toupper((unsigned char)base[i]);
    tag[bl - s] = 0;
    return 0;
}

/* A file name as an fnmatch pattern that matches only it. malloc'ed. */
static char *literal_pattern(const char *name) {
    char *p = malloc(strlen(name) * 2 + 1), *w = p;
    if (!p) return NULL;
    for (; *name; name++) {
        if (strchr("*?[]\\", *name)) *w++ = '\\';
        *w++ = *name;
    }
    *w = 0;
    return p;
}

/* The GGUF quantizations of a listing, each once, ", "-separated, into out. */
static void gguf_tags(const char *names, char *out, size_t n) {
    char seen[4200] = ", "; /* ", A, B, ": what is listed already */
    out[0] = 0;
    for (const char *f = names; *f; f += strlen(f) + 1) {
        char t[64], key[70];
        int part;
        if (gguf_tag(f, t, sizeof t, &part)) continue;
        snprintf(key, sizeof key, ", %s, ", t);
        if (strstr(seen, key)) continue;
        size_t sl = strlen(seen), l = strlen(out);
        snprintf(seen + sl, sizeof seen - sl, "%s, ", t);
        snprintf(out + l, n - l, "%s%s", l ? ", " : "", t);
    }
}

/* GGUF: picks the quantization (r->tag, else Q4_K_M, Q4_0, Q8_0, else the only one) and its files. */
static int pick_gguf(const char *cmd, const store_ref *r, const char *names, pick *pk) {
    char all[4096];
    gguf_tags(names, all, sizeof all);
    static const char *const pref[] = {"Q4_K_M", "Q4_0", "Q8_0", NULL};
    char list[4200];
    snprintf(list, sizeof list, ", %s, ", all);
    const char *want = r->tag[0] ? r->tag : NULL;
    for (int i = 0; !want && pref[i]; i++) {
        char key[70];
        snprintf(key, sizeof key, ", %s, ", pref[i]);
        if (strstr(list, key)) want = pref[i];
    }
    if (!want && all[0] && !strchr(all, ',')) want = all;
    if (!want) return cli_fail(cmd, "%s: which GGUF quantization? add :QUANT to the name, one of: %s", r->repo, all);
    store_pathf(pk->tag, sizeof pk->tag, "%s", want);
    pk->gguf = 1;
    int best = 1 << 30;
    for (const char *f = names; *f; f += strlen(f) + 1) {
        char t[64];
        int part;
        if (gguf_tag(f, t, sizeof t, &part) || strcmp(t, pk->tag)) continue;
        if (pk->n_inc == MAX_PICK) return cli_fail(cmd, "%s: more than %d GGUF files of %s", r->repo, MAX_PICK, pk->tag);
        if (!(pk->inc[pk->n_inc++] = literal_pattern(f))) return cli_fail(cmd, "out of memory");
        if (part < best) best = part, store_pathf(pk->first, sizeof pk->first, "%s", f);
    }
    if (!pk->n_inc)
        return cli_fail(cmd, "%s has no GGUF file of quantization %s; it has: %s", r->repo, pk->tag, all[0] ? all : "none");
    return 0;
}

/* Reads the listing's kind: a safetensors checkpoint (config.json and a top-level *.safetensors) or GGUF
 * files, as the tag asks. */
static int pick_files(const char *cmd, const store_ref *r, const char *names, pick *pk) {
    int config = 0, st = 0, gguf = 0;
    for (const char *f = names; *f; f += strlen(f) + 1) {
        size_t l = strlen(f);
        char t[64];
        int part;
        config |= !strcmp(f, "config.json");
        st |= !strchr(f, '/') && l > 12 && !strcmp(f + l - 12, ".safetensors");
        gguf |= !gguf_tag(f, t, sizeof t, &part);
    }
    memset(pk, 0, sizeof *pk);
    int want_st = r->tag[0] ? is_pack_tag(r->tag) : config && st;
    if (want_st && config && st) {
        store_pathf(pk->tag, sizeof pk->tag, "%s", r->tag);
        return 0;
    }
    if (!want_st && gguf) return pick_gguf(cmd, r, names, pk);
    if (want_st && gguf) {
        char all[4096];
        gguf_tags(names, all, sizeof all);
        return cli_fail(cmd, "%s holds GGUF files, not a safetensors checkpoint that '%s' could pack: name a GGUF "
                        "quantization instead, one of: %s", r->repo, r->tag, all);
    }
    if (!want_st && config && st)
        return cli_fail(cmd, "%s holds a safetensors checkpoint, not GGUF files: its tag is a pack mode, one of keep, "
                        "f32, bf16, q8, q4, q3 (not '%s')", r->repo, r->tag);
    return cli_fail(cmd, "%s holds neither a checkpoint (config.json and *.safetensors) nor GGUF files", r->repo);
}

/* ---- download, pack, record ---------------------------------------------------------------------- */

/* The pack modes a tag stands for (the first comment), and their description for the record. */
static const char *pack_params_of(const char *tag, sl_pack_params *p) {
    static const sl_quant q[] = {SL_QUANT_KEEP, SL_QUANT_F32, SL_QUANT_BF16, SL_QUANT_Q8, SL_QUANT_Q4, SL_QUANT_Q3};
    static const char *const what[] = {"every tensor as released", "every matrix f32", "every matrix bf16",
                                       "every matrix q8", "routed experts q4, the rest q8", "routed experts q3, the rest q8"};
    for (int i = 0; pack_tags[i]; i++) {
        if (strcmp(tag, pack_tags[i])) continue;
        if (q[i] == SL_QUANT_Q4 || q[i] == SL_QUANT_Q3) p->quant_experts = q[i], p->quant_backbone = SL_QUANT_Q8;
        else p->quant = q[i];
        return what[i];
    }
    return "every tensor as in the GGUF file"; /* GGUF: kept as it is */
}

/* The default tag of a safetensors download: keep for a checkpoint quantized already (MXFP4's
 * quantization_config, MLX's "quantization"), else q4. */
static const char *default_tag(const char *dl) {
    char *path = fio_join(dl, "config.json"), *txt = NULL;
    size_t len;
    sl_error ignored;
    const char *tag = "q4";
    if (path && fio_read_file(path, &txt, &len, &ignored) == SL_OK) {
        cJSON *j = cJSON_Parse(txt);
        const cJSON *qc = cJSON_GetObjectItemCaseSensitive(j, "quantization_config");
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(qc, "quant_method");
        if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "quantization")) ||
            (cJSON_IsString(m) && !strcmp(m->valuestring, "mxfp4")))
            tag = "keep";
        cJSON_Delete(j);
    }
    free(txt);
    free(path);
    return tag;
}

/* Writes the record TAG.json (temp + rename). 0, or 1 printed. */
static int write_record(const char *cmd, const char *meta, const store_ref *r, const pick *pk, const char *commit,
                        const char *packed) {
    const char *ep = getenv("HF_ENDPOINT");
    char when[32];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "repo", r->repo);
    cJSON_AddStringToObject(j, "tag", pk->tag);
    cJSON_AddStringToObject(j, "format", pk->gguf ? "gguf" : "safetensors");
    if (pk->gguf) cJSON_AddStringToObject(j, "file", pk->first);
    cJSON_AddStringToObject(j, "commit", commit);
    cJSON_AddStringToObject(j, "endpoint", ep && *ep ? ep : "https://huggingface.co");
    cJSON_AddStringToObject(j, "packed", packed);
    cJSON_AddStringToObject(j, "pulled", when);
    char *txt = cJSON_Print(j), *tmp = NULL;
    cJSON_Delete(j);
    int fd = -1;
    sl_error err = {0};
    sl_status st = !txt ? SL_ENOMEM : fio_create_temp(meta, &tmp, &fd, &err);
    if (!st && (st = fio_pwrite_all(fd, txt, strlen(txt), 0, tmp, &err))) close(fd);
    else if (!st) st = fio_commit(fd, strlen(txt), tmp, meta, &err);
    if (st && tmp) unlink(tmp);
    free(tmp);
    free(txt);
    return st ? cli_fail(cmd, "%s", err.msg[0] ? err.msg : "out of memory") : 0;
}

/* Pulls the picked files of r into dl (pp: repo, revision, out_dir, include set). 0, or 1 printed. */
static int pull_into(const char *cmd, sl_pull_params *pp) {
    cli_progress pr;
    cli_progress_init(&pr, "downloading");
    char *dir = NULL;
    sl_pull_result res;
    sl_error err = {0};
    sl_status st = sl_pull(pp, cli_progress_cb, &pr, &dir, &res, &err);
    cli_progress_end(&pr);
    free(dir);
    if (st) return cli_fail(cmd, "%s%s", err.msg, st == SL_ENOSPC ? ": free some space, or set SLUICE_HOME to a folder "
                                                                   "on a larger disk" : "");
    char got[32];
    fmt_bytes(got, sizeof got, (double)res.bytes_fetched);
    fprintf(stderr, "sluice %s: %d files, %d downloaded (%s)%s, %d already present; %.1f s\n", cmd, res.n_files,
            res.n_fetched, got, res.n_resumed ? ", resumed" : "", res.n_present, clk_now_s() - pr.t0);
    return 0;
}

/* Packs src into path with the tag's modes. 0, or 1 printed. */
static int pack_into(const char *cmd, const char *src, const char *path, const char *tag, const char **packed) {
    sl_pack_params p = sl_pack_params_default();
    *packed = pack_params_of(tag, &p);
    cli_progress pr;
    cli_progress_init(&pr, "packing");
    p.progress = cli_progress_cb;
    p.progress_user = &pr;
    sl_error err = {0};
    cli_remove_stale(cmd, path);
    sl_status st = sl_pack(src, path, &p, &err);
    cli_progress_end(&pr);
    if (st) /* the download stays (fetch_model removes it only once packed) */
        return cli_fail(cmd, "%s (the download stays in %s: the same command again packs it, downloading nothing)",
                        err.msg, src);
    fprintf(stderr, "sluice %s: packed %s (%s) in %.1f s\n", cmd, path, *packed, clk_now_s() - pr.t0);
    return 0;
}

/* Downloads r (sl_pull_list, then sl_pull of what pick_files chose, into ROOT/downloads), packs it into
 * ROOT/models/ORG/NAME/TAG.sluice, writes its record and removes the download. The path into path. */
static int fetch_model(const char *cmd, const store_ref *r, const char *root, char *path, size_t n) {
    sl_pull_params pp = sl_pull_params_default();
    pp.repo = r->repo;
    char *names = NULL, commit[48] = "", dl[4200], dir[4200], meta[4400], src[5300];
    const char *ep = getenv("HF_ENDPOINT"), *packed = NULL;
    pick pk;
    memset(&pk, 0, sizeof pk);
    sl_error err = {0};
    int rc = 1;
    fprintf(stderr, "sluice %s: %s%s%s is not in the store (%s): getting it from %s\n", cmd, r->repo, r->tag[0] ? ":" : "",
            r->tag, root, ep && *ep ? ep : "https://huggingface.co");
    if (sl_pull_list(&pp, &names, commit, &err)) { cli_fail(cmd, "%s", err.msg); goto out; }
    if (pick_files(cmd, r, names, &pk)) goto out;
    char flat[sizeof r->repo + 1]; /* ORG--NAME, as the Hugging Face cache names it */
    const char *slash = strchr(r->repo, '/');
    store_pathf(flat, sizeof flat, "%.*s--%s", (int)(slash - r->repo), r->repo, slash + 1);
    if (store_pathf(dl, sizeof dl, "%s/downloads/%s", root, flat)) { cli_fail(cmd, "%s: a path too long", root); goto out; }
    pp.out_dir = dl;
    pp.revision = commit; /* the commit listed: a branch that moves meanwhile cannot mix two revisions */
    pp.include = (const char *const *)pk.inc;
    pp.n_include = pk.n_inc;
    if (pull_into(cmd, &pp)) goto out;
    if (!pk.gguf && !pk.tag[0]) store_pathf(pk.tag, sizeof pk.tag, "%s", default_tag(dl));
    store_model_dir(root, r->repo, dir, sizeof dir);
    if (mkdir_p(dir)) { cli_fail(cmd, "%s: cannot create the folder: %s", dir, strerror(errno)); goto out; }
    store_pathf(path, n, "%s/%s.sluice", dir, pk.tag);
    store_pathf(meta, sizeof meta, "%s/%s.json", dir, pk.tag);
    if (pk.gguf) store_pathf(src, sizeof src, "%s/%s", dl, pk.first);
    else store_pathf(src, sizeof src, "%s", dl);
    unlink(meta); /* a record without its container would say the model is there */
    if (pack_into(cmd, src, path, pk.tag, &packed) || write_record(cmd, meta, r, &pk, commit, packed)) goto out;
    if (store_remove_tree(dl)) fprintf(stderr, "sluice %s: could not remove the download %s: %s\n", cmd, dl, strerror(errno));
    rc = 0;
out:
    for (int i = 0; i < pk.n_inc; i++) free(pk.inc[i]);
    free(names);
    return rc;
}

/* The path of r in the store, fetched first when it is not there (malloc'ed into *out). 0, or 1 printed. */
static int store_get(const char *cmd, store_ref *r, char **out) {
    char root[4096], dir[4300], path[4500], meta[4500];
    if (store_root(root, sizeof root)) return cli_fail(cmd, "no model store: set SLUICE_HOME (or HOME)");
    store_model_dir(root, r->repo, dir, sizeof dir);
    if (!r->tag[0]) latest_tag(dir, r); /* any tag there, the one used last */
    if (r->tag[0]) {
        store_pathf(path, sizeof path, "%s/%s.sluice", dir, r->tag);
        store_pathf(meta, sizeof meta, "%s/%s.json", dir, r->tag);
        if (is_file(path) && is_file(meta)) {
            store_touch(meta);
            return (*out = strdup(path)) ? 0 : cli_fail(cmd, "out of memory");
        }
    }
    if (fetch_model(cmd, r, root, path, sizeof path)) return 1;
    return (*out = strdup(path)) ? 0 : cli_fail(cmd, "out of memory");
}

static char *kept[64]; /* the paths cli_model_path handed out, reachable until exit */
static int n_kept;

/* A word that is neither a file there nor ORG/NAME: no '/', no .sluice / .gguf ending. */
static int bare_word(const char *s) {
    size_t n = strlen(s);
    struct stat sb;
    return *s && !strchr(s, '/') && s[0] != '.' && s[0] != '-' && stat(s, &sb) != 0 &&
           !(n > 7 && !strcmp(s + n - 7, ".sluice")) && !(n > 5 && !strcmp(s + n - 5, ".gguf"));
}

int cli_model_path(const char *cmd, const char **model) {
    if (!*model) return cli_default_model(cmd, model);
    char root[4096], full[600];
    if (!store_is_name(*model)) { /* a path: the library names what is wrong with it; a bare NAME: the store's */
        if (!bare_word(*model) || store_root(root, sizeof root)) return 0;
        if (store_resolve_word(cmd, root, *model, 1, full, sizeof full)) return 1;
        *model = full;
    }
    store_ref r;
    char *path = NULL;
    store_parse(*model, &r);
    if (store_get(cmd, &r, &path)) return 1;
    if (n_kept < 64) kept[n_kept++] = path;
    *model = path;
    return 0;
}
