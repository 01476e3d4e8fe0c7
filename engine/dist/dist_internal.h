/* dist_internal.h - what the MPI side of dl_comm and the NCCL loader share; not a public header */
#ifndef DL_DIST_INTERNAL_H
#define DL_DIST_INTERNAL_H

#include <stddef.h>

#include "engine/dist/comm.h"

typedef struct dl_nccl dl_nccl;

/* Loads libnccl.so.2 and a CUDA runtime, makes a communicator of every
 * rank of c (rank 0's ncclUniqueId is broadcast with MPI) on device 0 of
 * this process (CUDA_VISIBLE_DEVICES picks the GPU). Collective: every
 * rank calls it. On failure returns a negative code with why filled, and
 * the ranks agree on the outcome (a rank that fails makes all fail). */
int dl_nccl_open(dl_nccl **out, dl_comm *c, char *why, size_t size);
void dl_nccl_close(dl_nccl *n);
/* In-place sum / broadcast of device floats, waited for on return. The
 * caller has synchronised the backend's stream (its work is done). */
int dl_nccl_allreduce_sum(dl_nccl *n, float *p, size_t count);
int dl_nccl_bcast(dl_nccl *n, float *p, size_t count, int root);

/* The watchdog brackets of dist_mpi.c, for NCCL's waits too. */
void dl_comm_busy_begin(dl_comm *c, const char *what);
void dl_comm_busy_end(dl_comm *c);

#endif
