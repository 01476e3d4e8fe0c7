/* cmd_profile.c - `dlbench profile`: train N steps under the profiler, print the op table, write a trace */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/clock.h"
#include "engine/observe/advisor.h"
#include "engine/observe/cost.h"
#include "engine/base/error.h"
#include "engine/observe/monitor.h"
#include "engine/observe/profiler.h"
#include "engine/train/trainer.h"
#include "scripting/script.h"
#include "scripting/session.h"
#include "tui/cmd/commands.h"
#include "tui/cmd/exit.h"
#include "tui/cmd/opts.h"

/* This command's row of the table (its options and help), set on entry. */
static const dl_command *this_cmd;

static int parse_count(const char *s, long *v)
{
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (!*s || *end || errno || x < 0 || x > 100000000)
        return 0;
    *v = (long)x;
    return 1;
}

/* What the command line asked for; ovs (the k=v arguments, then from
 * sets on the --set values) is owned. */
typedef struct profile_args {
    const char *script, *trace, *device, *by;
    long steps, warmup, ring, rows;
    int sort, whole, monitor_on;
    double price;
    char **ovs, **sets;
    int nov, nset;
} profile_args;

static int bad_value(const dl_opt *o, const char *val)
{
    fprintf(stderr, "dlbench profile: bad value '%s' for %s\n", val, o->name);
    if (o->id == DL_OPT_SORT)
        fprintf(stderr, "  sort keys: total, self, calls, mean, flops, name\n");
    return DL_EXIT_USAGE;
}

static int one_of(const char *val, const char *a, const char *b, const char *c)
{
    return !strcmp(val, a) || !strcmp(val, b) || !strcmp(val, c);
}

/* Takes one option into *p: -1 to go on, else the exit status (help
 * printed, or a bad value named). */
static int take_option(profile_args *p, const dl_opt *o, const char *val)
{
    int ok = 1;
    switch (o->id) {
    case DL_OPT_HELP: dl_command_usage(this_cmd, stdout); return DL_EXIT_OK;
    case DL_OPT_WHOLE_RUN: p->whole = 1; break;
    case DL_OPT_NO_MONITOR: p->monitor_on = 0; break;
    case DL_OPT_STEPS: ok = parse_count(val, &p->steps) && p->steps > 0; break;
    case DL_OPT_WARMUP: ok = parse_count(val, &p->warmup); break;
    case DL_OPT_RING: ok = parse_count(val, &p->ring) && p->ring > 0; break;
    case DL_OPT_ROWS: ok = parse_count(val, &p->rows); break;
    case DL_OPT_TRACE: p->trace = val; break;
    case DL_OPT_SET:
        if (dl_session_set_check(val) < 0) {
            fprintf(stderr, "dlbench profile: %s\n", dl_error_message());
            return DL_EXIT_USAGE;
        }
        p->sets[p->nset++] = (char *)val;
        break;
    case DL_OPT_SORT:
        ok = (p->sort = dl_prof_sort_parse(val)) >= 0 && p->sort != DL_PROF_SORT_NONE;
        break;
    case DL_OPT_BY: ok = one_of(p->by = val, "op", "layer", "both"); break;
    case DL_OPT_DEVICE: ok = one_of(p->device = val, "cpu", "cuda", "auto"); break;
    case DL_OPT_PRICE: {
        char *end;
        p->price = strtod(val, &end);
        ok = *val && !*end && p->price >= 0 && isfinite(p->price);
        break;
    }
    default: break;
    }
    return ok ? -1 : bad_value(o, val);
}

/* Reads the command line into *p. Returns -1 to go on (the caller frees
 * p->ovs), else the exit status (help printed, or a usage error). */
static int parse_args(int argc, char **argv, profile_args *p)
{
    *p = (profile_args){.trace = "trace.json",
                        .by = "both",
                        .steps = 50,
                        .warmup = 5,
                        .ring = 10,
                        .sort = DL_PROF_SORT_TOTAL,
                        .monitor_on = 1};
    if (!(p->ovs = calloc(2 * ((size_t)argc + 1), sizeof *p->ovs)))
        return DL_EXIT_FAILED;
    p->sets = p->ovs + argc + 1;
    dl_opts o;
    dl_command_opts(&o, this_cmd, argc, argv);
    int id, status = -1;
    while (status < 0 && (id = dl_opts_next(&o)) != DL_OPTS_END) {
        if (id == DL_OPTS_ERROR) {
            status = DL_EXIT_USAGE;
        } else if (id != DL_OPTS_ARG) {
            status = take_option(p, o.opt, o.value);
        } else if (strchr(o.value, '=')) {
            p->ovs[p->nov++] = (char *)o.value;
        } else if (!p->script) {
            p->script = o.value;
        } else {
            fprintf(stderr, "dlbench profile: unexpected argument '%s'\n", o.value);
            status = DL_EXIT_USAGE;
        }
    }
    if (status < 0 && !p->script) {
        dl_command_usage(this_cmd, stderr);
        status = DL_EXIT_USAGE;
    }
    if (status >= 0) {
        free(p->ovs);
        p->ovs = NULL;
    }
    return status;
}

typedef struct prof_run {
    dl_profiler *prof;
    long warmup;
    int reset_done;
    double loss;
    int nonfinite;
} prof_run;

/* After the warm-up steps the aggregates start from zero. */
static int on_step(void *user, dl_trainer *t, const dl_step_info *i)
{
    prof_run *r = user;
    if (!r->reset_done && i->step >= r->warmup) {
        dl_profiler_reset(r->prof);
        dl_profiler_set_enabled(r->prof, 1);
        r->reset_done = 1;
    }
    r->loss = i->loss;
    if (!isfinite(i->loss))
        r->nonfinite = 1;
    return 0;
}

static void on_event(void *user, dl_trainer *t, const char *kind, const char *text)
{
    fprintf(stderr, "[%s] %s\n", kind, text);
}

static void fmt_flops(char *b, size_t n, double f)
{
    if (f >= 1e12)
        snprintf(b, n, "%.2f TFLOP/s", f * 1e-12);
    else
        snprintf(b, n, "%.2f GFLOP/s", f * 1e-9);
}

/* One profile: the prepared session, what it measures with, what it measured. */
typedef struct profile {
    const profile_args *a;
    dl_session *s;
    dl_trainer *t;          /* the session's */
    dl_backend *be;         /* the trainer's */
    const dl_experiment *e; /* the script's settings (the trainer runs them fitted) */
    dl_profiler *prof;
    dl_monitor *mon;
    prof_run pr;
    double wall;
    dl_sys_sample sys; /* the last system sample, when have_sys */
    int have_sys;
} profile;

/* The session in profile mode (no run folder), the profiler on its trainer,
 * the system monitor. */
static int prepare(profile *p)
{
    const profile_args *a = p->a;
    dl_session_options o;
    memset(&o, 0, sizeof o);
    o.script = a->script;
    o.overrides = a->ovs;
    o.noverrides = a->nov;
    o.sets = a->sets;
    o.nsets = a->nset;
    o.device = a->device;
    o.seed = -1;
    o.profile_steps = a->warmup + a->steps;
    DL_TRY(dl_session_prepare(&p->s, &o));
    p->t = dl_session_trainer(p->s);
    p->be = dl_trainer_backend(p->t);
    p->e = dl_script_experiment(dl_session_script(p->s));
    dl_profiler_options po;
    dl_profiler_options_default(&po);
    po.ring_steps = (int)a->ring;
    po.whole_run = a->whole;
    DL_TRY(dl_profiler_create(&p->prof, &po));
    DL_TRY(dl_trainer_set_profiler(p->t, p->prof));
    if (a->monitor_on) {
        dl_monitor_options mo;
        dl_monitor_options_default(&mo);
        DL_TRY(dl_monitor_create(&p->mon, &mo));
        DL_TRY(dl_monitor_start(p->mon));
    }
    return DL_OK;
}

/* The warm-up unprofiled, then the profiled steps, timed on the wall. */
static int run(profile *p)
{
    const profile_args *a = p->a;
    p->pr = (prof_run){p->prof, a->warmup, a->warmup == 0, 0, 0};
    dl_profiler_set_enabled(p->prof, a->warmup == 0); /* warm-up runs unprofiled */
    dl_callbacks cb = {&p->pr, on_step, NULL, on_event, NULL};
    dl_trainer_set_callbacks(p->t, &cb);
    const dl_trainer_config *tc = dl_trainer_config_of(p->t);
    printf("profiling %s: %ld steps after %ld warm-up, batch %d, %s, on %s\n", p->e->name, a->steps,
           a->warmup, tc->batch, dl_precision_name(tc->precision), p->be->description);
    fflush(stdout);
    double start = dl_clock_mono_s();
    int rc = dl_trainer_run(p->t);
    p->wall = dl_clock_mono_s() - start;
    if (rc == DL_ENONFINITE)
        p->pr.nonfinite = 1;
    return rc;
}

/* The op and layer tables and the wall-time line. */
static void print_tables(const profile *p, const dl_prof_totals *tot)
{
    const profile_args *a = p->a;
    int max_rows = a->rows > 0 ? (int)a->rows : 0;
    if (strcmp(a->by, "layer")) {
        printf("\n");
        dl_profiler_print(p->prof, DL_PROF_BY_OP, (dl_prof_sort)a->sort, max_rows, stdout);
    }
    if (strcmp(a->by, "op")) {
        printf("\nby layer (model order; total = forward + backward, FLOPs inclusive):\n");
        dl_profiler_print(p->prof, DL_PROF_BY_LAYER, DL_PROF_SORT_NONE, max_rows, stdout);
    }
    printf("\nwall time %.3f s for %ld steps (with warm-up); profiled steps %.3f s, "
           "%.1f%% inside spans\n",
           p->wall, a->steps + a->warmup, tot->step_ms * 1e-3,
           tot->step_ms > 0 ? 100 * tot->timed_ms / tot->step_ms : 0);
}

/* MFU: the CPU's peak from a short calibration, a GPU's from the table. */
static void print_mfu(const profile *p, const dl_prof_totals *tot)
{
    dl_precision prec = dl_trainer_config_of(p->t)->precision;
    dl_backend *be = p->be;
    double peak = 0;
    char src[96] = "";
    dl_gpu_peak gp;
    const char *gname = p->have_sys && p->sys.ngpu ? p->sys.gpu[0].name : be->description;
    if (be->ops->device != DL_DEVICE_CPU && dl_cost_gpu_peak(gname, &gp)) {
        peak = prec == DL_PREC_F32 ? gp.f32 : gp.bf16;
        snprintf(src, sizeof src, "table: %s %s", gp.name,
                 prec == DL_PREC_F32 ? "fp32" : "bf16 tensor cores");
    } else if (be->ops->device == DL_DEVICE_CPU &&
               dl_cost_calibrate(be, 512, 0.3, &peak) == DL_OK) {
        snprintf(src, sizeof src, "sgemm 512 calibration, %d threads", be->threads);
    }
    char ach[32], pk[32];
    fmt_flops(ach, sizeof ach, tot->achieved_flops_per_s);
    if (peak > 0) {
        fmt_flops(pk, sizeof pk, peak);
        printf("MFU: %.1f%% (%s of %s peak, %s)\n", 100 * tot->achieved_flops_per_s / peak, ach, pk,
               src);
    } else {
        printf("MFU: unknown (achieved %s; no peak for this device)\n", ach);
    }
}

/* The script's whole training at the measured step time, and its price. */
static void print_projection(const profile *p, const dl_prof_totals *tot)
{
    long per_epoch = dl_trainer_step_count(p->t) > 0 ? dl_session_steps_per_epoch(p->s) : 0;
    long full = per_epoch * p->e->cfg.epochs;
    if (p->e->cfg.max_steps > 0 && p->e->cfg.max_steps < full)
        full = p->e->cfg.max_steps;
    if (full > 0 && tot->mean_step_ms > 0) {
        double secs = full * tot->mean_step_ms * 1e-3;
        double price = p->a->price;
        printf("the whole training (%ld steps) would take about %.1f s of steps", full, secs);
        if (price > 0)
            printf(", costing %.4f at %.2f per hour", secs / 3600 * price, price);
        printf("\n");
    }
}

/* The last system sample and the GPU's status (not with --no-monitor). */
static void print_system(const profile *p)
{
    if (p->mon) {
        if (p->have_sys)
            printf("system: CPU %.0f%% of %d cores, process %.0f%%, RSS %.0f MB\n",
                   p->sys.cpu_total_pct, p->sys.ncpu, p->sys.proc_cpu_pct, p->sys.rss_mb);
        printf("GPU: %s\n", dl_monitor_gpu_status(p->mon));
    }
}

/* The advisor over what was measured (rc: how the training ended). */
static void print_advice(const profile *p, const dl_prof_totals *tot, int rc)
{
    const dl_trainer_config *cfg = dl_trainer_config_of(p->t);
    dl_advisor_input in;
    dl_advisor_input_init(&in);
    in.step_ms = tot->mean_step_ms;
    in.data_wait_share = tot->step_ms > 0 ? tot->data_ms / tot->step_ms : -1;
    in.leaf_ops_per_step = tot->leaf_calls_per_step;
    in.mean_op_ms = tot->mean_leaf_ms;
    in.workers = p->e->data.workers;
    in.on_gpu = p->be->ops->device != DL_DEVICE_CPU;
    in.precision = cfg->precision;
    in.batch = cfg->batch;
    in.accumulate = cfg->accumulate;
    in.nonfinite = p->pr.nonfinite;
    if (p->have_sys && p->sys.ngpu) {
        snprintf(in.gpu_name, sizeof in.gpu_name, "%s", p->sys.gpu[0].name);
        in.gpu_util_pct = p->sys.gpu[0].util_pct;
        in.gpu_mem_used_mb = p->sys.gpu[0].mem_used_mb;
        in.gpu_mem_total_mb = p->sys.gpu[0].mem_total_mb;
    }
    if (rc == DL_ENOMEM) {
        in.oom = 1;
        snprintf(in.oom_text, sizeof in.oom_text, "%s", dl_error_message());
    }
    dl_advice adv[8];
    int na = dl_advisor_run(&in, adv, 8);
    for (int i = 0; i < na; i++)
        printf("advice: %s: %s -> %s\n", adv[i].title, adv[i].evidence, adv[i].remedy);
    if (na == 0)
        printf("advice: no bottleneck found (data wait %.1f%% of step time)\n",
               in.data_wait_share > 0 ? 100 * in.data_wait_share : 0);
}

/* The Chrome/Perfetto trace, unless --trace -. Returns < 0 when it could
 * not be written (said on stderr). */
static int write_trace(const profile *p, const dl_prof_totals *tot)
{
    const char *trace = p->a->trace;
    if (!strcmp(trace, "-"))
        return DL_OK;
    int wr = dl_profiler_write_trace(p->prof, trace);
    if (wr < 0) {
        fprintf(stderr, "dlbench profile: %s\n", dl_error_message());
        return wr;
    }
    printf("trace: %s (%ld events, %s; open in https://ui.perfetto.dev)\n", trace, tot->events_kept,
           p->a->whole ? "whole run" : "ring of the last steps");
    return DL_OK;
}

/* Everything measured, after a training that ended with rc; the exit status. */
static int report(profile *p, int rc)
{
    int status = 0;
    if (rc < 0) {
        fprintf(stderr, "dlbench profile: training failed: %s\n", dl_error_message());
        status = 1;
    }
    if (p->mon)
        dl_monitor_stop(p->mon);
    /* a last sample now: a short profile may end before the first tick */
    p->have_sys = p->mon && dl_monitor_sample(p->mon, &p->sys) == DL_OK;
    dl_prof_totals tot;
    dl_profiler_totals(p->prof, &tot);
    print_tables(p, &tot);
    print_mfu(p, &tot);
    print_projection(p, &tot);
    print_system(p);
    print_advice(p, &tot, rc);
    if (write_trace(p, &tot) < 0)
        status = status ? status : 1;
    return status;
}

int dl_cmd_profile(const dl_command *self, int argc, char **argv)
{
    this_cmd = self;
    profile_args a;
    int status = parse_args(argc, argv, &a);
    if (status >= 0)
        return status;
    profile p;
    memset(&p, 0, sizeof p);
    p.a = &a;
    int rc = prepare(&p);
    if (rc == DL_OK)
        rc = run(&p);
    if (rc < 0 && !p.prof) {
        fprintf(stderr, "dlbench profile: error: %s\n", dl_error_message());
        status = dl_exit_for(rc);
    } else {
        status = report(&p, rc);
    }
    dl_monitor_destroy(p.mon);
    dl_session_destroy(p.s); /* the trainer before the profiler it reports to */
    dl_profiler_destroy(p.prof);
    free(a.ovs);
    return status;
}
