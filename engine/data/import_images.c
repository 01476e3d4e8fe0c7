/* import_images.c - an image folder (class sub-folders) decoded on worker threads into splits */
#include "engine/data/import_images.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "engine/base/error.h"
#include "engine/base/mem.h"
#include "engine/base/sha256.h"
#include "engine/data/image.h"

#define MAX_CLASSES DL_IMPORT_MAX_NAMES

/* One file: where, its class, and what decoding gave. */
typedef struct entry {
    char *path;
    int label;
    int val; /* moved to /val by val_fraction */
    int rc;  /* DL_OK, or the decoder's error (msg) */
    char *msg;
    char sha[65];
    dl_image img; /* scaled to the target size when there is one */
} entry;

typedef struct split_files {
    char name[16], dir[1100];
    entry *e;
    size_t n, cap;
} split_files;

/* The whole job: the splits' files, the classes, the options, the report. */
typedef struct job {
    const dl_images_options *o;
    dl_images_report *rep;
    split_files sp[DL_IMPORT_MAX_SPLITS];
    int nsp;
    char *classes[MAX_CLASSES];
    int nclasses;
    entry **all; /* every entry of every split, in order */
    size_t nall;
    atomic_size_t next, done;
} job;

/* Counts a skipped entry (the first few kept with why); with --strict it
 * is the import's error. */
static int skip(job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int skip(job *j, const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (j->o->strict)
        return dl_error(DL_EINVAL, "%s (--strict)", what);
    dl_images_report *r = j->rep;
    if (r->shown < DL_IMAGES_SHOWN_SKIPS)
        snprintf(r->what[r->shown++], sizeof r->what[0], "%s", what);
    r->skipped++;
    return DL_OK;
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int has_image_suffix(const char *name)
{
    size_t n = strlen(name);
    return (n > 4 && (!strcasecmp(name + n - 4, ".png") || !strcasecmp(name + n - 4, ".jpg"))) ||
           (n > 5 && !strcasecmp(name + n - 5, ".jpeg"));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in folder dir (no dot-files), sorted; *n of them. NULL with
 * errno set when it cannot be read (or out of memory). */
static char **list_dir(const char *dir, size_t *n)
{
    DIR *d = opendir(dir);
    *n = 0;
    if (!d)
        return NULL;
    size_t cap = 16;
    char **v = malloc(cap * sizeof *v);
    struct dirent *de;
    while (v && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        if (*n == cap) {
            char **w = realloc(v, (cap *= 2) * sizeof *v);
            if (!w)
                break;
            v = w;
        }
        if (!(v[*n] = strdup(de->d_name)))
            break;
        (*n)++;
    }
    int bad = !v || de != NULL;
    closedir(d);
    if (bad) {
        for (size_t i = 0; v && i < *n; i++)
            free(v[i]);
        free(v);
        errno = ENOMEM;
        return NULL;
    }
    qsort(v, *n, sizeof *v, cmp_str);
    return v;
}

static void free_list(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

int dl_import_images_is_folder(const char *dir)
{
    size_t n;
    char **names = list_dir(dir, &n);
    int yes = 0;
    for (size_t i = 0; names && i < n && !yes; i++) {
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        yes = is_dir(p) || has_image_suffix(names[i]);
    }
    if (names)
        free_list(names, n);
    return yes;
}

static int add_entry(split_files *s, const char *path, int label)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        entry *e = realloc(s->e, cap * sizeof *e);
        if (!e)
            return dl_error(DL_ENOMEM, "out of memory for the file list");
        s->e = e;
        s->cap = cap;
    }
    entry *e = &s->e[s->n];
    memset(e, 0, sizeof *e);
    e->label = label;
    if (!(e->path = strdup(path)))
        return dl_error(DL_ENOMEM, "out of memory for the file list");
    s->n++;
    return DL_OK;
}

/* The files of one class folder into s; sub-folders and unreadable or
 * empty folders are skipped. */
static int scan_class(job *j, split_files *s, const char *cdir, int label)
{
    size_t n;
    char **names = list_dir(cdir, &n);
    if (!names)
        return errno == ENOMEM ? dl_error(DL_ENOMEM, "out of memory")
                               : skip(j, "%s: cannot read the folder: %s", cdir, strerror(errno));
    int rc = n == 0 ? skip(j, "%s: empty class folder", cdir) : DL_OK;
    for (size_t i = 0; i < n && rc == DL_OK; i++) {
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", cdir, names[i]);
        struct stat st;
        if (stat(p, &st) != 0)
            rc = skip(j, "%s: %s", p, strerror(errno)); /* a dangling link */
        else if (S_ISDIR(st.st_mode))
            rc = skip(j, "%s: a folder inside a class folder", p);
        else if (!S_ISREG(st.st_mode))
            rc = skip(j, "%s: not a regular file", p); /* a FIFO would block the reader */
        else
            rc = add_entry(s, p, label);
    }
    free_list(names, n);
    return rc;
}

/* The class index of name, or -1. */
static int class_of(const job *j, const char *name)
{
    for (int i = 0; i < j->nclasses; i++)
        if (!strcmp(j->classes[i], name))
            return i;
    return -1;
}

/* The class folders of split s: the first split defines the classes
 * (sub-folders in name order), the others map onto them. */
static int scan_split(job *j, split_files *s, int defines)
{
    size_t n;
    char **names = list_dir(s->dir, &n);
    if (!names)
        return dl_error(errno == ENOMEM ? DL_ENOMEM : DL_EIO, "%s: cannot read the folder: %s",
                        s->dir, strerror(errno));
    int rc = DL_OK;
    for (size_t i = 0; i < n && rc == DL_OK; i++) {
        char p[1300];
        snprintf(p, sizeof p, "%s/%s", s->dir, names[i]);
        if (!is_dir(p))
            continue; /* a README beside the class folders */
        int label = defines ? j->nclasses : class_of(j, names[i]);
        if (label < 0) {
            rc = skip(j, "%s: class \"%s\" is not in %s", p, names[i], j->sp[0].dir);
            continue;
        }
        if (label >= MAX_CLASSES) {
            rc = dl_error(DL_EINVAL, "%s: more than %d classes", s->dir, MAX_CLASSES);
            break;
        }
        size_t before = s->n;
        rc = scan_class(j, s, p, label);
        if (rc == DL_OK && defines && s->n > before &&
            !(j->classes[j->nclasses++] = strdup(names[i])))
            rc = dl_error(DL_ENOMEM, "out of memory");
    }
    free_list(names, n);
    return rc;
}

/* DIR/train (+ val, test) when DIR/train holds a class folder, else DIR. */
static int find_splits(job *j, const char *dir)
{
    char p[1100];
    snprintf(p, sizeof p, "%s/train", dir);
    size_t n = 0;
    char **names = is_dir(p) ? list_dir(p, &n) : NULL;
    int layered = 0;
    for (size_t i = 0; i < n && !layered; i++) {
        char q[1400];
        snprintf(q, sizeof q, "%s/%s", p, names[i]);
        layered = is_dir(q);
    }
    free_list(names, n);
    static const char *const split_names[] = {"train", "val", "test"};
    for (int i = 0; i < (layered ? 3 : 1); i++) {
        snprintf(p, sizeof p, "%s/%s", dir, split_names[i]);
        if (layered && !is_dir(p))
            continue;
        split_files *s = &j->sp[j->nsp++];
        snprintf(s->name, sizeof s->name, "%s", split_names[i]);
        snprintf(s->dir, sizeof s->dir, "%s", layered ? p : dir);
    }
    return DL_OK;
}

/* ---- decoding on the workers ---- */

static void decode_one(const job *j, entry *e)
{
    dl_image raw = {0};
    e->rc = dl_image_load(&raw, e->path, e->sha);
    if (e->rc == DL_OK && j->o->height > 0) {
        e->rc = dl_image_resize_crop(&e->img, &raw, j->o->height, j->o->width);
        dl_image_done(&raw);
    } else {
        e->img = raw;
    }
    if (e->rc < 0)
        e->msg = strdup(dl_error_message());
}

static void *worker(void *arg)
{
    job *j = arg;
    for (;;) {
        if (j->o->cancel && *j->o->cancel)
            break;
        size_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->nall)
            break;
        decode_one(j, j->all[i]);
        atomic_fetch_add(&j->done, 1);
    }
    return NULL;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Decodes every entry on o->workers threads; this thread reports progress. */
static int decode_all(job *j)
{
    int nw = j->o->workers < 1 ? 1 : j->o->workers > 64 ? 64 : j->o->workers;
    pthread_t th[64];
    int started = 0;
    for (int i = 0; i < nw; i++)
        started += pthread_create(&th[started], NULL, worker, j) == 0;
    if (started == 0)
        worker(j); /* no thread: decode here */
    size_t done;
    for (int tick = 0; (done = atomic_load(&j->done)) < j->nall && started > 0; tick++) {
        if (j->o->cancel && *j->o->cancel)
            break;
        if (j->o->progress && tick % 50 == 0) /* every 100 ms */
            j->o->progress(j->o->ctx, done, j->nall);
        sleep_ms(2);
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    if (j->o->cancel && *j->o->cancel)
        return dl_error(DL_ERR, "interrupted");
    if (j->o->progress)
        j->o->progress(j->o->ctx, j->nall, j->nall);
    return DL_OK;
}

/* ---- from decoded images to splits ---- */

/* The size every image must have: the target, else the first decoded
 * image's; the channels: the option, else 1 when every image is grey. */
static int settle_shape(job *j, int *h, int *w, int *c)
{
    *h = j->o->height;
    *w = j->o->width;
    int grey = 1, any = 0;
    for (size_t i = 0; i < j->nall; i++) {
        entry *e = j->all[i];
        if (e->rc < 0)
            continue;
        if (!any && *h == 0) {
            *h = e->img.height;
            *w = e->img.width;
        }
        any = 1;
        grey &= e->img.channels == 1;
    }
    *c = j->o->channels ? j->o->channels : grey ? 1 : 3;
    return any;
}

/* Skips the entries that failed or have another size (marking them rc < 0). */
static int check_entries(job *j, int h, int w)
{
    for (size_t i = 0; i < j->nall; i++) {
        entry *e = j->all[i];
        int rc = DL_OK;
        if (e->rc < 0) {
            rc = skip(j, "%s", e->msg ? e->msg : e->path);
        } else if (e->img.height != h || e->img.width != w) {
            e->rc = DL_EINVAL;
            rc = skip(j,
                      "%s: %dx%d pixels, expected %dx%d like the first image (or give --size HxW)",
                      e->path, e->img.height, e->img.width, h, w);
        }
        if (rc < 0)
            return rc;
    }
    return DL_OK;
}

/* Marks a seeded fraction of each class of the first split for /val. */
static int mark_val(job *j, double fraction, size_t *nval)
{
    split_files *s = &j->sp[0];
    uint32_t *idx = malloc(sizeof *idx * (s->n + 1)), *perm = malloc(sizeof *perm * (s->n + 1));
    if (!idx || !perm) {
        free(idx);
        free(perm);
        return dl_error(DL_ENOMEM, "out of memory");
    }
    *nval = 0;
    for (int c = 0; c < j->nclasses; c++) {
        size_t n = 0;
        for (size_t i = 0; i < s->n; i++)
            if (s->e[i].rc == DL_OK && s->e[i].label == c)
                idx[n++] = (uint32_t)i;
        size_t k = (size_t)llround(fraction * (double)n);
        dl_shuffle_permutation(perm, n, j->o->seed, c);
        for (size_t i = 0; i < k; i++)
            s->e[idx[perm[i]]].val = 1;
        *nval += k;
    }
    free(idx);
    free(perm);
    return DL_OK;
}

/* The SHA-256 of the split's kept files: each one's name and digest, in order. */
static void folder_digest(const split_files *s, int val, char hex[65])
{
    dl_sha256 c;
    dl_sha256_init(&c);
    for (size_t i = 0; i < s->n; i++) {
        const entry *e = &s->e[i];
        if (e->rc < 0 || e->val != val)
            continue;
        dl_sha256_update(&c, e->path + strlen(s->dir), strlen(e->path + strlen(s->dir)) + 1);
        dl_sha256_update(&c, e->sha, 64);
    }
    uint8_t d[32];
    dl_sha256_final(&c, d);
    dl_sha256_hex(d, hex);
}

/* One output split from the entries of s with e->val == val. */
static int build_split(job *j, dl_import *im, const split_files *s, const char *name, int val,
                       int h, int w, int c)
{
    size_t n = 0, per = (size_t)h * (size_t)w * (size_t)c;
    for (size_t i = 0; i < s->n; i++)
        n += s->e[i].rc == DL_OK && s->e[i].val == val;
    if (n == 0)
        return DL_OK;
    dl_import_split *out = dl_import_next_split(im, name);
    if (!out)
        return dl_error(DL_EINVAL, "%s: too many splits", s->dir);
    dl_data_info *in = &out->d.info;
    in->sample = (dl_shape){3, {c, h, w}};
    in->x_dtype = DL_U8;
    in->y_dtype = DL_I32;
    in->y_width = 1;
    in->classes = j->nclasses;
    in->count = n;
    in->scale = 1.0f;
    snprintf(out->d.name, sizeof out->d.name, "%s", name);
    /* huge pages: 4 KiB faults on a fresh 86 MB array were a tenth of an
     * import of 1500 160x120 JPEGs on one worker */
    uint8_t *x = out->d.x = dl_mem_alloc_big(n * per);
    int32_t *y = out->d.y = malloc(n * sizeof *y);
    if (!x || !y) {
        dl_dataset_done(&out->d);
        return dl_error(DL_ENOMEM, "out of memory for %zu images of %dx%dx%d", n, c, h, w);
    }
    size_t row = 0;
    for (size_t i = 0; i < s->n; i++) {
        entry *e = &s->e[i];
        if (e->rc < 0 || e->val != val)
            continue;
        if (e->img.channels != c) {
            dl_image conv = {0};
            int rc = dl_image_convert(&conv, &e->img, c);
            if (rc < 0) {
                dl_dataset_done(&out->d);
                return rc;
            }
            dl_image_done(&e->img);
            e->img = conv;
        }
        dl_image_to_chw(&e->img, x + row * per);
        dl_image_done(&e->img);
        y[row++] = e->label;
    }
    snprintf(out->src[0], sizeof out->src[0], "%.1000s", s->dir);
    folder_digest(s, val, out->sha[0]);
    out->nsrc = 1;
    im->nsplits++;
    return DL_OK;
}

static int build_all(job *j, dl_import *im, int h, int w, int c)
{
    size_t nval = 0;
    if (j->o->val_fraction > 0) {
        for (int i = 1; i < j->nsp; i++)
            if (!strcmp(j->sp[i].name, "val"))
                return dl_error(DL_EINVAL, "--val-fraction: %s exists already", j->sp[i].dir);
        DL_TRY(mark_val(j, j->o->val_fraction, &nval));
        size_t ntrain = 0;
        for (size_t i = 0; i < j->sp[0].n; i++)
            ntrain += j->sp[0].e[i].rc == DL_OK;
        if (nval == 0 || nval >= ntrain)
            return dl_error(DL_EINVAL, "--val-fraction %g of %s leaves an empty split",
                            j->o->val_fraction, j->sp[0].dir);
    }
    DL_TRY(build_split(j, im, &j->sp[0], "train", 0, h, w, c));
    if (nval > 0)
        DL_TRY(build_split(j, im, &j->sp[0], "val", 1, h, w, c));
    for (int i = 1; i < j->nsp; i++)
        DL_TRY(build_split(j, im, &j->sp[i], j->sp[i].name, 0, h, w, c));
    return DL_OK;
}

static void job_free(job *j)
{
    for (int s = 0; s < j->nsp; s++) {
        for (size_t i = 0; i < j->sp[s].n; i++) {
            free(j->sp[s].e[i].path);
            free(j->sp[s].e[i].msg);
            dl_image_done(&j->sp[s].e[i].img);
        }
        free(j->sp[s].e);
    }
    for (int i = 0; i < j->nclasses; i++)
        free(j->classes[i]);
    free(j->all);
    free(j);
}

/* Listing, decoding, checking: everything before the splits are built. */
static int gather(job *j, const char *dir)
{
    DL_TRY(find_splits(j, dir));
    for (int s = 0; s < j->nsp; s++)
        DL_TRY(scan_split(j, &j->sp[s], s == 0));
    for (int s = 0; s < j->nsp; s++)
        j->nall += j->sp[s].n;
    if (j->nall == 0)
        return dl_error(DL_EINVAL,
                        "%s: no images (expected class sub-folders of PNG or JPEG files)", dir);
    if (!(j->all = malloc(j->nall * sizeof *j->all)))
        return dl_error(DL_ENOMEM, "out of memory");
    size_t k = 0;
    for (int s = 0; s < j->nsp; s++)
        for (size_t i = 0; i < j->sp[s].n; i++)
            j->all[k++] = &j->sp[s].e[i];
    return decode_all(j);
}

int dl_import_images_dir(dl_import *im, const char *dir, const dl_images_options *o,
                         dl_images_report *rep)
{
    job *j = calloc(1, sizeof *j);
    if (!j)
        return dl_error(DL_ENOMEM, "out of memory");
    memset(rep, 0, sizeof *rep);
    j->o = o;
    j->rep = rep;
    int first = im->nsplits, h = 0, w = 0, c = 0;
    int rc = gather(j, dir);
    int none = rc == DL_OK && !settle_shape(j, &h, &w, &c);
    if (rc == DL_OK)
        rc = check_entries(j, h, w);
    if (rc == DL_OK && none)
        rc = dl_error(DL_EINVAL, "%s: no image could be read (%zu skipped)", dir, rep->skipped);
    for (size_t i = 0; rc == DL_OK && i < j->nall; i++)
        rep->images += j->all[i]->rc == DL_OK;
    if (rc == DL_OK)
        rc = build_all(j, im, h, w, c);
    for (int i = 0; rc == DL_OK && i < j->nclasses; i++) {
        im->names[im->nnames] = j->classes[i];
        j->classes[i] = NULL;
        im->nnames++;
    }
    if (rc < 0) {
        while (im->nsplits > first)
            dl_dataset_done(&im->sp[--im->nsplits].d);
    } else {
        snprintf(im->origin, sizeof im->origin,
                 "image folder %.900s: %zu images, %d classes, %dx%dx%d%s", dir, rep->images,
                 j->nclasses, c, h, w, o->height > 0 ? " (area-resized, centre-cropped)" : "");
    }
    job_free(j);
    return rc;
}
