/* mem.h - large host arrays: aligned to 2 MiB and marked for transparent huge pages
 *
 * A data set held in memory is read in random rows (a shuffled epoch):
 * with 4 KiB pages nearly every row costs a TLB miss, and a gather of
 * 784-byte rows ran at about half of memcpy's bandwidth. Arrays from here
 * use 2 MiB pages where the kernel allows (transparent_hugepage set to
 * madvise or always), which brings the gather close to memcpy.
 */
#ifndef DL_MEM_H
#define DL_MEM_H

#include <stddef.h>

/* bytes of memory (NULL when there is not that much), released with
 * free(); arrays of 4 MiB and more are 2 MiB aligned and advised as huge
 * pages, smaller ones come from malloc. */
void *dl_mem_alloc_big(size_t bytes);

#endif
