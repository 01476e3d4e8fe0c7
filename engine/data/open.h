/* open.h - a data source described in plain C (what dl.data.* says) and opening it */
#ifndef DL_OPEN_H
#define DL_OPEN_H

#include <stddef.h>
#include <stdint.h>

#include "engine/core/backend.h"
#include "engine/data/data.h"

typedef enum {
    DL_DATA_SYNTHETIC,
    DL_DATA_FASHION_MNIST,
    DL_DATA_HDF5,
    DL_DATA_TEXT /* a token file (dlbench import --text): context windows */
} dl_data_kind;

/* A training and an optional validation split, and how to read them. */
typedef struct dl_data_desc {
    dl_data_kind kind;
    char path[1024];           /* hdf5 or text file, or the IDX folder */
    char train[128], val[128]; /* hdf5 groups; val "" for none */
    char synth[32];            /* "spirals", "blobs" */
    long n, n_val;             /* synthetic sizes */
    int classes;               /* synthetic */
    double noise;              /* synthetic */
    uint64_t data_seed;        /* synthetic: the generator's key */
    long limit, val_limit;     /* 0: all samples */
    float scale;               /* 0: the source's own */
    int channels;              /* > 0 with mean/std */
    float mean[DL_MAX_CHANNELS], std[DL_MAX_CHANNELS];
    int workers, prefetch, shuffle, drop_last;
    int flatten; /* present samples as [features] */
    int context; /* text: tokens per window (T) */
    int vocab;   /* text: vocab_size, read from the file by dl.data.text */
    /* hdf5 only (dl_hdf5_options): training-split augmentation, loading
     * mode, budget, window and dataset names ("" for "x" and "y") */
    int crop_pad, hflip;
    int mode;             /* dl_hdf5_mode: 0 auto, 1 memory, 2 streaming */
    double memory_budget; /* bytes; 0: half the physical memory */
    long shuffle_window;  /* samples; 0: from the budget */
    char x_name[64], y_name[64];
} dl_data_desc;

/* Opens the sources d describes, batches of `batch`, shuffled by seed:
 * an HDF5 file's two groups through dl_source_hdf5 (workers, prefetch), or
 * Fashion-MNIST IDX files and synthetic data loaded into memory and served
 * by dl_source_memory_own (the sources own their data), or a text file's
 * two splits through dl_source_text (windows of d->context tokens; the
 * validation windows fixed). The validation
 * source has neither shuffle nor drop_last; *val is NULL without one.
 * limit, scale, mean/std, flatten, mode, memory_budget and the dataset
 * names apply to both; crop and flip to the training split only. be (NULL: malloc):
 * where batch buffers come from (pinned memory on CUDA). fp receives a
 * text identifying the data: the file's name, groups (and the context for
 * text), sample counts and SHA-256, or the generator's parameters and a SHA-256 of the samples
 * used. Errors: a missing HDF5 file is DL_EINVAL with a message that says
 * how to make it; the rest as the sources' own; *train and *val are then
 * NULL. */
int dl_data_open(const dl_data_desc *d, int batch, uint64_t seed, dl_backend *be, dl_source **train,
                 dl_source **val, char *fp, size_t fp_size);

/* Reads the "class_names" attribute of path:group (a 1-D array of
 * fixed-length strings, as dlbench import writes it) into *buf, one
 * malloc'd block of n names of *len bytes each, NUL-padded; the caller
 * frees it. Returns n, or 0 (*buf NULL) when the file, group or attribute
 * is missing or unreadable: class names are optional. */
int dl_data_class_names(const char *path, const char *group, char **buf, size_t *len);

#endif
