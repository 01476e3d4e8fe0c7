/* tune_history.h - what samplers and pruners see of a study: its trials, read-only
 *
 * A history is a view that tune.c builds from its study and hands to a
 * sampler (tune_sampler.h) or a pruner (tune_pruner.h): every trial in
 * number order with its state, final value, parameters (distribution and
 * value, in suggestion order) and intermediate values. Samplers and
 * pruners only read it; they never see the study, the journal or a lock.
 * Pointers in it belong to the study and stay valid for the call only.
 */
#ifndef DL_TUNE_HISTORY_H
#define DL_TUNE_HISTORY_H

enum { DL_STUDY_MINIMIZE = 0, DL_STUDY_MAXIMIZE = 1 };

typedef enum dl_trial_state {
    DL_TRIAL_RUNNING = 0,
    DL_TRIAL_COMPLETE = 1,
    DL_TRIAL_PRUNED = 2,
    DL_TRIAL_FAILED = 3
} dl_trial_state;

typedef enum dl_param_kind {
    DL_PARAM_FLOAT = 0,
    DL_PARAM_INT = 1,
    DL_PARAM_CHOICE = 2
} dl_param_kind;

/* One suggested parameter: its distribution and value. For a choice,
 * value is the index into choices. */
typedef struct dl_tune_param {
    const char *name;
    dl_param_kind kind;
    double lo, hi; /* float and int bounds, inclusive */
    int log;       /* sampled uniformly in log space */
    int n_choices;
    const char *const *choices;
    double value;
} dl_tune_param;

/* One trial as a sampler or pruner sees it. */
typedef struct dl_tune_entry {
    int number;
    dl_trial_state state;
    double value;                /* complete: the objective's; pruned: as told (by default the
                                    last report); else NaN */
    long grid_slot;              /* -1 when not a grid trial */
    const dl_tune_param *params; /* nparams, in suggestion order */
    int nparams;
    const long *steps; /* nint intermediate values, in step order */
    const double *values;
    int nint;
} dl_tune_entry;

typedef struct dl_tune_history {
    int direction;               /* DL_STUDY_MINIMIZE or DL_STUDY_MAXIMIZE */
    const dl_tune_entry *trials; /* in number order: trials[i].number == i */
    int ntrials;
} dl_tune_history;

/* value signed so that lower is better under direction; NaN (a diverged
 * trial) maps to +inf, the worst. */
double dl_tune_history_loss(int direction, double value);

/* 1 when a and b are the same distribution (kind, bounds, log, choices). */
int dl_tune_history_same_dist(const dl_tune_param *a, const dl_tune_param *b);

/* The parameter called name among params[0..n), or NULL. */
const dl_tune_param *dl_tune_history_find(const dl_tune_param *params, int n, const char *name);

/* 1 for a complete or pruned trial: the ones a sampler learns from. */
int dl_tune_history_finished(const dl_tune_entry *e);

#endif
