/* cmd_advise.c - `dlbench advise`: measured what-if probes, each candidate change trained from the same state */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/core/backend.h"
#include "engine/train/trainer.h"
#include "scripting/script.h"
#include "scripting/session.h"
#include "tui/cmd/commands.h"
#include "tui/cmd/exit.h"
#include "tui/cmd/opts.h"

#define MAX_PROBES 24
#define MAX_SETS 4
#define MAX_STEPS 4096

/* This command's row of the table (its options and help), set on entry. */
static const dl_command *this_cmd;

typedef struct advise_args {
    const char *script, *device;
    long steps, warmup;
    double budget, price;
    int lr_range;
    char **ovs, **sets; /* pointers into argv (the arrays owned) */
    int nov, nset;
} advise_args;

/* One candidate: the --set values it adds, and what it measured. */
typedef struct probe {
    char label[48];
    char set[MAX_SETS][48];
    int nset;
    int val_every; /* > 0: projected from the baseline's parts, not trained */
    /* results */
    int ran, failed;
    char why[160];
    double step_s, samples_per_s, loss, proj_s;
    long rows_per_step, steps;
} probe;

/* Step times and losses of one probe, from the trainer's on_step. */
typedef struct recorder {
    double t[MAX_STEPS], loss[MAX_STEPS];
    int n;
} recorder;

static int on_step(void *user, dl_trainer *t, const dl_step_info *i)
{
    recorder *r = user;
    (void)t;
    if (r->n < MAX_STEPS) {
        r->t[r->n] = dl_clock_mono_s();
        r->loss[r->n++] = i->loss;
    }
    return 0;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* --- arguments ----------------------------------------------------------------- */

static int bad_usage(const char *what, const char *val)
{
    fprintf(stderr, "dlbench advise: %s, got '%s'\n", what, val);
    return DL_EXIT_USAGE;
}

static int parse_num(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (!*s || *end || errno || !(x >= lo) || !(x <= hi))
        return 0;
    *out = x;
    return 1;
}

static int take_option(advise_args *a, const dl_opt *o, const char *val)
{
    double x;
    switch (o->id) {
    case DL_OPT_HELP: dl_command_usage(this_cmd, stdout); return DL_EXIT_OK;
    case DL_OPT_LR_RANGE: a->lr_range = 1; return -1;
    case DL_OPT_STEPS:
        if (!parse_num(val, 2, MAX_STEPS / 2, &x) || x != floor(x))
            return bad_usage("--steps expects an integer from 2 to 2048", val);
        a->steps = (long)x;
        return -1;
    case DL_OPT_WARMUP:
        if (!parse_num(val, 0, 1000, &x) || x != floor(x))
            return bad_usage("--warmup expects an integer from 0 to 1000", val);
        a->warmup = (long)x;
        return -1;
    case DL_OPT_BUDGET:
        if (!parse_num(val, 1, 1e6, &a->budget))
            return bad_usage("--budget expects seconds from 1 to 1000000", val);
        return -1;
    case DL_OPT_DEVICE:
        if (strcmp(val, "cpu") && strcmp(val, "cuda") && strcmp(val, "auto"))
            return bad_usage("--device must be cpu, cuda or auto", val);
        a->device = val;
        return -1;
    case DL_OPT_PRICE:
        if (dl_price_parse(val, &a->price) < 0)
            return bad_usage("--price-per-hour expects a number >= 0", val);
        return -1;
    case DL_OPT_SET:
        if (dl_session_set_check(val) < 0) {
            fprintf(stderr, "dlbench advise: %s\n", dl_error_message());
            return DL_EXIT_USAGE;
        }
        a->sets[a->nset++] = (char *)val;
        return -1;
    default: return -1;
    }
}

/* -1 to go on, else the exit status. */
static int parse_args(advise_args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->steps = 30;
    a->warmup = 3;
    a->budget = 120;
    a->ovs = calloc((size_t)argc + 1, sizeof *a->ovs);
    a->sets = calloc((size_t)argc + 1, sizeof *a->sets);
    if (!a->ovs || !a->sets)
        return DL_EXIT_FAILED;
    if (dl_price_parse(NULL, &a->price) < 0) {
        fprintf(stderr, "dlbench advise: DLBENCH_PRICE_PER_HOUR must be a number >= 0\n");
        return DL_EXIT_USAGE;
    }
    dl_opts p;
    dl_command_opts(&p, this_cmd, argc, argv);
    int id, status;
    while ((id = dl_opts_next(&p)) != DL_OPTS_END) {
        if (id == DL_OPTS_ERROR)
            return DL_EXIT_USAGE;
        if (id != DL_OPTS_ARG) {
            if ((status = take_option(a, p.opt, p.value)) >= 0)
                return status;
        } else if (strchr(p.value, '=')) {
            a->ovs[a->nov++] = (char *)p.value;
        } else if (!a->script) {
            a->script = p.value;
        } else {
            return bad_usage("unexpected argument (overrides are NAME=VALUE)", p.value);
        }
    }
    if (!a->script) {
        dl_command_usage(this_cmd, stderr);
        return DL_EXIT_USAGE;
    }
    return -1;
}

/* --- probing ------------------------------------------------------------------- */

/* What the baseline told about the experiment, for the candidates and the
 * projections. */
typedef struct baseline {
    int epochs, batch, accumulate, val_every, workers, is_hdf5, adaptive, lowp;
    dl_precision precision;
    double lr, val_s; /* one validation's wall time (0: none) */
    long train_count;
} baseline;

/* The session options of a probe: the command's overrides and sets, then
 * the probe's own sets (which win, coming last). */
static int probe_options(const advise_args *a, const probe *p, long steps, dl_session_options *o,
                         char **sets)
{
    memset(o, 0, sizeof *o);
    o->script = a->script;
    o->overrides = a->ovs;
    o->noverrides = a->nov;
    o->device = a->device;
    o->seed = -1;
    o->profile_steps = steps;
    int n = 0;
    for (int i = 0; i < a->nset; i++)
        sets[n++] = a->sets[i];
    for (int i = 0; i < p->nset; i++)
        sets[n++] = (char *)p->set[i];
    o->sets = sets;
    o->nsets = n;
    return n;
}

/* The baseline's figures from its prepared session. */
static void read_baseline(dl_session *s, baseline *b)
{
    const dl_experiment *e = dl_session_experiment(s);
    b->epochs = e->cfg.epochs;
    b->batch = e->cfg.batch;
    b->accumulate = e->cfg.accumulate;
    b->val_every = e->cfg.val_every > 1 ? e->cfg.val_every : 1;
    b->precision = e->cfg.precision;
    b->lr = e->optim.lr;
    b->adaptive = e->optim.kind != DL_OPT_SGD;
    b->workers = e->data.workers;
    b->is_hdf5 = e->data.kind == DL_DATA_HDF5;
    b->lowp = dl_trainer_backend(dl_session_trainer(s))->lowp;
}

/* Median step time after the warm-up and the mean loss of the last
 * quarter of the probe's steps into p. */
static void score(const recorder *r, long warmup, probe *p)
{
    double dt[MAX_STEPS];
    int n = 0;
    for (int i = (int)warmup + 1; i < r->n; i++)
        dt[n++] = r->t[i] - r->t[i - 1];
    if (n == 0) {
        p->failed = 1;
        snprintf(p->why, sizeof p->why, "too few steps ran (%d)", r->n);
        return;
    }
    qsort(dt, (size_t)n, sizeof *dt, cmp_double);
    p->step_s = dt[n / 2];
    p->samples_per_s = (double)p->rows_per_step / p->step_s;
    int q = r->n / 4 > 0 ? r->n / 4 : 1;
    double sum = 0;
    for (int i = r->n - q; i < r->n; i++)
        sum += r->loss[i];
    p->loss = sum / q;
}

/* Trains one probe from the script's initial state (same seed, same
 * data order): `steps` steps after the warm-up. With b NULL this is the
 * baseline: b_out gets the experiment's figures and one validation's
 * time. Returns DL_OK or the preparation's error (in p->why). */
static int run_probe(const advise_args *a, probe *p, long steps, baseline *b_out)
{
    dl_session_options o;
    char *sets[64];
    probe_options(a, p, a->warmup + steps, &o, sets);
    dl_session *s = NULL;
    static recorder rec;
    memset(&rec, 0, sizeof rec);
    int rc = dl_session_prepare(&s, &o);
    if (rc == DL_OK) {
        dl_trainer *t = dl_session_trainer(s);
        const dl_experiment *e = dl_session_experiment(s);
        p->rows_per_step = (long)e->cfg.batch * e->cfg.accumulate;
        p->steps = dl_session_steps_per_epoch(s) * e->cfg.epochs;
        dl_callbacks cb = {&rec, on_step, NULL, NULL, NULL};
        dl_trainer_set_callbacks(t, &cb);
        rc = dl_trainer_run(t);
        if (rc == DL_OK && b_out) {
            read_baseline(s, b_out);
            b_out->train_count = (long)(dl_session_steps_per_epoch(s) * p->rows_per_step);
            dl_source *val = dl_session_val_source(s);
            double l, acc, t0 = dl_clock_mono_s();
            if (val && dl_trainer_evaluate(t, val, &l, &acc) == DL_OK)
                b_out->val_s = dl_clock_mono_s() - t0;
        }
    }
    p->ran = 1;
    if (rc < 0) {
        p->failed = 1;
        snprintf(p->why, sizeof p->why, "%s", dl_error_message());
    } else {
        score(&rec, a->warmup, p);
    }
    dl_session_destroy(s);
    return rc;
}

static probe *add_probe(probe *ps, int *n, const char *label)
{
    if (*n >= MAX_PROBES)
        return NULL;
    probe *p = &ps[(*n)++];
    memset(p, 0, sizeof *p);
    snprintf(p->label, sizeof p->label, "%s", label);
    return p;
}

static void add_set(probe *p, const char *fmt, double v)
{
    if (p && p->nset < MAX_SETS)
        snprintf(p->set[p->nset++], sizeof p->set[0], fmt, v);
}

/* Batch x2 and x4 with the learning rate scaled (linearly for SGD, by the
 * square root for adaptive optimizers); x2 with accumulation halved when
 * the effective batch can stay. */
static void batch_candidates(const baseline *b, probe *ps, int *n)
{
    for (int f = 2; f <= 4; f *= 2) {
        if ((long)b->batch * f * 4 > b->train_count)
            break;
        char label[48];
        double lr = b->lr * (b->adaptive ? sqrt((double)f) : f);
        snprintf(label, sizeof label, "batch x%d, lr x%.3g", f, lr / b->lr);
        probe *p = add_probe(ps, n, label);
        add_set(p, "batch=%.0f", (double)b->batch * f);
        add_set(p, "lr=%.3g", lr);
    }
    if (b->accumulate >= 2) {
        probe *p = add_probe(ps, n, "batch x2, accumulate /2");
        add_set(p, "batch=%.0f", (double)b->batch * 2);
        add_set(p, "accumulate=%.0f", (double)(b->accumulate / 2));
    }
}

/* The candidates for this experiment on this device. */
static int candidates(const advise_args *a, const baseline *b, probe *ps)
{
    int n = 0;
    static const struct {
        dl_precision p;
        int bit;
        const char *name;
    } precs[] = {{DL_PREC_BF16, DL_LOWP_BF16, "bf16"}, {DL_PREC_F16, DL_LOWP_F16, "fp16"}};
    for (size_t i = 0; i < 2; i++)
        if (b->precision != precs[i].p && (b->lowp & precs[i].bit)) {
            char label[48];
            snprintf(label, sizeof label, "precision %s", precs[i].name);
            probe *p = add_probe(ps, &n, label);
            if (p)
                snprintf(p->set[p->nset++], sizeof p->set[0], "precision=%s", precs[i].name);
        }
    if (b->precision != DL_PREC_F32) {
        probe *p = add_probe(ps, &n, "precision fp32");
        if (p)
            snprintf(p->set[p->nset++], sizeof p->set[0], "precision=fp32");
    }
    batch_candidates(b, ps, &n);
    if (b->is_hdf5) {
        int w = b->workers > 0 ? b->workers * 2 : 2;
        char label[48];
        snprintf(label, sizeof label, "workers %d", w);
        add_set(add_probe(ps, &n, label), "workers=%.0f", w);
        if (b->workers > 0)
            add_set(add_probe(ps, &n, "workers 0"), "workers=%.0f", 0);
        probe *p = add_probe(ps, &n, "data in memory");
        if (p)
            snprintf(p->set[p->nset++], sizeof p->set[0], "mode=memory");
        p = add_probe(ps, &n, "data streamed");
        if (p)
            snprintf(p->set[p->nset++], sizeof p->set[0], "mode=streaming");
    }
    for (int k = 2; b->val_s > 0 && k <= 8 && k <= b->epochs; k *= 2) {
        if (k <= b->val_every)
            continue;
        char label[48];
        snprintf(label, sizeof label, "validate every %d epochs", k);
        probe *p = add_probe(ps, &n, label);
        if (!p)
            break;
        p->val_every = k;
        snprintf(p->set[p->nset++], sizeof p->set[0], "val_every=%d", k);
    }
    static const double lr_f[] = {0.1, 0.3, 3, 10};
    for (size_t i = 0; a->lr_range && i < 4; i++) {
        char label[48];
        snprintf(label, sizeof label, "lr x%g", lr_f[i]);
        add_set(add_probe(ps, &n, label), "lr=%.3g", b->lr * lr_f[i]);
    }
    return n;
}

/* The whole training's wall time for a probe: its steps at its step time
 * and the validations at the baseline's time each. */
static void project(const baseline *b, probe *p, const probe *base)
{
    int every = p->val_every > 0 ? p->val_every : b->val_every;
    if (p->val_every > 0) { /* the training part is the baseline's */
        p->step_s = base->step_s;
        p->samples_per_s = base->samples_per_s;
        p->loss = base->loss;
        p->steps = base->steps;
        p->rows_per_step = base->rows_per_step;
    }
    /* every k-th epoch and the last one */
    double nval = b->val_s > 0 ? floor((double)b->epochs / every) + (b->epochs % every != 0) : 0;
    p->proj_s = (double)p->steps * p->step_s + nval * b->val_s;
}

/* --- output -------------------------------------------------------------------- */

static void fmt_time(double s, char *buf, size_t n)
{
    if (s >= 3600)
        snprintf(buf, n, "%.1f h", s / 3600);
    else if (s >= 120)
        snprintf(buf, n, "%.1f min", s / 60);
    else
        snprintf(buf, n, "%.1f s", s);
}

static void print_row(const advise_args *a, const probe *p, const probe *base)
{
    if (p->failed) {
        printf("  %-26s failed: %s\n", p->label, p->why);
        return;
    }
    char proj[32], cost[32] = "";
    fmt_time(p->proj_s, proj, sizeof proj);
    if (a->price > 0)
        snprintf(cost, sizeof cost, " $%.4f", p->proj_s / 3600 * a->price);
    printf("  %-26s %10.0f %8.2f %6.2fx %9.4f %+7.1f%% %10s%s %5.2fx\n", p->label, p->samples_per_s,
           p->step_s * 1e3, p->samples_per_s / base->samples_per_s, p->loss,
           100 * (p->loss - base->loss) / base->loss, proj, cost, base->proj_s / p->proj_s);
}

static void print_command(const advise_args *a, const probe *p)
{
    printf("    dlbench run %s", a->script);
    for (int i = 0; i < a->nov; i++)
        printf(" %s", a->ovs[i]);
    for (int i = 0; i < a->nset; i++)
        printf(" --set %s", a->sets[i]);
    for (int i = 0; i < p->nset; i++)
        printf(" --set %s", p->set[i]);
    printf("\n");
}

static void print_table(const advise_args *a, probe *ps, int n, const probe *base, int skipped)
{
    printf("  %-26s %10s %8s %7s %9s %8s %10s%s %6s\n", "candidate", "samples/s", "step ms",
           "speed", "loss", "vs base", "projected", a->price > 0 ? " cost" : "", "saves");
    print_row(a, base, base);
    for (int i = 0; i < n; i++)
        if (ps[i].ran || ps[i].val_every > 0)
            print_row(a, &ps[i], base);
    if (skipped)
        printf("  (%d candidate%s not tried: the --budget of %.0f s was spent)\n", skipped,
               skipped == 1 ? "" : "s", a->budget);
    printf("the loss is the mean of each probe's last quarter of steps; a probe runs as many "
           "samples as the baseline (batch x2: half the steps); validation candidates are "
           "projected from the measured validation, not trained\n");
    /* the candidates that are faster without a worse loss, best first */
    int order[MAX_PROBES], m = 0;
    for (int i = 0; i < n; i++)
        if ((ps[i].ran || ps[i].val_every > 0) && !ps[i].failed &&
            ps[i].proj_s < 0.95 * base->proj_s && ps[i].loss <= base->loss * 1.02)
            order[m++] = i;
    for (int i = 1; i < m; i++)
        for (int k = i; k > 0 && ps[order[k]].proj_s < ps[order[k - 1]].proj_s; k--) {
            int tmp = order[k];
            order[k] = order[k - 1];
            order[k - 1] = tmp;
        }
    if (m == 0)
        printf("no candidate is faster at the same loss\n");
    for (int i = 0; i < m; i++) {
        printf("%s %s: %.2fx faster to the end, loss %+.1f%%\n",
               i == 0 ? "best:" : "also:", ps[order[i]].label, base->proj_s / ps[order[i]].proj_s,
               100 * (ps[order[i]].loss - base->loss) / base->loss);
        print_command(a, &ps[order[i]]);
    }
}

/* The rows of one optimizer step of probe p (its batch and accumulate
 * sets, else the baseline's). */
static long probe_rows(const probe *p, const baseline *b)
{
    long batch = b->batch, acc = b->accumulate;
    for (int i = 0; i < p->nset; i++) {
        if (!strncmp(p->set[i], "batch=", 6))
            batch = atol(p->set[i] + 6);
        else if (!strncmp(p->set[i], "accumulate=", 11))
            acc = atol(p->set[i] + 11);
    }
    return batch * acc > 0 ? batch * acc : 1;
}

static int advise(const advise_args *a)
{
    double t0 = dl_clock_mono_s();
    probe base;
    memset(&base, 0, sizeof base);
    snprintf(base.label, sizeof base.label, "baseline");
    baseline b;
    memset(&b, 0, sizeof b);
    if (run_probe(a, &base, a->steps, &b) < 0) {
        fprintf(stderr, "dlbench advise: error: %s\n", base.why);
        return dl_exit_for(DL_EINVAL);
    }
    if (base.failed) {
        fprintf(stderr, "dlbench advise: the baseline did not run: %s\n", base.why);
        return DL_EXIT_FAILED;
    }
    project(&b, &base, &base);
    printf("advise: %s, %ld steps a probe after %ld of warm-up, from the script's initial state\n",
           a->script, a->steps, a->warmup);
    printf("  baseline: batch %d x accumulate %d, %s, %d epochs of %ld steps, validation %.2f s\n",
           b.batch, b.accumulate, dl_precision_name(b.precision), b.epochs,
           base.steps / (b.epochs > 0 ? b.epochs : 1), b.val_s);
    probe ps[MAX_PROBES];
    int n = candidates(a, &b, ps), skipped = 0;
    for (int i = 0; i < n; i++) {
        if (ps[i].val_every > 0) {
            project(&b, &ps[i], &base);
            continue;
        }
        if (dl_clock_mono_s() - t0 > a->budget) {
            skipped++;
            continue;
        }
        /* as many samples as the baseline's probe */
        long rows = (long)b.batch * b.accumulate;
        long steps = a->steps * rows / probe_rows(&ps[i], &b);
        run_probe(a, &ps[i], steps < 5 ? 5 : steps, NULL);
        if (!ps[i].failed)
            project(&b, &ps[i], &base);
    }
    print_table(a, ps, n, &base, skipped);
    return DL_EXIT_OK;
}

int dl_cmd_advise(const dl_command *self, int argc, char **argv)
{
    this_cmd = self;
    advise_args a;
    int status = parse_args(&a, argc, argv);
    if (status < 0)
        status = advise(&a);
    free(a.ovs);
    free(a.sets);
    return status;
}
