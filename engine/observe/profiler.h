/* profiler.h - per-op and per-layer timing aggregates and a bounded Chrome/Perfetto trace
 *
 * The trainer (dl_trainer_set_profiler) opens a span around each phase of
 * a step - data wait, input copy, forward, loss, backward, gradient norm,
 * optimizer - and the model's containers report every layer's forward and
 * backward through dl_pass.prof_hook. The profiler keeps:
 *   - aggregates per op (layer kind and direction, or phase) and per layer:
 *     calls, total and self milliseconds, FLOPs and bytes (estimates of
 *     compulsory traffic), from which mean, % of step, GFLOP/s and GB/s
 *     follow;
 *   - trace events for a Chrome/Perfetto trace: a ring of the last N steps
 *     by default, or the whole run (capped at max_events).
 * Times come from CLOCK_MONOTONIC on the CPU. On a device with timing
 * events (a GPU) phase spans record backend events and are resolved at the
 * end of the step, so no span forces a synchronisation; layer spans come
 * from nn.c, which synchronises around each layer while profiling.
 *
 * Cost: nothing when it is off. The recorders a step calls (dl_prof_*
 * below) are inline and test one field, so the trainer calls them
 * unconditionally; a trainer without a profiler holds dl_profiler_off(),
 * which never records. Not thread-safe: one trainer thread records;
 * readers take dl_profiler_rows on that thread (the telemetry copies them).
 */
#ifndef DL_PROFILER_H
#define DL_PROFILER_H

#include <stddef.h>
#include <stdio.h>

#include "engine/core/backend.h"
#include "engine/nn/nn.h"

typedef struct dl_profiler dl_profiler;

/* The first member of every dl_profiler: what the inline recorders read.
 * recording is 1 from dl_prof_step_begin of a sampled step to its end. */
typedef struct dl_prof_head {
    int recording;
} dl_prof_head;

/* Phases of a step. */
typedef enum {
    DL_PROF_DATA,    /* waiting for the loader's next batch */
    DL_PROF_COPY,    /* host-to-device copy and input conversion */
    DL_PROF_FORWARD, /* the whole model forward (layers nest inside) */
    DL_PROF_LOSS,
    DL_PROF_BACKWARD,  /* the whole model backward (layers nest inside) */
    DL_PROF_OPTIMIZER, /* gradient norm and clipping, update, low-precision refresh */
    DL_PROF_VALIDATION,
    DL_PROF_OTHER,
    DL_PROF_NCAT
} dl_prof_cat;

const char *dl_prof_cat_name(dl_prof_cat c); /* "data", "copy", "forward", ... */

typedef struct dl_profiler_options {
    int ring_steps;    /* steps kept in the trace ring (default 10) */
    int whole_run;     /* keep every step's events (up to max_events) */
    size_t max_events; /* hard bound on stored events (default 500000, ~32 MB) */
    int force_events;  /* time phases with backend events even on the CPU (tests) */
    int sample_every;  /* profile one optimizer step in this many (default 1: all);
                        * a live view samples to keep its cost near zero */
} dl_profiler_options;

void dl_profiler_options_default(dl_profiler_options *o);

/* Creates a disabled-until-attached profiler; opt may be NULL for the
 * defaults. Returns DL_ENOMEM on failure. */
int dl_profiler_create(dl_profiler **out, const dl_profiler_options *opt);
void dl_profiler_destroy(dl_profiler *p); /* accepts NULL and dl_profiler_off() */

/* The profiler that is always off: shared, never records, ignores
 * set_enabled and attach; destroy leaves it alone. A trainer holds it when
 * no profiler is attached, so its calls need no test for NULL. */
dl_profiler *dl_profiler_off(void);

/* Live on/off (any thread; takes effect at the next step). */
void dl_profiler_set_enabled(dl_profiler *p, int on);
int dl_profiler_enabled(const dl_profiler *p);
/* Whether optimizer step `step` (1-based) is to be profiled: enabled, and
 * one of every sample_every steps. */
int dl_profiler_wants_step(const dl_profiler *p, long step);

/* Learns the model's layer tree (names, kinds, shapes, FLOPs, parameter
 * counts) and the backend to time on. Called by dl_trainer_set_profiler;
 * call again after a device switch. Resets nothing already aggregated for
 * the same model. Returns DL_ENOMEM on failure. */
int dl_profiler_attach(dl_profiler *p, dl_model *m, dl_backend *be);

/* Clears aggregates and trace events (the layer table stays). */
void dl_profiler_reset(dl_profiler *p);

/* --- recording (trainer thread) ------------------------------------------------ */

/* Marks the start and end of optimizer step `step` (1-based). */
void dl_profiler_step_begin(dl_profiler *p, long step);
void dl_profiler_step_end(dl_profiler *p);
/* Ends a step that did no work (the epoch had no more batches): its time
 * is kept in the totals, but it does not count as a step. */
void dl_profiler_step_discard(dl_profiler *p);

/* A phase span: begin returns a token for end. name is a static string
 * ("optimizer step"); flops and bytes are what the span did. These record
 * unconditionally: a step calls them through dl_prof_begin/dl_prof_end
 * below, which skip them when the step is not recorded. */
typedef struct dl_prof_span {
    double t0_ms;
    int ev; /* backend event pair index, -1 when timed by the clock */
    int on; /* recorded (the dl_prof_* recorders): 0 makes dl_prof_end a no-op */
} dl_prof_span;
dl_prof_span dl_profiler_begin(dl_profiler *p);
void dl_profiler_end(dl_profiler *p, dl_prof_span s, dl_prof_cat cat, const char *name,
                     double flops, double bytes);

/* Arms a pass for per-layer timing (sets profile and prof_hook). */
void dl_profiler_arm_pass(dl_profiler *p, dl_pass *pass);

/* --- the recorders a step calls: inline, a no-op when not recording ---------- */

/* Starts optimizer step `step` (1-based): recorded when p wants it
 * (dl_profiler_wants_step). The step ends with dl_prof_step_end, or
 * dl_prof_step_discard when it did no work. */
void dl_prof_step_begin(dl_profiler *p, long step);

static inline int dl_prof_recording(const dl_profiler *p)
{
    return ((const dl_prof_head *)(const void *)p)->recording;
}

static inline dl_prof_span dl_prof_begin(dl_profiler *p)
{
    if (!dl_prof_recording(p))
        return (dl_prof_span){0, -1, 0};
    dl_prof_span s = dl_profiler_begin(p);
    s.on = 1;
    return s;
}

/* A span outside a step (validation between steps): recorded whenever p
 * is enabled. */
dl_prof_span dl_prof_begin_aside(dl_profiler *p);

static inline void dl_prof_end(dl_profiler *p, dl_prof_span s, dl_prof_cat cat, const char *name,
                               double flops, double bytes)
{
    if (s.on)
        dl_profiler_end(p, s, cat, name, flops, bytes);
}

static inline void dl_prof_arm_pass(dl_profiler *p, dl_pass *pass)
{
    if (dl_prof_recording(p))
        dl_profiler_arm_pass(p, pass);
}

static inline void dl_prof_step_end(dl_profiler *p)
{
    if (dl_prof_recording(p)) {
        dl_profiler_step_end(p);
        ((dl_prof_head *)(void *)p)->recording = 0;
    }
}

static inline void dl_prof_step_discard(dl_profiler *p)
{
    if (dl_prof_recording(p)) {
        dl_profiler_step_discard(p);
        ((dl_prof_head *)(void *)p)->recording = 0;
    }
}

/* --- results ---------------------------------------------------------------------- */

typedef enum { DL_PROF_BY_OP, DL_PROF_BY_LAYER } dl_prof_group;

typedef enum {
    DL_PROF_SORT_TOTAL, /* total time, descending (default) */
    DL_PROF_SORT_SELF,
    DL_PROF_SORT_CALLS,
    DL_PROF_SORT_MEAN,
    DL_PROF_SORT_FLOPS,
    DL_PROF_SORT_NAME,
    DL_PROF_SORT_NONE /* layer view: model order */
} dl_prof_sort;

/* "total", "self", "calls", "mean", "flops", "name", "none" -> key; -1 if unknown. */
int dl_prof_sort_parse(const char *key);

typedef struct dl_prof_row {
    char name[64]; /* op: "Linear.forward", "optimizer step"; layer: "fc1" */
    char kind[32]; /* layer kind ("Linear") or phase category ("optimizer") */
    dl_prof_cat cat;
    int depth; /* layer view: depth in the tree */
    long calls;
    double total_ms;       /* including nested layers (op view: a layer inside one of its
                              own kind counted once, in the outer one) */
    double self_ms;        /* excluding nested layers */
    double mean_ms;        /* the calls' summed time / calls */
    double pct_step;       /* self as % of the summed step time */
    double fwd_ms, bwd_ms; /* layer view */
    double flops;          /* summed over calls */
    double bytes;
    double gflops; /* flops / self time */
    double gbps;
} dl_prof_row;

typedef struct dl_prof_totals {
    long steps;     /* steps aggregated */
    double step_ms; /* summed step wall time */
    double mean_step_ms;
    double timed_ms;             /* summed self time of every row (excluding validation) */
    double untimed_ms;           /* step time outside any span */
    double flops;                /* forward + backward FLOPs of the layers */
    double achieved_flops_per_s; /* flops / step time */
    double data_ms;              /* time in DL_PROF_DATA */
    double leaf_calls_per_step;  /* leaf layer passes per step (launch-bound rule) */
    double mean_leaf_ms;
    long events_kept, events_dropped;
} dl_prof_totals;

void dl_profiler_totals(const dl_profiler *p, dl_prof_totals *out);

/* Fills up to max rows, sorted; returns how many there are in all (may
 * exceed max). The op view ends with an "untimed" row when steps left time
 * outside spans. */
int dl_profiler_rows(const dl_profiler *p, dl_prof_group g, dl_prof_sort sort, dl_prof_row *rows,
                     int max);

/* Prints the table (like torch.profiler's key_averages().table()) to f. */
void dl_profiler_print(const dl_profiler *p, dl_prof_group g, dl_prof_sort sort, int max_rows,
                       FILE *f);

/* Writes the kept events as a Chrome trace (JSON object format, loadable
 * in Perfetto and chrome://tracing) with the op table under "dlbench". The
 * file is written to PATH.tmp and renamed, so it is never left torn.
 * Returns DL_EIO with the path and reason on failure. */
int dl_profiler_write_trace(const dl_profiler *p, const char *path);

#endif
