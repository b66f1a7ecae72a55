/*
 * stream_rig.h — the stream constructors as expressions for the tests of stream/ (test_cache_io.c, test_tier.c):
 * each returns the object, or NULL on failure with why filled (the library's form is sl_status + *out).
 */
#ifndef SLUICE_TESTS_STREAM_RIG_H
#define SLUICE_TESTS_STREAM_RIG_H

#include "stream/cache.h"
#include "stream/io.h"

static inline io_engine *pread_new(int fd, int n_threads, sl_error *why) {
    io_engine *e;
    io_pread_engine_new(fd, n_threads, &e, why);
    return e;
}
static inline cache *cache_make(const cache_cfg *cc, sl_error *why) {
    cache *c;
    cache_new(cc, &c, why);
    return c;
}

#endif
