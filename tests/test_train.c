/* test_train.c - the trainer: accumulation, determinism, loss scaling, non-finite policy, Fashion-MNIST end to end, per-token language models */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/backend.h"
#include "engine/data/data.h"
#include "engine/base/error.h"
#include "engine/nn/nn.h"
#include "engine/nn/optim.h"
#include "engine/base/rng.h"
#include "engine/train/trainer.h"
#include "tests/check.h"

static dl_backend *be;

/* A synthetic classification set: 3 Gaussian blobs in 8 dimensions. */
static void make_blobs(dl_dataset *d, size_t count, uint64_t seed)
{
    memset(d, 0, sizeof *d);
    d->info.sample = (dl_shape){1, {8}};
    d->info.x_dtype = DL_F32;
    d->info.y_dtype = DL_I32;
    d->info.y_width = 1;
    d->info.classes = 3;
    d->info.count = count;
    d->info.scale = 1;
    float *x = malloc(count * 8 * 4);
    int32_t *y = malloc(count * 4);
    for (size_t i = 0; i < count; i++) {
        y[i] = (int32_t)(i % 3);
        for (int k = 0; k < 8; k++)
            x[i * 8 + k] = (k == y[i] ? 2.0f : 0.0f) + dl_rng_normal(seed, 99, i, (uint64_t)k);
    }
    d->x = x;
    d->y = y;
    snprintf(d->name, sizeof d->name, "blobs");
}

static dl_layer *mlp(int in, int hidden, int out, float dropout)
{
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_linear(in, hidden, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    if (dropout > 0)
        dl_nn_sequential_add(s, dl_nn_dropout(dropout));
    dl_nn_sequential_add(s, dl_nn_linear(hidden, out, 1));
    return s;
}

typedef struct {
    int events;
    int overflow_events;
    double last_loss;
} log_sink;

static void on_event(void *user, dl_trainer *t, const char *kind, const char *text)
{
    log_sink *s = user;
    s->events++;
    if (!strcmp(kind, "loss_scale"))
        s->overflow_events++;
}

static int on_step(void *user, dl_trainer *t, const dl_step_info *info)
{
    ((log_sink *)user)->last_loss = info->loss;
    return 0;
}

/* Trains a fresh MLP on d and returns its parameters (malloc'd). */
static float *train_params(const dl_dataset *d, int batch, int accumulate, long steps,
                           uint64_t seed, dl_precision prec, float dropout, size_t *count,
                           log_sink *sink, dl_optim opt)
{
    dl_model *m;
    if (dl_model_create(&m, mlp(8, 16, 3, dropout), &d->info.sample) < 0)
        return NULL;
    dl_source *src;
    dl_source_memory(&src, d, batch, 0, 0, seed);
    dl_trainer_config cfg = dl_trainer_config_default();
    cfg.batch = batch;
    cfg.accumulate = accumulate;
    cfg.max_steps = steps;
    cfg.epochs = 100;
    cfg.seed = seed;
    cfg.precision = prec;
    cfg.log_every = 1;
    dl_model_init_state(m, be, dl_optim_moments(&opt), seed);
    dl_loss loss = {DL_LOSS_XENT, 0, DL_IGNORE_NONE};
    dl_trainer *t;
    float *out = NULL;
    if (dl_trainer_create(&t, m, &loss, &opt, NULL, src, NULL, &cfg, be) == DL_OK) {
        if (sink) {
            dl_callbacks cb = {sink, on_step, NULL, on_event, NULL};
            dl_trainer_set_callbacks(t, &cb);
        }
        int rc = dl_trainer_run(t);
        if (rc == DL_OK) {
            dl_model_state s;
            dl_model_get_state(m, &s);
            *count = s.count;
            out = malloc(s.count * 4);
            memcpy(out, s.params, s.count * 4);
        }
        dl_trainer_destroy(t);
    }
    dl_source_destroy(src);
    dl_model_destroy(m);
    return out;
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static void test_accumulation_equivalence(void)
{
    /* 4 micro-batches of 16 give the same update as one batch of 64 */
    dl_dataset d;
    make_blobs(&d, 256, 1);
    size_t n1, n2;
    dl_optim opt = dl_optim_sgd(0.1f, 0.9f, 0, 1e-3f);
    float *big = train_params(&d, 64, 1, 6, 3, DL_PREC_F32, 0, &n1, NULL, opt);
    float *acc = train_params(&d, 16, 4, 6, 3, DL_PREC_F32, 0, &n2, NULL, opt);
    CHECK(big && acc && n1 == n2);
    if (big && acc)
        CHECK_MSG(max_abs_diff(big, acc, n1) < 2e-6, "max difference %.3g",
                  max_abs_diff(big, acc, n1));
    free(big);
    free(acc);
    dl_dataset_done(&d);
}

static void test_determinism(void)
{
    /* same seed: bit-identical parameters, dropout included; other seed: different */
    dl_dataset d;
    make_blobs(&d, 256, 2);
    size_t n;
    dl_optim opt = dl_optim_adam(1e-2f, 0);
    float *a = train_params(&d, 32, 1, 20, 7, DL_PREC_F32, 0.2f, &n, NULL, opt);
    float *b = train_params(&d, 32, 1, 20, 7, DL_PREC_F32, 0.2f, &n, NULL, opt);
    float *c = train_params(&d, 32, 1, 20, 8, DL_PREC_F32, 0.2f, &n, NULL, opt);
    CHECK(a && b && c);
    if (a && b && c) {
        CHECK(memcmp(a, b, n * 4) == 0);
        CHECK(max_abs_diff(a, c, n) > 1e-3);
    }
    free(a);
    free(b);
    free(c);
    dl_dataset_done(&d);
}

/* The small set-up the trainer tests share: blobs, an MLP 8-16-3 with its
 * state, a memory source of batches of 32 and a default config for them. */
typedef struct blob_setup {
    dl_dataset d;
    dl_model *m;
    dl_source *src;
    dl_trainer_config cfg;
} blob_setup;

static void blob_setup_init(blob_setup *b, size_t count, uint64_t data_seed, int shuffle,
                            int moments)
{
    make_blobs(&b->d, count, data_seed);
    dl_model_create(&b->m, mlp(8, 16, 3, 0), &b->d.info.sample);
    dl_model_init_state(b->m, be, moments, 1);
    dl_source_memory(&b->src, &b->d, 32, shuffle, 0, 1);
    b->cfg = dl_trainer_config_default();
    b->cfg.batch = 32;
}

static void blob_setup_done(blob_setup *b)
{
    dl_source_destroy(b->src);
    dl_model_destroy(b->m);
    dl_dataset_done(&b->d);
}

static const dl_loss xent = {DL_LOSS_XENT, 0, DL_IGNORE_NONE};

static void test_loss_scale_overflow(void)
{
    /* an initial fp16 scale of 2^40 overflows: steps are skipped and the
     * scale halves until the scaled gradients fit, then training goes on */
    blob_setup b;
    blob_setup_init(&b, 512, 3, 1, 1);
    b.cfg.epochs = 8;
    b.cfg.precision = DL_PREC_F16;
    b.cfg.loss_scale = 1099511627776.0f; /* 2^40 */
    b.cfg.loss_scale_window = 5;
    b.cfg.log_every = 1;
    dl_optim opt = dl_optim_sgd(0.1f, 0.9f, 0, 0);
    dl_trainer *t;
    log_sink sink = {0};
    CHECK_OK(dl_trainer_create(&t, b.m, &xent, &opt, NULL, b.src, NULL, &b.cfg, be));
    dl_callbacks cb = {&sink, on_step, NULL, on_event, NULL};
    dl_trainer_set_callbacks(t, &cb);
    dl_model_state s;
    dl_model_get_state(b.m, &s);
    float *before = malloc(s.count * 4);
    memcpy(before, s.params, s.count * 4);
    /* the first step overflows: no parameter may change */
    CHECK(dl_trainer_step(t) == 0);
    CHECK(max_abs_diff(before, s.params, s.count) == 0);
    CHECK_NEAR(dl_trainer_loss_scale(t), 549755813888.0, 0);
    CHECK_OK(dl_trainer_run(t));
    CHECK(sink.overflow_events >= 20); /* 2^40 down to ~2^20 or below */
    float scale = dl_trainer_loss_scale(t);
    CHECK_MSG(scale < 1.1e9f && scale >= 1.0f, "final scale %g", (double)scale);
    double eval_loss, eval_acc;
    CHECK_OK(dl_trainer_evaluate(t, b.src, &eval_loss, &eval_acc));
    CHECK_MSG(eval_loss < 0.5 && eval_acc > 0.8, "after overflow recovery: loss %g, acc %g",
              eval_loss, eval_acc);
    free(before);
    dl_trainer_destroy(t);
    blob_setup_done(&b);
}

static void test_loss_scale_growth(void)
{
    /* a scale that never overflows doubles after each window of clean steps */
    blob_setup b;
    blob_setup_init(&b, 512, 3, 1, 0);
    b.cfg.precision = DL_PREC_F16;
    b.cfg.loss_scale = 8.0f;
    b.cfg.loss_scale_window = 5;
    dl_optim opt = dl_optim_sgd(0.1f, 0, 0, 0);
    dl_trainer *t;
    CHECK_OK(dl_trainer_create(&t, b.m, &xent, &opt, NULL, b.src, NULL, &b.cfg, be));
    for (int i = 0; i < 4; i++)
        CHECK(dl_trainer_step(t) == 0);
    CHECK_NEAR(dl_trainer_loss_scale(t), 8.0, 0);
    CHECK(dl_trainer_step(t) == 0);
    CHECK_NEAR(dl_trainer_loss_scale(t), 16.0, 0);
    for (int i = 0; i < 5; i++)
        CHECK(dl_trainer_step(t) == 0);
    CHECK_NEAR(dl_trainer_loss_scale(t), 32.0, 0);
    dl_trainer_destroy(t);
    blob_setup_done(&b);
}

static void test_nonfinite_stop(void)
{
    blob_setup b;
    blob_setup_init(&b, 256, 4, 0, 0);
    ((float *)b.d.x)[5] = NAN; /* a poisoned sample in the first batch */
    dl_optim opt = dl_optim_sgd(0.1f, 0, 0, 0);
    dl_trainer *t;
    CHECK_OK(dl_trainer_create(&t, b.m, &xent, &opt, NULL, b.src, NULL, &b.cfg, be));
    int rc = dl_trainer_run(t);
    CHECK(rc == DL_ENONFINITE);
    CHECK_MSG(strstr(dl_error_message(), "step 1") != NULL, "%s", dl_error_message());
    dl_trainer_destroy(t);
    /* with the skip policy the poisoned step is skipped and training goes on */
    b.cfg.nonfinite = DL_NONFINITE_SKIP;
    CHECK_OK(dl_trainer_create(&t, b.m, &xent, &opt, NULL, b.src, NULL, &b.cfg, be));
    CHECK_OK(dl_trainer_run(t));
    dl_model_state s;
    dl_model_get_state(b.m, &s);
    int finite = 1;
    for (size_t i = 0; i < s.count; i++)
        finite &= isfinite(s.params[i]);
    CHECK(finite);
    CHECK(dl_trainer_step_count(t) == 8);
    dl_trainer_destroy(t);
    blob_setup_done(&b);
}

static void test_commands(void)
{
    /* set-LR applies at the next step; stop ends the run between steps */
    blob_setup b;
    blob_setup_init(&b, 256, 5, 1, 0);
    b.cfg.epochs = 50;
    dl_optim opt = dl_optim_sgd(0.1f, 0, 0, 0);
    dl_trainer *t;
    CHECK_OK(dl_trainer_create(&t, b.m, &xent, &opt, NULL, b.src, NULL, &b.cfg, be));
    CHECK_OK(dl_trainer_post(t, DL_CMD_SET_LR, 0.025, NULL));
    CHECK_OK(dl_trainer_post(t, DL_CMD_STOP, 0, NULL));
    CHECK_OK(dl_trainer_run(t));
    CHECK(dl_trainer_stopped(t));
    CHECK(dl_trainer_step_count(t) == 0);
    CHECK_NEAR(dl_trainer_base_lr(t), 0.025, 1e-9);
    dl_trainer_destroy(t);
    blob_setup_done(&b);
}

/* --- Fashion-MNIST end to end --------------------------------------------------- */

#define FMNIST "/usr/share/datasets/fashion-mnist"

static int load_fmnist(dl_dataset *train, dl_dataset *test)
{
    if (dl_dataset_load_fashion_mnist(train, FMNIST, "train") < 0) {
        SKIP("Fashion-MNIST not readable in " FMNIST " (apt-get install dataset-fashion-mnist): %s",
             dl_error_message());
        return -1;
    }
    if (dl_dataset_load_fashion_mnist(test, FMNIST, "t10k") < 0) {
        dl_dataset_done(train);
        SKIP("Fashion-MNIST test split not readable: %s", dl_error_message());
        return -1;
    }
    return 0;
}

static double train_fmnist(dl_layer *net, int epochs, dl_optim opt, const dl_schedule *sched,
                           size_t subset, dl_precision prec)
{
    dl_dataset train, test;
    if (load_fmnist(&train, &test) < 0) {
        dl_layer_destroy(net);
        return NAN;
    }
    if (subset)
        dl_dataset_truncate(&train, subset);
    /* per-channel normalisation with the training set's statistics
     * (mean 0.2860, std 0.3530 after scaling to [0, 1]) */
    train.info.channels = test.info.channels = 1;
    train.info.mean[0] = test.info.mean[0] = 0.2860f;
    train.info.std[0] = test.info.std[0] = 0.3530f;
    dl_model *m;
    double acc = NAN;
    CHECK_OK(dl_model_create(&m, net, &train.info.sample));
    dl_source *tr, *te;
    CHECK_OK(dl_source_memory(&tr, &train, 128, 1, 0, 1));
    CHECK_OK(dl_source_memory(&te, &test, 128, 0, 0, 1));
    dl_trainer_config cfg = dl_trainer_config_default();
    cfg.batch = 128;
    cfg.epochs = epochs;
    cfg.seed = 1;
    cfg.precision = prec;
    cfg.log_every = 100;
    CHECK_OK(dl_model_init_state(m, be, dl_optim_moments(&opt), 1));
    dl_loss loss = {DL_LOSS_XENT, 0, DL_IGNORE_NONE};
    dl_trainer *t;
    if (dl_trainer_create(&t, m, &loss, &opt, sched, tr, te, &cfg, be) == DL_OK) {
        CHECK_OK(dl_trainer_run(t));
        double l;
        CHECK_OK(dl_trainer_evaluate(t, te, &l, &acc));
        printf("  test accuracy %.2f%%, loss %.4f\n", acc * 100, l);
        dl_trainer_destroy(t);
    }
    dl_source_destroy(tr);
    dl_source_destroy(te);
    dl_model_destroy(m);
    dl_dataset_done(&train);
    dl_dataset_done(&test);
    return acc;
}

static void test_fmnist_mlp(void)
{
    /* MLP 784-512-256-10, SGD momentum, 2 epochs: >= 84% test accuracy */
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_flatten());
    dl_nn_sequential_add(s, dl_nn_linear(784, 512, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_linear(512, 256, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_linear(256, 10, 1));
    double acc = train_fmnist(s, 2, dl_optim_sgd(0.05f, 0.9f, 0, 0), NULL, 0, DL_PREC_F32);
    if (!isnan(acc))
        CHECK_MSG(acc >= 0.84, "accuracy %.4f", acc);
}

static void test_fmnist_cnn(void)
{
    /* conv3x3(1->32)-ReLU-maxpool2-conv3x3(32->64)-ReLU-maxpool2-Linear(1600->128)-ReLU-
     * Linear(->10), Adam, 1 epoch on the full training set: >= 85% */
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_conv2d(1, 32, 3, 1, 0, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_maxpool2d(2, 2, 0));
    dl_nn_sequential_add(s, dl_nn_conv2d(32, 64, 3, 1, 0, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_maxpool2d(2, 2, 0));
    dl_nn_sequential_add(s, dl_nn_flatten());
    dl_nn_sequential_add(s, dl_nn_linear(1600, 128, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_linear(128, 10, 1));
    double acc = train_fmnist(s, 1, dl_optim_adam(1e-3f, 0), NULL, 0, DL_PREC_F32);
    if (!isnan(acc))
        CHECK_MSG(acc >= 0.85, "accuracy %.4f", acc);
}

static void test_fmnist_bf16(void)
{
    /* bf16 products with fp32 master weights train as well as fp32 */
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_flatten());
    dl_nn_sequential_add(s, dl_nn_linear(784, 256, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_linear(256, 10, 1));
    dl_schedule cos = dl_schedule_constant();
    cos.kind = DL_SCHED_COSINE;
    double acc = train_fmnist(s, 1, dl_optim_sgd(0.05f, 0.9f, 0, 0), &cos, 0, DL_PREC_BF16);
    if (!isnan(acc))
        CHECK_MSG(acc >= 0.83, "accuracy %.4f", acc);
}

/* --- language models: per-token cross-entropy ----------------------------- */

/* Next-token windows of a cyclic sequence: x[i] = (start + i) % vocab, y[i]
 * = x[i] + 1 (mod vocab); targets at (r + i) % every == 0 are set to
 * ignore (every 0: none). */
static void make_tokens(dl_dataset *d, size_t count, int T, int vocab, int every, int ignore)
{
    memset(d, 0, sizeof *d);
    d->info.sample = (dl_shape){1, {T}};
    d->info.x_dtype = DL_F32;
    d->info.y_dtype = DL_I32;
    d->info.y_width = T;
    d->info.classes = vocab;
    d->info.count = count;
    d->info.scale = 1;
    float *x = malloc(count * (size_t)T * 4);
    int32_t *y = malloc(count * (size_t)T * 4);
    for (size_t r = 0; r < count; r++)
        for (int i = 0; i < T; i++) {
            int v = (int)((r * 3 + (size_t)i) % (size_t)vocab);
            x[r * T + i] = (float)v;
            y[r * T + i] = every && (r + (size_t)i) % (size_t)every == 0 ? ignore : (v + 1) % vocab;
        }
    d->x = x;
    d->y = y;
    snprintf(d->name, sizeof d->name, "tokens");
}

/* Embedding(vocab, dim) -> Linear(dim, out) over [T] ids: logits [T, out]. */
static dl_layer *tiny_lm(int vocab, int dim, int out)
{
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_embedding(vocab, dim));
    dl_nn_sequential_add(s, dl_nn_linear(dim, out, 1));
    return s;
}

typedef struct lm_fixture {
    dl_dataset d;
    dl_source *src;
    dl_model *m;
    dl_trainer *t;
} lm_fixture;

static int lm_open(lm_fixture *f, size_t count, int T, int vocab, int every, int batch, long steps,
                   dl_loss loss, dl_optim opt)
{
    memset(f, 0, sizeof *f);
    make_tokens(&f->d, count, T, vocab, every, loss.ignore_index);
    dl_source_memory(&f->src, &f->d, batch, 0, 0, 5);
    if (dl_model_create(&f->m, tiny_lm(vocab, 16, vocab), &f->d.info.sample) < 0)
        return -1;
    dl_model_init_state(f->m, be, dl_optim_moments(&opt), 5);
    dl_trainer_config cfg = dl_trainer_config_default();
    cfg.batch = batch;
    cfg.epochs = 1000;
    cfg.max_steps = steps;
    cfg.log_every = 1;
    cfg.seed = 5;
    return dl_trainer_create(&f->t, f->m, &loss, &opt, NULL, f->src, f->src, &cfg, be);
}

static void lm_close(lm_fixture *f)
{
    dl_trainer_destroy(f->t);
    dl_source_destroy(f->src);
    dl_model_destroy(f->m);
    dl_dataset_done(&f->d);
}

static void test_lm_learns(void)
{
    /* ln 8 = 2.08 nats per token at the start; the task is deterministic */
    lm_fixture f;
    dl_loss loss = {DL_LOSS_XENT, 0, DL_IGNORE_NONE};
    CHECK(lm_open(&f, 64, 8, 8, 0, 16, 150, loss, dl_optim_adam(0.05f, 0)) == DL_OK);
    if (f.t) {
        CHECK(dl_trainer_tokens(f.t) == 8);
        double before, after, acc;
        CHECK(dl_trainer_evaluate(f.t, f.src, &before, &acc) == DL_OK);
        CHECK(dl_trainer_run(f.t) == DL_OK);
        CHECK(dl_trainer_evaluate(f.t, f.src, &after, &acc) == DL_OK);
        CHECK_MSG(before > 1.5 && after < 0.05, "loss per token %.4f -> %.4f", before, after);
        CHECK_MSG(acc > 0.99, "token accuracy %.4f", acc);
    }
    lm_close(&f);
}

/* The mean cross-entropy of logits [rows, V] over targets not ignore;
 * *acc: the kept tokens' argmax accuracy. */
static double hand_xent(const float *z, const int32_t *y, int rows, int V, int ignore, double *acc)
{
    double sum = 0, correct = 0;
    int kept = 0;
    for (int r = 0; r < rows; r++) {
        if (y[r] == ignore)
            continue;
        const float *zr = z + (size_t)r * V;
        double mx = zr[0], se = 0;
        int arg = 0;
        for (int k = 1; k < V; k++)
            if (zr[k] > mx)
                mx = zr[k], arg = k;
        for (int k = 0; k < V; k++)
            se += exp(zr[k] - mx);
        sum += log(se) + mx - zr[y[r]];
        correct += arg == y[r];
        kept++;
    }
    *acc = correct / kept;
    return sum / kept;
}

static void test_lm_loss_by_hand(void)
{
    /* one batch of 3 windows of 5 tokens, every third target ignored: the
     * trainer's step loss and its validation loss are the hand mean */
    lm_fixture f;
    dl_loss loss = {DL_LOSS_XENT, 0, -1};
    CHECK(lm_open(&f, 3, 5, 6, 3, 3, 1, loss, dl_optim_sgd(0.1f, 0, 0, 0)) == DL_OK);
    if (!f.t) {
        lm_close(&f);
        return;
    }
    double val, val_acc, hand_acc;
    CHECK(dl_trainer_evaluate(f.t, f.src, &val, &val_acc) == DL_OK);
    double hand = hand_xent(dl_model_output(f.m), f.d.y, 15, 6, -1, &hand_acc);
    CHECK_MSG(fabs(val - hand) < 1e-5, "validation %.7f, by hand %.7f", val, hand);
    CHECK(fabs(val_acc - hand_acc) < 1e-6);
    CHECK(hand > 1.0); /* untrained: near ln 6 */
    log_sink sink = {0};
    dl_callbacks cb = {&sink, on_step, NULL, on_event, NULL};
    dl_trainer_set_callbacks(f.t, &cb);
    CHECK(dl_trainer_run(f.t) == DL_OK);
    CHECK_MSG(fabs(sink.last_loss - hand) < 1e-5, "step loss %.7f, by hand %.7f", sink.last_loss,
              hand);
    lm_close(&f);
}

static void test_lm_vocab_check(void)
{
    /* token ids up to 9 read by an Embedding of 8: refused before a step */
    dl_dataset d;
    make_tokens(&d, 8, 4, 10, 0, 0);
    dl_source *src;
    dl_source_memory(&src, &d, 4, 0, 0, 1);
    dl_model *m = NULL;
    CHECK(dl_model_create(&m, tiny_lm(8, 16, 10), &d.info.sample) == DL_OK);
    dl_optim opt = dl_optim_sgd(0.1f, 0, 0, 0);
    dl_trainer_config cfg = dl_trainer_config_default();
    cfg.batch = 4;
    dl_loss loss = {DL_LOSS_XENT, 0, DL_IGNORE_NONE};
    dl_trainer *t = NULL;
    if (m) {
        dl_model_init_state(m, be, 0, 1);
        CHECK(dl_trainer_create(&t, m, &loss, &opt, NULL, src, NULL, &cfg, be) == DL_ESHAPE);
        CHECK(t == NULL);
        CHECK_MSG(strstr(dl_error_message(), "Embedding") && strstr(dl_error_message(), " 9 "),
                  "%s", dl_error_message());
    }
    dl_model_destroy(m);
    dl_source_destroy(src);
    dl_dataset_done(&d);
}

int main(void)
{
    be = dl_backend_cpu(0);
    RUN(test_accumulation_equivalence);
    RUN(test_determinism);
    RUN(test_loss_scale_overflow);
    RUN(test_loss_scale_growth);
    RUN(test_nonfinite_stop);
    RUN(test_commands);
    RUN(test_fmnist_mlp);
    RUN(test_fmnist_cnn);
    RUN(test_fmnist_bf16);
    RUN(test_lm_learns);
    RUN(test_lm_loss_by_hand);
    RUN(test_lm_vocab_check);
    CHECK_EXIT();
}
