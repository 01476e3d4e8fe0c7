/* bench_membound.c - memory-bound layers of the CPU backend against memcpy of the same bytes, side by side
 *
 * Each op runs on a tensor of a small CNN's size (batch 64, 16 channels,
 * 28x28: 3.2 MB of floats, and 32 channels at 14x14) through the backend's
 * op table, as the layers call it. Its bandwidth counts the bytes it must
 * move at least (each input read once, each output written once; an
 * accumulated gradient read and written), and is printed as a share of
 * memcpy's bandwidth measured in the same run on the same buffers:
 * the target is >= 50%. The memcpy runs split over the same
 * number of threads as the backend's pool.
 *
 * At the default batch the tensors stay in cache, as in a small CNN's
 * step between its convolutions. A larger batch (a third argument) puts
 * them past the L3, as a ResNet step's activations are: then the ops and
 * memcpy both stream from memory, and the shares say how near the ops
 * come to memory's speed rather than the cache's.
 *
 * usage: bench_membound [threads [only [batch]]]   (default 1 thread, all
 *        ops, batch 64; only: run the ops whose name contains it, with
 *        memcpy; "-" for all)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_cpu.h"
#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/core/backend.h"
#include "engine/cpu/cpu.h"

typedef struct ctx {
    dl_backend *be;
    int n, c, hw; /* x [n, c, hw] */
    size_t len;   /* n * c * hw */
    float *x, *y, *dy, *dx, *m, *v, *g, *stats;
    float *gamma, *beta, *rm, *rv, *sm, *si;
    int32_t *labels; /* [len / 65]: i % 65, a label for every class count benched */
} ctx;

typedef struct op {
    const char *name;
    double bytes_per_elem; /* the least it must move, per element of x */
    void (*run)(ctx *c);
} op;

static void memcpy_task(void *arg, size_t b, size_t e)
{
    ctx *c = arg;
    memcpy(c->y + b, c->x + b, (e - b) * sizeof(float));
}
static void r_memcpy(ctx *c) { dl_pool_for(dl_cpu(c->be)->pool, c->len, 65536, memcpy_task, c); }
static void r_relu_f(ctx *c) { c->be->ops->act_forward(c->be, DL_ACT_RELU, c->y, c->x, c->len); }
static void r_relu_b(ctx *c)
{
    c->be->ops->act_backward(c->be, DL_ACT_RELU, c->dx, c->x, c->y, c->dy, c->len);
}
static void r_gelu_f(ctx *c) { c->be->ops->act_forward(c->be, DL_ACT_GELU, c->y, c->x, c->len); }
static void r_gelu_b(ctx *c)
{
    c->be->ops->act_backward(c->be, DL_ACT_GELU, c->dx, c->x, c->y, c->dy, c->len);
}
static void r_add(ctx *c) { c->be->ops->add(c->be, c->y, c->x, c->dy, c->len); }
/* The residual add -> ReLU as the layers run it: the fused op where the
 * backend has it, and the two ops (the sum in dx); backward writing the
 * gradient of both addends (the identity shortcut's dx and the block's
 * dy), against the ReLU's written backward and the Residual's copy. */
static void r_addrelu_f(ctx *c) { c->be->ops->add_relu_forward(c->be, c->y, c->x, c->m, c->len); }
static void r_addrelu_f2(ctx *c)
{
    c->be->ops->add(c->be, c->dx, c->x, c->m, c->len);
    c->be->ops->act_forward(c->be, DL_ACT_RELU, c->y, c->dx, c->len);
}
static void r_addrelu_b(ctx *c)
{
    c->be->ops->add_relu_backward_set(c->be, c->dx, c->g, c->y, c->dy, c->len);
}
static void r_addrelu_b2(ctx *c)
{
    c->be->ops->act_backward_set(c->be, DL_ACT_RELU, c->dx, c->y, NULL, c->dy, c->len);
    c->be->ops->copy(c->be, c->g, c->dx, c->len * sizeof(float));
}
static void r_drop_f(ctx *c)
{
    c->be->ops->dropout_forward(c->be, c->y, c->x, c->len, 0.25f, 1, 2, 3);
}
static void r_drop_b(ctx *c)
{
    c->be->ops->dropout_backward(c->be, c->dx, c->dy, c->len, 0.25f, 1, 2, 3);
}
static void r_bn_f(ctx *c)
{
    c->be->ops->batchnorm_forward(c->be, 1, c->n, c->c, c->hw, 0.1f, 1e-5f, c->y, c->x, c->gamma,
                                  c->beta, c->rm, c->rv, c->sm, c->si);
}
static void r_bn_b(ctx *c)
{
    c->be->ops->batchnorm_backward(c->be, c->n, c->c, c->hw, c->dx, c->gamma + c->c, c->beta + c->c,
                                   c->dy, c->x, c->gamma, c->sm, c->si);
}
/* BatchNorm -> ReLU as the layers run it: the fused op where the backend
 * has it, and the two ops (the BatchNorm output in y, the ReLU's in dx;
 * backward through dx as scratch) for comparison. */
static void r_bnrelu_f(ctx *c)
{
    c->be->ops->batchnorm_relu_forward(c->be, 1, c->n, c->c, c->hw, 0.1f, 1e-5f, c->y, c->x,
                                       c->gamma, c->beta, c->rm, c->rv, c->sm, c->si);
}
static void r_bnrelu_f2(ctx *c)
{
    r_bn_f(c);
    c->be->ops->act_forward(c->be, DL_ACT_RELU, c->dx, c->y, c->len);
}
static void r_bnrelu_b(ctx *c)
{
    c->be->ops->batchnorm_relu_backward_set(c->be, c->n, c->c, c->hw, c->dx, c->gamma + c->c,
                                            c->beta + c->c, c->dy, c->x, c->gamma, c->beta, c->sm,
                                            c->si);
}
static void r_bnrelu_b2(ctx *c)
{
    c->be->ops->act_backward_set(c->be, DL_ACT_RELU, c->y, c->x, NULL, c->dy, c->len);
    c->be->ops->batchnorm_backward_set(c->be, c->n, c->c, c->hw, c->dx, c->gamma + c->c,
                                       c->beta + c->c, c->y, c->x, c->gamma, c->sm, c->si);
}
/* Square windows of `size`, stride and pad over the square planes of x. */
static dl_pool_desc pool_win(const ctx *c, int size, int stride, int pad)
{
    int side = 1;
    while ((side + 1) * (side + 1) <= c->hw)
        side++;
    int out = (side + 2 * pad - size) / stride + 1;
    dl_pool_desc d = {c->n, c->c, side, side, size, stride, pad, out, out, 0};
    return d;
}
/* One pooling of x's planes, forward into y or backward into dx. */
static void pool_run(ctx *c, dl_pool_kind kind, int size, int stride, int pad, int backward)
{
    dl_pool_desc d = pool_win(c, size, stride, pad);
    if (backward)
        c->be->ops->pool_backward(c->be, kind, &d, c->dx, c->dy, c->x, c->y);
    else
        c->be->ops->pool_forward(c->be, kind, &d, c->y, c->x);
}
static void r_max_f(ctx *c) { pool_run(c, DL_POOL_MAX, 2, 2, 0, 0); }
static void r_max_b(ctx *c) { pool_run(c, DL_POOL_MAX, 2, 2, 0, 1); }
/* the ResNet stem's: 3x3 windows, stride 2, padding 1 */
static void r_max3_f(ctx *c) { pool_run(c, DL_POOL_MAX, 3, 2, 1, 0); }
static void r_max3_b(ctx *c) { pool_run(c, DL_POOL_MAX, 3, 2, 1, 1); }
/* average 3x3, stride 1, padding 1 (an Inception branch's) */
static void r_avg3_f(ctx *c) { pool_run(c, DL_POOL_AVG, 3, 1, 1, 0); }
static void r_avg3_b(ctx *c) { pool_run(c, DL_POOL_AVG, 3, 1, 1, 1); }
static void r_ln_f(ctx *c)
{
    c->be->ops->layernorm_forward(c->be, (int)(c->len / 256), 256, 1e-5f, c->y, c->x, c->gamma,
                                  c->beta, c->m, c->v);
}
static void r_ln_b(ctx *c)
{
    c->be->ops->layernorm_backward(c->be, (int)(c->len / 256), 256, c->dx, c->gamma + 256,
                                   c->beta + 256, c->dy, c->x, c->gamma, c->m, c->v);
}
static void xent(ctx *c, int classes)
{
    c->be->ops->softmax_xent(c->be, (int)(c->len / classes), classes, c->x, c->labels, 0.0f, 1e-3f,
                             c->dx, c->stats);
}
static void r_xent(ctx *c) { xent(c, 100); }
static void r_xent1000(ctx *c) { xent(c, 1000); }
/* the char-GPT's loss: per-token, a vocabulary of 65 characters */
static void r_xent_tok(ctx *c)
{
    c->be->ops->softmax_xent_tokens(c->be, (int)(c->len / 65), 65, c->x, c->labels, -100, 0.0f,
                                    1.0f, c->dx, c->stats);
}
static void r_adam(ctx *c)
{
    c->be->ops->adam_update(c->be, c->len, c->y, c->g, c->m, c->v, 1e-3f, 0.9f, 0.999f, 1e-8f,
                            0.01f, 1, 10, 1.0f);
}
static void r_sgd(ctx *c)
{
    c->be->ops->sgd_update(c->be, c->len, c->y, c->g, c->m, 0.01f, 0.9f, 0.0f, 0, 1.0f);
}

static const op ops[] = {
    {"memcpy", 8, r_memcpy},
    {"relu fwd", 8, r_relu_f},
    {"relu bwd (dx +=)", 16, r_relu_b},
    {"gelu fwd", 8, r_gelu_f},
    {"gelu bwd (dx +=)", 16, r_gelu_b},
    {"residual add", 12, r_add},
    {"add+relu fwd, fused", 12, r_addrelu_f},
    {"add+relu fwd, 2 ops", 12, r_addrelu_f2},
    {"add+relu bwd, fused", 16, r_addrelu_b},
    {"add+relu bwd, 2 ops", 16, r_addrelu_b2},
    {"dropout fwd", 8, r_drop_f},
    {"dropout bwd (dx +=)", 12, r_drop_b},
    {"batchnorm fwd (train)", 8, r_bn_f},
    {"batchnorm bwd (dx +=)", 16, r_bn_b},
    {"batchnorm+relu fwd, fused", 8, r_bnrelu_f},
    {"batchnorm+relu fwd, 2 ops", 8, r_bnrelu_f2},
    {"batchnorm+relu bwd, fused", 12, r_bnrelu_b},
    {"batchnorm+relu bwd, 2 ops", 12, r_bnrelu_b2},
    {"maxpool 2x2 fwd", 5, r_max_f},
    {"maxpool 2x2 bwd (dx +=)", 10, r_max_b},
    {"maxpool 3x3 s2 p1 fwd", 5, r_max3_f},
    {"maxpool 3x3 s2 p1 bwd (dx +=)", 10, r_max3_b},
    {"avgpool 3x3 s1 p1 fwd", 8, r_avg3_f},
    {"avgpool 3x3 s1 p1 bwd (dx +=)", 12, r_avg3_b},
    {"layernorm fwd", 8, r_ln_f},
    {"layernorm bwd (dx +=)", 16, r_ln_b},
    {"softmax xent (dx +=)", 12, r_xent},
    {"softmax xent 1000 classes", 12, r_xent1000},
    {"xent tokens 65 classes", 12, r_xent_tok},
    {"sgd momentum", 24, r_sgd},
    {"adamw", 32, r_adam},
};

/* Best seconds per call over 5 windows of ~40 ms after a warm-up. */
static double time_op(const op *o, ctx *c)
{
    for (int i = 0; i < 3; i++)
        o->run(c);
    double best = 1e30;
    for (int w = 0; w < 5; w++) {
        int reps = 0;
        double t0 = dl_clock_mono_s(), t;
        do {
            o->run(c);
            reps++;
            t = dl_clock_mono_s() - t0;
        } while (t < 0.04);
        if (t / reps < best)
            best = t / reps;
    }
    return best;
}

static float *buf(size_t n, float lo, float hi, unsigned *seed)
{
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    DL_ASSERT(p);
    for (size_t i = 0; i < n; i++)
        p[i] = lo + (hi - lo) * (float)rand_r(seed) / (float)RAND_MAX;
    return p;
}

/* Runs memcpy and the ops whose name contains only (all when NULL). */
static void run_shape(dl_backend *be, int n, int ch, int hw, const char *only)
{
    unsigned seed = 7;
    ctx c = {.be = be, .n = n, .c = ch, .hw = hw, .len = (size_t)n * ch * hw};
    float **all[] = {&c.x, &c.y, &c.dy, &c.dx, &c.m, &c.g};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        *all[i] = buf(c.len, -1, 1, &seed);
    c.v = buf(c.len, 0.01f, 1, &seed);
    c.gamma = buf(1024, 0.5f, 1.5f, &seed);
    c.beta = buf(1024, -0.1f, 0.1f, &seed);
    c.rm = buf(1024, 0, 0, &seed);
    c.rv = buf(1024, 1, 1, &seed);
    c.sm = buf(1024, 0, 0, &seed);
    c.si = buf(1024, 1, 1, &seed);
    c.stats = buf(4, 0, 0, &seed);
    c.labels = malloc(c.len / 65 * sizeof *c.labels);
    DL_ASSERT(c.labels);
    for (size_t i = 0; i < c.len / 65; i++)
        c.labels[i] = (int32_t)(i % 65);
    printf("\nx [%d, %d, %d]: %.1f MB of floats\n", n, ch, hw, (double)c.len * 4 / 1e6);
    printf("  %-26s %9s %9s %9s\n", "op", "ms", "GB/s", "/memcpy");
    double copy_bw = 0;
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        if (i > 0 && only && !strstr(ops[i].name, only))
            continue;
        double s = time_op(&ops[i], &c);
        double bw = ops[i].bytes_per_elem * (double)c.len / s / 1e9;
        if (i == 0)
            copy_bw = bw;
        printf("  %-26s %9.3f %9.1f %8.0f%%\n", ops[i].name, s * 1e3, bw, 100 * bw / copy_bw);
        printf("RESULT membound %s %d %.4f %.3f\n", ops[i].name, dl_pool_threads(dl_cpu(be)->pool),
               s * 1e3, bw / copy_bw);
    }
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(*all[i]);
    void *rest[] = {c.v, c.gamma, c.beta, c.rm, c.rv, c.sm, c.si, c.stats, c.labels};
    for (size_t i = 0; i < sizeof rest / sizeof *rest; i++)
        free(rest[i]);
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    dl_backend *be = dl_backend_cpu(threads);
    if (!be) {
        fprintf(stderr, "bench_membound: %s\n", dl_error_message());
        return 1;
    }
    bench_cpu_line();
    printf("backend: %s\n", be->description);
    const char *only = argc > 2 && strcmp(argv[2], "-") ? argv[2] : NULL;
    int batch = argc > 3 ? atoi(argv[3]) : 64;
    if (batch < 1) {
        fprintf(stderr, "bench_membound: batch '%s': expected a positive number\n", argv[3]);
        return 2;
    }
    run_shape(be, batch, 16, 28 * 28, only);
    run_shape(be, batch, 32, 14 * 14, only);
    return 0;
}
