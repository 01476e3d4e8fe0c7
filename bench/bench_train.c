/* bench_train.c - training throughput of the benchmark models (Fashion-MNIST, synthetic tokens), the sgemm ceiling, bf16 accuracy
 *
 * One process, one thread count (the CPU backend fixes it at first use):
 *
 *   bench_train [--threads N] [--model NAME|all] [--warmup W] [--steps S]
 *               [--reps R] [--ceiling] [--accuracy EPOCHS]
 *
 * Throughput: each model trains at its batch (128; char-gpt 32) for W
 * warm-up steps, then R windows of S steps (each window, warm-up included,
 * cut short after 1.5 s); the best window gives samples/s (the machine is
 * shared, so the best is the least disturbed). Printed as
 *   dlbench <model> threads=T samples_per_s=X median=X gflops=G gemm_mflop_per_sample=F
 * (char-gpt adds tokens_per_s=X, samples/s x its 64-token context).
 * gflops counts the matrix-product FLOPs exactly: forward, weight
 * gradients and input gradients of every Linear/Conv2d/MultiheadAttention
 * except the first layer's input gradient (2.41 MFLOP per sample for the
 * MLP).
 *
 * The models: the MLPs and the CNN on Fashion-MNIST; resnet, the small
 * ResNet of scripts/resnet_fmnist.lua, on Fashion-MNIST; char-gpt, the
 * model of scripts/char_gpt.lua (vocabulary 96, context 64) on random
 * token windows held in memory (next-token targets, y_width 64).
 *
 * --ceiling: OpenBLAS sgemm on the MLP's own products at batch 128 (the
 * same shapes, transpositions and beta as engine/nn/layers.c), with this
 * process's thread count; the backend's bf16 GEMM and its own f32 products
 * (oneDNN's sgemm where the build has oneDNN) on the same shapes; and one
 * 512^3 product, the better f32 path and bf16 (the yardstick of the other
 * models).
 *   dlbench-ceiling threads=T sgemm_gflops=X bf16_gemm_gflops=Y engine_f32_gflops=Z
 *                   mflop_per_sample=M square_f32_gflops=F square_bf16_gflops=B
 *
 * --accuracy E: the MLP with SGD-momentum and a cosine schedule for E
 * epochs in f32 and in bf16, same seed and order; test accuracy on t10k.
 *   dlbench-accuracy mlp precision=fp32 epochs=E test_acc=A samples_per_s=X
 *
 * Exits 1 with a message on stderr when the data or the engine fails.
 */
#include <cblas.h>
#include <math.h>
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

#define FMNIST "/usr/share/datasets/fashion-mnist"
#define BATCH 128          /* all models but char-gpt; and the ceiling and accuracy runs */
#define TOKEN_WINDOWS 4096 /* char-gpt's synthetic training windows */

/* --- models (bench_models.h, shared with gpu_train.c) -------------------- */

typedef enum {
    OPT_SGD,         /* lr 0.05 (cnn 0.01), momentum 0.9 */
    OPT_ADAM,        /* lr 1e-3 */
    OPT_NESTEROV,    /* resnet_fmnist.lua: lr 0.1, Nesterov momentum 0.9, weight decay 5e-4 */
    OPT_ADAMW,       /* char_gpt.lua: lr 1e-3, betas 0.9/0.99, decay 0.1, clip 1.0 */
    OPT_ADAMW_PLAIN, /* cnn-user: lr 1e-3, PyTorch's betas, decay 0.01 */
} opt_kind;

typedef struct model_spec {
    const char *name;
    dl_layer *(*build)(void);
    opt_kind opt;
    dl_precision precision;
    long warmup, steps; /* defaults, ~1 s per window on one core */
    int batch;
    int tokens; /* trains on the synthetic token windows, not Fashion-MNIST */
} model_spec;

/* bench_torch.py uses the same names, optimizers, batches and step counts. */
static const model_spec models[] = {
    {"mlp-sgd", bench_build_mlp, OPT_SGD, DL_PREC_F32, 30, 200, BATCH, 0},
    {"mlp-adam", bench_build_mlp, OPT_ADAM, DL_PREC_F32, 30, 200, BATCH, 0},
    {"tiny-mlp", bench_build_tiny, OPT_SGD, DL_PREC_F32, 300, 3000, BATCH, 0},
    {"cnn", bench_build_cnn, OPT_SGD, DL_PREC_F32, 5, 40, BATCH, 0},
    {"mlp-bf16", bench_build_mlp, OPT_SGD, DL_PREC_BF16, 30, 300, BATCH, 0},
    {"cnn-user", bench_build_user_cnn, OPT_ADAMW_PLAIN, DL_PREC_F32, 5, 40, 64, 0},
    {"cnn-user-bf16", bench_build_user_cnn, OPT_ADAMW_PLAIN, DL_PREC_BF16, 5, 40, 64, 0},
    {"resnet", bench_build_resnet, OPT_NESTEROV, DL_PREC_F32, 2, 6, BATCH, 0},
    {"resnet-bf16", bench_build_resnet, OPT_NESTEROV, DL_PREC_BF16, 2, 6, BATCH, 0},
    {"char-gpt", bench_build_char_gpt, OPT_ADAMW, DL_PREC_F32, 2, 8, 32, 1},
    {"mobilenet", bench_build_mobilenet, OPT_SGD, DL_PREC_F32, 2, 10, 64, 0},
    {"mobilenet-bf16", bench_build_mobilenet, OPT_SGD, DL_PREC_BF16, 2, 10, 64, 0},
};
#define NMODELS ((int)(sizeof models / sizeof models[0]))

static dl_optim spec_optim(const model_spec *s)
{
    dl_optim o;
    switch (s->opt) {
    case OPT_ADAM: return dl_optim_adam(1e-3f, 0);
    case OPT_NESTEROV: return dl_optim_sgd(0.1f, 0.9f, 1, 5e-4f);
    case OPT_ADAMW_PLAIN: return dl_optim_adamw(1e-3f, 0.01f);
    case OPT_ADAMW:
        o = dl_optim_adamw(1e-3f, 0.1f);
        o.beta2 = 0.99f;
        o.clip_norm = 1.0f;
        return o;
    default: return dl_optim_sgd(strcmp(s->name, "cnn") ? 0.05f : 0.01f, 0.9f, 0, 0);
    }
}

/* --- timing windows through the trainer's idle hook -------------------- */

/* A window (the warm-up too) ends after its steps or WINDOW_CAP_S seconds,
 * whichever comes first, so a slow set-up cannot stretch the run. */
#define WINDOW_CAP_S 1.5

typedef struct windows {
    long warmup, steps;
    int batch;
    int reps, done; /* done: timed windows closed (-1 while warming up) */
    long first;     /* step count when the current window opened */
    double t0;
    double rate[16]; /* samples/s per window */
} windows;

/* Called before every step: closes a window after its last step. */
static int on_idle(void *user, dl_trainer *t)
{
    windows *w = user;
    long s = dl_trainer_step_count(t), n = s - w->first;
    double tn = dl_clock_mono_s();
    if (w->done < 0 && s == 0 && n == 0) {
        w->t0 = tn;
        if (w->warmup > 0)
            return 0;
    } else if (n < (w->done < 0 ? w->warmup : w->steps) && (n < 1 || tn - w->t0 < WINDOW_CAP_S)) {
        return 0;
    }
    if (w->done >= 0 && n > 0)
        w->rate[w->done] = (double)n * w->batch / (tn - w->t0);
    if (++w->done == w->reps)
        return 1;
    w->first = s;
    w->t0 = dl_clock_mono_s();
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct data {
    dl_dataset train, test;
    dl_dataset tokens; /* char-gpt's windows (count 0 until made) */
} data;

static int fail(const char *what)
{
    fprintf(stderr, "bench_train: %s: %s\n", what, dl_error_message());
    return -1;
}

/* Fills d with TOKEN_WINDOWS windows of context ids drawn uniformly from
 * vocab (a fixed LCG): x the ids as floats [context] (what Embedding
 * reads), y the next ids as i32 [context]. */
static int make_tokens(dl_dataset *d, int vocab, int context)
{
    memset(d, 0, sizeof *d);
    size_t n = (size_t)TOKEN_WINDOWS * (size_t)context;
    float *x = malloc(n * sizeof *x);
    int32_t *y = malloc(n * sizeof *y);
    if (!x || !y) {
        free(x), free(y);
        fprintf(stderr, "bench_train: out of memory for the token windows\n");
        return -1;
    }
    uint64_t r = 0x9e3779b97f4a7c15u;
    for (size_t w = 0; w < TOKEN_WINDOWS; w++) {
        int prev = (int)((r >> 33) % (uint64_t)vocab);
        for (int i = 0; i < context; i++) {
            r = r * 6364136223846793005u + 1442695040888963407u;
            int next = (int)((r >> 33) % (uint64_t)vocab);
            x[w * context + i] = (float)prev;
            y[w * context + i] = next;
            prev = next;
        }
    }
    d->info.sample = (dl_shape){1, {context}};
    d->info.x_dtype = DL_F32;
    d->info.y_dtype = DL_I32;
    d->info.y_width = context;
    d->info.classes = vocab;
    d->info.count = TOKEN_WINDOWS;
    d->info.scale = 1;
    d->x = x, d->y = y;
    snprintf(d->name, sizeof d->name, "synthetic tokens");
    return 0;
}

/* Builds spec's model and a trainer over its training data; the caller
 * destroys all three. */
static int make_trainer(const model_spec *spec, data *d, dl_backend *be, int epochs,
                        const dl_schedule *sched, dl_model **m, dl_source **src, dl_trainer **t)
{
    *m = NULL, *src = NULL, *t = NULL;
    const dl_dataset *train = spec->tokens ? &d->tokens : &d->train;
    if (dl_model_create(m, spec->build(), &train->info.sample) < 0)
        return fail(spec->name);
    dl_optim opt = spec_optim(spec);
    if (dl_model_init_state(*m, be, dl_optim_moments(&opt), 1) < 0)
        return fail(spec->name);
    if (dl_source_memory(src, train, spec->batch, 1, 1, 1) < 0)
        return fail("source");
    dl_trainer_config cfg = dl_trainer_config_default();
    cfg.batch = spec->batch;
    cfg.epochs = epochs;
    cfg.seed = 1;
    cfg.precision = spec->precision;
    cfg.log_every = 1 << 30; /* no per-step reports inside the timed windows */
    dl_loss loss = {DL_LOSS_XENT, 0, DL_IGNORE_NONE};
    if (dl_trainer_create(t, *m, &loss, &opt, sched, *src, NULL, &cfg, be) < 0)
        return fail(spec->name);
    return 0;
}

static void free_trainer(dl_model *m, dl_source *src, dl_trainer *t)
{
    dl_trainer_destroy(t);
    dl_source_destroy(src);
    dl_model_destroy(m);
}

static int bench_model(const model_spec *spec, data *d, dl_backend *be, long warmup, long steps,
                       int reps)
{
    dl_model *m;
    dl_source *src;
    dl_trainer *t;
    int rc = make_trainer(spec, d, be, 1 << 20, NULL, &m, &src, &t);
    if (rc == 0) {
        windows w = {warmup, steps, spec->batch, reps, -1, 0, 0, {0}};
        dl_callbacks cb = {&w, NULL, NULL, NULL, on_idle};
        dl_trainer_set_callbacks(t, &cb);
        if (dl_trainer_run(t) < 0 || w.done < reps) {
            rc = fail(spec->name);
        } else {
            double sorted[16];
            memcpy(sorted, w.rate, sizeof sorted);
            qsort(sorted, (size_t)reps, sizeof sorted[0], cmp_double);
            double best = sorted[reps - 1], med = sorted[reps / 2];
            double f = bench_gemm_flops(m);
            printf("dlbench %s threads=%d samples_per_s=%.0f median=%.0f gflops=%.2f "
                   "gemm_mflop_per_sample=%.4f steps=%ld reps=%d",
                   spec->name, be->threads, best, med, best * f * 1e-9, f * 1e-6, steps, reps);
            if (spec->tokens)
                printf(" tokens_per_s=%.0f batch=%d", best * BENCH_GPT_CONTEXT, spec->batch);
            printf("\n");
            fflush(stdout);
        }
    }
    free_trainer(m, src, t);
    return rc;
}

/* --- the sgemm ceiling at the MLP's shapes ------------------------------ */

typedef struct product {
    int ta, tb, m, n, k;
    float beta;
} product;

/* The 8 products of one MLP training step at batch 128, as engine/nn/layers.c
 * issues them: y = x W^T, dW += dy^T x, dx += dy W (not for layer 1). */
static int mlp_products(product *p)
{
    int np = 0;
    for (int i = 0; i < 3; i++) {
        int in = bench_mlp_widths[i], out = bench_mlp_widths[i + 1];
        p[np++] = (product){0, 1, BATCH, out, in, 0.0f};
        p[np++] = (product){1, 0, out, in, BATCH, 1.0f};
        if (i > 0)
            p[np++] = (product){0, 0, BATCH, in, out, 1.0f};
    }
    return np;
}

typedef struct operands {
    void *a[8], *b[8];
    float *c[8];
} operands;

void openblas_set_num_threads(int num_threads);

/* t: the backend's product in that type; blas: OpenBLAS's sgemm instead */
static void run_step(dl_backend *be, const product *p, int np, const operands *o, dl_dtype t,
                     int blas)
{
    for (int i = 0; i < np; i++) {
        const product *q = &p[i];
        int lda = q->ta ? q->m : q->k, ldb = q->tb ? q->k : q->n;
        if (blas)
            cblas_sgemm(CblasRowMajor, q->ta ? CblasTrans : CblasNoTrans,
                        q->tb ? CblasTrans : CblasNoTrans, q->m, q->n, q->k, 1.0f, o->a[i], lda,
                        o->b[i], ldb, q->beta, o->c[i], q->n);
        else
            be->ops->gemm(be, q->ta, q->tb, q->m, q->n, q->k, 1.0f, o->a[i], lda, o->b[i], ldb, t,
                          q->beta, o->c[i], q->n);
    }
}

/* Best of 5 windows of ~0.2 s: seconds per step. */
static double time_step(dl_backend *be, const product *p, int np, const operands *o, dl_dtype t,
                        int blas)
{
    for (int i = 0; i < 10; i++)
        run_step(be, p, np, o, t, blas);
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        int n = 0;
        double t0 = dl_clock_mono_s(), dt;
        do {
            run_step(be, p, np, o, t, blas);
            n++;
            dt = dl_clock_mono_s() - t0;
        } while (dt < 0.2);
        if (dt / n < best)
            best = dt / n;
    }
    return best;
}

/* GFLOP/s of the products p[0..np) run back to back: the backend's in
 * bf16 (*bf16) and f32 (*eng), and OpenBLAS's threaded sgemm (*blas). */
static int time_products(dl_backend *be, const product *p, int np, double *bf16, double *eng,
                         double *blas)
{
    operands f, h;
    memset(&f, 0, sizeof f);
    memset(&h, 0, sizeof h);
    double flop = 0;
    int rc = 0;
    for (int i = 0; i < np; i++) {
        size_t na = (size_t)p[i].m * p[i].k, nb = (size_t)p[i].k * p[i].n;
        flop += 2.0 * p[i].m * p[i].n * p[i].k;
        f.a[i] = malloc(na * 4), f.b[i] = malloc(nb * 4);
        f.c[i] = calloc((size_t)p[i].m * p[i].n, 4);
        h.a[i] = malloc(na * 2), h.b[i] = malloc(nb * 2), h.c[i] = f.c[i];
        if (!f.a[i] || !f.b[i] || !f.c[i] || !h.a[i] || !h.b[i]) {
            fprintf(stderr, "bench_train: out of memory\n");
            rc = -1;
            break;
        }
        float *fa = f.a[i], *fb = f.b[i];
        for (size_t j = 0; j < na; j++)
            fa[j] = (float)((j * 7919) % 1000) * 1e-3f - 0.5f;
        for (size_t j = 0; j < nb; j++)
            fb[j] = (float)((j * 104729) % 1000) * 1e-3f - 0.5f;
        be->ops->cast(be, h.a[i], DL_BF16, fa, DL_F32, na);
        be->ops->cast(be, h.b[i], DL_BF16, fb, DL_F32, nb);
    }
    if (rc == 0) {
        /* bf16 first: OpenBLAS's workers spin for a while after each call
         * and would take the second core from the backend's pool */
        *bf16 = flop / time_step(be, p, np, &h, DL_BF16, 0) * 1e-9;
        /* the backend's own f32 products (oneDNN's sgemm where built with it, else
         * OpenBLAS, split over its pool) */
        *eng = flop / time_step(be, p, np, &f, DL_F32, 0) * 1e-9;
        /* OpenBLAS's own threaded sgemm; the backend keeps OpenBLAS
         * single-threaded and splits products over its pool */
        openblas_set_num_threads(be->threads);
        *blas = flop / time_step(be, p, np, &f, DL_F32, 1) * 1e-9;
        openblas_set_num_threads(1);
    }
    for (int i = 0; i < np; i++) {
        free(f.a[i]), free(f.b[i]), free(f.c[i]);
        free(h.a[i]), free(h.b[i]);
    }
    return rc;
}

/* The ceilings: at the MLP's own 8 products, and at one 512^3 product
 * (the yardstick of the models whose products are convolutions and
 * attention: bench_conv's too), each the best f32 path and bf16. */
static int bench_ceiling(dl_backend *be)
{
    product p[8], sq = {0, 0, 512, 512, 512, 0.0f};
    int np = mlp_products(p);
    double tb, te, ts, qb, qe, qs;
    if (time_products(be, p, np, &tb, &te, &ts) < 0 || time_products(be, &sq, 1, &qb, &qe, &qs) < 0)
        return -1;
    double flop = 0;
    for (int i = 0; i < np; i++)
        flop += 2.0 * p[i].m * p[i].n * p[i].k;
    printf("dlbench-ceiling threads=%d sgemm_gflops=%.2f bf16_gemm_gflops=%.2f "
           "engine_f32_gflops=%.2f mflop_per_sample=%.4f square_f32_gflops=%.2f "
           "square_bf16_gflops=%.2f\n",
           be->threads, ts, tb, te, flop / BATCH * 1e-6, qe > qs ? qe : qs, qb);
    return 0;
}

/* --- bf16 against f32 accuracy ------------------------------------------- */

static int bench_accuracy(data *d, dl_backend *be, int epochs)
{
    dl_source *test;
    if (dl_source_memory(&test, &d->test, BATCH, 0, 0, 1) < 0)
        return fail("test source");
    int rc = 0;
    for (int i = 0; i < 2 && rc == 0; i++) {
        model_spec spec = models[0];
        spec.precision = i ? DL_PREC_BF16 : DL_PREC_F32;
        dl_model *m;
        dl_source *src;
        dl_trainer *t;
        /* cosine to zero, so the final accuracy does not hinge on where the
         * last constant-LR step landed (with a constant LR one run put
         * bf16 a full point above fp32: noise, not precision) */
        dl_schedule cos = dl_schedule_constant();
        cos.kind = DL_SCHED_COSINE;
        rc = make_trainer(&spec, d, be, epochs, &cos, &m, &src, &t);
        double t0 = dl_clock_mono_s(), loss, acc;
        if (rc == 0 && dl_trainer_run(t) == DL_OK) {
            double dt = dl_clock_mono_s() - t0;
            long samples = dl_trainer_step_count(t) * BATCH;
            if (dl_trainer_evaluate(t, test, &loss, &acc) == DL_OK)
                printf("dlbench-accuracy mlp precision=%s epochs=%d threads=%d test_acc=%.4f "
                       "test_loss=%.4f samples_per_s=%.0f\n",
                       dl_precision_name(spec.precision), epochs, be->threads, acc, loss,
                       (double)samples / dt);
            else
                rc = fail("evaluate");
            fflush(stdout);
        } else if (rc == 0) {
            rc = fail("accuracy run");
        }
        free_trainer(m, src, t);
    }
    dl_source_destroy(test);
    return rc;
}

/* Loads what the run needs: Fashion-MNIST for its models (pick: a model
 * index, -1 all, -2 none) and the accuracy run, the token windows for
 * char-gpt. */
static int load_data(data *d, int pick, int accuracy)
{
    memset(d, 0, sizeof *d);
    int fmnist = accuracy > 0, tokens = 0;
    for (int i = 0; i < NMODELS; i++)
        if (pick == -1 || pick == i) {
            tokens |= models[i].tokens;
            fmnist |= !models[i].tokens;
        }
    if (fmnist && (dl_dataset_load_fashion_mnist(&d->train, FMNIST, "train") < 0 ||
                   dl_dataset_load_fashion_mnist(&d->test, FMNIST, "t10k") < 0))
        return fail("Fashion-MNIST (apt-get install dataset-fashion-mnist)");
    if (tokens && make_tokens(&d->tokens, BENCH_GPT_VOCAB, BENCH_GPT_CONTEXT) < 0)
        return -1;
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_train [--threads N] [--model NAME|all] [--warmup W] "
                    "[--steps S] [--reps R] [--ceiling] [--accuracy EPOCHS]\nmodels:");
    for (int i = 0; i < NMODELS; i++)
        fprintf(stderr, " %s", models[i].name);
    fprintf(stderr, "\n");
}

int main(int argc, char **argv)
{
    bench_cpu_line();
    int threads = 0, reps = 3, ceiling = 0, accuracy = 0;
    long warmup = -1, steps = -1;
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--ceiling")) {
            ceiling = 1;
            continue;
        }
        if (!v) {
            usage();
            return 2;
        }
        if (!strcmp(a, "--threads"))
            threads = atoi(v);
        else if (!strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--warmup"))
            warmup = atol(v);
        else if (!strcmp(a, "--steps"))
            steps = atol(v);
        else if (!strcmp(a, "--reps"))
            reps = atoi(v);
        else if (!strcmp(a, "--accuracy"))
            accuracy = atoi(v);
        else {
            usage();
            return 2;
        }
        i++;
    }
    if (reps < 1 || reps > 16) {
        fprintf(stderr, "bench_train: --reps must be 1..16\n");
        return 2;
    }
    int pick = -1; /* -1: all */
    if (model && strcmp(model, "all")) {
        for (int i = 0; i < NMODELS; i++)
            if (!strcmp(model, models[i].name))
                pick = i;
        if (pick < 0) {
            usage();
            return 2;
        }
    }
    dl_backend *be = dl_backend_cpu(threads);
    printf("# %s\n", be->description);
    data d;
    int run_models = model || (!ceiling && !accuracy);
    if (load_data(&d, run_models ? pick : -2, accuracy) < 0)
        return 1;
    int rc = 0;
    if (run_models)
        for (int i = 0; i < NMODELS && rc == 0; i++)
            if (pick < 0 || pick == i)
                rc = bench_model(&models[i], &d, be, warmup >= 0 ? warmup : models[i].warmup,
                                 steps > 0 ? steps : models[i].steps, reps);
    if (rc == 0 && ceiling)
        rc = bench_ceiling(be);
    if (rc == 0 && accuracy > 0)
        rc = bench_accuracy(&d, be, accuracy);
    dl_dataset_done(&d.train);
    dl_dataset_done(&d.test);
    dl_dataset_done(&d.tokens);
    return rc ? 1 : 0;
}
