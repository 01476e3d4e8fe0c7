/* state.c - the trainer's state: events, device staging, window statistics, accessors, the cursor */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/train/trainer_internal.h"

void dl_trainer_event(dl_trainer *t, const char *kind, const char *fmt, ...)
{
    if (!t->cb.on_event)
        return;
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    t->cb.on_event(t->cb.user, t, kind, text);
}

float *dl_trainer_stats(dl_trainer *t, int slot)
{
    return (float *)((char *)t->stage->ptr + t->off_stats) + DL_TRAINER_NSTATS * slot;
}

float *dl_trainer_guard_cells(dl_trainer *t) { return dl_trainer_stats(t, 2); }

/* The skips the cells count and the last norm, without consuming them. */
static int peek_guard(dl_trainer *t, long *skips, double *norm)
{
    float c[4] = {0, 0, 0, 0};
    *skips = 0;
    *norm = t->grad_norm;
    if (!t->guard_used)
        return DL_OK;
    DL_TRY(t->be->ops->to_host(t->be, c, dl_trainer_guard_cells(t), sizeof c));
    *skips = (long)c[3];
    *norm = c[0];
    return DL_OK;
}

int dl_trainer_fold_guard(dl_trainer *t)
{
    long skips;
    double norm;
    DL_TRY(peek_guard(t, &skips, &norm));
    t->grad_norm = norm;
    long from = t->guard_from;
    t->guard_from = t->step + 1;
    if (skips == 0)
        return DL_OK;
    DL_TRY(t->be->ops->memset0(t->be, dl_trainer_guard_cells(t) + 3, sizeof(float)));
    t->skipped += skips;
    if (t->cfg.nonfinite == DL_NONFINITE_STOP)
        return dl_error(DL_ENONFINITE,
                        "non-finite gradient in %ld of steps %ld-%ld (epoch %d; found on the "
                        "device, those steps left the parameters as they were): lower the "
                        "learning rate (now %g), clip gradients, or use loss scaling",
                        skips, from, t->step, t->epoch + 1, t->lr_now);
    dl_trainer_event(t, "nonfinite", "steps %ld-%ld: %ld non-finite gradient(s), step(s) skipped",
                     from, t->step, skips);
    return DL_OK;
}

int dl_trainer_alloc_stage(dl_trainer *t, dl_backend *be)
{
    /* the statistics: train window, evaluation, the gradient check */
    size_t bytes = t->off_stats + 3 * DL_TRAINER_NSTATS * sizeof(float);
    dl_storage *s = dl_storage_create(be, bytes);
    if (!s)
        return DL_ENOMEM;
    if (t->stage) {
        /* carry the statistics of the window in flight (and the check's) */
        float host[3 * DL_TRAINER_NSTATS];
        dl_backend *old = t->stage->be;
        int rc = old->ops->to_host(old, host, dl_trainer_stats(t, 0), sizeof host);
        if (rc == DL_OK)
            rc = be->ops->to_device(be, (char *)s->ptr + t->off_stats, host, sizeof host);
        if (rc < 0) {
            dl_storage_release(s);
            return rc;
        }
    }
    dl_trainer_free_stage(t);
    t->stage = s;
    /* the slots' events, where the backend overlaps uploads */
    if (be->ops->to_device_after && be->ops->event_create && be->ops->event_record)
        for (int i = 0; i < 2; i++)
            t->slot_free[i] = be->ops->event_create(be); /* NULL: that slot waits for all */
    return DL_OK;
}

void dl_trainer_free_stage(dl_trainer *t)
{
    if (!t->stage)
        return;
    dl_backend *be = t->stage->be;
    for (int i = 0; i < 2; i++) {
        if (t->slot_free[i])
            be->ops->event_destroy(be, t->slot_free[i]);
        t->slot_free[i] = NULL;
        t->slot_armed[i] = 0;
    }
    dl_storage_release(t->stage);
    t->stage = NULL;
}

/* The window's sums from the device floats: per token, the means over
 * the kept tokens scaled to the window's rows. */
static void window_sums(const dl_trainer *t, const float *host, double *loss_sum, double *correct)
{
    double rows = (double)t->rep_samples;
    if (t->tokens && host[2] > 0) {
        *loss_sum = (double)host[0] / host[2] * rows;
        *correct = (double)host[1] / host[2] * rows;
    } else {
        *loss_sum = t->tokens ? 0 : host[0];
        *correct = t->tokens ? 0 : host[1];
    }
}

int dl_trainer_take_stats(dl_trainer *t, double *loss_sum, double *correct, int consume)
{
    float host[DL_TRAINER_NSTATS];
    DL_TRY(t->be->ops->to_host(t->be, host, dl_trainer_stats(t, 0), sizeof host));
    if (consume)
        DL_TRY(t->be->ops->memset0(t->be, dl_trainer_stats(t, 0), sizeof host));
    window_sums(t, host, loss_sum, correct);
    return DL_OK;
}

double dl_trainer_per_sample(const dl_trainer *t)
{
    return t->loss.kind == DL_LOSS_XENT ? 1.0 : (double)dl_shape_numel(dl_model_output_shape(t->m));
}

int dl_trainer_window_open(const dl_trainer *t)
{
    return t->dp ? t->rep_steps > 0 : t->rep_samples > 0;
}

void dl_trainer_params_changed(dl_trainer *t) { t->lowp_dirty = 1; }
dl_model *dl_trainer_model(dl_trainer *t) { return t->m; }
dl_backend *dl_trainer_backend(dl_trainer *t) { return t->be; }
long dl_trainer_step_count(const dl_trainer *t) { return t->step; }
int dl_trainer_tokens(const dl_trainer *t) { return t->tokens; }
int dl_trainer_epoch(const dl_trainer *t) { return t->epoch; }
long dl_trainer_epoch_step(const dl_trainer *t) { return t->epoch_step; }
int dl_trainer_stopped(const dl_trainer *t) { return t->stop; }
int dl_trainer_paused(const dl_trainer *t) { return t->paused; }
float dl_trainer_loss_scale(const dl_trainer *t) { return t->loss_scale; }
float dl_trainer_base_lr(const dl_trainer *t) { return t->base_lr; }
void dl_trainer_set_base_lr(dl_trainer *t, float lr) { t->base_lr = lr; }
double dl_trainer_current_lr(const dl_trainer *t) { return t->lr_now; }
const dl_trainer_config *dl_trainer_config_of(const dl_trainer *t) { return &t->cfg; }

void dl_trainer_get_cursor(dl_trainer *t, dl_trainer_cursor *c)
{
    memset(c, 0, sizeof *c);
    c->step = t->step;
    c->epoch = t->epoch;
    c->epoch_step = t->epoch_step;
    c->loss_scale = t->loss_scale;
    c->clean_steps = t->clean_steps;
    long pending = 0;
    double norm;
    c->skipped = t->skipped + (peek_guard(t, &pending, &norm) == DL_OK ? pending : 0);
    c->base_lr = t->base_lr;
    c->sched_scale = t->sched.scale;
    c->sched_best = t->sched.best;
    c->sched_bad = t->sched.bad_epochs;
    c->ep_loss = t->ep_loss;
    c->ep_correct = t->ep_correct;
    c->ep_samples = t->ep_samples;
    c->rep_samples = t->rep_samples;
    c->rep_steps = t->rep_steps;
    float host[DL_TRAINER_NSTATS] = {0};
    if (t->be->ops->to_host(t->be, host, dl_trainer_stats(t, 0), sizeof host) == DL_OK) {
        double loss_sum, correct;
        window_sums(t, host, &loss_sum, &correct);
        c->rep_loss = (float)loss_sum;
        c->rep_correct = (float)correct;
    }
}

int dl_trainer_set_cursor(dl_trainer *t, const dl_trainer_cursor *c)
{
    if (c->step < 0 || c->epoch < 0 || c->epoch_step < 0 || !(c->loss_scale > 0) ||
        c->ep_samples < 0 || c->rep_samples < 0 || c->rep_steps < 0)
        return dl_error(DL_EINVAL, "invalid trainer cursor (step %ld, epoch %d)", c->step,
                        c->epoch);
    /* per token: the sums as means over the window's rows (see window_sums) */
    float host[DL_TRAINER_NSTATS] = {c->rep_loss, c->rep_correct,
                                     t->tokens ? (float)c->rep_samples : 0, 0};
    DL_TRY(t->be->ops->to_device(t->be, dl_trainer_stats(t, 0), host, sizeof host));
    t->step = c->step;
    t->epoch = c->epoch;
    t->epoch_step = c->epoch_step;
    t->loss_scale = c->loss_scale;
    t->clean_steps = c->clean_steps;
    t->skipped = c->skipped;
    if (t->guard_used) { /* the cursor's count includes the check's: start it afresh */
        DL_TRY(t->be->ops->memset0(t->be, dl_trainer_guard_cells(t) + 3, sizeof(float)));
        t->guard_from = t->step + 1;
    }
    t->base_lr = c->base_lr;
    t->sched.scale = c->sched_scale;
    t->sched.best = c->sched_best;
    t->sched.bad_epochs = c->sched_bad;
    t->ep_loss = c->ep_loss;
    t->ep_correct = c->ep_correct;
    t->ep_samples = c->ep_samples;
    t->rep_samples = c->rep_samples;
    t->rep_steps = c->rep_steps;
    t->epoch_open = 0;
    /* micro-batch counter (keys dropout): every finished epoch ran all its
     * batches, every step of this one `accumulate` of them */
    uint64_t per_epoch = t->train->ops->batches(t->train);
    t->micro =
        (uint64_t)c->epoch * per_epoch + (uint64_t)c->epoch_step * (uint64_t)t->cfg.accumulate;
    t->lowp_dirty = 1;
    return DL_OK;
}
