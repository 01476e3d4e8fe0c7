/* session_config.c - config.json: the resolved experiment, its hash (the duplicate guard), where and when */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/rundir/rundir.h"
#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/base/sha256.h"
#include "engine/base/version.h"
#include "engine/rundir/runlog.h"
#include "scripting/session_internal.h"

/* A float as the script wrote it (see session_internal.h). */
double session_f7(float v)
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
    cJSON_AddNumberToObject(j, "lr", session_f7(o->lr));
    if (o->kind == DL_OPT_SGD) {
        cJSON_AddNumberToObject(j, "momentum", session_f7(o->momentum));
        cJSON_AddBoolToObject(j, "nesterov", o->nesterov);
    } else {
        cJSON_AddNumberToObject(j, "beta1", session_f7(o->beta1));
        cJSON_AddNumberToObject(j, "beta2", session_f7(o->beta2));
        cJSON_AddNumberToObject(j, "eps", session_f7(o->eps));
    }
    cJSON_AddNumberToObject(j, "weight_decay", session_f7(o->weight_decay));
    cJSON_AddNumberToObject(j, "clip", session_f7(o->clip_norm));
    return j;
}

static cJSON *schedule_json(const dl_schedule *s)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kind", dl_schedule_name(s->kind));
    switch (s->kind) {
    case DL_SCHED_STEP:
        cJSON_AddNumberToObject(j, "step_size", (double)s->step_size);
        cJSON_AddNumberToObject(j, "gamma", session_f7(s->gamma));
        break;
    case DL_SCHED_COSINE:
        cJSON_AddNumberToObject(j, "warmup", (double)s->warmup);
        cJSON_AddNumberToObject(j, "min_lr", session_f7(s->min_lr));
        break;
    case DL_SCHED_WARMUP: cJSON_AddNumberToObject(j, "warmup", (double)s->warmup); break;
    case DL_SCHED_ONECYCLE:
        cJSON_AddNumberToObject(j, "max_lr", session_f7(s->max_lr));
        cJSON_AddNumberToObject(j, "pct_start", session_f7(s->pct_start));
        cJSON_AddNumberToObject(j, "div_factor", session_f7(s->div_factor));
        cJSON_AddNumberToObject(j, "final_div", session_f7(s->final_div));
        break;
    case DL_SCHED_PLATEAU:
        cJSON_AddNumberToObject(j, "factor", session_f7(s->factor));
        cJSON_AddNumberToObject(j, "patience", s->patience);
        cJSON_AddNumberToObject(j, "threshold", session_f7(s->threshold));
        cJSON_AddStringToObject(j, "mode", s->mode_max ? "max" : "min");
        break;
    default: break;
    }
    return j;
}

/* The HDF5 options that change the batches (dataset names, mode, budget,
 * window, augmentation), each only when it is not the default. */
static void hdf5_json(cJSON *j, const dl_data_desc *d)
{
    static const char *modes[] = {"auto", "memory", "streaming"};
    if (d->x_name[0])
        cJSON_AddStringToObject(j, "x", d->x_name);
    if (d->y_name[0])
        cJSON_AddStringToObject(j, "y", d->y_name);
    if (d->mode)
        cJSON_AddStringToObject(j, "mode", modes[d->mode]);
    if (d->memory_budget > 0)
        cJSON_AddNumberToObject(j, "memory_budget", d->memory_budget);
    if (d->shuffle_window > 0)
        cJSON_AddNumberToObject(j, "shuffle_window", (double)d->shuffle_window);
    if (d->crop_pad > 0 || d->hflip) {
        cJSON *a = cJSON_AddObjectToObject(j, "augment");
        cJSON_AddNumberToObject(a, "crop", d->crop_pad);
        cJSON_AddBoolToObject(a, "flip", d->hflip);
    }
}

static cJSON *data_json(const dl_data_desc *d, const char *fingerprint)
{
    static const char *kinds[] = {"synthetic", "fashion_mnist", "hdf5", "text"};
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
    if (d->kind == DL_DATA_TEXT) {
        cJSON_AddNumberToObject(j, "context", d->context);
        cJSON_AddNumberToObject(j, "vocab", d->vocab);
    }
    cJSON_AddNumberToObject(j, "limit", (double)d->limit);
    cJSON_AddNumberToObject(j, "val_limit", (double)d->val_limit);
    cJSON_AddNumberToObject(j, "scale", session_f7(d->scale));
    cJSON_AddBoolToObject(j, "shuffle", d->shuffle);
    cJSON_AddBoolToObject(j, "drop_last", d->drop_last);
    cJSON_AddBoolToObject(j, "flatten", d->flatten);
    if (d->kind == DL_DATA_HDF5) /* only what differs from the defaults: old hashes hold */
        hdf5_json(j, d);
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
    cJSON_AddNumberToObject(loss, "smoothing", session_f7(e->loss.smoothing));
    if (e->loss.ignore_index != DL_IGNORE_NONE) /* absent: the hashes of older runs hold */
        cJSON_AddNumberToObject(loss, "ignore_index", e->loss.ignore_index);
    cJSON_AddItemToObject(c, "optimizer", optim_json(&e->optim));
    cJSON_AddItemToObject(c, "schedule", schedule_json(&e->schedule));
    cJSON_AddNumberToObject(c, "batch", e->cfg.batch);
    cJSON_AddNumberToObject(c, "accumulate", e->cfg.accumulate);
    cJSON_AddNumberToObject(c, "epochs", e->cfg.epochs);
    cJSON_AddNumberToObject(c, "max_steps", (double)e->cfg.max_steps);
    if (e->cfg.val_every > 1) /* absent by default: the hashes of older runs hold */
        cJSON_AddNumberToObject(c, "val_every", e->cfg.val_every);
    cJSON_AddStringToObject(c, "precision", dl_precision_name(e->cfg.precision));
    cJSON_AddStringToObject(c, "nonfinite",
                            e->cfg.nonfinite == DL_NONFINITE_SKIP ? "skip" : "stop");
    cJSON_AddStringToObject(c, "device", s->device);
    cJSON_AddNumberToObject(c, "seed", (double)s->seed);
    cJSON_AddItemToObject(c, "data", data_json(&e->data, s->fingerprint));
    cJSON_AddItemToObject(c, "callbacks", callbacks_json(e));
    cJSON_AddStringToObject(c, "version", DL_VERSION);
    if (e->init.set && s->init_checkpoint[0]) { /* absent: the hashes of older runs hold */
        cJSON *in = cJSON_AddObjectToObject(c, "init");
        cJSON_AddStringToObject(in, "checkpoint", s->init_checkpoint);
        cJSON_AddNumberToObject(in, "step", (double)s->init_step);
        cJSON *ex = cJSON_AddArrayToObject(in, "exclude");
        for (int i = 0; i < e->init.nexclude; i++)
            cJSON_AddItemToArray(ex, cJSON_CreateString(e->init.exclude[i]));
    }
    if (e->is_study && e->ntrial_params > 0) /* what the objective was given */
        cJSON_AddItemToObject(c, "trial_params", trial_params_json(e));
    return c;
}

/* Where, when and by whom the run was made: not hashed. */
static void context_json(cJSON *c)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    cJSON_AddStringToObject(c, "host", host);
    char when[32];
    dl_clock_iso_now(when, sizeof when);
    cJSON_AddStringToObject(c, "created", when);
    char commit[41];
    int dirty = 0;
    if (dl_runlog_git(NULL, commit, &dirty)) {
        cJSON *g = cJSON_AddObjectToObject(c, "git");
        cJSON_AddStringToObject(g, "commit", commit);
        cJSON_AddBoolToObject(g, "dirty", dirty);
    }
}

int session_build_config(dl_session *s)
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
    if (s->opt.nsets > 0) {
        cJSON *sets = cJSON_AddArrayToObject(c, "sets");
        for (int i = 0; i < s->opt.nsets; i++)
            cJSON_AddItemToArray(sets, cJSON_CreateString(s->opt.sets[i]));
    }
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
    context_json(c);
    s->config = c;
    return DL_OK;
}
