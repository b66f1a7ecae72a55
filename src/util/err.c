/* err.c — sl_strerror and error-message helpers; see err.h. */
#include "util/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *sl_strerror(sl_status st) {
    switch (st) {
#define SL_STATUS_CASE(name, code, text) case SL_##name: return text;
        SL_STATUS_LIST(SL_STATUS_CASE)
#undef SL_STATUS_CASE
    }
    return "unknown status";
}

/* A message is one line of text: control bytes (a newline or an escape sequence in a name read from a user's
 * file, say) become '?', so what a caller prints or sends as JSON cannot break lines or drive a terminal. */
static void one_line(char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) *s = '?';
}

sl_status err_set(sl_error *err, sl_status st, const char *fmt, ...) {
    if (!err) return st;
    err->status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    one_line(err->msg);
    return st;
}

sl_status err_prefix(sl_error *err, const char *fmt, ...) {
    if (!err) return SL_EINVAL;
    char pre[256], joined[sizeof pre + sizeof err->msg + 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    snprintf(joined, sizeof joined, "%s: %s", pre, err->msg);
    size_t n = strlen(joined);
    if (n >= sizeof err->msg) n = sizeof err->msg - 1;
    memcpy(err->msg, joined, n);
    err->msg[n] = 0;
    one_line(err->msg);
    return err->status;
}

sl_status err_from_errno(int e) {
    switch (e) {
    case ENOSPC:
    case EDQUOT: return SL_ENOSPC;
    case ENOENT: return SL_ENOENT;
    case ENOMEM: return SL_ENOMEM;
    default: return SL_EIO;
    }
}

void err_assert_fail(const char *cond, const char *file, int line) {
    fprintf(stderr, "sluice: assertion failed: %s (%s:%d)\n", cond, file, line);
    abort();
}
