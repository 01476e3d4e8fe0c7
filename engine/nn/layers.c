/* layers.c - leaf layers: Linear, Conv2d, pooling, activations, Dropout, norms, Flatten, Identity, Embedding */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/nn/layer_impl.h"
#include "engine/nn/nn.h"
#include "engine/base/rng.h"

static size_t numel(const dl_shape *s) { return (size_t)dl_shape_numel(s); }

/* --- Linear ----------------------------------------------------------------- */
/* x [rows, in] -> y [rows, out] = x W^T + b; W [out, in]. rows = n * (numel / in)
 * so a Linear also applies to the last dimension of a [t, in] sample. */

typedef struct {
    dl_layer base;
    int in, out, bias;
    size_t w, b;        /* param offsets */
    size_t x_lp, dy_lp; /* low-precision operand copies (activation arena) */
    int rows_per_sample;
} linear;

static int linear_setup(dl_layer *l, dl_model *m, const dl_shape *in, dl_shape *out)
{
    linear *L = (linear *)l;
    if (in->ndim < 1 || in->dim[in->ndim - 1] != L->in) {
        char e[64];
        snprintf(e, sizeof e, "%d features in its last dimension", L->in);
        return dl_layer_shape_error(l, in, e);
    }
    L->rows_per_sample = (int)(numel(in) / (size_t)L->in);
    *out = *in;
    out->dim[out->ndim - 1] = L->out;
    float bound = 1.0f / sqrtf((float)L->in);
    dl_shape ws = {2, {L->out, L->in}}, bs = {1, {L->out}};
    L->w = dl_model_add_param(m, l, "weight", &ws, DL_INIT_UNIFORM_FAN_IN, bound, 1);
    if (L->bias)
        L->b = dl_model_add_param(m, l, "bias", &bs, DL_INIT_UNIFORM_FAN_IN, bound, 0);
    l->flops = 2.0 * L->in * L->out * L->rows_per_sample;
    return DL_OK;
}

static int linear_plan(dl_layer *l, dl_model *m, int n)
{
    linear *L = (linear *)l;
    size_t rows = (size_t)n * (size_t)L->rows_per_sample;
    L->x_lp = dl_model_reserve(m, 0, rows * (size_t)L->in * DL_LAYER_OPERAND_BYTES);
    L->dy_lp = dl_model_reserve(m, 0, rows * (size_t)L->out * DL_LAYER_OPERAND_BYTES);
    return DL_OK;
}

static int linear_forward(dl_layer *l, dl_pass *p, const float *x, float *y)
{
    linear *L = (linear *)l;
    int rows = p->n * L->rows_per_sample;
    const void *xa;
    DL_TRY(dl_layer_operand(p, x, (size_t)rows * L->in, L->x_lp, &xa));
    DL_TRY(OPS(p)->gemm(p->be, 0, 1, rows, L->out, L->in, 1.0f, xa, L->in,
                        dl_layer_weights(p, L->w), L->in, p->operand, 0.0f, y, L->out));
    if (L->bias)
        DL_TRY(OPS(p)->bias_add(p->be, y, p->params + L->b, rows, L->out, 1));
    return DL_OK;
}

static int linear_grads(dl_layer *l, dl_pass *p, const float *x, const float *dy, float *dx,
                        float dx_beta)
{
    linear *L = (linear *)l;
    int rows = p->n * L->rows_per_sample;
    const void *xa = x, *dya;
    DL_TRY(dl_layer_operand(p, dy, (size_t)rows * L->out, L->dy_lp, &dya));
    if (p->compute != DL_F32)
        xa = p->act + L->x_lp; /* made in forward */
    /* dW [out, in] += dy^T [out, rows] x [rows, in] */
    DL_TRY(OPS(p)->gemm(p->be, 1, 0, L->out, L->in, rows, 1.0f, dya, L->out, xa, L->in, p->operand,
                        1.0f, p->grads + L->w, L->in));
    if (L->bias)
        DL_TRY(OPS(p)->bias_grad(p->be, p->grads + L->b, dy, rows, L->out, 1));
    /* dx [rows, in] (+)= dy [rows, out] W [out, in] */
    if (dx)
        DL_TRY(OPS(p)->gemm(p->be, 0, 0, rows, L->in, L->out, 1.0f, dya, L->out,
                            dl_layer_weights(p, L->w), L->in, p->operand, dx_beta, dx, L->in));
    return DL_OK;
}

static int linear_backward(dl_layer *l, dl_pass *p, const float *x, const float *y, const float *dy,
                           float *dx)
{
    return linear_grads(l, p, x, dy, dx, 1.0f);
}

static int linear_backward_set(dl_layer *l, dl_pass *p, const float *x, const float *y,
                               const float *dy, float *dx)
{
    return linear_grads(l, p, x, dy, dx, 0.0f);
}

static void linear_describe(const dl_layer *l, char *buf, size_t size)
{
    const linear *L = (const linear *)l;
    snprintf(buf, size, "Linear(%d, %d%s)", L->in, L->out, L->bias ? "" : ", bias=false");
}

static void linear_config(const dl_layer *l, dl_layer_config *c)
{
    const linear *L = (const linear *)l;
    c->in = L->in;
    c->out = L->out;
    c->bias = L->bias;
}

static const dl_layer_vt linear_vt = {
    .kind = "Linear",
    .setup = linear_setup,
    .plan = linear_plan,
    .forward = linear_forward,
    .backward = linear_backward,
    .describe = linear_describe,
    .backward_set = linear_backward_set,
    .config = linear_config,
};

dl_layer *dl_nn_linear(int in, int out, int bias)
{
    if (in < 1 || out < 1) {
        dl_error(DL_EINVAL, "Linear(%d, %d): sizes must be positive", in, out);
        return NULL;
    }
    linear *L = dl_layer_new(sizeof *L, &linear_vt);
    if (L) {
        L->in = in;
        L->out = out;
        L->bias = bias;
    }
    return (dl_layer *)L;
}

/* --- Conv2d ----------------------------------------------------------------- */
/* x [c, h, w] -> y [k, p, q]; W [k, c/groups, r, s]. */

typedef struct {
    dl_layer base;
    int cin, cout, kernel, stride, pad, dilation, groups, bias;
    size_t w, b;
    dl_conv_desc d;
    /* the last workspace figure asked of a backend, for (be, n, compute) */
    const dl_backend *ws_be;
    int ws_n;
    dl_dtype ws_compute;
    size_t ws_need;
    char algo[192]; /* the backend's algorithms for the planned batch ("": not said) */
} conv2d;

static int conv_setup(dl_layer *l, dl_model *m, const dl_shape *in, dl_shape *out)
{
    conv2d *C = (conv2d *)l;
    char e[96];
    snprintf(e, sizeof e, "[%d, h, w] (channels, height, width)", C->cin);
    if (in->ndim != 3 || in->dim[0] != C->cin)
        return dl_layer_shape_error(l, in, e);
    int h = (int)in->dim[1], w = (int)in->dim[2];
    int extent = C->dilation * (C->kernel - 1) + 1; /* the dilated kernel */
    int p = (h + 2 * C->pad - extent) / C->stride + 1;
    int q = (w + 2 * C->pad - extent) / C->stride + 1;
    if (h + 2 * C->pad < extent || w + 2 * C->pad < extent || p < 1 || q < 1) {
        snprintf(e, sizeof e, "an image at least %dx%d (kernel %d, padding %d)",
                 extent - 2 * C->pad, extent - 2 * C->pad, extent, C->pad);
        return dl_layer_shape_error(l, in, e);
    }
    C->d = (dl_conv_desc){.c = C->cin,
                          .h = h,
                          .w = w,
                          .k = C->cout,
                          .r = C->kernel,
                          .s = C->kernel,
                          .stride = C->stride,
                          .pad = C->pad,
                          .p = p,
                          .q = q,
                          .groups = C->groups,
                          .dilation = C->dilation};
    *out = (dl_shape){3, {C->cout, p, q}};
    int cg = C->cin / C->groups;
    float bound = 1.0f / sqrtf((float)(cg * C->kernel * C->kernel));
    dl_shape ws = {4, {C->cout, cg, C->kernel, C->kernel}}, bs = {1, {C->cout}};
    C->w = dl_model_add_param(m, l, "weight", &ws, DL_INIT_UNIFORM_FAN_IN, bound, 1);
    if (C->bias)
        C->b = dl_model_add_param(m, l, "bias", &bs, DL_INIT_UNIFORM_FAN_IN, bound, 0);
    l->flops = 2.0 * cg * C->kernel * C->kernel * (double)C->cout * p * q;
    return DL_OK;
}

static dl_conv_desc conv_desc(const conv2d *C, int n)
{
    dl_conv_desc d = C->d;
    d.n = n;
    return d;
}

/* The layer's desc for pass p, activations in the layout plan's blocks. */
static dl_conv_desc conv_pass_desc(const conv2d *C, const dl_pass *p)
{
    dl_conv_desc d = conv_desc(C, p->n);
    d.x_blk = C->base.blk_in;
    d.y_blk = C->base.blk_out;
    d.rounded = p->operands_rounded;
    return d;
}

/* Emulated low precision rounds x and dy for the products; dy only
 * without a bias, whose gradient sums dy as it is. */
static int conv_reads_rounded(const dl_layer *l, const dl_pass *p)
{
    if (p->compute == DL_F32 || p->operand != DL_F32)
        return 0;
    return DL_CONV_X_ROUNDED | (((const conv2d *)l)->bias ? 0 : DL_CONV_DY_ROUNDED);
}

static int conv_blocks(const dl_layer *l, const dl_pass *p, int blk)
{
    if (!OPS(p)->conv_blocks)
        return 0;
    dl_conv_desc d = conv_desc((const conv2d *)l, p->n);
    int can = OPS(p)->conv_blocks(p->be, &d, p->compute);
    return DL_BLOCK_CONV | (can & 1 ? DL_BLOCK_IN : 0) | (can & 2 ? DL_BLOCK_OUT : 0);
}

/* Bytes of workspace be asks for n rows in compute (asked once per
 * backend, batch size and compute type in a row, then remembered). */
static size_t conv_need(conv2d *C, dl_backend *be, int n, dl_dtype compute)
{
    if (C->ws_be != be || C->ws_n != n || C->ws_compute != compute) {
        dl_conv_desc d = conv_desc(C, n);
        C->ws_need = be->ops->conv_workspace(be, &d, compute);
        C->ws_be = be;
        C->ws_n = n;
        C->ws_compute = compute;
    }
    return C->ws_need;
}

/* Sizes the shared workspace for the planned batch on the model's
 * backend, in the model's precision only. */
static int conv_plan(dl_layer *l, dl_model *m, int n)
{
    conv2d *C = (conv2d *)l;
    C->d.n = n;
    C->ws_be = NULL; /* asked again: the backend may be new at an old address */
    dl_backend *be = dl_model_backend(m);
    dl_dtype compute = dl_model_compute(m);
    dl_model_need_workspace(m, conv_need(C, be, n, compute));
    C->algo[0] = '\0';
    if (be->ops->conv_algo && be->ops->conv_algo(be, &C->d, compute, C->algo, sizeof C->algo) < 0)
        C->algo[0] = '\0'; /* a shape the backend refuses: the first op says why */
    return DL_OK;
}

static int conv_note(const dl_layer *l, char *buf, size_t size)
{
    const conv2d *C = (const conv2d *)l;
    if (!C->algo[0])
        return 0;
    /* the layout plan's choice for the last pass (nn.c) */
    int in = l->blk_in, out = l->blk_out;
    char blocks[64] = "";
    if (in || out)
        snprintf(blocks, sizeof blocks, "; %s in %d-channel blocks",
                 in && out ? "x and y"
                 : in      ? "x"
                           : "y",
                 in ? in : out);
    snprintf(buf, size, "%s%s", C->algo, blocks);
    return 1;
}

/* The shared workspace for this pass (grown when this batch size or
 * precision needs more than was planned). */
static int conv_ws(conv2d *C, const dl_pass *p, void **ws, size_t *size)
{
    int rc = dl_model_workspace(C->base.model, conv_need(C, p->be, p->n, p->compute), ws, size);
    if (rc < 0) {
        char d[96], msg[400];
        dl_layer_describe(&C->base, d, sizeof d);
        snprintf(msg, sizeof msg, "%s", dl_error_message());
        return dl_error(rc, "%s workspace for a batch of %d: %s", d, p->n, msg);
    }
    return DL_OK;
}

static int conv_forward(dl_layer *l, dl_pass *p, const float *x, float *y)
{
    conv2d *C = (conv2d *)l;
    dl_conv_desc d = conv_pass_desc(C, p);
    void *ws;
    size_t wsb;
    DL_TRY(conv_ws(C, p, &ws, &wsb));
    return OPS(p)->conv_forward(p->be, &d, y, x, p->params + C->w,
                                C->bias ? p->params + C->b : NULL, ws, wsb, p->compute);
}

/* dx added into, or written (set) where the backend can write it and
 * zeroed first where not. */
static int conv_grads(dl_layer *l, dl_pass *p, const float *x, const float *dy, float *dx, int set)
{
    conv2d *C = (conv2d *)l;
    dl_conv_desc d = conv_pass_desc(C, p);
    void *ws;
    size_t wsb;
    DL_TRY(conv_ws(C, p, &ws, &wsb));
    if (OPS(p)->conv_backward)
        return OPS(p)->conv_backward(p->be, &d, p->grads + C->w, C->bias ? p->grads + C->b : NULL,
                                     dx, set, dy, x, p->params + C->w, ws, wsb, p->compute);
    DL_TRY(OPS(p)->conv_backward_filter(
        p->be, &d, p->grads + C->w, C->bias ? p->grads + C->b : NULL, dy, x, ws, wsb, p->compute));
    if (!dx)
        return DL_OK;
    if (set && OPS(p)->conv_backward_data_set)
        return OPS(p)->conv_backward_data_set(p->be, &d, dx, dy, p->params + C->w, ws, wsb,
                                              p->compute);
    if (set)
        DL_TRY(OPS(p)->memset0(p->be, dx, (size_t)p->n * numel(&l->in) * sizeof(float)));
    return OPS(p)->conv_backward_data(p->be, &d, dx, dy, p->params + C->w, ws, wsb, p->compute);
}

static int conv_backward(dl_layer *l, dl_pass *p, const float *x, const float *y, const float *dy,
                         float *dx)
{
    return conv_grads(l, p, x, dy, dx, 0);
}

static int conv_backward_set(dl_layer *l, dl_pass *p, const float *x, const float *y,
                             const float *dy, float *dx)
{
    return conv_grads(l, p, x, dy, dx, 1);
}

static void conv_describe(const dl_layer *l, char *buf, size_t size)
{
    const conv2d *C = (const conv2d *)l;
    char groups[24] = "", dilation[24] = "";
    if (C->groups > 1)
        snprintf(groups, sizeof groups, ", groups=%d", C->groups);
    if (C->dilation > 1)
        snprintf(dilation, sizeof dilation, ", dilation=%d", C->dilation);
    snprintf(buf, size, "Conv2d(%d, %d, %d, stride=%d, pad=%d%s%s)", C->cin, C->cout, C->kernel,
             C->stride, C->pad, groups, dilation);
}

static void conv_config(const dl_layer *l, dl_layer_config *c)
{
    const conv2d *C = (const conv2d *)l;
    *c = (dl_layer_config){.in = C->cin,
                           .out = C->cout,
                           .kernel = C->kernel,
                           .stride = C->stride,
                           .pad = C->pad,
                           .dilation = C->dilation,
                           .groups = C->groups,
                           .bias = C->bias};
}

static const dl_layer_vt conv_vt = {
    .kind = "Conv2d",
    .setup = conv_setup,
    .plan = conv_plan,
    .forward = conv_forward,
    .backward = conv_backward,
    .backward_set = conv_backward_set,
    .describe = conv_describe,
    .note = conv_note,
    .config = conv_config,
    .blocks = conv_blocks,
    .reads_rounded = conv_reads_rounded,
};

dl_layer *dl_nn_conv2d_with(int in_ch, int out_ch, int kernel, const dl_conv2d_opts *o)
{
    int groups = o->groups ? o->groups : 1, dilation = o->dilation ? o->dilation : 1;
    if (in_ch < 1 || out_ch < 1 || kernel < 1 || o->stride < 1 || o->padding < 0 || groups < 1 ||
        dilation < 1) {
        dl_error(DL_EINVAL,
                 "Conv2d(%d, %d, %d, stride=%d, padding=%d, groups=%d, dilation=%d): channels, "
                 "kernel, stride, groups and dilation must be positive and padding non-negative",
                 in_ch, out_ch, kernel, o->stride, o->padding, groups, dilation);
        return NULL;
    }
    if (in_ch % groups || out_ch % groups) {
        dl_error(DL_EINVAL,
                 "Conv2d(%d, %d, %d, groups=%d): in_channels %d and out_channels %d must both be "
                 "divisible by groups %d",
                 in_ch, out_ch, kernel, groups, in_ch, out_ch, groups);
        return NULL;
    }
    conv2d *C = dl_layer_new(sizeof *C, &conv_vt);
    if (C) {
        C->cin = in_ch;
        C->cout = out_ch;
        C->kernel = kernel;
        C->stride = o->stride;
        C->pad = o->padding;
        C->dilation = dilation;
        C->groups = groups;
        C->bias = o->bias;
    }
    return (dl_layer *)C;
}

dl_layer *dl_nn_conv2d(int in_ch, int out_ch, int kernel, int stride, int pad, int bias)
{
    dl_conv2d_opts o = {stride, pad, 1, 1, bias};
    return dl_nn_conv2d_with(in_ch, out_ch, kernel, &o);
}

/* --- pooling ------------------------------------------------------------------ */

typedef struct {
    dl_layer base;
    dl_pool_kind kind;
    int size, stride, pad;
    dl_pool_desc d;
} pool2d;

static int pool_setup(dl_layer *l, dl_model *m, const dl_shape *in, dl_shape *out)
{
    pool2d *P = (pool2d *)l;
    if (in->ndim != 3)
        return dl_layer_shape_error(l, in, "[channels, height, width]");
    int h = (int)in->dim[1], w = (int)in->dim[2];
    if (P->pad * 2 > P->size)
        return dl_layer_shape_error(l, in, "padding at most half the window");
    int p = (h + 2 * P->pad - P->size) / P->stride + 1;
    int q = (w + 2 * P->pad - P->size) / P->stride + 1;
    if (h + 2 * P->pad < P->size || w + 2 * P->pad < P->size || p < 1 || q < 1) {
        char e[64];
        snprintf(e, sizeof e, "an image at least %dx%d", P->size, P->size);
        return dl_layer_shape_error(l, in, e);
    }
    P->d = (dl_pool_desc){0, (int)in->dim[0], h, w, P->size, P->stride, P->pad, p, q, 0};
    *out = (dl_shape){3, {in->dim[0], p, q}};
    l->flops = (double)in->dim[0] * p * q * P->size * P->size;
    return DL_OK;
}

static int pool_plan(dl_layer *l, dl_model *m, int n) { return DL_OK; }

/* The layer's pooling descriptor for this pass's batch. */
static dl_pool_desc pool_desc_of(const dl_layer *l, const dl_pass *p)
{
    dl_pool_desc d = ((const pool2d *)l)->d;
    d.n = p->n;
    d.blk = l->blk_in;
    return d;
}

/* Any layout, the same one in and out (defined with the activations). */
static int elementwise_blocks(const dl_layer *l, const dl_pass *p, int blk);

static int pool_forward(dl_layer *l, dl_pass *p, const float *x, float *y)
{
    dl_pool_desc d = pool_desc_of(l, p);
    return OPS(p)->pool_forward(p->be, ((pool2d *)l)->kind, &d, y, x);
}

static int pool_backward(dl_layer *l, dl_pass *p, const float *x, const float *y, const float *dy,
                         float *dx)
{
    if (!dx)
        return DL_OK;
    dl_pool_desc d = pool_desc_of(l, p);
    return OPS(p)->pool_backward(p->be, ((pool2d *)l)->kind, &d, dx, dy, x, y);
}

static void pool_describe(const dl_layer *l, char *buf, size_t size)
{
    const pool2d *P = (const pool2d *)l;
    snprintf(buf, size, "%s(%d, stride=%d, pad=%d)", l->vt->kind, P->size, P->stride, P->pad);
}

static void pool_config(const dl_layer *l, dl_layer_config *c)
{
    const pool2d *P = (const pool2d *)l;
    c->kernel = P->size;
    c->stride = P->stride;
    c->pad = P->pad;
}

static const dl_layer_vt relu_vt;

/* --- ReLU -> MaxPool2d, fused ----------------------------------------------- */

/* MaxPool2d absorbs a ReLU before it when the backend has the fused op:
 * max(relu(x)) = relu(max(x)), so the ReLU's output is never written. */
static int relu_pool_fuses(const dl_layer *pool, const dl_layer *relu, const dl_pass *p)
{
    return relu->vt == &relu_vt && OPS(p)->relu_maxpool_forward && OPS(p)->relu_maxpool_backward
               ? DL_FUSE_SET
               : 0;
}

static int relu_pool_forward(dl_layer *l, dl_layer *relu, dl_pass *p, const float *x, float *y)
{
    dl_pool_desc d = pool_desc_of(l, p);
    return OPS(p)->relu_maxpool_forward(p->be, &d, y, x);
}

static int relu_pool_backward(dl_layer *l, dl_layer *relu, dl_pass *p, const float *x,
                              const float *y, const float *dy, float *dx, float *mid, int add)
{
    if (!dx)
        return DL_OK;
    dl_pool_desc d = pool_desc_of(l, p);
    return OPS(p)->relu_maxpool_backward(p->be, &d, dx, dy, x, y);
}

static const dl_layer_vt maxpool_vt = {
    .kind = "MaxPool2d",
    .setup = pool_setup,
    .plan = pool_plan,
    .forward = pool_forward,
    .backward = pool_backward,
    .describe = pool_describe,
    .fuses = relu_pool_fuses,
    .forward_fused = relu_pool_forward,
    .backward_fused = relu_pool_backward,
    .config = pool_config,
    .blocks = elementwise_blocks,
};
static const dl_layer_vt avgpool_vt = {
    .kind = "AvgPool2d",
    .setup = pool_setup,
    .plan = pool_plan,
    .forward = pool_forward,
    .backward = pool_backward,
    .describe = pool_describe,
    .config = pool_config,
    .blocks = elementwise_blocks,
};

static dl_layer *make_pool(const dl_layer_vt *vt, dl_pool_kind kind, int size, int stride, int pad)
{
    if (stride <= 0)
        stride = size;
    if (size < 1 || pad < 0) {
        dl_error(DL_EINVAL, "%s(%d, stride=%d, pad=%d): window must be positive", vt->kind, size,
                 stride, pad);
        return NULL;
    }
    pool2d *P = dl_layer_new(sizeof *P, vt);
    if (P) {
        P->kind = kind;
        P->size = size;
        P->stride = stride;
        P->pad = pad;
    }
    return (dl_layer *)P;
}

dl_layer *dl_nn_maxpool2d(int kernel, int stride, int pad)
{
    return make_pool(&maxpool_vt, DL_POOL_MAX, kernel, stride, pad);
}

dl_layer *dl_nn_avgpool2d(int kernel, int stride, int pad)
{
    return make_pool(&avgpool_vt, DL_POOL_AVG, kernel, stride, pad);
}

/* --- AdaptiveAvgPool2d ------------------------------------------------------ */
/* x [c, h, w] -> y [c, out_h, out_w]: each output the mean of its window
 * (see the backend's adaptive_avgpool_forward); 1, 1 is global average
 * pooling. */

typedef struct {
    dl_layer base;
    int out_h, out_w;
    dl_pool_desc d;
} adaptive_pool;

static int apool_setup(dl_layer *l, dl_model *m, const dl_shape *in, dl_shape *out)
{
    adaptive_pool *A = (adaptive_pool *)l;
    if (in->ndim != 3)
        return dl_layer_shape_error(l, in, "[channels, height, width]");
    int c = (int)in->dim[0], h = (int)in->dim[1], w = (int)in->dim[2];
    A->d = (dl_pool_desc){0, c, h, w, 0, 0, 0, A->out_h, A->out_w, 0};
    *out = (dl_shape){3, {c, A->out_h, A->out_w}};
    l->flops = (double)numel(in);
    return DL_OK;
}

static int apool_missing(const dl_layer *l, const dl_pass *p)
{
    return dl_error(DL_EUNSUPPORTED, "%s: the %s backend has no adaptive average pooling", l->name,
                    OPS(p)->name);
}

static int apool_forward(dl_layer *l, dl_pass *p, const float *x, float *y)
{
    if (!OPS(p)->adaptive_avgpool_forward)
        return apool_missing(l, p);
    dl_pool_desc d = ((adaptive_pool *)l)->d;
    d.n = p->n;
    d.blk = l->blk_in;
    return OPS(p)->adaptive_avgpool_forward(p->be, &d, y, x);
}

static int apool_backward(dl_layer *l, dl_pass *p, const float *x, const float *y, const float *dy,
                          float *dx)
{
    if (!dx)
        return DL_OK;
    if (!OPS(p)->adaptive_avgpool_backward)
        return apool_missing(l, p);
    dl_pool_desc d = ((adaptive_pool *)l)->d;
    d.n = p->n;
    d.blk = l->blk_in;
    return OPS(p)->adaptive_avgpool_backward(p->be, &d, dx, dy);
}

static void apool_describe(const dl_layer *l, char *buf, size_t size)
{
    const adaptive_pool *A = (const adaptive_pool *)l;
    if (A->out_h == A->out_w)
        snprintf(buf, size, "AdaptiveAvgPool2d(%d)", A->out_h);
    else
        snprintf(buf, size, "AdaptiveAvgPool2d((%d, %d))", A->out_h, A->out_w);
}

static void apool_config(const dl_layer *l, dl_layer_config *c)
{
    c->out_h = ((const adaptive_pool *)l)->out_h;
    c->out_w = ((const adaptive_pool *)l)->out_w;
}

/* Whether per-sample activations of shape s can be in blocks of blk
 * channels: [c, h, w] with c a multiple of blk. */
static int blockable(const dl_shape *s, int blk)
{
    return s->ndim == 3 && blk > 0 && s->dim[0] % blk == 0;
}

/* Global pooling reads blocked x (its [c, 1, 1] output is the same either way). */
static int apool_blocks(const dl_layer *l, const dl_pass *p, int blk)
{
    const adaptive_pool *A = (const adaptive_pool *)l;
    return A->out_h == 1 && A->out_w == 1 && blockable(&l->in, blk) ? DL_BLOCK_IN : 0;
}

static const dl_layer_vt apool_vt = {
    .kind = "AdaptiveAvgPool2d",
    .setup = apool_setup,
    .plan = pool_plan,
    .forward = apool_forward,
    .backward = apool_backward,
    .describe = apool_describe,
    .config = apool_config,
    .blocks = apool_blocks,
};

dl_layer *dl_nn_adaptive_avgpool2d(int out_h, int out_w)
{
    if (out_h < 1 || out_w < 1) {
        dl_error(DL_EINVAL, "AdaptiveAvgPool2d(%d, %d): the output size must be positive", out_h,
                 out_w);
        return NULL;
    }
    adaptive_pool *A = dl_layer_new(sizeof *A, &apool_vt);
    if (A) {
        A->out_h = out_h;
        A->out_w = out_w;
    }
    return (dl_layer *)A;
}

/* --- activations ---------------------------------------------------------- */

typedef struct {
    dl_layer base;
    dl_act kind;
} activation;

static int same_shape_setup(dl_layer *l, dl_model *m, const dl_shape *in, dl_shape *out)
{
    *out = *in;
    l->flops = (double)numel(in);
    return DL_OK;
}

static int no_plan(dl_layer *l, dl_model *m, int n) { return DL_OK; }

/* An elementwise layer (and pooling): any layout, the same one in and out. */
static int elementwise_blocks(const dl_layer *l, const dl_pass *p, int blk)
{
    return blockable(&l->in, blk) ? DL_BLOCK_IN | DL_BLOCK_OUT | DL_BLOCK_THROUGH : 0;
}

static int act_forward(dl_layer *l, dl_pass *p, const float *x, float *y)
{
    dl_act kind = ((activation *)l)->kind;
    size_t n = (size_t)p->n * numel(&l->in);
    /* written rounded where the next layer reads it so and the backward
     * reads x alone (see dl_pass.round_out) */
    if (p->round_out != DL_F32 && OPS(p)->act_forward_round &&
        (kind == DL_ACT_RELU || kind == DL_ACT_GELU || kind == DL_ACT_SILU)) {
        DL_TRY(OPS(p)->act_forward_round(p->be, kind, y, x, n, p->round_out));
        p->rounded = 1;
        return DL_OK;
    }
    return OPS(p)->act_forward(p->be, kind, y, x, n);
}

static int act_backward(dl_layer *l, dl_pass *p, const float *x, const float *y, const float *dy,
                        float *dx)
{
    if (!dx)
        return DL_OK;
    return OPS(p)->act_backward(p->be, ((activation *)l)->kind, dx, x, y, dy,
                                (size_t)p->n * numel(&l->in));
}

static int act_backward_set(dl_layer *l, dl_pass *p, const float *x, const float *y,
                            const float *dy, float *dx)
{
    if (!dx)
        return DL_OK;
    size_t n = (size_t)p->n * numel(&l->in);
    if (OPS(p)->act_backward_set)
        return OPS(p)->act_backward_set(p->be, ((activation *)l)->kind, dx, x, y, dy, n);
    DL_TRY(OPS(p)->memset0(p->be, dx, n * sizeof(float)));
    return act_backward(l, p, x, y, dy, dx);
}

/* BatchNorm -> ReLU, fused (defined with BatchNorm below) */
static int bn_relu_fuses(const dl_layer *relu, const dl_layer *bn, const dl_pass *p);
static int bn_relu_forward(dl_layer *relu, dl_layer *bn, dl_pass *p, const float *x, float *y);
static int bn_relu_backward(dl_layer *relu, dl_layer *bn, dl_pass *p, const float *x,
                            const float *y, const float *dy, float *dx);

/* ReLU absorbs a BatchNorm before it, or a Residual (nn.c runs the add and
 * the ReLU as one op; the sum is never written). */
static int relu_fuses(const dl_layer *relu, const dl_layer *prev, const dl_pass *p)
{
    return bn_relu_fuses(relu, prev, p) ? DL_FUSE_SET : dl_residual_relu_fuses(prev, p);
}

static int relu_forward_fused(dl_layer *relu, dl_layer *prev, dl_pass *p, const float *x, float *y)
{
    return dl_residual_relu_fuses(prev, p) ? dl_residual_relu_forward(prev, p, x, y)
                                           : bn_relu_forward(relu, prev, p, x, y);
}

static int relu_backward_fused(dl_layer *relu, dl_layer *prev, dl_pass *p, const float *x,
                               const float *y, const float *dy, float *dx, float *mid, int add)
{
    return dl_residual_relu_fuses(prev, p)
               ? dl_residual_relu_backward(prev, p, x, y, dy, dx, mid, add)
               : bn_relu_backward(relu, prev, p, x, y, dy, dx);
}

/* The activations differ only in kind (act_forward/backward switch on it);
 * ReLU also absorbs a BatchNorm or a Residual before it. */
#define ACT_VT(var, name, ...)                                                                     \
    static const dl_layer_vt var = {.kind = name,                                                  \
                                    .setup = same_shape_setup,                                     \
                                    .plan = no_plan,                                               \
                                    .forward = act_forward,                                        \
                                    .backward = act_backward,                                      \
                                    .backward_set = act_backward_set,                              \
                                    .blocks = elementwise_blocks,                                  \
                                    __VA_ARGS__}
ACT_VT(relu_vt, "ReLU", .fuses = relu_fuses, .forward_fused = relu_forward_fused,
       .backward_fused = relu_backward_fused);
ACT_VT(gelu_vt, "GELU");
ACT_VT(tanh_vt, "Tanh");
ACT_VT(sigmoid_vt, "Sigmoid");
ACT_VT(silu_vt, "SiLU");
#undef ACT_VT

dl_layer *dl_nn_activation(dl_act kind)
{
    const dl_layer_vt *vt = kind == DL_ACT_RELU      ? &relu_vt
                            : kind == DL_ACT_GELU    ? &gelu_vt
                            : kind == DL_ACT_TANH    ? &tanh_vt
                            : kind == DL_ACT_SIGMOID ? &sigmoid_vt
                                                     : &silu_vt;
    activation *a = dl_layer_new(sizeof *a, vt);
    if (a)
        a->kind = kind;
    return (dl_layer *)a;
}

/* --- Dropout ------------------------------------------------------------------ */

typedef struct {
    dl_layer base;
    float p;
} dropout;

static int dropout_forward(dl_layer *l, dl_pass *p, const float *x, float *y)
{
    dropout *D = (dropout *)l;
    size_t n = (size_t)p->n * numel(&l->in);
    if (!p->training || D->p == 0)
        return OPS(p)->copy(p->be, y, x, n * sizeof(float));
    return OPS(p)->dropout_forward(p->be, y, x, n, D->p, p->seed,
                                   DL_STREAM_DROPOUT + (uint64_t)l->id, p->counter);
}

static int dropout_backward(dl_layer *l, dl_pass *p, const float *x, const float *y,
                            const float *dy, float *dx)
{
    dropout *D = (dropout *)l;
    size_t n = (size_t)p->n * numel(&l->in);
    if (!dx)
        return DL_OK;
    if (!p->training || D->p == 0)
        return OPS(p)->axpy(p->be, dx, 1.0f, dy, n);
    return OPS(p)->dropout_backward(p->be, dx, dy, n, D->p, p->seed,
                                    DL_STREAM_DROPOUT + (uint64_t)l->id, p->counter);
}

/* dx written: the gradient is the forward's mask applied to dy (the same
 * seed, stream and counter), so the forward op writes it. */
static int dropout_backward_set(dl_layer *l, dl_pass *p, const float *x, const float *y,
                                const float *dy, float *dx)
{
    if (!dx)
        return DL_OK;
    return dropout_forward(l, p, dy, dx);
}

static void dropout_describe(const dl_layer *l, char *buf, size_t size)
{
    snprintf(buf, size, "Dropout(%g)", (double)((const dropout *)l)->p);
}

static void dropout_config(const dl_layer *l, dl_layer_config *c)
{
    c->p = ((const dropout *)l)->p;
}

static const dl_layer_vt dropout_vt = {
    .kind = "Dropout",
    .setup = same_shape_setup,
    .plan = no_plan,
    .forward = dropout_forward,
    .backward = dropout_backward,
    .backward_set = dropout_backward_set,
    .describe = dropout_describe,
    .config = dropout_config,
};

dl_layer *dl_nn_dropout(float p)
{
    if (!(p >= 0 && p < 1)) {
        dl_error(DL_EINVAL, "Dropout(%g): p must be in [0, 1)", (double)p);
        return NULL;
    }
    dropout *D = dl_layer_new(sizeof *D, &dropout_vt);
    if (D)
        D->p = p;
    return (dl_layer *)D;
}

/* --- BatchNorm ---------------------------------------------------------------- */
/* [f] inputs: n rows of f channels (inner 1); [c, h, w]: c channels, inner h*w. */

typedef struct {
    dl_layer base;
    int features;
    float eps, momentum;
    int inner;
    size_t gamma, beta, run_mean, run_var, save_mean, save_invstd;
    size_t dx_scratch; /* for a BatchNorm first in the model (no dx wanted) */
} batchnorm;

static int bn_setup(dl_layer *l, dl_model *m, const dl_shape *in, dl_shape *out)
{
    batchnorm *B = (batchnorm *)l;
    char e[64];
    snprintf(e, sizeof e, "[%d] or [%d, h, w]", B->features, B->features);
    if (in->ndim < 1 || in->dim[0] != B->features || in->ndim == 2)
        return dl_layer_shape_error(l, in, e);
    B->inner = (int)(numel(in) / (size_t)B->features);
    dl_shape s = {1, {B->features}};
    B->gamma = dl_model_add_param(m, l, "weight", &s, DL_INIT_ONE, 0, 0);
    B->beta = dl_model_add_param(m, l, "bias", &s, DL_INIT_ZERO, 0, 0);
    B->run_mean = dl_model_add_buffer(m, l, "running_mean", &s, 0.0f);
    B->run_var = dl_model_add_buffer(m, l, "running_var", &s, 1.0f);
    *out = *in;
    l->flops = 4.0 * (double)numel(in);
    return DL_OK;
}

static int bn_plan(dl_layer *l, dl_model *m, int n)
{
    batchnorm *B = (batchnorm *)l;
    B->save_mean = dl_model_reserve(m, 0, (size_t)B->features * 4);
    B->save_invstd = dl_model_reserve(m, 0, (size_t)B->features * 4);
    B->dx_scratch = dl_model_reserve(m, 0, (size_t)n * numel(&l->in) * 4);
    return DL_OK;
}

static int bn_check_batch(const dl_layer *l, const dl_pass *p)
{
    if (p->training && p->n * ((const batchnorm *)l)->inner < 2)
        return dl_error(DL_EINVAL,
                        "%s: BatchNorm in training needs more than one value per "
                        "channel (batch of %d)",
                        l->name, p->n);
    return DL_OK;
}

/* DL_BN_* flags for the blocked ops: the fused ReLU's, and the rounding
 * the pass asks of the output (a written one), noted in p->rounded. */
static int bn_flags(dl_pass *p, int relu, int written)
{
    int round = written ? p->round_out : DL_F32;
    p->rounded = round == DL_BF16 || round == DL_F16;
    return (relu ? DL_BN_RELU : 0) | (round == DL_BF16  ? DL_BN_ROUND_BF16
                                      : round == DL_F16 ? DL_BN_ROUND_F16
                                                        : 0);
}

/* The forward on activations in channel blocks (relu: the fused ReLU's). */
static int bn_blocked_forward(batchnorm *B, dl_pass *p, const float *x, float *y, int relu)
{
    return OPS(p)->batchnorm_blocked_forward(
        p->be, B->base.blk_in, bn_flags(p, relu, 1), p->training, p->n, B->features, B->inner,
        B->momentum, B->eps, y, x, p->params + B->gamma, p->params + B->beta,
        p->buffers + B->run_mean, p->buffers + B->run_var, (float *)(p->act + B->save_mean),
        (float *)(p->act + B->save_invstd));
}

static int bn_blocked_backward(batchnorm *B, dl_pass *p, const float *x, const float *dy, float *dx,
                               int relu, int set)
{
    return OPS(p)->batchnorm_blocked_backward(
        p->be, B->base.blk_in, bn_flags(p, relu, set), set, p->n, B->features, B->inner, dx,
        p->grads + B->gamma, p->grads + B->beta, dy, x, p->params + B->gamma, p->params + B->beta,
        (const float *)(p->act + B->save_mean), (const float *)(p->act + B->save_invstd));
}

static int bn_blocks(const dl_layer *l, const dl_pass *p, int blk)
{
    return OPS(p)->batchnorm_blocked_forward && OPS(p)->batchnorm_blocked_backward
               ? elementwise_blocks(l, p, blk)
               : 0;
}

static int bn_forward(dl_layer *l, dl_pass *p, const float *x, float *y)
{
    batchnorm *B = (batchnorm *)l;
    DL_TRY(bn_check_batch(l, p));
    if (l->blk_in)
        return bn_blocked_forward(B, p, x, y, 0);
    return OPS(p)->batchnorm_forward(p->be, p->training, p->n, B->features, B->inner, B->momentum,
                                     B->eps, y, x, p->params + B->gamma, p->params + B->beta,
                                     p->buffers + B->run_mean, p->buffers + B->run_var,
                                     (float *)(p->act + B->save_mean),
                                     (float *)(p->act + B->save_invstd));
}

/* dx added into, or written (set) where the backend can write it and
 * zeroed first where not. */
static int bn_grads(dl_layer *l, dl_pass *p, const float *x, const float *dy, float *dx, int set)
{
    batchnorm *B = (batchnorm *)l;
    if (!p->training)
        return dl_error(DL_EINVAL, "%s: backward through BatchNorm in eval mode", l->name);
    if (!dx) { /* the backend computes dx with the parameter grads: give it scratch */
        dx = (float *)(p->act + B->dx_scratch);
        set = 1;
    }
    if (l->blk_in)
        return bn_blocked_backward(B, p, x, dy, dx, 0, set);
    if (set && !OPS(p)->batchnorm_backward_set) {
        DL_TRY(OPS(p)->memset0(p->be, dx, (size_t)p->n * numel(&l->in) * 4));
        set = 0;
    }
    return (set ? OPS(p)->batchnorm_backward_set : OPS(p)->batchnorm_backward)(
        p->be, p->n, B->features, B->inner, dx, p->grads + B->gamma, p->grads + B->beta, dy, x,
        p->params + B->gamma, (const float *)(p->act + B->save_mean),
        (const float *)(p->act + B->save_invstd));
}

static int bn_backward(dl_layer *l, dl_pass *p, const float *x, const float *y, const float *dy,
                       float *dx)
{
    return bn_grads(l, p, x, dy, dx, 0);
}

static int bn_backward_set(dl_layer *l, dl_pass *p, const float *x, const float *y, const float *dy,
                           float *dx)
{
    return bn_grads(l, p, x, dy, dx, 1);
}

static const dl_layer_vt bn_vt;

/* ReLU absorbs the BatchNorm before it where the backend has the fused
 * pair: the normalised x is never written, and the backward recomputes
 * the ReLU's mask from x instead of reading it. */
static int bn_relu_fuses(const dl_layer *relu, const dl_layer *bn, const dl_pass *p)
{
    return bn->vt == &bn_vt && OPS(p)->batchnorm_relu_forward &&
           OPS(p)->batchnorm_relu_backward_set;
}

static int bn_relu_forward(dl_layer *relu, dl_layer *bn, dl_pass *p, const float *x, float *y)
{
    batchnorm *B = (batchnorm *)bn;
    DL_TRY(bn_check_batch(bn, p));
    if (bn->blk_in)
        return bn_blocked_forward(B, p, x, y, 1);
    return OPS(p)->batchnorm_relu_forward(p->be, p->training, p->n, B->features, B->inner,
                                          B->momentum, B->eps, y, x, p->params + B->gamma,
                                          p->params + B->beta, p->buffers + B->run_mean,
                                          p->buffers + B->run_var, (float *)(p->act + B->save_mean),
                                          (float *)(p->act + B->save_invstd));
}

static int bn_relu_backward(dl_layer *relu, dl_layer *bn, dl_pass *p, const float *x,
                            const float *y, const float *dy, float *dx)
{
    batchnorm *B = (batchnorm *)bn;
    if (!p->training)
        return dl_error(DL_EINVAL, "%s: backward through BatchNorm in eval mode", bn->name);
    if (!dx) /* the parameter gradients are still wanted */
        dx = (float *)(p->act + B->dx_scratch);
    if (bn->blk_in)
        return bn_blocked_backward(B, p, x, dy, dx, 1, 1);
    return OPS(p)->batchnorm_relu_backward_set(
        p->be, p->n, B->features, B->inner, dx, p->grads + B->gamma, p->grads + B->beta, dy, x,
        p->params + B->gamma, p->params + B->beta, (const float *)(p->act + B->save_mean),
        (const float *)(p->act + B->save_invstd));
}

static void bn_describe(const dl_layer *l, char *buf, size_t size)
{
    const batchnorm *B = (const batchnorm *)l;
    snprintf(buf, size, "BatchNorm(%d)", B->features);
}

static void bn_config(const dl_layer *l, dl_layer_config *c)
{
    c->in = ((const batchnorm *)l)->features;
    c->eps = ((const batchnorm *)l)->eps;
}

static const dl_layer_vt bn_vt = {
    .kind = "BatchNorm",
    .setup = bn_setup,
    .plan = bn_plan,
    .forward = bn_forward,
    .backward = bn_backward,
    .backward_set = bn_backward_set,
    .describe = bn_describe,
    .config = bn_config,
    .blocks = bn_blocks,
};

dl_layer *dl_nn_batchnorm(int features, float eps, float momentum)
{
    if (features < 1 || !(eps > 0) || !(momentum >= 0 && momentum <= 1)) {
        dl_error(DL_EINVAL,
                 "BatchNorm(%d, eps=%g, momentum=%g): features must be positive, "
                 "eps > 0, momentum in [0, 1]",
                 features, (double)eps, (double)momentum);
        return NULL;
    }
    batchnorm *B = dl_layer_new(sizeof *B, &bn_vt);
    if (B) {
        B->features = features;
        B->eps = eps;
        B->momentum = momentum;
    }
    return (dl_layer *)B;
}

/* --- LayerNorm --------------------------------------------------------------- */

typedef struct {
    dl_layer base;
    int features;
    float eps;
    int rows_per_sample;
    size_t gamma, beta, save_mean, save_invstd;
    size_t dx_scratch;
} layernorm;

static int ln_setup(dl_layer *l, dl_model *m, const dl_shape *in, dl_shape *out)
{
    layernorm *N = (layernorm *)l;
    if (in->ndim < 1 || in->dim[in->ndim - 1] != N->features) {
        char e[64];
        snprintf(e, sizeof e, "%d features in its last dimension", N->features);
        return dl_layer_shape_error(l, in, e);
    }
    N->rows_per_sample = (int)(numel(in) / (size_t)N->features);
    dl_shape s = {1, {N->features}};
    N->gamma = dl_model_add_param(m, l, "weight", &s, DL_INIT_ONE, 0, 0);
    N->beta = dl_model_add_param(m, l, "bias", &s, DL_INIT_ZERO, 0, 0);
    *out = *in;
    l->flops = 5.0 * (double)numel(in);
    return DL_OK;
}

static int ln_plan(dl_layer *l, dl_model *m, int n)
{
    layernorm *N = (layernorm *)l;
    size_t rows = (size_t)n * (size_t)N->rows_per_sample;
    N->save_mean = dl_model_reserve(m, 0, rows * 4);
    N->save_invstd = dl_model_reserve(m, 0, rows * 4);
    N->dx_scratch = dl_model_reserve(m, 0, (size_t)n * numel(&l->in) * 4);
    return DL_OK;
}

static int ln_forward(dl_layer *l, dl_pass *p, const float *x, float *y)
{
    layernorm *N = (layernorm *)l;
    return OPS(p)->layernorm_forward(
        p->be, p->n * N->rows_per_sample, N->features, N->eps, y, x, p->params + N->gamma,
        p->params + N->beta, (float *)(p->act + N->save_mean), (float *)(p->act + N->save_invstd));
}

static int ln_backward(dl_layer *l, dl_pass *p, const float *x, const float *y, const float *dy,
                       float *dx)
{
    layernorm *N = (layernorm *)l;
    if (!dx) { /* first in the model: the backend still wants a dx */
        dx = (float *)(p->act + N->dx_scratch);
        DL_TRY(OPS(p)->memset0(p->be, dx, (size_t)p->n * numel(&l->in) * 4));
    }
    return OPS(p)->layernorm_backward(p->be, p->n * N->rows_per_sample, N->features, dx,
                                      p->grads + N->gamma, p->grads + N->beta, dy, x,
                                      p->params + N->gamma, (const float *)(p->act + N->save_mean),
                                      (const float *)(p->act + N->save_invstd));
}

static void ln_describe(const dl_layer *l, char *buf, size_t size)
{
    snprintf(buf, size, "LayerNorm(%d)", ((const layernorm *)l)->features);
}

static void ln_config(const dl_layer *l, dl_layer_config *c)
{
    c->in = ((const layernorm *)l)->features;
    c->eps = ((const layernorm *)l)->eps;
}

static const dl_layer_vt ln_vt = {
    .kind = "LayerNorm",
    .setup = ln_setup,
    .plan = ln_plan,
    .forward = ln_forward,
    .backward = ln_backward,
    .describe = ln_describe,
    .config = ln_config,
};

dl_layer *dl_nn_layernorm(int features, float eps)
{
    if (features < 1 || !(eps > 0)) {
        dl_error(DL_EINVAL, "LayerNorm(%d, eps=%g): features must be positive, eps > 0", features,
                 (double)eps);
        return NULL;
    }
    layernorm *N = dl_layer_new(sizeof *N, &ln_vt);
    if (N) {
        N->features = features;
        N->eps = eps;
    }
    return (dl_layer *)N;
}

/* --- Flatten ----------------------------------------------------------------- */

static int flatten_setup(dl_layer *l, dl_model *m, const dl_shape *in, dl_shape *out)
{
    *out = (dl_shape){1, {(int64_t)numel(in)}};
    return DL_OK;
}

static const dl_layer_vt flatten_vt;

/* y = x, the same layout (Identity, and Flatten on NCHW) */
static int copy_forward(dl_layer *l, dl_pass *p, const float *x, float *y)
{
    return OPS(p)->copy(p->be, y, x, (size_t)p->n * numel(&l->in) * sizeof(float));
}

/* x in channel blocks (the layout plan's, Flatten only): y is NCHW, so
 * the layer that ends a stack of blocked layers (a max pooling before
 * the classifier) keeps them, instead of the whole stack going plain. */
static int flatten_forward(dl_layer *l, dl_pass *p, const float *x, float *y)
{
    if (l->blk_in)
        return OPS(p)->blocks_to_plain(p->be, l->blk_in, p->n, (int)l->in.dim[0],
                                       (size_t)(numel(&l->in) / (size_t)l->in.dim[0]), y, x);
    return copy_forward(l, p, x, y);
}

/* dx (+)= dy in the same layout (Identity), or from NCHW into x's blocks. */
static int flatten_grads(dl_layer *l, dl_pass *p, const float *dy, float *dx, int set)
{
    if (!dx)
        return DL_OK;
    if (l->blk_in && l->vt == &flatten_vt)
        return OPS(p)->plain_to_blocks(p->be, l->blk_in, !set, p->n, (int)l->in.dim[0],
                                       (size_t)(numel(&l->in) / (size_t)l->in.dim[0]), dx, dy);
    if (set)
        return OPS(p)->copy(p->be, dx, dy, (size_t)p->n * numel(&l->in) * sizeof(float));
    return OPS(p)->axpy(p->be, dx, 1.0f, dy, (size_t)p->n * numel(&l->in));
}

static int flatten_backward(dl_layer *l, dl_pass *p, const float *x, const float *y,
                            const float *dy, float *dx)
{
    return flatten_grads(l, p, dy, dx, 0);
}

static int flatten_backward_set(dl_layer *l, dl_pass *p, const float *x, const float *y,
                                const float *dy, float *dx)
{
    return flatten_grads(l, p, dy, dx, 1);
}

static int blockable(const dl_shape *s, int blk);

static int flatten_blocks(const dl_layer *l, const dl_pass *p, int blk)
{
    return OPS(p)->blocks_to_plain && OPS(p)->plain_to_blocks && blockable(&l->in, blk)
               ? DL_BLOCK_IN
               : 0;
}

static const dl_layer_vt flatten_vt = {
    .kind = "Flatten",
    .setup = flatten_setup,
    .plan = no_plan,
    .forward = flatten_forward,
    .backward = flatten_backward,
    .backward_set = flatten_backward_set,
    .blocks = flatten_blocks,
};

dl_layer *dl_nn_flatten(void) { return dl_layer_new(sizeof(dl_layer), &flatten_vt); }

/* --- Identity ---------------------------------------------------------------- */
/* y = x for any shape: the Flatten passes without the reshape. */

static int identity_setup(dl_layer *l, dl_model *m, const dl_shape *in, dl_shape *out)
{
    *out = *in;
    return DL_OK;
}

static const dl_layer_vt identity_vt = {
    .kind = "Identity",
    .setup = identity_setup,
    .plan = no_plan,
    .forward = copy_forward,
    .backward = flatten_backward,
    .backward_set = flatten_backward_set,
    .blocks = elementwise_blocks,
};

dl_layer *dl_nn_identity(void) { return dl_layer_new(sizeof(dl_layer), &identity_vt); }

/* --- Embedding --------------------------------------------------------------- */
/* x [t] of integral indices (as f32) -> y [t, dim]. */

typedef struct {
    dl_layer base;
    int vocab, dim, tokens;
    size_t table;
} embedding;

static int emb_setup(dl_layer *l, dl_model *m, const dl_shape *in, dl_shape *out)
{
    embedding *E = (embedding *)l;
    if (in->ndim != 1)
        return dl_layer_shape_error(l, in, "a 1-d sequence of token indices");
    E->tokens = (int)in->dim[0];
    *out = (dl_shape){2, {in->dim[0], E->dim}};
    dl_shape s = {2, {E->vocab, E->dim}};
    E->table = dl_model_add_param(m, l, "weight", &s, DL_INIT_NORMAL, 1.0f, 1);
    return DL_OK;
}

static int emb_forward(dl_layer *l, dl_pass *p, const float *x, float *y)
{
    embedding *E = (embedding *)l;
    int rc = OPS(p)->embedding_forward(p->be, p->n * E->tokens, E->vocab, E->dim, y, x,
                                       p->params + E->table);
    if (rc < 0) /* a token id out of range: name the layer */
        return dl_error(rc, "%s (Embedding(%d, %d)): %s", l->name, E->vocab, E->dim,
                        dl_error_message());
    return DL_OK;
}

static int emb_backward(dl_layer *l, dl_pass *p, const float *x, const float *y, const float *dy,
                        float *dx)
{
    embedding *E = (embedding *)l;
    /* indices carry no gradient: dx is left alone */
    return OPS(p)->embedding_backward(p->be, p->n * E->tokens, E->vocab, E->dim,
                                      p->grads + E->table, x, dy);
}

static void emb_describe(const dl_layer *l, char *buf, size_t size)
{
    const embedding *E = (const embedding *)l;
    snprintf(buf, size, "Embedding(%d, %d)", E->vocab, E->dim);
}

static void emb_config(const dl_layer *l, dl_layer_config *c)
{
    c->in = ((const embedding *)l)->vocab;
    c->out = ((const embedding *)l)->dim;
}

static const dl_layer_vt emb_vt = {
    .kind = "Embedding",
    .setup = emb_setup,
    .plan = no_plan,
    .forward = emb_forward,
    .backward = emb_backward,
    .describe = emb_describe,
    .config = emb_config,
};

dl_layer *dl_nn_embedding(int vocab, int dim)
{
    if (vocab < 1 || dim < 1) {
        dl_error(DL_EINVAL, "Embedding(%d, %d): sizes must be positive", vocab, dim);
        return NULL;
    }
    embedding *E = dl_layer_new(sizeof *E, &emb_vt);
    if (E) {
        E->vocab = vocab;
        E->dim = dim;
    }
    return (dl_layer *)E;
}
