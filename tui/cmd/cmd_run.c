/* cmd_run.c - `dlbench run`: headless training with progress lines and an end summary */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/dist/comm.h"
#include "engine/base/error.h"
#include "engine/base/fsutil.h"
#include "engine/rundir/runlog.h"
#include "engine/observe/telemetry.h"
#include "scripting/session.h"
#include "tui/cmd/commands.h"
#include "tui/control.h"

#define PLAIN_EVERY_S 5.0
#define TTY_EVERY_S 0.1

typedef struct progress {
    int tty;
    int quiet;
    int line_open;     /* an updating line is on screen */
    double last;       /* when the last progress line was written */
    int epochs;
    long max_steps;
    double started;
} progress;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

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
    double t = now_s();
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

int dl_price_parse(const char *text, double *out)
{
    *out = 0;
    if (!text) {
        text = getenv("DLBENCH_PRICE_PER_HOUR");
        if (!text || !text[0])
            return 0;
    }
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno || !(v >= 0) || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

/* The end of a run: what it cost and the advisor's top findings. */
static void print_cost_and_advice(dl_telemetry *tele)
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
    dl_advice adv[2];
    int na = dl_telemetry_advise(snap, adv, 2);
    for (int i = 0; i < na; i++)
        printf("  advisor: %s: %s; %s\n", adv[i].title, adv[i].evidence, adv[i].remedy);
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
        _exit(130);
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

static void usage(FILE *f)
{
    fputs("usage: dlbench run SCRIPT [k=v ...] [--device cpu|cuda|auto] [--seed N]\n"
          "                   [--out DIR] [--resume RUN] [--force] [--stop-after STEPS]\n"
          "                   [--price-per-hour P] [--quiet]\n"
          "       dlbench run SCRIPT [k=v ...] --check-parity N [--parity-device DEV]\n"
          "                   [--parity-tol X] [--device D] [--seed N]\n"
          "  k=v             override a hyperparameter the script declares with dl.hparams\n"
          "  --device D      run on cpu, cuda or auto (default: the script's choice)\n"
          "  --seed N        the random seed (default: the script's, else 0)\n"
          "  --out DIR       where run folders go (default: runs)\n"
          "  --resume RUN    continue RUN (folder, name or hash) from its checkpoint\n"
          "  --force         run even if a finished run has the same configuration\n"
          "  --stop-after N  stop cleanly after N optimizer steps (checkpoint, \"stopped\")\n"
          "  --price-per-hour P  the machine's price per hour (default: $DLBENCH_PRICE_PER_HOUR):\n"
          "                  cost so far and projected in summary.json and at the end\n"
          "  --check-parity N  train nothing: run N steps from the start on the run's device\n"
          "                  and on another from the same state, print each step's loss on\n"
          "                  both and the largest relative loss and parameter differences\n"
          "                  (no run folder; exit 0 within the tolerance, 1 over it or when\n"
          "                  the other device is not available)\n"
          "  --parity-device DEV  the other device: cuda, cpu, or cpu:T (a CPU backend of its\n"
          "                  own with T threads); default cuda from the CPU, cpu from a GPU\n"
          "  --parity-tol X  the largest relative difference allowed (default 1e-3 for fp32,\n"
          "                  1e-2 for fp16, 2e-2 for bf16)\n"
          "exit status: 0 finished or stopped, 1 failed, 2 bad input, 3 duplicate refused\n",
          f);
}

static int parse_long(const char *s, long long *v)
{
    char *end;
    errno = 0;
    *v = strtoll(s, &end, 10);
    return *s && !*end && !errno && *v >= 0;
}

static int exit_for(int rc)
{
    switch (rc) {
    case DL_EINVAL:
    case DL_ESHAPE:
    case DL_ENODEV:
    case DL_EIO:
    case DL_EUNSUPPORTED: return 2;
    default: return 1;
    }
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
    char path[1200];
    snprintf(path, sizeof path, "%s/summary.json", dir);
    cJSON *sum = dl_runlog_read_json(path);
    fprintf(stderr, "dlbench run: refused: a finished run has the same configuration:\n  %s\n",
            dir);
    const cJSON *fin = cJSON_GetObjectItemCaseSensitive(sum, "final");
    const cJSON *best = cJSON_GetObjectItemCaseSensitive(sum, "best");
    static const char *names[] = {"val_acc", "val_loss", "train_acc", "train_loss"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(fin, names[k]);
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(best, names[k]), "value");
        if (cJSON_IsNumber(f))
            fprintf(stderr, "  %-11s final %.4f  best %.4f\n", names[k], f->valuedouble,
                    cJSON_IsNumber(b) ? b->valuedouble : f->valuedouble);
    }
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(sum, "steps");
    const cJSON *wall = cJSON_GetObjectItemCaseSensitive(sum, "wall_s");
    if (cJSON_IsNumber(steps) && cJSON_IsNumber(wall))
        fprintf(stderr, "  %.0f steps in %.1f s\n", steps->valuedouble, wall->valuedouble);
    cJSON_Delete(sum);
    fprintf(stderr, "run it again anyway with --force\n");
}

/* Data parallel, from the watchdog thread when the job ends abnormally:
 * rank 0 marks its run failed (events.log, summary.json) so that `runs` and
 * `watch` do not show it running. */
static void mark_failed(void *user, const char *why)
{
    const char *dir = user;
    char path[1200];
    dl_runlog_append_event(dir, "failed", why);
    snprintf(path, sizeof path, "%s/summary.json", dir);
    cJSON *sum = dl_runlog_read_json(path);
    if (!sum)
        return;
    cJSON_DeleteItemFromObjectCaseSensitive(sum, "status");
    cJSON_DeleteItemFromObjectCaseSensitive(sum, "message");
    cJSON_AddStringToObject(sum, "status", "failed");
    cJSON_AddStringToObject(sum, "message", why);
    char *text = cJSON_Print(sum);
    if (text)
        dl_fs_write_atomic(path, text, strlen(text));
    free(text);
    cJSON_Delete(sum);
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
            fprintf(stderr, "dlbench run: %.0f of %d ranks could not start (their messages "
                            "above)\n", v[0], dl_comm_size(c));
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
        printf("  B: %-8s %s (%.3f s; moves %.3f s)\n", other, r.device_b, r.seconds_b,
               r.switch_s);
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

int dl_cmd_run(int argc, char **argv)
{
    dl_session_options o;
    memset(&o, 0, sizeof o);
    o.seed = -1;
    o.out_dir = "runs";
    char **ovs = calloc((size_t)argc + 1, sizeof *ovs);
    int nov = 0, quiet = 0;
    long parity_steps = 0;           /* --check-parity N */
    const char *parity_device = NULL;
    double parity_tol = -1;          /* < 0: by precision */
    if (!ovs)
        return 1;
    if (dl_price_parse(NULL, &o.price_per_hour) < 0) {
        fprintf(stderr, "dlbench run: DLBENCH_PRICE_PER_HOUR must be a number >= 0\n");
        free(ovs);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        long long n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(ovs);
            return 0;
        } else if (!strcmp(a, "--force")) {
            o.force = 1;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            quiet = 1;
        } else if (!strcmp(a, "--price-per-hour")) {
            if (!val || dl_price_parse(val, &o.price_per_hour) < 0) {
                fprintf(stderr, "dlbench run: --price-per-hour expects a number >= 0, got '%s'\n",
                        val ? val : "");
                free(ovs);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--check-parity") || !strcmp(a, "--parity-device") ||
                   !strcmp(a, "--parity-tol")) {
            int threads;
            char *end = NULL;
            double x = val ? strtod(val, &end) : 0;
            if (!strcmp(a, "--check-parity") &&
                (!val || !parse_long(val, &n) || n < 1 || n > 1000000)) {
                fprintf(stderr, "dlbench run: --check-parity expects a number of steps from 1 "
                                "to 1000000, got '%s'\n", val ? val : "");
                free(ovs);
                return 2;
            } else if (!strcmp(a, "--parity-device") &&
                       (!val || dl_session_parity_device_parse(val, &threads) < 0)) {
                fprintf(stderr, "dlbench run: --parity-device must be cuda, cpu or cpu:THREADS "
                                "(1 to %d threads), got '%s'\n", DL_CPU_MAX_THREADS,
                        val ? val : "");
                free(ovs);
                return 2;
            } else if (!strcmp(a, "--parity-tol") &&
                       (!val || end == val || *end || !(x >= 0) || !isfinite(x))) {
                fprintf(stderr, "dlbench run: --parity-tol expects a number >= 0, got '%s'\n",
                        val ? val : "");
                free(ovs);
                return 2;
            }
            if (!strcmp(a, "--check-parity"))
                parity_steps = (long)n;
            else if (!strcmp(a, "--parity-device"))
                parity_device = val;
            else
                parity_tol = x;
            i++;
        } else if (!strcmp(a, "--device") || !strcmp(a, "--out") || !strcmp(a, "--resume") ||
                   !strcmp(a, "--seed") || !strcmp(a, "--stop-after")) {
            if (!val) {
                fprintf(stderr, "dlbench run: %s needs a value\n", a);
                free(ovs);
                return 2;
            }
            i++;
            if (!strcmp(a, "--device")) {
                if (strcmp(val, "cpu") && strcmp(val, "cuda") && strcmp(val, "auto")) {
                    fprintf(stderr, "dlbench run: --device must be cpu, cuda or auto, got '%s'\n",
                            val);
                    free(ovs);
                    return 2;
                }
                o.device = val;
            } else if (!strcmp(a, "--out")) {
                o.out_dir = val;
            } else if (!strcmp(a, "--resume")) {
                o.resume = val;
            } else if (!parse_long(val, &n)) {
                fprintf(stderr, "dlbench run: %s expects a non-negative integer, got '%s'\n", a,
                        val);
                free(ovs);
                return 2;
            } else if (!strcmp(a, "--seed")) {
                o.seed = n;
            } else {
                o.stop_after = (long)n;
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "dlbench run: unknown option '%s'\n", a);
            usage(stderr);
            free(ovs);
            return 2;
        } else if (strchr(a, '=')) {
            ovs[nov++] = argv[i];
        } else if (!o.script) {
            o.script = a;
        } else {
            fprintf(stderr, "dlbench run: unexpected argument '%s' (overrides are NAME=VALUE)\n",
                    a);
            free(ovs);
            return 2;
        }
    }
    if (!o.script && !o.resume) {
        usage(stderr);
        free(ovs);
        return 2;
    }
    if (!parity_steps && (parity_device || parity_tol >= 0)) {
        fprintf(stderr, "dlbench run: --parity-device and --parity-tol go with --check-parity N\n");
        free(ovs);
        return 2;
    }
    if (parity_steps && o.resume) {
        fprintf(stderr, "dlbench run: --check-parity starts from the script's initial state; "
                        "it does not take --resume\n");
        free(ovs);
        return 2;
    }
    if (parity_steps && dl_comm_launched() > 1) {
        fprintf(stderr, "dlbench run: --check-parity runs in one process, not under mpirun\n");
        free(ovs);
        return 2;
    }
    if (o.resume && nov > 0) {
        fprintf(stderr, "dlbench run: --resume continues a run with its own settings; "
                        "overrides are not allowed\n");
        free(ovs);
        return 2;
    }
    /* data parallel under mpirun: rank 0 writes the run folder, the others
     * print errors only */
    dl_comm *comm = NULL;
    if (dl_comm_launched() > 1) {
        if (dl_comm_create(&comm, NULL) < 0) {
            fprintf(stderr, "dlbench run: started as one of %d ranks, but: %s\n",
                    dl_comm_launched(), dl_error_message());
            free(ovs);
            return 1;
        }
        o.rank = dl_comm_rank(comm);
        o.ranks = dl_comm_size(comm);
        sig_ranks = o.ranks;
        if (o.rank > 0)
            quiet = 1;
    }
    o.overrides = ovs;
    o.noverrides = nov;
    progress p = {0};
    p.tty = isatty(1);
    p.quiet = quiet;
    p.started = now_s();
    o.user = &p;
    o.on_step = on_step;
    o.on_epoch = on_epoch;
    o.on_event = on_event;
    /* the run publishes into a telemetry store: cost in summary.json, the advisor at the end */
    dl_telemetry *tele = NULL;
    o.parity = parity_steps > 0;
    if (!o.parity && dl_telemetry_create(&tele) == DL_OK)
        o.telemetry = tele;

    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);

    dl_session *s = NULL;
    int rc = dl_session_prepare(&s, &o);
    int status;
    int other = comm ? agree_prepare(comm, rc) : 0;
    if (other) {
        status = other;
    } else if (rc == DL_SESSION_DUPLICATE) {
        print_duplicate(dl_session_duplicate(s));
        status = 3;
    } else if (rc < 0) {
        fprintf(stderr, "dlbench run: error: %s\n", dl_error_message());
        status = dl_session_interrupted() ? 130 : exit_for(rc);
    } else if (o.parity) {
        status = run_parity(s, parity_device, (int)parity_steps, parity_tol);
        if (dl_session_interrupted())
            status = 130;
    } else {
        dl_trainer *t = dl_session_trainer(s);
        if (comm)
            join_job(comm, t, dl_session_run_dir(s));
        const dl_trainer_config *cfg = dl_trainer_config_of(t);
        p.epochs = cfg->epochs;
        p.max_steps = cfg->max_steps;
        if (!quiet) {
            printf("%s: %s on %s, run folder %s\n", o.resume ? "resuming" : "training",
                   dl_session_name(s), dl_session_device(s), dl_session_run_dir(s));
            fflush(stdout);
        }
        char why[256];
        dl_control *ctl = NULL; /* RUN/control.sock for dlbench watch */
        if (o.rank == 0 && dl_control_start(&ctl, dl_session_run_dir(s), t, why, sizeof why) < 0)
            fprintf(stderr, "dlbench run: no control socket: %s\n", why);
        dl_run_status st = dl_session_run(s);
        dl_control_stop(ctl);
        end_line(&p);
        const char *word = st == DL_RUN_FINISHED ? "finished" : st == DL_RUN_STOPPED ? "stopped"
                                                                                        : "failed";
        FILE *f = st == DL_RUN_FAILED ? stderr : stdout;
        if (o.rank == 0 || st == DL_RUN_FAILED)
            fprintf(f, "%s: %s after %ld steps in %.1f s (%.0f samples/s)%s%s\n", word,
                dl_session_name(s), dl_session_total_steps(s), dl_session_wall_s(s),
                dl_session_samples_per_s(s), dl_session_message(s)[0] ? ": " : "",
                dl_session_message(s));
        if (comm && st == DL_RUN_FAILED) /* the other ranks would wait for this one */
            dl_comm_abort(comm, 1, "training failed on this rank (above): ending the job");
        if (st != DL_RUN_FAILED && o.rank == 0) {
            static const char *names[] = {"val_acc", "val_loss", "train_acc", "train_loss"};
            for (size_t k = 0; k < sizeof names / sizeof *names; k++)
                print_metric_line(s, names[k]);
            if (tele && !quiet)
                print_cost_and_advice(tele);
        }
        if (o.rank == 0)
            printf("run folder: %s\n", dl_session_run_dir(s));
        status = st == DL_RUN_FAILED ? 1 : (dl_session_interrupted() ? 130 : 0);
    }
    sig_comm = NULL;
    if (comm)
        dl_comm_on_failure(comm, NULL, NULL);
    dl_session_destroy(s);
    dl_telemetry_destroy(tele);
    dl_comm_destroy(comm);
    sig_ranks = 0;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    free(ovs);
    return status;
}
