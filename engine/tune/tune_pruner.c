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
#include <string.h>

#include "engine/base/error.h"
#include "engine/tune/tune_pruner.h"

static int cmp_double(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;
    return a < b ? -1 : a > b ? 1 : 0;
}

/* Index of the first report at or after step, or -1. */
static int report_at_or_after(const dl_tune_entry *t, long step)
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

/* The trial's best loss over all its reports. */
static double best_loss(const dl_tune_history *h, const dl_tune_entry *t)
{
    double best = INFINITY;
    for (int i = 0; i < t->nint; i++) {
        double l = dl_tune_history_loss(h->direction, t->values[i]);
        if (l < best)
            best = l;
    }
    return best;
}

static int prune_median(const dl_pruner_config *c, const dl_tune_history *h, const dl_tune_entry *t)
{
    long step = t->steps[t->nint - 1];
    if (step < c->warmup_steps)
        return 0;
    int complete = 0;
    for (int i = 0; i < h->ntrials; i++)
        complete += h->trials[i].state == DL_TRIAL_COMPLETE;
    if (complete < c->min_trials || complete == 0)
        return 0;
    double *v = malloc((size_t)complete * sizeof *v);
    if (!v)
        return dl_error(DL_ENOMEM, "median pruner: out of memory");
    int n = 0;
    for (int i = 0; i < h->ntrials; i++) {
        const dl_tune_entry *u = &h->trials[i];
        if (u->state != DL_TRIAL_COMPLETE)
            continue;
        int j = report_at_or_after(u, step);
        if (j >= 0 && u->steps[j] == step && !isnan(u->values[j]))
            v[n++] = dl_tune_history_loss(h->direction, u->values[j]);
    }
    if (n == 0) {
        free(v);
        return 0;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    free(v);
    return best_loss(h, t) > median;
}

static double rung_step(const dl_pruner_config *c, int k)
{
    return (double)c->min_resource *
           pow((double)c->reduction_factor, c->min_early_stopping_rate + k);
}

static int prune_asha(const dl_pruner_config *c, const dl_tune_history *h, const dl_tune_entry *t,
                      int *rungs)
{
    long step = t->steps[t->nint - 1];
    double *v = NULL;
    int rc = 0;
    while (rung_step(c, *rungs) <= (double)step) {
        double at = rung_step(c, *rungs);
        long at_step = (long)ceil(at);
        int j = report_at_or_after(t, at_step);
        double mine = dl_tune_history_loss(h->direction, t->values[j]);
        if (isinf(mine)) {
            rc = 1; /* NaN: diverged */
            break;
        }
        if (!v && !(v = malloc((size_t)h->ntrials * sizeof *v)))
            return dl_error(DL_ENOMEM, "ASHA pruner: out of memory");
        int n = 0;
        for (int i = 0; i < h->ntrials; i++) {
            const dl_tune_entry *u = &h->trials[i];
            int k = report_at_or_after(u, at_step);
            if (k >= 0)
                v[n++] = dl_tune_history_loss(h->direction, u->values[k]);
        }
        qsort(v, (size_t)n, sizeof *v, cmp_double);
        int keep = n / c->reduction_factor;
        if (keep < 1)
            keep = 1;
        if (mine > v[keep - 1]) {
            rc = 1;
            break;
        }
        (*rungs)++;
    }
    free(v);
    return rc;
}

int dl_tune_pruner_judge(const dl_pruner_config *c, const dl_tune_history *h, int trial, int *rungs)
{
    const dl_tune_entry *t = &h->trials[trial];
    if (t->nint == 0)
        return 0;
    switch (c->kind) {
    case DL_PRUNER_MEDIAN: return prune_median(c, h, t);
    case DL_PRUNER_ASHA: return prune_asha(c, h, t, rungs);
    default: return 0;
    }
}

dl_pruner_config dl_tune_pruner_defaults(int kind)
{
    dl_pruner_config c = {kind, 0, 5, 1, 4, 0};
    return c;
}

int dl_tune_pruner_parse(const char *name, dl_pruner_config *out)
{
    int kind = -1;
    if (!name)
        kind = -1;
    else if (strcmp(name, "none") == 0)
        kind = DL_PRUNER_NONE;
    else if (strcmp(name, "median") == 0)
        kind = DL_PRUNER_MEDIAN;
    else if (strcmp(name, "asha") == 0 || strcmp(name, "sha") == 0 ||
             strcmp(name, "successive_halving") == 0)
        kind = DL_PRUNER_ASHA;
    if (kind < 0)
        return dl_error(DL_EINVAL,
                        "pruner \"%s\": expected \"none\", \"median\" or \"asha\" "
                        "(\"successive_halving\")",
                        name ? name : "(null)");
    *out = dl_tune_pruner_defaults(kind);
    return DL_OK;
}
