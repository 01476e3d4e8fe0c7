/* clock.c - the ISO-8601 time stamp of records (the clocks themselves are inline in clock.h) */
#include "engine/base/clock.h"

void dl_clock_iso_now(char *buf, size_t size)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
}
