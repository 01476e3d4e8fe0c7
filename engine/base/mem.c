/* mem.c - large host arrays on transparent huge pages where the kernel allows */
#include "engine/base/mem.h"

#include <stdlib.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

void *dl_mem_alloc_big(size_t bytes)
{
    if (bytes < 2 * HUGE_PAGE)
        return malloc(bytes ? bytes : 1);
    size_t whole = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    void *p = aligned_alloc(HUGE_PAGE, whole);
#ifdef MADV_HUGEPAGE
    if (p)
        (void)madvise(p, whole, MADV_HUGEPAGE); /* advice only: 4 KiB pages still work */
#endif
    return p;
}
