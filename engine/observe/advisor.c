/* advisor.c - the bottleneck rules: each names what it saw, with the numbers, and the remedy */
#include "engine/observe/advisor.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/observe/cost.h"

/* Thresholds, in one place. */
#define INPUT_SHARE_WARN 0.20 /* data wait share of step time */
#define INPUT_SHARE_CRIT 0.50
#define GPU_IDLE_PCT 50.0      /* utilisation under which the GPU waits */
#define LAUNCH_MEAN_OP_MS 0.05 /* layer passes shorter than this are launch-dominated */
#define LAUNCH_MIN_OPS 16      /* ... when a step has at least this many */
#define LAUNCH_MAX_DATA 0.10
#define HEADROOM_FREE 0.50   /* share of GPU memory unused */
#define EXPLODE_FACTOR 10.0  /* recent loss over the lowest seen */
#define OVERFIT_MIN_POINTS 5 /* validated epochs before the trend is read */
#define OVERFIT_NOISE 3.0    /* rise over the noise's robust sigma that counts */
#define OVERFIT_REL 0.03     /* ... and over this share of the best loss */
#define SMALL_MIN_GAIN 1.2   /* projected samples/s gain of a larger batch worth advising */
#define SMALL_MAX_BATCH 128  /* batches from here up are not called small */
#define SMALL_MAX_DATA 0.5   /* from here the loader is the cause: the input rule speaks */
#define PLATEAU_MIN_POINTS 6 /* validated epochs before a plateau is read */
#define PLATEAU_MIN_FLAT 3   /* validated epochs on the plateau */
#define PLATEAU_TOL 0.004    /* accuracy within this of the end counts as the same */
#define PLATEAU_MIN_SAVE 0.2 /* share of the planned epochs the advice must save */
#define VAL_SHARE_WARN 0.25  /* validation's share of the wall time */
#define VAL_SHARE_GOAL 0.10  /* the share the suggested frequency aims at */
#define LR_MIN_STEPS 40      /* logged step losses before the curve is read */
#define LR_SLOW_DROP 0.05    /* a steady fall smaller than this share: too low */

static const char *names[DL_ADV_NKINDS] = {"divergence",      "out of memory", "input-bound",
                                           "launch-bound",    "overfitting",   "precision",
                                           "memory headroom", "small batch",   "validation share",
                                           "learning rate",   "plateau"};

const char *dl_advice_name(dl_advice_kind k)
{
    return k >= 0 && k < DL_ADV_NKINDS ? names[k] : "?";
}

void dl_advisor_input_init(dl_advisor_input *in)
{
    memset(in, 0, sizeof *in);
    in->step_ms = in->data_wait_share = in->leaf_ops_per_step = in->mean_op_ms = -1;
    in->workers = in->queue_fill = in->queue_size = -1;
    in->cpu_cores = -1;
    in->gpu_util_pct = in->gpu_mem_used_mb = in->gpu_mem_total_mb = -1;
    in->lr = -1;
    in->batch = 0;
    in->accumulate = 1;
    in->product_share = in->fixed_share = -1;
    in->product_flops_per_s = in->peak_flops = -1;
    in->bf16_native = in->f16_native = -1;
    in->adaptive_optim = -1;
    in->base_lr = -1;
}

/* A figure of a's evidence. */
static void num(dl_advice *a, const char *key, double v)
{
    if (a->nnum >= DL_ADV_MAX_NUMBERS)
        return;
    snprintf(a->num[a->nnum].key, sizeof a->num[a->nnum].key, "%s", key);
    a->num[a->nnum++].value = v;
}

/* What the remedy is expected to save, as estimated from the figures. */
static void effect(dl_advice *a, double saves_s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void effect(dl_advice *a, double saves_s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->effect, sizeof a->effect, fmt, ap);
    va_end(ap);
    a->saves_s = saves_s;
    snprintf(a->effect_basis, sizeof a->effect_basis, "estimate");
}

typedef struct out_list {
    dl_advice *a;
    int n, max;
} out_list;

static dl_advice *add(out_list *o, dl_advice_kind kind, dl_advice_level level)
{
    if (o->n >= o->max)
        return NULL;
    dl_advice *a = &o->a[o->n++];
    memset(a, 0, sizeof *a);
    a->kind = kind;
    a->level = level;
    snprintf(a->title, sizeof a->title, "%s", names[kind]);
    a->saves_s = -1;
    return a;
}

static void rule_divergence(const dl_advisor_input *in, out_list *o)
{
    int bad = in->nonfinite;
    double lo = INFINITY, first = NAN, last = NAN;
    int nfin = 0;
    for (int i = 0; i < in->nsteps; i++) {
        double v = in->step_loss[i];
        if (!isfinite(v)) {
            bad = 1;
            continue;
        }
        if (isnan(first))
            first = v;
        last = v;
        if (v < lo)
            lo = v;
        nfin++;
    }
    int exploding = nfin >= 5 && lo > 0 && last > EXPLODE_FACTOR * lo && last > 2 * first;
    if (!bad && !exploding)
        return;
    dl_advice *a = add(o, DL_ADV_DIVERGENCE, DL_ADV_CRITICAL);
    if (!a)
        return;
    char lr[48] = "";
    if (in->lr > 0)
        snprintf(lr, sizeof lr, " at learning rate %g", in->lr);
    if (bad)
        snprintf(a->evidence, sizeof a->evidence, "the loss or the gradients became NaN/Inf%s%s",
                 lr, in->skipped_steps > 0 ? " (steps were skipped)" : "");
    else
        snprintf(a->evidence, sizeof a->evidence,
                 "the loss exploded: %.4g now against %.4g at best and %.4g at the start%s", last,
                 lo, first, lr);
    char try_lr[48] = "";
    if (in->lr > 0) {
        snprintf(try_lr, sizeof try_lr, " (try %g)", in->lr / 10);
        num(a, "lr", in->lr);
        snprintf(a->command, sizeof a->command, "--set lr=%g", in->lr / 10);
    }
    snprintf(a->remedy, sizeof a->remedy,
             "lower the learning rate%s, clip gradients (clip_norm = 1.0), add warmup; with "
             "fp16, dynamic loss scaling",
             try_lr);
}

static void rule_oom(const dl_advisor_input *in, out_list *o)
{
    if (!in->oom)
        return;
    dl_advice *a = add(o, DL_ADV_OOM, DL_ADV_CRITICAL);
    if (!a)
        return;
    if (in->batch <= 0)
        snprintf(a->evidence, sizeof a->evidence, "out of memory%s%.150s",
                 in->oom_text[0] ? ": " : "", in->oom_text);
    else
        snprintf(a->evidence, sizeof a->evidence, "out of memory with batch %d%s%.150s", in->batch,
                 in->oom_text[0] ? ": " : "", in->oom_text);
    int half = in->batch > 1 ? in->batch / 2 : 1;
    num(a, "batch", in->batch);
    snprintf(a->command, sizeof a->command, "--set batch=%d --set accumulate=%d", half,
             2 * (in->accumulate > 0 ? in->accumulate : 1));
    snprintf(a->remedy, sizeof a->remedy,
             "gradient accumulation (batch = %d, accumulate = %d: the same step), "
             "precision = \"bf16\" (half the activation memory), or a smaller batch",
             half, 2 * (in->accumulate > 0 ? in->accumulate : 1));
}

static void rule_input(const dl_advisor_input *in, out_list *o)
{
    int share_hit = in->data_wait_share >= INPUT_SHARE_WARN;
    int idle_hit = in->on_gpu && in->gpu_util_pct >= 0 && in->gpu_util_pct < GPU_IDLE_PCT &&
                   in->queue_size > 0 && in->queue_fill == 0;
    if (!share_hit && !idle_hit)
        return;
    dl_advice *a = add(o, DL_ADV_INPUT_BOUND,
                       in->data_wait_share >= INPUT_SHARE_CRIT ? DL_ADV_CRITICAL : DL_ADV_WARNING);
    if (!a)
        return;
    int len = 0;
    if (in->data_wait_share >= 0) {
        if (in->step_ms > 0)
            len =
                snprintf(a->evidence, sizeof a->evidence,
                         "data wait is %.0f%% of step time (%.2f of %.2f ms)",
                         100 * in->data_wait_share, in->data_wait_share * in->step_ms, in->step_ms);
        else
            len = snprintf(a->evidence, sizeof a->evidence, "data wait is %.0f%% of step time",
                           100 * in->data_wait_share);
    }
    if (in->gpu_util_pct >= 0 && len >= 0 && (size_t)len < sizeof a->evidence)
        len += snprintf(a->evidence + len, sizeof a->evidence - (size_t)len,
                        "%sGPU utilisation %.0f%%", len ? ", " : "", in->gpu_util_pct);
    if (in->queue_size > 0 && len >= 0 && (size_t)len < sizeof a->evidence)
        len += snprintf(a->evidence + len, sizeof a->evidence - (size_t)len,
                        "%sloader queue %d/%d ready", len ? ", " : "",
                        in->queue_fill > 0 ? in->queue_fill : 0, in->queue_size);
    if (in->workers >= 0 && len >= 0 && (size_t)len < sizeof a->evidence)
        snprintf(a->evidence + len, sizeof a->evidence - (size_t)len, "%s%d loader worker%s",
                 len ? ", " : "", in->workers, in->workers == 1 ? "" : "s");
    num(a, "data_wait_share", in->data_wait_share);
    if (in->step_ms > 0)
        num(a, "step_ms", in->step_ms);
    /* more workers than cores compete with the training's own threads:
     * the command stops at the cores the training leaves free (on the
     * CPU, the cores less its compute threads; at the core count on a
     * GPU), and is none when there are none */
    int more = in->workers < 2 ? 2 : 2 * in->workers;
    int room = in->cpu_cores;
    if (room > 0 && !in->on_gpu && in->compute_threads > 0)
        room -= in->compute_threads;
    if (in->cpu_cores > 0 && more > room)
        more = room;
    if (in->workers >= 0) {
        num(a, "workers", in->workers);
        if (more > in->workers)
            snprintf(a->command, sizeof a->command, "--set workers=%d", more);
    }
    if (in->data_wait_share > 0 && in->step_ms > 0)
        effect(a, -1, "up to %.0f%% less time a step if the loader keeps up",
               100 * in->data_wait_share);
    if (in->workers >= 0 && more <= in->workers && in->compute_threads > 0 && !in->on_gpu)
        snprintf(a->remedy, sizeof a->remedy,
                 "the training's %d threads take the %d cores: more loader workers would compete "
                 "with them; in-memory mode, u8 storage, lighter augmentation, or a bigger "
                 "machine",
                 in->compute_threads, in->cpu_cores);
    else if (in->workers >= 0 && more <= in->workers)
        snprintf(a->remedy, sizeof a->remedy,
                 "the loader has %d workers on %d cores already: in-memory mode, u8 storage "
                 "(scale on the device), lighter augmentation",
                 in->workers, in->cpu_cores);
    else if (in->workers == 0)
        snprintf(a->remedy, sizeof a->remedy,
                 "the batches are prepared on the training thread: set workers = %d (and "
                 "prefetch = 4); keep the data in memory, store it as u8",
                 more);
    else
        snprintf(a->remedy, sizeof a->remedy,
                 "more loader workers%s, a deeper prefetch, in-memory mode, u8 storage (scale "
                 "on the device), lighter augmentation",
                 in->workers > 0 ? " (now running fewer than the batches need)" : "");
}

static void rule_launch(const dl_advisor_input *in, out_list *o)
{
    if (!in->on_gpu || in->mean_op_ms < 0 || in->leaf_ops_per_step < 0)
        return;
    if (in->mean_op_ms >= LAUNCH_MEAN_OP_MS || in->leaf_ops_per_step < LAUNCH_MIN_OPS)
        return;
    if (in->data_wait_share >= LAUNCH_MAX_DATA)
        return;
    if (in->gpu_util_pct >= 0 && in->gpu_util_pct >= 80)
        return;
    dl_advice *a = add(o, DL_ADV_LAUNCH_BOUND, DL_ADV_WARNING);
    if (!a)
        return;
    char util[48] = "";
    if (in->gpu_util_pct >= 0)
        snprintf(util, sizeof util, ", GPU utilisation %.0f%%", in->gpu_util_pct);
    snprintf(a->evidence, sizeof a->evidence,
             "%.0f layer passes per step averaging %.1f us each%s, data wait %.0f%%",
             in->leaf_ops_per_step, in->mean_op_ms * 1000, util,
             in->data_wait_share > 0 ? 100 * in->data_wait_share : 0);
    num(a, "layer_passes", in->leaf_ops_per_step);
    num(a, "mean_op_us", in->mean_op_ms * 1000);
    if (in->batch > 0)
        snprintf(a->command, sizeof a->command, "--set batch=%d", in->batch * 4);
    snprintf(a->remedy, sizeof a->remedy,
             "the GPU waits for the CPU to launch work: a larger batch (now %d) so each op "
             "does more, fewer and wider layers, fused ops / CUDA graphs",
             in->batch);
}

/* Mean of v[lo, hi). */
static double mean_of(const double *v, int lo, int hi)
{
    double s = 0;
    int n = 0;
    for (int i = lo; i < hi; i++)
        if (isfinite(v[i]))
            s += v[i], n++;
    return n ? s / n : NAN;
}

/* The validated epochs: their index into the per-epoch curves in idx,
 * their losses in v; returns how many. */
static int validated(const dl_advisor_input *in, int *idx, double *v)
{
    int n = 0;
    for (int i = 0; i < in->nepochs && i < DL_ADV_MAX_EPOCHS; i++)
        if (isfinite(in->val_loss[i])) {
            idx[n] = i;
            v[n++] = in->val_loss[i];
        }
    return n;
}

static double median3(double a, double b, double c)
{
    return a > b ? (b > c ? b : a > c ? c : a) : (a > c ? a : b > c ? c : b);
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* The least-squares slope of v[n] against its index into *slope, and its
 * t statistic (slope over its standard error; large when the residuals
 * are 0). */
static double slope_t(const double *v, int n, double *slope)
{
    double mx = (n - 1) / 2.0, my = 0, sxx = 0, sxy = 0, sse = 0;
    for (int i = 0; i < n; i++)
        my += v[i] / n;
    for (int i = 0; i < n; i++) {
        sxx += (i - mx) * (i - mx);
        sxy += (i - mx) * (v[i] - my);
    }
    *slope = sxy / sxx;
    for (int i = 0; i < n; i++) {
        double r = v[i] - my - *slope * (i - mx);
        sse += r * r;
    }
    double se = sqrt(sse / (n - 2) / sxx);
    return se > 0 ? *slope / se : *slope > 0 ? INFINITY : 0;
}

/* The trend of v[n]: a running median of 3 (a single noisy epoch goes),
 * then a mean of 3, into sm; returns the noise's robust sigma (1.4826 x
 * the median absolute residual around the trend). */
static double smooth(const double *v, int n, double *sm)
{
    double med[DL_ADV_MAX_EPOCHS], res[DL_ADV_MAX_EPOCHS];
    for (int i = 0; i < n; i++)
        med[i] = i == 0 || i == n - 1 ? v[i] : median3(v[i - 1], v[i], v[i + 1]);
    for (int i = 0; i < n; i++) {
        int lo = i > 0 ? i - 1 : 0, hi = i < n - 1 ? i + 1 : n - 1;
        double sum = 0;
        for (int k = lo; k <= hi; k++)
            sum += med[k];
        sm[i] = sum / (hi - lo + 1);
        res[i] = fabs(v[i] - sm[i]);
    }
    qsort(res, (size_t)n, sizeof *res, cmp_double);
    return 1.4826 * res[n / 2];
}

/* The epoch (1-based) a run that overfits could have stopped at: the
 * first validated epoch whose smoothed accuracy is within 0.5 point of the
 * smoothed best, or without accuracy the best loss's epoch. */
static int stop_epoch(const dl_advisor_input *in, const int *idx, int n, int best_loss_epoch)
{
    if (!in->val_acc)
        return best_loss_epoch + 1;
    double acc[DL_ADV_MAX_EPOCHS], sm[DL_ADV_MAX_EPOCHS];
    int m = 0, at[DL_ADV_MAX_EPOCHS];
    for (int i = 0; i < n; i++)
        if (isfinite(in->val_acc[idx[i]])) {
            at[m] = idx[i];
            acc[m++] = in->val_acc[idx[i]];
        }
    if (m < OVERFIT_MIN_POINTS)
        return best_loss_epoch + 1;
    smooth(acc, m, sm);
    double top = sm[0];
    for (int i = 1; i < m; i++)
        top = fmax(top, sm[i]);
    for (int i = 0; i < m; i++)
        if (sm[i] >= top - 0.005)
            return at[i] + 1;
    return at[m - 1] + 1;
}

static void overfit_advice(const dl_advisor_input *in, out_list *o, const int *idx, const double *v,
                           int n, int best, double rise)
{
    int be = idx[best], end = idx[n - 1];
    dl_advice *a = add(o, DL_ADV_OVERFITTING, DL_ADV_WARNING);
    if (!a)
        return;
    double past_s = -1, acc_best = NAN, acc_end = NAN;
    if (in->epoch_s) {
        past_s = 0;
        for (int i = be + 1; i <= end; i++)
            past_s += isfinite(in->epoch_s[i]) ? in->epoch_s[i] : 0;
    }
    if (in->val_acc) {
        acc_best = in->val_acc[be];
        acc_end = in->val_acc[end];
    }
    int len = snprintf(a->evidence, sizeof a->evidence,
                       "validation loss best at epoch %d (%.4f), %.4f at epoch %d: the smoothed "
                       "trend rose %.4f over %d epochs while training loss fell (%.4f -> %.4f)",
                       be + 1, v[best], v[n - 1], end + 1, rise, end - be, in->train_loss[be],
                       in->train_loss[end]);
    if (past_s >= 0 && len > 0 && (size_t)len < sizeof a->evidence)
        len += snprintf(a->evidence + len, sizeof a->evidence - (size_t)len,
                        "; %.1f s trained past the best", past_s);
    if (isfinite(acc_best) && isfinite(acc_end) && len > 0 && (size_t)len < sizeof a->evidence)
        snprintf(a->evidence + len, sizeof a->evidence - (size_t)len,
                 "; val_acc %.4f at best, %.4f now", acc_best, acc_end);
    num(a, "best_epoch", be + 1);
    num(a, "best_val_loss", v[best]);
    num(a, "last_val_loss", v[n - 1]);
    num(a, "epochs_past_best", end - be);
    num(a, "trend_rise", rise);
    if (past_s >= 0)
        num(a, "seconds_past_best", past_s);
    if (isfinite(acc_best))
        num(a, "best_val_acc", acc_best);
    if (isfinite(acc_end))
        num(a, "last_val_acc", acc_end);
    int planned = in->epochs_planned > end + 1 ? in->epochs_planned : end + 1;
    int stop_at = stop_epoch(in, idx, n, be);
    double per_epoch = in->epoch_s ? mean_of(in->epoch_s, 0, end + 1) : -1;
    num(a, "stop_epoch", stop_at);
    snprintf(a->remedy, sizeof a->remedy,
             "train %d epochs instead of %d (the same run up to there: the validation %s), or "
             "early stopping; more regularisation (dropout, weight decay, augmentation) or more "
             "data",
             stop_at, planned,
             in->val_acc ? "accuracy's trend is within 0.5 point of its best by then"
                         : "loss is at its best by then");
    if (stop_at < planned) {
        snprintf(a->command, sizeof a->command, "--set epochs=%d", stop_at);
        if (per_epoch > 0)
            effect(a, per_epoch * (planned - stop_at),
                   "%d of %d epochs: about %.1f s saved (%.0f%% of the run)", stop_at, planned,
                   per_epoch * (planned - stop_at), 100.0 * (planned - stop_at) / planned);
    }
}

/* Overfitting read from a smoothed validation trend, robust to noise: the
 * smoothed loss has risen past its minimum by more than the noise (and a
 * few percent of the best) while the training loss kept falling. */
static void rule_overfitting(const dl_advisor_input *in, out_list *o)
{
    if (!in->val_loss || !in->train_loss || in->nepochs < OVERFIT_MIN_POINTS)
        return;
    int idx[DL_ADV_MAX_EPOCHS];
    double v[DL_ADV_MAX_EPOCHS], sm[DL_ADV_MAX_EPOCHS];
    int n = validated(in, idx, v);
    if (n < OVERFIT_MIN_POINTS)
        return;
    smooth(v, n, sm);
    int best = 0;
    for (int i = 1; i < n; i++)
        if (sm[i] < sm[best])
            best = i;
    double rise = sm[n - 1] - sm[best];
    /* at least three validations past the best, rising beyond the noise:
     * the slope of a line through them is OVERFIT_NOISE standard errors
     * above 0, and the rise a few percent of the best */
    /* (the line starts two validations after the best: the best's
     * neighbours are low by selection, and would tilt a flat tail up) */
    if (n - best - 2 < 5)
        return;
    double slope, t = slope_t(v + best + 2, n - best - 2, &slope);
    if (!(t > OVERFIT_NOISE) || !(slope * (n - 1 - best) > OVERFIT_REL * fabs(sm[best])))
        return;
    /* the raw best within the smoothed best's neighbourhood names the epoch */
    int raw = best;
    for (int i = best > 0 ? best - 1 : 0; i <= best + 1 && i < n; i++)
        if (v[i] < v[raw])
            raw = i;
    if (!(in->train_loss[idx[n - 1]] < in->train_loss[idx[raw]]))
        return; /* training stalled too: not overfitting */
    overfit_advice(in, o, idx, v, n, raw, rise);
}

/* A batch too small for the device, measured: the step is split into a
 * part that does not grow with the batch (the optimizer phase, time
 * outside any span) and the rest, which does. A batch factor x larger pays
 * the fixed part factor x less often; if the products run no faster than
 * now, that alone gives gain_lo = factor * step / (fixed + factor * rest),
 * and if they reach the calibrated peak, gain_hi. The rule speaks when
 * gain_lo reaches SMALL_MIN_GAIN: a projection from this run's own
 * figures, so no share of the step is a threshold fitted to one machine. */
static void rule_small_batch(const dl_advisor_input *in, out_list *o)
{
    if (in->fixed_share < 0 || in->step_ms <= 0 || in->batch <= 0 || in->batch >= SMALL_MAX_BATCH)
        return;
    if (in->data_wait_share >= SMALL_MAX_DATA)
        return;
    /* up to 8x, as far as SMALL_MAX_BATCH (a batch that size rarely costs
     * accuracy; past it the rule does not speak) */
    int factor = 8;
    while (factor > 2 && in->batch * factor > SMALL_MAX_BATCH)
        factor /= 2;
    int nb = in->batch * factor;
    double fixed = in->fixed_share * in->step_ms, rest = in->step_ms - fixed;
    double gain_lo = factor * in->step_ms / (fixed + factor * rest);
    if (gain_lo < SMALL_MIN_GAIN)
        return;
    double gain_hi = gain_lo;
    double prod = in->product_share > 0 ? in->product_share * in->step_ms : 0;
    if (prod > 0 && in->product_flops_per_s > 0 && in->peak_flops > in->product_flops_per_s)
        gain_hi = factor * in->step_ms /
                  (fixed + factor * (rest - prod) +
                   factor * prod * in->product_flops_per_s / in->peak_flops);
    dl_advice *a = add(o, DL_ADV_SMALL_BATCH, DL_ADV_WARNING);
    if (!a)
        return;
    int len = snprintf(a->evidence, sizeof a->evidence,
                       "batch %d: %.0f%% of the %.3f ms step does not grow with the batch "
                       "(optimizer, %.3f ms)",
                       in->batch, 100 * in->fixed_share, in->step_ms, fixed);
    if (prod > 0 && in->product_flops_per_s > 0 && in->peak_flops > 0 && len > 0 &&
        (size_t)len < sizeof a->evidence)
        snprintf(a->evidence + len, sizeof a->evidence - (size_t)len,
                 "; the products run at %.0f%% of the calibrated peak (%.1f of %.1f GFLOP/s)",
                 100 * in->product_flops_per_s / in->peak_flops, in->product_flops_per_s * 1e-9,
                 in->peak_flops * 1e-9);
    num(a, "batch", in->batch);
    num(a, "step_ms", in->step_ms);
    num(a, "fixed_share", in->fixed_share);
    num(a, "fixed_ms", fixed);
    if (in->product_share >= 0)
        num(a, "product_share", in->product_share);
    if (in->product_flops_per_s > 0)
        num(a, "product_gflops", in->product_flops_per_s * 1e-9);
    if (in->peak_flops > 0)
        num(a, "peak_gflops", in->peak_flops * 1e-9);
    num(a, "gain_lo", gain_lo);
    num(a, "gain_hi", gain_hi);
    /* the learning rate follows the batch: linearly for SGD, by the square
     * root for adaptive optimizers */
    double lr_factor = in->adaptive_optim == 0 ? factor : sqrt((double)factor);
    if (in->base_lr > 0) {
        double lr = in->base_lr * lr_factor;
        snprintf(a->remedy, sizeof a->remedy,
                 "batch %d with the learning rate scaled %.3gx (%g -> %.3g): the fixed cost of a "
                 "step is paid %dx less often",
                 nb, lr_factor, in->base_lr, lr, factor);
        snprintf(a->command, sizeof a->command, "--set batch=%d --set lr=%.3g", nb, lr);
    } else {
        snprintf(a->remedy, sizeof a->remedy,
                 "batch %d, the learning rate scaled %.3gx with it: the fixed cost of a step is "
                 "paid %dx less often",
                 nb, lr_factor, factor);
        snprintf(a->command, sizeof a->command, "--set batch=%d", nb);
    }
    if (gain_hi > gain_lo * 1.005)
        effect(a, -1,
               "%.2fx to %.2fx the samples per second (the fixed part paid %dx less often; the "
               "products as fast as now, or at the peak)",
               gain_lo, gain_hi, factor);
    else
        effect(a, -1, "about %.2fx the samples per second (the fixed part paid %dx less often)",
               gain_lo, factor);
}

/* A plateau: validation accuracy reached its level epochs ago and the
 * rest of the run did not move it (not overfitting: the loss need not
 * rise). The epoch named is the first whose smoothed accuracy is within
 * PLATEAU_TOL of the smoothed top and whose own accuracy is within it of
 * the last epoch's (the same run stopped there ends where this one did, to
 * the tolerance); the tail after it must be flat: its fitted line gains
 * less than PLATEAU_TOL over the epochs it spans. */
static void rule_plateau(const dl_advisor_input *in, out_list *o)
{
    if (!in->val_acc || in->nepochs < PLATEAU_MIN_POINTS)
        return;
    for (int i = 0; i < o->n; i++)
        if (o->a[i].kind == DL_ADV_OVERFITTING)
            return; /* that advice names its own stopping epoch */
    int at[DL_ADV_MAX_EPOCHS], m = 0;
    double acc[DL_ADV_MAX_EPOCHS], sm[DL_ADV_MAX_EPOCHS];
    for (int i = 0; i < in->nepochs && i < DL_ADV_MAX_EPOCHS; i++)
        if (isfinite(in->val_acc[i])) {
            at[m] = i;
            acc[m++] = in->val_acc[i];
        }
    if (m < PLATEAU_MIN_POINTS)
        return;
    smooth(acc, m, sm);
    double top = sm[0];
    for (int i = 1; i < m; i++)
        top = fmax(top, sm[i]);
    int k = -1;
    for (int i = 0; i < m && k < 0; i++)
        if (sm[i] >= top - PLATEAU_TOL && acc[i] >= acc[m - 1] - PLATEAU_TOL)
            k = i;
    if (k < 0 || m - 1 - k < PLATEAU_MIN_FLAT)
        return;
    double slope;
    slope_t(acc + k, m - k, &slope);
    if (!(slope * (m - 1 - k) < PLATEAU_TOL))
        return;
    int stop = at[k] + 1, end = at[m - 1] + 1;
    int planned = in->epochs_planned > end ? in->epochs_planned : end;
    if (stop > planned * (1 - PLATEAU_MIN_SAVE))
        return;
    dl_advice *a = add(o, DL_ADV_PLATEAU, DL_ADV_WARNING);
    if (!a)
        return;
    double past_s = -1, per_epoch = -1;
    if (in->epoch_s) {
        past_s = 0;
        for (int i = stop; i < end; i++)
            past_s += isfinite(in->epoch_s[i]) ? in->epoch_s[i] : 0;
        per_epoch = mean_of(in->epoch_s, 0, end);
    }
    int len = snprintf(a->evidence, sizeof a->evidence,
                       "validation accuracy %.4f at epoch %d, %.4f at epoch %d: the %d epochs "
                       "after it moved the trend by %+.2f points",
                       acc[k], stop, acc[m - 1], end, end - stop, 100 * slope * (m - 1 - k));
    if (past_s >= 0 && len > 0 && (size_t)len < sizeof a->evidence)
        snprintf(a->evidence + len, sizeof a->evidence - (size_t)len,
                 "; %.1f s trained on the plateau", past_s);
    num(a, "stop_epoch", stop);
    num(a, "stop_val_acc", acc[k]);
    num(a, "last_epoch", end);
    num(a, "last_val_acc", acc[m - 1]);
    num(a, "tail_gain", slope * (m - 1 - k));
    if (past_s >= 0)
        num(a, "seconds_on_plateau", past_s);
    snprintf(a->remedy, sizeof a->remedy,
             "train %d epochs instead of %d (the same run up to there, within %.1f point of "
             "where it ended; a schedule that spans the epochs changes with them), or early "
             "stopping on val_acc",
             stop, planned, 100 * PLATEAU_TOL);
    snprintf(a->command, sizeof a->command, "--set epochs=%d", stop);
    if (per_epoch > 0)
        effect(a, per_epoch * (planned - stop),
               "%d of %d epochs: about %.1f s saved (%.0f%% of the run)", stop, planned,
               per_epoch * (planned - stop), 100.0 * (planned - stop) / planned);
}

/* Validation's share of the wall time, with the frequency that brings it
 * near VAL_SHARE_GOAL. */
static void rule_validation(const dl_advisor_input *in, out_list *o)
{
    if (!in->epoch_s || !in->val_s || in->nepochs < 1)
        return;
    double total = 0, val = 0;
    int nval = 0;
    for (int i = 0; i < in->nepochs; i++) {
        if (!isfinite(in->epoch_s[i]) || !isfinite(in->val_s[i]))
            continue;
        total += in->epoch_s[i];
        val += in->val_s[i];
        nval += in->val_s[i] > 0;
    }
    if (nval < 1 || total <= 0 || val / total < VAL_SHARE_WARN)
        return;
    double share = val / total, per_val = val / nval;
    double train_per_epoch = (total - val) / in->nepochs;
    int every = in->val_every > 1 ? in->val_every : 1;
    /* per_val / (k * train + per_val) <= goal */
    int k = (int)ceil(per_val * (1 - VAL_SHARE_GOAL) / (VAL_SHARE_GOAL * train_per_epoch));
    if (k <= every)
        k = every + 1;
    int planned = in->epochs_planned > 0 ? in->epochs_planned : in->nepochs;
    if (k > planned && planned > 1)
        k = planned;
    dl_advice *a = add(o, DL_ADV_VALIDATION, share >= 0.5 ? DL_ADV_CRITICAL : DL_ADV_WARNING);
    if (!a)
        return;
    snprintf(a->evidence, sizeof a->evidence,
             "validation took %.0f%% of the wall time (%.1f of %.1f s; %.2f s a validation "
             "against %.2f s of training an epoch)",
             100 * share, val, total, per_val, train_per_epoch);
    num(a, "share", share);
    num(a, "val_s", val);
    num(a, "wall_s", total);
    num(a, "val_s_each", per_val);
    num(a, "train_s_per_epoch", train_per_epoch);
    snprintf(a->remedy, sizeof a->remedy,
             "validate every %d epochs (the last epoch always validates), or on a subset of the "
             "validation set (data's val_limit)",
             k);
    snprintf(a->command, sizeof a->command, "--set val_every=%d", k);
    double vals_now = (double)planned / every, vals_new = ceil((double)planned / k);
    double saves = per_val * (vals_now - vals_new);
    if (saves > 0)
        effect(a, saves, "about %.1f s saved over %d epochs (%.0f of %.0f validations)", saves,
               planned, vals_now - vals_new, vals_now);
}

/* A learning rate far off, read from the step losses: too high when the
 * loss has not come down and jumps around by much more than it moved; too
 * low when it falls steadily but by only a few percent over many steps. */
static void rule_learning_rate(const dl_advisor_input *in, out_list *o)
{
    const double *l = in->all_step_loss ? in->all_step_loss : in->step_loss;
    int n = in->all_step_loss ? in->nall_steps : in->nsteps;
    if (!l || n < LR_MIN_STEPS || in->nonfinite)
        return;
    int q = n / 4;
    double first = mean_of(l, 0, q), last = mean_of(l, n - q, n);
    if (!(first > 0) || !isfinite(last))
        return;
    /* the noise: spread of the last quarter around its mean */
    double var = 0;
    for (int i = n - q; i < n; i++)
        var += (l[i] - last) * (l[i] - last);
    double sd = sqrt(var / (q > 1 ? q - 1 : 1));
    double drop = (first - last) / first;
    /* a steady fall: the middle halves lie between the quarters */
    double mid1 = mean_of(l, q, 2 * q), mid2 = mean_of(l, 2 * q, 3 * q);
    int steady = first > mid1 && mid1 > mid2 && mid2 > last;
    /* not coming down: the fall within what the noise of two quarter means allows */
    double within = fmax(LR_SLOW_DROP * first, 3 * sd * sqrt(2.0 / q));
    int high = first - last < within && sd > 0.15 * last;
    int low = !high && steady && drop > 0 && drop < LR_SLOW_DROP && sd < 0.5 * (first - last);
    if (!high && !low)
        return;
    dl_advice *a = add(o, DL_ADV_LEARNING_RATE, DL_ADV_WARNING);
    if (!a)
        return;
    char lr[48] = "";
    if (in->base_lr > 0)
        snprintf(lr, sizeof lr, " at learning rate %g", in->base_lr);
    snprintf(a->evidence, sizeof a->evidence,
             "over %d logged steps%s the loss went %.4f -> %.4f (%+.1f%%), spread %.4f in the "
             "last quarter: %s",
             n, lr, first, last, -100 * drop, sd,
             high ? "it is not coming down and jumps by more than it moved (too high)"
                  : "a steady but slow fall (too low)");
    num(a, "steps", n);
    num(a, "first_quarter_loss", first);
    num(a, "last_quarter_loss", last);
    num(a, "spread", sd);
    num(a, "too_high", high);
    if (in->base_lr > 0)
        num(a, "lr", in->base_lr);
    double f = high ? 0.1 : 10;
    snprintf(a->remedy, sizeof a->remedy,
             "try a learning rate about %gx%s; an LR range test measures it: dlbench advise "
             "SCRIPT --lr-range",
             f, in->base_lr > 0 ? "" : " the current one");
    if (in->base_lr > 0)
        snprintf(a->command, sizeof a->command, "--set lr=%.3g", in->base_lr * f);
}

/* Precision on the CPU: bf16 (or fp16) where the CPU has no arithmetic
 * for it is emulated and slower than fp32; fp32 where it has bf16 dot
 * products and the products dominate may go faster in bf16. */
static void rule_precision_cpu(const dl_advisor_input *in, out_list *o)
{
    int emulated = (in->precision == DL_PREC_BF16 && in->bf16_native == 0) ||
                   (in->precision == DL_PREC_F16 && in->f16_native == 0);
    if (emulated) {
        dl_advice *a = add(o, DL_ADV_PRECISION, DL_ADV_WARNING);
        if (!a)
            return;
        const char *p = in->precision == DL_PREC_BF16 ? "bf16" : "fp16";
        snprintf(a->evidence, sizeof a->evidence,
                 "%s is emulated on this CPU: about 0.9x the speed of fp32 (no %s arithmetic: "
                 "f32 kernels on rounded operands)",
                 p, in->precision == DL_PREC_BF16 ? "AVX-512 BF16" : "fp16");
        num(a, "native", 0);
        num(a, "expected_speed_vs_fp32", 0.9);
        snprintf(a->remedy, sizeof a->remedy,
                 "precision = \"fp32\": faster here, and exact; keep %s for a GPU or a CPU "
                 "with %s",
                 p, in->precision == DL_PREC_BF16 ? "AVX-512 BF16 or AMX" : "AVX-512 FP16");
        snprintf(a->command, sizeof a->command, "--set precision=fp32");
        effect(a, -1, "about 1.1x the samples per second");
        return;
    }
    if (in->precision != DL_PREC_F32 || in->bf16_native != 1 || in->product_share < 0.5)
        return;
    dl_advice *a = add(o, DL_ADV_PRECISION, DL_ADV_INFO);
    if (!a)
        return;
    snprintf(a->evidence, sizeof a->evidence,
             "training in fp32 on a CPU with AVX-512 BF16, %.0f%% of the step in the matrix "
             "products",
             100 * in->product_share);
    num(a, "native", 1);
    num(a, "product_share", in->product_share);
    snprintf(a->remedy, sizeof a->remedy,
             "precision = \"bf16\": bf16 dot products run the products faster; check the "
             "loss with dlbench advise before adopting it");
    snprintf(a->command, sizeof a->command, "--set precision=bf16");
}

static void rule_precision(const dl_advisor_input *in, out_list *o)
{
    if (!in->on_gpu) {
        rule_precision_cpu(in, o);
        return;
    }
    if (in->precision != DL_PREC_F32)
        return;
    dl_gpu_peak pk;
    if (!dl_cost_gpu_peak(in->gpu_name, &pk) || pk.bf16 <= 0 || pk.f32 <= 0)
        return;
    dl_advice *a = add(o, DL_ADV_PRECISION, DL_ADV_INFO);
    if (!a)
        return;
    snprintf(a->evidence, sizeof a->evidence,
             "training in fp32 on %s, which has tensor cores: %.0f TFLOP/s bf16 against %.0f "
             "TFLOP/s fp32",
             in->gpu_name, pk.bf16 * 1e-12, pk.f32 * 1e-12);
    num(a, "bf16_tflops", pk.bf16 * 1e-12);
    num(a, "fp32_tflops", pk.f32 * 1e-12);
    snprintf(a->remedy, sizeof a->remedy,
             "precision = \"bf16\": up to %.0fx the matrix throughput and half the activation "
             "memory; expect 1.5-3x faster steps when products dominate",
             pk.bf16 / pk.f32);
    snprintf(a->command, sizeof a->command, "--set precision=bf16");
}

static void rule_headroom(const dl_advisor_input *in, out_list *o)
{
    if (!in->on_gpu || in->gpu_mem_total_mb <= 0 || in->gpu_mem_used_mb < 0)
        return;
    double free_share = 1 - in->gpu_mem_used_mb / in->gpu_mem_total_mb;
    if (free_share < HEADROOM_FREE)
        return;
    dl_advice *a = add(o, DL_ADV_MEMORY_HEADROOM, DL_ADV_INFO);
    if (!a)
        return;
    snprintf(a->evidence, sizeof a->evidence, "GPU memory %.0f of %.0f MB used (%.0f%% free)",
             in->gpu_mem_used_mb, in->gpu_mem_total_mb, 100 * free_share);
    double fit = in->gpu_mem_used_mb > 0 ? in->gpu_mem_total_mb * 0.8 / in->gpu_mem_used_mb : 2;
    num(a, "mem_used_mb", in->gpu_mem_used_mb);
    num(a, "mem_total_mb", in->gpu_mem_total_mb);
    if (in->batch > 0 && fit >= 2)
        snprintf(a->command, sizeof a->command, "--set batch=%d", in->batch * 2);
    if (in->batch > 0)
        snprintf(a->remedy, sizeof a->remedy,
                 "a larger batch (now %d; about %.0fx fits) for better utilisation - scale the "
                 "learning rate with it",
                 in->batch, fit > 1 ? floor(fit) : 1);
    else
        snprintf(a->remedy, sizeof a->remedy, "a larger batch for better utilisation");
}

static int by_level(const void *x, const void *y)
{
    const dl_advice *a = x, *b = y;
    if (a->level != b->level)
        return (int)b->level - (int)a->level;
    return (int)a->kind - (int)b->kind;
}

int dl_advisor_run(const dl_advisor_input *in, dl_advice *out, int max)
{
    out_list o = {out, 0, max};
    rule_divergence(in, &o);
    rule_oom(in, &o);
    rule_input(in, &o);
    rule_launch(in, &o);
    rule_overfitting(in, &o);
    rule_precision(in, &o);
    rule_headroom(in, &o);
    rule_small_batch(in, &o);
    rule_validation(in, &o);
    rule_learning_rate(in, &o);
    rule_plateau(in, &o);
    qsort(out, (size_t)o.n, sizeof *out, by_level);
    return o.n;
}

static const char *level_names[] = {"info", "warning", "critical"};

cJSON *dl_advice_json(const dl_advice *a)
{
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    cJSON_AddStringToObject(j, "kind", dl_advice_name(a->kind));
    cJSON_AddStringToObject(j, "level", level_names[a->level]);
    cJSON_AddStringToObject(j, "evidence", a->evidence);
    cJSON *nums = cJSON_AddObjectToObject(j, "numbers");
    for (int i = 0; i < a->nnum; i++)
        if (isfinite(a->num[i].value))
            cJSON_AddNumberToObject(nums, a->num[i].key, a->num[i].value);
    cJSON_AddStringToObject(j, "remedy", a->remedy);
    cJSON *eff = cJSON_AddObjectToObject(j, "effect");
    cJSON_AddStringToObject(eff, "text", a->effect);
    cJSON_AddStringToObject(eff, "basis", a->effect_basis[0] ? a->effect_basis : "none");
    if (a->saves_s >= 0)
        cJSON_AddNumberToObject(eff, "saves_s", a->saves_s);
    if (a->command[0])
        cJSON_AddStringToObject(j, "command", a->command);
    else
        cJSON_AddNullToObject(j, "command");
    return j;
}
