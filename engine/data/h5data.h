/* h5data.h - HDF5 datasets as batch sources: worker threads, prefetch, streaming, augmentation
 *
 * A split is an HDF5 group holding two datasets of equal length along the
 * first axis: x [count, sample...] (u8, f32 or i32) and y [count] or
 * [count, width] (integer class labels, or f32 targets). `dlbench import`
 * writes such files; any file laid out this way works.
 *
 * The source assembles batches in worker threads into a bounded ring of
 * `prefetch` ready batches. The epoch order is fixed by (seed, epoch), so
 * start_epoch(epoch, skip) after a restart yields exactly the batches an
 * uninterrupted run would have seen, for any number of workers.
 *
 * Two modes. In memory: the whole split is read once (when it fits the
 * memory budget); the order is dl_shuffle_permutation(seed, epoch), the
 * same as dl_source_memory's. Streaming: the labels stay in memory, x is
 * read chunk by chunk by one reader thread into two shuffle windows of
 * whole chunks; each epoch permutes the chunks, then the samples within
 * each window. The order therefore depends on the mode and the window
 * size: a resumed run must use the same options.
 *
 * HDF5 may be built without thread safety: every HDF5 call in dlbench goes
 * through dl_hdf5_lock() (engine/base/h5util.h), and only the reader thread
 * (or the caller, with workers = 0) reads. Code elsewhere that calls HDF5
 * while a source is running (checkpoints) must hold the same lock.
 */
#ifndef DL_H5DATA_H
#define DL_H5DATA_H

#include <stddef.h>
#include <stdint.h>

#include "engine/core/backend.h"
#include "engine/data/data.h"

typedef enum {
    DL_HDF5_AUTO = 0, /* in memory when x and y fit memory_budget, else streaming */
    DL_HDF5_MEMORY,
    DL_HDF5_STREAM
} dl_hdf5_mode;

typedef struct dl_hdf5_options {
    const char *path;   /* the .h5 file */
    const char *group;  /* "/train"; "/" for datasets at the root */
    const char *x_name; /* dataset names inside group: "x" and "y" */
    const char *y_name;
    int batch;     /* samples per batch (>= 1) */
    int shuffle;   /* new order each epoch; else file order */
    int drop_last; /* skip a short last batch */
    uint64_t seed; /* shuffle and augmentation key */
    int workers;   /* assembly threads: < 0 one per core, 0 in the caller's thread */
    int prefetch;  /* ready batches kept ahead (>= 1) */
    dl_hdf5_mode mode;
    size_t memory_budget;  /* bytes the source may hold; 0: half the physical memory */
    size_t shuffle_window; /* streaming: samples per shuffle window; 0: from the budget */
    float scale;           /* info.scale; 0: the group's "scale" attribute, else 1 */
    /* Per-channel normalisation: 0 none; 1 with mean/std below when
     * channels > 0, else the group's "mean" and "std" attributes. */
    int normalize;
    int channels;
    float mean[DL_MAX_CHANNELS], std[DL_MAX_CHANNELS];
    int crop_pad; /* random crop of images [.., H, W] after zero padding of this many pixels */
    int hflip;    /* random horizontal flip, probability 1/2 */
    /* ndim > 0: the model's input per sample. The file's sample must have
     * as many elements, and the same dims when ndim > 1. */
    dl_shape expect_sample;
    int classes;    /* > 0: labels must be below it (the model's outputs) */
    size_t limit;   /* > 0: use only the first `limit` samples of the file */
    dl_backend *be; /* batch buffers from be->ops->host_alloc; NULL: malloc */
} dl_hdf5_options;

/* Fills o with the defaults: group "/train", x "x", y "y", batch 128,
 * shuffle on, workers one per core, prefetch 4, mode auto, budget 0 (half
 * the physical memory). The caller sets path. */
void dl_hdf5_options_init(dl_hdf5_options *o);

/* Opens opt->path:opt->group and returns a source over it in *out (epoch 0
 * started, workers running). The options are copied. Bad input (missing
 * file, group or dataset; x and y of different lengths; unsupported dtype;
 * a sample that does not fit expect_sample; labels out of range; a
 * truncated or corrupt file; a budget too small to stream) returns
 * DL_EINVAL or DL_EIO with a message naming the file and dataset path, and
 * *out = NULL. Read errors met later (a corrupt chunk while streaming) are
 * returned by next() with the same kind of message. Destroy with
 * dl_source_destroy(). */
int dl_source_hdf5(dl_source **out, const dl_hdf5_options *opt);

/* "memory" or "streaming" for an HDF5 source, NULL for another source. */
const char *dl_source_hdf5_mode(const dl_source *s);

#endif
