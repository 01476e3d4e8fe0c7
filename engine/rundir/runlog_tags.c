/* runlog_tags.c - the run's tags file: a tag added or removed, the file rewritten atomically */
#include <stdio.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/base/fsutil.h"
#include "engine/rundir/records.h"
#include "engine/rundir/runlog.h"

static int valid_tag(const char *t)
{
    size_t n = strlen(t);
    return n > 0 && n < 64 &&
           strspn(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:+-") == n;
}

int dl_runlog_tag(const char *run_dir, const char *tag, int remove)
{
    if (!valid_tag(tag))
        return dl_error(DL_EINVAL,
                        "tag '%.80s': expected 1-63 letters, digits or _ . : + - (no spaces)", tag);
    if (!dl_runlog_is_run(run_dir))
        return dl_error(DL_EINVAL, "%s: not a run folder (no " DL_RUN_FILE_CONFIG ")", run_dir);
    char list[4096], out[4200], path[1400];
    dl_records_tags(run_dir, list, sizeof list);
    int had = dl_records_has_tag(list, tag);
    if (had != remove)
        return 0;
    size_t len = 0;
    out[0] = 0;
    for (char *save = NULL, *t = strtok_r(list, " ", &save); t; t = strtok_r(NULL, " ", &save))
        if (strcmp(t, tag))
            len += (size_t)snprintf(out + len, sizeof out - len, "%s\n", t);
    if (!remove && len + strlen(tag) + 2 < sizeof out)
        len += (size_t)snprintf(out + len, sizeof out - len, "%s\n", tag);
    int rc =
        dl_fs_write_atomic(dl_rundir_path(run_dir, DL_RUN_FILE_TAGS, path, sizeof path), out, len);
    return rc < 0 ? rc : 1;
}
