/*
 * fmt.c — numbers for people (fmt.h).
 */
#include "util/fmt.h"

#include <stdio.h>

void fmt_bytes(char *out, size_t n, double bytes) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (bytes >= 1024 && i < 4) {
        bytes /= 1024;
        i++;
    }
    snprintf(out, n, "%.1f %s", bytes, u[i]);
}
