/*
 * transfer.c — sl_pull's transfers (pull_int.h): the hash a file is checked against (sha256 for LFS
 * files, the git blob id for the others), one HTTP GET into a file or into memory (libcurl, Range for a
 * resume, the first body bytes deciding whether a 200 restarts the file), the messages of HTTP errors,
 * the retry pauses, and one file's whole download: present already, locked, resumed, fetched, checked,
 * renamed into place. The rules are pull.c's first comment.
 *
 * Sections: hashing; retries; one HTTP transfer; one file.
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pull/pull_int.h"
#include "util/err.h"
#include "util/fileio.h"

/* ---- hashing ----------------------------------------------------------------------------------- */

static void to_hex(const uint8_t *d, size_t n, char *out) {
    for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

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
    if (!buf) return err_set(err, SL_ENOMEM, "out of memory");
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

/* ---- retries ----------------------------------------------------------------------------------- */

void pull_sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* ---- one HTTP transfer -------------------------------------------------------------------------- */

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
    if (pull_account(x->pl, (int64_t)len, 0)) return 0;
    return len;
}

static int on_xferinfo(void *user, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
    return pull_stopped(((xfer *)user)->pl);
}

/* Performs one GET (Range from x->off when resume is set) and returns curl's result. */
CURLcode pull_http_get(CURL *c, puller *pl, const char *url, xfer *x, int resume) {
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
sl_status pull_http_error(puller *pl, const xfer *x, const char *what, sl_error *err) {
    const char *repo = pl->p->repo, *rev = pl->p->revision ? pl->p->revision : "main";
    const char *detail = x->err_msg[0] ? x->err_msg : "";
    if (x->status == 401 || x->status == 403) {
        if (!strcmp(x->err_code, "RepoNotFound"))
            return err_set(err, SL_ENOENT, "%s: repository not found at %s (HTTP %ld; if it is private, set HF_TOKEN "
                          "to a token that can read it)", repo, pl->endpoint, x->status);
        if (pl->token && *pl->token)
            return err_set(err, SL_EINVAL, "%s: access denied (HTTP %ld%s%s): the token in HF_TOKEN cannot read it; "
                          "for a gated model accept its terms on the model page", what, x->status, *detail ? ": " : "",
                          detail);
        return err_set(err, SL_EINVAL, "%s: access denied (HTTP %ld): the repository is gated or private; set HF_TOKEN to "
                      "a token that can read it (https://huggingface.co/settings/tokens)", what, x->status);
    }
    if (x->status == 404) {
        if (!strcmp(x->err_code, "RevisionNotFound"))
            return err_set(err, SL_ENOENT, "%s: revision '%s' not found", repo, rev);
        if (!strcmp(x->err_code, "EntryNotFound"))
            return err_set(err, SL_ENOENT, "%s: not found in %s at %s", what, repo, pl->commit);
        return err_set(err, SL_ENOENT, "%s: not found at %s (HTTP 404%s%s)", what, pl->endpoint, *detail ? ": " : "", detail);
    }
    return err_set(err, SL_EIO, "%s: HTTP %ld from the server%s%s", what, x->status, *detail ? ": " : "", detail);
}

/* 1 for answers worth retrying: the server's trouble, not the request's. */
int pull_retryable(long s) { return s == 408 || s == 429 || s >= 500 || s == 0; }

double pull_backoff_s(int failures) {
    double s = 0.25;
    for (int i = 1; i < failures && s < 8; i++) s *= 2;
    return s;
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
        return err_set(err, err_from_errno(errno), "%s: cannot finish %s: %s", f->name, f->tmp_path, strerror(errno));
    if (rename(f->tmp_path, f->final_path) != 0)
        return err_set(err, err_from_errno(errno), "%s: cannot rename %s to %s: %s", f->name, f->tmp_path,
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
    pull_account(pl, 0, -(int64_t)f->size);
}

/* Opens and locks the .incomplete; another pull of the same file holds the lock until it has renamed
 * it into place, so after waiting the file may be present (*present). */
static sl_status dl_lock(dl *d, int *present, sl_error *err) {
    const pfile *f = d->f;
    sl_status st;
    for (;;) {
        d->fd = open(f->tmp_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (d->fd < 0) return err_set(err, err_from_errno(errno), "%s: cannot create %s: %s", f->name, f->tmp_path, strerror(errno));
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
        if (ftruncate(d->fd, 0) != 0) return err_set(err, err_from_errno(errno), "%s: %s", f->tmp_path, strerror(errno));
        return SL_OK;
    }
    if ((st = hash_fd(&d->h, d->fd, have, f->tmp_path, err))) return st;
    d->x.off = have;
    pull_account(d->pl, 0, -(int64_t)have);
    TALLY(d->pl, n_resumed);
    return SL_OK;
}

/* Starts the file over from an empty .incomplete; its `needed` bytes are needed again. */
static sl_status dl_restart(dl *d, uint64_t needed, sl_error *err) {
    d->x.off = 0;
    hash_reset(&d->h, d->h.kind, d->f->size);
    if (ftruncate(d->fd, 0) != 0) return err_set(err, err_from_errno(errno), "%s: %s", d->f->tmp_path, strerror(errno));
    pull_account(d->pl, 0, (int64_t)needed);
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
    *rc = pull_http_get(d->c, d->pl, d->url, x, 1);
    if (x->restarted) { /* the server ignored the Range: those bytes are needed again */
        pull_account(d->pl, 0, (int64_t)before);
        x->restarted = 0;
    }
    if (x->write_errno) {
        int e = x->write_errno;
        return err_set(err, err_from_errno(e), "%s: cannot write %s: %s", f->name, f->tmp_path, strerror(e));
    }
    if (pull_stopped(d->pl)) return dl_stopped(d, err);
    if (*rc == CURLE_OK && x->http_error && x->status == 416) {
        *again = 1;
        return dl_restart(d, before, err);
    }
    if (*rc == CURLE_OK && x->http_error && !pull_retryable(x->status)) return pull_http_error(d->pl, x, f->name, err);
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
        sl_status st = x->overflow ? err_set(err, SL_ECHECKSUM, "%s: the server sent more than its %" PRIu64 " bytes, %d times",
                                            f->name, f->size, d->corrupt)
                                   : err_set(err, SL_ECHECKSUM, "%s: %s mismatch, %d downloads in a row (expected %s)", f->name,
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
        if (pull_stopped(d->pl)) return dl_stopped(d, err);
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
            return rc != CURLE_OK ? err_set(err, SL_EIO, "%s: %s (%d attempts)", f->name, curl_easy_strerror(rc), attempt + 1)
                   : x->http_error ? pull_http_error(d->pl, x, f->name, err)
                                   : err_set(err, SL_EIO, "%s: the server's answer ended early (%d attempts)", f->name,
                                            attempt + 1);
        TALLY(d->pl, n_retries);
        if (d->failures) pull_sleep_s(pull_backoff_s(d->failures));
    }
}

/* Downloads one file to its final name (see the file comment for the rules). Returns the error that
 * ends the pull; a canceled pull's partial file stays for the next one. */
sl_status pull_fetch_file(puller *pl, CURL *c, pfile *f, sl_error *err) {
    int present = 0;
    sl_status st = already_present(pl, f, &present, err);
    if (st) return st;
    if (present) {
        found_present(pl, f);
        return SL_OK;
    }
    dl d = {.pl = pl, .f = f, .c = c, .fd = -1};
    char *epath = pull_url_escape(c, f->name, 1);
    d.url = epath ? pull_asprintf("%s/%s/resolve/%s/%s", pl->endpoint, pl->p->repo, pl->commit, epath) : NULL;
    free(epath);
    if (!d.url) return err_set(err, SL_ENOMEM, "out of memory");
    if ((st = pull_mkdir_parents(f->tmp_path, err)) || (st = dl_lock(&d, &present, err)) || present) goto done;
    hash_reset(&d.h, hash_kind(f), f->size);
    d.x = (xfer){.pl = pl, .fd = d.fd, .h = &d.h, .limit = f->have_size ? f->size : 0};
    if ((st = dl_resume(&d, err))) goto done;
    st = dl_run(&d, err);
done:
    if (d.fd >= 0) close(d.fd);
    free(d.url);
    return st;
}
