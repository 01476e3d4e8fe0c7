/* checkpoint.h - checkpoint.h5: model state, optimizer moments, trainer cursor and seed, checksummed and written atomically
 *
 * Layout: datasets /params, /moment1, /moment2 (as the optimizer keeps
 * them), /buffers (running statistics), all f32 in the model's arena
 * order; attributes on the root: format ("dlbench-checkpoint 1"), layout
 * (one "name offset count" line per parameter), cursor (17 doubles: the
 * trainer cursor with the epoch's and the logging window's running sums;
 * files with the first 10 only still load), seed, config_hash and sha256
 * (over every array, the cursor, the seed and the config hash). A load
 * verifies all of it before touching the model.
 *
 * DLBENCH_FAULT (tests only) injects faults into saves: see checkpoint.c.
 */
#ifndef DL_CHECKPOINT_H
#define DL_CHECKPOINT_H

#include <stdint.h>

#include "engine/nn/nn.h"
#include "engine/train/trainer.h"

typedef struct dl_checkpoint_info {
    dl_trainer_cursor cursor;
    uint64_t seed;
    char config_hash[65];
} dl_checkpoint_info;

/* Writes the model's state (copied from its device to the host) and info to
 * path: the HDF5 file is built in memory, written to a temporary file next
 * to path (mode 0644 less the umask), fsync, rename, fsync of the folder.
 * Needs host memory for twice the state while it runs. On error (a full
 * disk: DL_EIO with strerror's words) the previous checkpoint at path is
 * untouched and no temporary file is left. */
int dl_checkpoint_save(const char *path, dl_model *m, const dl_checkpoint_info *info);

/* Reads path into the model's state (on its device) and *info. Refuses,
 * leaving the model unchanged, a file that is not HDF5 or was torn
 * (DL_EIO), one that is not a dlbench checkpoint, was written for another
 * model or optimizer, or whose checksum does not match (DL_EINVAL); the
 * message names the file and the reason. */
int dl_checkpoint_load(const char *path, dl_model *m, dl_checkpoint_info *info);

/* Reads only the info (cursor, seed, config hash) after the same checks of
 * format and checksum that need no model. */
int dl_checkpoint_peek(const char *path, dl_checkpoint_info *info);

#endif
