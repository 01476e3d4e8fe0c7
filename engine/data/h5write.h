/* h5write.h - an import written as a dlbench HDF5 data file (the layout h5data.h reads)
 *
 * The file: root attributes format "dlbench-data 1", created_by and
 * origin; one group per split holding x [count, sample...] and y [count]
 * or [count, width], chunked along the first axis, with the attributes
 * sample_shape, count, scale, classes, class_names, mean and std (per
 * channel, from /train and shared by all splits), source and
 * source_sha256.
 */
#ifndef DL_H5WRITE_H
#define DL_H5WRITE_H

#include "engine/data/import.h"

/* Writes im to path (created or truncated) and flushes it to disk, taking
 * the HDF5 lock. chunk: rows per HDF5 chunk (<= 0: about 1 MiB of x);
 * gzip: 0 none, 1-9 shuffle + deflate at that level. The caller makes it
 * atomic: write a temporary name, then dl_fs_commit. Returns DL_OK, or
 * DL_ERR / DL_ENOMEM with a message naming the file, the group and the
 * failed HDF5 call; the file is then incomplete (the caller removes it). */
int dl_h5write_import(const char *path, const dl_import *im, long chunk, int gzip);

#endif
