/* fuzz_common.h - helpers shared by the libFuzzer targets: a private scratch folder, whole-file writes */
#ifndef DL_FUZZ_COMMON_H
#define DL_FUZZ_COMMON_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A scratch folder of this process (in /dev/shm when there is one), made once. */
static inline const char *fuzz_dir(void)
{
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/dlbench-fuzz-XXXXXX",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (!mkdtemp(dir))
            abort();
    }
    return dir;
}

/* Writes n bytes to dir/name; returns the path (static buffer per slot). */
static inline const char *fuzz_file(int slot, const char *name, const void *data, size_t n)
{
    static char paths[4][256];
    snprintf(paths[slot], sizeof paths[slot], "%s/%s", fuzz_dir(), name);
    int fd = open(paths[slot], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        abort();
    if (n && write(fd, data, n) != (ssize_t)n)
        abort();
    close(fd);
    return paths[slot];
}

#endif
