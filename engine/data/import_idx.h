/* import_idx.h - IDX image/label pairs as import splits: a pair, a folder, an images file */
#ifndef DL_IMPORT_IDX_H
#define DL_IMPORT_IDX_H

#include "engine/data/import.h"

/* Reads the pair images + labels (dl_dataset_load_idx) as split `split`
 * of im and records both files as its sources; sets im->origin to
 * "IDX images + labels". Errors name the file and what was wrong. */
int dl_import_idx_pair(dl_import *im, const char *split, const char *images, const char *labels);

/* Reads the folder's train-* pair as /train and t10k-* pair as /test
 * (<prefix>-images-idx3-ubyte or <prefix>-images.idx3-ubyte, gzipped or
 * not). DL_EINVAL when a pair is incomplete or there is none. */
int dl_import_idx_dir(dl_import *im, const char *dir);

/* Reads an images file whose labels file is found by its name (*images*
 * -> *labels*, idx3 -> idx1, in the base name). split NULL: "test" for a
 * t10k* or test* file, else "train". DL_EINVAL when the name does not
 * allow it or the labels file is missing. */
int dl_import_idx_images(dl_import *im, const char *split, const char *images);

/* "test" for a base name starting with t10k or test, else "train". */
const char *dl_import_idx_split_of(const char *path);

#endif
