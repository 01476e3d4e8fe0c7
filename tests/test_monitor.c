/* test_monitor.c - system monitor: plausible samples, the thread, system.jsonl, NVML absence with a reason */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/observe/monitor.h"
#include "engine/observe/telemetry.h"
#include "tests/check.h"

static void burn(double seconds)
{
    double start = dl_clock_mono_s();
    volatile double x = 0;
    do {
        for (int i = 0; i < 10000; i++)
            x += i * 1e-9;
    } while (dl_clock_mono_s() - start < seconds);
}

/* Per-core % in [0, 100], one entry per online core, RSS and RAM positive,
 * process CPU near one core while this thread spins. */
static void test_sample_plausible(void)
{
    dl_monitor *m;
    CHECK_OK(dl_monitor_create(&m, NULL));
    if (!m)
        return;
    burn(0.3);
    dl_sys_sample s;
    CHECK_OK(dl_monitor_sample(m, &s));
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    CHECK_MSG(s.ncpu >= 1 && s.ncpu <= DL_MONITOR_MAX_CPUS, "ncpu %d", s.ncpu);
    CHECK_MSG(cores > DL_MONITOR_MAX_CPUS || s.ncpu >= cores, "ncpu %d, online %ld", s.ncpu, cores);
    for (int i = 0; i < s.ncpu; i++)
        CHECK_MSG(s.cpu_pct[i] >= 0 && s.cpu_pct[i] <= 100, "core %d: %g", i, (double)s.cpu_pct[i]);
    CHECK(s.cpu_total_pct >= 0 && s.cpu_total_pct <= 100);
    CHECK_MSG(s.cpu_total_pct > 0, "a spinning thread shows as busy");
    /* the spin is one thread: about 100%, less when the machine is shared */
    CHECK_MSG(s.proc_cpu_pct > 20 && s.proc_cpu_pct < 100.0 * (double)cores + 5,
              "process CPU %.1f%%", s.proc_cpu_pct);
    CHECK(s.rss_mb > 0);
    CHECK(s.ram_total_mb > 0 && s.ram_used_mb > 0 && s.ram_used_mb <= s.ram_total_mb);
    CHECK(s.t >= 0.3);
    dl_monitor_destroy(m);
}

/* Without libnvidia-ml the monitor carries on and says why. */
static void test_nvml_absent_reason(void)
{
    dl_monitor_options o;
    dl_monitor_options_default(&o);
    o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
    dl_monitor *m;
    CHECK_OK(dl_monitor_create(&m, &o));
    if (!m)
        return;
    CHECK(!dl_monitor_has_gpu(m));
    const char *why = dl_monitor_gpu_status(m);
    CHECK_MSG(strstr(why, "no GPU data") && strstr(why, "/nonexistent/libnvidia-ml.so.1"),
              "status: %s", why);
    dl_sys_sample s;
    CHECK_OK(dl_monitor_sample(m, &s));
    CHECK(s.ngpu == 0 && s.rss_mb > 0);
    dl_monitor_destroy(m);

    /* the real library: a GPU, or a reason */
    CHECK_OK(dl_monitor_create(&m, NULL));
    if (!m)
        return;
    why = dl_monitor_gpu_status(m);
    if (dl_monitor_has_gpu(m)) {
        CHECK(!strncmp(why, "NVML:", 5));
        CHECK_OK(dl_monitor_sample(m, &s));
        CHECK(s.ngpu >= 1 && s.gpu[0].mem_total_mb > 0);
        CHECK(s.gpu[0].util_pct >= 0 && s.gpu[0].util_pct <= 100);
    } else {
        CHECK_MSG(!strncmp(why, "no GPU data: ", 13) && strlen(why) > 30, "status: %s", why);
        printf("  (%s)\n", why);
    }
    dl_monitor_destroy(m);
}

typedef struct sink_count {
    int n;
} sink_count;

static void sink(void *user, const dl_sys_sample *s) { ((sink_count *)user)->n++; }

/* The thread samples at its interval, keeps a bounded ring, writes one JSON
 * object per line and feeds the sink. */
static void test_thread_ring_jsonl(void)
{
    char path[] = "/tmp/dl_system_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    dl_monitor_options o;
    dl_monitor_options_default(&o);
    o.interval_ms = 50;
    o.ring = 4;
    o.jsonl_path = path;
    o.use_nvml = 0;
    sink_count sc = {0};
    o.sink = sink;
    o.user = &sc;
    dl_monitor *m;
    CHECK_OK(dl_monitor_create(&m, &o));
    if (!m)
        return;
    CHECK_OK(dl_monitor_start(m));
    usleep(400 * 1000);
    dl_monitor_stop(m);
    dl_sys_sample h[8];
    int n = dl_monitor_history(m, h, 8);
    CHECK_MSG(n == 4, "%d samples kept", n);
    for (int i = 1; i < n; i++)
        CHECK(h[i].t > h[i - 1].t);
    CHECK_MSG(sc.n >= 4, "sink called %d times", sc.n);
    dl_sys_sample last;
    CHECK(dl_monitor_latest(m, &last) && last.t == h[n - 1].t);
    CHECK(strstr(dl_monitor_gpu_status(m), "disabled") != NULL);
    dl_monitor_destroy(m);
    FILE *f = fopen(path, "r");
    char line[16384];
    int lines = 0, parsed = 0;
    while (f && fgets(line, sizeof line, f)) {
        lines++;
        cJSON *j = cJSON_Parse(line);
        if (j && cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(j, "cpu")) &&
            cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, "rss_mb")))
            parsed++;
        cJSON_Delete(j);
    }
    if (f)
        fclose(f);
    CHECK(lines == sc.n && parsed == lines);
    unlink(path);
}

/* The telemetry takes samples through the sink and hands them to a reader. */
static void test_telemetry_system(void)
{
    dl_telemetry *t;
    CHECK_OK(dl_telemetry_create(&t));
    dl_telemetry_snapshot *s = dl_telemetry_snapshot_create();
    CHECK(t && s);
    if (!t || !s)
        return;
    dl_monitor_options o;
    dl_monitor_options_default(&o);
    o.sink = dl_telemetry_monitor_sink;
    o.user = t;
    o.use_nvml = 0;
    dl_monitor *m;
    CHECK_OK(dl_monitor_create(&m, &o));
    for (int i = 0; i < DL_TELE_SYS_SAMPLES + 5; i++)
        dl_monitor_sample(m, NULL);
    dl_telemetry_set_gpu_status(t, dl_monitor_gpu_status(m));
    CHECK(dl_telemetry_read(t, s) == 1);
    CHECK(s->nsys == DL_TELE_SYS_SAMPLES);
    for (int i = 1; i < s->nsys; i++)
        CHECK(s->sys[i].t >= s->sys[i - 1].t);
    CHECK(s->sys[s->nsys - 1].rss_mb > 0);
    CHECK(strstr(s->gpu_status, "no GPU data") != NULL);
    CHECK(dl_telemetry_read(t, s) == 0); /* nothing new */
    dl_monitor_destroy(m);
    dl_telemetry_snapshot_destroy(s);
    dl_telemetry_destroy(t);
}

int main(void)
{
    RUN(test_sample_plausible);
    RUN(test_nvml_absent_reason);
    RUN(test_thread_ring_jsonl);
    RUN(test_telemetry_system);
    CHECK_EXIT();
}
