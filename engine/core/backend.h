/* backend.h - the compute backend interface shared by the CPU and CUDA backends
 *
 * A backend is a const table of function pointers plus a context. Layers
 * and optimizers call only through it, so a model runs unchanged on either
 * device. All pointers handed to an op are device pointers of that backend
 * (host pointers for the CPU backend) unless the name says host. Every op
 * returns DL_OK or a negative code with dl_error() set. Ops may run
 * asynchronously on a device; sync() waits for them.
 *
 * Conventions (as in llm.c): row-major; activations are [n, features] or
 * [n, c, h, w]; backward ops ACCUMULATE into dx and into parameter
 * gradients (+=), so callers zero gradient buffers once per step.
 */
#ifndef DL_BACKEND_H
#define DL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "engine/core/tensor.h"

/* Bumped whenever the table below changes; a CUDA module built against
 * another version is refused. */
#define DL_BACKEND_API_VERSION 13

typedef enum { DL_DEVICE_CPU = 0, DL_DEVICE_CUDA = 1 } dl_device;

/* SILU is x * sigmoid(x). */
typedef enum { DL_ACT_RELU, DL_ACT_GELU, DL_ACT_TANH, DL_ACT_SIGMOID, DL_ACT_SILU } dl_act;

typedef enum { DL_POOL_MAX, DL_POOL_AVG } dl_pool_kind;

/* Convolution of x [n, c, h, w] with w [k, c/groups, r, s] -> y [n, k, p, q]:
 * output channel kk sees only the input channels of its group, g = kk /
 * (k/groups), channels [g*c/groups, (g+1)*c/groups). A kernel tap (kr, ks)
 * reads input row oh*stride - pad + kr*dilation (columns likewise), so
 * p = (h + 2*pad - dilation*(r-1) - 1) / stride + 1. groups and dilation
 * 0 mean 1 (descriptors written before they existed). */
typedef struct dl_conv_desc {
    int n, c, h, w;  /* input */
    int k, r, s;     /* output channels, kernel height, width */
    int stride, pad; /* same in both directions */
    int p, q;        /* output height, width */
    int groups;      /* c and k divisible by it; 0 or 1: dense */
    int dilation;    /* 0 or 1: adjacent taps */
    /* x (and dx), y (and dy) in channel blocks: [n, c / blk, h, w, blk]
     * (oneDNN's nChw16c, nChw8c) for blk > 0, else [n, c, h, w]; only
     * where the backend's conv_blocks allows it (0 everywhere else). */
    int x_blk, y_blk;
    /* DL_CONV_*_ROUNDED bits: operands that already hold values of the
     * compute type (a producer wrote them rounded), which a backend that
     * rounds operands for emulated low precision may take as they are.
     * The results are the same either way. */
    int rounded;
} dl_conv_desc;

#define DL_CONV_X_ROUNDED 1
#define DL_CONV_DY_ROUNDED 2

/* The blocked BatchNorm ops' relu argument (see activation_blocks). */
#define DL_BN_RELU 1
#define DL_BN_ROUND_BF16 2
#define DL_BN_ROUND_F16 4

/* The effective groups and dilation of d (0 read as 1). */
static inline int dl_conv_groups(const dl_conv_desc *d) { return d->groups > 1 ? d->groups : 1; }
static inline int dl_conv_dilation(const dl_conv_desc *d)
{
    return d->dilation > 1 ? d->dilation : 1;
}

/* Pooling of x [n, c, h, w] -> y [n, c, p, q] with a square window. */
typedef struct dl_pool_desc {
    int n, c, h, w;
    int size, stride, pad;
    int p, q;
    int blk; /* x and y in channel blocks (dl_conv_desc's x_blk; adaptive pooling: x only) */
} dl_pool_desc;

/* Opaque per-op timing event (CUDA events on the GPU, a clock on the CPU). */
typedef struct dl_event dl_event;

typedef struct dl_backend_ops {
    int api_version;
    const char *name; /* "cpu", "cuda" */
    dl_device device;

    /* --- memory ------------------------------------------------------ */
    /* Device memory; NULL and dl_error() on failure (the message gives the
     * size asked and, on a GPU, the memory free). */
    void *(*alloc)(dl_backend *be, size_t bytes);
    void (*free)(dl_backend *be, void *p); /* accepts NULL */
    /* Host memory suited to fast transfers (pinned on CUDA). */
    void *(*host_alloc)(dl_backend *be, size_t bytes);
    void (*host_free)(dl_backend *be, void *p);
    int (*to_device)(dl_backend *be, void *dst, const void *host_src, size_t bytes);
    int (*to_host)(dl_backend *be, void *host_dst, const void *src, size_t bytes);
    int (*copy)(dl_backend *be, void *dst, const void *src, size_t bytes);
    int (*memset0)(dl_backend *be, void *dst, size_t bytes);
    int (*fill)(dl_backend *be, float *dst, float value, size_t n);
    int (*sync)(dl_backend *be);

    /* --- matrix products --------------------------------------------- */
    /* C[m,n] = alpha * op(A) * op(B) + beta * C, row-major, f32 C and f32
     * accumulation; A and B are both of dtype ab (f32, bf16 or f16).
     * op(A) is [m,k]: A is [m,k] (lda >= k) or, transposed, [k,m]. */
    int (*gemm)(dl_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                const void *a, int lda, const void *b, int ldb, dl_dtype ab, float beta, float *c,
                int ldc);

    /* --- conversions ------------------------------------------------- */
    /* dst[i] = (dst_type) src[i]; f32 <-> bf16/f16 round to nearest even. */
    int (*cast)(dl_backend *be, void *dst, dl_dtype dst_type, const void *src, dl_dtype src_type,
                size_t n);
    /* dst[i] = src[i] rounded through a low-precision type and back to
     * f32 (cast's rounding); dst == src rounds in place. */
    int (*round_through)(dl_backend *be, float *dst, const float *src, dl_dtype via, size_t n);
    /* Input batch conversion: dst = (src * scale - mean[ch]) / std[ch] for
     * src of dtype src_type (u8, f32 or i32) laid out [rows, channels,
     * plane]. mean/std are host arrays of `channels` values or NULL. */
    int (*input_to_f32)(dl_backend *be, float *dst, const void *src, dl_dtype src_type, size_t rows,
                        int channels, size_t plane, float scale, const float *mean,
                        const float *std);

    /* --- elementwise ------------------------------------------------- */
    /* y[r, c, i] += b[c] for y [rows, cols, inner]. */
    int (*bias_add)(dl_backend *be, float *y, const float *b, int rows, int cols, int inner);
    /* db[c] += sum over r, i of dy[r, c, i]. */
    int (*bias_grad)(dl_backend *be, float *db, const float *dy, int rows, int cols, int inner);
    /* y = act(x). */
    int (*act_forward)(dl_backend *be, dl_act kind, float *y, const float *x, size_t n);
    /* dx += act'(x) * dy (y is act(x), for kinds cheaper from it). */
    int (*act_backward)(dl_backend *be, dl_act kind, float *dx, const float *x, const float *y,
                        const float *dy, size_t n);
    /* y = a + b. */
    int (*add)(dl_backend *be, float *y, const float *a, const float *b, size_t n);
    /* y += alpha * x. */
    int (*axpy)(dl_backend *be, float *y, float alpha, const float *x, size_t n);
    /* x *= alpha. */
    int (*scale)(dl_backend *be, float *x, float alpha, size_t n);
    /* Inverted dropout with the counter RNG: element i is kept when
     * uniform(seed, stream, counter, i) >= p, then scaled by 1/(1-p). The
     * mask is recomputed in backward, never stored. */
    int (*dropout_forward)(dl_backend *be, float *y, const float *x, size_t n, float p,
                           uint64_t seed, uint64_t stream, uint64_t counter);
    int (*dropout_backward)(dl_backend *be, float *dx, const float *dy, size_t n, float p,
                            uint64_t seed, uint64_t stream, uint64_t counter);

    /* --- convolution and pooling ------------------------------------- */
    /* Bytes of scratch the conv ops below need for d computed in compute
     * (0 allowed). The figure belongs to this backend and this d (batch
     * size included): it is asked again after a move and for a shorter
     * batch. */
    size_t (*conv_workspace)(dl_backend *be, const dl_conv_desc *d, dl_dtype compute);
    /* Each conv op is handed ws, ws_bytes bytes of scratch of this
     * backend. When ws_bytes is less than conv_workspace(d, compute) the
     * op fails with DL_EINVAL naming both sizes and writes nothing; ws NULL
     * (ws_bytes 0) lets a backend use scratch of its own where it keeps
     * one (CUDA), otherwise the same error. */
    /* y = conv(x, w) + b (b may be NULL). compute is f32, bf16 or f16: the
     * operand precision of the products. */
    int (*conv_forward)(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                        const float *w, const float *b, void *ws, size_t ws_bytes,
                        dl_dtype compute);
    /* dx += conv_transpose(dy, w). */
    int (*conv_backward_data)(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                              const float *w, void *ws, size_t ws_bytes, dl_dtype compute);
    /* dw += correlation of x and dy; db += sum of dy (db may be NULL). */
    int (*conv_backward_filter)(dl_backend *be, const dl_conv_desc *d, float *dw, float *db,
                                const float *dy, const float *x, void *ws, size_t ws_bytes,
                                dl_dtype compute);
    int (*pool_forward)(dl_backend *be, dl_pool_kind kind, const dl_pool_desc *d, float *y,
                        const float *x);
    /* dx += pool'(dy); max pooling routes to the first maximum, found again
     * by comparing x with y. */
    int (*pool_backward)(dl_backend *be, dl_pool_kind kind, const dl_pool_desc *d, float *dx,
                         const float *dy, const float *x, const float *y);

    /* --- normalisation ----------------------------------------------- */
    /* BatchNorm over x [n, c, inner] per channel. Training: batch
     * statistics, saves mean and 1/sqrt(var+eps) to save_mean/save_invstd,
     * updates running stats with momentum (PyTorch convention, unbiased
     * running variance). Eval: uses the running stats. */
    int (*batchnorm_forward)(dl_backend *be, int training, int n, int c, int inner, float momentum,
                             float eps, float *y, const float *x, const float *gamma,
                             const float *beta, float *running_mean, float *running_var,
                             float *save_mean, float *save_invstd);
    /* Training-mode backward: dx, dgamma, dbeta all accumulate. */
    int (*batchnorm_backward)(dl_backend *be, int n, int c, int inner, float *dx, float *dgamma,
                              float *dbeta, const float *dy, const float *x, const float *gamma,
                              const float *save_mean, const float *save_invstd);
    /* LayerNorm over the last dimension of x [rows, cols]. */
    int (*layernorm_forward)(dl_backend *be, int rows, int cols, float eps, float *y,
                             const float *x, const float *gamma, const float *beta,
                             float *save_mean, float *save_invstd);
    int (*layernorm_backward)(dl_backend *be, int rows, int cols, float *dx, float *dgamma,
                              float *dbeta, const float *dy, const float *x, const float *gamma,
                              const float *save_mean, const float *save_invstd);

    /* --- embedding --------------------------------------------------- */
    /* y[i, :] = table[idx[i], :]; idx holds integral values stored as f32.
     * Out-of-range indices are an error. */
    int (*embedding_forward)(dl_backend *be, int n, int vocab, int dim, float *y, const float *idx,
                             const float *table);
    int (*embedding_backward)(dl_backend *be, int n, int vocab, int dim, float *dtable,
                              const float *idx, const float *dy);

    /* --- losses (fused forward + backward) ----------------------------- */
    /* Softmax cross-entropy over logits [rows, classes] with integer labels
     * and label smoothing. Adds the summed loss to stats[0] and the number
     * of correct argmax predictions to stats[1] (device floats), and
     * dlogits += grad_scale * d(loss_row)/dlogits (dlogits may be NULL). */
    int (*softmax_xent)(dl_backend *be, int rows, int classes, const float *logits,
                        const int32_t *labels, float smoothing, float grad_scale, float *dlogits,
                        float *stats);
    /* Mean-squared error per element: stats[0] += sum (p - t)^2,
     * dpred += grad_scale * 2 (p - t). */
    int (*mse)(dl_backend *be, size_t n, const float *pred, const float *target, float grad_scale,
               float *dpred, float *stats);
    /* Binary cross-entropy with logits: stats[0] += sum loss, stats[1] +=
     * count of (logit > 0) == (target > 0.5), dlogits += grad_scale *
     * (sigmoid(z) - t). */
    int (*bce_logits)(dl_backend *be, size_t n, const float *logits, const float *target,
                      float grad_scale, float *dlogits, float *stats);

    /* --- optimizers (fused over flat arrays; each zeroes g afterwards) --- */
    /* g' = g * grad_scale + wd * w; m = momentum * m + g'; step d = nesterov
     * ? g' + momentum * m : m (d = g' when momentum == 0); w -= lr * d. */
    int (*sgd_update)(dl_backend *be, size_t n, float *w, float *g, float *m, float lr,
                      float momentum, float wd, int nesterov, float grad_scale);
    /* Adam (decoupled == 0: wd added to the gradient) or AdamW
     * (decoupled: w -= lr * wd * w). step counts from 1. */
    int (*adam_update)(dl_backend *be, size_t n, float *w, float *g, float *m, float *v, float lr,
                       float beta1, float beta2, float eps, float wd, int decoupled, long step,
                       float grad_scale);
    /* *host_result = sum of x[i]^2 in double (Inf or NaN if any x is). */
    int (*sumsq)(dl_backend *be, const float *x, size_t n, double *host_result);

    /* --- timing (optional: NULL slots mean "not supported") ------------- */
    dl_event *(*event_create)(dl_backend *be);
    void (*event_destroy)(dl_backend *be, dl_event *ev);
    int (*event_record)(dl_backend *be, dl_event *ev);
    /* Milliseconds between two recorded events (waits for the later). */
    int (*event_elapsed)(dl_backend *be, dl_event *start, dl_event *stop, float *ms);

    /* Releases the context. */
    void (*destroy)(dl_backend *be);

    /* --- optional fused ops (NULL: the layers run the plain ops) ------- */
    /* y = max pooling of relu(x): the same values as act_forward(RELU)
     * then pool_forward(MAX), without writing relu(x). */
    int (*relu_maxpool_forward)(dl_backend *be, const dl_pool_desc *d, float *y, const float *x);
    /* The gradient of that y with respect to x, WRITTEN over all of dx
     * (not accumulated): each dy goes to the first cell whose relu(x)
     * equals y, when that x > 0; every other cell gets 0. Bit-identical
     * to pool_backward then act_backward into a zeroed dx. */
    int (*relu_maxpool_backward)(dl_backend *be, const dl_pool_desc *d, float *dx, const float *dy,
                                 const float *x, const float *y);

    /* Optional: frees the memory the backend keeps cached between ops
     * (scratch, operand copies, convolution workspaces), taken again on
     * next use. The trainer calls it on the device a training leaves. */
    void (*trim)(dl_backend *be);

    /* Optional: adaptive average pooling of x [n, c, h, w] -> y [n, c, p, q]
     * (d->size, stride and pad unused): output (i, j) is the mean over
     * rows [floor(i*h/p), ceil((i+1)*h/p)) and columns [floor(j*w/q),
     * ceil((j+1)*w/q)), as PyTorch's AdaptiveAvgPool2d; p = q = 1 is global
     * average pooling. NULL: AdaptiveAvgPool2d reports the backend lacks it. */
    int (*adaptive_avgpool_forward)(dl_backend *be, const dl_pool_desc *d, float *y,
                                    const float *x);
    /* dx [n, c, h, w] += the share of dy [n, c, p, q] of each window that
     * holds the input cell (dy / window area, summed over windows). */
    int (*adaptive_avgpool_backward)(dl_backend *be, const dl_pool_desc *d, float *dx,
                                     const float *dy);
    /* --- optional: attention and per-token losses (NULL: the layer or
     * loss that needs one fails naming it) ----------------------------- */
    /* Scaled dot-product attention of every (sample, head) of qkv
     * [n, t, 3 * d] (queries in columns [0, d), keys [d, 2d), values
     * [2d, 3d); head h takes the dh = d / heads columns h * dh of each):
     * o [n, t, d] = softmax(scale * q k^T (+ causal mask)) v, head h in
     * columns h * dh; lse [n, heads, t] gets each query's log-sum-exp of
     * its scaled scores, for the backward. causal: query i sees keys 0..i.
     * The T x T scores are never stored whole. */
    int (*attention_forward)(dl_backend *be, int n, int t, int heads, int d, int causal,
                             float scale, const float *qkv, float *o, float *lse);
    /* dqkv [n, t, 3d] += the gradient of that o for the output gradient
     * do_ [n, t, d], recomputing the scores from qkv and lse. */
    int (*attention_backward)(dl_backend *be, int n, int t, int heads, int d, int causal,
                              float scale, const float *qkv, const float *o, const float *lse,
                              const float *do_, float *dqkv);
    /* Softmax cross-entropy over logits [rows, classes] (rows = tokens)
     * with integer labels, where rows labelled ignore_index count for
     * nothing. With c the number of rows kept: stats[0] += summed loss of
     * the kept rows, stats[1] += their correct argmax predictions, stats[2]
     * += c (device floats); dlogits += grad_scale / max(c, 1) *
     * d(summed loss)/dlogits, the gradient of grad_scale times the mean
     * over kept rows (dlogits may be NULL; ignored rows are untouched).
     * A kept label outside [0, classes) is an error. */
    int (*softmax_xent_tokens)(dl_backend *be, int rows, int classes, const float *logits,
                               const int32_t *labels, int ignore_index, float smoothing,
                               float grad_scale, float *dlogits, float *stats);

    /* Optional: writes into buf the algorithms the conv ops use for (d,
     * compute), e.g. "fwd IMPLICIT_PRECOMP_GEMM, data ALGO_1, filter
     * ALGO_1" (choosing them first if d is new); NULL: the backend has one
     * way, named by nothing. Returns DL_OK or the error of the choice. */
    int (*conv_algo)(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, char *buf,
                     size_t size);

    /* --- optional: the step's gradient check on the device (all three or
     * none; NULL: the trainer reads the norm back with sumsq) ------------ */
    /* cells: 4 device floats. With norm = sqrt(sum of g[i]^2 in double) *
     * grad_scale: finite, cells[0] = norm, cells[1] = the clip factor f =
     * max_norm / norm (as a float, computed in double) when max_norm > 0
     * and norm > max_norm, else 1, g *= f (in place, as scale does), and
     * cells[2] = 0; not finite, cells[0] and g are left, cells[1] = 0,
     * cells[2] = 1 and cells[3] += 1 (the skips since the host last
     * cleared it). Nothing waits for the device. */
    int (*grad_guard)(dl_backend *be, float *g, size_t n, float grad_scale, float max_norm,
                      float *cells);
    /* sgd_update and adam_update, skipped (only g zeroed) when cells[2] of
     * a grad_guard is set. */
    int (*sgd_update_guarded)(dl_backend *be, size_t n, float *w, float *g, float *m, float lr,
                              float momentum, float wd, int nesterov, float grad_scale,
                              const float *cells);
    int (*adam_update_guarded)(dl_backend *be, size_t n, float *w, float *g, float *m, float *v,
                               float lr, float beta1, float beta2, float eps, float wd,
                               int decoupled, long step, float grad_scale, const float *cells);

    /* Optional: to_device on a copy engine that waits only for after (an
     * event recorded earlier with event_record: the last use of what dst
     * held; NULL: nothing), not for all the work queued before it; work
     * queued after the call sees the data. Returns once src may be reused,
     * as to_device does (for a pinned src: when the copy has read it).
     * With two destinations used in turn, the next batch's copy overlaps
     * the current step. NULL: the caller uses to_device. */
    int (*to_device_after)(dl_backend *be, void *dst, const void *src, size_t bytes,
                           dl_event *after);

    /* --- optional: input gradients written, not added ------------------
     * The same as act_backward, batchnorm_backward and conv_backward_data,
     * but dx is OVERWRITTEN (what it held is never read; dgamma, dbeta
     * still accumulate). A container whose dx has no other writer calls
     * these and saves a pass that zeroes dx and the read of dx in the
     * adding op. The values equal the adding op's into a zeroed dx (where
     * that gives +0, this may give -0). NULL: the container zeroes dx and
     * calls the adding op. */
    int (*act_backward_set)(dl_backend *be, dl_act kind, float *dx, const float *x, const float *y,
                            const float *dy, size_t n);
    int (*batchnorm_backward_set)(dl_backend *be, int n, int c, int inner, float *dx, float *dgamma,
                                  float *dbeta, const float *dy, const float *x, const float *gamma,
                                  const float *save_mean, const float *save_invstd);
    int (*conv_backward_data_set)(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                                  const float *w, void *ws, size_t ws_bytes, dl_dtype compute);

    /* --- optional: BatchNorm -> ReLU in one op -------------------------
     * forward: y = relu(batchnorm(x)), the same values as the two ops
     * (the BatchNorm output is never written). backward: dx WRITTEN with
     * the gradient through both, dgamma/dbeta added, from dy = the
     * gradient of the ReLU's output; which elements the ReLU passed is
     * recomputed from x, gamma, beta and the saved statistics, bit for
     * bit as the forward decided it, so y is not read. NULL: the layers
     * run the two ops. */
    int (*batchnorm_relu_forward)(dl_backend *be, int training, int n, int c, int inner,
                                  float momentum, float eps, float *y, const float *x,
                                  const float *gamma, const float *beta, float *running_mean,
                                  float *running_var, float *save_mean, float *save_invstd);
    int (*batchnorm_relu_backward_set)(dl_backend *be, int n, int c, int inner, float *dx,
                                       float *dgamma, float *dbeta, const float *dy, const float *x,
                                       const float *gamma, const float *beta,
                                       const float *save_mean, const float *save_invstd);

    /* --- optional: a residual add and the ReLU after it in one op ------
     * forward: y = relu(a + b) (NaN gives 0, as relu), the sum never
     * written. backward: da and db are both WRITTEN with the gradient of
     * either addend, dy where y > 0, else 0: the same values as the
     * ReLU's act_backward_set on the sum; db may be NULL (one copy
     * wanted). NULL: the layers run add, then the ReLU. */
    int (*add_relu_forward)(dl_backend *be, float *y, const float *a, const float *b, size_t n);
    int (*add_relu_backward_set)(dl_backend *be, float *da, float *db, const float *y,
                                 const float *dy, size_t n);

    /* --- optional: activations in channel blocks ----------------------
     * A backend whose convolutions run in a blocked layout (oneDNN's
     * nChw16c) can keep the activations between them in it, so that no
     * convolution reorders its input and output (see nn.c's layout plan).
     * activation_blocks: the block, in channels (16, 8), in which it can
     * for compute; 0: never. conv_blocks: for d (x_blk, y_blk 0), bit 1
     * when x may be blocked, bit 2 when y may. The BatchNorm ops take x
     * [n, c / blk, inner, blk], c divisible by blk, otherwise as
     * batchnorm_forward / batchnorm_relu_forward (relu) and
     * batchnorm_backward (set: dx written; relu: as
     * batchnorm_relu_backward_set, beta needed); their relu argument
     * holds DL_BN_* bits: DL_BN_RELU, and DL_BN_ROUND_BF16 / _F16 to
     * write y (forward) or a written dx (backward) rounded to that type,
     * for a convolution that reads it so (dl_conv_desc.rounded). The
     * pooling ops
     * (pool_*, relu_maxpool_*, adaptive_avgpool_* to 1x1) take x and y
     * in blocks where dl_pool_desc.blk says so, when activation_blocks
     * is non-zero. */
    int (*activation_blocks)(dl_backend *be, dl_dtype compute);
    int (*conv_blocks)(dl_backend *be, const dl_conv_desc *d, dl_dtype compute);
    int (*batchnorm_blocked_forward)(dl_backend *be, int blk, int relu, int training, int n, int c,
                                     int inner, float momentum, float eps, float *y, const float *x,
                                     const float *gamma, const float *beta, float *running_mean,
                                     float *running_var, float *save_mean, float *save_invstd);
    int (*batchnorm_blocked_backward)(dl_backend *be, int blk, int relu, int set, int n, int c,
                                      int inner, float *dx, float *dgamma, float *dbeta,
                                      const float *dy, const float *x, const float *gamma,
                                      const float *beta, const float *save_mean,
                                      const float *save_invstd);
    /* Activations [n, c, hw] between the two layouts, for a layer whose
     * input comes in blocks of blk channels and whose output is NCHW
     * (Flatten): blocks_to_plain writes dst [n, c, hw] from the blocked
     * src; plain_to_blocks writes the blocked dst from src [n, c, hw], or
     * adds into it (add). c divisible by blk. */
    int (*blocks_to_plain)(dl_backend *be, int blk, int n, int c, size_t hw, float *dst,
                           const float *src);
    int (*plain_to_blocks)(dl_backend *be, int blk, int add, int n, int c, size_t hw, float *dst,
                           const float *src);

    /* --- optional: an update that also writes the low-precision copy ---
     * sgd_update / adam_update, and in the same pass w_lp[0..n) = the
     * updated w rounded to lp (DL_BF16 or DL_F16), the same bits as cast
     * gives, stored as dl_backend_operand_type(be, lp) says (f32 where lp
     * is emulated): the copy a bf16/f16 pass multiplies with is never a
     * second pass over the weights. NULL: the caller casts after the
     * update. */
    int (*sgd_update_lowp)(dl_backend *be, size_t n, float *w, float *g, float *m, float lr,
                           float momentum, float wd, int nesterov, float grad_scale, void *w_lp,
                           dl_dtype lp);
    int (*adam_update_lowp)(dl_backend *be, size_t n, float *w, float *g, float *m, float *v,
                            float lr, float beta1, float beta2, float eps, float wd, int decoupled,
                            long step, float grad_scale, void *w_lp, dl_dtype lp);

    /* --- optional: both gradients of a convolution in one op -----------
     * conv_backward_filter (dw and db, which may be NULL, added into) and
     * then conv_backward_data (dx added into, or written where set, as
     * conv_backward_data_set does), the same values in one call, so that
     * the backend can read (and round) each part of dy once for both.
     * dx NULL: the filter's alone. NULL: the layer makes the calls. */
    int (*conv_backward)(dl_backend *be, const dl_conv_desc *d, float *dw, float *db, float *dx,
                         int set, const float *dy, const float *x, const float *w, void *ws,
                         size_t ws_bytes, dl_dtype compute);

    /* --- optional: an activation written rounded -----------------------
     * act_forward with y rounded to round (DL_BF16 or DL_F16) in the same
     * pass, for a convolution that reads it so (dl_conv_desc.rounded).
     * Asked only for ReLU, GELU and SiLU, whose act_backward must then
     * read x alone. NULL: not offered. */
    int (*act_forward_round)(dl_backend *be, dl_act kind, float *y, const float *x, size_t n,
                             dl_dtype round);
} dl_backend_ops;

/* A backend instance: the op table plus its private context. */
struct dl_backend {
    const dl_backend_ops *ops;
    void *ctx;
    int threads;           /* worker threads (CPU) */
    char description[128]; /* "cpu: 2 threads, OpenBLAS 0.3.21, AVX-512 BF16" */
    int lowp;              /* DL_LOWP_* bits: the low precision the device computes natively */
};

/* dl_backend.lowp: KNOWN once the backend filled it; BF16 and F16 when the
 * device has arithmetic (dot products) for them, otherwise they are
 * emulated (converted to fp32 around fp32 kernels: slower than fp32). */
#define DL_LOWP_KNOWN 1
#define DL_LOWP_BF16 2
#define DL_LOWP_F16 4

/* The type product operands of a pass computing in `compute` are stored
 * in on be: compute itself where be has arithmetic for it (or f32 is the
 * compute type, or be does not say); f32 holding values rounded to
 * compute where it is emulated, so gemm runs on them as they are instead
 * of widening both operands for every product (the same values, the same
 * sums). The low-precision copy of the weights is kept in this type. */
dl_dtype dl_backend_operand_type(const dl_backend *be, dl_dtype compute);

/* The process-wide CPU backend (created on first use with `threads`
 * workers, 0 = number of cores; later calls ignore the argument). */
dl_backend *dl_backend_cpu(int threads);

/* A CPU backend of its own, with its own pool of `threads` workers (0:
 * $DLBENCH_THREADS, else the number of cores; at most DL_CPU_MAX_THREADS):
 * the same kernels as dl_backend_cpu, another instance, so a training can
 * be moved between two CPU backends (parity checks against another thread
 * count, tests of the device switch). NULL and dl_error() on failure.
 * Destroy it with dl_backend_cpu_destroy once nothing lives on it. */
#define DL_CPU_MAX_THREADS 1024
dl_backend *dl_backend_cpu_create(int threads);
/* Releases a backend from dl_backend_cpu_create; NULL and the process-wide
 * instance are ignored. */
void dl_backend_cpu_destroy(dl_backend *be);

/* Opens the CUDA backend module (dlbench-cuda.so next to the executable,
 * or $DLBENCH_CUDA_MODULE), searching for the CUDA libraries it needs
 * where the loader does not look ($CUDNN_HOME, pip wheels: see
 * backend.c). On failure returns NULL and writes why (no module built, a
 * file that did not load and dlerror's reason, no driver, no device, API
 * mismatch) into why. */
dl_backend *dl_backend_cuda(char *why, size_t why_size);

/* The devices a running training may move to, by name: handed to the
 * trainer (dl_trainer_set_devices) by the layer that links the backends,
 * so engine/train names none of them. by_name is dl_backend_by_name;
 * cpu_create/cpu_destroy make and release a private CPU backend ("cpu:T"
 * in a parity check). dl_devices_builtin (engine/cpu/cpu_device.c) is this
 * build's table. */
typedef struct dl_devices {
    dl_backend *(*by_name)(const char *name, char *why, size_t why_size);
    dl_backend *(*cpu_create)(int threads);
    void (*cpu_destroy)(dl_backend *be);
} dl_devices;
extern const dl_devices dl_devices_builtin;

/* "cpu", "cuda" or "auto" (the GPU when available, else the CPU); on
 * failure NULL, the reason in why and dl_error(). Defined in
 * engine/cpu/cpu_device.c, which alone names both backends. */
dl_backend *dl_backend_by_name(const char *name, char *why, size_t why_size);

/* Symbol a CUDA module exports: fills *out and returns DL_OK, or returns an
 * error with the reason in dl_error_message(). */
typedef int (*dl_backend_module_open_fn)(int api_version, dl_backend **out);
#define DL_BACKEND_MODULE_SYMBOL "dl_cuda_backend_open"
/* The module also exports this: the loader hands it dl_error, so a module
 * loaded into a binary linked without -rdynamic still reports errors. */
typedef int (*dl_error_fn)(int code, const char *fmt, ...);
typedef void (*dl_backend_module_set_error_fn)(dl_error_fn fn);
#define DL_BACKEND_MODULE_SET_ERROR_SYMBOL "dl_cuda_backend_set_error"

#endif
