/* tensor.h - dtypes, refcounted backend storage and tensors that point into it */
#ifndef DL_TENSOR_H
#define DL_TENSOR_H

#include <stddef.h>
#include <stdint.h>

typedef struct dl_backend dl_backend;

typedef enum { DL_F32, DL_BF16, DL_F16, DL_U8, DL_I32, DL_DTYPE_COUNT } dl_dtype;

/* Bytes per element. */
size_t dl_dtype_size(dl_dtype t);
/* "f32", "bf16", ...; dl_dtype_parse returns -1 for an unknown name. */
const char *dl_dtype_name(dl_dtype t);
int dl_dtype_parse(const char *name);

#define DL_MAX_DIMS 4

/* A per-sample or batch shape (row-major, up to 4 dimensions). */
typedef struct dl_shape {
    int ndim;
    int64_t dim[DL_MAX_DIMS];
} dl_shape;

int64_t dl_shape_numel(const dl_shape *s);
/* Formats "[1, 28, 28]" into buf; returns buf. */
char *dl_shape_format(const dl_shape *s, char *buf, size_t size);
dl_shape dl_shape_make(int ndim, const int64_t *dim);

/* Memory owned by one backend. Moving storage to another backend keeps the
 * struct (and every tensor pointing into it) valid: only be and ptr change. */
typedef struct dl_storage {
    dl_backend *be;
    void *ptr;
    size_t bytes;
    int refs;
} dl_storage;

/* Allocates bytes on be (zeroed). Returns NULL and sets the last error. */
dl_storage *dl_storage_create(dl_backend *be, size_t bytes);
void dl_storage_retain(dl_storage *s);
/* Drops a reference; frees the memory with the last one. Accepts NULL. */
void dl_storage_release(dl_storage *s);
/* Moves the contents to backend to (one copy through the host when neither
 * side is the CPU), frees the old memory, re-points s. On error s is
 * unchanged and still valid on its old backend. */
int dl_storage_move(dl_storage *s, dl_backend *to);
/* dl_storage_move to a storage of `bytes` on to (to may be the same
 * backend): the first min(bytes, old size) bytes are kept, the rest is
 * undefined. */
int dl_storage_move_resize(dl_storage *s, dl_backend *to, size_t bytes);

/* A tensor: a typed, shaped window into a storage at a byte offset. */
typedef struct dl_tensor {
    dl_storage *st;
    size_t offset;
    dl_dtype dtype;
    dl_shape shape;
} dl_tensor;

/* Creates a tensor with fresh zeroed storage on be. */
int dl_tensor_create(dl_tensor *t, dl_backend *be, dl_dtype dtype, const dl_shape *shape);
/* Releases the tensor's reference to its storage. Accepts a zeroed tensor. */
void dl_tensor_done(dl_tensor *t);
static inline void *dl_tensor_data(const dl_tensor *t) { return (char *)t->st->ptr + t->offset; }
static inline int64_t dl_tensor_numel(const dl_tensor *t) { return dl_shape_numel(&t->shape); }
size_t dl_tensor_bytes(const dl_tensor *t);

#endif
