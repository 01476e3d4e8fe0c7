/* import.c - the splits of an import: sources, synthetic data, class names, the validation split */
#include "engine/data/import.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/base/error.h"
#include "engine/base/sha256.h"
#include "engine/data/synthetic.h"

static const char *const fashion_names[10] = {"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                              "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                              "Bag",         "Ankle boot"};
static const char *const digit_names[10] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};

static void free_names(dl_import *im)
{
    for (int i = 0; i < im->nnames; i++)
        free(im->names[i]);
    im->nnames = 0;
}

void dl_import_done(dl_import *im)
{
    for (int i = 0; i < im->nsplits; i++)
        dl_dataset_done(&im->sp[i].d);
    free_names(im);
    memset(im, 0, sizeof *im);
}

dl_import_split *dl_import_next_split(dl_import *im, const char *name)
{
    if (im->nsplits >= DL_IMPORT_MAX_SPLITS)
        return NULL;
    dl_import_split *s = &im->sp[im->nsplits];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    return s;
}

int dl_import_add_source(dl_import_split *s, const char *path)
{
    DL_ASSERT(s->nsrc < DL_IMPORT_MAX_SOURCES);
    snprintf(s->src[s->nsrc], sizeof s->src[0], "%s", path);
    DL_TRY(dl_sha256_file(path, s->sha[s->nsrc]));
    s->nsrc++;
    return DL_OK;
}

int dl_import_synthetic(dl_import *im, const char *kind, long samples, int classes, float noise,
                        uint64_t seed)
{
    long ntest = samples / 4 > 0 ? samples / 4 : 1;
    static const char *const names[] = {"train", "test"};
    for (int i = 0; i < 2; i++) {
        dl_import_split *s = dl_import_next_split(im, names[i]);
        DL_ASSERT(s != NULL);
        /* the test split uses the next seed so it holds new points */
        DL_TRY(dl_dataset_synthetic(&s->d, kind, (size_t)(i ? ntest : samples), classes, noise,
                                    seed + (uint64_t)i));
        im->nsplits++;
    }
    snprintf(im->origin, sizeof im->origin,
             "synthetic %s: %ld samples, %d classes, noise %g, seed %llu", kind, samples, classes,
             (double)noise, (unsigned long long)seed);
    return DL_OK;
}

static int add_name(dl_import *im, const char *name)
{
    char *copy = strdup(name);
    if (!copy)
        return dl_error(DL_ENOMEM, "out of memory for class names");
    im->names[im->nnames++] = copy;
    return DL_OK;
}

/* Adds the comma-separated names of list (up to DL_IMPORT_MAX_NAMES). */
static int add_list(dl_import *im, const char *list)
{
    char *copy = strdup(list), *save = NULL;
    if (!copy)
        return dl_error(DL_ENOMEM, "out of memory for class names");
    int rc = DL_OK;
    for (char *t = strtok_r(copy, ",", &save); t && rc == DL_OK; t = strtok_r(NULL, ",", &save))
        rc = im->nnames < DL_IMPORT_MAX_NAMES ? add_name(im, t) : DL_OK;
    free(copy);
    return rc;
}

int dl_import_class_names(dl_import *im, const char *arg, int classes)
{
    if (!strcmp(arg, "none"))
        return DL_OK;
    const char *const *list = !strcmp(arg, "fashion-mnist") ? fashion_names
                              : !strcmp(arg, "mnist")       ? digit_names
                                                            : NULL;
    free_names(im);
    if (list) {
        for (int i = 0; i < 10; i++)
            DL_TRY(add_name(im, list[i]));
    } else {
        DL_TRY(add_list(im, arg));
    }
    if (classes > 0 && im->nnames != classes)
        return dl_error(DL_EINVAL, "--class-names: %d names for %d classes", im->nnames, classes);
    return DL_OK;
}

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
static int make_val(dl_import *im, double fraction, uint64_t seed)
{
    dl_import_split *tr = NULL;
    for (int i = 0; i < im->nsplits; i++)
        if (!strcmp(im->sp[i].name, "train"))
            tr = &im->sp[i];
    if (!tr && im->nsplits == 1)
        tr = &im->sp[0]; /* a single pair: its own split gives the validation rows */
    if (!tr)
        return dl_error(DL_EINVAL, "--val-fraction: no /train split to take it from");
    size_t n = tr->d.info.count, nval = (size_t)llround(fraction * (double)n);
    if (nval == 0 || nval >= n)
        return dl_error(DL_EINVAL, "--val-fraction %g of %zu samples leaves an empty split",
                        fraction, n);
    uint32_t *perm = malloc(n * sizeof *perm);
    if (!perm)
        return dl_error(DL_ENOMEM, "out of memory");
    dl_shuffle_permutation(perm, n, seed, 0);
    qsort(perm, nval, sizeof *perm, cmp_u32);
    qsort(perm + nval, n - nval, sizeof *perm, cmp_u32);
    dl_import_split *va = &im->sp[im->nsplits];
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
    im->nsplits++;
    return DL_OK;
}

int dl_import_prepare(dl_import *im, const char *class_names, double val_fraction, uint64_t seed)
{
    /* class names: explicit, known (Fashion-MNIST, MNIST) or from CSV labels */
    int classes = im->sp[0].d.info.classes;
    if (class_names) {
        DL_TRY(dl_import_class_names(im, class_names, classes));
    } else if (im->nnames == 0 && classes == 10 && im->sp[0].d.info.x_dtype == DL_U8) {
        const char *p = im->sp[0].src[0];
        int fashion = 0;
        for (const char *q = p; *q && !fashion; q++)
            fashion = strncasecmp(q, "fashion", 7) == 0;
        dl_import_class_names(im, fashion ? "fashion-mnist" : "mnist", 10);
    }
    for (int i = 0; i < im->nsplits; i++)
        if (im->sp[i].d.info.x_dtype == DL_U8)
            im->sp[i].d.info.scale = 1.0f / 255.0f;
    if (val_fraction > 0)
        DL_TRY(make_val(im, val_fraction, seed));
    return DL_OK;
}
