/* attention.c - the transformer layers: MultiheadAttention (fused QKV, scaled dot-product attention, output projection) and PositionalEmbedding */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/base/error.h"
#include "engine/nn/layer_impl.h"
#include "engine/nn/nn.h"

/* --- MultiheadAttention ------------------------------------------------------ */
/* x [t, d] -> y [t, d], as PyTorch's nn.MultiheadAttention(d, heads,
 * batch_first=True)(x, x, x) with need_weights=False:
 *   qkv [t, 3d] = x W_in^T + b_in       W_in [3d, d] (in_proj_weight)
 *   ctx [t, d]  = attention(qkv)        per head, dh = d / heads columns
 *   y   [t, d]  = ctx W_out^T + b_out   W_out [d, d] (out_proj.weight)
 * Saved for backward: qkv, ctx and the per-query log-sum-exp lse [heads, t]. */

typedef struct {
    dl_layer base;
    int d, heads, causal, bias;
    int t;
    size_t w_in, b_in, w_out, b_out; /* param offsets */
    size_t qkv, ctx, lse;            /* saved activations (bytes, region 0) */
    size_t dqkv, dctx;               /* backward scratch */
    size_t lp_a, lp_b;               /* low-precision operand copies */
} mha;

static int mha_setup(dl_layer *l, dl_model *m, const dl_shape *in, dl_shape *out)
{
    mha *A = (mha *)l;
    if (in->ndim != 2 || in->dim[1] != A->d) {
        char e[64];
        snprintf(e, sizeof e, "[t, %d] (positions, features)", A->d);
        return dl_layer_shape_error(l, in, e);
    }
    A->t = (int)in->dim[0];
    *out = *in;
    int d = A->d;
    dl_shape wi = {2, {3 * d, d}}, bi = {1, {3 * d}}, wo = {2, {d, d}}, bo = {1, {d}};
    /* PyTorch: xavier_uniform_ in_proj_weight, out_proj as a Linear, zero biases */
    A->w_in = dl_model_add_param(m, l, "in_proj_weight", &wi, DL_INIT_UNIFORM_FAN_IN,
                                 sqrtf(6.0f / (float)(4 * d)), 1);
    if (A->bias)
        A->b_in = dl_model_add_param(m, l, "in_proj_bias", &bi, DL_INIT_ZERO, 0, 0);
    A->w_out = dl_model_add_param(m, l, "out_proj.weight", &wo, DL_INIT_UNIFORM_FAN_IN,
                                  1.0f / sqrtf((float)d), 1);
    if (A->bias)
        A->b_out = dl_model_add_param(m, l, "out_proj.bias", &bo, DL_INIT_ZERO, 0, 0);
    double t = A->t, pairs = A->causal ? t * (t + 1) / 2 : t * t;
    l->flops = 2.0 * t * d * 4 * d + 4.0 * pairs * d;
    return DL_OK;
}

static int mha_plan(dl_layer *l, dl_model *m, int n)
{
    mha *A = (mha *)l;
    size_t rows = (size_t)n * (size_t)A->t, d = (size_t)A->d;
    A->qkv = dl_model_reserve(m, 0, rows * 3 * d * 4);
    A->ctx = dl_model_reserve(m, 0, rows * d * 4);
    A->lse = dl_model_reserve(m, 0, rows * (size_t)A->heads * 4);
    A->dqkv = dl_model_reserve(m, 0, rows * 3 * d * 4);
    A->dctx = dl_model_reserve(m, 0, rows * d * 4);
    A->lp_a = dl_model_reserve(m, 0, rows * 3 * d * DL_LAYER_OPERAND_BYTES);
    A->lp_b = dl_model_reserve(m, 0, rows * d * DL_LAYER_OPERAND_BYTES);
    return DL_OK;
}

static float mha_scale(const mha *A) { return 1.0f / sqrtf((float)(A->d / A->heads)); }

static int mha_forward(dl_layer *l, dl_pass *p, const float *x, float *y)
{
    mha *A = (mha *)l;
    if (!OPS(p)->attention_forward || !OPS(p)->attention_backward)
        return dl_error(DL_EINVAL, "%s (MultiheadAttention): the %s backend has no attention op",
                        l->name, OPS(p)->name);
    int rows = p->n * A->t, d = A->d;
    float *qkv = (float *)(p->act + A->qkv), *ctx = (float *)(p->act + A->ctx);
    const void *xa, *ca;
    DL_TRY(dl_layer_operand(p, x, (size_t)rows * d, A->lp_b, &xa));
    DL_TRY(OPS(p)->gemm(p->be, 0, 1, rows, 3 * d, d, 1.0f, xa, d, dl_layer_weights(p, A->w_in), d,
                        p->operand, 0.0f, qkv, 3 * d));
    if (A->bias)
        DL_TRY(OPS(p)->bias_add(p->be, qkv, p->params + A->b_in, rows, 3 * d, 1));
    DL_TRY(OPS(p)->attention_forward(p->be, p->n, A->t, A->heads, d, A->causal, mha_scale(A), qkv,
                                     ctx, (float *)(p->act + A->lse)));
    DL_TRY(dl_layer_operand(p, ctx, (size_t)rows * d, A->lp_b, &ca));
    DL_TRY(OPS(p)->gemm(p->be, 0, 1, rows, d, d, 1.0f, ca, d, dl_layer_weights(p, A->w_out), d,
                        p->operand, 0.0f, y, d));
    if (A->bias)
        DL_TRY(OPS(p)->bias_add(p->be, y, p->params + A->b_out, rows, d, 1));
    return DL_OK;
}

/* dW_out [d, d] += dy^T ctx; dctx [rows, d] = dy W_out. */
static int mha_out_grads(mha *A, dl_pass *p, const float *dy, float *dctx)
{
    int rows = p->n * A->t, d = A->d;
    const void *dya, *ca;
    DL_TRY(dl_layer_operand(p, dy, (size_t)rows * d, A->lp_a, &dya));
    DL_TRY(dl_layer_operand(p, (const float *)(p->act + A->ctx), (size_t)rows * d, A->lp_b, &ca));
    DL_TRY(OPS(p)->gemm(p->be, 1, 0, d, d, rows, 1.0f, dya, d, ca, d, p->operand, 1.0f,
                        p->grads + A->w_out, d));
    if (A->bias)
        DL_TRY(OPS(p)->bias_grad(p->be, p->grads + A->b_out, dy, rows, d, 1));
    return OPS(p)->gemm(p->be, 0, 0, rows, d, d, 1.0f, dya, d, dl_layer_weights(p, A->w_out), d,
                        p->operand, 0.0f, dctx, d);
}

/* dW_in [3d, d] += dqkv^T x; dx [rows, d] (+)= dqkv W_in (dx_beta 1 or 0). */
static int mha_grads(dl_layer *l, dl_pass *p, const float *x, const float *dy, float *dx,
                     float dx_beta)
{
    mha *A = (mha *)l;
    int rows = p->n * A->t, d = A->d;
    float *dctx = (float *)(p->act + A->dctx), *dqkv = (float *)(p->act + A->dqkv);
    DL_TRY(mha_out_grads(A, p, dy, dctx));
    DL_TRY(OPS(p)->memset0(p->be, dqkv, (size_t)rows * 3 * d * sizeof(float)));
    DL_TRY(OPS(p)->attention_backward(
        p->be, p->n, A->t, A->heads, d, A->causal, mha_scale(A), (const float *)(p->act + A->qkv),
        (const float *)(p->act + A->ctx), (const float *)(p->act + A->lse), dctx, dqkv));
    const void *dqa, *xa;
    DL_TRY(dl_layer_operand(p, dqkv, (size_t)rows * 3 * d, A->lp_a, &dqa));
    DL_TRY(dl_layer_operand(p, x, (size_t)rows * d, A->lp_b, &xa));
    DL_TRY(OPS(p)->gemm(p->be, 1, 0, 3 * d, d, rows, 1.0f, dqa, 3 * d, xa, d, p->operand, 1.0f,
                        p->grads + A->w_in, d));
    if (A->bias)
        DL_TRY(OPS(p)->bias_grad(p->be, p->grads + A->b_in, dqkv, rows, 3 * d, 1));
    if (dx)
        DL_TRY(OPS(p)->gemm(p->be, 0, 0, rows, d, 3 * d, 1.0f, dqa, 3 * d,
                            dl_layer_weights(p, A->w_in), d, p->operand, dx_beta, dx, d));
    return DL_OK;
}

static int mha_backward(dl_layer *l, dl_pass *p, const float *x, const float *y, const float *dy,
                        float *dx)
{
    return mha_grads(l, p, x, dy, dx, 1.0f);
}

static int mha_backward_set(dl_layer *l, dl_pass *p, const float *x, const float *y,
                            const float *dy, float *dx)
{
    return mha_grads(l, p, x, dy, dx, 0.0f);
}

static void mha_describe(const dl_layer *l, char *buf, size_t size)
{
    const mha *A = (const mha *)l;
    snprintf(buf, size, "MultiheadAttention(%d, %d%s%s)", A->d, A->heads,
             A->causal ? ", causal" : "", A->bias ? "" : ", bias=false");
}

static void mha_config(const dl_layer *l, dl_layer_config *c)
{
    const mha *A = (const mha *)l;
    c->in = A->d;
    c->heads = A->heads;
    c->causal = A->causal;
    c->bias = A->bias;
}

static const dl_layer_vt mha_vt = {
    .kind = "MultiheadAttention",
    .setup = mha_setup,
    .plan = mha_plan,
    .forward = mha_forward,
    .backward = mha_backward,
    .describe = mha_describe,
    .backward_set = mha_backward_set,
    .config = mha_config,
};

dl_layer *dl_nn_multihead_attention(int d_model, int heads, int causal, float dropout, int bias)
{
    if (d_model < 1 || heads < 1 || d_model % heads) {
        dl_error(DL_EINVAL,
                 "MultiheadAttention(%d, %d): heads must be positive and divide d_model "
                 "(%d %% %d = %d)",
                 d_model, heads, d_model, heads > 0 ? heads : 1,
                 heads > 0 ? d_model % heads : d_model);
        return NULL;
    }
    if (dropout != 0) {
        dl_error(DL_EINVAL,
                 "MultiheadAttention(%d, %d): dropout = %g on the attention weights is not "
                 "supported yet (use 0, and a Dropout layer after the block)",
                 d_model, heads, (double)dropout);
        return NULL;
    }
    mha *A = dl_layer_new(sizeof *A, &mha_vt);
    if (A) {
        A->d = d_model;
        A->heads = heads;
        A->causal = causal != 0;
        A->bias = bias != 0;
    }
    return (dl_layer *)A;
}

/* --- PositionalEmbedding ----------------------------------------------------- */
/* x [t, d] -> y [t, d] = x + P[0..t), P [max_len, d] learned. */

typedef struct {
    dl_layer base;
    int max_len, d, t;
    size_t table;
} posemb;

static int pos_setup(dl_layer *l, dl_model *m, const dl_shape *in, dl_shape *out)
{
    posemb *P = (posemb *)l;
    char e[96];
    snprintf(e, sizeof e, "[t, %d] (positions, features) with t <= max_len %d", P->d, P->max_len);
    if (in->ndim != 2 || in->dim[1] != P->d || in->dim[0] < 1 || in->dim[0] > P->max_len)
        return dl_layer_shape_error(l, in, e);
    P->t = (int)in->dim[0];
    *out = *in;
    dl_shape s = {2, {P->max_len, P->d}};
    P->table = dl_model_add_param(m, l, "weight", &s, DL_INIT_NORMAL, 0.02f, 1);
    l->flops = (double)P->t * P->d;
    return DL_OK;
}

static int pos_plan(dl_layer *l, dl_model *m, int n) { return DL_OK; }

static int pos_forward(dl_layer *l, dl_pass *p, const float *x, float *y)
{
    posemb *P = (posemb *)l;
    int plane = P->t * P->d; /* P's first t rows, as one bias of t * d values */
    DL_TRY(OPS(p)->copy(p->be, y, x, (size_t)p->n * plane * sizeof(float)));
    return OPS(p)->bias_add(p->be, y, p->params + P->table, p->n, plane, 1);
}

/* dP[0..t) += sum over samples of dy; dx (+)= dy. */
static int pos_grads(dl_layer *l, dl_pass *p, const float *dy, float *dx, int set)
{
    posemb *P = (posemb *)l;
    int plane = P->t * P->d;
    size_t count = (size_t)p->n * plane;
    DL_TRY(OPS(p)->bias_grad(p->be, p->grads + P->table, dy, p->n, plane, 1));
    if (!dx)
        return DL_OK;
    return set ? OPS(p)->copy(p->be, dx, dy, count * sizeof(float))
               : OPS(p)->axpy(p->be, dx, 1.0f, dy, count);
}

static int pos_backward(dl_layer *l, dl_pass *p, const float *x, const float *y, const float *dy,
                        float *dx)
{
    return pos_grads(l, p, dy, dx, 0);
}

static int pos_backward_set(dl_layer *l, dl_pass *p, const float *x, const float *y,
                            const float *dy, float *dx)
{
    return pos_grads(l, p, dy, dx, 1);
}

static void pos_describe(const dl_layer *l, char *buf, size_t size)
{
    const posemb *P = (const posemb *)l;
    snprintf(buf, size, "PositionalEmbedding(%d, %d)", P->max_len, P->d);
}

static void pos_config(const dl_layer *l, dl_layer_config *c)
{
    c->in = ((const posemb *)l)->max_len;
    c->out = ((const posemb *)l)->d;
}

static const dl_layer_vt pos_vt = {
    .kind = "PositionalEmbedding",
    .setup = pos_setup,
    .plan = pos_plan,
    .forward = pos_forward,
    .backward = pos_backward,
    .describe = pos_describe,
    .backward_set = pos_backward_set,
    .config = pos_config,
};

dl_layer *dl_nn_positional_embedding(int max_len, int dim)
{
    if (max_len < 1 || dim < 1) {
        dl_error(DL_EINVAL, "PositionalEmbedding(%d, %d): sizes must be positive", max_len, dim);
        return NULL;
    }
    posemb *P = dl_layer_new(sizeof *P, &pos_vt);
    if (P) {
        P->max_len = max_len;
        P->d = dim;
    }
    return (dl_layer *)P;
}
