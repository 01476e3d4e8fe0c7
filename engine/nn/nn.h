/* nn.h - layers with explicit forward/backward, containers, losses and the model that owns their state
 *
 * A model is a tree of layers (Sequential and Residual containers) plus
 * two arenas on one backend:
 *   state:       [params P | grads P | moment1 P | moment2 P | buffers B]
 *                (f32) followed by a low-precision copy of the params
 *                (refreshed after each optimizer step) in the backend's
 *                operand type (dl_backend_operand_type: bf16/f16 where
 *                it has the arithmetic, f32 holding rounded values where
 *                it emulates them);
 *   activations: per-layer outputs and saved values for a batch size,
 *                then the activation gradients (zeroed each backward).
 * Layers keep offsets into the arenas, never pointers, so moving a model
 * to another backend is one copy per arena (dl_storage_move).
 */
#ifndef DL_NN_H
#define DL_NN_H

#include <stddef.h>
#include <stdint.h>

#include "engine/core/backend.h"
#include "engine/core/tensor.h"

typedef struct dl_model dl_model;
typedef struct dl_layer dl_layer;

typedef enum { DL_PREC_F32, DL_PREC_BF16, DL_PREC_F16 } dl_precision;
const char *dl_precision_name(dl_precision p);
int dl_precision_parse(const char *name); /* -1 when unknown */

/* Everything a layer's forward/backward needs for one pass. */
typedef struct dl_pass {
    dl_backend *be;
    float *params, *grads; /* state arena: f32 params and their gradients */
    float *buffers;        /* running statistics */
    void *params_lp;       /* low-precision params (compute != f32), of type operand */
    char *act;             /* activation arena: region 0 (values) */
    char *act_grad;        /* region 1 (activation gradients) */
    int n;                 /* rows in this batch (<= planned batch) */
    int training;
    dl_dtype compute; /* the precision of products: f32, bf16, f16 */
    dl_dtype operand; /* the type their operands are stored in: compute, or f32
                       * holding values rounded to it (dl_backend_operand_type) */
    /* Activations written rounded for the convolution that reads them so
     * (emulated low precision; a Sequential sets these around one child's
     * call, see nn.c): round_out asks the child to write its output
     * (forward) or its written input gradient (backward) rounded to that
     * type (DL_F32: no), and the child sets rounded when it did;
     * operands_rounded holds DL_CONV_*_ROUNDED bits for a convolution
     * whose x or dy arrive so. */
    dl_dtype round_out;
    int rounded;
    int operands_rounded;
    uint64_t seed;
    uint64_t counter; /* micro-batch counter: keys dropout masks */
    int profile;      /* time each layer */
    /* Profiling sink (profile set, may be NULL): called after each timed
     * child pass with its CLOCK_MONOTONIC interval in milliseconds. */
    void (*prof_hook)(void *user, const dl_layer *l, int backward, int n, double t0_ms,
                      double t1_ms);
    void *prof_user;
    /* Gradient sink (may be NULL): called after each child's backward,
     * profiled or not, when the parameter gradients of that layer are
     * final for this pass; a negative return fails the backward. Data
     * parallelism starts reducing finished gradients from it. */
    int (*grad_hook)(void *user, const dl_layer *l);
    void *grad_user;
} dl_pass;

/* Per-layer profile counters (milliseconds, summed over calls). */
typedef struct dl_layer_prof {
    long calls;
    double fwd_ms, bwd_ms;
} dl_layer_prof;

/* A layer's configuration as tools outside training need it (the
 * exporters in engine/export): what its constructor was given. Fields a
 * kind does not use stay 0. */
typedef struct dl_layer_config {
    int in, out;      /* Linear features; Conv2d channels; Embedding vocab, dim;
                       * PositionalEmbedding max_len, dim; BatchNorm, LayerNorm,
                       * MultiheadAttention features (in) */
    int kernel;       /* Conv2d kernel; MaxPool2d, AvgPool2d window */
    int stride, pad;  /* Conv2d, pools */
    int dilation;     /* Conv2d (1) */
    int groups;       /* Conv2d (1) */
    int out_h, out_w; /* AdaptiveAvgPool2d */
    int bias;         /* Linear, Conv2d, MultiheadAttention: has bias parameters */
    int heads;        /* MultiheadAttention */
    int causal;       /* MultiheadAttention: position i sees 0..i */
    float eps;        /* BatchNorm, LayerNorm */
    float p;          /* Dropout */
} dl_layer_config;

/* What dl_layer_vt.fuses answers for a pair that runs as one. */
enum { DL_FUSE_SET = 1, DL_FUSE_ADD = 2 };

typedef struct dl_layer_vt {
    const char *kind; /* "Linear", "Conv2d", ... */
    /* Checks the per-sample input shape, sets the output shape, registers
     * parameters and buffers with the model. Errors name the layer. */
    int (*setup)(dl_layer *l, dl_model *m, const dl_shape *in, dl_shape *out);
    /* Reserves activation memory for batches of up to n rows. */
    int (*plan)(dl_layer *l, dl_model *m, int n);
    /* y = f(x); x [n, in...], y [n, out...] in the activation arena. */
    int (*forward)(dl_layer *l, dl_pass *p, const float *x, float *y);
    /* dx += df/dx^T dy (dx NULL: not needed); parameter grads +=. */
    int (*backward)(dl_layer *l, dl_pass *p, const float *x, const float *y, const float *dy,
                    float *dx);
    /* Frees what the layer owns (children of a container too). */
    void (*destroy)(dl_layer *l);
    /* Writes "Linear(784, 512)". */
    void (*describe)(const dl_layer *l, char *buf, size_t size);
    /* Optional: backward that WRITES dx (=) instead of adding to it, for a
     * dx nothing else writes (a container's own gradient buffer), which
     * then needs no zeroing. NULL: the container zeroes dx and calls
     * backward. */
    int (*backward_set)(dl_layer *l, dl_pass *p, const float *x, const float *y, const float *dy,
                        float *dx);
    /* Optional, for a layer that can absorb the one before it into one
     * backend op (ReLU -> MaxPool2d: relu(x) is never written; BatchNorm
     * -> ReLU: the normalised x is never written; Residual -> ReLU: the
     * sum is never written). fuses says whether l runs fused with prev on
     * this pass's backend: 0 no, DL_FUSE_SET yes, DL_FUSE_ADD yes and its
     * backward can also add into dx. Then a container calls forward_fused
     * with prev's input x and l's output y, and backward_fused, which
     * WRITES prev's input gradient dx, or adds into it when add is set
     * (only for DL_FUSE_ADD: a container's first child adds into the
     * caller's dx, so only such a pair may start there; dx NULL: prev's
     * input gradient is not wanted, its parameter gradients still are).
     * mid is the buffer the container
     * keeps for the gradient of prev's output, which a fused pair never
     * writes otherwise: the fused backward may use it as scratch. The
     * time shows under l, or under prev when prev is a container (its
     * children time themselves inside: Residual -> ReLU). Pairs are
     * taken left to right: in BatchNorm -> ReLU -> MaxPool2d the ReLU
     * absorbs the BatchNorm and the pool runs alone. */
    int (*fuses)(const dl_layer *l, const dl_layer *prev, const dl_pass *p);
    int (*forward_fused)(dl_layer *l, dl_layer *prev, dl_pass *p, const float *x, float *y);
    int (*backward_fused)(dl_layer *l, dl_layer *prev, dl_pass *p, const float *x, const float *y,
                          const float *dy, float *dx, float *mid, int add);
    /* Optional: writes a line about how the layer runs on its backend
     * (Conv2d: the algorithms chosen when it was planned) and returns 1;
     * 0: nothing to say. Reads what plan kept, calls no backend. */
    int (*note)(const dl_layer *l, char *buf, size_t size);
    /* Optional: fills c (zeroed by the caller) with the layer's
     * configuration; NULL for a layer that has none beyond its kind
     * (activations, Flatten, Identity, containers). */
    void (*config)(const dl_layer *l, dl_layer_config *c);
    /* Optional, leaves only: which of the layer's activations may be in
     * channel blocks of blk channels on p's backend (DL_BLOCK_* bits; see
     * nn.c's layout plan). NULL or 0: both plain [n, c, h, w]. */
    int (*blocks)(const dl_layer *l, const dl_pass *p, int blk);
    /* Optional: DL_CONV_*_ROUNDED bits of the operands (x, dy) that l's
     * products on p read only rounded to p->compute, which a producer
     * may write so and spare l its rounding pass. NULL or 0: none. */
    int (*reads_rounded)(const dl_layer *l, const dl_pass *p);
} dl_layer_vt;

/* dl_layer_vt.blocks: the input may be blocked, the output may be, the
 * two are one layout (an elementwise layer: both or neither), the layer
 * is a convolution that saves its reorders when they are. */
enum { DL_BLOCK_IN = 1, DL_BLOCK_OUT = 2, DL_BLOCK_THROUGH = 4, DL_BLOCK_CONV = 8 };

struct dl_layer {
    const dl_layer_vt *vt;
    int id;           /* position in the model (keys RNG streams) */
    char name[48];    /* user name or "<kind><id>" */
    dl_shape in, out; /* per sample, set by setup */
    /* x and y in channel blocks of this many channels ([n, c / blk, h, w,
     * blk]); 0: plain. Set by the layout plan for the pass's backend. */
    int blk_in, blk_out;
    double flops; /* forward FLOPs per sample (backward is ~2x) */
    dl_layer_prof prof;
    dl_model *model; /* set by setup; a layer belongs to one model */
    /* children of containers */
    dl_layer **child;
    int nchild;
    /* the layer's private fields follow in its own struct */
};

/* --- layer constructors: return NULL with dl_error() on bad arguments --- */
dl_layer *dl_nn_linear(int in, int out, int bias);
/* Conv2d(in, out, kernel, stride, pad, bias): groups 1, dilation 1. */
dl_layer *dl_nn_conv2d(int in_ch, int out_ch, int kernel, int stride, int pad, int bias);
/* Conv2d with PyTorch's options: weight [out, in/groups, k, k]; in and
 * out must be divisible by groups (groups == in: depthwise); 0 for groups
 * or dilation means 1. */
typedef struct dl_conv2d_opts {
    int stride, padding, dilation, groups, bias;
} dl_conv2d_opts;
dl_layer *dl_nn_conv2d_with(int in_ch, int out_ch, int kernel, const dl_conv2d_opts *o);
dl_layer *dl_nn_maxpool2d(int kernel, int stride, int pad);
dl_layer *dl_nn_avgpool2d(int kernel, int stride, int pad);
/* Adaptive average pooling of [c, h, w] to [c, out_h, out_w] (PyTorch's
 * windows); 1, 1 is global average pooling. */
dl_layer *dl_nn_adaptive_avgpool2d(int out_h, int out_w);
dl_layer *dl_nn_activation(dl_act kind);
dl_layer *dl_nn_dropout(float p);
/* BatchNorm over features (1-d input [f] or 2-d [c, h, w]: channels). */
dl_layer *dl_nn_batchnorm(int features, float eps, float momentum);
dl_layer *dl_nn_layernorm(int features, float eps);
dl_layer *dl_nn_flatten(void);
/* y = x, any shape. */
dl_layer *dl_nn_identity(void);
dl_layer *dl_nn_embedding(int vocab, int dim);
/* Multi-head self-attention over a [t, d_model] sample (engine/nn/attention.c):
 * fused QKV product (in_proj_weight [3 d_model, d_model]), scaled
 * dot-product attention per head (causal: position i sees 0..i), output
 * projection. heads must divide d_model; dropout must be 0 for now. */
dl_layer *dl_nn_multihead_attention(int d_model, int heads, int causal, float dropout, int bias);
/* y [t, dim] = x [t, dim] + a learned position vector per row, t <= max_len. */
dl_layer *dl_nn_positional_embedding(int max_len, int dim);
/* Containers take ownership of their children. */
dl_layer *dl_nn_sequential(void);
int dl_nn_sequential_add(dl_layer *seq, dl_layer *child);
/* y = x + block(x); block's output shape must equal its input shape. */
dl_layer *dl_nn_residual(dl_layer *block);
/* y = block(x) + shortcut(x) (shortcut NULL: the identity, as above); the
 * two outputs must have the same shape (checked at setup, the error names
 * both layers and both shapes). Gradients flow into both branches. */
dl_layer *dl_nn_residual_shortcut(dl_layer *block, dl_layer *shortcut);
/* Destroys a layer not (yet) owned by a model or container. */
void dl_layer_destroy(dl_layer *l);
void dl_layer_describe(const dl_layer *l, char *buf, size_t size);
/* The layer's note (see dl_layer_vt.note) into buf: 1 when it has one. */
int dl_layer_note(const dl_layer *l, char *buf, size_t size);
/* The layer's configuration in *c (zeroed first; left zero for a kind
 * without a config slot). */
void dl_layer_get_config(const dl_layer *l, dl_layer_config *c);

/* --- losses ------------------------------------------------------------- */
typedef enum { DL_LOSS_XENT, DL_LOSS_MSE, DL_LOSS_BCE } dl_loss_kind;
typedef struct dl_loss {
    dl_loss_kind kind;
    float smoothing;  /* cross-entropy label smoothing */
    int ignore_index; /* per-token cross-entropy: targets not counted (DL_IGNORE_NONE: none) */
} dl_loss;
const char *dl_loss_name(dl_loss_kind k);

/* PyTorch's default ignore_index: no class id, so no token is ignored. */
#define DL_IGNORE_NONE (-100)

/* Cross-entropy over per-token logits (engine/nn/loss.c): logits [rows,
 * classes] for rows = samples * tokens, targets [rows] (i32, device
 * pointers of be). The loss is the mean over the tokens whose target is
 * not ignore_index (DL_IGNORE_NONE: PyTorch's default), with the loss's
 * label smoothing: stats[0] += summed loss of the kept tokens, stats[1] +=
 * their correct argmax, stats[2] += their count (3 device floats; loss =
 * stats[0] / stats[2]); dlogits (may be NULL) += grad_scale *
 * d(mean)/dlogits. Errors name CrossEntropy: a backend without the op, a
 * target out of range. */
int dl_loss_xent_tokens(dl_backend *be, const dl_loss *loss, int ignore_index, int rows,
                        int classes, const float *logits, const int32_t *targets, float grad_scale,
                        float *dlogits, float *stats);

/* --- parameters ------------------------------------------------------------ */
typedef enum { DL_INIT_ZERO, DL_INIT_ONE, DL_INIT_UNIFORM_FAN_IN, DL_INIT_NORMAL } dl_init;

typedef struct dl_param {
    dl_layer *layer;
    char name[64]; /* "fc1.weight" */
    size_t offset; /* floats into the params region */
    size_t count;
    dl_shape shape;
    dl_init init;
    float init_scale; /* bound of the uniform / std of the normal */
    int decay;        /* weight decay applies (weights yes, biases and norms no) */
} dl_param;

/* A buffer: state that is not trained (BatchNorm's running statistics). */
typedef struct dl_buffer {
    dl_layer *layer;
    char name[64]; /* "BatchNorm3.running_mean" */
    size_t offset; /* floats into the buffers region */
    size_t count;
    dl_shape shape;
    float value; /* at init */
} dl_buffer;

/* --- the model ---------------------------------------------------------- */

/* Builds a model around root (taking ownership) for per-sample inputs of
 * shape `input`: runs every layer's setup (shape errors name both layers
 * and their shapes). The state arena is not allocated yet. On error root
 * is destroyed too. */
int dl_model_create(dl_model **out, dl_layer *root, const dl_shape *input);
void dl_model_destroy(dl_model *m);

/* Called by layers' setup: registers a parameter of `count` floats; returns
 * its offset in floats. */
size_t dl_model_add_param(dl_model *m, dl_layer *l, const char *name, const dl_shape *shape,
                          dl_init init, float init_scale, int decay);
/* Called by layers' setup: a buffer (running statistic) of shape's floats,
 * named "<layer>.<name>" like a parameter, set to value at init; returns
 * its offset in floats into the buffers region. */
size_t dl_model_add_buffer(dl_model *m, dl_layer *l, const char *name, const dl_shape *shape,
                           float value);
/* Called by layers' plan: reserves bytes of activation memory (region 0:
 * values, region 1: gradients); returns the byte offset from p->act
 * (region 0) or p->act_grad (region 1). Region 1 is not zeroed: each
 * container zeroes (or has its child overwrite) a gradient buffer before
 * the one child that writes it. */
size_t dl_model_reserve(dl_model *m, int region, size_t bytes);

/* Called by layers' plan: the scratch the layers share (convolution
 * workspaces: layers run one at a time, so one buffer serves all) must
 * hold at least bytes. dl_model_plan allocates the largest need on the
 * model's backend; after a move the layers plan again, sized by the new
 * backend. */
void dl_model_need_workspace(dl_model *m, size_t bytes);
/* For a pass: the shared scratch, grown first when it holds fewer than
 * bytes (a shorter batch, another precision); *ws and its *size (>=
 * bytes). DL_ENOMEM with the backend's message when it cannot grow. */
int dl_model_workspace(dl_model *m, size_t bytes, void **ws, size_t *size);
/* Bytes of the shared scratch now allocated (0: none). */
size_t dl_model_workspace_bytes(const dl_model *m);
/* The precision plans are sized for (default fp32): layers ask the
 * backend's workspace for that compute type only. */
void dl_model_set_precision(dl_model *m, dl_precision p);
dl_dtype dl_model_compute(const dl_model *m);

/* Allocates the state arena on be with `moments` optimizer moments per
 * parameter (0, 1 or 2) and initialises parameters from seed. */
int dl_model_init_state(dl_model *m, dl_backend *be, int moments, uint64_t seed);
/* Plans activations for batches of up to n rows on the model's backend. */
int dl_model_plan(dl_model *m, int n);
/* Moves both arenas to be (one copy each). On error the model stays where
 * it was. */
int dl_model_move(dl_model *m, dl_backend *be);
dl_backend *dl_model_backend(const dl_model *m);

/* A pass over the model for n rows: fills p from the arenas. */
void dl_model_pass(dl_model *m, dl_pass *p, int n, int training, dl_precision prec, uint64_t seed,
                   uint64_t counter);
/* Device pointers of the model input [n, input...] and output [n, out...]
 * and the output's gradient, valid after dl_model_plan. */
float *dl_model_input(dl_model *m);
float *dl_model_output(dl_model *m);
float *dl_model_output_grad(dl_model *m);
/* Forward through the whole model: reads dl_model_input, writes output.
 * In training mode it first zeroes the activation gradients (region 1,
 * which holds dl_model_output_grad), so the loss can accumulate into it. */
int dl_model_forward(dl_model *m, dl_pass *p);
/* Backward from dl_model_output_grad; parameter gradients accumulate. */
int dl_model_backward(dl_model *m, dl_pass *p);
/* Refreshes the low-precision copy of the parameters. */
int dl_model_refresh_lowp(dl_model *m, dl_dtype t);

/* Introspection. */
size_t dl_model_param_count(const dl_model *m); /* floats in the params region */
int dl_model_num_params(const dl_model *m);
const dl_param *dl_model_param(const dl_model *m, int i);
/* Buffers in registration order (NULL out of range). */
int dl_model_num_buffers(const dl_model *m);
const dl_buffer *dl_model_buffer(const dl_model *m, int i);
const dl_shape *dl_model_output_shape(const dl_model *m);
const dl_shape *dl_model_input_shape(const dl_model *m);
dl_layer *dl_model_root(const dl_model *m);
/* Calls fn for every layer, depth first, containers before children. */
void dl_model_each_layer(dl_model *m, void (*fn)(dl_layer *l, int depth, void *arg), void *arg);
/* Forward FLOPs per sample. */
double dl_model_flops(const dl_model *m);
/* FLOPs per sample of one training step: forward, then backward at twice
 * the forward (weight and input gradients) except the input gradient of a
 * leading parameter layer, which nothing reads (see Sequential). */
double dl_model_train_flops(const dl_model *m);
/* The leading parameter layer whose input gradient is never computed (its
 * backward does the weight gradient only), or NULL. */
const dl_layer *dl_model_input_grad_skipped(const dl_model *m);

/* Raw state for optimizers and checkpoints: device pointers. */
typedef struct dl_model_state {
    float *params, *grads, *moment1, *moment2, *buffers;
    void *params_lp;     /* the low-precision copy of params (count elements of
                          * dl_backend_operand_type(storage->be, precision)) */
    size_t count;        /* floats per region (params, grads, moments) */
    size_t buffer_count; /* floats of buffers */
    dl_storage *storage; /* the whole arena */
    int moments;
} dl_model_state;
void dl_model_get_state(dl_model *m, dl_model_state *s);

#endif
