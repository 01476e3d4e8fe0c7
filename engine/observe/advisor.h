/* advisor.h - rules over a snapshot of numbers that name the bottleneck, its figures and the remedy
 *
 * The advisor is pure: it reads a dl_advisor_input (filled from the
 * profiler, the monitor, the loader statistics and the metric history -
 * dl_telemetry_advisor_input does it from a telemetry snapshot) and writes
 * advice. Unknown figures are negative and the rules that need them stay
 * silent. Each advice says what was seen, with the numbers, and what to do.
 */
#ifndef DL_ADVISOR_H
#define DL_ADVISOR_H

#include "engine/nn/nn.h"

#define DL_ADV_MAX_EPOCHS 512 /* epochs of curve the advisor reads */

typedef enum {
    DL_ADV_DIVERGENCE,      /* NaN/Inf or an exploding loss */
    DL_ADV_OOM,             /* an allocation failed */
    DL_ADV_INPUT_BOUND,     /* waiting for data */
    DL_ADV_LAUNCH_BOUND,    /* many short ops, GPU idle, no data wait */
    DL_ADV_OVERFITTING,     /* val loss rising while train loss falls */
    DL_ADV_PRECISION,       /* fp32 on a tensor-core GPU */
    DL_ADV_MEMORY_HEADROOM, /* GPU memory mostly free */
    DL_ADV_SMALL_BATCH,     /* most of a step outside the matrix products */
    DL_ADV_VALIDATION,      /* validation takes a large share of the wall time */
    DL_ADV_LEARNING_RATE,   /* the loss curve says the learning rate is far off */
    DL_ADV_PLATEAU,         /* validation accuracy flat for the last epochs: fewer epochs */
    DL_ADV_NKINDS
} dl_advice_kind;

typedef enum { DL_ADV_INFO, DL_ADV_WARNING, DL_ADV_CRITICAL } dl_advice_level;

#define DL_ADV_MAX_NUMBERS 12

/* One figure of an advice's evidence, by name ("best_epoch", 6). */
typedef struct dl_adv_number {
    char key[24];
    double value;
} dl_adv_number;

typedef struct dl_advice {
    dl_advice_kind kind;
    dl_advice_level level;
    char title[48];     /* "input-bound" */
    char evidence[256]; /* "data wait is 62% of step time (31.0 of 50.0 ms), loader queue 0/4" */
    char remedy[256];   /* "more loader workers (now 0), in-memory mode, u8 storage" */
    /* machine-readable: the evidence's figures, the effect expected from
     * the remedy (saves_s < 0: unknown; effect_basis "estimate" from the
     * figures, "measured" by a probe) and the arguments of dlbench run that
     * apply it ("--set batch=64 --set lr=0.002"; "" when none does) */
    dl_adv_number num[DL_ADV_MAX_NUMBERS];
    int nnum;
    double saves_s;
    char effect[160];
    char effect_basis[16];
    char command[160];
} dl_advice;

typedef struct dl_advisor_input {
    /* step timing (profiler or trainer); < 0 unknown */
    double step_ms;           /* mean step time */
    double data_wait_share;   /* [0, 1] of step time spent waiting for batches */
    double leaf_ops_per_step; /* layer passes per step */
    double mean_op_ms;        /* mean duration of a layer pass */
    /* loader; < 0 unknown */
    int workers;                /* loader worker threads (0: synchronous) */
    int cpu_cores;              /* cores of the machine; <= 0 unknown */
    int compute_threads;        /* CPU threads the training computes on; <= 0 unknown */
    int queue_fill, queue_size; /* ready batches at the last look */
    /* device */
    int on_gpu;                               /* training runs on a GPU */
    char gpu_name[64];                        /* "" unknown */
    double gpu_util_pct;                      /* < 0 unknown */
    double gpu_mem_used_mb, gpu_mem_total_mb; /* < 0 unknown */
    dl_precision precision;
    int batch;
    int accumulate;
    /* failures */
    int oom;            /* an allocation failed */
    char oom_text[160]; /* its message */
    int nonfinite;      /* NaN/Inf seen (loss or gradients) */
    long skipped_steps;
    double lr; /* < 0 unknown */
    /* curves: per-epoch losses (NaN where missing) and recent step losses */
    const double *train_loss, *val_loss;
    int nepochs;
    const double *step_loss;
    int nsteps;
    int overfit_epochs; /* unused: the overfitting rule reads a smoothed trend */
    /* per epoch (the same [nepochs] as the losses; NULL unknown): validation
     * accuracy (NaN where it did not run), wall seconds of the epoch and of
     * its validation */
    const double *val_acc, *epoch_s, *val_s;
    /* the whole run's step losses (for the learning-rate rule; NULL: use
     * step_loss) and their number */
    const double *all_step_loss;
    int nall_steps;
    /* where the step goes, from the profiler; < 0 unknown */
    double product_share; /* [0, 1] of step time inside Linear, Conv2d and attention */
    /* [0, 1] of step time that does not grow with the batch (the optimizer
     * phase: update, gradient norm, low-precision refresh; time outside
     * any span); < 0 unknown */
    double fixed_share;
    /* FLOP/s the products reach in this run, and the device's calibrated
     * (or table) peak; <= 0 unknown */
    double product_flops_per_s, peak_flops;
    /* the hardware's low precision: 1 native arithmetic, 0 emulated, -1 unknown */
    int bf16_native, f16_native;
    int adaptive_optim; /* 1 Adam/AdamW, 0 SGD, -1 unknown (learning-rate scaling) */
    double base_lr;     /* the optimizer's base rate; < 0 unknown */
    int epochs_planned; /* 0 unknown */
    int early_stopping; /* the run already has an early-stopping callback */
    int val_every;      /* validation every N epochs (0 or 1: each) */
    /* storage the telemetry fills the curves into (dl_telemetry_advisor_input) */
    double store[6][DL_ADV_MAX_EPOCHS];
} dl_advisor_input;

/* Sets every figure to "unknown" (negative), the curves to none. */
void dl_advisor_input_init(dl_advisor_input *in);

/* Applies the rules; writes up to max advices, most severe first; returns
 * how many were written. */
int dl_advisor_run(const dl_advisor_input *in, dl_advice *out, int max);

/* "input-bound", "launch-bound", ... */
const char *dl_advice_name(dl_advice_kind k);

/* The machine-readable form of an advice (a cJSON object, as summary.json
 * and events.log hold it): kind, level, title, evidence, numbers, effect,
 * command. The caller owns it; NULL when out of memory. */
struct cJSON *dl_advice_json(const dl_advice *a);

#endif
