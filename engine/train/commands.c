/* commands.c - the command queue: posted from any thread, applied by the training thread between steps */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/train/parity.h"
#include "engine/train/trainer_internal.h"

int dl_trainer_post(dl_trainer *t, dl_command_kind kind, double value, const char *text)
{
    pthread_mutex_lock(&t->lock);
    if (t->nq == DL_TRAINER_QUEUE) {
        pthread_mutex_unlock(&t->lock);
        return dl_error(DL_ERR, "command queue full (%d commands waiting)", DL_TRAINER_QUEUE);
    }
    dl_trainer_command *c = &t->queue[t->nq++];
    c->kind = kind;
    c->value = value;
    snprintf(c->text, sizeof c->text, "%s", text ? text : "");
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
    return DL_OK;
}

void dl_trainer_request_stop(dl_trainer *t) { dl_trainer_post(t, DL_CMD_STOP, 0, NULL); }

void dl_trainer_wait_command(dl_trainer *t)
{
    pthread_mutex_lock(&t->lock);
    if (t->nq == 0) {
        struct timespec ts = dl_clock_deadline_ms(100);
        pthread_cond_timedwait(&t->cond, &t->lock, &ts);
    }
    pthread_mutex_unlock(&t->lock);
}

/* The backend named device through the trainer's device table; NULL with
 * why filled (also when the trainer was given no table). */
static dl_backend *open_device(dl_trainer *t, const char *device, char *why, size_t size)
{
    if (!t->devices) {
        snprintf(why, size, "this training was given no devices to move to");
        return NULL;
    }
    return t->devices->by_name(device, why, size);
}

static void set_lr(dl_trainer *t, double lr)
{
    if (lr > 0 && isfinite(lr)) {
        dl_trainer_event(t, "lr", "step %ld: base learning rate %g -> %g", t->step,
                         (double)t->base_lr, lr);
        t->base_lr = (float)lr;
    } else {
        dl_trainer_event(t, "error", "learning rate %g refused: must be positive", lr);
    }
}

/* The switch asked for by a command: its outcome is an event. */
static void switch_command(dl_trainer *t, const char *device)
{
    char why[256] = "";
    if (t->dp) {
        dl_trainer_event(t, "error", "cannot switch to %s: not in a job of %d ranks", device,
                         t->dp->size);
        return;
    }
    dl_backend *be = open_device(t, device, why, sizeof why);
    if (!be) {
        dl_trainer_event(t, "error", "cannot switch to %s: %s", device, why);
    } else if (be != t->be) {
        const char *from = t->be->ops->name;
        double t0 = dl_clock_mono_s();
        int rc = dl_trainer_switch_device(t, be);
        if (rc < 0)
            dl_trainer_event(t, "error", "switch to %s failed, training stays on %s: %s",
                             be->ops->name, from, dl_error_message());
        else
            dl_trainer_event(t, "device", "step %ld: moved from %s to %s in %.3f s", t->step, from,
                             be->ops->name, dl_clock_mono_s() - t0);
    }
}

/* The backend a parity command names: "cpu:T" is made (*own, for the
 * caller to destroy), others are the process's; NULL with why filled. */
static dl_backend *parity_backend(dl_trainer *t, const char *want, dl_backend **own, char *why,
                                  size_t size)
{
    *own = NULL;
    if (t->dp) {
        snprintf(why, size, "not in a job of %d ranks", t->dp->size);
        return NULL;
    }
    if (strncmp(want, "cpu:", 4))
        return open_device(t, want, why, size);
    char *end;
    long n = strtol(want + 4, &end, 10);
    if (*end || n < 1 || n > DL_CPU_MAX_THREADS) {
        snprintf(why, size, "\"%s\": expected cpu:T with T from 1 to %d threads", want,
                 DL_CPU_MAX_THREADS);
        return NULL;
    }
    if (!t->devices) {
        snprintf(why, size, "this training was given no devices to move to");
        return NULL;
    }
    if (!(*own = t->devices->cpu_create((int)n)))
        snprintf(why, size, "%s", dl_error_message());
    return *own;
}

/* The parity check asked for by a command (the workbench's P, the control
 * socket), between steps: its outcome is an event. */
static void parity_command(dl_trainer *t, const char *device, int steps)
{
    char why[256] = "", name[32];
    const char *want = device[0] ? device : t->be->ops->device == DL_DEVICE_CPU ? "cuda" : "cpu";
    snprintf(name, sizeof name, "%s", want);
    dl_backend *own;
    dl_backend *other = parity_backend(t, want, &own, why, sizeof why);
    if (!other) {
        dl_trainer_event(t, "error", "cannot check parity against %s: %s", name, why);
        return;
    }
    if (other == t->be) {
        dl_trainer_event(t, "error", "cannot check parity against %s: the training is on it", name);
        return;
    }
    dl_parity_report r;
    memset(&r, 0, sizeof r);
    int rc = dl_trainer_check_parity(t, other, steps, &r);
    if (rc < 0) {
        dl_trainer_event(t, "error", "parity check against %s failed: %s", name,
                         dl_error_message());
    } else {
        double tol = t->cfg.precision == DL_PREC_F32   ? 1e-3
                     : t->cfg.precision == DL_PREC_F16 ? 1e-2
                                                       : 2e-2;
        double worst = fmax(r.max_loss_rel, r.max_param_rel);
        dl_trainer_event(t, "parity",
                         "step %ld, %d steps on %s and %s: largest relative "
                         "difference %.3g in loss, %.3g in parameters (%s); %s the default "
                         "tolerance %g",
                         t->step, r.steps, t->be->ops->name, name, r.max_loss_rel, r.max_param_rel,
                         r.worst_param[0] ? r.worst_param : "-", worst <= tol ? "within" : "OVER",
                         tol);
    }
    dl_parity_report_done(&r);
    if (own)
        t->devices->cpu_destroy(own);
}

/* The what-if probes asked for by a command (the workbench's and watch's
 * A, the control socket), between steps: one event a variant, measured
 * against the baseline, and the training back where it was. */
static void probe_command(dl_trainer *t, int steps)
{
    dl_probe_report r;
    dl_trainer_probe_variants(t, &r);
    int rc = dl_trainer_probe(t, steps, &r);
    if (rc < 0) {
        dl_trainer_event(t, "error", "probes failed: %s", dl_error_message());
        return;
    }
    const dl_probe_variant *b = &r.v[0];
    for (int i = 0; i < r.n; i++) {
        const dl_probe_variant *v = &r.v[i];
        if (v->projected)
            dl_trainer_event(
                t, "probe", "%s: projected, %.1f s saved over the rest of the run (%s)%s%s",
                v->label, v->saves_s, v->note, v->command[0] ? "; apply: " : "", v->command);
        else if (v->failed)
            dl_trainer_event(t, "probe", "%s: failed: %s", v->label, v->why);
        else if (b->failed || !(b->step_s > 0) || !(b->loss > 0))
            dl_trainer_event(t, "probe", "%s: %d steps, %.3f ms a step, loss %.4f", v->label,
                             v->steps, v->step_s * 1e3, v->loss);
        else
            dl_trainer_event(t, "probe",
                             "%s: step %ld, %d steps, %.3f ms a step (%.2fx the baseline's "
                             "speed), loss %.4f (%+.1f%%)%s%s",
                             v->label, r.first_step, v->steps, v->step_s * 1e3,
                             b->step_s / v->step_s, v->loss, 100 * (v->loss - b->loss) / b->loss,
                             v->command[0] ? "; apply: " : "", v->command);
    }
}

static void apply(dl_trainer *t, const dl_trainer_command *c)
{
    switch (c->kind) {
    case DL_CMD_PAUSE:
        if (!t->paused)
            dl_trainer_event(t, "paused", "paused at step %ld", t->step);
        t->paused = 1;
        break;
    case DL_CMD_RESUME:
        if (t->paused)
            dl_trainer_event(t, "resumed", "resumed at step %ld", t->step);
        t->paused = 0;
        break;
    case DL_CMD_STOP:
        t->stop = 1;
        dl_trainer_event(t, "stop", "stop requested at step %ld", t->step);
        break;
    case DL_CMD_SET_LR: set_lr(t, c->value); break;
    case DL_CMD_SWITCH: switch_command(t, c->text); break;
    case DL_CMD_PARITY: parity_command(t, c->text, (int)c->value); break;
    case DL_CMD_PROBE: probe_command(t, (int)c->value); break;
    case DL_CMD_CHECKPOINT: dl_trainer_event(t, "checkpoint", "%s", c->text); break;
    case DL_CMD_NOTE: dl_trainer_event(t, "note", "%s", c->text); break;
    }
}

/* Takes the queued commands (the status published first: the state after
 * the last step). */
static int take_queue(dl_trainer *t, dl_trainer_command *q)
{
    pthread_mutex_lock(&t->lock);
    dl_trainer_publish_locked(t);
    int nq = t->nq;
    memcpy(q, t->queue, (size_t)nq * sizeof *q);
    t->nq = 0;
    pthread_mutex_unlock(&t->lock);
    return nq;
}

int dl_trainer_drain(dl_trainer *t)
{
    for (;;) {
        dl_trainer_command q[DL_TRAINER_QUEUE];
        int nq = take_queue(t, q);
        for (int i = 0; i < nq; i++)
            apply(t, &q[i]);
        if (t->cb.on_idle) {
            int rc = t->cb.on_idle(t->cb.user, t);
            if (rc < 0)
                return rc;
            if (rc > 0)
                t->stop = 1;
        }
        dl_trainer_publish(t); /* and after the commands */
        if (!t->paused || t->stop || t->dp)
            return DL_OK; /* data parallel: the run loop waits, in step with the ranks */
        dl_trainer_wait_command(t);
        t->rep_t0 = dl_clock_mono_s(); /* paused time is not training time */
    }
}
