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

typedef enum {
    DL_ADV_DIVERGENCE,      /* NaN/Inf or an exploding loss */
    DL_ADV_OOM,             /* an allocation failed */
    DL_ADV_INPUT_BOUND,     /* waiting for data */
    DL_ADV_LAUNCH_BOUND,    /* many short ops, GPU idle, no data wait */
    DL_ADV_OVERFITTING,     /* val loss rising while train loss falls */
    DL_ADV_PRECISION,       /* fp32 on a tensor-core GPU */
    DL_ADV_MEMORY_HEADROOM, /* GPU memory mostly free */
    DL_ADV_NKINDS
} dl_advice_kind;

typedef enum { DL_ADV_INFO, DL_ADV_WARNING, DL_ADV_CRITICAL } dl_advice_level;

typedef struct dl_advice {
    dl_advice_kind kind;
    dl_advice_level level;
    char title[48];     /* "input-bound" */
    char evidence[256]; /* "data wait is 62% of step time (31.0 of 50.0 ms), loader queue 0/4" */
    char remedy[256];   /* "more loader workers (now 0), in-memory mode, u8 storage" */
} dl_advice;

typedef struct dl_advisor_input {
    /* step timing (profiler or trainer); < 0 unknown */
    double step_ms;           /* mean step time */
    double data_wait_share;   /* [0, 1] of step time spent waiting for batches */
    double leaf_ops_per_step; /* layer passes per step */
    double mean_op_ms;        /* mean duration of a layer pass */
    /* loader; < 0 unknown */
    int workers;                /* loader worker threads (0: synchronous) */
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
    int overfit_epochs; /* epochs of rising val loss that count (0: 3) */
} dl_advisor_input;

/* Sets every figure to "unknown" (negative), the curves to none. */
void dl_advisor_input_init(dl_advisor_input *in);

/* Applies the rules; writes up to max advices, most severe first; returns
 * how many were written. */
int dl_advisor_run(const dl_advisor_input *in, dl_advice *out, int max);

/* "input-bound", "launch-bound", ... */
const char *dl_advice_name(dl_advice_kind k);

#endif
