/* trainer.c - the training loop: accumulation, loss scaling, clipping, validation, command queue */
#include "engine/train/trainer.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/data/shard.h"
#include "engine/dist/comm.h"
#include "engine/base/error.h"
#include "engine/observe/profiler.h"

#define QUEUE_SIZE 64

typedef struct command {
    dl_command_kind kind;
    double value;
    char text[256];
} command;

struct dl_trainer {
    dl_model *m;
    dl_loss loss;
    dl_optim opt;
    dl_schedule sched;
    dl_source *train, *val;
    dl_trainer_config cfg;
    dl_backend *be;
    dl_callbacks cb;
    dl_profiler *prof; /* borrowed; NULL: not profiling */

    /* progress */
    long step;
    int epoch;
    long epoch_step;
    int epoch_open;
    long steps_per_epoch, total_steps;
    float base_lr;
    double lr_now;
    float loss_scale;
    int clean_steps;
    long skipped;
    double grad_norm;
    int lowp_dirty;
    uint64_t micro; /* micro-batches run: keys dropout */

    /* device staging: raw x, targets, statistics (train window, eval) */
    dl_storage *stage;
    size_t x_bytes, y_bytes;
    size_t off_x, off_y, off_stats;

    /* reporting window and epoch totals */
    long rep_samples, rep_steps;
    double rep_t0, rep_wait;
    double ep_loss, ep_correct;
    long ep_samples;
    double ep_t0;

    /* data parallel (NULL alone) */
    struct dl_comm *comm;
    dl_source *shard;  /* owned: this rank's slice of train, which it replaces */
    dl_source *whole;  /* the source the trainer was given */
    double *sync;      /* [4 + ranks]: the report's all-reduce */
    double rep_comm;   /* all-reduce seconds in the window */

    /* commands */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    command queue[QUEUE_SIZE];
    int nq;
    int paused, stop;
    dl_trainer_status pub; /* under lock: see publish() */
};

/* Copies what other threads may read into t->pub; with t->lock held. */
static void publish_locked(dl_trainer *t)
{
    t->pub.step = t->step;
    t->pub.epoch = t->epoch;
    t->pub.paused = t->paused;
    t->pub.stopping = t->stop;
    t->pub.lr = t->lr_now;
    snprintf(t->pub.device, sizeof t->pub.device, "%s", t->be->ops->name);
}

static void publish(dl_trainer *t)
{
    pthread_mutex_lock(&t->lock);
    publish_locked(t);
    pthread_mutex_unlock(&t->lock);
}

void dl_trainer_status_get(dl_trainer *t, dl_trainer_status *out)
{
    pthread_mutex_lock(&t->lock);
    *out = t->pub;
    pthread_mutex_unlock(&t->lock);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void event(dl_trainer *t, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void event(dl_trainer *t, const char *kind, const char *fmt, ...)
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

dl_trainer_config dl_trainer_config_default(void)
{
    dl_trainer_config c = {0};
    c.epochs = 1;
    c.batch = 128;
    c.accumulate = 1;
    c.precision = DL_PREC_F32;
    c.log_every = 10;
    c.nonfinite = DL_NONFINITE_STOP;
    c.loss_scale = 65536.0f;
    c.loss_scale_window = 2000;
    return c;
}

static float *stats_ptr(dl_trainer *t, int slot)
{
    return (float *)((char *)t->stage->ptr + t->off_stats) + 2 * slot;
}

static int alloc_stage(dl_trainer *t, dl_backend *be)
{
    size_t bytes = t->off_stats + 4 * sizeof(float);
    dl_storage *s = dl_storage_create(be, bytes);
    if (!s)
        return DL_ENOMEM;
    if (t->stage) {
        /* carry the statistics of the window in flight */
        float host[4];
        dl_backend *old = t->stage->be;
        int rc = old->ops->to_host(old, host, stats_ptr(t, 0), sizeof host);
        if (rc == DL_OK)
            rc = be->ops->to_device(be, (char *)s->ptr + t->off_stats, host, sizeof host);
        if (rc < 0) {
            dl_storage_release(s);
            return rc;
        }
        dl_storage_release(t->stage);
    }
    t->stage = s;
    return DL_OK;
}

/* Checks the data against the model and loss before anything runs. */
static int check_data(dl_trainer *t, dl_source *src)
{
    const dl_data_info *in = &src->info;
    char a[64], b[64];
    if (dl_shape_numel(&in->sample) != dl_shape_numel(dl_model_input_shape(t->m)))
        return dl_error(DL_ESHAPE, "%s: samples of shape %s do not fit the model input %s",
                        src->name, dl_shape_format(&in->sample, a, sizeof a),
                        dl_shape_format(dl_model_input_shape(t->m), b, sizeof b));
    int64_t outs = dl_shape_numel(dl_model_output_shape(t->m));
    if (t->loss.kind == DL_LOSS_XENT) {
        if (in->y_dtype != DL_I32)
            return dl_error(DL_EINVAL, "%s: CrossEntropy needs integer class labels, the data "
                                       "has %s targets", src->name, dl_dtype_name(in->y_dtype));
        if (in->classes > 0 && in->classes != outs)
            return dl_error(DL_ESHAPE, "%s: the data has %d classes but the model outputs %s",
                            src->name, in->classes,
                            dl_shape_format(dl_model_output_shape(t->m), a, sizeof a));
    } else {
        if (in->y_dtype != DL_F32)
            return dl_error(DL_EINVAL, "%s: %s needs f32 targets, the data has %s", src->name,
                            dl_loss_name(t->loss.kind), dl_dtype_name(in->y_dtype));
        if (in->y_width != outs)
            return dl_error(DL_ESHAPE, "%s: targets have %d values per sample but the model "
                            "outputs %s", src->name, in->y_width,
                            dl_shape_format(dl_model_output_shape(t->m), a, sizeof a));
    }
    return DL_OK;
}

int dl_trainer_create(dl_trainer **out, dl_model *model, const dl_loss *loss,
                      const dl_optim *optim, const dl_schedule *schedule, dl_source *train,
                      dl_source *val, const dl_trainer_config *cfg, dl_backend *be)
{
    *out = NULL;
    if (cfg->epochs < 1 || cfg->batch < 1 || cfg->accumulate < 1)
        return dl_error(DL_EINVAL, "epochs (%d), batch (%d) and accumulate (%d) must be >= 1",
                        cfg->epochs, cfg->batch, cfg->accumulate);
    if (!(optim->lr > 0) || !isfinite(optim->lr))
        return dl_error(DL_EINVAL, "learning rate %g must be a positive number",
                        (double)optim->lr);
    dl_trainer *t = calloc(1, sizeof *t);
    if (!t)
        return dl_error(DL_ENOMEM, "out of memory");
    t->m = model;
    t->loss = *loss;
    t->opt = *optim;
    t->sched = schedule ? *schedule : dl_schedule_constant();
    t->train = train;
    t->val = val;
    t->cfg = *cfg;
    if (t->cfg.log_every < 1)
        t->cfg.log_every = 1;
    if (!(t->cfg.loss_scale > 0))
        t->cfg.loss_scale = 65536.0f;
    if (t->cfg.loss_scale_window < 1)
        t->cfg.loss_scale_window = 2000;
    t->be = be;
    t->base_lr = optim->lr;
    t->loss_scale = cfg->precision == DL_PREC_F16 ? t->cfg.loss_scale : 1.0f;
    t->lowp_dirty = 1;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    publish_locked(t); /* no other thread knows t yet */

    int rc = check_data(t, train);
    if (rc == DL_OK && val)
        rc = check_data(t, val);
    if (rc < 0)
        goto fail;
    const dl_data_info *in = &train->info;
    t->x_bytes = (size_t)cfg->batch * (size_t)dl_shape_numel(&in->sample) *
                 dl_dtype_size(in->x_dtype);
    t->y_bytes = (size_t)cfg->batch * (size_t)(in->y_width > 0 ? in->y_width : 1) * 4;
    t->off_x = 0;
    t->off_y = (t->x_bytes + 63) & ~(size_t)63;
    t->off_stats = (t->off_y + t->y_bytes + 63) & ~(size_t)63;
    rc = alloc_stage(t, be);
    if (rc == DL_OK && dl_model_backend(model) != be)
        rc = dl_model_backend(model) ? dl_model_move(model, be)
                                     : dl_model_init_state(model, be, dl_optim_moments(optim),
                                                           cfg->seed);
    if (rc == DL_OK)
        rc = dl_model_plan(model, cfg->batch);
    if (rc < 0)
        goto fail;
    size_t batches = train->ops->batches(train);
    t->steps_per_epoch = (long)((batches + (size_t)cfg->accumulate - 1) / (size_t)cfg->accumulate);
    t->total_steps = t->steps_per_epoch * cfg->epochs;
    if (cfg->max_steps > 0 && cfg->max_steps < t->total_steps)
        t->total_steps = cfg->max_steps;
    *out = t;
    return DL_OK;
fail:
    dl_trainer_destroy(t);
    return rc;
}

void dl_trainer_destroy(dl_trainer *t)
{
    if (!t)
        return;
    dl_storage_release(t->stage);
    dl_source_destroy(t->shard);
    free(t->sync);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->cond);
    free(t);
}

void dl_trainer_set_callbacks(dl_trainer *t, const dl_callbacks *cb) { t->cb = *cb; }

int dl_trainer_set_profiler(dl_trainer *t, dl_profiler *prof)
{
    if (prof)
        DL_TRY(dl_profiler_attach(prof, t->m, t->be));
    t->prof = prof;
    return DL_OK;
}

dl_profiler *dl_trainer_profiler(const dl_trainer *t) { return t->prof; }

/* Bytes of one batch of n rows as the source yields them (x and y). */
static double batch_bytes(const dl_source *src, int n)
{
    const dl_data_info *in = &src->info;
    return (double)n * ((double)dl_shape_numel(&in->sample) * (double)dl_dtype_size(in->x_dtype) +
                        4.0 * (in->y_width > 0 ? in->y_width : 1));
}

/* Uploads a batch and converts x to f32 in the model input. */
static int load_batch(dl_trainer *t, dl_source *src, const dl_batch *b, const void **labels)
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
    if (be->ops->device != DL_DEVICE_CPU) {
        char *base = t->stage->ptr;
        DL_TRY(be->ops->to_device(be, base + t->off_x, b->x, xb));
        DL_TRY(be->ops->to_device(be, base + t->off_y, b->y, yb));
        x = base + t->off_x;
        y = base + t->off_y;
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
    switch (t->loss.kind) {
    case DL_LOSS_XENT:
        return be->ops->softmax_xent(be, n, (int)outs, y, labels, t->loss.smoothing, grad_scale,
                                     dout, stats);
    case DL_LOSS_MSE:
        /* mean over the outputs of a sample, as PyTorch's reduction='mean' per row */
        return be->ops->mse(be, (size_t)n * outs, y, labels, grad_scale / (float)outs, dout,
                            stats);
    case DL_LOSS_BCE:
        return be->ops->bce_logits(be, (size_t)n * outs, y, labels, grad_scale / (float)outs,
                                   dout, stats);
    }
    return dl_error(DL_EINVAL, "unknown loss");
}

static int zero_grads(dl_trainer *t)
{
    dl_model_state s;
    dl_model_get_state(t->m, &s);
    return t->be->ops->memset0(t->be, s.grads, s.count * sizeof(float));
}

/* dl_pass grad_hook, data parallel: layer l's gradients are final, and
 * with them those of every layer after it (registered later, so at higher
 * offsets): buckets above its first parameter can be reduced. */
static int grad_ready(void *user, const dl_layer *l)
{
    dl_trainer *t = user;
    size_t lo = SIZE_MAX;
    int np = dl_model_num_params(t->m);
    for (int i = 0; i < np; i++) {
        const dl_param *q = dl_model_param(t->m, i);
        if (q->layer == l && q->offset < lo)
            lo = q->offset;
    }
    return lo == SIZE_MAX ? DL_OK : dl_comm_grad_ready(t->comm, lo);
}

int dl_trainer_set_comm(dl_trainer *t, struct dl_comm *comm)
{
    if (t->comm || !comm || dl_comm_size(comm) < 2)
        return DL_OK;
    int ranks = dl_comm_size(comm), rank = dl_comm_rank(comm);
    t->sync = calloc((size_t)(4 + ranks), sizeof *t->sync);
    int np = dl_model_num_params(t->m);
    size_t *cuts = malloc(((size_t)np + 1) * sizeof *cuts);
    if (!t->sync || !cuts) {
        free(cuts);
        return dl_error(DL_ENOMEM, "out of memory");
    }
    for (int i = 0; i < np; i++)
        cuts[i] = dl_model_param(t->m, i)->offset; /* ascending: registration order */
    dl_model_state s;
    dl_model_get_state(t->m, &s);
    int rc = dl_comm_grad_plan(comm, t->be, s.grads, s.count, cuts, np);
    free(cuts);
    /* rank 0's state: [params | grads | moments | buffers], then its cursor */
    size_t floats = (size_t)(2 + s.moments) * s.count + s.buffer_count;
    if (rc == DL_OK)
        rc = dl_comm_bcast_floats(comm, t->be, s.params, floats, 0);
    dl_trainer_cursor c;
    dl_trainer_get_cursor(t, &c);
    if (rc == DL_OK)
        rc = dl_comm_bcast(comm, &c, sizeof c, 0);
    if (rc == DL_OK)
        rc = dl_trainer_set_cursor(t, &c);
    if (rc == DL_OK)
        rc = dl_source_shard(&t->shard, t->train, rank, ranks);
    if (rc < 0)
        return rc;
    t->whole = t->train;
    t->train = t->shard;
    t->comm = comm;
    event(t, "ranks", "rank %d of %d: %s; gradients by %s", rank, ranks, dl_comm_describe(comm),
          dl_comm_grad_path(comm));
    return DL_OK;
}

int dl_trainer_step(dl_trainer *t)
{
    if (!t->epoch_open) {
        DL_TRY(t->train->ops->start_epoch(t->train, t->epoch,
                                          (size_t)t->epoch_step * (size_t)t->cfg.accumulate));
        t->epoch_open = 1;
    }
    dl_precision prec = t->cfg.precision;
    dl_dtype lowp = prec == DL_PREC_BF16 ? DL_BF16 : prec == DL_PREC_F16 ? DL_F16 : DL_F32;
    if (t->lowp_dirty) {
        DL_TRY(dl_model_refresh_lowp(t->m, lowp));
        t->lowp_dirty = 0;
    }
    long rows = 0;
    float micro_scale = t->loss_scale / (float)t->cfg.batch;
    /* profiling: one branch per phase when off */
    dl_profiler *pf = t->prof && dl_profiler_wants_step(t->prof, t->step + 1) ? t->prof : NULL;
    dl_prof_span sp = {0, -1, 0};
    if (pf)
        dl_profiler_step_begin(pf, t->step + 1);
    long rows_all = 0; /* every rank's rows (data parallel) */
    if (t->comm)
        dl_comm_grad_begin(t->comm);
    for (int k = 0; k < t->cfg.accumulate; k++) {
        dl_batch b;
        if (pf)
            sp = dl_profiler_begin(pf);
        int rc = t->train->ops->next(t->train, &b);
        if (rc < 0)
            return rc;
        if (pf)
            dl_profiler_end(pf, sp, DL_PROF_DATA, "data wait", 0, 0);
        if (rc == 0)
            break;
        t->rep_wait += b.wait_s;
        if (t->comm) {
            rows_all += dl_source_shard_global_rows(t->train);
            if (b.n == 0) { /* a batch with fewer rows than ranks: none here */
                t->micro++;
                continue;
            }
        }
        const void *labels;
        if (pf)
            sp = dl_profiler_begin(pf);
        DL_TRY(load_batch(t, t->train, &b, &labels));
        if (pf)
            dl_profiler_end(pf, sp, DL_PROF_COPY, "input copy + convert", 0,
                            batch_bytes(t->train, b.n));
        dl_pass p;
        dl_model_pass(t->m, &p, b.n, 1, prec, t->cfg.seed, t->micro++);
        if (t->comm && k == t->cfg.accumulate - 1) {
            /* the last micro-batch: gradients become final layer by layer */
            p.grad_hook = grad_ready;
            p.grad_user = t;
        }
        if (pf) {
            dl_profiler_arm_pass(pf, &p);
            sp = dl_profiler_begin(pf);
        }
        DL_TRY(dl_model_forward(t->m, &p));
        if (pf) {
            dl_profiler_end(pf, sp, DL_PROF_FORWARD, "forward", 0, 0);
            sp = dl_profiler_begin(pf);
        }
        DL_TRY(apply_loss(t, b.n, labels, micro_scale, dl_model_output_grad(t->m),
                          stats_ptr(t, 0)));
        if (pf) {
            double outs = (double)b.n * (double)dl_shape_numel(dl_model_output_shape(t->m));
            dl_profiler_end(pf, sp, DL_PROF_LOSS, dl_loss_name(t->loss.kind), 5 * outs, 8 * outs);
            sp = dl_profiler_begin(pf);
        }
        DL_TRY(dl_model_backward(t->m, &p));
        if (pf)
            dl_profiler_end(pf, sp, DL_PROF_BACKWARD, "backward", 0, 0);
        rows += b.n;
    }
    if (t->comm ? rows_all == 0 : rows == 0) {
        if (pf)
            dl_profiler_step_discard(pf);
        return 1;
    }
    if (t->comm) {
        /* the sum over ranks; divided below by the rows of all ranks */
        if (pf)
            sp = dl_profiler_begin(pf);
        DL_TRY(dl_comm_grad_finish(t->comm));
        if (pf) {
            double bytes = 4.0 * (double)dl_model_param_count(t->m);
            dl_profiler_end(pf, sp, DL_PROF_OTHER, "gradient all-reduce", 0, 2 * bytes);
        }
        t->rep_comm += dl_comm_take_seconds(t->comm);
    }
    long rows_local = rows;
    if (t->comm)
        rows = rows_all;

    /* mean over the rows of the step, undoing the loss scale */
    float grad_scale = (float)t->cfg.batch / (t->loss_scale * (float)rows);
    double norm = 0;
    double nparam = (double)dl_model_param_count(t->m);
    if (pf)
        sp = dl_profiler_begin(pf);
    DL_TRY(dl_clip_grad_norm(t->m, t->opt.clip_norm, grad_scale, &norm));
    if (pf) {
        dl_profiler_end(pf, sp, DL_PROF_OPTIMIZER, "grad norm + clip", 2 * nparam, 4 * nparam);
        sp = dl_profiler_begin(pf);
    }
    if (!isfinite(norm)) {
        DL_TRY(zero_grads(t));
        t->skipped++;
        if (prec == DL_PREC_F16) {
            t->loss_scale *= 0.5f;
            t->clean_steps = 0;
            event(t, "loss_scale", "step %ld: gradient overflow, step skipped, loss scale "
                  "halved to %g", t->step + 1, (double)t->loss_scale);
        } else if (t->cfg.nonfinite == DL_NONFINITE_SKIP) {
            event(t, "nonfinite", "step %ld: non-finite gradient, step skipped", t->step + 1);
        } else {
            return dl_error(DL_ENONFINITE,
                            "non-finite gradient at step %ld (epoch %d): lower the learning "
                            "rate (now %g), clip gradients, or use loss scaling",
                            t->step + 1, t->epoch + 1, t->lr_now);
        }
    } else {
        t->grad_norm = norm;
        t->lr_now = dl_schedule_lr(&t->sched, t->base_lr, t->step, t->total_steps);
        DL_TRY(dl_optim_step(&t->opt, t->m, (float)t->lr_now, t->step + 1, grad_scale));
        if (lowp != DL_F32)
            DL_TRY(dl_model_refresh_lowp(t->m, lowp));
        if (prec == DL_PREC_F16 && ++t->clean_steps >= t->cfg.loss_scale_window) {
            t->loss_scale *= 2.0f;
            t->clean_steps = 0;
        }
    }
    if (pf) {
        /* w, g and the moments are read and written once */
        int moments = dl_optim_moments(&t->opt);
        dl_profiler_end(pf, sp, DL_PROF_OPTIMIZER, "optimizer step",
                        (moments == 2 ? 12.0 : 4.0) * nparam, 8.0 * (2 + moments) * nparam);
        dl_profiler_step_end(pf);
    }
    t->step++;
    t->epoch_step++;
    t->rep_samples += rows_local;
    t->rep_steps++;
    return 0;
}

/* The training window's loss and correct-count sums; consume: reset them. */
static int take_stats(dl_trainer *t, double *loss_sum, double *correct, int consume)
{
    float host[2];
    DL_TRY(t->be->ops->to_host(t->be, host, stats_ptr(t, 0), sizeof host));
    if (consume)
        DL_TRY(t->be->ops->memset0(t->be, stats_ptr(t, 0), sizeof host));
    *loss_sum = host[0];
    *correct = host[1];
    return DL_OK;
}

static double per_sample_divisor(dl_trainer *t)
{
    return t->loss.kind == DL_LOSS_XENT ? 1.0
                                        : (double)dl_shape_numel(dl_model_output_shape(t->m));
}

/* Data parallel: the window's sums over ranks, each rank's throughput. */
static int sync_report(dl_trainer *t, double *loss_sum, double *correct, double dt,
                       double *comm_s)
{
    int ranks = dl_comm_size(t->comm), me = dl_comm_rank(t->comm);
    double *v = t->sync;
    memset(v, 0, (size_t)(4 + ranks) * sizeof *v);
    v[0] = *loss_sum;
    v[1] = *correct;
    v[2] = (double)t->rep_samples;
    v[3] = t->rep_comm;
    v[4 + me] = dt > 0 ? (double)t->rep_samples / dt : 0;
    DL_TRY(dl_comm_allreduce(t->comm, v, 4 + ranks, DL_COMM_SUM));
    *loss_sum = v[0];
    *correct = v[1];
    t->rep_samples = (long)v[2];
    *comm_s = v[3] / ranks;
    t->rep_comm = 0;
    return DL_OK;
}

/* Reports the window since the last report to on_step. stopped: the run
 * is stopping inside a window; the record is made but the window stays
 * open (dl_step_info.stopped). */
static int report(dl_trainer *t, int stopped)
{
    double loss_sum, correct, comm_s = 0;
    long keep_samples = t->rep_samples;
    double keep_comm = t->rep_comm;
    DL_TRY(take_stats(t, &loss_sum, &correct, !stopped));
    if (t->comm)
        DL_TRY(sync_report(t, &loss_sum, &correct, now_s() - t->rep_t0, &comm_s));
    double now = now_s();
    dl_step_info info = {0};
    info.stopped = stopped;
    info.step = t->step;
    info.epoch = t->epoch;
    info.epoch_step = t->epoch_step;
    info.steps_per_epoch = t->steps_per_epoch;
    double n = t->rep_samples > 0 ? (double)t->rep_samples : 1;
    info.loss = loss_sum / n / per_sample_divisor(t);
    info.acc = t->loss.kind == DL_LOSS_MSE ? -1 : correct / n /
               (t->loss.kind == DL_LOSS_BCE ? per_sample_divisor(t) : 1);
    info.lr = t->lr_now;
    double dt = now - t->rep_t0;
    info.samples_per_s = dt > 0 ? (double)t->rep_samples / dt : 0;
    info.data_wait_share = dt > 0 ? t->rep_wait / dt : 0;
    info.loss_scale = t->loss_scale;
    info.skipped_steps = t->skipped;
    info.grad_norm = t->grad_norm;
    info.ranks = t->comm ? dl_comm_size(t->comm) : 1;
    if (t->comm) {
        info.comm_s = t->rep_steps > 0 ? comm_s / (double)t->rep_steps : 0;
        info.comm_share = dt > 0 ? comm_s / dt : 0;
        info.rank_samples_per_s = t->sync + 4;
    }
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
    if (t->cb.on_step) {
        int rc = t->cb.on_step(t->cb.user, t, &info);
        if (rc < 0)
            return rc;
        if (rc > 0)
            t->stop = 1;
    }
    return DL_OK;
}

int dl_trainer_evaluate(dl_trainer *t, dl_source *src, double *loss, double *acc)
{
    DL_TRY(src->ops->start_epoch(src, 0, 0));
    float *stats = stats_ptr(t, 1);
    DL_TRY(t->be->ops->memset0(t->be, stats, 2 * sizeof(float)));
    long n = 0;
    double loss_sum = 0, correct = 0;
    for (;;) {
        dl_batch b;
        int rc = src->ops->next(src, &b);
        if (rc < 0)
            return rc;
        if (rc == 0)
            break;
        const void *labels;
        DL_TRY(load_batch(t, src, &b, &labels));
        dl_pass p;
        dl_model_pass(t->m, &p, b.n, 0, t->cfg.precision, t->cfg.seed, 0);
        DL_TRY(dl_model_forward(t->m, &p));
        DL_TRY(apply_loss(t, b.n, labels, 0, NULL, stats));
        n += b.n;
        if (n % (1L << 14) < b.n) { /* fold into double now and then */
            float host[2];
            DL_TRY(t->be->ops->to_host(t->be, host, stats, sizeof host));
            DL_TRY(t->be->ops->memset0(t->be, stats, sizeof host));
            loss_sum += host[0];
            correct += host[1];
        }
    }
    float host[2];
    DL_TRY(t->be->ops->to_host(t->be, host, stats, sizeof host));
    loss_sum += host[0];
    correct += host[1];
    double d = n > 0 ? (double)n : 1;
    *loss = loss_sum / d / per_sample_divisor(t);
    *acc = t->loss.kind == DL_LOSS_MSE ? NAN
                                       : correct / d /
                                             (t->loss.kind == DL_LOSS_BCE ? per_sample_divisor(t) : 1);
    return DL_OK;
}

/* A report is due: steps since the last one (alone: rows since; data
 * parallel: steps, which every rank counts alike). */
static int window_open(const dl_trainer *t)
{
    return t->comm ? t->rep_steps > 0 : t->rep_samples > 0;
}

static int end_epoch(dl_trainer *t)
{
    if (window_open(t))
        DL_TRY(report(t, 0));
    dl_epoch_info info = {0};
    info.epoch = t->epoch;
    info.step = t->step;
    double n = t->ep_samples > 0 ? (double)t->ep_samples : 1;
    info.train_loss = t->ep_loss / n / per_sample_divisor(t);
    info.train_acc = t->loss.kind == DL_LOSS_MSE ? NAN : t->ep_correct / n;
    info.val_loss = info.val_acc = NAN;
    if (t->val) {
        dl_profiler *pf = t->prof && dl_profiler_enabled(t->prof) ? t->prof : NULL;
        dl_prof_span sp = {0, -1, 0};
        if (pf)
            sp = dl_profiler_begin(pf);
        DL_TRY(dl_trainer_evaluate(t, t->val, &info.val_loss, &info.val_acc));
        if (pf)
            dl_profiler_end(pf, sp, DL_PROF_VALIDATION, "validation",
                            dl_model_flops(t->m) * (double)t->val->info.count, 0);
    }
    info.seconds = now_s() - t->ep_t0;
    if (dl_schedule_epoch_end(&t->sched, t->val ? info.val_loss : info.train_loss))
        event(t, "lr", "epoch %d: no improvement, learning rate scaled to %g x base",
              t->epoch + 1, (double)t->sched.scale);
    t->ep_loss = t->ep_correct = 0;
    t->ep_samples = 0;
    t->epoch++;
    t->epoch_step = 0;
    t->epoch_open = 0;
    t->ep_t0 = now_s();
    t->rep_t0 = t->ep_t0;
    if (t->cb.on_epoch) {
        int rc = t->cb.on_epoch(t->cb.user, t, &info);
        if (rc < 0)
            return rc;
        if (rc > 0)
            t->stop = 1;
    }
    return DL_OK;
}

static void wait_command(dl_trainer *t);
static void parity_command(dl_trainer *t, const char *device, int steps);

/* Applies queued commands; waits while paused. */
static int drain(dl_trainer *t)
{
    for (;;) {
        pthread_mutex_lock(&t->lock);
        publish_locked(t); /* the state after the last step */
        command q[QUEUE_SIZE];
        int nq = t->nq;
        memcpy(q, t->queue, (size_t)nq * sizeof *q);
        t->nq = 0;
        pthread_mutex_unlock(&t->lock);
        for (int i = 0; i < nq; i++) {
            command *c = &q[i];
            switch (c->kind) {
            case DL_CMD_PAUSE:
                if (!t->paused)
                    event(t, "paused", "paused at step %ld", t->step);
                t->paused = 1;
                break;
            case DL_CMD_RESUME:
                if (t->paused)
                    event(t, "resumed", "resumed at step %ld", t->step);
                t->paused = 0;
                break;
            case DL_CMD_STOP:
                t->stop = 1;
                event(t, "stop", "stop requested at step %ld", t->step);
                break;
            case DL_CMD_SET_LR:
                if (c->value > 0 && isfinite(c->value)) {
                    event(t, "lr", "step %ld: base learning rate %g -> %g", t->step,
                          (double)t->base_lr, c->value);
                    t->base_lr = (float)c->value;
                } else {
                    event(t, "error", "learning rate %g refused: must be positive", c->value);
                }
                break;
            case DL_CMD_SWITCH: {
                char why[256] = "";
                dl_backend *be = t->comm ? NULL : dl_backend_by_name(c->text, why, sizeof why);
                if (t->comm) {
                    event(t, "error", "cannot switch to %s: not in a job of %d ranks", c->text,
                          dl_comm_size(t->comm));
                } else if (!be) {
                    event(t, "error", "cannot switch to %s: %s", c->text, why);
                } else if (be != t->be) {
                    const char *from = t->be->ops->name;
                    double t0 = now_s();
                    int rc = dl_trainer_switch_device(t, be);
                    if (rc < 0)
                        event(t, "error", "switch to %s failed, training stays on %s: %s",
                              be->ops->name, from, dl_error_message());
                    else
                        event(t, "device", "step %ld: moved from %s to %s in %.3f s", t->step,
                              from, be->ops->name, now_s() - t0);
                }
                break;
            }
            case DL_CMD_PARITY: parity_command(t, c->text, (int)c->value); break;
            case DL_CMD_CHECKPOINT: event(t, "checkpoint", "%s", c->text); break;
            case DL_CMD_NOTE: event(t, "note", "%s", c->text); break;
            }
        }
        if (t->cb.on_idle) {
            int rc = t->cb.on_idle(t->cb.user, t);
            if (rc < 0)
                return rc;
            if (rc > 0)
                t->stop = 1;
        }
        publish(t); /* and after the commands */
        if (!t->paused || t->stop || t->comm)
            return DL_OK; /* data parallel: the run loop waits, in step with the ranks */
        wait_command(t);
        t->rep_t0 = now_s(); /* paused time is not training time */
    }
}

/* The parity check asked for by a command (the workbench's P, the control
 * socket), between steps: its outcome is an event. */
static void parity_command(dl_trainer *t, const char *device, int steps)
{
    char why[256] = "", name[32];
    const char *want = device[0] ? device : t->be->ops->device == DL_DEVICE_CPU ? "cuda" : "cpu";
    snprintf(name, sizeof name, "%s", want);
    dl_backend *other = NULL, *own = NULL;
    if (t->comm) {
        snprintf(why, sizeof why, "not in a job of %d ranks", dl_comm_size(t->comm));
    } else if (!strncmp(want, "cpu:", 4)) {
        char *end;
        long n = strtol(want + 4, &end, 10);
        if (*end || n < 1 || n > DL_CPU_MAX_THREADS)
            snprintf(why, sizeof why, "\"%s\": expected cpu:T with T from 1 to %d threads", want,
                     DL_CPU_MAX_THREADS);
        else if (!(own = other = dl_backend_cpu_create((int)n)))
            snprintf(why, sizeof why, "%s", dl_error_message());
    } else {
        other = dl_backend_by_name(want, why, sizeof why);
    }
    if (!other) {
        event(t, "error", "cannot check parity against %s: %s", name, why);
        return;
    }
    if (other == t->be) {
        event(t, "error", "cannot check parity against %s: the training is on it", name);
        return;
    }
    dl_parity_report r;
    memset(&r, 0, sizeof r);
    int rc = dl_trainer_check_parity(t, other, steps, &r);
    if (rc < 0) {
        event(t, "error", "parity check against %s failed: %s", name, dl_error_message());
    } else {
        double tol = t->cfg.precision == DL_PREC_F32 ? 1e-3 : t->cfg.precision == DL_PREC_F16 ? 1e-2
                                                                                              : 2e-2;
        double worst = fmax(r.max_loss_rel, r.max_param_rel);
        event(t, "parity", "step %ld, %d steps on %s and %s: largest relative difference %.3g in "
              "loss, %.3g in parameters (%s); %s the default tolerance %g",
              t->step, r.steps, t->be->ops->name, name, r.max_loss_rel, r.max_param_rel,
              r.worst_param[0] ? r.worst_param : "-", worst <= tol ? "within" : "OVER", tol);
    }
    dl_parity_report_done(&r);
    dl_backend_cpu_destroy(own);
}

/* Sleeps until a command arrives, at most 100 ms. */
static void wait_command(dl_trainer *t)
{
    pthread_mutex_lock(&t->lock);
    if (t->nq == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&t->cond, &t->lock, &ts);
    }
    pthread_mutex_unlock(&t->lock);
}

/* Data parallel, between steps: the ranks agree on stop and pause (any
 * rank's) and take rank 0's learning rate (commands reach rank 0 only). */
static int agree(dl_trainer *t, int *paused)
{
    double v[3] = {t->stop, t->paused, dl_comm_rank(t->comm) == 0 ? t->base_lr : 0};
    DL_TRY(dl_comm_allreduce(t->comm, v, 3, DL_COMM_SUM));
    t->stop = v[0] > 0;
    *paused = v[1] > 0;
    t->base_lr = (float)v[2];
    return DL_OK;
}

int dl_trainer_run(dl_trainer *t)
{
    t->rep_t0 = t->ep_t0 = now_s();
    while (t->epoch < t->cfg.epochs && !t->stop) {
        if (t->cfg.max_steps > 0 && t->step >= t->cfg.max_steps)
            break;
        DL_TRY(drain(t));
        if (t->comm) {
            int paused;
            DL_TRY(agree(t, &paused));
            if (paused && !t->stop) {
                if (t->paused)
                    wait_command(t); /* the others wait in the next agreement */
                t->rep_t0 = now_s();
                continue;
            }
        }
        if (t->stop)
            break;
        int rc = dl_trainer_step(t);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            DL_TRY(end_epoch(t));
            continue;
        }
        if (t->step % t->cfg.log_every == 0)
            DL_TRY(report(t, 0));
    }
    if (window_open(t))
        DL_TRY(report(t, t->stop));
    publish(t);
    return DL_OK;
}

int dl_trainer_post(dl_trainer *t, dl_command_kind kind, double value, const char *text)
{
    pthread_mutex_lock(&t->lock);
    if (t->nq == QUEUE_SIZE) {
        pthread_mutex_unlock(&t->lock);
        return dl_error(DL_ERR, "command queue full (%d commands waiting)", QUEUE_SIZE);
    }
    command *c = &t->queue[t->nq++];
    c->kind = kind;
    c->value = value;
    snprintf(c->text, sizeof c->text, "%s", text ? text : "");
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
    return DL_OK;
}

int dl_trainer_switch_device(dl_trainer *t, dl_backend *be)
{
    dl_backend *old = t->be;
    if (be == old)
        return DL_OK;
    DL_TRY(dl_model_move(t->m, be));
    int rc = alloc_stage(t, be);
    if (rc == DL_OK && t->train->ops->retarget)
        rc = t->train->ops->retarget(t->train, be);
    if (rc == DL_OK && t->val && t->val->ops->retarget)
        rc = t->val->ops->retarget(t->val, be);
    if (rc < 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", dl_error_message());
        dl_model_move(t->m, old);
        if (t->stage->be != old)
            alloc_stage(t, old);
        if (t->train->ops->retarget)
            t->train->ops->retarget(t->train, old);
        if (t->val && t->val->ops->retarget)
            t->val->ops->retarget(t->val, old);
        return dl_error(rc, "%s", msg);
    }
    t->be = be;
    if (old->ops->trim)
        old->ops->trim(old); /* its cached scratch too: the old device keeps nothing */
    if (t->prof)
        dl_profiler_attach(t->prof, t->m, be); /* fails only for a new model: cannot here */
    return DL_OK;
}

void dl_trainer_params_changed(dl_trainer *t) { t->lowp_dirty = 1; }
dl_model *dl_trainer_model(dl_trainer *t) { return t->m; }
dl_backend *dl_trainer_backend(dl_trainer *t) { return t->be; }
long dl_trainer_step_count(const dl_trainer *t) { return t->step; }
int dl_trainer_epoch(const dl_trainer *t) { return t->epoch; }
long dl_trainer_epoch_step(const dl_trainer *t) { return t->epoch_step; }
int dl_trainer_stopped(const dl_trainer *t) { return t->stop; }
int dl_trainer_paused(const dl_trainer *t) { return t->paused; }
float dl_trainer_loss_scale(const dl_trainer *t) { return t->loss_scale; }
float dl_trainer_base_lr(const dl_trainer *t) { return t->base_lr; }
void dl_trainer_set_base_lr(dl_trainer *t, float lr) { t->base_lr = lr; }
double dl_trainer_current_lr(const dl_trainer *t) { return t->lr_now; }
const dl_trainer_config *dl_trainer_config_of(const dl_trainer *t) { return &t->cfg; }
void dl_trainer_request_stop(dl_trainer *t) { dl_trainer_post(t, DL_CMD_STOP, 0, NULL); }

void dl_trainer_get_cursor(dl_trainer *t, dl_trainer_cursor *c)
{
    memset(c, 0, sizeof *c);
    c->step = t->step;
    c->epoch = t->epoch;
    c->epoch_step = t->epoch_step;
    c->loss_scale = t->loss_scale;
    c->clean_steps = t->clean_steps;
    c->skipped = t->skipped;
    c->base_lr = t->base_lr;
    c->sched_scale = t->sched.scale;
    c->sched_best = t->sched.best;
    c->sched_bad = t->sched.bad_epochs;
    c->ep_loss = t->ep_loss;
    c->ep_correct = t->ep_correct;
    c->ep_samples = t->ep_samples;
    c->rep_samples = t->rep_samples;
    c->rep_steps = t->rep_steps;
    float host[2] = {0, 0};
    if (t->be->ops->to_host(t->be, host, stats_ptr(t, 0), sizeof host) == DL_OK) {
        c->rep_loss = host[0];
        c->rep_correct = host[1];
    }
}

int dl_trainer_set_cursor(dl_trainer *t, const dl_trainer_cursor *c)
{
    if (c->step < 0 || c->epoch < 0 || c->epoch_step < 0 || !(c->loss_scale > 0) ||
        c->ep_samples < 0 || c->rep_samples < 0 || c->rep_steps < 0)
        return dl_error(DL_EINVAL, "invalid trainer cursor (step %ld, epoch %d)", c->step,
                        c->epoch);
    float host[2] = {c->rep_loss, c->rep_correct};
    DL_TRY(t->be->ops->to_device(t->be, stats_ptr(t, 0), host, sizeof host));
    t->step = c->step;
    t->epoch = c->epoch;
    t->epoch_step = c->epoch_step;
    t->loss_scale = c->loss_scale;
    t->clean_steps = c->clean_steps;
    t->skipped = c->skipped;
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
    t->micro = (uint64_t)c->epoch * per_epoch +
               (uint64_t)c->epoch_step * (uint64_t)t->cfg.accumulate;
    t->lowp_dirty = 1;
    return DL_OK;
}

/* --- snapshots ---------------------------------------------------------------- */

struct dl_trainer_snapshot {
    const dl_trainer *owner;
    void *state;         /* the model's state arena, byte for byte */
    size_t state_bytes;
    dl_trainer_cursor cursor;
    double lr_now, grad_norm;
    uint64_t micro; /* as it was, not as the cursor would derive it */
};

int dl_trainer_snapshot_take(dl_trainer *t, dl_trainer_snapshot **out)
{
    *out = NULL;
    dl_model_state ms;
    dl_model_get_state(t->m, &ms);
    dl_trainer_snapshot *s = calloc(1, sizeof *s);
    size_t bytes = ms.storage->bytes;
    void *host = s ? malloc(bytes ? bytes : 1) : NULL;
    if (!host) {
        free(s);
        return dl_error(DL_ENOMEM,
                        "no host memory for a snapshot of the training state (%zu bytes)", bytes);
    }
    dl_backend *be = ms.storage->be;
    int rc = be->ops->to_host(be, host, ms.storage->ptr, bytes);
    if (rc < 0) {
        free(host);
        free(s);
        return rc;
    }
    s->owner = t;
    s->state = host;
    s->state_bytes = bytes;
    dl_trainer_get_cursor(t, &s->cursor);
    s->lr_now = t->lr_now;
    s->grad_norm = t->grad_norm;
    s->micro = t->micro;
    *out = s;
    return DL_OK;
}

int dl_trainer_snapshot_restore(dl_trainer *t, const dl_trainer_snapshot *s)
{
    dl_model_state ms;
    dl_model_get_state(t->m, &ms);
    if (s->owner != t || s->state_bytes != ms.storage->bytes)
        return dl_error(DL_EINVAL, "snapshot of another training (%zu state bytes, this one has "
                        "%zu)", s->state_bytes, ms.storage->bytes);
    dl_backend *be = ms.storage->be;
    DL_TRY(be->ops->to_device(be, ms.storage->ptr, s->state, s->state_bytes));
    DL_TRY(be->ops->sync(be));
    DL_TRY(dl_trainer_set_cursor(t, &s->cursor));
    t->lr_now = s->lr_now;
    t->grad_norm = s->grad_norm;
    t->micro = s->micro;
    return DL_OK;
}

void dl_trainer_snapshot_destroy(dl_trainer_snapshot *s)
{
    if (!s)
        return;
    free(s->state);
    free(s);
}

/* --- parity checks ---------------------------------------------------------------- */

/* One leg of a parity check: up to `steps` steps, each step's mean loss
 * into loss[]; *done is the number of steps run. Epoch ends are closed as
 * in dl_trainer_run (validation included) with the callbacks off. */
static int parity_leg(dl_trainer *t, int steps, double *loss, int *done)
{
    double sum, correct;
    *done = 0;
    DL_TRY(take_stats(t, &sum, &correct, 1)); /* the open window is not this leg's */
    t->rep_samples = t->rep_steps = 0;
    while (*done < steps && t->epoch < t->cfg.epochs &&
           !(t->cfg.max_steps > 0 && t->step >= t->cfg.max_steps)) {
        int rc = dl_trainer_step(t);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            DL_TRY(end_epoch(t));
            continue;
        }
        DL_TRY(take_stats(t, &sum, &correct, 1));
        double rows = t->rep_samples > 0 ? (double)t->rep_samples : 1;
        loss[(*done)++] = sum / rows / per_sample_divisor(t);
        t->rep_samples = t->rep_steps = 0;
    }
    return DL_OK;
}

/* The f32 parameters (dl_model_param_count floats) into host. */
static int read_params(dl_trainer *t, float *host)
{
    dl_model_state ms;
    dl_model_get_state(t->m, &ms);
    dl_backend *be = ms.storage->be;
    return be->ops->to_host(be, host, ms.params, dl_model_param_count(t->m) * sizeof(float));
}

/* |a - b| / |scale|: 0 when a and b are equal (or both NaN), Inf when
 * exactly one is NaN or the scale is 0 and they differ. */
static double rel_diff(double a, double b, double scale)
{
    if (a == b || (isnan(a) && isnan(b)))
        return 0;
    double d = fabs(a - b);
    if (isnan(d))
        return INFINITY;
    scale = fabs(scale);
    return scale > 0 && isfinite(scale) ? d / scale : INFINITY;
}

static void compare_params(dl_trainer *t, const float *a, const float *b, dl_parity_report *r)
{
    size_t n = dl_model_param_count(t->m);
    r->params_identical = memcmp(a, b, n * sizeof *a) == 0;
    if (r->params_identical)
        return;
    for (int i = 0; i < dl_model_num_params(t->m); i++) {
        const dl_param *p = dl_model_param(t->m, i);
        double big = 0, diff = 0;
        int nan_mismatch = 0;
        for (size_t k = p->offset; k < p->offset + p->count; k++) {
            double x = a[k], y = b[k];
            if (isnan(x) || isnan(y)) {
                nan_mismatch |= !(isnan(x) && isnan(y));
                continue;
            }
            big = fmax(big, fabs(x));
            diff = fmax(diff, fabs(x - y));
        }
        double rel = nan_mismatch ? INFINITY : diff == 0 ? 0 : big > 0 ? diff / big : INFINITY;
        if (rel > r->max_param_rel || (rel > 0 && !r->worst_param[0])) {
            r->max_param_rel = rel;
            r->worst_param_abs = nan_mismatch ? NAN : diff;
            snprintf(r->worst_param, sizeof r->worst_param, "%s", p->name);
        }
    }
}

int dl_trainer_check_parity(dl_trainer *t, dl_backend *other, int steps, dl_parity_report *r)
{
    memset(r, 0, sizeof *r);
    if (steps < 1)
        return dl_error(DL_EINVAL, "a parity check needs at least 1 step, not %d", steps);
    if (t->comm)
        return dl_error(DL_EUNSUPPORTED, "a parity check runs alone, not in a job of %d ranks",
                        dl_comm_size(t->comm));
    dl_backend *home = t->be;
    r->first_step = t->step;
    r->same_backend = other == home;
    snprintf(r->device_a, sizeof r->device_a, "%s", home->description);
    snprintf(r->device_b, sizeof r->device_b, "%s", other->description);
    size_t n = dl_model_param_count(t->m);
    r->loss_a = calloc((size_t)steps, sizeof *r->loss_a);
    r->loss_b = calloc((size_t)steps, sizeof *r->loss_b);
    float *pa = malloc(n * sizeof *pa + 1), *pb = malloc(n * sizeof *pb + 1);
    if (!r->loss_a || !r->loss_b || !pa || !pb) {
        free(pa);
        free(pb);
        return dl_error(DL_ENOMEM, "no host memory for a parity check of %zu parameters", n);
    }
    dl_trainer_snapshot *snap = NULL;
    int rc = dl_trainer_snapshot_take(t, &snap);
    if (rc < 0) {
        free(pa);
        free(pb);
        return rc;
    }
    dl_callbacks saved = t->cb;
    memset(&t->cb, 0, sizeof t->cb);
    int na = 0, nb = 0;
    double t0 = now_s();
    rc = parity_leg(t, steps, r->loss_a, &na);
    r->seconds_a = now_s() - t0;
    if (rc == DL_OK)
        rc = read_params(t, pa);
    if (rc == DL_OK)
        rc = dl_trainer_snapshot_restore(t, snap);
    if (rc == DL_OK) {
        t0 = now_s();
        rc = dl_trainer_switch_device(t, other);
        r->switch_s = now_s() - t0;
        if (rc < 0) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", dl_error_message());
            rc = dl_error(rc, "cannot move the training to %s: %s", other->ops->name, msg);
        }
    }
    if (rc == DL_OK) {
        t0 = now_s();
        rc = parity_leg(t, steps, r->loss_b, &nb);
        r->seconds_b = now_s() - t0;
    }
    if (rc == DL_OK)
        rc = read_params(t, pb);
    /* back home with the state as it was, whatever happened above */
    char msg[512];
    snprintf(msg, sizeof msg, "%s", dl_error_message());
    t0 = now_s();
    int back = dl_trainer_switch_device(t, home);
    r->switch_s += now_s() - t0;
    /* the state goes back even where the training stays (B, when A could
     * not take it back) */
    int put = dl_trainer_snapshot_restore(t, snap);
    if (back == DL_OK)
        back = put;
    t->cb = saved;
    dl_trainer_snapshot_destroy(snap);
    if (rc == DL_OK && back < 0)
        rc = back; /* its own message */
    else if (rc < 0 && back < 0)
        dl_error(rc, "%s; moving back to %s failed too: %s", msg, home->ops->name,
                 dl_error_message());
    else if (rc < 0)
        dl_error(rc, "%s", msg);
    if (rc == DL_OK) {
        r->steps = na < nb ? na : nb;
        if (na != nb)
            rc = dl_error(DL_ERR, "parity check: %d steps ran on %s but %d on %s",
                          na, home->ops->name, nb, other->ops->name);
    }
    if (rc == DL_OK) {
        for (int i = 0; i < r->steps; i++) {
            double d = rel_diff(r->loss_a[i], r->loss_b[i], r->loss_a[i]);
            if (d > r->max_loss_rel || (i == 0 && !r->worst_loss_step)) {
                r->max_loss_rel = d;
                r->worst_loss_step = i + 1;
            }
        }
        compare_params(t, pa, pb, r);
    }
    free(pa);
    free(pb);
    return rc;
}

void dl_parity_report_done(dl_parity_report *r)
{
    if (!r)
        return;
    free(r->loss_a);
    free(r->loss_b);
    r->loss_a = r->loss_b = NULL;
}
