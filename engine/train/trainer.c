/* trainer.c - the trainer's life (create, destroy, attachments) and the run loop: commands, steps, reports, epoch ends */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/train/snapshot.h"
#include "engine/train/trainer_internal.h"

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

/* Per-token cross-entropy: the model outputs [T, V] and the data gives T
 * integer targets per sample (a language model). */
static int is_token_task(const dl_trainer *t, const dl_data_info *in)
{
    const dl_shape *o = dl_model_output_shape(t->m);
    return t->loss.kind == DL_LOSS_XENT && in->y_dtype == DL_I32 && o->ndim == 2 &&
           in->y_width >= 1 && in->y_width == o->dim[0];
}

/* The model's first Embedding (the layer that reads the token ids): its
 * vocabulary, and its name; 0 when the model has none. */
static int first_embedding(const dl_model *m, const char **name)
{
    for (int i = 0; i < dl_model_num_params(m); i++) {
        const dl_param *p = dl_model_param(m, i);
        if (strcmp(p->layer->vt->kind, "Embedding") == 0 && p->shape.ndim == 2) {
            *name = p->layer->name;
            return (int)p->shape.dim[0];
        }
    }
    return 0;
}

/* Token ids the data may hold (0 .. classes-1) against the vocabulary of
 * the Embedding that reads them, before a step runs. */
static int check_vocab(dl_trainer *t, dl_source *src)
{
    const char *layer = NULL;
    int vocab = first_embedding(t->m, &layer);
    if (vocab > 0 && src->info.classes > vocab)
        return dl_error(DL_ESHAPE,
                        "%s: token ids run up to %d but %s (Embedding(%d, ...)) has a "
                        "vocabulary of %d: give it data.vocab",
                        src->name, src->info.classes - 1, layer, vocab, vocab);
    return DL_OK;
}

/* Cross-entropy's checks: integer labels, their classes against the
 * model's outputs (per token: the last dimension). */
static int check_xent(dl_trainer *t, dl_source *src)
{
    const dl_data_info *in = &src->info;
    char a[64];
    if (in->y_dtype != DL_I32)
        return dl_error(DL_EINVAL,
                        "%s: CrossEntropy needs integer class labels, the data "
                        "has %s targets",
                        src->name, dl_dtype_name(in->y_dtype));
    const dl_shape *o = dl_model_output_shape(t->m);
    int64_t classes = is_token_task(t, in) ? o->dim[1] : dl_shape_numel(o);
    if (in->classes > 0 && in->classes != classes)
        return dl_error(DL_ESHAPE, "%s: the data has %d classes but the model outputs %s",
                        src->name, in->classes, dl_shape_format(o, a, sizeof a));
    return is_token_task(t, in) ? check_vocab(t, src) : DL_OK;
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
    if (t->loss.kind == DL_LOSS_XENT)
        return check_xent(t, src);
    if (in->y_dtype != DL_F32)
        return dl_error(DL_EINVAL, "%s: %s needs f32 targets, the data has %s", src->name,
                        dl_loss_name(t->loss.kind), dl_dtype_name(in->y_dtype));
    if (in->y_width != outs)
        return dl_error(DL_ESHAPE,
                        "%s: targets have %d values per sample but the model "
                        "outputs %s",
                        src->name, in->y_width,
                        dl_shape_format(dl_model_output_shape(t->m), a, sizeof a));
    return DL_OK;
}

/* The trainer's fields from its arguments; the statuses published. */
static void init_fields(dl_trainer *t, dl_model *model, const dl_loss *loss, const dl_optim *optim,
                        const dl_schedule *schedule, dl_source *train, dl_source *val,
                        const dl_trainer_config *cfg, dl_backend *be)
{
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
    t->prof = dl_profiler_off();
    t->base_lr = optim->lr;
    t->loss_scale = cfg->precision == DL_PREC_F16 ? t->cfg.loss_scale : 1.0f;
    t->lowp_dirty = 1;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    dl_trainer_publish_locked(t); /* no other thread knows t yet */
}

/* The staging area for a batch of raw x and targets and the statistics,
 * the model's state on be and its activation plan, the step counts. */
static int prepare(dl_trainer *t, dl_backend *be)
{
    const dl_data_info *in = &t->train->info;
    int batch = t->cfg.batch;
    t->x_bytes = (size_t)batch * (size_t)dl_shape_numel(&in->sample) * dl_dtype_size(in->x_dtype);
    t->y_bytes = (size_t)batch * (size_t)(in->y_width > 0 ? in->y_width : 1) * 4;
    size_t xs = (t->x_bytes + 63) & ~(size_t)63, ys = (t->y_bytes + 63) & ~(size_t)63;
    for (int i = 0; i < 2; i++) {
        t->off_x[i] = (size_t)i * (xs + ys);
        t->off_y[i] = t->off_x[i] + xs;
    }
    t->off_stats = 2 * (xs + ys);
    DL_TRY(dl_trainer_alloc_stage(t, be));
    if (dl_model_backend(t->m) != be)
        DL_TRY(dl_model_backend(t->m)
                   ? dl_model_move(t->m, be)
                   : dl_model_init_state(t->m, be, dl_optim_moments(&t->opt), t->cfg.seed));
    dl_model_set_precision(t->m, t->cfg.precision); /* workspaces sized for it alone */
    DL_TRY(dl_model_plan(t->m, batch));
    size_t batches = t->train->ops->batches(t->train);
    size_t acc = (size_t)t->cfg.accumulate;
    t->steps_per_epoch = (long)((batches + acc - 1) / acc);
    t->total_steps = t->steps_per_epoch * t->cfg.epochs;
    if (t->cfg.max_steps > 0 && t->cfg.max_steps < t->total_steps)
        t->total_steps = t->cfg.max_steps;
    return DL_OK;
}

int dl_trainer_create(dl_trainer **out, dl_model *model, const dl_loss *loss, const dl_optim *optim,
                      const dl_schedule *schedule, dl_source *train, dl_source *val,
                      const dl_trainer_config *cfg, dl_backend *be)
{
    *out = NULL;
    if (cfg->epochs < 1 || cfg->batch < 1 || cfg->accumulate < 1)
        return dl_error(DL_EINVAL, "epochs (%d), batch (%d) and accumulate (%d) must be >= 1",
                        cfg->epochs, cfg->batch, cfg->accumulate);
    if (!(optim->lr > 0) || !isfinite(optim->lr))
        return dl_error(DL_EINVAL, "learning rate %g must be a positive number", (double)optim->lr);
    dl_trainer *t = calloc(1, sizeof *t);
    if (!t)
        return dl_error(DL_ENOMEM, "out of memory");
    init_fields(t, model, loss, optim, schedule, train, val, cfg, be);
    int rc = check_data(t, train);
    if (rc == DL_OK && val)
        rc = check_data(t, val);
    if (rc == DL_OK && is_token_task(t, &train->info))
        t->tokens = train->info.y_width;
    if (rc == DL_OK)
        rc = prepare(t, be);
    if (rc < 0) {
        dl_trainer_destroy(t);
        return rc;
    }
    *out = t;
    return DL_OK;
}

void dl_trainer_destroy(dl_trainer *t)
{
    if (!t)
        return;
    dl_trainer_free_stage(t);
    dl_source_destroy(t->shard);
    free(t->sync);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->cond);
    free(t);
}

void dl_trainer_set_callbacks(dl_trainer *t, const dl_callbacks *cb) { t->cb = *cb; }

void dl_trainer_set_devices(dl_trainer *t, const dl_devices *d) { t->devices = d; }

int dl_trainer_set_profiler(dl_trainer *t, dl_profiler *prof)
{
    if (prof)
        DL_TRY(dl_profiler_attach(prof, t->m, t->be));
    t->prof = prof ? prof : dl_profiler_off();
    return DL_OK;
}

dl_profiler *dl_trainer_profiler(const dl_trainer *t)
{
    return t->prof == dl_profiler_off() ? NULL : t->prof;
}

/* Data parallel: whether the job is paused (any rank's pause); a paused
 * rank waits for a command meanwhile (the others wait in the next
 * agreement). */
static int job_paused(dl_trainer *t, int *paused)
{
    DL_TRY(dl_trainer_agree(t, paused));
    if (*paused && !t->stop) {
        if (t->paused)
            dl_trainer_wait_command(t);
        t->rep_t0 = dl_clock_mono_s();
    }
    return DL_OK;
}

int dl_trainer_run(dl_trainer *t)
{
    t->rep_t0 = t->ep_t0 = dl_clock_mono_s();
    while (t->epoch < t->cfg.epochs && !t->stop) {
        if (t->cfg.max_steps > 0 && t->step >= t->cfg.max_steps)
            break;
        DL_TRY(dl_trainer_drain(t));
        int paused = 0;
        if (t->dp)
            DL_TRY(job_paused(t, &paused));
        if (paused && !t->stop)
            continue;
        if (t->stop)
            break;
        int rc = dl_trainer_step(t);
        if (rc < 0)
            return rc;
        if (rc == 1)
            DL_TRY(dl_trainer_end_epoch(t));
        else if (t->step % t->cfg.log_every == 0)
            DL_TRY(dl_trainer_report(t, 0));
    }
    if (dl_trainer_window_open(t))
        DL_TRY(dl_trainer_report(t, t->stop));
    dl_trainer_publish(t);
    return DL_OK;
}
