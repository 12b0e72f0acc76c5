/* The project's one clock for timestamps that cross modules: task events (proto/task.h),
 * request lifecycle times (sched/sched.h) and the server's latency metrics all compare values
 * from it, so they must all read the same clock.
 *
 *     uint64_t t0 = wf_clock_now_ns();
 *     ...
 *     double ms = (double)(wf_clock_now_ns() - t0) / 1e6;
 *
 * CLOCK_MONOTONIC nanoseconds: never jumps with wall-clock changes. Thread-safe. */
#ifndef WF_BASE_CLOCK_H
#define WF_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t wf_clock_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
