/* cmd_import.c - `dlbench import`: IDX, CSV and synthetic datasets into a dlbench HDF5 file */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/data/data.h"
#include "engine/base/error.h"
#include "engine/base/h5util.h"
#include "engine/base/sha256.h"
#include "engine/data/synthetic.h"
#include "tui/cmd/commands.h"

#define MAX_SPLITS 3
#define MAX_SOURCES 2
#define MAX_NAMES 256

static const char *const fashion_names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress",
                                              "Coat",        "Sandal",  "Shirt",    "Sneaker",
                                              "Bag",         "Ankle boot"};
static const char *const digit_names[10] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};

typedef struct split {
    char name[16]; /* "train", "test", "val" */
    dl_dataset d;
    int nsrc;
    char src[MAX_SOURCES][1024];
    char sha[MAX_SOURCES][65];
} split;

typedef struct import_job {
    const char *label, *synthetic, *class_names_arg, *split_name;
    double val_fraction;
    long samples, chunk;
    int classes, gzip;
    float noise;
    uint64_t seed;
    split sp[MAX_SPLITS];
    int nsplits;
    char *names[MAX_NAMES]; /* class names (CSV string labels or a known list) */
    int nnames;
    char origin[1100];      /* what was imported, for the summary */
} import_job;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dlbench import [options] SRC OUT.h5\n"
            "       dlbench import [options] IMAGES.idx LABELS.idx OUT.h5\n"
            "       dlbench import --synthetic spirals|blobs [options] OUT.h5\n"
            "\n"
            "SRC is a folder holding IDX files (train-/t10k-images-idx3-ubyte and\n"
            "-labels-idx1-ubyte, gzipped or not), an IDX images file (its labels file is\n"
            "found by name), or a CSV file (*.csv) with a header row.\n"
            "\n"
            "  --label COLUMN        CSV: the label column (name, or 0-based index)\n"
            "  --val-fraction F      move a random fraction F of /train to /val\n"
            "  --split NAME          group for a single IDX pair (default: from the name)\n"
            "  --class-names LIST    comma-separated, or fashion-mnist, mnist, none\n"
            "  --synthetic NAME      spirals or blobs, with --samples N (2000),\n"
            "                        --classes K (2), --noise F (0.1); /test gets N/4\n"
            "  --seed S              for --val-fraction and --synthetic (0)\n"
            "  --chunk ROWS          rows per HDF5 chunk (default: about 1 MiB)\n"
            "  --gzip LEVEL          compress chunks (0-9, default 0: fastest to read)\n");
}

static int fail_input(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail_input(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dlbench import: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 2;
}

/* Maps an engine status to the exit status: bad input 2, the rest 1. */
static int report(int rc)
{
    fprintf(stderr, "dlbench import: %s\n", dl_error_message());
    return rc == DL_EINVAL || rc == DL_EIO ? 2 : 1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Records the source files of a split with their SHA-256. */
static int add_source(split *s, const char *path)
{
    DL_ASSERT(s->nsrc < MAX_SOURCES);
    snprintf(s->src[s->nsrc], sizeof s->src[0], "%s", path);
    DL_TRY(dl_sha256_file(path, s->sha[s->nsrc]));
    s->nsrc++;
    return DL_OK;
}

/* --- IDX -------------------------------------------------------------------- */

/* dir/<prefix>-<kind>-idx<n>-ubyte[.gz] or dir/<prefix>-<kind>.idx<n>-ubyte[.gz]. */
static int find_idx(char *out, size_t size, const char *dir, const char *prefix,
                    const char *kind, int ndim)
{
    static const char *const forms[] = {"%s/%s-%s-idx%d-ubyte%s", "%s/%s-%s.idx%d-ubyte%s"};
    static const char *const ext[] = {".gz", ""};
    for (int f = 0; f < 2; f++)
        for (int e = 0; e < 2; e++) {
            snprintf(out, size, forms[f], dir, prefix, kind, ndim, ext[e]);
            if (is_file(out))
                return 1;
        }
    return 0;
}

static int load_idx_split(import_job *job, const char *name, const char *images,
                          const char *labels)
{
    split *s = &job->sp[job->nsplits];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    DL_TRY(dl_dataset_load_idx(&s->d, images, labels));
    job->nsplits++;
    DL_TRY(add_source(s, images));
    DL_TRY(add_source(s, labels));
    return DL_OK;
}

static int load_idx_dir(import_job *job, const char *dir)
{
    static const struct {
        const char *prefix, *split;
    } pairs[] = {{"train", "train"}, {"t10k", "test"}};
    char im[1100], lb[1100];
    for (int i = 0; i < 2; i++) {
        int has_im = find_idx(im, sizeof im, dir, pairs[i].prefix, "images", 3);
        int has_lb = find_idx(lb, sizeof lb, dir, pairs[i].prefix, "labels", 1);
        if (has_im != has_lb)
            return dl_error(DL_EINVAL, "%s: %s but no %s file for the %s split", dir,
                            has_im ? im : lb, has_im ? "labels" : "images", pairs[i].prefix);
        if (has_im)
            DL_TRY(load_idx_split(job, pairs[i].split, im, lb));
    }
    if (job->nsplits == 0)
        return dl_error(DL_EINVAL, "%s: no IDX files: expected train-images-idx3-ubyte[.gz] "
                        "and train-labels-idx1-ubyte[.gz] (and t10k-... for /test)", dir);
    return DL_OK;
}

/* Replaces the first `from` in s by `to` (same length or shorter kept in
 * size); returns 0 when `from` is absent. */
static int replace_once(char *s, size_t size, const char *from, const char *to)
{
    char *p = strstr(s, from);
    if (!p)
        return 0;
    char tail[1100];
    snprintf(tail, sizeof tail, "%s", p + strlen(from));
    snprintf(p, size - (size_t)(p - s), "%s%s", to, tail);
    return 1;
}

static const char *split_from_name(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (!strncmp(base, "t10k", 4) || !strncmp(base, "test", 4))
        return "test";
    return "train";
}

/* --- CSV -------------------------------------------------------------------- */

/* Splits one line into fields in place (quotes with "" escapes); returns
 * the number of fields or -1 for an unterminated quote. */
static int csv_fields(char *line, char **fields, int max)
{
    int n = 0;
    char *p = line;
    for (;;) {
        char *out = p, *start = p;
        if (*p == '"') {
            p++;
            for (;;) {
                if (!*p)
                    return -1;
                if (*p == '"' && p[1] == '"') {
                    *out++ = '"';
                    p += 2;
                } else if (*p == '"') {
                    p++;
                    break;
                } else {
                    *out++ = *p++;
                }
            }
            while (*p && *p != ',')
                p++;
        } else {
            while (*p && *p != ',')
                *out++ = *p++;
        }
        char sep = *p;
        if (out < p || sep)
            *out = 0;
        if (n < max)
            fields[n] = start;
        n++;
        if (!sep)
            break;
        p++;
    }
    return n;
}

static int parse_number(const char *s, double *v)
{
    while (isspace((unsigned char)*s))
        s++;
    if (!*s)
        return 0;
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    while (isspace((unsigned char)*end))
        end++;
    return *end == 0 && errno != ERANGE && isfinite(*v);
}

static int name_index(import_job *job, const char *name)
{
    for (int i = 0; i < job->nnames; i++)
        if (!strcmp(job->names[i], name))
            return i;
    return -1;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int load_csv(import_job *job, const char *path)
{
    if (!job->label)
        return dl_error(DL_EINVAL, "%s: a CSV file needs --label COLUMN", path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return dl_error(DL_EIO, "%s: cannot open: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    if (!text) {
        fclose(f);
        return dl_error(DL_ENOMEM, "%s: out of memory for %ld bytes", path, size);
    }
    size_t got = fread(text, 1, (size_t)size, f);
    fclose(f);
    text[got] = 0;

    /* lines (blank ones skipped), kept as pointers into text */
    size_t nlines = 0, cap = 1024;
    char **lines = malloc(cap * sizeof *lines);
    int *lineno = malloc(cap * sizeof *lineno);
    int rc = DL_OK, ln = 0;
    float *x = NULL;
    double *yv = NULL;
    char **ys = NULL;
    enum { MAXF = 100000 };
    char **fields = malloc(MAXF * sizeof *fields), **header = NULL;
    for (char *p = text; p && *p;) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = 0;
        ln++;
        size_t len = strlen(p);
        if (len && p[len - 1] == '\r')
            p[--len] = 0;
        if (len) {
            if (nlines == cap) {
                cap *= 2;
                lines = realloc(lines, cap * sizeof *lines);
                lineno = realloc(lineno, cap * sizeof *lineno);
            }
            lines[nlines] = p;
            lineno[nlines++] = ln;
        }
        p = nl ? nl + 1 : NULL;
    }
    if (nlines == 0) {
        rc = dl_error(DL_EINVAL, "%s: empty CSV file", path);
        goto out;
    }
    /* header: the first line when any field of it is not a number */
    int ncol = csv_fields(lines[0], fields, MAXF);
    if (ncol < 2 || ncol > MAXF) {
        rc = dl_error(DL_EINVAL, "%s:%d: %d columns, expected 2 to %d (features and a label)",
                      path, lineno[0], ncol, MAXF);
        goto out;
    }
    int has_header = 0;
    for (int c = 0; c < ncol; c++) {
        double v;
        has_header |= !parse_number(fields[c], &v);
    }
    int label_col = -1;
    if (has_header) {
        header = malloc((size_t)ncol * sizeof *header);
        memcpy(header, fields, (size_t)ncol * sizeof *header);
        for (int c = 0; c < ncol && label_col < 0; c++)
            if (!strcmp(header[c], job->label))
                label_col = c;
    }
    if (label_col < 0) {
        char *end;
        long v = strtol(job->label, &end, 10);
        if (*end == 0 && end != job->label && v >= 0 && v < ncol)
            label_col = (int)v;
    }
    if (label_col < 0) {
        rc = dl_error(DL_EINVAL, "%s:%d: no column \"%s\" (%s%d columns)", path, lineno[0],
                      job->label, has_header ? "header names or 0-based index of " : "",
                      ncol);
        goto out;
    }
    size_t first = (size_t)has_header, n = nlines - first;
    if (n == 0) {
        rc = dl_error(DL_EINVAL, "%s: a header but no data rows", path);
        goto out;
    }
    int nf = ncol - 1;
    x = malloc(n * (size_t)nf * sizeof *x);
    yv = malloc(n * sizeof *yv);
    ys = malloc(n * sizeof *ys);
    if (!x || !yv || !ys) {
        rc = dl_error(DL_ENOMEM, "%s: out of memory for %zu rows", path, n);
        goto out;
    }
    int numeric = 1, integral = 1;
    for (size_t r = 0; r < n; r++) {
        int k = csv_fields(lines[first + r], fields, MAXF);
        if (k != ncol) {
            rc = k < 0 ? dl_error(DL_EINVAL, "%s:%d: unterminated quote", path,
                                  lineno[first + r])
                       : dl_error(DL_EINVAL, "%s:%d: %d fields, expected %d", path,
                                  lineno[first + r], k, ncol);
            goto out;
        }
        for (int c = 0, j = 0; c < ncol; c++) {
            if (c == label_col) {
                ys[r] = fields[c];
                numeric &= parse_number(fields[c], &yv[r]);
                integral &= numeric && yv[r] >= 0 && yv[r] < 1e6 && yv[r] == floor(yv[r]);
                continue;
            }
            double v;
            if (!parse_number(fields[c], &v)) {
                char col[64];
                if (header)
                    snprintf(col, sizeof col, "\"%.50s\"", header[c]);
                else
                    snprintf(col, sizeof col, "%d", c);
                rc = dl_error(DL_EINVAL, "%s:%d: column %s: \"%.40s\" is not a number", path,
                              lineno[first + r], col, fields[c]);
                goto out;
            }
            x[r * (size_t)nf + (size_t)j++] = (float)v;
        }
    }

    split *s = &job->sp[job->nsplits];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "train");
    dl_data_info *info = &s->d.info;
    info->sample = dl_shape_make(1, (const int64_t[]){nf});
    info->x_dtype = DL_F32;
    info->count = n;
    info->scale = 1;
    info->y_width = 1;
    if (numeric && !integral) {
        float *y = malloc(n * sizeof *y);
        if (!y) {
            rc = dl_error(DL_ENOMEM, "%s: out of memory", path);
            goto out;
        }
        for (size_t r = 0; r < n; r++)
            y[r] = (float)yv[r];
        info->y_dtype = DL_F32;
        s->d.y = y;
    } else {
        int32_t *y = malloc(n * sizeof *y);
        if (!y) {
            rc = dl_error(DL_ENOMEM, "%s: out of memory", path);
            goto out;
        }
        info->y_dtype = DL_I32;
        int maxlab = 0;
        if (numeric) {
            for (size_t r = 0; r < n; r++) {
                y[r] = (int32_t)yv[r];
                maxlab = y[r] > maxlab ? y[r] : maxlab;
            }
            info->classes = maxlab + 1;
        } else {
            /* string labels: classes are the sorted distinct names */
            for (size_t r = 0; r < n; r++) {
                if (name_index(job, ys[r]) >= 0)
                    continue;
                if (job->nnames == MAX_NAMES) {
                    free(y);
                    rc = dl_error(DL_EINVAL, "%s: more than %d distinct labels in column %d",
                                  path, MAX_NAMES, label_col);
                    goto out;
                }
                job->names[job->nnames++] = strdup(ys[r]);
            }
            qsort(job->names, (size_t)job->nnames, sizeof *job->names, cmp_str);
            for (size_t r = 0; r < n; r++)
                y[r] = name_index(job, ys[r]);
            info->classes = job->nnames;
        }
        s->d.y = y;
    }
    s->d.x = x;
    x = NULL;
    snprintf(s->d.name, sizeof s->d.name, "%s", path);
    job->nsplits++;
    rc = add_source(s, path);
out:
    free(x);
    free(yv);
    free(ys);
    free(header);
    free(fields);
    free(lines);
    free(lineno);
    free(text);
    return rc;
}

/* --- splitting and statistics --------------------------------------------------- */

/* Gathers rows idx[0..n) of src into a new dataset. */
static int gather(dl_dataset *dst, const dl_dataset *src, const uint32_t *idx, size_t n)
{
    size_t xr = (size_t)dl_shape_numel(&src->info.sample) * dl_dtype_size(src->info.x_dtype);
    size_t yr = (size_t)src->info.y_width * dl_dtype_size(src->info.y_dtype);
    memset(dst, 0, sizeof *dst);
    dst->info = src->info;
    dst->info.count = n;
    dst->x = malloc(n * xr + 1);
    dst->y = malloc(n * yr + 1);
    if (!dst->x || !dst->y) {
        dl_dataset_done(dst);
        return dl_error(DL_ENOMEM, "out of memory for a split of %zu rows", n);
    }
    for (size_t i = 0; i < n; i++) {
        memcpy((char *)dst->x + i * xr, (const char *)src->x + idx[i] * xr, xr);
        memcpy((char *)dst->y + i * yr, (const char *)src->y + idx[i] * yr, yr);
    }
    snprintf(dst->name, sizeof dst->name, "%s", src->name);
    return DL_OK;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Moves a seeded random fraction of /train (or of the only split) to /val,
 * both kept in file order. */
static int make_val(import_job *job)
{
    split *tr = NULL;
    for (int i = 0; i < job->nsplits; i++)
        if (!strcmp(job->sp[i].name, "train"))
            tr = &job->sp[i];
    if (!tr && job->nsplits == 1)
        tr = &job->sp[0]; /* a single pair: its own split gives the validation rows */
    if (!tr)
        return dl_error(DL_EINVAL, "--val-fraction: no /train split to take it from");
    size_t n = tr->d.info.count, nval = (size_t)llround(job->val_fraction * (double)n);
    if (nval == 0 || nval >= n)
        return dl_error(DL_EINVAL, "--val-fraction %g of %zu samples leaves an empty split",
                        job->val_fraction, n);
    uint32_t *perm = malloc(n * sizeof *perm);
    if (!perm)
        return dl_error(DL_ENOMEM, "out of memory");
    dl_shuffle_permutation(perm, n, job->seed, 0);
    qsort(perm, nval, sizeof *perm, cmp_u32);
    qsort(perm + nval, n - nval, sizeof *perm, cmp_u32);
    split *va = &job->sp[job->nsplits];
    *va = *tr; /* same sources */
    snprintf(va->name, sizeof va->name, "val");
    dl_dataset train;
    int rc = gather(&va->d, &tr->d, perm, nval);
    if (rc == DL_OK && (rc = gather(&train, &tr->d, perm + nval, n - nval)) < 0)
        dl_dataset_done(&va->d);
    free(perm);
    if (rc < 0) {
        memset(&va->d, 0, sizeof va->d);
        return rc;
    }
    dl_dataset_done(&tr->d);
    tr->d = train;
    job->nsplits++;
    return DL_OK;
}

/* Per-channel mean and std of x * scale over d (channels = dim 0 of
 * [C, H, W] samples, else 1). */
static int channel_stats(const dl_dataset *d, float *mean, float *std)
{
    const dl_data_info *in = &d->info;
    int ch = in->sample.ndim >= 3 ? (int)in->sample.dim[0] : 1;
    if (ch > DL_MAX_CHANNELS)
        return 0;
    size_t per = (size_t)dl_shape_numel(&in->sample), plane = per / (size_t)ch;
    for (int c = 0; c < ch; c++) {
        double s = 0, s2 = 0;
        for (size_t i = 0; i < in->count; i++)
            for (size_t p = 0; p < plane; p++) {
                size_t k = i * per + (size_t)c * plane + p;
                double v = in->x_dtype == DL_U8    ? ((const uint8_t *)d->x)[k]
                           : in->x_dtype == DL_I32 ? ((const int32_t *)d->x)[k]
                                                   : ((const float *)d->x)[k];
                s += v;
                s2 += v * v;
            }
        double cnt = (double)in->count * (double)plane, m = s / cnt;
        double var = s2 / cnt - m * m;
        mean[c] = (float)(m * in->scale);
        std[c] = (float)(sqrt(var > 0 ? var : 0) * in->scale);
        if (!(std[c] > 0))
            std[c] = 1;
    }
    return ch;
}

/* --- writing ------------------------------------------------------------------- */

#define H5_OK(call)                                                                   \
    do {                                                                              \
        if ((call) < 0) {                                                             \
            char why_[256];                                                           \
            return dl_error(DL_ERR, "%s: writing %s: %s (cmd_import.c:%d: %s)", path, \
                            where, dl_hdf5_error_text(why_, sizeof why_), __LINE__,   \
                            #call);                                                   \
        }                                                                             \
    } while (0)

static int attr_write(const char *path, const char *where, hid_t obj, const char *name,
                      hid_t type, int n, const void *v)
{
    hsize_t dim = (hsize_t)n;
    hid_t sp = n == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &dim, NULL);
    H5_OK(sp);
    hid_t a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t w = a >= 0 ? H5Awrite(a, type, v) : -1;
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(sp);
    H5_OK(w);
    return DL_OK;
}

/* n fixed-length strings (n = 0: one scalar string). */
static int attr_strings(const char *path, const char *where, hid_t obj, const char *name,
                        const char *const *v, int n)
{
    if (n < 0)
        return dl_error(DL_EINVAL, "%s: negative string count for attribute %s", path, name);
    size_t count = n ? (size_t)n : 1;
    size_t len = 1;
    for (size_t i = 0; i < count; i++)
        if (strlen(v[i]) + 1 > len)
            len = strlen(v[i]) + 1;
    char *buf = calloc(count, len);
    if (!buf)
        return dl_error(DL_ENOMEM, "out of memory");
    for (size_t i = 0; i < count; i++)
        memcpy(buf + i * len, v[i], strlen(v[i]));
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, len);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    H5Tset_cset(t, H5T_CSET_UTF8);
    int rc = attr_write(path, where, obj, name, t, n, buf);
    H5Tclose(t);
    free(buf);
    return rc;
}

static int write_dataset(const char *path, const char *where, hid_t grp, const char *name,
                         dl_dtype dt, int rank, const hsize_t *dims, const void *data,
                         hsize_t chunk_rows, int gzip)
{
    hid_t mt = dt == DL_U8 ? H5T_NATIVE_UINT8 : dt == DL_I32 ? H5T_NATIVE_INT32
                                                             : H5T_NATIVE_FLOAT;
    hid_t ft = dt == DL_U8 ? H5T_STD_U8LE : dt == DL_I32 ? H5T_STD_I32LE : H5T_IEEE_F32LE;
    hsize_t chunk[H5S_MAX_RANK];
    memcpy(chunk, dims, sizeof(hsize_t) * (size_t)rank);
    chunk[0] = chunk_rows < dims[0] ? chunk_rows : dims[0];
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    H5_OK(sp);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, rank, chunk);
    if (gzip > 0) {
        H5Pset_shuffle(dcpl);
        H5Pset_deflate(dcpl, (unsigned)gzip);
    }
    hid_t ds = H5Dcreate2(grp, name, ft, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    herr_t w = ds >= 0 ? H5Dwrite(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) : -1;
    if (ds >= 0)
        H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5_OK(w);
    return DL_OK;
}

static int write_split(const char *path, hid_t file, const import_job *job, const split *s,
                       const float *mean, const float *std, int channels)
{
    char where[32];
    snprintf(where, sizeof where, "/%s", s->name);
    const dl_data_info *in = &s->d.info;
    hid_t g = H5Gcreate2(file, where, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5_OK(g);
    hsize_t xd[DL_MAX_DIMS + 1] = {in->count}, yd[2] = {in->count, (hsize_t)in->y_width};
    for (int i = 0; i < in->sample.ndim; i++)
        xd[i + 1] = (hsize_t)in->sample.dim[i];
    size_t row = (size_t)dl_shape_numel(&in->sample) * dl_dtype_size(in->x_dtype);
    hsize_t chunk = job->chunk > 0 ? (hsize_t)job->chunk : (hsize_t)((1u << 20) / row);
    if (chunk == 0)
        chunk = 1;
    int64_t shape[DL_MAX_DIMS], count = (int64_t)in->count;
    for (int i = 0; i < in->sample.ndim; i++)
        shape[i] = in->sample.dim[i];
    const char *srcs[MAX_SOURCES], *shas[MAX_SOURCES];
    for (int i = 0; i < s->nsrc; i++) {
        srcs[i] = s->src[i];
        shas[i] = s->sha[i];
    }
    int rc = write_dataset(path, where, g, "x", in->x_dtype, in->sample.ndim + 1, xd, s->d.x,
                           chunk, job->gzip);
    if (rc == DL_OK)
        rc = write_dataset(path, where, g, "y", in->y_dtype, in->y_width > 1 ? 2 : 1, yd,
                           s->d.y, chunk, job->gzip);
    if (rc == DL_OK)
        rc = attr_write(path, where, g, "sample_shape", H5T_NATIVE_INT64, in->sample.ndim,
                        shape);
    if (rc == DL_OK)
        rc = attr_write(path, where, g, "count", H5T_NATIVE_INT64, 0, &count);
    if (rc == DL_OK)
        rc = attr_write(path, where, g, "scale", H5T_NATIVE_FLOAT, 0, &in->scale);
    if (rc == DL_OK && in->classes > 0)
        rc = attr_write(path, where, g, "classes", H5T_NATIVE_INT32, 0, &in->classes);
    if (rc == DL_OK && job->nnames > 0)
        rc = attr_strings(path, where, g, "class_names", (const char *const *)job->names,
                          job->nnames);
    if (rc == DL_OK && channels > 0)
        rc = attr_write(path, where, g, "mean", H5T_NATIVE_FLOAT, channels, mean);
    if (rc == DL_OK && channels > 0)
        rc = attr_write(path, where, g, "std", H5T_NATIVE_FLOAT, channels, std);
    if (rc == DL_OK && s->nsrc > 0)
        rc = attr_strings(path, where, g, "source", srcs, s->nsrc);
    if (rc == DL_OK && s->nsrc > 0)
        rc = attr_strings(path, where, g, "source_sha256", shas, s->nsrc);
    H5Gclose(g);
    return rc;
}

/* Writes every split to tmp, flushed to disk. */
static int write_file(const char *path, const import_job *job)
{
    const char *where = "/";
    float mean[DL_MAX_CHANNELS], std[DL_MAX_CHANNELS];
    int channels = 0;
    /* normalisation statistics come from /train and are shared by all splits */
    for (int i = 0; i < job->nsplits; i++)
        if (!strcmp(job->sp[i].name, "train"))
            channels = channel_stats(&job->sp[i].d, mean, std);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5_OK(f);
    const char *fmt = "dlbench-data 1", *by = "dlbench import";
    int rc = attr_strings(path, where, f, "format", &fmt, 0);
    if (rc == DL_OK)
        rc = attr_strings(path, where, f, "created_by", &by, 0);
    if (rc == DL_OK)
        rc = attr_strings(path, where, f, "origin", (const char *[]){job->origin}, 0);
    for (int i = 0; i < job->nsplits && rc == DL_OK; i++)
        rc = write_split(path, f, job, &job->sp[i], mean, std, channels);
    if (H5Fclose(f) < 0 && rc == DL_OK) {
        char why[256];
        rc = dl_error(DL_ERR, "%s: closing: %s", path, dl_hdf5_error_text(why, sizeof why));
    }
    if (rc == DL_OK) {
        int fd = open(path, O_RDONLY);
        if (fd < 0 || fsync(fd) != 0)
            rc = dl_error(DL_ERR, "%s: flushing to disk: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    return rc;
}

/* --- the command ---------------------------------------------------------------- */

static int set_class_names(import_job *job, const char *arg, int classes)
{
    if (!strcmp(arg, "none"))
        return DL_OK;
    const char *const *list = !strcmp(arg, "fashion-mnist") ? fashion_names
                              : !strcmp(arg, "mnist")       ? digit_names
                                                            : NULL;
    for (int i = 0; i < job->nnames; i++)
        free(job->names[i]);
    job->nnames = 0;
    if (list) {
        for (int i = 0; i < 10; i++)
            job->names[job->nnames++] = strdup(list[i]);
    } else {
        char *copy = strdup(arg), *save = NULL;
        for (char *t = strtok_r(copy, ",", &save); t && job->nnames < MAX_NAMES;
             t = strtok_r(NULL, ",", &save))
            job->names[job->nnames++] = strdup(t);
        free(copy);
    }
    if (classes > 0 && job->nnames != classes)
        return dl_error(DL_EINVAL, "--class-names: %d names for %d classes", job->nnames,
                        classes);
    return DL_OK;
}

static int parse_long(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi)
        return fail_input("%s: \"%s\", expected an integer in %ld..%ld", opt, s, lo, hi);
    *out = v;
    return 0;
}

/* The output's folder must exist (it is not made: a typo in the path
 * should not create folders) and OUT must not be a folder. Returns 0 or
 * the exit status 2 after saying why. */
static int check_output(const char *out)
{
    char dir[1100];
    if (snprintf(dir, sizeof dir, "%s", out) >= (int)sizeof dir)
        return fail_input("%s: path too long", out);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        slash[1] = 0;
    else
        *slash = 0;
    if (!is_dir(dir))
        return fail_input("%s: the folder %s does not exist (create it first)", out, dir);
    if (is_dir(out))
        return fail_input("%s: is a folder; expected the path of the .h5 file to write", out);
    return 0;
}

static int run_import(import_job *job, int npos, char **pos)
{
    const char *out = pos[npos - 1];
    int rc;
    if ((rc = check_output(out)) != 0)
        return rc;
    if (job->synthetic) {
        if (npos != 1)
            return fail_input("--synthetic takes only OUT.h5 (got %d paths)", npos);
        long ntest = job->samples / 4 > 0 ? job->samples / 4 : 1;
        static const char *const names[] = {"train", "test"};
        for (int i = 0; i < 2; i++) {
            split *s = &job->sp[job->nsplits];
            memset(s, 0, sizeof *s);
            snprintf(s->name, sizeof s->name, "%s", names[i]);
            /* the test split uses the next seed so it holds new points */
            rc = dl_dataset_synthetic(&s->d, job->synthetic,
                                      (size_t)(i ? ntest : job->samples), job->classes,
                                      job->noise, job->seed + (uint64_t)i);
            if (rc < 0)
                return report(rc);
            job->nsplits++;
        }
        snprintf(job->origin, sizeof job->origin,
                 "synthetic %s: %ld samples, %d classes, noise %g, seed %llu", job->synthetic,
                 job->samples, job->classes, (double)job->noise,
                 (unsigned long long)job->seed);
    } else if (npos == 3) {
        const char *sp = job->split_name ? job->split_name : split_from_name(pos[0]);
        if ((rc = load_idx_split(job, sp, pos[0], pos[1])) < 0)
            return report(rc);
        snprintf(job->origin, sizeof job->origin, "IDX %.500s + %.500s", pos[0], pos[1]);
    } else if (npos == 2) {
        const char *src = pos[0];
        if (is_dir(src)) {
            rc = load_idx_dir(job, src);
        } else if (!is_file(src)) {
            rc = dl_error(DL_EINVAL, "%s: no such file or folder", src);
        } else if (ends_with(src, ".csv") || ends_with(src, ".csv.gz")) {
            if (ends_with(src, ".gz"))
                rc = dl_error(DL_EINVAL, "%s: gzipped CSV is not supported; gunzip it first",
                              src);
            else
                rc = load_csv(job, src);
        } else {
            char labels[1100];
            snprintf(labels, sizeof labels, "%s", src);
            char *base = strrchr(labels, '/');
            base = base ? base + 1 : labels;
            if (!replace_once(base, sizeof labels - (size_t)(base - labels), "images",
                              "labels") ||
                !replace_once(base, sizeof labels - (size_t)(base - labels), "idx3", "idx1"))
                rc = dl_error(DL_EINVAL, "%s: not a folder, a .csv file or an IDX images file "
                              "named *images*idx3*; give IMAGES LABELS OUT.h5", src);
            else if (!is_file(labels))
                rc = dl_error(DL_EINVAL, "%s: no labels file %s next to it", src, labels);
            else
                rc = load_idx_split(job,
                                    job->split_name ? job->split_name : split_from_name(src),
                                    src, labels);
        }
        if (rc < 0)
            return report(rc);
        snprintf(job->origin, sizeof job->origin, "%s %.1000s",
                 job->sp[0].d.info.x_dtype == DL_F32 ? "CSV" : "IDX", src);
    } else {
        usage(stderr);
        return 2;
    }
    if (job->split_name && npos != 3 && (npos != 2 || job->nsplits != 1))
        return fail_input("--split applies to a single IDX pair");

    /* class names: explicit, known (Fashion-MNIST, MNIST) or from CSV labels */
    int classes = job->sp[0].d.info.classes;
    if (job->class_names_arg) {
        if ((rc = set_class_names(job, job->class_names_arg, classes)) < 0)
            return report(rc);
    } else if (job->nnames == 0 && classes == 10 && job->sp[0].d.info.x_dtype == DL_U8) {
        const char *p = job->sp[0].src[0];
        int fashion = 0;
        for (const char *q = p; *q && !fashion; q++)
            fashion = strncasecmp(q, "fashion", 7) == 0;
        set_class_names(job, fashion ? "fashion-mnist" : "mnist", 10);
    }
    for (int i = 0; i < job->nsplits; i++)
        if (job->sp[i].d.info.x_dtype == DL_U8)
            job->sp[i].d.info.scale = 1.0f / 255.0f;
    if (job->val_fraction > 0 && (rc = make_val(job)) < 0)
        return report(rc);

    /* write beside the target, then rename: never a torn OUT.h5 */
    char tmp[1100];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", out) >= (int)sizeof tmp)
        return fail_input("%s: path too long", out);
    dl_hdf5_lock();
    rc = write_file(tmp, job);
    dl_hdf5_unlock();
    if (rc == DL_OK && rename(tmp, out) != 0)
        rc = dl_error(DL_EIO, "%s: cannot rename %s to it: %s", out, tmp, strerror(errno));
    if (rc < 0) {
        unlink(tmp);
        fprintf(stderr, "dlbench import: %s\n", dl_error_message());
        return 1;
    }
    printf("wrote %s (%s)\n", out, job->origin);
    for (int i = 0; i < job->nsplits; i++) {
        const dl_data_info *in = &job->sp[i].d.info;
        char shape[64];
        printf("  /%-5s %8zu x %s %s, y %s", job->sp[i].name, in->count,
               dl_shape_format(&in->sample, shape, sizeof shape), dl_dtype_name(in->x_dtype),
               dl_dtype_name(in->y_dtype));
        if (in->classes)
            printf(", %d classes", in->classes);
        printf("\n");
    }
    return 0;
}

/* dlbench import [options] SRC OUT.h5 | IMAGES LABELS OUT.h5 | --synthetic NAME OUT.h5.
 * Exit status 0, 2 for bad input (arguments or source data), 1 when the
 * output cannot be written. The output appears only when complete. */
int dl_cmd_import(int argc, char **argv)
{
    import_job *job = calloc(1, sizeof *job);
    if (!job)
        return 1;
    job->samples = 2000;
    job->classes = 2;
    job->noise = 0.1f;
    char *pos[4];
    int npos = 0, status = -1;
    for (int i = 1; i < argc && status < 0; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        long v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            status = 0;
        } else if (a[0] == '-' && a[1] == '-' && !val) {
            status = fail_input("%s needs a value", a);
        } else if (!strcmp(a, "--label")) {
            job->label = argv[++i];
        } else if (!strcmp(a, "--synthetic")) {
            job->synthetic = argv[++i];
        } else if (!strcmp(a, "--class-names")) {
            job->class_names_arg = argv[++i];
        } else if (!strcmp(a, "--split")) {
            job->split_name = argv[++i];
            if (strcmp(val, "train") && strcmp(val, "test") && strcmp(val, "val"))
                status = fail_input("--split \"%s\": expected train, test or val", val);
        } else if (!strcmp(a, "--val-fraction")) {
            char *end;
            job->val_fraction = strtod(argv[++i], &end);
            if (*end || !(job->val_fraction > 0 && job->val_fraction < 1))
                status = fail_input("--val-fraction \"%s\": expected a number in (0, 1)", val);
        } else if (!strcmp(a, "--noise")) {
            char *end;
            job->noise = strtof(argv[++i], &end);
            if (*end || !(job->noise >= 0 && job->noise < 100))
                status = fail_input("--noise \"%s\": expected a number >= 0", val);
        } else if (!strcmp(a, "--samples")) {
            status = parse_long(a, argv[++i], 4, 100000000, &job->samples) ? 2 : -1;
        } else if (!strcmp(a, "--classes")) {
            status = parse_long(a, argv[++i], 2, 1000, &v) ? 2 : -1;
            job->classes = (int)v;
        } else if (!strcmp(a, "--seed")) {
            status = parse_long(a, argv[++i], 0, INT64_MAX, &v) ? 2 : -1;
            job->seed = (uint64_t)v;
        } else if (!strcmp(a, "--chunk")) {
            status = parse_long(a, argv[++i], 1, 1 << 24, &job->chunk) ? 2 : -1;
        } else if (!strcmp(a, "--gzip")) {
            status = parse_long(a, argv[++i], 0, 9, &v) ? 2 : -1;
            job->gzip = (int)v;
        } else if (a[0] == '-' && a[1] != 0) {
            status = fail_input("unknown option %s (see dlbench import --help)", a);
        } else if (npos < 4) {
            pos[npos++] = argv[i];
        } else {
            status = fail_input("too many paths");
        }
    }
    if (status < 0) {
        if (npos < 1 || npos > 3 || (npos == 1 && !job->synthetic) ||
            (job->synthetic && npos != 1)) {
            usage(stderr);
            status = 2;
        } else {
            status = run_import(job, npos, pos);
        }
    }
    for (int i = 0; i < job->nsplits; i++)
        dl_dataset_done(&job->sp[i].d);
    for (int i = 0; i < job->nnames; i++)
        free(job->names[i]);
    free(job);
    return status;
}
