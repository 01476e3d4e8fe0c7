/* test_advisor.c - each advisor rule triggered by a constructed situation names the right bottleneck */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/observe/advisor.h"
#include "engine/base/clock.h"
#include "engine/core/backend.h"
#include "engine/data/data.h"
#include "engine/base/error.h"
#include "engine/nn/nn.h"
#include "engine/nn/optim.h"
#include "engine/observe/profiler.h"
#include "engine/observe/telemetry.h"
#include "engine/train/trainer.h"
#include "tests/check.h"
#include "tests/fixtures.h"

static dl_backend *be;

/* 4 classes in 16 features: feature k carries 3.0 for label k % 4 */
static void make_blobs(dl_dataset *d, size_t count)
{
    fx_blobs spec = {{1, {16}}, 4, 3.0f, 0, 1.0f, 3, 1, "blobs"};
    fx_blobs_make(d, count, &spec);
}

/* A source around a memory source that is slow on purpose: it sleeps
 * (a loader that cannot keep up) or computes on the caller's thread (a
 * heavy augmentation with workers = 0). */
typedef enum { SLOW_SLEEP, SLOW_AUGMENT } slow_kind;
typedef struct slow_source {
    dl_source base;
    dl_source *inner;
    slow_kind kind;
    double seconds;
    float *aug; /* the augmented copy of the batch */
} slow_source;

static int slow_start(dl_source *s, int epoch, size_t skip)
{
    slow_source *w = (slow_source *)s;
    return w->inner->ops->start_epoch(w->inner, epoch, skip);
}

static int slow_next(dl_source *s, dl_batch *out)
{
    slow_source *w = (slow_source *)s;
    int rc = w->inner->ops->next(w->inner, out);
    if (rc <= 0)
        return rc;
    if (w->kind == SLOW_SLEEP) {
        usleep((useconds_t)(w->seconds * 1e6));
        return rc;
    }
    /* "augmentation": jitter every value, repeated until the time is spent */
    const float *x = out->x;
    size_t n = (size_t)out->n * 16;
    double t0 = dl_clock_mono_s();
    int round = 0;
    do {
        for (size_t i = 0; i < n; i++)
            w->aug[i] = x[i] + 0.01f * sinf((float)(i + (size_t)round));
        round++;
    } while (dl_clock_mono_s() - t0 < w->seconds);
    out->x = w->aug;
    return rc;
}

static size_t slow_batches(dl_source *s)
{
    slow_source *w = (slow_source *)s;
    return w->inner->ops->batches(w->inner);
}

static void slow_stats(dl_source *s, dl_loader_stats *st)
{
    memset(st, 0, sizeof *st);
    st->queue_size = 0;
}

static void slow_destroy(dl_source *s)
{
    slow_source *w = (slow_source *)s;
    dl_source_destroy(w->inner);
    free(w->aug);
    free(w);
}

static const dl_source_ops slow_ops = {slow_start, slow_next, slow_batches,
                                       slow_stats, NULL,      slow_destroy};

static dl_source *slow_source_create(dl_source *inner, slow_kind kind, double seconds, int batch)
{
    slow_source *w = calloc(1, sizeof *w);
    w->base.ops = &slow_ops;
    w->base.info = inner->info;
    snprintf(w->base.name, sizeof w->base.name, "slow(%.200s)", inner->name);
    w->inner = inner;
    w->kind = kind;
    w->seconds = seconds;
    w->aug = malloc((size_t)batch * 16 * sizeof(float));
    return &w->base;
}

static dl_layer *mlp(void)
{
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_linear(16, 64, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_linear(64, 4, 1));
    return s;
}

typedef struct run_sink {
    dl_telemetry *tele;
    dl_profiler *prof;
} run_sink;

static int sink_step(void *user, dl_trainer *t, const dl_step_info *i)
{
    run_sink *r = user;
    dl_telemetry_step(r->tele, i);
    if (r->prof)
        dl_telemetry_profile(r->tele, r->prof);
    return 0;
}

static int sink_epoch(void *user, dl_trainer *t, const dl_epoch_info *i)
{
    dl_telemetry_epoch(((run_sink *)user)->tele, i);
    return 0;
}

/* Trains steps through the telemetry, then asks the advisor over the
 * snapshot. Returns the advice count. */
static int train_and_advise(dl_source *src, float lr, int steps, int workers, dl_advice *adv,
                            int max, double *share)
{
    dl_model *m = NULL;
    dl_trainer *t = NULL;
    dl_profiler *p = NULL;
    dl_telemetry *tele = NULL;
    dl_telemetry_snapshot *snap = dl_telemetry_snapshot_create();
    int n = -1;
    dl_trainer_config cfg = dl_trainer_config_default();
    cfg.batch = 32;
    cfg.epochs = 50;
    cfg.max_steps = steps;
    cfg.log_every = 1;
    cfg.nonfinite = DL_NONFINITE_SKIP;
    dl_optim o = dl_optim_sgd(lr, 0.9f, 0, 0);
    int rc = dl_model_create(&m, mlp(), &src->info.sample);
    if (rc == DL_OK)
        rc = dl_trainer_create(&t, m, &(dl_loss){DL_LOSS_XENT, 0, DL_IGNORE_NONE}, &o, NULL, src,
                               NULL, &cfg, be);
    if (rc == DL_OK)
        rc = dl_profiler_create(&p, NULL);
    if (rc == DL_OK)
        rc = dl_trainer_set_profiler(t, p);
    if (rc == DL_OK)
        rc = dl_telemetry_create(&tele);
    if (rc == DL_OK && snap) {
        dl_tele_run info = {0};
        snprintf(info.name, sizeof info.name, "advisor-test");
        snprintf(info.device, sizeof info.device, "cpu");
        info.batch = cfg.batch;
        info.accumulate = 1;
        info.workers = workers;
        info.state = DL_TELE_RUNNING;
        dl_telemetry_set_run(tele, &info);
        run_sink rs = {tele, p};
        dl_callbacks cb = {&rs, sink_step, sink_epoch, NULL, NULL};
        dl_trainer_set_callbacks(t, &cb);
        rc = dl_trainer_run(t);
        CHECK_OK(rc);
        dl_telemetry_set_state(tele, DL_TELE_FINISHED, NULL);
        dl_telemetry_read(tele, snap);
        n = dl_telemetry_advise(snap, adv, max);
        if (share)
            *share = snap->prof.step_ms > 0 ? snap->prof.data_ms / snap->prof.step_ms : 0;
    }
    CHECK_OK(rc);
    dl_telemetry_snapshot_destroy(snap);
    dl_telemetry_destroy(tele);
    dl_trainer_destroy(t);
    dl_profiler_destroy(p);
    dl_model_destroy(m);
    return n;
}

static const dl_advice *has(const dl_advice *a, int n, dl_advice_kind k)
{
    for (int i = 0; i < n; i++)
        if (a[i].kind == k)
            return &a[i];
    return NULL;
}

/* 15 steps over blobs behind a slow source (kind, seconds a batch) with
 * `workers` loader threads: the advice (up to 8) into adv, the data-wait
 * share into *share. Returns the advice count. */
static int advise_slow(slow_kind kind, double seconds, int workers, dl_advice adv[8], double *share)
{
    dl_dataset d;
    make_blobs(&d, 32 * 20);
    dl_source *mem;
    CHECK_OK(dl_source_memory(&mem, &d, 32, 1, 0, 1));
    dl_source *slow = slow_source_create(mem, kind, seconds, 32);
    int n = train_and_advise(slow, 0.05f, 15, workers, adv, 8, share);
    dl_source_destroy(slow);
    dl_dataset_done(&d);
    return n;
}

/* A loader that sleeps 20 ms a batch (10 ms with its two workers): the
 * model needs far less even on a loaded machine, so the
 * advisor names input-bound with the share and suggests more workers. */
static void test_slow_loader_input_bound(void)
{
    dl_advice adv[8];
    double share = 0;
    int n = advise_slow(SLOW_SLEEP, 0.020, 2, adv, &share);
    const dl_advice *a = has(adv, n, DL_ADV_INPUT_BOUND);
    CHECK_MSG(a != NULL, "data share %.2f, %d advices", share, n);
    CHECK(share > 0.5);
    if (a) {
        CHECK(a->level == DL_ADV_CRITICAL);
        CHECK(strstr(a->evidence, "data wait is") != NULL);
        CHECK(strstr(a->remedy, "workers") != NULL);
        CHECK(a == &adv[0] || adv[0].level >= a->level);
    }
}

/* workers = 0 and a heavy augmentation on the training thread: input-bound,
 * and the remedy names worker threads. */
static void test_augment_workers0_input_bound(void)
{
    dl_advice adv[8];
    double share = 0;
    int n = advise_slow(SLOW_AUGMENT, 0.003, 0, adv, &share);
    const dl_advice *a = has(adv, n, DL_ADV_INPUT_BOUND);
    CHECK_MSG(a != NULL, "data share %.2f", share);
    if (a) {
        CHECK(strstr(a->evidence, "0 loader workers") != NULL);
        CHECK(strstr(a->remedy, "set workers = 2") != NULL);
    }
    CHECK(!has(adv, n, DL_ADV_DIVERGENCE));
}

/* A learning rate far too large: the loss explodes or turns NaN. */
static void test_diverging_lr(void)
{
    dl_dataset d;
    make_blobs(&d, 32 * 40);
    dl_source *mem;
    CHECK_OK(dl_source_memory(&mem, &d, 32, 1, 0, 1));
    dl_advice adv[8];
    int n = train_and_advise(mem, 500.0f, 30, 2, adv, 8, NULL);
    const dl_advice *a = has(adv, n, DL_ADV_DIVERGENCE);
    CHECK(a != NULL);
    if (a) {
        CHECK(a->level == DL_ADV_CRITICAL);
        CHECK(a == &adv[0] || adv[0].level == DL_ADV_CRITICAL);
        CHECK(strstr(a->remedy, "lower the learning rate (try 50)") != NULL);
    }
    dl_source_destroy(mem);
    /* a sane rate on the same data: no divergence, no input-bound */
    CHECK_OK(dl_source_memory(&mem, &d, 32, 1, 0, 1));
    n = train_and_advise(mem, 0.05f, 30, 2, adv, 8, NULL);
    CHECK(!has(adv, n, DL_ADV_DIVERGENCE));
    CHECK(!has(adv, n, DL_ADV_INPUT_BOUND));
    dl_source_destroy(mem);
    dl_dataset_done(&d);
}

/* Deterministic noise: uniform in [-1, 1) from splitmix64. */
static double noise(uint64_t *st)
{
    uint64_t z = (*st += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0 * 2 - 1;
}

/* An overfitting curve of 40 epochs with noise `amp`: validation loss
 * down to its best at epoch 10 (0.50), then up to 0.85 while the training
 * loss keeps falling; validation accuracy peaks early and then sags. */
static void overfit_curves(double *train, double *val, double *acc, double *secs, double amp,
                           uint64_t seed)
{
    for (int e = 0; e < 40; e++) {
        train[e] = 1.0 / (1 + 0.3 * e);
        double v = e < 10 ? 1.0 - 0.05 * e : 0.5 + 0.35 * (e - 9) / 30.0;
        val[e] = v + amp * noise(&seed);
        acc[e] = (e < 10 ? 0.70 + 0.015 * e : 0.85 - 0.002 * (e - 9)) + 0.003 * noise(&seed);
        secs[e] = 2.0;
    }
}

/* Overfitting from a smoothed trend: set off by a rise well above the
 * noise (whatever the noise does to a streak of rises), with the best
 * epoch, the time past it and a command; not by a falling or flat noisy
 * curve. */
static void test_overfitting_noisy(void)
{
    double train[40], val[40], acc[40], secs[40];
    dl_advisor_input in;
    dl_advice adv[8];
    for (uint64_t seed = 1; seed <= 20; seed++) {
        overfit_curves(train, val, acc, secs, 0.03, seed);
        dl_advisor_input_init(&in);
        in.train_loss = train;
        in.val_loss = val;
        in.val_acc = acc;
        in.epoch_s = secs;
        in.nepochs = 40;
        in.epochs_planned = 40;
        int n = dl_advisor_run(&in, adv, 8);
        const dl_advice *a = has(adv, n, DL_ADV_OVERFITTING);
        CHECK_MSG(a != NULL, "seed %llu", (unsigned long long)seed);
        if (!a)
            continue;
        double best = NAN, past = NAN, stop = NAN;
        for (int i = 0; i < a->nnum; i++) {
            if (!strcmp(a->num[i].key, "best_epoch"))
                best = a->num[i].value;
            if (!strcmp(a->num[i].key, "seconds_past_best"))
                past = a->num[i].value;
            if (!strcmp(a->num[i].key, "stop_epoch"))
                stop = a->num[i].value;
        }
        /* the best is near epoch 10 (noise of +-0.03 on a rise of 0.012 an
         * epoch moves the raw minimum by a few epochs) */
        CHECK_MSG(best >= 7 && best <= 15, "best epoch %g, seed %llu", best,
                  (unsigned long long)seed);
        CHECK_NEAR(past, 2.0 * (40 - best), 1e-9);
        /* the accuracy peaks at epoch 10: stop there, give or take the noise */
        CHECK_MSG(stop >= 8 && stop <= 14, "stop epoch %g", stop);
        char want[48];
        snprintf(want, sizeof want, "--set epochs=%.0f", stop);
        CHECK(!strcmp(a->command, want));
        CHECK(a->saves_s > 0 && !strcmp(a->effect_basis, "estimate"));
    }
    for (uint64_t seed = 1; seed <= 20; seed++) {
        /* falling with noise: fine */
        uint64_t st = seed;
        for (int e = 0; e < 40; e++) {
            train[e] = 1.0 / (1 + 0.3 * e);
            val[e] = 0.4 + 0.6 / (1 + 0.2 * e) + 0.03 * noise(&st);
        }
        dl_advisor_input_init(&in);
        in.train_loss = train;
        in.val_loss = val;
        in.nepochs = 40;
        CHECK_MSG(!has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_OVERFITTING), "falling, seed %llu",
                  (unsigned long long)seed);
        /* a noisy plateau: not overfitting either */
        for (int e = 0; e < 40; e++)
            val[e] = (e < 5 ? 1.0 - 0.1 * e : 0.5) + 0.03 * noise(&st);
        const dl_advice *flat = has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_OVERFITTING);
        CHECK_MSG(!flat, "plateau, seed %llu: %s", (unsigned long long)seed,
                  flat ? flat->evidence : "");
    }
    /* the case: rises broken by noise (never three in a row) count */
    double t7[] = {1.0, 0.7, 0.5, 0.4, 0.3, 0.22, 0.15, 0.1, 0.07, 0.05, 0.04};
    double v7[] = {1.05, 0.8, 0.55, 0.51, 0.62, 0.58, 0.75, 0.70, 0.85, 0.78, 0.88};
    dl_advisor_input_init(&in);
    in.train_loss = t7;
    in.val_loss = v7;
    in.nepochs = 11;
    int n = dl_advisor_run(&in, adv, 8);
    const dl_advice *a = has(adv, n, DL_ADV_OVERFITTING);
    CHECK(a != NULL);
    if (a) {
        CHECK(strstr(a->evidence, "best at epoch 4 (0.5100)") != NULL);
        CHECK(!strcmp(a->command, "--set epochs=4"));
    }

    /* the same through the telemetry's epoch series (seconds included) */
    overfit_curves(train, val, acc, secs, 0.02, 7);
    dl_telemetry *t;
    CHECK_OK(dl_telemetry_create(&t));
    dl_telemetry_snapshot *s = dl_telemetry_snapshot_create();
    for (int e = 0; e < 40; e++) {
        dl_epoch_info ei = {0};
        ei.epoch = e;
        ei.train_loss = train[e];
        ei.val_loss = val[e];
        ei.val_acc = acc[e];
        ei.train_acc = NAN;
        ei.seconds = secs[e];
        ei.val_seconds = 0.1;
        dl_telemetry_epoch(t, &ei);
    }
    dl_telemetry_read(t, s);
    n = dl_telemetry_advise(s, adv, 8);
    a = has(adv, n, DL_ADV_OVERFITTING);
    CHECK(a != NULL);
    if (a)
        CHECK(strstr(a->evidence, "s trained past the best") != NULL);
    CHECK(!has(adv, n, DL_ADV_VALIDATION)); /* 5% of the time */
    dl_telemetry_snapshot_destroy(s);
    dl_telemetry_destroy(t);
}

/* A plateau: accuracy up for 6 epochs, then flat within noise for 24
 * (the loss flat too: no overfitting) - "--set epochs=K" with K in the first half (the noise delays it a little) and
 * the accuracy there within 0.4 point of the end; silent for a curve that
 * keeps rising by 0.5 point an epoch under the same noise, and for one
 * that flattens only in its last two epochs. */
static void test_plateau(void)
{
    enum { E = 30 };
    double tl[E], vl[E], acc[E], secs[E];
    uint64_t st = 5;
    dl_advisor_input in;
    dl_advice adv[8];
    for (int e = 0; e < E; e++) {
        double level = e < 6 ? 0.70 + 0.025 * e : 0.85;
        acc[e] = level + 0.003 * noise(&st);
        vl[e] = 0.45 + 0.01 * noise(&st);
        tl[e] = 0.5 - 0.002 * e;
        secs[e] = 1.0 + 0.05 * noise(&st);
    }
    dl_advisor_input_init(&in);
    in.train_loss = tl;
    in.val_loss = vl;
    in.val_acc = acc;
    in.epoch_s = secs;
    in.nepochs = E;
    in.epochs_planned = E;
    const dl_advice *a = has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_PLATEAU);
    CHECK(a != NULL);
    if (a) {
        int k = atoi(a->command + strlen("--set epochs="));
        CHECK_MSG(!strncmp(a->command, "--set epochs=", 13) && k >= 5 && k <= 14, "'%s'",
                  a->command);
        if (k >= 1 && k <= E)
            CHECK(acc[k - 1] >= acc[E - 1] - 0.004);
        CHECK(a->saves_s > 15);
    }
    /* still rising: no plateau */
    for (int e = 0; e < E; e++)
        acc[e] = 0.70 + 0.005 * e + 0.003 * noise(&st);
    CHECK(!has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_PLATEAU));
    /* flat only over the last two epochs */
    for (int e = 0; e < E; e++)
        acc[e] = 0.70 + 0.005 * (e < E - 2 ? e : E - 3) + 0.001 * noise(&st);
    CHECK(!has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_PLATEAU));
    /* no accuracy curve: silent */
    in.val_acc = NULL;
    CHECK(!has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_PLATEAU));
}

/* The input-bound command stops at the core count: 2 workers on 2 cores
 * get no "--set workers=4" (it would compete with the training's own
 * threads), 1 worker on 2 cores gets 2, and an unknown count keeps 2x. */
static void test_input_cores(void)
{
    dl_advisor_input in;
    dl_advice adv[8];
    dl_advisor_input_init(&in);
    in.step_ms = 0.13;
    in.data_wait_share = 0.21;
    in.workers = 2;
    in.cpu_cores = 2; /* the compute threads unknown: the core count bounds it */
    const dl_advice *a = has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_INPUT_BOUND);
    CHECK(a && !a->command[0] && strstr(a->remedy, "2 workers on 2 cores") != NULL);
    in.workers = 1;
    a = has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_INPUT_BOUND);
    CHECK(a && !strcmp(a->command, "--set workers=2"));
    in.workers = 2;
    in.cpu_cores = 16;
    a = has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_INPUT_BOUND);
    CHECK(a && !strcmp(a->command, "--set workers=4"));
    in.cpu_cores = -1;
    a = has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_INPUT_BOUND);
    CHECK(a && !strcmp(a->command, "--set workers=4"));
    /* a CPU training of 2 threads on 2 cores leaves none for a loader:
     * workers = 0 gets no command (measured on such a machine, workers = 2
     * was 0.77x to 1.2x, noise), 8 cores leave 6 */
    in.workers = 0;
    in.cpu_cores = 2;
    in.compute_threads = 2;
    a = has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_INPUT_BOUND);
    CHECK(a && !a->command[0] && strstr(a->remedy, "2 threads take the 2 cores") != NULL);
    in.cpu_cores = 8;
    a = has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_INPUT_BOUND);
    CHECK(a && !strcmp(a->command, "--set workers=2"));
    in.workers = 4;
    a = has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_INPUT_BOUND);
    CHECK(a && !strcmp(a->command, "--set workers=6"));
    in.on_gpu = 1; /* a GPU training leaves the cores to the loader */
    a = has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_INPUT_BOUND);
    CHECK(a && !strcmp(a->command, "--set workers=8"));
}

/* A batch too small, measured: the part of the step that does not grow
 * with the batch (the optimizer) paid less often projects a gain of at
 * least 1.2x at a batch up to 8x (as far as 128); the learning rate scaled with the batch (square root for
 * Adam, linear for SGD). Silent when the projection is small (whatever the
 * share outside the products), for a big batch, and when the loader is the
 * cause. The figures carry the noise of a shared machine: the rule reads
 * the projection, not one share against a threshold. */
static void test_small_batch(void)
{
    dl_advisor_input in;
    dl_advice adv[8];
    dl_advisor_input_init(&in);
    in.batch = 16;
    in.step_ms = 0.285;
    in.product_share = 0.61; /* 39% outside the products: the old 40% threshold missed it */
    in.fixed_share = 0.31;
    in.product_flops_per_s = 116e9;
    in.peak_flops = 204e9;
    in.data_wait_share = 0.05;
    in.base_lr = 0.001;
    in.adaptive_optim = 1;
    int n = dl_advisor_run(&in, adv, 8);
    const dl_advice *a = has(adv, n, DL_ADV_SMALL_BATCH);
    CHECK(a != NULL);
    if (a) {
        CHECK(strstr(a->evidence, "31% of the 0.285 ms step does not grow") != NULL);
        CHECK(!strcmp(a->command, "--set batch=128 --set lr=0.00283"));
        /* gain_lo = 8 / (0.31 + 8 * 0.69) = 1.372; gain_hi with the products at the peak */
        double lo = NAN, hi = NAN;
        for (int i = 0; i < a->nnum; i++) {
            if (!strcmp(a->num[i].key, "gain_lo"))
                lo = a->num[i].value;
            if (!strcmp(a->num[i].key, "gain_hi"))
                hi = a->num[i].value;
        }
        CHECK_NEAR(lo, 8 / (0.31 + 8 * 0.69), 1e-9);
        CHECK_NEAR(hi, 8 / (0.31 + 8 * (0.69 - 0.61) + 8 * 0.61 * 116.0 / 204), 1e-9);
        CHECK(strstr(a->effect, "1.37x to") != NULL);
    }
    /* noisy repeats of the same run (step, shares jittered by up to 10%) all fire */
    uint64_t st = 11;
    for (int r = 0; r < 20; r++) {
        in.step_ms = 0.285 * (1 + 0.1 * noise(&st));
        in.fixed_share = 0.31 * (1 + 0.1 * noise(&st));
        in.product_share = 0.61 * (1 + 0.1 * noise(&st));
        CHECK_MSG(has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_SMALL_BATCH), "repeat %d", r);
    }
    in.step_ms = 0.285;
    in.fixed_share = 0.31;
    in.product_share = 0.61;
    in.adaptive_optim = 0;
    in.base_lr = 0.05;
    a = has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_SMALL_BATCH);
    CHECK(a && !strcmp(a->command, "--set batch=128 --set lr=0.4"));
    in.batch = 32; /* x8 would pass 128: x4 */
    a = has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_SMALL_BATCH);
    CHECK(a && !strcmp(a->command, "--set batch=128 --set lr=0.2"));
    in.batch = 64; /* x2, gain_lo = 2 / (0.31 + 2 * 0.69) = 1.18: silent */
    CHECK(!has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_SMALL_BATCH));
    in.fixed_share = 0.5; /* 2 / 1.5 = 1.33 */
    a = has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_SMALL_BATCH);
    CHECK(a && !strcmp(a->command, "--set batch=128 --set lr=0.1"));
    in.batch = 256;
    CHECK(!has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_SMALL_BATCH));
    /* most of the step outside the products, but it grows with the batch
     * (element-wise layers): a larger batch saves little, silent, noise or not */
    in.batch = 16;
    in.product_share = 0.3;
    for (int r = 0; r < 20; r++) {
        in.fixed_share = 0.08 * (1 + 0.2 * noise(&st)); /* gain_lo <= 1.09 */
        CHECK_MSG(!has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_SMALL_BATCH), "repeat %d", r);
    }
    in.fixed_share = -1; /* no profile: silent */
    CHECK(!has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_SMALL_BATCH));
    in.fixed_share = 0.4;
    in.data_wait_share = 0.6; /* the loader's fault: input-bound speaks */
    n = dl_advisor_run(&in, adv, 8);
    CHECK(!has(adv, n, DL_ADV_SMALL_BATCH) && has(adv, n, DL_ADV_INPUT_BOUND));
}

/* Validation's share of the wall time, from noisy epoch timings: the
 * frequency suggested brings it to about 10%. */
static void test_validation_share(void)
{
    double secs[12], val[12];
    uint64_t st = 3;
    for (int e = 0; e < 12; e++) {
        val[e] = 0.3 + 0.03 * noise(&st);
        secs[e] = 0.4 + 0.05 * noise(&st) + val[e]; /* 43% validation */
    }
    dl_advisor_input in;
    dl_advisor_input_init(&in);
    in.epoch_s = secs;
    in.val_s = val;
    in.nepochs = 12;
    in.epochs_planned = 12;
    dl_advice adv[8];
    int n = dl_advisor_run(&in, adv, 8);
    const dl_advice *a = has(adv, n, DL_ADV_VALIDATION);
    CHECK(a != NULL);
    if (a) {
        CHECK(a->level == DL_ADV_WARNING);
        int k = 0;
        CHECK(sscanf(a->command, "--set val_every=%d", &k) == 1);
        /* the smallest k with val / (k train + val) <= 10% */
        double tv = 0, vv = 0;
        for (int e = 0; e < 12; e++)
            tv += secs[e] - val[e], vv += val[e];
        tv /= 12, vv /= 12;
        CHECK(vv / (k * tv + vv) <= 0.1 + 1e-12);
        CHECK(vv / ((k - 1) * tv + vv) > 0.1);
        CHECK(a->saves_s > 0);
    }
    for (int e = 0; e < 12; e++)
        val[e] = 0.05 + 0.01 * noise(&st), secs[e] = 1.0 + 0.1 * noise(&st);
    CHECK(!has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_VALIDATION));
}

/* Precision that knows the hardware: bf16 where the CPU emulates it is a
 * warning with fp32 as the command; bf16 is offered only where the CPU has
 * it and the products dominate; never where it is emulated. */
static void test_precision_cpu(void)
{
    dl_advisor_input in;
    dl_advice adv[8];
    dl_advisor_input_init(&in);
    in.precision = DL_PREC_BF16;
    in.bf16_native = 0;
    int n = dl_advisor_run(&in, adv, 8);
    const dl_advice *a = has(adv, n, DL_ADV_PRECISION);
    CHECK(a && a->level == DL_ADV_WARNING);
    if (a) {
        CHECK(strstr(a->evidence, "bf16 is emulated on this CPU: about 0.9x the speed of fp32"));
        CHECK(!strcmp(a->command, "--set precision=fp32"));
    }
    in.bf16_native = 1; /* native: bf16 stays */
    CHECK(!has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_PRECISION));
    in.precision = DL_PREC_F32;
    in.product_share = 0.7;
    a = has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_PRECISION);
    CHECK(a && a->level == DL_ADV_INFO && !strcmp(a->command, "--set precision=bf16"));
    in.bf16_native = 0; /* emulated: never bf16 */
    CHECK(!has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_PRECISION));
    in.bf16_native = -1; /* unknown: silent */
    CHECK(!has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_PRECISION));
    in.precision = DL_PREC_F16;
    in.f16_native = 0;
    a = has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_PRECISION);
    CHECK(a && strstr(a->evidence, "fp16 is emulated"));
}

/* A learning rate far off from the loss curve: too low (a steady fall of
 * a few percent over 200 steps) and too high (flat and jumping), each with
 * noise; a healthy noisy curve sets off neither. */
static void test_learning_rate(void)
{
    double l[200];
    dl_advisor_input in;
    dl_advice adv[8];
    for (uint64_t seed = 1; seed <= 10; seed++) {
        uint64_t st = seed;
        for (int i = 0; i < 200; i++)
            l[i] = 2.30 - 0.0004 * i + 0.005 * noise(&st);
        dl_advisor_input_init(&in);
        in.all_step_loss = l;
        in.nall_steps = 200;
        in.base_lr = 1e-5;
        const dl_advice *a = has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_LEARNING_RATE);
        CHECK_MSG(a != NULL, "too low, seed %llu", (unsigned long long)seed);
        if (a)
            CHECK(strstr(a->evidence, "too low") && !strcmp(a->command, "--set lr=0.0001"));
        for (int i = 0; i < 200; i++)
            l[i] = 2.30 + 0.9 * noise(&st);
        a = has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_LEARNING_RATE);
        CHECK_MSG(a && strstr(a->evidence, "too high"), "too high, seed %llu: %s",
                  (unsigned long long)seed, a ? a->evidence : "none");
        if (a)
            CHECK(!strcmp(a->command, "--set lr=1e-06"));
        for (int i = 0; i < 200; i++)
            l[i] = 0.3 + 2.0 * exp(-i / 30.0) + 0.05 * noise(&st);
        CHECK_MSG(!has(adv, dl_advisor_run(&in, adv, 8), DL_ADV_LEARNING_RATE),
                  "healthy, seed %llu", (unsigned long long)seed);
    }
}

/* The machine-readable form: kind, evidence, numbers, effect, command. */
static void test_advice_json(void)
{
    dl_advisor_input in;
    dl_advisor_input_init(&in);
    in.precision = DL_PREC_BF16;
    in.bf16_native = 0;
    dl_advice adv[2];
    CHECK(dl_advisor_run(&in, adv, 2) == 1);
    cJSON *j = dl_advice_json(&adv[0]);
    CHECK(j != NULL);
    char *text = cJSON_PrintUnformatted(j);
    cJSON *back = cJSON_Parse(text);
    CHECK(!strcmp(cJSON_GetObjectItem(back, "kind")->valuestring, "precision"));
    CHECK(!strcmp(cJSON_GetObjectItem(back, "command")->valuestring, "--set precision=fp32"));
    CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(back, "numbers"), "native")->valuedouble == 0);
    CHECK(cJSON_IsObject(cJSON_GetObjectItem(back, "effect")));
    cJSON_Delete(back);
    free(text);
    cJSON_Delete(j);
}

/* GPU rules from constructed numbers: many tiny ops with no data wait and
 * an idle GPU (launch-bound); fp32 on an H100 (precision); 10% of the
 * memory used (headroom); a failed allocation (out of memory). */
static void test_gpu_rules(void)
{
    dl_advisor_input in;
    dl_advisor_input_init(&in);
    in.on_gpu = 1;
    snprintf(in.gpu_name, sizeof in.gpu_name, "NVIDIA H100 80GB HBM3");
    in.gpu_util_pct = 35;
    in.step_ms = 2.0;
    in.data_wait_share = 0.02;
    in.leaf_ops_per_step = 120;
    in.mean_op_ms = 0.012;
    in.gpu_mem_used_mb = 8000;
    in.gpu_mem_total_mb = 81559;
    in.precision = DL_PREC_F32;
    in.batch = 64;
    dl_advice adv[8];
    int n = dl_advisor_run(&in, adv, 8);
    const dl_advice *l = has(adv, n, DL_ADV_LAUNCH_BOUND);
    const dl_advice *p = has(adv, n, DL_ADV_PRECISION);
    const dl_advice *h = has(adv, n, DL_ADV_MEMORY_HEADROOM);
    CHECK(l && p && h);
    CHECK(!has(adv, n, DL_ADV_INPUT_BOUND));
    if (l)
        CHECK(strstr(l->evidence, "120 layer passes per step averaging 12.0 us") != NULL);
    if (p)
        CHECK(strstr(p->remedy, "bf16") && strstr(p->remedy, "15x"));
    if (h)
        CHECK(strstr(h->evidence, "90% free") && strstr(h->remedy, "now 64"));
    /* the ordering: warnings before information */
    CHECK(adv[0].kind == DL_ADV_LAUNCH_BOUND);

    /* bf16 already, memory full: neither precision nor headroom */
    in.precision = DL_PREC_BF16;
    in.gpu_mem_used_mb = 78000;
    n = dl_advisor_run(&in, adv, 8);
    CHECK(!has(adv, n, DL_ADV_PRECISION) && !has(adv, n, DL_ADV_MEMORY_HEADROOM));

    /* an idle GPU with an empty loader queue: input-bound even without a share */
    dl_advisor_input_init(&in);
    in.on_gpu = 1;
    in.gpu_util_pct = 20;
    in.queue_fill = 0;
    in.queue_size = 4;
    in.workers = 2;
    n = dl_advisor_run(&in, adv, 8);
    CHECK(has(adv, n, DL_ADV_INPUT_BOUND) != NULL);

    dl_advisor_input_init(&in);
    in.oom = 1;
    in.batch = 512;
    snprintf(in.oom_text, sizeof in.oom_text, "cuda: out of memory allocating 2.0 GiB");
    n = dl_advisor_run(&in, adv, 8);
    const dl_advice *o = has(adv, n, DL_ADV_OOM);
    CHECK(o && o->level == DL_ADV_CRITICAL);
    if (o)
        CHECK(strstr(o->evidence, "batch 512") && strstr(o->remedy, "batch = 256, accumulate = 2"));

    /* nothing known: nothing said */
    dl_advisor_input_init(&in);
    CHECK(dl_advisor_run(&in, adv, 8) == 0);
    CHECK(!strcmp(dl_advice_name(DL_ADV_INPUT_BOUND), "input-bound"));
}

int main(void)
{
    be = dl_backend_cpu(0);
    RUN(test_slow_loader_input_bound);
    RUN(test_input_cores);
    RUN(test_plateau);
    RUN(test_augment_workers0_input_bound);
    RUN(test_diverging_lr);
    RUN(test_overfitting_noisy);
    RUN(test_small_batch);
    RUN(test_validation_share);
    RUN(test_precision_cpu);
    RUN(test_learning_rate);
    RUN(test_advice_json);
    RUN(test_gpu_rules);
    CHECK_EXIT();
}
