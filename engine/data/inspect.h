/* inspect.h - what an HDF5 data file holds, as text: splits, datasets, classes, vocabulary, sources */
#ifndef DL_INSPECT_H
#define DL_INSPECT_H

#include <stdio.h>

/* Writes to out a description of the HDF5 file at path: a summary line of
 * its kind (labelled samples with their class count, or text with its
 * vocabulary kind and size), the root attributes, then each group (a
 * split) with its datasets (shape, dtype; a text split's token count) and
 * its attributes (class names, sources and their SHA-256 ...). Long
 * strings are cut with their length given. Takes the HDF5 lock. Returns
 * DL_OK; DL_EINVAL naming path when it does not exist, is not a regular
 * file or is not HDF5; DL_EIO when HDF5 fails reading it. */
int dl_data_inspect(const char *path, FILE *out);

#endif
