/* import_cifar.h - CIFAR-10 and CIFAR-100 binary batches as import splits
 *
 * CIFAR-10: data_batch_1.bin .. data_batch_5.bin -> /train, test_batch.bin
 * -> /test; records of 1 label byte and 3072 pixel bytes (the R, G and B
 * planes, each 32x32 row-major). CIFAR-100: train.bin -> /train, test.bin
 * -> /test; records of 1 coarse label byte, 1 fine label byte and the same
 * 3072 pixel bytes. Both give x u8 [N, 3, 32, 32] and y i32 labels.
 */
#ifndef DL_IMPORT_CIFAR_H
#define DL_IMPORT_CIFAR_H

#include "engine/data/import.h"

/* 10 when dir holds CIFAR-10 batches (data_batch_1.bin or test_batch.bin),
 * 100 for CIFAR-100 (train.bin or test.bin), else 0. */
int dl_import_cifar_kind(const char *dir);

/* Reads the CIFAR folder dir into im's /train and /test and sets
 * im->origin and the class names (batches.meta.txt, fine_label_names.txt
 * or coarse_label_names.txt when present; the CIFAR-10 names otherwise
 * for CIFAR-10). label: CIFAR-100's "fine" (NULL: the default) or
 * "coarse"; CIFAR-10 takes none. DL_EINVAL naming the file for a size
 * that is not a whole number of records (with the byte count), a label
 * out of range, a names file with the wrong count, a gap in the batch
 * numbers, a bad label option; DL_EIO when a file cannot be read;
 * DL_ENOMEM. On error im holds no new split. */
int dl_import_cifar_dir(dl_import *im, const char *dir, const char *label);

#endif
