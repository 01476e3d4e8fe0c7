/* tune_sampler.h - samplers: a parameter's next value from a study's history
 *
 * A sampler is a pure function of (configuration, seed, history, trial
 * number, distribution): the same inputs give the same value, bit for bit,
 * in any process. Randomness comes from engine/base/rng.h keyed by (seed,
 * parameter name, trial number). The one state a sampler keeps is the
 * multivariate TPE's joint draw, made once per trial and handed back in
 * the trial's dl_tune_joint.
 */
#ifndef DL_TUNE_SAMPLER_H
#define DL_TUNE_SAMPLER_H

#include <stdint.h>

#include "engine/tune/tune_history.h"

enum { DL_SAMPLER_RANDOM = 0, DL_SAMPLER_GRID = 1, DL_SAMPLER_TPE = 2 };

typedef struct dl_sampler_config {
    int kind;            /* DL_SAMPLER_* */
    int n_startup;       /* TPE: random trials before the model (10) */
    int n_ei_candidates; /* TPE: candidates drawn from l(x) per parameter (24) */
    double gamma;        /* TPE: share of observations called good (0.1) */
    int gamma_max;       /* TPE: at most this many good observations (25) */
    double prior_weight; /* TPE: weight of the flat prior component (1.0) */
    int grid_points;     /* grid: points per float parameter, most per int (10) */
    int multivariate;    /* TPE: draw the parameters every finished trial shares
                            jointly, one kernel per trial over all of them (1) */
} dl_sampler_config;

/* Defaults for a sampler kind (the values in the comments). */
dl_sampler_config dl_tune_sampler_defaults(int kind);

/* Parses "tpe", "random", "grid" into defaults for that kind. DL_EINVAL
 * naming the accepted words otherwise. */
int dl_tune_sampler_parse(const char *name, dl_sampler_config *out);

/* A trial's multivariate TPE draw: the values of the parameters drawn
 * jointly, made on the trial's first suggestion. Zeroed by its owner (the
 * trial), filled by dl_tune_sampler_suggest, freed by
 * dl_tune_sampler_joint_done. */
typedef struct dl_tune_joint {
    int done;     /* the draw was tried (it may have drawn nothing) */
    int n;        /* parameters drawn */
    int ref;      /* the finished trial whose distributions it used */
    char **names; /* n owned names */
    double *values;
} dl_tune_joint;

/* Frees what a joint draw holds; the struct itself is the caller's. */
void dl_tune_sampler_joint_done(dl_tune_joint *j);

/* The value of parameter dist (dist->value ignored) for trial number
 * `trial` of history h (h->trials[trial], its parameters so far in order),
 * drawn by sampler c with the study's seed. joint is the trial's joint
 * draw, filled on first use. Returns DL_OK or DL_ENOMEM. */
int dl_tune_sampler_suggest(const dl_sampler_config *c, uint64_t seed, const dl_tune_history *h,
                            int trial, dl_tune_joint *joint, const dl_tune_param *dist,
                            double *value);

/* Number of grid points of a distribution under grid config c. */
long dl_tune_sampler_grid_size(const dl_sampler_config *c, const dl_tune_param *dist);

#endif
