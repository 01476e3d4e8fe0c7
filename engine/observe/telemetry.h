/* telemetry.h - what a run publishes for the workbench: metric series, profile, system, loader, events, cost
 *
 * One writer side, many readers. The trainer thread (and the monitor
 * thread, through dl_telemetry_monitor_sink) publish under a lock, briefly:
 * each call copies a few numbers. A reader (the TUI's main loop, once a
 * frame) copies the whole state into its own dl_telemetry_snapshot with
 * dl_telemetry_read and draws from that copy alone: views never touch the
 * engine, and slow drawing never slows training.
 *
 * `dlbench watch` fills the same structure from a run folder's records
 * with dl_telemetry_follow (a thin adapter over engine/rundir/follower.h,
 * which reads the files), so the views cannot tell a live run from a
 * watched one.
 *
 * Series use the names of metrics.jsonl: per step "loss", "acc", "lr",
 * "samples_per_s", "data_wait", "grad_norm", "loss_scale" (x = step); per
 * epoch "train_loss", "train_acc", "val_loss", "val_acc" (x = epoch, from 1).
 * A series keeps at most DL_TELE_POINTS points: when full, every other
 * point is dropped and later points are taken at half the rate, so a long
 * run still shows its whole curve.
 */
#ifndef DL_TELEMETRY_H
#define DL_TELEMETRY_H

#include "engine/observe/advisor.h"
#include "engine/observe/cost.h"
#include "engine/observe/monitor.h"
#include "engine/observe/profiler.h"
#include "engine/rundir/follower.h"
#include "engine/train/snapshot.h" /* dl_step_info, dl_epoch_info */

/* What the loader panel shows: the data source's counts (engine/data's
 * dl_loader_stats, copied over by whoever reads them: the session). */
typedef struct dl_tele_loader {
    double wait_s;     /* total time the consumer waited for batches */
    long batches;      /* batches handed out */
    double bytes_read; /* bytes read from storage */
    int queue_fill, queue_size;
} dl_tele_loader;

#define DL_TELE_MAX_SERIES 24
#define DL_TELE_POINTS 1024
#define DL_TELE_MAX_EVENTS 128
#define DL_TELE_MAX_ROWS 64
#define DL_TELE_SYS_SAMPLES 120 /* one minute at 2 Hz */

typedef enum {
    DL_TELE_IDLE, /* nothing published yet */
    DL_TELE_PREPARING,
    DL_TELE_RUNNING,
    DL_TELE_PAUSED,
    DL_TELE_FINISHED,
    DL_TELE_STOPPED,
    DL_TELE_FAILED
} dl_tele_state;

const char *dl_tele_state_name(dl_tele_state s); /* "running", ... */

/* The run as a whole: set once at start (dl_telemetry_set_run), progress
 * fields refreshed by dl_telemetry_step. */
typedef struct dl_tele_run {
    char name[64];
    char device[16];       /* "cpu", "cuda" */
    char device_desc[128]; /* the backend's description */
    char gpu_name[64];     /* "" on the CPU */
    char run_dir[1024];    /* "" for a profile or a test */
    dl_precision precision;
    char precision_name[8];                 /* its name, for the views: set by the telemetry */
    int batch, accumulate, epochs, workers; /* workers < 0 unknown */
    int compute_threads;                    /* CPU threads the training computes on; 0 unknown */
    long steps_per_epoch, total_steps;
    /* progress */
    dl_tele_state state;
    char message[256]; /* why it failed or stopped */
    long step;
    int epoch;        /* 0-based current epoch */
    double elapsed_s; /* wall time since start (frozen when done) */
    double samples_per_s, data_wait_share, lr, grad_norm;
    float loss_scale;
    long skipped_steps;
    int nonfinite, oom; /* failure flags the advisor reads */
    char oom_text[160];
    /* what the advisor needs to know of the set-up */
    int bf16_native, f16_native; /* the device's low precision: 1 native, -1 emulated, 0 unknown */
    int adaptive_optim;          /* 1 Adam/AdamW, -1 SGD, 0 unknown */
    double base_lr;              /* 0 unknown */
    int early_stopping;          /* an early-stopping callback is on */
    int val_every;               /* validation every N epochs (0, 1: each) */
} dl_tele_run;

typedef struct dl_tele_series {
    char name[32];
    int n;        /* points held */
    int stride;   /* 1 + points skipped between kept ones */
    long offered; /* points offered since the last decimation */
    double x[DL_TELE_POINTS], y[DL_TELE_POINTS];
} dl_tele_series;

typedef struct dl_tele_event {
    double t;      /* seconds since the run started (or unix time when watched) */
    char kind[16]; /* "device", "note", "error", "checkpoint", ... */
    char text[240];
    double wall; /* unix time it was published (watched: from events.log); 0 unknown */
} dl_tele_event;

/* Everything a view draws. Large (about 0.6 MB): allocate it once with
 * dl_telemetry_snapshot_create and refresh it with dl_telemetry_read. */
typedef struct dl_telemetry_snapshot {
    unsigned long seq; /* changes whenever anything was published */
    dl_tele_run run;

    int nseries;
    dl_tele_series series[DL_TELE_MAX_SERIES];

    /* profile (op and layer views, sorted by total time / model order) */
    int prof_enabled;
    dl_prof_totals prof;
    int nops, nlayers;
    dl_prof_row ops[DL_TELE_MAX_ROWS], layers[DL_TELE_MAX_ROWS];

    /* system: the last samples, oldest first */
    int nsys;
    dl_sys_sample sys[DL_TELE_SYS_SAMPLES];
    char gpu_status[512]; /* "NVML: 1 GPU (...)" or why there is no GPU data */

    /* loader */
    int have_loader;
    dl_tele_loader loader;

    /* events: the last DL_TELE_MAX_EVENTS, oldest first; total counts all */
    int nevents;
    long events_total;
    dl_tele_event events[DL_TELE_MAX_EVENTS];

    /* cost */
    double price_per_hour; /* 0: none */
    double peak_flops;     /* 0: unknown */
    char peak_source[64];  /* "sgemm calibration", "table: H100" */
    dl_cost cost;
} dl_telemetry_snapshot;

typedef struct dl_telemetry dl_telemetry;

int dl_telemetry_create(dl_telemetry **out); /* DL_ENOMEM */
void dl_telemetry_destroy(dl_telemetry *t);  /* accepts NULL */

/* --- writers (any thread; each holds the lock for a copy) ------------------------ */

/* Sets the run description; state becomes info->state, the clock starts
 * when the state first becomes RUNNING. */
void dl_telemetry_set_run(dl_telemetry *t, const dl_tele_run *info);
/* State changes; message may be NULL. FINISHED, STOPPED, FAILED freeze the clock. */
void dl_telemetry_set_state(dl_telemetry *t, dl_tele_state s, const char *message);
/* A logged step: progress fields and the per-step series. */
void dl_telemetry_step(dl_telemetry *t, const dl_step_info *info);
/* A finished epoch: the per-epoch series (val_* only when finite). */
void dl_telemetry_epoch(dl_telemetry *t, const dl_epoch_info *info);
/* Any other point of a named series (created on first use; ignored when
 * DL_TELE_MAX_SERIES are in use). */
void dl_telemetry_point(dl_telemetry *t, const char *series, double x, double y);
void dl_telemetry_event(dl_telemetry *t, const char *kind, const char *text);
/* Copies the profiler's rows and totals (call on the thread that records
 * into the profiler, e.g. from on_step). */
void dl_telemetry_profile(dl_telemetry *t, const dl_profiler *p);
void dl_telemetry_system(dl_telemetry *t, const dl_sys_sample *s);
void dl_telemetry_set_gpu_status(dl_telemetry *t, const char *text);
/* For dl_monitor_options.sink with user = the telemetry. */
void dl_telemetry_monitor_sink(void *telemetry, const dl_sys_sample *s);
void dl_telemetry_loader(dl_telemetry *t, const dl_tele_loader *s);
/* Failure flags for the advisor: an allocation failed (text: its message),
 * or non-finite values were met. */
void dl_telemetry_flag_oom(dl_telemetry *t, const char *text);
void dl_telemetry_flag_nonfinite(dl_telemetry *t);
/* Cost inputs: the price per hour (0: none), the device peak and where it
 * came from. dl_telemetry_read derives dl_cost from these and the run. */
void dl_telemetry_set_cost(dl_telemetry *t, double price_per_hour, double peak_flops,
                           const char *peak_source);
/* The model's forward FLOPs per sample (dl_model_flops): with no profiler
 * the cost's achieved FLOP/s are 3x this (forward + backward) per sample. */
void dl_telemetry_set_model_flops(dl_telemetry *t, double train_flops_per_sample);
/* Forgets the run (description, progress, series, profile, loader, events,
 * flags) for a new one in the same store; keeps the system samples, the
 * GPU status and the cost inputs. */
void dl_telemetry_reset(dl_telemetry *t);

/* --- readers ----------------------------------------------------------------------- */

dl_telemetry_snapshot *dl_telemetry_snapshot_create(void); /* NULL when out of memory */
void dl_telemetry_snapshot_destroy(dl_telemetry_snapshot *s);

/* Copies the state into s unless nothing changed since s->seq (returns 0
 * then, 1 after a copy). Computes elapsed time and the cost figures. */
int dl_telemetry_read(dl_telemetry *t, dl_telemetry_snapshot *s);

/* The series called name in s, or NULL. */
const dl_tele_series *dl_telemetry_series(const dl_telemetry_snapshot *s, const char *name);

/* Fills the advisor's input from a snapshot (its curves point into s). */
void dl_telemetry_advisor_input(const dl_telemetry_snapshot *s, dl_advisor_input *in);
/* dl_telemetry_advisor_input then dl_advisor_run. */
int dl_telemetry_advise(const dl_telemetry_snapshot *s, dl_advice *out, int max);

/* --- watching a run folder ---------------------------------------------------------- */

/* Where dl_telemetry_follow left off in each file (a dl_follower). Zero
 * it, set dir. */
typedef dl_follower dl_tele_follow;

/* Reads what was appended to the run folder since the last call
 * (dl_follower_poll) and publishes it into t (steps_per_epoch and
 * total_steps are inferred from the first epoch record when the config
 * does not say; unreadable and torn lines become warning events). Returns
 * DL_OK, or DL_EIO when dir is not a run folder (no config). */
int dl_telemetry_follow(dl_telemetry *t, dl_tele_follow *f);

#endif
