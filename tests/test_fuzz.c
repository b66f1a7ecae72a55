/*
 * test_fuzz.c — the fuzzers' findings (the files of fuzz/regress/NAME, docs/FUZZING.md) replayed in `make test`,
 * through the same entry point the harness fuzz/fuzz_NAME.c drives: each input must give a clean error (or
 * a clean success), and the ASan+UBSan run of the suite (`make asan`) checks that nothing reads freed or
 * unowned memory on the way. Every folder of fuzz/regress must have its replay here.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "family/hf_config.h"
#include "import/gguf.h"
#include "import/hf.h"
#include "import/safetensors.h"
#include "test.h"

/* Calls fn on every file of fuzz/regress/name; returns how many. */
static int each_input(const char *name, void (*fn)(const char *path, const char *data, size_t len)) {
    const char *dir = test_path("fuzz/regress/%s", name);
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char *p = strdup(test_path("%s/%s", dir, e->d_name));
        size_t len = 0;
        char *data = test_read(p, &len);
        if (data) fn(p, data, len), n++;
        free(data);
        free(p);
    }
    closedir(d);
    return n;
}

static void replay_hf_config(const char *path, const char *data, size_t len) {
    char *s = malloc(len + 1);
    memcpy(s, data, len);
    s[len] = 0;
    fam_config c;
    sl_error err = {0};
    sl_status st = hf_parse_config(s, path, &c, &err);
    CHECKF(st == SL_OK || !strncmp(err.msg, path, strlen(path)), "%s: status %d, message '%s'", path, st, err.msg);
    free(s);
}

/* fuzz_safetensors.c's path: st_open on the file */
static void replay_safetensors(const char *path, const char *data, size_t len) {
    (void)data;
    (void)len;
    st_file f;
    sl_error err = {0};
    sl_status st = st_open(path, &f, &err);
    if (!st) st_close(&f);
    CHECKF(st == SL_OK || strstr(err.msg, path), "%s: status %d, message '%s'", path, st, err.msg);
}

/* fuzz_gguf.c's path: the file as a GGUF, then as a model source with every tensor read */
static void replay_gguf(const char *path, const char *data, size_t len) {
    (void)data;
    (void)len;
    gguf_file f;
    sl_error err = {0};
    sl_status st = gguf_open_file(path, &f, &err);
    if (!st) gguf_close_file(&f);
    CHECKF(st == SL_OK || strstr(err.msg, path), "%s: status %d, message '%s'", path, st, err.msg);
    hf_ckpt *ck = NULL;
    st = hf_open(path, &ck, &err);
    CHECKF(st == SL_OK || strstr(err.msg, path), "%s: status %d, message '%s'", path, st, err.msg);
    for (int i = 0; !st && i < hf_n_tensors(ck); i++) {
        const hf_tensor *t = hf_tensor_at(ck, i);
        size_t n = (size_t)t->shape[0] * (size_t)(t->ndim > 1 ? t->shape[1] : 1);
        float *dst = malloc(n * sizeof(float) + 1);
        if (dst) hf_read(ck, t, DT_F32, dst, &err);
        free(dst);
    }
    hf_close(ck);
}

/* replayed here, or elsewhere in make test where a finding is a race rather than an input */
static const char *const replayed[] = {
    "gguf",
    "hf_config",
    "safetensors",
    "http", /* srv_cancel racing the end of a request: tests/test_sched.c sched_cancel_racing_the_end_is_safe */
    NULL};

TEST(fuzz_regressions_replay) {
    CHECK(each_input("hf_config", replay_hf_config) >= 1);
    CHECK(each_input("gguf", replay_gguf) >= 1);
    CHECK(each_input("safetensors", replay_safetensors) >= 1);
    /* a finding committed for a harness with no replay here would never run in make test */
    DIR *d = opendir(test_path("fuzz/regress"));
    CHECK(d != NULL);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        int known = 0;
        for (int i = 0; replayed[i]; i++) known |= !strcmp(replayed[i], e->d_name);
        CHECKF(known, "fuzz/regress/%s has no replay in tests/test_fuzz.c", e->d_name);
    }
    if (d) closedir(d);
}
