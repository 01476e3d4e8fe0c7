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

/* --- a CNN as a user writes it (not tuned for) ---------------------------- */

/* conv3x3 pad 1 (1->16)-BN-GELU; Residual(conv-BN-GELU-conv-BN at 16
 * channels); GELU; maxpool2; conv3x3 pad 1 (16->32)-BN-GELU; maxpool2;
 * Flatten; Dropout 0.25; Linear(1568 -> 128)-GELU; Dropout 0.25;
 * Linear(128 -> 10). Batch 64, AdamW. */
static inline void bench_conv_bn_gelu(dl_layer *s, int cin, int cout, int gelu)
{
    dl_nn_sequential_add(s, dl_nn_conv2d(cin, cout, 3, 1, 1, 1));
    dl_nn_sequential_add(s, dl_nn_batchnorm(cout, 1e-5f, 0.1f));
    if (gelu)
        dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_GELU));
}

static inline dl_layer *bench_build_user_cnn(void)
{
    dl_layer *s = dl_nn_sequential(), *block = dl_nn_sequential();
    bench_conv_bn_gelu(s, 1, 16, 1);
    bench_conv_bn_gelu(block, 16, 16, 1);
    bench_conv_bn_gelu(block, 16, 16, 0);
    dl_nn_sequential_add(s, dl_nn_residual(block));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_GELU));
    dl_nn_sequential_add(s, dl_nn_maxpool2d(2, 2, 0));
    bench_conv_bn_gelu(s, 16, 32, 1);
    dl_nn_sequential_add(s, dl_nn_maxpool2d(2, 2, 0));
    dl_nn_sequential_add(s, dl_nn_flatten());
    dl_nn_sequential_add(s, dl_nn_dropout(0.25f));
    dl_nn_sequential_add(s, dl_nn_linear(32 * 7 * 7, 128, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_GELU));
    dl_nn_sequential_add(s, dl_nn_dropout(0.25f));
    dl_nn_sequential_add(s, dl_nn_linear(128, 10, 1));
    return s;
}

/* --- the small ResNet of scripts/resnet_fmnist.lua (width 16) ----------- */

/* Conv2d(cin -> cout, k x k, no bias) followed by BatchNorm2d(cout). */
static inline void bench_conv_bn(dl_layer *s, int cin, int cout, int k, int stride)
{
    dl_conv2d_opts o = {stride, k / 2, 1, 1, 0};
    dl_nn_sequential_add(s, dl_nn_conv2d_with(cin, cout, k, &o));
    dl_nn_sequential_add(s, dl_nn_batchnorm(cout, 1e-5f, 0.1f));
}

/* conv3x3-BN-ReLU-conv3x3-BN plus the shortcut (a 1x1 conv + BN where the
 * shape changes, else the identity), then ReLU. */
static inline dl_layer *bench_basic_block(int cin, int cout, int stride)
{
    dl_layer *block = dl_nn_sequential();
    bench_conv_bn(block, cin, cout, 3, stride);
    dl_nn_sequential_add(block, dl_nn_activation(DL_ACT_RELU));
    bench_conv_bn(block, cout, cout, 3, 1);
    dl_layer *shortcut = NULL;
    if (stride != 1 || cin != cout) {
        shortcut = dl_nn_sequential();
        bench_conv_bn(shortcut, cin, cout, 1, stride);
    }
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_residual_shortcut(block, shortcut));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    return s;
}

/* stem conv3x3(1->16)-BN-ReLU; stages of two basic blocks at 16, 32, 64
 * channels (stride 2 entering stages 2 and 3: 28, 14, 7); global average
 * pooling; Linear(64 -> 10). */
static inline dl_layer *bench_build_resnet(void)
{
    dl_layer *s = dl_nn_sequential();
    bench_conv_bn(s, 1, 16, 3, 1);
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    int cin = 16;
    for (int stage = 0; stage < 3; stage++)
        for (int b = 0; b < 2; b++) {
            int cout = 16 << stage;
            dl_nn_sequential_add(s, bench_basic_block(cin, cout, stage > 0 && b == 0 ? 2 : 1));
            cin = cout;
        }
    dl_nn_sequential_add(s, dl_nn_adaptive_avgpool2d(1, 1));
    dl_nn_sequential_add(s, dl_nn_flatten());
    dl_nn_sequential_add(s, dl_nn_linear(cin, 10, 1));
    return s;
}

/* --- a MobileNet (v1 blocks) on 28x28: depthwise and 1x1 convolutions -- */

/* Depthwise 3x3 (stride) -> BN -> ReLU -> 1x1 (cin -> cout) -> BN -> ReLU. */
static inline void bench_dw_block(dl_layer *s, int cin, int cout, int stride)
{
    dl_conv2d_opts dw = {stride, 1, 1, cin, 0}, pw = {1, 0, 1, 1, 0};
    dl_nn_sequential_add(s, dl_nn_conv2d_with(cin, cin, 3, &dw));
    dl_nn_sequential_add(s, dl_nn_batchnorm(cin, 1e-5f, 0.1f));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_conv2d_with(cin, cout, 1, &pw));
    dl_nn_sequential_add(s, dl_nn_batchnorm(cout, 1e-5f, 0.1f));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
}

/* stem conv3x3(1->32)-BN-ReLU; blocks 32->64, 64->128 s2, 128->128,
 * 128->256 s2, 256->256 (28, 14, 7); global average pooling;
 * Linear(256 -> 10). */
static inline dl_layer *bench_build_mobilenet(void)
{
    dl_layer *s = dl_nn_sequential();
    bench_conv_bn(s, 1, 32, 3, 1);
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    static const int blocks[][3] = {
        {32, 64, 1}, {64, 128, 2}, {128, 128, 1}, {128, 256, 2}, {256, 256, 1}};
    for (int i = 0; i < 5; i++)
        bench_dw_block(s, blocks[i][0], blocks[i][1], blocks[i][2]);
    dl_nn_sequential_add(s, dl_nn_adaptive_avgpool2d(1, 1));
    dl_nn_sequential_add(s, dl_nn_flatten());
    dl_nn_sequential_add(s, dl_nn_linear(256, 10, 1));
    return s;
}

/* --- the character GPT of scripts/char_gpt.lua --------------------------- */

#define BENCH_GPT_VOCAB 96
#define BENCH_GPT_CONTEXT 64
#define BENCH_GPT_D 128
#define BENCH_GPT_HEADS 4
#define BENCH_GPT_LAYERS 4

/* Residual(LayerNorm -> causal MultiheadAttention), then
 * Residual(LayerNorm -> Linear(d, 4d) -> GELU -> Linear(4d, d)). */
static inline dl_layer *bench_gpt_block(int d, int heads)
{
    dl_layer *att = dl_nn_sequential();
    dl_nn_sequential_add(att, dl_nn_layernorm(d, 1e-5f));
    dl_nn_sequential_add(att, dl_nn_multihead_attention(d, heads, 1, 0.0f, 1));
    dl_layer *mlp = dl_nn_sequential();
    dl_nn_sequential_add(mlp, dl_nn_layernorm(d, 1e-5f));
    dl_nn_sequential_add(mlp, dl_nn_linear(d, 4 * d, 1));
    dl_nn_sequential_add(mlp, dl_nn_activation(DL_ACT_GELU));
    dl_nn_sequential_add(mlp, dl_nn_linear(4 * d, d, 1));
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_residual(att));
    dl_nn_sequential_add(s, dl_nn_residual(mlp));
    return s;
}

/* Embedding(vocab, 128) + PositionalEmbedding(64, 128), 4 pre-norm blocks,
 * LayerNorm, Linear(128 -> vocab): [64] ids -> [64, vocab] logits. */
static inline dl_layer *bench_build_char_gpt(void)
{
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_embedding(BENCH_GPT_VOCAB, BENCH_GPT_D));
    dl_nn_sequential_add(s, dl_nn_positional_embedding(BENCH_GPT_CONTEXT, BENCH_GPT_D));
    for (int i = 0; i < BENCH_GPT_LAYERS; i++)
        dl_nn_sequential_add(s, bench_gpt_block(BENCH_GPT_D, BENCH_GPT_HEADS));
    dl_nn_sequential_add(s, dl_nn_layernorm(BENCH_GPT_D, 1e-5f));
    dl_nn_sequential_add(s, dl_nn_linear(BENCH_GPT_D, BENCH_GPT_VOCAB, 1));
    return s;
}

/* Matrix-product FLOPs per training sample: forward + weight gradient for
 * every Linear/Conv2d/MultiheadAttention (its products: QKV, scores,
 * weighted values, output projection), input gradient for all but the
 * first unless a layer with parameters (an Embedding) comes before it. */
typedef struct bench_flop_count {
    double flops;
    int weighted;
} bench_flop_count;

static inline void bench_count_layer(dl_layer *l, int depth, void *arg)
{
    bench_flop_count *c = arg;
    if (!strcmp(l->vt->kind, "Embedding") || !strcmp(l->vt->kind, "PositionalEmbedding")) {
        c->weighted++;
        return;
    }
    if (strcmp(l->vt->kind, "Linear") && strcmp(l->vt->kind, "Conv2d") &&
        strcmp(l->vt->kind, "MultiheadAttention"))
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
