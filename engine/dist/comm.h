/* comm.h - the ranks of a data-parallel job: MPI collectives, NCCL for GPU gradients, a watchdog
 *
 * dlbench links neither MPI nor NCCL. Under mpirun (or srun with Open MPI's
 * PMIx), dl_comm_create opens libmpi.so.40 (Open MPI) with dlopen and
 * resolves the handful of functions it uses; a GPU job opens libnccl.so.2
 * the same way, with MPI used only to hand every rank the NCCL unique id.
 * A plain `dlbench` never touches either library.
 *
 * Every collective here is blocking for the caller and must be called by
 * every rank in the same order with the same sizes. A watchdog thread ends
 * the whole job (MPI_Abort, with a message naming the rank and the
 * collective) when a collective makes no progress for timeout_s seconds:
 * a dead or hung rank fails the job instead of hanging it.
 *
 * Gradients: dl_comm_grad_* sum a float region across ranks. On the CPU
 * the region is cut into buckets from its end towards its start (the
 * order in which backward finishes layers); each bucket's MPI_Iallreduce
 * starts as soon as dl_comm_grad_ready says it is final, so communication
 * overlaps the rest of backward. On a GPU the sum goes through NCCL when it
 * loads, else through host copies and MPI.
 */
#ifndef DL_COMM_H
#define DL_COMM_H

#include <stddef.h>

#include "engine/core/backend.h"
#include "engine/train/reducer.h"

typedef struct dl_comm dl_comm;

typedef enum { DL_COMM_SUM, DL_COMM_MAX, DL_COMM_MIN } dl_comm_op;

/* Ranks in the job as the launcher's environment tells it (Open MPI's
 * OMPI_COMM_WORLD_SIZE, PMIx's PMIX_RANK with a size, Slurm's
 * SLURM_NTASKS under srun --mpi=pmix); 0 when not launched by one. Reads
 * the environment only. */
int dl_comm_launched(void);

typedef struct dl_comm_options {
    double timeout_s;    /* watchdog: seconds a collective may wait (<= 0: 300, or
                           $DLBENCH_COMM_TIMEOUT) */
    size_t bucket_bytes; /* gradient bucket size (0: 4 MiB, or $DLBENCH_COMM_BUCKET_KB;
                            a value of 0 KB there: no overlap, one all-reduce) */
} dl_comm_options;

/* Loads Open MPI, initialises it (MPI_Init_thread) and starts the
 * watchdog. Sets CUDA_VISIBLE_DEVICES to the local rank when several ranks
 * share a machine and it is unset, so each rank gets its own GPU. Returns
 * DL_ENODEV with a message saying what is missing (libmpi.so.40 not found,
 * a symbol missing) or DL_ERR when MPI fails; *out is NULL then. opt may
 * be NULL (defaults). */
int dl_comm_create(dl_comm **out, const dl_comm_options *opt);
/* Waits for every rank (barrier under the watchdog), then MPI_Finalize and
 * dlclose. Accepts NULL. */
void dl_comm_destroy(dl_comm *c);

int dl_comm_rank(const dl_comm *c);
int dl_comm_size(const dl_comm *c);
/* "MPI (Open MPI 4.1.4), 2 ranks" */
const char *dl_comm_describe(const dl_comm *c);

/* Ends every rank of the job now: prints "dlbench: rank R: msg" on stderr,
 * then MPI_Abort(code). Does not return. */
void dl_comm_abort(dl_comm *c, int code, const char *msg) __attribute__((noreturn));

/* Called once, from the watchdog thread, when this rank is about to end
 * abnormally (a collective timed out, or the launcher signalled the job
 * while this rank waited for the others): why says what happened. It may
 * write files (the run's summary); the training thread is blocked in MPI
 * meanwhile. */
void dl_comm_on_failure(dl_comm *c, void (*fn)(void *user, const char *why), void *user);
/* Async-signal-safe: the launcher is ending the job (SIGTERM, SIGINT). If
 * this rank is then waiting in a collective for more than half a second,
 * the watchdog reports a lost rank (stderr and the failure hook) and exits
 * with status 3; otherwise nothing happens here. */
void dl_comm_signal(dl_comm *c);

/* Host collectives on doubles and bytes (DL_ERR with a message on an MPI
 * error). */
int dl_comm_allreduce(dl_comm *c, double *buf, int n, dl_comm_op op);
int dl_comm_bcast(dl_comm *c, void *buf, size_t bytes, int root);
int dl_comm_barrier(dl_comm *c);

/* Broadcasts n floats of be's memory at p from root (device memory is
 * staged through the host, or sent by NCCL when loaded). */
int dl_comm_bcast_floats(dl_comm *c, dl_backend *be, float *p, size_t n, int root);

/* --- gradient sum, bucketed ------------------------------------------------- */

/* Plans the sum of the region p[0..n) of be's memory. cuts[0..ncuts) are
 * float offsets, ascending, where a bucket may start (parameter starts);
 * buckets are formed from the end of the region downwards, each at least
 * the bucket size. The plan is kept until the next call; it must be the
 * same on every rank. */
int dl_comm_grad_plan(dl_comm *c, dl_backend *be, float *p, size_t n, const size_t *cuts,
                      int ncuts);
/* Starts a step: nothing is in flight. */
void dl_comm_grad_begin(dl_comm *c);
/* Floats [from, n) of the region are final on this rank: starts the
 * buckets that lie inside and drives the ones in flight. Does nothing on
 * a GPU (no overlap there). */
int dl_comm_grad_ready(dl_comm *c, size_t from);
/* Starts what is left, waits for every bucket: the region then holds the
 * sum over ranks. */
int dl_comm_grad_finish(dl_comm *c);
/* Seconds spent in gradient communication since the last call (waiting
 * included; the overlapped part of Iallreduce is not counted), then
 * resets the counter. */
double dl_comm_take_seconds(dl_comm *c);
/* "mpi", "nccl" or "mpi via host" for the last planned region. */
const char *dl_comm_grad_path(const dl_comm *c);

/* --- the trainer's view -------------------------------------------------------- */

/* Fills *out with c as the reducer a trainer is handed
 * (dl_trainer_set_reducer): rank, size and every function over c, which
 * must outlive the trainer. */
void dl_comm_reducer(dl_comm *c, dl_reducer *out);

#endif
