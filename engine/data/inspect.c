/* inspect.c - a description of an HDF5 data file: its groups, datasets and attributes walked */
#include "engine/data/inspect.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/base/error.h"
#include "engine/base/h5util.h"

#define MAX_SHOWN_CHARS 200 /* of one string */
#define MAX_SHOWN_VALUES 16 /* of a numeric array */

/* "u8", "i32", "f32", "string" ... for an HDF5 type. */
static const char *type_name(hid_t t)
{
    H5T_class_t c = H5Tget_class(t);
    size_t size = H5Tget_size(t);
    if (c == H5T_STRING)
        return "string";
    if (c == H5T_FLOAT)
        return size == 2 ? "f16" : size == 4 ? "f32" : size == 8 ? "f64" : "float";
    if (c != H5T_INTEGER)
        return "other";
    int sign = H5Tget_sign(t) == H5T_SGN_2;
    static const char *const names[2][4] = {{"u8", "u16", "u32", "u64"},
                                            {"i8", "i16", "i32", "i64"}};
    int k = size == 1 ? 0 : size == 2 ? 1 : size == 4 ? 2 : 3;
    return names[sign][k];
}

/* One string, quoted, newlines and quotes escaped, cut at MAX_SHOWN_CHARS. */
static void put_string(FILE *out, const char *s)
{
    size_t n = strlen(s), shown = 0;
    fputc('"', out);
    for (const char *p = s; *p && shown < MAX_SHOWN_CHARS; p++, shown++) {
        if (*p == '\n')
            fputs("\\n", out);
        else if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
    if (n > MAX_SHOWN_CHARS)
        fprintf(out, "... (%zu bytes)", n);
}

/* The n strings of attribute a (fixed or variable length). */
static int put_strings(FILE *out, hid_t a, hid_t ft, hssize_t n)
{
    int var = H5Tis_variable_str(ft) > 0;
    size_t size = var ? sizeof(char *) : H5Tget_size(ft);
    char *buf = calloc((size_t)n, size + 1);
    hid_t mt = H5Tcopy(ft);
    if (!buf || mt < 0) {
        free(buf);
        return mt < 0 ? -1 : dl_error(DL_ENOMEM, "out of memory");
    }
    herr_t r = H5Aread(a, mt, buf);
    for (hssize_t i = 0; r >= 0 && i < n; i++) {
        fputs(i ? ", " : "", out);
        if (var) {
            const char *s = ((char **)buf)[i];
            put_string(out, s ? s : "");
        } else {
            char *s = strndup(buf + (size_t)i * size, size);
            put_string(out, s ? s : "");
            free(s);
        }
    }
    if (r >= 0 && var) {
        hid_t sp = H5Aget_space(a);
        H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, buf);
        H5Sclose(sp);
    }
    H5Tclose(mt);
    free(buf);
    return r < 0 ? -1 : 0;
}

/* Up to MAX_SHOWN_VALUES numbers of attribute a. */
static int put_numbers(FILE *out, hid_t a, hid_t ft, hssize_t n)
{
    double *v = malloc((size_t)n * sizeof *v);
    if (!v)
        return dl_error(DL_ENOMEM, "out of memory");
    int is_float = H5Tget_class(ft) == H5T_FLOAT;
    herr_t r = H5Aread(a, H5T_NATIVE_DOUBLE, v);
    for (hssize_t i = 0; r >= 0 && i < n && i < MAX_SHOWN_VALUES; i++)
        fprintf(out, is_float ? "%s%.6g" : "%s%.0f", i ? ", " : "", v[i]);
    if (r >= 0 && n > MAX_SHOWN_VALUES)
        fprintf(out, ", ... (%lld values)", (long long)n);
    free(v);
    return r < 0 ? -1 : 0;
}

/* "  name = value" (a list in [] for an array attribute). */
static herr_t put_attr(hid_t obj, const char *name, const H5A_info_t *info, void *ctx)
{
    FILE *out = ctx;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0)
        return -1;
    hid_t ft = H5Aget_type(a), sp = H5Aget_space(a);
    hssize_t n = H5Sget_simple_extent_npoints(sp);
    int array = H5Sget_simple_extent_ndims(sp) > 0;
    H5T_class_t c = H5Tget_class(ft);
    fprintf(out, "    %s = %s", name, array ? "[" : "");
    int r = c == H5T_STRING                      ? put_strings(out, a, ft, n)
            : c == H5T_INTEGER || c == H5T_FLOAT ? put_numbers(out, a, ft, n)
                                                 : (fprintf(out, "(%s)", type_name(ft)), 0);
    fprintf(out, "%s\n", array ? "]" : "");
    H5Sclose(sp);
    H5Tclose(ft);
    H5Aclose(a);
    return r < 0 ? -1 : 0;
}

static int put_attrs(FILE *out, const char *path, hid_t obj, const char *where)
{
    hsize_t idx = 0;
    if (H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, put_attr, out) < 0)
        return dl_h5_fail(DL_EIO, __FILE__, __LINE__, "H5Aiterate2", "%s: reading %s", path, where);
    return DL_OK;
}

/* "  x  [5, 3, 32, 32] u8" for a dataset. */
static void put_dataset(FILE *out, hid_t ds, const char *name)
{
    hid_t sp = H5Dget_space(ds), t = H5Dget_type(ds);
    hsize_t dims[H5S_MAX_RANK];
    int rank = H5Sget_simple_extent_dims(sp, dims, NULL);
    fprintf(out, "  %-8s [", name);
    for (int i = 0; i < rank; i++)
        fprintf(out, "%s%llu", i ? ", " : "", (unsigned long long)dims[i]);
    fprintf(out, "] %s", type_name(t));
    if (!strcmp(name, "tokens") && rank == 1)
        fprintf(out, "  (%llu tokens)", (unsigned long long)dims[0]);
    fprintf(out, "\n");
    H5Tclose(t);
    H5Sclose(sp);
}

typedef struct walk {
    FILE *out;
    const char *path;
    int rc;
    int groups; /* this pass shows the subgroups (else the datasets) */
} walk;

static herr_t put_member(hid_t grp, const char *name, const H5L_info_t *info, void *ctx);

static int each_member(walk *w, hid_t g, const char *where, int groups)
{
    hsize_t idx = 0;
    int saved = w->groups;
    w->groups = groups;
    if (H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, put_member, w) < 0 && w->rc == DL_OK)
        w->rc =
            dl_h5_fail(DL_EIO, __FILE__, __LINE__, "H5Literate", "%s: reading %s", w->path, where);
    w->groups = saved;
    return w->rc;
}

/* A group: its datasets, its attributes, then its subgroups likewise. */
static int put_group(walk *w, hid_t g, const char *where)
{
    fprintf(w->out, "%s\n", where);
    if (each_member(w, g, where, 0) == DL_OK)
        w->rc = put_attrs(w->out, w->path, g, where);
    if (w->rc == DL_OK)
        each_member(w, g, where, 1);
    return w->rc;
}

static herr_t put_member(hid_t grp, const char *name, const H5L_info_t *info, void *ctx)
{
    walk *w = ctx;
    hid_t o = H5Oopen(grp, name, H5P_DEFAULT);
    if (o < 0)
        return 0; /* a dangling link: nothing to show */
    H5I_type_t t = H5Iget_type(o);
    if (t == H5I_DATASET && !w->groups) {
        put_dataset(w->out, o, name);
    } else if (t == H5I_GROUP && w->groups) {
        char where[512];
        snprintf(where, sizeof where, "/%s", name);
        put_group(w, o, where);
    }
    H5Oclose(o);
    return w->rc == DL_OK ? 0 : -1;
}

/* The one-line summary: text (vocabulary) or labelled samples (classes). */
static void put_kind(FILE *out, hid_t f)
{
    char *kind = dl_h5_attr_read_string(f, "kind");
    if (kind && !strcmp(kind, "text")) {
        char *vk = dl_h5_attr_read_string(f, "vocab_kind");
        int vs = 0;
        dl_h5_attr_read(f, "vocab_size", H5T_NATIVE_INT, 1, &vs);
        fprintf(out, "kind: text, vocabulary %s, %d ids\n", vk ? vk : "?", vs);
        free(vk);
    } else {
        int classes = 0;
        static const char *const groups[] = {"train", "test", "val"};
        for (int i = 0; i < 3 && classes == 0; i++)
            if (H5Lexists(f, groups[i], H5P_DEFAULT) > 0) {
                hid_t g = H5Gopen2(f, groups[i], H5P_DEFAULT);
                if (g >= 0) {
                    dl_h5_attr_read(g, "classes", H5T_NATIVE_INT, 1, &classes);
                    H5Gclose(g);
                }
            }
        if (classes > 0)
            fprintf(out, "kind: labelled samples, %d classes\n", classes);
        else
            fprintf(out, "kind: %s\n", kind ? kind : "samples without class labels");
    }
    free(kind);
}

int dl_data_inspect(const char *path, FILE *out)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return dl_error(DL_EINVAL, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return dl_error(DL_EINVAL, "%s: not a regular file", path);
    dl_hdf5_lock();
    hid_t f = H5Fis_hdf5(path) > 0 ? H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT) : -1;
    if (f < 0) {
        dl_hdf5_unlock();
        return dl_error(DL_EINVAL, "%s: not an HDF5 file (or a damaged one)", path);
    }
    fprintf(out, "%s: HDF5, %lld bytes\n", path, (long long)st.st_size);
    put_kind(out, f);
    walk w = {out, path, DL_OK, 0};
    put_group(&w, f, "/");
    H5Fclose(f);
    dl_hdf5_unlock();
    return w.rc;
}
