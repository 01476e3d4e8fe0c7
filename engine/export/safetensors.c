/* safetensors.c - a model's parameters and buffers as a Hugging Face safetensors file */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/base/error.h"
#include "engine/base/fsutil.h"
#include "engine/export/export.h"
#include "engine/export/export_impl.h"

/* One tensor of the file: its name, shape, bytes and where they come from. */
typedef struct st_tensor {
    char name[160];
    dl_shape shape;
    const void *data; /* NULL: an I64 zero (num_batches_tracked) */
    size_t bytes;
    int i64;
} st_tensor;

typedef struct st_list {
    st_tensor *t;
    int n, cap;
} st_list;

static st_tensor *st_add(st_list *l)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 32;
        st_tensor *t = realloc(l->t, (size_t)cap * sizeof *t);
        if (!t)
            return NULL;
        l->t = t;
        l->cap = cap;
    }
    memset(&l->t[l->n], 0, sizeof l->t[0]);
    return &l->t[l->n++];
}

static int add_tensor(st_list *l, dl_model *m, const dl_layer *layer, const char *name,
                      const dl_shape *shape, const float *data, dl_export_names names)
{
    st_tensor *t = st_add(l);
    if (!t)
        return dl_error(DL_ENOMEM, "out of memory");
    DL_TRY(dl_export_tensor_name(m, layer, name, names, t->name, sizeof t->name));
    t->shape = *shape;
    t->data = data;
    t->bytes = (size_t)dl_shape_numel(shape) * sizeof(float);
    return DL_OK;
}

/* Every parameter, then every buffer (BatchNorm's num_batches_tracked after
 * its running_var under torch names). */
static int collect(st_list *l, dl_model *m, const dl_model_state *s, dl_export_names names)
{
    for (int i = 0; i < dl_model_num_params(m); i++) {
        const dl_param *p = dl_model_param(m, i);
        DL_TRY(add_tensor(l, m, p->layer, p->name, &p->shape, s->params + p->offset, names));
    }
    for (int i = 0; i < dl_model_num_buffers(m); i++) {
        const dl_buffer *b = dl_model_buffer(m, i);
        DL_TRY(add_tensor(l, m, b->layer, b->name, &b->shape, s->buffers + b->offset, names));
        size_t n = strlen(b->name);
        if (names != DL_EXPORT_NAMES_TORCH || n < 12 || strcmp(b->name + n - 12, ".running_var"))
            continue;
        char nbt[96];
        snprintf(nbt, sizeof nbt, "%s.num_batches_tracked", b->layer->name);
        dl_shape scalar = {0, {0}};
        DL_TRY(add_tensor(l, m, b->layer, nbt, &scalar, NULL, names));
        l->t[l->n - 1].bytes = 8;
        l->t[l->n - 1].i64 = 1;
    }
    return DL_OK;
}

/* The JSON header: each tensor's dtype, shape and byte range, then the
 * metadata. Returns the printed text (free it) or NULL. */
static char *header_json(const st_list *l, const dl_export_options *o)
{
    cJSON *h = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    for (int i = 0; o && i < o->nmeta; i++)
        cJSON_AddStringToObject(meta, o->meta[i][0], o->meta[i][1]);
    size_t off = 0;
    for (int i = 0; i < l->n; i++) {
        const st_tensor *t = &l->t[i];
        cJSON *e = cJSON_AddObjectToObject(h, t->name);
        cJSON_AddStringToObject(e, "dtype", t->i64 ? "I64" : "F32");
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t->shape.ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape.dim[d]));
        cJSON *range = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(range, cJSON_CreateNumber((double)off));
        off += t->bytes;
        cJSON_AddItemToArray(range, cJSON_CreateNumber((double)off));
    }
    char *text = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    return text;
}

/* [u64 header length][header, space-padded to 8 bytes][tensors]. */
static int write_file(const char *path, const st_list *l, const char *header)
{
    size_t hn = strlen(header), padded = (hn + 7) / 8 * 8, data = 0;
    for (int i = 0; i < l->n; i++)
        data += l->t[i].bytes;
    size_t total = 8 + padded + data;
    unsigned char *buf = malloc(total);
    if (!buf)
        return dl_error(DL_ENOMEM, "out of memory writing %s", path);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, header, hn);
    memset(buf + 8 + hn, ' ', padded - hn);
    unsigned char *p = buf + 8 + padded;
    for (int i = 0; i < l->n; i++) {
        if (l->t[i].data)
            dl_export_put_le32(p, l->t[i].data, l->t[i].bytes / 4);
        else
            memset(p, 0, l->t[i].bytes);
        p += l->t[i].bytes;
    }
    int rc = dl_fs_write_atomic(path, buf, total);
    free(buf);
    return rc;
}

int dl_export_safetensors(dl_model *m, const char *path, const dl_export_options *o)
{
    dl_model_state s;
    DL_TRY(dl_export_host_state(m, &s));
    st_list l = {0};
    int rc = collect(&l, m, &s, o ? o->names : DL_EXPORT_NAMES_TORCH);
    char *header = rc == DL_OK ? header_json(&l, o) : NULL;
    if (rc == DL_OK && !header)
        rc = dl_error(DL_ENOMEM, "out of memory writing %s", path);
    if (rc == DL_OK)
        rc = write_file(path, &l, header);
    free(header);
    free(l.t);
    return rc;
}
