/* fsutil.c - atomic writes, mkdir -p and flock, written once for the whole program */
#include "engine/base/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
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

/* A path that exists and is neither a regular file nor a folder: /dev/null,
 * /dev/stdout, a named pipe. Renaming over it would replace the device with
 * a file (as root, /dev/null itself), so such a target is written through. */
static int special_target(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

/* Where a write to path lands: path, or the file a symbolic link there
 * leads to. Renaming over the link would replace the link itself (as
 * root, /dev/stdout with a file; a user's link into a shared folder with
 * a copy). A dangling link is written over. */
static const char *landing(const char *path, char *buf)
{
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) && realpath(path, buf))
        return buf;
    return path;
}

int dl_fs_tmp_name(const char *path, char *tmp, size_t size)
{
    char real[PATH_MAX];
    const char *named = path;
    path = landing(path, real);
    int n;
    if (special_target(path)) {
        const char *dir = getenv("TMPDIR");
        const char *base = strrchr(path, '/');
        n = snprintf(tmp, size, "%s/dlbench-%s.tmp.%ld", dir && *dir ? dir : "/tmp",
                     base ? base + 1 : path, (long)getpid());
    } else {
        n = snprintf(tmp, size, "%s.tmp.%ld", path, (long)getpid());
    }
    if (n < 0 || (size_t)n >= size)
        return dl_error(DL_EINVAL, "%s: path too long", named);
    return DL_OK;
}

/* Copies tmp's bytes into the special target path, then removes tmp. */
static int copy_through(const char *tmp, const char *path)
{
    int in = open(tmp, O_RDONLY | O_CLOEXEC);
    int out = in < 0 ? -1 : open(path, O_WRONLY | O_CLOEXEC);
    int e = errno, rc = in < 0 || out < 0 ? -1 : 0;
    char buf[65536];
    while (rc == 0) {
        ssize_t r = read(in, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = r < 0 ? -1 : 0;
            e = errno;
            break;
        }
        for (ssize_t done = 0; done < r;) {
            ssize_t w = write(out, buf + done, (size_t)(r - done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                rc = -1;
                e = w < 0 ? errno : EIO;
                break;
            }
            done += w;
        }
    }
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    unlink(tmp);
    return rc < 0 ? dl_error(DL_EIO, "%s: cannot write: %s", path, strerror(e)) : DL_OK;
}

int dl_fs_commit(const char *tmp, const char *path)
{
    char real[PATH_MAX];
    const char *to = landing(path, real);
    if (special_target(to))
        return copy_through(tmp, to);
    if (rename(tmp, to) < 0) {
        int e = errno;
        unlink(tmp);
        return dl_error(DL_EIO, "%s: cannot rename into place: %s", path, strerror(e));
    }
    dl_fs_fsync_dir_of(to);
    return DL_OK;
}

int dl_fs_write_atomic(const char *path, const void *data, size_t n)
{
    char tmp[4200];
    DL_TRY(dl_fs_tmp_name(path, tmp, sizeof tmp));
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
