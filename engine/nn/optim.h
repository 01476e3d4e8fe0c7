/* optim.h - optimizers (SGD, Adam, AdamW), learning-rate schedules and gradient clipping */
#ifndef DL_OPTIM_H
#define DL_OPTIM_H

#include "engine/core/backend.h"
#include "engine/nn/nn.h"

typedef enum { DL_OPT_SGD, DL_OPT_ADAM, DL_OPT_ADAMW } dl_optim_kind;

typedef struct dl_optim {
    dl_optim_kind kind;
    float lr;
    float momentum;     /* SGD */
    int nesterov;       /* SGD */
    float weight_decay; /* SGD/Adam: L2 in the gradient; AdamW: decoupled */
    float beta1, beta2, eps;
    float clip_norm; /* > 0: clip gradients to this global L2 norm */
} dl_optim;

/* Defaults as in PyTorch: lr 0.01 (SGD) / 1e-3 (Adam); betas 0.9, 0.999;
 * eps 1e-8; AdamW weight decay 0.01. */
dl_optim dl_optim_sgd(float lr, float momentum, int nesterov, float weight_decay);
dl_optim dl_optim_adam(float lr, float weight_decay);
dl_optim dl_optim_adamw(float lr, float weight_decay);
const char *dl_optim_name(dl_optim_kind k);
/* Moments the optimizer keeps per parameter (0, 1 or 2). */
int dl_optim_moments(const dl_optim *o);

/* One update of the model's parameters from its gradients (which it then
 * zeroes): lr is the scheduled rate, step counts updates from 1,
 * grad_scale multiplies the gradients first (1 / (loss scale *
 * accumulate)). Weight decay skips parameters registered without decay. */
int dl_optim_step(const dl_optim *o, dl_model *m, float lr, long step, float grad_scale);
/* The same, skipped on the device (only the gradients zeroed) when the
 * grad_guard cells say the gradient was not finite (guard NULL: as
 * dl_optim_step). Needs dl_guard_available. */
int dl_optim_step_guarded(const dl_optim *o, dl_model *m, float lr, long step, float grad_scale,
                          const float *guard);
/* dl_optim_step_guarded that also leaves the model's low-precision copy
 * of the parameters (lowp DL_BF16 or DL_F16; DL_F32: no copy) equal to
 * the updated weights, as dl_model_refresh_lowp would: written in the
 * update's own pass where the backend has the _lowp update ops (never
 * with a guard), else cast after it. */
int dl_optim_step_lowp(const dl_optim *o, dl_model *m, float lr, long step, float grad_scale,
                       const float *guard, dl_dtype lowp);

/* Learning-rate schedules, evaluated per optimizer step. */
typedef enum {
    DL_SCHED_CONSTANT,
    DL_SCHED_STEP,     /* lr * gamma^(floor(step / step_size)) */
    DL_SCHED_COSINE,   /* warmup, then cosine from lr to min_lr over total */
    DL_SCHED_WARMUP,   /* linear warmup from 0, then constant */
    DL_SCHED_ONECYCLE, /* up to max_lr over pct_start, cosine down (PyTorch's) */
    DL_SCHED_PLATEAU   /* lr * factor after `patience` epochs without improvement */
} dl_sched_kind;

typedef struct dl_schedule {
    dl_sched_kind kind;
    long warmup;                 /* steps of linear warmup (cosine, warmup) */
    long step_size;              /* step */
    float gamma;                 /* step */
    float min_lr;                /* cosine floor */
    float max_lr;                /* one-cycle peak (0: 10 x base) */
    float pct_start;             /* one-cycle rise fraction (0.3) */
    float div_factor, final_div; /* one-cycle: start = max/div, end = start/final_div */
    float factor;                /* plateau */
    int patience;                /* plateau */
    float threshold;             /* plateau: relative improvement that counts */
    int mode_max;                /* plateau: metric improves upwards */
    /* plateau state */
    float scale;
    double best;
    int bad_epochs;
} dl_schedule;

dl_schedule dl_schedule_constant(void);
const char *dl_schedule_name(dl_sched_kind k);
/* The learning rate for update `step` (0-based) of `total` steps. */
float dl_schedule_lr(const dl_schedule *s, float base_lr, long step, long total);
/* Plateau: feeds an epoch's monitored metric; returns 1 when the LR was
 * reduced. Other kinds ignore it. */
int dl_schedule_epoch_end(dl_schedule *s, double metric);

/* Global L2 norm of the gradients; when max_norm > 0 and the norm exceeds
 * it, scales them by max_norm / norm. grad_scale is applied to the norm
 * reported (the raw gradients carry the loss scale). *norm is Inf/NaN
 * when a gradient is not finite (then nothing is scaled). */
int dl_clip_grad_norm(dl_model *m, float max_norm, float grad_scale, double *norm);
/* dl_clip_grad_norm decided on the device, nothing read back: the norm,
 * clip factor and skip flag land in cells (4 device floats; see the
 * backend's grad_guard) for dl_optim_step_guarded and a later read. */
int dl_guard_grads(dl_model *m, float max_norm, float grad_scale, float *cells);
/* Whether be checks gradients on the device (grad_guard and the guarded
 * updates): the CUDA backend does, the CPU, where a read costs nothing,
 * does not. */
int dl_guard_available(const dl_backend *be);

#endif
