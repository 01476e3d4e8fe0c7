/* bench_profiler.c - profiler overhead: steps of the Fashion-MNIST-sized MLP with the profiler off and on */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/clock.h"
#include "engine/core/backend.h"
#include "engine/data/data.h"
#include "engine/base/error.h"
#include "engine/nn/nn.h"
#include "engine/nn/optim.h"
#include "engine/observe/profiler.h"
#include "engine/base/rng.h"
#include "engine/train/trainer.h"

#include "bench/bench_cpu.h"

/* Seconds for `steps` optimizer steps (new epochs started as needed). */
static double timed_steps(dl_trainer *t, int steps)
{
    double t0 = dl_clock_mono_s();
    for (int done = 0; done < steps;) {
        int rc = dl_trainer_step(t);
        if (rc < 0) {
            fprintf(stderr, "bench_profiler: %s\n", dl_error_message());
            exit(1);
        }
        done += rc == 0;
        if (rc == 1) { /* epoch over: restart it through the cursor */
            dl_trainer_cursor c;
            dl_trainer_get_cursor(t, &c);
            c.epoch_step = 0;
            dl_trainer_set_cursor(t, &c);
        }
    }
    return dl_clock_mono_s() - t0;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    bench_cpu_line();
    int rounds = argc > 1 ? atoi(argv[1]) : 7, steps = argc > 2 ? atoi(argv[2]) : 40;
    dl_backend *be = dl_backend_cpu(0);
    /* the fmnist MLP: 784 -> 512 -> 10, batch 128, random inputs */
    size_t count = 128 * 64;
    dl_dataset d;
    memset(&d, 0, sizeof d);
    d.info.sample = (dl_shape){1, {784}};
    d.info.x_dtype = DL_F32;
    d.info.y_dtype = DL_I32;
    d.info.y_width = 1;
    d.info.classes = 10;
    d.info.count = count;
    d.info.scale = 1;
    float *x = malloc(count * 784 * 4);
    int32_t *y = malloc(count * 4);
    for (size_t i = 0; i < count; i++) {
        y[i] = (int32_t)(i % 10);
        for (int k = 0; k < 784; k++)
            x[i * 784 + k] = dl_rng_uniform(1, 2, i, (uint64_t)k);
    }
    d.x = x;
    d.y = y;
    snprintf(d.name, sizeof d.name, "random");
    dl_source *src;
    dl_model *m;
    dl_trainer *t;
    dl_profiler *p;
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_linear(784, 512, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_linear(512, 10, 1));
    dl_trainer_config cfg = dl_trainer_config_default();
    cfg.batch = 128;
    cfg.epochs = 1000;
    dl_optim o = dl_optim_sgd(0.01f, 0.9f, 0, 0);
    if (dl_source_memory(&src, &d, 128, 1, 0, 1) < 0 ||
        dl_model_create(&m, s, &d.info.sample) < 0 ||
        dl_trainer_create(&t, m, &(dl_loss){DL_LOSS_XENT, 0, DL_IGNORE_NONE}, &o, NULL, src, NULL,
                          &cfg, be) < 0 ||
        dl_profiler_create(&p, NULL) < 0) {
        fprintf(stderr, "bench_profiler: %s\n", dl_error_message());
        return 1;
    }
    timed_steps(t, 10); /* warm up */
    /* alternate off / on so drift on a shared machine hits both alike */
    double *off = calloc((size_t)rounds, sizeof *off), *on = calloc((size_t)rounds, sizeof *on);
    for (int r = 0; r < rounds; r++) {
        dl_trainer_set_profiler(t, NULL);
        off[r] = timed_steps(t, steps);
        dl_trainer_set_profiler(t, p);
        on[r] = timed_steps(t, steps);
    }
    qsort(off, (size_t)rounds, sizeof *off, cmp);
    qsort(on, (size_t)rounds, sizeof *on, cmp);
    double a = off[rounds / 2] / steps * 1e3, b = on[rounds / 2] / steps * 1e3;
    printf("profiler overhead, MLP 784-512-10 batch 128 on %s: off %.3f ms/step, on %.3f "
           "ms/step (median of %d x %d steps): %+.2f%%\n",
           be->description, a, b, rounds, steps, 100 * (b - a) / a);
    dl_prof_totals tot;
    dl_profiler_totals(p, &tot);
    printf("profiled %ld steps, %ld trace events kept\n", tot.steps, tot.events_kept);
    free(off);
    free(on);
    dl_trainer_destroy(t);
    dl_profiler_destroy(p);
    dl_model_destroy(m);
    dl_source_destroy(src);
    dl_dataset_done(&d);
    return 0;
}
