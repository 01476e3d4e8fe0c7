/* export_impl.h - what the exporters share: the model's host state, little-endian copies
 *
 * Internal to engine/export.
 */
#ifndef DL_EXPORT_IMPL_H
#define DL_EXPORT_IMPL_H

#include <stddef.h>

#include "engine/nn/nn.h"

/* m's state with host pointers: DL_EINVAL unless the model's arena is
 * allocated on the CPU backend (as scripting/run_model.c opens a run). */
int dl_export_host_state(dl_model *m, dl_model_state *s);

/* Copies n 32-bit values (floats) from src to dst as little-endian bytes. */
void dl_export_put_le32(void *dst, const void *src, size_t n);

#endif
