/* workbench.c - `dlbench [SCRIPT]`: the workbench: a training on its own thread, the screen on this one */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/observe/monitor.h"
#include "engine/observe/profiler.h"
#include "engine/observe/telemetry.h"
#include "engine/rundir/rundir.h"
#include "engine/rundir/runlog.h"
#include "scripting/session.h"
#include "tui/app.h"
#include "tui/cmd/commands.h"
#include "tui/control.h"
#include "tui/wb_lua.h"

#define MAX_OVERRIDES 64

/* This command's row of the table (its options and help), set on entry. */
static const dl_command *this_cmd;

typedef struct wb {
    dl_telemetry *tele; /* what the screen draws: the session publishes into it */
    double price;       /* --price-per-hour, DLBENCH_PRICE_PER_HOUR */
    dl_monitor *mon;
    /* options for the next start */
    const char *script;
    const char *out_dir;
    const char *device;
    long long seed;
    int force_next;
    int no_mouse; /* --no-mouse */
    char *ovs[MAX_OVERRIDES];
    int nov;
    /* the e prompt's FIELD=VALUE for the experiment's own fields (as --set) */
    char *sets[MAX_OVERRIDES];
    int nsets;
    /* the training thread */
    pthread_mutex_t lock; /* guards session */
    pthread_t thread;
    int thread_live;     /* joined when 0 and started */
    _Atomic int running; /* the thread is between start and its end (read by the UI) */
    dl_session *session; /* NULL outside prepare..run */
    char last_run[1024];
    double last_prof; /* when the profile was last copied */
    dl_profiler *prof;
    dl_wb_lua *lua; /* lines for the Lua prompt, run on the trainer thread */
    int quit;
    /* output of the process (Lua print, library messages) into the log */
    int out_pipe; /* read end, -1 when not redirected */
    char out_buf[1024];
    size_t out_len;
} wb;

/* --- sinks: the trainer thread --------------------------------------------------- */

static void on_step(void *user, const dl_step_info *i)
{
    wb *w = user;
    (void)i;
    double now = dl_clock_mono_s();
    if (w->prof && now - w->last_prof >= 1.0) { /* the table at 1 Hz: the copy is small */
        w->last_prof = now;
        dl_telemetry_profile(w->tele, w->prof);
    }
}

static void on_idle(void *user)
{
    wb *w = user;
    pthread_mutex_lock(&w->lock);
    dl_session *s = w->session;
    pthread_mutex_unlock(&w->lock);
    if (s)
        dl_wb_lua_poll(w->lua, s, w->tele);
}

/* The monitor writes the live run's system.jsonl itself (dl_monitor_set_log). */
static void monitor_sink(void *user, const dl_sys_sample *smp)
{
    wb *w = user;
    dl_telemetry_system(w->tele, smp);
}

/* --- the training thread ----------------------------------------------------------- */

static void *train(void *arg)
{
    wb *w = arg;
    dl_session_options o;
    memset(&o, 0, sizeof o);
    o.script = w->script;
    o.overrides = w->ovs;
    o.noverrides = w->nov;
    o.sets = w->sets;
    o.nsets = w->nsets;
    o.device = w->device;
    o.seed = w->seed;
    o.out_dir = w->out_dir;
    o.force = w->force_next;
    o.user = w;
    o.on_step = on_step;
    o.on_idle = on_idle;
    o.telemetry = w->tele;
    o.price_per_hour = w->price;
    w->force_next = 0;
    dl_session *s = NULL;
    int rc = dl_session_prepare(&s, &o);
    if (rc == DL_SESSION_DUPLICATE) {
        char msg[1400];
        snprintf(msg, sizeof msg,
                 "a finished run has the same configuration: %s; press r "
                 "again to run it anyway",
                 dl_session_duplicate(s));
        dl_telemetry_event(w->tele, "warning", msg);
        dl_telemetry_set_state(w->tele, DL_TELE_IDLE, NULL);
        w->force_next = 1;
    } else if (rc < 0) {
        dl_telemetry_event(w->tele, "error", dl_error_message());
        dl_telemetry_set_state(w->tele, DL_TELE_FAILED, dl_error_message());
    } else {
        dl_trainer *t = dl_session_trainer(s);
        char why[1200];
        snprintf(w->last_run, sizeof w->last_run, "%s", dl_session_run_dir(s));
        if (w->prof) {
            dl_profiler_reset(w->prof);
            if (dl_trainer_set_profiler(t, w->prof) < 0)
                dl_telemetry_event(w->tele, "warning", "profiler not attached: out of memory");
        }
        pthread_mutex_lock(&w->lock);
        w->session = s;
        pthread_mutex_unlock(&w->lock);
        if (w->mon)
            dl_monitor_set_log(
                w->mon, dl_rundir_path(dl_session_run_dir(s), DL_RUN_FILE_SYSTEM, why, sizeof why));
        dl_control *ctl = NULL;
        if (dl_control_start(&ctl, dl_session_run_dir(s), t, why, sizeof why) < 0)
            dl_telemetry_event(w->tele, "warning", why);
        dl_session_run(s);
        dl_control_stop(ctl);
        if (w->prof)
            dl_telemetry_profile(w->tele, w->prof);
        dl_trainer_set_profiler(t, NULL);
        pthread_mutex_lock(&w->lock);
        w->session = NULL;
        pthread_mutex_unlock(&w->lock);
        if (w->mon)
            dl_monitor_set_log(w->mon, NULL);
    }
    dl_session_destroy(s);
    w->running = 0;
    return NULL;
}

static void start(wb *w)
{
    if (w->running) {
        dl_telemetry_event(w->tele, "info",
                           "a training is already running (Space pauses, q stops)");
        return;
    }
    if (w->thread_live) {
        pthread_join(w->thread, NULL);
        w->thread_live = 0;
    }
    dl_telemetry_reset(w->tele);
    dl_telemetry_set_state(w->tele, DL_TELE_PREPARING, NULL);
    dl_telemetry_event(w->tele, "info", "preparing the run (script, data, model)...");
    w->running = 1;
    if (pthread_create(&w->thread, NULL, train, w) != 0) {
        w->running = 0;
        dl_telemetry_event(w->tele, "error", "cannot start the training thread");
        return;
    }
    w->thread_live = 1;
}

/* Posts a command to the live trainer; 0 when there is none. */
static int post(wb *w, dl_command_kind k, double v, const char *text)
{
    int ok = 0;
    pthread_mutex_lock(&w->lock);
    if (w->session) {
        ok = dl_trainer_post(dl_session_trainer(w->session), k, v, text) == 0;
        if (!ok)
            dl_telemetry_event(w->tele, "warning", "the command queue is full; try again");
        else
            ok = 1;
    }
    pthread_mutex_unlock(&w->lock);
    return ok;
}

static void hparams(wb *w, const char *line)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", line);
    char *save = NULL;
    for (char *tok = strtok_r(buf, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok) {
            char msg[300];
            snprintf(msg, sizeof msg, "'%s' is not k=v", tok);
            dl_telemetry_event(w->tele, "error", msg);
            continue;
        }
        if (!strncmp(tok, "lr=", 3)) {
            char *end;
            double lr = strtod(eq + 1, &end);
            if (*end || !(lr > 0) || !isfinite(lr))
                dl_telemetry_event(w->tele, "error", "lr must be a positive number");
            else if (post(w, DL_CMD_SET_LR, lr, NULL))
                dl_telemetry_event(w->tele, "info", "new learning rate queued for the next step");
        }
        /* kept for the next start (lr too: a restart uses it from step 0):
         * the experiment's own fields as --set does (the script need not
         * declare them), anything else as a k=v hyperparameter override */
        int is_set = dl_session_set_field(tok);
        if (is_set && dl_session_set_check(tok) != DL_OK) {
            dl_telemetry_event(w->tele, "error", dl_error_message());
            continue;
        }
        char **list = is_set ? w->sets : w->ovs;
        int *nlist = is_set ? &w->nsets : &w->nov;
        int k;
        for (k = 0; k < *nlist; k++)
            if (!strncmp(list[k], tok, (size_t)(eq - tok) + 1))
                break;
        if (k == MAX_OVERRIDES)
            continue;
        char *dup = strdup(tok);
        if (!dup)
            continue;
        if (k < *nlist)
            free(list[k]);
        else
            (*nlist)++;
        list[k] = dup;
        char msg[300];
        snprintf(msg, sizeof msg, "%s%s applies from the next start (r)", is_set ? "--set " : "",
                 tok);
        if (strncmp(tok, "lr=", 3))
            dl_telemetry_event(w->tele, "info", msg);
    }
}

static void action(void *user, dl_action a, const char *arg)
{
    wb *w = user;
    switch (a) {
    case DL_ACT_START: start(w); break;
    case DL_ACT_PAUSE:
        if (!post(w, !strcmp(arg, "resume") ? DL_CMD_RESUME : DL_CMD_PAUSE, 0, NULL))
            dl_telemetry_event(w->tele, "info", "nothing to pause: r starts the training");
        break;
    case DL_ACT_GPU:
    case DL_ACT_CPU: {
        const char *dev = a == DL_ACT_GPU ? "cuda" : "cpu";
        if (post(w, DL_CMD_SWITCH, 0, dev)) {
            char msg[96];
            snprintf(msg, sizeof msg, "moving to %s at the next step boundary...", dev);
            dl_telemetry_event(w->tele, "info", msg);
        } else {
            w->device = a == DL_ACT_GPU ? "cuda" : "cpu";
            char msg[96];
            snprintf(msg, sizeof msg, "the next start runs on %s", w->device);
            dl_telemetry_event(w->tele, "info", msg);
        }
        break;
    }
    case DL_ACT_PARITY:
        if (post(w, DL_CMD_PARITY, 5, ""))
            dl_telemetry_event(w->tele, "info",
                               "parity check against the other device "
                               "(5 steps) at the next step boundary...");
        else
            dl_telemetry_event(w->tele, "info", "no training running: r starts one");
        break;
    case DL_ACT_PROBE:
        if (post(w, DL_CMD_PROBE, 20, NULL))
            dl_telemetry_event(w->tele, "info",
                               "what-if probes (20 steps each) at the next step boundary; the "
                               "training goes on where it was...");
        else
            dl_telemetry_event(w->tele, "info", "no training running: r starts one");
        break;
    case DL_ACT_CHECKPOINT:
        if (!post(w, DL_CMD_CHECKPOINT, 0, ""))
            dl_telemetry_event(w->tele, "info", "no training running: nothing to checkpoint");
        break;
    case DL_ACT_NOTE:
        if (!post(w, DL_CMD_NOTE, 0, arg)) {
            if (w->last_run[0] && dl_runlog_append_event(w->last_run, "note", arg) == 0)
                dl_telemetry_event(w->tele, "note", arg);
            else
                dl_telemetry_event(w->tele, "info", "no run yet to note: r starts one");
        }
        break;
    case DL_ACT_HPARAMS: hparams(w, arg); break;
    case DL_ACT_LUA:
        if (!w->running) {
            dl_telemetry_event(w->tele, "info",
                               "the Lua prompt runs in a live training: r starts one");
        } else {
            char echo[300];
            snprintf(echo, sizeof echo, "> %s", arg);
            dl_telemetry_event(w->tele, "lua", echo);
            if (dl_wb_lua_push(w->lua, arg) < 0)
                dl_telemetry_event(w->tele, "lua error", "too many lines waiting; try again");
        }
        break;
    case DL_ACT_QUIT:
        w->quit = 1;
        if (!post(w, DL_CMD_STOP, 0, NULL) && w->running)
            dl_session_interrupt(); /* still preparing */
        break;
    }
}

/* Lines the process writes to stdout/stderr (Lua print, library warnings)
 * go to the log pane. */
static void sample(void *user, dl_screen *scr)
{
    wb *w = user;
    snprintf(scr->source, sizeof scr->source, "workbench");
    snprintf(scr->script, sizeof scr->script, "%s", w->script);
    snprintf(scr->prof_note, sizeof scr->prof_note, "%s",
             w->prof ? "the op table fills once training runs"
                     : "profiler unavailable (out of memory)");
    if (w->out_pipe < 0)
        return;
    for (;;) {
        ssize_t n = read(w->out_pipe, w->out_buf + w->out_len, sizeof w->out_buf - 1 - w->out_len);
        if (n <= 0)
            break;
        w->out_len += (size_t)n;
        w->out_buf[w->out_len] = 0;
        char *nl;
        while ((nl = strchr(w->out_buf, '\n'))) {
            *nl = 0;
            if (w->out_buf[0])
                dl_telemetry_event(w->tele, "print", w->out_buf);
            size_t used = (size_t)(nl - w->out_buf) + 1;
            memmove(w->out_buf, w->out_buf + used, w->out_len - used + 1);
            w->out_len -= used;
        }
        if (w->out_len == sizeof w->out_buf - 1) {
            dl_telemetry_event(w->tele, "print", w->out_buf);
            w->out_len = 0;
        }
    }
}

static int busy(void *user) { return ((wb *)user)->running; }
static int done(void *user) { return !((wb *)user)->running; }

/* dlbench [SCRIPT] [k=v ...] [options] into w (its defaults set first;
 * the overrides strdup'ed). Returns -1 to go on, else the exit status. */
static int parse_args(wb *w, int *autostart, int argc, char **argv)
{
    int script_set = 0;
    w->script = "scripts/fmnist_mlp.lua";
    w->out_dir = "runs";
    w->seed = -1;
    if (dl_price_parse(NULL, &w->price) < 0) {
        fprintf(stderr, "dlbench: DLBENCH_PRICE_PER_HOUR must be a number >= 0\n");
        return DL_EXIT_USAGE;
    }
    dl_opts args;
    dl_command_opts(&args, this_cmd, argc, argv);
    for (int id; (id = dl_opts_next(&args)) != DL_OPTS_END;) {
        const char *v = args.value;
        if (id == DL_OPTS_ERROR) {
            return DL_EXIT_USAGE;
        } else if (id == DL_OPT_HELP) {
            dl_command_usage(this_cmd, stdout);
            return DL_EXIT_OK;
        } else if (id == DL_OPT_START) {
            *autostart = 1;
        } else if (id == DL_OPT_FORCE) {
            w->force_next = 1;
        } else if (id == DL_OPT_NO_MOUSE) {
            w->no_mouse = 1;
        } else if (id == DL_OPT_PRICE) {
            if (dl_price_parse(v, &w->price) < 0) {
                fprintf(stderr, "dlbench: --price-per-hour expects a number >= 0, got '%s'\n", v);
                return DL_EXIT_USAGE;
            }
        } else if (id == DL_OPT_OUT) {
            w->out_dir = v;
        } else if (id == DL_OPT_DEVICE) {
            w->device = v;
        } else if (id == DL_OPT_SEED) {
            w->seed = atoll(v);
        } else if (strchr(v, '=') && w->nov < MAX_OVERRIDES) {
            w->ovs[w->nov++] = strdup(v);
        } else if (!script_set) {
            w->script = v;
            script_set = 1;
        } else {
            fprintf(stderr, "dlbench: unexpected argument '%s'\n", v);
            return DL_EXIT_USAGE;
        }
    }
    return -1;
}

/* The telemetry, the Lua prompt, the profiler and the monitor (its thread
 * started). -1 when out of memory. */
static int setup(wb *w, int autostart)
{
    dl_telemetry_create(&w->tele);
    w->lua = dl_wb_lua_create();
    if (!w->tele || !w->lua)
        return -1;
    /* the live profile samples one step in 16: its cost stays well under 1% */
    dl_profiler_options popt;
    dl_profiler_options_default(&popt);
    popt.sample_every = 16;
    dl_profiler_create(&w->prof, &popt);
    dl_monitor_options mo;
    dl_monitor_options_default(&mo);
    mo.sink = monitor_sink;
    mo.user = w;
    if (dl_monitor_create(&w->mon, &mo) == 0)
        dl_monitor_start(w->mon);
    dl_telemetry_set_gpu_status(w->tele, w->mon ? dl_monitor_gpu_status(w->mon) : "no monitor");
    dl_telemetry_set_cost(w->tele, w->price, 0, NULL);
    dl_telemetry_event(w->tele, "info",
                       autostart ? "starting the training"
                                 : "ready: r starts the training, ? shows the keys");
    return 0;
}

/* The terminal keeps a descriptor of its own (returned; -1 when none);
 * stdout and stderr go to the log pane (Lua print, library messages). */
static int redirect_output(wb *w)
{
    int term_fd = dup(STDOUT_FILENO);
    int p[2];
    if (term_fd >= 0 && pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0) {
        fflush(stdout);
        fflush(stderr);
        dup2(p[1], STDOUT_FILENO);
        dup2(p[1], STDERR_FILENO);
        close(p[1]);
        w->out_pipe = p[0];
        setvbuf(stdout, NULL, _IOLBF, 0);
    }
    return term_fd;
}

/* The terminal is gone: train on, headless, logging to the run folder. */
static void detach(wb *w)
{
    int fd = -1;
    if (w->last_run[0]) {
        char path[1200];
        fd = open(dl_rundir_path(w->last_run, DL_RUN_FILE_OUTPUT, path, sizeof path),
                  O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    }
    if (fd < 0)
        fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
    }
    int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (nul >= 0) {
        dup2(nul, STDIN_FILENO);
        close(nul);
    }
    if (w->last_run[0])
        dl_runlog_append_event(w->last_run, "detached",
                               "the terminal hung up; training continues headless "
                               "(dlbench watch reattaches)");
}

static void teardown(wb *w, int term_fd)
{
    dl_monitor_destroy(w->mon);
    dl_profiler_destroy(w->prof);
    dl_wb_lua_destroy(w->lua);
    dl_telemetry_destroy(w->tele);
    for (int i = 0; i < w->nov; i++)
        free(w->ovs[i]);
    for (int i = 0; i < w->nsets; i++)
        free(w->sets[i]);
    if (w->out_pipe >= 0)
        close(w->out_pipe);
    if (term_fd >= 0)
        close(term_fd);
    pthread_mutex_destroy(&w->lock);
}

int dl_cmd_workbench(const dl_command *self, int argc, char **argv)
{
    this_cmd = self;
    wb w;
    memset(&w, 0, sizeof w);
    w.out_pipe = -1;
    int autostart = 0;
    int status = parse_args(&w, &autostart, argc, argv);
    if (status >= 0)
        return status;
    if (access(w.script, R_OK) != 0) {
        fprintf(stderr, "dlbench: %s: %s\n", w.script, strerror(errno));
        return DL_EXIT_USAGE;
    }
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
        fprintf(stderr,
                "dlbench: the workbench needs a terminal; for a headless run use "
                "`dlbench run %s`\n",
                w.script);
        return DL_EXIT_USAGE;
    }
    pthread_mutex_init(&w.lock, NULL);
    if (setup(&w, autostart) < 0) {
        fprintf(stderr, "dlbench: out of memory\n");
        return 1;
    }
    int term_fd = redirect_output(&w);
    if (autostart)
        start(&w);
    dl_app_ops ops = {&w, w.tele, w.out_dir, NULL, 0, sample, action, busy, done, 0, w.no_mouse};
    dl_app_end end = dl_app_run(&ops, term_fd >= 0 ? term_fd : STDOUT_FILENO);

    if (end == DL_APP_HANGUP) {
        detach(&w);
    } else {
        /* restore the terminal as stdout for the final lines */
        if (term_fd >= 0) {
            fflush(stdout);
            dup2(term_fd, STDOUT_FILENO);
            dup2(term_fd, STDERR_FILENO);
        }
        if (!w.quit)
            action(&w, DL_ACT_QUIT, NULL);
    }
    if (w.thread_live)
        pthread_join(w.thread, NULL);
    if (end != DL_APP_HANGUP && w.last_run[0])
        printf("run folder: %s\n", w.last_run);
    teardown(&w, term_fd);
    return end == DL_APP_ERROR ? 1 : 0;
}
