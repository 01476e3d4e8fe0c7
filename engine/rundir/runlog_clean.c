/* runlog_clean.c - what crashes leave in a runs folder: half-made run folders, temporary files, torn last lines */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/base/fsutil.h"
#include "engine/rundir/rundir.h"
#include "engine/rundir/runlog.h"
#include "engine/rundir/runlog_private.h"

int dl_runlog_is_temp_name(const char *name)
{
    return name[0] == '.' && strstr(name, ".tmp-") != NULL;
}

void dl_runlog_remove_temp_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) /* not a run being made: leave it whole */
        if (e->d_type == DT_DIR && strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            closedir(d);
            return;
        }
    rewinddir(d);
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* A temporary run folder whose creator is gone: its lock is free, or it
 * never got a lock file and is older than a minute. */
int dl_runlog_temp_is_stale(const char *dir)
{
    char path[1500];
    struct stat st;
    if (stat(dl_rundir_path(dir, DL_RUN_FILE_LOCK, path, sizeof path), &st) == 0) {
        int rc = dl_runlog_check_free(dir);
        dl_error_clear();
        return rc == DL_OK;
    }
    /* before the rename of run.lock.new: its creator holds that one */
    snprintf(path, sizeof path, "%s/" DL_RUN_FILE_LOCK ".new", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        int held = dl_fs_flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
        close(fd);
        if (held)
            return 0; /* alive, only slow (or stopped) */
    }
    return stat(dir, &st) == 0 && time(NULL) - st.st_mtime > 60;
}

int dl_runlog_stale_temps(const char *out_dir, int remove, char *names, size_t size)
{
    if (names && size)
        names[0] = 0;
    DIR *d = opendir(out_dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!dl_runlog_is_temp_name(e->d_name))
            continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", out_dir, e->d_name);
        if (!dl_runlog_temp_is_stale(path))
            continue;
        n++;
        if (names && size) {
            size_t l = strlen(names);
            snprintf(names + l, size - l, "%s%s", l ? ", " : "", e->d_name);
        }
        if (remove)
            dl_runlog_remove_temp_dir(path);
    }
    closedir(d);
    return n;
}

void dl_runlog_remove_stale_files(const char *run_dir)
{
    DIR *dir = opendir(run_dir);
    if (!dir)
        return;
    struct dirent *e;
    while ((e = readdir(dir))) {
        const char *t = strstr(e->d_name, ".tmp.");
        if (!t || t == e->d_name || !t[5] || strspn(t + 5, "0123456789") != strlen(t + 5))
            continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", run_dir, e->d_name);
        unlink(path);
    }
    closedir(dir);
}

/* Where the last line of fd (size bytes) ends: the offset after its last
 * newline, 0 when it has none, -1 when it cannot be read. */
static off_t last_newline_end(int fd, off_t size)
{
    char buf[4096];
    off_t end = size;
    while (end > 0) {
        off_t from = end > (off_t)sizeof buf ? end - (off_t)sizeof buf : 0;
        ssize_t n = pread(fd, buf, (size_t)(end - from), from);
        if (n != end - from)
            return -1;
        for (ssize_t i = n - 1; i >= 0; i--)
            if (buf[i] == '\n')
                return from + i + 1;
        end = from;
    }
    return 0;
}

long dl_runlog_cut_torn_tail(const char *dir, const char *name)
{
    char path[1100];
    int fd = open(dl_rundir_path(dir, name, path, sizeof path), O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    long cut = 0;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        off_t keep = last_newline_end(fd, st.st_size);
        if (keep >= 0 && keep < st.st_size && ftruncate(fd, keep) == 0)
            cut = (long)(st.st_size - keep);
    }
    close(fd);
    return cut;
}
