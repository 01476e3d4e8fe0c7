/* checkpoint.h - checkpoint.h5: model state, optimizer moments, trainer cursor and seed, checksummed and written atomically
 *
 * Layout: datasets /params, /moment1, /moment2 (as the optimizer keeps
 * them), /buffers (running statistics), all f32 in the model's arena
 * order; attributes on the root: format ("dlbench-checkpoint 1"), layout
 * (one "name offset count" line per parameter), cursor, seed,
 * config_hash and sha256 (over every array, the cursor, the seed and the
 * config hash). A load verifies all of it before touching the model.
 */
#ifndef DL_CHECKPOINT_H
#define DL_CHECKPOINT_H

#include <stdint.h>

#include "nn.h"
#include "trainer.h"

typedef struct dl_checkpoint_info {
    dl_trainer_cursor cursor;
    uint64_t seed;
    char config_hash[65];
} dl_checkpoint_info;

/* Writes the model's state (copied from its device to the host) and info to
 * path: a temporary file next to it, fsync, rename, fsync of the folder.
 * On error the previous checkpoint at path is untouched. */
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
