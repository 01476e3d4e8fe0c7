/* error.c - thread-local last-error message for engine calls */
#include "engine/base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_message[1024];

int dl_error(int code, const char *fmt, ...)
{
    /* through a copy: the arguments may include dl_error_message() itself
     * ("%s: %s", where, dl_error_message()) */
    char buf[sizeof last_message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    memcpy(last_message, buf, sizeof buf);
    return code;
}

const char *dl_error_message(void) { return last_message; }

void dl_error_clear(void) { last_message[0] = '\0'; }

const char *dl_error_name(int code)
{
    switch (code) {
    case DL_OK: return "ok";
    case DL_ENOMEM: return "out of memory";
    case DL_EINVAL: return "invalid input";
    case DL_EIO: return "i/o error";
    case DL_ESHAPE: return "shape mismatch";
    case DL_ENODEV: return "device unavailable";
    case DL_ENONFINITE: return "non-finite value";
    case DL_EUNSUPPORTED: return "unsupported";
    default: return "error";
    }
}
