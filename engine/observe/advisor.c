/* advisor.c - the bottleneck rules: each names what it saw, with the numbers, and the remedy */
#include "engine/observe/advisor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/observe/cost.h"

/* Thresholds, in one place. */
#define INPUT_SHARE_WARN 0.20 /* data wait share of step time */
#define INPUT_SHARE_CRIT 0.50
#define GPU_IDLE_PCT 50.0      /* utilisation under which the GPU waits */
#define LAUNCH_MEAN_OP_MS 0.05 /* layer passes shorter than this are launch-dominated */
#define LAUNCH_MIN_OPS 16      /* ... when a step has at least this many */
#define LAUNCH_MAX_DATA 0.10
#define HEADROOM_FREE 0.50  /* share of GPU memory unused */
#define EXPLODE_FACTOR 10.0 /* recent loss over the lowest seen */

static const char *names[DL_ADV_NKINDS] = {"divergence",     "out of memory", "input-bound",
                                           "launch-bound",   "overfitting",   "precision",
                                           "memory headroom"};

const char *dl_advice_name(dl_advice_kind k)
{
    return k >= 0 && k < DL_ADV_NKINDS ? names[k] : "?";
}

void dl_advisor_input_init(dl_advisor_input *in)
{
    memset(in, 0, sizeof *in);
    in->step_ms = in->data_wait_share = in->leaf_ops_per_step = in->mean_op_ms = -1;
    in->workers = in->queue_fill = in->queue_size = -1;
    in->gpu_util_pct = in->gpu_mem_used_mb = in->gpu_mem_total_mb = -1;
    in->lr = -1;
    in->batch = 0;
    in->accumulate = 1;
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
    if (in->lr > 0)
        snprintf(try_lr, sizeof try_lr, " (try %g)", in->lr / 10);
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
    if (in->workers == 0)
        snprintf(a->remedy, sizeof a->remedy,
                 "the batches are prepared on the training thread: set workers = 2 or more "
                 "(and prefetch = 4); keep the data in memory, store it as u8");
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
    snprintf(a->remedy, sizeof a->remedy,
             "the GPU waits for the CPU to launch work: a larger batch (now %d) so each op "
             "does more, fewer and wider layers, fused ops / CUDA graphs",
             in->batch);
}

static void rule_overfitting(const dl_advisor_input *in, out_list *o)
{
    int need = in->overfit_epochs > 0 ? in->overfit_epochs : 3;
    if (!in->val_loss || !in->train_loss || in->nepochs < need + 1)
        return;
    int end = in->nepochs - 1, start = end - need;
    for (int i = start + 1; i <= end; i++)
        if (!(in->val_loss[i] > in->val_loss[i - 1]))
            return;
    if (!(in->train_loss[end] < in->train_loss[start]))
        return;
    /* the best epoch: lowest validation loss so far */
    int best = 0;
    for (int i = 1; i < in->nepochs; i++)
        if (in->val_loss[i] < in->val_loss[best])
            best = i;
    dl_advice *a = add(o, DL_ADV_OVERFITTING, DL_ADV_WARNING);
    if (!a)
        return;
    snprintf(a->evidence, sizeof a->evidence,
             "validation loss rose %d epochs running (%.4f -> %.4f, epochs %d-%d) while training "
             "loss fell (%.4f -> %.4f); best validation loss at epoch %d",
             need, in->val_loss[start], in->val_loss[end], start + 1, end + 1,
             in->train_loss[start], in->train_loss[end], best + 1);
    snprintf(a->remedy, sizeof a->remedy,
             "early stopping (monitor val_loss, patience %d) and keep the best checkpoint; more "
             "regularisation: dropout, weight decay, augmentation, or more data",
             need);
}

static void rule_precision(const dl_advisor_input *in, out_list *o)
{
    if (!in->on_gpu || in->precision != DL_PREC_F32)
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
    snprintf(a->remedy, sizeof a->remedy,
             "precision = \"bf16\": up to %.0fx the matrix throughput and half the activation "
             "memory; expect 1.5-3x faster steps when products dominate",
             pk.bf16 / pk.f32);
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
    qsort(out, (size_t)o.n, sizeof *out, by_level);
    return o.n;
}
