/* views.h - the workbench's panes: each draws a snapshot into its window, nothing else
 *
 * A pane is a pure function of (snapshot, view state, window): it reads a
 * dl_snapshot copied by the main loop and the pane's own small state
 * (scroll, zoom, filter), and never reaches into the trainer, the monitor
 * or the files. Sampling (filling the snapshot) is the job of tui/ - the
 * live feed for a training in this process, the file follower for
 * `dlbench watch`. Drawing uses roles from tui/colors.h, never raw pairs.
 */
#ifndef DL_VIEWS_H
#define DL_VIEWS_H

#include <curses.h>

#include "engine/monitor.h"

#define DL_SNAP_POINTS 2048  /* step points kept (older ones thinned 2:1) */
#define DL_SNAP_EPOCHS 512
#define DL_SNAP_LOG 256
#define DL_SNAP_PROF 48
#define DL_SNAP_HIST 120     /* sparkline samples */
#define DL_SNAP_RUNS 200

typedef struct dl_snap_point {
    long step;
    float loss, acc;         /* acc < 0: none */
} dl_snap_point;

typedef struct dl_snap_epoch {
    long step;
    int epoch;               /* 1-based */
    float train_loss, train_acc, val_loss, val_acc; /* NaN: none */
} dl_snap_epoch;

typedef struct dl_snap_line {
    char kind[16];           /* "note", "error", "print", ... */
    char text[240];
    char when[12];           /* "12:03:44" */
} dl_snap_line;

typedef struct dl_snap_prof {
    char name[40];
    long calls;
    double total_ms, mean_ms, pct, gflops;
} dl_snap_prof;

typedef struct dl_snap_run {
    char folder[96];
    char name[40];
    char status[12];
    char device[8];
    long steps;
    double val_acc, val_loss, wall_s; /* NaN: none */
} dl_snap_run;

typedef enum {
    DL_STATE_READY,          /* script loaded, training not started */
    DL_STATE_RUNNING,
    DL_STATE_PAUSED,
    DL_STATE_STOPPING,
    DL_STATE_FINISHED,
    DL_STATE_STOPPED,
    DL_STATE_FAILED,
    DL_STATE_WATCHING        /* watch: state unknown yet */
} dl_run_state;

typedef struct dl_snapshot {
    /* status */
    char source[16];         /* "workbench", "watch" */
    char script[256];
    char run_name[64];
    char run_dir[1024];
    char device[16], precision[8];
    char message[256];       /* the last thing worth telling (status bar) */
    dl_run_state state;
    int live;                /* watch: the run has a control socket */
    int epoch, epochs;       /* epoch 1-based */
    long step, total_steps, steps_per_epoch;
    double samples_per_s, samples_per_s_before; /* before: prior to the last device switch */
    char switched_from[16];
    double lr, elapsed_s, eta_s; /* eta < 0: unknown */
    int batch;               /* samples per optimizer step (batch x accumulate) */
    double data_wait;        /* share of wall time waiting for batches, [0,1] */
    double cost_per_hour;    /* <= 0: unknown */
    /* series */
    dl_snap_point pts[DL_SNAP_POINTS];
    int npts;
    dl_snap_epoch ep[DL_SNAP_EPOCHS];
    int nep;
    /* system */
    int have_sys;
    dl_sys_sample sys;
    char gpu_status[160];
    float hist_cpu[DL_SNAP_HIST];   /* cpu total %, oldest first */
    float hist_sps[DL_SNAP_HIST];   /* samples/s */
    int nhist_cpu, nhist_sps;
    /* profile */
    dl_snap_prof prof[DL_SNAP_PROF];
    int nprof;
    double prof_step_ms;
    char prof_note[96];      /* why there is no table */
    /* log (ring: the newest last) */
    dl_snap_line log[DL_SNAP_LOG];
    int nlog;
    long log_total;          /* lines ever added: views notice new ones */
    /* runs screen */
    dl_snap_run runs[DL_SNAP_RUNS];
    int nruns;
    char runs_dir[256];
} dl_snapshot;

/* Per-pane view state owned by the app (scroll, zoom, filter). */
typedef struct dl_view_state {
    int focused;
    int log_scale;           /* chart: log-scale the loss axis */
    long window;             /* chart: last N steps (0: all) */
    int scroll;              /* tables, log: rows scrolled from the top/bottom */
    char filter[64];         /* tables: substring filter */
} dl_view_state;

/* --- panes: draw into w (already sized); the title is the pane's name ---- */
void dl_view_status(WINDOW *w, const dl_snapshot *s);
void dl_view_hints(WINDOW *w, const char *const *keys, int nkeys, const char *prompt);
void dl_view_chart(WINDOW *w, const dl_snapshot *s, const dl_view_state *v);
void dl_view_system(WINDOW *w, const dl_snapshot *s, const dl_view_state *v);
void dl_view_profile(WINDOW *w, const dl_snapshot *s, const dl_view_state *v);
void dl_view_log(WINDOW *w, const dl_snapshot *s, const dl_view_state *v);
void dl_view_runs(WINDOW *w, const dl_snapshot *s, const dl_view_state *v);
void dl_view_help(WINDOW *w, const dl_view_state *v, int watching);
/* The too-small message, centred. */
void dl_view_too_small(WINDOW *w, int need_cols, int need_rows);

/* --- shared drawing helpers (views/draw.c) --------------------------------- */
/* A border with " title " at the top left (focus highlights it). */
void dl_draw_frame(WINDOW *w, const char *title, int focused);
/* Text at (y, x) clipped to the window's width minus right margin. */
void dl_draw_text(WINDOW *w, int y, int x, int role, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* A horizontal meter [|||||   ] 42% of width cells at (y, x). */
void dl_draw_meter(WINDOW *w, int y, int x, int width, double pct);
/* A sparkline of n values scaled to [0, max] (max <= 0: their maximum). */
void dl_draw_spark(WINDOW *w, int y, int x, int width, const float *v, int n, double max,
                   int role);
/* Human units: "1.2k", "35M". */
void dl_fmt_si(char *buf, int size, double v);
/* "1h02m", "3m05s", "12s", "-" for negative. */
void dl_fmt_duration(char *buf, int size, double s);
const char *dl_state_name(dl_run_state st);

#endif
