/* session_internal.h - the session's state and shared helpers (private to scripting/session*.c)
 *
 * session.c prepares and runs; session_config.c builds config.json and its
 * hash; session_resume.c continues a run from its folder; session_hooks.c
 * holds the trainer callbacks (metrics, built-in and Lua callbacks,
 * checkpoints); session_telemetry.c publishes to the screen's store;
 * session_parity.c is the parity check.
 */
#ifndef DL_SESSION_INTERNAL_H
#define DL_SESSION_INTERNAL_H

#include <cjson/cJSON.h>

#include "engine/observe/telemetry.h"
#include "engine/rundir/runlog.h"
#include "scripting/script.h"
#include "scripting/session.h"

typedef enum { STOP_NONE, STOP_PLANNED, STOP_EXTERNAL } stop_kind;

/* A built-in callback's memory of its monitored metric. */
typedef struct cb_state {
    double best;
    int bad_epochs;
    int seen;
} cb_state;

struct dl_session {
    dl_session_options opt;
    dl_script *script;
    dl_experiment *exp;
    dl_backend *be;
    dl_source *train, *val;
    dl_model *model;
    dl_trainer *trainer;
    dl_runlog *log;
    cJSON *config;
    cJSON *summary;
    char **resume_ovs; /* a resume's overrides, read from its config.json (owned) */
    int resume_nov;
    char **resume_sets; /* and its --set values */
    int resume_nsets;
    char hash[65];
    char run_dir[1024];
    char duplicate[1024];
    char script_path[1100];
    char device[16];
    char message[1024];
    char fingerprint[1400];
    uint64_t seed;
    stop_kind stop;
    cb_state cbs[DL_MAX_CALLBACKS];
    long steps_at_start;
    int resumed;
    int pruned;            /* the study's pruner stopped this trial */
    dl_backend *parity_be; /* a cpu:T backend of a parity check (owned) */
    double wall_s, samples_per_s;
    char init_checkpoint[1200]; /* init = dl.from_run: the checkpoint read */
    char *init_report;          /* its loaded / skipped / new lines until logged (owned) */
    long init_step;             /* the step the checkpoint was taken at */
    /* --target: the metric's per-epoch history and the projection's state */
    double tgt_x[1024], tgt_y[1024], tgt_secs;
    int tgt_n, tgt_warned;
    cJSON *tgt_json; /* the last projection, for summary.json */
};

/* An event to events.log, the telemetry (with the state it implies) and
 * opt.on_event, whichever exist. */
void session_emit(dl_session *s, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Optimizer steps in one pass over train with `accumulate` micro-batches
 * a step, as the trainer counts them. */
long session_steps_per_epoch(dl_source *train, int accumulate);

/* session_init.c: init = dl.from_run(...) applied to the fresh model
 * (nothing on a resume): parameters and buffers by name and shape, the
 * excluded layers and the tensors the checkpoint lacks left as
 * initialised. Errors: the run or checkpoint cannot be had or read (its
 * loader's message), a shape that differs (DL_ESHAPE naming the tensor
 * and both shapes). */
int session_init_from_run(dl_session *s);
/* session_init.c: what session_init_from_run did, as "init" events
 * (events.log, stdout): the checkpoint, then loaded, skipped, new. */
void session_init_report(dl_session *s);
/* session_set.c: opt.sets applied to s->exp (after the script ran,
 * before the data opens). Errors: DL_EINVAL naming the set. */
int session_apply_sets(dl_session *s);

/* session_config.c: a float as the script wrote it (0.01, not
 * 0.00999999977648258). */
double session_f7(float v);
/* session_config.c: s->config (config.json) and s->hash (of the part that
 * decides the result). Errors: DL_EIO (the script cannot be read), DL_ENOMEM. */
int session_build_config(dl_session *s);

/* session_resume.c: finds the run, checks that no process holds it and
 * reads its script, overrides, seed and device (before the script loads).
 * Errors: those of dl_runlog_resolve / dl_runlog_check_free, DL_EINVAL
 * (no readable config.json), DL_ENOMEM. */
int session_resume_begin(dl_session *s);
/* session_resume.c: takes the run's lock, restores the checkpoint into the
 * built model and trainer (none yet: step 0), reopens the log and replays
 * the logged epochs into the built-in callbacks. Errors: those of the
 * lock, dl_checkpoint_load, dl_trainer_set_cursor and the reopen. */
int session_resume_finish(dl_session *s);

/* session_target.c: one finished epoch's metrics into the --target
 * projection (events "target" and a "warning" once); session_target_json
 * adds summary.json's "target" object. */
void session_target_epoch(dl_session *s, const dl_epoch_info *i, const char *const *names,
                          const double *values, int n);
void session_target_json(dl_session *s, cJSON *extra);

/* session_hooks.c: hands the session's callbacks to the trainer. */
void session_hooks_attach(dl_session *s);
/* session_hooks.c: RUN/checkpoint.h5 (a no-op without a run log). */
int session_save_checkpoint(dl_session *s, const char *why);

/* session_telemetry.c: what opt.telemetry shows, called only with one: the
 * run's description in state st, the device's peak for the MFU, the
 * loader's statistics. session_publish_prepared (a no-op without the
 * telemetry) publishes what a prepared run starts with;
 * session_cost_json adds summary.json's "cost" object. */
void session_publish_run(dl_session *s, dl_tele_state st);
void session_publish_peak(dl_session *s, dl_backend *be);
void session_publish_loader(dl_session *s);
void session_publish_prepared(dl_session *s);
void session_cost_json(dl_session *s, cJSON *extra);
/* session_telemetry.c: the advisor's findings at the end of the run, from
 * the telemetry: summary.json's "advice" array and one "advice" event each
 * (its JSON on the line). */
void session_advice_json(dl_session *s, cJSON *extra);

#endif
