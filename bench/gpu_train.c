/* gpu_train.c - training throughput of the benchmark models on the CUDA backend; the dlbench side of gpu_torch.py
 *
 *   gpu_train [--model NAME|all] [--reps R] [--quick] [--device cpu]
 *   gpu_train --probe
 *
 * Each model trains through the ordinary trainer (dl_trainer_run) on a
 * synthetic in-memory set shaped like Fashion-MNIST (u8 [1, 28, 28], 10
 * classes, not shuffled), so neither the disk nor the loader is measured:
 * W warm-up steps (cuBLAS/cuDNN set-up), then R timed windows of S steps.
 * Every window, warm-up included, is cut short after a few seconds, so a
 * slow GPU cannot stretch the run. The device is synced (ops->sync) before
 * the clock is read at each window edge; the best window counts (the
 * median is printed too). Per model:
 *
 *   gpu_train <model> <prec> batch B  samples/s X (median Y)  TFLOP/s T  ms/step M
 *   RESULT gpu_train <model> <prec> batch=B samples_per_s=X median=Y tflops=T ms_per_step=M skipped=K
 *
 * TFLOP/s counts the matrix-product FLOPs exactly (bench_gemm_flops: forward
 * and weight gradient of every Linear/Conv2d, input gradient of all but
 * the first; about 6 x parameters per sample for an MLP), as gpu_torch.py
 * does. f32 products run on TF32 tensor cores unless DLBENCH_CUDA_TF32=0
 * (gpu_torch.py follows the same variable). skipped counts steps the
 * trainer skipped for a non-finite gradient (should be 0).
 *
 * Without a GPU: "SKIP gpu_train: reason" and exit 0. A model that fails
 * prints "FAIL gpu_train <model>: message"; the exit status is then 1.
 *
 * --quick: a quarter of the timed steps. --device cpu: the same on the CPU
 * backend, to check the benchmark itself on a machine without a GPU (not
 * for mlp-8192: a step takes minutes there). --probe: only opens the CUDA
 * backend; prints its description and exits 0, or prints "SKIP gpu_train:
 * reason" and exits 3 (tests/gpu/run.sh asks this before its GPU steps
 * that are not benchmarks).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/clock.h"
#include "engine/core/backend.h"
#include "engine/data/data.h"
#include "engine/base/error.h"
#include "engine/nn/nn.h"
#include "engine/nn/optim.h"
#include "engine/train/trainer.h"

#include "bench/bench_models.h"
#include "bench/bench_cpu.h"

#define MAX_REPS 16
#define WINDOW_CAP_S 2.0 /* a timed window ends after its steps or this long */
#define WARMUP_CAP_S 5.0 /* the warm-up includes algorithm searches: longer */
#define DATA_CAP_BYTES ((size_t)128 << 20)

typedef struct gpu_model {
    const char *name;
    dl_layer *(*build)(void);
    int adam; /* else SGD with momentum 0.9 */
    float lr;
    dl_precision precision;
    int batch;
    long warmup, steps;
} gpu_model;

/* gpu_torch.py has the same table: names, optimizers, batches, step counts. */
static const gpu_model models[] = {
    {"mlp-sgd", bench_build_mlp, 0, 0.05f, DL_PREC_F32, 128, 100, 1000},
    {"mlp-adam", bench_build_mlp, 1, 1e-3f, DL_PREC_F32, 128, 100, 1000},
    {"cnn", bench_build_cnn, 0, 0.01f, DL_PREC_F32, 128, 50, 500},
    {"mlp-bf16", bench_build_mlp, 0, 0.05f, DL_PREC_BF16, 128, 100, 1000},
    {"cnn-bf16", bench_build_cnn, 0, 0.01f, DL_PREC_BF16, 128, 50, 500},
    /* 784-8192-8192-8192-8192-10, compute-bound at this batch */
    {"mlp-8192", bench_build_large, 0, 0.01f, DL_PREC_BF16, 8192, 5, 25},
};
#define NMODELS ((int)(sizeof models / sizeof models[0]))

/* A Fashion-MNIST-shaped set: x u8 [n, 1, 28, 28], y i32 labels, from a
 * xorshift generator (the values do not matter, only the shapes). */
static int synthetic_set(dl_dataset *d, size_t n)
{
    memset(d, 0, sizeof *d);
    const size_t row = 28 * 28;
    d->x = malloc(n * row);
    d->y = malloc(n * sizeof(int32_t));
    if (!d->x || !d->y) {
        dl_dataset_done(d);
        return dl_error(DL_ENOMEM, "synthetic set of %zu samples: out of memory", n);
    }
    uint64_t s = 0x9e3779b97f4a7c15ull;
    uint8_t *x = d->x;
    int32_t *y = d->y;
    for (size_t i = 0; i < n * row; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = (uint8_t)(s >> 56);
    }
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        y[i] = (int32_t)(s % 10);
    }
    int64_t dims[3] = {1, 28, 28};
    d->info.sample = dl_shape_make(3, dims);
    d->info.x_dtype = DL_U8;
    d->info.y_dtype = DL_I32;
    d->info.y_width = 1;
    d->info.classes = 10;
    d->info.count = n;
    d->info.scale = 1.0f / 255;
    snprintf(d->name, sizeof d->name, "synthetic fashion-mnist shape (%zu)", n);
    return DL_OK;
}

/* --- timing windows through the trainer's idle hook -------------------- */

typedef struct windows {
    dl_backend *be;
    int batch;
    long warmup, steps;
    int reps, done; /* done: timed windows closed (-1 while warming up) */
    int started;
    long first; /* step count when the current window opened */
    double t0;
    double rate[MAX_REPS], secs[MAX_REPS];
    long nsteps[MAX_REPS];
} windows;

/* Called between steps: closes a window after its steps or its time cap,
 * with the device synced first so the clock sees the work finished. */
static int on_idle(void *user, dl_trainer *t)
{
    windows *w = user;
    long s = dl_trainer_step_count(t);
    if (!w->started) {
        w->started = 1;
        w->first = s;
        w->t0 = dl_clock_mono_s();
        return 0;
    }
    long n = s - w->first;
    int warming = w->done < 0;
    if (n < 1 || (n < (warming ? w->warmup : w->steps) &&
                  dl_clock_mono_s() - w->t0 < (warming ? WARMUP_CAP_S : WINDOW_CAP_S)))
        return 0;
    int rc = w->be->ops->sync(w->be);
    if (rc < 0)
        return rc;
    double tn = dl_clock_mono_s();
    if (!warming) {
        w->nsteps[w->done] = n;
        w->secs[w->done] = tn - w->t0;
        w->rate[w->done] = (double)n * w->batch / (tn - w->t0);
    }
    if (++w->done == w->reps)
        return 1;
    w->first = s;
    w->t0 = tn;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Trains spec for its warm-up and reps windows; prints its lines. Returns
 * 0, or -1 after a FAIL line. */
static int bench_model(const gpu_model *spec, dl_backend *be, int reps, int quick)
{
    long warmup = spec->warmup, steps = quick ? spec->steps / 4 : spec->steps;
    /* enough samples that no epoch ends inside the run, within DATA_CAP_BYTES */
    size_t batches = (size_t)(warmup + (long)reps * steps + 2);
    size_t row = 28 * 28 + sizeof(int32_t);
    if (batches * (size_t)spec->batch * row > DATA_CAP_BYTES)
        batches = DATA_CAP_BYTES / ((size_t)spec->batch * row);
    if (batches < 4)
        batches = 4;
    dl_dataset d;
    dl_model *m = NULL;
    dl_source *src = NULL;
    dl_trainer *t = NULL;
    int rc = synthetic_set(&d, batches * (size_t)spec->batch);
    const char *what = "synthetic data";
    dl_optim opt = spec->adam ? dl_optim_adam(spec->lr, 0) : dl_optim_sgd(spec->lr, 0.9f, 0, 0);
    if (rc == DL_OK) {
        what = "model";
        rc = dl_model_create(&m, spec->build(), &d.info.sample);
    }
    if (rc == DL_OK)
        rc = dl_model_init_state(m, be, dl_optim_moments(&opt), 1);
    if (rc == DL_OK) {
        what = "source";
        rc = dl_source_memory(&src, &d, spec->batch, 0, 1, 1);
    }
    windows w = {be, spec->batch, warmup, steps, reps, -1, 0, 0, 0, {0}, {0}, {0}};
    if (rc == DL_OK) {
        what = "trainer";
        dl_trainer_config cfg = dl_trainer_config_default();
        cfg.batch = spec->batch;
        cfg.epochs = 1 << 20;
        cfg.seed = 1;
        cfg.precision = spec->precision;
        cfg.log_every = 1 << 30; /* no per-step reports inside the timed windows */
        /* random labels on a wide net: a stray overflow skips a step
         * (counted and printed) rather than ending the benchmark */
        cfg.nonfinite = DL_NONFINITE_SKIP;
        dl_loss loss = {DL_LOSS_XENT, 0, DL_IGNORE_NONE};
        rc = dl_trainer_create(&t, m, &loss, &opt, NULL, src, NULL, &cfg, be);
    }
    if (rc == DL_OK) {
        what = "training";
        dl_callbacks cb = {&w, NULL, NULL, NULL, on_idle};
        dl_trainer_set_callbacks(t, &cb);
        rc = dl_trainer_run(t);
        if (rc == DL_OK && w.done < reps)
            rc = dl_error(DL_ERR, "the run ended after %d of %d windows", w.done < 0 ? 0 : w.done,
                          reps);
    }
    if (rc == DL_OK) {
        double sorted[MAX_REPS];
        memcpy(sorted, w.rate, sizeof sorted);
        qsort(sorted, (size_t)reps, sizeof sorted[0], cmp_double);
        double best = sorted[reps - 1], med = sorted[reps / 2];
        double f = bench_gemm_flops(m);
        dl_trainer_cursor cur;
        dl_trainer_get_cursor(t, &cur);
        const char *prec = dl_precision_name(spec->precision);
        printf("gpu_train %-9s %-4s batch %5d  samples/s %10.0f (median %10.0f)  TFLOP/s %7.2f"
               "  ms/step %8.3f\n",
               spec->name, prec, spec->batch, best, med, best * f * 1e-12,
               1e3 * spec->batch / best);
        printf("RESULT gpu_train %s %s batch=%d samples_per_s=%.0f median=%.0f tflops=%.3f "
               "ms_per_step=%.4f skipped=%ld\n",
               spec->name, prec, spec->batch, best, med, best * f * 1e-12, 1e3 * spec->batch / best,
               cur.skipped);
        if (cur.skipped > 0)
            printf("# %s: %ld steps skipped for a non-finite gradient\n", spec->name, cur.skipped);
    } else {
        printf("FAIL gpu_train %s: %s: %s\n", spec->name, what, dl_error_message());
    }
    fflush(stdout);
    dl_trainer_destroy(t);
    dl_source_destroy(src);
    dl_model_destroy(m);
    dl_dataset_done(&d);
    return rc == DL_OK ? 0 : -1;
}

static void usage(void)
{
    fprintf(stderr, "usage: gpu_train [--model NAME|all] [--reps R] [--quick] [--device cpu]\n"
                    "       gpu_train --probe\nmodels:");
    for (int i = 0; i < NMODELS; i++)
        fprintf(stderr, " %s", models[i].name);
    fprintf(stderr, "\n");
}

int main(int argc, char **argv)
{
    bench_cpu_line();
    int reps = 3, quick = 0, cpu = 0, probe = 0;
    const char *model = "all";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else if (!strcmp(argv[i], "--probe")) {
            probe = 1;
        } else if (i + 1 < argc && !strcmp(argv[i], "--model")) {
            model = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--reps")) {
            reps = atoi(argv[++i]);
        } else if (i + 1 < argc && !strcmp(argv[i], "--device") && !strcmp(argv[i + 1], "cpu")) {
            cpu = 1;
            i++;
        } else {
            usage();
            return 2;
        }
    }
    if (reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "gpu_train: --reps must be 1..%d\n", MAX_REPS);
        return 2;
    }
    int pick = -1; /* -1: all */
    if (strcmp(model, "all")) {
        for (int i = 0; i < NMODELS; i++)
            if (!strcmp(model, models[i].name))
                pick = i;
        if (pick < 0) {
            usage();
            return 2;
        }
    }
    char why[512];
    dl_backend *be = cpu ? dl_backend_cpu(0) : dl_backend_cuda(why, sizeof why);
    if (!be) {
        printf("SKIP gpu_train: %s\n", why);
        return probe ? 3 : 0;
    }
    if (probe) {
        printf("%s\n", be->description);
        return 0;
    }
    const char *tf = getenv("DLBENCH_CUDA_TF32");
    printf("# %s%s\n", be->description,
           cpu                  ? ""
           : tf && tf[0] == '0' ? "; f32 products in f32 (DLBENCH_CUDA_TF32=0)"
                                : "; f32 products on TF32 tensor cores");
    fflush(stdout);
    int failed = 0;
    for (int i = 0; i < NMODELS; i++)
        if (pick < 0 || pick == i)
            failed |= bench_model(&models[i], be, reps, quick) < 0;
    return failed;
}
