/* synthetic.h - small built-in datasets (spirals, Gaussian blobs) for machines without downloads */
#ifndef DL_SYNTHETIC_H
#define DL_SYNTHETIC_H

#include <stddef.h>
#include <stdint.h>

#include "engine/data/data.h"

/* Fills d (caller-owned, release with dl_dataset_done) with n samples of
 * kind "spirals" (classes interleaved arms in the plane, Gaussian noise of
 * std `noise`) or "blobs" (clusters of std `noise` around centres on the
 * unit circle): x f32 [n, 2], y i32 in 0..classes-1, sample i of class
 * i % classes. Deterministic in (kind, n, classes, noise, seed) through the
 * counter RNG (stream DL_STREAM_USER). Returns DL_EINVAL for an unknown
 * kind, classes < 2 or n == 0; d is then zeroed. */
int dl_dataset_synthetic(dl_dataset *d, const char *kind, size_t n, int classes, float noise,
                         uint64_t seed);

#endif
