/* cmd_run.c - `dlbench run`: headless training with progress lines and an end summary */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/dist/comm.h"
#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/base/fsutil.h"
#include "engine/rundir/records.h"
#include "engine/rundir/runlog.h"
#include "engine/observe/profiler.h"
#include "engine/observe/telemetry.h"
#include "scripting/script.h"
#include "scripting/session.h"
#include "tui/cmd/commands.h"
#include "tui/control.h"

#define PLAIN_EVERY_S 5.0
#define TTY_EVERY_S 0.1

/* This command's row of the table (its options and help), set on entry. */
static const dl_command *this_cmd;

typedef struct progress {
    int tty;
    int quiet;
    int line_open; /* an updating line is on screen */
    double last;   /* when the last progress line was written */
    int epochs;
    long max_steps;
    double started;
} progress;

static void end_line(progress *p)
{
    if (p->line_open) {
        fputs("\r\033[K", stdout);
        p->line_open = 0;
    }
}

static void on_step(void *user, const dl_step_info *i)
{
    progress *p = user;
    double t = dl_clock_mono_s();
    if (p->quiet || t - p->last < (p->tty ? TTY_EVERY_S : PLAIN_EVERY_S))
        return;
    p->last = t;
    long total = i->steps_per_epoch * p->epochs;
    if (p->max_steps > 0 && p->max_steps < total)
        total = p->max_steps;
    char acc[32] = "";
    if (i->acc >= 0)
        snprintf(acc, sizeof acc, "  acc %.4f", i->acc);
    char line[256];
    snprintf(line, sizeof line, "epoch %d/%d  step %ld/%ld  loss %.4f%s  lr %.3g  %.0f samples/s",
             i->epoch + 1, p->epochs, i->step, total, i->loss, acc, i->lr, i->samples_per_s);
    if (p->tty) {
        printf("\r\033[K%s", line);
        p->line_open = 1;
    } else {
        printf("%s\n", line);
    }
    fflush(stdout);
}

static void on_epoch(void *user, const dl_epoch_info *i)
{
    progress *p = user;
    if (p->quiet)
        return;
    end_line(p);
    printf("epoch %d/%d: train_loss %.4f", i->epoch + 1, p->epochs, i->train_loss);
    if (isfinite(i->train_acc))
        printf("  train_acc %.4f", i->train_acc);
    if (isfinite(i->val_loss))
        printf("  val_loss %.4f", i->val_loss);
    if (isfinite(i->val_acc))
        printf("  val_acc %.4f", i->val_acc);
    printf("  (%.1f s)\n", i->seconds);
    fflush(stdout);
}

static void on_event(void *user, const char *kind, const char *text)
{
    progress *p = user;
    if (p->quiet && strcmp(kind, "error") && strcmp(kind, "warning"))
        return;
    if (!strcmp(kind, "checkpoint") || !strcmp(kind, "started") || !strcmp(kind, "finished") ||
        !strcmp(kind, "stopped") || !strcmp(kind, "failed"))
        return; /* routine: in events.log */
    end_line(p);
    printf("[%s] %s\n", kind, text);
    fflush(stdout);
}

typedef struct run_args {
    dl_session_options o;
    char **ovs; /* the k=v overrides: pointers into argv */
    int nov;
    char **sets; /* the --set FIELD=VALUE values: pointers into argv */
    int nset;
    int quiet;
    int hparams;       /* --hparams: list them and exit */
    long parity_steps; /* --check-parity N */
    const char *parity_device;
    double parity_tol; /* < 0: by precision */
} run_args;

/* The command line that applies an advice: this run's own, less what the
 * advice changes, plus its --set values. */
static void print_apply(const char *script, char *const *ovs, int nov, char *const *sets, int nset,
                        const char *command)
{
    printf("    apply: dlbench run %s", script);
    for (int i = 0; i < nov; i++)
        printf(" %s", ovs[i]);
    for (int i = 0; i < nset; i++) {
        /* a field the advice sets again is left to the advice */
        const char *eq = strchr(sets[i], '=');
        char key[64];
        snprintf(key, sizeof key, "--set %.*s=", (int)(eq ? eq - sets[i] : 0), sets[i]);
        if (!strstr(command, key))
            printf(" --set %s", sets[i]);
    }
    printf(" %s\n", command);
}

/* The end of a run: what it cost and the advisor's findings, each with
 * the command that applies it. */
static void print_cost_and_advice(dl_telemetry *tele, const run_args *a)
{
    dl_telemetry_snapshot *snap = dl_telemetry_snapshot_create();
    if (!snap)
        return;
    dl_telemetry_read(tele, snap);
    const dl_cost *c = &snap->cost;
    char line[256] = "";
    size_t n = 0;
    if (snap->price_per_hour > 0 && c->cost_so_far >= 0)
        n += (size_t)snprintf(line + n, sizeof line - n, "cost $%.4f at $%.2f/h", c->cost_so_far,
                              snap->price_per_hour);
    if (c->mfu >= 0 && n < sizeof line)
        n += (size_t)snprintf(line + n, sizeof line - n, "%sMFU %.1f%% (%.3g GFLOP/s of %.3g, %s)",
                              n ? ", " : "", 100 * c->mfu, c->achieved_flops * 1e-9,
                              snap->peak_flops * 1e-9, snap->peak_source);
    if (c->energy_kwh >= 0 && n < sizeof line)
        snprintf(line + n, sizeof line - n, "%s%.4f kWh", n ? ", " : "", c->energy_kwh);
    if (line[0])
        printf("  %s\n", line);
    dl_advice adv[DL_ADV_NKINDS];
    int na = dl_telemetry_advise(snap, adv, DL_ADV_NKINDS);
    for (int i = 0; i < na; i++) {
        printf("  advisor: %s: %s; %s\n", adv[i].title, adv[i].evidence, adv[i].remedy);
        if (adv[i].effect[0])
            printf("    effect (%s): %s\n", adv[i].effect_basis, adv[i].effect);
        if (adv[i].command[0] && a->o.script)
            print_apply(a->o.script, a->ovs, a->nov, a->sets, a->nset, adv[i].command);
    }
    if (na == 0)
        printf("  advisor: no bottleneck found\n");
    dl_telemetry_snapshot_destroy(snap);
}

/* --- signals ------------------------------------------------------------------- */

static volatile sig_atomic_t sigint_count;
static volatile sig_atomic_t sig_ranks; /* > 1: one rank of a data-parallel job */
static dl_comm *volatile sig_comm;

static void on_sigint(int sig)
{
    (void)sig;
    if (sigint_count++ > 0)
        _exit(DL_EXIT_INTERRUPTED);
    dl_session_interrupt();
    static const char msg_job[] =
        "\ndlbench: signal received: the job stops at the next step when every rank is alive; "
        "if a rank died, the launcher ends the others (see its message)\n";
    if (sig_ranks > 1) {
        if (sig_comm)
            dl_comm_signal(sig_comm);
        ssize_t w = write(2, msg_job, sizeof msg_job - 1);
        (void)w;
        return;
    }
    static const char msg[] =
        "\ndlbench: stopping at the next step (checkpoint, summary); Ctrl-C again quits now\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
}

/* --- arguments ----------------------------------------------------------------- */

static int parse_long(const char *s, long long *v)
{
    char *end;
    errno = 0;
    *v = strtoll(s, &end, 10);
    return *s && !*end && !errno && *v >= 0;
}

static int bad_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("dlbench run: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return DL_EXIT_USAGE;
}

/* The parity options' values. Returns -1 to go on, else the exit status. */
static int take_parity(run_args *a, int id, const char *val)
{
    long long n;
    int threads;
    char *end;
    double x;
    switch (id) {
    case DL_OPT_CHECK_PARITY:
        if (!parse_long(val, &n) || n < 1 || n > 1000000)
            return bad_usage("--check-parity expects a number of steps from 1 to 1000000, "
                             "got '%s'",
                             val);
        a->parity_steps = (long)n;
        return -1;
    case DL_OPT_PARITY_DEVICE:
        if (dl_session_parity_device_parse(val, &threads) < 0)
            return bad_usage("--parity-device must be cuda, cpu or cpu:THREADS (1 to %d "
                             "threads), got '%s'",
                             DL_CPU_MAX_THREADS, val);
        a->parity_device = val;
        return -1;
    default:
        x = strtod(val, &end);
        if (end == val || *end || !(x >= 0) || !isfinite(x))
            return bad_usage("--parity-tol expects a number >= 0, got '%s'", val);
        a->parity_tol = x;
        return -1;
    }
}

/* One option (its value checked) into a. Returns -1 to go on, else the
 * exit status. */
static int take_option(run_args *a, const dl_opt *opt, const char *val)
{
    long long n;
    switch (opt->id) {
    case DL_OPT_HELP: dl_command_usage(this_cmd, stdout); return DL_EXIT_OK;
    case DL_OPT_FORCE: a->o.force = 1; return -1;
    case DL_OPT_QUIET: a->quiet = 1; return -1;
    case DL_OPT_HPARAMS: a->hparams = 1; return -1;
    case DL_OPT_OUT: a->o.out_dir = val; return -1;
    case DL_OPT_RESUME: a->o.resume = val; return -1;
    case DL_OPT_TARGET: {
        const char *eq = strchr(val, '=');
        char *end;
        double x = eq ? strtod(eq + 1, &end) : 0;
        size_t len = eq ? (size_t)(eq - val) : 0;
        if (!eq || len == 0 || len >= sizeof a->o.target_metric || end == eq + 1 || *end ||
            !isfinite(x) || (strncmp(val, "val_", 4) && strncmp(val, "train_", 6)))
            return bad_usage("--target expects METRIC=VALUE with a val_ or train_ metric "
                             "(val_acc=0.9, val_loss=0.3), got '%s'",
                             val);
        snprintf(a->o.target_metric, sizeof a->o.target_metric, "%.*s", (int)len, val);
        a->o.target_value = x;
        return -1;
    }
    case DL_OPT_SET:
        if (dl_session_set_check(val) < 0)
            return bad_usage("%s", dl_error_message());
        a->sets[a->nset++] = (char *)val;
        return -1;
    case DL_OPT_PRICE:
        if (dl_price_parse(val, &a->o.price_per_hour) < 0)
            return bad_usage("--price-per-hour expects a number >= 0, got '%s'", val);
        return -1;
    case DL_OPT_DEVICE:
        if (strcmp(val, "cpu") && strcmp(val, "cuda") && strcmp(val, "auto"))
            return bad_usage("--device must be cpu, cuda or auto, got '%s'", val);
        a->o.device = val;
        return -1;
    case DL_OPT_SEED:
    case DL_OPT_STOP_AFTER:
        if (!parse_long(val, &n))
            return bad_usage("%s expects a non-negative integer, got '%s'", opt->name, val);
        if (opt->id == DL_OPT_SEED)
            a->o.seed = n;
        else
            a->o.stop_after = (long)n;
        return -1;
    default: return take_parity(a, opt->id, val);
    }
}

/* The combinations that cannot go together. Returns -1 or the exit status. */
static int check_args(const run_args *a)
{
    if (!a->o.script && !a->o.resume) {
        dl_command_usage(this_cmd, stderr);
        return DL_EXIT_USAGE;
    }
    if (a->hparams && !a->o.script)
        return bad_usage("--hparams lists a SCRIPT's hyperparameters; give the script");
    if (!a->parity_steps && (a->parity_device || a->parity_tol >= 0))
        return bad_usage("--parity-device and --parity-tol go with --check-parity N");
    if (a->parity_steps && a->o.resume)
        return bad_usage("--check-parity starts from the script's initial state; it does not "
                         "take --resume");
    if (a->parity_steps && dl_comm_launched() > 1)
        return bad_usage("--check-parity runs in one process, not under mpirun");
    if (a->o.resume && (a->nov > 0 || a->nset > 0))
        return bad_usage("--resume continues a run with its own settings; overrides are not "
                         "allowed");
    return -1;
}

/* dlbench run's arguments into a (a->ovs is the caller's to free, also on
 * an early return). Returns -1 to go on, else the exit status. */
static int parse_args(run_args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->o.seed = -1;
    a->o.out_dir = "runs";
    a->parity_tol = -1;
    a->ovs = calloc((size_t)argc + 1, sizeof *a->ovs);
    a->sets = calloc((size_t)argc + 1, sizeof *a->sets);
    if (!a->ovs || !a->sets)
        return DL_EXIT_FAILED;
    if (dl_price_parse(NULL, &a->o.price_per_hour) < 0)
        return bad_usage("DLBENCH_PRICE_PER_HOUR must be a number >= 0");
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
        } else if (!a->o.script) {
            a->o.script = p.value;
        } else {
            return bad_usage("unexpected argument '%s' (overrides are NAME=VALUE)", p.value);
        }
    }
    return check_args(a);
}

/* --hparams: what the script declares with dl.hparams, NAME=VALUE a line
 * (the bash completion offers the names as k=). A study's objective is not
 * called. Returns the exit status. */
static int print_hparams(const run_args *a)
{
    dl_script_options so = {a->o.script, a->ovs, a->nov, 0};
    dl_script *sc = NULL;
    int rc = dl_script_load_study(&sc, &so, NULL, 1);
    if (rc < 0) {
        fprintf(stderr, "dlbench run: error: %s\n", dl_error_message());
        return dl_exit_for(rc);
    }
    const dl_experiment *e = dl_script_experiment(sc);
    for (int i = 0; i < e->nhp; i++) {
        const dl_hparam *h = &e->hp[i];
        if (h->type == DL_HP_STRING)
            printf("%s=%s\n", h->name, h->str);
        else if (h->type == DL_HP_BOOLEAN)
            printf("%s=%s\n", h->name, h->num ? "true" : "false");
        else
            printf("%s=%.15g\n", h->name, h->num);
    }
    dl_script_destroy(sc);
    return DL_EXIT_OK;
}

static void print_metric_line(const dl_session *s, const char *name)
{
    double fin, best;
    if (!dl_session_metric(s, name, &fin, &best))
        return;
    if (strstr(name, "loss") || strstr(name, "acc"))
        printf("  %-11s final %.4f  best %.4f\n", name, fin, best);
    else
        printf("  %-11s final %.4f\n", name, fin);
}

static void print_duplicate(const char *dir)
{
    dl_run_summary sum;
    int have = dl_records_summary(dir, &sum) == DL_OK;
    fprintf(stderr, "dlbench run: refused: a finished run has the same configuration:\n  %s\n",
            dir);
    static const char *names[] = {"val_acc", "val_loss", "train_acc", "train_loss"};
    for (size_t k = 0; have && k < sizeof names / sizeof *names; k++) {
        double f = dl_records_value(sum.final, sum.nfinal, names[k]);
        double b = dl_records_value(sum.best, sum.nbest, names[k]);
        if (!isnan(f))
            fprintf(stderr, "  %-11s final %.4f  best %.4f\n", names[k], f, isnan(b) ? f : b);
    }
    if (have && !isnan(sum.steps) && !isnan(sum.wall_s))
        fprintf(stderr, "  %.0f steps in %.1f s\n", sum.steps, sum.wall_s);
    fprintf(stderr, "run it again anyway with --force\n");
}

/* Data parallel, from the watchdog thread when the job ends abnormally:
 * rank 0 marks its run failed (events.log, summary.json) so that `runs` and
 * `watch` do not show it running. */
static void mark_failed(void *user, const char *why)
{
    const char *dir = user;
    dl_runlog_mark_failed(dir, why); /* first: the launcher's SIGKILL may follow */
    dl_runlog_append_event(dir, "failed", why);
}

/* Data parallel, the session prepared: the trainer becomes this rank of
 * the job (through the communicator's reducer; a rank that cannot join
 * ends the job), rank 0 marks the run failed if the watchdog ends it, and
 * the signal handler may report a lost rank. */
static void join_job(dl_comm *comm, dl_trainer *t, const char *run_dir)
{
    dl_reducer red;
    dl_comm_reducer(comm, &red);
    if (dl_trainer_set_reducer(t, &red) < 0) {
        char msg[1100];
        snprintf(msg, sizeof msg, "cannot join the job: %s", dl_error_message());
        dl_comm_abort(comm, 1, msg);
    }
    if (red.rank == 0)
        dl_comm_on_failure(comm, mark_failed, (void *)run_dir);
    sig_comm = comm;
}

/* Data parallel, after every rank prepared: a rank that failed fails the
 * job (it printed why), rank 0's duplicate refusal ends it. Returns the
 * exit status for a rank that must stop for another's reason, else 0. */
static int agree_prepare(dl_comm *c, int rc)
{
    int rank = dl_comm_rank(c);
    double v[2] = {rc < 0, rank == 0 && rc == DL_SESSION_DUPLICATE};
    if (dl_comm_allreduce(c, v, 2, DL_COMM_SUM) < 0)
        dl_comm_abort(c, 1, dl_error_message());
    if (rc >= 0 && v[0] > 0) {
        if (rank == 0)
            fprintf(stderr,
                    "dlbench run: %.0f of %d ranks could not start (their messages "
                    "above)\n",
                    v[0], dl_comm_size(c));
        return 1;
    }
    if (rank > 0 && v[1] > 0)
        return 3;
    return 0;
}

/* --- parity check ---------------------------------------------------------------- */

/* The default tolerance of a parity check for a precision: f32 runs
 * differ by the order of their sums (and TF32 products on a GPU); bf16 and
 * fp16 by a rounding that such a difference can flip. */
static double parity_default_tol(dl_precision p)
{
    return p == DL_PREC_BF16 ? 2e-2 : p == DL_PREC_F16 ? 1e-2 : 1e-3;
}

/* Runs and prints the check; returns the exit status. */
static int run_parity(dl_session *s, const char *device, int steps, double tol)
{
    dl_trainer *t = dl_session_trainer(s);
    dl_precision prec = dl_trainer_config_of(t)->precision;
    if (tol < 0)
        tol = parity_default_tol(prec);
    dl_parity_report r;
    char other[64];
    const char *home = dl_session_device(s);
    int rc = dl_session_check_parity(s, device, steps, &r, other, sizeof other);
    if (rc < 0) {
        fprintf(stderr, "dlbench run: %s\n", dl_error_message());
        dl_parity_report_done(&r);
        return rc == DL_EINVAL ? 2 : 1;
    }
    printf("parity check: %s, %d step%s from step %ld, %s\n", dl_session_name(s), r.steps,
           r.steps == 1 ? "" : "s", r.first_step, dl_precision_name(prec));
    printf("  A: %-8s %s (%.3f s)\n", home, r.device_a, r.seconds_a);
    if (r.same_backend)
        printf("  B: %-8s the same backend as A: no move, the check covers the restore (%.3f s)\n",
               other, r.seconds_b);
    else
        printf("  B: %-8s %s (%.3f s; moves %.3f s)\n", other, r.device_b, r.seconds_b, r.switch_s);
    if (r.steps < steps)
        printf("  (the training ends after %d of the %d steps asked for)\n", r.steps, steps);
    printf("  %5s  %-16s %-16s %s\n", "step", "loss A", "loss B", "relative difference");
    for (int i = 0; i < r.steps; i++) {
        double a = r.loss_a[i], b = r.loss_b[i];
        double d = a == b ? 0 : fabs(a - b) / fabs(a);
        printf("  %5ld  %-16.9g %-16.9g %.3g\n", r.first_step + i + 1, a, b, d);
    }
    if (r.max_loss_rel == 0)
        printf("  largest relative loss difference: 0 (every step's loss equal)\n");
    else
        printf("  largest relative loss difference: %.3g (step %ld)\n", r.max_loss_rel,
               r.first_step + r.worst_loss_step);
    if (r.params_identical)
        printf("  largest relative parameter difference: 0 (every parameter bit-identical)\n");
    else
        printf("  largest relative parameter difference: %.3g (%s: max |A-B| %.3g, relative "
               "to the tensor's max |A|)\n",
               r.max_param_rel, r.worst_param, r.worst_param_abs);
    int over = !(r.max_loss_rel <= tol) || !(r.max_param_rel <= tol);
    printf("parity: %s tolerance %.3g (%s)\n", over ? "OVER" : "within", tol,
           dl_precision_name(prec));
    dl_parity_report_done(&r);
    return over ? 1 : 0;
}

/* One `dlbench run`: what its steps share. */
typedef struct run_cmd {
    run_args a;
    dl_comm *comm; /* a data-parallel job's ranks, or NULL alone */
    progress p;
    dl_telemetry *tele;
    dl_session *s;
    struct sigaction old_int, old_term;
} run_cmd;

/* Under mpirun: this process becomes one rank; rank 0 writes the run
 * folder, the others print errors only. -1 to go on, else the exit status. */
static int join_launcher(run_cmd *r)
{
    if (dl_comm_launched() <= 1)
        return -1;
    if (dl_comm_create(&r->comm, NULL) < 0) {
        fprintf(stderr, "dlbench run: started as one of %d ranks, but: %s\n", dl_comm_launched(),
                dl_error_message());
        return DL_EXIT_FAILED;
    }
    r->a.o.rank = dl_comm_rank(r->comm);
    r->a.o.ranks = dl_comm_size(r->comm);
    sig_ranks = r->a.o.ranks;
    if (r->a.o.rank > 0)
        r->a.quiet = 1;
    return -1;
}

/* The session's options: overrides, progress callbacks, and a telemetry
 * store (cost in summary.json, the advisor at the end) unless this is a
 * parity check. */
static void set_up(run_cmd *r)
{
    dl_session_options *o = &r->a.o;
    o->overrides = r->a.ovs;
    o->noverrides = r->a.nov;
    o->sets = r->a.sets;
    o->nsets = r->a.nset;
    r->p.tty = isatty(1);
    r->p.quiet = r->a.quiet;
    r->p.started = dl_clock_mono_s();
    o->user = &r->p;
    o->on_step = on_step;
    o->on_epoch = on_epoch;
    o->on_event = on_event;
    o->parity = r->a.parity_steps > 0;
    if (!o->parity && dl_telemetry_create(&r->tele) == DL_OK)
        o->telemetry = r->tele;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &r->old_int);
    sigaction(SIGTERM, &sa, &r->old_term);
}

/* The last lines of a run: how it ended, its metrics, cost and advice. */
static void report_end(run_cmd *r, dl_run_status st)
{
    dl_session *s = r->s;
    int rank = r->a.o.rank;
    const char *word = st == DL_RUN_FINISHED  ? "finished"
                       : st == DL_RUN_STOPPED ? "stopped"
                                              : "failed";
    FILE *f = st == DL_RUN_FAILED ? stderr : stdout;
    if (rank == 0 || st == DL_RUN_FAILED)
        fprintf(f, "%s: %s after %ld steps in %.1f s (%.0f samples/s)%s%s\n", word,
                dl_session_name(s), dl_session_total_steps(s), dl_session_wall_s(s),
                dl_session_samples_per_s(s), dl_session_message(s)[0] ? ": " : "",
                dl_session_message(s));
    if (r->comm && st == DL_RUN_FAILED) /* the other ranks would wait for this one */
        dl_comm_abort(r->comm, 1, "training failed on this rank (above): ending the job");
    if (st != DL_RUN_FAILED && rank == 0) {
        static const char *names[] = {"val_acc", "val_loss", "train_acc", "train_loss"};
        for (size_t k = 0; k < sizeof names / sizeof *names; k++)
            print_metric_line(s, names[k]);
        if (r->tele && !r->a.quiet)
            print_cost_and_advice(r->tele, &r->a);
    }
    if (rank == 0)
        printf("run folder: %s\n", dl_session_run_dir(s));
}

/* The prepared session trained to its end, with the control socket open
 * for dlbench watch. Returns the exit status. */
static int train(run_cmd *r)
{
    dl_session *s = r->s;
    dl_trainer *t = dl_session_trainer(s);
    if (r->comm)
        join_job(r->comm, t, dl_session_run_dir(s));
    const dl_trainer_config *cfg = dl_trainer_config_of(t);
    r->p.epochs = cfg->epochs;
    r->p.max_steps = cfg->max_steps;
    if (!r->a.quiet) {
        printf("%s: %s on %s, run folder %s\n", r->a.o.resume ? "resuming" : "training",
               dl_session_name(s), dl_session_device(s), dl_session_run_dir(s));
        fflush(stdout);
    }
    char why[256];
    dl_control *ctl = NULL; /* RUN/control.sock for dlbench watch */
    if (r->a.o.rank == 0 && dl_control_start(&ctl, dl_session_run_dir(s), t, why, sizeof why) < 0)
        fprintf(stderr, "dlbench run: no control socket: %s\n", why);
    /* a sampled profile (one step in 16) tells the advisor where a step goes */
    dl_profiler *prof = NULL;
    dl_profiler_options po;
    dl_profiler_options_default(&po);
    po.sample_every = 16;
    if (r->tele && dl_profiler_create(&prof, &po) == DL_OK &&
        dl_trainer_set_profiler(t, prof) < 0) {
        dl_profiler_destroy(prof);
        prof = NULL;
    }
    dl_run_status st = dl_session_run(s);
    dl_trainer_set_profiler(t, NULL);
    dl_profiler_destroy(prof);
    dl_control_stop(ctl);
    end_line(&r->p);
    report_end(r, st);
    if (st == DL_RUN_FAILED)
        return DL_EXIT_FAILED;
    return dl_session_interrupted() ? DL_EXIT_INTERRUPTED : DL_EXIT_OK;
}

/* Prepares the session (all ranks agree on the outcome), then trains it,
 * checks parity, or says why not. Returns the exit status. */
static int prepare_and_run(run_cmd *r)
{
    int rc = dl_session_prepare(&r->s, &r->a.o);
    int other = r->comm ? agree_prepare(r->comm, rc) : 0;
    if (other)
        return other;
    if (rc == DL_SESSION_DUPLICATE) {
        print_duplicate(dl_session_duplicate(r->s));
        return DL_EXIT_DUPLICATE;
    }
    if (rc < 0) {
        fprintf(stderr, "dlbench run: error: %s\n", dl_error_message());
        return dl_session_interrupted() ? DL_EXIT_INTERRUPTED : dl_exit_for(rc);
    }
    if (!r->a.o.parity)
        return train(r);
    int status = run_parity(r->s, r->a.parity_device, (int)r->a.parity_steps, r->a.parity_tol);
    return dl_session_interrupted() ? DL_EXIT_INTERRUPTED : status;
}

int dl_cmd_run(const dl_command *self, int argc, char **argv)
{
    this_cmd = self;
    run_cmd r;
    memset(&r, 0, sizeof r);
    int status = parse_args(&r.a, argc, argv);
    if (status < 0 && r.a.hparams)
        status = print_hparams(&r.a);
    if (status < 0)
        status = join_launcher(&r);
    if (status >= 0) {
        free(r.a.ovs);
        free(r.a.sets);
        return status;
    }
    set_up(&r);
    status = prepare_and_run(&r);
    sig_comm = NULL;
    if (r.comm)
        dl_comm_on_failure(r.comm, NULL, NULL);
    dl_session_destroy(r.s);
    dl_telemetry_destroy(r.tele);
    dl_comm_destroy(r.comm);
    sig_ranks = 0;
    sigaction(SIGINT, &r.old_int, NULL);
    sigaction(SIGTERM, &r.old_term, NULL);
    free(r.a.ovs);
    free(r.a.sets);
    return status;
}
