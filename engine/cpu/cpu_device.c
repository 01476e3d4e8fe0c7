/* cpu_device.c - a backend by the name a script or a command gives: "cpu", "cuda" or "auto"
 *
 * Here, not in engine/core, because it is the one place that names both the
 * built-in CPU backend and the CUDA module core loads: core stays free of
 * backends, and the layers above pick a device through this function.
 */
#include <stdio.h>
#include <string.h>

#include "engine/core/backend.h"
#include "engine/base/error.h"

static void put_why(char *why, size_t size, const char *msg)
{
    if (why && size)
        snprintf(why, size, "%s", msg);
}

dl_backend *dl_backend_by_name(const char *name, char *why, size_t why_size)
{
    if (!name || strcmp(name, "auto") == 0) {
        /* the GPU when there is one; why says why not otherwise */
        dl_backend *be = dl_backend_cuda(why, why_size);
        return be ? be : dl_backend_cpu(0);
    }
    if (strcmp(name, "cpu") == 0) {
        put_why(why, why_size, "");
        return dl_backend_cpu(0);
    }
    if (strcmp(name, "cuda") == 0)
        return dl_backend_cuda(why, why_size);
    char msg[256];
    snprintf(msg, sizeof msg, "unknown device \"%.100s\" (valid: cpu, cuda, auto)", name);
    put_why(why, why_size, msg);
    dl_error(DL_EINVAL, "%s", msg);
    return NULL;
}

const dl_devices dl_devices_builtin = {
    .by_name = dl_backend_by_name,
    .cpu_create = dl_backend_cpu_create,
    .cpu_destroy = dl_backend_cpu_destroy,
};
