/* error.h - engine status codes and the thread-local last-error message */
#ifndef DL_ERROR_H
#define DL_ERROR_H

#include <stdio.h>
#include <stdlib.h>

enum {
    DL_OK = 0,
    DL_ERR = -1,         /* generic failure, see dl_error_message() */
    DL_ENOMEM = -2,      /* host or device allocation failed */
    DL_EINVAL = -3,      /* bad argument or bad input (exit status 2 upstream) */
    DL_EIO = -4,         /* file could not be read or written */
    DL_ESHAPE = -5,      /* shapes that do not fit */
    DL_ENODEV = -6,      /* device or backend unavailable */
    DL_ENONFINITE = -7,  /* NaN or Inf met where it must not be */
    DL_EUNSUPPORTED = -8 /* operation not implemented by this backend */
};

/* Records a printf-style message as this thread's last error and returns
 * code, so callers can write `return dl_error(DL_EINVAL, "...")`. */
int dl_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The last message recorded on this thread ("" when none). Valid until the
 * next dl_error() on the same thread. */
const char *dl_error_message(void);

/* Clears this thread's last error. */
void dl_error_clear(void);

/* Short name of a status code ("invalid input", "out of memory", ...). */
const char *dl_error_name(int code);

/* Programmer errors only: never for bad input. */
#define DL_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Propagates a negative status code. */
#define DL_TRY(expr)                                                                               \
    do {                                                                                           \
        int dl_try_rc_ = (expr);                                                                   \
        if (dl_try_rc_ < 0)                                                                        \
            return dl_try_rc_;                                                                     \
    } while (0)

#endif
