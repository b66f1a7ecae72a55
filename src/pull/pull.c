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
 * Sections: small helpers (env, paths, hashing); one HTTP transfer; the listing; one file; workers;
 * selection and layout; sl_pull.
 */
#include "pull/pull.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <nettle/sha1.h>
#include <nettle/sha2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/err.h"
#include "util/fileio.h"

enum {
    PULL_DEFAULT_JOBS = 4,
    PULL_DEFAULT_RETRIES = 6,
    PULL_MAX_CORRUPT = 3,         /* downloads of one file that may fail their check */
    PULL_MAX_ATTEMPTS = 1000,     /* attempts of one file in all, however much each one got */
    PULL_MAX_LISTING = 64 << 20,  /* bytes of API JSON we accept */
};

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


static char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xasprintf(const char *fmt, ...) {
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

static void to_hex(const uint8_t *d, size_t n, char *out) {
    for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* mkdir -p of the directory part of path (everything before its last '/'). */
static sl_status mkdir_parents(const char *path, sl_error *err) {
    char *p = strdup(path);
    if (!p) return sl_err(err, SL_ENOMEM, "out of memory");
    char *last = strrchr(p, '/');
    sl_status st = SL_OK;
    if (last && last != p) {
        *last = 0;
        for (char *q = p + 1;; q++) {
            if (*q == '/' || !*q) {
                char c = *q;
                *q = 0;
                if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                    st = sl_err(err, sl_status_from_errno(errno), "%s: cannot create the directory: %s", p, strerror(errno));
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

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* What a file is checked against, and the running hash of its bytes. */
typedef struct hasher {
    int kind; /* 0 size only, 1 sha256 (LFS), 2 git blob sha1 ("blob <size>\0" + bytes) */
    struct sha256_ctx s256;
    struct sha1_ctx s1;
} hasher;

static void hash_reset(hasher *h, int kind, uint64_t size) {
    h->kind = kind;
    if (kind == 1) sha256_init(&h->s256);
    if (kind == 2) {
        char hdr[32];
        int n = snprintf(hdr, sizeof hdr, "blob %" PRIu64, size);
        sha1_init(&h->s1);
        sha1_update(&h->s1, (size_t)n + 1, (const uint8_t *)hdr); /* with its NUL */
    }
}

static void hash_update(hasher *h, const void *data, size_t n) {
    if (h->kind == 1) sha256_update(&h->s256, n, data);
    if (h->kind == 2) sha1_update(&h->s1, n, data);
}

/* The hex digest into out[65] ("" for kind 0). */
static void hash_final(hasher *h, char *out) {
    uint8_t d[SHA256_DIGEST_SIZE];
    out[0] = 0;
    if (h->kind == 1) {
        sha256_digest(&h->s256, SHA256_DIGEST_SIZE, d);
        to_hex(d, SHA256_DIGEST_SIZE, out);
    } else if (h->kind == 2) {
        sha1_digest(&h->s1, SHA1_DIGEST_SIZE, d);
        to_hex(d, SHA1_DIGEST_SIZE, out);
    }
}

/* Feeds len bytes of fd from offset 0 to h. */
static sl_status hash_fd(hasher *h, int fd, uint64_t len, const char *what, sl_error *err) {
    enum { CHUNK = 1 << 20 };
    uint8_t *buf = malloc(CHUNK);
    if (!buf) return sl_err(err, SL_ENOMEM, "out of memory");
    sl_status st = SL_OK;
    for (uint64_t off = 0; off < len && !st;) {
        size_t n = len - off < CHUNK ? (size_t)(len - off) : CHUNK;
        st = fio_pread_all(fd, buf, n, off, what, err);
        if (!st) hash_update(h, buf, n);
        off += n;
    }
    free(buf);
    return st;
}

/* ---- the state of a pull ------------------------------------------------------------------------ */

typedef struct pfile {
    char *name;          /* repository path */
    uint64_t size;       /* from the listing; have_size 0 when it gave none */
    int have_size;
    char sha256[65];     /* LFS sha256, "" if not an LFS file */
    char blob_id[41];    /* git blob sha1, "" if unknown */
    char *final_path;    /* DIR/PATH or <repo cache>/blobs/<id> */
    char *tmp_path;      /* final_path + ".incomplete" */
    char *link_path;     /* cache layout: snapshots/<commit>/PATH; else NULL */
    int selected;
} pfile;

typedef struct puller {
    const sl_pull_params *p;
    char *endpoint, *token, *repo_dir; /* repo_dir: <cache>/models--ORG--NAME, cache layout only */
    char commit[48];
    int cache_layout, retries;
    pfile *files;
    int n_files;
    int *queue, n_queue, next; /* indices into files, largest first */
    pthread_mutex_t mu;        /* guards next, done/total, progress calls, res, err, stop */
    sl_progress_fn progress;
    void *user;
    uint64_t done, total;
    int stop;                  /* an error or a cancel: workers take no new file, transfers abort */
    sl_error err;
    sl_pull_result res;
} puller;

static int stopped(puller *pl) {
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
static int account(puller *pl, int64_t d_done, int64_t d_total) {
    pthread_mutex_lock(&pl->mu);
    pl->done += (uint64_t)d_done;
    pl->total += (uint64_t)d_total;
    if (d_done > 0) pl->res.bytes_fetched += (uint64_t)d_done;
    int cancel = pl->progress && !pl->stop && pl->progress(pl->user, pl->done, pl->total > pl->done ? pl->total : pl->done);
    if (cancel && !pl->stop) {
        sl_err(&pl->err, SL_ECANCELED, "canceled");
        pl->stop = 1;
    }
    int s = pl->stop;
    pthread_mutex_unlock(&pl->mu);
    return s;
}

/* ---- one HTTP transfer -------------------------------------------------------------------------- */

/* A GET of url into a file (fd at offset off, hashed into h) or into memory (fd < 0). */
typedef struct xfer {
    puller *pl;
    int fd;
    uint64_t off;         /* bytes in the file (or buffer) so far */
    uint64_t limit;       /* the most bytes the file may have (its size), 0 = none */
    hasher *h;
    char *mem;            /* fd < 0: the body, NUL-terminated */
    size_t mem_len;
    long status;          /* of the last response (after redirects) */
    int started, http_error, restarted, overflow, bad_range, write_errno;
    uint64_t got;         /* body bytes of this attempt written */
    char content_range[96], err_code[64], err_msg[256], body[256];
} xfer;

static size_t on_header(char *data, size_t size, size_t n, void *user) {
    xfer *x = user;
    size_t len = size * n;
    char line[512];
    size_t k = len < sizeof line - 1 ? len : sizeof line - 1;
    memcpy(line, data, k);
    line[k] = 0;
    line[strcspn(line, "\r\n")] = 0;
    if (!strncmp(line, "HTTP/", 5)) { /* a new response: a redirect's headers are forgotten */
        const char *sp = strchr(line, ' ');
        x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        x->content_range[0] = x->err_code[0] = x->err_msg[0] = 0;
        return len;
    }
    char *colon = strchr(line, ':');
    if (!colon) return len;
    *colon = 0;
    const char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    if (!strcasecmp(line, "content-range")) snprintf(x->content_range, sizeof x->content_range, "%s", v);
    else if (!strcasecmp(line, "x-error-code")) snprintf(x->err_code, sizeof x->err_code, "%s", v);
    else if (!strcasecmp(line, "x-error-message")) snprintf(x->err_msg, sizeof x->err_msg, "%s", v);
    return len;
}

/* The first body bytes of a response decide what it is: 206 must start where the file ends; 200 to a
 * Range request means the server sends the whole file, so the partial one starts over. */
static int body_start(xfer *x) {
    x->started = 1;
    if (x->status == 206) {
        uint64_t start = 0;
        if (sscanf(x->content_range, "bytes %" SCNu64 "-", &start) != 1 || start != x->off) {
            x->bad_range = 1;
            return -1;
        }
    } else if (x->status == 200) {
        if (x->off > 0 && x->fd >= 0) {
            if (ftruncate(x->fd, 0) != 0) {
                x->write_errno = errno;
                return -1;
            }
            x->restarted = 1;
            hash_reset(x->h, x->h->kind, x->limit);
            x->off = 0;
        }
    } else {
        x->http_error = 1;
    }
    return 0;
}

static size_t on_body(char *data, size_t size, size_t n, void *user) {
    xfer *x = user;
    size_t len = size * n;
    if (!x->started && body_start(x)) return 0;
    if (x->http_error) { /* keep the start of an error body for the message */
        size_t have = strlen(x->body), k = len < sizeof x->body - 1 - have ? len : sizeof x->body - 1 - have;
        memcpy(x->body + have, data, k);
        x->body[have + k] = 0;
        return len;
    }
    if (x->fd < 0) {
        if (x->mem_len + len > PULL_MAX_LISTING) return 0;
        char *m = realloc(x->mem, x->mem_len + len + 1);
        if (!m) return 0;
        memcpy(m + x->mem_len, data, len);
        x->mem = m;
        x->mem_len += len;
        m[x->mem_len] = 0;
        return len;
    }
    if (x->limit && x->off + len > x->limit) {
        x->overflow = 1;
        return 0;
    }
    for (size_t w = 0; w < len;) {
        ssize_t r = pwrite(x->fd, data + w, len - w, (off_t)(x->off + w));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            x->write_errno = r < 0 ? errno : EIO;
            return 0;
        }
        w += (size_t)r;
    }
    hash_update(x->h, data, len);
    x->off += len;
    x->got += len;
    if (account(x->pl, (int64_t)len, 0)) return 0;
    return len;
}

static int on_xferinfo(void *user, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
    return stopped(((xfer *)user)->pl);
}

/* Performs one GET (Range from x->off when resume is set) and returns curl's result. */
static CURLcode http_get(CURL *c, puller *pl, const char *url, xfer *x, int resume) {
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#endif
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "sluice/" SL_VERSION_STRING "; libcurl/" LIBCURL_VERSION);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L); /* a stalled connection: give up and resume */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 30L);
    if (pl->token && *pl->token) { /* bearer auth: curl sends it to this host only, never after a redirect
                                      to another one (CURLOPT_UNRESTRICTED_AUTH stays off) */
        curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BEARER);
        curl_easy_setopt(c, CURLOPT_XOAUTH2_BEARER, pl->token);
    }
    char range[32];
    if (resume && x->off > 0) {
        snprintf(range, sizeof range, "%" PRIu64 "-", x->off);
        curl_easy_setopt(c, CURLOPT_RANGE, range);
    }
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_xferinfo);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, x);
    x->status = 0;
    x->started = x->http_error = x->bad_range = x->overflow = 0;
    x->got = 0;
    x->body[0] = x->content_range[0] = x->err_code[0] = x->err_msg[0] = 0;
    CURLcode rc = curl_easy_perform(c);
    if (!x->started && rc == CURLE_OK) { /* an empty body: decide on the status alone */
        if (x->status == 200 || x->status == 206) {
            if (x->status == 200 && x->off > 0) body_start(x);
            x->started = 1;
        } else {
            x->http_error = 1;
        }
    }
    return rc;
}

/* The message for an HTTP error answer about `what` (the repository, or one of its files). */
static sl_status http_error(puller *pl, const xfer *x, const char *what, sl_error *err) {
    const char *repo = pl->p->repo, *rev = pl->p->revision ? pl->p->revision : "main";
    const char *detail = x->err_msg[0] ? x->err_msg : "";
    if (x->status == 401 || x->status == 403) {
        if (!strcmp(x->err_code, "RepoNotFound"))
            return sl_err(err, SL_ENOENT, "%s: repository not found at %s (HTTP %ld; if it is private, set HF_TOKEN "
                          "to a token that can read it)", repo, pl->endpoint, x->status);
        if (pl->token && *pl->token)
            return sl_err(err, SL_EINVAL, "%s: access denied (HTTP %ld%s%s): the token in HF_TOKEN cannot read it; "
                          "for a gated model accept its terms on the model page", what, x->status, *detail ? ": " : "",
                          detail);
        return sl_err(err, SL_EINVAL, "%s: access denied (HTTP %ld): the repository is gated or private; set HF_TOKEN to "
                      "a token that can read it (https://huggingface.co/settings/tokens)", what, x->status);
    }
    if (x->status == 404) {
        if (!strcmp(x->err_code, "RevisionNotFound"))
            return sl_err(err, SL_ENOENT, "%s: revision '%s' not found", repo, rev);
        if (!strcmp(x->err_code, "EntryNotFound"))
            return sl_err(err, SL_ENOENT, "%s: not found in %s at %s", what, repo, pl->commit);
        return sl_err(err, SL_ENOENT, "%s: not found at %s (HTTP 404%s%s)", what, pl->endpoint, *detail ? ": " : "", detail);
    }
    return sl_err(err, SL_EIO, "%s: HTTP %ld from the server%s%s", what, x->status, *detail ? ": " : "", detail);
}

/* 1 for answers worth retrying: the server's trouble, not the request's. */
static int retryable_status(long s) { return s == 408 || s == 429 || s >= 500 || s == 0; }

static double backoff_s(int failures) {
    double s = 0.25;
    for (int i = 1; i < failures && s < 8; i++) s *= 2;
    return s;
}

/* ---- the listing -------------------------------------------------------------------------------- */

/* Percent-encodes s for a URL; keep_slash keeps '/' (a path) or encodes it (a revision like refs/pr/1). */
static char *url_escape(CURL *c, const char *s, int keep_slash) {
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
        st = sl_err(err, SL_EFORMAT, "%s: the hub's answer has no commit \"sha\" of 40 hex digits or no \"siblings\"",
                    pl->p->repo);
        goto done;
    }
    snprintf(pl->commit, sizeof pl->commit, "%s", sha->valuestring);
    int n = cJSON_GetArraySize(sib);
    pl->files = calloc((size_t)(n > 0 ? n : 1), sizeof *pl->files);
    if (!pl->files) { st = sl_err(err, SL_ENOMEM, "out of memory"); goto done; }
    const cJSON *s;
    cJSON_ArrayForEach(s, sib) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(s, "rfilename");
        if (!cJSON_IsString(name)) continue;
        if (!pull_path_safe(name->valuestring)) {
            st = sl_err(err, SL_EFORMAT, "%s: the hub lists a file name that is not a safe relative path: '%.200s'",
                        pl->p->repo, name->valuestring);
            goto done;
        }
        pfile *f = &pl->files[pl->n_files];
        if (!(f->name = strdup(name->valuestring))) { st = sl_err(err, SL_ENOMEM, "out of memory"); goto done; }
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

/* GETs the listing, with retries on network errors and 5xx. */
static sl_status fetch_listing(puller *pl, CURL *c, sl_error *err) {
    const char *rev = pl->p->revision ? pl->p->revision : "main";
    char *erev = url_escape(c, rev, 0), *url = erev ? xasprintf("%s/api/models/%s/revision/%s?blobs=true", pl->endpoint,
                                                                 pl->p->repo, erev) : NULL;
    free(erev);
    if (!url) return sl_err(err, SL_ENOMEM, "out of memory");
    hasher none = {0};
    xfer x = {.pl = pl, .fd = -1, .h = &none};
    sl_status st = SL_OK;
    for (int failures = 0;;) {
        free(x.mem);
        x.mem = NULL;
        x.mem_len = 0;
        CURLcode rc = http_get(c, pl, url, &x, 0);
        if (rc == CURLE_OK && !x.http_error && x.mem) {
            st = parse_listing(pl, x.mem, err);
            break;
        }
        if (rc == CURLE_OK && x.http_error && !retryable_status(x.status)) {
            st = http_error(pl, &x, pl->p->repo, err);
            break;
        }
        if (stopped(pl)) { st = pl->err.status ? pl->err.status : SL_ECANCELED; *err = pl->err; break; }
        if (++failures > pl->retries) {
            st = rc != CURLE_OK ? sl_err(err, SL_EIO, "%s: cannot list the repository at %s: %s", pl->p->repo, pl->endpoint,
                                         curl_easy_strerror(rc))
                                : http_error(pl, &x, pl->p->repo, err);
            break;
        }
        pl->res.n_retries++;
        sleep_s(backoff_s(failures));
    }
    free(x.mem);
    free(url);
    return st;
}

/* ---- one file ----------------------------------------------------------------------------------- */

static int hash_kind(const pfile *f) { return f->sha256[0] ? 1 : f->blob_id[0] && f->have_size ? 2 : 0; }

/* 1 if the file's bytes (size n, digest) are what the listing says. */
static int matches(const pfile *f, uint64_t n, const char *digest) {
    if (f->have_size && n != f->size) return 0;
    if (f->sha256[0]) return !strcmp(digest, f->sha256);
    if (f->blob_id[0] && f->have_size) return !strcmp(digest, f->blob_id);
    return 1;
}

/* 1 if final_path already holds the file: in the cache, a blob of the right size (blobs are renamed into
 * place verified); in a plain directory, the right size and hash. */
static sl_status already_present(puller *pl, const pfile *f, int *present, sl_error *err) {
    struct stat sb;
    *present = 0;
    if (stat(f->final_path, &sb) != 0 || !S_ISREG(sb.st_mode)) return SL_OK;
    if (!f->have_size || (uint64_t)sb.st_size != f->size) return SL_OK;
    if (pl->cache_layout && (f->sha256[0] || f->blob_id[0])) { *present = 1; return SL_OK; }
    int fd = open(f->final_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return SL_OK;
    hasher h;
    hash_reset(&h, hash_kind(f), f->size);
    sl_status st = hash_fd(&h, fd, f->size, f->final_path, err);
    close(fd);
    if (st) return st;
    char d[65];
    hash_final(&h, d);
    *present = matches(f, f->size, d);
    return SL_OK;
}

/* Truncates, fsyncs and renames the .incomplete over the final name while its lock is still held (fd
 * stays open: the caller closes it), so that a pull waiting for the lock finds it gone, never complete
 * under its temporary name. */
static sl_status commit_file(int fd, uint64_t size, const pfile *f, sl_error *err) {
    if (ftruncate(fd, (off_t)size) != 0 || fsync(fd) != 0)
        return sl_err(err, sl_status_from_errno(errno), "%s: cannot finish %s: %s", f->name, f->tmp_path, strerror(errno));
    if (rename(f->tmp_path, f->final_path) != 0)
        return sl_err(err, sl_status_from_errno(errno), "%s: cannot rename %s to %s: %s", f->name, f->tmp_path,
                      f->final_path, strerror(errno));
    return SL_OK;
}

/* One of a pull's counts (sl_pull_result), under the pull's lock. */
#define TALLY(pl, field)                \
    do {                                \
        pthread_mutex_lock(&(pl)->mu);  \
        (pl)->res.field++;              \
        pthread_mutex_unlock(&(pl)->mu); \
    } while (0)

/* One file's download: its .incomplete (locked), the running hash of its bytes, the transfer. */
typedef struct dl {
    puller *pl;
    pfile *f;
    CURL *c;
    char *url;
    int fd;
    hasher h;
    xfer x;
    int failures, corrupt, counted_resume;
} dl;

/* A file found complete: counted present, its bytes no longer needed. */
static void found_present(puller *pl, const pfile *f) {
    TALLY(pl, n_present);
    account(pl, 0, -(int64_t)f->size);
}

/* Opens and locks the .incomplete; another pull of the same file holds the lock until it has renamed
 * it into place, so after waiting the file may be present (*present). */
static sl_status dl_lock(dl *d, int *present, sl_error *err) {
    const pfile *f = d->f;
    sl_status st;
    for (;;) {
        d->fd = open(f->tmp_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (d->fd < 0) return sl_err(err, sl_status_from_errno(errno), "%s: cannot create %s: %s", f->name, f->tmp_path, strerror(errno));
        while (flock(d->fd, LOCK_EX) != 0 && errno == EINTR) {}
        struct stat a, b;
        if (fstat(d->fd, &a) == 0 && stat(f->tmp_path, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev) return SL_OK;
        close(d->fd); /* it was renamed into place (or removed) while we waited */
        d->fd = -1;
        if ((st = already_present(d->pl, f, present, err))) return st;
        if (*present) {
            found_present(d->pl, f);
            return SL_OK;
        }
    }
}

/* A partial file from an earlier pull: hashed and resumed from its end (emptied when longer than the
 * file). */
static sl_status dl_resume(dl *d, sl_error *err) {
    const pfile *f = d->f;
    struct stat sb;
    sl_status st;
    if (fstat(d->fd, &sb) != 0 || sb.st_size <= 0) return SL_OK;
    uint64_t have = (uint64_t)sb.st_size;
    if (f->have_size && have > f->size) {
        if (ftruncate(d->fd, 0) != 0) return sl_err(err, sl_status_from_errno(errno), "%s: %s", f->tmp_path, strerror(errno));
        return SL_OK;
    }
    if ((st = hash_fd(&d->h, d->fd, have, f->tmp_path, err))) return st;
    d->x.off = have;
    account(d->pl, 0, -(int64_t)have);
    TALLY(d->pl, n_resumed);
    return SL_OK;
}

/* Starts the file over from an empty .incomplete; its `needed` bytes are needed again. */
static sl_status dl_restart(dl *d, uint64_t needed, sl_error *err) {
    d->x.off = 0;
    hash_reset(&d->h, d->h.kind, d->f->size);
    if (ftruncate(d->fd, 0) != 0) return sl_err(err, sl_status_from_errno(errno), "%s: %s", d->f->tmp_path, strerror(errno));
    account(d->pl, 0, (int64_t)needed);
    return SL_OK;
}

/* The pull's error when it was stopped (another file's error, or a cancel). */
static sl_status dl_stopped(dl *d, sl_error *err) {
    *err = d->pl->err;
    return SL_ECANCELED;
}

/* One GET from where the file ends. *again: the server refused the range (416: the partial file is not
 * a prefix of it) and the file starts over. Returns SL_OK, or the error that ends the download. */
static sl_status dl_get(dl *d, CURLcode *rc, int *again, sl_error *err) {
    const pfile *f = d->f;
    xfer *x = &d->x;
    *again = 0;
    if (x->off > 0 && !d->counted_resume) {
        d->counted_resume = 1;
        TALLY(d->pl, n_resumed);
    }
    uint64_t before = x->off;
    *rc = http_get(d->c, d->pl, d->url, x, 1);
    if (x->restarted) { /* the server ignored the Range: those bytes are needed again */
        account(d->pl, 0, (int64_t)before);
        x->restarted = 0;
    }
    if (x->write_errno) {
        int e = x->write_errno;
        return sl_err(err, sl_status_from_errno(e), "%s: cannot write %s: %s", f->name, f->tmp_path, strerror(e));
    }
    if (stopped(d->pl)) return dl_stopped(d, err);
    if (*rc == CURLE_OK && x->http_error && x->status == 416) {
        *again = 1;
        return dl_restart(d, before, err);
    }
    if (*rc == CURLE_OK && x->http_error && !retryable_status(x->status)) return http_error(d->pl, x, f->name, err);
    return SL_OK;
}

/* A download that looks complete (or overflowed, or began at the wrong byte): committed when its size
 * and hash match (*done); else counted corrupt and started over, the error after PULL_MAX_CORRUPT. */
static sl_status dl_check(dl *d, int *done, sl_error *err) {
    const pfile *f = d->f;
    const xfer *x = &d->x;
    const int kind = d->h.kind;
    char dg[65];
    hasher fin = d->h; /* the running hash continues if this is not the end after all */
    hash_final(&fin, dg);
    *done = 0;
    if (!x->overflow && !x->bad_range && matches(f, x->off, dg)) {
        sl_status st = commit_file(d->fd, x->off, f, err);
        if (!st) TALLY(d->pl, n_fetched);
        *done = 1;
        return st;
    }
    if (!x->bad_range && ++d->corrupt >= PULL_MAX_CORRUPT) {
        sl_status st = x->overflow ? sl_err(err, SL_ECHECKSUM, "%s: the server sent more than its %" PRIu64 " bytes, %d times",
                                            f->name, f->size, d->corrupt)
                                   : sl_err(err, SL_ECHECKSUM, "%s: %s mismatch, %d downloads in a row (expected %s)", f->name,
                                            kind == 1 ? "sha256" : kind == 2 ? "git blob id" : "size", d->corrupt,
                                            kind == 1 ? f->sha256 : kind == 2 ? f->blob_id : "its listed size");
        unlink(f->tmp_path); /* known bad: nothing to resume from */
        return st;
    }
    if (!x->bad_range) TALLY(d->pl, n_corrupt);
    /* wrong bytes somewhere: nothing of them can be trusted, start from an empty file */
    return dl_restart(d, x->off, err);
}

/* Attempts until the file is complete and verified, or the pull stops, or the attempts run out. */
static sl_status dl_run(dl *d, sl_error *err) {
    const pfile *f = d->f;
    xfer *x = &d->x;
    sl_status st;
    d->counted_resume = x->off > 0;
    for (int attempt = 0;; attempt++) {
        if (stopped(d->pl)) return dl_stopped(d, err);
        CURLcode rc = CURLE_OK;
        int complete = f->have_size && x->off == f->size; /* nothing left to ask for: check it */
        if (!complete) {
            int again;
            if ((st = dl_get(d, &rc, &again, err))) return st;
            if (again) continue;
            complete = rc == CURLE_OK && !x->http_error && (!f->have_size || x->off == f->size);
        }
        if (complete || x->overflow || x->bad_range) {
            int done;
            if ((st = dl_check(d, &done, err)) || done) return st;
            continue;
        }
        /* a broken connection, a timeout, a 5xx: resume; only attempts that got nothing count */
        d->failures = x->got > 0 ? 0 : d->failures + 1;
        if (d->failures > d->pl->retries || attempt >= PULL_MAX_ATTEMPTS)
            return rc != CURLE_OK ? sl_err(err, SL_EIO, "%s: %s (%d attempts)", f->name, curl_easy_strerror(rc), attempt + 1)
                   : x->http_error ? http_error(d->pl, x, f->name, err)
                                   : sl_err(err, SL_EIO, "%s: the server's answer ended early (%d attempts)", f->name,
                                            attempt + 1);
        TALLY(d->pl, n_retries);
        if (d->failures) sleep_s(backoff_s(d->failures));
    }
}

/* Downloads one file to its final name (see the file comment for the rules). Returns the error that
 * ends the pull; a canceled pull's partial file stays for the next one. */
static sl_status fetch_file(puller *pl, CURL *c, pfile *f, sl_error *err) {
    int present = 0;
    sl_status st = already_present(pl, f, &present, err);
    if (st) return st;
    if (present) {
        found_present(pl, f);
        return SL_OK;
    }
    dl d = {.pl = pl, .f = f, .c = c, .fd = -1};
    char *epath = url_escape(c, f->name, 1);
    d.url = epath ? xasprintf("%s/%s/resolve/%s/%s", pl->endpoint, pl->p->repo, pl->commit, epath) : NULL;
    free(epath);
    if (!d.url) return sl_err(err, SL_ENOMEM, "out of memory");
    if ((st = mkdir_parents(f->tmp_path, err)) || (st = dl_lock(&d, &present, err)) || present) goto done;
    hash_reset(&d.h, hash_kind(f), f->size);
    d.x = (xfer){.pl = pl, .fd = d.fd, .h = &d.h, .limit = f->have_size ? f->size : 0};
    if ((st = dl_resume(&d, err))) goto done;
    st = dl_run(&d, err);
done:
    if (d.fd >= 0) close(d.fd);
    free(d.url);
    return st;
}

/* ---- workers ------------------------------------------------------------------------------------ */

static void *worker(void *arg) {
    puller *pl = arg;
    CURL *c = curl_easy_init();
    if (!c) {
        sl_error e;
        sl_err(&e, SL_ENOMEM, "cannot start a curl handle");
        fail_pull(pl, &e);
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&pl->mu);
        int i = pl->stop || pl->next >= pl->n_queue ? -1 : pl->queue[pl->next++];
        pthread_mutex_unlock(&pl->mu);
        if (i < 0) break;
        sl_error e = {0};
        if (fetch_file(pl, c, &pl->files[i], &e) != SL_OK) {
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
        account(pl, 0, (int64_t)pl->files[i].size);
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
        st = sl_err(err, SL_EFORMAT, "%s: model.safetensors.index.json has no \"weight_map\"", pl->p->repo);
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
        if (!(*out_dir = strdup(pl->p->out_dir))) return sl_err(err, SL_ENOMEM, "out of memory");
    } else {
        char *root = cache_root(pl->p);
        if (!root) return sl_err(err, SL_EINVAL, "no cache directory: set HF_HOME (or HOME), or give an output directory");
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
        *out_dir = pl->repo_dir ? xasprintf("%s/snapshots/%s", pl->repo_dir, pl->commit) : NULL;
        if (!*out_dir) return sl_err(err, SL_ENOMEM, "out of memory");
        pl->cache_layout = 1;
    }
    for (int i = 0; i < pl->n_files; i++) {
        pfile *f = &pl->files[i];
        if (pl->cache_layout) {
            const char *id = f->sha256[0] ? f->sha256 : f->blob_id;
            char *blob = id[0] ? xasprintf("blobs/%s", id) : xasprintf("blobs/%s-%d", pl->commit, i);
            f->final_path = blob ? fio_join(pl->repo_dir, blob) : NULL;
            f->link_path = fio_join(*out_dir, f->name);
            free(blob);
        } else {
            f->final_path = fio_join(*out_dir, f->name);
        }
        f->tmp_path = f->final_path ? xasprintf("%s.incomplete", f->final_path) : NULL;
        if (!f->final_path || !f->tmp_path || (pl->cache_layout && !f->link_path)) return sl_err(err, SL_ENOMEM, "out of memory");
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
        if (!target) return sl_err(err, SL_ENOMEM, "out of memory");
        target[0] = 0;
        for (int d = 0; d < depth; d++) strcat(target, "../");
        strcat(target, "blobs/");
        strcat(target, blob);
        ssize_t n = readlink(f->link_path, want, sizeof want - 1);
        int ok = n >= 0 && (size_t)n == strlen(target) && !memcmp(want, target, (size_t)n);
        sl_status st = SL_OK;
        if (!ok) {
            st = mkdir_parents(f->link_path, err);
            if (!st) {
                unlink(f->link_path);
                if (symlink(target, f->link_path) != 0)
                    st = sl_err(err, sl_status_from_errno(errno), "%s: cannot link %s: %s", f->name, f->link_path, strerror(errno));
            }
        }
        free(target);
        if (st) return st;
    }
    const char *rev = pl->p->revision ? pl->p->revision : "main";
    if (!strcmp(rev, pl->commit) || !pull_path_safe(rev)) return SL_OK;
    char *ref = xasprintf("%s/refs/%s", pl->repo_dir, rev), *tmp = ref ? xasprintf("%s.tmp.%d", ref, (int)getpid()) : NULL;
    sl_status st = !ref || !tmp ? sl_err(err, SL_ENOMEM, "out of memory") : mkdir_parents(ref, err);
    if (!st) {
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) st = sl_err(err, sl_status_from_errno(errno), "%s: %s", tmp, strerror(errno));
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

sl_status sl_pull(const sl_pull_params *params, sl_progress_fn progress, void *user, char **out_dir,
                  sl_pull_result *res, sl_error *err) {
    *out_dir = NULL;
    if (!params || !repo_name_ok(params->repo))
        return sl_err(err, SL_EINVAL, "'%s' is not a repository name (ORG/NAME: letters, digits, '-', '_', '.')",
                      params && params->repo ? params->repo : "");
    puller pl;
    memset(&pl, 0, sizeof pl);
    pl.p = params;
    pl.progress = progress;
    pl.user = user;
    pl.retries = params->retries > 0 ? params->retries : PULL_DEFAULT_RETRIES;
    pthread_mutex_init(&pl.mu, NULL);
    char *dir = NULL;
    sl_status st = SL_OK;
    CURL *c = NULL;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        pthread_mutex_destroy(&pl.mu);
        return sl_err(err, SL_EIO, "cannot initialise libcurl");
    }
    const char *ep = params->endpoint ? params->endpoint : env("HF_ENDPOINT") ? env("HF_ENDPOINT") : "https://huggingface.co";
    pl.endpoint = strdup(ep);
    pl.token = find_token(params);
    if (!pl.endpoint || !pl.token || !(c = curl_easy_init())) { st = sl_err(err, SL_ENOMEM, "out of memory"); goto done; }
    for (size_t n = strlen(pl.endpoint); n > 0 && pl.endpoint[n - 1] == '/'; n--) pl.endpoint[n - 1] = 0;
    if (strncmp(pl.endpoint, "http://", 7) && strncmp(pl.endpoint, "https://", 8)) {
        st = sl_err(err, SL_EINVAL, "endpoint '%s' is not an http:// or https:// URL (HF_ENDPOINT)", pl.endpoint);
        goto done;
    }
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
        st = sl_err(err, SL_ENOENT, "%s: no file at %s matches %s", params->repo, pl.commit,
                    params->n_include ? "the --include patterns" : "what sluice pack reads (config.json, *.safetensors)");
        goto done;
    }
    if ((st = lay_out(&pl, &dir, err))) goto done;
    if (!(pl.queue = malloc((size_t)pl.n_files * sizeof *pl.queue))) { st = sl_err(err, SL_ENOMEM, "out of memory"); goto done; }
    if (index >= 0) { /* the index first: it says which *.safetensors are the model's */
        if ((st = run_workers(&pl, index, 1, err))) goto done;
        if ((st = select_shards(&pl, &pl.files[index], err))) goto done;
        pl.files[index].selected = 0; /* done */
        pl.res.n_files = 1;
        for (int i = 0; i < pl.n_files; i++) pl.res.n_files += pl.files[i].selected;
    }
    if ((st = run_workers(&pl, 0, pl.n_files, err))) goto done;
    if (index >= 0) pl.files[index].selected = 1;
    if (pl.cache_layout && (st = link_snapshot(&pl, err))) goto done;
done:
    if (res) *res = pl.res;
    if (st == SL_OK) *out_dir = dir;
    else free(dir);
    for (int i = 0; i < pl.n_files; i++) {
        free(pl.files[i].name);
        free(pl.files[i].final_path);
        free(pl.files[i].tmp_path);
        free(pl.files[i].link_path);
    }
    free(pl.files);
    free(pl.queue);
    free(pl.endpoint);
    if (pl.token) explicit_bzero(pl.token, strlen(pl.token));
    free(pl.token);
    free(pl.repo_dir);
    if (c) curl_easy_cleanup(c);
    curl_global_cleanup();
    pthread_mutex_destroy(&pl.mu);
    return st;
}
