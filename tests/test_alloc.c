/* test_alloc.c - the steady-state training step allocates no memory: malloc and friends counted over many steps
 *
 * The binary defines malloc, calloc, realloc, free, posix_memalign,
 * aligned_alloc and memalign itself (passing them to glibc's __libc_*),
 * so every allocation of the process, worker threads included, goes
 * through a counter. The trainer runs a few warm-up steps, then the
 * counter is switched on for many steps (logging windows and an epoch
 * boundary with validation included) through the trainer's idle callback.
 * Under AddressSanitizer the allocator is ASan's: the test skips. The
 * f32 products run through OpenBLAS here (see main).
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/backend.h"
#include "engine/data/data.h"
#include "engine/base/error.h"
#include "engine/nn/nn.h"
#include "engine/nn/optim.h"
#include "engine/train/trainer.h"
#include "tests/check.h"
#include "tests/fixtures.h"

/* a sanitizer's own malloc is not the one counted here */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DL_COUNT_ALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define DL_COUNT_ALLOC 0
#endif
#endif
#ifndef DL_COUNT_ALLOC
#define DL_COUNT_ALLOC 1
#endif

static atomic_int counting;
static atomic_long n_alloc, n_free;

#if DL_COUNT_ALLOC
void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t n);
void *__libc_memalign(size_t align, size_t n);
void __libc_free(void *p);

static void count_alloc(void)
{
    if (atomic_load_explicit(&counting, memory_order_relaxed))
        atomic_fetch_add(&n_alloc, 1);
}

void *malloc(size_t n)
{
    count_alloc();
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    count_alloc();
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    count_alloc();
    return __libc_realloc(p, n);
}

void free(void *p)
{
    if (p && atomic_load_explicit(&counting, memory_order_relaxed))
        atomic_fetch_add(&n_free, 1);
    __libc_free(p);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    count_alloc();
    void *p = __libc_memalign(align, n);
    if (!p)
        return 12; /* ENOMEM */
    *out = p;
    return 0;
}

void *aligned_alloc(size_t align, size_t n)
{
    count_alloc();
    return __libc_memalign(align, n);
}

void *memalign(size_t align, size_t n)
{
    count_alloc();
    return __libc_memalign(align, n);
}
#endif

static dl_backend *be;

/* 3 classes in c x h x w features: feature k carries 1.5 for label k % 3 */
static void make_blobs(dl_dataset *d, size_t count, int c, int h, int w)
{
    fx_blobs spec = {c > 1 || h > 1 ? (dl_shape){3, {c, h, w}} : (dl_shape){1, {w}},
                     3,
                     1.5f,
                     0,
                     1.0f,
                     5,
                     7,
                     "blobs"};
    fx_blobs_make(d, count, &spec);
}

typedef struct window {
    long from, to; /* count allocations in steps [from, to) */
    long steps_counted;
} window;

static int on_idle(void *user, dl_trainer *t)
{
    window *w = user;
    long step = dl_trainer_step_count(t);
    if (step == w->from)
        atomic_store(&counting, 1);
    if (step >= w->to) {
        atomic_store(&counting, 0);
        w->steps_counted = step - w->from;
        return 1;
    }
    return 0;
}

static int on_step(void *user, dl_trainer *t, const dl_step_info *i) { return 0; }
static int on_epoch(void *user, dl_trainer *t, const dl_epoch_info *i) { return 0; }

/* Trains model on d for warm-up + counted steps; returns the allocations
 * counted (or -1 when the run failed). */
static long count_steps(dl_layer *model, const dl_dataset *d, const dl_dataset *val, int batch,
                        dl_optim opt, dl_precision prec, long *frees, long *counted)
{
    dl_model *m;
    if (dl_model_create(&m, model, &d->info.sample) < 0)
        return -1;
    dl_source *src, *vsrc;
    dl_source_memory(&src, d, batch, 1, 0, 3);
    dl_source_memory(&vsrc, val, batch, 0, 0, 3);
    dl_trainer_config cfg = dl_trainer_config_default();
    cfg.batch = batch;
    cfg.epochs = 1000;
    cfg.seed = 3;
    cfg.precision = prec;
    cfg.log_every = 7;
    dl_model_init_state(m, be, dl_optim_moments(&opt), 3);
    dl_loss loss = {DL_LOSS_XENT, 0, DL_IGNORE_NONE};
    dl_trainer *t;
    long result = -1;
    /* 20 steps an epoch: the window crosses epoch ends and validation */
    window w = {8, 8 + 60, 0};
    if (dl_trainer_create(&t, m, &loss, &opt, NULL, src, vsrc, &cfg, be) == DL_OK) {
        dl_callbacks cb = {&w, on_step, on_epoch, NULL, on_idle};
        dl_trainer_set_callbacks(t, &cb);
        atomic_store(&n_alloc, 0);
        atomic_store(&n_free, 0);
        int rc = dl_trainer_run(t);
        atomic_store(&counting, 0);
        if (rc == DL_OK)
            result = atomic_load(&n_alloc);
        else
            printf("  training failed: %s\n", dl_error_message());
        *frees = atomic_load(&n_free);
        *counted = w.steps_counted;
        dl_trainer_destroy(t);
    }
    dl_source_destroy(src);
    dl_source_destroy(vsrc);
    dl_model_destroy(m);
    return result;
}

static void expect_no_allocations(dl_layer *model, int c, int h, int w, dl_optim opt,
                                  dl_precision prec)
{
    if (!DL_COUNT_ALLOC) {
        SKIP("built with a sanitizer: malloc is the sanitizer's, not counted");
        dl_layer_destroy(model);
        return;
    }
    dl_dataset d, v;
    make_blobs(&d, 20 * 16, c, h, w);
    make_blobs(&v, 40, c, h, w);
    long frees = 0, counted = 0;
    long n = count_steps(model, &d, &v, 16, opt, prec, &frees, &counted);
    CHECK(n >= 0);
    CHECK_MSG(counted == 60, "%ld steps counted, expected 60", counted);
    CHECK_MSG(n == 0 && frees == 0, "%ld allocations and %ld frees in %ld steps", n, frees,
              counted);
    dl_dataset_done(&d);
    dl_dataset_done(&v);
}

static void test_mlp_adam(void)
{
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_linear(8, 32, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_GELU));
    dl_nn_sequential_add(s, dl_nn_dropout(0.1f));
    dl_nn_sequential_add(s, dl_nn_layernorm(32, 1e-5f));
    dl_nn_sequential_add(s, dl_nn_linear(32, 3, 1));
    expect_no_allocations(s, 1, 1, 8, dl_optim_adamw(1e-3f, 0.01f), DL_PREC_F32);
}

static void test_mlp_bf16_sgd(void)
{
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_linear(8, 32, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_linear(32, 3, 1));
    expect_no_allocations(s, 1, 1, 8, dl_optim_sgd(0.05f, 0.9f, 0, 1e-4f), DL_PREC_BF16);
}

static void test_cnn_sgd(void)
{
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_conv2d(1, 4, 3, 1, 1, 1));
    dl_nn_sequential_add(s, dl_nn_batchnorm(4, 1e-5f, 0.1f));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_maxpool2d(2, 2, 0));
    dl_nn_sequential_add(s, dl_nn_flatten());
    dl_nn_sequential_add(s, dl_nn_linear(4 * 4 * 4, 3, 1));
    expect_no_allocations(s, 1, 8, 8, dl_optim_sgd(0.05f, 0.9f, 1, 1e-4f), DL_PREC_F32);
}

int main(void)
{
    /* The engine's own code is what is counted: oneDNN's sgemm (the f32
     * products wherever it is built in) allocates and frees its packing buffers in
     * every call, transiently (resident memory stays flat over epochs), so
     * the count runs the products through OpenBLAS. */
    setenv("DLBENCH_SGEMM", "openblas", 1);
    /* oneDNN's convolutions (which the CNN's one-channel filter gradient
     * takes) make their memory objects in every call, likewise */
    setenv("DLBENCH_CONV", "own", 1);
    be = dl_backend_cpu(0);
    RUN(test_mlp_adam);
    RUN(test_mlp_bf16_sgd);
    RUN(test_cnn_sgd);
    CHECK_EXIT();
}
