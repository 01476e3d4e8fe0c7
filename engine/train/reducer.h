/* reducer.h - data parallelism as the trainer is handed it: ranks, a bucketed gradient sum, host collectives
 *
 * The trainer does not know MPI or NCCL: a data-parallel job hands it a
 * dl_reducer (dl_trainer_set_reducer), a table of functions over a context
 * that engine/dist fills from its communicator (dl_comm_reducer). Every
 * call is collective: every rank makes it, in the same order, with the
 * same sizes. Functions returning int give DL_OK or a negative code with
 * dl_error set.
 */
#ifndef DL_REDUCER_H
#define DL_REDUCER_H

#include <stddef.h>

#include "engine/core/backend.h"

typedef struct dl_reducer {
    void *ctx;      /* the implementation's; borrowed, outlives the trainer */
    int rank, size; /* this rank, and how many there are (>= 1) */
    /* "MPI (Open MPI 4.1.4), 2 ranks" */
    const char *(*describe)(void *ctx);
    /* "mpi", "nccl" or "mpi via host": how the planned region is summed */
    const char *(*grad_path)(void *ctx);
    /* Plans the sum of p[0..n) of be's memory; cuts[0..ncuts) are float
     * offsets, ascending, where a bucket may start (parameter starts). */
    int (*grad_plan)(void *ctx, dl_backend *be, float *p, size_t n, const size_t *cuts, int ncuts);
    /* A step starts: nothing is in flight. */
    void (*grad_begin)(void *ctx);
    /* Floats [from, n) are final on this rank (the bucket-ready hook,
     * called from backward): buckets inside may start. */
    int (*grad_ready)(void *ctx, size_t from);
    /* Waits for every bucket: the region holds the sum over ranks. */
    int (*grad_finish)(void *ctx);
    /* Seconds spent in gradient communication since the last call; resets. */
    double (*take_seconds)(void *ctx);
    /* In-place sum over ranks of n doubles of host memory. */
    int (*sum)(void *ctx, double *v, int n);
    /* bytes of host memory at buf from root to every rank. */
    int (*bcast)(void *ctx, void *buf, size_t bytes, int root);
    /* n floats of be's memory at p from root to every rank. */
    int (*bcast_floats)(void *ctx, dl_backend *be, float *p, size_t n, int root);
    /* Waits for every rank. */
    int (*barrier)(void *ctx);
} dl_reducer;

#endif
