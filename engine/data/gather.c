/* gather.c - the row gather of the in-memory and streaming loaders: rows picked at random, copied with the next ones in flight */
#include "engine/data/gather.h"

#include <string.h>

/* The copy of each row is glibc's memcpy, which picks its AVX-512, AVX2 or
 * SSE2 loop from the CPU at load time: a fixed-size loop of 64-byte loads
 * and stores measured no faster for 784-byte rows on Zen 5, and the time
 * goes to waiting for the rows anyway. What matters is that every line of
 * the next rows is asked for before it is needed (DL_PREFETCH_ROW). */
void dl_gather_rows(void *dst, const void *src, size_t row, const uint32_t *idx, size_t n,
                    size_t reach)
{
    char *d = dst;
    const char *s = src;
    size_t ahead = dl_gather_ahead(row);
    if (reach < n)
        reach = n;
    for (size_t k = 0; k < ahead && k < reach; k++)
        DL_PREFETCH_ROW(s + (size_t)idx[k] * row, row);
    size_t k = 0;
    /* the steady part, without the bound check on the prefetch */
    for (; k + ahead < reach && k < n; k++) {
        DL_PREFETCH_ROW(s + (size_t)idx[k + ahead] * row, row);
        memcpy(d + k * row, s + (size_t)idx[k] * row, row);
    }
    for (; k < n; k++)
        memcpy(d + k * row, s + (size_t)idx[k] * row, row);
}

void dl_gather_labels(void *dst, const void *src, size_t row, const uint32_t *idx,
                      const uint32_t *map, size_t n)
{
    char *d = dst;
    const char *s = src;
    if (row == 4) {
        for (size_t k = 0; k < n; k++)
            memcpy(d + 4 * k, s + 4 * (size_t)(map ? map[idx[k]] : idx[k]), 4);
        return;
    }
    for (size_t k = 0; k < n; k++)
        memcpy(d + k * row, s + row * (size_t)(map ? map[idx[k]] : idx[k]), row);
}
