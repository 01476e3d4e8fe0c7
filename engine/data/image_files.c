/* image_files.c - a user's image files (one file or a folder's tree) decoded into one u8 dataset */
#include "engine/data/image_files.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "engine/base/error.h"
#include "engine/data/image.h"

/* "png" or "jpeg" for an image name's suffix, "" for another picture
 * suffix, NULL for none. */
static const char *suffix_format(const char *name)
{
    static const char *const tab[][2] = {
        {".png", "png"}, {".jpg", "jpeg"}, {".jpeg", "jpeg"}, {".gif", ""}, {".bmp", ""},
        {".ppm", ""},    {".pgm", ""},     {".webp", ""},     {".tif", ""}, {".tiff", ""}};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof tab / sizeof *tab; i++) {
        size_t m = strlen(tab[i][0]);
        if (n > m && !strcasecmp(name + n - m, tab[i][0]))
            return tab[i][1];
    }
    return NULL;
}

/* The format the first bytes of the file say, or NULL. */
static const char *file_format(const char *path)
{
    unsigned char head[16];
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(head, 1, sizeof head, f) : 0;
    if (f)
        fclose(f);
    return dl_image_format(head, n);
}

int dl_image_files_is_input(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return 1;
    return suffix_format(path) ||
           (stat(path, &st) == 0 && S_ISREG(st.st_mode) && file_format(path));
}

static int add(dl_image_files *f, size_t *cap, const char *path)
{
    if (f->n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        char **p = realloc(f->paths, c * sizeof *p);
        if (!p)
            return dl_error(DL_ENOMEM, "out of memory for the file list");
        f->paths = p;
        *cap = c;
    }
    if (!(f->paths[f->n] = strdup(path)))
        return dl_error(DL_ENOMEM, "out of memory for the file list");
    f->n++;
    return DL_OK;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The folder's images and sub-folders' images, names sorted in each. */
static int walk(dl_image_files *f, size_t *cap, const char *dir, int depth)
{
    if (depth > 64)
        return dl_error(DL_EINVAL, "%s: folders nested too deep", dir);
    DIR *d = opendir(dir);
    if (!d)
        return dl_error(DL_EIO, "%s: cannot read the folder: %s", dir, strerror(errno));
    dl_image_files names = {0};
    size_t ncap = 0;
    struct dirent *de;
    int rc = DL_OK;
    while (rc == DL_OK && (de = readdir(d)))
        if (de->d_name[0] != '.')
            rc = add(&names, &ncap, de->d_name);
    closedir(d);
    if (names.n)
        qsort(names.paths, names.n, sizeof *names.paths, cmp_str);
    for (size_t i = 0; rc == DL_OK && i < names.n; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, names.paths[i]);
        struct stat st;
        if (stat(p, &st) != 0)
            continue; /* a dangling link */
        if (S_ISDIR(st.st_mode))
            rc = walk(f, cap, p, depth + 1);
        else if (S_ISREG(st.st_mode) && suffix_format(names.paths[i]) &&
                 *suffix_format(names.paths[i]))
            rc = add(f, cap, p);
    }
    dl_image_files_done(&names);
    return rc;
}

int dl_image_files_list(dl_image_files *f, const char *path)
{
    memset(f, 0, sizeof *f);
    size_t cap = 0;
    struct stat st;
    if (stat(path, &st) != 0)
        return dl_error(DL_EINVAL, "%s: no such file or folder", path);
    int rc = S_ISDIR(st.st_mode) ? walk(f, &cap, path, 0) : add(f, &cap, path);
    if (rc == DL_OK && f->n == 0)
        rc =
            dl_error(DL_EINVAL, "%s: no PNG or JPEG files (.png, .jpg, .jpeg) in the folder", path);
    if (rc < 0)
        dl_image_files_done(f);
    return rc;
}

void dl_image_files_done(dl_image_files *f)
{
    for (size_t i = 0; f->paths && i < f->n; i++)
        free(f->paths[i]);
    free(f->paths);
    memset(f, 0, sizeof *f);
}

/* The file's bytes are the format its name says. */
static int check_suffix(const char *path)
{
    const char *want = suffix_format(path), *got = file_format(path);
    if (!got)
        return DL_OK; /* the decoder says what is wrong */
    if (!want || strcmp(want, got))
        return dl_error(DL_EINVAL, "%s: the file is a %s image but its name does not end in %s",
                        path, !strcmp(got, "png") ? "PNG" : "JPEG",
                        !strcmp(got, "png") ? ".png" : ".jpg or .jpeg");
    return DL_OK;
}

/* One file as the importer brings it to [c, h, w]: scaled and cropped, then converted. */
static int load_one(const char *path, int c, int h, int w, uint8_t *out)
{
    DL_TRY(check_suffix(path));
    dl_image raw = {0}, sized = {0}, conv = {0};
    int rc = dl_image_load(&raw, path, NULL);
    if (rc == DL_OK)
        rc = dl_image_resize_crop(&sized, &raw, h, w);
    if (rc == DL_OK)
        rc = sized.channels == c ? DL_OK : dl_image_convert(&conv, &sized, c);
    if (rc == DL_OK)
        dl_image_to_chw(sized.channels == c ? &sized : &conv, out);
    dl_image_done(&raw);
    dl_image_done(&sized);
    dl_image_done(&conv);
    return rc;
}

int dl_image_files_load(const dl_image_files *f, int channels, int height, int width, dl_dataset *d)
{
    memset(d, 0, sizeof *d);
    if (channels != 1 && channels != 3)
        return dl_error(DL_EINVAL, "images have 1 or 3 channels, not %d", channels);
    size_t per = (size_t)channels * (size_t)height * (size_t)width;
    d->x = malloc(f->n * per);
    d->y = calloc(f->n ? f->n : 1, sizeof(int32_t));
    if (!d->x || !d->y) {
        dl_dataset_done(d);
        return dl_error(DL_ENOMEM, "out of memory for %zu images", f->n);
    }
    for (size_t i = 0; i < f->n; i++) {
        int rc = load_one(f->paths[i], channels, height, width, (uint8_t *)d->x + i * per);
        if (rc < 0) {
            dl_dataset_done(d);
            return rc;
        }
    }
    d->info.sample = (dl_shape){3, {channels, height, width}};
    d->info.x_dtype = DL_U8;
    d->info.y_dtype = DL_I32;
    d->info.y_width = 1;
    d->info.count = f->n;
    d->info.scale = 1.0f;
    snprintf(d->name, sizeof d->name, "%s", f->n == 1 ? f->paths[0] : "images");
    return DL_OK;
}
