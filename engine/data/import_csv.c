/* import_csv.c - CSV import: lines and fields, a header found, features and labels parsed */
#include "engine/data/import_csv.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"

enum { MAXF = 100000 }; /* columns per row */

/* The file in memory: its text cut into non-blank lines in place. */
typedef struct csv_doc {
    const char *path;
    char *text;
    char **lines; /* [nlines] pointers into text */
    int *lineno;  /* [nlines] 1-based line numbers in the file */
    size_t nlines, cap;
    char **fields; /* [MAXF] scratch for csv_fields */
    char **header; /* [ncol] names, NULL without a header row */
    char *first;   /* a copy of lines[0], split for the header (lines[0] stays whole) */
    int ncol, label_col;
    int regression; /* the label column is f32 targets, whatever its values */
} csv_doc;

/* The parsed rows: x [n, ncol - 1]; the label column as numbers (when
 * numeric) and as text. */
typedef struct csv_rows {
    size_t first, n; /* lines[first..first + n) are data rows */
    float *x;
    double *yv;
    char **ys;
    int numeric, integral;
} csv_rows;

static void doc_done(csv_doc *c)
{
    free(c->first);
    free(c->header);
    free(c->fields);
    free(c->lines);
    free(c->lineno);
    free(c->text);
}

static void rows_done(csv_rows *r)
{
    free(r->x);
    free(r->yv);
    free(r->ys);
}

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

/* Reads the whole file into c->text, NUL-terminated. */
static int read_text(csv_doc *c)
{
    FILE *f = fopen(c->path, "rb");
    if (!f)
        return dl_error(DL_EIO, "%s: cannot open: %s", c->path, strerror(errno));
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        int e = errno;
        fclose(f);
        return dl_error(DL_EIO, "%s: cannot read: %s", c->path, strerror(e));
    }
    c->text = malloc((size_t)size + 1);
    if (!c->text) {
        fclose(f);
        return dl_error(DL_ENOMEM, "%s: out of memory for %ld bytes", c->path, size);
    }
    size_t got = fread(c->text, 1, (size_t)size, f);
    fclose(f);
    c->text[got] = 0;
    return DL_OK;
}

/* Appends line p (number ln), doubling the arrays when full: a failed
 * realloc keeps the arrays as they were. */
static int add_line(csv_doc *c, char *p, int ln)
{
    if (c->nlines == c->cap) {
        size_t cap = c->cap * 2;
        char **lines = realloc(c->lines, cap * sizeof *lines);
        if (!lines)
            return dl_error(DL_ENOMEM, "%s: out of memory for %zu lines", c->path, cap);
        c->lines = lines;
        int *lineno = realloc(c->lineno, cap * sizeof *lineno);
        if (!lineno)
            return dl_error(DL_ENOMEM, "%s: out of memory for %zu lines", c->path, cap);
        c->lineno = lineno;
        c->cap = cap;
    }
    c->lines[c->nlines] = p;
    c->lineno[c->nlines++] = ln;
    return DL_OK;
}

/* Cuts c->text into lines (\n or \r\n), blank ones skipped. */
static int split_lines(csv_doc *c)
{
    c->cap = 1024;
    c->lines = malloc(c->cap * sizeof *c->lines);
    c->lineno = malloc(c->cap * sizeof *c->lineno);
    c->fields = malloc(MAXF * sizeof *c->fields);
    if (!c->lines || !c->lineno || !c->fields)
        return dl_error(DL_ENOMEM, "%s: out of memory", c->path);
    int ln = 0;
    for (char *p = c->text; p && *p;) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = 0;
        ln++;
        size_t len = strlen(p);
        if (len && p[len - 1] == '\r')
            p[--len] = 0;
        if (len)
            DL_TRY(add_line(c, p, ln));
        p = nl ? nl + 1 : NULL;
    }
    if (c->nlines == 0)
        return dl_error(DL_EINVAL, "%s: empty CSV file", c->path);
    return DL_OK;
}

/* Features only: the first line is kept as a header when any field of it
 * is not a number. */
static int header_only(csv_doc *c)
{
    int has_header = 0;
    for (int col = 0; col < c->ncol; col++) {
        double v;
        has_header |= !parse_number(c->fields[col], &v);
    }
    if (!has_header)
        return DL_OK;
    c->header = malloc((size_t)c->ncol * sizeof *c->header);
    if (!c->header)
        return dl_error(DL_ENOMEM, "%s: out of memory for %d column names", c->path, c->ncol);
    memcpy(c->header, c->fields, (size_t)c->ncol * sizeof *c->header);
    return DL_OK;
}

/* The first line is a header when any field of it is not a number; the
 * label column is named there, or given by its 0-based index. */
static int find_columns(csv_doc *c, const char *label)
{
    /* split a copy: without a header, line 0 is a data row parsed again */
    if (!(c->first = strdup(c->lines[0])))
        return dl_error(DL_ENOMEM, "%s: out of memory", c->path);
    int ncol = csv_fields(c->first, c->fields, MAXF);
    if (!label && ncol >= 1 && ncol <= MAXF) {
        c->ncol = ncol;
        c->label_col = -1;
        return header_only(c);
    }
    if (ncol < 2 || ncol > MAXF)
        return dl_error(DL_EINVAL, "%s:%d: %d columns, expected 2 to %d (features and a label)",
                        c->path, c->lineno[0], ncol, MAXF);
    c->ncol = ncol;
    int has_header = 0;
    for (int col = 0; col < ncol; col++) {
        double v;
        has_header |= !parse_number(c->fields[col], &v);
    }
    c->label_col = -1;
    if (has_header) {
        c->header = malloc((size_t)ncol * sizeof *c->header);
        if (!c->header)
            return dl_error(DL_ENOMEM, "%s: out of memory for %d column names", c->path, ncol);
        memcpy(c->header, c->fields, (size_t)ncol * sizeof *c->header);
        for (int col = 0; col < ncol && c->label_col < 0; col++)
            if (!strcmp(c->header[col], label))
                c->label_col = col;
    }
    if (c->label_col < 0) {
        char *end;
        long v = strtol(label, &end, 10);
        if (*end == 0 && end != label && v >= 0 && v < ncol)
            c->label_col = (int)v;
    }
    if (c->label_col < 0)
        return dl_error(DL_EINVAL, "%s:%d: no column \"%s\" (%s%d columns)", c->path, c->lineno[0],
                        label, has_header ? "header names or 0-based index of " : "", ncol);
    return DL_OK;
}

/* Parses data row r (line first + r) into r's slots of x, yv and ys. */
static int parse_row(const csv_doc *c, csv_rows *rows, size_t r)
{
    size_t li = rows->first + r;
    int k = csv_fields(c->lines[li], c->fields, MAXF), nf = c->ncol - (c->label_col >= 0);
    if (k < 0)
        return dl_error(DL_EINVAL, "%s:%d: unterminated quote", c->path, c->lineno[li]);
    if (k != c->ncol)
        return dl_error(DL_EINVAL, "%s:%d: %d fields, expected %d", c->path, c->lineno[li], k,
                        c->ncol);
    for (int col = 0, j = 0; col < c->ncol; col++) {
        const char *fv = c->fields[col];
        if (col == c->label_col) {
            rows->ys[r] = c->fields[col];
            rows->numeric &= parse_number(fv, &rows->yv[r]);
            if (c->regression && !rows->numeric)
                return dl_error(DL_EINVAL, "%s:%d: target \"%.40s\" is not a number (--regression)",
                                c->path, c->lineno[li], fv);
            rows->integral &= rows->numeric && rows->yv[r] >= 0 && rows->yv[r] < 1e6 &&
                              rows->yv[r] == floor(rows->yv[r]);
            continue;
        }
        double v;
        if (!parse_number(fv, &v)) {
            char name[64];
            if (c->header)
                snprintf(name, sizeof name, "\"%.50s\"", c->header[col]);
            else
                snprintf(name, sizeof name, "%d", col);
            return dl_error(DL_EINVAL, "%s:%d: column %s: \"%.40s\" is not a number", c->path,
                            c->lineno[li], name, fv);
        }
        rows->x[r * (size_t)nf + (size_t)j++] = (float)v;
    }
    return DL_OK;
}

/* Parses every data row (all lines after the header, if any). */
static int parse_rows(const csv_doc *c, csv_rows *rows)
{
    rows->first = c->header ? 1 : 0;
    rows->n = c->nlines - rows->first;
    if (rows->n == 0)
        return dl_error(DL_EINVAL, "%s: a header but no data rows", c->path);
    size_t n = rows->n, nf = (size_t)c->ncol - (c->label_col >= 0);
    rows->x = malloc(n * nf * sizeof *rows->x);
    rows->yv = malloc(n * sizeof *rows->yv);
    rows->ys = malloc(n * sizeof *rows->ys);
    if (!rows->x || !rows->yv || !rows->ys)
        return dl_error(DL_ENOMEM, "%s: out of memory for %zu rows", c->path, n);
    rows->numeric = rows->integral = 1;
    for (size_t r = 0; r < n; r++)
        DL_TRY(parse_row(c, rows, r));
    return DL_OK;
}

static int name_index(const dl_import *im, const char *name)
{
    for (int i = 0; i < im->nnames; i++)
        if (!strcmp(im->names[i], name))
            return i;
    return -1;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* String labels: the classes are the sorted distinct names, added to
 * im->names; y[r] is the index of row r's name. */
static int string_labels(dl_import *im, const csv_doc *c, const csv_rows *rows, int32_t *y)
{
    for (size_t r = 0; r < rows->n; r++) {
        if (name_index(im, rows->ys[r]) >= 0)
            continue;
        if (im->nnames == DL_IMPORT_MAX_NAMES)
            return dl_error(DL_EINVAL, "%s: more than %d distinct labels in column %d", c->path,
                            DL_IMPORT_MAX_NAMES, c->label_col);
        char *name = strdup(rows->ys[r]);
        if (!name)
            return dl_error(DL_ENOMEM, "%s: out of memory", c->path);
        im->names[im->nnames++] = name;
    }
    qsort(im->names, (size_t)im->nnames, sizeof *im->names, cmp_str);
    for (size_t r = 0; r < rows->n; r++)
        y[r] = name_index(im, rows->ys[r]);
    return im->nnames;
}

/* Fills d's labels from rows: f32 targets, i32 numbers or string classes. */
static int set_labels(dl_import *im, const csv_doc *c, const csv_rows *rows, dl_dataset *d)
{
    size_t n = rows->n;
    dl_data_info *info = &d->info;
    if (rows->numeric && (!rows->integral || c->regression)) {
        float *y = malloc(n * sizeof *y);
        if (!y)
            return dl_error(DL_ENOMEM, "%s: out of memory", c->path);
        for (size_t r = 0; r < n; r++)
            y[r] = (float)rows->yv[r];
        info->y_dtype = DL_F32;
        d->y = y;
        return DL_OK;
    }
    int32_t *y = malloc(n * sizeof *y);
    if (!y)
        return dl_error(DL_ENOMEM, "%s: out of memory", c->path);
    int classes = 0;
    if (rows->numeric) {
        int maxlab = 0;
        for (size_t r = 0; r < n; r++) {
            y[r] = (int32_t)rows->yv[r];
            maxlab = y[r] > maxlab ? y[r] : maxlab;
        }
        classes = maxlab + 1;
    } else if ((classes = string_labels(im, c, rows, y)) < 0) {
        free(y);
        return classes;
    }
    info->y_dtype = DL_I32;
    info->classes = classes;
    d->y = y;
    return DL_OK;
}

static int load_csv(dl_import *im, const char *path, const char *label, int regression)
{
    if (!label)
        return dl_error(DL_EINVAL, "%s: a CSV file needs --label COLUMN", path);
    dl_import_split *s = dl_import_next_split(im, "train");
    if (!s)
        return dl_error(DL_EINVAL, "%s: too many splits", path);
    csv_doc c = {.path = path, .regression = regression};
    csv_rows rows = {0};
    int rc = read_text(&c);
    if (rc == DL_OK && (rc = split_lines(&c)) == DL_OK && (rc = find_columns(&c, label)) == DL_OK)
        rc = parse_rows(&c, &rows);
    if (rc == DL_OK)
        rc = set_labels(im, &c, &rows, &s->d);
    if (rc == DL_OK) {
        dl_data_info *info = &s->d.info;
        info->sample = dl_shape_make(1, (const int64_t[]){c.ncol - 1});
        info->x_dtype = DL_F32;
        info->count = rows.n;
        info->scale = 1;
        info->y_width = 1;
        s->d.x = rows.x;
        rows.x = NULL;
        snprintf(s->d.name, sizeof s->d.name, "%s", path);
        im->nsplits++;
        rc = dl_import_add_source(s, path);
    }
    if (rc == DL_OK)
        snprintf(im->origin, sizeof im->origin, "CSV %.1000s", path);
    rows_done(&rows);
    doc_done(&c);
    return rc;
}

int dl_import_csv_load(dl_import *im, const char *path, const char *label)
{
    return load_csv(im, path, label, 0);
}

int dl_import_csv_load_targets(dl_import *im, const char *path, const char *label)
{
    return load_csv(im, path, label, 1);
}

int dl_import_csv_features(const char *path, const char *label, dl_dataset *d)
{
    memset(d, 0, sizeof *d);
    csv_doc c = {.path = path};
    csv_rows rows = {0};
    int rc = read_text(&c);
    if (rc == DL_OK && (rc = split_lines(&c)) == DL_OK && (rc = find_columns(&c, label)) == DL_OK)
        rc = parse_rows(&c, &rows);
    int32_t *y = rc == DL_OK ? calloc(rows.n, sizeof *y) : NULL;
    if (rc == DL_OK && !y)
        rc = dl_error(DL_ENOMEM, "%s: out of memory for %zu rows", path, rows.n);
    if (rc == DL_OK) {
        d->info.sample = dl_shape_make(1, (const int64_t[]){c.ncol - (c.label_col >= 0)});
        d->info.x_dtype = DL_F32;
        d->info.y_dtype = DL_I32;
        d->info.y_width = 1;
        d->info.count = rows.n;
        d->info.scale = 1;
        d->x = rows.x;
        d->y = y;
        rows.x = NULL;
        snprintf(d->name, sizeof d->name, "%.200s", path);
    }
    rows_done(&rows);
    doc_done(&c);
    return rc;
}
