/* gather.h - copying rows picked at random: prefetch distance and small-row copies shared by the in-memory loaders */
#ifndef DL_DATA_GATHER_H
#define DL_DATA_GATHER_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of rows to have in flight ahead of the copy. A random row misses
 * every cache level, so the copy waits for DRAM unless enough lines are
 * already on their way. The rows are asked for into L2 (prefetcht1), whose
 * queue holds more misses than L1's dozen fill buffers, and far enough
 * ahead to fill it: on an Ice Lake-class Xeon, 40 KiB into L2 (52 rows of
 * 784 B) gathered 1.15x the rows per second of 12 KiB into L1, and 1.3x in
 * a loop of nothing but the gather; on Zen 5, 12 KiB into L1 measured 1.5x
 * the throughput of 3 KiB and more gave nothing further there. */
#define DL_GATHER_AHEAD_BYTES 40960u

/* Rows ahead for rows of row_bytes: 2 to 64. */
static inline size_t dl_gather_ahead(size_t row_bytes)
{
    size_t d = row_bytes ? (DL_GATHER_AHEAD_BYTES + row_bytes - 1) / row_bytes : 32;
    return d < 2 ? 2 : d > 64 ? 64 : d;
}

/* Asks for every cache line of [p, p + bytes) into L2, bytes > 0: one
 * address per 64 bytes from p, then the last byte (rows are not line
 * aligned, so a 784-byte row touches 13 lines). A macro, not a function:
 * GCC finds a function made only of prefetches free of side effects and
 * deletes the calls to it. */
#define DL_PREFETCH_ROW(p, bytes)                                                                  \
    do {                                                                                           \
        const char *pf_row_ = (const char *)(p);                                                   \
        size_t pf_n_ = (bytes);                                                                    \
        for (size_t pf_i_ = 0; pf_i_ < pf_n_; pf_i_ += 64)                                         \
            __builtin_prefetch(pf_row_ + pf_i_, 0, 2);                                             \
        __builtin_prefetch(pf_row_ + pf_n_ - 1, 0, 2);                                             \
    } while (0)

/* Copies rows idx[0 .. n) of src (row bytes each) to dst back to back:
 * dst row k = src row idx[k]. idx[n .. reach) are the rows the next call
 * will copy: they are asked for but not copied, so that its first rows are
 * on their way (reach = n when they are unknown). */
void dl_gather_rows(void *dst, const void *src, size_t row, const uint32_t *idx, size_t n,
                    size_t reach);

/* The same for label rows (small, from an array that stays in cache): dst
 * row k = src row map[idx[k]], or src row idx[k] when map is NULL. */
void dl_gather_labels(void *dst, const void *src, size_t row, const uint32_t *idx,
                      const uint32_t *map, size_t n);

#endif
