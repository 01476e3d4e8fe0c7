/* tune_study.h - the study and trial structures, and the trials in memory (tune_trial.c)
 *
 * Shared by tune_trial.c (trials in memory, their readers, the history
 * view), tune_journal.c (records <-> these structures) and tune.c (the
 * study API). Samplers and pruners never see them: they get a
 * dl_tune_history.
 */
#ifndef DL_TUNE_STUDY_H
#define DL_TUNE_STUDY_H

#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#include "engine/tune/tune.h"

struct dl_trial {
    dl_study *study;
    int number;
    dl_trial_state state;
    double value;
    dl_tune_param *params; /* name and choices are the trial's own copies */
    int nparams, cap_params;
    long *steps; /* intermediate values, kept sorted by step */
    double *ivals;
    int nint, cap_int;
    cJSON *attrs; /* object of strings */
    cJSON *fixed; /* queued parameters (array of param objects) or NULL */
    char host[64];
    long pid;
    unsigned long long pstart; /* the owner's start time in clock ticks (0: unknown) */
    double t_start, t_end;
    long grid_slot;      /* -1 when not a grid trial */
    int mine;            /* started by this handle */
    int rung_checked;    /* ASHA: rungs already passed by this trial */
    dl_tune_joint joint; /* multivariate TPE: the parameters drawn jointly */
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
    int locked;     /* flock held (LOCK_EX) */
    off_t read_off; /* journal bytes applied */
    int created;    /* the "study" record has been seen */
    dl_trial **trials;
    int ntrials, cap_trials;
    tune_queued *queue;
    int nqueue, cap_queue;
    dl_tune_entry *hist; /* hist[i] views trials[i]; capacity cap_trials */
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

/* --- trials in memory (tune_trial.c) --------------------------------------------- */

/* Appends trial `number` (== s->ntrials), running, to s. NULL when out of
 * memory. The trial is the study's (freed by dl_tune_trial_free). */
dl_trial *dl_tune_trial_add(dl_study *s, int number);

/* Frees a trial; accepts NULL. */
void dl_tune_trial_free(dl_trial *t);

/* Trial number of s, or NULL. */
dl_trial *dl_tune_trial_get(dl_study *s, int number);

/* Adds a copy of dist (name and choices copied) with value to t. DL_ENOMEM. */
int dl_tune_trial_add_param(dl_trial *t, const dl_tune_param *dist, double value);

/* Records value at step, kept in step order; a step again replaces its value. DL_ENOMEM. */
int dl_tune_trial_set_intermediate(dl_trial *t, long step, double value);

/* Sets string attribute key (replacing it). -1 when t has no attribute object. */
int dl_tune_trial_set_attr(dl_trial *t, const char *key, const char *value);

/* Refreshes t's entry in the study's history after t changed. */
void dl_tune_trial_sync(dl_study *s, const dl_trial *t);

/* The history of s for a sampler or pruner: valid until s changes. */
void dl_tune_trial_history(const dl_study *s, dl_tune_history *h);

#endif
