/* import_cifar.c - CIFAR-10 and CIFAR-100 binary batches read as the /train and /test splits */
#include "engine/data/import_cifar.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/base/error.h"
#include "engine/base/sha256.h"

#define CIFAR_PIXELS 3072
#define CIFAR10_BATCHES 5

static const char *const cifar10_names[10] = {"airplane", "automobile", "bird",  "cat",  "deer",
                                              "dog",      "frog",       "horse", "ship", "truck"};

/* One folder's format: the label byte used, bytes per record, classes. */
typedef struct cifar_fmt {
    int label_at, record, classes;
} cifar_fmt;

static long long file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) ? (long long)st.st_size : -1;
}

int dl_import_cifar_kind(const char *dir)
{
    char p[1100];
    static const char *const c10[] = {"data_batch_1.bin", "test_batch.bin"};
    static const char *const c100[] = {"train.bin", "test.bin"};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, c10[i]);
        if (file_size(p) >= 0)
            return 10;
    }
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, c100[i]);
        if (file_size(p) >= 0)
            return 100;
    }
    return 0;
}

/* Appends the records of path to s->d (x and y grown by the caller's
 * total) at row *row, hashing the bytes into sha. */
static int read_batch(dl_import_split *s, const char *path, const cifar_fmt *f, size_t *row,
                      dl_sha256 *sha)
{
    long long size = file_size(path);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return dl_error(DL_EIO, "%s: cannot open: %s", path, strerror(errno));
    unsigned char rec[CIFAR_PIXELS + 2];
    int rc = DL_OK;
    size_t n = (size_t)size / (size_t)f->record;
    uint8_t *x = s->d.x;
    int32_t *y = s->d.y;
    for (size_t i = 0; i < n && rc == DL_OK; i++) {
        if (fread(rec, 1, (size_t)f->record, fp) != (size_t)f->record) {
            rc = dl_error(DL_EIO, "%s: read failed at record %zu", path, i);
            break;
        }
        dl_sha256_update(sha, rec, (size_t)f->record);
        if (rec[f->label_at] >= f->classes)
            rc = dl_error(DL_EINVAL, "%s: record %zu: label %d, expected 0..%d", path, i,
                          rec[f->label_at], f->classes - 1);
        y[*row] = rec[f->label_at];
        memcpy(x + *row * CIFAR_PIXELS, rec + f->record - CIFAR_PIXELS, CIFAR_PIXELS);
        (*row)++;
    }
    fclose(fp);
    return rc;
}

/* The split from files[0..nfiles) (their sizes checked), with its sources. */
static int read_split(dl_import *im, const char *name, char files[][1100], int nfiles,
                      const cifar_fmt *f)
{
    size_t total = 0;
    for (int i = 0; i < nfiles; i++) {
        long long size = file_size(files[i]);
        if (size <= 0 || size % f->record != 0)
            return dl_error(DL_EINVAL,
                            "%s: %lld bytes, not a whole number of %d-byte CIFAR records "
                            "(truncated?)",
                            files[i], size, f->record);
        total += (size_t)size / (size_t)f->record;
    }
    dl_import_split *s = dl_import_next_split(im, name);
    if (!s)
        return dl_error(DL_EINVAL, "%s: too many splits (at most %d)", files[0],
                        DL_IMPORT_MAX_SPLITS);
    dl_data_info *in = &s->d.info;
    in->sample = (dl_shape){3, {3, 32, 32}};
    in->x_dtype = DL_U8;
    in->y_dtype = DL_I32;
    in->y_width = 1;
    in->classes = f->classes;
    in->count = total;
    in->scale = 1.0f;
    s->d.x = malloc(total * CIFAR_PIXELS);
    s->d.y = malloc(total * sizeof(int32_t));
    snprintf(s->d.name, sizeof s->d.name, "%s", name);
    dl_sha256 sha;
    dl_sha256_init(&sha);
    size_t row = 0;
    int rc = s->d.x && s->d.y ? DL_OK : dl_error(DL_ENOMEM, "out of memory for %zu images", total);
    for (int i = 0; i < nfiles && rc == DL_OK; i++)
        rc = read_batch(s, files[i], f, &row, &sha);
    for (int i = 0; i < nfiles && nfiles <= DL_IMPORT_MAX_SOURCES && rc == DL_OK; i++)
        rc = dl_import_add_source(s, files[i]);
    if (rc == DL_OK && nfiles > DL_IMPORT_MAX_SOURCES) {
        /* more files than source slots: one entry, the digest of them in order */
        const char *last = strrchr(files[nfiles - 1], '/');
        snprintf(s->src[0], sizeof s->src[0], "%.850s+...+%.100s (SHA-256 of the concatenation)",
                 files[0], last ? last + 1 : files[nfiles - 1]);
        uint8_t dig[32];
        dl_sha256_final(&sha, dig);
        dl_sha256_hex(dig, s->sha[0]);
        s->nsrc = 1;
    }
    if (rc < 0) {
        dl_dataset_done(&s->d);
        memset(s, 0, sizeof *s);
        return rc;
    }
    im->nsplits++;
    return DL_OK;
}

/* Class names, one a line (blank lines skipped), from path when it exists;
 * its count must be classes. */
static int read_names(dl_import *im, const char *path, int classes)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return DL_OK;
    char line[512];
    int rc = DL_OK;
    while (rc == DL_OK && fgets(line, sizeof line, fp)) {
        size_t n = strlen(line);
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' '))
            line[--n] = 0;
        if (n == 0)
            continue;
        if (im->nnames >= classes) {
            rc = dl_error(DL_EINVAL, "%s: more than %d class names", path, classes);
            break;
        }
        if (!(im->names[im->nnames] = strdup(line)))
            rc = dl_error(DL_ENOMEM, "out of memory for class names");
        else
            im->nnames++;
    }
    fclose(fp);
    if (rc == DL_OK && im->nnames != classes)
        rc = dl_error(DL_EINVAL, "%s: %d class names, expected %d", path, im->nnames, classes);
    return rc;
}

/* CIFAR-10's train files: data_batch_1.bin upwards, without a gap. */
static int cifar10_train_files(const char *dir, char files[][1100], int *n)
{
    *n = 0;
    for (int i = 1; i <= CIFAR10_BATCHES; i++) {
        char p[1100];
        snprintf(p, sizeof p, "%s/data_batch_%d.bin", dir, i);
        if (file_size(p) < 0)
            continue;
        if (*n != i - 1)
            return dl_error(DL_EINVAL, "%s: data_batch_%d.bin is missing but %s exists", dir,
                            *n + 1, p);
        snprintf(files[(*n)++], 1100, "%s", p);
    }
    return DL_OK;
}

static int load_names(dl_import *im, const char *dir, int kind, int fine, int classes)
{
    char p[1100];
    snprintf(p, sizeof p, "%s/%s", dir,
             kind == 10 ? "batches.meta.txt"
             : fine     ? "fine_label_names.txt"
                        : "coarse_label_names.txt");
    for (int i = 0; i < im->nnames; i++)
        free(im->names[i]);
    im->nnames = 0;
    DL_TRY(read_names(im, p, classes));
    if (kind != 10 || im->nnames > 0)
        return DL_OK;
    for (int i = 0; i < 10; i++)
        if (!(im->names[im->nnames++] = strdup(cifar10_names[i])))
            return dl_error(DL_ENOMEM, "out of memory for class names");
    return DL_OK;
}

int dl_import_cifar_dir(dl_import *im, const char *dir, const char *label)
{
    int kind = dl_import_cifar_kind(dir), fine = 1;
    if (kind == 0)
        return dl_error(DL_EINVAL,
                        "%s: no CIFAR batches (data_batch_*.bin, test_batch.bin, "
                        "train.bin or test.bin)",
                        dir);
    if (kind == 10 && label)
        return dl_error(DL_EINVAL,
                        "--label %s: CIFAR-10 has one label (--label fine|coarse "
                        "is for CIFAR-100)",
                        label);
    if (label && strcmp(label, "fine") && strcmp(label, "coarse"))
        return dl_error(DL_EINVAL, "--label \"%s\": expected fine or coarse for CIFAR-100", label);
    fine = !label || !strcmp(label, "fine");
    cifar_fmt f = {kind == 10 ? 0
                   : fine     ? 1
                              : 0,
                   kind == 10 ? 1 + CIFAR_PIXELS : 2 + CIFAR_PIXELS,
                   kind == 10 ? 10
                   : fine     ? 100
                              : 20};
    char files[CIFAR10_BATCHES][1100];
    int n = 0;
    if (kind == 10) {
        DL_TRY(cifar10_train_files(dir, files, &n));
    } else {
        snprintf(files[0], sizeof files[0], "%s/train.bin", dir);
        n = file_size(files[0]) >= 0;
    }
    int first = im->nsplits;
    int rc = n > 0 ? read_split(im, "train", files, n, &f) : DL_OK;
    snprintf(files[0], sizeof files[0], "%s/%s", dir, kind == 10 ? "test_batch.bin" : "test.bin");
    if (rc == DL_OK && file_size(files[0]) >= 0)
        rc = read_split(im, "test", files, 1, &f);
    if (rc == DL_OK)
        rc = load_names(im, dir, kind, fine, f.classes);
    if (rc < 0) {
        while (im->nsplits > first)
            dl_dataset_done(&im->sp[--im->nsplits].d);
        return rc;
    }
    snprintf(im->origin, sizeof im->origin, "CIFAR-%d %.1000s%s", kind, dir,
             kind == 10 ? ""
             : fine     ? " (fine labels)"
                        : " (coarse labels)");
    return DL_OK;
}
