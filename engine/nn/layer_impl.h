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

/* The parameters at float offset off as a product operand: the f32 values,
 * or their low-precision copy when the pass computes in bf16/f16. */
const void *dl_layer_weights(const dl_pass *p, size_t off);

/* An f32 activation x of count values as a product operand: x itself, or
 * its copy cast to the pass's compute type at byte offset lp of the
 * activation arena (*out). Returns DL_OK or the backend's error. */
int dl_layer_operand(const dl_pass *p, const float *x, size_t count, size_t lp, const void **out);

#endif
