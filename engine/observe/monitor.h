/* monitor.h - a thread sampling CPU, memory and (through NVML, loaded with dlopen) the GPUs
 *
 * About twice a second the monitor reads /proc/stat (per-core busy %),
 * /proc/self/stat and /proc/self/statm (process CPU %, RSS), /proc/meminfo
 * (RAM) and, when libnvidia-ml.so.1 loads, each GPU's utilisation, memory,
 * power, temperature, SM clock, PCIe throughput and energy counter. Samples
 * go into a ring, optionally to a system.jsonl file (one JSON object per
 * line, flushed: the file's one writer, through engine/rundir/records.h)
 * and to a sink callback (the telemetry). Without NVML the
 * monitor carries on with the CPU figures and dl_monitor_gpu_status says
 * why there is no GPU data.
 */
#ifndef DL_MONITOR_H
#define DL_MONITOR_H

#include <stddef.h>

#include "engine/rundir/records.h"

/* A sample is the record system.jsonl holds (engine/rundir/records.h):
 * the monitor fills it, dl_records_system_append writes it. */
#define DL_MONITOR_MAX_CPUS DL_RUN_MAX_CPUS
#define DL_MONITOR_MAX_GPUS DL_RUN_MAX_GPUS
typedef dl_run_gpu dl_gpu_sample;
typedef dl_run_system dl_sys_sample;

typedef struct dl_monitor dl_monitor;

typedef struct dl_monitor_options {
    int interval_ms;          /* default 500 */
    int ring;                 /* samples kept (default 240: two minutes) */
    const char *jsonl_path;   /* append samples here (NULL: no file) */
    int use_nvml;             /* default 1 */
    const char *nvml_library; /* NULL: "libnvidia-ml.so.1" (tests point it elsewhere) */
    /* Called on the monitor thread after each sample (may be NULL). */
    void (*sink)(void *user, const dl_sys_sample *s);
    void *user;
} dl_monitor_options;

void dl_monitor_options_default(dl_monitor_options *o);

/* Creates a monitor (no thread yet): takes the baseline CPU counters and
 * tries NVML. Opening jsonl_path fails with DL_EIO (path and reason); a
 * missing NVML is not an error. */
int dl_monitor_create(dl_monitor **out, const dl_monitor_options *opt);
/* Stops the thread if running, closes the file, shuts NVML down. */
void dl_monitor_destroy(dl_monitor *m); /* accepts NULL */

/* Appends the samples from now on to path (a run's system.jsonl) instead
 * of the file before, which is closed; NULL only closes it. Returns DL_OK,
 * or DL_EIO naming path (no file then). Any thread. */
int dl_monitor_set_log(dl_monitor *m, const char *path);

/* Starts and stops the sampling thread (stop waits for it; both idempotent). */
int dl_monitor_start(dl_monitor *m);
void dl_monitor_stop(dl_monitor *m);

/* Takes a sample now on the calling thread (also stored, written and sunk).
 * CPU percentages are over the time since the previous sample. */
int dl_monitor_sample(dl_monitor *m, dl_sys_sample *out);

/* The latest sample: returns 0 when there is none yet. */
int dl_monitor_latest(dl_monitor *m, dl_sys_sample *out);
/* Up to max samples, oldest first; returns how many. */
int dl_monitor_history(dl_monitor *m, dl_sys_sample *out, int max);

/* "NVML: 1 GPU (NVIDIA H100 ...)" or why there is no GPU data:
 * "no GPU data: libnvidia-ml.so.1 not found (no NVIDIA driver installed?)". */
const char *dl_monitor_gpu_status(const dl_monitor *m);
int dl_monitor_has_gpu(const dl_monitor *m);

#endif
