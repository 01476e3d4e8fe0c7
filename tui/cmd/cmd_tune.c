/* cmd_tune.c - `dlbench tune`: a hyperparameter study run trial by trial as run folders, with worker processes, resume and a report */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/base/fsutil.h"
#include "engine/rundir/records.h"
#include "engine/rundir/runlog.h"
#include "engine/tune/tune.h"
#include "scripting/script.h"
#include "scripting/session.h"
#include "tui/cmd/commands.h"

#define MAX_JOBS 64
#define MAX_FAILS_IN_A_ROW 5
#define HEARTBEAT_EVERY_S 10.0
#define MAX_COLUMNS 12

/* This command's row of the table (its options and help), set on entry. */
static const dl_command *this_cmd;

typedef struct tune_args {
    const char *script;
    char **ovs;
    int nov;
    long long trials; /* < 0: the study's own */
    long long seed;   /* < 0: the study's own */
    int jobs;
    int worker; /* > 0: a worker started by --jobs, its number */
    int report;
    int quiet;
    const char *out;
    const char *device;
} tune_args;

/* What one process needs to run trials. */
typedef struct tuner {
    const tune_args *a;
    dl_study_spec spec;
    dl_study *st;
    char studies[1100];
    char prefix[24]; /* "[job 2] " for workers */
    int tty;         /* an updating status line while a trial trains */
    int line_open;
    int trial; /* the trial training now, for the status line */
    int epochs;
    double last_hb;
    dl_trial *current; /* the trial being prepared or trained */
    dl_session *sess;  /* its session (set by dl_session_prepare first thing) */
} tuner;

/* --- signals ------------------------------------------------------------------- */

static volatile sig_atomic_t interrupted;
static pid_t children[MAX_JOBS];
static int nchildren;

/* SIGINT, SIGTERM: stop at the next step boundary; a second one quits now.
 * SIGUSR1 (from the tuner to its workers, or on the tuner's death): stop,
 * without counting towards quitting - a Ctrl-C reaches the workers twice,
 * from the terminal and from the tuner. */
static void on_signal(int sig)
{
    if (sig == SIGUSR1) {
        if (!interrupted)
            interrupted = 1;
    } else if (interrupted++ > 0) {
        _exit(DL_EXIT_INTERRUPTED);
    }
    dl_session_interrupt();
    for (int i = 0; i < nchildren; i++) /* workers stop their trials too */
        if (children[i] > 0)
            kill(children[i], SIGUSR1);
}

/* --- text -------------------------------------------------------------------------- */

/* The shortest text that reads back as exactly v. */
static void number_text(double v, char *buf, size_t size)
{
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

/* A parameter's value: exact (for a command line) or short (for a table). */
static void param_text(const dl_tune_param *p, int exact, char *buf, size_t size)
{
    if (p->kind == DL_PARAM_CHOICE)
        snprintf(buf, size, "%s", p->choices[(int)p->value]);
    else if (p->kind == DL_PARAM_INT)
        snprintf(buf, size, "%ld", (long)llround(p->value));
    else if (exact)
        number_text(p->value, buf, size);
    else
        snprintf(buf, size, "%.4g", p->value);
}

/* "lr=0.0123 hidden=32 act=gelu" */
static void params_line(const dl_trial *t, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < dl_trial_param_count(t) && len < size; i++) {
        const dl_tune_param *p = dl_trial_param(t, i);
        char v[96];
        param_text(p, 0, v, sizeof v);
        len += (size_t)snprintf(buf + len, size - len, "%s%s=%s", i ? " " : "", p->name, v);
    }
}

/* Appends one shell word, quoted when it needs to be. */
static void shell_word(char *buf, size_t size, const char *w)
{
    size_t len = strlen(buf);
    int plain = *w != 0;
    for (const char *c = w; *c; c++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%", *c))
            plain = 0;
    if (plain) {
        snprintf(buf + len, size > len ? size - len : 0, " %s", w);
        return;
    }
    len += (size_t)snprintf(buf + len, size > len ? size - len : 0, " '");
    for (const char *c = w; *c && len < size; c++)
        len += (size_t)snprintf(buf + len, size - len, *c == '\'' ? "'\\''" : "%c", *c);
    snprintf(buf + len, size > len ? size - len : 0, "'");
}

static const char *value_text(double v, char *buf, size_t size)
{
    if (isfinite(v))
        snprintf(buf, size, "%.4f", v);
    else
        snprintf(buf, size, "-");
    return buf;
}

/* --- arguments ------------------------------------------------------------------------- */

static int parse_count(const char *s, long long *v)
{
    char *end;
    errno = 0;
    *v = strtoll(s, &end, 10);
    return *s && !*end && !errno && *v >= 0;
}

/* One option (its value checked) into a. Returns -1 to go on, else the
 * exit status. */
static int take_option(tune_args *a, const dl_opt *opt, const char *val)
{
    long long n;
    switch (opt->id) {
    case DL_OPT_HELP: dl_command_usage(this_cmd, stdout); return DL_EXIT_OK;
    case DL_OPT_REPORT: a->report = 1; return -1;
    case DL_OPT_QUIET: a->quiet = 1; return -1;
    case DL_OPT_OUT: a->out = val; return -1;
    case DL_OPT_DEVICE:
        if (strcmp(val, "cpu") && strcmp(val, "cuda") && strcmp(val, "auto")) {
            fprintf(stderr, "dlbench tune: --device must be cpu, cuda or auto, got '%s'\n", val);
            return DL_EXIT_USAGE;
        }
        a->device = val;
        return -1;
    default: break; /* --trials, --jobs, --seed, --worker: a count */
    }
    if (!parse_count(val, &n)) {
        fprintf(stderr, "dlbench tune: %s expects a non-negative integer, got '%s'\n", opt->name,
                val);
        return DL_EXIT_USAGE;
    }
    if (opt->id == DL_OPT_TRIALS && (n < 1 || n > 1000000)) {
        fprintf(stderr, "dlbench tune: --trials expects 1 to 1000000, got '%s'\n", val);
        return DL_EXIT_USAGE;
    }
    if (opt->id == DL_OPT_JOBS && (n < 1 || n > MAX_JOBS)) {
        fprintf(stderr, "dlbench tune: --jobs expects 1 to %d, got '%s'\n", MAX_JOBS, val);
        return DL_EXIT_USAGE;
    }
    if (opt->id == DL_OPT_TRIALS)
        a->trials = n;
    else if (opt->id == DL_OPT_SEED)
        a->seed = n;
    else if (opt->id == DL_OPT_WORKER)
        a->worker = (int)n;
    else
        a->jobs = (int)n;
    return -1;
}

/* dlbench tune's arguments into a (a->ovs is the caller's to free, also on
 * an early return). Returns -1 to go on, else the exit status. */
static int parse_args(tune_args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->trials = a->seed = -1;
    a->jobs = 1;
    a->out = "runs";
    a->ovs = calloc((size_t)argc + 1, sizeof *a->ovs);
    if (!a->ovs)
        return DL_EXIT_FAILED;
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
            fprintf(stderr, "dlbench tune: unexpected argument '%s' (overrides are NAME=VALUE)\n",
                    p.value);
            return DL_EXIT_USAGE;
        }
    }
    if (!a->script) {
        dl_command_usage(this_cmd, stderr);
        return DL_EXIT_USAGE;
    }
    return -1;
}

/* --- opening the study ----------------------------------------------------------------- */

static int open_study(tuner *tu)
{
    const dl_study_spec *sp = &tu->spec;
    dl_sampler_config sc;
    dl_pruner_config pc;
    if (dl_tune_sampler_parse(sp->sampler, &sc) < 0 || dl_tune_pruner_parse(sp->pruner, &pc) < 0)
        return DL_EINVAL;
    uint64_t seed = (uint64_t)(tu->a->seed >= 0 ? tu->a->seed : sp->seed);
    int rc = dl_study_open(&tu->st, tu->studies, sp->name,
                           sp->maximize ? DL_STUDY_MAXIMIZE : DL_STUDY_MINIMIZE, &sc, &pc, seed);
    if (rc == DL_OK)
        dl_study_set_budget(tu->st, (int)(tu->a->trials > 0 ? tu->a->trials : sp->trials));
    int skipped = rc == DL_OK ? dl_study_skipped_lines(tu->st) : 0;
    if (skipped > 0 && !tu->a->worker) {
        char more[48] = "";
        if (skipped > 1)
            snprintf(more, sizeof more, " (and %d more)", skipped - 1);
        fprintf(stderr,
                "dlbench tune: warning: %s/journal.jsonl line %ld%s: unreadable (cut short by a "
                "killed writer, or from another dlbench version): skipped; the other records "
                "are intact\n",
                dl_study_dir(tu->st), dl_study_first_skipped_line(tu->st), more);
    }
    return rc;
}

static void counts(const dl_study *st, int c[4], int *reused)
{
    memset(c, 0, 4 * sizeof *c);
    *reused = 0;
    for (int i = 0; i < dl_study_count(st); i++) {
        const dl_trial *t = dl_study_trial(st, i);
        c[dl_trial_state_of(t)]++;
        *reused += dl_trial_attr(t, "reused_from") != NULL;
    }
}

/* Run folders of trials whose process was killed still say "running":
 * marks them failed (the study queued their parameters again). A folder
 * is found by its config.json ("study": name and trial), so one whose
 * process died before the journal heard of it is found too. */
/* The trial of this study that the run in dir trained, or NULL. */
static const dl_trial *trial_of_run(const tuner *tu, const char *dir)
{
    dl_run_config cfg;
    if (dl_records_config(dir, &cfg) != DL_OK || strcmp(cfg.study, tu->spec.name) ||
        isnan(cfg.trial))
        return NULL;
    return dl_study_trial(tu->st, (int)cfg.trial);
}

static void close_lost_runs(const tuner *tu)
{
    DIR *d = opendir(tu->a->out);
    if (!d)
        return;
    const struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "studies"))
            continue;
        char dir[1300];
        snprintf(dir, sizeof dir, "%s/%s", tu->a->out, e->d_name);
        const dl_trial *t = trial_of_run(tu, dir);
        if (!t || dl_trial_state_of(t) == DL_TRIAL_RUNNING || dl_runlog_check_free(dir) < 0)
            continue; /* the journal's view, or a live process holds the run */
        dl_run_summary sum;
        if (dl_records_summary(dir, &sum) != DL_OK || strcmp(sum.status, "running"))
            continue;
        char msg[200];
        snprintf(msg, sizeof msg, "lost: the process training trial %d of study %s is gone",
                 dl_trial_number(t), tu->spec.name);
        if (dl_runlog_mark_failed(dir, msg) == DL_OK)
            dl_runlog_append_event(dir, "failed", msg);
    }
    closedir(d);
}

/* --- one trial ------------------------------------------------------------------------- */

static void end_line(tuner *tu)
{
    if (tu->line_open) {
        fputs("\r\033[K", stdout);
        tu->line_open = 0;
    }
}

static void on_step(void *user, const dl_step_info *i)
{
    tuner *tu = user;
    double t = dl_clock_mono_s();
    if (t - tu->last_hb >= HEARTBEAT_EVERY_S) { /* long epochs: stay alive for other hosts */
        dl_study_heartbeat(tu->st);
        tu->last_hb = t;
    }
    (void)i;
}

static void on_epoch(void *user, const dl_epoch_info *i)
{
    tuner *tu = user;
    tu->last_hb = dl_clock_mono_s();
    if (!tu->tty)
        return;
    const char *m = tu->spec.metric;
    double v = !strcmp(m, "val_acc")     ? i->val_acc
               : !strcmp(m, "val_loss")  ? i->val_loss
               : !strcmp(m, "train_acc") ? i->train_acc
                                         : i->train_loss;
    printf("\r\033[Ktrial %d  epoch %d/%d  %s %.4f", tu->trial, i->epoch + 1, tu->epochs, m, v);
    tu->line_open = 1;
    fflush(stdout);
}

static void on_event(void *user, const char *kind, const char *text)
{
    tuner *tu = user;
    if (!strcmp(kind, "started") && tu->current && tu->sess && dl_session_run_dir(tu->sess))
        /* the folder was just made: tie it to the trial before training starts */
        dl_trial_set_attr(tu->current, "run_dir", dl_session_run_dir(tu->sess));
    if (strcmp(kind, "error") && strcmp(kind, "warning"))
        return; /* routine: in the run's events.log */
    end_line(tu);
    printf("%s  trial %d [%s] %s\n", tu->prefix, tu->trial, kind, text);
    fflush(stdout);
}

/* The progress line of a finished trial. */
/* A trial's wall time as the progress line shows it: "12.3 s", "0.42 s",
 * "38 ms" (short trials are not "0.0 s"); "-" while it has no end. */
static void trial_duration(const dl_trial *t, char *buf, size_t size)
{
    double end = dl_trial_end_time(t), d = end - dl_trial_start_time(t);
    if (end <= 0 || d < 0)
        snprintf(buf, size, "-");
    else if (d >= 10)
        snprintf(buf, size, "%.1f s", d);
    else if (d >= 1)
        snprintf(buf, size, "%.2f s", d);
    else
        snprintf(buf, size, "%.0f ms", d * 1000);
}

static void print_trial(tuner *tu, const dl_trial *t, const char *why)
{
    end_line(tu);
    if (tu->a->quiet)
        return;
    char params[512], v[32], b[32], state[160];
    params_line(t, params, sizeof params);
    dl_trial_state s = dl_trial_state_of(t);
    const char *from = dl_trial_attr(t, "reused_from");
    if (from)
        snprintf(state, sizeof state, "complete (reused trial %s)", from);
    else if (why && !strncmp(why, dl_trial_state_name(s), strlen(dl_trial_state_name(s))))
        snprintf(state, sizeof state, "%s", why); /* "pruned after epoch 2 (...)" */
    else
        snprintf(state, sizeof state, "%s%s%s", dl_trial_state_name(s), why && *why ? ": " : "",
                 why ? why : "");
    char dur[32];
    trial_duration(t, dur, sizeof dur);
    const dl_trial *best = dl_study_best(tu->st);
    printf("%strial %d  %s  %s %s  %s  %s", tu->prefix, dl_trial_number(t), params, tu->spec.metric,
           value_text(dl_trial_value(t), v, sizeof v), state, dur);
    if (best)
        printf("  best %s (trial %d)", value_text(dl_trial_value(best), b, sizeof b),
               dl_trial_number(best));
    printf("\n");
    fflush(stdout);
}

/* The k=v overrides (and device) as the trial's "overrides" attribute: a
 * JSON array of the words to add to `dlbench run SCRIPT`. */
static void set_override_attr(tuner *tu, dl_trial *t)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < tu->a->nov; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(tu->a->ovs[i]));
    if (tu->a->device) {
        cJSON_AddItemToArray(a, cJSON_CreateString("--device"));
        cJSON_AddItemToArray(a, cJSON_CreateString(tu->a->device));
    }
    char *text = cJSON_PrintUnformatted(a);
    if (text)
        dl_trial_set_attr(t, "overrides", text);
    free(text);
    cJSON_Delete(a);
}

enum { TRIAL_DONE, TRIAL_FAILED, TRIAL_STOP };

/* Runs one asked trial to its end: the objective (a Lua error there stops
 * the study: the script is wrong), reuse of an equal finished trial, the
 * run folder and training. *status gets the exit status when it returns
 * TRIAL_STOP. */
/* The trial's parameters suggested by loading the script as a study, or
 * the reason it failed. -1 to go on, else a TRIAL_* outcome with *status. */
static int suggest(tuner *tu, dl_trial *t, int *status)
{
    const tune_args *a = tu->a;
    dl_script_options so = {a->script, a->ovs, a->nov, 0};
    dl_script *sc = NULL;
    int rc = dl_script_load_study(&sc, &so, t, 0); /* suggests the parameters */
    dl_script_destroy(sc);
    if (rc >= 0)
        return -1;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dl_error_message());
    dl_study_tell(tu->st, t, DL_TRIAL_FAILED, NAN);
    if (interrupted) {
        *status = DL_EXIT_INTERRUPTED;
        return TRIAL_STOP;
    }
    print_trial(tu, t, "the objective failed");
    fprintf(stderr, "dlbench tune: error: %s\n", msg);
    *status = dl_exit_for(rc);
    return TRIAL_STOP;
}

/* The trial's session prepared into tu->sess. -1 to go on, else a TRIAL_*
 * outcome with *status (a failed preparation is told to the study). */
static int prepare_trial(tuner *tu, dl_trial *t, int *status)
{
    const tune_args *a = tu->a;
    dl_session_options o;
    memset(&o, 0, sizeof o);
    o.script = a->script;
    o.overrides = a->ovs;
    o.noverrides = a->nov;
    o.device = a->device;
    o.seed = -1;
    o.out_dir = a->out;
    o.force = 1; /* equal trials are the study's to reuse, not the run guard's */
    o.trial = t;
    o.user = tu;
    o.on_step = on_step;
    o.on_epoch = on_epoch;
    o.on_event = on_event;
    tu->current = t;
    tu->sess = NULL;
    int rc = dl_session_prepare(&tu->sess, &o);
    if (rc >= 0)
        return -1;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dl_error_message());
    dl_session_destroy(tu->sess);
    tu->sess = NULL;
    tu->current = NULL;
    dl_study_tell(tu->st, t, DL_TRIAL_FAILED, NAN);
    if (interrupted) {
        *status = DL_EXIT_INTERRUPTED;
        return TRIAL_STOP;
    }
    print_trial(tu, t, msg);
    if (rc == DL_ESHAPE) /* these parameters do not fit: the next ones may */
        return TRIAL_FAILED;
    /* missing data, no such device: every trial would fail alike */
    fprintf(stderr, "dlbench tune: error: %s\n", msg);
    *status = dl_exit_for(rc);
    return TRIAL_STOP;
}

/* How the trained trial ended, told to the study; why gets the reason
 * printed with it. Returns a TRIAL_* outcome (with *status for a stop). */
static int tell_outcome(tuner *tu, dl_trial *t, dl_run_status st, char *why, size_t size,
                        int *status)
{
    dl_session *s = tu->sess;
    double fin = NAN, best = NAN;
    if (st == DL_RUN_STOPPED && dl_session_interrupted() && !dl_session_pruned(s)) {
        /* left running in the journal: the next `dlbench tune` finds this
         * process gone and runs the trial's parameters again */
        end_line(tu);
        printf("%strial %d interrupted (run folder %s); it runs again when the study resumes\n",
               tu->prefix, tu->trial, dl_session_run_dir(s));
        *status = DL_EXIT_INTERRUPTED;
        return TRIAL_STOP;
    }
    if (st == DL_RUN_FAILED || dl_session_pruned(s)) {
        snprintf(why, size, "%s", dl_session_message(s));
        dl_study_tell(tu->st, t, st == DL_RUN_FAILED ? DL_TRIAL_FAILED : DL_TRIAL_PRUNED, NAN);
        return st == DL_RUN_FAILED ? TRIAL_FAILED : TRIAL_DONE;
    }
    if (!dl_session_metric(s, tu->spec.metric, &fin, &best)) {
        dl_study_tell(tu->st, t, DL_TRIAL_FAILED, NAN);
        print_trial(tu, t, "no value");
        fprintf(stderr,
                "dlbench tune: error: %s: the study's metric %s was never computed (an "
                "experiment without validation data?)\n",
                tu->a->script, tu->spec.metric);
        *status = DL_EXIT_USAGE;
        return TRIAL_STOP;
    }
    dl_study_tell(tu->st, t, DL_TRIAL_COMPLETE, fin);
    if (!isfinite(fin))
        snprintf(why, size, "%s is not finite (diverged)", tu->spec.metric);
    return isfinite(fin) ? TRIAL_DONE : TRIAL_FAILED;
}

static int run_trial(tuner *tu, dl_trial *t, int *status)
{
    tu->trial = dl_trial_number(t);
    int result = suggest(tu, t, status);
    if (result >= 0)
        return result;
    dl_study_refresh(tu->st); /* other workers' results, for reuse */
    if (dl_study_reuse(tu->st, t) == 1) {
        print_trial(tu, t, NULL);
        return TRIAL_DONE;
    }
    set_override_attr(tu, t);
    if ((result = prepare_trial(tu, t, status)) >= 0)
        return result;
    tu->epochs = dl_trainer_config_of(dl_session_trainer(tu->sess))->epochs;
    tu->last_hb = dl_clock_mono_s();
    dl_run_status st = dl_session_run(tu->sess);
    char why[1100] = "";
    result = tell_outcome(tu, t, st, why, sizeof why, status);
    if (result != TRIAL_STOP)
        print_trial(tu, t, why);
    dl_session_destroy(tu->sess);
    tu->sess = NULL;
    tu->current = NULL;
    return result;
}

static void print_summary(tuner *tu)
{
    int c[4], reused;
    dl_study_refresh(tu->st);
    counts(tu->st, c, &reused);
    printf("study %s: %d trials: %d complete", dl_study_name(tu->st), dl_study_count(tu->st),
           c[DL_TRIAL_COMPLETE]);
    if (reused)
        printf(" (%d reused)", reused);
    printf(", %d pruned, %d failed", c[DL_TRIAL_PRUNED], c[DL_TRIAL_FAILED]);
    if (c[DL_TRIAL_RUNNING])
        printf(", %d running", c[DL_TRIAL_RUNNING]);
    printf("\n");
    const dl_trial *b = dl_study_best(tu->st);
    if (b) {
        char params[512], v[32];
        params_line(b, params, sizeof params);
        printf("best: trial %d  %s %s  %s\n", dl_trial_number(b), tu->spec.metric,
               value_text(dl_trial_value(b), v, sizeof v), params);
    }
    printf("report: dlbench tune %s", tu->a->script);
    if (strcmp(tu->a->out, "runs"))
        printf(" --out %s", tu->a->out);
    printf(" --report\n");
    fflush(stdout);
}

/* Asks and runs trials until the study's budget is spent. */
static int work(tuner *tu)
{
    int status = 0, fails = 0, ran = 0;
    if (!tu->a->worker) {
        close_lost_runs(tu);
        int c[4], reused;
        counts(tu->st, c, &reused);
        if (dl_study_count(tu->st) > 0)
            printf("resuming: %d trials recorded (%d complete, %d pruned, %d failed)\n",
                   dl_study_count(tu->st), c[DL_TRIAL_COMPLETE], c[DL_TRIAL_PRUNED],
                   c[DL_TRIAL_FAILED]);
        fflush(stdout);
    }
    while (!interrupted) {
        dl_trial *t = NULL;
        int rc = dl_study_ask(tu->st, &t);
        if (rc == DL_STUDY_DONE) {
            if (!ran && !tu->a->worker)
                printf("nothing to do: the study has its %d trials (raise --trials to add "
                       "more)\n",
                       dl_study_count(tu->st));
            break;
        }
        ran++;
        if (rc < 0) {
            fprintf(stderr, "dlbench tune: error: %s\n", dl_error_message());
            return DL_EXIT_FAILED;
        }
        int r = run_trial(tu, t, &status);
        if (r == TRIAL_STOP)
            return status;
        fails = r == TRIAL_FAILED ? fails + 1 : 0;
        if (fails >= MAX_FAILS_IN_A_ROW) {
            fprintf(stderr, "dlbench tune: %s%d trials in a row failed: stopping the study\n",
                    tu->prefix, fails);
            return DL_EXIT_FAILED;
        }
    }
    return interrupted ? DL_EXIT_INTERRUPTED : DL_EXIT_OK;
}

/* --jobs N: N worker processes (this binary again, `tune ... --worker K`),
 * each with its own study handle; the journal's lock keeps them apart. */
static int run_jobs(tuner *tu)
{
    const tune_args *a = tu->a;
    char trials[32], seed[32], wk[16];
    snprintf(trials, sizeof trials, "%lld", a->trials > 0 ? a->trials : (long long)tu->spec.trials);
    snprintf(seed, sizeof seed, "%lld", a->seed >= 0 ? a->seed : tu->spec.seed);
    char **argv = calloc((size_t)a->nov + 20, sizeof *argv);
    if (!argv)
        return DL_EXIT_FAILED;
    int n = 0;
    argv[n++] = "dlbench";
    argv[n++] = "tune";
    argv[n++] = (char *)a->script;
    for (int i = 0; i < a->nov; i++)
        argv[n++] = a->ovs[i];
    argv[n++] = "--trials";
    argv[n++] = trials;
    argv[n++] = "--seed";
    argv[n++] = seed;
    argv[n++] = "--out";
    argv[n++] = (char *)a->out;
    if (a->device) {
        argv[n++] = "--device";
        argv[n++] = (char *)a->device;
    }
    argv[n++] = "--worker";
    argv[n++] = wk;
    argv[n] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t me = getpid();
    for (int k = 0; k < a->jobs && !interrupted; k++) {
        snprintf(wk, sizeof wk, "%d", k + 1);
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "dlbench tune: fork: %s\n", strerror(errno));
            break;
        }
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGUSR1); /* a killed tuner stops its workers */
            if (getppid() != me)
                _exit(DL_EXIT_INTERRUPTED);
            execv("/proc/self/exe", argv);
            fprintf(stderr, "dlbench tune: cannot start a worker: %s\n", strerror(errno));
            _exit(1);
        }
        children[nchildren++] = pid;
    }
    free(argv);
    int status = 0;
    for (int i = 0; i < nchildren; i++) {
        int ws = 0;
        while (waitpid(children[i], &ws, 0) < 0 && errno == EINTR)
            ;
        children[i] = 0;
        int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
        if (code > status)
            status = code;
    }
    nchildren = 0;
    return interrupted ? DL_EXIT_INTERRUPTED : status;
}

/* --- the report ----------------------------------------------------------------------- */

static void print_command(const tuner *tu, const dl_trial *b)
{
    char cmd[4096] = "dlbench run";
    shell_word(cmd, sizeof cmd, tu->a->script);
    cJSON *ov = cJSON_Parse(dl_trial_attr(b, "overrides") ? dl_trial_attr(b, "overrides") : "[]");
    const cJSON *w;
    int device = 0;
    cJSON_ArrayForEach(w, ov)
    {
        if (!cJSON_IsString(w))
            continue;
        if (!strcmp(w->valuestring, "--device")) { /* after the parameters */
            device = 1;
            continue;
        }
        if (!device)
            shell_word(cmd, sizeof cmd, w->valuestring);
    }
    for (int i = 0; i < dl_trial_param_count(b); i++) {
        const dl_tune_param *p = dl_trial_param(b, i);
        char v[96], word[200];
        param_text(p, 1, v, sizeof v);
        snprintf(word, sizeof word, "%s=%s", p->name, v);
        shell_word(cmd, sizeof cmd, word);
    }
    device = 0;
    cJSON_ArrayForEach(w, ov)
    {
        if (cJSON_IsString(w) && (device || !strcmp(w->valuestring, "--device"))) {
            shell_word(cmd, sizeof cmd, w->valuestring);
            device = 1;
        }
    }
    cJSON_Delete(ov);
    printf("reproduce the best run:\n  %s\n", cmd);
}

static int report(tuner *tu)
{
    char path[1300];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s/journal.jsonl", tu->studies, tu->spec.name);
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "dlbench tune: no study '%s' in %s (start it with: dlbench tune %s)\n",
                tu->spec.name, tu->studies, tu->a->script);
        return DL_EXIT_USAGE;
    }
    int rc = open_study(tu);
    if (rc < 0) {
        fprintf(stderr, "dlbench tune: error: %s\n", dl_error_message());
        return dl_exit_for(rc);
    }
    const dl_study *st = tu->st;
    int c[4], reused;
    counts(st, c, &reused);
    printf("study %s (%s/%s): %s, %s; %d trials: %d complete, %d pruned, %d failed, %d running\n",
           tu->spec.name, tu->studies, tu->spec.name, tu->spec.metric,
           tu->spec.maximize ? "maximize" : "minimize", dl_study_count(st), c[DL_TRIAL_COMPLETE],
           c[DL_TRIAL_PRUNED], c[DL_TRIAL_FAILED], c[DL_TRIAL_RUNNING]);
    const dl_trial *b = dl_study_best(st);
    char v[32];
    if (!b) {
        printf("no trial is complete yet\n");
    } else {
        printf("\nbest: trial %d  %s %s", dl_trial_number(b), tu->spec.metric,
               value_text(dl_trial_value(b), v, sizeof v));
        const char *from = dl_trial_attr(b, "reused_from");
        const char *dir = dl_trial_attr(b, "run_dir");
        if (from)
            printf("  (reused trial %s)", from);
        if (dir)
            printf("  run %s", dir);
        printf("\n");
        for (int i = 0; i < dl_trial_param_count(b); i++) {
            const dl_tune_param *p = dl_trial_param(b, i);
            char val[96], dist[600];
            param_text(p, 1, val, sizeof val);
            if (p->kind == DL_PARAM_CHOICE) {
                size_t len = (size_t)snprintf(dist, sizeof dist, "one of");
                for (int k = 0; k < p->n_choices && len < sizeof dist; k++)
                    len += (size_t)snprintf(dist + len, sizeof dist - len, " %s", p->choices[k]);
            } else {
                snprintf(dist, sizeof dist, "%s in [%g, %g]%s",
                         p->kind == DL_PARAM_INT ? "int" : "float", p->lo, p->hi,
                         p->log ? ", log" : "");
            }
            printf("  %-14s %-14s %s\n", p->name, val, dist);
        }
    }
    /* the table: parameters as columns, in the order they first appear */
    const char *cols[MAX_COLUMNS];
    int ncols = 0;
    for (int i = 0; i < dl_study_count(st); i++) {
        const dl_trial *t = dl_study_trial(st, i);
        for (int k = 0; k < dl_trial_param_count(t); k++) {
            const char *name = dl_trial_param(t, k)->name;
            int seen = 0;
            for (int j = 0; j < ncols && !seen; j++)
                seen = !strcmp(cols[j], name);
            if (!seen && ncols < MAX_COLUMNS)
                cols[ncols++] = name;
        }
    }
    printf("\n%5s  %-9s %10s %9s", "trial", "state", tu->spec.metric, "seconds");
    for (int j = 0; j < ncols; j++)
        printf(j + 1 < ncols ? "  %-10s" : "  %s", cols[j]);
    printf("\n");
    for (int i = 0; i < dl_study_count(st); i++) {
        const dl_trial *t = dl_study_trial(st, i);
        double end = dl_trial_end_time(t);
        char dur[32] = "-";
        if (end > 0) /* seconds with 3 digits: a 40 ms trial is not "0.0" */
            snprintf(dur, sizeof dur, "%.3g", end - dl_trial_start_time(t));
        printf("%5d%s %-9s %10s %9s", dl_trial_number(t), t == b ? "*" : " ",
               dl_trial_state_name(dl_trial_state_of(t)),
               value_text(dl_trial_value(t), v, sizeof v), dur);
        for (int j = 0; j < ncols; j++) {
            const dl_tune_param *p = dl_trial_param_find(t, cols[j]);
            char val[96] = "-";
            if (p)
                param_text(p, 0, val, sizeof val);
            printf(j + 1 < ncols ? "  %-10s" : "  %s", val);
        }
        const char *from = dl_trial_attr(t, "reused_from");
        if (from)
            printf("  (reused trial %s)", from);
        printf("\n");
    }
    if (b) {
        printf("\n");
        print_command(tu, b);
    }
    return 0;
}

/* --- the command --------------------------------------------------------------------- */

int dl_cmd_tune(const dl_command *self, int argc, char **argv)
{
    this_cmd = self;
    tune_args a;
    int status = parse_args(&a, argc, argv);
    if (status >= 0) {
        free(a.ovs);
        return status;
    }
    tuner tu;
    memset(&tu, 0, sizeof tu);
    tu.a = &a;
    snprintf(tu.studies, sizeof tu.studies, "%s/studies", a.out);
    if (a.worker)
        snprintf(tu.prefix, sizeof tu.prefix, "[job %d] ", a.worker);

    /* the study's settings: the script runs, the objective does not */
    dl_script_options so = {a.script, a.ovs, a.nov, 0};
    dl_script *sc = NULL;
    int rc = dl_script_load_study(&sc, &so, NULL, 1);
    if (rc < 0) {
        fprintf(stderr, "dlbench tune: error: %s\n", dl_error_message());
        free(a.ovs);
        return dl_exit_for(rc);
    }
    const dl_experiment *e = dl_script_experiment(sc);
    int is_study = e->is_study;
    tu.spec = e->study;
    dl_script_destroy(sc);
    if (!is_study) {
        fprintf(stderr,
                "dlbench tune: %s returns an experiment, not a study: train it with `dlbench run "
                "%s`, or return dl.study{objective = function (trial) ... end, ...}\n",
                a.script, a.script);
        free(a.ovs);
        return DL_EXIT_USAGE;
    }
    if (a.report) {
        status = report(&tu);
        dl_study_destroy(tu.st);
        free(a.ovs);
        return status;
    }

    struct sigaction sa, old_int, old_term, old_usr1;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGUSR1, &sa, &old_usr1);

    rc = open_study(&tu);
    if (rc < 0) {
        fprintf(stderr, "dlbench tune: error: %s\n", dl_error_message());
        status = dl_exit_for(rc);
    } else {
        tu.tty = !a.worker && a.jobs == 1 && !a.quiet && isatty(1);
        if (!a.worker) {
            printf("study %s: %s (%s), %s sampler, %s pruner, %lld trials; journal "
                   "%s/journal.jsonl\n",
                   tu.spec.name, tu.spec.metric, tu.spec.maximize ? "maximize" : "minimize",
                   tu.spec.sampler, tu.spec.pruner,
                   a.trials > 0 ? a.trials : (long long)tu.spec.trials, dl_study_dir(tu.st));
            if (a.jobs > 1)
                printf("%d worker processes\n", a.jobs);
        }
        if (a.jobs > 1 && !a.worker) {
            close_lost_runs(&tu);
            status = run_jobs(&tu);
        } else {
            status = work(&tu);
        }
        if (!a.worker)
            print_summary(&tu);
    }
    dl_study_destroy(tu.st);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGUSR1, &old_usr1, NULL);
    free(a.ovs);
    return status;
}
