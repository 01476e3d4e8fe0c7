/* export.h - a model's parameters and graph in formats other tools read: safetensors and ONNX
 *
 * Both exporters take a model whose state is on the CPU backend (as
 * scripting/run_model.c opens a run) and write one file atomically: a
 * reader sees the whole file or none, and on error nothing is left at the
 * path. Tensors are named as the engine names them ("Linear2.weight") or
 * as the equivalent torch.nn.Sequential's state_dict() would
 * ("2.weight", see dl_export_torch_name).
 */
#ifndef DL_EXPORT_H
#define DL_EXPORT_H

#include <stddef.h>

#include "engine/nn/nn.h"

typedef enum { DL_EXPORT_NAMES_TORCH, DL_EXPORT_NAMES_DLBENCH } dl_export_names;

/* The ONNX opset the graphs are written for (LayerNormalization is an op
 * from 17; Debian's python3-onnx 1.12 knows up to 17). */
#define DL_EXPORT_ONNX_OPSET 17

typedef struct dl_export_options {
    dl_export_names names;
    /* key/value string pairs for the file's metadata (safetensors'
     * __metadata__, ONNX's metadata_props), nmeta of them; may be NULL */
    const char *const (*meta)[2];
    int nmeta;
} dl_export_options;

/* The name of layer l's parameter or buffer `engine_name` ("Conv2d3.weight")
 * under names: the engine's own, or the torch one: the layer's path from
 * the root, each Sequential child its index, a Residual's block "block" and
 * its shortcut "shortcut", joined with '.', then the tensor's own name
 * ("1.block.0.weight"; a root that is not a container: "weight"). DL_EINVAL
 * when the name does not fit in size. */
int dl_export_tensor_name(const dl_model *m, const dl_layer *l, const char *engine_name,
                          dl_export_names names, char *out, size_t size);

/* Writes m's parameters and buffers as a safetensors file at path: an
 * 8-byte little-endian header length, a JSON header (dtype F32, shape,
 * data_offsets per tensor, __metadata__; padded with spaces to 8 bytes),
 * then the raw little-endian tensors. Under torch names each BatchNorm also
 * gets its num_batches_tracked (I64, shape [], 0) as state_dict() has it.
 * Errors: DL_EINVAL (a name too long), DL_EIO naming path. */
int dl_export_safetensors(dl_model *m, const char *path, const dl_export_options *o);

/* Writes m as an ONNX model at path (opset DL_EXPORT_ONNX_OPSET): one graph
 * input "input" [batch, sample...] (int64 token ids when the model starts
 * with an Embedding, else float), one output "logits" [batch, out...], the
 * batch dimension symbolic, parameters as initializers, BatchNorm in its
 * evaluation form and Dropout as the identity. A layer ONNX cannot express
 * (or a kind this exporter does not know) is DL_EUNSUPPORTED naming it;
 * DL_EIO naming path when the file cannot be written. */
int dl_export_onnx(dl_model *m, const char *path, const dl_export_options *o);

#endif
