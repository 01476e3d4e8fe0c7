/* shard.h - a decorator over a batch source: one rank's rows of every global batch */
#ifndef DL_SHARD_H
#define DL_SHARD_H

#include "engine/data/data.h"

/* A source that yields, from each batch of inner, the rows of rank of
 * world: [rank*n/world, (rank+1)*n/world). Every rank must build inner
 * the same way (same seed, same shuffle): then the ranks split every
 * global batch without overlap. Zero-copy (the rows are contiguous). The
 * slice may be empty (n = 0) when a batch has fewer rows than ranks.
 * info is inner's (count is the global count). Takes no ownership of
 * inner; destroying the shard leaves inner alone. DL_EINVAL for a rank
 * outside [0, world), DL_ENOMEM. */
int dl_source_shard(dl_source **out, dl_source *inner, int rank, int world);
/* Rows of the last global batch a shard source read (all ranks' slices
 * together): the trainer's mean is over these. */
int dl_source_shard_global_rows(const dl_source *s);

#endif
