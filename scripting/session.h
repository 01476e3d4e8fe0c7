/* session.h - one training run from a script: model, data, trainer, run folder, callbacks, checkpoints
 *
 * dl_session_prepare does everything that can reject bad input before
 * training starts, one step after the other: a fresh start or a resume,
 * the script (errors, overrides), the device, the data, the model and its
 * trainer (layer shapes), the config and the duplicate guard; only then
 * does it create the run folder (or reopen the resumed one). dl_session_run
 * trains on the calling thread (which owns the Lua state) and writes the
 * summary. Used by `dlbench run`, `dlbench tune`, the workbench and, with
 * profile_steps and without a run folder, `dlbench profile`.
 */
#ifndef DL_SESSION_H
#define DL_SESSION_H

#include "engine/train/trainer.h"

typedef struct dl_session dl_session;

typedef struct dl_session_options {
    const char *script;     /* NULL with resume: the run's own copy */
    char *const *overrides; /* "k=v" */
    int noverrides;
    char *const *sets; /* "FIELD=VALUE" (--set): the experiment's own fields */
    int nsets;
    const char *device;  /* NULL: the script's choice */
    long long seed;      /* < 0: the script's */
    const char *out_dir; /* parent of run folders ("runs") */
    const char *resume;  /* a run to continue, or NULL */
    int force;           /* run even when a finished run has the same config */
    long stop_after;     /* > 0: stop cleanly (checkpoint, "stopped") after N steps */
    /* data parallel: this process is rank `rank` of `ranks` (0 and 0 or 1
     * alone); ranks other than 0 write no run folder, checkpoint or summary */
    int rank, ranks;
    /* progress sinks (may be NULL), called on the training thread */
    void *user;
    void (*on_step)(void *user, const dl_step_info *info);
    void (*on_epoch)(void *user, const dl_epoch_info *info);
    void (*on_event)(void *user, const char *kind, const char *text);
    /* between steps and while paused, on the training thread (the Lua prompt) */
    void (*on_idle)(void *user);
    /* a trial of an open study (dlbench tune): the script's study objective
     * is called with it, the study's metric is reported to it after every
     * epoch and a trial the pruner stops ends "stopped" (dl_session_pruned);
     * config.json records the study and trial. NULL for a plain run. */
    struct dl_trial *trial;
    /* where the run publishes what a screen or report draws (NULL: nothing):
     * the run description, steps, epochs, events and states, loader
     * statistics, the model's FLOPs and the device's peak (a short gemm
     * calibration on the CPU, a table on GPUs). With it, summary.json gets
     * a "cost" object (MFU, price, cost so far, energy). Borrowed. */
    struct dl_telemetry *telemetry;
    double price_per_hour; /* > 0: money figures in the telemetry and summary */
    /* --target METRIC=VALUE: after each epoch the time (and cost) to reach
     * it is projected from the curve so far (an event "target", a warning
     * once when the planned epochs will not reach it, summary.json's
     * "target"); target_metric "" for none */
    char target_metric[32];
    double target_value;
    /* prepared for dl_session_check_parity only: no duplicate guard, no run
     * folder (and nothing written); not with resume */
    int parity;
    /* > 0: prepared for `dlbench profile`: the script must be an experiment
     * (a study that needs a trial is DL_EUNSUPPORTED), the trainer runs
     * exactly this many steps (the epochs raised to hold them, every step
     * logged), the engine's own error comes back when the model cannot be
     * built, and there is no batch check, config, duplicate guard, run
     * folder, telemetry or session callback: the caller attaches its own
     * profiler and callbacks to dl_session_trainer and runs the trainer
     * itself (dl_session_run is not for this mode). Not with resume. */
    long profile_steps;
} dl_session_options;

/* Outcome of prepare beyond the status code. */
enum { DL_SESSION_READY = 0, DL_SESSION_DUPLICATE = 1 };

/* Prepares a run. Returns DL_SESSION_READY, DL_SESSION_DUPLICATE (a
 * finished run has the same config hash: *out is set so the caller can
 * report it via dl_session_duplicate, and no run folder was made), or a
 * negative code with dl_error set (DL_EINVAL, DL_ESHAPE, DL_ENODEV, DL_EIO:
 * bad input; others: failures). */
int dl_session_prepare(dl_session **out, const dl_session_options *opt);

typedef enum { DL_RUN_FINISHED, DL_RUN_STOPPED, DL_RUN_FAILED } dl_run_status;

/* Trains to the end, a stop or an error; writes the final checkpoint and
 * summary.json. */
dl_run_status dl_session_run(dl_session *s);
void dl_session_destroy(dl_session *s);

/* Signal-safe: asks the running session to stop at the next step boundary
 * (and any running Lua callback to return). */
void dl_session_interrupt(void);
int dl_session_interrupted(void);

/* Accessors for the caller's report. */
const char *dl_session_run_dir(const dl_session *s);   /* NULL before the folder exists */
const char *dl_session_duplicate(const dl_session *s); /* the finished twin's folder */
const char *dl_session_name(const dl_session *s);
const char *dl_session_device(const dl_session *s);
const char *dl_session_message(const dl_session *s); /* why it failed or stopped */
dl_trainer *dl_session_trainer(dl_session *s);
/* The experiment as the script and the --set values described it
 * (exp->cfg: the script's epochs and batch, before a profile raised them). */
const struct dl_experiment *dl_session_experiment(const dl_session *s);
/* The validation source (NULL without one). */
dl_source *dl_session_val_source(dl_session *s);
struct dl_script *dl_session_script(dl_session *s); /* the script's Lua state, for the prompt */
long dl_session_total_steps(const dl_session *s);
/* Optimizer steps per pass over the training set, as the trainer counts
 * them (0 before the trainer exists). */
long dl_session_steps_per_epoch(const dl_session *s);
double dl_session_wall_s(const dl_session *s);
double dl_session_samples_per_s(const dl_session *s);
/* 1 when the run was stopped because its trial was pruned. */
int dl_session_pruned(const dl_session *s);
/* The training data's loader statistics (queue fill, wait); 0 when the
 * source keeps none. */
int dl_session_loader_stats(dl_session *s, dl_loader_stats *out);
/* Final and best of a metric ("val_acc"); returns 0 when never seen. */
int dl_session_metric(const dl_session *s, const char *name, double *final, double *best);

/* Checks one --set FIELD=VALUE before a script is loaded: DL_OK, or
 * DL_EINVAL naming the field, the known fields or what the value takes. */
int dl_session_set_check(const char *kv);
/* 1 when FIELD of "FIELD=VALUE" is one of --set's fields (batch, precision,
 * epochs, lr, workers, val_every, early_stopping, ...), whatever VALUE is. */
int dl_session_set_field(const char *kv);

/* What --parity-device accepts: "cpu" (the process's CPU backend, 0),
 * "cuda" (1) or "cpu:T", a CPU backend of its own with T threads (2, T in
 * *threads); -1 for anything else. */
int dl_session_parity_device_parse(const char *text, int *threads);

/* The parity check of a prepared session (dl_trainer_check_parity): steps
 * from the current state on the run's device and on `device` (NULL: cuda
 * when the run is on the CPU, else cpu), each step's loss and the
 * parameters compared; afterwards the training is back where it was.
 * label gets the device compared with, as named. Errors: DL_EINVAL (a bad
 * device or steps), DL_ENODEV ("cannot check parity against cuda: no CUDA
 * driver ..."), and those of dl_trainer_check_parity. Release *r with
 * dl_parity_report_done, also after an error. */
int dl_session_check_parity(dl_session *s, const char *device, int steps, dl_parity_report *r,
                            char *label, size_t label_size);

#endif
