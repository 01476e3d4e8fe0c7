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

#include "engine/error.h"
#include "engine/runlog.h"
#include "scripting/session.h"
#include "tui/commands.h"

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

/* --- signals ------------------------------------------------------------------- */

static volatile sig_atomic_t sigint_count;

static void on_sigint(int sig)
{
    (void)sig;
    if (sigint_count++ > 0)
        _exit(130);
    dl_session_interrupt();
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
          "                   [--quiet]\n"
          "  k=v             override a hyperparameter the script declares with dl.hparams\n"
          "  --device D      run on cpu, cuda or auto (default: the script's choice)\n"
          "  --seed N        the random seed (default: the script's, else 0)\n"
          "  --out DIR       where run folders go (default: runs)\n"
          "  --resume RUN    continue RUN (folder, name or hash) from its checkpoint\n"
          "  --force         run even if a finished run has the same configuration\n"
          "  --stop-after N  stop cleanly after N optimizer steps (checkpoint, \"stopped\")\n"
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

int dl_cmd_run(int argc, char **argv)
{
    dl_session_options o;
    memset(&o, 0, sizeof o);
    o.seed = -1;
    o.out_dir = "runs";
    char **ovs = calloc((size_t)argc + 1, sizeof *ovs);
    int nov = 0, quiet = 0;
    if (!ovs)
        return 1;
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
    if (o.resume && nov > 0) {
        fprintf(stderr, "dlbench run: --resume continues a run with its own settings; "
                        "overrides are not allowed\n");
        free(ovs);
        return 2;
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

    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);

    dl_session *s = NULL;
    int rc = dl_session_prepare(&s, &o);
    int status;
    if (rc == DL_SESSION_DUPLICATE) {
        print_duplicate(dl_session_duplicate(s));
        status = 3;
    } else if (rc < 0) {
        fprintf(stderr, "dlbench run: error: %s\n", dl_error_message());
        status = dl_session_interrupted() ? 130 : exit_for(rc);
    } else {
        dl_trainer *t = dl_session_trainer(s);
        const dl_trainer_config *cfg = dl_trainer_config_of(t);
        p.epochs = cfg->epochs;
        p.max_steps = cfg->max_steps;
        if (!quiet) {
            printf("%s: %s on %s, run folder %s\n", o.resume ? "resuming" : "training",
                   dl_session_name(s), dl_session_device(s), dl_session_run_dir(s));
            fflush(stdout);
        }
        dl_run_status st = dl_session_run(s);
        end_line(&p);
        const char *word = st == DL_RUN_FINISHED ? "finished" : st == DL_RUN_STOPPED ? "stopped"
                                                                                        : "failed";
        FILE *f = st == DL_RUN_FAILED ? stderr : stdout;
        fprintf(f, "%s: %s after %ld steps in %.1f s (%.0f samples/s)%s%s\n", word,
                dl_session_name(s), dl_session_total_steps(s), dl_session_wall_s(s),
                dl_session_samples_per_s(s), dl_session_message(s)[0] ? ": " : "",
                dl_session_message(s));
        if (st != DL_RUN_FAILED) {
            static const char *names[] = {"val_acc", "val_loss", "train_acc", "train_loss"};
            for (size_t k = 0; k < sizeof names / sizeof *names; k++)
                print_metric_line(s, names[k]);
        }
        printf("run folder: %s\n", dl_session_run_dir(s));
        status = st == DL_RUN_FAILED ? 1 : (dl_session_interrupted() ? 130 : 0);
    }
    dl_session_destroy(s);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    free(ovs);
    return status;
}
