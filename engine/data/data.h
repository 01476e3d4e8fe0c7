/* data.h - datasets in host memory and the batch-source interface the trainer reads */
#ifndef DL_DATA_H
#define DL_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "engine/core/tensor.h"

#define DL_MAX_CHANNELS 16

/* What a source yields and how the trainer turns x into f32 on the device:
 * x_f32 = (x * scale - mean[ch]) / std[ch]. */
typedef struct dl_data_info {
    dl_shape sample;  /* per-sample x shape, e.g. [1, 28, 28] or [784] */
    dl_dtype x_dtype; /* u8, f32 or i32 */
    dl_dtype y_dtype; /* i32 class labels, or f32 targets */
    int y_width;      /* f32 targets per sample (1 for labels) */
    int classes;      /* number of classes for labels, 0 otherwise */
    size_t count;     /* samples per epoch */
    float scale;      /* 1 when unset */
    int channels;     /* 0: no mean/std normalisation */
    float mean[DL_MAX_CHANNELS], std[DL_MAX_CHANNELS];
} dl_data_info;

/* One batch in host memory, valid until the next call to next() or
 * start_epoch() on the same source. */
typedef struct dl_batch {
    int n;
    const void *x; /* [n, sample...] of info.x_dtype */
    const void *y; /* [n, y_width] of info.y_dtype */
    double wait_s; /* how long next() blocked for this batch */
} dl_batch;

/* Loader statistics for telemetry. */
typedef struct dl_loader_stats {
    double wait_s;     /* total time the consumer waited */
    long batches;      /* batches handed out */
    double bytes_read; /* bytes read from storage */
    int queue_fill, queue_size;
} dl_loader_stats;

typedef struct dl_source dl_source;

typedef struct dl_source_ops {
    /* Starts an epoch: order fixed by (seed, epoch); skips the first
     * `skip` batches (resume from a cursor). */
    int (*start_epoch)(dl_source *s, int epoch, size_t skip);
    /* Fills *out: returns 1 with a batch, 0 at the end of the epoch, or a
     * negative code with dl_error() set. The last batch may be short unless
     * drop_last was asked. */
    int (*next)(dl_source *s, dl_batch *out);
    /* Batches in one epoch. */
    size_t (*batches)(dl_source *s);
    void (*stats)(dl_source *s, dl_loader_stats *out);
    /* Host buffers are re-requested from be (pinned memory on CUDA). */
    int (*retarget)(dl_source *s, dl_backend *be);
    void (*destroy)(dl_source *s);
} dl_source_ops;

struct dl_source {
    const dl_source_ops *ops;
    dl_data_info info;
    char name[256]; /* "data/fashion-mnist.h5:/train" for messages */
};

static inline void dl_source_destroy(dl_source *s)
{
    if (s)
        s->ops->destroy(s);
}

/* A whole dataset in host memory: x [count, sample...] and y [count,
 * y_width]. */
typedef struct dl_dataset {
    dl_data_info info;
    void *x, *y;
    char name[256];
} dl_dataset;

void dl_dataset_done(dl_dataset *d);

/* Reads an IDX image/label pair (gzipped or not) into d: x u8 [count, 1,
 * rows, cols], y i32 labels. Errors name the file and what was wrong. */
int dl_dataset_load_idx(dl_dataset *d, const char *images_path, const char *labels_path);

/* Loads the Fashion-MNIST split ("train" or "t10k") from dir (IDX files as
 * Debian's dataset-fashion-mnist installs them). */
int dl_dataset_load_fashion_mnist(dl_dataset *d, const char *dir, const char *split);

/* Keeps only the first `count` samples of d. */
void dl_dataset_truncate(dl_dataset *d, size_t count);

/* A synchronous in-memory source over d (not owned; d must outlive it):
 * batches of `batch`, shuffled each epoch by the counter RNG keyed by seed
 * when shuffle is set. */
int dl_source_memory(dl_source **out, const dl_dataset *d, int batch, int shuffle, int drop_last,
                     uint64_t seed);

/* The same, owning the data: d's buffers move into the source (freed by
 * its destroy) and d is zeroed, whether it succeeds or not (on error the
 * buffers are freed). */
int dl_source_memory_own(dl_source **out, dl_dataset *d, int batch, int shuffle, int drop_last,
                         uint64_t seed);

/* The order of samples for an epoch: perm[i] for i < count, a
 * Fisher-Yates shuffle driven by the counter RNG keyed by (seed, epoch).
 * Same arguments, same permutation, on any machine. */
void dl_shuffle_permutation(uint32_t *perm, size_t count, uint64_t seed, int epoch);

#endif
