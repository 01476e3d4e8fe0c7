/* export_impl.c - helpers the exporters share (engine/export/export_impl.h) */
#include "engine/export/export_impl.h"

#include <stdint.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/core/backend.h"

int dl_export_host_state(dl_model *m, dl_model_state *s)
{
    dl_backend *be = dl_model_backend(m);
    if (!be || be->ops->device != DL_DEVICE_CPU)
        return dl_error(DL_EINVAL, "export: the model's state must be on the CPU backend");
    dl_model_get_state(m, s);
    if (!s->params && s->count)
        return dl_error(DL_EINVAL, "export: the model has no state yet");
    return DL_OK;
}

void dl_export_put_le32(void *dst, const void *src, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(dst, src, n * 4);
#else
    const uint32_t *s = src;
    unsigned char *d = dst;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++)
            d[4 * i + k] = (unsigned char)(s[i] >> (8 * k));
#endif
}
