/*
 * pull.c — sl_pull: downloads a Hugging Face model repository over HTTP(S) with libcurl (sluice.h,
 * docs/PULL.md).
 *
 * The listing comes from {endpoint}/api/models/{repo}/revision/{rev}?blobs=true: the commit ("sha") and
 * per file its size, its git blob id and, for LFS files, its sha256. Files are then fetched from
 * {endpoint}/{repo}/resolve/{commit}/{path} — by commit, so that a branch moving during the pull cannot
 * mix two revisions — following redirects (the hub sends LFS files to a CDN). The token goes only to the
 * endpoint's host: curl's bearer auth is never replayed to another host after a redirect.
 *
 * Invariants: a final name only ever holds a complete, verified file (the bytes go to NAME.incomplete,
 * which is fsynced and renamed when size and hash match); a partial file is resumed with Range, its
 * prefix hashed first; a 200 answer to a Range request restarts the file from byte 0; a hash mismatch
 * deletes the partial file and starts over, at most PULL_MAX_CORRUPT times. Worker threads take files
 * from a queue (largest first), each with its own curl handle; the first error stops the others.
 *
 * Two layouts. With out_dir: the files are DIR/PATH. Without: huggingface_hub's cache, so that other
 * tools share the downloads: <cache>/models--ORG--NAME/blobs/<sha256 or git blob id>, snapshots/<commit>/
 * PATH as relative symlinks to the blobs, refs/<revision> holding the commit. A blob is content-addressed
 * and only ever renamed into place verified, so one of the right size counts as present; in a plain
 * directory a present file of the right size is hashed again before it counts.
 *
 * This file: small helpers (env, paths); the state of a pull; the listing; workers; selection and
 * layout; sl_pull. transfer.c: hashing, one HTTP transfer, one file (pull_int.h between them).
 */
#include "pull/pull.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "pull/pull_int.h"
#include "util/err.h"
#include "util/fileio.h"
#include "util/fmt.h"

/* ---- small helpers ------------------------------------------------------------------------------ */

sl_pull_params sl_pull_params_default(void) {
    sl_pull_params p;
    memset(&p, 0, sizeof p);
    return p;
}

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

char *pull_asprintf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) s = NULL;
    va_end(ap);
    return s;
}

int pull_path_safe(const char *path) {
    if (!path || !*path || path[0] == '/') return 0;
    for (const char *p = path; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f || *p == '\\') return 0;
    for (const char *p = path;;) {
        size_t w = strcspn(p, "/");
        if (w == 0 || (w == 1 && p[0] == '.') || (w == 2 && p[0] == '.' && p[1] == '.')) return 0;
        if (!p[w]) return 1;
        p += w + 1;
    }
}

int pull_default_wanted(const char *path) {
    static const char *const names[] = {"config.json",           "generation_config.json", "tokenizer.json",
                                        "tokenizer_config.json", "chat_template.jinja",
                                        "model.safetensors.index.json", NULL};
    if (strchr(path, '/')) return 0;
    for (int i = 0; names[i]; i++)
        if (!strcmp(path, names[i])) return 1;
    size_t n = strlen(path);
    return n > 12 && !strcmp(path + n - 12, ".safetensors");
}

static int is_hex(const char *s, size_t n) {
    if (strlen(s) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

/* mkdir -p of the directory part of path (everything before its last '/'). */
sl_status pull_mkdir_parents(const char *path, sl_error *err) {
    char *p = strdup(path);
    if (!p) return err_set(err, SL_ENOMEM, "out of memory");
    char *last = strrchr(p, '/');
    sl_status st = SL_OK;
    if (last && last != p) {
        *last = 0;
        for (char *q = p + 1;; q++) {
            if (*q == '/' || !*q) {
                char c = *q;
                *q = 0;
                if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                    st = err_set(err, err_from_errno(errno), "%s: cannot create the directory: %s", p, strerror(errno));
                    break;
                }
                *q = c;
                if (!c) break;
            }
        }
    }
    free(p);
    return st;
}

/* ---- the state of a pull ------------------------------------------------------------------------ */

int pull_stopped(puller *pl) {
    pthread_mutex_lock(&pl->mu);
    int s = pl->stop;
    pthread_mutex_unlock(&pl->mu);
    return s;
}

/* Records the first error (later ones are consequences) and stops the other workers. */
static void fail_pull(puller *pl, const sl_error *e) {
    pthread_mutex_lock(&pl->mu);
    if (!pl->stop) pl->err = *e;
    pl->stop = 1;
    pthread_mutex_unlock(&pl->mu);
}

/* Adjusts the bytes still needed (a file found present, a resumed prefix, a restart) and reports. */
int pull_account(puller *pl, int64_t d_done, int64_t d_total) {
    pthread_mutex_lock(&pl->mu);
    pl->done += (uint64_t)d_done;
    pl->total += (uint64_t)d_total;
    if (d_done > 0) pl->res.bytes_fetched += (uint64_t)d_done;
    int cancel = pl->progress && !pl->stop && pl->progress(pl->user, pl->done, pl->total > pl->done ? pl->total : pl->done);
    if (cancel && !pl->stop) {
        err_set(&pl->err, SL_ECANCELED, "canceled");
        pl->stop = 1;
    }
    int s = pl->stop;
    pthread_mutex_unlock(&pl->mu);
    return s;
}

/* ---- the listing -------------------------------------------------------------------------------- */

/* Percent-encodes s for a URL; keep_slash keeps '/' (a path) or encodes it (a revision like refs/pr/1). */
char *pull_url_escape(CURL *c, const char *s, int keep_slash) {
    size_t cap = strlen(s) * 3 + 1, n = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    for (const char *p = s; *p;) {
        size_t w = keep_slash ? strcspn(p, "/") : strlen(p);
        char *e = curl_easy_escape(c, p, (int)w);
        if (!e) { free(out); return NULL; }
        size_t el = strlen(e);
        memcpy(out + n, e, el);
        n += el;
        curl_free(e);
        p += w;
        if (*p == '/') { out[n++] = '/'; p++; }
    }
    out[n] = 0;
    return out;
}

static sl_status parse_listing(puller *pl, const char *json, sl_error *err) {
    cJSON *j = cJSON_Parse(json);
    sl_status st = SL_OK;
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(j, "sha"), *sib = cJSON_GetObjectItemCaseSensitive(j, "siblings");
    if (!cJSON_IsString(sha) || !is_hex(sha->valuestring, 40) || !cJSON_IsArray(sib)) {
        st = err_set(err, SL_EFORMAT, "%s: the hub's answer has no commit \"sha\" of 40 hex digits or no \"siblings\"",
                    pl->p->repo);
        goto done;
    }
    snprintf(pl->commit, sizeof pl->commit, "%s", sha->valuestring);
    int n = cJSON_GetArraySize(sib);
    pl->files = calloc((size_t)(n > 0 ? n : 1), sizeof *pl->files);
    if (!pl->files) { st = err_set(err, SL_ENOMEM, "out of memory"); goto done; }
    const cJSON *s;
    cJSON_ArrayForEach(s, sib) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(s, "rfilename");
        if (!cJSON_IsString(name)) continue;
        if (!pull_path_safe(name->valuestring)) {
            st = err_set(err, SL_EFORMAT, "%s: the hub lists a file name that is not a safe relative path: '%.200s'",
                        pl->p->repo, name->valuestring);
            goto done;
        }
        pfile *f = &pl->files[pl->n_files];
        if (!(f->name = strdup(name->valuestring))) { st = err_set(err, SL_ENOMEM, "out of memory"); goto done; }
        pl->n_files++;
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(s, "size"), *blob = cJSON_GetObjectItemCaseSensitive(s, "blobId");
        const cJSON *lfs = cJSON_GetObjectItemCaseSensitive(s, "lfs");
        if (cJSON_IsNumber(size) && size->valuedouble >= 0 && size->valuedouble <= 9007199254740992.0)
            f->size = (uint64_t)size->valuedouble, f->have_size = 1;
        if (cJSON_IsString(blob) && is_hex(blob->valuestring, 40)) snprintf(f->blob_id, sizeof f->blob_id, "%s", blob->valuestring);
        if (cJSON_IsObject(lfs)) {
            const cJSON *h = cJSON_GetObjectItemCaseSensitive(lfs, "sha256");
            if (!cJSON_IsString(h)) h = cJSON_GetObjectItemCaseSensitive(lfs, "oid");
            const cJSON *ls = cJSON_GetObjectItemCaseSensitive(lfs, "size");
            if (cJSON_IsString(h) && is_hex(h->valuestring, 64)) snprintf(f->sha256, sizeof f->sha256, "%s", h->valuestring);
            if (cJSON_IsNumber(ls) && ls->valuedouble >= 0 && ls->valuedouble <= 9007199254740992.0)
                f->size = (uint64_t)ls->valuedouble, f->have_size = 1;
            f->blob_id[0] = 0; /* an LFS file's blob id is its pointer's, not its content's */
        }
    }
done:
    cJSON_Delete(j);
    return st;
}

/* 1 when the listing's request never reached a server: the host name did not resolve, nothing accepted
 * the connection, or the connection timed out before any answer. The listing is the pull's first
 * request, so this means no network (or a wrong HF_ENDPOINT), which retries do not mend; a file's
 * transfer later on is retried instead (transfer.c), as a connection that worked once may come back. */
static int unreachable(CURLcode rc, const xfer *x) {
    if (rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_RESOLVE_PROXY || rc == CURLE_COULDNT_CONNECT) return 1;
    return rc == CURLE_OPERATION_TIMEDOUT && x->status == 0;
}

/* GETs the listing, with retries on 5xx and on broken answers (not when no server answered at all). */
static sl_status fetch_listing(puller *pl, CURL *c, sl_error *err) {
    const char *rev = pl->p->revision ? pl->p->revision : "main";
    char *erev = pull_url_escape(c, rev, 0), *url = erev ? pull_asprintf("%s/api/models/%s/revision/%s?blobs=true", pl->endpoint,
                                                                 pl->p->repo, erev) : NULL;
    free(erev);
    if (!url) return err_set(err, SL_ENOMEM, "out of memory");
    hasher none = {0};
    xfer x = {.pl = pl, .fd = -1, .h = &none};
    sl_status st = SL_OK;
    for (int failures = 0;;) {
        free(x.mem);
        x.mem = NULL;
        x.mem_len = 0;
        CURLcode rc = pull_http_get(c, pl, url, &x, 0);
        if (rc == CURLE_OK && !x.http_error && x.mem) {
            st = parse_listing(pl, x.mem, err);
            break;
        }
        if (rc == CURLE_OK && x.http_error && !pull_retryable(x.status)) {
            st = pull_http_error(pl, &x, pl->p->repo, err);
            break;
        }
        if (pull_stopped(pl)) { st = pl->err.status ? pl->err.status : SL_ECANCELED; *err = pl->err; break; }
        if (unreachable(rc, &x)) { /* no network: say so at once rather than after a minute of retries */
            st = err_set(err, SL_EIO, "%s: cannot reach %s (%s): check the network connection, or set HF_ENDPOINT to a hub "
                        "that can be reached", pl->p->repo, pl->endpoint, curl_easy_strerror(rc));
            break;
        }
        if (++failures > pl->retries) {
            st = rc != CURLE_OK ? err_set(err, SL_EIO, "%s: cannot list the repository at %s: %s", pl->p->repo, pl->endpoint,
                                         curl_easy_strerror(rc))
                                : pull_http_error(pl, &x, pl->p->repo, err);
            break;
        }
        pl->res.n_retries++;
        pull_sleep_s(pull_backoff_s(failures));
    }
    free(x.mem);
    free(url);
    return st;
}

/* ---- workers ------------------------------------------------------------------------------------ */

static void *worker(void *arg) {
    puller *pl = arg;
    CURL *c = curl_easy_init();
    if (!c) {
        sl_error e;
        err_set(&e, SL_ENOMEM, "cannot start a curl handle");
        fail_pull(pl, &e);
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&pl->mu);
        int i = pl->stop || pl->next >= pl->n_queue ? -1 : pl->queue[pl->next++];
        pthread_mutex_unlock(&pl->mu);
        if (i < 0) break;
        sl_error e = {0};
        if (pull_fetch_file(pl, c, &pl->files[i], &e) != SL_OK) {
            if (e.status != SL_ECANCELED) fail_pull(pl, &e);
            break;
        }
    }
    curl_easy_cleanup(c);
    return NULL;
}

static int by_size_desc(const void *a, const void *b, void *files) {
    const pfile *f = files;
    uint64_t x = f[*(const int *)a].size, y = f[*(const int *)b].size;
    return x < y ? 1 : x > y ? -1 : *(const int *)a - *(const int *)b;
}

/* Downloads the selected files among files[first .. first+n), jobs at once. */
static sl_status run_workers(puller *pl, int first, int n, sl_error *err) {
    pl->n_queue = pl->next = 0;
    for (int i = first; i < first + n; i++) {
        if (!pl->files[i].selected) continue;
        pl->queue[pl->n_queue++] = i;
        pull_account(pl, 0, (int64_t)pl->files[i].size);
    }
    qsort_r(pl->queue, (size_t)pl->n_queue, sizeof *pl->queue, by_size_desc, pl->files);
    int jobs = pl->p->jobs > 0 ? pl->p->jobs : PULL_DEFAULT_JOBS;
    if (jobs > pl->n_queue) jobs = pl->n_queue;
    if (jobs > 64) jobs = 64;
    pthread_t th[64];
    int started = 0;
    for (; started < jobs; started++)
        if (pthread_create(&th[started], NULL, worker, pl) != 0) break;
    if (started == 0 && pl->n_queue > 0) worker(pl);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    if (pl->stop) {
        *err = pl->err;
        return pl->err.status ? pl->err.status : SL_ECANCELED;
    }
    return SL_OK;
}

/* ---- selection and layout ----------------------------------------------------------------------- */

static int wanted(const sl_pull_params *p, const char *name) {
    for (int i = 0; i < p->n_include; i++)
        if (fnmatch(p->include[i], name, 0) == 0) return 1;
    return 0;
}

/* Default selection, once the index (if any) is on disk: its shards only. */
static sl_status select_shards(puller *pl, const pfile *index, sl_error *err) {
    char *txt = NULL;
    size_t len = 0;
    const char *path = index->final_path;
    sl_status st = fio_read_file(path, &txt, &len, err);
    if (st) return st;
    cJSON *j = cJSON_Parse(txt);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(j, "weight_map"), *e;
    if (!cJSON_IsObject(wm)) {
        st = err_set(err, SL_EFORMAT, "%s: model.safetensors.index.json has no \"weight_map\"", pl->p->repo);
    } else {
        for (int i = 0; i < pl->n_files; i++) {
            pfile *f = &pl->files[i];
            size_t n = strlen(f->name);
            if (strchr(f->name, '/') || n <= 12 || strcmp(f->name + n - 12, ".safetensors")) continue;
            f->selected = 0;
            cJSON_ArrayForEach(e, wm) if (cJSON_IsString(e) && !strcmp(e->valuestring, f->name)) { f->selected = 1; break; }
        }
    }
    cJSON_Delete(j);
    free(txt);
    return st;
}

/* The cache directory: params, $HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub. */
static char *cache_root(const sl_pull_params *p) {
    if (p->cache_dir) return strdup(p->cache_dir);
    if (env("HF_HUB_CACHE")) return strdup(env("HF_HUB_CACHE"));
    if (env("HF_HOME")) return fio_join(env("HF_HOME"), "hub");
    if (env("XDG_CACHE_HOME")) return fio_join(env("XDG_CACHE_HOME"), "huggingface/hub");
    return env("HOME") ? fio_join(env("HOME"), ".cache/huggingface/hub") : NULL;
}

/* The token: params, $HF_TOKEN, the file $HF_TOKEN_PATH or $HF_HOME/token (huggingface-cli login). */
static char *find_token(const sl_pull_params *p) {
    if (p->token) return strdup(p->token);
    if (env("HF_TOKEN")) return strdup(env("HF_TOKEN"));
    char *path = env("HF_TOKEN_PATH") ? strdup(env("HF_TOKEN_PATH"))
                 : env("HF_HOME")     ? fio_join(env("HF_HOME"), "token")
                 : env("HOME")        ? fio_join(env("HOME"), ".cache/huggingface/token")
                                      : NULL;
    char *tok = NULL;
    size_t len = 0;
    sl_error ignored;
    if (path && fio_read_file(path, &tok, &len, &ignored) == SL_OK) tok[strcspn(tok, " \t\r\n")] = 0;
    free(path);
    return tok ? tok : strdup("");
}

/* Sets each file's final, temporary and link paths. */
static sl_status lay_out(puller *pl, char **out_dir, sl_error *err) {
    if (pl->p->out_dir) {
        if (!(*out_dir = strdup(pl->p->out_dir))) return err_set(err, SL_ENOMEM, "out of memory");
    } else {
        char *root = cache_root(pl->p);
        if (!root) return err_set(err, SL_EINVAL, "no cache directory: set HF_HOME (or HOME), or give an output directory");
        char *folder = malloc(strlen(pl->p->repo) + 16); /* models--ORG--NAME: the one '/' becomes "--" */
        if (folder) {
            size_t k = (size_t)sprintf(folder, "models--");
            for (const char *q = pl->p->repo; *q; q++) {
                if (*q == '/') folder[k++] = '-', folder[k++] = '-';
                else folder[k++] = *q;
            }
            folder[k] = 0;
        }
        pl->repo_dir = folder ? fio_join(root, folder) : NULL;
        free(folder);
        free(root);
        *out_dir = pl->repo_dir ? pull_asprintf("%s/snapshots/%s", pl->repo_dir, pl->commit) : NULL;
        if (!*out_dir) return err_set(err, SL_ENOMEM, "out of memory");
        pl->cache_layout = 1;
    }
    for (int i = 0; i < pl->n_files; i++) {
        pfile *f = &pl->files[i];
        if (pl->cache_layout) {
            const char *id = f->sha256[0] ? f->sha256 : f->blob_id;
            char *blob = id[0] ? pull_asprintf("blobs/%s", id) : pull_asprintf("blobs/%s-%d", pl->commit, i);
            f->final_path = blob ? fio_join(pl->repo_dir, blob) : NULL;
            f->link_path = fio_join(*out_dir, f->name);
            free(blob);
        } else {
            f->final_path = fio_join(*out_dir, f->name);
        }
        f->tmp_path = f->final_path ? pull_asprintf("%s.incomplete", f->final_path) : NULL;
        if (!f->final_path || !f->tmp_path || (pl->cache_layout && !f->link_path)) return err_set(err, SL_ENOMEM, "out of memory");
    }
    return SL_OK;
}

/* Cache layout: snapshots/<commit>/PATH -> ../../blobs/ID (one more ../ per directory of PATH), and
 * refs/<revision> holding the commit. */
static sl_status link_snapshot(puller *pl, sl_error *err) {
    for (int i = 0; i < pl->n_files; i++) {
        pfile *f = &pl->files[i];
        if (!f->selected) continue;
        int depth = 2;
        for (const char *q = f->name; *q; q++) depth += *q == '/';
        const char *blob = strrchr(f->final_path, '/') + 1;
        size_t cap = (size_t)depth * 3 + strlen(blob) + 8;
        char *target = malloc(cap), want[4096];
        if (!target) return err_set(err, SL_ENOMEM, "out of memory");
        target[0] = 0;
        for (int d = 0; d < depth; d++) strcat(target, "../");
        strcat(target, "blobs/");
        strcat(target, blob);
        ssize_t n = readlink(f->link_path, want, sizeof want - 1);
        int ok = n >= 0 && (size_t)n == strlen(target) && !memcmp(want, target, (size_t)n);
        sl_status st = SL_OK;
        if (!ok) {
            st = pull_mkdir_parents(f->link_path, err);
            if (!st) {
                unlink(f->link_path);
                if (symlink(target, f->link_path) != 0)
                    st = err_set(err, err_from_errno(errno), "%s: cannot link %s: %s", f->name, f->link_path, strerror(errno));
            }
        }
        free(target);
        if (st) return st;
    }
    const char *rev = pl->p->revision ? pl->p->revision : "main";
    if (!strcmp(rev, pl->commit) || !pull_path_safe(rev)) return SL_OK;
    char *ref = pull_asprintf("%s/refs/%s", pl->repo_dir, rev), *tmp = ref ? pull_asprintf("%s.tmp.%d", ref, (int)getpid()) : NULL;
    sl_status st = !ref || !tmp ? err_set(err, SL_ENOMEM, "out of memory") : pull_mkdir_parents(ref, err);
    if (!st) {
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) st = err_set(err, err_from_errno(errno), "%s: %s", tmp, strerror(errno));
        else if (!(st = fio_pwrite_all(fd, pl->commit, strlen(pl->commit), 0, tmp, err)))
            st = fio_commit(fd, strlen(pl->commit), tmp, ref, err);
        else close(fd);
        if (st) unlink(tmp);
    }
    free(ref);
    free(tmp);
    return st;
}

/* ---- sl_pull ------------------------------------------------------------------------------------ */

static int repo_name_ok(const char *r) {
    int slashes = 0;
    if (!r || !*r || r[0] == '/' || r[0] == '.' || r[0] == '-') return 0;
    for (const char *q = r; *q; q++) {
        if (*q == '/') {
            if (++slashes > 1 || q[1] == 0 || q[1] == '.' || q[1] == '-' || q[1] == '/') return 0;
        } else if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '-' ||
                     *q == '_' || *q == '.')) {
            return 0;
        }
    }
    return !strstr(r, "..");
}

/* The part of a pull before the listing: the name checked, the endpoint and token found, libcurl and one
 * handle started (*c). puller_end undoes it, whatever was reached. */
static sl_status puller_start(puller *pl, const sl_pull_params *params, CURL **c, sl_error *err) {
    memset(pl, 0, sizeof *pl);
    *c = NULL;
    if (!params || !repo_name_ok(params->repo))
        return err_set(err, SL_EINVAL, "'%s' is not a repository name (ORG/NAME: letters, digits, '-', '_', '.')",
                      params && params->repo ? params->repo : "");
    pl->p = params;
    pl->retries = params->retries > 0 ? params->retries : PULL_DEFAULT_RETRIES;
    pthread_mutex_init(&pl->mu, NULL);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        pthread_mutex_destroy(&pl->mu);
        pl->p = NULL;
        return err_set(err, SL_EIO, "cannot initialise libcurl");
    }
    const char *ep = params->endpoint ? params->endpoint : env("HF_ENDPOINT") ? env("HF_ENDPOINT") : "https://huggingface.co";
    pl->endpoint = strdup(ep);
    pl->token = find_token(params);
    if (!pl->endpoint || !pl->token || !(*c = curl_easy_init())) return err_set(err, SL_ENOMEM, "out of memory");
    for (size_t n = strlen(pl->endpoint); n > 0 && pl->endpoint[n - 1] == '/'; n--) pl->endpoint[n - 1] = 0;
    if (strncmp(pl->endpoint, "http://", 7) && strncmp(pl->endpoint, "https://", 8))
        return err_set(err, SL_EINVAL, "endpoint '%s' is not an http:// or https:// URL (HF_ENDPOINT)", pl->endpoint);
    return SL_OK;
}

static void puller_end(puller *pl, CURL *c) {
    if (!pl->p) return; /* puller_start stopped before anything was started */
    for (int i = 0; i < pl->n_files; i++) {
        free(pl->files[i].name);
        free(pl->files[i].final_path);
        free(pl->files[i].tmp_path);
        free(pl->files[i].link_path);
    }
    free(pl->files);
    free(pl->queue);
    free(pl->endpoint);
    if (pl->token) explicit_bzero(pl->token, strlen(pl->token));
    free(pl->token);
    free(pl->repo_dir);
    if (c) curl_easy_cleanup(c);
    curl_global_cleanup();
    pthread_mutex_destroy(&pl->mu);
}

sl_status sl_pull_list(const sl_pull_params *params, char **names, char commit[48], sl_error *err) {
    *names = NULL;
    puller pl;
    CURL *c;
    sl_status st = puller_start(&pl, params, &c, err);
    if (!st) st = fetch_listing(&pl, c, err);
    size_t len = 1;
    for (int i = 0; !st && i < pl.n_files; i++) len += strlen(pl.files[i].name) + 1;
    char *out = st ? NULL : malloc(len), *w = out;
    if (!st && !out) st = err_set(err, SL_ENOMEM, "out of memory");
    for (int i = 0; !st && i < pl.n_files; i++) w = stpcpy(w, pl.files[i].name) + 1;
    if (!st) {
        *w = 0;
        *names = out;
        if (commit) snprintf(commit, 48, "%s", pl.commit);
    }
    puller_end(&pl, c);
    return st;
}

/* Before the selected files are downloaded: the bytes they still need (a final file of the hub's size counts
 * as there, a partial one's bytes as written) against the free space of the file system they go to (the
 * nearest folder of the first one's path that exists). SL_ENOSPC naming both when they do not fit: at once,
 * not after hours of downloading; a file system that cannot tell (statvfs fails) is trusted. */
static sl_status check_room(const puller *pl, sl_error *err) {
    uint64_t need = 0;
    const char *where = NULL;
    for (int i = 0; i < pl->n_files; i++) {
        const pfile *f = &pl->files[i];
        struct stat sb;
        if (!f->selected) continue;
        if (!where) where = f->tmp_path;
        if (stat(f->final_path, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size == f->size) continue;
        uint64_t have = stat(f->tmp_path, &sb) == 0 && (uint64_t)sb.st_size <= f->size ? (uint64_t)sb.st_size : 0;
        need += f->size - have;
    }
    char dir[4096];
    struct statvfs vf;
    snprintf(dir, sizeof dir, "%s", where ? where : "");
    for (char *slash; (slash = strrchr(dir, '/'));) { /* the nearest folder there */
        *slash = 0;
        if (statvfs(dir[0] ? dir : "/", &vf) == 0) break;
    }
    if (!where || !strchr(where, '/') || statvfs(dir[0] ? dir : "/", &vf) != 0) return SL_OK;
    const uint64_t avail = (uint64_t)vf.f_bavail * (uint64_t)vf.f_frsize;
    if (need <= avail) return SL_OK;
    char a[32], b[32];
    fmt_bytes(a, sizeof a, (double)need);
    fmt_bytes(b, sizeof b, (double)avail);
    return err_set(err, SL_ENOSPC, "%s: the download needs %s more in %s, where %s are free", pl->p->repo, a,
                   dir[0] ? dir : "/", b);
}

sl_status sl_pull(const sl_pull_params *params, sl_progress_fn progress, void *user, char **out_dir,
                  sl_pull_result *res, sl_error *err) {
    *out_dir = NULL;
    puller pl;
    CURL *c;
    char *dir = NULL;
    sl_status st = puller_start(&pl, params, &c, err);
    pl.progress = progress;
    pl.user = user;
    if (st) goto done;
    if ((st = fetch_listing(&pl, c, err))) goto done;
    snprintf(pl.res.commit, sizeof pl.res.commit, "%s", pl.commit);
    int index = -1;
    for (int i = 0; i < pl.n_files; i++) {
        pfile *f = &pl.files[i];
        f->selected = params->n_include > 0 ? wanted(params, f->name) : pull_default_wanted(f->name);
        if (params->n_include == 0 && !strcmp(f->name, "model.safetensors.index.json")) index = i;
        pl.res.n_files += f->selected;
    }
    if (pl.res.n_files == 0) {
        st = err_set(err, SL_ENOENT, "%s: no file at %s matches %s", params->repo, pl.commit,
                    params->n_include ? "the --include patterns" : "what sluice pack reads (config.json, *.safetensors)");
        goto done;
    }
    if ((st = lay_out(&pl, &dir, err))) goto done;
    if (!(pl.queue = malloc((size_t)pl.n_files * sizeof *pl.queue))) { st = err_set(err, SL_ENOMEM, "out of memory"); goto done; }
    if (index >= 0) { /* the index first: it says which *.safetensors are the model's */
        if ((st = run_workers(&pl, index, 1, err))) goto done;
        if ((st = select_shards(&pl, &pl.files[index], err))) goto done;
        pl.files[index].selected = 0; /* done */
        pl.res.n_files = 1;
        for (int i = 0; i < pl.n_files; i++) pl.res.n_files += pl.files[i].selected;
    }
    if ((st = check_room(&pl, err))) goto done;
    if ((st = run_workers(&pl, 0, pl.n_files, err))) goto done;
    if (index >= 0) pl.files[index].selected = 1;
    if (pl.cache_layout && (st = link_snapshot(&pl, err))) goto done;
done:
    if (res) *res = pl.res;
    if (st == SL_OK) *out_dir = dir;
    else free(dir);
    puller_end(&pl, c);
    return st;
}
