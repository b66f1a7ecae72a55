/*
 * pull_int.h — what the two files of sl_pull share (internal to src/pull/): pull.c (the listing, the
 * workers, selection and layout, sl_pull) and transfer.c (one HTTP transfer, one verified file). The
 * rules they keep are pull.c's first comment.
 */
#ifndef SL_PULL_INT_H
#define SL_PULL_INT_H

#include <curl/curl.h>
#include <nettle/sha1.h>
#include <nettle/sha2.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

enum {
    PULL_DEFAULT_JOBS = 4,
    PULL_DEFAULT_RETRIES = 6,
    PULL_MAX_CORRUPT = 3,         /* downloads of one file that may fail their check */
    PULL_MAX_ATTEMPTS = 1000,     /* attempts of one file in all, however much each one got */
    PULL_MAX_LISTING = 64 << 20,  /* bytes of API JSON we accept */
};

/* What a file is checked against, and the running hash of its bytes. */
typedef struct hasher {
    int kind; /* 0 size only, 1 sha256 (LFS), 2 git blob sha1 ("blob <size>\0" + bytes) */
    struct sha256_ctx s256;
    struct sha1_ctx s1;
} hasher;

/* ---- the state of a pull (pull.c) ---------------------------------------------------------------- */

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

/* 1 once the pull is stopped (an error or a cancel). */
int pull_stopped(puller *pl);
/* Adjusts the bytes still needed (a file found present, a resumed prefix, a restart) and reports
 * progress; returns 1 when the pull is stopped. */
int pull_account(puller *pl, int64_t d_done, int64_t d_total);
/* vasprintf that returns the string, or NULL when out of memory. */
char *pull_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Percent-encodes s for a URL; keep_slash keeps '/' (a path) or encodes it (a revision like
 * refs/pr/1). malloc'ed; NULL when out of memory. */
char *pull_url_escape(CURL *c, const char *s, int keep_slash);
/* mkdir -p of the directory part of path (everything before its last '/'). */
sl_status pull_mkdir_parents(const char *path, sl_error *err);

/* ---- one HTTP transfer, one file (transfer.c) ---------------------------------------------------- */

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

/* Performs one GET (Range from x->off when resume is set) and returns curl's result. */
CURLcode pull_http_get(CURL *c, puller *pl, const char *url, xfer *x, int resume);
/* The message for an HTTP error answer about `what` (the repository, or one of its files). */
sl_status pull_http_error(puller *pl, const xfer *x, const char *what, sl_error *err);
/* 1 for answers worth retrying: the server's trouble, not the request's. */
int pull_retryable(long status);
/* The pause before retry number `failures` (0.25 s doubling, at most 8 s), and a sleep through EINTR. */
double pull_backoff_s(int failures);
void pull_sleep_s(double s);
/* Downloads one file to its final name (see pull.c's first comment for the rules). Returns the error
 * that ends the pull; a canceled pull's partial file stays for the next one. */
sl_status pull_fetch_file(puller *pl, CURL *c, pfile *f, sl_error *err);

#endif
