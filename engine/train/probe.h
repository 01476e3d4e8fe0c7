/* probe.h - what-if probes between two steps: each variant trained for N steps from the same state, the state put back */
#ifndef DL_PROBE_H
#define DL_PROBE_H

#include "engine/core/backend.h"

typedef struct dl_trainer dl_trainer;

#define DL_PROBE_MAX 8

/* One variant the trainer can take in place: a learning-rate factor,
 * another CPU backend of `threads` workers (0: the trainer's own), or
 * another precision; or a projection from what the run measured so far
 * (validation every k epochs, early stopping), which runs no steps. */
typedef struct dl_probe_variant {
    char label[40];   /* "baseline", "lr x3", "threads 1", "bf16", "validate every 4" */
    char command[64]; /* the dlbench run arguments that apply it ("" baseline) */
    double lr_factor; /* 1: unchanged */
    int threads;      /* > 0: a CPU backend of its own with this many threads */
    int precision;    /* < 0: unchanged; else the dl_precision tried */
    int projected;    /* 1: not run; saves_s and note say what the run's figures project */
    double saves_s;   /* projected seconds saved over the rest of the run */
    char note[160];   /* the projection's figures */
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
 * the learning rate x0.3 and x3, on the CPU (with a devices table) a CPU
 * backend of 1 thread or of twice the threads, the other precision this
 * device computes natively (bf16 from fp32 only where the backend says
 * bf16 is native, never where it is emulated; fp32 from bf16 or fp16);
 * and, from the epochs so far, the projections: validation every k
 * epochs (when the run validates and epochs are left), early stopping
 * (when the validation loss has not improved for 3 validations). */
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
