/* fsutil.h - files written whole or not at all, folders made with their parents, advisory locks */
#ifndef DL_FSUTIL_H
#define DL_FSUTIL_H

#include <stddef.h>

/* Writes n bytes to path through dl_fs_tmp_name's file: written, fsync'd,
 * committed (dl_fs_commit: renamed over path, the folder fsync'd). A reader sees the old file or the
 * new one, never a torn one. Returns DL_OK, or DL_EIO naming the file and
 * the reason (the temporary file removed). */
int dl_fs_write_atomic(const char *path, const void *data, size_t n);

/* The temporary file an atomic write of path goes through: "path.tmp.PID"
 * next to it (next to the file it leads to where path is a symbolic
 * link), or, where path is a device or a pipe (/dev/null, /dev/stdout),
 * "$TMPDIR/dlbench-NAME.tmp.PID" (/tmp without TMPDIR).
 * Returns DL_OK, or DL_EINVAL when it does not fit in size. */
int dl_fs_tmp_name(const char *path, char *tmp, size_t size);

/* Renames tmp over path (over the file a symbolic link at path leads to,
 * keeping the link), fsync'ing the folder: the last step of an atomic
 * write whose bytes the caller wrote itself (an HDF5 file, say), tmp named
 * by dl_fs_tmp_name. Where path is a device or a pipe, tmp's bytes are
 * copied into it instead and tmp removed: a rename would replace
 * /dev/null with a file. tmp is removed on failure. Returns DL_OK or
 * DL_EIO naming path. */
int dl_fs_commit(const char *tmp, const char *path);

/* fsync of the folder that holds path, so a rename in it survives a crash.
 * Returns 0 or -1 with errno. */
int dl_fs_fsync_dir_of(const char *path);

/* mkdir -p with mode 0755 (less the umask): every missing folder on the
 * way. An existing folder is fine. Returns DL_OK or DL_EIO naming the
 * folder that could not be made. */
int dl_fs_mkdir_p(const char *path);

/* flock(fd, op), retried on EINTR. Returns 0 or -1 with errno (EWOULDBLOCK
 * for a held lock under LOCK_NB). */
int dl_fs_flock(int fd, int op);

#endif
