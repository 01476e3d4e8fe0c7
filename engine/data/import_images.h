/* import_images.h - a folder of images (one sub-folder per class) as import splits
 *
 * The layout torchvision's ImageFolder reads: DIR/<class>/<image>, classes
 * sorted by name (bytewise), label = the class's index; or DIR/train/<class>/...
 * with DIR/val and/or DIR/test beside it as further splits (their classes
 * are train's; a class folder train lacks is skipped). Images are PNG or
 * JPEG (decoded by image.h), in name order within a class; dot-files and
 * plain files directly in DIR are ignored. The splits hold x u8 [N, C, H,
 * W] and y i32 labels; the class names are im->names.
 */
#ifndef DL_IMPORT_IMAGES_H
#define DL_IMPORT_IMAGES_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/data/import.h"

#define DL_IMAGES_SHOWN_SKIPS 5

/* What to import and how. */
typedef struct dl_images_options {
    int height, width;   /* --size: scale and centre-crop to this; 0: keep, sizes must agree */
    int channels;        /* 1 or 3; 0: 1 when every image is grey, else 3 */
    double val_fraction; /* > 0: that fraction of each class of /train moved to /val */
    uint64_t seed;       /* for val_fraction */
    int workers;         /* decoding threads (>= 1); the output does not depend on it */
    int strict;          /* the first bad entry fails the import */
    /* called on the calling thread about ten times a second and once at the end */
    void (*progress)(void *ctx, size_t done, size_t total);
    void *ctx;
    volatile sig_atomic_t *cancel; /* non-zero: stop (DL_ERR "interrupted"); may be NULL */
} dl_images_options;

/* What was left out: a count and the first few entries with why. */
typedef struct dl_images_report {
    size_t images, skipped;
    int shown;
    char what[DL_IMAGES_SHOWN_SKIPS][400]; /* "PATH: why" */
} dl_images_report;

/* 1 when dir looks like an image folder: a sub-folder (not dot-named)
 * holding a .png/.jpg/.jpeg file or, one level down, a sub-folder that
 * does (the train/val layout). */
int dl_import_images_is_folder(const char *dir);

/* Reads the image folder dir into im (splits, class names, origin, the
 * folder as each split's source with the SHA-256 of its files' names and
 * bytes in order). Bad entries - a corrupt or truncated image, a file that
 * is not PNG or JPEG, an empty or unreadable class folder, a size unlike
 * the first image's without a target size - are counted in *rep and left
 * out; with o->strict the first of them fails the import (DL_EINVAL
 * naming it). DL_EINVAL "DIR: no images ..." when nothing is left,
 * DL_EINVAL for a val_fraction that leaves a split empty, DL_ERR
 * "interrupted" when *o->cancel was set, DL_ENOMEM. On error im holds
 * no new split. */
int dl_import_images_dir(dl_import *im, const char *dir, const dl_images_options *o,
                         dl_images_report *rep);

#endif
