/* optim.c - SGD, Adam and AdamW over the model's state arena, learning-rate schedules, clipping */
#include "engine/nn/optim.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/base/error.h"

dl_optim dl_optim_sgd(float lr, float momentum, int nesterov, float weight_decay)
{
    dl_optim o = {DL_OPT_SGD, lr, momentum, nesterov, weight_decay, 0.9f, 0.999f, 1e-8f, 0};
    return o;
}

dl_optim dl_optim_adam(float lr, float weight_decay)
{
    dl_optim o = {DL_OPT_ADAM, lr, 0, 0, weight_decay, 0.9f, 0.999f, 1e-8f, 0};
    return o;
}

dl_optim dl_optim_adamw(float lr, float weight_decay)
{
    dl_optim o = {DL_OPT_ADAMW, lr, 0, 0, weight_decay, 0.9f, 0.999f, 1e-8f, 0};
    return o;
}

const char *dl_optim_name(dl_optim_kind k)
{
    switch (k) {
    case DL_OPT_ADAM: return "Adam";
    case DL_OPT_ADAMW: return "AdamW";
    default: return "SGD";
    }
}

int dl_optim_moments(const dl_optim *o)
{
    if (o->kind == DL_OPT_SGD)
        return o->momentum != 0 ? 1 : 0;
    return 2;
}

/* Updates floats [begin, end) of the arena with weight decay wd; guard:
 * device cells of a grad_guard (NULL: unguarded); lp: the low-precision
 * copy to write in the same pass (NULL: none; never with a guard). */
static int update_range(const dl_optim *o, dl_backend *be, const dl_model_state *s, size_t begin,
                        size_t end, float wd, float lr, long step, float grad_scale,
                        const float *guard, dl_dtype lpt)
{
    size_t n = end - begin;
    if (n == 0)
        return DL_OK;
    float *m1 = s->moment1 ? s->moment1 + begin : NULL;
    float *m2 = s->moment2 ? s->moment2 + begin : NULL;
    float *w = s->params + begin, *g = s->grads + begin;
    void *lp = lpt != DL_F32
                   ? (char *)s->params_lp + begin * dl_dtype_size(dl_backend_operand_type(be, lpt))
                   : NULL;
    int decoupled = o->kind == DL_OPT_ADAMW;
    if (guard && o->kind == DL_OPT_SGD)
        return be->ops->sgd_update_guarded(be, n, w, g, m1, lr, o->momentum, wd, o->nesterov,
                                           grad_scale, guard);
    if (guard)
        return be->ops->adam_update_guarded(be, n, w, g, m1, m2, lr, o->beta1, o->beta2, o->eps, wd,
                                            decoupled, step, grad_scale, guard);
    if (o->kind == DL_OPT_SGD)
        return lp ? be->ops->sgd_update_lowp(be, n, w, g, m1, lr, o->momentum, wd, o->nesterov,
                                             grad_scale, lp, lpt)
                  : be->ops->sgd_update(be, n, w, g, m1, lr, o->momentum, wd, o->nesterov,
                                        grad_scale);
    if (lp)
        return be->ops->adam_update_lowp(be, n, w, g, m1, m2, lr, o->beta1, o->beta2, o->eps, wd,
                                         decoupled, step, grad_scale, lp, lpt);
    return be->ops->adam_update(be, n, w, g, m1, m2, lr, o->beta1, o->beta2, o->eps, wd, decoupled,
                                step, grad_scale);
}

int dl_optim_step(const dl_optim *o, dl_model *m, float lr, long step, float grad_scale)
{
    return dl_optim_step_lowp(o, m, lr, step, grad_scale, NULL, DL_F32);
}

int dl_optim_step_guarded(const dl_optim *o, dl_model *m, float lr, long step, float grad_scale,
                          const float *guard)
{
    return dl_optim_step_lowp(o, m, lr, step, grad_scale, guard, DL_F32);
}

int dl_optim_step_lowp(const dl_optim *o, dl_model *m, float lr, long step, float grad_scale,
                       const float *guard, dl_dtype lowp)
{
    dl_model_state s;
    dl_model_get_state(m, &s);
    dl_backend *be = dl_model_backend(m);
    if (s.moments < dl_optim_moments(o))
        return dl_error(DL_EINVAL, "%s needs %d moment(s) per parameter; the model has %d",
                        dl_optim_name(o->kind), dl_optim_moments(o), s.moments);
    /* the copy in the update's pass, or a cast after it */
    int fused = lowp != DL_F32 && !guard &&
                (o->kind == DL_OPT_SGD ? be->ops->sgd_update_lowp != NULL
                                       : be->ops->adam_update_lowp != NULL);
    dl_dtype lpt = fused ? lowp : DL_F32;
    if (o->weight_decay == 0) {
        DL_TRY(update_range(o, be, &s, 0, s.count, 0, lr, step, grad_scale, guard, lpt));
    } else {
        /* parameters are laid out in registration order: update runs of
         * equal decay with one fused call each (weights decay, biases and
         * norms not) */
        int np = dl_model_num_params(m);
        size_t run_start = 0;
        int run_decay = np ? dl_model_param(m, 0)->decay : 1;
        for (int i = 0; i < np; i++) {
            const dl_param *p = dl_model_param(m, i);
            if (p->decay != run_decay) {
                DL_TRY(update_range(o, be, &s, run_start, p->offset,
                                    run_decay ? o->weight_decay : 0, lr, step, grad_scale, guard,
                                    lpt));
                run_start = p->offset;
                run_decay = p->decay;
            }
        }
        DL_TRY(update_range(o, be, &s, run_start, s.count, run_decay ? o->weight_decay : 0, lr,
                            step, grad_scale, guard, lpt));
    }
    return lowp != DL_F32 && !fused ? dl_model_refresh_lowp(m, lowp) : DL_OK;
}

int dl_guard_grads(dl_model *m, float max_norm, float grad_scale, float *cells)
{
    dl_model_state s;
    dl_model_get_state(m, &s);
    dl_backend *be = dl_model_backend(m);
    return be->ops->grad_guard(be, s.grads, s.count, grad_scale, max_norm, cells);
}

int dl_guard_available(const dl_backend *be)
{
    const dl_backend_ops *o = be->ops;
    return o->grad_guard && o->sgd_update_guarded && o->adam_update_guarded;
}

int dl_clip_grad_norm(dl_model *m, float max_norm, float grad_scale, double *norm)
{
    dl_model_state s;
    dl_model_get_state(m, &s);
    dl_backend *be = dl_model_backend(m);
    double ss = 0;
    DL_TRY(be->ops->sumsq(be, s.grads, s.count, &ss));
    *norm = sqrt(ss) * grad_scale;
    if (!isfinite(*norm) || max_norm <= 0 || *norm <= max_norm)
        return DL_OK;
    return be->ops->scale(be, s.grads, (float)(max_norm / *norm), s.count);
}

/* --- schedules ---------------------------------------------------------------- */

dl_schedule dl_schedule_constant(void)
{
    dl_schedule s = {0};
    s.kind = DL_SCHED_CONSTANT;
    s.gamma = 0.1f;
    s.pct_start = 0.3f;
    s.div_factor = 25;
    s.final_div = 1e4f;
    s.factor = 0.1f;
    s.patience = 10;
    s.threshold = 1e-4f;
    s.scale = 1;
    s.best = NAN;
    return s;
}

const char *dl_schedule_name(dl_sched_kind k)
{
    static const char *names[] = {"constant", "step", "cosine", "warmup", "onecycle", "plateau"};
    return (unsigned)k < sizeof names / sizeof *names ? names[k] : "?";
}

static double cos_interp(double from, double to, double frac)
{
    if (frac < 0)
        frac = 0;
    if (frac > 1)
        frac = 1;
    return to + (from - to) * 0.5 * (1 + cos(M_PI * frac));
}

float dl_schedule_lr(const dl_schedule *s, float base_lr, long step, long total)
{
    double lr = base_lr;
    switch (s->kind) {
    case DL_SCHED_CONSTANT: break;
    case DL_SCHED_STEP:
        if (s->step_size > 0)
            lr = base_lr * pow(s->gamma, (double)(step / s->step_size));
        break;
    case DL_SCHED_WARMUP:
        if (step < s->warmup)
            lr = base_lr * (double)(step + 1) / (double)s->warmup;
        break;
    case DL_SCHED_COSINE:
        if (step < s->warmup) {
            lr = base_lr * (double)(step + 1) / (double)s->warmup;
        } else {
            long span = total - s->warmup;
            lr = span > 0 ? cos_interp(base_lr, s->min_lr, (double)(step - s->warmup) / span)
                          : base_lr;
        }
        break;
    case DL_SCHED_ONECYCLE: {
        double peak = s->max_lr > 0 ? s->max_lr : 10.0 * base_lr;
        double start = peak / s->div_factor, end = start / s->final_div;
        double rise_end = s->pct_start * (double)total - 1;
        if ((double)step <= rise_end && rise_end > 0)
            lr = cos_interp(start, peak, (double)step / rise_end);
        else
            lr = cos_interp(peak, end, ((double)step - rise_end) / ((double)total - 1 - rise_end));
        break;
    }
    case DL_SCHED_PLATEAU: lr = base_lr * s->scale; break;
    }
    return (float)lr;
}

int dl_schedule_epoch_end(dl_schedule *s, double metric)
{
    if (s->kind != DL_SCHED_PLATEAU || !isfinite(metric))
        return 0;
    int better;
    if (isnan(s->best))
        better = 1;
    else if (s->mode_max)
        better = metric > s->best * (1 + (s->best >= 0 ? s->threshold : -s->threshold));
    else
        better = metric < s->best * (1 - (s->best >= 0 ? s->threshold : -s->threshold));
    if (better) {
        s->best = metric;
        s->bad_epochs = 0;
        return 0;
    }
    if (++s->bad_epochs > s->patience) {
        s->scale *= s->factor;
        s->bad_epochs = 0;
        return 1;
    }
    return 0;
}
