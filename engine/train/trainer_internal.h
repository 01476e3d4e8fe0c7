/* trainer_internal.h - the trainer's state and what its files share; not a public header
 *
 * The trainer's files, each using only those listed before it:
 *   state.c     the state: events, staging, statistics, accessors, cursor
 *   snapshot.c  the published status, state snapshots
 *   parallel.c  data parallelism through the dl_reducer it is handed
 *   step.c      one optimizer step, the reports, validation, epoch ends
 *   switch.c    the hot switch between backends
 *   parity.c    the parity check (steps on two backends)
 *   commands.c  the command queue, drained between steps
 *   trainer.c   create, destroy, and the run loop
 */
#ifndef DL_TRAINER_INTERNAL_H
#define DL_TRAINER_INTERNAL_H

#include <pthread.h>

#include "engine/train/trainer.h"

#define DL_TRAINER_QUEUE 64

typedef struct dl_trainer_command {
    dl_command_kind kind;
    double value;
    char text[256];
} dl_trainer_command;

/* What the epochs so far measured (dl_trainer.hist). */
typedef struct dl_trainer_hist {
    int epochs, nval;
    double train_s, val_s; /* summed: training (epoch less validation), validation */
    double best_val;       /* lowest validation loss, and the epoch (0-based) */
    int best_at, vals_since_best;
} dl_trainer_hist;

struct dl_trainer {
    dl_model *m;
    dl_loss loss;
    dl_optim opt;
    dl_schedule sched;
    dl_source *train, *val;
    dl_trainer_config cfg;
    dl_backend *be;
    dl_callbacks cb;
    dl_profiler *prof; /* borrowed; dl_profiler_off() when none is attached */

    /* progress */
    long step;
    int epoch;
    long epoch_step;
    int epoch_open;
    long steps_per_epoch, total_steps;
    float base_lr;
    double lr_now;
    float loss_scale;
    int clean_steps;
    long skipped;
    double grad_norm;
    /* the gradient check on the device (dl_guard_available, not fp16, not
     * data parallel): its cells in the stage, read at the next report */
    int guard_used;
    long guard_from; /* first step the cells' skip count covers */
    int lowp_dirty;
    uint64_t micro; /* micro-batches run: keys dropout */
    int tokens;     /* per-token cross-entropy: T of the [T, V] output; 0: per sample */

    /* device staging: raw x and targets in two slots used in turn (the
     * next batch's copy overlaps the step on the current one), then the
     * statistics (train window, eval, the gradient check) */
    dl_storage *stage;
    size_t x_bytes, y_bytes;
    size_t off_x[2], off_y[2], off_stats;
    int slot;               /* the slot the next upload takes */
    dl_event *slot_free[2]; /* recorded after a slot's last reader (to_device_after only) */
    int slot_armed[2];      /* slot_free[i] recorded since the stage was made */

    /* reporting window and epoch totals */
    long rep_samples, rep_steps;
    double rep_t0, rep_wait;
    double ep_loss, ep_correct;
    long ep_samples;
    double ep_t0;
    /* what the epochs so far measured, for the probes' projections
     * (validation every k epochs, early stopping); probes put it back */
    dl_trainer_hist hist;

    /* data parallel: dp is &red in a job of several ranks, NULL alone */
    const dl_reducer *dp;
    const dl_devices *devices; /* borrowed: where commands may move the training; NULL none */
    dl_reducer red;
    dl_source *shard; /* owned: this rank's slice of train, which it replaces */
    dl_source *whole; /* the source the trainer was given */
    double *sync;     /* [4 + ranks]: the report's all-reduce */
    double rep_comm;  /* all-reduce seconds in the window */

    /* commands */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    dl_trainer_command queue[DL_TRAINER_QUEUE];
    int nq;
    int paused, stop;
    dl_trainer_status pub; /* under lock: see dl_trainer_publish */
};

/* state.c */
/* An event to on_event (if any), the text formatted. */
void dl_trainer_event(dl_trainer *t, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The device statistics slot: 0 the training window, 1 evaluation; each
 * DL_TRAINER_NSTATS floats (loss sum, correct, and per token the count). */
#define DL_TRAINER_NSTATS 4
float *dl_trainer_stats(dl_trainer *t, int slot);
/* The 4 device floats of the gradient check (see grad_guard in backend.h). */
float *dl_trainer_guard_cells(dl_trainer *t);
/* Reads the gradient check's cells back (a no-op when it is not in use):
 * the last norm, and the steps it skipped since the last read, counted
 * and reported as an event, or the run's error under DL_NONFINITE_STOP.
 * Called where the host syncs anyway (a report) and before a move. */
int dl_trainer_fold_guard(dl_trainer *t);
/* (Re)allocates the staging area on be, carrying the statistics over. */
int dl_trainer_alloc_stage(dl_trainer *t, dl_backend *be);
/* Releases the staging area and its events. */
void dl_trainer_free_stage(dl_trainer *t);
/* The training window's loss and correct-count sums; consume: reset them.
 * Per token: the means over the kept tokens times the window's rows, so
 * that dividing by the rows gives the per-token figures. */
int dl_trainer_take_stats(dl_trainer *t, double *loss_sum, double *correct, int consume);
/* What a summed loss is divided by, besides the rows, to be per sample. */
double dl_trainer_per_sample(const dl_trainer *t);
/* A report is due: steps since the last one (alone: rows since; data
 * parallel: steps, which every rank counts alike). */
int dl_trainer_window_open(const dl_trainer *t);

/* snapshot.c */
/* Copies what other threads may read into t->pub; with t->lock held or
 * before any other thread knows t. */
void dl_trainer_publish_locked(dl_trainer *t);
void dl_trainer_publish(dl_trainer *t);

/* parallel.c (data parallel only: t->dp set) */
/* dl_pass grad_hook of the last micro-batch: layer l's gradients are final. */
int dl_trainer_grad_ready(void *user, const dl_layer *l);
/* The window's sums over ranks, each rank's throughput into t->sync. */
int dl_trainer_sync_report(dl_trainer *t, double *loss_sum, double *correct, double dt,
                           double *comm_s);
/* Between steps: the ranks agree on stop and pause (any rank's) and take
 * rank 0's learning rate. */
int dl_trainer_agree(dl_trainer *t, int *paused);

/* step.c */
/* Reports the window since the last report to on_step; stopped: the
 * window stays open (dl_step_info.stopped). */
int dl_trainer_report(dl_trainer *t, int stopped);
/* Closes the epoch: the last report, validation, on_epoch. */
int dl_trainer_end_epoch(dl_trainer *t);

/* commands.c */
/* Applies queued commands and on_idle; waits while paused (alone). */
int dl_trainer_drain(dl_trainer *t);
/* Sleeps until a command arrives, at most 100 ms. */
void dl_trainer_wait_command(dl_trainer *t);

#endif
