/* tune_pruner.c - median and asynchronous successive-halving (ASHA) pruners for studies
 *
 * Median: from warmup_steps on, and once min_trials trials are complete, a
 * trial stops when its best value so far is worse than the median of the
 * complete trials' values at the same step.
 *
 * ASHA (Li et al., 2018): rung k sits at step min_resource *
 * eta^(min_early_stopping_rate + k). A trial's value at a rung is its
 * first report at or after that step. When a trial reaches a rung it goes
 * on only if its value is among the best max(1, floor(n / eta)) of the n
 * trials (in any state) that reached that rung so far; otherwise it stops.
 * A rung passed is not judged again.
 */
#include <math.h>
#include <stdlib.h>

#include "engine/base/error.h"
#include "engine/tune/tune_impl.h"

static int cmp_double(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;
    return a < b ? -1 : a > b ? 1 : 0;
}

/* Index of the first report at or after step, or -1. */
static int report_at_or_after(const dl_trial *t, long step)
{
    int lo = 0, hi = t->nint;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (t->steps[mid] < step)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < t->nint ? lo : -1;
}

static int prune_median(dl_study *s, dl_trial *t)
{
    long step = t->steps[t->nint - 1];
    if (step < s->pruner.warmup_steps)
        return 0;
    int complete = 0;
    for (int i = 0; i < s->ntrials; i++)
        complete += s->trials[i]->state == DL_TRIAL_COMPLETE;
    if (complete < s->pruner.min_trials || complete == 0)
        return 0;
    double *v = malloc((size_t)complete * sizeof *v);
    if (!v)
        return dl_error(DL_ENOMEM, "median pruner: out of memory");
    int n = 0;
    for (int i = 0; i < s->ntrials; i++) {
        const dl_trial *u = s->trials[i];
        if (u->state != DL_TRIAL_COMPLETE)
            continue;
        int j = report_at_or_after(u, step);
        if (j >= 0 && u->steps[j] == step && !isnan(u->ivals[j]))
            v[n++] = tune_loss(s, u->ivals[j]);
    }
    if (n == 0) {
        free(v);
        return 0;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    free(v);
    double best = INFINITY;
    for (int i = 0; i < t->nint; i++) {
        double l = tune_loss(s, t->ivals[i]);
        if (l < best)
            best = l;
    }
    return best > median;
}

static double rung_step(const dl_pruner_config *c, int k)
{
    return (double)c->min_resource * pow((double)c->reduction_factor, c->min_early_stopping_rate + k);
}

static int prune_asha(dl_study *s, dl_trial *t)
{
    long step = t->steps[t->nint - 1];
    double *v = NULL;
    int rc = 0;
    while (rung_step(&s->pruner, t->rung_checked) <= (double)step) {
        double at = rung_step(&s->pruner, t->rung_checked);
        long at_step = (long)ceil(at);
        int j = report_at_or_after(t, at_step);
        double mine = tune_loss(s, t->ivals[j]);
        if (isinf(mine)) {
            rc = 1; /* NaN: diverged */
            break;
        }
        if (!v && !(v = malloc((size_t)s->ntrials * sizeof *v)))
            return dl_error(DL_ENOMEM, "ASHA pruner: out of memory");
        int n = 0;
        for (int i = 0; i < s->ntrials; i++) {
            const dl_trial *u = s->trials[i];
            int k = report_at_or_after(u, at_step);
            if (k >= 0)
                v[n++] = tune_loss(s, u->ivals[k]);
        }
        qsort(v, (size_t)n, sizeof *v, cmp_double);
        int keep = n / s->pruner.reduction_factor;
        if (keep < 1)
            keep = 1;
        if (mine > v[keep - 1]) {
            rc = 1;
            break;
        }
        t->rung_checked++;
    }
    free(v);
    return rc;
}

int tune_prune(dl_study *s, dl_trial *t)
{
    if (t->nint == 0)
        return 0;
    switch (s->pruner.kind) {
    case DL_PRUNER_MEDIAN: return prune_median(s, t);
    case DL_PRUNER_ASHA: return prune_asha(s, t);
    default: return 0;
    }
}
