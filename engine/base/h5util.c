/* h5util.c - the process-wide HDF5 lock, HDF5 error text and attribute helpers */
#include "engine/base/h5util.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t h5_mutex;
static pthread_once_t h5_once = PTHREAD_ONCE_INIT;

static void h5_mutex_init(void)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&h5_mutex, &a);
    pthread_mutexattr_destroy(&a);
}

void dl_hdf5_lock(void)
{
    /* In a thread-safe HDF5 the automatic error printing is per thread. */
    static _Thread_local int silenced;
    pthread_once(&h5_once, h5_mutex_init);
    pthread_mutex_lock(&h5_mutex);
    if (!silenced) {
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
        silenced = 1;
    }
}

void dl_hdf5_unlock(void) { pthread_mutex_unlock(&h5_mutex); }

static herr_t first_desc(unsigned n, const H5E_error2_t *e, void *data)
{
    char **out = data;
    if (n == 0 && e->desc && **out == 0) {
        size_t size = (size_t)(uintptr_t)out[1];
        snprintf(*out, size, "%s", e->desc);
    }
    return 0;
}

char *dl_hdf5_error_text(char *buf, size_t size)
{
    char *ctx[2] = {buf, (char *)(uintptr_t)size};
    buf[0] = 0;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, first_desc, ctx);
    if (!buf[0])
        snprintf(buf, size, "HDF5 error");
    H5Eclear2(H5E_DEFAULT);
    return buf;
}

int dl_h5_fail(int code, const char *file, int line, const char *call, const char *fmt, ...)
{
    char what[512], why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    dl_hdf5_error_text(why, sizeof why);
    const char *base = strrchr(file, '/');
    return dl_error(code, "%s: %s (%s:%d: %s)", what, why, base ? base + 1 : file, line, call);
}

int dl_h5_attr_write(hid_t obj, const char *name, hid_t type, int n, const void *v)
{
    hsize_t dim = (hsize_t)n;
    hid_t sp = n == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &dim, NULL);
    if (sp < 0)
        return -1;
    hid_t a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t w = a >= 0 ? H5Awrite(a, type, v) : -1;
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(sp);
    return w < 0 ? -1 : 0;
}

/* A fixed-length string type of len bytes (NUL included). */
static hid_t string_type(size_t len, H5T_cset_t cset)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0)
        return t;
    if (H5Tset_size(t, len) < 0 || H5Tset_strpad(t, H5T_STR_NULLTERM) < 0 ||
        H5Tset_cset(t, cset) < 0) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

int dl_h5_attr_write_string(hid_t obj, const char *name, const char *value, H5T_cset_t cset)
{
    hid_t t = string_type(strlen(value) + 1, cset);
    if (t < 0)
        return -1;
    int rc = dl_h5_attr_write(obj, name, t, 0, value);
    H5Tclose(t);
    return rc;
}

int dl_h5_attr_write_strings(hid_t obj, const char *name, const char *const *v, int n,
                             H5T_cset_t cset)
{
    if (n < 1)
        return dl_error(DL_EINVAL, "attribute %s: %d strings, expected at least 1", name, n);
    size_t len = 1;
    for (int i = 0; i < n; i++)
        if (strlen(v[i]) + 1 > len)
            len = strlen(v[i]) + 1;
    char *buf = calloc((size_t)n, len);
    if (!buf)
        return dl_error(DL_ENOMEM, "attribute %s: out of memory", name);
    for (int i = 0; i < n; i++)
        memcpy(buf + (size_t)i * len, v[i], strlen(v[i]));
    hid_t t = string_type(len, cset);
    int rc = t < 0 ? -1 : dl_h5_attr_write(obj, name, t, n, buf);
    if (t >= 0)
        H5Tclose(t);
    free(buf);
    return rc;
}

int dl_h5_attr_read(hid_t obj, const char *name, hid_t type, size_t max, void *v)
{
    if (H5Aexists(obj, name) <= 0)
        return 0;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0)
        return -1;
    hid_t sp = H5Aget_space(a);
    hssize_t n = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    int got = n >= 1 && (size_t)n <= max && H5Aread(a, type, v) >= 0 ? (int)n : -1;
    if (sp >= 0)
        H5Sclose(sp);
    H5Aclose(a);
    return got;
}

char *dl_h5_attr_read_string(hid_t obj, const char *name)
{
    if (H5Aexists(obj, name) <= 0)
        return NULL;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0)
        return NULL;
    hid_t ft = H5Aget_type(a);
    char *buf = NULL;
    if (ft >= 0 && H5Tget_class(ft) == H5T_STRING && !H5Tis_variable_str(ft)) {
        size_t n = H5Tget_size(ft);
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, n);
        H5Tset_cset(mt, H5Tget_cset(ft)); /* HDF5 does not convert ASCII <-> UTF-8 */
        buf = calloc(1, n + 1);
        if (buf && H5Aread(a, mt, buf) < 0) {
            free(buf);
            buf = NULL;
        }
        H5Tclose(mt);
    }
    if (ft >= 0)
        H5Tclose(ft);
    H5Aclose(a);
    return buf;
}
