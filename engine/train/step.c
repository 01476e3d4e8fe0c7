/* step.c - one optimizer step (accumulated micro-batches, loss scaling, clipping), its reports, validation, epoch ends */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/data/shard.h"
#include "engine/train/trainer_internal.h"

/* Bytes of one batch of n rows as the source yields them (x and y). */
static double batch_bytes(const dl_source *src, int n)
{
    const dl_data_info *in = &src->info;
    return (double)n * ((double)dl_shape_numel(&in->sample) * (double)dl_dtype_size(in->x_dtype) +
                        4.0 * (in->y_width > 0 ? in->y_width : 1));
}

/* Copies x and y of a batch into the next stage slot; its index into
 * *slot. Where the backend overlaps uploads (to_device_after) the copy
 * waits only for the last reader of that slot, two batches back. */
static int upload(dl_trainer *t, const dl_batch *b, size_t xb, size_t yb, int *slot)
{
    dl_backend *be = t->be;
    int s = t->slot;
    t->slot ^= 1;
    *slot = s;
    char *base = t->stage->ptr;
    dl_event *ev = t->slot_free[s];
    if (!ev) {
        DL_TRY(be->ops->to_device(be, base + t->off_x[s], b->x, xb));
        return be->ops->to_device(be, base + t->off_y[s], b->y, yb);
    }
    dl_event *after = t->slot_armed[s] ? ev : NULL;
    DL_TRY(be->ops->to_device_after(be, base + t->off_x[s], b->x, xb, after));
    return be->ops->to_device_after(be, base + t->off_y[s], b->y, yb, after);
}

/* The batch in stage slot s is read (its x converted, its labels taken by
 * the loss): the slot may take the next copy once the device is here. */
static int release_slot(dl_trainer *t, int s)
{
    if (s < 0 || !t->slot_free[s])
        return DL_OK;
    DL_TRY(t->be->ops->event_record(t->be, t->slot_free[s]));
    t->slot_armed[s] = 1;
    return DL_OK;
}

/* Uploads a batch and converts x to f32 in the model input; *slot: the
 * stage slot it used (-1: none, on the CPU), for release_slot. */
static int load_batch(dl_trainer *t, dl_source *src, const dl_batch *b, const void **labels,
                      int *slot)
{
    dl_backend *be = t->be;
    const dl_data_info *in = &src->info;
    size_t sample = (size_t)dl_shape_numel(&in->sample);
    size_t xb = (size_t)b->n * sample * dl_dtype_size(in->x_dtype);
    size_t yb = (size_t)b->n * (size_t)(in->y_width > 0 ? in->y_width : 1) * 4;
    if (b->n > t->cfg.batch)
        return dl_error(DL_EINVAL, "%s yielded a batch of %d rows, more than the planned %d",
                        src->name, b->n, t->cfg.batch);
    const void *x = b->x, *y = b->y;
    *slot = -1;
    if (be->ops->device != DL_DEVICE_CPU) {
        DL_TRY(upload(t, b, xb, yb, slot));
        char *base = t->stage->ptr;
        x = base + t->off_x[*slot];
        y = base + t->off_y[*slot];
    }
    /* channels for normalisation: the first dimension of an image sample */
    int ch = in->channels;
    size_t plane = ch > 0 ? sample / (size_t)ch : sample;
    DL_TRY(be->ops->input_to_f32(be, dl_model_input(t->m), x, in->x_dtype, (size_t)b->n,
                                 ch > 0 ? ch : 1, plane, in->scale != 0 ? in->scale : 1.0f,
                                 ch > 0 ? in->mean : NULL, ch > 0 ? in->std : NULL));
    *labels = y;
    return DL_OK;
}

/* Loss forward+backward on the model output for n rows; stats += . */
static int apply_loss(dl_trainer *t, int n, const void *labels, float grad_scale, float *dout,
                      float *stats)
{
    dl_backend *be = t->be;
    size_t outs = (size_t)dl_shape_numel(dl_model_output_shape(t->m));
    float *y = dl_model_output(t->m);
    if (t->tokens) /* the op averages over kept tokens; the update divides by rows */
        return dl_loss_xent_tokens(be, &t->loss, t->loss.ignore_index, n * t->tokens,
                                   (int)(outs / (size_t)t->tokens), y, labels,
                                   grad_scale * (float)n, dout, stats);
    switch (t->loss.kind) {
    case DL_LOSS_XENT:
        return be->ops->softmax_xent(be, n, (int)outs, y, labels, t->loss.smoothing, grad_scale,
                                     dout, stats);
    case DL_LOSS_MSE:
        /* mean over the outputs of a sample, as PyTorch's reduction='mean' per row */
        return be->ops->mse(be, (size_t)n * outs, y, labels, grad_scale / (float)outs, dout, stats);
    case DL_LOSS_BCE:
        return be->ops->bce_logits(be, (size_t)n * outs, y, labels, grad_scale / (float)outs, dout,
                                   stats);
    }
    return dl_error(DL_EINVAL, "unknown loss");
}

static int zero_grads(dl_trainer *t)
{
    dl_model_state s;
    dl_model_get_state(t->m, &s);
    return t->be->ops->memset0(t->be, s.grads, s.count * sizeof(float));
}

static dl_dtype lowp_dtype(dl_precision prec)
{
    return prec == DL_PREC_BF16 ? DL_BF16 : prec == DL_PREC_F16 ? DL_F16 : DL_F32;
}

/* Opens the epoch's batch order at the cursor; refreshes a stale
 * low-precision copy. */
static int open_epoch(dl_trainer *t)
{
    if (!t->epoch_open) {
        DL_TRY(t->train->ops->start_epoch(t->train, t->epoch,
                                          (size_t)t->epoch_step * (size_t)t->cfg.accumulate));
        t->epoch_open = 1;
    }
    if (t->lowp_dirty) {
        DL_TRY(dl_model_refresh_lowp(t->m, lowp_dtype(t->cfg.precision)));
        t->lowp_dirty = 0;
    }
    return DL_OK;
}

/* Rows of a step: this rank's, and every rank's (alone: the same). */
typedef struct step_rows {
    long local, all;
} step_rows;

/* Forward, loss and backward of the micro-batch in the model input. */
static int passes(dl_trainer *t, dl_pass *p, const void *labels, float micro_scale, int slot)
{
    dl_profiler *pf = t->prof;
    dl_prof_arm_pass(pf, p);
    dl_prof_span sp = dl_prof_begin(pf);
    DL_TRY(dl_model_forward(t->m, p));
    dl_prof_end(pf, sp, DL_PROF_FORWARD, "forward", 0, 0);
    sp = dl_prof_begin(pf);
    DL_TRY(apply_loss(t, p->n, labels, micro_scale, dl_model_output_grad(t->m),
                      dl_trainer_stats(t, 0)));
    DL_TRY(release_slot(t, slot)); /* x was converted, the labels are read */
    double outs = (double)p->n * (double)dl_shape_numel(dl_model_output_shape(t->m));
    dl_prof_end(pf, sp, DL_PROF_LOSS, dl_loss_name(t->loss.kind), 5 * outs, 8 * outs);
    sp = dl_prof_begin(pf);
    DL_TRY(dl_model_backward(t->m, p));
    dl_prof_end(pf, sp, DL_PROF_BACKWARD, "backward", 0, 0);
    return DL_OK;
}

/* The next micro-batch through the model; last: the step's last one (its
 * gradients become final layer by layer). Returns 1 after a batch, 0 when
 * the epoch has none left. */
static int micro_batch(dl_trainer *t, int last, float micro_scale, step_rows *rows)
{
    dl_profiler *pf = t->prof;
    dl_batch b;
    dl_prof_span sp = dl_prof_begin(pf);
    int rc = t->train->ops->next(t->train, &b);
    if (rc < 0)
        return rc;
    dl_prof_end(pf, sp, DL_PROF_DATA, "data wait", 0, 0);
    if (rc == 0)
        return 0;
    t->rep_wait += b.wait_s;
    rows->all += t->dp ? dl_source_shard_global_rows(t->train) : b.n;
    if (t->dp && b.n == 0) { /* a batch with fewer rows than ranks: none here */
        t->micro++;
        return 1;
    }
    const void *labels;
    int slot;
    sp = dl_prof_begin(pf);
    DL_TRY(load_batch(t, t->train, &b, &labels, &slot));
    dl_prof_end(pf, sp, DL_PROF_COPY, "input copy + convert", 0, batch_bytes(t->train, b.n));
    dl_pass p;
    dl_model_pass(t->m, &p, b.n, 1, t->cfg.precision, t->cfg.seed, t->micro++);
    if (t->dp && last) {
        p.grad_hook = dl_trainer_grad_ready;
        p.grad_user = t;
    }
    DL_TRY(passes(t, &p, labels, micro_scale, slot));
    rows->local += b.n;
    return 1;
}

/* Data parallel: the gradients summed over ranks (divided later by the
 * rows of all ranks). */
static int sum_grads(dl_trainer *t)
{
    dl_prof_span sp = dl_prof_begin(t->prof);
    DL_TRY(t->dp->grad_finish(t->dp->ctx));
    double bytes = 4.0 * (double)dl_model_param_count(t->m);
    dl_prof_end(t->prof, sp, DL_PROF_OTHER, "gradient all-reduce", 0, 2 * bytes);
    t->rep_comm += t->dp->take_seconds(t->dp->ctx);
    return DL_OK;
}

/* A non-finite gradient: the step is skipped (f16: the loss scale
 * halves), or the run fails (DL_NONFINITE_STOP). */
static int skip_step(dl_trainer *t)
{
    DL_TRY(zero_grads(t));
    t->skipped++;
    if (t->cfg.precision == DL_PREC_F16) {
        t->loss_scale *= 0.5f;
        t->clean_steps = 0;
        dl_trainer_event(t, "loss_scale",
                         "step %ld: gradient overflow, step skipped, loss "
                         "scale halved to %g",
                         t->step + 1, (double)t->loss_scale);
    } else if (t->cfg.nonfinite == DL_NONFINITE_SKIP) {
        dl_trainer_event(t, "nonfinite", "step %ld: non-finite gradient, step skipped",
                         t->step + 1);
    } else {
        return dl_error(DL_ENONFINITE,
                        "non-finite gradient at step %ld (epoch %d): lower the learning "
                        "rate (now %g), clip gradients, or use loss scaling",
                        t->step + 1, t->epoch + 1, t->lr_now);
    }
    return DL_OK;
}

/* The optimizer's update at the scheduled learning rate; f16: the loss
 * scale doubles after a window of clean steps. */
static int apply_step(dl_trainer *t, double norm, float grad_scale)
{
    dl_dtype lowp = lowp_dtype(t->cfg.precision);
    t->grad_norm = norm;
    t->lr_now = dl_schedule_lr(&t->sched, t->base_lr, t->step, t->total_steps);
    DL_TRY(
        dl_optim_step_lowp(&t->opt, t->m, (float)t->lr_now, t->step + 1, grad_scale, NULL, lowp));
    if (t->cfg.precision == DL_PREC_F16 && ++t->clean_steps >= t->cfg.loss_scale_window) {
        t->loss_scale *= 2.0f;
        t->clean_steps = 0;
    }
    return DL_OK;
}

/* Whether the step's check runs on the device: a backend that can, and
 * no host decision needed at once (fp16's loss scale, data parallelism). */
static int guard_on_device(const dl_trainer *t)
{
    return !t->dp && t->cfg.precision != DL_PREC_F16 && dl_guard_available(t->be);
}

/* update() with nothing read back: the norm, the clipping and the skip
 * are decided on the device (dl_guard_grads), the host learns them at
 * the next report (dl_trainer_fold_guard). */
static int update_on_device(dl_trainer *t, float grad_scale)
{
    dl_profiler *pf = t->prof;
    double nparam = (double)dl_model_param_count(t->m);
    float *cells = dl_trainer_guard_cells(t);
    if (!t->guard_used) {
        t->guard_used = 1;
        t->guard_from = t->step + 1;
    }
    dl_prof_span sp = dl_prof_begin(pf);
    DL_TRY(dl_guard_grads(t->m, t->opt.clip_norm, grad_scale, cells));
    dl_prof_end(pf, sp, DL_PROF_OPTIMIZER, "grad norm + clip", 2 * nparam, 4 * nparam);
    sp = dl_prof_begin(pf);
    dl_dtype lowp = lowp_dtype(t->cfg.precision);
    t->lr_now = dl_schedule_lr(&t->sched, t->base_lr, t->step, t->total_steps);
    DL_TRY(
        dl_optim_step_lowp(&t->opt, t->m, (float)t->lr_now, t->step + 1, grad_scale, cells, lowp));
    int moments = dl_optim_moments(&t->opt);
    dl_prof_end(pf, sp, DL_PROF_OPTIMIZER, "optimizer step", (moments == 2 ? 12.0 : 4.0) * nparam,
                8.0 * (2 + moments) * nparam);
    return DL_OK;
}

/* Gradient norm and clipping, then the update (or the skip) for a step of
 * rows rows: the mean over them, undoing the loss scale. */
static int update(dl_trainer *t, long rows)
{
    dl_profiler *pf = t->prof;
    float grad_scale = (float)t->cfg.batch / (t->loss_scale * (float)rows);
    if (guard_on_device(t))
        return update_on_device(t, grad_scale);
    double norm = 0;
    double nparam = (double)dl_model_param_count(t->m);
    dl_prof_span sp = dl_prof_begin(pf);
    DL_TRY(dl_clip_grad_norm(t->m, t->opt.clip_norm, grad_scale, &norm));
    dl_prof_end(pf, sp, DL_PROF_OPTIMIZER, "grad norm + clip", 2 * nparam, 4 * nparam);
    sp = dl_prof_begin(pf);
    DL_TRY(isfinite(norm) ? apply_step(t, norm, grad_scale) : skip_step(t));
    /* w, g and the moments are read and written once */
    int moments = dl_optim_moments(&t->opt);
    dl_prof_end(pf, sp, DL_PROF_OPTIMIZER, "optimizer step", (moments == 2 ? 12.0 : 4.0) * nparam,
                8.0 * (2 + moments) * nparam);
    return DL_OK;
}

int dl_trainer_step(dl_trainer *t)
{
    DL_TRY(open_epoch(t));
    float micro_scale = t->loss_scale / (float)t->cfg.batch;
    step_rows rows = {0, 0};
    dl_prof_step_begin(t->prof, t->step + 1);
    if (t->dp)
        t->dp->grad_begin(t->dp->ctx);
    for (int k = 0; k < t->cfg.accumulate; k++) {
        int rc = micro_batch(t, k == t->cfg.accumulate - 1, micro_scale, &rows);
        if (rc < 0)
            return rc;
        if (rc == 0)
            break;
    }
    if (rows.all == 0) {
        dl_prof_step_discard(t->prof);
        return 1;
    }
    if (t->dp)
        DL_TRY(sum_grads(t));
    DL_TRY(update(t, rows.all));
    dl_prof_step_end(t->prof);
    t->step++;
    t->epoch_step++;
    t->rep_samples += rows.local;
    t->rep_steps++;
    return 0;
}

/* The window's record: means per sample, throughput, the job's figures. */
static void fill_info(dl_trainer *t, dl_step_info *info, double loss_sum, double correct, double dt,
                      double comm_s)
{
    memset(info, 0, sizeof *info);
    info->step = t->step;
    info->epoch = t->epoch;
    info->epoch_step = t->epoch_step;
    info->steps_per_epoch = t->steps_per_epoch;
    double n = t->rep_samples > 0 ? (double)t->rep_samples : 1;
    info->loss = loss_sum / n / dl_trainer_per_sample(t);
    info->acc = t->loss.kind == DL_LOSS_MSE
                    ? -1
                    : correct / n / (t->loss.kind == DL_LOSS_BCE ? dl_trainer_per_sample(t) : 1);
    info->lr = t->lr_now;
    info->samples_per_s = dt > 0 ? (double)t->rep_samples / dt : 0;
    info->data_wait_share = dt > 0 ? t->rep_wait / dt : 0;
    info->loss_scale = t->loss_scale;
    info->skipped_steps = t->skipped;
    info->grad_norm = t->grad_norm;
    info->ranks = t->dp ? t->dp->size : 1;
    if (t->dp) {
        info->comm_s = t->rep_steps > 0 ? comm_s / (double)t->rep_steps : 0;
        info->comm_share = dt > 0 ? comm_s / dt : 0;
        info->rank_samples_per_s = t->sync + 4;
    }
}

/* A callback's answer: < 0 fails the run, > 0 stops it. */
static int callback_rc(dl_trainer *t, int rc)
{
    if (rc > 0)
        t->stop = 1;
    return rc < 0 ? rc : DL_OK;
}

int dl_trainer_report(dl_trainer *t, int stopped)
{
    DL_TRY(dl_trainer_fold_guard(t));
    double loss_sum, correct, comm_s = 0;
    long keep_samples = t->rep_samples;
    double keep_comm = t->rep_comm;
    DL_TRY(dl_trainer_take_stats(t, &loss_sum, &correct, !stopped));
    if (t->dp)
        DL_TRY(
            dl_trainer_sync_report(t, &loss_sum, &correct, dl_clock_mono_s() - t->rep_t0, &comm_s));
    double now = dl_clock_mono_s();
    dl_step_info info;
    fill_info(t, &info, loss_sum, correct, now - t->rep_t0, comm_s);
    info.stopped = stopped;
    if (stopped) {
        t->rep_samples = keep_samples; /* sync_report summed it over the ranks */
        t->rep_comm = keep_comm;
    } else {
        t->ep_loss += loss_sum;
        t->ep_correct += correct;
        t->ep_samples += t->rep_samples;
        t->rep_samples = 0;
        t->rep_steps = 0;
        t->rep_wait = 0;
        t->rep_t0 = now;
    }
    return t->cb.on_step ? callback_rc(t, t->cb.on_step(t->cb.user, t, &info)) : DL_OK;
}

/* Folds the device's evaluation sums into sums (loss, correct, tokens);
 * resets them. */
static int fold_eval(dl_trainer *t, float *stats, double sums[3])
{
    float host[3];
    DL_TRY(t->be->ops->to_host(t->be, host, stats, sizeof host));
    DL_TRY(t->be->ops->memset0(t->be, stats, sizeof host));
    for (int i = 0; i < 3; i++)
        sums[i] += host[i];
    return DL_OK;
}

int dl_trainer_evaluate(dl_trainer *t, dl_source *src, double *loss, double *acc)
{
    DL_TRY(src->ops->start_epoch(src, 0, 0));
    float *stats = dl_trainer_stats(t, 1);
    DL_TRY(t->be->ops->memset0(t->be, stats, DL_TRAINER_NSTATS * sizeof(float)));
    long n = 0;
    double sums[3] = {0, 0, 0}; /* loss, correct, kept tokens */
    for (;;) {
        dl_batch b;
        int rc = src->ops->next(src, &b);
        if (rc < 0)
            return rc;
        if (rc == 0)
            break;
        const void *labels;
        int slot;
        DL_TRY(load_batch(t, src, &b, &labels, &slot));
        dl_pass p;
        dl_model_pass(t->m, &p, b.n, 0, t->cfg.precision, t->cfg.seed, 0);
        DL_TRY(dl_model_forward(t->m, &p));
        DL_TRY(apply_loss(t, b.n, labels, 0, NULL, stats));
        DL_TRY(release_slot(t, slot));
        n += b.n;
        if (t->tokens || n % (1L << 14) < b.n) /* fold into double now and then */
            DL_TRY(fold_eval(t, stats, sums));
    }
    DL_TRY(fold_eval(t, stats, sums));
    /* per token: means over the kept tokens; else over the rows */
    double d = t->tokens ? sums[2] : (double)n;
    if (!(d > 0))
        d = 1;
    *loss = sums[0] / d / dl_trainer_per_sample(t);
    *acc = t->loss.kind == DL_LOSS_MSE
               ? NAN
               : sums[1] / d / (t->loss.kind == DL_LOSS_BCE ? dl_trainer_per_sample(t) : 1);
    return DL_OK;
}

int dl_trainer_outputs(dl_trainer *t, dl_source *src, dl_outputs_fn fn, void *user)
{
    DL_TRY(src->ops->start_epoch(src, 0, 0));
    size_t outs = (size_t)dl_shape_numel(dl_model_output_shape(t->m));
    float *host = malloc((size_t)t->cfg.batch * outs * sizeof *host);
    if (!host)
        return dl_error(DL_ENOMEM, "out of memory for %d x %zu outputs", t->cfg.batch, outs);
    int rc = DL_OK;
    while (rc == DL_OK) {
        dl_batch b;
        int got = src->ops->next(src, &b);
        if (got <= 0) {
            rc = got;
            break;
        }
        const void *labels;
        int slot;
        rc = load_batch(t, src, &b, &labels, &slot);
        dl_pass p;
        dl_model_pass(t->m, &p, b.n, 0, t->cfg.precision, t->cfg.seed, 0);
        if (rc == DL_OK)
            rc = dl_model_forward(t->m, &p);
        if (rc == DL_OK)
            rc = t->be->ops->to_host(t->be, host, dl_model_output(t->m),
                                     (size_t)b.n * outs * sizeof *host);
        if (rc == DL_OK)
            rc = release_slot(t, slot);
        if (rc == DL_OK)
            rc = fn(user, b.n, host, b.y);
    }
    free(host);
    return rc;
}

int dl_trainer_end_epoch(dl_trainer *t)
{
    if (dl_trainer_window_open(t))
        DL_TRY(dl_trainer_report(t, 0));
    dl_epoch_info info = {0};
    info.epoch = t->epoch;
    info.step = t->step;
    double n = t->ep_samples > 0 ? (double)t->ep_samples : 1;
    info.train_loss = t->ep_loss / n / dl_trainer_per_sample(t);
    info.train_acc = t->loss.kind == DL_LOSS_MSE ? NAN : t->ep_correct / n;
    info.val_loss = info.val_acc = NAN;
    int every = t->cfg.val_every > 1 ? t->cfg.val_every : 1;
    int validate = t->val && ((t->epoch + 1) % every == 0 || t->epoch + 1 >= t->cfg.epochs);
    if (validate) {
        double v0 = dl_clock_mono_s();
        dl_prof_span sp = dl_prof_begin_aside(t->prof);
        DL_TRY(dl_trainer_evaluate(t, t->val, &info.val_loss, &info.val_acc));
        dl_prof_end(t->prof, sp, DL_PROF_VALIDATION, "validation",
                    dl_model_flops(t->m) * (double)t->val->info.count, 0);
        info.val_seconds = dl_clock_mono_s() - v0;
    }
    info.seconds = dl_clock_mono_s() - t->ep_t0;
    t->hist.epochs++;
    t->hist.train_s += info.seconds - info.val_seconds;
    if (validate && isfinite(info.val_loss)) {
        t->hist.val_s += info.val_seconds;
        if (t->hist.nval++ == 0 || info.val_loss < t->hist.best_val) {
            t->hist.best_val = info.val_loss;
            t->hist.best_at = t->epoch;
            t->hist.vals_since_best = 0;
        } else {
            t->hist.vals_since_best++;
        }
    }
    /* a plateau schedule reads validation, only in the epochs it ran (NaN is skipped) */
    if (dl_schedule_epoch_end(&t->sched, t->val ? info.val_loss : info.train_loss))
        dl_trainer_event(t, "lr", "epoch %d: no improvement, learning rate scaled to %g x base",
                         t->epoch + 1, (double)t->sched.scale);
    t->ep_loss = t->ep_correct = 0;
    t->ep_samples = 0;
    t->epoch++;
    t->epoch_step = 0;
    t->epoch_open = 0;
    t->ep_t0 = dl_clock_mono_s();
    t->rep_t0 = t->ep_t0;
    return t->cb.on_epoch ? callback_rc(t, t->cb.on_epoch(t->cb.user, t, &info)) : DL_OK;
}
