/* cmd_profile.c - `dlbench profile`: train N steps under the profiler, print the op table, write a trace */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/observe/advisor.h"
#include "engine/observe/cost.h"
#include "engine/base/error.h"
#include "engine/observe/monitor.h"
#include "engine/observe/profiler.h"
#include "engine/train/trainer.h"
#include "scripting/script.h"
#include "tui/cmd/commands.h"

static void usage(FILE *f)
{
    fputs("usage: dlbench profile SCRIPT [k=v ...] [--steps N] [--warmup N] [--sort KEY]\n"
          "                       [--by op|layer|both] [--trace PATH] [--whole-run] [--ring N]\n"
          "                       [--device cpu|cuda|auto] [--rows N] [--price-per-hour P]\n"
          "                       [--no-monitor]\n"
          "  --steps N         optimizer steps to profile (default 50)\n"
          "  --warmup N        steps run first and not counted (default 5)\n"
          "  --sort KEY        total, self, calls, mean, flops, name (default total)\n"
          "  --by VIEW         op table, layer table or both (default both)\n"
          "  --trace PATH      Chrome/Perfetto trace (default trace.json; '-' for none)\n"
          "  --whole-run       keep every profiled step in the trace (default: the last --ring)\n"
          "  --ring N          steps kept in the trace ring (default 10)\n"
          "  --price-per-hour  projected cost of the script's whole training\n"
          "exit status: 0 done, 1 failed, 2 bad input\n",
          f);
}

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

int dl_cmd_profile(int argc, char **argv)
{
    const char *script = NULL, *trace = "trace.json", *device = NULL, *by = "both";
    long steps = 50, warmup = 5, ring = 10, rows = 0;
    int sort = DL_PROF_SORT_TOTAL, whole = 0, monitor_on = 1;
    double price = 0;
    char **ovs = calloc((size_t)argc + 1, sizeof *ovs);
    int nov = 0;
    if (!ovs)
        return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = !strcmp(a, "--steps") || !strcmp(a, "--warmup") || !strcmp(a, "--sort") ||
                    !strcmp(a, "--trace") || !strcmp(a, "--ring") || !strcmp(a, "--device") ||
                    !strcmp(a, "--rows") || !strcmp(a, "--by") || !strcmp(a, "--price-per-hour");
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(ovs);
            return 0;
        } else if (!strcmp(a, "--whole-run")) {
            whole = 1;
        } else if (!strcmp(a, "--no-monitor")) {
            monitor_on = 0;
        } else if (takes) {
            if (!val) {
                fprintf(stderr, "dlbench profile: %s needs a value\n", a);
                free(ovs);
                return 2;
            }
            i++;
            int ok = 1;
            if (!strcmp(a, "--steps"))
                ok = parse_count(val, &steps) && steps > 0;
            else if (!strcmp(a, "--warmup"))
                ok = parse_count(val, &warmup);
            else if (!strcmp(a, "--ring"))
                ok = parse_count(val, &ring) && ring > 0;
            else if (!strcmp(a, "--rows"))
                ok = parse_count(val, &rows);
            else if (!strcmp(a, "--trace"))
                trace = val;
            else if (!strcmp(a, "--sort"))
                ok = (sort = dl_prof_sort_parse(val)) >= 0 && sort != DL_PROF_SORT_NONE;
            else if (!strcmp(a, "--by"))
                ok = !strcmp(val, "op") || !strcmp(val, "layer") || !strcmp(val, "both"), by = val;
            else if (!strcmp(a, "--device"))
                ok = !strcmp(val, "cpu") || !strcmp(val, "cuda") || !strcmp(val, "auto"),
                device = val;
            else {
                char *end;
                price = strtod(val, &end);
                ok = *val && !*end && price >= 0 && isfinite(price);
            }
            if (!ok) {
                fprintf(stderr, "dlbench profile: bad value '%s' for %s\n", val, a);
                if (!strcmp(a, "--sort"))
                    fprintf(stderr, "  sort keys: total, self, calls, mean, flops, name\n");
                free(ovs);
                return 2;
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "dlbench profile: unknown option '%s'\n", a);
            usage(stderr);
            free(ovs);
            return 2;
        } else if (strchr(a, '=')) {
            ovs[nov++] = argv[i];
        } else if (!script) {
            script = a;
        } else {
            fprintf(stderr, "dlbench profile: unexpected argument '%s'\n", a);
            free(ovs);
            return 2;
        }
    }
    if (!script) {
        usage(stderr);
        free(ovs);
        return 2;
    }

    dl_script *sc = NULL;
    dl_source *train = NULL, *val = NULL;
    dl_model *model = NULL;
    dl_trainer *t = NULL;
    dl_profiler *prof = NULL;
    dl_monitor *mon = NULL;
    dl_backend *be = NULL;
    int status = 0;
    dl_script_options so = {script, ovs, nov, 0};
    int rc = dl_script_load(&sc, &so);
    dl_experiment *e = rc == DL_OK ? dl_script_experiment(sc) : NULL;
    if (rc == DL_OK && !e->model) /* a study runs its objective with k=v values */
        rc = dl_error(DL_EUNSUPPORTED, "%s returns a study: profile one experiment", script);
    if (rc == DL_OK) {
        char why[256] = "";
        const char *dev = device ? device : e->device;
        be = dl_backend_by_name(dev, why, sizeof why);
        if (!be)
            rc = dl_error(DL_ENODEV, "device %s is not available: %s", dev, why);
    }
    char fp[1400];
    if (rc == DL_OK)
        rc = dl_script_open_data(sc, e->cfg.batch, e->cfg.seed, be, &train, &val, fp, sizeof fp);
    dl_trainer_config cfg;
    if (rc == DL_OK) {
        cfg = e->cfg;
        long per_epoch = (long)((train->ops->batches(train) + (size_t)cfg.accumulate - 1) /
                                (size_t)cfg.accumulate);
        long want = warmup + steps;
        cfg.max_steps = want;
        cfg.log_every = 1;
        if (per_epoch > 0 && (long)cfg.epochs * per_epoch < want)
            cfg.epochs = (int)((want + per_epoch - 1) / per_epoch);
        rc = dl_model_create(&model, dl_script_take_model(sc), &train->info.sample);
        if (rc == DL_OK)
            rc = dl_trainer_create(&t, model, &e->loss, &e->optim, &e->schedule, train, val, &cfg,
                                   be);
    }
    dl_profiler_options po;
    dl_profiler_options_default(&po);
    po.ring_steps = (int)ring;
    po.whole_run = whole;
    if (rc == DL_OK)
        rc = dl_profiler_create(&prof, &po);
    if (rc == DL_OK)
        rc = dl_trainer_set_profiler(t, prof);
    if (rc == DL_OK && monitor_on) {
        dl_monitor_options mo;
        dl_monitor_options_default(&mo);
        rc = dl_monitor_create(&mon, &mo);
        if (rc == DL_OK)
            rc = dl_monitor_start(mon);
    }
    prof_run pr = {prof, warmup, warmup == 0, 0, 0};
    double wall = 0;
    if (rc == DL_OK) {
        dl_profiler_set_enabled(prof, warmup == 0); /* warm-up runs unprofiled */
        dl_callbacks cb = {&pr, on_step, NULL, on_event, NULL};
        dl_trainer_set_callbacks(t, &cb);
        printf("profiling %s: %ld steps after %ld warm-up, batch %d, on %s\n", e->name, steps,
               warmup, cfg.batch, be->description);
        fflush(stdout);
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        rc = dl_trainer_run(t);
        clock_gettime(CLOCK_MONOTONIC, &b);
        wall = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
        if (rc == DL_ENONFINITE)
            pr.nonfinite = 1;
    }
    if (rc < 0 && !prof) {
        fprintf(stderr, "dlbench profile: error: %s\n", dl_error_message());
        status = exit_for(rc);
    } else if (prof) {
        if (rc < 0) {
            fprintf(stderr, "dlbench profile: training failed: %s\n", dl_error_message());
            status = 1;
        }
        dl_sys_sample sys;
        if (mon)
            dl_monitor_stop(mon);
        /* a last sample now: a short profile may end before the first tick */
        int have_sys = mon && dl_monitor_sample(mon, &sys) == DL_OK;
        int max_rows = rows > 0 ? (int)rows : 0;
        if (strcmp(by, "layer")) {
            printf("\n");
            dl_profiler_print(prof, DL_PROF_BY_OP, (dl_prof_sort)sort, max_rows, stdout);
        }
        if (strcmp(by, "op")) {
            printf("\nby layer (model order; total = forward + backward, FLOPs inclusive):\n");
            dl_profiler_print(prof, DL_PROF_BY_LAYER, DL_PROF_SORT_NONE, max_rows, stdout);
        }
        dl_prof_totals tot;
        dl_profiler_totals(prof, &tot);
        printf("\nwall time %.3f s for %ld steps (with warm-up); profiled steps %.3f s, "
               "%.1f%% inside spans\n",
               wall, steps + warmup, tot.step_ms * 1e-3,
               tot.step_ms > 0 ? 100 * tot.timed_ms / tot.step_ms : 0);
        /* MFU: the CPU's peak from a short calibration, a GPU's from the table */
        double peak = 0;
        char src[96] = "";
        dl_gpu_peak gp;
        const char *gname = have_sys && sys.ngpu ? sys.gpu[0].name : be->description;
        if (be->ops->device != DL_DEVICE_CPU && dl_cost_gpu_peak(gname, &gp)) {
            peak = cfg.precision == DL_PREC_F32 ? gp.f32 : gp.bf16;
            snprintf(src, sizeof src, "table: %s %s", gp.name,
                     cfg.precision == DL_PREC_F32 ? "fp32" : "bf16 tensor cores");
        } else if (be->ops->device == DL_DEVICE_CPU &&
                   dl_cost_calibrate(be, 512, 0.3, &peak) == DL_OK) {
            snprintf(src, sizeof src, "sgemm 512 calibration, %d threads", be->threads);
        }
        char ach[32], pk[32];
        fmt_flops(ach, sizeof ach, tot.achieved_flops_per_s);
        if (peak > 0) {
            fmt_flops(pk, sizeof pk, peak);
            printf("MFU: %.1f%% (%s of %s peak, %s)\n", 100 * tot.achieved_flops_per_s / peak, ach,
                   pk, src);
        } else {
            printf("MFU: unknown (achieved %s; no peak for this device)\n", ach);
        }
        long per_epoch = dl_trainer_step_count(t) > 0
                             ? (long)((train->ops->batches(train) + (size_t)cfg.accumulate - 1) /
                                      (size_t)cfg.accumulate)
                             : 0;
        long full = per_epoch * e->cfg.epochs;
        if (e->cfg.max_steps > 0 && e->cfg.max_steps < full)
            full = e->cfg.max_steps;
        if (full > 0 && tot.mean_step_ms > 0) {
            double secs = full * tot.mean_step_ms * 1e-3;
            printf("the whole training (%ld steps) would take about %.1f s of steps", full, secs);
            if (price > 0)
                printf(", costing %.4f at %.2f per hour", secs / 3600 * price, price);
            printf("\n");
        }
        if (mon) {
            if (have_sys)
                printf("system: CPU %.0f%% of %d cores, process %.0f%%, RSS %.0f MB\n",
                       sys.cpu_total_pct, sys.ncpu, sys.proc_cpu_pct, sys.rss_mb);
            printf("GPU: %s\n", dl_monitor_gpu_status(mon));
        }
        /* the advisor over what was measured */
        dl_advisor_input in;
        dl_advisor_input_init(&in);
        in.step_ms = tot.mean_step_ms;
        in.data_wait_share = tot.step_ms > 0 ? tot.data_ms / tot.step_ms : -1;
        in.leaf_ops_per_step = tot.leaf_calls_per_step;
        in.mean_op_ms = tot.mean_leaf_ms;
        in.workers = e->data.workers;
        in.on_gpu = be->ops->device != DL_DEVICE_CPU;
        in.precision = cfg.precision;
        in.batch = cfg.batch;
        in.accumulate = cfg.accumulate;
        in.nonfinite = pr.nonfinite;
        if (have_sys && sys.ngpu) {
            snprintf(in.gpu_name, sizeof in.gpu_name, "%s", sys.gpu[0].name);
            in.gpu_util_pct = sys.gpu[0].util_pct;
            in.gpu_mem_used_mb = sys.gpu[0].mem_used_mb;
            in.gpu_mem_total_mb = sys.gpu[0].mem_total_mb;
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
        if (strcmp(trace, "-")) {
            int wr = dl_profiler_write_trace(prof, trace);
            if (wr < 0) {
                fprintf(stderr, "dlbench profile: %s\n", dl_error_message());
                status = status ? status : 1;
            } else {
                printf("trace: %s (%ld events, %s; open in https://ui.perfetto.dev)\n", trace,
                       tot.events_kept,
                       whole ? "whole run" : "ring of the last steps");
            }
        }
    }
    dl_monitor_destroy(mon);
    dl_trainer_destroy(t);
    dl_profiler_destroy(prof);
    dl_model_destroy(model);
    dl_source_destroy(train);
    dl_source_destroy(val);
    dl_script_destroy(sc);
    free(ovs);
    return status;
}
