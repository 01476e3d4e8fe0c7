/* telemetry.c - the locked store a run publishes into and readers copy snapshots from */
#include "engine/observe/telemetry.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "engine/base/error.h"
#include "engine/rundir/runlog.h"

struct dl_telemetry {
    pthread_mutex_t lock;
    dl_telemetry_snapshot st; /* events and sys are rings here: see ev_head, sys_head */
    int ev_head, sys_head;
    double t_start, t_end;    /* monotonic seconds; t_end when frozen */
    int started, frozen;
    double flops_per_sample;  /* forward + backward, for the cost */
    long torn_at[3];          /* following: offset + 1 of a torn last line reported, per file */
};

static const char *state_names[] = {"idle",     "preparing", "running", "paused",
                                    "finished", "stopped",   "failed"};

const char *dl_tele_state_name(dl_tele_state s)
{
    return s >= DL_TELE_IDLE && s <= DL_TELE_FAILED ? state_names[s] : "?";
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int dl_telemetry_create(dl_telemetry **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return dl_error(DL_ENOMEM, "out of memory creating the telemetry store");
    pthread_mutex_init(&(*out)->lock, NULL);
    (*out)->st.run.workers = -1;
    (*out)->st.seq = 1;
    return DL_OK;
}

void dl_telemetry_destroy(dl_telemetry *t)
{
    if (!t)
        return;
    pthread_mutex_destroy(&t->lock);
    free(t);
}

/* --- writers --------------------------------------------------------------------------- */

static void set_state_locked(dl_telemetry *t, dl_tele_state s)
{
    t->st.run.state = s;
    if (s == DL_TELE_RUNNING && !t->started) {
        t->started = 1;
        t->t_start = mono_s() - t->st.run.elapsed_s; /* a resumed run keeps its time */
    }
    if ((s == DL_TELE_FINISHED || s == DL_TELE_STOPPED || s == DL_TELE_FAILED) && !t->frozen) {
        t->frozen = 1;
        t->t_end = mono_s();
    }
}

void dl_telemetry_set_run(dl_telemetry *t, const dl_tele_run *info)
{
    pthread_mutex_lock(&t->lock);
    t->st.run = *info;
    set_state_locked(t, info->state);
    t->st.seq++;
    pthread_mutex_unlock(&t->lock);
}

void dl_telemetry_set_state(dl_telemetry *t, dl_tele_state s, const char *message)
{
    pthread_mutex_lock(&t->lock);
    set_state_locked(t, s);
    if (message)
        snprintf(t->st.run.message, sizeof t->st.run.message, "%s", message);
    t->st.seq++;
    pthread_mutex_unlock(&t->lock);
}

static dl_tele_series *series_locked(dl_telemetry *t, const char *name)
{
    for (int i = 0; i < t->st.nseries; i++)
        if (!strcmp(t->st.series[i].name, name))
            return &t->st.series[i];
    if (t->st.nseries == DL_TELE_MAX_SERIES)
        return NULL;
    dl_tele_series *s = &t->st.series[t->st.nseries++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->stride = 1;
    return s;
}

static void point_locked(dl_telemetry *t, const char *name, double x, double y)
{
    dl_tele_series *s = series_locked(t, name);
    if (!s)
        return;
    if (s->offered++ % s->stride)
        return;
    if (s->n == DL_TELE_POINTS) {
        /* full: keep every other point, take later ones half as often */
        for (int i = 0; i < DL_TELE_POINTS / 2; i++) {
            s->x[i] = s->x[2 * i];
            s->y[i] = s->y[2 * i];
        }
        s->n = DL_TELE_POINTS / 2;
        s->stride *= 2;
        s->offered = 1;
    }
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->n++;
}

void dl_telemetry_point(dl_telemetry *t, const char *series, double x, double y)
{
    pthread_mutex_lock(&t->lock);
    point_locked(t, series, x, y);
    t->st.seq++;
    pthread_mutex_unlock(&t->lock);
}

void dl_telemetry_step(dl_telemetry *t, const dl_step_info *i)
{
    pthread_mutex_lock(&t->lock);
    dl_tele_run *r = &t->st.run;
    if (r->state == DL_TELE_IDLE || r->state == DL_TELE_PREPARING)
        set_state_locked(t, DL_TELE_RUNNING);
    r->step = i->step;
    r->epoch = i->epoch;
    if (i->steps_per_epoch > 0)
        r->steps_per_epoch = i->steps_per_epoch;
    r->samples_per_s = i->samples_per_s;
    r->data_wait_share = i->data_wait_share;
    r->lr = i->lr;
    r->grad_norm = i->grad_norm;
    r->loss_scale = i->loss_scale;
    r->skipped_steps = i->skipped_steps;
    if (!isfinite(i->loss))
        r->nonfinite = 1;
    double x = (double)i->step;
    point_locked(t, "loss", x, i->loss);
    if (i->acc >= 0)
        point_locked(t, "acc", x, i->acc);
    point_locked(t, "lr", x, i->lr);
    point_locked(t, "samples_per_s", x, i->samples_per_s);
    point_locked(t, "data_wait", x, i->data_wait_share);
    if (isfinite(i->grad_norm))
        point_locked(t, "grad_norm", x, i->grad_norm);
    if (i->loss_scale != 1)
        point_locked(t, "loss_scale", x, i->loss_scale);
    t->st.seq++;
    pthread_mutex_unlock(&t->lock);
}

void dl_telemetry_epoch(dl_telemetry *t, const dl_epoch_info *i)
{
    pthread_mutex_lock(&t->lock);
    double x = i->epoch + 1;
    point_locked(t, "train_loss", x, i->train_loss);
    if (isfinite(i->train_acc))
        point_locked(t, "train_acc", x, i->train_acc);
    if (isfinite(i->val_loss))
        point_locked(t, "val_loss", x, i->val_loss);
    if (isfinite(i->val_acc))
        point_locked(t, "val_acc", x, i->val_acc);
    if (!isfinite(i->train_loss))
        t->st.run.nonfinite = 1;
    t->st.seq++;
    pthread_mutex_unlock(&t->lock);
}

static void event_locked(dl_telemetry *t, double when, const char *kind, const char *text)
{
    int slot;
    if (t->st.nevents < DL_TELE_MAX_EVENTS) {
        slot = (t->ev_head + t->st.nevents++) % DL_TELE_MAX_EVENTS;
    } else {
        slot = t->ev_head;
        t->ev_head = (t->ev_head + 1) % DL_TELE_MAX_EVENTS;
    }
    dl_tele_event *e = &t->st.events[slot];
    e->t = when;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    e->wall = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    snprintf(e->kind, sizeof e->kind, "%s", kind);
    snprintf(e->text, sizeof e->text, "%s", text);
    t->st.events_total++;
    t->st.seq++;
}

void dl_telemetry_event(dl_telemetry *t, const char *kind, const char *text)
{
    pthread_mutex_lock(&t->lock);
    double when = t->started ? mono_s() - t->t_start : 0;
    event_locked(t, when, kind, text);
    pthread_mutex_unlock(&t->lock);
}

void dl_telemetry_profile(dl_telemetry *t, const dl_profiler *p)
{
    /* built outside the lock: the profiler belongs to the calling thread */
    static _Thread_local dl_prof_row ops[DL_TELE_MAX_ROWS], layers[DL_TELE_MAX_ROWS];
    dl_prof_totals tot;
    dl_profiler_totals(p, &tot);
    int no = dl_profiler_rows(p, DL_PROF_BY_OP, DL_PROF_SORT_TOTAL, ops, DL_TELE_MAX_ROWS);
    int nl = dl_profiler_rows(p, DL_PROF_BY_LAYER, DL_PROF_SORT_NONE, layers, DL_TELE_MAX_ROWS);
    no = no < DL_TELE_MAX_ROWS ? no : DL_TELE_MAX_ROWS;
    nl = nl < DL_TELE_MAX_ROWS ? nl : DL_TELE_MAX_ROWS;
    pthread_mutex_lock(&t->lock);
    t->st.prof_enabled = dl_profiler_enabled(p);
    t->st.prof = tot;
    t->st.nops = no;
    t->st.nlayers = nl;
    memcpy(t->st.ops, ops, (size_t)no * sizeof *ops);
    memcpy(t->st.layers, layers, (size_t)nl * sizeof *layers);
    t->st.seq++;
    pthread_mutex_unlock(&t->lock);
}

void dl_telemetry_system(dl_telemetry *t, const dl_sys_sample *s)
{
    pthread_mutex_lock(&t->lock);
    int slot;
    if (t->st.nsys < DL_TELE_SYS_SAMPLES) {
        slot = (t->sys_head + t->st.nsys++) % DL_TELE_SYS_SAMPLES;
    } else {
        slot = t->sys_head;
        t->sys_head = (t->sys_head + 1) % DL_TELE_SYS_SAMPLES;
    }
    t->st.sys[slot] = *s;
    t->st.seq++;
    pthread_mutex_unlock(&t->lock);
}

void dl_telemetry_monitor_sink(void *telemetry, const dl_sys_sample *s)
{
    dl_telemetry_system(telemetry, s);
}

void dl_telemetry_set_gpu_status(dl_telemetry *t, const char *text)
{
    pthread_mutex_lock(&t->lock);
    snprintf(t->st.gpu_status, sizeof t->st.gpu_status, "%s", text);
    t->st.seq++;
    pthread_mutex_unlock(&t->lock);
}

void dl_telemetry_loader(dl_telemetry *t, const dl_loader_stats *s)
{
    pthread_mutex_lock(&t->lock);
    t->st.loader = *s;
    t->st.have_loader = 1;
    t->st.seq++;
    pthread_mutex_unlock(&t->lock);
}

void dl_telemetry_flag_oom(dl_telemetry *t, const char *text)
{
    pthread_mutex_lock(&t->lock);
    t->st.run.oom = 1;
    snprintf(t->st.run.oom_text, sizeof t->st.run.oom_text, "%s", text ? text : "");
    t->st.seq++;
    pthread_mutex_unlock(&t->lock);
}

void dl_telemetry_flag_nonfinite(dl_telemetry *t)
{
    pthread_mutex_lock(&t->lock);
    t->st.run.nonfinite = 1;
    t->st.seq++;
    pthread_mutex_unlock(&t->lock);
}

void dl_telemetry_set_cost(dl_telemetry *t, double price_per_hour, double peak_flops,
                           const char *peak_source)
{
    pthread_mutex_lock(&t->lock);
    t->st.price_per_hour = price_per_hour;
    t->st.peak_flops = peak_flops;
    snprintf(t->st.peak_source, sizeof t->st.peak_source, "%s", peak_source ? peak_source : "");
    t->st.seq++;
    pthread_mutex_unlock(&t->lock);
}

void dl_telemetry_set_model_flops(dl_telemetry *t, double train_flops_per_sample)
{
    pthread_mutex_lock(&t->lock);
    t->flops_per_sample = train_flops_per_sample;
    t->st.seq++;
    pthread_mutex_unlock(&t->lock);
}

void dl_telemetry_reset(dl_telemetry *t)
{
    pthread_mutex_lock(&t->lock);
    dl_telemetry_snapshot *s = &t->st;
    memset(&s->run, 0, sizeof s->run);
    s->run.workers = -1;
    s->nseries = 0;
    s->prof_enabled = 0;
    memset(&s->prof, 0, sizeof s->prof);
    s->nops = s->nlayers = 0;
    s->have_loader = 0;
    memset(&s->loader, 0, sizeof s->loader);
    s->nevents = 0;
    s->events_total = 0;
    t->ev_head = 0;
    t->started = t->frozen = 0;
    t->t_start = t->t_end = 0;
    t->flops_per_sample = 0;
    s->seq++;
    pthread_mutex_unlock(&t->lock);
}

/* --- readers ---------------------------------------------------------------------------- */

dl_telemetry_snapshot *dl_telemetry_snapshot_create(void)
{
    return calloc(1, sizeof(dl_telemetry_snapshot));
}

void dl_telemetry_snapshot_destroy(dl_telemetry_snapshot *s) { free(s); }

static double gpu_energy(const dl_telemetry_snapshot *s)
{
    if (s->nsys == 0)
        return -1;
    const dl_sys_sample *last = &s->sys[s->nsys - 1];
    double e = -1;
    for (int g = 0; g < last->ngpu; g++)
        if (last->gpu[g].energy_j >= 0)
            e = (e < 0 ? 0 : e) + last->gpu[g].energy_j;
    return e;
}

int dl_telemetry_read(dl_telemetry *t, dl_telemetry_snapshot *s)
{
    pthread_mutex_lock(&t->lock);
    if (s->seq == t->st.seq && !(t->started && !t->frozen)) {
        pthread_mutex_unlock(&t->lock);
        return 0;
    }
    /* the fixed part, then the rings unrolled oldest first */
    size_t head = offsetof(dl_telemetry_snapshot, series);
    memcpy(s, &t->st, head);
    s->nseries = t->st.nseries;
    for (int i = 0; i < t->st.nseries; i++) {
        const dl_tele_series *a = &t->st.series[i];
        dl_tele_series *b = &s->series[i];
        memcpy(b, a, offsetof(dl_tele_series, x));
        memcpy(b->x, a->x, (size_t)a->n * sizeof *a->x);
        memcpy(b->y, a->y, (size_t)a->n * sizeof *a->y);
    }
    s->prof_enabled = t->st.prof_enabled;
    s->prof = t->st.prof;
    s->nops = t->st.nops;
    s->nlayers = t->st.nlayers;
    memcpy(s->ops, t->st.ops, (size_t)s->nops * sizeof *s->ops);
    memcpy(s->layers, t->st.layers, (size_t)s->nlayers * sizeof *s->layers);
    s->nsys = t->st.nsys;
    for (int i = 0; i < s->nsys; i++)
        s->sys[i] = t->st.sys[(t->sys_head + i) % DL_TELE_SYS_SAMPLES];
    memcpy(s->gpu_status, t->st.gpu_status, sizeof s->gpu_status);
    s->have_loader = t->st.have_loader;
    s->loader = t->st.loader;
    s->nevents = t->st.nevents;
    s->events_total = t->st.events_total;
    for (int i = 0; i < s->nevents; i++)
        s->events[i] = t->st.events[(t->ev_head + i) % DL_TELE_MAX_EVENTS];
    s->price_per_hour = t->st.price_per_hour;
    s->peak_flops = t->st.peak_flops;
    memcpy(s->peak_source, t->st.peak_source, sizeof s->peak_source);
    if (t->started)
        s->run.elapsed_s = (t->frozen ? t->t_end : mono_s()) - t->t_start;
    double fps = t->flops_per_sample;
    pthread_mutex_unlock(&t->lock);

    /* cost, from the copy */
    dl_cost_input ci;
    memset(&ci, 0, sizeof ci);
    ci.elapsed_s = s->run.elapsed_s;
    if (s->prof.steps > 0 && s->prof.step_ms > 0) {
        ci.step_s = s->prof.step_ms * 1e-3;
        ci.flops_done = s->prof.flops;
    } else {
        ci.step_s = s->run.elapsed_s;
        ci.flops_done = fps * (double)s->run.step * s->run.batch *
                        (s->run.accumulate > 0 ? s->run.accumulate : 1);
    }
    ci.peak_flops = s->peak_flops;
    ci.progress = s->run.total_steps > 0 ? (double)s->run.step / (double)s->run.total_steps : 0;
    ci.price_per_hour = s->price_per_hour;
    ci.energy_j = gpu_energy(s);
    ci.energy_epoch_j = -1;
    dl_cost_estimate(&ci, &s->cost);
    return 1;
}

const dl_tele_series *dl_telemetry_series(const dl_telemetry_snapshot *s, const char *name)
{
    for (int i = 0; i < s->nseries; i++)
        if (!strcmp(s->series[i].name, name))
            return &s->series[i];
    return NULL;
}

void dl_telemetry_advisor_input(const dl_telemetry_snapshot *s, dl_advisor_input *in)
{
    dl_advisor_input_init(in);
    const dl_tele_run *r = &s->run;
    if (s->prof.steps > 0) {
        in->step_ms = s->prof.mean_step_ms;
        in->data_wait_share = s->prof.step_ms > 0 ? s->prof.data_ms / s->prof.step_ms : -1;
        in->leaf_ops_per_step = s->prof.leaf_calls_per_step;
        in->mean_op_ms = s->prof.mean_leaf_ms;
    } else if (r->step > 0) {
        in->data_wait_share = r->data_wait_share;
    }
    in->workers = r->workers;
    if (s->have_loader) {
        in->queue_fill = s->loader.queue_fill;
        in->queue_size = s->loader.queue_size;
    }
    in->on_gpu = !strcmp(r->device, "cuda");
    snprintf(in->gpu_name, sizeof in->gpu_name, "%s", r->gpu_name);
    if (s->nsys > 0 && s->sys[s->nsys - 1].ngpu > 0) {
        const dl_gpu_sample *g = &s->sys[s->nsys - 1].gpu[0];
        in->gpu_util_pct = g->util_pct;
        in->gpu_mem_used_mb = g->mem_used_mb;
        in->gpu_mem_total_mb = g->mem_total_mb;
        if (!in->gpu_name[0])
            snprintf(in->gpu_name, sizeof in->gpu_name, "%s", g->name);
    }
    in->precision = r->precision;
    in->batch = r->batch;
    in->accumulate = r->accumulate;
    in->oom = r->oom;
    snprintf(in->oom_text, sizeof in->oom_text, "%s", r->oom_text);
    in->nonfinite = r->nonfinite;
    in->skipped_steps = r->skipped_steps;
    in->lr = r->step > 0 ? r->lr : -1;
    const dl_tele_series *tl = dl_telemetry_series(s, "train_loss");
    const dl_tele_series *vl = dl_telemetry_series(s, "val_loss");
    if (tl && vl && tl->stride == 1 && vl->stride == 1) {
        in->train_loss = tl->y;
        in->val_loss = vl->y;
        in->nepochs = tl->n < vl->n ? tl->n : vl->n;
    }
    const dl_tele_series *sl = dl_telemetry_series(s, "loss");
    if (sl) {
        int keep = sl->n < 64 ? sl->n : 64; /* the recent past */
        in->step_loss = sl->y + (sl->n - keep);
        in->nsteps = keep;
    }
}

int dl_telemetry_advise(const dl_telemetry_snapshot *s, dl_advice *out, int max)
{
    dl_advisor_input in;
    dl_telemetry_advisor_input(s, &in);
    return dl_advisor_run(&in, out, max);
}

/* --- following a run folder -------------------------------------------------------------- */

/* The 1-based number of the line that starts at byte off of path. */
static long line_number(const char *path, long off)
{
    FILE *f = fopen(path, "r");
    long n = 1;
    for (int c; f && off-- > 0 && (c = getc(f)) != EOF;)
        n += c == '\n';
    if (f)
        fclose(f);
    return n;
}

/* Reads complete new lines of dir/name from *off; calls fn for each. A
 * line fn cannot read (fn returns < 0) is skipped with a warning naming
 * the file and line. A last line without its newline is left for the next
 * call while a process holds the run's lock (it is being written); when
 * none does, its writer was killed mid-line: it is reported once, as torn,
 * and ignored (a resume cuts it off and appends from there). */
static int follow_lines(dl_telemetry *t, const char *dir, const char *name, long *off,
                        long *torn_at, int (*fn)(dl_telemetry *t, char *line))
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    if (fseek(f, *off, SEEK_SET) != 0) {
        fclose(f);
        return 0;
    }
    char *line = NULL, msg[240];
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        if (line[n - 1] != '\n') {
            if (*torn_at != *off + 1 && dl_runlog_check_free(dir) == DL_OK) {
                *torn_at = *off + 1;
                snprintf(msg, sizeof msg, "%s line %ld: cut short (%ld bytes without a newline: "
                         "its writer was killed mid-line): ignored",
                         name, line_number(path, *off), (long)n);
                dl_telemetry_event(t, "warning", msg);
            }
            dl_error_clear();
            break;
        }
        line[n - 1] = 0;
        if (fn(t, line) < 0) {
            snprintf(msg, sizeof msg, "%s line %ld: not a JSON object (a torn or damaged "
                     "line): ignored", name, line_number(path, *off));
            dl_telemetry_event(t, "warning", msg);
        }
        *off += (long)n;
    }
    free(line);
    fclose(f);
    return 1;
}

static int metrics_line(dl_telemetry *t, char *line)
{
    cJSON *j = cJSON_Parse(line);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return line[strspn(line, " \t\r")] ? -1 : 0;
    }
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(j, "kind");
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(j, "step");
    const cJSON *epoch = cJSON_GetObjectItemCaseSensitive(j, "epoch");
    int is_epoch = cJSON_IsString(kind) && !strcmp(kind->valuestring, "epoch");
    double x = is_epoch ? (cJSON_IsNumber(epoch) ? epoch->valuedouble : 0)
                        : (cJSON_IsNumber(step) ? step->valuedouble : 0);
    pthread_mutex_lock(&t->lock);
    dl_tele_run *r = &t->st.run;
    if (cJSON_IsNumber(step))
        r->step = (long)step->valuedouble;
    if (cJSON_IsNumber(epoch))
        r->epoch = (int)epoch->valuedouble - 1;
    const cJSON *time = cJSON_GetObjectItemCaseSensitive(j, "time");
    if (cJSON_IsNumber(time))
        r->elapsed_s = time->valuedouble;
    if (is_epoch && r->steps_per_epoch <= 0 && cJSON_IsNumber(step) && cJSON_IsNumber(epoch) &&
        epoch->valuedouble >= 1 && step->valuedouble > 0) {
        /* a resumed run may start mid-epoch: the first epoch line still ends epoch k */
        r->steps_per_epoch = (long)(step->valuedouble / epoch->valuedouble + 0.5);
        if (r->total_steps <= 0 && r->epochs > 0)
            r->total_steps = r->steps_per_epoch * r->epochs;
    }
    for (const cJSON *c = j->child; c; c = c->next) {
        if (!c->string || !strcmp(c->string, "kind") || !strcmp(c->string, "step") ||
            !strcmp(c->string, "epoch") || !strcmp(c->string, "time"))
            continue;
        double v = cJSON_IsNumber(c) ? c->valuedouble : NAN; /* null: not finite */
        point_locked(t, c->string, x, v);
        if (!is_epoch) {
            if (!strcmp(c->string, "samples_per_s"))
                r->samples_per_s = v;
            else if (!strcmp(c->string, "data_wait"))
                r->data_wait_share = v;
            else if (!strcmp(c->string, "lr"))
                r->lr = v;
            else if (!strcmp(c->string, "grad_norm"))
                r->grad_norm = v;
            else if (!strcmp(c->string, "loss") && !isfinite(v))
                r->nonfinite = 1;
        }
    }
    t->st.seq++;
    pthread_mutex_unlock(&t->lock);
    cJSON_Delete(j);
    return 0;
}

static int events_line(dl_telemetry *t, char *line)
{
    /* "<ISO time> <kind>: <text>" */
    char *sp = strchr(line, ' ');
    char *colon = sp ? strstr(sp + 1, ": ") : NULL;
    double wall = 0;
    if (sp) {
        struct tm tm;
        memset(&tm, 0, sizeof tm);
        *sp = 0;
        const char *end = strptime(line, "%Y-%m-%dT%H:%M:%S", &tm);
        if (end && (*end == 'Z' || *end == '.' || !*end))
            wall = (double)timegm(&tm);
        *sp = ' ';
    }
    pthread_mutex_lock(&t->lock);
    if (!sp || !colon) {
        event_locked(t, 0, "log", line);
        t->st.events[(t->ev_head + t->st.nevents - 1) % DL_TELE_MAX_EVENTS].wall = wall;
    } else {
        *colon = 0;
        event_locked(t, 0, sp + 1, colon + 2);
        t->st.events[(t->ev_head + t->st.nevents - 1) % DL_TELE_MAX_EVENTS].wall = wall;
        /* a watched run's pause shows in its state, as a live one's does */
        dl_tele_state st = t->st.run.state;
        if (!strcmp(sp + 1, "paused") && st == DL_TELE_RUNNING)
            t->st.run.state = DL_TELE_PAUSED;
        else if (!strcmp(sp + 1, "resumed") && st == DL_TELE_PAUSED)
            t->st.run.state = DL_TELE_RUNNING;
        if (!strcmp(sp + 1, "failed") && strstr(colon + 2, "out of memory")) {
            t->st.run.oom = 1;
            snprintf(t->st.run.oom_text, sizeof t->st.run.oom_text, "%s", colon + 2);
        }
    }
    pthread_mutex_unlock(&t->lock);
    return 0;
}

static double num(const cJSON *o, const char *k, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static int system_line(dl_telemetry *t, char *line)
{
    cJSON *j = cJSON_Parse(line);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return line[strspn(line, " \t\r")] ? -1 : 0;
    }
    dl_sys_sample *s = calloc(1, sizeof *s);
    if (s) {
        s->t = num(j, "t", 0);
        s->unix_time = num(j, "time", 0);
        s->cpu_total_pct = num(j, "cpu_total", 0);
        s->proc_cpu_pct = num(j, "proc_cpu", 0);
        s->rss_mb = num(j, "rss_mb", 0);
        s->ram_used_mb = num(j, "ram_used_mb", 0);
        s->ram_total_mb = num(j, "ram_total_mb", 0);
        const cJSON *c, *cpu = cJSON_GetObjectItemCaseSensitive(j, "cpu");
        cJSON_ArrayForEach(c, cpu)
        {
            if (s->ncpu < DL_MONITOR_MAX_CPUS && cJSON_IsNumber(c))
                s->cpu_pct[s->ncpu++] = (float)c->valuedouble;
        }
        const cJSON *gpu = cJSON_GetObjectItemCaseSensitive(j, "gpu");
        cJSON_ArrayForEach(c, gpu)
        {
            if (s->ngpu == DL_MONITOR_MAX_GPUS)
                break;
            dl_gpu_sample *g = &s->gpu[s->ngpu++];
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "name");
            snprintf(g->name, sizeof g->name, "%s", cJSON_IsString(name) ? name->valuestring : "");
            g->util_pct = num(c, "util", -1);
            g->mem_util_pct = num(c, "mem_util", -1);
            g->mem_used_mb = num(c, "mem_used_mb", -1);
            g->mem_total_mb = num(c, "mem_total_mb", -1);
            g->power_w = num(c, "power_w", -1);
            g->temp_c = num(c, "temp_c", -1);
            g->sm_clock_mhz = num(c, "sm_clock_mhz", -1);
            g->pcie_rx_mbps = num(c, "pcie_rx_mbps", -1);
            g->pcie_tx_mbps = num(c, "pcie_tx_mbps", -1);
            g->energy_j = num(c, "energy_j", -1);
        }
        dl_telemetry_system(t, s);
        free(s);
    }
    cJSON_Delete(j);
    return 0;
}

static cJSON *read_json(const char *dir, const char *name, double *mtime, int only_if_newer)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    if (stat(path, &st) != 0)
        return NULL;
    double m = (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec * 1e-9;
    if (only_if_newer && m == *mtime)
        return NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc((size_t)st.st_size + 1);
    size_t n = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
    fclose(f);
    if (!buf)
        return NULL;
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    if (j)
        *mtime = m;
    return j;
}

static int rows_from_json(const cJSON *arr, dl_prof_row *rows, int max)
{
    int n = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, arr)
    {
        if (n == max)
            break;
        dl_prof_row *r = &rows[n++];
        memset(r, 0, sizeof *r);
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
        const cJSON *cat = cJSON_GetObjectItemCaseSensitive(o, "cat");
        snprintf(r->name, sizeof r->name, "%s", cJSON_IsString(name) ? name->valuestring : "");
        snprintf(r->kind, sizeof r->kind, "%s", cJSON_IsString(kind) ? kind->valuestring : "");
        r->cat = DL_PROF_OTHER;
        for (int c = 0; c < DL_PROF_NCAT && cJSON_IsString(cat); c++)
            if (!strcmp(cat->valuestring, dl_prof_cat_name((dl_prof_cat)c)))
                r->cat = (dl_prof_cat)c;
        r->depth = (int)num(o, "depth", 0);
        r->calls = (long)num(o, "calls", 0);
        r->total_ms = num(o, "total_ms", 0);
        r->self_ms = num(o, "self_ms", 0);
        r->fwd_ms = num(o, "fwd_ms", 0);
        r->bwd_ms = num(o, "bwd_ms", 0);
        r->flops = num(o, "flops", 0);
        r->bytes = num(o, "bytes", 0);
    }
    return n;
}

static void finish_rows(dl_prof_row *rows, int n, double step_ms, int use_self)
{
    for (int i = 0; i < n; i++) {
        dl_prof_row *r = &rows[i];
        r->mean_ms = r->calls ? r->total_ms / (double)r->calls : 0;
        r->pct_step = step_ms > 0 ? 100 * r->self_ms / step_ms : 0;
        double ms = use_self ? r->self_ms : r->total_ms;
        r->gflops = ms > 0 ? r->flops / ms * 1e-6 : 0;
        r->gbps = ms > 0 ? r->bytes / ms * 1e-6 : 0;
    }
}

int dl_telemetry_follow(dl_telemetry *t, dl_tele_follow *f)
{
    if (!f->have_config) {
        double mt = 0;
        cJSON *c = read_json(f->dir, "config.json", &mt, 0);
        if (!c)
            return dl_error(DL_EIO, "%s: not a run folder (no readable config.json)", f->dir);
        pthread_mutex_lock(&t->lock);
        dl_tele_run *r = &t->st.run;
        const cJSON *v;
        if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(c, "name")))
            snprintf(r->name, sizeof r->name, "%s", v->valuestring);
        if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(c, "device")))
            snprintf(r->device, sizeof r->device, "%s", v->valuestring);
        if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(c, "backend")))
            snprintf(r->device_desc, sizeof r->device_desc, "%s", v->valuestring);
        if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(c, "precision"))) {
            int p = dl_precision_parse(v->valuestring);
            r->precision = p < 0 ? DL_PREC_F32 : (dl_precision)p;
        }
        r->batch = (int)num(c, "batch", 0);
        r->accumulate = (int)num(c, "accumulate", 1);
        r->epochs = (int)num(c, "epochs", 0);
        if (num(c, "max_steps", 0) > 0)
            r->total_steps = (long)num(c, "max_steps", 0);
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(c, "data");
        r->workers = (int)num(data, "workers", -1);
        /* runs written before train_flops_per_sample: 3 x forward */
        t->flops_per_sample = num(c, "train_flops_per_sample", 3 * num(c, "flops_per_sample", 0));
        snprintf(r->run_dir, sizeof r->run_dir, "%s", f->dir);
        if (r->state == DL_TELE_IDLE)
            r->state = DL_TELE_RUNNING;
        t->st.seq++;
        pthread_mutex_unlock(&t->lock);
        cJSON_Delete(c);
        f->have_config = 1;
    }
    char mpath[1200];
    struct stat mst;
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", f->dir);
    if (stat(mpath, &mst) == 0) {
        /* replaced by a resume (another file), or cut: what was read may
         * be gone (a "stop" record, steps after the checkpoint), so the
         * series start again from the top */
        if (f->metrics_ino && ((unsigned long long)mst.st_ino != f->metrics_ino ||
                               (long)mst.st_size < f->off_metrics)) {
            pthread_mutex_lock(&t->lock);
            t->st.nseries = 0; /* in a follower, only metrics.jsonl feeds series */
            t->st.seq++;
            pthread_mutex_unlock(&t->lock);
            f->off_metrics = 0;
            t->torn_at[0] = 0;
        }
        f->metrics_ino = (unsigned long long)mst.st_ino;
    }
    follow_lines(t, f->dir, "metrics.jsonl", &f->off_metrics, &t->torn_at[0], metrics_line);
    follow_lines(t, f->dir, "events.log", &f->off_events, &t->torn_at[1], events_line);
    follow_lines(t, f->dir, "system.jsonl", &f->off_system, &t->torn_at[2], system_line);
    cJSON *p = read_json(f->dir, "profile.json", &f->profile_mtime, 1);
    if (p) {
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(p, "dlbench");
        pthread_mutex_lock(&t->lock);
        dl_prof_totals *tot = &t->st.prof;
        memset(tot, 0, sizeof *tot);
        tot->steps = (long)num(meta, "steps", 0);
        tot->step_ms = num(meta, "step_ms", 0);
        tot->mean_step_ms = tot->steps ? tot->step_ms / (double)tot->steps : 0;
        tot->flops = num(meta, "flops", 0);
        tot->achieved_flops_per_s = tot->step_ms > 0 ? tot->flops / (tot->step_ms * 1e-3) : 0;
        t->st.nops = rows_from_json(cJSON_GetObjectItemCaseSensitive(meta, "ops"), t->st.ops,
                                    DL_TELE_MAX_ROWS);
        t->st.nlayers = rows_from_json(cJSON_GetObjectItemCaseSensitive(meta, "layers"),
                                       t->st.layers, DL_TELE_MAX_ROWS);
        finish_rows(t->st.ops, t->st.nops, tot->step_ms, 1);
        finish_rows(t->st.layers, t->st.nlayers, tot->step_ms, 0);
        for (int i = 0; i < t->st.nops; i++)
            if (t->st.ops[i].cat == DL_PROF_DATA)
                tot->data_ms += t->st.ops[i].self_ms;
        t->st.prof_enabled = 1;
        t->st.seq++;
        pthread_mutex_unlock(&t->lock);
        cJSON_Delete(p);
    }
    cJSON *s = read_json(f->dir, "summary.json", &f->summary_mtime, 1);
    if (s) {
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(s, "status");
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(s, "message");
        dl_tele_state state = DL_TELE_RUNNING;
        if (cJSON_IsString(st)) {
            for (int k = DL_TELE_IDLE; k <= DL_TELE_FAILED; k++)
                if (!strcmp(st->valuestring, state_names[k]))
                    state = (dl_tele_state)k;
        }
        pthread_mutex_lock(&t->lock);
        t->st.run.state = state;
        if (cJSON_IsString(msg))
            snprintf(t->st.run.message, sizeof t->st.run.message, "%s", msg->valuestring);
        if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(s, "wall_s")))
            t->st.run.elapsed_s = num(s, "wall_s", 0);
        t->st.seq++;
        pthread_mutex_unlock(&t->lock);
        cJSON_Delete(s);
    }
    return DL_OK;
}
