/* layer_impl.h - what the leaf layers' files share: allocation, shape errors, product operands
 *
 * Internal to engine/nn: the files that implement layers (layers.c,
 * attention.c) include it; nothing outside engine/nn does.
 */
#ifndef DL_LAYER_IMPL_H
#define DL_LAYER_IMPL_H

#include <stddef.h>

#include "engine/nn/nn.h"

#define OPS(p) ((p)->be->ops)

/* A zeroed layer of size bytes (its own struct, dl_layer first) with table
 * vt; NULL and dl_error() when out of memory. */
void *dl_layer_new(size_t size, const dl_layer_vt *vt);

/* DL_ESHAPE: "<layer> expects <expected>, got per-sample input [..]". */
int dl_layer_shape_error(const dl_layer *l, const dl_shape *in, const char *expected);

/* The parameters at float offset off as a product operand of type
 * p->operand: the f32 values, or their low-precision copy when the pass
 * computes in bf16/f16. */
const void *dl_layer_weights(const dl_pass *p, size_t off);

/* Bytes a layer reserves per element for an operand copy: enough for any
 * backend's operand type (f32 where it emulates), as the activation plan
 * does not change with the backend or the precision. */
#define DL_LAYER_OPERAND_BYTES 4

/* An f32 activation x of count values as a product operand of type
 * p->operand: x itself, or its copy in the pass's compute precision at
 * byte offset lp of the activation arena (*out; cast to bf16/f16, or
 * rounded to it in f32 where the backend emulates it). Returns DL_OK or
 * the backend's error. */
int dl_layer_operand(const dl_pass *p, const float *x, size_t count, size_t lp, const void **out);

/* Residual -> ReLU in one pass (nn.c, for the ReLU's fused slots):
 * whether res is a Residual the pass's backend can run so (DL_FUSE_ADD,
 * else 0); its forward writing y = relu(block(x) + shortcut(x)) without
 * writing the sum; its backward from dy, the gradient of the ReLU's
 * output y, writing dx (adding into it with add; dx NULL: not computed),
 * with mid (as big as y) as scratch. */
int dl_residual_relu_fuses(const dl_layer *res, const dl_pass *p);
int dl_residual_relu_forward(dl_layer *res, dl_pass *p, const float *x, float *y);
int dl_residual_relu_backward(dl_layer *res, dl_pass *p, const float *x, const float *y,
                              const float *dy, float *dx, float *mid, int add);

#endif
