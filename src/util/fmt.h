/*
 * fmt.h — numbers for people: a byte count in binary units. Used by the command line's progress and
 * stats lines; the library itself never prints.
 */
#ifndef SL_UTIL_FMT_H
#define SL_UTIL_FMT_H

#include <stddef.h>

/* bytes as "12.3 MiB" (B, KiB, MiB, GiB, TiB; one decimal) into out (n bytes, truncated to fit).
 * Cannot fail. */
void fmt_bytes(char *out, size_t n, double bytes);

#endif
