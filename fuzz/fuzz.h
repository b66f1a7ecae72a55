/*
 * fuzz.h — shared helpers of the libFuzzer harnesses in fuzz/ (docs/FUZZING.md).
 *
 * Each harness fuzz/fuzz_<name>.c defines LLVMFuzzerTestOneInput for one input a user or a client
 * controls. Parsers that read files get the input through a memfd (fuzz_file), so nothing touches the
 * disk; files the harnesses need (a packed fixture, the demo model) are found under FUZZ_ROOT, the
 * repository root the Makefile compiles in.
 */
#ifndef SL_FUZZ_H
#define SL_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef FUZZ_ROOT
#define FUZZ_ROOT "."
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A path (/proc/self/fd/N) of a memory file holding exactly data[0, n); the same file each call. */
static inline const char *fuzz_file(int which, const void *data, size_t n) {
    static int fd[4] = {-1, -1, -1, -1};
    static char path[4][64];
    if (fd[which] < 0) {
        fd[which] = memfd_create("fuzz", 0);
        if (fd[which] < 0) abort();
        snprintf(path[which], sizeof path[which], "/proc/self/fd/%d", fd[which]);
    }
    if (ftruncate(fd[which], 0) || (n && pwrite(fd[which], data, n, 0) != (ssize_t)n)) abort();
    return path[which];
}

/* data as a NUL-terminated string (malloc'ed; the caller frees). */
static inline char *fuzz_str(const uint8_t *data, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    memcpy(s, data, n);
    s[n] = 0;
    return s;
}

/* A file of the repository, read whole (malloc'ed, NUL-terminated); aborts when missing. */
static inline char *fuzz_repo_file(const char *rel, size_t *len) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", FUZZ_ROOT, rel);
    FILE *f = fopen(p, "rb");
    if (!f) { fprintf(stderr, "fuzz: cannot open %s (run `make fuzz`, which makes it)\n", p); abort(); }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) abort();
    b[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return b;
}

#endif
