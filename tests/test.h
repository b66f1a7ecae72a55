/*
 * test.h — a small test runner: TEST(name) registers a case; FIXTURE_TEST registers one case per
 * fixture. CHECK fails the current case (and returns from it) with file:line and the condition.
 * `build/test_sluice [FILTER]` runs every case whose name contains FILTER; it prints the run's random
 * seed first ($SLUICE_TEST_SEED repeats it), and last a line "files: FILE N ..." (cases run per source
 * file, which tools/run_tests.sh checks against tests/MANIFEST) and "N passed, N failed".
 */
#ifndef SL_TEST_H
#define SL_TEST_H

#include <stdint.h>
#include <stdio.h>

typedef void (*test_fn)(const char *arg);
void test_register(const char *name, test_fn fn, const char *arg, const char *file);
void test_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int test_failed(void);

#define TEST(name)                                                                               \
    static void name(const char *arg);                                                           \
    __attribute__((constructor)) static void reg_##name(void) {                                  \
        test_register(#name, name, 0, __FILE__);                                                 \
    }                                                                                            \
    static void name(const char *arg)

/* One case per fixture directory under tests/data: every tests/data/NAME with a ref.json and a config.json
 * that is not an MLX checkpoint (MLX ones have a top-level "quantization"; test_mlx.c takes them). The
 * list is read when the runner starts (test_main.c), so a new family's fixture needs no edit here. */
extern const char *test_fixtures[];
extern const char test_each_fixture[]; /* the arg FIXTURE_TEST registers with: expanded per fixture */
#define FIXTURE_TEST(name)                                                                       \
    static void name(const char *arg);                                                           \
    __attribute__((constructor)) static void reg_##name(void) {                                  \
        test_register(#name, name, test_each_fixture, __FILE__);                                 \
    }                                                                                            \
    static void name(const char *arg)

#define CHECK(c)                                                     \
    do {                                                             \
        if (!(c)) { test_fail(__FILE__, __LINE__, "%s", #c); return; } \
    } while (0)
#define CHECKF(c, ...)                                                 \
    do {                                                               \
        if (!(c)) { test_fail(__FILE__, __LINE__, __VA_ARGS__); return; } \
    } while (0)

/* Helpers (test_main.c). */
/* This run's random seed: $SLUICE_TEST_SEED if set, else from the clock; printed at the start of the
 * run, and main() seeds rand() with it. Tests that draw random inputs seed from it and name it in
 * their failure messages. */
unsigned test_seed(void);
const char *test_tmpdir(void);          /* a fresh directory for this run */
char *test_path(const char *fmt, ...);  /* static buffer rotation of 8: formatted path */
int test_copy_dir(const char *from, const char *to); /* regular files only; 0 on success */
int test_exists(const char *path);
long long test_file_size(const char *path);
int test_dir_has_prefix(const char *dir, const char *prefix); /* any entry starting with prefix */
/* Packs tests/data/<fixture> once per run into the tmp dir; returns the container path. */
const char *test_packed(const char *fixture);
/* Reads a whole file (malloc'ed); NULL on error. */
char *test_read(const char *path, size_t *len);
int test_write(const char *path, const void *data, size_t len);
int test_copy_file(const char *from, const char *to); /* 0 on success */
/* Max over positions of max|a-b| / max|b| for logits [n][V]; a NaN in a is infinitely wrong. */
double test_rel_err(const float *a, const float *b, int n, int V);
/* Runs a shell command; returns its exit code and captures its stdout (and stderr too when
 * merge_stderr), malloc'ed, in *out. */
int test_sh(int merge_stderr, char **out, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Reads the id list `key` ("tokens" or "greedy") of tests/data/<fixture>/ref.json into out (at most
 * max); returns the count, or -1. */
int test_ref_ids(const char *fixture, const char *key, int32_t *out, int max);

/* The first index of the largest of x[0 .. n - 1] (greedy decoding: the lowest id of a tie). */
int32_t test_argmax(const float *x, int n);
/* A fixture's reference prompt: the ids of tests/data/<fixture>/ref.json "tokens". */
typedef struct {
    int32_t tokens[256];
    int n;
} test_toks;
struct slc_file;
/* The prologue of a case on a packed fixture (OPEN_FIXTURE): when path, *path = test_packed(fixture); when toks, its
 * reference prompt (one id at least); when f, the pack opened (slc_open; the caller slc_closes it). 0 on success;
 * else -1 after test_fail at file:line has named the step that failed, nothing left open. */
int test_open_fixture(const char *file, int line, const char *fixture, const char **path, test_toks *toks,
                      struct slc_file *f);
/* test_open_fixture at the caller's line; returns from the case when it fails, as CHECK does. */
#define OPEN_FIXTURE(fixture, path, toks, f)                                                     \
    do {                                                                                         \
        if (test_open_fixture(__FILE__, __LINE__, fixture, path, toks, f)) return;               \
    } while (0)

#endif
