/* rundir.c - paths in a run folder and whole-file reads */
#include "engine/rundir/rundir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"

char *dl_rundir_path(const char *run_dir, const char *file, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s", run_dir, file);
    return buf;
}

char *dl_rundir_read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        dl_error(DL_EIO, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (n + 1 < cap)
            break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf) {
        dl_error(DL_ENOMEM, "%s: out of memory", path);
        return NULL;
    }
    if (bad) { /* a short read is not the file */
        free(buf);
        dl_error(DL_EIO, "%s: read error", path);
        return NULL;
    }
    buf[n] = 0;
    if (len)
        *len = n;
    return buf;
}

cJSON *dl_rundir_read_json(const char *path)
{
    char *text = dl_rundir_read_text(path, NULL);
    if (!text)
        return NULL;
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j)
        dl_error(DL_EINVAL, "%s: not valid JSON", path);
    return j;
}
