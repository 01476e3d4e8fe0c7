/* synthetic.c - small built-in datasets (spirals, Gaussian blobs) from the counter RNG */
#include "engine/data/synthetic.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/base/rng.h"

int dl_dataset_synthetic(dl_dataset *d, const char *kind, size_t n, int classes, float noise,
                         uint64_t seed)
{
    memset(d, 0, sizeof *d);
    int spirals = strcmp(kind, "spirals") == 0;
    if (!spirals && strcmp(kind, "blobs") != 0)
        return dl_error(DL_EINVAL, "synthetic dataset \"%s\": expected \"spirals\" or \"blobs\"",
                        kind);
    if (classes < 2 || n == 0 || n > UINT32_MAX || !(noise >= 0))
        return dl_error(DL_EINVAL,
                        "synthetic %s: %zu samples of %d classes, noise %g: expected "
                        "at least 1 sample, 2 classes and noise >= 0",
                        kind, n, classes, (double)noise);
    float *x = malloc(n * 2 * sizeof *x);
    int32_t *y = malloc(n * sizeof *y);
    if (!x || !y) {
        free(x);
        free(y);
        return dl_error(DL_ENOMEM, "synthetic %s: out of memory for %zu samples", kind, n);
    }
    const float two_pi = 6.28318530718f;
    for (size_t i = 0; i < n; i++) {
        int c = (int)(i % (size_t)classes);
        float ex = noise * dl_rng_normal(seed, DL_STREAM_USER, 1, 2 * i);
        float ey = noise * dl_rng_normal(seed, DL_STREAM_USER, 1, 2 * i + 1);
        float base = two_pi * (float)c / (float)classes;
        if (spirals) {
            /* radius t along an arm that turns 1.5 times */
            float t = dl_rng_uniform(seed, DL_STREAM_USER, 0, i);
            float a = base + t * 1.5f * two_pi;
            x[2 * i] = t * cosf(a) + ex;
            x[2 * i + 1] = t * sinf(a) + ey;
        } else {
            x[2 * i] = cosf(base) + ex;
            x[2 * i + 1] = sinf(base) + ey;
        }
        y[i] = c;
    }
    d->x = x;
    d->y = y;
    d->info.sample = dl_shape_make(1, (const int64_t[]){2});
    d->info.x_dtype = DL_F32;
    d->info.y_dtype = DL_I32;
    d->info.y_width = 1;
    d->info.classes = classes;
    d->info.count = n;
    d->info.scale = 1.0f;
    snprintf(d->name, sizeof d->name, "synthetic:%s", kind);
    return DL_OK;
}
