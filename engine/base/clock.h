/* clock.h - the process's clocks: monotonic seconds for intervals, wall seconds and ISO-8601 UTC for records */
#ifndef DL_CLOCK_H
#define DL_CLOCK_H

#include <stddef.h>
#include <time.h>

/* Seconds on CLOCK_MONOTONIC: for intervals and deadlines; async-signal-safe. */
static inline double dl_clock_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds since the epoch on CLOCK_REALTIME: for timestamps in records. */
static inline double dl_clock_wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds from a to b. */
static inline double dl_clock_diff_s(struct timespec a, struct timespec b)
{
    return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
}

/* CLOCK_REALTIME ms milliseconds from now: the deadline for
 * pthread_cond_timedwait, whose clock that is. */
static inline struct timespec dl_clock_deadline_ms(long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long ns = ts.tv_nsec + (ms % 1000) * 1000000L;
    ts.tv_sec += ms / 1000 + ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    return ts;
}

/* The current time as "2026-12-01T18:31:28Z" into buf (at least 21 bytes). */
void dl_clock_iso_now(char *buf, size_t size);

#endif
