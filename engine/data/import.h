/* import.h - an import before it is written: named splits in memory, their sources, class names
 *
 * An import is filled by one importer (import_csv.h, import_idx.h, or
 * dl_import_synthetic below), then dl_import_prepare settles class names,
 * scales and an optional validation split, and h5write.h writes it. The
 * caller owns the dl_import (zero it first) and releases it with
 * dl_import_done.
 */
#ifndef DL_IMPORT_H
#define DL_IMPORT_H

#include <stdint.h>

#include "engine/data/data.h"

#define DL_IMPORT_MAX_SPLITS 3
#define DL_IMPORT_MAX_SOURCES 2
#define DL_IMPORT_MAX_NAMES 256

/* One split: its group name, its samples, and the files they came from
 * with their SHA-256 (written as attributes). */
typedef struct dl_import_split {
    char name[16]; /* "train", "test", "val" */
    dl_dataset d;
    int nsrc;
    char src[DL_IMPORT_MAX_SOURCES][1024];
    char sha[DL_IMPORT_MAX_SOURCES][65];
} dl_import_split;

typedef struct dl_import {
    dl_import_split sp[DL_IMPORT_MAX_SPLITS];
    int nsplits;
    char *names[DL_IMPORT_MAX_NAMES]; /* class names (CSV string labels or a known list), owned */
    int nnames;
    char origin[1100]; /* what was imported, for the file and the summary */
} dl_import;

/* Frees every split's data and the class names; im is zeroed. */
void dl_import_done(dl_import *im);

/* The next split, zeroed and named name; NULL when all DL_IMPORT_MAX_SPLITS
 * are in use. It counts in im->nsplits only once the caller increments it
 * (after filling it), so a failed importer leaves nothing half made. */
dl_import_split *dl_import_next_split(dl_import *im, const char *name);

/* Records path as a source file of s with its SHA-256. Returns DL_OK, or
 * dl_sha256_file's error. */
int dl_import_add_source(dl_import_split *s, const char *path);

/* Generates the splits /train (samples points, key seed) and /test
 * (samples / 4, at least 1, key seed + 1) of kind "spirals" or "blobs" with
 * dl_dataset_synthetic, and sets im->origin. Errors as
 * dl_dataset_synthetic's (DL_EINVAL for an unknown kind). */
int dl_import_synthetic(dl_import *im, const char *kind, long samples, int classes, float noise,
                        uint64_t seed);

/* Replaces the class names by arg: "none" (no change), "fashion-mnist",
 * "mnist", or a comma-separated list. When classes > 0 the count must
 * match: DL_EINVAL naming both otherwise. DL_ENOMEM when a copy fails. */
int dl_import_class_names(dl_import *im, const char *arg, int classes);

/* The last steps before writing: class names from class_names (NULL: the
 * CSV's string labels, or Fashion-MNIST / MNIST names for 10-class u8
 * images, chosen by the first source's file name), scale 1/255 for u8
 * images, and, when val_fraction > 0, a seeded random fraction of /train
 * (or of the only split) moved to /val, both kept in file order. Returns
 * DL_OK, DL_EINVAL naming the option that does not fit, or DL_ENOMEM. */
int dl_import_prepare(dl_import *im, const char *class_names, double val_fraction, uint64_t seed);

#endif
