/*
 * err.h — status codes and error messages (internal helpers around sl_error, see sluice.h).
 */
#ifndef SL_ERR_H
#define SL_ERR_H

#include <stdarg.h>

#include "sluice.h"

/* Formats a message into err (if non-NULL) and returns st. Never fails. */
sl_status err_set(sl_error *err, sl_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prepends "prefix: " to an existing message. Returns err->status. */
sl_status err_prefix(sl_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Maps an errno value to a status (ENOSPC, ENOENT, ENOMEM, else EIO). */
sl_status err_from_errno(int e);

/* Programmer errors only (never bad input): abort with file:line. */
#define SL_ASSERT(c) ((c) ? (void)0 : err_assert_fail(#c, __FILE__, __LINE__))
void err_assert_fail(const char *cond, const char *file, int line) __attribute__((noreturn));

#endif
