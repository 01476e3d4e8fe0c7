/* views.h - the workbench's panes: each draws a snapshot into its window, nothing else
 *
 * A pane is a pure function of (screen, view state, window): it reads a
 * dl_screen - a dl_telemetry_snapshot (engine/observe/telemetry.h) copied by the
 * main loop plus the few things only the screen knows (runs table, trials,
 * advice) - and the pane's own small state (scroll, zoom, filter). It
 * never reaches into the trainer, the monitor or the files. Sampling is the
 * job of tui/: the session publishes into a dl_telemetry for a training in
 * this process, dl_telemetry_follow fills one from a run folder for
 * `dlbench watch`. Drawing uses roles from views/colors.h, never raw pairs.
 */
#ifndef DL_VIEWS_H
#define DL_VIEWS_H

#include <curses.h>

#include "engine/observe/telemetry.h"

#define DL_UI_TRIALS 512
#define DL_UI_PARAMS 8
#define DL_UI_ADVICE 3
#define DL_UI_SEL 12    /* runs selected at once on the runs screen: a colour each */
#define DL_UI_DIFF 40   /* rows of the compare table */
#define DL_UI_LINES 48  /* lines of a run's detail page */
#define DL_UI_SERIES 16 /* lines the overlay chart draws */

/* One row of the runs screen (a run folder's summary.json and config.json). */
typedef struct dl_ui_run {
    char folder[96];
    char name[40];
    char status[12];
    char device[8];
    long steps;
    double val_acc, val_loss, wall_s, cost; /* NaN: none */
    char hparams[200];                      /* "lr=0.05 hidden=64 seed=1" */
    char varying[200]; /* the words of hparams whose value is not the same in every row */
    char tags[96];     /* "best baseline": space-separated */
    int slot;          /* its selection slot (colour), -1: not selected */
} dl_ui_run;

/* A line of the overlay chart: x ascending, y raw (the view smooths);
 * lo/hi a min-max band around y (a group's mean), NULL for none. The
 * arrays belong to tui/ and live until its next sample. */
typedef struct dl_ui_series {
    char label[64];
    int slot; /* colour and mark (dl_color_run); -1: dim */
    int n;
    const double *x, *y, *lo, *hi;
} dl_ui_series;

typedef enum { DL_UI_TABLE, DL_UI_DETAIL, DL_UI_COMPARE } dl_ui_runs_mode;
typedef enum { DL_X_STEP, DL_X_EPOCH, DL_X_SAMPLES, DL_X_WALL, DL_X_NAXES } dl_ui_xaxis;

/* A row of the compare table: one hyperparameter or final metric that is
 * not the same in every compared run. */
typedef struct dl_ui_diff {
    char key[40];
    int metric;               /* 0: a hyperparameter, 1: a final metric */
    char text[DL_UI_SEL][24]; /* per column; "-" when the run has none */
    double num[DL_UI_SEL];    /* NaN when not a number */
} dl_ui_diff;

/* The runs screen (F2): the table, a run's page, the comparison. Filled
 * by tui/runs_screen.c; rows and the series' arrays belong to it. */
typedef struct dl_ui_runs {
    char dir[256];
    int n; /* rows, newest first */
    dl_ui_run *rows;
    int nshown;       /* rows through the filter, in the sort order */
    const int *shown; /* indices into rows */
    int cursor;       /* index into shown */
    char sort[40];    /* the sort column ("" : newest first) */
    int desc;
    int nsel;
    char note[200]; /* the last thing the screen has to say ("" none) */
    dl_ui_runs_mode mode;
    /* DL_UI_DETAIL: the run under the cursor */
    char detail[96];
    int nlines;
    char lines[DL_UI_LINES][160];
    /* DL_UI_COMPARE (and the detail page's curves) */
    char metric[48];
    dl_ui_xaxis xaxis;
    int smooth;     /* 0 off, else an index into dl_ui_smooth_weights */
    char group[48]; /* "" off, "seed" (runs differing only in seed), else a hyperparameter */
    int ncols;      /* the compared runs, in slot order */
    char col[DL_UI_SEL][64];
    int colslot[DL_UI_SEL];
    int baseline; /* column the deltas are against */
    int ndiff;
    dl_ui_diff diff[DL_UI_DIFF];
    int nsame; /* hyperparameters equal in all (not shown) */
    int nseries;
    dl_ui_series series[DL_UI_SERIES];
} dl_ui_runs;

/* EMA weights of the smoothing steps (S): index 0 is off. */
#define DL_UI_SMOOTH_STEPS 4
static const double dl_ui_smooth_weights[DL_UI_SMOOTH_STEPS] = {0, 0.6, 0.9, 0.97};
static inline const char *dl_ui_xaxis_name(dl_ui_xaxis x)
{
    return x == DL_X_EPOCH     ? "epoch"
           : x == DL_X_SAMPLES ? "samples"
           : x == DL_X_WALL    ? "wall s"
                               : "step";
}

/* One row of the trials screen. */
typedef struct dl_ui_trial {
    int number;
    char state[10];     /* "running", "complete", "pruned", "failed" */
    double value;       /* NaN: none */
    double best_so_far; /* the best complete value among trials 0..number; NaN: none yet */
    double duration_s;  /* < 0: unknown */
    char params[160];   /* "lr=0.0123 hidden=32 act=relu" */
    /* each parameter (dl_ui_trials.param order) placed in its search space,
     * [0, 1] (log-scaled where it is sampled so, a choice by its index);
     * NaN: the trial has no such parameter */
    double pv[DL_UI_PARAMS];
} dl_ui_trial;

/* A study, as the trials screen draws it (filled from engine/tune/tune.h by tui/). */
typedef struct dl_ui_trials {
    int have; /* 0: note says why there is no study */
    char note[200];
    char name[64];
    char dir[512]; /* the study folder */
    int maximize;
    int n; /* trials in number order (the last DL_UI_TRIALS) */
    dl_ui_trial rows[DL_UI_TRIALS];
    int ncomplete, npruned, nfailed, nrunning;
    int best_number; /* -1: none complete */
    double best_value;
    /* parameter importance over complete trials: |Spearman rho| for numbers,
     * the correlation ratio eta for choices; NaN: too few trials */
    int nparams;
    char param[DL_UI_PARAMS][32];
    double importance[DL_UI_PARAMS];
    char plo[DL_UI_PARAMS][16], phi[DL_UI_PARAMS][16]; /* the ends of each axis, as text */
    /* the screen's choice (keys v and p): 0 table and charts, 1 parallel
     * coordinates, 2 a parameter against the objective (param[sparam]) */
    int view, sparam;
} dl_ui_trials;

/* Everything a pane draws, copied or computed by tui/ in its sample step:
 * the run's telemetry snapshot plus what only the screen knows. */
typedef struct dl_screen {
    dl_telemetry_snapshot *tele; /* the run (engine/observe/telemetry.h) */
    char source[16];             /* "workbench", "watch" */
    char script[256];
    int live;               /* watch: the run has a control socket */
    int stopping;           /* a stop was asked for */
    char prof_note[96];     /* why there is no op table */
    char switched_from[16]; /* the device before the last hot switch ("": none) */
    double sps_before;      /* samples/s before it */
    int nadvice;            /* dl_telemetry_advise, most severe first */
    dl_advice advice[DL_UI_ADVICE];
    dl_ui_runs runs;     /* F2 */
    dl_ui_trials trials; /* F4 */
} dl_screen;

/* Per-pane view state owned by the app (scroll, zoom, filter). */
typedef struct dl_view_state {
    int focused;
    int log_scale;   /* chart: log-scale the loss axis */
    long window;     /* chart: last N steps (0: all) */
    int scroll;      /* tables, log: rows scrolled from the top/bottom */
    char filter[64]; /* tables: substring filter */
} dl_view_state;

/* --- panes: draw into w (already sized); the title is the pane's name ---- */
void dl_view_status(WINDOW *w, const dl_screen *s);
void dl_view_hints(WINDOW *w, const char *const *keys, int nkeys, const char *prompt);
void dl_view_chart(WINDOW *w, const dl_screen *s, const dl_view_state *v);
void dl_view_system(WINDOW *w, const dl_screen *s, const dl_view_state *v);
void dl_view_profile(WINDOW *w, const dl_screen *s, const dl_view_state *v);
void dl_view_log(WINDOW *w, const dl_screen *s, const dl_view_state *v);
void dl_view_runs(WINDOW *w, const dl_screen *s, const dl_view_state *v);
void dl_view_trials(WINDOW *w, const dl_screen *s, const dl_view_state *v);
void dl_view_help(WINDOW *w, const dl_view_state *v, int watching);
/* The too-small message, centred. */
void dl_view_too_small(WINDOW *w, int need_cols, int need_rows);

/* The overlay chart (views/overlay.c): the series in a box at (top, left)
 * of height x width cells, with y labels and the x axis named xname; each
 * series smoothed with EMA weight smooth (0: raw), the raw line faint
 * behind it; bands drawn under their lines. marks: one ASCII mark a cell
 * so that series stay apart without colour. */
void dl_view_overlay(WINDOW *w, int top, int left, int height, int width, const dl_ui_series *s,
                     int n, double smooth, int log_scale, const char *xname, int marks);
/* EMA of y[0..n) with weight a into out (bias-corrected like TensorBoard's:
 * the first points are not pulled toward 0). NaN points are skipped and
 * keep NaN. a = 0 copies. */
void dl_view_smooth(const double *y, int n, double a, double *out);

/* --- shared drawing helpers (views/draw.c) --------------------------------- */
/* A border with " title " at the top left (focus highlights it). */
void dl_draw_frame(WINDOW *w, const char *title, int focused);
/* Text at (y, x) clipped to the window's width minus right margin. */
void dl_draw_text(WINDOW *w, int y, int x, int role, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* A horizontal meter [|||||   ] 42% of width cells at (y, x). */
void dl_draw_meter(WINDOW *w, int y, int x, int width, double pct);
/* A sparkline of n values scaled to [0, max] (max <= 0: their maximum). */
void dl_draw_spark(WINDOW *w, int y, int x, int width, const float *v, int n, double max, int role);
/* Human units: "1.2k", "35M". */
void dl_fmt_si(char *buf, int size, double v);
/* "1h02m", "3m05s", "12s", "-" for negative. */
void dl_fmt_duration(char *buf, int size, double s);
/* "ready" for a workbench that has not started, else dl_tele_state_name. */
const char *dl_state_name(const dl_screen *s);
/* "$1.23", "$0.0042": money with the precision its size needs. */
void dl_fmt_money(char *buf, int size, double v);

#endif
