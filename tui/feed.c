/* feed.c - the live snapshot behind the workbench: writers under a short lock, a follower for run folders */
#include "tui/feed.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "engine/runlog.h"

struct dl_feed {
    pthread_mutex_t lock;
    dl_snapshot s;
    int stride;         /* step points: keep one in stride (thinning) */
    long offered;
    double last_hist;   /* when hist_sps last took a value */
};

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

dl_feed *dl_feed_create(void)
{
    dl_feed *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    pthread_mutex_init(&f->lock, NULL);
    f->stride = 1;
    f->s.eta_s = -1;
    return f;
}

void dl_feed_destroy(dl_feed *f)
{
    if (!f)
        return;
    pthread_mutex_destroy(&f->lock);
    free(f);
}

dl_snapshot *dl_feed_lock(dl_feed *f)
{
    pthread_mutex_lock(&f->lock);
    return &f->s;
}

void dl_feed_unlock(dl_feed *f) { pthread_mutex_unlock(&f->lock); }

void dl_feed_copy(dl_feed *f, dl_snapshot *out)
{
    pthread_mutex_lock(&f->lock);
    memcpy(out, &f->s, sizeof *out);
    pthread_mutex_unlock(&f->lock);
}

void dl_feed_reset_run(dl_feed *f)
{
    pthread_mutex_lock(&f->lock);
    dl_snapshot *s = &f->s;
    s->npts = s->nep = s->nlog = s->nprof = s->nhist_sps = 0;
    s->step = 0, s->epoch = 0, s->samples_per_s = 0, s->samples_per_s_before = 0;
    s->switched_from[0] = 0, s->message[0] = 0, s->run_dir[0] = 0;
    s->eta_s = -1, s->data_wait = 0;
    f->stride = 1, f->offered = 0;
    pthread_mutex_unlock(&f->lock);
}

static void push_hist(float *h, int *n, float v)
{
    if (*n == DL_SNAP_HIST) {
        memmove(h, h + 1, (DL_SNAP_HIST - 1) * sizeof *h);
        (*n)--;
    }
    h[(*n)++] = v;
}

/* Under the lock. */
static void add_step(dl_feed *f, const dl_step_info *i, double now)
{
    dl_snapshot *s = &f->s;
    if (f->offered++ % f->stride == 0) {
        if (s->npts == DL_SNAP_POINTS) { /* thin 2:1, then take half as many */
            for (int k = 0; k < DL_SNAP_POINTS / 2; k++)
                s->pts[k] = s->pts[2 * k + 1];
            s->npts = DL_SNAP_POINTS / 2;
            f->stride *= 2;
            f->offered = 1;
        }
        dl_snap_point *p = &s->pts[s->npts++];
        p->step = i->step;
        p->loss = (float)i->loss;
        p->acc = (float)i->acc;
    }
    s->step = i->step;
    s->epoch = i->epoch + 1;
    if (i->steps_per_epoch > 0) {
        s->steps_per_epoch = i->steps_per_epoch;
        if (s->epochs > 0 && s->total_steps <= 0)
            s->total_steps = i->steps_per_epoch * s->epochs;
    }
    s->samples_per_s = i->samples_per_s;
    s->lr = i->lr;
    s->data_wait = i->data_wait_share;
    if (s->state == DL_STATE_READY || s->state == DL_STATE_WATCHING)
        s->state = DL_STATE_RUNNING;
    if (s->total_steps > 0 && s->batch > 0 && i->samples_per_s > 0)
        s->eta_s = (double)(s->total_steps - i->step) * s->batch / i->samples_per_s;
    if (now - f->last_hist >= 0.5 || now < f->last_hist) {
        push_hist(s->hist_sps, &s->nhist_sps, (float)i->samples_per_s);
        f->last_hist = now;
    }
}

void dl_feed_step(dl_feed *f, const dl_step_info *i)
{
    double now = mono_s();
    pthread_mutex_lock(&f->lock);
    add_step(f, i, now);
    pthread_mutex_unlock(&f->lock);
}

static void add_epoch(dl_snapshot *s, long step, int epoch, double tl, double ta, double vl,
                      double va)
{
    if (s->nep == DL_SNAP_EPOCHS) {
        memmove(s->ep, s->ep + 1, (DL_SNAP_EPOCHS - 1) * sizeof *s->ep);
        s->nep--;
    }
    dl_snap_epoch *e = &s->ep[s->nep++];
    e->step = step, e->epoch = epoch;
    e->train_loss = (float)tl, e->train_acc = (float)ta;
    e->val_loss = (float)vl, e->val_acc = (float)va;
    if (epoch == 1 && s->steps_per_epoch <= 0 && step > 0) {
        s->steps_per_epoch = step;
        if (s->epochs > 0)
            s->total_steps = step * s->epochs;
    }
}

void dl_feed_epoch(dl_feed *f, long step, int epoch, double train_loss, double train_acc,
                   double val_loss, double val_acc)
{
    pthread_mutex_lock(&f->lock);
    add_epoch(&f->s, step, epoch, train_loss, train_acc, val_loss, val_acc);
    pthread_mutex_unlock(&f->lock);
}

/* Under the lock. */
static void add_event(dl_snapshot *s, const char *kind, const char *text, const char *when)
{
    /* a multi-line text (a Lua traceback) becomes several lines */
    const char *p = text;
    int first = 1;
    do {
        const char *nl = strchr(p, '\n');
        int len = nl ? (int)(nl - p) : (int)strlen(p);
        if (s->nlog == DL_SNAP_LOG) {
            memmove(s->log, s->log + 1, (DL_SNAP_LOG - 1) * sizeof *s->log);
            s->nlog--;
        }
        dl_snap_line *l = &s->log[s->nlog++];
        snprintf(l->kind, sizeof l->kind, "%s", first ? kind : "");
        snprintf(l->text, sizeof l->text, "%s%.*s", first ? "" : "  ", len, p);
        if (when) {
            snprintf(l->when, sizeof l->when, "%s", when);
        } else {
            time_t t = time(NULL);
            struct tm tm;
            localtime_r(&t, &tm);
            strftime(l->when, sizeof l->when, "%H:%M:%S", &tm);
        }
        s->log_total++;
        first = 0;
        p = nl ? nl + 1 : NULL;
    } while (p && *p);

    if (!strcmp(kind, "paused"))
        s->state = DL_STATE_PAUSED;
    else if (!strcmp(kind, "resumed") || !strcmp(kind, "started"))
        s->state = DL_STATE_RUNNING;
    else if (!strcmp(kind, "stop") || !strcmp(kind, "early_stop"))
        s->state = DL_STATE_STOPPING;
    else if (!strcmp(kind, "finished"))
        s->state = DL_STATE_FINISHED;
    else if (!strcmp(kind, "stopped"))
        s->state = DL_STATE_STOPPED;
    else if (!strcmp(kind, "failed"))
        s->state = DL_STATE_FAILED;
    else if (!strcmp(kind, "device")) {
        /* "step N: moved from cpu to cuda in 0.1 s" */
        char from[16], to[16];
        const char *m = strstr(text, "moved from ");
        if (m && sscanf(m, "moved from %15s to %15s", from, to) == 2) {
            snprintf(s->switched_from, sizeof s->switched_from, "%s", from);
            snprintf(s->device, sizeof s->device, "%s", to);
            s->samples_per_s_before = s->samples_per_s;
        }
    }
    if (!strcmp(kind, "error") || !strcmp(kind, "warning") || !strcmp(kind, "lua error") ||
        !strcmp(kind, "device") || !strcmp(kind, "failed"))
        snprintf(s->message, sizeof s->message, "%s: %s", kind, text);
}

void dl_feed_event(dl_feed *f, const char *kind, const char *text, const char *when)
{
    pthread_mutex_lock(&f->lock);
    add_event(&f->s, kind, text, when);
    pthread_mutex_unlock(&f->lock);
}

void dl_feed_profile(dl_feed *f, const dl_profiler *p)
{
    dl_prof_row rows[DL_SNAP_PROF];
    int n = dl_profiler_rows(p, DL_PROF_BY_OP, DL_PROF_SORT_TOTAL, rows, DL_SNAP_PROF);
    if (n > DL_SNAP_PROF)
        n = DL_SNAP_PROF;
    dl_prof_totals t;
    dl_profiler_totals(p, &t);
    pthread_mutex_lock(&f->lock);
    dl_snapshot *s = &f->s;
    for (int i = 0; i < n; i++) {
        dl_snap_prof *d = &s->prof[i];
        snprintf(d->name, sizeof d->name, "%.39s", rows[i].name);
        d->calls = rows[i].calls;
        d->total_ms = rows[i].total_ms;
        d->mean_ms = rows[i].mean_ms;
        d->pct = rows[i].pct_step;
        d->gflops = rows[i].gflops;
    }
    s->nprof = n;
    s->prof_step_ms = t.mean_step_ms;
    pthread_mutex_unlock(&f->lock);
}

void dl_feed_monitor_sink(void *feed, const dl_sys_sample *smp)
{
    dl_feed *f = feed;
    pthread_mutex_lock(&f->lock);
    f->s.sys = *smp;
    f->s.have_sys = 1;
    push_hist(f->s.hist_cpu, &f->s.nhist_cpu, (float)smp->cpu_total_pct);
    pthread_mutex_unlock(&f->lock);
}

/* --- runs table --------------------------------------------------------------- */

static double num(const cJSON *j, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *str(const cJSON *j, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int cmp_runs(const void *a, const void *b)
{
    return strcmp(((const dl_snap_run *)b)->folder, ((const dl_snap_run *)a)->folder);
}

void dl_feed_load_runs(dl_feed *f, const char *runs_dir)
{
    static dl_snap_run rows[DL_SNAP_RUNS * 4]; /* main thread only */
    int n = 0;
    DIR *d = opendir(runs_dir);
    struct dirent *e;
    while (d && (e = readdir(d)) && n < DL_SNAP_RUNS * 4) {
        if (e->d_name[0] == '.')
            continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s/summary.json", runs_dir, e->d_name);
        FILE *fp = fopen(path, "r");
        if (!fp)
            continue;
        char buf[16384];
        size_t len = fread(buf, 1, sizeof buf - 1, fp);
        fclose(fp);
        buf[len] = 0;
        cJSON *j = cJSON_Parse(buf);
        if (!j)
            continue;
        dl_snap_run *r = &rows[n++];
        memset(r, 0, sizeof *r);
        snprintf(r->folder, sizeof r->folder, "%.95s", e->d_name);
        snprintf(r->name, sizeof r->name, "%s", str(j, "name") ? str(j, "name") : "");
        snprintf(r->status, sizeof r->status, "%s", str(j, "status") ? str(j, "status") : "?");
        snprintf(r->device, sizeof r->device, "%s", str(j, "device") ? str(j, "device") : "-");
        double st = num(j, "steps");
        r->steps = isfinite(st) ? (long)st : 0;
        r->wall_s = num(j, "wall_s");
        const cJSON *fin = cJSON_GetObjectItemCaseSensitive(j, "final");
        r->val_acc = num(fin, "val_acc");
        r->val_loss = num(fin, "val_loss");
        cJSON_Delete(j);
    }
    if (d)
        closedir(d);
    qsort(rows, (size_t)n, sizeof *rows, cmp_runs);
    if (n > DL_SNAP_RUNS)
        n = DL_SNAP_RUNS;
    pthread_mutex_lock(&f->lock);
    memcpy(f->s.runs, rows, (size_t)n * sizeof *rows);
    f->s.nruns = n;
    snprintf(f->s.runs_dir, sizeof f->s.runs_dir, "%s", runs_dir);
    pthread_mutex_unlock(&f->lock);
}

/* --- following a run folder --------------------------------------------------------- */

/* Calls fn for each complete line appended to path since *off. */
static void follow_lines(const char *path, long *off, void (*fn)(dl_feed *, dl_follow *,
                                                                char *),
                         dl_feed *f, dl_follow *fw)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return;
    if (fseek(fp, *off, SEEK_SET) == 0) {
        char line[8192];
        for (;;) {
            long at = ftell(fp);
            if (!fgets(line, sizeof line, fp))
                break;
            size_t len = strlen(line);
            if (len == 0 || line[len - 1] != '\n') { /* torn: wait for the rest */
                if (len == sizeof line - 1) { /* overlong: skip it */
                    *off = ftell(fp);
                    continue;
                }
                *off = at;
                break;
            }
            line[len - 1] = 0;
            *off = ftell(fp);
            fn(f, fw, line);
        }
    }
    fclose(fp);
}

static void metrics_line(dl_feed *f, dl_follow *fw, char *line)
{
    (void)fw;
    cJSON *j = cJSON_Parse(line);
    const char *kind = str(j, "kind");
    if (!kind) {
        cJSON_Delete(j);
        return;
    }
    double step = num(j, "step"), epoch = num(j, "epoch");
    if (!strcmp(kind, "step") && isfinite(step)) {
        dl_step_info i;
        memset(&i, 0, sizeof i);
        i.step = (long)step;
        i.epoch = isfinite(epoch) ? (int)epoch - 1 : 0;
        i.loss = num(j, "loss");
        i.acc = isfinite(num(j, "acc")) ? num(j, "acc") : -1;
        i.lr = num(j, "lr");
        i.samples_per_s = isfinite(num(j, "samples_per_s")) ? num(j, "samples_per_s") : 0;
        i.data_wait_share = isfinite(num(j, "data_wait")) ? num(j, "data_wait") : 0;
        pthread_mutex_lock(&f->lock);
        i.steps_per_epoch = f->s.steps_per_epoch;
        add_step(f, &i, num(j, "time"));
        pthread_mutex_unlock(&f->lock);
    } else if (!strcmp(kind, "epoch") && isfinite(step)) {
        pthread_mutex_lock(&f->lock);
        add_epoch(&f->s, (long)step, isfinite(epoch) ? (int)epoch : 0, num(j, "train_loss"),
                  num(j, "train_acc"), num(j, "val_loss"), num(j, "val_acc"));
        pthread_mutex_unlock(&f->lock);
    }
    cJSON_Delete(j);
}

/* "2026-11-30T06:35:54Z kind: text" */
static void events_line(dl_feed *f, dl_follow *fw, char *line)
{
    (void)fw;
    char *sp = strchr(line, ' ');
    char *colon = sp ? strstr(sp + 1, ": ") : NULL;
    char when[12] = "";
    if (!sp || !colon) {
        dl_feed_event(f, "", line, "");
        return;
    }
    *sp = 0, *colon = 0;
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    if (strptime(line, "%Y-%m-%dT%H:%M:%SZ", &tm)) {
        time_t t = timegm(&tm);
        localtime_r(&t, &tm);
        strftime(when, sizeof when, "%H:%M:%S", &tm);
    }
    dl_feed_event(f, sp + 1, colon + 2, when);
}

static void system_line(dl_feed *f, dl_follow *fw, char *line)
{
    (void)fw;
    cJSON *j = cJSON_Parse(line);
    if (!j)
        return;
    dl_sys_sample s;
    memset(&s, 0, sizeof s);
    s.t = num(j, "t");
    s.cpu_total_pct = num(j, "cpu_total");
    s.proc_cpu_pct = num(j, "proc_cpu");
    s.rss_mb = num(j, "rss_mb");
    s.ram_used_mb = num(j, "ram_used_mb");
    s.ram_total_mb = num(j, "ram_total_mb");
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(j, "cpu"))
        if (s.ncpu < DL_MONITOR_MAX_CPUS && cJSON_IsNumber(c))
            s.cpu_pct[s.ncpu++] = (float)c->valuedouble;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(j, "gpu"))
    {
        if (s.ngpu >= DL_MONITOR_MAX_GPUS)
            break;
        dl_gpu_sample *g = &s.gpu[s.ngpu++];
        snprintf(g->name, sizeof g->name, "%s", str(c, "name") ? str(c, "name") : "");
        g->util_pct = num(c, "util");
        g->mem_used_mb = num(c, "mem_used_mb");
        g->mem_total_mb = num(c, "mem_total_mb");
        g->power_w = num(c, "power_w");
        g->temp_c = num(c, "temp_c");
    }
    cJSON_Delete(j);
    if (isfinite(s.cpu_total_pct))
        dl_feed_monitor_sink(f, &s);
}

int dl_feed_follow(dl_feed *f, dl_follow *fw)
{
    char path[1200];
    if (!fw->have_config) {
        snprintf(path, sizeof path, "%s/config.json", fw->dir);
        cJSON *c = dl_runlog_read_json(path);
        if (!c)
            return -1;
        pthread_mutex_lock(&f->lock);
        dl_snapshot *s = &f->s;
        snprintf(s->run_name, sizeof s->run_name, "%s", str(c, "name") ? str(c, "name") : "");
        snprintf(s->device, sizeof s->device, "%s", str(c, "device") ? str(c, "device") : "");
        snprintf(s->precision, sizeof s->precision, "%s",
                 str(c, "precision") ? str(c, "precision") : "");
        snprintf(s->script, sizeof s->script, "%s", str(c, "script") ? str(c, "script") : "");
        snprintf(s->run_dir, sizeof s->run_dir, "%s", fw->dir);
        double ep = num(c, "epochs"), b = num(c, "batch"), a = num(c, "accumulate");
        double ms = num(c, "max_steps");
        s->epochs = isfinite(ep) ? (int)ep : 0;
        s->batch = (int)((isfinite(b) ? b : 0) * (isfinite(a) && a > 0 ? a : 1));
        if (isfinite(ms) && ms > 0)
            s->total_steps = (long)ms;
        s->state = DL_STATE_WATCHING;
        pthread_mutex_unlock(&f->lock);
        cJSON_Delete(c);
        fw->have_config = 1;
    }
    snprintf(path, sizeof path, "%s/metrics.jsonl", fw->dir);
    follow_lines(path, &fw->off_metrics, metrics_line, f, fw);
    snprintf(path, sizeof path, "%s/events.log", fw->dir);
    follow_lines(path, &fw->off_events, events_line, f, fw);
    snprintf(path, sizeof path, "%s/system.jsonl", fw->dir);
    follow_lines(path, &fw->off_system, system_line, f, fw);
    snprintf(path, sizeof path, "%s/summary.json", fw->dir);
    cJSON *sum = dl_runlog_read_json(path);
    snprintf(path, sizeof path, "%s/control.sock", fw->dir);
    struct stat st;
    int live = stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
    pthread_mutex_lock(&f->lock);
    f->s.live = live;
    const char *status = str(sum, "status");
    if (status) {
        dl_run_state was = f->s.state;
        if (!strcmp(status, "finished"))
            f->s.state = DL_STATE_FINISHED;
        else if (!strcmp(status, "stopped"))
            f->s.state = DL_STATE_STOPPED;
        else if (!strcmp(status, "failed"))
            f->s.state = DL_STATE_FAILED;
        else if (was == DL_STATE_WATCHING || was == DL_STATE_FINISHED)
            f->s.state = DL_STATE_RUNNING;
        if (f->s.state >= DL_STATE_FINISHED && f->s.state <= DL_STATE_FAILED)
            f->s.eta_s = -1, f->s.elapsed_s = num(sum, "wall_s");
    }
    pthread_mutex_unlock(&f->lock);
    cJSON_Delete(sum);
    return 0;
}
