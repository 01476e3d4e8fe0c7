/* test_cpu_set_ops.c - the CPU ops that write an input gradient (act_backward_set, batchnorm_backward_set, conv_backward_data_set) against the adding ops into a zeroed dx
 *
 * Each written gradient must equal, value for value, what the adding op
 * (checked against finite differences and references elsewhere) gives
 * into zeros, whatever dx held before (it starts as NaN here), on every
 * kernel path: one and two threads, ranges over several pool tasks,
 * oneDNN's convolutions and the own ones, f32 and bf16. The fused
 * add + ReLU against add and the ReLU's two ops, likewise.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "engine/core/backend.h"
#include "engine/cpu/cpu.h"
#include "engine/base/error.h"
#include "engine/base/rng.h"

static float *randv(size_t n, uint64_t seed, float scale)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = scale * (2.0f * dl_rng_uniform(seed, 11, 0, i) - 1.0f);
    return v;
}

static float *nanv(size_t n)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = NAN;
    return v;
}

/* How many of n values differ (== on floats: +0 equals -0, NaN nothing). */
static size_t differing(const float *a, const float *b, size_t n, size_t *first)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!(a[i] == b[i])) {
            if (!bad)
                *first = i;
            bad++;
        }
    return bad;
}

#define CHECK_SAME(a, b, n, ...)                                                                   \
    do {                                                                                           \
        size_t first_ = 0, n_ = (n), bad_ = differing(a, b, n_, &first_);                          \
        if (bad_)                                                                                  \
            printf("  %zu of %zu differ, first at %zu (%g against %g)\n", bad_, n_, first_,        \
                   (double)(a)[first_], (double)(b)[first_]);                                      \
        CHECK_MSG(bad_ == 0, __VA_ARGS__);                                                         \
    } while (0)

static void test_act_set(void)
{
    static const dl_act kinds[] = {DL_ACT_RELU, DL_ACT_GELU, DL_ACT_TANH, DL_ACT_SIGMOID,
                                   DL_ACT_SILU};
    /* a tail under 8 and 16 lanes; more than one pool range (65536) */
    static const size_t sizes[] = {1, 13, 1000, 150001};
    for (int threads = 1; threads <= 2; threads++) {
        dl_backend *be = dl_backend_cpu(threads);
        CHECK(be && be->ops->act_backward_set);
        if (!be || !be->ops->act_backward_set)
            return;
        for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
            for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
                size_t n = sizes[s];
                float *x = randv(n, 1, 3.0f), *dy = randv(n, 2, 1.0f), *y = malloc(n * 4);
                x[n / 2] = 0.0f; /* ReLU's kink: no gradient at 0 */
                CHECK_OK(be->ops->act_forward(be, kinds[k], y, x, n));
                float *add = calloc(n, 4), *set = nanv(n);
                CHECK_OK(be->ops->act_backward(be, kinds[k], add, x, y, dy, n));
                CHECK_OK(be->ops->act_backward_set(be, kinds[k], set, x, y, dy, n));
                CHECK_SAME(set, add, n, "kind %d, n %zu, %d threads", (int)kinds[k], n, threads);
                free(x);
                free(dy);
                free(y);
                free(add);
                free(set);
            }
    }
}

/* add_relu_forward / add_relu_backward_set against add, then the ReLU's
 * forward and written backward on the sum: the same bits, -0 and the
 * NaN/inf sums included; both gradient outputs, and the one-output form. */
static void test_add_relu(void)
{
    static const size_t sizes[] = {1, 13, 1000, 150001};
    for (int threads = 1; threads <= 2; threads++) {
        dl_backend *be = dl_backend_cpu(threads);
        CHECK(be && be->ops->add_relu_forward && be->ops->add_relu_backward_set);
        if (!be || !be->ops->add_relu_forward || !be->ops->add_relu_backward_set)
            return;
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            size_t n = sizes[s];
            float *a = randv(n, 7, 2.0f), *b = randv(n, 8, 2.0f), *dy = randv(n, 9, 1.0f);
            if (n > 4) {
                a[1] = -b[1];    /* a sum of exactly 0: no gradient */
                a[2] = NAN;      /* NaN: 0, no gradient */
                a[3] = INFINITY; /* +inf passes */
                b[4] = -INFINITY;
                dy[n - 1] = -0.0f; /* a -0 gradient passes as -0 where the sum is > 0 */
                a[n - 1] = fabsf(a[n - 1]) + 1.0f;
                b[n - 1] = fabsf(b[n - 1]);
            }
            float *sum = malloc(n * 4), *ref = malloc(n * 4), *y = nanv(n);
            float *gref = nanv(n), *da = nanv(n), *db = nanv(n), *one = nanv(n);
            CHECK_OK(be->ops->add(be, sum, a, b, n));
            CHECK_OK(be->ops->act_forward(be, DL_ACT_RELU, ref, sum, n));
            CHECK_OK(be->ops->add_relu_forward(be, y, a, b, n));
            CHECK_SAME(y, ref, n, "forward, n %zu, %d threads", n, threads);
            CHECK_OK(be->ops->act_backward_set(be, DL_ACT_RELU, gref, sum, ref, dy, n));
            CHECK_OK(be->ops->add_relu_backward_set(be, da, db, y, dy, n));
            CHECK_OK(be->ops->add_relu_backward_set(be, one, NULL, y, dy, n));
            CHECK_SAME(da, gref, n, "backward da, n %zu, %d threads", n, threads);
            CHECK_SAME(db, gref, n, "backward db, n %zu, %d threads", n, threads);
            CHECK_SAME(one, gref, n, "backward, one output, n %zu, %d threads", n, threads);
            size_t signs = 0;
            for (size_t i = 0; i < n; i++)
                signs += signbit(da[i]) != signbit(gref[i]) || signbit(y[i]) != signbit(ref[i]);
            CHECK_MSG(signs == 0, "%zu signs of zero differ, n %zu", signs, n);
            if (n > 4)
                CHECK(y[2] == 0 && da[2] == 0 && da[1] == 0 && isinf(y[3]) && y[4] == 0 &&
                      signbit(da[n - 1]));
            float *all[] = {a, b, dy, sum, ref, y, gref, da, db, one};
            for (size_t i = 0; i < sizeof all / sizeof *all; i++)
                free(all[i]);
        }
    }
}

static void test_batchnorm_set(void)
{
    static const int shapes[][3] = {{5, 3, 7}, {16, 8, 49}, {32, 16, 196}, {4, 6, 1}};
    for (int threads = 1; threads <= 2; threads++) {
        dl_backend *be = dl_backend_cpu(threads);
        CHECK(be && be->ops->batchnorm_backward_set);
        if (!be || !be->ops->batchnorm_backward_set)
            return;
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            int n = shapes[s][0], c = shapes[s][1], inner = shapes[s][2];
            size_t nx = (size_t)n * c * inner;
            float *x = randv(nx, 3, 2.0f), *dy = randv(nx, 4, 1.0f), *y = malloc(nx * 4);
            float *gamma = randv((size_t)c, 5, 1.5f), *beta = randv((size_t)c, 6, 0.5f);
            float *sm = malloc((size_t)c * 4), *si = malloc((size_t)c * 4);
            CHECK_OK(be->ops->batchnorm_forward(be, 1, n, c, inner, 0.1f, 1e-5f, y, x, gamma, beta,
                                                NULL, NULL, sm, si));
            /* dgamma, dbeta accumulate in both; start them the same */
            float *dg[2] = {randv((size_t)c, 7, 1.0f), randv((size_t)c, 7, 1.0f)};
            float *db[2] = {randv((size_t)c, 8, 1.0f), randv((size_t)c, 8, 1.0f)};
            float *add = calloc(nx, 4), *set = nanv(nx);
            CHECK_OK(be->ops->batchnorm_backward(be, n, c, inner, add, dg[0], db[0], dy, x, gamma,
                                                 sm, si));
            CHECK_OK(be->ops->batchnorm_backward_set(be, n, c, inner, set, dg[1], db[1], dy, x,
                                                     gamma, sm, si));
            CHECK_SAME(set, add, nx, "dx of [%d, %d, %d], %d threads", n, c, inner, threads);
            CHECK_SAME(dg[1], dg[0], (size_t)c, "dgamma of [%d, %d, %d]", n, c, inner);
            CHECK_SAME(db[1], db[0], (size_t)c, "dbeta of [%d, %d, %d]", n, c, inner);
            float *all[] = {x, dy, y, gamma, beta, sm, si, dg[0], dg[1], db[0], db[1], add, set};
            for (size_t i = 0; i < sizeof all / sizeof *all; i++)
                free(all[i]);
        }
    }
}

static dl_conv_desc desc(int n, int c, int h, int w, int k, int r, int stride, int pad, int groups)
{
    dl_conv_desc d = {n, c, h, w, k, r, r, stride, pad, 0, 0, groups, 1, 0, 0, 0};
    d.p = (h + 2 * pad - (r - 1) - 1) / stride + 1;
    d.q = (w + 2 * pad - (r - 1) - 1) / stride + 1;
    return d;
}

static void conv_set_case(dl_backend *be, const dl_conv_desc *d, dl_dtype compute,
                          const char *kernels)
{
    size_t nx = (size_t)d->n * d->c * d->h * d->w, ny = (size_t)d->n * d->k * d->p * d->q;
    size_t nw = (size_t)d->k * (d->c / (d->groups > 1 ? d->groups : 1)) * d->r * d->s;
    size_t wsb = be->ops->conv_workspace(be, d, compute);
    void *ws = malloc(wsb + 1);
    float *dy = randv(ny, 9, 1.0f), *w = randv(nw, 10, 0.5f);
    float *add = calloc(nx, 4), *set = nanv(nx);
    CHECK_OK(be->ops->conv_backward_data(be, d, add, dy, w, ws, wsb, compute));
    CHECK_OK(be->ops->conv_backward_data_set(be, d, set, dy, w, ws, wsb, compute));
    CHECK_SAME(set, add, nx, "dx of [%d, %d, %d, %d] -> %d, %dx%d stride %d, groups %d, %s, %s",
               d->n, d->c, d->h, d->w, d->k, d->r, d->s, d->stride, d->groups,
               compute == DL_BF16 ? "bf16" : "f32", kernels);
    free(ws);
    free(dy);
    free(w);
    free(add);
    free(set);
}

static void test_conv_set(void)
{
    /* 8 channels and more: oneDNN's kernels where the build has them (a
     * batch ending in a shorter chunk, strides, 1x1); fewer, grouped and
     * depthwise: the own ones */
    const dl_conv_desc cases[] = {
        desc(13, 8, 9, 11, 12, 3, 2, 1, 1),   desc(9, 16, 10, 10, 16, 1, 2, 0, 1),
        desc(10, 16, 14, 14, 32, 3, 1, 1, 1), desc(3, 3, 12, 12, 5, 3, 1, 1, 1),
        desc(4, 8, 9, 9, 8, 3, 1, 1, 2),      desc(4, 6, 7, 7, 6, 3, 1, 1, 6),
    };
    for (int threads = 1; threads <= 2; threads++) {
        dl_backend *be = dl_backend_cpu(threads);
        CHECK(be && be->ops->conv_backward_data_set);
        if (!be || !be->ops->conv_backward_data_set)
            return;
        for (int own = 0; own <= 1; own++) {
            if (own)
                setenv("DLBENCH_CONV", "own", 1);
            for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
                conv_set_case(be, &cases[i], DL_F32, own ? "own kernels" : "default kernels");
                conv_set_case(be, &cases[i], DL_BF16, own ? "own kernels" : "default kernels");
            }
            unsetenv("DLBENCH_CONV");
        }
    }
}

int main(void)
{
    RUN(test_act_set);
    RUN(test_add_relu);
    RUN(test_batchnorm_set);
    RUN(test_conv_set);
    CHECK_EXIT();
}
