/* fsutil.c - atomic writes, mkdir -p and flock, written once for the whole program */
#include "engine/base/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/error.h"

int dl_fs_fsync_dir_of(const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = 0;
    else if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int dl_fs_commit(const char *tmp, const char *path)
{
    if (rename(tmp, path) < 0) {
        int e = errno;
        unlink(tmp);
        return dl_error(DL_EIO, "%s: cannot rename into place: %s", path, strerror(e));
    }
    dl_fs_fsync_dir_of(path);
    return DL_OK;
}

int dl_fs_write_atomic(const char *path, const void *data, size_t n)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return dl_error(DL_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    const char *p = data;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, p + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            close(fd);
            unlink(tmp);
            return dl_error(DL_EIO, "%s: write failed: %s", tmp, strerror(e));
        }
        done += (size_t)w;
    }
    if (fsync(fd) < 0 || close(fd) < 0) {
        int e = errno;
        unlink(tmp);
        return dl_error(DL_EIO, "%s: cannot flush to disk: %s", tmp, strerror(e));
    }
    return dl_fs_commit(tmp, path);
}

int dl_fs_mkdir_p(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            return dl_error(DL_EIO, "%s: cannot create folder: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) < 0 && errno != EEXIST)
        return dl_error(DL_EIO, "%s: cannot create folder: %s", buf, strerror(errno));
    return DL_OK;
}

int dl_fs_flock(int fd, int op)
{
    int rc;
    while ((rc = flock(fd, op)) != 0 && errno == EINTR)
        ;
    return rc;
}
