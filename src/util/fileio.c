/* fileio.c — see fileio.h. */
#include "util/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/err.h"

sl_status fio_pread_all(int fd, void *buf, size_t len, uint64_t off, const char *what, sl_error *err) {
    char *p = buf;
    while (len > 0) {
        ssize_t r = pread(fd, p, len, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return err_set(err, err_from_errno(errno), "%s: read of %zu bytes at offset %llu failed: %s", what,
                          len, (unsigned long long)off, strerror(errno));
        }
        if (r == 0)
            return err_set(err, SL_EFORMAT, "%s: unexpected end of file at offset %llu (%zu bytes short)", what,
                          (unsigned long long)off, len);
        p += r;
        len -= (size_t)r;
        off += (uint64_t)r;
    }
    return SL_OK;
}

sl_status fio_pwrite_all(int fd, const void *buf, size_t len, uint64_t off, const char *what, sl_error *err) {
    const char *p = buf;
    while (len > 0) {
        ssize_t r = pwrite(fd, p, len, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return err_set(err, err_from_errno(errno), "%s: write of %zu bytes at offset %llu failed: %s", what,
                          len, (unsigned long long)off, strerror(errno));
        }
        if (r == 0) return err_set(err, SL_EIO, "%s: write made no progress at offset %llu", what, (unsigned long long)off);
        p += r;
        len -= (size_t)r;
        off += (uint64_t)r;
    }
    return SL_OK;
}

sl_status fio_read_file(const char *path, char **out, size_t *out_len, sl_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(err, err_from_errno(errno), "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return err_set(err, SL_EIO, "%s: not a regular file", path);
    }
    char *buf = malloc((size_t)sb.st_size + 1);
    if (!buf) {
        close(fd);
        return err_set(err, SL_ENOMEM, "%s: out of memory reading %lld bytes", path, (long long)sb.st_size);
    }
    sl_status st = fio_pread_all(fd, buf, (size_t)sb.st_size, 0, path, err);
    close(fd);
    if (st) {
        free(buf);
        return st;
    }
    buf[sb.st_size] = 0;
    *out = buf;
    if (out_len) *out_len = (size_t)sb.st_size;
    return SL_OK;
}

sl_status fio_create_temp(const char *dst, char **tmp, int *fd, sl_error *err) {
    size_t tl = strlen(dst) + 32;
    *fd = -1;
    if (!(*tmp = malloc(tl))) return err_set(err, SL_ENOMEM, "out of memory");
    snprintf(*tmp, tl, "%s.tmp.%ld", dst, (long)getpid());
    *fd = open(*tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (*fd >= 0) return SL_OK;
    sl_status st = err_set(err, err_from_errno(errno), "%s: cannot create: %s", *tmp, strerror(errno));
    free(*tmp);
    *tmp = NULL; /* not ours to remove */
    return st;
}

sl_status fio_commit(int fd, uint64_t size, const char *tmp, const char *dst, sl_error *err) {
    if (ftruncate(fd, (off_t)size) != 0 || fsync(fd) != 0) {
        int e = errno;
        close(fd);
        return err_set(err, err_from_errno(e), "%s: cannot finish the file: %s", tmp, strerror(e));
    }
    if (close(fd) != 0)
        return err_set(err, err_from_errno(errno), "%s: close failed: %s", tmp, strerror(errno));
    if (rename(tmp, dst) != 0)
        return err_set(err, err_from_errno(errno), "%s: cannot rename to %s: %s", tmp, dst, strerror(errno));
    return SL_OK;
}

char *fio_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a > 0 && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

int fio_remove_stale_temps(const char *path, char **removed) {
    if (removed) *removed = NULL;
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path + (slash == path))) : strdup(".");
    const char *base = slash ? slash + 1 : path;
    size_t bl = strlen(base), cap = 0, len = 0;
    char *names = NULL;
    int n = 0;
    DIR *d = dir ? opendir(dir) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        const char *nm = e->d_name;
        const char *t = nm + bl;
        if (!bl) { /* a folder: any "<name>.tmp.<pid>" in it */
            const char *x = nm, *last = NULL;
            while ((x = strstr(x, ".tmp."))) last = x++;
            if (!last || last == nm) continue;
            t = last;
        }
        if (strncmp(nm, base, bl) || strncmp(t, ".tmp.", 5)) continue;
        const char *digits = t + 5;
        char *end;
        long pid = strtol(digits, &end, 10);
        if (end == digits || *end || pid <= 0) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive (or not ours to judge) */
        char *full = fio_join(dir, nm);
        if (full && unlink(full) == 0) {
            n++;
            size_t fl = strlen(full) + 1;
            if (removed && len + fl + 1 > cap) {
                size_t nc = (len + fl + 1) * 2;
                char *g = realloc(names, nc);
                if (g) names = g, cap = nc;
            }
            if (removed && names && len + fl + 1 <= cap) {
                memcpy(names + len, full, fl);
                len += fl;
                names[len] = 0;
            }
        }
        free(full);
    }
    if (d) closedir(d);
    free(dir);
    if (removed) *removed = names;
    else free(names);
    return n;
}
