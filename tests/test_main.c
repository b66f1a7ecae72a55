/* test_main.c — the runner behind test.h, plus the shared helpers. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "format/container.h"
#include "sluice.h"
#include "test.h"

#define MAX_FIXTURES 64
const char *test_fixtures[MAX_FIXTURES + 1];
const char test_each_fixture[] = "(each fixture)";
static char fixture_names[MAX_FIXTURES][64];

typedef struct {
    const char *name, *arg, *file;
    test_fn fn;
} tcase;

static tcase cases[1024];
static int n_cases, n_dropped, cur_failed;

void test_register(const char *name, test_fn fn, const char *arg, const char *file) {
    if (n_cases < (int)(sizeof cases / sizeof *cases)) cases[n_cases++] = (tcase){name, arg, file, fn};
    else n_dropped++;
}

void test_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "    %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    cur_failed = 1;
}

int test_failed(void) { return cur_failed; }

static char tmpdir[256];
static unsigned seed;

unsigned test_seed(void) { return seed; }

const char *test_tmpdir(void) { return tmpdir; }

char *test_path(const char *fmt, ...) {
    static char bufs[8][1024];
    static int k;
    char *b = bufs[k++ & 7];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, 1024, fmt, ap);
    va_end(ap);
    return b;
}

char *test_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    fclose(f);
    if (b) { b[n] = 0; if (len) *len = (size_t)n; }
    return b;
}

int test_write(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, len, f) == len;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

int test_copy_dir(const char *from_arg, const char *to_arg) {
    char from[512], to[512]; /* the arguments may live in test_path's rotating buffers */
    snprintf(from, sizeof from, "%s", from_arg);
    snprintf(to, sizeof to, "%s", to_arg);
    mkdir(to, 0755);
    DIR *d = opendir(from);
    if (!d) return -1;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        size_t n;
        char *data = test_read(test_path("%s/%s", from, de->d_name), &n);
        if (!data) { rc = -1; break; }
        rc = test_write(test_path("%s/%s", to, de->d_name), data, n);
        free(data);
        if (rc) break;
    }
    closedir(d);
    return rc;
}

int test_copy_file(const char *from, const char *to) {
    size_t n;
    char *b = test_read(from, &n);
    if (!b) return -1;
    int rc = test_write(to, b, n);
    free(b);
    return rc;
}

double test_rel_err(const float *a, const float *b, int n, int V) {
    double worst = 0;
    for (int t = 0; t < n; t++) {
        double d = 0, m = 0;
        for (int v = 0; v < V; v++) {
            double x = fabs((double)a[(size_t)t * V + v] - b[(size_t)t * V + v]);
            if (x > d || isnan(x)) d = isnan(x) ? INFINITY : x;
            if (fabs(b[(size_t)t * V + v]) > m) m = fabs(b[(size_t)t * V + v]);
        }
        if (d / m > worst) worst = d / m;
    }
    return worst;
}

int test_sh(int merge_stderr, char **out, const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(cmd, sizeof cmd - 8, fmt, ap);
    va_end(ap);
    if (merge_stderr && k >= 0 && (size_t)k < sizeof cmd - 8) strcat(cmd, " 2>&1");
    FILE *p = popen(cmd, "r");
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    while (p && buf && (got = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) break;
            buf = nb;
        }
    }
    if (buf) buf[n] = 0;
    int rc = p ? pclose(p) : -1;
    *out = buf;
    return rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

int test_ref_ids(const char *fixture, const char *key, int32_t *out, int max) {
    char *txt = test_read(test_path("tests/data/%s/ref.json", fixture), NULL);
    cJSON *j = cJSON_Parse(txt);
    free(txt);
    const cJSON *arr = cJSON_GetObjectItem(j, key), *it;
    int n = cJSON_IsArray(arr) ? 0 : -1;
    cJSON_ArrayForEach(it, arr) {
        if (n >= max) { n = -1; break; }
        out[n++] = (int32_t)it->valueint;
    }
    cJSON_Delete(j);
    return n;
}

int32_t test_argmax(const float *x, int n) {
    int32_t best = 0;
    for (int v = 1; v < n; v++)
        if (x[v] > x[best]) best = v;
    return best;
}

int test_open_fixture(const char *file, int line, const char *fixture, const char **path, test_toks *toks,
                      struct slc_file *f) {
    const char *p = test_packed(fixture);
    if (!p) {
        test_fail(file, line, "%s: the fixture did not pack", fixture);
        return -1;
    }
    if (path) *path = p;
    if (toks && (toks->n = test_ref_ids(fixture, "tokens", toks->tokens, 256)) <= 0) {
        test_fail(file, line, "%s: no reference tokens in its ref.json", fixture);
        return -1;
    }
    sl_error err = {0};
    if (f && slc_open(p, f, &err) != SL_OK) {
        test_fail(file, line, "%s: slc_open %s: %s", fixture, p, err.msg);
        return -1;
    }
    return 0;
}

int test_exists(const char *path) { return access(path, F_OK) == 0; }

long long test_file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
}

int test_dir_has_prefix(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    int found = 0;
    while ((de = readdir(d)))
        if (!strncmp(de->d_name, prefix, strlen(prefix))) found = 1;
    closedir(d);
    return found;
}

const char *test_packed(const char *fixture) {
    char *out = test_path("%s/packed-%s.sluice", tmpdir, fixture);
    if (test_exists(out)) return out;
    sl_error err = {0};
    if (sl_pack(test_path("tests/data/%s", fixture), out, NULL, &err) != SL_OK) {
        fprintf(stderr, "    pack %s failed: %s\n", fixture, err.msg);
        return NULL;
    }
    return out;
}

static void rm_rf(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) rm_rf(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* test_fixtures from tests/data (see test.h), sorted; returns how many, -1 on an error (printed). */
static int find_fixtures(void) {
    DIR *d = opendir("tests/data");
    if (!d) { perror("tests/data"); return -1; }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof fixture_names[0]) continue;
        char p[512];
        struct stat st;
        snprintf(p, sizeof p, "tests/data/%s/ref.json", e->d_name);
        if (stat(p, &st)) continue;
        snprintf(p, sizeof p, "tests/data/%s/config.json", e->d_name);
        char *txt = test_read(p, NULL);
        cJSON *cfg = txt ? cJSON_Parse(txt) : NULL;
        free(txt);
        int mlx = cJSON_GetObjectItemCaseSensitive(cfg, "quantization") != NULL;
        cJSON_Delete(cfg);
        if (!cfg || mlx) continue;
        if (n == MAX_FIXTURES) { fprintf(stderr, "more than %d fixtures: raise MAX_FIXTURES\n", MAX_FIXTURES); n = -1; break; }
        if (snprintf(fixture_names[n], sizeof fixture_names[n], "%s", e->d_name) >= (int)sizeof fixture_names[n])
            continue; /* a name too long for the table is not one of ours */
        test_fixtures[n] = fixture_names[n];
        n++;
    }
    closedir(d);
    if (n > 0) qsort(test_fixtures, (size_t)n, sizeof *test_fixtures, cmp_str);
    return n;
}

/* Each FIXTURE_TEST case into one case per fixture, in place and in order. */
static int expand_fixture_cases(int nf) {
    static tcase out[sizeof cases / sizeof *cases];
    int n = 0;
    for (int i = 0; i < n_cases; i++) {
        int k = cases[i].arg == test_each_fixture ? nf : 1;
        for (int j = 0; j < k; j++) {
            if (n == (int)(sizeof out / sizeof *out)) return -1;
            out[n] = cases[i];
            if (cases[i].arg == test_each_fixture) out[n].arg = test_fixtures[j];
            n++;
        }
    }
    memcpy(cases, out, (size_t)n * sizeof *out);
    n_cases = n;
    return 0;
}

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    int nf = find_fixtures();
    if (nf < 1) { fprintf(stderr, "FAIL no fixtures found under tests/data (run from the repository root)\n"); return 2; }
    if (expand_fixture_cases(nf)) { fprintf(stderr, "FAIL too many cases: raise the size of cases[] in test_main.c\n"); return 2; }
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/sluice-test-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 2; }
    const char *se = getenv("SLUICE_TEST_SEED");
    seed = se && *se ? (unsigned)strtoul(se, NULL, 10) : (unsigned)time(NULL) ^ ((unsigned)getpid() << 16);
    srand(seed);
    printf("seed %u (SLUICE_TEST_SEED=%u repeats it)\n", seed, seed);
    int passed = 0, failed = n_dropped ? 1 : 0;
    if (n_dropped) fprintf(stderr, "FAIL %d cases not registered: raise the size of cases[] in test_main.c\n", n_dropped);
    int ran[sizeof cases / sizeof *cases] = {0}; /* cases run per file, at the index of its first case */
    for (int i = 0; i < n_cases; i++) {
        char full[256];
        snprintf(full, sizeof full, "%s%s%s", cases[i].name, cases[i].arg ? "/" : "", cases[i].arg ? cases[i].arg : "");
        if (filter && !strstr(full, filter)) continue;
        cur_failed = 0;
        int f = 0;
        while (strcmp(cases[f].file, cases[i].file)) f++;
        ran[f]++;
        cases[i].fn(cases[i].arg);
        if (cur_failed) {
            failed++;
            fprintf(stderr, "FAIL %s\n", full);
        } else {
            passed++;
            printf("ok   %s\n", full);
        }
        fflush(stdout);
    }
    if (!getenv("SLUICE_KEEP_TMP")) rm_rf(tmpdir);
    printf("files:");
    for (int i = 0; i < n_cases; i++)
        if (ran[i]) printf(" %s %d", cases[i].file, ran[i]);
    printf("\n%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
