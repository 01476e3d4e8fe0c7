/* probe.h - what-if probes between two steps: each variant trained for N steps from the same state, the state put back */
#ifndef DL_PROBE_H
#define DL_PROBE_H

#include "engine/core/backend.h"

typedef struct dl_trainer dl_trainer;

#define DL_PROBE_MAX 8

/* One variant the trainer can take in place: a learning-rate factor, or
 * another CPU backend of `threads` workers (0: the trainer's own). */
typedef struct dl_probe_variant {
    char label[40];   /* "baseline", "lr x3", "threads 1" */
    char command[64]; /* the dlbench run arguments that apply it ("" baseline) */
    double lr_factor; /* 1: unchanged */
    int threads;      /* > 0: a CPU backend of its own with this many threads */
    /* measured */
    int steps;     /* steps run */
    double step_s; /* median step time */
    double loss;   /* mean training loss of the last half of the steps */
    int failed;
    char why[128];
} dl_probe_variant;

typedef struct dl_probe_report {
    long first_step;
    int n;
    dl_probe_variant v[DL_PROBE_MAX];
} dl_probe_report;

/* Fills r with the variants this trainer can probe in place: the baseline,
 * the learning rate x0.3 and x3, and on the CPU (with a devices table) a
 * CPU backend of 1 thread or of twice the threads. */
void dl_trainer_probe_variants(dl_trainer *t, dl_probe_report *r);

/* Runs each of r's variants for `steps` optimizer steps from the current
 * state (callbacks off; an epoch end on the way validates as in
 * dl_trainer_run), putting the state back after each (dl_trainer_snapshot):
 * afterwards the training is where it was, bit for bit, as if the probes
 * had not run. A variant that cannot run is marked failed with why.
 * Errors: DL_EINVAL (steps < 1), DL_EUNSUPPORTED (data parallel),
 * DL_ENOMEM (no host memory for the snapshot), or a failure to put the
 * state back. */
int dl_trainer_probe(dl_trainer *t, int steps, dl_probe_report *r);

#endif
