/* probe.c - what-if probes between two steps: the same state, N steps a variant, the state put back */
#include "engine/train/probe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/train/snapshot.h"
#include "engine/train/trainer_internal.h"

/* The next variant of r: the baseline's learning rate and precision
 * until the caller changes them. */
static dl_probe_variant *add_variant(dl_probe_report *r)
{
    dl_probe_variant *v = &r->v[r->n++];
    v->lr_factor = 1;
    v->precision = -1;
    return v;
}

/* Validation every k epochs, projected from the validations so far: k
 * brings validation near a tenth of the wall time; the saving is the
 * validations it skips over the epochs left. */
static void project_val_every(dl_trainer *t, dl_probe_report *r)
{
    int every = t->cfg.val_every > 1 ? t->cfg.val_every : 1;
    int left = t->cfg.epochs - t->epoch;
    if (!t->val || t->hist.nval < 1 || t->hist.epochs < 1 || left < 2 || r->n >= DL_PROBE_MAX)
        return;
    double per_val = t->hist.val_s / t->hist.nval, train = t->hist.train_s / t->hist.epochs;
    int k = train > 0 ? (int)ceil(per_val * 0.9 / (0.1 * train)) : 2 * every;
    if (k <= every)
        k = every + 1;
    if (k > t->cfg.epochs)
        k = t->cfg.epochs;
    if (k <= every)
        return;
    /* validations in the epochs left, now and with k (the last epoch always validates) */
    int now = 0, with_k = 0;
    for (int e = t->epoch; e < t->cfg.epochs; e++) {
        int last = e + 1 >= t->cfg.epochs;
        now += (e + 1) % every == 0 || last;
        with_k += (e + 1) % k == 0 || last;
    }
    dl_probe_variant *v = add_variant(r);
    v->projected = 1;
    v->saves_s = per_val * (now - with_k);
    snprintf(v->label, sizeof v->label, "validate every %d", k);
    snprintf(v->command, sizeof v->command, "--set val_every=%d", k);
    snprintf(v->note, sizeof v->note,
             "%.3f s a validation against %.3f s of training an epoch: %d of %d validations "
             "left skipped",
             per_val, train, now - with_k, now);
}

/* Early stopping, where the curve shows it: the validation loss has not
 * improved for PATIENCE validations, so a patience-3 callback would stop
 * now; the saving is the epochs left. */
#define PATIENCE 3
static void project_early_stop(dl_trainer *t, dl_probe_report *r)
{
    int left = t->cfg.epochs - t->epoch;
    if (!t->val || t->hist.nval < PATIENCE + 1 || t->hist.vals_since_best < PATIENCE || left < 1 ||
        r->n >= DL_PROBE_MAX)
        return;
    double per_epoch = (t->hist.train_s + t->hist.val_s) / t->hist.epochs;
    dl_probe_variant *v = add_variant(r);
    v->projected = 1;
    v->saves_s = per_epoch * left;
    snprintf(v->label, sizeof v->label, "early stopping %d", PATIENCE);
    snprintf(v->command, sizeof v->command, "--set early_stopping=%d", PATIENCE);
    snprintf(v->note, sizeof v->note,
             "validation loss best at epoch %d (%.4f), not improved for %d validations: it "
             "would stop now, %d epochs left",
             t->hist.best_at + 1, t->hist.best_val, t->hist.vals_since_best, left);
}

void dl_trainer_probe_variants(dl_trainer *t, dl_probe_report *r)
{
    memset(r, 0, sizeof *r);
    static const double f[] = {1, 0.3, 3};
    for (int i = 0; i < 3; i++) {
        dl_probe_variant *v = add_variant(r);
        v->lr_factor = f[i];
        if (f[i] == 1) {
            snprintf(v->label, sizeof v->label, "baseline");
        } else {
            snprintf(v->label, sizeof v->label, "lr x%g", f[i]);
            snprintf(v->command, sizeof v->command, "--set lr=%.3g", (double)t->base_lr * f[i]);
        }
    }
    if (t->be->ops->device == DL_DEVICE_CPU && t->devices && t->devices->cpu_create) {
        int th = t->be->threads > 1 ? 1 : 2;
        dl_probe_variant *v = add_variant(r);
        v->threads = th;
        snprintf(v->label, sizeof v->label, "threads %d", th);
        snprintf(v->command, sizeof v->command, "DLBENCH_THREADS=%d", th);
    }
    /* the other precision the device has: bf16 only where it is native */
    int to = -1;
    if (t->cfg.precision == DL_PREC_F32 && (t->be->lowp & DL_LOWP_KNOWN) &&
        (t->be->lowp & DL_LOWP_BF16))
        to = DL_PREC_BF16;
    else if (t->cfg.precision != DL_PREC_F32)
        to = DL_PREC_F32;
    if (to >= 0) {
        dl_probe_variant *v = add_variant(r);
        v->precision = to;
        snprintf(v->label, sizeof v->label, "%s", dl_precision_name((dl_precision)to));
        snprintf(v->command, sizeof v->command, "--set precision=%s",
                 dl_precision_name((dl_precision)to));
    }
    project_val_every(t, r);
    project_early_stop(t, r);
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* Up to `steps` steps, timed one by one; the median step time and the
 * mean loss of the last half into v. */
static int leg(dl_trainer *t, int steps, dl_probe_variant *v)
{
    double sum, correct, *dt = calloc((size_t)steps, sizeof *dt),
                         *loss = calloc((size_t)steps, sizeof *loss);
    if (!dt || !loss) {
        free(dt);
        free(loss);
        return dl_error(DL_ENOMEM, "out of memory");
    }
    int rc = dl_trainer_take_stats(t, &sum, &correct, 1); /* the open window is not this leg's */
    t->rep_samples = t->rep_steps = 0;
    int n = 0;
    while (rc == DL_OK && n < steps && t->epoch < t->cfg.epochs &&
           !(t->cfg.max_steps > 0 && t->step >= t->cfg.max_steps)) {
        double t0 = dl_clock_mono_s();
        int s = dl_trainer_step(t);
        if (s < 0) {
            rc = s;
            break;
        }
        if (s == 1) {
            rc = dl_trainer_end_epoch(t);
            continue;
        }
        rc = dl_trainer_take_stats(t, &sum, &correct, 1);
        dt[n] = dl_clock_mono_s() - t0;
        loss[n++] =
            sum / (t->rep_samples > 0 ? (double)t->rep_samples : 1) / dl_trainer_per_sample(t);
        t->rep_samples = t->rep_steps = 0;
    }
    v->steps = n;
    if (rc == DL_OK && n > 0) {
        double l = 0;
        for (int i = n / 2; i < n; i++)
            l += loss[i];
        v->loss = l / (n - n / 2);
        qsort(dt, (size_t)n, sizeof *dt, cmp_double);
        v->step_s = dt[n / 2];
    }
    free(dt);
    free(loss);
    return rc;
}

/* The training in precision p from the next step: the model computes in
 * it, its workspaces planned for it, the low-precision copy refreshed.
 * fp16's loss scale starts where the configuration says. */
static int set_precision(dl_trainer *t, dl_precision p)
{
    t->cfg.precision = p;
    dl_model_set_precision(t->m, p);
    t->loss_scale = p == DL_PREC_F16 ? t->cfg.loss_scale : 1.0f;
    t->lowp_dirty = 1;
    return dl_model_plan(t->m, t->cfg.batch);
}

/* One variant from snap's state, which is put back afterwards (and the
 * training back on home). Returns the restore's outcome; the variant's own
 * failure goes into v. */
static int probe_one(dl_trainer *t, const dl_trainer_snapshot *snap, int steps, dl_probe_variant *v)
{
    dl_backend *home = t->be, *own = NULL;
    float lr = t->base_lr;
    int rc = DL_OK;
    if (v->threads > 0) {
        own = t->devices->cpu_create(v->threads);
        rc = own ? dl_trainer_switch_device(t, own) : DL_ENODEV;
    }
    dl_precision prec = t->cfg.precision;
    if (rc == DL_OK && v->precision >= 0 && (dl_precision)v->precision != prec)
        rc = set_precision(t, (dl_precision)v->precision);
    if (rc == DL_OK) {
        dl_trainer_set_base_lr(t, (float)(lr * v->lr_factor));
        rc = leg(t, steps, v);
    }
    if (rc < 0) {
        v->failed = 1;
        snprintf(v->why, sizeof v->why, "%s", dl_error_message());
    }
    int back = t->be != home ? dl_trainer_switch_device(t, home) : DL_OK;
    if (own && t->be != own)
        t->devices->cpu_destroy(own);
    dl_trainer_set_base_lr(t, lr);
    int prec_back = t->cfg.precision != prec ? set_precision(t, prec) : DL_OK;
    int put = dl_trainer_snapshot_restore(t, snap);
    return back < 0 ? back : prec_back < 0 ? prec_back : put;
}

int dl_trainer_probe(dl_trainer *t, int steps, dl_probe_report *r)
{
    if (steps < 1)
        return dl_error(DL_EINVAL, "a probe needs at least 1 step, not %d", steps);
    if (t->dp)
        return dl_error(DL_EUNSUPPORTED, "probes run alone, not in a job of %d ranks", t->dp->size);
    r->first_step = t->step;
    dl_trainer_snapshot *snap = NULL;
    DL_TRY(dl_trainer_snapshot_take(t, &snap));
    dl_callbacks saved = t->cb;
    memset(&t->cb, 0, sizeof t->cb);
    int rc = DL_OK;
    float scale = t->loss_scale;
    int clean = t->clean_steps;
    dl_trainer_hist hist = t->hist; /* a leg's epoch end adds to it */
    for (int i = 0; i < r->n && rc == DL_OK; i++)
        if (!r->v[i].projected) {
            rc = probe_one(t, snap, steps, &r->v[i]);
            t->hist = hist;
        }
    t->loss_scale = scale;
    t->clean_steps = clean;
    t->cb = saved;
    dl_trainer_snapshot_destroy(snap);
    return rc;
}
