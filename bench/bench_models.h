/* bench_models.h - the benchmark models shared by bench_train.c (CPU) and gpu_train.c (CUDA)
 *
 * bench_torch.py and gpu_torch.py build the same networks in PyTorch: keep
 * the four in step. Header-only (static inline), so each bench binary is
 * still one bench/<name>.c as the Makefile expects.
 */
#ifndef DL_BENCH_MODELS_H
#define DL_BENCH_MODELS_H

#include <string.h>

#include "engine/nn/nn.h"

/* Flatten, then Linear(widths[i] -> widths[i + 1]) with a ReLU between
 * two Linears. */
static inline dl_layer *bench_mlp(const int *widths, int nw)
{
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_flatten());
    for (int i = 0; i + 1 < nw; i++) {
        dl_nn_sequential_add(s, dl_nn_linear(widths[i], widths[i + 1], 1));
        if (i + 2 < nw)
            dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    }
    return s;
}

static const int bench_mlp_widths[] = {784, 512, 256, 10};
static const int bench_tiny_widths[] = {784, 32, 10};
/* the large MLP of the GPU benchmark: three 8192 x 8192 products per pass */
static const int bench_large_widths[] = {784, 8192, 8192, 8192, 8192, 10};

static inline dl_layer *bench_build_mlp(void) { return bench_mlp(bench_mlp_widths, 4); }
static inline dl_layer *bench_build_tiny(void) { return bench_mlp(bench_tiny_widths, 3); }
static inline dl_layer *bench_build_large(void) { return bench_mlp(bench_large_widths, 6); }

/* conv3x3(1->32)-ReLU-maxpool2-conv3x3(32->64)-ReLU-maxpool2-Linear(1600->128)-ReLU-Linear(->10) */
static inline dl_layer *bench_build_cnn(void)
{
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
    return s;
}

/* Matrix-product FLOPs per training sample: forward + weight gradient for
 * every Linear/Conv2d, input gradient for all but the first. */
typedef struct bench_flop_count {
    double flops;
    int weighted;
} bench_flop_count;

static inline void bench_count_layer(dl_layer *l, int depth, void *arg)
{
    bench_flop_count *c = arg;
    if (strcmp(l->vt->kind, "Linear") && strcmp(l->vt->kind, "Conv2d"))
        return;
    c->flops += (c->weighted ? 3.0 : 2.0) * l->flops;
    c->weighted++;
}

static inline double bench_gemm_flops(dl_model *m)
{
    bench_flop_count c = {0, 0};
    dl_model_each_layer(m, bench_count_layer, &c);
    return c.flops;
}

#endif
