/* script.h - experiment scripts: run a Lua script, resolve its hyperparameters, describe the experiment in C
 *
 * A script describes; C trains. dl_script_load runs the script once (under
 * an instruction limit) and turns what it returned - dl.experiment{...} or
 * dl.study{...} - into a dl_experiment: plain C values the session builds a
 * model, sources and a trainer from. The Lua state stays open for the
 * script's own callbacks (custom on_step / on_epoch / on_validation hooks),
 * which dl_script_call_* run on the thread that loaded the script.
 */
#ifndef DL_SCRIPT_H
#define DL_SCRIPT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/data/data.h"
#include "engine/data/open.h"
#include "engine/nn/nn.h"
#include "engine/nn/optim.h"
#include "engine/train/trainer.h"

typedef struct dl_script dl_script;
struct dl_trial; /* engine/tune/tune.h */

/* A resolved hyperparameter (dl.hparams): its final value after overrides. */
typedef enum { DL_HP_NUMBER, DL_HP_INTEGER, DL_HP_BOOLEAN, DL_HP_STRING } dl_hp_type;
typedef struct dl_hparam {
    char name[64];
    dl_hp_type type;
    double num;     /* number, integer (exact below 2^53) and boolean (0/1) */
    char str[256];  /* string */
    int overridden; /* set from a k=v override */
} dl_hparam;

/* What dl.data.* described (engine/data/open.h); opened by dl_script_open_data. */

typedef enum { DL_CB_EARLY_STOPPING, DL_CB_CHECKPOINT, DL_CB_LUA } dl_cb_kind;
typedef struct dl_cb_spec {
    dl_cb_kind kind;
    char monitor[48]; /* early stopping, checkpoint "best" */
    int mode_max;     /* the monitored metric improves upwards */
    int patience;
    double min_delta;
    long every_steps;                        /* checkpoint: every N steps (0: not by steps) */
    int every_epochs;                        /* checkpoint: every N epochs (0: not by epochs) */
    int save_best;                           /* checkpoint when the monitored metric improves */
    int ref_step, ref_epoch, ref_validation; /* Lua registry refs (LUA_NOREF) */
    char name[48];
} dl_cb_spec;

#define DL_MAX_CALLBACKS 16
#define DL_MAX_TRIAL_PARAMS 32

/* What dl.study{...} said (is_study): the tuner's settings. */
typedef struct dl_study_spec {
    char name[64];
    char metric[48]; /* val_loss, val_acc, train_loss, train_acc */
    int maximize;
    char sampler[24]; /* as dl_tune_sampler_parse reads it */
    char pruner[24];  /* as dl_tune_pruner_parse reads it */
    int trials;       /* the study's total budget */
    long long seed;   /* the sampler's seed */
} dl_study_spec;

/* What dl.from_run("RUN", {...}) said: the experiment's init. */
#define DL_MAX_EXCLUDE 32
typedef struct dl_init_spec {
    int set;                          /* the experiment has init = dl.from_run(...) */
    char run[1024];                   /* a run folder, its name or a unique part of it */
    char checkpoint[128];             /* "best", "last" or a checkpoint(NAME) name */
    char exclude[DL_MAX_EXCLUDE][64]; /* layer names ("Linear4") or tensor names */
    int nexclude;
} dl_init_spec;

typedef struct dl_experiment {
    char name[64];
    int is_study;
    dl_layer *model;       /* owned until dl_script_take_model */
    char model_text[4096]; /* the layer tree as written ("Sequential(...)") */
    dl_loss loss;
    dl_optim optim;
    dl_schedule schedule;
    dl_trainer_config cfg; /* epochs, batch, accumulate, precision, seed, ... */
    int seed_set;          /* the script named a seed */
    char device[16];       /* "cpu", "cuda", "auto" */
    dl_data_desc data;
    dl_cb_spec cb[DL_MAX_CALLBACKS];
    int ncb;
    dl_init_spec init; /* init = dl.from_run(...): parameters and buffers from a run */
    dl_hparam *hp;     /* sorted by name */
    int nhp;
    /* a study (is_study): its settings, and - once the objective ran - the
     * parameters the trial suggested, in suggestion order (float: NUMBER,
     * int: INTEGER, choice: STRING holding the choice's text) */
    dl_study_spec study;
    dl_hparam trial_params[DL_MAX_TRIAL_PARAMS];
    int ntrial_params;
    int trial_number; /* -1: a fixed trial (parameters from k=v) */
} dl_experiment;

typedef struct dl_script_options {
    const char *path;
    char *const *overrides; /* "k=v" strings */
    int noverrides;
    long instruction_limit; /* for describing; 0: a default of 200 million */
} dl_script_options;

/* Runs the script and resolves what it returned. On error returns DL_EINVAL
 * (bad script, bad override, wrong binding argument: the message has the
 * file:line and, for runtime errors, a traceback) and *out is NULL. */
int dl_script_load(dl_script **out, const dl_script_options *opt);
/* The same for a script that may return dl.study{...} (dl_script_load is
 * this with trial NULL, study_only 0). study_only: read the study's
 * settings (exp.study) and leave the experiment empty (model NULL).
 * Otherwise the objective is called once with a trial object and the
 * dl.experiment it returns is the experiment: trial is a trial of an open
 * study (dlbench tune); NULL makes a fixed trial whose values are the k=v
 * overrides (dlbench run SCRIPT lr=0.01 ...: a parameter without one is an
 * error that says how to tune the script or give the values). */
int dl_script_load_study(dl_script **out, const dl_script_options *opt, struct dl_trial *trial,
                         int study_only);
void dl_script_destroy(dl_script *s); /* accepts NULL */

dl_experiment *dl_script_experiment(dl_script *s);
const char *dl_script_path(const dl_script *s);
/* 1 when the study objective's trial was told by trial:should_prune()
 * that it should stop (the script may then stop the run itself). */
int dl_script_trial_prune_said(const dl_script *s);
/* Hands the model's root layer to the caller (who then owns it). */
dl_layer *dl_script_take_model(dl_script *s);

/* Opens the sources the experiment's data spec describes. val may come
 * back NULL (no validation split). The datasets they read stay owned by the
 * script. fingerprint receives a text identifying the data (file sizes and
 * hashes, or the generator's parameters). be: for pinned batch buffers. */
int dl_script_open_data(dl_script *s, int batch, uint64_t seed, dl_backend *be, dl_source **train,
                        dl_source **val, char *fingerprint, size_t fp_size);

/* What a Lua callback may do to the run, and what it can read. */
typedef struct dl_script_run {
    dl_trainer *trainer;
    long step;
    int epoch;
    const char *const *names; /* metric names and values */
    const double *values;
    int nmetrics;
    /* out: filled by the callback */
    int stop; /* the callback asked to stop */
    char stop_reason[128];
    void (*note)(void *user, const char *text); /* run:note("...") */
    void *user;
} dl_script_run;

typedef enum { DL_HOOK_STEP, DL_HOOK_EPOCH, DL_HOOK_VALIDATION } dl_hook;

/* Calls the script's callbacks of one kind. Returns DL_OK, or DL_EINVAL
 * with the Lua error (file:line and traceback) when a callback failed or
 * ran past its instruction budget. */
int dl_script_call_hooks(dl_script *s, dl_hook hook, dl_script_run *run);
int dl_script_has_hooks(const dl_script *s, dl_hook hook);

/* Stops any running Lua code at its next instruction check (safe to call
 * from a signal handler: it only sets a flag the count hook reads). */
void dl_script_interrupt(void);
void dl_script_clear_interrupt(void);

/* Runs a plain Lua file (a test script, not an experiment) with `require
 * "dlbench"` available and two globals: test(name, fn) runs fn protected
 * and prints "PASS file:name" or "FAIL file:name: error"; expect_error(
 * fragment, fn, ...) calls fn(...) and raises unless it fails with a
 * message containing fragment. Adds the counts to *passed and *failed; a
 * file that fails outside a test counts as one failure (message printed). */
int dl_script_run_tests(const char *path, int *passed, int *failed);

#endif
