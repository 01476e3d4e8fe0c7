/* dist_internal.h - the NCCL loader as the MPI side reaches it; not a public header
 *
 * One way only: dist_mpi.c calls dl_nccl_*; dist_nccl.c knows nothing of
 * dl_comm and reaches the host collectives it needs for its set-up, and
 * the watchdog, through the dl_nccl_host table it is handed.
 */
#ifndef DL_DIST_INTERNAL_H
#define DL_DIST_INTERNAL_H

#include <stddef.h>

typedef struct dl_nccl dl_nccl;

/* What NCCL's set-up and waits need of the ranks' host side. */
typedef struct dl_nccl_host {
    void *ctx;
    int rank, size;
    /* In-place minimum over ranks of one double (the ranks' agreement). */
    int (*min)(void *ctx, double *v);
    /* bytes at buf from root to every rank. */
    int (*bcast)(void *ctx, void *buf, size_t bytes, int root);
    /* The watchdog's brackets around a wait that may hang ("what" is static). */
    void (*busy_begin)(void *ctx, const char *what);
    void (*busy_end)(void *ctx);
} dl_nccl_host;

/* Loads libnccl.so.2 and a CUDA runtime, makes a communicator of every
 * rank of host (rank 0's ncclUniqueId is broadcast through host) on device
 * 0 of this process (CUDA_VISIBLE_DEVICES picks the GPU). host is copied.
 * Collective: every rank calls it. On failure returns a negative code with
 * why filled, and the ranks agree on the outcome (a rank that fails makes
 * all fail). */
int dl_nccl_open(dl_nccl **out, const dl_nccl_host *host, char *why, size_t size);
void dl_nccl_close(dl_nccl *n);
/* In-place sum / broadcast of device floats, waited for on return. The
 * caller has synchronised the backend's stream (its work is done). */
int dl_nccl_allreduce_sum(dl_nccl *n, float *p, size_t count);
int dl_nccl_bcast(dl_nccl *n, float *p, size_t count, int root);

#endif
