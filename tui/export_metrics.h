/* export_metrics.h - every metric of some runs as one CSV or JSON-lines file (export-metrics, the runs screen's E)
 *
 * A row per record of each run's metrics.jsonl (read through
 * engine/rundir/records.h): the run's folder, name and tags, its
 * hyperparameters and seed as columns, kind, step, epoch, time and every
 * metric any of the runs logged (empty where a record has none). A
 * hyperparameter named like another column is written as hp_NAME.
 */
#ifndef DL_EXPORT_METRICS_H
#define DL_EXPORT_METRICS_H

#include <stdio.h>

#include <cjson/cJSON.h>

typedef struct dl_export_run {
    char path[1100], id[256], name[64], tags[256];
    cJSON *config;
} dl_export_run;

/* Reads the run folder at path: DL_OK, or the error naming the file. */
int dl_export_run_open(dl_export_run *r, const char *path);
void dl_export_run_close(dl_export_run *r);

/* Writes runs[0..n) to f; returns the rows written (not the header). */
long dl_export_metrics(FILE *f, const dl_export_run *runs, int n, int jsonl);
/* The same into path, whole or not at all (dl_fs_write_atomic): DL_OK
 * with *rows set, or the write's error. */
int dl_export_metrics_file(const char *path, const dl_export_run *runs, int n, int jsonl,
                           long *rows);

#endif
