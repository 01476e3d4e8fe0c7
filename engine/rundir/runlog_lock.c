/* runlog_lock.c - the run lock: one writer per run folder, and who holds it */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/base/fsutil.h"
#include "engine/rundir/rundir.h"
#include "engine/rundir/runlog.h"
#include "engine/rundir/runlog_private.h"

const char *dl_runlog_base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash && slash[1] ? slash + 1 : path;
}

/* The holder's "PID HOST" from an open lock file: *pid 0 when unreadable. */
static void lock_holder(int fd, long *pid, char *host, size_t size)
{
    char text[128];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    text[n > 0 ? n : 0] = 0;
    *pid = 0;
    host[0] = 0;
    char *end;
    long p = strtol(text, &end, 10);
    if (end == text || p <= 0)
        return;
    *pid = p;
    while (*end == ' ')
        end++;
    size_t k = 0;
    while (end[k] && end[k] != '\n' && k + 1 < size) {
        host[k] = end[k];
        k++;
    }
    host[k] = 0;
}

static int busy_error(int fd, const char *run)
{
    long pid;
    char host[64], here[64] = "";
    lock_holder(fd, &pid, host, sizeof host);
    gethostname(here, sizeof here - 1);
    char who[160];
    if (pid <= 0)
        snprintf(who, sizeof who, "another process");
    else if (host[0] && strcmp(host, here))
        snprintf(who, sizeof who, "process %ld on %s", pid, host);
    else
        snprintf(who, sizeof who, "process %ld", pid);
    return dl_error(DL_EINVAL,
                    "run %s is in use by %s (a live run or another --resume of it): wait for "
                    "it to end, or stop it first",
                    run, who);
}

/* flock(LOCK_EX) without blocking, retried for a second: a
 * dl_runlog_check_free probe holds the lock for microseconds only. */
static int lock_exclusive(int fd, const char *path, const char *run)
{
    for (int tries = 0;; tries++) {
        if (dl_fs_flock(fd, LOCK_EX | LOCK_NB) == 0)
            return DL_OK;
        if (errno != EWOULDBLOCK)
            return dl_error(DL_EIO, "%s: flock: %s", path, strerror(errno));
        if (tries == 20)
            return busy_error(fd, run);
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

int dl_runlog_take_lock(const char *dir, const char *run, int fresh, int *fd_out)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/" DL_RUN_FILE_LOCK "%s", dir, fresh ? ".new" : "");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return dl_error(DL_EIO, "%s: cannot open: %s", path, strerror(errno));
    int rc = lock_exclusive(fd, path, run);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    char text[128], host[64] = "";
    gethostname(host, sizeof host - 1);
    int n = snprintf(text, sizeof text, "%ld %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != n) {
        int e = errno;
        close(fd);
        return dl_error(DL_EIO, "%s: cannot write: %s", path, strerror(e));
    }
    if (fresh) {
        char final[1100];
        dl_rundir_path(dir, DL_RUN_FILE_LOCK, final, sizeof final);
        if (rename(path, final) != 0) {
            int e = errno;
            close(fd);
            return dl_error(DL_EIO, "%s: cannot rename into place: %s", final, strerror(e));
        }
    }
    *fd_out = fd;
    return DL_OK;
}

int dl_runlog_check_free(const char *run_dir)
{
    char path[1100];
    int fd =
        open(dl_rundir_path(run_dir, DL_RUN_FILE_LOCK, path, sizeof path), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return DL_OK; /* never locked: a folder from before run locks, or none */
    int rc = DL_OK;
    if (dl_fs_flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK)
        rc = busy_error(fd, dl_runlog_base_name(run_dir));
    close(fd); /* drops the probe's shared lock */
    return rc;
}

int dl_runlog_lock(const char *run_dir, int *fd)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", run_dir);
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dir[--dl] = 0;
    *fd = -1;
    return dl_runlog_take_lock(dir, dl_runlog_base_name(dir), 0, fd);
}
