/* tune_study.h - the study and trial structures behind the study API (samplers and pruners never see them) */
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
    cJSON *attrs;   /* object of strings */
    cJSON *fixed;   /* queued parameters (array of param objects) or NULL */
    char host[64];
    long pid;
    unsigned long long pstart; /* the owner's start time in clock ticks (0: unknown) */
    double t_start, t_end;
    long grid_slot;  /* -1 when not a grid trial */
    int mine;        /* started by this handle */
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
    int locked;       /* flock held (LOCK_EX) */
    off_t read_off;   /* journal bytes applied */
    int created;      /* the "study" record has been seen */
    dl_trial **trials;
    int ntrials, cap_trials;
    tune_queued *queue;
    int nqueue, cap_queue;
    dl_tune_entry *hist; /* the history handed to samplers and pruners, rebuilt each time */
    int cap_hist;
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

#endif
