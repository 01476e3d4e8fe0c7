/* fixtures.h - test fixtures written once: a Gaussian-blob classification set in memory
 *
 * The C tests that train a small model on a synthetic set describe it with
 * an fx_blobs and get a dl_dataset from fx_blobs_make; each keeps its own
 * numbers, so its data (and what it asserts) are those it always had.
 */
#ifndef DL_FIXTURES_H
#define DL_FIXTURES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/base/rng.h"
#include "engine/core/tensor.h"
#include "engine/data/data.h"

/* Sample i has label i % classes and the features of `sample` (f32):
 *   x[i][k] = (k % classes == label && k / classes < blocks ? signal : 0)
 *             + noise * dl_rng_normal(seed, stream, i, k)
 * blocks 0: every block of `classes` features carries the signal. */
typedef struct fx_blobs {
    dl_shape sample;
    int classes;
    float signal;
    int blocks;
    float noise;
    uint64_t seed, stream;
    const char *name; /* the dataset's name */
} fx_blobs;

/* Fills d (zeroed first; release with dl_dataset_done) with count samples
 * described by spec. Aborts when memory runs out: a test cannot go on. */
static inline void fx_blobs_make(dl_dataset *d, size_t count, const fx_blobs *spec)
{
    memset(d, 0, sizeof *d);
    d->info.sample = spec->sample;
    d->info.x_dtype = DL_F32;
    d->info.y_dtype = DL_I32;
    d->info.y_width = 1;
    d->info.classes = spec->classes;
    d->info.count = count;
    d->info.scale = 1;
    size_t per = (size_t)dl_shape_numel(&spec->sample);
    float *x = malloc(count * per * sizeof *x);
    int32_t *y = malloc(count * sizeof *y);
    DL_ASSERT(x && y);
    size_t classes = (size_t)spec->classes, blocks = (size_t)spec->blocks;
    for (size_t i = 0; i < count; i++) {
        y[i] = (int32_t)(i % classes);
        for (size_t k = 0; k < per; k++) {
            int hot = k % classes == (size_t)y[i] && (blocks == 0 || k / classes < blocks);
            x[i * per + k] = (hot ? spec->signal : 0.0f) +
                             spec->noise * dl_rng_normal(spec->seed, spec->stream, i, k);
        }
    }
    d->x = x;
    d->y = y;
    snprintf(d->name, sizeof d->name, "%s", spec->name);
}

#endif
