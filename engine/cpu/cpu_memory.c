/* cpu_memory.c - the CPU backend's memory: aligned allocations that refuse what the machine lacks, reused scratch */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/cpu.h"
#include "engine/base/error.h"

/* MemAvailable from /proc/meminfo in bytes, or 0 when unknown. */
static double mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[128];
    double kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1)
            break;
    fclose(f);
    return kib * 1024;
}

void *dl_cpu_alloc(dl_backend *be, size_t bytes)
{
    void *p = NULL;
    /* more than the machine has free would only "succeed" by overcommit,
     * then swap for minutes as it is filled: refuse it at once */
    if (bytes > ((size_t)1 << 30)) {
        double avail = mem_available();
        if (avail > 0 && (double)bytes > avail) {
            dl_error(DL_ENOMEM,
                     "cpu: out of memory: %.3g GiB asked for, %.3g GiB of memory available",
                     (double)bytes / (1 << 30), avail / (1 << 30));
            return NULL;
        }
    }
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded < bytes || posix_memalign(&p, 64, rounded ? rounded : 64) != 0) {
        dl_error(DL_ENOMEM, "cpu: out of memory: %zu bytes asked for, %.3g GiB of memory available",
                 bytes, mem_available() / (1 << 30));
        return NULL;
    }
    return p;
}

void dl_cpu_free(dl_backend *be, void *p) { free(p); }

void dl_cpu_scratch_free(dl_backend *be)
{
    dl_cpu_ctx *c = dl_cpu(be);
    for (int i = 0; i < DL_CPU_SCRATCH_SLOTS; i++) {
        free(c->scratch[i]);
        c->scratch[i] = NULL;
        c->scratch_size[i] = 0;
    }
}

void *dl_cpu_scratch(dl_backend *be, int slot, size_t bytes)
{
    dl_cpu_ctx *c = dl_cpu(be);
    DL_ASSERT(slot >= 0 && slot < DL_CPU_SCRATCH_SLOTS);
    if (c->scratch_size[slot] < bytes) {
        free(c->scratch[slot]);
        c->scratch[slot] = dl_cpu_alloc(be, bytes);
        c->scratch_size[slot] = c->scratch[slot] ? bytes : 0;
    }
    return c->scratch[slot];
}
