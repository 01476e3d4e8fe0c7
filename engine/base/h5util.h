/* h5util.h - HDF5 for the whole process: one lock, the error text, a checking macro, attributes
 *
 * HDF5 may be built without thread safety: every HDF5 call in dlbench is
 * made with dl_hdf5_lock() held (data sources, the importer's writer,
 * checkpoints). The attribute helpers below expect the lock held and behave
 * like HDF5 calls: they return a negative value on failure and leave the
 * reason on HDF5's error stack (dl_hdf5_error_text reads it), so that
 * callers wrap them in DL_H5_CHECK or DL_H5_TRY like any other call.
 */
#ifndef DL_H5UTIL_H
#define DL_H5UTIL_H

#include <hdf5.h>
#include <stddef.h>

#include "engine/base/error.h"

/* The process-wide HDF5 lock (recursive). The first lock on a thread also
 * silences HDF5's automatic error printing for that thread. */
void dl_hdf5_lock(void);
void dl_hdf5_unlock(void);

/* Turns the current HDF5 error stack into a short text ("truncated file:
 * eof = ..."): the innermost description, or "HDF5 error". Clears the
 * stack. buf is returned. */
char *dl_hdf5_error_text(char *buf, size_t size);

/* Records a failed HDF5 call as this thread's error, "<what>: <hdf5
 * reason> (file.c:LINE: call)" with what from fmt, and returns code. file
 * is __FILE__ (only its base name is kept). */
int dl_h5_fail(int code, const char *file, int line, const char *call, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Runs an HDF5 call that returns a negative value on failure; on failure
 * records it (DL_EIO, message from the printf-style rest) into a local
 * `int rc` and jumps to the local label `fail`. */
#define DL_H5_CHECK(call, ...)                                                                     \
    do {                                                                                           \
        if ((call) < 0) {                                                                          \
            rc = dl_h5_fail(DL_EIO, __FILE__, __LINE__, #call, __VA_ARGS__);                       \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* The same, returning code from the enclosing function instead. */
#define DL_H5_TRY(code, call, ...)                                                                 \
    do {                                                                                           \
        if ((call) < 0)                                                                            \
            return dl_h5_fail((code), __FILE__, __LINE__, #call, __VA_ARGS__);                     \
    } while (0)

/* Writes attribute name on obj (a file, group or dataset): n values of the
 * memory type `type` from v, a scalar when n == 0, else a 1-D array of n.
 * The file type is `type` itself. Returns 0 or -1 (HDF5 error stack set). */
int dl_h5_attr_write(hid_t obj, const char *name, hid_t type, int n, const void *v);

/* Writes one string as a scalar fixed-length attribute (strlen + 1 bytes,
 * NUL-terminated) in character set cset (H5T_CSET_ASCII or _UTF8).
 * Returns 0 or -1. */
int dl_h5_attr_write_string(hid_t obj, const char *name, const char *value, H5T_cset_t cset);

/* Writes n >= 1 strings as a 1-D attribute of fixed-length strings, each
 * as long as the longest plus its NUL. Returns 0, -1 for an HDF5 failure,
 * DL_ENOMEM (message set) when the buffer cannot be had, DL_EINVAL for
 * n < 1. */
int dl_h5_attr_write_strings(hid_t obj, const char *name, const char *const *v, int n,
                             H5T_cset_t cset);

/* Reads attribute name of obj as up to max values of memory type `type`
 * into v. Returns how many values it holds (a scalar holds 1), 0 when
 * there is no such attribute, -1 when it cannot be read or holds more than
 * max (v then untouched). */
int dl_h5_attr_read(hid_t obj, const char *name, hid_t type, size_t max, void *v);

/* Reads a fixed-length string attribute (ASCII or UTF-8) into a malloc'd,
 * NUL-terminated buffer the caller frees. NULL when absent, not a fixed-length string, or
 * unreadable. */
char *dl_h5_attr_read_string(hid_t obj, const char *name);

#endif
