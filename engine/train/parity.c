/* parity.c - the parity check: the same steps from the same state on two backends, compared */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/train/parity.h"
#include "engine/train/snapshot.h"
#include "engine/train/trainer_internal.h"

/* One leg of a parity check: up to `steps` steps, each step's mean loss
 * into loss[]; *done is the number of steps run. Epoch ends are closed as
 * in dl_trainer_run (validation included) with the callbacks off. */
static int parity_leg(dl_trainer *t, int steps, double *loss, int *done)
{
    double sum, correct;
    *done = 0;
    DL_TRY(dl_trainer_take_stats(t, &sum, &correct, 1)); /* the open window is not this leg's */
    t->rep_samples = t->rep_steps = 0;
    while (*done < steps && t->epoch < t->cfg.epochs &&
           !(t->cfg.max_steps > 0 && t->step >= t->cfg.max_steps)) {
        int rc = dl_trainer_step(t);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            DL_TRY(dl_trainer_end_epoch(t));
            continue;
        }
        DL_TRY(dl_trainer_take_stats(t, &sum, &correct, 1));
        double rows = t->rep_samples > 0 ? (double)t->rep_samples : 1;
        loss[(*done)++] = sum / rows / dl_trainer_per_sample(t);
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

/* Leg A on the trainer's backend, the state put back, the move to other,
 * leg B: each leg's losses into r, the parameters after it into pa, pb. */
static int run_legs(dl_trainer *t, dl_backend *other, int steps, const dl_trainer_snapshot *snap,
                    dl_parity_report *r, float *pa, float *pb, int *na, int *nb)
{
    double t0 = dl_clock_mono_s();
    int rc = parity_leg(t, steps, r->loss_a, na);
    r->seconds_a = dl_clock_mono_s() - t0;
    DL_TRY(rc);
    DL_TRY(read_params(t, pa));
    DL_TRY(dl_trainer_snapshot_restore(t, snap));
    t0 = dl_clock_mono_s();
    rc = dl_trainer_switch_device(t, other);
    r->switch_s = dl_clock_mono_s() - t0;
    if (rc < 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", dl_error_message());
        return dl_error(rc, "cannot move the training to %s: %s", other->ops->name, msg);
    }
    t0 = dl_clock_mono_s();
    rc = parity_leg(t, steps, r->loss_b, nb);
    r->seconds_b = dl_clock_mono_s() - t0;
    DL_TRY(rc);
    return read_params(t, pb);
}

/* Back on home with the state of snap, whatever rc (the legs' outcome)
 * was; returns the outcome with one message for both failures. */
static int go_home(dl_trainer *t, dl_backend *home, const dl_trainer_snapshot *snap,
                   dl_parity_report *r, int rc)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s", dl_error_message());
    double t0 = dl_clock_mono_s();
    int back = dl_trainer_switch_device(t, home);
    r->switch_s += dl_clock_mono_s() - t0;
    /* the state goes back even where the training stays (B, when A could
     * not take it back) */
    int put = dl_trainer_snapshot_restore(t, snap);
    if (back == DL_OK)
        back = put;
    if (rc == DL_OK && back < 0)
        return back; /* its own message */
    if (rc < 0 && back < 0)
        dl_error(rc, "%s; moving back to %s failed too: %s", msg, home->ops->name,
                 dl_error_message());
    else if (rc < 0)
        dl_error(rc, "%s", msg);
    return rc;
}

/* The largest differences of both legs' losses and parameters. */
static void score(dl_trainer *t, dl_parity_report *r, const float *pa, const float *pb)
{
    for (int i = 0; i < r->steps; i++) {
        double d = rel_diff(r->loss_a[i], r->loss_b[i], r->loss_a[i]);
        if (d > r->max_loss_rel || (i == 0 && !r->worst_loss_step)) {
            r->max_loss_rel = d;
            r->worst_loss_step = i + 1;
        }
    }
    compare_params(t, pa, pb, r);
}

/* Both legs with the callbacks off, then home again; the legs' step
 * counts must agree. */
static int check(dl_trainer *t, dl_backend *other, int steps, dl_parity_report *r, float *pa,
                 float *pb)
{
    dl_backend *home = t->be;
    dl_trainer_snapshot *snap = NULL;
    DL_TRY(dl_trainer_snapshot_take(t, &snap));
    dl_callbacks saved = t->cb;
    memset(&t->cb, 0, sizeof t->cb);
    int na = 0, nb = 0;
    int rc = run_legs(t, other, steps, snap, r, pa, pb, &na, &nb);
    rc = go_home(t, home, snap, r, rc);
    t->cb = saved;
    dl_trainer_snapshot_destroy(snap);
    DL_TRY(rc);
    r->steps = na < nb ? na : nb;
    if (na != nb)
        return dl_error(DL_ERR, "parity check: %d steps ran on %s but %d on %s", na,
                        home->ops->name, nb, other->ops->name);
    score(t, r, pa, pb);
    return DL_OK;
}

int dl_trainer_check_parity(dl_trainer *t, dl_backend *other, int steps, dl_parity_report *r)
{
    memset(r, 0, sizeof *r);
    if (steps < 1)
        return dl_error(DL_EINVAL, "a parity check needs at least 1 step, not %d", steps);
    if (t->dp)
        return dl_error(DL_EUNSUPPORTED, "a parity check runs alone, not in a job of %d ranks",
                        t->dp->size);
    r->first_step = t->step;
    r->same_backend = other == t->be;
    snprintf(r->device_a, sizeof r->device_a, "%s", t->be->description);
    snprintf(r->device_b, sizeof r->device_b, "%s", other->description);
    size_t n = dl_model_param_count(t->m);
    r->loss_a = calloc((size_t)steps, sizeof *r->loss_a);
    r->loss_b = calloc((size_t)steps, sizeof *r->loss_b);
    float *pa = malloc(n * sizeof *pa + 1), *pb = malloc(n * sizeof *pb + 1);
    int rc = !r->loss_a || !r->loss_b || !pa || !pb
                 ? dl_error(DL_ENOMEM, "no host memory for a parity check of %zu parameters", n)
                 : check(t, other, steps, r, pa, pb);
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
