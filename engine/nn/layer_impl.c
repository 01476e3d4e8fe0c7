/* layer_impl.c - helpers the leaf layers share (engine/nn/layer_impl.h) */
#include "engine/nn/layer_impl.h"

#include <stdint.h>
#include <stdlib.h>

#include "engine/base/error.h"

void *dl_layer_new(size_t size, const dl_layer_vt *vt)
{
    dl_layer *l = calloc(1, size);
    if (!l) {
        dl_error(DL_ENOMEM, "out of memory creating a layer");
        return NULL;
    }
    l->vt = vt;
    return l;
}

int dl_layer_shape_error(const dl_layer *l, const dl_shape *in, const char *expected)
{
    char d[96], s[64];
    dl_layer_describe(l, d, sizeof d);
    return dl_error(DL_ESHAPE, "%s expects %s, got per-sample input %s", d, expected,
                    dl_shape_format(in, s, sizeof s));
}

const void *dl_layer_weights(const dl_pass *p, size_t off)
{
    if (p->compute == DL_F32)
        return p->params + off;
    if (p->operand == DL_F32)
        return (const float *)p->params_lp + off;
    return (const uint16_t *)p->params_lp + off;
}

int dl_layer_operand(const dl_pass *p, const float *x, size_t count, size_t lp, const void **out)
{
    *out = x;
    if (p->compute == DL_F32)
        return DL_OK;
    void *dst = p->act + lp;
    if (p->operand == DL_F32)
        DL_TRY(OPS(p)->round_through(p->be, dst, x, p->compute, count));
    else
        DL_TRY(OPS(p)->cast(p->be, dst, p->compute, x, DL_F32, count));
    *out = dst;
    return DL_OK;
}
