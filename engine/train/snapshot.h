/* snapshot.h - what the trainer publishes: step and epoch reports, its status for other threads, state snapshots
 *
 * The types here are what the observe layer and the workbench read of a
 * training; they need no trainer internals (engine/observe includes this
 * header, not trainer.h).
 */
#ifndef DL_SNAPSHOT_H
#define DL_SNAPSHOT_H

typedef struct dl_trainer dl_trainer;

/* What the trainer reports after a logged step. Losses are per sample. */
typedef struct dl_step_info {
    long step;       /* optimizer steps done */
    int epoch;       /* 0-based */
    long epoch_step; /* steps done in this epoch */
    long steps_per_epoch;
    double loss; /* mean training loss since the last report */
    double acc;  /* training accuracy since the last report (-1 if none) */
    double lr;
    double samples_per_s;
    double data_wait_share; /* time waiting for batches / wall time since last report */
    float loss_scale;       /* 1 unless f16 */
    long skipped_steps;     /* overflowed or non-finite steps skipped so far */
    double grad_norm;       /* last global gradient norm (unscaled) */
    /* data parallel (dl_trainer_set_reducer): loss, acc and samples_per_s
     * are the whole job's; ranks is 1 when training alone */
    int ranks;
    double comm_s;                    /* gradient all-reduce seconds per step, mean over ranks */
    double comm_share;                /* comm_s over the step time */
    const double *rank_samples_per_s; /* [ranks]: each rank's own rows/s (NULL alone) */
    /* A window cut short by a stop: reported so the stopped run shows its
     * last steps, but not consumed: the checkpoint keeps the window open
     * and a resume reports it whole (the run log drops this record then). */
    int stopped;
} dl_step_info;

typedef struct dl_epoch_info {
    int epoch;
    long step;
    double train_loss, train_acc;
    double val_loss, val_acc; /* NaN when there is no validation source or it was skipped */
    double seconds;
    double val_seconds; /* of seconds, the validation's (0 when none ran) */
} dl_epoch_info;

/* The trainer's state as of its last step boundary, for other threads
 * (the control socket's): the trainer's accessors read live fields that
 * only the training thread may read while it runs. */
typedef struct dl_trainer_status {
    long step;
    int epoch; /* 0-based */
    int paused, stopping;
    double lr;
    char device[16]; /* the backend's name */
} dl_trainer_status;
/* Copies the last published status into *out; any thread. */
void dl_trainer_status_get(dl_trainer *t, dl_trainer_status *out);

/* The whole training state at a step boundary, in host memory: the model's
 * state arena (parameters, gradients, optimizer moments, buffers such as
 * BatchNorm statistics, the low-precision copy), the cursor (step, epoch,
 * batch position, loss scale, schedule state, the open logging window). */
typedef struct dl_trainer_snapshot dl_trainer_snapshot;
/* Copies the current state into a new snapshot (*out, owned by the
 * caller). Call between steps. DL_ENOMEM when the host cannot hold it;
 * the training is untouched either way. */
int dl_trainer_snapshot_take(dl_trainer *t, dl_trainer_snapshot **out);
/* Puts a snapshot of this trainer back, on whichever backend the trainer
 * is on now; the next step restarts the epoch's batch order at the
 * snapshot's cursor, so the steps that follow are those that followed the
 * snapshot. Call between steps. */
int dl_trainer_snapshot_restore(dl_trainer *t, const dl_trainer_snapshot *snap);
void dl_trainer_snapshot_destroy(dl_trainer_snapshot *snap); /* accepts NULL */

#endif
