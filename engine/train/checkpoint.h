/* checkpoint.h - checkpoint.h5: model state, optimizer moments, trainer cursor and seed, checksummed and written atomically
 *
 * Layout (version 2), as h5py sees it:
 *   /arena/params, /arena/moment1, /arena/moment2, /arena/buffers
 *       f32 [P] and [B]: the regions of the model's state arena as the
 *       optimizer keeps them (moments only as many as it keeps); a load
 *       reads each with one H5Dread;
 *   /params/NAME, /moment1/NAME, /moment2/NAME, /buffers/NAME
 *       one dataset per tensor with its shape ("/params/Linear2.weight"
 *       [512, 784], "/buffers/BatchNorm3.running_mean" [64]): HDF5
 *       virtual datasets over the arena's hyperslab, so they cost no
 *       space and cannot disagree with it ('/' in a name is written '_');
 *   root attributes: format ("dlbench-checkpoint 2"), version (2), layout
 *       (a "count P buffers B" line, then "param|buffer NAME OFFSET COUNT
 *       D0,D1" per tensor; a layout over 60000 bytes is the u8 dataset
 *       /layout instead), moments, cursor (17 doubles: the trainer
 *       cursor with the epoch's and the logging window's running sums;
 *       files with the first 10 only still load), seed, config_hash and
 *       sha256 (over every arena, the cursor, the seed and the config
 *       hash).
 * Version 1 files (flat /params, /moment1, /moment2, /buffers at the root,
 * a layout of "NAME OFFSET COUNT" parameter lines) still load. A load
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

#define DL_CHECKPOINT_VERSION 2

/* One tensor of a checkpoint's layout: a parameter (its optimizer moments
 * have the same name and place in their regions) or a buffer. */
typedef struct dl_checkpoint_tensor {
    char name[64];
    int buffer;    /* 0: a parameter, 1: a buffer (running statistic) */
    size_t offset; /* floats into its region */
    size_t count;
    dl_shape shape; /* version 1 files: [count] */
} dl_checkpoint_tensor;

/* A checkpoint read whole, verified, on the host. */
typedef struct dl_checkpoint_contents {
    int version; /* 1 or 2 */
    dl_checkpoint_info info;
    int moments;                   /* optimizer moments per parameter */
    float *region[4];              /* params, moment1, moment2, buffers (NULL: absent) */
    size_t n[4];                   /* floats of each */
    size_t count, buffer_count;    /* the layout's region sizes */
    dl_checkpoint_tensor *tensors; /* parameters, then buffers (version 1: no buffers) */
    int ntensors;
} dl_checkpoint_contents;

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

/* Reads path whole into c (zeroed first): the arenas, the layout's
 * tensor table, the info; verifies format, layout and checksum. Errors as
 * dl_checkpoint_load's; c is then empty. */
int dl_checkpoint_read(const char *path, dl_checkpoint_contents *c);

/* Frees what dl_checkpoint_read allocated (c may be zeroed). */
void dl_checkpoint_contents_done(dl_checkpoint_contents *c);

/* The tensor of c named name (a parameter, or a buffer when buffer), or
 * NULL; its values start at c->region[buffer ? 3 : 0] + offset. */
const dl_checkpoint_tensor *dl_checkpoint_find(const dl_checkpoint_contents *c, const char *name,
                                               int buffer);

/* Reads only the info (cursor, seed, config hash) after the same checks of
 * format and checksum that need no model. */
int dl_checkpoint_peek(const char *path, dl_checkpoint_info *info);

#endif
