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

void dl_trainer_probe_variants(dl_trainer *t, dl_probe_report *r)
{
    memset(r, 0, sizeof *r);
    static const double f[] = {1, 0.3, 3};
    for (int i = 0; i < 3; i++) {
        dl_probe_variant *v = &r->v[r->n++];
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
        dl_probe_variant *v = &r->v[r->n++];
        v->lr_factor = 1;
        v->threads = th;
        snprintf(v->label, sizeof v->label, "threads %d", th);
        snprintf(v->command, sizeof v->command, "DLBENCH_THREADS=%d", th);
    }
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
    int put = dl_trainer_snapshot_restore(t, snap);
    return back < 0 ? back : put;
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
    for (int i = 0; i < r->n && rc == DL_OK; i++)
        rc = probe_one(t, snap, steps, &r->v[i]);
    t->cb = saved;
    dl_trainer_snapshot_destroy(snap);
    return rc;
}
