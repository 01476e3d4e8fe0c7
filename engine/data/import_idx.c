/* import_idx.c - IDX pairs found in a folder or by file name, read as the splits of an import */
#include "engine/data/import_idx.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/base/error.h"

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* dir/<prefix>-<kind>-idx<n>-ubyte[.gz] or dir/<prefix>-<kind>.idx<n>-ubyte[.gz]. */
static int find_idx(char *out, size_t size, const char *dir, const char *prefix, const char *kind,
                    int ndim)
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

/* The pair as a new split, without touching im->origin. */
static int load_pair(dl_import *im, const char *name, const char *images, const char *labels)
{
    dl_import_split *s = dl_import_next_split(im, name);
    if (!s)
        return dl_error(DL_EINVAL, "%s: too many splits (at most %d)", images,
                        DL_IMPORT_MAX_SPLITS);
    DL_TRY(dl_dataset_load_idx(&s->d, images, labels));
    im->nsplits++;
    DL_TRY(dl_import_add_source(s, images));
    DL_TRY(dl_import_add_source(s, labels));
    return DL_OK;
}

int dl_import_idx_pair(dl_import *im, const char *split, const char *images, const char *labels)
{
    DL_TRY(load_pair(im, split, images, labels));
    snprintf(im->origin, sizeof im->origin, "IDX %.500s + %.500s", images, labels);
    return DL_OK;
}

int dl_import_idx_dir(dl_import *im, const char *dir)
{
    static const struct {
        const char *prefix, *split;
    } pairs[] = {{"train", "train"}, {"t10k", "test"}};
    char im_path[1100], lb_path[1100];
    for (int i = 0; i < 2; i++) {
        int has_im = find_idx(im_path, sizeof im_path, dir, pairs[i].prefix, "images", 3);
        int has_lb = find_idx(lb_path, sizeof lb_path, dir, pairs[i].prefix, "labels", 1);
        if (has_im != has_lb)
            return dl_error(DL_EINVAL, "%s: %s but no %s file for the %s split", dir,
                            has_im ? im_path : lb_path, has_im ? "labels" : "images",
                            pairs[i].prefix);
        if (has_im)
            DL_TRY(load_pair(im, pairs[i].split, im_path, lb_path));
    }
    if (im->nsplits == 0)
        return dl_error(DL_EINVAL,
                        "%s: no IDX files: expected train-images-idx3-ubyte[.gz] "
                        "and train-labels-idx1-ubyte[.gz] (and t10k-... for /test)",
                        dir);
    snprintf(im->origin, sizeof im->origin, "IDX %.1000s", dir);
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

int dl_import_idx_images(dl_import *im, const char *split, const char *images)
{
    char labels[1100];
    snprintf(labels, sizeof labels, "%s", images);
    char *base = strrchr(labels, '/');
    base = base ? base + 1 : labels;
    size_t room = sizeof labels - (size_t)(base - labels);
    if (!replace_once(base, room, "images", "labels") || !replace_once(base, room, "idx3", "idx1"))
        return dl_error(DL_EINVAL,
                        "%s: not a folder, a .csv file or an IDX images file "
                        "named *images*idx3*; give IMAGES LABELS OUT.h5",
                        images);
    if (!is_file(labels))
        return dl_error(DL_EINVAL, "%s: no labels file %s next to it", images, labels);
    DL_TRY(load_pair(im, split ? split : dl_import_idx_split_of(images), images, labels));
    snprintf(im->origin, sizeof im->origin, "IDX %.1000s", images);
    return DL_OK;
}

const char *dl_import_idx_split_of(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (!strncmp(base, "t10k", 4) || !strncmp(base, "test", 4))
        return "test";
    return "train";
}
