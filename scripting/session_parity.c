/* session_parity.c - a prepared session's parity check against another device */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/core/backend.h"
#include "scripting/session_internal.h"

int dl_session_parity_device_parse(const char *text, int *threads)
{
    *threads = 0;
    if (!strcmp(text, "cpu"))
        return 0;
    if (!strcmp(text, "cuda"))
        return 1;
    if (strncmp(text, "cpu:", 4))
        return -1;
    char *end;
    errno = 0;
    long n = strtol(text + 4, &end, 10);
    if (!text[4] || *end || errno || n < 1 || n > DL_CPU_MAX_THREADS)
        return -1;
    *threads = (int)n;
    return 2;
}

int dl_session_check_parity(dl_session *s, const char *device, int steps, dl_parity_report *r,
                            char *label, size_t label_size)
{
    memset(r, 0, sizeof *r);
    dl_backend *home = dl_trainer_backend(s->trainer);
    if (!device) /* the other kind of device */
        device = home->ops->device == DL_DEVICE_CPU ? "cuda" : "cpu";
    snprintf(label, label_size, "%s", device);
    int threads;
    int kind = dl_session_parity_device_parse(device, &threads);
    dl_backend *other = NULL;
    char why[512] = "";
    if (kind < 0)
        return dl_error(DL_EINVAL,
                        "--parity-device: unknown device '%s' (expected cpu, cpu:THREADS or cuda)",
                        device);
    if (kind == 0) {
        other = dl_backend_cpu(0);
    } else if (kind == 1) {
        other = dl_backend_cuda(why, sizeof why);
        if (!other)
            return dl_error(DL_ENODEV, "cannot check parity against cuda: %s", why);
    } else {
        dl_backend_cpu_destroy(s->parity_be);
        s->parity_be = other = dl_backend_cpu_create(threads);
        if (!other)
            return dl_error(DL_ENOMEM, "cannot check parity against %s: %s", device,
                            dl_error_message());
    }
    return dl_trainer_check_parity(s->trainer, other, steps, r);
}
