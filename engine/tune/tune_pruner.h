/* tune_pruner.h - pruners: whether a running trial should stop, from a study's history */
#ifndef DL_TUNE_PRUNER_H
#define DL_TUNE_PRUNER_H

#include "engine/tune/tune_history.h"

enum { DL_PRUNER_NONE = 0, DL_PRUNER_MEDIAN = 1, DL_PRUNER_ASHA = 2 };

typedef struct dl_pruner_config {
    int kind;                    /* DL_PRUNER_* */
    long warmup_steps;           /* median: never prune before this step (0) */
    int min_trials;              /* median: completed trials needed first (5) */
    long min_resource;           /* ASHA: steps of the first rung (1) */
    int reduction_factor;        /* ASHA: eta, keep the best 1/eta per rung (4) */
    int min_early_stopping_rate; /* ASHA: s, first rung at min_resource*eta^s (0) */
} dl_pruner_config;

/* Defaults for a pruner kind (the values in the comments). */
dl_pruner_config dl_tune_pruner_defaults(int kind);

/* Parses "none", "median", "asha" (also "successive_halving", "sha") into
 * defaults for that kind. DL_EINVAL naming the accepted words otherwise. */
int dl_tune_pruner_parse(const char *name, dl_pruner_config *out);

/* 1 when pruner c says trial number `trial` of history h should stop now,
 * judged from its last reported step against the other trials' reports;
 * 0 to go on (also when it has reported nothing); DL_ENOMEM. *rungs is
 * the trial's count of ASHA rungs already passed, advanced as it passes
 * more (the caller keeps it per trial, starting at 0). */
int dl_tune_pruner_judge(const dl_pruner_config *c, const dl_tune_history *h, int trial,
                         int *rungs);

#endif
