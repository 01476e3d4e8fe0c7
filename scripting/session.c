/* session.c - one training run from a script: preparation, duplicate guard, callbacks, checkpoints, summary */
#include "scripting/session.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/core/backend.h"
#include "engine/train/checkpoint.h"
#include "engine/observe/cost.h"
#include "engine/base/error.h"
#include "engine/rundir/runlog.h"
#include "engine/base/sha256.h"
#include "engine/observe/telemetry.h"
#include "engine/tune/tune.h"
#include "scripting/script.h"
#include "engine/base/version.h"

static volatile sig_atomic_t session_interrupted;

void dl_session_interrupt(void)
{
    session_interrupted = 1;
    dl_script_interrupt();
}

int dl_session_interrupted(void) { return session_interrupted; }

typedef enum { STOP_NONE, STOP_PLANNED, STOP_EXTERNAL } stop_kind;

typedef struct cb_state {
    double best;
    int bad_epochs;
    int seen;
} cb_state;

struct dl_session {
    dl_session_options opt;
    dl_script *script;
    dl_experiment *exp;
    dl_backend *be;
    dl_source *train, *val;
    dl_model *model;
    dl_trainer *trainer;
    dl_runlog *log;
    cJSON *config;
    cJSON *summary;
    char hash[65];
    char run_dir[1024];
    char duplicate[1024];
    char script_path[1100];
    char device[16];
    char message[1024];
    char fingerprint[1400];
    uint64_t seed;
    stop_kind stop;
    cb_state cbs[DL_MAX_CALLBACKS];
    long steps_at_start;
    int resumed;
    int pruned;                 /* the study's pruner stopped this trial */
    dl_backend *parity_be;      /* a cpu:T backend of a parity check (owned) */
    double wall_s, samples_per_s;
};

static void emit(dl_session *s, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void emit(dl_session *s, const char *kind, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (s->log)
        dl_runlog_event(s->log, kind, "%s", text);
    if (s->opt.telemetry) {
        dl_telemetry *t = s->opt.telemetry;
        dl_telemetry_event(t, kind, text);
        if (!strcmp(kind, "paused"))
            dl_telemetry_set_state(t, DL_TELE_PAUSED, NULL);
        else if (!strcmp(kind, "resumed") && s->trainer)
            dl_telemetry_set_state(t, DL_TELE_RUNNING, NULL);
        else if (!strcmp(kind, "nonfinite"))
            dl_telemetry_flag_nonfinite(t);
    }
    if (s->opt.on_event)
        s->opt.on_event(s->opt.user, kind, text);
}

/* --- config ------------------------------------------------------------------ */

/* A float as the script wrote it (0.01, not 0.00999999977648258). */
static double f7(float v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.7g", (double)v);
    return strtod(buf, NULL);
}

static cJSON *hparams_json(const dl_experiment *e)
{
    cJSON *h = cJSON_CreateObject();
    for (int i = 0; i < e->nhp; i++) {
        const dl_hparam *p = &e->hp[i];
        switch (p->type) {
        case DL_HP_STRING: cJSON_AddStringToObject(h, p->name, p->str); break;
        case DL_HP_BOOLEAN: cJSON_AddBoolToObject(h, p->name, p->num != 0); break;
        default: cJSON_AddNumberToObject(h, p->name, p->num); break;
        }
    }
    return h;
}

static cJSON *optim_json(const dl_optim *o)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kind", dl_optim_name(o->kind));
    cJSON_AddNumberToObject(j, "lr", f7(o->lr));
    if (o->kind == DL_OPT_SGD) {
        cJSON_AddNumberToObject(j, "momentum", f7(o->momentum));
        cJSON_AddBoolToObject(j, "nesterov", o->nesterov);
    } else {
        cJSON_AddNumberToObject(j, "beta1", f7(o->beta1));
        cJSON_AddNumberToObject(j, "beta2", f7(o->beta2));
        cJSON_AddNumberToObject(j, "eps", f7(o->eps));
    }
    cJSON_AddNumberToObject(j, "weight_decay", f7(o->weight_decay));
    cJSON_AddNumberToObject(j, "clip", f7(o->clip_norm));
    return j;
}

static cJSON *schedule_json(const dl_schedule *s)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kind", dl_schedule_name(s->kind));
    switch (s->kind) {
    case DL_SCHED_STEP:
        cJSON_AddNumberToObject(j, "step_size", (double)s->step_size);
        cJSON_AddNumberToObject(j, "gamma", f7(s->gamma));
        break;
    case DL_SCHED_COSINE:
        cJSON_AddNumberToObject(j, "warmup", (double)s->warmup);
        cJSON_AddNumberToObject(j, "min_lr", f7(s->min_lr));
        break;
    case DL_SCHED_WARMUP: cJSON_AddNumberToObject(j, "warmup", (double)s->warmup); break;
    case DL_SCHED_ONECYCLE:
        cJSON_AddNumberToObject(j, "max_lr", f7(s->max_lr));
        cJSON_AddNumberToObject(j, "pct_start", f7(s->pct_start));
        cJSON_AddNumberToObject(j, "div_factor", f7(s->div_factor));
        cJSON_AddNumberToObject(j, "final_div", f7(s->final_div));
        break;
    case DL_SCHED_PLATEAU:
        cJSON_AddNumberToObject(j, "factor", f7(s->factor));
        cJSON_AddNumberToObject(j, "patience", s->patience);
        cJSON_AddNumberToObject(j, "threshold", f7(s->threshold));
        cJSON_AddStringToObject(j, "mode", s->mode_max ? "max" : "min");
        break;
    default: break;
    }
    return j;
}

static cJSON *data_json(const dl_data_spec *d, const char *fingerprint)
{
    static const char *kinds[] = {"synthetic", "fashion_mnist", "hdf5"};
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kind", kinds[d->kind]);
    if (d->kind == DL_DATA_SYNTHETIC) {
        cJSON_AddStringToObject(j, "generator", d->synth);
        cJSON_AddNumberToObject(j, "n", (double)d->n);
        cJSON_AddNumberToObject(j, "val", (double)d->n_val);
        cJSON_AddNumberToObject(j, "classes", d->classes);
        cJSON_AddNumberToObject(j, "noise", d->noise);
        cJSON_AddNumberToObject(j, "seed", (double)d->data_seed);
    } else {
        cJSON_AddStringToObject(j, "path", d->path);
        cJSON_AddStringToObject(j, "train", d->train);
        cJSON_AddStringToObject(j, "val", d->val);
    }
    cJSON_AddNumberToObject(j, "limit", (double)d->limit);
    cJSON_AddNumberToObject(j, "val_limit", (double)d->val_limit);
    cJSON_AddNumberToObject(j, "scale", f7(d->scale));
    cJSON_AddBoolToObject(j, "shuffle", d->shuffle);
    cJSON_AddBoolToObject(j, "drop_last", d->drop_last);
    cJSON_AddBoolToObject(j, "flatten", d->flatten);
    if (d->channels > 0) {
        cJSON_AddItemToObject(j, "mean", cJSON_CreateFloatArray(d->mean, d->channels));
        cJSON_AddItemToObject(j, "std", cJSON_CreateFloatArray(d->std, d->channels));
    }
    cJSON_AddStringToObject(j, "fingerprint", fingerprint);
    return j;
}

static cJSON *callbacks_json(const dl_experiment *e)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < e->ncb; i++) {
        const dl_cb_spec *c = &e->cb[i];
        cJSON *j = cJSON_CreateObject();
        if (c->kind == DL_CB_EARLY_STOPPING) {
            cJSON_AddStringToObject(j, "kind", "early_stopping");
            cJSON_AddStringToObject(j, "monitor", c->monitor);
            cJSON_AddNumberToObject(j, "patience", c->patience);
            cJSON_AddNumberToObject(j, "min_delta", c->min_delta);
            cJSON_AddStringToObject(j, "mode", c->mode_max ? "max" : "min");
        } else if (c->kind == DL_CB_CHECKPOINT) {
            cJSON_AddStringToObject(j, "kind", "checkpoint");
            cJSON_AddNumberToObject(j, "every_epochs", c->every_epochs);
            cJSON_AddNumberToObject(j, "every_steps", (double)c->every_steps);
            if (c->save_best)
                cJSON_AddStringToObject(j, "monitor", c->monitor);
        } else {
            cJSON_AddStringToObject(j, "kind", "lua");
            cJSON_AddStringToObject(j, "name", c->name);
        }
        cJSON_AddItemToArray(a, j);
    }
    return a;
}

/* A study trial's parameters: floats and ints as numbers, choices as text. */
static cJSON *trial_params_json(const dl_experiment *e)
{
    cJSON *j = cJSON_CreateObject();
    for (int i = 0; i < e->ntrial_params; i++) {
        const dl_hparam *p = &e->trial_params[i];
        if (p->type == DL_HP_STRING)
            cJSON_AddStringToObject(j, p->name, p->str);
        else
            cJSON_AddNumberToObject(j, p->name, p->num);
    }
    return j;
}

/* The part of the config that decides the result: hashed for the
 * duplicate guard. */
static cJSON *result_config(dl_session *s, const char *script_sha)
{
    dl_experiment *e = s->exp;
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "script_sha256", script_sha);
    cJSON_AddItemToObject(c, "hparams", hparams_json(e));
    cJSON_AddStringToObject(c, "model", e->model_text);
    cJSON *loss = cJSON_AddObjectToObject(c, "loss");
    cJSON_AddStringToObject(loss, "kind", dl_loss_name(e->loss.kind));
    cJSON_AddNumberToObject(loss, "smoothing", f7(e->loss.smoothing));
    cJSON_AddItemToObject(c, "optimizer", optim_json(&e->optim));
    cJSON_AddItemToObject(c, "schedule", schedule_json(&e->schedule));
    cJSON_AddNumberToObject(c, "batch", e->cfg.batch);
    cJSON_AddNumberToObject(c, "accumulate", e->cfg.accumulate);
    cJSON_AddNumberToObject(c, "epochs", e->cfg.epochs);
    cJSON_AddNumberToObject(c, "max_steps", (double)e->cfg.max_steps);
    cJSON_AddStringToObject(c, "precision", dl_precision_name(e->cfg.precision));
    cJSON_AddStringToObject(c, "nonfinite", e->cfg.nonfinite == DL_NONFINITE_SKIP ? "skip" : "stop");
    cJSON_AddStringToObject(c, "device", s->device);
    cJSON_AddNumberToObject(c, "seed", (double)s->seed);
    cJSON_AddItemToObject(c, "data", data_json(&e->data, s->fingerprint));
    cJSON_AddItemToObject(c, "callbacks", callbacks_json(e));
    cJSON_AddStringToObject(c, "version", DL_VERSION);
    if (e->is_study && e->ntrial_params > 0) /* what the objective was given */
        cJSON_AddItemToObject(c, "trial_params", trial_params_json(e));
    return c;
}

static int build_config(dl_session *s)
{
    char script_sha[65];
    DL_TRY(dl_sha256_file(s->script_path, script_sha));
    cJSON *c = result_config(s, script_sha);
    if (!c)
        return dl_error(DL_ENOMEM, "out of memory");
    dl_runlog_hash_json(c, s->hash);
    /* what does not change the result: where, when, who, how often logged */
    cJSON_AddStringToObject(c, "name", s->exp->name);
    cJSON_AddStringToObject(c, "script", s->opt.script ? s->opt.script : s->script_path);
    cJSON_AddStringToObject(c, "script_copy", DL_RUN_FILE_SCRIPT);
    cJSON *ov = cJSON_AddArrayToObject(c, "overrides");
    for (int i = 0; i < s->opt.noverrides; i++)
        cJSON_AddItemToArray(ov, cJSON_CreateString(s->opt.overrides[i]));
    cJSON_AddStringToObject(c, "device_requested", s->opt.device ? s->opt.device : s->exp->device);
    cJSON_AddStringToObject(c, "backend", s->be->description);
    cJSON_AddNumberToObject(c, "parameters", (double)dl_model_param_count(s->model));
    cJSON_AddNumberToObject(c, "flops_per_sample", dl_model_flops(s->model));
    cJSON_AddNumberToObject(c, "train_flops_per_sample", dl_model_train_flops(s->model));
    cJSON_AddNumberToObject(c, "log_every", s->exp->cfg.log_every);
    if (s->opt.ranks > 1) /* data parallel: not hashed, the result is the same */
        cJSON_AddNumberToObject(c, "ranks", s->opt.ranks);
    if (s->exp->is_study) { /* which study and trial this run is (-1: run by hand) */
        cJSON *st = cJSON_AddObjectToObject(c, "study");
        cJSON_AddStringToObject(st, "name", s->exp->study.name);
        cJSON_AddStringToObject(st, "metric", s->exp->study.metric);
        cJSON_AddNumberToObject(st, "trial", s->exp->trial_number);
    }
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    cJSON_AddStringToObject(c, "host", host);
    char when[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON_AddStringToObject(c, "created", when);
    char commit[41];
    int dirty = 0;
    if (dl_runlog_git(NULL, commit, &dirty)) {
        cJSON *g = cJSON_AddObjectToObject(c, "git");
        cJSON_AddStringToObject(g, "commit", commit);
        cJSON_AddBoolToObject(g, "dirty", dirty);
    }
    s->config = c;
    return DL_OK;
}

/* --- telemetry ------------------------------------------------------------------ */

/* The run's description for opt.telemetry, in state st. */
static void publish_run(dl_session *s, dl_tele_state st)
{
    dl_telemetry *tele = s->opt.telemetry;
    if (!tele || !s->trainer)
        return;
    const dl_trainer_config *cfg = dl_trainer_config_of(s->trainer);
    dl_tele_run r;
    memset(&r, 0, sizeof r);
    snprintf(r.name, sizeof r.name, "%s", s->exp->name);
    snprintf(r.device, sizeof r.device, "%s", s->device);
    dl_backend *be = dl_trainer_backend(s->trainer);
    snprintf(r.device_desc, sizeof r.device_desc, "%s", be ? be->description : "");
    if (be && be->ops->device != DL_DEVICE_CPU)
        snprintf(r.gpu_name, sizeof r.gpu_name, "%.63s", be->description);
    snprintf(r.run_dir, sizeof r.run_dir, "%s", s->run_dir);
    r.precision = cfg->precision;
    r.batch = cfg->batch;
    r.accumulate = cfg->accumulate;
    r.epochs = cfg->epochs;
    r.workers = s->exp->data.workers;
    size_t batches = s->train->ops->batches(s->train);
    size_t acc = cfg->accumulate > 0 ? (size_t)cfg->accumulate : 1;
    r.steps_per_epoch = (long)((batches + acc - 1) / acc); /* as the trainer counts */
    r.total_steps = r.steps_per_epoch * cfg->epochs;
    if (cfg->max_steps > 0 && (r.total_steps <= 0 || cfg->max_steps < r.total_steps))
        r.total_steps = cfg->max_steps;
    r.step = dl_trainer_step_count(s->trainer);
    r.epoch = dl_trainer_epoch(s->trainer);
    r.state = st;
    r.loss_scale = 1;
    dl_telemetry_set_run(tele, &r);
}

/* The device's peak for the MFU: a GPU's from the table (by its
 * description), the CPU's from a short gemm calibration, measured once per
 * process and backend. */
static void publish_peak(dl_session *s, dl_backend *be)
{
    static dl_backend *calibrated;
    static double cpu_peak;
    double peak = 0;
    char src[64] = "";
    dl_gpu_peak gp;
    dl_precision prec = dl_trainer_config_of(s->trainer)->precision;
    if (be->ops->device != DL_DEVICE_CPU && dl_cost_gpu_peak(be->description, &gp)) {
        peak = prec == DL_PREC_F32 ? (gp.tf32 > 0 ? gp.tf32 : gp.f32) : gp.bf16;
        snprintf(src, sizeof src, "table: %.40s", gp.name);
    } else if (be->ops->device == DL_DEVICE_CPU) {
        if (calibrated != be && dl_cost_calibrate(be, 512, 0.15, &cpu_peak) == DL_OK)
            calibrated = be;
        peak = calibrated == be ? cpu_peak : 0;
        snprintf(src, sizeof src, "sgemm calibration, %d threads", be->threads);
    }
    dl_telemetry_set_cost(s->opt.telemetry, s->opt.price_per_hour, peak, peak > 0 ? src : "");
}

/* summary.json's "cost": what the run cost, from the telemetry. */
static void cost_json(dl_session *s, cJSON *extra)
{
    dl_telemetry_snapshot *snap = dl_telemetry_snapshot_create();
    if (!snap)
        return;
    dl_telemetry_read(s->opt.telemetry, snap);
    const dl_cost *c = &snap->cost;
    cJSON *j = cJSON_AddObjectToObject(extra, "cost");
    if (snap->price_per_hour > 0) {
        cJSON_AddNumberToObject(j, "price_per_hour", snap->price_per_hour);
        cJSON_AddNumberToObject(j, "cost", c->cost_so_far);
        if (c->cost_projected >= 0)
            cJSON_AddNumberToObject(j, "cost_projected", c->cost_projected);
    }
    if (c->achieved_flops > 0)
        cJSON_AddNumberToObject(j, "achieved_flops", c->achieved_flops);
    if (snap->peak_flops > 0) {
        cJSON_AddNumberToObject(j, "peak_flops", snap->peak_flops);
        cJSON_AddStringToObject(j, "peak_source", snap->peak_source);
    }
    if (c->mfu >= 0)
        cJSON_AddNumberToObject(j, "mfu", c->mfu);
    if (c->energy_j >= 0) {
        cJSON_AddNumberToObject(j, "energy_j", c->energy_j);
        cJSON_AddNumberToObject(j, "energy_kwh", c->energy_kwh);
    }
    dl_telemetry_snapshot_destroy(snap);
}

static void publish_loader(dl_session *s)
{
    dl_loader_stats st;
    if (dl_session_loader_stats(s, &st))
        dl_telemetry_loader(s->opt.telemetry, &st);
}

/* --- trainer callbacks ---------------------------------------------------------- */

static int run_hooks(dl_session *s, dl_hook hook, long step, int epoch, const char *const *names,
                     const double *values, int n);

static void note_cb(void *user, const char *text)
{
    dl_session *s = user;
    emit(s, "note", "%s", text);
}

/* Saves RUN/checkpoint.h5 (the one --resume reads) or, for a "best so far"
 * checkpoint, RUN/checkpoint-best.h5. */
static int save_checkpoint_as(dl_session *s, const char *file, const char *why)
{
    if (!s->log)
        return DL_OK;
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", s->run_dir, file);
    dl_checkpoint_info info;
    memset(&info, 0, sizeof info);
    dl_trainer_get_cursor(s->trainer, &info.cursor);
    info.seed = s->seed;
    snprintf(info.config_hash, sizeof info.config_hash, "%s", s->hash);
    int rc = dl_checkpoint_save(path, s->model, &info);
    if (rc < 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", dl_error_message());
        emit(s, "error", "checkpoint failed: %s", msg);
        dl_error(rc, "%s", msg); /* the message, even if events.log could not take it */
    } else {
        emit(s, "checkpoint", "%s saved at step %ld (%s)", file, info.cursor.step, why);
    }
    return rc;
}

static int save_checkpoint(dl_session *s, const char *why)
{
    return save_checkpoint_as(s, DL_RUN_FILE_CHECKPOINT, why);
}

/* A checkpoint asked for by name (run.checkpoint("x"), {"cmd":"checkpoint",
 * "name":"x"}): RUN/checkpoint-x.h5. Characters other than letters,
 * digits, '-', '_' and '.' become '_' so a name never leaves the folder. */
static int save_named_checkpoint(dl_session *s, const char *name)
{
    char file[96], safe[72];
    size_t n = 0;
    for (const char *p = name; *p && n < sizeof safe - 1; p++) {
        unsigned char c = (unsigned char)*p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '-' || c == '_' || (c == '.' && n > 0);
        safe[n++] = ok ? (char)c : '_';
    }
    safe[n] = 0;
    snprintf(file, sizeof file, DL_RUN_FILE_CHECKPOINT_TAG, safe);
    char why[128];
    snprintf(why, sizeof why, "named \"%.100s\"", name);
    return save_checkpoint_as(s, file, why);
}

static int on_step(void *user, dl_trainer *t, const dl_step_info *i)
{
    dl_session *s = user;
    const char *names[8 + 2 + 16];
    double values[8 + 2 + 16];
    char rank_names[16][32];
    int n = 0;
    names[n] = "loss", values[n++] = i->loss;
    if (i->acc >= 0)
        names[n] = "acc", values[n++] = i->acc;
    names[n] = "lr", values[n++] = f7((float)i->lr);
    names[n] = "samples_per_s", values[n++] = i->samples_per_s;
    names[n] = "data_wait", values[n++] = i->data_wait_share;
    if (isfinite(i->grad_norm))
        names[n] = "grad_norm", values[n++] = i->grad_norm;
    if (i->loss_scale != 1)
        names[n] = "loss_scale", values[n++] = i->loss_scale;
    if (i->ranks > 1) { /* data parallel: all-reduce cost, each rank's throughput */
        names[n] = "allreduce_s", values[n++] = i->comm_s;
        names[n] = "allreduce_share", values[n++] = i->comm_share;
        for (int r = 0; r < i->ranks && r < 16 && i->rank_samples_per_s; r++) {
            snprintf(rank_names[r], sizeof rank_names[r], "rank%d_samples_per_s", r);
            names[n] = rank_names[r], values[n++] = i->rank_samples_per_s[r];
        }
    }
    /* kind "stop": the window a stop cut short, dropped by a resume that
     * logs it whole (dl_step_info.stopped) */
    if (s->log && dl_runlog_metrics(s->log, i->stopped ? "stop" : "step", i->step, i->epoch + 1,
                                    names, values, n) < 0)
        return DL_EIO;
    if (s->opt.telemetry) {
        dl_telemetry_step(s->opt.telemetry, i);
        publish_loader(s);
    }
    if (s->opt.on_step)
        s->opt.on_step(s->opt.user, i);
    int rc = run_hooks(s, DL_HOOK_STEP, i->step, i->epoch, names, values, n);
    if (rc != 0)
        return rc;
    (void)t;
    return 0;
}

/* Early stopping and checkpoint callbacks for one finished epoch. */
static int builtin_epoch(dl_session *s, const dl_epoch_info *i, const char *const *names,
                         const double *values, int n)
{
    int stop = 0;
    for (int k = 0; k < s->exp->ncb; k++) {
        const dl_cb_spec *c = &s->exp->cb[k];
        cb_state *st = &s->cbs[k];
        if (c->kind == DL_CB_LUA)
            continue;
        int improved = 0, have = 0;
        double v = NAN;
        if (c->monitor[0]) {
            for (int j = 0; j < n; j++)
                if (!strcmp(names[j], c->monitor) ||
                    (!strcmp(c->monitor, "loss") && !strcmp(names[j], "train_loss")) ||
                    (!strcmp(c->monitor, "acc") && !strcmp(names[j], "train_acc")))
                    v = values[j], have = isfinite(values[j]);
            if (have) {
                improved = !st->seen || (c->mode_max ? v > st->best + c->min_delta
                                                     : v < st->best - c->min_delta);
                if (improved) {
                    st->best = v;
                    st->bad_epochs = 0;
                } else {
                    st->bad_epochs++;
                }
                st->seen = 1;
            }
        }
        if (c->kind == DL_CB_EARLY_STOPPING) {
            if (!have && c->monitor[0] && !st->seen) {
                emit(s, "warning", "early stopping: metric %s is not available (no validation "
                     "data?)", c->monitor);
                st->seen = -1;
            }
            if (have && st->bad_epochs >= c->patience) {
                emit(s, "early_stop", "%s did not improve for %d epochs (best %.6g)", c->monitor,
                     st->bad_epochs, st->best);
                snprintf(s->message, sizeof s->message,
                         "early stopping: %s did not improve for %d epochs", c->monitor,
                         st->bad_epochs);
                s->stop = STOP_PLANNED;
                stop = 1;
            }
        } else if (c->kind == DL_CB_CHECKPOINT) {
            int due = c->every_epochs > 0 && (i->epoch + 1) % c->every_epochs == 0;
            if (c->save_best)
                due = have && improved;
            if (due) {
                char why[96];
                if (c->save_best)
                    snprintf(why, sizeof why, "best %s = %.6g", c->monitor, v);
                else
                    snprintf(why, sizeof why, "end of epoch %d", i->epoch + 1);
                save_checkpoint_as(s, c->save_best ? DL_RUN_FILE_CHECKPOINT_BEST : DL_RUN_FILE_CHECKPOINT, why);
            }
        }
    }
    return stop;
}

/* A study trial: reports the study's metric after epoch (as step epoch+1)
 * and asks the pruner; returns 1 to stop the run as pruned. */
static int report_trial(dl_session *s, int epoch, const char *const *names,
                        const double *values, int n)
{
    for (int k = 0; k < n; k++) {
        if (strcmp(names[k], s->exp->study.metric))
            continue;
        if (dl_trial_report(s->opt.trial, epoch + 1, values[k]) < 0) {
            emit(s, "warning", "study: %s", dl_error_message());
            return 0;
        }
        if (epoch + 1 >= s->exp->cfg.epochs || dl_trial_should_prune(s->opt.trial) != 1)
            return 0; /* the last epoch finishes the trial anyway */
        s->pruned = 1;
        s->stop = STOP_EXTERNAL;
        snprintf(s->message, sizeof s->message, "pruned after epoch %d (%s %.6g)", epoch + 1,
                 names[k], values[k]);
        emit(s, "pruned", "%s", s->message);
        return 1;
    }
    return 0;
}

static int on_epoch(void *user, dl_trainer *t, const dl_epoch_info *i)
{
    dl_session *s = user;
    const char *names[6];
    double values[6];
    int n = 0;
    names[n] = "train_loss", values[n++] = i->train_loss;
    if (isfinite(i->train_acc))
        names[n] = "train_acc", values[n++] = i->train_acc;
    if (isfinite(i->val_loss))
        names[n] = "val_loss", values[n++] = i->val_loss;
    if (isfinite(i->val_acc))
        names[n] = "val_acc", values[n++] = i->val_acc;
    names[n] = "lr", values[n++] = f7((float)dl_trainer_current_lr(t));
    names[n] = "seconds", values[n++] = i->seconds;
    if (s->log && dl_runlog_metrics(s->log, "epoch", i->step, i->epoch + 1, names, values, n) < 0)
        return DL_EIO;
    if (s->opt.telemetry)
        dl_telemetry_epoch(s->opt.telemetry, i);
    if (s->opt.on_epoch)
        s->opt.on_epoch(s->opt.user, i);
    if (s->opt.trial && report_trial(s, i->epoch, names, values, n))
        return 1;
    int rc = 0;
    if (isfinite(i->val_loss))
        rc = run_hooks(s, DL_HOOK_VALIDATION, i->step, i->epoch, names, values, n);
    if (rc == 0)
        rc = run_hooks(s, DL_HOOK_EPOCH, i->step, i->epoch, names, values, n);
    if (rc != 0)
        return rc;
    return builtin_epoch(s, i, names, values, n);
}

static void on_event(void *user, dl_trainer *t, const char *kind, const char *text)
{
    dl_session *s = user;
    (void)t;
    if (!strcmp(kind, "checkpoint")) {
        if (text[0])
            save_named_checkpoint(s, text);
        else
            save_checkpoint(s, "requested");
        return;
    }
    if (!strcmp(kind, "device") && s->opt.telemetry) {
        /* a hot switch: the run's device and the peak the MFU is measured against */
        dl_backend *be = dl_trainer_backend(s->trainer);
        if (be && be->ops->name && strcmp(be->ops->name, s->device)) {
            snprintf(s->device, sizeof s->device, "%s", be->ops->name);
            publish_run(s, DL_TELE_RUNNING);
            publish_peak(s, be);
        }
    }
    emit(s, kind, "%s", text);
}

static int on_idle(void *user, dl_trainer *t)
{
    dl_session *s = user;
    long step = dl_trainer_step_count(t);
    if (s->opt.on_idle)
        s->opt.on_idle(s->opt.user);
    if (session_interrupted) {
        s->stop = STOP_EXTERNAL;
        snprintf(s->message, sizeof s->message, "interrupted at step %ld", step);
        return 1;
    }
    if (s->opt.stop_after > 0 && step >= s->opt.stop_after && s->stop == STOP_NONE) {
        s->stop = STOP_EXTERNAL;
        snprintf(s->message, sizeof s->message, "stopped after %ld steps (--stop-after)", step);
        return 1;
    }
    for (int k = 0; k < s->exp->ncb; k++) {
        const dl_cb_spec *c = &s->exp->cb[k];
        if (c->kind == DL_CB_CHECKPOINT && c->every_steps > 0 && step > s->steps_at_start &&
            step % c->every_steps == 0 && dl_trainer_epoch_step(t) > 0) {
            char why[64];
            snprintf(why, sizeof why, "every %ld steps", c->every_steps);
            save_checkpoint(s, why);
        }
    }
    return 0;
}

static int run_hooks(dl_session *s, dl_hook hook, long step, int epoch, const char *const *names,
                     const double *values, int n)
{
    if (!dl_script_has_hooks(s->script, hook))
        return 0;
    dl_script_run r;
    memset(&r, 0, sizeof r);
    r.trainer = s->trainer;
    r.step = step;
    r.epoch = epoch;
    r.names = names;
    r.values = values;
    r.nmetrics = n;
    r.note = note_cb;
    r.user = s;
    int rc = dl_script_call_hooks(s->script, hook, &r);
    if (rc < 0) {
        if (session_interrupted) {
            s->stop = STOP_EXTERNAL;
            snprintf(s->message, sizeof s->message, "interrupted at step %ld", step);
            return 1;
        }
        return rc;
    }
    if (r.stop) {
        s->stop = STOP_PLANNED;
        snprintf(s->message, sizeof s->message, "%s", r.stop_reason);
        emit(s, "stop", "%s", r.stop_reason);
        return 1;
    }
    return 0;
}

/* After a resume: early stopping and best-checkpoint state continue from
 * the epochs already logged (as if the run had not been interrupted). */
static void replay_callbacks(dl_session *s)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/" DL_RUN_FILE_METRICS, s->run_dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        cJSON *rec = cJSON_Parse(line);
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(rec, "kind");
        if (!cJSON_IsString(kind) || strcmp(kind->valuestring, "epoch")) {
            cJSON_Delete(rec);
            continue;
        }
        for (int k = 0; k < s->exp->ncb; k++) {
            const dl_cb_spec *c = &s->exp->cb[k];
            cb_state *st = &s->cbs[k];
            const char *name = !strcmp(c->monitor, "loss")  ? "train_loss"
                               : !strcmp(c->monitor, "acc") ? "train_acc"
                                                            : c->monitor;
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, name);
            if (c->kind == DL_CB_LUA || !c->monitor[0] || !cJSON_IsNumber(v))
                continue;
            double x = v->valuedouble;
            if (!st->seen || (c->mode_max ? x > st->best + c->min_delta
                                          : x < st->best - c->min_delta)) {
                st->best = x;
                st->bad_epochs = 0;
            } else {
                st->bad_epochs++;
            }
            st->seen = 1;
        }
        cJSON_Delete(rec);
    }
    fclose(f);
}

/* --- prepare -------------------------------------------------------------------- */

static int load_resume_options(dl_session *s, char ***ovs, int *nov)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/" DL_RUN_FILE_CONFIG, s->run_dir);
    cJSON *c = dl_runlog_read_json(path);
    if (!c)
        return dl_error(DL_EINVAL, "--resume %s: %s", s->opt.resume, dl_error_message());
    snprintf(s->script_path, sizeof s->script_path, "%s/" DL_RUN_FILE_SCRIPT, s->run_dir);
    const cJSON *ov = cJSON_GetObjectItemCaseSensitive(c, "overrides");
    int n = cJSON_GetArraySize(ov);
    char **list = calloc((size_t)n + 1, sizeof *list);
    int k = 0;
    for (const cJSON *o = ov ? ov->child : NULL; list && o; o = o->next)
        if (cJSON_IsString(o))
            list[k++] = strdup(o->valuestring);
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(c, "seed");
    if (s->opt.seed < 0 && cJSON_IsNumber(seed) && seed->valuedouble >= 0 &&
        seed->valuedouble < 0x1p63)
        s->opt.seed = (long long)seed->valuedouble;
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(c, "device");
    if (!s->opt.device && cJSON_IsString(dev))
        snprintf(s->device, sizeof s->device, "%s", dev->valuestring);
    cJSON_Delete(c);
    *ovs = list;
    *nov = k;
    return list ? DL_OK : dl_error(DL_ENOMEM, "out of memory");
}

int dl_session_prepare(dl_session **out, const dl_session_options *opt)
{
    *out = NULL;
    dl_session *s = calloc(1, sizeof *s);
    if (!s)
        return dl_error(DL_ENOMEM, "out of memory");
    s->opt = *opt;
    if (!s->opt.out_dir)
        s->opt.out_dir = "runs";
    *out = s;
    int rc = DL_OK;
    char **resume_ovs = NULL;
    int resume_nov = 0;
    if (opt->resume) {
        rc = dl_runlog_resolve(s->opt.out_dir, opt->resume, s->run_dir, sizeof s->run_dir);
        if (rc == DL_OK && opt->rank == 0) /* fail early; reopen takes the run's lock */
            rc = dl_runlog_check_free(s->run_dir);
        if (rc == DL_OK)
            rc = load_resume_options(s, &resume_ovs, &resume_nov);
        if (rc == DL_OK) {
            s->opt.overrides = resume_ovs;
            s->opt.noverrides = resume_nov;
            s->opt.script = NULL;
            s->resumed = 1;
        }
    } else if (!opt->script) {
        rc = dl_error(DL_EINVAL, "no script given");
    } else {
        snprintf(s->script_path, sizeof s->script_path, "%s", opt->script);
    }
    dl_script_options so = {s->script_path, s->opt.overrides, s->opt.noverrides, 0};
    if (rc == DL_OK) /* a study's objective gets opt->trial, or a fixed one from k=v */
        rc = dl_script_load_study(&s->script, &so, opt->trial, 0);
    if (rc == DL_OK)
        s->exp = dl_script_experiment(s->script);
    if (rc == DL_OK) {
        s->seed = s->opt.seed >= 0 ? (uint64_t)s->opt.seed : s->exp->cfg.seed;
        s->exp->cfg.seed = s->seed;
        const char *dev = s->opt.device ? s->opt.device : s->device[0] ? s->device : s->exp->device;
        char why[256] = "";
        s->be = dl_backend_by_name(dev, why, sizeof why);
        if (!s->be)
            rc = dl_error(DL_ENODEV, "device %s is not available: %s", dev, why);
        else
            snprintf(s->device, sizeof s->device, "%s", s->be->ops->name);
    }
    if (rc == DL_OK)
        rc = dl_script_open_data(s->script, s->exp->cfg.batch, s->seed, s->be, &s->train, &s->val,
                                 s->fingerprint, sizeof s->fingerprint);
    if (rc == DL_OK && (size_t)s->exp->cfg.batch > s->train->info.count)
        rc = dl_error(DL_EINVAL,
                      "%s: batch %d is larger than the training set (%zu samples): every "
                      "buffer is sized by the batch",
                      s->script_path, s->exp->cfg.batch, (size_t)s->train->info.count);
    if (rc == DL_OK) {
        rc = dl_model_create(&s->model, dl_script_take_model(s->script), &s->train->info.sample);
        if (rc == DL_OK)
            rc = dl_trainer_create(&s->trainer, s->model, &s->exp->loss, &s->exp->optim,
                                   &s->exp->schedule, s->train, s->val, &s->exp->cfg, s->be);
        if (rc < 0) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", dl_error_message());
            if (rc == DL_ENOMEM)
                rc = DL_EINVAL; /* too big for this machine: the script asks too much */
            dl_error(rc, "%s: the model does not fit: %s", s->script_path, msg);
        }
    }
    if (rc == DL_OK)
        rc = build_config(s);
    if (rc == DL_OK && !s->resumed && !opt->force && opt->rank == 0 && !opt->parity &&
        dl_runlog_find_finished(s->opt.out_dir, s->hash, s->duplicate, sizeof s->duplicate)) {
        for (int i = 0; i < resume_nov; i++)
            free(resume_ovs[i]);
        free(resume_ovs);
        s->opt.overrides = NULL;
        return DL_SESSION_DUPLICATE;
    }
    if (rc == DL_OK && s->resumed) {
        char path[1200];
        snprintf(path, sizeof path, "%s/" DL_RUN_FILE_CHECKPOINT, s->run_dir);
        dl_checkpoint_info info;
        memset(&info, 0, sizeof info);
        /* the run's lock before its checkpoint is read: another resume that
         * held it may have moved the run on meanwhile */
        int lock_fd = -1;
        if (opt->rank == 0) /* other ranks of a job write nothing */
            rc = dl_runlog_lock(s->run_dir, &lock_fd);
        /* killed before its first checkpoint: the run starts again from step 0 */
        int fresh = rc == DL_OK && access(path, F_OK) < 0 && errno == ENOENT;
        if (fresh)
            snprintf(info.config_hash, sizeof info.config_hash, "%s", s->hash);
        else if (rc == DL_OK)
            rc = dl_checkpoint_load(path, s->model, &info);
        if (rc == DL_OK && !fresh)
            rc = dl_trainer_set_cursor(s->trainer, &info.cursor);
        if (rc == DL_OK && opt->rank == 0)
            rc = dl_runlog_reopen_locked(&s->log, s->run_dir, info.cursor.step, lock_fd);
        else if (lock_fd >= 0)
            close(lock_fd);
        if (rc == DL_OK) {
            if (fresh)
                emit(s, "warning", "%s does not exist (the run ended before its first "
                     "checkpoint): training starts again from step 0", path);
            replay_callbacks(s);
            s->steps_at_start = info.cursor.step;
            if (strcmp(info.config_hash, s->hash))
                emit(s, "warning",
                     "the configuration differs from the checkpoint's (hash %.8s, now %.8s): "
                     "the result may differ from an uninterrupted run",
                     info.config_hash, s->hash);
            emit(s, "resumed", "from step %ld (epoch %d) on %s", info.cursor.step,
                 info.cursor.epoch + 1, s->device);
        }
    } else if (rc == DL_OK && opt->rank == 0 && !opt->parity) {
        rc = dl_runlog_create(&s->log, s->opt.out_dir, s->exp->name, s->hash, s->config,
                              s->script_path);
        if (rc == DL_OK) {
            snprintf(s->run_dir, sizeof s->run_dir, "%s", dl_runlog_dir(s->log));
            emit(s, "started", "%s on %s (%s), seed %llu, config %.8s", s->exp->name, s->device,
                 s->be->description, (unsigned long long)s->seed, s->hash);
        }
    }
    for (int i = 0; i < resume_nov; i++)
        free(resume_ovs[i]);
    free(resume_ovs);
    s->opt.overrides = NULL;
    s->opt.noverrides = 0;
    if (rc == DL_OK) {
        dl_callbacks cb = {s, on_step, on_epoch, on_event, on_idle};
        dl_trainer_set_callbacks(s->trainer, &cb);
        if (s->opt.telemetry) {
            publish_run(s, DL_TELE_PREPARING);
            dl_telemetry_set_model_flops(s->opt.telemetry, dl_model_train_flops(s->model));
            publish_peak(s, s->be);
        }
    }
    return rc;
}

/* --- run -------------------------------------------------------------------------- */

static int params_digest(dl_session *s, char hex[65])
{
    dl_model_state st;
    dl_model_get_state(s->model, &st);
    size_t n = dl_model_param_count(s->model);
    float *h = malloc(n * sizeof *h + 1);
    if (!h)
        return dl_error(DL_ENOMEM, "out of memory");
    int rc = s->be->ops->to_host(dl_model_backend(s->model), h, st.params, n * sizeof *h);
    if (rc == DL_OK) {
        uint8_t d[32];
        dl_sha256_buffer(h, n * sizeof *h, d);
        dl_sha256_hex(d, hex);
    }
    free(h);
    return rc;
}

dl_run_status dl_session_run(dl_session *s)
{
    int rc = dl_trainer_run(s->trainer);
    dl_run_status status;
    if (rc < 0) {
        status = DL_RUN_FAILED;
        snprintf(s->message, sizeof s->message, "%s", dl_error_message());
        if (!s->message[0])
            snprintf(s->message, sizeof s->message, "%s", dl_error_name(rc));
    } else if (s->stop == STOP_EXTERNAL ||
               (dl_trainer_stopped(s->trainer) && s->stop == STOP_NONE)) {
        status = DL_RUN_STOPPED;
        if (!s->message[0])
            snprintf(s->message, sizeof s->message, "stopped at step %ld",
                     dl_trainer_step_count(s->trainer));
    } else {
        status = DL_RUN_FINISHED;
    }
    if (status != DL_RUN_FAILED &&
        save_checkpoint(s, status == DL_RUN_FINISHED ? "end of training" : "stopped") < 0) {
        /* the state since the last checkpoint is lost: not a clean end */
        snprintf(s->message, sizeof s->message, "the final checkpoint could not be written: %s",
                 dl_error_message());
        status = DL_RUN_FAILED;
    }
    long steps = dl_trainer_step_count(s->trainer);
    int epoch = dl_trainer_epoch(s->trainer);
    const dl_trainer_config *cfg = dl_trainer_config_of(s->trainer);
    double per_epoch = (double)s->train->info.count;
    double partial = (double)dl_trainer_epoch_step(s->trainer) * cfg->batch * cfg->accumulate;
    dl_run_totals t = {steps, epoch, epoch * per_epoch + (partial < per_epoch ? partial : per_epoch)};
    cJSON *extra = cJSON_CreateObject();
    char hex[65];
    if (params_digest(s, hex) == DL_OK)
        cJSON_AddStringToObject(extra, "params_sha256", hex);
    cJSON_AddStringToObject(extra, "device", s->device);
    cJSON_AddStringToObject(extra, "precision", dl_precision_name(cfg->precision));
    const char *names[] = {"finished", "stopped", "failed"};
    if (s->opt.telemetry) {
        static const dl_tele_state tstates[] = {DL_TELE_FINISHED, DL_TELE_STOPPED, DL_TELE_FAILED};
        publish_loader(s);
        dl_telemetry_set_state(s->opt.telemetry, tstates[status],
                               s->message[0] ? s->message : NULL);
        cost_json(s, extra);
    }
    if (s->log)
        dl_runlog_summary(s->log, names[status], &t, s->message[0] ? s->message : NULL, extra);
    cJSON_Delete(extra);
    emit(s, names[status], "step %ld, epoch %d%s%s", steps, epoch, s->message[0] ? ": " : "",
         s->message);
    char path[1200];
    snprintf(path, sizeof path, "%s/" DL_RUN_FILE_SUMMARY, s->run_dir);
    s->summary = dl_runlog_read_json(path);
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(s->summary, "wall_s");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(s->summary, "samples_per_s");
    s->wall_s = cJSON_IsNumber(w) ? w->valuedouble : 0;
    s->samples_per_s = cJSON_IsNumber(sp) ? sp->valuedouble : 0;
    return status;
}

void dl_session_destroy(dl_session *s)
{
    if (!s)
        return;
    dl_trainer_destroy(s->trainer);
    dl_model_destroy(s->model);
    dl_source_destroy(s->train);
    dl_source_destroy(s->val);
    dl_runlog_destroy(s->log);
    dl_script_destroy(s->script);
    cJSON_Delete(s->config);
    cJSON_Delete(s->summary);
    dl_backend_cpu_destroy(s->parity_be); /* last: nothing lives on it now */
    free(s);
}

const char *dl_session_run_dir(const dl_session *s) { return s->run_dir[0] ? s->run_dir : NULL; }
const char *dl_session_duplicate(const dl_session *s) { return s->duplicate; }
const char *dl_session_name(const dl_session *s) { return s->exp ? s->exp->name : ""; }
const char *dl_session_device(const dl_session *s) { return s->device; }
const char *dl_session_message(const dl_session *s) { return s->message; }
dl_trainer *dl_session_trainer(dl_session *s) { return s->trainer; }
dl_script *dl_session_script(dl_session *s) { return s->script; }
int dl_session_pruned(const dl_session *s)
{
    /* or the script stopped the run itself after trial:should_prune() said so */
    return s->pruned || (s->stop != STOP_NONE && s->script && dl_script_trial_prune_said(s->script));
}
long dl_session_total_steps(const dl_session *s)
{
    return s->trainer ? dl_trainer_step_count(s->trainer) : 0;
}
double dl_session_wall_s(const dl_session *s) { return s->wall_s; }
double dl_session_samples_per_s(const dl_session *s) { return s->samples_per_s; }

int dl_session_loader_stats(dl_session *s, dl_loader_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!s->train || !s->train->ops->stats)
        return 0;
    s->train->ops->stats(s->train, out);
    return 1;
}

int dl_session_metric(const dl_session *s, const char *name, double *final, double *best)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(s->summary, "final"), name);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s->summary, "best"), name),
        "value");
    if (!cJSON_IsNumber(f))
        return 0;
    *final = f->valuedouble;
    *best = cJSON_IsNumber(b) ? b->valuedouble : f->valuedouble;
    return 1;
}

/* --- parity check ------------------------------------------------------------------ */

int dl_session_parity_device_parse(const char *text, int *threads)
{
    *threads = 0;
    if (!strcmp(text, "cpu"))
        return 0;
    if (!strcmp(text, "cuda"))
        return 1;
    if (strncmp(text, "cpu:", 4))
        return -1;
    char *end;
    errno = 0;
    long n = strtol(text + 4, &end, 10);
    if (!text[4] || *end || errno || n < 1 || n > DL_CPU_MAX_THREADS)
        return -1;
    *threads = (int)n;
    return 2;
}

int dl_session_check_parity(dl_session *s, const char *device, int steps, dl_parity_report *r,
                            char *label, size_t label_size)
{
    memset(r, 0, sizeof *r);
    dl_backend *home = dl_trainer_backend(s->trainer);
    if (!device) /* the other kind of device */
        device = home->ops->device == DL_DEVICE_CPU ? "cuda" : "cpu";
    snprintf(label, label_size, "%s", device);
    int threads;
    int kind = dl_session_parity_device_parse(device, &threads);
    dl_backend *other = NULL;
    char why[512] = "";
    if (kind < 0)
        return dl_error(DL_EINVAL,
                        "--parity-device: unknown device '%s' (expected cpu, cpu:THREADS or cuda)",
                        device);
    if (kind == 0) {
        other = dl_backend_cpu(0);
    } else if (kind == 1) {
        other = dl_backend_cuda(why, sizeof why);
        if (!other)
            return dl_error(DL_ENODEV, "cannot check parity against cuda: %s", why);
    } else {
        dl_backend_cpu_destroy(s->parity_be);
        s->parity_be = other = dl_backend_cpu_create(threads);
        if (!other)
            return dl_error(DL_ENOMEM, "cannot check parity against %s: %s", device,
                            dl_error_message());
    }
    return dl_trainer_check_parity(s->trainer, other, steps, r);
}
