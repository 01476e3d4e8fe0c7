/* telemetry.c - the locked store a run publishes into and readers copy snapshots from */
#include "engine/observe/telemetry.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/nn/nn.h"

struct dl_telemetry {
    pthread_mutex_t lock;
    dl_telemetry_snapshot st; /* events and sys are rings here: see ev_head, sys_head */
    int ev_head, sys_head;
    double t_start, t_end; /* monotonic seconds; t_end when frozen */
    int started, frozen;
    double flops_per_sample; /* forward + backward, for the cost */
};

static const char *state_names[] = {"idle",     "preparing", "running", "paused",
                                    "finished", "stopped",   "failed"};

const char *dl_tele_state_name(dl_tele_state s)
{
    return s >= DL_TELE_IDLE && s <= DL_TELE_FAILED ? state_names[s] : "?";
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
        t->t_start = dl_clock_mono_s() - t->st.run.elapsed_s; /* a resumed run keeps its time */
    }
    if ((s == DL_TELE_FINISHED || s == DL_TELE_STOPPED || s == DL_TELE_FAILED) && !t->frozen) {
        t->frozen = 1;
        t->t_end = dl_clock_mono_s();
    }
}

void dl_telemetry_set_run(dl_telemetry *t, const dl_tele_run *info)
{
    pthread_mutex_lock(&t->lock);
    t->st.run = *info;
    snprintf(t->st.run.precision_name, sizeof t->st.run.precision_name, "%s",
             dl_precision_name(info->precision));
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
    if (i->seconds > 0) {
        point_locked(t, "epoch_s", x, i->seconds);
        point_locked(t, "val_s", x, i->val_seconds);
    }
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
    e->wall = dl_clock_wall_s();
    snprintf(e->kind, sizeof e->kind, "%s", kind);
    snprintf(e->text, sizeof e->text, "%s", text);
    t->st.events_total++;
    t->st.seq++;
}

void dl_telemetry_event(dl_telemetry *t, const char *kind, const char *text)
{
    pthread_mutex_lock(&t->lock);
    double when = t->started ? dl_clock_mono_s() - t->t_start : 0;
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

void dl_telemetry_loader(dl_telemetry *t, const dl_tele_loader *s)
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
        s->run.elapsed_s = (t->frozen ? t->t_end : dl_clock_mono_s()) - t->t_start;
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

/* The share of the profiled step time spent in the matrix products
 * (Linear, Conv2d, attention: their self time); -1 without a profile. */
static double product_share(const dl_telemetry_snapshot *s)
{
    if (s->prof.steps <= 0 || s->prof.step_ms <= 0 || s->nops <= 0)
        return -1;
    double in = 0;
    for (int i = 0; i < s->nops; i++) {
        const char *k = s->ops[i].kind;
        if (!strcmp(k, "Linear") || !strcmp(k, "Conv2d") || !strcmp(k, "MultiheadAttention"))
            in += s->ops[i].self_ms;
    }
    double share = in / s->prof.step_ms;
    return share > 1 ? 1 : share;
}

/* The share of the profiled step time that does not grow with the batch:
 * the optimizer phase (update, gradient norm and clipping, low-precision
 * refresh) and the time between spans; -1 without a profile. */
static double fixed_share(const dl_telemetry_snapshot *s)
{
    if (s->prof.steps <= 0 || s->prof.step_ms <= 0 || s->nops <= 0)
        return -1;
    double fixed = 0;
    for (int i = 0; i < s->nops; i++)
        if (s->ops[i].cat == DL_PROF_OPTIMIZER || s->ops[i].cat == DL_PROF_OTHER)
            fixed += s->ops[i].self_ms;
    double share = fixed / s->prof.step_ms;
    return share > 1 ? 1 : share;
}

/* FLOP/s inside the products (their FLOPs over their self time); -1 unknown. */
static double product_flops_per_s(const dl_telemetry_snapshot *s)
{
    double ms = 0, flops = 0;
    for (int i = 0; i < s->nops; i++) {
        const char *k = s->ops[i].kind;
        if (!strcmp(k, "Linear") || !strcmp(k, "Conv2d") || !strcmp(k, "MultiheadAttention")) {
            ms += s->ops[i].self_ms;
            flops += s->ops[i].flops;
        }
    }
    return ms > 0 && flops > 0 ? flops / (ms * 1e-3) : -1;
}

/* The per-epoch series by epoch number into in->store (NaN where an epoch
 * has no point) and in's curves pointing at them. */
static void epoch_curves(const dl_telemetry_snapshot *s, dl_advisor_input *in)
{
    static const char *names[6] = {"train_loss", "val_loss", "val_acc", "epoch_s", "val_s", NULL};
    int n = 0;
    for (int k = 0; k < 5; k++) {
        for (int i = 0; i < DL_ADV_MAX_EPOCHS; i++)
            in->store[k][i] = NAN;
        const dl_tele_series *ser = dl_telemetry_series(s, names[k]);
        if (!ser || ser->stride != 1)
            continue;
        for (int i = 0; i < ser->n; i++) {
            int e = (int)ser->x[i] - 1;
            if (e >= 0 && e < DL_ADV_MAX_EPOCHS) {
                in->store[k][e] = ser->y[i];
                if (k == 0 && e + 1 > n)
                    n = e + 1;
            }
        }
    }
    if (n == 0)
        return;
    in->nepochs = n;
    in->train_loss = in->store[0];
    in->val_loss = dl_telemetry_series(s, "val_loss") ? in->store[1] : NULL;
    in->val_acc = dl_telemetry_series(s, "val_acc") ? in->store[2] : NULL;
    in->epoch_s = dl_telemetry_series(s, "epoch_s") ? in->store[3] : NULL;
    in->val_s = dl_telemetry_series(s, "val_s") ? in->store[4] : NULL;
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
    in->cpu_cores = r->step > 0 ? (int)sysconf(_SC_NPROCESSORS_ONLN) : -1;
    in->compute_threads = r->compute_threads > 0 ? r->compute_threads : -1;
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
    /* the run's 1 / -1 / 0 (zeroed means unknown) as the advisor's 1 / 0 / -1 */
    in->bf16_native = r->bf16_native > 0 ? 1 : r->bf16_native < 0 ? 0 : -1;
    in->f16_native = r->f16_native > 0 ? 1 : r->f16_native < 0 ? 0 : -1;
    in->adaptive_optim = r->adaptive_optim > 0 ? 1 : r->adaptive_optim < 0 ? 0 : -1;
    in->base_lr = r->base_lr > 0 ? r->base_lr : -1;
    in->epochs_planned = r->epochs;
    in->early_stopping = r->early_stopping;
    in->val_every = r->val_every;
    in->product_share = product_share(s);
    in->fixed_share = fixed_share(s);
    in->product_flops_per_s = product_flops_per_s(s);
    in->peak_flops = s->peak_flops > 0 ? s->peak_flops : -1;
    epoch_curves(s, in);
    const dl_tele_series *sl = dl_telemetry_series(s, "loss");
    if (sl) {
        int keep = sl->n < 64 ? sl->n : 64; /* the recent past */
        in->step_loss = sl->y + (sl->n - keep);
        in->nsteps = keep;
        in->all_step_loss = sl->y; /* the whole run, decimated evenly */
        in->nall_steps = sl->n;
    }
}

int dl_telemetry_advise(const dl_telemetry_snapshot *s, dl_advice *out, int max)
{
    dl_advisor_input in;
    dl_telemetry_advisor_input(s, &in);
    return dl_advisor_run(&in, out, max);
}

/* --- following a run folder: the follower's records as telemetry ------------------------ */

/* What the follower's callbacks publish into. */
typedef struct follow_ctx {
    dl_telemetry *t;
    const char *dir;
} follow_ctx;

static void on_config(void *user, const dl_run_config *c)
{
    follow_ctx *x = user;
    dl_telemetry *t = x->t;
    pthread_mutex_lock(&t->lock);
    dl_tele_run *r = &t->st.run;
    if (c->name[0])
        snprintf(r->name, sizeof r->name, "%s", c->name);
    if (c->device[0])
        snprintf(r->device, sizeof r->device, "%s", c->device);
    if (c->backend[0])
        snprintf(r->device_desc, sizeof r->device_desc, "%s", c->backend);
    if (c->precision[0]) {
        int p = dl_precision_parse(c->precision);
        r->precision = p < 0 ? DL_PREC_F32 : (dl_precision)p;
    }
    snprintf(r->precision_name, sizeof r->precision_name, "%s", dl_precision_name(r->precision));
    r->batch = (int)c->batch;
    r->accumulate = (int)c->accumulate;
    r->epochs = (int)c->epochs;
    if (c->max_steps > 0)
        r->total_steps = (long)c->max_steps;
    r->workers = (int)c->workers;
    t->flops_per_sample = c->train_flops_per_sample;
    snprintf(r->run_dir, sizeof r->run_dir, "%s", x->dir);
    if (r->state == DL_TELE_IDLE)
        r->state = DL_TELE_RUNNING;
    t->st.seq++;
    pthread_mutex_unlock(&t->lock);
}

static void on_metrics_restart(void *user)
{
    dl_telemetry *t = ((follow_ctx *)user)->t;
    pthread_mutex_lock(&t->lock);
    t->st.nseries = 0; /* in a follower, only metrics.jsonl feeds series */
    t->st.seq++;
    pthread_mutex_unlock(&t->lock);
}

/* The progress fields a step record carries. */
static void step_fields_locked(dl_tele_run *r, const char *name, double v)
{
    if (!strcmp(name, "samples_per_s"))
        r->samples_per_s = v;
    else if (!strcmp(name, "data_wait"))
        r->data_wait_share = v;
    else if (!strcmp(name, "lr"))
        r->lr = v;
    else if (!strcmp(name, "grad_norm"))
        r->grad_norm = v;
    else if (!strcmp(name, "loss") && !isfinite(v))
        r->nonfinite = 1;
}

static void on_metrics(void *user, const dl_run_metrics *m)
{
    dl_telemetry *t = ((follow_ctx *)user)->t;
    int is_epoch = !strcmp(m->kind, "epoch");
    double x = is_epoch ? (m->has_epoch ? m->epoch : 0) : (m->has_step ? m->step : 0);
    pthread_mutex_lock(&t->lock);
    dl_tele_run *r = &t->st.run;
    if (m->has_step)
        r->step = (long)m->step;
    if (m->has_epoch)
        r->epoch = (int)m->epoch - 1;
    if (m->has_time)
        r->elapsed_s = m->time;
    if (is_epoch && r->steps_per_epoch <= 0 && m->has_step && m->has_epoch && m->epoch >= 1 &&
        m->step > 0) {
        /* a resumed run may start mid-epoch: the first epoch line still ends epoch k */
        r->steps_per_epoch = (long)(m->step / m->epoch + 0.5);
        if (r->total_steps <= 0 && r->epochs > 0)
            r->total_steps = r->steps_per_epoch * r->epochs;
    }
    for (int i = 0; i < m->n; i++) {
        point_locked(t, m->v[i].name, x, m->v[i].v);
        if (!is_epoch)
            step_fields_locked(r, m->v[i].name, m->v[i].v);
    }
    t->st.seq++;
    pthread_mutex_unlock(&t->lock);
}

static void on_event(void *user, const dl_run_event *e)
{
    dl_telemetry *t = ((follow_ctx *)user)->t;
    pthread_mutex_lock(&t->lock);
    event_locked(t, 0, e->kind, e->text);
    t->st.events[(t->ev_head + t->st.nevents - 1) % DL_TELE_MAX_EVENTS].wall = e->wall;
    /* a watched run's pause shows in its state, as a live one's does */
    dl_tele_state st = t->st.run.state;
    if (!strcmp(e->kind, "paused") && st == DL_TELE_RUNNING)
        t->st.run.state = DL_TELE_PAUSED;
    else if (!strcmp(e->kind, "resumed") && st == DL_TELE_PAUSED)
        t->st.run.state = DL_TELE_RUNNING;
    if (!strcmp(e->kind, "failed") && strstr(e->text, "out of memory")) {
        t->st.run.oom = 1;
        snprintf(t->st.run.oom_text, sizeof t->st.run.oom_text, "%.159s", e->text);
    }
    pthread_mutex_unlock(&t->lock);
}

static void on_system(void *user, const dl_run_system *s)
{
    dl_telemetry_system(((follow_ctx *)user)->t, s);
}

static double num(const cJSON *o, const char *k, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
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

/* The "dlbench" member of the profiler's trace (profiler.c writes it). */
static void on_profile(void *user, const cJSON *trace)
{
    dl_telemetry *t = ((follow_ctx *)user)->t;
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(trace, "dlbench");
    pthread_mutex_lock(&t->lock);
    dl_prof_totals *tot = &t->st.prof;
    memset(tot, 0, sizeof *tot);
    tot->steps = (long)num(meta, "steps", 0);
    tot->step_ms = num(meta, "step_ms", 0);
    tot->mean_step_ms = tot->steps ? tot->step_ms / (double)tot->steps : 0;
    tot->flops = num(meta, "flops", 0);
    tot->achieved_flops_per_s = tot->step_ms > 0 ? tot->flops / (tot->step_ms * 1e-3) : 0;
    t->st.nops =
        rows_from_json(cJSON_GetObjectItemCaseSensitive(meta, "ops"), t->st.ops, DL_TELE_MAX_ROWS);
    t->st.nlayers = rows_from_json(cJSON_GetObjectItemCaseSensitive(meta, "layers"), t->st.layers,
                                   DL_TELE_MAX_ROWS);
    finish_rows(t->st.ops, t->st.nops, tot->step_ms, 1);
    finish_rows(t->st.layers, t->st.nlayers, tot->step_ms, 0);
    for (int i = 0; i < t->st.nops; i++)
        if (t->st.ops[i].cat == DL_PROF_DATA)
            tot->data_ms += t->st.ops[i].self_ms;
    t->st.prof_enabled = 1;
    t->st.seq++;
    pthread_mutex_unlock(&t->lock);
}

static void on_summary(void *user, const dl_run_summary *s)
{
    dl_telemetry *t = ((follow_ctx *)user)->t;
    dl_tele_state state = DL_TELE_RUNNING;
    for (int k = DL_TELE_IDLE; k <= DL_TELE_FAILED; k++)
        if (!strcmp(s->status, state_names[k]))
            state = (dl_tele_state)k;
    pthread_mutex_lock(&t->lock);
    t->st.run.state = state;
    if (s->has_message)
        snprintf(t->st.run.message, sizeof t->st.run.message, "%s", s->message);
    if (!isnan(s->wall_s))
        t->st.run.elapsed_s = s->wall_s;
    t->st.seq++;
    pthread_mutex_unlock(&t->lock);
}

static void on_warning(void *user, const char *text)
{
    dl_telemetry_event(((follow_ctx *)user)->t, "warning", text);
}

int dl_telemetry_follow(dl_telemetry *t, dl_tele_follow *f)
{
    follow_ctx x = {t, f->dir};
    dl_follower_ops ops = {.user = &x,
                           .config = on_config,
                           .metrics_restart = on_metrics_restart,
                           .metrics = on_metrics,
                           .event = on_event,
                           .sample = on_system,
                           .profile = on_profile,
                           .summary = on_summary,
                           .warning = on_warning};
    return dl_follower_poll(f, &ops);
}
