/* tune_impl.h - the study and trial structures shared by tune.c, tune_sampler.c and tune_pruner.c */
#ifndef DL_TUNE_IMPL_H
#define DL_TUNE_IMPL_H

#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#include "engine/tune/tune.h"

typedef struct tune_param {
    dl_tune_param p; /* name and choices point into the owned copies below */
    char *name;
    char **choices;
} tune_param;

struct dl_trial {
    dl_study *study;
    int number;
    dl_trial_state state;
    double value;
    tune_param *params;
    int nparams, cap_params;
    long *steps; /* intermediate values, kept sorted by step */
    double *ivals;
    int nint, cap_int;
    cJSON *attrs;   /* object of strings */
    cJSON *fixed;   /* queued parameters (array of param objects) or NULL */
    char host[64];
    long pid;
    unsigned long long pstart; /* the owner's start time in clock ticks (0: unknown) */
    double t_start, t_end;
    long grid_slot;  /* -1 when not a grid trial */
    int mine;        /* started by this handle */
    int rung_checked; /* ASHA: rungs already judged for this trial */
    int joint_done;   /* multivariate TPE: the joint draw was made */
    int njoint;
    int joint_ref;      /* the finished trial whose distributions the joint draw used */
    char **joint_names; /* parameters drawn jointly and their values */
    double *joint_values;
};

typedef struct tune_queued {
    cJSON *params; /* array of param objects */
    long grid_slot;
    int claimed;
} tune_queued;

struct dl_study {
    char name[128];
    char dir[1024]; /* "" in memory */
    int direction;
    dl_sampler_config sampler;
    dl_pruner_config pruner;
    uint64_t seed;
    int fd_journal, fd_lock;
    int locked;       /* flock held (LOCK_EX) */
    off_t read_off;   /* journal bytes applied */
    int created;      /* the "study" record has been seen */
    dl_trial **trials;
    int ntrials, cap_trials;
    tune_queued *queue;
    int nqueue, cap_queue;
    int budget;
    double hb_timeout;
    double last_hb;
    int skipped;
    long lines;         /* journal lines read (complete ones) */
    long first_skipped; /* the line number of the first skipped one (0: none) */
    char host[64];
    long pid;
    unsigned long long pstart;
};

/* The value of parameter dist for trial t, drawn by the study's sampler
 * from the history in s (tune_sampler.c). dist->value is ignored. */
int tune_sample(dl_study *s, dl_trial *t, const dl_tune_param *dist, double *value);

/* Number of grid points of a distribution under the study's grid config. */
long tune_grid_size(const dl_sampler_config *c, const dl_tune_param *dist);

/* 1 to prune, 0 to continue (tune_pruner.c). */
int tune_prune(dl_study *s, dl_trial *t);

/* Sign so that lower is better: value * sign. NaN maps to +inf. */
double tune_loss(const dl_study *s, double value);

/* Two distributions are the same (kind, bounds, log, choices). */
int tune_same_dist(const dl_tune_param *a, const dl_tune_param *b);

#endif
