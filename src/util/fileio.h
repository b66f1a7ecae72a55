/*
 * fileio.h — whole-file and positioned I/O that loops on short transfers and EINTR.
 * EOF before the requested length is its own error (SL_EFORMAT: the file is shorter than it claims).
 */
#ifndef SL_FILEIO_H
#define SL_FILEIO_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

/* Reads exactly len bytes at off. `what` names the file in messages. */
sl_status fio_pread_all(int fd, void *buf, size_t len, uint64_t off, const char *what, sl_error *err);
/* Writes exactly len bytes at off. */
sl_status fio_pwrite_all(int fd, const void *buf, size_t len, uint64_t off, const char *what, sl_error *err);
/* Reads a whole (small) file into a NUL-terminated malloc'ed buffer. */
sl_status fio_read_file(const char *path, char **out, size_t *out_len, sl_error *err);
/* Creates "<dst>.tmp.<pid>" for writing (0644, never an existing file: O_EXCL), the name every whole-file
 * writer here uses and fio_remove_stale_temps knows. On success *fd is open and *tmp its name (malloc'ed;
 * the caller unlinks it unless committed, and frees it); on error *fd is -1 and *tmp NULL (nothing was
 * created, nothing is to be removed). */
sl_status fio_create_temp(const char *dst, char **tmp, int *fd, sl_error *err);
/* Finishes a file written under a temporary name: truncates it to `size`, fsyncs, closes fd (always,
 * also on failure) and renames tmp over dst. On failure the caller still owns (and unlinks) tmp. */
sl_status fio_commit(int fd, uint64_t size, const char *tmp, const char *dst, sl_error *err);
/* The temporaries "<path>.tmp.<pid>" that every writer of a whole file here uses (pack, synth, session
 * and profile saves, the server's state files) and that a process killed before its rename leaves behind:
 * those whose pid no longer runs are removed. Returns how many; when removed is not NULL it receives
 * their names, each followed by a NUL, an empty string after the last (malloc'ed; NULL when none). A
 * temporary of a live process (a concurrent writer) is never touched. A path ending in '/' names a folder:
 * then every "<name>.tmp.<pid>" in it is a candidate. */
int fio_remove_stale_temps(const char *path, char **removed);
/* Joins dir and name into a malloc'ed path. NULL on allocation failure. */
char *fio_join(const char *dir, const char *name);

#endif
