/* compare.h - the runs screen's data: a run's curves in columns, the overlay's series, groups, the diff table
 *
 * Read from the run folders through engine/rundir/records.h on the main
 * loop's thread when a run is compared or opened, and again when its
 * metrics.jsonl has grown (a live run). Nothing here draws: the series and
 * the diff rows go into views/views.h dl_ui_runs.
 */
#ifndef DL_COMPARE_H
#define DL_COMPARE_H

#include "views/views.h"

/* One run as the comparison sees it: every metric of metrics.jsonl in
 * columns, the x of each record on each axis, the hyperparameters and the
 * final metrics as text. */
typedef struct dl_run_curves dl_run_curves;

/* Reads RUNS_DIR/FOLDER; NULL when it is not a run folder (any more). */
dl_run_curves *dl_compare_load(const char *runs_dir, const char *folder);
void dl_compare_free(dl_run_curves *c);
/* 1 when the run's metrics.jsonl is what was read; 0 when it changed or
 * went away (read it again). */
int dl_compare_fresh(const dl_run_curves *c, const char *runs_dir);
const char *dl_compare_folder(const dl_run_curves *c);
/* Records read (steps and epochs logged). */
int dl_compare_records(const dl_run_curves *c);
/* "tui-spirals-1415e2b3": the folder without its time stamp. */
const char *dl_compare_label(const dl_run_curves *c);

/* The arrays behind the series of the last build (freed by the next). */
typedef struct dl_compare_store {
    int n;
    double *a[DL_UI_SERIES * 4];
} dl_compare_store;
void dl_compare_store_free(dl_compare_store *st);

/* Fills ui's columns, diff table and series for runs[0..n) (slots[k]: run
 * k's colour slot) from ui->metric, ui->xaxis, ui->group and
 * ui->baseline; an unknown metric becomes the first the runs share
 * ("loss" when they have it). */
void dl_compare_build(dl_compare_store *st, dl_ui_runs *ui, dl_run_curves *const *runs,
                      const int *slots, int n);
/* The metric after (step 1) or before (step -1) cur among the runs'
 * metrics, into out. */
void dl_compare_next_metric(dl_run_curves *const *runs, int n, const char *cur, int step, char *out,
                            size_t size);
/* The next grouping after cur: "" (off), "seed", then each hyperparameter
 * that differs among the runs; into out. */
void dl_compare_next_group(dl_run_curves *const *runs, int n, const char *cur, char *out,
                           size_t size);
/* A run's page: config, summary, tags, the last events and notes as
 * ui->lines; its loss and val_loss as ui's series. */
void dl_compare_detail(dl_compare_store *st, dl_ui_runs *ui, const dl_run_curves *c,
                       const char *runs_dir);

#endif
