/*
 * clock.h — the one clock helper: monotonic time for durations and rates (seconds as a double, or
 * nanoseconds), the process's CPU time (benchmarks), and a CLOCK_REALTIME deadline for
 * pthread_cond_timedwait, which waits on the realtime clock unless its condition variable was told
 * otherwise. None can fail.
 */
#ifndef SL_UTIL_CLOCK_H
#define SL_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic seconds since an arbitrary start (durations only). */
static inline double clk_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Monotonic nanoseconds since an arbitrary start (durations only). */
static inline uint64_t clk_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CPU seconds this process has used, all its threads (CLOCK_PROCESS_CPUTIME_ID): a benchmark's cost
 * beside its wall time. */
static inline double clk_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The realtime instant ns nanoseconds from now, for pthread_cond_timedwait. */
static inline struct timespec clk_deadline_ns(long ns) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec += ns % 1000000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

#endif
