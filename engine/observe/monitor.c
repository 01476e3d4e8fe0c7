/* monitor.c - a thread sampling /proc and NVML (loaded with dlopen) about twice a second */
#include "engine/observe/monitor.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"

/* --- NVML, declared locally: no header, no link-time dependency ------------------ */

typedef int nvmlReturn_t; /* 0: NVML_SUCCESS */
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define NVML_MEMORY_V2_VERSION ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))
#define NVML_TEMPERATURE_GPU 0
#define NVML_CLOCK_SM 1
#define NVML_PCIE_UTIL_TX_BYTES 0
#define NVML_PCIE_UTIL_RX_BYTES 1

typedef struct nvml {
    void *lib;
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    const char *(*error_string)(nvmlReturn_t);
    nvmlReturn_t (*count)(unsigned int *);
    nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*util)(nvmlDevice_t, nvmlUtilization_t *);
    nvmlReturn_t (*mem)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*mem2)(nvmlDevice_t, nvmlMemory_v2_t *);
    nvmlReturn_t (*power)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*temp)(nvmlDevice_t, int, unsigned int *);
    nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned int *);
    nvmlReturn_t (*pcie)(nvmlDevice_t, int, unsigned int *);
    nvmlReturn_t (*energy)(nvmlDevice_t, unsigned long long *);
    int ndev;
    nvmlDevice_t dev[DL_MONITOR_MAX_GPUS];
    char devname[DL_MONITOR_MAX_GPUS][64];
    unsigned long long energy0[DL_MONITOR_MAX_GPUS]; /* mJ at start */
    int has_energy[DL_MONITOR_MAX_GPUS];
} nvml;

/* The first of the names that resolves: newest version first. */
static void *sym(void *lib, const char *const *names)
{
    for (; *names; names++) {
        void *f = dlsym(lib, *names);
        if (f)
            return f;
    }
    return NULL;
}

#define SYM(field, ...)                                                                            \
    do {                                                                                           \
        static const char *const n_[] = {__VA_ARGS__, NULL};                                       \
        *(void **)&nv->field = sym(nv->lib, n_);                                                   \
    } while (0)

static int nvml_open(nvml *nv, const char *libname, char *why, size_t size)
{
    memset(nv, 0, sizeof *nv);
    nv->lib = dlopen(libname, RTLD_NOW | RTLD_LOCAL);
    if (!nv->lib) {
        const char *e = dlerror();
        snprintf(why, size,
                 "no GPU data: %s could not be loaded (%s); no NVIDIA driver on this "
                 "machine?",
                 libname, e ? e : "not found");
        return -1;
    }
    SYM(init, "nvmlInit_v2", "nvmlInit");
    SYM(shutdown, "nvmlShutdown");
    SYM(error_string, "nvmlErrorString");
    SYM(count, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
    SYM(handle, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
    SYM(name, "nvmlDeviceGetName");
    SYM(util, "nvmlDeviceGetUtilizationRates");
    SYM(mem2, "nvmlDeviceGetMemoryInfo_v2");
    SYM(mem, "nvmlDeviceGetMemoryInfo");
    SYM(power, "nvmlDeviceGetPowerUsage");
    SYM(temp, "nvmlDeviceGetTemperature");
    SYM(clock, "nvmlDeviceGetClockInfo");
    SYM(pcie, "nvmlDeviceGetPcieThroughput");
    SYM(energy, "nvmlDeviceGetTotalEnergyConsumption");
    if (!nv->init || !nv->count || !nv->handle) {
        snprintf(why, size, "no GPU data: %s lacks nvmlInit/nvmlDeviceGetCount (too old?)",
                 libname);
        dlclose(nv->lib);
        nv->lib = NULL;
        return -1;
    }
    nvmlReturn_t r = nv->init();
    if (r != 0) {
        snprintf(why, size, "no GPU data: nvmlInit failed: %s (error %d)",
                 nv->error_string ? nv->error_string(r) : "unknown", r);
        dlclose(nv->lib);
        nv->lib = NULL;
        return -1;
    }
    unsigned int n = 0;
    if (nv->count(&n) != 0 || n == 0) {
        snprintf(why, size, "no GPU data: NVML loaded but reports no GPU");
        if (nv->shutdown)
            nv->shutdown();
        dlclose(nv->lib);
        nv->lib = NULL;
        return -1;
    }
    for (unsigned int i = 0; i < n && nv->ndev < DL_MONITOR_MAX_GPUS; i++) {
        nvmlDevice_t d;
        if (nv->handle(i, &d) != 0)
            continue;
        int k = nv->ndev++;
        nv->dev[k] = d;
        if (!nv->name || nv->name(d, nv->devname[k], sizeof nv->devname[k]) != 0)
            snprintf(nv->devname[k], sizeof nv->devname[k], "GPU %u", i);
        nv->has_energy[k] = nv->energy && nv->energy(d, &nv->energy0[k]) == 0;
    }
    int len = snprintf(why, size, "NVML: %d GPU%s", nv->ndev, nv->ndev == 1 ? "" : "s");
    for (int k = 0; k < nv->ndev && len > 0 && (size_t)len < size; k++)
        len += snprintf(why + len, size - (size_t)len, "%s%s", k ? ", " : " (", nv->devname[k]);
    if (nv->ndev && len > 0 && (size_t)len < size)
        snprintf(why + len, size - (size_t)len, ")");
    return 0;
}

static void nvml_close(nvml *nv)
{
    if (!nv->lib)
        return;
    if (nv->shutdown)
        nv->shutdown();
    dlclose(nv->lib);
    nv->lib = NULL;
}

static void nvml_sample(nvml *nv, dl_sys_sample *s)
{
    s->ngpu = nv->ndev;
    for (int k = 0; k < nv->ndev; k++) {
        dl_gpu_sample *g = &s->gpu[k];
        nvmlDevice_t d = nv->dev[k];
        snprintf(g->name, sizeof g->name, "%s", nv->devname[k]);
        g->util_pct = g->mem_util_pct = g->mem_used_mb = g->mem_total_mb = -1;
        g->power_w = g->temp_c = g->sm_clock_mhz = g->pcie_rx_mbps = g->pcie_tx_mbps = -1;
        g->energy_j = -1;
        nvmlUtilization_t u;
        if (nv->util && nv->util(d, &u) == 0) {
            g->util_pct = u.gpu;
            g->mem_util_pct = u.memory;
        }
        nvmlMemory_v2_t m2 = {NVML_MEMORY_V2_VERSION, 0, 0, 0, 0};
        nvmlMemory_t m1;
        if (nv->mem2 && nv->mem2(d, &m2) == 0) {
            g->mem_used_mb = (double)m2.used / 1048576.0;
            g->mem_total_mb = (double)m2.total / 1048576.0;
        } else if (nv->mem && nv->mem(d, &m1) == 0) {
            g->mem_used_mb = (double)m1.used / 1048576.0;
            g->mem_total_mb = (double)m1.total / 1048576.0;
        }
        unsigned int v;
        if (nv->power && nv->power(d, &v) == 0)
            g->power_w = v / 1000.0;
        if (nv->temp && nv->temp(d, NVML_TEMPERATURE_GPU, &v) == 0)
            g->temp_c = v;
        if (nv->clock && nv->clock(d, NVML_CLOCK_SM, &v) == 0)
            g->sm_clock_mhz = v;
        if (nv->pcie && nv->pcie(d, NVML_PCIE_UTIL_RX_BYTES, &v) == 0)
            g->pcie_rx_mbps = v / 1024.0; /* KB/s */
        if (nv->pcie && nv->pcie(d, NVML_PCIE_UTIL_TX_BYTES, &v) == 0)
            g->pcie_tx_mbps = v / 1024.0;
        unsigned long long e;
        if (nv->has_energy[k] && nv->energy(d, &e) == 0)
            g->energy_j = (double)(e - nv->energy0[k]) / 1000.0;
    }
}

/* --- /proc ------------------------------------------------------------------------------ */

typedef struct cpu_ticks {
    unsigned long long busy, total;
} cpu_ticks;

struct dl_monitor {
    dl_monitor_options opt;
    FILE *jsonl; /* system.jsonl; guarded by sample_lock */
    nvml nv;
    char gpu_status[512];
    double t0;
    /* previous counters for deltas (sampling is serialised by `sample_lock`) */
    pthread_mutex_t sample_lock;
    int ncpu;
    cpu_ticks prev_cpu[DL_MONITOR_MAX_CPUS + 1]; /* [0]: all cores */
    double prev_proc_s, prev_wall;
    /* ring */
    pthread_mutex_t lock;
    dl_sys_sample *ring;
    int head, count;
    /* thread */
    pthread_t thread;
    int running;
    pthread_mutex_t stop_lock;
    pthread_cond_t stop_cond;
    int stop;
};

/* Reads /proc/stat: ticks[0] all cores, ticks[1 + i] core i. Returns cores. */
static int read_cpu(cpu_ticks *ticks, int max)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return 0;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "cpu", 3))
            break;
        unsigned long long v[10] = {0};
        char *p = line + 3;
        int idx = -1;
        if (*p != ' ')
            idx = (int)strtol(p, &p, 10);
        int k = 0;
        while (k < 10) {
            char *end;
            unsigned long long x = strtoull(p, &end, 10);
            if (end == p)
                break;
            v[k++] = x;
            p = end;
        }
        /* user nice system idle iowait irq softirq steal (guest is inside user) */
        unsigned long long total = 0;
        for (int j = 0; j < 8 && j < k; j++)
            total += v[j];
        unsigned long long idle = v[3] + v[4];
        int slot = idx < 0 ? 0 : idx + 1;
        if (slot <= max) {
            ticks[slot].total = total;
            ticks[slot].busy = total - idle;
            if (idx >= 0 && idx + 1 > n)
                n = idx + 1;
        }
    }
    fclose(f);
    return n;
}

static double proc_cpu_s(void)
{
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f)
        return 0;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* fields after the command name in parentheses (which may hold spaces) */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    p += 2;
    unsigned long long ut = 0, st = 0;
    for (int field = 3; field <= 15 && *p; field++) {
        char *end;
        unsigned long long x = strtoull(p, &end, 10);
        if (field == 14)
            ut = x;
        if (field == 15)
            st = x;
        p = end;
        while (*p == ' ')
            p++;
        if (field == 3) { /* state is a letter */
            while (*p && *p != ' ')
                p++;
            while (*p == ' ')
                p++;
        }
    }
    long hz = sysconf(_SC_CLK_TCK);
    return (double)(ut + st) / (double)(hz > 0 ? hz : 100);
}

static double rss_mb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    unsigned long size = 0, res = 0;
    int ok = fscanf(f, "%lu %lu", &size, &res) == 2;
    fclose(f);
    return ok ? (double)res * (double)sysconf(_SC_PAGESIZE) / 1048576.0 : 0;
}

static void ram_mb(double *used, double *total)
{
    *used = *total = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return;
    char line[256];
    double tot = 0, avail = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
            tot = (double)kb / 1024.0;
        else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            avail = (double)kb / 1024.0;
    }
    fclose(f);
    *total = tot;
    *used = avail >= 0 ? tot - avail : 0;
}

void dl_monitor_options_default(dl_monitor_options *o)
{
    memset(o, 0, sizeof *o);
    o->interval_ms = 500;
    o->ring = 240;
    o->use_nvml = 1;
}

int dl_monitor_create(dl_monitor **out, const dl_monitor_options *opt)
{
    *out = NULL;
    dl_monitor *m = calloc(1, sizeof *m);
    if (!m)
        return dl_error(DL_ENOMEM, "out of memory creating the system monitor");
    if (opt)
        m->opt = *opt;
    else
        dl_monitor_options_default(&m->opt);
    if (m->opt.interval_ms < 10)
        m->opt.interval_ms = 500;
    if (m->opt.ring < 1)
        m->opt.ring = 240;
    m->ring = calloc((size_t)m->opt.ring, sizeof *m->ring);
    if (!m->ring) {
        int ring = m->opt.ring;
        free(m);
        return dl_error(DL_ENOMEM, "out of memory for %d system samples", ring);
    }
    pthread_mutex_init(&m->lock, NULL);
    pthread_mutex_init(&m->sample_lock, NULL);
    pthread_mutex_init(&m->stop_lock, NULL);
    pthread_cond_init(&m->stop_cond, NULL);
    if (m->opt.jsonl_path && !(m->jsonl = dl_records_system_open(m->opt.jsonl_path))) {
        dl_monitor_destroy(m);
        return DL_EIO; /* the message names the file */
    }
    m->opt.jsonl_path = NULL; /* not kept: the caller's string */
    if (m->opt.use_nvml)
        nvml_open(&m->nv, m->opt.nvml_library ? m->opt.nvml_library : "libnvidia-ml.so.1",
                  m->gpu_status, sizeof m->gpu_status);
    else
        snprintf(m->gpu_status, sizeof m->gpu_status, "no GPU data: NVML disabled");
    m->opt.nvml_library = NULL; /* not kept: the caller's string */
    m->t0 = dl_clock_mono_s();
    m->ncpu = read_cpu(m->prev_cpu, DL_MONITOR_MAX_CPUS);
    m->prev_proc_s = proc_cpu_s();
    m->prev_wall = m->t0;
    *out = m;
    return DL_OK;
}

void dl_monitor_destroy(dl_monitor *m)
{
    if (!m)
        return;
    dl_monitor_stop(m);
    nvml_close(&m->nv);
    if (m->jsonl)
        fclose(m->jsonl);
    pthread_mutex_destroy(&m->lock);
    pthread_mutex_destroy(&m->sample_lock);
    pthread_mutex_destroy(&m->stop_lock);
    pthread_cond_destroy(&m->stop_cond);
    free(m->ring);
    free(m);
}

const char *dl_monitor_gpu_status(const dl_monitor *m) { return m->gpu_status; }
int dl_monitor_has_gpu(const dl_monitor *m) { return m->nv.lib && m->nv.ndev > 0; }

static double pct(unsigned long long busy, unsigned long long total)
{
    if (total == 0)
        return 0;
    double v = 100.0 * (double)busy / (double)total;
    return v < 0 ? 0 : v > 100 ? 100 : v;
}

int dl_monitor_set_log(dl_monitor *m, const char *path)
{
    FILE *f = path ? dl_records_system_open(path) : NULL;
    pthread_mutex_lock(&m->sample_lock);
    if (m->jsonl)
        fclose(m->jsonl);
    m->jsonl = f;
    pthread_mutex_unlock(&m->sample_lock);
    return path && !f ? DL_EIO : DL_OK;
}

int dl_monitor_sample(dl_monitor *m, dl_sys_sample *out)
{
    dl_sys_sample *s = calloc(1, sizeof *s);
    if (!s)
        return dl_error(DL_ENOMEM, "out of memory sampling the system");
    pthread_mutex_lock(&m->sample_lock);
    double now = dl_clock_mono_s();
    s->t = now - m->t0;
    s->unix_time = dl_clock_wall_s();
    cpu_ticks cur[DL_MONITOR_MAX_CPUS + 1];
    memset(cur, 0, sizeof cur);
    int n = read_cpu(cur, DL_MONITOR_MAX_CPUS);
    s->ncpu = n < DL_MONITOR_MAX_CPUS ? n : DL_MONITOR_MAX_CPUS;
    for (int i = 0; i <= s->ncpu; i++) {
        unsigned long long db = cur[i].busy - m->prev_cpu[i].busy;
        unsigned long long dt = cur[i].total - m->prev_cpu[i].total;
        if (cur[i].total < m->prev_cpu[i].total || cur[i].busy < m->prev_cpu[i].busy)
            db = dt = 0; /* a core came online: no delta yet */
        double v = pct(db, dt);
        if (i == 0)
            s->cpu_total_pct = v;
        else
            s->cpu_pct[i - 1] = (float)v;
    }
    memcpy(m->prev_cpu, cur, sizeof cur);
    double pc = proc_cpu_s();
    double dw = now - m->prev_wall;
    s->proc_cpu_pct = dw > 0 ? 100.0 * (pc - m->prev_proc_s) / dw : 0;
    if (s->proc_cpu_pct < 0)
        s->proc_cpu_pct = 0;
    m->prev_proc_s = pc;
    m->prev_wall = now;
    s->rss_mb = rss_mb();
    ram_mb(&s->ram_used_mb, &s->ram_total_mb);
    if (m->nv.lib)
        nvml_sample(&m->nv, s);
    if (m->jsonl)
        dl_records_system_append(m->jsonl, s);
    pthread_mutex_unlock(&m->sample_lock);

    pthread_mutex_lock(&m->lock);
    m->ring[(m->head + m->count) % m->opt.ring] = *s;
    if (m->count < m->opt.ring)
        m->count++;
    else
        m->head = (m->head + 1) % m->opt.ring;
    pthread_mutex_unlock(&m->lock);
    if (m->opt.sink)
        m->opt.sink(m->opt.user, s);
    if (out)
        *out = *s;
    free(s);
    return DL_OK;
}

int dl_monitor_latest(dl_monitor *m, dl_sys_sample *out)
{
    pthread_mutex_lock(&m->lock);
    int have = m->count > 0;
    if (have)
        *out = m->ring[(m->head + m->count - 1) % m->opt.ring];
    pthread_mutex_unlock(&m->lock);
    return have;
}

int dl_monitor_history(dl_monitor *m, dl_sys_sample *out, int max)
{
    pthread_mutex_lock(&m->lock);
    int n = m->count < max ? m->count : max;
    int first = m->count - n;
    for (int i = 0; i < n; i++)
        out[i] = m->ring[(m->head + first + i) % m->opt.ring];
    pthread_mutex_unlock(&m->lock);
    return n;
}

static void *run(void *arg)
{
    dl_monitor *m = arg;
    pthread_mutex_lock(&m->stop_lock);
    while (!m->stop) {
        struct timespec ts = dl_clock_deadline_ms((long)m->opt.interval_ms);
        int rc = 0;
        while (!m->stop && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&m->stop_cond, &m->stop_lock, &ts);
        if (m->stop)
            break;
        pthread_mutex_unlock(&m->stop_lock);
        dl_monitor_sample(m, NULL);
        pthread_mutex_lock(&m->stop_lock);
    }
    pthread_mutex_unlock(&m->stop_lock);
    return NULL;
}

int dl_monitor_start(dl_monitor *m)
{
    if (m->running)
        return DL_OK;
    m->stop = 0;
    int e = pthread_create(&m->thread, NULL, run, m);
    if (e)
        return dl_error(DL_ERR, "cannot start the monitor thread: %s", strerror(e));
    m->running = 1;
    return DL_OK;
}

void dl_monitor_stop(dl_monitor *m)
{
    if (!m->running)
        return;
    pthread_mutex_lock(&m->stop_lock);
    m->stop = 1;
    pthread_cond_signal(&m->stop_cond);
    pthread_mutex_unlock(&m->stop_lock);
    pthread_join(m->thread, NULL);
    m->running = 0;
}
