/* tensor.c - dtypes, storage lifetime and moves between backends */
#include "engine/core/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/backend.h"
#include "engine/base/error.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[DL_DTYPE_COUNT] = {
    [DL_F32] = {"f32", 4}, [DL_BF16] = {"bf16", 2}, [DL_F16] = {"f16", 2},
    [DL_U8] = {"u8", 1},   [DL_I32] = {"i32", 4},
};

size_t dl_dtype_size(dl_dtype t) { return (unsigned)t < DL_DTYPE_COUNT ? dtypes[t].size : 0; }

const char *dl_dtype_name(dl_dtype t)
{
    return (unsigned)t < DL_DTYPE_COUNT ? dtypes[t].name : "?";
}

int dl_dtype_parse(const char *name)
{
    for (int i = 0; i < DL_DTYPE_COUNT; i++)
        if (strcmp(name, dtypes[i].name) == 0)
            return i;
    return -1;
}

int64_t dl_shape_numel(const dl_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++)
        n *= s->dim[i];
    return n;
}

char *dl_shape_format(const dl_shape *s, char *buf, size_t size)
{
    size_t used = 0;
    used += (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < s->ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "",
                                 (long long)s->dim[i]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
    return buf;
}

dl_shape dl_shape_make(int ndim, const int64_t *dim)
{
    dl_shape s = {0};
    DL_ASSERT(ndim >= 0 && ndim <= DL_MAX_DIMS);
    s.ndim = ndim;
    for (int i = 0; i < ndim; i++)
        s.dim[i] = dim[i];
    return s;
}

dl_storage *dl_storage_create(dl_backend *be, size_t bytes)
{
    dl_storage *s = calloc(1, sizeof *s);
    if (!s) {
        dl_error(DL_ENOMEM, "out of host memory for a storage header");
        return NULL;
    }
    s->be = be;
    s->bytes = bytes;
    s->refs = 1;
    s->ptr = be->ops->alloc(be, bytes ? bytes : 1);
    if (!s->ptr) {
        free(s);
        return NULL;
    }
    if (bytes && be->ops->memset0(be, s->ptr, bytes) < 0) {
        be->ops->free(be, s->ptr);
        free(s);
        return NULL;
    }
    return s;
}

void dl_storage_retain(dl_storage *s) { s->refs++; }

void dl_storage_release(dl_storage *s)
{
    if (!s || --s->refs > 0)
        return;
    s->be->ops->free(s->be, s->ptr);
    free(s);
}

int dl_storage_move(dl_storage *s, dl_backend *to)
{
    return dl_storage_move_resize(s, to, s->bytes);
}

int dl_storage_move_resize(dl_storage *s, dl_backend *to, size_t bytes)
{
    dl_backend *from = s->be;
    if (from == to && bytes == s->bytes)
        return DL_OK;
    void *dst = to->ops->alloc(to, bytes ? bytes : 1);
    if (!dst)
        return DL_ENOMEM;
    int rc = DL_OK;
    size_t keep = bytes < s->bytes ? bytes : s->bytes;
    if (from->ops->device == DL_DEVICE_CPU) {
        rc = to->ops->to_device(to, dst, s->ptr, keep);
    } else if (to->ops->device == DL_DEVICE_CPU) {
        rc = from->ops->to_host(from, dst, s->ptr, keep);
    } else {
        void *tmp = malloc(keep ? keep : 1);
        if (!tmp)
            rc = dl_error(DL_ENOMEM, "no host memory to stage %zu bytes", keep);
        if (rc == DL_OK)
            rc = from->ops->to_host(from, tmp, s->ptr, keep);
        if (rc == DL_OK)
            rc = to->ops->to_device(to, dst, tmp, keep);
        free(tmp);
    }
    if (rc == DL_OK)
        rc = to->ops->sync(to);
    if (rc < 0) {
        to->ops->free(to, dst);
        return rc;
    }
    from->ops->free(from, s->ptr);
    s->ptr = dst;
    s->be = to;
    s->bytes = bytes;
    return DL_OK;
}

int dl_tensor_create(dl_tensor *t, dl_backend *be, dl_dtype dtype, const dl_shape *shape)
{
    memset(t, 0, sizeof *t);
    t->dtype = dtype;
    t->shape = *shape;
    t->st = dl_storage_create(be, dl_tensor_bytes(t));
    return t->st ? DL_OK : DL_ENOMEM;
}

void dl_tensor_done(dl_tensor *t)
{
    dl_storage_release(t->st);
    t->st = NULL;
}

size_t dl_tensor_bytes(const dl_tensor *t)
{
    return (size_t)dl_shape_numel(&t->shape) * dl_dtype_size(t->dtype);
}
