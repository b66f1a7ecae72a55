/*
 * xxh3.h — XXH3-64, the container's checksum (docs/FORMAT.md), at the speed the CPU allows. libxxhash's
 * plain XXH3_64bits is built for the baseline instruction set (SSE2 on x86-64); on x86-64 the library
 * also exports XXH3_64bits_dispatch (xxh_x86dispatch.h), which picks the AVX2 or AVX-512 code path at run
 * time. It computes the same function (XXH3's result does not depend on the vector width), so files that
 * include this header instead of <xxhash.h> get the dispatching XXH3_64bits with no other change. Elsewhere
 * it is <xxhash.h> as is.
 */
#ifndef SL_XXH3_H
#define SL_XXH3_H

#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h> /* #defines XXH3_64bits (and the other XXH3 entry points) to the _dispatch ones */
#endif

#endif
