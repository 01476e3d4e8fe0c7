/* monitor.h - a thread sampling CPU, memory and (through NVML, loaded with dlopen) the GPUs
 *
 * About twice a second the monitor reads /proc/stat (per-core busy %),
 * /proc/self/stat and /proc/self/statm (process CPU %, RSS), /proc/meminfo
 * (RAM) and, when libnvidia-ml.so.1 loads, each GPU's utilisation, memory,
 * power, temperature, SM clock, PCIe throughput and energy counter. Samples
 * go into a ring, optionally to a system.jsonl file (one JSON object per
 * line, flushed) and to a sink callback (the telemetry). Without NVML the
 * monitor carries on with the CPU figures and dl_monitor_gpu_status says
 * why there is no GPU data.
 */
#ifndef DL_MONITOR_H
#define DL_MONITOR_H

#include <stddef.h>

#define DL_MONITOR_MAX_CPUS 128
#define DL_MONITOR_MAX_GPUS 4

typedef struct dl_gpu_sample {
    char name[64];          /* "NVIDIA H100 80GB HBM3" */
    double util_pct;        /* SM busy, last sample period; -1 unknown */
    double mem_util_pct;    /* memory controller busy; -1 unknown */
    double mem_used_mb, mem_total_mb; /* -1 unknown */
    double power_w;         /* -1 unknown */
    double temp_c;          /* -1 unknown */
    double sm_clock_mhz;    /* -1 unknown */
    double pcie_rx_mbps, pcie_tx_mbps; /* MB/s; -1 unknown */
    double energy_j;        /* since the monitor started; -1 unknown */
} dl_gpu_sample;

typedef struct dl_sys_sample {
    double t;               /* seconds since the monitor started */
    double unix_time;       /* wall clock */
    int ncpu;               /* cores in cpu_pct (capped at DL_MONITOR_MAX_CPUS) */
    float cpu_pct[DL_MONITOR_MAX_CPUS]; /* busy % per core, [0, 100] */
    double cpu_total_pct;   /* all cores, [0, 100] */
    double proc_cpu_pct;    /* this process: 100 = one core busy */
    double rss_mb;
    double ram_used_mb, ram_total_mb; /* used = total - available */
    int ngpu;               /* 0 without NVML */
    dl_gpu_sample gpu[DL_MONITOR_MAX_GPUS];
} dl_sys_sample;

typedef struct dl_monitor dl_monitor;

typedef struct dl_monitor_options {
    int interval_ms;        /* default 500 */
    int ring;               /* samples kept (default 240: two minutes) */
    const char *jsonl_path; /* append samples here (NULL: no file) */
    int use_nvml;           /* default 1 */
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

/* One sample as a JSON object on a single line (no newline); returns the
 * length written (truncated to size like snprintf). */
int dl_monitor_format_json(const dl_sys_sample *s, char *buf, size_t size);

#endif
