/* session_hooks.c - the trainer callbacks: metrics, built-in and Lua callbacks, checkpoints, stops */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/rundir/rundir.h"
#include "engine/base/error.h"
#include "engine/train/checkpoint.h"
#include "engine/tune/tune.h"
#include "scripting/session_internal.h"

static int run_hooks(dl_session *s, dl_hook hook, long step, int epoch, const char *const *names,
                     const double *values, int n);

static void note_cb(void *user, const char *text)
{
    dl_session *s = user;
    session_emit(s, "note", "%s", text);
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
        session_emit(s, "error", "checkpoint failed: %s", msg);
        dl_error(rc, "%s", msg); /* the message, even if events.log could not take it */
    } else {
        session_emit(s, "checkpoint", "%s saved at step %ld (%s)", file, info.cursor.step, why);
    }
    return rc;
}

int session_save_checkpoint(dl_session *s, const char *why)
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
    names[n] = "lr", values[n++] = session_f7((float)i->lr);
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
        session_publish_loader(s);
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
                session_emit(s, "warning",
                             "early stopping: metric %s is not available (no validation data?)",
                             c->monitor);
                st->seen = -1;
            }
            if (have && st->bad_epochs >= c->patience) {
                session_emit(s, "early_stop", "%s did not improve for %d epochs (best %.6g)",
                             c->monitor, st->bad_epochs, st->best);
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
                save_checkpoint_as(
                    s, c->save_best ? DL_RUN_FILE_CHECKPOINT_BEST : DL_RUN_FILE_CHECKPOINT, why);
            }
        }
    }
    return stop;
}

/* A study trial: reports the study's metric after epoch (as step epoch+1)
 * and asks the pruner; returns 1 to stop the run as pruned. */
static int report_trial(dl_session *s, int epoch, const char *const *names, const double *values,
                        int n)
{
    for (int k = 0; k < n; k++) {
        if (strcmp(names[k], s->exp->study.metric))
            continue;
        if (dl_trial_report(s->opt.trial, epoch + 1, values[k]) < 0) {
            session_emit(s, "warning", "study: %s", dl_error_message());
            return 0;
        }
        if (epoch + 1 >= s->exp->cfg.epochs || dl_trial_should_prune(s->opt.trial) != 1)
            return 0; /* the last epoch finishes the trial anyway */
        s->pruned = 1;
        s->stop = STOP_EXTERNAL;
        snprintf(s->message, sizeof s->message, "pruned after epoch %d (%s %.6g)", epoch + 1,
                 names[k], values[k]);
        session_emit(s, "pruned", "%s", s->message);
        return 1;
    }
    return 0;
}

static int on_epoch(void *user, dl_trainer *t, const dl_epoch_info *i)
{
    dl_session *s = user;
    const char *names[8];
    double values[8];
    int n = 0;
    names[n] = "train_loss", values[n++] = i->train_loss;
    if (isfinite(i->train_acc))
        names[n] = "train_acc", values[n++] = i->train_acc;
    if (isfinite(i->val_loss))
        names[n] = "val_loss", values[n++] = i->val_loss;
    if (isfinite(i->val_acc))
        names[n] = "val_acc", values[n++] = i->val_acc;
    if (dl_trainer_tokens(t) > 0 && isfinite(i->val_loss)) { /* a language model, in nats/token */
        names[n] = "val_ppl", values[n++] = exp(i->val_loss);
        names[n] = "val_bpc", values[n++] = i->val_loss / log(2.0);
    }
    names[n] = "lr", values[n++] = session_f7((float)dl_trainer_current_lr(t));
    names[n] = "seconds", values[n++] = i->seconds;
    if (s->log && dl_runlog_metrics(s->log, "epoch", i->step, i->epoch + 1, names, values, n) < 0)
        return DL_EIO;
    if (s->opt.telemetry)
        dl_telemetry_epoch(s->opt.telemetry, i);
    if (s->opt.target_metric[0])
        session_target_epoch(s, i, names, values, n);
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
            session_save_checkpoint(s, "requested");
        return;
    }
    if (!strcmp(kind, "device") && s->opt.telemetry) {
        /* a hot switch: the run's device and the peak the MFU is measured against */
        dl_backend *be = dl_trainer_backend(s->trainer);
        if (be && be->ops->name && strcmp(be->ops->name, s->device)) {
            snprintf(s->device, sizeof s->device, "%s", be->ops->name);
            session_publish_run(s, DL_TELE_RUNNING);
            session_publish_peak(s, be);
        }
    }
    session_emit(s, kind, "%s", text);
}

static int on_idle(void *user, dl_trainer *t)
{
    dl_session *s = user;
    long step = dl_trainer_step_count(t);
    if (s->opt.on_idle)
        s->opt.on_idle(s->opt.user);
    if (dl_session_interrupted()) {
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
            session_save_checkpoint(s, why);
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
        if (dl_session_interrupted()) {
            s->stop = STOP_EXTERNAL;
            snprintf(s->message, sizeof s->message, "interrupted at step %ld", step);
            return 1;
        }
        return rc;
    }
    if (r.stop) {
        s->stop = STOP_PLANNED;
        snprintf(s->message, sizeof s->message, "%s", r.stop_reason);
        session_emit(s, "stop", "%s", r.stop_reason);
        return 1;
    }
    return 0;
}

void session_hooks_attach(dl_session *s)
{
    dl_callbacks cb = {s, on_step, on_epoch, on_event, on_idle};
    dl_trainer_set_callbacks(s->trainer, &cb);
}
