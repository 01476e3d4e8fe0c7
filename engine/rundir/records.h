/* records.h - the run folder's records as plain structs: metrics, events, system samples, summary, config
 *
 * The shapes of the lines and documents in a run folder are spelled here
 * (the writer of metrics.jsonl, events.log, config.json and summary.json
 * is runlog.c; of system.jsonl, dl_records_system_append). Readers get
 * structs and never parse the files themselves: the follower (watch), the
 * runs table, resume. A number that is missing reads as NaN unless the
 * field says otherwise; strings that are missing read as "".
 */
#ifndef DL_RECORDS_H
#define DL_RECORDS_H

#include <stddef.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#define DL_RUN_MAX_CPUS 128
#define DL_RUN_MAX_GPUS 4
#define DL_RUN_MAX_VALUES 64

/* --- system.jsonl: one sample per line ------------------------------------------- */

typedef struct dl_run_gpu {
    char name[64];                     /* "NVIDIA H100 80GB HBM3" */
    double util_pct;                   /* SM busy, last sample period; -1 unknown */
    double mem_util_pct;               /* memory controller busy; -1 unknown */
    double mem_used_mb, mem_total_mb;  /* -1 unknown */
    double power_w;                    /* -1 unknown */
    double temp_c;                     /* -1 unknown */
    double sm_clock_mhz;               /* -1 unknown */
    double pcie_rx_mbps, pcie_tx_mbps; /* MB/s; -1 unknown */
    double energy_j;                   /* since the monitor started; -1 unknown */
} dl_run_gpu;

typedef struct dl_run_system {
    double t;                       /* seconds since the monitor started */
    double unix_time;               /* wall clock */
    int ncpu;                       /* cores in cpu_pct (capped at DL_RUN_MAX_CPUS) */
    float cpu_pct[DL_RUN_MAX_CPUS]; /* busy % per core, [0, 100] */
    double cpu_total_pct;           /* all cores, [0, 100] */
    double proc_cpu_pct;            /* this process: 100 = one core busy */
    double rss_mb;
    double ram_used_mb, ram_total_mb; /* used = total - available */
    int ngpu;                         /* 0 without NVML */
    dl_run_gpu gpu[DL_RUN_MAX_GPUS];
} dl_run_system;

/* A sample as one JSON object on a single line (no newline); returns the
 * length it needs (written truncated to size, like snprintf). */
int dl_records_system_format(const dl_run_system *s, char *buf, size_t size);
/* Parses one line: 1 with *out filled, 0 for a blank line, -1 when it is
 * not a JSON object (a torn or damaged line). Missing CPU figures read as
 * 0, missing GPU figures as -1. */
int dl_records_system_parse(const char *line, dl_run_system *out);
/* Opens path (RUN/system.jsonl) for appending; NULL with DL_EIO naming it. */
FILE *dl_records_system_open(const char *path);
/* The one writer of system.jsonl: appends s as a line and flushes. */
int dl_records_system_append(FILE *f, const dl_run_system *s);

/* --- metrics.jsonl: one record per logged step or epoch -------------------------- */

typedef struct dl_run_value {
    char name[48];
    double v; /* NaN: null, or not a number */
} dl_run_value;

typedef struct dl_run_metrics {
    char kind[16];                     /* "step", "epoch", "stop"; "" when missing */
    int has_step, has_epoch, has_time; /* the member is a number */
    double step, epoch, time;          /* epoch from 1; time: seconds since start */
    int n;
    dl_run_value v[DL_RUN_MAX_VALUES]; /* the other members, in file order */
} dl_run_metrics;

/* Parses one line: 1 with *out filled, 0 for a blank line, -1 when it is
 * not a JSON object. Members past DL_RUN_MAX_VALUES are dropped. */
int dl_records_metrics_parse(const char *line, dl_run_metrics *out);

/* Calls fn for every record of RUN/metrics.jsonl, in order (unreadable
 * lines skipped). Returns the records seen, -1 when the file cannot be
 * opened. */
int dl_records_metrics_each(const char *run_dir, void (*fn)(void *user, const dl_run_metrics *m),
                            void *user);

/* The value called name in v[0..n), NaN when there is none. */
double dl_records_value(const dl_run_value *v, int n, const char *name);

/* --- events.log: "<ISO time> <kind>: <text>" ------------------------------------- */

typedef struct dl_run_event {
    double wall;     /* unix time of the line's stamp; 0 when unreadable */
    char kind[64];   /* "log" for a line not in the format */
    char text[2048]; /* the whole line for a line not in the format */
} dl_run_event;

/* Parses one line (without its newline) into *out; every line is an event. */
void dl_records_event_parse(const char *line, dl_run_event *out);

/* --- summary.json ---------------------------------------------------------------- */

typedef struct dl_run_summary {
    char run[256], name[64], status[16], device[16];
    int has_message;
    char message[256];
    double steps, epochs, wall_s, samples_per_s; /* NaN when missing */
    double cost;                                 /* "cost": {"cost": ...}; NaN when missing */
    int nfinal, nbest;
    dl_run_value final[DL_RUN_MAX_VALUES]; /* "final": the last value of each metric */
    dl_run_value best[DL_RUN_MAX_VALUES];  /* "best": {"value"} of the loss and acc metrics */
} dl_run_summary;

/* Reads RUN/summary.json into *out: DL_OK, or the read or parse error. */
int dl_records_summary(const char *run_dir, dl_run_summary *out);
void dl_records_summary_parse(const cJSON *j, dl_run_summary *out);

/* --- config.json ----------------------------------------------------------------- */

typedef struct dl_run_config {
    char name[64], device[16], backend[128], precision[16]; /* "" when missing */
    double batch, accumulate, epochs;                       /* 0, 1, 0 when missing */
    double max_steps;                                       /* 0 when missing */
    double workers;                                         /* data.workers; -1 when missing */
    double train_flops_per_sample; /* older runs: 3 x flops_per_sample; 0 unknown */
    char study[128]; /* "study": {"name", "trial"} of a tuning trial; "" for a plain run */
    double trial;    /* NaN when not a number */
} dl_run_config;

/* Reads RUN/config.json into *out: DL_OK, or the read or parse error. */
int dl_records_config(const char *run_dir, dl_run_config *out);

/* --- tags.txt: one tag a line (written by dl_runlog_tag) ------------------------ */

/* The run's tags, space-separated, into buf ("" when it has none). Returns
 * how many. */
int dl_records_tags(const char *run_dir, char *buf, size_t size);
/* 1 when tag is one of the space-separated tags in list. */
int dl_records_has_tag(const char *list, const char *tag);

/* RUN/FILE parsed (the caller deletes it): the documents whole, for
 * readers that look members up by name (`runs --sort KEY`). NULL with
 * dl_error when missing or not JSON. */
cJSON *dl_records_load(const char *run_dir, const char *file);

#endif
