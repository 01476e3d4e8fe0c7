/* session.c - one training run from a script: the steps of preparation, the run to its end, the summary */
#include "scripting/session.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/rundir/rundir.h"
#include "engine/base/error.h"
#include "engine/base/sha256.h"
#include "engine/core/backend.h"
#include "engine/observe/telemetry.h"
#include "engine/rundir/runlog.h"
#include "scripting/script.h"
#include "scripting/session_internal.h"

/* --- prepare -------------------------------------------------------------------- */

/* A new run: the script the caller named. */
static int begin_fresh(dl_session *s)
{
    if (!s->opt.script)
        return dl_error(DL_EINVAL, "no script given");
    snprintf(s->script_path, sizeof s->script_path, "%s", s->opt.script);
    return DL_OK;
}

/* The script, run once, and the seed. A study's objective gets opt.trial,
 * or a fixed trial from the k=v overrides. */
static int load_script(dl_session *s)
{
    dl_script_options so = {s->script_path, s->opt.overrides, s->opt.noverrides, 0};
    DL_TRY(dl_script_load_study(&s->script, &so, s->opt.trial, 0));
    s->exp = dl_script_experiment(s->script);
    if (s->opt.profile_steps > 0 && !s->exp->model) /* a study runs its objective with k=v values */
        return dl_error(DL_EUNSUPPORTED, "%s returns a study: profile one experiment",
                        s->script_path);
    s->seed = s->opt.seed >= 0 ? (uint64_t)s->opt.seed : s->exp->cfg.seed;
    s->exp->cfg.seed = s->seed;
    return DL_OK;
}

/* The backend: opt.device, else the resumed run's, else the script's. */
static int choose_backend(dl_session *s)
{
    const char *dev = s->opt.device ? s->opt.device : s->device[0] ? s->device : s->exp->device;
    char why[256] = "";
    s->be = dl_backend_by_name(dev, why, sizeof why);
    if (!s->be)
        return dl_error(DL_ENODEV, "device %s is not available: %s", dev, why);
    snprintf(s->device, sizeof s->device, "%s", s->be->ops->name);
    return DL_OK;
}

/* The training and validation sources, and the data's fingerprint. */
static int open_data(dl_session *s)
{
    DL_TRY(dl_script_open_data(s->script, s->exp->cfg.batch, s->seed, s->be, &s->train, &s->val,
                               s->fingerprint, sizeof s->fingerprint));
    if (s->opt.profile_steps > 0) /* profile never refused it: the trainer decides */
        return DL_OK;
    if ((size_t)s->exp->cfg.batch > s->train->info.count)
        return dl_error(DL_EINVAL,
                        "%s: batch %d is larger than the training set (%zu samples): every "
                        "buffer is sized by the batch",
                        s->script_path, s->exp->cfg.batch, (size_t)s->train->info.count);
    return DL_OK;
}

/* profile: exactly opt.profile_steps steps, each one logged, the epochs
 * raised to hold them; the script's own settings stay in exp->cfg. */
static void fit_profile_steps(const dl_session *s, dl_trainer_config *cfg)
{
    long per_epoch = session_steps_per_epoch(s->train, cfg->accumulate);
    long want = s->opt.profile_steps;
    cfg->max_steps = want;
    cfg->log_every = 1;
    if (per_epoch > 0 && (long)cfg->epochs * per_epoch < want)
        cfg->epochs = (int)((want + per_epoch - 1) / per_epoch);
}

/* The model on the training samples' shape, and its trainer. A model that
 * cannot be built is bad input, named as such (profile keeps the engine's
 * own error and status). */
static int build_trainer(dl_session *s)
{
    dl_trainer_config cfg = s->exp->cfg;
    if (s->opt.profile_steps > 0)
        fit_profile_steps(s, &cfg);
    int rc = dl_model_create(&s->model, dl_script_take_model(s->script), &s->train->info.sample);
    if (rc == DL_OK)
        rc = dl_trainer_create(&s->trainer, s->model, &s->exp->loss, &s->exp->optim,
                               &s->exp->schedule, s->train, s->val, &cfg, s->be);
    if (rc == DL_OK)
        dl_trainer_set_devices(s->trainer, &dl_devices_builtin);
    if (rc >= 0 || s->opt.profile_steps > 0)
        return rc;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dl_error_message());
    if (rc == DL_ENOMEM)
        rc = DL_EINVAL; /* too big for this machine: the script asks too much */
    return dl_error(rc, "%s: the model does not fit: %s", s->script_path, msg);
}

/* A finished run with the same config hash, found for a new run of rank 0
 * without --force (a parity check runs nothing that needs guarding). */
static int is_duplicate(dl_session *s)
{
    return !s->resumed && !s->opt.force && s->opt.rank == 0 && !s->opt.parity &&
           dl_runlog_find_finished(s->opt.out_dir, s->hash, s->duplicate, sizeof s->duplicate);
}

/* A new run's folder and its "started" event; other ranks and a parity
 * check write none. */
static int open_run_log(dl_session *s)
{
    if (s->opt.rank != 0 || s->opt.parity)
        return DL_OK;
    DL_TRY(dl_runlog_create(&s->log, s->opt.out_dir, s->exp->name, s->hash, s->config,
                            s->script_path));
    snprintf(s->run_dir, sizeof s->run_dir, "%s", dl_runlog_dir(s->log));
    session_emit(s, "started", "%s on %s (%s), seed %llu, config %.8s", s->exp->name, s->device,
                 s->be->description, (unsigned long long)s->seed, s->hash);
    return DL_OK;
}

/* Low precision the device only emulates, said when the run starts. */
static void notice_emulated(dl_session *s)
{
    dl_precision p = s->exp->cfg.precision;
    int bit = p == DL_PREC_BF16 ? DL_LOWP_BF16 : p == DL_PREC_F16 ? DL_LOWP_F16 : 0;
    if (!bit || !(s->be->lowp & DL_LOWP_KNOWN) || (s->be->lowp & bit))
        return;
    const char *name = dl_precision_name(p);
    if (s->be->ops->device == DL_DEVICE_CPU)
        session_emit(s, "warning",
                     "%s is emulated on this CPU: about 0.9x the speed of fp32 (no %s arithmetic: "
                     "f32 kernels on rounded operands); fp32 is faster here: --set precision=fp32",
                     name, p == DL_PREC_BF16 ? "AVX-512 BF16" : "fp16");
    else
        session_emit(s, "warning",
                     "%s is emulated on this device (no tensor cores for it): slower than fp32; "
                     "--set precision=fp32",
                     name);
}

/* The steps of dl_session_prepare, in order; each fails on its own. */
static int prepare_steps(dl_session *s)
{
    DL_TRY(s->opt.resume ? session_resume_begin(s) : begin_fresh(s));
    DL_TRY(load_script(s));
    DL_TRY(session_apply_sets(s));
    DL_TRY(choose_backend(s));
    DL_TRY(open_data(s));
    DL_TRY(build_trainer(s));
    DL_TRY(session_init_from_run(s));
    if (s->opt.profile_steps > 0) /* the caller attaches its profiler and callbacks */
        return DL_OK;
    DL_TRY(session_build_config(s));
    if (is_duplicate(s))
        return DL_SESSION_DUPLICATE;
    DL_TRY(s->resumed ? session_resume_finish(s) : open_run_log(s));
    session_init_report(s);
    if (!s->opt.parity)
        notice_emulated(s);
    session_hooks_attach(s);
    session_publish_prepared(s);
    return DL_OK;
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
    int rc = prepare_steps(s);
    /* the overrides (the caller's, or the resume's own) are not kept */
    for (int i = 0; i < s->resume_nov; i++)
        free(s->resume_ovs[i]);
    free(s->resume_ovs);
    for (int i = 0; i < s->resume_nsets; i++)
        free(s->resume_sets[i]);
    free(s->resume_sets);
    s->resume_ovs = s->resume_sets = NULL;
    s->resume_nov = s->resume_nsets = 0;
    s->opt.overrides = s->opt.sets = NULL;
    s->opt.noverrides = s->opt.nsets = 0;
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

/* How the training ended (rc: dl_trainer_run's), with s->message saying
 * why when it did not finish; a clean end needs its final checkpoint. */
static dl_run_status end_status(dl_session *s, int rc)
{
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
        session_save_checkpoint(s, status == DL_RUN_FINISHED ? "end of training" : "stopped") < 0) {
        /* the state since the last checkpoint is lost: not a clean end */
        snprintf(s->message, sizeof s->message, "the final checkpoint could not be written: %s",
                 dl_error_message());
        status = DL_RUN_FAILED;
    }
    return status;
}

/* summary.json (when there is a run log), the telemetry's last state and
 * the end event. */
static void write_summary(dl_session *s, dl_run_status status)
{
    long steps = dl_trainer_step_count(s->trainer);
    int epoch = dl_trainer_epoch(s->trainer);
    const dl_trainer_config *cfg = dl_trainer_config_of(s->trainer);
    double per_epoch = (double)s->train->info.count;
    double partial = (double)dl_trainer_epoch_step(s->trainer) * cfg->batch * cfg->accumulate;
    dl_run_totals t = {steps, epoch,
                       epoch * per_epoch + (partial < per_epoch ? partial : per_epoch)};
    cJSON *extra = cJSON_CreateObject();
    char hex[65];
    if (params_digest(s, hex) == DL_OK)
        cJSON_AddStringToObject(extra, "params_sha256", hex);
    cJSON_AddStringToObject(extra, "device", s->device);
    cJSON_AddStringToObject(extra, "precision", dl_precision_name(cfg->precision));
    const char *names[] = {"finished", "stopped", "failed"};
    if (s->opt.telemetry) {
        static const dl_tele_state tstates[] = {DL_TELE_FINISHED, DL_TELE_STOPPED, DL_TELE_FAILED};
        session_publish_loader(s);
        if (dl_trainer_profiler(s->trainer))
            dl_telemetry_profile(s->opt.telemetry, dl_trainer_profiler(s->trainer));
        dl_telemetry_set_state(s->opt.telemetry, tstates[status],
                               s->message[0] ? s->message : NULL);
        session_cost_json(s, extra);
        session_advice_json(s, extra);
    }
    session_target_json(s, extra);
    if (s->log)
        dl_runlog_summary(s->log, names[status], &t, s->message[0] ? s->message : NULL, extra);
    cJSON_Delete(extra);
    session_emit(s, names[status], "step %ld, epoch %d%s%s", steps, epoch,
                 s->message[0] ? ": " : "", s->message);
}

/* What the caller reports from summary.json: wall time and throughput. */
static void read_summary(dl_session *s)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/" DL_RUN_FILE_SUMMARY, s->run_dir);
    s->summary = dl_runlog_read_json(path);
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(s->summary, "wall_s");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(s->summary, "samples_per_s");
    s->wall_s = cJSON_IsNumber(w) ? w->valuedouble : 0;
    s->samples_per_s = cJSON_IsNumber(sp) ? sp->valuedouble : 0;
}

dl_run_status dl_session_run(dl_session *s)
{
    dl_run_status status = end_status(s, dl_trainer_run(s->trainer));
    write_summary(s, status);
    read_summary(s);
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
    free(s->init_report);
    cJSON_Delete(s->tgt_json);
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
const dl_experiment *dl_session_experiment(const dl_session *s) { return s->exp; }
dl_source *dl_session_val_source(dl_session *s) { return s->val; }
int dl_session_pruned(const dl_session *s)
{
    /* or the script stopped the run itself after trial:should_prune() said so */
    return s->pruned ||
           (s->stop != STOP_NONE && s->script && dl_script_trial_prune_said(s->script));
}
long dl_session_total_steps(const dl_session *s)
{
    return s->trainer ? dl_trainer_step_count(s->trainer) : 0;
}
double dl_session_wall_s(const dl_session *s) { return s->wall_s; }
double dl_session_samples_per_s(const dl_session *s) { return s->samples_per_s; }

int dl_session_metric(const dl_session *s, const char *name, double *final, double *best)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(s->summary, "final"), name);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s->summary, "best"),
                                         name),
        "value");
    if (!cJSON_IsNumber(f))
        return 0;
    *final = f->valuedouble;
    *best = cJSON_IsNumber(b) ? b->valuedouble : f->valuedouble;
    return 1;
}
